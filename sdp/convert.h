/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The conversion handshake: the frames two libsdp processes exchange over
 * a connected TCP socket to agree on moving that connection to RDMA.
 * sdp/convert.c runs it for sdp_convert_connect()/sdp_convert_accept();
 * the frames and the step functions are here so that another consumer of
 * the handshake (the DAT SSP provider) runs the very same one.
 *
 * Every frame is a 12-byte header, then a body:
 *
 *   0  magic   6 bytes  00 'S' 'D' 'P' 'C' 'V'
 *   6  type    u8       CONV_REQ, CONV_RSP or CONV_FIN
 *   7  version u8       CONV_VERSION
 *   8  length  u16      of the body, big-endian, at most CONV_MAX_BODY
 *  10  zero    u16
 *
 *   CONV_REQ  nonce[16], flags u32 (0), then private data
 *   CONV_RSP  status u8, reason u8, port u16, nonce[16] (the request's),
 *             then private data
 *   CONV_FIN  status u8, reason u8, zero u16
 *
 * The private data is the rest of the body (up to CONV_MAX_PDATA bytes):
 * what a consumer hands the peer with its request or its answer, as DAT
 * connection requests carry it.  sdp_convert_*() send none.  A FIN body
 * longer than this version's is read and the rest ignored.
 */
#ifndef LIBSDP_SDP_CONVERT_H
#define LIBSDP_SDP_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#define CONV_MAGIC "\0SDPCV"
#define CONV_MAGIC_LEN 6
#define CONV_HDR_LEN 12
#define CONV_MAX_BODY 256
#define CONV_VERSION 1
#define CONV_NONCE_LEN 16
#define CONV_MAX_PDATA (CONV_MAX_BODY - CONV_NONCE_LEN - 4)

enum conv_type {
	CONV_REQ = 1,
	CONV_RSP = 2,
	CONV_FIN = 3,
};

enum conv_status {
	CONV_OK = 0,		/* RSP: accepted; FIN: converted */
	CONV_FAILED = 1,	/* RSP: refused; FIN: not converted */
};

/* Why a side refused or failed; carried for the peer's error message. */
enum conv_reason {
	CONV_R_NONE = 0,
	CONV_R_NO_TRANSPORT = 1,	/* no SDP listener could be made here */
	CONV_R_VERSION = 2,		/* the request's version is not ours */
	CONV_R_REFUSED = 3,		/* the consumer said no */
	CONV_R_TIMEOUT = 4,		/* a side gave up waiting */
	CONV_R_CONNECT = 5,		/* the SDP connection failed */
	CONV_R_SHUTDOWN = 6,		/* the consumer gave the request up */
};

struct conv_frame {
	uint8_t type;
	uint8_t version;
	uint8_t status;
	uint8_t reason;
	uint16_t port;		/* RSP: the SDP listener's port, host order */
	uint32_t flags;		/* REQ */
	uint8_t nonce[CONV_NONCE_LEN];
	uint16_t pdata_len;	/* REQ, RSP */
	uint8_t pdata[CONV_MAX_PDATA];
};

/* The frame's bytes into buf (room >= CONV_HDR_LEN + CONV_MAX_BODY):
 * their count.  f->pdata_len must be <= CONV_MAX_PDATA. */
size_t conv_encode(uint8_t *buf, const struct conv_frame *f);

/*
 * The first len bytes of a stream, taken as a frame.  Returns the frame's
 * whole length once its header is complete (the body follows, length -
 * CONV_HDR_LEN bytes), 0 if these bytes could still begin a frame but the
 * header is incomplete, -EPROTO if they are not a frame of ours (stream
 * data, or a header of an unknown type or with a body too short for its
 * type: not to be consumed) or -EMSGSIZE if the header announces a body
 * over CONV_MAX_BODY.
 */
int conv_check_header(const uint8_t *buf, size_t len);

/* A whole frame (as counted by conv_check_header()) into *f: 0, or
 * -EPROTO for an unknown type or a body too short for its type.  A
 * version other than ours is not an error here: f->version says it. */
int conv_decode(const uint8_t *buf, size_t len, struct conv_frame *f);

/* Monotonic clock, ns; deadline 0 = none. */
uint64_t conv_now_ns(void);
/* The deadline timeout_ms from now; 0 (none) for a negative timeout. */
uint64_t conv_deadline_in(int timeout_ms);

/* All of buf onto the TCP socket fd, blocking or not, before the
 * deadline: 0, -ETIMEDOUT, or the socket's error. */
int conv_send_bytes(int fd, const void *buf, size_t len, uint64_t deadline_ns);

/* The whole frame onto the TCP socket fd, blocking or not, before the
 * deadline: 0, -ETIMEDOUT, or the socket's error. */
int conv_send(int fd, const struct conv_frame *f, uint64_t deadline_ns);

/*
 * The next frame from fd into *f, before the deadline.  Stream bytes that
 * are not a frame are left unread (-EPROTO); so is an incomplete frame
 * when time runs out (-ETIMEDOUT) or when the stream ends in it
 * (-ECONNRESET, as an end of stream before any byte).  Consumes exactly
 * the frame's bytes otherwise.
 */
int conv_recv(int fd, struct conv_frame *f, uint64_t deadline_ns);

/* Is fd a connected TCP stream socket?  0, or -ENOTSOCK, -EOPNOTSUPP
 * (another kind of socket), -ENOTCONN, -EBADF. */
int conv_check_socket(int fd);

#endif
