/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The system-call layer (sys.h says which functions and why).
 */
#include "sys.h"

#include <dlfcn.h>
#include <errno.h>

struct sys_calls sys;

/*
 * The preload defines this (preload/interpose.c, exported by libsdp.map):
 * here, a weak reference that the preload's own link resolves and the
 * engine library's does not, so that the code knows which library it is
 * in; and, looked up by name, whether the preload is in the process.
 */
extern const char libsdp_preload[] __attribute__((weak));

/* What a call whose libc symbol is missing gets: ENOSYS, as from a kernel
 * that lacks the system call.  One function serves every signature: the
 * callers only look at the -1. */
static long sys_missing(void)
{
	errno = ENOSYS;
	return -1;
}

bool sys_resolve(void)
{
	/* In the preload, past its own wrappers.  In the engine library,
	 * what the program's calls get, unless the preload's wrappers are
	 * in front of them: then past the engine library, which the
	 * preload (first in the process) is not. */
	void *where = libsdp_preload || dlsym(RTLD_DEFAULT, "libsdp_preload") ? RTLD_NEXT
									    : RTLD_DEFAULT;
	bool all = true;
	void *p;

	/* dlsym() is thread-safe; concurrent resolvers store the same
	 * values.  Relaxed atomic stores keep the compilers and TSan honest
	 * about it. */
#define SYS_RESOLVE(name, ret, args)                                        \
	p = dlsym(where, #name);                                            \
	if (!p) {                                                           \
		all = false;                                                \
		p = (void *)sys_missing;                                    \
	}                                                                   \
	__atomic_store_n((void **)&sys.name, p, __ATOMIC_RELEASE);
	SYS_CALLS(SYS_RESOLVE)
#undef SYS_RESOLVE
	return all;
}

/* Before any of libsdp's code runs: the other constructors of libsdp make
 * no system call, nor do the libraries it links, through this table. */
__attribute__((constructor(101))) static void sys_init(void)
{
	(void)sys_resolve();
}
