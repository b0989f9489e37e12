/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * An epoll echo server and a paced ping-pong client, for epoll_wake.sh:
 * the server sleeps in epoll_wait between requests, so under the preload
 * it is its own member's transport that must wake it (doc/fastpath.md,
 * step 4), and the progress thread must not be woken for the requests.
 *
 *   epoll_wake serve --port-file FILE --host IPV4 [--et | --poll | --block]
 *       accept connections one after another, each a member of one epoll
 *       set (level-triggered, or EPOLLET with --et), or waited for with
 *       poll() (--poll: step 2, whose sleeper parks the socket's transport
 *       fd in its own poll set), or read with a blocking recv() (--block),
 *       echo until EOF
 *   epoll_wake ping HOST:PORT ROUNDS GAP_US
 *       ROUNDS round trips of 64 bytes, GAP_US microseconds apart (so that
 *       the server is back in epoll_wait when the next request comes:
 *       what the check counts depends on that, not on any time)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG 64

static void die(const char *what)
{
	fprintf(stderr, "epoll_wake: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr, "usage: epoll_wake serve --port-file FILE --host IPV4 [--et | --poll | --block]\n"
			"       epoll_wake ping HOST:PORT ROUNDS GAP_US\n");
	exit(2);
}

/* Echo what is there; false at EOF or on an error. */
static int echo(int fd)
{
	char buf[4096];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n == 0)
			return 0;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);

			if (w < 0)
				return 0;
			off += w;
		}
	}
}

/* Echo with blocking calls until EOF or an error. */
static void echo_blocking(int fd)
{
	char buf[4096];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0)
			return;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);

			if (w < 0)
				return;
			off += w;
		}
	}
}

static int cmd_serve(int argc, char **argv) __attribute__((noreturn));
static int cmd_serve(int argc, char **argv)
{
	const char *port_file = NULL, *host = NULL;
	int et = 0, use_poll = 0, block = 0;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--port-file") && i + 1 < argc)
			port_file = argv[++i];
		else if (!strcmp(argv[i], "--host") && i + 1 < argc)
			host = argv[++i];
		else if (!strcmp(argv[i], "--et"))
			et = 1;
		else if (!strcmp(argv[i], "--poll"))
			use_poll = 1;
		else if (!strcmp(argv[i], "--block"))
			block = 1;
		else
			usage();
	}
	if (!port_file || !host)
		usage();
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		die("listen");
	FILE *f = fopen(port_file, "w");

	if (!f)
		die(port_file);
	fprintf(f, "%d\n", ntohs(a.sin_port));
	fclose(f);

	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		die("epoll_create1");
	for (;;) {
		int fd = accept(l, NULL, NULL);

		if (fd < 0)
			die("accept");
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct epoll_event ev = { .events = EPOLLIN | (et ? EPOLLET : 0), .data.fd = fd };

		if (block) {
			echo_blocking(fd);
			close(fd);
			continue;
		}
		if (!use_poll && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll_ctl");
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			int n = use_poll ? poll(&pfd, 1, -1) : epoll_wait(ep, &ev, 1, -1);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die(use_poll ? "poll" : "epoll_wait");
			if (!echo(fd))
				break;
		}
		close(fd);
	}
}

static int cmd_ping(int argc, char **argv)
{
	if (argc != 3)
		usage();
	char host[64];
	const char *colon = strrchr(argv[0], ':');
	long rounds = atol(argv[1]), gap = atol(argv[2]);

	if (!colon || (size_t)(colon - argv[0]) >= sizeof(host))
		usage();
	memcpy(host, argv[0], (size_t)(colon - argv[0]));
	host[colon - argv[0]] = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
		die("socket");
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (long r = 0; r < rounds; r++) {
		char buf[MSG];

		memset(buf, (int)(r & 0xff), sizeof(buf));
		if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
			die("send");
		for (size_t got = 0; got < sizeof(buf);) {
			ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);

			if (n <= 0) {
				if (n == 0)
					errno = ECONNRESET;
				die("recv");
			}
			got += (size_t)n;
		}
		if (buf[0] != (char)(r & 0xff) || buf[MSG - 1] != (char)(r & 0xff)) {
			fprintf(stderr, "epoll_wake: round %ld: wrong echo\n", r);
			return 1;
		}
		if (gap > 0)
			usleep((useconds_t)gap);
	}
	close(fd);
	printf("%ld round trips\n", rounds);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "serve"))
		return cmd_serve(argc - 2, argv + 2);
	if (!strcmp(argv[1], "ping"))
		return cmd_ping(argc - 2, argv + 2);
	usage();
}
