#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# The manual pages: each lints clean (groff -ww, and mandoc -Tlint when it
# is installed: warnings fail), each is installed, and each says what the
# code does, so that neither can change without the other:
#
#   - every option a tool accepts is in its page, and every option its
#     page's SYNOPSIS and OPTIONS name is one the tool accepts;
#   - every function of include/sdp.h (and of the engine's export list) is
#     in sdp(3): in NAME, in SYNOPSIS and in the text; so are its macros
#     and the fields of its structures;
#   - every tunable of common/tunables.def is in libsdp(7) with its name,
#     range and default, and the page lists no other;
#   - the environment variables the tools and the preload read are in
#     their pages;
#   - every tool's --help exits 0, as the pages say (sdp_run's prints its
#     synopsis alone).
#
# The checks are the table below; the sources are read as text, the tools
# run from the build tree.  Needs groff (Debian: groff-base); skips
# without it.
set -u

src=${top_srcdir:?top_srcdir is not set}
bld=${top_builddir:?top_builddir is not set}

if ! command -v groff >/dev/null 2>&1; then
	echo "SKIP: groff is not installed (Debian package groff-base)"
	exit 77
fi

failures=0
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# page  source  what to check
CHECKS='
tools/sdpcat.1     tools/sdpcat.c           getopt
tools/sdp_tool.1   tools/sdp_tool.c         getopt
tools/sdpstat.1    tools/sdpstat.c          getopt
bench/sdp_bench.1  bench/sdp_bench.c        getopt
tools/sdp_run.1    tools/sdp_run.in         shellopts
tools/sdp_run.1    tools/sdp_run.in         shellenv
tools/sdpcat.1     tools/sdpcat.c           getenv
bench/sdp_bench.1  bench/sdp_bench.c        getenv
tools/sdpstat.1    common/stats_shm.h       envdefine
doc/libsdp.7       common/stats_shm.h       envdefine
doc/libsdp.7       ops/switch.c             getenv
doc/libsdp.7       common/tunables.def      tunables
doc/sdp.3          include/sdp.h            functions
doc/sdp.3          sdp/libsdp-engine.map    exports
doc/sdp.3          include/sdp.h            macros
doc/sdp.3          include/sdp.h            fields
'

# Tools whose --help must succeed (paths in the build tree).
HELP_TOOLS='tools/sdpcat tools/sdp_tool tools/sdpstat tools/sdp_run bench/sdp_bench'

# --- reading pages ----------------------------------------------------------

# A page's source as plain words: font changes and zero-width escapes
# removed, \- as -.
page_text() {
	sed -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\-/-/g' -e 's/\\[&%]//g' \
		-e 's/\\(dq/"/g' "$1"
}

# The lines of the sections named (SYNOPSIS, OPTIONS, ...) of a page.
page_sections() { # PAGE SECTION...
	local page=$1
	shift
	page_text "$page" | awk -v want=" $* " '
		/^\.SH / { sec = $2; for (i = 3; i <= NF; i++) sec = sec " " $i; gsub(/"/, "", sec); next }
		index(want, " " sec " ") { print }'
}

# Does WORD stand in TEXT as a word of its own (not inside a longer
# option or identifier)?
has_word() { # WORD < TEXT
	grep -qE -- "(^|[^A-Za-z0-9_-])$1([^A-Za-z0-9_-]|\$)"
}

# --- reading sources ----------------------------------------------------------

# Options of a getopt_long program: the long table and the short string.
getopt_options() {
	sed -n 's/^[[:space:]]*{ "\([a-z0-9-]*\)", .*_argument.*/--\1/p' "$1"
	sed -n 's/.*getopt_long(argc, argv, "\([^"]*\)".*/\1/p' "$1" |
		tr -d ':' | fold -w1 | sed 's/^/-/'
}

# Options of a shell script's `case $1 in` patterns ("-h | --help)"),
# wildcard patterns left out.
shell_options() {
	sed -n 's/^[[:space:]]*\(-[^)]*\))$/\1/p' "$1" | tr '|' '\n' |
		sed 's/[[:space:]]//g' | grep -v '\*'
}

# Upper-case variables a shell script reads or exports (comments left out).
shell_env() {
	grep -v '^[[:space:]]*#' "$1" | grep -oE '\$\{?[A-Z][A-Z0-9_]+|(^|[[:space:]])[A-Z][A-Z0-9_]+=' |
		tr -d '${= \t' | sort -u
}

c_getenv() {
	grep -oE '(secure_|tun_)?getenv\("[A-Z][A-Z0-9_]*"\)' "$1" | sed 's/.*"\(.*\)".*/\1/' | sort -u
}

c_envdefine() {
	sed -n 's/^#define [A-Z0-9_]*_ENV "\([A-Z0-9_]*\)".*/\1/p' "$1"
}

# Function declarations of a header (outside comments: lines that start
# with a type).
header_functions() {
	grep -E '^(int|ssize_t|void|unsigned|const|struct)[^;]*\(' "$1" |
		grep -oE '\bsdp_[a-z0-9_]+\(' | tr -d '(' | sort -u
}

map_exports() {
	sed -n 's/^[[:space:]]*\(sdp_[a-z0-9_]*\);$/\1/p' "$1"
}

header_macros() {
	sed -n 's/^#define \([A-Z][A-Z0-9_]*\) .*/\1/p' "$1"
}

# Members of the header's structures.
header_fields() {
	awk '/^struct [a-z_]+ \{/ { in_s = 1; next } in_s && /^\};/ { in_s = 0 }
		in_s' "$1" | sed -n 's/^[[:space:]]*[a-z].*[ *]\([a-z_][a-z0-9_]*\);.*/\1/p'
}

# --- checks -------------------------------------------------------------------

# Every word must be in the page.
need_words() { # PAGE WHAT WORD...
	local page=$1 what=$2 w text
	shift 2
	text=$(page_text "$src/$page")
	for w in "$@"; do
		has_word "$w" <<<"$text" || fail "$page does not mention $what $w"
	done
}

check_options() { # PAGE SOURCE OPTION...
	local page=$1 source=$2 o listed
	shift 2
	need_words "$page" "the option" "$@"
	# The other way: what SYNOPSIS and OPTIONS name, the tool accepts.
	listed=$(page_sections "$src/$page" SYNOPSIS OPTIONS |
		grep -oE -- '(^|[^A-Za-z0-9_-])--[a-z][a-z0-9-]*' | sed 's/^[^-]//' | sort -u)
	for o in $listed; do
		printf '%s\n' "$@" | grep -qxF -- "$o" ||
			fail "$page names $o, which $source does not accept"
	done
}

check_tunables() { # PAGE DEF
	local page=$1 def=$2 id type dflt min max want entries n=0
	entries=$(page_text "$src/$page" | sed -n 's/^\.BR SDP_\([A-Z0-9_]*\) " (\(.*\))"$/\1 \2/p')
	while IFS='|' read -r id type dflt min max; do
		n=$((n + 1))
		[ -n "$dflt" ] || dflt=empty
		if [ "$type" = INT ]; then
			want="${id^^} $id, $min to $max, default $dflt"
		else
			want="${id^^} $id, string, default $dflt"
		fi
		grep -qxF -- "$want" <<<"$entries" ||
			fail "$page: no entry '.BR SDP_${want%% *} \" (${want#* })\"' for tunable $id"
	done < <(sed -n 's/^TUNABLE(\([a-z0-9_]*\), \(INT\|STR\), "\([^"]*\)", \([0-9]*\), \([0-9]*\),.*/\1|\2|\3|\4|\5/p' \
		"$src/$def")
	[ "$n" -gt 0 ] || fail "no tunables found in $def"
	local listed
	listed=$(sed 's/ .*//' <<<"$entries" | sort)
	for id in $listed; do
		grep -qE "^TUNABLE\(${id,,}," "$src/$def" ||
			fail "$page lists SDP_$id, which is not a tunable of $def"
	done
}

check_functions() { # PAGE NAME...
	local page=$1 f name synopsis body
	shift
	name=$(page_sections "$src/$page" NAME)
	synopsis=$(page_sections "$src/$page" SYNOPSIS)
	body=$(page_sections "$src/$page" DESCRIPTION "RETURN VALUE" ERRORS)
	for f in "$@"; do
		has_word "$f" <<<"$name" || fail "$page: $f is not in NAME"
		grep -qE "[ *]$f\(" <<<"$synopsis" || fail "$page: $f is not declared in SYNOPSIS"
		has_word "$f" <<<"$body" || fail "$page: $f is not described"
	done
}

# 1. Lint.
lint() { # PAGE
	local page=$1 out
	out=$(groff -ww -man -Tutf8 -z "$page" 2>&1) || fail "groff failed on $page"
	[ -z "$out" ] || fail "groff warns on $page: $out"
	if command -v mandoc >/dev/null 2>&1; then
		out=$(mandoc -Tlint -Wwarning "$page" 2>&1)
		[ -z "$out" ] || fail "mandoc warns on $page: $out"
	fi
}

# 2. The pages: installed, and nothing in the tree left out.
pages=${MAN_PAGES:?MAN_PAGES is not set (the pages make install installs)}
for p in $pages; do
	if [ -f "$src/$p" ]; then
		lint "$src/$p"
	else
		fail "$p is to be installed but is not in the source tree"
	fi
done
while IFS= read -r f; do
	rel=${f#"$src"/}
	grep -qE "(^|[[:space:]])$rel([[:space:]]|\$)" <<<"$pages" ||
		fail "$rel is a manual page that make install does not install (Makefile.am: dist_man*_MANS)"
done < <(find "$src" -mindepth 1 \( -name .git -o -name 'build*' -o -name autom4te.cache \
	-o -name 'libsdp-*' -o -path "$src/debian" \) -prune -o \
	-type f -name '*.[1-9]' -exec grep -l '^\.TH ' {} + 2>/dev/null)

# 3. The table.
while read -r page source what; do
	[ -n "$page" ] || continue
	words=()
	for f in "$src/$page" "$src/$source"; do
		[ -f "$f" ] || { fail "$f is missing"; continue 2; }
	done
	case $what in
	getopt) mapfile -t words < <(getopt_options "$src/$source" | sort -u)
		check_options "$page" "$source" "${words[@]}" ;;
	shellopts) mapfile -t words < <(shell_options "$src/$source" | sort -u)
		check_options "$page" "$source" "${words[@]}" ;;
	shellenv) mapfile -t words < <(shell_env "$src/$source")
		need_words "$page" "the variable" "${words[@]}" ;;
	getenv) mapfile -t words < <(c_getenv "$src/$source")
		need_words "$page" "the variable" "${words[@]}" ;;
	envdefine) mapfile -t words < <(c_envdefine "$src/$source")
		need_words "$page" "the variable" "${words[@]}" ;;
	tunables) check_tunables "$page" "$source" ;;
	functions) mapfile -t words < <(header_functions "$src/$source")
		check_functions "$page" "${words[@]}" ;;
	exports) mapfile -t words < <(map_exports "$src/$source")
		check_functions "$page" "${words[@]}" ;;
	macros) mapfile -t words < <(header_macros "$src/$source" | grep -vx 'LIBSDP_SDP_H')
		need_words "$page" "the macro" "${words[@]}" ;;
	fields) mapfile -t words < <(header_fields "$src/$source")
		need_words "$page" "the field" "${words[@]}" ;;
	*) fail "unknown check '$what'" ;;
	esac
	[ "${#words[@]}" -gt 0 ] || [ "$what" = tunables ] ||
		fail "$source: nothing found to check for '$what'"
done <<<"$CHECKS"

# 4. --help succeeds, on standard output.
for t in $HELP_TOOLS; do
	out=$("$bld/$t" --help 2>/dev/null)
	rc=$?
	[ "$rc" -eq 0 ] || fail "$t --help exits $rc, not 0"
	[ -n "$out" ] || fail "$t --help prints nothing on standard output"
done
# sdp_run's help is its synopsis (as in its page): nothing but sdp_run lines.
out=$("$bld/tools/sdp_run" --help 2>&1)
grep -qv '^sdp_run ' <<<"$out" && fail "sdp_run --help prints more than its synopsis: $out"

if [ "$failures" -gt 0 ]; then
	echo "$failures failure(s)"
	exit 1
fi
echo "PASS: $(wc -w <<<"$pages") pages lint clean and match the code"
exit 0
