#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# epoll_wake.sh on the shm transport (doc/shm.md): a sleeping server is
# woken by its member's own fd (the Unix socket that carries shm's wake
# bytes), not through the progress thread, in epoll (level- and
# edge-triggered), poll() and a blocking recv().  With the suite of the
# software transports only: an RDMA run (in the guest) is about its own.
case ${TEST_TRANSPORT:-tcp-fallback} in
tcp-fallback | shm) ;;
*)
	echo "epoll_wake_shm: SKIP: the suite runs on $TEST_TRANSPORT" >&2
	exit 77
	;;
esac
TEST_TRANSPORT=shm exec "$(dirname "$0")/epoll_wake.sh"
