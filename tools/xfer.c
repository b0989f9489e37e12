/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Shared code for the tools and the integration test programs; see
 * xfer.h.  Library-like: never prints, never exits.
 */
#include "xfer.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "sdp.h"

/* --- the kernel TCP side of the vtable ------------------------------------ */

/* libc reports through errno; the engine's convention is a negative
 * return, so the two vtables are interchangeable. */
#define NEG(expr) ((expr) < 0 ? -errno : 0)

static int tcp_socket(int domain, int type, int protocol)
{
	int fd = socket(domain, type, protocol);

	return fd < 0 ? -errno : fd;
}

static int tcp_bind(int sd, const struct sockaddr *addr, socklen_t len)
{
	return NEG(bind(sd, addr, len));
}

static int tcp_listen(int sd, int backlog)
{
	return NEG(listen(sd, backlog));
}

static int tcp_accept(int sd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int fd = accept4(sd, addr, len, flags);

	return fd < 0 ? -errno : fd;
}

static int tcp_connect(int sd, const struct sockaddr *addr, socklen_t len)
{
	return NEG(connect(sd, addr, len));
}

static ssize_t tcp_send(int sd, const void *buf, size_t len, int flags)
{
	ssize_t n = send(sd, buf, len, flags);

	return n < 0 ? -errno : n;
}

static ssize_t tcp_recv(int sd, void *buf, size_t len, int flags)
{
	ssize_t n = recv(sd, buf, len, flags);

	return n < 0 ? -errno : n;
}

static int tcp_shutdown(int sd, int how)
{
	return NEG(shutdown(sd, how));
}

static int tcp_close(int sd)
{
	return NEG(close(sd));
}

static int tcp_getsockname(int sd, struct sockaddr *addr, socklen_t *len)
{
	return NEG(getsockname(sd, addr, len));
}

static int tcp_getpeername(int sd, struct sockaddr *addr, socklen_t *len)
{
	return NEG(getpeername(sd, addr, len));
}

static int tcp_getsockopt(int sd, int level, int name, void *val, socklen_t *len)
{
	return NEG(getsockopt(sd, level, name, val, len));
}

static int tcp_setsockopt(int sd, int level, int name, const void *val, socklen_t len)
{
	return NEG(setsockopt(sd, level, name, val, len));
}

static int tcp_set_nonblock(int sd, int on)
{
	int fl = fcntl(sd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	return NEG(fcntl(sd, F_SETFL, fl));
}

static int tcp_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms)
{
	int n = poll(fds, nfds, timeout_ms);

	return n < 0 ? -errno : n;
}

static int tcp_events(int sd)
{
	struct pollfd p = { .fd = sd, .events = POLLIN | POLLOUT | POLLRDHUP | POLLPRI };
	int n = poll(&p, 1, 0);

	if (n < 0)
		return -errno;
	if (p.revents & POLLNVAL)
		return -EBADF;
	return p.revents;
}

static int tcp_nread(int sd)
{
	int n;

	if (ioctl(sd, FIONREAD, &n) < 0)
		return -errno;
	return n;
}

static const char *tcp_transport(int sd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return getpeername(sd, (struct sockaddr *)&ss, &len) == 0 ? "kernel" : NULL;
}

const struct xsock_ops xsock_tcp = {
	.name = "tcp",
	.socket = tcp_socket,
	.bind = tcp_bind,
	.listen = tcp_listen,
	.accept = tcp_accept,
	.connect = tcp_connect,
	.send = tcp_send,
	.recv = tcp_recv,
	.shutdown = tcp_shutdown,
	.close = tcp_close,
	.getsockname = tcp_getsockname,
	.getpeername = tcp_getpeername,
	.getsockopt = tcp_getsockopt,
	.setsockopt = tcp_setsockopt,
	.set_nonblock = tcp_set_nonblock,
	.poll = tcp_poll,
	.events = tcp_events,
	.nread = tcp_nread,
	.transport = tcp_transport,
};

/* --- the SDP side: the engine already speaks negative errno ------------ */

const struct xsock_ops xsock_sdp = {
	.name = "sdp",
	.socket = sdp_socket,
	.bind = sdp_bind,
	.listen = sdp_listen,
	.accept = sdp_accept,
	.connect = sdp_connect,
	.send = sdp_send,
	.recv = sdp_recv,
	.shutdown = sdp_shutdown,
	.close = sdp_close,
	.getsockname = sdp_getsockname,
	.getpeername = sdp_getpeername,
	.getsockopt = sdp_getsockopt,
	.setsockopt = sdp_setsockopt,
	.set_nonblock = sdp_set_nonblock,
	.poll = sdp_poll,
	.events = sdp_events,
	.nread = sdp_nread,
	.transport = sdp_transport_name,
};

/* --- addresses ------------------------------------------------------------- */

static int parse_port(const char *s, int *port)
{
	char *end;
	long v;

	if (!*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 65535)
		return -EINVAL;
	*port = (int)v;
	return 0;
}

int xfer_parse_addr(const char *text, bool passive, struct sockaddr_storage *ss,
		    socklen_t *len)
{
	char host[256];
	const char *port_s;
	int port, ret;

	memset(ss, 0, sizeof(*ss));
	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, text + 1, (size_t)(close - text - 1));
		host[close - text - 1] = '\0';
		port_s = close + 2;
	} else {
		const char *colon = strrchr(text, ':');

		if (!colon) {
			/* A bare port only makes sense for a listener. */
			if (!passive)
				return -EINVAL;
			host[0] = '\0';
			port_s = text;
		} else {
			if ((size_t)(colon - text) >= sizeof(host) ||
			    memchr(text, ':', (size_t)(colon - text)))
				return -EINVAL;	/* IPv6 needs brackets */
			memcpy(host, text, (size_t)(colon - text));
			host[colon - text] = '\0';
			port_s = colon + 1;
		}
	}
	ret = parse_port(port_s, &port);
	if (ret)
		return ret;

	if (!host[0]) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (!passive)
			return -EINVAL;
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_ANY);
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof(*sin);
		return 0;
	}

	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*sin6);
		return 0;
	}

	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;

	if (getaddrinfo(host, NULL, &hints, &ai) || !ai)
		return -ENOENT;
	if (ai->ai_addrlen > sizeof(*ss)) {
		freeaddrinfo(ai);
		return -EINVAL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	xfer_set_port((struct sockaddr *)ss, port);
	return 0;
}

void xfer_format_addr(const struct sockaddr *sa, char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		snprintf(buf, cap, "%s:%u", host, ntohs(sin->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		snprintf(buf, cap, "[%s]:%u", host, ntohs(sin6->sin6_port));
	} else {
		snprintf(buf, cap, "(family %d)", sa->sa_family);
	}
}

int xfer_addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return -1;
}

void xfer_set_port(struct sockaddr *sa, int port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}

int xfer_parse_size(const char *text, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!text || !*text || *text == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K':
		shift = 10;
		break;
	case 'm': case 'M':
		shift = 20;
		break;
	case 'g': case 'G':
		shift = 30;
		break;
	case 't': case 'T':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (*end && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B"))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

int xfer_parse_range(const char *text, size_t limit, size_t *min, size_t *max)
{
	char buf[64];
	const char *dash = strchr(text, '-');
	uint64_t lo, hi;
	int ret;

	if (strlen(text) >= sizeof(buf))
		return -EINVAL;
	if (dash) {
		memcpy(buf, text, (size_t)(dash - text));
		buf[dash - text] = '\0';
		ret = xfer_parse_size(buf, &lo);
		if (!ret)
			ret = xfer_parse_size(dash + 1, &hi);
	} else {
		ret = xfer_parse_size(text, &lo);
		hi = lo;
	}
	if (ret)
		return ret;
	if (lo < 1 || lo > hi || hi > limit)
		return -ERANGE;
	*min = (size_t)lo;
	*max = (size_t)hi;
	return 0;
}

/* --- timing ---------------------------------------------------------------- */

uint64_t xfer_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double xfer_gbit_s(uint64_t bytes, uint64_t ns)
{
	if (!ns)
		ns = 1;
	return (double)bytes * 8.0 / (double)ns;
}

/* --- generator ------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective mix, so word k of the stream is a
 * pure function of (key, k) and any chunk can be made on its own. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline uint64_t xgen_word(uint64_t key, uint64_t k)
{
	return mix64(key + (k + 1) * 0x9E3779B97F4A7C15ull);
}

static inline uint8_t xgen_byte(uint64_t key, uint64_t off)
{
	return (uint8_t)(xgen_word(key, off >> 3) >> (8 * (off & 7)));
}

void xgen_init(struct xgen *g, uint64_t seed)
{
	g->key = mix64(seed ^ 0x6A09E667F3BCC909ull);
	g->off = 0;
}

void xgen_fill(struct xgen *g, void *buf, size_t len)
{
	uint8_t *p = buf;
	uint64_t off = g->off;

	while (len && (off & 7)) {
		*p++ = xgen_byte(g->key, off++);
		len--;
	}
	for (uint64_t k = off >> 3; len >= 8; k++) {
		/* Little-endian bytes whatever the host, so both ends agree. */
		uint64_t w = htole64(xgen_word(g->key, k));

		memcpy(p, &w, 8);
		p += 8;
		off += 8;
		len -= 8;
	}
	while (len) {
		*p++ = xgen_byte(g->key, off++);
		len--;
	}
	g->off = off;
}

size_t xgen_check(struct xgen *g, const void *buf, size_t len)
{
	uint8_t ref[4096];
	const uint8_t *p = buf;
	size_t done = 0, bad = len;

	while (done < len) {
		size_t n = len - done < sizeof(ref) ? len - done : sizeof(ref);

		xgen_fill(g, ref, n);
		if (bad == len && memcmp(ref, p + done, n)) {
			for (size_t i = 0; i < n; i++) {
				if (ref[i] != p[done + i]) {
					bad = done + i;
					break;
				}
			}
		}
		done += n;
	}
	return bad;
}

/* --- XXH64 ----------------------------------------------------------------- */

#define P64_1 0x9E3779B185EBCA87ull
#define P64_2 0xC2B2AE3D27D4EB4Full
#define P64_3 0x165667B19E3779F9ull
#define P64_4 0x85EBCA77C2B2AE63ull
#define P64_5 0x27D4EB2F165667C5ull

static inline uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t in)
{
	acc += in * P64_2;
	acc = rotl64(acc, 31);
	return acc * P64_1;
}

static inline uint64_t xxh_merge(uint64_t acc, uint64_t v)
{
	acc ^= xxh_round(0, v);
	return acc * P64_1 + P64_4;
}

void xhash_init(struct xhash *h)
{
	memset(h, 0, sizeof(*h));
	h->v[0] = P64_1 + P64_2;
	h->v[1] = P64_2;
	h->v[2] = 0;
	h->v[3] = -P64_1;
}

static inline void xxh_stripe(uint64_t v[4], const uint8_t *p)
{
	v[0] = xxh_round(v[0], rd64(p));
	v[1] = xxh_round(v[1], rd64(p + 8));
	v[2] = xxh_round(v[2], rd64(p + 16));
	v[3] = xxh_round(v[3], rd64(p + 24));
}

void xhash_update(struct xhash *h, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	h->total += len;
	if (h->memsize + len < 32) {
		memcpy(h->mem + h->memsize, p, len);
		h->memsize += (uint32_t)len;
		return;
	}
	if (h->memsize) {
		size_t fill = 32 - h->memsize;

		memcpy(h->mem + h->memsize, p, fill);
		xxh_stripe(h->v, h->mem);
		p += fill;
		len -= fill;
		h->memsize = 0;
	}
	while (len >= 32) {
		xxh_stripe(h->v, p);
		p += 32;
		len -= 32;
	}
	memcpy(h->mem, p, len);
	h->memsize = (uint32_t)len;
}

uint64_t xhash_digest(const struct xhash *h)
{
	uint64_t acc;
	const uint8_t *p = h->mem;
	size_t len = h->memsize;

	if (h->total >= 32) {
		acc = rotl64(h->v[0], 1) + rotl64(h->v[1], 7) + rotl64(h->v[2], 12) +
		      rotl64(h->v[3], 18);
		for (int i = 0; i < 4; i++)
			acc = xxh_merge(acc, h->v[i]);
	} else {
		acc = h->v[2] + P64_5;	/* v[2] holds the seed (0) */
	}
	acc += h->total;
	while (len >= 8) {
		acc ^= xxh_round(0, rd64(p));
		acc = rotl64(acc, 27) * P64_1 + P64_4;
		p += 8;
		len -= 8;
	}
	if (len >= 4) {
		acc ^= (uint64_t)rd32(p) * P64_1;
		acc = rotl64(acc, 23) * P64_2 + P64_3;
		p += 4;
		len -= 4;
	}
	while (len--) {
		acc ^= (*p++) * P64_5;
		acc = rotl64(acc, 11) * P64_1;
	}
	acc ^= acc >> 33;
	acc *= P64_2;
	acc ^= acc >> 29;
	acc *= P64_3;
	acc ^= acc >> 32;
	return acc;
}

uint64_t xhash_buf(const void *buf, size_t len)
{
	struct xhash h;

	xhash_init(&h);
	xhash_update(&h, buf, len);
	return xhash_digest(&h);
}

/* --- size PRNG ------------------------------------------------------------- */

uint64_t xrand_next(uint64_t *state)
{
	/* splitmix64: any seed, including 0, gives a good sequence. */
	*state += 0x9E3779B97F4A7C15ull;
	return mix64(*state);
}

size_t xrand_range(uint64_t *state, size_t min, size_t max)
{
	if (max <= min)
		return min;
	return min + (size_t)(xrand_next(state) % ((uint64_t)(max - min) + 1));
}

/* --- I/O helpers ----------------------------------------------------------- */

int xfer_wait(const struct xsock_ops *o, int sd, short events, int timeout_ms)
{
	uint64_t deadline = timeout_ms >= 0 ?
		xfer_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;

	for (;;) {
		struct pollfd p = { .fd = sd, .events = events };
		int left = -1;

		if (timeout_ms >= 0) {
			uint64_t now = xfer_now_ns();

			left = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		}
		int n = o->poll(&p, 1, left);

		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		if (n == 0)
			return 0;
		if (p.revents & POLLNVAL)
			return -EBADF;
		return p.revents;
	}
}

ssize_t xfer_send_all(const struct xsock_ops *o, int sd, const void *buf, size_t len,
		      int timeout_ms)
{
	const uint8_t *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = o->send(sd, p + done, len - done, MSG_NOSIGNAL);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK) {
			int r = xfer_wait(o, sd, POLLOUT, timeout_ms);

			if (r < 0)
				return r;
			if (r == 0)
				return -ETIMEDOUT;
			continue;
		}
		/* send() never returns 0 for len > 0; treat it as an error
		 * rather than spin. */
		return n < 0 ? n : -EIO;
	}
	return (ssize_t)done;
}

ssize_t xfer_recv_all(const struct xsock_ops *o, int sd, void *buf, size_t len,
		      int timeout_ms)
{
	uint8_t *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = o->recv(sd, p + done, len - done, 0);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			break;
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK) {
			int r = xfer_wait(o, sd, POLLIN, timeout_ms);

			if (r < 0)
				return r;
			if (r == 0)
				return -ETIMEDOUT;
			continue;
		}
		return n;
	}
	return (ssize_t)done;
}

int xfer_connect(const struct xsock_ops *o, int sd, const struct sockaddr *sa,
		 socklen_t len, int timeout_ms)
{
	int ret = o->connect(sd, sa, len);
	int err = 0;
	socklen_t elen = sizeof(err);

	if (ret == 0)
		return 0;
	/* An interrupted blocking connect goes on in the background, as a
	 * non-blocking one does: both end in writable + SO_ERROR. */
	if (ret != -EINPROGRESS && ret != -EINTR)
		return ret;
	ret = xfer_wait(o, sd, POLLOUT, timeout_ms);
	if (ret < 0)
		return ret;
	if (ret == 0)
		return -ETIMEDOUT;
	ret = o->getsockopt(sd, SOL_SOCKET, SO_ERROR, &err, &elen);
	if (ret < 0)
		return ret;
	return -err;
}

/* --- listening and connecting ---------------------------------------------- */

/* err, from the call named what, which *step (if step) tells the caller. */
static int failed_at(int err, const char *what, const char **step)
{
	if (step)
		*step = what;
	return err;
}

int xfer_listen(const struct xsock_ops *o, struct sockaddr *sa, socklen_t len, int flags,
		int backlog, bool reuse, const char **step)
{
	int ls = o->socket(sa->sa_family, SOCK_STREAM | flags, 0), one = 1, ret;
	const char *what = "bind";

	if (ls < 0)
		return failed_at(ls, "socket", step);
	if (reuse)
		(void)o->setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ret = o->bind(ls, sa, len);
	if (!ret) {
		what = "listen";
		ret = o->listen(ls, backlog);
	}
	if (!ret) {
		what = "getsockname";
		ret = o->getsockname(ls, sa, &len);
	}
	if (ret) {
		o->close(ls);
		return failed_at(ret, what, step);
	}
	return ls;
}

int xfer_dial(const struct xsock_ops *o, const struct sockaddr *sa, socklen_t len,
	      int timeout_ms, const char **step)
{
	int sd = o->socket(sa->sa_family, SOCK_STREAM, 0), ret;

	if (sd < 0)
		return failed_at(sd, "socket", step);
	ret = xfer_connect(o, sd, sa, len, timeout_ms);
	if (ret) {
		o->close(sd);
		return failed_at(ret, "connect", step);
	}
	return sd;
}

/* --- protocol -------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

void xfer_hdr_encode(uint8_t out[XFER_HDR_LEN], const struct xfer_hdr *h)
{
	put32(out, h->magic);
	put32(out + 4, h->seed);
	put64(out + 8, h->bytes);
}

void xfer_hdr_decode(const uint8_t in[XFER_HDR_LEN], struct xfer_hdr *h)
{
	h->magic = get32(in);
	h->seed = get32(in + 4);
	h->bytes = get64(in + 8);
}

void xfer_verdict_encode(uint8_t out[XFER_VERDICT_LEN], uint64_t bytes, uint64_t hash)
{
	put64(out, bytes);
	put64(out + 8, hash);
}

void xfer_verdict_decode(const uint8_t in[XFER_VERDICT_LEN], uint64_t *bytes,
			 uint64_t *hash)
{
	*bytes = get64(in);
	*hash = get64(in + 8);
}

uint32_t xfer_reply_seed(uint32_t seed)
{
	return (uint32_t)mix64((uint64_t)seed ^ 0xB7E151628AED2A6Bull);
}

uint64_t xfer_size_seed(uint32_t seed, int which)
{
	return mix64(((uint64_t)seed << 8) ^ (uint64_t)which ^ 0x243F6A8885A308D3ull);
}

/* --- the pump -------------------------------------------------------------- */

void xfer_pump_init(struct xfer_pump *p, const struct xsock_ops *ops, int sd)
{
	memset(p, 0, sizeof(*p));
	p->ops = ops;
	p->sd = sd;
	p->idle_timeout_ms = -1;
	p->rx_bad_off = XFER_UNLIMITED;
	xhash_init(&p->tx_hash);
	xhash_init(&p->rx_hash);
}

int xfer_pump_tx(struct xfer_pump *p, uint64_t total, uint32_t seed, size_t wmin,
		 size_t wmax, uint64_t size_seed, bool shutdown_after)
{
	p->tx_buf = malloc(wmax);
	if (!p->tx_buf)
		return -ENOMEM;
	p->tx_on = true;
	p->tx_total = total;
	p->tx_shutdown = shutdown_after;
	p->wmin = wmin;
	p->wmax = wmax;
	p->tx_rng = size_seed;
	xgen_init(&p->tx_gen, seed);
	return 0;
}

int xfer_pump_rx(struct xfer_pump *p, uint64_t limit, bool check, uint32_t seed,
		 size_t rmin, size_t rmax, uint64_t size_seed)
{
	p->rx_buf = malloc(rmax);
	if (!p->rx_buf)
		return -ENOMEM;
	p->rx_on = true;
	p->rx_check = check;
	p->rx_limit = limit;
	p->rmin = rmin;
	p->rmax = rmax;
	p->rx_rng = size_seed;
	xgen_init(&p->rx_gen, seed);
	return 0;
}

void xfer_pump_free(struct xfer_pump *p)
{
	free(p->tx_buf);
	free(p->rx_buf);
	p->tx_buf = NULL;
	p->rx_buf = NULL;
}

static bool tx_finished(const struct xfer_pump *p)
{
	return !p->tx_on || p->tx_done == p->tx_total;
}

static bool rx_finished(const struct xfer_pump *p)
{
	return !p->rx_on || p->rx_eof || p->rx_done == p->rx_limit;
}

/* One send.  1 = progress, 0 = would block, < 0 = error. */
static int pump_tx_step(struct xfer_pump *p)
{
	if (p->tx_off == p->tx_len) {
		uint64_t left = p->tx_total - p->tx_done;
		size_t n = xrand_range(&p->tx_rng, p->wmin, p->wmax);

		if (n > left)
			n = (size_t)left;
		xgen_fill(&p->tx_gen, p->tx_buf, n);
		p->tx_off = 0;
		p->tx_len = n;
	}
	for (;;) {
		ssize_t n = p->ops->send(p->sd, p->tx_buf + p->tx_off,
					 p->tx_len - p->tx_off, MSG_NOSIGNAL);

		if (n > 0) {
			xhash_update(&p->tx_hash, p->tx_buf + p->tx_off, (size_t)n);
			p->tx_off += (size_t)n;
			p->tx_done += (uint64_t)n;
			break;
		}
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return 0;
		p->err_op = "send";
		return n < 0 ? (int)n : -EIO;
	}
	if (p->tx_done == p->tx_total && p->tx_shutdown) {
		int ret = p->ops->shutdown(p->sd, SHUT_WR);

		if (ret < 0) {
			p->err_op = "shutdown";
			return ret;
		}
	}
	return 1;
}

static int pump_rx_step(struct xfer_pump *p)
{
	size_t want = xrand_range(&p->rx_rng, p->rmin, p->rmax);

	if (p->rx_limit != XFER_UNLIMITED && want > p->rx_limit - p->rx_done)
		want = (size_t)(p->rx_limit - p->rx_done);
	for (;;) {
		ssize_t n = p->ops->recv(p->sd, p->rx_buf, want, 0);

		if (n > 0) {
			if (p->rx_check) {
				size_t bad = xgen_check(&p->rx_gen, p->rx_buf, (size_t)n);

				if (bad < (size_t)n && p->rx_bad_off == XFER_UNLIMITED)
					p->rx_bad_off = p->rx_done + bad;
			}
			xhash_update(&p->rx_hash, p->rx_buf, (size_t)n);
			p->rx_done += (uint64_t)n;
			return 1;
		}
		if (n == 0) {
			p->rx_eof = true;
			return 1;
		}
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return 0;
		p->err_op = "recv";
		return (int)n;
	}
}

int xfer_pump_run(struct xfer_pump *p)
{
	uint64_t last = xfer_now_ns();
	int ret;

	/* A zero-byte send still owes the peer its shutdown. */
	if (p->tx_on && p->tx_total == 0 && p->tx_shutdown) {
		ret = p->ops->shutdown(p->sd, SHUT_WR);
		if (ret < 0) {
			p->err_op = "shutdown";
			return ret;
		}
	}
	if (!p->nonblock) {
		if (p->tx_on && p->rx_on) {
			p->err_op = "pump (both directions need non-blocking)";
			return -EINVAL;
		}
		while (!tx_finished(p)) {
			ret = pump_tx_step(p);
			if (ret < 0)
				return ret;
			if (ret == 0) {
				/* EAGAIN on a blocking socket: SO_SNDTIMEO ran out. */
				p->err_op = "send (SO_SNDTIMEO)";
				return -ETIMEDOUT;
			}
		}
		while (!rx_finished(p)) {
			ret = pump_rx_step(p);
			if (ret < 0)
				return ret;
			if (ret == 0) {
				/* EAGAIN on a blocking socket: SO_RCVTIMEO ran out. */
				p->err_op = "recv (SO_RCVTIMEO)";
				return -ETIMEDOUT;
			}
		}
		return 0;
	}

	while (!tx_finished(p) || !rx_finished(p)) {
		bool progress = false;

		/* Bounded bursts per direction so neither starves the other:
		 * a bidirectional transfer deadlocks if one side only writes. */
		for (int i = 0; i < 16 && !rx_finished(p); i++) {
			ret = pump_rx_step(p);
			if (ret < 0)
				return ret;
			if (ret == 0)
				break;
			progress = true;
		}
		for (int i = 0; i < 16 && !tx_finished(p); i++) {
			ret = pump_tx_step(p);
			if (ret < 0)
				return ret;
			if (ret == 0)
				break;
			progress = true;
		}
		if (progress) {
			last = xfer_now_ns();
			continue;
		}

		struct pollfd pfd = { .fd = p->sd };
		int timeout = -1;

		if (!tx_finished(p))
			pfd.events |= POLLOUT;
		if (!rx_finished(p))
			pfd.events |= POLLIN;
		if (p->idle_timeout_ms >= 0) {
			uint64_t idle = (xfer_now_ns() - last) / 1000000ull;

			if (idle >= (uint64_t)p->idle_timeout_ms) {
				p->err_op = "poll (no progress)";
				return -ETIMEDOUT;
			}
			timeout = p->idle_timeout_ms - (int)idle;
		}
		ret = p->ops->poll(&pfd, 1, timeout);
		if (ret < 0 && ret != -EINTR) {
			p->err_op = "poll";
			return ret;
		}
		if (ret > 0 && (pfd.revents & POLLNVAL)) {
			p->err_op = "poll";
			return -EBADF;
		}
		/* Errors and hang-ups surface from the next send/recv. */
	}
	return 0;
}
