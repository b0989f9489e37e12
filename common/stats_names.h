/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The vocabulary of the switch's statistics: which stack carries a
 * socket, its state, why it fell back to TCP, the process counters; and
 * their names.  The switch (ops/) sets them, the statistics file stores
 * them (common/stats_shm.h: the values are part of its format, appended
 * to, never renumbered without a new SDP_STATS_VERSION), and sdpstat(1)
 * prints them by these names.  So they live here, at the bottom, where
 * the writer, the file's layout and the reader all find them without
 * depending on the switch.
 */
#ifndef SDP_COMMON_STATS_NAMES_H
#define SDP_COMMON_STATS_NAMES_H

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
	OPS_FB_RESOURCE,	/* no memory, or no room for libsdp's descriptors
				 * (common/fdspace.h) */
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
	OPS_C_PROGRESS_FD_DRIVES,	/* the engine's progress_fd_drives */
	OPS_C_READINESS_WRITES,	/* the engine's readiness_writes */
	OPS_C_SIGIO_LOOKUPS,	/* owner lookups for a SIGIO/SIGURG (ops/sigio.c) */
	OPS_C_PROGRESS_LOCK_WAITS,	/* the engine's progress_lock_waits */
	OPS_C_PROGRESS_BUSY_SKIPS,	/* the engine's progress_busy_skips */
	OPS_C_PROGRESS_WAKEUPS,	/* the engine's progress_wakeups */
	OPS_C_EPOLL_LOOKS,	/* SDP members an epoll_wait report looked at (ops/epset.c) */
	/* Not counts but what the process holds now, as of its last data
	 * or close (ops_stats_engine_sync()). */
	OPS_C_BUF_BYTES,	/* the engine's buf_bytes */
	OPS_C_FDS,		/* descriptors libsdp holds (the engine's fds) */
	/* Counts added later, after those: the indexes are the statistics
	 * file's format (stats_shm.h), appended to, never renumbered. */
	OPS_C_SPIN_POLL_ANSWERS,	/* the engine's spin_poll_answers */
	OPS_C_PROGRESS_SET_CHANGES,	/* the engine's progress_set_changes */
	OPS_C_RING_ALLOCS,	/* the engine's ring_allocs */
	OPS_C_WATCH_WRITES,	/* the engine's watch_writes */
	OPS_C_EPOLL_RINGS,	/* doorbell writes by the epoll emulation itself (ops/epset.c) */
	OPS_C_TRANSPORT_EMPTY_READS,	/* the engine's transport_empty_reads */
	OPS_C_MOVES_OUT,	/* SDP connections handed to another process (ops/relay.c) */
	OPS_C_MOVES_IN,		/* SDP connections taken from another process */
	OPS_C_MOVES_REFUSED,	/* claims answered with a relay instead (the log says why) */
	OPS_C_BUF_GROWS,	/* the engine's buf_grows */
	OPS_C_RX_COPIED_OUT,	/* the engine's rx_copied_out */
	OPS_C_MAX
};

/*
 * Names for printing ("tcp", "sdp", ...; "no-route", ...; counter names
 * are identifiers, JSON keys).  The sdp_stats_* ones take a value read
 * from a file, which may come from a newer writer: NULL for a value this
 * build does not know.  The ops_* ones are for the writer: never NULL
 * ("unknown").
 */
const char *sdp_stats_stack_name(unsigned v);
const char *sdp_stats_state_name(unsigned v);
const char *sdp_stats_fallback_name(unsigned v);
const char *sdp_stats_counter_name(unsigned v);
const char *ops_stack_name(enum ops_stack s);
const char *ops_state_name(enum ops_sock_state s);
const char *ops_fallback_name(enum ops_fallback r);

#endif
