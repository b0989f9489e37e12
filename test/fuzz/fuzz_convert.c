/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The conversion frames (sdp/convert_wire.c) as a peer sends them on the
 * TCP connection being converted.  The input is the whole stream the peer
 * writes before it closes its end:
 *
 *  - as bytes: conv_check_header() on every prefix must agree with
 *    conv_decode(), a decoded frame must re-encode to its own bytes;
 *  - as a stream: written into a loopback TCP connection and read back
 *    with conv_recv() frame by frame, which must consume exactly the
 *    frames, leave anything else unread, and end on the end of stream
 *    with -ECONNRESET, never by the deadline (the peer is gone, nothing
 *    is left to wait for).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "convert.h"
#include "fuzz.h"

static int lfd = -1;
static struct sockaddr_in laddr;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	socklen_t l = sizeof(laddr);

	(void)argc;
	(void)argv;
	laddr.sin_family = AF_INET;
	laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&laddr, sizeof(laddr)) ||
	    listen(lfd, 64) || getsockname(lfd, (struct sockaddr *)&laddr, &l)) {
		perror("fuzz_convert: listener");
		abort();
	}
	return 0;
}

static void check_bytes(const uint8_t *data, size_t size)
{
	struct conv_frame f, g;
	uint8_t out[CONV_HDR_LEN + CONV_MAX_BODY];
	int whole = conv_check_header(data, size);

	/* A prefix never contradicts the whole: once -EPROTO/-EMSGSIZE or
	 * a length, always the same answer. */
	for (size_t n = 0; n < size && n <= CONV_HDR_LEN; n++) {
		int w = conv_check_header(data, n);

		if (w != 0)
			FUZZ_CHECK(w == whole);
	}
	FUZZ_CHECK(whole <= CONV_HDR_LEN + CONV_MAX_BODY);
	if (conv_decode(data, size, &f))
		return;
	FUZZ_CHECK(whole > 0 && (size_t)whole <= size);
	FUZZ_CHECK(f.pdata_len <= CONV_MAX_PDATA);
	size_t n = conv_encode(out, &f);

	FUZZ_CHECK(n <= sizeof(out));
	FUZZ_CHECK(conv_decode(out, n, &g) == 0);
	FUZZ_CHECK(g.type == f.type && g.status == f.status && g.reason == f.reason &&
		   g.port == f.port && g.flags == f.flags && g.pdata_len == f.pdata_len &&
		   !memcmp(g.nonce, f.nonce, sizeof(f.nonce)) &&
		   !memcmp(g.pdata, f.pdata, f.pdata_len));
}

/* A connected pair (cfd writes, *sfd reads), closed with a reset so that
 * a long run leaves no TIME_WAIT behind.  libFuzzer's SIGALRM can cut a
 * connect() short, which goes on in the background: the harness waits for
 * it rather than connecting anew, and takes from the accept queue only
 * its own connection.  Loopback can run short of ports for a moment under
 * millions of connections: that is retried.  Any other failure is the
 * harness's own and says which call failed. */
static int pair(int *sfd)
{
	struct linger lin = { .l_onoff = 1, .l_linger = 0 };
	struct sockaddr_in me, peer;
	socklen_t l;
	int cfd = -1;

	for (int tries = 0; cfd < 0; tries++) {
		cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (cfd < 0) {
			perror("fuzz_convert: socket");
			abort();
		}
		int r = connect(cfd, (struct sockaddr *)&laddr, sizeof(laddr));

		if (r && errno == EINTR) {
			struct pollfd pf = { .fd = cfd, .events = POLLOUT };
			int err = 0;

			l = sizeof(err);
			while (poll(&pf, 1, -1) < 0 && errno == EINTR)
				;
			getsockopt(cfd, SOL_SOCKET, SO_ERROR, &err, &l);
			r = err ? -1 : 0;
			errno = err;
		}
		if (r == 0)
			break;
		if ((errno != EADDRNOTAVAIL && errno != EAGAIN) || tries == 1000) {
			perror("fuzz_convert: connect");
			abort();
		}
		close(cfd);
		cfd = -1;
		usleep(1000);
	}
	l = sizeof(me);
	getsockname(cfd, (struct sockaddr *)&me, &l);
	for (;;) {
		*sfd = accept4(lfd, (struct sockaddr *)&peer, &(socklen_t){ sizeof(peer) },
			       SOCK_CLOEXEC);
		if (*sfd < 0 && errno == EINTR)
			continue;
		if (*sfd < 0) {
			perror("fuzz_convert: accept");
			abort();
		}
		if (peer.sin_port == me.sin_port)
			break;
		close(*sfd);	/* not ours: a connection given up earlier */
	}
	setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
	setsockopt(*sfd, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
	return cfd;
}

static void check_stream(const uint8_t *data, size_t size)
{
	int sfd, cfd = pair(&sfd);
	size_t off = 0;

	if (size && write(cfd, data, size) != (ssize_t)size)
		abort();
	shutdown(cfd, SHUT_WR);
	/* Loopback may still hold some of it under load (softirq backlog):
	 * the unread counts below are only exact once it has all come. */
	for (int i = 0, unread = -1; unread != (int)size; i++) {
		if (ioctl(sfd, FIONREAD, &unread)) {
			perror("fuzz_convert: FIONREAD");
			abort();
		}
		if (unread != (int)size && i == 100000) {
			fprintf(stderr, "fuzz_convert: %d of %zu bytes came in 10 s\n", unread, size);
			abort();
		}
		if (unread != (int)size)
			usleep(100);
	}
	for (;;) {
		struct conv_frame f;
		int unread = -1, r = conv_recv(sfd, &f, conv_deadline_in(5000));

		FUZZ_CHECK(r != -ETIMEDOUT);
		FUZZ_CHECK(ioctl(sfd, FIONREAD, &unread) == 0);
		if (r) {
			/* Nothing of a refused frame, nor of an incomplete one
			 * at the end of the stream, was consumed. */
			FUZZ_CHECK(r == -EPROTO || r == -EMSGSIZE || r == -ECONNRESET);
			FUZZ_CHECK((size_t)unread == size - off);
			if (r == -ECONNRESET && off < size)
				FUZZ_CHECK(conv_check_header(data + off, size - off) >= 0);
			break;
		}
		/* Exactly the frame at off was taken. */
		int whole = conv_check_header(data + off, size - off);

		FUZZ_CHECK(whole > 0 && off + (size_t)whole <= size);
		off += (size_t)whole;
		FUZZ_CHECK((size_t)unread == size - off);
	}
	close(cfd);
	close(sfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A peer may send more, but conv_recv() looks at one frame's worth
	 * at a time and the loopback buffers must hold the whole input. */
	if (size > 16 * 1024)
		return 0;
	check_bytes(data, size);
	check_stream(data, size);
	return 0;
}
