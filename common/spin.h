/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The adaptive poll-then-block of every waiting call (doc/fastpath.md):
 * before a thread sleeps it polls for at most spin_us microseconds
 * (SDP_SPIN_US), yielding the CPU between polls.  Per thread, a spin
 * that ends with nothing is a miss; after SPIN_MISSES misses in a row the
 * thread sleeps at once, until a wait is answered within the budget (a
 * spin would have caught it).  So a request/response thread spins, and a
 * thread that waits long between events spins a few times and then never:
 * idle costs nothing.
 *
 *	struct spin sp;
 *
 *	spin_begin(&sp);
 *	for (;;) {
 *		if (poll_once())
 *			break;
 *		if (spin_again(&sp))
 *			continue;
 *		spin_sleeping(&sp);
 *		sleep_in_the_kernel();
 *	}
 *	spin_end(&sp, got_something);
 *
 * No locks: the state is the thread's.
 */
#ifndef SDP_COMMON_SPIN_H
#define SDP_COMMON_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define SPIN_MISSES 4

struct spin {
	uint64_t budget_ns;	/* this wait's: 0 = sleep at once */
	uint64_t start_ns;	/* first poll; 0 before it */
	uint64_t sleep_ns;	/* when it went to sleep; 0 if it did not */
	uint64_t limit_ns;	/* spin_us, whether this wait spins or not */
};

void spin_begin(struct spin *sp);
/* The same with a budget of us microseconds (the caller's choice of
 * spin_us and another tunable), at most the thread's misses allow. */
void spin_begin_us(struct spin *sp, long us);
/* Poll once more?  Yields the CPU first; false once the budget is spent
 * (or there is none).  The caller holds no lock. */
bool spin_again(struct spin *sp);
/* Is budget left?  No yield: a caller that must drop a lock to spin asks
 * this first, because a sleep decided after the lock was dropped could miss
 * a change made meanwhile. */
bool spin_left(struct spin *sp);
/* The caller is about to sleep. */
void spin_sleeping(struct spin *sp);
/* The wait is over: found says whether it ended with something to report
 * (false: a timeout, a signal, an error). */
void spin_end(struct spin *sp, bool found);
/* The thread's misses in a row, for tests. */
unsigned spin_misses(void);

#endif
