/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of the credit arithmetic in sdp/credits.h: the individual
 * rules first, then a two-peer simulation that checks the properties the
 * rules exist for (no receive-buffer overrun, no credit deadlock).
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "credits.h"

/* Header fields of one message we build the way the engine must: bufs
 * and mseq_ack sampled at the moment the message is sent. */
struct cr_hdr {
	uint32_t mseq;
	uint32_t mseq_ack;
	uint16_t bufs;
};

static struct cr_hdr cr_send(struct sdp_credits *c)
{
	struct cr_hdr h;

	h.bufs = (uint16_t)c->posted;
	h.mseq_ack = c->last_rx_mseq;
	h.mseq = sdp_credits_on_send(c, false);
	return h;
}

/* Put c in the state of a connection whose first `base` messages each way
 * have been sent and acknowledged, to reach mseq wrap-around quickly. */
static void cr_rebase(struct sdp_credits *c, uint32_t base)
{
	c->next_mseq = base + 1;
	c->peer_mseq_ack = base;
	c->last_rx_mseq = base;
}

Test(credits, initial_state)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 10, 16);
	cr_assert_eq(c.next_mseq, 1, "first in-band mseq is 1");
	cr_assert_eq(c.peer_mseq_ack, 0);
	cr_assert_eq(c.last_rx_mseq, 0);
	cr_assert_eq(c.peer_bufs, 10);
	cr_assert_eq(c.posted, 16);
	cr_assert_eq(c.advertised, 16, "the Hello advertised every posted buffer");
	cr_assert_eq(sdp_tx_credits(&c), 10);
	cr_assert(sdp_can_send_data(&c));
	cr_assert_not(sdp_update_needed(&c));

	sdp_credits_init(&c, 0, 4);
	cr_assert_eq(sdp_tx_credits(&c), 0);
	cr_assert_not(sdp_can_send_data(&c));
	cr_assert_not(sdp_can_send_ctrl(&c));
	cr_assert_not(sdp_can_send_update(&c));
}

Test(credits, each_send_uses_one)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	for (uint32_t i = 0; i < 8; i++) {
		cr_assert_eq(sdp_tx_credits(&c), 8 - i);
		cr_assert_eq(sdp_credits_on_send(&c, false), i + 1);
	}
	cr_assert_eq(sdp_tx_credits(&c), 0);
	cr_assert_eq(c.next_mseq, 9);
	/* Over-sending (a bug elsewhere) never shows as a huge count. */
	sdp_credits_on_send(&c, false);
	cr_assert_eq(sdp_tx_credits(&c), 0);
}

Test(credits, refresh_from_peer)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	for (int i = 0; i < 5; i++)
		sdp_credits_on_send(&c, false);			/* mseq 1..5 */
	cr_assert_eq(sdp_tx_credits(&c), 3);
	/* Peer got 1..3 and has 10 buffers posted: 4 and 5 will use two. */
	cr_assert(sdp_credits_on_recv(&c, 1, 3, 10));
	cr_assert_eq(c.peer_mseq_ack, 3);
	cr_assert_eq(c.peer_bufs, 10);
	cr_assert_eq(c.last_rx_mseq, 1);
	cr_assert_eq(sdp_tx_credits(&c), 8);
	/* It got everything and reposted less than it had. */
	cr_assert(sdp_credits_on_recv(&c, 2, 5, 6));
	cr_assert_eq(sdp_tx_credits(&c), 6);
	/* Same mseq_ack, later message: its bufs are newer, take them. */
	cr_assert(sdp_credits_on_recv(&c, 3, 5, 7));
	cr_assert_eq(sdp_tx_credits(&c), 7);
	/* Fewer buffers than messages in flight reads as zero, not negative. */
	for (int i = 0; i < 7; i++)
		sdp_credits_on_send(&c, false);			/* mseq 6..12 */
	cr_assert(sdp_credits_on_recv(&c, 4, 6, 2));
	cr_assert_eq(sdp_tx_credits(&c), 0);
}

Test(credits, receive_uses_our_buffer)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 3);
	cr_assert(sdp_credits_on_recv(&c, 1, 0, 8));
	cr_assert_eq(c.posted, 2);
	cr_assert_eq(c.advertised, 2);
	sdp_credits_on_repost(&c);
	cr_assert_eq(c.posted, 3);
	cr_assert_eq(c.advertised, 2);
	cr_assert(sdp_credits_on_recv(&c, 2, 0, 8));
	cr_assert(sdp_credits_on_recv(&c, 3, 0, 8));
	cr_assert(sdp_credits_on_recv(&c, 4, 0, 8));
	cr_assert_eq(c.posted, 0);
	cr_assert_eq(c.advertised, 0);
	/* A peer that overruns us cannot drive the counters below zero. */
	cr_assert(sdp_credits_on_recv(&c, 5, 0, 8));
	cr_assert_eq(c.posted, 0);
	cr_assert_eq(c.advertised, 0);
	cr_assert_eq(c.last_rx_mseq, 5);
}

Test(credits, send_advertises_posted)
{
	struct sdp_credits c;
	struct cr_hdr h;

	sdp_credits_init(&c, 8, 8);
	for (uint32_t i = 1; i <= 4; i++)
		cr_assert(sdp_credits_on_recv(&c, i, 0, 8));
	cr_assert_eq(c.advertised, 4);
	sdp_credits_on_repost(&c);
	sdp_credits_on_repost(&c);
	h = cr_send(&c);
	cr_assert_eq(h.bufs, 6);
	cr_assert_eq(h.mseq_ack, 4);
	cr_assert_eq(h.mseq, 1);
	cr_assert_eq(c.advertised, 6);
}

Test(credits, stale_mseq_ack_ignored)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	for (int i = 0; i < 6; i++)
		sdp_credits_on_send(&c, false);			/* mseq 1..6 */
	cr_assert(sdp_credits_on_recv(&c, 1, 5, 10));
	cr_assert_eq(sdp_tx_credits(&c), 9);
	/* An older ack cannot bring back credits (nor take any away). */
	cr_assert(sdp_credits_on_recv(&c, 2, 4, 100));
	cr_assert_eq(c.peer_mseq_ack, 5);
	cr_assert_eq(c.peer_bufs, 10);
	cr_assert_eq(sdp_tx_credits(&c), 9);
	cr_assert(sdp_credits_on_recv(&c, 3, 0, 1000));
	cr_assert_eq(sdp_tx_credits(&c), 9);
	/* The message itself still used one of our buffers. */
	cr_assert_eq(c.posted, 5);
	cr_assert_eq(c.last_rx_mseq, 3);
}

Test(credits, future_mseq_ack_rejected)
{
	struct sdp_credits c, before;

	sdp_credits_init(&c, 8, 8);
	for (int i = 0; i < 3; i++)
		sdp_credits_on_send(&c, false);			/* mseq 1..3 */
	before = c;
	cr_assert_not(sdp_credits_on_recv(&c, 1, 4, 60000));
	cr_assert_not(sdp_credits_on_recv(&c, 1, 0x7fffffff, 60000));
	cr_assert_arr_eq(&c, &before, sizeof(c), "a rejected header changes nothing");
	cr_assert(sdp_credits_on_recv(&c, 1, 3, 8));
	cr_assert_eq(sdp_tx_credits(&c), 8);

	/* Before anything was sent, only 0 is a valid ack. */
	sdp_credits_init(&c, 8, 8);
	cr_assert_not(sdp_credits_on_recv(&c, 1, 1, 8));
	cr_assert(sdp_credits_on_recv(&c, 1, 0, 9));
	cr_assert_eq(sdp_tx_credits(&c), 9);
}

Test(credits, mseq_wraps)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	cr_rebase(&c, 0xfffffffdu);
	cr_assert_eq(sdp_tx_credits(&c), 8);
	cr_assert_eq(sdp_credits_on_send(&c, false), 0xfffffffeu);
	cr_assert_eq(sdp_credits_on_send(&c, false), 0xffffffffu);
	cr_assert_eq(sdp_credits_on_send(&c, false), 0);
	cr_assert_eq(sdp_credits_on_send(&c, false), 1);
	cr_assert_eq(c.next_mseq, 2);
	cr_assert_eq(sdp_tx_credits(&c), 4);

	cr_assert(sdp_credits_on_recv(&c, 0xfffffffeu, 0xffffffffu, 8));
	cr_assert_eq(sdp_tx_credits(&c), 6);
	cr_assert(sdp_credits_on_recv(&c, 0xffffffffu, 0, 8));
	cr_assert_eq(sdp_tx_credits(&c), 7);
	/* Stale across the wrap. */
	cr_assert(sdp_credits_on_recv(&c, 0, 0xfffffffeu, 100));
	cr_assert_eq(sdp_tx_credits(&c), 7);
	cr_assert(sdp_credits_on_recv(&c, 1, 1, 8));
	cr_assert_eq(sdp_tx_credits(&c), 8);
	/* Future across the wrap. */
	cr_assert_not(sdp_credits_on_recv(&c, 2, 2, 8));
	cr_assert_eq(c.last_rx_mseq, 1);
}

Test(credits, ca4_82_thresholds)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 4, 8);
	/* 4, 3: anything. */
	cr_assert(sdp_can_send_data(&c));
	cr_assert(sdp_can_send_ctrl(&c));
	cr_assert(sdp_can_send_update(&c));
	sdp_credits_on_send(&c, false);
	cr_assert_eq(sdp_tx_credits(&c), 3);
	cr_assert(sdp_can_send_data(&c));
	sdp_credits_on_send(&c, false);

	/* 2: data must leave one for control and one for updates. */
	cr_assert_eq(sdp_tx_credits(&c), 2);
	cr_assert_not(sdp_can_send_data(&c));
	cr_assert(sdp_can_send_ctrl(&c));
	cr_assert(sdp_can_send_update(&c));
	sdp_credits_on_send(&c, false);

	/* 1: no payload, no control; an update only if it adds buffers. */
	cr_assert_eq(sdp_tx_credits(&c), 1);
	cr_assert_not(sdp_can_send_data(&c));
	cr_assert_not(sdp_can_send_ctrl(&c));
	cr_assert_eq(c.posted, c.advertised);
	cr_assert_not(sdp_can_send_update(&c));
	cr_assert(sdp_credits_on_recv(&c, 1, 0, 4));	/* peer: nothing new */
	cr_assert_not(sdp_can_send_update(&c), "posted 7 == advertised 7");
	sdp_credits_on_repost(&c);
	cr_assert(sdp_can_send_update(&c), "posted 8 > advertised 7");
	cr_assert_not(sdp_can_send_ctrl(&c));
	sdp_credits_on_send(&c, false);

	/* 0: nothing at all. */
	cr_assert_eq(sdp_tx_credits(&c), 0);
	sdp_credits_on_repost(&c);
	cr_assert_gt(c.posted, c.advertised);
	cr_assert_not(sdp_can_send_data(&c));
	cr_assert_not(sdp_can_send_ctrl(&c));
	cr_assert_not(sdp_can_send_update(&c));
	cr_assert_not(sdp_update_needed(&c));
}

Test(credits, update_needed_thresholds)
{
	struct sdp_credits c;
	uint32_t rx = 0;

	sdp_credits_init(&c, 16, 16);
	cr_assert_not(sdp_update_needed(&c), "peer knows all 16");

	/* The peer uses 7 of 16 and we free them again: it still has 9,
	 * more than half, so no message just for that. */
	for (int i = 0; i < 7; i++)
		cr_assert(sdp_credits_on_recv(&c, ++rx, 0, 16));
	cr_assert_not(sdp_update_needed(&c), "nothing freed yet");
	for (int i = 0; i < 7; i++)
		sdp_credits_on_repost(&c);
	cr_assert_eq(c.advertised, 9);
	cr_assert_not(sdp_update_needed(&c));

	/* One more: it is down to 8 of 16, i.e. half. */
	cr_assert(sdp_credits_on_recv(&c, ++rx, 0, 16));
	cr_assert_not(sdp_update_needed(&c), "posted 15, advertised 8");
	sdp_credits_on_repost(&c);
	cr_assert(sdp_update_needed(&c), "posted 16, advertised 8");

	/* Sending anything carries the update. */
	sdp_credits_on_send(&c, false);
	cr_assert_eq(c.advertised, 16);
	cr_assert_not(sdp_update_needed(&c));

	/* Not if the app holds the buffers: the peer knows all we have. */
	sdp_credits_init(&c, 16, 16);
	rx = 0;
	for (int i = 0; i < 14; i++)
		cr_assert(sdp_credits_on_recv(&c, ++rx, 0, 16));
	cr_assert_eq(c.posted, c.advertised);
	cr_assert_not(sdp_update_needed(&c));
	/* (Freeing just one is update_when_peer_would_stall, below.) */
	sdp_credits_on_repost(&c);
	sdp_credits_on_repost(&c);
	cr_assert(sdp_update_needed(&c), "posted 4, advertised 2");

	/* The peer has used every buffer and one is free again. */
	sdp_credits_init(&c, 16, 1);
	cr_assert(sdp_credits_on_recv(&c, 1, 0, 16));
	cr_assert_not(sdp_update_needed(&c));
	sdp_credits_on_repost(&c);
	cr_assert(sdp_update_needed(&c), "posted 1, advertised 0");
}

/*
 * The peer is down to 2 credits, so it may not send data (that needs > 2),
 * and we have a freed buffer that would give it a third: the update must
 * go now, not only once half the ring is free again.
 */
Test(credits, update_when_peer_would_stall)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 16, 16);
	for (uint32_t i = 1; i <= 14; i++)
		cr_assert(sdp_credits_on_recv(&c, i, 0, 16));
	cr_assert_eq(c.advertised, 2, "the peer has 2 credits: no data");
	sdp_credits_on_repost(&c);
	cr_assert_eq(c.posted, 3);
	cr_assert(sdp_can_send_update(&c));
	cr_assert(sdp_update_needed(&c), "one more buffer would unblock the peer");
}

Test(credits, update_needed_respects_ca4_82)
{
	struct sdp_credits c;

	/* Last credit: allowed because the update adds buffers. */
	sdp_credits_init(&c, 1, 16);
	for (uint32_t i = 1; i <= 10; i++)
		cr_assert(sdp_credits_on_recv(&c, i, 0, 1));
	for (int i = 0; i < 10; i++)
		sdp_credits_on_repost(&c);
	cr_assert_eq(sdp_tx_credits(&c), 1);
	cr_assert(sdp_update_needed(&c));
	sdp_credits_on_send(&c, false);
	/* No credit at all: however many buffers are free, it must wait
	 * for the peer. */
	for (uint32_t i = 11; i <= 20; i++)
		cr_assert(sdp_credits_on_recv(&c, i, 0, 1));
	for (int i = 0; i < 10; i++)
		sdp_credits_on_repost(&c);
	cr_assert_eq(sdp_tx_credits(&c), 0);
	cr_assert_eq(c.posted, 16);
	cr_assert_eq(c.advertised, 6);
	cr_assert_not(sdp_update_needed(&c));
}

/* --- two-peer simulation ----------------------------------------------------- */

enum cr_kind { CR_DATA, CR_CTRL, CR_UPDATE };

#define CR_QMAX 2048

struct cr_msg {
	struct cr_hdr h;
	enum cr_kind kind;
};

struct cr_peer {
	struct sdp_credits c;
	uint32_t total;		/* receive buffers this side owns */
	uint32_t unread;	/* of those, holding data the app has not read */
	uint32_t want_data;	/* messages the app still wants to send */
	uint32_t want_ctrl;
	uint64_t data_tx, data_rx, ctrl_tx, ctrl_rx;
	/* What this side has sent and the other has not yet received. */
	struct cr_msg q[CR_QMAX];
	size_t head, count;
};

struct cr_sim {
	struct cr_peer p[2];
	uint32_t seed;
	uint64_t steps, updates;
};

static uint32_t cr_rand(struct cr_sim *s)
{
	uint32_t x = s->seed;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return s->seed = x;
}

static void cr_sim_init(struct cr_sim *s, uint32_t seed, uint32_t bufs0,
			uint32_t bufs1, uint32_t base)
{
	memset(s, 0, sizeof(*s));
	s->seed = seed;
	s->p[0].total = bufs0;
	s->p[1].total = bufs1;
	/* The Hello exchange: each side learns the other's posted count. */
	sdp_credits_init(&s->p[0].c, bufs1, bufs0);
	sdp_credits_init(&s->p[1].c, bufs0, bufs1);
	cr_rebase(&s->p[0].c, base);
	cr_rebase(&s->p[1].c, base);
}

static void cr_sim_send(struct cr_sim *s, int i, enum cr_kind kind)
{
	struct cr_peer *me = &s->p[i];
	struct cr_msg *m;

	cr_assert_lt(me->count, CR_QMAX);
	m = &me->q[(me->head + me->count++) % CR_QMAX];
	m->kind = kind;
	m->h = cr_send(&me->c);
	switch (kind) {
	case CR_DATA:
		me->want_data--;
		me->data_tx++;
		break;
	case CR_CTRL:
		me->want_ctrl--;
		me->ctrl_tx++;
		break;
	case CR_UPDATE:
		s->updates++;
		break;
	}
}

/* The other side takes the oldest message peer i sent (RC is in order). */
static void cr_sim_deliver(struct cr_sim *s, int i)
{
	struct cr_peer *from = &s->p[i], *to = &s->p[!i];
	struct cr_msg m = from->q[from->head];

	from->head = (from->head + 1) % CR_QMAX;
	from->count--;
	cr_assert_eq(m.h.mseq, to->c.last_rx_mseq + 1, "messages arrive in order");
	cr_assert_gt(to->c.posted, 0, "message %u arrived with no buffer posted",
		     m.h.mseq);
	cr_assert(sdp_credits_on_recv(&to->c, m.h.mseq, m.h.mseq_ack, m.h.bufs),
		  "valid header refused");
	if (m.kind == CR_DATA) {
		to->unread++;
		to->data_rx++;
	} else {
		/* Nothing for the app in it: the buffer goes straight back. */
		if (m.kind == CR_CTRL)
			to->ctrl_rx++;
		sdp_credits_on_repost(&to->c);
	}
}

static void cr_sim_read(struct cr_sim *s, int i, uint32_t n)
{
	struct cr_peer *me = &s->p[i];

	if (n > me->unread)
		n = me->unread;
	me->unread -= n;
	while (n--)
		sdp_credits_on_repost(&me->c);
}

/* What the engine would do for side i now, if anything; returns whether
 * it sent a message. */
static int cr_sim_engine(struct cr_sim *s, int i)
{
	struct cr_peer *me = &s->p[i];

	if (me->want_ctrl && sdp_can_send_ctrl(&me->c)) {
		cr_sim_send(s, i, CR_CTRL);
		return 1;
	}
	if (me->want_data && sdp_can_send_data(&me->c)) {
		cr_sim_send(s, i, CR_DATA);
		return 1;
	}
	if (sdp_update_needed(&me->c)) {
		cr_sim_send(s, i, CR_UPDATE);
		return 1;
	}
	return 0;
}

static void cr_sim_check(struct cr_sim *s)
{
	for (int i = 0; i < 2; i++) {
		struct cr_peer *me = &s->p[i], *peer = &s->p[!i];

		/* Everything in flight towards a side has a buffer waiting. */
		cr_assert_leq(peer->count, me->c.posted,
			      "step %llu: %zu in flight to side %d, %u posted",
			      (unsigned long long)s->steps, peer->count, i,
			      me->c.posted);
		/* Buffers are posted, hold unread data, or are in use by
		 * nothing else: the bookkeeping lost none. */
		cr_assert_eq(me->c.posted + me->unread, me->total,
			     "side %d leaks buffers", i);
		cr_assert_leq(me->c.advertised, me->c.posted);
	}
}

/*
 * Quiescent (nothing in flight, every app has read everything) with work
 * left: somebody must be able to send, or nothing will ever move again.
 * Checked here rather than only by running out of steps so that the
 * failure points at the exact state.
 */
static void cr_sim_check_live(struct cr_sim *s)
{
	struct cr_peer *a = &s->p[0], *b = &s->p[1];

	if (a->count || b->count || a->unread || b->unread)
		return;
	if (!a->want_data && !a->want_ctrl && !b->want_data && !b->want_ctrl)
		return;
	for (int i = 0; i < 2; i++) {
		struct cr_peer *me = &s->p[i];

		if ((me->want_ctrl && sdp_can_send_ctrl(&me->c)) ||
		    (me->want_data && sdp_can_send_data(&me->c)) ||
		    sdp_update_needed(&me->c))
			return;
	}
	cr_assert_fail("credit deadlock at step %llu: side 0 credits %u posted %u adv %u, "
		       "side 1 credits %u posted %u adv %u",
		       (unsigned long long)s->steps,
		       sdp_tx_credits(&a->c), a->c.posted, a->c.advertised,
		       sdp_tx_credits(&b->c), b->c.posted, b->c.advertised);
}

static void cr_sim_run(uint32_t seed, uint32_t bufs0, uint32_t bufs1,
		       uint32_t base, int steps)
{
	struct cr_sim s;

	cr_sim_init(&s, seed, bufs0, bufs1, base);

	/* Random phase: apps produce and consume at random, both ways. */
	for (s.steps = 0; s.steps < (uint64_t)steps; s.steps++) {
		uint32_t r = cr_rand(&s);
		int i = r & 1;
		struct cr_peer *me = &s.p[i];

		switch ((r >> 1) % 8) {
		case 0:
			me->want_data += (r >> 8) % 8;
			if (!((r >> 12) % 16))
				me->want_ctrl++;
			break;
		case 1:
		case 2:
			cr_sim_engine(&s, i);
			break;
		case 3:
		case 4:
			if (s.p[i].count)
				cr_sim_deliver(&s, i);
			break;
		case 5:
			/* A slow reader sometimes, a greedy one others. */
			cr_sim_read(&s, i, (r >> 8) % 3 ? 1 : me->total);
			break;
		default:
			/* Reading waits on the app; the network does not. */
			if (s.p[!i].count)
				cr_sim_deliver(&s, !i);
			break;
		}
		cr_sim_check(&s);
		cr_sim_check_live(&s);
	}

	/* Drain: no new work, apps read everything, until all is sent. */
	for (int round = 0;; round++) {
		int moved = 0;

		cr_assert_lt(round, 1000000, "drain does not terminate");
		for (int i = 0; i < 2; i++) {
			moved |= cr_sim_engine(&s, i);
			cr_sim_check(&s);
			while (s.p[i].count) {
				cr_sim_deliver(&s, i);
				moved = 1;
				cr_sim_check(&s);
			}
			if (s.p[!i].unread)
				moved = 1;
			cr_sim_read(&s, !i, s.p[!i].total);
			cr_sim_check(&s);
		}
		cr_sim_check_live(&s);
		if (!moved)
			break;
	}
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(s.p[i].want_data, 0, "side %d still has data to send", i);
		cr_assert_eq(s.p[i].want_ctrl, 0, "side %d still has control to send", i);
		cr_assert_eq(s.p[i].data_tx, s.p[!i].data_rx);
		cr_assert_eq(s.p[i].ctrl_tx, s.p[!i].ctrl_rx);
	}
	/* A run that never sent a pure update would prove nothing. */
	cr_assert_gt(s.updates, 0);
	/* A run meant to cross the wrap must have crossed it, both ways. */
	for (int i = 0; base > 0x80000000u && i < 2; i++)
		cr_assert_lt(s.p[i].c.next_mseq, base, "side %d did not wrap", i);
}

Test(credits_sim, symmetric_16)
{
	for (uint32_t seed = 1; seed <= 20; seed++)
		cr_sim_run(seed * 0x9e3779b9u, 16, 16, 0, 20000);
}

Test(credits_sim, minimum_buffers)
{
	/* recv_bufs may be as low as 4: one data credit beyond the reserve. */
	for (uint32_t seed = 1; seed <= 20; seed++)
		cr_sim_run(seed * 0x85ebca6bu, 4, 4, 0, 20000);
}

Test(credits_sim, asymmetric)
{
	for (uint32_t seed = 1; seed <= 10; seed++) {
		cr_sim_run(seed * 0xc2b2ae35u, 4, 64, 0, 20000);
		cr_sim_run(seed * 0x27d4eb2fu, 5, 7, 0, 20000);
		cr_sim_run(seed * 0x165667b1u, 1024, 6, 0, 20000);
	}
}

Test(credits_sim, across_mseq_wrap)
{
	/* Start 3000 messages short of 2^32 so each run crosses the wrap. */
	for (uint32_t seed = 1; seed <= 10; seed++)
		cr_sim_run(seed * 0xd3a2646cu, 8, 8, 0xffffffffu - 3000, 20000);
}

/* What a lingering close waits for: the peer's acknowledgement of every
 * message of ours except bare credit updates, which it may never answer. */
Test(credits, peer_has_all)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	cr_assert(sdp_peer_has_all(&c), "nothing sent yet");
	cr_assert_eq(sdp_credits_on_send(&c, false), 1);	/* data */
	cr_assert_eq(sdp_credits_on_send(&c, true), 2);		/* an update */
	cr_assert_not(sdp_peer_has_all(&c));
	cr_assert(sdp_credits_on_recv(&c, 1, 1, 8));
	cr_assert(sdp_peer_has_all(&c), "the update is not waited for");
	cr_assert_eq(sdp_credits_on_send(&c, false), 3);	/* the DisConn */
	cr_assert_not(sdp_peer_has_all(&c));
	cr_assert(sdp_credits_on_recv(&c, 2, 2, 8));
	cr_assert_not(sdp_peer_has_all(&c));
	cr_assert(sdp_credits_on_recv(&c, 3, 3, 8));
	cr_assert(sdp_peer_has_all(&c));

	/* Across the wrap of mseq. */
	c.next_mseq = 0xffffffffu;
	c.peer_mseq_ack = 0xfffffffeu;
	c.kept_mseq = 0xfffffffeu;
	c.last_rx_mseq = 3;
	cr_assert_eq(sdp_credits_on_send(&c, false), 0xffffffffu);
	cr_assert_eq(sdp_credits_on_send(&c, false), 0);
	cr_assert_not(sdp_peer_has_all(&c));
	cr_assert(sdp_credits_on_recv(&c, 4, 0xffffffffu, 8));
	cr_assert_not(sdp_peer_has_all(&c));
	cr_assert(sdp_credits_on_recv(&c, 5, 0, 8));
	cr_assert(sdp_peer_has_all(&c));
}

/* Any message acknowledges the peer's DisConn, and clears the debt. */
Test(credits, ack_owed_cleared_by_any_send)
{
	struct sdp_credits c;

	sdp_credits_init(&c, 8, 8);
	c.ack_owed = true;
	sdp_credits_on_send(&c, true);
	cr_assert_not(c.ack_owed);
	c.ack_owed = true;
	sdp_credits_on_send(&c, false);
	cr_assert_not(c.ack_owed);
}
