/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * scale_hold: hold many idle connections with plain libc sockets and say
 * what they cost the process (scale.sh runs it under the preload).
 *
 *   scale_hold server PORTFILE N [MIB [KIB]]
 *                                    listen, accept N, answer each one's byte
 *   scale_hold client HOST PORT N [MIB]
 *                                    connect N, one byte each way on each
 *
 * Once every connection has carried its byte each way, each side prints
 *   scale_hold ROLE: conns N fds D kib K
 * D and K are the descriptors (/proc/self/fd) and resident KiB (VmRSS)
 * the process gained from just before its first socket (the server: just
 * after listen()) to then.  The server measures first and then sends a
 * second byte on the first connection; the client measures after it has
 * that byte, so both measure while all N are open.  Then the client closes
 * them and the server sees every one end.
 *
 * With MIB, after that the client sends MIB MiB on each connection and
 * the server reads them, each side printing "busy" figures once done;
 * then the server waits until what it holds has come down to KIB KiB
 * per connection (the buffers given back when idle), printing "idle"
 * figures, or fails after 60 s; then it sends its second byte.
 * With SCALE_HOLD_GO=FILE in its environment the server waits for FILE
 * to exist before that byte (for a look at both processes meanwhile).
 * Exit status 0, or 1 with a message on stderr.
 */
#include <poll.h>
#include <time.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "scale_hold: %s: %s\n", what, strerror(errno));
	return 1;
}

static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int xfer(int fd, char c, int out)
{
	ssize_t r;

	do
		r = out ? send(fd, &c, 1, MSG_NOSIGNAL) : recv(fd, &c, 1, 0);
	while (r < 0 && errno == EINTR);
	if (r == 1)
		return 0;
	if (r == 0)
		errno = ECONNRESET;
	return -1;
}

static void report(const char *role, long n, long fds0, long kib0)
{
	printf("scale_hold %s: conns %ld fds %ld kib %ld\n", role, n, count_fds() - fds0,
	       rss_kib() - kib0);
	fflush(stdout);
}

static char bulk[1 << 16];

/* MIB MiB out on each of c[0..n), or in, whole. */
static int bulk_xfer(const int *c, long n, long mib, int out)
{
	for (long i = 0; i < n; i++) {
		long left = mib << 20;

		while (left > 0) {
			size_t k = left < (long)sizeof(bulk) ? (size_t)left : sizeof(bulk);
			ssize_t r = out ? send(c[i], bulk, k, MSG_NOSIGNAL) : recv(c[i], bulk, k, 0);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				if (r == 0)
					errno = ECONNRESET;
				return -1;
			}
			left -= r;
		}
	}
	return 0;
}

/* Until the process holds at most kib0 + per * n KiB, or 60 s. */
static int wait_idle(long n, long kib0, long per)
{
	time_t end = time(NULL) + 60;

	while (rss_kib() - kib0 > per * n) {
		if (time(NULL) > end)
			return -1;
		poll(NULL, 0, 50);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int server = argc >= 4 && argc <= 6 && !strcmp(argv[1], "server");
	int client = argc >= 5 && argc <= 6 && !strcmp(argv[1], "client");
	long n = server || client ? atol(argv[server ? 3 : 4]) : 0;
	long mib = server && argc >= 5 ? atol(argv[4]) : client && argc == 6 ? atol(argv[5]) : 0;
	long per = server && argc == 6 ? atol(argv[5]) : 0;
	long fds0, kib0;
	int *c;

	if ((!server && !client) || n <= 0 || mib < 0 || (server && mib && per <= 0)) {
		fprintf(stderr, "usage: scale_hold server PORTFILE N [MIB KIB] | "
				"client HOST PORT N [MIB]\n");
		return 2;
	}
	c = calloc((size_t)n, sizeof(*c));
	if (!c)
		return fail("calloc");
	if (server) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t len = sizeof(a);
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		char tmp[4096];
		FILE *f;

		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4096) ||
		    getsockname(l, (struct sockaddr *)&a, &len))
			return fail("listen");
		fds0 = count_fds();
		kib0 = rss_kib();
		snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
		f = fopen(tmp, "w");
		if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) ||
		    rename(tmp, argv[2]))
			return fail("port file");
		for (long i = 0; i < n; i++) {
			c[i] = accept(l, NULL, NULL);
			if (c[i] < 0)
				return fail("accept");
		}
		for (long i = 0; i < n; i++)
			if (xfer(c[i], 0, 0) || xfer(c[i], 'y', 1))
				return fail("echo");
		report("server", n, fds0, kib0);
		if (mib) {
			if (bulk_xfer(c, n, mib, 0))
				return fail("bulk in");
			report("server busy", n, fds0, kib0);
			if (wait_idle(n, kib0, per)) {
				report("server still", n, fds0, kib0);
				errno = ETIMEDOUT;
				return fail("waiting for the buffers to be given back");
			}
			report("server idle", n, fds0, kib0);
		}
		const char *go = getenv("SCALE_HOLD_GO");

		for (time_t end = time(NULL) + 60; go && access(go, F_OK);) {
			if (time(NULL) > end) {
				errno = ETIMEDOUT;
				return fail(go);
			}
			poll(NULL, 0, 50);
		}
		if (xfer(c[0], 'm', 1))
			return fail("measured");
		for (long i = 0; i < n; i++) {
			char b;

			if (recv(c[i], &b, 1, 0) != 0)
				return fail("end of connection");
			close(c[i]);
		}
		close(l);
		free(c);
		return 0;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };

	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		return fail("address");
	fds0 = count_fds();
	kib0 = rss_kib();
	for (long i = 0; i < n; i++) {
		c[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (c[i] < 0 || connect(c[i], (struct sockaddr *)&a, sizeof(a)))
			return fail("connect");
	}
	for (long i = 0; i < n; i++)
		if (xfer(c[i], 'x', 1))
			return fail("send");
	for (long i = 0; i < n; i++)
		if (xfer(c[i], 0, 0))
			return fail("reply");
	if (mib) {
		if (bulk_xfer(c, n, mib, 1))
			return fail("bulk out");
		report("client busy", n, fds0, kib0);
	}
	if (xfer(c[0], 0, 0))
		return fail("the server's measured byte");
	report("client", n, fds0, kib0);
	for (long i = 0; i < n; i++)
		close(c[i]);
	free(c);
	return 0;
}
