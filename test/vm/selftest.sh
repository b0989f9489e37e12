#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# test/vm/selftest.sh [--cold]: proves the RDMA testbed (test/vm/run-in-vm)
# works on this machine, and prints how long each part took.
#
#   setup      test/vm/setup (a cold cache build the first time; --cold
#              builds one from scratch in a temporary cache to time it)
#   one guest, --devices rxe,siw:
#              ibv_devices lists rxe0 and siw0, each ACTIVE on its own
#              interface; rping server+client on VM_ADDR_RXE (rdma_cm picks
#              rxe0) and on VM_ADDR_SIW (siw0); ib_send_bw -d rxe0 loopback
#              (no rdma_cm) and ib_send_bw -d siw0 -R (iWARP needs rdma_cm);
#              whether rping works on 127.0.0.1 (it does not: reported)
#   one guest, RUN_IN_VM_SHARED_NETDEV=1 --devices rxe,siw: both devices on
#              eth0; which one rdma_cm picks for eth0's address (reported)
#   exit status: run-in-vm -- false is 1, -- sh -c 'exit 7' is 7, a bad
#              option is 125, RUN_IN_VM_TIMEOUT is 124
#   cwd and environment, and clean output (nothing but the command's)
#   --two:     rping server in A, client in B, over rxe and over siw, and
#              ib_send_bw -d rxe0 from B to A
# Ends with "selftest: N passed, M failed"; exits 1 if anything failed.
# The runs inside the guests re-enter this script with --in-guest.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/selftest.sh"
RUN="$here/run-in-vm"

# --------------------------------------------------------- in a guest ---

# Both sides of each check print "CHECK ok|FAIL|INFO text" lines; the host
# counts them.
check() { # ok|FAIL|INFO TEXT
	printf 'CHECK %s %s\n' "$1" "$2"
}

# listening_dev ADDR: the device of the rdma_cm listener on ADDR (waits 10 s).
listening_dev() {
	local i line
	for i in $(seq 100); do
		line=$(rdma res show cm_id 2>/dev/null | grep "state LISTEN" | grep "src-addr $1:")
		if [ -n "$line" ]; then
			printf '%s\n' "$line" | sed -n 's/^link \([^/]*\)\/.*/\1/p' | head -n 1
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# rping_local ADDR WANT_DEV: server and client on ADDR in this guest.
rping_local() {
	local addr=$1 want=$2 out=/tmp/rping.$$ s c dev
	timeout 60 rping -s -a "$addr" -C 5 -V >"$out.s" 2>&1 &
	s=$!
	dev=$(listening_dev "$addr") || dev="(no listener)"
	timeout 60 rping -c -a "$addr" -C 5 -V >"$out.c" 2>&1
	c=$?
	wait "$s"
	s=$?
	if [ "$s" -eq 0 ] && [ "$c" -eq 0 ] && [ "$dev" = "$want" ] &&
		! grep -qi 'fail\|error' "$out.s" "$out.c"; then
		check ok "rping server+client on $addr over $dev"
	else
		check FAIL "rping on $addr: server exit $s, client exit $c, listener on '$dev' (want $want): $(cat "$out.s" "$out.c" | tr '\n' ' ')"
	fi
}

# perftest_pair NAME SERVER_ARGS... -- CLIENT_ARGS...: ib_send_bw both sides.
perftest_pair() {
	local name=$1 sargs=() cargs=() s c i out=/tmp/perf.$$
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do sargs+=("$1"); shift; done
	shift
	cargs=("$@")
	timeout 120 ib_send_bw "${sargs[@]}" >"$out.s" 2>&1 &
	s=$!
	for i in $(seq 50); do
		timeout 120 ib_send_bw "${cargs[@]}" >"$out.c" 2>&1
		c=$?
		[ "$c" -eq 0 ] && break
		grep -q "Couldn't connect\|Unable to init the socket connection" "$out.c" || break
		sleep 0.2
	done
	wait "$s"
	s=$?
	local bw
	bw=$(awk '$1 == 65536 { print $4 " MB/s" }' "$out.c" | tail -n 1)
	if [ "$s" -eq 0 ] && [ "$c" -eq 0 ] && [ -n "$bw" ]; then
		check ok "$name: $bw (64 KiB messages, TCG: not a real figure)"
	else
		check FAIL "$name: server exit $s, client exit $c: $(tail -n 5 "$out.s" "$out.c" | tr '\n' ' ')"
	fi
}

guest_one() {
	local devs
	devs=$(ibv_devices | awk 'NR > 2 { print $1 }' | tr '\n' ' ')
	case " $devs " in
	*" rxe0 "*) case " $devs " in
		*" siw0 "*) check ok "ibv_devices lists rxe0 and siw0" ;;
		*) check FAIL "ibv_devices lists: $devs" ;;
		esac ;;
	*) check FAIL "ibv_devices lists: $devs" ;;
	esac
	for d in rxe0 siw0; do
		if rdma link show "$d/1" | grep -q 'state ACTIVE'; then
			check ok "$(rdma link show "$d/1" | sed 's/ *$//')"
		else
			check FAIL "$d: $(rdma link show "$d/1" 2>&1)"
		fi
	done
	rping_local "$VM_ADDR_RXE" rxe0
	rping_local "$VM_ADDR_SIW" siw0
	perftest_pair "ib_send_bw -d rxe0 loopback" -d rxe0 -s 65536 -n 500 -- \
		-d rxe0 -s 65536 -n 500 "$VM_ADDR_RXE"
	perftest_pair "ib_send_bw -d siw0 -R loopback (rdma_cm)" -d siw0 -R -s 65536 -n 500 -- \
		-d siw0 -R -s 65536 -n 500 "$VM_ADDR_SIW"

	# 127.0.0.1: the soft devices serve eth0/eth1, not lo.
	local s c msg
	timeout 20 rping -s -a 127.0.0.1 -C 2 -V >/tmp/lo.s 2>&1 &
	s=$!
	sleep 0.5
	timeout 15 rping -c -a 127.0.0.1 -C 2 -V >/tmp/lo.c 2>&1
	c=$?
	kill "$s" 2>/dev/null
	wait "$s" 2>/dev/null
	msg=$(head -n 1 /tmp/lo.c)
	if [ "$c" -eq 0 ]; then
		check INFO "127.0.0.1 WORKS with rxe0+siw0 (rping client exit 0): the README says otherwise, update it"
	else
		check INFO "127.0.0.1 does not work (rping client exit $c: $msg); use VM_ADDR"
	fi
}

guest_shared() {
	local s dev
	rdma link show | sed 's/^/  /'
	timeout 60 rping -s -a "$VM_ADDR" -C 3 -V >/tmp/sh.s 2>&1 &
	s=$!
	dev=$(listening_dev "$VM_ADDR") || dev="(no listener)"
	timeout 60 rping -c -a "$VM_ADDR" -C 3 -V >/tmp/sh.c 2>&1
	wait "$s"
	check INFO "both devices on eth0: rdma_cm binds $VM_ADDR to $dev (the first registered); the other is unreachable by address"
	[ "$dev" = rxe0 ] && check ok "shared eth0: rping on $VM_ADDR uses rxe0, the first device" ||
		check FAIL "shared eth0: rping on $VM_ADDR used '$dev', expected rxe0"
}

# The two-guest pair: A serves, B connects (retrying until A listens).
guest_two_server() {
	local s
	for a in "$VM_ADDR_RXE" "$VM_ADDR_SIW"; do
		timeout 120 rping -s -a "$a" -C 5 -V >/tmp/two.s 2>&1
		s=$?
		[ "$s" -eq 0 ] && check ok "A: rping server on $a served B" ||
			check FAIL "A: rping server on $a exit $s: $(tr '\n' ' ' </tmp/two.s)"
	done
	timeout 120 ib_send_bw -d rxe0 -s 65536 -n 500 >/tmp/two.bw 2>&1
	s=$?
	[ "$s" -eq 0 ] && check ok "A: ib_send_bw server on rxe0 done" ||
		check FAIL "A: ib_send_bw server exit $s: $(tail -n 5 /tmp/two.bw | tr '\n' ' ')"
}

guest_two_client() {
	local c i
	for a in "$VM_PEER_RXE" "$VM_PEER_SIW"; do
		for i in $(seq 100); do
			timeout 60 rping -c -a "$a" -C 5 -V >/tmp/two.c 2>&1
			c=$?
			[ "$c" -eq 0 ] && break
			sleep 0.3
		done
		[ "$c" -eq 0 ] && check ok "B: rping client to $a (peer, $i attempt(s))" ||
			check FAIL "B: rping client to $a exit $c: $(tr '\n' ' ' </tmp/two.c)"
	done
	for i in $(seq 100); do
		timeout 120 ib_send_bw -d rxe0 -s 65536 -n 500 "$VM_PEER_RXE" >/tmp/two.bw 2>&1
		c=$?
		[ "$c" -eq 0 ] && break
		sleep 0.3
	done
	local bw
	bw=$(awk '$1 == 65536 { print $4 " MB/s" }' /tmp/two.bw | tail -n 1)
	[ "$c" -eq 0 ] && check ok "B: ib_send_bw -d rxe0 to A over the wire: $bw" ||
		check FAIL "B: ib_send_bw client exit $c: $(tail -n 5 /tmp/two.bw | tr '\n' ' ')"
}

if [ "${1:-}" = --in-guest ]; then
	case ${2:-} in
	one) guest_one ;;
	shared) guest_shared ;;
	two-server) guest_two_server ;;
	two-client) guest_two_client ;;
	*) echo "selftest: unknown guest part '${2:-}'" >&2; exit 2 ;;
	esac
	exit 0
fi

# ------------------------------------------------------------ the host ---

cold=0
case ${1:-} in
--cold) cold=1 ;;
'') ;;
*) echo "usage: $0 [--cold]" >&2; exit 2 ;;
esac

pass=0 failed=0
timings=()
ok() { pass=$((pass + 1)); printf 'ok    %s\n' "$*"; }
bad() { failed=$((failed + 1)); printf 'FAIL  %s\n' "$*"; }
info() { printf 'info  %s\n' "$*"; }
now() { printf '%s\n' "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vm-selftest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# vm NAME EXPECTED_STATUS [run-in-vm args...]: run, time, tally the CHECK
# lines of the guest part and the exit status.
vm() {
	local name=$1 want=$2 t rc ready
	shift 2
	t=$(now)
	RUN_IN_VM_VERBOSE=1 "$RUN" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	ready=$(sed -n 's/.*guest ready after \([0-9.]*\) s.*/\1/p' "$tmp/err" | sort -n | tail -n 1)
	timings+=("$(printf '%-34s %6s s total, %5s s boot to command' "$name" "$(since "$t")" "${ready:--}")")
	while read -r _ what text; do
		case $what in
		ok) ok "$text" ;;
		FAIL) bad "$text" ;;
		INFO) info "$text" ;;
		esac
	done < <(sed -n 's/^\(\[[AB]\] \)\{0,1\}CHECK /CHECK /p' "$tmp/out")
	if [ "$rc" -eq "$want" ]; then
		ok "$name: run-in-vm exit $rc"
	else
		bad "$name: run-in-vm exit $rc, expected $want"
		sed 's/^/    | /' "$tmp/out" "$tmp/err" | tail -n 40
	fi
}

echo "== setup"
if [ "$cold" -eq 1 ]; then
	export RUN_IN_VM_CACHE="$tmp/cache"
	info "--cold: building a new cache in $RUN_IN_VM_CACHE"
fi
t=$(now)
if "$here/setup" 2>"$tmp/setup.err"; then
	built=$(grep -c 'building the guest' "$tmp/setup.err")
	s=$(since "$t")
	if [ "$built" -gt 0 ]; then
		ok "setup: cache built in $s s"
		timings+=("$(printf '%-34s %6s s' "setup (cold: download, siw, initramfs)" "$s")")
	else
		ok "setup: cache already fresh ($s s)"
		timings+=("$(printf '%-34s %6s s' "setup (warm: nothing to do)" "$s")")
	fi
	sed 's/^/    /' "$tmp/setup.err"
else
	bad "setup failed"
	cat "$tmp/setup.err"
	printf 'selftest: %d passed, %d failed\n' "$pass" "$((failed + 1))"
	exit 1
fi

echo "== one guest, rxe0 on eth0 and siw0 on eth1"
vm "one guest rxe,siw" 0 --devices rxe,siw -- "$self" --in-guest one

echo "== one guest, rxe0 and siw0 both on eth0"
RUN_IN_VM_SHARED_NETDEV=1 vm "one guest, shared eth0" 0 --devices rxe,siw -- "$self" --in-guest shared

echo "== exit status"
vm "run-in-vm -- false" 1 -- false
vm "run-in-vm -- sh -c 'exit 7'" 7 -- sh -c 'exit 7'
vm "run-in-vm --devices bogus" 125 --devices bogus -- true
RUN_IN_VM_TIMEOUT=20 vm "RUN_IN_VM_TIMEOUT=20 -- sleep 600" 124 -- sleep 600

echo "== current directory, environment, clean output"
mkdir -p "$tmp/some dir"
(
	cd "$tmp/some dir" || exit 1
	export SDP_SELFTEST='a b$c' LIBSDP_SELFTEST=2 TEST_SELFTEST="it's" top_builddir=/tb \
		top_srcdir=/ts EXTRA_ONE=one NOT_PASSED=no
	t=$(now)
	RUN_IN_VM_ENV="EXTRA_ONE" "$RUN" -- sh -c \
		'pwd; echo "$SDP_SELFTEST|$LIBSDP_SELFTEST|$TEST_SELFTEST|$top_builddir|$top_srcdir|$EXTRA_ONE|${NOT_PASSED-unset}|$PATH"; echo to-stderr >&2' \
		>"$tmp/env.out" 2>"$tmp/env.err"
	echo "$? $(since "$t")" >"$tmp/env.rc"
)
read -r rc secs <"$tmp/env.rc"
timings+=("$(printf '%-34s %6s s total' "cwd/env (plain run)" "$secs")")
expect_out=$(printf '%s\n%s\n' "$(cd "$tmp/some dir" && pwd -P)" "a b\$c|2|it's|/tb|/ts|one|unset|$PATH")
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/env.out")" = "$expect_out" ]; then
	ok "cwd (with a blank) and SDP_ LIBSDP_ TEST_ top_* PATH RUN_IN_VM_ENV passed, others not"
else
	bad "cwd/env: exit $rc, got:"
	sed 's/^/    | /' "$tmp/env.out"
	echo "    expected:"
	printf '%s\n' "$expect_out" | sed 's/^/    | /'
fi
if [ "$(cat "$tmp/env.err")" = to-stderr ]; then
	ok "stderr carries only the command's stderr (no console noise)"
else
	bad "stderr was:"
	sed 's/^/    | /' "$tmp/env.err"
fi

echo "== two guests (--two), rping A <- B over rxe and siw, ib_send_bw over rxe"
vm "two guests rxe,siw" 0 --two --devices rxe,siw -- "$self" --in-guest two-server ::: \
	"$self" --in-guest two-client

echo "== timings"
printf '  %s\n' "${timings[@]}"
printf 'selftest: %d passed, %d failed\n' "$pass" "$failed"
[ "$failed" -eq 0 ]
