/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The modes of the two half-connections, and the ModeChange messages that
 * keep both ends agreed on them.
 *
 * Each direction of a connection has a mode, chosen by that direction's
 * data source (the side that sends) and announced with ModeChange; the
 * sink only ever receives them.  Both start Combined.
 *
 *   mode           what the source may send           what the sink may send
 *   Buffered    0  Data                               -
 *   Combined    1  Data; one SrcAvail at a time,      -
 *                  carrying 1..32 bytes inline
 *   Pipelined   2  Data; one SrcAvail at a time,      one SinkAvail at a time
 *                  with no bytes inline               (Write Zcopy)
 *   Transaction 3  as Combined, and its SinkAvails    -
 *                  for the opposite direction may
 *                  carry its stream bytes
 *
 * Transaction is this implementation's (GEN1, SOL and OFED define only
 * the first three; the value 3 is unused there).  Its rules are in
 * write_zcopy.c, which does the work.
 *
 * Transitions a source may announce (ModeChange "receive half", values
 * 0x0-0x3): Combined -> Pipelined, Buffered or Transaction; Pipelined ->
 * Combined; Transaction -> Combined.  A sink may announce Buffered ->
 * Combined for the source ("send half", 0x9).  Any other value, a no-op
 * included, is a protocol error: the ends would disagree.
 *
 * A source sends ModeChange only while no SrcAvail of its own is out, so
 * every SrcAvail is judged by the mode it was sent in.  Leaving Pipelined
 * drops the sink's advert it holds, unused; a sink that sees the
 * ModeChange knows its advert is dead, and a SinkAvail that was sent
 * before the sink saw the ModeChange (its mseq_ack is older) is discarded.
 *
 * When we change our send half (the policy, all local knowledge):
 *
 *  - Combined -> Pipelined when the sink asks (REQ_PIPE on an RdmaRdCompl:
 *    it read one of our SrcAvails straight into a waiting recv() buffer,
 *    so it has large receives ready before our data comes);
 *  - Pipelined -> Combined after 16 sends in a row with nothing for the
 *    sink's adverts (small messages: every advert would die), or after 4
 *    adverts in a row that arrived stale;
 *  - Combined -> Transaction after two request/response turns in a row:
 *    a small send, then a recv() that advertised its buffer for the
 *    reply, or read the reply straight into it because it came first
 *    (the opposite direction is Pipelined);
 *  - Transaction -> Combined as soon as a held request has to go out
 *    alone (the program did something other than wait for the reply), or
 *    a send is large (the program streams now).
 */
#include <errno.h>

#include "engine.h"
#include "log.h"
#include "tunables.h"

#define LOGSYS "mode"

#define SMALL_SENDS_MAX 16
#define STALE_ADVERTS_MAX 4
#define TRANS_STREAK_MIN 2

static const char *mode_name(unsigned m)
{
	static const char *const names[] = { "Buffered", "Combined", "Pipelined",
					     "Transaction" };

	return m < 4 ? names[m] : "?";
}

void mode_init(struct sdp_conn *c)
{
	c->tx_mode = c->rx_mode = SDP_MODE_COMBINED;
	c->mch_next = c->tx_mode;
}

void mode_want(struct sdp_sock *s, enum sdp_mode m)
{
	struct sdp_conn *c = s->conn;

	/* No ModeChange fits the peer's buffers: our half stays Combined. */
	if (!c || !conn_fits(c, SDP_MCH_LEN))
		return;
	if (c->ctrl_pending & SDP_CTRL_MODE_CHANGE) {
		if (m == c->tx_mode)
			c->ctrl_pending &= ~SDP_CTRL_MODE_CHANGE;	/* changed our mind */
		else
			c->mch_next = (uint8_t)m;
		return;
	}
	if (m == c->tx_mode)
		return;
	c->mch_next = (uint8_t)m;
	c->ctrl_pending |= SDP_CTRL_MODE_CHANGE;
}

bool mode_change_may_go(const struct sdp_conn *c)
{
	return !c->tx_sa.active;
}

void mode_change_sent(struct sdp_sock *s, uint32_t mseq)
{
	struct sdp_conn *c = s->conn;
	unsigned from = c->tx_mode;

	c->tx_mode = c->mch_next;
	c->small_sends = c->stale_adverts = 0;
	if (c->tx_mode == SDP_MODE_PIPELINED)
		c->was_pipelined = true;
	if (from == SDP_MODE_PIPELINED) {
		c->mch_mseq = mseq;
		c->psnk.active = false;		/* the sink knows it is dead */
	}
	sdp_dbg(LOGSYS, "sd %d: our send half %s -> %s", s->sd, mode_name(from),
		mode_name(c->tx_mode));
}

static bool legal_source_change(unsigned from, unsigned to)
{
	switch (from) {
	case SDP_MODE_COMBINED:
		return to != SDP_MODE_COMBINED;
	case SDP_MODE_PIPELINED:
	case SDP_MODE_TRANSACTION:
		return to == SDP_MODE_COMBINED;
	default:
		return false;
	}
}

const char *mode_change_rcvd(struct sdp_sock *s, int send_half, enum sdp_mode m)
{
	struct sdp_conn *c = s->conn;

	if (send_half) {
		/* The sink's one move: our Buffered half back to Combined.
		 * We never go Buffered, so it never applies. */
		if (c->tx_mode != SDP_MODE_BUFFERED || m != SDP_MODE_COMBINED)
			return "ModeChange for our send half";
		c->tx_mode = SDP_MODE_COMBINED;
		return NULL;
	}
	if (!legal_source_change(c->rx_mode, m))
		return "illegal ModeChange";
	sdp_dbg(LOGSYS, "sd %d: peer's send half %s -> %s", s->sd, mode_name(c->rx_mode),
		mode_name(m));
	c->rx_mode = (uint8_t)m;
	c->req_pipe = false;
	SDP_STAT_INC(mode_changes_received, 1);
	return NULL;
}

void mode_req_pipe_rcvd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (c->tx_mode == SDP_MODE_COMBINED && s->zcopy_thresh && wz_transport_writes(c))
		mode_want(s, SDP_MODE_PIPELINED);
}

void mode_note_send(struct sdp_sock *s, bool big)
{
	struct sdp_conn *c = s->conn;

	if (!c)
		return;
	/* Large sends are no requests: back to Combined, from where the
	 * sink's REQ_PIPE can take this half to Pipelined. */
	if (c->tx_mode == SDP_MODE_TRANSACTION && big)
		mode_want(s, SDP_MODE_COMBINED);
	if (c->tx_mode != SDP_MODE_PIPELINED)
		return;
	if (big) {
		c->small_sends = 0;
	} else if (++c->small_sends >= SMALL_SENDS_MAX) {
		sdp_dbg(LOGSYS, "sd %d: small messages only: back to Combined", s->sd);
		mode_want(s, SDP_MODE_COMBINED);
	}
}

void mode_note_stale(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (++c->stale_adverts >= STALE_ADVERTS_MAX)
		mode_want(s, SDP_MODE_COMBINED);
}

void mode_note_advert(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c->trans_last_send) {
		c->trans_streak = 0;
		return;
	}
	c->trans_last_send = false;
	if (++c->trans_streak >= TRANS_STREAK_MIN && c->tx_mode == SDP_MODE_COMBINED &&
	    c->rx_mode == SDP_MODE_PIPELINED && tun_int(TUN_trans_hold_us) > 0)
		mode_want(s, SDP_MODE_TRANSACTION);
}

/*
 * The reply to our small send was read straight into a recv() buffer
 * large enough to advertise, but it came first: the peer answered before
 * the recv() could advertise (on rxe's loopback it can answer within our
 * send()).  A request/response turn all the same.  Counted only for the
 * first piece after the send, as an advert would have been; without it
 * the streak waited for turns whose recv() won that race, hundreds of
 * them under load.
 */
void mode_note_reply(struct sdp_sock *s)
{
	if (s->conn && s->conn->trans_last_send)
		mode_note_advert(s);
}

void mode_note_trans_miss(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	c->trans_streak = 0;
	SDP_STAT_INC(trans_misses, 1);
	if (c->tx_mode == SDP_MODE_TRANSACTION)
		mode_want(s, SDP_MODE_COMBINED);
}
