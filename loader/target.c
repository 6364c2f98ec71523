/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding a stb runtime in another process: scans /proc/PID/fd for the BPF
 * map or memfd named "stb_tasks", duplicates it with pidfd_open+pidfd_getfd,
 * checks the ABI header and maps the table; reads target memory with
 * process_vm_readv.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "target.h"

static int stb_pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int stb_pidfd_getfd(int pidfd, int fd)
{
	return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* Name of a BPF map fd ("" if not a map). */
static void stb_bpf_map_name(int fd, char *name, size_t len)
{
	struct bpf_map_info info;
	union bpf_attr attr;
	memset(&info, 0, sizeof(info));
	memset(&attr, 0, sizeof(attr));
	attr.info.bpf_fd = (__u32)fd;
	attr.info.info_len = sizeof(info);
	attr.info.info = (__u64)(uintptr_t)&info;
	name[0] = '\0';
	if (syscall(SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr, sizeof(attr)) == 0)
		snprintf(name, len, "%s", info.name);
}

/* Does the mmapable map fd start with the table's magic? */
static bool stb_map_has_magic(int fd)
{
	const struct stb_abi_header *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return false;
	bool ok = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == STB_ABI_MAGIC;
	munmap((void *)h, 4096);
	return ok;
}

static void stb_read_comm(pid_t pid, char *comm, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	comm[0] = '\0';
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	if (fgets(comm, (int)len, f))
		comm[strcspn(comm, "\n")] = '\0';
	fclose(f);
}

/*
 * Looks through the target's fds for the table. Returns our duplicate (and
 * its number in the target) or -errno: -ENOENT none, -EACCES/-EPERM.
 */
static int stb_find_table_fd(struct stb_target *t)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)t->pid);
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int found = -ENOENT;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long n = strtol(e->d_name, &end, 10);
		if (*end || n < 0)
			continue;
		char link[320], target[256];
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		bool is_map = strcmp(target, "anon_inode:bpf-map") == 0;
		bool is_memfd = strncmp(target, "/memfd:" STB_ABI_TABLE_NAME,
					strlen("/memfd:" STB_ABI_TABLE_NAME)) == 0;
		if (!is_map && !is_memfd)
			continue;
		int fd = stb_pidfd_getfd(t->pidfd, (int)n);
		if (fd < 0) {
			found = -errno;
			break;
		}
		if (is_map) {
			char name[32];
			stb_bpf_map_name(fd, name, sizeof(name));
			/* Without bpf(2) (before Linux 6.5 it needs CAP_BPF even for
			 * the map's name), recognize the table by its magic. */
			if (strcmp(name, STB_ABI_TABLE_NAME) != 0 &&
			    !(name[0] == '\0' && stb_map_has_magic(fd))) {
				close(fd);
				continue;
			}
		}
		t->target_fd = (int)n;
		found = fd;
		break;
	}
	closedir(d);
	return found;
}

struct stb_target *stb_target_open(pid_t pid, unsigned map, char *err, size_t errlen)
{
	struct stb_target *t = calloc(1, sizeof(*t));
	int rc = 0;
	if (!t) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	t->pid = pid;
	t->pidfd = t->table_fd = -1;
	t->table = MAP_FAILED;
	if (kill(pid, 0) != 0 && errno == ESRCH) {
		snprintf(err, errlen, "no such process: %d", (int)pid);
		rc = ESRCH;
		goto cleanup;
	}
	stb_read_comm(pid, t->comm, sizeof(t->comm));
	t->pidfd = stb_pidfd_open(pid);
	if (t->pidfd < 0) {
		rc = errno;
		snprintf(err, errlen, "cannot open process %d: %s", (int)pid, strerror(rc));
		goto cleanup;
	}
	int fd = stb_find_table_fd(t);
	if (fd == -EACCES || fd == -EPERM) {
		rc = -fd;
		snprintf(err, errlen,
			 "no ptrace access to process %d (%s): run as root or with CAP_SYS_PTRACE "
			 "(its file descriptors and memory must be readable)", (int)pid, t->comm);
		goto cleanup;
	}
	if (fd == -ENOENT) {
		rc = ENOENT;
		snprintf(err, errlen,
			 "process %d (%s) is not a stb runtime: it has no \"" STB_ABI_TABLE_NAME
			 "\" table (is it linked with libbthread built with tracer support, and "
			 "has it started a bthread?)", (int)pid, t->comm);
		goto cleanup;
	}
	if (fd < 0) {
		rc = -fd;
		snprintf(err, errlen, "cannot inspect the file descriptors of process %d: %s",
			 (int)pid, strerror(rc));
		goto cleanup;
	}
	t->table_fd = fd;
	struct stb_abi_header *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		rc = errno;
		snprintf(err, errlen, "cannot map the task table of process %d: %s", (int)pid,
			 strerror(rc));
		goto cleanup;
	}
	uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
	uint32_t version = h->abi_version, esize = h->entry_size;
	uint64_t size = h->table_size;
	uint32_t cap = h->task_capacity;
	uint64_t hwm = __atomic_load_n(&h->slot_hwm, __ATOMIC_ACQUIRE);
	munmap(h, 4096);
	if (magic != STB_ABI_MAGIC) {
		rc = EPROTO;
		snprintf(err, errlen, "process %d (%s) has a \"" STB_ABI_TABLE_NAME "\" table without "
			 "the stb magic: not a stb runtime, or it is still starting", (int)pid, t->comm);
		goto cleanup;
	}
	if (version != STB_ABI_VERSION || esize != STB_ABI_ENTRY_SIZE ||
	    size != STB_ABI_TABLE_SIZE(cap)) {
		rc = EPROTO;
		snprintf(err, errlen,
			 "process %d (%s) uses stb table ABI version %u (entry size %u); this "
			 "stb-bpf-loader understands version %u: use the loader built with the "
			 "target's libbthread", (int)pid, t->comm, version, esize, STB_ABI_VERSION);
		goto cleanup;
	}
	uint32_t slots = cap;
	if (map == STB_TARGET_MAP_USED && hwm + STB_TARGET_SLOT_SLACK < cap)
		slots = (uint32_t)hwm + STB_TARGET_SLOT_SLACK;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t want = (STB_ABI_TASK_OFFSET(slots) + (uint64_t)page - 1) & ~((uint64_t)page - 1);
	if (want < size)
		size = want;
	t->table = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t->table == MAP_FAILED) {
		rc = errno;
		snprintf(err, errlen, "cannot map the task table of process %d: %s", (int)pid,
			 strerror(rc));
		goto cleanup;
	}
	t->size = size;
	t->slots = slots;
	t->hdr = t->table;
cleanup:
	if (rc) {
		stb_target_close(t);
		errno = rc;
		return NULL;
	}
	return t;
}

void stb_target_close(struct stb_target *t)
{
	if (!t)
		return;
	if (t->table != MAP_FAILED && t->table)
		munmap(t->table, t->size);
	if (t->table_fd >= 0)
		close(t->table_fd);
	if (t->pidfd >= 0)
		close(t->pidfd);
	free(t);
}

struct stb_abi_task *stb_target_task(const struct stb_target *t, uint32_t slot)
{
	if (slot >= t->slots)
		return NULL;
	return (struct stb_abi_task *)((char *)t->table + STB_ABI_TASK_OFFSET(slot));
}

struct stb_abi_worker *stb_target_worker(const struct stb_target *t, uint32_t w)
{
	if (w >= STB_ABI_MAX_WORKERS)
		return NULL;
	return (struct stb_abi_worker *)((char *)t->table + STB_ABI_WORKER_OFFSET(w));
}

int stb_target_read(void *target, uint64_t addr, void *dst, size_t len)
{
	const struct stb_target *t = target;
	struct iovec local = {.iov_base = dst, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(t->pid, &local, 1, &remote, 1, 0);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

int stb_target_alive(const struct stb_target *t)
{
	/* The pidfd turns readable once every thread has exited: a zombie has no
	 * memory left to read (a null signal would still reach it). */
	struct pollfd pfd = {.fd = t->pidfd, .events = POLLIN};
	return poll(&pfd, 1, 0) == 0;
}

void stb_target_bpf_prog_opts(const struct stb_target *t, unsigned mode,
			     struct stb_bpf_prog_opts *co)
{
	memset(co, 0, sizeof(*co));
	co->mode = mode;
	co->backing = t->hdr->backing;
	co->table_fd = t->table_fd;
	co->table_addr = t->hdr->table_addr;
}
