/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libsdp.so: the calls that give memory back, interposed, so that the
 * registration cache (sdp/regcache.h) never hands the transport a
 * registration of pages that are gone.  Each wrapper tells the cache what
 * is about to go (sdp_regcache_invalidate()), then calls the real function.
 * With nothing cached that costs one relaxed load.
 *
 * Seen, before the memory goes:
 *   free(), and realloc()/reallocarray() of a block, as the block's whole
 *     usable size (malloc_usable_size() of the allocator that owns free,
 *     so a program's jemalloc or tcmalloc is asked about its own blocks).
 *     realloc() gives up the old block whether it grows, shrinks or stays:
 *     whether it moves is only known once the old block is already free,
 *     and an allocator may move it even to shrink it.
 *   munmap(); mremap() (the old range when it may move or shrinks, and the
 *     range MREMAP_FIXED replaces); mmap() with MAP_FIXED over existing
 *     pages; madvise() with MADV_DONTNEED, MADV_DONTNEED_LOCKED, MADV_FREE
 *     or MADV_REMOVE (the others, MADV_DONTFORK included, keep the pages);
 *     posix_madvise() with POSIX_MADV_DONTNEED (a no-op in glibc; another
 *     libc may zap the pages).
 *   The allocator's own unmapping and trimming inside free() (glibc calls
 *     its internal munmap/madvise/brk, which no wrapper sees): it only ever
 *     gives back pages wholly made of blocks that were already freed
 *     through the wrapper, and a cached registration's pages each hold a
 *     byte of a buffer still allocated (regcache.c).
 *
 * Not seen:
 *   - raw system calls (syscall(SYS_munmap, ...), inline assembly), a
 *     program's own brk()/sbrk(), shmdt(), shmat(SHM_REMAP), memory given
 *     up by a file's truncation or hole punching under a shared mapping;
 *   - libc's and the dynamic loader's internal unmapping: the stack of a
 *     thread that ended (a buffer on the calling thread's own stack is
 *     never cached for that reason, one on another thread's stack is not
 *     recognised), the data of a library that dlclose() unloads.
 *   A program that receives zero-copy into such memory must run with
 *   regcache_entries 0.
 *
 * When the wrappers are not the ones the program calls, caching stays off
 * (sdp_regcache_tracking_on() is never called) and every zero-copy read
 * registers its buffer for itself, which is always correct: libsdp.so was
 * dlopen()ed rather than preloaded, or the program or a library before us
 * in the search order defines free() (a statically linked allocator; an
 * AddressSanitizer build, whose runtime comes first and whose free() never
 * reaches ours), or the allocator that owns free() has no
 * malloc_usable_size(), or valgrind runs the program (memcheck redirects
 * free() and realloc() wherever they are defined, ours included; mh_init()
 * sees its probe block never reach them).  Under ThreadSanitizer, preloaded
 * after libsdp.so as the tests do, ours come first and its allocator is
 * behind them: caching works there as without it.
 *
 * The real functions are found with dlsym(RTLD_NEXT) on first use (the
 * constructor does it early; a free() can come before it, from the dynamic
 * loader).  dlsym() itself may call free(): on that thread, while it
 * resolves, a free() leaks its pointer, realloc() fails with ENOMEM and
 * the mapping calls go straight to the kernel.  Threads that race to
 * resolve all store the same values.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "regcache.h"

#define EXPORT __attribute__((visibility("default")))
/* A sanitizer's runtime calls these from its own start-up, before it can
 * take an instrumented call (ThreadSanitizer's dlsym() frees memory while
 * it initialises): none of them is instrumented. */
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define MH_NOSAN __attribute__((disable_sanitizer_instrumentation))
#endif
#endif
#ifndef MH_NOSAN
#define MH_NOSAN __attribute__((no_sanitize("thread")))
#endif

static struct {
	void (*free)(void *);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);	/* NULL: done with realloc */
	size_t (*usable)(void *);			/* malloc_usable_size */
	int (*munmap)(void *, size_t);
	void *(*mremap)(void *, size_t, size_t, int, ...);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	void *(*mmap64)(void *, size_t, int, int, int, off64_t);
	int (*madvise)(void *, size_t, int);
	int (*posix_madvise)(void *, size_t, int);
} real;

static int mh_resolved;
/* The block mh_init() passes through the program's reallocarray(),
 * realloc() and free(), and which of ours it reached (bits 4, 2, 1). */
static void *mh_probe;
static int mh_probe_seen;
/* This thread is inside mh_resolve(): dlsym() came back here. */
static __thread bool mh_resolving __attribute__((tls_model("initial-exec")));

#define MH_LOAD(p) __atomic_load_n(&(p), __ATOMIC_RELAXED)

/* True once the real functions are known (free and realloc at least). */
MH_NOSAN static bool mh_resolve(void)
{
	if (__atomic_load_n(&mh_resolved, __ATOMIC_ACQUIRE))
		return true;
	if (mh_resolving)
		return false;
	mh_resolving = true;
#define MH_SYM(field, name) \
	__atomic_store_n((void **)&real.field, dlsym(RTLD_NEXT, name), __ATOMIC_RELAXED)
	MH_SYM(free, "free");
	MH_SYM(realloc, "realloc");
	MH_SYM(reallocarray, "reallocarray");
	MH_SYM(usable, "malloc_usable_size");
	MH_SYM(munmap, "munmap");
	MH_SYM(mremap, "mremap");
	MH_SYM(mmap, "mmap");
	MH_SYM(mmap64, "mmap64");
	MH_SYM(madvise, "madvise");
	MH_SYM(posix_madvise, "posix_madvise");
#undef MH_SYM
	mh_resolving = false;
	if (!MH_LOAD(real.free) || !MH_LOAD(real.realloc))
		return false;
	__atomic_store_n(&mh_resolved, 1, __ATOMIC_RELEASE);
	return true;
}

/* Are a and b in the same loaded object? */
MH_NOSAN static bool mh_same_object(const void *a, const void *b)
{
	Dl_info ia, ib;

	return a && b && dladdr(a, &ia) && dladdr(b, &ib) && ia.dli_fbase == ib.dli_fbase;
}

/*
 * Caching is safe only if every release goes through these wrappers:
 * each name must resolve to ours in the program's global scope, and the
 * free() behind ours must come with the malloc_usable_size() that knows
 * its blocks.
 */
MH_NOSAN static bool mh_hooks_in_charge(void)
{
	static const char *const names[] = {
		"free", "realloc", "reallocarray", "munmap", "mremap", "mmap", "mmap64",
		"madvise", "posix_madvise",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!mh_same_object(dlsym(RTLD_DEFAULT, names[i]), &real))
			return false;
	size_t (*usable)(void *) = MH_LOAD(real.usable);

	if (!usable || !mh_same_object((void *)MH_LOAD(real.free), (void *)usable))
		return false;

	/* Being found is not enough: valgrind redirects free() and realloc()
	 * wherever they are defined, ours too.  Call them as the program
	 * does and see them arrive. */
	void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
	void *(*ra)(void *, size_t, size_t) =
		(void *(*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "reallocarray");
	void *(*r)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "realloc");
	void (*f)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
	void *p, *q;
	int seen = 0;

	if (!m || !ra || !r || !f || !(p = m(64)))
		return false;
	/* One call at a time: glibc's reallocarray() calls realloc(). */
	__atomic_store_n(&mh_probe, p, __ATOMIC_RELAXED);
	q = ra(p, 2, 64);
	seen |= __atomic_exchange_n(&mh_probe_seen, 0, __ATOMIC_RELAXED) & 4;
	if (q)
		p = q;
	__atomic_store_n(&mh_probe, p, __ATOMIC_RELAXED);
	q = r(p, 256);
	seen |= __atomic_exchange_n(&mh_probe_seen, 0, __ATOMIC_RELAXED) & 2;
	if (q)
		p = q;
	__atomic_store_n(&mh_probe, p, __ATOMIC_RELAXED);
	f(p);
	seen |= __atomic_exchange_n(&mh_probe_seen, 0, __ATOMIC_RELAXED) & 1;
	__atomic_store_n(&mh_probe, NULL, __ATOMIC_RELAXED);
	return seen == 7;
}

/* Is p mh_init()'s probe block?  Then say that this wrapper saw it. */
#define MH_PROBE(p, bit)                                                          \
	do {                                                                      \
		if (__builtin_expect((p) == MH_LOAD(mh_probe), 0) && (p))         \
			__atomic_fetch_or(&mh_probe_seen, (bit), __ATOMIC_RELAXED); \
	} while (0)

MH_NOSAN __attribute__((constructor)) static void mh_init(void)
{
	if (mh_resolve() && mh_hooks_in_charge())
		sdp_regcache_tracking_on();
}

/* [addr, addr + len) is about to go: tell the cache, if it holds anything
 * (so that nothing instrumented runs before something is cached). */
MH_NOSAN static inline void mh_gone(const void *addr, size_t len)
{
	if (sdp_regcache_active())
		sdp_regcache_invalidate(addr, len);
}

/* [p, p + usable size) of a block about to be freed or moved. */
MH_NOSAN static void mh_block_goes(void *p)
{
	size_t (*usable)(void *) = MH_LOAD(real.usable);

	if (p && usable && sdp_regcache_active())
		sdp_regcache_invalidate(p, usable(p));
}

EXPORT MH_NOSAN void free(void *p)
{
	void (*f)(void *) = MH_LOAD(real.free);

	if (__builtin_expect(!f, 0)) {
		if (!mh_resolve())
			return;		/* dlsym()'s own, before we know free: leaked */
		f = MH_LOAD(real.free);
	}
	MH_PROBE(p, 1);
	mh_block_goes(p);
	f(p);
}

EXPORT MH_NOSAN void *realloc(void *p, size_t n)
{
	void *(*f)(void *, size_t) = MH_LOAD(real.realloc);

	if (__builtin_expect(!f, 0)) {
		if (!mh_resolve()) {
			errno = ENOMEM;
			return NULL;
		}
		f = MH_LOAD(real.realloc);
	}
	MH_PROBE(p, 2);
	mh_block_goes(p);
	return f(p, n);
}

EXPORT MH_NOSAN void *reallocarray(void *p, size_t nmemb, size_t size)
{
	void *(*f)(void *, size_t, size_t);
	size_t n;

	if (__builtin_expect(!MH_LOAD(real.realloc), 0) && !mh_resolve()) {
		errno = ENOMEM;
		return NULL;
	}
	MH_PROBE(p, 4);
	f = MH_LOAD(real.reallocarray);
	if (f) {
		mh_block_goes(p);
		return f(p, nmemb, size);
	}
	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	mh_block_goes(p);
	return MH_LOAD(real.realloc)(p, n);
}

/* --- mappings ---------------------------------------------------------------------- */

EXPORT MH_NOSAN int munmap(void *addr, size_t len)
{
	int (*f)(void *, size_t);

	mh_gone(addr, len);
	if (!mh_resolve() || !(f = MH_LOAD(real.munmap)))
		return (int)syscall(SYS_munmap, addr, len);
	return f(addr, len);
}

EXPORT MH_NOSAN void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *(*f)(void *, size_t, size_t, int, ...);
	void *new_addr = NULL;
	int moving = MREMAP_MAYMOVE | MREMAP_FIXED;

#ifdef MREMAP_DONTUNMAP
	moving |= MREMAP_DONTUNMAP;
#endif
	if (flags & MREMAP_FIXED) {
		va_list ap;

		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
		/* Whatever was mapped there is replaced. */
		mh_gone(new_addr, new_len);
	}
	/* old_len 0 duplicates a shared mapping: nothing goes. */
	if (flags & moving)
		mh_gone(old, old_len);
	else if (new_len < old_len)
		mh_gone((char *)old + new_len, old_len - new_len);
	if (!mh_resolve() || !(f = MH_LOAD(real.mremap)))
		return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
	return f(old, old_len, new_len, flags, new_addr);
}

/* MAP_FIXED replaces what was mapped there (MAP_FIXED_NOREPLACE fails). */
MH_NOSAN static void mh_map_fixed(void *addr, size_t len, int flags)
{
	if (flags & MAP_FIXED)
		mh_gone(addr, len);
}

EXPORT MH_NOSAN void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *(*f)(void *, size_t, int, int, int, off_t);

	mh_map_fixed(addr, len, flags);
	if (!mh_resolve() || !(f = MH_LOAD(real.mmap)))
		return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
	return f(addr, len, prot, flags, fd, off);
}

EXPORT MH_NOSAN void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	void *(*f)(void *, size_t, int, int, int, off64_t);

	mh_map_fixed(addr, len, flags);
	if (!mh_resolve() || !(f = MH_LOAD(real.mmap64)))
		return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
	return f(addr, len, prot, flags, fd, off);
}

MH_NOSAN static bool mh_advice_zaps(int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_FREE:
	case MADV_REMOVE:
#ifdef MADV_DONTNEED_LOCKED
	case MADV_DONTNEED_LOCKED:
#endif
		return true;
	default:
		return false;
	}
}

EXPORT MH_NOSAN int madvise(void *addr, size_t len, int advice)
{
	int (*f)(void *, size_t, int);

	if (mh_advice_zaps(advice))
		mh_gone(addr, len);
	if (!mh_resolve() || !(f = MH_LOAD(real.madvise)))
		return (int)syscall(SYS_madvise, addr, len, advice);
	return f(addr, len, advice);
}

EXPORT MH_NOSAN int posix_madvise(void *addr, size_t len, int advice)
{
	int (*f)(void *, size_t, int);

	if (advice == POSIX_MADV_DONTNEED)
		mh_gone(addr, len);
	if (!mh_resolve() || !(f = MH_LOAD(real.posix_madvise))) {
		/* glibc's answer: DONTNEED does nothing, the rest are
		 * madvise() with an error number for a result. */
		if (advice == POSIX_MADV_DONTNEED)
			return 0;
		return syscall(SYS_madvise, addr, len, advice) ? errno : 0;
	}
	return f(addr, len, advice);
}
