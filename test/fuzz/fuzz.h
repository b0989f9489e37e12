/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What every harness of test/fuzz/ shares.  A harness defines
 * LLVMFuzzerTestOneInput() (and may define LLVMFuzzerInitialize()); it is
 * linked either with libFuzzer (configure --enable-fuzz, `make fuzz`) or
 * with replay.c, the plain driver `make check` runs over the committed
 * corpus.
 */
#ifndef LIBSDP_TEST_FUZZ_H
#define LIBSDP_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * A property of the code under test that an input broke: say which and
 * abort, which both libFuzzer and the replay driver report as a crash
 * (sanitizers find the memory errors; this finds the wrong answers).
 */
#define FUZZ_CHECK(cond)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, \
				__LINE__, #cond);                               \
			abort();                                                \
		}                                                               \
	} while (0)

#endif
