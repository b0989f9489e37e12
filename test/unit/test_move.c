/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A connection moved to another socket (sdp_conn_export, sdp_conn_import),
 * in the same process and in a fork child, over the software transport:
 * the bytes received and not yet read, those written and not yet sent
 * (held back by the peer's credits) and those still to come all arrive,
 * once each and in order, and the peer notices nothing.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdspace.h"
#include "sdp.h"

static void setup(void)
{
	setenv("SDP_TRANSPORTS", "tcp-fallback", 0);
}

TestSuite(move, .init = setup, .timeout = 60);

/* An established pair: client *c, accepted *a. */
static void pair(int *ls, int *c, int *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*ls = sdp_socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*ls, 0);
	cr_assert_eq(sdp_bind(*ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(sdp_listen(*ls, 8), 0);
	cr_assert_eq(sdp_getsockname(*ls, (struct sockaddr *)&sa, &len), 0);
	*c = sdp_socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*c, 0);
	cr_assert_eq(sdp_connect(*c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	*a = sdp_accept(*ls, NULL, NULL, 0);
	cr_assert_geq(*a, 0, "sdp_accept: %s", strerror(-*a));
}

/* Byte i of a stream: a pattern that shows a lost, doubled or swapped byte. */
static uint8_t pat(uint64_t i, unsigned seed)
{
	return (uint8_t)(i * 7u + (i >> 8) * 13u + (i >> 16) + seed);
}

static void gen(uint8_t *p, size_t len, uint64_t at, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pat(at + i, seed);
}

/* Read exactly len bytes of stream seed from *at on; 0, or -1 with what
 * went wrong in *why (no assertions: fork children use it too). */
static int read_check(int sd, size_t len, uint64_t *at, unsigned seed, const char **why)
{
	static uint8_t buf[65536];

	while (len) {
		ssize_t n = sdp_recv(sd, buf, len < sizeof(buf) ? len : sizeof(buf), 0);

		if (n <= 0) {
			*why = n == 0 ? "early EOF" : strerror((int)-n);
			return -1;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != pat(*at + (uint64_t)i, seed)) {
				*why = "a byte out of place";
				return -1;
			}
		}
		*at += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(int sd, size_t len, uint64_t *at, unsigned seed)
{
	static uint8_t buf[65536];

	while (len) {
		size_t k = len < sizeof(buf) ? len : sizeof(buf);

		gen(buf, k, *at, seed);
		ssize_t n = sdp_send(sd, buf, k, MSG_NOSIGNAL);

		if (n <= 0)
			return -1;
		*at += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* As much as sd takes without blocking: the peer does not read, so the
 * last of it waits in sd's ring for credits. */
static size_t write_until_full(int sd, uint64_t *at, unsigned seed)
{
	uint8_t buf[4096];
	size_t total = 0;

	for (;;) {
		gen(buf, sizeof(buf), *at, seed);
		ssize_t n = sdp_send(sd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n == -EAGAIN)
			return total;
		cr_assert_gt(n, 0, "send: %zd", n);
		*at += (uint64_t)n;
		total += (size_t)n;
	}
}

/* Export, trying again while the connection is busy (a send completing). */
static void export(int sd, void **blob, size_t *len, int *fd)
{
	int ret;

	for (int i = 0; i < 2000; i++) {
		ret = sdp_conn_export(sd, blob, len, fd);
		if (ret != -EBUSY)
			break;
		usleep(1000);
	}
	cr_assert_eq(ret, 0, "sdp_conn_export: %s", strerror(-ret));
}

/*
 * Shut for writing, with data still waiting for the peer's credits: the
 * connection moves, the new owner sends the rest and then the DisConn, and
 * the peer reads every byte once and in order, then the end of the stream;
 * the new owner can still read what the peer sends and can no longer send
 * (python's socketserver shuts a connection down before it closes it, in
 * a fork child that then hands it back to its parent).
 */
Test(move, shut_for_writing)
{
	int ls, c, a, fd;
	void *blob;
	size_t len;
	uint64_t a_out = 0, c_in = 0, c_out = 0, a_in = 0;
	const char *why = "";

	pair(&ls, &c, &a);
	size_t held = write_until_full(a, &a_out, 3);

	cr_assert_gt(held, 0);
	cr_assert_eq(sdp_shutdown(a, SHUT_WR), 0);
	export(a, &blob, &len, &fd);
	int b = sdp_conn_import(blob, len, fd, SOCK_CLOEXEC);

	free(blob);
	cr_assert_geq(b, 0, "sdp_conn_import: %s", strerror(-b));
	cr_assert_eq(read_check(c, held, &c_in, 3, &why), 0, "%s", why);
	char x;
	cr_assert_eq(sdp_recv(c, &x, 1, 0), 0, "no end of stream after the moved DisConn");
	cr_assert_eq(sdp_send(b, "y", 1, MSG_NOSIGNAL), -EPIPE, "the moved end could send");
	cr_assert_eq(write_all(c, 5000, &c_out, 4), 0);
	cr_assert_eq(read_check(b, 5000, &a_in, 4, &why), 0, "%s", why);
	sdp_close(b);
	sdp_close(c);
	sdp_close(ls);
}

Test(move, within_a_process)
{
	int ls, c, a, fd;
	uint64_t c_out = 0, c_in = 0, a_out = 0, a_in = 0;
	const char *why = "";
	void *blob;
	size_t len;

	pair(&ls, &c, &a);
	/* Unread at a: 3000 bytes of the client's; unsent at a: what the
	 * client's credits hold back. */
	cr_assert_eq(write_all(c, 5000, &c_out, 1), 0);
	cr_assert_eq(read_check(a, 2000, &a_in, 1, &why), 0, "%s", why);
	size_t sent = write_until_full(a, &a_out, 2);

	cr_assert_gt(sent, 0);
	export(a, &blob, &len, &fd);
	cr_assert_eq(sdp_recv(a, &why, 1, MSG_DONTWAIT), -EBADF, "the old sd is closed");
	/* Before and after the import: the client does not notice. */
	cr_assert_eq(write_all(c, 7000, &c_out, 1), 0);
	int n = sdp_conn_import(blob, len, fd, 0);

	free(blob);
	cr_assert_geq(n, 0, "sdp_conn_import: %s", strerror(-n));
	cr_assert_eq(write_all(c, 100000, &c_out, 1), 0);
	cr_assert_eq(read_check(n, c_out - a_in, &a_in, 1, &why), 0, "%s", why);
	cr_assert_eq(read_check(c, a_out, &c_in, 2, &why), 0, "%s", why);
	cr_assert_eq(write_all(n, 200000, &a_out, 2), 0);
	cr_assert_eq(read_check(c, a_out - c_in, &c_in, 2, &why), 0, "%s", why);
	/* The names came along. */
	struct sockaddr_in an, cn;
	socklen_t al = sizeof(an), cl = sizeof(cn);

	cr_assert_eq(sdp_getpeername(n, (struct sockaddr *)&an, &al), 0);
	cr_assert_eq(sdp_getsockname(c, (struct sockaddr *)&cn, &cl), 0);
	cr_assert_eq(an.sin_port, cn.sin_port);
	/* The end, orderly, both ways. */
	cr_assert_eq(sdp_close(n), 0);
	char b;
	cr_assert_eq(sdp_recv(c, &b, 1, 0), 0, "the peer saw no end of stream");
	sdp_close(c);
	sdp_close(ls);
}

/* The move a fork makes: the parent exports, the child imports on the
 * descriptor it inherited and serves; the parent's close of its copy
 * harms nothing; the client sees the end when the child closes. */
static int child(int done, const void *blob, size_t len, int fd, uint64_t a_in, uint64_t a_out)
{
	const char *why;
	char c;

	if (read(done, &c, 1) != 1)
		return 10;
	int n = sdp_conn_import(blob, len, fd, 0);

	if (n < 0) {
		fprintf(stderr, "child: sdp_conn_import: %s\n", strerror(-n));
		return 11;
	}
	if (read_check(n, 20000 - a_in, &a_in, 1, &why)) {
		fprintf(stderr, "child: %s at %llu\n", why, (unsigned long long)a_in);
		return 12;
	}
	if (write_all(n, 300000, &a_out, 2)) {
		fprintf(stderr, "child: a send failed at %llu\n", (unsigned long long)a_out);
		return 13;
	}
	/* _exit() ends the process at once: the close waits until all of
	 * it has gone (exit() would, for a program). */
	struct linger lg = { 1, 30 };

	if (sdp_setsockopt(n, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		return 14;
	return sdp_close(n) ? 15 : 0;
}

Test(move, to_a_fork_child)
{
	int ls, c, a, fd, done[2];
	uint64_t c_out = 0, c_in = 0, a_out = 0, a_in = 0;
	const char *why = "";
	void *blob;
	size_t len;

	pair(&ls, &c, &a);
	cr_assert_eq(write_all(c, 5000, &c_out, 1), 0);
	cr_assert_eq(read_check(a, 1000, &a_in, 1, &why), 0, "%s", why);
	cr_assert_gt(write_until_full(a, &a_out, 2), 0);
	export(a, &blob, &len, &fd);
	cr_assert_eq(pipe2(done, O_CLOEXEC), 0);
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(done[1]);
		_exit(child(done[0], blob, len, fd, a_in, a_out));
	}
	close(done[0]);
	free(blob);
	cr_assert_eq(fdspace_close(fd), 0);
	cr_assert_eq(write(done[1], "x", 1), 1);
	close(done[1]);
	cr_assert_eq(write_all(c, 15000, &c_out, 1), 0);
	uint64_t total = a_out + 300000;
	int st;

	/* On a failure, the child's status says which end broke first. */
	if (read_check(c, total, &c_in, 2, &why)) {
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert_fail("the client's read at %llu of %llu: %s; the child: status %d",
			       (unsigned long long)c_in, (unsigned long long)total, why, st);
	}
	char b;
	cr_assert_eq(sdp_recv(c, &b, 1, 0), 0, "the child's close was not the end");
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);
	sdp_close(c);
	sdp_close(ls);
}

Test(move, refused)
{
	int ls, c, a, fd;
	void *blob;
	size_t len;

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_conn_export(ls, &blob, &len, &fd), -ENOTCONN, "a listener");
	/* Refused, the socket is as it was. */
	char b;
	cr_assert_eq(sdp_send(c, "z", 1, MSG_NOSIGNAL), 1);
	cr_assert_eq(sdp_recv(a, &b, 1, 0), 1);
	cr_assert_eq(b, 'z');

	uint8_t junk[600] = { 0 };
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(s, 0);
	cr_assert_eq(sdp_conn_import(junk, sizeof(junk), s, 0), -EINVAL);
	cr_assert_eq(fcntl(s, F_GETFD), -1, "the descriptor was not closed");
	sdp_close(a);
	sdp_close(c);
	sdp_close(ls);
}

#define BIG (4u << 20)

struct big_send {
	int sd;
	uint8_t *buf;
	ssize_t ret;
};

/* One call, larger than the zero-copy threshold: it stays in the engine
 * until the peer has read all of it. */
static void *send_big(void *arg)
{
	struct big_send *b = arg;

	b->ret = sdp_send(b->sd, b->buf, BIG, MSG_NOSIGNAL);
	return NULL;
}

/* A connection that is not quiet (a send in the engine, a zero-copy
 * source advertised) is not moved, and goes on as it was; once it has
 * moved on, it moves. */
Test(move, busy_refused_then_moved)
{
	int ls, c, a, fd, ret = 0;
	uint64_t c_in = 0;
	const char *why = "";
	void *blob;
	size_t len;
	struct big_send b = { 0 };
	pthread_t t;

	pair(&ls, &c, &a);
	b.sd = a;
	b.buf = malloc(BIG);
	cr_assert_not_null(b.buf);
	gen(b.buf, BIG, 0, 3);
	cr_assert_eq(pthread_create(&t, NULL, send_big, &b), 0);
	/* Something of it reached the client, which reads nothing yet: the
	 * call is in the engine until the client has read it all. */
	struct pollfd p = { .fd = c, .events = POLLIN };
	cr_assert_eq(sdp_poll(&p, 1, 10000), 1);
	for (int i = 0; i < 20; i++) {
		ret = sdp_conn_export(a, &blob, &len, &fd);
		cr_assert_eq(ret, -EBUSY, "round %d: %s", i, strerror(-ret));
	}
	cr_assert_eq(read_check(c, BIG, &c_in, 3, &why), 0, "%s", why);
	pthread_join(t, NULL);
	cr_assert_eq(b.ret, (ssize_t)BIG);
	free(b.buf);
	export(a, &blob, &len, &fd);
	int n = sdp_conn_import(blob, len, fd, 0);

	free(blob);
	cr_assert_geq(n, 0, "sdp_conn_import: %s", strerror(-n));
	uint64_t at = BIG;
	cr_assert_eq(write_all(n, 100000, &at, 3), 0);
	cr_assert_eq(read_check(c, 100000, &c_in, 3, &why), 0, "%s", why);
	sdp_close(n);
	sdp_close(c);
	sdp_close(ls);
}
