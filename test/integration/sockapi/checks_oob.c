/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Urgent data and signal-driven I/O: send(MSG_OOB), recv(MSG_OOB),
 * SO_OOBINLINE, SIOCATMARK, FIONREAD at the mark, POLLPRI / select's
 * exceptfds / EPOLLPRI, SIGURG to the owner, O_ASYNC's SIGIO and the
 * F_SETSIG signal.
 *
 * The urgent-data checks are rows of one table: steps on a connected
 * pair, each with the result Linux TCP gives (measured on 6.x), which the
 * check compares.  Every read is non-blocking, after a step that waits
 * until all the bytes sent have arrived.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <unistd.h>

enum oob_op {
	OOB_END,
	OOB_SEND,	/* p.c sends data with flags */
	OOB_ARRIVED,	/* wait until n unread bytes are at p.s */
	OOB_PRI,	/* wait for POLLPRI at p.s */
	OOB_RECV,	/* recv(p.s, n bytes, flags | MSG_DONTWAIT): expect */
	OOB_STATE,	/* SIOCATMARK, FIONREAD, poll(POLLIN|POLLPRI): expect */
	OOB_INLINE,	/* SO_OOBINLINE = n */
	OOB_SELECT,	/* select() with p.s in all three sets: expect */
	OOB_EPOLL,	/* epoll_wait() for EPOLLIN|EPOLLPRI: expect */
};

struct oob_step {
	enum oob_op op;
	const char *data;
	int n, flags;
	const char *expect;
};

#define SEND(d, fl)		{ .op = OOB_SEND, .data = (d), .flags = (fl) }
#define ARRIVED(count)		{ .op = OOB_ARRIVED, .n = (count) }
#define PRI			{ .op = OOB_PRI }
#define RECV(len, fl, exp)	{ .op = OOB_RECV, .n = (len), .flags = (fl), .expect = (exp) }
#define STATE(exp)		{ .op = OOB_STATE, .expect = (exp) }
#define INLINE(on)		{ .op = OOB_INLINE, .n = (on) }
#define SELECT(exp)		{ .op = OOB_SELECT, .expect = (exp) }
#define EPOLL(exp)		{ .op = OOB_EPOLL, .expect = (exp) }

struct oob_scenario {
	const char *name;
	struct oob_step steps[16];
};

static const struct oob_scenario oob_scenarios[] = {
	{ "oob_none", {
		SEND("ab", 0),
		ARRIVED(2),
		RECV(8, MSG_OOB, "-1 EINVAL"),
		STATE("mark=0 inq=2 POLLIN"),
	} },
	{ "oob_mark", {
		SEND("ab", 0), SEND("c", MSG_OOB), SEND("de", 0),
		ARRIVED(5),
		STATE("mark=0 inq=2 POLLIN|POLLPRI"),
		RECV(64, 0, "2 ab"),
		STATE("mark=1 inq=0 POLLIN|POLLPRI"),
		RECV(64, MSG_OOB, "1 c"),
		STATE("mark=1 inq=0 POLLIN"),
		RECV(64, MSG_OOB, "-1 EINVAL"),
		RECV(64, 0, "2 de"),
		STATE("mark=0 inq=0 0"),
	} },
	{ "oob_skipped", {
		SEND("abc", MSG_OOB), SEND("de", 0),
		ARRIVED(5),
		RECV(64, 0, "2 ab"),
		RECV(64, 0, "2 de"),
		RECV(64, MSG_OOB, "-1 EINVAL"),
	} },
	{ "oob_inline", {
		INLINE(1),
		SEND("abc", MSG_OOB), SEND("de", 0),
		ARRIVED(5),
		STATE("mark=0 inq=5 POLLIN|POLLPRI"),
		RECV(64, MSG_OOB, "-1 EINVAL"),
		RECV(64, 0, "2 ab"),
		STATE("mark=1 inq=3 POLLIN|POLLPRI"),
		RECV(64, 0, "3 cde"),
		STATE("mark=0 inq=0 0"),
	} },
	{ "oob_twice", {
		SEND("ax", MSG_OOB), SEND("by", MSG_OOB), SEND("z", 0),
		ARRIVED(5),
		RECV(64, 0, "3 axb"),
		STATE("mark=1 inq=0 POLLIN|POLLPRI"),
		RECV(64, MSG_OOB, "1 y"),
		RECV(64, 0, "1 z"),
	} },
	{ "oob_read_then_again", {
		SEND("ax", MSG_OOB),
		ARRIVED(2),
		RECV(64, MSG_OOB, "1 x"),
		SEND("by", MSG_OOB),
		ARRIVED(4),
		RECV(64, 0, "3 axb"),
		RECV(64, MSG_OOB, "1 y"),
		RECV(64, 0, "-1 EAGAIN"),
	} },
	{ "oob_alone", {
		SEND("x", MSG_OOB),
		ARRIVED(1),
		STATE("mark=1 inq=0 POLLPRI"),
		RECV(64, 0, "-1 EAGAIN"),
		STATE("mark=0 inq=0 0"),
		RECV(64, MSG_OOB, "-1 EINVAL"),
	} },
	{ "oob_inline_later", {
		SEND("ax", MSG_OOB), SEND("b", 0),
		ARRIVED(3),
		INLINE(1),
		RECV(64, MSG_OOB, "-1 EINVAL"),
		RECV(64, 0, "1 a"),
		RECV(64, 0, "2 xb"),
	} },
	{ "oob_inline_off_later", {
		INLINE(1),
		SEND("ax", MSG_OOB), SEND("b", 0),
		ARRIVED(3),
		INLINE(0),
		RECV(64, 0, "1 a"),
		RECV(64, MSG_OOB, "1 x"),
		RECV(64, 0, "1 b"),
	} },
	{ "oob_peek", {
		SEND("ax", MSG_OOB), SEND("b", 0),
		ARRIVED(3),
		RECV(64, MSG_PEEK, "1 a"),
		RECV(64, MSG_OOB | MSG_PEEK, "1 x"),
		RECV(64, MSG_OOB, "1 x"),
		RECV(0, MSG_OOB, "-1 EINVAL"),
		RECV(64, 0, "1 a"),
		RECV(64, MSG_PEEK, "1 b"),
	} },
	{ "oob_waitall", {
		SEND("abc", MSG_OOB), SEND("de", 0),
		ARRIVED(5),
		RECV(4, MSG_WAITALL, "2 ab"),
		RECV(4, MSG_WAITALL, "2 de"),
	} },
	{ "oob_select", {
		SELECT("w"),
		SEND("x", MSG_OOB),
		PRI,
		SELECT("w,x"),
		EPOLL("EPOLLPRI"),
		SEND("y", 0),
		ARRIVED(2),
		SELECT("r,w,x"),
		EPOLL("EPOLLIN|EPOLLPRI"),
	} },
};

/* Wait until n unread bytes are queued at fd: with SO_OOBINLINE on for
 * the look, FIONREAD counts past the mark (the option matters to reads
 * only, so the look changes nothing). */
static int oob_arrived(int fd, int n)
{
	int64_t end = now_ms() + 10000;
	int inl = 0, on = 1, q = 0;
	socklen_t len = sizeof(inl);

	if (getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &inl, &len) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof(on)) < 0)
		return fail("SO_OOBINLINE: %s", errname(errno));
	while (ioctl(fd, FIONREAD, &q) == 0 && q < n && now_ms() < end)
		sleep_ms(1);
	(void)setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &inl, sizeof(inl));
	if (q < n)
		return fail("%d of %d bytes arrived", q, n);
	return 0;
}

static int oob_expect(const struct oob_step *st, const char *got)
{
	note("%s", got);
	if (strcmp(got, st->expect) != 0)
		return fail("got '%s', Linux gives '%s'", got, st->expect);
	return 0;
}

static int oob_step(const struct oob_step *st, struct pair *p)
{
	char buf[64], got[96], ev[64];
	int v, q;
	ssize_t n;

	switch (st->op) {
	case OOB_SEND:
		n = send(p->c, st->data, strlen(st->data), st->flags);
		if (n != (ssize_t)strlen(st->data))
			return fail("send: %zd %s", n, errname(errno));
		return 0;
	case OOB_ARRIVED:
		return oob_arrived(p->s, st->n);
	case OOB_PRI:
		if (wait_fd(p->s, POLLPRI, 10000) <= 0)
			return fail("no POLLPRI");
		return 0;
	case OOB_RECV:
		n = recv(p->s, buf, (size_t)st->n, st->flags | MSG_DONTWAIT);
		if (n < 0)
			snprintf(got, sizeof(got), "-1 %s", errname(errno));
		else
			snprintf(got, sizeof(got), "%zd %.*s", n, (int)n, buf);
		return oob_expect(st, got);
	case OOB_STATE: {
		struct pollfd pfd = { .fd = p->s, .events = POLLIN | POLLPRI };

		if (ioctl(p->s, SIOCATMARK, &v) < 0 || ioctl(p->s, FIONREAD, &q) < 0 ||
		    poll(&pfd, 1, 0) < 0)
			return fail("state: %s", errname(errno));
		snprintf(got, sizeof(got), "mark=%d inq=%d %s", v, q,
			 pollname(pfd.revents, ev, sizeof(ev)));
		return oob_expect(st, got);
	}
	case OOB_INLINE:
		v = st->n;
		if (setsockopt(p->s, SOL_SOCKET, SO_OOBINLINE, &v, sizeof(v)) < 0)
			return fail("SO_OOBINLINE: %s", errname(errno));
		return 0;
	case OOB_SELECT: {
		fd_set r, w, x;
		struct timeval tv = { 0, 0 };

		FD_ZERO(&r);
		FD_ZERO(&w);
		FD_ZERO(&x);
		FD_SET(p->s, &r);
		FD_SET(p->s, &w);
		FD_SET(p->s, &x);
		if (select(p->s + 1, &r, &w, &x, &tv) < 0)
			return fail("select: %s", errname(errno));
		snprintf(got, sizeof(got), "%s%s%s", FD_ISSET(p->s, &r) ? "r," : "",
			 FD_ISSET(p->s, &w) ? "w," : "", FD_ISSET(p->s, &x) ? "x," : "");
		if (*got)
			got[strlen(got) - 1] = '\0';
		return oob_expect(st, got);
	}
	case OOB_EPOLL: {
		int ep = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event e = { .events = EPOLLIN | EPOLLPRI };

		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, p->s, &e) < 0) {
			xclose(&ep);
			return fail("epoll: %s", errname(errno));
		}
		v = epoll_wait(ep, &e, 1, 10000);
		xclose(&ep);
		if (v != 1)
			return fail("epoll_wait: %d %s", v, errname(errno));
		return oob_expect(st, epollname(e.events, got, sizeof(got)));
	}
	case OOB_END:
		break;
	}
	return fail("bad step %d", (int)st->op);
}

static int check_oob_scenario(void)
{
	const struct oob_scenario *sc = NULL;
	struct pair p = { -1, -1 };
	int rc = -1;

	for (size_t i = 0; i < sizeof(oob_scenarios) / sizeof(oob_scenarios[0]); i++)
		if (strcmp(oob_scenarios[i].name, check_name()) == 0)
			sc = &oob_scenarios[i];
	if (!sc)
		return fail("no scenario for %s", check_name());
	if (pair_open(&p) < 0)
		goto out;
	for (const struct oob_step *st = sc->steps; st->op != OOB_END; st++)
		if (oob_step(st, &p) < 0)
			goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* --- signals ----------------------------------------------------------- */

static volatile sig_atomic_t urg_count, io_count, rt_count, rt_code, rt_fd, rt_band;

static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (sig == SIGURG) {
		urg_count++;
	} else if (sig == SIGIO) {
		io_count++;
	} else {
		rt_count++;
		rt_code = si->si_code;
		rt_fd = si->si_fd;
		rt_band = (int)si->si_band;
	}
}

static void signals_install(void)
{
	struct sigaction sa = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGURG, &sa, NULL);
	sigaction(SIGIO, &sa, NULL);
	sigaction(SIGRTMIN + 1, &sa, NULL);
	urg_count = io_count = rt_count = 0;
}

static void signals_restore(void)
{
	signal(SIGURG, SIG_DFL);
	signal(SIGIO, SIG_IGN);	/* a late one must not end the program */
	signal(SIGRTMIN + 1, SIG_IGN);
}

/* Wait up to 10 s for *count to reach n. */
static int wait_count(volatile sig_atomic_t *count, int n)
{
	int64_t end = now_ms() + 10000;

	while (*count < n && now_ms() < end)
		sleep_ms(1);
	return *count >= n ? 0 : -1;
}

static int check_sigurg(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	signals_install();
	if (pair_open(&p) < 0)
		goto out;
	/* No owner: no signal (the byte's POLLPRI proves it arrived). */
	if (send(p.c, "a", 1, MSG_OOB) != 1 || wait_fd(p.s, POLLPRI, 10000) <= 0)
		FAIL_ERRNO("send");
	note("no-owner=%d", (int)urg_count);
	if (urg_count)
		FAIL("SIGURG without an owner");
	if (fcntl(p.s, F_SETOWN, getpid()) < 0)
		FAIL_ERRNO("F_SETOWN");
	note("owner=%d", fcntl(p.s, F_GETOWN) == getpid());
	if (send(p.c, "b", 1, MSG_OOB) != 1)
		FAIL_ERRNO("send");
	if (wait_count(&urg_count, 1) < 0)
		FAIL("no SIGURG for the owner");
	note("sigurg");
	/* The owner as a thread (F_SETOWN_EX), without O_ASYNC: no SIGIO. */
	struct f_owner_ex own = { .type = F_OWNER_TID, .pid = gettid() };

	if (fcntl(p.s, F_SETOWN_EX, &own) < 0)
		FAIL_ERRNO("F_SETOWN_EX");
	if (send(p.c, "c", 1, MSG_OOB) != 1)
		FAIL_ERRNO("send");
	if (wait_count(&urg_count, 2) < 0)
		FAIL("no SIGURG for the owner thread");
	note("sigurg-tid sigio=%d", (int)io_count);
	if (io_count)
		FAIL("SIGIO without O_ASYNC");
	rc = 0;
out:
	pair_close(&p);
	signals_restore();
	return rc;
}

static int check_sigio(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, on = 1;
	char buf[8];

	signals_install();
	if (pair_open(&p) < 0)
		goto out;
	if (fcntl(p.s, F_SETOWN, getpid()) < 0 ||
	    fcntl(p.s, F_SETFL, fcntl(p.s, F_GETFL) | O_ASYNC) < 0)
		FAIL_ERRNO("O_ASYNC");
	if (send(p.c, "a", 1, 0) != 1)
		FAIL_ERRNO("send");
	if (wait_count(&io_count, 1) < 0)
		FAIL("no SIGIO for data");
	note("data");
	if (read_exact(p.s, buf, 1, 10000) < 0)
		FAIL_ERRNO("read");
	int before = io_count;

	if (shutdown(p.c, SHUT_WR) < 0)
		FAIL_ERRNO("shutdown");
	if (wait_count(&io_count, before + 1) < 0)
		FAIL("no SIGIO for the end of the stream");
	note("eof");
	/* FIOASYNC off: no more (checked on the writer, which stays open). */
	on = 0;
	if (ioctl(p.s, FIOASYNC, &on) < 0)
		FAIL_ERRNO("FIOASYNC");
	note("async=%d", (fcntl(p.s, F_GETFL) & O_ASYNC) != 0);
	rc = 0;
out:
	pair_close(&p);
	signals_restore();
	return rc;
}

/* F_SETSIG: the signal comes with si_fd and si_band (si_code is POLL_IN
 * on Linux; libsdp raises it from its own thread, which the kernel lets
 * say only SI_QUEUE: see libsdp(7)). */
static int check_setsig(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	signals_install();
	if (pair_open(&p) < 0)
		goto out;
	if (fcntl(p.s, F_SETOWN, getpid()) < 0 || fcntl(p.s, F_SETSIG, SIGRTMIN + 1) < 0 ||
	    fcntl(p.s, F_SETFL, fcntl(p.s, F_GETFL) | O_ASYNC) < 0)
		FAIL_ERRNO("F_SETSIG");
	if (send(p.c, "a", 1, 0) != 1)
		FAIL_ERRNO("send");
	if (wait_count(&rt_count, 1) < 0)
		FAIL("no F_SETSIG signal");
	note("fd=%d band=%#x sigio=%d", rt_fd == p.s, (unsigned)rt_band, (int)io_count);
	if (rt_fd != p.s || !(rt_band & POLLIN) || io_count)
		FAIL("wrong siginfo");
	rc = 0;
out:
	pair_close(&p);
	signals_restore();
	return rc;
}

/* Room again after a full send buffer: SIGIO for the writer. */
static int check_sigio_out(void)
{
	struct pair p = { -1, -1 };
	static char big[1 << 16];
	int rc = -1;
	long sent = 0, got = 0;
	ssize_t n;

	signals_install();
	if (pair_open(&p) < 0)
		goto out;
	if (fcntl(p.c, F_SETOWN, getpid()) < 0 ||
	    fcntl(p.c, F_SETFL, fcntl(p.c, F_GETFL) | O_ASYNC | O_NONBLOCK) < 0)
		FAIL_ERRNO("O_ASYNC");
	/* SIGIO comes once room returns after the send that found none:
	 * on Linux when the reader drains, on SDP maybe sooner (the peer's
	 * buffers take bytes the reader has not read yet). */
	int before = 0;

	for (int i = 0; i < 4096; i++) {
		before = io_count;
		n = send(p.c, big, sizeof(big), 0);
		if (n < 0)
			break;
		sent += n;
	}
	if (errno != EAGAIN)
		FAIL_ERRNO("send");

	while (got < sent) {
		if (wait_fd(p.s, POLLIN, 10000) <= 0)
			FAIL("no data");
		n = read(p.s, big, sizeof(big));
		if (n <= 0)
			FAIL_ERRNO("read");
		got += n;
	}
	if (wait_count(&io_count, before + 1) < 0)
		FAIL("no SIGIO when room came back");
	note("room");
	rc = 0;
out:
	pair_close(&p);
	signals_restore();
	return rc;
}

const struct check checks_oob[] = {
	{ "oob_none", check_oob_scenario, "recv(MSG_OOB) with no urgent data: EINVAL" },
	{ "oob_mark", check_oob_scenario, "a read stops at the mark; SIOCATMARK, FIONREAD, POLLPRI" },
	{ "oob_skipped", check_oob_scenario, "an urgent byte not read is skipped by reads" },
	{ "oob_inline", check_oob_scenario, "SO_OOBINLINE: the byte in the stream, at the mark" },
	{ "oob_twice", check_oob_scenario, "a second urgent byte: the first becomes data" },
	{ "oob_read_then_again", check_oob_scenario, "after MSG_OOB read, a new mark: read again inline" },
	{ "oob_alone", check_oob_scenario, "the urgent byte alone: no POLLIN, a read skips it" },
	{ "oob_inline_later", check_oob_scenario, "SO_OOBINLINE set after the byte came" },
	{ "oob_inline_off_later", check_oob_scenario, "SO_OOBINLINE cleared after the byte came" },
	{ "oob_peek", check_oob_scenario, "MSG_PEEK with and without MSG_OOB" },
	{ "oob_waitall", check_oob_scenario, "MSG_WAITALL stops at the mark" },
	{ "oob_select", check_oob_scenario, "select exceptfds and EPOLLPRI for urgent data" },
	{ "sigurg", check_sigurg, "SIGURG to the F_SETOWN / F_SETOWN_EX owner only" },
	{ "sigio", check_sigio, "O_ASYNC: SIGIO for data and the end of the stream" },
	{ "sigio_setsig", check_setsig, "F_SETSIG: the chosen signal with si_fd, si_band" },
	{ "sigio_out", check_sigio_out, "O_ASYNC: SIGIO when a full send buffer drains" },
	{ NULL, NULL, NULL },
};
