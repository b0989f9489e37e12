/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fork(): what a child inherits.
 *
 * Native sockets are the kernel's and simply work in both processes.  An
 * SDP connection is not: its state lives in the parent's memory and its
 * transport (a TCP connection under libfabric, a QP) cannot be driven by
 * two processes.  It stays the parent's: in the child the socket is
 * "inherited", every data call on it fails with ENOTCONN (logged once),
 * and closing it releases the child's fd without touching the parent's
 * connection.  sdp.conf(5) says so under FORK, with the advice for
 * forking servers: put them on TCP.
 */
#include "sock.h"

static void mark_inherited(int fd, struct ops_sock *s)
{
	(void)fd;
	/* A parent thread may have held it at fork time. */
	pthread_mutex_init(&s->lock, NULL);
	if (s->sd >= 0)
		s->inherited = true;
}

static void ops_atfork_child(void)
{
	ops_fd_atfork_child();
	ops_fd_for_each(mark_inherited);
	ops_epoll_atfork_child();
	ops_stats_atfork_child();
}

__attribute__((constructor)) static void ops_register_atfork(void)
{
	pthread_atfork(NULL, NULL, ops_atfork_child);
}
