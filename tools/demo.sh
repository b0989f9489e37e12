#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# tools/demo.sh BUILDDIR: the libsdp demo (./quickstart.sh demo runs it).
#
# 1. Unmodified programs over SDP: iperf3 (server and client) started with
#    sdp_run on the software transport (no RNIC needed), with what sdpstat
#    shows of the server while it runs; socat moving a 64 MiB file over
#    SDP, checked with sha256; the same iperf3 over the kernel's TCP.
# 3. One host, the shared-memory transport: the same iperf3, and 64-byte
#    round trips of a plain sockets program (bench/preload_cost), over SDP
#    on shm and over the kernel's TCP.
# 2. The engine on its own: 256 MiB of seeded pseudo-random data from an
#    sdpcat client to an sdpcat server over SDP, then over the kernel's
#    TCP, each checked end to end (byte count and XXH64).
# Prints the throughputs side by side; exits non-zero if a transfer fails,
# a checksum differs, or a program did not use SDP.
#
# Environment: DEMO_BYTES (default 256M), SDP_TRANSPORTS (default
# tcp-fallback).
set -u

builddir=${1:-}
if [ -z "$builddir" ] || [ ! -d "$builddir" ]; then
	echo "usage: $0 BUILDDIR" >&2
	exit 2
fi
builddir=$(cd "$builddir" && pwd)
sdpcat=$builddir/tools/sdpcat
if [ ! -x "$sdpcat" ]; then
	echo "demo: $sdpcat not found: build first (make -C $builddir)" >&2
	exit 1
fi
export SDP_TRANSPORTS=${SDP_TRANSPORTS:-tcp-fallback}
bytes=${DEMO_BYTES:-256M}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdp-demo.XXXXXX") || exit 1
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# run_one API-FLAG: one checksummed transfer; prints sdpcat's summary line,
# leaves the rate (Gbit/s) in $rate.
run_one() {
	local flag=("$@") pf="$tmp/port" i=0 rc src
	rm -f "$pf"
	"$sdpcat" "${flag[@]}" -l 127.0.0.1:0 --port-file "$pf" --count 1 \
		>"$tmp/server.out" 2>&1 </dev/null &
	server_pid=$!
	while [ ! -s "$pf" ]; do
		i=$((i + 1))
		if [ "$i" -gt 600 ] || ! kill -0 "$server_pid" 2>/dev/null; then
			echo "demo: the server did not start:" >&2
			cat "$tmp/server.out" >&2
			return 1
		fi
		sleep 0.05
	done
	timeout 300 "$sdpcat" "${flag[@]}" -c "127.0.0.1:$(cat "$pf")" --bytes "$bytes" \
		--seed "$RANDOM" --wsize 64K-1M >"$tmp/client.out" 2>&1
	rc=$?
	wait "$server_pid"
	src=$?
	server_pid=
	cat "$tmp/client.out"
	if [ "$rc" -ne 0 ] || [ "$src" -ne 0 ] || ! grep -q 'checksum ok' "$tmp/client.out"; then
		echo "demo: transfer FAILED (client exit $rc, server exit $src)" >&2
		sed 's/^/  server: /' "$tmp/server.out" >&2
		return 1
	fi
	rate=$(sed -n 's/.* = \([0-9.]*\) Gbit\/s.*/\1/p' "$tmp/client.out" | tail -n 1)
	return 0
}

sdp_run=$builddir/tools/sdp_run
sdpstat=$builddir/tools/sdpstat
conf=$tmp/demo.conf
cat >"$conf" <<CONFEOF
# The demo's policy: the software transport on, every stream socket on
# SDP where the peer has it (both), TCP otherwise; a line per connection.
transport enable tcp-fallback
log min-level 7 destination file $tmp/libsdp.log
use both server * *:*
use both client * *:*
CONFEOF

# A free port P whose SDP port on this transport (P + 20000) is free too.
free_port() { python3 "$(dirname "$0")/free_port.py" 127.0.0.1; }

# iperf3_rate yes|no [CONF]: a 3-second iperf3 run on 127.0.0.1, both ends
# under sdp_run (with CONF, default demo.conf) or not; leaves Gbit/s in
# $rate.
iperf3_rate() {
	local pre=() port client
	[ "$1" = yes ] && pre=("$sdp_run" --conf "${2:-$conf}" --)
	port=$(free_port)
	"${pre[@]}" iperf3 -s -1 --forceflush -p "$port" >"$tmp/iperf-s.out" 2>&1 </dev/null &
	server_pid=$!
	for _ in $(seq 200); do
		grep -q "Server listening" "$tmp/iperf-s.out" && break
		sleep 0.05
	done
	"${pre[@]}" iperf3 -c 127.0.0.1 -p "$port" -t 3 -J >"$tmp/iperf-c.json" 2>"$tmp/iperf-c.err" &
	client=$!
	if [ "$1" = yes ]; then
		sleep 1.5
		echo "   sdpstat -p <iperf3 server pid>, while it runs:"
		"$sdpstat" -p "$server_pid" 2>&1 | sed 's/^/     /'
	fi
	if ! wait "$client"; then
		echo "demo: iperf3 client failed: $(cat "$tmp/iperf-c.err")" >&2
		return 1
	fi
	wait "$server_pid"
	server_pid=
	rate=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("%.2f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' "$tmp/iperf-c.json")
}

if ! command -v iperf3 >/dev/null || ! command -v socat >/dev/null; then
	echo "demo: iperf3 and socat are needed (./quickstart.sh installs them)" >&2
	exit 1
fi

echo "== 1. unmodified programs over SDP: sdp_run, software transport (no RNIC)"
echo
echo "-- iperf3 -s and iperf3 -c, both started as: sdp_run --conf demo.conf -- iperf3 ..."
iperf3_rate yes || exit 1
iperf_sdp=$rate
if ! grep -q "accepted an SDP connection" "$tmp/libsdp.log"; then
	echo "demo: iperf3 did not use SDP:" >&2
	cat "$tmp/libsdp.log" >&2
	exit 1
fi
echo "   iperf3 over SDP: $iperf_sdp Gbit/s"
echo
echo "-- socat: a 64 MiB file from a socat client to a socat server, both under sdp_run"
head -c $((64 << 20)) /dev/urandom >"$tmp/file.in"
port=$(free_port)
: >"$tmp/libsdp.log"
"$sdp_run" --conf "$conf" -- socat -u "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr" \
	"OPEN:$tmp/file.out,creat,trunc" </dev/null &
server_pid=$!
sleep 0.5
"$sdp_run" --conf "$conf" -- socat -u "OPEN:$tmp/file.in" "TCP:127.0.0.1:$port" || exit 1
wait "$server_pid"
server_pid=
sum_in=$(sha256sum <"$tmp/file.in" | cut -c1-16)
sum_out=$(sha256sum <"$tmp/file.out" | cut -c1-16)
if [ "$sum_in" != "$sum_out" ]; then
	echo "demo: socat: the file arrived different" >&2
	exit 1
fi
if ! grep -q "connected to 127.0.0.1:$port over SDP" "$tmp/libsdp.log"; then
	echo "demo: socat did not use SDP:" >&2
	cat "$tmp/libsdp.log" >&2
	exit 1
fi
echo "   sha256 sent $sum_in..., received $sum_out...: identical; the log says:"
sed 's/^[^]]*] [0-9.]* /     /' "$tmp/libsdp.log"
echo
echo "-- the same iperf3 over the kernel's TCP, for comparison"
iperf3_rate no || exit 1
iperf_tcp=$rate
echo "   iperf3 over TCP: $iperf_tcp Gbit/s"
echo
echo "== 2. the engine on its own: $bytes of checksummed data, sdpcat -> sdpcat on 127.0.0.1"
echo
echo "-- over SDP (libsdp engine, SDP_TRANSPORTS=$SDP_TRANSPORTS)"
run_one || exit 1
sdp_rate=$rate
echo
echo "-- over the kernel's TCP, for comparison"
run_one --tcp || exit 1
tcp_rate=$rate
echo
echo
echo "== 3. one host: the shared-memory transport (shm), the same programs"
echo
shmconf=$tmp/demo-shm.conf
sed 's/^transport enable tcp-fallback$/transport enable shm/' "$conf" >"$shmconf"
: >"$tmp/libsdp.log"
echo "-- iperf3 -s and iperf3 -c under sdp_run, transport enable shm"
SDP_TRANSPORTS=shm iperf3_rate yes "$shmconf" || exit 1
iperf_shm=$rate
if ! grep -q "established over shm" "$tmp/libsdp.log"; then
	echo "demo: iperf3 did not use SDP over shm:" >&2
	cat "$tmp/libsdp.log" >&2
	exit 1
fi
echo "   iperf3 over SDP on shm: $iperf_shm Gbit/s"
echo
# pingpong_p50 yes|no [CONF]: 20,000 round trips of 64 bytes between
# preload_cost's echo server and client (a plain sockets program, TCP_NODELAY),
# both under sdp_run or not; leaves the median round trip (us) in $rtt.
pingpong_p50() {
	local pre=() pf=$tmp/pp.port out
	[ "$1" = yes ] && pre=("$sdp_run" --conf "${2:-$conf}" --)
	rm -f "$pf"
	"${pre[@]}" "$builddir/bench/preload_cost" serve --echo --port-file "$pf" >/dev/null 2>&1 </dev/null &
	server_pid=$!
	for _ in $(seq 200); do [ -s "$pf" ] && break; sleep 0.05; done
	out=$("${pre[@]}" "$builddir/bench/preload_cost" pingpong "127.0.0.1:$(cat "$pf")" 20000 64 2>&1)
	kill "$server_pid" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_pid=
	rtt=$(printf '%s\n' "$out" | sed -n 's/^rtt_p50_us=\([0-9.]*\).*/\1/p')
	[ -n "$rtt" ] || { echo "demo: pingpong failed: $out" >&2; return 1; }
}
echo "-- 64-byte round trips (bench/preload_cost pingpong: plain sockets, TCP_NODELAY)"
: >"$tmp/libsdp.log"
SDP_TRANSPORTS=shm pingpong_p50 yes "$shmconf" || exit 1
rtt_shm=$rtt
grep -q "established over shm" "$tmp/libsdp.log" || { echo "demo: pingpong did not use shm" >&2; exit 1; }
pingpong_p50 no || exit 1
rtt_tcp=$rtt
echo "   median round trip: SDP on shm $rtt_shm us, kernel TCP $rtt_tcp us"
echo
echo "== summary, Gbit/s              SDP      TCP   SDP/TCP"
awk -v s="$iperf_sdp" -v t="$iperf_tcp" 'BEGIN {
	printf "   iperf3, tcp-fallback     %7.2f  %7.2f  %7.2f\n", s, t, (t > 0 ? s / t : 0) }'
awk -v s="$sdp_rate" -v t="$tcp_rate" 'BEGIN {
	printf "   sdpcat, checksummed      %7.2f  %7.2f  %7.2f\n", s, t, (t > 0 ? s / t : 0) }'
awk -v s="$iperf_shm" -v t="$iperf_tcp" 'BEGIN {
	printf "   iperf3, shm              %7.2f  %7.2f  %7.2f\n", s, t, (t > 0 ? s / t : 0) }'
echo "   round trip 64 B, us (lower is better)"
awk -v s="$rtt_shm" -v t="$rtt_tcp" 'BEGIN {
	printf "   pingpong p50, shm        %7.2f  %7.2f  %7.2f\n", s, t, (t > 0 ? s / t : 0) }'
echo
echo "(The software transport carries SDP over a TCP connection of its own: it"
echo " copies each byte twice more than kernel TCP, and wins only where SDP's"
echo " batching of writes pays; on RDMA hardware SDP bypasses the TCP/IP stack."
echo " shm moves the bytes through memory shared by the two processes.)"
exit 0
