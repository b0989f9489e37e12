#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A listener bound to port 0 whose program looks at its port before
# listen() (python's socketserver and http.server do) still gets SDP
# when the port's SDP side is taken.  On tcp-fallback SDP port P is TCP
# port P + offset in the host's own port space (doc/port-scheme.md),
# which any other socket may hold; once the program has seen P, listen()
# can no longer move it, so getsockname() tries the SDP side first and
# moves the socket to a port whose SDP side is free
# (ops_settle_any_port(), ops/switch.c).
#
# Made deterministic in a network namespace of its own, whose ephemeral
# range is 40000-40003: 40000 and 40003 are held, and so is 60001, the
# SDP side of 40001.  bind(0) may give 40001 or 40002 (Linux offers odd
# ports to bind() first); the listener must end up on 40002, over SDP,
# and serve a preloaded client.  Needs root for the namespace.
. "$(dirname "$0")/lib.sh"

if [ "$TEST_TRANSPORT" != tcp-fallback ]; then
	skip "the SDP port offset into the host's port space is tcp-fallback's (and iwarp's, whose device does not follow a namespace)"
fi
if [ "$(id -u)" -ne 0 ]; then
	skip "a network namespace needs root"
fi
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
preload_lib >/dev/null || skip "libsdp.so is not built"
if is_sanitized; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

NS="sdp-$$-ps"
trap 'ip netns del "$NS" 2>/dev/null; cleanup' EXIT
ip netns add "$NS" 2>"$TMP/ns.err" || skip "cannot create a network namespace here: $(tr '\n' ' ' <"$TMP/ns.err")"
ip -n "$NS" link set lo up || fail "lo will not come up in the namespace"
ip netns exec "$NS" sysctl -q -w net.ipv4.ip_local_port_range="40000 40003" ||
	fail "cannot set the namespace's ephemeral port range"

cat >"$TMP/hold.py" <<'EOF'
import socket, sys, time
held = []
for p in sys.argv[2:]:
    s = socket.socket()
    s.bind(("0.0.0.0", int(p)))
    s.listen(1)
    held.append(s)
open(sys.argv[1], "w").write("held\n")
time.sleep(600)
EOF
cat >"$TMP/server.py" <<'EOF'
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.listen(4)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept()
data = c.recv(100)
c.sendall(data.upper())
c.close()
EOF
cat >"$TMP/client.py" <<'EOF'
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"hello over sdp")
print(c.recv(100).decode())
EOF

start_bg "$TMP/hold.out" ip netns exec "$NS" python3 "$TMP/hold.py" "$TMP/held" 40000 40003 60001
wait_for_file "$TMP/held" 20 || fail "the port holder did not start: $(cat "$TMP/hold.out")"

conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 7 destination file $TMP/server.log" "use both server * *:*"
write_conf "$TMP/client.conf" "log min-level 7 destination file $TMP/client.log" "use both client * *:*"
start_bg "$TMP/server.out" ip netns exec "$NS" env SDP_TCPF_PORT_OFFSET=20000 \
	$(preload_env "$conf") python3 "$TMP/server.py" "$TMP/port"
wait_for_file "$TMP/port" 30 || fail "the server did not start: $(cat "$TMP/server.out")"
port=$(cat "$TMP/port")
out=$(run_with_timeout 60 ip netns exec "$NS" env SDP_TCPF_PORT_OFFSET=20000 \
	$(preload_env "$TMP/client.conf") python3 "$TMP/client.py" "$port" 2>&1)

failed=0
# expect_log TEXT WHAT: the server's log has TEXT, or WHAT went wrong.
expect_log() {
	if ! grep -qF -- "$1" "$TMP/server.log"; then
		log "FAIL: $2:"
		sed 's/^/  /' "$TMP/server.log" | head -n 10
		failed=1
	fi
}
if [ "$port" != 40002 ]; then
	log "FAIL: the listener is on port $port, not 40002 (40001's SDP side, 60001, is held)"
	failed=1
fi
expect_log "listening on 127.0.0.1:$port over SDP" "the listener on $port does not listen over SDP"
if [ "$out" != "HELLO OVER SDP" ]; then
	log "FAIL: the client got '$out'"
	failed=1
fi
expect_log "accepted an SDP connection ($TEST_TRANSPORT)" \
	"the server accepted no SDP connection over $TEST_TRANSPORT"
[ "$failed" -eq 0 ] || fail "a listener that looked at its port before listen() lost SDP"
log "ok   bind(0), getsockname, listen: port $port (not 40001, whose SDP side was held), over SDP; the client's request came back"
