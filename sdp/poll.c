/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Readiness: the poll mask of a socket computed the way tcp_poll() does,
 * the level of its readiness fd, and sdp_poll().
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine.h"

int sock_events_locked(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	int ev = 0;

	switch (s->state) {
	case SDP_S_NEW:
		/* A socket that is neither connected nor listening is
		 * "closed" to tcp_poll(): writable and hung up. */
		return POLLOUT | POLLWRNORM | POLLHUP;
	case SDP_S_LISTEN:
		return s->acceptq_len ? POLLIN | POLLRDNORM : 0;
	case SDP_S_RESOLVING:
	case SDP_S_CONNECTING:
		return 0;
	case SDP_S_CLOSED:
		ev = POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM | POLLHUP;
		if (s->so_error)
			ev |= POLLERR;
		return ev;
	case SDP_S_ESTABLISHED:
		break;
	}
	bool rd_shut = s->shut_rd || c->disconn_rcvd;
	bool wr_shut = s->shut_wr || c->disconn_sent || (c->ctrl_pending & SDP_CTRL_DISCONN);

	if (c->rx_bytes || rd_shut)
		ev |= POLLIN | POLLRDNORM;
	if (rd_shut)
		ev |= POLLRDHUP;
	/* A shut sending side is "writable" so that send() reports EPIPE. */
	if (wr_shut || conn_writable(s))
		ev |= POLLOUT | POLLWRNORM;
	if (rd_shut && wr_shut)
		ev |= POLLHUP;
	if (s->so_error)
		ev |= POLLERR;
	return ev;
}

void sock_changed(struct sdp_sock *s, bool edge)
{
	uint64_t one = 1, v;

	for (struct sdp_waiter *w = s->waiters; w; w = w->next) {
		if (write(w->fd, &one, sizeof(one)) < 0) {
			/* Counter saturated: the waiter wakes anyway. */
		}
	}
	if (s->sd < 0)
		return;
	bool ready = sock_events_locked(s) & (s->interest | POLLHUP | POLLERR);

	if (ready && (!s->fd_level || edge)) {
		if (write(s->sd, &one, sizeof(one)) == sizeof(one))
			s->fd_level = true;
	} else if (!ready && s->fd_level) {
		if (read(s->sd, &v, sizeof(v)) < 0) {
			/* Already drained. */
		}
		s->fd_level = false;
	}
}

int sdp_events(int sd)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ev;

	if (!s)
		return -EBADF;
	if (s->state == SDP_S_LISTEN)
		listener_progress(s);
	else if (s->conn)
		conn_progress(s);
	ev = sock_events_locked(s);
	sock_unlock_put(s);
	return ev;
}

int sdp_set_interest(int sd, int events)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	/* POLLOUT would keep the fd readable while merely writable, which
	 * a level-triggered waiter could never sleep through. */
	s->interest = events & ~(POLLOUT | POLLWRNORM);
	sock_changed(s, false);
	sock_unlock_put(s);
	return 0;
}

/* One pass over fds: fills revents, returns how many are ready. */
static int poll_scan(struct pollfd *fds, nfds_t nfds, struct sdp_sock **socks)
{
	int ready = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct sdp_sock *s = socks[i];

		fds[i].revents = 0;
		if (fds[i].fd < 0)
			continue;
		if (!s) {
			fds[i].revents = POLLNVAL;
			ready++;
			continue;
		}
		pthread_mutex_lock(&s->lock);
		if (s->state == SDP_S_LISTEN)
			listener_progress(s);
		else if (s->conn)
			conn_progress(s);
		int ev = sock_events_locked(s) & (fds[i].events | POLLHUP | POLLERR);

		pthread_mutex_unlock(&s->lock);
		fds[i].revents = (short)ev;
		if (ev)
			ready++;
	}
	return ready;
}

int sdp_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms)
{
	struct sdp_sock **socks;
	struct sdp_waiter *w;
	uint64_t deadline = timeout_ms > 0 ? sdp_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
	int ret, wfd;

	if (nfds > 1024 * 1024)
		return -EINVAL;
	socks = calloc(nfds ? nfds : 1, sizeof(*socks));
	w = calloc(nfds ? nfds : 1, sizeof(*w));
	if (!socks || !w) {
		free(socks);
		free(w);
		return -ENOMEM;
	}
	for (nfds_t i = 0; i < nfds; i++)
		socks[i] = fds[i].fd >= 0 ? sock_get(fds[i].fd) : NULL;

	for (;;) {
		ret = poll_scan(fds, nfds, socks);
		if (ret || timeout_ms == 0)
			break;
		if (deadline && sdp_now_ns() >= deadline)
			break;
		wfd = sdp_thread_waker();
		if (wfd < 0) {
			ret = wfd;
			break;
		}
		uint64_t v;

		if (read(wfd, &v, sizeof(v)) < 0) {
			/* nothing stale */
		}
		for (nfds_t i = 0; i < nfds; i++) {
			if (!socks[i])
				continue;
			pthread_mutex_lock(&socks[i]->lock);
			w[i].fd = wfd;
			w[i].next = socks[i]->waiters;
			socks[i]->waiters = &w[i];
			/* A change between the scan and now must not be
			 * missed: look again under the lock. */
			int ev = sock_events_locked(socks[i]) & (fds[i].events | POLLHUP | POLLERR);

			pthread_mutex_unlock(&socks[i]->lock);
			if (ev) {
				uint64_t one = 1;

				if (write(wfd, &one, sizeof(one)) < 0) {
					/* already signalled */
				}
			}
		}
		struct pollfd p = { .fd = wfd, .events = POLLIN };
		int ms = -1;

		if (deadline) {
			uint64_t now = sdp_now_ns();

			ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		}
		int r = poll(&p, 1, ms);
		int err = errno;

		for (nfds_t i = 0; i < nfds; i++) {
			if (!socks[i])
				continue;
			pthread_mutex_lock(&socks[i]->lock);
			for (struct sdp_waiter **pp = &socks[i]->waiters; *pp; pp = &(*pp)->next) {
				if (*pp == &w[i]) {
					*pp = w[i].next;
					break;
				}
			}
			pthread_mutex_unlock(&socks[i]->lock);
		}
		if (r < 0 && err == EINTR) {
			ret = -EINTR;
			break;
		}
	}
	for (nfds_t i = 0; i < nfds; i++)
		if (socks[i])
			sock_put(socks[i]);
	free(socks);
	free(w);
	return ret;
}
