/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Write Zcopy (IBTA Annex A4, "sink-advertised") and Transaction mode.
 *
 * A recv() that finds nothing queued, on a direction the source has made
 * Pipelined (mode.c), advertises the application's buffer with SinkAvail;
 * the source RDMA-writes its next send straight into it and says how much
 * with RdmaWrCompl.  The receiver's copy is gone, and so is the sender's
 * when its send is large (the write goes from its own buffer).
 *
 *   sink                                          source
 *   recv(): register buf (remote write, this op)
 *   SinkAvail{len, rkey, vaddr, non_discards} ──▶  send(): RDMA write → buf
 *                                   ◀──── RdmaWrCompl{n}  (one per advert)
 *   deregister, recv() returns n
 *
 * The rules both sides keep (max_adverts 1: one advert out per direction):
 *
 *  - The sink advertises only with nothing of the stream queued or offered
 *    (no SrcAvail of the peer's pending), for a blocking recv() (never
 *    MSG_PEEK) whose first buffer has at least the socket's zero-copy
 *    threshold of room, at most zcopy_max bytes.
 *  - non_discards is the number of messages with stream bytes the sink
 *    has received (Data, SrcAvail with inline bytes, SinkAvail with
 *    Transaction bytes).  The source counts the ones it sent; an advert
 *    whose count differs crossed data on the way and is discarded.
 *  - A source that accepted an advert sends no stream bytes by any other
 *    means until it has used it: one RDMA write of 1..len bytes, then
 *    RdmaWrCompl, which ends the advert.  Sending stream bytes any other
 *    way drops the advert unused.  So the sink knows an advert is dead
 *    when a message with stream bytes arrives after it (the source either
 *    discarded it or dropped it), or a ModeChange out of Pipelined, or a
 *    DisConn.
 *  - A SrcAvail without inline bytes (Pipelined) that arrives while the
 *    sink's advert is alive crossed it, and the source will accept the
 *    advert: the sink ignores the SrcAvail, the source takes it back.
 *  - SinkAvailCancel (the sink's SO_RCVTIMEO, a signal): the source drops
 *    the advert if it still holds it and always answers SinkCancelAck,
 *    after any RdmaWrCompl it sent for it.  The sink keeps the buffer
 *    registered until the advert is over (RdmaWrCompl, proof of death, or
 *    the ack), at most zcopy_cancel_timeout_ms, then resets.
 *
 * Transaction mode (our send half in Transaction, the opposite half
 * Pipelined; mode.c decides when): a request/response program sends a
 * small request, then waits in recv() for the reply.  The request is held
 * back (at most trans_hold_us, and only as one message's worth), and the
 * recv()'s SinkAvail carries it as its payload: the peer's application
 * reads the request, and its reply is RDMA-written straight into the
 * waiting buffer whatever its size (small replies from a registered
 * bounce buffer).  One message each way, no copy of the reply at the
 * requester.  Anything other than that recv() (poll, another send that
 * does not fit, shutdown, the hold's time running out) sends the request
 * as Data and returns the half to Combined.
 *
 * Security: a SinkAvail's key covers exactly the advertised bytes with
 * remote write only (and the local write verbs require with it), and is
 * deregistered before recv() returns, whatever the outcome; if the
 * connection died with the key live the endpoint is closed first.  The
 * source's side of a write is the application's buffer registered for
 * local access (regcache.c) or the bounce buffer; a send() never returns
 * while a write from its buffer is in flight.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "log.h"
#include "regcache.h"
#include "tunables.h"

#define LOGSYS "zcopy"

/* SinkCancelAcks a sink may be owed, and cancels a source will answer. */
#define WZ_MAX_CANCELS 4
#define WZ_BOUNCE_SIZE 65536

/* --- sink -------------------------------------------------------------------- */

static bool wz_advert_over(const struct sdp_conn *c)
{
	return c->snk.done || c->snk.dead || c->snk.acked;
}

bool wz_may_advertise(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
		      size_t skip, int flags)
{
	const struct sdp_conn *c = s->conn;

	if (!c || !c->ep || c->rx_mode != SDP_MODE_PIPELINED || !s->zcopy_thresh ||
	    c->await_first_rx || (flags & MSG_PEEK) || s->state != SDP_S_ESTABLISHED ||
	    s->shut_rd || c->transport_down || c->post_failed || c->disconn_rcvd)
		return false;
	if (c->rx_bytes || c->rx_sa.active || c->snk.active || c->snk_acks_due >= WZ_MAX_CANCELS)
		return false;
	int i = iov_seek(iov, iovcnt, &skip);

	if (i == iovcnt || iov[i].iov_len - skip < (size_t)s->zcopy_thresh)
		return false;
	if (!wz_transport_writes(c) || !ctrl_slot_free(c) || !conn_fits(c, SDP_SINKAH_LEN))
		return false;
	/* A held request rides on it and wants a data credit; a bare advert
	 * a control one. */
	return c->trans_held ? sdp_can_send_data(&c->cr) : sdp_can_send_ctrl(&c->cr);
}

ssize_t wz_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, size_t skip,
		uint64_t deadline)
{
	struct sdp_conn *c = s->conn;
	int i = iov_seek(iov, iovcnt, &skip);
	uint8_t *addr = (uint8_t *)iov[i].iov_base + skip;
	uint64_t n = iov[i].iov_len - skip;
	struct oti_mr *mr;
	int ret;

	if (n > zc_op_max(c))
		n = zc_op_max(c);
	ret = c->t->mr_reg(c->ep, addr, (size_t)n, OTI_ACCESS_REMOTE_WRITE, &mr);
	if (ret) {
		sdp_dbg(LOGSYS, "sd %d: cannot register %u bytes for SinkAvail (%d)", s->sd,
			(unsigned)n, ret);
		return -ENOBUFS;	/* the caller waits the usual way */
	}
	struct sdp_sinkah a = {
		.len = (uint32_t)n,
		.rkey = mr->rkey,
		.vaddr = mr->raddr_base + (uint64_t)(addr - (uint8_t *)mr->addr),
		.non_discards = c->nond_rcvd,
	};

	mode_note_advert(s);
	c->snk = (struct sdp_snk){
		.active = true, .len = (uint32_t)n, .mr = mr, .mseq = c->cr.next_mseq,
	};
	ret = conn_post_sink_avail(s, &a);
	if (ret) {
		/* -ENOBUFS: the held request took the last credit, nothing
		 * was advertised.  Otherwise the connection failed. */
		if (ret != -ENOBUFS)
			conn_kill_ep(s);
		c->t->mr_dereg(mr);
		c->snk = (struct sdp_snk){ 0 };
		if (ret == -ENOBUFS)
			return ret;
		return s->so_error ? 0 : -ECONNRESET;
	}
	SDP_STAT_INC(zcopy_sink_adverts, 1);
	progress_posted(s);
	sdp_dbg(LOGSYS, "sd %d: SinkAvail of %u bytes", s->sd, (unsigned)n);

	bool intr = false, user_cancel = false, orderly = true;
	uint64_t cancel_by = 0;

	sock_drive(s);
	while (!wz_advert_over(c)) {
		if (s->conn != c)
			return -ECONNRESET;	/* cannot happen while we hold a ref */
		if (zc_conn_dead(s)) {
			orderly = false;
			break;
		}
		uint64_t now = sdp_now_ns();

		if (!cancel_by && (intr || (deadline && now >= deadline))) {
			sdp_dbg(LOGSYS, "sd %d: cancelling SinkAvail (%s)", s->sd,
				intr ? "signal" : "receive timeout");
			user_cancel = true;
			c->ctrl_pending |= SDP_CTRL_SINK_AVAIL_CANCEL;
			conn_push(s);
			cancel_by = now + (uint64_t)tun_int(TUN_zcopy_cancel_timeout_ms) * 1000000ull;
		}
		if (cancel_by && now >= cancel_by) {
			sdp_warn(LOGSYS, "sd %d: peer did not answer SinkAvailCancel; resetting", s->sd);
			conn_abort(s, ECONNRESET);
			orderly = false;
			break;
		}
		zc_wait(s, cancel_by ? cancel_by : deadline, cancel_by ? NULL : &intr);
	}

	uint32_t got = c->snk.done ? c->snk.written : 0;

	if (!c->snk.cancel_sent)
		c->ctrl_pending &= ~SDP_CTRL_SINK_AVAIL_CANCEL;	/* not needed any more */
	if (!orderly)
		conn_kill_ep(s);
	c->t->mr_dereg(mr);
	c->snk = (struct sdp_snk){ 0 };
	if (!orderly)
		return s->so_error ? 0 : -ECONNRESET;
	if (got) {
		SDP_STAT_INC(zcopy_sink_bytes, got);
		SDP_STAT_INC(bytes_received, got);
		return got;
	}
	if (user_cancel && !c->rx_bytes)
		return intr ? -EINTR : -EAGAIN;
	return 0;	/* dead: what killed it is queued */
}

void wz_advert_dead(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!wz_advert_live(c))
		return;
	c->snk.dead = true;
	SDP_STAT_INC(zcopy_sink_stale, 1);
	sock_changed(s, false);
}

void wz_stream_msg_rcvd(struct sdp_sock *s)
{
	s->conn->nond_rcvd++;
	wz_advert_dead(s);
}

void wz_wr_compl_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, uint32_t n)
{
	struct sdp_conn *c = s->conn;

	if (!wz_advert_live(c) || c->snk.acked || sdp_seq_before(h->mseq_ack, c->snk.mseq)) {
		conn_protocol_error(s, "RdmaWrCompl without a SinkAvail");
		return;
	}
	if (n > c->snk.len) {
		conn_protocol_error(s, "RdmaWrCompl for more than was advertised");
		return;
	}
	c->snk.written = n;
	c->snk.done = true;
	sock_changed(s, true);
}

void wz_cancel_ack_rcvd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c->snk_acks_due) {
		conn_protocol_error(s, "SinkCancelAck without a SinkAvailCancel");
		return;
	}
	c->snk_acks_due--;
	if (c->snk.active && c->snk.cancel_sent && !c->snk_acks_due) {
		c->snk.acked = true;
		sock_changed(s, false);
	}
}

/* --- source ------------------------------------------------------------------ */

int wz_sink_avail_check(struct sdp_sock *s, uint32_t payload)
{
	if (payload && s->conn->rx_mode != SDP_MODE_TRANSACTION) {
		conn_protocol_error(s, "SinkAvail with data outside Transaction mode");
		return -EPROTO;
	}
	return 0;
}

void wz_sink_avail_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, const uint8_t *ext,
			uint32_t payload)
{
	struct sdp_conn *c = s->conn;
	struct sdp_sinkah a;

	sdp_sinkah_decode(ext, &a);
	(void)payload;		/* checked by wz_sink_avail_check() */
	SDP_STAT_INC(zcopy_peer_adverts, 1);
	if (c->tx_mode != SDP_MODE_PIPELINED) {
		/* Sent before the peer saw our ModeChange out of Pipelined:
		 * stale (it learns from the ModeChange); after: an error. */
		if (!c->was_pipelined || !sdp_seq_before(h->mseq_ack, c->mch_mseq)) {
			conn_protocol_error(s, "SinkAvail outside Pipelined mode");
			return;
		}
		return;
	}
	if (c->psnk.active) {
		conn_protocol_error(s, "a second SinkAvail (max_adverts is 1)");
		return;
	}
	if (a.len == 0) {
		conn_protocol_error(s, "empty SinkAvail");
		return;
	}
	if (a.non_discards != c->nond_sent) {
		/* Our data crossed it: the sink will know when that arrives. */
		sdp_dbg(LOGSYS, "sd %d: stale SinkAvail (%u data messages seen of %u)", s->sd,
			a.non_discards, c->nond_sent);
		mode_note_stale(s);
		return;
	}
	if (c->tx_sa.active && !c->tx_sa.ended && c->tx_sa.read < c->tx_sa.len - c->tx_sa.inline_len) {
		/* Our SrcAvail crossed it: the sink ignores ours (it advertised
		 * with nothing offered), so we take ours back and write. */
		if (c->tx_sa.read || c->tx_sa.inline_len) {
			conn_protocol_error(s, "SinkAvail while reading our SrcAvail");
			return;
		}
		c->tx_sa.ended = true;
		c->tx_sa.pulled = true;
	}
	c->stale_adverts = 0;
	c->psnk = (struct sdp_psnk){
		.active = true, .rkey = a.rkey, .raddr = a.vaddr, .len = a.len,
	};
	sock_changed(s, false);
}

void wz_sink_cancel_rcvd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (++c->psnk_cancels > WZ_MAX_CANCELS) {
		conn_protocol_error(s, "SinkAvailCancels without end");
		return;
	}
	c->psnk.active = false;
	c->ctrl_pending |= SDP_CTRL_SINK_CANCEL_ACK;
}

bool wz_send_ready(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	/* A socket with zero copy off sends by Bcopy, which drops the
	 * advert. */
	return c && s->zcopy_thresh && c->psnk.active && !conn_tx_unposted(c) &&
	       !c->tx_sa.active &&
	       ctrl_slot_free(c) && sdp_can_send_ctrl(&c->cr) && !zc_conn_dead(s);
}

static int wz_bounce_setup(struct sdp_conn *c)
{
	if (c->bounce_mem)
		return 0;
	c->bounce_mem = aligned_alloc(4096, WZ_BOUNCE_SIZE);
	if (!c->bounce_mem)
		return -ENOMEM;
	int ret = c->t->mr_reg(c->ep, c->bounce_mem, WZ_BOUNCE_SIZE, 0, &c->bounce_mr);

	if (ret) {
		free(c->bounce_mem);
		c->bounce_mem = NULL;
		return ret;
	}
	c->bounce_size = WZ_BOUNCE_SIZE;
	return 0;
}

/* Wait, whatever happens, until no write of ours is in flight. */
static int wz_wait_writes(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	while (c->wr_inflight && s->conn == c) {
		if (s->state != SDP_S_ESTABLISHED || c->transport_down) {
			conn_kill_ep(s);
			c->wr_inflight = 0;
			return -ECONNRESET;
		}
		zc_wait(s, 0, NULL);
	}
	return s->conn == c ? c->wr_status : -ECONNRESET;
}

ssize_t wz_send(struct sdp_sock *s, const struct iovec *iov, int iovcnt, size_t skip,
		bool dontwait)
{
	struct sdp_conn *c = s->conn;
	size_t off = skip;
	int i = iov_seek(iov, iovcnt, &off);
	size_t first = iov[i].iov_len - off;
	uint8_t *src = (uint8_t *)iov[i].iov_base + off;
	uint64_t n = first;
	bool direct = !dontwait && s->zcopy_thresh && first >= (size_t)s->zcopy_thresh;
	struct sdp_reg *reg = NULL;
	struct oti_sge sge;
	struct oti_mr *mr;
	int ret;

	if (n > c->psnk.len)
		n = c->psnk.len;
	if (n > zc_op_max(c))
		n = zc_op_max(c);
	if (direct) {
		ret = zc_regcache_setup(c);
		if (!ret)
			ret = regcache_get(c->regcache, src, (size_t)n, &reg, &mr);
		if (ret)
			direct = false;		/* read-only memory, RLIMIT_MEMLOCK: bounce */
		else
			sge = (struct oti_sge){ .addr = src, .len = (uint32_t)n, .mr = mr };
	}
	if (!direct) {
		/* The bounce buffer is free once its last write is done. */
		if (c->wr_inflight)
			sock_drive(s);
		if (c->wr_inflight || !c->psnk.active || wz_bounce_setup(c))
			return 0;	/* Bcopy */
		size_t left = c->psnk.len < c->bounce_size ? c->psnk.len : c->bounce_size;

		n = 0;
		for (; i < iovcnt && left; i++, off = 0) {
			size_t k = iov[i].iov_len - off;

			if (k > left)
				k = left;
			memcpy(c->bounce_mem + n, (uint8_t *)iov[i].iov_base + off, k);
			n += k;
			left -= k;
		}
		sge = (struct oti_sge){ .addr = c->bounce_mem, .len = (uint32_t)n, .mr = c->bounce_mr };
	}
	ret = c->t->rdma_write(c->ep, &sge, c->psnk.raddr, c->psnk.rkey, SDP_CTX_WRITE);
	if (ret) {
		if (reg)
			regcache_put(c->regcache, reg);
		conn_abort(s, ECONNRESET);
		return -ECONNRESET;
	}
	c->wr_inflight++;
	c->wr_status = 0;
	c->psnk.active = false;

	uint8_t ext[SDP_U32H_LEN];

	sdp_u32h_encode(ext, (uint32_t)n);
	/* The transport delivers it only after the write has landed. */
	ret = conn_post_ctrl(s, SDP_MID_RDMA_WR_COMPL, ext, sizeof(ext));
	SDP_STAT_INC(zcopy_writes, 1);
	SDP_STAT_INC(zcopy_bytes_written, n);
	SDP_STAT_INC(bytes_sent, n);
	progress_posted(s);
	mode_note_send(s, true);
	if (direct) {
		/* The device reads the application's buffer until then. */
		int st = wz_wait_writes(s);

		if (s->conn == c)
			regcache_put(c->regcache, reg);
		if (st)
			return st;
	}
	if (ret)
		return -ECONNRESET;
	return (ssize_t)n;
}

void wz_write_done(struct sdp_sock *s, const struct oti_wc *wc)
{
	struct sdp_conn *c = s->conn;

	if (!c->wr_inflight)
		return;		/* given up: the ep was closed */
	c->wr_inflight--;
	if (wc->status) {
		c->wr_status = -ECONNRESET;
		/* A key the sink does not honour is its fault; a flush is the
		 * connection going away, reported by its own event. */
		if (wc->status != -ECANCELED && !c->transport_down)
			conn_protocol_error(s, "RDMA write into the peer's SinkAvail failed");
	}
	sock_changed(s, false);
}

void wz_conn_free(struct sdp_conn *c)
{
	if (c->snk.mr)
		c->t->mr_dereg(c->snk.mr);
	c->snk.mr = NULL;
	if (c->bounce_mr)
		c->t->mr_dereg(c->bounce_mr);
	c->bounce_mr = NULL;
	free(c->bounce_mem);
	c->bounce_mem = NULL;
}
