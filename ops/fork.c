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
 * A listener stays what it is, on both stacks or SDP alone, when its
 * transports can share it (tcp-fallback: a kernel listening socket,
 * which the child inherits as it inherits the application's): just
 * before the fork the engine marks it shared (sdp_listener_share()), and
 * parent and children accept from the one queue; from then on a process
 * takes a connection from it only while it is accepting, so that a
 * master that never accepts (nginx's) holds none.  The child's copy
 * becomes its own at its first use (sdp/conn.c, listener_adopt).
 *
 * An rdma_cm listener cannot be shared (doc/fork.md says what will be
 * done instead): a "both" listener on one turns into a plain TCP
 * listener at the fork, because an SDP client could otherwise be taken
 * in by the parent's SDP side and never accepted.  Just before the fork
 * the parent closes its SDP side (so the child does not inherit the
 * transport's listener either, and SDP clients are refused at once and
 * fall back to TCP), and the kernel socket gets the application's
 * O_NONBLOCK back.  An "sdp" listener that cannot be shared stays the
 * parent's.
 * posix_spawn() and system() run no fork handlers and change nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "ops.h"
#include "sdp.h"
#include "sock.h"

/* A both listener becomes TCP only, a fallback like any other (reason
 * "unsupported").  The parent closes the engine side; in a child the
 * socket is inherited by then, and its engine side, the parent's, stays
 * (ops_fall_back), as do its epoll records: their engine side answers
 * nothing there, the kernel side still reports. */
static void both_to_tcp(int fd, struct ops_sock *s, const char *why)
{
	if (s->stack != OPS_STACK_BOTH)
		return;
	int fl = sys.fcntl(fd, F_GETFL);

	if (fl >= 0 && !s->both_nonblock)
		sys.fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	ops_fall_back(fd, s, OPS_FB_UNSUPPORTED, 0, NULL, why);
}

#define NOT_SHARED "a listener shared with a forked child serves TCP only"

static void parent_before_fork(int fd, struct ops_sock *s, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&s->lock);
	if (!s->lsn_shared && !s->inherited && s->state == OPS_ST_LISTEN && s->sd >= 0 &&
	    (s->stack == OPS_STACK_BOTH || s->stack == OPS_STACK_SDP)) {
		int r = sdp_listener_share(s->sd);

		if (r == 0)
			s->lsn_shared = true;
		else
			both_to_tcp(fd, s, r == -EOPNOTSUPP
					   ? NOT_SHARED " (an RDMA listener cannot be shared"
					     " between processes)"
					   : NOT_SHARED);
	}
	pthread_mutex_unlock(&s->lock);
}

static void mark_inherited(int fd, struct ops_sock *s, void *arg)
{
	(void)arg;
	/* A parent thread may have held it at fork time. */
	pthread_mutex_init(&s->lock, NULL);
	/* A relayed connection is the child's as much as the parent's, and
	 * so is a shared listener.  A held one (relay.c) is its owner's
	 * until this process claims it at its first use; its row is the
	 * owner's to show. */
	if (s->hold_ino && !s->relayed) {
		atomic_store(&s->held, true);
		s->hold_b = -1;	/* the parent's (relay.c closes this copy) */
		ops_stats_sock_free(s->row);
		s->row = NULL;
	} else if (s->sd >= 0 && !s->relayed && !s->lsn_shared) {
		s->inherited = true;
	}
	if (!s->lsn_shared)
		both_to_tcp(fd, s, NOT_SHARED);
}

/* The process these tables belong to; a fork child records itself (its
 * handlers run), a vfork child does not. */
static pid_t ops_pid;

bool ops_in_vfork_child(void)
{
	return getpid() != __atomic_load_n(&ops_pid, __ATOMIC_RELAXED);
}

void ops_exec_prepare(bool spawn)
{
	/* A vfork child's exec: its parent lives on, as after a spawn. */
	ops_hold_exec(spawn || ops_in_vfork_child());
}

void ops_exit_quick(void)
{
	if (!ops_in_vfork_child())
		sdp_exit_quick();
}

static void ops_atfork_prepare(void)
{
	ops_fd_for_each(parent_before_fork, NULL);
	ops_epoll_atfork_prepare();
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
