// SPDX-License-Identifier: BSD-2-Clause
/* Fresh TCP connections and forked case parts for tests (tcp_pair.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tcp_pair.h"

int tcp_pair(struct in_addr host, int *a, int *b)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = host };
	socklen_t l = sizeof(sin);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r = 0;

	*a = *b = -1;
	if (ls < 0)
		return -errno;
	if (bind(ls, (struct sockaddr *)&sin, sizeof(sin)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&sin, &l))
		r = -errno;
	if (!r) {
		*a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (*a < 0 || connect(*a, (struct sockaddr *)&sin, sizeof(sin)))
			r = -errno;
	}
	if (!r) {
		*b = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (*b < 0)
			r = -errno;
	}
	close(ls);
	if (r && *a >= 0) {
		close(*a);
		*a = -1;
	}
	return r;
}

static pid_t run_part(const char *name, void (*fn)(int), int fd, int other, unsigned secs,
		      const char **part, const int *fails)
{
	fflush(stdout);
	pid_t pid = fork();

	if (pid)
		return pid;
	close(other);
	*part = name;
	alarm(secs);	/* nothing hangs */
	fn(fd);
	fflush(stdout);
	_exit(*fails ? 1 : 0);
}

bool tcp_pair_run(int a, int b, void (*client)(int), void (*server)(int), unsigned secs,
		  const char **part, const int *fails, const char *prog)
{
	pid_t srv = run_part("server", server, b, a, secs, part, fails);
	bool ok = srv > 0;

	if (srv > 0 && run_part("client", client, a, b, secs, part, fails) < 0)
		ok = false;
	close(a);
	close(b);
	for (;;) {
		int st;
		pid_t p = wait(&st);

		if (p < 0)
			break;
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			ok = false;
			if (WIFSIGNALED(st))
				printf("  %s: %s killed by signal %d\n", prog,
				       p == srv ? "server" : "client", WTERMSIG(st));
		}
	}
	return ok;
}
