/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libsdp's own descriptors, kept out of the application's way.
 *
 * Linux gives a new descriptor the lowest free number, and programs count
 * on it: event loops size a table by the connections they expect and
 * index it by fd.  The eventfds, epoll sets and sockets libsdp makes for
 * a connection would take those low numbers and push the application's
 * own sockets up, so every descriptor libsdp keeps is moved, as soon as
 * it is made, to a region below the top of the descriptor space:
 *
 *   top     = min(soft RLIMIT_NOFILE, FDSPACE_MAX), read again whenever
 *             the region is full or the limit changed under it;
 *   region  = [floor, top), floor starting one step below top and
 *             lowered a step at a time as the region fills;
 *   step    = top / 16, at least 8 and at most 64.
 *
 * The floor is lowered only into a step that holds no descriptor but
 * libsdp's, with one more such step below it as a margin: the region
 * stops a step above whatever the application holds.  Beyond that there
 * is no room, and fdspace_take() fails with -EMFILE: the caller gives up
 * SDP for the connection (a fallback to TCP, counted as "resource")
 * rather than take numbers the application would have been given.
 *
 * FDSPACE_MAX bounds the numbers: the kernel sizes a process's fd table
 * by its highest open descriptor (8 bytes a slot, copied on every fork),
 * so a descriptor near a soft limit of 1M would cost every process 8 MiB
 * of kernel memory; at 65536 it is 512 KiB, and only for programs that
 * raised their limit that far.
 *
 * Every descriptor the region holds is close-on-exec.  The module calls
 * fcntl(), dup3() and close() through the system-call layer (sys.h): the
 * preload's own ones are wrappers that call this module.
 */
#ifndef SDP_COMMON_FDSPACE_H
#define SDP_COMMON_FDSPACE_H

#include <stdbool.h>

/* libsdp's descriptors are always below this. */
#define FDSPACE_MAX 65536

/*
 * Move fd, a descriptor libsdp has just made and owns, into the region:
 * returns its new number, close-on-exec and marked as libsdp's; the old
 * number is closed.  An fd at or above the floor (already moved, or the
 * application holds every number below) stays where it is, so the result
 * is never below fd unless fd >= FDSPACE_MAX.  On failure fd is
 * closed too and a negative errno returned: -EMFILE when the region has
 * no room.  A negative fd (the failed call that should have made it) is
 * returned as -errno, so that the call can be wrapped directly:
 * fdspace_take(eventfd(0, EFD_CLOEXEC)).  Thread-safe; errno is kept.
 */
int fdspace_take(int fd);

/* Whether fd is one of libsdp's (taken and not forgotten).  Lock-free. */
bool fdspace_owned(int fd);

/* fd is about to be closed or replaced: it is not libsdp's any more.
 * Lock-free and async-signal-safe; any fd is accepted. */
void fdspace_forget(int fd);

/* How many descriptors are libsdp's now.  Lock-free. */
int fdspace_count(void);

/* Forget fd, then close it.  Returns 0 or a negative errno. */
int fdspace_close(int fd);

/*
 * The race with the application's own descriptors.  A descriptor libsdp
 * makes is given the lowest free number, like any other, and holds it
 * until fdspace_take() moves it: if another thread of the application
 * makes one meanwhile (a socket(), an accept()), the application's gets
 * the next number, and a program that counts on Linux's numbering sees
 * a gap that TCP never leaves (a progress thread sets up an accepted
 * connection while the application opens its next socket).
 *
 * So every descriptor libsdp makes is made in a window: fdspace_making()
 * opens it before the call that makes the descriptor, fdspace_made()
 * moves the descriptor and closes it (fdspace_unmade() closes it when
 * nothing was made); FDSPACE_MAKE(call) does the three.  And every
 * descriptor made for the application is made between fdspace_app_mark()
 * and fdspace_settle(): if a window was open at any moment in between,
 * settle waits for the open windows to close and gives the application's
 * descriptor the lowest free number at or above min, if that is lower,
 * as Linux would have.  Outside a race this costs two atomic loads.
 *
 * A window spans a few system calls, but a loaded machine can preempt
 * its thread between them for several scheduler ticks (4 ms each at
 * HZ=250; CI's loaded guests showed 4 ms and more): so settle waits up
 * to FDSPACE_SETTLE_WAIT_NS, not a tick, and not at all when its own
 * thread holds a window (a signal handler that interrupted it there).
 */
#define FDSPACE_SETTLE_WAIT_NS 100000000ULL
void fdspace_making(void);
int fdspace_made(int fd);
void fdspace_unmade(void);
#define FDSPACE_MAKE(call) (fdspace_making(), fdspace_made(call))

unsigned long fdspace_app_mark(void);
/* fd (or a negative result, returned as it is) was made for the
 * application since mark; returns its number, perhaps a lower one (the
 * same file, the same close-on-exec flag; fd is then closed).  The
 * caller has not published fd yet.  errno is kept. */
int fdspace_settle(int fd, unsigned long mark, int min);
#define FDSPACE_APP(call)                                              \
	__extension__({                                                \
		unsigned long fdspace_mark_ = fdspace_app_mark();      \
		fdspace_settle((call), fdspace_mark_, 0);              \
	})

/*
 * Give fd's number to a quiet descriptor (an eventfd nobody writes, one per
 * process, made in the region at first use), closing what fd was: what is
 * left of a dead connection's socket must not keep waking whoever still
 * watches the number.  Made once, not per call: a new eventfd would take
 * the lowest free number for a moment (see above).  0 or a negative errno
 * (fd then stays as it was).
 */
int fdspace_quiet(int fd);

/* Unit tests only: forget the region and the marks (not the
 * descriptors).  Not thread-safe. */
void fdspace_reset_for_tests(void);

#endif
