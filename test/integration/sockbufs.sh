#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# What SO_SNDBUF and SO_RCVBUF bound on SDP, through the engine's API
# (sockbuf_check): a receive buffer shrunk on an established connection
# and grown again, a blocking sender held to its send buffer while its
# reader does not read, and both ends at the smallest buffers moving 2 MiB
# each way with large blocking sends (Read Zcopy) against small reads.
# preload_api.sh (sockapi_check, the sockbuf_* checks) compares with Linux
# what both do the same.
. "$(dirname "$0")/lib.sh"

CHECK=$(prog sockbuf_check)
# regrow with 16 KiB receive buffers: SO_RCVBUF is capped at twice
# net.core.rmem_max, and where that is the kernel's default (208 KiB, as
# in the test guests) a grown SO_RCVBUF holds no more default 256 KiB
# buffers than a shrunk one, so growth would not show.
if ! { run_with_timeout 120 "$CHECK" blocked small &&
	run_with_timeout 120 env SDP_BUF_SIZE=16400 "$CHECK" regrow; } >"$TMP/out" 2>&1; then
	sed 's/^/  /' "$TMP/out"
	fail "sockbuf_check"
fi
sed 's/^/  /' "$TMP/out"
log "PASS"
exit 0
