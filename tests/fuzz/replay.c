/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The regression driver of the fuzz targets in the normal build: runs
 * LLVMFuzzerTestOneInput once on every file of the directories (and on the
 * files) given, in name order. Fails when an argument cannot be read or
 * when there was no input at all, so an empty corpus is not a pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPLAY_MAX_INPUT (4u << 20)

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	size_t n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	buf = malloc(REPLAY_MAX_INPUT);
	if (!buf) {
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, REPLAY_MAX_INPUT, f);
	fclose(f);
	/* A copy of exactly the input's size, as libFuzzer passes it (reads
	 * past the end are then caught by ASan). */
	uint8_t *in = malloc(n ? n : 1);
	if (!in) {
		free(buf);
		return -1;
	}
	memcpy(in, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(in, n);
	free(in);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	unsigned total = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
		return 64;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			total++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		char **names = NULL;
		size_t n = 0, cap = 0;
		if (!d) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				char **nn = realloc(names, cap * sizeof(*nn));
				if (!nn)
					return 1;
				names = nn;
			}
			size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
			names[n] = malloc(len);
			if (!names[n])
				return 1;
			snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
			n++;
		}
		closedir(d);
		qsort(names, n, sizeof(*names), by_name);
		for (size_t k = 0; k < n; k++) {
			if (run_file(names[k]) < 0)
				return 1;
			total++;
			free(names[k]);
		}
		free(names);
	}
	printf("replay: %u inputs\n", total);
	if (total == 0) {
		fprintf(stderr, "replay: no inputs\n");
		return 1;
	}
	return 0;
}
