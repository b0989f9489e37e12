# shellcheck shell=bash
# SPDX-License-Identifier: BSD-2-Clause
# Helpers sourced by the integration tests (bash).
#
# A test exits 0 (pass), 1 (fail) or 77 (skip).  Nothing may hang: every
# program runs under a time limit (run_with_timeout, wait_pid), the whole
# script has a watchdog (TEST_LIMIT seconds, default 240), and the EXIT trap
# kills whatever the test left running and removes its scratch directory.
# Every limit is multiplied by TEST_SLOW (below).
#
# The suite runs on one SDP transport, TEST_TRANSPORT (tcp-fallback by
# default), between addresses of TEST_HOST; each test logs which at its
# start ("transport: ib") and checks that its SDP connections really ran on
# it.  In the VM testbed:
#   test/vm/run-in-vm --devices rxe -- make check 'TESTS=$(INTEGRATION_TESTS)' TEST_TRANSPORT=ib
#
# Ports are never fixed: servers listen on port 0 and write the port they
# got to a file (sdpcat --port-file), so tests can run in parallel.

set -u

TEST_NAME=$(basename "$0" .sh)
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
# TEST_TRANSPORT is the one transport the suite runs on (tcp-fallback,
# the software one, by default; "ib" over rxe or "iwarp" over siw in the
# VM testbed): the engine may use it and nothing else, so that a transport
# that does not come up fails the tests instead of leaving them to another
# one.
# TEST_HOST is the address servers listen on and clients connect to
# (test_host.sh: loopback on tcp-fallback, the guest's RDMA interface
# address on ib and iwarp).
: "${TEST_TRANSPORT:=tcp-fallback}"
SDP_TRANSPORTS=$TEST_TRANSPORT
# shellcheck source=SCRIPTDIR/test_host.sh
. "$top_srcdir/test/integration/test_host.sh"
# TEST_SLOW: a factor for every time limit of the suite (TEST_LIMIT,
# run_with_timeout, wait_*, the programs' own timeouts through slow).  In
# the VM testbed the guest runs under emulation, about ten times slower.
if [ -z "${TEST_SLOW:-}" ]; then
	if [ -n "${VM_NAME:-}" ]; then
		TEST_SLOW=10
	else
		TEST_SLOW=1
	fi
fi
export SDP_TRANSPORTS TEST_TRANSPORT TEST_HOST TEST_SLOW top_builddir top_srcdir
# What libtool's wrappers would set for the .libs programs prog() gives.
LD_LIBRARY_PATH=$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sdp-$TEST_NAME.XXXXXX") || exit 99
BG_PIDS=()
WATCHDOG_PID=

# python3 is the system's (quickstart installs it), not a version
# manager's shim found first on PATH: pyenv's is a bash script that runs
# several programs before python, which costs seconds per start in the
# emulated guest, and under LD_PRELOAD each of them starts libsdp too.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
	mkdir "$TMP/bin" && ln -s /usr/bin/python3 "$TMP/bin/python3" && PATH="$TMP/bin:$PATH"
fi

# In the VM testbed each line also says when it was written (seconds since
# the test began), so that a slow stage shows where its time went.
if [ "$TEST_SLOW" -gt 1 ] 2>/dev/null; then
	log() { printf '%s: [%ds] %s\n' "$TEST_NAME" "$SECONDS" "$*"; }
else
	log() { printf '%s: %s\n' "$TEST_NAME" "$*"; }
fi
fail() {
	log "FAIL: $*"
	exit 1
}
skip() {
	log "SKIP: $*"
	exit 77
}

# For tests of many cases that go on after one fails: bad() counts a
# failed case, failures_end() fails the test if any did.
failures=0
bad() {
	log "FAIL: $*"
	failures=$((failures + 1))
}
failures_end() {
	[ "$failures" -eq 0 ] || fail "$failures case(s) failed"
}
have() { command -v "$1" >/dev/null 2>&1; }

cleanup() {
	local p
	for p in "${BG_PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for p in "${BG_PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	if [ -n "$WATCHDOG_PID" ]; then
		kill "$WATCHDOG_PID" 2>/dev/null
		wait "$WATCHDOG_PID" 2>/dev/null
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'log "FAIL: interrupted or over the time limit ($(slow "${TEST_LIMIT:-240}")s)"; exit 1' INT TERM

# slow SECS: SECS scaled by TEST_SLOW (a time limit, never a pause).
slow() {
	echo $(($1 * TEST_SLOW))
}

case $TEST_SLOW in
'' | *[!0-9]* | 0) fail "TEST_SLOW must be a positive integer, not '$TEST_SLOW'" ;;
esac
if [ -z "$TEST_HOST" ]; then
	fail "transport $TEST_TRANSPORT serves no loopback: set TEST_HOST to an address it serves (in the VM testbed, run-in-vm sets VM_ADDR and TEST_HOST defaults to it)"
fi
log "transport: $TEST_TRANSPORT (host $TEST_HOST${VM_NAME:+, in guest $VM_NAME}, time limits x$TEST_SLOW)"

# The script as a whole: if something slipped past the per-command limits,
# TERM ourselves; the trap above then cleans up.  TEST_LIMIT is read when a
# test has sourced this file, so a test may raise it afterwards and call
# start_watchdog again.
start_watchdog() {
	local limit
	limit=$(slow "${TEST_LIMIT:-240}")
	if [ -n "$WATCHDOG_PID" ]; then
		kill "$WATCHDOG_PID" 2>/dev/null
		wait "$WATCHDOG_PID" 2>/dev/null
	fi
	(
		trap 'exit 0' TERM
		sleep "$limit" &
		wait $!
		kill -TERM $$ 2>/dev/null
	) </dev/null >/dev/null 2>&1 &
	WATCHDOG_PID=$!
}
start_watchdog

# Built with --enable-sanitizers?  Tests shrink their data then: the code
# is several times slower and the suite must stay within minutes.
is_sanitized() {
	grep -q '^SAN_CFLAGS = .*-fsanitize' "$top_builddir/Makefile" 2>/dev/null
}

# Under TSan, a forked child of a threaded process that starts a thread
# dies ("starting new threads after multi-threaded fork is not
# supported") unless told otherwise.  libsdp's threads are already
# running when a preloaded server forks, and a child that accepts on the
# listener it shares with its parent (doc/fork.md) or serves a relayed
# connection starts its own: the pre-forked and forking servers of the
# suite need that child to live.
if grep -q '^SAN_CFLAGS = .*-fsanitize=thread' "$top_builddir/Makefile" 2>/dev/null; then
	export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}die_after_fork=0"
fi

# no_sanitizer_report NAME FILES...: FILES (programs' outputs) hold no
# sanitizer report, else bad() with the report: servers killed at the end
# of a test leave their reports in no exit code.
no_sanitizer_report() {
	local name=$1 f
	shift
	for f in "$@"; do
		if grep -Eq "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:" "$f" 2>/dev/null; then
			bad "$name: a sanitizer report in $(basename "$f"):"
			grep -Ev '^libsdp' "$f" | grep -E -A 12 "WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:" | head -n 40 | sed 's/^/  /'
		fi
	done
}

# prog NAME: path of a built program (tools/, bench/, test/integration/).
# A program linked with one of our libraries is, in the build tree,
# libtool's wrapper script: bash, which sets LD_LIBRARY_PATH and execs
# .libs/NAME.  prog gives .libs/NAME itself (LD_LIBRARY_PATH is set once,
# below): in the guest the wrapper cost 0.85 s per start (sdpcat --help
# 1.2-1.3 s through it, 0.33-0.38 s without), and the tests start hundreds.
prog() {
	local d
	for d in tools bench test/integration; do
		if [ -x "$top_builddir/$d/.libs/$1" ] && [ -f "$top_builddir/$d/$1" ]; then
			printf '%s\n' "$top_builddir/$d/.libs/$1"
			return 0
		fi
		if [ -x "$top_builddir/$d/$1" ]; then
			printf '%s\n' "$top_builddir/$d/$1"
			return 0
		fi
	done
	log "ERROR: program $1 not found under $top_builddir"
	exit 99
}

# transport_can CAP: does TEST_TRANSPORT have capability CAP, a word of
# transport_caps (rdma_read, rdma_write, software, host_local, ...)?  Zero
# copy needs rdma_read (Read Zcopy) and rdma_write (Write Zcopy, and the
# Transaction mode that rides on it); shm has neither (doc/shm.md).
transport_can() {
	local caps
	caps=$("$(prog transport_caps)") ||
		fail "cannot ask transport $TEST_TRANSPORT what it can do"
	case " $caps " in
	*" $1 "*) return 0 ;;
	esac
	return 1
}

# run_with_timeout SECS CMD...: run CMD, killing it after SECS (status 124).
run_with_timeout() {
	local secs
	secs=$(slow "$1")
	shift
	timeout -k 5 "$secs" "$@"
}

# start_bg OUTFILE CMD...: start CMD in the background, output to OUTFILE;
# its pid is in $BG_PID and is killed at exit if still running.
start_bg() {
	local out=$1
	shift
	"$@" >"$out" 2>&1 </dev/null &
	BG_PID=$!
	BG_PIDS+=("$BG_PID")
}

# The waits below end on the clock ($SECONDS), not after a number of
# rounds: where starting a process is slow (an emulated guest) a round
# takes far longer than its pause.

# wait_for_file FILE SECS: until FILE exists and is not empty.
wait_for_file() {
	local file=$1 end=$((SECONDS + $2 * TEST_SLOW))
	while [ ! -s "$file" ]; do
		if [ "$SECONDS" -ge "$end" ]; then
			return 1
		fi
		sleep 0.05
	done
	return 0
}

# wait_for_text FILE PATTERN SECS: until FILE contains PATTERN (grep -E).
wait_for_text() {
	local file=$1 pat=$2 end=$((SECONDS + $3 * TEST_SLOW))
	until grep -Eq -- "$pat" "$file" 2>/dev/null; do
		if [ "$SECONDS" -ge "$end" ]; then
			return 1
		fi
		sleep 0.05
	done
	return 0
}

# wait_pid PID SECS: wait for a background process; its exit status, or
# 124 after killing it if it is still running after SECS.
wait_pid() {
	local pid=$1 end=$((SECONDS + $2 * TEST_SLOW))
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$end" ]; then
			kill -9 "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			return 124
		fi
		sleep 0.05
	done
	wait "$pid"
}

# start_server OUTFILE [--tcp] SDPCAT-ARGS...: sdpcat -l TEST_HOST:0 (or
# the [IPV6]:0 given) in the background; sets $SERVER_PID and $PORT.
start_server() {
	local out=$1
	shift
	local pf="$TMP/port.$RANDOM.$RANDOM"
	local addr=$TEST_HOST:0 a
	for a in "$@"; do
		case $a in \[*\]:0) addr=$a ;; esac
	done
	local args=()
	for a in "$@"; do
		case $a in \[*\]:0) ;; *) args+=("$a") ;; esac
	done
	start_bg "$out" "$SDPCAT" -l "$addr" --port-file "$pf" "${args[@]}"
	SERVER_PID=$BG_PID
	local end=$((SECONDS + $(slow 30)))
	while [ ! -s "$pf" ]; do
		# A server that died (no transport, say) is not waited for.
		if ! kill -0 "$SERVER_PID" 2>/dev/null && [ ! -s "$pf" ]; then
			log "server exited before it listened:"
			sed 's/^/  server: /' "$out"
			return 1
		fi
		if [ "$SECONDS" -ge "$end" ]; then
			log "server did not start listening within $(slow 30) s:"
			sed 's/^/  server: /' "$out"
			return 1
		fi
		sleep 0.05
	done
	PORT=$(cat "$pf")
	return 0
}

# xfer_case DESC CLIENT_TIMEOUT "SERVER ARGS" "CLIENT ARGS": one checksummed
# sdpcat transfer (server --count 1).  Both must exit 0 and the client
# must print "checksum ok", and name the transport it used: "sdp
# TEST_TRANSPORT:" (or "tcp kernel:" with --tcp).  Returns 0 or 1 (after
# printing why).
xfer_case() {
	local desc=$1 limit=$2 sargs=$3 cargs=$4 host=$TEST_HOST rc src a want
	local sout="$TMP/server.out" cout="$TMP/client.out"
	for a in $sargs; do
		case $a in \[*\]:0) host=${a%:0} ;; esac
	done
	want="sdp $TEST_TRANSPORT: "
	case " $cargs " in *" --tcp "*) want="tcp kernel: " ;; esac
	# shellcheck disable=SC2086
	if ! start_server "$sout" --count 1 $sargs; then
		log "FAIL $desc: server did not start"
		return 1
	fi
	# shellcheck disable=SC2086
	run_with_timeout "$limit" "$SDPCAT" -c "$host:$PORT" $cargs >"$cout" 2>&1
	rc=$?
	wait_pid "$SERVER_PID" 20
	src=$?
	if [ "$rc" -eq 0 ] && [ "$src" -eq 0 ] && grep -q "^sdpcat: $want.*checksum ok" "$cout"; then
		log "ok   $desc: $(grep -v '^sdpcat: engine:' "$cout" | sed -n 's/^sdpcat: //p' | tail -n 1)"
		return 0
	fi
	if [ "$rc" -eq 0 ] && [ "$src" -eq 0 ] && grep -q 'checksum ok' "$cout"; then
		log "FAIL $desc: the data arrived, but not over '${want%: }'"
	else
		log "FAIL $desc: client exit $(status_text "$rc"), server exit $(status_text "$src")"
	fi
	sed 's/^/  client: /' "$cout"
	sed 's/^/  server: /' "$sout"
	return 1
}

# status_text STATUS: "1", "124 (timed out)", "137 (killed)".
status_text() {
	case $1 in
	124) echo "124 (timed out)" ;;
	137) echo "137 (SIGKILL)" ;;
	*) if [ "$1" -gt 128 ]; then echo "$1 (signal $(($1 - 128)))"; else echo "$1"; fi ;;
	esac
}

# Is IPv6 loopback (::1) configured here?
have_ipv6_loopback() {
	[ -r /proc/net/if_inet6 ] &&
		grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6
}

# ipv6_host: the IPv6 address the IPv6 cases use (TEST_HOST6 if set), or
# nothing and status 1 (then they are not run; the caller logs why).  ::1
# on tcp-fallback; RDMA devices serve no loopback, so on another transport
# a global or site-local address of TEST_HOST's interface (in the VM
# testbed, the one eth0 gets from QEMU's router advertisement a moment
# after boot, hence the wait).  Link-local addresses would need a scope id.
ipv6_host() {
	local dev a i=0
	if [ -n "${TEST_HOST6:-}" ]; then
		printf '%s\n' "$TEST_HOST6"
		return 0
	fi
	if [ "$TEST_TRANSPORT" = tcp-fallback ] || [ "$TEST_TRANSPORT" = shm ]; then
		have_ipv6_loopback && echo ::1
		return
	fi
	command -v ip >/dev/null 2>&1 || return 1
	dev=$(ip -o -4 addr show | awk -v a="$TEST_HOST" 'index($4, a "/") == 1 { print $2; exit }')
	[ -n "$dev" ] || return 1
	while [ "$i" -lt $((TEST_SLOW * 50)) ]; do
		a=$(ip -o -6 addr show dev "$dev" -tentative | awk '$0 ~ / scope (global|site) / { sub("/.*", "", $4); print $4; exit }')
		if [ -n "$a" ]; then
			printf '%s\n' "$a"
			return 0
		fi
		i=$((i + 1))
		sleep 0.1
	done
	return 1
}

# A free TCP port P whose SDP port (P + 20000) is free too (programs that
# take a fixed port number).
free_port() { python3 "$top_srcdir/tools/free_port.py" "$TEST_HOST"; }

# sdpstat_counters PID NAME...: the process's counters NAME... as sdpstat
# (--json) shows them, on one line separated by spaces, or sdpstat's
# error.  A counter the process has not got prints as an empty field
# would break "read": it prints "none".
sdpstat_counters() {
	local pid=$1
	shift
	"$(prog sdpstat)" -p "$pid" --json 2>&1 | python3 -c '
import json, sys
c = json.load(sys.stdin)["processes"][0]["counters"]
print(" ".join(str(c.get(n, "none")) for n in sys.argv[1:]))' "$@" 2>&1
}

# --- the preload ---------------------------------------------------------------

# The libsdp.so of this build, or empty.
preload_lib() {
	local f=$top_builddir/.libs/libsdp.so
	[ -f "$f" ] && printf '%s\n' "$f"
}

# The LD_PRELOAD value that loads libsdp.so into any program of a
# sanitizer build.  ASan insists on coming first.  TSan must come after
# libsdp: its interceptor for a blocking call (poll, accept...) ignores
# every interceptor the real function reaches, which would hide libsdp's
# locks from it and report races that are not there.
preload_value() {
	local lib
	lib=$(preload_lib) || return 1
	if grep -q '^SAN_CFLAGS = .*-fsanitize=address' "$top_builddir/Makefile" 2>/dev/null; then
		printf '%s %s\n' "$(${CC:-cc} -print-file-name=libasan.so)" "$lib"
	elif grep -q '^SAN_CFLAGS = .*-fsanitize=thread' "$top_builddir/Makefile" 2>/dev/null; then
		printf '%s %s\n' "$lib" "$(${CC:-cc} -print-file-name=libtsan.so)"
	else
		printf '%s\n' "$lib"
	fi
}

# preload_env CONF: env(1) arguments that run a program with libsdp.so
# and the policy file CONF, for `env $(preload_env CONF) CMD...` (paths
# without blanks, as mktemp's are).
preload_env() {
	printf 'LD_PRELOAD=%s LIBSDP_CONFIG_FILE=%s\n' "$(preload_value | tr ' ' ':')" "$1"
}

# write_conf FILE LINES...: a policy file with the transport under test on
# (tcp-fallback is off by default, ib and iwarp on; SDP_TRANSPORTS, which
# the environment sets, has the last word anyway).
write_conf() {
	local f=$1
	shift
	{
		echo "transport enable $TEST_TRANSPORT"
		printf '%s\n' "$@"
	} >"$f"
}
