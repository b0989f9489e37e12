#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Half-close (conn_storm --half-close), checked step by step with fixed
# expectations, first over the kernel's TCP (which must meet them: that
# validates the test) and then over SDP:
#   - the client shuts down writing and still receives the server's data;
#     the server reads EOF (recv returns 0, again and again) and then sends;
#   - poll masks: POLLIN|POLLRDHUP after the peer's FIN, POLLHUP once both
#     halves are closed;
#   - a send after SHUT_WR gives -EPIPE; MSG_NOSIGNAL suppresses SIGPIPE,
#     without it SIGPIPE is raised once, in the sending thread;
#   - the reverse order (server first), SHUT_RD and SHUT_RDWR.
. "$(dirname "$0")/lib.sh"

STORM=$(prog conn_storm)
run_with_timeout 120 "$STORM" --half-close
rc=$?
[ "$rc" -eq 0 ] || fail "conn_storm --half-close exit $(status_text "$rc")"
log "PASS"
exit 0
