/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * zcopy_check: zero copy through the public engine API (include/sdp.h):
 * Read Zcopy (SrcAvail -> RDMA read -> RdmaRdCompl), Write Zcopy in
 * Pipelined mode (SinkAvail -> RDMA write -> RdmaWrCompl) and Transaction
 * mode (a request riding on the reply's SinkAvail).  Run by zcopy.sh.
 *
 *   zcopy_check [--only NAME[,NAME...]] [--small] [--seed N] [--list]
 *
 * The process forks its servers first (before either side starts the
 * engine's threads): one server that serves every ordinary case, one
 * connection after the other, and one "mortal" server per peer-death case,
 * which serves that case and is killed by it.  The parent is the client.
 * Each case is one SDP connection: the client sends a 16-byte case header
 * (magic, case number, seed), then both sides play their part of the case
 * on seeded streams (tools/xfer.h: byte i of a stream is a function of the
 * seed and i, so every received chunk is checked byte for byte where it
 * lands), then both shut down writing and wait for end of stream, so no
 * byte may be missing or extra.
 *
 * Each side takes its engine counters (sdp_get_stats) before and after its
 * part; the server sends its deltas and verdict back over a pipe, and the
 * client checks both: that the expected path was taken (a zero-copy-sized
 * send goes by RDMA read or by RDMA write into an advert, never by Bcopy
 * but for the tail the rules allow: check_dir()), that what one side says
 * the peer RDMA-read or wrote matches what the peer says it got, and the
 * mode changes, piggybacks and cancels a case is about.
 *
 * The sizes follow the tunables this process runs with: zcopy_thresh as
 * the engine has it (a new socket's SDP_ZCOPY_THRESH), zcopy_max and
 * zcopy_stage from SDP_ZCOPY_MAX / _STAGE or their defaults, and whether
 * Transaction mode is on (SDP_TRANS_HOLD_US not 0).  With zcopy_thresh 0
 * every case expects Bcopy.
 *
 * One line per case ("ok   NAME: ..." or "FAIL NAME: ..."); exit 0 when
 * every case passed, 1 otherwise (2: bad usage).  Every wait is bounded;
 * limits are multiplied by TEST_SLOW.
 */

#include "sdp.h"
#include "say.h"
#include "xfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define CASE_MAGIC 0x5a434b31u	/* "ZCK1" */
#define HDR_LEN 16
/* Bytes a SrcAvail may carry inline (Combined mode). */
#define MAX_INLINE 32

const char *say_prefix = "zcopy_check";

/* --- settings ------------------------------------------------------------ */

static struct in_addr host_addr;
static char host_str[INET_ADDRSTRLEN] = "127.0.0.1";
static const char *want_transport;	/* TEST_TRANSPORT, or NULL: no check */
static unsigned slow = 1;		/* TEST_SLOW */
static bool small_run;			/* --small: sanitizer builds */
static uint32_t base_seed = 20261121;

static size_t thresh;			/* zcopy_thresh, as a new socket has it */
static long thresh_env = -1;		/* SDP_ZCOPY_THRESH, -1 if not set */
/* The threshold the sizes of the cases are laid out around: zcopy_thresh,
 * or with zero copy off (every case expects Bcopy) any size would do. */
#define NOMINAL_THRESH 65536
static size_t sizes_th;
static size_t hold_us;			/* trans_hold_us (SDP_TRANS_HOLD_US) */
static bool trans_on = true;		/* it is not 0 */
static size_t zmax = 4 * MiB;		/* zcopy_max */
static size_t zstage = 256 * KiB;	/* zcopy_stage */
static size_t big;			/* the "large" transfer: 16 MiB */

static uint64_t now_ns(void)
{
	return xfer_now_ns();
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static const char *errname(long e)
{
	static __thread char buf[8][24];
	static __thread int k;
	char *b = buf[k++ % 8];

	if (e < 0)
		e = -e;
	switch (e) {
#define E(x) case x: return #x
	E(EPIPE); E(ECONNRESET); E(ECONNABORTED); E(EAGAIN); E(EINTR); E(ETIMEDOUT);
	E(ENOTCONN); E(EINVAL); E(ENOPROTOOPT); E(EPROTO); E(EBADF); E(ENOMEM);
	E(EIO); E(EFAULT); E(EMSGSIZE); E(ECONNREFUSED); E(EHOSTUNREACH); E(ENODEV);
#undef E
	default:
		snprintf(b, 24, "E#%ld", e);
		return b;
	}
}

/* --- counters ------------------------------------------------------------ */

#define NSTATS (sizeof(struct sdp_stats) / sizeof(uint64_t))

static void stats_sub(struct sdp_stats *d, const struct sdp_stats *a, const struct sdp_stats *b)
{
	uint64_t *pd = (uint64_t *)d;
	const uint64_t *pa = (const uint64_t *)a, *pb = (const uint64_t *)b;

	for (size_t i = 0; i < NSTATS; i++)
		pd[i] = pa[i] - pb[i];
}

/* The zero-copy counters that moved, for the case line. */
static void stats_text(char *out, size_t cap, const struct sdp_stats *d)
{
	size_t n = 0;

	out[0] = '\0';
#define S(f, name)                                                                        \
	if (d->f && n < cap)                                                              \
		n += (size_t)snprintf(out + n, cap - n, "%s%s=%" PRIu64, n ? " " : "", name, \
				      d->f);
	S(zcopy_offers, "offers");
	S(zcopy_bytes_sent, "sent");
	S(zcopy_refused, "refused");
	S(zcopy_cancels, "cancels");
	S(zcopy_reads, "reads");
	S(zcopy_bytes_received, "rcvd");
	S(zcopy_direct_bytes, "direct");
	S(zcopy_pulled, "pulled");
	S(zcopy_writes, "writes");
	S(zcopy_bytes_written, "written");
	S(zcopy_sink_adverts, "adverts");
	S(zcopy_sink_bytes, "sink");
	S(zcopy_sink_stale, "stale");
	S(zcopy_sink_cancels, "sink_cancels");
	S(zcopy_peer_adverts, "peer_adverts");
	S(mode_changes_sent, "mch_sent");
	S(mode_changes_received, "mch_rcvd");
	S(trans_piggybacks, "piggy");
	S(trans_misses, "misses");
	S(protocol_errors, "proto_err");
#undef S
	if (!n)
		snprintf(out, cap, "no zcopy");
}

/* --- watchdog -------------------------------------------------------------- */

/*
 * A thread, not alarm(): one case needs SIGALRM for itself.  Armed per
 * step; when a deadline passes the process says where it was and exits
 * (the client's servers die with it: PR_SET_PDEATHSIG).
 */
static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cond;
static uint64_t wd_deadline;
static unsigned wd_secs;
static char wd_what[160];

static void *wd_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd_lock);
	for (;;) {
		if (!wd_deadline) {
			pthread_cond_wait(&wd_cond, &wd_lock);
			continue;
		}
		uint64_t now = now_ns();

		if (now >= wd_deadline) {
			say("FAIL: timed out (%u s x TEST_SLOW %u) in: %s", wd_secs, slow, wd_what);
			_exit(1);
		}
		uint64_t d = wd_deadline;
		struct timespec ts = { .tv_sec = (time_t)(d / 1000000000ull),
				       .tv_nsec = (long)(d % 1000000000ull) };

		pthread_cond_timedwait(&wd_cond, &wd_lock, &ts);
	}
	return NULL;
}

static void watchdog_start(void)
{
	pthread_condattr_t ca;
	pthread_t t;
	sigset_t all, old;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&wd_cond, &ca);
	/* The watchdog takes no signal meant for the case threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_create(&t, NULL, wd_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_detach(t);
}

/* secs is scaled by TEST_SLOW; 0 disarms. */
static void watch(const char *what, unsigned secs)
{
	pthread_mutex_lock(&wd_lock);
	snprintf(wd_what, sizeof(wd_what), "%s", what);
	wd_secs = secs;
	wd_deadline = secs ? now_ns() + (uint64_t)secs * slow * 1000000000ull : 0;
	pthread_cond_signal(&wd_cond);
	pthread_mutex_unlock(&wd_lock);
}

/* --- one case's context -------------------------------------------------------- */

/*
 * What the sender of one direction did, for check_dir().  A blocking send
 * whose (first remaining) iovec element has at least the threshold goes
 * in zero-copy pieces while at least the threshold is left: SrcAvails
 * (RDMA read) of up to zcopy_max, or RDMA writes into the receiver's
 * adverts, of up to the advertised room.  What is left below the
 * threshold goes by Bcopy, or from the bounce buffer into an advert.
 */
struct dexp {
	uint64_t tx_bytes;	/* bytes sent in all */
	uint64_t large_sends;	/* zero-copy-sized sends (iovec elements) */
	uint64_t large_bytes;	/* their bytes */
	uint64_t exp_offers;	/* SrcAvails they make if none is written: zcopy_max pieces */
	uint64_t zc_bytes;	/* the bytes of those pieces (inline included) */
	uint64_t tail_max;	/* of large_bytes, the most that may go by Bcopy */
	bool staged;		/* the receiver's buffers were below its threshold */
	bool direct;		/* every receive buffer had room for a direct read */
};

struct zcase;

struct cctx {
	const struct zcase *zc;
	int idx;
	bool server;
	int sd;
	uint32_t seed;
	int go_fd;		/* client: write end; server: read end */
	pid_t peer_pid;		/* client of a peer-death case: the mortal server */
	struct sdp_stats st0;	/* at the start of the case */
	struct sdp_stats mine;	/* this side's deltas */
	struct sdp_stats peer;	/* client: the server's deltas */
	bool peer_ok;
	char peer_msg[900];
	pthread_mutex_t lock;	/* fails, why, info: two threads in bidir */
	int fails;
	char why[900];
	char info[400];
	/* What the client's part sent, for its check. */
	struct dexp x;
	int turns;		/* request/response cases: turns played */
};

/* Append to text (cap bytes), after sep (two characters) if it holds
 * something already: c->why or c->info, under c->lock. */
static void text_vappend(char *text, size_t cap, const char *sep, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
static void text_vappend(char *text, size_t cap, const char *sep, const char *fmt, va_list ap)
{
	size_t n = strlen(text);

	if (n && n < cap - 2) {
		memcpy(text + n, sep, 3);
		n += 2;
	}
	if (n < cap)
		vsnprintf(text + n, cap - n, fmt, ap);
}

static void failf(struct cctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct cctx *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->lock);
	va_start(ap, fmt);
	text_vappend(c->why, sizeof(c->why), "; ", fmt, ap);
	va_end(ap);
	c->fails++;
	pthread_mutex_unlock(&c->lock);
}

static void infof(struct cctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void infof(struct cctx *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->lock);
	va_start(ap, fmt);
	text_vappend(c->info, sizeof(c->info), ", ", fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&c->lock);
}

static void stats_now_delta(struct cctx *c, struct sdp_stats *d)
{
	struct sdp_stats now;

	sdp_get_stats(&now);
	stats_sub(d, &now, &c->st0);
}

/* --- the streams ------------------------------------------------------------ */

/* Client to server uses the case seed, server to client a derived one. */
static uint32_t seed_a2b(const struct cctx *c)
{
	return c->seed;
}

static uint32_t seed_b2a(const struct cctx *c)
{
	return xfer_reply_seed(c->seed);
}

static uint8_t *xalloc(size_t len)
{
	size_t al = (len + 4095) & ~(size_t)4095;
	uint8_t *p = aligned_alloc(4096, al ? al : 4096);

	if (p)
		memset(p, 0, al ? al : 4096);
	return p;
}

/*
 * A blocking send of len contiguous bytes at threshold th, read only
 * (nothing written into adverts): pieces of zcopy_max are offered while
 * at least th bytes are left; a tail below the threshold goes by Bcopy (a
 * piece of 32 bytes or less could not even be a SrcAvail: Combined mode
 * needs bytes to read beyond the inline ones).  Adds to *offers and
 * *zbytes (bytes in offered pieces).
 */
static void zc_expect(size_t len, size_t th, uint64_t *offers, uint64_t *zbytes)
{
	while (th && len >= th) {
		size_t p = len > zmax ? zmax : len;

		(*offers)++;
		*zbytes += p;
		len -= p;
	}
}

/*
 * The most bytes of that send that may go by Bcopy when the receiver may
 * also advertise buffers of room bytes or more (0: it never advertises):
 * each piece is a SrcAvail of min(left, zcopy_max) or a write of
 * min(left, room, zcopy_max), in any order, while at least th bytes are
 * left; the worst tail over every order.  A state "a reads and b writes
 * of full size taken" leaves left = len - a * zcopy_max - b * w; it ends
 * the send below th if the state before it still had th bytes or more.
 */
static uint64_t tail_max(uint64_t len, size_t th, size_t room)
{
	uint64_t w = room < zmax ? room : zmax, worst = 0;

	if (!th || len < th)
		return len;
	for (uint64_t a = 0; a * zmax <= len; a++) {
		for (uint64_t b = 0; a * zmax + b * w <= len; b++) {
			uint64_t left = len - a * zmax - b * w;

			if (left < th && left > worst &&
			    ((a && left + zmax >= th) || (b && left + w >= th)))
				worst = left;
			if (!w)
				break;
		}
	}
	return worst;
}

/* The sender of e sent len bytes in one blocking send (or one iovec
 * element of at least th) at threshold th, into a receiver whose adverts
 * have room bytes at least (0: none). */
static void expect_send(struct dexp *e, size_t len, size_t th, size_t room)
{
	e->tx_bytes += len;
	if (!th || len < th)
		return;
	e->large_sends++;
	e->large_bytes += len;
	e->tail_max += tail_max(len, th, room);
	zc_expect(len, th, &e->exp_offers, &e->zc_bytes);
}

/* Bytes sent that were not zero-copy-sized. */
static void expect_small(struct dexp *e, size_t len)
{
	e->tx_bytes += len;
}

/* The smallest room a receiver advertises whose receives ask for lo..hi
 * bytes at its threshold th (0: it never advertises). */
static size_t adv_room(size_t lo, size_t hi, size_t th)
{
	if (!th || hi < th)
		return 0;
	return lo > th ? lo : th;
}

/*
 * One blocking send of len bytes of g's stream; every byte must be taken
 * (no timeout, no signal: a short count is a failure).  0 or -errno.
 */
static int send_one(struct cctx *c, struct xgen *g, uint8_t *buf, size_t len, int flags,
		    const char *what)
{
	xgen_fill(g, buf, len);
	ssize_t n = sdp_send(c->sd, buf, len, flags | MSG_NOSIGNAL);

	if (n < 0) {
		failf(c, "%s: send(%zu): %s", what, len, errname(n));
		return (int)n;
	}
	if ((size_t)n != len) {
		failf(c, "%s: blocking send(%zu) returned %zd with no timeout or signal", what,
		      len, n);
		return -EIO;
	}
	return 0;
}

/* How a receiver cuts the stream. */
struct rxmode {
	size_t min, max;	/* recv sizes, uniform in [min, max] */
	uint64_t rng;
	int flags;		/* MSG_WAITALL... */
	bool part;		/* the stream goes on after total bytes */
	int iovcnt;		/* > 1: recvv over the buffer cut in pieces */
	const size_t *iovlens;	/* the pieces (iovcnt of them) */
	atomic_uint_fast64_t *progress;	/* bytes received so far, if wanted */
};

/*
 * Receive exactly total bytes of g's stream, checking each chunk where it
 * lands.  buf holds max bytes.  Returns 0, or -errno (0-byte EOF gives
 * -ENODATA) after failf().
 */
static int recv_stream(struct cctx *c, struct xgen *g, uint64_t total, struct rxmode *m,
		       uint8_t *buf, const char *what)
{
	uint64_t got = 0;

	while (got < total) {
		size_t want = m->min == m->max ? m->min : xrand_range(&m->rng, m->min, m->max);
		ssize_t n;

		/* MSG_WAITALL must not ask past the end of the stream, nor
		 * a read of one part of it (more may follow).  Otherwise
		 * the buffer keeps its size: its room decides whether the
		 * engine reads into it directly. */
		if ((m->flags & MSG_WAITALL || m->part) && want > total - got)
			want = (size_t)(total - got);
		if (m->iovcnt > 1) {
			want = 0;
			for (int i = 0; i < m->iovcnt; i++)
				want += m->iovlens[i];
			struct iovec iov[16];
			size_t off = 0;

			for (int i = 0; i < m->iovcnt; i++) {
				iov[i].iov_base = buf + off;
				iov[i].iov_len = m->iovlens[i];
				off += m->iovlens[i];
			}
			n = sdp_recvv(c->sd, iov, m->iovcnt, m->flags);
		} else {
			n = sdp_recv(c->sd, buf, want, m->flags);
		}
		if (n == -EINTR)
			continue;
		if (n < 0) {
			failf(c, "%s: recv after %" PRIu64 " of %" PRIu64 " bytes: %s", what, got,
			      total, errname(n));
			return (int)n;
		}
		if (n == 0) {
			failf(c, "%s: end of stream after %" PRIu64 " of %" PRIu64 " bytes", what,
			      got, total);
			return -ENODATA;
		}
		if ((m->flags & MSG_WAITALL) && (size_t)n != want) {
			failf(c, "%s: recv(%zu, MSG_WAITALL) returned %zd", what, want, n);
			return -EIO;
		}
		if ((uint64_t)n > total - got) {
			failf(c, "%s: %" PRIu64 " bytes more than were sent", what,
			      (uint64_t)n - (total - got));
			return -EIO;
		}
		size_t bad = xgen_check(g, buf, (size_t)n);

		if (bad != (size_t)n) {
			failf(c, "%s: DATA MISMATCH at stream offset %" PRIu64, what, got + bad);
			return -EIO;
		}
		got += (uint64_t)n;
		if (m->progress)
			atomic_store(m->progress, got);
	}
	return 0;
}

/*
 * The end of every case: shut down writing, then the peer's end of stream
 * must come with no byte after what was expected.
 */
static int finish(struct cctx *c)
{
	uint8_t b[256];
	int r = sdp_shutdown(c->sd, SHUT_WR);

	if (r) {
		failf(c, "shutdown: %s", errname(r));
		return r;
	}
	for (;;) {
		ssize_t n = sdp_recv(c->sd, b, sizeof(b), 0);

		if (n == 0)
			return 0;
		if (n == -EINTR)
			continue;
		if (n < 0) {
			failf(c, "waiting for end of stream: %s", errname(n));
			return (int)n;
		}
		failf(c, "%zd unexpected bytes after the stream", n);
		return -EIO;
	}
}

static void set_timeo(int sd, int opt, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000 };

	sdp_setsockopt(sd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

static int set_thresh(struct cctx *c, int v)
{
	int r = sdp_setsockopt(c->sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, sizeof(v));

	if (r)
		failf(c, "setsockopt(SOL_SDP, SDP_ZCOPY_THRESH, %d): %s", v, errname(r));
	return r;
}

/* Server side: wait for the client's go byte (a cancel case: the client's
 * send has returned).  Proceeds anyway after the limit, saying so. */
static void wait_go(struct cctx *c, unsigned secs)
{
	struct pollfd pf = { .fd = c->go_fd, .events = POLLIN };
	char b;
	int r;

	do
		r = poll(&pf, 1, (int)(secs * slow * 1000));
	while (r < 0 && errno == EINTR);
	if (r == 1 && read(c->go_fd, &b, 1) == 1)
		return;
	failf(c, "the client's send did not return within %u s while nobody read (no cancel?)",
	      secs * slow);
}

static void send_go(struct cctx *c)
{
	char b = 'g';

	if (write(c->go_fd, &b, 1) != 1)
		failf(c, "go pipe: %s", strerror(errno));
}

/* --- the cases ---------------------------------------------------------------- */

typedef void (*role_fn)(struct cctx *c);

struct zcase {
	const char *name;
	const char *what;	/* one line: what it asserts */
	role_fn client, server;
	role_fn check;		/* client side, after both parts: cross checks */
	bool mortal;		/* served by a server of its own, which dies */
	bool no_conn;		/* no connection at all */
};

/*
 * The checks of one direction: tx is its sender's counters, rx its
 * receiver's, e what the sender did.  Every zero-copy-sized send went by
 * zero copy but for the tail the rules allow (tail_max()), by RDMA read
 * or by RDMA write, and both sides agree on every byte of either:
 *
 *  - nothing refused or cancelled (no case expects it);
 *  - bytes: read by the receiver == the sender's zcopy_bytes_sent, written
 *    by the sender == landed in the receiver's adverts;
 *  - SrcAvails: zcopy_offers counts the ones taken back for an advert
 *    (zcopy_pulled, each followed by a write into it); the others carry
 *    data and are read at least once.  With no write at all the read
 *    path is exact: zcopy_max pieces, 1..32 bytes inline each in Combined
 *    mode (none in Pipelined), the tail by Bcopy.  With writes the pieces
 *    are cut by the adverts: at most as many SrcAvails, at least one
 *    zero-copy operation per send, and at most tail_max bytes of the
 *    zero-copy-sized sends by Bcopy;
 *  - the receiver's side: staged (buffers below its threshold: no direct
 *    read and no advert) or direct (buffers with room) as the case says.
 *
 * With no zero-copy-sized send, nothing at all goes by zero copy.
 */
static void check_dir(struct cctx *c, const char *dir, const struct dexp *e,
		      const struct sdp_stats *a, const struct sdp_stats *b)
{
	uint64_t data_offers = a->zcopy_offers - a->zcopy_pulled;
	uint64_t zc = a->zcopy_bytes_sent + a->zcopy_bytes_written;

	if (a->zcopy_refused)
		failf(c, "%s: %" PRIu64 " offer(s) refused (SendSM) though the receiver could read",
		      dir, a->zcopy_refused);
	if (a->zcopy_cancels)
		failf(c, "%s: %" PRIu64 " cancel(s) without timeout or signal", dir, a->zcopy_cancels);
	if (b->zcopy_sink_cancels)
		failf(c, "%s: %" PRIu64 " SinkAvailCancel(s) without timeout or signal", dir,
		      b->zcopy_sink_cancels);
	if (a->zcopy_bytes_sent != b->zcopy_bytes_received)
		failf(c, "%s: sender counts %" PRIu64 " bytes read by the peer, the receiver "
		      "read %" PRIu64, dir, a->zcopy_bytes_sent, b->zcopy_bytes_received);
	if (a->zcopy_bytes_written != b->zcopy_sink_bytes)
		failf(c, "%s: sender wrote %" PRIu64 " bytes into adverts, %" PRIu64 " landed in the "
		      "receiver's", dir, a->zcopy_bytes_written, b->zcopy_sink_bytes);
	if (a->zcopy_writes > b->zcopy_sink_adverts)
		failf(c, "%s: %" PRIu64 " RDMA write(s) for %" PRIu64 " advert(s)", dir,
		      a->zcopy_writes, b->zcopy_sink_adverts);
	if (a->zcopy_pulled > a->zcopy_offers || a->zcopy_pulled > a->zcopy_writes)
		failf(c, "%s: %" PRIu64 " SrcAvail(s) taken back for adverts, %" PRIu64
		      " made, %" PRIu64 " write(s)", dir, a->zcopy_pulled, a->zcopy_offers,
		      a->zcopy_writes);
	else if (b->zcopy_reads < data_offers)
		failf(c, "%s: receiver posted %" PRIu64 " RDMA read(s) for %" PRIu64 " offer(s)", dir,
		      b->zcopy_reads, data_offers);
	if (!e->large_sends) {
		if (a->zcopy_offers || b->zcopy_reads || a->zcopy_writes || b->zcopy_sink_adverts)
			failf(c, "%s: zero copy used (%" PRIu64 " SrcAvails, %" PRIu64 " reads, %"
			      PRIu64 " adverts, %" PRIu64 " writes) where Bcopy was expected", dir,
			      a->zcopy_offers, b->zcopy_reads, b->zcopy_sink_adverts,
			      a->zcopy_writes);
		return;
	}
	if (!a->zcopy_writes) {
		if (a->zcopy_offers != e->exp_offers)
			failf(c, "%s: sender made %" PRIu64 " SrcAvail(s) and no write, expected %"
			      PRIu64 " SrcAvail(s)", dir, a->zcopy_offers, e->exp_offers);
		if (a->zcopy_bytes_sent + MAX_INLINE * e->exp_offers < e->zc_bytes ||
		    a->zcopy_bytes_sent > e->zc_bytes)
			failf(c, "%s: %" PRIu64 " of the %" PRIu64 " bytes offered went by RDMA read; "
			      "%" PRIu64 " offer(s) carry 0..%d inline bytes each", dir,
			      a->zcopy_bytes_sent, e->zc_bytes, e->exp_offers, MAX_INLINE);
	} else {
		if (data_offers > e->exp_offers)
			failf(c, "%s: %" PRIu64 " SrcAvail(s) with data besides %" PRIu64
			      " write(s): more than the %" PRIu64 " pieces of zcopy_max", dir,
			      data_offers, a->zcopy_writes, e->exp_offers);
		if (data_offers + a->zcopy_writes < e->large_sends)
			failf(c, "%s: %" PRIu64 " SrcAvail(s) with data and %" PRIu64 " write(s) for "
			      "%" PRIu64 " zero-copy-sized send(s)", dir, data_offers, a->zcopy_writes,
			      e->large_sends);
		if (zc + MAX_INLINE * data_offers + e->tail_max < e->large_bytes)
			failf(c, "%s: of %" PRIu64 " bytes in zero-copy-sized sends, %" PRIu64
			      " went by RDMA read, %" PRIu64 " by RDMA write and at most %" PRIu64
			      " inline: more than the %" PRIu64 " tail bytes went by Bcopy", dir,
			      e->large_bytes,
			      a->zcopy_bytes_sent, a->zcopy_bytes_written, MAX_INLINE * data_offers,
			      e->tail_max);
		if (zc > e->tx_bytes)
			failf(c, "%s: %" PRIu64 " bytes by zero copy of %" PRIu64 " sent", dir, zc,
			      e->tx_bytes);
	}
	if (e->staged && (b->zcopy_direct_bytes || b->zcopy_sink_adverts))
		failf(c, "%s: %" PRIu64 " bytes read directly and %" PRIu64 " advert(s) with receive "
		      "buffers smaller than the threshold", dir, b->zcopy_direct_bytes,
		      b->zcopy_sink_adverts);
	if (e->staged && b->zcopy_bytes_received && b->zcopy_reads * zstage < b->zcopy_bytes_received)
		failf(c, "%s: %" PRIu64 " staged reads for %" PRIu64 " bytes: more than zcopy_stage "
		      "(%zu) each", dir, b->zcopy_reads, b->zcopy_bytes_received, zstage);
	if (e->direct && b->zcopy_direct_bytes != b->zcopy_bytes_received)
		failf(c, "%s: only %" PRIu64 " of %" PRIu64 " RDMA-read bytes went straight into "
		      "receive buffers that had room", dir, b->zcopy_direct_bytes,
		      b->zcopy_bytes_received);
}

static void check_no_proto_errors(struct cctx *c)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;

	if (a->protocol_errors || b->protocol_errors)
		failf(c, "protocol errors: client %" PRIu64 ", server %" PRIu64, a->protocol_errors,
		      b->protocol_errors);
}

/* A client-to-server transfer: c->x. */
static void check_a2b(struct cctx *c)
{
	check_dir(c, "client->server", &c->x, &c->mine, &c->peer);
	check_no_proto_errors(c);
}

/* --- sizes around the threshold, direct reads -------------------------------------- */

/* The size list of a "sizes" case, by name suffix. */
static size_t size_case_len(const char *name)
{
	size_t th = sizes_th;

	if (!strcmp(name, "size-thresh-1"))
		return th - 1;
	if (!strcmp(name, "size-thresh"))
		return th;
	if (!strcmp(name, "size-thresh+1"))
		return th + 1;
	if (!strcmp(name, "size-1m+7"))
		return 1 * MiB + 7;
	if (!strcmp(name, "size-max+1"))
		return zmax + 1;
	if (!strcmp(name, "size-max+thresh"))
		return zmax + th;
	if (!strcmp(name, "size-big"))
		return big;
	return 0;
}

/* Receive buffer: big enough for a direct read of everything. */
static size_t direct_buf_len(void)
{
	size_t th = sizes_th;

	return 2 * MiB > 2 * th ? 2 * MiB : 2 * th;
}

/* Receive total bytes of the client's stream into buffers with room for
 * direct reads. */
static void srv_big_recv(struct cctx *c, uint64_t total)
{
	size_t cap = direct_buf_len();
	uint8_t *buf = xalloc(cap);
	struct xgen g;
	struct rxmode m = { .min = cap, .max = cap };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, total, &m, buf, "recv"))
		finish(c);
	free(buf);
}

/* The client's side of most cases: one blocking send of len seeded bytes,
 * offered by zero copy if len reaches the threshold. */
static void cli_send_seeded(struct cctx *c, size_t len, size_t room)
{
	uint8_t *buf = xalloc(len);
	struct xgen g;

	if (!buf) {
		failf(c, "out of memory");
		return;
	}
	xgen_init(&g, seed_a2b(c));
	if (!send_one(c, &g, buf, len, 0, "send"))
		finish(c);
	free(buf);
	expect_send(&c->x, len, thresh, room);
}

static void cli_size(struct cctx *c)
{
	size_t len = size_case_len(c->zc->name);

	cli_send_seeded(c, len, direct_buf_len());
	c->x.direct = true;
	infof(c, "%zu B", len);
}

static void srv_size(struct cctx *c)
{
	size_t len = size_case_len(c->zc->name), cap = direct_buf_len();
	uint8_t *buf = xalloc(cap);
	struct xgen g;
	struct rxmode m = { .min = cap, .max = cap };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, len, &m, buf, "recv"))
		finish(c);
	free(buf);
}

/* --- staged reads ------------------------------------------------------------ */

static void cli_staged_1k(struct cctx *c)
{
	size_t len = 1 * MiB + 7;

	cli_send_seeded(c, len, 0);
	c->x.staged = true;
	infof(c, "%zu B into 1 KiB receives", len);
}

static void srv_staged_1k(struct cctx *c)
{
	uint8_t *buf = xalloc(KiB);
	struct xgen g;
	struct rxmode m = { .min = KiB, .max = KiB };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, 1 * MiB + 7, &m, buf, "recv"))
		finish(c);
	free(buf);
}

/* Several zero-copy-sized sends, random receive sizes 1..70000: some
 * receives have room for a direct read, most do not. */
#define RAND_MSGS 8
static void rand_sizes(uint32_t seed, size_t *sizes, int n, size_t lo, size_t hi)
{
	uint64_t rng = xfer_size_seed(seed, 7);

	for (int i = 0; i < n; i++)
		sizes[i] = xrand_range(&rng, lo, hi);
}

static size_t rand_hi(void)
{
	size_t th = sizes_th;

	return small_run ? 2 * th : 1 * MiB;
}

static void cli_staged_random(struct cctx *c)
{
	size_t sizes[RAND_MSGS], th = sizes_th;
	uint8_t *buf = xalloc(rand_hi());
	struct xgen g;
	int i;

	rand_sizes(c->seed, sizes, RAND_MSGS, th, rand_hi());
	xgen_init(&g, seed_a2b(c));
	for (i = 0; buf && i < RAND_MSGS; i++) {
		if (send_one(c, &g, buf, sizes[i], 0, "send"))
			break;
		expect_send(&c->x, sizes[i], thresh, adv_room(1, 70000, thresh));
	}
	if (i == RAND_MSGS)
		finish(c);
	free(buf);
	infof(c, "%d sends, %" PRIu64 " B, receives of 1..70000 B", RAND_MSGS, c->x.tx_bytes);
}

static void srv_staged_random(struct cctx *c)
{
	size_t sizes[RAND_MSGS], th = sizes_th;
	uint64_t total = 0;
	uint8_t *buf = xalloc(70000);
	struct xgen g;
	struct rxmode m = { .min = 1, .max = 70000, .rng = xfer_size_seed(c->seed, 8) };

	rand_sizes(c->seed, sizes, RAND_MSGS, th, rand_hi());
	for (int i = 0; i < RAND_MSGS; i++)
		total += sizes[i];
	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, total, &m, buf, "recv"))
		finish(c);
	free(buf);
}

/* --- MSG_PEEK, MSG_WAITALL, readv ------------------------------------------------ */

/* One piece (not above zcopy_max): the first on a new connection, which
 * is Combined, so a SrcAvail whatever the receiver does. */
static void cli_1m(struct cctx *c)
{
	cli_send_seeded(c, 1 * MiB + 7, thresh);
}

static void srv_peek(struct cctx *c)
{
	size_t len = 1 * MiB + 7, cap = direct_buf_len();
	uint8_t *buf = xalloc(cap);
	struct xgen g, gp;
	struct rxmode m = { .min = cap, .max = cap };
	ssize_t n = 0, most = 0;
	int peeks = 0;

	if (!buf)
		return;
	/* Peek until the peek sees past what a SrcAvail carries inline: the
	 * engine must read the offer (into its staging buffer) for a peek,
	 * or a program that peeks for a header longer than that would wait
	 * for ever. */
	uint64_t t0 = now_ns(), end = t0 + 3ull * slow * 1000000000ull;

	while (now_ns() < end) {
		size_t want = peeks % 2 ? 100 : 200000;

		n = sdp_recv(c->sd, buf, want, MSG_PEEK);
		if (n == -EINTR)
			continue;
		if (n <= 0) {
			failf(c, "recv(MSG_PEEK): %s", n ? errname(n) : "end of stream");
			goto out;
		}
		peeks++;
		xgen_init(&gp, seed_a2b(c));
		if (xgen_check(&gp, buf, (size_t)n) != (size_t)n) {
			failf(c, "peeked bytes do not match the stream");
			goto out;
		}
		if (n > most)
			most = n;
		if (want == 200000 && n > MAX_INLINE)
			break;
		sleep_ms(1);
	}
	if (most <= MAX_INLINE)
		failf(c, "%d peeks in %u s never saw past the first %zd bytes (the inline ones?) of "
		      "a pending offer", peeks, 3 * slow, most);
	infof(c, "%d peek(s), up to %zd B, the first past the inline bytes after %.0f ms", peeks,
	      most, (now_ns() - t0) / 1e6);
	xgen_init(&g, seed_a2b(c));
	if (!recv_stream(c, &g, len, &m, buf, "recv after peek"))
		finish(c);
out:
	free(buf);
}

static void check_peek(struct cctx *c)
{
	if (thresh && !c->peer.zcopy_reads && c->mine.zcopy_cancels)
		failf(c, "MSG_PEEK never read the pending offer: the peeks saw only the inline bytes "
		      "until the sender took its offer back (no reads for zcopy_stall_ms) and "
		      "sent the rest by Bcopy");
	check_a2b(c);
}

static void srv_waitall(struct cctx *c)
{
	size_t len = 1 * MiB + 7;
	uint8_t *buf = xalloc(len);
	struct xgen g;
	struct rxmode m = { .min = len, .max = len, .flags = MSG_WAITALL };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, len, &m, buf, "recv(MSG_WAITALL)"))
		finish(c);
	free(buf);
}

static void check_waitall(struct cctx *c)
{
	c->x.direct = true;
	infof(c, "%" PRIu64 " B in one recv(MSG_WAITALL)", c->x.tx_bytes);
	check_a2b(c);
}

static const size_t readv_lens[] = { 7, 100000, 3, 300000, 1 * MiB };

static void srv_readv(struct cctx *c)
{
	size_t len = 1 * MiB + 7, cap = 0;
	int cnt = (int)(sizeof(readv_lens) / sizeof(readv_lens[0]));

	for (int i = 0; i < cnt; i++)
		cap += readv_lens[i];
	uint8_t *buf = xalloc(cap);
	struct xgen g;
	struct rxmode m = { .iovcnt = cnt, .iovlens = readv_lens };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, len, &m, buf, "recvv"))
		finish(c);
	free(buf);
}

static void check_readv(struct cctx *c)
{
	infof(c, "%" PRIu64 " B into recvv of 5 iovecs (7, 100000, 3, 300000, 1 MiB)", c->x.tx_bytes);
	check_a2b(c);
}

/* recvv(MSG_WAITALL) over {7, the rest}: after the first element is
 * full, the current element is the large one: a direct read into it. */
static void srv_readv_waitall(struct cctx *c)
{
	size_t len = 1 * MiB + 7;
	const size_t lens[2] = { 7, len - 7 };
	uint8_t *buf = xalloc(len);
	struct xgen g;
	struct rxmode m = { .iovcnt = 2, .iovlens = lens, .flags = MSG_WAITALL };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, len, &m, buf, "recvv(MSG_WAITALL)"))
		finish(c);
	free(buf);
}

static void check_readv_waitall(struct cctx *c)
{
	c->x.direct = true;
	infof(c, "%" PRIu64 " B in one recvv({7, rest}, MSG_WAITALL)", c->x.tx_bytes);
	check_a2b(c);
}

/*
 * The sink's choice follows the receiving socket's threshold: with 300000
 * a receive of 200000 B is staged (and not advertised), with 4096 one of
 * 16 KiB takes data directly: read into it, or written into it once the
 * sender is Pipelined and it is advertised.
 */
static void cli_sink_thresh(struct cctx *c)
{
	size_t len = 1 * MiB + 7;
	uint8_t *buf = xalloc(len);
	struct xgen g;

	xgen_init(&g, seed_a2b(c));
	if (buf && !send_one(c, &g, buf, len, 0, "send") && !send_one(c, &g, buf, len, 0, "send"))
		finish(c);
	free(buf);
	/* The second goes into 16-KiB receives of a socket at threshold
	 * 4096: adverts of 16 KiB. */
	expect_send(&c->x, len, thresh, 16 * KiB);
	expect_send(&c->x, len, thresh, 16 * KiB);
}

static void srv_sink_thresh(struct cctx *c)
{
	size_t len = 1 * MiB + 7;
	uint8_t *buf = xalloc(200000);
	struct xgen g;
	struct sdp_stats d1, d2;
	struct rxmode m1 = { .min = 200000, .max = 200000, .part = true },
		      m2 = { .min = 16 * KiB, .max = 16 * KiB };

	if (!buf)
		return;
	xgen_init(&g, seed_a2b(c));
	if (set_thresh(c, 300000) || recv_stream(c, &g, len, &m1, buf, "recv (threshold 300000)"))
		goto out;
	stats_now_delta(c, &d1);
	if (set_thresh(c, 4096) || recv_stream(c, &g, len, &m2, buf, "recv (threshold 4096)"))
		goto out;
	stats_now_delta(c, &d2);
	uint64_t direct1 = d1.zcopy_direct_bytes + d1.zcopy_sink_bytes;
	uint64_t direct2 = d2.zcopy_direct_bytes + d2.zcopy_sink_bytes - direct1;

	infof(c, "direct: %" PRIu64 " B into 200000-B receives at threshold 300000, %" PRIu64
	      " B (%" PRIu64 " written) into 16-KiB receives at threshold 4096", direct1, direct2,
	      d2.zcopy_sink_bytes - d1.zcopy_sink_bytes);
	if (thresh && (direct1 || d1.zcopy_sink_adverts))
		failf(c, "%" PRIu64 " B read or written directly into 200000-B receives of a socket "
		      "whose threshold is 300000 (%" PRIu64 " adverts)", direct1,
		      d1.zcopy_sink_adverts);
	if (thresh && !direct2)
		failf(c, "nothing read or written directly into 16-KiB receives of a socket whose "
		      "threshold is 4096");
	finish(c);
out:
	free(buf);
}

/* A receiver that reads late (1.5 s, past the default zcopy_stall_ms):
 * the sender may take its offer back, but its blocking send, with no
 * timeout, must still send everything. */
static void srv_slow_reader(struct cctx *c)
{
	sleep_ms(1500);
	srv_big_recv(c, 1 * MiB + 7);
}

static void check_slow_reader(struct cctx *c)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;

	infof(c, "a blocking send, the receiver reads after 1.5 s: %" PRIu64 " cancel(s), %" PRIu64
	      " B by RDMA read", a->zcopy_cancels, a->zcopy_bytes_sent);
	if (thresh && a->zcopy_offers != 1)
		failf(c, "%" PRIu64 " SrcAvail(s), expected 1", a->zcopy_offers);
	if (a->zcopy_bytes_sent != b->zcopy_bytes_received)
		failf(c, "client counts %" PRIu64 " bytes read by the peer, the server read %" PRIu64,
		      a->zcopy_bytes_sent, b->zcopy_bytes_received);
	/* One send on a new connection, which is Combined: no advert. */
	if (a->zcopy_writes || b->zcopy_sink_adverts)
		failf(c, "%" PRIu64 " write(s), %" PRIu64 " advert(s) on a Combined connection",
		      a->zcopy_writes, b->zcopy_sink_adverts);
	check_no_proto_errors(c);
}

/* --- the threshold: per socket, off, non-blocking, sendv -------------------------- */

static void cli_sockopt(struct cctx *c)
{
	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0), v = -1, r;
	socklen_t l = sizeof(v);

	if (sd < 0) {
		failf(c, "socket: %s", errname(sd));
		return;
	}
	r = sdp_getsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l);
	if (r)
		failf(c, "getsockopt(SOL_SDP, SDP_ZCOPY_THRESH): %s", errname(r));
	else if ((thresh_env >= 0 && v != thresh_env) || l != sizeof(int))
		failf(c, "a new socket's threshold is %d, SDP_ZCOPY_THRESH is %ld", v, thresh_env);
	static const struct {
		int set, get;
	} t[] = { { 100000, 100000 }, { 1000, 4096 }, { 1, 4096 }, { 4096, 4096 }, { 0, 0 },
		  { 65536, 65536 } };

	for (size_t i = 0; !r && i < sizeof(t) / sizeof(t[0]); i++) {
		v = t[i].set;
		r = sdp_setsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, sizeof(v));
		if (r) {
			failf(c, "setsockopt(SDP_ZCOPY_THRESH, %d): %s", t[i].set, errname(r));
			break;
		}
		v = -1;
		l = sizeof(v);
		r = sdp_getsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l);
		if (r || v != t[i].get)
			failf(c, "set %d, got %d (%s), expected %d", t[i].set, v,
			      r ? errname(r) : "ok", t[i].get);
	}
	/* sdp.h: other values below 4096 are raised to 4096; a negative
	 * one may also be refused. */
	v = -5;
	r = sdp_setsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, sizeof(v));
	if (!r) {
		v = -1;
		l = sizeof(v);
		r = sdp_getsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l);
		if (r || v != 4096)
			failf(c, "set -5, got %d (%s), expected 4096 or EINVAL", v,
			      r ? errname(r) : "ok");
	} else if (r != -EINVAL) {
		failf(c, "setsockopt(SDP_ZCOPY_THRESH, -5) gave %s, expected 4096 or EINVAL",
		      errname(r));
	}
	v = 0;
	r = sdp_setsockopt(sd, SOL_SDP, 12345, &v, sizeof(v));
	if (r != -ENOPROTOOPT)
		failf(c, "setsockopt(SOL_SDP, 12345) gave %s, expected ENOPROTOOPT",
		      r ? errname(r) : "0");
	sdp_close(sd);
	infof(c, "default %zu; 100000, 1000->4096, 1->4096, 0, 65536; -5", thresh);
}

static void cli_zcopy_off(struct cctx *c)
{
	size_t len = 1 * MiB + 7;
	uint8_t *buf = xalloc(len);
	struct xgen g;

	xgen_init(&g, seed_a2b(c));
	if (!buf || set_thresh(c, 0))
		goto out;
	if (!send_one(c, &g, buf, len, 0, "send") && !send_one(c, &g, buf, sizes_th, 0, "send"))
		finish(c);
	expect_small(&c->x, len + sizes_th);
	infof(c, "SDP_ZCOPY_THRESH 0 on the sender, %" PRIu64 " B", c->x.tx_bytes);
out:
	free(buf);
}

static void srv_zcopy_off(struct cctx *c)
{
	srv_big_recv(c, 1 * MiB + 7 + sizes_th);
}

/* A per-socket threshold above the process's: just below it is Bcopy,
 * at it zero copy. */
#define CUSTOM_THRESH 200000
static void cli_sock_thresh(struct cctx *c)
{
	uint8_t *buf = xalloc(CUSTOM_THRESH);
	struct xgen g;

	xgen_init(&g, seed_a2b(c));
	if (!buf || set_thresh(c, CUSTOM_THRESH))
		goto out;
	if (!send_one(c, &g, buf, CUSTOM_THRESH - 1, 0, "send") &&
	    !send_one(c, &g, buf, CUSTOM_THRESH, 0, "send"))
		finish(c);
	expect_send(&c->x, CUSTOM_THRESH - 1, CUSTOM_THRESH, direct_buf_len());
	expect_send(&c->x, CUSTOM_THRESH, CUSTOM_THRESH, direct_buf_len());
	c->x.direct = true;
	infof(c, "SDP_ZCOPY_THRESH %d: sends of %d and %d B", CUSTOM_THRESH, CUSTOM_THRESH - 1,
	      CUSTOM_THRESH);
out:
	free(buf);
}

static void srv_sock_thresh(struct cctx *c)
{
	srv_big_recv(c, 2 * CUSTOM_THRESH - 1);
}

static void cli_nonblock(struct cctx *c)
{
	size_t len = 1 * MiB + 7, off = 0;
	uint8_t *buf = xalloc(len);
	struct xgen g;
	int eagain = 0;

	if (!buf)
		return;
	xgen_init(&g, seed_a2b(c));
	xgen_fill(&g, buf, len);
	/* Both ways of not blocking: MSG_DONTWAIT, then O_NONBLOCK. */
	for (int pass = 0; pass < 2; pass++) {
		int flags = MSG_NOSIGNAL | (pass == 0 ? MSG_DONTWAIT : 0);

		if (pass == 1) {
			sdp_set_nonblock(c->sd, 1);
			xgen_fill(&g, buf, len);
			off = 0;
		}
		while (off < len) {
			ssize_t n = sdp_send(c->sd, buf + off, len - off, flags);

			if (n == -EAGAIN) {
				struct pollfd pf = { .fd = c->sd, .events = POLLOUT };

				eagain++;
				if (sdp_poll(&pf, 1, (int)(10000 * slow)) <= 0) {
					failf(c, "never writable again");
					goto out;
				}
				continue;
			}
			if (n <= 0) {
				failf(c, "non-blocking send: %s", errname(n));
				goto out;
			}
			off += (size_t)n;
		}
	}
	sdp_set_nonblock(c->sd, 0);
	finish(c);
	expect_small(&c->x, 2 * len);
	infof(c, "2 x %zu B non-blocking (MSG_DONTWAIT, O_NONBLOCK), %d EAGAIN", len, eagain);
out:
	free(buf);
}

static void srv_nonblock(struct cctx *c)
{
	srv_big_recv(c, 2 * (1 * MiB + 7));
}

/* sendv: an element of at least the threshold is offered, elements below
 * it are not, however large their sum. */
static void cli_sendv(struct cctx *c)
{
	size_t th = sizes_th;
	size_t l1[] = { 100, 3 * th + 5, 10 }, l2[] = { th / 2 + 1, th / 2 + 1, th / 2 + 1 };
	size_t total = 0;
	uint8_t *buf = xalloc(4 * th);
	struct xgen g;

	if (!buf)
		return;
	xgen_init(&g, seed_a2b(c));
	for (int k = 0; k < 2; k++) {
		const size_t *l = k ? l2 : l1;
		struct iovec iov[3];
		size_t off = 0;

		for (int i = 0; i < 3; i++) {
			iov[i].iov_base = buf + off;
			iov[i].iov_len = l[i];
			off += l[i];
		}
		xgen_fill(&g, buf, off);
		ssize_t n = sdp_sendv(c->sd, iov, 3, MSG_NOSIGNAL);

		if (n != (ssize_t)off) {
			failf(c, "sendv of %zu B returned %s", off, n < 0 ? errname(n) : "short");
			goto out;
		}
		total += off;
	}
	finish(c);
	/* The large element is offered wherever it is in the iovec. */
	expect_small(&c->x, l1[0]);
	expect_send(&c->x, l1[1], thresh, direct_buf_len());
	expect_small(&c->x, total - l1[0] - l1[1]);
	c->x.direct = true;
	infof(c, "sendv {100, %zu, 10} then {3 x %zu}", l1[1], l2[0]);
out:
	free(buf);
}

static void srv_sendv(struct cctx *c)
{
	size_t th = sizes_th;

	srv_big_recv(c, 100 + 3 * th + 5 + 10 + 3 * (th / 2 + 1));
}

/* --- mixed sizes: Bcopy data and SrcAvails interleave ------------------------------ */

#define MIXED_MSGS 48
static void mixed_sizes(uint32_t seed, size_t *sizes)
{
	uint64_t rng = xfer_size_seed(seed, 11);
	size_t th = sizes_th;

	for (int i = 0; i < MIXED_MSGS; i++) {
		if (xrand_next(&rng) & 1)
			sizes[i] = xrand_range(&rng, 1, 8192);
		else
			sizes[i] = xrand_range(&rng, th, small_run ? 2 * th : 8 * th);
	}
}

static void cli_mixed(struct cctx *c)
{
	size_t sizes[MIXED_MSGS], th = sizes_th;
	uint8_t *buf = xalloc(small_run ? 2 * th : 8 * th);
	struct xgen g;
	int i, large = 0;

	mixed_sizes(c->seed, sizes);
	xgen_init(&g, seed_a2b(c));
	for (i = 0; buf && i < MIXED_MSGS; i++) {
		if (send_one(c, &g, buf, sizes[i], 0, "send"))
			break;
		expect_send(&c->x, sizes[i], thresh, adv_room(1, 200000, thresh));
		large += sizes[i] >= th;
	}
	if (i == MIXED_MSGS)
		finish(c);
	free(buf);
	infof(c, "%d sends (%d of them >= threshold), %" PRIu64 " B, receives 1..200000 B",
	      MIXED_MSGS, large, c->x.tx_bytes);
}

static void srv_mixed(struct cctx *c)
{
	size_t sizes[MIXED_MSGS];
	uint64_t total = 0;
	uint8_t *buf = xalloc(200000);
	struct xgen g;
	struct rxmode m = { .min = 1, .max = 200000, .rng = xfer_size_seed(c->seed, 12) };

	mixed_sizes(c->seed, sizes);
	for (int i = 0; i < MIXED_MSGS; i++)
		total += sizes[i];
	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, total, &m, buf, "recv"))
		finish(c);
	free(buf);
}

/* --- the server sends: the client's engine is the sink ------------------------------ */

static void srv_send_big(struct cctx *c)
{
	uint8_t *buf = xalloc(big);
	struct xgen g;

	xgen_init(&g, seed_b2a(c));
	if (buf && !send_one(c, &g, buf, big, 0, "send"))
		finish(c);
	free(buf);
}

static void cli_recv_big(struct cctx *c)
{
	size_t cap = direct_buf_len();
	uint8_t *buf = xalloc(cap);
	struct xgen g;
	struct rxmode m = { .min = cap, .max = cap };

	xgen_init(&g, seed_b2a(c));
	if (buf && !recv_stream(c, &g, big, &m, buf, "recv"))
		finish(c);
	free(buf);
	infof(c, "%zu B from the server", big);
}

/* A server-to-client transfer of n sends of len bytes, the client's
 * receives with room for direct reads, adverts of room bytes or more;
 * mine: the client's counters. */
static void check_b2a_sends(struct cctx *c, size_t len, int n, size_t room,
			    const struct sdp_stats *mine)
{
	struct dexp e = { .direct = true };

	for (int i = 0; i < n; i++)
		expect_send(&e, len, thresh, room);
	check_dir(c, "server->client", &e, &c->peer, mine);
	check_no_proto_errors(c);
}

static void check_b2a(struct cctx *c)
{
	check_b2a_sends(c, big, 1, direct_buf_len(), &c->mine);
}

/*
 * The receiver shuts down writing before the stream starts, as a client
 * that sends its request, shuts down and reads the reply does.  Its
 * RdmaRdCompls still need credits, and only the sender can give them: it
 * must go on sending credit updates after the receiver's DisConn while its
 * own stream lasts.  HC_MSGS sends of zcopy_max bytes, one SrcAvail each,
 * read through the staging buffer into 1-KiB receives: an RdmaRdCompl per
 * staged read, zcopy_max / zcopy_stage of them (16 with the defaults) on
 * the credits of one SrcAvail, more than the receiver has.  (The sender
 * used to stop its updates at the receiver's DisConn: the receiver ran
 * out of credits with an RdmaRdCompl unsent, each offer stalled for
 * zcopy_stall_ms, was cancelled and its rest sent by Bcopy.)  Nothing may
 * be cancelled.
 */
#define HC_MSGS 4
static void cli_half_closed(struct cctx *c)
{
	uint8_t *buf = xalloc(zmax), b;
	struct xgen g;
	ssize_t n;
	int i;

	if (!buf) {
		failf(c, "out of memory");
		return;
	}
	/* The server's end of stream first: all of ours goes after it. */
	while ((n = sdp_recv(c->sd, &b, 1, 0)) == -EINTR)
		;
	if (n != 0) {
		failf(c, "waiting for the server's end of stream: %s",
		      n < 0 ? errname(n) : "a byte came");
		free(buf);
		return;
	}
	xgen_init(&g, seed_a2b(c));
	for (i = 0; i < HC_MSGS; i++) {
		if (send_one(c, &g, buf, zmax, 0, "send"))
			break;
		expect_send(&c->x, zmax, thresh, 0);
	}
	if (i == HC_MSGS)
		finish(c);
	free(buf);
	c->x.staged = true;
	infof(c, "%d x %zu B into 1 KiB receives after the receiver's shutdown(SHUT_WR)",
	      HC_MSGS, zmax);
}

static void srv_half_closed(struct cctx *c)
{
	uint8_t *buf = xalloc(KiB), b;
	struct xgen g;
	struct rxmode m = { .min = KiB, .max = KiB };
	int r = sdp_shutdown(c->sd, SHUT_WR);
	ssize_t n;

	if (r)
		failf(c, "shutdown: %s", errname(r));
	xgen_init(&g, seed_a2b(c));
	if (!r && buf && !recv_stream(c, &g, (uint64_t)HC_MSGS * zmax, &m, buf, "recv")) {
		while ((n = sdp_recv(c->sd, &b, 1, 0)) == -EINTR)
			;
		if (n != 0)
			failf(c, "after the stream: %s", n < 0 ? errname(n) : "a byte more");
	}
	free(buf);
}

/*
 * Pinned memory must not grow with the number of zero-copy messages on a
 * connection: every registration of a receive buffer made for a read is
 * given back after it.  RDMA devices pin registered pages (VmPin in
 * /proc/self/status; tcp-fallback pins nothing, so there it stays put).
 * The client receives PIN_MSGS messages of 1 MiB from the server, all read
 * directly into the same buffer, and compares VmPin before and after,
 * with the connection still open.
 */
#define PIN_MSGS 64
static long vm_pin_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void srv_send_many(struct cctx *c)
{
	uint8_t *buf = xalloc(1 * MiB);
	struct xgen g;
	int i;

	xgen_init(&g, seed_b2a(c));
	for (i = 0; buf && i < PIN_MSGS; i++)
		if (send_one(c, &g, buf, 1 * MiB, 0, "send"))
			break;
	if (i == PIN_MSGS)
		finish(c);
	free(buf);
}

static void cli_pinned(struct cctx *c)
{
	size_t cap = direct_buf_len();
	uint8_t *buf = xalloc(cap);
	struct xgen g;
	struct rxmode m = { .min = cap, .max = cap, .part = true };
	long before, after;

	if (!buf)
		return;
	xgen_init(&g, seed_b2a(c));
	/* The first message sets up what stays (the staging buffer, if
	 * any); the count starts after it. */
	if (recv_stream(c, &g, 1 * MiB, &m, buf, "recv"))
		goto out;
	before = vm_pin_kb();
	if (recv_stream(c, &g, (uint64_t)(PIN_MSGS - 1) * MiB, &m, buf, "recv"))
		goto out;
	after = vm_pin_kb();
	infof(c, "%d x 1 MiB; VmPin %ld kB, then %ld kB", PIN_MSGS, before, after);
	if (before >= 0 && after > before + (long)(zstage / KiB) + 256)
		failf(c, "pinned memory grew by %ld kB over %d messages: registrations of receive "
		      "buffers were not all given back", after - before, PIN_MSGS - 1);
	finish(c);
out:
	free(buf);
}

static void check_pinned(struct cctx *c)
{
	check_b2a_sends(c, 1 * MiB, PIN_MSGS, MiB, &c->mine);
}

/* --- both directions at once ------------------------------------------------------ */

#define BIDIR_MSGS 16
static void bidir_sizes(uint32_t seed, size_t *sizes)
{
	uint64_t rng = xfer_size_seed(seed, 21);
	size_t th = sizes_th;

	for (int i = 0; i < BIDIR_MSGS; i++)
		sizes[i] = (i % 3 == 2) ? xrand_range(&rng, 1, 4096)
					: xrand_range(&rng, th, small_run ? 2 * th : 8 * th);
}

struct bidir_tx {
	struct cctx *c;
	uint32_t seed;
	struct dexp e;
	int err;
};

static void *bidir_sender(void *arg)
{
	struct bidir_tx *t = arg;
	size_t sizes[BIDIR_MSGS], th = sizes_th;
	uint8_t *buf = xalloc(small_run ? 2 * th : 8 * th);
	struct xgen g;

	bidir_sizes(t->seed, sizes);
	xgen_init(&g, t->seed);
	for (int i = 0; buf && i < BIDIR_MSGS; i++) {
		t->err = send_one(t->c, &g, buf, sizes[i], 0, "send");
		if (t->err)
			break;
		expect_send(&t->e, sizes[i], thresh, adv_room(1, 150000, thresh));
	}
	free(buf);
	return NULL;
}

/* Send one stream while receiving the other, then finish. */
static void bidir_side(struct cctx *c, uint32_t tx_seed, uint32_t rx_seed, int rng_which)
{
	struct bidir_tx t = { .c = c, .seed = tx_seed };
	size_t sizes[BIDIR_MSGS];
	uint64_t total = 0;
	uint8_t *buf = xalloc(150000);
	struct xgen g;
	struct rxmode m = { .min = 1, .max = 150000, .rng = xfer_size_seed(c->seed, rng_which) };
	pthread_t th;

	if (!buf || pthread_create(&th, NULL, bidir_sender, &t)) {
		failf(c, "setting up");
		free(buf);
		return;
	}
	bidir_sizes(rx_seed, sizes);
	for (int i = 0; i < BIDIR_MSGS; i++)
		total += sizes[i];
	xgen_init(&g, rx_seed);
	int r = recv_stream(c, &g, total, &m, buf, "recv");

	pthread_join(th, NULL);
	if (!r && !t.err)
		finish(c);
	c->x = t.e;
	free(buf);
}

static void cli_bidir(struct cctx *c)
{
	bidir_side(c, seed_a2b(c), seed_b2a(c), 31);
	infof(c, "%d sends each way at once, %" PRIu64 " B from the client", BIDIR_MSGS, c->x.tx_bytes);
}

static void srv_bidir(struct cctx *c)
{
	bidir_side(c, seed_b2a(c), seed_a2b(c), 32);
}

/*
 * Both directions at once, where offers cross: the engine takes its own
 * offer back when the peer's arrives and does not offer while the peer's
 * is unread (zcopy.c), so a side may send mostly by Bcopy; what is
 * asserted is that nothing is lost, that both sides' counts of read and
 * written bytes agree, that no side made more SrcAvails with data than
 * its zero-copy-sized sends have pieces, and that zero copy carried data
 * in at least one direction.  ea: what the client sent, eb: the server.
 */
static void check_crossing(struct cctx *c, const struct dexp *ea, const struct dexp *eb)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;
	const struct sdp_stats *tx[2] = { a, b }, *rx[2] = { b, a };
	const struct dexp *e[2] = { ea, eb };
	static const char *const dir[2] = { "client->server", "server->client" };

	infof(c, "SrcAvails with data: client %" PRIu64 " of %" PRIu64 ", server %" PRIu64
	      " of %" PRIu64, a->zcopy_offers - a->zcopy_pulled, ea->exp_offers,
	      b->zcopy_offers - b->zcopy_pulled, eb->exp_offers);
	for (int i = 0; i < 2; i++) {
		if (tx[i]->zcopy_pulled > tx[i]->zcopy_offers ||
		    tx[i]->zcopy_pulled > tx[i]->zcopy_writes)
			failf(c, "%s: %" PRIu64 " SrcAvail(s) taken back for adverts, %" PRIu64
			      " made, %" PRIu64 " write(s)", dir[i], tx[i]->zcopy_pulled,
			      tx[i]->zcopy_offers, tx[i]->zcopy_writes);
		else if (tx[i]->zcopy_offers - tx[i]->zcopy_pulled > e[i]->exp_offers)
			failf(c, "%s: more SrcAvails than zero-copy-sized sends have pieces", dir[i]);
		if (tx[i]->zcopy_bytes_sent != rx[i]->zcopy_bytes_received)
			failf(c, "%s: sender counts %" PRIu64 " bytes read by the peer, the receiver "
			      "read %" PRIu64, dir[i], tx[i]->zcopy_bytes_sent,
			      rx[i]->zcopy_bytes_received);
		if (tx[i]->zcopy_bytes_written != rx[i]->zcopy_sink_bytes)
			failf(c, "%s: sender wrote %" PRIu64 " bytes into adverts, %" PRIu64 " landed",
			      dir[i], tx[i]->zcopy_bytes_written, rx[i]->zcopy_sink_bytes);
		if (tx[i]->zcopy_writes > rx[i]->zcopy_sink_adverts)
			failf(c, "%s: %" PRIu64 " RDMA write(s) for %" PRIu64 " advert(s)", dir[i],
			      tx[i]->zcopy_writes, rx[i]->zcopy_sink_adverts);
		if (tx[i]->zcopy_bytes_sent + tx[i]->zcopy_bytes_written > e[i]->tx_bytes)
			failf(c, "%s: more bytes by zero copy than were sent", dir[i]);
	}
	if (thresh && !a->zcopy_bytes_received && !b->zcopy_bytes_received &&
	    !a->zcopy_sink_bytes && !b->zcopy_sink_bytes)
		failf(c, "no side RDMA-read or wrote anything while both sent and received at once "
		      "(refused: client %" PRIu64 ", server %" PRIu64 ")", a->zcopy_refused,
		      b->zcopy_refused);
	check_no_proto_errors(c);
}

static void check_bidir(struct cctx *c)
{
	size_t sizes[BIDIR_MSGS];
	struct dexp eb = { 0 };

	bidir_sizes(seed_b2a(c), sizes);
	for (int i = 0; i < BIDIR_MSGS; i++)
		expect_send(&eb, sizes[i], thresh, adv_room(1, 150000, thresh));
	check_crossing(c, &c->x, &eb);
}

/* --- cancel: SO_SNDTIMEO, a signal ------------------------------------------------ */

/*
 * The server reads the header and then nothing until the client's first
 * send has returned (the go pipe): that send can only end by its timeout
 * or signal, which must cancel the offer and return the bytes the peer
 * took -- at least the inline ones.  The client re-sends the rest and the
 * whole stream must arrive intact.
 */
static void srv_cancel(struct cctx *c)
{
	wait_go(c, 20);
	srv_big_recv(c, 1 * MiB + 7);
}

static volatile sig_atomic_t sigalrm_seen;
static void on_sigalrm(int sig)
{
	(void)sig;
	sigalrm_seen++;
}

/* SIGALRM to on_sigalrm() without SA_RESTART, so that it interrupts a
 * blocking call; the handler it had in *old. */
static void catch_sigalrm(struct sigaction *old)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigalrm;	/* no SA_RESTART */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, old);
	sigalrm_seen = 0;
}

struct sig_shooter {
	pthread_t target;
	struct sdp_stats st0;
	atomic_int done;
	int shots;
	unsigned first_ms;
};

/* Once the offer is out, signal the sending thread every 100 ms until
 * its send returns (one signal could land between two waits). */
static void *shooter_main(void *arg)
{
	struct sig_shooter *s = arg;
	struct sdp_stats st;
	uint64_t t0 = now_ns();

	for (;;) {
		if (atomic_load(&s->done))
			return NULL;
		sdp_get_stats(&st);
		if (st.zcopy_offers > s->st0.zcopy_offers || !thresh ||
		    now_ns() - t0 > 2000000000ull * slow)
			break;
		sleep_ms(1);
	}
	sleep_ms(s->first_ms);
	while (!atomic_load(&s->done)) {
		pthread_kill(s->target, SIGALRM);
		s->shots++;
		sleep_ms(100);
	}
	return NULL;
}

static void cli_cancel(struct cctx *c, bool by_signal)
{
	size_t len = 1 * MiB + 7;
	uint8_t *buf = xalloc(len);
	struct xgen g;
	struct sdp_stats before, after, d;
	struct sig_shooter sh = { .target = pthread_self(), .first_ms = 100 };
	struct sigaction old;
	pthread_t th;
	ssize_t n;

	if (!buf)
		return;
	xgen_init(&g, seed_a2b(c));
	xgen_fill(&g, buf, len);
	sdp_get_stats(&before);
	if (by_signal) {
		catch_sigalrm(&old);
		sh.st0 = before;
		pthread_create(&th, NULL, shooter_main, &sh);
	} else {
		/* Not scaled by TEST_SLOW: it must expire before the
		 * engine's own stall cancel (zcopy_stall_ms, 1 s by default,
		 * not slower in a slow guest), which would finish the send by
		 * Bcopy instead. */
		set_timeo(c->sd, SO_SNDTIMEO, 300);
	}
	uint64_t t0 = now_ns();

	n = sdp_send(c->sd, buf, len, MSG_NOSIGNAL);
	uint64_t t1 = now_ns();

	if (by_signal) {
		atomic_store(&sh.done, 1);
		pthread_join(th, NULL);
	} else {
		set_timeo(c->sd, SO_SNDTIMEO, 0);
	}
	sdp_get_stats(&after);
	stats_sub(&d, &after, &before);
	send_go(c);
	infof(c, "first send returned %s after %.0f ms", n >= 0 ? "a count" : errname(n),
	      (double)(t1 - t0) / 1e6);
	if (n >= 0)
		infof(c, "%zd of %zu B taken", n, len);
	if (by_signal)
		infof(c, "%d signal(s), %d handled", sh.shots, (int)sigalrm_seen);
	size_t off = 0;

	if (n < 0) {
		if (thresh && (n == -EAGAIN || n == -EINTR))
			failf(c, "send returned %s: nothing taken, though the SrcAvail carries "
			      "inline bytes (%" PRIu64 " offer(s))", errname(n), d.zcopy_offers);
		else if (n != -EAGAIN && n != -EINTR)
			failf(c, "send: %s", errname(n));
	} else if ((size_t)n == len) {
		failf(c, "the send completed although nobody read: %s did not cancel it",
		      by_signal ? "the signal" : "SO_SNDTIMEO");
		off = len;
	} else {
		if (n == 0)
			failf(c, "send returned 0");
		off = (size_t)n;
	}
	if (thresh) {
		if (d.zcopy_offers != 1)
			failf(c, "the first send made %" PRIu64 " SrcAvail(s)", d.zcopy_offers);
		if ((size_t)n != len && d.zcopy_cancels != 1)
			failf(c, "%" PRIu64 " SrcAvailCancel(s) for the interrupted send",
			      d.zcopy_cancels);
		if (n > 0 && (size_t)n < len && d.zcopy_bytes_sent + MAX_INLINE < (uint64_t)n)
			failf(c, "send reports %zd B taken, the peer RDMA-read %" PRIu64
			      " B and at most %d were inline", n, d.zcopy_bytes_sent, MAX_INLINE);
	}
	if (by_signal)
		sigaction(SIGALRM, &old, NULL);
	/* The rest: the server reads now. */
	while (off < len) {
		ssize_t m = sdp_send(c->sd, buf + off, len - off, MSG_NOSIGNAL);

		if (m == -EINTR)
			continue;
		if (m <= 0) {
			failf(c, "re-sending the rest (%zu B): %s", len - off, errname(m));
			free(buf);
			return;
		}
		off += (size_t)m;
	}
	finish(c);
	free(buf);
	expect_small(&c->x, len);
}

static void cli_cancel_timeo(struct cctx *c)
{
	cli_cancel(c, false);
}

static void cli_cancel_signal(struct cctx *c)
{
	cli_cancel(c, true);
}

static void check_cancel(struct cctx *c)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;

	if (a->zcopy_bytes_sent != b->zcopy_bytes_received)
		failf(c, "client counts %" PRIu64 " bytes read by the peer, the server read %" PRIu64,
		      a->zcopy_bytes_sent, b->zcopy_bytes_received);
	if (a->zcopy_bytes_written != b->zcopy_sink_bytes)
		failf(c, "client wrote %" PRIu64 " bytes into adverts, %" PRIu64 " landed in the "
		      "server's", a->zcopy_bytes_written, b->zcopy_sink_bytes);
	check_no_proto_errors(c);
}

/* --- Write Zcopy: Pipelined mode, adverts ------------------------------------------ */

/* Receive one message of exactly len bytes of g's stream into buf (len
 * bytes): each recv() asks for what is left of it. */
static int recv_msg(struct cctx *c, struct xgen *g, uint8_t *buf, size_t len, const char *what)
{
	struct rxmode m = { .min = len, .max = len, .part = true };

	return recv_stream(c, g, len, &m, buf, what);
}

static int wz_msgs(void)
{
	return small_run ? 16 : 64;
}

/*
 * A stream of 1-MiB blocking sends into 1-MiB blocking receives.  A send
 * read straight into a receive buffer that was already waiting makes the
 * receiver ask for Pipelined (REQ_PIPE), and the sender moves there; from
 * then on a recv() that finds nothing queued advertises its buffer, and
 * the sender writes its next send into it.  The sender is a producer a
 * little slower than its consumer, the case adverts are for: until it is
 * Pipelined it pauses 10 ms (x TEST_SLOW) after each send, so the
 * receiver is soon found waiting; then, before each send, it waits until
 * its engine has the receiver's next advert (zcopy_peer_adverts), and
 * every such send must be written into it.  (A fixed pause throughout,
 * tried first, lost the race on a loaded host: the receiver was still
 * checking the previous MiB when the next SrcAvail came, and that is
 * read, which the read cases cover.)
 */
#define WZ_PIPELINED_BY 4	/* sends: Pipelined by then, or a failure */

static bool wait_peer_advert(uint64_t more_than, unsigned secs)
{
	uint64_t end = now_ns() + (uint64_t)secs * slow * 1000000000ull;
	struct sdp_stats st;

	for (;;) {
		sdp_get_stats(&st);
		if (st.zcopy_peer_adverts > more_than)
			return true;
		if (now_ns() > end)
			return false;
		sleep_ms(1);
	}
}

static void cli_write_zcopy(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct sdp_stats st0, st;
	struct xgen g;
	int i, n = wz_msgs();

	if (!buf) {
		failf(c, "out of memory");
		return;
	}
	sdp_get_stats(&st0);
	st = st0;
	xgen_init(&g, seed_a2b(c));
	for (i = 0; i < n; i++) {
		/* Adverts counted before the send: one may come before
		 * send() has returned. */
		uint64_t adverts = st.zcopy_peer_adverts;
		bool piped;

		sdp_get_stats(&st);
		piped = thresh && st.mode_changes_sent > st0.mode_changes_sent;
		if (piped && !wait_peer_advert(adverts, 5))
			failf(c, "send #%d: no advert from the receiver within %u s", i + 1,
			      5 * slow);
		if (thresh && !piped && i == WZ_PIPELINED_BY)
			failf(c, "still Combined after %d paced sends: the receiver never asked "
			      "for Pipelined", i);
		sdp_get_stats(&st);
		if (send_one(c, &g, buf, MiB, 0, "send"))
			break;
		expect_send(&c->x, MiB, thresh, MiB);
		if (piped)
			c->turns++;
		else
			sleep_ms(10 * slow);
	}
	if (i == n)
		finish(c);
	free(buf);
	c->x.direct = true;
	infof(c, "%d x 1 MiB into 1-MiB receives, %d of them after an advert came", n, c->turns);
}

static void srv_write_zcopy(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;
	struct rxmode m = { .min = MiB, .max = MiB };

	xgen_init(&g, seed_a2b(c));
	if (buf && !recv_stream(c, &g, (uint64_t)wz_msgs() * MiB, &m, buf, "recv"))
		finish(c);
	free(buf);
}

static void check_write_zcopy(struct cctx *c)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;

	check_a2b(c);
	infof(c, "%.1f of %.1f MiB written into adverts", b->zcopy_sink_bytes / 1048576.0,
	      c->x.tx_bytes / 1048576.0);
	if (!thresh)
		return;
	if (!a->mode_changes_sent || !b->mode_changes_received)
		failf(c, "no ModeChange (sender sent %" PRIu64 ", receiver got %" PRIu64 "): never "
		      "Pipelined", a->mode_changes_sent, b->mode_changes_received);
	if (!a->zcopy_writes || !b->zcopy_sink_bytes)
		failf(c, "nothing written into the receiver's adverts (%" PRIu64 " adverts)",
		      b->zcopy_sink_adverts);
	else if (b->zcopy_sink_bytes < (uint64_t)c->turns * MiB)
		failf(c, "only %" PRIu64 " bytes were written into adverts, though %d sends of "
		      "1 MiB waited for one", b->zcopy_sink_bytes, c->turns);
}

/* --- Transaction mode: request/response ---------------------------------------------- */

#define TR_REQ 100
#define TR_REPLY (256 * KiB)
#define TR_WARM 8		/* plain turns before Transaction mode is expected */
#define TR_WARM_MAX 400		/* ... at most, when the advert loses the race */
#define TR_POLLED 50		/* transaction-miss: turns with poll() before recv() */

static int tr_turns(void)
{
	return small_run ? 60 : 200;
}

/* Answer each 100-byte request with a 256-KiB reply until end of stream. */
static void srv_transaction(struct cctx *c)
{
	uint8_t req[TR_REQ], *rep = xalloc(TR_REPLY);
	struct xgen gin, gout;
	int turns = 0;

	if (!rep) {
		failf(c, "out of memory");
		return;
	}
	xgen_init(&gin, seed_a2b(c));
	xgen_init(&gout, seed_b2a(c));
	for (;;) {
		ssize_t n = sdp_recv(c->sd, req, TR_REQ, MSG_WAITALL);

		if (n == 0)
			break;
		if (n != TR_REQ) {
			failf(c, "turn %d: recv of the request: %s", turns,
			      n < 0 ? errname(n) : "short");
			goto out;
		}
		if (xgen_check(&gin, req, TR_REQ) != TR_REQ) {
			failf(c, "turn %d: request DATA MISMATCH", turns);
			goto out;
		}
		if (send_one(c, &gout, rep, TR_REPLY, 0, "reply"))
			goto out;
		turns++;
	}
	infof(c, "%d requests answered", turns);
	finish(c);
out:
	free(rep);
}

/* The client's side of the request/response cases. */
struct tr_state {
	struct cctx *c;
	struct xgen gout, gin;
	uint8_t req[TR_REQ];
	uint8_t *rep;
	int turns;
};

/* What one turn did. */
struct tr_turn_res {
	bool piggy;		/* its request rode on the reply's SinkAvail */
	bool miss;		/* a held request had to go alone */
	uint64_t ns;		/* request to the whole reply */
};

/* The client's side begins: 0, or -1 after failf(). */
static int tr_start(struct tr_state *ts, struct cctx *c)
{
	*ts = (struct tr_state){ .c = c, .rep = xalloc(TR_REPLY) };
	if (!ts->rep) {
		failf(c, "out of memory");
		return -1;
	}
	xgen_init(&ts->gout, seed_a2b(c));
	xgen_init(&ts->gin, seed_b2a(c));
	return 0;
}

/* Why no request may piggyback or miss: Transaction mode or zero copy is
 * off. */
static const char *tr_off_why(void)
{
	return thresh ? "SDP_TRANS_HOLD_US=0" : "zero copy off";
}

/* With either off, the client's counters d must show no piggyback and no
 * miss. */
static void tr_check_none(struct cctx *c, const struct sdp_stats *d)
{
	if (d->trans_piggybacks || d->trans_misses)
		failf(c, "%s, yet %" PRIu64 " request(s) piggybacked and %" PRIu64 " missed",
		      tr_off_why(), d->trans_piggybacks, d->trans_misses);
}

/* One turn: request, then the whole reply (polled: poll() for POLLIN
 * between the two).  0, or -1 after failf(). */
static int tr_turn(struct tr_state *ts, bool polled, struct tr_turn_res *res)
{
	struct cctx *c = ts->c;
	struct sdp_stats s0, s1;
	uint64_t t0 = now_ns();

	sdp_get_stats(&s0);
	if (send_one(c, &ts->gout, ts->req, TR_REQ, 0, "request"))
		return -1;
	expect_small(&c->x, TR_REQ);
	if (polled) {
		struct pollfd pf = { .fd = c->sd, .events = POLLIN };
		int r = sdp_poll(&pf, 1, (int)(10000 * slow));

		if (r != 1) {
			failf(c, "turn %d: poll for the reply: %s", ts->turns,
			      r < 0 ? errname(r) : "nothing within 10 s");
			return -1;
		}
	}
	if (recv_msg(c, &ts->gin, ts->rep, TR_REPLY, "reply"))
		return -1;
	sdp_get_stats(&s1);
	res->ns = now_ns() - t0;
	res->piggy = s1.trans_piggybacks > s0.trans_piggybacks;
	res->miss = s1.trans_misses > s0.trans_misses;
	ts->turns++;
	return 0;
}

/* Plain turns until one piggybacks (Transaction mode is on: the next
 * request will be held), at least min of them, at most TR_WARM_MAX; with
 * Transaction mode off, just min.  0, or -1 after failf(). */
static int tr_warm_up(struct tr_state *ts, int min)
{
	struct tr_turn_res r = { 0 };

	for (int t = 0; t < min || (thresh && trans_on && !r.piggy); t++) {
		if (t == TR_WARM_MAX) {
			failf(ts->c, "no request piggybacked in %d turns in a row (turn %d): "
			      "Transaction mode never reached", t, ts->turns);
			return -1;
		}
		if (tr_turn(ts, false, &r))
			return -1;
	}
	return 0;
}

/*
 * Request/response: the client sends a 100-byte request, then recv()s
 * the 256-KiB reply into a buffer of exactly its size (blocking; each
 * reply checked); the server answers until end of stream.
 *
 * After two turns of "small send, then a recv() that advertised" the
 * client's send half goes Transaction, and each request is held until the
 * recv()'s SinkAvail carries it; the reply is written into the waiting
 * buffer.  Entering it needs the advert to leave before the reply comes,
 * a race a server that answers at once often wins, so the warm-up goes on
 * until a request piggybacks.  Of the tr_turns() turns after it, at least
 * 3/4 must piggyback (SDP_TRANS_HOLD_US=0: none may, nor miss).
 */
static void cli_transaction(struct cctx *c)
{
	struct tr_state ts;
	struct tr_turn_res r;
	struct sdp_stats d;
	int n = tr_turns(), piggy = 0, warm;
	uint64_t worst = 0, t0;

	if (tr_start(&ts, c))
		return;
	if (tr_warm_up(&ts, TR_WARM))
		goto out;
	warm = ts.turns;
	t0 = now_ns();
	for (int t = 0; t < n; t++) {
		if (tr_turn(&ts, false, &r))
			goto out;
		piggy += r.piggy;
		if (r.ns > worst)
			worst = r.ns;
	}
	double ms = (now_ns() - t0) / 1e6;

	finish(c);
	stats_now_delta(c, &d);
	infof(c, "%d warm-up turns, then %d of %d requests of %d B piggybacked, %d-KiB replies, "
	      "in %.0f ms (slowest %.2f ms)", warm, piggy, n, TR_REQ, TR_REPLY / KiB, ms,
	      worst / 1e6);
	if (!thresh || !trans_on) {
		tr_check_none(c, &d);
		/* The requester sends small only: its half has no reason to
		 * leave Combined but Transaction, which is off. */
		if (d.mode_changes_sent)
			failf(c, "%s, yet the client sent %" PRIu64 " ModeChange(s)", tr_off_why(),
			      d.mode_changes_sent);
		goto out;
	}
	if (!d.mode_changes_sent)
		failf(c, "the client never changed mode (to Transaction)");
	if (piggy * 4 < n * 3)
		failf(c, "only %d of %d turns after the warm-up carried the request on the reply's "
		      "SinkAvail", piggy, n);
out:
	c->turns = ts.turns;
	free(ts.rep);
}

/*
 * A poller in a request/response loop: TR_POLLED times, plain turns until
 * a request piggybacks (Transaction mode on), then one turn that poll()s
 * for POLLIN between request and recv().  A poller is not waiting in
 * recv(): poll() must send the held request at once, as a miss, not leave
 * it to the hold's timer (trans_hold_us) nor hold it for ever.  So every
 * polled turn counts a miss and none piggybacks; at most a quarter of
 * them may take trans_hold_us or longer (a busy machine), where a request
 * left to the timer takes it every time; and all of them together take
 * less than 2 s (x TEST_SLOW), the guard against a request stuck for
 * good.  With Transaction mode off: TR_WARM plain turns, then TR_POLLED
 * polled ones, and no piggyback and no miss at all.
 */
static void cli_transaction_miss(struct cctx *c)
{
	struct tr_state ts;
	struct tr_turn_res r;
	struct sdp_stats d;
	bool trans = thresh && trans_on;
	int piggy = 0, misses = 0, slow_turns = 0;
	uint64_t polled_ns = 0, worst = 0;

	if (tr_start(&ts, c))
		return;
	for (int t = 0; t < TR_POLLED; t++) {
		if (tr_warm_up(&ts, trans ? 1 : t ? 0 : TR_WARM) || tr_turn(&ts, true, &r))
			goto out;
		piggy += r.piggy;
		misses += r.miss;
		slow_turns += trans && r.ns >= hold_us * 1000ull;
		polled_ns += r.ns;
		if (r.ns > worst)
			worst = r.ns;
	}
	finish(c);
	stats_now_delta(c, &d);
	infof(c, "%d turns, %d of them polled: %d missed, %d piggybacked, %d took trans_hold_us "
	      "(%zu us) or longer, together %.0f ms (slowest %.2f ms)", ts.turns, TR_POLLED, misses,
	      piggy, slow_turns, hold_us, polled_ns / 1e6, worst / 1e6);
	if (!trans) {
		tr_check_none(c, &d);
	} else {
		if (piggy)
			failf(c, "%d polled turn(s) piggybacked: poll() did not send the held request",
			      piggy);
		if (misses != TR_POLLED)
			failf(c, "%d of %d polled turns counted a miss (each began in Transaction mode "
			      "with its request held)", misses, TR_POLLED);
		if (slow_turns * 4 > TR_POLLED)
			failf(c, "%d of %d polled turns took trans_hold_us (%zu us) or longer: the held "
			      "request waited for the hold's timer, not for poll()", slow_turns,
			      TR_POLLED, hold_us);
	}
	if (polled_ns > 2000000000ull * slow)
		failf(c, "%d polled turns took %.0f ms: requests were held back", TR_POLLED,
		      polled_ns / 1e6);
out:
	c->turns = ts.turns;
	free(ts.rep);
}

/* Requests one way (small: no zero copy), replies the other (zero copy:
 * read, or written into the client's adverts, at least the reply of
 * every request that rode on one). */
static void check_transaction(struct cctx *c)
{
	const struct sdp_stats *a = &c->mine, *b = &c->peer;
	struct dexp rep = { .direct = true };

	for (int t = 0; t < c->turns; t++)
		expect_send(&rep, TR_REPLY, thresh, adv_room(TR_REPLY, TR_REPLY, thresh));
	check_dir(c, "client->server", &c->x, a, b);
	check_dir(c, "server->client", &rep, b, a);
	check_no_proto_errors(c);
	if (!thresh)
		return;
	if (!b->mode_changes_sent)
		failf(c, "the server never changed mode (to Pipelined)");
	/* A piggybacked request arrives with the advert for its reply. */
	if (b->zcopy_writes < a->trans_piggybacks)
		failf(c, "%" PRIu64 " replies written into the client's adverts for %" PRIu64
		      " piggybacked requests", b->zcopy_writes, a->trans_piggybacks);
	if (a->zcopy_sink_adverts < a->trans_piggybacks)
		failf(c, "%" PRIu64 " piggybacks on %" PRIu64 " adverts", a->trans_piggybacks,
		      a->zcopy_sink_adverts);
}

/* --- sink cancel: SO_RCVTIMEO, a signal ------------------------------------------------ */

#define SC_WARM 4	/* 1-MiB messages before the advert that is cancelled */

/*
 * The server's first n messages of 1 MiB (g: its stream, from the start),
 * which make the client's receive half Pipelined: they are read straight
 * into the client's waiting recv() buffers.  0, or -errno after failf().
 */
static int srv_warm_up(struct cctx *c, struct xgen *g, uint8_t *buf, int n)
{
	xgen_init(g, seed_b2a(c));
	for (int i = 0; i < n; i++) {
		int r = send_one(c, g, buf, MiB, 0, "send");

		if (r)
			return r;
	}
	return 0;
}

/* The client's side of srv_warm_up(): *d its counters since the case
 * began.  0, or -1 after failf(). */
static int cli_warm_up(struct cctx *c, struct xgen *g, uint8_t *buf, int n, struct sdp_stats *d)
{
	xgen_init(g, seed_b2a(c));
	for (int i = 0; i < n; i++)
		if (recv_msg(c, g, buf, MiB, "warm-up recv"))
			return -1;
	stats_now_delta(c, d);
	if (thresh && !d->mode_changes_received)
		failf(c, "no ModeChange from the server after %d direct reads: not Pipelined", n);
	return 0;
}

/* The server sends SC_WARM messages, then nothing until the client's
 * cancelled recv() has returned (the go pipe), then one more. */
static void srv_sink_cancel(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;

	if (!buf)
		return;
	if (!srv_warm_up(c, &g, buf, SC_WARM)) {
		wait_go(c, 30);
		if (!send_one(c, &g, buf, MiB, 0, "send after the cancel"))
			finish(c);
	}
	free(buf);
}

/*
 * The client receives until its receive half is Pipelined, then recv()s
 * with nothing coming: the recv() advertises its buffer and waits.  An
 * SO_RCVTIMEO of 200 ms, or a SIGALRM (setitimer, handler without
 * SA_RESTART) after 200 ms, must cancel the advert (SinkAvailCancel,
 * answered by SinkCancelAck) and return EAGAIN or EINTR; then the 1 MiB
 * the server sends must arrive intact: the connection is healthy.
 */
static void cli_sink_cancel(struct cctx *c, bool by_signal)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;
	struct sdp_stats before, after, d;
	struct sigaction old;
	struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = 200000 } }, off = { 0 };

	if (!buf)
		return;
	if (cli_warm_up(c, &g, buf, SC_WARM, &d))
		goto out;
	sdp_get_stats(&before);
	if (by_signal) {
		catch_sigalrm(&old);
		setitimer(ITIMER_REAL, &it, NULL);
	} else {
		set_timeo(c->sd, SO_RCVTIMEO, 200);
	}
	uint64_t t0 = now_ns();
	ssize_t n = sdp_recv(c->sd, buf, MiB, 0);
	uint64_t t1 = now_ns();

	if (by_signal) {
		setitimer(ITIMER_REAL, &off, NULL);
		sigaction(SIGALRM, &old, NULL);
	} else {
		set_timeo(c->sd, SO_RCVTIMEO, 60000 * slow);
	}
	sdp_get_stats(&after);
	stats_sub(&d, &after, &before);
	send_go(c);
	double ms = (t1 - t0) / 1e6;
	long want = by_signal ? -EINTR : -EAGAIN;

	infof(c, "recv with nothing sent: %s after %.0f ms (%" PRIu64 " advert(s), %" PRIu64
	      " cancel(s))", n < 0 ? errname(n) : n ? "data" : "0", ms, d.zcopy_sink_adverts,
	      d.zcopy_sink_cancels);
	if (n != want)
		failf(c, "recv with nothing sent returned %s, expected %s",
		      n < 0 ? errname(n) : n ? "data" : "0 (end of stream)", errname(want));
	if (ms < 190 || ms > 200 + 3000.0 * slow)
		failf(c, "recv returned after %.0f ms, the %s was 200 ms", ms,
		      by_signal ? "timer" : "SO_RCVTIMEO");
	if (thresh && (!d.zcopy_sink_adverts || !d.zcopy_sink_cancels))
		failf(c, "%" PRIu64 " advert(s) and %" PRIu64 " SinkAvailCancel(s) during the recv: "
		      "it did not advertise, or did not cancel", d.zcopy_sink_adverts,
		      d.zcopy_sink_cancels);
	if (!recv_msg(c, &g, buf, MiB, "recv after the cancel"))
		finish(c);
out:
	free(buf);
}

static void cli_sink_cancel_timeo(struct cctx *c)
{
	cli_sink_cancel(c, false);
}

static void cli_sink_cancel_signal(struct cctx *c)
{
	cli_sink_cancel(c, true);
}

/* The cancel is the client's part's to check; the rest as any transfer. */
static void check_sink_cancel(struct cctx *c)
{
	struct sdp_stats mine = c->mine;

	mine.zcopy_sink_cancels = 0;
	check_b2a_sends(c, MiB, SC_WARM + 1, MiB, &mine);
}

/* --- both directions Pipelined at once ------------------------------------------------- */

#define BP_WARM 3	/* 1-MiB messages each way, one way after the other */

static int bp_msgs(void)
{
	return small_run ? 8 : 32;
}

struct bp_tx {
	struct cctx *c;
	struct xgen *g;
	uint8_t *buf;
	int err;
};

static void *bp_sender(void *arg)
{
	struct bp_tx *t = arg;

	for (int i = 0; i < bp_msgs() && !t->err; i++)
		t->err = send_one(t->c, t->g, t->buf, MiB, 0, "send");
	return NULL;
}

/*
 * Each side first sends BP_WARM messages of 1 MiB while the other
 * receives (the client first), until both send halves are Pipelined (a
 * side has sent its ModeChange and received the peer's); then both send
 * bp_msgs() more at once while receiving the other's into 1-MiB buffers.
 */
static void bp_side(struct cctx *c, bool client)
{
	struct xgen gt, gr;
	uint8_t *tbuf = xalloc(MiB), *rbuf = xalloc(MiB);
	struct bp_tx t = { .c = c, .g = &gt, .buf = tbuf };
	struct sdp_stats d;
	struct rxmode m = { .min = MiB, .max = MiB };
	pthread_t th;

	if (!tbuf || !rbuf) {
		failf(c, "out of memory");
		goto out;
	}
	xgen_init(&gt, client ? seed_a2b(c) : seed_b2a(c));
	xgen_init(&gr, client ? seed_b2a(c) : seed_a2b(c));
	for (int phase = 0; phase < 2; phase++) {
		bool sending = (phase == 0) == client;

		for (int i = 0; i < BP_WARM; i++)
			if (sending ? send_one(c, &gt, tbuf, MiB, 0, "warm-up send")
				    : recv_msg(c, &gr, rbuf, MiB, "warm-up recv"))
				goto out;
	}
	stats_now_delta(c, &d);
	if (thresh && (!d.mode_changes_sent || !d.mode_changes_received))
		failf(c, "%s: not Pipelined both ways after the warm-up: ModeChanges %" PRIu64
		      " sent, %" PRIu64 " received", client ? "client" : "server",
		      d.mode_changes_sent, d.mode_changes_received);
	if (pthread_create(&th, NULL, bp_sender, &t)) {
		failf(c, "pthread_create");
		goto out;
	}
	int r = recv_stream(c, &gr, (uint64_t)bp_msgs() * MiB, &m, rbuf, "recv");

	pthread_join(th, NULL);
	if (!r && !t.err)
		finish(c);
out:
	free(tbuf);
	free(rbuf);
}

static void cli_bidir_pipelined(struct cctx *c)
{
	bp_side(c, true);
	infof(c, "%d x 1 MiB each way one after the other, then %d x 1 MiB each way at once",
	      BP_WARM, bp_msgs());
}

static void srv_bidir_pipelined(struct cctx *c)
{
	bp_side(c, false);
}

static void check_bidir_pipelined(struct cctx *c)
{
	struct dexp e = { 0 };

	for (int i = 0; i < BP_WARM + bp_msgs(); i++)
		expect_send(&e, MiB, thresh, MiB);
	check_crossing(c, &e, &e);
}

/* --- a peer dies ------------------------------------------------------------------- */

static bool dead_peer_err(long e)
{
	return e == -ECONNRESET || e == -EPIPE || e == -ECONNABORTED;
}

struct killer {
	pid_t pid;
	struct sdp_stats st0;
	atomic_uint_fast64_t *rx_progress;	/* kill once this passes rx_at */
	uint64_t rx_at;
	bool after_read;	/* kill once the peer RDMA-read something */
	size_t stat_off;	/* else if set: once this counter (offsetof in struct */
	uint64_t stat_min;	/* sdp_stats) has grown by stat_min since st0 */
	unsigned delay_ms;
	atomic_uint_fast64_t t_kill;
	atomic_int in_send;	/* the client is inside a send right now */
	int send_at_kill;
	char why[160];
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	struct sdp_stats st;
	uint64_t end = now_ns() + 5000000000ull * slow;

	for (;;) {
		if (now_ns() > end) {
			snprintf(k->why, sizeof(k->why), "the condition to kill never came");
			break;
		}
		if (k->rx_progress) {
			if (atomic_load(k->rx_progress) >= k->rx_at)
				break;
		} else if (k->stat_off) {
			uint64_t v, v0;

			sdp_get_stats(&st);
			memcpy(&v, (const char *)&st + k->stat_off, sizeof(v));
			memcpy(&v0, (const char *)&k->st0 + k->stat_off, sizeof(v0));
			if (v - v0 >= k->stat_min)
				break;
		} else {
			sdp_get_stats(&st);
			if (k->after_read ? st.zcopy_bytes_sent > k->st0.zcopy_bytes_sent
					  : st.zcopy_offers > k->st0.zcopy_offers)
				break;
		}
		usleep(200);
	}
	sleep_ms(k->delay_ms);
	k->send_at_kill = atomic_load(&k->in_send);
	atomic_store(&k->t_kill, now_ns());
	kill(k->pid, SIGKILL);
	return NULL;
}

/*
 * The client's call that the kill was to end has returned (now, *t_ret):
 * wait for the killer and pass on its complaint.  When it killed, or 0 if
 * it never did.
 */
static uint64_t killer_join(struct cctx *c, struct killer *k, pthread_t th, uint64_t *t_ret)
{
	*t_ret = now_ns();
	pthread_join(th, NULL);
	if (k->why[0])
		failf(c, "%s", k->why);
	return atomic_load(&k->t_kill);
}

/* Milliseconds from the kill to t_ret, for the case line (0 if none). */
static double ms_after_kill(uint64_t t_kill, uint64_t t_ret)
{
	return t_kill && t_ret > t_kill ? (t_ret - t_kill) / 1e6 : 0.0;
}

/*
 * The client sends big zero-copy messages into a receiver that is killed
 * with -9: asleep with the offer pending, or while it reads.  The send in
 * progress (or, if it had just completed, the next one) must fail with a
 * dead-peer error within 5 s (x TEST_SLOW) of the kill.
 */
static void cli_death_rcv(struct cctx *c, bool reading)
{
	uint8_t *buf = xalloc(big);
	struct xgen g;
	struct killer k = { .pid = c->peer_pid, .after_read = reading, .delay_ms = reading ? 0 : 200 };
	pthread_t th;
	ssize_t n = 0;
	int sends = 0, partial = 0;

	if (!buf)
		return;
	sdp_get_stats(&k.st0);
	xgen_init(&g, seed_a2b(c));
	pthread_create(&th, NULL, killer_main, &k);
	for (sends = 0; sends < 64; sends++) {
		xgen_fill(&g, buf, big);
		atomic_store(&k.in_send, 1);
		n = sdp_send(c->sd, buf, big, MSG_NOSIGNAL);
		atomic_store(&k.in_send, 0);
		if (n < 0 && n != -EINTR)
			break;
		if (n >= 0 && (size_t)n < big) {
			/* Partial, like TCP when the connection breaks after
			 * some bytes went: the next send must fail. */
			partial++;
			n = sdp_send(c->sd, buf + n, big - (size_t)n, MSG_NOSIGNAL);
			if (n >= 0) {
				failf(c, "a send after a partial one (%d) succeeded", partial);
				break;
			}
			break;
		}
		if (!reading && atomic_load(&k.t_kill) == 0) {
			failf(c, "a %zu B send completed although the receiver never read", big);
			break;
		}
	}
	uint64_t t_ret, t_kill = killer_join(c, &k, th, &t_ret);

	if (!t_kill) {
		failf(c, "the receiver was never killed");
	} else if (n >= 0 || !dead_peer_err(n)) {
		failf(c, "after the receiver died the send ended with %s, not ECONNRESET/EPIPE",
		      n >= 0 ? "success" : errname(n));
	} else if (t_ret < t_kill) {
		failf(c, "the send failed (%s) before the receiver was killed", errname(n));
	} else if (t_ret - t_kill > 5000000000ull * slow) {
		failf(c, "the send took %.1f s after the kill to fail", (t_ret - t_kill) / 1e9);
	}
	stats_now_delta(c, &c->mine);
	if (thresh && !c->mine.zcopy_offers)
		failf(c, "no SrcAvail was made: not a zero-copy send");
	infof(c, "killed %s; %s %.0f ms after the kill (send #%d%s%s)",
	      reading ? "while reading" : "asleep with an offer pending", n < 0 ? errname(n) : "ok",
	      ms_after_kill(t_kill, t_ret), sends + 1,
	      k.send_at_kill ? ", in send at the kill" : ", between sends at the kill",
	      partial ? ", after a partial send" : "");
	free(buf);
}

static void cli_death_rcv_asleep(struct cctx *c)
{
	cli_death_rcv(c, false);
}

static void cli_death_rcv_reading(struct cctx *c)
{
	cli_death_rcv(c, true);
}

static void srv_death_asleep(struct cctx *c)
{
	(void)c;
	for (;;)
		pause();
}

static void srv_death_reading(struct cctx *c)
{
	uint8_t buf[KiB];

	for (;;) {
		ssize_t n = sdp_recv(c->sd, buf, sizeof(buf), 0);

		if (n <= 0 && n != -EINTR)
			break;
	}
	for (;;)
		pause();
}

/* The sender dies while the client's receive loop runs: its recv must
 * end with a dead-peer error (or end of stream, short of what was
 * promised) within 5 s, the bytes before it intact. */
static void srv_death_sender(struct cctx *c)
{
	uint8_t *buf = xalloc(big);
	struct xgen g;

	if (!buf)
		return;
	xgen_init(&g, seed_b2a(c));
	for (int i = 0; i < 1024; i++) {
		xgen_fill(&g, buf, big);
		if (sdp_send(c->sd, buf, big, MSG_NOSIGNAL) < 0)
			break;
	}
	for (;;)
		pause();
}

static void cli_death_sender(struct cctx *c)
{
	uint8_t *buf = xalloc(70000);
	struct xgen g;
	atomic_uint_fast64_t progress = 0;
	struct killer k = { .pid = c->peer_pid, .rx_progress = &progress, .rx_at = 2 * MiB };
	pthread_t th;
	uint64_t got = 0;
	long last = 0;

	if (!buf)
		return;
	sdp_get_stats(&k.st0);
	xgen_init(&g, seed_b2a(c));
	uint64_t rng = xfer_size_seed(c->seed, 41);

	pthread_create(&th, NULL, killer_main, &k);
	for (;;) {
		size_t want = xrand_range(&rng, 1, 70000);

		atomic_store(&k.in_send, 1);	/* here: "in recv" */
		ssize_t n = sdp_recv(c->sd, buf, want, 0);

		atomic_store(&k.in_send, 0);
		if (n == -EINTR)
			continue;
		if (n <= 0) {
			last = n;
			break;
		}
		if (xgen_check(&g, buf, (size_t)n) != (size_t)n) {
			failf(c, "DATA MISMATCH near stream offset %" PRIu64, got);
			last = -EIO;
			break;
		}
		got += (uint64_t)n;
		atomic_store(&progress, got);
	}
	uint64_t t_ret, t_kill = killer_join(c, &k, th, &t_ret);

	if (!t_kill)
		failf(c, "the sender was never killed");
	else if (last != 0 && !dead_peer_err(last) && last != -EIO)
		failf(c, "recv ended with %s, not ECONNRESET/EPIPE or end of stream", errname(last));
	else if (t_ret < t_kill)
		failf(c, "recv failed (%s) before the sender was killed", errname(last));
	else if (t_ret - t_kill > 5000000000ull * slow)
		failf(c, "recv took %.1f s after the kill to end", (t_ret - t_kill) / 1e9);
	stats_now_delta(c, &c->mine);
	if (thresh && !c->mine.zcopy_reads)
		failf(c, "the client never RDMA-read: not a zero-copy stream");
	infof(c, "%.1f MiB intact, then recv %s %.0f ms after the kill (%s at the kill)",
	      got / 1048576.0, last ? errname(last) : "0 (end of stream)",
	      ms_after_kill(t_kill, t_ret),
	      k.send_at_kill ? "in recv" : "between recvs");
	free(buf);
}

/*
 * The sender dies while the client sits in a recv() that advertised its
 * buffer (the server sent DA_WARM messages to make the client's receive
 * half Pipelined, then nothing).  The recv must end with ECONNRESET
 * within 5 s (x TEST_SLOW): a killed peer sent no DisConn, so end of
 * stream (0) would be a lie.
 */
#define DA_WARM 3

static void srv_death_advert(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;

	if (buf)
		srv_warm_up(c, &g, buf, DA_WARM);
	for (;;)
		pause();
}

static void cli_death_advert(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;
	struct killer k = { .pid = c->peer_pid, .stat_off = offsetof(struct sdp_stats,
								     zcopy_sink_adverts),
			    .stat_min = 1, .delay_ms = 100 };
	struct sdp_stats d;
	pthread_t th;
	ssize_t n;

	if (!buf)
		return;
	if (cli_warm_up(c, &g, buf, DA_WARM, &d))
		goto out;
	/* Kill once this recv() has advertised (100 ms later), or, with
	 * zero copy off, once the killer gives up waiting for that. */
	sdp_get_stats(&k.st0);
	if (!thresh)
		k.stat_min = 0;
	pthread_create(&th, NULL, killer_main, &k);
	do
		n = sdp_recv(c->sd, buf, MiB, 0);
	while (n == -EINTR);
	uint64_t t_ret, t_kill = killer_join(c, &k, th, &t_ret);

	stats_now_delta(c, &c->mine);
	if (!t_kill)
		failf(c, "the sender was never killed");
	else if (n != -ECONNRESET)
		failf(c, "the advertised recv ended with %s, not ECONNRESET",
		      n < 0 ? errname(n) : n ? "data" : "0 (end of stream) for a killed peer");
	else if (t_ret < t_kill)
		failf(c, "recv failed (%s) before the sender was killed", errname(n));
	else if (t_ret - t_kill > 5000000000ull * slow)
		failf(c, "recv took %.1f s after the kill to end", (t_ret - t_kill) / 1e9);
	if (thresh && c->mine.zcopy_sink_adverts <= d.zcopy_sink_adverts)
		failf(c, "the last recv did not advertise its buffer");
	infof(c, "%d x 1 MiB intact, then the advertised recv: %s %.0f ms after the kill",
	      DA_WARM, n < 0 ? errname(n) : n ? "data" : "0",
	      ms_after_kill(t_kill, t_ret));
out:
	free(buf);
}

/*
 * The receiver dies while the client sends 1-MiB messages that go by RDMA
 * write into its adverts (killed once three writes were made): the send
 * in progress, or the next one, must fail with a dead-peer error within
 * 5 s (x TEST_SLOW) of the kill, and no send may hang.
 */
static void srv_death_writes(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;
	struct rxmode m = { .min = MiB, .max = MiB };

	if (buf) {
		xgen_init(&g, seed_a2b(c));
		recv_stream(c, &g, UINT64_MAX / 2, &m, buf, "recv");
	}
	for (;;)
		pause();
}

static void cli_death_writes(struct cctx *c)
{
	uint8_t *buf = xalloc(MiB);
	struct xgen g;
	struct killer k = { .pid = c->peer_pid,
			    .stat_off = offsetof(struct sdp_stats, zcopy_writes), .stat_min = 3 };
	pthread_t th;
	ssize_t n = 0;
	int sends;

	if (!buf)
		return;
	sdp_get_stats(&k.st0);
	if (!thresh)
		k.stat_off = offsetof(struct sdp_stats, bytes_sent), k.stat_min = 8 * MiB;
	xgen_init(&g, seed_a2b(c));
	pthread_create(&th, NULL, killer_main, &k);
	for (sends = 0;; sends++) {
		uint64_t t_kill = atomic_load(&k.t_kill);

		if (t_kill && now_ns() - t_kill > 5000000000ull * slow)
			break;
		if (!t_kill && k.why[0])
			break;
		xgen_fill(&g, buf, MiB);
		atomic_store(&k.in_send, 1);
		n = sdp_send(c->sd, buf, MiB, MSG_NOSIGNAL);
		atomic_store(&k.in_send, 0);
		if (n == -EINTR)
			continue;
		if (n < 0)
			break;
		if ((size_t)n < MiB) {
			/* Partial: the next send must fail. */
			n = sdp_send(c->sd, buf + n, MiB - (size_t)n, MSG_NOSIGNAL);
			if (n >= 0)
				failf(c, "a send after a partial one succeeded");
			break;
		}
	}
	uint64_t t_ret, t_kill = killer_join(c, &k, th, &t_ret);

	stats_now_delta(c, &c->mine);
	if (!t_kill)
		failf(c, "the receiver was never killed");
	else if (n >= 0 || !dead_peer_err(n))
		failf(c, "after the receiver died the sends ended with %s, not ECONNRESET/EPIPE",
		      n >= 0 ? "success for 5 s" : errname(n));
	else if (t_ret - t_kill > 5000000000ull * slow)
		failf(c, "the send took %.1f s after the kill to fail", (t_ret - t_kill) / 1e9);
	if (thresh && !c->mine.zcopy_writes)
		failf(c, "no RDMA write was made: not a Write Zcopy stream");
	infof(c, "killed after %d sends; %s %.0f ms after the kill (%s at the kill)", sends,
	      n < 0 ? errname(n) : "ok", ms_after_kill(t_kill, t_ret),
	      k.send_at_kill ? "in send" : "between sends");
	free(buf);
}

/* ------------------------------------------------------------------------------------ */

static const struct zcase cases[] = {
	{ "sockopt", "SOL_SDP/SDP_ZCOPY_THRESH: default, floor 4096, 0, EINVAL, ENOPROTOOPT", cli_sockopt, NULL, NULL, false, true },
	{ "size-thresh-1", "one byte below the threshold: Bcopy", cli_size, srv_size, check_a2b, false, false },
	{ "size-thresh", "exactly the threshold: one SrcAvail, read directly", cli_size, srv_size, check_a2b, false, false },
	{ "size-thresh+1", "threshold + 1: one SrcAvail", cli_size, srv_size, check_a2b, false, false },
	{ "size-1m+7", "1 MiB + 7: one SrcAvail, direct", cli_size, srv_size, check_a2b, false, false },
	{ "size-max+1", "zcopy_max + 1: one SrcAvail, the 1-byte tail by Bcopy", cli_size, srv_size, check_a2b, false, false },
	{ "size-max+thresh", "zcopy_max + threshold: two SrcAvails", cli_size, srv_size, check_a2b, false, false },
	{ "size-big", "16 MiB: zcopy_max pieces, direct", cli_size, srv_size, check_a2b, false, false },
	{ "staged-1k", "1 KiB receives: staged reads, none direct", cli_staged_1k, srv_staged_1k, check_a2b, false, false },
	{ "staged-random", "receives of 1..70000 B: staged and direct", cli_staged_random, srv_staged_random, check_a2b, false, false },
	{ "peek", "MSG_PEEK on a pending offer sees past the inline bytes; then recv", cli_1m, srv_peek, check_peek, false, false },
	{ "waitall", "one recv(MSG_WAITALL) of the whole message", cli_1m, srv_waitall, check_waitall, false, false },
	{ "readv", "recvv over five iovecs", cli_1m, srv_readv, check_readv, false, false },
	{ "readv-waitall", "recvv({7, rest}, MSG_WAITALL): direct into the second element", cli_1m, srv_readv_waitall, check_readv_waitall, false, false },
	{ "sink-thresh", "the receiving socket's threshold decides direct or staged", cli_sink_thresh, srv_sink_thresh, check_a2b, false, false },
	{ "slow-reader", "the receiver reads after 1.5 s: the blocking send still sends all", cli_1m, srv_slow_reader, check_slow_reader, false, false },
	{ "zcopy-off", "SDP_ZCOPY_THRESH 0 on the sender: no SrcAvail", cli_zcopy_off, srv_zcopy_off, check_a2b, false, false },
	{ "sock-thresh", "a per-socket threshold of 200000: below Bcopy, at it zero copy", cli_sock_thresh, srv_sock_thresh, check_a2b, false, false },
	{ "nonblock", "non-blocking sends (MSG_DONTWAIT, O_NONBLOCK): Bcopy", cli_nonblock, srv_nonblock, check_a2b, false, false },
	{ "sendv", "sendv: an element >= threshold is offered, smaller ones are not", cli_sendv, srv_sendv, check_a2b, false, false },
	{ "mixed", "small and large sends interleaved, random receive sizes", cli_mixed, srv_mixed, check_a2b, false, false },
	{ "server-sends", "the server sends 16 MiB: the client's engine reads", cli_recv_big, srv_send_big, check_b2a, false, false },
	{ "half-closed-receiver", "the receiver shut down writing first: its RdmaRdCompls still get credits, no offer stalls", cli_half_closed, srv_half_closed, check_a2b, false, false },
	{ "pinned", "64 zero-copy messages on one connection: VmPin does not grow", cli_pinned, srv_send_many, check_pinned, false, false },
	{ "bidir", "both sides send zero-copy-sized messages while receiving", cli_bidir, srv_bidir, check_bidir, false, false },
	{ "cancel-sndtimeo", "SO_SNDTIMEO expires on a pending offer: partial count, rest re-sent", cli_cancel_timeo, srv_cancel, check_cancel, false, false },
	{ "cancel-signal", "SIGALRM (no SA_RESTART) on a pending offer: partial count, rest "
	  "re-sent", cli_cancel_signal, srv_cancel, check_cancel, false, false },
	{ "death-receiver-asleep", "kill -9 the receiver with an offer pending: send fails fast", cli_death_rcv_asleep, srv_death_asleep, NULL, true, false },
	{ "death-receiver-reading", "kill -9 the receiver while it reads: send fails fast", cli_death_rcv_reading, srv_death_reading, NULL, true, false },
	{ "death-sender", "kill -9 the sender mid-stream: recv ends fast with an error", cli_death_sender, srv_death_sender, NULL, true, false },
	{ "write-zcopy", "1-MiB sends into 1-MiB receives: Pipelined, most bytes written into adverts", cli_write_zcopy, srv_write_zcopy, check_write_zcopy, false, false },
	{ "transaction", "100-B requests, 256-KiB replies: requests ride on the reply's SinkAvail", cli_transaction, srv_transaction, check_transaction, false, false },
	{ "transaction-miss", "poll() between request and recv(): the held request goes at once", cli_transaction_miss, srv_transaction, check_transaction, false, false },
	{ "sink-cancel-rcvtimeo", "SO_RCVTIMEO on an advertised recv: SinkAvailCancel, EAGAIN, then data", cli_sink_cancel_timeo, srv_sink_cancel, check_sink_cancel, false, false },
	{ "sink-cancel-signal", "SIGALRM (no SA_RESTART) on an advertised recv: EINTR, then data", cli_sink_cancel_signal, srv_sink_cancel, check_sink_cancel, false, false },
	{ "bidir-pipelined", "both ways Pipelined, then 1-MiB messages both ways at once", cli_bidir_pipelined, srv_bidir_pipelined, check_bidir_pipelined, false, false },
	{ "death-sender-advert", "kill -9 the sender while the receiver waits in an advertised recv: ECONNRESET", cli_death_advert, srv_death_advert, NULL, true, false },
	{ "death-receiver-writes", "kill -9 the receiver while the sender writes into its adverts: send fails fast", cli_death_writes, srv_death_writes, NULL, true, false },
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* zcopy_thresh as the engine has it: a new socket's SDP_ZCOPY_THRESH. */
static int learn_thresh(void)
{
	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0), v = -1, r;
	socklen_t l = sizeof(v);

	r = sd < 0 ? sd : sdp_getsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l);
	if (sd >= 0)
		sdp_close(sd);
	if (r || v < 0) {
		say("FAIL: the default zero-copy threshold: %s", errname(r));
		return -1;
	}
	thresh = (size_t)v;
	sizes_th = thresh ? thresh : NOMINAL_THRESH;
	return 0;
}

/* --- the server processes ------------------------------------------------------------ */

struct server {
	pid_t pid;
	int port;
	int res_fd;	/* client: read end of the results */
	int go_fd;	/* client: write end */
	int ctl_fd;	/* client: write end; EOF tells the server to exit */
	int case_idx;	/* mortal: its case */
};

/* What a server reports per case. */
struct sres {
	int32_t idx;
	int32_t ok;
	struct sdp_stats d;
	char msg[900];		/* why it failed */
	char info[400];		/* what it saw */
};

static int open_listener(int *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = host_addr };
	int ls = xfer_listen(&xsock_sdp, (struct sockaddr *)&sin, sizeof(sin), SOCK_NONBLOCK, 16,
			     false, NULL);

	if (ls < 0) {
		say("server: listener: %s", errname(ls));
		return ls;
	}
	*port = ntohs(sin.sin_port);
	return ls;
}

static void serve_one(int sd, int res_fd, int go_fd)
{
	struct cctx c = { .server = true, .sd = sd, .go_fd = go_fd };
	struct sres res = { .idx = -1 };
	uint8_t hdr[HDR_LEN];
	ssize_t n;

	pthread_mutex_init(&c.lock, NULL);
	sdp_get_stats(&c.st0);
	set_timeo(sd, SO_RCVTIMEO, 20000 * slow);
	uint64_t t0 = now_ns();

	n = sdp_recv(sd, hdr, sizeof(hdr), MSG_WAITALL);
	if (n != HDR_LEN) {
		snprintf(res.msg, sizeof(res.msg), "no case header: %s after %.0f ms",
			 n < 0 ? errname(n) : n ? "short" : "end of stream",
			 (now_ns() - t0) / 1e6);
		goto out;
	}
	uint32_t magic = ntohl(*(uint32_t *)hdr), idx = ntohl(*(uint32_t *)(hdr + 4));

	if (magic != CASE_MAGIC || idx >= (uint32_t)NCASES || !cases[idx].server) {
		snprintf(res.msg, sizeof(res.msg), "bad case header");
		goto out;
	}
	res.idx = (int32_t)idx;
	c.idx = (int)idx;
	c.zc = &cases[idx];
	c.seed = ntohl(*(uint32_t *)(hdr + 8));
	/* Receives wait as long as the case may take. */
	set_timeo(sd, SO_RCVTIMEO, 60000 * slow);

	const char *tn = sdp_transport_name(sd);

	if (want_transport && (!tn || strcmp(tn, want_transport)))
		failf(&c, "server side runs over %s, not %s", tn ? tn : "nothing", want_transport);
	watch(c.zc->name, 90);
	c.zc->server(&c);
	watch("", 0);
	res.ok = c.fails == 0;
	snprintf(res.msg, sizeof(res.msg), "%s", c.why);
	snprintf(res.info, sizeof(res.info), "%s", c.info);
out:
	sdp_close(sd);
	/* Counters after the close: nothing of this case moves any more. */
	stats_now_delta(&c, &res.d);
	if (res_fd >= 0 && write(res_fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		_exit(1);
}

static int server_main(int ctl_fd, int port_fd, int res_fd, int go_fd, bool mortal)
{
	int port, ls;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	watchdog_start();
	if (sdp_init() <= 0) {
		say("server: no transport");
		return 1;
	}
	if (learn_thresh())
		return 1;
	ls = open_listener(&port);
	if (ls < 0)
		return 1;
	if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port))
		return 1;
	close(port_fd);
	for (;;) {
		struct pollfd pf[2] = { { .fd = ls, .events = POLLIN },
					{ .fd = ctl_fd, .events = POLLIN } };
		int r = poll(pf, 2, -1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[1].revents)
			break;
		int sd = sdp_accept(ls, NULL, NULL, 0);

		if (sd == -EAGAIN || sd == -EINTR)
			continue;
		if (sd < 0) {
			say("server: accept: %s", errname(sd));
			continue;
		}
		serve_one(sd, mortal ? -1 : res_fd, go_fd);
	}
	sdp_close(ls);
	return 0;
}

static int spawn_server(struct server *s, bool mortal)
{
	int ctl[2], portp[2], res[2], go[2];

	if (pipe(ctl) || pipe(portp) || pipe(res) || pipe(go))
		return -1;
	fflush(stdout);
	s->pid = fork();
	if (s->pid < 0)
		return -1;
	if (s->pid == 0) {
		close(ctl[1]);
		close(portp[0]);
		close(res[0]);
		close(go[1]);
		_exit(server_main(ctl[0], portp[1], res[1], go[0], mortal));
	}
	close(ctl[0]);
	close(portp[1]);
	close(res[1]);
	close(go[0]);
	s->ctl_fd = ctl[1];
	s->res_fd = res[0];
	s->go_fd = go[1];
	/* The server writes its port once it listens. */
	struct pollfd pf = { .fd = portp[0], .events = POLLIN };
	int r;

	do
		r = poll(&pf, 1, (int)(60000 * slow));
	while (r < 0 && errno == EINTR);
	if (r != 1 || read(portp[0], &s->port, sizeof(s->port)) != (ssize_t)sizeof(s->port)) {
		close(portp[0]);
		return -1;
	}
	close(portp[0]);
	return 0;
}

/* --- the client ---------------------------------------------------------------------- */

static int connect_to(int port, int *out)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)port) };
	int sd = xfer_dial(&xsock_sdp, (struct sockaddr *)&sin, sizeof(sin), -1, NULL);

	if (sd < 0)
		return sd;
	*out = sd;
	return 0;
}

static int read_result(struct server *s, struct sres *res, unsigned secs)
{
	struct pollfd pf = { .fd = s->res_fd, .events = POLLIN };
	int r;

	do
		r = poll(&pf, 1, (int)(secs * slow * 1000));
	while (r < 0 && errno == EINTR);
	if (r != 1)
		return -ETIMEDOUT;
	if (read(s->res_fd, res, sizeof(*res)) != (ssize_t)sizeof(*res))
		return -EIO;
	return 0;
}

static bool selected(const char *name, const char *only)
{
	if (!only)
		return true;
	char buf[1024];

	snprintf(buf, sizeof(buf), "%s", only);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		size_t l = strlen(tok);

		/* "size-" selects every case starting so; else exact. */
		if (l && tok[l - 1] == '-' ? !strncmp(name, tok, l) : !strcmp(name, tok))
			return true;
	}
	return false;
}

static int run_case(int idx, struct server *srv)
{
	const struct zcase *zc = &cases[idx];
	struct cctx c = { .zc = zc, .idx = idx, .seed = base_seed + (uint32_t)idx * 7919u,
			  .sd = -1 };
	struct sres res = { 0 };
	char sa[400], sb[400];
	int r;

	pthread_mutex_init(&c.lock, NULL);
	watch(zc->name, zc->mortal ? 60 : 120);
	sdp_get_stats(&c.st0);
	if (zc->no_conn) {
		zc->client(&c);
		goto report;
	}
	r = connect_to(srv->port, &c.sd);
	if (r) {
		failf(&c, "connect: %s", errname(r));
		goto report;
	}
	const char *tn = sdp_transport_name(c.sd);

	if (want_transport && (!tn || strcmp(tn, want_transport)))
		failf(&c, "client side runs over %s, not %s", tn ? tn : "nothing", want_transport);
	set_timeo(c.sd, SO_RCVTIMEO, 60000 * slow);
	c.go_fd = srv->go_fd;
	c.peer_pid = srv->pid;

	uint8_t hdr[HDR_LEN] = { 0 };

	*(uint32_t *)hdr = htonl(CASE_MAGIC);
	*(uint32_t *)(hdr + 4) = htonl((uint32_t)idx);
	*(uint32_t *)(hdr + 8) = htonl(c.seed);
	ssize_t n = sdp_send(c.sd, hdr, sizeof(hdr), MSG_NOSIGNAL);

	if (n != HDR_LEN) {
		failf(&c, "sending the case header: %s", n < 0 ? errname(n) : "short");
		goto report;
	}
	zc->client(&c);
	/* Closed before waiting for the server: a client part that failed
	 * half-way must not leave the server waiting for more. */
	sdp_close(c.sd);
	c.sd = -1;
	if (zc->mortal) {
		int st;

		kill(srv->pid, SIGKILL);
		waitpid(srv->pid, &st, 0);
		srv->pid = 0;
		goto report;
	}
	/* A result of an earlier case that timed out is skipped; one
	 * without a case (the server read no header) is this connection's. */
	do
		r = read_result(srv, &res, 90);
	while (!r && res.idx != idx && res.idx != -1);
	if (r) {
		failf(&c, "no result from the server within %u s", 90 * slow);
		goto report;
	}
	if (res.idx == -1) {
		failf(&c, "server: %s", res.msg);
		goto report;
	}
	c.peer = res.d;
	c.peer_ok = res.ok;
	if (res.info[0])
		infof(&c, "server: %s", res.info);
	if (!res.ok)
		failf(&c, "server: %s", res.msg);
	stats_now_delta(&c, &c.mine);
	if (zc->check)
		zc->check(&c);
report:
	if (c.sd >= 0)
		sdp_close(c.sd);
	watch("", 0);
	if (zc->no_conn || zc->mortal) {
		if (!zc->mortal)
			stats_now_delta(&c, &c.mine);
		stats_text(sa, sizeof(sa), &c.mine);
		say("%s %s: %s [client: %s]%s%s", c.fails ? "FAIL" : "ok  ", zc->name, c.info, sa,
		    c.fails ? " -- " : "", c.why);
	} else {
		stats_text(sa, sizeof(sa), &c.mine);
		stats_text(sb, sizeof(sb), &c.peer);
		say("%s %s: %s [client: %s] [server: %s]%s%s", c.fails ? "FAIL" : "ok  ", zc->name,
		    c.info, sa, sb, c.fails ? " -- " : "", c.why);
	}
	return c.fails ? 1 : 0;
}

static size_t env_size(const char *name, size_t def)
{
	const char *v = getenv(name);
	char *end;

	if (!v || !*v)
		return def;
	unsigned long long x = strtoull(v, &end, 0);

	return *end ? def : (size_t)x;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: zcopy_check [--only NAME[,NAME...]] [--small] [--seed N] [--list]\n"
		   "  NAME ending in '-' selects every case starting so (size-)\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "only", required_argument, NULL, 'o' }, { "small", no_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'S' }, { "list", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },	  { NULL, 0, NULL, 0 },
	};
	const char *only = NULL;
	int c, failures = 0, ran = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			only = optarg;
			break;
		case 's':
			small_run = true;
			break;
		case 'S':
			base_seed = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'l':
			for (int i = 0; i < NCASES; i++)
				printf("%-24s %s\n", cases[i].name, cases[i].what);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	const char *h = getenv("TEST_HOST"), *t = getenv("TEST_TRANSPORT"), *f = getenv("TEST_SLOW");

	if (h && *h)
		snprintf(host_str, sizeof(host_str), "%s", h);
	if (inet_pton(AF_INET, host_str, &host_addr) != 1) {
		say("FAIL: TEST_HOST '%s' is not an IPv4 address", host_str);
		return 1;
	}
	if (t && *t)
		want_transport = t;
	if (f && atoi(f) > 0)
		slow = (unsigned)atoi(f);
	/* The tunables as this process runs with them (common/tunables.def);
	 * the sockopt case checks that a new socket reports zcopy_thresh. */
	if (getenv("SDP_ZCOPY_THRESH") && *getenv("SDP_ZCOPY_THRESH"))
		thresh_env = (long)env_size("SDP_ZCOPY_THRESH", 0);
	/* The engine's trans_hold_us cannot be read back: unless the
	 * environment sets it, it is set here, to the value
	 * common/tunables.def gives as the default, so that both sides
	 * agree by construction. */
	if (!getenv("SDP_TRANS_HOLD_US") || !*getenv("SDP_TRANS_HOLD_US"))
		setenv("SDP_TRANS_HOLD_US", "1000", 1);
	hold_us = env_size("SDP_TRANS_HOLD_US", 1000);
	trans_on = hold_us != 0;
	zmax = env_size("SDP_ZCOPY_MAX", 4 * MiB);
	zstage = env_size("SDP_ZCOPY_STAGE", 256 * KiB);
	big = small_run ? 4 * MiB : 16 * MiB;
	if (big < zmax + 1)
		big = 2 * zmax;

	/* Fork every server before this process starts the engine. */
	struct server main_srv = { 0 }, mortal[NCASES];
	int nmortal = 0;

	memset(mortal, 0, sizeof(mortal));
	if (spawn_server(&main_srv, false)) {
		say("FAIL: fork: %s", strerror(errno));
		return 1;
	}
	for (int i = 0; i < NCASES; i++) {
		if (!cases[i].mortal || !selected(cases[i].name, only))
			continue;
		mortal[nmortal].case_idx = i;
		if (spawn_server(&mortal[nmortal], true)) {
			say("FAIL: fork: %s", strerror(errno));
			return 1;
		}
		nmortal++;
	}
	watchdog_start();
	if (sdp_init() <= 0) {
		say("FAIL: no usable transport");
		return 1;
	}
	if (learn_thresh())
		return 1;

	say("transport %s, host %s, zcopy_thresh %zu, zcopy_max %zu, zcopy_stage %zu, big %zu, "
	    "trans_hold_us %zu%s, seed %u, time limits x%u",
	    want_transport ? want_transport : "(any)", host_str, thresh, zmax, zstage, big,
	    hold_us, trans_on ? "" : " (Transaction mode off)", base_seed, slow);

	int m = 0;

	for (int i = 0; i < NCASES; i++) {
		if (!selected(cases[i].name, only))
			continue;
		ran++;
		if (cases[i].mortal) {
			failures += run_case(i, &mortal[m++]);
			continue;
		}
		if (!main_srv.pid) {
			say("FAIL %s: the server is gone", cases[i].name);
			failures++;
			continue;
		}
		failures += run_case(i, &main_srv);
		int st;

		if (waitpid(main_srv.pid, &st, WNOHANG) == main_srv.pid) {
			say("FAIL: the server died (%s %d)", WIFSIGNALED(st) ? "signal" : "exit",
			    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			main_srv.pid = 0;
			failures++;
		}
	}
	/* The servers exit once their control pipe closes. */
	watch("the servers exiting", 30);
	close(main_srv.ctl_fd);
	for (int i = 0; i < nmortal; i++) {
		close(mortal[i].ctl_fd);
		if (mortal[i].pid) {
			kill(mortal[i].pid, SIGKILL);
			waitpid(mortal[i].pid, NULL, 0);
		}
	}
	if (main_srv.pid) {
		int st;

		waitpid(main_srv.pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			say("FAIL: the server ended with %s %d", WIFSIGNALED(st) ? "signal" : "exit",
			    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			failures++;
		}
	}
	watch("", 0);
	if (!ran) {
		say("no case matches '%s' (--list)", only ? only : "");
		return 2;
	}
	say("%d case(s), %d failure(s): %s", ran, failures, failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
