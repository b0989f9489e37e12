#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Real, unmodified Debian programs under the preload, both ends on SDP over
# TEST_TRANSPORT (the software transport by default), data checked:
#   iperf3 (forward, reverse, 4 parallel streams), socat (a checksummed
#   file each way), curl and wget against python3 -m http.server, and a
#   python3 socket echo.
# Each run must have used SDP: every program logs its connections (log
# min-level 7), and the line "over SDP (TRANSPORT)" must be there on both
# ends.
# (The watchdog starts when lib.sh is sourced: the limit is set before.)
: "${TEST_LIMIT:=400}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"

# Sanitizer builds: the leaks of iperf3, python3 or bash are not ours to
# report (the rest of the suite checks libsdp's own), and curl hangs in
# setlocale() under a preloaded ASan or TSan runtime, with or without
# libsdp, as wget does under TSan's.
sanitized=no tsan=no
if is_sanitized; then
	sanitized=yes
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	grep -q '^SAN_CFLAGS = .*-fsanitize=thread' "$top_builddir/Makefile" && tsan=yes
fi

conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 7" "use sdp server * $TEST_HOST:*" "use sdp client * $TEST_HOST:*"
P=$(preload_env "$conf")

# used_sdp NAME FILE: FILE (a program's stderr) shows an SDP connection
# over TEST_TRANSPORT.
used_sdp() {
	if grep -Eq "(over SDP|accepted an SDP connection) \($TEST_TRANSPORT\)" "$2"; then
		return 0
	fi
	bad "$1 did not use SDP over $TEST_TRANSPORT:"
	sed 's/^/  /' "$2" | tail -n 20
	return 1
}

# --- iperf3 ------------------------------------------------------------------------
if have iperf3; then
	for mode in "forward:" "reverse:-R" "parallel:-P 4"; do
		name=${mode%%:*} args=${mode#*:}
		port=$(free_port)
		start_bg "$TMP/iperf-s.$name" env $P iperf3 -s -1 --forceflush -p "$port"
		SERVER_PID=$BG_PID
		wait_for_text "$TMP/iperf-s.$name" "Server listening" 20 || { bad "iperf3 server ($name)"; continue; }
		# shellcheck disable=SC2086
		if run_with_timeout 60 env $P iperf3 -c "$TEST_HOST" -p "$port" -t 2 $args -J \
			>"$TMP/iperf-c.$name" 2>"$TMP/iperf-c.$name.err"; then
			bps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(int(d["end"]["sum_received"]["bits_per_second"]))' "$TMP/iperf-c.$name" 2>/dev/null || echo 0)
			if [ "${bps:-0}" -gt 0 ]; then
				log "ok   iperf3 $name: $((bps / 1000000)) Mbit/s over SDP"
				used_sdp "iperf3 client ($name)" "$TMP/iperf-c.$name.err"
			else
				bad "iperf3 $name: no throughput in the report"
			fi
		else
			bad "iperf3 $name client failed: $(tail -n 5 "$TMP/iperf-c.$name.err")"
		fi
		wait_pid "$SERVER_PID" 30 || bad "iperf3 server ($name) exit status $?"
		used_sdp "iperf3 server ($name)" "$TMP/iperf-s.$name"
	done
else
	bad "iperf3 is not installed (quickstart.sh installs it)"
fi

# --- socat: a file each way, checksummed ---------------------------------------------
if have socat; then
	head -c $((24 << 20)) /dev/urandom >"$TMP/up.bin"
	head -c $((9 << 20)) /dev/urandom >"$TMP/down.bin"
	port=$(free_port)
	# The server receives up.bin into a file and sends down.bin back.
	start_bg "$TMP/socat-s.err" env $P socat -u "TCP-LISTEN:$port,bind=$TEST_HOST,reuseaddr" \
		"OPEN:$TMP/up.out,creat,trunc"
	SERVER_PID=$BG_PID
	# The preload logs the listen (a fixed pause is not enough in an
	# emulated guest).
	wait_for_text "$TMP/socat-s.err" "listening on" 20 || bad "socat server (upload) did not listen"
	if run_with_timeout 60 env $P socat -u "OPEN:$TMP/up.bin" "TCP:$TEST_HOST:$port" \
		2>"$TMP/socat-c.err"; then
		wait_pid "$SERVER_PID" 30
		if [ "$(sha256sum <"$TMP/up.bin")" = "$(sha256sum <"$TMP/up.out")" ]; then
			log "ok   socat: 24 MiB upload, sha256 identical"
		else
			bad "socat upload: file differs"
		fi
		used_sdp "socat client (upload)" "$TMP/socat-c.err"
		used_sdp "socat server (upload)" "$TMP/socat-s.err"
	else
		bad "socat upload client failed: $(cat "$TMP/socat-c.err")"
	fi
	port=$(free_port)
	start_bg "$TMP/socat-s2.err" env $P socat -u "OPEN:$TMP/down.bin" \
		"TCP-LISTEN:$port,bind=$TEST_HOST,reuseaddr"
	SERVER_PID=$BG_PID
	wait_for_text "$TMP/socat-s2.err" "listening on" 20 || bad "socat server (download) did not listen"
	if run_with_timeout 60 env $P socat -u "TCP:$TEST_HOST:$port" "OPEN:$TMP/down.out,creat,trunc" \
		2>"$TMP/socat-c2.err"; then
		wait_pid "$SERVER_PID" 30
		if [ "$(sha256sum <"$TMP/down.bin")" = "$(sha256sum <"$TMP/down.out")" ]; then
			log "ok   socat: 9 MiB download, sha256 identical"
		else
			bad "socat download: file differs"
		fi
		used_sdp "socat client (download)" "$TMP/socat-c2.err"
	else
		bad "socat download client failed: $(cat "$TMP/socat-c2.err")"
	fi
else
	bad "socat is not installed (quickstart.sh installs it)"
fi

# --- python3 -m http.server, fetched by curl and wget ----------------------------------
mkdir -p "$TMP/www"
head -c $((7 << 20)) /dev/urandom >"$TMP/www/blob.bin"
port=$(free_port)
# -u: its "Serving HTTP" line is waited for, and a file is block-buffered.
start_bg "$TMP/http.err" env $P python3 -u -m http.server "$port" --bind "$TEST_HOST" --directory "$TMP/www"
HTTP_PID=$BG_PID
if wait_for_text "$TMP/http.err" "Serving HTTP" 20; then
	if [ "$sanitized" = yes ]; then
		log "curl not run: it hangs under a preloaded sanitizer runtime, with or without libsdp"
	elif have curl; then
		if run_with_timeout 60 env $P curl -sS -o "$TMP/blob.curl" "http://$TEST_HOST:$port/blob.bin" \
			2>"$TMP/curl.err" && cmp -s "$TMP/www/blob.bin" "$TMP/blob.curl"; then
			log "ok   curl from python3 http.server: 7 MiB identical"
			used_sdp "curl" "$TMP/curl.err"
		else
			bad "curl: $(cat "$TMP/curl.err")"
		fi
	else
		bad "curl is not installed (quickstart.sh installs it)"
	fi
	if [ "$tsan" = yes ]; then
		log "wget not run: it hangs in setlocale() under ThreadSanitizer's runtime, with or without libsdp"
	elif have wget; then
		if run_with_timeout 60 env $P wget -q -O "$TMP/blob.wget" "http://$TEST_HOST:$port/blob.bin" \
			2>"$TMP/wget.err" && cmp -s "$TMP/www/blob.bin" "$TMP/blob.wget"; then
			log "ok   wget from python3 http.server: 7 MiB identical"
			used_sdp "wget" "$TMP/wget.err"
		else
			bad "wget: $(cat "$TMP/wget.err")"
		fi
	fi
	# Its accept line is there only if some client came.
	if [ "$tsan" = yes ]; then
		log "python3 http.server: no client ran under ThreadSanitizer, its SDP use is not checked"
	else
		used_sdp "python3 http.server" "$TMP/http.err"
	fi
else
	bad "python3 http.server did not start: $(cat "$TMP/http.err")"
fi
kill "$HTTP_PID" 2>/dev/null

# --- python3 sockets: a threaded echo server, sendall/recv_into/makefile ----------------
cat >"$TMP/echo.py" <<'EOF'
import hashlib, os, socket, socketserver, sys, threading

class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            b = self.request.recv(65536)
            if not b:
                break
            self.request.sendall(b)

srv = socketserver.ThreadingTCPServer((sys.argv[1], 0), Echo)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
data = os.urandom(3 << 20)
with socket.create_connection((sys.argv[1], port)) as c:
    got = bytearray()
    def reader():
        buf = bytearray(65536)
        while len(got) < len(data):
            n = c.recv_into(buf)
            if not n:
                break
            got.extend(buf[:n])
    t = threading.Thread(target=reader)
    t.start()
    c.sendall(data)
    t.join(60)
ok = hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
print("echo", "ok" if ok else "FAILED", len(got))
srv.shutdown()
sys.exit(0 if ok else 1)
EOF
if run_with_timeout 60 env $P python3 "$TMP/echo.py" "$TEST_HOST" >"$TMP/echo.out" 2>&1 && grep -q "echo ok" "$TMP/echo.out"; then
	log "ok   python3 socketserver echo: 3 MiB identical"
	used_sdp "python3 echo" "$TMP/echo.out"
else
	bad "python3 echo: $(cat "$TMP/echo.out")"
fi

failures_end
log "PASS"
exit 0
