#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Both directions at once: sdpcat --bidir makes the server stream its own
# seeded data back while it is still receiving, and the client receive it
# while it is still sending (both non-blocking, driven by sdp_poll).  32 MiB
# each way, with equal and with very different write/read sizes, must
# arrive intact in both directions.  A side that only wrote would deadlock
# once both send windows fill, so this also checks that the engine keeps
# receiving while a sender waits for credits.
. "$(dirname "$0")/lib.sh"

SDPCAT=$(prog sdpcat)
size=$((32 << 20))
if is_sanitized; then
	size=$((8 << 20))
fi

failures=0
run() { xfer_case "$@" || failures=$((failures + 1)); }

run "bidir $size B each way, 64 KiB writes and reads" 120 "" \
	"--bidir --bytes $size --seed 11"
run "bidir $size B each way, 1 B-1 MiB writes, 1 B-128 KiB reads" 120 \
	"--wsize 1-1M --rsize 1-128K" \
	"--bidir --bytes $size --seed 12 --wsize 1-1M --rsize 1-128K"
run "bidir $((size / 8)) B each way, small writes vs large reads" 120 \
	"--wsize 1-512 --rsize 256K" \
	"--bidir --bytes $((size / 8)) --seed 13 --wsize 200K-1M --rsize 1-300"
run "bidir 0 B" 30 "" "--bidir --bytes 0"
run "bidir TCP reference $size B" 60 "--tcp" "--tcp --bidir --bytes $size --seed 14"

if [ "$failures" -ne 0 ]; then
	fail "$failures transfer(s) failed"
fi
log "PASS"
exit 0
