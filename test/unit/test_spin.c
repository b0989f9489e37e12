/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of common/spin.c, the adaptive poll-then-block: its rule of
 * misses, not its timing (no assertion here depends on how long anything
 * takes).
 */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "spin.h"
#include "tunables.h"

static void setup(void)
{
	unsetenv("SDP_SPIN_US");
}

TestSuite(spin, .init = setup);

/* One wait that spins its whole budget, sleeps and ends with found. */
static bool one_wait(bool sleep, bool found)
{
	struct spin sp;
	bool spun = false;

	spin_begin(&sp);
	while (spin_again(&sp))
		spun = true;
	if (sleep)
		spin_sleeping(&sp);
	spin_end(&sp, found);
	return spun;
}

Test(spin, off_never_spins)
{
	cr_assert_eq(tun_set("spin_us", "0"), 0);
	for (int i = 0; i < 2 * SPIN_MISSES; i++)
		cr_assert(!one_wait(true, false), "wait %d spun with spin_us 0", i);
	cr_assert_eq(spin_misses(), 0, "spinning off counts no misses");
	/* recv() drops its socket lock to spin only if spin_left() says so
	 * (sdp/sock.c spin_wait()): with no budget it must say no. */
	struct spin sp;

	spin_begin(&sp);
	cr_assert(!spin_left(&sp), "no budget, yet spin_left() says spin");
	/* Nor does a sleep read the clock for a miss nobody counts. */
	spin_sleeping(&sp);
	cr_assert_eq(sp.sleep_ns, 0, "spinning off, yet the sleep was timed");
	spin_end(&sp, false);
}

Test(spin, misses_stop_spinning_and_an_answer_restarts_it)
{
	cr_assert_eq(tun_set("spin_us", "1"), 0);
	for (int i = 0; i < SPIN_MISSES; i++) {
		cr_assert_eq(spin_misses(), (unsigned)i);
		one_wait(true, false);	/* spun, slept, timed out: a miss */
	}
	cr_assert_eq(spin_misses(), SPIN_MISSES);
	/* Now it sleeps at once: the first spin_again() says no, without
	 * looking at the clock. */
	struct spin sp;

	spin_begin(&sp);
	cr_assert(!spin_again(&sp), "a thread that keeps missing must not spin");
	spin_sleeping(&sp);
	spin_end(&sp, false);
	cr_assert_eq(spin_misses(), SPIN_MISSES, "misses are capped");
	/* A wait answered without sleeping: spinning pays again. */
	one_wait(false, true);
	cr_assert_eq(spin_misses(), 0);
	spin_begin(&sp);
	cr_assert_neq(sp.budget_ns, 0, "spinning is back after an answer");
	spin_end(&sp, true);
}

Test(spin, a_wait_found_at_once_is_no_miss)
{
	cr_assert_eq(tun_set("spin_us", "1"), 0);
	one_wait(true, false);
	cr_assert_eq(spin_misses(), 1);
	struct spin sp;

	spin_begin(&sp);	/* ready at the first look: no spin_again */
	spin_end(&sp, true);
	cr_assert_eq(spin_misses(), 0);
}
