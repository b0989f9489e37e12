#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# ssp.sh [BUILDDIR]: the DAT iWARP extension's Socket Service Points
# (dat_iw_ssp_create/free/query, dat_iw_socket_connect) of libdaplsdp.so,
# inside the RDMA testbed (test/vm/README.md).  For each device the guest
# has (VM_DEVICES: siw0 and/or rxe0; the SSP is meant to work on both) it
# writes a dat.conf naming the build's .libs/libdaplsdp.so (through
# DAT_OVERRIDE), then runs
#   test/dat/ssp_semantics: every documented behaviour, case by case, in
#       one process (TAP-like "ok N ..." / "not ok N ...: why");
#   test/dat/ssp_pair --server / --client: the example, a TCP program
#       going to RDMA on its connection, with checksummed sends and an
#       RDMA write.
# Each run is bounded by timeout(1).  DAPL_SDP_DEBUG is off unless
# TEST_DAT_DEBUG=1 (run-in-vm passes TEST_* variables into the guest).
# TEST_SSP_CASES="10,12" runs only those ssp_semantics cases.
#
# From the source tree, with the build in /tmp/bdat:
#   flock /tmp/vm.lock env RUN_IN_VM_RW=/tmp/bdat RUN_IN_VM_MEM=3072 \
#       test/vm/run-in-vm --devices siw,rxe -- test/dat/ssp.sh /tmp/bdat
set -u

if [ -z "${VM_DEVICES-}" ]; then
	echo "ssp.sh: not in the RDMA testbed (run it under test/vm/run-in-vm); skipped"
	exit 77
fi
B=${1:-${top_builddir:-.}}
B=$(cd "$B" && pwd)
LIB=$B/.libs/libdaplsdp.so
SEM=$B/test/dat/ssp_semantics
PAIR=$B/test/dat/ssp_pair
if ! [ -x "$SEM" ] || ! [ -x "$PAIR" ] || ! [ -f "$LIB" ]; then
	echo "ssp.sh: build $B first (make)"
	exit 1
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/ssp.XXXXXX")
PORT=${TEST_DAT_SSP_PORT:-18600}
if [ "${TEST_DAT_DEBUG-}" = 1 ]; then
	export DAPL_SDP_DEBUG=1
else
	unset DAPL_SDP_DEBUG
fi
if [ -n "${TEST_SSP_CASES-}" ]; then
	export SSP_CASES="$TEST_SSP_CASES"
fi
fail=0

# netdev of an RDMA device: "link siw0/1 state ACTIVE ... netdev eth1"
netdev_of() {
	rdma link show "$1/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p'
}

run_semantics() {	# dev ia_name
	dev=$1 name=$2
	echo "--- ssp_semantics on $dev: IA $name"
	timeout --kill-after=10 600 "$SEM" -P "$name" -v >"$W/sem.out" 2>"$W/sem.err"
	rc=$?
	cat "$W/sem.out"
	if [ -s "$W/sem.err" ]; then
		echo "--- ssp_semantics stderr:"
		tail -n 200 "$W/sem.err"
	fi
	# every planned case reported, none failed
	plan=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$W/sem.out")
	oks=$(grep -c '^ok ' "$W/sem.out")
	nots=$(grep -c '^not ok ' "$W/sem.out")
	if [ $rc -ne 0 ] || [ -z "$plan" ] || [ "$oks" -ne "$plan" ]; then
		[ $rc -eq 124 ] && echo "ssp_semantics: killed after 600 s"
		echo "FAIL: ssp_semantics on $dev (exit $rc; $oks ok, $nots not ok, plan ${plan:-none})"
		fail=1
	else
		echo "PASS: ssp_semantics on $dev ($oks cases)"
	fi
}

run_pair() {	# dev ia_name addr
	dev=$1 name=$2 addr=$3
	echo "--- ssp_pair on $dev: IA $name, server $addr TCP port $PORT"
	timeout --kill-after=10 180 "$PAIR" --server -P "$name" -p "$PORT" \
		>"$W/srv.out" 2>"$W/srv.err" &
	spid=$!
	# the client retries its TCP connect until the server listens
	timeout --kill-after=10 180 "$PAIR" --client -h "$addr" -P "$name" -p "$PORT" \
		>"$W/cli.out" 2>"$W/cli.err"
	crc=$?
	wait $spid
	src=$?
	cat "$W/srv.err" "$W/cli.err" "$W/srv.out" "$W/cli.out" | tail -n 200
	if [ $src -ne 0 ] || [ $crc -ne 0 ] || ! grep -q "server OK" "$W/srv.out" ||
	   ! grep -q "client OK" "$W/cli.out"; then
		echo "FAIL: ssp_pair on $dev (server $src, client $crc)"
		fail=1
	else
		echo "PASS: ssp_pair on $dev"
	fi
	PORT=$((PORT + 1))
}

for dev in $VM_DEVICES; do
	case $dev in
	siw*)	name=ofa-v2-sdp-iwarp addr=${VM_ADDR_SIW:-$VM_ADDR}
		params=$(netdev_of "$dev"); [ -n "$params" ] || params=$addr ;;
	rxe*)	name=ofa-v2-sdp-roce addr=${VM_ADDR_RXE:-$VM_ADDR}; params=$addr ;;
	*)	continue ;;
	esac
	printf '%s u2.0 nonthreadsafe default %s dapl.2.0 "%s 0" ""\n' \
		"$name" "$LIB" "$params" >"$W/dat.conf"
	echo "dat.conf: $(cat "$W/dat.conf")"
	export DAT_OVERRIDE="$W/dat.conf"
	run_semantics "$dev" "$name"
	run_pair "$dev" "$name" "$addr"
done
rm -rf "$W"
exit $fail
