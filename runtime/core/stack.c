/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread stacks: carved from large slabs, each stack with a guard page
 * below its usable part (an overflow faults with SIGSEGV instead of
 * corrupting memory), pooled per size class and reused. A worker keeps a few
 * free stacks of each class to itself (no lock, no shared line on most
 * starts and exits) and trades them with the pool a handful at a time.
 *
 * Colors. A stack's first frame does not start at the end of its mapping but
 * up to STB_STACK_COLOR_SPAN below it, at another cache-line offset for every
 * stack carved: the top-of-stack lines of many bthreads, the lines every
 * switch touches, then spread over 32 of a 64-set L1 cache instead of piling
 * up in the one or two that page-aligned tops share. Each stack has a page
 * more for that (the strides stay whole pages, for the guards), so its usable
 * size stays at least its class's size, and a parked bthread with shallow
 * frames still touches one page.
 *
 * Guard pages and vm.max_map_count. A guard made with mprotect(PROT_NONE)
 * splits the mapping: every guarded stack costs two of the process's
 * vm.max_map_count mappings (65,530 by default), so about 32,000 stacks fit.
 * On Linux 6.13+ madvise(MADV_GUARD_INSTALL) installs guard pages as page
 * table markers without splitting the mapping: a slab of many stacks stays
 * one mapping, and a million small stacks need only a few thousand. The
 * markers survive MADV_DONTNEED, with which cold stacks give their memory
 * back. On older kernels the guards are made with mprotect within a mapping
 * budget (half of vm.max_map_count); beyond it, and whenever a slab cannot be
 * mapped, stb_stack_get fails with EAGAIN and bthread_start_* reports it: a
 * bthread never runs without a stack of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#if defined(STB_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#endif

#define STB_STACK_GUARD 4096u
#define STB_STACK_COLOR_ROOM 4096u /* the page above a class's size for the colors */
#define STB_STACK_COLOR_SPAN 2048u /* a color: 0 .. SPAN - 64 bytes below the top */
#define STB_STACK_COLOR_STEP 192u  /* three lines: all 32 colors before one repeats */
_Static_assert(STB_STACK_COLOR_SPAN <= STB_STACK_COLOR_ROOM && STB_STACK_COLOR_STEP % 64 == 0,
	       "colors are whole cache lines within the room");
#define STB_STACK_WARM_MAX 1024u /* free stacks kept with their memory, per class */
#define STB_STACK_CACHE 16u      /* free stacks a worker keeps per class */
#define STB_STACK_TRADE 8u       /* taken from / given back to the pool at once */
#define STB_SLAB_BYTES (16u << 20) /* a slab holds about this much */

enum guard_mode {
	GUARD_UNKNOWN = 0,
	GUARD_MADVISE = 1,  /* MADV_GUARD_INSTALL: no mapping split */
	GUARD_MPROTECT = 2, /* mprotect: two mappings per stack */
};

struct stack_class {
	struct stb_lock lock;
	struct stb_stack *warm;   /* free stacks that still have their memory (LIFO) */
	struct stb_stack *cold;   /* free stacks whose memory was given back */
	unsigned nwarm;
	char *slab;               /* slab being carved */
	unsigned slab_next, slab_count;
	unsigned carved;          /* stacks carved so far: the next one's color */
	size_t live;              /* stacks handed out and not returned */
} STB_ALIGNED_CL;

static struct stack_class stack_classes[BTHREAD_STACKTYPE_LARGE + 1];
static int guard_mode;                /* enum guard_mode, decided once */
static long map_budget;               /* GUARD_MPROTECT: mappings stacks may use */
static long maps_used;                /* mappings our slabs and guards made (estimate) */
static bool budget_hit;               /* GUARD_MPROTECT: a slab was refused for the budget */
static struct stb_lock mode_lock;
static uint64_t last_complaint_ns;

uint32_t stb_stack_readers;

/* A worker's own free stacks (warm, most recent last), per class. */
struct stack_cache {
	bool on;
	unsigned n[BTHREAD_STACKTYPE_LARGE + 1];
	struct stb_stack *s[BTHREAD_STACKTYPE_LARGE + 1][STB_STACK_CACHE];
};
static __thread struct stack_cache stb_tls_stacks __attribute__((tls_model("initial-exec")));

#if defined(STB_TEST_HOOKS)
/* Test hooks (bthread_test only): force the mprotect guards, set their budget. */
int stb_test_stack_force_mprotect;
long stb_test_stack_map_budget;
#endif

static size_t class_size(unsigned type)
{
	switch (type) {
	case BTHREAD_STACKTYPE_SMALL:
		return 32u << 10;
	case BTHREAD_STACKTYPE_LARGE:
		return 8u << 20;
	default:
		return 1u << 20;
	}
}

static long read_max_map_count(void)
{
	long v = 65530; /* the kernel's default */
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1 || v <= 0)
			v = 65530;
		fclose(f);
	}
	return v;
}

/* Lines of /proc/self/maps (bounded), for the error message. -1 if unknown. */
static long count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	long n = 0;
	int c;
	while ((c = getc(f)) != EOF && n < 100000000)
		n += c == '\n';
	fclose(f);
	return n;
}

/* Decides how guard pages are made, once: can this kernel install guard markers? */
static void decide_guard_mode(void)
{
	stb_lock(&mode_lock);
	if (guard_mode != GUARD_UNKNOWN)
		goto cleanup;
	int mode = GUARD_MPROTECT;
	void *probe = mmap(NULL, 2 * STB_STACK_GUARD, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (probe != MAP_FAILED) {
		if (madvise(probe, STB_STACK_GUARD, MADV_GUARD_INSTALL) == 0)
			mode = GUARD_MADVISE;
		munmap(probe, 2 * STB_STACK_GUARD);
	}
	/* STB_STACK_GUARDS=mprotect: guards as mappings of their own, for
	 * processes to be copied with gdb's gcore, which stops copying a mapping
	 * at its first unreadable page (docs/postmortem.md). */
	const char *want = getenv("STB_STACK_GUARDS");
	if (want && strcmp(want, "mprotect") == 0)
		mode = GUARD_MPROTECT;
	map_budget = read_max_map_count() / 2;
#if defined(STB_TEST_HOOKS)
	if (stb_test_stack_force_mprotect)
		mode = GUARD_MPROTECT;
	if (stb_test_stack_map_budget > 0)
		map_budget = stb_test_stack_map_budget;
#endif
	__atomic_store_n(&guard_mode, mode, __ATOMIC_RELEASE);
cleanup:
	stb_unlock(&mode_lock);
}

/* Says once every 10 s why a stack could not be had. */
static void complain(int err, unsigned type)
{
	uint64_t now = stb_now_ns();
	uint64_t last = __atomic_load_n(&last_complaint_ns, __ATOMIC_RELAXED);
	if (last && now - last < 10000000000ull)
		return;
	if (!__atomic_compare_exchange_n(&last_complaint_ns, &last, now, false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	long max = read_max_map_count();
	long maps = count_maps();
	size_t live = 0;
	for (unsigned c = BTHREAD_STACKTYPE_SMALL; c <= BTHREAD_STACKTYPE_LARGE; c++)
		live += __atomic_load_n(&stack_classes[c].live, __ATOMIC_RELAXED);
	if (__atomic_load_n(&budget_hit, __ATOMIC_RELAXED))
		fprintf(stderr,
			"stb: cannot start a bthread: no %zu KiB stack (%zu stacks in use). This "
			"kernel lacks MADV_GUARD_INSTALL (Linux 6.13+), so each guarded stack costs "
			"2 of vm.max_map_count=%ld mappings, and the budget for stacks (%ld "
			"mappings; half of vm.max_map_count) is used up; the process has %ld mappings. Raise vm.max_map_count "
			"(sysctl -w vm.max_map_count=N) or run fewer bthreads at once.\n",
			class_size(type) >> 10, live, max, map_budget, maps);
	else
		fprintf(stderr,
			"stb: cannot start a bthread: no %zu KiB stack (%s; %zu stacks in use, the "
			"process has %ld of vm.max_map_count=%ld mappings). Raise vm.max_map_count "
			"(sysctl -w vm.max_map_count=N) or the address-space limit, or run fewer "
			"bthreads at once or with smaller stacks (BTHREAD_ATTR_SMALL).\n",
			class_size(type) >> 10, strerror(err), live, maps, max);
}

/* Bytes from one stack's guard to the next one's in a slab of class type. */
static size_t slab_stride(unsigned type)
{
	return STB_STACK_GUARD + class_size(type) + STB_STACK_COLOR_ROOM;
}

/* Maps a new slab for class c. Called with its lock held. 0 or errno. */
static int slab_new(struct stack_class *c, unsigned type)
{
	size_t stride = slab_stride(type);
	unsigned count = (unsigned)(STB_SLAB_BYTES / stride);
	if (count == 0)
		count = 1;
	if (guard_mode == GUARD_MPROTECT) {
		/* One mapping for the slab, two more per guarded stack at worst. */
		long left = map_budget - __atomic_load_n(&maps_used, __ATOMIC_RELAXED) - 1;
		if (left < 2) {
			__atomic_store_n(&budget_hit, true, __ATOMIC_RELAXED);
			return EAGAIN;
		}
		if ((long)count > left / 2)
			count = (unsigned)(left / 2);
	}
	void *m = mmap(NULL, stride * count, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (m == MAP_FAILED)
		return errno == ENOMEM ? EAGAIN : errno;
	__atomic_fetch_add(&maps_used, 1, __ATOMIC_RELAXED);
	c->slab = m;
	c->slab_next = 0;
	c->slab_count = count;
	return 0;
}

/* Carves the next stack of the slab and guards it. Called with the lock held. */
static struct stb_stack *slab_carve(struct stack_class *c, unsigned type, int *err)
{
	if (!c->slab || c->slab_next == c->slab_count) {
		*err = slab_new(c, type);
		if (*err)
			return NULL;
	}
	struct stb_stack *s = malloc(sizeof(*s));
	if (!s) {
		*err = ENOMEM;
		return NULL;
	}
	size_t size = class_size(type) + STB_STACK_COLOR_ROOM;
	char *base = c->slab + (size_t)c->slab_next * slab_stride(type);
	int rc = guard_mode == GUARD_MADVISE ? madvise(base, STB_STACK_GUARD, MADV_GUARD_INSTALL)
					     : mprotect(base, STB_STACK_GUARD, PROT_NONE);
	if (rc != 0) {
		/* Out of mappings (mprotect split) or memory: the slot stays for a retry. */
		*err = errno == ENOMEM ? EAGAIN : errno;
		free(s);
		return NULL;
	}
	if (guard_mode == GUARD_MPROTECT)
		__atomic_fetch_add(&maps_used, 2, __ATOMIC_RELAXED);
	c->slab_next++;
	size_t color = (size_t)c->carved++ * STB_STACK_COLOR_STEP % STB_STACK_COLOR_SPAN;
	s->lo = base + STB_STACK_GUARD;
	s->size = size;
	s->top = (char *)s->lo + size - color;
	s->type = type;
	s->cold = false;
	s->next = NULL;
	return s;
}

struct stb_stack *stb_stack_get(unsigned type)
{
	if (type < BTHREAD_STACKTYPE_SMALL || type > BTHREAD_STACKTYPE_LARGE)
		type = BTHREAD_STACKTYPE_NORMAL;
	struct stack_cache *k = &stb_tls_stacks;
	if (k->n[type]) {
		struct stb_stack *s = k->s[type][--k->n[type]];
		s->next = NULL;
		return s;
	}
	if (STB_UNLIKELY(__atomic_load_n(&guard_mode, __ATOMIC_ACQUIRE) == GUARD_UNKNOWN))
		decide_guard_mode();
	struct stack_class *c = &stack_classes[type];
	int err = 0;
	stb_lock(&c->lock);
	struct stb_stack *s = c->warm;
	if (s) {
		c->warm = s->next;
		c->nwarm--;
		/* A worker takes a few more warm ones for its next starts. */
		while (k->on && k->n[type] < STB_STACK_TRADE - 1 && c->warm) {
			k->s[type][k->n[type]++] = c->warm;
			c->warm = c->warm->next;
			c->nwarm--;
			c->live++;
		}
	} else if ((s = c->cold) != NULL) {
		c->cold = s->next;
	} else {
		s = slab_carve(c, type, &err);
	}
	if (s)
		c->live++;
	stb_unlock(&c->lock);
	if (!s) {
		if (err == EAGAIN)
			complain(ENOMEM, type);
		errno = err == ENOMEM ? ENOMEM : EAGAIN;
		return NULL;
	}
	s->cold = false;
	s->next = NULL;
	return s;
}

static void make_cold(struct stack_class *c, struct stb_stack *s);

/* Gives n stacks of one class back to the pool (most recent first); the
 * pool keeps STB_STACK_WARM_MAX warm, the rest give their memory back. */
static void pool_put(struct stb_stack **v, unsigned n)
{
	struct stack_class *c = &stack_classes[v[0]->type];
	struct stb_stack *cold = NULL;
	stb_lock(&c->lock);
	while (n) {
		struct stb_stack *s = v[--n];
		c->live--;
		if (c->nwarm < STB_STACK_WARM_MAX) {
			s->next = c->warm;
			c->warm = s;
			c->nwarm++;
		} else {
			s->next = cold;
			cold = s;
		}
	}
	stb_unlock(&c->lock);
	while (cold) {
		struct stb_stack *s = cold;
		cold = s->next;
		make_cold(c, s);
	}
}

void stb_stack_put(struct stb_stack *s)
{
	if (!s)
		return;
#if defined(STB_ASAN)
	/* Frames of the finished bthread may have left poisoned redzones. */
	__asan_unpoison_memory_region(s->lo, s->size);
#endif
	struct stack_cache *k = &stb_tls_stacks;
	if (k->on) {
		unsigned *n = &k->n[s->type];
		if (*n == STB_STACK_CACHE) {
			/* Full: the oldest half goes back to the pool. */
			pool_put(k->s[s->type], STB_STACK_TRADE);
			memmove(k->s[s->type], k->s[s->type] + STB_STACK_TRADE,
				(STB_STACK_CACHE - STB_STACK_TRADE) * sizeof(s));
			*n -= STB_STACK_TRADE;
		}
		k->s[s->type][(*n)++] = s;
		return;
	}
	pool_put(&s, 1);
}

void stb_stack_cache_start(void)
{
	stb_tls_stacks.on = true;
}

void stb_stack_cache_flush(void)
{
	struct stack_cache *k = &stb_tls_stacks;
	for (unsigned t = 0; t <= BTHREAD_STACKTYPE_LARGE; t++)
		if (k->n[t]) {
			pool_put(k->s[t], k->n[t]);
			k->n[t] = 0;
		}
}

/* Gives s's memory back and files it with c's cold stacks. */
static void make_cold(struct stack_class *c, struct stb_stack *s)
{
	/*
	 * Give the memory back, keep the range and its guard (guard markers
	 * survive MADV_DONTNEED, mprotect guards are unaffected). A tracer still
	 * copying from this stack (stb_stack_readers) then reads zeros, never a
	 * fault; its validation rejects the copy.
	 */
	madvise(s->lo, s->size, MADV_DONTNEED);
	s->cold = true;
	stb_lock(&c->lock);
	s->next = c->cold;
	c->cold = s;
	stb_unlock(&c->lock);
}
