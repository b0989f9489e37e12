#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# epoll_wait on a set of many SDP members looks only at the members that
# can have news (doc/fastpath.md, step 3: the ready list), not at every
# member on every call.  epoll_ready makes N connections to itself, puts
# the N accepted ends in one level-triggered set and, round after round,
# makes one of them readable; the check counts the members the reports
# looked at (sdpstat's epoll_looks): a scan looks at N per epoll_wait, the
# ready list at the ready member and the few that were ready or touched
# since the last report.  A count, whatever the speed of the machine.
# The set's doorbell writes (watch_writes) are logged, not checked: how
# many there are depends on whether the thread is asleep yet when the
# progress thread drives the member (test_states' watch_gate test checks
# one write per batch of changes).
. "$(dirname "$0")/lib.sh"

ER=$(prog epoll_ready)
N=100
# In the guest each verbs connection registers its buffers on both ends,
# 100 of them one after another is a long set-up under emulation; 50
# members still tell the ready list (a few looks a round) from a scan (50).
if [ -n "${VM_NAME:-}" ]; then
	N=50
fi
ROUNDS=200
export SDP_STATS_DIR=$TMP/stats
mkdir -p "$SDP_STATS_DIR"

write_conf "$TMP/sdp.conf" "log min-level 7 destination file $TMP/sdp.log" \
	"use both server * *:*" "use both client * *:*"
PRE=$(preload_env "$TMP/sdp.conf")

env $PRE "$ER" "$TEST_HOST" "$N" "$ROUNDS" "$TMP/done" >"$TMP/out" 2>&1 &
pid=$!
for _ in $(seq 600); do
	[ -e "$TMP/done" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if [ ! -e "$TMP/done" ]; then
	kill "$pid" 2>/dev/null
	fail "epoll_ready did not finish: $(cat "$TMP/out")"
fi
read -r looks ww empty <<<"$(sdpstat_counters "$pid" epoll_looks watch_writes transport_empty_reads)"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
waits=$(sed -n 's/^rounds=[0-9]* waits=\([0-9]*\)$/\1/p' "$TMP/out")
[ -n "$waits" ] || fail "no result: $(cat "$TMP/out")"
sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
[ "$sdp" -eq "$N" ] || fail "$sdp of $N connections went over SDP"
case $looks$ww in
'' | *[!0-9]*) fail "sdpstat gave no epoll_looks or watch_writes: $looks $ww" ;;
esac
# Every round looks at its ready member at least once.
[ "$looks" -ge "$ROUNDS" ] || fail "$looks looks in $ROUNDS rounds: the counter does not count"
if [ "$looks" -ge $((ROUNDS * 8)) ]; then
	fail "$looks members looked at in $waits epoll_wait calls over $ROUNDS rounds with one ready member each (a scan of $N members per call; wanted fewer than $((ROUNDS * 8)))"
fi
log "ok   $ROUNDS rounds, $waits epoll_wait calls, $looks members looked at ($N members), doorbell writes $ww, empty transport reads $empty"
log "PASS"
exit 0
