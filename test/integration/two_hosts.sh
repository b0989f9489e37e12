#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The software transport between two hosts, not only on loopback: two
# network namespaces (two TCP/IP stacks) joined by a veth pair, the server
# in one, the client in the other.  Checksummed transfers one way and both
# ways at once, and a native TCP listener on the same port number as the
# SDP one on the server host (the port scheme keeps them apart).  Needs
# root for the namespaces; without it the test says so and is skipped.
. "$(dirname "$0")/lib.sh"

# The two hosts are network namespaces joined by a veth pair: the software
# transport follows them, an RDMA device does not (rxe and siw serve the
# guest's own interfaces).  Two guests are test/vm's business.
if [ "$TEST_TRANSPORT" != tcp-fallback ]; then
	skip "two namespaces on one veth have no $TEST_TRANSPORT device: this test is for tcp-fallback (two hosts over RDMA: test/vm, run-in-vm --two)"
fi
if [ "$(id -u)" -ne 0 ]; then
	skip "network namespaces need root"
fi
if ! command -v ip >/dev/null 2>&1; then
	skip "ip (iproute2) is not installed"
fi

SDPCAT=$(prog sdpcat)
NS_A="sdp-$$-a"
NS_B="sdp-$$-b"
ADDR_A=10.99.0.1
ADDR_B=10.99.0.2

netns_cleanup() {
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
}
trap 'netns_cleanup; cleanup' EXIT

if ! ip netns add "$NS_A" 2>"$TMP/ns.err" || ! ip netns add "$NS_B" 2>>"$TMP/ns.err"; then
	skip "cannot create network namespaces here: $(tr '\n' ' ' <"$TMP/ns.err")"
fi
ip link add "veth$$a" type veth peer name "veth$$b" &&
	ip link set "veth$$a" netns "$NS_A" &&
	ip link set "veth$$b" netns "$NS_B" &&
	ip -n "$NS_A" addr add "$ADDR_A/24" dev "veth$$a" &&
	ip -n "$NS_B" addr add "$ADDR_B/24" dev "veth$$b" &&
	ip -n "$NS_A" link set "veth$$a" up &&
	ip -n "$NS_B" link set "veth$$b" up &&
	ip -n "$NS_A" link set lo up &&
	ip -n "$NS_B" link set lo up ||
	fail "could not wire the two namespaces"
log "host A $ADDR_A (namespace $NS_A), host B $ADDR_B (namespace $NS_B), one veth link"

bytes=64M
bidir_bytes=16M
if is_sanitized; then
	bytes=8M
	bidir_bytes=4M
fi

failures=0

# one transfer: DESC SERVER-ARGS CLIENT-ARGS
host_case() {
	local desc=$1 sargs=$2 cargs=$3 pf="$TMP/port.$RANDOM" rc src
	# shellcheck disable=SC2086
	start_bg "$TMP/server.out" ip netns exec "$NS_A" "$SDPCAT" -l "$ADDR_A:0" \
		--port-file "$pf" --count 1 $sargs
	local spid=$BG_PID
	if ! wait_for_file "$pf" 30; then
		log "FAIL $desc: server did not start"
		sed 's/^/  server: /' "$TMP/server.out"
		failures=$((failures + 1))
		return
	fi
	PORT=$(cat "$pf")
	# shellcheck disable=SC2086
	run_with_timeout 120 ip netns exec "$NS_B" "$SDPCAT" -c "$ADDR_A:$PORT" $cargs \
		>"$TMP/client.out" 2>&1
	rc=$?
	wait_pid "$spid" 20
	src=$?
	if [ "$rc" -eq 0 ] && [ "$src" -eq 0 ] && grep -q 'checksum ok' "$TMP/client.out"; then
		log "ok   $desc: $(sed -n 's/^sdpcat: //p' "$TMP/client.out" | tail -n 1)"
	else
		log "FAIL $desc: client exit $(status_text "$rc"), server exit $(status_text "$src")"
		sed 's/^/  client: /' "$TMP/client.out"
		sed 's/^/  server: /' "$TMP/server.out"
		failures=$((failures + 1))
	fi
}

host_case "client on B to server on A over SDP, $bytes" "" "--bytes $bytes --seed 21 --wsize 1-1M"
host_case "both ways at once over SDP, $bidir_bytes each" "" \
	"--bidir --bytes $bidir_bytes --seed 22"
host_case "reference over kernel TCP, $bytes" "--tcp" "--tcp --bytes $bytes --seed 23"

# Same port number on both stacks of host A: an SDP listener and a native
# TCP listener, each serving its own client.
log "an SDP and a native TCP listener on the same port of host A"
pf="$TMP/port.sdp"
start_bg "$TMP/sdp-server.out" ip netns exec "$NS_A" "$SDPCAT" -l "$ADDR_A:0" \
	--port-file "$pf" --count 1
sdp_pid=$BG_PID
wait_for_file "$pf" 30 || fail "SDP server did not start"
P=$(cat "$pf")
start_bg "$TMP/tcp-server.out" ip netns exec "$NS_A" "$SDPCAT" --tcp -l "$ADDR_A:$P" \
	--port-file "$TMP/port.tcp" --count 1
tcp_pid=$BG_PID
if ! wait_for_file "$TMP/port.tcp" 30; then
	sed 's/^/  tcp server: /' "$TMP/tcp-server.out"
	fail "a native TCP listener could not bind port $P next to the SDP one"
fi
run_with_timeout 60 ip netns exec "$NS_B" "$SDPCAT" -c "$ADDR_A:$P" --bytes 1M \
	>"$TMP/c1.out" 2>&1 || failures=$((failures + 1))
run_with_timeout 60 ip netns exec "$NS_B" "$SDPCAT" --tcp -c "$ADDR_A:$P" --bytes 1M \
	>"$TMP/c2.out" 2>&1 || failures=$((failures + 1))
wait_pid "$sdp_pid" 20 || failures=$((failures + 1))
wait_pid "$tcp_pid" 20 || failures=$((failures + 1))
if grep -q 'sdp tcp-fallback.*checksum ok' "$TMP/c1.out" &&
	grep -q 'tcp kernel.*checksum ok' "$TMP/c2.out"; then
	log "ok   port $P: SDP client reached the SDP listener, TCP client the TCP one"
else
	log "FAIL same-port listeners:"
	sed 's/^/  sdp client: /' "$TMP/c1.out"
	sed 's/^/  tcp client: /' "$TMP/c2.out"
	failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] || fail "$failures case(s) failed"
log "PASS"
