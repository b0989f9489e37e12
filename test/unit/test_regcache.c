/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The registration cache (sdp/regcache.c) over a fake transport whose
 * mr_reg/mr_dereg only count, and check that a registration is never
 * deregistered twice nor used after it was.  Tracking (what the preload
 * turns on) is one-way, so every test runs in a process of its own (the
 * Criterion default).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "regcache.h"
#include "tunables.h"

#define PG 4096u

struct fake_mr {
	struct oti_mr mr;
	int live;		/* 1 between mr_reg and mr_dereg */
};

static unsigned long n_reg, n_dereg;
static int fail_reg;		/* mr_reg fails with this (negative) */

static int fake_mr_reg(struct oti_ep *ep, void *addr, size_t len, unsigned access,
		       struct oti_mr **out)
{
	struct fake_mr *m;

	(void)ep;
	if (fail_reg)
		return fail_reg;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->mr.addr = addr;
	m->mr.len = len;
	m->mr.access = access;
	m->live = 1;
	__atomic_add_fetch(&n_reg, 1, __ATOMIC_RELAXED);
	*out = &m->mr;
	return 0;
}

static int fake_mr_dereg(struct oti_mr *mr)
{
	struct fake_mr *m = (struct fake_mr *)mr;

	/* Not cr_assert: this may run in another thread. */
	if (__atomic_exchange_n(&m->live, 0, __ATOMIC_RELAXED) != 1)
		abort();	/* deregistered twice */
	__atomic_add_fetch(&n_dereg, 1, __ATOMIC_RELAXED);
	free(m);
	return 0;
}

static const struct oti_ops fake = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "fake",
	.mr_reg = fake_mr_reg,
	.mr_dereg = fake_mr_dereg,
};

/* Buffers with a known page geometry. */
static uint8_t arena[256 * PG] __attribute__((aligned(PG)));

static unsigned long regs(void)
{
	return __atomic_load_n(&n_reg, __ATOMIC_RELAXED);
}

static unsigned long deregs(void)
{
	return __atomic_load_n(&n_dereg, __ATOMIC_RELAXED);
}

static struct sdp_stats stats(void)
{
	struct sdp_stats st;

	sdp_get_stats(&st);
	return st;
}

static void set(const char *name, long v)
{
	char num[32];

	snprintf(num, sizeof(num), "%ld", v);
	cr_assert_eq(tun_set(name, num), 0, "%s %s", name, num);
}

/* A cache with caching on, and the bounds given (0: the default). */
static struct sdp_regcache *cache(long entries, long bytes)
{
	struct sdp_regcache *rc;

	if (sysconf(_SC_PAGESIZE) != PG)
		cr_skip_test("the page geometry of these tests is for 4 KiB pages");
	if (entries)
		set("regcache_entries", entries);
	if (bytes)
		set("regcache_max_bytes", bytes);
	sdp_regcache_tracking_on();
	rc = regcache_new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(rc);
	return rc;
}

/* get, asserting success; returns the mr. */
static struct oti_mr *get(struct sdp_regcache *rc, void *addr, size_t len, struct sdp_reg **reg)
{
	struct oti_mr *mr = NULL;

	cr_assert_eq(regcache_get(rc, addr, len, reg, &mr), 0);
	cr_assert_not_null(mr);
	cr_assert(((struct fake_mr *)mr)->live, "a dead registration was handed out");
	cr_assert_leq((uintptr_t)mr->addr, (uintptr_t)addr);
	cr_assert_geq((uintptr_t)mr->addr + mr->len, (uintptr_t)addr + len);
	return mr;
}

/* get and put at once. */
static struct oti_mr *touch(struct sdp_regcache *rc, void *addr, size_t len)
{
	struct sdp_reg *reg;
	struct oti_mr *mr = get(rc, addr, len, &reg);

	regcache_put(rc, reg);
	return mr;
}

Test(regcache, hit_and_miss)
{
	struct sdp_regcache *rc = cache(0, 0);
	struct oti_mr *a = touch(rc, arena, 16 * PG);

	cr_assert_eq(regs(), 1);
	cr_assert_eq(touch(rc, arena, 16 * PG), a, "the same buffer hits");
	cr_assert_eq(touch(rc, arena + PG, 2 * PG), a, "a buffer inside it hits");
	cr_assert_eq(regs(), 1);
	cr_assert_eq(deregs(), 0, "a cached registration stays");

	touch(rc, arena + 15 * PG, 2 * PG);		/* crosses its end: a miss */
	cr_assert_eq(regs(), 2);

	struct sdp_stats st = stats();

	cr_assert_eq(st.regcache_hits, 2);
	cr_assert_eq(st.regcache_misses, 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, whole_pages_are_registered)
{
	struct sdp_regcache *rc = cache(0, 0);
	uint8_t *base = arena + 8 * PG;
	struct oti_mr *a = touch(rc, base + 100, 5000);

	/* Bytes 100..5100 of the pages: the two pages around them. */
	cr_assert_eq(a->addr, base);
	cr_assert_eq(a->len, 2 * PG);
	/* Other buffers in those pages, at either edge, hit. */
	cr_assert_eq(touch(rc, base, 10), a);
	cr_assert_eq(touch(rc, base + 2 * PG - 10, 10), a);
	cr_assert_eq(regs(), 1);
	/* One byte past them does not. */
	touch(rc, base + 2 * PG - 10, 11);
	cr_assert_eq(regs(), 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, lru_eviction_by_entries)
{
	struct sdp_regcache *rc = cache(2, 0);
	struct oti_mr *a = touch(rc, arena, PG);
	touch(rc, arena + 4 * PG, PG);			/* b */
	cr_assert_eq(touch(rc, arena, PG), a);		/* a is now the most recent */
	touch(rc, arena + 8 * PG, PG);			/* c: b goes */
	cr_assert_eq(deregs(), 1);
	cr_assert_eq(stats().regcache_evictions, 1);
	cr_assert_eq(touch(rc, arena, PG), a, "a stayed");
	cr_assert_eq(regs(), 3);
	touch(rc, arena + 4 * PG, PG);			/* b again: a miss */
	cr_assert_eq(regs(), 4);
	regcache_free(rc);
	cr_assert_eq(deregs(), 4);
}

Test(regcache, lru_eviction_by_bytes)
{
	struct sdp_regcache *rc = cache(16, 4 * PG);

	touch(rc, arena, PG);				/* a */
	touch(rc, arena + 4 * PG, 2 * PG);		/* 3 pages cached */
	cr_assert_eq(deregs(), 0);
	touch(rc, arena + 8 * PG, 2 * PG);		/* 5 > 4: a, the oldest, goes */
	cr_assert_eq(deregs(), 1);
	cr_assert_eq(stats().regcache_evictions, 1);
	touch(rc, arena, PG);
	cr_assert_eq(regs(), 4, "a was evicted");
	/* Bigger than the whole cache: registered for one use, nothing
	 * evicted for it. */
	unsigned long d = deregs();

	touch(rc, arena + 16 * PG, 5 * PG);
	cr_assert_eq(deregs(), d + 1, "registered and deregistered at put");
	cr_assert_eq(stats().regcache_evictions, 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), regs());
}

Test(regcache, an_entry_in_use_is_never_evicted)
{
	struct sdp_regcache *rc = cache(1, 0);
	struct sdp_reg *ra, *rb;
	struct oti_mr *a = get(rc, arena, PG, &ra);

	/* The cache is full of a in use: b is registered for itself. */
	get(rc, arena + 4 * PG, PG, &rb);
	cr_assert_eq(regs(), 2);
	cr_assert_eq(deregs(), 0);
	cr_assert(((struct fake_mr *)a)->live);
	regcache_put(rc, rb);
	cr_assert_eq(deregs(), 1, "an uncached registration goes at put");
	regcache_put(rc, ra);
	cr_assert_eq(touch(rc, arena, PG), a, "a stayed cached");
	cr_assert_eq(stats().regcache_evictions, 0);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, two_uses_of_one_entry)
{
	struct sdp_regcache *rc = cache(1, 0);
	struct sdp_reg *r1, *r2;
	struct oti_mr *a = get(rc, arena, 2 * PG, &r1);

	cr_assert_eq(get(rc, arena + PG, PG, &r2), a);
	regcache_put(rc, r1);
	/* Still in use once: not evicted for another buffer. */
	touch(rc, arena + 8 * PG, PG);
	cr_assert(((struct fake_mr *)a)->live);
	regcache_put(rc, r2);
	touch(rc, arena + 8 * PG, PG);		/* now a can go */
	cr_assert_eq(stats().regcache_evictions, 1);
	regcache_free(rc);
	cr_assert_eq(deregs(), regs());
}

Test(regcache, invalidate_an_unused_entry)
{
	struct sdp_regcache *rc = cache(0, 0);
	struct oti_mr *a = touch(rc, arena, 4 * PG);

	cr_assert(sdp_regcache_active());
	sdp_regcache_invalidate(arena + PG, 1);
	cr_assert_eq(stats().regcache_invalidations, 1);
	cr_assert_not(sdp_regcache_active(), "nothing live is left");
	/* Never from the invalidating call: the owner deregisters. */
	cr_assert_eq(deregs(), 0);
	struct oti_mr *b = touch(rc, arena, 4 * PG);

	cr_assert_eq(regs(), 2, "the next get registers again");
	cr_assert_eq(deregs(), 1, "and the dead entry went");
	cr_assert(((struct fake_mr *)b)->live);
	(void)a;
	/* A second invalidation of the same range finds only b. */
	sdp_regcache_invalidate(arena, 4 * PG);
	sdp_regcache_invalidate(arena, 4 * PG);
	cr_assert_eq(stats().regcache_invalidations, 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2, "each deregistered exactly once");
}

Test(regcache, invalidate_an_entry_in_use)
{
	struct sdp_regcache *rc = cache(0, 0);
	struct sdp_reg *r;
	struct oti_mr *a = get(rc, arena, 4 * PG, &r);

	sdp_regcache_invalidate(arena, 4 * PG);
	/* The transport may still be writing into it. */
	cr_assert(((struct fake_mr *)a)->live);
	cr_assert_eq(deregs(), 0);
	regcache_put(rc, r);
	cr_assert_eq(deregs(), 1, "deregistered at put");
	touch(rc, arena, 4 * PG);
	cr_assert_eq(regs(), 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, only_the_anchor_buffer_counts)
{
	struct sdp_regcache *rc = cache(0, 0);
	uint8_t *base = arena + 32 * PG;
	struct oti_mr *a = touch(rc, base + 1000, 2 * PG);	/* pages 0..2 */

	/* A neighbour sharing an edge page is freed: the page stays (a
	 * byte of the live buffer is in it), so does the entry. */
	sdp_regcache_invalidate(base, 1000);
	sdp_regcache_invalidate(base + 1000 + 2 * PG, 100);
	cr_assert_eq(touch(rc, base + 1000, 2 * PG), a);
	cr_assert_eq(stats().regcache_invalidations, 0);
	/* Unmapping the edge page (whole pages) takes the buffer's head. */
	sdp_regcache_invalidate(base, PG);
	cr_assert_eq(stats().regcache_invalidations, 1);
	touch(rc, base + 1000, 2 * PG);
	cr_assert_eq(regs(), 2, "registered again");
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, invalidate_with_nothing_cached)
{
	/* No cache, or caching off: nothing to do, nothing counted. */
	sdp_regcache_invalidate(arena, sizeof(arena));
	sdp_regcache_invalidate(NULL, 0);
	sdp_regcache_invalidate((void *)(UINTPTR_MAX - 10), 100);
	cr_assert_not(sdp_regcache_active());
	cr_assert_eq(stats().regcache_invalidations, 0);
}

Test(regcache, tracking_off_means_no_caching)
{
	struct sdp_regcache *rc = regcache_new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE);
	struct oti_mr *a;

	cr_assert_not_null(rc);
	a = touch(rc, arena + 100, 5000);
	cr_assert_eq(deregs(), 1, "deregistered at put");
	touch(rc, arena + 100, 5000);
	cr_assert_eq(regs(), 2);
	cr_assert_eq(deregs(), 2);
	(void)a;
	cr_assert_not(sdp_regcache_active());
	struct sdp_stats st = stats();

	cr_assert_eq(st.regcache_hits + st.regcache_misses, 0);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

/* iWARP: a read's sink has remote write, and the peer learns its key
 * from the read request: such registrations are never kept. */
Test(regcache, remote_access_means_no_caching)
{
	if (sysconf(_SC_PAGESIZE) != PG)
		cr_skip_test("the page geometry of these tests is for 4 KiB pages");
	sdp_regcache_tracking_on();
	struct sdp_regcache *rc =
		regcache_new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	struct sdp_reg *r;

	cr_assert_not_null(rc);
	struct oti_mr *a = get(rc, arena + 100, 5000, &r);

	cr_assert_eq(a->access, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	regcache_put(rc, r);
	cr_assert_eq(deregs(), 1, "deregistered at put, though tracking is on");
	touch(rc, arena + 100, 5000);
	cr_assert_eq(regs(), 2, "registered again: nothing was kept");
	cr_assert_eq(deregs(), 2);
	regcache_free(rc);
	cr_assert_eq(deregs(), 2);
}

Test(regcache, exact_range_without_caching)
{
	struct sdp_regcache *rc = regcache_new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE);
	struct sdp_reg *r;
	struct oti_mr *a = get(rc, arena + 100, 5000, &r);

	cr_assert_eq(a->addr, arena + 100);
	cr_assert_eq(a->len, 5000);
	regcache_put(rc, r);
	regcache_free(rc);
}

Test(regcache, zero_entries_means_no_caching)
{
	struct sdp_regcache *rc;

	set("regcache_entries", 0);
	rc = cache(0, 0);
	touch(rc, arena, PG);
	touch(rc, arena, PG);
	cr_assert_eq(regs(), 2);
	cr_assert_eq(deregs(), 2);
	cr_assert_not(sdp_regcache_active());
	regcache_free(rc);
}

Test(regcache, free_deregisters_everything)
{
	struct sdp_regcache *rc = cache(0, 0);
	struct sdp_regcache *other = regcache_new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE);

	for (int i = 0; i < 5; i++)
		touch(rc, arena + (size_t)i * 4 * PG, PG);
	touch(other, arena + 64 * PG, PG);
	sdp_regcache_invalidate(arena, PG);	/* one of them dead already */
	cr_assert_eq(deregs(), 0);
	regcache_free(rc);
	cr_assert_eq(deregs(), 5);
	cr_assert(sdp_regcache_active(), "the other cache's entry is live");
	regcache_free(other);
	cr_assert_eq(deregs(), 6);
	cr_assert_not(sdp_regcache_active());
	regcache_free(NULL);
}

Test(regcache, free_takes_what_was_not_put)
{
	struct sdp_regcache *rc = cache(1, 0);
	struct sdp_reg *r1, *r2;

	get(rc, arena, PG, &r1);		/* cached, in use */
	get(rc, arena + 4 * PG, PG, &r2);	/* no room: uncached */
	regcache_free(rc);
	cr_assert_eq(regs(), 2);
	cr_assert_eq(deregs(), 2, "no registration outlives its cache");
	cr_assert_not(sdp_regcache_active());
}

Test(regcache, transport_errors_are_returned)
{
	struct sdp_regcache *rc = cache(0, 0);
	struct sdp_reg *r;
	struct oti_mr *mr;

	fail_reg = -EFAULT;
	cr_assert_eq(regcache_get(rc, arena, PG, &r, &mr), -EFAULT);
	fail_reg = 0;
	cr_assert_not(sdp_regcache_active());
	touch(rc, arena, PG);
	regcache_free(rc);
	cr_assert_eq(deregs(), 1);
}

static int stack_is_real;

static void *on_thread_stack(void *arg)
{
	struct sdp_regcache *rc = arg;
	uint8_t buf[3 * PG];
	pthread_attr_t attr;
	void *base;
	size_t size;

	/* AddressSanitizer may put buf on a fake stack of its own. */
	if (!pthread_getattr_np(pthread_self(), &attr)) {
		if (!pthread_attr_getstack(&attr, &base, &size))
			stack_is_real = (uintptr_t)buf >= (uintptr_t)base &&
					(uintptr_t)buf < (uintptr_t)base + size;
		pthread_attr_destroy(&attr);
	}
	memset(buf, 0, sizeof(buf));
	touch(rc, buf, sizeof(buf));
	touch(rc, buf, sizeof(buf));
	/* A heap buffer of the same thread is cached as usual. */
	touch(rc, arena, PG);
	touch(rc, arena, PG);
	return NULL;
}

Test(regcache, a_thread_stack_buffer_is_not_cached)
{
	struct sdp_regcache *rc = cache(0, 0);
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, on_thread_stack, rc), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	if (!stack_is_real) {
		regcache_free(rc);
		cr_skip_test("the buffer was not on the thread's stack (a sanitizer's fake stack)");
	}
	cr_assert_eq(regs(), 3, "the stack buffer twice, the arena once");
	cr_assert_eq(deregs(), 2);
	regcache_free(rc);
}

Test(regcache, a_fork_child_starts_empty)
{
	struct sdp_regcache *rc = cache(0, 0);
	pid_t pid;
	int status;

	touch(rc, arena, PG);
	cr_assert(sdp_regcache_active());
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* Nothing of the parent's is live here; invalidations are
		 * free again and find nothing. */
		int ok = !sdp_regcache_active();

		sdp_regcache_invalidate(arena, PG);
		ok = ok && stats().regcache_invalidations == 0;
		_exit(ok ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_assert(sdp_regcache_active(), "the parent's entry is untouched");
	regcache_free(rc);
	cr_assert_eq(deregs(), 1);
}

/*
 * Invalidations from another thread while the owner gets and puts: every
 * registration is deregistered once, never while handed out (get()
 * checks), and all of them by the end.
 */
#define CC_BUFS 8
#define CC_ROUNDS 20000

static int cc_stop;

static void *cc_invalidator(void *arg)
{
	unsigned seed = 1;

	(void)arg;
	while (!__atomic_load_n(&cc_stop, __ATOMIC_RELAXED)) {
		unsigned i = (unsigned)rand_r(&seed) % (CC_BUFS * 2);

		/* Half of them hit a buffer, half the pages between. */
		sdp_regcache_invalidate(arena + (size_t)i * 4 * PG + (i & 1 ? 2 * PG : 0), PG);
	}
	return NULL;
}

Test(regcache, concurrent_invalidation)
{
	struct sdp_regcache *rc = cache(4, 0);
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, cc_invalidator, NULL), 0);
	for (int r = 0; r < CC_ROUNDS; r++) {
		struct sdp_reg *reg;
		uint8_t *b = arena + (size_t)(r % CC_BUFS) * 8 * PG;

		get(rc, b, PG, &reg);
		regcache_put(rc, reg);
	}
	__atomic_store_n(&cc_stop, 1, __ATOMIC_RELAXED);
	cr_assert_eq(pthread_join(t, NULL), 0);
	regcache_free(rc);
	cr_assert_eq(deregs(), regs());
	cr_assert_not(sdp_regcache_active());

	struct sdp_stats st = stats();

	cr_assert_eq(st.regcache_hits + st.regcache_misses, CC_ROUNDS);
	cr_assert_eq(st.regcache_misses, regs());
}
