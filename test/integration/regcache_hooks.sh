#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The preload's memory-release wrappers (preload/memhooks.c) drop cached
# registrations: free() of a mapped and of a heap block, realloc(),
# reallocarray(), munmap(), mremap(), mmap(MAP_FIXED), madvise() and
# posix_madvise() that zap pages, while other frees and harmless advice
# leave them (regcache_hooks.c, over a fake transport, with the wrappers
# and the engine in a test library of their own).  And libsdp.so itself
# defines every wrapper, and a program it is preloaded into calls them.
# No network: one process, a second or two.
. "$(dirname "$0")/lib.sh"

HOOKS=$(prog regcache_hooks) || fail "regcache_hooks not built"
LIBSDP=$(preload_lib) || fail "no libsdp.so in $top_builddir/.libs"
MOD=$top_builddir/test/integration/.libs/libregcache_hooks.so
[ -f "$MOD" ] || fail "no $MOD"

# The same order of preloads as libsdp.so gets in this build (lib.sh's
# preload_value: a sanitizer runtime before or after it).
libsdp_preload=$(preload_value | tr ' ' ':')
mod_preload=${libsdp_preload//$LIBSDP/$MOD}
# Under AddressSanitizer its free() comes first and never reaches the
# wrappers: caching must then stay off, which regcache_hooks reports as a
# skip; everywhere else the wrappers must be in charge.
expect=--expect-tracking
case $libsdp_preload in *libasan*) expect= ;; esac

log "wrappers: LD_PRELOAD=$mod_preload"
run_with_timeout 60 env LD_PRELOAD="$mod_preload" "$HOOKS" $expect >"$TMP/hooks.out" 2>&1
rc=$?
sed 's/^/  /' "$TMP/hooks.out"
case $rc in
0) ;;
77) [ -z "$expect" ] || fail "the wrappers were not in charge"
    log "caching stays off under AddressSanitizer, as it must" ;;
*) fail "regcache_hooks exit $(status_text "$rc")" ;;
esac

log "libsdp.so: LD_PRELOAD=$libsdp_preload"
run_with_timeout 60 env LD_PRELOAD="$libsdp_preload" "$HOOKS" --exports "$LIBSDP" \
	>"$TMP/exports.out" 2>&1
rc=$?
sed 's/^/  /' "$TMP/exports.out"
[ "$rc" -eq 0 ] || fail "regcache_hooks --exports exit $(status_text "$rc")"
log "PASS"
exit 0
