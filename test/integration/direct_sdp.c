/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Direct SDP sockets: socket(AF_INET_SDP, SOCK_STREAM, 0) under the
 * preload.  Run by preload_switch.sh.
 *
 *   direct_sdp transfer [FAMILY]   a server and a client thread over
 *                                  TEST_HOST (default 127.0.0.1) on FAMILY
 *                                  (default 27); 1 MiB checked both ways;
 *                                  exit 0 if intact
 *   direct_sdp wildcard6 [FAMILY]  the same with the listener bound to the
 *                                  IPv6 wildcard [::] (qperf's sdp_bw does
 *                                  that with 27: getaddrinfo gives :: first),
 *                                  a client on TEST_HOST and, on loopback,
 *                                  one on [::1]
 *   direct_sdp anyport [FAMILY]    with many kernel TCP listeners held on
 *                                  TEST_HOST, bind and listen FAMILY
 *                                  sockets to port 0, ANYPORT_TRIES times
 *                                  (default 300): the kernel's port P may
 *                                  be free where the transport's (P plus
 *                                  an offset) is taken, and Linux's
 *                                  bind(port 0) never fails for that;
 *                                  prints "anyport: ok" or the failures
 *   direct_sdp socket [FAMILY]     print socket()'s result: "ok" or the
 *                                  errno name (EAFNOSUPPORT...)
 *   direct_sdp dgram [FAMILY]      the same for SOCK_DGRAM
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define BYTES (1 << 20)

static int family = 27;
static int listen_fd;

static const char *errname(int e)
{
	switch (e) {
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case EINVAL: return "EINVAL";
	case ECONNREFUSED: return "ECONNREFUSED";
	default: return strerror(e);
	}
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, unsigned char *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);

		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The server echoes what it reads. */
static void *server(void *arg)
{
	unsigned char *buf = malloc(BYTES);
	int c = accept(listen_fd, NULL, NULL);
	intptr_t ok = 0;

	(void)arg;
	if (c >= 0 && buf && read_all(c, buf, BYTES) == 0 && write_all(c, buf, BYTES) == 0)
		ok = 1;
	if (c >= 0)
		close(c);
	free(buf);
	return (void *)ok;
}

/* One echo of 1 MiB from a client of family to dst (len bytes). */
static int transfer_to(const void *dst, socklen_t len)
{
	pthread_t t;
	void *sok;

	if (pthread_create(&t, NULL, server, NULL))
		return 1;
	int fd = socket(family, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, dst, len) < 0) {
		printf("connect: %s\n", errname(errno));
		return 1;
	}
	unsigned char *out = malloc(BYTES), *in = malloc(BYTES);

	for (size_t i = 0; i < BYTES; i++)
		out[i] = (unsigned char)(i * 7 + (i >> 9));
	int ok = write_all(fd, out, BYTES) == 0 && read_all(fd, in, BYTES) == 0 &&
		 memcmp(in, out, BYTES) == 0;

	pthread_join(t, &sok);
	close(fd);
	free(out);
	free(in);
	return ok && sok ? 0 : 1;
}

/* TEST_HOST (default 127.0.0.1) into *a; -1 if it is not IPv4. */
static int test_host(struct sockaddr_in *a)
{
	const char *host = getenv("TEST_HOST");

	*a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	/* An RDMA transport serves no loopback: the tests give an address. */
	if (host && *host && inet_pton(AF_INET, host, &a->sin_addr) != 1) {
		printf("TEST_HOST '%s' is not an IPv4 address\n", host);
		return -1;
	}
	return 0;
}

static int transfer(void)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	int r;

	if (test_host(&a) < 0)
		return 1;
	listen_fd = socket(family, SOCK_STREAM, 0);
	if (listen_fd < 0 || bind(listen_fd, (void *)&a, sizeof(a)) < 0 || listen(listen_fd, 4) < 0 ||
	    getsockname(listen_fd, (void *)&a, &al) < 0) {
		printf("listen: %s\n", errname(errno));
		return 1;
	}
	r = transfer_to(&a, sizeof(a));
	close(listen_fd);
	printf("transfer: %s\n", r ? "FAILED" : "ok");
	return r;
}

static int wildcard6(void)
{
	struct sockaddr_in6 w = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	struct sockaddr_in a;
	socklen_t wl = sizeof(w);
	int r;

	if (test_host(&a) < 0)
		return 1;
	listen_fd = socket(family, SOCK_STREAM, 0);
	if (listen_fd < 0 || bind(listen_fd, (void *)&w, sizeof(w)) < 0 || listen(listen_fd, 4) < 0 ||
	    getsockname(listen_fd, (void *)&w, &wl) < 0) {
		printf("listen on [::]: %s\n", errname(errno));
		return 1;
	}
	a.sin_port = w.sin6_port;
	r = transfer_to(&a, sizeof(a));
	if (!r && a.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
		struct sockaddr_in6 l6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT,
					   .sin6_port = w.sin6_port };

		r = transfer_to(&l6, sizeof(l6));
	}
	close(listen_fd);
	printf("wildcard6: %s\n", r ? "FAILED" : "ok");
	return r;
}

/* As many TCP listeners as the descriptor limit allows (up to 4000) held
 * on the test host while port-0 listeners of `family` come and go: each
 * has a few per cent of chances that its transport port is one of them. */
static int anyport(void)
{
	struct rlimit rl;
	struct sockaddr_in a;
	const char *t = getenv("ANYPORT_TRIES");
	int tries = t ? atoi(t) : 300, nheld = 0, bad = 0, *held;

	if (test_host(&a) < 0)
		return 1;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	int want = rl.rlim_cur > 4200 ? 4000 : (int)rl.rlim_cur - 200;

	held = calloc(want > 0 ? (size_t)want : 1, sizeof(*held));
	for (int i = 0; held && i < want; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		a.sin_port = 0;
		if (fd < 0)
			break;
		if (bind(fd, (void *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0) {
			close(fd);
			break;
		}
		held[nheld++] = fd;
	}
	for (int i = 0; i < tries; i++) {
		int fd = socket(family, SOCK_STREAM, 0);

		a.sin_port = 0;
		if (fd < 0 || bind(fd, (void *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0) {
			if (bad++ < 3)
				printf("anyport: try %d: %s\n", i, errname(errno));
		}
		if (fd >= 0)
			close(fd);
	}
	while (nheld)
		close(held[--nheld]);
	free(held);
	if (bad)
		printf("anyport: %d of %d port-0 listeners failed\n", bad, tries);
	else
		printf("anyport: ok\n");
	return bad != 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: direct_sdp transfer|wildcard6|anyport|socket|dgram [FAMILY]\n");
		return 2;
	}
	if (argc > 2)
		family = atoi(argv[2]);
	if (!strcmp(argv[1], "transfer"))
		return transfer();
	if (!strcmp(argv[1], "wildcard6"))
		return wildcard6();
	if (!strcmp(argv[1], "anyport"))
		return anyport();
	int type = !strcmp(argv[1], "dgram") ? SOCK_DGRAM : SOCK_STREAM;
	int fd = socket(family, type, 0);

	printf("%s: %s\n", argv[1], fd >= 0 ? "ok" : errname(errno));
	if (fd >= 0)
		close(fd);
	return 0;
}
