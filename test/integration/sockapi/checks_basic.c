/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Basic checks: socket type flags, bind/listen/getsockname on port 0,
 * accept and accept4 flags, blocking and non-blocking connect, refused
 * connects, getpeername, listen twice.
 */

#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == b->sin_family && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* Note the O_NONBLOCK and FD_CLOEXEC state of fd as "tag:NONBLOCK,CLOEXEC"
 * ("-" for a flag that is clear). */
static int note_flags(const char *tag, int fd)
{
	int fl = fcntl(fd, F_GETFL), fdf = fcntl(fd, F_GETFD);

	if (fl < 0 || fdf < 0)
		return fail("%s: fcntl: %s", tag, errname(errno));
	note("%s:%s,%s", tag, (fl & O_NONBLOCK) ? "NONBLOCK" : "-",
	     (fdf & FD_CLOEXEC) ? "CLOEXEC" : "-");
	return 0;
}

static int check_socket_flags(void)
{
	int a = -1, b = -1, rc = -1;

	a = socket(AF_INET, SOCK_STREAM, 0);
	if (a < 0)
		FAIL_ERRNO("socket");
	b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (b < 0)
		FAIL_ERRNO("socket(SOCK_NONBLOCK|SOCK_CLOEXEC)");
	if (note_flags("plain", a) < 0 || note_flags("flags", b) < 0)
		goto out;
	if ((fcntl(a, F_GETFL) & O_NONBLOCK) || (fcntl(a, F_GETFD) & FD_CLOEXEC))
		FAIL("plain socket has O_NONBLOCK or FD_CLOEXEC");
	if (!(fcntl(b, F_GETFL) & O_NONBLOCK) ||
	    !(fcntl(b, F_GETFD) & FD_CLOEXEC))
		FAIL("SOCK_NONBLOCK|SOCK_CLOEXEC not visible through fcntl");
	rc = 0;
out:
	xclose(&a);
	xclose(&b);
	return rc;
}

static int check_bind_port0(void)
{
	struct sockaddr_in a, got;
	socklen_t len = sizeof(got);
	int fd = -1, rc = -1;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		FAIL_ERRNO("socket");
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr = test_host();
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		FAIL_ERRNO("bind");
	if (getsockname(fd, (struct sockaddr *)&got, &len) < 0)
		FAIL_ERRNO("getsockname after bind");
	note("bound:%s", got.sin_port ? "port!=0" : "port=0");
	if (listen(fd, 8) < 0)
		FAIL_ERRNO("listen");
	len = sizeof(got);
	memset(&got, 0, sizeof(got));
	if (getsockname(fd, (struct sockaddr *)&got, &len) < 0)
		FAIL_ERRNO("getsockname after listen");
	note("listening:%s len=%u family=%s addr=%s",
	     got.sin_port ? "port!=0" : "port=0", (unsigned)len,
	     got.sin_family == AF_INET ? "AF_INET" : "other",
	     got.sin_addr.s_addr == a.sin_addr.s_addr ? "bound" : "other");
	if (got.sin_port == 0)
		FAIL("port 0 after listen");
	if (got.sin_addr.s_addr != a.sin_addr.s_addr)
		FAIL("getsockname address is not the one bound");
	rc = 0;
out:
	xclose(&fd);
	return rc;
}

static int check_accept_flags(void)
{
	struct sockaddr_in la, peer, cname;
	socklen_t plen, clen;
	int l = -1, c1 = -1, c2 = -1, c3 = -1, s1 = -1, s2 = -1, s3 = -1;
	int rc = -1, fl;

	l = make_listener(0, &la);
	if (l < 0)
		goto out;
	c1 = socket(AF_INET, SOCK_STREAM, 0);
	c2 = socket(AF_INET, SOCK_STREAM, 0);
	c3 = socket(AF_INET, SOCK_STREAM, 0);
	if (c1 < 0 || c2 < 0 || c3 < 0)
		FAIL_ERRNO("socket");
	if (connect(c1, (struct sockaddr *)&la, sizeof(la)) < 0)
		FAIL_ERRNO("connect 1");
	plen = sizeof(peer);
	s1 = accept(l, (struct sockaddr *)&peer, &plen);
	if (s1 < 0)
		FAIL_ERRNO("accept");
	clen = sizeof(cname);
	if (getsockname(c1, (struct sockaddr *)&cname, &clen) < 0)
		FAIL_ERRNO("getsockname client");
	note("addrlen=%u addr:%s", (unsigned)plen,
	     same_addr(&peer, &cname) ? "match" : "differs");
	if (!same_addr(&peer, &cname))
		FAIL("accept's address is not the client's");
	if (note_flags("accept", s1) < 0)
		goto out;

	if (connect(c2, (struct sockaddr *)&la, sizeof(la)) < 0)
		FAIL_ERRNO("connect 2");
	s2 = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (s2 < 0)
		FAIL_ERRNO("accept4");
	if (note_flags("accept4", s2) < 0)
		goto out;
	if (!(fcntl(s2, F_GETFL) & O_NONBLOCK) ||
	    !(fcntl(s2, F_GETFD) & FD_CLOEXEC))
		FAIL("accept4 flags not set on the new fd");
	if ((fcntl(s1, F_GETFL) & O_NONBLOCK) || (fcntl(s1, F_GETFD) & FD_CLOEXEC))
		FAIL("accept gave O_NONBLOCK or FD_CLOEXEC");

	/* A non-blocking listener: Linux's accept() does not pass
	 * O_NONBLOCK on to the new socket. */
	fl = fcntl(l, F_GETFL);
	if (fl < 0 || fcntl(l, F_SETFL, fl | O_NONBLOCK) < 0)
		FAIL_ERRNO("F_SETFL O_NONBLOCK on listener");
	if (connect(c3, (struct sockaddr *)&la, sizeof(la)) < 0)
		FAIL_ERRNO("connect 3");
	if (wait_fd(l, POLLIN, 10000) <= 0)
		FAIL("listener not readable");
	s3 = accept(l, NULL, NULL);
	if (s3 < 0)
		FAIL_ERRNO("accept from non-blocking listener");
	if (note_flags("nb-listener-accept", s3) < 0)
		goto out;
	/* and one more accept: nothing pending */
	{
		int s4 = accept(l, NULL, NULL);

		note("accept-empty=%s", s4 < 0 ? errname(errno) : "fd");
		if (s4 >= 0) {
			close(s4);
			FAIL("accept on an empty non-blocking listener succeeded");
		}
	}
	rc = 0;
out:
	xclose(&l);
	xclose(&c1);
	xclose(&c2);
	xclose(&c3);
	xclose(&s1);
	xclose(&s2);
	xclose(&s3);
	return rc;
}

static int check_blocking_connect(void)
{
	struct pair p = { -1, -1 };
	char buf[16];
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	{
		struct sockaddr_in peer;
		socklen_t plen = sizeof(peer);
		int r;

		/* A blocking connect() reported the success itself: a second
		 * one says EISCONN (the 0-once rule is for non-blocking). */
		if (getpeername(p.c, (struct sockaddr *)&peer, &plen) < 0)
			FAIL_ERRNO("getpeername");
		r = connect(p.c, (struct sockaddr *)&peer, plen);
		note("again=%s", r == 0 ? "0" : errname(errno));
		if (r == 0 || errno != EISCONN)
			FAIL("second connect: expected EISCONN");
	}
	n = write(p.c, "hello", 5);
	if (n != 5)
		FAIL("client write: %zd %s", n, errname(errno));
	if (read_exact(p.s, buf, 5, 10000) < 0)
		FAIL("server read: %s", errname(errno));
	if (memcmp(buf, "hello", 5) != 0)
		FAIL("server got wrong data");
	note("c->s");
	n = write(p.s, "world!", 6);
	if (n != 6)
		FAIL("server write: %zd %s", n, errname(errno));
	n = read(p.c, buf, sizeof(buf));
	if (n <= 0)
		FAIL("client read: %zd %s", n, errname(errno));
	if (n < 6 && read_exact(p.c, buf + n, (size_t)(6 - n), 10000) < 0)
		FAIL("client read rest: %s", errname(errno));
	if (memcmp(buf, "world!", 6) != 0)
		FAIL("client got wrong data");
	note("s->c");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_nb_connect(void)
{
	struct sockaddr_in la;
	int l = -1, c = -1, s = -1, rc = -1, r, err = -1;
	socklen_t elen = sizeof(err);
	char pb[64], buf[4];

	l = make_listener(0, &la);
	if (l < 0)
		goto out;
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	r = connect(c, (struct sockaddr *)&la, sizeof(la));
	note("%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != EINPROGRESS)
		FAIL("expected EINPROGRESS, as Linux TCP gives even on loopback");
	r = wait_fd(c, POLLOUT, 10000);
	if (r <= 0)
		FAIL("not writable within 10 s");
	note("%s", pollname(r, pb, sizeof(pb)));
	if (getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		FAIL_ERRNO("SO_ERROR");
	note("SO_ERROR=%s", errname(err));
	if (err != 0)
		FAIL("connect failed");
	/* Linux: the connect() after completion returns 0 (it moves the
	 * socket to connected), any later one EISCONN. */
	r = connect(c, (struct sockaddr *)&la, sizeof(la));
	note("again=%s", r == 0 ? "0" : errname(errno));
	if (r < 0)
		FAIL("second connect: expected 0");
	r = connect(c, (struct sockaddr *)&la, sizeof(la));
	note("again=%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != EISCONN)
		FAIL("third connect did not give EISCONN");
	s = accept(l, NULL, NULL);
	if (s < 0)
		FAIL_ERRNO("accept");
	if (write_all(c, "ping", 4, 10000) < 0)
		FAIL_ERRNO("send");
	if (read_exact(s, buf, 4, 10000) < 0 || memcmp(buf, "ping", 4) != 0)
		FAIL("data after non-blocking connect: %s", errname(errno));
	rc = 0;
out:
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

/*
 * The first connect of a fresh process: the preload starts its engine and
 * transport inside that call, and a transport that finished the attempt
 * at once made it return 0 (Java NIO then waited for OP_CONNECT for
 * ever).  Linux says EINPROGRESS every time; so must the preload, in
 * every one of these fresh processes (--nb-connect, in main.c).
 */
#define FRESH_RUNS 10

static int check_nb_connect_fresh(void)
{
	struct sockaddr_in la;
	int l = -1, rc = -1, einprogress = 0, zero = 0, other = 0;
	char port[16], what[32];

	l = make_listener(0, &la);
	if (l < 0)
		goto out;
	snprintf(port, sizeof(port), "%u", ntohs(la.sin_port));
	for (int i = 0; i < FRESH_RUNS; i++) {
		int s, code;
		pid_t pid = spawn_self("--nb-connect", port, NULL);

		if (pid < 0)
			FAIL_ERRNO("fork");
		/* Accepted and closed first: the child's exit waits for
		 * the server side's close, as a graceful close does. */
		if (wait_fd(l, POLLIN, 10000) > 0) {
			s = accept(l, NULL, NULL);
			if (s >= 0)
				close(s);
		}
		code = wait_child(pid, 20000, what, sizeof(what));
		if (code == NB_FRESH_EINPROGRESS)
			einprogress++;
		else if (code == NB_FRESH_ZERO)
			zero++;
		else
			other++;
	}
	note("EINPROGRESS=%d 0=%d other=%d", einprogress, zero, other);
	if (einprogress != FRESH_RUNS)
		FAIL("a fresh process's non-blocking connect did not say EINPROGRESS");
	rc = 0;
out:
	xclose(&l);
	return rc;
}

static int check_refused_blocking(void)
{
	struct sockaddr_in a;
	int holder = -1, c = -1, rc = -1, r;

	if (closed_port(&a, &holder) < 0)
		goto out;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	note("%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != ECONNREFUSED)
		FAIL("expected ECONNREFUSED");
	rc = 0;
out:
	xclose(&holder);
	xclose(&c);
	return rc;
}

static int check_refused_nonblocking(void)
{
	struct sockaddr_in a;
	int holder = -1, c = -1, rc = -1, r, err = -1;
	socklen_t elen = sizeof(err);
	char pb[96];

	if (closed_port(&a, &holder) < 0)
		goto out;
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	note("%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != EINPROGRESS)
		FAIL("expected EINPROGRESS");
	r = wait_fd(c, POLLOUT, 10000);
	if (r <= 0)
		FAIL("no POLLOUT within 10 s");
	note("%s", pollname(r, pb, sizeof(pb)));
	if (getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		FAIL_ERRNO("SO_ERROR");
	note("SO_ERROR=%s", errname(err));
	if (err != ECONNREFUSED)
		FAIL("expected SO_ERROR ECONNREFUSED");
	err = -1;
	if (getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		FAIL_ERRNO("SO_ERROR again");
	note("SO_ERROR=%s", errname(err));
	if (err != 0)
		FAIL("SO_ERROR not cleared by reading it");
	rc = 0;
out:
	xclose(&holder);
	xclose(&c);
	return rc;
}

static int check_getpeername(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in cn, cp, sn, sp;
	socklen_t len;
	int u = -1, rc = -1, r;

	if (pair_open(&p) < 0)
		goto out;
	len = sizeof(cn);
	if (getsockname(p.c, (struct sockaddr *)&cn, &len) < 0)
		FAIL_ERRNO("getsockname client");
	len = sizeof(cp);
	if (getpeername(p.c, (struct sockaddr *)&cp, &len) < 0)
		FAIL_ERRNO("getpeername client");
	note("len=%u", (unsigned)len);
	len = sizeof(sn);
	if (getsockname(p.s, (struct sockaddr *)&sn, &len) < 0)
		FAIL_ERRNO("getsockname server");
	len = sizeof(sp);
	if (getpeername(p.s, (struct sockaddr *)&sp, &len) < 0)
		FAIL_ERRNO("getpeername server");
	note("client-peer:%s server-peer:%s",
	     same_addr(&cp, &sn) ? "match" : "differs",
	     same_addr(&sp, &cn) ? "match" : "differs");
	if (!same_addr(&cp, &sn) || !same_addr(&sp, &cn))
		FAIL("peer names do not match the socket names");
	u = socket(AF_INET, SOCK_STREAM, 0);
	if (u < 0)
		FAIL_ERRNO("socket");
	len = sizeof(cp);
	r = getpeername(u, (struct sockaddr *)&cp, &len);
	note("unconnected:%s", r == 0 ? "0" : errname(errno));
	if (r == 0 || errno != ENOTCONN)
		FAIL("getpeername on an unconnected socket: expected ENOTCONN");
	rc = 0;
out:
	pair_close(&p);
	xclose(&u);
	return rc;
}

/*
 * One bind-before-connect case: the client binds FROM (port 0 or a port
 * another socket found free, with SO_REUSEADDR when asked), connects to
 * the listener, and the names on both ends must agree with what it bound:
 * the client's getsockname() and the server's accept() and getpeername()
 * show the bound address and port.
 */
static int bound_connect(const char *tag, struct in_addr from, int fixed_port, int reuse)
{
	struct sockaddr_in la, b = { .sin_family = AF_INET }, cn, acc, sp;
	socklen_t len;
	int l = -1, c = -1, s = -1, rc = -1, one = 1;

	l = make_listener(0, &la);
	if (l < 0)
		goto out;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	if (reuse && setsockopt(c, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		FAIL_ERRNO("SO_REUSEADDR");
	b.sin_addr = from;
	if (fixed_port) {
		/* a port the kernel just handed out, free again */
		int t = socket(AF_INET, SOCK_STREAM, 0);

		len = sizeof(b);
		if (t < 0 || bind(t, (struct sockaddr *)&b, sizeof(b)) < 0 ||
		    getsockname(t, (struct sockaddr *)&b, &len) < 0) {
			if (t >= 0)
				close(t);
			FAIL_ERRNO("finding a free port");
		}
		close(t);
	}
	if (bind(c, (struct sockaddr *)&b, sizeof(b)) < 0)
		FAIL_ERRNO("bind");
	len = sizeof(b);
	if (getsockname(c, (struct sockaddr *)&b, &len) < 0)
		FAIL_ERRNO("getsockname after bind");
	/* A wildcard source takes the route's address at connect. */
	if (b.sin_addr.s_addr == htonl(INADDR_ANY))
		b.sin_addr = la.sin_addr;
	if (connect(c, (struct sockaddr *)&la, sizeof(la)) < 0)
		FAIL_ERRNO("connect");
	len = sizeof(acc);
	s = accept(l, (struct sockaddr *)&acc, &len);
	if (s < 0)
		FAIL_ERRNO("accept");
	len = sizeof(cn);
	if (getsockname(c, (struct sockaddr *)&cn, &len) < 0)
		FAIL_ERRNO("getsockname after connect");
	len = sizeof(sp);
	if (getpeername(s, (struct sockaddr *)&sp, &len) < 0)
		FAIL_ERRNO("server getpeername");
	note("%s:client=%s,accept=%s,peer=%s", tag, same_addr(&cn, &b) ? "bound" : "other",
	     same_addr(&acc, &b) ? "bound" : "other", same_addr(&sp, &b) ? "bound" : "other");
	if (!same_addr(&cn, &b) || !same_addr(&acc, &b) || !same_addr(&sp, &b))
		FAIL("%s: the bound source was not kept", tag);
	rc = 0;
out:
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

static int check_bind_before_connect(void)
{
	struct in_addr any = { htonl(INADDR_ANY) }, host = test_host();

	if (bound_connect("port0", host, 0, 0) < 0 || bound_connect("port", host, 1, 0) < 0 ||
	    bound_connect("reuse", host, 1, 1) < 0 || bound_connect("any-port", any, 1, 0) < 0)
		return -1;
	/* Another address of the host, where there is one: on loopback. */
	if (host.s_addr == htonl(INADDR_LOOPBACK)) {
		struct in_addr two = { htonl(0x7f000002) };

		if (bound_connect("127.0.0.2", two, 0, 0) < 0 ||
		    bound_connect("127.0.0.2-port", two, 1, 1) < 0)
			return -1;
	}
	return 0;
}

static const char *peer_state(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	return getpeername(fd, (struct sockaddr *)&a, &len) == 0 ? "named" : errname(errno);
}

/*
 * After the peer's reset, a TCP socket is in CLOSE: getpeername() says
 * ENOTCONN (a TLS library's guard against data sent before its handshake,
 * the fix for CVE-2023-40217, keys on it), while recv() still yields
 * what arrived before the reset, then ECONNRESET, then EOF.
 */
static int check_peer_after_reset(void)
{
	struct pair p = { -1, -1 };
	struct linger lg = { 1, 0 };
	char buf[16], pb[64];
	int rc = -1, r;
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	note("before:%s", peer_state(p.c));
	if (write_all(p.s, "hello", 5, 10000) < 0)
		FAIL_ERRNO("write");
	if (setsockopt(p.s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		FAIL_ERRNO("SO_LINGER");
	xclose(&p.s);
	/* The reset is in once the socket reports an error or hang-up
	 * besides the data. */
	for (int i = 0; i < 200; i++) {
		r = wait_fd(p.c, POLLIN, 10000);
		if (r < 0 || (r & (POLLERR | POLLHUP)))
			break;
		sleep_ms(10);
	}
	note("%s", pollname(r, pb, sizeof(pb)));
	note("after:%s", peer_state(p.c));
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n == 5 && memcmp(buf, "hello", 5) == 0 ? "data" : n < 0 ? errname(errno) : "?");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : n == 0 ? "EOF" : "data");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : n == 0 ? "EOF" : "data");
	note("end:%s", peer_state(p.c));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* Half-closed, the peer is still named; once both FINs are through, the
 * socket is in CLOSE on both sides: ENOTCONN. */
static int check_peer_after_close(void)
{
	struct pair p = { -1, -1 };
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (shutdown(p.c, SHUT_WR) < 0)
		FAIL_ERRNO("shutdown client");
	if (wait_eof(p.s, 10000) < 0)
		FAIL("server: no EOF: %s", errname(errno));
	note("half: client:%s server:%s", peer_state(p.c), peer_state(p.s));
	if (shutdown(p.s, SHUT_WR) < 0)
		FAIL_ERRNO("shutdown server");
	if (wait_eof(p.c, 10000) < 0)
		FAIL("client: no EOF: %s", errname(errno));
	note("both: client:%s server:%s", peer_state(p.c), peer_state(p.s));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_listen_twice(void)
{
	struct sockaddr_in a, b;
	socklen_t len = sizeof(b);
	int l = -1, c = -1, s = -1, rc = -1, r1, r2;
	char buf[2];

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		FAIL_ERRNO("socket");
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr = test_host();
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0)
		FAIL_ERRNO("bind");
	r1 = listen(l, 1);
	if (r1 < 0)
		FAIL_ERRNO("listen(1)");
	len = sizeof(a);
	if (getsockname(l, (struct sockaddr *)&a, &len) < 0)
		FAIL_ERRNO("getsockname");
	r2 = listen(l, 64);
	note("%d %s", r1, r2 == 0 ? "0" : errname(errno));
	if (r2 < 0)
		FAIL("second listen failed");
	len = sizeof(b);
	if (getsockname(l, (struct sockaddr *)&b, &len) < 0)
		FAIL_ERRNO("getsockname after second listen");
	note("port:%s", same_addr(&a, &b) ? "same" : "changed");
	if (!same_addr(&a, &b))
		FAIL("the second listen changed the address");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		FAIL_ERRNO("connect");
	s = accept(l, NULL, NULL);
	if (s < 0)
		FAIL_ERRNO("accept");
	if (write_all(s, "x", 1, 10000) < 0 || read_exact(c, buf, 1, 10000) < 0)
		FAIL("data after second listen: %s", errname(errno));
	note("connected");
	rc = 0;
out:
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

const struct check checks_basic[] = {
	{ "socket_flags", check_socket_flags,
	  "SOCK_NONBLOCK|SOCK_CLOEXEC visible through F_GETFL/F_GETFD" },
	{ "bind_port0", check_bind_port0,
	  "bind TEST_HOST:0, listen, getsockname gives the address and a port" },
	{ "accept_flags", check_accept_flags,
	  "accept/accept4 flags on the new fd, accept's address" },
	{ "blocking_connect", check_blocking_connect,
	  "blocking connect, data both ways" },
	{ "nb_connect", check_nb_connect,
	  "non-blocking connect, POLLOUT, SO_ERROR 0, EISCONN" },
	{ "nb_connect_fresh", check_nb_connect_fresh,
	  "the first non-blocking connect of fresh processes: EINPROGRESS" },
	{ "refused_blocking", check_refused_blocking,
	  "blocking connect to a closed port: ECONNREFUSED" },
	{ "refused_nonblocking", check_refused_nonblocking,
	  "non-blocking connect to a closed port: SO_ERROR ECONNREFUSED" },
	{ "getpeername", check_getpeername,
	  "getpeername/getsockname of both ends match, ENOTCONN" },
	{ "bind_before_connect", check_bind_before_connect,
	  "a source bound before connect (IP, port, port 0) is what both ends see" },
	{ "peer_after_reset", check_peer_after_reset,
	  "the peer's reset: getpeername ENOTCONN, data then ECONNRESET then EOF" },
	{ "peer_after_close", check_peer_after_close,
	  "getpeername when half-closed and after both FINs" },
	{ "listen_twice", check_listen_twice,
	  "listen then listen again: ok, same port, connect works" },
	{ NULL, NULL, NULL },
};
