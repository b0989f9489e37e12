/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Bulk transfer checks: sendfile from a regular file to a socket, splice
 * from a socket into a pipe, and a checksummed transfer in both
 * directions at once (two writer threads, random write sizes).
 */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#define SENDFILE_BYTES (1024 * 1024)
#define SPLICE_BYTES 100000
#define BIDIR_BYTES (4 * 1024 * 1024)

/* A reader thread: count and hash everything until EOF. */
struct sink {
	int fd;
	uint64_t bytes;
	uint64_t hash;
	int err; /* errno, ETIMEDOUT, or 0 */
};

static void *sink_run(void *v)
{
	struct sink *k = v;
	static __thread char buf[65536];
	int64_t end = now_ms() + 15000;

	k->hash = FNV_INIT;
	for (;;) {
		ssize_t n = recv(k->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			k->bytes += (uint64_t)n;
			k->hash = fnv1a(k->hash, buf, (size_t)n);
			continue;
		}
		if (n == 0)
			return NULL;
		if (errno != EAGAIN && errno != EINTR) {
			k->err = errno;
			return NULL;
		}
		if (now_ms() > end) {
			k->err = ETIMEDOUT;
			return NULL;
		}
		wait_fd(k->fd, POLLIN, 100);
	}
}

static int temp_file(void)
{
	const char *dir = getenv("TMPDIR");
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/sockapi.XXXXXX",
		 dir && dir[0] ? dir : "/tmp");
	fd = mkstemp(path);
	if (fd >= 0)
		unlink(path);
	return fd;
}

static int check_sendfile(void)
{
	struct pair p = { -1, -1 };
	struct sink k = { -1, 0, 0, 0 };
	pthread_t t;
	int started = 0, rc = -1, f = -1;
	char *data = NULL;
	uint64_t want;
	off_t off = 0;

	data = malloc(SENDFILE_BYTES);
	if (!data)
		FAIL("malloc");
	pattern_fill(21, 0, data, SENDFILE_BYTES);
	want = fnv1a(FNV_INIT, data, SENDFILE_BYTES);
	f = temp_file();
	if (f < 0)
		FAIL_ERRNO("mkstemp");
	if (write(f, data, SENDFILE_BYTES) != SENDFILE_BYTES)
		FAIL_ERRNO("write temp file");
	if (pair_open(&p) < 0)
		goto out;
	k.fd = p.s;
	if (pthread_create(&t, NULL, sink_run, &k) != 0)
		FAIL("pthread_create");
	started = 1;
	while (off < SENDFILE_BYTES) {
		ssize_t n = sendfile(p.c, f, &off, (size_t)(SENDFILE_BYTES - off));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			FAIL("sendfile: %zd %s", n, errname(errno));
	}
	note("sent=%lld", (long long)off);
	if (shutdown(p.c, SHUT_WR) < 0)
		FAIL_ERRNO("shutdown");
	pthread_join(t, NULL);
	started = 0;
	if (k.err)
		FAIL("receiver: %s", errname(k.err));
	note("received=%llu", (unsigned long long)k.bytes);
	if (k.bytes != SENDFILE_BYTES || k.hash != want)
		FAIL("checksum differs");
	note("checksum ok");
	rc = 0;
out:
	if (started) {
		shutdown(p.s, SHUT_RDWR);
		pthread_join(t, NULL);
	}
	pair_close(&p);
	xclose(&f);
	free(data);
	return rc;
}

struct source {
	int fd;
	uint32_t seed;
	uint64_t bytes;
	int random_sizes;
	int err;
};

static void *source_run(void *v)
{
	struct source *s = v;
	static __thread char buf[65536];
	uint32_t rs = s->seed * 2654435761u + 1;
	uint64_t off = 0;

	while (off < s->bytes) {
		size_t len = sizeof(buf);
		ssize_t n;

		if (s->random_sizes)
			len = 1 + rnd32(&rs) % sizeof(buf);
		if (len > s->bytes - off)
			len = (size_t)(s->bytes - off);
		pattern_fill(s->seed, off, buf, len);
		n = send(s->fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			s->err = n < 0 ? errno : EIO;
			return NULL;
		}
		off += (uint64_t)n; /* a short send: resend the rest */
	}
	if (shutdown(s->fd, SHUT_WR) < 0)
		s->err = errno;
	return NULL;
}

static int check_splice(void)
{
	struct pair p = { -1, -1 };
	struct source src = { -1, 31, SPLICE_BYTES, 1, 0 };
	int pp[2] = { -1, -1 }, started = 0, rc = -1;
	static char buf[65536];
	uint64_t got = 0;
	pthread_t t;

	if (pipe(pp) < 0)
		FAIL_ERRNO("pipe");
	if (pair_open(&p) < 0)
		goto out;
	src.fd = p.c;
	if (pthread_create(&t, NULL, source_run, &src) != 0)
		FAIL("pthread_create");
	started = 1;
	for (;;) {
		ssize_t n, m;

		if (wait_fd(p.s, POLLIN, 10000) <= 0)
			FAIL("no data within 10 s");
		n = splice(p.s, NULL, pp[1], NULL, sizeof(buf), SPLICE_F_MOVE);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			FAIL("splice: %s", errname(errno));
		if (n == 0)
			break;
		for (m = 0; m < n;) {
			ssize_t r = read(pp[0], buf + m, (size_t)(n - m));

			if (r <= 0)
				FAIL("pipe read: %zd %s", r, errname(errno));
			m += r;
		}
		if (pattern_check(31, got, buf, (size_t)n) >= 0)
			FAIL("spliced data differs at %llu",
			     (unsigned long long)got);
		got += (uint64_t)n;
	}
	pthread_join(t, NULL);
	started = 0;
	if (src.err)
		FAIL("sender: %s", errname(src.err));
	note("spliced=%llu data ok", (unsigned long long)got);
	if (got != SPLICE_BYTES)
		FAIL("spliced %llu bytes", (unsigned long long)got);
	rc = 0;
out:
	if (started) {
		shutdown(p.c, SHUT_RDWR);
		pthread_join(t, NULL);
	}
	pair_close(&p);
	xclose(&pp[0]);
	xclose(&pp[1]);
	return rc;
}

static int check_bidir(void)
{
	struct pair p = { -1, -1 };
	struct source a = { -1, 41, BIDIR_BYTES, 1, 0 };
	struct source b = { -1, 42, BIDIR_BYTES, 1, 0 };
	static char buf[65536];
	pthread_t ta, tb;
	int na = 0, nb = 0, rc = -1, i;
	uint64_t got[2] = { 0, 0 };
	int eof[2] = { 0, 0 };
	int64_t end = now_ms() + 15000;

	if (pair_open(&p) < 0)
		goto out;
	a.fd = p.c;
	b.fd = p.s;
	if (pthread_create(&ta, NULL, source_run, &a) != 0)
		FAIL("pthread_create");
	na = 1;
	if (pthread_create(&tb, NULL, source_run, &b) != 0)
		FAIL("pthread_create");
	nb = 1;
	/* Read both ends here: what the client sent arrives at the server
	 * (seed 41), and the server's stream at the client (seed 42). */
	while (!eof[0] || !eof[1]) {
		struct pollfd pf[2] = { { p.s, POLLIN, 0 }, { p.c, POLLIN, 0 } };

		if (now_ms() > end)
			FAIL("not done within 15 s (%llu and %llu bytes)",
			     (unsigned long long)got[0],
			     (unsigned long long)got[1]);
		if (poll(pf, 2, 100) < 0 && errno != EINTR)
			FAIL_ERRNO("poll");
		for (i = 0; i < 2; i++) {
			uint32_t seed = i == 0 ? 41 : 42;
			ssize_t n;

			if (eof[i])
				continue;
			n = recv(pf[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n == 0) {
				eof[i] = 1;
				continue;
			}
			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				FAIL("recv: %s", errname(errno));
			}
			if (pattern_check(seed, got[i], buf, (size_t)n) >= 0)
				FAIL("data differs in stream %d near %llu", i,
				     (unsigned long long)got[i]);
			got[i] += (uint64_t)n;
		}
	}
	note("c->s=%llu s->c=%llu", (unsigned long long)got[0],
	     (unsigned long long)got[1]);
	if (got[0] != BIDIR_BYTES || got[1] != BIDIR_BYTES)
		FAIL("short transfer");
	note("data ok");
	rc = 0;
out:
	if (rc < 0 && p.c >= 0) {
		shutdown(p.c, SHUT_RDWR);
		shutdown(p.s, SHUT_RDWR);
	}
	if (na)
		pthread_join(ta, NULL);
	if (nb)
		pthread_join(tb, NULL);
	if (rc == 0 && (a.err || b.err))
		rc = fail("sender: %s %s", errname(a.err), errname(b.err));
	pair_close(&p);
	return rc;
}

const struct check checks_xfer[] = {
	{ "sendfile", check_sendfile,
	  "sendfile 1 MiB from a temp file to a socket, checksummed" },
	{ "splice", check_splice, "splice from a socket into a pipe" },
	{ "bidir_4m", check_bidir,
	  "4 MiB each way at once, two writer threads, random sizes" },
	{ NULL, NULL, NULL },
};
