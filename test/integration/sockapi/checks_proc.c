/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Process checks: a forked child serves an accepted connection, a child
 * that does nothing leaves the parent's connection alone, and sockets
 * across exec (inherited without FD_CLOEXEC, closed with it).
 */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int ping(int fd, int peer)
{
	char buf[4];

	if (write_all(fd, "ping", 4, 10000) < 0 ||
	    read_exact(peer, buf, 4, 10000) < 0 || memcmp(buf, "ping", 4) != 0)
		return fail("ping: %s", errno ? errname(errno) : "EOF");
	if (write_all(peer, "pong", 4, 10000) < 0 ||
	    read_exact(fd, buf, 4, 10000) < 0 || memcmp(buf, "pong", 4) != 0)
		return fail("pong: %s", errno ? errname(errno) : "EOF");
	return 0;
}

static int check_fork_child_serves(void)
{
	struct sockaddr_in a;
	int l = -1, c = -1, s = -1, rc = -1;
	char buf[8], what[32];
	pid_t pid;

	l = make_listener(0, &a);
	if (l < 0)
		goto out;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0)
		FAIL_ERRNO("socket");
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		FAIL_ERRNO("connect");
	s = accept(l, NULL, NULL);
	if (s < 0)
		FAIL_ERRNO("accept");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		FAIL_ERRNO("fork");
	if (pid == 0) {
		/* the child serves the connection: request in, reply out */
		alarm(0);
		close(l);
		close(c);
		if (read_exact(s, buf, 3, 10000) < 0 || memcmp(buf, "req", 3) != 0)
			_exit(2);
		if (write_all(s, "reply", 5, 10000) < 0)
			_exit(3);
		close(s);
		exit(0);
	}
	xclose(&s); /* the parent's copy */
	if (write_all(c, "req", 3, 10000) < 0)
		FAIL_ERRNO("send request");
	if (read_exact(c, buf, 5, 10000) < 0)
		FAIL("reply: %s", errno ? errname(errno) : "EOF");
	if (memcmp(buf, "reply", 5) != 0)
		FAIL("wrong reply");
	note("reply");
	if (wait_eof(c, 10000) < 0)
		FAIL("no EOF after the child closed: %s", errname(errno));
	note("EOF");
	if (wait_child(pid, 10000, what, sizeof(what)) != 0)
		FAIL("child %s", what);
	note("child %s", what);
	rc = 0;
out:
	xclose(&l);
	xclose(&c);
	xclose(&s);
	return rc;
}

static int check_fork_idle_child(void)
{
	struct pair p = { -1, -1 };
	char what[32];
	int rc = -1;
	pid_t pid;

	if (pair_open(&p) < 0)
		goto out;
	if (ping(p.c, p.s) < 0)
		goto out;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		FAIL_ERRNO("fork");
	if (pid == 0) {
		alarm(0);
		exit(0); /* does nothing: its copies close at exit */
	}
	if (wait_child(pid, 10000, what, sizeof(what)) != 0)
		FAIL("child %s", what);
	note("child %s", what);
	if (ping(p.c, p.s) < 0 || ping(p.s, p.c) < 0)
		goto out;
	note("ping ok");
	if (wait_fd(p.s, POLLIN, 100) != 0 || wait_fd(p.c, POLLIN, 100) != 0)
		FAIL("an event after the child exited");
	note("no-event");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

/* fork, exec ourselves with --child-fd FD [--expect-closed]: the exit
 * code of the child (0: as expected), or -1. */
static int exec_child(int fd, int expect_closed, char *what, size_t len)
{
	char num[16];
	pid_t pid;

	snprintf(num, sizeof(num), "%d", fd);
	pid = spawn_self("--child-fd", num, expect_closed ? "--expect-closed" : NULL);
	if (pid < 0)
		return fail("fork: %s", errname(errno));
	return wait_child(pid, 10000, what, len);
}

static int check_exec_inherit(void)
{
	struct pair p = { -1, -1 };
	char what[32];
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (exec_child(p.c, 0, what, sizeof(what)) != 0)
		FAIL("child: %s", what);
	note("child %s", what);
	if (ping(p.c, p.s) < 0)
		goto out;
	note("ping ok");
	if (wait_fd(p.s, POLLIN, 100) != 0)
		FAIL("an event after the child exited");
	note("no-event");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

static int check_exec_cloexec(void)
{
	struct pair p = { -1, -1 };
	char what[32];
	int rc = -1;

	if (pair_open(&p) < 0)
		goto out;
	if (fcntl(p.c, F_SETFD, FD_CLOEXEC) < 0)
		FAIL_ERRNO("F_SETFD");
	if (exec_child(p.c, 1, what, sizeof(what)) != 0)
		FAIL("child: %s", what);
	note("child %s", what);
	if (ping(p.c, p.s) < 0)
		goto out;
	note("ping ok");
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

const struct check checks_proc[] = {
	{ "fork_child_serves", check_fork_child_serves,
	  "accept, fork: the child serves, the parent closes its copy" },
	{ "fork_idle_child", check_fork_idle_child,
	  "a forked child that does nothing exits: connection unaffected" },
	{ "exec_inherit", check_exec_inherit,
	  "a socket without FD_CLOEXEC is a socket after exec" },
	{ "exec_cloexec", check_exec_cloexec,
	  "a socket with FD_CLOEXEC is closed after exec" },
	{ NULL, NULL, NULL },
};
