/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The SDP protocol on one connection, from the top (doc/layers.md): the
 * Hello/HelloAck handshake in the transport's private data, listeners
 * and their children, transport events, completions, and the dispatch of
 * every received message to the layer that owns it -- Bcopy data and
 * DisConn here and in post.c (buffers, credits, posting), Read Zcopy
 * (SrcAvail, RDMA read, RdmaRdCompl, SendSM, SrcAvailCancel) to zcopy.c,
 * Write Zcopy and Transaction mode (SinkAvail, RDMA write, RdmaWrCompl,
 * SinkAvailCancel, SinkCancelAck) to write_zcopy.c, ModeChange to mode.c.
 * It also installs the upcalls (engine.h, struct sdp_upcalls) through
 * which the layers below have a connection freed or driven.  Every
 * function here runs with the socket's lock held.
 *
 * Both sides advertise max_adverts = 1: one SrcAvail and one SinkAvail at
 * a time per direction.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "engine.h"
#include "log.h"
#include "tunables.h"

#define LOGSYS "conn"

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
	conn_free_rings(c);
	SDP_STAT_INC(buf_bytes, -c->buf_bytes);
	conn_rx_free_heap(c);
	free(c->rxq);
	free(c->rx_idle);
	free(c->rx_posted);
	free(c->tx_len);
	free(c->tx_urg);
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

/*
 * A message that may carry stream bytes (Data with payload, SrcAvail,
 * SinkAvail) in receive buffer slot: queue its bytes for the application
 * and hand the offer or advert to its owner.  1 if the buffer now holds
 * queued bytes (it is reposted once they are read), 0 if not, -1 if the
 * message ended the connection.
 */
static int conn_stream_msg(struct sdp_sock *s, const struct sdp_bsdh *h, uint8_t *buf,
			   uint32_t slot, uint32_t data_len)
{
	struct sdp_conn *c = s->conn;
	uint32_t data_off = SDP_BSDH_LEN + (uint32_t)sdp_ext_len(h->mid);
	bool keep = false;

	/* Stream bytes, inline or offered; a bare SinkAvail is about our
	 * half and may come after the peer's DisConn. */
	bool stream = data_len || h->mid == SDP_MID_SRC_AVAIL;

	if (stream && c->disconn_rcvd) {
		conn_protocol_error(s, "data after DisConn");
		return -1;
	}
	if (stream && s->app_closed) {
		/* Nobody will read it: a closed TCP socket answers with a
		 * reset. */
		conn_abort(s, ECONNRESET);
		return -1;
	}
	/* A message the rules forbid delivers nothing. */
	if (h->mid == SDP_MID_SRC_AVAIL && zc_src_avail_check(s, buf + SDP_BSDH_LEN, data_len))
		return -1;
	if (h->mid == SDP_MID_SINK_AVAIL && wz_sink_avail_check(s, data_len))
		return -1;
	/* Stream bytes by any message: counted for the non_discards rule,
	 * and our SinkAvail is dead (write_zcopy.c). */
	if (data_len)
		wz_stream_msg_rcvd(s);
	if (data_len) {
		*rxq_at(c, c->rxq_count) = (struct sdp_rx_seg){
			.slot = slot, .off = data_off, .len = data_len,
		};
		c->rxq_count++;
		c->rx_bytes += data_len;
		keep = true;
	}
	/* Its last byte is urgent (the codec saw to a payload).  OOB_PEND
	 * alone, an early notice some peers send, is left alone: the
	 * OOB_PRES that follows it is the news. */
	bool urgent = (h->flags & SDP_FLAG_OOB_PRES) && data_len;

	if (urgent)
		conn_urg_rcvd(s);
	/* The advertised rest queues behind the inline bytes. */
	if (h->mid == SDP_MID_SRC_AVAIL)
		zc_src_avail_rcvd(s, h, buf + SDP_BSDH_LEN, data_len);
	else if (h->mid == SDP_MID_SINK_AVAIL)
		wz_sink_avail_rcvd(s, h, buf + SDP_BSDH_LEN, data_len);
	if (s->state == SDP_S_ESTABLISHED && (data_len || h->mid == SDP_MID_SRC_AVAIL)) {
		sock_changed(s, true);
		if (urgent)
			sock_notify(s, POLLPRI);
		sock_notify(s, POLLIN);
	}
	return keep;
}

/* The peer's ModeChange (mode.c has the rules): -1 if it ended the
 * connection. */
static int conn_mode_change_msg(struct sdp_sock *s, const uint8_t *ext)
{
	struct sdp_conn *c = s->conn;
	int send_half;
	enum sdp_mode mode;

	if (sdp_mch_decode(ext, &send_half, &mode)) {
		conn_protocol_error(s, "bad ModeChange");
		return -1;
	}
	bool left_pipelined = !send_half && c->rx_mode == SDP_MODE_PIPELINED;
	const char *why = mode_change_rcvd(s, send_half, mode);

	if (why) {
		conn_protocol_error(s, why);
		return -1;
	}
	if (left_pipelined)
		wz_advert_dead(s);	/* the source dropped it */
	/* A recv() already waiting may advertise its buffer now. */
	if (!send_half && mode == SDP_MODE_PIPELINED)
		sock_changed(s, false);
	return 0;
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
	bool had_all = sdp_peer_has_all(&c->cr);

	if (!sdp_credits_on_recv(&c->cr, h.mseq, h.mseq_ack, h.bufs)) {
		conn_protocol_error(s, "acknowledges a message never sent");
		return;
	}
	/* A thread asleep for credits (zc_send() waiting for its turn to
	 * offer) may not be the one driving this: the message that brings
	 * them may be a bare credit update, which wakes nobody else.  So
	 * may one lingering in close() for the peer's acknowledgement. */
	if (s->waiters && (sdp_tx_credits(&c->cr) > credits ||
			   (!had_all && sdp_peer_has_all(&c->cr))))
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
		ret = conn_stream_msg(s, &h, buf, slot, data_len);
		if (ret < 0)
			return;
		keep = ret;
		break;
	case SDP_MID_DISCONN:
		if (c->disconn_rcvd) {
			conn_protocol_error(s, "second DisConn");
			return;
		}
		c->disconn_rcvd = true;
		/* The peer may linger in close() until it knows we have
		 * everything (sdp_close()): tell it now, not when our own
		 * close comes, which may wait for the peer's exit. */
		if (!c->disconn_sent)
			c->cr.ack_owed = true;
		wz_advert_dead(s);	/* no bytes come after it */
		sdp_dbg(LOGSYS, "sd %d: DisConn received", s->sd);
		sock_changed(s, true);
		sock_notify(s, POLLIN);
		break;
	case SDP_MID_ABORT_CONN:
		conn_abort(s, ECONNRESET);
		return;
	case SDP_MID_CH_RCV_BUF:
		conn_grow_rx(s, sdp_u32h_decode(buf + SDP_BSDH_LEN));
		break;
	case SDP_MID_MODE_CHANGE:
		if (conn_mode_change_msg(s, buf + SDP_BSDH_LEN))
			return;
		break;
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
		conn_rcvbuf_acked(s, sdp_u32h_decode(buf + SDP_BSDH_LEN));
		break;
	default:
		/* SuspComm we cannot honour, AbortConn's kin. */
		conn_protocol_error(s, sdp_mid_name(h.mid));
		return;
	}

	if (!keep)
		conn_repost(s, slot);
	else if (s->conn)
		conn_rx_spill_maybe(s);
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
	if (kind == SDP_CTX_RX) {
		c->rx_posted[SDP_CTX_SLOT(wc->ctx)] = false;
		c->ring_bytes += wc->len;
		if (c->rx_in_old)
			conn_rx_old_done(s, SDP_CTX_SLOT(wc->ctx));
	}
	if ((kind == SDP_CTX_RX || kind == SDP_CTX_TX) && !wc->status)
		conn_moved(s);
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
		c->ring_bytes += c->tx_len[slot];
		c->tx_done++;
		if (c->tx_next_size)
			conn_tx_regrow(s);
		sock_changed(s, false);
		if (s->tx_nospace && conn_writable(s)) {
			s->tx_nospace = false;
			sock_notify(s, POLLOUT);
		}
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
	return c->caps.flags & OTI_CAP_IWARP_RULES;
}

static void conn_established(struct sdp_sock *s)
{
	s->state = SDP_S_ESTABLISHED;
	s->was_established = true;
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
	/* A transport's own errno (EIO from a failed post, ...) is none a
	 * TCP connect() gives: the attempt was refused; the log above and
	 * the fallback reason keep the truth. */
	if (why == SDP_FB_TRANSPORT && conn_reason_of(err) == SDP_FB_TRANSPORT)
		err = ECONNREFUSED;
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

/* The passive side said no.  With libsdp's reject data it said why: a
 * listener that is there but full, or out of resources, is no reason to
 * take the destination for one without SDP. */
static void conn_rejected(struct sdp_sock *s, const struct oti_event *ev)
{
	int why = sdp_reject_decode(ev->private_data, ev->private_data_len);
	enum sdp_fallback_reason fb = SDP_FB_REFUSED;

	switch (why) {
	case SDP_REJECT_BUSY:
		sdp_conn_log(LOGSYS, "sd %d: the SDP listener's accept queue is full", s->sd);
		fb = SDP_FB_RESOURCE;
		break;
	case SDP_REJECT_RESOURCE:
		sdp_conn_log(LOGSYS, "sd %d: the SDP peer has no resources for the connection",
			     s->sd);
		fb = SDP_FB_RESOURCE;
		break;
	case SDP_REJECT_HELLO:
		sdp_conn_log(LOGSYS, "sd %d: the SDP peer refused our Hello", s->sd);
		fb = SDP_FB_REJECTED;
		break;
	default:
		break;
	}
	conn_connect_failed(s, ECONNREFUSED, fb);
}

static void conn_send_hello(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
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
	len = sdp_hello_encode(pdata, c->caps.max_private_data, &h);
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
	conn_undefer(s);
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
	const struct oti_ops *t, *ts[SDP_MAX_LISTENERS];
	int ret, nt;

	s->fb_reason = SDP_FB_NONE;
	nt = oti_select_all(s->bound ? (const struct sockaddr *)&s->local : NULL, dst, ts,
			    SDP_MAX_LISTENERS);
	if (!nt) {
		s->fb_reason = SDP_FB_NO_ROUTE;
		return -ENETUNREACH;
	}
	c = conn_new();
	if (!c) {
		s->fb_reason = SDP_FB_RESOURCE;
		return -ENOMEM;
	}
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
	/* In priority order; -ENODEV: that one found at once that it cannot
	 * reach dst (shm: no listener of ours on this host), the next tries. */
	ret = -ENODEV;
	for (int i = 0; i < nt && ret == -ENODEV; i++) {
		t = ts[i];
		c->t = t;
		t->query_caps(&c->caps);
		ret = t->ep_open(dst, len, srclen ? (struct sockaddr *)&src : NULL, srclen,
				 &c->ep);
	}
	if (ret == -ENODEV) {
		/* Nobody listens there on any transport that looked: refused,
		 * and reported as a transport's refusal is (SO_ERROR, after
		 * EINPROGRESS for a non-blocking connect). */
		conn_free(s);
		SDP_STAT_INC(connect_failures, 1);
		s->so_error = ECONNREFUSED;
		s->fb_reason = SDP_FB_REFUSED;
		s->state = SDP_S_CLOSED;
		s->reset = true;
		sock_changed(s, true);
		return 0;
	}
	if (ret)
		goto err_free;
	c->ep_fd = t->ep_fd(c->ep);
	s->state = SDP_S_RESOLVING;
	c->deadline_ns = sdp_now_ns() + (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;
	/*
	 * The handshake is driven by whoever waits for it: a blocking
	 * connect, or poll, select or an epoll set (its watch registers the
	 * ep fd, watch_sources()) for a non-blocking one, sleeping on the
	 * ep fd itself; the progress thread's registration would only be
	 * taken out for each such sleep (parked) and put back, epoll_ctl
	 * for nothing.  It is made once the connection is up or the
	 * caller is done with it (conn_undefer(); for a non-blocking
	 * connect, at once unless only the answer is left,
	 * conn_connect_started()).  A blocking connect keeps its deadline
	 * itself, a non-blocking one the progress thread's ticks, which
	 * also take the answer if nobody else does.
	 */
	c->prog_deferred = true;
	if (s->nonblock)
		progress_watch(s);
	return 0;

err_free:
	s->fb_reason = conn_reason_of(-ret);
	conn_free(s);
	memset(&s->peer, 0, sizeof(s->peer));
	s->state = SDP_S_NEW;
	return ret;
}

/*
 * A non-blocking connect's first drive is done (sdp_connect()): its
 * registration waits only if all that is left is the peer's answer on a
 * transport whose passive side needs nothing more of us
 * (OTI_CAP_PASSIVE_DONE; tcp-fallback) and no output waits for room.
 * Otherwise (verbs: the address and route resolution, the RTU the
 * passive side waits for) the progress thread takes it on now, as the
 * handshake must go on whether anybody waits or not.
 */
void conn_connect_started(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (c && c->prog_deferred &&
	    !(s->state == SDP_S_CONNECTING && (c->caps.flags & OTI_CAP_PASSIVE_DONE) && c->ep &&
	      !(c->t->ep_wait_events(c->ep) & POLLOUT)))
		conn_undefer(s);
}

/*
 * The caller that drove s's set-up is done with it (struct sdp_conn,
 * prog_deferred): from now on the progress thread watches it too, and
 * the watches of epoll sets that hold s register its fd.
 */
void conn_undefer(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->prog_deferred)
		return;
	c->prog_deferred = false;
	if (!c->ep || c->disconnected || c->in_progress_set)
		return;
	if (progress_add_ep(s, c) == 0) {
		c->in_progress_set = true;
		progress_watch_sync(s);
	}
	/* A connect left under way (SO_SNDTIMEO, a signal): its deadline
	 * is the progress thread's now. */
	if (s->state == SDP_S_RESOLVING || s->state == SDP_S_CONNECTING)
		progress_watch(s);
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
			conn_rejected(s, ev);
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
		conn_lost(s, ev->type == OTI_EV_ERROR);
		if (s->conn)
			conn_leave_progress(s);
		break;
	}
}

/* One drive of s (conn_progress()), inside the transport's bracket. */
static void conn_drive_rounds(struct sdp_sock *s)
{
	struct oti_event ev;

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

void conn_progress(struct sdp_sock *s)
{
	if (!s->conn || !s->conn->ep)
		return;
	struct sdp_conn *c = s->conn;
	struct oti_ep *ep = c->ep;

	/* One read that finds the transport empty per drive, none for a
	 * quiet one (oti drive_begin). */
	if (c->t->drive_begin)
		c->t->drive_begin(ep, !s->drive_quiet);
	conn_drive_rounds(s);
	if (s->conn == c && c->ep == ep && c->t->drive_end)
		SDP_STAT_INC(transport_empty_reads, c->t->drive_end(ep));
	/* The transport found its fd dead in this drive (or in an arm or
	 * a post since the last one, whose sleeper it woke for this). */
	if (s->conn == c && c->ep == ep)
		conn_quiet_dead_fd(s);
}

/* --- passive side ------------------------------------------------------------ */

/* Refused, with why in libsdp's reject data (sdp/wire.h), so that the
 * active side falls back with the reason and does not take a busy
 * server for one without SDP. */
static void listener_reject(const struct sdp_lsn *l, struct oti_connreq *req,
			    enum sdp_reject_reason why)
{
	uint8_t rej[SDP_REJECT_LEN];
	int n = sdp_reject_encode(rej, sizeof(rej), why);

	l->t->reject(l->l, req, rej, n > 0 ? (size_t)n : 0);
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
	struct sdp_sock *child;
	struct sdp_conn *c;
	bool answered = false;
	const char *step = "";
	int ret, len;

	if (s->acceptq_len + s->pending_children >= s->backlog) {
		sdp_conn_log(LOGSYS, "sd %d: accept queue full (backlog %d), refusing",
			     s->sd, s->backlog);
		listener_reject(l, req, SDP_REJECT_BUSY);
		return;
	}
	ret = sdp_hello_decode(pdata, pdata_len, &hello);
	if (ret) {
		SDP_STAT_INC(protocol_errors, 1);
		sdp_warn(LOGSYS, "sd %d: refusing a connection with an invalid Hello (%s)",
			 s->sd, ret == -EPROTONOSUPPORT ? "unsupported SDP version" : "malformed");
		listener_reject(l, req, SDP_REJECT_HELLO);
		return;
	}
	child = sock_alloc(s->domain, false, true, false);
	if (!child) {
		listener_reject(l, req, SDP_REJECT_RESOURCE);
		return;
	}
	c = conn_new();
	if (!c) {
		listener_reject(l, req, SDP_REJECT_RESOURCE);
		sock_put(child);
		return;
	}
	c->t = l->t;
	c->t->query_caps(&c->caps);
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
	child->rcvtimeo = s->rcvtimeo;
	child->sndtimeo = s->sndtimeo;
	child->keepidle = s->keepidle;
	child->keepintvl = s->keepintvl;
	child->keepcnt = s->keepcnt;

	step = "the transport's endpoint";
	ret = c->t->ep_accept_open(l->l, req, &c->ep);
	if (ret)
		goto err_child;
	c->ep_fd = c->t->ep_fd(c->ep);
	step = "its buffers";
	ret = conn_setup_rx(c, child);
	if (!ret)
		ret = conn_setup_tx(c, hello.localrcvsz, child);
	if (ret)
		goto err_child;
	sdp_credits_init(&c->cr, hello.bsdh.bufs, c->nrx);
	c->peer_max_adverts = hello.max_adverts;
	ack.bsdh.bufs = (uint16_t)c->nrx;
	ack.actrcvsz = c->rx_size;
	step = "its HelloAck";
	len = sdp_hello_ack_encode(out, c->caps.max_private_data, &ack);
	if (len < 0) {
		ret = len;
		goto err_child;
	}
	step = "the transport's accept";
	ret = c->t->accept(c->ep, out, (size_t)len);
	if (ret)
		goto err_child;
	answered = true;
	c->deadline_ns = sdp_now_ns() + (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;
	/* A transport that completes the passive side at once (tcp-fallback)
	 * makes the child established here: it waits in the accept queue,
	 * driven with its listener, and goes into the progress thread's set
	 * only when accepted, which saves that set two epoll_ctl and the
	 * thread a wakeup for each connection (doc/fastpath.md,
	 * "Connection set-up").  Others are driven through the listener's
	 * registration of their fd until accepted. */
	pthread_mutex_lock(&child->lock);
	conn_progress(child);
	/* Also one the peer reset within this drive (its data and the
	 * reset were already in): Linux accepts it in its place in the
	 * queue, and recv() then says ECONNRESET.  Left pending, it went
	 * behind a connection made after it (listener_progress_children()
	 * moves it only at the next drive). */
	bool established = child->state == SDP_S_ESTABLISHED || child->was_established;

	pthread_mutex_unlock(&child->lock);
	/* Output that waits for the socket's room is the progress thread's
	 * to wait for, through the listener's registration of the fd; the
	 * child keeps its place in the queue all the same. */
	if (established && !(c->t->ep_wait_events(c->ep) & POLLOUT)) {
		c->prog_deferred = true;
	} else {
		step = "the progress thread's set";
		ret = progress_add_ep(s, c);
		if (ret)
			goto err_child;
		c->in_progress_set = true;
	}

	step = "the accept queue";
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
	if (established) {
		memmove(&s->acceptq[s->acceptq_len + 1], &s->acceptq[s->acceptq_len],
			(size_t)s->pending_children * sizeof(*s->acceptq));
		s->acceptq[s->acceptq_len++] = child;
		sock_changed(s, true);
		return;
	}
	s->acceptq[s->acceptq_len + s->pending_children] = child;
	s->pending_children++;
	progress_watch(s);
	return;

err_child:
	sdp_warn(LOGSYS, "sd %d: could not set up an accepted connection: %s: %s",
		 s->sd, step, strerror(-ret));
	/* Out of memory, descriptors or registrations (RLIMIT_MEMLOCK on
	 * verbs): said so, before the HelloAck, so that the active side's
	 * fallback is "resource" and not a refusal it would remember. */
	if (!answered && c->ep && c->t->ep_reject &&
	    conn_reason_of(-ret) == SDP_FB_RESOURCE) {
		uint8_t rej[SDP_REJECT_LEN];
		int n = sdp_reject_encode(rej, sizeof(rej), SDP_REJECT_RESOURCE);

		if (n > 0)
			(void)c->t->ep_reject(c->ep, rej, (size_t)n);
	}
	conn_free(child);
	child->parent = NULL;
	sock_put(child);
}

/*
 * acceptq holds the established children in [0, acceptq_len) in arrival
 * order, then the ones still handshaking.  Move newly established children
 * to the end of the first part (also those established and reset since),
 * drop failed ones.
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
		bool was_established = child->was_established;

		pthread_mutex_unlock(&child->lock);
		if (st == SDP_S_CONNECTING) {
			i++;
		} else if (st == SDP_S_ESTABLISHED || was_established) {
			/* Also one that was established and reset within
			 * this drive: Linux accepts a connection reset
			 * before accept(), and recv() then says ECONNRESET. */
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

/* --- listeners shared with forked children (doc/fork.md) -------------------- */

/*
 * A shared listener's fds are not in the progress thread's set: a process
 * takes connections from the queue it shares only in a thread of the
 * program's (accept, poll, an epoll set's look), never in the progress
 * thread, so that one which merely holds the listener in an epoll set
 * strands nothing when it exits or stops looking (a daemon that forks
 * its event loop and leaves: the parent took the first connection and
 * its exit reset it).  Watches still register the fds (in_progress_set
 * stays, the reference too, until listener_free()).
 */
static void listener_mute_shared(struct sdp_sock *s)
{
	if (!s->lsn_shared || !s->in_progress_set)
		return;
	for (int i = 0; i < s->nlsn; i++)
		progress_mute(s->lsn[i].t->listener_fd(s->lsn[i].l));
}

int listener_progress_add(struct sdp_sock *s)
{
	for (int i = 0; i < s->nlsn; i++) {
		int ret = progress_add(s, s->lsn[i].t->listener_fd(s->lsn[i].l));

		if (ret) {
			while (i-- > 0)
				progress_del(s, s->lsn[i].t->listener_fd(s->lsn[i].l));
			return ret;
		}
	}
	s->in_progress_set = true;
	listener_mute_shared(s);
	return 0;
}

/*
 * Until the first fork a listener takes every connection the system
 * queues for it, at once.  Shared, each process holding it takes them
 * only while it is accepting, so that a process that never accepts (a
 * master that forked its workers) strands none in a queue of its own.
 */
void listener_accepting(struct sdp_sock *s, int delta)
{
	s->accepting += delta;
	bool want = !s->lsn_shared || s->accepting > 0;

	if (want == s->lsn_taking)
		return;
	for (int i = 0; i < s->nlsn; i++)
		if (s->lsn[i].t->listener_take)
			s->lsn[i].t->listener_take(s->lsn[i].l, want);
	s->lsn_taking = want;
}

int listener_share(struct sdp_sock *s)
{
	if (s->state != SDP_S_LISTEN)
		return -EINVAL;
	/* A readiness eventfd (the engine used without the preload) would
	 * be one for both processes. */
	if (sock_sd_is_fd())
		return -EOPNOTSUPP;
	for (int i = 0; i < s->nlsn; i++)
		if (!s->lsn[i].t->listener_take || !s->lsn[i].t->listener_forked)
			return -EOPNOTSUPP;
	if (!s->lsn_shared) {
		s->lsn_taking = true;	/* what listen() left them doing */
		__atomic_store_n(&s->lsn_shared, true, __ATOMIC_RELAXED);
		listener_accepting(s, 0);
		listener_mute_shared(s);
	}
	return 0;
}

/*
 * The waiters of the child's copy of a listener: the threads asleep in
 * the parent are not here, its watches are (the epoll records the
 * child inherited, which a child that goes on with its parent's event
 * loop uses): they are counted accepting here, and registered again
 * (progress_watch_sync()) with the listener's new wait sources, which
 * may have the numbers of the old ones.
 */
static void listener_adopt_watches(struct sdp_sock *s)
{
	struct sdp_waiter **pp = &s->waiters;

	s->accepting = 0;
	while (*pp) {
		struct sdp_waiter *w = *pp;

		if (!w->changes) {
			*pp = w->next;
			continue;
		}
		w->nreg = 0;
		if (w->accepting_gen) {
			w->accepting_gen = sock_generation() + 1;
			s->accepting++;
		}
		pp = &w->next;
	}
}

/*
 * The child's copy of a shared listener (sdp_upcalls.adopt).  Its
 * accept queue and the children's records are the parent's: forgotten,
 * not torn down (the children's transport descriptors stay open here,
 * as those of any inherited connection).
 */
static int listener_adopt(struct sdp_sock *s)
{
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (!sock_inherited(s))
		goto out;	/* another thread was first */
	for (int i = 0; i < s->nlsn && !ret; i++)
		ret = s->lsn[i].t->listener_forked(s->lsn[i].l);
	if (ret) {
		sdp_warn(LOGSYS, "sd %d: a listener inherited from the parent cannot accept here: %s",
			 s->sd, strerror(-ret));
		goto out;
	}
	free(s->acceptq);	/* this process's copy of the array */
	s->acceptq = NULL;
	s->acceptq_len = s->pending_children = s->acceptq_cap = 0;
	s->in_progress_set = false;
	ret = listener_progress_add(s);
	if (ret)
		goto out;
	sock_own(s);
	listener_adopt_watches(s);
	progress_watch_sync(s);
	listener_accepting(s, 0);
	sdp_conn_log(LOGSYS, "sd %d: listening, shared with the parent process", s->sd);
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void listener_progress(struct sdp_sock *s)
{
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	struct sockaddr_storage peer;
	struct oti_connreq *req;
	size_t len;
	/* (A shared listener's are for the program's threads to take:
	 * listener_mute_shared(); its children are driven here too.) */
	bool take = !s->lsn_shared || !progress_on_thread();

	for (int i = 0; take && i < s->nlsn; i++) {
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
		progress_watch_sync(s);
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

/* --- the layers below call up through these (struct sdp_upcalls) --------- */

/*
 * The progress thread's turn on s (struct sdp_upcalls.service): its fd
 * fired, or a tick came.  Returns true to keep s on the watch list.
 */
static bool conn_service(struct sdp_sock *s, bool tick)
{
	bool keep = false;

	for (int i = 0; i < 8; i++) {
		if (s->nlsn)
			listener_progress(s);
		else if (s->conn)
			conn_progress(s);
		/* Re-arm: sleeping is safe only when nothing is pending. */
		int again = 0;

		for (int k = 0; !s->lsn_shared && k < s->nlsn; k++)
			if (s->lsn[k].t->listener_arm(s->lsn[k].l) == -EAGAIN)
				again = 1;
		if (!s->nlsn && s->conn && s->conn->ep && !s->conn->disconnected &&
		    s->conn->t->ep_arm(s->conn->ep) == -EAGAIN)
			again = 1;
		for (int k = 0; s->nlsn && k < s->acceptq_len + s->pending_children; k++) {
			struct sdp_sock *c = s->acceptq[k];

			pthread_mutex_lock(&c->lock);
			if (c->conn && c->conn->ep && !c->conn->disconnected &&
			    c->conn->t->ep_arm(c->conn->ep) == -EAGAIN)
				again = 1;
			if (c->conn && !again)
				progress_sync_events(s, c->conn);
			pthread_mutex_unlock(&c->lock);
		}
		if (!again)
			break;
	}
	if (!s->nlsn && s->conn)
		progress_sync_events(s, s->conn);
	/* An orphan whose close is done goes now, not at the next tick: its
	 * rings then serve the next connection (conn_free_rings()), and its
	 * descriptor is not held for up to a tick. */
	if (!tick && s->app_closed && s->conn && conn_finished(s))
		conn_free(s);
	if (tick) {
		if (s->app_closed && s->conn) {
			bool expired = s->conn->deadline_ns && sdp_now_ns() > s->conn->deadline_ns;

			if (!conn_finished(s) && expired) {
				sdp_conn_log(LOGSYS, "closed connection: peer did not finish the close in time, resetting");
				conn_abort(s, ETIMEDOUT);
			}
			if (conn_finished(s))
				conn_free(s);
			else
				keep = true;
		} else if (s->nlsn) {
			keep = s->pending_children > 0;
		} else if (s->conn) {
			if (s->conn->trans_held && sdp_now_ns() >= s->conn->trans_hold_until)
				conn_push(s);	/* nobody came for it */
			if (s->conn && s->conn->first_nudges)
				conn_nudge(s);
			keep = (s->conn && (s->conn->trans_held || s->conn->first_nudges)) ||
			       s->state == SDP_S_RESOLVING || s->state == SDP_S_CONNECTING ||
			       (s->conn->post_failed && !s->conn->transport_down &&
				s->state == SDP_S_ESTABLISHED);
		}
	}
	return keep;
}

/* Drive s once (struct sdp_upcalls.drive). */
static void conn_drive(struct sdp_sock *s)
{
	if (s->state == SDP_S_LISTEN)
		listener_progress(s);
	else if (s->conn)
		conn_progress(s);
}

__attribute__((constructor)) static void conn_install_upcalls(void)
{
	sdp_upcalls = (struct sdp_upcalls){
		.conn_free = conn_free,
		.drive = conn_drive,
		.service = conn_service,
		.idle = conn_idle_sweep,
		.adopt = listener_adopt,
	};
}
