/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Shared code for sdpcat, sdp_bench and the integration test programs:
 *
 *   - a socket vtable, so one piece of transfer code runs over the SDP
 *     engine (include/sdp.h) or over the kernel's TCP (libc, with errno
 *     turned into the engine's negative-errno convention);
 *   - HOST:PORT parsing (IPv4, [IPv6], names) and size parsing;
 *   - a seeded, position-addressable pseudo-random byte stream and a
 *     streaming 64-bit hash (XXH64), both independent of how the stream
 *     is cut into reads and writes;
 *   - the sdpcat wire protocol (header, verdict) and a "pump" that moves a
 *     generated stream out and/or checks a received one, blocking or with
 *     poll();
 *   - timing helpers.
 *
 * Nothing here exits or prints: every function reports a negative errno
 * and the tools decide what to say.
 */
#ifndef SDP_TOOLS_XFER_H
#define SDP_TOOLS_XFER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* --- socket vtable ---------------------------------------------------- */

struct xsock_ops {
	const char *name;	/* "sdp" or "tcp" */
	int (*socket)(int domain, int type, int protocol);
	int (*bind)(int sd, const struct sockaddr *addr, socklen_t len);
	int (*listen)(int sd, int backlog);
	int (*accept)(int sd, struct sockaddr *addr, socklen_t *len, int flags);
	int (*connect)(int sd, const struct sockaddr *addr, socklen_t len);
	ssize_t (*send)(int sd, const void *buf, size_t len, int flags);
	ssize_t (*recv)(int sd, void *buf, size_t len, int flags);
	int (*shutdown)(int sd, int how);
	int (*close)(int sd);
	int (*getsockname)(int sd, struct sockaddr *addr, socklen_t *len);
	int (*getpeername)(int sd, struct sockaddr *addr, socklen_t *len);
	int (*getsockopt)(int sd, int level, int name, void *val, socklen_t *len);
	int (*setsockopt)(int sd, int level, int name, const void *val, socklen_t len);
	int (*set_nonblock)(int sd, int on);
	/* poll(2) over this API's sockets: count, 0 on timeout, -errno. */
	int (*poll)(struct pollfd *fds, nfds_t nfds, int timeout_ms);
	/* Current poll mask (POLLIN, POLLOUT, POLLRDHUP, POLLHUP, POLLERR). */
	int (*events)(int sd);
	/* Bytes readable now (FIONREAD). */
	int (*nread)(int sd);
	/* What carries a connected socket: "tcp-fallback", "kernel", or
	 * NULL when not connected. */
	const char *(*transport)(int sd);
};

extern const struct xsock_ops xsock_sdp;
extern const struct xsock_ops xsock_tcp;

/* --- addresses and numbers -------------------------------------------- */

/*
 * "HOST:PORT", "[IPV6]:PORT", and for a listener also "PORT" or ":PORT"
 * (any IPv4 address).  HOST may be a name.  Returns 0, -EINVAL for bad
 * syntax, -ENOENT when the name does not resolve.
 */
int xfer_parse_addr(const char *text, bool passive, struct sockaddr_storage *ss,
		    socklen_t *len);
/* "127.0.0.1:5000" / "[::1]:5000" into buf. */
void xfer_format_addr(const struct sockaddr *sa, char *buf, size_t cap);
int xfer_addr_port(const struct sockaddr *sa);
void xfer_set_port(struct sockaddr *sa, int port);

/* Decimal with an optional binary suffix: K, M, G, T (KiB...). */
int xfer_parse_size(const char *text, uint64_t *out);
/* "N" or "MIN-MAX" with the suffixes above; 1 <= MIN <= MAX <= limit. */
int xfer_parse_range(const char *text, size_t limit, size_t *min, size_t *max);

/* --- timing --------------------------------------------------------------- */

uint64_t xfer_now_ns(void);
double xfer_gbit_s(uint64_t bytes, uint64_t ns);

/* --- data: generator, hash, sizes ---------------------------------------- */

/*
 * The seeded stream: byte i is a pure function of (seed, i), so a reader
 * can check any chunk without having seen the ones before it.
 */
struct xgen {
	uint64_t key;
	uint64_t off;		/* position of the next byte */
};
void xgen_init(struct xgen *g, uint64_t seed);
void xgen_fill(struct xgen *g, void *buf, size_t len);
/* Compares buf with the next len bytes of the stream and advances past
 * them.  Returns the index of the first differing byte, or len. */
size_t xgen_check(struct xgen *g, const void *buf, size_t len);

/* XXH64 over everything given to update(), in order. */
struct xhash {
	uint64_t total;
	uint64_t v[4];
	uint8_t mem[32];
	uint32_t memsize;
};
void xhash_init(struct xhash *h);
void xhash_update(struct xhash *h, const void *buf, size_t len);
uint64_t xhash_digest(const struct xhash *h);
/* One-shot, for self-tests. */
uint64_t xhash_buf(const void *buf, size_t len);

/* A small seeded PRNG for write/read sizes (not the data). */
uint64_t xrand_next(uint64_t *state);
size_t xrand_range(uint64_t *state, size_t min, size_t max);

/* --- blocking-or-polled I/O helpers -------------------------------------- */

/*
 * Wait until sd reports one of events (or POLLERR/POLLHUP).  Returns the
 * revents, 0 on timeout, or -errno; -EINTR is retried.
 */
int xfer_wait(const struct xsock_ops *o, int sd, short events, int timeout_ms);
/*
 * Send all of buf (MSG_NOSIGNAL), retrying partial writes, -EINTR and,
 * on a non-blocking socket, -EAGAIN after waiting.  Returns len or -errno
 * (-ETIMEDOUT when timeout_ms, if >= 0, passes without progress).
 */
ssize_t xfer_send_all(const struct xsock_ops *o, int sd, const void *buf, size_t len,
		      int timeout_ms);
/* Receive until len bytes or EOF: returns the count (< len means EOF) or
 * -errno, as above. */
ssize_t xfer_recv_all(const struct xsock_ops *o, int sd, void *buf, size_t len,
		      int timeout_ms);
/* Non-blocking-aware connect: -EINPROGRESS is waited out and SO_ERROR
 * read. */
int xfer_connect(const struct xsock_ops *o, int sd, const struct sockaddr *sa,
		 socklen_t len, int timeout_ms);

/* --- listening and connecting -------------------------------------------- */

/*
 * A listening socket: o->socket() of sa's family, type SOCK_STREAM | flags,
 * with SO_REUSEADDR first when reuse, bound to sa (port 0: one the system
 * picks) and listening with backlog.  sa (len bytes) then holds the
 * address bound, the picked port with it.  Returns the socket, or -errno
 * with *step (if step is not NULL) naming the call that failed: "socket",
 * "bind", "listen" or "getsockname".
 */
int xfer_listen(const struct xsock_ops *o, struct sockaddr *sa, socklen_t len, int flags,
		int backlog, bool reuse, const char **step);
/*
 * A stream socket of o's, connected to sa with xfer_connect() (timeout_ms
 * -1: none).  Returns the socket, or -errno with *step (if not NULL)
 * naming the call that failed, "socket" or "connect".
 */
int xfer_dial(const struct xsock_ops *o, const struct sockaddr *sa, socklen_t len,
	      int timeout_ms, const char **step);

/* --- the sdpcat protocol ------------------------------------------------- */

/*
 * Client to server, 16 bytes, big-endian:
 *   u32 magic (XFER_MAGIC_ONEWAY or XFER_MAGIC_BIDIR), u32 seed, u64 bytes
 * then `bytes` bytes of the stream xgen(seed), then the client shuts down
 * writing.  With BIDIR the server also sends `bytes` bytes of
 * xgen(xfer_reply_seed(seed)) at the same time.  When the server has
 * read EOF (and sent its own stream) it sends the 16-byte verdict:
 *   u64 bytes received, u64 XXH64 of the bytes received
 * and shuts down writing.
 */
#define XFER_MAGIC_ONEWAY 0x53445031u	/* "SDP1" */
#define XFER_MAGIC_BIDIR 0x53445032u	/* "SDP2" */
#define XFER_HDR_LEN 16
#define XFER_VERDICT_LEN 16

struct xfer_hdr {
	uint32_t magic;
	uint32_t seed;
	uint64_t bytes;
};
void xfer_hdr_encode(uint8_t out[XFER_HDR_LEN], const struct xfer_hdr *h);
void xfer_hdr_decode(const uint8_t in[XFER_HDR_LEN], struct xfer_hdr *h);
void xfer_verdict_encode(uint8_t out[XFER_VERDICT_LEN], uint64_t bytes, uint64_t hash);
void xfer_verdict_decode(const uint8_t in[XFER_VERDICT_LEN], uint64_t *bytes,
			 uint64_t *hash);
/* Seed of the server's stream in a bidirectional transfer. */
uint32_t xfer_reply_seed(uint32_t seed);
/* Seed of the size PRNG of each end, derived so runs are reproducible. */
uint64_t xfer_size_seed(uint32_t seed, int which);

/*
 * The pump: sends tx_total bytes of a generated stream in random sizes
 * and/or receives a stream, hashing it and checking it against a
 * generator, until both directions are done.
 *
 * Set up with xfer_pump_init(), enable one or both directions, run.  With
 * both directions, or with nonblock, the socket must be non-blocking and
 * the pump waits with ops->poll(); otherwise the socket must be blocking
 * and the pump uses blocking calls, where -EAGAIN can only mean that
 * SO_RCVTIMEO / SO_SNDTIMEO ran out: that ends the run with -ETIMEDOUT.
 */
#define XFER_UNLIMITED UINT64_MAX

struct xfer_pump {
	const struct xsock_ops *ops;
	int sd;
	bool nonblock;
	int idle_timeout_ms;	/* -1: none; else -ETIMEDOUT after this long
				 * without progress (polled mode only) */

	/* sending */
	bool tx_on;
	bool tx_shutdown;	/* shutdown(SHUT_WR) once all is sent */
	uint64_t tx_total, tx_done;
	size_t wmin, wmax;
	uint64_t tx_rng;
	struct xgen tx_gen;
	struct xhash tx_hash;
	uint8_t *tx_buf;	/* wmax bytes */
	size_t tx_len, tx_off;	/* generated but unsent: tx_buf[tx_off..tx_len) */

	/* receiving */
	bool rx_on;
	bool rx_check;		/* compare with rx_gen */
	uint64_t rx_limit;	/* stop after this many, or XFER_UNLIMITED: EOF */
	uint64_t rx_done;
	size_t rmin, rmax;
	uint64_t rx_rng;
	struct xgen rx_gen;
	struct xhash rx_hash;
	uint8_t *rx_buf;	/* rmax bytes */
	bool rx_eof;
	uint64_t rx_bad_off;	/* first mismatching byte, or XFER_UNLIMITED */

	/* the failing step, for messages: "send", "recv", "poll", ... */
	const char *err_op;
};

void xfer_pump_init(struct xfer_pump *p, const struct xsock_ops *ops, int sd);
int xfer_pump_tx(struct xfer_pump *p, uint64_t total, uint32_t seed, size_t wmin,
		 size_t wmax, uint64_t size_seed, bool shutdown_after);
/* rx_limit XFER_UNLIMITED reads to EOF; check compares with xgen(seed). */
int xfer_pump_rx(struct xfer_pump *p, uint64_t limit, bool check, uint32_t seed,
		 size_t rmin, size_t rmax, uint64_t size_seed);
/* 0 when every enabled direction finished (rx: limit reached or EOF), or
 * -errno with p->err_op naming the step. */
int xfer_pump_run(struct xfer_pump *p);
void xfer_pump_free(struct xfer_pump *p);

#endif /* SDP_TOOLS_XFER_H */
