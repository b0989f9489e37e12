#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# An idle process costs nothing (doc/fastpath.md, step 5, "What the
# progress thread keeps"): with 200 SDP connections open and nothing
# moving, and nothing with a deadline, the progress thread sleeps without
# a timeout.  One preloaded process (python3) holds both ends of
# CONNS connections and then sleeps; the check counts the progress
# thread's wakeups (sdpstat's progress_wakeups) over a quiet spell
# between two one-byte exchanges (a data call is what brings the
# process's counters to its statistics file): a tick would add one per
# 100 ms.  The spell's length changes only how many such wakeups there
# would be, not the verdict: at most 4 are allowed, for the second
# exchange itself.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null 2>&1 || skip "no python3"
CONNS=200
# A verbs connection end registers 8 MiB of buffers: in the guest 200
# connections (400 ends in one process) would not fit.
if [ -n "${VM_NAME:-}" ]; then
	CONNS=20
fi
export SDP_STATS_DIR=$TMP/stats
mkdir -p "$SDP_STATS_DIR"

write_conf "$TMP/sdp.conf" "log min-level 7 destination file $TMP/sdp.log" \
	"use both server * *:*" "use both client * *:*"
PRE=$(preload_env "$TMP/sdp.conf")

cat >"$TMP/hold.py" <<'PY'
import os, signal, socket, sys
host, n, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
lsn = socket.socket(fam, socket.SOCK_STREAM)
lsn.bind((host, 0))
lsn.listen(n)
port = lsn.getsockname()[1]
keep = []
for _ in range(n):
    c = socket.socket(fam, socket.SOCK_STREAM)
    c.connect((host, port))
    a, _ = lsn.accept()
    keep.append((c, a))

def exchange():
    # One byte each way on the first connection: the process's counters
    # reach its statistics file on a data call.
    c, a = keep[0]
    c.sendall(b"x")
    if a.recv(1) != b"x":
        sys.exit("lost a byte")

exchange()
signal.signal(signal.SIGUSR1, lambda *_: None)
k = 0
while True:
    with open(os.path.join(tmp, "synced.%d" % k), "w") as f:
        f.write("ok\n")
    signal.pause()
    exchange()
    k += 1
PY
env $PRE python3 "$TMP/hold.py" "$TEST_HOST" "$CONNS" "$TMP" >"$TMP/hold.out" 2>&1 &
holder=$!
# The holder's counters as of its k-th exchange (0: the set-up's end).
synced() {
	for _ in $(seq 600); do
		[ -s "$TMP/synced.$1" ] && return 0
		kill -0 "$holder" 2>/dev/null || break
		sleep 0.1
	done
	kill "$holder" 2>/dev/null
	fail "the holder did not come to exchange $1: $(cat "$TMP/hold.out")"
}
synced 0
sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
# Let the set-up's last deadlines (first nudges, the listener's pending
# children) pass, then count over a quiet spell between two exchanges.
sleep 1
kill -USR1 "$holder"
synced 1
a=$(sdpstat_counters "$holder" progress_wakeups)
sleep 2
kill -USR1 "$holder"
synced 2
b=$(sdpstat_counters "$holder" progress_wakeups)
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
case $a$b in
'' | *[!0-9]*) fail "sdpstat gave no progress_wakeups for the holder: $a $b" ;;
esac
[ "$sdp" -eq "$CONNS" ] || fail "$sdp of $CONNS connections went over SDP"
if [ $((b - a)) -gt 4 ]; then
	fail "the idle holder's progress thread woke $((b - a)) times with $CONNS idle connections (wanted at most 4)"
fi
log "ok   $CONNS idle connections: the progress thread woke $((b - a)) times (after $a during the set-up)"
log "PASS"
exit 0
