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
 * With --zcopy, instead, Read Zcopy against Bcopy: streaming with writes of
 * 64 KiB to 16 MiB, the receiver reading with a buffer as large as the
 * write (so that a zero-copy read can land straight in it), for SDP with
 * SDP_ZCOPY_THRESH 0 on the sending socket (Bcopy), SDP with the threshold
 * at 64 KiB (Zcopy) and the kernel's TCP.  Per size: Gbit/s and CPU
 * seconds per GiB moved (user + sys of both processes, from getrusage
 * around the transfer; the server child measures its own and reports it),
 * the Zcopy/Bcopy ratios, and the deltas of the engine's zero-copy
 * counters, which show whether zero copy was really used: on a transport
 * without RDMA read "Zcopy" is Bcopy too and says so there.
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
 * counters measured around it (the --zcopy section). */
enum { KIND_STREAM = 1, KIND_PINGPONG = 2, KIND_BULK = 3 };

static const struct xsock_ops *const apis[API_COUNT] = { &xsock_tcp, &xsock_sdp };

struct cmd {
	uint32_t api;
	uint32_t kind;
	uint32_t size;
};

/* Server to client after each connection, over the result pipe (one write,
 * well under PIPE_BUF).  cpu_ns and stats are filled for KIND_BULK only. */
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
/* The Zcopy column's threshold on the sending socket; Bcopy's is 0. */
static int zc_thresh = 65536;

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

static int make_listener(const struct xsock_ops *o, int *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int ls = o->socket(AF_INET, SOCK_STREAM, 0), ret;

	if (ls < 0)
		return ls;
	ret = o->bind(ls, (struct sockaddr *)&sin, sizeof(sin));
	if (!ret)
		ret = o->listen(ls, 16);
	if (!ret)
		ret = o->getsockname(ls, (struct sockaddr *)&sin, &len);
	if (ret) {
		o->close(ls);
		return ret;
	}
	*port = ntohs(sin.sin_port);
	return ls;
}

/* --- server child ------------------------------------------------------- */

static int serve_stream(const struct xsock_ops *o, int sd, uint8_t *buf)
{
	uint64_t total = 0, be;

	for (;;) {
		ssize_t n = o->recv(sd, buf, SERVER_BUF, 0);

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
	uint64_t total = 0, be, c0 = cpu_ns();

	sdp_get_stats(&s0);
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

	r->cpu_ns = cpu_ns() - c0;
	sdp_get_stats(&s1);
	stats_delta(&r->stats, &s0, &s1);
	return w < 0 ? (int)w : 0;
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
		ls[a] = make_listener(apis[a], &ports[a]);
		if (ls[a] < 0) {
			fprintf(stderr, "sdp_bench: server: %s listener: %s\n", apis[a]->name,
				strerror(-ls[a]));
			return 1;
		}
	}
	if (write(res_fd, ports, sizeof(ports)) != (ssize_t)sizeof(ports))
		return 1;
	while (read(cmd_fd, &c, sizeof(c)) == (ssize_t)sizeof(c)) {
		const struct xsock_ops *o = apis[c.api % API_COUNT];
		struct reply r = { 0 };
		uint8_t *bbuf = NULL;
		int sd, ret;

		if (c.kind == KIND_BULK) {
			/* Faulted in now, not inside the measurement. */
			bbuf = malloc(c.size);
			if (!bbuf)
				return 1;
			memset(bbuf, 0, c.size);
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
			else
				ret = serve_pingpong(o, sd, buf, c.size);
			int cret = o->close(sd);

			if (!ret)
				ret = cret;
		}
		free(bbuf);
		if (ret)
			fprintf(stderr, "sdp_bench: server: %s %s: %s\n", o->name,
				c.kind == KIND_PINGPONG ? "ping-pong" : "stream", strerror(-ret));
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
	int sd, ret;

	if (write(cmd_fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
		die("server is gone");
	sd = o->socket(AF_INET, SOCK_STREAM, 0);
	if (sd < 0)
		die("%s socket: %s", o->name, strerror(-sd));
	ret = xfer_connect(o, sd, (struct sockaddr *)&sin, sizeof(sin), 30000);
	if (ret)
		die("%s connect: %s", o->name, strerror(-ret));
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
		"  --zcopy-thresh N  SDP_ZCOPY_THRESH of the Zcopy column's sender (65536)\n");
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

	printf("\nRead Zcopy vs Bcopy: streaming, the receiver reads with a buffer as large as "
	       "the write\n");
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

	printf("\nZero-copy counters over each SDP run (sender: SrcAvails offered, refused by "
	       "SendSM,\ncancelled; receiver: RDMA reads posted, bytes they read of all bytes "
	       "moved, of those\nthe part placed straight in the application's buffer)\n\n");
	printf("%12s | %5s | %8s | %7s | %7s | %8s | %10s | %11s\n", "write size", "mode",
	       "offers", "refused", "cancels", "reads", "read/total", "direct/read");
	printf("-------------+-------+----------+---------+---------+----------+------------+"
	       "------------\n");
	for (int i = 0; i < n_zc_sizes; i++) {
		for (int m = 1; m < 3; m++) {
			const struct bulk *r = &res[i][m];
			char sz[32], rt[32], dr[32];

			fmt_size(zc_sizes[i], sz, sizeof(sz));
			pct(rt, sizeof(rt), r->rx.zcopy_bytes_received, r->bytes);
			pct(dr, sizeof(dr), r->rx.zcopy_direct_bytes, r->rx.zcopy_bytes_received);
			printf("%12s | %5s | %8" PRIu64 " | %7" PRIu64 " | %7" PRIu64 " | %8" PRIu64
			       " | %10s | %11s\n",
			       sz, mode[m], r->tx.zcopy_offers, r->tx.zcopy_refused,
			       r->tx.zcopy_cancels, r->rx.zcopy_reads, rt, dr);
		}
	}
	if (zc_opt_missing)
		printf("\nThis engine does not know SDP_ZCOPY_THRESH: Bcopy and Zcopy ran alike.\n");
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, cmdp[2], resp[2], status;
	bool do_lat = true, do_stream = true, do_zcopy = false, sizes_given = false;
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
	if (do_zcopy) {
		/* The zero-copy section replaces the others; --sizes is its. */
		do_stream = do_lat = false;
		if (sizes_given) {
			memcpy(zc_sizes, stream_sizes, sizeof(zc_sizes));
			n_zc_sizes = n_stream_sizes;
		}
	}

	signal(SIGPIPE, SIG_IGN);
	if (pipe(cmdp) || pipe(resp))
		die("pipe: %s", strerror(errno));
	/* Fork before the engine starts any thread in this process. */
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
	signal(SIGALRM, on_alarm);
	alarm(60);
	if (read(res_fd, ports, sizeof(ports)) != (ssize_t)sizeof(ports))
		die("server failed to start");
	alarm(0);
	if (sdp_init() <= 0)
		die("sdp_init found no usable transport");

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
	close(cmd_fd);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		die("server child failed");
	close(res_fd);
	return 0;
}
