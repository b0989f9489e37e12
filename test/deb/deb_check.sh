#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# deb_check.sh SRCDIR WORKDIR: the Debian packages (debian/), as a user
# gets them.  Builds them with dpkg-buildpackage from a clean copy of
# SRCDIR (its git files, or the tree without build directories), installs
# them with dpkg into a scratch root under WORKDIR (dpkg --root, the
# maintainer scripts run chrootless: never the running system), and
# checks:
#
#   contents    each file where it belongs, in the package it belongs to
#   install     dpkg installs the four packages (their dependencies are
#               provided by a stand-in package that also owns
#               /etc/dat.conf, as libdapl2 does)
#   dat.conf    the provider's lines are in /etc/dat.conf, the rest kept
#   trigger     a new dat.conf from its owner gets them back (the trigger)
#   man         man finds every page under the root's share/man
#   sdp_run     a python echo pair, both under the root's sdp_run on the
#               software transport: the logs say SDP, the data comes back
#   sdpstat     the root's sdpstat shows the server's listener on both stacks
#   sdp.conf    the shipped policy file parses and lets a connection use SDP
#   engine      the example of sdp(3), taken from the installed page, builds
#               against the installed header, .pc and library and sends
#               over SDP to the root's sdpcat
#   remove      removing libdaplsdp leaves dat.conf as it was; purging all
#               leaves nothing of ours
#   lintian     no errors (warnings shown); skipped without lintian
#
# One line per check, then automake's closing counts (# PASS:  N) for
# quickstart.sh's deb stage.  DEB_CHECK_JOBS: make -j (default nproc).
set -u

if [ $# -ne 2 ]; then
	echo "usage: $0 SRCDIR WORKDIR" >&2
	exit 2
fi
src=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" || exit 2
work=$(cd "$2" && pwd)/deb
jobs=${DEB_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}

pass=0 fail=0 skip=0
result() { # NAME STATUS(0 pass, 77 skip, else fail) [WHY]
	case $2 in
	0) echo "PASS: $1"; pass=$((pass + 1)) ;;
	77) echo "SKIP: $1${3:+: $3}"; skip=$((skip + 1)) ;;
	*) echo "FAIL: $1${3:+: $3}"; fail=$((fail + 1)) ;;
	esac
}
finish() {
	printf '# PASS:  %d\n# SKIP:  %d\n# FAIL:  %d\n' "$pass" "$skip" "$fail"
	[ "$fail" -eq 0 ]
	exit
}
# A file shown indented, so that its own "# PASS:" lines are not counted.
show() { sed 's/^/  | /' "$@"; }

pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
}
trap cleanup EXIT

rm -rf "$work"
mkdir -p "$work/src" "$work/out"

# --- build ---------------------------------------------------------------------
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$src" && git ls-files -co --exclude-standard -z) |
		(cd "$src" && xargs -0 cp --parents -t "$work/src")
else
	tar -C "$src" --exclude=./build --exclude='./build-*' --exclude=./debian/build \
		-cf - . | tar -C "$work/src" -xf -
fi
log=$work/build.log
(cd "$work/src" && DEB_BUILD_OPTIONS="parallel=$jobs noautodbgsym" \
	dpkg-buildpackage -b -us -uc) >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
	tail -n 80 "$log" | show
	result build 1 "dpkg-buildpackage failed (exit $rc; $log)"
	finish
fi
result build 0
mv "$work"/*.deb "$work/out/"

triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=usr/lib/$triplet
deb() { ls "$work/out/$1"_*.deb 2>/dev/null; }

# --- contents --------------------------------------------------------------------
# package  path (as dpkg-deb -c lists it)
CONTENTS="
libsdp          ./etc/sdp.conf
libsdp          ./usr/bin/sdp_run
libsdp          ./usr/bin/sdpstat
libsdp          ./usr/bin/sdpcat
libsdp          ./usr/bin/sdp_tool
libsdp          ./usr/bin/sdp_bench
libsdp          ./$lib/libsdp.so
libsdp          ./usr/share/man/man1/sdp_run.1.gz
libsdp          ./usr/share/man/man1/sdpcat.1.gz
libsdp          ./usr/share/man/man1/sdpstat.1.gz
libsdp          ./usr/share/man/man1/sdp_tool.1.gz
libsdp          ./usr/share/man/man1/sdp_bench.1.gz
libsdp          ./usr/share/man/man5/sdp.conf.5.gz
libsdp          ./usr/share/man/man7/libsdp.7.gz
libsdp-engine0  ./$lib/libsdp-engine.so.0
libsdp-dev      ./usr/include/sdp.h
libsdp-dev      ./usr/include/dat2/dat_iw_extensions.h
libsdp-dev      ./$lib/libsdp-engine.so
libsdp-dev      ./$lib/pkgconfig/libsdp-engine.pc
libsdp-dev      ./usr/share/man/man3/sdp.3.gz
libdaplsdp      ./$lib/libdaplsdp.so
libdaplsdp      ./usr/share/libdaplsdp/datconf.sh
"
check_contents() {
	local pkg path f ok=0
	while read -r pkg path; do
		[ -n "$pkg" ] || continue
		f=$(deb "$pkg")
		if [ -z "$f" ]; then
			echo "  no package $pkg"
			ok=1
		elif ! dpkg-deb -c "$f" | awk '{ print $6 }' | grep -qxF -- "$path"; then
			echo "  $pkg lacks $path"
			ok=1
		fi
	done <<<"$CONTENTS"
	if ! dpkg-deb -I "$(deb libsdp)" conffiles 2>/dev/null | grep -qx /etc/sdp.conf; then
		echo "  /etc/sdp.conf is not a conffile of libsdp"
		ok=1
	fi
	return $ok
}
check_contents
result contents $?

# --- install into a scratch root -----------------------------------------------
root=$work/root
admin=$root/var/lib/dpkg
mkdir -p "$admin/info" "$admin/updates" "$admin/triggers" "$root/etc"
: >"$admin/status"
: >"$admin/available"
dpkg_force=--force-script-chrootless
[ "$(id -u)" -eq 0 ] || dpkg_force=$dpkg_force,not-root
dpkg_root() { dpkg --root="$root" "$dpkg_force" "$@"; }

# The stand-in: owns /etc/dat.conf (a conffile, as libdapl2's is) and
# provides what the packages depend on outside themselves, at the
# versions this host has.
standin() { # VERSION DAT.CONF-CONTENT
	local d=$work/standin/$1 provides="" p v
	for p in $(for f in "$work"/out/*.deb; do dpkg-deb -f "$f" Depends; done |
		tr ',|' '\n\n' | sed 's/(.*//; s/:.*//; s/[[:space:]]//g' | sort -u); do
		case $p in libsdp | libsdp-engine0 | libsdp-dev | libdaplsdp | '') continue ;; esac
		v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) ||
			{ echo "  $p is not installed on this host: cannot provide it"; return 1; }
		provides="${provides:+$provides, }$p (= $v)"
	done
	mkdir -p "$d/DEBIAN" "$d/etc"
	printf '%s\n' "$2" >"$d/etc/dat.conf"
	printf '%s\n' 'Package: datconf-standin' "Version: $1" 'Architecture: all' \
		'Maintainer: libsdp deb_check.sh <nobody@invalid>' "Provides: $provides" \
		'Description: what libsdp'"'"'s packages need, for a scratch root' >"$d/DEBIAN/control"
	echo /etc/dat.conf >"$d/DEBIAN/conffiles"
	dpkg-deb -b --root-owner-group "$d" "$work/standin-$1.deb" >/dev/null
}
DAT1='# DAT v2.0 (stand-in)
ofa-v2-ib0 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib0 0" ""'
DAT2='# DAT v2.0 (stand-in, version 2)
ofa-v2-ib1 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib1 0" ""'

ilog=$work/install.log
installed=1
if standin 1 "$DAT1" && standin 2 "$DAT2" &&
	dpkg_root -i "$work/standin-1.deb" >"$ilog" 2>&1 &&
	dpkg_root -i "$work"/out/*.deb >>"$ilog" 2>&1 &&
	[ "$(dpkg-query --admindir="$admin" -W -f='${db:Status-Abbrev}\n' \
		libsdp libsdp-engine0 libsdp-dev libdaplsdp | grep -c '^ii')" -eq 4 ]; then
	result install 0
else
	show "$ilog"
	result install 1
	installed=0
fi

# The provider's block in dat.conf: both IA lines naming the library,
# which is there, and the owner's lines kept.
block_ok() { # OWNER-CONTENT
	local f=$root/etc/dat.conf ia
	[ -f "$root/$lib/libdaplsdp.so" ] || { echo "  no $lib/libdaplsdp.so"; return 1; }
	for ia in ofa-v2-sdp-iwarp ofa-v2-sdp-roce; do
		grep -qE "^$ia u2.0 nonthreadsafe default /$lib/libdaplsdp.so dapl.2.0 " "$f" ||
			{ echo "  no $ia line naming /$lib/libdaplsdp.so in /etc/dat.conf:"; show "$f"; return 1; }
	done
	grep -qxF -- "$(tail -n 1 <<<"$1")" "$f" ||
		{ echo "  the owner's lines are gone from /etc/dat.conf:"; show "$f"; return 1; }
}

if [ "$installed" -eq 1 ]; then
	block_ok "$DAT1"
	result dat.conf $?
	# libdapl2 shipping a new dat.conf, taken as is: the block is gone
	# until the trigger, which apt runs at the end (--triggers-only).
	if dpkg_root --force-confnew -i "$work/standin-2.deb" >>"$ilog" 2>&1 &&
		dpkg_root --triggers-only -a >>"$ilog" 2>&1; then
		block_ok "$DAT2"
		result trigger $?
	else
		show "$ilog"
		result trigger 1 "dpkg failed"
	fi
else
	result dat.conf 1 "not installed"
	result trigger 1 "not installed"
fi

# --- what a user runs -------------------------------------------------------------
man_ok() {
	local p out ok=0
	for p in "1 sdp_run" "1 sdpcat" "1 sdpstat" "1 sdp_tool" "1 sdp_bench" \
		"3 sdp" "5 sdp.conf" "7 libsdp"; do
		# shellcheck disable=SC2086
		out=$(MANPATH=$root/usr/share/man man -w $p 2>&1)
		case $out in
		"$root"/usr/share/man/*) ;;
		*) echo "  man -w $p: $out"; ok=1 ;;
		esac
	done
	return $ok
}
if command -v man >/dev/null 2>&1; then
	man_ok
	result man $?
else
	result man 77 "man is not installed"
fi

export LD_LIBRARY_PATH=$root/$lib
export LIBSDP_LIBRARY=$root/$lib/libsdp.so
run() { timeout 60 "$@"; }
conf=$work/sdp.conf
printf '%s\n' 'transport enable tcp-fallback' 'use both server * *:*' 'use both client * *:*' >"$conf"

cat >"$work/echo_server.py" <<'EOF'
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d %d\n" % (s.getsockname()[1], os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept()
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    c.sendall(b)
c.close()
EOF
cat >"$work/echo_client.py" <<'EOF'
import hashlib, os, socket, sys, threading
data = os.urandom(4 << 20)   # above the zero-copy threshold: Read Zcopy too
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
got = []
def reader():
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        got.append(b)
t = threading.Thread(target=reader)
t.start()
c.sendall(data)
c.shutdown(socket.SHUT_WR)
t.join()
back = b"".join(got)
ok = hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
print("echo %s: %d of %d bytes" % ("ok" if ok else "MISMATCH", len(back), len(data)))
sys.exit(0 if ok else 1)
EOF

# wait_file FILE: until a server wrote it (60 s at most).
wait_file() {
	local i
	for i in $(seq 600); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# echo_pair NAME SERVER-ENV CLIENT-ENV: the python pair, each under sdp_run
# with the environment given (VAR=VALUE words); the server's port and pid
# in $work/NAME.port, the logs in $work/NAME.{server,client}.log.  Runs
# $on_listen PID PORT (if set) while the server listens; that reports its
# own result.
echo_pair() {
	local name=$1 sp cp port pid rc=0
	local pf=$work/$name.port sl=$work/$name.server.log cl=$work/$name.client.log
	rm -f "$pf"
	# shellcheck disable=SC2086
	env $2 timeout 60 "$root/usr/bin/sdp_run" ${SDP_RUN_ARGS-} -- \
		python3 "$work/echo_server.py" "$pf" >"$sl" 2>&1 &
	sp=$!
	pids+=("$sp")
	if ! wait_file "$pf"; then
		echo "  the server did not start:"
		show "$sl"
		return 1
	fi
	read -r port pid <"$pf"
	if [ -n "${on_listen-}" ]; then
		"$on_listen" "$pid" "$port"
	fi
	# shellcheck disable=SC2086
	env $3 timeout 60 "$root/usr/bin/sdp_run" ${SDP_RUN_ARGS-} -- \
		python3 "$work/echo_client.py" "$port" >"$cl" 2>&1 || rc=1
	wait "$sp" || rc=1
	grep -q '^echo ok' "$cl" || rc=1
	# On one host shm is tried first (doc/shm.md), else tcp-fallback.
	grep -Eq 'accepted an SDP connection \((shm|tcp-fallback)\)' "$sl" || rc=1
	grep -Eq "connected to 127.0.0.1:$port over SDP \((shm|tcp-fallback)\)" "$cl" || rc=1
	if [ "$rc" -ne 0 ]; then
		echo "  server:"
		show "$sl"
		echo "  client:"
		show "$cl"
	fi
	return $rc
}

listener_shown() { # PID PORT
	local out
	out=$(run "$root/usr/bin/sdpstat" --json -p "$1" 2>&1)
	if ! grep -q "\"stack\":\"both\",\"state\":\"listen\".*\"port\":$2[,}]" <<<"$out"; then
		echo "  sdpstat --json -p $1 does not show a listener on both stacks, port $2:"
		show <<<"$out"
		return 1
	fi
}

if [ "$installed" -eq 1 ]; then
	stat_rc=1
	on_listen_stat() { listener_shown "$@" && stat_rc=0; }
	on_listen=on_listen_stat SDP_RUN_ARGS="--conf $conf --log 7" echo_pair sdp_run "" ""
	result sdp_run $?
	result sdpstat $stat_rc

	# The shipped policy: ib and iwarp only, so the environment enables
	# the software transport; the file's rules must let both ends try SDP.
	echo_pair sdpconf "LIBSDP_CONFIG_FILE=$root/etc/sdp.conf SDP_TRANSPORTS=tcp-fallback SDP_LOG_LEVEL=7" \
		"LIBSDP_CONFIG_FILE=$root/etc/sdp.conf SDP_TRANSPORTS=tcp-fallback SDP_LOG_LEVEL=7" &&
		! grep -h ' error ' "$work"/sdpconf.*.log
	result sdp.conf $?
else
	result sdp_run 1 "not installed"
	result sdpstat 1 "not installed"
	result sdp.conf 1 "not installed"
fi

# The program of sdp(3)'s EXAMPLES, as a user would copy it from the page.
engine_ok() {
	local d=$work/engine pf port out
	mkdir -p "$d"
	pf=$d/port
	timeout 60 "$root/usr/bin/sdpcat" -l 127.0.0.1:0 --echo --count 1 --port-file "$pf" \
		>"$d/server.log" 2>&1 &
	pids+=("$!")
	wait_file "$pf" || { echo "  sdpcat did not listen:"; show "$d/server.log"; return 1; }
	port=$(cat "$pf")
	# The page's port, 5001, may be taken here: the one sdpcat got.
	zcat "$root/usr/share/man/man3/sdp.3.gz" |
		awk '/^\.SH EXAMPLES/ { ex = 1 } ex && /^\.EE/ { exit } ex && on { print } ex && /^\.EX/ { on = 1 }' |
		sed -e 's/\\e/\\/g' -e 's/\\-/-/g' -e "s/htons(5001)/htons($port)/" >"$d/client.c"
	grep -q "htons($port)" "$d/client.c" || { echo "  no example program for port 5001 in sdp(3)"; return 1; }
	# shellcheck disable=SC2046
	cc "$d/client.c" -o "$d/client" $(PKG_CONFIG_SYSROOT_DIR=$root \
		PKG_CONFIG_LIBDIR=$root/$lib/pkgconfig pkg-config --cflags --libs libsdp-engine) \
		>"$d/cc.log" 2>&1 || { show "$d/cc.log"; return 1; }
	out=$(run "$d/client" 2>&1)
	grep -qx 'sent 15 bytes over tcp-fallback' <<<"$out" ||
		{ echo "  the example printed:"; show <<<"$out"; return 1; }
}
if [ "$installed" -eq 1 ]; then
	engine_ok
	result engine $?
else
	result engine 1 "not installed"
fi

# --- removal ---------------------------------------------------------------------
remove_ok() {
	block_ok "$DAT2" || { echo "  no block to remove (see trigger)"; return 1; }
	dpkg_root -r libdaplsdp >>"$ilog" 2>&1 || { show "$ilog"; return 1; }
	if ! cmp -s "$root/etc/dat.conf" "$work/standin/2/etc/dat.conf"; then
		echo "  removing libdaplsdp did not give dat.conf back as it was:"
		diff "$work/standin/2/etc/dat.conf" "$root/etc/dat.conf" | show
		return 1
	fi
	dpkg_root -P libsdp libsdp-dev libsdp-engine0 libdaplsdp datconf-standin >>"$ilog" 2>&1 ||
		{ show "$ilog"; return 1; }
	local left
	left=$(cd "$root" && find . -path ./var/lib/dpkg -prune -o ! -type d -print)
	[ -z "$left" ] || { echo "  left after purging:"; show <<<"$left"; return 1; }
}
if [ "$installed" -eq 1 ]; then
	remove_ok
	result remove $?
else
	result remove 1 "not installed"
fi

# --- lintian -------------------------------------------------------------------------
if command -v lintian >/dev/null 2>&1; then
	lintian --allow-root --fail-on error -I --pedantic "$work"/out/*.deb >"$work/lintian.log" 2>&1
	rc=$?
	show "$work/lintian.log"
	result lintian $rc "$(grep -c '^E:' "$work/lintian.log") error(s), $(grep -c '^W:' "$work/lintian.log") warning(s)"
else
	result lintian 77 "lintian is not installed"
fi

finish
