#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# What a connection end costs on the verbs transports (ib over rxe, iwarp
# over siw in the VM testbed), as counts, and what happens at a limit.
# On tcp-fallback, which registers nothing, the test skips.
#
# 1. Descriptors: a server holding 6 idle SDP connections (conn_hold.py)
#    has at most 5 descriptors per connection beyond the first's (the
#    application's socket, the engine's, the endpoint's epoll set, its
#    rdma_cm event channel and completion channel; doc/scale.md), and
#    every connection is on SDP; and at most 64 KiB pinned per connection
#    beyond the first's, on each side (issue 16's budget for an idle
#    connection end): the buffers a connection starts with (16 + 16 of
#    1536 bytes, 24 + 24 KiB, sdp/post.c "Growing buffers"), its control
#    slots' pages and on iWARP the start rule's word's page (8 MiB
#    before buffers grew, 172 KiB with 5136 bytes).  The server's
#    descriptors, because on iWARP the
#    connecting side keeps a timerfd for about a second after a connection
#    is up (the start rule's repeated write, transports/verbs/verbs.c); the
#    accepting side's is closed before accept() returns the connection.
# 2. RLIMIT_MEMLOCK: a client whose limit holds one connection's buffers
#    and not a second's (8 MiB each with buf_size_start=262160) makes two
#    connections: the first on SDP, the second on TCP with the fallback
#    reason "resource", both carrying their bytes.  The kernel refuses the
#    registration (ENOMEM), the engine names the reason.  A process with
#    CAP_IPC_LOCK has no such limit (rxe, and every device but siw, let
#    root pin past it), so the client runs without it (setpriv).
# 3. The same limit on the server: it cannot register a second
#    connection's buffers once it has accepted the request, and refuses it
#    saying why (libsdp's reject data, sdp/wire.h), so the client's second
#    and third connections fall back with reason "resource" -- not
#    "refused", which would have made it remember the server as one
#    without SDP ("remembered").
# 4. Many: VERBS_CONNS (default 600) connections between the two
#    processes, all on SDP, at most 64 KiB pinned each, and then 8 MiB
#    each over four of them, checked; the send buffers those grew go back
#    once idle (the client's pinned memory within 64 KiB of each).  A
#    process stopped at 500: the kernel refuses a file in more than 500
#    nested epoll sets, and every endpoint's set held the device's async
#    fd (transports/verbs/verbs.c).
. "$(dirname "$0")/lib.sh"

case $TEST_TRANSPORT in
ib | iwarp) ;;
*) skip "registered memory and the verbs endpoint's descriptors are the verbs transports' ($TEST_TRANSPORT)" ;;
esac
have python3 || skip "python3 is not installed"
HOLD=$top_srcdir/test/integration/conn_hold.py
SDPSTAT=$(prog sdpstat)
secs=$(slow 30)
conf=$TMP/sdp.conf
write_conf "$conf" "use both server * $TEST_HOST:*" "use both client * $TEST_HOST:*"
read -ra penv <<<"$(preload_env "$conf")"

# hold NAME N [MEMLOCK_KB [SIDE]]: a server and a client holding N
# connections, SIDE (client, or server) with that RLIMIT_MEMLOCK (and then
# without CAP_IPC_LOCK); their outputs in $TMP/NAME.server and
# $TMP/NAME.client, sdpstat's line of the client in $TMP/NAME.stat.
hold() {
	local name=$1 n=$2 lim=${3:-unlimited} side=${4:-client} spid cpid drop=()
	local slim=unlimited clim=$lim env=("${penv[@]}" "${HOLD_ENV[@]}")
	if [ "$lim" != unlimited ] && [ "$(id -u)" = 0 ]; then
		drop=(setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock --)
	fi
	[ "$side" = server ] && slim=$lim clim=unlimited
	local sdrop=() cdrop=("${drop[@]}")
	[ "$side" = server ] && sdrop=("${drop[@]}") cdrop=()
	rm -f "$TMP/$name.port"
	# shellcheck disable=SC2016
	start_bg "$TMP/$name.server" bash -c '{ [ "$1" = unlimited ] || ulimit -l "$1"; } && shift && exec "$@"' limit "$slim" \
		"${sdrop[@]}" env "${env[@]}" python3 "$HOLD" server "$TEST_HOST" \
		"$TMP/$name.port" "$n" "$secs"
	spid=$BG_PID
	wait_for_file "$TMP/$name.port" 30 || fail "$name: the server did not listen: $(cat "$TMP/$name.server")"
	# shellcheck disable=SC2016
	start_bg "$TMP/$name.client" bash -c '{ [ "$1" = unlimited ] || ulimit -l "$1"; } && shift && exec "$@"' limit "$clim" \
		"${cdrop[@]}" env "${env[@]}" python3 "$HOLD" client "$TEST_HOST" "$(cat "$TMP/$name.port")" "$n" "$secs"
	cpid=$BG_PID
	if ! wait_for_text "$TMP/$name.client" '^ok=' 60 ||
		! wait_for_text "$TMP/$name.server" '^ok=' 30; then
		fail "$name: no report: $(cat "$TMP/$name.client" "$TMP/$name.server")"
	fi
	"$SDPSTAT" -p "$cpid" -c >"$TMP/$name.stat" 2>&1
	kill "$spid" "$cpid" 2>/dev/null
	wait "$spid" "$cpid" 2>/dev/null
	log "$name: client $(grep '^ok=' "$TMP/$name.client"); $(head -1 "$TMP/$name.stat")"
}
kv() { grep -o "$2=[^ ]*" "$1" | head -1 | cut -d= -f2; }

HOLD_ENV=()
hold fds 6
for side in client server; do
	grep -q '^ok=6 err=0' "$TMP/fds.$side" || bad "fds: not 6 connections: $(cat "$TMP/fds.$side")"
done
grep -q 'connect sdp/tcp 6/0' "$TMP/fds.stat" || bad "fds: not all on SDP: $(cat "$TMP/fds.stat")"
first=$(kv "$TMP/fds.server" first_fds) after=$(kv "$TMP/fds.server" after_fds)
if [ -z "$first" ] || [ -z "$after" ]; then
	bad "fds: no counts: $(cat "$TMP/fds.server")"
else
	log "fds: the server's $((after - first)) descriptors for the 5 connections after the first (at most 25)"
	[ $((after - first)) -le 25 ] || bad "fds: $((after - first)) descriptors for 5 connections"
fi
for side in server client; do
	first=$(kv "$TMP/fds.$side" first_pin_kb) after=$(kv "$TMP/fds.$side" after_pin_kb)
	if [ -z "$first" ] || [ -z "$after" ]; then
		bad "pinned: no figures from the $side: $(cat "$TMP/fds.$side")"
		continue
	fi
	log "pinned: the $side's 5 connections after the first pin $((after - first)) KiB, $(((after - first) / 5)) KiB each (at most 64)"
	[ $((after - first)) -le $((5 * 64)) ] || bad "pinned: $((after - first)) KiB for 5 idle connections on the $side"
done

many=${VERBS_CONNS:-600}
need=$((many * 6 + 256))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
	log "many: not run: the hard descriptor limit ($hard) is below the $need $many connections need"
elif ! (ulimit -Sn "$need"); then
	log "many: not run: ulimit -Sn $need failed"
else
	ulimit -Sn "$need"
	HOLD_ENV=(CONN_HOLD_BULK=4:8)
	hold many "$many"
	for side in client server; do
		grep -q "^ok=$many err=0" "$TMP/many.$side" ||
			bad "many: not $many connections: $(grep '^ok=' "$TMP/many.$side")"
		grep -q '^bulk_ok=4 ' "$TMP/many.$side" ||
			bad "many: 8 MiB did not arrive intact on 4 of them: $(grep '^bulk' "$TMP/many.$side")"
		first=$(kv "$TMP/many.$side" first_pin_kb) after=$(kv "$TMP/many.$side" after_pin_kb)
		if [ -n "$first" ] && [ -n "$after" ]; then
			log "many: the $side's $((many - 1)) connections after the first pin $(((after - first) / (many - 1))) KiB each (at most 64); $(grep '^bulk' "$TMP/many.$side")"
			[ $((after - first)) -le $(((many - 1) * 64)) ] ||
				bad "many: $((after - first)) KiB pinned for $((many - 1)) connections on the $side"
		else
			bad "many: no figures from the $side"
		fi
		# After the bulk the client's send rings (grown to full size)
		# go back to the start size once idle; the server's receive
		# rings stay as they grew (posted receives cannot be taken
		# back), which is logged, not bounded.
		bulk=$(kv "$TMP/many.$side" bulk_pin_kb) idle=$(kv "$TMP/many.$side" idle_pin_kb)
		if [ -z "$bulk" ] || [ -z "$idle" ] || [ -z "$after" ]; then
			bad "many: no figures after the bulk from the $side"
			continue
		fi
		log "many: the $side pins $((bulk - after)) KiB more after the bulk, $((idle - after)) KiB once idle"
		if [ "$side" = client ] && [ $((idle - after)) -gt $((4 * 64)) ]; then
			bad "many: the client's grown send buffers did not go back when idle: +$((idle - after)) KiB pinned"
		fi
	done
	grep -q "connect sdp/tcp $many/0" "$TMP/many.stat" || bad "many: not all on SDP: $(cat "$TMP/many.stat")"
fi

# The limit cases need connections of 8 MiB each: the buffers of before
# they started small.
HOLD_ENV=(SDP_BUF_SIZE_START=262160)
# 10 MiB: one connection's 8 MiB fits, a second's does not.
if [ "$(id -u)" = 0 ] && ! have setpriv; then
	log "memlock: not run: setpriv (util-linux) is missing, and root cannot drop CAP_IPC_LOCK without it"
else
	hold memlock 2 10240
	grep -q '^ok=2 err=0' "$TMP/memlock.client" ||
		bad "memlock: a connection failed: $(cat "$TMP/memlock.client")"
	grep -q 'connect sdp/tcp 1/1' "$TMP/memlock.stat" ||
		bad "memlock: not one on SDP and one on TCP: $(cat "$TMP/memlock.stat")"
	grep -q 'resource 1' "$TMP/memlock.stat" ||
		bad "memlock: no fallback with reason resource: $(cat "$TMP/memlock.stat")"
	hold memlock_srv 3 10240 server
	grep -q '^ok=3 err=0' "$TMP/memlock_srv.client" ||
		bad "memlock on the server: a connection failed: $(cat "$TMP/memlock_srv.client")"
	grep -q 'connect sdp/tcp 1/2' "$TMP/memlock_srv.stat" ||
		bad "memlock on the server: not one on SDP and two on TCP: $(cat "$TMP/memlock_srv.stat")"
	grep -q 'resource 2' "$TMP/memlock_srv.stat" ||
		bad "memlock on the server: the client's fallbacks are not \"resource\" (refused and remembered before): $(cat "$TMP/memlock_srv.stat")"
fi
failures_end
log "PASS"
