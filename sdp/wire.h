/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SDP wire format (IBTA Annex A4): the Base Sockets Direct Header, the
 * Hello/HelloAck headers and the extended headers, as encode/decode
 * functions between the big-endian wire bytes and host-order structs.
 *
 * Pure functions: no allocation, no I/O, no global state.  Decoders
 * validate everything a hostile peer controls and return -EPROTO (or
 * -EMSGSIZE for lengths) rather than trusting it.
 */
#ifndef SDP_WIRE_H
#define SDP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#define SDP_BSDH_LEN 16

enum sdp_mid {
	SDP_MID_HELLO = 0x00,
	SDP_MID_HELLO_ACK = 0x01,
	SDP_MID_DISCONN = 0x02,
	SDP_MID_ABORT_CONN = 0x03,
	SDP_MID_SEND_SM = 0x04,
	SDP_MID_RDMA_WR_COMPL = 0x05,
	SDP_MID_RDMA_RD_COMPL = 0x06,
	SDP_MID_MODE_CHANGE = 0x07,
	SDP_MID_SRC_AVAIL_CANCEL = 0x08,
	SDP_MID_SINK_AVAIL_CANCEL = 0x09,
	SDP_MID_SINK_CANCEL_ACK = 0x0A,
	SDP_MID_CH_RCV_BUF = 0x0B,
	SDP_MID_CH_RCV_BUF_ACK = 0x0C,
	SDP_MID_SUSP_COMM = 0x0D,
	SDP_MID_SUSP_COMM_ACK = 0x0E,
	SDP_MID_SINK_AVAIL = 0xFD,
	SDP_MID_SRC_AVAIL = 0xFE,
	SDP_MID_DATA = 0xFF,
};

/* BSDH flag masks (byte 1). */
#define SDP_FLAG_OOB_PRES 0x01	/* last payload byte is the urgent byte */
#define SDP_FLAG_OOB_PEND 0x02	/* urgent data sent but not yet delivered */
#define SDP_FLAG_REQ_PIPE 0x04	/* sink asks for Pipelined mode */
#define SDP_FLAG_MASK 0x07

/* Host-order view of a BSDH. */
struct sdp_bsdh {
	uint8_t mid;
	uint8_t flags;
	uint16_t bufs;		/* receive buffers the sender has posted now */
	uint32_t len;		/* whole message: BSDH + ext header + payload */
	uint32_t mseq;		/* this message's sequence number */
	uint32_t mseq_ack;	/* last mseq the sender received */
};

void sdp_bsdh_encode(void *out16, const struct sdp_bsdh *h);

/*
 * Decode and validate the in-band message in buf[0..buflen) (buflen = bytes
 * the transport delivered).  Checks, in this order:
 *   buflen >= 16                                        else -EMSGSIZE
 *   h->len == buflen                                    else -EMSGSIZE
 *   mid is a known in-band MID (not Hello/HelloAck)     else -EPROTO
 *   len >= 16 + sdp_ext_len(mid)                        else -EMSGSIZE
 *   payload only on Data, SrcAvail, SinkAvail           else -EPROTO
 *   flags: no bit outside SDP_FLAG_MASK; OOB_PRES only on Data with >= 1
 *   payload byte; REQ_PIPE only on RdmaRdCompl          else -EPROTO
 */
int sdp_bsdh_decode(const void *buf, size_t buflen, struct sdp_bsdh *h);

/* Length of the extended header that follows the BSDH for mid (0 if none). */
size_t sdp_ext_len(uint8_t mid);

/* Human-readable MID name for logs ("Data", "SrcAvail", "mid 0x42"). */
const char *sdp_mid_name(uint8_t mid);

/* --- Hello / HelloAck -------------------------------------------------- */

#define SDP_MAJOR_VERSION 2
#define SDP_MINOR_VERSION 2

#define SDP_HELLO_FULL_LEN 92		/* IB CM REQ private data */
#define SDP_HELLO_COMPACT_LEN 32	/* BSDH + first 16 bytes of HH */
#define SDP_HELLO_ACK_FULL_LEN 196	/* IB CM REP private data */
#define SDP_HELLO_ACK_COMPACT_LEN 24	/* BSDH + first 8 bytes of HAH */

/* HH capability bits (low nibble of byte 17). */
#define SDP_HH_CAP_INVALIDATE 0x1
#define SDP_HH_CAP_EXT_MAXADVERTS 0x2

struct sdp_hello {
	struct sdp_bsdh bsdh;	/* mid HELLO, bufs = initial credits, mseq 0 */
	uint8_t major, minor;
	uint8_t ip_version;	/* 4 or 6 */
	uint8_t caps;		/* SDP_HH_CAP_* */
	uint8_t max_adverts;	/* > 0 */
	uint32_t desremrcvsz;	/* desired size of the passive side's buffers */
	uint32_t localrcvsz;	/* size of each of the active side's buffers */
	uint16_t src_port;	/* active side's source port (host order) */
	/* Addresses: the full form carries them, the compact one does not
	 * (the transport knows them); has_addrs says which. */
	int has_addrs;
	struct in6_addr src_addr;	/* IPv4 in the last 4 bytes, zero pad */
	struct in6_addr dst_addr;
};

struct sdp_hello_ack {
	struct sdp_bsdh bsdh;	/* mid HELLO_ACK, bufs = initial credits */
	uint8_t major, minor;
	uint8_t ip_version;	/* 0 allowed (GEN1 sends reserved) */
	uint8_t caps;
	uint8_t max_adverts;	/* > 0 */
	uint32_t actrcvsz;	/* size of each of the passive side's buffers */
};

/*
 * Encode into out (capacity cap): the full 92/196-byte form when cap
 * allows, else the compact form; -EMSGSIZE if not even that fits.
 * bsdh.len is set to the encoded length.  Returns the length.
 */
int sdp_hello_encode(void *out, size_t cap, const struct sdp_hello *h);
int sdp_hello_ack_encode(void *out, size_t cap, const struct sdp_hello_ack *h);

/*
 * Decode either form (told apart by length: compact or full; other
 * lengths, and bsdh.len != len, give -EMSGSIZE).  Validates: mid,
 * major version == SDP_MAJOR_VERSION (-EPROTONOSUPPORT otherwise),
 * max_adverts > 0, Hello IP version 4 or 6, receive sizes >= 16 + 1
 * and <= 16 MiB (-EPROTO otherwise).
 */
int sdp_hello_decode(const void *buf, size_t len, struct sdp_hello *h);
int sdp_hello_ack_decode(const void *buf, size_t len, struct sdp_hello_ack *h);

/*
 * Why a passive side refused a Hello: libsdp's own reject private data.
 * The SDP specification gives a refusal no content, so this is an
 * extension, told apart by its magic: "lsdp", a version (1), the reason,
 * two zero bytes.  A peer that sends none (or anything else) refused
 * without saying why.  A transport may pad private data with zeros (an
 * IB CM REJ carries 148 bytes): what follows the 8 bytes is ignored.
 */
enum sdp_reject_reason {
	SDP_REJECT_BUSY = 1,		/* the listener's accept queue is full */
	SDP_REJECT_RESOURCE,		/* no memory, descriptors or registrations */
	SDP_REJECT_HELLO,		/* the Hello was invalid or of another version */
};
#define SDP_REJECT_LEN 8
/* Encode into out (capacity cap): SDP_REJECT_LEN, or -EMSGSIZE. */
int sdp_reject_encode(void *out, size_t cap, enum sdp_reject_reason why);
/* The reason in buf, or -EPROTO when buf is not a libsdp reject (no
 * magic, another version, an unknown reason, too short). */
int sdp_reject_decode(const void *buf, size_t len);

/* --- extended headers (all follow the BSDH directly) --------------------- */

struct sdp_srcah {		/* SrcAvail */
	uint32_t len;
	uint32_t rkey;
	uint64_t vaddr;
};
struct sdp_sinkah {		/* SinkAvail */
	uint32_t len;
	uint32_t rkey;
	uint64_t vaddr;
	uint32_t non_discards;
};

#define SDP_SRCAH_LEN 16
#define SDP_SINKAH_LEN 20
#define SDP_U32H_LEN 4		/* RdmaWrCompl, RdmaRdCompl, ChRcvBuf(Ack) */
#define SDP_MCH_LEN 4		/* ModeChange */
#define SDP_SCH_LEN 8		/* SuspComm */

void sdp_srcah_encode(void *out, const struct sdp_srcah *a);
void sdp_srcah_decode(const void *in, struct sdp_srcah *a);
void sdp_sinkah_encode(void *out, const struct sdp_sinkah *a);
void sdp_sinkah_decode(const void *in, struct sdp_sinkah *a);
/* RdmaWrCompl / RdmaRdCompl / ChRcvBuf / ChRcvBufAck: one big-endian u32. */
void sdp_u32h_encode(void *out, uint32_t v);
uint32_t sdp_u32h_decode(const void *in);

/* ModeChange: byte 0 = value << 4, value = {bit3: send half, bits2:0: mode}. */
/* Transaction (3) is this implementation's: see sdp/mode.c. */
enum sdp_mode {
	SDP_MODE_BUFFERED = 0,
	SDP_MODE_COMBINED = 1,
	SDP_MODE_PIPELINED = 2,
	SDP_MODE_TRANSACTION = 3,
};
#define SDP_MCH_SEND 0x8
void sdp_mch_encode(void *out, int send_half, enum sdp_mode mode);
/* -EPROTO for reserved bits set or an unknown mode. */
int sdp_mch_decode(const void *in, int *send_half, enum sdp_mode *mode);

void sdp_sch_encode(void *out, uint64_t service_id);
uint64_t sdp_sch_decode(const void *in);

/* --- sequence arithmetic (mod 2^32) ---------------------------------------- */

static inline int sdp_seq_before(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

#endif /* SDP_WIRE_H */
