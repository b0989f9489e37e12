#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The differential conformance harness (doc/conformance.md): every
# scenario of test/conform/scenarios.txt runs natively on kernel TCP, twice
# (the transcripts must be equal: the table itself is deterministic), then
# under LD_PRELOAD=libsdp.so with every socket on SDP ("use both" for
# servers and clients) on TEST_TRANSPORT, and each scenario's transcript
# must be the native one, but for the rows marked "xdiff:" (an expected
# difference, printed with its reason).  The preload's connection log
# must show SDP connections, all on TEST_TRANSPORT.  Then a short run of
# the random differential runner: CONFORM_RANDOM sequences (200 on the
# software transport, 50 on an RDMA one, whose guest runs emulated) from
# CONFORM_SEED (by default one that changes with every run; it is
# printed, so a difference can be run again), stopping early rather than
# late when the machine is slow (--max-seconds, scaled by TEST_SLOW): the
# count it ran is printed.  The long run is test/conform/long_run.sh.
#
# Skips (77) after the native runs when libsdp.so is not built, or when
# the build is sanitized (as preload_api.sh).
: "${TEST_LIMIT:=500}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

PROG="$top_builddir/test/conform/conform"
TABLE="$top_srcdir/test/conform/scenarios.txt"
LIB="$top_builddir/.libs/libsdp.so"
[ -x "$PROG" ] || fail "$PROG is not built"

if h6=$(ipv6_host); then
	export TEST_HOST6=$h6
	log "IPv6 address: $h6"
else
	log "no IPv6 address here: the IPv6 scenarios are skipped (and print so on both runs)"
fi

nscen=$("$PROG" --list "$TABLE" | wc -l) || fail "the table does not parse"

# run_table OUT [env...]: the whole table, its transcript in OUT.
run_table() {
	local out=$1 rc
	shift
	run_with_timeout 200 env "$@" "$PROG" "$TABLE" >"$out" 2>"$out.err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		sed 's/^/  /' "$out.err"
		grep -E 'SYNTAX ERROR' "$out" | sed 's/^/  /'
		return "$rc"
	fi
}

# --- natively, twice -----------------------------------------------------------
run_table "$TMP/native.out" || fail "the native run failed: exit $(status_text $?)"
run_table "$TMP/native2.out" || fail "the second native run failed"
if ! cmp -s "$TMP/native.out" "$TMP/native2.out"; then
	diff -u "$TMP/native.out" "$TMP/native2.out" | sed 's/^/  /'
	fail "two native runs differ: a scenario observes timing (fix the row or the normalization)"
fi
skipped=$(grep -c '^  skipped:' "$TMP/native.out")
log "native: $nscen scenarios, twice the same transcript ($skipped skipped here)"

if is_sanitized; then
	skip "sanitized build: the preloaded run needs the sanitizer runtime preloaded first"
fi
if [ ! -e "$LIB" ]; then
	skip "libsdp.so not built ($LIB)"
fi

# --- under the preload -------------------------------------------------------------
CONF="$TMP/sdp.conf"
CLOG="$TMP/conn.log"
write_conf "$CONF" "use both server * *:*" "use both client * *:*" \
	"log min-level 7 destination file $CLOG"
run_table "$TMP/sdp.out" LD_PRELOAD="$LIB" LIBSDP_CONFIG_FILE="$CONF" ||
	fail "the preloaded run failed: exit $(status_text $?)"
if grep -q 'cannot be preloaded' "$TMP/sdp.out.err"; then
	sed 's/^/  stderr: /' "$TMP/sdp.out.err"
	fail "the library was not preloaded"
fi

# check_log LOG WHAT: SDP connections in LOG, every one on TEST_TRANSPORT.
check_log() {
	local n other
	n=$(grep -Ec "(over SDP|accepted an SDP connection) \($TEST_TRANSPORT\)" "$1" 2>/dev/null)
	other=$(grep -E "(over SDP|accepted an SDP connection) \(" "$1" 2>/dev/null |
		grep -Ev "\($TEST_TRANSPORT\)" | head -n 3)
	if [ "${n:-0}" -eq 0 ] || [ -n "$other" ]; then
		[ -z "$other" ] || printf '%s\n' "$other" | sed 's/^/  log: /'
		fail "$2: the SDP connections did not all run on $TEST_TRANSPORT (${n:-0} did)"
	fi
	log "$2: ${n:-0} SDP connections, all over $TEST_TRANSPORT"
}
check_log "$CLOG" "table"

# Each scenario's transcript in a file of its own, by name.
split_out() {
	mkdir -p "$2"
	awk -v d="$2" '/^== / { f = d "/" $2 } f { print > f }' "$1"
}
split_out "$TMP/native.out" "$TMP/n"
split_out "$TMP/sdp.out" "$TMP/s"

# Only the scenarios that differ or are marked are looked at one by one
# (one process per file costs about a minute in the emulated guest).
total=$(find "$TMP/n" -type f | wc -l)
changed=$(diff -rq "$TMP/n" "$TMP/s" 2>&1 |
	sed -n 's|^Files .*/n/\([^ ]*\) and .* differ$|\1|p; s|^Only in .*/n: \(.*\)$|\1|p')
marked=$(grep -l '^xdiff: ' "$TMP"/n/* 2>/dev/null | sed 's|.*/||')
failed=0 xd=0
same=$((total - $(printf '%s\n' "$changed" | grep -c .)))
for name in $(printf '%s\n' "$changed" "$marked" | sort -u); do
	f=$TMP/n/$name
	reason=$(sed -n 's/^xdiff: //p' "$f")
	if ! printf '%s\n' "$changed" | grep -qxF "$name"; then
		log "note: $name is marked xdiff but matches now: remove its mark ($reason)"
		continue
	fi
	if [ -n "$reason" ]; then
		xd=$((xd + 1))
		log "expected difference: $name: $reason"
		diff "$f" "$TMP/s/$name" | grep '^[<>]' | head -n 6 | sed 's/^/    /'
		continue
	fi
	failed=$((failed + 1))
	log "FAIL $name: the transcript under the preload differs (- native, + SDP):"
	diff -u "$f" "$TMP/s/$name" | tail -n +3 | sed 's/^/  /'
done
log "table: $nscen scenarios: $same the same on SDP, $xd expected differences, $failed unexpected"
if [ "$failed" -ne 0 ]; then
	if [ -s "$TMP/sdp.out.err" ]; then
		log "stderr of the preloaded run (last 20 lines):"
		tail -n 20 "$TMP/sdp.out.err" | sed 's/^/  stderr: /'
	fi
	fail "$failed scenarios differ on SDP"
fi

# --- random sequences ----------------------------------------------------------------
if [ -z "${CONFORM_RANDOM:-}" ]; then
	if [ "$TEST_TRANSPORT" = tcp-fallback ]; then CONFORM_RANDOM=200; else CONFORM_RANDOM=50; fi
fi
: "${CONFORM_SEED:=$(( $(date +%s) % 100000 * 100000 ))}"
RLOG="$TMP/random.log"
write_conf "$CONF.random" "use both server * *:*" "use both client * *:*" \
	"log min-level 7 destination file $RLOG"
log "random: $CONFORM_RANDOM sequences from seed $CONFORM_SEED (CONFORM_SEED=$CONFORM_SEED to run them again)"
run_with_timeout 300 "$PROG" --random "$CONFORM_SEED" "$CONFORM_RANDOM" --max-seconds "$(slow 90)" \
	--sdp-env "LD_PRELOAD=$LIB LIBSDP_CONFIG_FILE=$CONF.random" >"$TMP/random.out" 2>&1
rc=$?
sed 's/^/  /' "$TMP/random.out"
[ "$rc" -eq 0 ] || fail "random sequences differ on SDP (exit $(status_text "$rc")): each above, shrunk to a row for the table"
check_log "$RLOG" "random"
log "PASS"
exit 0
