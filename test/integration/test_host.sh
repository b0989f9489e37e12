# shellcheck shell=bash
# SPDX-License-Identifier: BSD-2-Clause
# Sourced by test/integration/lib.sh and test/soak/long_soak.sh: the
# default of TEST_HOST, the address servers listen on and clients connect
# to, for TEST_TRANSPORT.  Loopback for tcp-fallback and shm; RDMA devices serve no
# loopback, so on any other transport the guest's interface address set by
# test/vm/run-in-vm: that of the interface the transport's device is on
# (VM_ADDR_RXE for ib, VM_ADDR_SIW for iwarp, when the guest has both),
# else VM_ADDR.  Empty when none applies.
if [ -z "${TEST_HOST:-}" ]; then
	case ${TEST_TRANSPORT:-tcp-fallback} in
	tcp-fallback | shm) TEST_HOST=127.0.0.1 ;;
	ib) TEST_HOST=${VM_ADDR_RXE:-${VM_ADDR:-}} ;;
	iwarp) TEST_HOST=${VM_ADDR_SIW:-${VM_ADDR:-}} ;;
	*) TEST_HOST=${VM_ADDR:-} ;;
	esac
fi
