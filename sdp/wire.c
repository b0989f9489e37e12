/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SDP wire codec (see wire.h).  Every multi-byte field goes through memcpy:
 * headers sit at arbitrary offsets inside receive buffers and private data,
 * so a cast to a wider type could be an unaligned access.
 *
 * Decoders build the result in a local and copy it out only on success, so
 * a rejected message never leaves half-decoded state behind.
 */
#include "wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <string.h>

/* Byte offsets inside the Hello (HH follows the BSDH). */
#define HH_VERSION 16
#define HH_IPV_CAP 17
#define HH_MAX_ADVERTS 19
#define HH_DESREMRCVSZ 20
#define HH_LOCALRCVSZ 24
#define HH_PORT 28
#define HH_SRC_ADDR 32
#define HH_DST_ADDR 48

/* Byte offsets inside the HelloAck (HAH follows the BSDH). */
#define HAH_VERSION 16
#define HAH_IPV_CAP 17
#define HAH_MAX_ADVERTS 19
#define HAH_ACTRCVSZ 20

/*
 * A receive buffer must hold a BSDH and at least one payload byte, or no
 * Data message could ever make progress.  The upper bound keeps a hostile
 * peer from making us size sends (and zcopy thresholds) absurdly.
 */
#define SDP_RCVSZ_MIN (SDP_BSDH_LEN + 1)
#define SDP_RCVSZ_MAX (16u << 20)

/* An IPv4 address occupies the last 4 bytes of the 16-byte field. */
#define SDP_IPV4_OFF 12

static inline void put_u16(uint8_t *p, uint16_t v)
{
	v = htons(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_u32(uint8_t *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_u64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t get_u16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return ntohs(v);
}

static inline uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return ntohl(v);
}

static inline uint64_t get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

/* --- BSDH ---------------------------------------------------------------- */

void sdp_bsdh_encode(void *out16, const struct sdp_bsdh *h)
{
	uint8_t *p = out16;

	p[0] = h->mid;
	p[1] = h->flags;
	put_u16(p + 2, h->bufs);
	put_u32(p + 4, h->len);
	put_u32(p + 8, h->mseq);
	put_u32(p + 12, h->mseq_ack);
}

/* Field extraction only; the callers decide what is acceptable. */
static void bsdh_get(const uint8_t *p, struct sdp_bsdh *h)
{
	h->mid = p[0];
	h->flags = p[1];
	h->bufs = get_u16(p + 2);
	h->len = get_u32(p + 4);
	h->mseq = get_u32(p + 8);
	h->mseq_ack = get_u32(p + 12);
}

static int mid_in_band(uint8_t mid)
{
	/* Hello/HelloAck only travel in CM private data; seeing one in band
	 * means the peer is confused or hostile. */
	return (mid >= SDP_MID_DISCONN && mid <= SDP_MID_SUSP_COMM_ACK) ||
	       mid >= SDP_MID_SINK_AVAIL;
}

static int mid_may_carry_payload(uint8_t mid)
{
	return mid == SDP_MID_DATA || mid == SDP_MID_SRC_AVAIL ||
	       mid == SDP_MID_SINK_AVAIL;
}

int sdp_bsdh_decode(const void *buf, size_t buflen, struct sdp_bsdh *h)
{
	struct sdp_bsdh v;
	size_t hdr, payload;

	if (buflen < SDP_BSDH_LEN)
		return -EMSGSIZE;
	bsdh_get(buf, &v);
	if ((size_t)v.len != buflen)
		return -EMSGSIZE;
	if (!mid_in_band(v.mid))
		return -EPROTO;
	hdr = SDP_BSDH_LEN + sdp_ext_len(v.mid);
	if (v.len < hdr)
		return -EMSGSIZE;
	payload = v.len - hdr;
	if (payload && !mid_may_carry_payload(v.mid))
		return -EPROTO;
	if (v.flags & ~SDP_FLAG_MASK)
		return -EPROTO;
	/* The urgent byte is the last payload byte: no payload, no byte. */
	if ((v.flags & SDP_FLAG_OOB_PRES) && (v.mid != SDP_MID_DATA || !payload))
		return -EPROTO;
	if ((v.flags & SDP_FLAG_REQ_PIPE) && v.mid != SDP_MID_RDMA_RD_COMPL)
		return -EPROTO;
	*h = v;
	return 0;
}

size_t sdp_ext_len(uint8_t mid)
{
	switch (mid) {
	case SDP_MID_SINK_AVAIL:
		return SDP_SINKAH_LEN;
	case SDP_MID_SRC_AVAIL:
		return SDP_SRCAH_LEN;
	case SDP_MID_RDMA_WR_COMPL:
	case SDP_MID_RDMA_RD_COMPL:
	case SDP_MID_CH_RCV_BUF:
	case SDP_MID_CH_RCV_BUF_ACK:
		return SDP_U32H_LEN;
	case SDP_MID_MODE_CHANGE:
		return SDP_MCH_LEN;
	case SDP_MID_SUSP_COMM:
		return SDP_SCH_LEN;
	default:
		return 0;
	}
}

static const char *const mid_names[256] = {
	[SDP_MID_HELLO] = "Hello",
	[SDP_MID_HELLO_ACK] = "HelloAck",
	[SDP_MID_DISCONN] = "DisConn",
	[SDP_MID_ABORT_CONN] = "AbortConn",
	[SDP_MID_SEND_SM] = "SendSM",
	[SDP_MID_RDMA_WR_COMPL] = "RdmaWrCompl",
	[SDP_MID_RDMA_RD_COMPL] = "RdmaRdCompl",
	[SDP_MID_MODE_CHANGE] = "ModeChange",
	[SDP_MID_SRC_AVAIL_CANCEL] = "SrcAvailCancel",
	[SDP_MID_SINK_AVAIL_CANCEL] = "SinkAvailCancel",
	[SDP_MID_SINK_CANCEL_ACK] = "SinkCancelAck",
	[SDP_MID_CH_RCV_BUF] = "ChRcvBuf",
	[SDP_MID_CH_RCV_BUF_ACK] = "ChRcvBufAck",
	[SDP_MID_SUSP_COMM] = "SuspComm",
	[SDP_MID_SUSP_COMM_ACK] = "SuspCommAck",
	[SDP_MID_SINK_AVAIL] = "SinkAvail",
	[SDP_MID_SRC_AVAIL] = "SrcAvail",
	[SDP_MID_DATA] = "Data",
};

/*
 * Names for the MIDs without one, spelled out at compile time: the codec
 * keeps no writable state, so there is no buffer to format into and the
 * result stays valid and thread-safe forever.
 */
#define MID_ROW(hi)                                                         \
	"mid 0x" hi "0", "mid 0x" hi "1", "mid 0x" hi "2", "mid 0x" hi "3", \
	"mid 0x" hi "4", "mid 0x" hi "5", "mid 0x" hi "6", "mid 0x" hi "7", \
	"mid 0x" hi "8", "mid 0x" hi "9", "mid 0x" hi "a", "mid 0x" hi "b", \
	"mid 0x" hi "c", "mid 0x" hi "d", "mid 0x" hi "e", "mid 0x" hi "f"

static const char mid_numbers[256][sizeof("mid 0x00")] = {
	MID_ROW("0"), MID_ROW("1"), MID_ROW("2"), MID_ROW("3"),
	MID_ROW("4"), MID_ROW("5"), MID_ROW("6"), MID_ROW("7"),
	MID_ROW("8"), MID_ROW("9"), MID_ROW("a"), MID_ROW("b"),
	MID_ROW("c"), MID_ROW("d"), MID_ROW("e"), MID_ROW("f"),
};

const char *sdp_mid_name(uint8_t mid)
{
	return mid_names[mid] ? mid_names[mid] : mid_numbers[mid];
}

/* --- Hello / HelloAck ------------------------------------------------------ */

static int rcvsz_ok(uint32_t sz)
{
	return sz >= SDP_RCVSZ_MIN && sz <= SDP_RCVSZ_MAX;
}

static uint8_t nibbles(unsigned int hi, unsigned int lo)
{
	return (uint8_t)(((hi & 0xf) << 4) | (lo & 0xf));
}

/* IPv4 goes in the last 4 bytes behind 12 zero bytes, as the other SDP
 * stacks lay it out (not ::ffff:a.b.c.d); the caller zeroed the field. */
static void put_addr(uint8_t *p, uint8_t ip_version, const struct in6_addr *a)
{
	if (ip_version == 4)
		memcpy(p + SDP_IPV4_OFF, a->s6_addr + SDP_IPV4_OFF, 4);
	else
		memcpy(p, a->s6_addr, 16);
}

/* Normalise an IPv4 address so that whatever a peer put in the pad, the
 * struct compares equal to one built locally. */
static void get_addr(const uint8_t *p, uint8_t ip_version, struct in6_addr *a)
{
	if (ip_version == 4) {
		memset(a, 0, sizeof(*a));
		memcpy(a->s6_addr + SDP_IPV4_OFF, p + SDP_IPV4_OFF, 4);
	} else {
		memcpy(a->s6_addr, p, 16);
	}
}

int sdp_hello_encode(void *out, size_t cap, const struct sdp_hello *h)
{
	uint8_t *p = out;
	struct sdp_bsdh b = h->bsdh;
	size_t len;

	if (cap >= SDP_HELLO_FULL_LEN)
		len = SDP_HELLO_FULL_LEN;
	else if (cap >= SDP_HELLO_COMPACT_LEN)
		len = SDP_HELLO_COMPACT_LEN;
	else
		return -EMSGSIZE;

	/* Reserved bytes go out as zero; so do absent addresses, rather
	 * than whatever the caller's struct happened to hold. */
	memset(p, 0, len);
	b.mid = SDP_MID_HELLO;
	b.len = (uint32_t)len;
	sdp_bsdh_encode(p, &b);
	p[HH_VERSION] = nibbles(h->major, h->minor);
	p[HH_IPV_CAP] = nibbles(h->ip_version, h->caps);
	p[HH_MAX_ADVERTS] = h->max_adverts;
	put_u32(p + HH_DESREMRCVSZ, h->desremrcvsz);
	put_u32(p + HH_LOCALRCVSZ, h->localrcvsz);
	put_u16(p + HH_PORT, h->src_port);
	if (len == SDP_HELLO_FULL_LEN && h->has_addrs) {
		put_addr(p + HH_SRC_ADDR, h->ip_version, &h->src_addr);
		put_addr(p + HH_DST_ADDR, h->ip_version, &h->dst_addr);
	}
	return (int)len;
}

int sdp_hello_decode(const void *buf, size_t len, struct sdp_hello *h)
{
	const uint8_t *p = buf;
	struct sdp_hello v;

	if (len != SDP_HELLO_FULL_LEN && len != SDP_HELLO_COMPACT_LEN)
		return -EMSGSIZE;
	memset(&v, 0, sizeof(v));
	bsdh_get(p, &v.bsdh);
	if ((size_t)v.bsdh.len != len)
		return -EMSGSIZE;
	if (v.bsdh.mid != SDP_MID_HELLO)
		return -EPROTO;
	v.major = p[HH_VERSION] >> 4;
	v.minor = p[HH_VERSION] & 0xf;
	/* A different major version may lay out everything after the
	 * version byte differently, so nothing else is worth checking. */
	if (v.major != SDP_MAJOR_VERSION)
		return -EPROTONOSUPPORT;
	v.ip_version = p[HH_IPV_CAP] >> 4;
	v.caps = p[HH_IPV_CAP] & 0xf;
	v.max_adverts = p[HH_MAX_ADVERTS];
	v.desremrcvsz = get_u32(p + HH_DESREMRCVSZ);
	v.localrcvsz = get_u32(p + HH_LOCALRCVSZ);
	v.src_port = get_u16(p + HH_PORT);
	if (!v.max_adverts)
		return -EPROTO;
	if (v.ip_version != 4 && v.ip_version != 6)
		return -EPROTO;
	if (!rcvsz_ok(v.desremrcvsz) || !rcvsz_ok(v.localrcvsz))
		return -EPROTO;
	if (len == SDP_HELLO_FULL_LEN) {
		v.has_addrs = 1;
		get_addr(p + HH_SRC_ADDR, v.ip_version, &v.src_addr);
		get_addr(p + HH_DST_ADDR, v.ip_version, &v.dst_addr);
	}
	*h = v;
	return 0;
}

int sdp_hello_ack_encode(void *out, size_t cap, const struct sdp_hello_ack *h)
{
	uint8_t *p = out;
	struct sdp_bsdh b = h->bsdh;
	size_t len;

	if (cap >= SDP_HELLO_ACK_FULL_LEN)
		len = SDP_HELLO_ACK_FULL_LEN;
	else if (cap >= SDP_HELLO_ACK_COMPACT_LEN)
		len = SDP_HELLO_ACK_COMPACT_LEN;
	else
		return -EMSGSIZE;

	memset(p, 0, len);
	b.mid = SDP_MID_HELLO_ACK;
	b.len = (uint32_t)len;
	sdp_bsdh_encode(p, &b);
	p[HAH_VERSION] = nibbles(h->major, h->minor);
	p[HAH_IPV_CAP] = nibbles(h->ip_version, h->caps);
	p[HAH_MAX_ADVERTS] = h->max_adverts;
	put_u32(p + HAH_ACTRCVSZ, h->actrcvsz);
	return (int)len;
}

int sdp_hello_ack_decode(const void *buf, size_t len, struct sdp_hello_ack *h)
{
	const uint8_t *p = buf;
	struct sdp_hello_ack v;

	if (len != SDP_HELLO_ACK_FULL_LEN && len != SDP_HELLO_ACK_COMPACT_LEN)
		return -EMSGSIZE;
	memset(&v, 0, sizeof(v));
	bsdh_get(p, &v.bsdh);
	if ((size_t)v.bsdh.len != len)
		return -EMSGSIZE;
	if (v.bsdh.mid != SDP_MID_HELLO_ACK)
		return -EPROTO;
	v.major = p[HAH_VERSION] >> 4;
	v.minor = p[HAH_VERSION] & 0xf;
	if (v.major != SDP_MAJOR_VERSION)
		return -EPROTONOSUPPORT;
	/* GEN1 peers send the IP version nibble as reserved: take it as is. */
	v.ip_version = p[HAH_IPV_CAP] >> 4;
	v.caps = p[HAH_IPV_CAP] & 0xf;
	v.max_adverts = p[HAH_MAX_ADVERTS];
	v.actrcvsz = get_u32(p + HAH_ACTRCVSZ);
	if (!v.max_adverts)
		return -EPROTO;
	if (!rcvsz_ok(v.actrcvsz))
		return -EPROTO;
	*h = v;
	return 0;
}

static const uint8_t reject_magic[4] = { 'l', 's', 'd', 'p' };
#define REJECT_VERSION 1

int sdp_reject_encode(void *out, size_t cap, enum sdp_reject_reason why)
{
	uint8_t *p = out;

	if (cap < SDP_REJECT_LEN)
		return -EMSGSIZE;
	memcpy(p, reject_magic, sizeof(reject_magic));
	p[4] = REJECT_VERSION;
	p[5] = (uint8_t)why;
	p[6] = p[7] = 0;
	return SDP_REJECT_LEN;
}

int sdp_reject_decode(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (len < SDP_REJECT_LEN || memcmp(p, reject_magic, sizeof(reject_magic)) ||
	    p[4] != REJECT_VERSION || p[6] || p[7])
		return -EPROTO;
	switch (p[5]) {
	case SDP_REJECT_BUSY:
	case SDP_REJECT_RESOURCE:
	case SDP_REJECT_HELLO:
		return p[5];
	default:
		return -EPROTO;
	}
}

/* --- extended headers ---------------------------------------------------- */

void sdp_srcah_encode(void *out, const struct sdp_srcah *a)
{
	uint8_t *p = out;

	put_u32(p, a->len);
	put_u32(p + 4, a->rkey);
	put_u64(p + 8, a->vaddr);
}

void sdp_srcah_decode(const void *in, struct sdp_srcah *a)
{
	const uint8_t *p = in;

	a->len = get_u32(p);
	a->rkey = get_u32(p + 4);
	a->vaddr = get_u64(p + 8);
}

void sdp_sinkah_encode(void *out, const struct sdp_sinkah *a)
{
	uint8_t *p = out;

	put_u32(p, a->len);
	put_u32(p + 4, a->rkey);
	put_u64(p + 8, a->vaddr);
	put_u32(p + 16, a->non_discards);
}

void sdp_sinkah_decode(const void *in, struct sdp_sinkah *a)
{
	const uint8_t *p = in;

	a->len = get_u32(p);
	a->rkey = get_u32(p + 4);
	a->vaddr = get_u64(p + 8);
	a->non_discards = get_u32(p + 16);
}

void sdp_u32h_encode(void *out, uint32_t v)
{
	put_u32(out, v);
}

uint32_t sdp_u32h_decode(const void *in)
{
	return get_u32(in);
}

#define MCH_MODE_MASK 0x7

void sdp_mch_encode(void *out, int send_half, enum sdp_mode mode)
{
	uint8_t *p = out;
	unsigned int v = (send_half ? SDP_MCH_SEND : 0) | ((unsigned int)mode & MCH_MODE_MASK);

	p[0] = (uint8_t)(v << 4);
	p[1] = p[2] = p[3] = 0;
}

/*
 * Every reserved bit is policed, bytes 1..3 included: the header is all
 * reserved but for one nibble, so anything else set there means a peer
 * with a layout we do not understand, and guessing would desynchronise
 * the two ends' idea of each half-connection's mode.
 */
int sdp_mch_decode(const void *in, int *send_half, enum sdp_mode *mode)
{
	const uint8_t *p = in;
	unsigned int v = p[0] >> 4;
	unsigned int m = v & MCH_MODE_MASK;

	if ((p[0] & 0x0f) || p[1] || p[2] || p[3])
		return -EPROTO;
	if (m > SDP_MODE_TRANSACTION)
		return -EPROTO;
	*send_half = !!(v & SDP_MCH_SEND);
	*mode = (enum sdp_mode)m;
	return 0;
}

void sdp_sch_encode(void *out, uint64_t service_id)
{
	put_u64(out, service_id);
}

uint64_t sdp_sch_decode(const void *in)
{
	return get_u64(in);
}
