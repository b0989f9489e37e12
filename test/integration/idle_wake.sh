#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# An idle process costs nothing (doc/fastpath.md, step 5, "What the
# progress thread keeps"): with 200 SDP connections open and nothing
# moving, and nothing with a deadline, the progress thread sleeps without
# a timeout.  One preloaded process (python3) holds both ends of
# CONNS connections and then sleeps; the check counts the progress
# thread's wakeups (sdpstat's progress_wakeups) over a quiet spell
# between two syncs (the close of a socket never connected, which brings
# the process's counters to its statistics file and moves nothing): a
# tick would add one per 100 ms.  The spell's length changes only how
# many such wakeups there would be, not the verdict: at most 4 are
# allowed.
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

def sync():
    # The counters reach the file when a socket closes too: a socket
    # never connected moves nothing, so that the spell measured holds
    # no exchange of its own (on verbs one costs completions, and the
    # bytes it moves start buf_idle_ms's idle sweeps).
    socket.socket(fam, socket.SOCK_STREAM).close()

exchange()
signal.signal(signal.SIGUSR1, lambda *_: None)
k = 0
while True:
    with open(os.path.join(tmp, "synced.%d" % k), "w") as f:
        f.write("ok\n")
    signal.pause()
    sync()
    k += 1
PY
env $PRE python3 "$TMP/hold.py" "$TEST_HOST" "$CONNS" "$TMP" >"$TMP/hold.out" 2>&1 &
holder=$!
# The holder's counters as of its k-th sync (0: the set-up's end).
synced() {
	for _ in $(seq 600); do
		[ -s "$TMP/synced.$1" ] && return 0
		kill -0 "$holder" 2>/dev/null || break
		sleep 0.1
	done
	kill "$holder" 2>/dev/null
	fail "the holder did not come to sync $1: $(cat "$TMP/hold.out")"
}
synced 0
sdp=$(grep -c "connected to $TEST_HOST:[0-9]* over SDP" "$TMP/sdp.log")
# The holder's next sync; w: its progress_wakeups after it, d: its
# progress_fd_drives (wakeups for an fd, not a timeout or a kick).
k=0
sync_holder() {
	k=$((k + 1))
	kill -USR1 "$holder"
	synced $k
	read -r w d <<<"$(sdpstat_counters "$holder" progress_wakeups progress_fd_drives)"
}
# Let the set-up's last deadlines (iWARP's first nudges, three ticks a
# connection; the listener's pending children; the idle sweeps its
# one-byte exchange started) pass: in a loaded guest they may still be
# running a second after the set-up, and trickle in for longer (on siw
# at host load 9, 6 wakeups in a judged spell after a second with 4), so
# wait for one second-long spell with at most 1 wakeup (for at most the
# time limit's scale of 5 s), then count over the 2 s spell that is
# judged.  A tick that never stops (10 a second) fails both.
sync_holder
a=$w setup=$w
for _ in $(seq "$(slow 5)"); do
	sleep 1
	sync_holder
	case $a$w in '' | *[!0-9]*) break ;; esac
	settled=$((w - a))
	a=$w
	[ "$settled" -le 1 ] && break
done
d0=$d
sleep 2
sync_holder
b=$w
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
case $a$b in
'' | *[!0-9]*) fail "sdpstat gave no progress_wakeups for the holder: $a $b" ;;
esac
[ "$sdp" -eq "$CONNS" ] || fail "$sdp of $CONNS connections went over SDP"
if [ $((b - a)) -gt 4 ]; then
	fail "the idle holder's progress thread woke $((b - a)) times with $CONNS idle connections (wanted at most 4; it drove an fd $((d - d0)) times)"
fi
log "ok   $CONNS idle connections: the progress thread woke $((b - a)) times (after $setup during the set-up, $((a - setup)) while it settled)"
log "PASS"
exit 0
