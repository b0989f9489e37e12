#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Error semantics of the socket API against Linux itself: conn_storm --api
# runs the same sequence of calls on kernel TCP sockets and on SDP sockets
# and prints both results side by side; any difference fails.  Covered:
# ECONNREFUSED (blocking and non-blocking connect), EINPROGRESS then
# writable and SO_ERROR 0, ENOTCONN/EPIPE on unconnected sockets, bind
# twice (EINVAL), EADDRINUSE, listen without bind picks a port, accept on a
# non-listening socket (EINVAL), EAGAIN (MSG_DONTWAIT, non-blocking accept,
# full send side), MSG_PEEK, MSG_WAITALL, SO_RCVTIMEO, getsockname /
# getpeername, EBADF, socket options, EOF, resets (SO_LINGER 0) and sends
# after the peer closed.
. "$(dirname "$0")/lib.sh"

STORM=$(prog conn_storm)
run_with_timeout 120 "$STORM" --api
rc=$?
[ "$rc" -eq 0 ] || fail "conn_storm --api exit $(status_text "$rc"): SDP differs from Linux TCP (see DIFF above)"
log "PASS"
exit 0
