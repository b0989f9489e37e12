/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * poll/ppoll/select/pselect checks: sockets mixed with a pipe, time outs,
 * closed descriptors (POLLNVAL, EBADF), EINTR from a signal handler
 * installed without SA_RESTART.
 */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

/* The mixed set: a pipe with data, a socket with data, an idle socket
 * (asked for input) and a socket asked for output. */
struct mixed {
	int pp[2];
	struct pair a; /* a.c has data */
	struct pair b; /* b.c idle, b.s asked for POLLOUT */
};

static void mixed_close(struct mixed *m)
{
	xclose(&m->pp[0]);
	xclose(&m->pp[1]);
	pair_close(&m->a);
	pair_close(&m->b);
}

static int mixed_open(struct mixed *m)
{
	m->pp[0] = m->pp[1] = -1;
	m->a.c = m->a.s = m->b.c = m->b.s = -1;
	if (pipe(m->pp) < 0)
		return fail("pipe: %s", errname(errno));
	if (pair_open(&m->a) < 0 || pair_open(&m->b) < 0)
		goto bad;
	if (write(m->pp[1], "p", 1) != 1) {
		fail("pipe write: %s", errname(errno));
		goto bad;
	}
	if (write_all(m->a.s, "data", 4, 10000) < 0) {
		fail("send: %s", errname(errno));
		goto bad;
	}
	if (wait_fd(m->a.c, POLLIN, 10000) <= 0) {
		fail("no data at the socket");
		goto bad;
	}
	return 0;
bad:
	mixed_close(m);
	return -1;
}

static int poll_mixed(int use_ppoll)
{
	struct mixed m;
	struct pollfd pf[4];
	char b0[64], b1[64], b2[64], b3[64];
	int n, rc = -1;

	if (mixed_open(&m) < 0)
		return -1;
	memset(pf, 0, sizeof(pf));
	pf[0].fd = m.pp[0];
	pf[0].events = POLLIN;
	pf[1].fd = m.a.c;
	pf[1].events = POLLIN;
	pf[2].fd = m.b.c;
	pf[2].events = POLLIN;
	pf[3].fd = m.b.s;
	pf[3].events = POLLOUT;
	if (use_ppoll) {
		struct timespec ts = { 2, 0 };
		sigset_t none;

		sigemptyset(&none);
		n = ppoll(pf, 4, &ts, &none);
	} else {
		n = poll(pf, 4, 2000);
	}
	if (n < 0)
		FAIL_ERRNO(use_ppoll ? "ppoll" : "poll");
	note("n=%d pipe:%s sock:%s idle:%s out:%s", n,
	     pollname(pf[0].revents, b0, sizeof(b0)),
	     pollname(pf[1].revents, b1, sizeof(b1)),
	     pollname(pf[2].revents, b2, sizeof(b2)),
	     pollname(pf[3].revents, b3, sizeof(b3)));
	if (n != 3 || pf[0].revents != POLLIN || pf[1].revents != POLLIN ||
	    pf[2].revents != 0 || pf[3].revents != POLLOUT)
		FAIL("unexpected result");
	rc = 0;
out:
	mixed_close(&m);
	return rc;
}

static int check_poll_mixed(void)
{
	return poll_mixed(0);
}

static int check_ppoll_mixed(void)
{
	return poll_mixed(1);
}

static int select_mixed(int use_pselect)
{
	struct mixed m;
	fd_set r, w;
	int n, rc = -1, maxfd;

	if (mixed_open(&m) < 0)
		return -1;
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_SET(m.pp[0], &r);
	FD_SET(m.a.c, &r);
	FD_SET(m.b.c, &r);
	FD_SET(m.b.s, &w);
	FD_SET(m.b.c, &w); /* writable too */
	maxfd = m.pp[0];
	if (m.a.c > maxfd)
		maxfd = m.a.c;
	if (m.b.c > maxfd)
		maxfd = m.b.c;
	if (m.b.s > maxfd)
		maxfd = m.b.s;
	if (use_pselect) {
		struct timespec ts = { 2, 0 };
		sigset_t none;

		sigemptyset(&none);
		n = pselect(maxfd + 1, &r, &w, NULL, &ts, &none);
	} else {
		struct timeval tv = { 2, 0 };

		n = select(maxfd + 1, &r, &w, NULL, &tv);
	}
	if (n < 0)
		FAIL_ERRNO(use_pselect ? "pselect" : "select");
	note("n=%d pipe:%s sock:%s idle:%s out:%s idle-out:%s", n,
	     FD_ISSET(m.pp[0], &r) ? "r" : "-", FD_ISSET(m.a.c, &r) ? "r" : "-",
	     FD_ISSET(m.b.c, &r) ? "r" : "-", FD_ISSET(m.b.s, &w) ? "w" : "-",
	     FD_ISSET(m.b.c, &w) ? "w" : "-");
	if (n != 4 || !FD_ISSET(m.pp[0], &r) || !FD_ISSET(m.a.c, &r) ||
	    FD_ISSET(m.b.c, &r) || !FD_ISSET(m.b.s, &w) || !FD_ISSET(m.b.c, &w))
		FAIL("unexpected result");
	rc = 0;
out:
	mixed_close(&m);
	return rc;
}

static int check_select_mixed(void)
{
	return select_mixed(0);
}

static int check_pselect_mixed(void)
{
	return select_mixed(1);
}

/* time outs of 0 and 50 ms on an idle socket: 0 ready, not too early */
static int check_timeouts(void)
{
	struct pair p = { -1, -1 };
	struct pollfd pf;
	struct timeval tv;
	struct timespec ts;
	fd_set r;
	int64_t t0, dt;
	int rc = -1, n, i;

	if (pair_open(&p) < 0)
		goto out;
	for (i = 0; i < 2; i++) {
		int ms = i == 0 ? 0 : 50;
		int lo = i == 0 ? 0 : 40;

		pf.fd = p.c;
		pf.events = POLLIN;
		pf.revents = 0;
		t0 = now_ms();
		n = poll(&pf, 1, ms);
		dt = now_ms() - t0;
		note("poll%d=%s", ms, n < 0 ? errname(errno) : n ? "ready" : "0");
		if (n != 0 || dt < lo || dt > 5000)
			FAIL("poll(%d ms): %d after %lld ms", ms, n, (long long)dt);

		ts.tv_sec = 0;
		ts.tv_nsec = (long)ms * 1000000L;
		t0 = now_ms();
		n = ppoll(&pf, 1, &ts, NULL);
		dt = now_ms() - t0;
		note("ppoll%d=%s", ms, n < 0 ? errname(errno) : n ? "ready" : "0");
		if (n != 0 || dt < lo || dt > 5000)
			FAIL("ppoll(%d ms): %d after %lld ms", ms, n, (long long)dt);

		FD_ZERO(&r);
		FD_SET(p.c, &r);
		tv.tv_sec = 0;
		tv.tv_usec = ms * 1000;
		t0 = now_ms();
		n = select(p.c + 1, &r, NULL, NULL, &tv);
		dt = now_ms() - t0;
		note("select%d=%s", ms, n < 0 ? errname(errno) : n ? "ready" : "0");
		if (n != 0 || dt < lo || dt > 5000)
			FAIL("select(%d ms): %d after %lld ms", ms, n, (long long)dt);
		note("tv=%ld.%06ld", (long)tv.tv_sec, (long)tv.tv_usec);

		FD_ZERO(&r);
		FD_SET(p.c, &r);
		t0 = now_ms();
		n = pselect(p.c + 1, &r, NULL, NULL, &ts, NULL);
		dt = now_ms() - t0;
		note("pselect%d=%s", ms, n < 0 ? errname(errno) : n ? "ready" : "0");
		if (n != 0 || dt < lo || dt > 5000)
			FAIL("pselect(%d ms): %d after %lld ms", ms, n,
			     (long long)dt);
	}
	note("time_ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* A socket number that was just closed (and not reused). */
static int closed_socket_fd(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return fail("socket: %s", errname(errno));
	close(fd);
	if (fd_is_open(fd))
		return fail("the closed fd number was reused at once");
	return fd;
}

static int check_poll_nval(void)
{
	struct pair p = { -1, -1 };
	struct pollfd pf[2];
	char b0[64], b1[64];
	int rc = -1, n, fd;

	if (pair_open(&p) < 0)
		goto out;
	fd = closed_socket_fd();
	if (fd < 0)
		goto out;
	pf[0].fd = fd;
	pf[0].events = POLLIN | POLLOUT;
	pf[0].revents = 0;
	pf[1].fd = p.c;
	pf[1].events = POLLIN;
	pf[1].revents = 0;
	n = poll(pf, 2, 100);
	note("n=%d closed:%s idle:%s", n, pollname(pf[0].revents, b0, sizeof(b0)),
	     pollname(pf[1].revents, b1, sizeof(b1)));
	if (n != 1 || pf[0].revents != POLLNVAL || pf[1].revents != 0)
		FAIL("unexpected result");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_select_ebadf(void)
{
	struct pair p = { -1, -1 };
	struct timeval tv = { 0, 100000 };
	fd_set r;
	int rc = -1, n, fd, maxfd;

	if (pair_open(&p) < 0)
		goto out;
	fd = closed_socket_fd();
	if (fd < 0)
		goto out;
	FD_ZERO(&r);
	FD_SET(fd, &r);
	FD_SET(p.c, &r);
	maxfd = fd > p.c ? fd : p.c;
	n = select(maxfd + 1, &r, NULL, NULL, &tv);
	note("select=%s", n < 0 ? errname(errno) : "n");
	if (n >= 0 || errno != EBADF)
		FAIL("expected EBADF");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* Block in poll/ppoll/select on an idle socket while another thread sends
 * SIGUSR1 (handler without SA_RESTART): EINTR. */
static int eintr(int which)
{
	static const char *names[] = { "poll", "ppoll", "select", "pselect" };
	struct kicker k = { 0 };
	struct pair p = { -1, -1 };
	struct pollfd pf;
	struct timespec ts = { 10, 0 };
	struct timeval tv = { 10, 0 };
	sigset_t none;
	fd_set r;
	int rc = -1, n = 0, before;

	if (pair_open(&p) < 0)
		goto out;
	sigemptyset(&none);
	pf.fd = p.c;
	pf.events = POLLIN;
	pf.revents = 0;
	FD_ZERO(&r);
	FD_SET(p.c, &r);
	before = usr1_count;
	if (kicker_start(&k) < 0)
		goto out;
	switch (which) {
	case 0:
		n = poll(&pf, 1, 10000);
		break;
	case 1:
		n = ppoll(&pf, 1, &ts, &none);
		break;
	case 2:
		n = select(p.c + 1, &r, NULL, NULL, &tv);
		break;
	default:
		n = pselect(p.c + 1, &r, NULL, NULL, &ts, &none);
		break;
	}
	if (n < 0)
		n = -errno;
	kicker_stop(&k);
	note("%s=%s handler=%s", names[which], n < 0 ? errname(-n) : "n",
	     usr1_count > before ? "ran" : "no");
	if (n != -EINTR)
		FAIL("expected EINTR");
	rc = 0;
out:
	kicker_stop(&k);
	pair_close(&p);
	return rc;
}

static int check_eintr_poll(void)
{
	return eintr(0);
}

static int check_eintr_ppoll(void)
{
	return eintr(1);
}

static int check_eintr_select(void)
{
	return eintr(2);
}

static int check_eintr_pselect(void)
{
	return eintr(3);
}

/* errno after a call that succeeded is what it was before (Linux's
 * calls leave it alone).  The calls run with the sender's buffers full,
 * where a stack's own nonblocking attempts fail with EAGAIN under them. */
#define KEPT EHWPOISON
#define KEPT_AFTER(what, call)                                                  \
	do {                                                                    \
		errno = KEPT;                                                   \
		long r_ = (long)(call);                                         \
		if (r_ < 0)                                                     \
			FAIL("%s failed: %s", (what), errname(errno));          \
		if (errno != KEPT)                                              \
			FAIL("%s gave %ld and changed errno to %s", (what), r_, \
			     errname(errno));                                   \
	} while (0)

static int check_errno_kept(void)
{
	static char buf[65536];
	struct pair p = { -1, -1 };
	struct pollfd pf;
	struct timeval tv = { 0, 20000 };
	struct timespec ts = { 0, 20000000 };
	struct epoll_event ev = { .events = EPOLLOUT }, out;
	fd_set w;
	int rc = -1, ep = -1, one = 1;
	long total = 0;
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	if (fcntl(p.c, F_SETFL, O_NONBLOCK) < 0)
		FAIL_ERRNO("fcntl");
	while ((n = send(p.c, buf, sizeof(buf), 0)) > 0 && total < (64L << 20))
		total += n;
	if (n >= 0 || errno != EAGAIN)
		FAIL("filling the sender: %s", n < 0 ? errname(errno) : "no EAGAIN");
	pf.fd = p.c;
	pf.events = POLLOUT;
	KEPT_AFTER("poll(POLLOUT, 20 ms) on a full socket", poll(&pf, 1, 20));
	KEPT_AFTER("ppoll(POLLOUT, 20 ms) on a full socket", ppoll(&pf, 1, &ts, NULL));
	FD_ZERO(&w);
	FD_SET(p.c, &w);
	KEPT_AFTER("select(write, 20 ms) on a full socket", select(p.c + 1, NULL, &w, NULL, &tv));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		FAIL_ERRNO("epoll_create1");
	KEPT_AFTER("epoll_ctl(ADD) of a full socket", epoll_ctl(ep, EPOLL_CTL_ADD, p.c, &ev));
	KEPT_AFTER("epoll_wait(EPOLLOUT, 20 ms) on a full socket", epoll_wait(ep, &out, 1, 20));
	KEPT_AFTER("setsockopt(TCP_NODELAY)",
		   setsockopt(p.c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
	KEPT_AFTER("recv() of the first bytes", recv(p.s, buf, 1000, 0));
	pf.fd = p.s;
	pf.events = POLLIN;
	KEPT_AFTER("poll(POLLIN) on a socket with data", poll(&pf, 1, 1000));
	KEPT_AFTER("send() of a byte the other way", send(p.s, "x", 1, 0));
	pf.fd = p.c;
	KEPT_AFTER("poll(POLLIN, 1 s) for that byte", poll(&pf, 1, 1000));
	KEPT_AFTER("recv() of that byte", recv(p.c, buf, 1, 0));
	note("errno kept through 12 calls");
	rc = 0;
out:
	xclose(&ep);
	pair_close(&p);
	return rc;
}

const struct check checks_poll[] = {
	{ "poll_mixed", check_poll_mixed, "poll over a pipe and sockets" },
	{ "ppoll_mixed", check_ppoll_mixed, "ppoll over a pipe and sockets" },
	{ "select_mixed", check_select_mixed, "select over a pipe and sockets" },
	{ "pselect_mixed", check_pselect_mixed,
	  "pselect over a pipe and sockets" },
	{ "poll_timeouts", check_timeouts,
	  "poll/ppoll/select/pselect time outs 0 and 50 ms: 0" },
	{ "poll_nval", check_poll_nval, "poll on a closed fd: POLLNVAL" },
	{ "select_ebadf", check_select_ebadf, "select on a closed fd: EBADF" },
	{ "eintr_poll", check_eintr_poll, "poll interrupted by a signal: EINTR" },
	{ "eintr_ppoll", check_eintr_ppoll,
	  "ppoll interrupted by a signal: EINTR" },
	{ "eintr_select", check_eintr_select,
	  "select interrupted by a signal: EINTR" },
	{ "eintr_pselect", check_eintr_pselect,
	  "pselect interrupted by a signal: EINTR" },
	{ "errno_kept", check_errno_kept,
	  "calls that succeed leave errno as it was" },
	{ NULL, NULL, NULL },
};
