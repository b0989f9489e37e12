/* SPDX-License-Identifier: BSD-2-Clause */
#include "native.h"

#include <dlfcn.h>
#include <errno.h>

#include "fdspace.h"

struct native_calls native;

/* What a call whose libc symbol is missing gets: ENOSYS, as from a kernel
 * that lacks the system call.  One function serves every signature: the
 * callers only look at the -1. */
static long native_missing(void)
{
	errno = ENOSYS;
	return -1;
}

bool native_resolve(void)
{
	bool all = true;
	void *p;

	/* dlsym() is thread-safe; concurrent resolvers store the same
	 * values.  Relaxed atomic stores keep the compilers and TSan honest
	 * about it. */
#define NATIVE_RESOLVE(name, ret, args)                                           \
	p = dlsym(RTLD_NEXT, #name);                                              \
	if (!p) {                                                                 \
		all = false;                                                      \
		p = (void *)native_missing;                                       \
	}                                                                         \
	__atomic_store_n((void **)&native.name, p, __ATOMIC_RELEASE);
	NATIVE_CALLS(NATIVE_RESOLVE)
#undef NATIVE_RESOLVE
	/* libsdp's descriptors are moved from inside the wrappers. */
	fdspace_set_libc(native.fcntl, native.dup3, native.close);
	return all;
}
