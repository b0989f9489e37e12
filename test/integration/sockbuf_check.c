/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sockbuf_check: what SO_SNDBUF and SO_RCVBUF bound on SDP, through the
 * engine's API (include/sdp.h), in one process, on TEST_HOST (default
 * 127.0.0.1), over TEST_TRANSPORT if set.  Run by sockbufs.sh; sockapi_check compares the values and
 * the behaviours Linux shares with the preload.  The cases are SDP's own:
 *
 *   regrow    SO_RCVBUF shrunk on an established connection bounds what
 *             a stalled sender pushes, grown again lets more through
 *             (withheld receive buffers posted again);
 *   blocked   a blocking sender whose reader does not read keeps at most
 *             SO_SNDBUF bytes in its send buffers (SIOCOUTQ) and poll()
 *             gives no POLLOUT meanwhile; everything arrives once read;
 *   small     both ends at the smallest buffers, 2 MiB each way at once,
 *             large blocking sends (Read Zcopy) against small reads (the
 *             staging buffer): intact, and no staged read larger than the
 *             reader's SO_RCVBUF.
 *
 *   sockbuf_check [CASE]...   (all by default)
 *
 * One line per case ("ok   NAME: ..." or "FAIL NAME: ..."); exit 0 when
 * all passed, 1 otherwise.  Every wait is bounded (times TEST_SLOW).
 */

#include "sdp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KiB 1024L
#define MiB (1024L * 1024L)

static struct in_addr host;
static int slow = 1;
static char why[256];

static int failf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return -1;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Byte i of the stream seeded s. */
static uint8_t pat(uint32_t s, uint64_t i)
{
	uint64_t x = (i >> 2) * 0x9e3779b97f4a7c15ull + s;

	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (i & 3)));
}

static void pat_fill(uint32_t s, uint64_t off, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pat(s, off + i);
}

static bool pat_ok(uint32_t s, uint64_t off, const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pat(s, off + i))
			return false;
	return true;
}

static int set_int(int sd, int level, int name, int v)
{
	return sdp_setsockopt(sd, level, name, &v, sizeof(v));
}

static int get_int(int sd, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	return sdp_getsockopt(sd, SOL_SOCKET, name, &v, &len) ? -1 : v;
}

/* poll one sd: revents, 0 on timeout. */
static int wait_sd(int sd, short events, int ms)
{
	struct pollfd p = { .fd = sd, .events = events };

	return sdp_poll(&p, 1, ms) > 0 ? p.revents : 0;
}

struct pair {
	int c, s;
};

/* A connected pair; both ends get SO_SNDBUF and SO_RCVBUF = bufs before
 * connect/listen if bufs >= 0.  Ends blocking. */
static int pair_open(struct pair *p, int bufs)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = host };
	socklen_t alen = sizeof(a);
	int l = sdp_socket(AF_INET, SOCK_STREAM, 0);
	int ret;

	p->s = -1;
	p->c = sdp_socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || p->c < 0)
		return failf("sdp_socket: %s", strerror(-(l < 0 ? l : p->c)));
	if (bufs >= 0 &&
	    (set_int(l, SOL_SOCKET, SO_SNDBUF, bufs) || set_int(l, SOL_SOCKET, SO_RCVBUF, bufs) ||
	     set_int(p->c, SOL_SOCKET, SO_SNDBUF, bufs) ||
	     set_int(p->c, SOL_SOCKET, SO_RCVBUF, bufs)))
		return failf("setsockopt before connect");
	ret = sdp_bind(l, (struct sockaddr *)&a, sizeof(a));
	if (!ret)
		ret = sdp_listen(l, 4);
	if (!ret)
		ret = sdp_getsockname(l, (struct sockaddr *)&a, &alen);
	if (!ret)
		ret = sdp_connect(p->c, (struct sockaddr *)&a, sizeof(a));
	if (!ret)
		ret = p->s = sdp_accept(l, NULL, NULL, 0);
	sdp_close(l);
	if (ret < 0)
		return failf("connecting: %s", strerror(-ret));
	const char *t = sdp_transport_name(p->c), *want = getenv("TEST_TRANSPORT");

	if (want && *want && (!t || strcmp(t, want)))
		return failf("the connection runs over %s, not %s", t ? t : "nothing", want);
	return 0;
}

static void pair_close(struct pair *p)
{
	if (p->c >= 0)
		sdp_close(p->c);
	if (p->s >= 0)
		sdp_close(p->s);
	p->c = p->s = -1;
}

/* Reads everything the peer sent so far (nothing more within quiet_ms),
 * checked against stream seed; *rcvd counts. */
static int drain(int sd, uint32_t seed, uint64_t *rcvd, int quiet_ms)
{
	static uint8_t buf[64 * KiB];

	for (;;) {
		ssize_t n = sdp_recv(sd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			if (!pat_ok(seed, *rcvd, buf, (size_t)n))
				return failf("the stream differs after %llu bytes",
					     (unsigned long long)*rcvd);
			*rcvd += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return failf("early EOF");
		if (n != -EAGAIN)
			return failf("recv: %s", strerror((int)-n));
		if (!(wait_sd(sd, POLLIN, quiet_ms) & POLLIN))
			return 0;
	}
}

/* Non-blocking sends until no room comes back for a while, then the
 * reader takes all of it: the bytes sent, or -1. */
static long round_trip(struct pair *p, uint64_t *sent, uint64_t *rcvd)
{
	static uint8_t buf[16 * KiB];
	int quiet = 300 * slow;
	long moved = 0;

	for (;;) {
		pat_fill(5, *sent, buf, sizeof(buf));
		ssize_t n = sdp_send(p->c, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n > 0) {
			*sent += (uint64_t)n;
			moved += n;
			if (moved > 64 * MiB)
				return failf("64 MiB sent and still room");
			continue;
		}
		if (n != -EAGAIN)
			return failf("send: %s", strerror((int)-n));
		if (!(wait_sd(p->c, POLLOUT, quiet) & POLLOUT))
			break;
	}
	for (int64_t end = now_ms() + 10000L * slow; *rcvd < *sent;) {
		if (drain(p->s, 5, rcvd, 100))
			return -1;
		if (now_ms() > end)
			return failf("%llu sent, %llu received in %d s", (unsigned long long)*sent,
				     (unsigned long long)*rcvd, 10 * slow);
	}
	return moved;
}

static int case_regrow(char *info, size_t ilen)
{
	struct pair p;
	uint64_t sent = 0, rcvd = 0;
	long shrunk = 0, grown = 0;
	int rc = -1;

	if (pair_open(&p, -1))
		goto out;
	if (set_int(p.c, SOL_SOCKET, SO_SNDBUF, 4096) || set_int(p.s, SOL_SOCKET, SO_RCVBUF, 4096)) {
		failf("setsockopt");
		goto out;
	}
	/* The first round uses what was granted at the handshake. */
	for (int i = 0; i < 3; i++) {
		shrunk = round_trip(&p, &sent, &rcvd);
		if (shrunk < 0)
			goto out;
	}
	if (set_int(p.s, SOL_SOCKET, SO_RCVBUF, 4 * MiB)) {
		failf("setsockopt");
		goto out;
	}
	/* A round ends when the sender sees no room for a while: on a busy
	 * host the credits may come later and go to the next round. */
	for (int i = 0; i < 4 && grown < 64 * KiB; i++) {
		long moved = round_trip(&p, &sent, &rcvd);

		if (moved < 0)
			goto out;
		grown = moved > grown ? moved : grown;
	}
	snprintf(info, ilen, "a round moved %ld bytes shrunk, up to %ld grown", shrunk, grown);
	if (shrunk >= 64 * KiB || grown < 64 * KiB) {
		failf("%s", info);
		goto out;
	}
	rc = 0;
out:
	pair_close(&p);
	return rc;
}

struct sender {
	int sd;
	long total;
	size_t chunk;
	uint32_t seed;
	int err;
	long done;
};

static void *sender_run(void *v)
{
	struct sender *w = v;
	uint8_t *buf = malloc(w->chunk);

	if (!buf) {
		w->err = ENOMEM;
		return NULL;
	}
	while (w->done < w->total) {
		size_t n = (size_t)(w->total - w->done) < w->chunk ? (size_t)(w->total - w->done)
								    : w->chunk;

		pat_fill(w->seed, (uint64_t)w->done, buf, n);
		ssize_t r = sdp_send(w->sd, buf, n, MSG_NOSIGNAL);

		if (r < 0) {
			w->err = (int)-r;
			break;
		}
		/* A short blocking send leaves the rest for the next call. */
		__atomic_add_fetch(&w->done, r, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

static int case_blocked(char *info, size_t ilen)
{
	struct pair p;
	struct sender w = { .total = 2 * MiB, .chunk = 64 * KiB, .seed = 7 };
	pthread_t t;
	bool started = false;
	uint64_t rcvd = 0;
	int rc = -1, outq = 0, sndbuf;

	if (pair_open(&p, -1))
		goto out;
	if (set_int(p.c, SOL_SOCKET, SO_SNDBUF, 16384) || set_int(p.s, SOL_SOCKET, SO_RCVBUF, 4096)) {
		failf("setsockopt");
		goto out;
	}
	sndbuf = get_int(p.c, SO_SNDBUF);
	w.sd = p.c;
	if (pthread_create(&t, NULL, sender_run, &w)) {
		failf("pthread_create");
		goto out;
	}
	started = true;
	/* The sender fills what the receiver granted, then blocks: its
	 * progress stops, and then there is no room (a sender only slow to
	 * run may still see some).  What is queued never exceeds SO_SNDBUF. */
	int ev = POLLOUT, maxq = 0;

	for (int64_t end = now_ms() + 10000L * slow; ev & POLLOUT;) {
		long last = __atomic_load_n(&w.done, __ATOMIC_RELAXED);

		for (int i = 0; i < 30; i++) {
			outq = sdp_nwrite(p.c);
			maxq = outq > maxq ? outq : maxq;
			usleep(10000 * (useconds_t)slow);
		}
		if (__atomic_load_n(&w.done, __ATOMIC_RELAXED) == last)
			ev = wait_sd(p.c, POLLOUT, 0);
		if (now_ms() > end)
			break;
	}
	snprintf(info, ilen, "SO_SNDBUF %d: at most %d bytes queued, %d while blocked%s", sndbuf,
		 maxq, outq, ev & POLLOUT ? ", POLLOUT" : "");
	if (maxq > sndbuf || (ev & POLLOUT)) {
		failf("%s", info);
		goto out;
	}
	for (int64_t end = now_ms() + 30000L * slow; rcvd < (uint64_t)w.total;) {
		if (drain(p.s, 7, &rcvd, 100))
			goto out;
		if (now_ms() > end) {
			failf("%llu of %ld bytes arrived", (unsigned long long)rcvd, w.total);
			goto out;
		}
	}
	rc = 0;
out:
	if (started) {
		if (rc)
			sdp_shutdown(p.c, SHUT_RDWR);
		pthread_join(t, NULL);
		if (!rc && w.err)
			rc = failf("sender: %s", strerror(w.err));
	}
	pair_close(&p);
	return rc;
}

/* One direction of the small case: 1000-byte reads until EOF. */
struct reader {
	int sd;
	uint32_t seed;
	uint64_t got;
	int err;
	bool bad;
};

static void *reader_run(void *v)
{
	struct reader *r = v;
	uint8_t buf[1000];

	for (;;) {
		ssize_t n = sdp_recv(r->sd, buf, sizeof(buf), 0);

		if (n == 0)
			return NULL;
		if (n < 0) {
			r->err = (int)-n;
			return NULL;
		}
		if (!pat_ok(r->seed, r->got, buf, (size_t)n))
			r->bad = true;
		r->got += (uint64_t)n;
	}
}

static int case_small(char *info, size_t ilen)
{
	struct pair p;
	struct sender w[2] = { { .total = 2 * MiB, .chunk = 512 * KiB, .seed = 11 },
			       { .total = 2 * MiB, .chunk = 512 * KiB, .seed = 12 } };
	struct reader r[2] = { { .seed = 11 }, { .seed = 12 } };
	pthread_t tw[2], tr[2];
	int nw = 0, nr = 0, rc = -1, rcvbuf;
	struct sdp_stats before, after;

	if (pair_open(&p, 1))
		goto out;
	rcvbuf = get_int(p.s, SO_RCVBUF);
	w[0].sd = p.c;
	w[1].sd = p.s;
	r[0].sd = p.s;
	r[1].sd = p.c;
	sdp_get_stats(&before);
	for (; nr < 2; nr++)
		if (pthread_create(&tr[nr], NULL, reader_run, &r[nr]))
			goto out;
	for (; nw < 2; nw++)
		if (pthread_create(&tw[nw], NULL, sender_run, &w[nw]))
			goto out;
	while (nw > 0) {
		pthread_join(tw[--nw], NULL);
		sdp_shutdown(w[nw].sd, SHUT_WR);
	}
	while (nr > 0)
		pthread_join(tr[--nr], NULL);
	sdp_get_stats(&after);
	uint64_t reads = after.zcopy_reads - before.zcopy_reads;
	uint64_t bytes = after.zcopy_bytes_received - before.zcopy_bytes_received;

	snprintf(info, ilen, "SO_RCVBUF %d: %llu and %llu bytes; %llu bytes zero-copy read in %llu reads",
		 rcvbuf, (unsigned long long)r[0].got, (unsigned long long)r[1].got,
		 (unsigned long long)bytes, (unsigned long long)reads);
	for (int i = 0; i < 2; i++) {
		if (w[i].err || r[i].err || r[i].bad || r[i].got != (uint64_t)w[i].total) {
			failf("%s; sender %s, reader %s%s", info, strerror(w[i].err),
			      strerror(r[i].err), r[i].bad ? ", stream differs" : "");
			goto out;
		}
	}
	/* Staged reads of at most SO_RCVBUF each (the only kind here: the
	 * reads are far below the zero-copy threshold). */
	if (bytes && reads * (uint64_t)rcvbuf < bytes) {
		failf("%s: a staged read was larger than SO_RCVBUF", info);
		goto out;
	}
	rc = 0;
out:
	while (nw > 0)
		pthread_join(tw[--nw], NULL);
	if (nr > 0) {
		sdp_shutdown(p.c, SHUT_RDWR);
		sdp_shutdown(p.s, SHUT_RDWR);
	}
	while (nr > 0)
		pthread_join(tr[--nr], NULL);
	pair_close(&p);
	return rc;
}

static const struct {
	const char *name;
	int (*fn)(char *info, size_t ilen);
} cases[] = {
	{ "regrow", case_regrow },
	{ "blocked", case_blocked },
	{ "small", case_small },
};

int main(int argc, char **argv)
{
	const char *h = getenv("TEST_HOST"), *s = getenv("TEST_SLOW");
	int failed = 0;

	if (s && atoi(s) > 0)
		slow = atoi(s);
	if (inet_pton(AF_INET, h && *h ? h : "127.0.0.1", &host) != 1) {
		fprintf(stderr, "sockbuf_check: TEST_HOST must be an IPv4 address\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool want = argc < 2;
		char info[256] = "";

		for (int a = 1; a < argc; a++)
			want |= strcmp(argv[a], cases[i].name) == 0;
		if (!want)
			continue;
		why[0] = '\0';
		if (cases[i].fn(info, sizeof(info))) {
			printf("FAIL %s: %s\n", cases[i].name, why);
			failed = 1;
		} else {
			printf("ok   %s: %s\n", cases[i].name, info);
		}
		fflush(stdout);
	}
	return failed;
}
