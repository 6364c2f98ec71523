/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The regression driver of the fuzz targets in the normal build: runs
 * LLVMFuzzerTestOneInput once on every file of the directories given. Fails
 * when an argument cannot be read or when there was no input at all, so an
 * empty corpus is not a pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define REPLAY_MAX_INPUT (4u << 20)

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(REPLAY_MAX_INPUT);
	size_t n = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
	fclose(f);
	if (!buf)
		return -1;
	/* Exactly the input's size, as libFuzzer passes it (ASan sees overreads). */
	uint8_t *in = malloc(n ? n : 1);
	if (in) {
		memcpy(in, buf, n);
		LLVMFuzzerTestOneInput(in, n);
	}
	free(in);
	free(buf);
	return in ? 0 : -1;
}

int main(int argc, char **argv)
{
	unsigned total = 0;
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			if (run_file(argv[i]) < 0)
				return 1;
			total++;
			continue;
		}
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			if (run_file(path) < 0) {
				closedir(d);
				return 1;
			}
			total++;
		}
		closedir(d);
	}
	if (total == 0) {
		fprintf(stderr, "replay: no input\n");
		return 1;
	}
	printf("replay: %u inputs\n", total);
	return 0;
}
