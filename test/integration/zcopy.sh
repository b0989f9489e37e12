#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Read Zcopy (SrcAvail, RDMA read, RdmaRdCompl) through the engine's API
# (zcopy_check): sizes around the threshold and zcopy_max, direct and
# staged reads, MSG_PEEK, MSG_WAITALL, readv, the per-socket threshold,
# Bcopy where zero copy must not be used (non-blocking sends, small iovec
# elements, threshold 0), mixed small and large sends, both directions at
# once, a send cancelled by SO_SNDTIMEO or by a signal (partial count, the
# rest re-sent, the stream intact), and a peer killed with -9 on either
# side.  Every case is checksummed and checks the engine counters of both
# processes, so a transfer that silently went by Bcopy fails.
#
# Then the same process-wide threshold from the environment: another
# value (sizes follow it) and 0 (zero copy off: every case expects Bcopy).
. "$(dirname "$0")/lib.sh"

ZC=$(prog zcopy_check)
args=()
if is_sanitized; then
	args+=(--small)
fi
failures=0

# run DESC ENV... -- ARGS...: one zcopy_check run, its lines logged.
run() {
	local desc=$1 rc
	shift
	local envs=()
	while [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	log "--- $desc"
	env "${envs[@]}" "$(command -v timeout)" -k 5 "$(slow 150)" "$ZC" "${args[@]}" "$@" \
		>"$TMP/out" 2>&1
	rc=$?
	sed 's/^/  /' "$TMP/out"
	if [ "$rc" -ne 0 ]; then
		log "FAIL $desc: zcopy_check exit $(status_text "$rc")"
		failures=$((failures + 1))
	fi
}

run "default threshold" --
run "SDP_ZCOPY_THRESH=100000" SDP_ZCOPY_THRESH=100000 -- \
	--only sockopt,size-thresh-1,size-thresh,size-thresh+1,staged-1k,mixed
run "SDP_ZCOPY_THRESH=0 (zero copy off)" SDP_ZCOPY_THRESH=0 -- \
	--only sockopt,size-1m+7,size-max+1,server-sends,bidir

if [ "$failures" -ne 0 ]; then
	fail "$failures run(s) failed"
fi
log "PASS"
exit 0
