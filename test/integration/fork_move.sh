#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Accept-then-fork servers serve their connections over SDP in the child
# (issue 17, step 2): the connection the parent accepted moves to the
# child at its first use (a claim on the parent's control socket,
# ops/relay.c, doc/fork.md), and is not relayed.  Both ends under the
# preload, on the software transport that can move (tcp-fallback):
#   - python3 socketserver.ForkingMixIn HTTP server: N pages fetched and N
#     bodies posted and echoed, each on a connection of its own, checked
#     byte for byte;
#   - socat TCP-LISTEN:...,fork EXEC:cat: files echoed both ways, checked
#     byte for byte.
# For each server, its sdpstat counters say that every connection was
# accepted over SDP and none over TCP (the application's port carried no
# kernel TCP connection), that each one moved to a child (moves_out) and
# that none was relayed (a relayed connection is no move) or refused; the
# children's logs say each took its connection over tcp-fallback.
: "${TEST_LIMIT:=300}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
[ "$TEST_TRANSPORT" = tcp-fallback ] ||
	skip "connections move between processes on tcp-fallback only (not $TEST_TRANSPORT)"
if is_sanitized; then
	# The leaks of python3 and socat are not ours to report.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 7" "use both server * *:*" "use both client * *:*"
P=$(preload_env "$conf")

# server_moved NAME PID LOG N: the server PID accepted N connections, all
# over SDP, and each moved to a child (its log LOG says so N times, with
# the transport), none relayed or refused.
server_moved() {
	local name=$1 pid=$2 log=$3 n=$4 c moved
	c=$(sdpstat_counters "$pid" accept_sdp accept_tcp moves_out relays moves_refused)
	if [ "$c" != "$n 0 $n none none" ] && [ "$c" != "$n 0 $n 0 0" ]; then
		bad "$name: sdpstat accept_sdp accept_tcp moves_out relays moves_refused: '$c', want '$n 0 $n none none'"
		grep -E "fork|move" "$log" | tail -n 20 | sed 's/^/  /'
		return 1
	fi
	moved=$(grep -Ec "SDP connection moved here from process $pid \(tcp-fallback\)" "$log")
	if [ "$moved" != "$n" ]; then
		bad "$name: $moved children took their connection over tcp-fallback, want $n"
		return 1
	fi
	return 0
}

# --- python3 ForkingMixIn HTTP server --------------------------------------------------
cat >"$TMP/srv.py" <<'EOF'
import http.server, os, socketserver, sys

def page(i):
    # Bytes that differ by place and page: a shifted or repeated piece shows.
    return bytes((k * 7 + i * 13 + (k >> 8)) & 0xff for k in range(40000 + 1000 * i))

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(page(int(self.path.rsplit("/", 1)[1])))

    def do_POST(self):
        self.reply(self.rfile.read(int(self.headers["Content-Length"])))

    def log_message(self, *args):
        pass

class Server(socketserver.ForkingMixIn, http.server.HTTPServer):
    pass

srv = Server((sys.argv[1], 0), Handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
srv.serve_forever()
EOF
cat >"$TMP/cli.py" <<'EOF'
import http.client, os, sys

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from srv_page import page
bad = 0
for i in range(n):
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("GET", "/page/%d" % i)
    body = c.getresponse().read()
    c.close()
    if body != page(i):
        print("page %d: %d bytes, not the %d sent" % (i, len(body), len(page(i))))
        bad += 1
    up = os.urandom(100000 + 7 * i)
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("POST", "/echo", body=up)
    body = c.getresponse().read()
    c.close()
    if body != up:
        print("echo %d: %d bytes back of %d, not the same" % (i, len(body), len(up)))
        bad += 1
print("ok" if not bad else "%d bad" % bad)
EOF
sed -n '/^def page/,/^$/p' "$TMP/srv.py" >"$TMP/srv_page.py"

N=6
start_bg "$TMP/http.err" env $P python3 "$TMP/srv.py" "$TEST_HOST" "$TMP/http.port"
HTTP_PID=$BG_PID
if wait_for_file "$TMP/http.port" 20; then
	port=$(cat "$TMP/http.port")
	run_with_timeout 120 env $P python3 "$TMP/cli.py" "$TEST_HOST" "$port" "$N" \
		>"$TMP/cli.out" 2>"$TMP/cli.err"
	rc=$?
	sdp=$(grep -Ec "connected to .* over SDP \(tcp-fallback\)" "$TMP/cli.err")
	if [ "$rc" -ne 0 ] || [ "$(cat "$TMP/cli.out")" != ok ]; then
		bad "ForkingMixIn: client exit $(status_text "$rc"): $(head -c 300 "$TMP/cli.out")"
		grep -v '^libsdp' "$TMP/cli.err" | tail -n 5 | sed 's/^/  client: /'
	elif [ "$sdp" != $((2 * N)) ]; then
		bad "ForkingMixIn: $sdp of $((2 * N)) client connections over SDP"
		grep -E "no SDP|SDP connect failed|refusing" "$TMP/cli.err" "$TMP/http.err" | head -n 5 | sed 's/^/  /'
	elif server_moved "ForkingMixIn" "$HTTP_PID" "$TMP/http.err" $((2 * N)); then
		# socketserver shuts a connection down for writing before it
		# closes it, and the child then _exit()s: a child whose close
		# is the last hands the connection back to the parent to be
		# finished (what waits for credits, the DisConn), unless it is
		# over already (the client's DisConn was in); it never closes a
		# live one itself.  (A child whose close came before the
		# parent's close of its copy keeps the connection: doc/fork.md,
		# what is left.)
		back=$(grep -Ec "handed back to process $HTTP_PID to finish" "$TMP/http.err")
		over=$(grep -Ec "SDP connection over .* at its last holder's close" "$TMP/http.err")
		own=$(grep -Ec "SDP connection closed by its last holder$" "$TMP/http.err")
		if [ "$own" != "$over" ] || [ $((back + over)) -gt $((2 * N)) ] ||
			grep -q "cannot go back" "$TMP/http.err"; then
			bad "ForkingMixIn: of $((2 * N)) children's closes, $back handed the connection back to the server to finish, $own closed it themselves, $over of them because it was over"
			grep -E "closed by its last holder|cannot go back|handed" "$TMP/http.err" | tail -n 5 | sed 's/^/  /'
		else
			log "ok   python3 ForkingMixIn: $N pages and $N echoes intact, every connection moved to its child over tcp-fallback, none relayed; at the children's closes $back handed back to finish, $over over, $((2 * N - back - over)) kept (closed before the parent's copy)"
		fi
	fi
else
	bad "python3 ForkingMixIn server did not start: $(cat "$TMP/http.err")"
fi
kill "$HTTP_PID" 2>/dev/null
wait "$HTTP_PID" 2>/dev/null
no_sanitizer_report "ForkingMixIn" "$TMP/http.err" "$TMP/cli.err"

# --- socat fork ---------------------------------------------------------------------------
if have socat; then
	port=$(free_port)
	start_bg "$TMP/socat-s.err" env $P socat "TCP-LISTEN:$port,bind=$TEST_HOST,reuseaddr,fork" EXEC:cat
	SOCAT_PID=$BG_PID
	if wait_for_text "$TMP/socat-s.err" "listening on" 20; then
		good=0
		for i in 1 2 3; do
			head -c $(((1 << 20) + 4093 * i)) /dev/urandom >"$TMP/data.$i"
			# -t: the client waits for the echo's end after its EOF.
			run_with_timeout 60 env $P socat -t 60 - "TCP:$TEST_HOST:$port" \
				<"$TMP/data.$i" >"$TMP/echo.$i" 2>"$TMP/socat-c.$i.err"
			rc=$?
			if [ "$rc" -eq 0 ] && cmp -s "$TMP/data.$i" "$TMP/echo.$i"; then
				good=$((good + 1))
			else
				bad "socat fork, connection $i: exit $(status_text "$rc"), $(stat -c %s "$TMP/echo.$i") bytes back of $(stat -c %s "$TMP/data.$i"), $(cmp "$TMP/data.$i" "$TMP/echo.$i" 2>&1 | head -n 1)"
				grep -v '^libsdp' "$TMP/socat-c.$i.err" | sed 's/^/  client: /' | tail -n 5
			fi
		done
		if [ "$good" -eq 3 ] && server_moved "socat fork" "$SOCAT_PID" "$TMP/socat-s.err" 3; then
			log "ok   socat fork EXEC:cat: 3 files echoed intact, every connection moved to its child over tcp-fallback, none relayed"
		fi
	else
		bad "socat did not listen: $(cat "$TMP/socat-s.err")"
	fi
	kill "$SOCAT_PID" 2>/dev/null
	wait "$SOCAT_PID" 2>/dev/null
	no_sanitizer_report "socat fork" "$TMP/socat-s.err" "$TMP"/socat-c.*.err
else
	log "socat is not installed: its case is left out"
fi

failures_end
log "PASS"
