#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The long soak (issue 18): 10 GiB, checksummed, through many SDP
# connections at once, each both ways at the same time with seeded random
# write and read sizes, on every data path of the engine side by side --
# Bcopy, Read Zcopy, Write Zcopy, Transaction and mixed sizes
# (test/integration/soak_check.c says how each is forced and what is
# checked).  The short version is test/integration/soak.sh in make check.
#
#   test/soak/long_soak.sh BUILDDIR [-- soak_check options]
#
# Environment: SOAK_BYTES (10G), SOAK_CONNS (20), SOAK_ROUNDS (1: runs,
# each of SOAK_BYTES, seeds SOAK_SEED, +1, ...), SOAK_SEED (random; printed),
# SOAK_PRELOAD (0; 1: through libc under BUILDDIR's libsdp.so, soak_check
# --libc, which also proves the application's kernel TCP sockets carried
# nothing),
# TEST_TRANSPORT (tcp-fallback), TEST_HOST (127.0.0.1 on tcp-fallback; in
# the guest the RDMA interface's address), NICE (19).  Each round prints
# soak_check's figures (bytes, per mode, per path in the engine, duration,
# throughput, errors) and the process's CPU time; the last line sums the
# rounds.  Exit 1 when a round failed: a lost or corrupt byte, a count or
# XXH64 that differs, a reset, a hang (no byte moved for 120 s x
# TEST_SLOW), or a path that carried nothing.
#
# On the software transport, here:
#   test/soak/long_soak.sh build
# On rxe in the VM testbed (test/vm/README.md; the guest runs under
# emulation, so give it hours, and it has 2 GiB: 20 connections pin
# 2 x 20 x 8 MiB of buffers):
#   RUN_IN_VM_TIMEOUT=14400 test/vm/run-in-vm --devices rxe -- \
#       env TEST_TRANSPORT=ib test/soak/long_soak.sh build
# (iWARP: --devices siw and TEST_TRANSPORT=iwarp.)
set -u -o pipefail
build=${1:?usage: long_soak.sh BUILDDIR [-- soak_check options]}
shift
[ "${1:-}" = -- ] && shift
build=$(cd "$build" && pwd) || exit 2
prog=$build/test/integration/soak_check
[ -x "$prog" ] || { echo "long_soak: build $prog first (make -C $build check TESTS=)" >&2; exit 2; }

: "${TEST_TRANSPORT:=tcp-fallback}" "${SOAK_BYTES:=10G}" "${SOAK_CONNS:=20}"
: "${SOAK_ROUNDS:=1}" "${NICE:=19}"
: "${SOAK_SEED:=$(( ($(date +%s) ^ $$) & 0x7fffffff ))}"
# shellcheck source=SCRIPTDIR/../integration/test_host.sh
. "$(dirname "$0")/../integration/test_host.sh"
[ -n "$TEST_HOST" ] || { echo "long_soak: set TEST_HOST for $TEST_TRANSPORT" >&2; exit 2; }
if [ -z "${TEST_SLOW:-}" ]; then
	TEST_SLOW=1
	[ -n "${VM_NAME:-}" ] && TEST_SLOW=10
fi
export TEST_TRANSPORT TEST_HOST TEST_SLOW SDP_TRANSPORTS=$TEST_TRANSPORT
# As in soak.sh: a hold long enough that preemption does not turn every
# piggyback into a miss, and connects that survive a slow guest.
export SDP_TRANS_HOLD_US=${SDP_TRANS_HOLD_US:-$((20000 * TEST_SLOW))}
export SDP_CONNECT_TIMEOUT_MS=${SDP_CONNECT_TIMEOUT_MS:-$((10000 * TEST_SLOW))}

echo "long_soak: $SOAK_ROUNDS round(s) of $SOAK_BYTES over $SOAK_CONNS connections on" \
	"$TEST_TRANSPORT ($TEST_HOST), seed $SOAK_SEED, nice $NICE, $(date -u +%FT%TZ)"
failed=0 moved=0 secs=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/long_soak.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
run=()
if [ "${SOAK_PRELOAD:-0}" = 1 ]; then
	[ -e "$build/.libs/libsdp.so" ] || { echo "long_soak: no $build/.libs/libsdp.so" >&2; exit 2; }
	printf '%s\n' "transport enable $TEST_TRANSPORT" "use both server * *:*" \
		"use both client * *:*" >"$tmp/sdp.conf"
	run=(env "LD_PRELOAD=$build/.libs/libsdp.so" "LIBSDP_CONFIG_FILE=$tmp/sdp.conf"
	     "SDP_STATS_DIR=$tmp")
	set -- --libc "$@"
	echo "long_soak: through libc under the preload"
fi
for ((r = 0; r < SOAK_ROUNDS; r++)); do
	echo "long_soak: round $((r + 1)) of $SOAK_ROUNDS"
	TIMEFORMAT="long_soak: round $((r + 1)): %R s wall, %U s user, %S s system CPU"
	{ time nice -n "$NICE" "${run[@]}" "$prog" --host "$TEST_HOST" --conns "$SOAK_CONNS" \
		--bytes "$SOAK_BYTES" --seed $((SOAK_SEED + r)) --progress 30 "$@" 2>&1 |
		tee "$out"; } 2>&1
	rc=$?	# soak_check's: pipefail
	if [ "$rc" -ne 0 ]; then
		echo "long_soak: round $((r + 1)) FAILED (exit $rc); replay: --seed $((SOAK_SEED + r))"
		failed=$((failed + 1))
	fi
	# "N bytes (...) moved and checked in S s: ..."
	read -r b s < <(sed -n 's/^soak_check: \([0-9]*\) bytes .* in \([0-9.]*\) s:.*/\1 \2/p' "$out")
	moved=$((moved + ${b:-0}))
	secs=$(awk -v a="$secs" -v b="${s:-0}" 'BEGIN { print a + b }')
done
awk -v b="$moved" -v s="$secs" -v f="$failed" -v n="$SOAK_ROUNDS" 'BEGIN {
	printf "long_soak: total %.0f bytes (%.2f GiB) checked in %.1f s (%.3f Gbit/s), %d of %d round(s) failed\n",
	       b, b / 1073741824, s, (s > 0 ? b * 8 / s / 1e9 : 0), f, n }'
[ "$failed" -eq 0 ]
