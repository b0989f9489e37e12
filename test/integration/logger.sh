#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# libsdp's log lines go to libc, whatever the program did to its stderr
# (common/sys.h, common/log.c):
#   - stderr is a socket whose SDP connect is in flight: a log line written
#     then used to enter the switch, which fell back to TCP and logged
#     that, under the logger's lock: a self-deadlock (issue 19);
#   - stderr is an established SDP connection: log lines must not reach
#     the peer as data;
#   - stderr is a pipe whose reader is gone: a log line must not kill the
#     program with SIGPIPE.
# Each case runs a python3 program under the preload, with SIGPIPE at its
# default action, within a time limit.
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
[ "$TEST_TRANSPORT" = tcp-fallback ] ||
	skip "the in-flight case needs a silent listener on the SDP port, which only tcp-fallback has"
PYENV="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

cat >"$TMP/inflight.py" <<'PYEOF'
import os, random, signal, socket, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for _ in range(200):
    P = random.randint(20000, 40000)
    try:
        mute = socket.socket(); mute.bind((sys.argv[1], P + 20000)); mute.listen(8)
        srv = socket.socket(); srv.bind((sys.argv[1], P)); srv.listen(8)
        break
    except OSError:
        pass
c = socket.socket(); c.setblocking(False)
c.connect_ex((sys.argv[1], P))  # SDP attempt: the silent listener never answers
os.dup2(c.fileno(), 2)          # stderr is that socket now
time.sleep(0.5)                 # past fallback_timeout_ms
c2 = socket.create_connection((sys.argv[1], P))   # logs a line to fd 2
print("returned", flush=True)
PYEOF
write_conf "$TMP/inflight.conf" "log min-level 7" "use tcp server * *:*" "use both client * *:*"
out=$(run_with_timeout 30 env $PYENV SDP_FALLBACK_TIMEOUT_MS=300 $(preload_env "$TMP/inflight.conf") \
	python3 "$TMP/inflight.py" "$TEST_HOST" 2>/dev/null)
[ "$out" = returned ] && log "ok   a log line to a stderr whose SDP connect is in flight" ||
	bad "stderr with an SDP connect in flight: the program $( [ -n "$out" ] && echo "said '$out'" || echo "hung or died")"

cat >"$TMP/established.py" <<'PYEOF'
import os, signal, socket, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen(8)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
os.dup2(c.fileno(), 2)          # stderr is an SDP connection now
for i in range(3):              # each connection makes the switch log lines
    c2 = socket.create_connection(l.getsockname()); s2, _ = l.accept(); c2.close(); s2.close()
c.sendall(b"data")              # what the program itself sends
s.settimeout(1)
got = b""
try:
    while len(got) < 4096:
        d = s.recv(4096)
        if not d:
            break
        got += d
except socket.timeout:
    pass
print(repr(got), flush=True)
PYEOF
write_conf "$TMP/sdp.conf" "log min-level 1" "use both server * *:*" "use both client * *:*"
out=$(run_with_timeout 30 env $PYENV $(preload_env "$TMP/sdp.conf") python3 "$TMP/established.py" \
	"$TEST_HOST" 2>/dev/null)
[ "$out" = "b'data'" ] && log "ok   stderr an SDP connection: the peer got the program's bytes, no log line" ||
	bad "stderr an SDP connection: the peer got $out"

cat >"$TMP/pipe.py" <<'PYEOF'
import os, signal, socket, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
r, w = os.pipe(); os.close(r)
os.dup2(w, 2)                   # stderr is a pipe nobody reads
l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen(8)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()   # logs lines
print("alive", flush=True)
PYEOF
out=$(run_with_timeout 30 env $PYENV $(preload_env "$TMP/sdp.conf") python3 "$TMP/pipe.py" "$TEST_HOST")
[ "$out" = alive ] && log "ok   a log line to a broken pipe on stderr: no SIGPIPE" ||
	bad "stderr a broken pipe: the program $( [ -n "$out" ] && echo "said '$out'" || echo "died")"

failures_end
log "PASS"
exit 0
