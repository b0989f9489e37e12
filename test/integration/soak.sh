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
# second run with another seed and half of the connections on each of
# Read and Write Zcopy at a threshold of 16 KiB, and a third with 4
# receive and 4 send buffers of 4 KiB (short credits, many messages) and
# a 4-KiB threshold on Write Zcopy and mixed connections.  Last, the
# first run's mix again under the preload, through libc's calls
# (--libc): there the preload's own counters (sdpstat's) must show every
# byte on SDP, per socket and per path, no connection on TCP, and the
# kernel TCP sockets at the application's fds must have carried nothing.
# The seed of each run is logged, so a failure replays with --seed.
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
# On a transport without RDMA read or write (shm, doc/shm.md) the zero-copy
# modes go by Bcopy: soak_check then checks that no byte went that way.
lacks=
transport_can rdma_read || lacks='read'
transport_can rdma_write || lacks=${lacks:+$lacks,}write
no_rdma=()
if [ -n "$lacks" ]; then
	no_rdma=(--no-rdma "$lacks")
	log "$TEST_TRANSPORT has no RDMA ${lacks/,/ and }: the modes that would use it go by Bcopy"
fi

# soak DESC ARGS...: one run of soak_check with ARGS; or soak DESC env ...:
# that command as it is.
soak() {
	local desc=$1 rc
	shift
	log "--- $desc"
	if [ "$1" != env ]; then
		set -- "$SOAK" --host "$TEST_HOST" --stall 60 ${no_rdma[@]+"${no_rdma[@]}"} "$@"
	fi
	run_with_timeout 150 "$@" >"$TMP/out" 2>&1
	rc=$?
	sed 's/^/  /' "$TMP/out"
	[ "$rc" -eq 0 ] || bad "$desc: soak_check exit $(status_text "$rc")"
}

soak "10 connections, every mode, $bytes" --conns 10 --bytes "$bytes" --seed "$seed"
soak "8 connections, Read and Write Zcopy, threshold 16 KiB, $bytes" --conns 8 \
	--bytes "$bytes" --modes read,write --thresh 16K --seed $((seed + 1))
# A credit window of 4 buffers of 4 KiB each way and a 4-KiB threshold:
# adverts and offers often wait for credits.  A send whose offer found
# the peer's advert arriving while it waited once went to sleep with the
# advert usable, and both ends waited for ever (every run hung, with one
# connection or four, with 4 receive buffers alone or these).
SDP_RECV_BUFS=4 SDP_SEND_BUFS=4 SDP_BUF_SIZE=4096 \
	soak "4 connections, Write Zcopy and mixed, 4 x 4 KiB buffers each way, threshold 4 KiB, $bytes" \
	--conns 4 --bytes "$bytes" --modes write,mixed --thresh 4K --seed $((seed + 3))
if preload_lib >/dev/null; then
	write_conf "$TMP/sdp.conf" "use both server * *:*" "use both client * *:*"
	export SDP_STATS_DIR=$TMP
	# shellcheck disable=SC2046
	soak "under the preload: 10 connections, every mode, $bytes" \
		env $(preload_env "$TMP/sdp.conf") "$SOAK" --libc --host "$TEST_HOST" --stall 60 \
		${no_rdma[@]+"${no_rdma[@]}"} \
		--conns 10 --bytes "$bytes" --seed $((seed + 2))
else
	bad "no libsdp.so in $top_builddir: the preload run cannot run"
fi
failures_end
log "PASS"
exit 0
