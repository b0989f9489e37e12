#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# preload_cost.sh BUILDDIR: what LD_PRELOAD=libsdp.so costs a program that
# uses plain sockets, measured with bench/preload_cost (libc only, so the
# preload sees every call) on 127.0.0.1.  Figures are printed side by side,
# never judged: the exit status is 0 unless a run failed.
#
# The servers (preload_cost serve, and serve --echo) are NOT preloaded:
# their cost is the same in every column.  Each client mode runs, in the
# same invocation, in three columns:
#
#   native          no preload: the kernel's TCP, what every ratio is
#                   relative to.
#   preload(tcp)    preloaded with a policy that keeps everything on TCP
#                   (use tcp server/client * *:*, tcp-fallback enabled).
#                   Nothing is ever SDP, so the preload only passes calls
#                   through: this column is its pure pass-through cost
#                   (sockets are not even entered in its fd table).
#   both->tcp       preloaded with "use both client * *:*" (tcp-fallback
#                   enabled).  Each connect() first tries SDP, which the
#                   server refuses (it has no SDP listener: its SDP port,
#                   P+20000 on the software transport, has nothing on it),
#                   then falls back to the kernel's TCP.  The connect rows
#                   show the extra cost of a refused SDP attempt; the
#                   other rows what a socket that fell back to TCP costs
#                   afterwards (it stays in the preload's fd table).
#   tcp/nat, b/nat  the two preloaded columns divided by native
#                   (1.00x = no cost, 2.00x = twice the time).
#
# The rows:
#   connect() first       the first connect() of the process (in both->tcp
#                         it includes starting the SDP engine and its
#                         progress thread); not part of
#                         the percentiles below
#   connect() p50/p90/p99 percentiles over CONNECTS socket+connect+close
#                         cycles (after 20 unmeasured ones), microseconds
#   socket(), close()     medians of the same cycles
#   cycle p50, mean       socket+connect+close, median and mean per cycle
#   connect total         wall time of all CONNECTS cycles, milliseconds
#   connects > 0.5 s      how many connect() calls waited for a resent SYN:
#                         Linux now and then drops a loopback SYN (nstat
#                         counts a TcpExtListenOverflows although the accept
#                         queue is nearly empty) and resends it after 1 s,
#                         with or without the preload; seen about once in
#                         2000 connects with the ends on different CPUs,
#                         not pinned to one.  Each adds 1 s to the total
#                         and the mean, so compare those only when this row
#                         says 0 (the percentiles and cycle p50 are immune)
#   rtt S B p50/p99       one connection, PINGS round trips of S bytes
#                         (write S, read the S bytes echoed), TCP_NODELAY
#   pipe write+read       a 1-byte write and read on a pipe, per pair, ns:
#                         calls on a native fd the preload only passes on
#   getsockopt(SO_TYPE)   on an unconnected TCP socket, per call, ns (in
#                         both->tcp that socket is in the preload's fd
#                         table: a candidate for SDP until it connects)
#
# Then, for reference, "SDP on both ends": the echo server preloaded too
# (use both server * *:*) and the client with "use sdp client * *:*", so
# the round trips go over SDP on the software transport (SDP carried over
# the kernel's TCP: not RDMA figures), against native.
#
# Every process (servers and clients) is pinned to one CPU, the last one
# this script may use (PIN_CPU=N picks another, PIN_CPU=none pins nothing).
# Unpinned, the scheduler puts the two ends of a round trip on one CPU in
# some runs and on two in others, and on a virtual machine a wake-up on
# another CPU can cost ten times the round trip itself (about 55 us
# against 6.5 us on loopback): runs then disagree by that much in every
# column.  On one CPU a round trip is two context switches, and the
# figures repeat from run to run.
#
# Environment: CONNECTS (default 2000), PINGS (20000), PING_SIZES ("1 4096"),
# SYSCALLS (200000), PIN_CPU, RUN_LIMIT (seconds per run, 300),
# LIBSDP_LIBRARY (the libsdp.so to preload; default
# BUILDDIR/.libs/libsdp.so), RAW=1 (also print every program's raw
# key=value output).  SDP_TRANSPORTS is set to tcp-fallback.  Built with
# --enable-sanitizers, the figures mean little.
set -u

me=preload_cost
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: $0 BUILDDIR" >&2
	exit 2
fi
builddir=$(cd "$1" && pwd)
bench=$builddir/bench/preload_cost
lib=${LIBSDP_LIBRARY:-$builddir/.libs/libsdp.so}
CONNECTS=${CONNECTS:-2000}
PINGS=${PINGS:-20000}
PING_SIZES=${PING_SIZES:-1 4096}
SYSCALLS=${SYSCALLS:-200000}
RUN_LIMIT=${RUN_LIMIT:-300}
RAW=${RAW:-0}
PIN_CPU=${PIN_CPU:-$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | sed 's/.*[-,]//')}
SDP_TRANSPORTS=tcp-fallback
export SDP_TRANSPORTS

die() {
	echo "$me: $*" >&2
	exit 1
}
[ -x "$bench" ] || die "$bench not found: build it with make in $builddir"
[ -f "$lib" ] || die "$lib not found (set LIBSDP_LIBRARY to a libsdp.so)"
case $lib in /*) ;; *) lib=$(pwd)/$lib ;; esac
pin=()
if [ "$PIN_CPU" != none ]; then
	command -v taskset >/dev/null || die "taskset not found: install util-linux, or set PIN_CPU=none"
	[ -n "$PIN_CPU" ] || die "cannot tell which CPU to pin to: set PIN_CPU"
	pin=(taskset -c "$PIN_CPU")
fi

# The LD_PRELOAD value (as preload_value in test/integration/lib.sh): in
# a sanitizer build the sanitizer's runtime must come first.
preload=$lib
san=$(sed -n 's/^SAN_CFLAGS = //p' "$builddir/Makefile" 2>/dev/null)
cc=$(sed -n 's/^CC = //p' "$builddir/Makefile" 2>/dev/null)
case $san in
*-fsanitize=address*) preload="$(${cc:-cc} -print-file-name=libasan.so):$lib" ;;
*-fsanitize=thread*) preload="$(${cc:-cc} -print-file-name=libtsan.so):$lib" ;;
esac
[ -n "$san" ] && echo "$me: warning: a sanitizer build ($san): the figures mean little" >&2

TMP=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX") || exit 1
SERVER_PIDS=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
	local p
	for p in "${SERVER_PIDS[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${SERVER_PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Policy files.
conf() {
	local f=$TMP/$1.conf
	shift
	{
		echo "transport enable tcp-fallback"
		printf '%s\n' "$@"
	} >"$f"
}
conf tcp "use tcp server * *:*" "use tcp client * *:*"
conf both "use both client * *:*"
conf both-log "log min-level 7" "use both client * *:*"
conf sdp-server "use both server * *:*"
conf sdp-client "use sdp client * *:*"
conf sdp-client-log "log min-level 7" "use sdp client * *:*"

# The environment of each column: env(1) arguments (used by name in run).
# shellcheck disable=SC2034
env_native=(-u LD_PRELOAD -u LIBSDP_CONFIG_FILE)
# shellcheck disable=SC2034
env_tcp=("LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/tcp.conf")
# shellcheck disable=SC2034
env_both=("LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/both.conf")
# shellcheck disable=SC2034
env_sdp=("LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/sdp-client.conf")

# start_server NAME ENV-ARGS... -- SERVE-ARGS...: sets $PORT.
start_server() {
	local name=$1 i=0
	shift
	local envs=()
	while [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	env "${envs[@]}" "${pin[@]}" "$bench" serve --port-file "$TMP/$name.port" "$@" \
		>"$TMP/$name.log" 2>&1 </dev/null &
	SERVER_PIDS+=($!)
	until [ -s "$TMP/$name.port" ]; do
		i=$((i + 1))
		if [ $i -gt 600 ] || ! kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null; then
			cat "$TMP/$name.log" >&2
			die "server $name did not start"
		fi
		sleep 0.05
	done
	PORT=$(cat "$TMP/$name.port")
}

# Results: R[column.key]=value.
declare -A R

# run COLUMN ENVVAR CMD-ARGS...: run preload_cost CMD-ARGS in the column's
# environment and record its key=value figures.
run() {
	local col=$1 envname="$2[@]" out=$TMP/run.out k v rest
	shift 2
	if ! timeout -k 5 "$RUN_LIMIT" env "${!envname}" "${pin[@]}" "$bench" "$@" >"$out" 2>"$TMP/run.err"; then
		echo "$me: column $col: preload_cost $* failed:" >&2
		cat "$TMP/run.err" "$out" >&2
		exit 1
	fi
	[ "$RAW" = 1 ] && sed "s/^/  [$col] /" "$out"
	local size=""
	case $1 in pingpong) size=$4 ;; esac
	while IFS='=' read -r k rest; do
		v=${rest%% *}
		case $k in
		preloaded)
			local want=1
			[ "$col" = native ] && want=0
			[ "$v" = "$want" ] || die "column $col: preloaded=$v, expected $want"
			;;
		rtt_* | pingpong_*) R[$col.$k.$size]=$v ;;
		*) R[$col.$k]=$v ;;
		esac
	done <"$out"
}

echo "$me: $(uname -srm), $(nproc) CPUs; preload $lib"
echo "$me: CONNECTS=$CONNECTS PINGS=$PINGS PING_SIZES='$PING_SIZES' SYSCALLS=$SYSCALLS PIN_CPU=$PIN_CPU"

start_server sink "${env_native[@]}" --
SINK=127.0.0.1:$PORT
start_server echo "${env_native[@]}" -- --echo
ECHO=127.0.0.1:$PORT
start_server sdpecho "LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/sdp-server.conf" -- --echo
SDPECHO=127.0.0.1:$PORT

# The both->tcp column must be a refused SDP attempt, not a timeout (that
# would be something answering on the SDP port) nor no SDP at all.
timeout -k 5 60 env "LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/both-log.conf" \
	"${pin[@]}" "$bench" connect "$SINK" 1 >/dev/null 2>"$TMP/probe.err" ||
	{ cat "$TMP/probe.err" >&2; die "the fallback probe failed"; }
grep -q "(refused): connecting over TCP" "$TMP/probe.err" ||
	{ cat "$TMP/probe.err" >&2; die "the both->tcp connect is not a refused SDP attempt"; }
# The reference column must really be SDP.
timeout -k 5 60 env "LD_PRELOAD=$preload" "LIBSDP_CONFIG_FILE=$TMP/sdp-client-log.conf" \
	"${pin[@]}" "$bench" pingpong "$SDPECHO" 10 1 >/dev/null 2>"$TMP/probe.err" ||
	{ cat "$TMP/probe.err" >&2; die "the SDP probe failed"; }
grep -q "over SDP" "$TMP/probe.err" ||
	{ cat "$TMP/probe.err" >&2; die "the SDP reference connection is not SDP"; }

cols=(native tcp both)
for c in "${cols[@]}"; do
	run "$c" "env_$c" connect "$SINK" "$CONNECTS"
done
for s in $PING_SIZES; do
	for c in "${cols[@]}"; do
		run "$c" "env_$c" pingpong "$ECHO" "$PINGS" "$s"
	done
	run sdp env_sdp pingpong "$SDPECHO" "$PINGS" "$s"
done
for c in "${cols[@]}"; do
	run "$c" "env_$c" syscalls "$SYSCALLS"
done

# --- the table -------------------------------------------------------------------
ratio() {
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {
		if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2fx\n", a / b }'
}
row() {	# LABEL KEY [noratio]
	local n=${R[native.$2]:-} t=${R[tcp.$2]:-} b=${R[both.$2]:-} rt rb
	rt=$(ratio "$t" "$n")
	rb=$(ratio "$b" "$n")
	[ "${3:-}" = noratio ] && rt=- rb=-
	printf '%-28s %10s %13s %11s %9s %9s\n' "$1" "${n:--}" "${t:--}" "${b:--}" "$rt" "$rb"
}
echo
printf '%-28s %10s %13s %11s %9s %9s\n' metric native "preload(tcp)" "both->tcp" tcp/nat b/nat
printf '%s\n' "---------------------------------------------------------------------------------------"
row "connect() first, us" connect_first_us
row "connect() p50, us" connect_p50_us
row "connect() p90, us" connect_p90_us
row "connect() p99, us" connect_p99_us
row "socket() p50, us" socket_p50_us
row "close() p50, us" close_p50_us
row "cycle p50, us" cycle_p50_us
row "cycle mean, us" cycle_mean_us
row "connect total, ms" connect_total_ms
row "connects > 0.5 s" connect_stalls noratio
for s in $PING_SIZES; do
	row "rtt $s B p50, us" "rtt_p50_us.$s"
	row "rtt $s B p99, us" "rtt_p99_us.$s"
done
row "pipe write+read, ns" pipe_rw_ns
row "getsockopt(SO_TYPE), ns" getsockopt_ns

echo
echo "reference: SDP on both ends (software transport, over the kernel's TCP)"
printf '%-28s %10s %13s %9s\n' metric native "sdp" sdp/nat
printf '%s\n' "-------------------------------------------------------------"
for s in $PING_SIZES; do
	for p in p50 p99; do
		n=${R[native.rtt_${p}_us.$s]:-} d=${R[sdp.rtt_${p}_us.$s]:-}
		printf '%-28s %10s %13s %9s\n' "rtt $s B $p, us" "${n:--}" "${d:--}" "$(ratio "$d" "$n")"
	done
done
exit 0
