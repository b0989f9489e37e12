/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Read Zcopy (IBTA Annex A4, "source-advertised"): a large send is not
 * copied into send buffers; the source advertises the application's own
 * buffer with SrcAvail and the sink RDMA-reads it, straight into the
 * buffer its application gave recv() when that one is large enough, into a
 * private staging buffer otherwise.
 *
 *   source                                     sink
 *   register buf (remote read, this op only)
 *   SrcAvail{len, rkey, vaddr} + 32 bytes ───▶ inline bytes queue as data,
 *                                              the rest as an SA segment
 *                                              recv(): RDMA read → buffer
 *                                   ◀─── RdmaRdCompl{n}   (once per read)
 *   all read: deregister, send() returns
 *
 * The rules both sides keep (Combined mode, max_adverts 1 each way):
 *
 *  - One SrcAvail of ours at a time, with 1..32 bytes inline (fewer if
 *    the peer's buffers take no more, none if they cannot take one: no
 *    SrcAvail then), and nothing else of the stream after it until the
 *    sink is done: our Bcopy data and DisConn wait (conn_flush()).  A
 *    send that is non-blocking, or smaller than the socket's zcopy
 *    threshold, uses Bcopy.
 *  - The sink reports every read with RdmaRdCompl.  SendSM ends the offer
 *    early: the source takes back what was not read and sends it by Bcopy
 *    in the same call.  A sink without RDMA read answers SendSM at once.
 *  - The source cancels with SrcAvailCancel when the caller's SO_SNDTIMEO
 *    passes or a signal interrupts the send, and when the sink makes no
 *    progress for a while (it may be a program that sends before it reads,
 *    like the source itself: then neither would ever read).  The sink
 *    finishes its read in flight, reports it, and answers SendSM; the
 *    source waits for that answer (the peer may be reading the buffer until
 *    then), at most zcopy_cancel_timeout_ms, then resets the connection.
 *    A cancelled send returns what the sink took, as a partial write.
 *  - Crossing offers (both sides send large at once, neither reads): a
 *    SrcAvail that arrives while ours is out makes us cancel ours and go on
 *    by Bcopy; a send that finds the peer's offer unread uses Bcopy.
 *  - An answer is matched to the current offer by the BSDH mseq_ack: only
 *    one that acknowledges our SrcAvail can be about it.
 *
 * Security: the remote key of a SrcAvail names exactly the advertised
 * bytes, with remote read access only, and is deregistered before send()
 * returns, whatever the outcome: a sink can read nothing before or after,
 * and nothing once the operation is over.  If it ends abnormally (the
 * connection died with the key live) the endpoint is closed first, so that
 * not even a transport's queued read response can touch the buffer once
 * the application has it back.  The sink's side of a read is an
 * application buffer registered for local write only (regcache.c), or the
 * staging buffer; a recv() never returns while a read into its buffer is
 * in flight.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "log.h"
#include "regcache.h"
#include "tunables.h"

#define LOGSYS "zcopy"

/* SendSMs in a row with nothing read before we stop offering: the peer
 * cannot read (an older or Bcopy-only implementation). */
#define ZC_MAX_REFUSALS 4

static bool zc_transport_reads(const struct sdp_conn *c)
{
	return c->caps.flags & OTI_CAP_RDMA_READ;
}

uint64_t zc_op_max(const struct sdp_conn *c)
{
	uint64_t max = (uint64_t)tun_int(TUN_zcopy_max);

	if (c->caps.max_msg_size && max > c->caps.max_msg_size)
		max = c->caps.max_msg_size;
	return max > UINT32_MAX ? UINT32_MAX : max;
}

/* --- source ------------------------------------------------------------------ */

/* Bytes of the stream our SrcAvail carries inline at most: what fits the
 * peer's buffers after BSDH and SrcAH, up to SDP_SA_INLINE; none in
 * Pipelined mode.  -1: no SrcAvail fits (Combined mode wants one byte). */
static int zc_inline_max(const struct sdp_conn *c)
{
	if (!conn_fits(c, SDP_SRCAH_LEN))
		return -1;
	if (c->tx_mode == SDP_MODE_PIPELINED)
		return 0;
	uint32_t room = c->tx_size - SDP_BSDH_LEN - SDP_SRCAH_LEN;

	return room == 0 ? -1 : room < SDP_SA_INLINE ? (int)room : SDP_SA_INLINE;
}

const void *zc_send_candidate(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
			      size_t skip, size_t *len)
{
	const struct sdp_conn *c = s->conn;

	if (!s->zcopy_thresh || !c || !c->ep || c->zc_refusals >= ZC_MAX_REFUSALS ||
	    c->await_first_rx || zc_inline_max(c) < 0)
		return NULL;
	int i = iov_seek(iov, iovcnt, &skip);

	if (i == iovcnt)
		return NULL;
	size_t n = iov[i].iov_len - skip;

	if (n < (size_t)s->zcopy_thresh || !zc_transport_reads(c))
		return NULL;
	uint64_t max = zc_op_max(c);

	*len = n > max ? (size_t)max : n;
	return (const uint8_t *)iov[i].iov_base + skip;
}

size_t zc_bcopy_limit(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
		      size_t skip)
{
	size_t before = 0, len;

	for (int i = iov_seek(iov, iovcnt, &skip); i < iovcnt; i++, skip = 0) {
		struct iovec one = { .iov_base = (uint8_t *)iov[i].iov_base + skip,
				     .iov_len = iov[i].iov_len - skip };

		if (zc_send_candidate(s, &one, 1, 0, &len))
			return before;
		before += one.iov_len;
	}
	return SIZE_MAX;
}

bool zc_conn_dead(const struct sdp_sock *s)
{
	return !s->conn || s->state != SDP_S_ESTABLISHED || s->conn->transport_down ||
	       s->conn->post_failed;
}

/*
 * Sleep until something changes on s, or until deadline (signals end the
 * sleep early; *intr says so), then drive the transport.  Callers check
 * their condition after each call: it may already hold.
 */
void zc_wait(struct sdp_sock *s, uint64_t deadline, bool *intr)
{
	int ret = sdp_wait(s, deadline);

	if (ret == -EINTR && intr)
		*intr = true;
	if (s->conn)
		sock_drive(s);
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	return a < b ? a : b;
}

/* Our turn to offer: no offer of ours out, all Bcopy data of ours posted
 * (it is older), credits for a message with payload and a control slot. */
static bool zc_can_offer(struct sdp_conn *c)
{
	return !c->tx_sa.active && !conn_tx_unposted(c) &&
	       sdp_can_send_data(&c->cr) && ctrl_slot_free(c);
}

static void zc_release_tx(struct sdp_sock *s, struct sdp_conn *c, bool orderly)
{
	if (!orderly)
		conn_kill_ep(s);
	if (c->tx_sa.mr)
		c->t->mr_dereg(c->tx_sa.mr);
	c->tx_sa = (struct sdp_tx_sa){ 0 };
	/* Bcopy data and a DisConn may have waited for this. */
	if (!zc_conn_dead(s))
		conn_push(s);
}

/* Wait for our turn to offer; a deadline or signal here costs nothing
 * yet.  1: offer now; 0: do not (*outcome says what instead); or a
 * negative errno. */
static int zc_wait_turn(struct sdp_sock *s, struct sdp_conn *c, uint64_t deadline,
			enum zc_outcome *outcome)
{
	for (;;) {
		if (zc_conn_dead(s) || s->conn != c)
			return 0;
		if (c->rx_sa.active)
			return 0;	/* the peer's offer is unread: no crossing */
		if (c->psnk.active) {
			/* The peer's advert takes it (write_zcopy.c), once
			 * credits and a control slot allow: the caller
			 * waits, it does not call again at once. */
			*outcome = ZC_WAIT;
			return 0;
		}
		if (zc_can_offer(c))
			return 1;
		if (conn_tx_unposted(c))
			conn_push(s);
		if (zc_can_offer(c))
			return 1;
		sock_drive(s);
		if (s->conn != c || zc_can_offer(c))
			continue;
		int ret = sdp_wait(s, deadline);

		if (ret)
			return ret;
	}
}

/* Register buf[0, len) and post our SrcAvail for it, with the inline
 * bytes the mode wants (*inline_len).  False: nothing was offered. */
static bool zc_offer(struct sdp_sock *s, struct sdp_conn *c, const void *buf, size_t len,
		     uint32_t *inline_len)
{
	/* Combined mode wants stream bytes inline, Pipelined none (the mode
	 * may have changed while we waited). */
	int imax = zc_inline_max(c);
	struct oti_mr *mr;
	int ret;

	if (imax < 0)
		return false;	/* no SrcAvail fits the peer's buffers in this mode */
	ret = c->t->mr_reg(c->ep, (void *)buf, len, OTI_ACCESS_REMOTE_READ, &mr);
	if (ret) {
		/* RLIMIT_MEMLOCK, or memory a device cannot map: copy it. */
		sdp_dbg(LOGSYS, "sd %d: cannot register %zu bytes for SrcAvail (%d): Bcopy",
			s->sd, len, ret);
		return false;
	}
	uint8_t ext[SDP_SRCAH_LEN + SDP_SA_INLINE];
	struct sdp_srcah sa = {
		.len = (uint32_t)len,
		.rkey = mr->rkey,
		.vaddr = mr->raddr_base + (uint64_t)((const uint8_t *)buf - (const uint8_t *)mr->addr),
	};

	*inline_len = len < (size_t)imax ? (uint32_t)len : (uint32_t)imax;
	sdp_srcah_encode(ext, &sa);
	memcpy(ext + SDP_SRCAH_LEN, buf, *inline_len);
	c->tx_sa = (struct sdp_tx_sa){
		.active = true,
		.mseq = c->cr.next_mseq,
		.len = (uint32_t)len,
		.inline_len = *inline_len,
		.mr = mr,
	};
	if (conn_post_ctrl(s, SDP_MID_SRC_AVAIL, ext, SDP_SRCAH_LEN + *inline_len)) {
		zc_release_tx(s, c, false);
		return false;
	}
	if (*inline_len)
		c->nond_sent++;
	SDP_STAT_INC(zcopy_offers, 1);
	SDP_STAT_INC(bytes_sent, *inline_len);
	progress_posted(s);
	return true;
}

/*
 * Wait until the sink has read the want bytes our SrcAvail offers beyond
 * its inline ones, or ended it; cancel it for the caller's deadline, a
 * signal, a crossing SrcAvail or a sink that reads nothing for
 * zcopy_stall_ms (see the header: a peer that sends before it reads).
 * *orderly is false when the connection broke, *user_cancel true when the
 * caller's deadline or a signal cancelled it.  -ECONNRESET if the
 * connection was freed meanwhile.
 */
static int zc_await_sink(struct sdp_sock *s, struct sdp_conn *c, uint32_t want,
			 uint64_t deadline, bool *orderly, bool *user_cancel)
{
	*orderly = true;
	*user_cancel = false;
	sock_drive(s);

	uint64_t stall_ns = (uint64_t)tun_int(TUN_zcopy_stall_ms) * 1000000ull;
	uint64_t stall_at = sdp_now_ns() + stall_ns;
	uint64_t cancel_by = 0;
	uint32_t seen = 0;
	bool intr = false;

	while (c->tx_sa.read < want && !c->tx_sa.ended) {
		if (s->conn != c)
			return -ECONNRESET;	/* freed under us: cannot happen while we hold a ref */
		if (zc_conn_dead(s)) {
			*orderly = false;
			return 0;
		}
		uint64_t now = sdp_now_ns();

		if (c->tx_sa.read != seen) {
			seen = c->tx_sa.read;
			stall_at = now + stall_ns;
		}
		if (!c->tx_sa.cancel_sent && !(c->ctrl_pending & SDP_CTRL_SRC_AVAIL_CANCEL)) {
			bool timed_out = deadline && now >= deadline;

			if (intr || timed_out)
				*user_cancel = true;
			if (*user_cancel || c->tx_sa.want_cancel || now >= stall_at) {
				sdp_dbg(LOGSYS, "sd %d: cancelling SrcAvail (%s), %u of %u read",
					s->sd, intr ? "signal" : timed_out ? "send timeout" :
					c->tx_sa.want_cancel ? "crossing SrcAvail" : "no reads",
					c->tx_sa.read, want);
				c->ctrl_pending |= SDP_CTRL_SRC_AVAIL_CANCEL;
				conn_push(s);
				cancel_by = now + (uint64_t)tun_int(TUN_zcopy_cancel_timeout_ms) * 1000000ull;
			}
		}
		if (cancel_by && now >= cancel_by) {
			sdp_warn(LOGSYS, "sd %d: peer did not answer SrcAvailCancel; resetting", s->sd);
			conn_abort(s, ECONNRESET);
			*orderly = false;
			return 0;
		}
		/* Before the cancel: the caller's deadline and the stall
		 * check; after it: only the cancel's own limit.  Signals
		 * after the cancel change nothing. */
		zc_wait(s, cancel_by ? cancel_by : earliest(deadline, stall_at),
			cancel_by ? NULL : &intr);
	}
	return 0;
}

ssize_t zc_send(struct sdp_sock *s, const void *buf, size_t len, uint64_t deadline,
		enum zc_outcome *outcome)
{
	struct sdp_conn *c = s->conn;
	uint32_t inline_len;
	bool user_cancel, orderly;
	int ret;

	*outcome = ZC_BCOPY;
	ret = zc_wait_turn(s, c, deadline, outcome);
	if (ret <= 0)
		return ret;
	if (!zc_offer(s, c, buf, len, &inline_len))
		return 0;
	uint32_t want = (uint32_t)len - inline_len;

	ret = zc_await_sink(s, c, want, deadline, &orderly, &user_cancel);
	if (ret)
		return ret;

	uint32_t taken = inline_len + c->tx_sa.read;
	bool pulled = c->tx_sa.pulled;

	if (pulled)
		SDP_STAT_INC(zcopy_pulled, 1);
	bool refused = c->tx_sa.ended && c->tx_sa.read < want && !pulled;

	if (refused && !c->tx_sa.cancel_sent && !(c->ctrl_pending & SDP_CTRL_SRC_AVAIL_CANCEL)) {
		SDP_STAT_INC(zcopy_refused, 1);
		if (c->tx_sa.read == 0)
			c->zc_refusals++;
	} else if (c->tx_sa.read) {
		c->zc_refusals = 0;
	}
	/* A cancel we queued but never posted needs no answer any more. */
	c->ctrl_pending &= ~SDP_CTRL_SRC_AVAIL_CANCEL;
	zc_release_tx(s, c, orderly);
	if (!orderly)
		return taken;		/* the caller reports the error */
	/* Taken back for the sink's advert: the caller writes into it. */
	*outcome = pulled ? ZC_DONE : user_cancel ? ZC_CANCELLED : refused ? ZC_BCOPY : ZC_DONE;
	return taken;
}

void zc_rd_compl_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, uint32_t n)
{
	struct sdp_tx_sa *sa = &s->conn->tx_sa;

	if (!sa->active || sdp_seq_before(h->mseq_ack, sa->mseq)) {
		conn_protocol_error(s, "RdmaRdCompl without a SrcAvail");
		return;
	}
	if (sa->ended || n > sa->len - sa->inline_len - sa->read) {
		conn_protocol_error(s, "RdmaRdCompl for more than was advertised");
		return;
	}
	sa->read += n;
	SDP_STAT_INC(zcopy_bytes_sent, n);
	SDP_STAT_INC(bytes_sent, n);
	sock_changed(s, false);
}

void zc_send_sm_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h)
{
	struct sdp_tx_sa *sa = &s->conn->tx_sa;

	/* One that does not acknowledge our SrcAvail was about an earlier,
	 * finished one (a cancel that crossed the last RdmaRdCompl). */
	if (!sa->active || sdp_seq_before(h->mseq_ack, sa->mseq))
		return;
	sa->ended = true;
	sock_changed(s, false);
}

/* --- sink -------------------------------------------------------------------- */

/* Queue index of the SA segment; there is at most one. */
static int rxq_find_sa(struct sdp_conn *c)
{
	for (uint32_t i = 0; i < c->rxq_count; i++)
		if (rxq_at(c, i)->slot == SDP_SLOT_SA)
			return (int)i;
	return -1;
}

bool zc_rx_at_head(const struct sdp_conn *c)
{
	return c->rxq_count && c->rxq[c->rxq_head].slot == SDP_SLOT_SA;
}

static bool rxq_has_stage(struct sdp_conn *c)
{
	for (uint32_t i = 0; i < c->rxq_count; i++)
		if (rxq_at(c, i)->slot == SDP_SLOT_STAGE)
			return true;
	return false;
}

bool zc_peek_wants_stage(struct sdp_conn *c, size_t want)
{
	int sa = rxq_find_sa(c);
	size_t before = 0;

	if (sa < 0 || c->rx_sa.inflight || rxq_has_stage(c))
		return false;
	for (int i = 0; i < sa; i++)
		before += rxq_at(c, (uint32_t)i)->len;
	return before < want;
}

/* The peer's offer is over: what was not read is not ours to deliver
 * (the source's send returns without it), and SendSM tells it so. */
static void zc_rx_finish(struct sdp_sock *s, bool send_sm)
{
	struct sdp_conn *c = s->conn;
	int i = rxq_find_sa(c);

	if (i >= 0) {
		c->rx_bytes -= rxq_at(c, (uint32_t)i)->len;
		rxq_remove(c, (uint32_t)i);
	}
	c->rx_sa.active = false;
	c->rx_sa.cancelled = false;
	if (send_sm)
		c->ctrl_pending |= SDP_CTRL_SEND_SM;
	sock_changed(s, false);
}

int zc_src_avail_check(struct sdp_sock *s, const uint8_t *ext, uint32_t inline_len)
{
	struct sdp_conn *c = s->conn;
	struct sdp_srcah sa;
	const char *why = NULL;

	sdp_srcah_decode(ext, &sa);
	if (c->rx_mode == SDP_MODE_PIPELINED && inline_len)
		why = "SrcAvail with data in Pipelined mode";
	else if (c->rx_mode != SDP_MODE_PIPELINED && !inline_len)
		why = "SrcAvail without data outside Pipelined mode";
	else if (c->rx_sa.active && !wz_advert_live(c))
		why = "a second SrcAvail (max_adverts is 1)";
	else if (sa.len < inline_len)
		why = "SrcAvail shorter than its inline data";
	if (!why)
		return 0;
	conn_protocol_error(s, why);
	return -EPROTO;
}

void zc_src_avail_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, const uint8_t *ext,
		       uint32_t inline_len)
{
	struct sdp_conn *c = s->conn;
	struct sdp_srcah sa;

	sdp_srcah_decode(ext, &sa);
	/* It crossed our live SinkAvail: the source takes it back and
	 * writes into the advert instead (write_zcopy.c). */
	if (wz_advert_live(c))
		return;
	(void)h;
	uint32_t rest = sa.len - inline_len;

	/* Ours crosses it: take ours back, so one side reads. */
	if (c->tx_sa.active && !c->tx_sa.cancel_sent)
		c->tx_sa.want_cancel = true;
	if (rest == 0)
		return;		/* all of it came inline: nothing to answer */
	/* Without RDMA read, or without room for our RdmaRdCompl in the
	 * peer's buffers, we decline: the rest comes by Bcopy. */
	if (!zc_transport_reads(c) || !conn_fits(c, SDP_U32H_LEN)) {
		c->ctrl_pending |= SDP_CTRL_SEND_SM;
		return;
	}
	/* The last read's registration may not be put yet: its recv() is
	 * still on its way out (zc_recv() puts it). */
	c->rx_sa = (struct sdp_rx_sa){
		.active = true,
		.rkey = sa.rkey,
		.raddr = sa.vaddr + inline_len,
		.left = rest,
		.reg = c->rx_sa.reg,
	};
	sdp_dbg(LOGSYS, "sd %d: SrcAvail of %u bytes, %u inline", s->sd, sa.len, inline_len);
	*rxq_at(c, c->rxq_count) = (struct sdp_rx_seg){ .slot = SDP_SLOT_SA, .len = rest };
	c->rxq_count++;
	c->rx_bytes += rest;
}

void zc_cancel_rcvd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	/* No offer: we finished it before the cancel came; the source has
	 * our RdmaRdCompl for all of it. */
	if (!c->rx_sa.active)
		return;
	if (c->rx_sa.inflight) {
		c->rx_sa.cancelled = true;	/* zc_read_done() finishes */
		return;
	}
	zc_rx_finish(s, true);
}

/* Access for the local side of a read: iWARP also wants remote write on
 * a read's sink.  Application buffers are then registered for one read
 * each (regcache.c caches no remote access); the staging buffer keeps its
 * registration: it only ever holds this peer's bytes, so a write of the
 * peer's into it can do no more than its data could. */
static unsigned zc_sink_access(const struct sdp_conn *c)
{
	if (c->caps.flags & OTI_CAP_IWARP_RULES)
		return OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE;
	return OTI_ACCESS_LOCAL_WRITE;
}

static int zc_stage_setup(struct sdp_conn *c)
{
	if (c->stage_mem)
		return 0;
	uint32_t size = (uint32_t)tun_int(TUN_zcopy_stage);

	c->stage_mem = aligned_alloc(4096, ((size_t)size + 4095) & ~(size_t)4095);
	if (!c->stage_mem)
		return -ENOMEM;
	int ret = c->t->mr_reg(c->ep, c->stage_mem, size, zc_sink_access(c), &c->stage_mr);

	if (ret) {
		free(c->stage_mem);
		c->stage_mem = NULL;
		return ret;
	}
	c->stage_size = size;
	return 0;
}

int zc_regcache_setup(struct sdp_conn *c)
{
	if (!c->regcache)
		c->regcache = regcache_new(c->t, c->ep, zc_sink_access(c));
	return c->regcache ? 0 : -ENOMEM;
}

/* The registration of a direct read's buffer lives as long as the read. */
static void zc_put_reg(struct sdp_conn *c)
{
	if (c->rx_sa.reg) {
		regcache_put(c->regcache, c->rx_sa.reg);
		c->rx_sa.reg = NULL;
	}
}

/* The smallest room in a recv() buffer worth a read of its own: the
 * socket's threshold (a socket with zero copy off always stages). */
static size_t zc_direct_min(const struct sdp_sock *s)
{
	return s->zcopy_thresh ? (size_t)s->zcopy_thresh : SIZE_MAX;
}

ssize_t zc_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		size_t skip, bool *busy)
{
	struct sdp_conn *c = s->conn;
	int i, ret;

	*busy = false;
	if (!(flags & MSG_PEEK) ? !zc_rx_at_head(c) : rxq_find_sa(c) < 0)
		return 0;
	if (zc_conn_dead(s) && !c->rx_sa.inflight) {
		/* The source is gone with the rest of its offer. */
		zc_rx_finish(s, false);
		return s->so_error ? 0 : -ECONNRESET;
	}
	if (c->rx_sa.inflight) {
		*busy = true;
		return 0;
	}
	i = iov_seek(iov, iovcnt, &skip);
	if (i == iovcnt)
		return 0;
	size_t room = iov[i].iov_len - skip;
	uint64_t n = c->rx_sa.left;
	/* The offer's inline bytes, just copied by this call, do not make
	 * its buffer too small for the rest. */
	bool direct = !(flags & MSG_PEEK) &&
		      (room >= zc_direct_min(s) ||
		       (skip <= SDP_SA_INLINE && room + skip >= zc_direct_min(s)));
	struct oti_sge sge;
	struct oti_mr *mr;

	if (direct) {
		if (n > room)
			n = room;
		if (n > zc_op_max(c))
			n = zc_op_max(c);
		sge.addr = (uint8_t *)iov[i].iov_base + skip;
		ret = zc_regcache_setup(c);
		if (!ret)
			ret = regcache_get(c->regcache, sge.addr, (size_t)n, &c->rx_sa.reg, &mr);
		if (ret)
			direct = false;		/* not registrable: stage it */
		else
			sge.mr = mr;
	}
	if (!direct) {
		if (rxq_has_stage(c))
			return 0;	/* conn_recv() serves that first */
		ret = zc_stage_setup(c);
		if (ret) {
			/* No memory to read into: let the source send it. */
			zc_rx_finish(s, true);
			conn_push(s);
			return 0;
		}
		n = c->rx_sa.left;
		if (n > c->stage_size)
			n = c->stage_size;
		/* Staged bytes wait for the application like received
		 * ones: a set SO_RCVBUF bounds them (sock.c). */
		if (s->rcvbuf_set && n > (uint64_t)s->rcvbuf)
			n = (uint64_t)s->rcvbuf;
		sge.addr = c->stage_mem;
		sge.mr = c->stage_mr;
	}
	sge.len = (uint32_t)n;
	ret = c->t->rdma_read(c->ep, &sge, c->rx_sa.raddr, c->rx_sa.rkey, SDP_CTX_READ);
	if (ret) {
		zc_put_reg(c);
		conn_abort(s, ECONNRESET);
		return -ECONNRESET;
	}
	c->rx_sa.inflight = (uint32_t)n;
	c->rx_sa.inflight_stage = !direct;
	sdp_dbg(LOGSYS, "sd %d: reading %u bytes of SrcAvail %s", s->sd, (unsigned)n,
		direct ? "into the application's buffer" : "into the staging buffer");
	SDP_STAT_INC(zcopy_reads, 1);
	progress_posted(s);

	/*
	 * The transport writes into the buffer until the read completes: the
	 * buffer cannot go back to the application before, so neither a
	 * deadline nor a signal ends this wait.  An RC read completes or
	 * fails on its own; if the connection dies first, closing the
	 * endpoint ends every access.
	 */
	sock_drive(s);
	while (c->rx_sa.inflight && s->conn == c) {
		if (s->state != SDP_S_ESTABLISHED || c->transport_down) {
			conn_kill_ep(s);
			c->rx_sa.inflight = 0;
			c->rx_sa.status = -ECONNRESET;
			break;
		}
		zc_wait(s, 0, NULL);
	}
	if (s->conn != c)
		return -ECONNRESET;
	zc_put_reg(c);		/* the read was given up: the ep is closed */
	if (c->rx_sa.status)
		return s->so_error ? 0 : -ECONNRESET;
	if (!direct)
		return 0;
	SDP_STAT_INC(zcopy_direct_bytes, n);
	SDP_STAT_INC(bytes_received, n);
	/* A receive buffer was ready for a whole piece: adverts would have
	 * let the source write into it without asking (mode.c). */
	if (c->rx_mode == SDP_MODE_COMBINED && wz_transport_writes(c))
		c->req_pipe = true;
	/* Our small send's reply, come before this recv() could advertise
	 * for it: a request/response turn all the same (mode.c). */
	if (c->rx_mode == SDP_MODE_PIPELINED)
		mode_note_reply(s);
	return (ssize_t)n;
}

void zc_read_done(struct sdp_sock *s, const struct oti_wc *wc)
{
	struct sdp_conn *c = s->conn;
	uint32_t n = c->rx_sa.inflight;
	bool stage = c->rx_sa.inflight_stage;

	if (!n)
		return;		/* already given up (zc_recv killed the ep) */
	c->rx_sa.inflight = 0;
	/* The device is done with the application's buffer: its
	 * registration goes back to the cache now, whoever reaped this. */
	zc_put_reg(c);
	c->rx_sa.status = wc->status;
	if (wc->status) {
		/* A key the source does not honour is its fault; a flush is
		 * the connection going away, reported by its own event. */
		if (wc->status != -ECANCELED && !c->transport_down)
			conn_protocol_error(s, "RDMA read of the peer's SrcAvail failed");
		sock_changed(s, false);
		return;
	}
	int i = rxq_find_sa(c);

	if (i < 0)
		return;		/* cannot happen: the SA segment is only removed here */
	struct sdp_rx_seg *sa = rxq_at(c, (uint32_t)i);

	c->rx_sa.raddr += n;
	c->rx_sa.left -= n;
	sa->len -= n;
	c->rdcompl_bytes += n;
	c->ctrl_pending |= SDP_CTRL_RDMA_RD_COMPL;
	SDP_STAT_INC(zcopy_bytes_received, n);
	if (stage) {
		/* The staged bytes come before the rest of the offer. */
		for (uint32_t j = c->rxq_count; j > (uint32_t)i; j--)
			*rxq_at(c, j) = *rxq_at(c, j - 1);
		*rxq_at(c, (uint32_t)i) = (struct sdp_rx_seg){ .slot = SDP_SLOT_STAGE, .len = n };
		c->rxq_count++;
		i++;
	} else {
		c->rx_bytes -= n;	/* delivered: zc_recv() counts them */
	}
	if (c->rx_sa.left == 0) {
		rxq_remove(c, (uint32_t)i);
		c->rx_sa.active = false;
		c->rx_sa.cancelled = false;
	} else if (c->rx_sa.cancelled) {
		zc_rx_finish(s, true);
	}
	sock_changed(s, stage);
}

void zc_conn_free(struct sdp_conn *c)
{
	if (c->rx_sa.reg && c->regcache)
		regcache_put(c->regcache, c->rx_sa.reg);
	c->rx_sa.reg = NULL;
	if (c->regcache)
		regcache_free(c->regcache);
	c->regcache = NULL;
	if (c->tx_sa.mr)
		c->t->mr_dereg(c->tx_sa.mr);
	c->tx_sa.mr = NULL;
	if (c->stage_mr)
		c->t->mr_dereg(c->stage_mr);
	c->stage_mr = NULL;
	free(c->stage_mem);
	c->stage_mem = NULL;
}
