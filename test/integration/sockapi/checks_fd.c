/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Descriptor checks: fcntl (O_NONBLOCK, FD_CLOEXEC, F_DUPFD,
 * F_DUPFD_CLOEXEC, F_SETOWN), ioctl (FIONREAD, FIONBIO, SIOCATMARK,
 * SIOCOUTQ) and dup/dup2/dup3 of a connected socket.
 */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Data both ways through fd (one end of p, or a duplicate of it) and
 * the peer end. */
static int ping(int fd, int peer, const char *tag)
{
	char buf[4];

	if (write_all(fd, "ping", 4, 10000) < 0)
		return fail("%s: send: %s", tag, errname(errno));
	if (read_exact(peer, buf, 4, 10000) < 0 || memcmp(buf, "ping", 4) != 0)
		return fail("%s: peer read: %s", tag,
			    errno ? errname(errno) : "EOF");
	if (write_all(peer, "pong", 4, 10000) < 0)
		return fail("%s: peer send: %s", tag, errname(errno));
	if (read_exact(fd, buf, 4, 10000) < 0 || memcmp(buf, "pong", 4) != 0)
		return fail("%s: read: %s", tag, errno ? errname(errno) : "EOF");
	note("%s:ok", tag);
	return 0;
}

/* The peer must not see EOF within 100 ms (another copy is open). */
static int no_eof(int peer, const char *tag)
{
	int r = wait_fd(peer, POLLIN, 100);

	note("%s:%s", tag, r == 0 ? "no-event" : "event");
	if (r != 0)
		return fail("%s: peer saw an event while a copy is open", tag);
	return 0;
}

static int eof_at(int peer)
{
	if (wait_eof(peer, 10000) < 0)
		return fail("peer: no EOF after the last copy closed: %s",
			    errname(errno));
	note("peer:EOF");
	return 0;
}

static int check_fcntl_nonblock(void)
{
	struct pair p = { -1, -1 };
	char buf[8];
	ssize_t n;
	int rc = -1, fl;

	if (pair_open(&p) < 0)
		goto out;
	fl = fcntl(p.c, F_GETFL);
	if (fl < 0)
		FAIL_ERRNO("F_GETFL");
	note("before:%s", fl & O_NONBLOCK ? "NONBLOCK" : "-");
	if (fcntl(p.c, F_SETFL, fl | O_NONBLOCK) < 0)
		FAIL_ERRNO("F_SETFL");
	fl = fcntl(p.c, F_GETFL);
	note("set:%s", fl & O_NONBLOCK ? "NONBLOCK" : "-");
	if (!(fl & O_NONBLOCK))
		FAIL("O_NONBLOCK not set");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("empty=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("recv on empty non-blocking socket: expected EAGAIN");
	if (write_all(p.s, "abc", 3, 10000) < 0)
		FAIL_ERRNO("peer send");
	if (wait_fd(p.c, POLLIN, 10000) <= 0)
		FAIL("no data");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%zd", n);
	n = recv(p.c, buf, sizeof(buf), 0);
	note("then=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("expected EAGAIN after reading");
	if (fcntl(p.c, F_SETFL, fl & ~O_NONBLOCK) < 0)
		FAIL_ERRNO("F_SETFL");
	fl = fcntl(p.c, F_GETFL);
	note("cleared:%s", fl & O_NONBLOCK ? "NONBLOCK" : "-");
	if (fl & O_NONBLOCK)
		FAIL("O_NONBLOCK not cleared");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_fcntl_cloexec(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	note("before=%d", fcntl(p.c, F_GETFD));
	if (fcntl(p.c, F_SETFD, FD_CLOEXEC) < 0)
		FAIL_ERRNO("F_SETFD");
	note("set=%d", fcntl(p.c, F_GETFD));
	if (fcntl(p.c, F_GETFD) != FD_CLOEXEC)
		FAIL("FD_CLOEXEC not set");
	if (fcntl(p.c, F_SETFD, 0) < 0)
		FAIL_ERRNO("F_SETFD 0");
	note("cleared=%d", fcntl(p.c, F_GETFD));
	if (fcntl(p.c, F_GETFD) != 0)
		FAIL("FD_CLOEXEC not cleared");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_fcntl_dupfd(void)
{
	struct pair p = { -1, -1 };
	int d1 = -1, d2 = -1, rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	d1 = fcntl(p.c, F_DUPFD, 100);
	if (d1 < 0)
		FAIL_ERRNO("F_DUPFD");
	d2 = fcntl(p.c, F_DUPFD_CLOEXEC, 100);
	if (d2 < 0)
		FAIL_ERRNO("F_DUPFD_CLOEXEC");
	note("dupfd:%s,%s dupfd_cloexec:%s,%s", d1 >= 100 ? ">=100" : "<100",
	     fcntl(d1, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-",
	     d2 >= 100 ? ">=100" : "<100",
	     fcntl(d2, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-");
	if (d1 < 100 || d2 < 100 || (fcntl(d1, F_GETFD) & FD_CLOEXEC) ||
	    !(fcntl(d2, F_GETFD) & FD_CLOEXEC))
		FAIL("wrong numbers or flags");
	if (ping(d1, p.s, "d1") < 0 || ping(d2, p.s, "d2") < 0)
		goto out;
	xclose(&p.c);
	if (no_eof(p.s, "orig-closed") < 0 || ping(d1, p.s, "d1") < 0)
		goto out;
	xclose(&d1);
	if (no_eof(p.s, "d1-closed") < 0 || ping(d2, p.s, "d2") < 0)
		goto out;
	xclose(&d2);
	if (eof_at(p.s) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	xclose(&d1);
	xclose(&d2);
	return rc;
}

static int check_fcntl_setown(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, own;

	if (pair_open(&p) < 0)
		goto out;
	note("default=%d", fcntl(p.c, F_GETOWN));
	if (fcntl(p.c, F_SETOWN, getpid()) < 0)
		FAIL_ERRNO("F_SETOWN");
	own = fcntl(p.c, F_GETOWN);
	note("get=%s", own == getpid() ? "getpid()" : "other");
	if (own != getpid())
		FAIL("F_GETOWN %d", own);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_ioctl_fionread(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in a;
	char buf[100] = { 0 };
	int rc = -1, v = -1, l = -1, i;

	if (pair_open(&p) < 0)
		goto out;
	if (ioctl(p.c, FIONREAD, &v) < 0)
		FAIL_ERRNO("FIONREAD");
	note("empty=%d", v);
	if (write_all(p.s, buf, sizeof(buf), 10000) < 0)
		FAIL_ERRNO("peer send");
	if (wait_fd(p.c, POLLIN, 10000) <= 0)
		FAIL("no data");
	for (i = 0; i < 100; i++) {
		if (ioctl(p.c, FIONREAD, &v) < 0)
			FAIL_ERRNO("FIONREAD");
		if (v >= 100)
			break;
		sleep_ms(10);
	}
	note("after=%d", v);
	if (v != 100)
		FAIL("FIONREAD %d, not 100", v);
	if (ioctl(p.c, SIOCINQ, &v) < 0)
		FAIL_ERRNO("SIOCINQ");
	note("SIOCINQ=%d", v);
	if (recv(p.c, buf, 40, 0) != 40)
		FAIL("recv: %s", errname(errno));
	if (ioctl(p.c, FIONREAD, &v) < 0)
		FAIL_ERRNO("FIONREAD");
	note("after-40=%d", v);
	if (v != 60)
		FAIL("FIONREAD %d after reading 40, not 60", v);
	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	note("listener=%s", ioctl(l, FIONREAD, &v) < 0 ? errname(errno) : "0");
	rc = 0;
out:
	pair_close(&p);
	xclose(&l);
	return rc;
}

static int check_ioctl_fionbio(void)
{
	struct pair p = { -1, -1 };
	char buf[8];
	int rc = -1, on = 1, off = 0;
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	if (ioctl(p.c, FIONBIO, &on) < 0)
		FAIL_ERRNO("FIONBIO 1");
	note("on:%s", fcntl(p.c, F_GETFL) & O_NONBLOCK ? "NONBLOCK" : "-");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("recv after FIONBIO 1: expected EAGAIN");
	if (ioctl(p.c, FIONBIO, &off) < 0)
		FAIL_ERRNO("FIONBIO 0");
	note("off:%s", fcntl(p.c, F_GETFL) & O_NONBLOCK ? "NONBLOCK" : "-");
	if (fcntl(p.c, F_GETFL) & O_NONBLOCK)
		FAIL("O_NONBLOCK still set");
	/* blocking again: a recv waits for the data */
	if (write_all(p.s, "q", 1, 10000) < 0)
		FAIL_ERRNO("peer send");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("blocking-recv=%zd", n);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_ioctl_siocatmark(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, v = -1;
	char buf[4];

	if (pair_open(&p) < 0)
		goto out;
	if (ioctl(p.c, SIOCATMARK, &v) < 0)
		FAIL_ERRNO("SIOCATMARK");
	note("empty=%d", v);
	if (write_all(p.s, "abc", 3, 10000) < 0 || read_exact(p.c, buf, 1, 10000) < 0)
		FAIL("data: %s", errname(errno));
	v = -1;
	if (ioctl(p.c, SIOCATMARK, &v) < 0)
		FAIL_ERRNO("SIOCATMARK");
	note("data=%d", v);
	if (v != 0)
		FAIL("SIOCATMARK %d without urgent data", v);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_ioctl_siocoutq(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, v = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (write_all(p.c, "abc", 3, 10000) < 0)
		FAIL_ERRNO("send");
	if (ioctl(p.c, SIOCOUTQ, &v) < 0)
		FAIL_ERRNO("SIOCOUTQ");
	note("%s", v >= 0 ? "ok" : "negative");
	if (v < 0)
		FAIL("SIOCOUTQ %d", v);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_dup(void)
{
	struct pair p = { -1, -1 };
	int d = -1, rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	d = dup(p.c);
	if (d < 0)
		FAIL_ERRNO("dup");
	note("dup:%s", fcntl(d, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-");
	if (ping(d, p.s, "dup") < 0 || ping(p.c, p.s, "orig") < 0)
		goto out;
	xclose(&p.c);
	if (no_eof(p.s, "orig-closed") < 0 || ping(d, p.s, "dup") < 0)
		goto out;
	xclose(&d);
	if (eof_at(p.s) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	xclose(&d);
	return rc;
}

static int check_dup2_dup3(void)
{
	struct pair p = { -1, -1 };
	int t2 = -1, t3 = -1, rc = -1, r;

	if (pair_open(&p) < 0)
		goto out;
	/* targets that are open (a pipe end): dup2/dup3 replace them */
	{
		int pp[2];

		if (pipe(pp) < 0)
			FAIL_ERRNO("pipe");
		t2 = pp[0];
		t3 = pp[1];
	}
	r = dup2(p.c, t2);
	note("dup2=%s", r == t2 ? "target" : r < 0 ? errname(errno) : "other");
	if (r != t2)
		FAIL("dup2");
	r = dup3(p.c, t3, O_CLOEXEC);
	note("dup3=%s", r == t3 ? "target" : r < 0 ? errname(errno) : "other");
	if (r != t3)
		FAIL("dup3");
	note("flags:%s,%s,%s",
	     fcntl(p.c, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-",
	     fcntl(t2, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-",
	     fcntl(t3, F_GETFD) & FD_CLOEXEC ? "CLOEXEC" : "-");
	if (!(fcntl(t3, F_GETFD) & FD_CLOEXEC) || (fcntl(t2, F_GETFD) & FD_CLOEXEC))
		FAIL("wrong FD_CLOEXEC on the duplicates");
	r = dup2(p.c, p.c);
	note("dup2-self=%s", r == p.c ? "fd" : r < 0 ? errname(errno) : "other");
	r = dup3(p.c, p.c, 0);
	note("dup3-self=%s", r < 0 ? errname(errno) : "fd");
	if (ping(t2, p.s, "dup2") < 0 || ping(t3, p.s, "dup3") < 0)
		goto out;
	xclose(&p.c);
	if (no_eof(p.s, "orig-closed") < 0 || ping(t2, p.s, "dup2") < 0)
		goto out;
	xclose(&t2);
	if (no_eof(p.s, "dup2-closed") < 0 || ping(t3, p.s, "dup3") < 0)
		goto out;
	xclose(&t3);
	if (eof_at(p.s) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	xclose(&t2);
	xclose(&t3);
	return rc;
}

const struct check checks_fd[] = {
	{ "fcntl_nonblock", check_fcntl_nonblock,
	  "F_SETFL O_NONBLOCK round trip: data, then EAGAIN" },
	{ "fcntl_cloexec", check_fcntl_cloexec, "F_GETFD/F_SETFD FD_CLOEXEC" },
	{ "fcntl_dupfd", check_fcntl_dupfd,
	  "F_DUPFD, F_DUPFD_CLOEXEC: data through the copies, EOF at the end" },
	{ "fcntl_setown", check_fcntl_setown, "F_SETOWN/F_GETOWN getpid()" },
	{ "ioctl_fionread", check_ioctl_fionread,
	  "FIONREAD/SIOCINQ after the peer wrote 100 bytes" },
	{ "ioctl_fionbio", check_ioctl_fionbio, "FIONBIO on/off" },
	{ "ioctl_siocatmark", check_ioctl_siocatmark, "SIOCATMARK 0" },
	{ "ioctl_siocoutq", check_ioctl_siocoutq, "SIOCOUTQ >= 0" },
	{ "dup", check_dup,
	  "dup: data through the copy, close the original, then EOF" },
	{ "dup2_dup3", check_dup2_dup3,
	  "dup2/dup3(O_CLOEXEC) over open fds, closes, then EOF" },
	{ NULL, NULL, NULL },
};
