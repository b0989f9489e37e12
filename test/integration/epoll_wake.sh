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
# speed of the machine.  Level-triggered and edge-triggered members, and
# servers that wait in poll() or a blocking recv() instead (step 2).
# Step 5: the server's signals of its sockets' readiness fds
# (readiness_writes) and its SIGIO owner lookups (sigio_lookups) stay
# below one per round trip (before: one of each per message received):
# nothing under the preload sleeps on the readiness fd, and the program
# never turned O_ASYNC on.
#
# tcp-fallback and shm only (epoll_wake_shm.sh runs it on shm): the verbs
# ep's fd is an epoll instance (completion and event channels), which
# EPOLLEXCLUSIVE refuses, so there the kernel wakes the progress thread as
# well as the server (doc/fastpath.md).
. "$(dirname "$0")/lib.sh"

case $TEST_TRANSPORT in
tcp-fallback | shm) ;;
*) skip "$TEST_TRANSPORT: the progress thread is woken too (the verbs ep's fd takes no EPOLLEXCLUSIVE)" ;;
esac

EW=$(prog epoll_wake)
ROUNDS=400
GAP_US=2000
export SDP_STATS_DIR=$TMP/stats
mkdir -p "$SDP_STATS_DIR"

write_conf "$TMP/sdp.conf" "log min-level 7 destination file $TMP/sdp.log" \
	"use both server * *:*" "use both client * *:*"
PRE=$(preload_env "$TMP/sdp.conf")

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
	read -r n wakes sigio pw <<<"$(sdpstat_counters "$server" progress_fd_drives readiness_writes sigio_lookups progress_wakeups)"
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	case $n$wakes$sigio$pw in
	'' | *[!0-9]*) fail "$mode: sdpstat gave no counters for the server: $n $wakes $sigio $pw" ;;
	esac
	# Step 5: nothing sleeps on the readiness fd under the preload, and
	# nobody asked for SIGIO: neither costs a system call per message.
	if [ "$wakes" -ge $((ROUNDS / 5)) ]; then
		fail "$mode: the server signalled readiness fds $wakes times in $ROUNDS round trips (wanted fewer than $((ROUNDS / 5)))"
	fi
	if [ "$sigio" -ge $((ROUNDS / 5)) ]; then
		fail "$mode: the server looked up a SIGIO owner $sigio times in $ROUNDS round trips without O_ASYNC (wanted fewer than $((ROUNDS / 5)))"
	fi
	if [ "$n" -ge $((ROUNDS / 5)) ]; then
		fail "$mode: the server's progress thread drove sockets $n times in $ROUNDS round trips with the server asleep in epoll_wait, poll or recv (wanted fewer than $((ROUNDS / 5)))"
	fi
	# Woken at all, whether it then drove or left the socket to the
	# thread holding it (progress_busy_skips).
	if [ "$pw" -ge $((ROUNDS / 5)) ]; then
		fail "$mode: the server's progress thread woke $pw times in $ROUNDS round trips with the server asleep in epoll_wait, poll or recv (wanted fewer than $((ROUNDS / 5)))"
	fi
	log "ok   $mode: $ROUNDS round trips, the server's progress thread woken $pw times and drove $n, readiness fd writes $wakes, SIGIO lookups $sigio"
}

# Step 5: requests back to back, so the server is often driving its
# socket (in recv, send or its report) when the next one arrives and the
# kernel wakes the progress thread, since nobody sleeps in the set.  That
# thread leaves a socket whose lock is taken to its holder (trylock)
# instead of sleeping on the lock: it waits for one only after a few
# batches in a row found it taken.  Before, it waited on nearly every
# such wake (92 of 95, 21 of 24 in 2000 round trips).
busy_run() {
	local server n waits skips
	rm -f "$TMP/port"
	env $PRE "$EW" serve --port-file "$TMP/port" --host "$TEST_HOST" >"$TMP/serve.busy" 2>&1 &
	server=$!
	for _ in $(seq 100); do
		[ -s "$TMP/port" ] && break
		sleep 0.1
	done
	[ -s "$TMP/port" ] || fail "epoll_wake serve did not start: $(cat "$TMP/serve.busy")"
	if ! run_with_timeout 120 env $PRE "$EW" ping "$TEST_HOST:$(cat "$TMP/port")" \
		$((ROUNDS * 5)) 0 >"$TMP/ping.busy" 2>&1; then
		kill "$server" 2>/dev/null
		fail "busy: the ping-pong did not finish: $(cat "$TMP/ping.busy")"
	fi
	read -r n waits skips <<<"$(sdpstat_counters "$server" progress_fd_drives progress_lock_waits progress_busy_skips)"
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	case $n$waits$skips in
	'' | *[!0-9]*) fail "busy: sdpstat gave no counters for the server: $n $waits $skips" ;;
	esac
	if [ $((waits * 4)) -gt $((n + skips)) ]; then
		fail "busy: the server's progress thread waited for a socket lock $waits times in $((n + skips)) fd wakes (drives $n, skips $skips; wanted at most one in four)"
	fi
	log "ok   busy: $((ROUNDS * 5)) round trips, the server's progress thread drove $n, left $skips to the lock's holder, waited for the lock $waits times"
}

one_run lt ""
one_run et --et
# Step 2: a poll() sleeper, or a thread blocked in recv(), parks the
# socket's transport fd in its own sleep; the progress thread is not woken
# for the requests either.  Before, the fd went back to the progress
# thread right after the sleep, still readable, which woke that thread
# for about one request in two (205 and 181 in 400).
one_run poll --poll
one_run block --block
busy_run
sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
[ "$sdp" -eq 5 ] || fail "$sdp of 5 connections went over SDP"
log "PASS"
exit 0
