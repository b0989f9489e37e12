#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# A malicious SDP peer (hostile_peer): it speaks to an SDP server process
# (the victim, built on the public API) through the transport directly and
# sends malformed Hellos and malformed in-band messages -- BSDH lengths that
# lie, unknown and out-of-place MIDs, a message bigger than the advertised
# buffer, payload on DisConn, undefined flags, acknowledgements of unsent
# messages, random bytes.  Each time the victim must refuse or abort that
# connection (the attacker sees the transport go down) and keep running,
# while a well-behaved connection into the same process keeps streaming and
# ends with a matching checksum, and a new connection afterwards works.
# Then the attacker asks the victim to send and plays a dishonest sink of
# its zero-copy offer (SrcAvail): reading with the key after the offer
# completed, before or past the advertised bytes, or with another key, must
# give the attacker an error, never data; an RdmaRdCompl for more than was
# offered, or for no offer, must be aborted.  Mode attacks: ModeChanges
# the rules forbid (no-op, Pipelined -> Transaction, the victim's own half,
# an undefined mode), SinkAvail to a Combined source, RdmaWrCompl and
# SinkCancelAck answering nothing, SrcAvail with inline bytes in Pipelined
# or without in Combined: each aborted.  Write Zcopy with the victim as the
# sink: its recv() advertises a buffer between guard areas; an honest write
# is delivered intact, while writes with the key after recv() returned,
# outside the advertised bytes or with another key fail and leave its
# memory unchanged.  Write Zcopy with the victim as the source: a SinkAvail
# with a bogus key or outside the attacker's registration makes its write
# fail, the connection go down and its send() (or, on tcp-fallback, its
# next call) fail; SinkAvails with data, empty or doubled are aborted.  A
# SinkAvail that grants the victim no buffers (bufs 0) makes its blocking
# send wait, sleeping (its CPU time stays a small part of the time it
# waits) and keeping its SO_SNDTIMEO, until a credit comes.  An honest
# peer that advertises receive buffers of 17 to 64 bytes must never get a
# longer message: a send above the zero-copy threshold goes by Data or a
# SrcAvail that fits, its SrcAvail is declined with SendSM when the
# RdmaRdCompl would not fit, and no SinkAvail is advertised that would
# not.  A zero-copy send from the victim to a well-behaved reader, and a Write
# Zcopy into it from a well-behaved sender, must work afterwards.
# The cases that need the victim's zero copy are skipped, each saying so,
# on a transport without RDMA read or write (shm: the bytes are already in
# shared memory, doc/shm.md): hostile_peer asks the transport's caps.
. "$(dirname "$0")/lib.sh"

HOSTILE=$(prog hostile_peer)
bytes=64M
if is_sanitized; then
	bytes=16M
fi
# A case that hangs fails after 10 s, scaled like every limit (slow).
run_with_timeout 180 "$HOSTILE" --bytes "$bytes" --case-timeout "$(slow 10)000"
rc=$?
[ "$rc" -eq 0 ] || fail "hostile_peer exit $(status_text "$rc")"
log "PASS"
exit 0
