/* SPDX-License-Identifier: BSD-2-Clause */
/* The descriptor map: see fdmap.h. */
#include <stdlib.h>

#include "fdmap.h"

fdmap_slot_t *fdmap_slot(struct fdmap *m, int fd, bool create)
{
	if (fd < 0 || fd >= FDMAP_CHUNK * FDMAP_CHUNKS)
		return NULL;
	fdmap_slot_t *_Atomic *where = &m->chunks[fd / FDMAP_CHUNK];
	fdmap_slot_t *c = atomic_load_explicit(where, memory_order_acquire);

	if (!c && create) {
		fdmap_slot_t *mine = calloc(FDMAP_CHUNK, sizeof(*mine));

		if (!mine)
			return NULL;
		/* Two creators may race: one chunk wins, the other is freed
		 * before anyone could have seen it. */
		if (atomic_compare_exchange_strong_explicit(where, &c, mine,
							    memory_order_acq_rel,
							    memory_order_acquire))
			c = mine;
		else
			free(mine);
	}
	return c ? &c[fd % FDMAP_CHUNK] : NULL;
}

void *fdmap_peek(struct fdmap *m, int fd)
{
	fdmap_slot_t *slot = fdmap_slot(m, fd, false);

	return slot ? atomic_load_explicit(slot, memory_order_relaxed) : NULL;
}

int fdmap_end(struct fdmap *m)
{
	for (int c = FDMAP_CHUNKS; c > 0; c--)
		if (atomic_load_explicit(&m->chunks[c - 1], memory_order_acquire))
			return c * FDMAP_CHUNK;
	return 0;
}

void fdmap_for_each(struct fdmap *m, void (*fn)(int fd, void *value, void *arg), void *arg)
{
	for (int c = 0; c < FDMAP_CHUNKS; c++) {
		fdmap_slot_t *chunk = atomic_load_explicit(&m->chunks[c], memory_order_acquire);

		if (!chunk)
			continue;
		for (int i = 0; i < FDMAP_CHUNK; i++) {
			void *v = atomic_load(&chunk[i]);

			if (v)
				fn(c * FDMAP_CHUNK + i, v, arg);
		}
	}
}
