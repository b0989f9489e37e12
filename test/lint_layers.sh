#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The layering holds (doc/layers.md): calls run downward only.
#
#  - Between directories: an object calls only into its own directory or
#    one below it in DIRS.
#  - Inside sdp/ and ops/: the files are ranked, lowest first, in
#    SDP_FILES and OPS_FILES; an object calls only into files ranked
#    below it.  A new file must be placed in its list.
#  - common/ is the floor: none of its files includes a header of
#    another directory.
#
# Calls are read from the objects (nm: what one object leaves undefined
# that another defines), so a call through a function pointer -- the
# engine's few upcalls, sdp/engine.h "struct sdp_upcalls" -- is not a
# call here, by design: the layer above installs them.
#
# The check first proves it can fail: with sdp/'s ranking reversed it
# must find calls running up.
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)/build}"
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"

DIRS="common transports/epq transports/verbs transports/ib transports/iwarp transports/tcp-fallback transports/shm
transports conf sdp dat ops preload"
SDP_FILES="wire convert_wire base regcache progress mode post zcopy write_zcopy conn
move sock poll convert"
OPS_FILES="clock stats peercache epset fdtable sigio relayed relay switch epoll fork convert io ctl poll"

command -v nm >/dev/null 2>&1 || { echo "lint_layers: SKIP: no nm"; exit 77; }

mapfile -t objs < <(find "$top_builddir" -path '*/.libs/*' \
	\( -name 'libsdp_core_la-*.o' -o -name 'libsdp_la-*.o' -o -name 'libdaplsdp_la-*.o' \) |
	sort)
if [ "${#objs[@]}" -lt 30 ]; then
	echo "lint_layers: FAIL: only ${#objs[@]} library objects under $top_builddir"
	exit 1
fi

# "dir/stem" of an object, e.g. sdp/conn for sdp/.libs/libsdp_core_la-conn.o
unit_of() {
	local o=${1#"$top_builddir"/} base
	base=$(basename "$o" .o)
	base=${base#libsdp_core_la-}
	base=${base#libsdp_la-}
	base=${base#libdaplsdp_la-}
	echo "${o%%/.libs/*}/$base"
}

# What libc defines: the preload's wrappers (free, close...) define them
# too, and a call to one is a call to libc, not up into preload/.
libc=$(${CC:-cc} -print-file-name=libc.so.6)
[ -e "$libc" ] || libc=$(ldconfig -p 2>/dev/null | awk '/libc\.so\.6 / { print $NF; exit }')
[ -n "$libc" ] && [ -e "$libc" ] || { echo "lint_layers: SKIP: cannot find libc.so.6"; exit 77; }

# One line per call between objects: "caller callee symbol".  Only
# strong references (U) are calls; a weak one (w) asks whether a symbol
# exists (sys.c: is the preload loaded?).
edges=$(
	{
		nm -D --defined-only "$libc" | awk '{ sub(/@.*/, "", $3); print "L", $3 }'
		for o in "${objs[@]}"; do echo "O $o $(unit_of "$o")"; done
		nm -A --defined-only -g "${objs[@]}" | awk '$2 ~ /^[TDBRVW]$/ { sub(/:.*/, "", $1); print "D", $1, $3 }'
		nm -A -u "${objs[@]}" | awk '$2 == "U" { sub(/:.*/, "", $1); sub(/@.*/, "", $3); print "U", $1, $3 }'
	} | awk '
		$1 == "L" { libc[$2] = 1; next }
		$1 == "O" { unit[$2] = $3; next }
		$1 == "D" { def[$3] = unit[$2]; next }
		$1 == "U" && ($3 in def) && def[$3] != unit[$2] && !($3 in libc) { print unit[$2], def[$3], $3 }
	' | sort -u
)
if [ -z "$edges" ]; then
	echo "lint_layers: FAIL: no calls between objects found (nm output changed?)"
	exit 1
fi

rank_in() {	# rank_in WORD LIST: position of WORD in LIST, or empty
	local i=0 w
	for w in $2; do
		[ "$w" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
}

# violations DIR FILES: calls inside DIR that run up FILES' ranking, and
# objects of DIR that FILES does not place.
violations() {
	local dir=$1 files=$2 caller callee sym rc re
	for o in "${objs[@]}"; do
		u=$(unit_of "$o")
		[ "${u%/*}" = "$dir" ] || continue
		[ -n "$(rank_in "${u##*/}" "$files")" ] ||
			echo "  $u is not placed in the $dir ranking (test/lint_layers.sh)"
	done
	while read -r caller callee sym; do
		[ "${caller%/*}" = "$dir" ] && [ "${callee%/*}" = "$dir" ] || continue
		rc=$(rank_in "${caller##*/}" "$files")
		re=$(rank_in "${callee##*/}" "$files")
		[ -n "$rc" ] && [ -n "$re" ] || continue
		[ "$re" -lt "$rc" ] || echo "  $caller calls up into $callee: $sym"
	done <<<"$edges"
}

reversed=$(echo $SDP_FILES | tr ' ' '\n' | tac | tr '\n' ' ')
if [ -z "$(violations sdp "$reversed")" ]; then
	echo "lint_layers: FAIL: the check finds nothing with sdp/'s ranking reversed"
	exit 1
fi

bad=
add() { [ -z "$1" ] || bad="$bad$1"$'\n'; }

while read -r caller callee sym; do
	rc=$(rank_in "${caller%/*}" "$DIRS")
	re=$(rank_in "${callee%/*}" "$DIRS")
	if [ -z "$rc" ] || [ -z "$re" ]; then
		add "  ${caller%/*} or ${callee%/*} is not placed in DIRS (test/lint_layers.sh)"
	elif [ "$re" -gt "$rc" ]; then
		add "  $caller calls up into $callee: $sym"
	fi
done <<<"$edges"
add "$(violations sdp "$SDP_FILES")"
add "$(violations ops "$OPS_FILES")"
for f in "$top_srcdir"/common/*.[ch]; do
	sed -n 's/^#include "\(.*\)".*/\1/p' "$f" | while read -r h; do
		case $h in
		*/*) echo "  common/${f##*/} includes $h, a header of a layer above" ;;
		*) [ -e "$top_srcdir/common/$h" ] ||
			echo "  common/${f##*/} includes $h, not a header of common/" ;;
		esac
	done
done >"${TMPDIR:-/tmp}/lint_layers.$$"
add "$(cat "${TMPDIR:-/tmp}/lint_layers.$$")"
rm -f "${TMPDIR:-/tmp}/lint_layers.$$"

bad=$(printf '%s' "$bad" | sed '/^$/d' | sort -u)
if [ -n "$bad" ]; then
	echo "lint_layers: FAIL: calls run up the layers (doc/layers.md):"
	echo "$bad"
	exit 1
fi
echo "lint_layers: ok: $(echo "$edges" | wc -l) calls between ${#objs[@]} objects, all downward"
exit 0
