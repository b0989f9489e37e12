/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * hostile_peer: a malicious SDP client against a real engine.
 *
 * The process forks first.  The child is the victim: an SDP server written
 * against the public API (include/sdp.h) that serves the sdpcat protocol
 * (header, checked stream, verdict) on every connection it accepts, one
 * thread per connection.  The parent is the attacker: it talks to the
 * victim through the transport directly (transports/oti.h: the backend
 * named by TEST_TRANSPORT, else the first of SDP_TRANSPORTS, else
 * "tcp-fallback") and builds SDP messages itself with the codec
 * (sdp/wire.h), so it can send what no engine would.  Both sides use the
 * address TEST_HOST (default 127.0.0.1: RDMA devices serve no loopback).
 *
 * For each attack the attacker makes a fresh transport connection, does a
 * valid Hello, waits for ESTABLISHED, checks the HelloAck, sends one valid
 * Data message (an sdpcat header, so the victim's handler is reading), then
 * one malformed message.  The victim must abort that connection -- the
 * attacker sees the transport DISCONNECTED within a time limit -- and keep
 * running.  A few attacks are on the Hello itself; those must not
 * establish.
 *
 * The zero-copy attacks turn it round: the attacker's header asks the
 * victim to *send* (HOSTILE_MAGIC_SEND), one blocking send of a
 * zero-copy-sized buffer, which the victim's engine offers with SrcAvail
 * (Read Zcopy).  The attacker plays a sink that misuses the offer: it reads
 * the advertised range (which must work and give the right bytes), then
 * reads with the key again after completing the offer, reads before and
 * past the advertised range, or with another key, each of which must give
 * it an error and never data; or it sends RdmaRdCompl for more than was
 * advertised, or with no offer outstanding, which the victim must abort as
 * a protocol error.  On verbs a failed RDMA read moves the attacker's QP to
 * error, so every attack has a connection of its own.
 *
 * The mode attacks break the rules of the half-connections' modes
 * (sdp/mode.c) in band, after the valid header: a ModeChange that changes
 * nothing, Pipelined -> Transaction and Transaction -> Pipelined (after a
 * legal change into the first), a change of the victim's own send half, an
 * undefined mode; a SinkAvail while the victim's send half is Combined; an
 * RdmaWrCompl or a SinkCancelAck that answers nothing; a SrcAvail with
 * inline bytes after the attacker declared Pipelined, one without in
 * Combined.  The SrcAvails and the SinkAvail name real memory of the
 * attacker's, so that only the rule can stop them.  Each must be aborted.
 *
 * The Write Zcopy attacks (sdp/write_zcopy.c) make the victim the sink:
 * the attacker declares its send half Pipelined and asks the victim to
 * receive (HOSTILE_MAGIC_RECV), whose blocking recv() of a large buffer
 * between two guard areas advertises it with SinkAvail.  An honest RDMA
 * write and RdmaWrCompl must be delivered intact; a write with the key
 * once recv() returned (after the RdmaWrCompl, or after the advert died
 * of a Data message or a ModeChange), before or past the advertised bytes,
 * or with another key, must give the attacker an error -- an error
 * completion, or the transport dropping the connection; a ChRcvBuf behind
 * each write, which the victim answers, tells a write that was taken from
 * one that failed where the write's completion cannot (tcp-fallback) --
 * and the victim's memory must not change: it checks the buffer and the
 * guards after each recv() and again once the connection is over.  An
 * RdmaWrCompl for more than was advertised, or with no advert, must be
 * aborted.
 *
 * Then the victim is the source (HOSTILE_MAGIC_PIPE, two blocking sends):
 * the attacker reads the first offer and completes it with REQ_PIPE, the
 * victim must switch to Pipelined (ModeChange) and offer the second send
 * with a SrcAvail without inline bytes, and the attacker answers with a
 * SinkAvail of its own.  An honest one must be written with the right
 * bytes.  With a bogus key, or naming bytes outside the attacker's
 * registration, the victim's write fails: the connection must go down,
 * and the victim's send() must fail rather than return as if the bytes
 * had arrived -- on tcp-fallback a write completes once it is handed to
 * the kernel, so there the send may have returned, and the error must come
 * at the application's next call.  A SinkAvail with data (the attacker's
 * half is not Transaction), an empty one, and a second one while the first
 * is held must be aborted.
 *
 * A SinkAvail whose BSDH grants the victim no buffers (bufs 0) leaves it
 * an advert it may not use yet: its blocking send must sleep -- its own
 * thread CPU clock over the send stays a small part of the send's time --
 * until a credit update lets it write, or until its SO_SNDTIMEO ends it
 * (HOSTILE_MAGIC_PIPE_TIMEO) with EAGAIN; meanwhile it sends nothing.
 *
 * An honest peer may advertise receive buffers as small as 17 bytes: the
 * small-buffer cases check that the victim never sends it a longer message
 * (the attacker's buffers are large, so it would see one), whether it
 * sends a zero-copy-sized buffer to it, is offered a SrcAvail by it, or
 * receives from it in Pipelined mode.
 *
 * On the RECV and PIPE connections the victim's own word -- what its
 * recv() or sends returned, whether its memory changed, how the connection
 * ended -- comes back on a pipe once the connection is over and is part of
 * each case's verdict; changed memory or bad data delivered also fails the
 * victim's exit status.
 *
 * Meanwhile a well-behaved SDP connection (public API, in a thread of the
 * attacker) streams seeded data into the same victim process for the whole
 * run; at the end its verdict must match, and fresh connections made after
 * all the attacks must work too, one of them receiving a zero-copy send from
 * the victim and one RDMA-writing into its recv() buffers.  The victim
 * finally reports how each of its connections ended and its engine
 * counters.
 *
 * Exit 0 pass, 1 fail.
 */

#include "sdp.h"
#include "say.h"
#include "xfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "oti.h"
#include "wire.h"

#define HOSTILE_SEED_TAG 0xBAD00000u	/* header seeds of attack connections */
/* Header magic: the victim sends `bytes` bytes of xgen(seed) in one
 * blocking send, then a 16-byte trailer (an sdpcat verdict: the count its
 * send returned, 0), and waits for the end of the connection. */
#define HOSTILE_MAGIC_SEND 0x53445053u	/* "SDPS" */
#define HOSTILE_SEND_MAX (64u << 20)
/* Header magic: the victim receives `bytes` bytes of xgen(seed) with
 * blocking recv()s into one buffer of HOSTILE_RECV_BUF bytes that lies
 * between two guard areas -- a Write Zcopy sink once the peer's send half
 * is Pipelined.  It checks what each recv() delivered and that nothing
 * else of the buffer or the guards changed, sends a 16-byte verdict (the
 * count, 0), shuts down writing, waits for the end of the connection with
 * a small recv() (which advertises nothing), and checks that the buffer
 * and the guards are still exactly as they were. */
#define HOSTILE_MAGIC_RECV 0x53445052u	/* "SDPR" */
#define HOSTILE_RECV_BUF ((256u << 10) + 13)
#define GUARD_LEN 4096u
#define GUARD_BYTE 0x5A
#define FRESH_BYTE 0xC3		/* buffer bytes nobody has written */
#define EVIL_BYTE 0xBD		/* what the attacker's illegal RDMA writes carry */
/* Header magic: the victim sends `bytes` bytes of xgen(seed) twice, in two
 * blocking sends (the second continues the stream), then the trailer (the
 * total the sends returned, 0) as with HOSTILE_MAGIC_SEND, and waits for
 * the end of the connection without shutting down its side (the peer may
 * still advertise).  The first send is a Read Zcopy offer; a peer that
 * asks for Pipelined when it completes it gets the second by Write Zcopy
 * once it advertises a buffer. */
#define HOSTILE_MAGIC_PIPE 0x53445050u	/* "SDPP" */
/* Header magic: as HOSTILE_MAGIC_PIPE, but the second send has an
 * SO_SNDTIMEO of HOSTILE_SNDTIMEO_MS, and the victim reports as soon as
 * its sends returned (then closes) instead of waiting for the end. */
#define HOSTILE_MAGIC_PIPE_TIMEO 0x53445054u	/* "SDPT" */
/* Header magic: as HOSTILE_MAGIC_SEND, with the socket's zero-copy
 * threshold at its lowest (SDP_ZCOPY_THRESH 4096), so that a send of a few
 * KiB is a zero-copy candidate. */
#define HOSTILE_MAGIC_SEND_LOWZ 0x5344505au	/* "SDPZ" */
#define HOSTILE_SNDTIMEO_MS 1000

/*
 * The victim's word on a connection with one of those two magics, sent on
 * the report pipe when the connection is over: the attacker cannot ask it
 * in band (by then its attack has usually killed the connection).
 */
struct vreport {
	uint32_t tag;		/* the header seed without HOSTILE_SEED_TAG */
	uint32_t flags;		/* VR_* */
	int64_t r1, r2;		/* RECV: the first recv(); PIPE: the two sends (count or -errno) */
	int64_t end;		/* how the connection ended: 0 EOF, -errno */
	int64_t cpu_ns, wall_ns;	/* PIPE: the second send's thread CPU and wall time */
	char text[200];
};
#define VR_DATA_BAD 1u		/* a recv() delivered bytes that are not the stream's */
#define VR_MEM_CHANGED 2u	/* buffer or guard bytes changed that no recv() delivered */
#define VR_SENT_ALL 4u		/* PIPE: both sends returned their whole count */
/* Where the attacker's RDMA reads land in its send area. */
#define RD_AREA_OFF (1u << 20)
#define RD_AREA_LEN (3u << 20)
#define NRECV 16
#define RECV_SIZE 65552u
#define SEND_AREA (4u << 20)
/* aligned_alloc() wants a multiple of the alignment. */
#define MEM_SIZE ((NRECV * RECV_SIZE + SEND_AREA + 4095u) & ~4095u)
/* Messages built on the fly each take a slot of the send area below the
 * read area (an earlier one may still be in flight). */
#define MSG_SLOT 256u
#define MSG_FIRST_SLOT (16u << 10)
/* Memory the attacker offers the victim (remote read and write): the
 * source of its SrcAvails, the sink of its SinkAvails. */
#define XMEM_SIZE (1u << 20)

static unsigned case_timeout_ms = 10000;

/* TEST_HOST, the address of the victim (and of the attacker). */
static struct in_addr host_addr;
static char host_str[INET_ADDRSTRLEN] = "127.0.0.1";
/* The transport under test: the attacker's, and the good connections'. */
static char transport_name[64] = "tcp-fallback";

/* Its lines are bare: "victim: " marks those of the victim process. */
const char *say_prefix;

/* ======================================================================= */
/* the victim (child process, public API only)                              */
/* ======================================================================= */

struct vconn {
	int sd;
	pthread_t thread;
	char peer[80];
	int kind;		/* 0 no header, 1 good client, 2 attacker */
	int ok;
	bool breach;		/* memory changed or bad data delivered: always a failure */
	char result[200];
	struct vreport rep;	/* RECV, PIPE */
	struct vconn *next;
};

/* The write end of the report pipe (victim process). */
static int report_fd = -1;

/*
 * The victim sends: one blocking send of h->bytes (a zero-copy offer on a
 * transport with RDMA read), the trailer, then it waits for the peer to
 * end the connection.  Only a well-behaved peer can make this "ok"; for an
 * attack the result says how the send ended.
 */
static void victim_send(struct vconn *v, const struct xfer_hdr *h)
{
	uint8_t trailer[XFER_VERDICT_LEN], b[64];
	uint8_t *buf;
	struct xgen g;
	ssize_t n, m;

	if (h->bytes == 0 || h->bytes > HOSTILE_SEND_MAX) {
		snprintf(v->result, sizeof(v->result), "send of %" PRIu64 " bytes refused", h->bytes);
		return;
	}
	buf = malloc(h->bytes);
	if (!buf) {
		snprintf(v->result, sizeof(v->result), "out of memory");
		return;
	}
	xgen_init(&g, h->seed);
	xgen_fill(&g, buf, h->bytes);
	if (h->magic == HOSTILE_MAGIC_SEND_LOWZ) {
		int t = 4096;

		if (sdp_setsockopt(v->sd, SOL_SDP, SDP_ZCOPY_THRESH, &t, sizeof(t)))
			say("victim: SDP_ZCOPY_THRESH refused");
	}
	n = sdp_send(v->sd, buf, h->bytes, MSG_NOSIGNAL);
	/* The engine is done with the buffer once send() returned: make
	 * sure nobody can read it from now on. */
	memset(buf, 0xA5, h->bytes);
	free(buf);
	if (n != (ssize_t)h->bytes) {
		snprintf(v->result, sizeof(v->result), "send of %" PRIu64 " bytes: %s", h->bytes,
			 n < 0 ? strerror((int)-n) : "short");
		return;
	}
	xfer_verdict_encode(trailer, (uint64_t)n, 0);
	m = xfer_send_all(&xsock_sdp, v->sd, trailer, sizeof(trailer), -1);
	if (m < 0) {
		snprintf(v->result, sizeof(v->result), "sent %zd bytes, trailer: %s", n,
			 strerror((int)-m));
		return;
	}
	xsock_sdp.shutdown(v->sd, SHUT_WR);
	m = xfer_recv_all(&xsock_sdp, v->sd, b, sizeof(b), -1);
	snprintf(v->result, sizeof(v->result), "sent %zd bytes, then %s", n,
		 m == 0 ? "end of stream" : m < 0 ? strerror((int)-m) : "unexpected data");
	v->ok = m == 0;
}

/*
 * The guards, and the buffer after a recv() that delivered its first n
 * bytes from stream position pos (n = 0: it failed): beyond n only bytes
 * nobody wrote or the stream's own (an honest write into an advert that
 * then died).  VR_MEM_CHANGED with *what filled, or 0.
 */
static uint32_t region_check(const uint8_t *region, size_t cap, uint32_t seed, uint64_t pos,
			     size_t n, char *what, size_t whatcap)
{
	const uint8_t *buf = region + GUARD_LEN;
	struct xgen g;
	uint8_t want;

	for (size_t i = 0; i < GUARD_LEN; i++) {
		if (region[i] != GUARD_BYTE || buf[cap + i] != GUARD_BYTE) {
			snprintf(what, whatcap, "guard %s the buffer changed at %zu: 0x%02x",
				 region[i] != GUARD_BYTE ? "before" : "after",
				 region[i] != GUARD_BYTE ? GUARD_LEN - i : i,
				 region[i] != GUARD_BYTE ? region[i] : buf[cap + i]);
			return VR_MEM_CHANGED;
		}
	}
	xgen_init(&g, seed);
	g.off = pos + n;
	for (size_t i = n; i < cap; i++) {
		xgen_fill(&g, &want, 1);
		if (buf[i] != FRESH_BYTE && buf[i] != want) {
			snprintf(what, whatcap, "buffer byte %zu beyond the %zu delivered is 0x%02x", i,
				 n, buf[i]);
			return VR_MEM_CHANGED;
		}
	}
	return 0;
}

/*
 * How the connection ended for the victim, m being what its last
 * xfer_recv_all() returned (or the error that stopped it): 0 end of
 * stream, -errno, or > 0 bytes the peer should not have sent, which *how
 * says as `data`.  Sets v->rep.end.
 */
static void victim_end(struct vconn *v, ssize_t m, const char *data, char *how, size_t cap)
{
	v->rep.end = m > 0 ? -EBADMSG : m;
	if (m > 0)
		snprintf(how, cap, "%zd %s", m, data);
	else
		snprintf(how, cap, "%s", m == 0 ? "end of stream" : strerror((int)-m));
}

/*
 * The victim receives (HOSTILE_MAGIC_RECV).  Only a well-behaved peer can
 * make this "ok"; the report says what happened for an attack.
 */
static void victim_recv(struct vconn *v, const struct xfer_hdr *h)
{
	const size_t cap = HOSTILE_RECV_BUF, total = cap + 2 * GUARD_LEN;
	uint8_t *region = malloc(total), *snap = malloc(total), *buf;
	uint8_t verdict[XFER_VERDICT_LEN], b[64];
	char what[120] = "", how[80];
	struct xgen g;
	uint64_t got = 0;
	ssize_t n = 0, m;

	if (!region || !snap || h->bytes == 0) {
		snprintf(v->result, sizeof(v->result), "%s", h->bytes ? "out of memory" : "0 bytes?");
		goto out;
	}
	buf = region + GUARD_LEN;
	memset(region, GUARD_BYTE, total);
	xgen_init(&g, h->seed);
	while (got < h->bytes) {
		memset(buf, FRESH_BYTE, cap);
		n = sdp_recv(v->sd, buf, cap, 0);
		if (got == 0)
			v->rep.r1 = n;
		if (n <= 0)
			break;
		size_t bad = xgen_check(&g, buf, (size_t)n);

		if (bad != (size_t)n) {
			snprintf(what, sizeof(what), "recv delivered a wrong byte at stream offset %" PRIu64,
				 got + bad);
			v->rep.flags |= VR_DATA_BAD;
			break;
		}
		v->rep.flags |= region_check(region, cap, h->seed, got, (size_t)n, what, sizeof(what));
		got += (uint64_t)n;
		if (v->rep.flags)
			break;
	}
	if (n <= 0)
		v->rep.flags |= region_check(region, cap, h->seed, got, 0, what, sizeof(what));
	/* From here on nothing may touch it. */
	memcpy(snap, region, total);
	if (n < 0) {
		m = n;
	} else if (got < h->bytes || v->rep.flags) {
		m = n == 0 ? 0 : -EPROTO;
	} else {
		xfer_verdict_encode(verdict, got, 0);
		m = xfer_send_all(&xsock_sdp, v->sd, verdict, sizeof(verdict), -1);
		if (m >= 0) {
			xsock_sdp.shutdown(v->sd, SHUT_WR);
			m = xfer_recv_all(&xsock_sdp, v->sd, b, sizeof(b), -1);
		}
	}
	victim_end(v, m, "more bytes (the peer sends no more)", how, sizeof(how));
	if (!v->rep.flags && memcmp(region, snap, total)) {
		size_t i = 0;

		while (region[i] == snap[i])
			i++;
		snprintf(what, sizeof(what), "%s byte %zu CHANGED after recv() returned: 0x%02x",
			 i < GUARD_LEN || i >= GUARD_LEN + cap ? "guard" : "buffer",
			 i < GUARD_LEN ? i : i - GUARD_LEN, region[i]);
		v->rep.flags |= VR_MEM_CHANGED;
	}
	if (v->rep.r1 > 0)
		snprintf(v->result, sizeof(v->result), "received %" PRIu64 " of %" PRIu64 " bytes "
			 "(first recv %" PRId64 "), then %s; %s", got, h->bytes, v->rep.r1, how,
			 v->rep.flags ? what : "memory as delivered");
	else
		snprintf(v->result, sizeof(v->result), "recv: %s; %s",
			 v->rep.r1 ? strerror((int)-v->rep.r1) : "EOF",
			 v->rep.flags ? what : "memory untouched but for stream bytes");
	v->breach = v->rep.flags != 0;
	v->ok = got == h->bytes && !v->rep.flags && m == 0;
out:
	free(region);
	free(snap);
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The victim sends twice (HOSTILE_MAGIC_PIPE, _PIPE_TIMEO). */
static void victim_pipe(struct vconn *v, const struct xfer_hdr *h)
{
	uint8_t trailer[XFER_VERDICT_LEN], b[64];
	uint8_t *buf;
	struct xgen g;
	ssize_t n1, n2 = 0, m;

	if (h->bytes == 0 || h->bytes > HOSTILE_SEND_MAX / 2) {
		snprintf(v->result, sizeof(v->result), "send of 2 x %" PRIu64 " bytes refused",
			 h->bytes);
		return;
	}
	buf = malloc(2 * h->bytes);
	if (!buf) {
		snprintf(v->result, sizeof(v->result), "out of memory");
		return;
	}
	xgen_init(&g, h->seed);
	xgen_fill(&g, buf, 2 * h->bytes);
	n1 = sdp_send(v->sd, buf, h->bytes, MSG_NOSIGNAL);
	if (n1 == (ssize_t)h->bytes) {
		bool timeo = h->magic == HOSTILE_MAGIC_PIPE_TIMEO;
		struct timeval tv = { 0, HOSTILE_SNDTIMEO_MS * 1000 };
		int64_t cpu0, wall0;

		if (timeo && sdp_setsockopt(v->sd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
			say("victim: SO_SNDTIMEO refused");
		cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		wall0 = clock_ns(CLOCK_MONOTONIC);
		n2 = sdp_send(v->sd, buf + h->bytes, h->bytes, MSG_NOSIGNAL);
		v->rep.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
		v->rep.wall_ns = clock_ns(CLOCK_MONOTONIC) - wall0;
		if (timeo) {
			/* The word goes now: the peer cannot see when the
			 * send returned otherwise. */
			v->rep.r1 = n1;
			v->rep.r2 = n2;
			snprintf(v->result, sizeof(v->result), "sends returned %zd and %zd (%s)", n1,
				 n2, n2 < 0 ? strerror((int)-n2) : "bytes");
			memset(buf, 0xA5, 2 * h->bytes);
			free(buf);
			return;
		}
	}
	memset(buf, 0xA5, 2 * h->bytes);
	free(buf);
	v->rep.r1 = n1;
	v->rep.r2 = n2;
	m = 0;
	if (n1 == (ssize_t)h->bytes && n2 == (ssize_t)h->bytes) {
		v->rep.flags |= VR_SENT_ALL;
		xfer_verdict_encode(trailer, 2 * h->bytes, 0);
		m = xfer_send_all(&xsock_sdp, v->sd, trailer, sizeof(trailer), -1);
	}
	if (m >= 0)
		m = xfer_recv_all(&xsock_sdp, v->sd, b, sizeof(b), -1);

	char how[80];

	victim_end(v, m, "bytes of data (the peer sends none)", how, sizeof(how));
	snprintf(v->result, sizeof(v->result), "sends returned %zd (%s) and %zd (%s) of %" PRIu64
		 ", then %s", n1, n1 < 0 ? strerror((int)-n1) : n1 == (ssize_t)h->bytes ? "all" : "short",
		 n2, n2 < 0 ? strerror((int)-n2) : n2 == (ssize_t)h->bytes ? "all" : "short",
		 h->bytes, how);
	v->ok = (v->rep.flags & VR_SENT_ALL) && m == 0;
}

static void *victim_conn(void *arg)
{
	struct vconn *v = arg;
	uint8_t hb[XFER_HDR_LEN], verdict[XFER_VERDICT_LEN];
	struct xfer_hdr h;
	struct xfer_pump p;
	ssize_t n;
	int r;

	xfer_pump_init(&p, &xsock_sdp, v->sd);
	n = xfer_recv_all(&xsock_sdp, v->sd, hb, sizeof(hb), -1);
	if (n != XFER_HDR_LEN) {
		snprintf(v->result, sizeof(v->result), "no header: %s",
			 n < 0 ? strerror((int)-n) : "EOF");
		goto out;
	}
	xfer_hdr_decode(hb, &h);
	v->kind = (h.seed & 0xFFF00000u) == HOSTILE_SEED_TAG ? 2 : 1;
	if (h.magic == HOSTILE_MAGIC_SEND || h.magic == HOSTILE_MAGIC_SEND_LOWZ) {
		victim_send(v, &h);
		goto out;
	}
	if (h.magic == HOSTILE_MAGIC_RECV || h.magic == HOSTILE_MAGIC_PIPE ||
	    h.magic == HOSTILE_MAGIC_PIPE_TIMEO) {
		if (h.magic == HOSTILE_MAGIC_RECV)
			victim_recv(v, &h);
		else
			victim_pipe(v, &h);
		if (v->kind == 2 && report_fd >= 0) {
			/* One record, smaller than PIPE_BUF: written whole. */
			struct vreport rec = v->rep;

			rec.tag = h.seed & ~0xFFF00000u;
			snprintf(rec.text, sizeof(rec.text), "%s", v->result);
			if (write(report_fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
				say("victim: report: %s", strerror(errno));
		}
		goto out;
	}
	if (h.magic != XFER_MAGIC_ONEWAY) {
		snprintf(v->result, sizeof(v->result), "bad magic");
		goto out;
	}
	r = xfer_pump_rx(&p, XFER_UNLIMITED, true, h.seed, 1, 65536, h.seed);
	if (!r)
		r = xfer_pump_run(&p);
	if (r) {
		snprintf(v->result, sizeof(v->result), "%s: %s after %" PRIu64 " bytes",
			 p.err_op ? p.err_op : "pump", strerror(-r), p.rx_done);
		goto out;
	}
	if (p.rx_done != h.bytes || p.rx_bad_off != XFER_UNLIMITED) {
		snprintf(v->result, sizeof(v->result), "%" PRIu64 " of %" PRIu64 " bytes, %s",
			 p.rx_done, h.bytes, p.rx_bad_off == XFER_UNLIMITED ? "data ok" : "DATA BAD");
		goto out;
	}
	xfer_verdict_encode(verdict, p.rx_done, xhash_digest(&p.rx_hash));
	n = xfer_send_all(&xsock_sdp, v->sd, verdict, sizeof(verdict), -1);
	if (n < 0) {
		snprintf(v->result, sizeof(v->result), "sending verdict: %s", strerror((int)-n));
		goto out;
	}
	xsock_sdp.shutdown(v->sd, SHUT_WR);
	snprintf(v->result, sizeof(v->result), "%" PRIu64 " bytes, data ok", p.rx_done);
	v->ok = 1;
out:
	xfer_pump_free(&p);
	xsock_sdp.close(v->sd);
	return NULL;
}

/* Serves until ctl_fd reports EOF; exit status 0 when every well-behaved
 * connection was served correctly. */
static int victim_main(int ctl_fd, int port_fd)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr = host_addr };
	struct vconn *conns = NULL;
	int ls, r, bad = 0, good = 0, hostile = 0, headerless = 0;

	if (sdp_init() <= 0) {
		say("victim: sdp_init: no transport");
		return 1;
	}
	ls = xfer_listen(&xsock_sdp, (struct sockaddr *)&sin, sizeof(sin), SOCK_NONBLOCK, 64,
			 false, NULL);
	if (ls < 0) {
		say("victim: listener: %s", strerror(-ls));
		return 1;
	}
	int port = ntohs(sin.sin_port);

	if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port))
		return 1;
	close(port_fd);
	for (;;) {
		/* The listener sd is a real fd, readable while a connection
		 * waits (sdp.h), so one poll(2) covers it and the control
		 * pipe. */
		struct pollfd pf[2] = { { .fd = ls, .events = POLLIN },
					{ .fd = ctl_fd, .events = POLLIN } };

		r = poll(pf, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[1].revents)
			break;
		for (;;) {
			struct sockaddr_storage peer;
			socklen_t plen = sizeof(peer);
			int sd = sdp_accept(ls, (struct sockaddr *)&peer, &plen, 0);

			if (sd == -EAGAIN || sd == -EINTR)
				break;
			if (sd < 0) {
				/* A connection that died before accept()
				 * may show up here; keep serving. */
				say("victim: accept: %s", strerror(-sd));
				break;
			}
			struct vconn *v = calloc(1, sizeof(*v));

			if (!v) {
				sdp_close(sd);
				continue;
			}
			v->sd = sd;
			xfer_format_addr((struct sockaddr *)&peer, v->peer, sizeof(v->peer));
			if (pthread_create(&v->thread, NULL, victim_conn, v)) {
				sdp_close(sd);
				free(v);
				continue;
			}
			v->next = conns;
			conns = v;
		}
	}
	/* Attack connections still open are the attacker's business; their
	 * threads end when the attacker process closes its side. */
	while (conns) {
		struct vconn *v = conns;

		conns = v->next;
		pthread_join(v->thread, NULL);
		if (v->breach)
			bad++;	/* memory changed, bad data delivered: whoever the peer */
		if (v->kind == 1) {
			good++;
			if (!v->ok)
				bad++;
		} else if (v->kind == 2) {
			hostile++;
			if (v->ok)
				bad++;	/* an attack served as if it were fine */
		} else {
			headerless++;
		}
		say("victim: %-22s %-8s %s", v->peer,
		    v->kind == 1 ? "good" : v->kind == 2 ? "attack" : "no-hdr", v->result);
		free(v);
	}
	sdp_close(ls);

	struct sdp_stats st;

	sdp_get_stats(&st);
	say("victim: %d good connection(s), %d attack connection(s) accepted, %d without a "
	    "header; engine: %" PRIu64 " protocol errors, %" PRIu64 " resets, %" PRIu64
	    " passive connections; zero copy: %" PRIu64 " offers, %" PRIu64 " bytes read by "
	    "peers, %" PRIu64 " refused, %" PRIu64 " reads, %" PRIu64 " bytes read; write zero "
	    "copy: %" PRIu64 " adverts, %" PRIu64 " bytes written by peers, %" PRIu64 " writes, %"
	    PRIu64 " bytes written; %" PRIu64 " ModeChanges sent, %" PRIu64 " received",
	    good, hostile, headerless, st.protocol_errors, st.resets, st.connections_passive,
	    st.zcopy_offers, st.zcopy_bytes_sent, st.zcopy_refused, st.zcopy_reads,
	    st.zcopy_bytes_received, st.zcopy_sink_adverts, st.zcopy_sink_bytes, st.zcopy_writes,
	    st.zcopy_bytes_written, st.mode_changes_sent, st.mode_changes_received);
	return bad ? 1 : 0;
}

/* ======================================================================= */
/* the attacker: raw transport + codec                                      */
/* ======================================================================= */

static const struct oti_ops *T;
static struct oti_caps caps;
static int victim_port;
static pid_t victim_pid;

/*
 * The victim's stream as the attacker receives it (the small-buffer
 * cases): want bytes of xgen(seed), then an sdpcat verdict.
 */
struct stream_check {
	struct xgen g;
	uint64_t want, got;
	bool bad;		/* a wrong byte, or more than want + the verdict */
	uint8_t verdict[XFER_VERDICT_LEN];
	unsigned vgot;
};

static void sc_take(struct stream_check *sc, const uint8_t *p, uint64_t n)
{
	uint64_t k = n < sc->want - sc->got ? n : sc->want - sc->got;

	if (k && xgen_check(&sc->g, p, (size_t)k) != k)
		sc->bad = true;
	sc->got += k;
	for (p += k, n -= k; n && sc->vgot < XFER_VERDICT_LEN; n--)
		sc->verdict[sc->vgot++] = *p++;
	if (n)
		sc->bad = true;
}

struct hconn {
	struct oti_ep *ep;
	struct oti_mr *mr;
	uint8_t *mem;		/* NRECV receive buffers, then the send area */
	struct sdp_hello_ack ack;
	bool established, disconnected, rejected, unreachable;
	int event_status;
	uint32_t next_mseq;
	uint32_t last_rx_mseq;
	bool no_credits;	/* our messages grant no buffers (bufs 0) */
	uint32_t rx_max_len;	/* the longest message the victim sent */
	uint32_t peer_bufs, peer_ack;	/* the victim's latest bufs and mseq_ack */
	struct stream_check *sc;	/* what its stream bytes must be, or NULL */
	unsigned rx_msgs;
	bool saw_abort;
	uint64_t send_ctx;
	/* What the victim sent (the zero-copy attacks). */
	unsigned n_srcavail;
	struct sdp_srcah sa;	/* the last SrcAvail */
	uint32_t sa_mseq;
	uint32_t sa_inline;	/* its payload bytes */
	uint8_t sa_data[64];
	uint64_t data_bytes;	/* payload of Data messages */
	uint8_t data_head[64];	/* the first bytes of it */
	unsigned n_send_sm;
	uint64_t sa_base;	/* stream position of the SrcAvail's first byte */
	/* What the victim sent (the mode and Write Zcopy attacks). */
	unsigned nond_rcvd;	/* messages with stream bytes: non_discards */
	unsigned n_sinkavail;
	struct sdp_sinkah sk;	/* the last SinkAvail */
	uint32_t sk_payload;
	unsigned n_mch;
	int mch_send_half;	/* the last ModeChange */
	enum sdp_mode mch_mode;
	unsigned n_wrcompl;
	uint32_t wrcompl_len;	/* the last RdmaWrCompl */
	unsigned n_pong;	/* ChRcvBufAcks */
	unsigned pong_want;
	/* The attacker's RDMA reads and writes: one at a time. */
	uint64_t rd_ctx;
	bool rd_done;
	int rd_status;
	size_t msg_off;		/* the next message slot */
	uint8_t *xmem;		/* offered memory, once hconn_expose() made it */
	struct oti_mr *xmr;
};

static uint64_t deadline_after(unsigned ms)
{
	return xfer_now_ns() + (uint64_t)ms * 1000000ull;
}

/* What the zero-copy attacks look at in a received message. */
static void note_msg(struct hconn *h, const uint8_t *buf, const struct sdp_bsdh *b)
{
	uint32_t off = SDP_BSDH_LEN + (uint32_t)sdp_ext_len(b->mid);
	uint32_t plen = b->len - off;

	if (plen && (b->mid == SDP_MID_DATA || b->mid == SDP_MID_SRC_AVAIL ||
		     b->mid == SDP_MID_SINK_AVAIL))
		h->nond_rcvd++;
	if (h->sc && (b->mid == SDP_MID_DATA || b->mid == SDP_MID_SRC_AVAIL))
		sc_take(h->sc, buf + off, plen);
	switch (b->mid) {
	case SDP_MID_SRC_AVAIL:
		h->n_srcavail++;
		sdp_srcah_decode(buf + SDP_BSDH_LEN, &h->sa);
		h->sa_mseq = b->mseq;
		h->sa_inline = plen;
		memcpy(h->sa_data, buf + off, plen < sizeof(h->sa_data) ? plen : sizeof(h->sa_data));
		break;
	case SDP_MID_DATA:
		if (h->data_bytes < sizeof(h->data_head)) {
			size_t k = sizeof(h->data_head) - h->data_bytes;

			memcpy(h->data_head + h->data_bytes, buf + off, plen < k ? plen : k);
		}
		h->data_bytes += plen;
		break;
	case SDP_MID_SEND_SM:
		h->n_send_sm++;
		break;
	case SDP_MID_SINK_AVAIL:
		h->n_sinkavail++;
		sdp_sinkah_decode(buf + SDP_BSDH_LEN, &h->sk);
		h->sk_payload = plen;
		break;
	case SDP_MID_MODE_CHANGE:
		h->n_mch++;
		if (sdp_mch_decode(buf + SDP_BSDH_LEN, &h->mch_send_half, &h->mch_mode))
			h->mch_mode = (enum sdp_mode)-1;
		break;
	case SDP_MID_RDMA_WR_COMPL:
		h->n_wrcompl++;
		h->wrcompl_len = sdp_u32h_decode(buf + SDP_BSDH_LEN);
		break;
	case SDP_MID_CH_RCV_BUF_ACK:
		h->n_pong++;
		break;
	default:
		break;
	}
}

/* Take completions (the provider moves data inside poll_cq). */
static void drain_cq(struct hconn *h)
{
	struct oti_wc wc[16];
	int n;

	while ((n = T->poll_cq(h->ep, wc, 16)) > 0) {
		for (int i = 0; i < n; i++) {
			if ((wc[i].op == OTI_WC_RDMA_READ || wc[i].op == OTI_WC_RDMA_WRITE) &&
			    wc[i].ctx == h->rd_ctx) {
				h->rd_done = true;
				h->rd_status = wc[i].status;
				continue;
			}
			if (wc[i].op != OTI_WC_RECV || wc[i].status)
				continue;
			uint8_t *buf = h->mem + wc[i].ctx * RECV_SIZE;
			struct sdp_bsdh b;

			h->rx_msgs++;
			if (wc[i].len > h->rx_max_len)
				h->rx_max_len = wc[i].len;
			if (sdp_bsdh_decode(buf, wc[i].len, &b) == 0) {
				h->last_rx_mseq = b.mseq;
				h->peer_bufs = b.bufs;
				h->peer_ack = b.mseq_ack;
				if (b.mid == SDP_MID_ABORT_CONN)
					h->saw_abort = true;
				note_msg(h, buf, &b);
			}
			/* Give the buffer back: the zero-copy attacks receive
			 * more than NRECV messages on a long connection. */
			struct oti_sge sge = { buf, RECV_SIZE, h->mr };

			if (!h->disconnected)
				(void)T->post_recv(h->ep, &sge, wc[i].ctx);
		}
	}
}

static void note_event(struct hconn *h, const struct oti_event *ev)
{
	h->event_status = ev->status;
	switch (ev->type) {
	case OTI_EV_ESTABLISHED:
		h->established = true;
		break;
	case OTI_EV_REJECTED:
		h->rejected = true;
		break;
	case OTI_EV_UNREACHABLE:
		h->unreachable = true;
		break;
	case OTI_EV_DISCONNECTED:
	case OTI_EV_ERROR:
		h->disconnected = true;
		break;
	default:
		break;
	}
}

/*
 * Arm the endpoint and wait for it (200 ms at the most) unless it has
 * something already: 0 to look again, -ETIMEDOUT once the deadline has
 * passed, or -errno.
 */
static int ep_wait(struct hconn *h, uint64_t deadline)
{
	if (T->ep_arm(h->ep) == -EAGAIN)
		return 0;
	uint64_t now = xfer_now_ns();

	if (now >= deadline)
		return -ETIMEDOUT;
	struct pollfd pf = { .fd = T->ep_fd(h->ep), .events = T->ep_wait_events(h->ep) };
	int ms = (int)((deadline - now) / 1000000ull) + 1;

	if (poll(&pf, 1, ms > 200 ? 200 : ms) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

/*
 * Wait for the next connection event, serving completions meanwhile.
 * 0 with *ev filled, -ETIMEDOUT, or -errno.
 */
static int wait_event(struct hconn *h, struct oti_event *ev, uint64_t deadline)
{
	for (;;) {
		int r = T->get_event(h->ep, ev);

		if (r == 0) {
			note_event(h, ev);
			return 0;
		}
		if (r != -EAGAIN)
			return r;
		drain_cq(h);
		r = ep_wait(h, deadline);
		if (r)
			return r;
	}
}

static void hconn_close(struct hconn *h)
{
	/* oti.h: the ep first, then its registrations. */
	if (h->ep)
		T->ep_close(h->ep);
	if (h->mr)
		T->mr_dereg(h->mr);
	if (h->xmr)
		T->mr_dereg(h->xmr);
	free(h->mem);
	free(h->xmem);
	memset(h, 0, sizeof(*h));
}

/* Register XMEM_SIZE bytes the victim may read and write (once). */
static int hconn_expose(struct hconn *h)
{
	if (h->xmr)
		return 0;
	h->xmem = aligned_alloc(4096, XMEM_SIZE);
	if (!h->xmem)
		return -ENOMEM;
	memset(h->xmem, 0, XMEM_SIZE);
	return T->mr_reg(h->ep, h->xmem, XMEM_SIZE,
			 OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_READ | OTI_ACCESS_REMOTE_WRITE,
			 &h->xmr);
}

/* The address by which the victim reaches xmem + off. */
static uint64_t xmem_raddr(const struct hconn *h, size_t off)
{
	return h->xmr->raddr_base + off;
}

static void v4_mapped(struct in6_addr *out, const struct sockaddr_storage *ss)
{
	memset(out, 0, sizeof(*out));
	if (ss->ss_family == AF_INET)
		memcpy(&out->s6_addr[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
}

enum hello_variant {
	HELLO_OK,
	HELLO_BAD_MAJOR,
	HELLO_TRUNCATED,
	HELLO_WRONG_MID,
	HELLO_TINY_BUFFERS,
	HELLO_NO_ADVERTS,
	HELLO_NONE,
};

/*
 * Transport connection + Hello.  For HELLO_OK: 0 once established with a
 * valid HelloAck.  Other variants return 0 once the attempt is over
 * (h->established etc. say how).
 */
/* The receive size our Hello advertises (our buffers are RECV_SIZE
 * whatever it says, so that a message over it is seen, not lost). */
static uint32_t hello_rcvsz = RECV_SIZE;

static int hconn_open(struct hconn *h, enum hello_variant hv, char *why, size_t whycap)
{
	struct sockaddr_in dst = { .sin_family = AF_INET,
				   .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)victim_port) };
	struct oti_event ev;
	int r;

	memset(h, 0, sizeof(*h));
	h->next_mseq = 1;
	h->mem = aligned_alloc(4096, MEM_SIZE);
	if (!h->mem) {
		snprintf(why, whycap, "out of memory");
		return -ENOMEM;
	}
	memset(h->mem, 0, MEM_SIZE);
	r = T->ep_open((struct sockaddr *)&dst, sizeof(dst), NULL, 0, &h->ep);
	if (r) {
		snprintf(why, whycap, "ep_open: %s", strerror(-r));
		return r;
	}
	r = wait_event(h, &ev, deadline_after(case_timeout_ms));
	if (r || ev.type != OTI_EV_RESOLVED) {
		snprintf(why, whycap, "no RESOLVED event (%s, type %d)", strerror(-r), ev.type);
		return r ? r : -EPROTO;
	}
	/* The zero-copy attacks RDMA-read into this memory; on iWARP the sink
	 * of a read must allow remote write. */
	r = T->mr_reg(h->ep, h->mem, MEM_SIZE,
		      OTI_ACCESS_LOCAL_WRITE |
			      ((caps.flags & OTI_CAP_IWARP_RULES) ? OTI_ACCESS_REMOTE_WRITE : 0),
		      &h->mr);
	if (r) {
		snprintf(why, whycap, "mr_reg: %s", strerror(-r));
		return r;
	}
	for (uint64_t i = 0; i < NRECV; i++) {
		struct oti_sge sge = { h->mem + i * RECV_SIZE, RECV_SIZE, h->mr };

		r = T->post_recv(h->ep, &sge, i);
		if (r) {
			snprintf(why, whycap, "post_recv: %s", strerror(-r));
			return r;
		}
	}

	struct sockaddr_storage local;
	struct sdp_hello hello = {
		.bsdh = { .mid = SDP_MID_HELLO, .bufs = NRECV },
		.major = SDP_MAJOR_VERSION,
		.minor = SDP_MINOR_VERSION,
		.ip_version = 4,
		.max_adverts = 1,
		.desremrcvsz = hello_rcvsz,
		.localrcvsz = hello_rcvsz,
		.has_addrs = 1,
	};
	struct sockaddr_storage dss;

	memset(&local, 0, sizeof(local));
	T->ep_names(h->ep, &local, NULL);
	memcpy(&dss, &dst, sizeof(dst));
	hello.src_port = (uint16_t)xfer_addr_port((struct sockaddr *)&local);
	v4_mapped(&hello.src_addr, &local);
	v4_mapped(&hello.dst_addr, &dss);

	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	size_t cap = caps.max_private_data < sizeof(pdata) ? caps.max_private_data : sizeof(pdata);
	int len = sdp_hello_encode(pdata, cap, &hello);

	if (len < 0) {
		snprintf(why, whycap, "sdp_hello_encode: %s", strerror(-len));
		return len;
	}
	switch (hv) {
	case HELLO_BAD_MAJOR:
		pdata[16] = (uint8_t)((1 << 4) | SDP_MINOR_VERSION);	/* major 1 */
		break;
	case HELLO_TRUNCATED:
		len = 20;	/* neither the compact nor the full form */
		break;
	case HELLO_WRONG_MID:
		pdata[0] = SDP_MID_DATA;
		break;
	case HELLO_TINY_BUFFERS:
		hello.localrcvsz = 8;
		hello.desremrcvsz = 8;
		/* The encoder is not a validator: it writes what it is given. */
		len = sdp_hello_encode(pdata, cap, &hello);
		break;
	case HELLO_NO_ADVERTS:
		hello.max_adverts = 0;
		len = sdp_hello_encode(pdata, cap, &hello);
		break;
	case HELLO_NONE:
		len = 0;
		break;
	default:
		break;
	}
	if (len < 0) {
		snprintf(why, whycap, "sdp_hello_encode: %s", strerror(-len));
		return len;
	}
	r = T->connect(h->ep, pdata, (size_t)len);
	if (r) {
		snprintf(why, whycap, "connect: %s", strerror(-r));
		return r;
	}
	r = wait_event(h, &ev, deadline_after(case_timeout_ms));
	if (r) {
		snprintf(why, whycap, "no answer to the Hello within %u ms (%s)", case_timeout_ms,
			 strerror(-r));
		return r;
	}
	if (hv != HELLO_OK)
		return 0;
	if (ev.type != OTI_EV_ESTABLISHED) {
		snprintf(why, whycap, "valid Hello not accepted: event %d status %d", ev.type,
			 ev.status);
		return -ECONNREFUSED;
	}
	r = sdp_hello_ack_decode(ev.private_data, ev.private_data_len, &h->ack);
	if (r) {
		snprintf(why, whycap, "victim's HelloAck does not decode: %s", strerror(-r));
		return r;
	}
	if (h->ack.bsdh.bufs < 3 || h->ack.actrcvsz < SDP_BSDH_LEN + 32) {
		snprintf(why, whycap, "HelloAck offers %u buffers of %u bytes", h->ack.bsdh.bufs,
			 h->ack.actrcvsz);
		return -EPROTO;
	}
	return 0;
}

/* Post one message from the send area (bytes already in place). */
static int hconn_send_raw(struct hconn *h, size_t off, size_t len)
{
	struct oti_sge sge = { h->mem + NRECV * RECV_SIZE + off, (uint32_t)len, h->mr };

	return T->post_send(h->ep, &sge, 1000 + h->send_ctx++, 0);
}

static uint8_t *send_area(struct hconn *h)
{
	return h->mem + NRECV * RECV_SIZE;
}

/* A well-formed message: BSDH with the next mseq, then ext + payload that
 * the caller put at send_area()+16. */
static void put_bsdh(struct hconn *h, uint8_t *out, uint8_t mid, uint8_t flags, uint32_t len)
{
	struct sdp_bsdh b = {
		.mid = mid,
		.flags = flags,
		.bufs = h->no_credits ? 0 : NRECV,
		.len = len,
		.mseq = h->next_mseq++,
		.mseq_ack = h->last_rx_mseq,
	};

	sdp_bsdh_encode(out, &b);
}

/* The valid opening: one Data message carrying an sdpcat header, so the
 * victim has accepted the connection and is reading its stream. */
static int send_valid_header(struct hconn *h, uint32_t tag)
{
	uint8_t *p = send_area(h);
	struct xfer_hdr hdr = { .magic = XFER_MAGIC_ONEWAY, .seed = HOSTILE_SEED_TAG | tag,
				.bytes = 1ull << 40 };

	put_bsdh(h, p, SDP_MID_DATA, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
	xfer_hdr_encode(p + SDP_BSDH_LEN, &hdr);
	return hconn_send_raw(h, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
}

/* A message at p: BSDH with the next mseq, ext, payload.  Its length. */
static long build_msg(struct hconn *h, uint8_t *p, uint8_t mid, uint8_t flags, const void *ext,
		      size_t elen, const void *payload, size_t plen)
{
	uint32_t len = (uint32_t)(SDP_BSDH_LEN + elen + plen);

	put_bsdh(h, p, mid, flags, len);
	if (elen)
		memcpy(p + SDP_BSDH_LEN, ext, elen);
	if (plen)
		memcpy(p + SDP_BSDH_LEN + elen, payload, plen);
	return len;
}

/* Build one in a slot of its own and post it. */
static int send_msg(struct hconn *h, uint8_t mid, uint8_t flags, const void *ext, size_t elen,
		    const void *payload, size_t plen)
{
	if (h->msg_off < MSG_FIRST_SLOT || h->msg_off + MSG_SLOT > RD_AREA_OFF)
		h->msg_off = MSG_FIRST_SLOT;
	size_t off = h->msg_off;

	if (SDP_BSDH_LEN + elen + plen > MSG_SLOT)
		return -EMSGSIZE;
	h->msg_off += MSG_SLOT;
	return hconn_send_raw(h, off,
			      (size_t)build_msg(h, send_area(h) + off, mid, flags, ext, elen, payload,
						plen));
}

static int send_mode_change(struct hconn *h, int send_half, enum sdp_mode m)
{
	uint8_t ext[SDP_MCH_LEN];

	sdp_mch_encode(ext, send_half, m);
	return send_msg(h, SDP_MID_MODE_CHANGE, 0, ext, sizeof(ext), NULL, 0);
}

/* A SinkAvail for len bytes at raddr with rkey, and plen payload bytes. */
static int send_sink_avail(struct hconn *h, uint32_t len, uint64_t raddr, uint32_t rkey,
			   uint32_t non_discards, uint32_t plen)
{
	struct sdp_sinkah a = { .len = len, .rkey = rkey, .vaddr = raddr,
				.non_discards = non_discards };
	uint8_t ext[SDP_SINKAH_LEN], data[64];

	memset(data, 'q', sizeof(data));
	sdp_sinkah_encode(ext, &a);
	return send_msg(h, SDP_MID_SINK_AVAIL, 0, ext, sizeof(ext), data,
			plen < sizeof(data) ? plen : sizeof(data));
}

static int pump_until(struct hconn *h, bool (*pred)(const struct hconn *), uint64_t deadline);

static bool never(const struct hconn *h)
{
	(void)h;
	return false;
}

/* The legal messages that set an attack up go first; the victim must still
 * be there 20 ms later.  -ECONNRESET if it is not. */
static int legal_first(struct hconn *h, int r)
{
	if (r)
		return r;
	r = pump_until(h, never, deadline_after(20));
	return r == -ETIMEDOUT ? 0 : r ? r : -EPROTO;
}

/* --- the in-band attacks -------------------------------------------------- */

/* Each builds one bad message at send_area()+4096 and returns its length
 * (the length to post), or -errno. */
typedef long (*attack_fn)(struct hconn *h, uint8_t *p);

static long atk_len_short(struct hconn *h, uint8_t *p)
{
	/* The header claims 100 payload bytes; 50 arrive. */
	put_bsdh(h, p, SDP_MID_DATA, 0, SDP_BSDH_LEN + 100);
	memset(p + SDP_BSDH_LEN, 'x', 50);
	return SDP_BSDH_LEN + 50;
}

static long atk_len_huge(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_DATA, 0, 0x7fffffff);
	memset(p + SDP_BSDH_LEN, 'x', 100);
	return SDP_BSDH_LEN + 100;
}

static long atk_len_below_bsdh(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_DATA, 0, 8);
	return SDP_BSDH_LEN;
}

static long atk_short_message(struct hconn *h, uint8_t *p)
{
	/* Not even a whole BSDH. */
	put_bsdh(h, p, SDP_MID_DATA, 0, 8);
	return 8;
}

static long atk_unknown_mid(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, 0x42, 0, SDP_BSDH_LEN);
	return SDP_BSDH_LEN;
}

static long atk_hello_in_band(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_HELLO, 0, SDP_BSDH_LEN);
	return SDP_BSDH_LEN;
}

static long atk_hello_ack_in_band(struct hconn *h, uint8_t *p)
{
	/* A complete, well-formed HelloAck, but in band. */
	struct sdp_hello_ack a = {
		.bsdh = { .mid = SDP_MID_HELLO_ACK, .bufs = NRECV, .mseq = h->next_mseq++ },
		.major = SDP_MAJOR_VERSION, .minor = SDP_MINOR_VERSION, .ip_version = 4,
		.max_adverts = 1, .actrcvsz = RECV_SIZE,
	};

	return sdp_hello_ack_encode(p, SDP_HELLO_ACK_COMPACT_LEN, &a);
}

static long atk_oversize(struct hconn *h, uint8_t *p)
{
	/* Well-formed, but longer than the buffers the victim advertised. */
	uint32_t len = h->ack.actrcvsz + 4096;

	if (len > SEND_AREA - 4096)
		return -EMSGSIZE;
	put_bsdh(h, p, SDP_MID_DATA, 0, len);
	memset(p + SDP_BSDH_LEN, 'o', len - SDP_BSDH_LEN);
	return len;
}

static long atk_disconn_payload(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_DISCONN, 0, SDP_BSDH_LEN + 10);
	memset(p + SDP_BSDH_LEN, 'd', 10);
	return SDP_BSDH_LEN + 10;
}

static long atk_bad_flags(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_DATA, 0x80, SDP_BSDH_LEN + 10);
	memset(p + SDP_BSDH_LEN, 'f', 10);
	return SDP_BSDH_LEN + 10;
}

static long atk_oob_no_payload(struct hconn *h, uint8_t *p)
{
	put_bsdh(h, p, SDP_MID_DATA, SDP_FLAG_OOB_PRES, SDP_BSDH_LEN);
	return SDP_BSDH_LEN;
}

static long atk_ack_from_future(struct hconn *h, uint8_t *p)
{
	/* Acknowledges messages the victim never sent. */
	struct sdp_bsdh b = {
		.mid = SDP_MID_DATA, .bufs = NRECV, .len = SDP_BSDH_LEN + 10,
		.mseq = h->next_mseq++, .mseq_ack = h->last_rx_mseq + 100000,
	};

	sdp_bsdh_encode(p, &b);
	memset(p + SDP_BSDH_LEN, 'a', 10);
	return SDP_BSDH_LEN + 10;
}

static long atk_random(struct hconn *h, uint8_t *p)
{
	struct xgen g;
	struct sdp_bsdh b;

	(void)h;
	/* Fixed seeds, so a failure can be replayed; skip the (vanishingly
	 * unlikely) seed whose bytes happen to decode. */
	for (uint64_t seed = 1;; seed++) {
		xgen_init(&g, seed * 7919);
		xgen_fill(&g, p, 200);
		if (sdp_bsdh_decode(p, 200, &b) != 0)
			return 200;
	}
}

static long atk_ext_too_short(struct hconn *h, uint8_t *p)
{
	/* SrcAvail needs a 16-byte extended header; give it none. */
	put_bsdh(h, p, SDP_MID_SRC_AVAIL, 0, SDP_BSDH_LEN);
	return SDP_BSDH_LEN;
}

/* The mode rules (sdp/mode.c): each half starts Combined. */
static long mch_at(struct hconn *h, uint8_t *p, int send_half, enum sdp_mode m)
{
	uint8_t ext[SDP_MCH_LEN];

	sdp_mch_encode(ext, send_half, m);
	return build_msg(h, p, SDP_MID_MODE_CHANGE, 0, ext, sizeof(ext), NULL, 0);
}

static long atk_mch_noop(struct hconn *h, uint8_t *p)
{
	return mch_at(h, p, 0, SDP_MODE_COMBINED);
}

static long atk_mch_pipe_to_trans(struct hconn *h, uint8_t *p)
{
	int r = legal_first(h, send_mode_change(h, 0, SDP_MODE_PIPELINED));

	return r ? r : mch_at(h, p, 0, SDP_MODE_TRANSACTION);
}

static long atk_mch_trans_to_pipe(struct hconn *h, uint8_t *p)
{
	int r = legal_first(h, send_mode_change(h, 0, SDP_MODE_TRANSACTION));

	return r ? r : mch_at(h, p, 0, SDP_MODE_PIPELINED);
}

static long atk_mch_send_half(struct hconn *h, uint8_t *p)
{
	/* The sink's one legal move, Buffered -> Combined of the source's
	 * half (0x9): the victim's half is Combined, not Buffered. */
	return mch_at(h, p, 1, SDP_MODE_COMBINED);
}

static long atk_mch_send_half_pipe(struct hconn *h, uint8_t *p)
{
	/* Choosing the victim's mode for it. */
	return mch_at(h, p, 1, SDP_MODE_PIPELINED);
}

static long atk_mch_undefined(struct hconn *h, uint8_t *p)
{
	uint8_t ext[SDP_MCH_LEN] = { 0x50 };	/* mode 5 */

	return build_msg(h, p, SDP_MID_MODE_CHANGE, 0, ext, sizeof(ext), NULL, 0);
}

static long atk_sink_avail_combined(struct hconn *h, uint8_t *p)
{
	/* A real buffer: only the rule can stop it.  The victim has sent no
	 * data, so non_discards 0 is right. */
	struct sdp_sinkah a = { .len = 65536, .non_discards = 0 };
	uint8_t ext[SDP_SINKAH_LEN];
	int r = hconn_expose(h);

	if (r)
		return r;
	a.rkey = h->xmr->rkey;
	a.vaddr = xmem_raddr(h, 0);
	sdp_sinkah_encode(ext, &a);
	return build_msg(h, p, SDP_MID_SINK_AVAIL, 0, ext, sizeof(ext), NULL, 0);
}

static long atk_wr_compl_no_advert(struct hconn *h, uint8_t *p)
{
	uint8_t ext[SDP_U32H_LEN];

	sdp_u32h_encode(ext, 4096);
	return build_msg(h, p, SDP_MID_RDMA_WR_COMPL, 0, ext, sizeof(ext), NULL, 0);
}

static long atk_cancel_ack_no_cancel(struct hconn *h, uint8_t *p)
{
	return build_msg(h, p, SDP_MID_SINK_CANCEL_ACK, 0, NULL, 0, NULL, 0);
}

/* A SrcAvail of 100000 bytes of readable memory, `inl` of them inline:
 * if the victim took it, its read would work and nothing would stop the
 * connection but the rule. */
static long src_avail_at(struct hconn *h, uint8_t *p, uint32_t inl)
{
	struct sdp_srcah a = { .len = 100000 };
	uint8_t ext[SDP_SRCAH_LEN];
	int r = hconn_expose(h);

	if (r)
		return r;
	a.rkey = h->xmr->rkey;
	a.vaddr = xmem_raddr(h, 0);
	sdp_srcah_encode(ext, &a);
	return build_msg(h, p, SDP_MID_SRC_AVAIL, 0, ext, sizeof(ext), h->xmem, inl);
}

static long atk_src_avail_inline_pipelined(struct hconn *h, uint8_t *p)
{
	int r = legal_first(h, send_mode_change(h, 0, SDP_MODE_PIPELINED));

	return r ? r : src_avail_at(h, p, 16);
}

static long atk_src_avail_bare_combined(struct hconn *h, uint8_t *p)
{
	return src_avail_at(h, p, 0);
}

static const struct {
	const char *name;
	attack_fn fn;
} attacks[] = {
	{ "BSDH len > bytes sent", atk_len_short },
	{ "BSDH len 0x7fffffff", atk_len_huge },
	{ "BSDH len < 16", atk_len_below_bsdh },
	{ "8-byte message (no whole BSDH)", atk_short_message },
	{ "unknown MID 0x42", atk_unknown_mid },
	{ "Hello MID in band", atk_hello_in_band },
	{ "HelloAck in band", atk_hello_ack_in_band },
	{ "Data larger than the advertised buffer", atk_oversize },
	{ "DisConn with payload", atk_disconn_payload },
	{ "undefined BSDH flag bits", atk_bad_flags },
	{ "OOB_PRES without payload", atk_oob_no_payload },
	{ "mseq_ack of unsent messages", atk_ack_from_future },
	{ "SrcAvail without its extended header", atk_ext_too_short },
	{ "200 random bytes", atk_random },
	{ "mode: ModeChange Combined -> Combined", atk_mch_noop },
	{ "mode: ModeChange Pipelined -> Transaction", atk_mch_pipe_to_trans },
	{ "mode: ModeChange Transaction -> Pipelined", atk_mch_trans_to_pipe },
	{ "mode: ModeChange of the victim's half (0x9)", atk_mch_send_half },
	{ "mode: victim's half to Pipelined (0xA)", atk_mch_send_half_pipe },
	{ "mode: ModeChange to undefined mode 5", atk_mch_undefined },
	{ "mode: SinkAvail, victim's half Combined", atk_sink_avail_combined },
	{ "mode: RdmaWrCompl, no SinkAvail ever", atk_wr_compl_no_advert },
	{ "mode: SinkCancelAck, no SinkAvailCancel", atk_cancel_ack_no_cancel },
	{ "mode: SrcAvail with inline data, Pipelined", atk_src_avail_inline_pipelined },
	{ "mode: SrcAvail without inline data, Combined", atk_src_avail_bare_combined },
};

static const struct {
	const char *name;
	enum hello_variant hv;
} hello_attacks[] = {
	{ "Hello with major version 1", HELLO_BAD_MAJOR },
	{ "Hello of 20 bytes (no valid form)", HELLO_TRUNCATED },
	{ "Hello with the Data MID", HELLO_WRONG_MID },
	{ "Hello with 8-byte buffers", HELLO_TINY_BUFFERS },
	{ "Hello with max_adverts 0", HELLO_NO_ADVERTS },
	{ "connect without private data", HELLO_NONE },
};

static bool victim_alive(char *why, size_t cap)
{
	int status;
	pid_t r = waitpid(victim_pid, &status, WNOHANG);

	if (r == 0)
		return true;
	if (r == victim_pid) {
		if (WIFSIGNALED(status))
			snprintf(why, cap, "victim process killed by signal %d", WTERMSIG(status));
		else
			snprintf(why, cap, "victim process exited with %d", WEXITSTATUS(status));
		victim_pid = 0;
	} else {
		snprintf(why, cap, "waitpid: %s", strerror(errno));
	}
	return false;
}

/* The connection must go down within the time limit; why says how fast,
 * after `label`. */
static int expect_down(struct hconn *h, const char *label, char *why, size_t cap)
{
	struct oti_event ev;
	uint64_t t0 = xfer_now_ns(), deadline = deadline_after(case_timeout_ms);

	while (!h->disconnected) {
		int r = wait_event(h, &ev, deadline);

		if (r == -ETIMEDOUT) {
			snprintf(why, cap, "victim did not abort the connection within %u ms",
				 case_timeout_ms);
			return r;
		}
		if (r) {
			snprintf(why, cap, "waiting for the abort: %s", strerror(-r));
			return r;
		}
	}
	snprintf(why, cap, "%s %.1f ms%s", label, (xfer_now_ns() - t0) / 1e6,
		 h->saw_abort ? " (AbortConn received)" : "");
	return 0;
}

/* After a bad message: the victim must abort the connection. */
static int expect_abort(struct hconn *h, char *why, size_t cap)
{
	return expect_down(h, "aborted by the victim in", why, cap);
}

static int run_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	int r = hconn_open(&h, HELLO_OK, why, cap);

	if (r)
		goto out;
	r = send_valid_header(&h, (uint32_t)i);
	if (r) {
		snprintf(why, cap, "posting the valid header: %s", strerror(-r));
		goto out;
	}
	/* Let the victim take the valid message first, so the attack hits
	 * an accepted connection that is being read. */
	struct pollfd none;

	poll(&none, 0, 20);
	drain_cq(&h);
	if (h.disconnected) {
		snprintf(why, cap, "victim dropped the connection after a VALID message");
		r = -ECONNRESET;
		goto out;
	}
	long len = attacks[i].fn(&h, send_area(&h) + 4096);

	if (len < 0) {
		snprintf(why, cap, "%s: %s",
			 len == -ECONNRESET ? "victim aborted on the LEGAL messages before the attack"
					    : "building the message",
			 strerror((int)-len));
		r = (int)len;
		goto out;
	}
	r = hconn_send_raw(&h, 4096, (size_t)len);
	if (r) {
		snprintf(why, cap, "post_send: %s", strerror(-r));
		goto out;
	}
	r = expect_abort(&h, why, cap);
out:
	hconn_close(&h);
	return r;
}

static int run_hello_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	struct oti_event ev;
	int r = hconn_open(&h, hello_attacks[i].hv, why, cap);

	if (r)
		goto out;
	if (h.rejected || h.unreachable || h.disconnected) {
		snprintf(why, cap, "%s (status %d)",
			 h.rejected ? "rejected" : h.unreachable ? "refused" : "disconnected",
			 h.event_status);
		goto out;
	}
	/* Established: the victim took the bad Hello.  It may still drop
	 * the connection at once; either way it is a failure to accept it. */
	(void)wait_event(&h, &ev, deadline_after(500));
	snprintf(why, cap, "victim ESTABLISHED the connection%s",
		 h.disconnected ? " (then disconnected)" : "");
	r = -EPROTO;
out:
	hconn_close(&h);
	return r;
}

/* --- the zero-copy attacks: the attacker is the sink of the victim's send --- */

/* How much the victim is asked to send: above the default zcopy_thresh,
 * below zcopy_max (one SrcAvail), odd so the end is not page-aligned. */
#define ZC_BYTES ((256u << 10) + 13)

/* Serve the connection until pred(h) holds: 0; -ECONNRESET once the
 * transport is down first; -ETIMEDOUT. */
static int pump_until(struct hconn *h, bool (*pred)(const struct hconn *), uint64_t deadline)
{
	struct oti_event ev;
	int r;

	for (;;) {
		while (T->get_event(h->ep, &ev) == 0)
			note_event(h, &ev);
		drain_cq(h);
		if (pred(h))
			return 0;
		if (h->disconnected)
			return -ECONNRESET;
		r = ep_wait(h, deadline);
		if (r)
			return r;
	}
}

/*
 * pump_until(pred) within the case's time limit.  On failure why is fmt
 * with its one %s saying how ("timed out" or "connection dropped").
 */
static int await_victim(struct hconn *h, bool (*pred)(const struct hconn *), const char *fmt,
			char *why, size_t cap) __attribute__((format(printf, 3, 0)));
static int await_victim(struct hconn *h, bool (*pred)(const struct hconn *), const char *fmt,
			char *why, size_t cap)
{
	int r = pump_until(h, pred, deadline_after(case_timeout_ms));

	if (r)
		snprintf(why, cap, fmt, r == -ETIMEDOUT ? "timed out" : "connection dropped");
	return r;
}

static bool got_offer_or_data(const struct hconn *h)
{
	return h->n_srcavail > 0 || h->data_bytes > 0;
}

static bool got_trailer(const struct hconn *h)
{
	return h->data_bytes >= XFER_VERDICT_LEN;
}

static bool read_done(const struct hconn *h)
{
	return h->rd_done;
}

/* The attack's header: what the victim is to do (HOSTILE_MAGIC_*). */
static int send_request(struct hconn *h, uint32_t magic, uint32_t tag, uint64_t bytes)
{
	uint8_t *p = send_area(h);
	struct xfer_hdr hdr = { .magic = magic, .seed = HOSTILE_SEED_TAG | tag, .bytes = bytes };

	put_bsdh(h, p, SDP_MID_DATA, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
	xfer_hdr_encode(p + SDP_BSDH_LEN, &hdr);
	return hconn_send_raw(h, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
}

/* RdmaRdCompl{len}, from the send area at off (each message its own
 * place: an earlier one may still be in flight). */
static int send_rd_compl(struct hconn *h, size_t off, uint32_t len)
{
	uint8_t *p = send_area(h) + off;

	put_bsdh(h, p, SDP_MID_RDMA_RD_COMPL, 0, SDP_BSDH_LEN + SDP_U32H_LEN);
	sdp_u32h_encode(p + SDP_BSDH_LEN, len);
	return hconn_send_raw(h, off, SDP_BSDH_LEN + SDP_U32H_LEN);
}

/*
 * Open a connection, ask for ZC_BYTES (HOSTILE_MAGIC_SEND or _PIPE) and
 * wait for the SrcAvail; check that it advertises the whole buffer and
 * that its inline bytes are the start of the stream.  0, or -errno with
 * why filled in.
 */
static int zc_open_offer(struct hconn *h, uint32_t magic, uint32_t tag, char *why, size_t cap)
{
	int r = hconn_open(h, HELLO_OK, why, cap);

	if (r)
		return r;
	r = send_request(h, magic, tag, ZC_BYTES);
	if (r) {
		snprintf(why, cap, "posting the request: %s", strerror(-r));
		return r;
	}
	r = await_victim(h, got_offer_or_data, "no SrcAvail from the victim: %s", why, cap);
	if (r)
		return r;
	if (!h->n_srcavail) {
		snprintf(why, cap, "the victim sent its %u bytes by Bcopy, not with SrcAvail",
			 ZC_BYTES);
		return -EPROTO;
	}
	struct xgen g;
	uint8_t want[64];

	xgen_init(&g, HOSTILE_SEED_TAG | tag);
	xgen_fill(&g, want, sizeof(want));
	if (h->sa.len != ZC_BYTES || h->sa_inline == 0 || h->sa_inline > 32 ||
	    memcmp(h->sa_data, want, h->sa_inline)) {
		snprintf(why, cap, "bad SrcAvail: len %u for %u bytes, %u inline byte(s)%s",
			 h->sa.len, ZC_BYTES, h->sa_inline,
			 h->sa_inline <= 32 && memcmp(h->sa_data, want, h->sa_inline)
				 ? ", not the stream's"
				 : "");
		return -EPROTO;
	}
	return 0;
}

/*
 * How the attacker's RDMA read or write ended, r being what pump_until()
 * returned for it: 0 it completed successfully; 1 it failed, *how says
 * how (an error completion, or "connection dropped" and `dropped`).
 */
static int rdma_outcome(const struct hconn *h, int r, const char *dropped, char *how, size_t cap)
{
	if (r == 0 && h->rd_status == 0)
		return 0;
	if (r == 0)
		snprintf(how, cap, "error completion (%s)", strerror(-h->rd_status));
	else
		snprintf(how, cap, "connection dropped%s", dropped);
	return 1;
}

/*
 * One RDMA read of len bytes at raddr with rkey into the read area.
 * 0: it completed successfully; 1: it failed (error completion, or the
 * connection went down first: *how says which); -errno: could not post.
 */
static int zc_read(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len, char *how,
		   size_t cap)
{
	static uint64_t ctx_seq = 1u << 20;
	struct oti_sge sge = { send_area(h) + RD_AREA_OFF, len, h->mr };
	int r;

	memset(sge.addr, 0xEE, len);
	h->rd_ctx = ctx_seq++;
	h->rd_done = false;
	h->rd_status = 0;
	r = T->rdma_read(h->ep, &sge, raddr, rkey, h->rd_ctx);
	if (r) {
		snprintf(how, cap, "rdma_read: %s", strerror(-r));
		return r;
	}
	r = pump_until(h, read_done, deadline_after(case_timeout_ms));
	if (r == -ETIMEDOUT) {
		snprintf(how, cap, "the read neither completed nor failed within %u ms",
			 case_timeout_ms);
		return -ETIMEDOUT;
	}
	return rdma_outcome(h, r, "", how, cap);
}

/* The read area holds the stream's bytes [from, from + len)? */
static bool zc_read_matches(struct hconn *h, uint32_t tag, uint64_t from, uint32_t len)
{
	struct xgen g;
	uint8_t skip[4096];

	xgen_init(&g, HOSTILE_SEED_TAG | tag);
	for (uint64_t s = from; s;) {
		size_t k = s < sizeof(skip) ? (size_t)s : sizeof(skip);

		xgen_fill(&g, skip, k);
		s -= k;
	}
	return xgen_check(&g, send_area(h) + RD_AREA_OFF, len) == len;
}

/* The legitimate read of everything not inline: must work. */
static int zc_read_all(struct hconn *h, uint32_t tag, char *why, size_t cap)
{
	char how[160];
	uint32_t len = h->sa.len - h->sa_inline;
	int r = zc_read(h, h->sa.vaddr + h->sa_inline, h->sa.rkey, len, how, sizeof(how));

	if (r) {
		snprintf(why, cap, "the LEGITIMATE read of the offer failed: %s",
			 r > 0 ? how : strerror(-r));
		return -EIO;
	}
	if (!zc_read_matches(h, tag, h->sa_base + h->sa_inline, len)) {
		snprintf(why, cap, "the legitimate read gave the wrong bytes");
		return -EIO;
	}
	return 0;
}

/*
 * The verdict on `what`, an access that must fail, which zc_read() or
 * wz_write() ended with r and *how: 0 with the refusal in why, or a
 * failure (it worked: the victim's memory was `mem`; it could not be
 * tried).
 */
static int judge_refusal(int r, const char *what, const char *mem, const char *how, char *why,
			 size_t cap)
{
	if (r == 0) {
		snprintf(why, cap, "%s SUCCEEDED: the victim's memory was %s", what, mem);
		return -EIO;
	}
	if (r < 0) {
		snprintf(why, cap, "%s: %s", what, how);
		return r;
	}
	snprintf(why, cap, "%s refused: %s", what, how);
	return 0;
}

/* A read that must fail: "ok" text in why, or a failure. */
static int zc_bad_read(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len,
		       const char *what, char *why, size_t cap)
{
	char how[160];
	int r = zc_read(h, raddr, rkey, len, how, sizeof(how));

	/* An error completion may still have moved bytes on some device;
	 * the victim's stream must not be among them. */
	uint8_t *p = send_area(h) + RD_AREA_OFF;

	for (uint32_t i = 0; r > 0 && i < len; i++) {
		if (p[i] != 0xEE) {
			snprintf(why, cap, "%s failed (%s) but wrote into the local buffer", what,
				 how);
			return -EIO;
		}
	}
	return judge_refusal(r, what, "readable", how, why, cap);
}

/* The accesses of a live offer or advert at the wrong place, in the order
 * of the ZC_ and WZ_ attacks of the same names. */
enum misplaced {
	MIS_BEFORE,		/* 16 bytes ending at vaddr */
	MIS_STRADDLE_END,	/* 16 bytes across vaddr + len */
	MIS_PAST_END,		/* 16 bytes from vaddr + len */
	MIS_WRONG_KEY,		/* the right place, rkey + 1 */
};

/* zc_bad_read() or wz_bad_write(). */
typedef int (*bad_access_fn)(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len,
			     const char *what, char *why, size_t cap);

/* With `bad`, an access that must fail of the offer or advert of len
 * bytes at va with rkey; the wrong key is tried at `at`. */
static int misplaced_access(struct hconn *h, bad_access_fn bad, enum misplaced m, uint64_t va,
			    uint32_t len, uint32_t rkey, uint64_t at, char *why, size_t cap)
{
	switch (m) {
	case MIS_BEFORE:
		return bad(h, va - 16, rkey, 16, "16 bytes before vaddr", why, cap);
	case MIS_STRADDLE_END:
		return bad(h, va + len - 8, rkey, 16, "16 bytes across the end", why, cap);
	case MIS_PAST_END:
		return bad(h, va + len, rkey, 16, "16 bytes past the end", why, cap);
	default:
		return bad(h, at, rkey + 1, 16, "rkey+1", why, cap);
	}
}

enum zc_attack {
	ZC_STALE_KEY,		/* read again after the offer completed */
	ZC_BEFORE,		/* 16 bytes ending at vaddr */
	ZC_STRADDLE_END,	/* 16 bytes across vaddr + len */
	ZC_PAST_END,		/* 16 bytes from vaddr + len */
	ZC_WRONG_KEY,		/* the right range, rkey + 1 */
	ZC_COMPL_TOO_MUCH,	/* RdmaRdCompl for one byte more than readable */
	ZC_COMPL_NO_OFFER,	/* RdmaRdCompl after the offer completed */
	ZC_COMPL_NEVER_OFFERED,	/* RdmaRdCompl while the victim only receives */
};
_Static_assert(ZC_STRADDLE_END - ZC_BEFORE == MIS_STRADDLE_END &&
	       ZC_PAST_END - ZC_BEFORE == MIS_PAST_END && ZC_WRONG_KEY - ZC_BEFORE == MIS_WRONG_KEY,
	       "ZC_BEFORE..ZC_WRONG_KEY in the order of enum misplaced");

static const struct {
	const char *name;
	enum zc_attack a;
} zc_attacks[] = {
	{ "zcopy: reread with a completed offer's key", ZC_STALE_KEY },
	{ "zcopy: read before vaddr of a live offer", ZC_BEFORE },
	{ "zcopy: read across vaddr+len of a live offer", ZC_STRADDLE_END },
	{ "zcopy: read past vaddr+len of a live offer", ZC_PAST_END },
	{ "zcopy: read a live offer with rkey+1", ZC_WRONG_KEY },
	{ "zcopy: RdmaRdCompl for more than advertised", ZC_COMPL_TOO_MUCH },
	{ "zcopy: RdmaRdCompl after the offer completed", ZC_COMPL_NO_OFFER },
	{ "zcopy: RdmaRdCompl, no offer ever made", ZC_COMPL_NEVER_OFFERED },
};

/* Complete the offer and wait for the victim's trailer: its send has
 * returned, so the key must be dead. */
static int zc_complete(struct hconn *h, char *why, size_t cap)
{
	int r = send_rd_compl(h, 4096, h->sa.len - h->sa_inline);

	if (r) {
		snprintf(why, cap, "posting RdmaRdCompl: %s", strerror(-r));
		return r;
	}
	r = await_victim(h, got_trailer,
			 "after a full RdmaRdCompl the victim's send did not complete (%s)", why, cap);
	if (r)
		return r;
	uint64_t bytes, hash;

	xfer_verdict_decode(h->data_head, &bytes, &hash);
	if (bytes != ZC_BYTES) {
		snprintf(why, cap, "the victim's send returned %" PRIu64 " of %u bytes", bytes,
			 ZC_BYTES);
		return -EIO;
	}
	return 0;
}

static int run_zc_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	uint32_t tag = 0x800u + (uint32_t)i;
	enum zc_attack a = zc_attacks[i].a;
	char how[200] = "";
	int r;

	why[0] = '\0';

	if (a == ZC_COMPL_NEVER_OFFERED) {
		r = hconn_open(&h, HELLO_OK, why, cap);
		if (!r)
			r = send_valid_header(&h, tag);
		if (r) {
			if (!why[0])
				snprintf(why, cap, "posting the header: %s", strerror(-r));
			goto out;
		}
		poll(NULL, 0, 20);
		r = send_rd_compl(&h, 4096, 100);
		if (r) {
			snprintf(why, cap, "posting RdmaRdCompl: %s", strerror(-r));
			goto out;
		}
		r = expect_abort(&h, why, cap);
		goto out;
	}
	r = zc_open_offer(&h, HOSTILE_MAGIC_SEND, tag, why, cap);
	if (r)
		goto out;
	uint64_t va = h.sa.vaddr;
	uint32_t len = h.sa.len, rkey = h.sa.rkey;

	switch (a) {
	case ZC_STALE_KEY:
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = zc_complete(&h, why, cap);
		if (!r)
			r = zc_bad_read(&h, va + h.sa_inline, rkey, 4096,
					"reading with the key after the send returned", why, cap);
		break;
	case ZC_BEFORE:
	case ZC_STRADDLE_END:
	case ZC_PAST_END:
	case ZC_WRONG_KEY:
		/* The key works while the offer is live ... */
		r = zc_read(&h, va + h.sa_inline, rkey, 16, how, sizeof(how));
		if (r || !zc_read_matches(&h, tag, h.sa_inline, 16)) {
			snprintf(why, cap, "a LEGITIMATE 16-byte read of the live offer %s",
				 r ? how : "gave the wrong bytes");
			r = -EIO;
			break;
		}
		/* ... and nowhere else. */
		r = misplaced_access(&h, zc_bad_read, (enum misplaced)(a - ZC_BEFORE), va, len, rkey,
				     va + h.sa_inline, why, cap);
		break;
	case ZC_COMPL_TOO_MUCH:
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = send_rd_compl(&h, 4096, len - h.sa_inline + 1);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	case ZC_COMPL_NO_OFFER:
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = zc_complete(&h, why, cap);
		if (!r)
			r = send_rd_compl(&h, 8192, 16);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	default:
		r = -EINVAL;
		break;
	}
out:
	hconn_close(&h);
	return r;
}

/* --- the victim's word ------------------------------------------------------ */

/* The read end of the report pipe (attacker process), and the reports
 * read from it that no case has asked for yet. */
static int report_rd = -1;
static struct vreport reports[64];
static unsigned n_reports;

/*
 * The victim's report on the connection with this tag: it comes once the
 * victim has seen the connection end (the caller has closed its side).
 * 0, or -ETIMEDOUT with why filled in.
 */
static int get_report(uint32_t tag, struct vreport *out, char *why, size_t cap)
{
	uint64_t deadline = deadline_after(case_timeout_ms);

	for (;;) {
		for (unsigned i = 0; i < n_reports; i++) {
			if (reports[i].tag == tag) {
				*out = reports[i];
				reports[i] = reports[--n_reports];
				return 0;
			}
		}
		struct vreport r;
		ssize_t n = read(report_rd, &r, sizeof(r));

		if (n == (ssize_t)sizeof(r)) {
			if (n_reports == sizeof(reports) / sizeof(reports[0]))
				n_reports--;	/* the oldest nobody wants */
			reports[n_reports++] = r;
			continue;
		}
		uint64_t now = xfer_now_ns();

		if (now >= deadline || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			snprintf(why, cap, "no word from the victim on this connection within %u ms",
				 case_timeout_ms);
			return -ETIMEDOUT;
		}
		struct pollfd pf = { .fd = report_rd, .events = POLLIN };

		poll(&pf, 1, 50);
	}
}

/* The victim's report on the connection with this tag (get_report()),
 * appended to why; -EIO when it tells of changed memory or bad data,
 * whatever the case. */
static int victim_word(uint32_t tag, struct vreport *vr, char *why, size_t cap)
{
	int r = get_report(tag, vr, why + strlen(why), cap - strlen(why));

	if (r)
		return r;
	size_t k = strlen(why);

	snprintf(why + k, cap - k, "%svictim: %s", k ? "; " : "", vr->text);
	if (vr->flags & (VR_DATA_BAD | VR_MEM_CHANGED)) {
		k = strlen(why);
		snprintf(why + k, cap - k, " -- %s",
			 vr->flags & VR_MEM_CHANGED ? "ITS MEMORY CHANGED" : "IT GOT BAD DATA");
		return -EIO;
	}
	return 0;
}

/* --- Write Zcopy: the attacker is the source, the victim's recv() the sink --- */

/* How much the honest writes carry: less than the victim's buffer, so the
 * rest of it must stay untouched. */
#define WZ_WRITE 200003u
/* How much goes by Data when an attack ends an advert that way. */
#define WZ_DATA 100u

static bool got_sink_avail(const struct hconn *h)
{
	return h->n_sinkavail > 0;
}

static bool got_wr_compl(const struct hconn *h)
{
	return h->n_wrcompl > 0;
}

/*
 * Declare our send half Pipelined, ask the victim to receive `bytes`
 * (HOSTILE_MAGIC_RECV) and wait for its recv()'s SinkAvail; check that it
 * advertises the whole buffer, carries no data and counts our one Data
 * message.  0, or -errno with why filled in.
 */
static int wz_open_advert(struct hconn *h, uint32_t tag, uint64_t bytes, char *why, size_t cap)
{
	int r = hconn_open(h, HELLO_OK, why, cap);

	if (r)
		return r;
	r = send_mode_change(h, 0, SDP_MODE_PIPELINED);
	if (!r)
		r = send_request(h, HOSTILE_MAGIC_RECV, tag, bytes);
	if (r) {
		snprintf(why, cap, "posting ModeChange and the request: %s", strerror(-r));
		return r;
	}
	r = await_victim(h, got_sink_avail, "no SinkAvail for the victim's recv(): %s", why, cap);
	if (r)
		return r;
	if (h->sk.len != HOSTILE_RECV_BUF || h->sk_payload || h->sk.non_discards != 1) {
		snprintf(why, cap, "bad SinkAvail: %u bytes for a %u-byte recv(), %u data bytes, "
			 "non_discards %u after 1 Data message", h->sk.len, HOSTILE_RECV_BUF,
			 h->sk_payload, h->sk.non_discards);
		return -EPROTO;
	}
	return 0;
}

static bool write_settled(const struct hconn *h)
{
	return h->rd_done && (h->rd_status || h->n_pong >= h->pong_want);
}

/*
 * One RDMA write of len bytes from the read area to raddr with rkey, and a
 * ChRcvBuf right behind it, which the victim answers with ChRcvBufAck.
 * The transport delivers the ChRcvBuf only after the write has landed, and
 * a write the victim's side refuses either completes in error and stops
 * the QP (verbs) or makes the provider drop the connection (tcp-fallback,
 * where a write completes once it is handed to the kernel, so its
 * completion alone proves nothing): the answer is the proof that the write
 * was taken.  0: taken; 1: refused (*how says how); -errno.
 */
static int wz_write(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len, char *how,
		    size_t cap)
{
	static uint64_t ctx_seq = 2u << 20;
	struct oti_sge sge = { send_area(h) + RD_AREA_OFF, len, h->mr };
	uint8_t ext[SDP_U32H_LEN];
	int r;

	h->rd_ctx = ctx_seq++;
	h->rd_done = false;
	h->rd_status = 0;
	h->pong_want = h->n_pong + 1;
	r = T->rdma_write(h->ep, &sge, raddr, rkey, h->rd_ctx);
	if (r) {
		snprintf(how, cap, "rdma_write: %s", strerror(-r));
		return r;
	}
	/* No more than the victim has (SDP's smallest buffers), so that it
	 * answers at once: asked for more, it grows its buffers and answers
	 * once those it posted before are used up (sdp/post.c). */
	sdp_u32h_encode(ext, 1040);
	r = send_msg(h, SDP_MID_CH_RCV_BUF, 0, ext, sizeof(ext), NULL, 0);
	if (r) {
		snprintf(how, cap, "posting ChRcvBuf: %s", strerror(-r));
		return r;
	}
	r = pump_until(h, write_settled, deadline_after(case_timeout_ms));
	if (r == -ETIMEDOUT) {
		snprintf(how, cap, "the write neither completed nor failed within %u ms (%s)",
			 case_timeout_ms, h->rd_done ? "completed, no ChRcvBufAck" : "no completion");
		return -ETIMEDOUT;
	}
	return rdma_outcome(h, r,
			    h->rd_done && !h->rd_status ? " (the write had completed locally)" : "",
			    how, cap);
}

/* The victim's stream, bytes [from, from + len), into the read area. */
static void stream_to_read_area(struct hconn *h, uint32_t tag, uint64_t from, uint32_t len)
{
	struct xgen g;

	xgen_init(&g, HOSTILE_SEED_TAG | tag);
	g.off = from;
	xgen_fill(&g, send_area(h) + RD_AREA_OFF, len);
}

/* A legitimate write of the stream's [from, from + len) at raddr: must be
 * taken. */
static int wz_good_write(struct hconn *h, uint32_t tag, uint64_t from, uint64_t raddr,
			 uint32_t len, char *why, size_t cap)
{
	char how[160];
	int r;

	stream_to_read_area(h, tag, from, len);
	r = wz_write(h, raddr, h->sk.rkey, len, how, sizeof(how));
	if (r) {
		snprintf(why, cap, "the LEGITIMATE %u-byte write into the advert failed: %s", len,
			 r > 0 ? how : strerror(-r));
		return -EIO;
	}
	return 0;
}

/* A write of EVIL_BYTEs that must fail: "ok" text in why, or a failure. */
static int wz_bad_write(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len,
			const char *what, char *why, size_t cap)
{
	char how[160];
	int r;

	memset(send_area(h) + RD_AREA_OFF, EVIL_BYTE, len);
	r = wz_write(h, raddr, rkey, len, how, sizeof(how));
	return judge_refusal(r, what, "writable", how, why, cap);
}

/* Wait for the victim's verdict after its recv()s: it received `bytes`,
 * all of them the stream's, and its buffer is intact. */
static int wz_verdict(struct hconn *h, uint64_t bytes, char *why, size_t cap)
{
	int r = await_victim(h, got_trailer, "no verdict from the victim's recv() (%s)", why, cap);

	if (r)
		return r;
	uint64_t got, flags;

	xfer_verdict_decode(h->data_head, &got, &flags);
	if (got != bytes || flags) {
		snprintf(why, cap, "the victim received %" PRIu64 " of %" PRIu64 " bytes", got, bytes);
		return -EIO;
	}
	return 0;
}

/* RdmaWrCompl{n}: 0, or -errno with why filled in. */
static int send_wr_compl(struct hconn *h, uint32_t n, char *why, size_t cap)
{
	uint8_t ext[SDP_U32H_LEN];
	int r;

	sdp_u32h_encode(ext, n);
	r = send_msg(h, SDP_MID_RDMA_WR_COMPL, 0, ext, sizeof(ext), NULL, 0);
	if (r)
		snprintf(why, cap, "posting RdmaWrCompl: %s", strerror(-r));
	return r;
}

/* The honest use of the advert: WZ_WRITE bytes, RdmaWrCompl, the
 * victim's verdict.  Its recv() has returned: the key must be dead. */
static int wz_honest(struct hconn *h, uint32_t tag, char *why, size_t cap)
{
	int r = wz_good_write(h, tag, 0, h->sk.vaddr, WZ_WRITE, why, cap);

	if (!r)
		r = send_wr_compl(h, WZ_WRITE, why, cap);
	if (!r)
		r = wz_verdict(h, WZ_WRITE, why, cap);
	return r;
}

enum wz_attack {
	WZ_STALE_KEY,		/* write again once recv() returned */
	WZ_DEAD_BY_DATA,	/* Data instead of a write ends the advert; then its key */
	WZ_DEAD_BY_MCH,		/* ModeChange to Combined ends it; then its key */
	WZ_BEFORE,		/* 16 bytes ending at vaddr */
	WZ_STRADDLE_END,	/* 16 bytes across vaddr + len */
	WZ_PAST_END,		/* 16 bytes from vaddr + len */
	WZ_WRONG_KEY,		/* the right place, rkey + 1 */
	WZ_COMPL_TOO_MUCH,	/* RdmaWrCompl for one byte more than advertised */
	WZ_COMPL_NO_ADVERT,	/* RdmaWrCompl after the advert was used */
};
_Static_assert(WZ_STRADDLE_END - WZ_BEFORE == MIS_STRADDLE_END &&
	       WZ_PAST_END - WZ_BEFORE == MIS_PAST_END && WZ_WRONG_KEY - WZ_BEFORE == MIS_WRONG_KEY,
	       "WZ_BEFORE..WZ_WRONG_KEY in the order of enum misplaced");

static const struct {
	const char *name;
	enum wz_attack a;
} wz_attacks[] = {
	{ "wzcopy: write with the key after recv()", WZ_STALE_KEY },
	{ "wzcopy: key of an advert Data ended", WZ_DEAD_BY_DATA },
	{ "wzcopy: key of an advert ModeChange ended", WZ_DEAD_BY_MCH },
	{ "wzcopy: write before vaddr of a live advert", WZ_BEFORE },
	{ "wzcopy: write across vaddr+len", WZ_STRADDLE_END },
	{ "wzcopy: write past vaddr+len", WZ_PAST_END },
	{ "wzcopy: write a live advert with rkey+1", WZ_WRONG_KEY },
	{ "wzcopy: RdmaWrCompl for more than advertised", WZ_COMPL_TOO_MUCH },
	{ "wzcopy: RdmaWrCompl after the advert was used", WZ_COMPL_NO_ADVERT },
};

static int run_wz_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	struct vreport vr;
	uint32_t tag = 0x900u + (uint32_t)i;
	enum wz_attack a = wz_attacks[i].a;
	/* What the victim's first recv() must have returned: the advert's
	 * bytes or the Data's, or (< 0) an error. */
	int64_t want_r1 = -1;
	uint64_t bytes = a == WZ_DEAD_BY_DATA || a == WZ_DEAD_BY_MCH ? WZ_DATA : WZ_WRITE;
	char pre[120] = "";
	int r;

	why[0] = '\0';
	r = wz_open_advert(&h, tag, bytes, why, cap);
	if (r) {
		hconn_close(&h);
		return r;
	}
	uint64_t va = h.sk.vaddr;
	uint32_t len = h.sk.len, rkey = h.sk.rkey;

	switch (a) {
	case WZ_STALE_KEY:
		r = wz_honest(&h, tag, why, cap);
		want_r1 = WZ_WRITE;
		snprintf(pre, sizeof(pre), "%u bytes delivered intact; then ", WZ_WRITE);
		if (!r)
			r = wz_bad_write(&h, va, rkey, 4096, "writing with the key", why, cap);
		break;
	case WZ_DEAD_BY_DATA:
	case WZ_DEAD_BY_MCH: {
		uint8_t data[WZ_DATA];
		struct xgen g;

		xgen_init(&g, HOSTILE_SEED_TAG | tag);
		xgen_fill(&g, data, sizeof(data));
		if (a == WZ_DEAD_BY_MCH)
			r = send_mode_change(&h, 0, SDP_MODE_COMBINED);
		if (!r)
			r = send_msg(&h, SDP_MID_DATA, 0, NULL, 0, data, sizeof(data));
		if (r) {
			snprintf(why, cap, "posting the Data: %s", strerror(-r));
			break;
		}
		want_r1 = WZ_DATA;
		r = wz_verdict(&h, WZ_DATA, why, cap);
		snprintf(pre, sizeof(pre), "%u bytes by Data delivered; then ", WZ_DATA);
		if (!r)
			r = wz_bad_write(&h, va, rkey, 16, "writing with the dead advert's key", why,
					 cap);
		break;
	}
	case WZ_BEFORE:
	case WZ_STRADDLE_END:
	case WZ_PAST_END:
	case WZ_WRONG_KEY:
		/* The key works while the advert is live ... */
		r = wz_good_write(&h, tag, 0, va, 16, why, cap);
		if (r)
			break;
		/* ... and nowhere else. */
		r = misplaced_access(&h, wz_bad_write, (enum misplaced)(a - WZ_BEFORE), va, len, rkey,
				     va, why, cap);
		break;
	case WZ_COMPL_TOO_MUCH:
		r = wz_good_write(&h, tag, 0, va, len, why, cap);
		if (!r)
			r = send_wr_compl(&h, len + 1, why, cap);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	case WZ_COMPL_NO_ADVERT:
		r = wz_honest(&h, tag, why, cap);
		want_r1 = WZ_WRITE;
		if (!r)
			r = send_wr_compl(&h, 16, why, cap);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	default:
		r = -EINVAL;
		break;
	}
	hconn_close(&h);
	if (r)
		return r;
	if (pre[0]) {
		char rest[512];

		snprintf(rest, sizeof(rest), "%s", why);
		snprintf(why, cap, "%s%s", pre, rest);
	}
	/* The victim's word: what its recv() returned, and that its buffer and
	 * the guards around it hold nothing but what it was given. */
	r = victim_word(tag, &vr, why, cap);
	if (!r && (want_r1 < 0 ? vr.r1 >= 0 : vr.r1 != want_r1)) {
		size_t k = strlen(why);

		snprintf(why + k, cap - k, " -- its recv() should have %s",
			 want_r1 < 0 ? "failed" : "returned what was written");
		r = -EIO;
	}
	return r;
}

/* --- Write Zcopy: the victim is the source, the attacker a dishonest sink --- */

static bool got_pipelined_offer(const struct hconn *h)
{
	return h->n_mch > 0 && h->n_srcavail >= 2;
}

/*
 * Ask the victim for two sends of ZC_BYTES (magic: HOSTILE_MAGIC_PIPE or
 * _PIPE_TIMEO), read the
 * first offer and complete it with REQ_PIPE; the victim must then say
 * ModeChange to Pipelined and offer the second send with a SrcAvail
 * without inline bytes, which is left waiting.  0, or -errno with why
 * filled in.
 */
static int pipe_open(struct hconn *h, uint32_t magic, uint32_t tag, char *why, size_t cap)
{
	uint8_t ext[SDP_U32H_LEN];
	int r = zc_open_offer(h, magic, tag, why, cap);

	if (!r && (r = hconn_expose(h)))
		snprintf(why, cap, "registering the sink buffer: %s", strerror(-r));
	if (!r)
		r = zc_read_all(h, tag, why, cap);
	if (r)
		return r;
	sdp_u32h_encode(ext, h->sa.len - h->sa_inline);
	r = send_msg(h, SDP_MID_RDMA_RD_COMPL, SDP_FLAG_REQ_PIPE, ext, sizeof(ext), NULL, 0);
	if (r) {
		snprintf(why, cap, "posting RdmaRdCompl: %s", strerror(-r));
		return r;
	}
	r = pump_until(h, got_pipelined_offer, deadline_after(case_timeout_ms));
	if (r) {
		snprintf(why, cap, "after RdmaRdCompl with REQ_PIPE: %s%s%s",
			 h->n_mch ? "" : "no ModeChange, ", h->n_srcavail > 1 ? "" : "no second offer, ",
			 r == -ETIMEDOUT ? "timed out" : "connection dropped");
		return r;
	}
	if (h->mch_send_half || h->mch_mode != SDP_MODE_PIPELINED || h->n_mch != 1) {
		snprintf(why, cap, "the victim's ModeChange(s) (%u): send half %d, mode %d, not to "
			 "Pipelined", h->n_mch, h->mch_send_half, (int)h->mch_mode);
		return -EPROTO;
	}
	if (h->sa.len != ZC_BYTES || h->sa_inline) {
		snprintf(why, cap, "the victim's Pipelined SrcAvail: %u bytes, %u of them inline",
			 h->sa.len, h->sa_inline);
		return -EPROTO;
	}
	h->sa_base = ZC_BYTES;
	return 0;
}

/* After our honest SinkAvail for the victim's second send: it must write
 * the right bytes into it, complete it, and send the trailer. */
static int pipe_written(struct hconn *h, uint32_t tag, char *why, size_t cap)
{
	int r = await_victim(h, got_wr_compl, "no RdmaWrCompl for an honest SinkAvail (%s)", why,
			     cap);

	if (r)
		return r;
	struct xgen g;

	xgen_init(&g, HOSTILE_SEED_TAG | tag);
	g.off = ZC_BYTES;
	if (h->wrcompl_len != ZC_BYTES || xgen_check(&g, h->xmem, ZC_BYTES) != ZC_BYTES) {
		snprintf(why, cap, "RdmaWrCompl{%u} for %u bytes%s", h->wrcompl_len, ZC_BYTES,
			 h->wrcompl_len == ZC_BYTES ? ", the WRONG BYTES written" : "");
		return -EIO;
	}
	r = pump_until(h, got_trailer, deadline_after(case_timeout_ms));
	uint64_t total, zero;

	xfer_verdict_decode(h->data_head, &total, &zero);
	if (r || total != 2ull * ZC_BYTES) {
		snprintf(why, cap, "%u bytes written; then %s", ZC_BYTES,
			 r ? "no trailer" : "the trailer counts the wrong total");
		return r ? r : -EIO;
	}
	snprintf(why, cap, "%u bytes written into our buffer, right ones, then the trailer",
		 ZC_BYTES);
	return 0;
}

enum pipe_attack {
	PIPE_HONEST,		/* a true SinkAvail: written, the right bytes */
	PIPE_BAD_RKEY,		/* SinkAvail with rkey + 1 */
	PIPE_OUTSIDE,		/* SinkAvail of bytes past the end of the registration */
	PIPE_ACROSS_END,	/* SinkAvail running across the end of the registration */
	PIPE_WITH_DATA,		/* SinkAvail with data, our half Combined */
	PIPE_EMPTY,		/* SinkAvail of 0 bytes */
	PIPE_SECOND,		/* a second SinkAvail while the first is held */
};

static const struct {
	const char *name;
	enum pipe_attack a;
} pipe_attacks[] = {
	{ "wzcopy source: honest SinkAvail", PIPE_HONEST },
	{ "wzcopy source: SinkAvail with rkey+1", PIPE_BAD_RKEY },
	{ "wzcopy source: SinkAvail outside its region", PIPE_OUTSIDE },
	{ "wzcopy source: SinkAvail across region end", PIPE_ACROSS_END },
	{ "wzcopy source: SinkAvail with data, Combined", PIPE_WITH_DATA },
	{ "wzcopy source: SinkAvail of 0 bytes", PIPE_EMPTY },
	{ "wzcopy source: second SinkAvail outstanding", PIPE_SECOND },
};

static int run_pipe_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	struct vreport vr;
	uint32_t tag = 0xA00u + (uint32_t)i;
	enum pipe_attack a = pipe_attacks[i].a;
	/* The victim's write into our advert fails. */
	bool write_fails = a == PIPE_BAD_RKEY || a == PIPE_OUTSIDE || a == PIPE_ACROSS_END;
	int r;

	why[0] = '\0';
	r = pipe_open(&h, HOSTILE_MAGIC_PIPE, tag, why, cap);
	if (r)
		goto out;
	uint32_t rkey = h.xmr->rkey, nond = h.nond_rcvd;

	switch (a) {
	case PIPE_HONEST:
		r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, 0), rkey, nond, 0);
		if (r) {
			snprintf(why, cap, "posting SinkAvail: %s", strerror(-r));
			break;
		}
		r = pipe_written(&h, tag, why, cap);
		break;
	case PIPE_BAD_RKEY:
	case PIPE_OUTSIDE:
	case PIPE_ACROSS_END:
		if (a == PIPE_BAD_RKEY)
			r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, 0), rkey + 1, nond, 0);
		else if (a == PIPE_OUTSIDE)
			r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, XMEM_SIZE + 65536), rkey,
					    nond, 0);
		else
			r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, XMEM_SIZE - 4096), rkey,
					    nond, 0);
		if (r) {
			snprintf(why, cap, "posting SinkAvail: %s", strerror(-r));
			break;
		}
		/* The victim aborts when its write fails (verbs), or our
		 * provider drops the connection when it refuses the write
		 * (tcp-fallback). */
		r = expect_down(&h, "the victim's write failed: connection down in", why, cap);
		if (!r && h.n_wrcompl) {
			snprintf(why, cap, "the victim sent RdmaWrCompl{%u} for a write that failed",
				 h.wrcompl_len);
			r = -EIO;
		}
		break;
	case PIPE_WITH_DATA:
		r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, 0), rkey, nond, 10);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	case PIPE_EMPTY:
		r = send_sink_avail(&h, 0, xmem_raddr(&h, 0), rkey, nond, 0);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	case PIPE_SECOND:
		/* Take the second send by reading it: the victim is left with
		 * nothing to send, so it holds the first SinkAvail ... */
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = send_rd_compl(&h, 4096, h.sa.len);
		if (!r)
			r = pump_until(&h, got_trailer, deadline_after(case_timeout_ms));
		if (r) {
			if (!why[0])
				snprintf(why, cap, "the second send did not complete (%s)",
					 strerror(-r));
			break;
		}
		/* ... with the right count (the trailer is one more). */
		r = send_sink_avail(&h, 65536, xmem_raddr(&h, 0), rkey, h.nond_rcvd, 0);
		if (!r)
			r = legal_first(&h, 0);
		if (r == -ECONNRESET) {
			snprintf(why, cap, "victim aborted on the first, LEGAL, SinkAvail");
			break;
		}
		if (!r)
			r = send_sink_avail(&h, 65536, xmem_raddr(&h, 65536), rkey, h.nond_rcvd, 0);
		if (!r)
			r = expect_abort(&h, why, cap);
		break;
	default:
		r = -EINVAL;
		break;
	}
	hconn_close(&h);
	if (r)
		return r;
	r = victim_word(tag, &vr, why, cap);
	if (r)
		return r;
	size_t k = strlen(why);

	if (a == PIPE_HONEST) {
		if (!(vr.flags & VR_SENT_ALL)) {
			snprintf(why + k, cap - k, " -- its sends should have returned all");
			return -EIO;
		}
		return 0;
	}
	/* An attack must never look like a connection that went well ... */
	if ((vr.flags & VR_SENT_ALL) && vr.end == 0) {
		snprintf(why + k, cap - k, " -- served as if all were well");
		return -EIO;
	}
	/* ... and a send whose bytes were never placed must not return
	 * them as sent.  On tcp-fallback a write completes once it is handed
	 * to the kernel (tcpf.c), and on iWARP once it is handed to TCP (siw
	 * completes it when TCP took it; the peer's refusal comes back later
	 * as a Terminate): there the send may have returned before the peer
	 * refused the write, and the application must learn at its next
	 * call.  On InfiniBand the write completes only when the peer acked
	 * it. */
	if (write_fails && vr.r2 == (int64_t)ZC_BYTES) {
		if (!(caps.flags & (OTI_CAP_SOFTWARE | OTI_CAP_IWARP_RULES)) || vr.end == 0) {
			snprintf(why + k, cap - k, " -- its send() RETURNED SUCCESS for bytes never "
				 "delivered");
			return -EIO;
		}
		snprintf(why + k, cap - k, " (%s: the write completed when handed to the kernel, "
			 "the error came at the next call)", T->name);
	}
	return 0;
out:
	hconn_close(&h);
	return r;
}

/* --- the victim is the source, the sink grants it no buffers ------------------ */

/*
 * The peer's SinkAvail arrives with bufs 0: the victim may use the advert
 * only once a credit comes (its RdmaWrCompl is a message).  Its blocking
 * send must sleep meanwhile -- not spin at full CPU with the socket's lock
 * held, so that not even the credit could get in -- and must still keep
 * its SO_SNDTIMEO.  The victim's own clocks say how much CPU its second
 * send used in how much time: a sleeping send uses a small part of it.
 */
enum stall_case {
	STALL_THEN_CREDITS,	/* then a credit update: the write happens */
	STALL_SNDTIMEO,		/* no credit ever: SO_SNDTIMEO ends the send */
};

static const struct {
	const char *name;
	enum stall_case a;
} stall_cases[] = {
	{ "credits: SinkAvail granting no buffers", STALL_THEN_CREDITS },
	{ "credits: none ever, SO_SNDTIMEO", STALL_SNDTIMEO },
};

/* The victim's second send slept rather than spun: *why says its CPU and
 * wall time; -EIO when it used more than a quarter of it. */
static int slept(const struct vreport *vr, char *why, size_t cap)
{
	size_t k = strlen(why);

	snprintf(why + k, cap - k, "; the send used %.1f ms of CPU in %.1f ms",
		 vr->cpu_ns / 1e6, vr->wall_ns / 1e6);
	if (vr->cpu_ns * 4 > vr->wall_ns) {
		k = strlen(why);
		snprintf(why + k, cap - k, " -- IT SPUN");
		return -EIO;
	}
	return 0;
}

static int run_stall_case(int i, char *why, size_t cap)
{
	struct hconn h;
	struct vreport vr;
	uint32_t tag = 0xB00u + (uint32_t)i;
	enum stall_case a = stall_cases[i].a;
	int r;

	why[0] = '\0';
	r = pipe_open(&h, a == STALL_SNDTIMEO ? HOSTILE_MAGIC_PIPE_TIMEO : HOSTILE_MAGIC_PIPE, tag,
		      why, cap);
	if (r)
		goto out;
	h.no_credits = true;
	r = send_sink_avail(&h, ZC_BYTES, xmem_raddr(&h, 0), h.xmr->rkey, h.nond_rcvd, 0);
	if (r) {
		snprintf(why, cap, "posting SinkAvail: %s", strerror(-r));
		goto out;
	}
	unsigned seen = h.rx_msgs;

	if (a == STALL_SNDTIMEO) {
		/* Its word comes when the send has returned. */
		r = victim_word(tag, &vr, why, cap);
		drain_cq(&h);
		if (!r && h.rx_msgs != seen) {
			snprintf(why + strlen(why), cap - strlen(why),
				 " -- it sent %u message(s) with no credit", h.rx_msgs - seen);
			r = -EIO;
		}
		if (!r && vr.r2 != -EAGAIN) {
			snprintf(why + strlen(why), cap - strlen(why),
				 " -- its second send should have timed out (EAGAIN)");
			r = -EIO;
		}
		if (!r)
			r = slept(&vr, why, cap);
		goto out;
	}
	/* A while without credits: nothing may come, the connection stays. */
	r = pump_until(&h, never, deadline_after(500));
	if (r != -ETIMEDOUT) {
		snprintf(why, cap, "the connection dropped while we granted no buffers");
		r = r ? r : -EPROTO;
		goto out;
	}
	if (h.rx_msgs != seen) {
		snprintf(why, cap, "the victim sent %u message(s) with no credit", h.rx_msgs - seen);
		r = -EIO;
		goto out;
	}
	h.no_credits = false;
	r = send_msg(&h, SDP_MID_DATA, 0, NULL, 0, NULL, 0);	/* a credit update */
	if (r) {
		snprintf(why, cap, "posting the credit update: %s", strerror(-r));
		goto out;
	}
	r = pipe_written(&h, tag, why, cap);
	hconn_close(&h);
	if (!r)
		r = victim_word(tag, &vr, why, cap);
	if (!r && !(vr.flags & VR_SENT_ALL)) {
		snprintf(why + strlen(why), cap - strlen(why), " -- its sends should have returned all");
		r = -EIO;
	}
	if (!r)
		r = slept(&vr, why, cap);
	return r;
out:
	hconn_close(&h);
	return r;
}

/* --- an honest peer with small receive buffers ----------------------------- */

/*
 * A Hello may advertise receive buffers as small as a BSDH and one byte,
 * and such a peer is honest: the victim must never send it a message
 * longer than that (on a real transport the receive would fail and the
 * connection drop).  The attacker's buffers are in fact large, so that it
 * sees any message that would not have fitted.  As the sink of a send
 * above the zero-copy threshold it takes what the victim sends -- Data of
 * a few bytes, or a SrcAvail with as many inline bytes as fit -- reads any
 * offer, grants credits as a receiver does, and checks the stream.  As the
 * source it offers a SrcAvail, which the victim must decline with SendSM
 * when its RdmaRdCompl would not fit, and asks ChRcvBuf, which it must
 * then leave unanswered; with the attacker's half Pipelined, the victim's
 * recv() must not advertise a SinkAvail that would not fit.
 */
enum small_case {
	SMALL_SINK,		/* the victim sends to us */
	SMALL_SOURCE,		/* our SrcAvail and ChRcvBuf */
	SMALL_ADVERT,		/* the victim's recv(), our half Pipelined */
};

static const struct {
	const char *name;
	enum small_case a;
	uint32_t rcvsz;
} small_cases[] = {
	{ "small buffers: 17 bytes, victim sends", SMALL_SINK, 17 },
	{ "small buffers: 20 bytes, victim sends", SMALL_SINK, 20 },
	{ "small buffers: 32 bytes, victim sends", SMALL_SINK, 32 },
	{ "small buffers: 40 bytes, victim sends", SMALL_SINK, 40 },
	{ "small buffers: 64 bytes, victim sends", SMALL_SINK, 64 },
	{ "small buffers: 17 bytes, SrcAvail to it", SMALL_SOURCE, 17 },
	{ "small buffers: 35 bytes, its recv()", SMALL_ADVERT, 35 },
};

/* Above the lowest zero-copy threshold (HOSTILE_MAGIC_SEND_LOWZ), odd. */
#define SMALL_BYTES ((16u << 10) + 5)

/* Messages we may still send the victim (credits, as it counts them). */
static uint32_t hconn_credits(const struct hconn *h)
{
	uint32_t in_flight = (h->next_mseq - 1) - h->peer_ack;

	return in_flight >= h->peer_bufs ? 0 : h->peer_bufs - in_flight;
}

/* The longest message so far fits rcvsz: 0, or -EIO with why said. */
static int small_fits(const struct hconn *h, uint32_t rcvsz, char *why, size_t cap)
{
	if (h->rx_max_len <= rcvsz)
		return 0;
	snprintf(why, cap, "the victim sent a %u-byte message into our %u-byte buffers",
		 h->rx_max_len, rcvsz);
	return -EIO;
}

/*
 * The sink's part: take the victim's SMALL_BYTES and its verdict, reading
 * its offers, acknowledging what came, until all is there.  0, or -errno
 * with why said.
 */
static int small_sink(struct hconn *h, uint32_t rcvsz, char *why, size_t cap)
{
	struct stream_check *sc = h->sc;
	unsigned acked = h->rx_msgs, offers = 0, reads = 0;
	uint64_t progress = 0, deadline = deadline_after(case_timeout_ms);
	struct oti_event ev;
	int r;

	while (sc->got < sc->want || sc->vgot < XFER_VERDICT_LEN) {
		while (T->get_event(h->ep, &ev) == 0)
			note_event(h, &ev);
		drain_cq(h);
		if ((r = small_fits(h, rcvsz, why, cap)))
			return r;
		if (sc->bad) {
			snprintf(why, cap, "wrong stream bytes near offset %" PRIu64, sc->got);
			return -EIO;
		}
		if (h->disconnected) {
			snprintf(why, cap, "the connection dropped after %" PRIu64 " bytes", sc->got);
			return -ECONNRESET;
		}
		if (h->n_srcavail > offers) {
			/* Read the rest of the offer, then say so. */
			uint32_t len = h->sa.len - h->sa_inline;
			char how[160];
			uint8_t ext[SDP_U32H_LEN];

			offers = h->n_srcavail;
			r = zc_read(h, h->sa.vaddr + h->sa_inline, h->sa.rkey, len, how, sizeof(how));
			if (r) {
				snprintf(why, cap, "reading the victim's SrcAvail: %s",
					 r > 0 ? how : strerror(-r));
				return -EIO;
			}
			sc_take(sc, send_area(h) + RD_AREA_OFF, len);
			sdp_u32h_encode(ext, len);
			r = send_msg(h, SDP_MID_RDMA_RD_COMPL, 0, ext, sizeof(ext), NULL, 0);
			if (r) {
				snprintf(why, cap, "posting RdmaRdCompl: %s", strerror(-r));
				return r;
			}
			reads++;
			continue;
		}
		/* A receiver's credit update, while we may send one. */
		if (h->rx_msgs != acked && hconn_credits(h) > 1) {
			r = send_msg(h, SDP_MID_DATA, 0, NULL, 0, NULL, 0);
			if (r) {
				snprintf(why, cap, "posting a credit update: %s", strerror(-r));
				return r;
			}
			acked = h->rx_msgs;
		}
		if (sc->got + sc->vgot != progress) {
			progress = sc->got + sc->vgot;
			deadline = deadline_after(case_timeout_ms);
		}
		r = ep_wait(h, deadline);
		if (r) {
			snprintf(why, cap, "%" PRIu64 " of %" PRIu64 " bytes, then nothing for %u ms",
				 sc->got, sc->want, case_timeout_ms);
			return r;
		}
	}
	uint64_t total, zero;

	xfer_verdict_decode(sc->verdict, &total, &zero);
	if (total != sc->want) {
		snprintf(why, cap, "the victim's send returned %" PRIu64 " of %" PRIu64, total,
			 sc->want);
		return -EIO;
	}
	snprintf(why, cap, "%" PRIu64 " bytes in %u messages of at most %u bytes, %u SrcAvail(s)",
		 sc->want, h->rx_msgs, h->rx_max_len, reads);
	return 0;
}

static bool got_send_sm_or_pong(const struct hconn *h)
{
	return h->n_send_sm > 0 || h->n_pong > 0 || h->n_wrcompl > 0;
}

static bool got_sink_avail_or_trailer(const struct hconn *h)
{
	return h->n_sinkavail > 0 || got_trailer(h);
}

static int run_small_case(int i, char *why, size_t cap)
{
	struct hconn h;
	struct stream_check sc = { .want = SMALL_BYTES };
	uint32_t rcvsz = small_cases[i].rcvsz;
	/* SMALL_SINK is a well-behaved connection: the victim judges it. */
	uint32_t seed = 0x00C00000u + (uint32_t)i, tag = 0xC00u + (uint32_t)i;
	char how[200] = "";
	int r;

	why[0] = '\0';
	hello_rcvsz = rcvsz;
	r = hconn_open(&h, HELLO_OK, why, cap);
	hello_rcvsz = RECV_SIZE;
	if (r)
		goto out;
	switch (small_cases[i].a) {
	case SMALL_SINK: {
		uint8_t *p = send_area(&h);
		struct xfer_hdr hdr = { .magic = HOSTILE_MAGIC_SEND_LOWZ, .seed = seed,
					.bytes = SMALL_BYTES };

		xgen_init(&sc.g, seed);
		h.sc = &sc;
		put_bsdh(&h, p, SDP_MID_DATA, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
		xfer_hdr_encode(p + SDP_BSDH_LEN, &hdr);
		r = hconn_send_raw(&h, 0, SDP_BSDH_LEN + XFER_HDR_LEN);
		if (r) {
			snprintf(why, cap, "posting the request: %s", strerror(-r));
			break;
		}
		r = small_sink(&h, rcvsz, why, cap);
		if (r)
			break;
		/* Our DisConn ends its wait for the end; then its own. */
		r = send_msg(&h, SDP_MID_DISCONN, 0, NULL, 0, NULL, 0);
		if (!r)
			r = pump_until(&h, never, deadline_after(200));
		r = r == -ETIMEDOUT || r == -ECONNRESET ? small_fits(&h, rcvsz, how, sizeof(how)) : r;
		if (r)
			snprintf(why, cap, "at the end: %s", how[0] ? how : strerror(-r));
		break;
	}
	case SMALL_SOURCE: {
		uint8_t ext[SDP_U32H_LEN];
		long len;

		r = send_valid_header(&h, tag);
		sdp_u32h_encode(ext, RECV_SIZE);
		if (!r)
			r = send_msg(&h, SDP_MID_CH_RCV_BUF, 0, ext, sizeof(ext), NULL, 0);
		if (r) {
			snprintf(why, cap, "posting the header and ChRcvBuf: %s", strerror(-r));
			break;
		}
		len = src_avail_at(&h, send_area(&h) + 4096, 16);
		r = len < 0 ? (int)len : hconn_send_raw(&h, 4096, (size_t)len);
		if (r) {
			snprintf(why, cap, "posting SrcAvail: %s", strerror(-r));
			break;
		}
		r = pump_until(&h, got_send_sm_or_pong, deadline_after(case_timeout_ms));
		if (!r)
			r = pump_until(&h, never, deadline_after(200));
		if (r != -ETIMEDOUT) {
			snprintf(why, cap, "no SendSM for a SrcAvail it cannot answer otherwise (%s)",
				 r ? strerror(-r) : "?");
			r = r ? r : -EPROTO;
			break;
		}
		r = small_fits(&h, rcvsz, why, cap);
		if (!r && (h.n_pong || !h.n_send_sm)) {
			snprintf(why, cap, "%u ChRcvBufAck(s) and %u SendSM(s): expected none and one",
				 h.n_pong, h.n_send_sm);
			r = -EIO;
		}
		if (!r)
			snprintf(why, cap, "declined with SendSM, ChRcvBuf unanswered, messages of at "
				 "most %u bytes", h.rx_max_len);
		break;
	}
	case SMALL_ADVERT: {
		uint8_t data[WZ_DATA];
		struct xgen g;

		r = send_mode_change(&h, 0, SDP_MODE_PIPELINED);
		if (!r)
			r = send_request(&h, HOSTILE_MAGIC_RECV, tag, WZ_DATA);
		if (r) {
			snprintf(why, cap, "posting ModeChange and the request: %s", strerror(-r));
			break;
		}
		/* Time for its recv() to advertise, if it would. */
		r = pump_until(&h, got_sink_avail_or_trailer, deadline_after(300));
		if (r != -ETIMEDOUT) {
			snprintf(why, cap, "%s", r ? "the connection dropped"
					  : h.n_sinkavail ? "the victim advertised a SinkAvail"
							  : "a verdict before any data");
			if (!r && small_fits(&h, rcvsz, why, cap) == 0)
				r = -EPROTO;
			break;
		}
		xgen_init(&g, HOSTILE_SEED_TAG | tag);
		xgen_fill(&g, data, sizeof(data));
		r = send_msg(&h, SDP_MID_DATA, 0, NULL, 0, data, sizeof(data));
		if (!r)
			r = wz_verdict(&h, WZ_DATA, why, cap);
		if (!r)
			r = small_fits(&h, rcvsz, why, cap);
		if (!r && h.n_sinkavail) {
			snprintf(why, cap, "the victim advertised a SinkAvail");
			r = -EIO;
		}
		if (!r)
			snprintf(why, cap, "no SinkAvail, %u bytes by Data, the verdict in messages of "
				 "at most %u bytes", WZ_DATA, h.rx_max_len);
		break;
	}
	}
out:
	h.sc = NULL;
	hconn_close(&h);
	return r;
}

/* --- the well-behaved connections ----------------------------------------- */

/*
 * One sdpcat-protocol transfer of `bytes` over the public API.  While
 * *pace is set it sends one chunk every few milliseconds, so the stream
 * spans the attacks instead of finishing before them; then it sends the
 * rest at full speed.  *sent follows the progress.
 */
struct good_xfer {
	uint32_t seed;
	uint64_t bytes;
	atomic_int pace;
	atomic_uint_fast64_t sent;
	int ok;
	char result[200];
	pthread_t thread;
};

/*
 * Connect a well-behaved connection to the victim (with check_transport,
 * it must go over the transport under test) and send its header: magic,
 * gx's seed and bytes.  The socket, or -1 with gx->result said (a buffer
 * of the caller's that could not be had, buf NULL, fails as the connect;
 * a header that could not be sent is `hdr_what`).
 */
static int good_open(struct good_xfer *gx, uint32_t magic, bool check_transport, const void *buf,
		     const char *hdr_what)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)victim_port) };
	uint8_t hb[XFER_HDR_LEN];
	int sd = xfer_dial(&xsock_sdp, (struct sockaddr *)&sin, sizeof(sin), -1, NULL);
	ssize_t n;

	if (sd < 0 || !buf) {
		snprintf(gx->result, sizeof(gx->result), "connect: %s",
			 strerror(sd < 0 ? -sd : 0));
		goto fail;
	}
	if (check_transport) {
		const char *tn = sdp_transport_name(sd);

		if (!tn || strcmp(tn, transport_name)) {
			snprintf(gx->result, sizeof(gx->result), "connected over %s, not over %s",
				 tn ? tn : "no transport", transport_name);
			goto fail;
		}
	}
	struct xfer_hdr h = { .magic = magic, .seed = gx->seed, .bytes = gx->bytes };

	xfer_hdr_encode(hb, &h);
	n = xfer_send_all(&xsock_sdp, sd, hb, sizeof(hb), -1);
	if (n < 0) {
		snprintf(gx->result, sizeof(gx->result), "%s: %s", hdr_what, strerror((int)-n));
		goto fail;
	}
	return sd;
fail:
	if (sd >= 0)
		sdp_close(sd);
	return -1;
}

/*
 * The end of a zero-copy transfer whose gx->bytes arrived intact: `moved`
 * of them went by RDMA (`how`, "RDMA-read" or "RDMA-written", then
 * `where`); none is a failure, because `missing`.
 */
static void good_moved(struct good_xfer *gx, uint64_t moved, const char *how, const char *where,
		       const char *missing)
{
	if (!moved) {
		snprintf(gx->result, sizeof(gx->result), "%" PRIu64 " bytes ok, but none %s: %s",
			 gx->bytes, how, missing);
		return;
	}
	snprintf(gx->result, sizeof(gx->result), "%" PRIu64 " bytes ok, %" PRIu64 " of them %s%s",
		 gx->bytes, moved, how, where);
	gx->ok = 1;
}

static void *good_main(void *arg)
{
	struct good_xfer *gx = arg;
	uint8_t verdict[XFER_VERDICT_LEN + 1];
	uint8_t *buf = malloc(65536);
	struct xgen g;
	struct xhash hash;
	uint64_t rng = gx->seed;
	int sd, r;
	ssize_t n;

	xgen_init(&g, gx->seed);
	xhash_init(&hash);
	sd = good_open(gx, XFER_MAGIC_ONEWAY, true, buf, "send header");
	if (sd < 0)
		goto out;
	uint64_t sent = 0;

	while (sent < gx->bytes) {
		size_t len = xrand_range(&rng, 1, 65536);

		if (len > gx->bytes - sent)
			len = (size_t)(gx->bytes - sent);
		xgen_fill(&g, buf, len);
		xhash_update(&hash, buf, len);
		n = xfer_send_all(&xsock_sdp, sd, buf, len, -1);
		if (n < 0) {
			snprintf(gx->result, sizeof(gx->result), "send: %s after %" PRIu64 " bytes",
				 strerror((int)-n), sent);
			goto out;
		}
		sent += len;
		atomic_store(&gx->sent, sent);
		if (atomic_load(&gx->pace)) {
			struct pollfd none;

			poll(&none, 0, 3);
		}
	}
	r = sdp_shutdown(sd, SHUT_WR);
	if (r) {
		snprintf(gx->result, sizeof(gx->result), "shutdown: %s", strerror(-r));
		goto out;
	}
	n = xfer_recv_all(&xsock_sdp, sd, verdict, sizeof(verdict), -1);
	if (n != XFER_VERDICT_LEN) {
		snprintf(gx->result, sizeof(gx->result), "verdict: %s",
			 n < 0 ? strerror((int)-n) : n < XFER_VERDICT_LEN ? "EOF" : "extra data");
		goto out;
	}
	uint64_t vb, vh;

	xfer_verdict_decode(verdict, &vb, &vh);
	if (vb != gx->bytes || vh != xhash_digest(&hash)) {
		snprintf(gx->result, sizeof(gx->result),
			 "victim received %" PRIu64 " of %" PRIu64 " bytes, checksum %s", vb,
			 gx->bytes, vh == xhash_digest(&hash) ? "ok" : "MISMATCH");
		goto out;
	}
	snprintf(gx->result, sizeof(gx->result), "%" PRIu64 " bytes, checksum ok", gx->bytes);
	gx->ok = 1;
out:
	free(buf);
	if (sd >= 0)
		sdp_close(sd);
	return NULL;
}

/*
 * A well-behaved sink of the victim's zero-copy send (public API): asks for
 * `bytes`, checks them and the trailer.  This process's engine must have
 * RDMA-read them (zcopy_bytes_received moved), so the victim still offers
 * zero copy after the attacks.
 */
static void *good_zc_main(void *arg)
{
	struct good_xfer *gx = arg;
	uint8_t tr[XFER_VERDICT_LEN + 1];
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	struct xgen g;
	struct sdp_stats st0, st1;
	int sd;
	ssize_t n;

	sdp_get_stats(&st0);
	xgen_init(&g, gx->seed);
	sd = good_open(gx, HOSTILE_MAGIC_SEND, false, buf, "send header");
	if (sd < 0)
		goto out;
	uint64_t got = 0;

	while (got < gx->bytes) {
		size_t want = gx->bytes - got < cap ? (size_t)(gx->bytes - got) : cap;

		n = sdp_recv(sd, buf, want, 0);
		if (n <= 0) {
			snprintf(gx->result, sizeof(gx->result), "recv after %" PRIu64 " bytes: %s",
				 got, n ? strerror((int)-n) : "EOF");
			goto out;
		}
		if (xgen_check(&g, buf, (size_t)n) != (size_t)n) {
			snprintf(gx->result, sizeof(gx->result), "DATA MISMATCH near offset %" PRIu64,
				 got);
			goto out;
		}
		got += (uint64_t)n;
	}
	n = xfer_recv_all(&xsock_sdp, sd, tr, sizeof(tr), -1);
	uint64_t vb, vh;

	xfer_verdict_decode(tr, &vb, &vh);
	if (n != XFER_VERDICT_LEN || vb != gx->bytes) {
		snprintf(gx->result, sizeof(gx->result), "trailer: %s",
			 n < 0 ? strerror((int)-n) : n != XFER_VERDICT_LEN ? "short or extra" :
			 "victim's send came short");
		goto out;
	}
	sdp_shutdown(sd, SHUT_WR);
	sdp_get_stats(&st1);
	good_moved(gx, st1.zcopy_bytes_received - st0.zcopy_bytes_received, "RDMA-read", "",
		   "the victim did not offer them");
out:
	free(buf);
	if (sd >= 0)
		sdp_close(sd);
	return NULL;
}

/*
 * A well-behaved source into the victim's recv() (HOSTILE_MAGIC_RECV,
 * public API): large blocking sends with a pause between them, so that the
 * victim's next recv() has advertised its buffer by the time the next
 * send starts.  This process's engine must have RDMA-written some of them
 * (zcopy_bytes_written moved): the victim still advertises after the
 * attacks, and its checks pass for an honest peer.
 */
static void *good_wz_main(void *arg)
{
	struct good_xfer *gx = arg;
	uint8_t verdict[XFER_VERDICT_LEN + 1];
	size_t piece = 256u << 10;
	uint8_t *buf = malloc(piece);
	struct xgen g;
	struct sdp_stats st0, st1;
	int sd;
	ssize_t n = 0;

	sdp_get_stats(&st0);
	xgen_init(&g, gx->seed);
	sd = good_open(gx, HOSTILE_MAGIC_RECV, false, buf, "send");
	if (sd < 0)
		goto out;
	for (uint64_t sent = 0; n >= 0 && sent < gx->bytes; sent += piece) {
		if (piece > gx->bytes - sent)
			piece = (size_t)(gx->bytes - sent);
		xgen_fill(&g, buf, piece);
		n = xfer_send_all(&xsock_sdp, sd, buf, piece, -1);
		poll(NULL, 0, 10);
	}
	if (n < 0) {
		snprintf(gx->result, sizeof(gx->result), "send: %s", strerror((int)-n));
		goto out;
	}
	n = xfer_recv_all(&xsock_sdp, sd, verdict, sizeof(verdict), -1);
	uint64_t vb, flags;

	xfer_verdict_decode(verdict, &vb, &flags);
	if (n != XFER_VERDICT_LEN || vb != gx->bytes || flags) {
		snprintf(gx->result, sizeof(gx->result), "verdict: %s",
			 n < 0 ? strerror((int)-n) : n != XFER_VERDICT_LEN ? "short or extra"
									  : "the victim received wrong");
		goto out;
	}
	sdp_shutdown(sd, SHUT_WR);
	sdp_get_stats(&st1);
	good_moved(gx, st1.zcopy_bytes_written - st0.zcopy_bytes_written, "RDMA-written",
		   " into its recv() buffer", "the victim did not advertise");
out:
	free(buf);
	if (sd >= 0)
		sdp_close(sd);
	return NULL;
}

/* ======================================================================= */

/* The cases run, failed and skipped, for the last line. */
static int ran, skipped, failures;

/*
 * A case that needs zero copy of the victim cannot run on a transport
 * without RDMA read (the victim never offers a SrcAvail) or RDMA write (it
 * never advertises a SinkAvail, nor writes into one): shm has neither, by
 * design (doc/shm.md).  Says so and counts the case skipped; need: the
 * OTI_CAP_RDMA_* flags it needs.
 */
static bool runs_here(const char *name, uint32_t need)
{
	if ((caps.flags & need) == need)
		return true;
	say("skip %-40s %s has no RDMA %s: the victim never uses that zero copy on it", name,
	    T->name, (need & ~caps.flags & OTI_CAP_RDMA_READ) ? "read" : "write");
	skipped++;
	return false;
}

/* One case of a table, unless --only leaves it out or the transport cannot
 * run it: run it, check that the victim survived it, say the verdict. */
static void run_case(const char *name, int (*run)(int, char *, size_t), size_t i, const char *only,
		     uint32_t need)
{
	char why[512] = "";

	if (only && !strstr(name, only))
		return;
	if (!runs_here(name, need))
		return;
	ran++;
	int r = run((int)i, why, sizeof(why));

	if (r == 0 && !victim_alive(why, sizeof(why)))
		r = -1;
	say("%s %-40s %s", r ? "FAIL" : "ok  ", name, why);
	if (r)
		failures++;
}

/* A well-behaved connection after the attacks, in a thread of its own
 * (body: good_main() or the like); its verdict, named `name`. */
static void run_good_after(void *(*body)(void *), uint32_t seed, uint64_t bytes, const char *name,
			   uint32_t need)
{
	struct good_xfer gx = { .seed = seed, .bytes = bytes };

	if (!runs_here(name, need))
		return;
	pthread_create(&gx.thread, NULL, body, &gx);
	pthread_join(gx.thread, NULL);
	say("%s %-40s %s", gx.ok ? "ok  " : "FAIL", name, gx.result);
	if (!gx.ok)
		failures++;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: hostile_peer [--bytes N] [--case-timeout MS] [--only SUBSTRING]\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "bytes", required_argument, NULL, 'b' },
		{ "case-timeout", required_argument, NULL, 't' },
		{ "only", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t good_bytes = 64u << 20;
	const char *only = NULL;
	int c, ctl[2], portp[2], repp[2];
	char *end;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (xfer_parse_size(optarg, &good_bytes)) {
				usage(stderr);
				return 2;
			}
			break;
		case 't':
			case_timeout_ms = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !case_timeout_ms) {
				usage(stderr);
				return 2;
			}
			break;
		case 'o':
			only = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);

	const char *env = getenv("TEST_HOST");

	if (env && *env)
		snprintf(host_str, sizeof(host_str), "%s", env);
	if (inet_pton(AF_INET, host_str, &host_addr) != 1) {
		say("FAIL: TEST_HOST '%s' is not an IPv4 address", host_str);
		return 1;
	}
	env = getenv("TEST_TRANSPORT");
	if (env && *env) {
		snprintf(transport_name, sizeof(transport_name), "%s", env);
	} else if ((env = getenv("SDP_TRANSPORTS")) && *env) {
		snprintf(transport_name, sizeof(transport_name), "%s", env);
		transport_name[strcspn(transport_name, ", \t")] = '\0';
	}
	/* Fork before either side starts the engine's threads. */
	if (pipe(ctl) || pipe(portp) || pipe(repp)) {
		perror("pipe");
		return 1;
	}
	fflush(stdout);
	victim_pid = fork();
	if (victim_pid < 0) {
		perror("fork");
		return 1;
	}
	if (victim_pid == 0) {
		close(ctl[1]);
		close(portp[0]);
		close(repp[0]);
		report_fd = repp[1];
		_exit(victim_main(ctl[0], portp[1]));
	}
	close(ctl[0]);
	close(portp[1]);
	close(repp[1]);
	report_rd = repp[0];
	fcntl(report_rd, F_SETFL, O_NONBLOCK);
	if (read(portp[0], &victim_port, sizeof(victim_port)) != (ssize_t)sizeof(victim_port)) {
		say("FAIL: the victim did not start");
		return 1;
	}
	close(portp[0]);
	say("victim: pid %d, SDP port %d", (int)victim_pid, victim_port);

	if (sdp_init() <= 0 || oti_init() <= 0) {
		say("FAIL: no usable transport");
		kill(victim_pid, SIGKILL);
		return 1;
	}
	/* The attacker's transport must be the one the engine would pick for
	 * this address (so it is up, enabled and serves it): the victim's. */
	struct sockaddr_in victim_sin = { .sin_family = AF_INET, .sin_addr = host_addr,
					  .sin_port = htons((uint16_t)victim_port) };

	T = oti_find(transport_name);
	if (!T || oti_select(NULL, (struct sockaddr *)&victim_sin) != T) {
		say("FAIL: transport %s %s", transport_name,
		    !T ? "is not built in" : "is not up here, or does not serve this address");
		kill(victim_pid, SIGKILL);
		return 1;
	}
	say("attacker: transport %s, victim at %s:%d", T->name, host_str, victim_port);
	T->query_caps(&caps);

	struct good_xfer gx = { .seed = 4242, .bytes = good_bytes };

	atomic_store(&gx.pace, 1);
	if (pthread_create(&gx.thread, NULL, good_main, &gx)) {
		say("FAIL: pthread_create");
		kill(victim_pid, SIGKILL);
		return 1;
	}
	/* The good stream is under way before the first attack. */
	for (int i = 0; i < 500 && atomic_load(&gx.sent) == 0; i++)
		poll(NULL, 0, 10);
	uint64_t good_before = atomic_load(&gx.sent);

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
	/* Each table runs while the victim lives. */
	const uint32_t rdma_both = OTI_CAP_RDMA_READ | OTI_CAP_RDMA_WRITE;

	for (size_t i = 0; victim_pid && i < N_OF(hello_attacks); i++)
		run_case(hello_attacks[i].name, run_hello_attack, i, only, 0);
	for (size_t i = 0; victim_pid && i < N_OF(attacks); i++)
		run_case(attacks[i].name, run_attack, i, only, 0);
	for (size_t i = 0; victim_pid && i < N_OF(zc_attacks); i++)
		run_case(zc_attacks[i].name, run_zc_attack, i, only,
			 /* a victim that only receives needs no zero copy */
			 zc_attacks[i].a == ZC_COMPL_NEVER_OFFERED ? 0 : OTI_CAP_RDMA_READ);
	for (size_t i = 0; victim_pid && i < N_OF(wz_attacks); i++)
		run_case(wz_attacks[i].name, run_wz_attack, i, only, OTI_CAP_RDMA_WRITE);
	for (size_t i = 0; victim_pid && i < N_OF(pipe_attacks); i++)
		run_case(pipe_attacks[i].name, run_pipe_attack, i, only, rdma_both);
	for (size_t i = 0; victim_pid && i < N_OF(stall_cases); i++)
		run_case(stall_cases[i].name, run_stall_case, i, only, rdma_both);
	for (size_t i = 0; victim_pid && i < N_OF(small_cases); i++)
		run_case(small_cases[i].name, run_small_case, i, only, 0);
#undef N_OF
	uint64_t good_after = atomic_load(&gx.sent);

	/* The good connection: it must have moved during the attacks and
	 * must finish with a matching verdict. */
	atomic_store(&gx.pace, 0);
	if (victim_pid) {
		pthread_join(gx.thread, NULL);
		say("%s %-40s %s; %.1f MiB of it sent during the attacks", gx.ok ? "ok  " : "FAIL",
		    "concurrent well-behaved connection", gx.result,
		    (good_after - good_before) / 1048576.0);
		if (!gx.ok)
			failures++;
		if (gx.ok && good_after == good_before && good_before < gx.bytes) {
			say("FAIL the well-behaved connection made no progress during the attacks");
			failures++;
		}
	}
	/* And new connections after everything. */
	if (victim_pid)
		run_good_after(good_main, 777, 1u << 20, "new connection after the attacks", 0);
	if (victim_pid)
		run_good_after(good_zc_main, 779, (4u << 20) + 5,
			       "zero-copy send from the victim after", OTI_CAP_RDMA_READ);
	if (victim_pid)
		run_good_after(good_wz_main, 781, (4u << 20) + 7, "Write Zcopy into the victim after",
			       OTI_CAP_RDMA_WRITE);

	/* The victim reports and exits once the control pipe closes. */
	close(ctl[1]);
	if (victim_pid) {
		int status;
		uint64_t deadline = deadline_after(30000);

		while (waitpid(victim_pid, &status, WNOHANG) == 0) {
			if (xfer_now_ns() > deadline) {
				say("FAIL the victim did not finish within 30 s after the run");
				kill(victim_pid, SIGKILL);
				waitpid(victim_pid, &status, 0);
				failures++;
				break;
			}
			poll(NULL, 0, 20);
		}
		if (WIFSIGNALED(status)) {
			say("FAIL the victim died of signal %d", WTERMSIG(status));
			failures++;
		} else if (WEXITSTATUS(status)) {
			say("FAIL the victim served a connection wrongly (exit %d)",
			    WEXITSTATUS(status));
			failures++;
		}
	} else {
		say("FAIL the victim process died during the attacks");
		failures++;
		pthread_cancel(gx.thread);
	}
	say("hostile_peer: %d case(s), %d failure(s), %d skipped: %s", ran, failures, skipped,
	    failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
