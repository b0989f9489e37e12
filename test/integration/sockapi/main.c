/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sockapi_check: what an application does with a TCP stream socket, on
 * loopback, one deterministic line per check:
 *
 *     name: ok
 *     name: ok (EINPROGRESS_or_0 POLLOUT SO_ERROR=0 EISCONN)
 *     name: FAILED (what went wrong) [what was seen before]
 *
 * Lines name results, errno names and event names, never addresses,
 * ports or timings, so that the output natively and under
 * LD_PRELOAD=libsdp.so (every socket on SDP) must be identical:
 * test/integration/preload_api.sh compares the two.
 *
 * Usage: sockapi_check [--list] [--only NAME]... [--skip NAME]...
 *                      [--timeout SECS]
 *        sockapi_check --child-fd N [--expect-closed]   (exec checks)
 *
 * Checks run in one process, one after another, in table order.  Each
 * has a watchdog (alarm(), 20 s by default): a check that hangs is
 * reported as FAILED, the ones after it as NOT RUN, and the program
 * exits 1.  Exit status: 0 if every check that ran passed, 1 otherwise,
 * 2 for a usage error.
 */

#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *self_exe = "/proc/self/exe";

#define MAX_CHECKS 256
#define MAX_NAMES 64

static const struct check *all[MAX_CHECKS];
static size_t n_all;
static unsigned char selected[MAX_CHECKS];
static volatile size_t running = (size_t)-1;
static unsigned timeout_s = 20;

const char *check_name(void)
{
	return running < n_all ? all[running]->name : "";
}

static void add_group(const struct check *g)
{
	for (; g->name; g++) {
		if (n_all == MAX_CHECKS) {
			fprintf(stderr, "sockapi_check: too many checks\n");
			exit(2);
		}
		all[n_all++] = g;
	}
}

static ssize_t find(const char *name)
{
	size_t i;

	for (i = 0; i < n_all; i++)
		if (strcmp(all[i]->name, name) == 0)
			return (ssize_t)i;
	return -1;
}

/* Signal-safe output for the watchdog. */
static void put(const char *s)
{
	size_t len = strlen(s);

	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, s, len);

		if (n <= 0)
			return;
		s += n;
		len -= (size_t)n;
	}
}

static void on_alarm(int sig)
{
	size_t i = running;
	char num[16];
	int k = 0;
	unsigned t = timeout_s;
	char rev[16];

	(void)sig;
	if (i >= n_all)
		_exit(1);
	do {
		rev[k++] = (char)('0' + t % 10);
		t /= 10;
	} while (t && k < 15);
	for (t = 0; k > 0; t++)
		num[t] = rev[--k];
	num[t] = '\0';
	put(all[i]->name);
	put(": FAILED (watchdog: no result within ");
	put(num);
	put(" s)\n");
	for (i++; i < n_all; i++) {
		if (!selected[i])
			continue;
		put(all[i]->name);
		put(": NOT RUN (watchdog)\n");
	}
	_exit(1);
}

/* --child-fd N: run by the exec checks after exec of ourselves. */
static int child_fd_mode(int fd, int expect_closed)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		if (expect_closed && errno == EBADF)
			return 0;
		fprintf(stderr, "sockapi_check child: fstat(%d): %s\n", fd,
			errname(errno));
		return 3;
	}
	if (expect_closed) {
		fprintf(stderr, "sockapi_check child: fd %d still open\n", fd);
		return 4;
	}
	if (!S_ISSOCK(st.st_mode)) {
		fprintf(stderr, "sockapi_check child: fd %d is not a socket\n",
			fd);
		return 5;
	}
	return 0;
}

/* --nb-connect PORT: a fresh process's first non-blocking connect
 * (check nb_connect_fresh); the exit code says what connect() returned.
 * It waits for the outcome so that the server side is not left with a
 * half-made connection. */
static int nb_connect_mode(const char *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int c = socket(AF_INET, SOCK_STREAM, 0), r;

	a.sin_addr = test_host();
	a.sin_port = htons((uint16_t)atoi(port));
	/* O_NONBLOCK set afterwards, as Python and Java do */
	if (c < 0 || fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) < 0)
		return NB_FRESH_ERROR;
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	if (r < 0 && errno != EINPROGRESS)
		return NB_FRESH_ERROR;
	(void)wait_fd(c, POLLOUT, 10000);
	close(c);
	return r == 0 ? NB_FRESH_ZERO : NB_FRESH_EINPROGRESS;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: sockapi_check [--list] [--only NAME]... [--skip NAME]... "
		"[--timeout SECS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *only[MAX_NAMES], *skip[MAX_NAMES];
	size_t n_only = 0, n_skip = 0, i;
	int list = 0, child_fd = -1, expect_closed = 0, failed = 0, a;
	struct sigaction sa;

	add_group(checks_basic);
	add_group(checks_io);
	add_group(checks_xfer);
	add_group(checks_opts);
	add_group(checks_fd);
	add_group(checks_fdnum);
	add_group(checks_poll);
	add_group(checks_epoll);
	add_group(checks_proc);
	add_group(checks_bufs);
	add_group(checks_oob);

	for (a = 1; a < argc; a++) {
		const char *arg = argv[a];
		const char *val = a + 1 < argc ? argv[a + 1] : NULL;

		if (strcmp(arg, "--list") == 0) {
			list = 1;
		} else if (strcmp(arg, "--expect-closed") == 0) {
			expect_closed = 1;
		} else if (!val) {
			usage();
		} else if (strcmp(arg, "--only") == 0 && n_only < MAX_NAMES) {
			only[n_only++] = val;
			a++;
		} else if (strcmp(arg, "--skip") == 0 && n_skip < MAX_NAMES) {
			skip[n_skip++] = val;
			a++;
		} else if (strcmp(arg, "--timeout") == 0) {
			timeout_s = (unsigned)atoi(val);
			if (timeout_s == 0)
				usage();
			a++;
		} else if (strcmp(arg, "--nb-connect") == 0) {
			return nb_connect_mode(val);
		} else if (strcmp(arg, "--child-fd") == 0) {
			child_fd = atoi(val);
			a++;
		} else {
			usage();
		}
	}
	if (child_fd >= 0)
		return child_fd_mode(child_fd, expect_closed);

	if (list) {
		for (i = 0; i < n_all; i++)
			printf("%-24s %s\n", all[i]->name, all[i]->what);
		return 0;
	}

	for (i = 0; i < n_all; i++)
		selected[i] = n_only == 0;
	for (i = 0; i < n_only; i++) {
		ssize_t k = find(only[i]);

		if (k < 0) {
			fprintf(stderr, "sockapi_check: no check named %s\n",
				only[i]);
			return 2;
		}
		selected[k] = 1;
	}
	for (i = 0; i < n_skip; i++) {
		ssize_t k = find(skip[i]);

		if (k < 0) {
			fprintf(stderr, "sockapi_check: no check named %s\n",
				skip[i]);
			return 2;
		}
		selected[k] = 0;
	}

	setvbuf(stdout, NULL, _IOLBF, 0);
	sigpipe_ignore();
	usr1_install();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);

	for (i = 0; i < n_all; i++) {
		int rc;

		if (!selected[i])
			continue;
		result_reset();
		fflush(stdout);
		running = i;
		alarm(timeout_s);
		rc = all[i]->fn();
		alarm(0);
		running = (size_t)-1;
		sigpipe_ignore();
		if (rc == 0 && result_reason()[0] == '\0') {
			if (result_trace()[0])
				printf("%s: ok (%s)\n", all[i]->name,
				       result_trace());
			else
				printf("%s: ok\n", all[i]->name);
		} else {
			failed++;
			printf("%s: FAILED (%s)", all[i]->name,
			       result_reason()[0] ? result_reason()
						  : "no reason given");
			if (result_trace()[0])
				printf(" [%s]", result_trace());
			printf("\n");
		}
		fflush(stdout);
	}
	return failed ? 1 : 0;
}
