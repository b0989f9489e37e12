/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The SDP protocol on one connection: Hello/HelloAck in the transport's
 * private data, credit flow control, segmentation into the peer's buffers
 * (Bcopy), reassembly into the user's buffer, DisConn half-close and
 * abortive close.  Read Zcopy (SrcAvail, RDMA read, RdmaRdCompl, SendSM,
 * SrcAvailCancel) is in zcopy.c, Write Zcopy and Transaction mode
 * (SinkAvail, RDMA write, RdmaWrCompl, SinkAvailCancel, SinkCancelAck) in
 * write_zcopy.c, the modes and ModeChange in mode.c; this file hands them
 * their messages and completions.  Every function here runs with the
 * socket's lock held.
 *
 * Both sides advertise max_adverts = 1: one SrcAvail and one SinkAvail at
 * a time per direction.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "engine.h"
#include "log.h"
#include "tunables.h"

#define LOGSYS "conn"

static void conn_post_failed(struct sdp_sock *s, int ret, bool data);
static void conn_flush(struct sdp_sock *s);

static uint8_t *rx_buf(struct sdp_conn *c, uint32_t slot)
{
	return c->rx_mem + (size_t)slot * c->rx_size;
}

/* Where a queued segment's bytes are. */
static uint8_t *seg_buf(struct sdp_conn *c, const struct sdp_rx_seg *seg)
{
	if (seg->slot == SDP_SLOT_STAGE)
		return c->stage_mem;
	return rx_buf(c, seg->slot);
}

static uint8_t *tx_buf(struct sdp_conn *c, uint32_t slot)
{
	return c->tx_mem + (size_t)slot * c->tx_size;
}

static uint32_t tx_payload_max(const struct sdp_conn *c)
{
	return c->tx_size - SDP_BSDH_LEN;
}

/* --- set-up ------------------------------------------------------------- */

static struct sdp_conn *conn_new(void)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));

	if (c) {
		c->ep_fd = -1;
		mode_init(c);
	}
	return c;
}

static int conn_post_rx(struct sdp_conn *c, uint32_t slot)
{
	struct oti_sge sge = {
		.addr = rx_buf(c, slot), .len = c->rx_size, .mr = c->rx_mr,
	};

	return c->t->post_recv(c->ep, &sge, SDP_CTX_RX | slot);
}

/* A consumed receive buffer goes back to the transport; the peer may
 * learn of it. */
static int conn_post_again(struct sdp_sock *s, uint32_t slot)
{
	struct sdp_conn *c = s->conn;
	int ret = conn_post_rx(c, slot);

	if (ret) {
		conn_post_failed(s, ret, false);
		return ret;
	}
	sdp_credits_on_repost(&c->cr);
	return 0;
}

/*
 * Once the transport connection is down there is nobody to receive from:
 * the buffer just retires.  Beyond SO_RCVBUF's count it waits, unposted,
 * until the option grows again.
 */
static int conn_repost(struct sdp_sock *s, uint32_t slot)
{
	struct sdp_conn *c = s->conn;

	if (c->transport_down || c->post_failed)
		return 0;
	if (c->cr.posted >= c->rx_max) {
		c->rx_idle[c->nidle++] = slot;
		return 0;
	}
	return conn_post_again(s, slot);
}

/*
 * SO_RCVBUF and SO_SNDBUF in buffers (sock.c, "SO_SNDBUF and SO_RCVBUF").
 * A set SO_RCVBUF of `budget` bytes is what the peer may send before we
 * read: the credits of all but the two buffers the peer keeps in reserve
 * for control messages (credits.h), so ceil(budget / payload) + 2 buffers,
 * never fewer than four (two data messages in flight) nor more than the
 * recv_bufs tunable may be set to.  Before the handshake the buffer size
 * is ours to choose: a small budget gets smaller buffers, four for data,
 * down to SDP_RX_SIZE_MIN (every control message, and a SinkAvail
 * carrying a Transaction request, fit with room to spare).  A set
 * SO_SNDBUF sizes the send ring to hold it.
 */
#define SDP_BUFS_MIN 4
#define SDP_BUFS_MAX 1024	/* recv_bufs' and send_bufs' maxima */
#define SDP_RX_RESERVE 2
#define SDP_RX_SMALL_DATA_BUFS 4
#define SDP_RX_SIZE_MIN 1040	/* buf_size's minimum */

static uint32_t bufs_for(uint64_t budget, uint32_t size, uint32_t extra)
{
	uint64_t n = (budget + size - SDP_BSDH_LEN - 1) / (size - SDP_BSDH_LEN) + extra;

	return n < SDP_BUFS_MIN ? SDP_BUFS_MIN : n > SDP_BUFS_MAX ? SDP_BUFS_MAX : (uint32_t)n;
}

static uint32_t rx_size_for(uint64_t budget)
{
	uint64_t size = budget / SDP_RX_SMALL_DATA_BUFS + SDP_BSDH_LEN;
	uint64_t cap = (uint64_t)tun_int(TUN_buf_size);

	return size < SDP_RX_SIZE_MIN ? SDP_RX_SIZE_MIN : size > cap ? (uint32_t)cap : (uint32_t)size;
}

/* Buffers to keep posted for s's SO_RCVBUF, at most the ring. */
static uint32_t rx_max_for(const struct sdp_sock *s, const struct sdp_conn *c)
{
	if (!s->rcvbuf_set)
		return c->nrx;
	uint32_t n = bufs_for((uint64_t)s->rcvbuf, c->rx_size, SDP_RX_RESERVE);

	return n < c->nrx ? n : c->nrx;
}

void conn_rcvbuf_changed(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->rx_idle)
		return;
	/* What is posted stays posted: the peer may already be using it. */
	c->rx_max = rx_max_for(s, c);
	if (s->state != SDP_S_ESTABLISHED || c->transport_down || c->post_failed)
		return;
	while (c->nidle && c->cr.posted < c->rx_max) {
		if (conn_post_again(s, c->rx_idle[--c->nidle]))
			return;
	}
	conn_flush(s);
}

/* Receive ring and control slots, for s's SO_RCVBUF; must precede the
 * Hello or HelloAck, whose bufs field promises these buffers. */
static int conn_setup_rx(struct sdp_conn *c, const struct sdp_sock *s)
{
	struct oti_caps caps;
	int ret;

	c->t->query_caps(&caps);
	c->nrx = (uint32_t)tun_int(TUN_recv_bufs);
	c->rx_size = (uint32_t)tun_int(TUN_buf_size);
	if (s->rcvbuf_set) {
		c->rx_size = rx_size_for((uint64_t)s->rcvbuf);
		c->nrx = bufs_for((uint64_t)s->rcvbuf, c->rx_size, SDP_RX_RESERVE);
	}
	if (caps.max_recv_wr && c->nrx > caps.max_recv_wr)
		c->nrx = caps.max_recv_wr;
	c->rx_max = c->nrx;
	c->rx_mem = aligned_alloc(4096, ((size_t)c->nrx * c->rx_size + 4095) & ~(size_t)4095);
	c->rxq_cap = c->nrx + 2;
	c->rxq = calloc(c->rxq_cap, sizeof(*c->rxq));
	c->rx_idle = calloc(c->nrx, sizeof(*c->rx_idle));
	if (!c->rx_mem || !c->rxq || !c->rx_idle)
		return -ENOMEM;
	ret = c->t->mr_reg(c->ep, c->rx_mem, (size_t)c->nrx * c->rx_size,
			   OTI_ACCESS_LOCAL_WRITE, &c->rx_mr);
	if (ret)
		return ret;
	ret = c->t->mr_reg(c->ep, c->ctrl_mem, sizeof(c->ctrl_mem), 0, &c->ctrl_mr);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < c->nrx; i++) {
		ret = conn_post_rx(c, i);
		if (ret)
			return ret;
	}
	return 0;
}

/* Send ring, sized for the peer's receive buffers and s's SO_SNDBUF
 * (plus one buffer: the first may be partly sent already). */
static int conn_setup_tx(struct sdp_conn *c, uint32_t peer_rcvsz, const struct sdp_sock *s)
{
	uint32_t cap = (uint32_t)tun_int(TUN_buf_size);
	int ret;

	c->tx_size = peer_rcvsz < cap ? peer_rcvsz : cap;
	c->ntx = (uint32_t)tun_int(TUN_send_bufs);
	if (s->sndbuf_set)
		c->ntx = bufs_for((uint64_t)s->sndbuf, c->tx_size, 1);
	c->tx_mem = aligned_alloc(4096, ((size_t)c->ntx * c->tx_size + 4095) & ~(size_t)4095);
	c->tx_len = calloc(c->ntx, sizeof(*c->tx_len));
	if (!c->tx_mem || !c->tx_len)
		return -ENOMEM;
	ret = c->t->mr_reg(c->ep, c->tx_mem, (size_t)c->ntx * c->tx_size, 0, &c->tx_mr);
	return ret;
}

/*
 * The transport will report nothing more on this ep: take its fd out of
 * the progress thread's set (an fd that is never armed again would keep
 * it awake).  Children are in the set on their listener's behalf.
 */
static void conn_leave_progress(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (c->in_progress_set) {
		progress_del(s->parent ? s->parent : s, c->ep_fd);
		c->in_progress_set = false;
	}
}

void conn_free(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c)
		return;
	conn_leave_progress(s);
	if (c->ep)
		c->t->ep_close(c->ep);
	zc_conn_free(c);
	wz_conn_free(c);
	if (c->rx_mr)
		c->t->mr_dereg(c->rx_mr);
	if (c->tx_mr)
		c->t->mr_dereg(c->tx_mr);
	if (c->ctrl_mr)
		c->t->mr_dereg(c->ctrl_mr);
	free(c->rx_mem);
	free(c->rxq);
	free(c->rx_idle);
	free(c->tx_mem);
	free(c->tx_len);
	free(c);
	s->conn = NULL;
}

static void addr_to_in6(const struct sockaddr_storage *ss, struct in6_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (ss->ss_family == AF_INET)
		memcpy(&out->s6_addr[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
	else if (ss->ss_family == AF_INET6)
		*out = ((const struct sockaddr_in6 *)ss)->sin6_addr;
}

/* --- teardown ------------------------------------------------------------- */

void conn_kill_ep(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->ep)
		return;
	conn_leave_progress(s);
	c->t->ep_close(c->ep);
	c->ep = NULL;
	c->ep_fd = -1;
	c->transport_down = true;
	c->disconnected = true;
	sock_changed(s, false);
}

static void conn_transport_down(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || c->transport_down)
		return;
	c->transport_down = true;
	if (c->ep)
		c->t->disconnect(c->ep);
}

/* The connection ended abnormally: err (positive) is what the
 * application will see once. */
static void conn_set_reset(struct sdp_sock *s, int err)
{
	if (s->state == SDP_S_CLOSED && s->reset)
		return;
	if (s->state == SDP_S_ESTABLISHED)
		SDP_STAT_INC(resets, 1);
	s->reset = true;
	sdp_dbg(LOGSYS, "sd %d: connection reset (%s)%s", s->sd, strerror(err),
		s->app_closed ? ", after close" : "");
	if (!s->app_closed)
		s->so_error = err;
	s->state = SDP_S_CLOSED;
	/* Data not yet sent is lost, as with a TCP reset. */
	if (s->conn) {
		s->conn->tx_filled = s->conn->tx_posted;
		s->conn->ctrl_pending = 0;
	}
	sock_changed(s, true);
}

void conn_abort(struct sdp_sock *s, int err)
{
	conn_set_reset(s, err);
	conn_transport_down(s);
}

/*
 * A transport post failed.  Our data lost is a reset.  A credit update or
 * a receive that cannot be posted usually means the peer's transport went
 * away, maybe in its orderly close whose DisConn is still in our completion
 * queue: stop posting and let the DISCONNECTED event, which comes after
 * those completions, tell an orderly close from a reset (with a deadline
 * in case it never comes).  The application never sees the transport's
 * own errno.
 */
static void conn_post_failed(struct sdp_sock *s, int ret, bool data)
{
	struct sdp_conn *c = s->conn;

	sdp_dbg(LOGSYS, "sd %d: transport post failed: %d", s->sd, ret);
	if (data) {
		conn_abort(s, ECONNRESET);
		return;
	}
	if (c->post_failed)
		return;
	c->post_failed = true;
	c->ctrl_pending = 0;
	c->deadline_ns = sdp_now_ns() + 1000000000ull;
	progress_watch(s);
}

void conn_protocol_error(struct sdp_sock *s, const char *why)
{
	SDP_STAT_INC(protocol_errors, 1);
	sdp_warn(LOGSYS, "sd %d: protocol error from peer: %s; aborting the connection",
		 s->sd, why);
	conn_abort(s, ECONNRESET);
}

bool conn_finished(const struct sdp_sock *s)
{
	return !s->conn || s->conn->transport_down || s->state != SDP_S_ESTABLISHED;
}

/* --- sending -------------------------------------------------------------- */

static void conn_fill_bsdh(struct sdp_conn *c, void *buf, uint8_t mid, uint8_t flags,
			   uint32_t len)
{
	struct sdp_bsdh h = {
		.mid = mid,
		.flags = flags,
		.bufs = (uint16_t)(c->cr.posted > 0xffff ? 0xffff : c->cr.posted),
		.len = len,
		.mseq_ack = c->cr.last_rx_mseq,
	};

	h.mseq = sdp_credits_on_send(&c->cr);
	sdp_bsdh_encode(buf, &h);
}

static int conn_post_ctrl_flags(struct sdp_sock *s, uint8_t mid, uint8_t flags, const void *ext,
				size_t extlen)
{
	struct sdp_conn *c = s->conn;
	uint32_t slot = c->ctrl_posted % SDP_CTRL_SLOTS;
	uint8_t *buf = c->ctrl_mem + slot * SDP_CTRL_SLOT_SIZE;
	struct oti_sge sge = { .addr = buf, .len = (uint32_t)(SDP_BSDH_LEN + extlen), .mr = c->ctrl_mr };
	int ret;

	if (!conn_fits(c, extlen)) {
		/* Our bug: the peer's buffer would be overrun. */
		sdp_err(LOGSYS, "sd %d: a %s of %u bytes does not fit the peer's %u-byte buffers",
			s->sd, sdp_mid_name(mid), sge.len, c->tx_size);
		conn_abort(s, ECONNRESET);
		return -EMSGSIZE;
	}
	if (ext)
		memcpy(buf + SDP_BSDH_LEN, ext, extlen);
	conn_fill_bsdh(c, buf, mid, flags, sge.len);
	ret = c->t->post_send(c->ep, &sge, SDP_CTX_CTRL | slot, OTI_SEND_INLINE);
	if (ret) {
		/* A SrcAvail and an RdmaWrCompl carry stream bytes: losing
		 * one is a reset. */
		conn_post_failed(s, ret, mid == SDP_MID_SRC_AVAIL || mid == SDP_MID_RDMA_WR_COMPL);
		return ret;
	}
	c->ctrl_posted++;
	SDP_STAT_INC(msgs_sent, 1);
	return 0;
}

int conn_post_ctrl(struct sdp_sock *s, uint8_t mid, const void *ext, size_t extlen)
{
	return conn_post_ctrl_flags(s, mid, 0, ext, extlen);
}

uint32_t conn_piggyback_max(const struct sdp_conn *c)
{
	return conn_fits(c, SDP_SINKAH_LEN) ? c->tx_size - SDP_BSDH_LEN - SDP_SINKAH_LEN : 0;
}

int conn_post_sink_avail(struct sdp_sock *s, const struct sdp_sinkah *a)
{
	struct sdp_conn *c = s->conn;
	uint8_t ext[SDP_SINKAH_LEN];

	sdp_sinkah_encode(ext, a);
	if (c->trans_held) {
		uint32_t slot = (c->tx_filled - 1) % c->ntx;

		c->trans_held = false;
		if (c->tx_posted + 1 == c->tx_filled && c->tx_len[slot] <= conn_piggyback_max(c) &&
		    sdp_can_send_data(&c->cr)) {
			/* The held request becomes the SinkAvail's payload, in
			 * place: BSDH, SinkAH, request. */
			uint8_t *buf = tx_buf(c, slot);
			struct oti_sge sge = {
				.addr = buf,
				.len = SDP_BSDH_LEN + SDP_SINKAH_LEN + c->tx_len[slot],
				.mr = c->tx_mr,
			};
			int ret;

			memmove(buf + SDP_BSDH_LEN + SDP_SINKAH_LEN, buf + SDP_BSDH_LEN,
				c->tx_len[slot]);
			memcpy(buf + SDP_BSDH_LEN, ext, sizeof(ext));
			conn_fill_bsdh(c, buf, SDP_MID_SINK_AVAIL, 0, sge.len);
			ret = c->t->post_send(c->ep, &sge, SDP_CTX_TX | slot, 0);
			if (ret) {
				conn_post_failed(s, ret, true);
				return ret;
			}
			c->tx_posted++;
			c->nond_sent++;
			c->psnk.active = false;	/* stream bytes: see write_zcopy.c */
			SDP_STAT_INC(msgs_sent, 1);
			SDP_STAT_INC(bytes_sent, c->tx_len[slot]);
			SDP_STAT_INC(trans_piggybacks, 1);
			return 0;
		}
		/* It does not fit: it goes first, on its own. */
		mode_note_trans_miss(s);
		conn_flush(s);
		if (c->post_failed || !ctrl_slot_free(c) || !sdp_can_send_ctrl(&c->cr))
			return -ENOBUFS;
	}
	return conn_post_ctrl(s, SDP_MID_SINK_AVAIL, ext, sizeof(ext));
}

bool ctrl_slot_free(const struct sdp_conn *c)
{
	return c->ctrl_posted - c->ctrl_done < SDP_CTRL_SLOTS;
}

/* Bytes a send may add under a set SO_SNDBUF: what is in the send
 * buffers, unsent or not yet completed, stays within it. */
static size_t conn_sndbuf_room(const struct sdp_sock *s)
{
	uint64_t queued = s->conn->tx_queued_bytes;

	if (!s->sndbuf_set)
		return SIZE_MAX;
	return queued < (uint64_t)s->sndbuf ? (size_t)((uint64_t)s->sndbuf - queued) : 0;
}

/* Too little SO_SNDBUF room for POLLOUT: as sk_stream_is_writeable(),
 * there must be room for half of what is queued, so that a poller wakes
 * to a useful amount of it. */
static bool conn_sndbuf_low(const struct sdp_sock *s)
{
	if (!s->sndbuf_set)
		return false;
	size_t room = conn_sndbuf_room(s);

	return !room || room < s->conn->tx_queued_bytes / 2;
}

/*
 * Hold a partly filled last buffer back while the application said more
 * is coming (MSG_MORE / TCP_CORK), or, as Linux's autocorking does, while
 * an earlier send is still in flight: its completion flushes the tail, so
 * a stream of small writes becomes few full messages (each costs a peer
 * buffer and a credit) and a lone request still leaves at once.
 */
static bool conn_hold_tail(const struct sdp_sock *s, const struct sdp_conn *c)
{
	uint32_t slot = (c->tx_filled - 1) % c->ntx;

	/* A Transaction request waits for our recv()'s SinkAvail. */
	if (c->trans_held)
		return true;
	if (c->tx_len[slot] >= tx_payload_max(c))
		return false;
	/* SO_SNDBUF is full: no more is coming until this goes, so it goes
	 * (tcp_sendmsg() pushes a corked tail before it waits for room). */
	if (conn_sndbuf_low(s))
		return false;
	return s->cork || c->tx_posted != c->tx_done;
}

/*
 * Post whatever may go now: data buffers while credits last, then control
 * messages (DisConn only once all data is out), then a credit update if
 * the peer is running short of buffers it knows about.
 */
static void conn_flush(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	bool sent = false;

	if (s->state != SDP_S_ESTABLISHED || c->transport_down || c->post_failed ||
	    c->await_first_rx)
		return;

	/* Nothing of the stream may overtake our SrcAvail's bytes: data
	 * waits until the sink is done with it. */
	while (c->tx_posted != c->tx_filled && !c->tx_sa.active) {
		if (c->tx_posted + 1 == c->tx_filled && conn_hold_tail(s, c))
			break;
		if (!sdp_can_send_data(&c->cr)) {
			SDP_STAT_INC(credit_stalls, 1);
			break;
		}
		uint32_t slot = c->tx_posted % c->ntx;
		uint8_t *buf = tx_buf(c, slot);
		struct oti_sge sge = {
			.addr = buf, .len = SDP_BSDH_LEN + c->tx_len[slot], .mr = c->tx_mr,
		};
		struct oti_caps caps;

		conn_fill_bsdh(c, buf, SDP_MID_DATA, 0, sge.len);
		c->t->query_caps(&caps);
		int ret = c->t->post_send(c->ep, &sge, SDP_CTX_TX | slot,
					  sge.len <= caps.max_inline ? OTI_SEND_INLINE : 0);
		if (ret) {
			conn_post_failed(s, ret, true);
			return;
		}
		c->tx_posted++;
		c->nond_sent++;
		/* Stream bytes by Data: the peer's advert is dropped unused
		 * (write_zcopy.c). */
		c->psnk.active = false;
		SDP_STAT_INC(msgs_sent, 1);
		SDP_STAT_INC(bytes_sent, c->tx_len[slot]);
		sent = true;
	}

	/* What we read of the peer's SrcAvail is reported before a SendSM
	 * that ends it. */
	if ((c->ctrl_pending & SDP_CTRL_RDMA_RD_COMPL) && ctrl_slot_free(c) &&
	    sdp_can_send_ctrl(&c->cr)) {
		uint8_t ext[SDP_U32H_LEN];

		sdp_u32h_encode(ext, c->rdcompl_bytes);
		if (conn_post_ctrl_flags(s, SDP_MID_RDMA_RD_COMPL, c->req_pipe ? SDP_FLAG_REQ_PIPE : 0,
					 ext, sizeof(ext)))
			return;
		c->req_pipe = false;
		c->rdcompl_bytes = 0;
		c->ctrl_pending &= ~SDP_CTRL_RDMA_RD_COMPL;
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_SEND_SM) && ctrl_slot_free(c) &&
	    sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_SEND_SM, NULL, 0))
			return;
		c->ctrl_pending &= ~SDP_CTRL_SEND_SM;
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_SRC_AVAIL_CANCEL) && ctrl_slot_free(c) &&
	    sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_SRC_AVAIL_CANCEL, NULL, 0))
			return;
		c->ctrl_pending &= ~SDP_CTRL_SRC_AVAIL_CANCEL;
		c->tx_sa.cancel_sent = true;
		SDP_STAT_INC(zcopy_cancels, 1);
		sent = true;
	}
	while (c->psnk_cancels && ctrl_slot_free(c) && sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_SINK_CANCEL_ACK, NULL, 0))
			return;
		c->psnk_cancels--;
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_SINK_AVAIL_CANCEL) && ctrl_slot_free(c) &&
	    sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_SINK_AVAIL_CANCEL, NULL, 0))
			return;
		c->ctrl_pending &= ~SDP_CTRL_SINK_AVAIL_CANCEL;
		c->snk.cancel_sent = true;
		c->snk_acks_due++;
		SDP_STAT_INC(zcopy_sink_cancels, 1);
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_MODE_CHANGE) && mode_change_may_go(c) &&
	    ctrl_slot_free(c) && sdp_can_send_ctrl(&c->cr)) {
		uint8_t ext[SDP_MCH_LEN];
		uint32_t mseq = c->cr.next_mseq;

		sdp_mch_encode(ext, 0, (enum sdp_mode)c->mch_next);
		if (conn_post_ctrl(s, SDP_MID_MODE_CHANGE, ext, sizeof(ext)))
			return;
		c->ctrl_pending &= ~SDP_CTRL_MODE_CHANGE;
		mode_change_sent(s, mseq);
		SDP_STAT_INC(mode_changes_sent, 1);
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_CH_RCV_BUF_ACK) && ctrl_slot_free(c) &&
	    sdp_can_send_ctrl(&c->cr)) {
		uint8_t ext[SDP_U32H_LEN];

		/* Our buffers have one fixed size: the answer is always it. */
		sdp_u32h_encode(ext, c->rx_size);
		if (conn_post_ctrl(s, SDP_MID_CH_RCV_BUF_ACK, ext, sizeof(ext)))
			return;
		c->ctrl_pending &= ~SDP_CTRL_CH_RCV_BUF_ACK;
		sent = true;
	}
	if ((c->ctrl_pending & SDP_CTRL_DISCONN) && c->tx_posted == c->tx_filled &&
	    !c->tx_sa.active && ctrl_slot_free(c) && sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_DISCONN, NULL, 0))
			return;
		c->ctrl_pending &= ~SDP_CTRL_DISCONN;
		c->disconn_sent = true;
		c->psnk.active = false;	/* the sink knows: no bytes after DisConn */
		c->disconn_last = c->disconn_rcvd;
		sent = true;
		sdp_dbg(LOGSYS, "sd %d: DisConn sent", s->sd);
	}

	/* Credit updates go on after our DisConn while the peer may still
	 * send; after its DisConn it sends no data, so they stop. */
	/* While our SrcAvail is out, the last credits are kept for its
	 * SrcAvailCancel. */
	if (!sent && !c->disconn_rcvd && sdp_update_needed(&c->cr) && ctrl_slot_free(c) &&
	    !(c->tx_sa.active && !c->tx_sa.cancel_sent && sdp_tx_credits(&c->cr) <= 2)) {
		if (conn_post_ctrl(s, SDP_MID_DATA, NULL, 0) == 0) {
			SDP_STAT_INC(credit_updates_sent, 1);
			sent = true;
		}
	}
	if (sent)
		progress_posted(s);
}

void conn_push(struct sdp_sock *s)
{
	int saved_cork = s->cork;

	if (s->conn && s->conn->trans_held) {
		/* The request goes alone: the program is not waiting for
		 * the reply in recv() (write_zcopy.c). */
		s->conn->trans_held = false;
		mode_note_trans_miss(s);
	}
	s->cork = 0;
	conn_flush(s);
	s->cork = saved_cork;
}

void conn_end_hold(struct sdp_sock *s)
{
	if (s->conn && s->conn->trans_held)
		conn_push(s);
}

bool conn_writable(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	if (!c || !c->tx_len || conn_sndbuf_low(s))
		return false;
	if (c->tx_filled - c->tx_done < c->ntx)
		return true;
	/* All buffers in use: room only in a last one still filling. */
	return c->tx_filled != c->tx_posted &&
	       c->tx_len[(c->tx_filled - 1) % c->ntx] < tx_payload_max(c);
}

/*
 * Copy as much of iov (after skipping `skip` bytes) as the send buffers
 * take, then flush.  Returns bytes taken (possibly 0) or a negative errno.
 */
ssize_t conn_send(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip, size_t limit)
{
	struct sdp_conn *c = s->conn;
	size_t taken = 0;
	size_t off = skip;
	int i = iov_seek(iov, iovcnt, &off);
	size_t sndbuf_room = conn_sndbuf_room(s);

	if (limit > sndbuf_room)
		limit = sndbuf_room;
	while (i < iovcnt && taken < limit) {
		uint32_t slot;

		if (c->tx_filled != c->tx_posted &&
		    c->tx_len[(c->tx_filled - 1) % c->ntx] < tx_payload_max(c)) {
			slot = (c->tx_filled - 1) % c->ntx;
		} else if (c->tx_filled - c->tx_done < c->ntx) {
			slot = c->tx_filled % c->ntx;
			c->tx_len[slot] = 0;
			c->tx_filled++;
		} else {
			break;
		}
		uint32_t room = tx_payload_max(c) - c->tx_len[slot];
		size_t n = iov[i].iov_len - off;

		if (n > room)
			n = room;
		if (n > limit - taken)
			n = limit - taken;
		memcpy(tx_buf(c, slot) + SDP_BSDH_LEN + c->tx_len[slot],
		       (const uint8_t *)iov[i].iov_base + off, n);
		c->tx_len[slot] += (uint32_t)n;
		c->tx_queued_bytes += n;
		taken += n;
		off += n;
		if (off == iov[i].iov_len) {
			off = 0;
			i++;
		}
	}
	bool more = flags & MSG_MORE;
	int saved_cork = s->cork;

	if (more)
		s->cork = 1;
	conn_flush(s);
	s->cork = saved_cork;
	return (ssize_t)taken;
}

void conn_shutdown_write(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || c->disconn_sent || (c->ctrl_pending & SDP_CTRL_DISCONN))
		return;
	c->ctrl_pending |= SDP_CTRL_DISCONN;
	/* A corked tail must go out before the DisConn. */
	conn_push(s);
}

/* --- receiving ------------------------------------------------------------ */

/*
 * Copy queued data into iov (after `skip` bytes already filled).  Consumed
 * buffers are posted again, and the peer is told when that matters.
 */
ssize_t conn_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip)
{
	struct sdp_conn *c = s->conn;
	bool peek = flags & MSG_PEEK;
	size_t copied = 0;
	uint32_t q = 0;		/* segments looked at (peek) */
	uint32_t qoff = 0;	/* bytes already taken from segment q (peek) */
	size_t off = skip;
	int i = iov_seek(iov, iovcnt, &off);
	bool reposted = false;
	while (i < iovcnt && q < c->rxq_count) {
		struct sdp_rx_seg *seg = rxq_at(c, q);

		/* A SrcAvail's bytes are still with the peer: zc_recv(). */
		if (seg->slot == SDP_SLOT_SA)
			break;
		uint32_t avail = seg->len - (peek ? qoff : 0);
		size_t n = iov[i].iov_len - off;

		if (n > avail)
			n = avail;
		memcpy((uint8_t *)iov[i].iov_base + off,
		       seg_buf(c, seg) + seg->off + (peek ? qoff : 0), n);
		copied += n;
		off += n;
		if (off == iov[i].iov_len) {
			off = 0;
			i++;
		}
		if (peek) {
			qoff += (uint32_t)n;
			if (qoff == seg->len) {
				q++;
				qoff = 0;
			}
			continue;
		}
		seg->off += (uint32_t)n;
		seg->len -= (uint32_t)n;
		c->rx_bytes -= n;
		if (seg->len == 0) {
			uint32_t slot = seg->slot;

			c->rxq_head = (c->rxq_head + 1) % c->rxq_cap;
			c->rxq_count--;
			if (slot == SDP_SLOT_STAGE)
				continue;	/* the staging buffer is free again */
			if (conn_repost(s, slot))
				break;
			reposted = true;
		}
	}
	if (!peek && copied) {
		SDP_STAT_INC(bytes_received, copied);
		/* Drained: the readiness fd must stop reporting data. */
		if (!c->rx_bytes)
			sock_changed(s, false);
	}
	if (reposted)
		conn_flush(s);
	return (ssize_t)copied;
}

/* One in-band message arrived in receive buffer slot. */
static void conn_handle_msg(struct sdp_sock *s, uint32_t slot, uint32_t len)
{
	struct sdp_conn *c = s->conn;
	uint8_t *buf = rx_buf(c, slot);
	struct sdp_bsdh h;
	int ret;
	bool keep = false;	/* the buffer holds data for the application */

	ret = sdp_bsdh_decode(buf, len, &h);
	if (ret) {
		conn_protocol_error(s, ret == -EMSGSIZE ? "bad message length" : "malformed header");
		return;
	}
	if (h.mseq != c->cr.last_rx_mseq + 1) {
		conn_protocol_error(s, "message out of sequence");
		return;
	}
	uint32_t credits = sdp_tx_credits(&c->cr);

	if (!sdp_credits_on_recv(&c->cr, h.mseq, h.mseq_ack, h.bufs)) {
		conn_protocol_error(s, "acknowledges a message never sent");
		return;
	}
	/* A thread asleep for credits (zc_send() waiting for its turn to
	 * offer) may not be the one driving this: the message that brings
	 * them may be a bare credit update, which wakes nobody else. */
	if (s->waiters && sdp_tx_credits(&c->cr) > credits)
		sock_changed(s, false);
	SDP_STAT_INC(msgs_received, 1);

	uint32_t data_off = SDP_BSDH_LEN + (uint32_t)sdp_ext_len(h.mid);
	uint32_t data_len = h.len - data_off;

	switch (h.mid) {
	case SDP_MID_SRC_AVAIL:
	case SDP_MID_DATA:
	case SDP_MID_SINK_AVAIL:
		if (data_len == 0 && h.mid == SDP_MID_DATA)
			break;
		/* Stream bytes, inline or offered; a bare SinkAvail is about
		 * our half and may come after the peer's DisConn. */
		bool stream = data_len || h.mid == SDP_MID_SRC_AVAIL;

		if (stream && c->disconn_rcvd) {
			conn_protocol_error(s, "data after DisConn");
			return;
		}
		if (stream && s->app_closed) {
			/* Nobody will read it: a closed TCP socket answers
			 * with a reset. */
			conn_abort(s, ECONNRESET);
			return;
		}
		/* A message the rules forbid delivers nothing. */
		if (h.mid == SDP_MID_SRC_AVAIL && zc_src_avail_check(s, buf + SDP_BSDH_LEN, data_len))
			return;
		if (h.mid == SDP_MID_SINK_AVAIL && wz_sink_avail_check(s, data_len))
			return;
		/* Stream bytes by any message: counted for the non_discards
		 * rule, and our SinkAvail is dead (write_zcopy.c). */
		if (data_len)
			wz_stream_msg_rcvd(s);
		if (h.flags & SDP_FLAG_OOB_PRES) {
			/* Urgent data is not offered yet: without
			 * SO_OOBINLINE Linux takes the urgent byte out of the
			 * stream, and so do we. */
			if (!s->oobinline)
				data_len--;
		}
		if (data_len) {
			*rxq_at(c, c->rxq_count) = (struct sdp_rx_seg){
				.slot = slot, .off = data_off, .len = data_len,
			};
			c->rxq_count++;
			c->rx_bytes += data_len;
			keep = true;
		}
		/* The advertised rest queues behind the inline bytes. */
		if (h.mid == SDP_MID_SRC_AVAIL)
			zc_src_avail_rcvd(s, &h, buf + SDP_BSDH_LEN, data_len);
		else if (h.mid == SDP_MID_SINK_AVAIL)
			wz_sink_avail_rcvd(s, &h, buf + SDP_BSDH_LEN, data_len);
		if (s->state == SDP_S_ESTABLISHED && (data_len || h.mid == SDP_MID_SRC_AVAIL))
			sock_changed(s, true);
		break;
	case SDP_MID_DISCONN:
		if (c->disconn_rcvd) {
			conn_protocol_error(s, "second DisConn");
			return;
		}
		c->disconn_rcvd = true;
		wz_advert_dead(s);	/* no bytes come after it */
		sdp_dbg(LOGSYS, "sd %d: DisConn received", s->sd);
		sock_changed(s, true);
		break;
	case SDP_MID_ABORT_CONN:
		conn_abort(s, ECONNRESET);
		return;
	case SDP_MID_CH_RCV_BUF:
		/* An answer the peer's buffers cannot take tells it nothing
		 * it lacks: our size is the one in our Hello. */
		if (conn_fits(c, SDP_U32H_LEN))
			c->ctrl_pending |= SDP_CTRL_CH_RCV_BUF_ACK;
		break;
	case SDP_MID_MODE_CHANGE: {
		int send_half;
		enum sdp_mode mode;

		if (sdp_mch_decode(buf + SDP_BSDH_LEN, &send_half, &mode)) {
			conn_protocol_error(s, "bad ModeChange");
			return;
		}
		mode_change_rcvd(s, send_half, mode);
		break;
	}
	case SDP_MID_SRC_AVAIL_CANCEL:
		zc_cancel_rcvd(s);
		break;
	case SDP_MID_RDMA_RD_COMPL:
		zc_rd_compl_rcvd(s, &h, sdp_u32h_decode(buf + SDP_BSDH_LEN));
		if ((h.flags & SDP_FLAG_REQ_PIPE) && s->conn)
			mode_req_pipe_rcvd(s);
		break;
	case SDP_MID_SEND_SM:
		zc_send_sm_rcvd(s, &h);
		break;
	case SDP_MID_RDMA_WR_COMPL:
		wz_wr_compl_rcvd(s, &h, sdp_u32h_decode(buf + SDP_BSDH_LEN));
		break;
	case SDP_MID_SINK_AVAIL_CANCEL:
		wz_sink_cancel_rcvd(s);
		break;
	case SDP_MID_SINK_CANCEL_ACK:
		wz_cancel_ack_rcvd(s);
		break;
	case SDP_MID_CH_RCV_BUF_ACK:
		/* We never ask; an unsolicited answer changes nothing. */
		break;
	default:
		/* SuspComm we cannot honour, AbortConn's kin. */
		conn_protocol_error(s, sdp_mid_name(h.mid));
		return;
	}

	if (!keep)
		conn_repost(s, slot);
}

static void conn_handle_wc(struct sdp_sock *s, const struct oti_wc *wc)
{
	struct sdp_conn *c = s->conn;
	uint64_t kind = SDP_CTX_KIND(wc->ctx);

	if (kind == SDP_CTX_READ) {
		zc_read_done(s, wc);
		return;
	}
	if (kind == SDP_CTX_WRITE) {
		wz_write_done(s, wc);
		return;
	}
	if (wc->status) {
		if (wc->status == -ECANCELED || c->transport_down)
			return;
		/* A failed receive or control message may be the peer's
		 * orderly close racing with its DisConn, still queued here:
		 * conn_post_failed() leaves the verdict to DISCONNECTED.
		 * Data of ours lost is a reset. */
		if (c->disconn_rcvd && kind != SDP_CTX_TX)
			return;
		conn_post_failed(s, wc->status, kind == SDP_CTX_TX);
		return;
	}
	if (kind == SDP_CTX_RX) {
		if (s->state != SDP_S_ESTABLISHED) {
			/* Reset while messages were in flight: drop them. */
			return;
		}
		c->await_first_rx = false;	/* conn_progress flushes next */
		c->first_nudges = 0;		/* the peer saw our first */
		conn_handle_msg(s, SDP_CTX_SLOT(wc->ctx), wc->len);
	} else if (kind == SDP_CTX_TX) {
		uint32_t slot = c->tx_done % c->ntx;

		c->tx_queued_bytes -= c->tx_len[slot];
		c->tx_done++;
		sock_changed(s, false);
	} else if (kind == SDP_CTX_CTRL) {
		bool was_full = !ctrl_slot_free(c);

		c->ctrl_done++;
		/* Likewise for a thread asleep for a control slot. */
		if (was_full && s->waiters)
			sock_changed(s, false);
	}
}

static int conn_drain_cq(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	struct oti_wc wc[16];
	int n, total = 0;

	do {
		n = c->t->poll_cq(c->ep, wc, 16);
		if (n < 0) {
			conn_abort(s, ECONNRESET);
			return n;
		}
		for (int i = 0; i < n && s->conn; i++)
			conn_handle_wc(s, &wc[i]);
		total += n;
	} while (n == 16);
	return total;
}

/* --- connection establishment --------------------------------------------- */

static void conn_fill_names(struct sdp_sock *s)
{
	struct sockaddr_storage local, peer;
	uint16_t lport = addr_port(&s->local);

	if (s->conn->t->ep_names(s->conn->ep, &local, &peer) == 0) {
		/* The transport's address; an SDP-level port we already know
		 * (bound or listening) is kept. */
		if (!s->bound || lport == 0)
			lport = addr_port(&local);
		s->local = local;
		addr_set_port(&s->local, lport);
		if (s->peer.ss_family == AF_UNSPEC)
			s->peer = peer;
	}
}

static bool conn_iwarp_rules(const struct sdp_conn *c)
{
	struct oti_caps caps;

	c->t->query_caps(&caps);
	return caps.flags & OTI_CAP_IWARP_RULES;
}

static void conn_established(struct sdp_sock *s)
{
	s->state = SDP_S_ESTABLISHED;
	conn_fill_names(s);
	s->conn->deadline_ns = 0;
	sdp_conn_log(LOGSYS, "sd %d: SDP connection established over %s (%s side)",
		     s->sd, s->conn->t->name, s->is_child ? "passive" : "active");
	sock_changed(s, true);
}

/* Why a connect failed, from an errno the transport (or the system) gave
 * for its part of it: the OTI reports failures as errno values. */
static enum sdp_fallback_reason conn_reason_of(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return SDP_FB_REFUSED;
	case ETIMEDOUT:
		return SDP_FB_TIMEOUT;
	case ENETUNREACH:
	case EHOSTUNREACH:
	case EADDRNOTAVAIL:
	case ENODEV:
		return SDP_FB_NO_ROUTE;
	case ECONNRESET:
	case ECONNABORTED:
	case EPROTO:
		return SDP_FB_REJECTED;
	case ENOMEM:
	case ENOBUFS:
	case EMFILE:
	case ENFILE:
		return SDP_FB_RESOURCE;
	default:
		return SDP_FB_TRANSPORT;
	}
}

/* The attempt failed: err (positive) is what connect() or SO_ERROR
 * says, why what sdp_fallback_reason() says. */
static void conn_connect_failed(struct sdp_sock *s, int err, enum sdp_fallback_reason why)
{
	SDP_STAT_INC(connect_failures, 1);
	sdp_conn_log(LOGSYS, "sd %d: SDP connect failed: %s", s->sd, strerror(err));
	s->so_error = err;
	s->fb_reason = why;
	s->state = SDP_S_CLOSED;
	s->reset = true;
	conn_transport_down(s);
	/* The attempt is over; a retry opens a new ep. */
	s->conn->disconnected = true;
	conn_leave_progress(s);
	sock_changed(s, true);
}

static void conn_send_hello(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	struct oti_caps caps;
	struct sdp_hello h = {
		.bsdh = { .mid = SDP_MID_HELLO },
		.major = SDP_MAJOR_VERSION,
		.minor = SDP_MINOR_VERSION,
		.ip_version = s->domain == AF_INET6 ? 6 : 4,
		.max_adverts = 1,
		.desremrcvsz = (uint32_t)tun_int(TUN_buf_size),
		.has_addrs = 1,
	};
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	int ret, len;

	ret = conn_setup_rx(c, s);
	if (ret) {
		conn_connect_failed(s, -ret, conn_reason_of(-ret));
		return;
	}
	h.bsdh.bufs = (uint16_t)c->nrx;
	h.localrcvsz = c->rx_size;
	conn_fill_names(s);
	h.src_port = addr_port(&s->local);
	addr_to_in6(&s->local, &h.src_addr);
	addr_to_in6(&s->peer, &h.dst_addr);
	c->t->query_caps(&caps);
	len = sdp_hello_encode(pdata, caps.max_private_data, &h);
	if (len < 0) {
		/* Our Hello does not fit the transport's private data. */
		conn_connect_failed(s, EPROTO, SDP_FB_TRANSPORT);
		return;
	}
	ret = c->t->connect(c->ep, pdata, (size_t)len);
	if (ret) {
		conn_connect_failed(s, -ret, conn_reason_of(-ret));
		return;
	}
	s->state = SDP_S_CONNECTING;
}

static void conn_hello_ack_received(struct sdp_sock *s, const struct oti_event *ev)
{
	struct sdp_conn *c = s->conn;
	struct sdp_hello_ack ack;
	int ret;

	ret = sdp_hello_ack_decode(ev->private_data, ev->private_data_len, &ack);
	if (ret) {
		SDP_STAT_INC(protocol_errors, 1);
		sdp_warn(LOGSYS, "sd %d: peer's HelloAck is invalid (%d)", s->sd, ret);
		/* Another version of SDP is no SDP listener for us. */
		if (ret == -EPROTONOSUPPORT)
			conn_connect_failed(s, ECONNREFUSED, SDP_FB_REFUSED);
		else
			conn_connect_failed(s, ECONNRESET, SDP_FB_REJECTED);
		return;
	}
	ret = conn_setup_tx(c, ack.actrcvsz, s);
	if (ret) {
		conn_connect_failed(s, -ret, conn_reason_of(-ret));
		return;
	}
	c->peer_max_adverts = ack.max_adverts;
	sdp_credits_init(&c->cr, ack.bsdh.bufs, c->nrx);
	SDP_STAT_INC(connections_active, 1);
	conn_established(s);
	if (conn_iwarp_rules(c) && sdp_can_send_ctrl(&c->cr) &&
	    conn_post_ctrl(s, SDP_MID_DATA, NULL, 0) == 0) {
		/* the first FPDU the passive side waits for (await_first_rx) */
		SDP_STAT_INC(credit_updates_sent, 1);
		c->first_nudges = SDP_FIRST_NUDGES;
		progress_posted(s);
	}
	conn_flush(s);
}

/* Progress tick, active side on iWARP: the credit update again while
 * nothing of the peer's has come (engine.h, first_nudges). */
void conn_nudge(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c->first_nudges)
		return;
	if (s->state != SDP_S_ESTABLISHED || c->transport_down || c->post_failed) {
		c->first_nudges = 0;
		return;
	}
	if (!ctrl_slot_free(c) || !sdp_can_send_ctrl(&c->cr))
		return;	/* the next tick */
	if (conn_post_ctrl(s, SDP_MID_DATA, NULL, 0) == 0) {
		SDP_STAT_INC(credit_updates_sent, 1);
		c->first_nudges--;
		progress_posted(s);
	}
}

int conn_start_connect(struct sdp_sock *s, const struct sockaddr *dst, socklen_t len)
{
	struct sdp_conn *c;
	const struct oti_ops *t;
	int ret;

	s->fb_reason = SDP_FB_NONE;
	t = oti_select(s->bound ? (const struct sockaddr *)&s->local : NULL, dst);
	if (!t) {
		s->fb_reason = SDP_FB_NO_ROUTE;
		return -ENETUNREACH;
	}
	c = conn_new();
	if (!c) {
		s->fb_reason = SDP_FB_RESOURCE;
		return -ENOMEM;
	}
	c->t = t;
	memcpy(&s->peer, dst, len);
	s->conn = c;

	struct sockaddr_storage src;
	socklen_t srclen = 0;

	if (s->bound) {
		/* Source address only: the SDP port is ours, the transport
		 * picks its own. */
		src = s->local;
		addr_set_port(&src, 0);
		srclen = src.ss_family == AF_INET ? sizeof(struct sockaddr_in)
						  : sizeof(struct sockaddr_in6);
	}
	ret = t->ep_open(dst, len, srclen ? (struct sockaddr *)&src : NULL, srclen, &c->ep);
	if (ret)
		goto err_free;
	c->ep_fd = t->ep_fd(c->ep);
	s->state = SDP_S_RESOLVING;
	c->deadline_ns = sdp_now_ns() + (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;
	ret = progress_add_ep(s, c);
	if (ret)
		goto err_free;
	c->in_progress_set = true;
	progress_watch(s);
	return 0;

err_free:
	s->fb_reason = conn_reason_of(-ret);
	conn_free(s);
	memset(&s->peer, 0, sizeof(s->peer));
	s->state = SDP_S_NEW;
	return ret;
}

static void conn_handle_event(struct sdp_sock *s, const struct oti_event *ev)
{
	struct sdp_conn *c = s->conn;

	switch (ev->type) {
	case OTI_EV_RESOLVED:
		if (s->state == SDP_S_RESOLVING)
			conn_send_hello(s);
		break;
	case OTI_EV_ESTABLISHED:
		if (s->state != SDP_S_CONNECTING)
			break;
		if (s->is_child) {
			SDP_STAT_INC(connections_passive, 1);
			c->await_first_rx = conn_iwarp_rules(c);
			conn_established(s);
		} else {
			conn_hello_ack_received(s, ev);
		}
		break;
	case OTI_EV_REJECTED:
		if (s->state == SDP_S_CONNECTING || s->state == SDP_S_RESOLVING)
			conn_connect_failed(s, ECONNREFUSED, SDP_FB_REFUSED);
		break;
	case OTI_EV_UNREACHABLE:
		if (s->state == SDP_S_CONNECTING || s->state == SDP_S_RESOLVING) {
			int err = ev->status ? -ev->status : EHOSTUNREACH;

			conn_connect_failed(s, err, conn_reason_of(err));
		}
		break;
	case OTI_EV_DISCONNECTED:
	case OTI_EV_ERROR:
		if (s->state == SDP_S_CONNECTING || s->state == SDP_S_RESOLVING) {
			/* The transport went down under the handshake:
			 * nobody there took the Hello. */
			conn_connect_failed(s, ECONNREFUSED, SDP_FB_REFUSED);
			break;
		}
		c->disconnected = true;
		sdp_dbg(LOGSYS, "sd %d: transport %s (%d); DisConn sent %d, received %d",
			s->sd, ev->type == OTI_EV_ERROR ? "error" : "disconnected", ev->status,
			c->disconn_sent, c->disconn_rcvd);
		/* Messages that arrived before the transport went down are
		 * still in the completion queue: take them first, so a
		 * DisConn there makes this an orderly close. */
		if (s->state == SDP_S_ESTABLISHED)
			conn_drain_cq(s);
		if (!s->conn)
			break;
		c->transport_down = true;
		if (s->state == SDP_S_ESTABLISHED) {
			if (!c->disconn_rcvd || ev->type == OTI_EV_ERROR) {
				conn_set_reset(s, ECONNRESET);
			} else {
				/* Orderly: the peer closed after its DisConn.
				 * What we still had to send cannot go. */
				s->state = SDP_S_CLOSED;
				if (c->tx_filled != c->tx_posted || !c->disconn_sent)
					c->tx_filled = c->tx_posted;
				sock_changed(s, true);
			}
		}
		if (s->conn)
			conn_leave_progress(s);
		break;
	}
}

void conn_progress(struct sdp_sock *s)
{
	struct oti_event ev;

	if (!s->conn || !s->conn->ep)
		return;
	for (int rounds = 0; rounds < 64 && s->conn; rounds++) {
		bool busy = false;

		/* Events are read until the transport says it is done, even
		 * after our disconnect(): a deferred shutdown still needs
		 * driving, and DISCONNECTED ends it. */
		while (s->conn && !s->conn->disconnected &&
		       s->conn->t->get_event(s->conn->ep, &ev) == 0) {
			conn_handle_event(s, &ev);
			busy = true;
		}
		if (!s->conn)
			return;
		/* Before the HelloAck there are no credits to account
		 * messages against: leave them queued until then. */
		if (s->state == SDP_S_ESTABLISHED || s->state == SDP_S_CLOSED) {
			if (conn_drain_cq(s) > 0)
				busy = true;
		}
		if (s->conn && s->state == SDP_S_ESTABLISHED)
			conn_flush(s);
		if (!busy)
			break;
	}
	struct sdp_conn *c = s->conn;

	/*
	 * Both DisConns exchanged and everything we sent has left: the
	 * transport connection has nothing more to carry.  The side whose
	 * DisConn went first closes it, once the peer's arrives: that
	 * DisConn is the last message the peer will ever send (it had ours,
	 * so it needs to grant no more credits).  The other side waits for
	 * the transport's DISCONNECTED.  Were it to close first, the credit
	 * updates the peer sent while still receiving could reach a closed
	 * socket, whose reset would destroy data the peer had not yet read.
	 * (When both sent theirs at once, both close, as before.)
	 */
	if (c && s->state == SDP_S_ESTABLISHED && c->disconn_sent && c->disconn_rcvd &&
	    !c->disconn_last && !c->transport_down && c->tx_done == c->tx_posted &&
	    c->ctrl_done == c->ctrl_posted)
		conn_transport_down(s);
	if (s->conn && s->conn->deadline_ns && sdp_now_ns() > s->conn->deadline_ns) {
		if (s->state == SDP_S_CONNECTING || s->state == SDP_S_RESOLVING)
			conn_connect_failed(s, ETIMEDOUT, SDP_FB_TIMEOUT);
		else if (s->state == SDP_S_ESTABLISHED && s->conn->post_failed &&
			 !s->conn->transport_down)
			conn_abort(s, ECONNRESET);	/* no word from the transport */
	}
}

/* --- passive side ------------------------------------------------------------ */

static void listener_reject(const struct sdp_lsn *l, struct oti_connreq *req)
{
	l->t->reject(l->l, req, NULL, 0);
}

/* A connection request that came in on the transport listener l of s. */
static void listener_take_request(struct sdp_sock *s, const struct sdp_lsn *l,
				  struct oti_connreq *req,
				  const void *pdata, size_t pdata_len,
				  const struct sockaddr_storage *peer)
{
	struct sdp_hello hello;
	struct sdp_hello_ack ack = {
		.bsdh = { .mid = SDP_MID_HELLO_ACK },
		.major = SDP_MAJOR_VERSION,
		.minor = SDP_MINOR_VERSION,
		.ip_version = s->domain == AF_INET6 ? 6 : 4,
		.max_adverts = 1,
	};
	uint8_t out[OTI_MAX_PRIVATE_DATA];
	struct oti_caps caps;
	struct sdp_sock *child;
	struct sdp_conn *c;
	int ret, len;

	if (s->acceptq_len + s->pending_children >= s->backlog) {
		sdp_conn_log(LOGSYS, "sd %d: accept queue full (backlog %d), refusing",
			     s->sd, s->backlog);
		listener_reject(l, req);
		return;
	}
	ret = sdp_hello_decode(pdata, pdata_len, &hello);
	if (ret) {
		SDP_STAT_INC(protocol_errors, 1);
		sdp_warn(LOGSYS, "sd %d: refusing a connection with an invalid Hello (%s)",
			 s->sd, ret == -EPROTONOSUPPORT ? "unsupported SDP version" : "malformed");
		listener_reject(l, req);
		return;
	}
	child = sock_alloc(s->domain, false, true, false);
	if (!child) {
		listener_reject(l, req);
		return;
	}
	c = conn_new();
	if (!c) {
		listener_reject(l, req);
		sock_put(child);
		return;
	}
	c->t = l->t;
	child->conn = c;
	child->is_child = true;
	child->parent = s;
	child->state = SDP_S_CONNECTING;
	child->local = s->local;
	child->peer = *peer;
	/* The active side's port, as its getsockname() says: a port it
	 * bound, which the transport's own connection does not show. */
	if (hello.src_port)
		addr_set_port(&child->peer, hello.src_port);
	child->bound = true;
	/* Options a listener passes on to accepted sockets on Linux. */
	child->nodelay = s->nodelay;
	child->keepalive = s->keepalive;
	child->rcvbuf = s->rcvbuf;
	child->sndbuf = s->sndbuf;
	child->rcvbuf_set = s->rcvbuf_set;
	child->sndbuf_set = s->sndbuf_set;
	child->linger = s->linger;
	child->oobinline = s->oobinline;
	child->zcopy_thresh = s->zcopy_thresh;

	ret = c->t->ep_accept_open(l->l, req, &c->ep);
	if (ret)
		goto err_child;
	c->ep_fd = c->t->ep_fd(c->ep);
	ret = conn_setup_rx(c, child);
	if (!ret)
		ret = conn_setup_tx(c, hello.localrcvsz, child);
	if (ret)
		goto err_child;
	sdp_credits_init(&c->cr, hello.bsdh.bufs, c->nrx);
	c->peer_max_adverts = hello.max_adverts;
	ack.bsdh.bufs = (uint16_t)c->nrx;
	ack.actrcvsz = c->rx_size;
	c->t->query_caps(&caps);
	len = sdp_hello_ack_encode(out, caps.max_private_data, &ack);
	if (len < 0) {
		ret = len;
		goto err_child;
	}
	ret = c->t->accept(c->ep, out, (size_t)len);
	if (ret)
		goto err_child;
	c->deadline_ns = sdp_now_ns() + (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;
	/* Until accepted, the child is driven through its listener. */
	ret = progress_add_ep(s, c);
	if (ret)
		goto err_child;
	c->in_progress_set = true;

	if (s->acceptq_len + s->pending_children + 1 > s->acceptq_cap) {
		int cap = s->acceptq_cap ? s->acceptq_cap * 2 : 16;
		struct sdp_sock **q = realloc(s->acceptq, (size_t)cap * sizeof(*q));

		if (!q) {
			ret = -ENOMEM;
			goto err_child;
		}
		s->acceptq = q;
		s->acceptq_cap = cap;
	}
	/* Pending children live after the established ones. */
	s->acceptq[s->acceptq_len + s->pending_children] = child;
	s->pending_children++;
	progress_watch(s);
	return;

err_child:
	sdp_warn(LOGSYS, "sd %d: could not set up an accepted connection: %s",
		 s->sd, strerror(-ret));
	conn_free(child);
	child->parent = NULL;
	sock_put(child);
}

/*
 * acceptq holds the established children in [0, acceptq_len) in arrival
 * order, then the ones still handshaking.  Move newly established children
 * to the end of the first part, drop failed ones.
 */
static void listener_progress_children(struct sdp_sock *s)
{
	bool arrived = false;

	for (int i = s->acceptq_len; i < s->acceptq_len + s->pending_children;) {
		struct sdp_sock *child = s->acceptq[i];

		pthread_mutex_lock(&child->lock);
		conn_progress(child);
		if (child->conn && child->conn->deadline_ns &&
		    sdp_now_ns() > child->conn->deadline_ns && child->state == SDP_S_CONNECTING)
			conn_abort(child, ETIMEDOUT);
		enum sdp_state st = child->state;

		pthread_mutex_unlock(&child->lock);
		if (st == SDP_S_CONNECTING) {
			i++;
		} else if (st == SDP_S_ESTABLISHED) {
			/* Rotate [acceptq_len, i] right by one: the child
			 * becomes the last ready one. */
			memmove(&s->acceptq[s->acceptq_len + 1], &s->acceptq[s->acceptq_len],
				(size_t)(i - s->acceptq_len) * sizeof(*s->acceptq));
			s->acceptq[s->acceptq_len++] = child;
			s->pending_children--;
			arrived = true;
			i++;
		} else {
			memmove(&s->acceptq[i], &s->acceptq[i + 1],
				(size_t)(s->acceptq_len + s->pending_children - i - 1) *
					sizeof(*s->acceptq));
			s->pending_children--;
			pthread_mutex_lock(&child->lock);
			conn_free(child);
			child->parent = NULL;
			pthread_mutex_unlock(&child->lock);
			sock_put(child);
		}
	}
	/* Accepted-queue children may receive data before accept(). */
	for (int i = 0; i < s->acceptq_len; i++) {
		struct sdp_sock *child = s->acceptq[i];

		pthread_mutex_lock(&child->lock);
		conn_progress(child);
		pthread_mutex_unlock(&child->lock);
	}
	if (arrived)
		sock_changed(s, true);
}

void listener_progress(struct sdp_sock *s)
{
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	struct sockaddr_storage peer;
	struct oti_connreq *req;
	size_t len;

	for (int i = 0; i < s->nlsn; i++) {
		const struct sdp_lsn *l = &s->lsn[i];

		for (int n = 0; n < 64; n++) {
			len = 0;
			memset(&peer, 0, sizeof(peer));
			if (l->t->get_connreq(l->l, &req, pdata, &len, &peer))
				break;
			listener_take_request(s, l, req, pdata, len, &peer);
		}
	}
	listener_progress_children(s);
}

void listener_free(struct sdp_sock *s)
{
	if (s->in_progress_set) {
		for (int i = 0; i < s->nlsn; i++)
			progress_del(s, s->lsn[i].t->listener_fd(s->lsn[i].l));
		s->in_progress_set = false;
	}
	for (int i = 0; i < s->acceptq_len + s->pending_children; i++) {
		struct sdp_sock *child = s->acceptq[i];

		pthread_mutex_lock(&child->lock);
		/* Never accepted: the peer sees a reset, as on Linux. */
		if (child->conn)
			conn_abort(child, ECONNRESET);
		conn_free(child);
		child->parent = NULL;
		pthread_mutex_unlock(&child->lock);
		sock_put(child);
	}
	free(s->acceptq);
	s->acceptq = NULL;
	s->acceptq_len = s->pending_children = s->acceptq_cap = 0;
	for (int i = 0; i < s->nlsn; i++)
		s->lsn[i].t->listener_close(s->lsn[i].l);
	s->nlsn = 0;
}
