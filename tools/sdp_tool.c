/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sdp_tool: administrative queries about libsdp.
 *
 *   sdp_tool --list-tunables   every tunable with its environment variable,
 *                              current value, default and help
 *   sdp_tool --version
 *   sdp_tool --help
 *
 * Linked against the core library (not the installed engine) because the
 * tunables table is internal.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tunables.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdp_tool --list-tunables | --version | --help\n"
		"\n"
		"  --list-tunables  print every tunable: name, environment variable\n"
		"                   (SDP_<NAME>), current value, default, range, help\n"
		"  --version        print the libsdp version\n"
		"  --help           this text\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "list-tunables", no_argument, NULL, 'l' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, action = 0;

	while ((c = getopt_long(argc, argv, "lVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
		case 'V':
		case 'h':
			if (action && action != c) {
				usage(stderr);
				return 2;
			}
			action = c;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !action) {
		usage(stderr);
		return 2;
	}
	switch (action) {
	case 'l':
		tun_list(stdout);
		break;
	case 'V':
		printf("sdp_tool (libsdp) %s\n", PACKAGE_VERSION);
		break;
	default:
		usage(stdout);
		break;
	}
	/* stdout may be a closed pipe or a full disk: say so in the status. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		perror("sdp_tool: stdout");
		return 1;
	}
	return 0;
}
