/* SPDX-License-Identifier: BSD-2-Clause */
/* The statistics' names: see stats_names.h.  The switches have no default,
 * so that -Wswitch flags an enum value added without a name. */
#include <stddef.h>

#include "stats_names.h"

const char *sdp_stats_stack_name(unsigned v)
{
	switch ((enum ops_stack)v) {
	case OPS_STACK_UNDECIDED: return "undecided";
	case OPS_STACK_TCP: return "tcp";
	case OPS_STACK_SDP: return "sdp";
	case OPS_STACK_BOTH: return "both";
	case OPS_STACK_MAX: break;
	}
	return NULL;
}

const char *sdp_stats_state_name(unsigned v)
{
	switch ((enum ops_sock_state)v) {
	case OPS_ST_NEW: return "new";
	case OPS_ST_LISTEN: return "listen";
	case OPS_ST_CONNECTING: return "connecting";
	case OPS_ST_ESTABLISHED: return "established";
	case OPS_ST_CLOSED: return "closed";
	case OPS_ST_MAX: break;
	}
	return NULL;
}

const char *sdp_stats_fallback_name(unsigned v)
{
	switch ((enum ops_fallback)v) {
	case OPS_FB_NONE: return "none";
	case OPS_FB_NO_TRANSPORT: return "no-transport";
	case OPS_FB_NO_ROUTE: return "no-route";
	case OPS_FB_REFUSED: return "refused";
	case OPS_FB_TIMEOUT: return "timeout";
	case OPS_FB_REJECTED: return "rejected";
	case OPS_FB_TRANSPORT_ERROR: return "transport-error";
	case OPS_FB_UNSUPPORTED: return "unsupported";
	case OPS_FB_REMEMBERED: return "remembered";
	case OPS_FB_RESOURCE: return "resource";
	case OPS_FB_MAX: break;
	}
	return NULL;
}

const char *sdp_stats_counter_name(unsigned v)
{
	switch ((enum ops_counter)v) {
	case OPS_C_SOCKETS: return "sockets";
	case OPS_C_SOCKETS_DIRECT: return "sockets_direct";
	case OPS_C_LISTEN_TCP: return "listen_tcp";
	case OPS_C_LISTEN_SDP: return "listen_sdp";
	case OPS_C_LISTEN_BOTH: return "listen_both";
	case OPS_C_CONNECT_TCP: return "connect_tcp";
	case OPS_C_CONNECT_SDP: return "connect_sdp";
	case OPS_C_ACCEPT_TCP: return "accept_tcp";
	case OPS_C_ACCEPT_SDP: return "accept_sdp";
	case OPS_C_FALLBACKS: return "fallbacks";
	case OPS_C_CONN_ERRORS: return "conn_errors";
	case OPS_C_SDP_BYTES_TX: return "sdp_bytes_tx";
	case OPS_C_SDP_BYTES_RX: return "sdp_bytes_rx";
	case OPS_C_ZCOPY_OFFERS: return "zcopy_offers";
	case OPS_C_ZCOPY_BYTES_SENT: return "zcopy_bytes_sent";
	case OPS_C_ZCOPY_REFUSED: return "zcopy_refused";
	case OPS_C_ZCOPY_CANCELS: return "zcopy_cancels";
	case OPS_C_ZCOPY_READS: return "zcopy_reads";
	case OPS_C_ZCOPY_BYTES_RECEIVED: return "zcopy_bytes_received";
	case OPS_C_ZCOPY_DIRECT_BYTES: return "zcopy_direct_bytes";
	case OPS_C_REGCACHE_HITS: return "regcache_hits";
	case OPS_C_REGCACHE_MISSES: return "regcache_misses";
	case OPS_C_REGCACHE_EVICTIONS: return "regcache_evictions";
	case OPS_C_REGCACHE_INVALIDATIONS: return "regcache_invalidations";
	case OPS_C_ZCOPY_PULLED: return "zcopy_pulled";
	case OPS_C_ZCOPY_WRITES: return "zcopy_writes";
	case OPS_C_ZCOPY_BYTES_WRITTEN: return "zcopy_bytes_written";
	case OPS_C_ZCOPY_SINK_ADVERTS: return "zcopy_sink_adverts";
	case OPS_C_ZCOPY_SINK_BYTES: return "zcopy_sink_bytes";
	case OPS_C_ZCOPY_SINK_STALE: return "zcopy_sink_stale";
	case OPS_C_ZCOPY_SINK_CANCELS: return "zcopy_sink_cancels";
	case OPS_C_MODE_CHANGES_SENT: return "mode_changes_sent";
	case OPS_C_MODE_CHANGES_RECEIVED: return "mode_changes_received";
	case OPS_C_TRANS_PIGGYBACKS: return "trans_piggybacks";
	case OPS_C_TRANS_MISSES: return "trans_misses";
	case OPS_C_ZCOPY_PEER_ADVERTS: return "zcopy_peer_adverts";
	case OPS_C_RELAYS: return "relays";
	case OPS_C_PROGRESS_FD_DRIVES: return "progress_fd_drives";
	case OPS_C_READINESS_WRITES: return "readiness_writes";
	case OPS_C_SIGIO_LOOKUPS: return "sigio_lookups";
	case OPS_C_PROGRESS_LOCK_WAITS: return "progress_lock_waits";
	case OPS_C_PROGRESS_BUSY_SKIPS: return "progress_busy_skips";
	case OPS_C_PROGRESS_WAKEUPS: return "progress_wakeups";
	case OPS_C_PROGRESS_SET_CHANGES: return "progress_set_changes";
	case OPS_C_RING_ALLOCS: return "ring_allocs";
	case OPS_C_BUF_GROWS: return "buf_grows";
	case OPS_C_RX_COPIED_OUT: return "rx_copied_out";
	case OPS_C_EPOLL_LOOKS: return "epoll_looks";
	case OPS_C_WATCH_WRITES: return "watch_writes";
	case OPS_C_EPOLL_RINGS: return "epoll_rings";
	case OPS_C_TRANSPORT_EMPTY_READS: return "transport_empty_reads";
	case OPS_C_MOVES_OUT: return "moves_out";
	case OPS_C_MOVES_IN: return "moves_in";
	case OPS_C_MOVES_REFUSED: return "moves_refused";
	case OPS_C_BUF_BYTES: return "buf_bytes";
	case OPS_C_FDS: return "fds";
	case OPS_C_SPIN_POLL_ANSWERS: return "spin_poll_answers";
	case OPS_C_MAX: break;
	}
	return NULL;
}

const char *ops_stack_name(enum ops_stack s)
{
	const char *n = sdp_stats_stack_name((unsigned)s);

	return n ? n : "unknown";
}

const char *ops_state_name(enum ops_sock_state s)
{
	const char *n = sdp_stats_state_name((unsigned)s);

	return n ? n : "unknown";
}

const char *ops_fallback_name(enum ops_fallback r)
{
	const char *n = sdp_stats_fallback_name((unsigned)r);

	return n ? n : "unknown";
}
