#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# conn_scale.sh BUILDDIR [N] [--tcp]
#
# What idle connections cost: one server process and one client process
# (test/integration/conn_hold.py, python3) make N connections (default
# 100) between them, one byte each way, and hold them.  For each end it
# prints the descriptors, pinned (VmPin: what RDMA registrations pin) and
# locked (VmLck) memory and resident size before any connection, after the
# first and after the last, and per connection: the difference from the
# first to the last divided by the N-1 connections after the first (what
# the first one opens once per process is left out); then the client's
# setup time per connection, how many connections were made, and
# sdpstat's counters (whether they ran on SDP, the reasons of any
# fallback).  The transport is TEST_TRANSPORT on TEST_HOST as in the
# integration suite (in the VM testbed: TEST_TRANSPORT=ib over rxe, iwarp
# over siw); --tcp runs the same without the preload.  A measurement, not
# a test (doc/scale.md has figures).
set -u
BUILD=$(cd "$1" && pwd) || exit 2
N=${2:-100}
TCP=${3:-}
top_builddir=$BUILD
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
export top_builddir top_srcdir
TEST_LIMIT=${TEST_LIMIT:-3600}
# lib.sh: TEST_HOST, write_conf, preload_env, start_bg, the scratch TMP.
# shellcheck source=../test/integration/lib.sh
. "$top_srcdir/test/integration/lib.sh"
HOLD=$top_srcdir/test/integration/conn_hold.py
secs=$(slow 30)
conf=$TMP/sdp.conf
write_conf "$conf" "use sdp server * $TEST_HOST:*" "use sdp client * $TEST_HOST:*"
penv=()
[ "$TCP" = --tcp ] || read -ra penv <<<"$(preload_env "$conf")"

start_bg "$TMP/server.out" env "${penv[@]}" python3 "$HOLD" server "$TEST_HOST" "$TMP/port" "$N" "$secs"
spid=$BG_PID
wait_for_file "$TMP/port" 60 || fail "the server did not listen: $(cat "$TMP/server.out")"
start_bg "$TMP/client.out" env "${penv[@]}" python3 "$HOLD" client "$TEST_HOST" "$(cat "$TMP/port")" "$N" "$secs"
cpid=$BG_PID
# Until both have reported, or one of them is gone (the OOM killer).
until grep -q '^ok=' "$TMP/server.out" && grep -q '^ok=' "$TMP/client.out"; do
	kill -0 "$spid" 2>/dev/null && kill -0 "$cpid" 2>/dev/null || break
	sleep 0.2
done
stat=$("$top_builddir/tools/sdpstat" -c 2>/dev/null)
for p in "$spid" "$cpid"; do
	if kill -0 "$p" 2>/dev/null; then
		kill "$p"
		wait "$p" 2>/dev/null
	else
		wait "$p"
		rc=$?
		[ "$rc" -gt 128 ] && echo "pid $p was killed by signal $((rc - 128)) (9: the OOM killer?)"
	fi
done

kv() { grep -o "$2=[^ ]*" "$1" | head -1 | cut -d= -f2; }
echo "transport ${TCP:+kernel TCP, not }${TEST_TRANSPORT}, host $TEST_HOST, $N connections asked"
for side in server client; do
	f=$TMP/$side.out
	ok=$(kv "$f" ok)
	printf '%s: ok=%s err=%s %s\n' "$side" "${ok:-?}" "$(kv "$f" err)" "$(grep -o "first_err=.*" "$f")"
	for k in fds pin_kb lck_kb rss_kb; do
		b=$(kv "$f" "before_$k") f1=$(kv "$f" "first_$k") a=$(kv "$f" "after_$k")
		[ -n "$b" ] && [ -n "$f1" ] && [ -n "$a" ] || continue
		printf '  %-7s before %8s first %8s after %8s per connection %s\n' "$k" "$b" "$f1" "$a" \
			"$(awk -v a="$a" -v f="$f1" -v n="${ok:-0}" 'BEGIN { if (n > 1) printf "%.1f", (a - f) / (n - 1); else print "-" }')"
	done
	grep -v '_fds=\|^ok=\|^setup_ms=' "$f" | tail -5 | sed 's/^/  | /'
done
ms=$(kv "$TMP/client.out" setup_ms) ok=$(kv "$TMP/client.out" ok)
[ -n "$ms" ] && [ "${ok:-0}" -gt 0 ] && awk -v ms="$ms" -v n="$ok" 'BEGIN { printf "setup per connection (client, one after the other): %.2f ms\n", ms / n }'
[ -n "$stat" ] && printf 'sdpstat:\n%s\n' "$stat"
exit 0
