/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The preload's memory-release wrappers (preload/memhooks.c) against the
 * registration cache, for real: each way a program gives memory back must
 * drop the cached registration of a buffer in it, and nothing else may.
 *
 *   regcache_hooks [--expect-tracking]
 *	run with LD_PRELOAD=libregcache_hooks.so, a test library holding the
 *	same wrappers and the engine, with the cache exported (libsdp.so
 *	exports nothing but libc's names).  The cache runs over a fake
 *	transport.  Without the option, a run where the wrappers are not in
 *	charge (AddressSanitizer's free() comes first) exits 77.
 *   regcache_hooks --exports LIBSDP_SO
 *	libsdp.so defines every wrapper, and when it is preloaded (without a
 *	sanitizer runtime before it) they are the ones the program calls.
 *
 * Prints one line per check; exits 0, 1 on a failed check, 77 to skip.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "oti.h"
#include "regcache.h"
#include "sdp.h"

#define MIB (1024 * 1024)

static int failed;

#define CHECK(cond, ...)                                  \
	do {                                              \
		if (cond) {                               \
			printf("ok: ");                   \
		} else {                                  \
			printf("FAILED: ");               \
			failed = 1;                       \
		}                                         \
		printf(__VA_ARGS__);                      \
		putchar('\n');                            \
	} while (0)

static const char *const hooked[] = {
	"free", "realloc", "reallocarray", "munmap", "mremap", "mmap", "mmap64",
	"madvise", "posix_madvise",
};
#define N_HOOKED (sizeof(hooked) / sizeof(hooked[0]))

/* The file an address is in, or "?". */
static const char *object_of(const void *p)
{
	Dl_info info;

	return p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
}

static int check_exports(const char *lib)
{
	void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
	const char *preloaded = getenv("LD_PRELOAD");

	if (!h) {
		printf("FAILED: dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	for (size_t i = 0; i < N_HOOKED; i++) {
		/* dlsym on the handle looks in the library first. */
		const char *in = object_of(dlsym(h, hooked[i]));

		CHECK(strstr(in, "libsdp.so") != NULL, "libsdp.so defines %s (found in %s)",
		      hooked[i], in);
		/* The program's calls reach it when it is the first preload. */
		if (preloaded && !strncmp(preloaded, lib, strlen(lib))) {
			in = object_of(dlsym(RTLD_DEFAULT, hooked[i]));
			CHECK(strstr(in, "libsdp.so") != NULL, "%s() calls reach libsdp.so (%s)",
			      hooked[i], in);
		}
	}
	return failed;
}

/* --- the cache over a fake transport ------------------------------------------ */

static unsigned long n_reg, n_dereg;

static int fake_mr_reg(struct oti_ep *ep, void *addr, size_t len, unsigned access,
		       struct oti_mr **out)
{
	struct oti_mr *mr = calloc(1, sizeof(*mr));

	(void)ep;
	if (!mr)
		return -ENOMEM;
	mr->addr = addr;
	mr->len = len;
	mr->access = access;
	n_reg++;
	*out = mr;
	return 0;
}

static int fake_mr_dereg(struct oti_mr *mr)
{
	n_dereg++;
	free(mr);
	return 0;
}

static const struct oti_ops fake = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "fake",
	.mr_reg = fake_mr_reg,
	.mr_dereg = fake_mr_dereg,
};

static struct {
	__typeof__(regcache_new) *new;
	__typeof__(regcache_get) *get;
	__typeof__(regcache_put) *put;
	__typeof__(regcache_free) *free;
	__typeof__(sdp_get_stats) *stats;
} rc_api;

static struct sdp_regcache *rc;

static uint64_t invalidations(void)
{
	struct sdp_stats st;

	rc_api.stats(&st);
	return st.regcache_invalidations;
}

/* get and put: did it register (a miss), or hit? */
static int registers(void *buf, size_t len)
{
	unsigned long before = n_reg;
	struct sdp_reg *reg;
	struct oti_mr *mr;

	if (rc_api.get(rc, buf, len, &reg, &mr)) {
		printf("FAILED: regcache_get\n");
		exit(1);
	}
	rc_api.put(rc, reg);
	return n_reg != before;
}

/* buf is cached (a second get hits); then release() must drop it. */
#define EXPECT_DROPPED(buf, len, release, what)                                     \
	do {                                                                        \
		registers(buf, len);                                                \
		CHECK(!registers(buf, len), "%s: cached before", what);             \
		uint64_t inv_ = invalidations();                                    \
		release;                                                            \
		CHECK(invalidations() > inv_, "%s: invalidated", what);             \
	} while (0)

static int run(int expect_tracking)
{
	const char *names[] = { "regcache_new", "regcache_get", "regcache_put", "regcache_free",
				"sdp_get_stats" };
	void **slots[] = { (void **)&rc_api.new, (void **)&rc_api.get, (void **)&rc_api.put,
			   (void **)&rc_api.free, (void **)&rc_api.stats };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*slots[i] = dlsym(RTLD_DEFAULT, names[i]);
		if (!*slots[i]) {
			printf("FAILED: %s not found: run with LD_PRELOAD=libregcache_hooks.so\n",
			       names[i]);
			return 1;
		}
	}
	rc = rc_api.new(&fake, NULL, OTI_ACCESS_LOCAL_WRITE);
	if (!rc) {
		printf("FAILED: regcache_new\n");
		return 1;
	}

	/* Caching is on only when the wrappers are the ones called. */
	uint8_t *probe = malloc(MIB);

	registers(probe, MIB);
	if (registers(probe, MIB)) {
		printf("%s: no caching: the wrappers are not in charge (free() is found in %s;"
		       " under valgrind calls never reach it)\n",
		       expect_tracking ? "FAILED" : "skip", object_of(dlsym(RTLD_DEFAULT, "free")));
		free(probe);
		rc_api.free(rc);
		return expect_tracking ? 1 : 77;
	}
	free(probe);

	/* free(): a big block (its own mapping in glibc, unmapped inside
	 * free where no wrapper sees it) and a small one (in the heap). */
	uint8_t *big = malloc(4 * MIB), *small = malloc(96 * 1024);
	unsigned long dereg = n_dereg;

	memset(big, 1, 4 * MIB);
	EXPECT_DROPPED(big, 4 * MIB, free(big), "free of a mapped block");
	EXPECT_DROPPED(small + 100, 64 * 1024, free(small), "free of a heap block");
	big = malloc(4 * MIB);
	CHECK(registers(big, 4 * MIB), "a new block at maybe the same address registers");
	CHECK(n_dereg >= dereg + 2, "the dropped registrations were deregistered");
	/* Unrelated frees leave it cached. */
	uint64_t inv = invalidations();

	for (int i = 0; i < 1000; i++)
		free(malloc((size_t)(i % 64 + 1) * 16));
	CHECK(!registers(big, 4 * MIB) && invalidations() == inv, "other frees leave it");
	free(big);

	/* realloc() and reallocarray(), growing and shrinking. */
	uint8_t *r = malloc(256 * 1024);

	EXPECT_DROPPED(r, 256 * 1024, r = realloc(r, 2 * MIB), "realloc growing");
	EXPECT_DROPPED(r, 2 * MIB, r = realloc(r, 128 * 1024), "realloc shrinking");
	EXPECT_DROPPED(r, 128 * 1024, r = reallocarray(r, 1024, 1024), "reallocarray");
	free(r);

	/* The mapping calls. */
	size_t len = 2 * MIB;
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED) {
		printf("FAILED: mmap\n");
		return 1;
	}
	/* Advice that keeps the pages keeps the registration. */
	registers(m, len);
	madvise(m, len, MADV_DONTFORK);
	madvise(m, len, MADV_WILLNEED);
	madvise(m, len, MADV_DOFORK);
	posix_madvise(m, len, POSIX_MADV_WILLNEED);
	CHECK(!registers(m, len), "madvise DONTFORK/WILLNEED keep it");
	EXPECT_DROPPED(m + 4096, 8192, madvise(m, 4096 * 3, MADV_DONTNEED), "madvise DONTNEED");
	EXPECT_DROPPED(m, 8192, madvise(m, 4096, MADV_FREE), "madvise FREE");
	EXPECT_DROPPED(m, 8192, posix_madvise(m, 8192, POSIX_MADV_DONTNEED),
		       "posix_madvise DONTNEED");
	EXPECT_DROPPED(m, len, mmap(m, 4096, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		       "mmap MAP_FIXED over it");
	EXPECT_DROPPED(m + MIB, MIB, m = mremap(m, len, 2 * len, MREMAP_MAYMOVE), "mremap");
	len *= 2;
	if (m == MAP_FAILED) {
		printf("FAILED: mremap\n");
		return 1;
	}
	EXPECT_DROPPED(m + len - 8192, 4096, munmap(m + len - MIB, MIB), "munmap of its tail");
	EXPECT_DROPPED(m, 4096, munmap(m, len - MIB), "munmap");

	rc_api.free(rc);
	CHECK(n_reg == n_dereg, "everything deregistered in the end (%lu/%lu)", n_reg, n_dereg);
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "--exports"))
		return check_exports(argv[2]);
	if (argc == 1 || (argc == 2 && !strcmp(argv[1], "--expect-tracking")))
		return run(argc == 2);
	fprintf(stderr, "usage: %s [--expect-tracking] | --exports LIBSDP_SO\n", argv[0]);
	return 2;
}
