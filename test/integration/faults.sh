#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Faults (issue 18): nothing hangs, no byte arrives corrupted, the process
# survives and later connections work, whatever breaks under a connection.
#
# 1. Transport errors injected under every blocking call of the engine's
#    API by fault_check's hook (a wrapping backend installed with
#    oti_test_backend(): nothing of it is in libsdp.so), each case checked
#    for the errno TCP gives.  The hook wraps the software transport over
#    loopback, so this part runs on tcp-fallback only.
# 2. Peers killed (kill -9) at seeded random points of connect, of a
#    transfer by Bcopy and by zero copy, and of the close, on whatever
#    transport the suite runs on: a killed client's server goes on serving
#    (the next client's transfer is checked); a killed server's client
#    exits 1 saying why, or 0 with its data confirmed when the kill came
#    after the server had checked it.  No side may report corrupt data.
# 3. The same for a program under the preload that waits in epoll: its
#    killed peers' connections end as TCP's do, and it serves the next.
#
# FAULT_SEED=N repeats a run (the seed is logged); FAULT_ROUNDS=N kills N
# times per point and victim (default 2).
. "$(dirname "$0")/lib.sh"

SDPCAT=$(prog sdpcat)
FC=$(prog fault_check)
seed=${FAULT_SEED:-$(date +%s)}
rounds=${FAULT_ROUNDS:-2}
kills=0
log "seed $seed (FAULT_SEED=$seed repeats this run)"

# --- 1. injected transport errors -------------------------------------------
if [ "$TEST_TRANSPORT" = tcp-fallback ]; then
	log "--- injected faults"
	# The zero-copy cases' sizes follow the threshold: fixed here.
	SDP_ZCOPY_THRESH=262144 run_with_timeout 200 "$FC" -s "$seed" >"$TMP/fc.out" 2>&1
	rc=$?
	sed 's/^/  /' "$TMP/fc.out"
	if [ "$rc" -ne 0 ]; then
		bad "fault_check exit $(status_text "$rc")"
	fi
else
	log "--- injected faults: skipped (fault_check wraps tcp-fallback only)"
fi

# --- 2. peers killed at random points ---------------------------------------
RANDOM=$seed
dead_peer_msg='reset by peer|Broken pipe|EOF|short transfer|refused|timed out'
corrupt_msg='mismatch|bad header'

# rand MIN MAX
rand() { echo $(($1 + RANDOM % ($2 - $1 + 1))); }
# pause_ms MS
pause_ms() { sleep "$(printf '0.%03d' "$1")"; }

# client_args POINT: what the client sends for each kill point.
client_args() {
	case $1 in
	connect | bcopy) echo "--bytes 1T --wsize 1-64K --rsize 1-64K" ;;
	zcopy) echo "--bytes 1T --wsize 256K-2M --rsize $(rand 1 2048)K" ;;
	close) echo "--bytes $(rand 2048 12288)K --wsize 1-64K" ;;
	esac
}

# size FILE: its length in bytes.
size() { stat -c %s "$1"; }
# wait_accepted SERVER_OUT FROM: until the server reports a connection
# accepted past byte FROM of its output.  tail -f follows the file by
# inotify: a connection lives a few milliseconds, polling would see it over.
wait_accepted() {
	local fd tp
	exec {fd}< <(exec timeout "$(slow 30)" tail -f -c "+$(($2 + 1))" "$1")
	tp=$!
	grep -m 1 accepted <&"$fd" >/dev/null
	kill "$tp" 2>/dev/null
	exec {fd}<&-
}

# kill_after POINT VICTIM SERVER_OUT FROM OTHER: wait for the point, then
# kill -9 VICTIM.  Bcopy and zero copy: a while after the server reported
# a connection accepted past byte FROM of its output.  Close: a short
# transfer; right after the accept the other side (pid OTHER) is stopped,
# so that the victim is caught in its close, waiting on the peer (the
# client for the server's verdict, the server for the client's DisConn),
# or else where it was in the transfer.
# Sets $landed to what the kill met.
kill_after() {
	case $1 in
	connect) pause_ms "$(rand 0 40)" ;;
	bcopy | zcopy)
		wait_accepted "$3" "$4"
		pause_ms "$(rand 0 300)"
		;;
	close)
		wait_accepted "$3" "$4"
		pause_ms "$(rand 0 5)"
		kill -STOP "$5" 2>/dev/null
		pause_ms "$(rand 20 200)"
		;;
	esac
	landed=""
	if kill -9 "$2" 2>/dev/null; then
		kills=$((kills + 1))
	else
		landed=" (the victim had exited)"
	fi
	wait "$2" 2>/dev/null
	[ "$1" != close ] || kill -CONT "$5" 2>/dev/null
}

# The server that outlives its killed clients, and checks the next one.
lsout="$TMP/long_server.out"
if ! start_server "$lsout" --count 100000 -v --rsize 1-16K; then
	fail "the long-lived server did not start"
fi
LPORT=$PORT
LSPID=$SERVER_PID

for point in connect bcopy zcopy close; do
	for ((r = 0; r < rounds; r++)); do
		# A client killed: the server goes on, and serves the next one.
		args=$(client_args "$point")
		desc="kill client at $point ($args)"
		: >"$TMP/c.out"
		seen=$(size "$lsout")
		# shellcheck disable=SC2086
		start_bg "$TMP/c.out" "$SDPCAT" -c "$TEST_HOST:$LPORT" $args
		kill_after "$point" "$BG_PID" "$lsout" "$seen" "$LSPID"
		if run_with_timeout 60 "$SDPCAT" -c "$TEST_HOST:$LPORT" --bytes 4M \
			--wsize 1-1M >"$TMP/next.out" 2>&1 &&
			grep -q 'checksum ok' "$TMP/next.out" && kill -0 "$LSPID" 2>/dev/null; then
			log "ok   $desc$landed: the server served the next client"
		else
			bad "$desc: the next client: $(tr '\n' ' ' <"$TMP/next.out")"
		fi

		# A server killed: the client returns, saying why.
		args=$(client_args "$point")
		desc="kill server at $point ($args)"
		if ! start_server "$TMP/s.out" --count 1 -v --rsize 1-16K; then
			bad "$desc: server did not start"
			continue
		fi
		spid=$SERVER_PID
		# shellcheck disable=SC2086
		start_bg "$TMP/c.out" "$SDPCAT" -c "$TEST_HOST:$PORT" $args
		cpid=$BG_PID
		kill_after "$point" "$spid" "$TMP/s.out" 0 "$cpid"
		wait_pid "$cpid" 60
		rc=$?
		if grep -Eq "$corrupt_msg" "$TMP/c.out" "$TMP/s.out"; then
			bad "$desc: corrupt data reported"
		elif [ "$rc" -eq 1 ] && grep -Eq "$dead_peer_msg" "$TMP/c.out"; then
			log "ok   $desc$landed: client exit 1: $(grep -E "$dead_peer_msg" "$TMP/c.out" | head -n 1)"
			continue
		elif [ "$rc" -eq 0 ] && grep -q 'checksum ok' "$TMP/c.out"; then
			log "ok   $desc$landed: done before the kill: $(tail -n 1 "$TMP/c.out")"
			continue
		else
			bad "$desc: client exit $(status_text "$rc"), expected 1 with one of: $dead_peer_msg"
		fi
		sed 's/^/  client: /' "$TMP/c.out"
		sed 's/^/  server: /' "$TMP/s.out"
	done
done
log "$kills of $((rounds * 8)) kills met their victim alive"
if grep -Eq "$corrupt_msg" "$lsout"; then
	bad "the long-lived server read corrupt data:"
	grep -E "$corrupt_msg" "$lsout" | sed 's/^/  /'
fi
if ! kill -0 "$LSPID" 2>/dev/null; then
	bad "the long-lived server died"
fi

# --- 3. a preloaded epoll program's peers killed -----------------------------
# The server waits in epoll (EPOLLIN or EPOLLOUT, with EPOLLRDHUP) on an SDP
# socket under the preload; each client is killed at a random point.  Each
# connection must end (EOF, ECONNRESET or EPIPE), with what was read
# intact, and the server go on to the next; the last client, not killed,
# sends a known count that must arrive whole.
if ! preload_lib >/dev/null; then
	log "--- epoll under the preload: skipped (no libsdp.so)"
else
	log "--- epoll under the preload"
	PY=$top_srcdir/test/integration/epoll_peer.py
	conf=$TMP/sdp.conf
	write_conf "$conf" "log min-level 7" "use sdp server * $TEST_HOST:*" \
		"use sdp client * $TEST_HOST:*"
	P=$(preload_env "$conf")
	if is_sanitized; then
		export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	fi
	eout=$TMP/epoll_server.out
	# shellcheck disable=SC2086
	start_bg "$eout" env $P python3 "$PY" server "$TEST_HOST" "$TMP/eport"
	if ! wait_for_file "$TMP/eport" 60; then
		bad "the epoll server did not start:"
		sed 's/^/  /' "$eout"
	else
		eport=$(cat "$TMP/eport")
		conns=$((2 * rounds))
		for ((n = 0; n < conns; n++)); do
			mode=send
			[ $((n % 2)) -eq 1 ] && mode=recv
			seen=$(size "$eout")
			# shellcheck disable=SC2086
			start_bg "$TMP/ec.out" env $P python3 "$PY" client "$TEST_HOST" "$eport" "$mode"
			wait_accepted "$eout" "$seen"
			pause_ms "$(rand 0 300)"
			kill -9 "$BG_PID" 2>/dev/null
			wait "$BG_PID" 2>/dev/null
		done
		total=$(rand 1 8000000)
		# shellcheck disable=SC2086
		run_with_timeout 60 env $P python3 "$PY" client "$TEST_HOST" "$eport" send "$total" \
			>"$TMP/ec.out" 2>&1
		end=$((SECONDS + $(slow 60)))
		while [ "$(grep -c '^conn ' "$eout")" -le "$conns" ] && [ "$SECONDS" -lt "$end" ]; do
			sleep 0.1
		done
		grep '^conn ' "$eout" | sed 's/^/  /'
		if ! grep -Eq "(over SDP|accepted an SDP connection) \($TEST_TRANSPORT\)" "$eout"; then
			bad "the epoll server's connections were not over SDP ($TEST_TRANSPORT)"
		elif [ "$(grep -Ec '^conn [0-9]+ (header|read|write): (EOF|ECONNRESET|EPIPE) after [0-9]+ bytes, intact$' "$eout")" -ne $((conns + 1)) ]; then
			bad "the epoll server: a connection did not end as TCP ends, or was corrupt"
			sed 's/^/  /' "$eout" | tail -n 30
		elif ! grep -q "^conn $conns read: EOF after $total bytes, intact$" "$eout"; then
			bad "the epoll server: the last client's $total bytes did not arrive whole"
		else
			log "ok   epoll server: $conns killed clients seen to end, the next one's $total bytes whole"
		fi
	fi
fi

failures_end
log "PASS"
exit 0
