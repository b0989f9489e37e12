/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Whether the calling thread is running libsdp's own code.
 *
 * In libsdp.so the engine, the transports and the libraries they load
 * (libibverbs, librdmacm) call socket(), poll(), read(),
 * close()... and those calls land in the preload's wrappers like the
 * application's do.  The wrappers must hand them straight to libc: a
 * transport's own TCP socket must never be offered to SDP.  The engine's
 * threads set this for their whole life; the switch raises it around every
 * call into the engine.  Outside the preload it is unused.
 */
#ifndef SDP_COMMON_INTERNAL_H
#define SDP_COMMON_INTERNAL_H

extern __thread unsigned sdp_internal __attribute__((tls_model("initial-exec")));

static inline void sdp_internal_enter(void)
{
	sdp_internal++;
}

static inline void sdp_internal_leave(void)
{
	sdp_internal--;
}

#endif
