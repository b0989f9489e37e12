#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# In a secure-execution process (set-user-ID, set-group-ID, file
# capabilities: AT_SECURE) libsdp takes nothing from the environment --
# no SDP_* tunable, no LIBSDP_CONFIG_FILE -- and says once, on stderr,
# which variables it ignored, without their values; SDP_LOG_FILE creates
# no file.  The same program, not set-group-ID, takes them all.  The
# secure process is a set-group-ID copy of secure_env (group nogroup);
# where none can be made (not root, a nosuid file system) the test skips.
. "$(dirname "$0")/lib.sh"

SE=$(prog secure_env)
cp "$SE" "$TMP/secure_env" || fail "cannot copy $SE"
chmod 0755 "$TMP"
VARS=(SDP_RECV_BUFS=64 SDP_LOG_LEVEL=1 SDP_LOG_FILE="$TMP/log/evil.log"
	LIBSDP_CONFIG_FILE=/etc/shadow)
mkdir "$TMP/log" && chmod 0777 "$TMP/log"

# Trusted: everything is taken, the log file is made.
run_with_timeout 30 env -u SDP_TRANSPORTS "${VARS[@]}" "$TMP/secure_env" >"$TMP/plain.out" 2>"$TMP/plain.err" ||
	fail "secure_env: $(cat "$TMP/plain.err")"
cat >"$TMP/want" <<EOT
secure 0
recv_bufs 64
log_level 1
log_file "$TMP/log/evil.log"
config /etc/shadow
EOT
diff -u "$TMP/want" "$TMP/plain.out" || fail "not set-group-ID: the environment was not taken"
[ -e "$TMP/log/evil.log" ] || fail "not set-group-ID: SDP_LOG_FILE was not opened"
rm -f "$TMP/log/evil.log"

if [ "$(id -u)" -ne 0 ] || ! getent group nogroup >/dev/null; then
	skip "a set-group-ID copy needs root (and group nogroup): the unit tests cover the rest"
fi
chgrp nogroup "$TMP/secure_env" && chmod g+s "$TMP/secure_env" ||
	skip "cannot make $TMP/secure_env set-group-ID"
run_with_timeout 30 env -u SDP_TRANSPORTS "${VARS[@]}" "$TMP/secure_env" >"$TMP/secure.out" 2>"$TMP/secure.err" ||
	fail "set-group-ID secure_env: $(cat "$TMP/secure.err")"
if grep -qx 'secure 0' "$TMP/secure.out"; then
	skip "the set-group-ID copy does not run in secure execution here (nosuid?)"
fi
cat >"$TMP/want" <<EOT
secure 1
recv_bufs 16
log_level 9
log_file ""
config (none)
EOT
diff -u "$TMP/want" "$TMP/secure.out" || fail "secure execution: the environment was taken"
[ ! -e "$TMP/log/evil.log" ] || fail "secure execution: SDP_LOG_FILE made $TMP/log/evil.log"
grep -q 'ignored: SDP_LOG_LEVEL SDP_LOG_FILE SDP_RECV_BUFS LIBSDP_CONFIG_FILE$' "$TMP/secure.err" ||
	fail "secure execution: no word of the variables ignored on stderr: $(cat "$TMP/secure.err")"
[ "$(grep -c 'ignored' "$TMP/secure.err")" -eq 1 ] || fail "said more than once: $(cat "$TMP/secure.err")"
if grep -q -e shadow -e evil -e '=64' "$TMP/secure.err"; then
	fail "secure execution: a value of the environment was shown: $(cat "$TMP/secure.err")"
fi
log "PASS"
exit 0
