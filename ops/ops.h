/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The Offload Protocol Switch: what the preload's wrappers call.
 *
 * Each ops_* function mirrors one libc call, takes the same arguments and
 * returns the libc result or a NEGATIVE errno (the preload turns that into
 * -1/errno in one place), or OPS_PASS: "not mine, give the call to libc
 * exactly as the application made it" (a native socket, a multi-fd wait
 * with no SDP fd in it).  The preload calls them only for fds that
 * ops_fd_is_ours() claims, except ops_socket(), close/dup and the multi-fd
 * calls (poll, select, epoll), which look at every fd themselves.
 *
 * An fd of ours is always a real kernel socket, so that fstat(), an fd
 * passed to a child, and every call we do not know about behave as on a
 * socket: for a socket that is native that kernel socket is the socket;
 * for an SDP socket it is an unconnected placeholder that keeps the fd
 * number, the file flags and any option SDP has no use for.
 */
#ifndef SDP_OPS_OPS_H
#define SDP_OPS_OPS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Not an errno: the call is the native stack's. */
#define OPS_PASS (-100000)

/* Start-up: resolve libc, read the policy.  Idempotent, thread-safe;
 * every ops_* call makes sure it ran. */
void ops_init(void);

/* Does the switch handle fd (a stream socket it made)?  Lock-free. */
bool ops_fd_is_ours(int fd);
/* Is fd an epoll fd with SDP members (ops_epoll_* must see the call)? */
bool ops_fd_is_emulated_epoll(int fd);
/* The application made the epoll fd fd. */
void ops_epoll_created(int fd);
/* fd is being added to an epoll set: if it is an epoll fd, whoever waits
 * on that set waits on fd's set too (ops/epset.c, epset_open()). */
void ops_epoll_added(int fd);

/* A candidate for the switch: AF_INET/AF_INET6 stream sockets and the SDP
 * families; ops_socket() creates whatever it is asked to otherwise. */
int ops_socket(int domain, int type, int protocol);
int ops_bind(int fd, const struct sockaddr *addr, socklen_t len);
int ops_listen(int fd, int backlog);
int ops_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
int ops_connect(int fd, const struct sockaddr *addr, socklen_t len);
int ops_getsockname(int fd, struct sockaddr *addr, socklen_t *len);
int ops_getpeername(int fd, struct sockaddr *addr, socklen_t *len);
int ops_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int ops_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
/* setsockopt(fd, SOL_SDP, SDP_CONVERT_*): fd's TCP connection converted
 * to SDP in place (ops/convert.c), also for a TCP socket the preload has
 * not seen.  0 or a negative errno, never OPS_PASS. */
int ops_convert(int fd, int name, const void *val, socklen_t len);
int ops_shutdown(int fd, int how);
/* fd is not ours, and answered a call as a Unix socket would: is it the
 * socket of an SDP connection relayed by another process (ops/relay.c),
 * inherited across exec?  If so it becomes ours (true), and every call
 * on it is answered as on the TCP connection it stands for. */
bool ops_relay_adopt(int fd);
/* The process is about to exec (spawn: to start a program in a child
 * that runs no fork handlers: system(), posix_spawn(), an exec in a vfork
 * child): each SDP connection that one of its fds without close-on-exec
 * names and that has a pair since a fork is relayed by its owner
 * (ops/relay.c), so that the new image, with or without libsdp, reads
 * and writes it as a socket.  A connection this process drives cannot
 * outlive its exec (warned). */
void ops_exec_prepare(bool spawn);
/* _exit(): let closed connections finish (sdp_exit_quick()), except in a
 * vfork child, whose parent's connections are not its own. */
void ops_exit_quick(void);

/* close/dup: also for fds that are not ours (they keep the table right
 * when a dup2 lands on one of ours). */
int ops_close(int fd);
int ops_dup(int fd, int minfd, bool cloexec);	/* dup, F_DUPFD(_CLOEXEC) */
int ops_dup3(int oldfd, int newfd, int flags);	/* dup2 (flags -1), dup3 */
/* close_range(); closefrom(fd) is close_range(fd, ~0U, 0).  libsdp's own
 * descriptors in the range stay open. */
int ops_close_range(unsigned first, unsigned last, int flags);
int ops_fcntl(int fd, int cmd, long arg);
int ops_ioctl(int fd, unsigned long req, void *arg);

ssize_t ops_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t ops_recvmsg(int fd, struct msghdr *msg, int flags);
/* read/write/send/recv and their vector forms all come down to these. */
ssize_t ops_sendv(int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t ops_recvv(int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t ops_sendfile(int out_fd, int in_fd, off_t *offset, size_t count);
ssize_t ops_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
		   unsigned int flags);

/* Multi-fd waits: OPS_PASS when no fd in the set needs the engine. */
int ops_ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
	      const sigset_t *sigmask);
int ops_pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *timeout,
		const sigset_t *sigmask);
int ops_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int ops_epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const sigset_t *sigmask);

#endif
