#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# apps_compare.sh BUILDDIR [--quick] [--reps N] [--host ADDR] [--transport NAME]
#
# Unmodified programs, side by side in one run: each measure over the
# kernel's TCP (nothing preloaded) and over SDP (both ends started with
# LD_PRELOAD=libsdp.so and "use both" rules), alternating, REPS times (3;
# --quick: 1, shorter runs).  It prints the median and the spread of each
# and SDP/TCP; it never passes or fails on the figures (the exit status is
# 0 unless a program failed to run).  On the software transport SDP runs
# over the kernel's TCP itself: these figures show what SDP costs on top
# of its transport, not RDMA speeds (bench/rdma_compare.sh runs on rxe and
# siw in the guest).  --transport shm runs the SDP side over the
# shared-memory transport instead (one host; issue 20's figures).
#
# The measures (a program that is not installed is skipped, said so):
#   sockperf 64 B        sockperf ping-pong, 64-byte messages: one-way
#                        latency, average and median, microseconds
#   redis GET c50        redis-benchmark -t get with 50 clients: requests/s
#   redis GET c1000      the same with 1000 clients
#   conn rate            connections per second, one after another, each
#                        connect + 1 byte + close (bench/preload_cost)
#   first connect        the first connect() of a fresh process, ms: with
#                        the preload it includes starting the SDP engine
#                        and its transport
#   iperf3               iperf3 -c for the sockperf time: Gbit/s, and the
#                        CPU seconds per GiB moved of both ends, from
#                        iperf3's own CPU report (user + system)
#
# Where the bytes went: the table's last column counts, for each SDP run,
# the connections its server accepted over SDP and over the kernel's TCP
# (its sdpstat counters, read before and after the run).  A run with a
# connection on TCP is not an SDP result: it is marked "(fell back)".
# Then the servers' own counters, read before each is stopped:
# connections accepted over SDP and over TCP, bytes moved over SDP.  The
# programs log only warnings and errors (to a file per program): the
# summary line per connection (log level 7) would cost the connection
# rate about a third.
#
# Environment: APPS_SECS (seconds per sockperf run, 5; --quick 2),
# APPS_REQS (redis-benchmark requests, 200000; --quick 50000), APPS_CONNS
# (connections for the rate, 2000; --quick 500).
set -u

usage() {
	echo "usage: $0 BUILDDIR [--quick] [--reps N] [--host ADDR] [--transport NAME]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
build=$(cd "$1" && pwd) || usage
shift
reps=3 quick=0 host=127.0.0.1 transport=tcp-fallback
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 reps=1 ;;
	--reps) reps=$2; shift ;;
	--host) host=$2; shift ;;
	--transport) transport=$2; shift ;;
	*) usage ;;
	esac
	shift
done
lib=$build/.libs/libsdp.so
pc=$build/bench/preload_cost
[ -e "$lib" ] || { echo "$0: $lib is not built" >&2; exit 1; }
[ -x "$pc" ] || { echo "$0: $pc is not built (make -C $build bench/preload_cost)" >&2; exit 1; }
if [ "$quick" = 1 ]; then
	secs=${APPS_SECS:-2} reqs=${APPS_REQS:-50000} conns=${APPS_CONNS:-500}
else
	secs=${APPS_SECS:-5} reqs=${APPS_REQS:-200000} conns=${APPS_CONNS:-2000}
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/apps_compare.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# The SDP runs' policy: both stacks on both ends, the one transport,
# warnings and errors logged to a file per program.
sdpconf() { # LOGFILE
	local f="$tmp/sdp.conf.$RANDOM"
	printf 'transport enable %s\nlog min-level 8 destination file %s\nuse both server * *:*\nuse both client * *:*\n' \
		"$transport" "$1" >"$f"
	echo "$f"
}
# run_as MODE LOG CMD...: CMD natively (MODE tcp) or preloaded (MODE sdp,
# its connections logged to LOG).  Only ever in a subshell of its own
# (CMD & or $(...)), because it execs CMD: a server started with & is then
# $! itself, and killing $! stops it (a function run with & is a subshell
# whose child the server would be, left running by the kill).
run_as() {
	local mode=$1 logf=$2
	shift 2
	if [ "$mode" = sdp ]; then
		LD_PRELOAD=$lib LIBSDP_CONFIG_FILE=$(sdpconf "$logf") SDP_TRANSPORTS=$transport exec "$@"
	else
		exec "$@"
	fi
}
# A free TCP port P whose SDP port P + 20000 is free too.
free_port() { python3 "$(dirname "$0")/../tools/free_port.py" "$host"; }
wait_port() { # PORT: until something listens there (10 s); no probe
	# connection, which would count as a TCP client in the server's log
	for _ in $(seq 100); do
		[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	return 1
}
# accepted PID: "SDP TCP", the connections the server PID has accepted
# so far over SDP and over the kernel's TCP (sdpstat), "- -" without a
# record.  where BEFORE AFTER: "sdp=N tcp=M" between two of those.
accepted() {
	"$build/tools/sdpstat" -p "$1" -c --json 2>/dev/null | python3 -c '
import json, sys
try:
    p = json.load(sys.stdin)["processes"][0]["counters"]
    print(p.get("accept_sdp", 0), p.get("accept_tcp", 0))
except (ValueError, KeyError, IndexError):
    print("- -")'
}
where() {
	set -- $1 $2
	case "$1$3" in *-*) echo "sdp=? tcp=? (no sdpstat record)"; return ;; esac
	echo "sdp=$(($3 - $1)) tcp=$(($4 - $2))"
}

# bytes_proof NAME PID: the server's own counters from sdpstat, read
# before it is stopped: connections it accepted over SDP and over TCP (the
# application's kernel sockets), bytes it moved over SDP.  An SDP run shows
# "tcp 0" and the bytes; a TCP connection accepted is a fallback.
proofs=()
bytes_proof() {
	local line
	line=$("$build/tools/sdpstat" -p "$2" -c --json 2>/dev/null | python3 -c '
import json, sys
try:
    p = json.load(sys.stdin)["processes"][0]["counters"]
except (ValueError, KeyError, IndexError):
    print("no sdpstat record"); sys.exit()
mib = lambda v: v / 1048576
print("accepted sdp %d tcp %d; SDP bytes received %.1f MiB, sent %.1f MiB" % (
    p.get("accept_sdp", 0), p.get("accept_tcp", 0),
    mib(p.get("sdp_bytes_rx", 0)), mib(p.get("sdp_bytes_tx", 0))))')
	proofs+=("$1: ${line:-no sdpstat record}")
}

declare -A vals wheres
note_val() { # KEY VALUE
	vals[$1]="${vals[$1]:-} $2"
}

m_sockperf() { # MODE REP
	local mode=$1 p slog clog out
	p=$(free_port)
	slog=$tmp/sp-srv.$mode.$2.log clog=$tmp/sp-cli.$mode.$2.log
	run_as "$mode" "$slog" sockperf sr --tcp -i "$host" -p "$p" >"$tmp/sp-srv.out" 2>&1 &
	local spid=$!
	pids+=("$spid")
	wait_port "$p" || { echo "sockperf server did not start" >&2; kill "$spid"; return 1; }
	local before after
	[ "$mode" = sdp ] && before=$(accepted "$spid")
	out=$(run_as "$mode" "$clog" sockperf pp --tcp -i "$host" -p "$p" -m 64 -t "$secs" 2>&1)
	if [ "$mode" = sdp ]; then
		after=$(accepted "$spid")
		bytes_proof "sockperf server, rep $2" "$spid"
	fi
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	local avg p50
	avg=$(printf '%s\n' "$out" | sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p')
	p50=$(printf '%s\n' "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
	[ -n "$avg" ] || { echo "sockperf: no result: $out" >&2; return 1; }
	note_val "sockperf64_avg.$mode" "$avg"
	note_val "sockperf64_p50.$mode" "$p50"
	[ "$mode" = sdp ] && wheres[sockperf64_avg]="${wheres[sockperf64_avg]:-} $(where "$before" "$after")"
	wheres[sockperf64_p50]=${wheres[sockperf64_avg]:-}
	return 0
}

m_redis() { # MODE REP
	local mode=$1 p slog out c
	p=$(free_port)
	slog=$tmp/rd-srv.$mode.$2.log
	run_as "$mode" "$slog" redis-server --port "$p" --bind "$host" --save '' --appendonly no \
		--protected-mode no --maxclients 4000 >"$tmp/rd-srv.out" 2>&1 &
	local rpid=$!
	pids+=("$rpid")
	wait_port "$p" || { echo "redis-server did not start: $(tail -3 "$tmp/rd-srv.out")" >&2; kill "$rpid"; return 1; }
	for c in 50 1000; do
		local clog=$tmp/rd-cli.$mode.$2.$c.log before after
		[ "$mode" = sdp ] && before=$(accepted "$rpid")
		out=$(run_as "$mode" "$clog" redis-benchmark -h "$host" -p "$p" -t get -n "$reqs" -c "$c" -q 2>&1)
		[ "$mode" = sdp ] && after=$(accepted "$rpid")
		local rps
		rps=$(printf '%s\n' "$out" | tr '\r' '\n' | sed -n 's/^GET: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
		[ -n "$rps" ] || { echo "redis-benchmark -c $c: no result: $out" >&2; continue; }
		note_val "redis_get_c$c.$mode" "$rps"
		[ "$mode" = sdp ] && wheres[redis_get_c$c]="${wheres[redis_get_c$c]:-} $(where "$before" "$after")"
	done
	[ "$mode" = sdp ] && bytes_proof "redis-server (c50 and c1000), rep $2" "$rpid"
	kill "$rpid" 2>/dev/null
	wait "$rpid" 2>/dev/null
	return 0
}

m_conn() { # MODE REP
	local mode=$1 pf=$tmp/pc.port.$1.$2 slog=$tmp/pc-srv.$1.$2.log clog=$tmp/pc-cli.$1.$2.log out
	rm -f "$pf"
	run_as "$mode" "$slog" "$pc" serve --port-file "$pf" >/dev/null 2>&1 &
	local spid=$!
	pids+=("$spid")
	for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.1; done
	[ -s "$pf" ] || { echo "preload_cost serve did not start" >&2; return 1; }
	local before after
	[ "$mode" = sdp ] && before=$(accepted "$spid")
	out=$(run_as "$mode" "$clog" "$pc" connect "127.0.0.1:$(cat "$pf")" "$conns" --send 1 2>&1)
	[ "$mode" = sdp ] && after=$(accepted "$spid")
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	local rate first
	rate=$(printf '%s\n' "$out" | sed -n 's/^connect_rate=\([0-9.]*\).*/\1/p')
	first=$(printf '%s\n' "$out" | sed -n 's/^connect_first_us=\([0-9.]*\).*/\1/p')
	[ -n "$rate" ] || { echo "preload_cost connect: no result: $out" >&2; return 1; }
	note_val "conn_rate.$mode" "$rate"
	note_val "first_connect_ms.$mode" "$(awk -v u="$first" 'BEGIN { printf "%.2f", u / 1000 }')"
	if [ "$mode" = sdp ]; then
		wheres[conn_rate]="${wheres[conn_rate]:-} $(where "$before" "$after")"
		wheres[first_connect_ms]=${wheres[conn_rate]}
	fi
	return 0
}

m_iperf3() { # MODE REP
	local mode=$1 p slog out
	p=$(free_port)
	slog=$tmp/ip-srv.$mode.$2.log
	run_as "$mode" "$slog" iperf3 -s -B "$host" -p "$p" >"$tmp/ip-srv.out" 2>&1 &
	local spid=$! before after
	pids+=("$spid")
	wait_port "$p" || { echo "iperf3 server did not start" >&2; kill "$spid"; return 1; }
	[ "$mode" = sdp ] && before=$(accepted "$spid")
	out=$(run_as "$mode" "$tmp/ip-cli.$mode.$2.log" iperf3 -c "$host" -p "$p" -t "$secs" -J \
		2>"$tmp/ip-cli.err")
	if [ "$mode" = sdp ]; then
		after=$(accepted "$spid")
		bytes_proof "iperf3 server, rep $2" "$spid"
	fi
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	local r
	r=$(printf '%s\n' "$out" | python3 -c '
import json, sys
try:
    e = json.load(sys.stdin)["end"]
    gbit = e["sum_received"]["bits_per_second"] / 1e9
    secs = e["sum_received"]["seconds"]
    gib = e["sum_received"]["bytes"] / 2**30
    cpu = e["cpu_utilization_percent"]
    print("%.3f %.3f" % (gbit, (cpu["host_total"] + cpu["remote_total"]) / 100 * secs / gib))
except (ValueError, KeyError, ZeroDivisionError):
    pass')
	[ -n "$r" ] || { echo "iperf3: no result: $(cat "$tmp/ip-cli.err") $out" | head -20 >&2; return 1; }
	note_val "iperf3_gbps.$mode" "${r% *}"
	note_val "iperf3_cpu_s_per_gib.$mode" "${r#* }"
	if [ "$mode" = sdp ]; then
		wheres[iperf3_gbps]="${wheres[iperf3_gbps]:-} $(where "$before" "$after")"
		wheres[iperf3_cpu_s_per_gib]=${wheres[iperf3_gbps]}
	fi
	return 0
}

have() { command -v "$1" >/dev/null 2>&1; }
measures=()
have sockperf && measures+=(m_sockperf) || echo "sockperf is not installed: no sockperf row"
have redis-server && have redis-benchmark && measures+=(m_redis) ||
	echo "redis-server or redis-benchmark is not installed: no redis rows"
measures+=(m_conn)
have iperf3 && measures+=(m_iperf3) || echo "iperf3 is not installed: no iperf3 rows"

echo "apps_compare: $reps rep(s), transport $transport, host $host, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$reps"); do
	for m in "${measures[@]}"; do
		for mode in tcp sdp; do
			"$m" "$mode" "$r" || echo "($m $mode, rep $r, failed)"
		done
	done
done

# stats "V1 V2 ...": "median (min-max)"
stats() {
	printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END {
		if (!NR) { printf "-"; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		if (NR > 1) printf "%.4g (%.4g-%.4g)", m, v[1], v[NR]; else printf "%.4g", m }'
}
median() {
	printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END {
		if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf '\n%-22s %-24s %-24s %-8s %s\n' measure TCP SDP SDP/TCP "SDP runs: connections"
for key in sockperf64_avg sockperf64_p50 redis_get_c50 redis_get_c1000 conn_rate first_connect_ms \
	iperf3_gbps iperf3_cpu_s_per_gib; do
	t=${vals[$key.tcp]:-} s=${vals[$key.sdp]:-}
	[ -n "$t$s" ] || continue
	ratio=$(awk -v a="$(median "$s")" -v b="$(median "$t")" 'BEGIN { if (a != "" && b > 0) printf "%.2fx", a / b; else printf "-" }')
	w=${wheres[$key]:-}
	case "$w" in *tcp=[1-9]*) w="$w (fell back)" ;; esac
	printf '%-22s %-24s %-24s %-8s %s\n' "$key" "$(stats "$t")" "$(stats "$s")" "$ratio" "$w"
done
echo
echo "where the bytes went, the SDP runs' servers (sdpstat):"
printf '  %s\n' "${proofs[@]:-none}"
logged=$(cat "$tmp"/*.log 2>/dev/null)
if [ -n "$logged" ]; then
	echo
	echo "warnings and errors the preloaded programs logged ($(printf '%s\n' "$logged" | wc -l) lines, first 5):"
	printf '%s\n' "$logged" | head -5 | sed 's/^/  /'
fi
echo
echo "units: sockperf one-way latency in us (lower is better), redis requests/s and conn_rate"
echo "connections/s (higher is better), first_connect_ms in ms (lower is better), iperf3 Gbit/s"
echo "(higher is better) and CPU seconds per GiB of both ends (lower is better)"
exit 0
