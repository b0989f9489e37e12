/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * soak_check: many SDP connections at once through the engine's API
 * (include/sdp.h), each carrying checksummed data both ways at the same
 * time, each on one data path of the engine, so that every path carries
 * bytes side by side with the others.  Run by soak.sh (short) and
 * test/soak/long_soak.sh (10 GiB).
 *
 *   soak_check [--host ADDR] [--conns N] [--bytes TOTAL] [--seed S]
 *              [--modes M[,M...]] [--thresh BYTES] [--stall SECS]
 *              [--progress SECS] [--no-rdma read|write|read,write]
 *
 * Connection i runs mode M[i % count] (default: all five):
 *
 *   bcopy  zero copy off on both sockets (SDP_ZCOPY_THRESH 0): Data only;
 *          writes and reads of 1 B .. 4 x thresh.
 *   read   Read Zcopy: writes of thresh .. 16 x thresh (each offered with
 *          SrcAvail), reads below thresh, so the sink pulls them through
 *          its staging buffer and never asks for Pipelined.
 *   write  Write Zcopy: the same writes into reads of thresh .. 16 x
 *          thresh; the sink reads one SrcAvail straight into a waiting
 *          buffer, asks for Pipelined, then advertises its buffers.  Each
 *          writer waits (at most 10 ms, pacing only) until its reader sits
 *          in recv(), so that adverts find a writer to use them.
 *   trans  request/response: the client sends a request of 1 B .. 2 KiB
 *          and recv()s the reply of thresh .. 4 x thresh into a buffer of
 *          exactly its size; the requests ride on the reply's SinkAvail
 *          once the client's half is in Transaction mode.
 *   mixed  writes and reads of 1 B .. 16 x thresh: every path, with the
 *          transitions between them.
 *
 * Every stream is a seeded generator (tools/xfer.h): each chunk received
 * is checked where it lands, the byte counts must match, and the XXH64 of
 * what each side sent must equal that of what the other received.  Write
 * and read sizes come from seeded generators too; the seed is printed, and
 * --seed replays a run.  Both ends of every connection are in this
 * process, so the engine's counters (sdp_get_stats) must account for every
 * byte: bytes_sent and bytes_received equal the bytes the connections
 * moved, split by path: Read Zcopy (RDMA read), Write Zcopy (RDMA write)
 * and the rest (Data, inline bytes, Transaction piggybacks).  Each mode
 * run must have left its mark there (RDMA reads for read, writes for
 * write, piggybacks for trans, Bcopy bytes for bcopy), no connection may
 * have been reset or seen a protocol error, and each must be on
 * TEST_TRANSPORT when that is set.
 *
 * --libc makes the same calls through libc, for a run under the preload
 * (LD_PRELOAD=libsdp.so, a policy that puts both ends on SDP; the
 * threshold is set with setsockopt(SOL_SDP), which the preload hands to
 * the engine).  The counters are then those of the preload's statistics
 * file of this process, what sdpstat(1) shows, and more is checked there:
 * no connect or accept went to TCP and none fell back, each socket's row
 * is on SDP (over TEST_TRANSPORT) and counts exactly the bytes the
 * application moved on it, and the kernel TCP socket at each of the
 * application's fds, asked with a raw getsockopt(TCP_INFO) past the
 * preload, carried no byte.
 *
 * --no-rdma says the transport cannot RDMA-read or RDMA-write (soak.sh asks
 * transport_caps; shm can do neither, doc/shm.md): the engine then never
 * uses that zero copy, the modes that would use it go by Bcopy instead,
 * and the mark checked is the opposite one: no byte went that way.
 *
 * A hang fails the run: when the engine has moved no byte for --stall
 * seconds (default 120, x TEST_SLOW) the threads still running are named
 * and the process exits 1.  Exit 0 pass, 1 fail, 2 bad usage.
 */

#include "sdp.h"
#include "say.h"
#include "stats_read.h"
#include "xfer.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *say_prefix = "soak_check";

enum smode { M_BCOPY, M_READ, M_WRITE, M_TRANS, M_MIXED, M_COUNT };
static const char *const mode_names[M_COUNT] = { "bcopy", "read", "write", "trans", "mixed" };

#define TR_REQ_MAX 2048
#define PACE_MAX_NS 10000000ull

/* One direction of one connection. */
struct flow {
	int tx_sd, rx_sd;
	uint32_t seed;			/* of the data */
	uint64_t total;			/* to send (streams) */
	size_t wmin, wmax, rmin, rmax;
	uint64_t wrng, rrng;		/* size generators */
	bool pace;			/* write: wait for the reader */
	atomic_bool rx_waiting;		/* the reader is in recv() */
	atomic_int *running;		/* the connection's threads still running */
	/* results, read after the threads are joined */
	uint64_t sent, rcvd;
	uint64_t tx_hash, rx_hash;
	uint64_t bad_off;		/* first corrupt byte, or UINT64_MAX */
	/* The first error of each side, -errno, and the step; each is
	 * written by one thread only, the sender's or the receiver's. */
	int tx_err, rx_err;
	const char *tx_op, *rx_op;
};

struct conn {
	int idx;
	enum smode mode;
	int csd, ssd;			/* client's and server's socket */
	struct flow up, down;		/* client -> server, server -> client */
	uint64_t rep_total;		/* trans: reply bytes */
	uint64_t turns;
	pthread_t th[4];
	int nth;
	atomic_int running;
};

static struct conn *conns;
static int nconns = 10;
static uint64_t total_bytes = 64ull << 20;
static uint32_t seed;
static bool seed_given;
static size_t thresh = 65536;
static unsigned slow = 1;
static unsigned stall_secs = 120;
static unsigned progress_secs;
static const char *host = "127.0.0.1";
static const char *want_transport;
static bool mode_on[M_COUNT];
static atomic_bool all_done;
static atomic_uint_fast64_t rx_progress;	/* bytes received, for the watchdog */
/* The sockets: the engine's (default), or libc's with --libc, which the
 * preload (LD_PRELOAD=libsdp.so) is to put on SDP. */
static const struct xsock_ops *O = &xsock_sdp;
static bool libc_mode;
/* --no-rdma: the transport cannot RDMA-read / RDMA-write. */
static bool no_rdma_read, no_rdma_write;

static const char *errname(int e)
{
	static __thread char buf[24];

	switch (e < 0 ? -e : e) {
#define E(x) case x: return #x
	E(EPIPE); E(ECONNRESET); E(ECONNABORTED); E(EAGAIN); E(EINTR); E(ETIMEDOUT);
	E(ENOTCONN); E(EINVAL); E(EPROTO); E(EBADF); E(ENOMEM); E(EIO); E(ECONNREFUSED);
	E(EHOSTUNREACH); E(ENODEV); E(EADDRNOTAVAIL); E(ENOPROTOOPT); E(ENOENT);
#undef E
	default:
		snprintf(buf, sizeof(buf), "E#%d", e < 0 ? -e : e);
		return buf;
	}
}

static double mib(uint64_t b)
{
	return b / 1048576.0;
}

/* A side failed: say so, and shut its socket down both ways, so that
 * the threads waiting on it at either end see it end (and fail their
 * counts) rather than wait for the watchdog. */
static void fail_tx(struct flow *f, const char *op, int err)
{
	if (!f->tx_err) {
		f->tx_err = err ? err : -EIO;
		f->tx_op = op;
	}
	O->shutdown(f->tx_sd, SHUT_RDWR);
}

static void fail_rx(struct flow *f, const char *op, int err)
{
	if (!f->rx_err) {
		f->rx_err = err ? err : -EIO;
		f->rx_op = op;
	}
	O->shutdown(f->rx_sd, SHUT_RDWR);
}

static void pause_ns(long ns)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ns };

	nanosleep(&ts, NULL);
}

/* Send all of buf; 0 or -errno. */
static int send_all(struct flow *f, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = O->send(f->tx_sd, buf, len, MSG_NOSIGNAL);

		if (n == -EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? (int)n : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* What a receiver does with a chunk: check it where it lands, hash it. */
static void rx_chunk(struct flow *f, struct xgen *g, struct xhash *h, const uint8_t *buf,
		     size_t n)
{
	size_t bad = xgen_check(g, buf, n);

	if (bad < n && f->bad_off == UINT64_MAX)
		f->bad_off = f->rcvd + bad;
	xhash_update(h, buf, n);
	f->rcvd += n;
	atomic_fetch_add_explicit(&rx_progress, n, memory_order_relaxed);
}

/* --- streams: bcopy, read, write, mixed ----------------------------------------- */

static void *stream_tx(void *arg)
{
	struct flow *f = arg;
	uint8_t *buf = malloc(f->wmax);
	struct xgen g;
	struct xhash h;

	xgen_init(&g, f->seed);
	xhash_init(&h);
	if (!buf)
		fail_tx(f, "malloc", -ENOMEM);
	while (buf && f->sent < f->total && !f->tx_err) {
		size_t n = xrand_range(&f->wrng, f->wmin, f->wmax);
		int r;

		if (n > f->total - f->sent)
			n = (size_t)(f->total - f->sent);
		xgen_fill(&g, buf, n);
		if (f->pace)
			for (uint64_t t0 = xfer_now_ns();
			     !atomic_load(&f->rx_waiting) && xfer_now_ns() - t0 < PACE_MAX_NS;)
				pause_ns(20000);
		r = send_all(f, buf, n);
		if (r) {
			fail_tx(f, "send", r);
			break;
		}
		xhash_update(&h, buf, n);
		f->sent += n;
	}
	if (!f->tx_err) {
		int r = O->shutdown(f->tx_sd, SHUT_WR);

		if (r)
			fail_tx(f, "shutdown", r);
	}
	f->tx_hash = xhash_digest(&h);
	free(buf);
	atomic_fetch_sub(f->running, 1);
	return NULL;
}

static void *stream_rx(void *arg)
{
	struct flow *f = arg;
	uint8_t *buf = malloc(f->rmax);
	struct xgen g;
	struct xhash h;

	xgen_init(&g, f->seed);
	xhash_init(&h);
	if (!buf)
		fail_rx(f, "malloc", -ENOMEM);
	while (buf) {
		size_t want = xrand_range(&f->rrng, f->rmin, f->rmax);
		ssize_t n;

		atomic_store(&f->rx_waiting, true);
		n = O->recv(f->rx_sd, buf, want, 0);
		atomic_store(&f->rx_waiting, false);
		if (n == -EINTR)
			continue;
		if (n < 0)
			fail_rx(f, "recv", (int)n);
		if (n <= 0)
			break;
		rx_chunk(f, &g, &h, buf, (size_t)n);
	}
	f->rx_hash = xhash_digest(&h);
	free(buf);
	atomic_fetch_sub(f->running, 1);
	return NULL;
}

/* --- trans: request/response ------------------------------------------------ */

/* The size of turn t's request and reply, the same at both ends. */
static void tr_sizes(uint64_t *rng, uint64_t left, size_t *req, size_t *rep)
{
	*req = xrand_range(rng, 1, TR_REQ_MAX);
	*rep = xrand_range(rng, thresh ? thresh : 65536, 4 * (thresh ? thresh : 65536));
	if (*rep > left)
		*rep = (size_t)left;
}

/* Receive exactly len bytes (the reply into one buffer of its size, so
 * that the first recv() may advertise all of it); 0, 1 on EOF, -errno. */
static int recv_exact(struct flow *f, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = O->recv(f->rx_sd, buf + got, len - got, 0);

		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 1;
		got += (size_t)n;
	}
	return 0;
}

/* One end of a Transaction-mode connection: the request and reply
 * generators and hashes, and a reply buffer as large as a reply gets. */
struct tr_end {
	uint8_t *rbuf;
	struct xgen gq, gr;
	struct xhash hq, hr;
	uint64_t rng;
};

static int tr_begin(struct conn *c, struct tr_end *t)
{
	xgen_init(&t->gq, c->up.seed);
	xgen_init(&t->gr, c->down.seed);
	xhash_init(&t->hq);
	xhash_init(&t->hr);
	t->rng = c->up.wrng;
	t->rbuf = malloc(4 * (thresh ? thresh : 65536));
	return t->rbuf ? 0 : -ENOMEM;
}

static void *trans_client(void *arg)
{
	struct conn *c = arg;
	struct flow *req = &c->up, *rep = &c->down;
	uint8_t qbuf[TR_REQ_MAX];
	struct tr_end t;

	if (tr_begin(c, &t))
		fail_tx(req, "malloc", -ENOMEM);
	while (t.rbuf && rep->rcvd < c->rep_total) {
		size_t qn, rn;
		int r;

		tr_sizes(&t.rng, c->rep_total - rep->rcvd, &qn, &rn);
		xgen_fill(&t.gq, qbuf, qn);
		r = send_all(req, qbuf, qn);
		if (r) {
			fail_tx(req, "send request", r);
			break;
		}
		xhash_update(&t.hq, qbuf, qn);
		req->sent += qn;
		r = recv_exact(rep, t.rbuf, rn);
		if (r) {
			fail_rx(rep, r > 0 ? "recv reply (early EOF)" : "recv reply", r > 0 ? -EIO : r);
			break;
		}
		rx_chunk(rep, &t.gr, &t.hr, t.rbuf, rn);
		c->turns++;
	}
	if (!req->tx_err && !rep->rx_err) {
		int r = O->shutdown(req->tx_sd, SHUT_WR);
		ssize_t n;

		if (r)
			fail_tx(req, "shutdown", r);
		/* Nothing may follow the last reply. */
		n = O->recv(rep->rx_sd, qbuf, 1, 0);
		if (n != 0)
			fail_rx(rep, "recv after the last reply (not EOF)", n < 0 ? (int)n : -EIO);
	}
	req->tx_hash = xhash_digest(&t.hq);
	rep->rx_hash = xhash_digest(&t.hr);
	free(t.rbuf);
	atomic_fetch_sub(&c->running, 1);
	return NULL;
}

static void *trans_server(void *arg)
{
	struct conn *c = arg;
	struct flow *req = &c->up, *rep = &c->down;
	uint8_t qbuf[TR_REQ_MAX];
	struct tr_end t;

	if (tr_begin(c, &t))
		fail_tx(rep, "malloc", -ENOMEM);
	while (t.rbuf && rep->sent < c->rep_total) {
		size_t qn, rn;
		int r;

		tr_sizes(&t.rng, c->rep_total - rep->sent, &qn, &rn);
		r = recv_exact(req, qbuf, qn);
		if (r) {
			fail_rx(req, r > 0 ? "recv request (early EOF)" : "recv request",
				  r > 0 ? -EIO : r);
			break;
		}
		rx_chunk(req, &t.gq, &t.hq, qbuf, qn);
		xgen_fill(&t.gr, t.rbuf, rn);
		r = send_all(rep, t.rbuf, rn);
		if (r) {
			fail_tx(rep, "send reply", r);
			break;
		}
		xhash_update(&t.hr, t.rbuf, rn);
		rep->sent += rn;
	}
	if (!req->rx_err && !rep->tx_err) {
		ssize_t n = O->recv(req->rx_sd, qbuf, 1, 0);
		int r;

		if (n != 0)
			fail_rx(req, "recv after the last request (not EOF)", n < 0 ? (int)n : -EIO);
		r = O->shutdown(rep->tx_sd, SHUT_WR);
		if (r)
			fail_tx(rep, "shutdown", r);
	}
	req->rx_hash = xhash_digest(&t.hq);
	rep->tx_hash = xhash_digest(&t.hr);
	free(t.rbuf);
	atomic_fetch_sub(&c->running, 1);
	return NULL;
}

/* --- set-up ------------------------------------------------------------------ */

struct acceptor {
	int lsd, n, err;
	int sd[4096];
	int port[4096];
};

static void *accept_main(void *arg)
{
	struct acceptor *a = arg;

	for (int i = 0; i < a->n; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int sd = O->accept(a->lsd, (struct sockaddr *)&ss, &len, 0);

		if (sd == -EINTR) {
			i--;
			continue;
		}
		if (sd < 0) {
			a->err = sd;
			return NULL;
		}
		a->sd[i] = sd;
		a->port[i] = xfer_addr_port((struct sockaddr *)&ss);
	}
	return NULL;
}

static int set_thresh(int sd, size_t v)
{
	int iv = (int)v;

	return O->setsockopt(sd, SOL_SDP, SDP_ZCOPY_THRESH, &iv, sizeof(iv));
}

static void flow_setup(struct flow *f, int tx, int rx, uint32_t s, uint64_t total,
		       enum smode m)
{
	size_t th = thresh ? thresh : 65536;

	f->tx_sd = tx;
	f->rx_sd = rx;
	f->seed = s;
	f->total = total;
	f->wrng = xfer_size_seed(s, 0);
	f->rrng = xfer_size_seed(s, 1);
	f->bad_off = UINT64_MAX;
	atomic_init(&f->rx_waiting, false);
	switch (m) {
	case M_BCOPY:
		f->wmin = f->rmin = 1;
		f->wmax = f->rmax = 4 * th;
		break;
	case M_READ:
		f->wmin = th;
		f->wmax = 16 * th;
		f->rmin = 1;
		f->rmax = th - 1;
		break;
	case M_WRITE:
		f->wmin = f->rmin = th;
		f->wmax = f->rmax = 16 * th;
		f->pace = true;
		break;
	case M_MIXED:
	case M_TRANS:
	case M_COUNT:
		f->wmin = f->rmin = 1;
		f->wmax = f->rmax = 16 * th;
		break;
	}
}

/* Connects nconns pairs, sets each one up; -1 after say() when the run
 * cannot go on, else how many connections are not as they should be
 * (said, and the run goes on: its own checks may tell more). */
static int connect_all(void)
{
	static struct acceptor acc;
	struct sockaddr_storage ss;
	socklen_t len;
	const char *step = "parse";
	pthread_t th;
	char addr[80];
	int r, k = 0, modes[M_COUNT], nmodes = 0;

	for (int m = 0; m < M_COUNT; m++)
		if (mode_on[m])
			modes[nmodes++] = m;
	snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:0" : "%s:0", host);
	r = xfer_parse_addr(addr, true, &ss, &len);
	if (r == 0) {
		r = xfer_listen(O, (struct sockaddr *)&ss, len, 0, nconns, true, &step);
		acc.lsd = r;
	}
	if (r < 0) {
		say("FAIL listen on %s: %s: %s", addr, step, errname(r));
		return -1;
	}
	acc.n = nconns;
	if (pthread_create(&th, NULL, accept_main, &acc)) {
		say("FAIL pthread_create");
		return -1;
	}
	for (int i = 0; i < nconns; i++) {
		struct sockaddr_storage me;
		socklen_t mlen = sizeof(me);

		r = xfer_dial(O, (struct sockaddr *)&ss, len, (int)(60000 * slow), &step);
		if (r < 0) {
			say("FAIL connection %d: %s: %s", i, step, errname(r));
			_exit(1);	/* the acceptor waits for it */
		}
		conns[i].csd = r;
		O->getsockname(r, (struct sockaddr *)&me, &mlen);
		conns[i].ssd = -xfer_addr_port((struct sockaddr *)&me);	/* matched below */
	}
	pthread_join(th, NULL);
	O->close(acc.lsd);
	if (acc.err) {
		say("FAIL accept: %s", errname(acc.err));
		return -1;
	}
	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		int j;

		for (j = 0; j < nconns && acc.port[j] != -c->ssd; j++)
			;
		if (j == nconns) {
			say("FAIL connection %d: no accepted socket from port %d", i, -c->ssd);
			return -1;
		}
		c->ssd = acc.sd[j];
		c->idx = i;
		c->mode = modes[i % nmodes];
		if (want_transport && !libc_mode) {
			const char *t1 = sdp_transport_name(c->csd), *t2 = sdp_transport_name(c->ssd);

			if (!t1 || !t2 || strcmp(t1, want_transport) || strcmp(t2, want_transport)) {
				say("FAIL connection %d is on %s/%s, not %s", i, t1 ? t1 : "nothing",
				    t2 ? t2 : "nothing", want_transport);
				k++;
			}
		}
		r = set_thresh(c->csd, c->mode == M_BCOPY ? 0 : thresh);
		if (!r)
			r = set_thresh(c->ssd, c->mode == M_BCOPY ? 0 : thresh);
		if (r) {
			say("FAIL connection %d: SDP_ZCOPY_THRESH: %s%s", i, errname(r),
			    libc_mode ? " (--libc: not under the preload, or not on SDP?)" : "");
			k++;
		}
	}
	return k;
}

/* --- watchdog ---------------------------------------------------------------- */

static void *watchdog_main(void *arg)
{
	uint64_t t0 = *(uint64_t *)arg, last_change = xfer_now_ns(), last_bytes = 0;
	uint64_t last_report = t0;

	while (!atomic_load(&all_done)) {
		uint64_t now, bytes;

		pause_ns(100000000);
		now = xfer_now_ns();
		bytes = atomic_load_explicit(&rx_progress, memory_order_relaxed);
		if (bytes != last_bytes) {
			last_bytes = bytes;
			last_change = now;
		}
		if (progress_secs && now - last_report >= progress_secs * 1000000000ull) {
			last_report = now;
			say("progress: %.0f s, %.1f MiB received and checked", (now - t0) / 1e9,
			    mib(bytes));
		}
		if (now - last_change >= (uint64_t)stall_secs * slow * 1000000000ull) {
			say("FAIL no byte moved for %u s: a hang.  Still running:", stall_secs * slow);
			for (int i = 0; i < nconns; i++)
				if (atomic_load(&conns[i].running))
					say("  connection %d (%s): %d thread(s)", i,
					    mode_names[conns[i].mode], atomic_load(&conns[i].running));
			_exit(1);
		}
	}
	return NULL;
}

/* --- counters ------------------------------------------------------------ */

/*
 * What the counters say, as a difference of two readings: the engine's
 * (sdp_get_stats), or with --libc the preload's statistics file of this
 * process, what sdpstat(1) prints.  All uint64_t: figs_sub() relies on it.
 */
struct figs {
	uint64_t sent, received;
	uint64_t zc_offers, zc_sent, zc_reads, zc_received, zc_direct, zc_cancels, zc_refused;
	uint64_t wz_adverts, wz_writes, wz_written, wz_landed, wz_stale;
	uint64_t piggy, misses, mode_changes;
	uint64_t resets;		/* preload: conn_errors */
	uint64_t proto_errors;		/* engine only */
};

static void figs_sub(struct figs *d, const struct figs *a, const struct figs *b)
{
	uint64_t *pd = (uint64_t *)d;
	const uint64_t *pa = (const uint64_t *)a, *pb = (const uint64_t *)b;

	for (size_t i = 0; i < sizeof(*d) / sizeof(uint64_t); i++)
		pd[i] = pa[i] - pb[i];
}

/* Reads the counters now; with --libc *snap keeps the file's snapshot
 * (free it), else it is empty.  0, or -1 after say(). */
static int figs_now(struct figs *f, struct sdp_stats_snap *snap)
{
	memset(snap, 0, sizeof(*snap));
	if (!libc_mode) {
		struct sdp_stats st;

		sdp_get_stats(&st);
		*f = (struct figs){
			.sent = st.bytes_sent, .received = st.bytes_received,
			.zc_offers = st.zcopy_offers, .zc_sent = st.zcopy_bytes_sent,
			.zc_reads = st.zcopy_reads, .zc_received = st.zcopy_bytes_received,
			.zc_direct = st.zcopy_direct_bytes, .zc_cancels = st.zcopy_cancels,
			.zc_refused = st.zcopy_refused, .wz_adverts = st.zcopy_sink_adverts,
			.wz_writes = st.zcopy_writes, .wz_written = st.zcopy_bytes_written,
			.wz_landed = st.zcopy_sink_bytes, .wz_stale = st.zcopy_sink_stale,
			.piggy = st.trans_piggybacks, .misses = st.trans_misses,
			.mode_changes = st.mode_changes_sent, .resets = st.resets,
			.proto_errors = st.protocol_errors,
		};
		return 0;
	}

	int r = sdp_stats_read(sdp_stats_dir(), getpid(), 0, snap);

	if (r) {
		say("FAIL --libc: no statistics file of this process in %s: %s (not under the "
		    "preload?)", sdp_stats_dir(), errname(r));
		return -1;
	}
#define C(x) (OPS_C_##x < snap->n_counters ? snap->counters[OPS_C_##x] : 0)
	*f = (struct figs){
		.sent = C(SDP_BYTES_TX), .received = C(SDP_BYTES_RX),
		.zc_offers = C(ZCOPY_OFFERS), .zc_sent = C(ZCOPY_BYTES_SENT),
		.zc_reads = C(ZCOPY_READS), .zc_received = C(ZCOPY_BYTES_RECEIVED),
		.zc_direct = C(ZCOPY_DIRECT_BYTES), .zc_cancels = C(ZCOPY_CANCELS),
		.zc_refused = C(ZCOPY_REFUSED), .wz_adverts = C(ZCOPY_SINK_ADVERTS),
		.wz_writes = C(ZCOPY_WRITES), .wz_written = C(ZCOPY_BYTES_WRITTEN),
		.wz_landed = C(ZCOPY_SINK_BYTES), .wz_stale = C(ZCOPY_SINK_STALE),
		.piggy = C(TRANS_PIGGYBACKS), .misses = C(TRANS_MISSES),
		.mode_changes = C(MODE_CHANGES_SENT), .resets = C(CONN_ERRORS),
	};
#undef C
	return 0;
}

/* The row of fd in the preload's table, or NULL. */
static const struct sdp_stats_sock_snap *row_of(const struct sdp_stats_snap *snap, int fd)
{
	for (size_t i = 0; i < snap->n_socks; i++)
		if (snap->socks[i].fd == fd)
			return &snap->socks[i];
	return NULL;
}

/*
 * --libc, under the preload: every socket of the application is on SDP
 * over TEST_TRANSPORT and its row counts exactly what the application
 * moved on it; no connection went to TCP (no fallback, no TCP connect
 * or accept); and the kernel socket at each of its fds -- asked directly,
 * past the preload -- carried no byte.  Returns the failures.
 */
static int check_preload(const struct sdp_stats_snap *snap)
{
	int bad = 0, tcp_socks = 0, tcp_used = 0;

#define C(x) (OPS_C_##x < snap->n_counters ? snap->counters[OPS_C_##x] : 0)
	if (C(CONNECT_TCP) || C(ACCEPT_TCP) || C(FALLBACKS) ||
	    C(CONNECT_SDP) < (uint64_t)nconns || C(ACCEPT_SDP) < (uint64_t)nconns) {
		say("FAIL preload: connect sdp %" PRIu64 " tcp %" PRIu64 ", accept sdp %" PRIu64
		    " tcp %" PRIu64 ", %" PRIu64 " fallback(s), for %d connections", C(CONNECT_SDP),
		    C(CONNECT_TCP), C(ACCEPT_SDP), C(ACCEPT_TCP), C(FALLBACKS), nconns);
		bad++;
	}
#undef C
	for (int i = 0; i < 2 * nconns; i++) {
		const struct conn *c = &conns[i / 2];
		bool client = i % 2 == 0;
		int fd = client ? c->csd : c->ssd;
		uint64_t tx = client ? c->up.sent : c->down.sent;
		uint64_t rx = client ? c->down.rcvd : c->up.rcvd;
		const struct sdp_stats_sock_snap *row = row_of(snap, fd);
		struct tcp_info ti;
		socklen_t len = sizeof(ti);

		if (!row || row->stack != OPS_STACK_SDP ||
		    (want_transport && strcmp(row->transport, want_transport)) ||
		    row->bytes_tx != tx || row->bytes_rx != rx) {
			say("FAIL preload: fd %d (connection %d, %s): %s, stack %s over %s, %" PRIu64
			    "/%" PRIu64 " bytes sent/received, the application %" PRIu64 "/%" PRIu64,
			    fd, c->idx, client ? "client" : "server", row ? "its row" : "no row",
			    row ? sdp_stats_stack_name(row->stack) : "-",
			    row && row->transport[0] ? row->transport : "-", row ? row->bytes_tx : 0,
			    row ? row->bytes_rx : 0, tx, rx);
			bad++;
		}
		memset(&ti, 0, sizeof(ti));
		if (syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
			continue;	/* no kernel TCP socket there at all */
		tcp_socks++;
		if (ti.tcpi_bytes_acked || ti.tcpi_bytes_received) {
			tcp_used++;
			say("FAIL fd %d (connection %d): its kernel TCP socket carried %llu bytes out, "
			    "%llu in", fd, c->idx, (unsigned long long)ti.tcpi_bytes_acked,
			    (unsigned long long)ti.tcpi_bytes_received);
			bad++;
		}
	}
	say("preload: %d sockets, %d kernel TCP socket(s) at their fds, %d of which carried bytes",
	    2 * nconns, tcp_socks, tcp_used);
	return bad;
}

/* --- checks and figures ------------------------------------------------------ */

static int check_flow(const struct conn *c, const struct flow *f, const char *dir,
		      uint64_t want)
{
	int bad = 0;

	if (f->tx_err) {
		say("FAIL connection %d (%s) %s: sender: %s: %s", c->idx, mode_names[c->mode], dir,
		    f->tx_op, errname(f->tx_err));
		bad++;
	}
	if (f->rx_err) {
		say("FAIL connection %d (%s) %s: receiver: %s: %s", c->idx, mode_names[c->mode],
		    dir, f->rx_op, errname(f->rx_err));
		bad++;
	}
	if (f->bad_off != UINT64_MAX) {
		say("FAIL connection %d (%s) %s: DATA CORRUPT from byte %" PRIu64, c->idx,
		    mode_names[c->mode], dir, f->bad_off);
		bad++;
	}
	if (f->sent != want || f->rcvd != want) {
		say("FAIL connection %d (%s) %s: %" PRIu64 " bytes to send, %" PRIu64 " sent, %"
		    PRIu64 " received", c->idx, mode_names[c->mode], dir, want, f->sent, f->rcvd);
		bad++;
	} else if (f->tx_hash != f->rx_hash) {
		say("FAIL connection %d (%s) %s: XXH64 sent %016" PRIx64 ", received %016" PRIx64,
		    c->idx, mode_names[c->mode], dir, f->tx_hash, f->rx_hash);
		bad++;
	}
	return bad;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: soak_check [--host ADDR] [--conns N] [--bytes TOTAL] [--seed S]\n"
		   "                  [--modes bcopy,read,write,trans,mixed] [--thresh BYTES]\n"
		   "                  [--stall SECS] [--progress SECS] [--libc]\n"
		   "                  [--no-rdma read|write|read,write] [--help]\n");
}

static int parse_modes(const char *s)
{
	char buf[128], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	memset(mode_on, 0, sizeof(mode_on));
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int m;

		for (m = 0; m < M_COUNT && strcmp(t, mode_names[m]); m++)
			;
		if (m == M_COUNT)
			return -1;
		mode_on[m] = true;
	}
	for (int m = 0; m < M_COUNT; m++)
		if (mode_on[m])
			return 0;
	return -1;
}

/* 0: run; 1: --help; -1: a bad argument. */
static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'h' },
		{ "conns", required_argument, NULL, 'c' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 's' },
		{ "modes", required_argument, NULL, 'm' },
		{ "thresh", required_argument, NULL, 't' },
		{ "stall", required_argument, NULL, 'S' },
		{ "progress", required_argument, NULL, 'p' },
		{ "libc", no_argument, NULL, 'l' },
		{ "no-rdma", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t v;
	int o;

	for (int m = 0; m < M_COUNT; m++)
		mode_on[m] = true;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'h':
			host = optarg;
			break;
		case 'c':
			if (xfer_parse_size(optarg, &v) || v < 1 || v > 4096)
				return -1;
			nconns = (int)v;
			break;
		case 'b':
			if (xfer_parse_size(optarg, &total_bytes))
				return -1;
			break;
		case 's':
			if (xfer_parse_size(optarg, &v) || v > UINT32_MAX)
				return -1;
			seed = (uint32_t)v;
			seed_given = true;
			break;
		case 'm':
			if (parse_modes(optarg))
				return -1;
			break;
		case 't':
			if (xfer_parse_size(optarg, &v) || v < 4096 || v > 16 << 20)
				return -1;
			thresh = (size_t)v;
			break;
		case 'S':
			if (xfer_parse_size(optarg, &v) || v < 1 || v > 86400)
				return -1;
			stall_secs = (unsigned)v;
			break;
		case 'l':
			libc_mode = true;
			O = &xsock_tcp;
			break;
		case 'n':
			no_rdma_read = !strcmp(optarg, "read") || !strcmp(optarg, "read,write");
			no_rdma_write = !strcmp(optarg, "write") || !strcmp(optarg, "read,write");
			if (!no_rdma_read && !no_rdma_write)
				return -1;
			break;
		case 'p':
			if (xfer_parse_size(optarg, &v) || v > 86400)
				return -1;
			progress_secs = (unsigned)v;
			break;
		case 'H':
			return 1;
		default:
			return -1;
		}
	}
	return optind == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct figs f0, f1, d;
	struct sdp_stats_snap snap;
	uint64_t t0, ns, moved = 0, per_mode[M_COUNT] = { 0 };
	uint64_t bcopy, turns = 0;
	int nmode[M_COUNT] = { 0 }, bad = 0;
	const char *e;
	pthread_t wd;

	switch (parse_args(argc, argv)) {
	case 0:
		break;
	case 1:
		usage(stdout);
		return 0;
	default:
		usage(stderr);
		return 2;
	}
	if ((e = getenv("TEST_SLOW")) && atoi(e) > 0)
		slow = (unsigned)atoi(e);
	if ((e = getenv("TEST_TRANSPORT")) && *e)
		want_transport = e;
	if (!seed_given) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ getpid());
	}
	conns = calloc((size_t)nconns, sizeof(*conns));
	if (!conns)
		return 1;
	say("seed %" PRIu32 " (--seed %" PRIu32 " replays the sizes and data), %d connections, "
	    "%.1f MiB in all, zero-copy threshold %zu", seed, seed, nconns, mib(total_bytes),
	    thresh);
	bad = connect_all();
	if (bad < 0)
		return 1;

	/* Each connection's share, half each way (trans: all of it in the
	 * replies, its requests on top). */
	uint64_t share = total_bytes / (uint64_t)nconns / 2;

	if (figs_now(&f0, &snap))
		return 1;
	sdp_stats_snap_free(&snap);
	t0 = xfer_now_ns();
	if (pthread_create(&wd, NULL, watchdog_main, &t0)) {
		say("FAIL pthread_create");
		return 1;
	}
	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		uint32_t cs = (uint32_t)xfer_size_seed(seed, i + 2);

		nmode[c->mode]++;
		flow_setup(&c->up, c->csd, c->ssd, cs, share, c->mode);
		flow_setup(&c->down, c->ssd, c->csd, xfer_reply_seed(cs), share, c->mode);
		c->up.running = c->down.running = &c->running;
		if (c->mode == M_TRANS) {
			c->rep_total = 2 * share;
			c->nth = 2;
			atomic_store(&c->running, 2);
			if (pthread_create(&c->th[0], NULL, trans_client, c) ||
			    pthread_create(&c->th[1], NULL, trans_server, c)) {
				say("FAIL pthread_create");
				return 1;
			}
			continue;
		}
		c->nth = 4;
		atomic_store(&c->running, 4);
		if (pthread_create(&c->th[0], NULL, stream_tx, &c->up) ||
		    pthread_create(&c->th[1], NULL, stream_rx, &c->up) ||
		    pthread_create(&c->th[2], NULL, stream_tx, &c->down) ||
		    pthread_create(&c->th[3], NULL, stream_rx, &c->down)) {
			say("FAIL pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];

		for (int k = 0; k < c->nth; k++)
			pthread_join(c->th[k], NULL);
	}
	ns = xfer_now_ns() - t0;
	atomic_store(&all_done, true);
	pthread_join(wd, NULL);
	if (figs_now(&f1, &snap))
		return 1;
	figs_sub(&d, &f1, &f0);

	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		/* trans: the requests' length is whatever the turns added up
		 * to; both ends must agree on it (check_flow compares). */
		uint64_t up_want = c->mode == M_TRANS ? c->up.sent : share;
		uint64_t down_want = c->mode == M_TRANS ? c->rep_total : share;

		bad += check_flow(c, &c->up, "client->server", up_want);
		bad += check_flow(c, &c->down, "server->client", down_want);
		moved += c->up.rcvd + c->down.rcvd;
		per_mode[c->mode] += c->up.rcvd + c->down.rcvd;
		turns += c->turns;
	}
	if (libc_mode)
		bad += check_preload(&snap);
	sdp_stats_snap_free(&snap);
	for (int i = 0; i < nconns; i++) {
		O->close(conns[i].csd);
		O->close(conns[i].ssd);
	}

	bcopy = d.sent - d.zc_sent - d.wz_written;
	say("%" PRIu64 " bytes (%.1f MiB) moved and checked in %.2f s: %.3f Gbit/s, %d error(s)",
	    moved, mib(moved), ns / 1e9, xfer_gbit_s(moved, ns), bad);
	for (int m = 0; m < M_COUNT; m++)
		if (nmode[m])
			say("  %-5s %3d connection(s), %10.1f MiB%s", mode_names[m], nmode[m],
			    mib(per_mode[m]), m == M_TRANS ? " (requests and replies)" : "");
	if (nmode[M_TRANS])
		say("  trans %" PRIu64 " request/response turns", turns);
	say("%s: sent %.1f MiB, received %.1f MiB; by path: Bcopy %.1f MiB, Read Zcopy %.1f "
	    "MiB (%" PRIu64 " SrcAvails, %" PRIu64 " RDMA reads, %.1f MiB direct, %" PRIu64
	    " cancelled, %" PRIu64 " refused), Write Zcopy %.1f MiB (%" PRIu64 " SinkAvails, %"
	    PRIu64 " RDMA writes, %" PRIu64 " stale), Transaction %" PRIu64 " piggybacked "
	    "requests, %" PRIu64 " misses; %" PRIu64 " ModeChanges; %" PRIu64 " resets, %" PRIu64
	    " protocol errors", libc_mode ? "preload (this process's sdpstat counters)" : "engine",
	    mib(d.sent), mib(d.received), mib(bcopy), mib(d.zc_sent), d.zc_offers, d.zc_reads,
	    mib(d.zc_direct), d.zc_cancels, d.zc_refused, mib(d.wz_written), d.wz_adverts,
	    d.wz_writes, d.wz_stale, d.piggy, d.misses, d.mode_changes, d.resets, d.proto_errors);

	/* Every byte the connections moved went through SDP, once. */
	if (d.sent != moved || d.received != moved) {
		say("FAIL SDP sent %" PRIu64 " and received %" PRIu64 " bytes, the connections "
		    "moved %" PRIu64, d.sent, d.received, moved);
		bad++;
	}
	/* The preload copies the engine's counters into its file as bytes
	 * move, so its last few may lag: only the engine's are exact. */
	if (!libc_mode && (d.zc_sent != d.zc_received || d.wz_written != d.wz_landed)) {
		say("FAIL the two ends disagree: RDMA-read %" PRIu64 " of %" PRIu64 " offered, "
		    "RDMA-written %" PRIu64 ", %" PRIu64 " landed in adverts",
		    d.zc_received, d.zc_sent, d.wz_written, d.wz_landed);
		bad++;
	}
	if (d.resets || d.proto_errors) {
		say("FAIL %" PRIu64 " reset(s), %" PRIu64 " protocol error(s)", d.resets,
		    d.proto_errors);
		bad++;
	}
	/* Each mode's path carried bytes (the others may have too: mixed
	 * takes every path, and a SrcAvail the sink did not read in time
	 * finishes by Bcopy). */
	if (nmode[M_BCOPY] && !bcopy) {
		say("FAIL bcopy connections, yet no byte went by Bcopy");
		bad++;
	}
	if (no_rdma_read && d.zc_sent) {
		say("FAIL %" PRIu64 " bytes RDMA-read on a transport without RDMA read", d.zc_sent);
		bad++;
	} else if (!no_rdma_read && nmode[M_READ] && !d.zc_sent) {
		say("FAIL read connections, yet no byte was RDMA-read");
		bad++;
	}
	/* Transaction's requests ride on a SinkAvail: Write Zcopy's advert. */
	if (no_rdma_write) {
		if (d.wz_written || d.piggy) {
			say("FAIL %" PRIu64 " bytes RDMA-written, %" PRIu64
			    " requests on a SinkAvail, on a transport without RDMA write",
			    d.wz_written, d.piggy);
			bad++;
		}
	} else {
		if (nmode[M_WRITE] && !d.wz_written) {
			say("FAIL write connections, yet no byte was RDMA-written into an advert");
			bad++;
		}
		if (nmode[M_TRANS] && !d.piggy) {
			say("FAIL trans connections, yet no request rode on a SinkAvail");
			bad++;
		}
	}
	say("%s (seed %" PRIu32 ")", bad ? "FAIL" : "PASS", seed);
	free(conns);
	return bad ? 1 : 0;
}
