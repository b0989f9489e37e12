/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fault_check: transport faults under every blocking call of the engine's
 * API (include/sdp.h).  Run by faults.sh.
 *
 *   fault_check [-s SEED] [-o API[,API...]] [-f FAULT]
 *
 * The hook: a test backend installed with oti_test_backend() (so nothing
 * of it exists in libsdp.so or in any program but this one) that passes
 * every entry to the software transport, tcp-fallback, and fails one
 * chosen operation at its Nth call once the case arms it:
 *
 *   post_send, post_recv, rdma_read, rdma_write   the post returns -EIO
 *   wc_send, wc_recv, wc_read, wc_write           the Nth completion of that
 *                        kind carries -EIO; the endpoint then behaves as an
 *                        RC queue pair in error does: the transport
 *                        connection breaks (its socket is shut down, so the
 *                        peer sees it go) and every later completion is
 *                        flushed (-ECANCELED)
 *   ev_disc, ev_error    the Nth get_event() returns DISCONNECTED (or ERROR,
 *                        -EIO) and the transport connection breaks
 *
 * on the connecting (active) or the accepting (passive) endpoint.  N is
 * drawn from the seed.
 *
 * One process: a server thread with a listener serves one connection at a
 * time, in the role the case gives it (a seeded stream's source or its
 * sink, checked byte for byte, or an echo).  The client drives one API
 * call into each fault:
 *
 *   recv     blocking recv() while the server streams
 *   send     blocking send() of Bcopy sizes while the server reads
 *   poll     poll(POLLIN) and non-blocking recv() while the server streams
 *   zcopy    blocking send() of zero-copy sizes (SrcAvail, RDMA read by
 *            the server)
 *   wzcopy   the same while the server's receives are big enough to be
 *            advertised (SinkAvail, RDMA write by the client)
 *   linger   close() with SO_LINGER on, data still queued, the server
 *            reading slowly
 *   connect  blocking connect() (then recv())
 *   accept   the server's blocking accept() (the fault on its side)
 *
 * Each case checks: the fault fired; every call returned (a watchdog ends
 * the process with FAIL after a generous limit, multiplied by TEST_SLOW);
 * the error is one TCP gives there (recv: ECONNRESET, ETIMEDOUT or end of
 * stream; send: ECONNRESET, EPIPE, ETIMEDOUT; connect: ECONNREFUSED,
 * ECONNRESET, ETIMEDOUT); every byte either side received matches the
 * stream; and then a new connection carries 1 MiB both ways intact.
 *
 * One line per case; exit 0 when every case passed, 1 otherwise.
 */
#include "oti.h"
#include "say.h"
#include "sdp.h"
#include "xfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *say_prefix = "fault_check";

#define KiB 1024u
#define MiB (1024u * 1024u)
#define CHUNK (64 * KiB)
#define ZC_SEND MiB		/* above the zcopy_thresh default */
/* Bytes a case may move without its fault firing before it gives up. */
#define BUDGET (256ull * MiB)

/* --- the fault hook: a wrapping backend -------------------------------- */

enum fault_op {
	F_POST_SEND, F_POST_RECV, F_RDMA_READ, F_RDMA_WRITE,
	F_WC_SEND, F_WC_RECV, F_WC_READ, F_WC_WRITE, F_EV_DISC, F_EV_ERROR, F_NOPS
};

static const char *const fault_name[F_NOPS] = {
	"post_send", "post_recv", "rdma_read", "rdma_write",
	"wc_send", "wc_recv", "wc_read", "wc_write", "ev_disc", "ev_error",
};

static const struct oti_ops *real = &tcpf_transport_ops;

/* Protects every field of fault and the ep table; taken inside the
 * engine's connection lock (the engine calls the backend under it). */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	bool armed;
	enum fault_op op;
	bool passive;		/* on the accepted ep, else the connecting one */
	unsigned nth;
	unsigned calls;
	bool fired;
	unsigned gen;		/* the case's: only its eps are hit, not the
				 * last one's, closing in the background */
} fault;

#define MAX_EPS 64
static struct ep_state {
	struct oti_ep *ep;	/* NULL: free */
	bool passive;
	unsigned gen;		/* fault.gen when it was opened */
	bool broken;		/* an error completion was given: flush */
} eps[MAX_EPS];

static struct ep_state *ep_find(struct oti_ep *ep)
{
	for (int i = 0; i < MAX_EPS; i++)
		if (eps[i].ep == ep)
			return &eps[i];
	return NULL;
}

static void ep_track(struct oti_ep *ep, bool passive)
{
	pthread_mutex_lock(&fault_lock);
	struct ep_state *e = ep_find(NULL);

	if (e)
		*e = (struct ep_state){ .ep = ep, .passive = passive, .gen = fault.gen };
	else
		say("FAIL more than %d endpoints at once", MAX_EPS);
	pthread_mutex_unlock(&fault_lock);
}

/* Is this call on ep the armed fault's Nth?  Under fault_lock. */
static bool fault_hit(struct ep_state *e, enum fault_op op)
{
	if (!e || !fault.armed || fault.fired || fault.op != op || e->passive != fault.passive ||
	    e->gen != fault.gen)
		return false;
	if (++fault.calls < fault.nth)
		return false;
	fault.fired = true;
	return true;
}

static bool fault_post(struct oti_ep *ep, enum fault_op op)
{
	pthread_mutex_lock(&fault_lock);
	bool hit = fault_hit(ep_find(ep), op);

	pthread_mutex_unlock(&fault_lock);
	return hit;
}

/*
 * The transport connection breaks, in whatever state it is, as when a
 * queue pair goes into error or the device goes: the peer sees it go.
 * (tcp-fallback's ep fd is its socket.)
 */
static void link_cut(struct oti_ep *ep)
{
	shutdown(real->ep_fd(ep), SHUT_RDWR);
}

static int w_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
		     socklen_t srclen, struct oti_ep **out)
{
	int ret = real->ep_open(dst, dstlen, src, srclen, out);

	if (!ret)
		ep_track(*out, false);
	return ret;
}

static int w_ep_accept_open(struct oti_listener *l, struct oti_connreq *req, struct oti_ep **out)
{
	int ret = real->ep_accept_open(l, req, out);

	if (!ret)
		ep_track(*out, true);
	return ret;
}

static void w_ep_close(struct oti_ep *ep)
{
	pthread_mutex_lock(&fault_lock);
	struct ep_state *e = ep_find(ep);

	if (e)
		e->ep = NULL;
	pthread_mutex_unlock(&fault_lock);
	real->ep_close(ep);
}

static int w_post_send(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx, unsigned flags)
{
	return fault_post(ep, F_POST_SEND) ? -EIO : real->post_send(ep, sge, ctx, flags);
}

static int w_post_recv(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx)
{
	return fault_post(ep, F_POST_RECV) ? -EIO : real->post_recv(ep, sge, ctx);
}

static int w_rdma_read(struct oti_ep *ep, const struct oti_sge *l, uint64_t raddr, uint32_t rkey,
		       uint64_t ctx)
{
	return fault_post(ep, F_RDMA_READ) ? -EIO : real->rdma_read(ep, l, raddr, rkey, ctx);
}

static int w_rdma_write(struct oti_ep *ep, const struct oti_sge *l, uint64_t raddr, uint32_t rkey,
			uint64_t ctx)
{
	return fault_post(ep, F_RDMA_WRITE) ? -EIO : real->rdma_write(ep, l, raddr, rkey, ctx);
}

static int w_poll_cq(struct oti_ep *ep, struct oti_wc *wc, int n)
{
	static const enum fault_op of_wc[] = {
		[OTI_WC_SEND] = F_WC_SEND, [OTI_WC_RECV] = F_WC_RECV,
		[OTI_WC_RDMA_READ] = F_WC_READ, [OTI_WC_RDMA_WRITE] = F_WC_WRITE,
	};
	int got = real->poll_cq(ep, wc, n);
	bool shut = false;

	pthread_mutex_lock(&fault_lock);
	struct ep_state *e = ep_find(ep);

	for (int i = 0; e && i < got; i++) {
		if (e->broken) {
			wc[i].status = -ECANCELED;
		} else if (fault_hit(e, of_wc[wc[i].op])) {
			wc[i].status = -EIO;
			e->broken = true;
			shut = true;
		}
	}
	pthread_mutex_unlock(&fault_lock);
	if (shut)
		link_cut(ep);
	return got;
}

static int w_get_event(struct oti_ep *ep, struct oti_event *ev)
{
	enum oti_event_type inject = 0;

	pthread_mutex_lock(&fault_lock);
	struct ep_state *e = ep_find(ep);

	if (fault_hit(e, F_EV_DISC))
		inject = OTI_EV_DISCONNECTED;
	else if (fault_hit(e, F_EV_ERROR))
		inject = OTI_EV_ERROR;
	pthread_mutex_unlock(&fault_lock);
	if (!inject)
		return real->get_event(ep, ev);
	link_cut(ep);
	*ev = (struct oti_event){ .type = inject, .status = inject == OTI_EV_ERROR ? -EIO : 0 };
	return 0;
}

static struct oti_ops wrap;

static void hook_install(void)
{
	wrap = *real;
	wrap.ep_open = w_ep_open;
	wrap.ep_accept_open = w_ep_accept_open;
	wrap.ep_close = w_ep_close;
	wrap.post_send = w_post_send;
	wrap.post_recv = w_post_recv;
	wrap.rdma_read = w_rdma_read;
	wrap.rdma_write = w_rdma_write;
	wrap.poll_cq = w_poll_cq;
	wrap.get_event = w_get_event;
	if (oti_test_backend(&wrap)) {
		say("FAIL oti_test_backend: the engine started first");
		exit(1);
	}
}

static void fault_arm(bool on)
{
	pthread_mutex_lock(&fault_lock);
	fault.armed = on;
	pthread_mutex_unlock(&fault_lock);
}

static bool fault_fired(void)
{
	pthread_mutex_lock(&fault_lock);
	bool f = fault.fired;

	pthread_mutex_unlock(&fault_lock);
	return f;
}

/* --- watchdog -------------------------------------------------------------- */

static unsigned slow = 1;
static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static char wd_what[160];
static unsigned wd_secs;
static struct timespec wd_deadline;

/* What is being waited for now, and for how long at most. */
static void watch(const char *what, int seconds)
{
	pthread_mutex_lock(&wd_lock);
	snprintf(wd_what, sizeof(wd_what), "%s", what);
	wd_secs = (unsigned)seconds * slow;
	clock_gettime(CLOCK_MONOTONIC, &wd_deadline);
	wd_deadline.tv_sec += (time_t)seconds * slow;
	pthread_mutex_unlock(&wd_lock);
}

static void *watchdog(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd_lock);
	for (;;) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (wd_deadline.tv_sec && (now.tv_sec > wd_deadline.tv_sec ||
					   (now.tv_sec == wd_deadline.tv_sec &&
					    now.tv_nsec >= wd_deadline.tv_nsec))) {
			say("FAIL %s: hung (no return within %u s)", wd_what, wd_secs);
			_exit(1);
		}
		pthread_mutex_unlock(&wd_lock);
		nanosleep(&(struct timespec){ .tv_sec = 0, .tv_nsec = 200 * 1000 * 1000 }, NULL);
		pthread_mutex_lock(&wd_lock);
	}
	return NULL;
}

/* --- the server ------------------------------------------------------------ */

enum role { R_SOURCE, R_SINK, R_SLOW_SINK, R_BIG_SINK, R_ECHO };

static struct sockaddr_in srv_addr;
static int listen_sd;
static uint64_t seed = 1;

/* Protects the server's record; the client waits on srv_cond for the
 * connection it names to have been served. */
static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t srv_cond = PTHREAD_COND_INITIALIZER;
static uint64_t srv_done;	/* seed of the last connection served */
static bool srv_corrupt;	/* a byte it read did not match */
static char srv_note[128];	/* how the last case's connection ended */

static void srv_end(uint64_t s, enum role role, bool corrupt, const char *fmt, long v)
{
	pthread_mutex_lock(&srv_lock);
	srv_done = s;
	srv_corrupt = srv_corrupt || corrupt;
	if (role != R_ECHO)
		snprintf(srv_note, sizeof(srv_note), fmt, v);
	pthread_cond_broadcast(&srv_cond);
	pthread_mutex_unlock(&srv_lock);
}

/* A connection that died before it named its seed: the case whose
 * connection it was may be over, its next connection served, by the time
 * it is accepted (accept order is not connect order), so it says how it
 * ended but leaves srv_done alone, or srv_wait() would wait for ever. */
static void srv_unnamed(void)
{
	pthread_mutex_lock(&srv_lock);
	snprintf(srv_note, sizeof(srv_note), "no header");
	pthread_mutex_unlock(&srv_lock);
}

static void serve(int sd, enum role role, uint64_t s)
{
	static unsigned char buf[4 * MiB];
	struct xgen g;
	uint64_t rng = s;
	uint64_t moved = 0;
	ssize_t r = 0;

	xgen_init(&g, s);
	switch (role) {
	case R_SOURCE:
		while (moved < 2 * BUDGET) {
			size_t n = xrand_range(&rng, 1, CHUNK);

			xgen_fill(&g, buf, n);
			r = sdp_send(sd, buf, n, MSG_NOSIGNAL);
			if (r < 0)
				break;
			/* A short send: the stream goes on from what went. */
			g.off -= n - (size_t)r;
			moved += (size_t)r;
		}
		srv_end(s, role, false, "send %ld", (long)r);
		return;
	case R_SINK:
	case R_SLOW_SINK:
	case R_BIG_SINK:
		for (;;) {
			/* Big receives advertise their buffers (SinkAvail):
			 * the client RDMA-writes into them. */
			size_t n = role == R_SINK ? CHUNK : role == R_BIG_SINK ? sizeof(buf) : 4 * KiB;

			r = sdp_recv(sd, buf, n, 0);
			if (r <= 0)
				break;
			if (xgen_check(&g, buf, (size_t)r) != (size_t)r) {
				srv_end(s, role, true, "corrupt byte at %ld", (long)g.off);
				return;
			}
			if (role == R_SLOW_SINK)
				nanosleep(&(struct timespec){ .tv_nsec = 200 * 1000 }, NULL);
		}
		srv_end(s, role, false, "recv %ld", (long)r);
		return;
	case R_ECHO:
		while ((r = sdp_recv(sd, buf, CHUNK, 0)) > 0)
			if (xfer_send_all(&xsock_sdp, sd, buf, (size_t)r, -1) != r)
				break;
		srv_end(s, role, false, "echo %ld", (long)r);
		return;
	}
}

static void *server(void *arg)
{
	(void)arg;
	for (;;) {
		int sd = sdp_accept(listen_sd, NULL, NULL, 0);

		if (sd == -EBADF || sd == -EINVAL)
			return NULL;
		if (sd < 0) {
			/* TCP's accept() may report a connection reset
			 * before it was accepted; it is no end of the listener. */
			say("  accept: %s", strerror(-sd));
			continue;
		}
		/* The client names the role and the seed: a connection
		 * broken under its handshake may be served late. */
		uint64_t hdr[2];

		if (xfer_recv_all(&xsock_sdp, sd, hdr, sizeof(hdr), -1) == sizeof(hdr) &&
		    hdr[0] <= R_ECHO)
			serve(sd, (enum role)hdr[0], hdr[1]);
		else
			srv_unnamed();
		sdp_close(sd);
	}
}

/* Wait for the server to have served the connection of seed s, and so
 * every one before it. */
static void srv_wait(uint64_t s)
{
	pthread_mutex_lock(&srv_lock);
	while (srv_done != s)
		pthread_cond_wait(&srv_cond, &srv_lock);
	pthread_mutex_unlock(&srv_lock);
}

/* --- the client's cases --------------------------------------------------- */

enum api { A_RECV, A_SEND, A_POLL, A_ZCOPY, A_WZCOPY, A_LINGER, A_CONNECT, A_ACCEPT, A_NAPIS };

static const char *const api_name[A_NAPIS] = {
	"recv", "send", "poll", "zcopy", "wzcopy", "linger", "connect", "accept",
};

/* Which faults a case drives its call into, on which sides. */
struct plan {
	enum api api;
	enum role role;
	unsigned ops;		/* bit per enum fault_op, on either side */
	unsigned passive_only;	/* of those, the ones only the server does */
	unsigned active_only;	/* and the ones only the client does */
	bool active, passive;
	unsigned max_nth;
};

#define B(op) (1u << (op))
#define DATA_FAULTS (B(F_POST_SEND) | B(F_POST_RECV) | B(F_WC_SEND) | B(F_WC_RECV) | \
		     B(F_EV_DISC) | B(F_EV_ERROR))

static const struct plan plans[] = {
	{ A_RECV, R_SOURCE, DATA_FAULTS, 0, 0, true, true, 40 },
	{ A_SEND, R_SINK, DATA_FAULTS, 0, 0, true, true, 40 },
	{ A_POLL, R_SOURCE, DATA_FAULTS, 0, 0, true, true, 40 },
	/* The server, the receiver, RDMA-reads the client's SrcAvails. */
	{ A_ZCOPY, R_SINK, DATA_FAULTS | B(F_RDMA_READ) | B(F_WC_READ),
	  B(F_RDMA_READ) | B(F_WC_READ), 0, true, true, 8 },
	/* The server's big receives advertise (SinkAvail); the client
	 * RDMA-writes into them (Write Zcopy), or the server reads the
	 * client's SrcAvail straight into them. */
	{ A_WZCOPY, R_BIG_SINK, DATA_FAULTS | B(F_RDMA_WRITE) | B(F_WC_WRITE) | B(F_RDMA_READ) |
	  B(F_WC_READ), B(F_RDMA_READ) | B(F_WC_READ), B(F_RDMA_WRITE) | B(F_WC_WRITE), true, true, 8 },
	{ A_LINGER, R_SLOW_SINK, DATA_FAULTS, 0, 0, true, true, 10 },
	/* Before the HelloAck nothing is polled from the completion queue. */
	{ A_CONNECT, R_SOURCE, B(F_POST_SEND) | B(F_POST_RECV) | B(F_EV_DISC) | B(F_EV_ERROR),
	  0, 0, true, false, 2 },
	{ A_ACCEPT, R_SOURCE, B(F_POST_SEND) | B(F_POST_RECV) | B(F_EV_DISC) | B(F_EV_ERROR),
	  0, 0, false, true, 2 },
};

static bool err_in(long err, const int *ok)
{
	for (; *ok; ok++)
		if (err == -*ok)
			return true;
	return false;
}

static const int recv_errs[] = { ECONNRESET, ETIMEDOUT, 0 };
static const int send_errs[] = { ECONNRESET, EPIPE, ETIMEDOUT, 0 };
static const int conn_errs[] = { ECONNREFUSED, ECONNRESET, ETIMEDOUT, 0 };

static const char *errtext(long r)
{
	static __thread char b[64];

	if (r >= 0)
		snprintf(b, sizeof(b), "%ld", r);
	else
		snprintf(b, sizeof(b), "%s", strerror((int)-r));
	return b;
}

/* A connection to the server, which plays role with seed s on it. */
static int dial(enum role role, uint64_t s)
{
	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0);
	uint64_t hdr[2] = { role, s };

	if (sd < 0)
		return sd;
	int r = sdp_connect(sd, (struct sockaddr *)&srv_addr, sizeof(srv_addr));

	if (r == 0) {
		ssize_t w = xfer_send_all(&xsock_sdp, sd, hdr, sizeof(hdr), -1);

		r = w == sizeof(hdr) ? 0 : w < 0 ? (int)w : -EPIPE;
	}
	if (r < 0) {
		sdp_close(sd);
		return r;
	}
	return sd;
}

/* Reads the server's stream until an error or its end: 1 if it ended as
 * recv may, 0 with why in *why. */
static int recv_until_end(int sd, uint64_t s, bool polled, char *why, size_t cap)
{
	static unsigned char buf[CHUNK];
	struct xgen g;
	ssize_t r;

	xgen_init(&g, s);
	for (;;) {
		if (polled) {
			struct pollfd p = { .fd = sd, .events = POLLIN };
			int n = sdp_poll(&p, 1, -1);

			if (n != 1) {
				snprintf(why, cap, "poll returned %s", errtext(n));
				return 0;
			}
		}
		r = sdp_recv(sd, buf, sizeof(buf), polled ? MSG_DONTWAIT : 0);
		if (polled && r == -EAGAIN)
			continue;
		if (r <= 0)
			break;
		if (xgen_check(&g, buf, (size_t)r) != (size_t)r) {
			snprintf(why, cap, "corrupt byte at stream offset %llu",
				 (unsigned long long)g.off);
			return 0;
		}
		if (g.off > BUDGET && !fault_fired()) {
			snprintf(why, cap, "the fault did not fire within %llu bytes",
				 (unsigned long long)BUDGET);
			return 0;
		}
	}
	snprintf(why, cap, "recv %s after %llu bytes", r ? errtext(r) : "EOF",
		 (unsigned long long)g.off);
	return r == 0 || err_in(r, recv_errs);
}

/* Sends the stream in sizes up to max until an error. */
static int send_until_error(int sd, uint64_t s, size_t min, size_t max, char *why, size_t cap)
{
	static unsigned char buf[4 * MiB];
	struct xgen g;
	uint64_t rng = s ^ 0x9e3779b97f4a7c15ull;
	ssize_t r;

	xgen_init(&g, s);
	for (;;) {
		size_t n = xrand_range(&rng, min, max);

		xgen_fill(&g, buf, n);
		r = sdp_send(sd, buf, n, MSG_NOSIGNAL);
		if (r < 0)
			break;
		g.off -= n - (size_t)r;
		if (g.off > BUDGET && !fault_fired()) {
			snprintf(why, cap, "the fault did not fire within %llu bytes",
				 (unsigned long long)BUDGET);
			return 0;
		}
	}
	snprintf(why, cap, "send %s after %llu bytes", errtext(r), (unsigned long long)g.off);
	return err_in(r, send_errs);
}

/* close() with SO_LINGER while the server drains a full window slowly. */
static int linger_close(int sd, uint64_t s, char *why, size_t cap)
{
	static unsigned char buf[CHUNK];
	struct linger lg = { .l_onoff = 1, .l_linger = 3600 };
	struct xgen g;
	ssize_t r;

	sdp_setsockopt(sd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	xgen_init(&g, s);
	do {
		xgen_fill(&g, buf, sizeof(buf));
		r = sdp_send(sd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r >= 0)
			g.off -= sizeof(buf) - (size_t)r;
	} while (r > 0 && g.off < 64 * MiB);
	fault_arm(true);
	int c = sdp_close(sd);

	/* Linux: 0, or the pending error; never a timeout this early. */
	snprintf(why, cap, "close %s after queueing %llu bytes", errtext(c),
		 (unsigned long long)g.off);
	return c == 0 || err_in(c, send_errs);
}

static int failures;

/* Later connections work: 1 MiB echoed intact, and served to its end. */
static bool next_works(uint64_t s, char *why, size_t cap)
{
	static unsigned char out[MiB], in[MiB];
	struct xgen g;
	int sd = dial(R_ECHO, s);

	if (sd < 0) {
		snprintf(why, cap, "connect %s", errtext(sd));
		return false;
	}
	xgen_init(&g, s);
	xgen_fill(&g, out, sizeof(out));
	ssize_t w = xfer_send_all(&xsock_sdp, sd, out, sizeof(out), -1);

	sdp_shutdown(sd, SHUT_WR);
	ssize_t r = xfer_recv_all(&xsock_sdp, sd, in, sizeof(in), -1);

	sdp_close(sd);
	if (w != (ssize_t)sizeof(out) || r != (ssize_t)sizeof(in) || memcmp(in, out, sizeof(in))) {
		snprintf(why, cap, "send %s, ", errtext(w));
		snprintf(why + strlen(why), cap - strlen(why), "recv %s%s", errtext(r),
			 r == (ssize_t)sizeof(in) ? " (corrupt)" : "");
		return false;
	}
	srv_wait(s);
	return true;
}

static int failures;

static void run_case(const struct plan *p, enum fault_op op, bool passive, uint64_t *rng)
{
	char name[96], why[160] = "", again[96] = "";
	unsigned nth = (unsigned)xrand_range(rng, 1, p->max_nth);
	uint64_t s = xrand_next(rng) | 1;
	int ok = 0, sd;

	snprintf(name, sizeof(name), "%s %s@%s #%u", api_name[p->api], fault_name[op],
		 passive ? "passive" : "active", nth);
	pthread_mutex_lock(&fault_lock);
	fault = (typeof(fault)){ .op = op, .passive = passive, .nth = nth, .gen = fault.gen + 1 };
	pthread_mutex_unlock(&fault_lock);
	pthread_mutex_lock(&srv_lock);
	srv_corrupt = false;
	snprintf(srv_note, sizeof(srv_note), "none");
	pthread_mutex_unlock(&srv_lock);
	watch(name, 30);

	if (p->api == A_CONNECT || p->api == A_ACCEPT)
		fault_arm(true);
	sd = dial(p->role, s);
	if (sd < 0) {
		snprintf(why, sizeof(why), "connect %s", errtext(sd));
		ok = err_in(sd, conn_errs) || err_in(sd, send_errs);
	} else {
		if (p->api != A_LINGER)
			fault_arm(true);
		switch (p->api) {
		case A_RECV:
		case A_CONNECT:
		case A_ACCEPT:
			ok = recv_until_end(sd, s, false, why, sizeof(why));
			break;
		case A_POLL:
			ok = recv_until_end(sd, s, true, why, sizeof(why));
			break;
		case A_SEND:
			ok = send_until_error(sd, s, 1, CHUNK, why, sizeof(why));
			break;
		case A_ZCOPY:
		case A_WZCOPY:
			ok = send_until_error(sd, s, ZC_SEND, 4 * MiB, why, sizeof(why));
			break;
		case A_LINGER:
			ok = linger_close(sd, s, why, sizeof(why));
			sd = -1;
			break;
		case A_NAPIS:
			break;
		}
		if (sd >= 0)
			sdp_close(sd);
	}
	fault_arm(false);
	bool fired = fault_fired();

	/* The next connection's eps are none of the case's. */
	pthread_mutex_lock(&fault_lock);
	fault.gen++;
	pthread_mutex_unlock(&fault_lock);
	bool later = next_works(s + 1, again, sizeof(again));

	pthread_mutex_lock(&srv_lock);
	bool corrupt = srv_corrupt;
	char note[128];

	snprintf(note, sizeof(note), "%s", srv_note);
	pthread_mutex_unlock(&srv_lock);
	watch("idle", 3600);

	if (ok && fired && !corrupt && later) {
		say("ok   %s: %s; server %s", name, why, note);
		return;
	}
	failures++;
	say("FAIL %s: %s%s%s; server %s%s%s", name, why, fired ? "" : " (the fault did not fire)",
	    corrupt ? "; the server read corrupt bytes" : "", note,
	    later ? "" : "; the next connection: ", again);
}

int main(int argc, char **argv)
{
	unsigned only = (1u << A_NAPIS) - 1;
	const char *only_fault = NULL;
	int opt;

	while ((opt = getopt(argc, argv, "s:o:f:")) != -1) {
		if (opt == 'f') {
			only_fault = optarg;
		} else if (opt == 's') {
			seed = strtoull(optarg, NULL, 0);
		} else if (opt == 'o') {
			only = 0;
			for (char *t = strtok(optarg, ","); t; t = strtok(NULL, ","))
				for (int a = 0; a < A_NAPIS; a++)
					if (!strcmp(t, api_name[a]))
						only |= 1u << a;
		} else {
			fprintf(stderr, "usage: fault_check [-s SEED] [-o API,...] [-f FAULT]\n");
			return 2;
		}
	}
	const char *sl = getenv("TEST_SLOW");

	if (sl && atoi(sl) > 0)
		slow = (unsigned)atoi(sl);
	setvbuf(stdout, NULL, _IOLBF, 0);
	hook_install();
	if (sdp_init() < 1) {
		say("FAIL no transport came up");
		return 1;
	}
	pthread_t wd, srv;

	watch("start", 3600);
	pthread_create(&wd, NULL, watchdog, NULL);
	srv_addr = (struct sockaddr_in){ .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(srv_addr);

	listen_sd = sdp_socket(AF_INET, SOCK_STREAM, 0);
	if (listen_sd < 0 || sdp_bind(listen_sd, (void *)&srv_addr, sizeof(srv_addr)) < 0 ||
	    sdp_listen(listen_sd, 16) < 0 ||
	    sdp_getsockname(listen_sd, (void *)&srv_addr, &al) < 0) {
		say("FAIL listen: %s", errtext(listen_sd < 0 ? listen_sd : -errno));
		return 1;
	}
	pthread_create(&srv, NULL, server, NULL);
	say("seed %llu", (unsigned long long)seed);

	for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
		const struct plan *p = &plans[i];

		for (int op = 0; op < F_NOPS; op++) {
			for (int passive = 0; passive < 2; passive++) {
				/* Each case's own stream: the same case whatever
				 * the filters leave out. */
				uint64_t rng = seed ^ ((i * F_NOPS + (size_t)op) * 2 + (size_t)passive) *
						      0x9e3779b97f4a7c15ull;

				if (!(only & (1u << p->api)) || !(p->ops & B(op)) ||
				    !(passive ? p->passive : p->active) ||
				    (!passive && (p->passive_only & B(op))) ||
				    (passive && (p->active_only & B(op))) ||
				    (only_fault && strcmp(only_fault, fault_name[op])))
					continue;
				run_case(p, (enum fault_op)op, passive, &rng);
			}
		}
	}
	say("%s: %d failure(s)", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
