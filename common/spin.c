/* SPDX-License-Identifier: BSD-2-Clause */
/* The adaptive poll-then-block (spin.h). */
#include <sched.h>

#include "clock.h"
#include "spin.h"
#include "tunables.h"

static __thread unsigned misses;

void spin_begin_us(struct spin *sp, long us)
{
	sp->limit_ns = us > 0 ? (uint64_t)us * 1000ull : 0;
	sp->budget_ns = misses < SPIN_MISSES ? sp->limit_ns : 0;
	sp->start_ns = 0;
	sp->sleep_ns = 0;
}

void spin_begin(struct spin *sp)
{
	spin_begin_us(sp, tun_int(TUN_spin_us));
}

bool spin_left(struct spin *sp)
{
	if (!sp->budget_ns)
		return false;
	uint64_t now = mono_ns();

	if (!sp->start_ns)
		sp->start_ns = now;
	return now - sp->start_ns < sp->budget_ns;
}

bool spin_again(struct spin *sp)
{
	if (!spin_left(sp))
		return false;
	/* On a shared core the peer we wait for may need this CPU. */
	sched_yield();
	return true;
}

void spin_sleeping(struct spin *sp)
{
	/* Not when spinning is off: spin_end() would not look at it, and a
	 * clock read per sleep is a system call where the clocksource has
	 * no vDSO (hpet: the QEMU guests). */
	if (sp->limit_ns && !sp->sleep_ns)
		sp->sleep_ns = mono_ns();
}

void spin_end(struct spin *sp, bool found)
{
	if (!sp->limit_ns)
		return;
	if (!sp->sleep_ns) {
		/* Answered without sleeping: by the spin, or at once. */
		if (found)
			misses = 0;
		return;
	}
	/* It slept: a miss, unless the answer came so soon that a spin
	 * would have caught it. */
	if (found && mono_ns() - sp->sleep_ns < sp->limit_ns)
		misses = 0;
	else if (misses < SPIN_MISSES)
		misses++;
}

unsigned spin_misses(void)
{
	return misses;
}
