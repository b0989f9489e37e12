#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A peer dies (kill -9) in the middle of a transfer; the survivor must
# notice -- ECONNRESET, EPIPE or EOF -- report it and exit 1, within a
# time limit: never hang, never claim success.
#
# For SDP and, as a reference for the test itself, the kernel's TCP:
#   - the server is killed while the client streams into it (client in send);
#   - the server is first stopped (SIGSTOP) so the client's send blocks on a
#     full window, then killed;
#   - the client is killed while the server reads (server in recv);
#   - the client is stopped, so the server blocks in recv with no data in
#     flight, then killed;
#   - the server is killed during a bidirectional transfer (client in poll
#     with both directions busy).
. "$(dirname "$0")/lib.sh"

SDPCAT=$(prog sdpcat)
failures=0
# What a survivor may say; anything else (a timeout, "checksum ok") fails.
dead_peer_msg='reset by peer|Broken pipe|EOF|short transfer'

# one_case API VICTIM HOW [bidir]
one_case() {
	local api=$1 victim=$2 how=$3 mode=${4:-} flag=() cflags=() rc desc
	[ "$api" = tcp ] && flag=(--tcp)
	[ "$mode" = bidir ] && cflags=(--bidir)
	desc="$api: kill -9 $victim ($how${mode:+, $mode})"
	local sout="$TMP/server.out" cout="$TMP/client.out"
	if ! start_server "$sout" "${flag[@]}" --count 1 -v; then
		log "FAIL $desc: server did not start"
		failures=$((failures + 1))
		return
	fi
	local spid=$SERVER_PID
	start_bg "$cout" "$SDPCAT" "${flag[@]}" -c "$TEST_HOST:$PORT" --bytes 1T \
		--wsize 1-256K "${cflags[@]}"
	local cpid=$BG_PID
	if ! wait_for_text "$sout" 'accepted' 30; then
		log "FAIL $desc: no connection within $(slow 30) s"
		sed 's/^/  server: /' "$sout"
		sed 's/^/  client: /' "$cout"
		failures=$((failures + 1))
		kill -9 "$spid" "$cpid" 2>/dev/null
		return
	fi
	local over="kernel"
	[ "$api" = sdp ] && over=$TEST_TRANSPORT
	if ! grep -q "accepted $api connection from .* over $over\$" "$sout"; then
		log "FAIL $desc: the connection is not over $over"
		sed 's/^/  server: /' "$sout"
		failures=$((failures + 1))
		kill -9 "$spid" "$cpid" 2>/dev/null
		return
	fi
	# Let data flow (or the window fill, for a stopped process).
	local vpid=$spid spid_surv=$cpid
	if [ "$victim" = client ]; then
		vpid=$cpid
		spid_surv=$spid
	fi
	sleep 0.5
	if [ "$how" = stopped ]; then
		kill -STOP "$vpid"
		sleep 0.5
	fi
	kill -9 "$vpid"
	wait "$vpid" 2>/dev/null
	wait_pid "$spid_surv" 30
	rc=$?
	local out=$cout
	[ "$victim" = client ] && out=$sout
	if [ "$rc" -eq 1 ] && grep -Eq "$dead_peer_msg" "$out"; then
		log "ok   $desc: survivor exit 1: $(grep -E "$dead_peer_msg" "$out" | head -n 1)"
	else
		log "FAIL $desc: survivor ($([ "$victim" = client ] && echo server || echo client)) exit $(status_text "$rc"), expected 1 with one of: $dead_peer_msg"
		sed 's/^/  server: /' "$sout"
		sed 's/^/  client: /' "$cout"
		failures=$((failures + 1))
	fi
}

for api in tcp sdp; do
	one_case "$api" server running
	one_case "$api" server stopped
	one_case "$api" client running
	one_case "$api" client stopped
	one_case "$api" server running bidir
done

if [ "$failures" -ne 0 ]; then
	fail "$failures case(s) failed"
fi
log "PASS"
exit 0
