/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of the conversion handshake's frames (sdp/convert.c): the
 * encoder against byte images written out by hand from sdp/convert.h, and
 * the decoder and header check on every prefix, on stream data that is not
 * a frame, and on hostile lengths.  Inputs are heap copies of exactly the
 * length given, so ASan catches a read past the end.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

static uint8_t *copy(const uint8_t *b, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	cr_assert(p);
	memcpy(p, b, n);
	return p;
}

static const uint8_t nonce[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

Test(convert, req_image)
{
	struct conv_frame f = { .type = CONV_REQ, .flags = 0x01020304 };
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	static const uint8_t want[32] = { 0, 'S', 'D', 'P', 'C', 'V', 1, 1, 0, 20, 0, 0,
					  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
					  1, 2, 3, 4 };

	memcpy(f.nonce, nonce, 16);
	cr_assert_eq(conv_encode(buf, &f), sizeof(want));
	cr_assert_arr_eq(buf, want, sizeof(want));
}

Test(convert, rsp_and_fin_images)
{
	struct conv_frame r = { .type = CONV_RSP, .status = CONV_FAILED,
				.reason = CONV_R_VERSION, .port = 0xabcd };
	struct conv_frame f = { .type = CONV_FIN, .status = CONV_OK, .reason = CONV_R_NONE };
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	static const uint8_t want_rsp[32] = { 0, 'S', 'D', 'P', 'C', 'V', 2, 1, 0, 20, 0, 0,
					      1, 2, 0xab, 0xcd,
					      1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	static const uint8_t want_fin[16] = { 0, 'S', 'D', 'P', 'C', 'V', 3, 1, 0, 4, 0, 0,
					      0, 0, 0, 0 };

	memcpy(r.nonce, nonce, 16);
	cr_assert_eq(conv_encode(buf, &r), sizeof(want_rsp));
	cr_assert_arr_eq(buf, want_rsp, sizeof(want_rsp));
	cr_assert_eq(conv_encode(buf, &f), sizeof(want_fin));
	cr_assert_arr_eq(buf, want_fin, sizeof(want_fin));
}

Test(convert, round_trip)
{
	struct conv_frame in = { .type = CONV_RSP, .status = CONV_OK, .port = 18515 }, out;
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];

	memcpy(in.nonce, nonce, 16);
	size_t n = conv_encode(buf, &in);
	uint8_t *p = copy(buf, n);

	cr_assert_eq(conv_check_header(p, n), (int)n);
	cr_assert_eq(conv_decode(p, n, &out), 0);
	cr_assert_eq(out.type, CONV_RSP);
	cr_assert_eq(out.version, CONV_VERSION);
	cr_assert_eq(out.port, 18515);
	cr_assert_arr_eq(out.nonce, nonce, 16);
	free(p);
}

/* Every proper prefix of a frame could still begin one (0), or is a
 * complete header (the frame's length); none decodes. */
Test(convert, prefixes)
{
	struct conv_frame f = { .type = CONV_FIN }, out;
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	size_t n = conv_encode(buf, &f);

	for (size_t i = 0; i < n; i++) {
		uint8_t *p = copy(buf, i);

		cr_assert_eq(conv_check_header(p, i), i < CONV_HDR_LEN ? 0 : (int)n, "prefix %zu",
			     i);
		cr_assert_eq(conv_decode(p, i, &out), -EPROTO, "prefix %zu", i);
		free(p);
	}
}

/* Stream data is told apart from the first byte that differs. */
Test(convert, stream_data_is_not_a_frame)
{
	static const uint8_t http[] = "GET / HTTP/1.1\r\n";
	static const uint8_t almost[] = { 0, 'S', 'D', 'P', 'X' };
	uint8_t *p = copy(http, 1);

	cr_assert_eq(conv_check_header(p, 1), -EPROTO);
	free(p);
	p = copy(almost, sizeof(almost));
	cr_assert_eq(conv_check_header(p, 4), 0);
	cr_assert_eq(conv_check_header(p, 5), -EPROTO);
	free(p);
}

Test(convert, hostile_lengths_and_types)
{
	struct conv_frame out;
	uint8_t h[CONV_HDR_LEN + 4] = { 0, 'S', 'D', 'P', 'C', 'V', CONV_REQ, 1, 0x01, 0x01 };
	uint8_t *p = copy(h, CONV_HDR_LEN);

	/* A body over the limit. */
	cr_assert_eq(conv_check_header(p, CONV_HDR_LEN), -EMSGSIZE);
	free(p);
	/* A REQ whose body is shorter than a REQ's. */
	h[8] = 0;
	h[9] = 4;
	p = copy(h, sizeof(h));
	cr_assert_eq(conv_check_header(p, sizeof(h)), (int)sizeof(h));
	cr_assert_eq(conv_decode(p, sizeof(h), &out), -EPROTO);
	free(p);
	/* An unknown type. */
	h[6] = 9;
	p = copy(h, sizeof(h));
	cr_assert_eq(conv_decode(p, sizeof(h), &out), -EPROTO);
	free(p);
	/* A FIN with a longer body (a later version's) decodes. */
	h[6] = CONV_FIN;
	h[7] = 2;
	uint8_t longer[CONV_HDR_LEN + 8] = { 0 };

	memcpy(longer, h, CONV_HDR_LEN);
	longer[9] = 8;
	longer[CONV_HDR_LEN] = CONV_FAILED;
	p = copy(longer, sizeof(longer));
	cr_assert_eq(conv_decode(p, sizeof(longer), &out), 0);
	cr_assert_eq(out.version, 2);
	cr_assert_eq(out.status, CONV_FAILED);
	free(p);
}

/* A request's private data is the rest of its body, up to the limit. */
Test(convert, private_data)
{
	struct conv_frame in = { .type = CONV_REQ, .pdata_len = CONV_MAX_PDATA }, out;
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];

	for (int i = 0; i < CONV_MAX_PDATA; i++)
		in.pdata[i] = (uint8_t)(i * 7);
	size_t n = conv_encode(buf, &in);

	cr_assert_eq(n, CONV_HDR_LEN + CONV_MAX_BODY);
	cr_assert_eq(buf[8] << 8 | buf[9], CONV_MAX_BODY);
	uint8_t *p = copy(buf, n);

	cr_assert_eq(conv_decode(p, n, &out), 0);
	cr_assert_eq(out.pdata_len, CONV_MAX_PDATA);
	cr_assert_arr_eq(out.pdata, in.pdata, CONV_MAX_PDATA);
	free(p);
	/* None: the body is the fixed part alone. */
	in.pdata_len = 0;
	n = conv_encode(buf, &in);
	p = copy(buf, n);
	cr_assert_eq(n, CONV_HDR_LEN + 20);
	cr_assert_eq(conv_decode(p, n, &out), 0);
	cr_assert_eq(out.pdata_len, 0);
	free(p);
}
