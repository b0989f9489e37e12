#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Converting a connected TCP socket to SDP (sdp_convert_connect and
# sdp_convert_accept, doc/conversion.md), through convert_check: a
# conversion after streaming both ways and a final streaming-mode message
# (small, and 2 MiB: wholly read before the handshake), with 4 MiB
# checksummed each way over the new connection on the transport under
# test, TCP_NODELAY and SO_KEEPALIVE kept and the TCP socket closed; and
# every way it can fail, each leaving the TCP stream usable both ways and
# unread: a peer that streams instead (EPROTO), a refusal by version
# (both directions), a client that gives up before a late answer and a
# server that waits in vain (ETIMEDOUT), wrong calls, a connection to the
# one-shot listener without the nonce (dropped), an oversized frame, a frame
# of an unknown type (both left unread), and a peer whose stream ends in
# the middle of a frame header (ECONNRESET at once, even with no time
# limit, the partial header left unread).
. "$(dirname "$0")/lib.sh"

CC=$(prog convert_check)
run_with_timeout 600 "$CC"
rc=$?
[ "$rc" -eq 0 ] || fail "convert_check exit $(status_text "$rc")"
log "PASS"
exit 0
