#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The shm transport is chosen ahead of tcp-fallback between two libsdp
# processes of one host (doc/shm.md), and only then:
#   - shm and tcp-fallback enabled on both ends: the connection runs on
#     shm, and sdpstat counts the bytes on that connection's row;
#   - no transport line and no SDP_TRANSPORTS: shm, on by default;
#   - shm turned off by sdp.conf ("transport disable shm"): tcp-fallback;
#   - memfd_create() refused: tcp-fallback, with the reason in the log;
#   - a listener without shm: the client's shm finds nobody and the
#     connection goes on over tcp-fallback, not to TCP (logged: another
#     network namespace, whose abstract names it cannot see, is the same);
#   - a listener with both, port 0: the port is one tcp-fallback serves
#     (shm never chooses it), so a client without shm gets in.
. "$(dirname "$0")/lib.sh"

case $TEST_TRANSPORT in
tcp-fallback | shm) ;;
*) skip "$TEST_TRANSPORT: shm and tcp-fallback are what this test compares" ;;
esac
have python3 || skip "no python3"

SDPSTAT=$(prog sdpstat)
export SDP_STATS_DIR=$TMP/stats
mkdir -p "$SDP_STATS_DIR"
BYTES=1048583
# Python and its subprocesses leak by LeakSanitizer's measure in a
# sanitized build (the preload brings the runtime into them): not ours.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

cat >"$TMP/peer.py" <<'PYEOF'
# argv: mode (pair|serve|connect) host sdpstat bytes [port-file | port]
# Moves the bytes, then prints what sdpstat says of this process's
# connection: "transport=NAME tx=N rx=N".
import json, os, socket, subprocess, sys, time
mode, host, sdpstat, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def report(s):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    st = json.loads(subprocess.run([sdpstat, "-p", str(os.getpid()), "--json"], env=env,
                                   capture_output=True, text=True, check=True).stdout)
    row = [k for k in st["processes"][0]["sockets"] if k["fd"] == s.fileno()][0]
    print("transport=%s tx=%d rx=%d" % (row.get("transport"), row["tx"], row["rx"]), flush=True)

def recv_all(s, n):
    got = 0
    while got < n:
        b = s.recv(min(65536, n - got))
        assert b, "EOF after %d bytes" % got
        got += len(b)

if mode in ("pair", "serve"):
    l = socket.socket(); l.bind((host, 0)); l.listen(8)
    if mode == "serve":
        with open(sys.argv[5] + ".tmp", "w") as f:
            f.write(str(l.getsockname()[1]))
        os.rename(sys.argv[5] + ".tmp", sys.argv[5])
    else:
        c = socket.create_connection((host, l.getsockname()[1]))
    a, _ = l.accept()
    if mode == "pair":
        c.sendall(b"x" * n)
    recv_all(a, n)
    a.sendall(b"k")
    report(a)
    if mode == "pair":
        recv_all(c, 1)
        report(c)
else:
    c = socket.create_connection((host, int(sys.argv[5])))
    c.sendall(b"x" * n)
    recv_all(c, 1)
    report(c)
PYEOF

conf() {
	printf '%s\n' "log min-level 7 destination file $TMP/sdp.log" \
		"use both server * *:*" "use both client * *:*" "$@" >"$TMP/$NAME.conf"
}

# run_pair NAME TRANSPORTS: one process, both ends; prints its two reports.
run_pair() {
	run_with_timeout 60 env SDP_TRANSPORTS="$2" $(preload_env "$TMP/$1.conf") \
		python3 "$TMP/peer.py" pair "$TEST_HOST" "$SDPSTAT" "$BYTES" 2>&1
}

# --- both enabled: shm, and the bytes counted on its row ------------------------
NAME=both
conf
out=$(run_pair both shm,tcp-fallback)
if [ "$out" = "transport=shm tx=1 rx=$BYTES
transport=shm tx=$BYTES rx=1" ]; then
	log "ok   shm and tcp-fallback enabled: the connection ran on shm, $BYTES bytes on its row"
else
	bad "shm and tcp-fallback enabled: $out"
fi

# --- turned off by sdp.conf ------------------------------------------------------
NAME=off
conf "transport enable shm" "transport enable tcp-fallback" "transport disable shm"
out=$(unset SDP_TRANSPORTS; run_with_timeout 60 env $(preload_env "$TMP/off.conf") \
	python3 "$TMP/peer.py" pair "$TEST_HOST" "$SDPSTAT" "$BYTES" 2>&1)
if [ "$out" = "transport=tcp-fallback tx=1 rx=$BYTES
transport=tcp-fallback tx=$BYTES rx=1" ]; then
	log "ok   transport disable shm: tcp-fallback"
else
	bad "transport disable shm: $out"
fi

# --- the default: no transport line, nothing in the environment -----------------
NAME=default
conf
out=$(unset SDP_TRANSPORTS; run_with_timeout 60 env $(preload_env "$TMP/default.conf") \
	python3 "$TMP/peer.py" pair "$TEST_HOST" "$SDPSTAT" "$BYTES" 2>&1)
if [ "$out" = "transport=shm tx=1 rx=$BYTES
transport=shm tx=$BYTES rx=1" ]; then
	log "ok   no transport line: shm, chosen by default"
else
	bad "no transport line: $out"
fi

# --- turned off by one line beside tcp-fallback ---------------------------------
NAME=offonly
conf "transport enable tcp-fallback" "transport disable shm"
out=$(unset SDP_TRANSPORTS; run_with_timeout 60 env $(preload_env "$TMP/offonly.conf") \
	python3 "$TMP/peer.py" pair "$TEST_HOST" "$SDPSTAT" "$BYTES" 2>&1)
if [ "$out" = "transport=tcp-fallback tx=1 rx=$BYTES
transport=tcp-fallback tx=$BYTES rx=1" ]; then
	log "ok   transport disable shm (default list): tcp-fallback"
else
	bad "transport disable shm (default list): $out"
fi

# --- no memfd (a sandbox refuses memfd_create): the next transport, and why --------
NAME=nomemfd
conf
: >"$TMP/sdp.log"
out=$(run_with_timeout 60 env SDP_TRANSPORTS=shm,tcp-fallback $(preload_env "$TMP/nomemfd.conf") \
	"$(prog no_memfd)" python3 "$TMP/peer.py" pair "$TEST_HOST" "$SDPSTAT" "$BYTES" 2>&1)
case $out in
*"seccomp"*) log "skip no memfd: $out" ;;
*)
	if [ "$out" = "transport=tcp-fallback tx=1 rx=$BYTES
transport=tcp-fallback tx=$BYTES rx=1" ] &&
		grep -q "cannot make the rings for .*: next transport" "$TMP/sdp.log"; then
		log "ok   memfd_create refused: tcp-fallback, with the reason logged"
	else
		bad "memfd_create refused: $out; $(grep -c 'next transport' "$TMP/sdp.log") reasons logged"
	fi
	;;
esac

# two_procs NAME SERVER-TRANSPORTS CLIENT-TRANSPORTS: the client's report.
two_procs() {
	local server
	rm -f "$TMP/port"
	env SDP_TRANSPORTS="$2" $(preload_env "$TMP/$1.conf") \
		python3 "$TMP/peer.py" serve "$TEST_HOST" "$SDPSTAT" "$BYTES" "$TMP/port" \
		>"$TMP/$1.server" 2>&1 &
	server=$!
	BG_PIDS+=("$server")
	for _ in $(seq 100); do
		[ -s "$TMP/port" ] && break
		sleep 0.1
	done
	[ -s "$TMP/port" ] || { echo "server did not start: $(cat "$TMP/$1.server")"; return; }
	run_with_timeout 60 env SDP_TRANSPORTS="$3" $(preload_env "$TMP/$1.conf") \
		python3 "$TMP/peer.py" connect "$TEST_HOST" "$SDPSTAT" "$BYTES" "$(cat "$TMP/port")" 2>&1
	wait_pid "$server" 30 >/dev/null 2>&1
}

# --- a listener without shm: the client goes on to tcp-fallback ------------------
NAME=noshm
conf
: >"$TMP/sdp.log"
out=$(two_procs noshm tcp-fallback shm,tcp-fallback)
if [ "$out" = "transport=tcp-fallback tx=$BYTES rx=1" ] &&
	grep -q "nobody listens on shm at .*: next transport" "$TMP/sdp.log"; then
	log "ok   a listener without shm: the client's connection went on to tcp-fallback"
else
	bad "a listener without shm: $out"
fi

# --- a listener with both, port 0: tcp-fallback chose the port -------------------
NAME=port0
conf
: >"$TMP/sdp.log"
out=$(two_procs port0 shm,tcp-fallback tcp-fallback)
# The transport that chose the port listens first.
if [ "$out" = "transport=tcp-fallback tx=$BYTES rx=1" ] &&
	grep -q "listening over tcp-fallback and shm" "$TMP/sdp.log"; then
	log "ok   a listener on shm and tcp-fallback, port 0: a tcp-fallback client reaches it"
else
	bad "a listener on shm and tcp-fallback, port 0: $out; $(grep 'listening over' "$TMP/sdp.log")"
fi

failures_end
log "PASS"
exit 0
