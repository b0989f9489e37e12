/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fd -> socket, read on every wrapped call without a lock.
 *
 * The table is dense, two levels (chunks are allocated once and never
 * freed), and holds atomic pointers.  A reader loads the pointer, takes a
 * reference only if the count is not zero, then checks that the slot
 * still holds the same socket.  That is safe because socket memory is
 * type-stable: a socket whose count reached zero goes to a free list and
 * is only ever reused as a socket, never returned to malloc, so a reader
 * that lost a race touches a valid count and retries.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdp.h"
#include "fdmap.h"
#include "ops.h"
#include "sock.h"

static struct fdmap fds;
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;	/* writers, free list */
static struct ops_sock *free_socks;

static fdmap_slot_t *slot_of(int fd, bool create)
{
	return fdmap_slot(&fds, fd, create);
}

struct ops_sock *ops_fd_get(int fd)
{
	fdmap_slot_t *slot = slot_of(fd, false);

	if (!slot)
		return NULL;
	for (;;) {
		struct ops_sock *s = atomic_load(slot);

		if (!s)
			return NULL;
		int r = atomic_load(&s->ref);

		do {
			if (r == 0)
				break;
		} while (!atomic_compare_exchange_weak(&s->ref, &r, r + 1));
		if (r == 0)
			continue;	/* being freed: the slot changes soon */
		if (atomic_load(slot) == s)
			return s;
		ops_sock_put(s);
	}
}

bool ops_fd_is_ours(int fd)
{
	return fdmap_peek(&fds, fd) != NULL;
}

int ops_fd_install(int fd, struct ops_sock *s)
{
	struct ops_sock *stale = NULL;
	int ret = 0;

	pthread_mutex_lock(&fd_lock);
	fdmap_slot_t *slot = slot_of(fd, true);

	if (!slot) {
		ret = fd < 0 ? -EBADF : -EMFILE;
	} else {
		ops_sock_get(s);
		stale = atomic_exchange(slot, s);
	}
	pthread_mutex_unlock(&fd_lock);
	/* The kernel gave us fd, so whatever the slot held was closed
	 * behind our back (a raw close system call, close_range). */
	if (stale)
		ops_sock_put(stale);
	return ret;
}

struct ops_sock *ops_fd_remove(int fd)
{
	fdmap_slot_t *slot = slot_of(fd, false);

	if (!slot)
		return NULL;
	return atomic_exchange(slot, NULL);
}

struct ops_sock *ops_sock_new(int domain)
{
	struct ops_sock *s;

	pthread_mutex_lock(&fd_lock);
	s = free_socks;
	if (s)
		free_socks = s->next_free;
	pthread_mutex_unlock(&fd_lock);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		atomic_init(&s->ref, 0);
	} else {
		/* Everything but the count (still 0): a late reader may be
		 * looking at it. */
		_Static_assert(offsetof(struct ops_sock, ref) == 0, "ref first");
		memset((char *)s + sizeof(s->ref), 0, sizeof(*s) - sizeof(s->ref));
	}
	pthread_mutex_init(&s->lock, NULL);
	s->domain = domain;
	s->sd = -1;
	atomic_store(&s->ref, 1);
	return s;
}

void ops_sock_put(struct ops_sock *s)
{
	if (atomic_fetch_sub(&s->ref, 1) != 1)
		return;
	/* No fd names it and no call is in flight. */
	ops_epoll_forget(s);
	if (s->sd >= 0) {
		int sd = s->sd;

		s->sd = -1;
		(void)sdp_close(sd);
	}
	ops_stats_sock_free(s->row);
	s->row = NULL;
	free(s->rinfo);
	s->rinfo = NULL;
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_lock(&fd_lock);
	s->next_free = free_socks;
	free_socks = s;
	pthread_mutex_unlock(&fd_lock);
}

bool ops_fd_names(int fd, const struct ops_sock *s)
{
	fdmap_slot_t *slot = slot_of(fd, false);

	return slot && atomic_load(slot) == s;
}

struct for_each {
	void (*fn)(int fd, struct ops_sock *s, void *arg);
	void *arg;
};

static void for_each_one(int fd, void *s, void *arg)
{
	struct for_each *f = arg;

	f->fn(fd, s, f->arg);
}

void ops_fd_for_each(void (*fn)(int fd, struct ops_sock *s, void *arg), void *arg)
{
	struct for_each f = { fn, arg };

	fdmap_for_each(&fds, for_each_one, &f);
}

int ops_fd_end(void)
{
	return fdmap_end(&fds);
}

void ops_fd_atfork_child(void)
{
	pthread_mutex_init(&fd_lock, NULL);
}
