/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CLOCK_MONOTONIC in nanoseconds: the one clock every layer reads
 * (sdp_now_ns, ops_now_ns, the transports' timers, the spin's budget).
 */
#ifndef SDP_COMMON_CLOCK_H
#define SDP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
