#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# An epoll server under the preload is woken by its own member's transport
# (doc/fastpath.md, step 4): the engine registers the member's transport
# fd in the application's epoll set, ahead of the progress thread's
# EPOLLEXCLUSIVE registration, so a request to a server asleep in
# epoll_wait wakes the server and not the progress thread.  The client
# (epoll_wake ping, preloaded too) leaves a gap between round trips so the
# server is asleep when each request comes; the check counts the times
# the server's progress thread drove a socket because a transport fd woke
# it (sdpstat's progress_fd_drives): before step 4 at least one per round
# trip, now a handful (the connection's set-up and end), whatever the
# speed of the machine.  Level-triggered and edge-triggered members.
#
# tcp-fallback only: the verbs ep's fd is an epoll instance (completion
# and event channels), which EPOLLEXCLUSIVE refuses, so there the kernel
# wakes the progress thread as well as the server (doc/fastpath.md).
. "$(dirname "$0")/lib.sh"

[ "$TEST_TRANSPORT" = tcp-fallback ] ||
	skip "$TEST_TRANSPORT: the progress thread is woken too (the verbs ep's fd takes no EPOLLEXCLUSIVE)"

EW=$(prog epoll_wake)
SDPSTAT=$(prog sdpstat)
ROUNDS=400
GAP_US=2000
export SDP_STATS_DIR=$TMP/stats
mkdir -p "$SDP_STATS_DIR"

write_conf "$TMP/sdp.conf" "log min-level 7 destination file $TMP/sdp.log" \
	"use both server * *:*" "use both client * *:*"
PRE=$(preload_env "$TMP/sdp.conf")

drives() {
	"$SDPSTAT" -p "$1" --json 2>&1 | python3 -c '
import json, sys
print(json.load(sys.stdin)["processes"][0]["counters"]["progress_fd_drives"])' 2>&1
}

one_run() {
	local mode=$1 flag=$2 server n
	rm -f "$TMP/port"
	env $PRE "$EW" serve --port-file "$TMP/port" --host "$TEST_HOST" $flag \
		>"$TMP/serve.$mode" 2>&1 &
	server=$!
	for _ in $(seq 100); do
		[ -s "$TMP/port" ] && break
		sleep 0.1
	done
	[ -s "$TMP/port" ] || fail "epoll_wake serve did not start: $(cat "$TMP/serve.$mode")"
	if ! run_with_timeout 120 env $PRE "$EW" ping "$TEST_HOST:$(cat "$TMP/port")" \
		"$ROUNDS" "$GAP_US" >"$TMP/ping.$mode" 2>&1; then
		kill "$server" 2>/dev/null
		fail "$mode: the ping-pong did not finish: $(cat "$TMP/ping.$mode")"
	fi
	n=$(drives "$server")
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	case $n in
	'' | *[!0-9]*) fail "$mode: sdpstat gave no progress_fd_drives for the server: $n" ;;
	esac
	if [ "$n" -ge $((ROUNDS / 5)) ]; then
		fail "$mode: the server's progress thread drove sockets $n times in $ROUNDS round trips with the server asleep in epoll_wait (wanted fewer than $((ROUNDS / 5)))"
	fi
	log "ok   $mode: $ROUNDS round trips, the server's progress thread woken for $n"
}

one_run lt ""
one_run et --et
sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
[ "$sdp" -eq 2 ] || fail "$sdp of 2 connections went over SDP"
log "PASS"
exit 0
