/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * transports/verbs/vcore.c, the verbs core under the "ib"/"iwarp"
 * transports and the uDAPL provider: private data framing, telling a
 * peer's reject from the stack's, and the iWARP start rule's handshake
 * (its private data and its timing), on a queue pair whose post_send is
 * ours.  No RDMA device is needed.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "verbs/vcore.h"

/* ---- framing ------------------------------------------------------------- */

Test(vcore, frame_round_trip)
{
	uint8_t f[VC_PDATA_MAX + 1], out[VC_PDATA_MAX];

	cr_assert_eq(vc_frame(f, 8, "hello", 5), 6);
	cr_assert_eq(f[0], 5);
	cr_assert_eq(vc_unframe(f, 6, out), 5);
	cr_assert_eq(memcmp(out, "hello", 5), 0);
	/* what the wire pads after the framing is not the consumer's */
	memset(f + 6, 0xee, 50);
	cr_assert_eq(vc_unframe(f, 56, out), 5);
	/* nothing to say is one byte */
	cr_assert_eq(vc_frame(f, 1, NULL, 0), 1);
	cr_assert_eq(vc_unframe(f, 1, out), 0);
}

Test(vcore, frame_room)
{
	uint8_t f[VC_PDATA_MAX + 1], big[VC_PDATA_MAX + 1] = { 0 };

	cr_assert_eq(vc_frame(f, 56, big, 55), 56);
	cr_assert_eq(vc_frame(f, 56, big, 56), -EINVAL);
	/* the length byte says at most 254 in a 255-byte rdma_cm field */
	cr_assert_eq(vc_frame(f, 1000, big, VC_PDATA_MAX - 1), VC_PDATA_MAX);
	cr_assert_eq(vc_frame(f, 1000, big, VC_PDATA_MAX), -EINVAL);
}

Test(vcore, unframe_refuses_what_is_not_framed)
{
	uint8_t out[VC_PDATA_MAX];
	const uint8_t longer[] = { 9, 'a', 'b' };

	cr_assert_eq(vc_unframe(NULL, 0, out), -EPROTO);
	cr_assert_eq(vc_unframe(longer, 0, out), -EPROTO);
	cr_assert_eq(vc_unframe(longer, sizeof(longer), out), -EPROTO);
}

/* ---- rejects ---------------------------------------------------------------- */

static struct rdma_cm_event reject_event(int status, const void *pdata, uint8_t len)
{
	struct rdma_cm_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.event = RDMA_CM_EVENT_REJECTED;
	ev.status = status;
	ev.param.conn.private_data = pdata;
	ev.param.conn.private_data_len = len;
	return ev;
}

Test(vcore, rejected_ib_needs_the_consumer_reason)
{
	uint8_t f[VC_PDATA_MAX + 1], out[VC_PDATA_MAX];
	int n = vc_frame(f, 148, "no", 2);
	struct rdma_cm_event peer = reject_event(VC_IB_REJ_CONSUMER, f, (uint8_t)n);
	/* invalid service ID: nobody listens, whatever the padding says */
	struct rdma_cm_event cm = reject_event(8, f, (uint8_t)n);

	cr_assert_eq(vc_rejected(&peer, false, out), 2);
	cr_assert_eq(memcmp(out, "no", 2), 0);
	cr_assert_eq(vc_rejected(&cm, false, out), -ECONNREFUSED);
}

Test(vcore, rejected_iwarp_needs_the_framing)
{
	uint8_t f[VC_PDATA_MAX + 1], out[VC_PDATA_MAX];
	int n = vc_frame(f, 196, NULL, 0);
	struct rdma_cm_event peer = reject_event(-ECONNRESET, f, (uint8_t)n);
	/* a refused TCP connect: no MPA reply at all */
	struct rdma_cm_event tcp = reject_event(-ECONNREFUSED, NULL, 0);

	cr_assert_eq(vc_rejected(&peer, true, out), 0);
	cr_assert_eq(vc_rejected(&tcp, true, out), -ECONNREFUSED);
}

/* ---- the start rule: its private data ------------------------------------------ */

static struct ibv_mr fake_mr = { .lkey = 0x1111, .rkey = 0xa1b2c3d4 };

Test(vcore, rtr_request_keeps_the_consumer_bytes)
{
	uint8_t f[VC_PDATA_MAX + 1], out[VC_PDATA_MAX];
	int n = vc_frame(f, 184, "req", 3);

	cr_assert_not(vc_rtr_asked(f, (size_t)n), "framed bytes alone do not ask");
	n = vc_rtr_ask(f, n);
	cr_assert_eq(n, 5);
	cr_assert(vc_rtr_asked(f, (size_t)n));
	/* a peer that knows nothing of it reads the consumer's bytes */
	cr_assert_eq(vc_unframe(f, (size_t)n, out), 3);
	cr_assert_eq(memcmp(out, "req", 3), 0);
	cr_assert_not(vc_rtr_asked(NULL, 0));
	cr_assert_not(vc_rtr_asked(f, 1));
}

Test(vcore, rtr_accept_carries_the_target)
{
	struct vc_rtr r;
	uint8_t f[VC_PDATA_MAX + 1], out[VC_PDATA_MAX];
	uint64_t addr;
	uint32_t rkey;
	int n;

	memset(&r, 0, sizeof(r));
	r.mr = &fake_mr;
	r.word = 7;
	n = vc_frame(f, 196 - VC_RTR_LEN, "acc", 3);
	n = vc_rtr_accept(&r, true, f, n);
	cr_assert_eq(n, 4 + VC_RTR_LEN);
	cr_assert(r.promised);
	cr_assert_eq(r.word, 0, "the word is cleared for the initiator's write");
	cr_assert(vc_rtr_target(f, (size_t)n, &addr, &rkey));
	cr_assert_eq(addr, (uint64_t)(uintptr_t)&r.word);
	cr_assert_eq(rkey, fake_mr.rkey);
	cr_assert_eq(vc_unframe(f, (size_t)n, out), 3);
	/* an accept without the target: none found */
	cr_assert_not(vc_rtr_target(f, 4, &addr, &rkey));
}

Test(vcore, rtr_accept_without_request_or_word)
{
	struct vc_rtr r;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = vc_frame(f, 196, "acc", 3);

	memset(&r, 0, sizeof(r));
	r.mr = &fake_mr;
	cr_assert_eq(vc_rtr_accept(&r, false, f, n), n);
	cr_assert_not(r.promised);
	r.mr = NULL;	/* not an iWARP connection */
	cr_assert_eq(vc_rtr_accept(&r, true, f, n), n);
	cr_assert_not(r.promised);
}

/* ---- the start rule: its timing, on a QP whose post_send is ours ------------------- */

static struct {
	int posts;
	uint64_t addr;
	uint32_t rkey;
	uint64_t word;
	enum ibv_wr_opcode opcode;
	int fail;
} sent;

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	*bad = NULL;
	if (sent.fail)
		return sent.fail;
	sent.posts++;
	sent.addr = wr->wr.rdma.remote_addr;
	sent.rkey = wr->wr.rdma.rkey;
	sent.opcode = wr->opcode;
	memcpy(&sent.word, (void *)(uintptr_t)wr->sg_list[0].addr, sizeof(sent.word));
	return 0;
}

static struct ibv_context fake_ctx;
static struct ibv_qp fake_qp;

static void fake_init(void)
{
	memset(&sent, 0, sizeof(sent));
	fake_ctx.ops.post_send = fake_post_send;
	fake_qp.context = &fake_ctx;
}

/* An accept as the responder makes it, for the initiator to read. */
static int accept_pdata(struct vc_rtr *responder, uint8_t *f)
{
	memset(responder, 0, sizeof(*responder));
	responder->mr = &fake_mr;
	return vc_rtr_accept(responder, true, f, vc_frame(f, 184, NULL, 0));
}

TestSuite(rtr, .init = fake_init);

Test(rtr, initiator_writes_first_then_three_repeats)
{
	static const uint64_t at[] = { 10, 100, 1000 };
	struct vc_rtr resp, init;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = accept_pdata(&resp, f), next;
	uint64_t waited, t0 = 5000;

	memset(&init, 0, sizeof(init));
	init.mr = &fake_mr;
	cr_assert_eq(vc_rtr_established(&init, &fake_qp, true, f, (size_t)n, t0), 1,
		     "the initiator reports the connection up at once");
	cr_assert_eq(sent.posts, 1);
	cr_assert_eq(sent.opcode, IBV_WR_RDMA_WRITE);
	cr_assert_eq(sent.addr, (uint64_t)(uintptr_t)&resp.word);
	cr_assert_eq(sent.rkey, fake_mr.rkey);
	cr_assert_neq(sent.word, 0, "the word written is not zero");
	for (int i = 0; i < 3; i++) {
		next = -1;
		cr_assert(vc_rtr_busy(&init));
		cr_assert_eq(vc_rtr_tick(&init, &fake_qp, t0 + at[i] - 1, &next, &waited),
			     VC_RTR_IDLE);
		cr_assert_eq(sent.posts, 1 + i, "repeat %d is not due yet", i);
		cr_assert_eq(next, 1);
		next = -1;
		vc_rtr_tick(&init, &fake_qp, t0 + at[i], &next, &waited);
		cr_assert_eq(sent.posts, 2 + i, "repeat %d at %llu ms", i,
			     (unsigned long long)at[i]);
		if (i < 2)
			cr_assert_eq(next, (int)(at[i + 1] - at[i]));
	}
	cr_assert_not(vc_rtr_busy(&init), "three repeats, no more");
}

Test(rtr, a_late_tick_asks_to_come_back_at_once)
{
	struct vc_rtr resp, init;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = accept_pdata(&resp, f), next = -1;
	uint64_t waited;

	memset(&init, 0, sizeof(init));
	init.mr = &fake_mr;
	vc_rtr_established(&init, &fake_qp, true, f, (size_t)n, 1000);
	/* 150 ms late: the 10 ms repeat goes, the 100 ms one is overdue */
	vc_rtr_tick(&init, &fake_qp, 1150, &next, &waited);
	cr_assert_eq(sent.posts, 2);
	cr_assert_eq(next, 0, "an overdue repeat is due now, not in %d ms", next);
}

Test(rtr, initiator_without_target_writes_nothing)
{
	struct vc_rtr init;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = vc_frame(f, 196, "old peer", 8);

	memset(&init, 0, sizeof(init));
	init.mr = &fake_mr;
	cr_assert_eq(vc_rtr_established(&init, &fake_qp, true, f, (size_t)n, 1000), 1);
	cr_assert_eq(sent.posts, 0);
	cr_assert_not(vc_rtr_busy(&init));
}

Test(rtr, initiator_whose_write_fails)
{
	struct vc_rtr resp, init;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = accept_pdata(&resp, f);

	memset(&init, 0, sizeof(init));
	init.mr = &fake_mr;
	sent.fail = ENOMEM;
	cr_assert_eq(vc_rtr_established(&init, &fake_qp, true, f, (size_t)n, 1000), -ENOMEM);
	cr_assert_not(vc_rtr_busy(&init));
}

Test(rtr, responder_waits_for_the_word)
{
	struct vc_rtr resp;
	uint8_t f[VC_PDATA_MAX + 1];
	int next;
	uint64_t waited = 0;

	accept_pdata(&resp, f);
	cr_assert_eq(vc_rtr_established(&resp, &fake_qp, false, NULL, 0, 1000), 0,
		     "the responder is not up before the write");
	next = -1;
	cr_assert_eq(vc_rtr_tick(&resp, &fake_qp, 1003, &next, &waited), VC_RTR_IDLE);
	cr_assert_eq(next, 1, "the word is polled every millisecond");
	resp.word = 1;	/* the initiator's write lands */
	cr_assert_eq(vc_rtr_tick(&resp, &fake_qp, 1007, &next, &waited), VC_RTR_SEEN);
	cr_assert_eq(waited, 7);
	cr_assert_not(vc_rtr_busy(&resp));
	cr_assert_eq(sent.posts, 0, "the responder writes nothing");
}

Test(rtr, responder_gives_up)
{
	struct vc_rtr resp;
	uint8_t f[VC_PDATA_MAX + 1];
	int next = -1;
	uint64_t waited;

	accept_pdata(&resp, f);
	vc_rtr_established(&resp, &fake_qp, false, NULL, 0, 1000);
	cr_assert_eq(vc_rtr_tick(&resp, &fake_qp, 1000 + VC_RTR_MS - 1, &next, &waited),
		     VC_RTR_IDLE);
	cr_assert_eq(vc_rtr_tick(&resp, &fake_qp, 1000 + VC_RTR_MS, &next, &waited), -ETIMEDOUT);
	cr_assert_not(vc_rtr_busy(&resp));
}

Test(rtr, responder_that_promised_nothing_is_up_at_once)
{
	struct vc_rtr resp;
	uint8_t f[VC_PDATA_MAX + 1];

	memset(&resp, 0, sizeof(resp));
	resp.mr = &fake_mr;
	vc_rtr_accept(&resp, false, f, vc_frame(f, 196, NULL, 0));
	cr_assert_eq(vc_rtr_established(&resp, &fake_qp, false, NULL, 0, 1000), 1);
	cr_assert_not(vc_rtr_busy(&resp));
}

Test(rtr, stop_and_reset)
{
	struct vc_rtr resp, init;
	uint8_t f[VC_PDATA_MAX + 1];
	int n = accept_pdata(&resp, f);

	memset(&init, 0, sizeof(init));
	init.mr = &fake_mr;
	vc_rtr_established(&init, &fake_qp, true, f, (size_t)n, 1000);
	vc_rtr_established(&resp, &fake_qp, false, NULL, 0, 1000);
	cr_assert(vc_rtr_busy(&init));
	cr_assert(vc_rtr_busy(&resp));
	vc_rtr_stop(&init);
	vc_rtr_stop(&resp);
	cr_assert_not(vc_rtr_busy(&init));
	cr_assert_not(vc_rtr_busy(&resp));
	cr_assert(resp.promised, "stop leaves the accept's promise");
	vc_rtr_reset(&resp);
	cr_assert_not(resp.promised);
}
