// SPDX-License-Identifier: BSD-2-Clause
/*
 * convert_check: converting a connected TCP socket to SDP
 * (sdp_convert_connect / sdp_convert_accept), run by convert.sh.
 *
 * Each case gets a fresh kernel TCP connection between two processes: a
 * client (the connect side) and a server (the accept side), each forked
 * before it touches the engine.  A case passes when both parts do.  Where
 * a conversion must fail, the case then streams over the TCP socket both
 * ways to prove it was left as it was; where it succeeds, checksummed data
 * goes both ways over the new SDP connection, on the transport under test.
 *
 * Some cases play the peer by hand, writing the handshake's frames
 * byte by byte as sdp/convert.h describes them (not with the engine's
 * encoder), so that they check the engine against the description.
 *
 *   convert_check [--only NAME[,NAME...]]
 * Environment: TEST_HOST (IPv4 address to use), TEST_TRANSPORT (the
 * transport the SDP connection must run on), TEST_SLOW (time factor).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sdp.h"
#include "tcp_pair.h"

static struct in_addr host;
static const char *want_transport;
static int slow = 1;
static const char *part = "main";
static int fails;

static void say(const char *fmt, ...)
{
	va_list ap;
	char buf[1024];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	printf("  convert_check: %s\n", buf);
	fflush(stdout);
}

#define FAILF(...)                                                                      \
	do {                                                                            \
		char m_[512];                                                           \
		snprintf(m_, sizeof(m_), __VA_ARGS__);                                  \
		say("%s: %s", part, m_);                                                \
		fails++;                                                                \
	} while (0)

static const char *errname(long e)
{
	static char buf[64];

	if (e >= 0) {
		snprintf(buf, sizeof(buf), "%ld", e);
		return buf;
	}
	switch (-e) {
	case EINVAL: return "EINVAL";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ECONNRESET: return "ECONNRESET";
	case EPROTO: return "EPROTO";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case ENOTCONN: return "ENOTCONN";
	case ENOTSOCK: return "ENOTSOCK";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	default:
		snprintf(buf, sizeof(buf), "errno %ld", -e);
		return buf;
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* --- the kernel TCP socket ---------------------------------------------------------- */

static int tcp_write(int fd, const void *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -errno;
		off += (size_t)n;
	}
	return 0;
}

/* Exactly len bytes, within secs (x slow): 0, or a negative errno. */
static int tcp_read(int fd, void *buf, size_t len, int secs)
{
	size_t got = 0;
	uint64_t end = now_ms() + (uint64_t)secs * 1000 * (uint64_t)slow;

	while (got < len) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		ssize_t n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	return 0;
}

/* The TCP stream still works both ways, untouched: each side sends its
 * line and reads the other's, byte for byte. */
static void stream_check(int fd, bool server, const char *when)
{
	static const char c2s[] = "client->server: the stream goes on";
	static const char s2c[] = "server->client: and back";
	const char *mine = server ? s2c : c2s, *theirs = server ? c2s : s2c;
	size_t tl = server ? sizeof(c2s) : sizeof(s2c);
	char buf[64] = { 0 };
	int r = tcp_write(fd, mine, server ? sizeof(s2c) : sizeof(c2s));

	if (!r)
		r = tcp_read(fd, buf, tl, 30);
	if (r)
		FAILF("TCP stream %s: %s", when, errname(r));
	else if (memcmp(buf, theirs, tl))
		FAILF("TCP stream %s: read \"%.*s\", not \"%s\"", when, (int)tl, buf, theirs);
}

/* --- data over the converted connection --------------------------------------------- */

static uint32_t xs_next(uint32_t *s)
{
	uint32_t x = *s;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *s = x;
}

static void fill(uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)xs_next(&seed);
}

#define XFER (4u << 20)

static int sdp_write_all(int sd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t r = sdp_send(sd, b, n, MSG_NOSIGNAL);

		if (r == -EINTR)
			continue;
		if (r <= 0)
			return r ? (int)r : -EIO;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int sdp_read_all(int sd, uint8_t *b, size_t n)
{
	while (n) {
		ssize_t r = sdp_recv(sd, b, n, 0);

		if (r == -EINTR)
			continue;
		if (r <= 0)
			return r ? (int)r : -ECONNRESET;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The converted connection: the right transport, the kept options
 * (unless the side was played by hand), and XFER bytes each way (client
 * first), checked. */
static void check_converted(int sd, int tcp_fd, bool server, bool kept)
{
	const char *tn = sdp_transport_name(sd);
	uint8_t *out = malloc(XFER), *in = malloc(XFER), *want = malloc(XFER);
	int v = 0, r;
	socklen_t l = sizeof(v);

	if (want_transport && (!tn || strcmp(tn, want_transport)))
		FAILF("converted connection runs over %s, not %s", tn ? tn : "nothing",
		      want_transport);
	if (fcntl(tcp_fd, F_GETFD) != -1 || errno != EBADF)
		FAILF("the TCP socket fd %d is still open after the conversion", tcp_fd);
	if (kept && (sdp_getsockopt(sd, IPPROTO_TCP, TCP_NODELAY, &v, &l) || !v))
		FAILF("TCP_NODELAY was not kept");
	l = sizeof(v);
	if (kept && (sdp_getsockopt(sd, SOL_SOCKET, SO_KEEPALIVE, &v, &l) || !v))
		FAILF("SO_KEEPALIVE was not kept");
	if (!out || !in || !want) {
		FAILF("out of memory");
		goto out;
	}
	fill(out, XFER, server ? 2 : 1);
	fill(want, XFER, server ? 1 : 2);
	if (server) {
		r = sdp_read_all(sd, in, XFER);
		if (!r)
			r = sdp_write_all(sd, out, XFER);
	} else {
		r = sdp_write_all(sd, out, XFER);
		if (!r)
			r = sdp_read_all(sd, in, XFER);
	}
	if (r)
		FAILF("data over the converted connection: %s", errname(r));
	else if (memcmp(in, want, XFER))
		FAILF("data over the converted connection: DATA MISMATCH");
	/* Orderly end: each side sees the other's close as end of stream. */
	sdp_shutdown(sd, SHUT_WR);
	if (!r && sdp_recv(sd, in, 1, 0) != 0)
		FAILF("no end of stream after the data");
out:
	free(out);
	free(in);
	free(want);
	sdp_close(sd);
}

static void set_opts(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

/* --- frames by hand (sdp/convert.h) --------------------------------------------------- */

/* Header: 00 'S' 'D' 'P' 'C' 'V', type, version, body length (be16), 0. */
static size_t frame(uint8_t *b, uint8_t type, uint8_t version, const uint8_t *body, uint16_t n)
{
	memcpy(b, "\0SDPCV", 6);
	b[6] = type;
	b[7] = version;
	b[8] = (uint8_t)(n >> 8);
	b[9] = (uint8_t)n;
	b[10] = b[11] = 0;
	memcpy(b + 12, body, n);
	return 12u + n;
}

enum { T_REQ = 1, T_RSP = 2, T_FIN = 3 };

/* Read one frame of the given type: its body into body (n bytes). */
static int read_frame(int fd, uint8_t type, uint8_t *body, size_t n)
{
	uint8_t h[12];
	int r = tcp_read(fd, h, sizeof(h), 30);

	if (r)
		return r;
	if (memcmp(h, "\0SDPCV", 6) || h[6] != type || (size_t)(h[8] << 8 | h[9]) != n)
		return -EPROTO;
	return tcp_read(fd, body, n, 30);
}

/* --- cases ------------------------------------------------------------------------- */

#define FINAL "FINAL STREAMING-MODE MESSAGE"
#define T_MS (10000 * slow)

/* Streaming first both ways, a final message, then the conversion. */
static void c_convert(int fd)
{
	char buf[sizeof(FINAL)];

	set_opts(fd);
	stream_check(fd, false, "before the conversion");
	int r = tcp_read(fd, buf, sizeof(FINAL), 30);

	if (r || memcmp(buf, FINAL, sizeof(FINAL))) {
		FAILF("the final streaming-mode message: %s", r ? errname(r) : "wrong bytes");
		return;
	}
	int sd = sdp_convert_connect(fd, T_MS);

	if (sd < 0) {
		FAILF("sdp_convert_connect: %s", errname(sd));
		return;
	}
	check_converted(sd, fd, false, true);
}

static void s_convert(int fd)
{
	set_opts(fd);
	stream_check(fd, true, "before the conversion");
	int sd = sdp_convert_accept(fd, FINAL, sizeof(FINAL), T_MS);

	if (sd < 0) {
		FAILF("sdp_convert_accept: %s", errname(sd));
		return;
	}
	check_converted(sd, fd, true, true);
}

/* A final message far bigger than the socket buffers: sdp_convert_accept
 * can only go on once the client has read it all, so the message is
 * wholly in the stream before the handshake's first byte. */
#define BIG_FINAL (2u << 20)

static void c_final_big(int fd)
{
	uint8_t *b = malloc(BIG_FINAL), *w = malloc(BIG_FINAL);

	set_opts(fd);
	fill(w, BIG_FINAL, 7);
	sleep_ms(300);	/* the server is blocked in its final message */
	int r = tcp_read(fd, b, BIG_FINAL, 60);

	if (r || memcmp(b, w, BIG_FINAL)) {
		FAILF("2 MiB final message: %s", r ? errname(r) : "DATA MISMATCH");
	} else {
		int sd = sdp_convert_connect(fd, T_MS);

		if (sd < 0)
			FAILF("sdp_convert_connect: %s", errname(sd));
		else
			check_converted(sd, fd, false, true);
	}
	free(b);
	free(w);
}

static void s_final_big(int fd)
{
	uint8_t *b = malloc(BIG_FINAL);

	set_opts(fd);
	fill(b, BIG_FINAL, 7);
	int sd = sdp_convert_accept(fd, b, BIG_FINAL, T_MS);

	free(b);
	if (sd < 0)
		FAILF("sdp_convert_accept: %s", errname(sd));
	else
		check_converted(sd, fd, true, true);
}

/* A peer that does not convert: it reads the request as stream data and
 * answers with its own data, which the client must find intact. */
static void c_not_converting(int fd)
{
	uint64_t t0 = now_ms();
	int sd = sdp_convert_connect(fd, T_MS);

	if (sd != -EPROTO) {
		FAILF("sdp_convert_connect against a peer that streams: %s, expected EPROTO",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
		return;
	}
	say("not-converting: EPROTO after %llu ms", (unsigned long long)(now_ms() - t0));
	stream_check(fd, false, "after the refused conversion");
}

static void s_not_converting(int fd)
{
	uint8_t req[32];
	int r = tcp_read(fd, req, sizeof(req), 30);

	if (r || memcmp(req, "\0SDPCV", 6) || req[6] != T_REQ)
		FAILF("the request as stream data: %s", r ? errname(r) : "not a REQ frame");
	stream_check(fd, true, "after the refused conversion");
}

/* A peer of another handshake version refuses with RSP failed/version. */
static void c_refused_version(int fd)
{
	int sd = sdp_convert_connect(fd, T_MS);

	if (sd != -EPROTONOSUPPORT) {
		FAILF("sdp_convert_connect refused for version: %s, expected EPROTONOSUPPORT",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	stream_check(fd, false, "after the refusal");
}

static void s_refused_version(int fd)
{
	uint8_t req[20], body[20] = { 1, 2 }, fin[4] = { 1, 0 }, b[64];
	int r = read_frame(fd, T_REQ, req, sizeof(req));

	if (r) {
		FAILF("reading the REQ: %s", errname(r));
		return;
	}
	memcpy(body + 4, req, 16);	/* status failed, reason version, nonce */
	r = tcp_write(fd, b, frame(b, T_RSP, 1, body, sizeof(body)));
	if (!r)
		r = tcp_write(fd, b, frame(b, T_FIN, 1, fin, sizeof(fin)));
	if (!r)
		r = read_frame(fd, T_FIN, fin, sizeof(fin));
	if (r)
		FAILF("the refusal's frames: %s", errname(r));
	else if (fin[0] != 1)
		FAILF("the client's FIN after a refusal says %u, not failed", fin[0]);
	stream_check(fd, true, "after the refusal");
}

/* A request of version 2: the server refuses, the stream goes on. */
static void c_new_version(int fd)
{
	uint8_t body[20] = { 0 }, rsp[20], fin[4] = { 1, 0 }, b[64];
	int r = tcp_write(fd, b, frame(b, T_REQ, 2, body, sizeof(body)));

	if (!r)
		r = read_frame(fd, T_RSP, rsp, sizeof(rsp));
	if (!r && (rsp[0] != 1 || rsp[1] != 2))
		FAILF("RSP to a version-2 request: status %u reason %u, expected 1 and 2", rsp[0],
		      rsp[1]);
	if (!r)
		r = tcp_write(fd, b, frame(b, T_FIN, 1, fin, sizeof(fin)));
	if (!r)
		r = read_frame(fd, T_FIN, fin, sizeof(fin));
	if (r)
		FAILF("the handshake of the refusal: %s", errname(r));
	stream_check(fd, false, "after the refusal");
}

static void s_new_version(int fd)
{
	int sd = sdp_convert_accept(fd, NULL, 0, T_MS);

	if (sd != -EPROTONOSUPPORT) {
		FAILF("sdp_convert_accept of a version-2 request: %s, expected EPROTONOSUPPORT",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	stream_check(fd, true, "after the refusal");
}

/* The client gives up before the server answers; the server answers
 * late, and both end up where they began. */
static void c_timeout_connect(int fd)
{
	uint64_t t0 = now_ms();
	int sd = sdp_convert_connect(fd, 300);
	uint64_t ms = now_ms() - t0;

	if (sd != -ETIMEDOUT) {
		FAILF("sdp_convert_connect with a 300 ms timeout: %s, expected ETIMEDOUT",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	} else if (ms < 300) {
		FAILF("timed out after %llu ms, before its 300 ms", (unsigned long long)ms);
	}
	stream_check(fd, false, "after the timed-out conversion");
}

static void s_timeout_connect(int fd)
{
	sleep_ms(1000);
	int sd = sdp_convert_accept(fd, NULL, 0, T_MS);

	if (sd != -ETIMEDOUT) {
		FAILF("sdp_convert_accept after the client gave up: %s, expected ETIMEDOUT",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	stream_check(fd, true, "after the timed-out conversion");
}

/* The server waits for a request that does not come. */
static void c_timeout_accept(int fd)
{
	sleep_ms(800);
	stream_check(fd, false, "after the server's timeout");
}

static void s_timeout_accept(int fd)
{
	int sd = sdp_convert_accept(fd, NULL, 0, 300);

	if (sd != -ETIMEDOUT) {
		FAILF("sdp_convert_accept with nothing coming: %s, expected ETIMEDOUT",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	stream_check(fd, true, "after the server's timeout");
}

/* Wrong calls give the documented errors and leave the socket alone. */
static void c_bad_args(int fd)
{
	int udp = socket(AF_INET, SOCK_DGRAM, 0), tcp = socket(AF_INET, SOCK_STREAM, 0), p[2];
	struct {
		const char *what;
		int got, want;
	} t[] = {
		{ "timeout 0", sdp_convert_connect(fd, 0), -EINVAL },
		{ "accept, timeout 0", sdp_convert_accept(fd, NULL, 0, 0), -EINVAL },
		{ "final message NULL of 5 bytes", sdp_convert_accept(fd, NULL, 5, 100), -EINVAL },
		{ "a UDP socket", sdp_convert_connect(udp, 100), -EOPNOTSUPP },
		{ "an unconnected TCP socket", sdp_convert_connect(tcp, 100), -ENOTCONN },
		{ "fd -1", sdp_convert_connect(-1, 100), -EBADF },
		{ "a pipe", pipe(p) ? -999 : sdp_convert_accept(p[0], NULL, 0, 100), -ENOTSOCK },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].got != t[i].want)
			FAILF("%s: %s, expected %s", t[i].what, errname(t[i].got),
			      errname(t[i].want));
	close(udp);
	close(tcp);
	close(p[0]);
	close(p[1]);
	stream_check(fd, false, "after the wrong calls");
}

static void s_bad_args(int fd)
{
	stream_check(fd, true, "after the wrong calls");
}

/* A connection to the conversion listener without the nonce is dropped;
 * the one with it is taken.  The client plays the connect side by hand. */
static void c_wrong_nonce(int fd)
{
	uint8_t nonce[16], req[20] = { 0 }, rsp[20], fin[4] = { 0 }, b[64];

	for (int i = 0; i < 16; i++)
		nonce[i] = (uint8_t)(0xa0 + i);
	memcpy(req, nonce, 16);
	int r = tcp_write(fd, b, frame(b, T_REQ, 1, req, sizeof(req)));

	if (!r)
		r = read_frame(fd, T_RSP, rsp, sizeof(rsp));
	if (r || rsp[0] != 0 || memcmp(rsp + 4, nonce, 16)) {
		FAILF("RSP: %s", r ? errname(r) : "not ok, or another nonce");
		return;
	}
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = host,
				   .sin_port = htons((uint16_t)(rsp[2] << 8 | rsp[3])) };
	int bad = sdp_socket(AF_INET, SOCK_STREAM, 0), good = sdp_socket(AF_INET, SOCK_STREAM, 0);
	uint8_t wrong[16] = { 0 }, x;

	r = sdp_connect(bad, (struct sockaddr *)&sin, sizeof(sin));
	if (!r)
		r = sdp_write_all(bad, wrong, sizeof(wrong));
	if (r) {
		FAILF("the connection with a wrong nonce: %s", errname(r));
		return;
	}
	ssize_t n = sdp_recv(bad, &x, 1, 0);

	if (n > 0)
		FAILF("the connection with a wrong nonce got data");
	sdp_close(bad);
	r = sdp_connect(good, (struct sockaddr *)&sin, sizeof(sin));
	if (!r)
		r = sdp_write_all(good, nonce, sizeof(nonce));
	if (!r)
		r = tcp_write(fd, b, frame(b, T_FIN, 1, fin, sizeof(fin)));
	if (!r)
		r = read_frame(fd, T_FIN, fin, sizeof(fin));
	if (r || fin[0] != 0) {
		FAILF("after the right nonce: %s", r ? errname(r) : "the server's FIN says failed");
		return;
	}
	close(fd);
	check_converted(good, fd, false, false);
}

static void s_wrong_nonce(int fd)
{
	set_opts(fd);
	int sd = sdp_convert_accept(fd, NULL, 0, T_MS);

	if (sd < 0)
		FAILF("sdp_convert_accept: %s", errname(sd));
	else
		check_converted(sd, fd, true, true);
}

/* A header with our magic but a body over the limit: not taken as a
 * request, not consumed; the server reads it as stream data. */
static const uint8_t oversized[12] = { 0, 'S', 'D', 'P', 'C', 'V', 1, 1, 0x10, 0, 0, 0 };

static void c_oversized(int fd)
{
	int r = tcp_write(fd, oversized, sizeof(oversized));

	if (r)
		FAILF("sending: %s", errname(r));
	stream_check(fd, false, "after the oversized frame");
}

static void s_oversized(int fd)
{
	uint8_t b[12];

	sleep_ms(200);
	int sd = sdp_convert_accept(fd, NULL, 0, T_MS);

	if (sd != -EPROTO) {
		FAILF("sdp_convert_accept of an oversized frame: %s, expected EPROTO",
		      errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	int r = tcp_read(fd, b, sizeof(b), 30);

	if (r || memcmp(b, oversized, sizeof(b)))
		FAILF("the oversized frame's bytes were not left in the stream");
	stream_check(fd, true, "after the oversized frame");
}

/* A peer that ends its stream inside a frame: the first 11 bytes of a
 * header, then shutdown.  The end must be seen at once, even with no time
 * limit (ECONNRESET, not ETIMEDOUT or a wait for ever), and the 11 bytes
 * stay in the stream; the other direction still works. */
static const uint8_t partial[11] = { 0, 'S', 'D', 'P', 'C', 'V', 1, 1, 0, 20, 0 };
static const char other_way[] = "the other way still works";

/* After the conversion ended with ECONNRESET: the partial frame is unread,
 * and a line goes the other way. */
static void partial_left(int fd, const char *who)
{
	uint8_t b[sizeof(partial)];
	int r = tcp_read(fd, b, sizeof(b), 30);

	if (r || memcmp(b, partial, sizeof(b)))
		FAILF("%s: the partial frame was not left in the stream: %s", who,
		      r ? errname(r) : "other bytes");
	r = tcp_write(fd, other_way, sizeof(other_way));
	if (r)
		FAILF("%s: writing after the failed conversion: %s", who, errname(r));
}

static void partial_sent(int fd)
{
	char b[sizeof(other_way)];
	int r = tcp_write(fd, partial, sizeof(partial));

	if (!r)
		r = shutdown(fd, SHUT_WR) ? -errno : 0;
	if (!r)
		r = tcp_read(fd, b, sizeof(b), 60);
	if (r || memcmp(b, other_way, sizeof(other_way)))
		FAILF("the peer's line after the failed conversion: %s",
		      r ? errname(r) : "other bytes");
}

static void c_partial_eof_accept(int fd)
{
	partial_sent(fd);
}

static void s_partial_eof_accept(int fd)
{
	for (int forever = 1; forever >= 0; forever--) {
		int sd = sdp_convert_accept(fd, NULL, 0, forever ? -1 : T_MS);

		if (sd != -ECONNRESET) {
			FAILF("sdp_convert_accept (%s) of a stream that ends in a frame header: "
			      "%s, expected ECONNRESET", forever ? "no time limit" : "time limit",
			      errname(sd));
			if (sd >= 0)
				sdp_close(sd);
			return;
		}
	}
	partial_left(fd, "sdp_convert_accept");
}

static void c_partial_eof_connect(int fd)
{
	int sd = sdp_convert_connect(fd, -1);

	if (sd != -ECONNRESET) {
		FAILF("sdp_convert_connect (no time limit) answered by part of a frame header, "
		      "then the end of the stream: %s, expected ECONNRESET", errname(sd));
		if (sd >= 0)
			sdp_close(sd);
		return;
	}
	partial_left(fd, "sdp_convert_connect");
}

static void s_partial_eof_connect(int fd)
{
	uint8_t req[20];
	int r = read_frame(fd, T_REQ, req, sizeof(req));

	if (r)
		FAILF("reading the REQ: %s", errname(r));
	else
		partial_sent(fd);
}

/* A frame with our magic but a type we do not know: not consumed (EPROTO),
 * the server reads it whole as stream data. */
static void c_unknown_type(int fd)
{
	uint8_t body[20] = { 1, 2, 3 }, b[32];
	int r = tcp_write(fd, b, frame(b, 9, 1, body, sizeof(body)));

	if (r)
		FAILF("sending: %s", errname(r));
	stream_check(fd, false, "after the frame of an unknown type");
}

static void s_unknown_type(int fd)
{
	uint8_t b[32], body[20] = { 1, 2, 3 }, want[32];

	frame(want, 9, 1, body, sizeof(body));
	sleep_ms(200);
	int sd = sdp_convert_accept(fd, NULL, 0, T_MS);

	if (sd != -EPROTO) {
		FAILF("sdp_convert_accept of a frame of type 9: %s, expected EPROTO", errname(sd));
		if (sd >= 0)
			sdp_close(sd);
	}
	int r = tcp_read(fd, b, sizeof(b), 30);

	if (r || memcmp(b, want, sizeof(b)))
		FAILF("the unknown frame's bytes were not left in the stream");
	stream_check(fd, true, "after the frame of an unknown type");
}

struct tcase {
	const char *name, *what;
	void (*client)(int fd);
	void (*server)(int fd);
};

static const struct tcase cases[] = {
	{ "convert", "stream both ways, final message, convert, 4 MiB each way over SDP",
	  c_convert, s_convert },
	{ "final-big", "a 2 MiB final message, wholly read before the handshake", c_final_big,
	  s_final_big },
	{ "not-converting", "the peer streams instead: EPROTO, its bytes intact",
	  c_not_converting, s_not_converting },
	{ "refused-version", "the peer refuses (version): EPROTONOSUPPORT, stream intact",
	  c_refused_version, s_refused_version },
	{ "new-version", "a version-2 request refused, stream intact", c_new_version,
	  s_new_version },
	{ "timeout-connect", "the client gives up at 300 ms, the server answers late",
	  c_timeout_connect, s_timeout_connect },
	{ "timeout-accept", "no request within 300 ms: ETIMEDOUT, stream intact",
	  c_timeout_accept, s_timeout_accept },
	{ "bad-args", "EINVAL, EOPNOTSUPP, ENOTCONN, EBADF, ENOTSOCK", c_bad_args, s_bad_args },
	{ "wrong-nonce", "a connection without the nonce dropped, the right one taken",
	  c_wrong_nonce, s_wrong_nonce },
	{ "oversized", "a frame header over the size limit is stream data", c_oversized,
	  s_oversized },
	{ "partial-eof-accept", "11 bytes of a REQ header, then EOF: ECONNRESET, bytes unread",
	  c_partial_eof_accept, s_partial_eof_accept },
	{ "partial-eof-connect", "11 bytes of an RSP header, then EOF: ECONNRESET, bytes unread",
	  c_partial_eof_connect, s_partial_eof_connect },
	{ "unknown-type", "a frame of an unknown type is stream data", c_unknown_type,
	  s_unknown_type },
};

/* --- running a case ---------------------------------------------------------------- */

static bool run_case(const struct tcase *tc)
{
	int a, b, r = tcp_pair(host, &a, &b);

	if (r) {
		say("FAIL %s: TCP connection: %s", tc->name, errname(r));
		return false;
	}
	bool ok = tcp_pair_run(a, b, tc->client, tc->server, (unsigned)(120 * slow), &part, &fails,
			       "convert_check");

	say("%s %s: %s", ok ? "ok  " : "FAIL", tc->name, tc->what);
	return ok;
}

static bool selected(const char *name, const char *only)
{
	if (!only)
		return true;
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", only);
	for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
		if (!strcmp(t, name))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	const char *only = NULL, *h = getenv("TEST_HOST"), *s = getenv("TEST_SLOW");
	int nfail = 0, n = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "usage: convert_check [--only NAME[,NAME...]]\n");
			return 2;
		}
	}
	if (!h || !*h)
		h = "127.0.0.1";
	if (inet_pton(AF_INET, h, &host) != 1) {
		fprintf(stderr, "convert_check: TEST_HOST %s is not an IPv4 address\n", h);
		return 2;
	}
	if (s && atoi(s) > 0)
		slow = atoi(s);
	want_transport = getenv("TEST_TRANSPORT");
	signal(SIGPIPE, SIG_IGN);
	say("host %s, transport %s, time limits x%d", h, want_transport ? want_transport : "any",
	    slow);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!selected(cases[i].name, only))
			continue;
		n++;
		if (!run_case(&cases[i]))
			nfail++;
	}
	say("%d case(s), %d failure(s): %s", n, nfail, nfail ? "FAIL" : "PASS");
	return nfail ? 1 : (n ? 0 : 2);
}
