#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Zero copy through the engine's API (zcopy_check).  Read Zcopy
# (SrcAvail, RDMA read, RdmaRdCompl): sizes around the threshold and
# zcopy_max, direct and staged reads, MSG_PEEK, MSG_WAITALL, readv, the
# per-socket threshold, Bcopy where zero copy must not be used
# (non-blocking sends, small iovec elements, threshold 0), mixed small and
# large sends, both directions at once, a send cancelled by SO_SNDTIMEO or
# by a signal (partial count, the rest re-sent, the stream intact), and a
# peer killed with -9 on either side.  Write Zcopy and the modes
# (ModeChange, SinkAvail, RDMA write, RdmaWrCompl): a stream that goes
# Pipelined and is written into the receiver's adverts, request/response
# in Transaction mode (requests riding on the reply's SinkAvail) and a
# poller that makes it miss, an advertised recv cancelled by SO_RCVTIMEO
# or a signal, both directions Pipelined at once, and a peer killed while
# the other waits in an advertised recv or writes into adverts.  Every
# case is checksummed and checks the engine counters of both processes,
# so a transfer that silently went by Bcopy fails.
#
# Each run sets the tunables the cases' expectations are computed from
# (zcopy_check reads them back from the engine or the environment), so a
# change of an engine default does not change what is tested: the
# threshold 65536, and the Transaction hold, 20 ms x TEST_SLOW.  The hold
# is a deadline for what the client does between its request's send()
# and the recv() whose advert carries it; with the default of 1 ms a
# busy host's preemption would count as misses, and the transaction-miss
# case tells a request that poll() sent from one left to the hold's timer
# by the time a turn takes, which must stay well below the hold.  Then
# another threshold (sizes follow it), 0 (zero copy off: every case
# expects Bcopy), and Transaction mode off (SDP_TRANS_HOLD_US=0: no
# request may piggyback or miss).
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

hold=SDP_TRANS_HOLD_US=$((20000 * TEST_SLOW))
# The cases run with zero copy off (threshold 0): each must go by Bcopy.
off_cases=sockopt,size-1m+7,size-max+1,server-sends,bidir,write-zcopy,transaction,bidir-pipelined
# A transport without RDMA read and write (shm: the bytes are already in
# shared memory, doc/shm.md) never uses zero copy: there only the cases
# that must go by Bcopy on every transport run -- the threshold 0 run, and
# at 65536 the socket option, a send below the threshold, a sender whose
# own threshold is 0 and non-blocking sends.
if ! transport_can rdma_read || ! transport_can rdma_write; then
	log "SKIP the zero-copy cases: $TEST_TRANSPORT has no RDMA read and write," \
		"so no zero copy; only the Bcopy cases run"
	run "threshold 65536, Bcopy cases" SDP_ZCOPY_THRESH=65536 "$hold" -- \
		--only sockopt,size-thresh-1,zcopy-off,nonblock
	run "SDP_ZCOPY_THRESH=0 (zero copy off)" SDP_ZCOPY_THRESH=0 "$hold" -- --only "$off_cases"
	[ "$failures" -eq 0 ] || fail "$failures run(s) failed"
	log "PASS (Bcopy cases only)"
	exit 0
fi
run "threshold 65536" SDP_ZCOPY_THRESH=65536 "$hold" --
run "SDP_ZCOPY_THRESH=100000" SDP_ZCOPY_THRESH=100000 "$hold" -- \
	--only sockopt,size-thresh-1,size-thresh,size-thresh+1,staged-1k,mixed,write-zcopy,transaction
run "SDP_ZCOPY_THRESH=0 (zero copy off)" SDP_ZCOPY_THRESH=0 "$hold" -- --only "$off_cases"
run "SDP_TRANS_HOLD_US=0 (Transaction mode off)" SDP_ZCOPY_THRESH=65536 SDP_TRANS_HOLD_US=0 -- \
	--only transaction,transaction-miss
# The SinkAvailCancel / SinkCancelAck exchange a few times more: it is
# timing-sensitive (a drive of the connection from inside the posting
# code, doc/fastpath.md step 0, lost the answer in 2 runs of 3, the recv
# then waiting out zcopy_cancel_timeout_ms).
for i in 1 2 3 4; do
	run "sink cancel, again ($i)" SDP_ZCOPY_THRESH=65536 "$hold" -- \
		--only sink-cancel-rcvtimeo,sink-cancel-signal
done

if [ "$failures" -ne 0 ]; then
	fail "$failures run(s) failed"
fi
log "PASS"
exit 0
