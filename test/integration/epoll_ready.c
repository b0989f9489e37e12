/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * An epoll set with many idle members, one of which becomes ready at a
 * time, for epoll_ready.sh: under the preload a report must look at the
 * members that can have news (the ready list of doc/fastpath.md, step 3),
 * not scan every member per epoll_wait.  The script counts the looks
 * (sdpstat's epoll_looks) while this program waits to be killed.
 *
 *   epoll_ready HOST N ROUNDS DONE_FILE
 *       N connections to itself (a listener on HOST, port 0); the N
 *       accepted ends are level-triggered members of one epoll set.  Each
 *       round sends one byte on one client end and waits until the set
 *       reports its server end, which must be the only member reported;
 *       then prints "rounds=R waits=W" (W: epoll_wait calls), writes
 *       DONE_FILE and sleeps until killed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "epoll_ready: %s: %s\n", what, strerror(errno));
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: epoll_ready HOST N ROUNDS DONE_FILE\n");
		return 2;
	}
	long n = atol(argv[2]), rounds = atol(argv[3]);
	struct rlimit rl;

	if (n < 2 || rounds < 1)
		return 2;
	/* Each connection is two ends in this process. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1)
		die("socket");
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, (int)n) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		die("listen");

	int *cli = calloc((size_t)n, sizeof(int)), *srv = calloc((size_t)n, sizeof(int));
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (!cli || !srv || ep < 0)
		die("set-up");
	for (long i = 0; i < n; i++) {
		cli[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (cli[i] < 0 || connect(cli[i], (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		setsockopt(cli[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		srv[i] = accept(l, NULL, NULL);
		if (srv[i] < 0)
			die("accept");
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)i };

		if (epoll_ctl(ep, EPOLL_CTL_ADD, srv[i], &ev) < 0)
			die("epoll_ctl");
	}

	long waits = 0;

	for (long r = 0; r < rounds; r++) {
		long want = (r * 7919) % n;
		char c = (char)r;
		int got = 0;

		if (send(cli[want], &c, 1, MSG_NOSIGNAL) != 1)
			die("send");
		while (!got) {
			struct epoll_event evs[16];
			int k = epoll_wait(ep, evs, 16, -1);

			waits++;
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				die("epoll_wait");
			for (int j = 0; j < k; j++) {
				if ((long)evs[j].data.u64 != want) {
					fprintf(stderr, "epoll_ready: round %ld: member %llu reported, "
						"only %ld has data\n", r,
						(unsigned long long)evs[j].data.u64, want);
					return 1;
				}
				got = 1;
			}
		}
		char b;

		if (recv(srv[want], &b, 1, 0) != 1 || b != c) {
			fprintf(stderr, "epoll_ready: round %ld: wrong byte\n", r);
			return 1;
		}
	}
	printf("rounds=%ld waits=%ld\n", rounds, waits);
	fflush(stdout);
	FILE *f = fopen(argv[4], "w");

	if (!f)
		die(argv[4]);
	fclose(f);
	for (;;)
		pause();
}
