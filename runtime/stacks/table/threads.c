/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The threads of a process from /proc (threads.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "table/threads.h"

#define STB_THREADS_COUNT_MAX (1u << 22) /* the kernel's pid_max limit */

int stb_proc_threads(int pid, uint32_t *tids, unsigned max)
{
	char dir[64];
	if (pid > 0)
		snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	else
		snprintf(dir, sizeof(dir), "/proc/self/task");
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	unsigned n = 0, all = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL && all < STB_THREADS_COUNT_MAX) {
		char *end;
		unsigned long v = strtoul(e->d_name, &end, 10);
		if (*end || end == e->d_name || v == 0 || v > INT32_MAX)
			continue;
		if (n < max)
			tids[n++] = (uint32_t)v;
		all++;
	}
	closedir(d);
	return (int)all;
}

long stb_proc_task_read(int pid, uint32_t tid, const char *leaf, char *buf, size_t len)
{
	char path[96];
	if (pid > 0)
		snprintf(path, sizeof(path), "/proc/%d/task/%u/%s", pid, tid, leaf);
	else
		snprintf(path, sizeof(path), "/proc/self/task/%u/%s", tid, leaf);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, buf, len);
	int e = errno;
	close(fd);
	return n < 0 ? -e : (long)n;
}

void stb_proc_thread_name(int pid, uint32_t tid, char *name, size_t len)
{
	if (!len)
		return;
	long n = stb_proc_task_read(pid, tid, "comm", name, len - 1);
	name[n > 0 ? n : 0] = '\0';
	name[strcspn(name, "\n")] = '\0';
}
