#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# datconf.sh add|remove FILE LIBPATH: libdaplsdp's entries in a dat.conf.
#
# libdat2 finds providers through /etc/dat.conf (or $DAT_OVERRIDE), so
# `make install` adds libdaplsdp's two IA lines there (install-data-hook)
# and `make uninstall` takes them away (uninstall-hook).  Our lines live
# between two marker comments and nothing outside them is ever changed:
#
#   add     writes our block, LIBPATH being the installed libdaplsdp.so.
#           FILE (and its directory) is created if missing.  An older
#           block of ours is replaced where it is, keeping the ia_params
#           a user set in it (only the library path and the text are
#           renewed); without one the block goes at the end.
#   remove  deletes our block.  Without one it does nothing (success).  If
#           FILE is then empty (the block was all there was: add created
#           it), FILE is deleted.
#
# A begin marker without its end marker is an error and FILE is left as
# it is.  FILE is rewritten in place (same inode, mode and owner).
set -eu

BEGIN='# libsdp: libdaplsdp begin'
END='# libsdp: libdaplsdp end'
# Default ia_params: a netdev name (dat/ia.c: the first word may be a
# netdev, an IP address or a host name; "0.0.0.0" or nothing does not
# work, since rdma_cm only finds a device for a real address).
PARAMS='eth0 0'
NONL='# (the line above this block had no newline at its end)'

usage() {
	echo "usage: $0 add|remove FILE LIBPATH" >&2
	exit 2
}

[ $# -eq 3 ] || usage
op=$1 file=$2 lib=$3
case $op in add | remove) ;; *) usage ;; esac
[ -n "$file" ] || usage

me=datconf.sh
tmp=
trap 'rm -f "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# strip: FILE without our block(s) on stdout; with $1 = add, the new block
# goes where the first old one was (or at the end).  Exit 3 on a begin
# marker without an end marker.
#
# A file whose last line has no newline (Debian's /etc/dat.conf) gets one
# before a block appended after it; the block then carries NONL, and
# remove takes that newline away again if the block is still last, so that
# add + remove gives back the same bytes.  Lines are written through out(),
# which puts the newline before the next line instead of after each.
strip() {
	awk -v mode="$1" -v begin="$BEGIN" -v end="$END" -v lib="$lib" \
		-v params="$PARAMS" -v nonl_file="$2" -v nonl_mark="$NONL" '
	function out(s) {
		if (started)
			printf "\n"
		printf "%s", s
		started = 1
	}
	function block(    i, n, p) {
		out(begin)
		out("# libsdp'"'"'s uDAPL provider, libdaplsdp: installing it (`make install`")
		out("# or its Debian package) writes this block, and removing it removes")
		out("# the block; nothing outside it is ours.")
		out("# ia_params (the quoted \"NETDEV 0\"): the first word is the network")
		out("# interface (or its IP address, or a host name) whose RDMA device")
		out("# (siw: iWARP, rxe: RoCE, or a real RNIC/HCA) the IA uses.  \"eth0\" is")
		out("# only a default: put your interface (`ip -br addr`, `rdma link`).")
		out("# Installing again keeps the ia_params set here.")
		n = split("ofa-v2-sdp-iwarp ofa-v2-sdp-roce", names, " ")
		for (i = 1; i <= n; i++) {
			p = (names[i] in old) ? old[names[i]] : "\"" params "\""
			out(names[i] " u2.0 nonthreadsafe default " lib " dapl.2.0 " p " \"\"")
		}
		if (nonl)
			out(nonl_mark)
		out(end)
		done = 1
	}
	$0 == begin {
		if (inblock)
			exit 3
		inblock = 1
		after = 0
		next
	}
	inblock {
		if ($0 == end) {
			inblock = 0
			if (mode == "add" && !done)
				block()
			next
		}
		# remember the ia_params of our IA names (the first quoted field)
		if (($1 == "ofa-v2-sdp-iwarp" || $1 == "ofa-v2-sdp-roce") &&
		    match($0, /"[^"]*"/))
			old[$1] = substr($0, RSTART, RLENGTH)
		if ($0 == nonl_mark)
			nonl = 1
		next
	}
	{
		out($0)
		after = 1
	}
	END {
		if (inblock)
			exit 3
		if (mode == "add" && !done) {
			nonl = nonl_file
			block()
		}
		if (started && !(mode == "remove" && nonl && !after))
			printf "\n"
	}' "$file"
}

case $op in
add)
	if [ ! -e "$file" ]; then
		dir=$(dirname "$file")
		[ -d "$dir" ] || mkdir -p "$dir"
		: >"$file"
		created=1
	else
		created=0
	fi
	tmp=$(mktemp "${TMPDIR:-/tmp}/datconf.XXXXXX")
	# does the last line lack its newline?
	nonl=0
	if [ -s "$file" ] && [ "$(tail -c 1 "$file" | od -An -c | tr -d ' ')" != '\n' ]; then
		nonl=1
	fi
	if ! strip add $nonl >"$tmp"; then
		[ $created -eq 0 ] || rm -f "$file"
		echo "$me: $file: \"$BEGIN\" without \"$END\"; not changed" >&2
		exit 1
	fi
	if ! cmp -s "$tmp" "$file"; then
		cat "$tmp" >"$file"
	fi
	;;
remove)
	[ -f "$file" ] || exit 0
	grep -qxF "$BEGIN" "$file" || exit 0
	tmp=$(mktemp "${TMPDIR:-/tmp}/datconf.XXXXXX")
	if ! strip remove 0 >"$tmp"; then
		echo "$me: $file: \"$BEGIN\" without \"$END\"; not changed" >&2
		exit 1
	fi
	if [ -s "$tmp" ]; then
		cat "$tmp" >"$file"
	else
		rm -f "$file"
	fi
	;;
esac
exit 0
