/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * transport_caps [NAME]: prints the capabilities of transport NAME (else
 * TEST_TRANSPORT, else tcp-fallback) on one line, as words: rdma_read,
 * rdma_write, iwarp_rules, software, host_local, passive_done (the
 * OTI_CAP_* flags, transports/oti.h).  For tests that check what only some
 * transports can do (lib.sh transport_can): zero copy needs RDMA, which
 * shm does not have (doc/shm.md).  Exit 1 when the transport is not built
 * in or does not come up here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "oti.h"
#include "sdp.h"

int main(int argc, char **argv)
{
	static const struct {
		unsigned flag;
		const char *word;
	} names[] = {
		{ OTI_CAP_RDMA_READ, "rdma_read" },
		{ OTI_CAP_RDMA_WRITE, "rdma_write" },
		{ OTI_CAP_IWARP_RULES, "iwarp_rules" },
		{ OTI_CAP_SOFTWARE, "software" },
		{ OTI_CAP_HOST_LOCAL, "host_local" },
		{ OTI_CAP_PASSIVE_DONE, "passive_done" },
	};
	const char *name = argc > 1 ? argv[1] : getenv("TEST_TRANSPORT");
	const struct oti_ops *t;
	struct oti_caps caps;
	const char *sep = "";

	if (!name || !*name)
		name = "tcp-fallback";
	if (sdp_init() <= 0 || oti_init() <= 0 || !(t = oti_find(name))) {
		fprintf(stderr, "transport_caps: transport %s is not built in or not up here\n",
			name);
		return 1;
	}
	t->query_caps(&caps);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (caps.flags & names[i].flag) {
			printf("%s%s", sep, names[i].word);
			sep = " ";
		}
	}
	printf("\n");
	return 0;
}
