// SPDX-License-Identifier: BSD-2-Clause
/*
 * The conversion handshake's frames and their transport over the TCP
 * socket (convert.h): what sdp/convert.c and the DAT SSP provider share.
 * Nothing here logs or touches the engine.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "convert.h"
#include "sys.h"

/* --- frames ----------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

/* Body lengths of this version. */
static size_t body_len(uint8_t type)
{
	switch (type) {
	case CONV_REQ:
		return CONV_NONCE_LEN + 4;
	case CONV_RSP:
		return 4 + CONV_NONCE_LEN;
	case CONV_FIN:
		return 4;
	default:
		return 0;
	}
}

size_t conv_encode(uint8_t *buf, const struct conv_frame *f)
{
	size_t fixed = body_len(f->type), n = fixed;
	uint8_t *b = buf + CONV_HDR_LEN;

	if (f->type != CONV_FIN)
		n += f->pdata_len;

	memcpy(buf, CONV_MAGIC, CONV_MAGIC_LEN);
	buf[6] = f->type;
	buf[7] = CONV_VERSION;
	put16(buf + 8, (uint16_t)n);
	put16(buf + 10, 0);
	memset(b, 0, fixed);
	if (n > fixed)
		memcpy(b + fixed, f->pdata, n - fixed);
	switch (f->type) {
	case CONV_REQ:
		memcpy(b, f->nonce, CONV_NONCE_LEN);
		put32(b + CONV_NONCE_LEN, f->flags);
		break;
	case CONV_RSP:
		b[0] = f->status;
		b[1] = f->reason;
		put16(b + 2, f->port);
		memcpy(b + 4, f->nonce, CONV_NONCE_LEN);
		break;
	case CONV_FIN:
		b[0] = f->status;
		b[1] = f->reason;
		break;
	}
	return CONV_HDR_LEN + n;
}

int conv_check_header(const uint8_t *buf, size_t len)
{
	size_t m = len < CONV_MAGIC_LEN ? len : CONV_MAGIC_LEN;

	if (memcmp(buf, CONV_MAGIC, m))
		return -EPROTO;
	if (len < CONV_HDR_LEN)
		return 0;
	uint16_t n = get16(buf + 8);

	if (n > CONV_MAX_BODY)
		return -EMSGSIZE;
	/* Judged on the header, so that such a frame is never consumed. */
	if (!body_len(buf[6]) || n < body_len(buf[6]))
		return -EPROTO;
	return CONV_HDR_LEN + n;
}

int conv_decode(const uint8_t *buf, size_t len, struct conv_frame *f)
{
	int whole = conv_check_header(buf, len);

	if (whole <= 0 || (size_t)whole > len)
		return -EPROTO;
	const uint8_t *b = buf + CONV_HDR_LEN;
	size_t n = (size_t)whole - CONV_HDR_LEN;

	memset(f, 0, sizeof(*f));
	f->type = buf[6];
	f->version = buf[7];
	if (!body_len(f->type) || n < body_len(f->type))
		return -EPROTO;
	if (f->type != CONV_FIN) {
		f->pdata_len = (uint16_t)(n - body_len(f->type));
		memcpy(f->pdata, b + body_len(f->type), f->pdata_len);
	}
	switch (f->type) {
	case CONV_REQ:
		memcpy(f->nonce, b, CONV_NONCE_LEN);
		f->flags = get32(b + CONV_NONCE_LEN);
		break;
	case CONV_RSP:
		f->status = b[0];
		f->reason = b[1];
		f->port = get16(b + 2);
		memcpy(f->nonce, b + 4, CONV_NONCE_LEN);
		break;
	case CONV_FIN:
		f->status = b[0];
		f->reason = b[1];
		break;
	}
	return 0;
}

/* --- the TCP socket ---------------------------------------------------------------- */

uint64_t conv_now_ns(void)
{
	return mono_ns();
}

uint64_t conv_deadline_in(int ms)
{
	return ms < 0 ? 0 : conv_now_ns() + (uint64_t)ms * 1000000ull;
}

/* Wait for events on fd until the deadline: the events that came (> 0),
 * 0 timed out, or a negative errno.  Signals do not interrupt the
 * handshake. */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = events };
		int ms = -1;

		if (deadline_ns) {
			uint64_t now = conv_now_ns();

			if (now >= deadline_ns)
				return 0;
			ms = (int)((deadline_ns - now + 999999) / 1000000);
		}
		int r = sys.poll(&pf, 1, ms);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			continue;	/* re-checks the deadline */
		return pf.revents;
	}
}

/*
 * Wait until the TCP socket fd holds more than `have` unread bytes, its
 * peer has ended the stream, or the deadline: as wait_fd().  poll() calls
 * a socket readable while one byte is there, and the bytes of a partial
 * frame stay there (they are only peeked at): the wait asks TCP for
 * have + 1 with SO_RCVLOWAT, which its poll honours, and puts the caller's
 * own value back (no other thread uses the socket meanwhile: convert.h).
 */
static int wait_more(int fd, size_t have, uint64_t deadline_ns)
{
	int old, want = (int)have + 1;
	socklen_t l = sizeof(old);

	if (sys.getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, &l))
		return -errno;
	if (old != want && sys.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)))
		return -errno;
	int r = wait_fd(fd, POLLIN | POLLRDHUP, deadline_ns);

	if (old != want)
		(void)sys.setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, sizeof(old));
	return r;
}

int conv_send_bytes(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = sys.send(fd, (const uint8_t *)buf + off, len - off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		int r = wait_fd(fd, POLLOUT, deadline_ns);

		if (r <= 0)
			return r ? r : -ETIMEDOUT;
	}
	return 0;
}

int conv_send(int fd, const struct conv_frame *f, uint64_t deadline_ns)
{
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];

	return conv_send_bytes(fd, buf, conv_encode(buf, f), deadline_ns);
}

int conv_recv(int fd, struct conv_frame *f, uint64_t deadline_ns)
{
	uint8_t buf[CONV_HDR_LEN + CONV_MAX_BODY];
	size_t want;
	bool ended = false;	/* the peer's end of stream came */

	for (;;) {
		/* All there is, up to the largest frame: what follows a frame
		 * is only looked at, and a frame is whole or not at once. */
		ssize_t n = sys.recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			n = 0;
		if (n > 0) {
			int whole = conv_check_header(buf, (size_t)n);

			if (whole < 0)
				return -EPROTO;
			want = (size_t)whole;
			if (whole > 0 && (size_t)n >= want)
				break;
		}
		/* Part of a frame, and no more can come. */
		if (ended)
			return -ECONNRESET;
		int r = wait_more(fd, (size_t)n, deadline_ns);

		if (r <= 0)
			return r ? r : -ETIMEDOUT;
		ended = r & (POLLRDHUP | POLLHUP);
	}
	/* The whole frame is there: take exactly it. */
	size_t got = 0;

	while (got < want) {
		ssize_t n = sys.recv(fd, buf + got, want - got, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		got += (size_t)n;
	}
	return conv_decode(buf, want, f);
}

int conv_check_socket(int fd)
{
	int type = 0, proto = 0;
	socklen_t l = sizeof(type);
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);

	if (sys.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l))
		return -errno;
	l = sizeof(proto);
	if (sys.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l))
		return -errno;
	if (type != SOCK_STREAM || proto != IPPROTO_TCP)
		return -EOPNOTSUPP;
	if (sys.getpeername(fd, (struct sockaddr *)&peer, &pl))
		return -errno;
	if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6)
		return -EOPNOTSUPP;
	return 0;
}
