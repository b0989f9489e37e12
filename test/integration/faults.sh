#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Faults (issue 18): transport errors injected under every blocking call of
# the engine's API by fault_check's hook (a wrapping backend, installed with
# oti_test_backend(): nothing of it is in libsdp.so), each case checked for
# the errno TCP gives, no hang, no corrupt byte, and a working next
# connection.  The hook wraps the software transport over loopback; the
# RDMA transports get their faults in the guest (test/vm/faults.sh).
. "$(dirname "$0")/lib.sh"

FC=$(prog fault_check)
failures=0

if [ "$TEST_TRANSPORT" != tcp-fallback ]; then
	skip "fault_check wraps tcp-fallback; $TEST_TRANSPORT has test/vm/faults.sh"
fi
seed=${FAULT_SEED:-$(date +%s)}
log "--- injected faults, seed $seed (FAULT_SEED=$seed to repeat)"
SDP_ZCOPY_THRESH=262144 run_with_timeout 200 "$FC" -s "$seed" >"$TMP/out" 2>&1
rc=$?
sed 's/^/  /' "$TMP/out"
if [ "$rc" -ne 0 ]; then
	log "FAIL fault_check exit $(status_text "$rc")"
	failures=$((failures + 1))
fi

if [ "$failures" -ne 0 ]; then
	fail "$failures part(s) failed"
fi
log "PASS"
exit 0
