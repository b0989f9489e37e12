/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * common/fdspace.c: libsdp's descriptors go to the top of the descriptor
 * space and leave the numbers below to the application.  Each test sets
 * its own soft RLIMIT_NOFILE (Criterion runs every test in a process of
 * its own).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdspace.h"

static void set_soft(rlim_t n)
{
	struct rlimit rl;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < n)
		cr_skip_test("hard RLIMIT_NOFILE %llu is below %llu", (unsigned long long)rl.rlim_max,
			     (unsigned long long)n);
	rl.rlim_cur = n;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "setrlimit: %s", strerror(errno));
}

/* What the application's next descriptor would be. */
static int next_app_fd(void)
{
	int fd = dup(0);

	cr_assert_geq(fd, 0);
	close(fd);
	return fd;
}

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static int new_fd(void)
{
	return eventfd(0, EFD_CLOEXEC);
}

static void setup(void)
{
	fdspace_reset_for_tests();
}

TestSuite(fdspace, .init = setup);

Test(fdspace, moves_to_the_top_and_frees_the_low_number)
{
	set_soft(1024);
	int made = new_fd();
	int fd = fdspace_take(made);

	/* 1024 / 16 = 64: the first step is [960, 1024). */
	cr_assert(fd >= 960 && fd < 1024, "taken to %d", fd);
	cr_assert(!is_open(made), "the old number stays open");
	cr_assert_eq(fcntl(fd, F_GETFD), FD_CLOEXEC);
	cr_assert(fdspace_owned(fd));
	cr_assert(!fdspace_owned(made));
	cr_assert_eq(next_app_fd(), made, "the application's next number moved");
}

Test(fdspace, grows_down_a_step_at_a_time)
{
	set_soft(1024);
	int app = next_app_fd(), lowest = 1024;

	for (int i = 0; i < 200; i++) {
		int fd = fdspace_take(new_fd());

		cr_assert(fd >= 1024 - 4 * 64 && fd < 1024, "take %d went to %d", i, fd);
		cr_assert(fdspace_owned(fd));
		if (fd < lowest)
			lowest = fd;
	}
	/* 200 fit in four steps of 64 and need all four. */
	cr_assert_lt(lowest, 1024 - 3 * 64);
	cr_assert_eq(next_app_fd(), app);
}

Test(fdspace, stops_a_step_above_the_application)
{
	set_soft(256);	/* steps of 16 */
	int high = 0, taken = 0, r, before;

	/* The application holds every number up to 150. */
	while ((high = dup(0)) < 150)
		cr_assert_geq(high, 0);
	before = next_app_fd();
	for (;;) {
		int fd = new_fd();

		cr_assert_geq(fd, 0);
		r = fdspace_take(fd);
		if (r < 0) {
			cr_assert(!is_open(fd), "a failed take leaves its fd open");
			break;
		}
		cr_assert_gt(r, high + 16, "took %d, a step above the application's %d", r, high);
		taken++;
	}
	cr_assert_eq(r, -EMFILE);
	/* [256 - 16k, 256) down to the last whole step above 150 + 16. */
	cr_assert_geq(taken, 256 - 176);
	cr_assert_eq(next_app_fd(), before);
}

Test(fdspace, follows_the_limit)
{
	set_soft(512);
	int fd = fdspace_take(new_fd());

	cr_assert(fd >= 512 - 32 && fd < 512, "taken to %d", fd);
	/* Lowered below the region: a new one under the new limit. */
	set_soft(256);
	fd = fdspace_take(new_fd());
	cr_assert(fd >= 256 - 16 && fd < 256, "after lowering: %d", fd);
	/* Raised: the current region is used up first, then the new top. */
	set_soft(1024);
	bool up = false;

	for (int i = 0; i < 17 && !up; i++) {
		fd = fdspace_take(new_fd());
		cr_assert_geq(fd, 240);
		up = fd >= 1024 - 64;
	}
	cr_assert(up, "never went to the new top (last %d)", fd);
}

Test(fdspace, stays_below_fdspace_max)
{
	set_soft(FDSPACE_MAX + 4096);
	int fd = fdspace_take(new_fd());

	cr_assert(fd >= FDSPACE_MAX - 64 && fd < FDSPACE_MAX, "taken to %d", fd);
}

Test(fdspace, keeps_what_it_took)
{
	set_soft(1024);
	int fd = fdspace_take(new_fd());

	cr_assert_eq(fdspace_take(fd), fd);
	cr_assert(is_open(fd));
	fdspace_forget(fd);
	cr_assert(!fdspace_owned(fd));
	fdspace_forget(-1);
	fdspace_forget(FDSPACE_MAX);
	fd = fdspace_take(fd);
	cr_assert(fdspace_owned(fd));
	cr_assert_eq(fdspace_close(fd), 0);
	cr_assert(!fdspace_owned(fd));
	cr_assert(!is_open(fd));
	cr_assert_eq(fdspace_close(fd), -EBADF);
}

/* The count sdpstat shows: each descriptor once, however often taken
 * or forgotten. */
Test(fdspace, counts_what_it_holds)
{
	set_soft(1024);
	int a = fdspace_take(new_fd()), b = fdspace_take(new_fd());

	cr_assert_eq(fdspace_count(), 2);
	cr_assert_eq(fdspace_take(a), a);
	cr_assert_eq(fdspace_count(), 2, "taken again, counted twice");
	fdspace_forget(a);
	fdspace_forget(a);
	fdspace_forget(-1);
	cr_assert_eq(fdspace_count(), 1);
	cr_assert_eq(fdspace_close(b), 0);
	cr_assert_eq(fdspace_count(), 0);
	close(a);
}

Test(fdspace, passes_a_failed_call_through)
{
	errno = ENFILE;
	cr_assert_eq(fdspace_take(-1), -ENFILE);
	errno = 0;
	cr_assert_eq(fdspace_take(-1), -EBADF);
}

Test(fdspace, keeps_errno)
{
	set_soft(1024);
	errno = EINTR;
	int fd = fdspace_take(new_fd());

	cr_assert_geq(fd, 0);
	cr_assert_eq(errno, EINTR);
}

/* --- the race with the application's descriptors ------------------------------------ */

struct later {
	int fd;
	int taken;
	int opened;		/* set once the window is open and fd made */
	int go;			/* set by the test: close the window now */
	uint64_t made_ns;	/* when fdspace_made() began: the window's end */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* libsdp's thread: a window opened, a descriptor made in it, and, a
 * moment after the test says go, moved. */
static void *made_later(void *arg)
{
	struct later *l = arg;
	struct timespec ts = { 0, 100000 };

	fdspace_making();
	l->fd = new_fd();
	__atomic_store_n(&l->opened, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&l->go, __ATOMIC_ACQUIRE))
		sched_yield();
	nanosleep(&ts, NULL);
	l->made_ns = now_ns();
	l->taken = fdspace_made(l->fd);
	return NULL;
}

Test(fdspace, settle_without_a_window_leaves_the_number)
{
	set_soft(1024);
	unsigned long mark = fdspace_app_mark();
	int gap = new_fd(), fd = new_fd();

	close(gap);
	/* No window: the number stays, gap or not (the application's own). */
	cr_assert_eq(fdspace_settle(fd, mark, 0), fd);
	close(fd);
	errno = EINTR;
	cr_assert_eq(fdspace_settle(-1, mark, 0), -1);
	cr_assert_eq(errno, EINTR);
}

Test(fdspace, settle_waits_for_an_open_window_and_takes_its_number)
{
	set_soft(1024);
	/* The region first: the kernel's table grows for it, and in a
	 * process of several threads that waits for an RCU grace period
	 * (milliseconds). */
	fdspace_close(fdspace_take(new_fd()));
	int want = next_app_fd();
	struct later l = { .fd = -1 };
	pthread_t t;

	/* libsdp's thread makes a descriptor: it takes the lowest number... */
	cr_assert_eq(pthread_create(&t, NULL, made_later, &l), 0);
	while (!__atomic_load_n(&l.opened, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(l.fd, want);
	/* ...and the application's, made meanwhile, the next one. */
	unsigned long mark = fdspace_app_mark();
	int fd = new_fd();

	cr_assert_eq(fd, want + 1);
	cr_assert_eq(fcntl(fd, F_SETFD, 0), 0);
	uint64_t t0 = now_ns();

	__atomic_store_n(&l.go, 1, __ATOMIC_RELEASE);
	int got = fdspace_settle(fd, mark, 0);

	pthread_join(t, NULL);
	/* settle waits FDSPACE_SETTLE_WAIT_NS at most: a thread the
	 * machine's load kept from running that long leaves the number
	 * where it is, by design. */
	if (got != want && l.made_ns - t0 >= FDSPACE_SETTLE_WAIT_NS) {
		cr_log_warn("the window stayed open %llu us: settle did not wait that long",
			    (unsigned long long)((l.made_ns - t0) / 1000));
		close(got);
		fdspace_close(l.taken);
		return;
	}
	cr_assert_eq(got, want,
		     "settled at %d, Linux would have given %d (the window closed after %llu us)", got,
		     want, (unsigned long long)((l.made_ns - t0) / 1000));
	cr_assert_gt(l.taken, want);
	cr_assert(!is_open(fd), "the higher number is closed");
	cr_assert_eq(fcntl(got, F_GETFD), 0, "close-on-exec as it was");
	close(got);
	fdspace_close(l.taken);
}

Test(fdspace, settle_in_the_thread_that_holds_the_window_does_not_wait)
{
	/* A signal handler that makes a descriptor while its thread is
	 * inside a window: the window cannot close until the handler
	 * returns, so waiting for it would only stall the handler. */
	set_soft(1024);
	fdspace_close(fdspace_take(new_fd()));
	int want = next_app_fd();

	fdspace_making();
	int own = new_fd();
	unsigned long mark = fdspace_app_mark();
	int fd = new_fd();
	uint64_t t0 = now_ns();
	int got = fdspace_settle(fd, mark, 0);
	uint64_t took = now_ns() - t0;

	cr_assert_eq(own, want);
	cr_assert_eq(got, fd, "the number is still the window's: nothing lower is free");
	cr_assert_lt(took, FDSPACE_SETTLE_WAIT_NS, "settle waited %llu us for its own thread",
		     (unsigned long long)(took / 1000));
	int taken = fdspace_made(own);

	cr_assert_gt(taken, fd);
	cr_assert_eq(fdspace_app_mark() & 1, 0, "the window is closed");
	close(got);
	fdspace_close(taken);
}

Test(fdspace, settle_sees_a_window_that_opened_and_closed_meanwhile)
{
	set_soft(1024);
	int want = next_app_fd();
	unsigned long mark = fdspace_app_mark();

	fdspace_making();
	int own = new_fd();
	int fd = new_fd();
	int taken = fdspace_made(own);

	cr_assert_eq(fd, want + 1);
	cr_assert_gt(taken, fd);
	int got = fdspace_settle(fd, mark, 0);

	cr_assert_eq(got, want);
	cr_assert_eq(fcntl(got, F_GETFD), FD_CLOEXEC, "close-on-exec as it was");
	/* A minimum is honoured (F_DUPFD). */
	mark = fdspace_app_mark();
	fdspace_making();
	fdspace_unmade();
	int low = fcntl(got, F_DUPFD_CLOEXEC, want + 3);

	close(low);
	int hi = fcntl(got, F_DUPFD_CLOEXEC, low + 1);

	cr_assert_eq(fdspace_settle(hi, mark, want + 3), low);
	cr_assert(!is_open(hi));
	close(low);
	close(got);
	fdspace_close(taken);
}

Test(fdspace, a_fork_child_has_no_window_open)
{
	/* Another thread's window, open when the program forks, does not
	 * exist in the child: its descriptors must not wait for it. */
	fdspace_making();
	cr_assert(fdspace_app_mark() & 1);
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(fdspace_app_mark() & 1 ? 1 : 0);
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child still counts the window");
	fdspace_unmade();
	cr_assert_eq(fdspace_app_mark() & 1, 0);
}

Test(fdspace, quiet_gives_the_number_a_file_that_never_wakes)
{
	set_soft(1024);
	int a = new_fd(), b = new_fd();
	uint64_t one = 1;

	cr_assert_eq(write(a, &one, sizeof(one)), (ssize_t)sizeof(one));
	struct pollfd p = { .fd = a, .events = POLLIN };

	cr_assert_eq(poll(&p, 1, 0), 1, "readable before");
	int before = fdspace_count();

	cr_assert_eq(fdspace_quiet(a), 0);
	cr_assert_eq(poll(&p, 1, 0), 0, "quiet after");
	cr_assert_eq(fcntl(a, F_GETFD), FD_CLOEXEC);
	cr_assert_eq(fdspace_count(), before + 1, "one quiet descriptor, in the region");
	cr_assert_eq(fdspace_quiet(b), 0);
	cr_assert_eq(fdspace_count(), before + 1, "made once");
	struct stat sa, sb;

	cr_assert_eq(fstat(a, &sa), 0);
	cr_assert_eq(fstat(b, &sb), 0);
	cr_assert_eq(sa.st_ino, sb.st_ino, "the same file");
	cr_assert_eq(fdspace_quiet(-1), -EBADF);
	close(a);
	close(b);
}
