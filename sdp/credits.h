/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SDP credit flow control (Annex A4 "bufs", mseq, mseq_ack), as pure
 * arithmetic on one connection's counters.
 *
 * Every in-band message consumes one receive buffer at the peer.  The peer
 * tells us, in each message it sends, how many buffers it has posted
 * (bufs) and the last mseq it has received from us (mseq_ack).  Messages we
 * sent after that mseq may already be sitting in those buffers, so:
 *
 *     credits = peer_bufs - (last_sent_mseq - peer_mseq_ack)
 *
 * CA4-82: with one credit left we may only send a message that carries no
 * payload and advertises more buffers than we last advertised, so both
 * sides can always refresh each other and never deadlock.  We keep one
 * more in reserve for control messages (DisConn, RdmaRdCompl, ...), as
 * the OFED implementation did, so a full data stream can never starve the
 * teardown of its credit.
 */
#ifndef SDP_CREDITS_H
#define SDP_CREDITS_H

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

struct sdp_credits {
	uint32_t next_mseq;	/* mseq of the next message we send (first in-band is 1) */
	uint32_t peer_mseq_ack;	/* latest mseq_ack the peer sent us */
	uint32_t peer_bufs;	/* latest bufs the peer sent us */
	uint32_t last_rx_mseq;	/* mseq of the latest message we received */
	uint32_t posted;	/* our receive buffers posted now */
	uint32_t advertised;	/* bufs in our last message, minus messages received since:
				 * what the peer believes it may still send */
	uint32_t kept_mseq;	/* our latest message other than a bare credit update:
				 * once the peer acknowledges it, nothing of ours is lost
				 * if the transport goes (sdp_peer_has_all()) */
	bool ack_owed;		/* the peer's DisConn came before ours: our next message
				 * acknowledges it, a bare update if nothing else goes */
};

/* After the Hello exchange: peer_bufs from its Hello/HelloAck, our own
 * posted count, nothing sent or received yet in band. */
static inline void sdp_credits_init(struct sdp_credits *c, uint32_t peer_bufs,
				    uint32_t posted)
{
	c->next_mseq = 1;
	c->peer_mseq_ack = 0;
	c->peer_bufs = peer_bufs;
	c->last_rx_mseq = 0;
	c->posted = posted;
	c->advertised = posted;
	c->kept_mseq = 0;
	c->ack_owed = false;
}

/* The peer has every message of ours that mattered (all but bare credit
 * updates): a reset of the transport now loses nothing of our stream. */
static inline bool sdp_peer_has_all(const struct sdp_credits *c)
{
	return !sdp_seq_before(c->peer_mseq_ack, c->kept_mseq);
}

/* Peer buffers we may still consume (never negative). */
static inline uint32_t sdp_tx_credits(const struct sdp_credits *c)
{
	uint32_t in_flight = (c->next_mseq - 1) - c->peer_mseq_ack;

	return in_flight >= c->peer_bufs ? 0 : c->peer_bufs - in_flight;
}

/* A message with payload (Data, SrcAvail with data) may go now. */
static inline bool sdp_can_send_data(const struct sdp_credits *c)
{
	return sdp_tx_credits(c) > 2;
}

/* A control message without payload (DisConn, RdmaRdCompl, SendSM, ...). */
static inline bool sdp_can_send_ctrl(const struct sdp_credits *c)
{
	return sdp_tx_credits(c) > 1;
}

/* A pure credit update: allowed on the last credit only if it really
 * advertises more buffers (CA4-82). */
static inline bool sdp_can_send_update(const struct sdp_credits *c)
{
	uint32_t cr = sdp_tx_credits(c);

	return cr > 1 || (cr == 1 && c->posted > c->advertised);
}

/*
 * Whether to send a credit update now, with nothing else to send: the peer
 * believes we have `advertised` buffers minus what it has sent since; tell
 * it when it has used at least half of them or when we have posted enough
 * new ones that it would otherwise stall.
 */
static inline bool sdp_update_needed(const struct sdp_credits *c)
{
	/* c->advertised: buffers the peer still thinks it has.  At 2 or
	 * fewer it may not send data at all (the reserve), so it waits on
	 * us whatever our ring size. */
	if (c->posted > c->advertised &&
	    (c->advertised <= c->posted / 2 || c->advertised <= 2))
		return sdp_can_send_update(c);
	return false;
}

/* Bookkeeping for one message we send (bare: a credit update and
 * nothing else): returns its mseq.  Every message acknowledges all the
 * peer's so far. */
static inline uint32_t sdp_credits_on_send(struct sdp_credits *c, bool bare)
{
	c->advertised = c->posted;
	c->ack_owed = false;
	if (!bare)
		c->kept_mseq = c->next_mseq;
	return c->next_mseq++;
}

/*
 * Bookkeeping for one message received (already validated): it used one of
 * our posted buffers.  The peer's bufs/mseq_ack are taken only if they move
 * forward and acknowledge nothing we have not sent, so a stale or hostile
 * header cannot create credits.  Returns false for an mseq_ack beyond what
 * we sent (protocol violation).
 */
static inline bool sdp_credits_on_recv(struct sdp_credits *c, uint32_t mseq,
				       uint32_t mseq_ack, uint16_t bufs)
{
	if (sdp_seq_before(c->next_mseq - 1, mseq_ack))
		return false;
	if (c->posted)
		c->posted--;
	if (c->advertised)
		c->advertised--;
	c->last_rx_mseq = mseq;
	if (!sdp_seq_before(mseq_ack, c->peer_mseq_ack)) {
		c->peer_mseq_ack = mseq_ack;
		c->peer_bufs = bufs;
	}
	return true;
}

/* A receive buffer was posted again. */
static inline void sdp_credits_on_repost(struct sdp_credits *c)
{
	c->posted++;
}

#endif
