#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# valgrind (memcheck) over real workloads: the unit tests, the API and
# half-close sequences, a connection storm, and a checksummed transfer with
# both ends under valgrind.  Any memcheck error or definite leak fails the
# case.  Run by `make check-valgrind` (quickstart.sh's valgrind stage);
# ends with automake-style counts so the quick start can sum them.
set -u
: "${top_builddir:?run through make check-valgrind}"
export SDP_TRANSPORTS=${SDP_TRANSPORTS:-tcp-fallback}
VG_OPTS="-q --error-exitcode=97 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite"
LT="$top_builddir/libtool"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sdp-valgrind.XXXXXX")
export VG_OPTS LT TMP top_builddir
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
pass=0 fail=0

# shellcheck disable=SC2086
vg() { "$LT" --mode=execute valgrind $VG_OPTS "$@"; }

case_run() { # DESC CMD...
	local desc=$1
	shift
	# The cases are shell functions: run them in a child bash that
	# timeout(1) can bound.
	local rc why
	timeout -k 5 600 bash -c '"$@"' case "$@" >"$TMP/out" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "ok   $desc"
		pass=$((pass + 1))
	else
		# One line that says why: the stage summary shows it.
		why=$(grep -m1 -E 'FAIL|[Ee]rror|Invalid|definitely lost|Assertion' "$TMP/out" |
			cut -c1-160)
		echo "FAIL $desc (exit $rc)${why:+: $why}"
		sed 's/^/  /' "$TMP/out" | tail -n 40
		fail=$((fail + 1))
	fi
}

transfer() {
	local pf="$TMP/port" spid rc
	vg "$top_builddir/tools/sdpcat" -l 127.0.0.1:0 --port-file "$pf" --count 1 \
		>"$TMP/server" 2>&1 &
	spid=$!
	for _ in $(seq 600); do [ -s "$pf" ] && break; sleep 0.1; done
	[ -s "$pf" ] || { cat "$TMP/server"; return 1; }
	vg "$top_builddir/tools/sdpcat" -c "127.0.0.1:$(cat "$pf")" --bytes 8M --bidir \
		--wsize 1-256K
	rc=$?
	wait "$spid" || { cat "$TMP/server"; return 1; }
	return "$rc"
}

export -f vg transfer

case_run "unit tests" vg "$top_builddir/test/unit/unit_tests"
case_run "API semantics (conn_storm --api)" vg "$top_builddir/test/integration/conn_storm" --api
case_run "half-close (conn_storm --half-close)" \
	vg "$top_builddir/test/integration/conn_storm" --half-close
case_run "20 concurrent connections" \
	vg "$top_builddir/test/integration/conn_storm" --conns 20 --bytes 256K --timeout 300
case_run "bidirectional transfer, both ends under valgrind" transfer

echo "valgrind: $pass passed, $fail failed"
echo "# PASS: $pass"
echo "# FAIL: $fail"
[ "$fail" -eq 0 ]
