/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The registration cache: registrations of application buffers that the
 * engine uses as the local side of RDMA (a zero-copy read lands straight in
 * the buffer a recv() was given), kept for reuse, since registering pins
 * every page and costs a system call.
 *
 * Only local access is ever cached.  A registration a peer can use (the
 * remote key of a SrcAvail or SinkAvail) is made for exactly one operation
 * and destroyed when it ends (sdp/zcopy.c); it never comes from here.  A
 * cache made with remote access (a read's sink on iWARP, whose key the
 * read request carries to the peer) caches nothing: each get registers,
 * each put deregisters.
 *
 * A cached registration must never outlive the memory it names: after
 * free(), munmap() or mremap() the same addresses may be backed by other
 * pages, and an RDMA device would keep writing into the old, pinned ones.
 * The preload sees those calls (and realloc(), madvise(MADV_DONTNEED and
 * friends)) and calls sdp_regcache_invalidate() before the memory goes;
 * caching is on only once it said so with sdp_regcache_tracking_on().  An
 * engine used without the preload registers for every operation instead.
 *
 * One cache per connection, bounded in entries and bytes (tunables
 * regcache_entries, regcache_max_bytes); least recently used entries go
 * first.  A fork() child never uses its parent's connections, so it never
 * sees their caches.
 *
 * Locking: regcache_get/put/free run under the owning socket's lock.
 * sdp_regcache_invalidate() may run in any thread, with or without any
 * engine lock held, and from inside a library a transport uses (which
 * frees memory too): it only marks entries dead under a lock of its own and never calls
 * into a transport; dead entries are deregistered by their owner later.
 */
#ifndef SDP_REGCACHE_H
#define SDP_REGCACHE_H

#include <stddef.h>

#include "oti.h"

struct sdp_regcache;
struct sdp_reg;		/* one use of a registration, between get and put */

/* A cache of registrations on ep (transport t) with the given access
 * (OTI_ACCESS_*).  NULL when out of memory. */
struct sdp_regcache *regcache_new(const struct oti_ops *t, struct oti_ep *ep, unsigned access);

/*
 * A registration covering [addr, addr + len): *mr is valid until
 * regcache_put(reg).  Returns 0, or the transport's negative errno.
 */
int regcache_get(struct sdp_regcache *rc, void *addr, size_t len, struct sdp_reg **reg,
		 struct oti_mr **mr);
void regcache_put(struct sdp_regcache *rc, struct sdp_reg *reg);

/* Deregister everything and free the cache; every reg must have been
 * put.  Called after the ep was closed (verbs order: QP, then MRs). */
void regcache_free(struct sdp_regcache *rc);

/* [addr, addr + len) is about to be released: no registration that
 * overlaps it may be used again.  Any thread, any context but a signal
 * handler. */
void sdp_regcache_invalidate(const void *addr, size_t len);

/* The caller (the preload) reports every release from now on. */
void sdp_regcache_tracking_on(void);

/*
 * Nonzero when a registration is cached somewhere in the process.  The
 * preload's free() asks before it looks up the size of the block for
 * sdp_regcache_invalidate(), so that a program with nothing cached pays
 * one relaxed load per free().
 */
extern unsigned long sdp_regcache_live;
/* Always inlined: the preload's wrappers are not instrumented by a
 * sanitizer, and neither must this be. */
static inline __attribute__((always_inline)) int sdp_regcache_active(void)
{
	return __atomic_load_n(&sdp_regcache_live, __ATOMIC_RELAXED) != 0;
}

#endif /* SDP_REGCACHE_H */
