/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libfabric, loaded on first use instead of linked.
 *
 * Debian's libfabric links the PSM libraries, whose load-time constructors
 * install handlers for SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM
 * (and write backtrace files into the working directory from them).  A
 * library that lives inside someone else's process must not take its
 * signals, so the backend loads libfabric itself, with every signal
 * disposition saved before and put back after, and does the same around
 * provider initialisation.
 *
 * Only these entry points are symbols; the rest of the libfabric API is
 * inline calls through the ops tables of the objects they return.
 */
#ifndef TCPF_FABRIC_LIB_H
#define TCPF_FABRIC_LIB_H

#include <signal.h>

#include <rdma/fabric.h>

struct tcpf_fabric_lib {
	int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
		       const struct fi_info *hints, struct fi_info **info);
	void (*freeinfo)(struct fi_info *info);
	struct fi_info *(*dupinfo)(const struct fi_info *info);
	int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
	const char *(*strerror)(int errnum);
};

extern struct tcpf_fabric_lib tcpf_fi;

/* Every signal's disposition, to put back what a library changed. */
struct tcpf_sigstate {
	struct sigaction act[NSIG];
};
void tcpf_signals_save(struct tcpf_sigstate *st);
/* Restores what differs; returns how many dispositions were put back. */
int tcpf_signals_restore(const struct tcpf_sigstate *st);

/* Load libfabric and fill tcpf_fi; idempotent, not thread-safe (call under
 * the backend's lock).  0, or -ENODEV if libfabric is not installed. */
int tcpf_fabric_load(void);

#endif
