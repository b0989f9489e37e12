#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# An accept-then-fork server that puts each connection in an epoll set
# before it forks: the connection is relayed (doc/fork.md), and the child
# keeps copies of the descriptors of the parent's transport (a stale copy
# of the connection's socket, doc/fork.md "Stale copies").  The children
# stay alive after serving (workers that go on with other work), so those
# copies outlive the connection in the parent.
#
# The parent's engine must take the transport's descriptor out of every
# epoll set it put it in before that descriptor's number is given another
# file (a quiet eventfd once the peer is gone): a registration that
# outlives its socket (kept alive by a child's copy) and cannot be
# removed by number any more fires for ever with a pointer to a freed
# socket.  Before that was so, the server died or sent wrong bytes.
#
# Half the clients close with a reset (SO_LINGER 0), the error path of
# tcp-fallback.  Checks: every reply intact (bytes that differ by place and
# connection), the server alive at the end, its sdpstat counting every
# connection accepted over SDP and relayed, no sanitizer report.
: "${TEST_LIMIT:=300}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
case $TEST_TRANSPORT in
tcp-fallback | shm) ;;
*) skip "a relayed connection's transport descriptor is copied by fork on tcp-fallback and shm only (not $TEST_TRANSPORT)" ;;
esac
if is_sanitized; then
	# The leaks of python3 are not ours to report.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 6" "use both server * *:*" "use both client * *:*"
P=$(preload_env "$conf")

cat >"$TMP/page.py" <<'EOF'
def page(i):
    # Bytes that differ by place and connection: a shifted, repeated or
    # foreign piece shows.
    return bytes((k * 7 + i * 13 + (k >> 8)) & 0xff for k in range(100 + 997 * i))
EOF

cat >"$TMP/srv.py" <<'EOF'
import os, select, signal, socket, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from page import page

signal.signal(signal.SIGCHLD, signal.SIG_IGN)
# The children wait on r until this process is gone (their copies of w
# are closed), so every child outlives the connection it served.
r, w = os.pipe()
ls = socket.socket()
ls.bind((sys.argv[1], 0))
ls.listen(16)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(ls.getsockname()[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
while True:
    c, _ = ls.accept()
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN)
    if os.fork() == 0:
        os.close(w)
        ls.close()
        ep.poll(60)
        req = b""
        while not req.endswith(b"\n"):
            d = c.recv(100)
            if not d:
                os._exit(1)
            req += d
        c.sendall(page(int(req)))
        c.close()
        ep.close()
        os.read(r, 1)
        os._exit(0)
    ep.close()
    c.close()
EOF

cat >"$TMP/cli.py" <<'EOF'
import os, socket, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from page import page

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad = 0
for i in range(n):
    s = socket.create_connection((host, port), timeout=60)
    s.sendall(b"%d\n" % i)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    if got != page(i):
        print("connection %d: %d bytes, not the %d sent" % (i, len(got), len(page(i))))
        bad += 1
    if i % 2:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
print("ok" if not bad else "%d bad" % bad)
EOF

N=40
start_bg "$TMP/srv.err" env $P python3 "$TMP/srv.py" "$TEST_HOST" "$TMP/srv.port"
SRV_PID=$BG_PID
wait_for_file "$TMP/srv.port" 20 || fail "the server did not start: $(head -c 2000 "$TMP/srv.err")"
port=$(cat "$TMP/srv.port")
run_with_timeout 120 env $P python3 "$TMP/cli.py" "$TEST_HOST" "$port" "$N" >"$TMP/cli.out" 2>"$TMP/cli.err"
rc=$?
sdp=$(grep -Ec "connected to .* over SDP \($TEST_TRANSPORT\)" "$TMP/cli.err")
if [ "$rc" -ne 0 ] || [ "$(cat "$TMP/cli.out")" != ok ]; then
	bad "client exit $(status_text "$rc"): $(head -c 600 "$TMP/cli.out")"
	grep -v '^libsdp' "$TMP/cli.err" | tail -n 5 | sed 's/^/  client: /'
elif [ "$sdp" != "$N" ]; then
	bad "$sdp of $N client connections over SDP ($TEST_TRANSPORT)"
fi
if ! kill -0 "$SRV_PID" 2>/dev/null; then
	wait "$SRV_PID"
	bad "the server died (exit $(status_text $?)):"
	grep -v '^libsdp' "$TMP/srv.err" | tail -n 20 | sed 's/^/  server: /'
else
	c=$(sdpstat_counters "$SRV_PID" accept_sdp accept_tcp relays)
	if [ "$c" != "$N 0 $N" ]; then
		bad "server's sdpstat accept_sdp accept_tcp relays: '$c', want '$N 0 $N'"
	fi
fi
kill "$SRV_PID" 2>/dev/null
wait "$SRV_PID" 2>/dev/null
no_sanitizer_report "server" "$TMP/srv.err"
no_sanitizer_report "client" "$TMP/cli.err"
failures_end
log "ok   $N connections in an epoll set at the fork, relayed, replies intact, the server alive"
log "PASS"
