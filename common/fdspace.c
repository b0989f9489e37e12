/* SPDX-License-Identifier: BSD-2-Clause */
#include "fdspace.h"
#include "clock.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STEP_MIN 8
#define STEP_MAX 64
#define LONG_BITS (CHAR_BIT * sizeof(unsigned long))

/* The region, floor in the low half and top in the high half, so that a
 * reader sees the two together; 0 until the first take.  Read without a
 * lock, changed by fs_grow() only. */
static uint64_t fs_region;
/* Serializes fs_grow().  A leaf: callers may hold any lock of theirs, and
 * none is taken under it. */
static pthread_mutex_t fs_lock = PTHREAD_MUTEX_INITIALIZER;
/* Which descriptors are libsdp's: set by a take, cleared by a forget. */
static unsigned long fs_owned[FDSPACE_MAX / LONG_BITS];
/* How many bits of fs_owned are set, kept with them: sdpstat's "fds"
 * is read on every data call (ops_stats_engine_sync()), and counting
 * the 1024 words there cost more CPU than the rest of a round trip's
 * user-space work on shm (doc/shm.md). */
static int fs_nowned;

/* Windows open now: fdspace_making(). */
static unsigned fs_making;

static void fs_atfork_child(void)
{
	pthread_mutex_init(&fs_lock, NULL);
	/* Windows the parent's other threads had open are not the child's:
	 * left counted, every descriptor the child made would wait for
	 * them (fdspace_settle()). */
	__atomic_store_n(&fs_making, 0, __ATOMIC_SEQ_CST);
}

__attribute__((constructor)) static void fs_register_atfork(void)
{
	pthread_atfork(NULL, NULL, fs_atfork_child);
}

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
/* ThreadSanitizer follows a descriptor through dup3() but not through
 * fcntl(F_DUPFD): without this it would not see that nfd is fd's file
 * (an epoll set, an eventfd it takes as a synchronization) and would
 * report races that are not there. */
static int fs_tell_tsan(int fd, int nfd)
{
	return sys.dup3(fd, nfd, O_CLOEXEC);
}
#else
static int fs_tell_tsan(int fd, int nfd)
{
	(void)fd;
	return nfd;
}
#endif

static inline int reg_floor(uint64_t r)
{
	return (int)(uint32_t)r;
}

static inline int reg_top(uint64_t r)
{
	return (int)(r >> 32);
}

static int fs_step(int top)
{
	int s = top / 16;

	return s < STEP_MIN ? STEP_MIN : s > STEP_MAX ? STEP_MAX : s;
}

static int fs_top_now(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	return rl.rlim_cur > FDSPACE_MAX ? FDSPACE_MAX : (int)rl.rlim_cur;
}

bool fdspace_owned(int fd)
{
	if (fd < 0 || fd >= FDSPACE_MAX)
		return false;
	return __atomic_load_n(&fs_owned[fd / LONG_BITS], __ATOMIC_RELAXED) &
	       (1ul << (fd % LONG_BITS));
}

static void fs_mark(int fd)
{
	unsigned long bit = 1ul << (fd % LONG_BITS);

	if (!(__atomic_fetch_or(&fs_owned[fd / LONG_BITS], bit, __ATOMIC_RELAXED) & bit))
		__atomic_fetch_add(&fs_nowned, 1, __ATOMIC_RELAXED);
}

void fdspace_forget(int fd)
{
	unsigned long bit = 1ul << (fd % LONG_BITS);

	if (fdspace_owned(fd) &&
	    (__atomic_fetch_and(&fs_owned[fd / LONG_BITS], ~bit, __ATOMIC_RELAXED) & bit))
		__atomic_fetch_sub(&fs_nowned, 1, __ATOMIC_RELAXED);
}

int fdspace_count(void)
{
	return __atomic_load_n(&fs_nowned, __ATOMIC_RELAXED);
}

int fdspace_close(int fd)
{
	fdspace_forget(fd);
	return sys.close(fd) < 0 ? -errno : 0;
}

/* Nothing but libsdp's descriptors in [lo, hi): one ppoll() answers for
 * all of them (POLLNVAL: not open).  hi - lo <= 2 * STEP_MAX.  The
 * system call itself: the preload's ppoll() is a wrapper, and nothing
 * here changes a descriptor. */
static bool fs_only_ours(int lo, int hi)
{
	struct pollfd p[2 * STEP_MAX];
	struct timespec zero = { 0, 0 };
	int n = 0;

	for (int fd = lo; fd < hi; fd++)
		if (!fdspace_owned(fd))
			p[n++] = (struct pollfd){ .fd = fd };
	if (!n)
		return true;
	if (syscall(SYS_ppoll, p, (unsigned long)n, &zero, NULL, 0) < 0)
		return false;
	for (int i = 0; i < n; i++)
		if (!(p[i].revents & POLLNVAL))
			return false;
	return true;
}

/*
 * The region as seen (seen) is full, or the limit moved: lower the floor
 * a step, or start again below a new top.  Returns 0 to try again (also
 * when another thread changed the region meanwhile), -EMFILE when there
 * is no room.
 */
static int fs_grow(uint64_t seen)
{
	int ret = 0;

	pthread_mutex_lock(&fs_lock);
	if (__atomic_load_n(&fs_region, __ATOMIC_RELAXED) != seen)
		goto out;
	int top = fs_top_now(), step = fs_step(top);
	/* A new top (first use, or setrlimit) starts a new region there;
	 * what the old one holds stays where it is. */
	int bottom = reg_floor(seen) && reg_top(seen) == top ? reg_floor(seen) : top;
	int floor = bottom - step;

	if (floor - step < 0 || !fs_only_ours(floor - step, bottom)) {
		ret = -EMFILE;
		goto out;
	}
	__atomic_store_n(&fs_region, (uint64_t)top << 32 | (uint32_t)floor, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&fs_lock);
	return ret;
}

int fdspace_take(int fd)
{
	int saved = errno, ret;

	if (fd < 0)
		return errno ? -errno : -EBADF;
	for (;;) {
		uint64_t reg = __atomic_load_n(&fs_region, __ATOMIC_ACQUIRE);
		int floor = reg_floor(reg), top = reg_top(reg);

		if (fdspace_owned(fd)) {
			ret = fd;	/* moved already, by the preload's wrapper */
			break;
		}
		if (floor && fd >= floor && fd < FDSPACE_MAX) {
			/* The application holds everything below. */
			if (sys.fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
				ret = -errno;
				sys.close(fd);
				break;
			}
			fs_mark(fd);
			ret = fd;
			break;
		}
		if (floor) {
			int nfd = sys.fcntl(fd, F_DUPFD_CLOEXEC, floor);

			if (nfd >= 0 && nfd < top) {
				ret = fs_tell_tsan(fd, nfd) < 0 ? -errno : nfd;
				if (ret < 0)
					sys.close(nfd);
				else
					fs_mark(nfd);
				sys.close(fd);
				break;
			}
			if (nfd >= 0) {
				sys.close(nfd);		/* above the region: it is full */
			} else if (errno != EMFILE && errno != EINVAL) {
				/* EINVAL: the floor is above a lowered limit. */
				ret = -errno;
				sys.close(fd);
				break;
			}
		}
		ret = fs_grow(reg);
		if (ret < 0) {
			sys.close(fd);
			break;
		}
	}
	errno = saved;
	return ret;
}

/* Windows opened ever (wrapping); those open now are fs_making. */
static unsigned fs_opened;
/* Windows this thread has open: a signal handler that makes a descriptor
 * for the application while its thread is inside one must not wait for
 * it (fdspace_settle()). */
static __thread unsigned fs_held;

void fdspace_making(void)
{
	fs_held++;
	__atomic_add_fetch(&fs_opened, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&fs_making, 1, __ATOMIC_SEQ_CST);
}

void fdspace_unmade(void)
{
	__atomic_sub_fetch(&fs_making, 1, __ATOMIC_SEQ_CST);
	fs_held--;
}

int fdspace_made(int fd)
{
	int r = fdspace_take(fd);

	fdspace_unmade();
	return r;
}

/* The windows opened so far, shifted, and whether one is open now (bit
 * 0): a window that opened before the mark but closes after it counts. */
unsigned long fdspace_app_mark(void)
{
	unsigned long opened = __atomic_load_n(&fs_opened, __ATOMIC_SEQ_CST);

	return opened << 1 | (__atomic_load_n(&fs_making, __ATOMIC_SEQ_CST) != 0);
}

int fdspace_settle(int fd, unsigned long mark, int min)
{
	if (fd < 0 || fd <= min)
		return fd;
	if (!(mark & 1) && fdspace_app_mark() == mark)
		return fd;	/* no window was open meanwhile */

	int saved = errno;
	uint64_t until = 0;
	long nap = 20000;

	/* A window holds its number for a few system calls, but its thread
	 * can be preempted in between, for several scheduler ticks on a
	 * loaded machine: wait for it to give the number back.  Not if this
	 * thread holds one (a signal handler interrupted it there), and not
	 * forever (a handler on the holder's thread could be waiting for
	 * this one). */
	for (unsigned i = 0; !fs_held && __atomic_load_n(&fs_making, __ATOMIC_SEQ_CST); i++) {
		if (i < 8) {
			sched_yield();
			continue;
		}
		uint64_t now = mono_ns();
		struct timespec ts = { 0, nap };

		if (!until)
			until = now + FDSPACE_SETTLE_WAIT_NS;
		else if (now >= until)
			break;
		nanosleep(&ts, NULL);
		if (nap < 200000)
			nap *= 2;
	}
	int fdfl = sys.fcntl(fd, F_GETFD);
	int low = fdfl < 0 ? -1
			   : sys.fcntl(fd, (fdfl & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, min);

	if (low >= 0 && low < fd) {
		sys.close(fd);
		fd = low;
	} else if (low >= 0) {
		sys.close(low);
	}
	errno = saved;
	return fd;
}

static int fs_quiet = -1;

int fdspace_quiet(int fd)
{
	int q = __atomic_load_n(&fs_quiet, __ATOMIC_ACQUIRE);

	if (q < 0) {
		int expected = -1;

		q = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
		if (q < 0)
			return q;
		if (!__atomic_compare_exchange_n(&fs_quiet, &expected, q, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			fdspace_close(q);
			q = expected;
		}
	}
	return sys.dup3(q, fd, O_CLOEXEC) < 0 ? -errno : 0;
}

void fdspace_reset_for_tests(void)
{
	__atomic_store_n(&fs_region, 0, __ATOMIC_RELAXED);
	for (size_t i = 0; i < sizeof(fs_owned) / sizeof(fs_owned[0]); i++)
		fs_owned[i] = 0;
	__atomic_store_n(&fs_nowned, 0, __ATOMIC_RELAXED);
}
