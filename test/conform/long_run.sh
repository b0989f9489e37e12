#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The long random differential run (doc/conformance.md):
#
#   test/conform/long_run.sh BUILDDIR [SEED [CHUNKS [PER_CHUNK]]] [-- conform options]
#
# runs CHUNKS x PER_CHUNK random sequences (default 50 x 2000) from SEED
# (default 1000000), each chunk one `conform --random` from the next seed
# on, natively and under the preload on TEST_TRANSPORT (default
# tcp-fallback), at nice 19.  Each chunk's output goes to
# $LOGDIR/chunk.N.log (LOGDIR defaults to a new directory under /tmp);
# the summary line of every chunk and the total are printed.  A
# difference is printed in its chunk's log, shrunk to a table row; run it
# again with `conform --random SEED 1 --sdp-env ...` (its seed is in the
# row's name).  Options after "--" go to conform (--all: the steps that
# show the known differences too).  Exit 1 when any chunk found a
# difference.
set -u
build=${1:?usage: long_run.sh BUILDDIR [SEED [CHUNKS [PER_CHUNK]]] [-- options]}
shift
seed=1000000 chunks=50 per=2000
for v in seed chunks per; do
	[ $# -gt 0 ] && [ "$1" != -- ] || break
	printf -v "$v" '%s' "$1"
	shift
done
[ "${1:-}" = -- ] && shift
build=$(cd "$build" && pwd) || exit 2
prog=$build/test/conform/conform
lib=$build/.libs/libsdp.so
[ -x "$prog" ] && [ -e "$lib" ] || { echo "long_run: build $prog and $lib first" >&2; exit 2; }
: "${LOGDIR:=$(mktemp -d /tmp/conform-long.XXXXXX)}"
mkdir -p "$LOGDIR"
# The library and the runner are copied: a rebuild while this runs must
# not change them.
cp "$lib" "$LOGDIR/libsdp.so"
cp "$prog" "$LOGDIR/conform"
prog=$LOGDIR/conform
printf '%s\n' "transport enable ${TEST_TRANSPORT:-tcp-fallback}" \
	"use both server * *:*" "use both client * *:*" >"$LOGDIR/sdp.conf"
if [ -z "${TEST_HOST6:-}" ] && ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128'; then
	export TEST_HOST6=::1
fi
echo "long_run: $chunks x $per sequences from seed $seed, logs in $LOGDIR"
total=0 ndiff=0 rc=0
for ((i = 0; i < chunks; i++)); do
	s=$((seed + i * per))
	nice -n 19 "$prog" --random "$s" "$per" "$@" \
		--sdp-env "LD_PRELOAD=$LOGDIR/libsdp.so LIBSDP_CONFIG_FILE=$LOGDIR/sdp.conf" \
		>"$LOGDIR/chunk.$i.log" 2>&1 || rc=1
	line=$(grep '^random: [0-9]* sequences' "$LOGDIR/chunk.$i.log")
	echo "$(date -u +%H:%M:%S) chunk $i: ${line:-no summary (see $LOGDIR/chunk.$i.log)}"
	n=$(sed -n 's/^random: \([0-9]*\) sequences.*: \([0-9]*\) differ$/\1 \2/p' "$LOGDIR/chunk.$i.log")
	n=${n:-0 0}
	total=$((total + ${n% *}))
	ndiff=$((ndiff + ${n#* }))
done
echo "long_run: $total sequences from seed $seed: $ndiff differ"
exit "$rc"
