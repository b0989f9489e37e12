#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# run.sh HARNESS SECONDS [libFuzzer options...]
#
# One libFuzzer harness (built by configure CC=clang --enable-fuzz; make
# fuzz) for SECONDS, from the committed corpus test/fuzz/corpus/HARNESS/
# (read only) and a working corpus that grows across runs.  A crash stops
# it with a non-zero exit and leaves the input under the working
# directory's crashes/ (doc/fuzzing.md: reproduce, minimise, commit).
#
#   FUZZ_BUILDDIR  the --enable-fuzz build (default: build-fuzz beside
#                  test/, i.e. the source tree's build-fuzz/)
#   FUZZ_WORKDIR   working corpus and crashes (default:
#                  $FUZZ_BUILDDIR/test/fuzz/work/HARNESS)
set -eu
[ $# -ge 2 ] || { echo "usage: $0 HARNESS SECONDS [libFuzzer options...]" >&2; exit 2; }
h=$1 secs=$2
shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILDDIR:-$src/build-fuzz}
bin=$build/test/fuzz/fuzz_$h
work=${FUZZ_WORKDIR:-$build/test/fuzz/work/$h}
seeds=$src/test/fuzz/corpus/$h
[ -x "$bin" ] || { echo "run.sh: no $bin: configure CC=clang --enable-fuzz, make fuzz" >&2; exit 2; }
[ -d "$seeds" ] || { echo "run.sh: no corpus $seeds" >&2; exit 2; }
mkdir -p "$work/corpus" "$work/crashes"
set -- -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/crashes/" "$@"
[ -f "$src/test/fuzz/dict/$h.dict" ] && set -- -dict="$src/test/fuzz/dict/$h.dict" "$@"
echo "run.sh: $h for ${secs}s: $bin, corpus $work/corpus + $seeds"
exec "$bin" "$@" "$work/corpus" "$seeds"
