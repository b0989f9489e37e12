#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# rdma_compare.sh BUILDDIR [--device rxe|siw] [--duration SECONDS] [--sizes "64 4096 ..."]
#                  [--zcopy | --no-zcopy] [--zcopy-sizes "65536 ..."] [--rr-sizes "65536 ..."]
#                  [--quick]
#
# One soft RDMA device, four ways to move bytes over it, side by side in
# one run:
#
#   verbs    perftest: ib_send_bw (throughput) and ib_send_lat (latency),
#            raw RC sends on the device: the ceiling
#   SDP      bench/sock_bench (plain sockets) under LD_PRELOAD=libsdp.so,
#            policy "use sdp" for everything, transport ib (iwarp on siw), default
#            tunables (Read Zcopy for writes of 64 KiB and more)
#   rsocket  the same sock_bench under rdma-core's librspreload.so
#   TCP      the same sock_bench on the kernel's TCP, same interface
#
# at each message size (default 64 B, 4 KiB, 64 KiB, 1 MiB): streaming
# throughput (Gbit/s; sock_bench writes SIZE-byte messages for --duration
# seconds) and one-way latency (microseconds, median; perftest's
# ib_send_lat reports half the round trip, so the sockets' ping-pong round
# trips are halved too), then ratios: SDP/verbs, SDP/rsocket, SDP/TCP.
#
# Then zero copy against Bcopy, at 64 KiB to 16 MiB (--zcopy-sizes), with
# the receiver reading with a buffer as large as the write (sock_bench
# bulk), so that a zero-copy read can land straight in it (and its recv()
# may advertise it for the sender to RDMA-write into):
#
#   verbs    perftest's ib_read_bw: RDMA reads, what a zero-copy receive
#            does, on the device: the ceiling
#   Bcopy    sock_bench under libsdp.so with SDP_ZCOPY_THRESH=0
#   Zcopy    the same with SDP_ZCOPY_THRESH=65536
#   rsocket  sock_bench under librspreload.so
#   TCP      sock_bench on the kernel's TCP
#
# throughput (Gbit/s) and CPU time per GiB moved: user + sys of the sending
# and the receiving process together, measured by sock_bench itself around
# the transfer (getrusage, the preload's threads included), and in brackets
# the whole guest's busy time over the same span (/proc/stat), which also
# counts the soft device's kernel work that no process is charged for.
# perftest reports no CPU time of its own: its processes' CPU time and the
# guest's busy time are sampled from /proc every 0.1 s, over the span in
# which the device sent packets, so that perftest's start-up, which grows
# with the message size under emulation, is left out.  Ratios:
# Zcopy/Bcopy, Zcopy/rsocket, Zcopy/verbs, of both.
#
# Then request/response at 64 KiB, 256 KiB and 1 MiB replies (--rr-sizes):
# sock_bench rr, a 64-byte request answered by a reply of SIZE that the
# client reads whole with recv(MSG_WAITALL) into a buffer of its size, a
# counted number of turns (1000, 400, 150 by size, after a tenth more
# unmeasured), for
#
#   Bcopy    libsdp with SDP_ZCOPY_THRESH=0
#   Zcopy    SDP_ZCOPY_THRESH=65536 and SDP_TRANS_HOLD_US=0: zero copy (the
#            reply RDMA-read, or RDMA-written into the recv()'s advertised
#            buffer once the reply direction is Pipelined), no Transaction
#   Trans    SDP_ZCOPY_THRESH=65536 and the engine's default hold: the
#            request rides on the recv()'s SinkAvail, the reply is
#            RDMA-written into its buffer
#   rsocket  sock_bench under librspreload.so
#   TCP      sock_bench on the kernel's TCP
#
# turns per second, turn latency (median and 99th percentile of request
# sent to reply read), CPU microseconds per turn (both processes; in
# brackets the guest's busy time), ratios Zcopy/Bcopy, Trans/Bcopy,
# Trans/rsocket, Trans/TCP, and from both ends' libsdp counters (sdpstat,
# read while the client waits on SOCK_BENCH_HOLD) the path the turns took:
# requests carried on the SinkAvail, held requests that went alone, adverts,
# reply bytes RDMA-written and RDMA-read, mode changes.
#
# --zcopy runs only the zero-copy parts (about 6½ minutes), --no-zcopy only
# the two first ones.  --quick: 1 s per throughput point, fewer sizes (64 B
# and 64 KiB; 64 KiB and 1 MiB for the zero-copy parts) and a fifth of the
# request/response turns.
#
# Evidence of the path taken: each run's column shows the packets the
# device sent (its hw_counters/sent_pkts) while it ran; the TCP column must
# show ~0 and the others not.  (siw has no such counter: there the loopback
# device's packets are counted, the TCP column's too.)  The SDP runs also
# check libsdp's log for "over ib" ("over iwarp" on siw).  The zero-copy table ends with the shares of the bytes that the
# receiver RDMA-read and that the sender RDMA-wrote into its advertised
# buffers, from its libsdp counters (tools/sdpstat): ~0 under Bcopy, adding
# up to ~100 % under Zcopy if zero copy was really used.
#
# On a machine without an RDMA device the script re-runs itself inside the
# testbed guest (test/vm/run-in-vm --devices DEVICE).  Figures are printed,
# never judged: the exit status is 0 unless a run failed.
set -u

die() { echo "rdma_compare: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 BUILDDIR [--device rxe|siw] [--duration SEC] [--sizes LIST] [--zcopy | --no-zcopy] [--zcopy-sizes LIST] [--rr-sizes LIST] [--quick]"
builddir=$(cd "$1" && pwd) || die "no build directory $1"
shift
# Empty: not given, the defaults (or --quick's) below.
device=rxe duration='' sizes='' zc_sizes='' rr_sizes='' quick=
# parts: "base" (throughput and latency), "zcopy", or both.
parts="base zcopy"
while [ $# -gt 0 ]; do
	case $1 in
	--device) device=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--sizes) sizes=$2; shift 2 ;;
	--zcopy) parts=zcopy; shift ;;
	--no-zcopy) parts=base; shift ;;
	--zcopy-sizes) zc_sizes=$2; shift 2 ;;
	--rr-sizes) rr_sizes=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	*) die "unknown argument $1" ;;
	esac
done
if [ -n "$quick" ]; then
	: "${duration:=1}" "${sizes:=64 65536}" "${zc_sizes:=65536 1048576}" "${rr_sizes:=65536 1048576}"
else
	: "${duration:=2}" "${sizes:=64 4096 65536 1048576}"
	: "${zc_sizes:=65536 262144 1048576 4194304 16777216}" "${rr_sizes:=65536 262144 1048576}"
fi
for s in $rr_sizes; do
	case $s in '' | *[!0-9]*) die "--rr-sizes takes sizes in bytes" ;; esac
	[ "$s" -ge 16 ] || die "--rr-sizes: a reply is 16 bytes at least"
done
case $duration in
'' | *[!0-9]* | 0) die "--duration takes whole seconds (perftest's -D does)" ;;
esac
srcdir=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${VM_NAME:-}" ]; then
	# On the host: into the guest, where the device exists.
	part_arg=
	[ "$parts" = zcopy ] && part_arg=--zcopy
	[ "$parts" = base ] && part_arg=--no-zcopy
	exec "$srcdir/test/vm/run-in-vm" --devices "$device" -- \
		bash "$srcdir/bench/rdma_compare.sh" "$builddir" --device "$device" \
		--duration "$duration" --sizes "$sizes" --zcopy-sizes "$zc_sizes" \
		--rr-sizes "$rr_sizes" $part_arg ${quick:+--quick}
fi

dev=${device}0
# perftest connects through rdma_cm (-R) on iWARP, which has no other way.
case $device in
rxe) addr=${VM_ADDR_RXE:-$VM_ADDR} transport=ib perf_cm=() ;;
siw) addr=${VM_ADDR_SIW:-$VM_ADDR} transport=iwarp perf_cm=(-R) ;;
*) die "unknown device $device" ;;
esac
bench=$builddir/bench/sock_bench
sdpstat=$builddir/tools/sdpstat
libsdp=$builddir/.libs/libsdp.so
rspreload=
for f in /usr/lib/*/rsocket/librspreload.so /usr/lib/rsocket/librspreload.so; do
	[ -f "$f" ] && { rspreload=$f; break; }
done
[ -x "$bench" ] || die "$bench is missing: build $builddir first"
[ -f "$libsdp" ] || die "$libsdp is missing: build $builddir first"
[ -x "$sdpstat" ] || die "$sdpstat is missing: build $builddir first"
[ -n "$rspreload" ] || die "librspreload.so not found (Debian package librdmacm1)"
for p in ib_send_bw ib_send_lat ib_read_bw; do
	command -v $p >/dev/null || die "$p not found (Debian package perftest)"
done
counter=/sys/class/infiniband/$dev/ports/1/hw_counters/sent_pkts
# siw has no such counter, and its packets are the kernel's TCP segments,
# which go over the loopback device between two processes of the guest:
# there the packets counted are the loopback device's, the TCP column's
# included, and the evidence of the path is libsdp's log ("over iwarp").
if [ "$device" = siw ]; then
	counter=/sys/class/net/lo/statistics/tx_packets
fi
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
transport enable $transport
use sdp server * *:*
use sdp client * *:*
log min-level 7 destination file $tmp/sdp.log
EOF
mkdir "$tmp/stats"

pkts() { cat "$counter"; }
port=18000
# The runs happen in command substitutions (subshells): a failure is a
# line in this file, counted at the end.
failed() { echo "$*" >>"$tmp/failures"; }

# env_of COLUMN: the environment a sock_bench of that column runs with.
env_of() {
	case $1 in
	TCP) echo "" ;;
	SDP) echo "LD_PRELOAD=$libsdp LIBSDP_CONFIG_FILE=$tmp/sdp.conf SDP_TRANSPORTS=$transport SDP_STATS_DIR=$tmp/stats" ;;
	Bcopy) echo "$(env_of SDP) SDP_ZCOPY_THRESH=0" ;;
	Zcopy) echo "$(env_of SDP) SDP_ZCOPY_THRESH=65536" ;;
	# request/response: zero copy without, and with, Transaction mode
	# (the engine's default hold, whatever the caller's environment says;
	# env's -u goes before the assignments)
	ZcopyNT) echo "$(env_of SDP) SDP_ZCOPY_THRESH=65536 SDP_TRANS_HOLD_US=0" ;;
	Trans) echo "-u SDP_TRANS_HOLD_US $(env_of SDP) SDP_ZCOPY_THRESH=65536" ;;
	rsocket) echo "LD_PRELOAD=$rspreload" ;;
	esac
}

# sock_run COLUMN MODE SIZE ARG: one sock_bench measurement, server and
# client in this guest; prints sock_bench's result line, or nothing.  An
# SDP bulk run's line gets three more fields: the bytes the server (the
# receiver) RDMA-read, of those the bytes read straight into its buffer,
# and the bytes the client RDMA-wrote into its advertised buffers (Write
# Zcopy), from its libsdp counters (sdpstat), or "- - -".
sock_run() {
	local col=$1 mode=$2 size=$3 arg=$4 out spid sdp json k v zc
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
	case $col in SDP | Bcopy | Zcopy) sdp=1 ;; *) sdp= ;; esac
	if [ -n "$sdp" ] && [ "$mode" = bulk ] && [ $rc -eq 0 ]; then
		# The server is still alive, its counters brought up to date
		# after its last read.
		json=$(SDP_STATS_DIR=$tmp/stats "$sdpstat" -p "$spid" -c -a --json 2>/dev/null)
		zc=
		for k in zcopy_bytes_received zcopy_direct_bytes zcopy_sink_bytes; do
			v=$(jget "$k" "$json")
			zc="$zc ${v:--}"
		done
		out="$out$zc"
	fi
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	run_ok "$col $mode $size" "$rc" "$out" "$sdp" || return 1
	echo "$out"
}

# run_ok WHAT RC OUTPUT SDP: did a sock_bench run succeed (exit 0, some
# output) and, for an SDP column (SDP not empty), run over the transport?
# Says why not, and counts the failure.
run_ok() {
	local why=''
	if [ "$2" -ne 0 ] || [ -z "$3" ]; then
		why="failed (exit $2): $(cat "$tmp/client.err" "$tmp/serve.err")"
	elif [ -n "$4" ] && ! grep -q "over $transport" "$tmp/sdp.log"; then
		why="did not run over $transport: $(cat "$tmp/sdp.log")"
	fi
	[ -z "$why" ] && return 0
	echo "rdma_compare: $1 $why" >&2
	failed "$1"
	return 1
}

# jget KEY JSON: a counter of sdpstat's JSON, or nothing.
jget() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$2"; }

# rr_run COLUMN SIZE COUNT: one sock_bench rr measurement, server and client
# in this guest; prints sock_bench's line
#   rr SIZE COUNT P50_US P99_US MEAN_US CLIENT_CPU_S SERVER_CPU_S BUSY_S SECONDS MAX_US
# and for the SDP columns eight more fields, from the libsdp counters of the
# client (held alive by SOCK_BENCH_HOLD until they are read) and of the
# server, over the whole connection (the unmeasured turns too): the
# client's requests carried on a SinkAvail, held requests that went alone,
# SinkAvails, stale ones, bytes it RDMA-read, mode changes it sent and
# received; the server's bytes RDMA-written; or "-" each.  Nothing if the
# run failed.
rr_run() {
	local col=$1 size=$2 count=$3 spid cpid wfd line='' cc='' sc='' sdp='' rc k extra='' v
	port=$((port + 1))
	: >"$tmp/sdp.log"
	case $col in Bcopy | ZcopyNT | Trans) sdp=1 ;; esac
	# shellcheck disable=SC2046
	env $(env_of "$col") "$bench" serve "$addr" "$port" 2>"$tmp/serve.err" &
	spid=$!
	pids+=("$spid")
	# shellcheck disable=SC2046
	coproc RR { exec env $(env_of "$col") SOCK_BENCH_HOLD=1 "$bench" rr "$addr" "$port" \
		"$size" "$count" 2>"$tmp/client.err"; }
	cpid=$RR_PID
	wfd=${RR[1]}
	pids+=("$cpid")
	read -r -t 300 line <&"${RR[0]}"
	if [ -n "$line" ] && [ -n "$sdp" ]; then
		cc=$(SDP_STATS_DIR=$tmp/stats "$sdpstat" -p "$cpid" -c -a --json 2>/dev/null)
		sc=$(SDP_STATS_DIR=$tmp/stats "$sdpstat" -p "$spid" -c -a --json 2>/dev/null)
		for k in trans_piggybacks trans_misses zcopy_sink_adverts zcopy_sink_stale \
			zcopy_bytes_received mode_changes_sent mode_changes_received; do
			v=$(jget "$k" "$cc")
			extra="$extra ${v:--}"
		done
		v=$(jget zcopy_bytes_written "$sc")
		extra="$extra ${v:--}"
	fi
	# EOF on its stdin: the client goes.
	exec {wfd}>&-
	[ -z "$line" ] && kill "$cpid" 2>/dev/null
	wait "$cpid"
	rc=$?
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	run_ok "$col rr $size" "$rc" "$line" "$sdp" || return 1
	echo "$line$extra"
}

# Busy CPU ticks of the whole guest (every CPU, not idle, not iowait):
# what the soft device's kernel work costs too, which no process is
# charged for.  Sets busy.
busy_ticks() {
	local u n sy irq sirq st
	# cpu user nice system idle iowait irq softirq steal ...
	read -r _ u n sy _ _ irq sirq st _ </proc/stat
	busy=$((u + n + sy + irq + sirq + st))
}

# sample_transfer CPID SPID: CPID and SPID run perftest's client and
# server (under timeout).  Until the client is gone, every 0.1 s: the
# device's sent packets, the CPU ticks of both perftest processes and the
# guest's busy ticks, all read without a fork.  Prints "PROC_S BUSY_S
# SHARE WALL_S": the processes' CPU seconds, the guest's busy seconds and
# the seconds from the first to the last sample that saw packets go out,
# and the share of the run's packets sent in between, by which the bytes
# are scaled: the
# transfer alone, without perftest's start-up and teardown (which under
# emulation took 5 s of an 8 s run with 16 MiB messages).
sample_transfer() {
	local c=$1 s=$2 cp='' sp='' fd p p0 plast t st cpu busy up first='' last=''
	# A pipe nobody writes: read -t on it is a sleep without a fork.
	exec {fd}<> <(:)
	read -r p0 <"$counter"
	plast=$p0
	# Until the client is gone or a zombie (field 3: state).
	# (2> before <: a redirection that fails is reported before the next.)
	while read -r -a st 2>/dev/null <"/proc/$c/stat" && [ "${st[2]}" != Z ]; do
		[ -z "$cp" ] && read -r cp _ 2>/dev/null <"/proc/$c/task/$c/children"
		[ -z "$sp" ] && read -r sp _ 2>/dev/null <"/proc/$s/task/$s/children"
		read -r p <"$counter"
		cpu=0
		for t in $cp $sp; do
			# Fields 14 and 15: utime, stime (the comm field has no space).
			read -r -a st 2>/dev/null <"/proc/$t/stat" && cpu=$((cpu + st[13] + st[14]))
		done
		busy_ticks
		read -r up _ </proc/uptime
		if [ "$p" != "$plast" ]; then
			[ -z "$first" ] && first="$cpu $busy $p $up"
			last="$cpu $busy $p $up"
			plast=$p
		fi
		read -rt 0.1 -u "$fd"
	done
	exec {fd}>&-
	read -r p <"$counter"
	[ -n "$first" ] && awk -v hz="$(getconf CLK_TCK)" -v p0="$p0" -v p="$p" \
		'BEGIN { getline; split($0, f); getline; split($0, l)
		if (l[3] == f[3] || p == p0) exit
		printf "%.3f %.3f %.4f %.2f\n", (l[1] - f[1]) / hz, (l[2] - f[2]) / hz,
			(l[3] - f[3]) / (p - p0), l[4] - f[4] }' \
		<<<"$first
$last"
}

# perf_run [--sample] PROG ARGS...: server then client of one perftest
# program; prints the client's result row.  With --sample, leaves
# sample_transfer's figures in $tmp/perf.cpu (empty if it had none).
perf_run() {
	local sample='' prog
	[ "$1" = --sample ] && sample=1 && shift
	prog=$1
	shift
	port=$((port + 1))
	timeout 300 "$prog" -d "$dev" -p "$port" -F "${perf_cm[@]}" "$@" >"$tmp/perf.s" 2>&1 &
	local spid=$!
	pids+=("$spid")
	local i out='' cpid
	: >"$tmp/perf.cpu"
	for i in $(seq 50); do
		sleep 0.2
		timeout 300 "$prog" -d "$dev" -p "$port" -F "${perf_cm[@]}" "$@" "$addr" >"$tmp/perf.c" 2>&1 &
		cpid=$!
		[ -n "$sample" ] && sample_transfer "$cpid" "$spid" >"$tmp/perf.cpu"
		if wait "$cpid"; then
			out=ok
			break
		fi
		grep -q "Couldn't connect\|Unable to open file descriptor" "$tmp/perf.c" || break
	done
	wait "$spid" 2>/dev/null
	if [ -z "$out" ]; then
		echo "rdma_compare: $prog $* failed: $(tail -5 "$tmp/perf.c")" >&2
		failed "$prog $*"
		return 1
	fi
	# The result row starts with the message size.
	awk -v s="$size" '$1 == s { print; exit }' "$tmp/perf.c"
}

fmt() { [ -n "$1" ] && printf '%s' "$1" || printf -- '-'; }
# "CPU [guest busy]" of one run, cpu[KEY] and gcpu[KEY] of the caller's tables.
cpu_cell() { printf '%s [%s]' "$(fmt "${cpu[$1]}")" "$(fmt "${gcpu[$1]}")"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

base_tables() {
	echo
	echo "Throughput, Gbit/s (device packets sent during the run in brackets)"
	printf '%-9s %16s %16s %16s %16s   %9s %9s %9s\n' size verbs SDP rsocket TCP SDP/verbs SDP/rs SDP/TCP
	local size line col p0 count
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
}

# cpu_per_gib SECONDS BYTES
cpu_per_gib() {
	awk -v c="$1" -v b="$2" 'BEGIN { if (c == "" || b + 0 <= 0) exit; printf "%.2f", c / (b / 1073741824) }'
}

# The zero-copy table.  perftest runs a counted number of reads (so that
# the bytes its CPU time is divided by are known), as many as the rate of
# the previous point says fill about --duration seconds, and at least
# 64 MiB, so that the 0.1 s samples see a few seconds of transfer; its CPU
# time is sampled over the transfer alone (sample_transfer).
zcopy_table() {
	local size line col p0 iters rate='' f moved starred=''
	declare -A bw=() cpu=() gcpu=() pk=() zread=() zdirect=() zwritten=()
	echo
	echo "Zero copy vs Bcopy: streaming, the receiver reads with a buffer as large as the write"
	echo "(verbs: ib_read_bw, RDMA reads, what a zero-copy receive does; Bcopy: libsdp with"
	echo "SDP_ZCOPY_THRESH=0, Zcopy: SDP_ZCOPY_THRESH=65536; device packets sent during the"
	echo "run in brackets)"
	echo
	echo "Throughput, Gbit/s"
	printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s\n' size verbs Bcopy Zcopy rsocket TCP \
		Z/B Z/rs Z/verbs
	for size in $zc_sizes; do
		iters=$(awk -v r="${rate:-0}" -v d="$duration" -v s="$size" 'BEGIN {
			b = r * 1e9 / 8 * d; if (b < 67108864) b = 67108864
			n = int(b / s); print (n < 5 ? 5 : (n > 100000 ? 100000 : n)) }')
		p0=$(pkts)
		line=$(perf_run --sample ib_read_bw -s "$size" -n "$iters" --report_gbits)
		pk[verbs]=$(($(pkts) - p0))
		bw[verbs]=$(echo "$line" | awk '{ print $4 }')
		cpu[verbs:$size]=''
		gcpu[verbs:$size]=''
		# PROC_S BUSY_S SHARE WALL_S, over the transfer
		read -r -a f <"$tmp/perf.cpu"
		if [ -n "$line" ] && [ ${#f[@]} -eq 4 ]; then
			moved=$(awk -v b="$((iters * size))" -v s="${f[2]}" 'BEGIN { print b * s }')
			cpu[verbs:$size]=$(cpu_per_gib "${f[0]}" "$moved")
			gcpu[verbs:$size]=$(cpu_per_gib "${f[1]}" "$moved")
			# Under emulation perftest's clock now and then reports 0.
			if awk -v b="${bw[verbs]}" 'BEGIN { exit !(b == 0) }'; then
				bw[verbs]=$(awk -v m="$moved" -v t="${f[3]}" \
					'BEGIN { if (t > 0) printf "%.2f*", m * 8 / t / 1e9 }')
				starred=1
			fi
		fi
		awk -v b="${bw[verbs]%\*}" 'BEGIN { exit !(b > 0) }' && rate=${bw[verbs]%\*}
		for col in Bcopy Zcopy rsocket TCP; do
			p0=$(pkts)
			line=$(sock_run "$col" bulk "$size" "$duration")
			# bulk SIZE BYTES SECONDS GBIT_S CLIENT_CPU_S SERVER_CPU_S BUSY_S
			# [ZC_READ_BYTES ZC_DIRECT_BYTES ZC_WRITTEN_BYTES]
			bw[$col]=$(echo "$line" | awk '{ print $5 }')
			zread[$col:$size]=$(echo "$line" | awk '$9 ~ /^[0-9]+$/ { printf "%.1f %%", 100 * $9 / $3 }')
			zdirect[$col:$size]=$(echo "$line" | awk '$9 > 0 && $10 ~ /^[0-9]+$/ { printf "%.1f %%", 100 * $10 / $9 }')
			zwritten[$col:$size]=$(echo "$line" | awk '$11 ~ /^[0-9]+$/ { printf "%.1f %%", 100 * $11 / $3 }')
			cpu[$col:$size]=$(cpu_per_gib "$(echo "$line" | awk '$7 != "" { print $6 + $7 }')" \
				"$(echo "$line" | awk '{ print $3 }')")
			gcpu[$col:$size]=$(cpu_per_gib "$(echo "$line" | awk '$8 >= 0 { print $8 }')" \
				"$(echo "$line" | awk '{ print $3 }')")
			pk[$col]=$(($(pkts) - p0))
		done
		printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s\n' "$size" \
			"$(fmt "${bw[verbs]}") [${pk[verbs]}]" "$(fmt "${bw[Bcopy]}") [${pk[Bcopy]}]" \
			"$(fmt "${bw[Zcopy]}") [${pk[Zcopy]}]" "$(fmt "${bw[rsocket]}") [${pk[rsocket]}]" \
			"$(fmt "${bw[TCP]}") [${pk[TCP]}]" \
			"$(ratio "${bw[Zcopy]}" "${bw[Bcopy]}")" "$(ratio "${bw[Zcopy]}" "${bw[rsocket]}")" \
			"$(ratio "${bw[Zcopy]}" "${bw[verbs]%\*}")"
	done
	[ -n "$starred" ] && echo "(*: perftest reported 0 Gbit/s; the figure is the bytes over the sampled span)"
	echo
	echo "CPU time per GiB moved, seconds: user + sys of sender and receiver together"
	echo "(in brackets: the whole guest's busy time over the transfer, the soft device's kernel"
	echo "work included; verbs: both perftest processes and the guest, sampled every 0.1 s"
	echo "while the device sent packets; ratios of the first figure, lower is better for Zcopy)"
	printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s\n' size verbs Bcopy Zcopy rsocket TCP \
		Z/B Z/rs Z/verbs
	for size in $zc_sizes; do
		printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s\n' "$size" \
			"$(cpu_cell "verbs:$size")" \
			"$(cpu_cell "Bcopy:$size")" \
			"$(cpu_cell "Zcopy:$size")" \
			"$(cpu_cell "rsocket:$size")" \
			"$(cpu_cell "TCP:$size")" \
			"$(ratio "${cpu[Zcopy:$size]}" "${cpu[Bcopy:$size]}")" \
			"$(ratio "${cpu[Zcopy:$size]}" "${cpu[rsocket:$size]}")" \
			"$(ratio "${cpu[Zcopy:$size]}" "${cpu[verbs:$size]}")"
	done
	echo
	echo "Zero copy used: of the bytes the receiver got, those it RDMA-read (Read Zcopy; and"
	echo "of those the part read straight into the application's buffer) and those the sender"
	echo "RDMA-wrote into the receiver's advertised buffer (Write Zcopy, once the receiver asked"
	echo "for Pipelined mode) (the receiver's libsdp counters, via sdpstat)"
	printf '%-9s %12s %14s %12s %14s %14s\n' size "Bcopy read" "Bcopy written" "Zcopy read" \
		"Zcopy direct" "Zcopy written"
	for size in $zc_sizes; do
		printf '%-9s %12s %14s %12s %14s %14s\n' "$size" "$(fmt "${zread[Bcopy:$size]}")" \
			"$(fmt "${zwritten[Bcopy:$size]}")" "$(fmt "${zread[Zcopy:$size]}")" \
			"$(fmt "${zdirect[Zcopy:$size]}")" "$(fmt "${zwritten[Zcopy:$size]}")"
	done
}

# Turns of one request/response run: about as long for each size under
# emulation.
rr_count() {
	local n=150
	if [ "$1" -le 65536 ]; then n=1000; elif [ "$1" -le 262144 ]; then n=400; fi
	[ -n "$quick" ] && n=$((n / 5))
	echo "$n"
}

rr_table() {
	local size col line count p0 f
	local cols="Bcopy ZcopyNT Trans rsocket TCP"
	declare -A tps=() p50=() p99=() mean=() cpu=() gcpu=() pk=() ctr=()
	echo
	echo "Request/response: a 64-byte request, a reply of SIZE bytes read whole by recv(MSG_WAITALL)"
	echo "into a buffer of its size (Bcopy: libsdp with SDP_ZCOPY_THRESH=0; Zcopy:"
	echo "SDP_ZCOPY_THRESH=65536 and SDP_TRANS_HOLD_US=0, no Transaction mode; Trans:"
	echo "SDP_ZCOPY_THRESH=65536, Transaction mode with the engine's default hold; turns: 1000,"
	echo "400, 150 by size$([ -n "$quick" ] && echo ", a fifth of it (--quick)"), after a tenth more unmeasured)"
	echo
	echo "Turns per second (device packets sent during the run in brackets)"
	printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s %7s\n' size Bcopy Zcopy Trans rsocket TCP \
		Z/B T/B T/rs T/TCP
	for size in $rr_sizes; do
		count=$(rr_count "$size")
		for col in $cols; do
			p0=$(pkts)
			line=$(rr_run "$col" "$size" "$count")
			pk[$col:$size]=$(($(pkts) - p0))
			# rr SIZE COUNT P50 P99 MEAN CCPU SCPU BUSY SECS MAX [8 counters]
			read -r -a f <<<"$line"
			tps[$col:$size]='' p50[$col:$size]='' p99[$col:$size]='' mean[$col:$size]=''
			cpu[$col:$size]='' gcpu[$col:$size]='' ctr[$col:$size]=''
			[ ${#f[@]} -ge 11 ] || continue
			tps[$col:$size]=$(awk -v n="${f[2]}" -v t="${f[9]}" 'BEGIN { if (t > 0) printf "%.0f", n / t }')
			p50[$col:$size]=${f[3]} p99[$col:$size]=${f[4]} mean[$col:$size]=${f[5]}
			cpu[$col:$size]=$(awk -v n="${f[2]}" -v c="${f[6]}" -v s="${f[7]}" \
				'BEGIN { printf "%.0f", (c + s) * 1e6 / n }')
			gcpu[$col:$size]=$(awk -v n="${f[2]}" -v b="${f[8]}" \
				'BEGIN { if (b >= 0) printf "%.0f", b * 1e6 / n }')
			# turns (all), max, then the counters
			[ ${#f[@]} -ge 19 ] && ctr[$col:$size]="$((f[2] + f[2] / 10 + 1)) ${f[10]} ${f[*]:11:8}"
		done
		printf '%-9s %15s %15s %15s %15s %15s   %7s %7s %7s %7s\n' "$size" \
			"$(fmt "${tps[Bcopy:$size]}") [${pk[Bcopy:$size]}]" \
			"$(fmt "${tps[ZcopyNT:$size]}") [${pk[ZcopyNT:$size]}]" \
			"$(fmt "${tps[Trans:$size]}") [${pk[Trans:$size]}]" \
			"$(fmt "${tps[rsocket:$size]}") [${pk[rsocket:$size]}]" \
			"$(fmt "${tps[TCP:$size]}") [${pk[TCP:$size]}]" \
			"$(ratio "${tps[ZcopyNT:$size]}" "${tps[Bcopy:$size]}")" \
			"$(ratio "${tps[Trans:$size]}" "${tps[Bcopy:$size]}")" \
			"$(ratio "${tps[Trans:$size]}" "${tps[rsocket:$size]}")" \
			"$(ratio "${tps[Trans:$size]}" "${tps[TCP:$size]}")"
	done
	echo
	echo "Turn latency, microseconds: median (99th percentile), mean; ratios of the medians,"
	echo "lower is better for the first"
	printf '%-9s %24s %24s %24s %24s %24s   %7s %7s %7s %7s\n' size Bcopy Zcopy Trans rsocket TCP \
		Z/B T/B T/rs T/TCP
	for size in $rr_sizes; do
		local cell=()
		for col in $cols; do
			if [ -n "${p50[$col:$size]}" ]; then
				cell+=("$(printf '%.0f (%.0f) %.0f' "${p50[$col:$size]}" "${p99[$col:$size]}" "${mean[$col:$size]}")")
			else
				cell+=(-)
			fi
		done
		printf '%-9s %24s %24s %24s %24s %24s   %7s %7s %7s %7s\n' "$size" "${cell[@]}" \
			"$(ratio "${p50[ZcopyNT:$size]}" "${p50[Bcopy:$size]}")" \
			"$(ratio "${p50[Trans:$size]}" "${p50[Bcopy:$size]}")" \
			"$(ratio "${p50[Trans:$size]}" "${p50[rsocket:$size]}")" \
			"$(ratio "${p50[Trans:$size]}" "${p50[TCP:$size]}")"
	done
	echo
	echo "CPU time per turn, microseconds: user + sys of client and server together (in"
	echo "brackets: the whole guest's busy time over the turns); ratios of the first figure"
	printf '%-9s %17s %17s %17s %17s %17s   %7s %7s %7s %7s\n' size Bcopy Zcopy Trans rsocket TCP \
		Z/B T/B T/rs T/TCP
	for size in $rr_sizes; do
		printf '%-9s %17s %17s %17s %17s %17s   %7s %7s %7s %7s\n' "$size" \
			"$(cpu_cell "Bcopy:$size")" \
			"$(cpu_cell "ZcopyNT:$size")" \
			"$(cpu_cell "Trans:$size")" \
			"$(cpu_cell "rsocket:$size")" \
			"$(cpu_cell "TCP:$size")" \
			"$(ratio "${cpu[ZcopyNT:$size]}" "${cpu[Bcopy:$size]}")" \
			"$(ratio "${cpu[Trans:$size]}" "${cpu[Bcopy:$size]}")" \
			"$(ratio "${cpu[Trans:$size]}" "${cpu[rsocket:$size]}")" \
			"$(ratio "${cpu[Trans:$size]}" "${cpu[TCP:$size]}")"
	done
	echo
	echo "The path the turns took (libsdp counters over the whole connection, unmeasured turns"
	echo "included: the client's requests carried on a SinkAvail, held requests that went alone,"
	echo "SinkAvails, stale ones; of the reply bytes, those the server RDMA-wrote and those the"
	echo "client RDMA-read; mode changes the client sent / received; the slowest measured turn)"
	printf '%-9s %-6s %6s %9s %6s %8s %6s %8s %8s %7s %8s\n' size mode turns piggyback miss adverts \
		stale written read modes "max us"
	for size in $rr_sizes; do
		for col in Bcopy ZcopyNT Trans; do
			local label=$col
			[ "$col" = ZcopyNT ] && label=Zcopy
			read -r -a f <<<"${ctr[$col:$size]}"
			if [ ${#f[@]} -lt 10 ]; then
				printf '%-9s %-6s %s\n' "$size" "$label" -
				continue
			fi
			# turns max piggy miss adverts stale read msent mrecv written
			printf '%-9s %-6s %6s %9s %6s %8s %6s %8s %8s %7s %8.0f\n' "$size" "$label" "${f[0]}" \
				"${f[2]}" "${f[3]}" "${f[4]}" "${f[5]}" \
				"$(awk -v b="${f[9]}" -v t="$((f[0] * size))" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.1f %%", 100 * b / t; else print "-" }')" \
				"$(awk -v b="${f[6]}" -v t="$((f[0] * size))" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.1f %%", 100 * b / t; else print "-" }')" \
				"${f[7]}/${f[8]}" "${f[1]}"
		done
	done
}

echo "rdma_compare: $dev on $addr ($(uname -r), $(nproc) vCPU, guest ${VM_NAME:-?}); ${duration}s per throughput point"
echo "rdma_compare: rsocket: $rspreload; libsdp: $libsdp"
case " $parts " in *" base "*) base_tables ;; esac
case " $parts " in *" zcopy "*) zcopy_table; rr_table ;; esac
echo
if [ -s "$tmp/failures" ]; then
	echo "rdma_compare: $(wc -l <"$tmp/failures") measurement(s) failed: $(tr '\n' ';' <"$tmp/failures")"
	exit 1
fi
exit 0
