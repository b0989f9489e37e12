/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sock_bench: stream throughput and ping-pong latency over plain BSD
 * sockets, nothing else (libc only), so that the very same binary can be
 * measured over the kernel's TCP, under LD_PRELOAD=libsdp.so and under
 * rdma-core's LD_PRELOAD=librspreload.so (see bench/rdma_compare.sh).
 *
 *   sock_bench serve ADDR PORT
 *       Serve connections one after the other, forever.  Each starts with
 *       a 16-byte request (mode, message size, count, all big-endian):
 *         stream    read until EOF, then answer with the byte count (8 B);
 *         pingpong  `count` times: read `size` bytes, write them back.
 *
 *   sock_bench stream HOST PORT SIZE SECONDS
 *       Write SIZE-byte messages for SECONDS, shut down the write side,
 *       wait for the server's byte count; prints
 *         stream SIZE BYTES SECONDS GBIT_S
 *       (the time runs until the count arrives, so it includes draining).
 *
 *   sock_bench bulk HOST PORT SIZE SECONDS
 *       As stream, but the server reads in calls of SIZE bytes (a buffer
 *       as large as the write, what lets a zero-copy receive place data
 *       straight in it), and both ends measure their process's CPU time
 *       (user + sys, getrusage) over the transfer; the server's comes back
 *       with the byte count.  Prints
 *         bulk SIZE BYTES SECONDS GBIT_S CLIENT_CPU_S SERVER_CPU_S BUSY_S
 *       BUSY_S is the whole machine's busy time over the same span (every
 *       CPU, /proc/stat), which includes what no process is charged for,
 *       such as a soft RDMA device's kernel work; -1 if unknown.
 *
 *   sock_bench pingpong HOST PORT SIZE COUNT
 *       COUNT round trips of SIZE bytes (after COUNT/10 + 1 unmeasured
 *       ones); prints
 *         pingpong SIZE COUNT RTT_P50_US RTT_P99_US RTT_MEAN_US
 *
 *   sock_bench rr HOST PORT SIZE COUNT
 *       Request/response: COUNT turns (after COUNT/10 + 1 unmeasured ones)
 *       of a 64-byte request answered by a SIZE-byte reply, which the
 *       client reads whole with recv(MSG_WAITALL) into a buffer of SIZE
 *       bytes (what lets a zero-copy receive advertise it, and a
 *       Transaction-mode request ride on that advert).  The request holds
 *       the turn's number and the server stamps it on the reply's first and
 *       last 8 bytes, which the client checks.  Both ends measure their
 *       process's CPU time over the measured turns; the server's comes back
 *       after the last reply.  Prints
 *         rr SIZE COUNT P50_US P99_US MEAN_US CLIENT_CPU_S SERVER_CPU_S BUSY_S SECONDS MAX_US
 *       (turn latency from the request's send to the reply's last byte;
 *       BUSY_S as for bulk; SECONDS the measured turns' wall time).
 *
 * With SOCK_BENCH_HOLD set in its environment, a client prints its line and
 * then waits for EOF on its standard input before it exits, so that a
 * preload's counters can be read from outside while the process still
 * lives (rdma_compare.sh reads libsdp's with sdpstat).
 *
 * TCP_NODELAY is set on both ends (what latency-minded programs do, and what
 * perftest's ping-pong is compared with).  Every failure is a message on
 * stderr and exit status 1; figures are printed, never judged.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MODE_STREAM = 1, MODE_PINGPONG = 2, MODE_BULK = 3, MODE_RR = 4 };

#define REQ_LEN 16
/* rr: the request's size; the reply's is at least 16 (its two stamps). */
#define RR_REQ 64
#define MAX_SIZE (64u << 20)

static void die(const char *what)
{
	fprintf(stderr, "sock_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *what)
{
	fprintf(stderr, "sock_bench: %s\n", what);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User + sys seconds of this process, every thread (a preload's too). */
static double cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		die("getrusage");
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Busy seconds of the whole machine, all CPUs: not idle, not iowait. */
static double busy_s(void)
{
	unsigned long long u, n, sy, idle, io, irq, sirq, st;
	FILE *f = fopen("/proc/stat", "r");
	int got;

	if (!f)
		return -1;
	got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &u, &n, &sy, &idle, &io,
		     &irq, &sirq, &st);
	fclose(f);
	if (got != 8)
		return -1;
	return (double)(u + n + sy + irq + sirq + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Exactly len bytes, or 0 at EOF before the first byte; dies otherwise. */
static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read");
		if (n == 0) {
			if (got == 0)
				return 0;
			fail("read: EOF in the middle of a message");
		}
		got += (size_t)n;
	}
	return 1;
}

static void write_full(int fd, const void *buf, size_t len)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = write(fd, (const char *)buf + put, len - put);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("write");
		put += (size_t)n;
	}
}

static void nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("setsockopt TCP_NODELAY");
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end || v == 0 || v > MAX_SIZE)
		fail("bad size (1 B to 64 MiB, suffixes K and M)");
	return (size_t)v;
}

/* rr: the turns before the measured ones (as for pingpong). */
static uint64_t rr_warm(uint64_t count)
{
	return count / 10 + 1;
}

static int resolve(const char *host, const char *port, struct sockaddr_storage *ss,
		   socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai;
	int r = getaddrinfo(host, port, &hints, &ai);

	if (r) {
		fprintf(stderr, "sock_bench: %s:%s: %s\n", host, port, gai_strerror(r));
		exit(1);
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return ss->ss_family;
}

static void serve_one(int fd, char *buf)
{
	uint8_t req[REQ_LEN];
	uint32_t mode, size;
	uint64_t count;

	if (!read_full(fd, req, sizeof(req)))
		return;
	memcpy(&mode, req, 4);
	memcpy(&size, req + 4, 4);
	memcpy(&count, req + 8, 8);
	mode = be32toh(mode);
	size = be32toh(size);
	count = be64toh(count);
	if (size == 0 || size > MAX_SIZE)
		fail("bad request: size");
	if (mode == MODE_STREAM || mode == MODE_BULK) {
		/* bulk: read as much as was written per call, and time it. */
		size_t rlen = mode == MODE_BULK ? size : MAX_SIZE;
		uint64_t total = 0, cpu_ns;
		double c0 = cpu_s();

		for (;;) {
			ssize_t n = read(fd, buf, rlen);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("read");
			if (n == 0)
				break;
			total += (uint64_t)n;
		}
		total = htobe64(total);
		if (mode == MODE_STREAM) {
			write_full(fd, &total, sizeof(total));
		} else {
			uint8_t ans[16];

			cpu_ns = htobe64((uint64_t)((cpu_s() - c0) * 1e9));
			memcpy(ans, &total, 8);
			memcpy(ans + 8, &cpu_ns, 8);
			write_full(fd, ans, sizeof(ans));
		}
	} else if (mode == MODE_RR) {
		uint64_t warm = rr_warm(count), cpu_ns;
		uint8_t rq[RR_REQ];
		double c0 = 0;

		if (size < 16)
			fail("bad request: rr replies are 16 bytes at least");
		for (uint64_t i = 0; i < warm + count; i++) {
			if (i == warm)
				c0 = cpu_s();
			if (!read_full(fd, rq, sizeof(rq)))
				fail("rr: EOF before the last turn");
			memcpy(buf, rq, 8);
			memcpy(buf + size - 8, rq, 8);
			write_full(fd, buf, size);
		}
		cpu_ns = htobe64((uint64_t)((cpu_s() - c0) * 1e9));
		write_full(fd, &cpu_ns, sizeof(cpu_ns));
	} else if (mode == MODE_PINGPONG) {
		for (uint64_t i = 0; i < count; i++) {
			if (!read_full(fd, buf, size))
				fail("pingpong: EOF before the last round trip");
			write_full(fd, buf, size);
		}
	} else {
		fail("bad request: mode");
	}
}

static void cmd_serve(const char *addr, const char *port) __attribute__((noreturn));
static void cmd_serve(const char *addr, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1;
	int lfd = socket(resolve(addr, port, &ss, &len), SOCK_STREAM, 0);
	char *buf = malloc(MAX_SIZE);

	if (lfd < 0)
		die("socket");
	if (!buf)
		fail("out of memory");
	/* Faulted in now, not during the first measurement. */
	memset(buf, 0, MAX_SIZE);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, len))
		die("bind");
	if (listen(lfd, 16))
		die("listen");
	fprintf(stderr, "sock_bench: serving on %s:%s\n", addr, port);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0)
			die("accept");
		nodelay(fd);
		serve_one(fd, buf);
		close(fd);
	}
}

static int dial(const char *host, const char *port, uint32_t mode, uint32_t size,
		uint64_t count)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd = socket(resolve(host, port, &ss, &len), SOCK_STREAM, 0);
	uint8_t req[REQ_LEN];

	if (fd < 0)
		die("socket");
	/* The server may still be starting: retry a refused connect a while. */
	for (int tries = 0;; tries++) {
		if (connect(fd, (struct sockaddr *)&ss, len) == 0)
			break;
		if (errno != ECONNREFUSED || tries >= 100)
			die("connect");
		close(fd);
		usleep(100000);
		fd = socket(ss.ss_family, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
	}
	nodelay(fd);
	mode = htobe32(mode);
	size = htobe32(size);
	count = htobe64(count);
	memcpy(req, &mode, 4);
	memcpy(req + 4, &size, 4);
	memcpy(req + 8, &count, 8);
	write_full(fd, req, sizeof(req));
	return fd;
}

static int cmd_stream(const char *host, const char *port, size_t size, double secs)
{
	char *buf = malloc(size);
	uint64_t sent = 0, got;

	if (!buf)
		fail("out of memory");
	memset(buf, 0x5a, size);
	int fd = dial(host, port, MODE_STREAM, (uint32_t)size, 0);
	double t0 = now_s(), stop = t0 + secs;

	/* Check the clock every few messages: small ones are fast. */
	for (uint64_t i = 0;; i++) {
		if ((i & 63) == 0 && now_s() >= stop)
			break;
		write_full(fd, buf, size);
		sent += size;
	}
	if (shutdown(fd, SHUT_WR))
		die("shutdown");
	if (!read_full(fd, &got, sizeof(got)))
		fail("stream: no byte count from the server");
	double t = now_s() - t0;

	got = be64toh(got);
	if (got != sent) {
		fprintf(stderr, "sock_bench: stream: sent %llu bytes, server counted %llu\n",
			(unsigned long long)sent, (unsigned long long)got);
		return 1;
	}
	printf("stream %zu %llu %.3f %.3f\n", size, (unsigned long long)sent, t,
	       (double)sent * 8 / t / 1e9);
	close(fd);
	free(buf);
	return 0;
}

static int cmd_bulk(const char *host, const char *port, size_t size, double secs)
{
	char *buf = malloc(size);
	uint64_t sent = 0, got, srv_ns;
	uint8_t ans[16];

	if (!buf)
		fail("out of memory");
	memset(buf, 0x5a, size);
	int fd = dial(host, port, MODE_BULK, (uint32_t)size, 0);
	double b0 = busy_s(), c0 = cpu_s(), t0 = now_s(), stop = t0 + secs;

	do {
		write_full(fd, buf, size);
		sent += size;
	} while (now_s() < stop);
	if (shutdown(fd, SHUT_WR))
		die("shutdown");
	if (!read_full(fd, ans, sizeof(ans)))
		fail("bulk: no byte count from the server");
	double t = now_s() - t0, cpu = cpu_s() - c0, b1 = busy_s();

	memcpy(&got, ans, 8);
	memcpy(&srv_ns, ans + 8, 8);
	got = be64toh(got);
	if (got != sent) {
		fprintf(stderr, "sock_bench: bulk: sent %llu bytes, server counted %llu\n",
			(unsigned long long)sent, (unsigned long long)got);
		return 1;
	}
	printf("bulk %zu %llu %.3f %.3f %.4f %.4f %.2f\n", size, (unsigned long long)sent, t,
	       (double)sent * 8 / t / 1e9, cpu, (double)be64toh(srv_ns) / 1e9,
	       b0 < 0 || b1 < 0 ? -1.0 : b1 - b0);
	close(fd);
	free(buf);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmd_pingpong(const char *host, const char *port, size_t size, long count)
{
	long warm = count / 10 + 1;
	char *buf = malloc(size);
	double *rtt = malloc((size_t)count * sizeof(*rtt));
	double sum = 0;

	if (!buf || !rtt)
		fail("out of memory");
	memset(buf, 0xa5, size);
	int fd = dial(host, port, MODE_PINGPONG, (uint32_t)size, (uint64_t)(count + warm));

	for (long i = 0; i < count + warm; i++) {
		double t0 = now_s();

		write_full(fd, buf, size);
		if (!read_full(fd, buf, size))
			fail("pingpong: EOF from the server");
		if (i >= warm) {
			rtt[i - warm] = (now_s() - t0) * 1e6;
			sum += rtt[i - warm];
		}
	}
	qsort(rtt, (size_t)count, sizeof(*rtt), cmp_double);
	printf("pingpong %zu %ld %.2f %.2f %.2f\n", size, count, rtt[count / 2],
	       rtt[(size_t)((double)count * 0.99)], sum / (double)count);
	close(fd);
	free(buf);
	free(rtt);
	return 0;
}

/* The whole reply: MSG_WAITALL, and a loop for what may still come short
 * (a signal, a stack that ignores the flag). */
static void recv_reply(int fd, char *buf, size_t size)
{
	size_t got = 0;

	while (got < size) {
		ssize_t n = recv(fd, buf + got, size - got, MSG_WAITALL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("recv");
		if (n == 0)
			fail("rr: EOF from the server");
		got += (size_t)n;
	}
}

static int cmd_rr(const char *host, const char *port, size_t size, long count)
{
	uint64_t warm = rr_warm((uint64_t)count), srv_ns;
	char *buf = malloc(size), rq[RR_REQ];
	double *lat = malloc((size_t)count * sizeof(*lat));
	double sum = 0, c0 = 0, b0 = 0, t_start = 0;

	if (size < 16)
		fail("rr: the reply is 16 bytes at least");
	if (!buf || !lat)
		fail("out of memory");
	/* Faulted in now, and never holding a stamp by chance. */
	memset(buf, 0, size);
	memset(rq, 0x5a, sizeof(rq));
	int fd = dial(host, port, MODE_RR, (uint32_t)size, (uint64_t)count);

	for (uint64_t i = 0; i < warm + (uint64_t)count; i++) {
		uint64_t h, t;

		if (i == warm) {
			b0 = busy_s();
			c0 = cpu_s();
			t_start = now_s();
		}
		double t0 = now_s();

		memcpy(rq, &i, 8);
		write_full(fd, rq, sizeof(rq));
		recv_reply(fd, buf, size);
		double dt = (now_s() - t0) * 1e6;

		memcpy(&h, buf, 8);
		memcpy(&t, buf + size - 8, 8);
		if (h != i || t != i) {
			fprintf(stderr,
				"sock_bench: rr: turn %llu: the reply is stamped %llu (head) and %llu "
				"(tail)\n",
				(unsigned long long)i, (unsigned long long)h, (unsigned long long)t);
			return 1;
		}
		/* The next reply must overwrite both ends again. */
		memset(buf, 0xff, 8);
		memset(buf + size - 8, 0xff, 8);
		if (i >= warm) {
			lat[i - warm] = dt;
			sum += dt;
		}
	}
	double secs = now_s() - t_start, cpu = cpu_s() - c0, b1 = busy_s();

	if (!read_full(fd, &srv_ns, sizeof(srv_ns)))
		fail("rr: no CPU time from the server");
	qsort(lat, (size_t)count, sizeof(*lat), cmp_double);
	printf("rr %zu %ld %.2f %.2f %.2f %.4f %.4f %.2f %.4f %.2f\n", size, count,
	       lat[count / 2], lat[(size_t)((double)count * 0.99)], sum / (double)count, cpu,
	       (double)be64toh(srv_ns) / 1e9, b0 < 0 || b1 < 0 ? -1.0 : b1 - b0, secs,
	       lat[count - 1]);
	close(fd);
	free(buf);
	free(lat);
	return 0;
}

static void usage(void)
{
	fputs("usage: sock_bench serve ADDR PORT\n"
	      "       sock_bench stream HOST PORT SIZE SECONDS\n"
	      "       sock_bench bulk HOST PORT SIZE SECONDS\n"
	      "       sock_bench pingpong HOST PORT SIZE COUNT\n"
	      "       sock_bench rr HOST PORT SIZE COUNT\n",
	      stderr);
	exit(2);
}

/* SOCK_BENCH_HOLD: the client's line is out; wait for EOF on stdin. */
static int hold(int rc)
{
	char c[256];

	if (!getenv("SOCK_BENCH_HOLD"))
		return rc;
	fflush(stdout);
	for (;;) {
		ssize_t n = read(STDIN_FILENO, c, sizeof(c));

		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	return rc;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4 && !strcmp(argv[1], "serve"))
		cmd_serve(argv[2], argv[3]);
	if (argc == 6 && !strcmp(argv[1], "stream")) {
		double secs = strtod(argv[5], NULL);

		if (!(secs > 0))
			fail("bad duration");
		return hold(cmd_stream(argv[2], argv[3], parse_size(argv[4]), secs));
	}
	if (argc == 6 && !strcmp(argv[1], "bulk")) {
		double secs = strtod(argv[5], NULL);

		if (!(secs > 0))
			fail("bad duration");
		return hold(cmd_bulk(argv[2], argv[3], parse_size(argv[4]), secs));
	}
	if (argc == 6 && !strcmp(argv[1], "pingpong")) {
		long count = strtol(argv[5], NULL, 10);

		if (count < 1 || count > 10000000)
			fail("bad count");
		return hold(cmd_pingpong(argv[2], argv[3], parse_size(argv[4]), count));
	}
	if (argc == 6 && !strcmp(argv[1], "rr")) {
		long count = strtol(argv[5], NULL, 10);

		if (count < 1 || count > 10000000)
			fail("bad count");
		return hold(cmd_rr(argv[2], argv[3], parse_size(argv[4]), count));
	}
	usage();
	return 2;
}
