/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libsdp.so: the libc socket calls, interposed.
 *
 * Each wrapper does three things and no more: hand the call straight to
 * libc when it cannot concern the switch (libsdp's own code is running on
 * this thread, or the fd is not one the switch made), otherwise call the
 * switch (ops/), and turn its answer into libc's convention: a negative
 * errno becomes -1 with errno set, OPS_PASS means "libc, as called".
 *
 * The fortified variants (__read_chk, __recv_chk, ...) that programs built
 * with _FORTIFY_SOURCE call instead of read/recv/poll are wrapped too, and
 * fcntl64, which programs built with 64-bit file offsets call.
 *
 * The calls that make descriptors are wrapped for libsdp's sake as well:
 * a descriptor made while libsdp's own code runs on the thread (the
 * engine's, or that of libfabric, librdmacm and libibverbs under it) is
 * moved out of the numbers the application would be given (own(),
 * common/fdspace.h).  The application's own calls pass straight through.
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "fdspace.h"
#include "internal.h"
#include "sys.h"
#include "ops.h"
#include "sdp.h"

#define EXPORT __attribute__((visibility("default")))

/* The preload is here (common/sys.c): its value says which libsdp. */
EXPORT const char libsdp_preload[] = PACKAGE_STRING;

/* sys/socket.h passes addresses as transparent unions under _GNU_SOURCE. */
#if defined(__USE_GNU) && !defined(__cplusplus)
#define SA(a) ((a).__sockaddr__)
#else
#define SA(a) (a)
#endif

extern void __chk_fail(void) __attribute__((noreturn));
/* The fortified entry points (glibc declares them only for its inlines). */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       __SOCKADDR_ARG addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		const sigset_t *sigmask, size_t fdslen);

/* libc, directly: nothing of the switch's is involved. */
static inline bool bypass(void)
{
	if (__builtin_expect(!sys.close, 0))
		sys_resolve();
	return libsdp_internal != 0;
}

static inline bool fd_bypass(int fd)
{
	return bypass() || !ops_fd_is_ours(fd);
}

/*
 * errno as the call found it (KEEP_ERRNO, first thing in a wrapper that
 * answers for libc).  Linux leaves errno alone on success; the switch's
 * work under a call (a non-blocking read that found nothing, a lookup
 * that failed, and the calls of rdma-core that come back through these
 * wrappers) must not show through it.  So a call that succeeds (ret())
 * or is handed on to libc (errno_back()) puts it back.  A local, not a
 * per-thread copy: a wrapper entered under another must not overwrite
 * what the outer one keeps.
 */
#define KEEP_ERRNO const int errno_in_ = errno
#define errno_back() (errno = errno_in_)

static inline long ret_kept(long r, int errno_in)
{
	errno = r < 0 ? (int)-r : errno_in;
	return r < 0 ? -1 : r;
}
#define ret(r) ret_kept((r), errno_in_)

/* --- libsdp's own descriptors ------------------------------------------------------- */

/* The call makes a descriptor (or fails, -1) for libsdp: into its region,
 * close-on-exec, in a window (common/fdspace.h). */
#define own(call) ((int)ret(FDSPACE_MAKE(call)))

/* The same for the two ends of a pipe or socket pair; r is the call's,
 * made in a window that this closes. */
static int own_pair_made(int r, int fds[2])
{
	KEEP_ERRNO;
	if (r < 0) {
		fdspace_unmade();
		return r;
	}
	int a = fdspace_take(fds[0]);

	if (a < 0) {
		sys.close(fds[1]);
		fdspace_unmade();
		return (int)ret(a);
	}
	int b = fdspace_made(fds[1]);

	if (b < 0) {
		fdspace_close(a);
		return (int)ret(b);
	}
	fds[0] = a;
	fds[1] = b;
	return 0;
}

#define own_pair(call, fds) (fdspace_making(), own_pair_made((call), (fds)))

/* A pair made for the application since mark (common/fdspace.h). */
static int app_pair(int r, int fds[2], unsigned long mark)
{
	if (r == 0) {
		fds[0] = fdspace_settle(fds[0], mark, 0);
		fds[1] = fdspace_settle(fds[1], mark, 0);
	}
	return r;
}

/* --- sockets ------------------------------------------------------------------------ */

EXPORT int socket(int domain, int type, int protocol)
{
	KEEP_ERRNO;
	/* libsdp's own sockets (a transport's) never leak into an exec'd
	 * program, even when the library that makes them forgets. */
	if (bypass())
		return own(sys.socket(domain, type | SOCK_CLOEXEC, protocol));
	ops_init();
	return (int)ret(ops_socket(domain, type, protocol));
}

EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	unsigned long mark = fdspace_app_mark();

	/* Never SDP: a pair is local by definition. */
	if (bypass())
		return own_pair(sys.socketpair(domain, type | SOCK_CLOEXEC, protocol, sv), sv);
	return app_pair(sys.socketpair(domain, type, protocol, sv), sv, mark);
}

EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.bind(fd, SA(addr), len);
	return (int)ret(ops_bind(fd, SA(addr), len));
}

EXPORT int listen(int fd, int backlog)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.listen(fd, backlog);
	return (int)ret(ops_listen(fd, backlog));
}

EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.accept4(fd, SA(addr), len, SOCK_CLOEXEC));
	if (!ops_fd_is_ours(fd))
		return FDSPACE_APP(sys.accept(fd, SA(addr), len));
	return (int)ret(ops_accept4(fd, SA(addr), len, 0));
}

EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.accept4(fd, SA(addr), len, flags | SOCK_CLOEXEC));
	if (!ops_fd_is_ours(fd))
		return FDSPACE_APP(sys.accept4(fd, SA(addr), len, flags));
	return (int)ret(ops_accept4(fd, SA(addr), len, flags));
}

EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.connect(fd, SA(addr), len);
	return (int)ret(ops_connect(fd, SA(addr), len));
}

#define PASS_OR(call, native_call)              \
	do {                                    \
		long r_ = (call);               \
		if (r_ == OPS_PASS) {           \
			errno_back();           \
			return native_call;     \
		}                               \
		return ret(r_);                 \
	} while (0)

/*
 * An fd that is not ours got from libc an answer a TCP socket would not
 * give: a Unix name, or EOPNOTSUPP/ENOPROTOOPT for an option.  It may be
 * an SDP connection relayed by another process and inherited across exec
 * (ops/relay.c): true when it is, and ours from now on; errno is kept
 * when it is not.  Never on the way of a call that TCP would answer.
 */
static bool relay_adopted(int fd)
{
	int e = errno;

	ops_init();
	if (ops_relay_adopt(fd))
		return true;
	errno = e;
	return false;
}

static bool unix_name(int r, const struct sockaddr *addr, const socklen_t *len)
{
	return r == 0 && addr && len && *len >= sizeof(sa_family_t) && addr->sa_family == AF_UNIX;
}

static bool option_refused(int r)
{
	return r < 0 && (errno == EOPNOTSUPP || errno == ENOPROTOOPT);
}

EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.getsockname(fd, SA(addr), len);
	if (!ops_fd_is_ours(fd)) {
		socklen_t asked = len ? *len : 0;
		int r = sys.getsockname(fd, SA(addr), len);

		if (!unix_name(r, SA(addr), len) || !relay_adopted(fd))
			return r;
		*len = asked;	/* asked again, of the relayed socket */
	}
	PASS_OR(ops_getsockname(fd, SA(addr), len), sys.getsockname(fd, SA(addr), len));
}

EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.getpeername(fd, SA(addr), len);
	if (!ops_fd_is_ours(fd)) {
		socklen_t asked = len ? *len : 0;
		int r = sys.getpeername(fd, SA(addr), len);

		if (!unix_name(r, SA(addr), len) || !relay_adopted(fd))
			return r;
		*len = asked;	/* asked again, of the relayed socket */
	}
	PASS_OR(ops_getpeername(fd, SA(addr), len), sys.getpeername(fd, SA(addr), len));
}

EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.getsockopt(fd, level, name, val, len);
	if (!ops_fd_is_ours(fd)) {
		socklen_t asked = len ? *len : 0;
		int r = sys.getsockopt(fd, level, name, val, len);
		/* A Unix socket's own answers to what programs ask a TCP one. */
		bool unix_answer = r == 0 && level == SOL_SOCKET && val && len && *len >= sizeof(int) &&
				   ((name == SO_DOMAIN && *(int *)val == AF_UNIX) ||
				    (name == SO_PROTOCOL && *(int *)val == 0));

		if (!(unix_answer || option_refused(r)) || !relay_adopted(fd))
			return r;
		if (len)
			*len = asked;
	}
	PASS_OR(ops_getsockopt(fd, level, name, val, len),
		sys.getsockopt(fd, level, name, val, len));
}

EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	KEEP_ERRNO;
	/* Conversion also takes TCP sockets the preload has not seen. */
	if (!bypass() && level == SOL_SDP &&
	    (name == SDP_CONVERT_CONNECT || name == SDP_CONVERT_ACCEPT))
		return (int)ret(ops_convert(fd, name, val, len));
	if (bypass())
		return sys.setsockopt(fd, level, name, val, len);
	if (!ops_fd_is_ours(fd)) {
		int r = sys.setsockopt(fd, level, name, val, len);

		if (!option_refused(r) || !relay_adopted(fd))
			return r;
	}
	PASS_OR(ops_setsockopt(fd, level, name, val, len),
		sys.setsockopt(fd, level, name, val, len));
}

EXPORT int shutdown(int fd, int how)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.shutdown(fd, how);
	PASS_OR(ops_shutdown(fd, how), sys.shutdown(fd, how));
}

/* --- fds ------------------------------------------------------------------------------ */

EXPORT int close(int fd)
{
	KEEP_ERRNO;
	/* One of libsdp's: closed by the library that made it, or by an
	 * application that closes numbers it never opened. */
	fdspace_forget(fd);
	if (bypass() || (!ops_fd_is_ours(fd) && !ops_fd_is_emulated_epoll(fd)))
		return sys.close(fd);
	return (int)ret(ops_close(fd));
}

EXPORT int dup(int fd)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.dup(fd));
	if (!ops_fd_is_ours(fd))
		return FDSPACE_APP(sys.dup(fd));
	return (int)ret(ops_dup(fd, -1, false));
}

/* dup2/dup3 onto one of our fds closes it: the table must hear of it.
 * The application may name one of libsdp's numbers: the kernel replaces
 * it, and it is the application's from then on. */
EXPORT int dup2(int oldfd, int newfd)
{
	KEEP_ERRNO;
	if (!libsdp_internal)
		fdspace_forget(newfd);
	if (bypass() || (!ops_fd_is_ours(oldfd) && !ops_fd_is_ours(newfd) &&
			 !ops_fd_is_emulated_epoll(newfd)))
		return sys.dup2(oldfd, newfd);
	return (int)ret(ops_dup3(oldfd, newfd, -1));
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
	KEEP_ERRNO;
	if (!libsdp_internal)
		fdspace_forget(newfd);
	if (bypass() || (!ops_fd_is_ours(oldfd) && !ops_fd_is_ours(newfd) &&
			 !ops_fd_is_emulated_epoll(newfd)))
		return sys.dup3(oldfd, newfd, flags);
	return (int)ret(ops_dup3(oldfd, newfd, flags));
}

/* The third argument is an int, a long or a pointer, depending on cmd;
 * all travel in the same register on the ABIs Linux runs on. */
static int fcntl_common(int (*libc)(int, int, ...), int fd, int cmd, long arg)
{
	KEEP_ERRNO;
	/* fdspace_take() leaves a number at or above its floor where it is,
	 * so the result still honours the minimum asked for. */
	if (bypass() && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && arg < FDSPACE_MAX)
		return own(libc(fd, F_DUPFD_CLOEXEC, arg));
	if (fd_bypass(fd)) {
		if (!libsdp_internal && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && arg >= 0 &&
		    arg < INT_MAX) {
			unsigned long mark = fdspace_app_mark();

			return fdspace_settle(libc(fd, cmd, arg), mark, (int)arg);
		}
		return libc(fd, cmd, arg);
	}
	PASS_OR(ops_fcntl(fd, cmd, arg), libc(fd, cmd, arg));
}

EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;

	va_start(ap, cmd);
	long arg = va_arg(ap, long);

	va_end(ap);
	if (!sys.fcntl)
		sys_resolve();
	return fcntl_common(sys.fcntl, fd, cmd, arg);
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;

	va_start(ap, cmd);
	long arg = va_arg(ap, long);

	va_end(ap);
	if (!sys.fcntl64)
		sys_resolve();
	return fcntl_common(sys.fcntl64, fd, cmd, arg);
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	KEEP_ERRNO;
	va_list ap;

	va_start(ap, req);
	void *arg = va_arg(ap, void *);

	va_end(ap);
	if (fd_bypass(fd))
		return sys.ioctl(fd, req, arg);
	PASS_OR(ops_ioctl(fd, req, arg), sys.ioctl(fd, req, arg));
}

/* closefrom(3) in a daemon, close_range() before exec: the application's
 * descriptors go, libsdp's stay (ops_close_range()). */
EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.close_range(first, last, flags);
	return (int)ret(ops_close_range(first, last, flags));
}

EXPORT void closefrom(int lowfd)
{
	if (!bypass() && ops_close_range(lowfd < 0 ? 0 : (unsigned)lowfd, ~0U, 0) == 0)
		return;
	/* libc's, which ends the process if it cannot close everything. */
	sys.closefrom(lowfd);
}

/* Descriptors only libsdp's libraries keep: made for libsdp, they go to
 * its region; the application's pass through. */
EXPORT int epoll_create(int size)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.epoll_create(size));
	int fd = FDSPACE_APP(sys.epoll_create(size));

	if (fd >= 0) {
		ops_epoll_created(fd);
		errno_back();
	}
	return fd;
}

EXPORT int epoll_create1(int flags)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.epoll_create1(flags | EPOLL_CLOEXEC));
	int fd = FDSPACE_APP(sys.epoll_create1(flags));

	if (fd >= 0) {
		ops_epoll_created(fd);
		errno_back();
	}
	return fd;
}

EXPORT int eventfd(unsigned int count, int flags)
{
	KEEP_ERRNO;
	if (bypass())
		return own(sys.eventfd(count, flags | EFD_CLOEXEC));
	return FDSPACE_APP(sys.eventfd(count, flags));
}

EXPORT int pipe(int fds[2])
{
	unsigned long mark = fdspace_app_mark();

	if (bypass())
		return own_pair(sys.pipe2(fds, O_CLOEXEC), fds);
	return app_pair(sys.pipe(fds), fds, mark);
}

EXPORT int pipe2(int fds[2], int flags)
{
	unsigned long mark = fdspace_app_mark();

	if (bypass())
		return own_pair(sys.pipe2(fds, flags | O_CLOEXEC), fds);
	return app_pair(sys.pipe2(fds, flags), fds, mark);
}

/*
 * Of the files libsdp's libraries open, only device files stay open
 * (rdma-core's /dev/infiniband/uverbsN and rdma_cm); the rest (sysfs,
 * /proc, sdp.conf) are read and closed at once, some through stdio,
 * whose fclose() does not come back through close() above to forget
 * them.  So only those are moved.
 */
static bool own_path(const char *path)
{
	return path && !strncmp(path, "/dev/", 5);
}

static mode_t open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

#define OPEN_WRAPPER(name, ...)                                                      \
	do {                                                                         \
		KEEP_ERRNO;                                                          \
		va_list ap;                                                          \
		va_start(ap, flags);                                                 \
		mode_t mode = open_mode(flags, ap);                                  \
		va_end(ap);                                                          \
		if (!sys.name)                                                    \
			sys_resolve();                                            \
		if (libsdp_internal && own_path(path))                                  \
			return own(sys.name(__VA_ARGS__, flags | O_CLOEXEC, mode)); \
		if (libsdp_internal) /* never waits for its own window */          \
			return sys.name(__VA_ARGS__, flags, mode);                 \
		return FDSPACE_APP(sys.name(__VA_ARGS__, flags, mode));           \
	} while (0)

EXPORT int open(const char *path, int flags, ...)
{
	OPEN_WRAPPER(open, path);
}

EXPORT int open64(const char *path, int flags, ...)
{
	OPEN_WRAPPER(open64, path);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	OPEN_WRAPPER(openat, dirfd, path);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	OPEN_WRAPPER(openat64, dirfd, path);
}

/* --- data ------------------------------------------------------------------------------ */

#define IOV1(buf, len) (&(struct iovec){ .iov_base = (void *)(buf), .iov_len = (len) })

EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.read(fd, buf, len);
	PASS_OR(ops_recvv(fd, IOV1(buf, len), 1, 0), sys.read(fd, buf, len));
}

EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return read(fd, buf, len);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.readv(fd, iov, iovcnt);
	PASS_OR(ops_recvv(fd, iov, iovcnt, 0), sys.readv(fd, iov, iovcnt));
}

EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.write(fd, buf, len);
	PASS_OR(ops_sendv(fd, IOV1(buf, len), 1, 0), sys.write(fd, buf, len));
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.writev(fd, iov, iovcnt);
	PASS_OR(ops_sendv(fd, iov, iovcnt, 0), sys.writev(fd, iov, iovcnt));
}

EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.send(fd, buf, len, flags);
	PASS_OR(ops_sendv(fd, IOV1(buf, len), 1, flags), sys.send(fd, buf, len, flags));
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, __CONST_SOCKADDR_ARG addr,
		      socklen_t alen)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.sendto(fd, buf, len, flags, SA(addr), alen);
	/* A connected stream socket ignores the address, as Linux TCP does. */
	PASS_OR(ops_sendv(fd, IOV1(buf, len), 1, flags),
		sys.sendto(fd, buf, len, flags, SA(addr), alen));
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.sendmsg(fd, msg, flags);
	PASS_OR(ops_sendmsg(fd, msg, flags), sys.sendmsg(fd, msg, flags));
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.recv(fd, buf, len, flags);
	PASS_OR(ops_recvv(fd, IOV1(buf, len), 1, flags), sys.recv(fd, buf, len, flags));
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__chk_fail();
	return recv(fd, buf, len, flags);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, __SOCKADDR_ARG addr,
			socklen_t *alen)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.recvfrom(fd, buf, len, flags, SA(addr), alen);
	long r = ops_recvv(fd, IOV1(buf, len), 1, flags);

	if (r == OPS_PASS) {
		errno_back();
		return sys.recvfrom(fd, buf, len, flags, SA(addr), alen);
	}
	if (r >= 0 && SA(addr) && alen)
		*alen = 0;	/* TCP gives no source address */
	return ret(r);
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
			      __SOCKADDR_ARG addr, socklen_t *alen)
{
	if (len > buflen)
		__chk_fail();
	return recvfrom(fd, buf, len, flags, addr, alen);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.recvmsg(fd, msg, flags);
	PASS_OR(ops_recvmsg(fd, msg, flags), sys.recvmsg(fd, msg, flags));
}

EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.sendmmsg(fd, vec, vlen, flags);
	unsigned int i;

	for (i = 0; i < vlen; i++) {
		long r = ops_sendmsg(fd, &vec[i].msg_hdr, flags);

		if (r == OPS_PASS) {
			errno_back();
			return sys.sendmmsg(fd, vec, vlen, flags);
		}
		if (r < 0) {
			if (i)
				break;
			return (int)ret(r);
		}
		vec[i].msg_len = (unsigned int)r;
	}
	return (int)i;
}

EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		    struct timespec *timeout)
{
	KEEP_ERRNO;
	if (fd_bypass(fd))
		return sys.recvmmsg(fd, vec, vlen, flags, timeout);
	unsigned int i;

	for (i = 0; i < vlen; i++) {
		/* After the first message, take only what is there. */
		int f = i ? (flags & ~MSG_WAITFORONE) | MSG_DONTWAIT : flags & ~MSG_WAITFORONE;
		long r = ops_recvmsg(fd, &vec[i].msg_hdr, f);

		if (r == OPS_PASS) {
			errno_back();
			return sys.recvmmsg(fd, vec, vlen, flags, timeout);
		}
		if (r <= 0) {
			if (i)
				break;
			if (r == 0) {
				vec[0].msg_len = 0;
				return 1;
			}
			return (int)ret(r);
		}
		vec[i].msg_len = (unsigned int)r;
	}
	return (int)i;
}

EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	KEEP_ERRNO;
	if (bypass() || (!ops_fd_is_ours(out_fd) && !ops_fd_is_ours(in_fd)))
		return sys.sendfile(out_fd, in_fd, offset, count);
	PASS_OR(ops_sendfile(out_fd, in_fd, offset, count),
		sys.sendfile(out_fd, in_fd, offset, count));
}

EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	KEEP_ERRNO;
	if (bypass() || (!ops_fd_is_ours(out_fd) && !ops_fd_is_ours(in_fd)))
		return sys.sendfile64(out_fd, in_fd, offset, count);
	_Static_assert(sizeof(off_t) == sizeof(off64_t), "64-bit off_t");
	PASS_OR(ops_sendfile(out_fd, in_fd, (off_t *)offset, count),
		sys.sendfile64(out_fd, in_fd, offset, count));
}

EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
		      unsigned int flags)
{
	KEEP_ERRNO;
	if (bypass() || (!ops_fd_is_ours(fd_in) && !ops_fd_is_ours(fd_out)))
		return sys.splice(fd_in, off_in, fd_out, off_out, len, flags);
	PASS_OR(ops_splice(fd_in, off_in, fd_out, off_out, len, flags),
		sys.splice(fd_in, off_in, fd_out, off_out, len, flags));
}

/* --- waiting ---------------------------------------------------------------------------- */

EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.poll(fds, nfds, timeout);
	struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000L };

	PASS_OR(ops_ppoll(fds, nfds, timeout < 0 ? NULL : &ts, NULL),
		sys.poll(fds, nfds, timeout));
}

EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return poll(fds, nfds, timeout);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		 const sigset_t *sigmask)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.ppoll(fds, nfds, timeout, sigmask);
	PASS_OR(ops_ppoll(fds, nfds, timeout, sigmask), sys.ppoll(fds, nfds, timeout, sigmask));
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		       const sigset_t *sigmask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return ppoll(fds, nfds, timeout, sigmask);
}

EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.select(nfds, rd, wr, ex, tv);
	if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000))
		return sys.select(nfds, rd, wr, ex, tv);	/* libc's EINVAL */
	struct timespec ts, *tsp = NULL;

	if (tv) {
		ts.tv_sec = tv->tv_sec;
		ts.tv_nsec = (long)tv->tv_usec * 1000L;
		tsp = &ts;
	}
	long r = ops_pselect(nfds, rd, wr, ex, tsp, NULL);

	if (r == OPS_PASS) {
		errno_back();
		return sys.select(nfds, rd, wr, ex, tv);
	}
	if (tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return (int)ret(r);
}

EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *timeout,
		   const sigset_t *sigmask)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.pselect(nfds, rd, wr, ex, timeout, sigmask);
	struct timespec ts, *tsp = NULL;

	if (timeout) {
		ts = *timeout;	/* pselect leaves the caller's timeout alone */
		tsp = &ts;
	}
	PASS_OR(ops_pselect(nfds, rd, wr, ex, tsp, sigmask),
		sys.pselect(nfds, rd, wr, ex, timeout, sigmask));
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	KEEP_ERRNO;
	if (bypass())
		return sys.epoll_ctl(epfd, op, fd, ev);
	if (op == EPOLL_CTL_ADD) {
		ops_epoll_added(fd);
		errno_back();
	}
	if (!ops_fd_is_ours(fd) && !ops_fd_is_emulated_epoll(epfd))
		return sys.epoll_ctl(epfd, op, fd, ev);
	PASS_OR(ops_epoll_ctl(epfd, op, fd, ev), sys.epoll_ctl(epfd, op, fd, ev));
}

EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	KEEP_ERRNO;
	if (bypass() || !ops_fd_is_emulated_epoll(epfd))
		return sys.epoll_wait(epfd, events, maxevents, timeout);
	PASS_OR(ops_epoll_pwait(epfd, events, maxevents, timeout, NULL),
		sys.epoll_wait(epfd, events, maxevents, timeout));
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		       const sigset_t *sigmask)
{
	KEEP_ERRNO;
	if (bypass() || !ops_fd_is_emulated_epoll(epfd))
		return sys.epoll_pwait(epfd, events, maxevents, timeout, sigmask);
	PASS_OR(ops_epoll_pwait(epfd, events, maxevents, timeout, sigmask),
		sys.epoll_pwait(epfd, events, maxevents, timeout, sigmask));
}

/* --- exec ------------------------------------------------------------------------------ */

/* Every form: glibc's own calls between them are not interposed. */
extern char **environ;

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	if (!bypass())
		ops_exec_prepare(false);
	return sys.execve(path, argv, envp);
}

EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	if (!bypass())
		ops_exec_prepare(false);
	return sys.execvpe(file, argv, envp);
}

EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	if (!bypass())
		ops_exec_prepare(false);
	return sys.fexecve(fd, argv, envp);
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
		    int flags)
{
	if (!bypass())
		ops_exec_prepare(false);
	return sys.execveat(dirfd, path, argv, envp, flags);
}

/* execl's arguments: how many up to the NULL (arg included). */
static size_t execl_count(const char *arg, va_list *ap)
{
	size_t n = 1;

	if (!arg)
		return 0;
	while (va_arg(*ap, char *))
		n++;
	return n;
}

/* argv[0..n-1] from arg and ap, argv[n] = NULL; ap is then past the NULL. */
static void execl_fill(char **argv, size_t n, const char *arg, va_list *ap)
{
	argv[0] = (char *)arg;
	for (size_t i = 1; i <= n; i++)
		argv[i] = i < n ? va_arg(*ap, char *) : NULL;
	if (n)
		(void)va_arg(*ap, char *);	/* the NULL */
}

EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;

	va_start(ap, arg);
	size_t n = execl_count(arg, &ap);

	va_end(ap);
	char *argv[n + 1];

	va_start(ap, arg);
	execl_fill(argv, n, arg, &ap);
	va_end(ap);
	return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;

	va_start(ap, arg);
	size_t n = execl_count(arg, &ap);

	va_end(ap);
	char *argv[n + 1];

	va_start(ap, arg);
	execl_fill(argv, n, arg, &ap);
	va_end(ap);
	return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;

	va_start(ap, arg);
	size_t n = execl_count(arg, &ap);

	va_end(ap);
	char *argv[n + 1];

	va_start(ap, arg);
	execl_fill(argv, n, arg, &ap);
	/* After the NULL that ends the arguments, the environment. */
	char *const *envp = va_arg(ap, char *const *);

	va_end(ap);
	return execve(path, argv, envp);
}

/* _exit() skips exit()'s handlers, and with them libsdp's wait for the
 * connections the program closed (sdp_exit_quick()): a fork server's
 * child that closes its connection and calls _exit() would otherwise
 * take the tail of what it sent with it. */
EXPORT void _exit(int status)
{
	if (!bypass())
		ops_exit_quick();
	sys._exit(status);
	__builtin_unreachable();
}

EXPORT void _Exit(int status)
{
	if (!bypass())
		ops_exit_quick();
	sys._Exit(status);
	__builtin_unreachable();
}

EXPORT int system(const char *command)
{
	if (command && !bypass())
		ops_exec_prepare(true);
	return sys.system(command);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!bypass())
		ops_exec_prepare(true);
	return sys.posix_spawn(pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!bypass())
		ops_exec_prepare(true);
	return sys.posix_spawnp(pid, file, fa, attr, argv, envp);
}
