/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sdp_bench: SDP (over whatever transport the engine picks, tcp-fallback on
 * a machine without RDMA) against the kernel's TCP on loopback, side by
 * side:
 *
 *   - streaming throughput with writes of 64 B, 4 KiB, 64 KiB and 1 MiB
 *     (each for a fixed duration; the receiver reads in 1 MiB calls and
 *     reports the byte count, so the time includes draining);
 *   - ping-pong latency with 1-byte and 64-byte requests echoed back
 *     (median and 99th percentile of the round trip).
 *
 * With --zcopy, instead, zero copy against Bcopy: streaming with writes of
 * 64 KiB to 16 MiB, the receiver reading with a buffer as large as the
 * write (so that a zero-copy read can land straight in it, and so that
 * its recv() may advertise the buffer for the sender to write into), for
 * SDP with SDP_ZCOPY_THRESH 0 on the sending socket (Bcopy), SDP with the
 * threshold at 64 KiB (Zcopy) and the kernel's TCP.  Per size: Gbit/s and
 * CPU seconds per GiB moved (user + sys of both processes, from getrusage
 * around the transfer; the server child measures its own and reports it),
 * the Zcopy/Bcopy ratios, and the deltas of the engine's zero-copy
 * counters, which show how the bytes really moved: RDMA-read by the
 * receiver (Read Zcopy), RDMA-written into its advertised buffer by the
 * sender (Write Zcopy, once the receiver asked for Pipelined mode), or
 * copied (Bcopy).  On a transport without RDMA "Zcopy" is Bcopy too and
 * says so there.
 *
 * With --rr, instead, request/response turns: the client sends a 64-byte
 * request, the server answers with a reply of SIZE bytes (4 KiB to 1 MiB),
 * which the client reads whole with one blocking recv(MSG_WAITALL) into a
 * buffer of the reply's size, for --duration after 100 unmeasured turns.
 * Columns: the kernel's TCP, SDP Bcopy (SDP_ZCOPY_THRESH=0), SDP zero copy
 * without Transaction mode (SDP_TRANS_HOLD_US=0) and SDP with it (the
 * default: the request rides on the SinkAvail of the recv() that waits for
 * the reply, and the reply is RDMA-written into that buffer).  Per size:
 * turns/s, mean, p50 and p99 turn latency, CPU microseconds per turn (both
 * processes), ratios against Bcopy, and per SDP run the counters that show
 * which path the turns took.  trans_hold_us is read from the environment
 * once per process, so every (column, size) runs in a fresh pair of
 * processes forked from a parent that never starts the engine, with the
 * column's SDP_* variables set before the engine reads them.
 *
 * Two processes: a server child forked before anything else (so it never
 * inherits the engine's threads) and the client in the parent, which tells
 * the child over a pipe what the next connection is for.  Timings are
 * reported, never judged: the exit status is 0 unless something failed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <endian.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sdp.h"
#include "../tools/xfer.h"

#define MAX_SIZES 16
#define SERVER_BUF (1u << 20)
#define MAX_PINGS 1000000

enum { API_TCP, API_SDP, API_COUNT };
/* KIND_BULK: a stream read in calls of the write size, with CPU time and
 * counters measured around it (the --zcopy section).  KIND_RR: request /
 * response turns, RR_REQ bytes in, `size` bytes out (the --rr section). */
enum { KIND_STREAM = 1, KIND_PINGPONG = 2, KIND_BULK = 3, KIND_RR = 4 };

#define RR_REQ 64
/* Turns before the measured ones: the modes settle (Pipelined, then
 * Transaction after two turns) and caches warm. */
#define RR_WARM 100

static const struct xsock_ops *const apis[API_COUNT] = { &xsock_tcp, &xsock_sdp };

struct cmd {
	uint32_t api;
	uint32_t kind;
	uint32_t size;
};

/* Server to client after each connection, over the result pipe (one write,
 * well under PIPE_BUF).  cpu_ns and stats are filled for KIND_BULK and
 * KIND_RR only (for KIND_RR, over the turns after the first RR_WARM). */
struct reply {
	int32_t ret;
	uint32_t pad;
	uint64_t cpu_ns;		/* the server's user + sys over the transfer */
	struct sdp_stats stats;		/* its engine counters' deltas over it */
};

static double duration_s = 1.5;
static size_t stream_sizes[MAX_SIZES] = { 64, 4096, 65536, 1u << 20 };
static int n_stream_sizes = 4;
static size_t lat_sizes[MAX_SIZES] = { 1, 64 };
static int n_lat_sizes = 2;
static size_t zc_sizes[MAX_SIZES] = { 64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20 };
static int n_zc_sizes = 5;
static size_t rr_sizes[MAX_SIZES] = { 4096, 64u << 10, 256u << 10, 1u << 20 };
static int n_rr_sizes = 4;
/* The Zcopy column's threshold on the sending socket; Bcopy's is 0.  With
 * --rr, SDP_ZCOPY_THRESH of both ends of the zero-copy columns. */
static int zc_thresh = 65536;
/* --rr: SDP_TRANS_HOLD_US of the Transaction column (NULL: the engine's
 * default, whatever the environment says). */
static const char *trans_hold_us;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sdp_bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* User + sys time of the whole process (every engine thread included). */
static uint64_t cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

/* d = b - a, field by field: every counter is a uint64_t. */
static void stats_delta(struct sdp_stats *d, const struct sdp_stats *a,
			const struct sdp_stats *b)
{
	_Static_assert(sizeof(struct sdp_stats) % sizeof(uint64_t) == 0,
		       "struct sdp_stats holds uint64_t counters only");
	const uint64_t *x = (const uint64_t *)a, *y = (const uint64_t *)b;
	uint64_t *o = (uint64_t *)d;

	for (size_t i = 0; i < sizeof(*d) / sizeof(uint64_t); i++)
		o[i] = y[i] - x[i];
}

static void on_alarm(int sig)
{
	static const char m[] = "sdp_bench: a measurement made no progress: giving up\n";

	(void)sig;
	(void)!write(STDERR_FILENO, m, sizeof(m) - 1);
	_exit(1);
}

/* Both ends: no Nagle, so the latency test measures the stack. */
static void set_nodelay(const struct xsock_ops *o, int sd)
{
	int one = 1;

	(void)o->setsockopt(sd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* --- server child ------------------------------------------------------- */

/* Read sd in calls of `size` bytes until EOF, then answer with the byte
 * count (8 B, big-endian). */
static int drain_and_count(const struct xsock_ops *o, int sd, uint8_t *buf, size_t size)
{
	uint64_t total = 0, be;

	for (;;) {
		ssize_t n = o->recv(sd, buf, size, 0);

		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		total += (uint64_t)n;
	}
	be = htobe64(total);
	ssize_t w = xfer_send_all(o, sd, &be, sizeof(be), -1);

	return w < 0 ? (int)w : 0;
}

static int serve_stream(const struct xsock_ops *o, int sd, uint8_t *buf)
{
	return drain_and_count(o, sd, buf, SERVER_BUF);
}

/*
 * Reads of exactly the write size, so that the engine may place a
 * zero-copy read straight into buf; the clock and counters run from the
 * accepted connection to the byte count sent back, the span of the
 * client's own measurement.
 */
static int serve_bulk(const struct xsock_ops *o, int sd, uint8_t *buf, size_t size,
		      struct reply *r)
{
	struct sdp_stats s0, s1;
	uint64_t c0 = cpu_ns();

	sdp_get_stats(&s0);
	int ret = drain_and_count(o, sd, buf, size);

	r->cpu_ns = cpu_ns() - c0;
	sdp_get_stats(&s1);
	stats_delta(&r->stats, &s0, &s1);
	return ret;
}

static int serve_pingpong(const struct xsock_ops *o, int sd, uint8_t *buf, size_t size)
{
	for (;;) {
		ssize_t n = xfer_recv_all(o, sd, buf, size, -1);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return 0;
		if ((size_t)n != size)
			return -EPROTO;
		n = xfer_send_all(o, sd, buf, size, -1);
		if (n < 0)
			return (int)n;
	}
}

/*
 * The turn number the client put in the first 8 bytes of its request goes
 * back in the first and the last 8 bytes of the reply, so that the client
 * sees every reply land whole and in order, whichever way it came.
 */
static void rr_stamp(uint8_t *reply, size_t size, const uint8_t *req)
{
	memcpy(reply, req, 8);
	memcpy(reply + size - 8, req, 8);
}

static int serve_rr(const struct xsock_ops *o, int sd, uint8_t *rbuf, size_t size,
		    struct reply *r)
{
	uint8_t req[RR_REQ];
	struct sdp_stats s0 = { 0 }, s1;
	uint64_t c0 = 0;

	for (unsigned long turn = 0;; turn++) {
		if (turn == RR_WARM) {
			sdp_get_stats(&s0);
			c0 = cpu_ns();
		}
		ssize_t n = xfer_recv_all(o, sd, req, sizeof(req), -1);

		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		if (n != RR_REQ)
			return -EPROTO;
		rr_stamp(rbuf, size, req);
		n = xfer_send_all(o, sd, rbuf, size, -1);
		if (n < 0)
			return (int)n;
	}
	if (c0) {
		r->cpu_ns = cpu_ns() - c0;
		sdp_get_stats(&s1);
		stats_delta(&r->stats, &s0, &s1);
	}
	return 0;
}

static int server_main(int cmd_fd, int res_fd)
{
	int ls[API_COUNT], ports[API_COUNT];
	uint8_t *buf = malloc(SERVER_BUF);
	struct cmd c;

	if (!buf)
		return 1;
	if (sdp_init() <= 0) {
		fprintf(stderr, "sdp_bench: server: sdp_init found no transport\n");
		return 1;
	}
	for (int a = 0; a < API_COUNT; a++) {
		struct sockaddr_in sin = { .sin_family = AF_INET,
					   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		ls[a] = xfer_listen(apis[a], (struct sockaddr *)&sin, sizeof(sin), 0, 16, false,
				    NULL);
		if (ls[a] < 0) {
			fprintf(stderr, "sdp_bench: server: %s listener: %s\n", apis[a]->name,
				strerror(-ls[a]));
			return 1;
		}
		ports[a] = ntohs(sin.sin_port);
	}
	if (write(res_fd, ports, sizeof(ports)) != (ssize_t)sizeof(ports))
		return 1;
	while (read(cmd_fd, &c, sizeof(c)) == (ssize_t)sizeof(c)) {
		const struct xsock_ops *o = apis[c.api % API_COUNT];
		struct reply r = { 0 };
		uint8_t *bbuf = NULL;
		int sd, ret;

		if (c.kind == KIND_BULK || c.kind == KIND_RR) {
			/* Faulted in now, not inside the measurement. */
			bbuf = malloc(c.size);
			if (!bbuf)
				return 1;
			memset(bbuf, 0x3c, c.size);
		}
		do
			sd = o->accept(ls[c.api % API_COUNT], NULL, NULL, 0);
		while (sd == -EINTR);
		if (sd < 0) {
			ret = sd;
		} else {
			set_nodelay(o, sd);
			if (c.kind == KIND_STREAM)
				ret = serve_stream(o, sd, buf);
			else if (c.kind == KIND_BULK)
				ret = serve_bulk(o, sd, bbuf, c.size, &r);
			else if (c.kind == KIND_RR)
				ret = serve_rr(o, sd, bbuf, c.size, &r);
			else
				ret = serve_pingpong(o, sd, buf, c.size);
			int cret = o->close(sd);

			if (!ret)
				ret = cret;
		}
		free(bbuf);
		if (ret)
			fprintf(stderr, "sdp_bench: server: %s %s: %s\n", o->name,
				c.kind == KIND_PINGPONG ? "ping-pong" :
				c.kind == KIND_RR	? "request/response" : "stream",
				strerror(-ret));
		r.ret = ret;
		if (write(res_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
			break;
	}
	for (int a = 0; a < API_COUNT; a++)
		apis[a]->close(ls[a]);
	free(buf);
	return 0;
}

/* --- client (parent) ------------------------------------------------------ */

static int cmd_fd, res_fd;
/* What the engine actually ran on, for the closing line. */
static char sdp_transport[64] = "?";
static int ports[API_COUNT];

static int connect_to(int api, int kind, size_t size)
{
	const struct xsock_ops *o = apis[api];
	struct cmd c = { .api = (uint32_t)api, .kind = (uint32_t)kind, .size = (uint32_t)size };
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				   .sin_port = htons((uint16_t)ports[api]) };
	const char *step;
	int sd;

	if (write(cmd_fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
		die("server is gone");
	sd = xfer_dial(o, (struct sockaddr *)&sin, sizeof(sin), 30000, &step);
	if (sd < 0)
		die("%s %s: %s", o->name, step, strerror(-sd));
	set_nodelay(o, sd);
	return sd;
}

static void server_status(const char *what, struct reply *out)
{
	struct reply r;

	if (read(res_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		die("%s: server is gone", what);
	if (r.ret)
		die("%s: server failed: %s", what, strerror(-r.ret));
	if (out)
		*out = r;
}

static unsigned watchdog_s(void)
{
	return (unsigned)(duration_s * 10) + 30;
}

/* Gbit/s */
static double run_stream(int api, size_t size)
{
	const struct xsock_ops *o = apis[api];
	uint8_t *buf = malloc(size);
	uint64_t sent = 0, got_be;
	struct xgen g;
	int sd;

	if (!buf)
		die("out of memory");
	xgen_init(&g, size);
	xgen_fill(&g, buf, size);
	alarm(watchdog_s());
	sd = connect_to(api, KIND_STREAM, size);
	const char *tname = o->transport(sd);

	uint64_t t0 = xfer_now_ns();
	uint64_t end = t0 + (uint64_t)(duration_s * 1e9);

	for (unsigned i = 0;; i++) {
		/* The clock is cheap but not free next to a 64-byte send. */
		if ((i & 63) == 0 && xfer_now_ns() >= end)
			break;
		ssize_t n = xfer_send_all(o, sd, buf, size, -1);

		if (n < 0)
			die("%s stream %zu: send: %s", o->name, size, strerror((int)-n));
		sent += (uint64_t)n;
	}
	int ret = o->shutdown(sd, SHUT_WR);

	if (ret)
		die("%s stream: shutdown: %s", o->name, strerror(-ret));
	ssize_t n = xfer_recv_all(o, sd, &got_be, sizeof(got_be), -1);
	uint64_t ns = xfer_now_ns() - t0;

	if (n != (ssize_t)sizeof(got_be))
		die("%s stream %zu: no byte count from the server (%s)", o->name, size,
		    n < 0 ? strerror((int)-n) : "EOF");
	if (be64toh(got_be) != sent)
		die("%s stream %zu: server received %" PRIu64 " of %" PRIu64 " bytes", o->name,
		    size, be64toh(got_be), sent);
	if (api == API_SDP && tname)
		snprintf(sdp_transport, sizeof(sdp_transport), "%s", tname);
	o->close(sd);
	server_status("stream", NULL);
	alarm(0);
	free(buf);
	return xfer_gbit_s(sent, ns);
}

struct bulk {
	double gbit_s;
	double cpu_s_per_gib;	/* both processes */
	uint64_t bytes;
	struct sdp_stats tx, rx;	/* counter deltas: sender (us), receiver (server) */
};

/* Set when the engine does not know SDP_ZCOPY_THRESH: both SDP columns
 * are then whatever it does by default, and the table says so. */
static bool zc_opt_missing;

/*
 * One --zcopy measurement: like run_stream(), but the server reads in
 * calls of `size` bytes, the sending socket's zero-copy threshold is
 * `thresh` (SDP only; -1 leaves the default), and both processes' CPU time
 * and engine counters are taken around the transfer.
 */
static void run_bulk(int api, size_t size, int thresh, struct bulk *res)
{
	const struct xsock_ops *o = apis[api];
	uint8_t *buf = malloc(size);
	uint64_t sent = 0, got_be;
	struct sdp_stats s0, s1;
	struct reply r;
	struct xgen g;
	int sd;

	if (!buf)
		die("out of memory");
	xgen_init(&g, size);
	xgen_fill(&g, buf, size);
	alarm(watchdog_s());
	sd = connect_to(api, KIND_BULK, size);
	if (api == API_SDP && thresh >= 0) {
		int ret = o->setsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &thresh, sizeof(thresh));

		if (ret == -ENOPROTOOPT)
			zc_opt_missing = true;
		else if (ret)
			die("setsockopt SDP_ZCOPY_THRESH %d: %s", thresh, strerror(-ret));
	}
	const char *tname = o->transport(sd);

	sdp_get_stats(&s0);
	uint64_t c0 = cpu_ns(), t0 = xfer_now_ns();
	uint64_t end = t0 + (uint64_t)(duration_s * 1e9);

	do {
		ssize_t n = xfer_send_all(o, sd, buf, size, -1);

		if (n < 0)
			die("%s bulk %zu: send: %s", o->name, size, strerror((int)-n));
		sent += (uint64_t)n;
	} while (xfer_now_ns() < end);
	int ret = o->shutdown(sd, SHUT_WR);

	if (ret)
		die("%s bulk: shutdown: %s", o->name, strerror(-ret));
	ssize_t n = xfer_recv_all(o, sd, &got_be, sizeof(got_be), -1);
	uint64_t ns = xfer_now_ns() - t0, cpu = cpu_ns() - c0;

	sdp_get_stats(&s1);
	if (n != (ssize_t)sizeof(got_be))
		die("%s bulk %zu: no byte count from the server (%s)", o->name, size,
		    n < 0 ? strerror((int)-n) : "EOF");
	if (be64toh(got_be) != sent)
		die("%s bulk %zu: server received %" PRIu64 " of %" PRIu64 " bytes", o->name,
		    size, be64toh(got_be), sent);
	if (api == API_SDP && tname)
		snprintf(sdp_transport, sizeof(sdp_transport), "%s", tname);
	o->close(sd);
	server_status("bulk", &r);
	alarm(0);
	free(buf);
	res->bytes = sent;
	res->gbit_s = xfer_gbit_s(sent, ns);
	res->cpu_s_per_gib = (double)(cpu + r.cpu_ns) / 1e9 / ((double)sent / (1u << 30));
	stats_delta(&res->tx, &s0, &s1);
	res->rx = r.stats;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct lat {
	double p50_us, p99_us;
	unsigned long n;
};

static struct lat run_pingpong(int api, size_t size)
{
	const struct xsock_ops *o = apis[api];
	uint8_t *buf = malloc(size), *rbuf = malloc(size);
	uint64_t *rtt = malloc(MAX_PINGS * sizeof(*rtt));
	struct lat r = { 0 };
	unsigned long n = 0;
	int sd;

	if (!buf || !rbuf || !rtt)
		die("out of memory");
	memset(buf, 0xa5, size);
	alarm(watchdog_s());
	sd = connect_to(api, KIND_PINGPONG, size);
	if (api == API_SDP && o->transport(sd))
		snprintf(sdp_transport, sizeof(sdp_transport), "%s", o->transport(sd));

	uint64_t end = 0;

	/* The first 100 round trips warm caches and the engine's paths and
	 * are not counted. */
	for (long i = -100; n < MAX_PINGS; i++) {
		uint64_t t0 = xfer_now_ns();

		if (i == 0)
			end = t0 + (uint64_t)(duration_s * 1e9);
		else if (i > 0 && t0 >= end)
			break;
		ssize_t s = xfer_send_all(o, sd, buf, size, -1);

		if (s < 0)
			die("%s ping-pong: send: %s", o->name, strerror((int)-s));
		s = xfer_recv_all(o, sd, rbuf, size, -1);
		if (s != (ssize_t)size)
			die("%s ping-pong: recv: %s", o->name, s < 0 ? strerror((int)-s) : "EOF");
		if (i >= 0)
			rtt[n++] = xfer_now_ns() - t0;
	}
	int ret = o->shutdown(sd, SHUT_WR);

	if (ret)
		die("%s ping-pong: shutdown: %s", o->name, strerror(-ret));
	/* Wait for the server's EOF so its close is not a reset. */
	(void)xfer_recv_all(o, sd, rbuf, size, -1);
	o->close(sd);
	server_status("ping-pong", NULL);
	alarm(0);
	qsort(rtt, n, sizeof(*rtt), cmp_u64);
	r.n = n;
	if (n) {
		r.p50_us = rtt[n / 2] / 1e3;
		r.p99_us = rtt[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3;
	}
	free(buf);
	free(rbuf);
	free(rtt);
	return r;
}

/* One --rr measurement, from the process that ran it to the one that
 * prints the tables (one write to a pipe). */
struct rr_res {
	int32_t ok;
	uint32_t pad;
	uint64_t turns;			/* measured */
	uint64_t ns;			/* their wall time */
	double mean_us, p50_us, p99_us, max_us;
	uint64_t cli_cpu_ns, srv_cpu_ns;	/* user + sys over the measured turns */
	struct sdp_stats cli, srv;	/* counter deltas over the measured turns */
	struct sdp_stats cli_conn;	/* the client's over the whole connection */
	char transport[32];
};

/* Reads a whole reply: MSG_WAITALL, and a loop for what may still come
 * short (a signal). */
static ssize_t recv_reply(const struct xsock_ops *o, int sd, uint8_t *buf, size_t size)
{
	size_t got = 0;

	while (got < size) {
		ssize_t n = o->recv(sd, buf + got, size - got, MSG_WAITALL);

		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		if (n == 0)
			return -EPIPE;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/*
 * RR_WARM turns, then turns for duration_s: send a 64-byte request (its
 * turn number in its first 8 bytes), recv() the whole reply into a buffer
 * of its size, check the stamps.  The stats of the process are the
 * connection's alone: nothing else runs in it.
 */
static void run_rr(int api, size_t size, struct rr_res *res)
{
	const struct xsock_ops *o = apis[api];
	uint8_t *rbuf = malloc(size), req[RR_REQ];
	uint64_t *lat = malloc(MAX_PINGS * sizeof(*lat));
	struct sdp_stats w0, w1, s0 = { 0 }, s1;
	uint64_t n = 0, sum = 0, c0 = 0, t_start = 0, t_end, end = 0;
	struct reply r;
	int sd;

	if (!rbuf || !lat)
		die("out of memory");
	/* Faulted in now, and never holding a stamp by chance. */
	memset(rbuf, 0, size);
	memset(req, 0x5a, sizeof(req));
	alarm(watchdog_s());
	sd = connect_to(api, KIND_RR, size);
	if (o->transport(sd))
		snprintf(res->transport, sizeof(res->transport), "%s", o->transport(sd));
	sdp_get_stats(&w0);
	for (int64_t i = -RR_WARM; n < MAX_PINGS; i++) {
		uint64_t t0 = xfer_now_ns(), turn = (uint64_t)(i + RR_WARM), h, t;

		if (i == 0) {
			sdp_get_stats(&s0);
			c0 = cpu_ns();
			t_start = t0;
			end = t0 + (uint64_t)(duration_s * 1e9);
		} else if (i > 0 && t0 >= end) {
			break;
		}
		memcpy(req, &turn, 8);
		ssize_t k = xfer_send_all(o, sd, req, sizeof(req), -1);

		if (k < 0)
			die("%s rr %zu: send: %s", o->name, size, strerror((int)-k));
		k = recv_reply(o, sd, rbuf, size);
		if (k < 0)
			die("%s rr %zu: recv: %s", o->name, size,
			    k == -EPIPE ? "EOF" : strerror((int)-k));
		uint64_t dt = xfer_now_ns() - t0;

		memcpy(&h, rbuf, 8);
		memcpy(&t, rbuf + size - 8, 8);
		if (h != turn || t != turn)
			die("%s rr %zu: turn %" PRIu64 ": the reply is stamped %" PRIu64
			    " (head) and %" PRIu64 " (tail)",
			    o->name, size, turn, h, t);
		/* The next reply must overwrite both ends again. */
		memset(rbuf, 0xff, 8);
		memset(rbuf + size - 8, 0xff, 8);
		if (i >= 0) {
			lat[n++] = dt;
			sum += dt;
		}
	}
	t_end = xfer_now_ns();
	res->cli_cpu_ns = cpu_ns() - c0;
	sdp_get_stats(&s1);
	int ret = o->shutdown(sd, SHUT_WR);

	if (ret)
		die("%s rr: shutdown: %s", o->name, strerror(-ret));
	/* Wait for the server's EOF so its close is not a reset. */
	(void)xfer_recv_all(o, sd, rbuf, size, -1);
	o->close(sd);
	server_status("request/response", &r);
	sdp_get_stats(&w1);
	alarm(0);
	qsort(lat, n, sizeof(*lat), cmp_u64);
	res->turns = n;
	res->ns = t_end - t_start;
	res->mean_us = (double)sum / (double)n / 1e3;
	res->p50_us = lat[n / 2] / 1e3;
	res->p99_us = lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3;
	res->max_us = lat[n - 1] / 1e3;
	res->srv_cpu_ns = r.cpu_ns;
	stats_delta(&res->cli, &s0, &s1);
	res->srv = r.stats;
	stats_delta(&res->cli_conn, &w0, &w1);
	res->ok = 1;
	free(rbuf);
	free(lat);
}

static void fmt_size(size_t s, char *out, size_t cap)
{
	if (s >= (1u << 20) && s % (1u << 20) == 0)
		snprintf(out, cap, "%zu MiB", s >> 20);
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(out, cap, "%zu KiB", s >> 10);
	else
		snprintf(out, cap, "%zu B", s);
}

static int parse_sizes(const char *text, size_t *out, int *count)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	if (strlen(text) >= sizeof(buf))
		return -1;
	strcpy(buf, text);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (n == MAX_SIZES || xfer_parse_size(tok, &v) || v < 1 || v > (64u << 20))
			return -1;
		out[n++] = (size_t)v;
	}
	if (!n)
		return -1;
	*count = n;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdp_bench [--quick] [--duration SEC] [--sizes LIST] [--lat-sizes LIST]\n"
		"       sdp_bench --zcopy [--quick] [--duration SEC] [--sizes LIST] [--zcopy-thresh N]\n"
		"       sdp_bench --rr [--quick] [--duration SEC] [--sizes LIST] [--zcopy-thresh N]\n"
		"                 [--trans-hold-us N]\n"
		"\n"
		"Throughput and latency of SDP against the kernel's TCP on loopback.\n"
		"  --duration SEC    time per measurement (default 1.5)\n"
		"  --quick           short run: 0.25 s per measurement\n"
		"  --sizes LIST      write sizes of the streaming test (default 64,4K,64K,1M;\n"
		"                    with --zcopy 64K,256K,1M,4M,16M)\n"
		"  --lat-sizes LIST  message sizes of the ping-pong test (default 1,64)\n"
		"  --no-latency, --no-stream   skip one part\n"
		"  --zcopy           only Read Zcopy against Bcopy and TCP: throughput, CPU\n"
		"                    seconds per GiB (both processes), zero-copy counters\n"
		"  --zcopy-thresh N  SDP_ZCOPY_THRESH of the Zcopy column's sender (65536);\n"
		"                    with --rr, of both ends of the zero-copy columns\n"
		"  --rr              only request/response turns (64 B request, reply of each\n"
		"                    size, default 4K,64K,256K,1M, 16 B at least): TCP, SDP Bcopy,\n"
		"                    SDP zero copy without and with Transaction mode; turns/s,\n"
		"                    turn latency, CPU per turn (both processes), counters\n"
		"  --trans-hold-us N SDP_TRANS_HOLD_US of the --rr Transaction column (default:\n"
		"                    the engine's)\n");
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void pct(char *out, size_t cap, uint64_t part, uint64_t whole)
{
	if (whole)
		snprintf(out, cap, "%.1f %%", 100.0 * (double)part / (double)whole);
	else
		snprintf(out, cap, "-");
}

/* The --zcopy section: its table, then the counters that back it. */
static void zcopy_section(void)
{
	static struct bulk res[MAX_SIZES][3];
	static const char *const mode[3] = { "TCP", "Bcopy", "Zcopy" };

	printf("\nZero copy (Read and Write Zcopy) vs Bcopy: streaming, the receiver reads with a "
	       "buffer\nas large as the write\n");
	printf("(SDP_ZCOPY_THRESH on the sending socket: Bcopy 0, Zcopy %d; CPU = user+sys of "
	       "sender and receiver\nprocesses together over the transfer, seconds per GiB "
	       "moved)\n\n",
	       zc_thresh);
	printf("             |          Gbit/s           |         CPU s/GiB         | Zcopy/Bcopy\n");
	printf("%12s | %7s | %7s | %7s | %7s | %7s | %7s | %6s | %6s\n", "write size", "TCP",
	       "Bcopy", "Zcopy", "TCP", "Bcopy", "Zcopy", "Gbit/s", "CPU");
	printf("-------------+---------+---------+---------+---------+---------+---------+"
	       "--------+-------\n");
	fflush(stdout);
	for (int i = 0; i < n_zc_sizes; i++) {
		struct bulk *r = res[i];
		char sz[32];

		run_bulk(API_TCP, zc_sizes[i], -1, &r[0]);
		run_bulk(API_SDP, zc_sizes[i], 0, &r[1]);
		run_bulk(API_SDP, zc_sizes[i], zc_thresh, &r[2]);
		fmt_size(zc_sizes[i], sz, sizeof(sz));
		printf("%12s | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %6.2f | %6.2f\n", sz,
		       r[0].gbit_s, r[1].gbit_s, r[2].gbit_s, r[0].cpu_s_per_gib,
		       r[1].cpu_s_per_gib, r[2].cpu_s_per_gib, ratio(r[2].gbit_s, r[1].gbit_s),
		       ratio(r[2].cpu_s_per_gib, r[1].cpu_s_per_gib));
		fflush(stdout);
	}

	printf("\nHow the bytes moved in each SDP run (of all bytes sent: RDMA-read by the receiver\n"
	       "(Read Zcopy), RDMA-written by the sender into the receiver's advertised buffer\n"
	       "(Write Zcopy), the rest copied (Bcopy)), then the counters behind it.  Sender:\n"
	       "SrcAvails offered, refused by SendSM, cancelled, taken back for a SinkAvail\n"
	       "(pulled), RDMA writes; receiver: RDMA reads (and the part of their bytes placed\n"
	       "straight in the application's buffer), SinkAvails advertised, of those stale; mode\n"
	       "changes the sender sent)\n\n");
	printf("%12s | %5s | %7s | %7s | %7s || %7s | %7s | %7s | %7s | %7s | %7s | %7s | %7s | "
	       "%5s | %5s\n",
	       "write size", "mode", "read", "written", "Bcopy", "offers", "refused", "cancels",
	       "pulled", "writes", "reads", "direct", "adverts", "stale", "modes");
	printf("-------------+-------+---------+---------+---------++---------+---------+---------+"
	       "---------+---------+---------+---------+---------+-------+------\n");
	for (int i = 0; i < n_zc_sizes; i++) {
		for (int m = 1; m < 3; m++) {
			const struct bulk *r = &res[i][m];
			uint64_t rd = r->rx.zcopy_bytes_received, wr = r->tx.zcopy_bytes_written;
			char sz[32], rt[32], wt[32], bt[32], dr[32];

			fmt_size(zc_sizes[i], sz, sizeof(sz));
			pct(rt, sizeof(rt), rd, r->bytes);
			pct(wt, sizeof(wt), wr, r->bytes);
			pct(bt, sizeof(bt), rd + wr <= r->bytes ? r->bytes - rd - wr : 0, r->bytes);
			pct(dr, sizeof(dr), r->rx.zcopy_direct_bytes, rd);
			printf("%12s | %5s | %7s | %7s | %7s || %7" PRIu64 " | %7" PRIu64 " | %7" PRIu64
			       " | %7" PRIu64 " | %7" PRIu64 " | %7" PRIu64 " | %7s | %7" PRIu64
			       " | %5" PRIu64 " | %5" PRIu64 "\n",
			       sz, mode[m], rt, wt, bt, r->tx.zcopy_offers, r->tx.zcopy_refused,
			       r->tx.zcopy_cancels, r->tx.zcopy_pulled, r->tx.zcopy_writes,
			       r->rx.zcopy_reads, dr, r->rx.zcopy_sink_adverts,
			       r->rx.zcopy_sink_stale, r->tx.mode_changes_sent);
			/* The two ends' counts of the written bytes must agree. */
			if (wr != r->rx.zcopy_sink_bytes)
				printf("%12s   (the receiver counted %" PRIu64 " bytes written into its "
				       "adverts, the sender %" PRIu64 ")\n",
				       "", r->rx.zcopy_sink_bytes, wr);
		}
	}
	if (zc_opt_missing)
		printf("\nThis engine does not know SDP_ZCOPY_THRESH: Bcopy and Zcopy ran alike.\n");
}

/* --- the engine pair: server child and client ----------------------------- */

/*
 * Forks the server child (before this process starts any engine thread),
 * waits for its listeners, starts the engine here.  Returns the child.
 */
static pid_t start_pair(void)
{
	int cmdp[2], resp[2];

	if (pipe(cmdp) || pipe(resp))
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* Never outlive the client, whatever happens to it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(cmdp[1]);
		close(resp[0]);
		_exit(server_main(cmdp[0], resp[1]));
	}
	close(cmdp[0]);
	close(resp[1]);
	cmd_fd = cmdp[1];
	res_fd = resp[0];
	alarm(60);
	if (read(res_fd, ports, sizeof(ports)) != (ssize_t)sizeof(ports))
		die("server failed to start");
	alarm(0);
	if (sdp_init() <= 0)
		die("sdp_init found no usable transport");
	return pid;
}

static void stop_pair(pid_t pid)
{
	int status;

	close(cmd_fd);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		die("server child failed");
	close(res_fd);
}

/* --- --rr: request/response ------------------------------------------------ */

enum { RR_TCP, RR_BCOPY, RR_ZCOPY, RR_TRANS, RR_COLS };
static const char *const rr_col[RR_COLS] = { "TCP", "Bcopy", "Zcopy", "Trans" };

/* The column's tunables, into the environment of a process that has not
 * started the engine (it reads them once). */
static void rr_env(int col)
{
	char v[32];

	snprintf(v, sizeof(v), "%d", zc_thresh);
	switch (col) {
	case RR_BCOPY:
		setenv("SDP_ZCOPY_THRESH", "0", 1);
		break;
	case RR_ZCOPY:
		setenv("SDP_ZCOPY_THRESH", v, 1);
		setenv("SDP_TRANS_HOLD_US", "0", 1);
		break;
	case RR_TRANS:
		setenv("SDP_ZCOPY_THRESH", v, 1);
		if (trans_hold_us)
			setenv("SDP_TRANS_HOLD_US", trans_hold_us, 1);
		else
			unsetenv("SDP_TRANS_HOLD_US");
		break;
	}
}

/*
 * One (column, size) in a fresh pair of processes: a child of this one
 * (which never starts the engine) sets the column's environment, forks its
 * server, runs the turns and sends back what it measured.  False if it
 * failed (it said why on stderr).
 */
static bool rr_one(int col, size_t size, struct rr_res *out)
{
	int p[2], status;
	size_t got = 0;

	fflush(stdout);
	fflush(stderr);
	if (pipe(p))
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		struct rr_res r = { 0 };

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		rr_env(col);
		pid_t srv = start_pair();

		run_rr(col == RR_TCP ? API_TCP : API_SDP, size, &r);
		stop_pair(srv);
		_exit(write(p[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(p[1]);
	memset(out, 0, sizeof(*out));
	while (got < sizeof(*out)) {
		ssize_t n = read(p[0], (char *)out + got, sizeof(*out) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (got != sizeof(*out) || !WIFEXITED(status) || WEXITSTATUS(status) || !out->ok) {
		fprintf(stderr, "sdp_bench: rr %s %zu: the measurement failed\n", rr_col[col], size);
		out->ok = 0;
		return false;
	}
	return true;
}

static double rr_turns_s(const struct rr_res *r)
{
	return r->ok && r->ns ? (double)r->turns / ((double)r->ns / 1e9) : 0;
}

static double rr_cpu_us(const struct rr_res *r)
{
	return r->ok && r->turns ? (double)(r->cli_cpu_ns + r->srv_cpu_ns) / 1e3 / (double)r->turns
				 : 0;
}

/* "%7.Nf" or "-" */
static const char *rr_num(char *buf, size_t cap, bool ok, double v, int prec)
{
	if (ok)
		snprintf(buf, cap, "%.*f", prec, v);
	else
		snprintf(buf, cap, "-");
	return buf;
}

static const char *rr_ratio(char *buf, size_t cap, double a, double b)
{
	return rr_num(buf, cap, a > 0 && b > 0, a / b, 2);
}

/* The --rr section.  Returns false if a measurement failed. */
static bool rr_section(void)
{
	static struct rr_res res[MAX_SIZES][RR_COLS];
	bool all_ok = true, below = false;
	char b[16][32];

	printf("\nRequest/response: a %d-byte request, a reply of SIZE bytes read whole by one "
	       "blocking\nrecv(MSG_WAITALL) into a buffer of its size; %d turns unmeasured, then "
	       "turns for %.2f s\n",
	       RR_REQ, RR_WARM, duration_s);
	printf("(TCP: the kernel's; Bcopy: SDP_ZCOPY_THRESH=0; Zcopy: SDP_ZCOPY_THRESH=%d and\n"
	       "SDP_TRANS_HOLD_US=0, Transaction off; Trans: SDP_ZCOPY_THRESH=%d and "
	       "SDP_TRANS_HOLD_US\n%s%s; each run a fresh pair of processes; CPU = user+sys of "
	       "client and\nserver processes over the measured turns)\n\n",
	       zc_thresh, zc_thresh, trans_hold_us ? "=" : "the engine's default",
	       trans_hold_us ? trans_hold_us : "");
	printf("             |            turns per second           |      CPU microseconds per "
	       "turn      | turns/s vs B  |  CPU vs B\n");
	printf("%12s | %8s | %8s | %8s | %8s | %7s | %7s | %7s | %7s | %5s | %5s | %5s | %5s\n",
	       "reply", "TCP", "Bcopy", "Zcopy", "Trans", "TCP", "Bcopy", "Zcopy", "Trans", "Z/B",
	       "T/B", "Z/B", "T/B");
	printf("-------------+----------+----------+----------+----------+---------+---------+"
	       "---------+---------+-------+-------+-------+------\n");
	fflush(stdout);
	for (int i = 0; i < n_rr_sizes; i++) {
		struct rr_res *r = res[i];
		char sz[32];

		if (rr_sizes[i] < (size_t)zc_thresh || !zc_thresh)
			below = true;
		for (int c = 0; c < RR_COLS; c++)
			all_ok &= rr_one(c, rr_sizes[i], &r[c]);
		for (int c = 0; c < RR_COLS; c++)
			if (r[c].ok && c != RR_TCP)
				snprintf(sdp_transport, sizeof(sdp_transport), "%s", r[c].transport);
		fmt_size(rr_sizes[i], sz, sizeof(sz));
		printf("%12s | %8s | %8s | %8s | %8s | %7s | %7s | %7s | %7s | %5s | %5s | %5s | %5s\n",
		       sz, rr_num(b[0], 32, r[0].ok, rr_turns_s(&r[0]), 0),
		       rr_num(b[1], 32, r[1].ok, rr_turns_s(&r[1]), 0),
		       rr_num(b[2], 32, r[2].ok, rr_turns_s(&r[2]), 0),
		       rr_num(b[3], 32, r[3].ok, rr_turns_s(&r[3]), 0),
		       rr_num(b[4], 32, r[0].ok, rr_cpu_us(&r[0]), 1),
		       rr_num(b[5], 32, r[1].ok, rr_cpu_us(&r[1]), 1),
		       rr_num(b[6], 32, r[2].ok, rr_cpu_us(&r[2]), 1),
		       rr_num(b[7], 32, r[3].ok, rr_cpu_us(&r[3]), 1),
		       rr_ratio(b[8], 32, rr_turns_s(&r[2]), rr_turns_s(&r[1])),
		       rr_ratio(b[9], 32, rr_turns_s(&r[3]), rr_turns_s(&r[1])),
		       rr_ratio(b[10], 32, rr_cpu_us(&r[2]), rr_cpu_us(&r[1])),
		       rr_ratio(b[11], 32, rr_cpu_us(&r[3]), rr_cpu_us(&r[1])));
		fflush(stdout);
	}

	printf("\nTurn latency, microseconds: mean / p50 / p99 (send of the request to the last "
	       "byte of\nthe reply; ratios of the p50, lower is better)\n\n");
	printf("%12s | %23s | %23s | %23s | %23s | %5s | %5s\n", "reply", "TCP", "Bcopy",
	       "Zcopy", "Trans", "Z/B", "T/B");
	printf("-------------+-------------------------+-------------------------+--------------"
	       "-----------+-------------------------+-------+------\n");
	for (int i = 0; i < n_rr_sizes; i++) {
		const struct rr_res *r = res[i];
		char sz[32], cell[RR_COLS][64];

		fmt_size(rr_sizes[i], sz, sizeof(sz));
		for (int c = 0; c < RR_COLS; c++) {
			if (r[c].ok)
				snprintf(cell[c], sizeof(cell[c]), "%7.1f %7.1f %7.1f", r[c].mean_us,
					 r[c].p50_us, r[c].p99_us);
			else
				snprintf(cell[c], sizeof(cell[c]), "-");
		}
		printf("%12s | %23s | %23s | %23s | %23s | %5s | %5s\n", sz, cell[0], cell[1], cell[2],
		       cell[3], rr_ratio(b[0], 32, r[2].p50_us, r[1].p50_us),
		       rr_ratio(b[1], 32, r[3].p50_us, r[1].p50_us));
	}

	printf("\nThe path the measured turns took, per SDP run (client: requests carried on a "
	       "SinkAvail\n(piggyback), held requests that went alone (miss), SinkAvails it "
	       "advertised, of those\nstale, RDMA reads; server: RDMA writes into the client's "
	       "adverts; the reply bytes\nRDMA-written, RDMA-read (and of those, read straight "
	       "into the recv() buffer rather\nthan the staging buffer) and copied; mode changes "
	       "over the whole connection, client\nto server / server to client; the slowest "
	       "turn)\n\n");
	printf("%12s | %5s | %7s | %7s | %6s | %7s | %5s | %7s | %7s | %7s | %7s | %7s | %7s | "
	       "%5s | %8s\n",
	       "reply", "mode", "turns", "piggyb", "miss", "adverts", "stale", "reads", "writes",
	       "written", "read", "direct", "Bcopy", "modes", "max us");
	printf("-------------+-------+---------+---------+--------+---------+-------+---------+"
	       "---------+---------+---------+---------+---------+-------+---------\n");
	for (int i = 0; i < n_rr_sizes; i++) {
		for (int c = RR_BCOPY; c < RR_COLS; c++) {
			const struct rr_res *r = &res[i][c];
			uint64_t total = r->turns * rr_sizes[i];
			uint64_t wr = r->srv.zcopy_bytes_written, rd = r->cli.zcopy_bytes_received;
			char sz[32], wt[32], rt[32], dr[32], bt[32], md[32];

			fmt_size(rr_sizes[i], sz, sizeof(sz));
			if (!r->ok) {
				printf("%12s | %5s | failed\n", sz, rr_col[c]);
				continue;
			}
			pct(wt, sizeof(wt), wr, total);
			pct(rt, sizeof(rt), rd, total);
			pct(dr, sizeof(dr), r->cli.zcopy_direct_bytes, rd);
			pct(bt, sizeof(bt), rd + wr <= total ? total - rd - wr : 0, total);
			snprintf(md, sizeof(md), "%" PRIu64 "/%" PRIu64, r->cli_conn.mode_changes_sent,
				 r->cli_conn.mode_changes_received);
			printf("%12s | %5s | %7" PRIu64 " | %7" PRIu64 " | %6" PRIu64 " | %7" PRIu64
			       " | %5" PRIu64 " | %7" PRIu64 " | %7" PRIu64 " | %7s | %7s | %7s | %7s | "
			       "%5s | %8.0f\n",
			       sz, rr_col[c], r->turns, r->cli.trans_piggybacks, r->cli.trans_misses,
			       r->cli.zcopy_sink_adverts, r->cli.zcopy_sink_stale, r->cli.zcopy_reads,
			       r->srv.zcopy_writes, wt, rt, dr, bt, md, r->max_us);
		}
	}
	if (below)
		printf("\nA reply below the zero-copy threshold (%d) is neither offered nor written "
		       "into an\nadvertised buffer: there, every SDP column is Bcopy.\n",
		       zc_thresh);
	return all_ok;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "duration", required_argument, NULL, 'd' },
		{ "sizes", required_argument, NULL, 's' },
		{ "lat-sizes", required_argument, NULL, 'L' },
		{ "no-latency", no_argument, NULL, 'N' },
		{ "no-stream", no_argument, NULL, 'S' },
		{ "zcopy", no_argument, NULL, 'Z' },
		{ "zcopy-thresh", required_argument, NULL, 'T' },
		{ "rr", no_argument, NULL, 'R' },
		{ "trans-hold-us", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	bool do_lat = true, do_stream = true, do_zcopy = false, do_rr = false, sizes_given = false;
	char *end;

	while ((c = getopt_long(argc, argv, "qd:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'q':
			duration_s = 0.25;
			break;
		case 'd':
			duration_s = strtod(optarg, &end);
			if (*end || duration_s < 0.01 || duration_s > 600) {
				usage(stderr);
				return 2;
			}
			break;
		case 's':
			if (parse_sizes(optarg, stream_sizes, &n_stream_sizes)) {
				usage(stderr);
				return 2;
			}
			sizes_given = true;
			break;
		case 'L':
			if (parse_sizes(optarg, lat_sizes, &n_lat_sizes)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'N':
			do_lat = false;
			break;
		case 'S':
			do_stream = false;
			break;
		case 'Z':
			do_zcopy = true;
			break;
		case 'T': {
			long v = strtol(optarg, &end, 10);

			if (*end || v < 0 || v > (64 << 20)) {
				usage(stderr);
				return 2;
			}
			zc_thresh = (int)v;
			break;
		}
		case 'R':
			do_rr = true;
			break;
		case 'H': {
			long v = strtol(optarg, &end, 10);

			if (*end || end == optarg || v < 0 || v > 1000000) {
				usage(stderr);
				return 2;
			}
			trans_hold_us = optarg;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (do_zcopy && do_rr) {
		fprintf(stderr, "sdp_bench: --zcopy and --rr are separate runs\n");
		return 2;
	}
	if (do_rr) {
		/* The request/response section replaces the others; --sizes
		 * is its. */
		do_stream = do_lat = false;
		if (sizes_given) {
			for (int i = 0; i < n_stream_sizes; i++) {
				if (stream_sizes[i] < 16) {
					fprintf(stderr, "sdp_bench: --rr replies are 16 bytes at least\n");
					return 2;
				}
			}
			memcpy(rr_sizes, stream_sizes, sizeof(rr_sizes));
			n_rr_sizes = n_stream_sizes;
		}
	}
	if (do_zcopy) {
		/* The zero-copy section replaces the others; --sizes is its. */
		do_stream = do_lat = false;
		if (sizes_given) {
			memcpy(zc_sizes, stream_sizes, sizeof(zc_sizes));
			n_zc_sizes = n_stream_sizes;
		}
	}

	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (do_rr) {
		/* Every measurement forks its own pair: this process never
		 * starts the engine. */
		printf("sdp_bench: SDP (engine, SDP_TRANSPORTS=%s) vs kernel TCP on 127.0.0.1, "
		       "%.2f s per measurement\n",
		       getenv("SDP_TRANSPORTS") ? getenv("SDP_TRANSPORTS") : "default", duration_s);
		bool ok = rr_section();

		printf("\nSDP transport: %s\n", sdp_transport);
		return ok ? 0 : 1;
	}
	pid_t pid = start_pair();

	printf("sdp_bench: SDP (engine, SDP_TRANSPORTS=%s) vs kernel TCP on 127.0.0.1, "
	       "%.2f s per measurement\n",
	       getenv("SDP_TRANSPORTS") ? getenv("SDP_TRANSPORTS") : "default", duration_s);
	if (do_stream) {
		printf("\nStreaming throughput (Gbit/s, one connection)\n");
		printf("%12s | %9s | %9s | %7s\n", "write size", "TCP", "SDP", "SDP/TCP");
		printf("-------------+-----------+-----------+--------\n");
		fflush(stdout);
		for (int i = 0; i < n_stream_sizes; i++) {
			char sz[32];
			double t = run_stream(API_TCP, stream_sizes[i]);
			double s = run_stream(API_SDP, stream_sizes[i]);

			fmt_size(stream_sizes[i], sz, sizeof(sz));
			printf("%12s | %9.3f | %9.3f | %7.2f\n", sz, t, s, t > 0 ? s / t : 0);
			fflush(stdout);
		}
	}
	if (do_lat) {
		printf("\nPing-pong latency (round trip, microseconds)\n");
		printf("%12s | %9s | %9s | %9s | %9s | %11s\n", "message", "TCP p50", "TCP p99",
		       "SDP p50", "SDP p99", "SDP/TCP p50");
		printf("-------------+-----------+-----------+-----------+-----------+------------\n");
		fflush(stdout);
		for (int i = 0; i < n_lat_sizes; i++) {
			char sz[32];
			struct lat t = run_pingpong(API_TCP, lat_sizes[i]);
			struct lat s = run_pingpong(API_SDP, lat_sizes[i]);

			fmt_size(lat_sizes[i], sz, sizeof(sz));
			printf("%12s | %9.1f | %9.1f | %9.1f | %9.1f | %11.2f\n", sz, t.p50_us,
			       t.p99_us, s.p50_us, s.p99_us, t.p50_us > 0 ? s.p50_us / t.p50_us : 0);
			fflush(stdout);
		}
	}
	if (do_zcopy)
		zcopy_section();
	printf("\nSDP transport: %s\n", sdp_transport);
	stop_pair(pid);
	return 0;
}
