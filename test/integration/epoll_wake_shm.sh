#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# epoll_wake.sh on the shm transport (doc/shm.md): a sleeping server is
# woken by its member's own fd (the Unix socket that carries shm's wake
# bytes), not through the progress thread, in epoll (level- and
# edge-triggered), poll() and a blocking recv().
TEST_TRANSPORT=shm exec "$(dirname "$0")/epoll_wake.sh"
