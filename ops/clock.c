/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The switch's clock: CLOCK_MONOTONIC in nanoseconds, and deadlines on it.
 * The lowest file of ops/: the waits (poll, epoll, a blocking connect or
 * accept) and the peer cache all measure time with it, and it calls
 * nothing of the switch.
 */
#include <time.h>

#include "clock.h"
#include "sock.h"

uint64_t ops_now_ns(void)
{
	return mono_ns();
}

struct timespec *ops_timeout_until(uint64_t deadline, struct timespec *ts)
{
	if (!deadline)
		return NULL;
	uint64_t now = ops_now_ns(), d = deadline > now ? deadline - now : 0;

	ts->tv_sec = (time_t)(d / 1000000000ull);
	ts->tv_nsec = (long)(d % 1000000000ull);
	return ts;
}

uint64_t ops_deadline_after(const struct timeval *tv)
{
	if (!tv->tv_sec && !tv->tv_usec)
		return 0;
	return ops_now_ns() + (uint64_t)tv->tv_sec * 1000000000ull + (uint64_t)tv->tv_usec * 1000ull;
}
