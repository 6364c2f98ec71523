/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A hostile target for stb-bpf-loader: a process that publishes a task table
 * ("stb_tasks" memfd, include/stb/abi.h layout) built by hand to break its
 * reader -- bad headers, sizes and capacities, states, kinds, workers, ids and
 * stack bounds out of range, entries rewritten while they are read, leases
 * that are never given back, tasks that never settle, names that attack a
 * terminal or a JSON parser, a module truncated under its mapping, CFI that
 * loops, running stacks deeper than the BPF copy that change all the time or
 * claim a top far beyond their mapping, hundreds of threads that are no
 * tasks on stacks of garbage and names made to attack a terminal. Usage:
 * hostile_target MODE [LIB];
 * prints "pid N" and "ready", then
 * runs until its standard input closes. test_hostile.c drives it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <stb/abi.h>

#define HT_CAP 4096u         /* default capacity */
#define HT_MANY 65536u       /* tasks of the modes that cost time per task */
#define HT_STACK (64u << 10) /* a readable "stack" of garbage */

/* A function whose CFA rule is a DWARF expression that never ends: after the
 * first instruction, DW_CFA_def_cfa_expression { DW_OP_skip -3 } (the skip
 * jumps to itself). A task whose ip is in it sends an evaluator without an
 * instruction budget into an endless loop. */
__asm__(".text\n"
	".globl hostile_cfi_loop\n"
	".type hostile_cfi_loop, @function\n"
	"hostile_cfi_loop:\n"
	".cfi_startproc\n"
	"\tnop\n"
	".cfi_escape 0x0f, 0x03, 0x2f, 0xfd, 0xff\n"
	"\tnop\n\tnop\n\tnop\n\tret\n"
	".cfi_endproc\n"
	".size hostile_cfi_loop, .-hostile_cfi_loop\n");
void hostile_cfi_loop(void);

struct ht;
static struct ht *ht_threads_of; /* the threads mode's table */

struct ht {
	const char *mode;
	int fd;
	size_t size; /* bytes mapped */
	struct stb_abi_header *h;
	uint32_t cap;
	uint8_t *stack; /* HT_STACK bytes of garbage */
	volatile int stop;
	pthread_t worker, rewriter;
	uint32_t worker_tid;
};

static struct stb_abi_task *ht_task(struct ht *t, uint32_t slot)
{
	return (struct stb_abi_task *)((char *)t->h + STB_ABI_TASK_OFFSET(slot));
}

static uint64_t ht_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The table: a memfd of `size` bytes (sealed unless told otherwise). */
static int ht_table(struct ht *t, uint32_t cap, uint64_t size, bool seal)
{
	t->cap = cap;
	t->fd = memfd_create(STB_ABI_TABLE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (t->fd < 0 || ftruncate(t->fd, (off_t)size) != 0) {
		perror("hostile_target: memfd");
		return -1;
	}
	if (seal && fcntl(t->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		perror("hostile_target: seals");
		return -1;
	}
	/* Only the part a test touches is mapped here. */
	uint64_t map =
	    size < STB_ABI_TABLE_SIZE(HT_MANY + 16) ? size : STB_ABI_TABLE_SIZE(HT_MANY + 16);
	t->size = (size_t)map;
	t->h = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
	if (t->h == MAP_FAILED) {
		perror("hostile_target: mmap");
		return -1;
	}
	struct stb_abi_header *h = t->h;
	h->abi_version = STB_ABI_VERSION;
	h->entry_size = STB_ABI_ENTRY_SIZE;
	h->header_entries = STB_ABI_HEADER_ENTRIES;
	h->max_workers = STB_ABI_MAX_WORKERS;
	h->task_capacity = cap;
	h->pid = (uint32_t)getpid();
	h->backing = STB_ABI_BACKING_MEMFD;
	h->table_addr = (uint64_t)(uintptr_t)h;
	h->table_size = STB_ABI_TABLE_SIZE(cap);
	h->flags = STB_ABI_F_TRACER;
	return 0;
}

static void ht_publish(struct ht *t)
{
	__atomic_store_n(&t->h->magic, STB_ABI_MAGIC, __ATOMIC_RELEASE);
}

/* Task slot s: id, state, and a stack inside the garbage buffer. */
static void ht_set(struct ht *t, uint32_t s, unsigned state, const char *name)
{
	struct stb_abi_task *p = ht_task(t, s);
	memset(p, 0, sizeof(*p));
	p->id = (1ull << 32) | s;
	p->word = (uint64_t)1 << 32 | state;
	p->stack_lo = (uint64_t)(uintptr_t)t->stack;
	p->stack_hi = p->stack_lo + HT_STACK;
	p->sp = p->stack_lo + HT_STACK / 2;
	p->ip = (uint64_t)(uintptr_t)&ht_set + 16;
	p->bp = p->sp + 64;
	p->tid = t->worker_tid;
	snprintf(p->name, sizeof(p->name), "%s", name ? name : "hostile");
	uint64_t hwm = __atomic_load_n(&t->h->slot_hwm, __ATOMIC_RELAXED);
	if (s + 1 > hwm)
		__atomic_store_n(&t->h->slot_hwm, s + 1, __ATOMIC_RELEASE);
}

/* Worker 0: a thread that spins (RUNNING tasks point at it). */
static void *ht_spin(void *arg)
{
	struct ht *t = arg;
	__atomic_store_n(&t->worker_tid, (uint32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	while (!t->stop)
		__asm__ volatile("pause");
	return NULL;
}

/* deep-running: two workers, each running one task whose stack goes 1 KiB
 * a level up and down between 0 and 96 levels (past the BPF program's 32 KiB
 * copy, and changing while the rest is read); task 1's entry claims its
 * stack ends 1 GiB past its real top. */
struct ht_deep {
	struct ht *t;
	uint32_t slot;
	uint64_t lie;
	pthread_t th;
};

static void ht_name(struct ht *t, uint32_t w, uint64_t current, uint32_t tid);

static int ht_deep_rec(volatile int *stop, unsigned level)
{
	volatile char pad[1024];
	pad[0] = (char)level;
	if (level && !*stop)
		pad[1] = (char)ht_deep_rec(stop, level - 1);
	__asm__ volatile("" ::: "memory");
	return pad[0] + pad[1];
}

static void *ht_deep_spin(void *arg)
{
	struct ht_deep *d = arg;
	struct ht *t = d->t;
	pthread_attr_t a;
	void *lo = NULL;
	size_t size = 0;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		pthread_attr_getstack(&a, &lo, &size);
		pthread_attr_destroy(&a);
	}
	struct stb_abi_task *p = ht_task(t, d->slot);
	p->stack_lo = (uint64_t)(uintptr_t)lo;
	p->stack_hi = (uint64_t)(uintptr_t)lo + size + d->lie;
	/* A bthread running on worker slot (abi.h, "Running"): its word says
	 * READY, the worker's entry names it. */
	__atomic_store_n(&p->word, (uint64_t)1 << 32 | STB_TASK_READY, __ATOMIC_RELEASE);
	ht_name(t, d->slot, p->id, (uint32_t)syscall(SYS_gettid));
	for (unsigned n = 0; !t->stop; n++)
		ht_deep_rec(&t->stop, n % 97);
	return NULL;
}

static int ht_deep(struct ht *t)
{
	static struct ht_deep d[2];
	for (uint32_t s = 0; s < 2; s++) {
		ht_set(t, s, STB_TASK_CREATED, "deep");
		d[s] = (struct ht_deep){.t = t, .slot = s, .lie = s ? 1ull << 30 : 0};
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 1u << 20);
		int rc = pthread_create(&d[s].th, &a, ht_deep_spin, &d[s]);
		pthread_attr_destroy(&a);
		if (rc != 0)
			return -1;
	}
	for (uint32_t s = 0; s < 2; s++)
		while (STB_ABI_STATE(__atomic_load_n(&ht_task(t, s)->word, __ATOMIC_ACQUIRE)) !=
		       STB_TASK_READY)
			usleep(100);
	t->h->nworkers = 2;
	return 0;
}

/* threads: HT_THREADS threads that are no tasks, blocked in a read(2) below
 * 16 KiB of random words (a stack with "frame records" everywhere), a few
 * spinning over garbage likewise, their names escape sequences. */
#define HT_THREADS 600u
#define HT_THREAD_SPINNERS 4u

static int ht_thread_pipe[2] = {-1, -1};

static __attribute__((noinline)) void ht_garbage_then(struct ht *t, unsigned i, bool spin)
{
	volatile uint64_t junk[2048];
	uint64_t r = 0x2545f4914f6cdd1dull ^ i;
	for (unsigned k = 0; k < 2048; k++)
		junk[k] = k % 3 ? ht_rand(&r)
				: (uint64_t)(uintptr_t)&junk[(k + 2) % 2048]; /* bp-like */
	if (spin) {
		while (!t->stop)
			junk[ht_rand(&r) % 2048] = ht_rand(&r);
	} else {
		char c;
		while (read(ht_thread_pipe[0], &c, 1) < 0 && errno == EINTR)
			;
	}
	__asm__ volatile("" : : "r"(junk) : "memory");
}

static void *ht_thread(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	char name[16];
	snprintf(name, sizeof(name), "\x1b[%um\x07%c\n%u", i % 50, '"', i);
	prctl(PR_SET_NAME, name, 0, 0, 0);
	struct ht *t = __atomic_load_n(&ht_threads_of, __ATOMIC_ACQUIRE);
	ht_garbage_then(t, i, i < HT_THREAD_SPINNERS);
	return NULL;
}

static int ht_many_threads(struct ht *t)
{
	if (pipe(ht_thread_pipe) != 0)
		return -1;
	__atomic_store_n(&ht_threads_of, t, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < HT_THREADS; i++) {
		pthread_attr_t a;
		pthread_t th;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 64u << 10);
		int rc = pthread_create(&th, &a, ht_thread, (void *)(uintptr_t)i);
		pthread_attr_destroy(&a);
		if (rc != 0)
			return -1;
		pthread_detach(th);
	}
	return 0;
}

/* The rewriters: what another thread of a broken process does meanwhile. */
static void *ht_rewrite(void *arg)
{
	struct ht *t = arg;
	uint64_t r = 88172645463325252ull;
	uint32_t n = (uint32_t)__atomic_load_n(&t->h->slot_hwm, __ATOMIC_RELAXED);
	while (!t->stop) {
		for (uint32_t s = 0; s < n && !t->stop; s++) {
			struct stb_abi_task *p = ht_task(t, s);
			if ((s & 255) == 0)
				sched_yield(); /* two CPUs: leave some to the others */
			if (strcmp(t->mode, "changing-ids") == 0) {
				__atomic_store_n(&p->id, (ht_rand(&r) & 0xffff) << 32 | s,
						 __ATOMIC_RELEASE);
				__atomic_fetch_add(&p->word, 1ull << 32, __ATOMIC_RELEASE);
			} else if (strcmp(t->mode, "held-leases") == 0) {
				/* "Another tracer" whose lease ends in centuries, taken back
				 * whenever it is broken or released. */
				uint64_t lease = STB_ABI_LEASE_ENCODE(UINT64_MAX >> 1, 0x4242);
				if (__atomic_load_n(&p->trace, __ATOMIC_RELAXED) != lease)
					__atomic_store_n(&p->trace, lease, __ATOMIC_RELEASE);
			} else if (strcmp(t->mode, "never-settle") == 0) {
				/* Suspended, but a new run every time it is looked at. */
				__atomic_fetch_add(&p->word, 1ull << 32, __ATOMIC_RELEASE);
			} else if (strcmp(t->mode, "rewrite") == 0) {
				uint64_t *w = (uint64_t *)p;
				w[ht_rand(&r) % (STB_ABI_ENTRY_SIZE / 8)] = ht_rand(&r);
				if ((ht_rand(&r) & 1023) == 0) {
					/* The header's counters (slot_hwm .. monitor_ns): what a
					 * reader re-reads after its check. */
					uint64_t *hw = (uint64_t *)t->h;
					hw[8 + ht_rand(&r) % 8] = ht_rand(&r);
				}
				if ((ht_rand(&r) & 255) == 0) {
					/* A worker's current: a task's id (running), with
					 * the switching bit, or noise. */
					struct stb_abi_worker *e =
					    (struct stb_abi_worker *)((char *)t->h +
								      STB_ABI_WORKER_OFFSET(ht_rand(&r) % 4));
					uint64_t v = ht_rand(&r);
					e->current = v % 3 == 0   ? p->id
						     : v % 3 == 1 ? p->id | STB_ABI_CURRENT_SWITCHING
								  : v;
				}
			}
		}
	}
	return NULL;
}

static int ht_threads(struct ht *t, bool spin)
{
	if (!spin)
		t->worker_tid = (uint32_t)syscall(SYS_gettid); /* main: blocked reading stdin */
	else if (pthread_create(&t->worker, NULL, ht_spin, t) != 0)
		return -1;
	while (!__atomic_load_n(&t->worker_tid, __ATOMIC_ACQUIRE))
		usleep(100);
	struct stb_abi_worker *w =
	    (struct stb_abi_worker *)((char *)t->h + STB_ABI_WORKER_OFFSET(0));
	w->tid = t->worker_tid;
	w->state = STB_WORKER_RUNNING;
	w->current = 0xdeadbeefull << 32;
	t->h->nworkers = 1;
	return 0;
}

/* Worker w's entry names current (abi.h, "Running"), on thread tid; the
 * header counts at least w + 1 workers. */
static void ht_name(struct ht *t, uint32_t w, uint64_t current, uint32_t tid)
{
	struct stb_abi_worker *e =
	    (struct stb_abi_worker *)((char *)t->h + STB_ABI_WORKER_OFFSET(w));
	e->tid = tid;
	e->state = STB_WORKER_RUNNING;
	e->current = current;
	if (t->h->nworkers < w + 1)
		t->h->nworkers = w + 1;
}

static const char *ht_mode;

static void ht_unlink_lib(void)
{
	char file[64];
	snprintf(file, sizeof(file), "/tmp/stb-hostile-lib-%d.so", (int)getpid());
	unlink(file);
}

/* A module dlopen'ed from a memfd or a file, then truncated under its
 * mapping. Returns the address of its function hostile_lib_fn, or 0. */
static uint64_t ht_truncated_lib(const char *path)
{
	int src = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (src < 0 || fstat(src, &st) != 0) {
		perror("hostile_target: the library");
		return 0;
	}
	/* truncated-elf: a memfd; truncated-file: a file of its own, which a
	 * reader can open by the path in /proc/PID/maps. */
	char file[64];
	snprintf(file, sizeof(file), "/tmp/stb-hostile-lib-%d.so", (int)getpid());
	int fd = strcmp(ht_mode, "truncated-file") == 0
		     ? open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
		     : memfd_create("hostile_lib.so", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[65536];
	ssize_t n;
	while ((n = read(src, buf, sizeof(buf))) > 0)
		if (write(fd, buf, (size_t)n) != n)
			return 0;
	close(src);
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	void *lib =
	    dlopen(strcmp(ht_mode, "truncated-file") == 0 ? file : self, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "hostile_target: dlopen: %s\n", dlerror());
		return 0;
	}
	void *fn = dlsym(lib, "hostile_lib_fn");
	/* Every page but the first is gone now: a reader that maps the file and
	 * parses it in place faults there. This process never runs it again. */
	if (!fn || ftruncate(fd, 4096) != 0)
		return 0;
	if (strcmp(ht_mode, "truncated-file") == 0)
		atexit(ht_unlink_lib);
	return (uint64_t)(uintptr_t)fn;
}

/* Builds the table of mode. 0, or -1 for an unknown mode. */
static int ht_build(struct ht *t, const char *lib)
{
	const char *m = t->mode;
	uint64_t size = STB_ABI_TABLE_SIZE(HT_CAP);
	uint64_t r = 0x9e3779b97f4a7c15ull;
	if (strcmp(m, "huge-capacity") == 0) {
		/* 16 M slots (4x STB_ABI_MAX_CAPACITY), consistent sizes, sparse. */
		uint32_t cap = STB_ABI_MAX_CAPACITY * 4;
		if (ht_table(t, cap, STB_ABI_TABLE_SIZE(cap), true) != 0)
			return -1;
		t->h->slot_hwm = cap;
		ht_set(t, 0, STB_TASK_SUSPENDED, NULL);
		ht_publish(t);
		return 0;
	}
	if (strcmp(m, "max-capacity") == 0) {
		/* The largest table allowed, 1 GiB, empty but for two tasks at both
		 * ends, every slot claimed in use. */
		uint32_t cap = STB_ABI_MAX_CAPACITY;
		if (ht_table(t, cap, STB_ABI_TABLE_SIZE(cap), true) != 0)
			return -1;
		ht_set(t, 0, STB_TASK_SUSPENDED, NULL);
		t->h->slot_hwm = cap;
		ht_publish(t);
		/* The last slot, written through a mapping of its own page. */
		long page = sysconf(_SC_PAGESIZE);
		off_t off = (off_t)(STB_ABI_TASK_OFFSET(cap - 1) & ~(uint64_t)(page - 1));
		char *last =
		    mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, off);
		if (last == MAP_FAILED)
			return -1;
		struct stb_abi_task *p =
		    (struct stb_abi_task *)(last + (STB_ABI_TASK_OFFSET(cap - 1) - (uint64_t)off));
		p->id = (1ull << 32) | (cap - 1);
		p->word = STB_TASK_CREATED;
		return 0;
	}
	bool seal = strcmp(m, "unsealed") != 0 && strcmp(m, "truncate") != 0;
	bool many = strcmp(m, "held-leases") == 0 || strcmp(m, "never-settle") == 0 ||
		    strcmp(m, "switching") == 0;
	uint32_t cap = many ? HT_MANY + 16 : HT_CAP;
	size = STB_ABI_TABLE_SIZE(cap);
	if (strcmp(m, "small-memfd") == 0)
		size = STB_ABI_TABLE_SIZE(16); /* the header claims more than it holds */
	if (ht_table(t, cap, size, seal) != 0)
		return -1;
	struct stb_abi_header *h = t->h;
	bool threads = true, rewriter = false;
	uint32_t ntasks = 256;
	unsigned state = STB_TASK_SUSPENDED;
	if (strcmp(m, "bad-magic") == 0) {
		threads = false;
	} else if (strcmp(m, "bad-version") == 0) {
		h->abi_version = 99;
	} else if (strcmp(m, "bad-entry-size") == 0) {
		h->entry_size = 64;
	} else if (strcmp(m, "bad-header-entries") == 0) {
		h->header_entries = 0;
	} else if (strcmp(m, "bad-max-workers") == 0) {
		h->max_workers = 1u << 30;
	} else if (strcmp(m, "bad-table-size") == 0) {
		h->table_size = UINT64_MAX;
	} else if (strcmp(m, "bad-backing") == 0) {
		h->backing = STB_ABI_BACKING_BPF_MAP;
	} else if (strcmp(m, "small-memfd") == 0) {
		ntasks = 8;
	} else if (strcmp(m, "nworkers-beyond") == 0) {
		state = STB_TASK_READY; /* and named by worker 0 (below) */
	} else if (strcmp(m, "threads") == 0) {
		if (ht_many_threads(t) != 0)
			return -1;
		ntasks = 16;
	} else if (strcmp(m, "deep-running") == 0) {
		if (ht_deep(t) != 0)
			return -1;
		ht_publish(t);
		return 0;
	} else if (strcmp(m, "changing-ids") == 0 || strcmp(m, "rewrite") == 0) {
		ntasks = 1024;
		rewriter = true;
	} else if (many) {
		ntasks = HT_MANY;
		rewriter = strcmp(m, "switching") != 0;
	} else if (strcmp(m, "unsealed") != 0 && strcmp(m, "truncate") != 0 &&
		   strcmp(m, "hwm-beyond") != 0 && strcmp(m, "bad-states") != 0 &&
		   strcmp(m, "bad-wait-kinds") != 0 && strcmp(m, "bad-workers") != 0 &&
		   strcmp(m, "wild-stacks") != 0 && strcmp(m, "names") != 0 &&
		   strcmp(m, "running") != 0 && strcmp(m, "cfi-loop") != 0 &&
		   strcmp(m, "truncated-elf") != 0 && strcmp(m, "truncated-file") != 0) {
		return -1;
	}
	/* A thread on a CPU only where running tasks need one. */
	bool spin = strcmp(m, "running") == 0 || strcmp(m, "nworkers-beyond") == 0;
	if (threads && ht_threads(t, spin) != 0)
		return -1;
	bool truncated = strcmp(m, "truncated-elf") == 0 || strcmp(m, "truncated-file") == 0;
	uint64_t lib_fn = truncated ? ht_truncated_lib(lib) : 0;
	if (truncated && !lib_fn)
		return -1;
	static const char *const names[] = {
	    "\x1b[2J\x1b[31mred\x07",
	    "line\nbreak\r\n",
	    "quote\"back\\slash",
	    "\xff\xfe\xc0\x80 invalid",
	    "\xc2\x9b"
	    "8-bit CSI",
	    "\xe2\x80\xae"
	    "RLO",
	    "\",\"comm\":\"x\",\"complete\":0,\"",
	    "%s%n%x",
	};
	for (uint32_t s = 0; s < ntasks; s++) {
		ht_set(t, s, state, strcmp(m, "names") == 0 ? names[s % 8] : NULL);
		struct stb_abi_task *p = ht_task(t, s);
		if (strcmp(m, "bad-states") == 0)
			p->word = (uint64_t)(s & 0xff) << 32 | (STB_TASK_NSTATES + s % 247);
		if (strcmp(m, "bad-wait-kinds") == 0)
			p->wait_word =
			    STB_ABI_WAIT_WORD(STB_WAIT_NKINDS + s % 240, 0xff, 0xffff, -1);
		if (strcmp(m, "bad-workers") == 0 && s % 4 != 3) {
			/* A bthread's word that says running (only a worker's current
			 * may), or a pthread's with a wild worker and thread. */
			p->word = STB_TASK_RUNNING;
			p->worker = s % 2 ? 0xffffffffu : STB_ABI_MAX_WORKERS + s;
			p->tid = s % 3 == 0 ? 1 : s % 3 == 1 ? 0 : 0x7fffffff;
			p->flags = s % 5 == 0 ? STB_ABI_TASK_F_PTHREAD : 0;
		} else if (strcmp(m, "bad-workers") == 0) {
			/* Ready, and named by a worker entry whose thread is no
			 * thread of this process or none: running nowhere. (About
			 * to run forever is mode switching's.) */
			p->word = STB_TASK_READY;
			uint32_t tid = s % 3 == 0 ? 1 : s % 3 == 1 ? 0 : 0x7fffffff;
			ht_name(t, 1 + s / 4 % (STB_ABI_MAX_WORKERS - 1), p->id, tid);
		}
		if (strcmp(m, "running") == 0) {
			/* Running where a worker names it (the first 16, each on a
			 * worker of its own, all the spinner's thread); the others
			 * ready: garbage stacks to copy. */
			p->word = STB_TASK_READY;
			if (s < 16)
				ht_name(t, s, p->id, t->worker_tid);
		}
		if (strcmp(m, "wild-stacks") == 0) {
			uint64_t lo = p->stack_lo;
			switch (s % 12) {
			case 0:
				p->sp = 0;
				break;
			case 1:
				p->sp = 63;
				break;
			case 2:
				p->sp = lo - 8;
				break;
			case 3:
				p->sp = p->stack_hi + 4096;
				break;
			case 4:
				p->stack_hi = UINT64_MAX;
				break;
			case 5:
				p->stack_lo = p->stack_hi + 1;
				break;
			case 6:
				p->sp = 0xffff800000001000ull;
				p->stack_hi = UINT64_MAX;
				p->stack_lo = 0;
				break;
			case 7:
				p->ip = ht_rand(&r);
				p->bp = ht_rand(&r);
				break;
			case 8:
				p->ip = (uint64_t)(uintptr_t)&memcpy;
				break;
			case 9:
				p->sp = lo + 8;
				p->ip = 0;
				break;
			case 10:
				p->stack_lo = 0x1000;
				p->stack_hi = 0x2000;
				p->sp = 0x1800;
				break;
			default:
				p->word = STB_TASK_READY;
				break;
			}
		}
		if (strcmp(m, "cfi-loop") == 0)
			p->ip = (uint64_t)(uintptr_t)&hostile_cfi_loop + 3;
		if (truncated)
			p->ip = lib_fn + 8;
		if (strcmp(m, "switching") == 0) {
			/* Leaving its worker forever, or about to run forever: a
			 * worker names it with the switching bit. */
			p->word = (uint64_t)1 << 32 | (s % 2 ? STB_TASK_READY : STB_TASK_SUSPENDING);
			if (s % 2 && s / 2 < STB_ABI_MAX_WORKERS)
				ht_name(t, s / 2, p->id | STB_ABI_CURRENT_SWITCHING, t->worker_tid);
		}
		if (strcmp(m, "nworkers-beyond") == 0 && s == 0)
			ht_name(t, 0, p->id, t->worker_tid);
	}
	if (strcmp(m, "hwm-beyond") == 0)
		h->slot_hwm = UINT64_MAX;
	if (strcmp(m, "nworkers-beyond") == 0)
		h->nworkers = 100000;
	if (strcmp(m, "rewrite") == 0)
		h->nworkers = 4; /* whose currents the rewriter changes */
	if (strcmp(m, "bad-magic") == 0)
		h->magic = 0x5453424e4f4e4f4eull; /* "NONONBTS" */
	else
		ht_publish(t);
	if (rewriter && pthread_create(&t->rewriter, NULL, ht_rewrite, t) != 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	static struct ht t;
	if (argc < 2) {
		fprintf(stderr, "usage: hostile_target MODE [LIB]\n");
		return 64;
	}
	t.mode = ht_mode = argv[1];
	t.fd = -1;
	t.stack = malloc(HT_STACK);
	uint64_t r = 0x243f6a8885a308d3ull;
	for (size_t i = 0; t.stack && i < HT_STACK / 8; i++)
		((uint64_t *)t.stack)[i] =
		    i % 3 ? ht_rand(&r) : (uint64_t)(uintptr_t)t.stack + i * 8;
	if (strcmp(t.mode, "names") == 0)
		prctl(PR_SET_NAME, "\x1b]0;pwn\x07\"\n\xff", 0, 0, 0);
	if (!t.stack || ht_build(&t, argc > 2 ? argv[2] : NULL) != 0) {
		fprintf(stderr, "hostile_target: cannot build mode %s\n", t.mode);
		return 1;
	}
	printf("pid %d\nready\n", (int)getpid());
	fflush(stdout);
	if (strcmp(t.mode, "truncate") == 0) {
		/* Shrink the table under every mapping of it, now and then. */
		usleep(20000);
		if (ftruncate(t.fd, 0) != 0)
			perror("hostile_target: truncate");
	}
	char line[64];
	while (fgets(line, sizeof(line), stdin))
		;
	t.stop = 1;
	return 0;
}
