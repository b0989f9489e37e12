/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * epoll checks: level and edge triggering, EPOLLONESHOT, EPOLLRDHUP,
 * EPOLLOUT, reset (EPOLLHUP|EPOLLERR), EPOLL_CTL_DEL/MOD/ADD errors,
 * closed descriptors, epoll_pwait's signal mask, EINTR, one epoll fd
 * shared by two threads, poll() on an epoll fd, an epoll fd in another
 * epoll set, a listening socket, and a socket added before connect().
 */

#include "util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static int ep_ctl(int ep, int op, int fd, uint32_t events)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.fd = fd;
	return epoll_ctl(ep, op, fd, &ev);
}

/* One epoll_wait of up to MS ms for one event; noted as "n:EVENTS", or
 * "n=0", or the errno name.  Returns n (or -1); *evp gets the events. */
static int ep_wait(int ep, int ms, uint32_t *evp, const char *tag)
{
	struct epoll_event ev;
	char b[128];
	int n;

	memset(&ev, 0, sizeof(ev));
	do
		n = epoll_wait(ep, &ev, 1, ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		note("%s=%s", tag, errname(errno));
	else if (n == 0)
		note("%s=0", tag);
	else
		note("%s=%d:%s", tag, n, epollname(ev.events, b, sizeof(b)));
	if (evp)
		*evp = n > 0 ? ev.events : 0;
	return n;
}

/* A pair and an epoll fd with p.s added for EVENTS. */
static int setup(struct pair *p, int *ep, uint32_t events)
{
	*ep = -1;
	if (pair_open(p) < 0)
		return -1;
	*ep = epoll_create1(EPOLL_CLOEXEC);
	if (*ep < 0)
		return fail("epoll_create1: %s", errname(errno));
	if (ep_ctl(*ep, EPOLL_CTL_ADD, p->s, events) < 0)
		return fail("EPOLL_CTL_ADD: %s", errname(errno));
	return 0;
}

static int send_and_wait(struct pair *p, const char *data)
{
	if (write_all(p->c, data, strlen(data), 10000) < 0)
		return fail("send: %s", errname(errno));
	return 0;
}

/*
 * The checks that are one body: a pair with p.s in an epoll set, then
 * steps run in order; the first that goes wrong fails the check.
 */
enum ep_op {
	EP_END,
	EP_SEND,	/* p.c sends .data */
	EP_READ,	/* p.s reads .n bytes (at most 16) */
	EP_SHUT_WR,	/* p.c shuts down writing */
	EP_MOD,		/* EPOLL_CTL_MOD of p.s to .events */
	EP_DEL,		/* EPOLL_CTL_DEL of p.s, noted; a failure gives no reason */
	EP_POLL_IN,	/* poll() finds p.s readable */
	EP_WAIT,	/* epoll_wait, noted as .data: .n events, and
			 * (events & .mask) == .events */
};

struct ep_step {
	enum ep_op op;
	const char *data;
	int ms, n;
	uint32_t events, mask;
	const char *why;	/* EP_WAIT's failure */
};

#define SEND(d)		{ .op = EP_SEND, .data = (d) }
#define READ(len)	{ .op = EP_READ, .n = (len) }
#define PEER_SHUT_WR	{ .op = EP_SHUT_WR }
#define MOD(ev)		{ .op = EP_MOD, .events = (ev) }
#define DEL		{ .op = EP_DEL }
#define READABLE	{ .op = EP_POLL_IN }
/* count events within time ms, noted as tag; else the check fails: reason. */
#define WAIT(tag, time, count, reason) \
	{ .op = EP_WAIT, .data = (tag), .ms = (time), .n = (count), .why = (reason) }
/* One event within time ms whose bits under bits are ev. */
#define WAIT_EV(tag, time, bits, ev, reason) \
	{ .op = EP_WAIT, .data = (tag), .ms = (time), .n = 1, .events = (ev), .mask = (bits), \
	  .why = (reason) }

struct ep_scenario {
	const char *name;		/* the check's */
	uint32_t events;		/* p.s's mask when added */
	struct ep_step steps[8];	/* up to EP_END */
};

static int ep_step(const struct ep_step *st, struct pair *p, int ep)
{
	char buf[16];
	uint32_t ev;
	int r;

	switch (st->op) {
	case EP_SEND:
		return send_and_wait(p, st->data);
	case EP_READ:
		if (read_exact(p->s, buf, (size_t)st->n, 10000) < 0)
			return fail("read: %s", errname(errno));
		return 0;
	case EP_SHUT_WR:
		if (shutdown(p->c, SHUT_WR) < 0)
			return fail("shutdown: %s", errname(errno));
		return 0;
	case EP_MOD:
		if (ep_ctl(ep, EPOLL_CTL_MOD, p->s, st->events) < 0)
			return fail("EPOLL_CTL_MOD: %s", errname(errno));
		return 0;
	case EP_DEL:
		r = ep_ctl(ep, EPOLL_CTL_DEL, p->s, 0);
		note("del=%s", r == 0 ? "0" : errname(errno));
		return r;
	case EP_POLL_IN:
		if (wait_fd(p->s, POLLIN, 5000) <= 0)
			return fail("no data");
		return 0;
	case EP_WAIT:
		if (ep_wait(ep, st->ms, &ev, st->data) != st->n || (ev & st->mask) != st->events)
			return fail("%s", st->why);
		return 0;
	case EP_END:
		break;
	}
	return fail("bad step %d", (int)st->op);
}

static const struct ep_scenario ep_scenarios[] = {
	{ "epoll_lt", EPOLLIN, {
		SEND("lt"),
		WAIT("wait1", 5000, 1, "level-triggered event not reported twice"),
		WAIT("wait2", 100, 1, "level-triggered event not reported twice"),
		READ(2),
		WAIT("drained", 100, 0, "event after the data was read"),
	} },
	{ "epoll_et", EPOLLIN | EPOLLET, {
		SEND("a"),
		WAIT("wait1", 5000, 1, "no event"),
		WAIT("wait2", 100, 0, "edge-triggered event reported again without new data"),
		SEND("b"),
		WAIT("new-data", 5000, 1, "no event for new data"),
		WAIT("wait4", 100, 0, "reported again"),
	} },
	{ "epoll_oneshot", EPOLLIN | EPOLLONESHOT, {
		SEND("a"),
		WAIT("wait1", 5000, 1, "no event"),
		SEND("b"),
		WAIT("disarmed", 100, 0, "event after EPOLLONESHOT fired"),
		MOD(EPOLLIN | EPOLLONESHOT),
		WAIT("rearmed", 5000, 1, "no event after EPOLL_CTL_MOD"),
		WAIT("disarmed", 100, 0, "event after EPOLLONESHOT fired again"),
	} },
	{ "epoll_rdhup", EPOLLIN | EPOLLRDHUP, {
		WAIT("idle", 100, 0, "event on an idle socket"),
		PEER_SHUT_WR,
		WAIT_EV("shut", 5000, EPOLLRDHUP, EPOLLRDHUP, "no EPOLLRDHUP"),
	} },
	{ "epoll_out", EPOLLIN | EPOLLOUT, {
		WAIT_EV("wait", 5000, ~0u, EPOLLOUT, "expected EPOLLOUT alone"),
		MOD(EPOLLOUT | EPOLLET),
		WAIT_EV("et", 5000, ~0u, EPOLLOUT, "expected EPOLLOUT after MOD"),
		WAIT("et-again", 100, 0, "edge-triggered EPOLLOUT reported twice"),
	} },
	{ "epoll_del", EPOLLIN, {
		DEL,
		SEND("x"),
		READABLE,
		WAIT("wait", 100, 0, "event after EPOLL_CTL_DEL"),
	} },
};

/* The row of the check that runs, or NULL. */
static const struct ep_scenario *ep_scenario(void)
{
	for (size_t i = 0; i < sizeof(ep_scenarios) / sizeof(ep_scenarios[0]); i++)
		if (strcmp(ep_scenarios[i].name, check_name()) == 0)
			return &ep_scenarios[i];
	return NULL;
}

static int check_epoll_scenario(void)
{
	const struct ep_scenario *sc = ep_scenario();
	struct pair p = { -1, -1 };
	int ep = -1, rc = -1;

	if (!sc)
		return fail("no scenario for %s", check_name());
	if (setup(&p, &ep, sc->events) < 0)
		goto out;
	for (const struct ep_step *st = sc->steps; st->op != EP_END; st++)
		if (ep_step(st, &p, ep) < 0)
			goto out;
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_epoll_reset(void)
{
	struct pair p = { -1, -1 };
	struct linger lg = { 1, 0 };
	int ep = -1, rc = -1;
	uint32_t ev;
	char buf[4];
	ssize_t n;

	if (setup(&p, &ep, EPOLLIN | EPOLLRDHUP) < 0)
		goto out;
	if (setsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		FAIL_ERRNO("SO_LINGER");
	xclose(&p.c); /* a reset */
	if (ep_wait(ep, 5000, &ev, "reset") != 1 ||
	    !(ev & (EPOLLHUP | EPOLLERR)))
		FAIL("no EPOLLHUP/EPOLLERR after the reset");
	n = recv(p.s, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : n ? "data" : "EOF");
	if (n >= 0 || errno != ECONNRESET)
		FAIL("expected ECONNRESET");
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_epoll_ctl_errors(void)
{
	struct pair p = { -1, -1 };
	int ep = -1, rc = -1, r;

	if (setup(&p, &ep, EPOLLIN) < 0)
		goto out;
	r = ep_ctl(ep, EPOLL_CTL_ADD, p.s, EPOLLIN);
	note("add-again=%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != EEXIST)
		FAIL("expected EEXIST");
	r = ep_ctl(ep, EPOLL_CTL_MOD, p.c, EPOLLIN);
	note("mod-nonmember=%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != ENOENT)
		FAIL("expected ENOENT for MOD");
	r = ep_ctl(ep, EPOLL_CTL_DEL, p.c, 0);
	note("del-nonmember=%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != ENOENT)
		FAIL("expected ENOENT for DEL");
	r = ep_ctl(ep, EPOLL_CTL_ADD, ep, EPOLLIN);
	note("add-self=%s", r == 0 ? "0" : errname(errno));
	r = ep_ctl(p.s, EPOLL_CTL_ADD, p.c, EPOLLIN);
	note("socket-as-epfd=%s", r == 0 ? "0" : errname(errno));
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_epoll_closed_fd(void)
{
	struct pair p = { -1, -1 }, q = { -1, -1 };
	int ep = -1, rc = -1, num, r;

	if (setup(&p, &ep, EPOLLIN) < 0)
		goto out;
	num = p.s;
	xclose(&p.s); /* no other copy: it leaves the set */
	if (send_and_wait(&p, "x") < 0)
		goto out;
	if (ep_wait(ep, 100, NULL, "after-close") != 0)
		FAIL("event for a closed fd");
	/* another socket on the same number is not in the set */
	if (pair_open(&q) < 0)
		goto out;
	if (num != q.c && num != q.s) {
		if (dup2(q.s, num) != num)
			FAIL_ERRNO("dup2");
		p.s = num;
	}
	r = ep_ctl(ep, EPOLL_CTL_MOD, num, EPOLLIN);
	note("mod-new=%s", r == 0 ? "0" : errname(errno));
	r = ep_ctl(ep, EPOLL_CTL_ADD, num, EPOLLIN);
	note("add-new=%s", r == 0 ? "0" : errname(errno));
	if (r < 0)
		FAIL("adding a new socket on the old number failed");
	if (ep_wait(ep, 100, NULL, "idle") != 0)
		FAIL("event for the idle new socket");
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	pair_close(&q);
	return rc;
}

/* Linux: epoll follows the open file description: a closed fd whose
 * duplicate is still open stays in the set (reported under its data). */
static int check_epoll_closed_dup(void)
{
	struct pair p = { -1, -1 };
	int ep = -1, rc = -1, d = -1;

	if (setup(&p, &ep, EPOLLIN) < 0)
		goto out;
	d = dup(p.s);
	if (d < 0)
		FAIL_ERRNO("dup");
	xclose(&p.s);
	if (send_and_wait(&p, "x") < 0)
		goto out;
	if (ep_wait(ep, 5000, NULL, "dup-open") != 1)
		FAIL("no event although a duplicate is open");
	xclose(&d);
	if (ep_wait(ep, 100, NULL, "all-closed") != 0)
		FAIL("event after every copy was closed");
	rc = 0;
out:
	xclose(&ep);
	xclose(&d);
	pair_close(&p);
	return rc;
}

struct pwait_arg {
	pthread_t target;
	int fd;
};

static void *pwait_kick(void *v)
{
	struct pwait_arg *a = v;

	sleep_ms(50);
	pthread_kill(a->target, SIGUSR1);
	sleep_ms(50);
	write_all(a->fd, "d", 1, 10000);
	return NULL;
}

static int check_epoll_pwait_sigmask(void)
{
	struct pair p = { -1, -1 };
	struct pwait_arg a;
	struct epoll_event ev;
	sigset_t mask;
	pthread_t t;
	int ep = -1, rc = -1, n, started = 0, before;
	char b[64];

	if (setup(&p, &ep, EPOLLIN) < 0)
		goto out;
	a.target = pthread_self();
	a.fd = p.c;
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	before = usr1_count;
	if (pthread_create(&t, NULL, pwait_kick, &a) != 0)
		FAIL("pthread_create");
	started = 1;
	/* SIGUSR1 blocked during the wait: the data ends it, not EINTR */
	n = epoll_pwait(ep, &ev, 1, 5000, &mask);
	note("pwait=%s", n < 0 ? errname(errno) : n == 0 ? "0" : "1");
	if (n == 1)
		note("%s", epollname(ev.events, b, sizeof(b)));
	pthread_join(t, NULL);
	started = 0;
	note("usr1=%d", usr1_count - before);
	if (n != 1)
		FAIL("expected the data event");
	if (usr1_count - before != 1)
		FAIL("the blocked signal was not delivered afterwards");
	rc = 0;
out:
	if (started)
		pthread_join(t, NULL);
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_eintr_epoll(void)
{
	struct pair p = { -1, -1 };
	struct kicker k = { 0 };
	struct epoll_event ev;
	int ep = -1, rc = -1, n;

	if (setup(&p, &ep, EPOLLIN) < 0 || kicker_start(&k) < 0)
		goto out;
	n = epoll_wait(ep, &ev, 1, 10000);
	if (n < 0)
		n = -errno;
	kicker_stop(&k);
	note("epoll_wait=%s", n < 0 ? errname(-n) : "n");
	if (n != -EINTR)
		FAIL("expected EINTR");
	rc = 0;
out:
	kicker_stop(&k);
	xclose(&ep);
	pair_close(&p);
	return rc;
}

struct waiter {
	int ep;
	int n;
	int fd;
	int err;
};

static void *waiter_run(void *v)
{
	struct waiter *w = v;
	struct epoll_event ev;

	do
		w->n = epoll_wait(w->ep, &ev, 1, 5000);
	while (w->n < 0 && errno == EINTR);
	if (w->n < 0)
		w->err = errno;
	if (w->n == 1)
		w->fd = ev.data.fd;
	return NULL;
}

static int check_epoll_threads(void)
{
	struct pair a = { -1, -1 }, b = { -1, -1 };
	struct waiter w[2];
	pthread_t t[2];
	int ep = -1, rc = -1, i, started = 0;

	if (setup(&a, &ep, EPOLLIN | EPOLLONESHOT) < 0 || pair_open(&b) < 0)
		goto out;
	if (ep_ctl(ep, EPOLL_CTL_ADD, b.s, EPOLLIN | EPOLLONESHOT) < 0)
		FAIL_ERRNO("EPOLL_CTL_ADD");
	for (i = 0; i < 2; i++) {
		w[i].ep = ep;
		w[i].n = -1;
		w[i].fd = -1;
		w[i].err = 0;
		if (pthread_create(&t[i], NULL, waiter_run, &w[i]) != 0)
			FAIL("pthread_create");
		started++;
	}
	sleep_ms(50);
	if (send_and_wait(&a, "1") < 0 || send_and_wait(&b, "2") < 0)
		goto out;
	for (i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	started = 0;
	note("thread1=%d thread2=%d", w[0].n, w[1].n);
	if (w[0].n != 1 || w[1].n != 1)
		FAIL("each thread should get one event (%s %s)",
		     errname(w[0].err), errname(w[1].err));
	note("fds:%s", (w[0].fd == a.s && w[1].fd == b.s) ||
				       (w[0].fd == b.s && w[1].fd == a.s)
			       ? "both"
			       : "wrong");
	if (!((w[0].fd == a.s && w[1].fd == b.s) ||
	      (w[0].fd == b.s && w[1].fd == a.s)))
		FAIL("the two events were not for the two sockets");
	rc = 0;
out:
	for (i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	xclose(&ep);
	pair_close(&a);
	pair_close(&b);
	return rc;
}

/*
 * A change made by another thread while this one sleeps in epoll_wait:
 * the other thread sends on the peer end (news the member's transport
 * brings), or shuts the member down for reading (a change no transport
 * brings: under the preload only the set's doorbell can wake the
 * sleeper, and the reporting thread's own changes, which do not ring
 * it, must not silence it).  The sleeper may still be on its way to the
 * sleep when the change is made: the result is the same either way.  A
 * wait with a timeout would end with the event anyway (the last look
 * finds it): this one has none.
 */
struct other_thread {
	int fd;
	bool shut;
};

static void *other_thread_run(void *v)
{
	struct other_thread *o = v;

	sleep_ms(100);
	if (o->shut)
		(void)shutdown(o->fd, SHUT_RD);
	else if (write(o->fd, "ping", 4) != 4)
		return (void *)1;
	return NULL;
}

static int check_epoll_other_thread(void)
{
	struct pair p = { -1, -1 };
	struct other_thread o;
	pthread_t t;
	bool started = false, shut = !strcmp(check_name(), "epoll_thread_shut_rd");
	uint32_t ev;
	char b[8];
	int ep = -1, rc = -1;

	if (setup(&p, &ep, EPOLLIN | EPOLLRDHUP) < 0)
		goto out;
	o.fd = shut ? p.s : p.c;
	o.shut = shut;
	if (pthread_create(&t, NULL, other_thread_run, &o) != 0)
		FAIL("pthread_create");
	started = true;
	/* No timeout: a sleeper nobody wakes is the watchdog's failure. */
	if (ep_wait(ep, -1, &ev, "wait") != 1)
		FAIL("the sleeper was not woken by the other thread's %s", shut ? "shutdown" : "send");
	if (!shut && read_exact(p.s, b, 4, 5000) < 0)
		FAIL_ERRNO("read");
	rc = 0;
out:
	if (started)
		pthread_join(t, NULL);
	xclose(&ep);
	pair_close(&p);
	return rc;
}

/* Puts the member's set ep in outer. */
static int nest(int outer, int ep)
{
	if (ep_ctl(outer, EPOLL_CTL_ADD, ep, EPOLLIN) < 0)
		return fail("EPOLL_CTL_ADD of the epoll fd: %s", errname(errno));
	return 0;
}

/* A pair, the member's set ep with p.s added for EPOLLIN | EPOLLRDHUP,
 * and a set outer: ep is nested in it before the member is added when
 * early, else the caller nests it later (nest()). */
static int nested_setup(struct pair *p, int *ep, int *outer, bool early)
{
	*ep = *outer = -1;
	if (pair_open(p) < 0)
		return -1;
	*ep = epoll_create1(EPOLL_CLOEXEC);
	*outer = epoll_create1(EPOLL_CLOEXEC);
	if (*ep < 0 || *outer < 0)
		return fail("epoll_create1: %s", errname(errno));
	if (early && nest(*outer, *ep) < 0)
		return -1;
	if (ep_ctl(*ep, EPOLL_CTL_ADD, p->s, EPOLLIN | EPOLLRDHUP) < 0)
		return fail("EPOLL_CTL_ADD: %s", errname(errno));
	return 0;
}

/* A thread asleep in an outer epoll set that holds the member's set
 * (added to it before or after the member), woken by another thread's
 * shutdown(SHUT_RD) of the member: only the inner set's doorbell carries
 * that, and nobody sleeps in the inner set itself. */
static int check_epoll_nested(void)
{
	struct pair p = { -1, -1 };
	struct other_thread o;
	pthread_t t;
	bool started = false, early = !strcmp(check_name(), "epoll_nested_early");
	uint32_t ev;
	int ep = -1, outer = -1, rc = -1;

	if (nested_setup(&p, &ep, &outer, early) < 0)
		goto out;
	/* What the member's set says before the wait is settled. */
	if (ep_wait(ep, 0, NULL, "inner") != 0)
		FAIL("an event before the shutdown");
	if (!early && nest(outer, ep) < 0)
		goto out;
	o.fd = p.s;
	o.shut = true;
	if (pthread_create(&t, NULL, other_thread_run, &o) != 0)
		FAIL("pthread_create");
	started = true;
	/* No timeout: a sleeper nobody wakes is the watchdog's failure. */
	if (ep_wait(outer, -1, NULL, "outer") != 1)
		FAIL("the outer set's sleeper was not woken by the other thread's shutdown");
	if (ep_wait(ep, 0, &ev, "inner") != 1 || !(ev & EPOLLIN))
		FAIL("the member's set did not report the shutdown");
	rc = 0;
out:
	if (started)
		pthread_join(t, NULL);
	xclose(&outer);
	xclose(&ep);
	pair_close(&p);
	return rc;
}

/* An outer set (or a poll() of the epoll fd) sees the member's set
 * readable only while a member would be reported, as on Linux: not for
 * news that reports nothing to an EPOLLIN member, such as the member's
 * own sends read by the peer (space freed, credits returned), early or
 * late nesting alike. */
static int check_epoll_nested_quiet(void)
{
	struct pair p = { -1, -1 };
	char b[512];
	uint32_t ev;
	bool early = !strcmp(check_name(), "epoll_nested_quiet_early");
	int ep = -1, outer = -1, rc = -1, r;

	memset(b, 'q', sizeof(b));
	if (nested_setup(&p, &ep, &outer, early) < 0 || (!early && nest(outer, ep) < 0))
		goto out;
	for (int i = 0; i < 64; i++) {
		if (write_all(p.s, b, sizeof(b), 5000) < 0)
			FAIL_ERRNO("write");
		if (read_exact(p.c, b, sizeof(b), 5000) < 0)
			FAIL_ERRNO("read");
	}
	if (ep_wait(outer, 300, NULL, "quiet") != 0)
		FAIL("the outer set woke with nothing to report in the member's set");
	r = wait_fd(ep, POLLIN, 0);
	note("poll=%s", r < 0 ? errname(errno) : pollname(r, b, sizeof(b)));
	if (r != 0)
		FAIL("the member's set polls readable with nothing to report");
	if (send_and_wait(&p, "x") < 0)
		goto out;
	if (ep_wait(outer, 5000, NULL, "data") != 1)
		FAIL("the outer set did not report the member's data");
	if (ep_wait(ep, 0, &ev, "inner") != 1 || !(ev & EPOLLIN))
		FAIL("the member's set did not report the data");
	rc = 0;
out:
	xclose(&outer);
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_epoll_poll_epfd(void)
{
	struct pair p = { -1, -1 };
	char b[64];
	int ep = -1, rc = -1, r;

	if (setup(&p, &ep, EPOLLIN) < 0)
		goto out;
	r = wait_fd(ep, POLLIN, 0);
	note("idle=%s", r < 0 ? errname(errno) : pollname(r, b, sizeof(b)));
	if (r != 0)
		FAIL("epoll fd readable while idle");
	if (send_and_wait(&p, "x") < 0)
		goto out;
	r = wait_fd(ep, POLLIN, 5000);
	note("data=%s", r < 0 ? errname(errno) : pollname(r, b, sizeof(b)));
	if (r != POLLIN)
		FAIL("epoll fd not readable after a member got data");
	if (ep_wait(ep, 0, NULL, "wait") != 1)
		FAIL("no event");
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	return rc;
}

static int check_epoll_listener(void)
{
	struct sockaddr_in a;
	int l = -1, c = -1, s = -1, ep = -1, rc = -1;

	l = make_listener(SOCK_NONBLOCK, &a);
	if (l < 0)
		goto out;
	ep = epoll_create1(0);
	if (ep < 0)
		FAIL_ERRNO("epoll_create1");
	if (ep_ctl(ep, EPOLL_CTL_ADD, l, EPOLLIN) < 0)
		FAIL_ERRNO("EPOLL_CTL_ADD");
	if (ep_wait(ep, 100, NULL, "idle") != 0)
		FAIL("event on an idle listener");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		FAIL_ERRNO("connect");
	if (ep_wait(ep, 5000, NULL, "client") != 1)
		FAIL("no event for the client");
	s = accept(l, NULL, NULL);
	note("accept=%s", s < 0 ? errname(errno) : "fd");
	if (s < 0)
		FAIL("accept after the event");
	if (ep_wait(ep, 100, NULL, "accepted") != 0)
		FAIL("event after the accept");
	rc = 0;
out:
	xclose(&ep);
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

static int check_epoll_before_connect(void)
{
	struct sockaddr_in a;
	int l = -1, c = -1, s = -1, ep = -1, rc = -1, r, i;
	uint32_t ev = 0;
	char b[96];

	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	ep = epoll_create1(0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (ep < 0 || c < 0)
		FAIL_ERRNO("epoll_create1/socket");
	if (ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLOUT) < 0)
		FAIL_ERRNO("EPOLL_CTL_ADD before connect");
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	note("connect=%s", r == 0 || errno == EINPROGRESS ? "EINPROGRESS_or_0"
							  : errname(errno));
	if (r < 0 && errno != EINPROGRESS)
		FAIL("connect");
	if (ep_wait(ep, 5000, &ev, "connected") != 1 || ev != EPOLLOUT)
		FAIL("expected EPOLLOUT once connected");
	s = accept(l, NULL, NULL);
	if (s < 0)
		FAIL_ERRNO("accept");
	if (write_all(s, "hi", 2, 10000) < 0)
		FAIL_ERRNO("send");
	for (i = 0; i < 500 && !(ev & EPOLLIN); i++) {
		struct epoll_event e;

		if (epoll_wait(ep, &e, 1, 5000) == 1)
			ev = e.events;
		if (!(ev & EPOLLIN))
			sleep_ms(10);
	}
	note("data=%s", epollname(ev, b, sizeof(b)));
	if (ev != (EPOLLIN | EPOLLOUT))
		FAIL("expected EPOLLIN|EPOLLOUT after the data");
	rc = 0;
out:
	xclose(&ep);
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

const struct check checks_epoll[] = {
	{ "epoll_lt", check_epoll_scenario, "level-triggered EPOLLIN reported twice" },
	{ "epoll_et", check_epoll_scenario, "edge-triggered: once per arrival" },
	{ "epoll_oneshot", check_epoll_scenario, "EPOLLONESHOT, re-armed by EPOLL_CTL_MOD" },
	{ "epoll_rdhup", check_epoll_scenario, "EPOLLRDHUP after peer SHUT_WR" },
	{ "epoll_out", check_epoll_scenario, "EPOLLOUT on a connected socket" },
	{ "epoll_reset", check_epoll_reset,
	  "EPOLLHUP/EPOLLERR after the peer's reset, then ECONNRESET" },
	{ "epoll_del", check_epoll_scenario, "no events after EPOLL_CTL_DEL" },
	{ "epoll_ctl_errors", check_epoll_ctl_errors,
	  "EEXIST on double ADD, ENOENT on MOD/DEL of a non-member" },
	{ "epoll_closed_fd", check_epoll_closed_fd,
	  "a closed fd leaves the set; a new socket on its number is new" },
	{ "epoll_closed_dup", check_epoll_closed_dup,
	  "a closed fd with an open duplicate stays in the set (Linux)" },
	{ "epoll_pwait_sigmask", check_epoll_pwait_sigmask,
	  "epoll_pwait with SIGUSR1 blocked: not interrupted" },
	{ "eintr_epoll", check_eintr_epoll,
	  "epoll_wait interrupted by a signal: EINTR" },
	{ "epoll_threads", check_epoll_threads,
	  "one epoll fd, two waiting threads, one event each" },
	{ "epoll_thread_send", check_epoll_other_thread,
	  "asleep in epoll_wait, woken by another thread's send from the peer" },
	{ "epoll_thread_shut_rd", check_epoll_other_thread,
	  "asleep in epoll_wait, woken by another thread's shutdown(SHUT_RD)" },
	{ "epoll_nested", check_epoll_nested,
	  "an epoll fd in another set: its sleeper woken by a member's change from another thread" },
	{ "epoll_nested_early", check_epoll_nested,
	  "the same, the epoll fd nested before the member was added" },
	{ "epoll_nested_quiet", check_epoll_nested_quiet,
	  "an epoll fd in another set: not readable for the member's own sends read by the peer" },
	{ "epoll_nested_quiet_early", check_epoll_nested_quiet,
	  "the same, the epoll fd nested before the member was added" },
	{ "epoll_poll_epfd", check_epoll_poll_epfd,
	  "poll() on the epoll fd: POLLIN when a member has data" },
	{ "epoll_listener", check_epoll_listener,
	  "listening socket in epoll: EPOLLIN on connect, accept works" },
	{ "epoll_before_connect", check_epoll_before_connect,
	  "socket added before connect: EPOLLOUT, then EPOLLIN" },
	{ NULL, NULL, NULL },
};
