/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tcp-fallback: the software OTI backend.  It gives SDP its RDMA semantics
 * (messages into posted receive buffers, RDMA reads and writes of
 * registered memory) over one kernel TCP connection per endpoint, so that
 * SDP runs on any host with TCP/IP.  It is registered last, behind the
 * RDMA backends.
 *
 * WHY NOT A LIBRARY
 *   It used to sit on libfabric's "tcp" provider.  That cost 8 descriptors
 *   and about 430 KiB per endpoint (the provider's per-endpoint queues,
 *   event queue, completion queue and wait sets), 360 ms to load and start
 *   the library in every process, and 2 ms per refused connection attempt;
 *   its state cannot be shared across fork() either.  What SDP needs is a
 *   small subset: this file is that subset, one socket per endpoint and
 *   no thread.
 *
 * PORT SCHEME (doc/port-scheme.md)
 *   An SDP listener must never take TCP port P, which a native listener on
 *   the same application port holds.  With offset = tunable
 *   tcpf_port_offset (default 20000), read when the listener or ep is
 *   created:
 *     listen(P)      listens on TCP port T = (P + offset) mod 65536.  A P
 *                    whose T would be 0 cannot be served: -EADDRNOTAVAIL.
 *     listen(0)      lets the kernel choose T; the application port is
 *                    (T - offset) mod 65536 (a T for which that is 0 is held
 *                    while another is chosen).
 *     ep_open(P)     connects to TCP port (P + offset) mod 65536.
 *   Ports of the passive side (listener_name, the local name of an
 *   accepted ep) and the peer of an active ep are application ports; the
 *   source port of an active ep is whatever TCP chose (the engine carries
 *   the SDP source port in its Hello).
 *
 * WIRE FORMAT (both directions of the TCP connection)
 *   Frames: a 24-byte header, big-endian, then len payload bytes.
 *     byte 0  type      CONNECT ACCEPT REJECT SEND WRITE READ_REQ READ_RESP
 *     byte 1  flags     READ_RESP: TCPF_F_ERROR (no data: refused)
 *     2..3    reserved  0
 *     4..7    len       payload bytes
 *     8..11   key       CONNECT: TCPF_MAGIC; WRITE, READ_REQ: remote key
 *     12..15  id        CONNECT: TCPF_PROTO; READ_REQ, READ_RESP: read id
 *     16..23  addr      WRITE, READ_REQ: offset in the remote region
 *   The active side sends CONNECT (payload: its private data) as soon as
 *   TCP is up; the passive side answers ACCEPT or REJECT (private data)
 *   and, after REJECT, closes.  SEND lands in the oldest posted receive; a
 *   WRITE lands at key+addr; a READ_REQ (payload: the length, 4 bytes) is
 *   answered with READ_RESP carrying the bytes, in order.  Everything a
 *   peer sends is checked before a byte of it is placed: a frame that
 *   breaks the rules (unknown type, a key this endpoint did not register
 *   with the right access, a range outside the region, a SEND larger than
 *   the receive buffer or without one, oversized private data) aborts the
 *   connection with a reset.
 *
 * MEMORY KEYS
 *   A registration belongs to the endpoint it was made on: a peer reaches
 *   only memory registered on its own connection, never another
 *   connection's in the same process.  Keys are random 32-bit values from
 *   getrandom(); registration fails rather than use a predictable key.
 *   Remote addresses are offsets into the region (raddr_base 0).
 *
 * COMPLETIONS AND EVENTS
 *   A SEND or WRITE completes once the kernel has taken all of it, a READ
 *   once its data has landed, a RECV when the message is in its buffer.
 *   Connection events and completions are queued by the endpoint in the
 *   order they happen; DISCONNECTED is held back until the completion
 *   queue is empty, so no completion comes after it.  When the connection
 *   goes down, everything outstanding completes with -ECANCELED, and so
 *   does work posted afterwards (a verbs QP in the error state).
 *
 * WAITING
 *   ep_fd() is the TCP socket itself; ep_wait_events() asks for POLLOUT
 *   only while output is queued (the socket buffer was full), and for
 *   nothing once the connection is down.  A connection that ended by an
 *   error gets a quiet eventfd at its fd number, so that nothing spins on
 *   a dead socket, when the engine, which has taken the number out of its
 *   epoll sets first, calls ep_quiet() (oti.h ep_fd_dead).  A listener's
 *   fd is an epoll set holding its listening socket and the connections
 *   that have not sent their CONNECT yet.
 *
 * LOCKING
 *   None inside: the engine holds the owning socket's lock around every
 *   call on an endpoint or listener (oti.h), and registrations are only
 *   used and released under it.  There is no global state but the
 *   counter of live objects.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "fdspace.h"
#include "log.h"
#include "epq/epq.h"
#include "oti.h"
#include "sys.h"
#include "tcpf_wire.h"
#include "tunables.h"

#define TCPF "tcpf"

/* The largest RDMA operation and message: what a 32-bit length allows
 * sensibly; the engine's own limits are far below. */
#define TCPF_MAX_MSG (1u << 30)
/* Reads a peer may have waiting for our answer, and reads of ours in
 * flight: a peer that asks for more is hostile. */
#define TCPF_MAX_READS 64
/* Input is read in chunks of this size; a payload at least this large
 * whose destination is known goes straight from the kernel into it. */
#define TCPF_IBUF 16384
/* Frames gathered into one sendmsg(). */
#define TCPF_IOV 64
/* listen(0): attempts to get a TCP port whose application port is not 0. */
#define TCPF_LISTEN_TRIES 8
/* Connections a listener holds before their CONNECT came. */
#define TCPF_MAX_HALF 256

static atomic_int tcpf_objects;

/* ------------------------------------------------------------------------ */

/* --- addresses ------------------------------------------------------------ */

/* Read once per listener or ep, so that a change of the tunable never
 * makes one object translate its ports two ways. */
static uint16_t port_offset(void)
{
	return (uint16_t)(tun_int(TUN_tcpf_port_offset) & 0xffff);
}

static uint16_t app_to_tcp(uint16_t app, uint16_t off)
{
	return (uint16_t)((app + off) & 0xffff);
}

static uint16_t tcp_to_app(uint16_t tcp, uint16_t off)
{
	return (uint16_t)((tcp + 0x10000u - off) & 0xffff);
}

/* A TCP socket of ours: non-blocking, close-on-exec, no Nagle, out of
 * the application's descriptor numbers (common/fdspace.h). */
static int tcp_socket(int family)
{
	int fd = FDSPACE_MAKE(sys.socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	int one = 1;

	if (fd < 0)
		return fd;
	(void)sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* --- objects ------------------------------------------------------------- */

struct tcpf_ep;

struct tcpf_mr {
	struct oti_mr pub;	/* what the engine sees: first */
	struct tcpf_ep *ep;	/* NULL once the ep is closed */
};

/* One frame waiting to be written, whole or the rest of it. */
struct tcpf_out {
	struct tcpf_out *next;
	uint8_t hdr[TCPF_HDR_LEN];
	uint8_t small[4];	/* READ_REQ's payload */
	const uint8_t *data;	/* payload */
	uint32_t len;
	uint32_t done;		/* bytes of header + payload written */
	uint8_t *owned;		/* payload copied here, freed with the frame */
	struct tcpf_mr *src;	/* READ_RESP: the region it reads */
	bool completes;		/* SEND, WRITE: a completion once written */
	enum oti_wc_op op;
	uint64_t ctx;
};

struct tcpf_read {
	uint32_t id;
	uint8_t *addr;
	uint32_t len;
	uint64_t ctx;
};

enum tcpf_state {
	TS_ACTIVE,	/* active: before ACCEPT (TCP connecting, or CONNECT sent) */
	TS_PASSIVE,	/* passive: before accept() */
	TS_UP,
	TS_DOWN,
};

struct tcpf_ep {
	int fd;
	uint16_t port_off;
	enum tcpf_state state;
	/* Ended by an error, the socket waits for ep_quiet(), which gives
	 * its number to a quiet eventfd. */
	bool fd_dead;
	bool fd_quieted;
	bool connect_queued;	/* active: CONNECT is in the output */
	bool tcp_up;		/* the TCP handshake is done */
	bool shut_wanted;	/* disconnect(): SHUT_WR once the output is out */
	bool down_held;		/* DISCONNECTED waits for an empty CQ */
	/* get_event() has just read the socket dry: the poll_cq() that
	 * follows it in a drive need not try again (a recv() that says
	 * EAGAIN, twice per round of the engine's drive).  Anything that
	 * arrives meanwhile keeps the fd readable, so a sleeper wakes. */
	bool just_read;
	/* In a drive (drive_begin): a read found the socket empty, or the
	 * drive is not to read; rx() then says EAGAIN without asking. */
	bool driving, rx_empty;
	unsigned empty_reads;	/* in this drive, for drive_end() */
	int down_status;
	struct sockaddr_storage local, peer;

	/* Events and completions; every operation posted and not yet
	 * completed has a CQ place kept (cq_owed), so a completion is
	 * never dropped. */
	struct epq q;

	struct tcpf_read rd[TCPF_MAX_READS];
	unsigned rd_head, rd_count;
	uint32_t rd_next_id;

	struct tcpf_out *out_head, *out_tail, *out_free;
	unsigned resp_queued;	/* READ_RESPs in the output */

	/* Input: ib[ib_off, ib_len) not yet parsed; a frame in progress. */
	uint8_t *ib;
	uint32_t ib_off, ib_len;
	bool in_frame;
	struct tcpf_hdr cur;
	uint8_t *dst;		/* where its payload goes; NULL: ctl */
	uint32_t got;
	uint8_t ctl[OTI_MAX_PRIVATE_DATA];

	struct tcpf_mr **mrs;
	unsigned nmrs, mrs_cap;

	/* Imported (ep_import): the bytes of the stream that the exporting
	 * ep had taken from the socket and not yet acted on, read again
	 * before the socket's. */
	uint8_t *pre;
	uint32_t pre_off, pre_len;
};

static inline struct tcpf_ep *EP(struct oti_ep *ep)
{
	return (struct tcpf_ep *)ep;
}

/* --- output frames --------------------------------------------------------- */

static struct tcpf_out *out_new(struct tcpf_ep *e)
{
	struct tcpf_out *o = e->out_free;

	if (o)
		e->out_free = o->next;
	else
		o = malloc(sizeof(*o));
	if (o)
		memset(o, 0, sizeof(*o));
	return o;
}

static void out_release(struct tcpf_ep *e, struct tcpf_out *o)
{
	if (o->src && o->data)
		e->resp_queued--;
	free(o->owned);
	o->owned = NULL;
	o->next = e->out_free;
	e->out_free = o;
}

static void out_append(struct tcpf_ep *e, struct tcpf_out *o)
{
	o->next = NULL;
	if (e->out_tail)
		e->out_tail->next = o;
	else
		e->out_head = o;
	e->out_tail = o;
}

/* --- going down ------------------------------------------------------------ */

static bool tcpf_ep_fd_dead(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	return e->fd_dead && !e->fd_quieted;
}

/* Put a quiet eventfd at the socket's number (closing the socket): what
 * is left of a dead connection must not keep the fd readable.  The
 * engine has taken the number out of its epoll sets. */
static void tcpf_ep_quiet(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	if (!tcpf_ep_fd_dead(oep))
		return;
	e->fd_quieted = true;
	/* On failure the socket stays: spurious wake-ups only. */
	(void)fdspace_quiet(e->fd);
}

/* Everything outstanding completes with -ECANCELED, in posting order per
 * queue (sends and writes, reads, receives). */
static void flush_all(struct tcpf_ep *e)
{
	while (e->out_head) {
		struct tcpf_out *o = e->out_head;

		e->out_head = o->next;
		if (o->completes)
			epq_push_wc(&e->q, o->ctx, o->op, -ECANCELED, 0);
		out_release(e, o);
	}
	e->out_tail = NULL;
	while (e->rd_count) {
		epq_push_wc(&e->q, e->rd[e->rd_head].ctx, OTI_WC_RDMA_READ, -ECANCELED, 0);
		e->rd_head = (e->rd_head + 1) % TCPF_MAX_READS;
		e->rd_count--;
	}
	epq_cancel_recvs(&e->q);
}

enum down_how {
	DOWN_ORDERLY,	/* our SHUT_WR is out, or the peer's EOF came */
	DOWN_ABORT,	/* we reset the connection (a rule was broken) */
	DOWN_LOST,	/* the kernel says the connection is gone */
};

/*
 * The connection is over.  An established one reports DISCONNECTED (once
 * the CQ is empty); one still being set up reports why it failed.
 */
static void go_down(struct tcpf_ep *e, enum down_how how, int status)
{
	enum tcpf_state was = e->state;

	if (was == TS_DOWN)
		return;
	e->state = TS_DOWN;
	flush_all(e);
	if (how == DOWN_ABORT) {
		/* The close in ep_quiet() or ep_close() resets it. */
		struct linger lg = { 1, 0 };

		(void)sys.setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	if (how != DOWN_ORDERLY)
		e->fd_dead = true;
	if (was == TS_ACTIVE) {
		/* Nobody accepted: no SDP listener there, or not SDP at all. */
		epq_push_event(&e->q, OTI_EV_UNREACHABLE, status && status != -ECONNRESET ? status
										 : -ECONNREFUSED,
			   NULL, 0);
		return;
	}
	e->down_held = true;
	e->down_status = status;
}

/* A peer broke the rules: reset the connection. */
static void protocol_error(struct tcpf_ep *e, const char *why)
{
	sdp_warn(TCPF, "peer broke the transport's rules (%s): connection reset", why);
	go_down(e, DOWN_ABORT, -EPROTO);
}

/* An error from the socket itself. */
static void socket_error(struct tcpf_ep *e, int err)
{
	go_down(e, DOWN_LOST, -err);
}

/* --- output ---------------------------------------------------------------- */

static size_t out_total(const struct tcpf_out *o)
{
	return TCPF_HDR_LEN + (size_t)o->len;
}

/* Write what the socket takes; completions for frames fully written. */
static void flush_out(struct tcpf_ep *e)
{
	while (e->out_head && e->state != TS_DOWN) {
		struct iovec iov[TCPF_IOV];
		int n = 0;

		for (struct tcpf_out *o = e->out_head; o && n + 2 <= TCPF_IOV; o = o->next) {
			size_t d = o->done;

			if (d < TCPF_HDR_LEN) {
				iov[n++] = (struct iovec){ o->hdr + d, TCPF_HDR_LEN - d };
				d = TCPF_HDR_LEN;
			}
			if (o->len)
				iov[n++] = (struct iovec){ (void *)(o->data + (d - TCPF_HDR_LEN)),
							   o->len - (d - TCPF_HDR_LEN) };
		}
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sys.sendmsg(e->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;		/* POLLOUT will say when */
			socket_error(e, errno);
			return;
		}
		e->tcp_up = true;
		size_t left = (size_t)w;

		while (left && e->out_head) {
			struct tcpf_out *o = e->out_head;
			size_t rest = out_total(o) - o->done;

			if (left < rest) {
				o->done += (uint32_t)left;
				break;
			}
			left -= rest;
			e->out_head = o->next;
			if (!e->out_head)
				e->out_tail = NULL;
			if (o->completes)
				epq_push_wc(&e->q, o->ctx, o->op, 0, 0);
			out_release(e, o);
		}
	}
}

/* Queue one frame; data must stay valid until the frame is written (the
 * engine's buffers do until their completion).  Caller flushes. */
static int queue_frame(struct tcpf_ep *e, const struct tcpf_hdr *h, const void *data,
		       bool completes, enum oti_wc_op op, uint64_t ctx)
{
	struct tcpf_out *o = out_new(e);

	if (!o)
		return -ENOMEM;
	tcpf_hdr_put(o->hdr, h);
	o->data = data;
	o->len = h->len;
	o->completes = completes;
	o->op = op;
	o->ctx = ctx;
	out_append(e, o);
	return 0;
}

/* Queue a frame whose payload, h->len bytes of private data, is copied
 * (the caller's buffer is its own again at return).  Caller flushes. */
static int queue_pdata_frame(struct tcpf_ep *e, const struct tcpf_hdr *h, const void *pdata)
{
	struct tcpf_out *o = out_new(e);

	if (!o)
		return -ENOMEM;
	tcpf_hdr_put(o->hdr, h);
	if (h->len) {
		o->owned = malloc(h->len);
		if (!o->owned) {
			out_release(e, o);
			return -ENOMEM;
		}
		memcpy(o->owned, pdata, h->len);
	}
	o->data = o->owned;
	o->len = h->len;
	out_append(e, o);
	return 0;
}

/* --- registrations ------------------------------------------------------------ */

static struct tcpf_mr *find_mr(struct tcpf_ep *e, uint32_t key)
{
	for (unsigned i = 0; i < e->nmrs; i++)
		if (e->mrs[i]->pub.rkey == key)
			return e->mrs[i];
	return NULL;
}

/* The region of key on e, if it allows access and holds [off, off + len). */
static uint8_t *remote_target(struct tcpf_ep *e, uint32_t key, uint64_t off, uint32_t len,
			      unsigned access, struct tcpf_mr **mrp)
{
	struct tcpf_mr *mr = find_mr(e, key);

	if (!mr || !(mr->pub.access & access) || off > mr->pub.len || len > mr->pub.len - off)
		return NULL;
	if (mrp)
		*mrp = mr;
	return (uint8_t *)mr->pub.addr + off;
}

/* --- input ------------------------------------------------------------------ */

static void answer_read(struct tcpf_ep *e, const struct tcpf_hdr *req, uint32_t want)
{
	struct tcpf_mr *mr = NULL;
	uint8_t *p = remote_target(e, req->key, req->addr, want, OTI_ACCESS_REMOTE_READ, &mr);

	if (!p) {
		protocol_error(e, "RDMA read outside what was registered for it");
		return;
	}
	if (e->resp_queued >= TCPF_MAX_READS) {
		protocol_error(e, "too many RDMA reads at once");
		return;
	}
	struct tcpf_hdr h = { .type = TCPF_READ_RESP, .len = want, .id = req->id };

	if (queue_frame(e, &h, p, false, 0, 0)) {
		go_down(e, DOWN_ABORT, -ENOMEM);
		return;
	}
	e->out_tail->src = mr;
	e->resp_queued++;
}

/*
 * A header is in: check it and say where its payload goes.  Returns false
 * when the connection went down.
 */
static bool frame_begin(struct tcpf_ep *e)
{
	struct tcpf_hdr *h = &e->cur;

	e->dst = NULL;
	if (e->state == TS_ACTIVE) {
		if ((h->type != TCPF_ACCEPT && h->type != TCPF_REJECT) ||
		    h->len > OTI_MAX_PRIVATE_DATA) {
			/* Something that is not an SDP listener answered. */
			go_down(e, DOWN_ABORT, -ECONNREFUSED);
			return false;
		}
		return true;
	}
	switch (h->type) {
	case TCPF_SEND:
		if (!e->q.rq_count) {
			protocol_error(e, "a message with no receive posted");
			return false;
		}
		if (h->len > epq_recv_head(&e->q)->len) {
			/* As on verbs: the receive completes in error and the
			 * connection is over. */
			epq_recv_done(&e->q, -EMSGSIZE, 0);
			protocol_error(e, "a message longer than the receive buffer");
			return false;
		}
		e->dst = epq_recv_head(&e->q)->addr;
		return true;
	case TCPF_WRITE:
		e->dst = remote_target(e, h->key, h->addr, h->len, OTI_ACCESS_REMOTE_WRITE, NULL);
		if (!e->dst) {
			protocol_error(e, "RDMA write outside what was registered for it");
			return false;
		}
		return true;
	case TCPF_READ_REQ:
		if (h->len != 4) {
			protocol_error(e, "malformed RDMA read request");
			return false;
		}
		return true;
	case TCPF_READ_RESP:
		if (!e->rd_count || e->rd[e->rd_head].id != h->id ||
		    (!(h->flags & TCPF_F_ERROR) && h->len != e->rd[e->rd_head].len) ||
		    ((h->flags & TCPF_F_ERROR) && h->len)) {
			protocol_error(e, "an RDMA read answer nobody asked for");
			return false;
		}
		e->dst = e->rd[e->rd_head].addr;
		return true;
	default:
		protocol_error(e, "unknown frame");
		return false;
	}
}

/* The payload is in. */
static void frame_end(struct tcpf_ep *e)
{
	struct tcpf_hdr *h = &e->cur;

	switch (h->type) {
	case TCPF_ACCEPT:
		e->state = TS_UP;
		epq_push_event(&e->q, OTI_EV_ESTABLISHED, 0, e->ctl, h->len);
		break;
	case TCPF_REJECT:
		epq_push_event(&e->q, OTI_EV_REJECTED, -ECONNREFUSED, e->ctl, h->len);
		e->state = TS_DOWN;	/* the peer closes */
		flush_all(e);
		break;
	case TCPF_SEND:
		epq_recv_done(&e->q, 0, h->len);
		break;
	case TCPF_READ_REQ:
		answer_read(e, h, tcpf_get32(e->ctl));
		break;
	case TCPF_READ_RESP:
		epq_push_wc(&e->q, e->rd[e->rd_head].ctx, OTI_WC_RDMA_READ,
			(h->flags & TCPF_F_ERROR) ? -EACCES : 0, 0);
		e->rd_head = (e->rd_head + 1) % TCPF_MAX_READS;
		e->rd_count--;
		break;
	default:
		break;		/* WRITE: silent at the target */
	}
}

/* recv() into p; returns bytes, 0 at EOF, -EAGAIN, or takes the
 * connection down and returns -1. */
static ssize_t rx(struct tcpf_ep *e, void *p, size_t len)
{
	/* The bytes an exported ep had read come first: they are not the
	 * socket's, whatever it says. */
	if (e->pre) {
		uint32_t n = e->pre_len - e->pre_off;

		if (n > len)
			n = (uint32_t)len;
		memcpy(p, e->pre + e->pre_off, n);
		e->pre_off += n;
		if (e->pre_off == e->pre_len) {
			free(e->pre);
			e->pre = NULL;
		}
		return n;
	}
	if (e->rx_empty)
		return -EAGAIN;
	for (;;) {
		ssize_t n = sys.recv(e->fd, p, len, MSG_DONTWAIT);

		if (n > 0)
			return n;
		if (n == 0) {
			/* The peer's EOF: orderly if no frame was cut short. */
			if (e->in_frame || e->ib_len > e->ib_off)
				go_down(e, DOWN_LOST, -ECONNRESET);
			else
				go_down(e, DOWN_ORDERLY, 0);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			/* Empty, and no EOF: what comes next makes the fd
			 * readable for whoever waits on it. */
			e->rx_empty = e->driving;
			e->empty_reads++;
			return -EAGAIN;
		}
		socket_error(e, errno);
		return -1;
	}
}

/* Read and act on what the peer sent, until the socket is empty. */
static void read_in(struct tcpf_ep *e)
{
	if (!e->ib) {
		e->ib = malloc(TCPF_IBUF);
		if (!e->ib) {
			go_down(e, DOWN_ABORT, -ENOMEM);
			return;
		}
	}
	while (e->state == TS_UP || e->state == TS_ACTIVE) {
		if (!e->in_frame) {
			if (e->ib_len - e->ib_off < TCPF_HDR_LEN) {
				if (e->ib_off) {
					memmove(e->ib, e->ib + e->ib_off, e->ib_len - e->ib_off);
					e->ib_len -= e->ib_off;
					e->ib_off = 0;
				}
				ssize_t n = rx(e, e->ib + e->ib_len, TCPF_IBUF - e->ib_len);

				if (n < 0)
					return;
				e->ib_len += (uint32_t)n;
				continue;
			}
			tcpf_hdr_get(e->ib + e->ib_off, &e->cur);
			e->ib_off += TCPF_HDR_LEN;
			e->in_frame = true;
			e->got = 0;
			if (!frame_begin(e))
				return;
		}
		uint32_t want = e->cur.len - e->got;
		uint8_t *to = e->dst ? e->dst : e->ctl;

		if (want) {
			uint32_t avail = e->ib_len - e->ib_off;

			if (avail) {
				uint32_t take = avail < want ? avail : want;

				memcpy(to + e->got, e->ib + e->ib_off, take);
				e->ib_off += take;
				e->got += take;
			} else if (want >= TCPF_IBUF / 2 && e->dst) {
				ssize_t n = rx(e, to + e->got, want);

				if (n < 0)
					return;
				e->got += (uint32_t)n;
			} else {
				e->ib_off = e->ib_len = 0;
				ssize_t n = rx(e, e->ib, TCPF_IBUF);

				if (n < 0)
					return;
				e->ib_len = (uint32_t)n;
			}
			if (e->got < e->cur.len)
				continue;
		}
		e->in_frame = false;
		frame_end(e);
	}
}

/* Move what can be moved now. */
static void ep_progress(struct tcpf_ep *e)
{
	if (e->state == TS_DOWN || e->state == TS_PASSIVE)
		return;
	flush_out(e);
	if (e->state == TS_UP || (e->state == TS_ACTIVE && e->tcp_up)) {
		read_in(e);
		/* Answers to the peer's RDMA reads go at once: the peer
		 * waits for them, and whoever sleeps on this ep next may
		 * not be waiting for writability. */
		if (e->out_head)
			flush_out(e);
	}
	if (e->state == TS_UP && e->shut_wanted && !e->out_head) {
		(void)sys.shutdown(e->fd, SHUT_WR);
		go_down(e, DOWN_ORDERLY, 0);
	}
}

/* --- init, probe, caps ------------------------------------------------------ */

static int tcpf_init(void)
{
	return 0;
}

static void tcpf_fini(void)
{
	int left = atomic_load(&tcpf_objects);

	if (left)
		sdp_dbg(TCPF, "fini with %d endpoints or listeners still open", left);
}

static int tcpf_probe(const struct sockaddr *local, const struct sockaddr *remote)
{
	const struct sockaddr *sa[2] = { local, remote };

	for (int i = 0; i < 2; i++)
		if (sa[i] && sa[i]->sa_family != AF_INET && sa[i]->sa_family != AF_INET6)
			return -ENODEV;
	return 0;
}

static void tcpf_query_caps(struct oti_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->flags = OTI_CAP_RDMA_READ | OTI_CAP_RDMA_WRITE | OTI_CAP_SOFTWARE |
		      OTI_CAP_PASSIVE_DONE;
	caps->max_private_data = OTI_MAX_PRIVATE_DATA;
	/* Every send is a copy into the kernel here: "inline" is free. */
	caps->max_inline = 256;
	caps->max_send_wr = 4096;
	caps->max_recv_wr = 4096;
	caps->max_msg_size = TCPF_MAX_MSG;
}

/* --- passive side -------------------------------------------------------------- */

/* A connection that has not sent its CONNECT yet, or a complete request. */
struct tcpf_half {
	struct tcpf_half *next;
	int fd;
	uint64_t since_ns;
	struct sockaddr_storage peer;
	uint8_t buf[TCPF_HDR_LEN + OTI_MAX_PRIVATE_DATA];
	uint32_t got, need;	/* need: header, then header + payload */
};

struct oti_connreq {
	struct tcpf_half h;
};

struct tcpf_listener {
	int lfd, epfd;
	bool taking;		/* lfd is in epfd and accept4()ed from */
	uint16_t port_off;
	int backlog;
	struct tcpf_half *half;	/* waiting for CONNECT */
	int nhalf;
	struct tcpf_half *ready, *ready_tail;	/* complete, FIFO */
	struct tcpf_half *given;	/* handed out, not yet accepted or rejected */
};

/* Take h off a list it is on. */
static void half_unlink(struct tcpf_half **list, struct tcpf_half *h)
{
	for (struct tcpf_half **pp = list; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			return;
		}
	}
}

static inline struct tcpf_listener *LS(struct oti_listener *l)
{
	return (struct tcpf_listener *)l;
}

/* REJECT with pdata, best effort: the active side learns why. */
static void send_reject(int fd, const void *pdata, size_t len)
{
	uint8_t buf[TCPF_HDR_LEN + OTI_MAX_PRIVATE_DATA];
	struct tcpf_hdr h = { .type = TCPF_REJECT, .len = (uint32_t)len };

	tcpf_hdr_put(buf, &h);
	if (len)
		memcpy(buf + TCPF_HDR_LEN, pdata, len);
	/* A fresh socket's buffer takes this whole, or the peer is gone. */
	(void)sys.send(fd, buf, TCPF_HDR_LEN + len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void reject_fd(int fd, const void *pdata, size_t len)
{
	send_reject(fd, pdata, len);
	fdspace_close(fd);
}

static void half_drop(struct tcpf_listener *l, struct tcpf_half **pp)
{
	struct tcpf_half *h = *pp;

	*pp = h->next;
	(void)sys.epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	fdspace_close(h->fd);
	free(h);
	l->nhalf--;
}

static int listen_once(const struct sockaddr *ss, unsigned flags, int backlog, int *out,
		       uint16_t *port)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	int fd = FDSPACE_MAKE(sys.socket(ss->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	int one = 1;

	if (fd < 0)
		return fd;
	(void)sys.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->sa_family == AF_INET6) {
		int v6only = !!(flags & OTI_LISTEN_V6ONLY);

		(void)sys.setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
	}
	if (sys.bind(fd, ss, epq_sa_len(ss->sa_family)) < 0 || sys.listen(fd, backlog) < 0 ||
	    sys.getsockname(fd, (struct sockaddr *)&bound, &blen) < 0) {
		int e = errno;

		fdspace_close(fd);
		return -e;
	}
	*port = epq_get_port(&bound);
	*out = fd;
	return 0;
}

static int tcpf_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog,
		       unsigned flags, struct oti_listener **out)
{
	struct sockaddr_storage ss;
	uint16_t app, port = 0, off = port_offset();
	int ret, fd = -1, held = -1;

	ret = epq_check_addr(addr, addrlen);
	if (ret)
		return ret;
	memcpy(&ss, addr, epq_sa_len(addr->sa_family));
	app = epq_get_port(&ss);
	if (app) {
		if (!app_to_tcp(app, off))
			return -EADDRNOTAVAIL;
		epq_set_port(&ss, app_to_tcp(app, off));
	}
	if (backlog < 16)
		backlog = 16;
	for (int attempt = 0; attempt < TCPF_LISTEN_TRIES; attempt++) {
		ret = listen_once((struct sockaddr *)&ss, flags, backlog, &fd, &port);
		if (ret || app || tcp_to_app(port, off))
			break;
		/* The kernel chose the one TCP port that stands for
		 * application port 0: keep it taken while asking again. */
		if (held >= 0)
			fdspace_close(held);
		held = fd;
		fd = -1;
		ret = -EADDRNOTAVAIL;
	}
	if (held >= 0)
		fdspace_close(held);
	if (ret)
		return ret;

	struct tcpf_listener *l = calloc(1, sizeof(*l));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	if (!l) {
		fdspace_close(fd);
		return -ENOMEM;
	}
	l->lfd = fd;
	l->taking = true;
	l->port_off = off;
	l->backlog = backlog;
	l->epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));
	if (l->epfd < 0 || sys.epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		ret = l->epfd < 0 ? l->epfd : -errno;
		if (l->epfd >= 0)
			fdspace_close(l->epfd);
		fdspace_close(fd);
		free(l);
		return ret;
	}
	sdp_dbg(TCPF, "listening on tcp port %u for app port %u", port, tcp_to_app(port, off));
	atomic_fetch_add(&tcpf_objects, 1);
	*out = (struct oti_listener *)l;
	return 0;
}

static int tcpf_listener_name(struct oti_listener *ol, struct sockaddr *addr, socklen_t *addrlen)
{
	struct tcpf_listener *l = LS(ol);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (sys.getsockname(l->lfd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	epq_set_port(&ss, tcp_to_app(epq_get_port(&ss), l->port_off));
	len = epq_sa_len(ss.ss_family);
	if (*addrlen < len)
		return -EINVAL;
	memcpy(addr, &ss, len);
	*addrlen = len;
	return 0;
}

static int tcpf_listener_fd(struct oti_listener *ol)
{
	return LS(ol)->epfd;
}

static int tcpf_listener_arm(struct oti_listener *ol)
{
	return LS(ol)->ready ? -EAGAIN : 0;
}

/* What h's CONNECT brought so far: 1 complete, 0 not yet, -1 a
 * connection to drop (gone, or no SDP client of ours). */
static int half_read(struct tcpf_half *h)
{
	ssize_t n = sys.recv(h->fd, h->buf + h->got, h->need - h->got, MSG_DONTWAIT);

	if (n > 0)
		h->got += (uint32_t)n;
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		return -1;
	if (h->got == TCPF_HDR_LEN && h->need == TCPF_HDR_LEN) {
		struct tcpf_hdr hd;

		tcpf_hdr_get(h->buf, &hd);
		if (hd.type != TCPF_CONNECT || hd.key != TCPF_MAGIC || hd.id != TCPF_PROTO ||
		    hd.len > OTI_MAX_PRIVATE_DATA)
			return -1;
		h->need += hd.len;
		/* The payload is most likely there too: one more read now
		 * rather than a wakeup later. */
		return h->need > h->got ? half_read(h) : 1;
	}
	return h->got == h->need;
}

static void ready_append(struct tcpf_listener *l, struct tcpf_half *h)
{
	h->next = NULL;
	if (l->ready_tail)
		l->ready_tail->next = h;
	else
		l->ready = h;
	l->ready_tail = h;
}

/*
 * New connections: read at once, since an active side of ours sends its
 * CONNECT right behind the TCP handshake, so most are complete here and
 * go to the ready list without ever being in the listener's epoll set
 * (two epoll_ctl per connection saved); the others wait in the half list.
 */
static void take_new(struct tcpf_listener *l)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int fd = FDSPACE_MAKE(sys.accept4(l->lfd, (struct sockaddr *)&peer, &plen,
					      SOCK_NONBLOCK | SOCK_CLOEXEC));

		if (fd < 0)
			return;		/* EAGAIN, a connection that went, or no room */
		struct tcpf_half *h = calloc(1, sizeof(*h));

		if (!h) {
			fdspace_close(fd);
			continue;
		}
		int one = 1;

		(void)sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		h->fd = fd;
		h->peer = peer;
		h->since_ns = mono_ns();
		h->need = TCPF_HDR_LEN;
		int got = half_read(h);

		if (got > 0) {
			ready_append(l, h);
			continue;
		}
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

		if (got < 0 || sys.epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			free(h);
			fdspace_close(fd);
			continue;
		}
		h->next = l->half;
		l->half = h;
		/* The oldest goes when too many never said anything. */
		if (++l->nhalf > TCPF_MAX_HALF) {
			struct tcpf_half **pp = &l->half;

			while ((*pp)->next)
				pp = &(*pp)->next;
			half_drop(l, pp);
		}
	}
}

/* Read what the half-open connections sent; complete ones become ready. */
static void read_halves(struct tcpf_listener *l)
{
	uint64_t now = mono_ns();
	uint64_t limit = (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;

	for (struct tcpf_half **pp = &l->half; *pp;) {
		struct tcpf_half *h = *pp;
		int got = half_read(h);

		if (got < 0) {
			half_drop(l, pp);
			continue;
		}
		if (got > 0) {
			*pp = h->next;
			(void)sys.epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
			l->nhalf--;
			ready_append(l, h);
			continue;
		}
		if (now - h->since_ns > limit) {
			half_drop(l, pp);
			continue;
		}
		pp = &h->next;
	}
}

static int tcpf_get_connreq(struct oti_listener *ol, struct oti_connreq **req, void *pdata,
			    size_t *pdata_len, struct sockaddr_storage *peer)
{
	struct tcpf_listener *l = LS(ol);

	if (!l->ready) {
		if (l->taking)
			take_new(l);
		read_halves(l);
	}
	struct tcpf_half *h = l->ready;

	if (!h)
		return -EAGAIN;
	l->ready = h->next;
	if (!l->ready)
		l->ready_tail = NULL;
	h->next = l->given;
	l->given = h;
	*pdata_len = h->need - TCPF_HDR_LEN;
	memcpy(pdata, h->buf + TCPF_HDR_LEN, *pdata_len);
	*peer = h->peer;
	*req = (struct oti_connreq *)h;
	return 0;
}

static int tcpf_reject(struct oti_listener *ol, struct oti_connreq *req, const void *pdata,
		       size_t len)
{
	half_unlink(&LS(ol)->given, &req->h);
	if (len > OTI_MAX_PRIVATE_DATA)
		len = OTI_MAX_PRIVATE_DATA;
	reject_fd(req->h.fd, pdata, len);
	free(req);
	return 0;
}

static void tcpf_listener_close(struct oti_listener *ol)
{
	struct tcpf_listener *l = LS(ol);

	fdspace_close(l->lfd);
	while (l->half)
		half_drop(l, &l->half);
	/* Requests nobody answered are refused. */
	for (struct tcpf_half **list = &l->ready; list; list = list == &l->ready ? &l->given : NULL) {
		while (*list) {
			struct tcpf_half *h = *list;

			*list = h->next;
			reject_fd(h->fd, NULL, 0);
			free(h);
		}
	}
	fdspace_close(l->epfd);
	free(l);
	atomic_fetch_sub(&tcpf_objects, 1);
}

static void tcpf_listener_take(struct oti_listener *ol, bool on)
{
	struct tcpf_listener *l = LS(ol);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	if (on == l->taking)
		return;
	/* ADD can fail only for want of memory: the listener then keeps
	 * not taking, and is asked again at the next accept. */
	if (sys.epoll_ctl(l->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->lfd, &ev) == 0 || !on)
		l->taking = on;
}

/* The requests in list were taken by the parent: this process's copies
 * of their descriptors go (a close, not a shutdown, which would end the
 * parent's connection), and so do the records. */
static void forget_list(struct tcpf_half **list)
{
	while (*list) {
		struct tcpf_half *h = *list;

		*list = h->next;
		fdspace_close(h->fd);
		free(h);
	}
}

static int tcpf_listener_forked(struct oti_listener *ol)
{
	struct tcpf_listener *l = LS(ol);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	forget_list(&l->half);
	forget_list(&l->ready);
	forget_list(&l->given);
	l->ready_tail = NULL;
	l->nhalf = 0;
	/* The inherited epoll instance is the parent's too: closing this
	 * copy leaves its registrations alone. */
	fdspace_close(l->epfd);
	l->epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));
	if (l->epfd < 0)
		return l->epfd;
	if (l->taking && sys.epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev) < 0)
		l->taking = false;
	return 0;
}

/* --- endpoints ---------------------------------------------------------------- */

static struct tcpf_ep *ep_new(int fd, uint16_t off)
{
	struct tcpf_ep *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->fd = fd;
	e->port_off = off;
	atomic_fetch_add(&tcpf_objects, 1);
	return e;
}

static int tcpf_ep_accept_open(struct oti_listener *ol, struct oti_connreq *req,
			       struct oti_ep **out)
{
	struct tcpf_listener *l = LS(ol);
	struct tcpf_ep *e = ep_new(req->h.fd, l->port_off);
	socklen_t len = sizeof(e->local);

	half_unlink(&l->given, &req->h);
	if (!e) {
		fdspace_close(req->h.fd);
		free(req);
		return -ENOMEM;
	}
	e->state = TS_PASSIVE;
	e->tcp_up = true;
	e->peer = req->h.peer;
	if (sys.getsockname(e->fd, (struct sockaddr *)&e->local, &len) == 0)
		epq_set_port(&e->local, tcp_to_app(epq_get_port(&e->local), l->port_off));
	free(req);
	*out = (struct oti_ep *)e;
	return 0;
}

static int tcpf_accept(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state != TS_PASSIVE)
		return -EINVAL;
	if (len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	struct tcpf_hdr h = { .type = TCPF_ACCEPT, .len = (uint32_t)len };
	int ret = queue_pdata_frame(e, &h, pdata);

	if (ret)
		return ret;
	e->state = TS_UP;
	epq_push_event(&e->q, OTI_EV_ESTABLISHED, 0, NULL, 0);
	flush_out(e);
	return 0;
}

/* Before accept() nothing of ours is on the stream yet. */
static int tcpf_ep_reject(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state != TS_PASSIVE || len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	send_reject(e->fd, pdata, len);
	e->state = TS_DOWN;
	return 0;
}

static int tcpf_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
			socklen_t srclen, struct oti_ep **out)
{
	struct sockaddr_storage to;
	uint16_t off = port_offset(), app;
	int ret = epq_check_addr(dst, dstlen);

	if (ret)
		return ret;
	if (src && (ret = epq_check_addr(src, srclen)))
		return ret;
	if (src && src->sa_family != dst->sa_family)
		return -EAFNOSUPPORT;
	memcpy(&to, dst, epq_sa_len(dst->sa_family));
	app = epq_get_port(&to);
	if (!app_to_tcp(app, off))
		return -ECONNREFUSED;	/* no SDP listener can have that port */
	epq_set_port(&to, app_to_tcp(app, off));

	int fd = tcp_socket(dst->sa_family);

	if (fd < 0)
		return fd;
	if (src) {
		struct sockaddr_storage from;
		int one = 1;

		/* The source address only: TCP picks the port at connect. */
		memcpy(&from, src, epq_sa_len(src->sa_family));
		epq_set_port(&from, 0);
		(void)sys.setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (sys.bind(fd, (struct sockaddr *)&from, epq_sa_len(from.ss_family)) < 0) {
			ret = -errno;
			fdspace_close(fd);
			return ret;
		}
	}
	if (sys.connect(fd, (struct sockaddr *)&to, epq_sa_len(to.ss_family)) < 0 && errno != EINPROGRESS) {
		ret = -errno;
		fdspace_close(fd);
		return ret == -EAGAIN ? -EADDRNOTAVAIL : ret;	/* no ephemeral port left */
	}
	struct tcpf_ep *e = ep_new(fd, off);

	if (!e) {
		fdspace_close(fd);
		return -ENOMEM;
	}
	e->state = TS_ACTIVE;
	memcpy(&e->peer, dst, epq_sa_len(dst->sa_family));
	/* Nothing to resolve: the engine may register and post now. */
	epq_push_event(&e->q, OTI_EV_RESOLVED, 0, NULL, 0);
	*out = (struct oti_ep *)e;
	return 0;
}

static int tcpf_connect(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state != TS_ACTIVE || e->connect_queued)
		return e->state == TS_DOWN ? -ENOTCONN : -EINVAL;
	if (len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	struct tcpf_hdr h = { .type = TCPF_CONNECT, .len = (uint32_t)len, .key = TCPF_MAGIC,
			      .id = TCPF_PROTO };
	int ret = queue_pdata_frame(e, &h, pdata);

	if (ret)
		return ret;
	e->connect_queued = true;
	flush_out(e);
	return 0;
}

static int tcpf_ep_names(struct oti_ep *oep, struct sockaddr_storage *local,
			 struct sockaddr_storage *peer)
{
	struct tcpf_ep *e = EP(oep);

	if (local) {
		if (e->local.ss_family == AF_UNSPEC) {
			socklen_t len = sizeof(e->local);

			/* Active: the local address TCP chose (the port is
			 * not an application port: see PORT SCHEME). */
			if (sys.getsockname(e->fd, (struct sockaddr *)&e->local, &len) < 0)
				return -errno;
		}
		*local = e->local;
	}
	if (peer)
		*peer = e->peer;
	return 0;
}

static int tcpf_ep_fd(struct oti_ep *oep)
{
	return EP(oep)->fd;
}

static int tcpf_ep_arm(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	/* Bytes imported are input the socket will not report. */
	return e->q.ev_count || e->q.cq_count || e->down_held || e->pre ? -EAGAIN : 0;
}

static short tcpf_ep_wait_events(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state == TS_DOWN || e->state == TS_PASSIVE)
		return 0;
	/* Writability also tells how an active connect went. */
	return POLLIN | (e->out_head ? POLLOUT : 0);
}

static int tcpf_get_event(struct oti_ep *oep, struct oti_event *ev)
{
	struct tcpf_ep *e = EP(oep);

	if (!e->q.ev_count) {
		ep_progress(e);
		e->just_read = true;
	}
	if (!e->q.ev_count && e->down_held && !e->q.cq_count) {
		e->down_held = false;
		epq_push_event(&e->q, OTI_EV_DISCONNECTED, e->down_status, NULL, 0);
	}
	return epq_pop_event(&e->q, ev) ? 0 : -EAGAIN;
}

static void tcpf_drive_begin(struct oti_ep *oep, bool read)
{
	struct tcpf_ep *e = EP(oep);

	e->driving = true;
	e->rx_empty = !read;
	e->empty_reads = 0;
}

static unsigned tcpf_drive_end(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	e->driving = e->rx_empty = false;
	return e->empty_reads;
}

static int tcpf_poll_cq(struct oti_ep *oep, struct oti_wc *wc, int n)
{
	struct tcpf_ep *e = EP(oep);

	if (e->q.cq_count < (uint32_t)n && !e->just_read)
		ep_progress(e);
	e->just_read = false;
	return epq_pop_wcs(&e->q, wc, n);
}

/* --- data ------------------------------------------------------------------ */

static int random_key(uint32_t *key)
{
	ssize_t n;

	do {
		n = getrandom(key, sizeof(*key), GRND_NONBLOCK);
	} while (n < 0 && errno == EINTR);
	/* Never a predictable key: without randomness, no registration. */
	return n == (ssize_t)sizeof(*key) ? 0 : n < 0 ? -errno : -EIO;
}

static int tcpf_mr_reg(struct oti_ep *oep, void *addr, size_t len, unsigned access,
		       struct oti_mr **out)
{
	struct tcpf_ep *e = EP(oep);
	struct tcpf_mr *mr;
	uint32_t key;
	int ret;

	if (!addr || !len || len > TCPF_MAX_MSG)
		return -EINVAL;
	do {
		ret = random_key(&key);
		if (ret)
			return ret;
	} while (!key || find_mr(e, key));
	if (e->nmrs == e->mrs_cap) {
		unsigned ncap = e->mrs_cap ? e->mrs_cap * 2 : 8;
		struct tcpf_mr **n = realloc(e->mrs, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		e->mrs = n;
		e->mrs_cap = ncap;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->pub = (struct oti_mr){ .addr = addr, .len = len, .rkey = key, .raddr_base = 0,
				   .access = access };
	mr->ep = e;
	e->mrs[e->nmrs++] = mr;
	*out = &mr->pub;
	return 0;
}

static int tcpf_mr_dereg(struct oti_mr *pub)
{
	struct tcpf_mr *mr = (struct tcpf_mr *)pub;
	struct tcpf_ep *e = mr->ep;

	if (e) {
		for (unsigned i = 0; i < e->nmrs; i++) {
			if (e->mrs[i] == mr) {
				e->mrs[i] = e->mrs[--e->nmrs];
				break;
			}
		}
		/* An answer to the peer's read still going out of this
		 * region keeps what it has left to send. */
		for (struct tcpf_out *o = e->out_head; o; o = o->next) {
			if (o->src != mr)
				continue;
			uint8_t *copy = malloc(o->len);

			o->src = NULL;
			e->resp_queued--;
			if (!copy) {
				go_down(e, DOWN_ABORT, -ENOMEM);
				break;
			}
			memcpy(copy, o->data, o->len);
			o->owned = copy;
			o->data = copy;
		}
	}
	free(mr);
	return 0;
}

/* Work posted on a connection that is over completes at once (its CQ
 * place is kept already). */
static bool posted_on_dead(struct tcpf_ep *e, uint64_t ctx, enum oti_wc_op op)
{
	if (e->state != TS_DOWN)
		return false;
	epq_push_wc(&e->q, ctx, op, -ECANCELED, 0);
	return true;
}

static int tcpf_post_recv(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx)
{
	struct tcpf_ep *e = EP(oep);

	return epq_post_recv(&e->q, sge, ctx, e->state == TS_DOWN);
}

/* A frame that carries local memory out: SEND or WRITE. */
static int post_out(struct tcpf_ep *e, const struct tcpf_hdr *h, const struct oti_sge *sge,
		    enum oti_wc_op op, uint64_t ctx)
{
	if (!sge || (!sge->addr && sge->len) || sge->len > TCPF_MAX_MSG)
		return -EINVAL;
	if (e->state == TS_ACTIVE || e->state == TS_PASSIVE)
		return -ENOTCONN;
	if (epq_cq_reserve(&e->q))
		return -ENOMEM;
	if (posted_on_dead(e, ctx, op))
		return 0;
	int ret = queue_frame(e, h, sge->addr, true, op, ctx);

	if (ret) {
		e->q.cq_owed--;
		return ret;
	}
	flush_out(e);
	return 0;
}

/* The whole pages of [lo, hi) back to the kernel. */
static void give_back(uintptr_t lo, uintptr_t hi)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	lo = (lo + pg - 1) & ~(pg - 1);
	hi &= ~(pg - 1);
	if (hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Registrations pin nothing here, so an idle connection's buffers cost
 * only what was touched, and can stop costing that.  A frame read_in()
 * is in the middle of has its first bytes in its posted buffer. */
static void tcpf_mem_idle(struct oti_ep *oep, void *addr, size_t len)
{
	struct tcpf_ep *e = EP(oep);
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;

	if (e->in_frame && e->dst) {
		uintptr_t d = (uintptr_t)e->dst, dend = d + e->cur.len;

		if (d < hi && dend > lo) {
			give_back(lo, d > lo ? d : lo);
			give_back(dend < hi ? dend : hi, hi);
			return;
		}
	}
	give_back(lo, hi);
}

static int tcpf_post_send(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx,
			  unsigned flags)
{
	struct tcpf_hdr h = { .type = TCPF_SEND, .len = sge ? sge->len : 0 };

	(void)flags;
	return post_out(EP(oep), &h, sge, OTI_WC_SEND, ctx);
}

static int tcpf_rdma_write(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
			   uint32_t rkey, uint64_t ctx)
{
	struct tcpf_hdr h = { .type = TCPF_WRITE, .len = local ? local->len : 0, .key = rkey,
			      .addr = raddr };

	return post_out(EP(oep), &h, local, OTI_WC_RDMA_WRITE, ctx);
}

static int tcpf_rdma_read(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
			  uint32_t rkey, uint64_t ctx)
{
	struct tcpf_ep *e = EP(oep);

	if (!local || !local->addr || !local->len || local->len > TCPF_MAX_MSG)
		return -EINVAL;
	if (e->state == TS_ACTIVE || e->state == TS_PASSIVE)
		return -ENOTCONN;
	if (e->rd_count == TCPF_MAX_READS)
		return -EAGAIN;
	if (epq_cq_reserve(&e->q))
		return -ENOMEM;
	if (posted_on_dead(e, ctx, OTI_WC_RDMA_READ))
		return 0;
	struct tcpf_out *o = out_new(e);

	if (!o) {
		e->q.cq_owed--;
		return -ENOMEM;
	}
	uint32_t id = e->rd_next_id++;
	struct tcpf_hdr h = { .type = TCPF_READ_REQ, .len = 4, .key = rkey, .id = id,
			      .addr = raddr };

	tcpf_hdr_put(o->hdr, &h);
	tcpf_put32(o->small, local->len);
	o->data = o->small;
	o->len = 4;
	out_append(e, o);
	e->rd[(e->rd_head + e->rd_count++) % TCPF_MAX_READS] =
		(struct tcpf_read){ .id = id, .addr = local->addr, .len = local->len, .ctx = ctx };
	flush_out(e);
	return 0;
}

/* --- teardown ---------------------------------------------------------------- */

static int tcpf_disconnect(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state == TS_DOWN)
		return 0;
	if (e->state != TS_UP)
		return -ENOTCONN;
	e->shut_wanted = true;
	ep_progress(e);
	return 0;
}

/* Everything of e but its socket, which the caller closes or gives away. */
static void ep_free(struct tcpf_ep *e)
{
	for (unsigned i = 0; i < e->nmrs; i++)
		e->mrs[i]->ep = NULL;
	while (e->out_head) {
		struct tcpf_out *o = e->out_head;

		e->out_head = o->next;
		free(o->owned);
		free(o);
	}
	while (e->out_free) {
		struct tcpf_out *o = e->out_free;

		e->out_free = o->next;
		free(o);
	}
	free(e->mrs);
	epq_free(&e->q);
	free(e->ib);
	free(e->pre);
	free(e);
	atomic_fetch_sub(&tcpf_objects, 1);
}

static void tcpf_ep_close(struct oti_ep *oep)
{
	struct tcpf_ep *e = EP(oep);

	fdspace_close(e->fd);
	ep_free(e);
}

/* --- moving to another process --------------------------------------------- */

/*
 * An endpoint's state between processes (ep_export, ep_import).  The TCP
 * connection itself is the descriptor, whose byte stream goes on where it
 * stopped: the peer takes no part in the move.  What the ep had read of
 * it and not yet acted on (the start of a frame) follows the record as
 * bytes of that stream, and is read again before the socket.  Both ends
 * of a move are the same build of libsdp on the same host (a fork child,
 * or an exec of the same library): the record is in host order, checked
 * by its magic and size.
 */
#define TCPF_EXPORT_MAGIC 0x53445045u	/* "SDPE" */

struct tcpf_export {
	uint32_t magic;
	uint32_t size;		/* sizeof(struct tcpf_export) */
	uint32_t rd_next_id;
	uint32_t pending;	/* stream bytes after the record */
	uint16_t port_off;
	struct sockaddr_storage local, peer;
};

static int tcpf_ep_export(struct oti_ep *oep, void **blob, size_t *len, int *fd)
{
	struct tcpf_ep *e = EP(oep);

	if (e->state != TS_UP || e->shut_wanted)
		return -ENOTCONN;
	if (e->out_head || e->rd_count || e->q.ev_count || e->q.cq_count)
		return -EBUSY;
	/* A SEND's bytes are in a receive buffer the engine posts again; a
	 * WRITE has begun to land in a registration that stays here. */
	if (e->in_frame && e->dst && e->cur.type != TCPF_SEND)
		return -EBUSY;

	uint32_t part = e->in_frame ? TCPF_HDR_LEN + e->got : 0;
	uint32_t ibuf = e->ib ? e->ib_len - e->ib_off : 0;
	uint32_t pre = e->pre ? e->pre_len - e->pre_off : 0;
	struct tcpf_export x = {
		.magic = TCPF_EXPORT_MAGIC,
		.size = sizeof(x),
		.rd_next_id = e->rd_next_id,
		.pending = part + ibuf + pre,
		.port_off = e->port_off,
		.local = e->local,
		.peer = e->peer,
	};
	uint8_t *b = malloc(sizeof(x) + x.pending), *p;

	if (!b)
		return -ENOMEM;
	memcpy(b, &x, sizeof(x));
	p = b + sizeof(x);
	/* In the stream's order: the frame begun, what was read after it,
	 * what an earlier import had not given out yet. */
	if (part) {
		tcpf_hdr_put(p, &e->cur);
		memcpy(p + TCPF_HDR_LEN, e->dst ? e->dst : e->ctl, e->got);
		p += part;
	}
	if (ibuf) {
		memcpy(p, e->ib + e->ib_off, ibuf);
		p += ibuf;
	}
	if (pre)
		memcpy(p, e->pre + e->pre_off, pre);
	*blob = b;
	*len = sizeof(x) + x.pending;
	*fd = e->fd;
	ep_free(e);
	return 0;
}

static int tcpf_ep_import(const void *blob, size_t len, int fd, struct oti_ep **out)
{
	struct tcpf_export x;
	struct tcpf_ep *e;
	int type = 0;
	socklen_t tl = sizeof(type);

	if (!blob || len < sizeof(x))
		goto inval;
	memcpy(&x, blob, sizeof(x));
	if (x.magic != TCPF_EXPORT_MAGIC || x.size != sizeof(x) ||
	    x.pending != len - sizeof(x) || x.pending > TCPF_MAX_MSG ||
	    (x.peer.ss_family != AF_INET && x.peer.ss_family != AF_INET6))
		goto inval;
	if (sys.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
		goto inval;
	e = ep_new(fd, x.port_off);
	if (!e) {
		fdspace_close(fd);
		return -ENOMEM;
	}
	if (x.pending) {
		e->pre = malloc(x.pending);
		if (!e->pre) {
			tcpf_ep_close((struct oti_ep *)e);
			return -ENOMEM;
		}
		memcpy(e->pre, (const uint8_t *)blob + sizeof(x), x.pending);
		e->pre_len = x.pending;
	}
	e->state = TS_UP;
	e->tcp_up = true;
	e->rd_next_id = x.rd_next_id;
	e->local = x.local;
	e->peer = x.peer;
	*out = (struct oti_ep *)e;
	return 0;
inval:
	fdspace_close(fd);
	return -EINVAL;
}

const struct oti_ops tcpf_transport_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "tcp-fallback",
	.init = tcpf_init,
	.fini = tcpf_fini,
	.probe = tcpf_probe,
	.query_caps = tcpf_query_caps,
	.listen = tcpf_listen,
	.listener_name = tcpf_listener_name,
	.listener_fd = tcpf_listener_fd,
	.listener_arm = tcpf_listener_arm,
	.get_connreq = tcpf_get_connreq,
	.reject = tcpf_reject,
	.listener_close = tcpf_listener_close,
	.listener_take = tcpf_listener_take,
	.listener_forked = tcpf_listener_forked,
	.ep_accept_open = tcpf_ep_accept_open,
	.accept = tcpf_accept,
	.ep_reject = tcpf_ep_reject,
	.ep_open = tcpf_ep_open,
	.connect = tcpf_connect,
	.ep_names = tcpf_ep_names,
	.ep_fd = tcpf_ep_fd,
	.ep_arm = tcpf_ep_arm,
	.ep_wait_events = tcpf_ep_wait_events,
	.get_event = tcpf_get_event,
	.poll_cq = tcpf_poll_cq,
	.drive_begin = tcpf_drive_begin,
	.drive_end = tcpf_drive_end,
	.mr_reg = tcpf_mr_reg,
	.mr_dereg = tcpf_mr_dereg,
	.post_recv = tcpf_post_recv,
	.post_send = tcpf_post_send,
	.rdma_read = tcpf_rdma_read,
	.rdma_write = tcpf_rdma_write,
	.mem_idle = tcpf_mem_idle,
	.disconnect = tcpf_disconnect,
	.ep_close = tcpf_ep_close,
	.ep_export = tcpf_ep_export,
	.ep_import = tcpf_ep_import,
	.ep_fd_dead = tcpf_ep_fd_dead,
	.ep_quiet = tcpf_ep_quiet,
};
