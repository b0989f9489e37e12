/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The live statistics file: ops/stats.c writes it, common/stats_read.c
 * reads it back, and every check goes through the reader, so that the two
 * are tested against each other as sdpstat uses them.  Each test runs with
 * SDP_STATS_DIR pointing at a directory of its own, and starts from a
 * writer with no file (ops_stats_reset_for_tests), so the tests also pass
 * with --no-fork.  When the harness gives top_builddir, sdpstat itself is
 * run against this process's file.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "fdspace.h"
#include "stats.h"
#include "stats_read.h"
#include "stats_shm.h"
#include "scratch_dir.h"

static char ts_dir[PATH_MAX];

static void ts_setup(void)
{
	const char *tmp = getenv("TMPDIR");

	ops_stats_reset_for_tests();
	snprintf(ts_dir, sizeof(ts_dir), "%s/sdp-stats-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(ts_dir));
	cr_assert_eq(setenv(SDP_STATS_DIR_ENV, ts_dir, 1), 0);
	umask(022);
}

static void ts_teardown(void)
{
	ops_stats_reset_for_tests();
	ut_scratch_dir_remove(ts_dir);
	unsetenv(SDP_STATS_DIR_ENV);
}

TestSuite(stats, .init = ts_setup, .fini = ts_teardown);

static const char *ts_path(pid_t pid)
{
	static char path[PATH_MAX];

	cr_assert_eq(sdp_stats_path(ts_dir, pid, path, sizeof(path)), 0);
	return path;
}

static int ts_exists(pid_t pid)
{
	struct stat st;

	return lstat(ts_path(pid), &st) == 0;
}

static void ts_read(pid_t pid, struct sdp_stats_snap *s)
{
	int ret = sdp_stats_read(ts_dir, pid, 0, s);

	cr_assert_eq(ret, 0, "sdp_stats_read: %s", strerror(-ret));
}

static int ts_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert_not_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static struct sdp_stats_hdr ts_header(pid_t pid)
{
	struct sdp_stats_hdr h;
	int fd = open(ts_path(pid), O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h;
}

static void ts_patch(pid_t pid, size_t off, const void *data, size_t len)
{
	int fd = open(ts_path(pid), O_RDWR | O_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, data, len, (off_t)off), (ssize_t)len);
	close(fd);
}

Test(stats, names)
{
	cr_assert_str_eq(ops_stack_name(OPS_STACK_UNDECIDED), "undecided");
	cr_assert_str_eq(ops_stack_name(OPS_STACK_TCP), "tcp");
	cr_assert_str_eq(ops_stack_name(OPS_STACK_SDP), "sdp");
	cr_assert_str_eq(ops_stack_name(OPS_STACK_BOTH), "both");
	cr_assert_str_eq(ops_state_name(OPS_ST_NEW), "new");
	cr_assert_str_eq(ops_state_name(OPS_ST_LISTEN), "listen");
	cr_assert_str_eq(ops_state_name(OPS_ST_CONNECTING), "connecting");
	cr_assert_str_eq(ops_state_name(OPS_ST_ESTABLISHED), "established");
	cr_assert_str_eq(ops_state_name(OPS_ST_CLOSED), "closed");
	static const char *const fb[OPS_FB_MAX] = {
		"none", "no-transport", "no-route", "refused", "timeout", "rejected",
		"transport-error", "unsupported", "remembered", "resource",
	};
	for (int r = 0; r < OPS_FB_MAX; r++)
		cr_assert_str_eq(ops_fallback_name((enum ops_fallback)r), fb[r]);
	/* Never NULL, even for values out of range. */
	cr_assert_not_null(ops_stack_name(OPS_STACK_MAX));
	cr_assert_not_null(ops_state_name((enum ops_sock_state)99));
	cr_assert_not_null(ops_fallback_name(OPS_FB_MAX));
	for (int c = 0; c < OPS_C_MAX; c++)
		cr_assert_not_null(sdp_stats_counter_name((unsigned)c));
	cr_assert_null(sdp_stats_counter_name(OPS_C_MAX));
}

Test(stats, lazy_creation)
{
	pid_t me = getpid();
	int fds = ts_count_fds();
	struct stat st;

	/* Nothing that is not a count or a row makes the file. */
	ops_stats_set_program("lazy");
	ops_stats_sock_free(NULL);
	ops_stats_sock_set_state(NULL, OPS_ST_LISTEN);
	ops_stats_sock_bytes(NULL, 0, 0);
	ops_stats_count(OPS_C_SOCKETS, 0);
	ops_stats_fallback(OPS_FB_NONE);
	cr_assert_not(ts_exists(me));

	errno = 4321;
	ops_stats_count(OPS_C_SOCKETS, 1);
	cr_assert_eq(errno, 4321, "errno preserved");
	cr_assert(ts_exists(me));
	cr_assert_eq(ts_count_fds(), fds, "no fd kept open");

	cr_assert_eq(lstat(ts_path(me), &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0644);
	cr_assert_eq((size_t)st.st_size, SDP_STATS_FILE_SIZE);
	/* Storage for the header and a first chunk of rows only. */
	cr_assert_lt((size_t)st.st_blocks * 512, SDP_STATS_FILE_SIZE / 4);

	struct sdp_stats_hdr h = ts_header(me);
	uint64_t start;
	char state;

	cr_assert_eq(h.magic, SDP_STATS_MAGIC);
	cr_assert_eq(h.version, SDP_STATS_VERSION);
	cr_assert_eq(h.pid, me);
	cr_assert_eq(h.capacity, SDP_STATS_CAPACITY);
	cr_assert_eq(h.n_counters, OPS_C_MAX);
	cr_assert_eq(h.n_fallbacks, OPS_FB_MAX);
	cr_assert_eq(sdp_stats_proc_start(0, &state, &start), 0);
	cr_assert_eq(h.start_time, start);

	struct sdp_stats_snap s;

	ts_read(me, &s);
	cr_assert_eq(s.pid, me);
	cr_assert_str_eq(s.program, "lazy");
	cr_assert_eq(s.counters[OPS_C_SOCKETS], 1);
	cr_assert_eq(s.n_socks, 0);
	sdp_stats_snap_free(&s);
}

/* The engine's zero-copy and cache counters reach the file when the switch
 * syncs them: after a transfer (ops_stats_sock_bytes) and at a close. */
Test(stats, engine_counters)
{
	static const struct {
		enum ops_counter c;
		uint64_t v;
	} want[] = {
		{ OPS_C_ZCOPY_OFFERS, 1 }, { OPS_C_ZCOPY_BYTES_SENT, 2 },
		{ OPS_C_ZCOPY_REFUSED, 3 }, { OPS_C_ZCOPY_CANCELS, 4 },
		{ OPS_C_ZCOPY_READS, 5 }, { OPS_C_ZCOPY_BYTES_RECEIVED, 6 },
		{ OPS_C_ZCOPY_DIRECT_BYTES, 7 }, { OPS_C_REGCACHE_HITS, 8 },
		{ OPS_C_REGCACHE_MISSES, 9 }, { OPS_C_REGCACHE_EVICTIONS, 10 },
		{ OPS_C_REGCACHE_INVALIDATIONS, 11 },
	};
	struct sdp_stats_snap s;

	/* Nothing changed: no file is made for it. */
	ops_stats_engine_sync();
	cr_assert_not(ts_exists(getpid()));

	SDP_STAT_INC(zcopy_offers, 1);
	SDP_STAT_INC(zcopy_bytes_sent, 2);
	SDP_STAT_INC(zcopy_refused, 3);
	SDP_STAT_INC(zcopy_cancels, 4);
	SDP_STAT_INC(zcopy_reads, 5);
	SDP_STAT_INC(zcopy_bytes_received, 6);
	SDP_STAT_INC(zcopy_direct_bytes, 7);
	SDP_STAT_INC(regcache_hits, 8);
	SDP_STAT_INC(regcache_misses, 9);
	SDP_STAT_INC(regcache_evictions, 10);
	SDP_STAT_INC(regcache_invalidations, 11);
	ops_stats_sock_bytes(NULL, 100, 0);
	ts_read(getpid(), &s);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_assert_eq(s.counters[want[i].c], want[i].v, "%s",
			     sdp_stats_counter_name(want[i].c));
	sdp_stats_snap_free(&s);

	/* Each increment once: syncing again adds nothing, a later count
	 * adds itself, at a close too. */
	ops_stats_engine_sync();
	SDP_STAT_INC(regcache_hits, 5);
	ops_stats_sock_free(NULL);
	ts_read(getpid(), &s);
	cr_assert_eq(s.counters[OPS_C_REGCACHE_HITS], 13);
	cr_assert_eq(s.counters[OPS_C_REGCACHE_MISSES], 9);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_TX], 100);
	sdp_stats_snap_free(&s);
}

Test(stats, first_row_makes_the_file)
{
	struct ops_stats_sock *r = ops_stats_sock_alloc(3);

	cr_assert_not_null(r);
	cr_assert(ts_exists(getpid()));
	ops_stats_sock_free(r);
}

Test(stats, counters_and_fallbacks)
{
	struct sdp_stats_snap s;

	ops_stats_count(OPS_C_SOCKETS, 3);
	ops_stats_count(OPS_C_SOCKETS, 2);
	ops_stats_count(OPS_C_LISTEN_BOTH, 1);
	ops_stats_count(OPS_C_MAX, 7);			/* ignored */
	ops_stats_count((enum ops_counter)-1, 7);	/* ignored */
	ops_stats_fallback(OPS_FB_REFUSED);
	ops_stats_fallback(OPS_FB_REFUSED);
	ops_stats_fallback(OPS_FB_TIMEOUT);
	ops_stats_fallback(OPS_FB_NONE);		/* not a fallback */
	ops_stats_fallback(OPS_FB_MAX);			/* ignored */
	ops_stats_sock_bytes(NULL, 100, 50);		/* no row: totals still count */

	ts_read(getpid(), &s);
	cr_assert_eq(s.n_counters, OPS_C_MAX);
	cr_assert_eq(s.n_fallbacks, OPS_FB_MAX);
	cr_assert_eq(s.counters[OPS_C_SOCKETS], 5);
	cr_assert_eq(s.counters[OPS_C_LISTEN_BOTH], 1);
	cr_assert_eq(s.counters[OPS_C_FALLBACKS], 3);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_TX], 100);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_RX], 50);
	cr_assert_eq(s.fallbacks[OPS_FB_REFUSED], 2);
	cr_assert_eq(s.fallbacks[OPS_FB_TIMEOUT], 1);
	cr_assert_eq(s.fallbacks[OPS_FB_NONE], 0);
	for (int c = 0; c < OPS_C_MAX; c++)
		if (c != OPS_C_SOCKETS && c != OPS_C_LISTEN_BOTH && c != OPS_C_FALLBACKS &&
		    c != OPS_C_SDP_BYTES_TX && c != OPS_C_SDP_BYTES_RX)
			cr_assert_eq(s.counters[c], 0, "%s", sdp_stats_counter_name((unsigned)c));
	sdp_stats_snap_free(&s);
}

static struct sockaddr_in ts_sin(const char *ip, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	cr_assert_eq(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
	return sa;
}

static struct sockaddr_in6 ts_sin6(const char *ip, uint16_t port, uint32_t scope)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(port),
				   .sin6_scope_id = scope };

	cr_assert_eq(inet_pton(AF_INET6, ip, &sa.sin6_addr), 1);
	return sa;
}

Test(stats, row_contents)
{
	struct sockaddr_in l = ts_sin("10.1.2.3", 5001);
	struct sockaddr_in6 p = ts_sin6("fe80::1", 40000, 2);
	struct ops_stats_sock *r = ops_stats_sock_alloc(7);
	struct sdp_stats_snap s;
	char buf[128];

	cr_assert_not_null(r);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 1);
	cr_assert_eq(s.socks[0].fd, 7);
	cr_assert_eq(s.socks[0].stack, OPS_STACK_UNDECIDED);
	cr_assert_eq(s.socks[0].state, OPS_ST_NEW);
	cr_assert_eq(s.socks[0].fallback, OPS_FB_NONE);
	cr_assert_eq(s.socks[0].flags, 0);
	cr_assert_str_eq(s.socks[0].transport, "");
	cr_assert_eq(s.socks[0].local.len, 0);
	sdp_stats_format_addr(&s.socks[0].local, buf, sizeof(buf));
	cr_assert_str_eq(buf, "-");
	sdp_stats_snap_free(&s);

	ops_stats_sock_set_fd(r, 9);
	ops_stats_sock_set_stack(r, OPS_STACK_TCP, OPS_FB_NO_ROUTE);
	ops_stats_sock_set_state(r, OPS_ST_ESTABLISHED);
	ops_stats_sock_set_transport(r, "tcp-fallback-and-more", "bcopy-long");
	ops_stats_sock_set_addrs(r, (struct sockaddr *)&l, sizeof(l), (struct sockaddr *)&p,
				 sizeof(p));
	ops_stats_sock_bytes(r, 1000, 20);
	ops_stats_sock_bytes(r, 24, 0);
	ops_stats_sock_set_relayed(r);

	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 1);
	const struct sdp_stats_sock_snap *k = &s.socks[0];

	cr_assert_eq(k->flags, SDP_STATS_ROW_RELAYED);
	cr_assert_eq(k->fd, 9);
	cr_assert_eq(k->stack, OPS_STACK_TCP);
	cr_assert_eq(k->state, OPS_ST_ESTABLISHED);
	cr_assert_eq(k->fallback, OPS_FB_NO_ROUTE);
	/* Cut to the field, which may be left unterminated in the file. */
	cr_assert_str_eq(k->transport, "tcp-fallback-and");
	cr_assert_str_eq(k->mode, "bcopy-lo");
	cr_assert_eq(k->bytes_tx, 1024);
	cr_assert_eq(k->bytes_rx, 20);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_TX], 1024);
	sdp_stats_format_addr(&k->local, buf, sizeof(buf));
	cr_assert_str_eq(buf, "10.1.2.3:5001");
	sdp_stats_format_addr(&k->peer, buf, sizeof(buf));
	cr_assert_str_eq(buf, "[fe80::1%2]:40000");
	unsigned port;

	cr_assert_eq(sdp_stats_addr_host(&k->local, buf, sizeof(buf), &port), 0);
	cr_assert_str_eq(buf, "10.1.2.3");
	cr_assert_eq(port, 5001);
	sdp_stats_snap_free(&s);

	/* NULL leaves a side alone; NULL transport clears it. */
	struct sockaddr_in6 any6 = ts_sin6("::", 80, 0);

	ops_stats_sock_set_addrs(r, (struct sockaddr *)&any6, sizeof(any6), NULL, 0);
	ops_stats_sock_set_transport(r, NULL, NULL);
	ts_read(getpid(), &s);
	sdp_stats_format_addr(&s.socks[0].local, buf, sizeof(buf));
	cr_assert_str_eq(buf, "[::]:80");
	sdp_stats_format_addr(&s.socks[0].peer, buf, sizeof(buf));
	cr_assert_str_eq(buf, "[fe80::1%2]:40000");
	cr_assert_str_eq(s.socks[0].transport, "");
	cr_assert_str_eq(s.socks[0].mode, "");
	sdp_stats_snap_free(&s);

	/* Another family, and a length too short for its family. */
	struct sockaddr un = { .sa_family = AF_UNIX };

	ops_stats_sock_set_addrs(r, &un, sizeof(un), (struct sockaddr *)&l, 4);
	ts_read(getpid(), &s);
	sdp_stats_format_addr(&s.socks[0].local, buf, sizeof(buf));
	cr_assert_str_eq(buf, "family 1");
	sdp_stats_format_addr(&s.socks[0].peer, buf, sizeof(buf));
	cr_assert_str_eq(buf, "?");
	sdp_stats_snap_free(&s);

	ops_stats_sock_free(r);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 0);
	sdp_stats_snap_free(&s);

	/* The row again, for another socket: no flag left over. */
	r = ops_stats_sock_alloc(8);
	cr_assert_not_null(r);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 1);
	cr_assert_eq(s.socks[0].flags, 0);
	sdp_stats_snap_free(&s);
	ops_stats_sock_free(r);
}

Test(stats, alloc_free_reuse)
{
	struct ops_stats_sock *a = ops_stats_sock_alloc(10);
	struct ops_stats_sock *b = ops_stats_sock_alloc(11);
	struct ops_stats_sock *c = ops_stats_sock_alloc(12);
	struct sdp_stats_snap s;

	cr_assert(a && b && c);
	cr_assert(a != b && b != c && a != c);
	ops_stats_sock_set_state(b, OPS_ST_LISTEN);
	ops_stats_sock_bytes(b, 5, 5);
	ops_stats_sock_free(b);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 2);
	cr_assert_eq(s.socks[0].fd, 10);
	cr_assert_eq(s.socks[1].fd, 12);
	sdp_stats_snap_free(&s);

	/* The freed row comes back, empty. */
	struct ops_stats_sock *d = ops_stats_sock_alloc(13);

	cr_assert_eq(d, b);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 3);
	cr_assert_eq(s.socks[2].fd, 13);
	cr_assert_eq(s.socks[2].state, OPS_ST_NEW);
	cr_assert_eq(s.socks[2].bytes_tx, 0);
	sdp_stats_snap_free(&s);

	/* A pointer that is not a row is ignored rather than written to. */
	int not_a_row = 0;

	ops_stats_sock_set_state((struct ops_stats_sock *)&not_a_row, OPS_ST_CLOSED);
	ops_stats_sock_free((struct ops_stats_sock *)&not_a_row);
	cr_assert_eq(not_a_row, 0);
	ops_stats_sock_free(a);
	ops_stats_sock_free(c);
	ops_stats_sock_free(d);
}

Test(stats, table_full)
{
	static struct ops_stats_sock *rows[SDP_STATS_CAPACITY];
	struct sdp_stats_snap s;
	struct stat st;

	for (int i = 0; i < SDP_STATS_CAPACITY; i++) {
		rows[i] = ops_stats_sock_alloc(i);
		cr_assert_not_null(rows[i], "row %d", i);
	}
	cr_assert_null(ops_stats_sock_alloc(-1));
	cr_assert_null(ops_stats_sock_alloc(-1));
	/* Every row got its own storage: full now, and no SIGBUS above. */
	cr_assert_eq(lstat(ts_path(getpid()), &st), 0);
	cr_assert_geq((size_t)st.st_blocks * 512, SDP_STATS_FILE_SIZE);

	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, SDP_STATS_CAPACITY);
	for (int i = 0; i < SDP_STATS_CAPACITY; i++)
		cr_assert_eq(s.socks[i].fd, i);
	sdp_stats_snap_free(&s);

	ops_stats_sock_free(rows[1234]);
	struct ops_stats_sock *again = ops_stats_sock_alloc(99999);

	cr_assert_eq(again, rows[1234]);
	cr_assert_null(ops_stats_sock_alloc(-1));
	rows[1234] = again;
	for (int i = 0; i < SDP_STATS_CAPACITY; i++)
		ops_stats_sock_free(rows[i]);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, 0);
	sdp_stats_snap_free(&s);
}

#define TS_THREADS 8
#define TS_PER_THREAD 200

static void *ts_churn(void *arg)
{
	struct ops_stats_sock **mine = arg;

	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < TS_PER_THREAD; i++) {
			mine[i] = ops_stats_sock_alloc(i);
			if (!mine[i])
				return (void *)1;
			ops_stats_sock_set_state(mine[i], OPS_ST_ESTABLISHED);
			ops_stats_sock_bytes(mine[i], 1, 1);
			ops_stats_count(OPS_C_SOCKETS, 1);
		}
		if (round < 19)
			for (int i = 0; i < TS_PER_THREAD; i++)
				ops_stats_sock_free(mine[i]);
	}
	return NULL;
}

static int ts_ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return (x > y) - (x < y);
}

Test(stats, threads)
{
	static struct ops_stats_sock *rows[TS_THREADS][TS_PER_THREAD];
	pthread_t th[TS_THREADS];
	struct sdp_stats_snap s;

	for (int t = 0; t < TS_THREADS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, ts_churn, rows[t]), 0);
	for (int t = 0; t < TS_THREADS; t++) {
		void *ret;

		cr_assert_eq(pthread_join(th[t], &ret), 0);
		cr_assert_null(ret);
	}
	/* No row handed out twice. */
	static uintptr_t flat[TS_THREADS * TS_PER_THREAD];

	for (int t = 0; t < TS_THREADS; t++)
		for (int i = 0; i < TS_PER_THREAD; i++)
			flat[t * TS_PER_THREAD + i] = (uintptr_t)rows[t][i];
	qsort(flat, TS_THREADS * TS_PER_THREAD, sizeof(flat[0]), ts_ptr_cmp);
	for (int i = 1; i < TS_THREADS * TS_PER_THREAD; i++)
		cr_assert_neq(flat[i - 1], flat[i]);
	ts_read(getpid(), &s);
	cr_assert_eq(s.n_socks, TS_THREADS * TS_PER_THREAD);
	cr_assert_eq(s.counters[OPS_C_SOCKETS], 20 * TS_THREADS * TS_PER_THREAD);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_TX], 20 * TS_THREADS * TS_PER_THREAD);
	for (size_t i = 0; i < s.n_socks; i++) {
		cr_assert_eq(s.socks[i].state, OPS_ST_ESTABLISHED);
		cr_assert_eq(s.socks[i].bytes_rx, 1);
	}
	sdp_stats_snap_free(&s);
}

Test(stats, program_name)
{
	struct sdp_stats_snap s;
	char longname[100];

	ops_stats_count(OPS_C_SOCKETS, 1);
	ts_read(getpid(), &s);
	cr_assert_str_eq(s.program, program_invocation_short_name);
	sdp_stats_snap_free(&s);

	/* After creation too; a long name fills the field unterminated. */
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ops_stats_set_program(longname);
	ts_read(getpid(), &s);
	cr_assert_eq(strlen(s.program), SDP_STATS_PROG_LEN);
	cr_assert_eq(strncmp(s.program, longname, SDP_STATS_PROG_LEN), 0);
	sdp_stats_snap_free(&s);

	ops_stats_set_program("short");
	ts_read(getpid(), &s);
	cr_assert_str_eq(s.program, "short");
	sdp_stats_snap_free(&s);
}

Test(stats, exit_removes_the_file)
{
	pid_t me = getpid();
	struct ops_stats_sock *r = ops_stats_sock_alloc(4);

	cr_assert_not_null(r);
	cr_assert(ts_exists(me));
	errno = 77;
	ops_stats_exit();
	cr_assert_eq(errno, 77);
	cr_assert_not(ts_exists(me));
	ops_stats_exit();
	/* Late updates (other threads, atexit handlers) are harmless and
	 * make no new file. */
	ops_stats_sock_set_state(r, OPS_ST_CLOSED);
	ops_stats_count(OPS_C_SOCKETS, 1);
	ops_stats_sock_free(r);
	cr_assert_not(ts_exists(me));
}

Test(stats, exit_before_any_use)
{
	ops_stats_exit();
	cr_assert_null(ops_stats_sock_alloc(3));
	ops_stats_count(OPS_C_SOCKETS, 1);
	cr_assert_not(ts_exists(getpid()));
}

Test(stats, stale_file_of_our_pid_is_replaced)
{
	pid_t me = getpid();
	int fd = open(ts_path(me), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	struct sdp_stats_snap s;

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "junk", 4), 4);
	close(fd);
	ops_stats_count(OPS_C_CONNECT_SDP, 2);
	ts_read(me, &s);
	cr_assert_eq(s.counters[OPS_C_CONNECT_SDP], 2);
	sdp_stats_snap_free(&s);
}

Test(stats, no_directory_means_no_statistics)
{
	char missing[PATH_MAX + 16];

	snprintf(missing, sizeof(missing), "%s/missing", ts_dir);
	cr_assert_eq(setenv(SDP_STATS_DIR_ENV, missing, 1), 0);
	errno = 99;
	cr_assert_null(ops_stats_sock_alloc(3));
	cr_assert_eq(errno, 99);
	ops_stats_count(OPS_C_SOCKETS, 1);
	ops_stats_fallback(OPS_FB_TIMEOUT);
	ops_stats_sock_bytes(NULL, 1, 1);
	ops_stats_set_program("x");
	ops_stats_atfork_child();
	ops_stats_exit();
	/* Not retried on every call: still nothing once it exists. */
	cr_assert_eq(mkdir(missing, 0700), 0);
	cr_assert_null(ops_stats_sock_alloc(3));
	cr_assert_eq(rmdir(missing), 0);
}

/* Child side of the fork tests: report through the exit status. */
static void ts_child(int with_handler, struct ops_stats_sock *inherited, int ready, int go)
{
	int code = 0;
	char c;

	if (with_handler)
		ops_stats_atfork_child();
	ops_stats_sock_set_state(inherited, OPS_ST_CLOSED);
	ops_stats_sock_bytes(inherited, 7, 0);
	if (with_handler && !ops_stats_sock_alloc(77))
		code = 10;
	ops_stats_count(OPS_C_ACCEPT_TCP, 5);
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		code = 11;
	ops_stats_exit();
	_exit(code);
}

static pid_t ts_fork(int with_handler, struct ops_stats_sock *inherited, int *ready, int *go)
{
	int rp[2], gp[2];
	pid_t pid;
	char c;

	cr_assert_eq(pipe2(rp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(gp, O_CLOEXEC), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(rp[0]);
		close(gp[1]);
		ts_child(with_handler, inherited, rp[1], gp[0]);
	}
	close(rp[1]);
	close(gp[0]);
	cr_assert_eq(read(rp[0], &c, 1), 1, "child ready");
	*ready = rp[0];
	*go = gp[1];
	return pid;
}

static void ts_reap(pid_t pid, int ready, int go)
{
	int status;

	cr_assert_eq(write(go, "g", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	close(ready);
	close(go);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0);
}

Test(stats, fork_child_gets_its_own_file)
{
	pid_t me = getpid(), child;
	struct sockaddr_in l = ts_sin("127.0.0.1", 5001);
	struct ops_stats_sock *r = ops_stats_sock_alloc(5);
	struct sdp_stats_snap s;
	int ready, go;

	cr_assert_not_null(r);
	ops_stats_set_program("parent");
	ops_stats_sock_set_state(r, OPS_ST_LISTEN);
	ops_stats_sock_set_addrs(r, (struct sockaddr *)&l, sizeof(l), NULL, 0);
	ops_stats_count(OPS_C_LISTEN_SDP, 1);

	child = ts_fork(1, r, &ready, &go);

	/* The child: the inherited row, as it changed it, plus its own;
	 * counters from zero. */
	ts_read(child, &s);
	cr_assert_eq(s.pid, child);
	cr_assert_str_eq(s.program, "parent");
	cr_assert_eq(s.n_socks, 2);
	cr_assert_eq(s.socks[0].fd, 5);
	cr_assert_eq(s.socks[0].state, OPS_ST_CLOSED);
	cr_assert_eq(s.socks[0].bytes_tx, 7);
	cr_assert_eq(s.socks[0].local.family, AF_INET);
	cr_assert_eq(s.socks[1].fd, 77);
	cr_assert_eq(s.counters[OPS_C_LISTEN_SDP], 0);
	cr_assert_eq(s.counters[OPS_C_ACCEPT_TCP], 5);
	cr_assert_eq(s.counters[OPS_C_SDP_BYTES_TX], 7);
	sdp_stats_snap_free(&s);

	/* The parent's file is untouched. */
	ts_read(me, &s);
	cr_assert_eq(s.n_socks, 1);
	cr_assert_eq(s.socks[0].state, OPS_ST_LISTEN);
	cr_assert_eq(s.socks[0].bytes_tx, 0);
	cr_assert_eq(s.counters[OPS_C_LISTEN_SDP], 1);
	cr_assert_eq(s.counters[OPS_C_ACCEPT_TCP], 0);
	sdp_stats_snap_free(&s);

	ts_reap(child, ready, go);
	cr_assert_not(ts_exists(child), "the child removed its file at exit");
	cr_assert(ts_exists(me));
	/* And the parent keeps writing to its own. */
	ops_stats_sock_set_state(r, OPS_ST_ESTABLISHED);
	ts_read(me, &s);
	cr_assert_eq(s.socks[0].state, OPS_ST_ESTABLISHED);
	sdp_stats_snap_free(&s);
}

/* A child made without the handler (a raw clone, say) writes into the
 * parent's rows, but its exit leaves the parent's file in place. */
Test(stats, child_without_handler_does_not_remove_the_parent_file)
{
	struct ops_stats_sock *r = ops_stats_sock_alloc(5);
	int ready, go;
	pid_t child;

	cr_assert_not_null(r);
	child = ts_fork(0, r, &ready, &go);
	ts_reap(child, ready, go);
	cr_assert(ts_exists(getpid()));
	cr_assert_not(ts_exists(child));
}

Test(stats, fork_child_without_a_directory_gets_private_memory)
{
	pid_t me = getpid(), child;
	struct ops_stats_sock *r = ops_stats_sock_alloc(5);
	struct sdp_stats_snap s;
	int ready, go;

	cr_assert_not_null(r);
	ops_stats_sock_set_state(r, OPS_ST_LISTEN);
	/* The child cannot make its file there. */
	cr_assert_eq(chmod(ts_dir, 0500), 0);
	if (geteuid() == 0)
		cr_assert_eq(setenv(SDP_STATS_DIR_ENV, "/nonexistent", 1), 0);
	child = ts_fork(1, r, &ready, &go);
	ts_reap(child, ready, go);
	cr_assert_eq(chmod(ts_dir, 0700), 0);
	cr_assert_eq(setenv(SDP_STATS_DIR_ENV, ts_dir, 1), 0);
	/* The parent's row never saw the child's update. */
	ts_read(me, &s);
	cr_assert_eq(s.n_socks, 1);
	cr_assert_eq(s.socks[0].state, OPS_ST_LISTEN);
	cr_assert_eq(s.socks[0].bytes_tx, 0);
	cr_assert_eq(s.counters[OPS_C_ACCEPT_TCP], 0);
	sdp_stats_snap_free(&s);
	cr_assert_not(ts_exists(child));
}

/* A file whose process is gone, or whose pid was reused, is stale. */
Test(stats, reader_stale_files)
{
	pid_t me = getpid(), dead;
	struct sdp_stats_snap s;
	int status;

	ops_stats_count(OPS_C_SOCKETS, 1);

	/* Our file, claiming a start time that is not ours. */
	struct sdp_stats_hdr h = ts_header(me);
	uint64_t other = h.start_time + 1;

	ts_patch(me, offsetof(struct sdp_stats_hdr, start_time), &other, sizeof(other));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -ESRCH);
	cr_assert_eq(s.n_socks, 0);
	cr_assert(ts_exists(me), "kept without SDP_STATS_REMOVE_STALE");

	/* A copy of it under the pid of a process that has exited. */
	dead = fork();
	cr_assert_geq(dead, 0);
	if (dead == 0)
		_exit(0);
	cr_assert_eq(waitpid(dead, &status, 0), dead);
	h.pid = dead;
	int fd = open(ts_path(dead), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
	cr_assert_eq(ftruncate(fd, (off_t)SDP_STATS_FILE_SIZE), 0);
	close(fd);
	cr_assert_eq(sdp_stats_read(ts_dir, dead, SDP_STATS_REMOVE_STALE, &s), -ESRCH);
	cr_assert_not(ts_exists(dead));

	cr_assert_eq(sdp_stats_read(ts_dir, me, SDP_STATS_REMOVE_STALE, &s), -ESRCH);
	cr_assert_not(ts_exists(me));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -ENOENT);
}

Test(stats, reader_rejects_what_it_cannot_read)
{
	pid_t me = getpid();
	struct sdp_stats_snap s;
	uint32_t v;
	uint64_t m;

	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -ENOENT);
	cr_assert_eq(sdp_stats_read(ts_dir, 0, 0, &s), -EINVAL);
	ops_stats_count(OPS_C_SOCKETS, 1);

	v = SDP_STATS_VERSION + 1;
	ts_patch(me, offsetof(struct sdp_stats_hdr, version), &v, sizeof(v));
	cr_assert_eq(sdp_stats_read(ts_dir, me, SDP_STATS_REMOVE_STALE, &s), -EPROTO);
	cr_assert(ts_exists(me), "a live process's file is never removed");
	v = SDP_STATS_VERSION;
	ts_patch(me, offsetof(struct sdp_stats_hdr, version), &v, sizeof(v));

	v = (uint32_t)me + 1;
	ts_patch(me, offsetof(struct sdp_stats_hdr, pid), &v, sizeof(v));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EPROTO);
	v = (uint32_t)me;
	ts_patch(me, offsetof(struct sdp_stats_hdr, pid), &v, sizeof(v));

	/* Not yet finished by its writer. */
	m = 0;
	ts_patch(me, offsetof(struct sdp_stats_hdr, magic), &m, sizeof(m));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EAGAIN);
	m = 12345;
	ts_patch(me, offsetof(struct sdp_stats_hdr, magic), &m, sizeof(m));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EPROTO);
	m = SDP_STATS_MAGIC;
	ts_patch(me, offsetof(struct sdp_stats_hdr, magic), &m, sizeof(m));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), 0);
	sdp_stats_snap_free(&s);

	/* A row whose writer never leaves is skipped, not waited on forever. */
	struct ops_stats_sock *r = ops_stats_sock_alloc(3);

	cr_assert_not_null(r);
	v = 1;
	ts_patch(me, sizeof(struct sdp_stats_hdr), &v, sizeof(v));
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), 0);
	cr_assert_eq(s.n_socks, 0);
	cr_assert_eq(s.n_busy, 1);
	sdp_stats_snap_free(&s);
	v = 2;
	ts_patch(me, sizeof(struct sdp_stats_hdr), &v, sizeof(v));

	/* Truncated under the reader: a short read, not a crash. */
	cr_assert_eq(truncate(ts_path(me), 1000), 0);
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EPROTO);
	cr_assert_eq(truncate(ts_path(me), 100), 0);
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EAGAIN);

	/* A symlink or a FIFO under our name is not followed or opened. */
	cr_assert_eq(unlink(ts_path(me)), 0);
	cr_assert_eq(symlink("/etc/passwd", ts_path(me)), 0);
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EPROTO);
	cr_assert_eq(unlink(ts_path(me)), 0);
	cr_assert_eq(mkfifo(ts_path(me), 0600), 0);
	cr_assert_eq(sdp_stats_read(ts_dir, me, 0, &s), -EPROTO);
}

Test(stats, list)
{
	static const char *const names[] = {
		"libsdp-stats.12", "libsdp-stats.3", "libsdp-stats.012", "libsdp-stats.",
		"libsdp-stats.4x", "libsdp-stats.-5", "libsdp-stats.99999999999", "other.7",
		"libsdp-stats.100",
	};
	char path[PATH_MAX + 64];
	pid_t *pids;
	size_t n;

	cr_assert_eq(sdp_stats_list(ts_dir, &pids, &n), 0);
	cr_assert_eq(n, 0);
	cr_assert_null(pids);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", ts_dir, names[i]);
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		cr_assert_geq(fd, 0);
		close(fd);
	}
	cr_assert_eq(sdp_stats_list(ts_dir, &pids, &n), 0);
	cr_assert_eq(n, 3);
	cr_assert_eq(pids[0], 3);
	cr_assert_eq(pids[1], 12);
	cr_assert_eq(pids[2], 100);
	free(pids);

	snprintf(path, sizeof(path), "%s/none", ts_dir);
	cr_assert_eq(sdp_stats_list(path, &pids, &n), -ENOENT);
}

Test(stats, proc_stat_parser)
{
	/* A command with ") (", blanks and a digit run in it. */
	static const char stat[] =
		"4242 (we ird) (1 2) R 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
		"987654 10000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
	uint64_t start = 0;
	char state = 0;

	cr_assert_eq(sdp_stats_parse_proc_stat(stat, strlen(stat), &state, &start), 0);
	cr_assert_eq(state, 'R');
	cr_assert_eq(start, 987654);
	/* Cut in the middle of field 22, or before it. */
	size_t cut = (size_t)(strstr(stat, "987654") - stat) + 3;

	cr_assert_eq(sdp_stats_parse_proc_stat(stat, cut, &state, &start), -EINVAL);
	cr_assert_eq(sdp_stats_parse_proc_stat(stat, 20, &state, &start), -EINVAL);
	cr_assert_eq(sdp_stats_parse_proc_stat("1 (x) R 1 2\n", 12, &state, &start), -EINVAL);
	cr_assert_eq(sdp_stats_parse_proc_stat("no paren", 8, &state, &start), -EINVAL);

	cr_assert_eq(sdp_stats_proc_start(0, &state, &start), 0);
	cr_assert_eq(state, 'R');
	uint64_t again;

	cr_assert_eq(sdp_stats_proc_start(getpid(), &state, &again), 0);
	cr_assert_eq(again, start);
}

static char *ts_json(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	sdp_stats_json_string(f, s);
	fclose(f);
	return buf;
}

Test(stats, json_strings)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "plain", "\"plain\"" },
		{ "", "\"\"" },
		{ "q\"b\\s/", "\"q\\\"b\\\\s/\"" },
		{ "\x01\n\t\x1f\x7f", "\"\\u0001\\u000a\\u0009\\u001f\\u007f\"" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"" },
		/* Not UTF-8: a lone continuation byte, a cut sequence, an
		 * overlong form, a surrogate, above U+10FFFF. */
		{ "a\x80z", "\"a\\ufffdz\"" },
		{ "\xe2\x82", "\"\\ufffd\\ufffd\"" },
		{ "\xc0\xaf", "\"\\ufffd\\ufffd\"" },
		{ "\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"" },
		{ "\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = ts_json(cases[i].in);

		cr_assert_str_eq(got, cases[i].out, "case %zu", i);
		free(got);
	}
}

Test(stats, text_for_a_terminal)
{
	char buf[8];

	sdp_stats_clean_text(buf, sizeof(buf), "a\x1b[2J");
	cr_assert_str_eq(buf, "a?[2J");
	sdp_stats_clean_text(buf, sizeof(buf), "\xc3\xa9\xff\x80z");
	cr_assert_str_eq(buf, "\xc3\xa9??z");
	/* Cut to the buffer, never inside a character. */
	sdp_stats_clean_text(buf, sizeof(buf), "abcde\xe2\x82\xac");
	cr_assert_str_eq(buf, "abcde");
	sdp_stats_clean_text(buf, sizeof(buf), "abcdefghij");
	cr_assert_str_eq(buf, "abcdefg");
}

/* A small JSON checker: enough to tell whether sdpstat's output parses. */
static const char *ts_j_value(const char *p);

static const char *ts_j_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *ts_j_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
		p++;
	}
	return p + 1;
}

static const char *ts_j_container(const char *p, char close, int keyed)
{
	p = ts_j_ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (keyed) {
			p = ts_j_string(ts_j_ws(p));
			if (!p)
				return NULL;
			p = ts_j_ws(p);
			if (*p++ != ':')
				return NULL;
		}
		p = ts_j_value(p);
		if (!p)
			return NULL;
		p = ts_j_ws(p);
		if (*p == close)
			return p + 1;
		if (*p++ != ',')
			return NULL;
	}
}

static const char *ts_j_value(const char *p)
{
	p = ts_j_ws(p);
	if (*p == '{')
		return ts_j_container(p, '}', 1);
	if (*p == '[')
		return ts_j_container(p, ']', 0);
	if (*p == '"')
		return ts_j_string(p);
	if (!strncmp(p, "null", 4) || !strncmp(p, "true", 4))
		return p + 4;
	if (!strncmp(p, "false", 5))
		return p + 5;
	if (*p == '-' || (*p >= '0' && *p <= '9')) {
		p++;
		while (*p >= '0' && *p <= '9')
			p++;
		return p;
	}
	return NULL;
}

static int ts_json_valid(const char *doc)
{
	const char *end = ts_j_value(doc);

	return end && !*ts_j_ws(end);
}

/* Run sdpstat with args on our file; its whole stdout, and its status. */
static char *ts_sdpstat(const char *args, int *status)
{
	const char *top = getenv("top_builddir");
	char cmd[PATH_MAX + 256];
	char *out = NULL;
	size_t len = 0;
	FILE *p, *m;
	int c;

	cr_assert_not_null(top);
	snprintf(cmd, sizeof(cmd), "'%s/tools/sdpstat' %s", top, args);
	m = open_memstream(&out, &len);
	cr_assert_not_null(m);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while ((c = getc(p)) != EOF)
		putc(c, m);
	*status = pclose(p);
	fclose(m);
	return out;
}

Test(stats, sdpstat_output)
{
	struct sockaddr_in l = ts_sin("0.0.0.0", 5201);
	struct sockaddr_in6 p = ts_sin6("::1", 40001, 0);
	struct ops_stats_sock *a, *b, *c;
	char args[64], *out;
	int status;

	if (!getenv("top_builddir")) {
		/* A skipped test does not get its .fini. */
		ts_teardown();
		cr_skip_test("top_builddir not set: run through make check");
	}
	ops_stats_set_program("we\"ird\\\x01\xff");
	a = ops_stats_sock_alloc(3);
	b = ops_stats_sock_alloc(4);
	c = ops_stats_sock_alloc(5);
	cr_assert(a && b && c);
	ops_stats_sock_set_stack(a, OPS_STACK_SDP, OPS_FB_NONE);
	ops_stats_sock_set_state(a, OPS_ST_LISTEN);
	ops_stats_sock_set_transport(a, "tcp-fallback", "bcopy");
	ops_stats_sock_set_addrs(a, (struct sockaddr *)&l, sizeof(l), NULL, 0);
	ops_stats_sock_set_stack(b, OPS_STACK_TCP, OPS_FB_REFUSED);
	ops_stats_sock_set_state(b, OPS_ST_ESTABLISHED);
	ops_stats_sock_set_addrs(b, (struct sockaddr *)&p, sizeof(p), (struct sockaddr *)&p,
				 sizeof(p));
	ops_stats_sock_bytes(a, 4096, 512);
	/* An SDP connection relayed at a fork (ops/relay.c). */
	ops_stats_sock_set_stack(c, OPS_STACK_SDP, OPS_FB_NONE);
	ops_stats_sock_set_state(c, OPS_ST_ESTABLISHED);
	ops_stats_sock_set_relayed(c);
	ops_stats_count(OPS_C_RELAYS, 1);
	ops_stats_count(OPS_C_LISTEN_SDP, 1);
	ops_stats_fallback(OPS_FB_REFUSED);
	SDP_STAT_INC(zcopy_reads, 3);
	SDP_STAT_INC(regcache_hits, 2);
	ops_stats_engine_sync();

	snprintf(args, sizeof(args), "-p %ld", (long)getpid());
	out = ts_sdpstat(args, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert_not_null(strstr(out, "we\"ird\\??"), "%s", out);
	cr_assert_not_null(strstr(out, "fallbacks 1 (refused 1)"), "%s", out);
	cr_assert_not_null(strstr(out, "FD"), "%s", out);
	cr_assert_not_null(strstr(out, "0.0.0.0:5201"), "%s", out);
	cr_assert_not_null(strstr(out, "[::1]:40001"), "%s", out);
	cr_assert_not_null(strstr(out, "tcp-fallback"), "%s", out);
	cr_assert_not_null(strstr(out, "4096"), "%s", out);
	cr_assert_not_null(strstr(out, ", zcopy reads 3,"), "%s", out);
	cr_assert_not_null(strstr(out, "regcache hits/misses/evictions/invalidations 2/0/0/0"),
			   "%s", out);
	cr_assert_not_null(strstr(out, ", relays 1"), "%s", out);
	cr_assert_not_null(strstr(out, " established,relayed "), "%s", out);
	free(out);

	snprintf(args, sizeof(args), "--json -p %ld", (long)getpid());
	out = ts_sdpstat(args, &status);
	cr_assert_eq(status, 0, "%s", out);
	cr_assert(ts_json_valid(out), "not JSON: %s", out);
	cr_assert_not_null(strstr(out, "\"program\":\"we\\\"ird\\\\\\u0001\\ufffd\""), "%s", out);
	cr_assert_not_null(strstr(out, "\"refused\":1"), "%s", out);
	cr_assert_not_null(strstr(out, "\"listen_sdp\":1"), "%s", out);
	cr_assert_not_null(strstr(out, "\"zcopy_offers\":0,"), "%s", out);
	cr_assert_not_null(strstr(out, "\"regcache_hits\":2,"), "%s", out);
	cr_assert_not_null(strstr(out, "\"local\":{\"family\":\"inet\",\"address\":\"0.0.0.0\","
				       "\"port\":5201}"), "%s", out);
	cr_assert_not_null(strstr(out, "\"peer\":null"), "%s", out);
	cr_assert_not_null(strstr(out, "\"relays\":1"), "%s", out);
	cr_assert_not_null(strstr(out, "{\"fd\":3,\"stack\":\"sdp\",\"state\":\"listen\","
				       "\"relayed\":false,"), "%s", out);
	cr_assert_not_null(strstr(out, "{\"fd\":5,\"stack\":\"sdp\",\"state\":\"established\","
				       "\"relayed\":true,"), "%s", out);
	free(out);

	/* Every process in the directory: ours, and nothing stale. */
	out = ts_sdpstat("--json --counters", &status);
	cr_assert_eq(status, 0);
	cr_assert(ts_json_valid(out), "not JSON: %s", out);
	cr_assert_null(strstr(out, "\"sockets\":["), "%s", out);
	free(out);

	/* Gone: "none" on stdout, and still success. */
	ops_stats_exit();
	out = ts_sdpstat("", &status);
	cr_assert_eq(status, 0);
	cr_assert_str_eq(out, "no process is using libsdp\n");
	free(out);
	out = ts_sdpstat("--json", &status);
	cr_assert_eq(status, 0);
	cr_assert_str_eq(out, "{\"processes\":[]}\n");
	free(out);
}

/* sdp_get_stats() fills the size the caller was built with: a shorter
 * struct (an older program) is not written past, a longer one (a newer
 * program on an older library) gets zeros for what the library does not
 * know, and the unsized entry of programs built before the macro fills
 * the struct as it was then. */
Test(stats, sized_copy)
{
	const size_t full = sizeof(struct sdp_stats), n = full / sizeof(uint64_t);
	uint64_t buf[n + 4];

	SDP_STAT_INC(regcache_hits, 1);
	struct sdp_stats now;

	sdp_get_stats(&now);
	cr_assert_geq(now.regcache_hits, 1);

	/* shorter: up to regcache_hits, the rest untouched */
	size_t shorter = offsetof(struct sdp_stats, regcache_hits) + sizeof(uint64_t);

	memset(buf, 0xa5, sizeof(buf));
	sdp_get_stats_size((struct sdp_stats *)buf, shorter);
	cr_assert_eq(((struct sdp_stats *)buf)->regcache_hits, now.regcache_hits);
	for (size_t i = shorter / sizeof(uint64_t); i < n + 4; i++)
		cr_assert_eq(buf[i], 0xa5a5a5a5a5a5a5a5ull, "word %zu written", i);

	/* longer: the fields beyond the library's are zeros */
	memset(buf, 0xa5, sizeof(buf));
	sdp_get_stats_size((struct sdp_stats *)buf, sizeof(buf));
	for (size_t i = n; i < n + 4; i++)
		cr_assert_eq(buf[i], 0, "word %zu not zeroed", i);
	cr_assert_eq(((struct sdp_stats *)buf)->fds, (uint64_t)fdspace_count());

	/* the unsized entry: the struct up to rx_copied_out, no more */
	size_t old = offsetof(struct sdp_stats, rx_copied_out) + sizeof(uint64_t);

	memset(buf, 0xa5, sizeof(buf));
	(sdp_get_stats)((struct sdp_stats *)buf);
	cr_assert_neq(buf[old / sizeof(uint64_t) - 1], 0xa5a5a5a5a5a5a5a5ull);
	for (size_t i = old / sizeof(uint64_t); i < n + 4; i++)
		cr_assert_eq(buf[i], 0xa5a5a5a5a5a5a5a5ull, "word %zu written", i);
}
