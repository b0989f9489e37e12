/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * provider_load [LIBRARY]: libdaplsdp.so loads the way libdat2 loads it
 * (dlopen, every symbol bound at once), exports what libdat2 looks up
 * (dat_provider_init, dat_provider_fini, the dapl_extensions marker) and
 * nothing of libsdp's own code it carries (the verbs core, the
 * system-call layer, the conversion frames).  No RDMA device is needed:
 * it runs in make check, where a provider that cannot load would
 * otherwise only show in the RDMA testbed, as DAT_PROVIDER_NOT_FOUND.
 * LIBRARY defaults to .libs/libdaplsdp.so (make check runs in the build
 * directory).
 *
 * libdat2 is loaded first and stays, as in a DAPL program, where libdat2
 * is what dlopens the provider.  Loaded only as the provider's dependency,
 * it would be unloaded with it, and LeakSanitizer would report the 512
 * bytes its constructor allocates and never frees as a leak of ours.
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	static const char *const exported[] = { "dat_provider_init", "dat_provider_fini",
						"dapl_extensions" };
	static const char *const hidden[] = { "sys", "sys_resolve", "libsdp_internal", "vc_frame",
					      "vc_rtr_tick", "conv_send", "dsp_ia_open" };
	const char *path = argc > 1 ? argv[1] : ".libs/libdaplsdp.so";
	void *h;
	int bad = 0;

	if (!dlopen("libdat2.so.2", RTLD_NOW | RTLD_GLOBAL)) {
		printf("FAIL: dlopen libdat2.so.2: %s\n", dlerror());
		return 1;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("FAIL: dlopen: %s\n", dlerror());
		return 1;
	}
	for (size_t i = 0; i < sizeof(exported) / sizeof(exported[0]); i++)
		if (!dlsym(h, exported[i])) {
			printf("FAIL: %s is not exported\n", exported[i]);
			bad = 1;
		}
	for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
		if (dlsym(h, hidden[i])) {
			printf("FAIL: %s is exported (dat/libdaplsdp.map)\n", hidden[i]);
			bad = 1;
		}
	dlclose(h);
	if (!bad)
		printf("ok: %s loads and exports the provider's entry points only\n", path);
	return bad;
}
