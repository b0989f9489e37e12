/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The plain driver for a harness (no libFuzzer, any compiler): runs
 * LLVMFuzzerTestOneInput() once on each file named, and on each file of
 * each directory named, so that `make check` replays every committed
 * corpus entry and crash reproducer.  A crash or a failed FUZZ_CHECK
 * ends the run (the file is named first); an argument that is missing,
 * unreadable or a directory with no input fails it too, so that a
 * corpus moved away cannot make the test pass by running nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Harnesses that need no set-up do not define it. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			uint8_t *n = realloc(buf, cap);

			if (!n) {
				fprintf(stderr, "replay: %s: out of memory\n", path);
				free(buf);
				fclose(f);
				return -1;
			}
			buf = n;
		}
		size_t got = fread(buf + len, 1, cap - len, f);

		len += got;
		if (got == 0)
			break;
	}
	int bad = ferror(f);

	fclose(f);
	if (bad) {
		fprintf(stderr, "replay: %s: read error\n", path);
		free(buf);
		return -1;
	}
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	/* An exact-size copy, so that ASan sees a read past the input. */
	uint8_t *exact = malloc(len ? len : 1);

	if (!exact) {
		free(buf);
		return -1;
	}
	if (len)
		memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int run_dir(const char *dir, unsigned *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int ret = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char path[4096];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		if (run_file(path))
			ret = -1;
		else
			(*count)++;
	}
	closedir(d);
	return ret;
}

int main(int argc, char **argv)
{
	int ret = 0;

	LLVMFuzzerInitialize(&argc, &argv);
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		unsigned count = 0;

		if (stat(argv[i], &st)) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			ret = 1;
		} else if (S_ISDIR(st.st_mode)) {
			if (run_dir(argv[i], &count) || !count) {
				if (!count)
					fprintf(stderr, "replay: %s: no input\n", argv[i]);
				ret = 1;
			}
		} else if (run_file(argv[i])) {
			ret = 1;
		}
	}
	return ret;
}
