/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Control calls: close, close_range and the dup family (which keep the fd
 * table in step with the kernel's), fcntl, ioctl, socket options, names,
 * shutdown.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fdspace.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"

/* --- close and dup --------------------------------------------------------------- */

int ops_close(int fd)
{
	if (ops_fd_is_emulated_epoll(fd))
		ops_epoll_closing(fd);
	struct ops_sock *s = ops_fd_remove(fd);

	/* Under the socket's lock: a fork's relay (relay.c), which puts its
	 * Unix socket at every fd naming s, must not find fd in the table
	 * after it was closed, nor miss it before. */
	if (s)
		pthread_mutex_lock(&s->lock);
	int r = sys.close(fd) < 0 ? -errno : 0;

	/* Like the kernel, the socket ends with the last fd naming it;
	 * calls in flight hold their own references. */
	if (s) {
		pthread_mutex_unlock(&s->lock);
		if (s->hold_ino)
			ops_hold_closed(s);
		ops_sock_put(s);
	}
	return r;
}

/* Lock the sockets an fd change touches (either may be NULL or both the
 * same), in address order (relay.c says why). */
static void lock_two(struct ops_sock *a, struct ops_sock *b)
{
	if (a && b && a != b && (uintptr_t)a > (uintptr_t)b) {
		struct ops_sock *t = a;

		a = b;
		b = t;
	}
	if (a)
		pthread_mutex_lock(&a->lock);
	if (b && b != a)
		pthread_mutex_lock(&b->lock);
}

static void unlock_two(struct ops_sock *a, struct ops_sock *b)
{
	if (a)
		pthread_mutex_unlock(&a->lock);
	if (b && b != a)
		pthread_mutex_unlock(&b->lock);
}

int ops_dup(int fd, int minfd, bool cloexec)
{
	struct ops_sock *s = ops_fd_get(fd);

	if (s)
		pthread_mutex_lock(&s->lock);
	unsigned long mark = fdspace_app_mark();
	int nfd = minfd < 0 ? sys.dup(fd)
			    : sys.fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, minfd);

	nfd = fdspace_settle(nfd, mark, minfd < 0 ? 0 : minfd);
	int r = nfd < 0 ? -errno : nfd;

	if (s) {
		if (nfd >= 0 && ops_fd_install(nfd, s) < 0) {
			sys.close(nfd);
			r = -EMFILE;
		}
		pthread_mutex_unlock(&s->lock);
		ops_sock_put(s);
	}
	return r;
}

int ops_dup3(int oldfd, int newfd, int flags)
{
	if (oldfd == newfd)
		return SYS_RET(flags < 0 ? sys.dup2(oldfd, newfd) : sys.dup3(oldfd, newfd, flags));
	struct ops_sock *s = ops_fd_get(oldfd), *prev = ops_fd_get(newfd);

	if (ops_fd_is_emulated_epoll(newfd))
		ops_epoll_closing(newfd);
	lock_two(s, prev);
	int r = flags < 0 ? sys.dup2(oldfd, newfd) : sys.dup3(oldfd, newfd, flags);
	struct ops_sock *old = NULL;

	if (r < 0) {
		r = -errno;
	} else {
		/* newfd now names oldfd's file: whatever it named is gone. */
		old = ops_fd_remove(newfd);
		if (s && ops_fd_install(newfd, s) < 0) {
			sys.close(newfd);
			r = -EMFILE;
		}
	}
	unlock_two(s, prev);
	if (old)
		ops_sock_put(old);
	if (prev)
		ops_sock_put(prev);
	if (s)
		ops_sock_put(s);
	return r;
}

/* [lo, hi] closed by the kernel, in one call where it has close_range(). */
static int close_span(unsigned lo, unsigned hi)
{
	if (sys.close_range(lo, hi, 0) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
	/* Before Linux 5.9: one by one, as far as an fd can be. */
	struct rlimit rl;
	unsigned end = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < UINT_MAX
			       ? (unsigned)rl.rlim_cur : UINT_MAX;

	for (unsigned fd = lo; fd <= hi && fd < end; fd++)
		sys.close((int)fd);
	return 0;
}

/*
 * close_range() and closefrom() close what the kernel would, and keep
 * the switch's tables right: an SDP socket in the range is closed as by
 * close() (its connection ends as a TCP one would), and libsdp's own
 * descriptors (common/fdspace.h), which the application does not know it
 * has, stay open, so that a program that closes "everything above 2"
 * keeps working over SDP.  The kernel closes the spans between them.
 */
int ops_close_range(unsigned first, unsigned last, int flags)
{
	/* Bad arguments get the kernel's answer; CLOEXEC only marks, and
	 * libsdp's descriptors have the mark already.  A vfork child must
	 * not touch the tables: they are its parent's. */
	if (first > last || (flags & ~(int)(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) ||
	    (flags & CLOSE_RANGE_CLOEXEC) || ops_in_vfork_child())
		return SYS_RET(sys.close_range(first, last, flags));
	if ((flags & CLOSE_RANGE_UNSHARE) && unshare(CLONE_FILES) < 0)
		return -errno;

	unsigned end = FDSPACE_MAX, lo = first;
	int r = 0;

	if ((unsigned)ops_fd_end() > end)
		end = (unsigned)ops_fd_end();
	if ((unsigned)ops_epoll_end() > end)
		end = (unsigned)ops_epoll_end();
	/* lo cannot wrap: end is far below UINT_MAX. */
	for (unsigned fd = first; fd <= last && fd < end; fd++) {
		bool engine = ops_fd_is_ours((int)fd) || ops_fd_is_emulated_epoll((int)fd);

		if (!engine && !fdspace_owned((int)fd))
			continue;
		if (fd > lo) {
			int e = close_span(lo, fd - 1);

			r = r ? r : e;
		}
		if (engine)
			(void)ops_close((int)fd);
		lo = fd + 1;
	}
	if (lo <= last) {
		int e = close_span(lo, last);

		r = r ? r : e;
	}
	return r;
}

/* --- fcntl and ioctl --------------------------------------------------------------- */

static void set_nonblock(struct ops_sock *s, bool on)
{
	pthread_mutex_lock(&s->lock);
	if (s->relayed)
		;	/* the relay's Unix socket holds the flag */
	else if (s->stack == OPS_STACK_BOTH)
		s->both_nonblock = on;
	else if (s->sd >= 0 && s->conn != OPS_CONN_SDP && s->conn != OPS_CONN_SDP_ONLY)
		(void)sdp_set_nonblock(s->sd, on);
	pthread_mutex_unlock(&s->lock);
}

int ops_fcntl(int fd, int cmd, long arg)
{
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		return ops_dup(fd, (int)arg, cmd == F_DUPFD_CLOEXEC);
	/* Before the table: the fd may become ours later (a dup). */
	if (cmd == F_SETFL && (arg & O_ASYNC))
		ops_sigio_async_on();

	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return OPS_PASS;
	switch (cmd) {
	case F_GETFL:
		r = SYS_RET(sys.fcntl(fd, F_GETFL));
		if (r >= 0 && s->stack == OPS_STACK_BOTH)
			r = (r & ~O_NONBLOCK) | (s->both_nonblock ? O_NONBLOCK : 0);
		break;
	case F_SETFL:
		/* A "both" listener's kernel socket stays non-blocking. */
		r = SYS_RET(sys.fcntl(fd, F_SETFL,
					    s->stack == OPS_STACK_BOTH ? arg | O_NONBLOCK : arg));
		if (r == 0)
			set_nonblock(s, arg & O_NONBLOCK);
		break;
	default:
		/* FD_CLOEXEC, F_SETOWN, F_SETSIG, leases...: the kernel socket
		 * holds them, and sigio.c raises SIGURG and SIGIO from them. */
		r = OPS_PASS;
		break;
	}
	ops_sock_put(s);
	return r;
}

int ops_ioctl(int fd, unsigned long req, void *arg)
{
	/* Whatever it sets: arg is the kernel's to check (EFAULT). */
	if (req == FIOASYNC)
		ops_sigio_async_on();

	struct ops_sock *s = ops_fd_get(fd);
	int r = OPS_PASS;

	if (!s)
		return OPS_PASS;
	if (atomic_load(&s->held))
		ops_hold_claim(fd, s);	/* its first use (relay.c) */
	bool sdp = s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited && !s->relayed;

	if (s->relayed && req == SIOCATMARK) {
		/* TCP's answer (a Unix socket has no urgent data either). */
		*(int *)arg = 0;
		ops_sock_put(s);
		return 0;
	}
	switch (req) {
	case FIONBIO:
		r = SYS_RET(sys.ioctl(fd, FIONBIO, arg));
		if (r == 0 && arg) {
			set_nonblock(s, *(int *)arg != 0);
			if (s->stack == OPS_STACK_BOTH) {
				int on = 1;

				sys.ioctl(fd, FIONBIO, &on);
			}
		}
		break;
	case FIONREAD:
		if (sdp) {
			r = sdp_nread(s->sd);
			if (r >= 0) {
				*(int *)arg = r;
				r = 0;
			}
		}
		break;
	case SIOCOUTQ:
		if (sdp) {
			r = sdp_nwrite(s->sd);
			if (r >= 0) {
				*(int *)arg = r;
				r = 0;
			}
		}
		break;
	case SIOCATMARK:
		if (sdp) {
			r = sdp_atmark(s->sd);
			if (r >= 0) {
				*(int *)arg = r;
				r = 0;
			}
		}
		break;
	default:
		break;
	}
	ops_sock_put(s);
	return r;
}

/* --- socket options ---------------------------------------------------------------- */

static void record_opt(struct ops_sock *s, int level, int name, const void *val, socklen_t len)
{
	if ((level != SOL_SOCKET && level != IPPROTO_TCP) || len > sizeof(s->opts[0].val) || !val)
		return;
	int i;

	for (i = 0; i < s->nopts; i++)
		if (s->opts[i].level == level && s->opts[i].name == name)
			break;
	if (i == OPS_MAX_OPTS)
		return;
	if (i == s->nopts)
		s->nopts++;
	s->opts[i].level = level;
	s->opts[i].name = name;
	s->opts[i].len = len;
	memcpy(s->opts[i].val, val, len);
}

int ops_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r = OPS_PASS;

	if (!s)
		return OPS_PASS;
	if (s->relayed) {
		r = ops_relayed_getsockopt(fd, s, level, name, val, len);
		ops_sock_put(s);
		return r;
	}
	if (s->hold_ino) {
		/* Since a fork, fd names a Unix socket (relay.c): what the
		 * engine does not answer is answered as for a relayed one,
		 * also while held (asking costs no move). */
		r = -ENOPROTOOPT;
		if (!atomic_load(&s->held) && s->sd >= 0)
			r = sdp_getsockopt(s->sd, level, name, val, len);
		if (r == -ENOPROTOOPT)
			r = ops_relayed_getsockopt(fd, s, level, name, val, len);
		ops_sock_put(s);
		return r;
	}
	if (level == SOL_SOCKET && name == SO_ERROR) {
		ops_connect_advance(fd, s);
		pthread_mutex_lock(&s->lock);
		int e = s->conn_error;

		s->conn_error = 0;
		pthread_mutex_unlock(&s->lock);
		if (e && val && len && *len >= sizeof(int)) {
			*(int *)val = e;
			*len = sizeof(int);
			r = 0;
		}
	}
	if (r == OPS_PASS && s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited &&
	    level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) {
		/* Linux reads a timeout back in its clock's ticks (30 ms is
		 * 32 at HZ=250): the engine's value (an accepted socket's
		 * comes from its listener), rounded by the kernel socket. */
		struct timeval tv;
		socklen_t tl = sizeof(tv);

		r = sdp_getsockopt(s->sd, level, name, &tv, &tl);
		if (r == 0)
			r = SYS_RET(sys.setsockopt(fd, level, name, &tv, tl));
		if (r == 0)
			r = SYS_RET(sys.getsockopt(fd, level, name, val, len));
	} else if (r == OPS_PASS && s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited &&
		   level == IPPROTO_TCP && name == TCP_INFO) {
		/* The kernel socket's figures, the connection's state. */
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);

		r = SYS_RET(sys.getsockopt(fd, level, name, val, len));
		if (r == 0 && val && *len >= 1 && sdp_getsockopt(s->sd, level, name, &ti, &tl) == 0)
			((struct tcp_info *)val)->tcpi_state = ti.tcpi_state;
	} else if (r == OPS_PASS && s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited) {
		r = sdp_getsockopt(s->sd, level, name, val, len);
		if (r == -ENOPROTOOPT) {
			/* Options SDP has no use for live on the kernel socket,
			 * so they read back as set (IP_TOS, SO_PRIORITY...). */
			r = SYS_RET(sys.getsockopt(fd, level, name, val, len));
		}
	}
	ops_sock_put(s);
	return r;
}

int ops_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (level == SOL_SDP && (name == SDP_CONVERT_CONNECT || name == SDP_CONVERT_ACCEPT))
		return ops_convert(fd, name, val, len);

	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return OPS_PASS;
	if (s->relayed || s->hold_ino) {
		/* A held one's value is remembered as a relayed one's; one
		 * that is ours gets it too. */
		r = ops_relayed_setsockopt(fd, s, level, name, val, len);
		pthread_mutex_lock(&s->lock);
		if (!s->relayed && !atomic_load(&s->held) && s->sd >= 0 &&
		    sdp_setsockopt(s->sd, level, name, val, len) == 0)
			r = 0;
		pthread_mutex_unlock(&s->lock);
		ops_sock_put(s);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	if (s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited) {
		r = sdp_setsockopt(s->sd, level, name, val, len);
		/* The kernel socket keeps a copy: options SDP does not know
		 * then behave as on Linux (set, read back), and the others
		 * are harmless on an unconnected socket. */
		int nr = SYS_RET(sys.setsockopt(fd, level, name, val, len));

		if (r == -ENOPROTOOPT)
			r = nr;
		if (s->conn == OPS_CONN_SDP)
			record_opt(s, level, name, val, len);	/* for a fallback's sake */
	} else {
		r = SYS_RET(sys.setsockopt(fd, level, name, val, len));
		if (r == 0 && s->stack == OPS_STACK_UNDECIDED)
			record_opt(s, level, name, val, len);
		if (r == 0 && s->stack == OPS_STACK_BOTH && s->sd >= 0)
			(void)sdp_setsockopt(s->sd, level, name, val, len);
	}
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}

/* --- names and shutdown ------------------------------------------------------------ */

int ops_getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r = OPS_PASS;

	if (!s)
		return OPS_PASS;
	if (s->state == OPS_ST_NEW) {
		/* The program sees the port bind(0) gave it: listen() may
		 * no longer move the socket to another one. */
		pthread_mutex_lock(&s->lock);
		ops_settle_any_port(fd, s);
		s->any_port = false;
		pthread_mutex_unlock(&s->lock);
	}
	/* A listener's name is the kernel socket's (both stacks share the
	 * port); a connection's is its own stack's. */
	if (s->relayed || atomic_load(&s->held))
		r = ops_relayed_name(s, false, addr, len);
	else if (s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited && s->state != OPS_ST_LISTEN &&
	    s->state != OPS_ST_NEW)
		r = sdp_getsockname(s->sd, addr, len);
	ops_sock_put(s);
	return r;
}

int ops_getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r = OPS_PASS;

	if (!s)
		return OPS_PASS;
	if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY)
		ops_connect_advance(fd, s);
	if (s->relayed || atomic_load(&s->held))
		r = ops_relayed_name(s, true, addr, len);
	else if (s->stack == OPS_STACK_SDP && s->sd >= 0 && !s->inherited && s->state != OPS_ST_NEW)
		r = sdp_getpeername(s->sd, addr, len);
	ops_sock_put(s);
	return r;
}

int ops_shutdown(int fd, int how)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r = OPS_PASS;

	if (!s)
		return OPS_PASS;
	if (atomic_load(&s->held))
		ops_hold_claim(fd, s);	/* its first use (relay.c) */
	if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY)
		ops_connect_advance(fd, s);
	if (s->inherited && s->stack == OPS_STACK_SDP) {
		r = -ENOTCONN;
	} else if (s->stack == OPS_STACK_SDP && s->sd >= 0 && s->state != OPS_ST_NEW) {
		/* Ends the stream: ordered with the data calls against a relay. */
		if (ops_io_enter(s, OPS_IO_WR)) {
			r = sdp_shutdown(s->sd, how);
			ops_io_leave(s, OPS_IO_WR);
		}
	} else if (s->stack == OPS_STACK_BOTH) {
		r = SYS_RET(sys.shutdown(fd, how));
		if (s->sd >= 0)
			(void)sdp_shutdown(s->sd, how);
	}
	ops_sock_put(s);
	return r;
}
