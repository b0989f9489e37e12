#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The Offload Protocol Switch under LD_PRELOAD, with unmodified programs
# (sdpcat --tcp uses plain socket calls):
#   - a "both" listener on one port (port 0 too) serves an SDP client and
#     a native TCP client;
#   - a "both" client falls back to TCP (blocking and non-blocking
#     connect) when the server has no SDP, with the reason logged;
#     an "sdp" client does not;
#   - a fallback on timeout when something that is not SDP answers;
#   - a "both" listener without a transport serves TCP, with the reason
#     logged and counted as a client's;
#   - a broken policy file is reported with file:line and leaves every
#     socket on TCP;
#   - the first non-blocking connect of a fresh process says EINPROGRESS;
#   - a destination that refused SDP (or timed out) is remembered;
#   - dual stack: IPv4 and IPv6-only listeners on one port, and a
#     dual-stack one, all on SDP;
#   - direct AF_INET_SDP sockets, and their errors;
#   - sdp_run runs a program with the preload.
# Every transfer is checksummed by sdpcat.
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
SDPCAT=$(prog sdpcat)
DIRECT=$(prog direct_sdp)

# python3's (and bash's) own leaks are not ours to report in a sanitizer
# build: every python3 run here has this in its environment.
PYENV="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# A plain TCP listener that takes connections and never says a word: what
# an SDP client meets where something else holds the SDP port.
cat >"$TMP/mute.py" <<'PYEOF'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); print('listening', flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
PYEOF

both=$TMP/both.conf
write_conf "$both" "log min-level 7" "use both server * *:*" "use both client * *:*"
sdponly=$TMP/sdp.conf
write_conf "$sdponly" "log min-level 7" "use sdp server * *:*" "use sdp client * *:*"

# client_ok DESC OUT CMD...: CMD is an sdpcat client; it must exit 0 and
# say "checksum ok".
client_ok() {
	local desc=$1 out=$2
	shift 2
	if run_with_timeout 60 "$@" >"$out" 2>&1 && grep -q 'checksum ok' "$out"; then
		log "ok   $desc"
		return 0
	fi
	bad "$desc"
	sed 's/^/  /' "$out"
	return 1
}

# --- listen on both stacks, port 0 -----------------------------------------
srv=$TMP/both-server.out
pf=$TMP/both.port
start_bg "$srv" env $(preload_env "$both") "$SDPCAT" --tcp -l "$TEST_HOST:0" --port-file "$pf" --count 2
SERVER_PID=$BG_PID
wait_for_file "$pf" 30 || fail "the both server did not start: $(cat "$srv")"
PORT=$(cat "$pf")
client_ok "both server, port 0: SDP client" "$TMP/c1.out" \
	env $(preload_env "$both") "$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 8M --wsize 1-100K
grep -q "connected to $TEST_HOST:$PORT over SDP ($TEST_TRANSPORT)" "$TMP/c1.out" ||
	bad "the preloaded client did not use SDP: $(cat "$TMP/c1.out")"
client_ok "both server, port 0: native TCP client" "$TMP/c2.out" \
	"$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 8M --wsize 1-100K
wait_pid "$SERVER_PID" 30 || bad "both server exit status $?: $(cat "$srv")"
grep -q "listening on $TEST_HOST:$PORT over SDP and TCP" "$srv" || bad "no 'both' listener: $(cat "$srv")"
grep -q "accepted an SDP connection ($TEST_TRANSPORT)" "$srv" ||
	bad "the server accepted no SDP connection over $TEST_TRANSPORT: $(cat "$srv")"
grep -q "accepted a TCP connection" "$srv" || bad "the server accepted no TCP connection"

# --- fallback: a server without SDP ------------------------------------------
srv=$TMP/native-server.out
pf=$TMP/native.port
start_bg "$srv" "$SDPCAT" --tcp -l "$TEST_HOST:0" --port-file "$pf" --count 3
SERVER_PID=$BG_PID
wait_for_file "$pf" 30 || fail "the native server did not start"
PORT=$(cat "$pf")
client_ok "both client, native server: blocking connect falls back" "$TMP/c3.out" \
	env $(preload_env "$both") "$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 4M
grep -q "no SDP to $TEST_HOST:$PORT (refused): connecting over TCP" "$TMP/c3.out" ||
	bad "no fallback reason logged: $(cat "$TMP/c3.out")"
client_ok "both client, native server: non-blocking connect falls back" "$TMP/c4.out" \
	env $(preload_env "$both") "$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 4M --nonblock
grep -q "(refused): connecting over TCP" "$TMP/c4.out" || bad "non-blocking: no fallback logged"
if run_with_timeout 60 env $(preload_env "$sdponly") "$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 1M \
	>"$TMP/c5.out" 2>&1; then
	bad "an sdp-only client reached a TCP-only server"
elif grep -qi "refused" "$TMP/c5.out"; then
	log "ok   sdp-only client, native server: connection refused, no fallback"
else
	bad "sdp-only client: unexpected error: $(cat "$TMP/c5.out")"
fi

# --- a "both" listener without its SDP side: TCP only, like a client's fallback ---
# No transport at all (SDP_TRANSPORTS names none): the listener serves TCP
# alone, and says why as a connect's fallback does: the log line, its
# statistics row and the process's fallback counter.  So does the client.
if command -v python3 >/dev/null 2>&1; then
	cat >"$TMP/nosdp_listen.py" <<'PYEOF'
# argv[1] host, argv[2] sdpstat: a listener, one client through it, then
# what sdpstat says of this process
import json, os, socket, subprocess, sys
l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen(8)
port = l.getsockname()[1]
c = socket.create_connection((sys.argv[1], port)); a, _ = l.accept()
c.sendall(b"x"); assert a.recv(1) == b"x"
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
st = json.loads(subprocess.run([sys.argv[2], "-p", str(os.getpid()), "--json"], env=env,
                               capture_output=True, text=True, check=True).stdout)
p = st["processes"][0]
row = [k for k in p["sockets"] if k["fd"] == l.fileno()][0]
print("port=%d fallbacks=%d listen_tcp=%d row=%s/%s" % (port, p["fallbacks"]["no-transport"],
      p["counters"]["listen_tcp"], row["stack"], row["fallback"]))
PYEOF
	out=$(run_with_timeout 60 env $PYENV SDP_TRANSPORTS=none $(preload_env "$both") \
		python3 "$TMP/nosdp_listen.py" "$TEST_HOST" "$(prog sdpstat)" 2>&1)
	lport=$(printf '%s\n' "$out" | sed -n 's/^port=\([0-9]*\) .*/\1/p')
	if [ -n "$lport" ] &&
		printf '%s\n' "$out" | grep -q "^port=$lport fallbacks=2 listen_tcp=1 row=tcp/no-transport$" &&
		printf '%s\n' "$out" | grep -q "no SDP on $TEST_HOST:$lport (no-transport): listening on TCP only" &&
		printf '%s\n' "$out" | grep -q "no SDP to $TEST_HOST:$lport (no-transport): connecting over TCP"; then
		log "ok   a both listener without a transport: TCP only, reason logged and counted"
	else
		bad "a both listener without a transport: $out"
	fi
fi

# --- a destination that said no is remembered (fallback_cache_ms) -----------------
# One process, five connections to a server without SDP: the first SDP
# attempt is refused, the next four go to TCP at once ("remembered");
# with the cache off, every one is refused.  On tcp-fallback, a silent SDP
# port (a plain listener on P + offset) the same way: one timeout, then
# "remembered" instead of another fallback_timeout_ms each.
cat >"$TMP/pyserver.py" <<'PYEOF'
# a plain TCP server on argv[1] that reads each connection to EOF; its
# port goes to the file argv[2]
import os, socket, sys, threading
l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen(64)
open(sys.argv[2] + ".tmp", "w").write(str(l.getsockname()[1])); os.rename(sys.argv[2] + ".tmp", sys.argv[2])
def serve(c):
    while c.recv(4096): pass
    c.close()
while True:
    c, _ = l.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
PYEOF
cat >"$TMP/pyclients.py" <<'PYEOF'
# argv[3] connections to argv[1]:argv[2], one after another, each sends a
# little and closes
import socket, sys
for _ in range(int(sys.argv[3])):
    c = socket.socket(); c.connect((sys.argv[1], int(sys.argv[2]))); c.sendall(b"x" * 1000); c.close()
PYEOF
# count_reasons FILE: "refused=N timeout=N remembered=N"
count_reasons() {
	local r out=
	for r in refused timeout remembered; do
		out="$out $r=$(grep -c "($r): connecting over TCP" "$1")"
	done
	echo "${out# }"
}
if command -v python3 >/dev/null 2>&1; then
	pf=$TMP/remember.port
	start_bg "$TMP/remember-server.out" python3 "$TMP/pyserver.py" "$TEST_HOST" "$pf"
	REMEMBER_PID=$BG_PID
	wait_for_file "$pf" 30 || fail "the python server did not start: $(cat "$TMP/remember-server.out")"
	RPORT=$(cat "$pf")
	run_with_timeout 60 env $PYENV $(preload_env "$both") python3 "$TMP/pyclients.py" "$TEST_HOST" "$RPORT" 5 >"$TMP/rem1.out" 2>&1 ||
		bad "remembered refusal: the client failed: $(cat "$TMP/rem1.out")"
	got=$(count_reasons "$TMP/rem1.out")
	[ "$got" = "refused=1 timeout=0 remembered=4" ] &&
		log "ok   a refused destination is remembered: $got" ||
		bad "a refused destination, five connections: $got (want refused=1 remembered=4)"
	run_with_timeout 60 env $PYENV SDP_FALLBACK_CACHE_MS=0 $(preload_env "$both") python3 "$TMP/pyclients.py" "$TEST_HOST" "$RPORT" 5 \
		>"$TMP/rem2.out" 2>&1 || bad "cache off: the client failed: $(cat "$TMP/rem2.out")"
	got=$(count_reasons "$TMP/rem2.out")
	[ "$got" = "refused=5 timeout=0 remembered=0" ] &&
		log "ok   fallback_cache_ms=0: every attempt is made: $got" ||
		bad "fallback_cache_ms=0: $got (want refused=5)"
	if [ "$TEST_TRANSPORT" = tcp-fallback ]; then
		mute_port=$(( (RPORT + 20000) % 65536 ))
		start_bg "$TMP/rmute.out" python3 "$TMP/mute.py" "$TEST_HOST" "$mute_port"
		if wait_for_text "$TMP/rmute.out" listening 10; then
			run_with_timeout 60 env SDP_FALLBACK_TIMEOUT_MS=300 SDP_CONNECT_TIMEOUT_MS=60000 \
				$PYENV $(preload_env "$both") python3 "$TMP/pyclients.py" "$TEST_HOST" "$RPORT" 3 >"$TMP/rem3.out" 2>&1 ||
				bad "remembered timeout: the client failed: $(cat "$TMP/rem3.out")"
			got=$(count_reasons "$TMP/rem3.out")
			[ "$got" = "refused=0 timeout=1 remembered=2" ] &&
				log "ok   a silent SDP port is remembered: $got" ||
				bad "a silent SDP port, three connections: $got (want timeout=1 remembered=2)"
		else
			log "the SDP side of port $RPORT is taken here: remembered-timeout case not run"
		fi
	fi
fi

# --- a busy SDP listener is not taken for one without SDP -------------------------
# A listener with a backlog of 1 that accepts nothing yet, and six
# non-blocking connects to it from the same process: the SDP listener
# refuses those its queue has no room for and says why (libsdp's reject
# data), so they fall back with reason "resource", not "refused", and the
# destination is not remembered: once the listener accepts, the next
# connection is SDP again.  Before, they were "refused", and the next
# ones "remembered", for fallback_cache_ms.
if command -v python3 >/dev/null 2>&1; then
	cat >"$TMP/busy.py" <<'PYEOF'
import select, socket, sys, time
host = sys.argv[1]
l = socket.socket(); l.bind((host, 0)); l.listen(1)
port = l.getsockname()[1]
cs = []
for _ in range(6):
    c = socket.socket(); c.setblocking(False)
    try:
        c.connect((host, port))
    except BlockingIOError:
        pass
    cs.append(c)
# Those the kernel's full queue drops stay in progress: wait a little, not for all.
end = time.time() + 3
while time.time() < end:
    _, w, _ = select.select([], [c for c in cs], [], 0.2)
    if len(w) == len(cs):
        break
l.setblocking(False)
end = time.time() + 3
while time.time() < end:
    try:
        l.accept()
    except BlockingIOError:
        time.sleep(0.05)
# Blocking again: on verbs the passive side is established only when
# the active side's RTU comes, after the client's connect has returned.
l.setblocking(True)
c = socket.create_connection((host, port)); a, _ = l.accept()
c.sendall(b"y"); assert a.recv(1) == b"y"
print("last connection done")
PYEOF
	run_with_timeout 60 env $PYENV $(preload_env "$both") python3 "$TMP/busy.py" "$TEST_HOST" >"$TMP/busy.out" 2>&1 ||
		bad "busy listener: the program failed: $(cat "$TMP/busy.out")"
	busy=$(grep -c "(resource): connecting over TCP" "$TMP/busy.out")
	other=$(grep -cE "\((refused|remembered)\): connecting over TCP" "$TMP/busy.out")
	last=$(sed -n '/last connection done/=' "$TMP/busy.out")
	sdp_last=$(grep -n "over SDP (" "$TMP/busy.out" | tail -1 | cut -d: -f1)
	if [ "$busy" -ge 1 ] && [ "$other" = 0 ] && grep -q "accept queue full" "$TMP/busy.out" &&
		[ -n "$sdp_last" ] && [ -n "$last" ] && [ "$(grep -c "over SDP (" "$TMP/busy.out")" -ge 2 ]; then
		log "ok   a busy SDP listener: $busy fallbacks with reason resource, none remembered, SDP again after"
	else
		bad "busy listener: resource=$busy refused/remembered=$other: $(grep -E 'connecting over TCP|over SDP|queue full' "$TMP/busy.out" | head -12)"
	fi
fi

# --- dual stack: an IPv4 and an IPv6-only listener on one port --------------------
# asyncio's start_server() (and redis's "bind * -::*") listen on 0.0.0.0:P
# and on [::]:P with IPV6_V6ONLY: both must get their SDP side, and clients
# of both families connect over SDP.  Then one dual-stack [::] listener
# (IPV6_V6ONLY 0) serves both families over SDP.  Loopback only (IPv6).
if [ "$TEST_TRANSPORT" = tcp-fallback ] && command -v python3 >/dev/null 2>&1 &&
	python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
	cat >"$TMP/dual.py" <<'PYEOF'
import asyncio, os, random, socket, sys
async def echo(r, w):
    w.write(await r.read(100)); await w.drain(); w.close()
def free_port():
    # a port P free on both families, whose SDP port (P + 20000) is too
    for _ in range(200):
        p = random.randint(20000, 40000)
        try:
            for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                for q in (p, p + 20000):
                    s = socket.socket(fam)
                    if fam == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    s.bind((host, q)); s.close()
            return p
        except OSError:
            pass
async def main():
    # port=P, no host: a listener per family, IPv6 with IPV6_V6ONLY
    srv = await asyncio.start_server(echo, port=free_port())
    port = srv.sockets[0].getsockname()[1]
    open(sys.argv[1] + ".tmp", "w").write(str(port)); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    async with srv:
        await asyncio.sleep(30)
asyncio.run(main())
PYEOF
	cat >"$TMP/dualc.py" <<'PYEOF'
import socket, sys
for host in ("127.0.0.1", "::1"):
    c = socket.create_connection((host, int(sys.argv[1])))
    c.sendall(b"ping " + host.encode()); print(c.recv(100).decode()); c.close()
PYEOF
	pf=$TMP/dual.port
	start_bg "$TMP/dual-server.out" env $PYENV $(preload_env "$both") python3 "$TMP/dual.py" "$pf"
	DUAL_PID=$BG_PID
	if wait_for_file "$pf" 30; then
		DPORT=$(cat "$pf")
		out=$(run_with_timeout 30 env $PYENV $(preload_env "$both") python3 "$TMP/dualc.py" "$DPORT" 2>&1)
		n4=$(grep -c "listening on 0.0.0.0:$DPORT over SDP and TCP" "$TMP/dual-server.out")
		n6=$(grep -c "listening on \[::\]:$DPORT over SDP and TCP" "$TMP/dual-server.out")
		c4=$(printf '%s\n' "$out" | grep -c "connected to 127.0.0.1:$DPORT over SDP")
		c6=$(printf '%s\n' "$out" | grep -c "connected to \[::1\]:$DPORT over SDP")
		echoes=$(printf '%s\n' "$out" | grep -c '^ping ')
		if [ "$n4$n6$c4$c6$echoes" = 11112 ]; then
			log "ok   dual stack (asyncio): SDP listeners on 0.0.0.0 and [::] (v6-only), SDP clients of both families"
		else
			bad "dual stack: listeners v4=$n4 v6=$n6, SDP clients v4=$c4 v6=$c6, echoes $echoes: $out $(grep -i 'failed\|TCP only' "$TMP/dual-server.out")"
		fi
	else
		bad "the asyncio server did not start: $(cat "$TMP/dual-server.out")"
	fi
	kill "$DUAL_PID" 2>/dev/null
	cat >"$TMP/dual2.py" <<'PYEOF'
import socket
s6 = socket.socket(socket.AF_INET6)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s6.bind(("::", 0)); s6.listen(); p = s6.getsockname()[1]
for host, fam in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
    c = socket.socket(fam); c.connect((host, p)); a, addr = s6.accept()
    c.sendall(b"x"); print(host, addr[0], a.recv(1).decode())
PYEOF
	out=$(run_with_timeout 30 env $PYENV $(preload_env "$both") python3 "$TMP/dual2.py" 2>&1)
	if [ "$(printf '%s\n' "$out" | grep -c 'over SDP (')" -eq 2 ] &&
		printf '%s\n' "$out" | grep -q '^127.0.0.1 ::ffff:127.0.0.1 x$' &&
		printf '%s\n' "$out" | grep -q '^::1 ::1 x$'; then
		log "ok   a dual-stack [::] listener serves both families over SDP"
	else
		bad "dual-stack [::] listener: $out"
	fi
fi

# --- a broken policy file: file:line, then all TCP -------------------------------
printf 'transport enable %s\nuse sdp clinet * *:*\n' "$TEST_TRANSPORT" >"$TMP/broken.conf"
client_ok "broken policy file: the program runs on TCP" "$TMP/c6.out" \
	env $(preload_env "$TMP/broken.conf") "$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 1M
grep -q "broken.conf:2:" "$TMP/c6.out" || bad "no file:line for the broken policy: $(cat "$TMP/c6.out")"
grep -q "over SDP" "$TMP/c6.out" && bad "SDP used despite the broken policy"
wait_pid "$SERVER_PID" 30 || bad "native server exit status $?: $(cat "$srv")"

# --- the first non-blocking connect of fresh processes: EINPROGRESS ----------------
# Linux TCP says EINPROGRESS every time, even on loopback.  The preload
# starts its engine inside that first connect, and a transport quick
# enough to finish the attempt within the call made it return 0 (in about
# half of the runs, with python3 as client and server; a Java NIO client
# then waited for OP_CONNECT for ever).  Ten fresh clients, every one must
# say EINPROGRESS, and the connections must have been SDP.
if command -v python3 >/dev/null 2>&1; then
	srv=$TMP/nb-server.out
	pf=$TMP/nb.port
	start_bg "$srv" env $PYENV $(preload_env "$both") python3 -c '
import socket, sys
l = socket.socket()
l.bind((sys.argv[1], 0)); l.listen(64)
open(sys.argv[2] + ".tmp", "w").write(str(l.getsockname()[1]))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
for _ in range(10):
    c, _ = l.accept(); c.close()
' "$TEST_HOST" "$pf"
	SERVER_PID=$BG_PID
	wait_for_file "$pf" 30 || fail "the python server did not start: $(cat "$srv")"
	PORT=$(cat "$pf")
	answers=
	for i in 1 2 3 4 5 6 7 8 9 10; do
		a=$(run_with_timeout 60 env $PYENV $(preload_env "$both") python3 -c '
import errno, select, socket, sys
s = socket.socket(); s.setblocking(False)
r = s.connect_ex((sys.argv[1], int(sys.argv[2])))
print(errno.errorcode.get(r, r))
select.select([], [s], [], 10)
' "$TEST_HOST" "$PORT" 2>"$TMP/nb-client.$i.err")
		answers="$answers $a"
	done
	wait_pid "$SERVER_PID" 60 || bad "the python server: exit status $?: $(cat "$srv")"
	n=$(cat "$TMP"/nb-client.*.err | grep -c "over SDP ($TEST_TRANSPORT)")
	if [ "$(printf '%s\n' $answers | grep -cx EINPROGRESS)" -eq 10 ] && [ "$n" -eq 10 ]; then
		log "ok   fresh processes' non-blocking connects: EINPROGRESS x10, all over SDP"
	else
		bad "fresh processes' non-blocking connects answered:$answers ($n of 10 over SDP)"
	fi
fi

# --- fallback on timeout: the SDP port answers TCP but never SDP --------------------
srv=$TMP/native2-server.out
pf=$TMP/native2.port
start_bg "$srv" "$SDPCAT" --tcp -l "$TEST_HOST:0" --port-file "$pf" --count 1
SERVER_PID=$BG_PID
wait_for_file "$pf" 30 || fail "the native server did not start"
PORT=$(cat "$pf")
# Something holds the SDP side of the port and never answers: on
# tcp-fallback a plain TCP listener on the SDP port (P + offset); on an
# RDMA transport, whose SDP ports are rdma_cm's own, an SDP listener on P
# that is stopped (SIGSTOP) before it could answer.
mute_pid=
if [ "$TEST_TRANSPORT" = tcp-fallback ]; then
	mute_port=$(( (PORT + 20000) % 65536 ))
	start_bg "$TMP/mute.out" python3 "$TMP/mute.py" "$TEST_HOST" "$mute_port"
	mute_ready=listening
else
	mute_port=$PORT
	start_bg "$TMP/mute.out" "$SDPCAT" -l "$TEST_HOST:$mute_port" -v
	mute_pid=$BG_PID
	mute_ready="listening on"
fi
if wait_for_text "$TMP/mute.out" "$mute_ready" 10; then
	[ -z "$mute_pid" ] || kill -STOP "$mute_pid"
	client_ok "both client, SDP port silent: falls back after fallback_timeout_ms" "$TMP/c7.out" \
		env SDP_FALLBACK_TIMEOUT_MS=300 SDP_CONNECT_TIMEOUT_MS=60000 $(preload_env "$both") \
		"$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 1M
	grep -q "(timeout): connecting over TCP" "$TMP/c7.out" || bad "no timeout fallback logged: $(cat "$TMP/c7.out")"
else
	log "the SDP side of port $PORT ($mute_port) is taken here: timeout case not run"
	sed 's/^/  /' "$TMP/mute.out"
	"$SDPCAT" --tcp -c "$TEST_HOST:$PORT" --bytes 1K >/dev/null 2>&1
fi
if [ -n "$mute_pid" ]; then
	kill -9 "$mute_pid" 2>/dev/null
	wait "$mute_pid" 2>/dev/null	# reaped here, or bash reports "Killed"
fi
wait_pid "$SERVER_PID" 30 || bad "native server 2 exit status $?"

# --- direct AF_INET_SDP sockets ---------------------------------------------------
tcponly=$TMP/tcp.conf
write_conf "$tcponly" "log min-level 7 destination file $TMP/direct.log" \
	"use tcp server * *:*" "use tcp client * *:*"
out=$(run_with_timeout 60 env $(preload_env "$tcponly") "$DIRECT" transfer 2>&1)
[ "$out" = "transfer: ok" ] && log "ok   AF_INET_SDP (27) transfer, even where policy says tcp" ||
	bad "AF_INET_SDP transfer: $out"
grep -q "over SDP ($TEST_TRANSPORT)" "$TMP/direct.log" ||
	bad "AF_INET_SDP transfer not over $TEST_TRANSPORT: $(cat "$TMP/direct.log")"
out=$(run_with_timeout 60 env $(preload_env "$tcponly") "$DIRECT" wildcard6 2>&1)
[ "$out" = "wildcard6: ok" ] && log "ok   AF_INET_SDP (27) bound to [::], as qperf's sdp_bw does" ||
	bad "AF_INET_SDP bound to [::]: $out"
out=$(run_with_timeout 30 env $(preload_env "$tcponly") "$DIRECT" dgram 2>&1)
[ "$out" = "dgram: ESOCKTNOSUPPORT" ] && log "ok   AF_INET_SDP datagram: ESOCKTNOSUPPORT" ||
	bad "AF_INET_SDP SOCK_DGRAM: $out"
# shm, on by default, is turned off too: no transport at all.
printf 'transport disable shm\ntransport disable %s\nuse both client * *:*\n' "$TEST_TRANSPORT" \
	>"$TMP/nosoft.conf"
out=$(run_with_timeout 30 env -u SDP_TRANSPORTS $(preload_env "$TMP/nosoft.conf") "$DIRECT" socket 2>&1)
[ "$out" = "socket: EAFNOSUPPORT" ] && log "ok   AF_INET_SDP without a transport: EAFNOSUPPORT" ||
	bad "AF_INET_SDP without a transport: $out"
out=$(run_with_timeout 60 env SDP_AF_INET_SDP=40 $(preload_env "$tcponly") "$DIRECT" transfer 40 2>&1)
[ "$out" = "transfer: ok" ] && log "ok   AF_INET_SDP moved to 40 (SDP_AF_INET_SDP)" ||
	bad "AF_INET_SDP on 40: $out"
# Port 0 where the transport's port (the kernel's plus an offset, on
# tcp-fallback and iwarp) is taken: bind() takes another one, as Linux's
# never fails for port 0.  300 tries beside 4000 held TCP listeners: 22
# of 300 failed with EADDRINUSE before.
out=$(run_with_timeout 60 env SDP_AF_INET_SDP=40 $(preload_env "$tcponly") "$DIRECT" anyport 40 2>&1)
[ "$out" = "anyport: ok" ] && log "ok   AF_INET_SDP bound to port 0 beside 4000 TCP listeners" ||
	bad "AF_INET_SDP on port 0: $out"
out=$(run_with_timeout 30 "$DIRECT" socket 2>&1)
[ "$out" = "socket: EAFNOSUPPORT" ] || bad "family 27 without the preload: $out"

# --- port 0 when the SDP side of the port is taken ----------------------------------
# In a network namespace of its own with four ephemeral ports, three of
# whose SDP ports (P + 20000) are taken: listen() must move both stacks to
# the fourth.  (bind(0) prefers even ports, which are all taken here.)
if [ "$TEST_TRANSPORT" != tcp-fallback ]; then
	log "port-0 relocation case not run on $TEST_TRANSPORT: it needs a network namespace of its own, where $TEST_TRANSPORT has no device"
elif [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
	cat >"$TMP/ns.sh" <<NSEOF
ip link set lo up
sysctl -q -w net.ipv4.ip_local_port_range="40000 40003"
python3 -c "
import socket, time
ss = []
for p in (60000, 60001, 60002):
    s = socket.socket(); s.bind(('127.0.0.1', p)); s.listen(1); ss.append(s)
print('held', flush=True)
time.sleep(60)" >"$TMP/ns-hold.out" &
hold=\$!
for i in \$(seq 100); do grep -q held "$TMP/ns-hold.out" && break; sleep 0.05; done
env $(preload_env "$sdponly") "$SDPCAT" --tcp -l 127.0.0.1:0 --port-file "$TMP/ns.port" --count 1 &
srv=\$!
for i in \$(seq 200); do [ -s "$TMP/ns.port" ] && break; sleep 0.05; done
env $(preload_env "$sdponly") "$SDPCAT" --tcp -c 127.0.0.1:\$(cat "$TMP/ns.port") --bytes 1M
rc=\$?
wait \$srv || rc=1
kill \$hold
exit \$rc
NSEOF
	if run_with_timeout 60 unshare -n bash "$TMP/ns.sh" >"$TMP/ns.out" 2>&1 &&
		[ "$(cat "$TMP/ns.port")" = 40003 ]; then
		log "ok   port 0 moves to a port whose SDP side is free (40003)"
	else
		bad "port 0 with the SDP side taken: port $(cat "$TMP/ns.port" 2>/dev/null): $(cat "$TMP/ns.out")"
	fi
else
	log "not root or no unshare: the port-0 relocation case is not run"
fi

# --- port 0 seen by the program, its SDP side taken: the port stays, TCP only -------
# python's http.server reads the port right after bind(0), then listens:
# a listener moved to another port at listen() would leave its clients
# knocking at the old one.  Here the SDP side of the port is taken
# between the two (on the software transport: P + 20000, the tcpf offset).
if [ "$TEST_TRANSPORT" = tcp-fallback ]; then
	cat >"$TMP/seen.py" <<'PYEOF'
import os, socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], 0))
port = s.getsockname()[1]
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(port))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
s.listen(1)
print("listening on", s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(c.recv(100))
c.close()
PYEOF
	cat >"$TMP/seen_block.py" <<'PYEOF'
import socket, sys, time
b = socket.socket()
try:
    b.bind((sys.argv[1], int(sys.argv[2]))); b.listen(1)
except OSError as e:
    print("taken already:", e, flush=True)
open(sys.argv[3], "w").write("go")
time.sleep(60)
PYEOF
	start_bg "$TMP/seen.out" env $PYENV $(preload_env "$both") python3 "$TMP/seen.py" "$TEST_HOST" "$TMP/seen.port" "$TMP/seen.go"
	SEEN_PID=$BG_PID
	if wait_for_file "$TMP/seen.port" 30; then
		SPORT=$(cat "$TMP/seen.port")
		start_bg "$TMP/seen_block.out" python3 "$TMP/seen_block.py" "$TEST_HOST" $(((SPORT + 20000) % 65536)) "$TMP/seen.go"
		out=$(run_with_timeout 30 python3 -c '
import socket, sys, time
for i in range(300):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
c.sendall(b"seen"); print(c.recv(100).decode())' "$TEST_HOST" "$SPORT" 2>&1)
		wait_pid "$SEEN_PID" 30 || bad "seen-port server exit status $?: $(cat "$TMP/seen.out")"
		if [ "$out" = seen ] && grep -q "^listening on $SPORT\$" "$TMP/seen.out" &&
			grep -q "no SDP on .*:$SPORT (transport-error: Address already in use): listening on TCP only" "$TMP/seen.out"; then
			log "ok   port 0 the program has seen stays when its SDP side is taken (TCP only)"
		else
			bad "port $SPORT seen, SDP side taken: client '$out'; server: $(cat "$TMP/seen.out")"
		fi
	else
		bad "the seen-port server did not start: $(cat "$TMP/seen.out")"
	fi
fi

# --- a pre-forked server: workers accept on the listener they inherited -------------
# On the software transports the "both" listener is shared with the
# workers and stays SDP (issue 17): the workers accept the SDP clients,
# and no client is left waiting for the parent, which never accepts.  An
# rdma_cm listener cannot be shared: at fork it turns TCP only, and
# clients fall back at once.
cat >"$TMP/prefork.py" <<'PYEOF'
import os, socket, sys
s = socket.socket()
s.bind((sys.argv[2], 0))
s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        for _ in range(2):
            c, _ = s.accept()
            c.sendall(b"worker got " + c.recv(100))
            c.close()
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
PYEOF
case $TEST_TRANSPORT in
tcp-fallback | shm)
	prefork_way="connected to .* over SDP \($TEST_TRANSPORT\)"
	prefork_said="over SDP"
	;;
*)
	prefork_way="\(refused\): connecting over TCP"
	prefork_said="refused on SDP, TCP at once"
	;;
esac
start_bg "$TMP/prefork.out" env "$PYENV" $(preload_env "$both") python3 "$TMP/prefork.py" "$TMP/prefork.port" "$TEST_HOST"
SERVER_PID=$BG_PID
if wait_for_file "$TMP/prefork.port" 20; then
	ok=0
	for i in 1 2 3 4; do
		if run_with_timeout 20 env "$PYENV" $(preload_env "$both") python3 -c "
import socket, sys
c = socket.create_connection((sys.argv[2], int(sys.argv[1])))
c.sendall(b'hi')
sys.exit(0 if c.recv(100) == b'worker got hi' else 1)" "$(cat "$TMP/prefork.port")" "$TEST_HOST" \
			>"$TMP/prefork-c.out" 2>&1 && grep -Eq "$prefork_way" "$TMP/prefork-c.out"; then
			ok=$((ok + 1))
		else
			sed 's/^/  /' "$TMP/prefork-c.out"
		fi
	done
	[ "$ok" -eq 4 ] && log "ok   pre-forked workers serve 4 clients ($prefork_said)" ||
		bad "pre-forked server: $ok of 4 clients served"
	wait_pid "$SERVER_PID" 30 || bad "pre-forked server exit status $?: $(cat "$TMP/prefork.out")"
else
	bad "pre-forked server did not start: $(cat "$TMP/prefork.out")"
fi

# --- sdp_run ---------------------------------------------------------------------------
if ! is_sanitized; then
	srv=$TMP/run-server.out
	pf=$TMP/run.port
	start_bg "$srv" "$top_builddir/tools/sdp_run" --conf "$both" -- "$SDPCAT" --tcp -l "$TEST_HOST:0" \
		--port-file "$pf" --count 1
	SERVER_PID=$BG_PID
	wait_for_file "$pf" 30 || fail "sdp_run server did not start: $(cat "$srv")"
	client_ok "sdp_run on both ends" "$TMP/c8.out" \
		"$top_builddir/tools/sdp_run" --conf "$both" "$SDPCAT" --tcp -c "$TEST_HOST:$(cat "$pf")" --bytes 4M
	grep -q "over SDP ($TEST_TRANSPORT)" "$TMP/c8.out" || bad "sdp_run client did not use SDP over $TEST_TRANSPORT: $(cat "$TMP/c8.out")"
	wait_pid "$SERVER_PID" 30 || bad "sdp_run server exit status $?"
fi

failures_end
log "PASS"
exit 0
