#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# tools/demo.sh BUILDDIR: the libsdp demo (./quickstart.sh demo runs it).
#
# Sends 256 MiB of seeded pseudo-random data from an sdpcat client to an
# sdpcat server on this machine, first over SDP (the engine, on its
# software transport "tcp-fallback") and then over the kernel's TCP, each
# checked end to end (byte count and XXH64 of the whole stream), and prints
# both throughputs side by side.  Exits non-zero if either transfer fails
# or a checksum does not match.
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

echo "== libsdp demo: $bytes of checksummed data, sdpcat client -> sdpcat server on 127.0.0.1"
echo
echo "-- over SDP (libsdp engine, SDP_TRANSPORTS=$SDP_TRANSPORTS)"
run_one || exit 1
sdp_rate=$rate
echo
echo "-- over the kernel's TCP, for comparison"
run_one --tcp || exit 1
tcp_rate=$rate
echo
echo "== summary"
printf '   SDP over %-14s %8.2f Gbit/s   checksum ok\n' "$SDP_TRANSPORTS:" "$sdp_rate"
printf '   %-23s %8.2f Gbit/s   checksum ok\n' "kernel TCP:" "$tcp_rate"
awk -v s="$sdp_rate" -v t="$tcp_rate" 'BEGIN {
	if (t > 0) printf "   SDP / TCP:              %8.2f\n", s / t }'
echo
echo "(The software transport carries SDP over a TCP connection of its own: it"
echo " copies each byte twice more than kernel TCP, and wins only where SDP's"
echo " batching of writes pays; on RDMA hardware SDP bypasses the TCP/IP stack.)"
exit 0
