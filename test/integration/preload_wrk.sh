#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# wrk against nginx, both preloaded with "use both" rules, 64 connections
# for a few seconds: not one socket error, and the connections were SDP
# over TEST_TRANSPORT at both ends.
#
# Event loops such as wrk's size their table by the connections they
# expect (10 + 3 per connection) and index it by fd: they break as soon
# as libsdp's own descriptors take the low numbers and push the
# application's sockets up ("Socket errors: connect N").  libsdp keeps its
# descriptors at the top of the fd space (common/fdspace.h).
#
# Skips (77) when nginx or wrk is not installed, or libsdp.so not built.
: "${TEST_LIMIT:=200}"
export TEST_LIMIT
. "$(dirname "$0")/lib.sh"

CONNS=64
for p in nginx wrk; do
	command -v "$p" >/dev/null 2>&1 || skip "$p is not installed"
done
preload_lib >/dev/null || skip "libsdp.so is not built"
if is_sanitized; then
	# The programs' own leaks are not libsdp's to report.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

port=$(free_port)
[ -n "$port" ] || fail "no free port"

# nginx unprivileged, in one process (a forked worker would turn the
# "both" listener into a TCP one: sdp.conf(5), fork and exec), every path
# in the scratch directory.
mkdir -p "$TMP/www" "$TMP/tmp"
echo "hello over SDP" >"$TMP/www/index.html"
cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
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

# A "both" connect waits fallback_timeout_ms for SDP: 64 of them at once
# take longer than that in an emulated guest; scaled like every limit.
for side in server client; do
	write_conf "$TMP/$side.conf" "log min-level 7 destination file $TMP/$side.log" \
		"set fallback_timeout_ms $((3000 * TEST_SLOW))" \
		"use both server * *:*" "use both client * *:*"
done

SP=$(preload_env "$TMP/server.conf")
CP=$(preload_env "$TMP/client.conf")
# shellcheck disable=SC2086
start_bg "$TMP/nginx.out" env $SP \
	nginx -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log"
NGINX_PID=$BG_PID
if ! wait_for_text "$TMP/server.log" "listening on .* over SDP and TCP" 20; then
	sed 's/^/  nginx: /' "$TMP/nginx.out" "$TMP/error.log" 2>/dev/null
	sed 's/^/  libsdp: /' "$TMP/server.log" 2>/dev/null
	fail "nginx did not listen on SDP and TCP"
fi

# shellcheck disable=SC2086
run_with_timeout 60 env $CP \
	wrk -c "$CONNS" -t 2 -d "$(slow 3)s" --timeout "$(slow 2)s" \
	"http://$TEST_HOST:$port/index.html" >"$TMP/wrk.out" 2>&1
rc=$?
kill "$NGINX_PID" 2>/dev/null
wait_pid "$NGINX_PID" 20

sed 's/^/  wrk: /' "$TMP/wrk.out"
failed=0
bad() {
	log "FAIL: $*"
	failed=1
}
[ "$rc" -eq 0 ] || bad "wrk exited $(status_text "$rc")"
grep -q "requests in" "$TMP/wrk.out" || bad "wrk reported no requests"
! grep -q "Socket errors" "$TMP/wrk.out" || bad "wrk had socket errors"
! grep -q "Non-2xx" "$TMP/wrk.out" || bad "nginx answered with errors"

# Every connection of wrk went over SDP on the transport under test, and
# nginx accepted them over SDP.
sdp_out=$(grep -Ec "connected to .* over SDP \($TEST_TRANSPORT\)" "$TMP/client.log")
sdp_in=$(grep -Ec "accepted an SDP connection \($TEST_TRANSPORT\)" "$TMP/server.log")
fallbacks=$(grep -c "no SDP to" "$TMP/client.log")
log "wrk: $sdp_out SDP connections, $fallbacks on TCP; nginx: $sdp_in accepted over SDP"
[ "$sdp_out" -ge "$CONNS" ] || bad "wrk made $sdp_out SDP connections, fewer than $CONNS"
[ "$sdp_in" -ge "$CONNS" ] || bad "nginx accepted $sdp_in SDP connections, fewer than $CONNS"
if [ "$fallbacks" -ne 0 ]; then
	grep "no SDP to" "$TMP/client.log" | head -n 5 | sed 's/^/  libsdp: /'
	bad "$fallbacks connections fell back to TCP"
fi
[ "$failed" -eq 0 ] || exit 1
log "PASS"
exit 0
