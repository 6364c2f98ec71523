/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The buffering of the loader's output streams (loader.h): a report of
 * 100,000 tasks is ~150 MB of JSON, and one write(2) per 4 KiB was a fifth
 * of the time of such a run written to a file.
 */
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "loader.h"

#define OUT_BUF (1u << 20)

/* Untouched until used: a small report costs only the pages it fills. */
static char file_buf[OUT_BUF], stdout_buf[OUT_BUF];
static FILE *file_owner; /* the file stream file_buf is given to, NULL: none */
static bool stdout_buffered;

void stb_loader_out_buffer(FILE *out)
{
	if (!out || isatty(fileno(out)))
		return;
	if (out == stdout) {
		if (!stdout_buffered && setvbuf(stdout, stdout_buf, _IOFBF, OUT_BUF) == 0)
			stdout_buffered = true;
	} else if (!file_owner && setvbuf(out, file_buf, _IOFBF, OUT_BUF) == 0) {
		file_owner = out;
	}
}

int stb_loader_out_close(FILE *out)
{
	bool owner = out == file_owner;
	int rc = fclose(out);
	if (owner)
		file_owner = NULL;
	return rc;
}
