/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loader's output streams (loader.h): the -o file, opened so that a run
 * that writes nothing leaves what was there as it was, and buffered: a report
 * of 100,000 tasks is ~150 MB of JSON, and one write(2) per 4 KiB was a
 * fifth of the time of such a run written to a file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
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

/* An existing regular file: truncated at the first write, not before. */
struct late_trunc {
	int fd;
	bool truncated;
};

static ssize_t late_write(void *cookie, const char *buf, size_t n)
{
	struct late_trunc *c = cookie;
	if (!c->truncated) {
		if (ftruncate(c->fd, 0) != 0)
			return -1;
		c->truncated = true;
	}
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(c->fd, buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return done ? (ssize_t)done : -1;
		done += (size_t)w;
	}
	return (ssize_t)done;
}

static int late_close(void *cookie)
{
	struct late_trunc *c = cookie;
	int rc = close(c->fd);
	free(c);
	return rc;
}

int stb_loader_out_open(struct stb_loader_out *o, const char *path)
{
	struct stat st;
	int fd = -1, rc;
	o->f = NULL;
	o->path = path;
	o->created = false;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd >= 0) {
		o->created = true;
	} else if (errno == EEXIST) {
		fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0 && errno == ENOENT) /* a dangling symbolic link */
			fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
	}
	if (fd < 0 || fstat(fd, &st) != 0) {
		rc = -errno;
		goto cleanup;
	}
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	if (S_ISREG(st.st_mode) && !o->created && st.st_size > 0) {
		struct late_trunc *c = malloc(sizeof(*c));
		cookie_io_functions_t io = {.write = late_write, .close = late_close};
		if (!c) {
			rc = -ENOMEM;
			goto cleanup;
		}
		c->fd = fd;
		c->truncated = false;
		o->f = fopencookie(c, "w", io);
		if (!o->f) {
			rc = -errno;
			free(c);
			goto cleanup;
		}
		fd = -1;
	} else {
		/* New or empty files, devices (/dev/null), pipes: as they are. */
		o->f = fdopen(fd, "w");
		if (!o->f) {
			rc = -errno;
			goto cleanup;
		}
		fd = -1;
	}
	stb_loader_out_buffer(o->f);
	return 0;
cleanup:
	if (fd >= 0)
		close(fd);
	if (o->created) {
		unlink(path);
		o->created = false;
	}
	return rc;
}

int stb_loader_out_finish(struct stb_loader_out *o, bool keep)
{
	if (!o->f)
		return 0;
	int rc = stb_loader_out_close(o->f);
	o->f = NULL;
	struct stat st;
	/* Only the file this run created, if it is still the one at path. */
	if (!keep && o->created && lstat(o->path, &st) == 0 && S_ISREG(st.st_mode) &&
	    st.st_dev == o->dev && st.st_ino == o->ino)
		unlink(o->path);
	return rc;
}
