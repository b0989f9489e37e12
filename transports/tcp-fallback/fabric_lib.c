/* SPDX-License-Identifier: BSD-2-Clause */
#include "fabric_lib.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "log.h"

#define TCPF "tcpf"

struct tcpf_fabric_lib tcpf_fi;

/* Kept open for the life of the process: libfabric cannot be unloaded
 * safely once providers have run. */
static void *fabric_handle;

void tcpf_signals_save(struct tcpf_sigstate *st)
{
	for (int sig = 1; sig < NSIG; sig++) {
		if (sigaction(sig, NULL, &st->act[sig]) < 0)
			memset(&st->act[sig], 0, sizeof(st->act[sig]));
	}
}

int tcpf_signals_restore(const struct tcpf_sigstate *st)
{
	int restored = 0;

	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction now;

		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &now) < 0)
			continue;
		if (now.sa_handler == st->act[sig].sa_handler &&
		    now.sa_flags == st->act[sig].sa_flags)
			continue;
		if (sigaction(sig, &st->act[sig], NULL) == 0)
			restored++;
	}
	return restored;
}

int tcpf_fabric_load(void)
{
	struct tcpf_sigstate saved;
	void *h;

	if (fabric_handle)
		return 0;
	tcpf_signals_save(&saved);
	/* RTLD_LOCAL: its symbols must not interpose on the application's. */
	h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	int restored = tcpf_signals_restore(&saved);

	if (!h) {
		sdp_dbg(TCPF, "libfabric not loadable: %s", dlerror());
		return -ENODEV;
	}
	if (restored)
		sdp_dbg(TCPF, "put back %d signal dispositions changed by loading libfabric",
			restored);
	tcpf_fi.getinfo = (__typeof__(tcpf_fi.getinfo))dlsym(h, "fi_getinfo");
	tcpf_fi.freeinfo = (__typeof__(tcpf_fi.freeinfo))dlsym(h, "fi_freeinfo");
	tcpf_fi.dupinfo = (__typeof__(tcpf_fi.dupinfo))dlsym(h, "fi_dupinfo");
	tcpf_fi.fabric = (__typeof__(tcpf_fi.fabric))dlsym(h, "fi_fabric");
	tcpf_fi.strerror = (__typeof__(tcpf_fi.strerror))dlsym(h, "fi_strerror");
	if (!tcpf_fi.getinfo || !tcpf_fi.freeinfo || !tcpf_fi.dupinfo || !tcpf_fi.fabric ||
	    !tcpf_fi.strerror) {
		sdp_err(TCPF, "libfabric.so.1 lacks an expected entry point");
		dlclose(h);
		memset(&tcpf_fi, 0, sizeof(tcpf_fi));
		return -ENODEV;
	}
	fabric_handle = h;
	return 0;
}
