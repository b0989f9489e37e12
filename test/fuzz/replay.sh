#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# Every committed corpus entry and crash reproducer (test/fuzz/corpus/NAME/)
# through its harness with the plain driver (test/fuzz/replay_NAME), for
# each NAME of FUZZ_HARNESSES (Makefile.am): what a fuzzer found once stays
# fixed.  One line per harness; one that crashes or fails a check fails
# the test, and its output names the input it was on.
set -u
: "${top_builddir:=.}" "${top_srcdir:=.}"
: "${FUZZ_HARNESSES:?run from make check, which sets the harness list}"
err=$(mktemp) || exit 99
trap 'rm -f "$err"' EXIT
fail=0
for h in $FUZZ_HARNESSES; do
	corpus=$top_srcdir/test/fuzz/corpus/$h
	n=$(find "$corpus" -type f 2>/dev/null | wc -l)
	if "$top_builddir/test/fuzz/replay_$h" "$corpus" 2>"$err"; then
		echo "ok   $h: $n inputs"
	else
		echo "FAIL $h: exit $?, on the last input named:"
		tail -n 40 "$err"
		fail=1
	fi
done
exit $fail
