/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The system-call layer: the libc entry points libsdp itself calls, found
 * past every wrapper libsdp puts in front of them.
 *
 * In libsdp.so (the preload) socket(), close(), read(), poll()... are the
 * preload's own wrappers, exported to the whole process: a plain call
 * from libsdp's code would land in them.  So every socket, descriptor,
 * poll and epoll call libsdp's own code makes goes through this table
 * (sys.close(fd), ...), which holds libc's functions:
 *   - in the preload, the next definition after libsdp.so (dlsym
 *     RTLD_NEXT): libc's, or a sanitizer runtime's interceptor preloaded
 *     after libsdp (TSan, see test/integration/lib.sh);
 *   - in libsdp-engine.so, what the program's own calls get (RTLD_DEFAULT:
 *     a sanitizer's interceptors, then libc), unless the preload is in the
 *     process too, when it is the next definition after the engine
 *     library (which the preload, loaded first, is not).
 * The preload's wrappers pass the application's calls to libc through the
 * same table.  make check runs a lint (test/lint_syscalls.sh) that fails
 * if an object of the library calls one of these functions directly.
 *
 * The per-thread flag libsdp_internal (internal.h) is left for the code of
 * other libraries that libsdp calls (librdmacm, libibverbs), whose own
 * calls reach the preload's wrappers: the transports raise it around them.
 *
 * The table is filled by a constructor, before any of libsdp's code runs;
 * sys_resolve() may run again at any time, from any thread (the same
 * values are stored, atomically).  A symbol libc lacks is left pointing
 * at a function that fails with ENOSYS.
 */
#ifndef SDP_COMMON_SYS_H
#define SDP_COMMON_SYS_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* X(name, return type, parameters) for every call the preload wraps. */
#define SYS_CALLS(X)                                                                  \
	X(socket, int, (int, int, int))                                                  \
	X(socketpair, int, (int, int, int, int *))                                       \
	X(bind, int, (int, const struct sockaddr *, socklen_t))                          \
	X(listen, int, (int, int))                                                       \
	X(accept, int, (int, struct sockaddr *, socklen_t *))                            \
	X(accept4, int, (int, struct sockaddr *, socklen_t *, int))                      \
	X(connect, int, (int, const struct sockaddr *, socklen_t))                       \
	X(getsockname, int, (int, struct sockaddr *, socklen_t *))                       \
	X(getpeername, int, (int, struct sockaddr *, socklen_t *))                       \
	X(getsockopt, int, (int, int, int, void *, socklen_t *))                         \
	X(setsockopt, int, (int, int, int, const void *, socklen_t))                     \
	X(shutdown, int, (int, int))                                                     \
	X(close, int, (int))                                                             \
	X(dup, int, (int))                                                               \
	X(dup2, int, (int, int))                                                         \
	X(dup3, int, (int, int, int))                                                    \
	X(fcntl, int, (int, int, ...))                                                   \
	X(ioctl, int, (int, unsigned long, ...))                                         \
	X(read, ssize_t, (int, void *, size_t))                                          \
	X(readv, ssize_t, (int, const struct iovec *, int))                              \
	X(write, ssize_t, (int, const void *, size_t))                                   \
	X(writev, ssize_t, (int, const struct iovec *, int))                             \
	X(send, ssize_t, (int, const void *, size_t, int))                               \
	X(sendto, ssize_t, (int, const void *, size_t, int, const struct sockaddr *,     \
			    socklen_t))                                                  \
	X(sendmsg, ssize_t, (int, const struct msghdr *, int))                           \
	X(recv, ssize_t, (int, void *, size_t, int))                                     \
	X(recvfrom, ssize_t, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
	X(recvmsg, ssize_t, (int, struct msghdr *, int))                                 \
	X(sendfile, ssize_t, (int, int, off_t *, size_t))                                \
	X(sendfile64, ssize_t, (int, int, off64_t *, size_t))                            \
	X(splice, ssize_t, (int, loff_t *, int, loff_t *, size_t, unsigned int))         \
	X(poll, int, (struct pollfd *, nfds_t, int))                                     \
	X(ppoll, int, (struct pollfd *, nfds_t, const struct timespec *,                 \
		       const sigset_t *))                                                \
	X(select, int, (int, fd_set *, fd_set *, fd_set *, struct timeval *))            \
	X(pselect, int, (int, fd_set *, fd_set *, fd_set *, const struct timespec *,     \
			 const sigset_t *))                                              \
	X(epoll_create, int, (int))                                                      \
	X(epoll_create1, int, (int))                                                     \
	X(epoll_ctl, int, (int, int, int, struct epoll_event *))                         \
	X(epoll_wait, int, (int, struct epoll_event *, int, int))                        \
	X(epoll_pwait, int, (int, struct epoll_event *, int, int, const sigset_t *))     \
	X(fcntl64, int, (int, int, ...))                                                 \
	X(__read_chk, ssize_t, (int, void *, size_t, size_t))                            \
	X(__recv_chk, ssize_t, (int, void *, size_t, size_t, int))                       \
	X(__recvfrom_chk, ssize_t, (int, void *, size_t, size_t, int, struct sockaddr *, \
				    socklen_t *))                                        \
	X(__poll_chk, int, (struct pollfd *, nfds_t, int, size_t))                       \
	X(__ppoll_chk, int, (struct pollfd *, nfds_t, const struct timespec *,           \
			     const sigset_t *, size_t))                                  \
	X(recvmmsg, int, (int, struct mmsghdr *, unsigned int, int, struct timespec *))  \
	X(sendmmsg, int, (int, struct mmsghdr *, unsigned int, int))                     \
	X(eventfd, int, (unsigned int, int))                                             \
	X(pipe, int, (int *))                                                            \
	X(pipe2, int, (int *, int))                                                      \
	X(open, int, (const char *, int, ...))                                           \
	X(open64, int, (const char *, int, ...))                                         \
	X(openat, int, (int, const char *, int, ...))                                    \
	X(openat64, int, (int, const char *, int, ...))                                  \
	X(close_range, int, (unsigned int, unsigned int, int))                           \
	X(closefrom, void, (int))                                                        \
	X(execve, int, (const char *, char *const[], char *const[]))                     \
	X(execvpe, int, (const char *, char *const[], char *const[]))                    \
	X(fexecve, int, (int, char *const[], char *const[]))                             \
	X(execveat, int, (int, const char *, char *const[], char *const[], int))          \
	X(system, int, (const char *))                                                   \
	X(_exit, void, (int))                                                            \
	X(_Exit, void, (int))                                                            \
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *,   \
			     const posix_spawnattr_t *, char *const[], char *const[]))   \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *,  \
			      const posix_spawnattr_t *, char *const[], char *const[]))

struct sys_calls {
#define SYS_FIELD(name, ret, args) ret(*name) args;
	SYS_CALLS(SYS_FIELD)
#undef SYS_FIELD
};

extern struct sys_calls sys;

/* Resolve every pointer; true when all were found. */
bool sys_resolve(void);

/* A libc call's result as 0/value or a negative errno. */
#define SYS_RET(call)                                  \
	({                                             \
		__typeof__(call) sys_ret_ = (call);    \
		sys_ret_ < 0 ? -(__typeof__(call))errno : sys_ret_; \
	})

#endif
