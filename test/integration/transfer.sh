#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# One-way checksummed transfers with sdpcat over SDP (TEST_TRANSPORT): sizes
# from 0 bytes to 64 MiB, random write and read sizes (down to 1-byte reads
# and writes), blocking and non-blocking clients, IPv4 and IPv6 (loopback,
# or the interface's addresses on an RDMA transport).
# Each transfer must arrive complete and in order: the server checks every
# byte against the seeded stream and the client compares the server's
# count and XXH64 with what it sent.
. "$(dirname "$0")/lib.sh"

SDPCAT=$(prog sdpcat)
big=$((64 << 20))
if is_sanitized; then
	big=$((16 << 20))	# ASan: same paths, a quarter of the bytes
fi

failures=0
run() { xfer_case "$@" || failures=$((failures + 1)); }

seed=1
for size in 0 1 4095 65536 $((1048576 + 7)); do
	seed=$((seed + 1))
	run "$size B, 64K writes / 64K reads" 60 "" \
		"--bytes $size --seed $seed"
	run "$size B, 1-3000 B writes / 1-byte reads" 60 "--rsize 1" \
		"--bytes $size --seed $seed --wsize 1-3000"
	run "$size B, 1-200K writes / 1-200K reads, non-blocking" 60 "--rsize 1-200K" \
		"--bytes $size --seed $seed --wsize 1-200K --rsize 1-200K --nonblock"
	if [ "$size" -le 65536 ]; then
		run "$size B, 1-byte writes / 1-7 B reads" 60 "--rsize 1-7" \
			"--bytes $size --seed $seed --wsize 1"
	fi
done

run "$big B, 1 B-1 MiB writes / 1 B-256 KiB reads" 120 "--rsize 1-256K" \
	"--bytes $big --seed 77 --wsize 1-1M"
run "$big B, 1 MiB writes / 1 MiB reads, non-blocking" 120 "--rsize 1M" \
	"--bytes $big --seed 78 --wsize 1M --nonblock"
run "$((big / 16)) B, 100-byte writes / 64 KiB reads" 120 "--rsize 64K" \
	"--bytes $((big / 16)) --seed 79 --wsize 100"

if host6=$(ipv6_host); then
	run "IPv6 [$host6], 1 MiB+7" 60 "[$host6]:0 --rsize 1-100K" \
		"--bytes $((1048576 + 7)) --seed 80 --wsize 1-100K"
	run "IPv6 [$host6], TCP reference" 60 "--tcp [$host6]:0" \
		"--tcp --bytes $((1048576 + 7)) --seed 80"
elif [ "$TEST_TRANSPORT" = tcp-fallback ]; then
	log "no IPv6 loopback here: IPv6 cases not run"
else
	log "no global or site-local IPv6 address on $TEST_HOST's interface: IPv6 cases not run"
fi

# Buffers that grow with use (sdp/post.c, "Growing buffers"): receive
# buffers that start small (the default on ib and iwarp, buf_size_start
# elsewhere) grow four times larger at a time, up to buf_size, once a
# stream fills them: 1040 becomes 262160 in four steps (as 1536, ib and
# iwarp's start, does), on each receiving end, and the bytes arrive
# intact while the rings are swapped.
# A request-sized exchange (4 KiB each way, in one write) grows nothing.
grow_case() {
	local desc=$1 want=$2 sargs=$3 cargs=$4 g n range="1 to $2"
	[ "$want" = 0 ] && range=0
	# shellcheck disable=SC2086
	run "$desc" 120 "-vv $sargs" "-vv $cargs" || return
	for g in server client; do
		case " $cargs " in *" --bidir "*) ;; *) [ $g = client ] && continue ;; esac
		n=$(grep -o 'buf_grows=[0-9]*' "$TMP/$g.out" | cut -d= -f2)
		# A sender asks only when its ring is found full: where the
		# CPU and not the buffers holds a stream back (rxe in the
		# guest: 1 to 3 steps of 3 in 64 MiB) it stops asking.  Not
		# growing at all, or growing for a request, must not happen.
		if [ "${n:-x}" = x ] || { [ "$want" = 0 ] && [ "$n" != 0 ]; } ||
			{ [ "$want" != 0 ] && { [ "$n" -lt 1 ] || [ "$n" -gt "$want" ]; }; }; then
			log "FAIL $desc: the $g's buffers grew ${n:-?} times (want $range)"
			failures=$((failures + 1))
		else
			log "     the $g's buffers grew $n times"
		fi
	done
}
start=0 from=1536 steps=4
case $TEST_TRANSPORT in ib | iwarp) ;; *) start=1040 from=1040 steps=4 ;; esac
# (Writes below zcopy_thresh: a write that goes by zero copy uses no
# buffer, and a stream of them may never find the ring full.)
SDP_BUF_SIZE_START=$start grow_case "$big B, buffers grow from $from" $steps "--rsize 1-256K" \
	"--bytes $big --seed 81 --wsize 1-200K"
SDP_BUF_SIZE_START=$start grow_case "$((big / 4)) B each way, buffers grow from $from" $steps \
	"--rsize 1-64K" "--bytes $((big / 4)) --seed 82 --wsize 1-64K --bidir"
SDP_BUF_SIZE_START=$start grow_case "4 KiB each way, buffers stay" 0 "" \
	"--bytes 4K --seed 83 --wsize 4K --bidir"

# Unread data copied out (sdp/post.c): a server that reads 60 KiB only
# 300 ms after they were sent, with small buffers (ib and iwarp's start,
# 1536 forced elsewhere: 14 of them hold 21 KiB).  The bytes it had not
# read were copied out of the buffers so that the client could go on
# (rx_copied_out), as a TCP receiver holds 64 KiB unread, and arrive
# intact; with buffers of buf_size from the start nothing is copied.
copied_case() {
	local desc=$1 want=$2 n
	# shellcheck disable=SC2086
	run "$desc" 60 "-vv --read-delay 300" "--bytes 60K --seed 84 --wsize 60K" || return
	n=$(grep -o 'rx_copied_out=[0-9]*' "$TMP/server.out" | cut -d= -f2)
	if [ "${n:-x}" = x ] || { [ "$want" = 0 ] && [ "$n" != 0 ]; } ||
		{ [ "$want" != 0 ] && [ "$n" -lt 1 ]; }; then
		log "FAIL $desc: the server copied out ${n:-?} buffers (want $([ "$want" = 0 ] && echo 0 || echo 'at least 1'))"
		failures=$((failures + 1))
	else
		log "     the server copied out $n buffers"
	fi
}
small=0
case $TEST_TRANSPORT in ib | iwarp) ;; *) small=1536 ;; esac
SDP_BUF_SIZE_START=$small copied_case "60 KiB read 300 ms late, small buffers" 1
case $TEST_TRANSPORT in ib | iwarp) ;; *)
	SDP_BUF_SIZE_START=0 copied_case "60 KiB read 300 ms late, buffers of buf_size" 0 ;;
esac

# The same tool over the kernel's TCP: if this fails the tool is wrong,
# not the engine.
run "TCP reference, 4 MiB" 60 "--tcp --rsize 1-64K" "--tcp --bytes 4M --wsize 1-64K"

if [ "$failures" -ne 0 ]; then
	fail "$failures transfer(s) failed"
fi
log "PASS"
exit 0
