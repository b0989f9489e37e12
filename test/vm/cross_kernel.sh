#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# cross_kernel.sh BUILDDIR [DEVICE]: SDP between two kernels over a real
# (virtual) wire.  Two testbed guests (test/vm/run-in-vm --two), each with
# its own soft RDMA device (rxe by default, or siw), joined by a QEMU
# socket network; the server runs in guest A, the client in guest B:
#
#   1. sdpcat, 64 MiB one way, checksummed, engine API
#   2. sdpcat --bidir, 16 MiB each way at once, random write/read sizes
#   2b. the same server also takes a client that has only the software
#      transport (tcp-fallback), as a host without RDMA would be: a
#      listener listens on every transport that serves its address
#   3. socat under sdp_run (the preload, unmodified program) carrying a
#      32 MiB file that both sides generate from one seed; A compares the
#      sha256 of what it received
#   4. sdpcat --convert: a kernel TCP connection between the two guests,
#      converted to SDP (sdp_convert_*), then 32 MiB each way over it
#
# Every case must name the transport it ran on (sdpcat's summary, libsdp's
# log "over ib"): a run that fell back to TCP fails.  Output lines are
# prefixed [A] / [B]; the exit status is 0 only if every case passed.
# Exit 125 means the testbed itself failed (run-in-vm's convention).
set -u

die() { echo "cross_kernel: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 BUILDDIR [rxe|siw]"
builddir=$(cd "$1" && pwd) || die "no build directory $1"
device=${2:-rxe}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
sdpcat=$builddir/tools/sdpcat
sdp_run=$builddir/tools/sdp_run
[ -x "$sdpcat" ] && [ -x "$sdp_run" ] || die "build $builddir first"

if [ -z "${VM_NAME:-}" ]; then
	# On the host: start both guests, this script is each side's command.
	self=$srcdir/test/vm/cross_kernel.sh
	exec "$srcdir/test/vm/run-in-vm" --two --devices "$device" -- \
		bash "$self" "$builddir" "$device" ::: bash "$self" "$builddir" "$device"
fi

# --- inside a guest --------------------------------------------------------
case $device in
rxe) addr=${VM_ADDR_RXE:-$VM_ADDR} peer=${VM_PEER_RXE:-$VM_PEER} transport=ib ;;
siw) addr=${VM_ADDR_SIW:-$VM_ADDR} peer=${VM_PEER_SIW:-$VM_PEER} transport=${CROSS_KERNEL_TRANSPORT:-iwarp} ;;
*) die "unknown device $device" ;;
esac
export SDP_TRANSPORTS=$transport
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
ok() { echo "cross_kernel: ok   $*"; }
bad() { echo "cross_kernel: FAIL $*"; failures=$((failures + 1)); }

cat >"$tmp/sdp.conf" <<EOF
transport enable $transport
use sdp server * *:*
use sdp client * *:*
log min-level 7 destination file $tmp/sdp.log
EOF

# The seeded 32 MiB file of case 3, the same in both guests.
python3 -c 'import random, sys; random.seed(7071); sys.stdout.buffer.write(random.randbytes(32 << 20))' \
	>"$tmp/blob" || die "cannot generate the test file"
want=$(sha256sum <"$tmp/blob" | cut -d' ' -f1)

# client_retry OUT CMD...: the two guests start their commands at about the
# same time; retry while the server is not listening yet (60 s).
client_retry() {
	local out=$1 i
	shift
	for i in $(seq 120); do
		"$@" >"$out" 2>&1 && return 0
		grep -qi "refused\|unreachable\|timed out" "$out" || return 1
		sleep 0.5
	done
	return 1
}

# libsdp's warnings and errors of an sdpcat run (its engine's log: the
# exit linger giving up, a transport's error), kept in a file per run and
# shown with the case's result, on either side: a reset one side sees is
# often explained by what the other logged.  Only sdpcat's: the socat
# case reads its own log (sdp.conf) for the transport's name.
show_log() {
	[ -s "$1" ] && sed "s/^/  libsdp ($2): /" "$1" | tail -n 20
	return 0
}

# sdpcat_case DESC TRANSPORT NAME CMD...: one sdpcat client (retried while
# the server is not up yet) that must end with "sdp TRANSPORT: ... checksum ok".
sdpcat_case() {
	local desc=$1 want=$2 out=$tmp/$3.out log=$tmp/$3.log
	shift 3
	if ! client_retry "$out" timeout 600 env SDP_LOG_LEVEL=8 SDP_LOG_FILE="$log" "$@"; then
		bad "$desc: $(cat "$out")"
	elif ! grep -q "sdp $want:.*checksum ok" "$out"; then
		bad "$desc did not report $want: $(cat "$out")"
	else
		ok "$desc: $(sed -n 's/^sdpcat: //p' "$out" | tail -n 1)"
	fi
	show_log "$log" "client, $desc"
}

if [ "$VM_NAME" = vm-a ]; then
	echo "cross_kernel: server in $(uname -r) at $addr, client at $peer, transport $transport"
	SDP_TRANSPORTS=$transport,tcp-fallback SDP_LOG_LEVEL=8 SDP_LOG_FILE=$tmp/sdpcat.log \
		timeout 600 "$sdpcat" -l "$addr:7471" --count 3 -v >"$tmp/sdpcat.out" 2>&1
	rc=$?
	show_log "$tmp/sdpcat.log" "sdpcat server"
	sed 's/^/  sdpcat server: /' "$tmp/sdpcat.out"
	if [ $rc -ne 0 ]; then
		bad "sdpcat server exit $rc"
	elif [ "$(grep -c "over $transport\$" "$tmp/sdpcat.out")" -ne 2 ] ||
	     ! grep -q "over tcp-fallback\$" "$tmp/sdpcat.out"; then
		bad "sdpcat server: want 2 connections over $transport and 1 over tcp-fallback"
	else
		ok "sdpcat server: 3 connections verified, 2 over $transport, 1 over tcp-fallback"
	fi
	timeout 600 "$sdp_run" --conf "$tmp/sdp.conf" -- \
		socat -u "TCP-LISTEN:7472,bind=$addr,reuseaddr" "OPEN:$tmp/got,creat,trunc" \
		>"$tmp/socat.out" 2>&1
	rc=$?
	got=$(sha256sum <"$tmp/got" | cut -d' ' -f1)
	if [ $rc -ne 0 ]; then
		bad "socat server exit $rc: $(cat "$tmp/socat.out")"
	elif [ "$got" != "$want" ]; then
		bad "socat: received $(stat -c %s "$tmp/got") bytes, sha256 $got, want $want"
	elif ! grep -q "over $transport" "$tmp/sdp.log"; then
		bad "socat server did not use SDP over $transport: $(cat "$tmp/sdp.log")"
	else
		ok "socat under sdp_run: 32 MiB received over $transport, sha256 matches"
	fi
	SDP_LOG_LEVEL=8 SDP_LOG_FILE=$tmp/convert.log \
		timeout 600 "$sdpcat" --convert -l "$addr:7473" --count 1 -v >"$tmp/convert.out" 2>&1
	rc=$?
	show_log "$tmp/convert.log" "sdpcat --convert server"
	sed 's/^/  sdpcat --convert server: /' "$tmp/convert.out"
	if [ $rc -ne 0 ]; then
		bad "sdpcat --convert server exit $rc"
	elif ! grep -q "accepted sdp connection .* over $transport\$" "$tmp/convert.out"; then
		bad "sdpcat --convert server: the converted connection is not over $transport"
	else
		ok "sdpcat --convert server: a TCP connection converted to SDP over $transport, verified"
	fi
else
	sdpcat_case "sdpcat 64 MiB" "$transport" c1 "$sdpcat" -c "$peer:7471" --bytes 64M
	sdpcat_case "sdpcat bidir 16 MiB" "$transport" c2 "$sdpcat" -c "$peer:7471" --bidir \
		--bytes 16M --wsize 1-256K --rsize 1-64K --seed 9
	sdpcat_case "sdpcat 8 MiB from a client without RDMA" tcp-fallback c2b \
		env SDP_TRANSPORTS=tcp-fallback "$sdpcat" -c "$peer:7471" --bytes 8M
	if client_retry "$tmp/c3.out" timeout 600 "$sdp_run" --conf "$tmp/sdp.conf" -- \
		socat -u "OPEN:$tmp/blob" "TCP:$peer:7472"; then
		if grep -q "over $transport" "$tmp/sdp.log"; then
			ok "socat under sdp_run: 32 MiB sent over $transport"
		else
			bad "socat client did not use SDP over $transport: $(cat "$tmp/sdp.log")"
		fi
	else
		bad "socat client: $(cat "$tmp/c3.out")"
	fi
	sdpcat_case "sdpcat --convert bidir 32 MiB" "$transport" c4 "$sdpcat" --convert \
		-c "$peer:7473" --bidir --bytes 32M
fi
if [ "$failures" -ne 0 ]; then
	echo "cross_kernel: FAIL: $failures case(s) on $VM_NAME"
	exit 1
fi
echo "cross_kernel: PASS on $VM_NAME"
exit 0
