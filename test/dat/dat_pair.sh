#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# dat_pair.sh [BUILDDIR]: the uDAPL provider (libdaplsdp.so) end to end,
# inside the RDMA testbed (test/vm/README.md).  For each device the guest
# has (VM_DEVICES: siw0 and/or rxe0) it writes a dat.conf naming the
# build's .libs/libdaplsdp.so (used through DAT_OVERRIDE), runs
# test/dat/dat_pair --server and --client over that device's address,
# then TEST_DAT_BURST (default 500) short connections in which the server
# sends first (dat_pair -n), and checks both.  With TEST_DAT_DTEST=1 it
# also runs dapl2-utils' dtest against the provider and reports the
# result (not a failure).
#
# From the source tree, with the build in /tmp/bdat:
#   flock /tmp/vm.lock env RUN_IN_VM_RW=/tmp/bdat RUN_IN_VM_MEM=3072 \
#       test/vm/run-in-vm --devices siw,rxe -- test/dat/dat_pair.sh /tmp/bdat
#
# ia names: ofa-v2-sdp-iwarp (siw0; ia_params = its netdev's name) and
# ofa-v2-sdp-roce (rxe0; ia_params = its IP address).
set -u

if [ -z "${VM_DEVICES-}" ]; then
	echo "dat_pair.sh: not in the RDMA testbed (run it under test/vm/run-in-vm); skipped"
	exit 77
fi
B=${1:-${top_builddir:-.}}
B=$(cd "$B" && pwd)
LIB=$B/.libs/libdaplsdp.so
PAIR=$B/test/dat/dat_pair
[ -x "$PAIR" ] && [ -f "$LIB" ] || { echo "dat_pair.sh: build $B first (make)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dat_pair.XXXXXX")
PORT=${TEST_DAT_PORT:-18515}
SIZE=${TEST_DAT_SIZE:-4194304}
BURST=${TEST_DAT_BURST:-500}
fail=0

# netdev of an RDMA device: "link siw0/1 state ACTIVE ... netdev eth1"
netdev_of() {
	rdma link show "$1/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p'
}

# wait until an rdma_cm listener is up on port $1
wait_listen() {
	i=0
	while [ $i -lt 300 ]; do
		rdma res show cm_id 2>/dev/null | grep -Eq "LISTEN.*:$1( |$)" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

run_pair() {	# dev ia_name addr
	dev=$1 name=$2 addr=$3
	echo "--- dat_pair on $dev: IA $name, server $addr:$PORT, $SIZE bytes"
	"$PAIR" --server -P "$name" -p "$PORT" -s "$SIZE" -n "$BURST" >"$W/srv.out" 2>"$W/srv.err" &
	spid=$!
	if ! wait_listen "$PORT"; then
		echo "dat_pair.sh: no listener on port $PORT after 30 s"
	fi
	# -x: an address on the same subnet that nobody answers (connect timeout)
	timeout 180 "$PAIR" --client -h "$addr" -P "$name" -p "$PORT" -s "$SIZE" -n "$BURST" \
		-x "${addr%.*}.254" >"$W/cli.out" 2>"$W/cli.err"
	crc=$?
	wait $spid
	src=$?
	cat "$W/srv.err" "$W/cli.err" "$W/srv.out" "$W/cli.out"
	if [ $src -ne 0 ] || [ $crc -ne 0 ]; then
		echo "FAIL: dat_pair on $dev (server $src, client $crc)"
		fail=1
	else
		echo "PASS: dat_pair on $dev"
	fi
	PORT=$((PORT + 1))
}

# dtest first sends the server's address over a TCP socket on port 15828
# (that listener comes up once the server has its IA, EVDs and buffers),
# then creates its PSP on 45248; so the client may start once 15828 listens.
run_dtest() {	# dev ia_name addr
	dev=$1 name=$2 addr=$3
	command -v dtest >/dev/null || { echo "dtest: not installed"; return; }
	echo "${TEST_DAT_DTEST_OPTS:--B 100|-W -D -B 100|-u -B 100}" | tr '|' '\n' |
	while read -r opts; do
		echo "--- dtest $opts on $dev ($name)"
		# shellcheck disable=SC2086
		timeout 150 stdbuf -oL dtest -P "$name" -s $opts >"$W/dts.out" 2>&1 &
		dpid=$!
		i=0
		while [ $i -lt 600 ] && ! ss -ltn | grep -q ":15828 "; do
			sleep 0.1
			i=$((i + 1))
		done
		# shellcheck disable=SC2086
		timeout 150 stdbuf -oL dtest -P "$name" -h "$addr" $opts >"$W/dtc.out" 2>&1
		dcrc=$?
		wait $dpid
		dsrc=$?
		grep -E "usec|PASSED|FAILED|rror" "$W/dts.out" | sed 's/^/  [dtest server] /'
		grep -E "usec|PASSED|FAILED|rror" "$W/dtc.out" | sed 's/^/  [dtest client] /'
		if [ $dsrc -eq 0 ] && [ $dcrc -eq 0 ] && grep -q PASSED "$W/dts.out" &&
		   grep -q PASSED "$W/dtc.out"; then
			echo "dtest $opts on $dev: PASS"
		else
			echo "dtest $opts on $dev: FAIL (server $dsrc, client $dcrc) [reported, not counted]"
		fi
	done
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
	run_pair "$dev" "$name" "$addr"
	[ "${TEST_DAT_DTEST-}" = 1 ] && run_dtest "$dev" "$name" "$addr"
done
rm -rf "$W"
exit $fail
