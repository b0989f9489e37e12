/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One direction of the shm transport: a single-producer single-consumer
 * ring of records in memory shared with another process (shm_ring.c).
 *
 * The other process may be hostile.  Each side keeps its own index in
 * private memory and only publishes it; what it reads of the other's index
 * and of a record's header is checked before it is used, so nothing the
 * peer writes makes this side read or write outside the ring.  A breach is
 * reported as -EPROTO, after which the ring is not used again.
 */
#ifndef SHM_RING_H
#define SHM_RING_H

#include <stdatomic.h>
#include <stdint.h>

/* A record: an 8-byte header (payload length, kind), the payload, then
 * padding to 8 bytes.  Records may wrap around the end of the ring. */
#define SHM_REC_HDR 8u

/* The shared indexes, each on its own cache line: the producer's count of
 * bytes produced (tail) and the consumer's count of bytes consumed (head),
 * both free-running modulo 2^32. */
struct shm_ring_ctl {
	_Atomic uint32_t tail;
	uint8_t pad0[60];
	_Atomic uint32_t head;
	uint8_t pad1[60];
};

struct shm_ring {
	struct shm_ring_ctl *ctl;	/* shared */
	uint8_t *data;			/* shared, size bytes */
	uint32_t size;			/* a power of two, at least 64 */
	uint32_t pos;			/* private: our tail (producer) or head (consumer) */
	/* Consumer: the record peek() validated, until take() or skip(). */
	uint32_t cur_len, cur_kind;
	int have_cur;
	int broken;
};

/* The largest payload a ring of size bytes carries in one record. */
static inline uint32_t shm_ring_max_payload(uint32_t size)
{
	return size / 2 - SHM_REC_HDR;
}

/* Bytes one record of len payload bytes takes. */
static inline uint32_t shm_rec_bytes(uint32_t len)
{
	return SHM_REC_HDR + ((len + 7u) & ~7u);
}

/*
 * Attach to a ring.  ctl and data are in the shared mapping; the caller has
 * checked that data[0, size) lies inside it.  The side that creates the
 * mapping zeroes ctl first; the other side takes the indexes it finds
 * (both are 0 before the first record).  -EINVAL: size not a power of two
 * from 64 to 2^30.
 */
int shm_ring_attach(struct shm_ring *r, struct shm_ring_ctl *ctl, void *data, uint32_t size);

/* Producer: can a record of len bytes go in now?  1 yes, 0 not yet,
 * -EMSGSIZE never, -EPROTO the consumer's index is impossible. */
int shm_ring_room(struct shm_ring *r, uint32_t len);

/* Producer: append a record (kind, then len bytes of p) and publish it.
 * 0, -EAGAIN (no room yet), -EMSGSIZE, -EPROTO. */
int shm_ring_put(struct shm_ring *r, uint32_t kind, const void *p, uint32_t len);

/* Producer: is the ring empty (everything consumed)?  1, 0 or -EPROTO. */
int shm_ring_drained(struct shm_ring *r);

/*
 * Consumer: the next record's kind and length, validated (the whole record
 * lies between our head and the producer's tail, and within the largest
 * record the ring carries).  0, -EAGAIN (none yet), -EPROTO.  The values
 * are kept privately: the producer cannot change them before take().
 */
int shm_ring_peek(struct shm_ring *r, uint32_t *kind, uint32_t *len);

/* Consumer: copy the peeked record's payload to dst (room for its length)
 * and release it to the producer.  -EINVAL if nothing was peeked. */
int shm_ring_take(struct shm_ring *r, void *dst);

#endif
