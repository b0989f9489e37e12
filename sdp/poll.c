/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The readiness API: sdp_events(), sdp_set_interest(), sdp_poll() and the
 * watches the switch's epoll emulation uses.  The poll mask itself, and
 * the level of a socket's readiness fd, are post.c's (sock_changed()).
 */
#include <errno.h>
#include <limits.h>
#include <sys/epoll.h>
#include <signal.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine.h"
#include "spin.h"
#include "sys.h"

static int events(int sd, bool quiet)
{
	struct sdp_sock *s = sock_lock_sd(sd);
	int ev;

	if (!s)
		return -EBADF;
	if (s->state == SDP_S_LISTEN) {
		listener_progress(s);
	} else if (s->conn) {
		s->drive_quiet = quiet;
		conn_progress(s);
		s->drive_quiet = false;
	}
	conn_end_hold(s);	/* a poller is not waiting in recv() */
	ev = sock_events_locked(s);
	sock_unlock_put(s);
	return ev;
}

int sdp_events(int sd)
{
	return events(sd, false);
}

int sdp_events_quiet(int sd)
{
	return events(sd, true);
}

int sdp_set_interest(int sd, int events)
{
	struct sdp_sock *s = sock_lock_sd(sd);

	if (!s)
		return -EBADF;
	/* POLLOUT would keep the fd readable while merely writable, which
	 * a level-triggered waiter could never sleep through. */
	s->interest = events & ~(POLLOUT | POLLWRNORM);
	conn_end_hold(s);
	sock_changed(s, false);
	sock_unlock_put(s);
	return 0;
}

/*
 * One pass over the engine's entries: fills their revents, returns how
 * many are ready.  Entries that are not engine sockets are left alone
 * (mixed) or get POLLNVAL (sdp_poll).
 */
static int poll_scan(struct pollfd *fds, nfds_t nfds, struct sdp_sock **socks, bool mixed)
{
	int ready = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct sdp_sock *s = socks[i];

		if (fds[i].fd < 0) {
			fds[i].revents = 0;
			continue;
		}
		if (!s) {
			if (!mixed) {
				fds[i].revents = POLLNVAL;
				ready++;
			}
			continue;
		}
		pthread_mutex_lock(&s->lock);
		if (s->state == SDP_S_LISTEN)
			listener_progress(s);
		else if (s->conn)
			conn_progress(s);
		conn_end_hold(s);	/* a poller is not waiting in recv() */
		int ev = sock_events_locked(s) & (fds[i].events | POLLHUP | POLLERR);

		pthread_mutex_unlock(&s->lock);
		fds[i].revents = (short)ev;
		if (ev)
			ready++;
	}
	return ready;
}

/*
 * Parking a connection's fd (progress_park) costs two epoll_ctl calls on
 * the progress thread's set per socket and call: worth it for the few
 * sockets of a request/response loop, not for a large set, where the
 * progress thread waking too is the cheaper evil.  A socket stays parked
 * from the call's first sleep to its end (parked[]), after the scan that
 * drove what woke it: put back right after the sleep, its fd was still
 * readable, and the re-registration woke the progress thread for news
 * this thread was about to read.
 */
#define POLL_PARK_MAX 4

/*
 * Before a sleep: this thread's waker in every engine socket's waiters
 * (another thread's change wakes it), and each socket's transport fds
 * into kfds[*n...] (news from the peer wakes it, and it drives the
 * connection itself on the next scan).  News already pending, or a
 * change since the scan, signals the waker so the sleep ends at once.
 */
static void waiters_add(struct sdp_sock **socks, struct sdp_waiter *w, const struct pollfd *fds,
			nfds_t nfds, int wfd, struct pollfd *kfds, nfds_t *n, bool park,
			bool *parked)
{
	uint64_t one = 1;

	for (nfds_t i = 0; i < nfds; i++) {
		if (!socks[i])
			continue;
		pthread_mutex_lock(&socks[i]->lock);
		w[i].fd = wfd;
		w[i].ep_events = 0;
		w[i].changes = NULL;
		w[i].edges = NULL;
		w[i].gate = NULL;
		w[i].ring_when = 0;
		w[i].epfd = -1;
		w[i].next = socks[i]->waiters;
		socks[i]->waiters = &w[i];
		/* A change between the scan and now must not be missed: look
		 * again under the lock. */
		int ev = sock_events_locked(socks[i]) & (fds[i].events | POLLHUP | POLLERR);
		int m = progress_wait_fds(socks[i], kfds + *n);

		if (m == 1 && park && !parked[i])
			parked[i] = progress_park(socks[i], kfds[*n].fd);
		if (m == 1 && parked[i])
			w[i].ep_events = kfds[*n].events;
		pthread_mutex_unlock(&socks[i]->lock);
		if (m > 0)
			*n += (nfds_t)m;
		if ((ev || m == -EAGAIN) && sys.write(wfd, &one, sizeof(one)) < 0) {
			/* already signalled */
		}
	}
}

static void waiter_unlink(struct sdp_sock *s, struct sdp_waiter *w)
{
	for (struct sdp_waiter **pp = &s->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
}

static void waiters_del(struct sdp_sock **socks, struct sdp_waiter *w, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		if (!socks[i])
			continue;
		pthread_mutex_lock(&socks[i]->lock);
		waiter_unlink(socks[i], &w[i]);
		pthread_mutex_unlock(&socks[i]->lock);
	}
}

static void unpark_all(struct sdp_sock **socks, const bool *parked, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		if (!parked[i])
			continue;
		pthread_mutex_lock(&socks[i]->lock);
		progress_unpark(socks[i]);
		pthread_mutex_unlock(&socks[i]->lock);
	}
}

/*
 * The loop shared by sdp_poll and sdp_ppoll.  deadline: 0 = no timeout;
 * zero_timeout: one scan only.  In mixed mode the kernel polls the other
 * entries in the same sleep.  Before it sleeps the thread polls for a
 * while (common/spin.h); then it sleeps, under sigmask, on the other
 * entries, the engine sockets' transport fds and its waker (which every
 * change of the engine's sockets in the set signals).
 */
static int poll_loop(struct pollfd *fds, nfds_t nfds, uint64_t deadline, bool zero_timeout,
		     const sigset_t *sigmask, bool mixed)
{
	struct sdp_sock **socks;
	struct sdp_waiter *w;
	bool *parked = NULL;	/* socks[i]'s fd parked (waiters_add) */
	bool *accepting = NULL;	/* socks[i] a listener counted accepting */
	struct pollfd *kfds = NULL;
	nfds_t *kidx = NULL, nk = 0, nsdp = 0;
	struct spin sp;
	bool waited = false;	/* sp begun */
	int ret = 0;

	if (nfds > 1024 * 1024)
		return -EINVAL;
	socks = calloc(nfds ? nfds : 1, sizeof(*socks));
	w = calloc(nfds ? nfds : 1, sizeof(*w));
	parked = calloc(nfds ? nfds : 1, sizeof(*parked));
	accepting = calloc(nfds ? nfds : 1, sizeof(*accepting));
	if (!socks || !w || !parked || !accepting) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (nfds_t i = 0; i < nfds; i++) {
		socks[i] = fds[i].fd >= 0 ? sock_get(fds[i].fd) : NULL;
		if (!socks[i])
			continue;
		nsdp++;
		/* Polling a listener for readable is accepting on it. */
		pthread_mutex_lock(&socks[i]->lock);
		if (socks[i]->state == SDP_S_LISTEN && (fds[i].events & POLLIN)) {
			listener_accepting(socks[i], 1);
			accepting[i] = true;
		}
		pthread_mutex_unlock(&socks[i]->lock);
	}
	kfds = calloc(nfds + 1 + nsdp * SDP_MAX_LISTENERS, sizeof(*kfds));
	kidx = calloc(nfds + 1, sizeof(*kidx));
	if (!kfds || !kidx) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (nfds_t i = 0; i < nfds; i++) {
		if (mixed && fds[i].fd >= 0 && !socks[i]) {
			kidx[nk] = i;
			kfds[nk++] = fds[i];
		}
	}

	for (;;) {
		int sready = poll_scan(fds, nfds, socks, mixed);
		int kready = 0, wfd = -1, r;
		bool can_sleep = !sready && !zero_timeout;
		bool spin = false;
		struct timespec ts = { 0, 0 }, *tsp = &ts;
		nfds_t n = nk;

		if (can_sleep && deadline) {
			uint64_t now = sdp_now_ns();

			if (now >= deadline) {
				can_sleep = false;
			} else {
				ts.tv_sec = (time_t)((deadline - now) / 1000000000ull);
				ts.tv_nsec = (long)((deadline - now) % 1000000000ull);
			}
		} else if (can_sleep) {
			tsp = NULL;
		}
		if (can_sleep) {
			if (!waited) {
				spin_begin(&sp);
				waited = true;
			}
			spin = spin_again(&sp);
		}
		if (spin) {
			if (!nk)
				continue;
			ts = (struct timespec){ 0, 0 };
			tsp = &ts;
		} else if (!nk && !can_sleep) {
			ret = sready;
			break;
		}
		if (can_sleep && !spin) {
			wfd = sdp_thread_waker();
			if (wfd < 0) {
				ret = wfd;
				break;
			}
			uint64_t v;

			if (sys.read(wfd, &v, sizeof(v)) < 0) {
				/* nothing stale */
			}
			waiters_add(socks, w, fds, nfds, wfd, kfds, &n, nsdp <= POLL_PARK_MAX,
				    parked);
			kfds[n++] = (struct pollfd){ .fd = wfd, .events = POLLIN };
			spin_sleeping(&sp);
		}
		r = sys.ppoll(kfds, n, tsp, sigmask);
		int err = errno;

		if (wfd >= 0)
			waiters_del(socks, w, nfds);
		if (r < 0) {
			ret = -err;
			break;
		}
		for (nfds_t k = 0; k < nk; k++) {
			fds[kidx[k]].revents = kfds[k].revents;
			if (kfds[k].revents)
				kready++;
		}
		if (sready || kready) {
			bool engine_woke = false;

			for (nfds_t k = nk; k < n; k++)
				engine_woke = engine_woke || kfds[k].revents;
			/* The engine's side as of now, if it spoke too. */
			if (!sready && engine_woke)
				sready = poll_scan(fds, nfds, socks, mixed);
			ret = sready + kready;
			break;
		}
		if (!can_sleep) {
			ret = 0;
			break;
		}
	}
	if (waited)
		spin_end(&sp, ret > 0);
	unpark_all(socks, parked, nfds);
out_free:
	if (socks) {
		for (nfds_t i = 0; i < nfds; i++) {
			if (!socks[i])
				continue;
			if (accepting && accepting[i]) {
				pthread_mutex_lock(&socks[i]->lock);
				listener_accepting(socks[i], -1);
				pthread_mutex_unlock(&socks[i]->lock);
			}
			sock_put(socks[i]);
		}
	}
	free(socks);
	free(w);
	free(parked);
	free(accepting);
	free(kfds);
	free(kidx);
	return ret;
}

int sdp_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms)
{
	uint64_t deadline = timeout_ms > 0 ? sdp_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;

	return poll_loop(fds, nfds, deadline, timeout_ms == 0, NULL, false);
}

int sdp_ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
	      const sigset_t *sigmask)
{
	uint64_t deadline = 0;
	bool zero = false;

	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L)
			return -EINVAL;
		zero = !timeout->tv_sec && !timeout->tv_nsec;
		deadline = sdp_now_ns() + (uint64_t)timeout->tv_sec * 1000000000ull +
			   (uint64_t)timeout->tv_nsec;
	}
	return poll_loop(fds, nfds, deadline, zero, sigmask, true);
}

/* --- watches ------------------------------------------------------------------ */

struct sdp_watch {
	struct sdp_sock *s;	/* holds a reference */
	struct sdp_waiter w;
	atomic_uint changes, edges;
};

struct sdp_watch *sdp_watch_add(int sd, int efd, int *err)
{
	struct sdp_watch *wa;
	struct sdp_sock *s = sock_get(sd);

	if (!s) {
		*err = -EBADF;
		return NULL;
	}
	wa = calloc(1, sizeof(*wa));
	if (!wa) {
		sock_put(s);
		*err = -ENOMEM;
		return NULL;
	}
	wa->s = s;
	atomic_init(&wa->changes, 0);
	atomic_init(&wa->edges, 0);
	wa->w.fd = efd;
	wa->w.changes = &wa->changes;
	wa->w.edges = &wa->edges;
	wa->w.epfd = -1;
	pthread_mutex_lock(&s->lock);
	wa->w.next = s->waiters;
	s->waiters = &wa->w;
	/* A listener in an epoll set: this process is accepting on it. */
	if (s->state == SDP_S_LISTEN) {
		wa->w.accepting_gen = sock_generation() + 1;
		listener_accepting(s, 1);
	}
	pthread_mutex_unlock(&s->lock);
	*err = 0;
	return wa;
}

unsigned sdp_watch_changes(const struct sdp_watch *wa)
{
	return atomic_load(&wa->changes);
}

unsigned sdp_watch_edges(const struct sdp_watch *wa)
{
	return atomic_load(&wa->edges);
}

int sdp_watch_fds(struct sdp_watch *wa, int epfd, uint64_t key)
{
	pthread_mutex_lock(&wa->s->lock);
	for (int i = 0; i < wa->w.nreg; i++)
		(void)sys.epoll_ctl(wa->w.epfd, EPOLL_CTL_DEL, wa->w.reg_fd[i], NULL);
	wa->w.epfd = epfd;
	wa->w.key = key;
	wa->w.nreg = 0;
	progress_watch_sync(wa->s);
	pthread_mutex_unlock(&wa->s->lock);
	return 0;
}

void sdp_watch_mute(int efd)
{
	sock_muted_efd = efd;
}

void sdp_watch_gate(struct sdp_watch *wa, struct sdp_watch_gate *g)
{
	pthread_mutex_lock(&wa->s->lock);
	wa->w.gate = g;
	pthread_mutex_unlock(&wa->s->lock);
}

void sdp_watch_ring_when(struct sdp_watch *wa, int events)
{
	unsigned when = events == -1 ? 0 : RING_FILTERED | ((unsigned)events & 0xffffu);

	__atomic_store_n(&wa->w.ring_when, when, __ATOMIC_SEQ_CST);
}

void sdp_watch_del(struct sdp_watch *wa)
{
	if (!wa)
		return;
	pthread_mutex_lock(&wa->s->lock);
	for (int i = 0; i < wa->w.nreg; i++)
		(void)sys.epoll_ctl(wa->w.epfd, EPOLL_CTL_DEL, wa->w.reg_fd[i], NULL);
	waiter_unlink(wa->s, &wa->w);
	if (wa->w.accepting_gen == sock_generation() + 1)
		listener_accepting(wa->s, -1);
	pthread_mutex_unlock(&wa->s->lock);
	sock_put(wa->s);
	free(wa);
}
