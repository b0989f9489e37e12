#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# header_check_cxx.sh: the installed DAT header (dat/dat_iw_extensions.h)
# compiles as C++ too: header_check.c, with its static assertions, through
# `g++ -fsyntax-only -x c++` (or $CXX).  Skipped without a C++ compiler,
# which the build does not need.
#
# Not -Wextra: its -Wignored-qualifiers flags the "(const DAT_PVOID)" cast
# in dat_iw_socket_connect(), the 2007 header's argument type, which the
# header keeps.
set -u

SRC=${top_srcdir:-$(dirname "$0")/../..}
CXX=${CXX:-g++}
if ! command -v "${CXX%% *}" >/dev/null 2>&1; then
	echo "header_check_cxx.sh: no C++ compiler ($CXX); skipped"
	exit 77
fi
set -x
# shellcheck disable=SC2086 # $CXX may carry options
$CXX -fsyntax-only -Wall -Werror -x c++ -I"$SRC/dat" "$SRC/test/dat/header_check.c"
