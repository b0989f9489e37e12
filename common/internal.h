/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Whether the calling thread is inside a library that libsdp called.
 *
 * libsdp's own code reaches libc through the system-call layer (sys.h),
 * never through the preload's wrappers.  The libraries the transports
 * call (librdmacm, libibverbs) do not know of it: their open(), socket(),
 * close()... land in the preload's wrappers like the application's do.
 * The transports raise this flag around every such call
 * (transports/verbs/verbs.c, RDMA()), and the wrappers then hand the call
 * to libc, moving any descriptor it makes out of the application's
 * numbers (common/fdspace.h).
 *
 * One flag for the process: the preload and the engine library both
 * export it, and the dynamic linker binds both to the first (the
 * preload's), so that a program linked with libsdp-engine.so and run
 * under the preload has its transports' calls recognised too.
 */
#ifndef SDP_COMMON_INTERNAL_H
#define SDP_COMMON_INTERNAL_H

extern __thread unsigned libsdp_internal __attribute__((tls_model("initial-exec")));

static inline void sdp_internal_enter(void)
{
	libsdp_internal++;
}

static inline void sdp_internal_leave(void)
{
	libsdp_internal--;
}

#endif
