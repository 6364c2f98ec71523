/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding a stb runtime in another process: scans /proc/PID/fd for the BPF
 * map or memfd named "stb_tasks", duplicates it with pidfd_open+pidfd_getfd,
 * checks what backs it (seals and size of a memfd, type and size of a map)
 * before anything is mapped, checks the header (tview.c) and maps the table a
 * window at a time; reads target memory with process_vm_readv.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "encode/escape.h"
#include "table/threads.h"
#include "target.h"

static int pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_getfd(int pidfd, int fd)
{
	return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* The info of a BPF map fd: 0 or -errno (before Linux 6.5 it needs CAP_BPF). */
static int map_info(int fd, struct bpf_map_info *info)
{
	union bpf_attr attr;
	memset(info, 0, sizeof(*info));
	memset(&attr, 0, sizeof(attr));
	attr.info.bpf_fd = (__u32)fd;
	attr.info.info_len = sizeof(*info);
	attr.info.info = (__u64)(uintptr_t)info;
	return syscall(SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr, sizeof(attr)) == 0 ? 0 : -errno;
}

/* Does the mmapable map fd start with the table's magic? */
static bool map_has_magic(int fd)
{
	const struct stb_abi_header *h = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return false;
	bool ok = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == STB_ABI_MAGIC;
	munmap((void *)h, 4096);
	return ok;
}

static void read_comm(pid_t pid, char *comm, size_t len)
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
static int find_table_fd(struct stb_target *t)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)t->pid);
	DIR *d = opendir(dir);
	if (!d)
		return errno == EACCES || errno == EPERM ? -EACCES : -errno;
	int found = -ENOENT;
	unsigned denied = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long n = strtol(e->d_name, &end, 10);
		if (*end || n < 0)
			continue;
		char link[320], target[256];
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len < 0) {
			/* Listed but not readable: ptrace access is denied. */
			denied += errno == EACCES || errno == EPERM;
			continue;
		}
		target[len] = '\0';
		bool is_map = strcmp(target, "anon_inode:bpf-map") == 0;
		bool is_memfd = strncmp(target, "/memfd:" STB_ABI_TABLE_NAME,
					strlen("/memfd:" STB_ABI_TABLE_NAME)) == 0;
		if (!is_map && !is_memfd)
			continue;
		int fd = pidfd_getfd(t->pidfd, (int)n);
		if (fd < 0) {
			found = errno == EACCES || errno == EPERM ? -EPERM : -errno;
			break;
		}
		if (is_map) {
			struct bpf_map_info info;
			/* Without bpf(2) (before Linux 6.5 it needs CAP_BPF even for
			 * the map's name), recognize the table by its magic. */
			bool named = map_info(fd, &info) == 0;
			if (named ? strcmp(info.name, STB_ABI_TABLE_NAME) != 0 : !map_has_magic(fd)) {
				close(fd);
				continue;
			}
		}
		t->memfd = is_memfd;
		t->holes = is_memfd;
		t->target_fd = (int)n;
		found = fd;
		break;
	}
	closedir(d);
	return found == -ENOENT && denied ? -EPERM : found;
}

/* Is capability cap in this process's effective set? */
static bool have_cap(unsigned cap)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	if (cap >= 64 || syscall(SYS_capget, &h, d) != 0)
		return false;
	return d[cap >> 5].effective >> (cap & 31) & 1;
}

/*
 * The message for an access denied while looking for the table, naming the
 * permission really missing. rc: -EACCES when /proc/PID/fd could not be
 * listed (another user's process: CAP_DAC_READ_SEARCH), -EPERM when its
 * entries could not be read or duplicated (ptrace access: CAP_SYS_PTRACE).
 */
static void access_message(pid_t pid, const char *comm, int rc, char *err, size_t errlen)
{
	bool ptrace_cap = have_cap(CAP_SYS_PTRACE), dac_cap = have_cap(CAP_DAC_READ_SEARCH);
	const char *as_root = geteuid() == 0 ? " (this process runs as root but without it)" : "";
	if (rc == -EACCES && !dac_cap) {
		snprintf(err, errlen,
			 "cannot list /proc/%d/fd of process %d (%s), which runs as another user: "
			 "missing CAP_DAC_READ_SEARCH%s%s; run as root with full capabilities, or "
			 "grant CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH",
			 (int)pid, (int)pid, comm, ptrace_cap ? "" : " and CAP_SYS_PTRACE", as_root);
		return;
	}
	if (!ptrace_cap) {
		snprintf(err, errlen,
			 "no ptrace access to process %d (%s): missing CAP_SYS_PTRACE%s (its file "
			 "descriptors and memory must be readable); run as root with full "
			 "capabilities, or grant CAP_SYS_PTRACE%s",
			 (int)pid, comm, as_root, dac_cap ? "" : " (and CAP_DAC_READ_SEARCH when "
			 "it runs as another user)");
		return;
	}
	snprintf(err, errlen,
		 "no ptrace access to process %d (%s) although CAP_SYS_PTRACE is held: a Linux "
		 "security module (Yama ptrace_scope 3, SELinux, AppArmor) denies it",
		 (int)pid, comm);
}

/*
 * What backs the table, checked before anything of it is mapped: a memfd
 * sealed against shrinking (so that no mapping of it can fault later) and its
 * real size, or a BPF array map of 256-byte entries and its size. Copies the
 * header into *h. 0, or -errno with err set.
 */
static int check_backing(struct stb_target *t, struct stb_abi_header *h, uint64_t *real_size,
			 char *err, size_t errlen)
{
	int fd = t->table_fd;
	*real_size = 0;
	if (t->memfd) {
		int seals = fcntl(fd, F_GET_SEALS);
		if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
			snprintf(err, errlen, "the task table of process %d (memfd \"" STB_ABI_TABLE_NAME
				 "\") is not sealed against shrinking: reading it would let the "
				 "process crash this reader (stb runtimes seal it; this one is not a "
				 "stb runtime, or too old for this loader)", (int)t->pid);
			return -EPROTO;
		}
		struct stat st;
		if (fstat(fd, &st) != 0)
			return -errno;
		*real_size = (uint64_t)st.st_size;
		ssize_t n = pread(fd, h, sizeof(*h), 0);
		if (n != (ssize_t)sizeof(*h)) {
			snprintf(err, errlen, "the task table of process %d holds %lld bytes: no "
				 "header (is it still starting?)", (int)t->pid, (long long)st.st_size);
			return -EPROTO;
		}
		/* A description of our own: the scan's lseek(SEEK_DATA) must not move
		 * the target's file offset. Without it, every slot is read. */
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		int own = open(path, O_RDWR | O_CLOEXEC);
		if (own >= 0) {
			close(fd);
			t->table_fd = own;
		} else {
			t->holes = false;
		}
		return 0;
	}
	struct bpf_map_info info;
	if (map_info(fd, &info) == 0) {
		if (info.type != BPF_MAP_TYPE_ARRAY || info.key_size != 4 ||
		    info.value_size != STB_ABI_ENTRY_SIZE || info.max_entries <= STB_ABI_TASK_BASE ||
		    !(info.map_flags & BPF_F_MMAPABLE)) {
			snprintf(err, errlen, "process %d has a BPF map \"" STB_ABI_TABLE_NAME "\" that "
				 "is not a task table (type %u, key %u, value %u bytes, %u entries, "
				 "flags 0x%x)", (int)t->pid, info.type, info.key_size,
				 info.value_size, info.max_entries, info.map_flags);
			return -EPROTO;
		}
		*real_size = (uint64_t)info.max_entries * STB_ABI_ENTRY_SIZE;
	}
	/* A mmapable array map has at least one page, and cannot shrink. */
	const struct stb_abi_header *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		snprintf(err, errlen, "cannot map the task table of process %d: %s", (int)t->pid,
			 strerror(e));
		return -e;
	}
	memcpy(h, m, sizeof(*h));
	munmap((void *)m, 4096);
	return 0;
}

struct stb_target *stb_target_open(pid_t pid, char *err, size_t errlen)
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
	t->hdr = MAP_FAILED;
	t->win = t->win_prev = MAP_FAILED;
	if (kill(pid, 0) != 0 && errno == ESRCH) {
		snprintf(err, errlen, "no such process: %d", (int)pid);
		rc = ESRCH;
		goto cleanup;
	}
	read_comm(pid, t->comm, sizeof(t->comm));
	char comm[128];
	stb_text_escape(comm, sizeof(comm), t->comm, strlen(t->comm));
	t->pidfd = pidfd_open(pid);
	if (t->pidfd < 0) {
		rc = errno;
		snprintf(err, errlen, "cannot open process %d: %s", (int)pid, strerror(rc));
		goto cleanup;
	}
	int fd = find_table_fd(t);
	if (fd == -EACCES || fd == -EPERM) {
		rc = -fd;
		access_message(pid, comm, fd, err, errlen);
		goto cleanup;
	}
	if (fd == -ENOENT) {
		rc = ENOENT;
		snprintf(err, errlen,
			 "process %d (%s) is not a stb runtime: it has no \"" STB_ABI_TABLE_NAME
			 "\" table (is it linked with libbthread built with tracer support, and "
			 "has it started a bthread?)", (int)pid, comm);
		goto cleanup;
	}
	if (fd < 0) {
		rc = -fd;
		snprintf(err, errlen, "cannot inspect the file descriptors of process %d: %s",
			 (int)pid, strerror(rc));
		goto cleanup;
	}
	t->table_fd = fd;
	struct stb_abi_header h;
	uint64_t real_size;
	rc = check_backing(t, &h, &real_size, err, errlen);
	if (rc) {
		rc = -rc;
		goto cleanup;
	}
	char why[256];
	rc = stb_tview_check_header(&h, real_size, &t->info, why, sizeof(why));
	if (rc == -ENOENT) {
		rc = EPROTO;
		snprintf(err, errlen, "process %d (%s) has a \"" STB_ABI_TABLE_NAME "\" table without "
			 "the stb magic: not a stb runtime, or it is still starting", (int)pid, comm);
		goto cleanup;
	}
	if (rc) {
		rc = EPROTO;
		snprintf(err, errlen,
			 "process %d (%s) has a task table this stb-bpf-loader cannot read: %s "
			 "(use the loader built with the target's libbthread)", (int)pid, comm, why);
		goto cleanup;
	}
	if (t->info.backing != (t->memfd ? STB_ABI_BACKING_MEMFD : STB_ABI_BACKING_BPF_MAP)) {
		rc = EPROTO;
		snprintf(err, errlen, "process %d (%s): its table is a %s but its header says "
			 "backing %u", (int)pid, comm, t->memfd ? "memfd" : "BPF map", t->info.backing);
		goto cleanup;
	}
	if (!t->memfd && real_size && real_size != STB_ABI_TABLE_SIZE(t->info.capacity)) {
		rc = EPROTO;
		snprintf(err, errlen, "process %d (%s): its table map holds %llu bytes, its header "
			 "claims %llu", (int)pid, comm, (unsigned long long)real_size,
			 (unsigned long long)STB_ABI_TABLE_SIZE(t->info.capacity));
		goto cleanup;
	}
	t->hdr_size = (size_t)STB_ABI_TASK_OFFSET(0);
	t->hdr = mmap(NULL, t->hdr_size, PROT_READ, MAP_SHARED, t->table_fd, 0);
	if (t->hdr == MAP_FAILED) {
		rc = errno;
		snprintf(err, errlen, "cannot map the task table of process %d: %s", (int)pid,
			 strerror(rc));
		goto cleanup;
	}
	t->data_lo = t->data_hi = 0;
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
	if (t->win != MAP_FAILED)
		munmap(t->win, t->win_size);
	if (t->win_prev != MAP_FAILED)
		munmap(t->win_prev, t->win_prev_size);
	if (t->hdr != MAP_FAILED)
		munmap((void *)t->hdr, t->hdr_size);
	if (t->table_fd >= 0)
		close(t->table_fd);
	if (t->pidfd >= 0)
		close(t->pidfd);
	free(t);
}

/* Maps the window holding slot (aligned to STB_TARGET_WINDOW_SLOTS, up to the
 * slots wanted). 0 or -errno. */
static int map_window(struct stb_target *t, uint32_t slot)
{
	uint32_t lo = slot & ~(STB_TARGET_WINDOW_SLOTS - 1);
	uint32_t hi = t->extent > slot ? t->extent : slot + 1;
	if (hi - lo > STB_TARGET_WINDOW_SLOTS)
		hi = lo + STB_TARGET_WINDOW_SLOTS;
	if (hi > t->info.capacity)
		hi = t->info.capacity;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t off = STB_ABI_TASK_OFFSET(lo); /* page-aligned: abi.h asserts it */
	uint64_t len = (STB_ABI_TASK_OFFSET(hi) - off + (uint64_t)page - 1) & ~((uint64_t)page - 1);
	/* The window before stays mapped until the next move: a reader may
	 * still hold its entries (a batch of traces). */
	if (t->win_prev != MAP_FAILED)
		munmap(t->win_prev, t->win_prev_size);
	t->win_prev = t->win;
	t->win_prev_size = t->win_size;
	t->win_lo = t->win_hi = 0;
	t->win = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, t->table_fd, (off_t)off);
	if (t->win == MAP_FAILED)
		return -errno;
	t->win_size = (size_t)len;
	t->win_lo = lo;
	t->win_hi = hi;
	return 0;
}

struct stb_abi_task *stb_target_task(struct stb_target *t, uint32_t slot)
{
	if (slot >= t->info.capacity)
		return NULL;
	if (slot < t->win_lo || slot >= t->win_hi || t->win == MAP_FAILED) {
		if (map_window(t, slot) != 0)
			return NULL;
	}
	return (struct stb_abi_task *)((char *)t->win + (size_t)(slot - t->win_lo) * STB_ABI_ENTRY_SIZE);
}

/* memfd: finds the data around slot with SEEK_DATA/SEEK_HOLE. false: no
 * data at or after slot. */
static bool find_data(struct stb_target *t, uint32_t slot)
{
	uint64_t base = STB_ABI_TASK_OFFSET(0);
	off_t d = lseek(t->table_fd, (off_t)STB_ABI_TASK_OFFSET(slot), SEEK_DATA);
	if (d < 0) {
		if (errno == ENXIO)
			return false;
		t->holes = false; /* no hole information: read every slot */
		return true;
	}
	off_t h = lseek(t->table_fd, d, SEEK_HOLE);
	uint64_t end = h < 0 ? t->info.table_size : (uint64_t)h;
	uint64_t lo = (uint64_t)d > base ? ((uint64_t)d - base) / STB_ABI_ENTRY_SIZE : 0;
	uint64_t hi = end > base ? (end - base + STB_ABI_ENTRY_SIZE - 1) / STB_ABI_ENTRY_SIZE : 0;
	if (hi > t->info.capacity)
		hi = t->info.capacity;
	if (hi <= lo)
		hi = lo + 1;
	t->data_lo = (uint32_t)lo;
	t->data_hi = (uint32_t)hi;
	return true;
}

static struct stb_abi_task *src_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct stb_target *t = ctx;
	if (t->holes && (slot < t->data_lo || slot >= t->data_hi)) {
		if (!find_data(t, slot)) {
			*next = UINT32_MAX;
			return NULL;
		}
		if (t->holes && slot < t->data_lo) {
			*next = t->data_lo;
			return NULL;
		}
	}
	struct stb_abi_task *p = stb_target_task(t, slot);
	if (!p) {
		/* Cannot be mapped: the whole window is unreadable. */
		uint64_t n = (uint64_t)(slot & ~(STB_TARGET_WINDOW_SLOTS - 1)) + STB_TARGET_WINDOW_SLOTS;
		*next = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
		return NULL;
	}
	*next = slot + 1;
	return p;
}

struct stb_tview_src stb_target_src(struct stb_target *t, bool *clamped)
{
	uint32_t hwm = stb_tview_hwm(t->hdr, &t->info, clamped);
	uint64_t extent = (uint64_t)hwm + STB_TARGET_SLOT_SLACK;
	t->extent = extent < t->info.capacity ? (uint32_t)extent : t->info.capacity;
	t->data_lo = t->data_hi = 0; /* the target may have written new ranges */
	return (struct stb_tview_src){.entry = src_entry,
				      .ctx = t,
				      .nslots = hwm,
				      .window = STB_TARGET_WINDOW_SLOTS,
				      .workers = stb_target_workers(t)};
}

struct stb_tview_wsrc stb_target_workers(const struct stb_target *t)
{
	/* hdr maps the whole header region: every worker entry. */
	return (struct stb_tview_wsrc){
	    .w = (const struct stb_abi_worker *)((const char *)t->hdr + STB_ABI_WORKER_OFFSET(0)),
	    .hdr = t->hdr};
}

uint32_t stb_target_nworkers(const struct stb_target *t, bool *clamped)
{
	return stb_tview_nworkers(t->hdr, clamped);
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

/* stb_mem.read_many: one process_vm_readv for every segment. A partial
 * transfer stops at the first remote segment it cannot read whole. */
static unsigned target_read_many(void *target, const struct stb_mem_seg *segs, unsigned n)
{
	const struct stb_target *t = target;
	struct iovec local[STB_MEM_SEGS_MAX], remote[STB_MEM_SEGS_MAX];
	if (n > STB_MEM_SEGS_MAX)
		n = STB_MEM_SEGS_MAX;
	for (unsigned i = 0; i < n; i++) {
		local[i] = (struct iovec){.iov_base = segs[i].dst, .iov_len = segs[i].len};
		remote[i] = (struct iovec){.iov_base = (void *)(uintptr_t)segs[i].addr,
					   .iov_len = segs[i].len};
	}
	ssize_t got = n ? process_vm_readv(t->pid, local, n, remote, n, 0) : 0;
	unsigned whole = 0;
	for (size_t sum = 0; got > 0 && whole < n; whole++) {
		sum += segs[whole].len;
		if (sum > (size_t)got)
			break;
	}
	return whole;
}

int stb_target_alive(const struct stb_target *t)
{
	/* The pidfd turns readable once every thread has exited: a zombie has no
	 * memory left to read (a null signal would still reach it). */
	struct pollfd pfd = {.fd = t->pidfd, .events = POLLIN};
	return poll(&pfd, 1, 0) == 0;
}

static bool mem_alive(void *ctx)
{
	return stb_target_alive(ctx) != 0;
}

void stb_target_mem(struct stb_target *t, struct stb_mem *mem)
{
	*mem = (struct stb_mem){
	    .read = stb_target_read, .read_many = target_read_many, .alive = mem_alive, .ctx = t};
}

const struct stb_abi_worker *stb_target_worker(const struct stb_target *t, uint32_t w)
{
	if (w >= STB_ABI_MAX_WORKERS ||
	    STB_ABI_WORKER_OFFSET(w) + sizeof(struct stb_abi_worker) > t->hdr_size)
		return NULL;
	return (const struct stb_abi_worker *)((const char *)t->hdr + STB_ABI_WORKER_OFFSET(w));
}

static struct stb_tview_src collect_tasks(void *ctx, bool *clamped, bool again)
{
	(void)again;
	return stb_target_src(ctx, clamped);
}

static struct stb_abi_task *collect_task(void *ctx, uint32_t slot)
{
	return stb_target_task(ctx, slot);
}

static const struct stb_abi_worker *collect_worker(void *ctx, uint32_t w)
{
	return stb_target_worker(ctx, w);
}

static int collect_threads(void *ctx, uint32_t *tids, unsigned max)
{
	const struct stb_target *t = ctx;
	return stb_proc_threads(t->pid, tids, max);
}

static void collect_thread_name(void *ctx, uint32_t tid, char *name, size_t len)
{
	const struct stb_target *t = ctx;
	stb_proc_thread_name(t->pid, tid, name, len);
}

void stb_target_collect_src(struct stb_target *t, const struct stb_mem *mem,
			    struct stb_collect_src *src)
{
	*src = (struct stb_collect_src){.tasks = collect_tasks, .task = collect_task,
					.worker = collect_worker, .threads = collect_threads,
					.thread_name = collect_thread_name, .ctx = t,
					.capacity = t->info.capacity, .owners = mem};
}

void stb_target_bpf_prog_opts(const struct stb_target *t, unsigned mode,
			      struct stb_bpf_prog_opts *co)
{
	memset(co, 0, sizeof(*co));
	co->mode = mode;
	co->backing = t->info.backing;
	co->task_capacity = t->info.capacity;
	co->table_fd = t->table_fd;
	co->table_addr = t->info.table_addr;
}
