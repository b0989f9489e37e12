#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A listener shared with forked children stays SDP (issue 17, step 1 of
# doc/fork.md): every process that accepts takes connections from the
# one queue, and a process that does not accept takes none.  Both ends
# run under the preload with "use both" rules; a python3 server listens,
# then:
#   - workers: forks 2 workers that accept in a loop (blocking accept),
#     the parent never accepts (a pre-forked server's master);
#   - epoll-workers: the same, with non-blocking accept on an epoll set
#     made in each worker (nginx's way);
#   - parent: forks a helper child that never accepts and accepts in the
#     parent (redis BGSAVE's way);
#   - daemon: puts the listener in an epoll set, forks a child that goes
#     on with that set, and exits (a daemon that forks after setting up
#     its event loop);
#   - daemon-stays: the same, but the parent stays, holding the set it
#     never waits on again (a process that only holds a listener in an
#     epoll set must take no connection: one it took would wait for
#     ever, or be reset at its exit).
# A preloaded client makes N connections, each with data, one by one.
# Every connection is answered with the right length by a process that
# accepts (never the master of the worker cases), the client connected
# over SDP each time, and sdpstat counts N SDP accepts among the
# accepting processes, none in the others, and no TCP accept or fallback.
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
have python3 || skip "python3 is not installed"
case $TEST_TRANSPORT in
tcp-fallback | shm) ;;
*) skip "an rdma_cm listener is not shared with forked children yet (doc/fork.md, step 4)" ;;
esac
if is_sanitized; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

N=24
conf=$TMP/sdp.conf
write_conf "$conf" "log min-level 7" "use both server * *:*" "use both client * *:*"
P=$(preload_env "$conf")

cat >"$TMP/server.py" <<'EOF'
import os, select, signal, socket, sys

host, portfile, mode, pidfile = sys.argv[1:5]
lsn = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
lsn.bind((host, 0))
lsn.listen(128)

def answer(c, tag):
    # A connection that fails is said on stderr and costs only itself: a
    # worker that died of one would take the other connections' fate
    # with it and hide what went wrong.
    try:
        c.setblocking(True)
        data = b""
        while not data.endswith(b"\n"):
            b = c.recv(65536)
            if not b:
                break
            data += b
        c.sendall(("%s %d %d\n" % (tag, os.getpid(), len(data))).encode())
    except OSError as e:
        print("%s %d: a connection failed: %s" % (tag, os.getpid(), e), file=sys.stderr, flush=True)
    c.close()

def serve(tag):
    while True:
        answer(lsn.accept()[0], tag)

def serve_epoll(tag, ep=None):
    lsn.setblocking(False)
    if ep is None:
        ep = select.epoll()
        ep.register(lsn.fileno(), select.EPOLLIN)
    while True:
        ep.poll()
        try:
            c = lsn.accept()[0]
        except BlockingIOError:
            continue	# the other worker took it
        answer(c, tag)

kids = []
if mode in ("daemon", "daemon-stays"):
    ep = select.epoll()
    ep.register(lsn.fileno(), select.EPOLLIN)
    pid = os.fork()
    if pid == 0:
        serve_epoll("worker", ep)	# the event loop the parent set up
        os._exit(0)
    kids.append(pid)
elif mode in ("workers", "epoll-workers"):
    for i in range(2):
        pid = os.fork()
        if pid == 0:
            (serve if mode == "workers" else serve_epoll)("worker")
            os._exit(0)
        kids.append(pid)
else:
    pid = os.fork()
    if pid == 0:
        signal.pause()	# holds the listener, never accepts
        os._exit(0)
    kids.append(pid)
with open(pidfile, "w") as f:
    f.write(" ".join(str(k) for k in kids) + "\n")
with open(portfile + ".tmp", "w") as f:
    f.write(str(lsn.getsockname()[1]))
os.rename(portfile + ".tmp", portfile)
if mode == "daemon":
    os._exit(0)
if mode == "parent":
    serve("parent")
signal.pause()
EOF
cat >"$TMP/client.py" <<'EOF'
import socket, sys

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    c = socket.create_connection((host, port), timeout=60)
    payload = b"%d:" % i + b"x" * (1000 * i) + b"\n"
    c.sendall(payload)
    r = b""
    while not r.endswith(b"\n"):
        b = c.recv(4096)
        if not b:
            break
        r += b
    c.close()
    words = r.decode().split()
    ok = len(words) == 3 and words[2] == str(len(payload))
    print("%s %s %s" % (words[0] if words else "-", words[1] if ok else "-", "ok" if ok else "bad"))
EOF

# run_case MODE: the accepting processes are the workers (MODE *workers)
# or the parent (MODE parent).
run_case() {
	local mode=$1 dir=$TMP/$1 failed=0
	mkdir -p "$dir"
	# shellcheck disable=SC2086
	start_bg "$dir/server.err" env $P python3 "$TMP/server.py" "$TEST_HOST" "$dir/port" "$mode" "$dir/pids"
	local spid=$BG_PID
	if ! wait_for_file "$dir/port" 20; then
		bad "$mode: the server did not start: $(tail -n 5 "$dir/server.err")"
		return
	fi
	local kids
	kids=$(cat "$dir/pids")
	# shellcheck disable=SC2206
	BG_PIDS+=($kids)	# killed at exit whatever happens
	# shellcheck disable=SC2086
	run_with_timeout 120 env $P python3 "$TMP/client.py" "$TEST_HOST" "$(cat "$dir/port")" "$N" \
		>"$dir/answers" 2>"$dir/client.err"
	local rc=$? served sdp_conns
	local acceptors=$kids others=$spid
	if [ "$mode" = parent ]; then
		acceptors=$spid
		others=$kids
	elif [ "$mode" = daemon ]; then
		others=		# gone
	fi
	served=0
	for p in $acceptors; do
		served=$((served + $(grep -c " $p ok$" "$dir/answers")))
	done
	if [ "$rc" -ne 0 ] || [ "$served" -ne "$N" ]; then
		bad "$mode: $served of $N connections answered by an accepting process (client exit $(status_text "$rc")):"
		sort "$dir/answers" | uniq -c | head -n 10 | sed 's/^/  /'
		grep -v '^libsdp' "$dir/client.err" | tail -n 5 | sed 's/^/  client: /'
		grep -v '^libsdp' "$dir/server.err" | tail -n 8 | sed 's/^/  server: /'
		failed=1
	fi
	sdp_conns=$(grep -Ec "connected to .* over SDP \($TEST_TRANSPORT\)" "$dir/client.err")
	if [ "$sdp_conns" -ne "$N" ]; then
		bad "$mode: the client connected over SDP $sdp_conns times of $N:"
		grep -E "no SDP|TCP" "$dir/client.err" | head -n 5 | sed 's/^/  /'
		grep -v '^libsdp' "$dir/server.err" | tail -n 5 | sed 's/^/  server: /'
		failed=1
	fi
	local total=0 p a
	for p in $acceptors $others; do
		a=$(sdpstat_counters "$p" accept_sdp accept_tcp fallbacks)
		# shellcheck disable=SC2086
		set -- $a
		if [ "$#" -ne 3 ] || [ "$2" != 0 ] || [ "$3" != 0 ]; then
			bad "$mode: process $p: sdpstat accept sdp/tcp, fallbacks: '$a' (no TCP accept or fallback expected)"
			failed=1
			continue
		fi
		case " $others " in
		*" $p "*)
			if [ "$1" != 0 ]; then
				bad "$mode: process $p, which does not accept, took $1 SDP connections"
				failed=1
			fi
			;;
		*) total=$((total + $1)) ;;
		esac
	done
	if [ "$total" -ne "$N" ]; then
		bad "$mode: sdpstat counts $total SDP accepts in the accepting processes, not $N"
		failed=1
	fi
	if grep -q "accepted a TCP connection" "$dir/server.err"; then
		bad "$mode: the server accepted TCP connections"
		failed=1
	fi
	# shellcheck disable=SC2086
	kill $kids "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	if grep -Eq "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer" "$dir/server.err" "$dir/client.err"; then
		bad "$mode: a sanitizer report:"
		grep -Eh -A 12 "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer" "$dir/server.err" "$dir/client.err" | head -n 30 | sed 's/^/  /'
		failed=1
	fi
	[ "$failed" = 0 ] && log "ok   $mode: $N connections with data, every one accepted over SDP by an accepting process"
}

run_case workers
run_case epoll-workers
run_case parent
run_case daemon
run_case daemon-stays
failures_end
