/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Descriptor numbers: Linux gives a new descriptor the lowest free
 * number, and programs index tables by it.  These checks print the
 * numbers the program gets (socket, accept, accept4, dup, pipe,
 * epoll_create1, after connections came and went) so that the run under
 * the preload must show the very same ones: whatever descriptors libsdp
 * keeps for its connections must not take them.  Then close_range() and
 * closefrom() over everything the program has: its connections close as
 * they would on TCP, and new ones work afterwards.
 */
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define NPAIRS 3

/* A byte each way between a and b. */
static int exchange(int a, int b, const char *tag)
{
	char c;

	if (write_all(a, "x", 1, 10000) < 0 || read_exact(b, &c, 1, 10000) < 0 ||
	    write_all(b, "y", 1, 10000) < 0 || read_exact(a, &c, 1, 10000) < 0)
		return fail("%s: exchange: %s", tag, errno ? errname(errno) : "EOF");
	return 0;
}

/* socket() and connect() to l's address, accept4() on l. */
static int connect_accept(int l, const struct sockaddr_in *a, struct pair *p, int aflags)
{
	p->c = socket(AF_INET, SOCK_STREAM, 0);
	if (p->c < 0)
		return fail("socket: %s", errname(errno));
	if (connect(p->c, (const struct sockaddr *)a, sizeof(*a)) < 0)
		return fail("connect: %s", errname(errno));
	if (wait_fd(l, POLLIN, 10000) <= 0)
		return fail("listener not readable within 10 s");
	p->s = accept4(l, NULL, NULL, aflags);
	if (p->s < 0)
		return fail("accept: %s", errname(errno));
	return exchange(p->c, p->s, "pair");
}

static int check_fd_numbers(void)
{
	struct pair p[NPAIRS] = { { -1, -1 }, { -1, -1 }, { -1, -1 } }, q = { -1, -1 };
	struct sockaddr_in a;
	struct epoll_event ev = { .events = EPOLLIN };
	int l, s = -1, d = -1, ep = -1, pf[2] = { -1, -1 }, rc = -1, i;

	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	note("listener=%d", l);
	for (i = 0; i < NPAIRS; i++) {
		if (connect_accept(l, &a, &p[i], 0) < 0)
			goto out;
		note("client=%d accepted=%d", p[i].c, p[i].s);
	}
	/* Connections are up at both ends: what comes next. */
	s = socket(AF_INET, SOCK_STREAM, 0);
	d = dup(p[0].c);
	if (s < 0 || d < 0 || pipe(pf) < 0)
		FAIL_ERRNO("socket/dup/pipe");
	note("socket=%d dup=%d pipe=%d,%d", s, d, pf[0], pf[1]);
	xclose(&s);
	xclose(&d);
	/* One connection goes; its numbers come back. */
	pair_close(&p[1]);
	if (connect_accept(l, &a, &p[1], 0) < 0)
		goto out;
	note("again: client=%d accepted=%d", p[1].c, p[1].s);
	/* An epoll set watching a connection. */
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		FAIL_ERRNO("epoll_create1");
	ev.data.fd = p[0].s;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, p[0].s, &ev) < 0)
		FAIL_ERRNO("epoll_ctl");
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		FAIL_ERRNO("socket");
	note("epoll=%d socket=%d", ep, s);
	xclose(&s);
	if (connect_accept(l, &a, &q, SOCK_NONBLOCK | SOCK_CLOEXEC) < 0)
		goto out;
	note("accept4: client=%d accepted=%d", q.c, q.s);
	rc = 0;
out:
	for (i = 0; i < NPAIRS; i++)
		pair_close(&p[i]);
	pair_close(&q);
	xclose(&l);
	xclose(&s);
	xclose(&d);
	xclose(&ep);
	xclose(&pf[0]);
	xclose(&pf[1]);
	return rc;
}

/*
 * The numbers while libsdp is busy: the program opens its next socket
 * right after connect() returns, while a thread of libsdp's may be
 * setting up the other end (descriptors of its own, made at the lowest
 * free number before they are moved away).  The socket must still get
 * the number after the client's, and the accepted one the next, every
 * time.
 */
#define RACE_ROUNDS 300

static int check_fd_numbers_busy(void)
{
	struct sockaddr_in a;
	int l, c = -1, b = -1, x = -1, rc = -1, bad = 0;

	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	for (int i = 0; i < RACE_ROUNDS; i++) {
		c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0)
			FAIL_ERRNO("socket");
		if (connect(c, (const struct sockaddr *)&a, sizeof(a)) < 0)
			FAIL_ERRNO("connect");
		b = socket(AF_INET, SOCK_STREAM, 0);
		if (b < 0)
			FAIL_ERRNO("socket");
		x = accept(l, NULL, NULL);
		if (x < 0)
			FAIL_ERRNO("accept");
		if ((b != c + 1 || x != c + 2) && !bad++)
			note("round %d: client=%d socket=%d accepted=%d", i, c, b, x);
		xclose(&x);
		xclose(&b);
		xclose(&c);
	}
	if (bad)
		FAIL("%d of %d rounds: the socket after a connect() or the accepted one "
		     "not given the next number",
		     bad, RACE_ROUNDS);
	note("%d rounds: socket after connect = client + 1, accepted = client + 2", RACE_ROUNDS);
	rc = 0;
out:
	xclose(&x);
	xclose(&b);
	xclose(&c);
	xclose(&l);
	return rc;
}

/* After close_range()/closefrom() from first: the program's descriptors
 * from first on are closed, those below are not, and a peer below sees
 * the EOF a TCP peer would. */
static int after_closing(struct pair *p, const char *tag)
{
	note("%s: client=%s accepted=%s", tag, fd_is_open(p->c) ? "open" : "closed",
	     fd_is_open(p->s) ? "open" : "closed");
	if (fd_is_open(p->s))
		return fail("%s: the accepted socket is still open", tag);
	p->s = -1;
	if (fd_is_open(p->c)) {
		if (wait_eof(p->c, 10000) < 0)
			return fail("%s: no EOF at the client: %s", tag, errname(errno));
		note("EOF");
		xclose(&p->c);
	}
	p->c = -1;
	/* A new connection works. */
	if (pair_open(p) < 0 || exchange(p->c, p->s, tag) < 0)
		return -1;
	note("new:%d,%d ok", p->c, p->s);
	return 0;
}

static int check_close_range_all(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0 || exchange(p.c, p.s, "before") < 0)
		goto out;
	/* What a program does before it execs, or a daemon at start. */
	if (close_range(3, ~0U, 0) < 0)
		FAIL_ERRNO("close_range");
	if (fd_is_open(p.c))
		FAIL("close_range(3, ~0U): the client socket is still open");
	p.c = -1;
	if (after_closing(&p, "close_range") < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_closefrom_above(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0 || exchange(p.c, p.s, "before") < 0)
		goto out;
	if (p.s < p.c)
		FAIL("accepted %d below the client %d", p.s, p.c);
	/* The client stays: it sees the accepted end close. */
	closefrom(p.s);
	if (after_closing(&p, "closefrom") < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

const struct check checks_fdnum[] = {
	{ "fd_numbers", check_fd_numbers,
	  "socket/accept/accept4/dup/pipe/epoll numbers with connections up, after one closed" },
	{ "fd_numbers_busy", check_fd_numbers_busy,
	  "300 connects: the next socket() and the accept() get the next numbers" },
	{ "close_range_all", check_close_range_all,
	  "close_range(3, ~0U, 0) closes a connection; a new one works" },
	{ "closefrom_above", check_closefrom_above,
	  "closefrom(accepted fd): the client sees EOF; a new connection works" },
	{ NULL, NULL, NULL },
};
