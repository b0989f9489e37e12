#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# rdma_compare.sh BUILDDIR [--device rxe|siw] [--duration SECONDS] [--sizes "64 4096 ..."]
#
# One soft RDMA device, four ways to move bytes over it, side by side in
# one run:
#
#   verbs    perftest: ib_send_bw (throughput) and ib_send_lat (latency),
#            raw RC sends on the device: the ceiling
#   SDP      bench/sock_bench (plain sockets) under LD_PRELOAD=libsdp.so,
#            policy "use sdp" for everything, transport ib
#   rsocket  the same sock_bench under rdma-core's librspreload.so
#   TCP      the same sock_bench on the kernel's TCP, same interface
#
# at each message size (default 64 B, 4 KiB, 64 KiB, 1 MiB): streaming
# throughput (Gbit/s; sock_bench writes SIZE-byte messages for --duration
# seconds) and one-way latency (microseconds, median; perftest's
# ib_send_lat reports half the round trip, so the sockets' ping-pong round
# trips are halved too), then ratios: SDP/verbs, SDP/rsocket, SDP/TCP.
#
# Evidence of the path taken: each run's column shows the packets the
# device sent (its hw_counters/sent_pkts) while it ran; the TCP column must
# show ~0 and the others not.  The SDP runs also check libsdp's log for
# "over ib".
#
# On a machine without an RDMA device the script re-runs itself inside the
# testbed guest (test/vm/run-in-vm --devices DEVICE).  Figures are printed,
# never judged: the exit status is 0 unless a run failed.
set -u

die() { echo "rdma_compare: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 BUILDDIR [--device rxe|siw] [--duration SEC] [--sizes LIST]"
builddir=$(cd "$1" && pwd) || die "no build directory $1"
shift
device=rxe duration=2 sizes="64 4096 65536 1048576"
while [ $# -gt 0 ]; do
	case $1 in
	--device) device=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--sizes) sizes=$2; shift 2 ;;
	*) die "unknown argument $1" ;;
	esac
done
case $duration in
'' | *[!0-9]* | 0) die "--duration takes whole seconds (perftest's -D does)" ;;
esac
srcdir=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${VM_NAME:-}" ]; then
	# On the host: into the guest, where the device exists.
	exec "$srcdir/test/vm/run-in-vm" --devices "$device" -- \
		bash "$srcdir/bench/rdma_compare.sh" "$builddir" --device "$device" \
		--duration "$duration" --sizes "$sizes"
fi

dev=${device}0
case $device in
rxe) addr=${VM_ADDR_RXE:-$VM_ADDR} ;;
siw) addr=${VM_ADDR_SIW:-$VM_ADDR} ;;
*) die "unknown device $device" ;;
esac
bench=$builddir/bench/sock_bench
libsdp=$builddir/.libs/libsdp.so
rspreload=
for f in /usr/lib/*/rsocket/librspreload.so /usr/lib/rsocket/librspreload.so; do
	[ -f "$f" ] && { rspreload=$f; break; }
done
[ -x "$bench" ] || die "$bench is missing: build $builddir first"
[ -f "$libsdp" ] || die "$libsdp is missing: build $builddir first"
[ -n "$rspreload" ] || die "librspreload.so not found (Debian package librdmacm1)"
command -v ib_send_bw >/dev/null || die "ib_send_bw not found (Debian package perftest)"
counter=/sys/class/infiniband/$dev/ports/1/hw_counters/sent_pkts
[ -r "$counter" ] || die "$dev has no $counter"

tmp=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
cat >"$tmp/sdp.conf" <<EOF
transport enable ib
use sdp server * *:*
use sdp client * *:*
log min-level 7 destination file $tmp/sdp.log
EOF

pkts() { cat "$counter"; }
port=18000
failures=0

# env_of COLUMN: the environment a sock_bench of that column runs with.
env_of() {
	case $1 in
	TCP) echo "" ;;
	SDP) echo "LD_PRELOAD=$libsdp LIBSDP_CONFIG_FILE=$tmp/sdp.conf SDP_TRANSPORTS=ib" ;;
	rsocket) echo "LD_PRELOAD=$rspreload" ;;
	esac
}

# sock_run COLUMN MODE SIZE ARG: one sock_bench measurement, server and
# client in this guest; prints sock_bench's result line, or nothing.
sock_run() {
	local col=$1 mode=$2 size=$3 arg=$4 out spid
	port=$((port + 1))
	: >"$tmp/sdp.log"
	# shellcheck disable=SC2046
	env $(env_of "$col") "$bench" serve "$addr" "$port" 2>"$tmp/serve.err" &
	spid=$!
	pids+=("$spid")
	# shellcheck disable=SC2046
	out=$(timeout 300 env $(env_of "$col") "$bench" "$mode" "$addr" "$port" "$size" "$arg" \
		2>"$tmp/client.err")
	local rc=$?
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	if [ $rc -ne 0 ] || [ -z "$out" ]; then
		echo "rdma_compare: $col $mode $size failed (exit $rc): $(cat "$tmp/client.err" "$tmp/serve.err")" >&2
		failures=$((failures + 1))
		return 1
	fi
	if [ "$col" = SDP ] && ! grep -q "over ib" "$tmp/sdp.log"; then
		echo "rdma_compare: SDP $mode $size did not run over ib: $(cat "$tmp/sdp.log")" >&2
		failures=$((failures + 1))
		return 1
	fi
	echo "$out"
}

# perftest SIDE-ARGS...: server then client of one perftest program.
perf_run() {
	local prog=$1
	shift
	port=$((port + 1))
	timeout 300 "$prog" -d "$dev" -p "$port" -F "$@" >"$tmp/perf.s" 2>&1 &
	local spid=$!
	pids+=("$spid")
	local i out=
	for i in $(seq 50); do
		sleep 0.2
		if timeout 300 "$prog" -d "$dev" -p "$port" -F "$@" "$addr" >"$tmp/perf.c" 2>&1; then
			out=ok
			break
		fi
		grep -q "Couldn't connect\|Unable to open file descriptor" "$tmp/perf.c" || break
	done
	wait "$spid" 2>/dev/null
	if [ -z "$out" ]; then
		echo "rdma_compare: $prog $* failed: $(tail -5 "$tmp/perf.c")" >&2
		failures=$((failures + 1))
		return 1
	fi
	# The result row starts with the message size.
	awk -v s="$size" '$1 == s { print; exit }' "$tmp/perf.c"
}

fmt() { [ -n "$1" ] && printf '%s' "$1" || printf -- '-'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

echo "rdma_compare: $dev on $addr ($(uname -r), $(nproc) vCPU, guest ${VM_NAME:-?}); ${duration}s per throughput point"
echo "rdma_compare: rsocket: $rspreload; libsdp: $libsdp"
echo
echo "Throughput, Gbit/s (device packets sent during the run in brackets)"
printf '%-9s %16s %16s %16s %16s   %9s %9s %9s\n' size verbs SDP rsocket TCP SDP/verbs SDP/rs SDP/TCP
for size in $sizes; do
	declare -A bw=() pk=()
	p0=$(pkts)
	# -D gives no average for big messages on a slow device: count them.
	if [ "$size" -ge 262144 ]; then
		line=$(perf_run ib_send_bw -s "$size" -n 100 --report_gbits)
	else
		line=$(perf_run ib_send_bw -s "$size" -D "$duration" --report_gbits)
	fi
	bw[verbs]=$(echo "$line" | awk '{ print $4 }')
	pk[verbs]=$(($(pkts) - p0))
	for col in SDP rsocket TCP; do
		p0=$(pkts)
		line=$(sock_run "$col" stream "$size" "$duration")
		bw[$col]=$(echo "$line" | awk '{ print $5 }')
		pk[$col]=$(($(pkts) - p0))
	done
	printf '%-9s %16s %16s %16s %16s   %9s %9s %9s\n' "$size" \
		"$(fmt "${bw[verbs]}") [${pk[verbs]}]" "$(fmt "${bw[SDP]}") [${pk[SDP]}]" \
		"$(fmt "${bw[rsocket]}") [${pk[rsocket]}]" "$(fmt "${bw[TCP]}") [${pk[TCP]}]" \
		"$(ratio "${bw[SDP]}" "${bw[verbs]}")" "$(ratio "${bw[SDP]}" "${bw[rsocket]}")" \
		"$(ratio "${bw[SDP]}" "${bw[TCP]}")"
done

echo
echo "Latency, one way (round trip / 2), microseconds, median (99th percentile)"
echo "(ratios: time divided by the other's time, lower is better for SDP)"
printf '%-9s %18s %18s %18s %18s   %9s %9s %9s\n' size verbs SDP rsocket TCP SDP/verbs SDP/rs SDP/TCP
for size in $sizes; do
	declare -A lat=() p99=()
	count=2000
	[ "$size" -ge 65536 ] && count=300
	[ "$size" -ge 1048576 ] && count=40
	line=$(perf_run ib_send_lat -s "$size" -n "$count")
	# ib_send_lat: bytes iters t_min t_max t_typical t_avg t_stdev 99% 99.9%
	lat[verbs]=$(echo "$line" | awk '{ print $5 }')
	p99[verbs]=$(echo "$line" | awk '{ print $8 }')
	for col in SDP rsocket TCP; do
		line=$(sock_run "$col" pingpong "$size" "$count")
		lat[$col]=$(echo "$line" | awk '$4 != "" { printf "%.2f", $4 / 2 }')
		p99[$col]=$(echo "$line" | awk '$5 != "" { printf "%.2f", $5 / 2 }')
	done
	printf '%-9s %18s %18s %18s %18s   %9s %9s %9s\n' "$size" \
		"$(fmt "${lat[verbs]}") ($(fmt "${p99[verbs]}"))" "$(fmt "${lat[SDP]}") ($(fmt "${p99[SDP]}"))" \
		"$(fmt "${lat[rsocket]}") ($(fmt "${p99[rsocket]}"))" "$(fmt "${lat[TCP]}") ($(fmt "${p99[TCP]}"))" \
		"$(ratio "${lat[SDP]}" "${lat[verbs]}")" "$(ratio "${lat[SDP]}" "${lat[rsocket]}")" \
		"$(ratio "${lat[SDP]}" "${lat[TCP]}")"
done
echo
if [ "$failures" -ne 0 ]; then
	echo "rdma_compare: $failures measurement(s) failed"
	exit 1
fi
exit 0
