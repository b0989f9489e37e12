/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The native stack: libc's own socket calls, as found behind libsdp.so
 * (dlsym RTLD_NEXT).  The switch routes a socket either here or to the SDP
 * engine.  native_resolve() runs before anything else in the preload, is
 * idempotent and safe to call from any thread at any time (the pointers
 * are written atomically, all with the same values).
 */
#ifndef SDP_OPS_NATIVE_H
#define SDP_OPS_NATIVE_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* X(name, return type, parameters) for every call the preload wraps. */
#define NATIVE_CALLS(X)                                                                  \
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
	X(closefrom, void, (int))

struct native_calls {
#define NATIVE_FIELD(name, ret, args) ret(*name) args;
	NATIVE_CALLS(NATIVE_FIELD)
#undef NATIVE_FIELD
};

extern struct native_calls native;

/* Resolve every pointer; true when all were found.  A missing symbol is
 * left pointing at a function that fails with ENOSYS. */
bool native_resolve(void);

#endif
