/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The writer of the live statistics file (layout: common/stats_shm.h).
 *
 * This runs inside the application, called from interposed socket calls,
 * so: no fd stays open (the file is mapped and its fd closed at once),
 * errno is preserved, nothing is printed, and every failure turns the
 * statistics off instead of reaching the application.  Storage is
 * reserved with posix_fallocate() before a page is used, a chunk of rows
 * at a time: a write to a page of a full tmpfs would otherwise be a
 * SIGBUS in the application.
 *
 * The row paths (alloc, free, updates, counters) take no lock: rows are
 * claimed in a bitmap with compare-and-swap, and a row's writers exclude
 * each other with its seqlock.  stats_lock is taken only for the rare
 * things (making the file, growing it, the program name, exit), never
 * while another lock is held by this file.
 */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sdp.h"
#include "stats_read.h"
#include "stats_shm.h"
#include "sys.h"

/* The opaque row handed to the switch is the row in the file. */
struct ops_stats_sock {
	struct sdp_stats_row shm;
};
static_assert(sizeof(struct ops_stats_sock) == sizeof(struct sdp_stats_row),
	      "a row handle is a row of the file");

/* Rows are backed with storage this many at a time (one bitmap word). */
#define STATS_CHUNK 64
#define STATS_WORDS (SDP_STATS_CAPACITY / 64)
static_assert(SDP_STATS_CAPACITY % STATS_CHUNK == 0, "whole chunks");

enum stats_state {
	STATS_NONE,	/* not tried yet */
	STATS_READY,	/* stats_hdr is mapped */
	STATS_OFF,	/* creation failed, or exit came first: all no-ops */
};

/* Protects creation, growth, stats_prog*, stats_path, stats_ino and
 * stats_owner. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
/* enum stats_state; STATS_READY is stored with release after stats_hdr
 * and stats_rows, which never change afterwards (a fork child maps its
 * own file at the same address). */
static int stats_state;
static struct sdp_stats_hdr *stats_hdr;
static struct ops_stats_sock *stats_rows;
/* Rows [0, stats_backed) have storage; only those are handed out. */
static uint32_t stats_backed;
/* Bit set: row allocated. */
static uint64_t stats_used[STATS_WORDS];
/* The pid whose file this is, 0 when there is no file of ours to grow or
 * remove (after exit, or a fork child left with private memory).  A
 * process that forked without our atfork handler sees another pid here
 * and leaves its parent's file alone. */
static pid_t stats_owner;
static char stats_path[PATH_MAX];
static dev_t stats_dev;	/* the file's identity, checked when it is */
static ino_t stats_ino;	/* reopened to grow it */
static char stats_prog[SDP_STATS_PROG_LEN];
static int stats_prog_set;
static int stats_atexit_done;
/* This thread is inside stats_lock: the close() of our own fd goes
 * through the preload, and a signal handler may make a socket, and
 * either may call back in here; they get a no-op instead of waiting for
 * themselves. */
static __thread int stats_busy;

/* src into a fixed field: cut to cap, NUL-padded, left unterminated when
 * it fills the field (the layout allows it). */
static void stats_put_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap) : 0;

	if (n)
		memcpy(dst, src, n);
	memset(dst + n, 0, cap - n);
}

/*
 * Stores into the file under a seqlock.  Each is a release store, which
 * orders the odd sequence (and everything before) ahead of it: that is
 * what a seqlock writer needs, said without atomic_thread_fence (which
 * ThreadSanitizer refuses).  Byte by byte for arrays: updates are rare
 * and short.  src NULL stores zeros.
 */
static void stats_pub(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *p = src;

	for (size_t i = 0; i < n; i++)
		__atomic_store_n(&d[i], p ? p[i] : 0, __ATOMIC_RELEASE);
}

static void stats_pub_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap) : 0;

	stats_pub(dst, src, n);
	stats_pub(dst + n, NULL, cap - n);
}

#define STATS_PUB(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)

static off_t stats_rows_end(uint32_t rows)
{
	return (off_t)sizeof(struct sdp_stats_hdr) + (off_t)rows * sizeof(struct sdp_stats_row);
}

/*
 * A new file at path, sized and with storage for its header and its first
 * rows rows, returned open (the caller maps it and closes it).  A file
 * already there is stale: its pid is ours, so its owner is gone (or it is
 * our own parent's copy, before an exec).
 */
static int stats_file_create(const char *path, uint32_t rows)
{
	for (int attempt = 0;; attempt++) {
		int fd = sys.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		int ret;

		if (fd < 0) {
			ret = -errno;
			/* ENOENT: sdpstat removed it first. */
			if (ret == -EEXIST && attempt < 3 && (!unlink(path) || errno == ENOENT))
				continue;
			return ret;
		}
		if (ftruncate(fd, (off_t)SDP_STATS_FILE_SIZE) < 0)
			ret = -errno;
		else
			ret = -posix_fallocate(fd, 0, stats_rows_end(rows));
		if (!ret) {
			struct stat st;

			if (fstat(fd, &st) < 0) {
				ret = -errno;
			} else {
				stats_dev = st.st_dev;
				stats_ino = st.st_ino;
				return fd;
			}
		}
		sys.close(fd);
		unlink(path);
		return ret;
	}
}

static void stats_write_prog_locked(void)
{
	struct sdp_stats_hdr *h = stats_hdr;
	/* stats_prog may fill its field unterminated: copied with its size. */
	const char *name = stats_prog_set ? stats_prog : program_invocation_short_name;
	uint32_t s = h->prog_seq;

	/* Writers hold stats_lock; readers retry while the sequence is odd. */
	__atomic_store_n(&h->prog_seq, s + 1, __ATOMIC_RELAXED);
	stats_pub_str(h->program, sizeof(h->program), name);
	__atomic_store_n(&h->prog_seq, s + 2, __ATOMIC_RELEASE);
}

/* Fill the header of a new file at h, magic last. */
static void stats_fill_hdr(struct sdp_stats_hdr *h, pid_t pid)
{
	char pstate;
	uint64_t start = 0;

	h->version = SDP_STATS_VERSION;
	h->hdr_size = sizeof(struct sdp_stats_hdr);
	h->row_size = sizeof(struct sdp_stats_row);
	h->capacity = SDP_STATS_CAPACITY;
	h->pid = pid;
	h->n_counters = OPS_C_MAX;
	h->n_fallbacks = OPS_FB_MAX;
	if (sdp_stats_proc_start(0, &pstate, &start) < 0)
		start = 0;	/* the reader then checks only that pid lives */
	h->start_time = start;
}

static void stats_create_locked(void)
{
	pid_t pid = getpid();
	void *map;
	int fd;

	if (sdp_stats_path(sdp_stats_dir(), pid, stats_path, sizeof(stats_path)))
		goto off;
	fd = stats_file_create(stats_path, STATS_CHUNK);
	if (fd < 0)
		goto off;
	map = mmap(NULL, SDP_STATS_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	sys.close(fd);
	if (map == MAP_FAILED)
		goto remove_file;
	stats_hdr = map;
	stats_rows = (struct ops_stats_sock *)((char *)map + sizeof(struct sdp_stats_hdr));
	stats_backed = STATS_CHUNK;
	stats_owner = pid;
	stats_fill_hdr(stats_hdr, pid);
	stats_write_prog_locked();
	__atomic_store_n(&stats_hdr->magic, SDP_STATS_MAGIC, __ATOMIC_RELEASE);
	/* Without atexit the file stays until sdpstat finds the pid gone. */
	if (!stats_atexit_done && !atexit(ops_stats_exit))
		stats_atexit_done = 1;
	__atomic_store_n(&stats_state, STATS_READY, __ATOMIC_RELEASE);
	return;

remove_file:
	unlink(stats_path);
off:
	stats_path[0] = '\0';
	__atomic_store_n(&stats_state, STATS_OFF, __ATOMIC_RELEASE);
}

/* The mapped header, made on first use; NULL when statistics are off. */
static struct sdp_stats_hdr *stats_get(void)
{
	int st = __atomic_load_n(&stats_state, __ATOMIC_ACQUIRE);

	if (st == STATS_READY)
		return stats_hdr;
	if (st == STATS_OFF || stats_busy)
		return NULL;

	int saved = errno;

	stats_busy = 1;
	pthread_mutex_lock(&stats_lock);
	if (__atomic_load_n(&stats_state, __ATOMIC_RELAXED) == STATS_NONE)
		stats_create_locked();
	pthread_mutex_unlock(&stats_lock);
	stats_busy = 0;
	errno = saved;
	return __atomic_load_n(&stats_state, __ATOMIC_ACQUIRE) == STATS_READY ? stats_hdr : NULL;
}

void ops_stats_count(enum ops_counter c, uint64_t n)
{
	struct sdp_stats_hdr *h;

	if ((unsigned)c >= OPS_C_MAX || !n)
		return;
	h = stats_get();
	if (h)
		__atomic_fetch_add(&h->counters[c], n, __ATOMIC_RELAXED);
}

/* The engine counters the file carries, and where each is in struct
 * sdp_stats. */
static const struct {
	enum ops_counter c;
	size_t off;
} stats_engine_map[] = {
#define STATS_ENGINE(c, field) { c, offsetof(struct sdp_stats, field) }
	STATS_ENGINE(OPS_C_ZCOPY_OFFERS, zcopy_offers),
	STATS_ENGINE(OPS_C_ZCOPY_BYTES_SENT, zcopy_bytes_sent),
	STATS_ENGINE(OPS_C_ZCOPY_REFUSED, zcopy_refused),
	STATS_ENGINE(OPS_C_ZCOPY_CANCELS, zcopy_cancels),
	STATS_ENGINE(OPS_C_ZCOPY_READS, zcopy_reads),
	STATS_ENGINE(OPS_C_ZCOPY_BYTES_RECEIVED, zcopy_bytes_received),
	STATS_ENGINE(OPS_C_ZCOPY_DIRECT_BYTES, zcopy_direct_bytes),
	STATS_ENGINE(OPS_C_REGCACHE_HITS, regcache_hits),
	STATS_ENGINE(OPS_C_REGCACHE_MISSES, regcache_misses),
	STATS_ENGINE(OPS_C_REGCACHE_EVICTIONS, regcache_evictions),
	STATS_ENGINE(OPS_C_REGCACHE_INVALIDATIONS, regcache_invalidations),
	STATS_ENGINE(OPS_C_ZCOPY_PULLED, zcopy_pulled),
	STATS_ENGINE(OPS_C_ZCOPY_WRITES, zcopy_writes),
	STATS_ENGINE(OPS_C_ZCOPY_BYTES_WRITTEN, zcopy_bytes_written),
	STATS_ENGINE(OPS_C_ZCOPY_SINK_ADVERTS, zcopy_sink_adverts),
	STATS_ENGINE(OPS_C_ZCOPY_SINK_BYTES, zcopy_sink_bytes),
	STATS_ENGINE(OPS_C_ZCOPY_SINK_STALE, zcopy_sink_stale),
	STATS_ENGINE(OPS_C_ZCOPY_SINK_CANCELS, zcopy_sink_cancels),
	STATS_ENGINE(OPS_C_MODE_CHANGES_SENT, mode_changes_sent),
	STATS_ENGINE(OPS_C_MODE_CHANGES_RECEIVED, mode_changes_received),
	STATS_ENGINE(OPS_C_TRANS_PIGGYBACKS, trans_piggybacks),
	STATS_ENGINE(OPS_C_TRANS_MISSES, trans_misses),
	STATS_ENGINE(OPS_C_ZCOPY_PEER_ADVERTS, zcopy_peer_adverts),
	STATS_ENGINE(OPS_C_PROGRESS_FD_DRIVES, progress_fd_drives),
	STATS_ENGINE(OPS_C_READINESS_WRITES, readiness_writes),
	STATS_ENGINE(OPS_C_PROGRESS_LOCK_WAITS, progress_lock_waits),
	STATS_ENGINE(OPS_C_PROGRESS_BUSY_SKIPS, progress_busy_skips),
	STATS_ENGINE(OPS_C_PROGRESS_WAKEUPS, progress_wakeups),
	STATS_ENGINE(OPS_C_SPIN_POLL_ANSWERS, spin_poll_answers),
	STATS_ENGINE(OPS_C_PROGRESS_SET_CHANGES, progress_set_changes),
	STATS_ENGINE(OPS_C_RING_ALLOCS, ring_allocs),
	STATS_ENGINE(OPS_C_WATCH_WRITES, watch_writes),
	STATS_ENGINE(OPS_C_TRANSPORT_EMPTY_READS, transport_empty_reads),
	STATS_ENGINE(OPS_C_BUF_GROWS, buf_grows),
	STATS_ENGINE(OPS_C_RX_COPIED_OUT, rx_copied_out),
#undef STATS_ENGINE
};
#define STATS_N_ENGINE (sizeof(stats_engine_map) / sizeof(stats_engine_map[0]))
/* The engine's value of each, as far as it is already in the file.  A
 * fork child keeps its parent's: its file counts from the fork. */
static uint64_t stats_engine_seen[STATS_N_ENGINE];

void ops_stats_engine_sync(void)
{
	struct sdp_stats st;

	sdp_get_stats(&st);
	for (size_t i = 0; i < STATS_N_ENGINE; i++) {
		uint64_t now, seen = __atomic_load_n(&stats_engine_seen[i], __ATOMIC_RELAXED);

		memcpy(&now, (const char *)&st + stats_engine_map[i].off, sizeof(now));
		/* Concurrent syncs: whoever moves seen forward adds that
		 * step, so each increment reaches the file once. */
		while (now > seen) {
			if (__atomic_compare_exchange_n(&stats_engine_seen[i], &seen, now, 0,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				ops_stats_count(stats_engine_map[i].c, now - seen);
				break;
			}
		}
	}
	/* What the process holds now: stored, not added (a fork child's
	 * file starts from zero, and these go down as well as up), and only
	 * into a file that exists: holding is no reason to make one. */
	if (__atomic_load_n(&stats_state, __ATOMIC_ACQUIRE) == STATS_READY) {
		__atomic_store_n(&stats_hdr->counters[OPS_C_BUF_BYTES], st.buf_bytes,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&stats_hdr->counters[OPS_C_FDS], st.fds, __ATOMIC_RELAXED);
	}
}

void ops_stats_fallback(enum ops_fallback r)
{
	struct sdp_stats_hdr *h;

	/* "none" is not a fallback. */
	if ((unsigned)r >= OPS_FB_MAX || r == OPS_FB_NONE)
		return;
	h = stats_get();
	if (!h)
		return;
	__atomic_fetch_add(&h->fallbacks[r], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->counters[OPS_C_FALLBACKS], 1, __ATOMIC_RELAXED);
}

/* Enter a row's seqlock; returns the odd sequence to leave it with. */
static uint32_t stats_row_lock(struct sdp_stats_row *r)
{
	uint32_t s = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);

	for (;;) {
		if (!(s & 1) && __atomic_compare_exchange_n(&r->seq, &s, s + 1, 1,
							    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			break;
		if (s & 1) {
			/* Another thread updates the same socket: short. */
			sched_yield();
			s = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
		}
	}
	/* The stores that follow are release stores (stats_pub): the odd
	 * sequence is visible before any of them. */
	return s + 1;
}

static void stats_row_unlock(struct sdp_stats_row *r, uint32_t odd)
{
	__atomic_store_n(&r->seq, odd + 1, __ATOMIC_RELEASE);
}

/* Empty a row's contents (under its seqlock), in_use aside. */
static void stats_row_clear(struct sdp_stats_row *r, int fd)
{
	STATS_PUB(r->stack, OPS_STACK_UNDECIDED);
	STATS_PUB(r->state, OPS_ST_NEW);
	STATS_PUB(r->fallback, OPS_FB_NONE);
	STATS_PUB(r->fd, fd);
	STATS_PUB(r->flags, 0);
	stats_pub(r->transport, NULL, sizeof(r->transport));
	stats_pub(r->mode, NULL, sizeof(r->mode));
	stats_pub(&r->local, NULL, sizeof(r->local));
	stats_pub(&r->peer, NULL, sizeof(r->peer));
	__atomic_store_n(&r->bytes_tx, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&r->bytes_rx, 0, __ATOMIC_RELAXED);
}

/* Claim a free row below limit; -1 when there is none. */
static int stats_row_claim(uint32_t limit)
{
	for (uint32_t w = 0; w < limit / 64; w++) {
		uint64_t used = __atomic_load_n(&stats_used[w], __ATOMIC_RELAXED);

		while (~used) {
			int bit = __builtin_ctzll(~used);

			if (__atomic_compare_exchange_n(&stats_used[w], &used,
							used | (UINT64_C(1) << bit), 1,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				return (int)(w * 64 + (uint32_t)bit);
		}
	}
	return -1;
}

/* Give the next chunk of rows storage.  0 when there is more room than
 * seen (possibly grown by another thread), or a negative errno. */
static int stats_grow(uint32_t seen)
{
	int ret = 0;

	if (stats_busy)
		return -EDEADLK;
	int saved = errno;

	stats_busy = 1;
	pthread_mutex_lock(&stats_lock);
	if (__atomic_load_n(&stats_backed, __ATOMIC_RELAXED) != seen) {
		ret = 0;
	} else if (seen >= SDP_STATS_CAPACITY) {
		ret = -ENOSPC;
	} else if (stats_owner != getpid()) {
		ret = -ENOENT;	/* removed at exit, or not ours */
	} else {
		/* Reopened by name (no fd is kept), and checked to be the
		 * file we mapped rather than whatever now has its name. */
		int fd = sys.open(stats_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;

		if (fd < 0) {
			ret = -errno;
		} else {
			if (fstat(fd, &st) < 0)
				ret = -errno;
			else if (st.st_dev != stats_dev || st.st_ino != stats_ino)
				ret = -ESTALE;
			else
				/* Only the new rows: nobody writes there yet, which
				 * matters where posix_fallocate() is emulated with
				 * writes. */
				ret = -posix_fallocate(fd, stats_rows_end(seen),
						       stats_rows_end(seen + STATS_CHUNK) -
							       stats_rows_end(seen));
			sys.close(fd);
		}
		if (!ret)
			__atomic_store_n(&stats_backed, seen + STATS_CHUNK, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&stats_lock);
	stats_busy = 0;
	errno = saved;
	return ret;
}

/* Raise row_hwm to at least idx + 1. */
static void stats_raise_hwm(struct sdp_stats_hdr *h, uint32_t idx)
{
	uint32_t cur = __atomic_load_n(&h->row_hwm, __ATOMIC_RELAXED);

	while (cur < idx + 1 &&
	       !__atomic_compare_exchange_n(&h->row_hwm, &cur, idx + 1, 1, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
}

struct ops_stats_sock *ops_stats_sock_alloc(int fd)
{
	struct sdp_stats_hdr *h = stats_get();
	struct sdp_stats_row *r;
	int idx;

	if (!h)
		return NULL;
	for (;;) {
		uint32_t limit = __atomic_load_n(&stats_backed, __ATOMIC_ACQUIRE);

		idx = stats_row_claim(limit);
		if (idx >= 0)
			break;
		if (limit >= SDP_STATS_CAPACITY || stats_grow(limit) < 0)
			return NULL;	/* table full, or no storage */
	}
	stats_raise_hwm(h, (uint32_t)idx);
	r = &stats_rows[idx].shm;
	uint32_t odd = stats_row_lock(r);

	stats_row_clear(r, fd);
	STATS_PUB(r->in_use, 1);
	stats_row_unlock(r, odd);
	return &stats_rows[idx];
}

/* row, if it is one of ours (a stray pointer must not become a write
 * elsewhere in the application), as the file's row. */
static struct sdp_stats_row *stats_row(struct ops_stats_sock *row)
{
	if (!row || !stats_rows || row < stats_rows || row >= stats_rows + SDP_STATS_CAPACITY)
		return NULL;
	return &row->shm;
}

void ops_stats_sock_free(struct ops_stats_sock *row)
{
	struct sdp_stats_row *r = stats_row(row);
	uint32_t idx;

	/* What the connection counted at its end (a cancelled offer, the
	 * cache's last invalidations) is in the file once it is closed. */
	ops_stats_engine_sync();
	if (!r)
		return;
	idx = (uint32_t)(row - stats_rows);
	uint32_t odd = stats_row_lock(r);

	/* Cleared, not just marked free: a closed connection's addresses
	 * should not linger in a world-readable file. */
	stats_row_clear(r, -1);
	STATS_PUB(r->in_use, 0);
	stats_row_unlock(r, odd);
	__atomic_fetch_and(&stats_used[idx / 64], ~(UINT64_C(1) << (idx % 64)),
			   __ATOMIC_RELEASE);
}

void ops_stats_sock_set_fd(struct ops_stats_sock *row, int fd)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	STATS_PUB(r->fd, fd);
	stats_row_unlock(r, odd);
}

void ops_stats_sock_set_stack(struct ops_stats_sock *row, enum ops_stack st,
			      enum ops_fallback why)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	STATS_PUB(r->stack, (uint8_t)st);
	STATS_PUB(r->fallback, (uint8_t)why);
	stats_row_unlock(r, odd);
}

void ops_stats_sock_set_relayed(struct ops_stats_sock *row)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	STATS_PUB(r->flags, r->flags | SDP_STATS_ROW_RELAYED);
	stats_row_unlock(r, odd);
}

void ops_stats_sock_set_state(struct ops_stats_sock *row, enum ops_sock_state st)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	STATS_PUB(r->state, (uint8_t)st);
	stats_row_unlock(r, odd);
}

void ops_stats_sock_set_transport(struct ops_stats_sock *row, const char *transport,
				  const char *mode)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	stats_pub_str(r->transport, sizeof(r->transport), transport);
	stats_pub_str(r->mode, sizeof(r->mode), mode);
	stats_row_unlock(r, odd);
}

static void stats_set_addr(struct sdp_stats_addr *a, const struct sockaddr *sa, socklen_t len)
{
	struct sdp_stats_addr v;

	memset(&v, 0, sizeof(v));
	if (len >= sizeof(sa_family_t)) {
		if (len > SDP_STATS_ADDR_LEN)
			len = SDP_STATS_ADDR_LEN;
		memcpy(v.raw, sa, len);
		v.family = sa->sa_family;
		v.len = (uint16_t)len;
	}
	stats_pub(a, &v, sizeof(v));
}

void ops_stats_sock_set_addrs(struct ops_stats_sock *row, const struct sockaddr *local,
			      socklen_t local_len, const struct sockaddr *peer,
			      socklen_t peer_len)
{
	struct sdp_stats_row *r = stats_row(row);

	if (!r)
		return;
	uint32_t odd = stats_row_lock(r);

	if (local)
		stats_set_addr(&r->local, local, local_len);
	if (peer)
		stats_set_addr(&r->peer, peer, peer_len);
	stats_row_unlock(r, odd);
}

void ops_stats_sock_bytes(struct ops_stats_sock *row, uint64_t tx, uint64_t rx)
{
	struct sdp_stats_row *r = stats_row(row);

	if (r) {
		if (tx)
			__atomic_fetch_add(&r->bytes_tx, tx, __ATOMIC_RELAXED);
		if (rx)
			__atomic_fetch_add(&r->bytes_rx, rx, __ATOMIC_RELAXED);
	}
	/* The process totals count even a socket that got no row. */
	ops_stats_count(OPS_C_SDP_BYTES_TX, tx);
	ops_stats_count(OPS_C_SDP_BYTES_RX, rx);
	ops_stats_engine_sync();
}

void ops_stats_set_program(const char *name)
{
	if (stats_busy)
		return;
	stats_busy = 1;
	pthread_mutex_lock(&stats_lock);
	if (name) {
		stats_put_str(stats_prog, sizeof(stats_prog), name);
		stats_prog_set = 1;
	} else {
		stats_prog_set = 0;
	}
	if (__atomic_load_n(&stats_state, __ATOMIC_ACQUIRE) == STATS_READY)
		stats_write_prog_locked();
	pthread_mutex_unlock(&stats_lock);
	stats_busy = 0;
}

void ops_stats_exit(void)
{
	if (stats_busy)
		return;
	int saved = errno;

	stats_busy = 1;
	pthread_mutex_lock(&stats_lock);
	if (stats_owner && stats_owner == getpid())
		unlink(stats_path);
	stats_owner = 0;
	/* The mapping stays: other threads may still be updating rows while
	 * the process exits.  Nothing is made after this. */
	if (__atomic_load_n(&stats_state, __ATOMIC_RELAXED) == STATS_NONE)
		__atomic_store_n(&stats_state, STATS_OFF, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&stats_lock);
	stats_busy = 0;
	errno = saved;
}

/*
 * The child's own file, holding the parent's header and rows as they were
 * at fork, then mapped over the inherited mapping so that the row
 * pointers the switch holds now point into it.  Counters start at zero
 * (stats_shm.h says why); a row that a parent thread was writing at fork
 * is taken as it is, its sequence made even again since that writer does
 * not exist here.
 */
static int stats_child_file(pid_t pid)
{
	uint32_t backed = stats_backed;
	uint32_t hwm = stats_hdr->row_hwm;
	struct sdp_stats_hdr *tmp;
	void *map;
	int fd, ret;

	if (hwm > backed)
		hwm = backed;
	ret = sdp_stats_path(sdp_stats_dir(), pid, stats_path, sizeof(stats_path));
	if (ret)
		return ret;
	fd = stats_file_create(stats_path, backed);
	if (fd < 0)
		return fd;
	tmp = mmap(NULL, SDP_STATS_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED) {
		ret = -errno;
		goto close_fd;
	}
	memcpy((char *)tmp + sizeof(*tmp), stats_rows, (size_t)hwm * sizeof(struct sdp_stats_row));
	struct sdp_stats_row *rows = (struct sdp_stats_row *)((char *)tmp + sizeof(*tmp));

	memset(stats_used, 0, sizeof(stats_used));
	for (uint32_t i = 0; i < hwm; i++) {
		rows[i].seq += rows[i].seq & 1;
		/* The parent's bitmap may hold rows its other threads were
		 * allocating or freeing; this thread's are the in-use ones. */
		if (rows[i].in_use)
			stats_used[i / 64] |= UINT64_C(1) << (i % 64);
	}
	tmp->row_hwm = hwm;
	memcpy(tmp->program, stats_hdr->program, sizeof(tmp->program));
	stats_fill_hdr(tmp, pid);
	__atomic_store_n(&tmp->magic, SDP_STATS_MAGIC, __ATOMIC_RELEASE);
	map = mmap(stats_hdr, SDP_STATS_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		   fd, 0);
	ret = map == MAP_FAILED ? -errno : 0;
	munmap(tmp, SDP_STATS_FILE_SIZE);
close_fd:
	sys.close(fd);
	if (ret)
		unlink(stats_path);
	return ret;
}

void ops_stats_atfork_child(void)
{
	int saved = errno;
	pid_t pid = getpid();

	/* Another parent thread may have held the lock at fork; only this
	 * thread exists here. */
	pthread_mutex_init(&stats_lock, NULL);
	stats_busy = 0;
	if (__atomic_load_n(&stats_state, __ATOMIC_RELAXED) != STATS_READY) {
		/* A creation under way in another parent thread never
		 * finishes here: start over, with a file of our own. */
		if (__atomic_load_n(&stats_state, __ATOMIC_RELAXED) == STATS_NONE)
			stats_path[0] = '\0';
		errno = saved;
		return;
	}
	if (!stats_owner || stats_child_file(pid) < 0) {
		/* Private memory at the same address: the row pointers stay
		 * valid and the parent's file is never written by us. */
		void *map = mmap(stats_hdr, SDP_STATS_FILE_SIZE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

		stats_owner = 0;
		stats_path[0] = '\0';
		if (map != MAP_FAILED)
			/* Anonymous memory needs no reserving. */
			stats_backed = SDP_STATS_CAPACITY;
		else
			/* Still the parent's file: the rows already handed
			 * out write there, but no new one will. */
			__atomic_store_n(&stats_state, STATS_OFF, __ATOMIC_RELAXED);
		errno = saved;
		return;
	}
	stats_owner = pid;
	errno = saved;
}

void ops_stats_reset_for_tests(void)
{
	if (stats_hdr)
		munmap(stats_hdr, SDP_STATS_FILE_SIZE);
	stats_hdr = NULL;
	stats_rows = NULL;
	stats_backed = 0;
	memset(stats_used, 0, sizeof(stats_used));
	stats_owner = 0;
	stats_path[0] = '\0';
	stats_prog_set = 0;
	memset(stats_prog, 0, sizeof(stats_prog));
	__atomic_store_n(&stats_state, STATS_NONE, __ATOMIC_RELEASE);
}
