#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A TCP connection converted to SDP in place under the preload
# (setsockopt(SOL_SDP, SDP_CONVERT_*), doc/conversion.md), by a program
# that makes only libc calls (preload_convert): under a policy that keeps
# every connection on TCP, the two ends convert theirs and go on with the
# same fds over SDP on the transport under test (4 MiB each way, checked;
# O_NONBLOCK kept; a second conversion is EISCONN); a peer that does not
# convert leaves the fd on TCP with the stream intact (EPROTO); a wrong
# option length is EINVAL.
. "$(dirname "$0")/lib.sh"

preload_lib >/dev/null || skip "libsdp.so is not built"
PC=$(prog preload_convert)
conf=$TMP/tcp.conf
write_conf "$conf" "log min-level 7" "use tcp server * *:*" "use tcp client * *:*"
out=$TMP/out
run_with_timeout 300 env $(preload_env "$conf") "$PC" >"$out" 2>&1
rc=$?
grep 'preload_convert:' "$out"
[ "$rc" -eq 0 ] || { sed 's/^/  /' "$out"; fail "preload_convert exit $(status_text "$rc")"; }
n=$(grep -c "TCP connection converted to SDP ($TEST_TRANSPORT)" "$out")
[ "$n" -eq 2 ] || { sed 's/^/  /' "$out"; fail "want 2 conversions over $TEST_TRANSPORT logged, found $n"; }
log "PASS"
exit 0
