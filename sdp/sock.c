/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The socket-like API of the engine (include/sdp.h): socket life cycle,
 * options, and the blocking rules of Linux TCP.  The sd table is base.c's,
 * protocol work conn.c's and post.c's, waiting progress.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "fdspace.h"
#include "log.h"
#include "spin.h"
#include "sys.h"
#include "tunables.h"

#define LOGSYS "sock"

static void close_one(int sd, void *s, void *arg)
{
	(void)s;
	(void)arg;
	sdp_close(sd);
}

/*
 * Process exit: what the kernel does for TCP, close every socket the
 * application left open, gracefully, and let the connections finish
 * their teardown (progress_linger).  Only in the process that made them:
 * a forked child's copies belong to its parent.
 */
__attribute__((destructor)) static void sock_exit(void)
{
	if (!progress_started_here())
		return;
	sock_for_each(close_one, NULL);
	progress_linger();
}

void sdp_exit_quick(void)
{
	if (progress_started_here())
		progress_linger_quick();
}

/* --- helpers --------------------------------------------------------------- */

static socklen_t domain_addrlen(int domain)
{
	return domain == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Checks an address given to bind/connect the way inet(6)_bind does. */
static int check_addr(struct sdp_sock *s, const struct sockaddr *addr, socklen_t len)
{
	if (!addr)
		return -EFAULT;
	if (len < sizeof(sa_family_t))
		return -EINVAL;
	if (addr->sa_family != s->domain)
		return -EAFNOSUPPORT;
	if (len < domain_addrlen(s->domain))
		return -EINVAL;
	return 0;
}

/* ss in the socket's own family: an IPv4 address on an AF_INET6 socket
 * is v4-mapped (::ffff:a.b.c.d), as Linux reports a dual-stack
 * listener's IPv4 peers (rdma_cm gives them as AF_INET). */
static void copy_addr_out(const struct sockaddr_storage *ss, int domain,
			  struct sockaddr *addr, socklen_t *len)
{
	socklen_t full = domain_addrlen(domain);
	struct sockaddr_storage tmp = *ss;

	if (domain == AF_INET6 && ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&tmp;

		memset(&tmp, 0, sizeof(tmp));
		in6->sin6_port = in->sin_port;
		in6->sin6_addr.s6_addr[10] = 0xff;
		in6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&in6->sin6_addr.s6_addr[12], &in->sin_addr, 4);
	}
	tmp.ss_family = (sa_family_t)domain;
	if (addr && len)
		memcpy(addr, &tmp, *len < full ? *len : full);
	if (len)
		*len = full;
}

static uint64_t deadline_from(const struct timeval *tv)
{
	if (!tv->tv_sec && !tv->tv_usec)
		return 0;
	return sdp_now_ns() + (uint64_t)tv->tv_sec * 1000000000ull +
	       (uint64_t)tv->tv_usec * 1000ull;
}

/* The pending error, reported once (as sock_error() does). */
static int take_error(struct sdp_sock *s)
{
	int err = s->so_error;

	s->so_error = 0;
	return err;
}

/* --- API ------------------------------------------------------------------- */

int sdp_init(void)
{
	sdp_log_init();
	return oti_init();
}

int sdp_socket(int domain, int type, int protocol)
{
	struct sdp_sock *s;
	int ret;

	if (domain == SDP_AF_INET_SDP)
		domain = AF_INET;
	else if (domain == SDP_AF_INET6_SDP)
		domain = AF_INET6;
	if (domain != AF_INET && domain != AF_INET6)
		return -EAFNOSUPPORT;
	if (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC | 0xf))
		return -EINVAL;
	if ((type & 0xf) != SOCK_STREAM)
		return -ESOCKTNOSUPPORT;
	if (protocol != 0 && protocol != IPPROTO_TCP)
		return -EPROTONOSUPPORT;
	ret = sdp_init();
	if (ret < 0)
		return ret;
	if (ret == 0)
		return -ENODEV;
	s = sock_alloc(domain, type & SOCK_NONBLOCK, type & SOCK_CLOEXEC, true);
	if (!s)
		return errno == EMFILE || errno == ENFILE ? -errno : -ENOMEM;
	return s->sd;
}

int sdp_is_socket(int sd)
{
	struct sdp_sock *s = sock_get(sd);

	if (!s)
		return 0;
	sock_put(s);
	return 1;
}

/*
 * A transport that reaches only this host (shm) listens last: the first
 * one chooses the port of a listen(0), and it must be one that remote
 * peers can reach too.  Otherwise the registry's order stays.
 */
static void listen_order(const struct oti_ops **ts, int n)
{
	const struct oti_ops *local[SDP_MAX_LISTENERS];
	int k = 0, nl = 0;

	for (int i = 0; i < n; i++) {
		struct oti_caps caps;

		ts[i]->query_caps(&caps);
		if (caps.flags & OTI_CAP_HOST_LOCAL)
			local[nl++] = ts[i];
		else
			ts[k++] = ts[i];
	}
	for (int i = 0; i < nl; i++)
		ts[k++] = local[i];
}

/*
 * Reserve the address in the transport now, so that bind() reports
 * EADDRINUSE where Linux does and getsockname() shows the port.
 *
 * Every enabled transport that serves the address gets a listener, so that
 * a client reaches the socket over whichever transport it has (an RDMA
 * device where both ends have one, the software transport from a host
 * without).  The first (highest priority, host-local ones last) decides: its errors are bind's,
 * and its port, chosen when the application asked for port 0, is the port
 * the others listen on.  Another transport that cannot take that port is
 * left out, with a log line: the socket still listens.
 */
static int bind_locked(struct sdp_sock *s, const struct sockaddr *addr, socklen_t len)
{
	const struct oti_ops *ts[SDP_MAX_LISTENERS];
	struct sockaddr_storage name, same;
	socklen_t namelen = sizeof(name);
	struct oti_listener *l;
	int n, ret;

	unsigned flags = s->v6only && s->domain == AF_INET6 ? OTI_LISTEN_V6ONLY : 0;

	n = oti_select_all(addr, NULL, ts, SDP_MAX_LISTENERS);
	if (!n)
		return -EADDRNOTAVAIL;
	listen_order(ts, n);
	ret = ts[0]->listen(addr, len, SOMAXCONN, flags, &l);
	if (ret)
		return ret;
	ret = ts[0]->listener_name(l, (struct sockaddr *)&name, &namelen);
	if (ret) {
		ts[0]->listener_close(l);
		return ret;
	}
	s->lsn[0] = (struct sdp_lsn){ .t = ts[0], .l = l };
	s->nlsn = 1;
	memcpy(&same, addr, len);
	addr_set_port(&same, addr_port(&name));
	for (int i = 1; i < n; i++) {
		ret = ts[i]->listen((struct sockaddr *)&same, len, SOMAXCONN, flags, &l);
		if (ret) {
			sdp_dbg(LOGSYS, "sd %d: not listening over %s as well: %s", s->sd,
				ts[i]->name, strerror(-ret));
			continue;
		}
		s->lsn[s->nlsn++] = (struct sdp_lsn){ .t = ts[i], .l = l };
	}
	s->local = name;
	s->bound = true;
	return 0;
}

/* "ib and tcp-fallback": the transports a listener listens on. */
static const char *listener_transports(const struct sdp_sock *s, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < s->nlsn && used < len; i++) {
		int r = snprintf(buf + used, len - used, "%s%s",
				 i == 0 ? "" : i + 1 == s->nlsn ? " and " : ", ", s->lsn[i].t->name);

		if (r < 0 || (size_t)r >= len - used)
			break;
		used += (size_t)r;
	}
	return buf;
}

/* An address for a socket that may still take one, as inet_bind checks. */
static int check_bind(struct sdp_sock *s, const struct sockaddr *addr, socklen_t len)
{
	int ret = check_addr(s, addr, len);

	return !ret && (s->bound || s->state != SDP_S_NEW) ? -EINVAL : ret;
}

int sdp_bind(int sd, const struct sockaddr *addr, socklen_t len)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ret;

	if (!s)
		return -EBADF;
	ret = check_bind(s, addr, len);
	if (!ret)
		ret = bind_locked(s, addr, len);
	sock_unlock_put(s);
	return ret;
}

int sdp_bind_source(int sd, const struct sockaddr *addr, socklen_t len)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ret;

	if (!s)
		return -EBADF;
	ret = check_bind(s, addr, len);
	if (!ret) {
		memcpy(&s->local, addr, domain_addrlen(s->domain));
		s->bound = true;
	}
	sock_unlock_put(s);
	return ret;
}

int sdp_listen(int sd, int backlog)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ret = 0;

	if (!s)
		return -EBADF;
	if (backlog < 0)
		backlog = 0;
	if (backlog > 4096)
		backlog = 4096;
	if (s->state == SDP_S_LISTEN) {
		s->backlog = backlog + 1;
		goto out;
	}
	if (s->state != SDP_S_NEW) {
		ret = -EINVAL;
		goto out;
	}
	if (!s->nlsn) {
		/* Not bound, or named a source only (sdp_bind_source()). */
		struct sockaddr_storage any = { .ss_family = (sa_family_t)s->domain };

		ret = bind_locked(s, s->bound ? (struct sockaddr *)&s->local : (struct sockaddr *)&any,
				  domain_addrlen(s->domain));
		if (ret)
			goto out;
	}
	/* Linux lets backlog + 1 connections wait. */
	s->backlog = backlog + 1;
	ret = listener_progress_add(s);
	if (ret)
		goto out;
	progress_watch_sync(s);
	s->state = SDP_S_LISTEN;
	char names[128];

	sdp_conn_log(LOGSYS, "sd %d: listening over %s", s->sd,
		     listener_transports(s, names, sizeof(names)));
out:
	sock_unlock_put(s);
	return ret;
}

int sdp_accept(int sd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sdp_sock *s = sock_get(sd), *child = NULL;
	int ret;

	if (!s)
		return -EBADF;
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
		sock_put(s);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	uint64_t deadline = deadline_from(&s->rcvtimeo);
	/* A call, so that a sleep parks the listener's fd until the call
	 * ends: the connection that wakes it is taken here, with no
	 * progress thread woken for it (doc/fastpath.md, "Connection
	 * set-up"). */
	struct sdp_sock *outer = progress_call_enter(s);

	listener_accepting(s, 1);
	for (;;) {
		if (s->state != SDP_S_LISTEN) {
			ret = -EINVAL;
			goto out;
		}
		listener_progress(s);
		if (s->acceptq_len > 0)
			break;
		if (s->nonblock) {
			ret = -EAGAIN;
			goto out;
		}
		ret = sdp_wait(s, deadline);
		if (ret)
			goto out;
	}
	child = s->acceptq[0];
	s->acceptq_len--;
	memmove(&s->acceptq[0], &s->acceptq[1],
		(size_t)(s->acceptq_len + s->pending_children) * sizeof(*s->acceptq));

	pthread_mutex_lock(&child->lock);
	/* From now on the child is driven on its own. */
	struct sdp_conn *cc = child->conn;

	if (cc && cc->in_progress_set) {
		/* registered for the listener until now */
		progress_del(s, cc->ep_fd);
		cc->in_progress_set = false;
		cc->prog_deferred = true;
	}
	child->parent = NULL;
	conn_undefer(child);
	child->is_child = false;
	child->nonblock = flags & SOCK_NONBLOCK;
	if (!(flags & SOCK_CLOEXEC))
		sock_sd_inherit(child->sd);
	copy_addr_out(&child->peer, child->domain, addr, len);
	ret = sock_publish(child);
	if (ret == 0)
		ret = child->sd;
	sock_changed(child, true);
	pthread_mutex_unlock(&child->lock);
	if (ret < 0)
		sock_put(child);
	/* A full queue may have refused requests; room again now. */
	sock_changed(s, false);
out:
	listener_accepting(s, -1);
	progress_call_exit(s, outer);
	sock_unlock_put(s);
	return ret;
}

int sdp_listener_share(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	int ret = listener_share(s);

	sock_unlock_put(s);
	return ret;
}

int sdp_conn_export(int sd, void **blob, size_t *len, int *fd)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	if (!blob || !len || !fd) {
		sock_unlock_put(s);
		return -EFAULT;
	}
	/* What the transport holds taken in first: then, under the lock,
	 * nothing moves until the export. */
	conn_progress(s);
	int ret = conn_export(s, blob, len, fd);

	sock_unlock_put(s);
	if (ret == 0)
		(void)sdp_close(sd);
	return ret;
}

int sdp_conn_import(const void *blob, size_t len, int fd, int flags)
{
	struct sdp_sock *s;
	int ret;

	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC) || !blob) {
		fdspace_close(fd);
		return -EINVAL;
	}
	ret = conn_import(blob, len, fd, flags, &s);
	if (ret)
		return ret;
	pthread_mutex_lock(&s->lock);
	ret = sock_publish(s);
	if (ret == 0)
		ret = s->sd;
	sock_changed(s, true);
	pthread_mutex_unlock(&s->lock);
	if (ret < 0)
		sock_put(s);
	return ret;
}

int sdp_connect(int sd, const struct sockaddr *addr, socklen_t len)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ret;

	if (!s)
		return -EBADF;
	ret = check_addr(s, addr, len);
	if (ret)
		goto out;
	switch (s->state) {
	case SDP_S_ESTABLISHED:
		/* Linux: the first connect() after a non-blocking one
		 * completed reports success, later ones EISCONN. */
		ret = s->connect_unreported ? 0 : -EISCONN;
		s->connect_unreported = false;
		goto out;
	case SDP_S_LISTEN:
		ret = -EISCONN;
		goto out;
	case SDP_S_RESOLVING:
	case SDP_S_CONNECTING:
		if (s->nonblock) {
			ret = -EALREADY;
			goto out;
		}
		break;		/* wait for the attempt under way */
	case SDP_S_CLOSED:
		if (s->conn && s->conn->tx_len) {
			/* A connection existed and ended (even by a reset):
			 * the socket layer still calls it connected. */
			ret = -EISCONN;
			goto out;
		}
		/* A failed attempt may be retried, as with TCP. */
		conn_free(s);
		s->so_error = 0;
		s->reset = false;
		memset(&s->peer, 0, sizeof(s->peer));
		s->state = SDP_S_NEW;
		/* fall through */
	case SDP_S_NEW:
		if (s->nlsn) {
			/* Bound for a source address, not to listen: give the
			 * transport port back. */
			listener_free(s);
		}
		ret = conn_start_connect(s, addr, len);
		if (ret)
			goto out;
		conn_progress(s);
		if (s->nonblock) {
			conn_connect_started(s);
			/* Linux TCP answers a non-blocking connect with
			 * EINPROGRESS every time, even on loopback; the
			 * outcome comes through poll and SO_ERROR.  So here,
			 * even when the transport was quick enough to finish
			 * (or refuse) within this call: a program that treats
			 * 0 as "connected" never registers for the writable
			 * event it would otherwise wait for (Java NIO's
			 * OP_CONNECT hung). */
			s->connect_unreported = s->state != SDP_S_CLOSED;
			ret = -EINPROGRESS;
			goto out;
		}
		break;
	}

	uint64_t deadline = deadline_from(&s->sndtimeo);

	while (s->state == SDP_S_RESOLVING || s->state == SDP_S_CONNECTING) {
		/* The attempt's own deadline too (connect_timeout_ms): a
		 * blocking connect keeps it itself (conn_start_connect()). */
		uint64_t until = deadline;

		if (s->conn && s->conn->deadline_ns && (!until || s->conn->deadline_ns < until))
			until = s->conn->deadline_ns;
		ret = sdp_wait(s, until);
		if (ret == -EAGAIN && until != deadline) {
			conn_progress(s);	/* ETIMEDOUT */
			continue;
		}
		if (ret == -EAGAIN) {
			/* SO_SNDTIMEO bounds connect(); the attempt goes on. */
			ret = -EINPROGRESS;
			goto out;
		}
		if (ret)
			goto out;
		conn_progress(s);
	}
	if (s->state == SDP_S_ESTABLISHED)
		ret = 0;
	else
		ret = s->so_error ? -take_error(s) : -ECONNREFUSED;
out:
	/* Also after SO_SNDTIMEO or a signal, the attempt going on. */
	if (!s->nonblock)
		conn_undefer(s);
	sock_unlock_put(s);
	return ret;
}

int sdp_fallback_reason(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int why;

	if (!s)
		return -EBADF;
	why = s->fb_reason;
	sock_unlock_put(s);
	return why;
}

/*
 * The poll half of recv's poll-then-block (common/spin.h): lets other
 * threads at the socket between polls.  False once the budget is spent
 * (or the thread does not spin now), and the caller sleeps.  The lock is
 * dropped only when true, so that the caller looks at the socket again
 * before it sleeps: what the progress thread delivered while the lock was
 * free would otherwise wait in the socket for a sleeper that is not yet
 * among its waiters (sdp_wait() sleeps on the transport, now quiet).
 */
static bool spin_wait(struct sdp_sock *s, struct spin *sp)
{
	if (!spin_left(sp))
		return false;
	pthread_mutex_unlock(&s->lock);
	(void)spin_again(sp);	/* the yield; the next call sees the budget */
	pthread_mutex_lock(&s->lock);
	return true;
}

/* Does s's transport let a waiter see news without a system call? */
static bool sock_pollable(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	return c && c->ep && !c->transport_down && c->t->ep_poll;
}

/* A waiting call's budget: spin_us, or shm_spin_us where a look is a load. */
static void spin_begin_for(struct sdp_sock *s, struct spin *sp)
{
	long us = tun_int(TUN_spin_us);

	if (sock_pollable(s) && tun_int(TUN_shm_spin_us) > us)
		us = tun_int(TUN_shm_spin_us);
	spin_begin_us(sp, us);
}

/*
 * recv's spin on a transport whose news a load sees (oti.h ep_poll:
 * shm's rings): it looks at the transport only, not the whole
 * connection, costs no system call, and meanwhile the peer sends no
 * wake-up.  The lock is let go between looks, so, as in spin_wait(), a
 * spin that let it go ends with true (the caller drives and looks at the
 * socket again before it sleeps); true too when there is work.
 * *polled: the transport was told (the caller ends it, poll_end()).
 * Between looks the CPU is given away (spin_again()), for the peer may
 * need it: on the 2-core test machine at load 8-10, sockperf's p50 over
 * shm was 2.6 us so, 3.4 us yielding after every second look, 15 us
 * every sixteenth and 29 us with CPU pauses only (20 us budget).
 */
static bool spin_poll(struct sdp_sock *s, struct spin *sp, bool *polled)
{
	bool dropped = false;

	for (;;) {
		if (!sock_pollable(s))
			return dropped || spin_wait(s, sp);
		if (!spin_left(sp))
			return dropped;
		*polled = true;
		if (s->conn->t->ep_poll(s->conn->ep)) {
			SDP_STAT_INC(spin_poll_answers, 1);
			return true;
		}
		/* Another thread (the progress thread, woken by a byte the
		 * peer sent before our first look) may have driven it while
		 * we let go: its news is in the socket, not the ring. */
		if (dropped && (sock_events_locked(s) & (POLLIN | POLLHUP | POLLERR)))
			return true;
		pthread_mutex_unlock(&s->lock);
		(void)spin_again(sp);
		pthread_mutex_lock(&s->lock);
		dropped = true;
	}
}

/* The end of a call's polling (oti.h ep_poll_end()), under s's lock: the
 * transport's fd wakes sleepers again, and what came meanwhile is driven
 * now, as the end of any drive would leave it. */
static void poll_end(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (c && c->ep && !c->transport_down && c->t->ep_poll_end && c->t->ep_poll_end(c->ep))
		sock_drive(s);
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

static bool send_shut(const struct sdp_sock *s)
{
	return s->shut_wr ||
	       (s->conn && (s->conn->disconn_sent || (s->conn->ctrl_pending & SDP_CTRL_DISCONN)));
}

static ssize_t epipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return -EPIPE;
}

/*
 * One step of a call that cannot go on yet: first drive the transport once
 * (the news may already be there), then sleep.  Returns 0 to try again,
 * -EAGAIN (non-blocking, or the deadline passed) or -EINTR.
 */
static int step_wait(struct sdp_sock *s, bool dontwait, uint64_t deadline, bool *driven)
{
	int ret;

	if (!*driven) {
		sock_drive(s);
		*driven = true;
		return 0;
	}
	if (dontwait)
		return -EAGAIN;
	ret = sdp_wait(s, deadline);
	*driven = false;
	return ret;
}

/*
 * Transaction mode (write_zcopy.c): a small request is held back for the
 * recv() that will advertise the reply's buffer, and rides on its
 * SinkAvail.  More bytes join it while the whole still fits one message;
 * otherwise what is held goes now.
 */
static void trans_hold(struct sdp_sock *s, size_t more)
{
	struct sdp_conn *c = s->conn;
	long hold_us = tun_int(TUN_trans_hold_us);

	if (c->tx_mode != SDP_MODE_TRANSACTION || !hold_us || c->rx_mode != SDP_MODE_PIPELINED) {
		conn_end_hold(s);
		return;
	}
	uint32_t held = c->trans_held ? c->tx_len[(c->tx_filled - 1) % c->ntx] : 0;
	bool alone = c->bl_head ? false
		     : c->trans_held ? c->tx_posted + 1 == c->tx_filled
				     : c->tx_posted == c->tx_filled;

	if (!alone || held + more > conn_piggyback_max(c)) {
		conn_end_hold(s);
		return;
	}
	if (!c->trans_held) {
		c->trans_held = true;
		c->trans_hold_until = sdp_now_ns() + (uint64_t)hold_us * 1000ull;
		progress_hold(s);
	}
}

ssize_t sdp_sendv(int sd, const struct iovec *iov, int iovcnt, int flags)
{
	struct sdp_sock *s;
	size_t total, done = 0;
	ssize_t ret;

	if (iovcnt < 0 || iovcnt > IOV_MAX)
		return -EINVAL;
	s = sock_get(sd);
	if (!s)
		return -EBADF;
	total = iov_total(iov, iovcnt);
	/* MSG_OOB: the last byte is urgent, and must end a Data message
	 * (OOB_PRES): the rest goes first by Bcopy, then that byte with
	 * the flag (conn_send()). */
	bool urgent = (flags & MSG_OOB) && total;
	size_t body = urgent ? total - 1 : total;

	flags &= ~MSG_OOB;
	pthread_mutex_lock(&s->lock);
	struct sdp_sock *outer = progress_call_enter(s);
	uint64_t deadline = deadline_from(&s->sndtimeo);
	bool dontwait = s->nonblock || (flags & MSG_DONTWAIT);

	/* The transport is driven only when the call cannot go on without
	 * it: the progress thread reaps completions meanwhile, and each
	 * drive costs system calls. */
	bool driven = false;
	bool zc_off = urgent;	/* this call sends by Bcopy only */
	bool zc_used = false;	/* some of it went by zero copy */

	for (;;) {
		if (s->so_error) {
			ret = done ? (ssize_t)done : -take_error(s);
			goto out;
		}
		if (s->state == SDP_S_RESOLVING || s->state == SDP_S_CONNECTING) {
			ret = step_wait(s, dontwait, deadline, &driven);
			if (ret)
				goto out;
			continue;
		}
		if (s->state != SDP_S_ESTABLISHED || send_shut(s)) {
			/* Never connected, shut down, or closed: EPIPE, as
			 * sk_stream_wait_connect() and tcp_sendmsg() say. */
			ret = done ? (ssize_t)done : epipe(flags);
			goto out;
		}
		if (done == total)
			break;
		/* The peer's recv() advertised its buffer: write into it
		 * (write_zcopy.c). */
		if (!urgent && wz_send_ready(s)) {
			ret = wz_send(s, iov, iovcnt, done, dontwait);
			if (ret < 0) {
				ret = done ? (ssize_t)done : ret;
				goto out;
			}
			if (ret > 0) {
				done += (size_t)ret;
				zc_used = true;
				continue;
			}
			/* It cannot write now: Bcopy, as wz_send() says,
			 * which drops the advert. */
			zc_off = true;
		}
		/* A large piece of a blocking send goes by Read Zcopy: the
		 * peer reads it from iov itself (zcopy.c). */
		size_t zlen;
		const void *zbuf = dontwait || zc_off ? NULL :
				   zc_send_candidate(s, iov, iovcnt, done, &zlen);

		if (zbuf) {
			enum zc_outcome how;

			ret = zc_send(s, zbuf, zlen, deadline, &how);
			if (ret < 0) {
				ret = done ? (ssize_t)done : ret;
				goto out;
			}
			done += (size_t)ret;
			zc_used |= ret > 0;
			if (how == ZC_CANCELLED && done) {
				ret = (ssize_t)done;
				goto out;
			}
			/* Refused or cancelled for the peer's sake: the rest
			 * of this call goes by Bcopy. */
			if (how == ZC_BCOPY)
				zc_off = true;
			/* The peer's advert waits for credits: the loop
			 * must not spin on it, holding the lock.  But
			 * zc_send() may have waited itself, and the advert
			 * came then: if it can be written now, nothing else
			 * will change to wake us (the peer waits for it). */
			if (how == ZC_WAIT && !wz_send_ready(s)) {
				ret = step_wait(s, dontwait, deadline, &driven);
				if (ret) {
					ret = done ? (ssize_t)done : ret;
					goto out;
				}
			}
			continue;
		}
		size_t limit = dontwait || zc_off ? SIZE_MAX : zc_bcopy_limit(s, iov, iovcnt, done);

		if (urgent) {
			/* A held request would go in a SinkAvail, which
			 * cannot carry the urgent byte. */
			conn_end_hold(s);
			limit = done < body ? body - done : 1;
		} else {
			trans_hold(s, total - done);
		}
		ret = conn_send(s, iov, iovcnt, done == body ? flags | MSG_OOB : flags, done, limit);
		if (ret < 0)
			goto out;
		done += (size_t)ret;
		if (done == total)
			break;
		if (s->state != SDP_S_ESTABLISHED)
			continue;
		if (ret == 0) {
			s->tx_nospace = true;	/* room is news to SIGIO */
			/* No room: completions may free buffers. */
			ret = step_wait(s, dontwait, deadline, &driven);
			if (ret) {
				ret = done ? (ssize_t)done : ret;
				goto out;
			}
		}
	}
	ret = (ssize_t)done;
	if (s->conn) {
		mode_note_send(s, zc_used || (s->zcopy_thresh && total >= (size_t)s->zcopy_thresh));
		s->conn->trans_last_send = !zc_used && total <= conn_piggyback_max(s->conn);
	}
out:
	progress_call_exit(s, outer);
	sock_unlock_put(s);
	return ret;
}

ssize_t sdp_send(int sd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return sdp_sendv(sd, &iov, 1, flags);
}

/* How far one look at the receive queue got (sdp_recvv). */
enum recv_step {
	RECV_AGAIN,	/* took some, or the queue changed: look again */
	RECV_DONE,	/* enough for this call */
	RECV_ERROR,	/* *ret is the call's result */
	RECV_BUSY,	/* another thread's read of a SrcAvail is in flight */
};

/*
 * Take what is queued into iov after *done bytes: Bcopy segments, and the
 * peer's SrcAvail when it is next (zcopy.c reads it into iov or the
 * staging buffer).  A peek must see past a SrcAvail's inline bytes.
 */
static enum recv_step recv_queued(struct sdp_sock *s, const struct iovec *iov, int iovcnt,
				  int flags, size_t total, size_t want, size_t *done, ssize_t *ret)
{
	bool zc_busy = false;

	if ((flags & MSG_PEEK) && zc_peek_wants_stage(s->conn, total)) {
		bool other_reads;	/* then peek what there is */

		*ret = zc_recv(s, iov, iovcnt, flags, 0, &other_reads);
		if (*ret < 0)
			return RECV_ERROR;
		if (!s->conn)
			return RECV_AGAIN;
	}
	*ret = conn_recv(s, iov, iovcnt, flags, *done);
	if (*ret < 0)
		return RECV_ERROR;
	*done += (size_t)*ret;
	/* A read stops at the mark, MSG_WAITALL or not (tcp_recvmsg()). */
	if (*done && !(flags & MSG_PEEK) && conn_at_mark(s->conn))
		return RECV_DONE;
	if (*ret == 0 && zc_rx_at_head(s->conn)) {
		*ret = zc_recv(s, iov, iovcnt, flags, *done, &zc_busy);
		if (*ret < 0) {
			*ret = *done ? (ssize_t)*done : *ret;
			return RECV_ERROR;
		}
		*done += (size_t)*ret;
	}
	if (zc_busy)
		return RECV_BUSY;
	if ((flags & MSG_PEEK) && *done)
		return RECV_DONE;
	return *done >= want ? RECV_DONE : RECV_AGAIN;
}

/* A recv() of no bytes, as tcp_recvmsg(): 0 at once, unless a
 * non-blocking call finds nothing at all to report. */
static ssize_t recv_nothing(struct sdp_sock *s, bool dontwait, bool driven)
{
	if (!driven)
		sock_drive(s);
	if (dontwait && !(s->conn && s->conn->rx_bytes) && s->state == SDP_S_ESTABLISHED &&
	    !s->shut_rd && !s->so_error && !(s->conn && s->conn->disconn_rcvd))
		return -EAGAIN;
	return 0;
}

/* A request still held was not followed by its reply's recv(): it goes
 * alone; and the next advert is no reply. */
static void recv_finish(struct sdp_sock *s)
{
	if (!s->conn)
		return;
	conn_end_hold(s);
	if (s->conn && s->conn->trans_last_send) {
		s->conn->trans_last_send = false;
		s->conn->trans_streak = 0;
	}
}

/* recv(MSG_OOB), as tcp_recv_urg(): the urgent byte while it is valid
 * and not inline, never waiting; EINVAL when there is none (ENOTCONN on
 * a listener, as tcp_recvmsg() says first). */
static ssize_t recv_urgent(int sd, const struct iovec *iov, int iovcnt, int flags)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	ssize_t ret = -EINVAL;

	if (!s)
		return -EBADF;
	if (s->state == SDP_S_LISTEN)
		ret = -ENOTCONN;
	else if (s->conn)
		sock_drive(s);	/* it may have arrived just now */
	struct sdp_conn *c = s->conn;

	if (!s->oobinline && c && c->urg == SDP_URG_VALID) {
		ret = 0;
		for (int i = 0; i < iovcnt; i++) {
			if (iov[i].iov_len) {
				*(uint8_t *)iov[i].iov_base = c->urg_byte;
				ret = 1;
				break;
			}
		}
		if (!(flags & MSG_PEEK)) {
			c->urg = SDP_URG_READ;
			sock_changed(s, false);
		}
	}
	sock_unlock_put(s);
	return ret;
}

ssize_t sdp_recvv(int sd, const struct iovec *iov, int iovcnt, int flags)
{
	struct sdp_sock *s;
	size_t total, done = 0;
	ssize_t ret;
	struct spin sp;
	bool spinning = false;	/* sp begun: this call waited */
	bool polled = false;	/* the transport was polled (spin_poll()) */

	if (iovcnt < 0 || iovcnt > IOV_MAX)
		return -EINVAL;
	if (flags & MSG_OOB)
		return recv_urgent(sd, iov, iovcnt, flags);
	s = sock_get(sd);
	if (!s)
		return -EBADF;
	total = iov_total(iov, iovcnt);
	pthread_mutex_lock(&s->lock);
	struct sdp_sock *outer = progress_call_enter(s);
	uint64_t deadline = deadline_from(&s->rcvtimeo);
	bool dontwait = s->nonblock || (flags & MSG_DONTWAIT);
	size_t want = (flags & MSG_WAITALL) && !(flags & MSG_PEEK) ? total
		      : (size_t)s->rcvlowat < total ? (size_t)s->rcvlowat : total;

	if (s->state == SDP_S_NEW || s->state == SDP_S_LISTEN) {
		ret = -ENOTCONN;
		goto out;
	}
	bool driven = false;	/* see sdp_sendv() */
	bool wz_off = false;	/* this call's buffer could not be advertised */

	for (;;) {
		if (s->state == SDP_S_RESOLVING || s->state == SDP_S_CONNECTING) {
			ret = step_wait(s, dontwait, deadline, &driven);
			if (ret)
				goto out;
			continue;
		}
		if (total == 0) {
			ret = recv_nothing(s, dontwait, driven);
			goto out;
		}
		bool zc_busy = false;

		if (conn_rx_readable(s, flags & MSG_PEEK)) {
			enum recv_step st = recv_queued(s, iov, iovcnt, flags, total, want, &done,
							&ret);

			if (st == RECV_ERROR)
				goto out;
			if (st == RECV_DONE)
				break;
			if (st == RECV_AGAIN)
				continue;
			/* Another thread's read is in flight: wait below. */
			zc_busy = true;
		}
		/* Nothing queued: maybe the transport has news. */
		if (!driven) {
			sock_drive(s);
			driven = true;
			continue;
		}
		if (s->so_error) {
			ret = done ? (ssize_t)done : -take_error(s);
			goto out;
		}
		if (!zc_busy &&
		    (s->shut_rd || s->state == SDP_S_CLOSED || (s->conn && s->conn->disconn_rcvd)))
			break;		/* end of stream */
		if (!s->conn) {
			ret = done ? (ssize_t)done : -ENOTCONN;
			goto out;
		}
		if (dontwait) {
			ret = done ? (ssize_t)done : -EAGAIN;
			goto out;
		}
		/* The peer may write straight into this buffer: tell it where
		 * (write_zcopy.c); a held Transaction request goes along. */
		if (!wz_off && wz_may_advertise(s, iov, iovcnt, done, flags)) {
			ret = wz_recv(s, iov, iovcnt, done, deadline);
			if (ret == -ENOBUFS) {
				wz_off = true;
				continue;
			}
			if (ret < 0) {
				ret = done ? (ssize_t)done : ret;
				goto out;
			}
			done += (size_t)ret;
			if (done >= want)
				break;
			driven = false;
			continue;
		}
		/* Nobody will carry a held request: it goes now. */
		conn_end_hold(s);
		if (!spinning) {
			spin_begin_for(s, &sp);
			spinning = true;
		}
		if (spin_poll(s, &sp, &polled)) {
			driven = false;
			continue;
		}
		spin_sleeping(&sp);
		ret = sdp_wait(s, deadline);
		if (ret) {
			ret = done ? (ssize_t)done : ret;
			goto out;
		}
		driven = false;
	}
	ret = (ssize_t)done;
out:
	if (spinning)
		spin_end(&sp, ret >= 0);
	if (polled)
		poll_end(s);
	recv_finish(s);
	progress_call_exit(s, outer);
	sock_unlock_put(s);
	return ret;
}

ssize_t sdp_recv(int sd, void *buf, size_t len, int flags)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return sdp_recvv(sd, &iov, 1, flags);
}

int sdp_shutdown(int sd, int how)
{
	struct sdp_sock *s = sock_get(sd);
	int ret = 0;

	if (!s)
		return -EBADF;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		sock_put(s);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	switch (s->state) {
	case SDP_S_NEW:
	case SDP_S_RESOLVING:
		ret = -ENOTCONN;
		break;
	case SDP_S_LISTEN:
		/* Linux closes the listener; accept() then fails. */
		if (how != SHUT_WR) {
			listener_free(s);
			s->state = SDP_S_CLOSED;
		}
		break;
	default:
		/* A connection that is over (reset, or both DisConns gone
		 * by) is TCP_CLOSE to Linux: the flags are set all the same,
		 * and the call fails. */
		if (s->state == SDP_S_CLOSED ||
		    (s->conn && s->conn->disconn_sent && s->conn->disconn_rcvd))
			ret = -ENOTCONN;
		if (how != SHUT_WR)
			s->shut_rd = true;
		if (how != SHUT_RD) {
			s->shut_wr = true;
			if (s->state == SDP_S_ESTABLISHED)
				conn_shutdown_write(s);
		}
		break;
	}
	sock_changed(s, true);
	sock_unlock_put(s);
	return ret;
}

/*
 * A lingering close is over, as Linux's is once the FIN is acknowledged:
 * our DisConn has gone and the peer has acknowledged it, so it has all
 * our data.  That we posted it is not enough: on a software transport
 * it may still be in the kernel's socket buffer, which an exit right
 * after close() throws away with a reset if the peer's credit updates
 * are unread there.
 */
static bool linger_done(const struct sdp_conn *c)
{
	return c->disconn_sent && c->tx_done == c->tx_posted && sdp_peer_has_all(&c->cr);
}

int sdp_close(int sd)
{
	struct sdp_sock *s;

	s = sock_unpublish(sd);
	if (!s)
		return -EBADF;
	/* A shared listener is this process's to close (its copies of the
	 * transport's descriptors), once adopted. */
	if (sock_inherited(s) &&
	    !(__atomic_load_n(&s->lsn_shared, __ATOMIC_RELAXED) && sdp_upcalls.adopt(s) == 0)) {
		/* The parent's connection: release this process's copy of
		 * the fd and nothing else (its transport objects stay
		 * allocated, untouched, until exit or exec). */
		sock_sd_release(sd);
		return 0;
	}

	pthread_mutex_lock(&s->lock);
	s->app_closed = true;
	s->notify = NULL;	/* its owner's fd is gone */
	if (s->state == SDP_S_LISTEN || s->nlsn) {
		listener_free(s);
	} else if (s->state == SDP_S_ESTABLISHED && s->conn) {
		sock_drive(s);
		bool unread = s->conn && s->conn->rx_bytes;
		bool abortive = s->linger.l_onoff && s->linger.l_linger == 0;

		if (s->conn && (unread || abortive)) {
			/* Linux resets rather than pretend the peer's data was
			 * read, and SO_LINGER 0 asks for exactly that. */
			conn_abort(s, ECONNRESET);
		} else if (s->conn) {
			conn_shutdown_write(s);
			if (s->linger.l_onoff && !s->nonblock) {
				uint64_t deadline = sdp_now_ns() +
						    (uint64_t)s->linger.l_linger * 1000000000ull;

				while (s->conn && s->state == SDP_S_ESTABLISHED &&
				       !linger_done(s->conn)) {
					if (sdp_wait(s, deadline))
						break;
					conn_progress(s);
				}
			}
		}
	} else if (s->conn) {
		conn_abort(s, ECONNRESET);
	}
	/* The application's fd number is released now, like close(2); the
	 * connection may finish its teardown as an orphan. */
	sock_sd_release(s->sd);
	s->sd = -1;
	if (s->conn) {
		if (conn_finished(s))
			conn_free(s);
		else
			progress_adopt_orphan(s);
	}
	sock_unlock_put(s);
	return 0;
}

int sdp_getsockname(int sd, struct sockaddr *addr, socklen_t *len)
{
	struct sdp_sock *s = sock_get(sd);

	if (!s)
		return -EBADF;
	if (!len) {
		sock_put(s);
		return -EFAULT;
	}
	pthread_mutex_lock(&s->lock);
	copy_addr_out(&s->local, s->domain, addr, len);
	sock_unlock_put(s);
	return 0;
}

/*
 * Whether getpeername() names the peer.  Linux answers ENOTCONN for a TCP
 * socket in CLOSE: never connected, a reset (received or sent), or once
 * both FINs are through (TIME_WAIT and LAST_ACK hand the connection over
 * and leave the socket in CLOSE).  A half-closed connection still has its
 * peer.  Programs rely on it: a TLS library's guard against data sent
 * before the handshake (CVE-2023-40217) keys on this ENOTCONN.
 */
static bool peer_known(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	if (s->state == SDP_S_ESTABLISHED)
		return !(c && c->disconn_sent && c->disconn_rcvd);
	if (s->state != SDP_S_CLOSED || s->reset || !c || !c->tx_len)
		return false;
	/* Closed in order by the transport: CLOSE_WAIT if we had not sent
	 * our DisConn yet. */
	return !c->disconn_sent;
}

int sdp_getpeername(int sd, struct sockaddr *addr, socklen_t *len)
{
	struct sdp_sock *s = sock_get(sd);
	int ret = 0;

	if (!s)
		return -EBADF;
	if (!len) {
		sock_put(s);
		return -EFAULT;
	}
	pthread_mutex_lock(&s->lock);
	if (!peer_known(s))
		ret = -ENOTCONN;
	else
		copy_addr_out(&s->peer, s->domain, addr, len);
	sock_unlock_put(s);
	return ret;
}

/* --- options ---------------------------------------------------------------- */

static int opt_int_in(const void *val, socklen_t len, int *out)
{
	if (!val)
		return -EFAULT;
	if (len < sizeof(int))
		return -EINVAL;
	memcpy(out, val, sizeof(int));
	return 0;
}

static int opt_out(void *val, socklen_t *len, const void *v, socklen_t vlen)
{
	if (!len)
		return -EFAULT;
	if (*len > vlen)
		*len = vlen;
	if (val)
		memcpy(val, v, *len);
	return 0;
}

static int opt_timeval_in(const void *val, socklen_t len, struct timeval *tv)
{
	if (!val)
		return -EFAULT;
	if (len < sizeof(*tv))
		return -EINVAL;
	memcpy(tv, val, sizeof(*tv));
	if (tv->tv_usec < 0 || tv->tv_usec >= 1000000)
		return -EDOM;
	if (tv->tv_sec < 0)
		tv->tv_sec = tv->tv_usec = 0;	/* Linux: negative means no timeout */
	return 0;
}

/*
 * SO_SNDBUF and SO_RCVBUF
 *
 * Linux (sk_setsockopt): SO_SNDBUF v stores max(2 * min(v, wmem_max),
 * SOCK_MIN_SNDBUF), v compared as unsigned (a negative v means the cap);
 * SO_RCVBUF likewise with rmem_max and SOCK_MIN_RCVBUF; the FORCE forms
 * need CAP_NET_ADMIN and skip the cap (a negative v means 0).  getsockopt
 * returns the stored, doubled value, an accepted socket inherits its
 * listener's, and a set value is never tuned by the kernel again
 * (SOCK_*BUF_LOCK).  TCP then queues unsent and unacknowledged data up to
 * about the send value (counting its overhead), the receiver advertises
 * a window of about the receive value, and poll() reports POLLOUT when the
 * free send space is at least half of what is queued.
 *
 * SDP: the same values, computed the same way (the floors asked of the
 * kernel once, the caps read from /proc each time), are reported; once
 * set, they are what SDP buffers:
 * - send: the bytes in send buffers not yet sent or completed stay within
 *   SO_SNDBUF: a send takes what fits (a non-blocking one returns a short
 *   count or EAGAIN, a blocking one waits), POLLOUT as on Linux.  Set
 *   before the handshake it also sizes the send ring; later it cannot
 *   grow beyond that ring.  Zero copy is outside it: a Read Zcopy send
 *   holds no copy and returns once the peer has read the application's
 *   own buffer; a Write Zcopy goes into the buffer of a recv() waiting
 *   for it at the peer (through one bounce buffer at most).
 * - receive: the credits granted to the peer cover about SO_RCVBUF bytes
 *   (conn.c, conn_setup_rx): set before connect() or listen() (inherited
 *   by accepted sockets), the Hello or HelloAck offers fewer and, when
 *   small, smaller buffers; set on an established connection, consumed
 *   buffers are withheld or posted again (buffers already granted stay
 *   granted), within the ring made at the handshake, at least four of them,
 *   as TCP's window scale fixes the largest window at its handshake.
 *   Bytes a Read Zcopy stages for a small recv() stay within it too.
 * Unset, both report and use the tunables' buffers (buf_size x recv_bufs
 * and x send_bufs), unbounded by the options, as before.
 */
static pthread_once_t bufsize_once = PTHREAD_ONCE_INIT;
static int bufsize_min_snd = 4608, bufsize_min_rcv = 2304;	/* x86-64 Linux's */

/* SOCK_MIN_SNDBUF and SOCK_MIN_RCVBUF follow the kernel's struct sk_buff:
 * a kernel socket says what they are. */
static void bufsize_probe(void)
{
	int fd = sys.socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), zero = 0, v;
	socklen_t len = sizeof(v);

	if (fd < 0)
		return;
	if (sys.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &zero, sizeof(zero)) == 0 &&
	    sys.getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len) == 0 && v > 0)
		bufsize_min_snd = v;
	len = sizeof(v);
	if (sys.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &zero, sizeof(zero)) == 0 &&
	    sys.getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v > 0)
		bufsize_min_rcv = v;
	sys.close(fd);
}

/* net.core.wmem_max or rmem_max now (Linux's default if unreadable). */
static unsigned bufsize_cap(bool snd)
{
	int fd = sys.open(snd ? "/proc/sys/net/core/wmem_max" : "/proc/sys/net/core/rmem_max",
		      O_RDONLY | O_CLOEXEC);
	char buf[24];
	ssize_t n = fd < 0 ? -1 : sys.read(fd, buf, sizeof(buf) - 1);
	unsigned long v = 0;

	if (fd >= 0)
		sys.close(fd);
	if (n > 0) {
		buf[n] = '\0';
		v = strtoul(buf, NULL, 10);
	}
	return v && v <= INT_MAX ? (unsigned)v : 212992;
}

/* Whether the kernel lets us use SO_SNDBUFFORCE/SO_RCVBUFFORCE (name):
 * it wants CAP_NET_ADMIN in the initial user namespace, which capget()
 * cannot tell from inside another one; a kernel socket can. */
static bool force_allowed(int name)
{
	int fd = sys.socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), zero = 0;

	if (fd >= 0) {
		bool ok = sys.setsockopt(fd, SOL_SOCKET, name, &zero, sizeof(zero)) == 0;

		sys.close(fd);
		return ok;
	}
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d))
		return false;
	return d[CAP_TO_INDEX(CAP_NET_ADMIN)].effective & CAP_TO_MASK(CAP_NET_ADMIN);
}

static int set_bufsize(struct sdp_sock *s, int name, int v)
{
	bool snd = name == SO_SNDBUF || name == SO_SNDBUFFORCE;

	if (name == SO_SNDBUFFORCE || name == SO_RCVBUFFORCE) {
		if (!force_allowed(name))
			return -EPERM;
		if (v < 0)
			v = 0;
	} else {
		unsigned cap = bufsize_cap(snd);

		if ((unsigned)v > cap)
			v = (int)cap;
	}
	pthread_once(&bufsize_once, bufsize_probe);
	v = v > INT_MAX / 2 ? INT_MAX / 2 : v;
	v *= 2;
	if (snd) {
		s->sndbuf = v < bufsize_min_snd ? bufsize_min_snd : v;
		s->sndbuf_set = true;
		sock_changed(s, false);	/* room for a blocked sender */
	} else {
		s->rcvbuf = v < bufsize_min_rcv ? bufsize_min_rcv : v;
		s->rcvbuf_set = true;
		conn_rcvbuf_changed(s);
	}
	return 0;
}

int sdp_setsockopt(int sd, int level, int name, const void *val, socklen_t len)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ret = 0, v = 0;

	if (!s)
		return -EBADF;
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_RCVBUF:
		case SO_SNDBUF:
		case SO_RCVBUFFORCE:
		case SO_SNDBUFFORCE:
			ret = opt_int_in(val, len, &v);
			if (!ret)
				ret = set_bufsize(s, name, v);
			break;
		case SO_KEEPALIVE:
		case SO_REUSEADDR:
		case SO_REUSEPORT:
		case SO_OOBINLINE:
			ret = opt_int_in(val, len, &v);
			if (ret)
				break;
			if (name == SO_KEEPALIVE)
				s->keepalive = !!v;
			else if (name == SO_REUSEADDR)
				s->reuseaddr = !!v;
			else if (name == SO_REUSEPORT)
				s->reuseport = !!v;
			else {
				s->oobinline = !!v;
				/* A byte at the mark is data now, or no more. */
				if (s->conn)
					sock_changed(s, false);
			}
			break;
		case SO_RCVLOWAT:
			ret = opt_int_in(val, len, &v);
			if (!ret)
				s->rcvlowat = v < 1 ? 1 : v;
			break;
		case SO_LINGER:
			if (!val)
				ret = -EFAULT;
			else if (len < sizeof(struct linger))
				ret = -EINVAL;
			else
				memcpy(&s->linger, val, sizeof(s->linger));
			break;
		case SO_RCVTIMEO:
			ret = opt_timeval_in(val, len, &s->rcvtimeo);
			break;
		case SO_SNDTIMEO:
			ret = opt_timeval_in(val, len, &s->sndtimeo);
			break;
		default:
			ret = -ENOPROTOOPT;
			break;
		}
	} else if (level == IPPROTO_TCP) {
		ret = opt_int_in(val, len, &v);
		if (ret)
			goto out;
		switch (name) {
		case TCP_NODELAY:
			s->nodelay = !!v;
			break;
		case TCP_CORK:
			s->cork = !!v;
			if (!v && s->conn && s->state == SDP_S_ESTABLISHED)
				conn_progress(s);	/* uncork: flush the tail */
			break;
		case TCP_MAXSEG:
			if (v < 0 || v > 65535)
				ret = -EINVAL;
			break;
		case TCP_KEEPIDLE:
		case TCP_KEEPINTVL:
			if (v < 1 || v > 32767)
				ret = -EINVAL;
			else if (name == TCP_KEEPIDLE)
				s->keepidle = v;
			else
				s->keepintvl = v;
			break;
		case TCP_KEEPCNT:
			if (v < 1 || v > 127)
				ret = -EINVAL;
			else
				s->keepcnt = v;
			break;
		default:
			ret = -ENOPROTOOPT;
			break;
		}
	} else if (level == SOL_SDP && name == SDP_ZCOPY_THRESH) {
		ret = opt_int_in(val, len, &v);
		if (!ret && v < 0)
			ret = -EINVAL;
		if (!ret)
			s->zcopy_thresh = zcopy_thresh_clamp(v);
	} else if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY && s->domain == AF_INET6) {
		/* As Linux: only before the socket has a port. */
		ret = opt_int_in(val, len, &v);
		if (!ret && (s->nlsn || s->state != SDP_S_NEW))
			ret = -EINVAL;
		if (!ret)
			s->v6only = !!v;
	} else {
		ret = -ENOPROTOOPT;
	}
out:
	sock_unlock_put(s);
	return ret;
}

/* The state Linux's TCP_INFO would report for the connection, once what
 * is in flight has landed (a FIN counts as acknowledged). */
static uint8_t sock_tcp_state(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	switch (s->state) {
	case SDP_S_LISTEN:
		return TCP_LISTEN;
	case SDP_S_RESOLVING:
	case SDP_S_CONNECTING:
		return TCP_SYN_SENT;
	case SDP_S_ESTABLISHED:
		break;
	default:
		return TCP_CLOSE;
	}
	if (!c)
		return TCP_CLOSE;
	bool fin_out = s->shut_wr || c->disconn_sent || (c->ctrl_pending & SDP_CTRL_DISCONN);

	/* Both FINs: TIME_WAIT or, after LAST_ACK, gone; the socket
	 * itself reads CLOSE either way. */
	if (c->disconn_rcvd)
		return fin_out ? TCP_CLOSE : TCP_CLOSE_WAIT;
	if (fin_out)
		return c->disconn_sent ? TCP_FIN_WAIT2 : TCP_FIN_WAIT1;
	return TCP_ESTABLISHED;
}

int sdp_getsockopt(int sd, int level, int name, void *val, socklen_t *len)
{
	struct sdp_sock *s = sock_get(sd);
	int ret = 0, v = 0;

	if (!s)
		return -EBADF;
	if (!len) {
		sock_put(s);
		return -EFAULT;
	}
	if (*len > INT_MAX) {
		sock_put(s);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_ERROR:
			v = take_error(s);
			break;
		case SO_TYPE:
			v = SOCK_STREAM;
			break;
		case SO_DOMAIN:
			v = s->domain;
			break;
		case SO_PROTOCOL:
			v = IPPROTO_TCP;
			break;
		case SO_ACCEPTCONN:
			v = s->state == SDP_S_LISTEN;
			break;
		case SO_RCVBUF:
			v = s->rcvbuf;
			break;
		case SO_SNDBUF:
			v = s->sndbuf;
			break;
		case SO_KEEPALIVE:
			v = s->keepalive;
			break;
		case SO_REUSEADDR:
			v = s->reuseaddr;
			break;
		case SO_REUSEPORT:
			v = s->reuseport;
			break;
		case SO_OOBINLINE:
			v = s->oobinline;
			break;
		case SO_RCVLOWAT:
			v = s->rcvlowat;
			break;
		case SO_SNDLOWAT:
			v = 1;
			break;
		case SO_LINGER:
			ret = opt_out(val, len, &s->linger, sizeof(s->linger));
			goto out;
		case SO_RCVTIMEO:
			ret = opt_out(val, len, &s->rcvtimeo, sizeof(s->rcvtimeo));
			goto out;
		case SO_SNDTIMEO:
			ret = opt_out(val, len, &s->sndtimeo, sizeof(s->sndtimeo));
			goto out;
		default:
			ret = -ENOPROTOOPT;
			goto out;
		}
	} else if (level == IPPROTO_TCP) {
		switch (name) {
		case TCP_NODELAY:
			v = s->nodelay;
			break;
		case TCP_CORK:
			v = s->cork;
			break;
		case TCP_MAXSEG:
			v = s->conn && s->conn->tx_size ? (int)(s->conn->tx_size - SDP_BSDH_LEN)
							 : 536;
			break;
		case TCP_KEEPIDLE:
			v = s->keepidle;
			break;
		case TCP_KEEPINTVL:
			v = s->keepintvl;
			break;
		case TCP_KEEPCNT:
			v = s->keepcnt;
			break;
		case TCP_INFO: {
			/* The state only: the rest is TCP's own accounting. */
			struct tcp_info ti = { .tcpi_state = sock_tcp_state(s) };

			if (!val || !len) {
				ret = -EFAULT;
			} else {
				*len = *len < sizeof(ti) ? *len : (socklen_t)sizeof(ti);
				memcpy(val, &ti, *len);
			}
			goto out;
		}
		default:
			ret = -ENOPROTOOPT;
			goto out;
		}
	} else if (level == SOL_SDP && name == SDP_ZCOPY_THRESH) {
		v = s->zcopy_thresh;
	} else if (level == IPPROTO_IPV6 && name == IPV6_V6ONLY && s->domain == AF_INET6) {
		v = s->v6only;
	} else {
		ret = -ENOPROTOOPT;
		goto out;
	}
	ret = opt_out(val, len, &v, sizeof(v));
out:
	sock_unlock_put(s);
	return ret;
}

int sdp_set_nonblock(int sd, int on)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	s->nonblock = !!on;
	sock_unlock_put(s);
	return 0;
}

int sdp_get_nonblock(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int v;

	if (!s)
		return -EBADF;
	v = s->nonblock;
	sock_unlock_put(s);
	return v;
}

int sdp_nread(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int v = 0;

	if (!s)
		return -EBADF;
	if (s->state == SDP_S_LISTEN)
		v = -EINVAL;
	else if (s->conn) {
		sock_drive(s);
		if (s->conn) {
			uint64_t n = conn_rx_inq(s);

			v = n > INT_MAX ? INT_MAX : (int)n;
		}
	}
	sock_unlock_put(s);
	return v;
}

int sdp_atmark(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int v = 0;

	if (!s)
		return -EBADF;
	if (s->conn) {
		sock_drive(s);
		v = s->conn && conn_at_mark(s->conn);
	}
	sock_unlock_put(s);
	return v;
}

int sdp_set_notify(int sd, void (*fn)(long arg, int band), long arg)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	s->notify = fn;
	s->notify_arg = arg;
	sock_unlock_put(s);
	return 0;
}

int sdp_nwrite(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int v = 0;

	if (!s)
		return -EBADF;
	if (s->state == SDP_S_LISTEN)
		v = -EINVAL;
	else if (s->conn)
		v = s->conn->tx_queued_bytes > INT_MAX ? INT_MAX : (int)s->conn->tx_queued_bytes;
	sock_unlock_put(s);
	return v;
}

const char *sdp_transport_name(int sd)
{
	struct sdp_sock *s = sock_get(sd);
	const char *name = NULL;

	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	if (s->conn && (s->state == SDP_S_ESTABLISHED || s->state == SDP_S_CLOSED))
		name = s->conn->t->name;
	sock_unlock_put(s);
	return name;
}

void sdp_get_stats_size(struct sdp_stats *st, size_t size)
{
	uint64_t *dst = (uint64_t *)st;
	const uint64_t *src = (const uint64_t *)&sdp_global_stats;
	size_t n = size / sizeof(uint64_t), known = sizeof(*st) / sizeof(uint64_t);

	for (size_t i = 0; i < n; i++)
		dst[i] = i < known ? __atomic_load_n(&src[i], __ATOMIC_RELAXED) : 0;
	if (size >= offsetof(struct sdp_stats, fds) + sizeof(st->fds))
		st->fds = (uint64_t)fdspace_count();
}

/* The struct's size when the sized call came (include/sdp.h): fixed, as
 * programs built before it were built with this size at most. */
#define SDP_STATS_SIZE_UNSIZED (offsetof(struct sdp_stats, rx_copied_out) + sizeof(uint64_t))

void(sdp_get_stats)(struct sdp_stats *st)
{
	sdp_get_stats_size(st, SDP_STATS_SIZE_UNSIZED);
}
