/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SO_SNDBUF / SO_RCVBUF: the values getsockopt() reports for what was set
 * (Linux doubles a request, with floors and the net.core.[rw]mem_max caps)
 * before connect and listen, after connect, on accepted sockets, and when
 * set on an established connection.
 *
 * The kernel's constants (its floors, the sysctl caps) are never written
 * here: the native run prints what Linux did, the preloaded run must print
 * the same.
 */

#include "util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#define KiB 1024

/* getsockopt of an int: the value, or -1000 - errno. */
static int get_int(int fd, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, name, &v, &len) < 0)
		return -1000 - errno;
	return v;
}

/* Set SO_SNDBUF and SO_RCVBUF (or their FORCE forms) to v. */
static int set_bufs(int fd, int v, int force)
{
	if (setsockopt(fd, SOL_SOCKET, force ? SO_SNDBUFFORCE : SO_SNDBUF, &v, sizeof(v)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, force ? SO_RCVBUFFORCE : SO_RCVBUF, &v, sizeof(v)) < 0)
		return -1;
	return 0;
}

/* The larger of net.core.wmem_max and rmem_max, or 0 if unreadable. */
static long sysctl_max(void)
{
	const char *files[] = { "/proc/sys/net/core/wmem_max", "/proc/sys/net/core/rmem_max" };
	long best = 0;

	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "r");
		long v = 0;

		if (!f)
			continue;
		if (fscanf(f, "%ld", &v) == 1 && v > best)
			best = v;
		fclose(f);
	}
	return best;
}

/*
 * A connected pair whose listener and client got SO_SNDBUF and SO_RCVBUF
 * = v (FORCE forms if force) before listen() and connect().  *before gets
 * the client's values before connect, as "snd/rcv".  0, or -1 after
 * fail() (*set_err: the set failed with that errno, no pair made).
 */
static int pair_open_bufs(struct pair *p, int *l, int v, int force, char *before, size_t blen,
			  int *set_err)
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);

	p->c = p->s = -1;
	*set_err = 0;
	*l = socket(AF_INET, SOCK_STREAM, 0);
	p->c = socket(AF_INET, SOCK_STREAM, 0);
	if (*l < 0 || p->c < 0)
		return fail("socket: %s", errname(errno));
	if (set_bufs(*l, v, force) < 0 || set_bufs(p->c, v, force) < 0) {
		*set_err = errno;
		return 0;
	}
	snprintf(before, blen, "%d/%d", get_int(p->c, SO_SNDBUF), get_int(p->c, SO_RCVBUF));
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr = test_host();
	if (bind(*l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*l, 4) < 0 ||
	    getsockname(*l, (struct sockaddr *)&a, &alen) < 0)
		return fail("listener: %s", errname(errno));
	if (connect(p->c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return fail("connect: %s", errname(errno));
	if (wait_fd(*l, POLLIN, 10000) <= 0)
		return fail("listener not readable within 10 s");
	p->s = accept(*l, NULL, NULL);
	if (p->s < 0)
		return fail("accept: %s", errname(errno));
	return 0;
}

/* "snd/rcv" of fd. */
static const char *bufs_of(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "%d/%d", get_int(fd, SO_SNDBUF), get_int(fd, SO_RCVBUF));
	return buf;
}

/*
 * One requested value: what a fresh socket, the client before and after
 * connect, the accepted socket (inherited from the listener) and the
 * listener report must all agree, as on Linux; and an established
 * connection set to it afterwards reports the same.
 */
static int one_value(const char *tag, int v, int force)
{
	struct pair p = { -1, -1 }, q = { -1, -1 };
	int l = -1, rc = -1, err, fresh;
	char before[48], client[48], accepted[48], listener[48], later[48], want[48];

	fresh = socket(AF_INET, SOCK_STREAM, 0);
	if (fresh < 0)
		FAIL_ERRNO("socket");
	if (set_bufs(fresh, v, force) < 0) {
		err = errno;
		note("%s:%s", tag, errname(err));
		/* A connected socket refuses it the same way. */
		if (pair_open(&q) < 0)
			goto out;
		if (set_bufs(q.c, v, force) == 0 || errno != err)
			FAIL("%s: when connected: %s", tag, errname(errno));
		rc = 0;
		goto out;
	}
	bufs_of(fresh, want, sizeof(want));
	if (pair_open_bufs(&p, &l, v, force, before, sizeof(before), &err) < 0)
		goto out;
	if (err)
		FAIL("%s: set on a fresh socket worked, then %s", tag, errname(err));
	bufs_of(p.c, client, sizeof(client));
	bufs_of(p.s, accepted, sizeof(accepted));
	bufs_of(l, listener, sizeof(listener));
	note("%s:%s", tag, want);
	if (strcmp(before, want) || strcmp(client, want) || strcmp(accepted, want) ||
	    strcmp(listener, want))
		FAIL("%s: before connect %s, connected %s, accepted %s, listener %s", tag, before,
		     client, accepted, listener);
	/* Set on an established connection (made with the defaults). */
	if (pair_open(&q) < 0)
		goto out;
	if (set_bufs(q.c, v, force) < 0 || set_bufs(q.s, v, force) < 0)
		FAIL("%s: set when connected: %s", tag, errname(errno));
	bufs_of(q.s, later, sizeof(later));
	if (strcmp(bufs_of(q.c, client, sizeof(client)), want) || strcmp(later, want))
		FAIL("%s: set when connected: client %s, accepted %s", tag, client, later);
	rc = 0;
out:
	xclose(&fresh);
	xclose(&l);
	pair_close(&p);
	pair_close(&q);
	return rc;
}

static int check_sockbuf_values(void)
{
	static const int vals[] = { 0, 1, 1000, 4096, 100000, -1 };
	long max = sysctl_max();
	int above = max > 0 && max < (1 << 29) ? (int)max + 1000 : 1 << 29;
	char tag[32];

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		snprintf(tag, sizeof(tag), "%d", vals[i]);
		if (one_value(tag, vals[i], 0) < 0)
			return -1;
	}
	if (one_value("max+1000", above, 0) < 0)
		return -1;
	/* Without CAP_NET_ADMIN both say EPERM; with it, the caps do not
	 * apply. */
	if (one_value("force:4096", 4096, 1) < 0 || one_value("force:max+1000", above, 1) < 0 ||
	    one_value("force:-1", -1, 1) < 0)
		return -1;
	return 0;
}

const struct check checks_bufs[] = {
	{ "sockbuf_values", check_sockbuf_values,
	  "SO_SNDBUF/SO_RCVBUF as Linux reports them: fresh, connected, accepted, set later" },
	{ NULL, NULL, NULL },
};
