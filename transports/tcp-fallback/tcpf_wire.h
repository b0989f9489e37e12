/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tcp-fallback transport's frames (tcpf.c, WIRE FORMAT, says what
 * each one means): a 24-byte big-endian header, then the payload.  Here
 * so that tests and fuzzers can speak it as a peer would.
 */
#ifndef TCPF_WIRE_H
#define TCPF_WIRE_H

#include <stdint.h>

#define TCPF_MAGIC 0x53445046u	/* "SDPF" */
#define TCPF_PROTO 1
#define TCPF_HDR_LEN 24

enum {
	TCPF_CONNECT = 1,
	TCPF_ACCEPT,
	TCPF_REJECT,
	TCPF_SEND,
	TCPF_WRITE,
	TCPF_READ_REQ,
	TCPF_READ_RESP,
};

#define TCPF_F_ERROR 0x01

struct tcpf_hdr {
	uint8_t type, flags;
	uint32_t len, key, id;
	uint64_t addr;
};

static inline void tcpf_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline uint32_t tcpf_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void tcpf_hdr_put(uint8_t *p, const struct tcpf_hdr *h)
{
	p[0] = h->type;
	p[1] = h->flags;
	p[2] = p[3] = 0;
	tcpf_put32(p + 4, h->len);
	tcpf_put32(p + 8, h->key);
	tcpf_put32(p + 12, h->id);
	tcpf_put32(p + 16, (uint32_t)(h->addr >> 32));
	tcpf_put32(p + 20, (uint32_t)h->addr);
}

static inline void tcpf_hdr_get(const uint8_t *p, struct tcpf_hdr *h)
{
	h->type = p[0];
	h->flags = p[1];
	h->len = tcpf_get32(p + 4);
	h->key = tcpf_get32(p + 8);
	h->id = tcpf_get32(p + 12);
	h->addr = (uint64_t)tcpf_get32(p + 16) << 32 | tcpf_get32(p + 20);
}

#endif
