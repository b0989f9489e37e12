#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# Quick start on a fresh Debian 12 machine:
#
#   ./quickstart.sh demo   install dependencies, build, run tools/demo.sh
#   ./quickstart.sh test   install dependencies, build, run every test stage
#
# Both are safe to rerun: packages already installed are not touched, build
# directories are reused and only rebuilt where sources changed.
#
# `test` runs, in order:
#   check      make check in build/              (the normal build)
#   shm        the integration tests again in build/ on the shared-memory
#              transport (TEST_TRANSPORT=shm, doc/shm.md), on by default
#              between libsdp processes of one host; about 3 minutes
#   rxe        the integration tests again on the verbs transport over
#              Soft-RoCE in a QEMU guest (test/vm/run-in-vm), and SDP
#              between two guests (test/vm/cross_kernel.sh)
#   siw        the same on the iwarp transport over soft-iWARP (siw), and
#              SDP between two guests over siw
#   dat        the uDAPL provider (libdaplsdp.so) in a QEMU guest with siw
#              and rxe: test/dat/dat_pair.sh (a DAPL program pair end to
#              end) and test/dat/ssp.sh (the iWARP extension's Socket
#              Service Points: ssp_semantics and the ssp_pair example);
#              each script counts as one test (ssp_semantics' 26 cases
#              are in its log)
#   sanitizers make check in build-asan/         (--enable-sanitizers, ASan+UBSan+LSan)
#   tsan       integration tests in build-tsan/  (--enable-sanitizers=thread, test/tsan.supp)
#   valgrind   make check-valgrind in build/     (memcheck over real workloads, test/valgrind.sh)
#   distcheck  make distcheck from build/        (tarball builds, checks, installs)
#   clang      build-clang/ with CC=clang, -Werror; builds the tests, runs none
#   fuzz       build-fuzz/ with CC=clang --enable-fuzz: each libFuzzer
#              harness of test/fuzz/ for QUICKSTART_FUZZ_SECONDS (default
#              30) from its committed corpus (make fuzz); each harness
#              counts as one test, a crash fails it (doc/fuzzing.md)
#   deb        the Debian packages (debian/): dpkg-buildpackage from a clean
#              copy of the tree in build-deb/, then test/deb/deb_check.sh
#              installs them into a scratch root with dpkg --root (never
#              the running system) and checks what a user gets: the files,
#              the dat.conf entry, man, sdp_run over SDP, sdpstat, the
#              shipped sdp.conf, sdp(3)'s example, removal, and lintian;
#              each check counts as one test
# and ends with one line `tests: N passed, M failed` (automake counts summed
# over the test runs; a stage that fails outside its tests counts as
# one failure).  The exit status is non-zero if anything failed.
#
# Environment:
#   QUICKSTART_STAGES    space-separated subset of the stages above (default: all)
#   QUICKSTART_TIMEOUT   seconds one stage may take before it is killed (default 1200)
#   QUICKSTART_JOBS      make -j value (default: nproc)
#   QUICKSTART_FUZZ_SECONDS  seconds per harness in the fuzz stage (default 30)
set -euo pipefail

srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$srcdir"

DEPS=(build-essential autoconf automake libtool autoconf-archive pkg-config
      libibverbs-dev librdmacm-dev libcriterion-dev
      uthash-dev iperf3 socat curl python3 clang libclang-rt-dev valgrind iproute2
      libdapl-dev dapl2-utils openssh-server openssh-client nginx wrk groff-base)
# (libclang-rt-dev: clang's ASan, UBSan and libFuzzer runtimes, which clang
# only recommends, for the fuzz stage.)
# The deb stage's own tools, installed by that stage only: no other stage,
# nor the demo, needs a packaging tool chain.  lintian is optional (its
# check is skipped when it cannot be installed).
DEB_DEPS=(debhelper)
DEB_OPTIONAL_DEPS=(lintian)

jobs=${QUICKSTART_JOBS:-$(nproc 2>/dev/null || echo 2)}
stage_timeout=${QUICKSTART_TIMEOUT:-1200}

say() { printf '\n==> %s\n' "$*"; }
warn() { printf 'quickstart: warning: %s\n' "$*" >&2; }
die() { printf 'quickstart: error: %s\n' "$*" >&2; exit 1; }

usage() {
	cat <<EOF
usage: $0 demo|test
  demo   install dependencies, build into build/, run tools/demo.sh
  test   install dependencies, build, run the unit and integration tests
         (normal, sanitizer and distcheck builds), a clang -Werror build,
         and build and check the Debian packages
EOF
}

# Run a command as root: directly, or through sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "not root and sudo is not installed: run as root, or install: $*"
	fi
}

# install_pkgs PACKAGE...: install those of the Debian packages that are
# not installed yet; non-zero if apt-get fails.
install_pkgs() {
	local missing=() p st
	for p in "$@"; do
		st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		[ "$st" = "install ok installed" ] || missing+=("$p")
	done
	if [ "${#missing[@]}" -eq 0 ]; then
		say "dependencies: all $# Debian packages already installed"
		return 0
	fi
	say "dependencies: installing ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends "${missing[@]}" </dev/null
}

install_deps() {
	if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
		die "this script needs a Debian-like system (dpkg-query, apt-get)"
	fi
	install_pkgs "${DEPS[@]}" || die "cannot install the dependencies"
}

# configure exists and is newer than its inputs, or run autogen.sh.
ensure_configure() {
	if [ -f config.status ]; then
		die "the source tree is configured in place ($srcdir/config.status);" \
			"run 'make distclean' there first: builds go to build*/"
	fi
	if [ ! -x configure ] || [ ! -f Makefile.in ] ||
	   [ configure -ot configure.ac ] || [ Makefile.in -ot Makefile.am ]; then
		say "autogen: generating configure and Makefile.in"
		./autogen.sh
	fi
}

# configure_dir DIR [configure args...]: (re)configure DIR when it has no
# Makefile or was configured with other arguments.
configure_dir() {
	local dir=$1
	shift
	local want="$*" stamp="$dir/.quickstart-configure"
	mkdir -p "$dir"
	if [ ! -f "$dir/Makefile" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
		say "configure: $dir ${want:+($want)}"
		rm -f "$stamp"
		(cd "$dir" && "$srcdir/configure" "$@") || return 1
		printf '%s\n' "$want" >"$stamp"
	fi
}

build_dir() {
	local dir=$1
	shift
	configure_dir "$dir" "$@" || return 1
	say "build: make -j$jobs in $dir"
	make -C "$dir" -j"$jobs"
}

# ---------------------------------------------------------------- demo ---

cmd_demo() {
	install_deps
	ensure_configure
	build_dir "$srcdir/build" || die "build failed"
	[ -x tools/demo.sh ] || die "tools/demo.sh is missing or not executable"
	say "demo: tools/demo.sh $srcdir/build"
	tools/demo.sh "$srcdir/build"
}

# ---------------------------------------------------------------- test ---

tot_pass=0 tot_fail=0 tot_skip=0 tot_xfail=0 tot_xpass=0 tot_error=0
summary=()
failed_any=0

# The harness's closing counts ("# PASS:  7") from a make check / distcheck
# transcript; several runs in one transcript are summed.
count_of() { # FIELD FILE
	awk -v f="# $1:" 'index($0, f) == 1 { n += $NF } END { print n + 0 }' "$2"
}

# Show the harness logs of a failed run: test-suite.log has the log of
# every failing test.  make deletes the .log of a test it is killed in the
# middle of, so the watchdog copies those first (quickstart-NAME.unfinished).
show_logs() {
	local dir=$1 unfinished=$2 f found=0
	while IFS= read -r f; do
		found=1
		printf '\n----- %s -----\n' "$f"
		cat "$f"
	done < <(find "$dir" -name test-suite.log -newer "$dir/.quickstart-stage-start" 2>/dev/null)
	if [ -s "$unfinished" ]; then
		found=1
		cat "$unfinished"
	fi
	[ "$found" -eq 1 ] || printf '(no test logs found under %s)\n' "$dir"
}

# Copy the logs of the tests running now (a .log with no .trs yet).
snapshot_unfinished() {
	local dir=$1 f
	while IFS= read -r f; do
		[ -f "${f%.log}.trs" ] && continue
		case $f in */test-suite.log | */config.log | */quickstart-*) continue ;; esac
		printf '\n----- %s (still running when the stage was killed) -----\n' "$f"
		tail -n 300 "$f"
	done < <(find "$dir" -name '*.log' -newer "$dir/.quickstart-stage-start" 2>/dev/null)
}

# run_tests NAME DIR MAKE-TARGET...: run make in DIR with a time limit,
# keep the transcript, add its counts to the totals.
run_tests() {
	local name=$1 dir=$2
	shift 2
	run_cmd_tests "$name" "$dir" make -C "$dir" -j"$jobs" "$@"
}

# run_cmd_tests NAME DIR COMMAND...: the same for any command whose
# transcript has automake's closing counts ("# PASS:  7"); its test logs
# are under DIR.  The time limit is $stage_limit if set, else the default.
run_cmd_tests() {
	local name=$1 dir=$2
	shift 2
	local out="$dir/quickstart-$name.out" unfinished="$dir/quickstart-$name.unfinished"
	local rc=0 watchdog limit=${stage_limit:-$stage_timeout} t0=$SECONDS
	touch "$dir/.quickstart-stage-start"
	rm -f "$unfinished"
	say "$name: $* (limit ${limit}s; $((SECONDS / 60)) min into the run)"
	# Just before timeout(1) kills the run, keep what the hung tests said.
	(
		end=$((SECONDS + limit - 10))
		while [ "$SECONDS" -lt "$end" ]; do sleep 2; done
		snapshot_unfinished "$dir" >"$unfinished"
	) </dev/null >/dev/null 2>&1 &
	watchdog=$!
	set +e
	AM_COLOR_TESTS=no timeout --kill-after=30 "$limit" "$@" </dev/null 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	kill "$watchdog" 2>/dev/null
	wait "$watchdog" 2>/dev/null
	set -e
	local p f s xf xp e
	p=$(count_of PASS "$out") f=$(count_of FAIL "$out") s=$(count_of SKIP "$out")
	xf=$(count_of XFAIL "$out") xp=$(count_of XPASS "$out") e=$(count_of ERROR "$out")
	tot_pass=$((tot_pass + p)) tot_skip=$((tot_skip + s)) tot_xfail=$((tot_xfail + xf))
	tot_fail=$((tot_fail + f)) tot_xpass=$((tot_xpass + xp)) tot_error=$((tot_error + e))
	local bad=$((f + xp + e)) note=""
	if [ "$rc" -ne 0 ]; then
		failed_any=1
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
			note=" (killed after ${limit}s)"
		fi
		if [ "$bad" -eq 0 ]; then
			# Failed outside the tests (build, install, distclean
			# check, time limit): count it once so the total shows it.
			tot_error=$((tot_error + 1))
			if [ "$rc" -eq 125 ] && [ "${1##*/}" = run-in-vm ]; then
				note="$note (the VM testbed failed: run-in-vm exit 125, its reason is above; no test ran)"
			else
				note="$note (failed outside the tests, exit $rc)"
			fi
		fi
		summary+=("$(printf '%-11s FAILED  pass %d, fail %d, error %d, xpass %d, skip %d%s (%d s)' \
			"$name" "$p" "$f" "$e" "$xp" "$s" "$note" $((SECONDS - t0)))")
		# Which tests, and the first line of each log that says why:
		# the summary is what survives when the transcript is cut.
		local t why
		while read -r t; do
			why=$(grep -v -E '^(FAIL|ERROR|XPASS) ' "$dir/$t.log" 2>/dev/null |
				grep -m1 -E 'FAIL|ERROR' | cut -c1-200 || true)
			summary+=("$(printf '%-11s   %s%s' '' "$t" "${why:+: $why}")")
		done < <(sed -n -E 's/^(FAIL|ERROR|XPASS): ([^ ]+).*/\2/p' "$out" | sort -u | head -n 8)
		# valgrind.sh's cases: "FAIL desc (exit N): why", one line each.
		while read -r t; do
			summary+=("$(printf '%-11s   %s' '' "$t")")
		done < <(grep -E '^FAIL [^:]' "$out" | cut -c1-200 | head -n 4)
		printf '\n===== %s failed: test logs =====\n' "$name"
		show_logs "$dir" "$unfinished"
	else
		summary+=("$(printf '%-11s ok      pass %d, fail %d, skip %d, xfail %d (%d s)' \
			"$name" "$p" "$f" "$s" "$xf" $((SECONDS - t0)))")
	fi
	return 0
}

# A stage that only builds: success or one failure.
run_build_stage() {
	local name=$1
	shift
	say "$name: $*"
	if "$@"; then
		summary+=("$(printf '%-11s ok      (build only)' "$name")")
	else
		failed_any=1
		tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' "$name")")
	fi
}

# Does LeakSanitizer work here?  It needs to stop the world with ptrace-like
# clone(CLONE_UNTRACED) tricks that some containers forbid; if so, run the
# sanitizer stage with leak detection off and say so.
lsan_works() {
	local tmp ok=1
	tmp=$(mktemp -d)
	printf '#include <stdlib.h>\nvoid *volatile p;\nint main(void){ p = malloc(33); p = 0; return 0; }\n' >"$tmp/leak.c"
	if ! cc -fsanitize=address -g "$tmp/leak.c" -o "$tmp/leak" 2>"$tmp/cc.err"; then
		warn "cannot build a sanitizer probe: $(cat "$tmp/cc.err")"
		ok=0
	elif ASAN_OPTIONS=detect_leaks=1 "$tmp/leak" >"$tmp/out" 2>&1; then
		ok=0	# the leak was not reported
	elif ! grep -q 'detected memory leaks' "$tmp/out"; then
		ok=0	# LSan could not run (e.g. "LeakSanitizer has encountered a fatal error")
	fi
	rm -rf "$tmp"
	[ "$ok" -eq 1 ]
}

# run_tests NAME in build/ once it is built (a failed build counts once).
tests_in_build() {
	local name=$1
	shift
	if build_dir "$srcdir/build"; then
		run_tests "$name" "$srcdir/build" "$@"
	else
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' "$name")")
	fi
}

stage_check() {
	tests_in_build check check
}

# The suite runs on tcp-fallback in check; shm, the transport two libsdp
# processes of one host use by default, has its own pass (no zero copy:
# the tests that need it ask transport_caps and skip those cases).
stage_shm() {
	tests_in_build shm check 'TESTS=$(INTEGRATION_TESTS)' TEST_TRANSPORT=shm
}

stage_sanitizers() {
	local leaks=1
	if ! lsan_works; then
		leaks=0
		warn "LeakSanitizer does not work on this machine: leak detection is OFF for this run"
	fi
	export ASAN_OPTIONS="detect_leaks=$leaks:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1"
	export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
	export LSAN_OPTIONS="${LSAN_OPTIONS:-}"
	if build_dir "$srcdir/build-asan" --enable-sanitizers; then
		run_tests sanitizers "$srcdir/build-asan" check
	else
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' sanitizers)")
	fi
	unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
}

# ThreadSanitizer over the integration suite: the engine's progress thread,
# the application threads and the transport meet on every connection.
# (Criterion cannot map its inheritable arena under TSan, so the unit tests
# run in the other stages only.)
stage_tsan() {
	export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$srcdir/test/tsan.supp"
	if build_dir "$srcdir/build-tsan" --enable-sanitizers=thread; then
		# shellcheck disable=SC2016
		run_tests tsan "$srcdir/build-tsan" check 'TESTS=$(INTEGRATION_TESTS)'
	else
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' tsan)")
	fi
	unset TSAN_OPTIONS
}

# memcheck over real workloads in the normal build (test/valgrind.sh).
stage_valgrind() {
	if build_dir "$srcdir/build"; then
		run_tests valgrind "$srcdir/build" check-valgrind
	else
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' valgrind)")
	fi
}

stage_distcheck() {
	if configure_dir "$srcdir/build"; then
		run_tests distcheck "$srcdir/build" distcheck
	else
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (configure)' distcheck)")
	fi
}

# The library, the tools and the test programs with clang and -Werror;
# `check TESTS=` builds the test programs and runs none.
build_clang() {
	build_dir "$srcdir/build-clang" CC=clang --enable-werror &&
		make -C "$srcdir/build-clang" -j"$jobs" check TESTS=
}

stage_clang() {
	run_build_stage clang build_clang
}

# The fuzzers, briefly: a crash any change brings within reach of the
# committed corpus fails CI.  Longer runs: test/fuzz/run.sh.
stage_fuzz() {
	if ! configure_dir "$srcdir/build-fuzz" CC=clang --enable-fuzz; then
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (configure)' fuzz)")
		return
	fi
	stage_limit=900 run_tests fuzz "$srcdir/build-fuzz" fuzz \
		FUZZ_SECONDS="${QUICKSTART_FUZZ_SECONDS:-30}"
}

# The integration suite again on a verbs transport inside a QEMU guest
# (test/vm/run-in-vm: its first run installs what it needs and builds the
# guest, cached after), then SDP between two kernels (test/vm/cross_kernel.sh,
# two guests): stage_vm STAGE DEVICE TRANSPORT CROSS-STAGE.  run-in-vm's
# exit 125 means the testbed itself failed: that fails the stage, it is
# never a skip.
stage_vm() {
	local name=$1 device=$2 transport=$3 cross=$4
	if ! build_dir "$srcdir/build"; then
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' "$name")")
		return
	fi
	# Two tests at a time, as on the host: the guest's two vCPUs are two
	# host threads, and one test alone leaves part of them idle (36 min
	# serial, 23 with -j2, for siw).  4 GiB: on verbs every SDP connection
	# pins its buffers (8 MiB), many_conns' 100 loopback connections alone
	# pin over 1 GiB, and another test runs beside it.
	# shellcheck disable=SC2016
	stage_limit=3000 RUN_IN_VM_TIMEOUT=2900 RUN_IN_VM_RW="$srcdir/build" RUN_IN_VM_MEM=4096 \
		run_cmd_tests "$name" "$srcdir/build" "$srcdir/test/vm/run-in-vm" --devices "$device" -- \
		make -C "$srcdir/build" -j2 check 'TESTS=$(INTEGRATION_TESTS)' TEST_TRANSPORT="$transport"
	# One test, counted the automake way so the totals include it.
	stage_limit=900 run_cmd_tests "$cross" "$srcdir/build" bash -c \
		'"$@"; rc=$?; if [ $rc -eq 0 ]; then echo "# PASS:  1"; else echo "# FAIL:  1"; fi; exit $rc' \
		cross_kernel "$srcdir/test/vm/cross_kernel.sh" "$srcdir/build" "$device"
}

# The uDAPL provider in one guest with both soft devices: dat_pair.sh and
# ssp.sh, each run over siw and over rxe by itself, each counted as one
# test the automake way (a skip, 77, as a skip) so the totals include them.
# As in stage_vm, run-in-vm's exit 125 (the testbed failed) fails the stage.
stage_dat() {
	if ! build_dir "$srcdir/build"; then
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (build)' dat)")
		return
	fi
	# 3 GiB as for dat_pair.sh's README line; the scripts bound each run.
	# shellcheck disable=SC2016
	stage_limit=1200 RUN_IN_VM_TIMEOUT=1100 RUN_IN_VM_MEM=3072 \
		run_cmd_tests dat "$srcdir/build" "$srcdir/test/vm/run-in-vm" --devices siw,rxe -- \
		bash -c 'f=0; for t in dat_pair.sh ssp.sh; do "$1/test/dat/$t" "$2"; case $? in 0) echo "# PASS:  1" ;; 77) echo "# SKIP:  1" ;; *) echo "# FAIL:  1"; f=1 ;; esac; done; exit $f' \
		dat "$srcdir" "$srcdir/build"
}

# The Debian packages, built and installed into a scratch root by
# test/deb/deb_check.sh, which prints a line and the automake counts per
# check (a build failure is one failure).
stage_deb() {
	if ! install_pkgs "${DEB_DEPS[@]}"; then
		failed_any=1 tot_error=$((tot_error + 1))
		summary+=("$(printf '%-11s FAILED  (cannot install %s)' deb "${DEB_DEPS[*]}")")
		return
	fi
	install_pkgs "${DEB_OPTIONAL_DEPS[@]}" ||
		warn "cannot install ${DEB_OPTIONAL_DEPS[*]}: the deb stage skips its lintian check"
	mkdir -p "$srcdir/build-deb"
	DEB_CHECK_JOBS=$jobs stage_limit=900 run_cmd_tests deb "$srcdir/build-deb" \
		"$srcdir/test/deb/deb_check.sh" "$srcdir" "$srcdir/build-deb"
}

# The ib transport over Soft-RoCE.
stage_rxe() {
	stage_vm rxe rxe ib cross-kernel
}

# The iwarp transport over soft-iWARP.
stage_siw() {
	stage_vm siw siw iwarp cross-siw
}

cmd_test() {
	local start=$SECONDS stages=${QUICKSTART_STAGES:-check shm rxe siw dat sanitizers tsan valgrind distcheck clang fuzz deb} s
	install_deps
	ensure_configure
	for s in $stages; do
		case $s in
		check | shm | rxe | siw | dat | sanitizers | tsan | valgrind | distcheck | clang | fuzz | deb) "stage_$s" ;;
		*) die "unknown stage '$s' in QUICKSTART_STAGES" ;;
		esac
	done
	local secs=$((SECONDS - start))
	local passed=$((tot_pass + tot_xfail)) failed=$((tot_fail + tot_xpass + tot_error))
	printf '\n===== summary (%dm%02ds) =====\n' $((secs / 60)) $((secs % 60))
	[ "${#summary[@]}" -eq 0 ] || printf '%s\n' "${summary[@]}"
	printf 'totals      pass %d, fail %d, error %d, xpass %d, xfail %d, skip %d\n' \
		"$tot_pass" "$tot_fail" "$tot_error" "$tot_xpass" "$tot_xfail" "$tot_skip"
	if [ "$failed_any" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=1	# cannot happen, but never print "0 failed" on failure
	fi
	printf 'tests: %d passed, %d failed\n' "$passed" "$failed"
	[ "$failed_any" -eq 0 ] && [ "$failed" -eq 0 ]
}

case ${1:-} in
demo) cmd_demo ;;
test) cmd_test ;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit 2
	;;
esac
