/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The progress thread and blocking waits.
 *
 * One thread per process ("sdp-progress") sleeps in epoll on every
 * transport fd (endpoints and listeners).  When one fires it takes the
 * owning socket's lock, unless another thread holds it and so drives it
 * already (prog_try_drive), and drives it, so that credits, readiness
 * and teardown move on while the application is busy elsewhere or asleep
 * in its own poll/epoll on the sds.  It also ticks every SDP_TICK_MS for
 * sockets with deadlines (connect timeouts, orphans finishing their close)
 * and sleeps without a timeout when there are none, so an idle process
 * does not spin.
 *
 * Application threads that block (recv, send, accept, connect, sdp_poll)
 * park on a per-thread eventfd listed in the socket's waiters; whoever
 * changes the socket (sock_changed) writes to it.  A blocked thread also
 * watches the socket's transport fd itself, so it wakes without a detour
 * through the progress thread.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "engine.h"
#include "fdspace.h"
#include "log.h"
#include "sys.h"
#include "tunables.h"

#define LOGSYS "progress"
#define SDP_TICK_MS 100
/* While a Transaction request is held (write_zcopy.c), ticks are this
 * often, so the hold ends on time even if the program never comes back. */
#define SDP_HOLD_TICK_MS 1

/* A socket with a reference held on behalf of the progress thread. */
struct sock_ref {
	struct sdp_sock *s;
	struct sock_ref *next;
};

/* Protects everything below.  Never held while taking a socket lock
 * (the thread copies what it needs and drops it first). */
static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;
static int prog_epfd = -1;
static int prog_wakefd = -1;	/* interrupts epoll_wait for new work */
static bool prog_running;
static pthread_t prog_thread;
static struct sock_ref *prog_releases;	/* refs to drop after the batch */
static struct sock_ref *prog_watch;	/* sockets with deadlines */
static bool prog_watch_out;		/* prog_tick() has the watch list */
/* The timeout of the thread's last epoll_wait (or of the one it is about
 * to make): -1 none.  prog_kick_needed_locked() reads it. */
static int prog_sleep_ms = -1;
static bool prog_fast;			/* a watched socket holds a request */
static bool prog_hold_seen;		/* prog_tick(): one still does */
static bool prog_hold_new;		/* progress_hold() since the last tick */
static struct sock_ref *prog_pokes;	/* sockets to drive once, soon */
static struct sock_ref *prog_idle;	/* progress_idle_watch() */
static uint64_t prog_idle_next_ns;	/* when prog_idle_sweep() looks again */
static pid_t prog_pid;
static __thread bool on_progress_thread;

static void prog_push(struct sock_ref **list, struct sdp_sock *s)
{
	struct sock_ref *r = malloc(sizeof(*r));

	if (!r) {
		/* Keeping a reference forever leaks one socket; dropping
		 * it now could free memory the thread still uses. */
		sdp_err(LOGSYS, "out of memory: a socket will not be freed");
		return;
	}
	r->s = s;
	r->next = *list;
	*list = r;
}

/*
 * Whether a socket put on the watch or release list needs the thread
 * woken for it: not while it ticks anyway (it looks at both lists at
 * every tick, and a deadline is never finer than a tick), nor from the
 * thread itself, which looks at them before it sleeps again.  A kick per
 * connection (its connect's deadline, its close as an orphan) was a
 * wakeup and two thread switches per connection set up and torn down.
 * prog_lock held.
 */
static bool prog_kick_needed_locked(void)
{
	return !on_progress_thread &&
	       (prog_sleep_ms < 0 || prog_sleep_ms > SDP_TICK_MS);
}

static void prog_kick(void)
{
	uint64_t one = 1;

	if (prog_wakefd >= 0 && sys.write(prog_wakefd, &one, sizeof(one)) < 0) {
		/* The counter is already non-zero: the thread will wake. */
	}
}

/* epoll_ctl on the thread's set, counted.  prog_lock held. */
static int prog_ctl(int op, int fd, struct epoll_event *ev)
{
	SDP_STAT_INC(progress_set_changes, 1);
	return sys.epoll_ctl(prog_epfd, op, fd, ev);
}

/*
 * Add fd to the progress thread's set for s.  EPOLLEXCLUSIVE where the
 * fd takes it (an epoll instance, such as the verbs ep's or a tcp-fallback
 * listener's, does not: EINVAL): registered after the application's epoll
 * sets that hold the fd (progress_watch_sync), it makes the kernel wake a
 * thread asleep in one of those sets and the progress thread only when
 * none sleeps there.  *excl says which it got.  prog_lock held.
 */
static int prog_add_fd(int fd, uint32_t events, struct sdp_sock *s, bool *excl)
{
	struct epoll_event ev = { .events = events | EPOLLEXCLUSIVE, .data.ptr = s };

	*excl = true;
	if (prog_ctl(EPOLL_CTL_ADD, fd, &ev) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	*excl = false;
	ev.events = events;
	return prog_ctl(EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* A registration's new events; an exclusive one cannot be modified
 * (EINVAL), so it is made again, at the end of the fd's wait queue,
 * where it belongs anyway.  prog_lock held. */
static int prog_mod_fd(int fd, uint32_t events, struct sdp_sock *s, bool *excl)
{
	if (!*excl) {
		struct epoll_event ev = { .events = events, .data.ptr = s };

		return prog_ctl(EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
	}
	(void)prog_ctl(EPOLL_CTL_DEL, fd, NULL);
	return prog_add_fd(fd, events, s, excl);
}

/* The epoll events for what c's transport waits for on its ep fd. */
static uint32_t ep_epoll_events(const struct sdp_conn *c)
{
	short want = c->ep && !c->disconnected ? c->t->ep_wait_events(c->ep) : 0;

	return (want & POLLIN ? EPOLLIN : 0) | (want & POLLOUT ? EPOLLOUT : 0);
}

void progress_sync_events(struct sdp_sock *owner, struct sdp_conn *c)
{
	if (c == owner->conn)
		progress_watch_sync(owner);
	if (!c->in_progress_set)
		return;
	uint32_t want = ep_epoll_events(c);

	if (owner->ep_parked && owner->parked_fd == c->ep_fd) {
		/* A thread sleeps on the fd itself: if it does not wait for
		 * what the transport needs now (writability for output it
		 * queued meanwhile), wake it to wait again. */
		uint64_t one = 1;
		short need = (want & EPOLLIN ? POLLIN : 0) | (want & EPOLLOUT ? POLLOUT : 0);

		for (struct sdp_waiter *w = owner->waiters; w; w = w->next)
			if (w->ep_events && (need & ~w->ep_events) &&
			    sys.write(w->fd, &one, sizeof(one)) < 0) {
				/* Counter saturated: it wakes anyway. */
			}
		return;
	}

	if (want == c->prog_events)
		return;
	pthread_mutex_lock(&prog_lock);
	if (prog_epfd >= 0 && prog_mod_fd(c->ep_fd, want, owner, &c->prog_excl) == 0)
		c->prog_events = want;
	pthread_mutex_unlock(&prog_lock);
}

/* The socket's turn after its fd fired or on a tick (the connection layer
 * decides what that means: struct sdp_upcalls.service); returns true to
 * keep it on the watch list. */
static bool prog_drive(struct sdp_sock *s, bool tick)
{
	if (pthread_mutex_trylock(&s->lock)) {
		SDP_STAT_INC(progress_lock_waits, 1);
		pthread_mutex_lock(&s->lock);
	}
	bool keep = sdp_upcalls.service(s, tick);

	if (tick && s->conn && s->conn->trans_held)
		prog_hold_seen = true;
	pthread_mutex_unlock(&s->lock);
	return keep;
}

/*
 * After this many batches in a row in which a socket whose fd fired was
 * locked by another thread, the thread waits for the lock (prog_main).
 */
#define PROG_BUSY_MAX 4

/*
 * s's fd fired: drive s unless another thread holds its lock.  That
 * thread is driving s (every holder does: sdp_recvv, sdp_sendv, the
 * reports of poll and epoll), and will read what woke us, or the fd,
 * level-triggered in our set, fires again once it lets go; waiting for
 * the lock instead put the thread to sleep and made the holder's unlock
 * a futex wake, on the data path, for a drive that then found nothing.
 * Returns false if s was busy.
 */
static bool prog_try_drive(struct sdp_sock *s)
{
	if (pthread_mutex_trylock(&s->lock))
		return false;
	(void)sdp_upcalls.service(s, false);
	pthread_mutex_unlock(&s->lock);
	return true;
}

/*
 * The references of list for which visit(s) says to keep them (the
 * others are put and freed), as a list.  No lock held: visit takes the
 * socket's.
 */
static struct sock_ref *refs_filter(struct sock_ref *list, bool (*visit)(struct sdp_sock *s))
{
	struct sock_ref *keep = NULL;

	while (list) {
		struct sock_ref *r = list;

		list = r->next;
		if (visit(r->s)) {
			r->next = keep;
			keep = r;
		} else {
			sock_put(r->s);
			free(r);
		}
	}
	return keep;
}

/* Put the references of list back on *into.  prog_lock held. */
static void refs_splice(struct sock_ref *list, struct sock_ref **into)
{
	while (list) {
		struct sock_ref *r = list;

		list = r->next;
		r->next = *into;
		*into = r;
	}
}

static bool tick_drive(struct sdp_sock *s)
{
	return prog_drive(s, true);
}

static void prog_tick(void)
{
	struct sock_ref *list, *keep;

	pthread_mutex_lock(&prog_lock);
	list = prog_watch;
	prog_watch = NULL;
	prog_watch_out = true;
	pthread_mutex_unlock(&prog_lock);
	prog_hold_seen = false;

	keep = refs_filter(list, tick_drive);
	pthread_mutex_lock(&prog_lock);
	refs_splice(keep, &prog_watch);
	prog_watch_out = false;
	/* Fast while a hold goes on, or began during this tick. */
	prog_fast = prog_hold_seen || prog_hold_new;
	prog_hold_new = false;
	pthread_mutex_unlock(&prog_lock);
}

static void prog_release(void)
{
	struct sock_ref *list;

	pthread_mutex_lock(&prog_lock);
	list = prog_releases;
	prog_releases = NULL;
	pthread_mutex_unlock(&prog_lock);
	while (list) {
		struct sock_ref *r = list;

		list = r->next;
		sock_put(r->s);
		free(r);
	}
}

static void prog_drive_pokes(void)
{
	struct sock_ref *list;

	pthread_mutex_lock(&prog_lock);
	list = prog_pokes;
	prog_pokes = NULL;
	pthread_mutex_unlock(&prog_lock);
	while (list) {
		struct sock_ref *r = list;

		list = r->next;
		prog_drive(r->s, false);
		sock_put(r->s);
		free(r);
	}
}

/*
 * Connections that may give their buffers back once idle (struct
 * sdp_upcalls.idle), looked at every buf_idle_ms (at least every
 * SDP_IDLE_SWEEP_MS), not at every wakeup: busy connections can be many,
 * and a connection that went quiet is let go at the second look, so that
 * going idle costs the thread about two wakeups.  A trylock, so that the
 * progress thread never waits for a connection that is in use, which is
 * not idle.
 */
#define SDP_IDLE_SWEEP_MS 250

static uint64_t idle_sweep_ns(void)
{
	int ms = tun_int(TUN_buf_idle_ms);

	return (uint64_t)(ms > SDP_IDLE_SWEEP_MS ? ms : SDP_IDLE_SWEEP_MS) * 1000000ull;
}

/* Whether s is still to be looked at (a busy socket is: not idle). */
static bool idle_look(struct sdp_sock *s)
{
	bool again = true;

	if (pthread_mutex_trylock(&s->lock) == 0) {
		again = sdp_upcalls.idle(s);
		pthread_mutex_unlock(&s->lock);
	}
	return again;
}

static void prog_idle_sweep(void)
{
	struct sock_ref *list, *keep;
	uint64_t now = sdp_now_ns();

	pthread_mutex_lock(&prog_lock);
	if (!prog_idle || now < prog_idle_next_ns) {
		pthread_mutex_unlock(&prog_lock);
		return;
	}
	list = prog_idle;
	prog_idle = NULL;
	prog_idle_next_ns = now + idle_sweep_ns();
	pthread_mutex_unlock(&prog_lock);
	keep = refs_filter(list, idle_look);
	pthread_mutex_lock(&prog_lock);
	refs_splice(keep, &prog_idle);
	pthread_mutex_unlock(&prog_lock);
}

/* The progress thread's epoll timeout, for its ticks and the idle sweep.
 * prog_lock held. */
static int prog_timeout_locked(void)
{
	int timeout = prog_fast ? SDP_HOLD_TICK_MS : prog_watch ? SDP_TICK_MS : -1;

	if (prog_idle) {
		uint64_t now = sdp_now_ns();
		int t = now >= prog_idle_next_ns ? 0 :
			(int)((prog_idle_next_ns - now + 999999) / 1000000);

		if (timeout < 0 || t < timeout)
			timeout = t;
	}
	return timeout;
}

void progress_idle_watch(struct sdp_sock *s)
{
	bool first;

	pthread_mutex_lock(&prog_lock);
	first = !prog_idle;
	if (first)
		prog_idle_next_ns = sdp_now_ns() + idle_sweep_ns();
	atomic_fetch_add(&s->ref, 1);	/* put in prog_idle_sweep() */
	prog_push(&prog_idle, s);
	pthread_mutex_unlock(&prog_lock);
	if (first)
		prog_kick();	/* its timeout changes */
}

static void *prog_main(void *arg)
{
	struct epoll_event ev[64];
	int epfd = (int)(intptr_t)arg;
	int busy_run = 0;	/* batches in a row that met a busy socket */

	on_progress_thread = true;

	for (;;) {
		pthread_mutex_lock(&prog_lock);
		int timeout = prog_timeout_locked();

		prog_sleep_ms = timeout;
		pthread_mutex_unlock(&prog_lock);

		int n = sys.epoll_wait(epfd, ev, 64, timeout);

		SDP_STAT_INC(progress_wakeups, 1);
		if (n < 0 && errno != EINTR) {
			sdp_err(LOGSYS, "epoll_wait failed: %s; progress thread stops", strerror(errno));
			break;
		}
		bool busy = false;

		for (int i = 0; i < n; i++) {
			if (!ev[i].data.ptr) {
				uint64_t v;

				if (sys.read(prog_wakefd, &v, sizeof(v)) < 0) {
					/* Raced with another reader: nothing to do. */
				}
				continue;
			}
			/* The socket stays valid: its reference is dropped
			 * only in prog_release(), after this batch.  A holder
			 * that keeps it past a few batches (a long send, a
			 * spin) is waited for: the fd would fire meanwhile. */
			if (busy_run >= PROG_BUSY_MAX)
				prog_drive(ev[i].data.ptr, false);
			else if (!prog_try_drive(ev[i].data.ptr)) {
				SDP_STAT_INC(progress_busy_skips, 1);
				busy = true;
				continue;
			}
			SDP_STAT_INC(progress_fd_drives, 1);
		}
		busy_run = busy ? busy_run + 1 : 0;
		if (busy)
			sched_yield();	/* the holder is on its way out */
		prog_drive_pokes();
		prog_tick();
		prog_idle_sweep();
		prog_release();
	}
	return NULL;
}

/* Start the thread on first use (and again in a forked child). */
static int prog_start_locked(void)
{
	sigset_t all, old;
	int ret;

	if (prog_running && prog_pid == getpid())
		return 0;
	int epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));

	if (epfd < 0)
		return epfd;
	int wakefd = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));

	if (wakefd < 0) {
		fdspace_close(epfd);
		return wakefd;
	}
	prog_epfd = epfd;
	prog_wakefd = wakefd;
	prog_sleep_ms = -1;	/* a forked child's thread has not slept yet */
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	sys.epoll_ctl(prog_epfd, EPOLL_CTL_ADD, prog_wakefd, &ev);

	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&prog_thread, NULL, prog_main, (void *)(intptr_t)prog_epfd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		fdspace_close(prog_wakefd);
		fdspace_close(prog_epfd);
		prog_wakefd = prog_epfd = -1;
		return ret;
	}
	pthread_setname_np(prog_thread, "sdp-progress");
	pthread_detach(prog_thread);
	prog_running = true;
	prog_pid = getpid();
	return 0;
}

int progress_add(struct sdp_sock *s, int fd)
{
	bool excl;
	int ret;

	pthread_mutex_lock(&prog_lock);
	ret = prog_start_locked();
	if (!ret)
		ret = prog_add_fd(fd, EPOLLIN, s, &excl);
	if (!ret)
		atomic_fetch_add(&s->ref, 1);	/* put in prog_release() */
	pthread_mutex_unlock(&prog_lock);
	return ret;
}

int progress_add_ep(struct sdp_sock *s, struct sdp_conn *c)
{
	uint32_t events = ep_epoll_events(c);
	int ret;

	pthread_mutex_lock(&prog_lock);
	ret = prog_start_locked();
	if (!ret)
		ret = prog_add_fd(c->ep_fd, events, s, &c->prog_excl);
	if (!ret) {
		c->prog_events = events;
		atomic_fetch_add(&s->ref, 1);	/* put in prog_release() */
	}
	pthread_mutex_unlock(&prog_lock);
	return ret;
}

void progress_mute(int fd)
{
	pthread_mutex_lock(&prog_lock);
	if (prog_epfd >= 0)
		(void)prog_ctl(EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_unlock(&prog_lock);
}

bool progress_on_thread(void)
{
	return on_progress_thread;
}

void progress_del(struct sdp_sock *s, int fd)
{
	bool kick;

	pthread_mutex_lock(&prog_lock);
	if (prog_epfd >= 0)
		prog_ctl(EPOLL_CTL_DEL, fd, NULL);
	/* The thread may hold s from its current batch: drop the reference
	 * only after that batch. */
	prog_push(&prog_releases, s);
	kick = prog_kick_needed_locked();
	pthread_mutex_unlock(&prog_lock);
	if (kick)
		prog_kick();
}

static void progress_watch_locked(struct sdp_sock *s)
{
	for (struct sock_ref *r = prog_watch; r; r = r->next)
		if (r->s == s)
			return;
	atomic_fetch_add(&s->ref, 1);	/* put in prog_tick() */
	prog_push(&prog_watch, s);
}

void progress_adopt_orphan(struct sdp_sock *s)
{
	if (s->conn && !s->conn->deadline_ns)
		s->conn->deadline_ns = sdp_now_ns() +
				       (uint64_t)tun_int(TUN_disconnect_timeout_ms) * 1000000ull;
	pthread_mutex_lock(&prog_lock);
	progress_watch_locked(s);
	bool kick = prog_kick_needed_locked();

	pthread_mutex_unlock(&prog_lock);
	if (kick)
		prog_kick();
}

/* The socket whose sdp_sendv()/sdp_recvv() this thread is in. */
static __thread struct sdp_sock *call_sock;
/*
 * The socket whose fd this thread parked in sdp_wait() during that call
 * and keeps parked until the call's exit.  Put back at once after the
 * sleep, the fd was still readable (the thread drives the connection
 * only after it), so the re-registration woke the progress thread for
 * news the caller was about to read; from the exit, after the caller's
 * drive, it is quiet.  NULL: none.
 */
static __thread struct sdp_sock *call_parked;

struct sdp_sock *progress_call_enter(struct sdp_sock *s)
{
	struct sdp_sock *outer = call_sock;

	call_sock = s;
	return outer;
}

void progress_call_exit(struct sdp_sock *s, struct sdp_sock *outer)
{
	struct sdp_conn *c = s->conn;

	/* Posts made by this drive mark s again: they are looked at once,
	 * below, not one poke each. */
	if (s->reap_on_exit && c && c->ep && !c->transport_down &&
	    c->t->ep_arm(c->ep) == -EAGAIN) {
		s->reap_on_exit = false;
		/* For the completions of this call's own posts: arrivals
		 * wake whoever waits for them, and reading here found the
		 * transport empty nearly every time. */
		s->drive_quiet = true;
		sdp_upcalls.drive(s);
		s->drive_quiet = false;
	}
	call_sock = outer;
	if (call_parked == s) {
		call_parked = NULL;
		progress_unpark(s);
	}
	if (s->reap_on_exit) {
		s->reap_on_exit = false;
		progress_posted(s);
	}
}

void progress_posted(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	/* The progress thread re-arms what it drives itself. */
	if (on_progress_thread || !c || !c->ep || c->transport_down)
		return;
	if (call_sock == s) {
		s->reap_on_exit = true;
		return;
	}
	/* Work is pending, or output the transport holds needs the fd's
	 * writability, which the progress thread does not wait for yet. */
	if (c->t->ep_arm(c->ep) != -EAGAIN &&
	    !(c->in_progress_set && (ep_epoll_events(c) & ~c->prog_events)))
		return;
	pthread_mutex_lock(&prog_lock);
	atomic_fetch_add(&s->ref, 1);	/* put in prog_drive_pokes() */
	prog_push(&prog_pokes, s);
	pthread_mutex_unlock(&prog_lock);
	prog_kick();
}

void progress_hold(struct sdp_sock *s)
{
	bool kick;

	pthread_mutex_lock(&prog_lock);
	progress_watch_locked(s);
	kick = !prog_fast;
	prog_fast = prog_hold_new = true;
	pthread_mutex_unlock(&prog_lock);
	if (kick)
		prog_kick();
}

void progress_watch(struct sdp_sock *s)
{
	pthread_mutex_lock(&prog_lock);
	progress_watch_locked(s);
	bool kick = prog_kick_needed_locked();

	pthread_mutex_unlock(&prog_lock);
	if (kick)
		prog_kick();
}

/* --- waiting ------------------------------------------------------------------ */

static pthread_key_t waker_key;
static pthread_once_t waker_once = PTHREAD_ONCE_INIT;
static __thread int waker_fd = -1;

static void waker_destroy(void *p)
{
	int fd = (int)(intptr_t)p - 1;

	if (fd >= 0)
		fdspace_close(fd);
}

static void waker_key_init(void)
{
	(void)pthread_key_create(&waker_key, waker_destroy);
}

int sdp_thread_waker(void)
{
	/* No getpid() here, on every wait: prog_atfork_child() forgets the
	 * forking thread's waker, the only thread a child has. */
	if (waker_fd >= 0)
		return waker_fd;
	pthread_once(&waker_once, waker_key_init);
	int fd = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));

	if (fd < 0)
		return fd;
	waker_fd = fd;
	/* +1 so that fd 0 is not taken for "no value". */
	pthread_setspecific(waker_key, (void *)(intptr_t)(waker_fd + 1));
	return waker_fd;
}

static int wait_timeout_ms(uint64_t deadline_ns)
{
	if (!deadline_ns)
		return -1;
	uint64_t now = sdp_now_ns();

	if (now >= deadline_ns)
		return 0;
	uint64_t ms = (deadline_ns - now + 999999) / 1000000;

	return ms > 60000 ? 60000 : (int)ms;
}

int progress_wait_fds(struct sdp_sock *s, struct pollfd *fds)
{
	if (s->nlsn) {
		for (int i = 0; i < s->nlsn; i++) {
			if (s->lsn[i].t->listener_arm(s->lsn[i].l) == -EAGAIN)
				return -EAGAIN;
			fds[i] = (struct pollfd){ .fd = s->lsn[i].t->listener_fd(s->lsn[i].l),
						  .events = POLLIN };
		}
		return s->nlsn;
	}
	if (s->conn && s->conn->ep && !s->conn->transport_down) {
		if (s->conn->t->ep_arm(s->conn->ep) == -EAGAIN)
			return -EAGAIN;
		fds[0] = (struct pollfd){ .fd = s->conn->ep_fd,
					  .events = s->conn->t->ep_wait_events(s->conn->ep) };
		return 1;
	}
	return 0;
}

/* Whether s is a listener whose fds are in the progress thread's set:
 * not a shared one's (listener_share()). */
static bool prog_has_listener(const struct sdp_sock *s)
{
	return s->nlsn && s->in_progress_set && !__atomic_load_n(&s->lsn_shared, __ATOMIC_RELAXED);
}

/* Whether fd is s's one wait source in the progress thread's set: a
 * connection's ep fd, or the fd of a listener on one transport. */
static bool prog_has_source(const struct sdp_sock *s, int fd)
{
	if (s->nlsn)
		return s->nlsn == 1 && prog_has_listener(s) &&
		       s->lsn[0].t->listener_fd(s->lsn[0].l) == fd;
	return s->conn && s->conn->in_progress_set && s->conn->ep_fd == fd;
}

/*
 * A thread about to sleep on s's connection fd itself takes that fd out of
 * the progress thread's epoll until it wakes: one completion then wakes
 * one thread instead of two, which in a request/response exchange saves a
 * wakeup and a fight for the socket lock per message.  The first such waiter
 * parks the fd, the last one puts it back; if the connection went away or
 * left the progress set meanwhile, it is not put back.  A listener's fd
 * is parked the same way by a sleeping accept() (or poll): it cannot be
 * registered EPOLLEXCLUSIVE (an epoll instance on tcp-fallback), so
 * every new connection woke the progress thread as well.
 */
bool progress_park(struct sdp_sock *s, int fd)
{
	if (!prog_has_source(s, fd))
		return false;
	if (s->ep_parked++ == 0) {
		s->parked_fd = fd;
		progress_mute(fd);
	}
	return true;
}

void progress_unpark(struct sdp_sock *s)
{
	if (--s->ep_parked > 0)
		return;
	if (!prog_has_source(s, s->parked_fd))
		return;
	if (s->nlsn) {
		bool excl;

		pthread_mutex_lock(&prog_lock);
		if (prog_epfd >= 0)
			(void)prog_add_fd(s->parked_fd, EPOLLIN, s, &excl);
		pthread_mutex_unlock(&prog_lock);
		return;
	}
	uint32_t events = ep_epoll_events(s->conn);

	pthread_mutex_lock(&prog_lock);
	if (prog_epfd >= 0 && prog_add_fd(s->parked_fd, events, s, &s->conn->prog_excl) == 0)
		s->conn->prog_events = events;
	pthread_mutex_unlock(&prog_lock);
}

/* What a watch registers in its epoll set for s: the wait sources the
 * progress thread has for it (so that each is taken out of the set,
 * by progress_watch_sync() from conn_leave_progress() or listener_free(),
 * before it is closed), while their transport wants them read. */
static int watch_sources(struct sdp_sock *s, int *fds)
{
	struct sdp_conn *c = s->conn;

	if (s->nlsn) {
		if (!s->in_progress_set)
			return 0;
		for (int i = 0; i < s->nlsn; i++)
			fds[i] = s->lsn[i].t->listener_fd(s->lsn[i].l);
		return s->nlsn;
	}
	if (!c || !c->ep || !(c->in_progress_set || c->prog_deferred) || s->parent ||
	    !(ep_epoll_events(c) & EPOLLIN))
		return 0;
	fds[0] = c->ep_fd;
	return 1;
}

/* The progress thread's registration of s's source fd, made again so
 * that it comes after the watches' (prog_add_fd()). */
static void prog_behind(struct sdp_sock *s, int fd)
{
	struct sdp_conn *c = s->conn;

	pthread_mutex_lock(&prog_lock);
	if (prog_epfd >= 0 && prog_has_listener(s) && !(s->ep_parked && s->parked_fd == fd)) {
		bool excl;

		(void)prog_ctl(EPOLL_CTL_DEL, fd, NULL);
		(void)prog_add_fd(fd, EPOLLIN, s, &excl);
	} else if (prog_epfd >= 0 && c && c->in_progress_set && c->ep_fd == fd &&
		   !(s->ep_parked && s->parked_fd == fd)) {
		/* A parked fd goes back at the end when unparked. */
		(void)prog_ctl(EPOLL_CTL_DEL, fd, NULL);
		if (prog_add_fd(fd, c->prog_events, s, &c->prog_excl) < 0)
			sdp_err(LOGSYS, "sd %d: transport fd lost from the progress set", s->sd);
	}
	pthread_mutex_unlock(&prog_lock);
}

void progress_watch_sync(struct sdp_sock *s)
{
	int fds[SDP_MAX_LISTENERS], n = -1;
	bool added = false;

	for (struct sdp_waiter *w = s->waiters; w; w = w->next) {
		if (w->epfd < 0)
			continue;
		if (n < 0)
			n = watch_sources(s, fds);
		if (w->nreg == n && !memcmp(w->reg_fd, fds, (size_t)n * sizeof(*fds)))
			continue;
		for (int i = 0; i < w->nreg; i++)
			(void)sys.epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->reg_fd[i], NULL);
		w->nreg = 0;
		for (int i = 0; i < n; i++) {
			/* Edge-triggered: the key only says "look at this
			 * member" (the switch keeps that until it does), so
			 * a source that stays readable (a member nobody
			 * reports, a socket whose peer is gone) never makes
			 * the set spin. */
			struct epoll_event ev = { .events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE,
						  .data.u64 = w->key };
			int r = sys.epoll_ctl(w->epfd, EPOLL_CTL_ADD, fds[i], &ev);

			if (r < 0 && errno == EINVAL) {
				ev.events &= ~(uint32_t)EPOLLEXCLUSIVE;
				r = sys.epoll_ctl(w->epfd, EPOLL_CTL_ADD, fds[i], &ev);
			}
			/* EEXIST: another watch of s in the same set (a
			 * dup'd fd) has it; its key wakes the set. */
			if (r == 0) {
				w->reg_fd[w->nreg++] = fds[i];
				added = true;
			}
		}
	}
	for (int i = 0; added && i < n; i++)
		prog_behind(s, fds[i]);
}

int sdp_wait(struct sdp_sock *s, uint64_t deadline_ns)
{
	struct pollfd pfd[1 + SDP_MAX_LISTENERS];
	struct sdp_waiter w;
	int wfd = sdp_thread_waker();
	int nfds = 1, r;
	uint64_t v;

	if (deadline_ns && sdp_now_ns() >= deadline_ns)
		return -EAGAIN;
	int nsrc = progress_wait_fds(s, pfd + 1);

	if (nsrc == -EAGAIN)
		return 0;
	if (wfd < 0) {
		/* No eventfd to sleep on: degrade to a short nap. */
		pthread_mutex_unlock(&s->lock);
		usleep(1000);
		pthread_mutex_lock(&s->lock);
		return 0;
	}
	if (sys.read(wfd, &v, sizeof(v)) < 0) {
		/* Nothing stale to drain. */
	}
	w.fd = wfd;
	w.ep_events = 0;
	w.changes = NULL;
	w.edges = NULL;
	w.gate = NULL;
	w.ring_when = 0;
	w.epfd = -1;
	w.next = s->waiters;
	s->waiters = &w;
	pfd[0] = (struct pollfd){ .fd = wfd, .events = POLLIN };
	nfds += nsrc;
	/* Inside a call on s, parked until the call's exit (call_parked),
	 * once for all its sleeps. */
	bool in_call = call_sock == s && (!call_parked || call_parked == s);
	bool parked = nsrc == 1 && ((in_call && call_parked == s) || progress_park(s, pfd[1].fd));

	if (parked && in_call)
		call_parked = s;
	if (parked)
		w.ep_events = pfd[1].events;

	pthread_mutex_unlock(&s->lock);
	r = sys.poll(pfd, (nfds_t)nfds, wait_timeout_ms(deadline_ns));
	int err = errno;

	pthread_mutex_lock(&s->lock);
	if (parked && !in_call)
		progress_unpark(s);
	for (struct sdp_waiter **p = &s->waiters; *p; p = &(*p)->next) {
		if (*p == &w) {
			*p = w.next;
			break;
		}
	}
	if (r < 0 && err == EINTR)
		return -EINTR;
	if (r == 0 && deadline_ns && sdp_now_ns() >= deadline_ns)
		return -EAGAIN;
	return 0;
}

/*
 * The process may exit without harm to s's peer: everything of s has left,
 * and the peer's DisConn is in, so the peer will send nothing more (or the
 * transport is gone anyway).  Or the peer, its own DisConn not sent, has
 * acknowledged ours (it does at once, cr.ack_owed): it has all our data,
 * and what it sends after our exit -- credit updates as its program reads
 * -- meets our closed socket, whose reset then loses nothing and ends its
 * stream in order (conn_lost()).  Without this an exit waited
 * exit_linger_ms for a peer that keeps its end open, as an idle keep-alive
 * client does.  Not when ours was the later DisConn: the
 * peer sent its own before it had ours, and goes on granting credits
 * until it reads ours, behind the tail of our data; the transport ends
 * when the peer closes it (conn_drive_rounds(): the side whose DisConn
 * went first does).  Exiting before would close a socket those credit
 * updates still reach, and its reset would destroy the tail: on iWARP a
 * send completes once the kernel's TCP has it, not once the peer does
 * (cross-siw's sdpcat --convert bidir, whose client shuts its side down
 * first, read a reset so).
 */
static bool orphan_flushed(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || c->transport_down || c->post_failed || s->state != SDP_S_ESTABLISHED)
		return true;
	if (!c->disconn_sent || conn_tx_unposted(c) || c->tx_done != c->tx_posted ||
	    c->ctrl_done != c->ctrl_posted)
		return false;
	if (c->disconn_rcvd)
		return !c->disconn_last;
	return sdp_peer_has_all(&c->cr);
}

/* A closing connection's progress, as a sum that grows with every
 * completion and every message from its peer (progress_linger()). */
static uint64_t closing_progress(const struct sdp_conn *c)
{
	return (uint64_t)c->tx_done + c->ctrl_done + c->disconn_rcvd + c->cr.last_rx_mseq +
	       c->cr.peer_mseq_ack;
}

bool progress_started_here(void)
{
	return prog_running && prog_pid == getpid();
}

/*
 * At exit the kernel would go on sending what a closed TCP socket still
 * held, and would go on taking the peer's acknowledgements; here the
 * process is the stack, so it waits (bounded by the exit_linger_ms
 * tunable) until each closed connection has handed its data and DisConn to
 * the transport *and* the peer's DisConn has come back (or, where the
 * peer's came first, until the peer has closed the transport: see
 * orphan_flushed()).  Leaving earlier
 * is not enough: the peer goes on granting credits while it reads our last
 * data, and those messages reaching a socket the kernel closed at our exit
 * would make it answer with a reset, which destroys whatever the peer had
 * not yet read.
 *
 * The bound is on time without progress: a slow reader (a software
 * transport in an emulated guest moves 2-3 MB/s) takes longer than
 * exit_linger_ms to read a full send buffer, and giving up on it while
 * it reads reset its connection under the tail (cross-siw's sdpcat
 * --convert bidir, once).  Every completion of a closing connection's
 * sends or control messages, and every message from its peer (the
 * credits it returns as it reads what it holds, its DisConn) starts the
 * exit_linger_ms again, up to 10 times exit_linger_ms in all.
 */
void progress_linger(void)
{
	uint64_t linger = (uint64_t)tun_int(TUN_exit_linger_ms) * 1000000ull;
	uint64_t start = sdp_now_ns(), deadline = start + linger, cap = start + 10 * linger;
	uint64_t last_sig = 0;

	for (;;) {
		struct sock_ref *list = NULL;
		bool pending = false;
		unsigned closing = 0;
		uint64_t sig = 0;

		pthread_mutex_lock(&prog_lock);
		/* While the thread walks the list, closing sockets are on
		 * it and not here: look again once it has put them back. */
		pending = prog_watch_out;
		for (struct sock_ref *r = prog_watch; r; r = r->next) {
			atomic_fetch_add(&r->s->ref, 1);
			prog_push(&list, r->s);
		}
		pthread_mutex_unlock(&prog_lock);
		while (list) {
			struct sock_ref *r = list;

			list = r->next;
			pthread_mutex_lock(&r->s->lock);
			if (r->s->conn && !r->s->conn->transport_down)
				sdp_upcalls.drive(r->s);
			if (r->s->app_closed && !orphan_flushed(r->s)) {
				pending = true;
				closing++;
				sig += closing_progress(r->s->conn);
			}
			pthread_mutex_unlock(&r->s->lock);
			sock_put(r->s);
			free(r);
		}
		if (!pending) {
			sdp_dbg(LOGSYS, "exit: every connection closed");
			break;
		}
		uint64_t now = sdp_now_ns();

		if (sig != last_sig) {
			last_sig = sig;
			deadline = now + linger < cap ? now + linger : cap;
		}
		if (now >= deadline) {
			/* The peers of these may lose what they had not read
			 * yet (a reset): worth saying. */
			sdp_warn(LOGSYS, "exit: gave up on %u connection(s) still closing "
					 "(exit_linger_ms %ld without progress, or 10 times that in all): "
					 "their peers may not get the last data",
				 closing, tun_int(TUN_exit_linger_ms));
			break;
		}
		usleep(1000);
	}
}

/*
 * progress_linger() for _exit(): the same bound, but this thread only
 * looks, and the progress thread, which serves closed connections anyway,
 * does the work.  _exit() may come from a signal handler that interrupted
 * a thread holding prog_lock, a socket's lock, a transport's or malloc's:
 * so no lock is waited for (a socket whose lock is taken counts as still
 * closing, without progress), nothing is allocated, nothing is logged.
 * The list is walked under prog_lock: the sockets on it stay allocated
 * while it is held, and a trylock of a socket's lock under it cannot
 * wait.
 */
void progress_linger_quick(void)
{
	uint64_t linger = (uint64_t)tun_int(TUN_exit_linger_ms) * 1000000ull;
	uint64_t start = sdp_now_ns(), deadline = start + linger, cap = start + 10 * linger;
	uint64_t last_sig = 0;

	prog_kick();
	for (;;) {
		bool pending = true, looked = false;
		uint64_t sig = 0;

		if (pthread_mutex_trylock(&prog_lock) == 0) {
			/* While the thread walks the list, it is not here. */
			looked = !prog_watch_out;
			pending = prog_watch_out;
			for (struct sock_ref *r = prog_watch; r; r = r->next) {
				struct sdp_sock *s = r->s;

				if (pthread_mutex_trylock(&s->lock)) {
					pending = true;
					looked = false;
					continue;
				}
				if (s->app_closed && !orphan_flushed(s)) {
					pending = true;
					sig += closing_progress(s->conn);
				}
				pthread_mutex_unlock(&s->lock);
			}
			pthread_mutex_unlock(&prog_lock);
		}
		if (!pending)
			return;
		uint64_t now = sdp_now_ns();

		/* Progress only from a whole look: one that missed the list
		 * or a socket would read as a change. */
		if (looked && sig != last_sig) {
			last_sig = sig;
			deadline = now + linger < cap ? now + linger : cap;
		}
		if (now >= deadline)
			return;
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
}

/* After fork() only the calling thread exists in the child: the progress
 * thread must be started again there, on an epoll set of its own (the
 * inherited one is shared with the parent). */
static void prog_atfork_child(void)
{
	/* The lock may have been held by a parent thread at fork time. */
	pthread_mutex_init(&prog_lock, NULL);
	if (prog_epfd >= 0)
		fdspace_close(prog_epfd);
	if (prog_wakefd >= 0)
		fdspace_close(prog_wakefd);
	prog_epfd = prog_wakefd = -1;
	prog_running = false;
	/* The parent's too: this thread makes a waker of its own. */
	waker_fd = -1;
	/* The lists hold references the parent's thread owned; the memory
	 * is the child's copy and is left alone. */
	prog_releases = NULL;
	prog_watch = NULL;
	prog_pokes = NULL;
	prog_idle = NULL;
}

__attribute__((constructor)) static void prog_register_atfork(void)
{
	pthread_atfork(NULL, NULL, prog_atfork_child);
}
