#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A process that sends a stream, closes and exits while its peer is still
# reading: the kernel would deliver the tail after the exit; libsdp is the
# stack in the process, so its exit waits (sdp/progress.c,
# progress_linger) while the connection moves, and gives up after
# exit_linger_ms without progress (before: exit_linger_ms in all, which a
# slow reader outlasted; cross-siw's sdpcat --convert bidir read a reset
# once, and sdpcat --bidir does here with SDP_EXIT_LINGER_MS=0).
#
# Both ends preloaded, exit_linger_ms 300.  Checks: a reader that takes
# about 2.5 s gets every byte, intact, then the end of the stream (no
# ECONNRESET), and the writer exits 0, also when the reader shut its side
# down first (the writer's exit then waits for the reader to close the
# transport; the reset that waiting prevents needs data still queued in
# the writer's kernel, which one host's loopback never holds: across two
# guests, cross-siw saw it); a reader that stops reading does
# not keep the writer from exiting: it gives up, and says so (a warning
# naming exit_linger_ms); a reader that has read everything and keeps its
# end open does not make the writer's exit wait at all (its engine
# acknowledged the writer's DisConn).
: "${TEST_LIMIT:=120}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
if is_sanitized; then
	# The leaks of python3 are not ours to report.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 7" "set exit_linger_ms 300" "use sdp server * *:*" "use sdp client * *:*"
P=$(preload_env "$conf")

cat >"$TMP/writer.py" <<'EOF'
import os, socket, sys
n = int(sys.argv[3])
ls = socket.socket()
ls.bind((sys.argv[1], 0))
ls.listen(1)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(ls.getsockname()[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
c, _ = ls.accept()
# (k * 7 + (k >> 10)) & 0xff repeats every 2**18 bytes.
period = bytes((k * 7 + (k >> 10)) & 0xff for k in range(1 << 18))
c.sendall((period * (n // len(period) + 1))[:n])
c.close()
ls.close()
if len(sys.argv) > 4 and sys.argv[4] == "_exit":
    # What a fork server's child does: no atexit, no destructors.
    os._exit(0)
sys.exit(0)
EOF

cat >"$TMP/reader.py" <<'EOF'
import socket, sys, time
host, port, n, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
chunk = int(sys.argv[5]) if len(sys.argv) > 5 else 8192
half = len(sys.argv) > 6 and sys.argv[6] == "half"
hold = len(sys.argv) > 6 and sys.argv[6] == "hold"
s = socket.socket()
# A reader that stops: its receive buffers, sized at the connect, cannot
# hold the whole stream, so the writer still has some of it at exit.
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096 if stop else 65536)
s.settimeout(60)
s.connect((host, port))
if half:
    # Its DisConn goes first: the writer's is the last of the two.
    s.shutdown(socket.SHUT_WR)
got = bytearray()
time.sleep(0.2)
try:
    while True:
        if stop and len(got) >= stop:
            # Stops reading: the writer must still exit, in its time.
            time.sleep(3)
            print("stopped at %d" % len(got))
            sys.exit(0)
        d = s.recv(chunk)
        if not d:
            if hold:
                # Keeps its end open after the end of the stream, as an
                # idle keep-alive client does.
                time.sleep(2)
            break
        got += d
        time.sleep(0.01)
except OSError as e:
    print("%s after %d of %d bytes" % (e.strerror, len(got), n))
    sys.exit(1)
period = bytes((k * 7 + (k >> 10)) & 0xff for k in range(1 << 18))
want = (period * (n // len(period) + 1))[:n]
print("ok" if got == want else "%d bytes, not the %d sent" % (len(got), n))
EOF

# run_case NAME BYTES STOP [_exit [CHUNK [half|hold]]]: a writer of BYTES
# and a reader (that stops after STOP bytes, 0: reads all; CHUNK bytes a
# read, 8 KiB by default; half: shuts its sending side down first; hold:
# keeps its end open 2 s after the end of the stream); sets WRC,
# ROUT, WERR.  With _exit the writer ends with _exit() instead of exit().
run_case() {
	local name=$1 n=$2 stop=$3 how=${4:-exit} chunk=${5:-8192} half=${6:-}
	rm -f "$TMP/$name.port"
	start_bg "$TMP/$name.werr" env $P python3 "$TMP/writer.py" "$TEST_HOST" "$TMP/$name.port" "$n" "$how"
	WPID=$BG_PID
	wait_for_file "$TMP/$name.port" 20 || fail "the writer did not start: $(head -c 2000 "$TMP/$name.werr")"
	run_with_timeout 60 env $P python3 "$TMP/reader.py" "$TEST_HOST" "$(cat "$TMP/$name.port")" \
		"$n" "$stop" "$chunk" $half >"$TMP/$name.rout" 2>"$TMP/$name.rerr"
	RRC=$?
	wait_pid "$WPID" 30
	WRC=$?
	ROUT=$(cat "$TMP/$name.rout")
	WERR=$TMP/$name.werr
	sdp=$(grep -Ec "over SDP \($TEST_TRANSPORT\)" "$TMP/$name.rerr")
	[ "$sdp" -ge 1 ] || bad "$name: the reader's connection was not over SDP ($TEST_TRANSPORT)"
}

# expect_all WHAT OK-TEXT: the reader of the last case got every byte and
# the end of the stream, and the writer exited 0.
expect_all() {
	if [ "$RRC" -ne 0 ] || [ "$ROUT" != ok ]; then
		bad "$1: exit $(status_text "$RRC"): $ROUT"
		grep -E 'warning|error' "$WERR" | head -n 5 | sed 's/^/  writer: /'
	elif [ "$WRC" -ne 0 ]; then
		bad "$1: writer exit $(status_text "$WRC")"
	else
		log "ok   $2"
	fi
}

# 2 MiB at 8 KiB per 10 ms: about 2.5 s of reading, the last of it after the
# writer's close (what its buffers and the reader's hold then).
N=$((2 << 20))
run_case slow "$N" 0
expect_all "slow reader" "a reader slower than exit_linger_ms gets all $N bytes and the end of the stream"

# _exit(): no exit() handlers.  12 MiB, more than the reader's receive
# ring holds (4 MiB by default), at 64 KiB per 10 ms: before _exit() was
# interposed, the reader on shm got 8 MiB, then a reset.
run_case slow_exit $((12 << 20)) 0 _exit 65536
expect_all "slow reader, the writer's _exit()" \
	"the same when the writer ends with _exit(), as a fork server's child does"

# The reader shut its side down at once: the writer has the reader's
# DisConn before it sends its own, yet the reader's credit updates for
# the tail still come after the writer's exit would have closed the
# transport (cross-siw's sdpcat --convert bidir read a reset again so).
run_case half "$N" 0 exit 8192 half
expect_all "slow reader that shut its side down first" \
	"the same when the reader's DisConn came first"

# The reader reads everything, then keeps its end open: the writer's
# exit does not wait for it (nor give up on it after exit_linger_ms),
# since the reader's engine acknowledged the writer's DisConn at once.
run_case hold $((256 << 10)) 0 exit 65536 hold
expect_all "a reader that keeps its end open" \
	"a reader that keeps its end open after the end of the stream gets it all"
if grep -q 'gave up on' "$WERR"; then
	bad "the writer's exit waited for a reader that keeps its end open: $(grep 'gave up' "$WERR" | head -n 1)"
else
	log "ok   the writer's exit did not wait for it"
fi

run_case stopped "$N" $((256 << 10))
if [ "$WRC" -ne 0 ]; then
	bad "writer exit $(status_text "$WRC") with a reader that stopped"
elif ! grep -q 'gave up on 1 connection(s) still closing (exit_linger_ms 300 without progress' "$WERR"; then
	bad "the writer did not say it gave up on a reader that stopped: $(grep -v '^$' "$WERR" | tail -n 3)"
else
	log "ok   a reader that stops reading: the writer exits, saying it gave up"
fi
# The same through _exit(), which gives up without a word (it logs
# nothing: it may run in a signal handler).
run_case stopped_exit "$N" $((256 << 10)) _exit
if [ "$WRC" -ne 0 ]; then
	bad "writer exit $(status_text "$WRC") after _exit() with a reader that stopped"
else
	log "ok   the same through _exit(): the writer exits"
fi
no_sanitizer_report "writer" "$TMP/slow.werr"
no_sanitizer_report "reader" "$TMP/slow.rerr"
failures_end
log "PASS"
