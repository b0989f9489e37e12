#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The short soak (the long one is test/soak/long_soak.sh): soak_check runs
# 10 SDP connections at once in one process, two of each mode -- Bcopy
# (zero copy off), Read Zcopy (large sends, small reads: SrcAvail and RDMA
# read), Write Zcopy (large sends into large reads: Pipelined, SinkAvail
# and RDMA write), Transaction (small requests riding on the reply's
# SinkAvail) and mixed sizes -- every connection both ways at once with
# seeded random write and read sizes, 64 MiB in all.  Every byte is
# checked where it lands, each stream's count and XXH64 compared end to
# end, and the engine's counters must account for every byte, each
# mode's path must have carried some, and nothing may be reset.  Then a
# second run with another seed and a quarter of the connections on each
# of Read and Write Zcopy at a threshold of 16 KiB.  The seed of each run
# is logged, so a failure replays with --seed.
#
# The Transaction hold is 20 ms x TEST_SLOW, as in zcopy.sh: with the
# default 1 ms a busy host's preemption turns piggybacks into misses
# (misses lose nothing, but the run must see the mode carry requests).
. "$(dirname "$0")/lib.sh"

SOAK=$(prog soak_check)
bytes=64M
if is_sanitized; then
	bytes=16M	# ASan/TSan: the same paths, a quarter of the bytes
fi
export SDP_TRANS_HOLD_US=$((20000 * TEST_SLOW))
# Both ends of every connection are in one process; on an RDMA transport
# in the guest each accept registers its buffers first (see many_conns.sh).
export SDP_CONNECT_TIMEOUT_MS=$(($(slow 10) * 1000))
seed=$(( ($(date +%s) ^ $$) & 0x7fffffff ))

soak() {
	local desc=$1 rc
	shift
	log "--- $desc"
	run_with_timeout 150 "$SOAK" --host "$TEST_HOST" --stall 60 "$@" >"$TMP/out" 2>&1
	rc=$?
	sed 's/^/  /' "$TMP/out"
	[ "$rc" -eq 0 ] || bad "$desc: soak_check exit $(status_text "$rc")"
}

soak "10 connections, every mode, $bytes" --conns 10 --bytes "$bytes" --seed "$seed"
soak "8 connections, Read and Write Zcopy, threshold 16 KiB, $bytes" --conns 8 \
	--bytes "$bytes" --modes read,write --thresh 16K --seed $((seed + 1))
failures_end
log "PASS"
exit 0
