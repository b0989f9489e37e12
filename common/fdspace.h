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

/* Unit tests only: forget the region and the marks (not the
 * descriptors).  Not thread-safe. */
void fdspace_reset_for_tests(void);

#endif
