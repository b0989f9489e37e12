#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The system-call layer holds (common/sys.h): no object of libsdp's
# libraries (the engine core and the switch) calls a libc function that
# the preload interposes (socket, close, read, poll, epoll_*, open...)
# directly, where in libsdp.so the call would land in the preload's own
# wrappers.  It reads the objects' undefined symbols (nm -u); the preload's
# wrappers themselves (preload/) are the boundary and are not read.
#
# The check first proves it can fail: an object made here that calls
# close() directly must be caught.
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)/build}"

# What the preload exports (preload/libsdp.map), the fortified forms the
# compiler may call instead (_FORTIFY_SOURCE), and no memory function
# (see sys.h: the preload's free/munmap hooks are harmless for libsdp's
# own memory).
FORBIDDEN="socket socketpair bind listen accept accept4 connect getsockname getpeername
getsockopt setsockopt shutdown close close_range closefrom dup dup2 dup3 fcntl fcntl64
ioctl epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait eventfd pipe pipe2 open
open64 openat openat64 read readv write writev send sendto sendmsg sendmmsg recv recvfrom
recvmsg recvmmsg sendfile sendfile64 splice poll ppoll select pselect __read_chk __recv_chk
__recvfrom_chk __poll_chk __ppoll_chk __open_2 __open64_2 __openat_2 __openat64_2"

command -v nm >/dev/null 2>&1 || { echo "lint_syscalls: SKIP: no nm"; exit 77; }

# offenders OBJECT...: "object: symbol symbol" per object that calls one.
offenders() {
	local o hits s
	for o in "$@"; do
		hits=
		for s in $(nm -u "$o" | awk '{ sub(/@.*/, "", $2); print $2 }'); do
			case " $(echo $FORBIDDEN) " in *" $s "*) hits="$hits $s" ;; esac
		done
		[ -z "$hits" ] || echo "$o:$hits"
	done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lint_syscalls.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '#include <unistd.h>\nint f(int fd) { return close(fd); }\n' >"$tmp/bad.c"
if ! ${CC:-cc} -c -o "$tmp/bad.o" "$tmp/bad.c" 2>/dev/null; then
	echo "lint_syscalls: SKIP: cannot compile the self-check"
	exit 77
fi
if [ -z "$(offenders "$tmp/bad.o")" ]; then
	echo "lint_syscalls: FAIL: the check does not see a direct close() (nm output changed?)"
	exit 1
fi

mapfile -t objs < <(find "$top_builddir" -path '*/.libs/*' \
	\( -name 'libsdp_core_la-*.o' -o -name 'libsdp_la-*.o' \) ! -path '*/preload/*' | sort)
if [ "${#objs[@]}" -lt 20 ]; then
	echo "lint_syscalls: FAIL: only ${#objs[@]} library objects under $top_builddir"
	exit 1
fi
bad=$(offenders "${objs[@]}")
if [ -n "$bad" ]; then
	echo "lint_syscalls: FAIL: these objects call libc past the system-call layer (common/sys.h):"
	echo "$bad" | sed 's|^'"$top_builddir"'/|  |'
	exit 1
fi
echo "lint_syscalls: ok: ${#objs[@]} objects call libc only through the system-call layer"
exit 0
