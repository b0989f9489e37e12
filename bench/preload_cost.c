/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * preload_cost: what running under LD_PRELOAD=libsdp.so costs a program
 * that uses plain sockets.  It is linked with libc and pthreads only, so
 * every socket call it makes is one the preload sees; bench/preload_cost.sh
 * runs it with and without the preload and prints the figures side by side.
 *
 *   preload_cost serve --port-file F [--echo] [--host IPV4]
 *       listen on 127.0.0.1:0 (or IPV4:0), write the port to F, accept
 *       forever (a thread per connection); with --echo send every byte
 *       back, else read until EOF and close
 *   preload_cost connect HOST:PORT N [--send BYTES]
 *       N x socket()+connect()+close() (after WARMUP unmeasured ones),
 *       with BYTES written before each close (the connection rate of a
 *       program that opens a connection per request: --send 1):
 *       median, p90, p99 of connect() in microseconds, and the total;
 *       also how many connect() calls stalled over 500 ms: Linux now and
 *       then drops a loopback SYN, and the 1 s until it is resent then
 *       dominates the total and the mean (the percentiles are immune)
 *   preload_cost pingpong HOST:PORT N SIZE
 *       one connection (TCP_NODELAY), N round trips of SIZE bytes
 *       (write SIZE, read the SIZE echoed) after WARMUP unmeasured ones
 *   preload_cost syscalls N
 *       calls the preload only passes through: N x (a 1-byte write and
 *       read on a pipe) and N x getsockopt(SO_TYPE) on a TCP socket that
 *       is never connected; the best of 3 passes, ns per pair / per call
 *
 * Output: one figure per line, "key=value" first, then "n=N" where it
 * applies, then "# " and a label for people.  The first line is always
 * "preloaded=0|1": whether libsdp.so is mapped into the process.
 * Figures are printed, never judged: the exit status is 0 unless a call
 * failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARMUP_CONNECTS 20
#define WARMUP_PINGS 200
#define SYSCALL_PASSES 3
#define MAX_SIZE (64u << 20)
#define SERVE_BUF 65536
/* A connect() this slow waited for a SYN to be resent (1 s on Linux). */
#define STALL_NS 500000000ull

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "preload_cost: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: preload_cost serve --port-file FILE [--echo] [--host IPV4]\n"
		"       preload_cost connect HOST:PORT N [--send BYTES]\n"
		"       preload_cost pingpong HOST:PORT N SIZE\n"
		"       preload_cost syscalls N\n");
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long parse_count(const char *s, const char *what, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > max)
		die("%s: '%s' is not a number in 1..%ld", what, s, max);
	return v;
}

/* HOST:PORT with an IPv4 address, or [IPv6]:PORT. */
static socklen_t parse_addr(const char *arg, struct sockaddr_storage *ss)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(arg, ':');
	size_t hl;
	long port;

	if (!colon || colon == arg)
		die("'%s': expected HOST:PORT", arg);
	hl = (size_t)(colon - arg);
	if (hl >= sizeof(host))
		die("'%s': host too long", arg);
	memcpy(host, arg, hl);
	host[hl] = '\0';
	port = parse_count(colon + 1, "port", 65535);
	memset(ss, 0, sizeof(*ss));
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		host[hl - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			die("'%s': not an IPv6 address", host + 1);
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		return sizeof(*s6);
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
		die("'%s': not an IPv4 address", host);
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	return sizeof(*s4);
}

/* Is libsdp.so mapped into this process? */
static int preloaded(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "/libsdp.so") != NULL;
	fclose(f);
	return found;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) of n sorted samples. */
static uint64_t pct(const uint64_t *v, size_t n, double p)
{
	size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static double us(uint64_t ns)
{
	return (double)ns / 1000.0;
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t r = write(fd, buf, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("write: %s", r < 0 ? strerror(errno) : "wrote nothing");
		buf += r;
		len -= (size_t)r;
	}
}

static void read_all(int fd, char *buf, size_t len)
{
	while (len > 0) {
		ssize_t r = read(fd, buf, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read: %s", strerror(errno));
		if (r == 0)
			die("read: the peer closed the connection");
		buf += r;
		len -= (size_t)r;
	}
}

/* --- serve ------------------------------------------------------------------ */

static int echo_mode;

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char *buf = malloc(SERVE_BUF);
	ssize_t r;

	if (!buf) {
		close(fd);
		return NULL;
	}

	if (echo_mode) {
		int one = 1;

		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	for (;;) {
		r = read(fd, buf, SERVE_BUF);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (!echo_mode)
			continue;
		const char *p = buf;
		size_t left = (size_t)r;

		while (left > 0) {
			ssize_t w = write(fd, p, left);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				goto out;
			p += w;
			left -= (size_t)w;
		}
	}
out:
	free(buf);
	close(fd);
	return NULL;
}

static int cmd_serve(int argc, char **argv)
{
	const char *port_file = NULL, *host = "127.0.0.1";
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	pthread_attr_t attr;
	int one = 1, lfd;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--port-file") && i + 1 < argc)
			port_file = argv[++i];
		else if (!strcmp(argv[i], "--echo"))
			echo_mode = 1;
		else if (!strcmp(argv[i], "--host") && i + 1 < argc)
			host = argv[++i];
		else
			usage();
	}
	/* --host: an RDMA device serves no loopback; in the guest the tests
	 * listen on the device's address. */
	if (!port_file || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		usage();
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket: %s", strerror(errno));
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind %s:0: %s", host, strerror(errno));
	if (listen(lfd, 1024) < 0)
		die("listen: %s", strerror(errno));
	if (getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		die("getsockname: %s", strerror(errno));

	/* Written whole, then renamed: a reader never sees half a port. */
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", port_file) >= (int)sizeof(tmp))
		die("port file name too long");
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%u\n", ntohs(sa.sin_port)) < 0 || fclose(f) != 0)
		die("%s: %s", tmp, strerror(errno));
	if (rename(tmp, port_file) < 0)
		die("rename %s: %s", port_file, strerror(errno));
	fprintf(stderr, "preload_cost: serving on %s:%u%s\n", host, ntohs(sa.sin_port),
		echo_mode ? " (echo)" : "");

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				usleep(10000);	/* wait for connections to end */
			else if (errno != EINTR && errno != ECONNABORTED && errno != EPROTO)
				die("accept: %s", strerror(errno));
			continue;
		}
		if (pthread_create(&t, &attr, serve_conn, (void *)(intptr_t)fd) != 0) {
			fprintf(stderr, "preload_cost: pthread_create failed: connection dropped\n");
			close(fd);
		}
	}
}

/* --- connect ---------------------------------------------------------------- */

static int cmd_connect(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	long n;
	uint64_t *t_conn, *t_sock, *t_close, *t_cycle, first = 0, start = 0, total;
	long stalls = 0;

	long send_bytes = 0;
	static char payload[65536];

	if (argc == 4 && !strcmp(argv[2], "--send"))
		send_bytes = parse_count(argv[3], "BYTES", sizeof(payload));
	else if (argc != 2)
		usage();
	sl = parse_addr(argv[0], &ss);
	n = parse_count(argv[1], "N", 10000000);
	t_conn = calloc((size_t)n, sizeof(*t_conn));
	t_sock = calloc((size_t)n, sizeof(*t_sock));
	t_close = calloc((size_t)n, sizeof(*t_close));
	t_cycle = calloc((size_t)n, sizeof(*t_cycle));
	if (!t_conn || !t_sock || !t_close || !t_cycle)
		die("out of memory");

	for (long i = -WARMUP_CONNECTS; i < n; i++) {
		if (i == 0)
			start = now_ns();
		uint64_t t0 = now_ns();
		int fd = socket(ss.ss_family, SOCK_STREAM, 0);
		uint64_t t1 = now_ns();

		if (fd < 0)
			die("socket: %s", strerror(errno));
		if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
			die("connect %s (round %ld): %s", argv[0], i + WARMUP_CONNECTS + 1,
			    strerror(errno));
		if (send_bytes && write(fd, payload, (size_t)send_bytes) != send_bytes)
			die("write %ld bytes: %s", send_bytes, strerror(errno));
		uint64_t t2 = now_ns();

		if (close(fd) < 0)
			die("close: %s", strerror(errno));
		uint64_t t3 = now_ns();

		if (i == -WARMUP_CONNECTS)
			first = t2 - t1;
		if (i >= 0) {
			t_sock[i] = t1 - t0;
			t_conn[i] = t2 - t1;
			t_close[i] = t3 - t2;
			t_cycle[i] = t3 - t0;
			stalls += t2 - t1 >= STALL_NS;
		}
	}
	total = now_ns() - start;

	qsort(t_conn, (size_t)n, sizeof(*t_conn), cmp_u64);
	qsort(t_sock, (size_t)n, sizeof(*t_sock), cmp_u64);
	qsort(t_close, (size_t)n, sizeof(*t_close), cmp_u64);
	qsort(t_cycle, (size_t)n, sizeof(*t_cycle), cmp_u64);
	printf("preloaded=%d # libsdp.so mapped into the client\n", preloaded());
	printf("connect_first_us=%.1f # the first connect(), one-time set-up included\n",
	       us(first));
	printf("connect_p50_us=%.2f n=%ld # connect() median\n", us(pct(t_conn, (size_t)n, 50)), n);
	printf("connect_p90_us=%.2f n=%ld # connect() 90th percentile\n",
	       us(pct(t_conn, (size_t)n, 90)), n);
	printf("connect_p99_us=%.2f n=%ld # connect() 99th percentile\n",
	       us(pct(t_conn, (size_t)n, 99)), n);
	printf("connect_max_us=%.1f n=%ld # connect() slowest\n", us(t_conn[n - 1]), n);
	printf("socket_p50_us=%.2f n=%ld # socket() median\n", us(pct(t_sock, (size_t)n, 50)), n);
	printf("close_p50_us=%.2f n=%ld # close() of the connected socket, median\n",
	       us(pct(t_close, (size_t)n, 50)), n);
	printf("socket_max_us=%.1f close_max_us=%.1f n=%ld # socket(), close(): slowest\n",
	       us(t_sock[n - 1]), us(t_close[n - 1]), n);
	printf("cycle_p50_us=%.2f n=%ld # socket+connect+close, median\n",
	       us(pct(t_cycle, (size_t)n, 50)), n);
	printf("cycle_mean_us=%.2f n=%ld # socket+connect+close, mean\n",
	       us(total) / (double)n, n);
	printf("connect_stalls=%ld n=%ld # connect() calls that took over %d ms (a SYN resent after 1 s)\n",
	       stalls, n, (int)(STALL_NS / 1000000));
	printf("connect_total_ms=%.1f n=%ld # all N socket+connect+close cycles, wall time\n",
	       (double)total / 1e6, n);
	printf("connect_rate=%.0f n=%ld # cycles per second (%ld bytes sent in each)\n",
	       (double)n * 1e9 / (double)total, n, send_bytes);
	free(t_conn);
	free(t_sock);
	free(t_close);
	free(t_cycle);
	return 0;
}

/* --- pingpong --------------------------------------------------------------- */

static int cmd_pingpong(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	long n, size;
	uint64_t *rtt, start, total;
	char *buf;
	int fd, one = 1;

	if (argc != 3)
		usage();
	sl = parse_addr(argv[0], &ss);
	n = parse_count(argv[1], "N", 100000000);
	size = parse_count(argv[2], "SIZE", MAX_SIZE);
	rtt = calloc((size_t)n, sizeof(*rtt));
	buf = malloc((size_t)size);
	if (!rtt || !buf)
		die("out of memory");
	memset(buf, 0x5a, (size_t)size);

	fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
		die("connect %s: %s", argv[0], strerror(errno));
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("setsockopt TCP_NODELAY: %s", strerror(errno));

	for (long i = 0; i < WARMUP_PINGS; i++) {
		write_all(fd, buf, (size_t)size);
		read_all(fd, buf, (size_t)size);
	}
	start = now_ns();
	for (long i = 0; i < n; i++) {
		uint64_t t0 = now_ns();

		write_all(fd, buf, (size_t)size);
		read_all(fd, buf, (size_t)size);
		rtt[i] = now_ns() - t0;
	}
	total = now_ns() - start;
	close(fd);

	qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
	printf("preloaded=%d # libsdp.so mapped into the client\n", preloaded());
	printf("rtt_p50_us=%.2f n=%ld size=%ld # round trip of %ld B, median\n",
	       us(pct(rtt, (size_t)n, 50)), n, size, size);
	printf("rtt_p90_us=%.2f n=%ld size=%ld # round trip of %ld B, 90th percentile\n",
	       us(pct(rtt, (size_t)n, 90)), n, size, size);
	printf("rtt_p99_us=%.2f n=%ld size=%ld # round trip of %ld B, 99th percentile\n",
	       us(pct(rtt, (size_t)n, 99)), n, size, size);
	printf("rtt_mean_us=%.2f n=%ld size=%ld # round trip of %ld B, mean\n",
	       us(total) / (double)n, n, size, size);
	printf("pingpong_total_ms=%.1f n=%ld size=%ld # all N round trips, wall time\n",
	       (double)total / 1e6, n, size);
	free(rtt);
	free(buf);
	return 0;
}

/* --- syscalls --------------------------------------------------------------- */

static int cmd_syscalls(int argc, char **argv)
{
	long n;
	int p[2], fd;
	char c = 'x';
	uint64_t best_pipe = UINT64_MAX, best_gso = UINT64_MAX;

	if (argc != 1)
		usage();
	n = parse_count(argv[0], "N", 1000000000);
	if (pipe(p) < 0)
		die("pipe: %s", strerror(errno));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));

	for (int pass = 0; pass < SYSCALL_PASSES; pass++) {
		uint64_t t0 = now_ns();

		for (long i = 0; i < n; i++) {
			if (write(p[1], &c, 1) != 1 || read(p[0], &c, 1) != 1)
				die("pipe write/read: %s", strerror(errno));
		}
		uint64_t t1 = now_ns();

		for (long i = 0; i < n; i++) {
			int type = 0;
			socklen_t l = sizeof(type);

			if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM)
				die("getsockopt SO_TYPE: %s", strerror(errno));
		}
		uint64_t t2 = now_ns();

		if (t1 - t0 < best_pipe)
			best_pipe = t1 - t0;
		if (t2 - t1 < best_gso)
			best_gso = t2 - t1;
	}
	close(p[0]);
	close(p[1]);
	close(fd);

	printf("preloaded=%d # libsdp.so mapped into the process\n", preloaded());
	printf("pipe_rw_ns=%.1f n=%ld # 1-byte write + read on a pipe, per pair (best of %d)\n",
	       (double)best_pipe / (double)n, n, SYSCALL_PASSES);
	printf("getsockopt_ns=%.1f n=%ld # getsockopt(SO_TYPE) on an unconnected TCP socket, per call (best of %d)\n",
	       (double)best_gso / (double)n, n, SYSCALL_PASSES);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "serve"))
		return cmd_serve(argc - 2, argv + 2);
	if (!strcmp(argv[1], "connect"))
		return cmd_connect(argc - 2, argv + 2);
	if (!strcmp(argv[1], "pingpong"))
		return cmd_pingpong(argc - 2, argv + 2);
	if (!strcmp(argv[1], "syscalls"))
		return cmd_syscalls(argc - 2, argv + 2);
	usage();
}
