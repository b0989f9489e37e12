#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# datconf_test.sh: dat/datconf.sh, the dat.conf editing that `make install`
# and `make uninstall` do, on temporary files: a missing file, a file with
# other providers' lines (byte for byte the same after add + remove), add
# twice, a moved library, ia_params a user edited, remove without our
# block, a broken block.
set -u

SRC=${top_srcdir:-$(dirname "$0")/../..}
DC="$SRC/dat/datconf.sh"
W=$(mktemp -d "${TMPDIR:-/tmp}/datconf_test.XXXXXX")
trap 'rm -rf "$W"' EXIT
LIB=/usr/local/lib/libdaplsdp.so
BEGIN='# libsdp: libdaplsdp begin'
END='# libsdp: libdaplsdp end'
fails=0

ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
dc() { sh "$DC" "$@"; }
count() { grep -cxF "$1" "$2"; }	# exact lines equal to $1 in $2

# --- a missing file (and directory), as under DESTDIR ---------------------
F=$W/destdir/etc/dat.conf
if dc add "$F" "$LIB" && [ -f "$F" ]; then
	ok "add creates a missing file and its directory"
else
	fail "add to a missing file"
fi
if [ "$(head -n 1 "$F")" = "$BEGIN" ] && [ "$(tail -n 1 "$F")" = "$END" ] &&
	[ "$(grep -cv '^#' "$F")" -eq 2 ]; then
	ok "a new file holds our block alone: markers, comments, two lines"
else
	fail "new file: unexpected content"; cat "$F"
fi
for ia in ofa-v2-sdp-iwarp ofa-v2-sdp-roce; do
	want="$ia u2.0 nonthreadsafe default $LIB dapl.2.0 \"eth0 0\" \"\""
	if [ "$(count "$want" "$F")" -eq 1 ]; then
		ok "line for $ia"
	else
		fail "no line '$want'"; cat "$F"
	fi
done
if dc remove "$F" "$LIB" && [ ! -e "$F" ]; then
	ok "remove deletes the file it had created"
else
	fail "remove left the file it created"
fi

# --- a file with other providers' lines -----------------------------------
F=$W/dat.conf
ORIG=$W/orig
# Everything must survive: comments, blank lines, tabs, trailing blanks,
# a CR, a line like ours
printf '%s\n' \
	'# DAT v2.0' \
	'#' \
	'ofa-v2-ib0 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib0 0" ""' \
	'' \
	'ofa-v2-iwarp u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "eth2 0" ""   ' \
	'	# libsdp: libdaplsdp begin (not ours: indented)' \
	'ofa-v2-sdp-iwarp u2.0 nonthreadsafe default /opt/other/libdaplsdp.so dapl.2.0 "ens3 0" ""' \
	"ofa-v2-mlx4_0-1u u2.0 nonthreadsafe default libdaploucm.so.2 dapl.2.0 \"mlx4_0 1\" \"\"$(printf '\r')" \
	>"$ORIG"
cp "$ORIG" "$F"
dc add "$F" "$LIB" || fail "add to a file with other lines: exit $?"
if [ "$(count "$BEGIN" "$F")" -eq 1 ] && [ "$(count "$END" "$F")" -eq 1 ] &&
	head -n "$(wc -l <"$ORIG")" "$F" | cmp -s - "$ORIG"; then
	ok "add appends our block after the other lines, which are unchanged"
else
	fail "add changed other lines"; diff "$ORIG" "$F"
fi
cp "$F" "$W/once"
dc add "$F" "$LIB" || fail "second add: exit $?"
if cmp -s "$F" "$W/once"; then
	ok "add twice: one block, the same file"
else
	fail "add twice changed the file"; diff "$W/once" "$F"
fi
dc remove "$F" "$LIB" || fail "remove: exit $?"
if cmp -s "$F" "$ORIG"; then
	ok "add + remove: byte for byte the original"
else
	fail "add + remove changed the file"; diff "$ORIG" "$F"
fi

# --- a last line without its newline (as in Debian's /etc/dat.conf) ------
printf 'ofa-v2-ib0 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib0 0" ""\nlast "x" ""' >"$ORIG"
cp "$ORIG" "$F"
dc add "$F" "$LIB" || fail "add after a line without newline: exit $?"
if [ "$(sed -n 2p "$F")" = 'last "x" ""' ] && [ "$(sed -n 3p "$F")" = "$BEGIN" ] &&
	[ "$(tail -n 1 "$F")" = "$END" ]; then
	ok "add after a last line without its newline: the block starts on a line of its own"
else
	fail "add after a last line without its newline"; cat "$F"
fi
cp "$F" "$W/once"
if ! dc add "$F" "$LIB" || ! cmp -s "$F" "$W/once"; then
	fail "add twice (no final newline) changed the file"
fi
dc remove "$F" "$LIB" || fail "remove: exit $?"
if cmp -s "$F" "$ORIG"; then
	ok "add + remove without a final newline: byte for byte the original"
else
	fail "add + remove without a final newline"; od -c "$F" | tail -n 3
fi

# --- remove without our block: nothing changes, no error -------------------
cp "$ORIG" "$F"
touch -d '2001-01-01' "$F"
if dc remove "$F" "$LIB" && cmp -s "$F" "$ORIG" &&
	[ -z "$(find "$F" -newermt '2001-01-02')" ]; then
	ok "remove without our block: success, file untouched"
else
	fail "remove without our block"
fi
if dc remove "$W/none/dat.conf" "$LIB" && [ ! -e "$W/none" ]; then
	ok "remove on a missing file: success, nothing created"
else
	fail "remove on a missing file"
fi

# --- an older block in the middle: replaced in place, user ia_params kept -
{
	echo 'first line'
	echo "$BEGIN"
	echo '# an old comment'
	echo 'ofa-v2-sdp-iwarp u2.0 nonthreadsafe default /old/libdaplsdp.so dapl.2.0 "ens3 0" ""'
	echo 'ofa-v2-sdp-roce u2.0 nonthreadsafe default /old/libdaplsdp.so dapl.2.0 "192.0.2.7 0" ""'
	echo "$END"
	echo 'last line'
} >"$F"
dc add "$F" "$LIB" || fail "add over an old block: exit $?"
if [ "$(head -n 1 "$F")" = 'first line' ] && [ "$(tail -n 1 "$F")" = 'last line' ] &&
	[ "$(count "$BEGIN" "$F")" -eq 1 ] && ! grep -q '/old/\|an old comment' "$F" &&
	[ "$(count "ofa-v2-sdp-iwarp u2.0 nonthreadsafe default $LIB dapl.2.0 \"ens3 0\" \"\"" "$F")" -eq 1 ] &&
	[ "$(count "ofa-v2-sdp-roce u2.0 nonthreadsafe default $LIB dapl.2.0 \"192.0.2.7 0\" \"\"" "$F")" -eq 1 ]; then
	ok "an old block is replaced where it was; its ia_params are kept"
else
	fail "replacing an old block"; cat "$F"
fi
dc remove "$F" "$LIB" || fail "remove: exit $?"
if [ "$(printf 'first line\nlast line\n')" = "$(cat "$F")" ]; then
	ok "remove from the middle leaves the lines around it"
else
	fail "remove from the middle"; cat "$F"
fi

# --- a begin marker without its end: an error, the file untouched ---------
printf '%s\n' 'x' "$BEGIN" 'y' >"$F"
cp "$F" "$W/broken"
if dc add "$F" "$LIB" 2>/dev/null; then
	fail "add accepted a block without its end marker"
elif cmp -s "$F" "$W/broken"; then
	ok "add refuses a block without its end marker, file untouched"
else
	fail "add changed a broken file"
fi
if dc remove "$F" "$LIB" 2>/dev/null; then
	fail "remove accepted a block without its end marker"
elif cmp -s "$F" "$W/broken"; then
	ok "remove refuses a block without its end marker, file untouched"
else
	fail "remove changed a broken file"
fi

# --- usage ---------------------------------------------------------------
if dc frobnicate "$F" "$LIB" 2>/dev/null || dc add "$F" 2>/dev/null; then
	fail "bad arguments accepted"
else
	ok "bad arguments refused"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
exit 0
