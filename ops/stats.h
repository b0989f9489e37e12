/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Live per-process statistics of the Offload Protocol Switch, published in
 * a shared-memory file that sdpstat(1) reads.  The file's layout is in
 * common/stats_shm.h (shared with tools/sdpstat.c).
 *
 * The file is created lazily, by the first ops_stats_sock_alloc() or
 * ops_stats_count() of a process (a preloaded program that never makes a
 * stream socket leaves no trace), and removed at exit.  Every function is
 * thread-safe and async-signal-safe where noted, never blocks on I/O
 * after the file exists, never logs to stdout, and degrades to doing
 * nothing if the file cannot be made (read-only /dev/shm, table full):
 * statistics must never break the application.
 */
#ifndef SDP_OPS_STATS_H
#define SDP_OPS_STATS_H

#include <stdint.h>
#include <sys/socket.h>

#include "stats_names.h"

/* One socket's row in the table. */
struct ops_stats_sock;

/* Add n to a counter. */
void ops_stats_count(enum ops_counter c, uint64_t n);
/* Count one fallback: OPS_C_FALLBACKS and the reason's own counter. */
void ops_stats_fallback(enum ops_fallback r);

/* A row for the socket the application knows as fd; NULL when there is
 * no room or no file (the caller then simply has no row). */
struct ops_stats_sock *ops_stats_sock_alloc(int fd);
/* Free the row (close).  NULL is accepted. */
void ops_stats_sock_free(struct ops_stats_sock *row);

/* Update parts of a row; NULL row is accepted and ignored. */
void ops_stats_sock_set_fd(struct ops_stats_sock *row, int fd);
void ops_stats_sock_set_stack(struct ops_stats_sock *row, enum ops_stack st,
			      enum ops_fallback why);
void ops_stats_sock_set_state(struct ops_stats_sock *row, enum ops_sock_state st);
/* transport: "tcp-fallback", "ib", ... or NULL; mode: "bcopy", "zcopy", ... or NULL. */
void ops_stats_sock_set_transport(struct ops_stats_sock *row, const char *transport,
				  const char *mode);
void ops_stats_sock_set_addrs(struct ops_stats_sock *row, const struct sockaddr *local,
			      socklen_t local_len, const struct sockaddr *peer,
			      socklen_t peer_len);
/* (In ops_stats_sock_set_addrs, a NULL address leaves that side as it
 * was; an address longer than a sockaddr_in6 is cut to that size.) */
/* The socket's SDP connection is relayed for forked children
 * (SDP_STATS_ROW_RELAYED). */
void ops_stats_sock_set_relayed(struct ops_stats_sock *row);
/* Bytes moved by the application on an SDP socket (also added to the
 * process counters, and the engine's counters brought up to date with
 * ops_stats_engine_sync()). Lock-free. */
void ops_stats_sock_bytes(struct ops_stats_sock *row, uint64_t tx, uint64_t rx);
/* Add to the file's OPS_C_ZCOPY_* and OPS_C_REGCACHE_* what the engine
 * counted since the last call (sdp_get_stats()).  The engine counts them
 * deep inside a transfer, or in the progress thread, or in free(); the
 * switch brings them over after every SDP transfer and at every close.
 * Lock-free; does nothing (and makes no file) when nothing changed. */
void ops_stats_engine_sync(void);

/* Program name recorded in the file (default: program_invocation_short_name). */
void ops_stats_set_program(const char *name);
/* Remove the file now (process exit; also registered with atexit by the
 * first allocation).  Idempotent. */
void ops_stats_exit(void);
/* In a fork child (called from the atfork child handler, single thread):
 * the child gets its own file holding a copy of the parent's rows (its
 * inherited sockets), mapped at the same address so that row pointers
 * stay valid; the parent's file is untouched.  If that fails, the same
 * address is backed by private anonymous memory: the child's updates
 * then go nowhere, and never into the parent's file. */
void ops_stats_atfork_child(void);
/* Unit tests only: unmap the file (without removing it) and forget every
 * row, so that the next call makes a new file.  Not thread-safe. */
void ops_stats_reset_for_tests(void);

#endif
