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

/* Which stack carries a socket. */
enum ops_stack {
	OPS_STACK_UNDECIDED = 0,	/* socket() done, no listen/connect yet */
	OPS_STACK_TCP,
	OPS_STACK_SDP,
	OPS_STACK_BOTH,			/* a listener on both stacks */
	OPS_STACK_MAX
};

/* What the socket is doing, as far as the switch knows. */
enum ops_sock_state {
	OPS_ST_NEW = 0,
	OPS_ST_LISTEN,
	OPS_ST_CONNECTING,
	OPS_ST_ESTABLISHED,
	OPS_ST_CLOSED,		/* reset, failed or shut down both ways */
	OPS_ST_MAX
};

/* Why a socket that policy allowed on SDP ended up on TCP. */
enum ops_fallback {
	OPS_FB_NONE = 0,
	OPS_FB_NO_TRANSPORT,	/* no transport enabled or none came up */
	OPS_FB_NO_ROUTE,	/* no RDMA device serves the address */
	OPS_FB_REFUSED,		/* the peer has no SDP listener */
	OPS_FB_TIMEOUT,		/* the SDP connect took too long */
	OPS_FB_REJECTED,	/* the peer rejected the Hello */
	OPS_FB_TRANSPORT_ERROR,	/* any other transport or engine error */
	OPS_FB_UNSUPPORTED,	/* the socket uses something SDP cannot do */
	OPS_FB_REMEMBERED,	/* the peer said no recently (refused or timed
				 * out): not tried again yet (peercache.c) */
	OPS_FB_RESOURCE,	/* no room for libsdp's descriptors (common/fdspace.h) */
	OPS_FB_MAX
};

/* Process-wide counters. */
enum ops_counter {
	OPS_C_SOCKETS = 0,	/* AF_INET/AF_INET6 stream sockets seen */
	OPS_C_SOCKETS_DIRECT,	/* AF_INET_SDP sockets */
	OPS_C_LISTEN_TCP,
	OPS_C_LISTEN_SDP,
	OPS_C_LISTEN_BOTH,
	OPS_C_CONNECT_TCP,	/* client connections on TCP (by policy or fallback) */
	OPS_C_CONNECT_SDP,
	OPS_C_ACCEPT_TCP,
	OPS_C_ACCEPT_SDP,
	OPS_C_FALLBACKS,	/* sum over the reasons */
	OPS_C_CONN_ERRORS,	/* SDP connections that failed or were reset */
	OPS_C_SDP_BYTES_TX,
	OPS_C_SDP_BYTES_RX,
	/* The engine's zero-copy and registration cache counters (struct
	 * sdp_stats in include/sdp.h says what each counts), copied into the
	 * file by ops_stats_engine_sync(). */
	OPS_C_ZCOPY_OFFERS,
	OPS_C_ZCOPY_BYTES_SENT,
	OPS_C_ZCOPY_REFUSED,
	OPS_C_ZCOPY_CANCELS,
	OPS_C_ZCOPY_READS,
	OPS_C_ZCOPY_BYTES_RECEIVED,
	OPS_C_ZCOPY_DIRECT_BYTES,
	OPS_C_REGCACHE_HITS,
	OPS_C_REGCACHE_MISSES,
	OPS_C_REGCACHE_EVICTIONS,
	OPS_C_REGCACHE_INVALIDATIONS,
	OPS_C_ZCOPY_PULLED,
	OPS_C_ZCOPY_WRITES,
	OPS_C_ZCOPY_BYTES_WRITTEN,
	OPS_C_ZCOPY_SINK_ADVERTS,
	OPS_C_ZCOPY_SINK_BYTES,
	OPS_C_ZCOPY_SINK_STALE,
	OPS_C_ZCOPY_SINK_CANCELS,
	OPS_C_MODE_CHANGES_SENT,
	OPS_C_MODE_CHANGES_RECEIVED,
	OPS_C_TRANS_PIGGYBACKS,
	OPS_C_TRANS_MISSES,
	OPS_C_ZCOPY_PEER_ADVERTS,
	OPS_C_RELAYS,		/* SDP connections relayed at a fork (ops/relay.c) */
	OPS_C_MAX
};

/* One socket's row in the table. */
struct ops_stats_sock;

/* Names for printing ("tcp", "sdp", ...; "no-route", ...).  Never NULL. */
const char *ops_stack_name(enum ops_stack s);
const char *ops_state_name(enum ops_sock_state s);
const char *ops_fallback_name(enum ops_fallback r);

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
