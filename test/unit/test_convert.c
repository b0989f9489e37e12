/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of the conversion handshake's frames (sdp/convert.c): the
 * encoder against byte images written out by hand from sdp/convert.h, and
 * the decoder and header check on every prefix, on stream data that is not
 * a frame, and on hostile lengths.  Inputs are heap copies of exactly the
 * length given, so ASan catches a read past the end.  Then conv_recv() on
 * a loopback TCP connection: what it leaves in the stream, and how it
 * ends on a stream that ends inside a frame.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
	/* A REQ whose body is shorter than a REQ's: the header alone says it
	 * is no frame of ours, so that it is never consumed. */
	h[8] = 0;
	h[9] = 4;
	p = copy(h, sizeof(h));
	cr_assert_eq(conv_check_header(p, CONV_HDR_LEN), -EPROTO);
	cr_assert_eq(conv_check_header(p, sizeof(h)), -EPROTO);
	cr_assert_eq(conv_decode(p, sizeof(h), &out), -EPROTO);
	free(p);
	/* An unknown type, with or without a body, the same. */
	static const uint8_t unknown[] = { 0, 9, 255 };

	for (size_t i = 0; i < sizeof(unknown); i++) {
		h[6] = unknown[i];
		p = copy(h, sizeof(h));
		cr_assert_eq(conv_check_header(p, CONV_HDR_LEN), -EPROTO, "type %u", unknown[i]);
		cr_assert_eq(conv_decode(p, sizeof(h), &out), -EPROTO);
		free(p);
	}
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

/* --- conv_recv() on a TCP connection ----------------------------------------------- */

/* A connected loopback TCP pair: fd[0] reads, fd[1] is the peer. */
static void tcp_pair(int fd[2])
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int ls = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(ls, 0);
	cr_assert_eq(bind(ls, (struct sockaddr *)&sin, sizeof(sin)), 0);
	cr_assert_eq(listen(ls, 1), 0);
	cr_assert_eq(getsockname(ls, (struct sockaddr *)&sin, &len), 0);
	fd[1] = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(fd[1], (struct sockaddr *)&sin, sizeof(sin)), 0);
	fd[0] = accept(ls, NULL, NULL);
	cr_assert_geq(fd[0], 0);
	close(ls);
}

static void put(int fd, const void *b, size_t n)
{
	cr_assert_eq(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* The stream at fd still begins with want[0, n): read it (it is all there). */
static void assert_unread(int fd, const uint8_t *want, size_t n)
{
	uint8_t got[CONV_HDR_LEN + CONV_MAX_BODY];
	size_t have = 0;

	while (have < n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		cr_assert_eq(poll(&pf, 1, 10000), 1, "%zu of %zu bytes left in the stream", have, n);
		ssize_t r = recv(fd, got + have, n - have, MSG_DONTWAIT);

		cr_assert_gt(r, 0, "%zu of %zu bytes left in the stream", have, n);
		have += (size_t)r;
	}
	cr_assert_arr_eq(got, want, n);
}

/* The first 11 bytes of a header, then the end of the stream: the end is
 * seen (not a timeout, not a wait for ever), the bytes stay unread. */
Test(convert_recv, partial_header_then_end_of_stream, .timeout = 60)
{
	struct conv_frame f = { .type = CONV_FIN }, out;
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	size_t n = conv_encode(buf, &f);
	static const size_t cut[] = { 11, 1, CONV_HDR_LEN, 15 };

	cr_assert_eq(n, 16u);
	for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
		for (int forever = 0; forever < 2; forever++) {
			int fd[2];

			tcp_pair(fd);
			put(fd[1], buf, cut[i]);
			cr_assert_eq(shutdown(fd[1], SHUT_WR), 0);
			/* No deadline, or one far beyond the test's time limit. */
			cr_assert_eq(conv_recv(fd[0], &out, forever ? 0 : conv_deadline_in(600000)),
				     -ECONNRESET, "%zu bytes, %s", cut[i],
				     forever ? "no deadline" : "deadline");
			assert_unread(fd[0], buf, cut[i]);
			close(fd[0]);
			close(fd[1]);
		}
	}
}

struct late {
	int fd;
	const uint8_t *b;
	size_t n;
	bool shut;		/* then the end of the stream */
};

static void *send_late(void *arg)
{
	struct late *l = arg;

	poll(NULL, 0, 200);
	put(l->fd, l->b, l->n);
	if (l->shut)
		shutdown(l->fd, SHUT_WR);
	return NULL;
}

/* The rest of a frame that comes later is waited for, whatever the
 * caller's SO_RCVLOWAT, which is left as it was; the end of the stream
 * right behind the frame's last byte does not spoil it. */
Test(convert_recv, rest_of_frame_later, .timeout = 60)
{
	struct conv_frame f = { .type = CONV_RSP, .status = CONV_OK, .port = 4711 }, out;
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	size_t n = conv_encode(buf, &f);
	static const size_t first[] = { 0, 11, 20, 0, 11 };

	for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
		int fd[2], lowat = 100;
		socklen_t l = sizeof(lowat);
		pthread_t t;
		struct late rest = { 0, buf + first[i], n - first[i], i >= 3 };

		tcp_pair(fd);
		rest.fd = fd[1];
		cr_assert_eq(setsockopt(fd[0], SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)), 0);
		put(fd[1], buf, first[i]);
		cr_assert_eq(pthread_create(&t, NULL, send_late, &rest), 0);
		cr_assert_eq(conv_recv(fd[0], &out, conv_deadline_in(30000)), 0, "%zu first%s",
			     first[i], rest.shut ? ", then the end" : "");
		pthread_join(t, NULL);
		cr_assert_eq(out.type, CONV_RSP);
		cr_assert_eq(out.port, 4711);
		lowat = 0;
		cr_assert_eq(getsockopt(fd[0], SOL_SOCKET, SO_RCVLOWAT, &lowat, &l), 0);
		cr_assert_eq(lowat, 100, "the caller's SO_RCVLOWAT changed");
		close(fd[0]);
		close(fd[1]);
	}
}

/* A whole frame with our magic that is not a frame of ours -- an unknown
 * type, a body too short for its type -- is left in the stream. */
Test(convert_recv, not_ours_left_unread, .timeout = 60)
{
	uint8_t frames[][CONV_HDR_LEN + 20] = {
		{ 0, 'S', 'D', 'P', 'C', 'V', 9, 1, 0, 20 },
		{ 0, 'S', 'D', 'P', 'C', 'V', 0, 1, 0, 20 },
		{ 0, 'S', 'D', 'P', 'C', 'V', CONV_REQ, 1, 0, 4 },
		{ 0, 'S', 'D', 'P', 'C', 'V', CONV_RSP, 1, 0, 19 },
	};
	struct conv_frame out;

	for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
		size_t n = CONV_HDR_LEN + frames[i][9];
		int fd[2];

		tcp_pair(fd);
		put(fd[1], frames[i], n);
		cr_assert_eq(conv_recv(fd[0], &out, conv_deadline_in(30000)), -EPROTO, "frame %zu",
			     i);
		assert_unread(fd[0], frames[i], n);
		close(fd[0]);
		close(fd[1]);
	}
}
