/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * I/O checks: read/write, readv/writev, MSG_PEEK, MSG_WAITALL,
 * MSG_DONTWAIT, sendto/recvfrom on a connected socket, sendmsg/recvmsg,
 * sends after the peer closed (EPIPE, SIGPIPE), shutdown(SHUT_WR), close
 * with unread data (reset).  Bulk transfers are in checks_xfer.c.
 */

#include "util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int check_read_write(void)
{
	struct pair p = { -1, -1 };
	char out[1000], in[1000];
	size_t got = 0;
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	pattern_fill(1, 0, out, sizeof(out));
	n = write(p.c, out, sizeof(out));
	note("write=%zd", n);
	if (n != (ssize_t)sizeof(out))
		FAIL("write: %s", errname(errno));
	while (got < sizeof(in)) {
		if (wait_fd(p.s, POLLIN, 10000) <= 0)
			FAIL("no data within 10 s");
		n = read(p.s, in + got, sizeof(in) - got);
		if (n <= 0)
			FAIL("read: %zd %s", n, errname(errno));
		got += (size_t)n;
	}
	if (pattern_check(1, 0, in, sizeof(in)) >= 0)
		FAIL("data differs");
	n = write(p.s, "r", 1);
	if (n != 1 || read(p.c, in, 1) != 1 || in[0] != 'r')
		FAIL("reply: %s", errname(errno));
	note("data ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* readv until the iovecs are full (advancing them over partial reads). */
static int readv_all(int fd, struct iovec *iov, int cnt, int ms)
{
	int64_t end = now_ms() + ms;

	while (cnt > 0) {
		ssize_t n;

		if (wait_fd(fd, POLLIN, (int)(end - now_ms())) <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = readv(fd, iov, cnt);
		if (n == 0) {
			errno = 0;
			return -1;
		}
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int check_readv_writev(void)
{
	struct pair p = { -1, -1 };
	char a[] = "abc", b[1000], c[] = "xyz!";
	char r1[10], r2[600], r3[sizeof(a) + sizeof(b) + sizeof(c) - 610];
	char all[sizeof(a) + sizeof(b) + sizeof(c)], in[sizeof(all)];
	struct iovec wv[3] = { { a, sizeof(a) }, { b, sizeof(b) }, { c, sizeof(c) } };
	struct iovec rv[3] = { { r1, sizeof(r1) }, { r2, sizeof(r2) },
			       { r3, sizeof(r3) } };
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	pattern_fill(2, 0, b, sizeof(b));
	memcpy(all, a, sizeof(a));
	memcpy(all + sizeof(a), b, sizeof(b));
	memcpy(all + sizeof(a) + sizeof(b), c, sizeof(c));
	n = writev(p.c, wv, 3);
	note("writev=%zd", n);
	if (n != (ssize_t)sizeof(all))
		FAIL("writev: %s", errname(errno));
	if (readv_all(p.s, rv, 3, 10000) < 0)
		FAIL("readv: %s", errno ? errname(errno) : "EOF");
	memcpy(in, r1, sizeof(r1));
	memcpy(in + sizeof(r1), r2, sizeof(r2));
	memcpy(in + sizeof(r1) + sizeof(r2), r3, sizeof(r3));
	if (memcmp(in, all, sizeof(all)) != 0)
		FAIL("readv data differs");
	note("readv data ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_msg_peek(void)
{
	struct pair p = { -1, -1 };
	char buf[16];
	ssize_t n = 0;
	int rc = -1, i;

	if (pair_open(&p) < 0)
		goto out;
	if (write_all(p.c, "peekdata", 8, 10000) < 0)
		FAIL_ERRNO("send");
	/* wait until all 8 bytes are there to be peeked */
	for (i = 0; i < 200; i++) {
		if (wait_fd(p.s, POLLIN, 10000) <= 0)
			FAIL("no data within 10 s");
		n = recv(p.s, buf, sizeof(buf), MSG_PEEK);
		if (n < 0)
			FAIL_ERRNO("recv(MSG_PEEK)");
		if (n >= 8)
			break;
		sleep_ms(10);
	}
	note("peek=%zd", n);
	if (n != 8 || memcmp(buf, "peekdata", 8) != 0)
		FAIL("peek gave wrong data");
	memset(buf, 0, sizeof(buf));
	n = recv(p.s, buf, 4, MSG_PEEK);
	note("peek4=%zd", n);
	if (n != 4 || memcmp(buf, "peek", 4) != 0)
		FAIL("second peek gave wrong data");
	memset(buf, 0, sizeof(buf));
	n = recv(p.s, buf, sizeof(buf), 0);
	note("recv=%zd", n);
	if (n != 8 || memcmp(buf, "peekdata", 8) != 0)
		FAIL("recv after peek gave wrong data");
	n = recv(p.s, buf, sizeof(buf), MSG_DONTWAIT | MSG_PEEK);
	note("empty-peek=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("peek on an empty socket: expected EAGAIN");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

struct pieces_arg {
	int fd;
	int err;
};

static void *send_pieces(void *v)
{
	struct pieces_arg *a = v;
	char buf[1000];
	int i;

	for (i = 0; i < 3; i++) {
		sleep_ms(30);
		pattern_fill(3, (uint64_t)i * sizeof(buf), buf, sizeof(buf));
		if (write_all(a->fd, buf, sizeof(buf), 10000) < 0) {
			a->err = errno ? errno : -1;
			break;
		}
	}
	return NULL;
}

static int check_msg_waitall(void)
{
	struct pair p = { -1, -1 };
	struct pieces_arg arg = { -1, 0 };
	pthread_t t;
	int started = 0, rc = -1;
	char buf[3000];
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	arg.fd = p.c;
	if (pthread_create(&t, NULL, send_pieces, &arg) != 0)
		FAIL("pthread_create");
	started = 1;
	n = recv(p.s, buf, sizeof(buf), MSG_WAITALL);
	note("recv=%zd", n);
	if (n != (ssize_t)sizeof(buf))
		FAIL("MSG_WAITALL returned %zd (%s)", n, errname(errno));
	if (pattern_check(3, 0, buf, sizeof(buf)) >= 0)
		FAIL("data differs");
	rc = 0;
out:
	if (started)
		pthread_join(t, NULL);
	if (arg.err)
		rc = fail("sender: %s", errname(arg.err));
	pair_close(&p);
	return rc;
}

static int check_dontwait_eagain(void)
{
	struct pair p = { -1, -1 };
	char buf[8];
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	n = recv(p.s, buf, sizeof(buf), MSG_DONTWAIT);
	note("recv=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
		FAIL("expected EAGAIN");
	n = send(p.c, "abc", 3, MSG_DONTWAIT);
	note("send=%zd", n);
	if (n != 3)
		FAIL("send(MSG_DONTWAIT): %s", errname(errno));
	if (read_exact(p.s, buf, 3, 10000) < 0 || memcmp(buf, "abc", 3) != 0)
		FAIL("data: %s", errname(errno));
	n = recv(p.s, buf, sizeof(buf), MSG_DONTWAIT);
	note("recv=%s", n < 0 ? errname(errno) : "data");
	if (n >= 0 || errno != EAGAIN)
		FAIL("expected EAGAIN after draining");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_sendto_connected(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in peer, other;
	socklen_t len = sizeof(peer);
	int holder = -1, rc = -1;
	char buf[8];
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	if (getpeername(p.c, (struct sockaddr *)&peer, &len) < 0)
		FAIL_ERRNO("getpeername");
	if (closed_port(&other, &holder) < 0)
		goto out;
	n = sendto(p.c, "ab", 2, 0, NULL, 0);
	note("null=%s", n == 2 ? "2" : errname(errno));
	if (n != 2)
		FAIL("sendto(NULL)");
	n = sendto(p.c, "cd", 2, 0, (struct sockaddr *)&peer, sizeof(peer));
	note("peer=%s", n == 2 ? "2" : errname(errno));
	if (n != 2)
		FAIL("sendto(peer address)");
	n = sendto(p.c, "ef", 2, 0, (struct sockaddr *)&other, sizeof(other));
	note("other=%s", n == 2 ? "2" : errname(errno));
	if (n != 2)
		FAIL("sendto(another address)");
	if (read_exact(p.s, buf, 6, 10000) < 0)
		FAIL("read: %s", errno ? errname(errno) : "EOF");
	if (memcmp(buf, "abcdef", 6) != 0)
		FAIL("peer got wrong data");
	note("data ok");
	rc = 0;
out:
	xclose(&holder);
	pair_close(&p);
	return rc;
}

static int check_recvfrom_addr(void)
{
	struct pair p = { -1, -1 };
	struct sockaddr_in from;
	socklen_t len = sizeof(from);
	char buf[8];
	ssize_t n;
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (write_all(p.s, "hello", 5, 10000) < 0)
		FAIL_ERRNO("send");
	if (wait_fd(p.c, POLLIN, 10000) <= 0)
		FAIL("no data within 10 s");
	memset(&from, 0xa5, sizeof(from));
	n = recvfrom(p.c, buf, 5, MSG_WAITALL, (struct sockaddr *)&from, &len);
	note("recvfrom=%zd addrlen=%u", n, (unsigned)len);
	if (n != 5 || memcmp(buf, "hello", 5) != 0)
		FAIL("recvfrom: %s", errname(errno));
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_sendmsg_recvmsg(void)
{
	struct pair p = { -1, -1 };
	char a[] = "one-", b[3000], c[] = "-three";
	char r1[7], r2[2000], r3[sizeof(a) + sizeof(b) + sizeof(c) - 2007];
	struct iovec wv[3] = { { a, sizeof(a) }, { b, sizeof(b) }, { c, sizeof(c) } };
	struct iovec rv[3] = { { r1, sizeof(r1) }, { r2, sizeof(r2) },
			       { r3, sizeof(r3) } };
	struct msghdr m;
	size_t total = sizeof(a) + sizeof(b) + sizeof(c), got = 0;
	char all[sizeof(a) + sizeof(b) + sizeof(c)], in[sizeof(all)];
	int rc = -1, first = 1;
	ssize_t n;

	if (pair_open(&p) < 0)
		goto out;
	pattern_fill(4, 0, b, sizeof(b));
	memcpy(all, a, sizeof(a));
	memcpy(all + sizeof(a), b, sizeof(b));
	memcpy(all + sizeof(a) + sizeof(b), c, sizeof(c));
	memset(&m, 0, sizeof(m));
	m.msg_iov = wv;
	m.msg_iovlen = 3;
	n = sendmsg(p.c, &m, 0);
	note("sendmsg=%zd", n);
	if (n != (ssize_t)total)
		FAIL("sendmsg: %s", errname(errno));
	while (got < total) {
		struct iovec *iv = rv;
		int cnt = 3;
		size_t skip = got;

		/* the part of rv not yet filled */
		while (skip >= iv->iov_len) {
			skip -= iv->iov_len;
			iv++;
			cnt--;
		}
		iv->iov_base = (char *)iv->iov_base + skip;
		iv->iov_len -= skip;
		if (wait_fd(p.s, POLLIN, 10000) <= 0)
			FAIL("no data within 10 s");
		memset(&m, 0, sizeof(m));
		m.msg_iov = iv;
		m.msg_iovlen = (size_t)cnt;
		m.msg_flags = -1;
		n = recvmsg(p.s, &m, 0);
		iv->iov_base = (char *)iv->iov_base - skip;
		iv->iov_len += skip;
		if (n <= 0)
			FAIL("recvmsg: %zd %s", n, errname(errno));
		if (first)
			note("msg_flags=%d msg_namelen=%u", m.msg_flags,
			     (unsigned)m.msg_namelen);
		first = 0;
		got += (size_t)n;
	}
	memcpy(in, r1, sizeof(r1));
	memcpy(in + sizeof(r1), r2, sizeof(r2));
	memcpy(in + sizeof(r1) + sizeof(r2), r3, sizeof(r3));
	if (memcmp(in, all, sizeof(all)) != 0)
		FAIL("recvmsg data differs");
	note("data ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* The peer closed (no unread data): send until an error.  The first
 * send goes out and draws a reset; a later one fails with EPIPE (or
 * ECONNRESET, both are Linux depending on timing). */
static int sends_after_close(int with_nosignal)
{
	struct pair p = { -1, -1 };
	char buf[100] = { 0 };
	ssize_t n = 0;
	int rc = -1, i, e = 0;

	if (pair_open(&p) < 0)
		goto out;
	sigpipe_count();
	xclose(&p.s);
	if (wait_eof(p.c, 10000) < 0)
		FAIL("no EOF after the peer closed: %s", errname(errno));
	note("EOF");
	for (i = 0; i < 50; i++) {
		n = send(p.c, buf, sizeof(buf), with_nosignal ? MSG_NOSIGNAL : 0);
		if (n < 0) {
			e = errno;
			break;
		}
		sleep_ms(10);
	}
	if (n >= 0)
		FAIL("50 sends after the peer closed all succeeded");
	note("%s", e == EPIPE || e == ECONNRESET ? "EPIPE_or_ECONNRESET"
						  : errname(e));
	if (e != EPIPE && e != ECONNRESET)
		FAIL("expected EPIPE or ECONNRESET");
	n = send(p.c, buf, sizeof(buf), with_nosignal ? MSG_NOSIGNAL : 0);
	note("then=%s", n < 0 ? errname(errno) : "sent");
	if (n >= 0 || errno != EPIPE)
		FAIL("a send after the error: expected EPIPE");
	if (with_nosignal) {
		note("sigpipe=%d", sigpipe_seen);
		if (sigpipe_seen)
			FAIL("SIGPIPE despite MSG_NOSIGNAL");
	} else {
		note("%s", sigpipe_seen > 0 ? "sigpipe>0" : "sigpipe=0");
		if (!sigpipe_seen)
			FAIL("no SIGPIPE");
	}
	rc = 0;
out:
	sigpipe_ignore();
	pair_close(&p);
	return rc;
}

static int check_nosignal_epipe(void)
{
	return sends_after_close(1);
}

static int check_sigpipe(void)
{
	return sends_after_close(0);
}

static int check_shutdown_wr(void)
{
	struct pair p = { -1, -1 };
	char buf[8], pb[96];
	ssize_t n;
	int rc = -1, r;

	if (pair_open(&p) < 0)
		goto out;
	if (shutdown(p.c, SHUT_WR) < 0)
		FAIL_ERRNO("shutdown(SHUT_WR)");
	r = wait_fd(p.s, POLLIN | POLLRDHUP | POLLOUT, 10000);
	/* POLLOUT comes at once: wait for the FIN itself */
	{
		int64_t end = now_ms() + 10000;

		while (r > 0 && !(r & POLLRDHUP) && now_ms() < end) {
			sleep_ms(5);
			r = wait_fd(p.s, POLLIN | POLLRDHUP | POLLOUT, 1000);
		}
	}
	note("peer:%s", r < 0 ? errname(errno) : pollname(r, pb, sizeof(pb)));
	if (r <= 0 || !(r & POLLRDHUP))
		FAIL("no POLLRDHUP at the peer");
	n = read(p.s, buf, sizeof(buf));
	note("read=%s", n == 0 ? "EOF" : n < 0 ? errname(errno) : "data");
	if (n != 0)
		FAIL("expected EOF");
	if (write_all(p.s, "back", 4, 10000) < 0)
		FAIL("peer write after our SHUT_WR: %s", errname(errno));
	if (read_exact(p.c, buf, 4, 10000) < 0 || memcmp(buf, "back", 4) != 0)
		FAIL("read after SHUT_WR: %s", errno ? errname(errno) : "EOF");
	note("other-direction ok");
	n = send(p.c, "x", 1, MSG_NOSIGNAL);
	note("send=%s", n < 0 ? errname(errno) : "sent");
	if (n >= 0 || errno != EPIPE)
		FAIL("send after SHUT_WR: expected EPIPE");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_close_unread(void)
{
	struct pair p = { -1, -1 };
	char buf[100] = { 0 }, pb[96];
	ssize_t n;
	int rc = -1, r;

	if (pair_open(&p) < 0)
		goto out;
	if (write_all(p.c, buf, sizeof(buf), 10000) < 0)
		FAIL_ERRNO("send");
	if (wait_fd(p.s, POLLIN, 10000) <= 0)
		FAIL("no data at the peer");
	xclose(&p.s); /* with 100 bytes unread: a reset */
	r = wait_fd(p.c, POLLIN, 10000);
	note("%s", r < 0 ? errname(errno) : pollname(r, pb, sizeof(pb)));
	if (r <= 0)
		FAIL("no event after the peer's reset");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : n == 0 ? "EOF" : "data");
	if (n >= 0 || errno != ECONNRESET)
		FAIL("expected ECONNRESET");
	n = recv(p.c, buf, sizeof(buf), 0);
	note("recv=%s", n < 0 ? errname(errno) : n == 0 ? "EOF" : "data");
	if (n != 0)
		FAIL("expected EOF after the reset was reported");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

const struct check checks_io[] = {
	{ "read_write", check_read_write, "read/write both ways" },
	{ "readv_writev", check_readv_writev, "writev/readv with 3 iovecs" },
	{ "msg_peek", check_msg_peek, "recv MSG_PEEK twice, then recv" },
	{ "msg_waitall", check_msg_waitall,
	  "recv MSG_WAITALL over data sent in 3 pieces" },
	{ "dontwait_eagain", check_dontwait_eagain,
	  "MSG_DONTWAIT on an empty socket: EAGAIN" },
	{ "sendto_connected", check_sendto_connected,
	  "sendto NULL / peer / other address on a connected socket" },
	{ "recvfrom_addr", check_recvfrom_addr,
	  "recvfrom with an address buffer: data, addrlen" },
	{ "sendmsg_recvmsg", check_sendmsg_recvmsg,
	  "sendmsg/recvmsg with 3 iovecs, msg_name NULL" },
	{ "nosignal_epipe", check_nosignal_epipe,
	  "send MSG_NOSIGNAL after the peer closed: EPIPE, no SIGPIPE" },
	{ "sigpipe", check_sigpipe,
	  "send after the peer closed: EPIPE and SIGPIPE" },
	{ "shutdown_wr", check_shutdown_wr,
	  "SHUT_WR: peer POLLRDHUP and EOF, other direction works, EPIPE" },
	{ "close_unread", check_close_unread,
	  "close with unread data: peer ECONNRESET then EOF" },
	{ NULL, NULL, NULL },
};
