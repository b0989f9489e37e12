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
 * Meanwhile a well-behaved SDP connection (public API, in a thread of the
 * attacker) streams seeded data into the same victim process for the whole
 * run; at the end its verdict must match, and fresh connections made after
 * all the attacks must work too, one of them receiving a zero-copy send from
 * the victim.  The victim finally reports how each of its connections ended
 * and its engine counters.
 *
 * Exit 0 pass, 1 fail.
 */

#include "sdp.h"
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
#include <stdarg.h>
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
/* Where the attacker's RDMA reads land in its send area. */
#define RD_AREA_OFF (1u << 20)
#define RD_AREA_LEN (3u << 20)
#define NRECV 16
#define RECV_SIZE 65552u
#define SEND_AREA (4u << 20)
/* aligned_alloc() wants a multiple of the alignment. */
#define MEM_SIZE ((NRECV * RECV_SIZE + SEND_AREA + 4095u) & ~4095u)

static unsigned case_timeout_ms = 10000;

/* TEST_HOST, the address of the victim (and of the attacker). */
static struct in_addr host_addr;
static char host_str[INET_ADDRSTRLEN] = "127.0.0.1";
/* The transport under test: the attacker's, and the good connections'. */
static char transport_name[64] = "tcp-fallback";

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	printf("%s\n", line);
	fflush(stdout);
}

/* ======================================================================= */
/* the victim (child process, public API only)                              */
/* ======================================================================= */

struct vconn {
	int sd;
	pthread_t thread;
	char peer[80];
	int kind;		/* 0 no header, 1 good client, 2 attacker */
	int ok;
	char result[160];
	struct vconn *next;
};

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
	if (h.magic == HOSTILE_MAGIC_SEND) {
		victim_send(v, &h);
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
	socklen_t len = sizeof(sin);
	struct vconn *conns = NULL;
	int ls, r, bad = 0, good = 0, hostile = 0, headerless = 0;

	if (sdp_init() <= 0) {
		say("victim: sdp_init: no transport");
		return 1;
	}
	ls = sdp_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	r = ls < 0 ? ls : sdp_bind(ls, (struct sockaddr *)&sin, sizeof(sin));
	if (!r)
		r = sdp_listen(ls, 64);
	if (!r)
		r = sdp_getsockname(ls, (struct sockaddr *)&sin, &len);
	if (r) {
		say("victim: listener: %s", strerror(-r));
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
	    "peers, %" PRIu64 " refused, %" PRIu64 " reads, %" PRIu64 " bytes read",
	    good, hostile, headerless, st.protocol_errors, st.resets, st.connections_passive,
	    st.zcopy_offers, st.zcopy_bytes_sent, st.zcopy_refused, st.zcopy_reads,
	    st.zcopy_bytes_received);
	return bad ? 1 : 0;
}

/* ======================================================================= */
/* the attacker: raw transport + codec                                      */
/* ======================================================================= */

static const struct oti_ops *T;
static struct oti_caps caps;
static int victim_port;
static pid_t victim_pid;

struct hconn {
	struct oti_ep *ep;
	struct oti_mr *mr;
	uint8_t *mem;		/* NRECV receive buffers, then the send area */
	struct sdp_hello_ack ack;
	bool established, disconnected, rejected, unreachable;
	int event_status;
	uint32_t next_mseq;
	uint32_t last_rx_mseq;
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
	/* The attacker's RDMA reads: one at a time. */
	uint64_t rd_ctx;
	bool rd_done;
	int rd_status;
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
			if (wc[i].op == OTI_WC_RDMA_READ && wc[i].ctx == h->rd_ctx) {
				h->rd_done = true;
				h->rd_status = wc[i].status;
				continue;
			}
			if (wc[i].op != OTI_WC_RECV || wc[i].status)
				continue;
			uint8_t *buf = h->mem + wc[i].ctx * RECV_SIZE;
			struct sdp_bsdh b;

			h->rx_msgs++;
			if (sdp_bsdh_decode(buf, wc[i].len, &b) == 0) {
				h->last_rx_mseq = b.mseq;
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
		if (T->ep_arm(h->ep) == -EAGAIN)
			continue;
		uint64_t now = xfer_now_ns();

		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pf = { .fd = T->ep_fd(h->ep), .events = POLLIN };
		int ms = (int)((deadline - now) / 1000000ull) + 1;

		if (poll(&pf, 1, ms > 200 ? 200 : ms) < 0 && errno != EINTR)
			return -errno;
	}
}

static void hconn_close(struct hconn *h)
{
	/* oti.h: the ep first, then its registrations. */
	if (h->ep)
		T->ep_close(h->ep);
	if (h->mr)
		T->mr_dereg(h->mr);
	free(h->mem);
	memset(h, 0, sizeof(*h));
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
		.desremrcvsz = RECV_SIZE,
		.localrcvsz = RECV_SIZE,
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
		.bufs = NRECV,
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

static int run_attack(int i, char *why, size_t cap)
{
	struct hconn h;
	struct oti_event ev;
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
		snprintf(why, cap, "building the message: %s", strerror((int)-len));
		r = (int)len;
		goto out;
	}
	r = hconn_send_raw(&h, 4096, (size_t)len);
	if (r) {
		snprintf(why, cap, "post_send: %s", strerror(-r));
		goto out;
	}
	uint64_t t0 = xfer_now_ns(), deadline = deadline_after(case_timeout_ms);

	while (!h.disconnected) {
		r = wait_event(&h, &ev, deadline);
		if (r == -ETIMEDOUT) {
			snprintf(why, cap, "victim did not abort the connection within %u ms",
				 case_timeout_ms);
			goto out;
		}
		if (r) {
			snprintf(why, cap, "waiting for the abort: %s", strerror(-r));
			goto out;
		}
	}
	snprintf(why, cap, "aborted by the victim in %.1f ms%s",
		 (xfer_now_ns() - t0) / 1e6, h.saw_abort ? " (AbortConn received)" : "");
	r = 0;
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

	for (;;) {
		while (T->get_event(h->ep, &ev) == 0)
			note_event(h, &ev);
		drain_cq(h);
		if (pred(h))
			return 0;
		if (h->disconnected)
			return -ECONNRESET;
		if (T->ep_arm(h->ep) == -EAGAIN)
			continue;
		uint64_t now = xfer_now_ns();

		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pf = { .fd = T->ep_fd(h->ep), .events = POLLIN };
		int ms = (int)((deadline - now) / 1000000ull) + 1;

		if (poll(&pf, 1, ms > 200 ? 200 : ms) < 0 && errno != EINTR)
			return -errno;
	}
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

/* The attack's header: the victim is to send `bytes`. */
static int send_send_request(struct hconn *h, uint32_t tag, uint64_t bytes)
{
	uint8_t *p = send_area(h);
	struct xfer_hdr hdr = { .magic = HOSTILE_MAGIC_SEND, .seed = HOSTILE_SEED_TAG | tag,
				.bytes = bytes };

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
 * Open a connection, ask for ZC_BYTES and wait for the SrcAvail; check
 * that it advertises the whole buffer and that its inline bytes are the
 * start of the stream.  0, or -errno with why filled in.
 */
static int zc_open_offer(struct hconn *h, uint32_t tag, char *why, size_t cap)
{
	int r = hconn_open(h, HELLO_OK, why, cap);

	if (r)
		return r;
	r = send_send_request(h, tag, ZC_BYTES);
	if (r) {
		snprintf(why, cap, "posting the request: %s", strerror(-r));
		return r;
	}
	r = pump_until(h, got_offer_or_data, deadline_after(case_timeout_ms));
	if (r) {
		snprintf(why, cap, "no SrcAvail from the victim: %s",
			 r == -ETIMEDOUT ? "timed out" : "connection dropped");
		return r;
	}
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
	if (r == 0 && h->rd_status == 0)
		return 0;
	if (r == 0)
		snprintf(how, cap, "error completion (%s)", strerror(-h->rd_status));
	else
		snprintf(how, cap, "connection dropped");
	return 1;
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
	if (!zc_read_matches(h, tag, h->sa_inline, len)) {
		snprintf(why, cap, "the legitimate read gave the wrong bytes");
		return -EIO;
	}
	return 0;
}

/* A read that must fail: "ok" text in why, or a failure. */
static int zc_bad_read(struct hconn *h, uint64_t raddr, uint32_t rkey, uint32_t len,
		       const char *what, char *why, size_t cap)
{
	char how[160];
	int r = zc_read(h, raddr, rkey, len, how, sizeof(how));

	if (r == 0) {
		snprintf(why, cap, "%s SUCCEEDED: the victim's memory was readable", what);
		return -EIO;
	}
	if (r < 0) {
		snprintf(why, cap, "%s: %s", what, how);
		return r;
	}
	/* An error completion may still have moved bytes on some device;
	 * the victim's stream must not be among them. */
	uint8_t *p = send_area(h) + RD_AREA_OFF;

	for (uint32_t i = 0; i < len; i++) {
		if (p[i] != 0xEE) {
			snprintf(why, cap, "%s failed (%s) but wrote into the local buffer", what,
				 how);
			return -EIO;
		}
	}
	snprintf(why, cap, "%s refused: %s", what, how);
	return 0;
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

/* After a bad RdmaRdCompl: the victim must abort the connection. */
static int zc_expect_abort(struct hconn *h, char *why, size_t cap)
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
	snprintf(why, cap, "aborted by the victim in %.1f ms%s", (xfer_now_ns() - t0) / 1e6,
		 h->saw_abort ? " (AbortConn received)" : "");
	return 0;
}

/* Complete the offer and wait for the victim's trailer: its send has
 * returned, so the key must be dead. */
static int zc_complete(struct hconn *h, char *why, size_t cap)
{
	int r = send_rd_compl(h, 4096, h->sa.len - h->sa_inline);

	if (r) {
		snprintf(why, cap, "posting RdmaRdCompl: %s", strerror(-r));
		return r;
	}
	r = pump_until(h, got_trailer, deadline_after(case_timeout_ms));
	if (r) {
		snprintf(why, cap, "after a full RdmaRdCompl the victim's send did not complete (%s)",
			 r == -ETIMEDOUT ? "timed out" : "connection dropped");
		return r;
	}
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
		r = zc_expect_abort(&h, why, cap);
		goto out;
	}
	r = zc_open_offer(&h, tag, why, cap);
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
		if (a == ZC_BEFORE)
			r = zc_bad_read(&h, va - 16, rkey, 16, "16 bytes before vaddr", why, cap);
		else if (a == ZC_STRADDLE_END)
			r = zc_bad_read(&h, va + len - 8, rkey, 16, "16 bytes across the end", why,
					cap);
		else if (a == ZC_PAST_END)
			r = zc_bad_read(&h, va + len, rkey, 16, "16 bytes past the end", why, cap);
		else
			r = zc_bad_read(&h, va + h.sa_inline, rkey + 1, 16, "rkey+1", why, cap);
		break;
	case ZC_COMPL_TOO_MUCH:
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = send_rd_compl(&h, 4096, len - h.sa_inline + 1);
		if (!r)
			r = zc_expect_abort(&h, why, cap);
		break;
	case ZC_COMPL_NO_OFFER:
		r = zc_read_all(&h, tag, why, cap);
		if (!r)
			r = zc_complete(&h, why, cap);
		if (!r)
			r = send_rd_compl(&h, 8192, 16);
		if (!r)
			r = zc_expect_abort(&h, why, cap);
		break;
	default:
		r = -EINVAL;
		break;
	}
out:
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

static void *good_main(void *arg)
{
	struct good_xfer *gx = arg;
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)victim_port) };
	uint8_t hb[XFER_HDR_LEN], verdict[XFER_VERDICT_LEN + 1];
	uint8_t *buf = malloc(65536);
	struct xgen g;
	struct xhash hash;
	uint64_t rng = gx->seed;
	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0), r;
	ssize_t n;

	xgen_init(&g, gx->seed);
	xhash_init(&hash);
	r = sd < 0 ? sd : sdp_connect(sd, (struct sockaddr *)&sin, sizeof(sin));
	if (r || !buf) {
		snprintf(gx->result, sizeof(gx->result), "connect: %s", strerror(-r));
		goto out;
	}
	const char *tn = sdp_transport_name(sd);

	if (!tn || strcmp(tn, transport_name)) {
		snprintf(gx->result, sizeof(gx->result), "connected over %s, not over %s",
			 tn ? tn : "no transport", transport_name);
		goto out;
	}
	struct xfer_hdr h = { .magic = XFER_MAGIC_ONEWAY, .seed = gx->seed, .bytes = gx->bytes };

	xfer_hdr_encode(hb, &h);
	n = xfer_send_all(&xsock_sdp, sd, hb, sizeof(hb), -1);
	if (n < 0) {
		snprintf(gx->result, sizeof(gx->result), "send header: %s", strerror((int)-n));
		goto out;
	}
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
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)victim_port) };
	uint8_t hb[XFER_HDR_LEN], tr[XFER_VERDICT_LEN + 1];
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	struct xgen g;
	struct sdp_stats st0, st1;
	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0), r;
	ssize_t n;

	sdp_get_stats(&st0);
	xgen_init(&g, gx->seed);
	r = sd < 0 ? sd : sdp_connect(sd, (struct sockaddr *)&sin, sizeof(sin));
	if (r || !buf) {
		snprintf(gx->result, sizeof(gx->result), "connect: %s", strerror(-r));
		goto out;
	}
	struct xfer_hdr h = { .magic = HOSTILE_MAGIC_SEND, .seed = gx->seed, .bytes = gx->bytes };

	xfer_hdr_encode(hb, &h);
	n = xfer_send_all(&xsock_sdp, sd, hb, sizeof(hb), -1);
	if (n < 0) {
		snprintf(gx->result, sizeof(gx->result), "send header: %s", strerror((int)-n));
		goto out;
	}
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
	if (st1.zcopy_bytes_received == st0.zcopy_bytes_received) {
		snprintf(gx->result, sizeof(gx->result),
			 "%" PRIu64 " bytes ok, but none RDMA-read: the victim did not offer them",
			 gx->bytes);
		goto out;
	}
	snprintf(gx->result, sizeof(gx->result), "%" PRIu64 " bytes ok, %" PRIu64 " of them RDMA-read",
		 gx->bytes, st1.zcopy_bytes_received - st0.zcopy_bytes_received);
	gx->ok = 1;
out:
	free(buf);
	if (sd >= 0)
		sdp_close(sd);
	return NULL;
}

/* ======================================================================= */

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
	int c, ctl[2], portp[2], failures = 0, ran = 0;
	char why[256];
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
	if (pipe(ctl) || pipe(portp)) {
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
		_exit(victim_main(ctl[0], portp[1]));
	}
	close(ctl[0]);
	close(portp[1]);
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

	for (size_t i = 0; i < sizeof(hello_attacks) / sizeof(hello_attacks[0]); i++) {
		if (only && !strstr(hello_attacks[i].name, only))
			continue;
		ran++;
		int r = run_hello_attack((int)i, why, sizeof(why));

		if (r == 0 && !victim_alive(why, sizeof(why)))
			r = -1;
		say("%s %-40s %s", r ? "FAIL" : "ok  ", hello_attacks[i].name, why);
		if (r)
			failures++;
		if (!victim_pid)
			break;
	}
	for (size_t i = 0; victim_pid && i < sizeof(attacks) / sizeof(attacks[0]); i++) {
		if (only && !strstr(attacks[i].name, only))
			continue;
		ran++;
		int r = run_attack((int)i, why, sizeof(why));

		if (r == 0 && !victim_alive(why, sizeof(why)))
			r = -1;
		say("%s %-40s %s", r ? "FAIL" : "ok  ", attacks[i].name, why);
		if (r)
			failures++;
	}
	for (size_t i = 0; victim_pid && i < sizeof(zc_attacks) / sizeof(zc_attacks[0]); i++) {
		if (only && !strstr(zc_attacks[i].name, only))
			continue;
		ran++;
		int r = run_zc_attack((int)i, why, sizeof(why));

		if (r == 0 && !victim_alive(why, sizeof(why)))
			r = -1;
		say("%s %-40s %s", r ? "FAIL" : "ok  ", zc_attacks[i].name, why);
		if (r)
			failures++;
	}
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
	/* And a new connection after everything. */
	if (victim_pid) {
		struct good_xfer after = { .seed = 777, .bytes = 1u << 20 };

		pthread_create(&after.thread, NULL, good_main, &after);
		pthread_join(after.thread, NULL);
		say("%s %-40s %s", after.ok ? "ok  " : "FAIL", "new connection after the attacks",
		    after.result);
		if (!after.ok)
			failures++;
	}
	if (victim_pid) {
		struct good_xfer zc = { .seed = 779, .bytes = (4u << 20) + 5 };

		pthread_create(&zc.thread, NULL, good_zc_main, &zc);
		pthread_join(zc.thread, NULL);
		say("%s %-40s %s", zc.ok ? "ok  " : "FAIL", "zero-copy send from the victim after",
		    zc.result);
		if (!zc.ok)
			failures++;
	}

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
	say("hostile_peer: %d case(s), %d failure(s): %s", ran, failures,
	    failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
