/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The registration cache (regcache.h says what it is for and who calls
 * what).
 *
 * Two sides meet here.  The owner of a cache (a connection, under its
 * socket's lock) looks entries up, registers, evicts and deregisters; it
 * alone calls the transport.  The invalidators (the preload's free and
 * munmap hooks, in any thread, maybe from inside a transport or with any
 * engine lock held) only mark entries dead.  They meet in the registry:
 * every cached entry of every cache of the process, on one list under
 * rc_lock, which is taken by nothing else and never held across a call
 * that could allocate, free or reach a transport (a free() made while
 * holding it would come back to sdp_regcache_invalidate() and wait for
 * itself).
 *
 * What an entry vouches for.  A miss registers the whole pages around the
 * buffer it was asked for (the anchor), so that other buffers in those
 * pages hit later.  Pages that hold a byte of a live buffer cannot be
 * unmapped or zapped: free() and its allocator give back only pages that
 * are wholly free, and munmap()/madvise()/mremap() work on whole pages,
 * each of which holds a byte of the anchor.  So an entry stays valid as
 * long as its anchor does, and an invalidation kills the entries whose
 * anchor it overlaps.  Freeing a neighbour that shares an edge page leaves
 * the entry alone, as it should: the page stays.
 *
 * The cheap check.  Every free() of the process comes through
 * sdp_regcache_invalidate().  With nothing cached that is one relaxed load
 * (rc_live).  With entries cached, a table of per-page counters (hashed,
 * so it is a filter, never an answer) tells most frees that no anchor is
 * near them without a lock; only frees near an anchor take rc_lock and
 * walk the list.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine.h"
#include "regcache.h"
#include "tunables.h"

/*
 * One registration.  Cached entries live on their cache's LRU list and in
 * the registry until they are deregistered; an uncached one (caching off,
 * or no room) is made for one get and destroyed at its put.
 */
struct sdp_reg {
	/* Owner side: under the owning socket's lock. */
	struct sdp_reg *prev, *next;	/* the cache's list, most recent first;
					 * or its list of uncached ones */
	struct oti_mr *mr;
	uintptr_t lo, hi;		/* registered: whole pages */
	unsigned refs;			/* gets not yet put */
	bool cached;
	/* Immutable once listed; read by invalidators under rc_lock. */
	uintptr_t alo, ahi;		/* the anchor: what the miss was for */
	/* Registry side: under rc_lock. */
	struct sdp_reg *gprev, *gnext;
	unsigned gen;			/* rc_gen when listed; 0: never listed */
	bool listed;
	/* Set once, under rc_lock, by an invalidation; the owner reads it
	 * without the lock (an entry whose memory goes while the owner looks
	 * it up is an application freeing a buffer it is receiving into). */
	int dead;
};

struct sdp_regcache {
	const struct oti_ops *t;
	struct oti_ep *ep;
	unsigned access;
	/* Bounds, read from the tunables once per cache: a connection keeps
	 * the ones it started with. */
	size_t max_entries, max_bytes;
	struct sdp_reg *head, *tail;	/* most and least recently used */
	size_t n, bytes;		/* of every entry on the list, dead ones too */
	/* Uncached registrations not yet put: regcache_free() takes them
	 * too, so that a caller that lost one leaks no registration. */
	struct sdp_reg *uncached;
};

/* --- the registry ------------------------------------------------------------ */

/*
 * The release path -- sdp_regcache_invalidate() and every function of
 * this file it calls -- is not instrumented by a sanitizer, as the
 * preload's wrappers that call it are not (preload/memhooks.c): a
 * sanitizer's runtime calls those wrappers too, from where instrumented
 * code cannot run.  ThreadSanitizer starts a thread by asking
 * pthread_getattr_np() for its stack, which frees a block, before the
 * thread's own state exists; our free() then reached
 * sdp_regcache_invalidate(), whose instrumented entry faulted on the
 * thread's missing shadow stack, and the process hung in the report.  It
 * took a program that starts a thread while registrations are cached
 * (the soak under the preload).  rc_lock is still seen: the pthread calls
 * are intercepted, not instrumented.
 */
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define RC_NOSAN __attribute__((disable_sanitizer_instrumentation))
#endif
#endif
#ifndef RC_NOSAN
#define RC_NOSAN __attribute__((no_sanitize("thread")))
#endif

/*
 * Per-page filter: rc_filter[page % RC_FILTER] counts the listed anchors
 * that touch a page mapping there.  An anchor spanning RC_FILTER pages or
 * more would touch every slot: it is counted in rc_wide instead, which
 * sends every invalidation to the list.
 */
#define RC_PAGE_SHIFT 12
#define RC_FILTER 8192u

/* Protects the registry list (rc_head.gnext...), the registry fields of
 * every entry, and the writes to rc_live, rc_wide and rc_filter (their
 * lock-free readers only ever skip work on a zero).  A leaf lock: taken
 * with or without any engine or transport lock held, none taken inside. */
static pthread_mutex_t rc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_reg rc_head = { .gprev = &rc_head, .gnext = &rc_head };
unsigned long sdp_regcache_live;	/* listed entries */
static unsigned long rc_wide;
static uint32_t rc_filter[RC_FILTER];
/* Bumped in a fork child, whose registry starts empty: an inherited entry
 * (never used there: regcache.h) is not on the new list. */
static unsigned rc_gen = 1;
static int rc_tracking;
/* This thread holds rc_lock across fork() (rc_atfork_prepare): a free()
 * made by a later prepare handler must not wait for it. */
static __thread bool rc_fork_holder;

RC_NOSAN static void rc_lock_take(void)
{
	if (!rc_fork_holder)
		pthread_mutex_lock(&rc_lock);
}

RC_NOSAN static void rc_lock_drop(void)
{
	if (!rc_fork_holder)
		pthread_mutex_unlock(&rc_lock);
}

/* Add d to the filter slots of the pages of [lo, hi). */
RC_NOSAN static void rc_filter_add(uintptr_t lo, uintptr_t hi, int d)
{
	uintptr_t first = lo >> RC_PAGE_SHIFT, last = (hi - 1) >> RC_PAGE_SHIFT;

	if (last - first >= RC_FILTER) {
		__atomic_store_n(&rc_wide, rc_wide + (unsigned long)d, __ATOMIC_RELAXED);
		return;
	}
	for (uintptr_t p = first; p <= last; p++) {
		uint32_t *slot = &rc_filter[p % RC_FILTER];

		__atomic_store_n(slot, *slot + (uint32_t)d, __ATOMIC_RELAXED);
	}
}

/*
 * Might a listed anchor overlap [lo, hi)?  Lock-free: the counters are
 * written under rc_lock, and an entry that matters was listed before the
 * application could free its buffer (it was receiving into it), so its
 * counts are seen.
 */
RC_NOSAN static bool rc_filter_hit(uintptr_t lo, uintptr_t hi)
{
	uintptr_t first = lo >> RC_PAGE_SHIFT, last = (hi - 1) >> RC_PAGE_SHIFT;

	if (__atomic_load_n(&rc_wide, __ATOMIC_RELAXED) || last - first >= RC_FILTER)
		return true;
	for (uintptr_t p = first; p <= last; p++)
		if (__atomic_load_n(&rc_filter[p % RC_FILTER], __ATOMIC_RELAXED))
			return true;
	return false;
}

static void rc_list_locked(struct sdp_reg *e)
{
	e->gen = rc_gen;
	e->listed = true;
	e->gnext = rc_head.gnext;
	e->gprev = &rc_head;
	rc_head.gnext->gprev = e;
	rc_head.gnext = e;
	rc_filter_add(e->alo, e->ahi, 1);
	__atomic_store_n(&sdp_regcache_live, sdp_regcache_live + 1, __ATOMIC_RELAXED);
}

RC_NOSAN static void rc_unlist_locked(struct sdp_reg *e)
{
	if (!e->listed || e->gen != rc_gen)
		return;		/* invalidated already, or a fork parent's */
	e->listed = false;
	e->gprev->gnext = e->gnext;
	e->gnext->gprev = e->gprev;
	rc_filter_add(e->alo, e->ahi, -1);
	__atomic_store_n(&sdp_regcache_live, sdp_regcache_live - 1, __ATOMIC_RELAXED);
}

/*
 * fork: the registry lock is held across it, so that the child gets a
 * consistent list; the child then starts with an empty registry, since it
 * never uses its parent's connections.  Registered at the highest
 * constructor priority so that the prepare handler runs after the engine's
 * (pthread_atfork runs them last-registered first) and the child handler
 * before them.
 */
static void rc_atfork_prepare(void)
{
	pthread_mutex_lock(&rc_lock);
	rc_fork_holder = true;
}

static void rc_atfork_parent(void)
{
	rc_fork_holder = false;
	pthread_mutex_unlock(&rc_lock);
}

static void rc_atfork_child(void)
{
	/* The child's one thread is the one that took the lock in prepare:
	 * it releases it (a re-init would leave ThreadSanitizer thinking it
	 * still held, and every lock after it taken under it). */
	rc_fork_holder = false;
	pthread_mutex_unlock(&rc_lock);
	rc_gen++;
	rc_head.gnext = rc_head.gprev = &rc_head;
	if (sdp_regcache_live || rc_wide) {
		for (unsigned i = 0; i < RC_FILTER; i++)
			if (rc_filter[i])
				rc_filter[i] = 0;
	}
	sdp_regcache_live = 0;
	rc_wide = 0;
}

__attribute__((constructor(101))) static void rc_register_atfork(void)
{
	pthread_atfork(rc_atfork_prepare, rc_atfork_parent, rc_atfork_child);
}

void sdp_regcache_tracking_on(void)
{
	__atomic_store_n(&rc_tracking, 1, __ATOMIC_RELEASE);
}

RC_NOSAN void sdp_regcache_invalidate(const void *addr, size_t len)
{
	if (!__atomic_load_n(&sdp_regcache_live, __ATOMIC_RELAXED) || !len)
		return;

	uintptr_t lo = (uintptr_t)addr;
	uintptr_t hi = len > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + len;

	if (!rc_filter_hit(lo, hi))
		return;
	rc_lock_take();
	for (struct sdp_reg *e = rc_head.gnext, *next; e != &rc_head; e = next) {
		next = e->gnext;
		if (e->alo < hi && lo < e->ahi) {
			rc_unlist_locked(e);
			__atomic_store_n(&e->dead, 1, __ATOMIC_RELAXED);
			SDP_STAT_INC(regcache_invalidations, 1);
		}
	}
	rc_lock_drop();
}

/* --- the owner's side ---------------------------------------------------------- */

static uintptr_t rc_page_mask(void)
{
	static uintptr_t mask;
	uintptr_t m = __atomic_load_n(&mask, __ATOMIC_RELAXED);

	if (!m) {
		long ps = sysconf(_SC_PAGESIZE);

		m = (uintptr_t)(ps > 0 ? ps : 4096) - 1;
		__atomic_store_n(&mask, m, __ATOMIC_RELAXED);
	}
	return m;
}

/*
 * Is [lo, hi) on the calling thread's stack, and that thread not the
 * main one?  Such a buffer is not cached: when the thread ends, libc
 * zaps or unmaps its stack with calls of its own that the preload never
 * sees, and the next thread given that stack would hit a registration of
 * pages that are no longer there.  (The main thread's stack never goes.
 * A buffer on another thread's stack is not recognised: see memhooks.c.)
 */
static bool rc_on_thread_stack(uintptr_t lo, uintptr_t hi)
{
	static __thread int known;	/* 1: stk_lo/stk_hi set (0/0: no stack to avoid) */
	static __thread uintptr_t stk_lo, stk_hi;

	if (!known) {
		pthread_attr_t attr;
		void *base;
		size_t size;

		if (getpid() != gettid() && !pthread_getattr_np(pthread_self(), &attr)) {
			if (!pthread_attr_getstack(&attr, &base, &size)) {
				stk_lo = (uintptr_t)base;
				stk_hi = stk_lo + size;
			}
			pthread_attr_destroy(&attr);
		}
		known = 1;
	}
	return lo < stk_hi && stk_lo < hi;
}

struct sdp_regcache *regcache_new(const struct oti_ops *t, struct oti_ep *ep, unsigned access)
{
	struct sdp_regcache *rc = calloc(1, sizeof(*rc));

	if (rc) {
		rc->t = t;
		rc->ep = ep;
		rc->access = access;
		rc->max_entries = (size_t)tun_int(TUN_regcache_entries);
		rc->max_bytes = (size_t)tun_int(TUN_regcache_max_bytes);
		/* Only local access is cached (regcache.h).  On iWARP a read's
		 * sink needs remote write, and its key goes to the peer in
		 * the read request: kept, it would let the peer write into
		 * the application's buffer long after the read.  Such a
		 * cache registers for each use instead. */
		if (access & (OTI_ACCESS_REMOTE_READ | OTI_ACCESS_REMOTE_WRITE))
			rc->max_entries = 0;
	}
	return rc;
}

static void lru_unlink(struct sdp_regcache *rc, struct sdp_reg *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		rc->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		rc->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push(struct sdp_regcache *rc, struct sdp_reg *e)
{
	e->prev = NULL;
	e->next = rc->head;
	if (rc->head)
		rc->head->prev = e;
	else
		rc->tail = e;
	rc->head = e;
}

/* Off the cache and the registry, deregistered and freed.  The registry
 * lock is dropped before the transport and free() are called. */
static void rc_drop(struct sdp_regcache *rc, struct sdp_reg *e)
{
	lru_unlink(rc, e);
	rc->n--;
	rc->bytes -= e->hi - e->lo;
	rc_lock_take();
	rc_unlist_locked(e);
	rc_lock_drop();
	rc->t->mr_dereg(e->mr);
	free(e);
}

static bool rc_dead(const struct sdp_reg *e)
{
	return __atomic_load_n(&e->dead, __ATOMIC_RELAXED);
}

/* The least recently used entry nobody uses, or NULL. */
static struct sdp_reg *rc_victim(struct sdp_regcache *rc)
{
	for (struct sdp_reg *e = rc->tail; e; e = e->prev)
		if (!e->refs)
			return e;
	return NULL;
}

/*
 * Make room for an entry of size bytes: evict unused entries, least
 * recently used first.  False when the bounds cannot be met (everything
 * left is in use); nothing is evicted for an entry that could never fit.
 */
static bool rc_make_room(struct sdp_regcache *rc, size_t size)
{
	if (size > rc->max_bytes || !rc->max_entries)
		return false;
	while (rc->n + 1 > rc->max_entries || rc->bytes + size > rc->max_bytes) {
		struct sdp_reg *v = rc_victim(rc);

		if (!v)
			return false;
		if (!rc_dead(v))
			SDP_STAT_INC(regcache_evictions, 1);
		rc_drop(rc, v);
	}
	return true;
}

/* A registration for this one use, deregistered at put. */
static int rc_get_uncached(struct sdp_regcache *rc, void *addr, size_t len,
			   struct sdp_reg **reg, struct oti_mr **mr)
{
	struct sdp_reg *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	ret = rc->t->mr_reg(rc->ep, addr, len, rc->access, &r->mr);
	if (ret) {
		free(r);
		return ret;
	}
	r->next = rc->uncached;
	if (r->next)
		r->next->prev = r;
	rc->uncached = r;
	*reg = r;
	*mr = r->mr;
	return 0;
}

int regcache_get(struct sdp_regcache *rc, void *addr, size_t len, struct sdp_reg **reg,
		 struct oti_mr **mr)
{
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;
	struct sdp_reg *e, *next;
	int ret;

	if (!__atomic_load_n(&rc_tracking, __ATOMIC_ACQUIRE) || !rc->max_entries || !len ||
	    hi < lo)
		return rc_get_uncached(rc, addr, len, reg, mr);

	/* One pass: reap what was invalidated, find a live entry that covers
	 * the buffer. */
	for (e = rc->head; e; e = next) {
		next = e->next;
		if (rc_dead(e)) {
			if (!e->refs)
				rc_drop(rc, e);
			continue;
		}
		if (e->lo <= lo && hi <= e->hi)
			break;
	}
	if (e) {
		SDP_STAT_INC(regcache_hits, 1);
		e->refs++;
		lru_unlink(rc, e);
		lru_push(rc, e);
		*reg = e;
		*mr = e->mr;
		return 0;
	}
	SDP_STAT_INC(regcache_misses, 1);

	uintptr_t pm = rc_page_mask();
	uintptr_t plo = lo & ~pm, phi = (hi + pm) & ~pm;

	if (phi < hi || rc_on_thread_stack(lo, hi) || !rc_make_room(rc, phi - plo))
		return rc_get_uncached(rc, addr, len, reg, mr);
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	ret = rc->t->mr_reg(rc->ep, (void *)plo, phi - plo, rc->access, &e->mr);
	if (ret) {
		free(e);
		return ret;
	}
	e->lo = plo;
	e->hi = phi;
	e->alo = lo;
	e->ahi = hi;
	e->refs = 1;
	e->cached = true;
	lru_push(rc, e);
	rc->n++;
	rc->bytes += phi - plo;
	rc_lock_take();
	rc_list_locked(e);
	rc_lock_drop();
	*reg = e;
	*mr = e->mr;
	return 0;
}

void regcache_put(struct sdp_regcache *rc, struct sdp_reg *reg)
{
	if (!reg->cached) {
		if (reg->prev)
			reg->prev->next = reg->next;
		else
			rc->uncached = reg->next;
		if (reg->next)
			reg->next->prev = reg->prev;
		rc->t->mr_dereg(reg->mr);
		free(reg);
		return;
	}
	if (--reg->refs)
		return;
	/* Invalidated while in use: the transport was still writing into
	 * the pages, so it could not be deregistered before now. */
	if (rc_dead(reg))
		rc_drop(rc, reg);
}

void regcache_free(struct sdp_regcache *rc)
{
	if (!rc)
		return;
	while (rc->head)
		rc_drop(rc, rc->head);
	while (rc->uncached)
		regcache_put(rc, rc->uncached);
	free(rc);
}
