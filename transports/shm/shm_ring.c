/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shm transport's rings (shm_ring.h).  Ordering: the producer writes a
 * record, then publishes its tail with release; the consumer reads the tail
 * with acquire, copies, then publishes its head with release, which the
 * producer reads with acquire before it reuses the bytes.
 */
#include "shm_ring.h"

#include <errno.h>
#include <string.h>

int shm_ring_attach(struct shm_ring *r, struct shm_ring_ctl *ctl, void *data, uint32_t size)
{
	if (size < 64 || size > (1u << 30) || (size & (size - 1)))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->ctl = ctl;
	r->data = data;
	r->size = size;
	return 0;
}

/* Copy in or out at ring offset off (free-running), across the end. */
static void ring_write(struct shm_ring *r, uint32_t off, const void *p, uint32_t len)
{
	uint32_t at = off & (r->size - 1), first = r->size - at;

	if (first > len)
		first = len;
	memcpy(r->data + at, p, first);
	memcpy(r->data, (const uint8_t *)p + first, len - first);
}

static void ring_read(struct shm_ring *r, uint32_t off, void *p, uint32_t len)
{
	uint32_t at = off & (r->size - 1), first = r->size - at;

	if (first > len)
		first = len;
	memcpy(p, r->data + at, first);
	memcpy((uint8_t *)p + first, r->data, len - first);
}

/* Bytes in use, from the producer's side: the consumer's head must lie
 * between our tail minus the size and our tail. */
static int used_bytes(struct shm_ring *r, uint32_t *used)
{
	uint32_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	uint32_t u = r->pos - head;

	if (u > r->size || (head & 7u)) {
		r->broken = 1;
		return -EPROTO;
	}
	*used = u;
	return 0;
}

int shm_ring_room(struct shm_ring *r, uint32_t len)
{
	uint32_t used;

	if (r->broken)
		return -EPROTO;
	if (len > shm_ring_max_payload(r->size))
		return -EMSGSIZE;
	if (used_bytes(r, &used))
		return -EPROTO;
	return r->size - used >= shm_rec_bytes(len);
}

int shm_ring_put(struct shm_ring *r, uint32_t kind, const void *p, uint32_t len)
{
	int room = shm_ring_room(r, len);
	uint32_t hdr[2] = { len, kind };

	if (room <= 0)
		return room ? room : -EAGAIN;
	ring_write(r, r->pos, hdr, SHM_REC_HDR);
	if (len)
		ring_write(r, r->pos + SHM_REC_HDR, p, len);
	r->pos += shm_rec_bytes(len);
	atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
	return 0;
}

int shm_ring_drained(struct shm_ring *r)
{
	uint32_t used;

	if (r->broken || used_bytes(r, &used))
		return -EPROTO;
	return used == 0;
}

int shm_ring_peek(struct shm_ring *r, uint32_t *kind, uint32_t *len)
{
	if (r->broken)
		return -EPROTO;
	if (!r->have_cur) {
		uint32_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
		uint32_t avail = tail - r->pos;
		uint32_t hdr[2];

		if (avail > r->size || (tail & 7u))
			goto broken;
		if (!avail)
			return -EAGAIN;
		if (avail < SHM_REC_HDR)
			goto broken;
		ring_read(r, r->pos, hdr, SHM_REC_HDR);
		if (hdr[0] > shm_ring_max_payload(r->size) || shm_rec_bytes(hdr[0]) > avail)
			goto broken;
		r->cur_len = hdr[0];
		r->cur_kind = hdr[1];
		r->have_cur = 1;
	}
	*kind = r->cur_kind;
	*len = r->cur_len;
	return 0;
broken:
	r->broken = 1;
	return -EPROTO;
}

int shm_ring_take(struct shm_ring *r, void *dst)
{
	if (!r->have_cur || r->broken)
		return r->broken ? -EPROTO : -EINVAL;
	if (r->cur_len)
		ring_read(r, r->pos + SHM_REC_HDR, dst, r->cur_len);
	r->pos += shm_rec_bytes(r->cur_len);
	r->have_cur = 0;
	atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
	return 0;
}
