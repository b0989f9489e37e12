/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The engine's floor (doc/layers.md): socket objects and the sd table,
 * their references, the statistics, the clock, and the upcalls the layers
 * above install.  Everything else in sdp/ may call this; it calls nothing
 * above it but through struct sdp_upcalls.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "fdmap.h"
#include "fdspace.h"
#include "sys.h"
#include "tunables.h"

struct sdp_upcalls sdp_upcalls;

struct sdp_stats sdp_global_stats;

/* --- the sd table ----------------------------------------------------------
 * Indexed by sd - sd_base (common/fdmap.h).  table_lock serializes
 * lookups with removal, so that a reference is taken only on a socket
 * still in the table; taken before any socket lock.  It also protects
 * the free numbers below.
 */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fdmap table;

/*
 * What an sd is.  By default the socket's readiness eventfd, which the
 * kernel can poll (include/sdp.h); sd_base is 0.  After sdp_virtual_sds()
 * (the preload, which never polls an sd: issue 16, a descriptor per
 * connection end is the application's fd and the transport's socket),
 * a number from sd_base up that no descriptor of the process can have,
 * and no eventfd: the numbers freed by sdp_close() are reused, as the
 * kernel reuses descriptors.  Fixed before the first socket is made
 * (sd_made), so the table never holds both kinds.
 */
static int sd_base;
static bool sd_virtual;
static atomic_bool sd_made;
static uint32_t sd_next;	/* numbers below it have been given out */
static uint32_t *sd_free;	/* given back and not reused yet */
static size_t sd_nfree, sd_free_cap;

static int sd_index(int sd)
{
	return sd < sd_base ? -1 : sd - sd_base;
}

bool sock_sd_is_fd(void)
{
	return !sd_virtual;
}

/* The lowest number no descriptor can have: fs.nr_open bounds every
 * RLIMIT_NOFILE (setrlimit(2) fails above it), the hard limit is what
 * this process may still raise its soft one to. */
static long fd_ceiling(void)
{
	char buf[24] = "";
	long ceil = 1048576;	/* the kernel's default nr_open */
	int fd = sys.open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = sys.read(fd, buf, sizeof(buf) - 1);

		if (n > 0)
			ceil = strtol(buf, NULL, 10);
		sys.close(fd);
	}
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    (rlim_t)ceil < rl.rlim_max)
		ceil = rl.rlim_max > (rlim_t)LONG_MAX ? LONG_MAX : (long)rl.rlim_max;
	return ceil;
}

int sdp_virtual_sds(void)
{
	pthread_mutex_lock(&table_lock);
	int ret = 0;

	if (!sd_virtual) {
		long base = fd_ceiling();

		if (atomic_load(&sd_made))
			ret = -EBUSY;
		else if (base <= 0 || base > (long)INT_MAX - FDMAP_CHUNK * FDMAP_CHUNKS)
			ret = -ERANGE;
		else {
			sd_base = (int)base;
			sd_virtual = true;
		}
	}
	pthread_mutex_unlock(&table_lock);
	return ret;
}

/* A new sd: an eventfd or a free number.  Negative errno on failure. */
static int sd_take(void)
{
	int sd;

	atomic_store(&sd_made, true);
	pthread_mutex_lock(&table_lock);
	if (!sd_virtual) {
		pthread_mutex_unlock(&table_lock);
		/* EFD_NONBLOCK: the engine drains it; the application only polls. */
		return FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	}
	if (sd_nfree)
		sd = sd_base + (int)sd_free[--sd_nfree];
	else if (sd_next < (uint32_t)(FDMAP_CHUNK * FDMAP_CHUNKS))
		sd = sd_base + (int)sd_next++;
	else
		sd = -EMFILE;
	pthread_mutex_unlock(&table_lock);
	return sd;
}

void sock_sd_release(int sd)
{
	if (!sd_virtual) {
		fdspace_close(sd);
		return;
	}
	pthread_mutex_lock(&table_lock);
	if (sd_nfree == sd_free_cap) {
		size_t cap = sd_free_cap ? sd_free_cap * 2 : 64;
		uint32_t *n = realloc(sd_free, cap * sizeof(*n));

		if (n) {
			sd_free = n;
			sd_free_cap = cap;
		}
	}
	/* Out of memory: the number is not reused, which costs nothing
	 * but the number. */
	if (sd_nfree < sd_free_cap)
		sd_free[sd_nfree++] = (uint32_t)(sd - sd_base);
	pthread_mutex_unlock(&table_lock);
}

/* Bumped in every fork child.  A socket made in an earlier generation is
 * a copy of the parent's: its transport objects share kernel state (TCP
 * sockets, QPs) with the parent's, so the child must never drive, send
 * on or tear down the connection.  Such a socket is invisible to
 * sock_get(); sdp_close() merely forgets it. */
static unsigned sock_fork_gen;

static void sock_atfork_child(void)
{
	pthread_mutex_init(&table_lock, NULL);
	sock_fork_gen++;
}

__attribute__((constructor)) static void sock_register_atfork(void)
{
	pthread_atfork(NULL, NULL, sock_atfork_child);
}

unsigned sock_generation(void)
{
	return __atomic_load_n(&sock_fork_gen, __ATOMIC_RELAXED);
}

bool sock_inherited(const struct sdp_sock *s)
{
	return __atomic_load_n(&s->fork_gen, __ATOMIC_RELAXED) != sock_generation();
}

/* Written under s's lock, read by sock_get() under the table's only. */
void sock_own(struct sdp_sock *s)
{
	__atomic_store_n(&s->fork_gen, sock_generation(), __ATOMIC_RELAXED);
}

static int table_set(int sd, struct sdp_sock *s)
{
	int i = sd_index(sd);
	fdmap_slot_t *slot = fdmap_slot(&table, i, s != NULL);

	if (!slot)
		return s ? (i < 0 || i >= FDMAP_CHUNK * FDMAP_CHUNKS ? -EMFILE : -ENOMEM) : 0;
	atomic_store(slot, s);
	return 0;
}

static struct sdp_sock *table_get_locked(int sd)
{
	return fdmap_peek(&table, sd_index(sd));
}

/*
 * A shared listener inherited from the parent is about to be adopted
 * (conn.c): a parent thread may have held its lock at the fork, so the
 * first thread of this process to reach it, under table_lock, makes the
 * lock new.  Caller holds table_lock.
 */
static void relock_inherited(struct sdp_sock *s)
{
	unsigned gen = sock_generation();

	if (s->lock_gen != gen) {
		pthread_mutex_init(&s->lock, NULL);
		s->lock_gen = gen;
	}
}

struct sdp_sock *sock_get(int sd)
{
	struct sdp_sock *s;
	bool adopt = false;

	pthread_mutex_lock(&table_lock);
	s = table_get_locked(sd);
	/* A listener shared with this fork child becomes the child's at
	 * its first use; any other socket from before the fork stays the
	 * parent's. */
	if (s && sock_inherited(s)) {
		adopt = __atomic_load_n(&s->lsn_shared, __ATOMIC_RELAXED);
		if (adopt)
			relock_inherited(s);
		else
			s = NULL;
	}
	if (s)
		atomic_fetch_add(&s->ref, 1);
	pthread_mutex_unlock(&table_lock);
	if (adopt && sdp_upcalls.adopt(s) < 0) {
		/* The table's reference remains: this cannot free s. */
		atomic_fetch_sub(&s->ref, 1);
		s = NULL;
	}
	return s;
}

void sock_put(struct sdp_sock *s)
{
	if (atomic_fetch_sub(&s->ref, 1) != 1)
		return;
	/* Last reference: nobody can reach the socket any more. */
	if (s->conn)
		sdp_upcalls.conn_free(s);
	if (s->sd >= 0)
		sock_sd_release(s->sd);
	pthread_mutex_destroy(&s->lock);
	free(s->acceptq);
	free(s);
	SDP_STAT_INC(sockets_open, (uint64_t)-1);
}

/*
 * Process exit: what the kernel does for TCP, close every socket the
 * application left open, gracefully.  Only in the process that made them:
 * a forked child's copies belong to its parent.
 */
struct sdp_sock *sock_lock_sd(int sd)
{
	struct sdp_sock *s = sock_get(sd);

	if (s)
		pthread_mutex_lock(&s->lock);
	return s;
}

void sock_unlock_put(struct sdp_sock *s)
{
	pthread_mutex_unlock(&s->lock);
	sock_put(s);
}

uint64_t sdp_now_ns(void)
{
	return mono_ns();
}

/* SDP_ZCOPY_THRESH: 0 is off, anything smaller than a page is a page. */
int zcopy_thresh_clamp(long v)
{
	if (v <= 0)
		return 0;
	return v < 4096 ? 4096 : v > INT_MAX ? INT_MAX : (int)v;
}

/* net.ipv6.bindv6only: what IPV6_V6ONLY is on a new IPv6 socket. */
static bool default_v6only(void)
{
	static int cached = -1;
	int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);

	if (v < 0) {
		char c = '0';
		int fd = sys.open("/proc/sys/net/ipv6/bindv6only", O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			if (sys.read(fd, &c, 1) != 1)
				c = '0';
			sys.close(fd);
		}
		v = c == '1';
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}

struct sdp_sock *sock_alloc(int domain, bool nonblock, bool cloexec, bool in_table)
{
	struct sdp_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->sd = sd_take();
	if (s->sd < 0) {
		errno = -s->sd;
		free(s);
		return NULL;
	}
	if (!cloexec)
		sock_sd_inherit(s->sd);
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->ref, 1);
	s->fork_gen = __atomic_load_n(&sock_fork_gen, __ATOMIC_RELAXED);
	s->lock_gen = s->fork_gen;
	s->domain = domain;
	s->nonblock = nonblock;
	s->state = SDP_S_NEW;
	s->local.ss_family = (sa_family_t)domain;
	s->interest = POLLIN | POLLRDHUP;
	long bufs = tun_int(TUN_buf_size) * tun_int(TUN_recv_bufs);
	s->rcvbuf = bufs > INT_MAX ? INT_MAX : (int)bufs;
	bufs = tun_int(TUN_buf_size) * tun_int(TUN_send_bufs);
	s->sndbuf = bufs > INT_MAX ? INT_MAX : (int)bufs;
	s->keepidle = 7200;
	s->keepintvl = 75;
	s->keepcnt = 9;
	s->rcvlowat = 1;
	s->v6only = domain == AF_INET6 && default_v6only();
	s->zcopy_thresh = zcopy_thresh_clamp(tun_int(TUN_zcopy_thresh));
	SDP_STAT_INC(sockets_open, 1);
	if (in_table && sock_publish(s)) {
		sock_put(s);
		return NULL;
	}
	return s;
}

int sock_publish(struct sdp_sock *s)
{
	pthread_mutex_lock(&table_lock);
	int ret = table_set(s->sd, s);
	pthread_mutex_unlock(&table_lock);
	return ret;
}

struct sdp_sock *sock_unpublish(int sd)
{
	struct sdp_sock *s;

	pthread_mutex_lock(&table_lock);
	s = table_get_locked(sd);
	if (s)
		table_set(sd, NULL);
	if (s && sock_inherited(s) && __atomic_load_n(&s->lsn_shared, __ATOMIC_RELAXED))
		relock_inherited(s);
	pthread_mutex_unlock(&table_lock);
	return s;
}

/* The sd is kept over exec(2) (no SOCK_CLOEXEC); a number has nothing
 * to keep. */
void sock_sd_inherit(int sd)
{
	if (!sd_virtual)
		(void)sys.fcntl(sd, F_SETFD, 0);
}

struct for_each_arg {
	void (*fn)(int sd, void *s, void *arg);
	void *arg;
};

static void for_each_one(int i, void *s, void *arg)
{
	struct for_each_arg *a = arg;

	a->fn(sd_base + i, s, a->arg);
}

void sock_for_each(void (*fn)(int sd, void *s, void *arg), void *arg)
{
	struct for_each_arg a = { fn, arg };

	fdmap_for_each(&table, for_each_one, &a);
}
