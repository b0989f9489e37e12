/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * epoll over any mix of native and SDP sockets.
 *
 * The application's epoll fd stays a real epoll instance: native sockets
 * are registered in it as usual and the kernel reports them.  An SDP
 * socket cannot be (its readiness is the engine's), so for an epoll fd
 * that has SDP members the switch keeps a record (struct ops_ep) with:
 *   - a doorbell eventfd, registered in the epoll set itself, that the
 *     engine rings on every change of an SDP member (sdp_watch_add); so
 *     the epoll fd becomes readable for a poll() on it, and a thread
 *     asleep in epoll_wait wakes up;
 *   - the members (struct ops_epi) with the application's events and
 *     data: level-triggered ones are reported while ready, edge-triggered
 *     ones once per change, one-shot ones once until EPOLL_CTL_MOD.
 * epoll_wait then reports the SDP members (scanned) and the kernel's
 * events in one array.  The doorbell and the kernel half of a "both"
 * listener carry our own marker as epoll data (a pointer with a tag bit)
 * and are never shown to the application.
 *
 * The engine also registers each SDP member's transport fds in the set
 * (sdp_watch_fds), with a third marker: a thread asleep in epoll_wait is
 * woken by the transport itself and drives the member in its report, and
 * the engine's progress thread, registered after the set with
 * EPOLLEXCLUSIVE, is woken only when no thread sleeps here
 * (doc/fastpath.md, step 4).  The doorbell is then for the changes other
 * threads make (a send() in one thread freeing space a waiter in another
 * waits for, or the progress thread's); the reporting thread's own
 * changes do not ring it (sdp_watch_mute), and nothing rings it while
 * no thread sleeps in the set (sdp_watch_gate: the thread making the
 * change is the one that reports next, and its report finds the change
 * through the member's counter).  A socket registered before
 * its stack is chosen (socket, epoll_ctl, then connect) is a native
 * member until then, and moves when the stack is known (restack).
 *
 * This file is that registry: the memberships, kept right as sockets
 * change stack, are relayed or go away (the switch, relay.c, the fd
 * table call it), and what the members report.  It knows sockets but not
 * the fd table, nor how a connect in flight is settled: the application's
 * calls, epoll_ctl and epoll_wait, are epoll.c, above the switch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fdmap.h"
#include "fdspace.h"
#include "log.h"
#include "ops.h"
#include "sdp.h"
#include "stats.h"
#include "sock.h"
#include "sys.h"

#define LOGSYS "epoll"

enum epi_mode {
	EPI_NATIVE,		/* registered in the kernel with the app's data */
	EPI_SDP,		/* watched on the engine */
	EPI_BOTH,		/* a "both" listener: kernel half (marker) + engine half */
};

struct ops_ep;

struct ops_epi {
	struct ops_ep *ep;
	struct ops_sock *sock;	/* no reference: ops_epoll_forget() unlinks */
	int fd;			/* the fd given to EPOLL_CTL_ADD */
	uint32_t events;	/* the application's, EPOLLET/ONESHOT included */
	epoll_data_t data;
	enum epi_mode mode;
	bool disabled;		/* EPOLLONESHOT fired */
	/* EPOLLET: the events seen at the last scan, and the arrivals
	 * (sdp_watch_edges) already reported.  A member is reported when
	 * an event appears that was not there, or when new data (or a
	 * connection) arrived: what wakes an edge-triggered waiter on
	 * Linux, where space freed on the send side does not re-report
	 * EPOLLIN. */
	uint32_t last_mask;
	unsigned seen_edges;
	/* The ready list (doc/fastpath.md): a member is looked at (driven
	 * and asked for its events) only if it is new or re-armed (look),
	 * was ready at the last report (level-triggered: reported while
	 * ready), or changed since (every change of an engine socket bumps
	 * its watch's counter, sock_changed()).  The others cannot have
	 * anything to report, and looking costs a lock and a transport
	 * poll each. */
	bool look, was_ready;
	unsigned seen_changes;
	struct sdp_watch *watch;
	struct ops_epi *next_in_ep, *next_in_sock;
	struct ops_epi **pprev_in_ep;	/* what points at this one: unlinked in O(1) */
	struct ops_epi *next_in_hash;	/* ops_ep.watched */
};

struct ops_ep {
	int epfd;
	int doorbell;
	int ref;		/* registry table + epoll_wait callers */
	struct ops_epi *members;
	/* The members with a watch, by address: a key the kernel gives
	 * back (source_marker) is one of ours only if it is here, and the
	 * lookup must not cost a walk of every member per event. */
	struct ops_epi **watched;
	unsigned nwatched, watched_cap;	/* cap: 0 or a power of two */
	bool indirect;		/* too many for sdp_watch_fds (EPSET_DIRECT_MAX) */
	/* The threads asleep in epoll_wait on the set, which the members'
	 * changes must wake, and the changes made meanwhile (the engine
	 * writes the doorbell only while sleepers is not 0).  open: the
	 * set counts one sleeper for good, because something we do not
	 * see may wait on epfd (epset_open()). */
	struct sdp_watch_gate gate;
	bool open;
	/* shown: an outer epoll set holds epfd, or a poll() or select()
	 * looked at it.  Those see the kernel's readiness of epfd only,
	 * which must then mean that a member would be reported, as on
	 * Linux: no transport fd in the set (its news may report
	 * nothing, a credit update), a doorbell that rings only for a
	 * member that is ready (sdp_watch_ring_when()), and no ring for
	 * a member added or re-armed that is not. */
	bool shown;
};

/*
 * A set wakes on its SDP members' transports (sdp_watch_fds) while it has
 * at most this many of them, and again once it is down to half.  A
 * thread woken per arrival reports a member or two at a time; with many
 * busy members the progress thread, which drives a batch per wakeup and
 * rings the doorbell once, kept the application's batches larger: redis
 * GET with 50 clients lost a quarter of its rate on the 2-core test
 * machine with every member registered (doc/fastpath.md, step 4).
 */
#define EPSET_DIRECT_MAX 8

/* The registry: reg_lock protects every ops_ep and ops_epi, and each
 * socket's epis list.  Order: an ops_sock lock, then reg_lock. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fdmap eps;

/* The epoll fds the application made (ops_epoll_created()), by number:
 * MADE, or MADE_NESTED once added to an epoll set before it had SDP
 * members (ops_epoll_added()), so that the set is shown from its start. */
static struct fdmap made;
#define MADE ((void *)1)
#define MADE_NESTED ((void *)2)

static fdmap_slot_t *ep_slot(int fd, bool create)
{
	return fdmap_slot(&eps, fd, create);
}

bool ops_fd_is_emulated_epoll(int fd)
{
	return fdmap_peek(&eps, fd) != NULL;
}

int ops_epoll_end(void)
{
	return fdmap_end(&eps);
}

static uint64_t doorbell_marker(const struct ops_ep *ep)
{
	return (uint64_t)(uintptr_t)ep | 1;
}

static uint64_t both_marker(const struct ops_epi *epi)
{
	return (uint64_t)(uintptr_t)epi | 2;
}

static uint64_t source_marker(const struct ops_epi *epi)
{
	return (uint64_t)(uintptr_t)epi | 4;
}

static void ring(struct ops_ep *ep)
{
	uint64_t one = 1;

	ops_stats_count(OPS_C_EPOLL_RINGS, 1);
	if (sys.write(ep->doorbell, &one, sizeof(one)) < 0) {
		/* saturated: it is ringing anyway */
	}
}

static void drain(struct ops_ep *ep)
{
	uint64_t v;

	if (sys.read(ep->doorbell, &v, sizeof(v)) < 0) {
		/* was not ringing */
	}
	/* After the read: a change between the two, which did not ring,
	 * is one the caller's look at the members, next, sees. */
	__atomic_store_n(&ep->gate.rung, 0, __ATOMIC_SEQ_CST);
}

static void settle_locked(struct ops_ep *ep);
static uint32_t member_report(struct ops_epi *epi, bool update);
static void direct_update(struct ops_ep *ep, struct ops_epi *added);

/* What a member's change must meet to ring the doorbell of a shown set:
 * the events it would report. */
static int ring_mask(const struct ops_epi *epi)
{
	if (epi->disabled)
		return 0;
	return (int)((epi->events & ~(EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)) |
		     EPOLLHUP | EPOLLERR);
}

static void ring_filter(struct ops_epi *epi)
{
	if (epi->watch && epi->ep->shown)
		sdp_watch_ring_when(epi->watch, ring_mask(epi));
}

/* Something other than our epoll_wait may wait on ep's epfd: a forked
 * process sharing it, or (shown) a poll() or select() of it, another
 * epoll set it is a member of.  It must hear of every change, so the
 * doorbell rings for each, as if a thread slept in the set all the
 * time.  reg_lock. */
static void epset_open(struct ops_ep *ep, bool shown)
{
	if (!ep->open) {
		ep->open = true;
		__atomic_fetch_add(&ep->gate.sleepers, 1, __ATOMIC_SEQ_CST);
	}
	/* Not at a fork (the members' locks are not to be taken there):
	 * the process's own threads report the set as before, and the
	 * other process's waiters hear of what changes from now on. */
	if (!shown || ep->shown)
		return;
	ep->shown = true;
	direct_update(ep, NULL);
	for (struct ops_epi *epi = ep->members; epi; epi = epi->next_in_ep)
		ring_filter(epi);
	/* What changed while it was closed made no noise: epfd readable
	 * now if a member would be reported. */
	settle_locked(ep);
}

static void epset_open_each(int fd, void *value, void *shown)
{
	(void)fd;
	epset_open(value, shown != NULL);
}

/* A member added, re-armed or restacked: looked at by the next report;
 * a thread asleep in the set is woken to do it.  A shown set's epfd
 * must not turn readable for a member that has nothing to report. */
static void announce(struct ops_epi *epi)
{
	struct ops_ep *ep = epi->ep;

	epi->look = true;
	if (!ep->shown)
		ring(ep);
	else if (member_report(epi, false))
		ring(ep);
}

static void ep_put_locked(struct ops_ep *ep)
{
	if (--ep->ref)
		return;
	fdspace_close(ep->doorbell);
	free(ep->watched);
	free(ep);
}

static unsigned ptr_slot(const struct ops_epi *epi, unsigned cap)
{
	return (unsigned)(((uint64_t)(uintptr_t)epi * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

static unsigned watched_slot(const struct ops_ep *ep, const struct ops_epi *epi)
{
	return ptr_slot(epi, ep->watched_cap);
}

/* false: no memory (the member then has no transport registration and
 * is woken through the doorbell, as the progress thread drives it). */
static bool watched_add(struct ops_ep *ep, struct ops_epi *epi)
{
	if (ep->nwatched >= ep->watched_cap) {
		unsigned cap = ep->watched_cap ? ep->watched_cap * 2 : 16;
		struct ops_epi **t = calloc(cap, sizeof(*t));

		if (!t)
			return false;
		for (unsigned i = 0; i < ep->watched_cap; i++) {
			while (ep->watched[i]) {
				struct ops_epi *e = ep->watched[i];

				ep->watched[i] = e->next_in_hash;
				e->next_in_hash = t[ptr_slot(e, cap)];
				t[ptr_slot(e, cap)] = e;
			}
		}
		free(ep->watched);
		ep->watched = t;
		ep->watched_cap = cap;
	}
	unsigned k = watched_slot(ep, epi);

	epi->next_in_hash = ep->watched[k];
	ep->watched[k] = epi;
	ep->nwatched++;
	return true;
}

static void watched_del(struct ops_ep *ep, struct ops_epi *epi)
{
	if (!ep->watched_cap)
		return;
	for (struct ops_epi **pp = &ep->watched[watched_slot(ep, epi)]; *pp; pp = &(*pp)->next_in_hash)
		if (*pp == epi) {
			*pp = epi->next_in_hash;
			ep->nwatched--;
			return;
		}
}

/* After a member with a watch came (added) or went (NULL): whether the
 * set's transport registrations are on, and this one's. */
static void direct_update(struct ops_ep *ep, struct ops_epi *added)
{
	/* A shown set is woken through its doorbell only. */
	bool indirect = ep->shown || (ep->indirect ? ep->nwatched > EPSET_DIRECT_MAX / 2
						   : ep->nwatched > EPSET_DIRECT_MAX);

	if (indirect != ep->indirect) {
		ep->indirect = indirect;
		for (struct ops_epi *epi = ep->members; epi; epi = epi->next_in_ep)
			if (epi->watch && epi != added)
				(void)sdp_watch_fds(epi->watch, indirect ? -1 : ep->epfd,
						    source_marker(epi));
	}
	if (added && !indirect)
		(void)sdp_watch_fds(added->watch, ep->epfd, source_marker(added));
}

/* The member whose source_marker() is d, or NULL. */
static struct ops_epi *watched_find(struct ops_ep *ep, uint64_t d)
{
	struct ops_epi *want = (struct ops_epi *)(uintptr_t)(d & ~(uint64_t)7);

	if (!ep->watched_cap)
		return NULL;
	for (struct ops_epi *e = ep->watched[watched_slot(ep, want)]; e; e = e->next_in_hash)
		if (e == want)
			return e;
	return NULL;
}

/* Members looked at (sdp_events()) by this thread's report, for the
 * epoll_looks counter: a report looks at the members that can have news,
 * not at every member (doc/fastpath.md, step 3). */
static __thread unsigned epset_looks;

static void looks_flush(void)
{
	if (epset_looks) {
		ops_stats_count(OPS_C_EPOLL_LOOKS, epset_looks);
		epset_looks = 0;
	}
}

/* --- membership changes (reg_lock held) ------------------------------------------- */

static enum epi_mode mode_of(const struct ops_sock *s)
{
	if (s->inherited || s->relayed || s->sd < 0)
		return EPI_NATIVE;
	if (s->stack == OPS_STACK_SDP)
		return EPI_SDP;
	if (s->stack == OPS_STACK_BOTH)
		return EPI_BOTH;
	return EPI_NATIVE;
}

/* The kernel half's registration. */
static int native_part(struct ops_epi *epi, int op)
{
	struct epoll_event ev = { .events = epi->events, .data = epi->data };

	if (epi->mode == EPI_BOTH) {
		/* Our marker; one-shot is ours to apply to both halves. */
		ev.events &= ~EPOLLONESHOT;
		if (epi->disabled)
			ev.events = 0;
		ev.data.u64 = both_marker(epi);
	}
	return sys.epoll_ctl(epi->ep->epfd, op, epi->fd, op == EPOLL_CTL_DEL ? NULL : &ev) < 0
		       ? -errno
		       : 0;
}

/* Put epi in place for its mode: kernel registration and/or watch. */
static int epi_attach(struct ops_epi *epi)
{
	int r = 0;

	if (epi->mode != EPI_SDP) {
		r = native_part(epi, EPOLL_CTL_ADD);
		if (r < 0)
			return r;
	}
	if (epi->mode != EPI_NATIVE) {
		epi->watch = sdp_watch_add(epi->sock->sd, epi->ep->doorbell, &r);
		if (!epi->watch) {
			if (epi->mode == EPI_BOTH)
				(void)native_part(epi, EPOLL_CTL_DEL);
			return r;
		}
		sdp_watch_gate(epi->watch, &epi->ep->gate);
		ring_filter(epi);
		if (watched_add(epi->ep, epi))
			direct_update(epi->ep, epi);
		/* Linux reports an edge-triggered member that is ready when
		 * it is added: every ready event is new to the first scan. */
		epi->last_mask = 0;
		epi->seen_edges = sdp_watch_edges(epi->watch);
		announce(epi);
	}
	return 0;
}

static void epi_detach(struct ops_epi *epi)
{
	if (epi->mode != EPI_SDP)
		(void)native_part(epi, EPOLL_CTL_DEL);
	if (epi->watch) {
		watched_del(epi->ep, epi);
		sdp_watch_del(epi->watch);
		epi->watch = NULL;
		direct_update(epi->ep, NULL);
	}
}

static void epi_unlink(struct ops_epi *epi)
{
	struct ops_epi **pp;

	*epi->pprev_in_ep = epi->next_in_ep;
	if (epi->next_in_ep)
		epi->next_in_ep->pprev_in_ep = epi->pprev_in_ep;
	for (pp = &epi->sock->epis; *pp; pp = &(*pp)->next_in_sock)
		if (*pp == epi) {
			*pp = epi->next_in_sock;
			break;
		}
}

void ops_epoll_restack(struct ops_sock *s)
{
	pthread_mutex_lock(&reg_lock);
	for (struct ops_epi *epi = s->epis; epi; epi = epi->next_in_sock) {
		enum epi_mode m = mode_of(s);

		if (m == epi->mode)
			continue;
		epi_detach(epi);
		epi->mode = m;
		if (epi_attach(epi) < 0 && m != EPI_NATIVE) {
			/* No watch (out of memory): keep it visible natively
			 * rather than lose it. */
			epi->mode = EPI_NATIVE;
			(void)epi_attach(epi);
		}
		if (epi->mode != EPI_NATIVE)
			announce(epi);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_detach_all(struct ops_sock *s)
{
	pthread_mutex_lock(&reg_lock);
	for (struct ops_epi *epi = s->epis; epi; epi = epi->next_in_sock) {
		epi_detach(epi);
		/* Reported by nobody until ops_epoll_to_native() gives it to
		 * the kernel; ops_epoll_restack() would put it back. */
		epi->mode = EPI_NATIVE;
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_to_native(struct ops_sock *s)
{
	pthread_mutex_lock(&reg_lock);
	while (s->epis) {
		struct ops_epi *epi = s->epis;
		/* A one-shot member that fired stays disarmed until MOD. */
		struct epoll_event ev = {
			.events = epi->disabled ? epi->events & (EPOLLONESHOT | EPOLLET) : epi->events,
			.data = epi->data,
		};

		if (sys.epoll_ctl(epi->ep->epfd, EPOLL_CTL_ADD, epi->fd, &ev) < 0 && errno != EEXIST)
			sdp_err(LOGSYS, "fd %d: relayed, but lost from epoll set %d: %s", epi->fd,
				epi->ep->epfd, strerror(errno));
		epi_unlink(epi);
		free(epi);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_forget(struct ops_sock *s)
{
	if (!s->epis)
		return;
	pthread_mutex_lock(&reg_lock);
	while (s->epis) {
		struct ops_epi *epi = s->epis;

		epi_detach(epi);
		epi_unlink(epi);
		free(epi);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_closing(int epfd)
{
	fdmap_slot_t *slot = ep_slot(epfd, false);

	if (!slot)
		return;
	pthread_mutex_lock(&reg_lock);
	struct ops_ep *ep = atomic_exchange(slot, NULL);

	if (ep) {
		while (ep->members) {
			struct ops_epi *epi = ep->members;

			/* The kernel drops its registrations with the epoll
			 * fd; only the watches are ours to end. */
			if (epi->watch) {
				watched_del(ep, epi);
				sdp_watch_del(epi->watch);
			}
			epi_unlink(epi);
			free(epi);
		}
		ep_put_locked(ep);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_atfork_prepare(void)
{
	/* Parent and child share the sets' kernel instances from now on,
	 * and neither sees the other's sleepers. */
	pthread_mutex_lock(&reg_lock);
	fdmap_for_each(&eps, epset_open_each, NULL);
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_created(int fd)
{
	fdmap_slot_t *slot = fdmap_slot(&made, fd, true);

	if (slot)
		atomic_store(slot, MADE);
}

void ops_epoll_added(int fd)
{
	fdmap_slot_t *slot;
	struct ops_ep *ep;

	/* The number may have been an epoll fd once and be something else
	 * now (we do not follow closes): a set opened for nothing costs
	 * only the doorbell writes the gate would have saved. */
	if (!fdmap_peek(&made, fd) && !ops_fd_is_emulated_epoll(fd))
		return;
	pthread_mutex_lock(&reg_lock);
	slot = ep_slot(fd, false);
	ep = slot ? atomic_load(slot) : NULL;
	if (ep) {
		epset_open(ep, true);
	} else {
		/* It may get SDP members later, which the outer set's
		 * sleeper must hear of: shown from its start. */
		fdmap_slot_t *m = fdmap_slot(&made, fd, true);

		if (m)
			atomic_store(m, MADE_NESTED);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ops_epoll_atfork_child(void)
{
	/* The parent's threads may have held the lock; the records stay as
	 * they are (the engine sockets they watch are the parent's). */
	pthread_mutex_init(&reg_lock, NULL);
}

/* --- membership by epoll_ctl --------------------------------------------------------- */

static struct ops_ep *ep_get_or_make_locked(int epfd, int *err)
{
	fdmap_slot_t *slot = ep_slot(epfd, true);

	*err = -ENOMEM;
	if (!slot)
		return NULL;
	struct ops_ep *ep = atomic_load(slot);

	if (ep)
		return ep;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	ep->epfd = epfd;
	ep->ref = 1;
	ep->doorbell = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (ep->doorbell < 0) {
		*err = ep->doorbell;
		free(ep);
		return NULL;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = doorbell_marker(ep) };

	/* Also checks that epfd is an epoll fd (EBADF, EINVAL). */
	if (sys.epoll_ctl(epfd, EPOLL_CTL_ADD, ep->doorbell, &ev) < 0) {
		*err = -errno;
		fdspace_close(ep->doorbell);
		free(ep);
		return NULL;
	}
	if (fdmap_peek(&made, epfd) == MADE_NESTED)
		epset_open(ep, true);
	atomic_store(slot, ep);
	return ep;
}

/* Looked up from the socket's side: a socket is in a set or two, a set
 * may hold thousands (redis-benchmark -c 1000 spent a third of its CPU
 * walking its set on every epoll_ctl). */
static struct ops_epi *find_epi(struct ops_ep *ep, struct ops_sock *s, int fd)
{
	for (struct ops_epi *epi = ep ? s->epis : NULL; epi; epi = epi->next_in_sock)
		if (epi->ep == ep && epi->fd == fd)
			return epi;
	return NULL;
}

int ops_epset_ctl(int epfd, int op, int fd, struct ops_sock *s, struct epoll_event *ev)
{
	int r = 0;

	pthread_mutex_lock(&reg_lock);
	fdmap_slot_t *slot = ep_slot(epfd, false);
	struct ops_ep *ep = slot ? atomic_load(slot) : NULL;
	struct ops_epi *epi = find_epi(ep, s, fd);

	switch (op) {
	case EPOLL_CTL_ADD:
		if (epi) {
			r = -EEXIST;
			break;
		}
		if (!ep && !(ep = ep_get_or_make_locked(epfd, &r)))
			break;
		epi = calloc(1, sizeof(*epi));
		if (!epi) {
			r = -ENOMEM;
			break;
		}
		*epi = (struct ops_epi){ .ep = ep, .sock = s, .fd = fd, .events = ev->events,
					 .data = ev->data, .mode = mode_of(s) };
		r = epi_attach(epi);
		if (r < 0) {
			free(epi);
			break;
		}
		epi->next_in_ep = ep->members;
		if (ep->members)
			ep->members->pprev_in_ep = &epi->next_in_ep;
		epi->pprev_in_ep = &ep->members;
		ep->members = epi;
		epi->next_in_sock = s->epis;
		s->epis = epi;
		break;
	case EPOLL_CTL_MOD:
		if (!epi) {
			/* Maybe registered natively before we knew it. */
			r = ep ? -ENOENT : OPS_PASS;
			break;
		}
		epi->events = ev->events;
		epi->data = ev->data;
		epi->disabled = false;
		if (epi->mode != EPI_SDP)
			r = native_part(epi, EPOLL_CTL_MOD);
		if (epi->watch) {
			/* MOD re-arms: what is ready now is reported again. */
			epi->last_mask = 0;
			ring_filter(epi);
			announce(epi);
		}
		break;
	case EPOLL_CTL_DEL:
		if (!epi) {
			r = ep ? -ENOENT : OPS_PASS;
			break;
		}
		epi_detach(epi);
		epi_unlink(epi);
		free(epi);
		break;
	default:
		r = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&reg_lock);
	return r;
}

/* --- reporting --------------------------------------------------------------------- */

/* The events member epi would report now (0: none).  With update, the
 * report is taken: edge and one-shot state move on.  reg_lock held. */
static uint32_t member_report(struct ops_epi *epi, bool update)
{
	if (epi->mode == EPI_NATIVE || !epi->watch)
		return 0;
	struct ops_sock *s = epi->sock;

	if (epi->disabled) {
		/* Not reported until EPOLL_CTL_MOD, but news its transport
		 * woke this set for is driven: the progress thread was
		 * not woken for it. */
		if (epi->look && s->conn != OPS_CONN_SDP && s->conn != OPS_CONN_SDP_ONLY) {
			(void)sdp_events(s->sd);
			if (update)
				epi->look = false;
		}
		return 0;
	}

	if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY)
		return 0;	/* settled by the caller first */
	/* Read before the look: a change during it makes the next one look
	 * again. */
	unsigned changes = sdp_watch_changes(epi->watch);

	if (!epi->look && !epi->was_ready && changes == epi->seen_changes)
		return 0;
	/* sdp_events() drives the connection: arrivals it processes are
	 * part of what it reports, so the edge count is read after it.
	 * Only a member whose transport woke the set (or new, re-armed)
	 * has news to read there: for the others, changed by another
	 * thread or by this one's recv() and send(), or ready at the last
	 * report, an arrival since would have woken the set or the
	 * progress thread, who drive it; reading would find the transport
	 * empty. */
	epset_looks++;
	int ev = epi->look ? sdp_events(s->sd) : sdp_events_quiet(s->sd);
	unsigned edges = sdp_watch_edges(epi->watch);

	if (ev < 0)
		return 0;
	if (s->conn_error)
		ev |= POLLERR;
	uint32_t want = (epi->events & ~(EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)) |
			EPOLLHUP | EPOLLERR;
	uint32_t got = (uint32_t)ev & want;

	if (update) {
		epi->look = false;
		epi->was_ready = got != 0;
		epi->seen_changes = changes;
	}

	if (epi->events & EPOLLET) {
		bool fresh = got & ~epi->last_mask;
		bool arrival = (got & (EPOLLIN | EPOLLRDNORM)) && edges != epi->seen_edges;

		if (update)
			epi->last_mask = got;
		if (!fresh && !arrival)
			return 0;
		if (update)
			epi->seen_edges = edges;
	}
	if (got && update && (epi->events & EPOLLONESHOT)) {
		epi->disabled = true;
		ring_filter(epi);
		if (epi->mode == EPI_BOTH)
			(void)native_part(epi, EPOLL_CTL_MOD);
	}
	return got;
}

/* Ring ep's doorbell if and only if a member would be reported now.
 * reg_lock held. */
static void settle_locked(struct ops_ep *ep)
{
	bool any = false;

	drain(ep);
	sdp_watch_mute(ep->doorbell);
	for (struct ops_epi *epi = ep->members; epi && !any; epi = epi->next_in_ep) {
		/* Its transport fd may be what makes epfd readable
		 * (sdp_watch_fds), for news that reports nothing (a credit
		 * update): driven now, it no longer does. */
		epi->look = true;
		any = member_report(epi, false) != 0;
	}
	sdp_watch_mute(-1);
	if (any)
		ring(ep);
}

void ops_epoll_settle(int epfd)
{
	fdmap_slot_t *slot = ep_slot(epfd, false);

	if (!slot)
		return;
	pthread_mutex_lock(&reg_lock);
	struct ops_ep *ep = atomic_load(slot);

	if (ep) {
		/* A poll() of epfd: it cannot count as a sleeper. */
		if (ep->shown)
			settle_locked(ep);
		else
			epset_open(ep, true);
	}
	pthread_mutex_unlock(&reg_lock);
	looks_flush();
}

/* Take our markers out of a kernel result (in place); returns the count
 * left.  A "both" listener's kernel half becomes the member's event, or
 * is merged into the member's SDP event, one of sdp_evs.  *looks counts
 * the members whose transport woke the set: their news is in no event
 * yet, and the kernel's edge that told of it is spent.  reg_lock held. */
static int filter_native(struct ops_ep *ep, struct epoll_event *evs, int n,
			 struct epoll_event *sdp_evs, int nsdp, int *looks)
{
	int k = 0;

	*looks = 0;

	for (int i = 0; i < n; i++) {
		uint64_t d = evs[i].data.u64;

		if (d == doorbell_marker(ep))
			continue;
		if ((d & 7) == 4) {
			struct ops_epi *epi = watched_find(ep, d);

			if (epi) {
				/* Its transport has news: looked at (driven)
				 * by the next report. */
				epi->look = true;
				(*looks)++;
				continue;
			}
		}
		if ((d & 3) == 2) {
			struct ops_epi *epi;

			for (epi = ep->members; epi; epi = epi->next_in_ep)
				if (epi->mode == EPI_BOTH && both_marker(epi) == d)
					break;
			if (epi) {
				if (epi->disabled)
					continue;
				/* Merged with the engine half when both spoke. */
				bool merged = false;

				for (int j = 0; j < nsdp; j++)
					if (sdp_evs[j].data.u64 == epi->data.u64) {
						sdp_evs[j].events |= evs[i].events;
						merged = true;
					}
				if (merged)
					continue;
				if (epi->events & EPOLLONESHOT) {
					epi->disabled = true;
					ring_filter(epi);
					(void)native_part(epi, EPOLL_CTL_MOD);
				}
				evs[i].data = epi->data;
			}
		}
		evs[k++] = evs[i];
	}
	return k;
}


/* Members whose transport woke the set (look) while this thread returns
 * with other events: another thread asleep in the set takes them, as
 * Linux would wake it for them; with none, this thread's next call
 * looks at them first. */
static void looks_left(struct ops_ep *ep, int looks)
{
	if (looks && __atomic_load_n(&ep->gate.sleepers, __ATOMIC_SEQ_CST))
		ring(ep);
}

int ops_epset_filter(struct ops_ep *ep, struct epoll_event *evs, int n)
{
	int looks;

	pthread_mutex_lock(&reg_lock);
	n = filter_native(ep, evs, n, NULL, 0, &looks);
	pthread_mutex_unlock(&reg_lock);
	if (n > 0)
		looks_left(ep, looks);
	return n;
}

/* Report members into events[n..maxevents) (only those whose transport
 * woke the set, with looked_only); returns the new count.  *lt_ready is
 * set when a level-triggered one is ready.  reg_lock held. */
static int report_members(struct ops_ep *ep, struct epoll_event *events, int n, int maxevents,
			  bool looked_only, bool *lt_ready)
{
	sdp_watch_mute(ep->doorbell);
	for (struct ops_epi *epi = ep->members; epi && n < maxevents; epi = epi->next_in_ep) {
		if (looked_only && !epi->look)
			continue;
		uint32_t got = member_report(epi, true);

		if (!got)
			continue;
		if (!(epi->events & (EPOLLET | EPOLLONESHOT)))
			*lt_ready = true;
		events[n].events = got;
		events[n].data = epi->data;
		n++;
	}
	sdp_watch_mute(-1);
	return n;
}

int ops_epset_report(struct ops_ep *ep, struct epoll_event *events, int maxevents,
		     unsigned *seen)
{
	bool lt_ready = false;	/* a level-triggered SDP member is ready */
	int n = 0, m = 0;

	/* Before any member is looked at: a change after this makes
	 * ops_epset_sleep() look again (sdp_watch_gate()). */
	*seen = __atomic_load_n(&ep->gate.changes, __ATOMIC_SEQ_CST);
	drain(ep);
	pthread_mutex_lock(&reg_lock);
	n = report_members(ep, events, 0, maxevents, false, &lt_ready);
	pthread_mutex_unlock(&reg_lock);
	looks_flush();
	if (n < maxevents) {
		int looks;

		m = sys.epoll_wait(ep->epfd, events + n, maxevents - n, 0);
		if (m < 0)
			return -errno;
		pthread_mutex_lock(&reg_lock);
		m = filter_native(ep, events + n, m, events, n, &looks);
		/* A transport's news that came after its member was looked
		 * at above: its edge is spent, so a caller that slept now
		 * would not wake for it (a shared listener, which no progress
		 * thread drives, then left a connection unanswered until its
		 * client gave up).  Looked at now, or left to a sleeper. */
		if (looks && n + m == 0) {
			n = report_members(ep, events, 0, maxevents, true, &lt_ready);
			looks = 0;	/* looked at: nothing left for a sleeper */
		}
		pthread_mutex_unlock(&reg_lock);
		looks_flush();
		if (n + m > 0)
			looks_left(ep, looks);
	}
	/* Still ready: the doorbell rings again, so that epfd stays
	 * readable for a poll() on it, or another thread asleep in the set
	 * wakes for it (Linux wakes one when a level-triggered event stays
	 * ready).  Only now: rung earlier, it would take a place in the
	 * kernel's result above.  With nobody asleep and nothing else
	 * watching epfd, this thread's next report looks at the member
	 * anyway (was_ready). */
	if (lt_ready && __atomic_load_n(&ep->gate.sleepers, __ATOMIC_SEQ_CST))
		ring(ep);
	return n + m;
}

bool ops_epset_sleep(struct ops_ep *ep, unsigned seen)
{
	__atomic_fetch_add(&ep->gate.sleepers, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&ep->gate.changes, __ATOMIC_SEQ_CST) == seen)
		return true;
	__atomic_fetch_sub(&ep->gate.sleepers, 1, __ATOMIC_SEQ_CST);
	return false;
}

void ops_epset_woken(struct ops_ep *ep)
{
	__atomic_fetch_sub(&ep->gate.sleepers, 1, __ATOMIC_SEQ_CST);
}

/* --- an epoll_wait's hold on a set ------------------------------------------------- */

struct ops_ep *ops_epset_get(int epfd)
{
	fdmap_slot_t *slot = ep_slot(epfd, false);
	struct ops_ep *ep = NULL;

	if (!slot)
		return NULL;
	pthread_mutex_lock(&reg_lock);
	ep = atomic_load(slot);
	if (ep)
		ep->ref++;
	pthread_mutex_unlock(&reg_lock);
	return ep;
}

void ops_epset_put(struct ops_ep *ep)
{
	pthread_mutex_lock(&reg_lock);
	ep_put_locked(ep);
	pthread_mutex_unlock(&reg_lock);
}

int ops_epset_connecting(struct ops_ep *ep, struct ops_sock **socks, int *fds, int max)
{
	int n = 0;

	pthread_mutex_lock(&reg_lock);
	for (struct ops_epi *epi = ep->members; epi && n < max; epi = epi->next_in_ep) {
		struct ops_sock *s = epi->sock;

		if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY) {
			ops_sock_get(s);
			socks[n] = s;
			fds[n++] = epi->fd;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return n;
}
