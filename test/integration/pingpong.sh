#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Many small round trips in blocking calls, both ends preloaded
# (bench/preload_cost serve --echo and pingpong, a thread per connection
# on the server): each side sends 64 bytes and sleeps in read() for the
# answer, so a wakeup lost between a receive's last look at the socket and
# its sleep hangs the exchange for good (sockperf's "No valid observations
# found": the client waited in recvfrom() for the rest of its run).
# Several clients at once, so that the progress thread, which delivers
# when nobody waits, is busy too.  Checks that every exchange ends and
# that the connections were SDP ones.
. "$(dirname "$0")/lib.sh"

PC=$(prog preload_cost)
CLIENTS=3
ROUNDS=20000
if is_sanitized; then
	ROUNDS=3000
fi

write_conf "$TMP/sdp.conf" "log min-level 7 destination file $TMP/sdp.log" \
	"use both server * *:*" "use both client * *:*"
PRE=$(preload_env "$TMP/sdp.conf")

env $PRE "$PC" serve --port-file "$TMP/port" --echo --host "$TEST_HOST" >"$TMP/serve.out" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
	[ -s "$TMP/port" ] && break
	sleep 0.1
done
[ -s "$TMP/port" ] || fail "preload_cost serve did not start: $(cat "$TMP/serve.out")"

pids=()
for i in $(seq "$CLIENTS"); do
	run_with_timeout 60 env $PRE "$PC" pingpong "$TEST_HOST:$(cat "$TMP/port")" "$ROUNDS" 64 \
		>"$TMP/client.$i" 2>&1 &
	pids+=($!)
done
for i in $(seq "$CLIENTS"); do
	wait "${pids[$((i - 1))]}"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		bad "client $i: exit $(status_text "$rc")"
		sed 's/^/  /' "$TMP/client.$i"
	fi
done
kill "$SERVER" 2>/dev/null
wait "$SERVER" 2>/dev/null
[ "$failures" -eq 0 ] || fail "$failures of $CLIENTS clients did not finish $ROUNDS round trips"

sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
[ "$sdp" -eq "$CLIENTS" ] || fail "$sdp of $CLIENTS connections went over SDP: $(grep -E 'no SDP|TCP' "$TMP/sdp.log" | head -3)"
log "PASS: $CLIENTS x $ROUNDS round trips over SDP"
exit 0
