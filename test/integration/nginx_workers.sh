#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# nginx with its default process model (daemon, a master and 2 workers),
# both ends preloaded with "use both" rules (issue 17, step 1): the
# listener nginx made before daemonizing and forking its workers stays SDP
# (doc/fork.md, listeners shared with forked children), every curl
# request is answered over SDP, and sdpstat counts the SDP accepts in the workers (all of them, none in the
# master, no TCP accept).
#
# Skips (77) when nginx or curl is not installed, or libsdp.so not built.
: "${TEST_LIMIT:=200}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

N=20
for p in nginx curl; do
	have "$p" || skip "$p is not installed"
done
preload_lib >/dev/null || skip "libsdp.so is not built"
case $TEST_TRANSPORT in
tcp-fallback | shm) ;;
*) skip "an rdma_cm listener is not shared with forked children yet (doc/fork.md, step 4)" ;;
esac

# Not under a sanitizer: nginx forks (daemon) right after listen(), while
# libsdp's progress thread, just started, may be allocating, and the
# sanitizer's allocator lock, unlike glibc's malloc, is not made safe
# across fork(): the child then hangs in its first malloc().
if is_sanitized; then
	skip "nginx daemonizes while a thread allocates: the sanitizer's allocator hangs the child"
fi

port=$(free_port)
[ -n "$port" ] || fail "no free port"

mkdir -p "$TMP/www" "$TMP/tmp"
echo "hello over SDP" >"$TMP/www/index.html"
# The workers as this user (root's would be nobody's, who cannot read
# the scratch directory); a user that is not root gets a warning.
cat >"$TMP/nginx.conf" <<EOF
user $(id -un) $(id -gn);
daemon on;
worker_processes 2;
pid $TMP/nginx.pid;
error_log $TMP/error.log warn;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $TMP/tmp;
	proxy_temp_path $TMP/tmp;
	fastcgi_temp_path $TMP/tmp;
	uwsgi_temp_path $TMP/tmp;
	scgi_temp_path $TMP/tmp;
	server {
		listen $TEST_HOST:$port;
		root $TMP/www;
	}
}
EOF
for side in server client; do
	write_conf "$TMP/$side.conf" "log min-level 7 destination file $TMP/$side.log" \
		"use both server * *:*" "use both client * *:*"
done
SP=$(preload_env "$TMP/server.conf")
CP=$(preload_env "$TMP/client.conf")

# shellcheck disable=SC2086
run_with_timeout 30 env $SP nginx -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" \
	>"$TMP/nginx.out" 2>&1
rc=$?
wait_for_file "$TMP/nginx.pid" 20
master=$(cat "$TMP/nginx.pid" 2>/dev/null)
workers=
# The cleanup kills the master and the workers (kill -9) whatever happens.
if [ -n "$master" ]; then
	BG_PIDS+=("$master")
	end=$((SECONDS + 20 * TEST_SLOW))
	while [ "$SECONDS" -lt "$end" ]; do
		workers=$(ps -o pid= --ppid "$master" | tr -s ' \n' ' ')
		workers=${workers# }
		workers=${workers% }
		# shellcheck disable=SC2086
		set -- $workers
		[ "$#" -ge 2 ] && break
		sleep 0.05
	done
	# shellcheck disable=SC2206
	BG_PIDS+=($workers)
fi
# shellcheck disable=SC2086
set -- $workers
if [ "$rc" -ne 0 ] || [ -z "$master" ] || [ "$#" -ne 2 ]; then
	sed 's/^/  nginx: /' "$TMP/nginx.out" "$TMP/error.log" 2>/dev/null
	fail "nginx did not start a master and 2 workers (exit $(status_text "$rc"), master '$master', workers '$workers')"
fi
if ! grep -Eq "listening on .* over SDP and TCP" "$TMP/server.log"; then
	sed 's/^/  libsdp: /' "$TMP/server.log" | tail -n 10
	fail "nginx did not listen on SDP and TCP"
fi

ok=0
for _ in $(seq "$N"); do
	# shellcheck disable=SC2086
	body=$(run_with_timeout 8 env $CP curl -sS "http://$TEST_HOST:$port/index.html" 2>>"$TMP/curl.err")
	if [ "$body" = "hello over SDP" ]; then
		ok=$((ok + 1))
	else
		last=$body
	fi
done
if [ "$ok" -ne "$N" ]; then
	tail -n 15 "$TMP/server.log" | sed 's/^/  server: /'
	tail -n 6 "$TMP/client.log" | sed 's/^/  client: /'
fi
[ "$ok" -eq "$N" ] || bad "$ok of $N requests answered right (last wrong body: $(printf %s "${last:-}" | head -c 300)): $(grep -v '^libsdp' "$TMP/curl.err" | tail -n 3)"
sdp_out=$(grep -Ec "connected to .* over SDP \($TEST_TRANSPORT\)" "$TMP/client.log")
[ "$sdp_out" -eq "$N" ] || bad "curl connected over SDP $sdp_out times of $N: $(grep 'no SDP' "$TMP/client.log" | head -n 3)"

total=0
for p in $workers; do
	a=$(sdpstat_counters "$p" accept_sdp accept_tcp)
	log "worker $p: sdpstat accept sdp/tcp $a"
	case $a in
	*" 0") total=$((total + ${a% *})) ;;
	*) bad "worker $p: sdpstat accept sdp/tcp '$a'" ;;
	esac
done
[ "$total" -eq "$N" ] || bad "sdpstat counts $total SDP accepts in the workers, not $N"
a=$(sdpstat_counters "$master" accept_sdp accept_tcp)
[ "$a" = "0 0" ] || bad "the master accepted: sdpstat accept sdp/tcp '$a'"
grep -q "no SDP on" "$TMP/server.log" && bad "the listener fell back: $(grep 'no SDP on' "$TMP/server.log")"

kill -QUIT "$master" 2>/dev/null
end=$((SECONDS + 20 * TEST_SLOW))
while kill -0 "$master" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do
	sleep 0.05
done
failures_end
log "ok   nginx master + 2 workers: $N requests over SDP, accepted by the workers ($workers)"
