/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A map from descriptor number to pointer, the one every layer uses:
 * the preload's fd table (ops/fdtable.c), its emulated epoll sets
 * (ops/epset.c) and the engine's sd table (sdp/sock.c).
 *
 * Dense and two levels, so that it grows without moving entries: a chunk
 * of FDMAP_CHUNK slots is allocated the first time a number in it is
 * stored and never freed, so a slot's address stays valid for the life
 * of the process and a reader needs no lock.  Slots are atomic pointers;
 * what a slot points to, and how a reader keeps it alive after loading
 * it, is the owner's business (a reference count checked against the
 * slot, or a lock of its own).
 *
 * Numbers are bounded by FDMAP_CHUNK * FDMAP_CHUNKS (1M), the kernel's
 * own ceiling on RLIMIT_NOFILE.
 */
#ifndef SDP_COMMON_FDMAP_H
#define SDP_COMMON_FDMAP_H

#include <stdatomic.h>
#include <stdbool.h>

#define FDMAP_CHUNK 1024
#define FDMAP_CHUNKS 1024

typedef _Atomic(void *) fdmap_slot_t;

struct fdmap {
	fdmap_slot_t *_Atomic chunks[FDMAP_CHUNKS];
};

/* The slot for fd, or NULL if fd is out of range, or its chunk does not
 * exist and create is false (or cannot be allocated).  Safe to call
 * concurrently, with or without create. */
fdmap_slot_t *fdmap_slot(struct fdmap *m, int fd, bool create);

/* What the slot for fd holds, NULL if none: a relaxed look for "is this
 * number ours", not a way to use the object. */
void *fdmap_peek(struct fdmap *m, int fd);

/* One past the highest number the map has room for (0 if empty): a
 * bound for walks and for close_range(). */
int fdmap_end(struct fdmap *m);

/* fn(fd, value, arg) for every non-empty slot, lowest fd first.  The
 * value may be gone by the time fn looks at it, as with any reader. */
void fdmap_for_each(struct fdmap *m, void (*fn)(int fd, void *value, void *arg), void *arg);

#endif
