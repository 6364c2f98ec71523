/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared task table (layout in include/stb/abi.h): created once at runtime
 * start as a sealed memfd (the default: it is in the process's core dumps),
 * or with STB_TABLE=bpf as an mmapable BPF array map (the kernel never dumps
 * its memory), falling back to the memfd when the process may not create
 * BPF maps. Owns the mapping and its fd.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "stb/stb.h"

struct stb_table stb_table = {.fd = -1};

/* Exported for debuggers and scripts: the table of this process or NULL. */
STB_EXPORT struct stb_abi_header *stb_task_table;

static uint32_t stb_table_capacity_req;

int stb_table_set_capacity(uint32_t capacity)
{
	if (capacity == 0 || capacity > STB_ABI_MAX_CAPACITY)
		return -EINVAL;
	if (__atomic_load_n(&stb_table.hdr, __ATOMIC_ACQUIRE) != NULL)
		return -EBUSY;
	__atomic_store_n(&stb_table_capacity_req, capacity, __ATOMIC_RELEASE);
	return 0;
}

#if STB_TRACER
static int stb_table_create_map(uint32_t entries)
{
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = BPF_MAP_TYPE_ARRAY;
	attr.key_size = 4;
	attr.value_size = STB_ABI_ENTRY_SIZE;
	attr.max_entries = entries;
	attr.map_flags = BPF_F_MMAPABLE;
	memcpy(attr.map_name, STB_ABI_TABLE_NAME, sizeof(STB_ABI_TABLE_NAME));
	long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
	if (fd < 0)
		return -errno;
	return (int)fd;
}

/* A memfd of exactly size bytes, sealed against shrinking, growing and
 * further sealing: a tracer that checks the seals (loader/target.c) may map it
 * without fearing SIGBUS from a truncate. */
static int stb_table_create_memfd(size_t size)
{
	int fd = memfd_create(STB_ABI_TABLE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* The capacity asked for, else the default of the backing (bpf: a map). */
static uint32_t stb_table_capacity_config(bool bpf)
{
	uint32_t cap = __atomic_load_n(&stb_table_capacity_req, __ATOMIC_ACQUIRE);
	if (cap)
		return cap;
	const char *env = getenv("STB_TABLE_CAPACITY");
	if (env && *env) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(env, &end, 10);
		if (errno == 0 && *end == '\0' && v > 0 && v <= STB_ABI_MAX_CAPACITY)
			return (uint32_t)v;
		static bool warned; /* called again for a memfd when the map failed */
		if (!warned)
			fprintf(stderr, "stb: ignoring STB_TABLE_CAPACITY=%s (want 1..%u)\n", env,
				STB_ABI_MAX_CAPACITY);
		warned = true;
	}
	return bpf ? STB_ABI_DEFAULT_MAP_CAPACITY : STB_ABI_DEFAULT_CAPACITY;
}
#endif /* STB_TRACER */

int stb_table_init(void)
{
#if !STB_TRACER
	return 0;
#else
	const char *mode = getenv("STB_TABLE");
	bool bpf = mode && strcmp(mode, "bpf") == 0;
	uint32_t cap = stb_table_capacity_config(bpf);
	size_t size = STB_ABI_TABLE_SIZE(cap);
	int backing = STB_ABI_BACKING_BPF_MAP;
	int fd = -EPERM;
	void *base = MAP_FAILED;

	if (mode && *mode && strcmp(mode, "memfd") != 0 && strcmp(mode, "bpf") != 0)
		fprintf(stderr, "stb: ignoring STB_TABLE=%s (want memfd or bpf)\n", mode);
	if (bpf) {
		fd = stb_table_create_map(STB_ABI_TASK_BASE + cap);
		if (fd >= 0) {
			base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (base == MAP_FAILED) {
				close(fd);
				fd = -errno;
			}
		}
	}
	if (fd < 0) {
		/* No map (not asked for, or not allowed): a memfd, with the
		 * memfd's default capacity unless one was given. */
		backing = STB_ABI_BACKING_MEMFD;
		cap = stb_table_capacity_config(false);
		size = STB_ABI_TABLE_SIZE(cap);
		fd = stb_table_create_memfd(size);
		if (fd < 0)
			return fd;
		base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (base == MAP_FAILED) {
			int err = -errno;
			close(fd);
			return err;
		}
	}

	struct stb_abi_header *h = base;
	h->abi_version = STB_ABI_VERSION;
	h->entry_size = STB_ABI_ENTRY_SIZE;
	h->header_entries = STB_ABI_HEADER_ENTRIES;
	h->max_workers = STB_ABI_MAX_WORKERS;
	h->task_capacity = cap;
	h->pid = (uint32_t)getpid();
	h->backing = (uint32_t)backing;
	h->table_addr = (uint64_t)(uintptr_t)base;
	h->table_size = size;
	h->flags = STB_ABI_F_TRACER;
	h->created_ns = stb_now_ns();
	stb_table.base = base;
	stb_table.size = size;
	stb_table.fd = fd;
	stb_table.capacity = cap;
	__atomic_store_n(&h->magic, STB_ABI_MAGIC, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_table.hdr, h, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_task_table, h, __ATOMIC_RELEASE);
	return 0;
#endif
}

/* Worker entries and their count without a table (never touched otherwise). */
static struct stb_abi_worker stb_private_workers[STB_ABI_MAX_WORKERS];
static struct stb_abi_header stb_private_header;

struct stb_abi_worker *stb_table_worker(uint32_t index)
{
	if (index >= STB_ABI_MAX_WORKERS)
		return NULL;
	if (!stb_table.base)
		return &stb_private_workers[index];
	return (struct stb_abi_worker *)((char *)stb_table.base + STB_ABI_WORKER_OFFSET(index));
}

struct stb_abi_header *stb_table_workers_header(void)
{
	return stb_table.hdr ? stb_table.hdr : &stb_private_header;
}

struct stb_abi_task *stb_table_task(uint32_t slot)
{
	if (!stb_table.base || slot >= stb_table.capacity)
		return NULL;
	return (struct stb_abi_task *)((char *)stb_table.base + STB_ABI_TASK_OFFSET(slot));
}

void stb_table_count(__u64 *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

void stb_table_untraceable(uint32_t slot)
{
	static bool said;
	stb_table_count(&stb_table.hdr->untraceable, 1);
	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return;
	uint64_t want = (uint64_t)stb_table.capacity * 2;
	if (want > STB_ABI_MAX_CAPACITY)
		want = STB_ABI_MAX_CAPACITY;
	fprintf(stderr,
		"stb: more bthreads than the task table's %u slots (task slot %u): this one and "
		"the others beyond it run, but cannot be traced from outside the process "
		"(stb-bpf-loader reports how many; start the process with "
		"STB_TABLE_CAPACITY=%" PRIu64 ", at most %u, or call stb_table_set_capacity() "
		"before the first bthread)\n",
		stb_table.capacity, slot, want, STB_ABI_MAX_CAPACITY);
}
