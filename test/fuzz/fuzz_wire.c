/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The in-band message decoder (sdp/wire.c) fed what a peer's receive
 * completion would hold: the input is one message as the transport
 * delivered it.  Beyond the sanitizers, every accepted message must
 * satisfy what sdp_bsdh_decode() promises the engine (length, payload,
 * flags), and the BSDH and the extended header must re-encode to the very
 * bytes they were decoded from: a decoder that drops or invents a bit
 * would make the two ends disagree.
 */
#include <string.h>

#include "fuzz.h"
#include "wire.h"

/* Decode the extended header of an accepted message and check that it
 * re-encodes to the same bytes. */
static void check_ext(const uint8_t *ext, uint8_t mid)
{
	uint8_t out[SDP_SINKAH_LEN];

	switch (mid) {
	case SDP_MID_SRC_AVAIL: {
		struct sdp_srcah a;

		sdp_srcah_decode(ext, &a);
		sdp_srcah_encode(out, &a);
		FUZZ_CHECK(!memcmp(out, ext, SDP_SRCAH_LEN));
		break;
	}
	case SDP_MID_SINK_AVAIL: {
		struct sdp_sinkah a;

		sdp_sinkah_decode(ext, &a);
		sdp_sinkah_encode(out, &a);
		FUZZ_CHECK(!memcmp(out, ext, SDP_SINKAH_LEN));
		break;
	}
	case SDP_MID_RDMA_WR_COMPL:
	case SDP_MID_RDMA_RD_COMPL:
	case SDP_MID_CH_RCV_BUF:
	case SDP_MID_CH_RCV_BUF_ACK:
		sdp_u32h_encode(out, sdp_u32h_decode(ext));
		FUZZ_CHECK(!memcmp(out, ext, SDP_U32H_LEN));
		break;
	case SDP_MID_MODE_CHANGE: {
		int half = -1;
		enum sdp_mode m;

		if (sdp_mch_decode(ext, &half, &m) == 0) {
			FUZZ_CHECK(half == 0 || half == 1);
			FUZZ_CHECK(m <= SDP_MODE_TRANSACTION);
			sdp_mch_encode(out, half, m);
			FUZZ_CHECK(!memcmp(out, ext, SDP_MCH_LEN));
		}
		break;
	}
	case SDP_MID_SUSP_COMM:
		sdp_sch_encode(out, sdp_sch_decode(ext));
		FUZZ_CHECK(!memcmp(out, ext, SDP_SCH_LEN));
		break;
	default:
		FUZZ_CHECK(sdp_ext_len(mid) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_bsdh h;
	uint8_t out[SDP_BSDH_LEN];

	if (size)
		FUZZ_CHECK(strlen(sdp_mid_name(data[0])) > 0);
	if (sdp_bsdh_decode(data, size, &h))
		return 0;

	size_t hdr = SDP_BSDH_LEN + sdp_ext_len(h.mid);

	FUZZ_CHECK(h.len == size && size >= hdr);
	FUZZ_CHECK(h.mid != SDP_MID_HELLO && h.mid != SDP_MID_HELLO_ACK);
	FUZZ_CHECK(!(h.flags & ~SDP_FLAG_MASK));
	if (size > hdr)
		FUZZ_CHECK(h.mid == SDP_MID_DATA || h.mid == SDP_MID_SRC_AVAIL ||
			   h.mid == SDP_MID_SINK_AVAIL);
	if (h.flags & SDP_FLAG_OOB_PRES)
		FUZZ_CHECK(h.mid == SDP_MID_DATA && size > hdr);
	sdp_bsdh_encode(out, &h);
	FUZZ_CHECK(!memcmp(out, data, SDP_BSDH_LEN));
	check_ext(data + SDP_BSDH_LEN, h.mid);
	return 0;
}
