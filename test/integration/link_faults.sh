#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Faults of the link and of the RDMA device under live SDP connections
# (issue 18), in the VM testbed only (elsewhere it skips).  Run by hand
# from a build directory:
#
#   top_builddir=$PWD top_srcdir=$(cd .. && pwd) TEST_TRANSPORT=ib \
#       ../test/vm/run-in-vm --devices rxe -- ../test/integration/link_faults.sh
#   (siw: --devices siw, TEST_TRANSPORT=iwarp; it is in no TESTS list, so
#   make check TESTS=... cannot run it).  TEST_LINK_FAULTS names the cases to
#   run, "flap remove" by default: on rxe the flap leaves the device
#   unusable (below), so TEST_LINK_FAULTS=remove checks the removal alone.
#
# Not in the rxe and siw stages: on rxe, after eth0 went down and up under
# an SDP transfer, no new rdma_cm connection is made in the guest, a plain
# rping's neither (the kernel's rxe, 6.1.0-56; 2026-11-26).  Without a
# transfer under the flap, rping's listeners and fresh ones serve, and so
# do libsdp's since the stale-PORT_ERR fix in transports/verbs.
#
#   - the interface of the transport's device is taken down
#     (ip link set down) during a transfer, and brought back a moment
#     later: the transfer completes intact or both sides end with an error
#     (never a hang, never corrupt bytes);
#   - the RDMA device is removed (rdma link delete) during a transfer:
#     both sides end with an error, within the time limit;
#
# and after each, once the device is back (re-added with the same name on
# the same interface, and ACTIVE), a server that lived through it serves a
# new connection, checked end to end, over the same transport.
. "$(dirname "$0")/lib.sh"
# shellcheck disable=SC2034
TEST_LIMIT=90
start_watchdog

if [ -z "${VM_DEVICES:-}" ]; then
	skip "not in the VM testbed (test/vm/run-in-vm)"
fi
case $TEST_TRANSPORT in
ib) dev=rxe0 type=rxe ;;
iwarp) dev=siw0 type=siw ;;
*) skip "transport $TEST_TRANSPORT has no RDMA device to take away" ;;
esac
netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
if [ -z "$netdev" ]; then
	fail "device $dev: no netdev in: $(rdma link show 2>&1)"
fi
log "device $dev ($type) on $netdev"

SDPCAT=$(prog sdpcat)
failures=0
dead_peer_msg='reset by peer|Broken pipe|EOF|short transfer|timed out|Network is unreachable|No such device'
corrupt_msg='mismatch|bad header'

# The device (and its interface) back, ACTIVE, whatever a case did.
restore() {
	ip link set "$netdev" up
	rdma link show "$dev/1" >/dev/null 2>&1 ||
		rdma link add "$dev" type "$type" netdev "$netdev"
	local end=$((SECONDS + $(slow 30)))
	until rdma link show "$dev/1" 2>/dev/null | grep -q 'state ACTIVE'; do
		if [ "$SECONDS" -ge "$end" ]; then
			log "device $dev did not come back ACTIVE: $(rdma link show 2>&1)"
			return 1
		fi
		sleep 0.2
	done
}
trap 'restore >/dev/null 2>&1' EXIT

# The long-lived server: it lives through every fault and serves the
# checks.
lsout="$TMP/long_server.out"
if ! start_server "$lsout" --count 100000 -v; then
	fail "the long-lived server did not start"
fi
LPORT=$PORT
LSPID=$SERVER_PID

# next_works DESC: a new connection to the long-lived server carries 8 MiB
# intact over TEST_TRANSPORT.
next_works() {
	if run_with_timeout 120 "$SDPCAT" -c "$TEST_HOST:$LPORT" --bytes 8M --wsize 1-1M \
		>"$TMP/next.out" 2>&1 && grep -q "^sdpcat: sdp $TEST_TRANSPORT: .*checksum ok" "$TMP/next.out"; then
		log "ok   $1: then a new connection: $(sed -n 's/^sdpcat: //p' "$TMP/next.out" | tail -n 1)"
	else
		log "FAIL $1: then a new connection: $(tr '\n' ' ' <"$TMP/next.out")"
		failures=$((failures + 1))
		# Which is it: the old listener, or the device?
		if start_server "$TMP/fresh.out" --count 1 &&
			run_with_timeout 120 "$SDPCAT" -c "$TEST_HOST:$PORT" --bytes 1M \
				>"$TMP/fresh_c.out" 2>&1; then
			log "  (a server started now does serve it: the old listener is dead)"
		else
			log "  (a server started now fails too: $(tr '\n' ' ' <"$TMP/fresh_c.out"))"
		fi
	fi
}

# one_case DESC BYTES FAULT...: a transfer of BYTES to a server of its own;
# once it is under way, FAULT runs; both sides must end as the header says.
one_case() {
	local desc=$1 bytes=$2 crc src
	shift 2
	local sout="$TMP/s.out" cout="$TMP/c.out"
	if ! start_server "$sout" --count 1 -v; then
		log "FAIL $desc: server did not start"
		failures=$((failures + 1))
		return
	fi
	local spid=$SERVER_PID
	start_bg "$cout" "$SDPCAT" -c "$TEST_HOST:$PORT" --bytes "$bytes" --wsize 1K-2M
	local cpid=$BG_PID
	if ! wait_for_text "$sout" 'accepted' 12; then
		log "FAIL $desc: no connection"
		failures=$((failures + 1))
		return
	fi
	sleep 1
	if ! run_with_timeout 12 "$@"; then
		log "FAIL $desc: '$*' failed or did not return"
		failures=$((failures + 1))
	fi
	wait_pid "$cpid" 180
	crc=$?
	wait_pid "$spid" 60
	src=$?
	if grep -Eq "$corrupt_msg" "$cout" "$sout"; then
		log "FAIL $desc: corrupt data reported"
	elif [ "$crc" -eq 0 ] && grep -q 'checksum ok' "$cout"; then
		log "ok   $desc: the transfer completed: $(tail -n 1 "$cout")"
		return
	elif [ "$crc" -eq 1 ] && [ "$src" -le 1 ] && grep -Eq "$dead_peer_msg" "$cout"; then
		log "ok   $desc: client exit 1: $(grep -E "$dead_peer_msg" "$cout" | head -n 1)"
		return
	else
		log "FAIL $desc: client exit $(status_text "$crc"), server exit $(status_text "$src")"
	fi
	sed 's/^/  client: /' "$cout"
	sed 's/^/  server: /' "$sout"
	failures=$((failures + 1))
}

cases=${TEST_LINK_FAULTS:-flap remove}
if [[ " $cases " == *" flap "* ]]; then
	# shellcheck disable=SC2016
	one_case "$netdev down and up during a transfer" 256M \
		bash -c 'ip link set "$1" down && sleep 1 && ip link set "$1" up' link_flap "$netdev"
	restore || failures=$((failures + 1))
	next_works "after $netdev went down and up"
fi
if [[ " $cases " == *" remove "* ]]; then
	one_case "rdma link delete $dev during a transfer" 1T rdma link delete "$dev"
	restore || failures=$((failures + 1))
	next_works "after $dev was removed and added again"
fi

if ! kill -0 "$LSPID" 2>/dev/null; then
	log "FAIL the long-lived server died:"
	sed 's/^/  server: /' "$lsout"
	failures=$((failures + 1))
elif grep -Eq "$corrupt_msg" "$lsout"; then
	log "FAIL the long-lived server read corrupt data"
	failures=$((failures + 1))
fi
if [ "$failures" -ne 0 ]; then
	fail "$failures failure(s)"
fi
log "PASS"
exit 0
