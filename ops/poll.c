/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * poll, ppoll, select and pselect over any mix of native and SDP fds.
 *
 * The application's set is translated for sdp_ppoll(): an SDP socket
 * becomes its engine sd, a "both" listener becomes two entries (its
 * kernel socket and its SDP listener) whose results are merged, anything
 * else stays as it is; the engine then sleeps on all of it at once.  A
 * set without an SDP fd in it goes to libc untouched.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "sdp.h"
#include "sock.h"

static bool connecting(const struct ops_sock *s)
{
	return s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY;
}

/* Does fd need the engine to be waited for? */
static bool needs_engine(int fd)
{
	if (!ops_fd_is_ours(fd))
		return false;
	struct ops_sock *s = ops_fd_get(fd);
	bool yes = false;

	if (s) {
		/* Interest in a held connection claims it (relay.c). */
		if (atomic_load(&s->held))
			ops_hold_claim(fd, s);
		yes = !s->inherited && !s->relayed && s->sd >= 0 &&
		      (s->stack == OPS_STACK_SDP || s->stack == OPS_STACK_BOTH);
		ops_sock_put(s);
	}
	return yes;
}

struct xlate {
	struct pollfd *t;	/* what the engine polls */
	nfds_t *from;		/* t[k] answers for fds[from[k]] */
	struct ops_sock **sock;	/* fds[i]'s socket (a reference) or NULL */
	nfds_t n;
};

static void xlate_free(struct xlate *x, nfds_t nfds)
{
	if (x->sock)
		for (nfds_t i = 0; i < nfds; i++)
			if (x->sock[i])
				ops_sock_put(x->sock[i]);
	free(x->t);
	free(x->from);
	free(x->sock);
}

/* Build the engine's set; returns the earliest fallback deadline of a
 * connect in flight (0 if none). */
static uint64_t xlate_build(struct xlate *x, const struct pollfd *fds, nfds_t nfds)
{
	uint64_t first_deadline = 0;

	x->n = 0;
	for (nfds_t i = 0; i < nfds; i++) {
		struct ops_sock *s = x->sock[i];
		int fd = fds[i].fd;

		if (s && connecting(s))
			ops_connect_advance(fd, s);
		if (s && connecting(s)) {
			uint64_t d = ops_connect_deadline(s);

			if (d && (!first_deadline || d < first_deadline))
				first_deadline = d;
		}
		/* Rebuilt on every round: a socket relayed by a fork in
		 * another thread is polled as the kernel's from then on. */
		bool sdp = s && !s->inherited && !s->relayed && s->sd >= 0;

		if (sdp && s->stack == OPS_STACK_BOTH) {
			x->t[x->n] = (struct pollfd){ .fd = fd, .events = fds[i].events };
			x->from[x->n++] = i;
			x->t[x->n] = (struct pollfd){ .fd = s->sd, .events = fds[i].events };
			x->from[x->n++] = i;
		} else if (sdp && s->stack == OPS_STACK_SDP) {
			x->t[x->n] = (struct pollfd){ .fd = s->sd, .events = fds[i].events };
			x->from[x->n++] = i;
		} else {
			x->t[x->n] = fds[i];
			x->from[x->n++] = i;
		}
	}
	return first_deadline;
}

int ops_ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
	      const sigset_t *sigmask)
{
	bool need = false;

	/* Every fd is looked at: a held one is claimed. */
	for (nfds_t i = 0; i < nfds; i++)
		need |= fds[i].fd >= 0 &&
			(needs_engine(fds[i].fd) || ops_fd_is_emulated_epoll(fds[i].fd));
	if (!need)
		return OPS_PASS;
	if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 ||
			timeout->tv_nsec >= 1000000000L))
		return -EINVAL;

	struct xlate x = { 0 };
	int ret;

	x.t = calloc(2 * nfds, sizeof(*x.t));
	x.from = calloc(2 * nfds, sizeof(*x.from));
	x.sock = calloc(nfds, sizeof(*x.sock));
	if (!x.t || !x.from || !x.sock) {
		xlate_free(&x, nfds);
		return -ENOMEM;
	}
	for (nfds_t i = 0; i < nfds; i++)
		x.sock[i] = fds[i].fd >= 0 ? ops_fd_get(fds[i].fd) : NULL;

	bool zero = timeout && !timeout->tv_sec && !timeout->tv_nsec;
	uint64_t deadline = timeout && !zero ? ops_now_ns() + (uint64_t)timeout->tv_sec * 1000000000ull +
						       (uint64_t)timeout->tv_nsec
					     : 0;

	for (;;) {
		/* An epoll fd with SDP members is readable exactly when one
		 * would be reported (its doorbell only hints). */
		for (nfds_t i = 0; i < nfds; i++)
			if (fds[i].fd >= 0 && ops_fd_is_emulated_epoll(fds[i].fd))
				ops_epoll_settle(fds[i].fd);
		uint64_t cdl = xlate_build(&x, fds, nfds);
		uint64_t wake = deadline;

		if (cdl && (!wake || cdl < wake))
			wake = cdl;
		struct timespec ts = { 0, 0 };
		struct timespec *tsp = zero ? &ts : ops_timeout_until(wake, &ts);

		ret = sdp_ppoll(x.t, x.n, tsp, sigmask);
		if (ret < 0)
			break;
		for (nfds_t i = 0; i < nfds; i++)
			fds[i].revents = 0;
		for (nfds_t k = 0; k < x.n; k++) {
			nfds_t i = x.from[k];
			struct ops_sock *s = x.sock[i];

			/* A connect that may still fall back is not done
			 * until ops_connect_advance() says so. */
			if (s && connecting(s) && x.t[k].revents) {
				ops_connect_advance(fds[i].fd, s);
				if (connecting(s) || s->stack != OPS_STACK_SDP)
					continue;
			}
			fds[i].revents |= x.t[k].revents;
			if (s && s->conn_error && x.t[k].revents)
				fds[i].revents |= POLLERR;	/* a failed connect */
		}
		for (nfds_t i = 0; i < nfds; i++) {
			if (!(fds[i].revents & POLLIN) || !ops_fd_is_emulated_epoll(fds[i].fd))
				continue;
			struct pollfd q = { .fd = fds[i].fd, .events = POLLIN };

			ops_epoll_settle(fds[i].fd);
			if (sys.poll(&q, 1, 0) <= 0 || !(q.revents & POLLIN))
				fds[i].revents &= (short)~(POLLIN | POLLRDNORM);
		}
		ret = 0;
		for (nfds_t i = 0; i < nfds; i++)
			if (fds[i].revents)
				ret++;
		if (ret || zero)
			break;
		if (deadline && ops_now_ns() >= deadline)
			break;
	}
	xlate_free(&x, nfds);
	return ret;
}

/* select(2)'s view of poll bits, as the kernel defines it. */
#define SEL_IN (POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR)
#define SEL_OUT (POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR)
#define SEL_EX (POLLPRI)

int ops_pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *timeout,
		const sigset_t *sigmask)
{
	bool need = false;
	nfds_t n = 0;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return OPS_PASS;	/* libc gives the error */
	for (int fd = 0; fd < nfds; fd++) {
		if ((rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr)) || (ex && FD_ISSET(fd, ex))) {
			n++;
			if (needs_engine(fd) || ops_fd_is_emulated_epoll(fd))
				need = true;	/* every fd: a held one is claimed */
		}
	}
	if (!need)
		return OPS_PASS;

	struct pollfd *p = calloc(n, sizeof(*p));

	if (!p)
		return -ENOMEM;
	n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN | POLLRDNORM | POLLRDBAND;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT | POLLWRNORM | POLLWRBAND;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	uint64_t start = ops_now_ns();
	int r = ops_ppoll(p, n, timeout, sigmask);

	if (r >= 0) {
		for (nfds_t i = 0; i < n; i++) {
			if (p[i].revents & POLLNVAL) {
				r = -EBADF;
				break;
			}
		}
	}
	if (r >= 0) {
		fd_set in, out, exc;
		int count = 0;

		FD_ZERO(&in);
		FD_ZERO(&out);
		FD_ZERO(&exc);
		for (nfds_t i = 0; i < n; i++) {
			int fd = p[i].fd;
			short re = p[i].revents;

			if (rd && FD_ISSET(fd, rd) && (re & SEL_IN)) {
				FD_SET(fd, &in);
				count++;
			}
			if (wr && FD_ISSET(fd, wr) && (re & SEL_OUT)) {
				FD_SET(fd, &out);
				count++;
			}
			if (ex && FD_ISSET(fd, ex) && (re & SEL_EX)) {
				FD_SET(fd, &exc);
				count++;
			}
		}
		if (rd)
			memcpy(rd, &in, sizeof(fd_set));
		if (wr)
			memcpy(wr, &out, sizeof(fd_set));
		if (ex)
			memcpy(ex, &exc, sizeof(fd_set));
		r = count;
	}
	/* select() tells how much of the timeout is left, as Linux does
	 * (pselect's caller passes a copy). */
	if (timeout && (timeout->tv_sec || timeout->tv_nsec)) {
		uint64_t total = (uint64_t)timeout->tv_sec * 1000000000ull + (uint64_t)timeout->tv_nsec;
		uint64_t used = ops_now_ns() - start;
		uint64_t left = used >= total ? 0 : total - used;

		timeout->tv_sec = (time_t)(left / 1000000000ull);
		timeout->tv_nsec = (long)(left % 1000000000ull);
	}
	free(p);
	return r;
}
