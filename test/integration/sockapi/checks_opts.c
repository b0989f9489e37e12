/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Socket option checks: SO_TYPE/DOMAIN/PROTOCOL, SO_ACCEPTCONN,
 * SO_KEEPALIVE, SO_REUSEADDR, SO_LINGER, SO_RCVTIMEO, SO_SNDTIMEO,
 * TCP_NODELAY, TCP_KEEPIDLE/INTVL/CNT, TCP_CORK, IP_TOS, SO_PRIORITY,
 * TCP_INFO, unknown options and levels.  fcntl/ioctl/dup are in
 * checks_fd.c.
 */

#include "util.h"

#include <errno.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* getsockopt of an int: the value, or -1000 - errno (noted as a name). */
static int get_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, level, name, &v, &len) < 0)
		return -1000 - errno;
	if (len != sizeof(v))
		return -2000 - (int)len;
	return v;
}

static int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

/* "name=value" or "name=ERRNO" in the trace. */
static int note_int(const char *tag, int fd, int level, int name)
{
	int v = get_int(fd, level, name);

	if (v <= -2000)
		note("%s=len%d", tag, -2000 - v);
	else if (v <= -1000)
		note("%s=%s", tag, errname(-1000 - v));
	else
		note("%s=%d", tag, v);
	return v;
}

/* set, then get: noted as "tag=value"; fails unless get == want. */
static int set_get(const char *tag, int fd, int level, int name, int v,
		   int want)
{
	if (set_int(fd, level, name, v) < 0)
		return fail("set %s: %s", tag, errname(errno));
	if (note_int(tag, fd, level, name) != want)
		return fail("%s: got a different value back", tag);
	return 0;
}

static int check_so_type(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in a;
	int l = -1, rc = -1, fd, i;
	const char *what[] = { "client", "server", "listener" };

	if (pair_open(&p) < 0)
		goto out;
	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	for (i = 0; i < 3; i++) {
		int t, d, pr;

		fd = i == 0 ? p.c : i == 1 ? p.s : l;
		t = get_int(fd, SOL_SOCKET, SO_TYPE);
		d = get_int(fd, SOL_SOCKET, SO_DOMAIN);
		pr = get_int(fd, SOL_SOCKET, SO_PROTOCOL);
		note("%s:%s,%s,%s", what[i],
		     t == SOCK_STREAM ? "SOCK_STREAM" : "other",
		     d == AF_INET ? "AF_INET" : "other",
		     pr == IPPROTO_TCP ? "IPPROTO_TCP" : "other");
		if (t != SOCK_STREAM || d != AF_INET || pr != IPPROTO_TCP)
			FAIL("%s: SO_TYPE %d SO_DOMAIN %d SO_PROTOCOL %d",
			     what[i], t, d, pr);
	}
	rc = 0;
out:
	pair_close(&p);
	xclose(&l);
	return rc;
}

static int check_so_acceptconn(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in a;
	int l = -1, u = -1, rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	l = make_listener(0, &a);
	u = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || u < 0)
		FAIL("sockets: %s", errname(errno));
	if (note_int("listener", l, SOL_SOCKET, SO_ACCEPTCONN) != 1 ||
	    note_int("client", p.c, SOL_SOCKET, SO_ACCEPTCONN) != 0 ||
	    note_int("accepted", p.s, SOL_SOCKET, SO_ACCEPTCONN) != 0 ||
	    note_int("fresh", u, SOL_SOCKET, SO_ACCEPTCONN) != 0)
		FAIL("wrong SO_ACCEPTCONN");
	rc = 0;
out:
	pair_close(&p);
	xclose(&l);
	xclose(&u);
	return rc;
}

static int check_so_keepalive(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (note_int("default", p.c, SOL_SOCKET, SO_KEEPALIVE) != 0)
		FAIL("SO_KEEPALIVE on by default");
	if (set_get("on", p.c, SOL_SOCKET, SO_KEEPALIVE, 1, 1) < 0 ||
	    set_get("on5", p.c, SOL_SOCKET, SO_KEEPALIVE, 5, 1) < 0 ||
	    set_get("off", p.c, SOL_SOCKET, SO_KEEPALIVE, 0, 0) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_so_reuseaddr(void)
{
	struct sockaddr_in a;
	int fd = -1, rc = -1;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		FAIL_ERRNO("socket");
	if (note_int("default", fd, SOL_SOCKET, SO_REUSEADDR) != 0)
		FAIL("SO_REUSEADDR on by default");
	if (set_get("on", fd, SOL_SOCKET, SO_REUSEADDR, 1, 1) < 0)
		goto out;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr = test_host();
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0)
		FAIL_ERRNO("bind/listen with SO_REUSEADDR");
	if (note_int("listening", fd, SOL_SOCKET, SO_REUSEADDR) != 1)
		FAIL("SO_REUSEADDR lost by listen");
	rc = 0;
out:
	xclose(&fd);
	return rc;
}

static int check_so_linger(void)
{
	struct pair p = { -1, -1 };
	struct linger lg = { -1, -1 };
	socklen_t len = sizeof(lg);
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (getsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, &len) < 0)
		FAIL_ERRNO("get SO_LINGER");
	note("default=%d,%d len=%u", lg.l_onoff, lg.l_linger, (unsigned)len);
	lg.l_onoff = 1;
	lg.l_linger = 5;
	if (setsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		FAIL_ERRNO("set SO_LINGER");
	memset(&lg, 0xff, sizeof(lg));
	len = sizeof(lg);
	if (getsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, &len) < 0)
		FAIL_ERRNO("get SO_LINGER");
	note("get=%d,%d", lg.l_onoff, lg.l_linger);
	if (lg.l_onoff != 1 || lg.l_linger != 5)
		FAIL("SO_LINGER read back differs");
	lg.l_onoff = 0;
	lg.l_linger = 0;
	if (setsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		FAIL_ERRNO("clear SO_LINGER");
	len = sizeof(lg);
	if (getsockopt(p.c, SOL_SOCKET, SO_LINGER, &lg, &len) < 0)
		FAIL_ERRNO("get SO_LINGER");
	note("cleared=%d", lg.l_onoff);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_so_rcvtimeo(void)
{
	struct pair p = { -1, -1 };
	struct timeval tv = { 0, 200000 };
	socklen_t len = sizeof(tv);
	int64_t t0, dt;
	char buf[8];
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (setsockopt(p.c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		FAIL_ERRNO("set SO_RCVTIMEO");
	memset(&tv, 0, sizeof(tv));
	if (getsockopt(p.c, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) < 0)
		FAIL_ERRNO("get SO_RCVTIMEO");
	note("get=%ld.%06ld", (long)tv.tv_sec, (long)tv.tv_usec);
	t0 = now_ms();
	n = recv(p.c, buf, sizeof(buf), 0);
	dt = now_ms() - t0;
	note("recv=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("expected EAGAIN");
	note("%s", dt >= 150 && dt < 5000 ? "time_ok" : "time_wrong");
	if (dt < 150 || dt >= 5000)
		FAIL("timed out after %lld ms, not ~200", (long long)dt);
	/* data still flows afterwards */
	if (write_all(p.s, "z", 1, 10000) < 0)
		FAIL_ERRNO("send");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("then=%zd", n);
	if (n != 1)
		FAIL("recv after the time out: %s", errname(errno));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_so_sndtimeo(void)
{
	struct pair p = { -1, -1 };
	struct timeval tv = { 1, 500000 };
	socklen_t len = sizeof(tv);
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	memset(&tv, 0xff, sizeof(tv));
	if (getsockopt(p.c, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) < 0)
		FAIL_ERRNO("get SO_SNDTIMEO");
	note("default=%ld.%06ld", (long)tv.tv_sec, (long)tv.tv_usec);
	tv.tv_sec = 1;
	tv.tv_usec = 500000;
	if (setsockopt(p.c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		FAIL_ERRNO("set SO_SNDTIMEO");
	memset(&tv, 0, sizeof(tv));
	len = sizeof(tv);
	if (getsockopt(p.c, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) < 0)
		FAIL_ERRNO("get SO_SNDTIMEO");
	note("get=%ld.%06ld", (long)tv.tv_sec, (long)tv.tv_usec);
	if (tv.tv_sec != 1 || tv.tv_usec != 500000)
		FAIL("SO_SNDTIMEO read back differs");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_tcp_nodelay(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (note_int("default", p.c, IPPROTO_TCP, TCP_NODELAY) != 0)
		FAIL("TCP_NODELAY on by default");
	if (set_get("on", p.c, IPPROTO_TCP, TCP_NODELAY, 1, 1) < 0 ||
	    set_get("off", p.c, IPPROTO_TCP, TCP_NODELAY, 0, 0) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_tcp_keepalive_params(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (set_get("idle", p.c, IPPROTO_TCP, TCP_KEEPIDLE, 30, 30) < 0 ||
	    set_get("intvl", p.c, IPPROTO_TCP, TCP_KEEPINTVL, 5, 5) < 0 ||
	    set_get("cnt", p.c, IPPROTO_TCP, TCP_KEEPCNT, 4, 4) < 0)
		goto out;
	if (set_int(p.c, IPPROTO_TCP, TCP_KEEPIDLE, 0) == 0)
		FAIL("TCP_KEEPIDLE 0 accepted");
	note("idle0=%s", errname(errno));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_tcp_cork(void)
{
	struct pair p = { -1, -1 };
	char buf[10];
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (set_get("on", p.c, IPPROTO_TCP, TCP_CORK, 1, 1) < 0)
		goto out;
	if (write_all(p.c, "0123456789", 10, 10000) < 0)
		FAIL_ERRNO("send while corked");
	if (set_get("off", p.c, IPPROTO_TCP, TCP_CORK, 0, 0) < 0)
		goto out;
	if (read_exact(p.s, buf, 10, 5000) < 0)
		FAIL("data after uncorking: %s", errno ? errname(errno) : "EOF");
	if (memcmp(buf, "0123456789", 10) != 0)
		FAIL("wrong data");
	note("data ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_ip_tos(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	note_int("default", p.c, IPPROTO_IP, IP_TOS);
	if (set_get("set0x10", p.c, IPPROTO_IP, IP_TOS, 0x10, 0x10) < 0)
		goto out;
	if (write_all(p.c, "t", 1, 10000) < 0)
		FAIL_ERRNO("send");
	{
		char b;

		if (read_exact(p.s, &b, 1, 10000) < 0)
			FAIL("data: %s", errname(errno));
	}
	note("data ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_so_priority(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	note_int("default", p.c, SOL_SOCKET, SO_PRIORITY);
	if (set_get("set3", p.c, SOL_SOCKET, SO_PRIORITY, 3, 3) < 0 ||
	    set_get("set0", p.c, SOL_SOCKET, SO_PRIORITY, 0, 0) < 0)
		goto out;
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_tcp_info(void)
{
	struct pair p = { -1, -1 };
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(p.c, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		FAIL_ERRNO("TCP_INFO");
	note("state=%s len>0=%s",
	     ti.tcpi_state == TCP_ESTABLISHED ? "ESTABLISHED" : "other",
	     len > 0 ? "yes" : "no");
	if (ti.tcpi_state != TCP_ESTABLISHED)
		FAIL("tcpi_state %u", ti.tcpi_state);
	memset(&ti, 0, sizeof(ti));
	len = sizeof(ti);
	if (getsockopt(p.s, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		FAIL_ERRNO("TCP_INFO accepted side");
	note("accepted=%s",
	     ti.tcpi_state == TCP_ESTABLISHED ? "ESTABLISHED" : "other");
	if (ti.tcpi_state != TCP_ESTABLISHED)
		FAIL("accepted side tcpi_state %u", ti.tcpi_state);
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_bad_option(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, v = 1;
	socklen_t len = sizeof(v);

	if (pair_open(&p) < 0)
		goto out;
	if (getsockopt(p.c, SOL_SOCKET, 12345, &v, &len) == 0)
		FAIL("getsockopt(SOL_SOCKET, 12345) succeeded");
	note("get-sol=%s", errname(errno));
	if (setsockopt(p.c, IPPROTO_TCP, 12345, &v, sizeof(v)) == 0)
		FAIL("setsockopt(IPPROTO_TCP, 12345) succeeded");
	note("set-tcp=%s", errname(errno));
	len = sizeof(v);
	if (getsockopt(p.c, IPPROTO_TCP, 12345, &v, &len) == 0)
		FAIL("getsockopt(IPPROTO_TCP, 12345) succeeded");
	note("get-tcp=%s", errname(errno));
	if (errno != ENOPROTOOPT)
		FAIL("expected ENOPROTOOPT");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_bad_level(void)
{
	struct pair p = { -1, -1 };
	int rc = -1, v = 1;
	socklen_t len = sizeof(v);

	if (pair_open(&p) < 0)
		goto out;
	if (getsockopt(p.c, 4242, 1, &v, &len) == 0)
		FAIL("getsockopt(level 4242) succeeded");
	note("get=%s", errname(errno));
	if (setsockopt(p.c, 4242, 1, &v, sizeof(v)) == 0)
		FAIL("setsockopt(level 4242) succeeded");
	note("set=%s", errname(errno));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

const struct check checks_opts[] = {
	{ "so_type", check_so_type,
	  "SO_TYPE, SO_DOMAIN, SO_PROTOCOL on both ends and a listener" },
	{ "so_acceptconn", check_so_acceptconn,
	  "SO_ACCEPTCONN: listener 1, connections 0" },
	{ "so_keepalive", check_so_keepalive, "SO_KEEPALIVE set/get" },
	{ "so_reuseaddr", check_so_reuseaddr, "SO_REUSEADDR set/get, bind" },
	{ "so_linger", check_so_linger, "SO_LINGER set/get" },
	{ "so_rcvtimeo", check_so_rcvtimeo,
	  "SO_RCVTIMEO 200 ms: recv on an idle socket gives EAGAIN" },
	{ "so_sndtimeo", check_so_sndtimeo, "SO_SNDTIMEO set/get" },
	{ "tcp_nodelay", check_tcp_nodelay, "TCP_NODELAY set/get" },
	{ "tcp_keepalive_params", check_tcp_keepalive_params,
	  "TCP_KEEPIDLE/KEEPINTVL/KEEPCNT set/get" },
	{ "tcp_cork", check_tcp_cork, "TCP_CORK on/off, data flows" },
	{ "ip_tos", check_ip_tos, "IP_TOS set/get on a connected socket" },
	{ "so_priority", check_so_priority, "SO_PRIORITY set/get" },
	{ "tcp_info", check_tcp_info, "TCP_INFO: tcpi_state ESTABLISHED" },
	{ "bad_option", check_bad_option, "unknown option: ENOPROTOOPT" },
	{ "bad_level", check_bad_level, "unknown level" },
	{ NULL, NULL, NULL },
};
