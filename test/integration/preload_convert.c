// SPDX-License-Identifier: BSD-2-Clause
/*
 * preload_convert: a TCP connection converted to SDP in place under the
 * preload, with nothing but libc calls (setsockopt(SOL_SDP,
 * SDP_CONVERT_*), then the same fd).  Run by preload_convert.sh under a
 * policy that keeps every connection on TCP, so the connection starts
 * native.  Not linked with the engine: sdp.h only for the constants.
 *
 * Cases, each on its own TCP connection between a forked client and
 * server:
 *   convert      the server's final message, both convert (the client's
 *                fd non-blocking, which it must stay; the server's in an
 *                epoll set, which must report the client's data on the
 *                converted connection); before, SOL_SDP
 *                options are not the socket's, after they are; 4 MiB each
 *                way with send/recv and poll on the same fd; converting
 *                again is EISCONN
 *   refused      the peer reads the request as data and answers with its
 *                own: EPROTO, and the TCP stream works both ways
 *   bad-arg      a wrong option length: EINVAL, nothing changed
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sdp.h"
#include "tcp_pair.h"

static struct in_addr host;
static const char *part = "main";
static int fails;

static void failf(const char *fmt, ...)
{
	va_list ap;
	char buf[512];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	printf("  preload_convert: %s: %s\n", part, buf);
	fflush(stdout);
	fails++;
}

static int write_all(int fd, const void *b, size_t n)
{
	while (n) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b = (const char *)b + r;
		n -= (size_t)r;
	}
	return 0;
}

static int read_all(int fd, void *b, size_t n)
{
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (poll(&pf, 1, 60000) != 1)
			return -1;
		ssize_t r = recv(fd, b, n, 0);

		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			return -1;
		b = (char *)b + r;
		n -= (size_t)r;
	}
	return 0;
}

static void stream_check(int fd, bool server)
{
	char buf[8];
	const char *mine = server ? "S-to-C!" : "C-to-S!", *theirs = server ? "C-to-S!" : "S-to-C!";

	if (write_all(fd, mine, 8) || read_all(fd, buf, 8) || memcmp(buf, theirs, 8))
		failf("the TCP stream does not work both ways any more");
}

/* Is fd an SDP socket?  Only SDP answers SOL_SDP options. */
static bool is_sdp(int fd)
{
	int v;
	socklen_t l = sizeof(v);

	return getsockopt(fd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l) == 0;
}

#define FINAL "last words over TCP"
#define XFER (4u << 20)

static void fill(uint8_t *b, size_t n, uint32_t x)
{
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (uint8_t)x;
	}
}

/*
 * After the conversion: 4 MiB each way (client first), checked; then the
 * client says it has read everything, and only then the server ends (the
 * client waits for that, so that its word is not lost either).  Each
 * part ends with _exit() (tcp_pair.c), which skips libsdp's exit linger
 * (sdp/progress.c): a server that left at once lost the tail of its 4 MiB
 * still waiting for the client's credits, and the client saw a reset (on
 * shm in 1 run of 4 at load 4; doc/fork.md, "close()").
 */
static void transfer(int fd, bool server)
{
	uint8_t *out = malloc(XFER), *in = malloc(XFER), *want = malloc(XFER), done = 'D';
	int r;

	fill(out, XFER, server ? 2 : 1);
	fill(want, XFER, server ? 1 : 2);
	if (server)
		r = read_all(fd, in, XFER) || write_all(fd, out, XFER) || read_all(fd, &done, 1);
	else
		r = write_all(fd, out, XFER) || read_all(fd, in, XFER) || write_all(fd, &done, 1);
	if (!r && !server) {
		/* The server's end: EOF, or a reset (it left by _exit). */
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		while (poll(&pf, 1, 60000) == 1 && recv(fd, &done, 1, 0) > 0)
			;
	}
	if (r)
		failf("transfer over the converted fd: %s", strerror(errno));
	else if (memcmp(in, want, XFER))
		failf("transfer over the converted fd: DATA MISMATCH");
	free(out);
	free(in);
	free(want);
}

static void c_convert(int fd)
{
	char buf[sizeof(FINAL)];
	struct sdp_convert_arg a = { .timeout_ms = 20000 };

	if (is_sdp(fd))
		failf("the connection is SDP before the conversion: the policy should keep it TCP");
	if (read_all(fd, buf, sizeof(buf)) || memcmp(buf, FINAL, sizeof(buf))) {
		failf("the final message did not arrive");
		return;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a))) {
		failf("SDP_CONVERT_CONNECT: %s", strerror(errno));
		return;
	}
	if (!(fcntl(fd, F_GETFL) & O_NONBLOCK))
		failf("O_NONBLOCK was lost in the conversion");
	if (!is_sdp(fd))
		failf("the fd does not answer SOL_SDP options after the conversion");
	if (setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a)) == 0 || errno != EISCONN)
		failf("converting again: %s, expected EISCONN", strerror(errno));
	transfer(fd, false);
}

static void s_convert(int fd)
{
	struct sdp_convert_arg a = { .timeout_ms = 20000, .final_msg = FINAL,
				     .final_len = sizeof(FINAL) };
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd }, got;
	int ep = epoll_create1(0);

	/* In an epoll set before, still there after. */
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
		failf("epoll: %s", strerror(errno));
	if (setsockopt(fd, SOL_SDP, SDP_CONVERT_ACCEPT, &a, sizeof(a))) {
		failf("SDP_CONVERT_ACCEPT: %s", strerror(errno));
		return;
	}
	if (!is_sdp(fd))
		failf("the fd does not answer SOL_SDP options after the conversion");
	int n = epoll_wait(ep, &got, 1, 60000);

	if (n != 1 || got.data.fd != fd || !(got.events & EPOLLIN))
		failf("epoll_wait after the conversion: %d event(s), not the converted fd readable",
		      n);
	close(ep);
	transfer(fd, true);
}

static void c_refused(int fd)
{
	struct sdp_convert_arg a = { .timeout_ms = 20000 };

	if (setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a)) == 0 || errno != EPROTO)
		failf("converting with a peer that streams: %s, expected EPROTO", strerror(errno));
	if (is_sdp(fd))
		failf("the fd is SDP after a failed conversion");
	stream_check(fd, false);
}

static void s_refused(int fd)
{
	uint8_t req[32];

	if (read_all(fd, req, sizeof(req)) || memcmp(req, "\0SDPCV", 6))
		failf("the request did not arrive as data");
	stream_check(fd, true);
}

static void c_bad_arg(int fd)
{
	struct sdp_convert_arg a = { .timeout_ms = 1000 };

	if (setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a) - 1) == 0 || errno != EINVAL)
		failf("a short option: %s, expected EINVAL", strerror(errno));
	stream_check(fd, false);
}

static void s_bad_arg(int fd)
{
	stream_check(fd, true);
}

static const struct {
	const char *name;
	void (*client)(int), (*server)(int);
} cases[] = {
	{ "convert", c_convert, s_convert },
	{ "refused", c_refused, s_refused },
	{ "bad-arg", c_bad_arg, s_bad_arg },
};

int main(void)
{
	const char *h = getenv("TEST_HOST");
	int nfail = 0;

	if (inet_pton(AF_INET, h && *h ? h : "127.0.0.1", &host) != 1)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int a, b, r = tcp_pair(host, &a, &b);

		if (r) {
			printf("  preload_convert: FAIL %s: TCP connection: %s\n", cases[i].name,
			       strerror(-r));
			nfail++;
			continue;
		}
		bool ok = tcp_pair_run(a, b, cases[i].client, cases[i].server, 120, &part, &fails,
				       "preload_convert");

		printf("  preload_convert: %s %s\n", ok ? "ok  " : "FAIL", cases[i].name);
		nfail += !ok;
	}
	printf("  preload_convert: %d failure(s)\n", nfail);
	return nfail ? 1 : 0;
}
