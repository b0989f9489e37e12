/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The Hello and HelloAck decoders (sdp/wire.c) fed a connection request's
 * or an accept's private data as a peer sends it.  The input goes to both
 * (each rejects the other's MID).  An accepted header must hold what the
 * decoders promise the engine (version, IP version, max_adverts, receive
 * sizes in bounds) and must survive a round trip: encoded again into the
 * same room and decoded, it gives the same fields.  It goes to the
 * decoder of libsdp's reject private data too.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "wire.h"

/* SDP_RCVSZ_MIN and _MAX of wire.c, as wire.h documents them. */
#define RCVSZ_OK(sz) ((sz) >= SDP_BSDH_LEN + 1 && (sz) <= (16u << 20))

static void same_bsdh(const struct sdp_bsdh *a, const struct sdp_bsdh *b)
{
	FUZZ_CHECK(a->mid == b->mid && a->flags == b->flags && a->bufs == b->bufs &&
		   a->len == b->len && a->mseq == b->mseq && a->mseq_ack == b->mseq_ack);
}

static void check_hello(const uint8_t *data, size_t size)
{
	struct sdp_hello h, again;
	uint8_t out[SDP_HELLO_FULL_LEN];

	if (sdp_hello_decode(data, size, &h))
		return;
	FUZZ_CHECK(h.bsdh.mid == SDP_MID_HELLO && h.bsdh.len == size);
	FUZZ_CHECK(h.major == SDP_MAJOR_VERSION);
	FUZZ_CHECK(h.ip_version == 4 || h.ip_version == 6);
	FUZZ_CHECK(h.max_adverts > 0);
	FUZZ_CHECK(RCVSZ_OK(h.desremrcvsz) && RCVSZ_OK(h.localrcvsz));
	FUZZ_CHECK(h.has_addrs == (size == SDP_HELLO_FULL_LEN));

	int n = sdp_hello_encode(out, size, &h);

	FUZZ_CHECK(n == (int)size);
	FUZZ_CHECK(sdp_hello_decode(out, (size_t)n, &again) == 0);
	same_bsdh(&h.bsdh, &again.bsdh);
	FUZZ_CHECK(h.major == again.major && h.minor == again.minor &&
		   h.ip_version == again.ip_version && h.caps == again.caps &&
		   h.max_adverts == again.max_adverts &&
		   h.desremrcvsz == again.desremrcvsz && h.localrcvsz == again.localrcvsz &&
		   h.src_port == again.src_port && h.has_addrs == again.has_addrs);
	FUZZ_CHECK(!memcmp(&h.src_addr, &again.src_addr, sizeof(h.src_addr)) &&
		   !memcmp(&h.dst_addr, &again.dst_addr, sizeof(h.dst_addr)));
}

static void check_hello_ack(const uint8_t *data, size_t size)
{
	struct sdp_hello_ack h, again;
	uint8_t out[SDP_HELLO_ACK_FULL_LEN];

	if (sdp_hello_ack_decode(data, size, &h))
		return;
	FUZZ_CHECK(h.bsdh.mid == SDP_MID_HELLO_ACK && h.bsdh.len == size);
	FUZZ_CHECK(h.major == SDP_MAJOR_VERSION);
	FUZZ_CHECK(h.max_adverts > 0);
	FUZZ_CHECK(RCVSZ_OK(h.actrcvsz));

	int n = sdp_hello_ack_encode(out, size, &h);

	FUZZ_CHECK(n == (int)size);
	FUZZ_CHECK(sdp_hello_ack_decode(out, (size_t)n, &again) == 0);
	same_bsdh(&h.bsdh, &again.bsdh);
	FUZZ_CHECK(h.major == again.major && h.minor == again.minor &&
		   h.ip_version == again.ip_version && h.caps == again.caps &&
		   h.max_adverts == again.max_adverts && h.actrcvsz == again.actrcvsz);
}

/* A refusal's private data: a reason it names is one of ours, and it
 * re-encodes to the bytes it came from. */
static void check_reject(const uint8_t *data, size_t size)
{
	uint8_t out[SDP_REJECT_LEN];
	int why = sdp_reject_decode(data, size);

	if (why < 0) {
		FUZZ_CHECK(why == -EPROTO);
		return;
	}
	FUZZ_CHECK(why >= SDP_REJECT_BUSY && why <= SDP_REJECT_HELLO);
	FUZZ_CHECK(sdp_reject_encode(out, sizeof(out), why) == SDP_REJECT_LEN);
	FUZZ_CHECK(memcmp(out, data, SDP_REJECT_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_hello(data, size);
	check_hello_ack(data, size);
	check_reject(data, size);
	return 0;
}
