/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The sdp.conf parser (conf/parser.c) fed a whole policy file, through
 * conf_load_file() as the preload reads it (the input goes into a memfd,
 * so NUL bytes, a missing last newline and CRLF reach the parser as they
 * would from disk).  Whatever the text: *out is always a policy, an error
 * comes with one printable line that names the file, success with an
 * empty one; and a loaded policy answers every query (conf_match() over
 * IPv4, IPv6 and mapped addresses, both roles, a few program names)
 * without reading out of bounds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "fuzz.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	memfd = memfd_create("fuzz_conf", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("memfd_create");
		abort();
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

static void query(const struct conf_policy *p)
{
	static const char *const programs[] = { "", "sshd", "iperf3", "a.out" };
	struct sockaddr_in v4 = { .sin_family = AF_INET, .sin_port = htons(5001) };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6, .sin6_port = htons(22) };
	struct sockaddr_in6 mapped = { .sin6_family = AF_INET6, .sin6_port = htons(80) };
	const char *log_path = NULL;

	inet_pton(AF_INET, "192.168.1.7", &v4.sin_addr);
	inet_pton(AF_INET6, "fe80::1:2", &v6.sin6_addr);
	inet_pton(AF_INET6, "::ffff:10.0.0.1", &mapped.sin6_addr);
	for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++) {
		for (int r = CONF_ROLE_SERVER; r <= CONF_ROLE_CLIENT; r++) {
			enum conf_role role = (enum conf_role)r;
			enum conf_use u[3];

			u[0] = conf_match(p, role, programs[i], (struct sockaddr *)&v4, sizeof(v4));
			u[1] = conf_match(p, role, programs[i], (struct sockaddr *)&v6, sizeof(v6));
			u[2] = conf_match(p, role, programs[i], (struct sockaddr *)&mapped,
					  sizeof(mapped));
			/* A program the policy leaves alone gets TCP everywhere. */
			if (!conf_may_use_sdp(p, role, programs[i]))
				for (int k = 0; k < 3; k++)
					FUZZ_CHECK(u[k] == CONF_USE_TCP);
		}
	}
	int lvl = conf_log_min_level(p);

	FUZZ_CHECK(lvl >= 0 && lvl <= 9);
	if (conf_log_destination(p, &log_path) == CONF_LOG_DEST_FILE)
		FUZZ_CHECK(log_path && log_path[0] == '/');
	FUZZ_CHECK(conf_transports(p) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf_policy *p = NULL;
	char err[1024];

	/* Larger than the parser reads: only the -EFBIG check would see it. */
	if (size > 64 * 1024)
		return 0;
	if (ftruncate(memfd, 0) || (size && pwrite(memfd, data, size, 0) != (ssize_t)size)) {
		perror("memfd");
		abort();
	}
	memset(err, 'x', sizeof(err));
	int r = conf_load_file(path, &p, err, sizeof(err));

	FUZZ_CHECK(p != NULL);
	FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
	if (r == 0) {
		FUZZ_CHECK(err[0] == '\0');
	} else {
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(!strncmp(err, path, strlen(path)));
		for (const char *c = err; *c; c++)
			FUZZ_CHECK(*c >= 0x20 && *c < 0x7f);
	}
	query(p);
	conf_free(p);
	return 0;
}
