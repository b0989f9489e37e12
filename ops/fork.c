/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fork(): what a child inherits.
 *
 * Native sockets are the kernel's and simply work in both processes.  An
 * SDP connection is not: its state lives in the parent's memory and its
 * transport (a TCP connection with the transport's state, a QP) cannot
 * be driven by two processes.  An established one is relayed just before
 * the fork, so that both processes share it as they would share a TCP
 * socket (relay.c, with its own fork handlers).  One still connecting
 * stays the parent's: in the child the socket is "inherited", every data
 * call on it fails with ENOTCONN (logged once), and closing it releases
 * the child's fd without touching the parent's connection.  sdp.conf(5)
 * says so under FORK.
 *
 * A "both" listener is the exception, because it can stay correct: once
 * it is shared with a child (pre-forked workers that accept on it), an
 * SDP client could be taken in by the parent's SDP side and never
 * accepted.  So at fork it turns into a plain TCP listener: just before
 * the fork the parent closes its SDP side (so the child does not inherit
 * the transport's listening socket either, and SDP clients are refused at
 * once and fall back to TCP), and the kernel socket gets the
 * application's O_NONBLOCK back.
 * posix_spawn() and system() run no fork handlers and change nothing.
 */
#include <fcntl.h>
#include <unistd.h>

#include "sock.h"

/* A both listener becomes TCP only, a fallback like any other (reason
 * "unsupported").  The parent closes the engine side; in a child the
 * socket is inherited by then, and its engine side, the parent's, stays
 * (ops_fall_back), as do its epoll records: their engine side answers
 * nothing there, the kernel side still reports. */
static void both_to_tcp(int fd, struct ops_sock *s)
{
	if (s->stack != OPS_STACK_BOTH)
		return;
	int fl = sys.fcntl(fd, F_GETFL);

	if (fl >= 0 && !s->both_nonblock)
		sys.fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	ops_fall_back(fd, s, OPS_FB_UNSUPPORTED, 0, NULL,
		      "a listener shared with a forked child serves TCP only");
}

static void parent_before_fork(int fd, struct ops_sock *s, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&s->lock);
	both_to_tcp(fd, s);
	pthread_mutex_unlock(&s->lock);
}

static void mark_inherited(int fd, struct ops_sock *s, void *arg)
{
	(void)arg;
	/* A parent thread may have held it at fork time. */
	pthread_mutex_init(&s->lock, NULL);
	/* A relayed connection is the child's as much as the parent's. */
	if (s->sd >= 0 && !s->relayed)
		s->inherited = true;
	both_to_tcp(fd, s);
}

/* The process these tables belong to; a fork child records itself (its
 * handlers run), a vfork child does not. */
static pid_t ops_pid;

bool ops_in_vfork_child(void)
{
	return getpid() != __atomic_load_n(&ops_pid, __ATOMIC_RELAXED);
}

static void ops_atfork_prepare(void)
{
	ops_fd_for_each(parent_before_fork, NULL);
}

static void ops_atfork_child(void)
{
	/* The statistics first: the rows must be the child's own before
	 * anything is written to them. */
	ops_stats_atfork_child();
	__atomic_store_n(&ops_pid, getpid(), __ATOMIC_RELAXED);
	ops_fd_atfork_child();
	ops_epoll_atfork_child();
	ops_peercache_atfork_child();
	ops_fd_for_each(mark_inherited, NULL);
}

__attribute__((constructor)) static void ops_register_atfork(void)
{
	ops_pid = getpid();
	pthread_atfork(ops_atfork_prepare, NULL, ops_atfork_child);
}
