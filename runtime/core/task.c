/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Task metadata: a pool of struct stb_task indexed by the slot part of
 * bthread_t, the version scheme that keeps stale ids from aliasing new tasks,
 * the STB gate's slow path, and small shared helpers (lock, clocks).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#if defined(STB_ASAN)
#include <sanitizer/lsan_interface.h>
#endif

#define STB_TASK_CHUNK_SHIFT 10u
#define STB_TASK_CHUNK (1u << STB_TASK_CHUNK_SHIFT)
#define STB_TASK_MAX_CHUNKS 4096u /* 4 Mi slots */
#define STB_TASK_QUARANTINE 4096u

_Static_assert((uint64_t)STB_TASK_MAX_CHUNKS * STB_TASK_CHUNK <= STB_ABI_MAX_SLOTS,
	       "slots leave bit 31 of an id free (abi.h)");
/* Freed slots a worker gathers (or takes) before it locks the free list. */
#define STB_TASK_BATCH 64u

static struct stb_task *stb_task_chunks[STB_TASK_MAX_CHUNKS];
static uint32_t stb_task_nslots;      /* slots handed out so far */
/*
 * Freed slots: a FIFO of chains (slot + 1, 0 = none), under
 * stb_task_free_lock. A chain is up to STB_TASK_BATCH slots linked by
 * free_next; its first task holds the chain's tail, length and the next
 * chain. A worker frees and takes a chain at a time (one lock per
 * STB_TASK_BATCH starts or exits); other threads a slot at a time.
 */
static struct stb_lock stb_task_free_lock;
static uint32_t stb_task_free_head, stb_task_free_tail; /* first tasks of chains */
static uint32_t stb_task_free_count;                    /* slots in the chains */
static struct stb_lock stb_task_grow_lock;

/* A worker's cache: the chain it takes slots from, the one it frees into. */
struct slot_cache {
	bool on;
	uint32_t in, nin;              /* first slot + 1, length */
	uint32_t out, out_tail, nout;  /* first, last slot + 1, length */
};
static __thread struct slot_cache stb_tls_slots __attribute__((tls_model("initial-exec")));

#if defined(STB_TEST_HOOKS)
void (*stb_test_switch_hook)(struct stb_task *t, unsigned state);
#endif

void stb_lock_slow(struct stb_lock *l)
{
	for (int i = 0; i < 64; i++) {
		uint32_t z = 0;
		if (__atomic_load_n(&l->v, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(&l->v, &z, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		stb_cpu_relax();
	}
	while (__atomic_exchange_n(&l->v, 2, __ATOMIC_ACQUIRE) != 0)
		stb_futex_wait(&l->v, 2, NULL);
}

uint64_t stb_abstime_to_mono(const struct timespec *abstime)
{
	if (!abstime)
		return 0;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t rel = (int64_t)(abstime->tv_sec - now.tv_sec) * 1000000000ll +
		      (abstime->tv_nsec - now.tv_nsec);
	uint64_t mono = stb_now_ns();
	if (rel <= 0)
		return mono ? mono : 1;
	return mono + (uint64_t)rel;
}

struct stb_task *stb_task_at(uint32_t slot)
{
	if (slot >= __atomic_load_n(&stb_task_nslots, __ATOMIC_ACQUIRE))
		return NULL;
	struct stb_task *chunk =
		__atomic_load_n(&stb_task_chunks[slot >> STB_TASK_CHUNK_SHIFT], __ATOMIC_ACQUIRE);
	return chunk ? &chunk[slot & (STB_TASK_CHUNK - 1)] : NULL;
}

uint32_t stb_task_slots(void)
{
	return __atomic_load_n(&stb_task_nslots, __ATOMIC_ACQUIRE);
}

/* Initializes a never-used slot. Called with stb_task_grow_lock held. */
static int stb_task_init_slot(struct stb_task *t, uint32_t slot)
{
	memset(t, 0, sizeof(*t));
	t->slot = slot;
	t->join = stb_butex_new();
	t->sleep = stb_butex_new();
	if (!t->join || !t->sleep) {
		stb_butex_free(t->join);
		stb_butex_free(t->sleep);
		return -ENOMEM;
	}
	t->pub = stb_table_task(slot);
	if (!t->pub) {
		t->pub = &t->own;
#if STB_TRACER
		if (stb_table.hdr)
			stb_table_untraceable(slot);
#endif
	}
	return 0;
}

static struct stb_task *stb_task_new_slot(void)
{
	struct stb_task *t = NULL;
	stb_lock(&stb_task_grow_lock);
	uint32_t slot = stb_task_nslots;
	uint32_t ci = slot >> STB_TASK_CHUNK_SHIFT;
	if (ci >= STB_TASK_MAX_CHUNKS) {
		errno = EAGAIN;
		goto cleanup;
	}
	struct stb_task *chunk = stb_task_chunks[ci];
	if (!chunk) {
		/* mmap: zeroed, never freed (ids of finished tasks stay checkable). */
		chunk = mmap(NULL, sizeof(struct stb_task) * STB_TASK_CHUNK, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (chunk == MAP_FAILED) {
			errno = ENOMEM;
			goto cleanup;
		}
#if defined(STB_ASAN)
		/* Tasks hold the only pointers to their butexes and stacks. */
		__lsan_register_root_region(chunk, sizeof(struct stb_task) * STB_TASK_CHUNK);
#endif
		__atomic_store_n(&stb_task_chunks[ci], chunk, __ATOMIC_RELEASE);
	}
	t = &chunk[slot & (STB_TASK_CHUNK - 1)];
	if (stb_task_init_slot(t, slot) != 0) {
		errno = ENOMEM;
		t = NULL;
		goto cleanup;
	}
	__atomic_store_n(&stb_task_nslots, slot + 1, __ATOMIC_RELEASE);
#if STB_TRACER
	if (stb_table.hdr && slot < stb_table.capacity)
		__atomic_store_n(&stb_table.hdr->slot_hwm, (uint64_t)slot + 1, __ATOMIC_RELEASE);
#endif
cleanup:
	stb_unlock(&stb_task_grow_lock);
	return t;
}

/* Appends the chain [first .. tail] of n slots (slot + 1 each) to the FIFO. */
static void chain_put(uint32_t first, uint32_t tail, uint32_t n)
{
	struct stb_task *f = stb_task_at(first - 1);
	f->chain_tail = tail;
	f->chain_len = n;
	f->chain_next = 0;
	stb_lock(&stb_task_free_lock);
	if (stb_task_free_tail)
		stb_task_at(stb_task_free_tail - 1)->chain_next = first;
	else
		stb_task_free_head = first;
	stb_task_free_tail = first;
	__atomic_store_n(&stb_task_free_count, stb_task_free_count + n, __ATOMIC_RELAXED);
	stb_unlock(&stb_task_free_lock);
}

/*
 * Takes the oldest chain, or (whole = false) only its first slot, if at
 * least STB_TASK_QUARANTINE slots still wait after it: a finished bthread's
 * result (and its id's staleness) survives at least that many later exits.
 * Returns the first slot + 1 (0: none) and its length in *n.
 */
static uint32_t chain_take(bool whole, uint32_t *n)
{
	uint32_t first = 0;
	*n = 0;
	if (__atomic_load_n(&stb_task_free_count, __ATOMIC_RELAXED) <= STB_TASK_QUARANTINE)
		return 0;
	stb_lock(&stb_task_free_lock);
	struct stb_task *f = stb_task_free_head ? stb_task_at(stb_task_free_head - 1) : NULL;
	uint32_t want = f && whole ? f->chain_len : 1;
	if (f && stb_task_free_count >= STB_TASK_QUARANTINE + want) {
		first = stb_task_free_head;
		uint32_t rest = f->free_next;
		if (whole || f->chain_len == 1) {
			*n = f->chain_len;
			stb_task_free_head = f->chain_next;
		} else {
			/* The rest of the chain stays first in line. */
			struct stb_task *r = stb_task_at(rest - 1);
			r->chain_tail = f->chain_tail;
			r->chain_len = f->chain_len - 1;
			r->chain_next = f->chain_next;
			if (stb_task_free_tail == first)
				stb_task_free_tail = rest;
			stb_task_free_head = rest;
			*n = 1;
		}
		if (!stb_task_free_head)
			stb_task_free_tail = 0;
		__atomic_store_n(&stb_task_free_count, stb_task_free_count - *n, __ATOMIC_RELAXED);
	}
	stb_unlock(&stb_task_free_lock);
	return first;
}

/* A freed slot to reuse, or NULL (then a new slot is carved). */
static struct stb_task *stb_task_pop_free(void)
{
	struct slot_cache *c = &stb_tls_slots;
	uint32_t n;
	if (c->on && !c->nin)
		c->in = chain_take(true, &c->nin);
	if (!c->on || !c->nin) {
		/* One at a time (no whole chain may go yet: the quarantine). */
		uint32_t s = chain_take(false, &n);
		return s ? stb_task_at(s - 1) : NULL;
	}
	struct stb_task *t = stb_task_at(c->in - 1);
	c->in = t->free_next;
	c->nin--;
	return t;
}

void stb_task_release(struct stb_task *t)
{
	struct slot_cache *c = &stb_tls_slots;
	uint32_t s = t->slot + 1;
	t->free_next = 0;
	if (!c->on) {
		chain_put(s, s, 1);
		return;
	}
	if (c->nout)
		stb_task_at(c->out_tail - 1)->free_next = s;
	else
		c->out = s;
	c->out_tail = s;
	if (++c->nout == STB_TASK_BATCH) {
		chain_put(c->out, c->out_tail, c->nout);
		c->nout = 0;
	}
}

void stb_task_cache_start(void)
{
	stb_tls_slots.on = true;
}

void stb_task_cache_flush(void)
{
	struct slot_cache *c = &stb_tls_slots;
	if (c->nout) {
		chain_put(c->out, c->out_tail, c->nout);
		c->nout = 0;
	}
	if (c->nin) {
		/* Taken but not used: back to the end of the line (they are the
		 * oldest, but the quarantine holds all the same). */
		uint32_t tail = c->in;
		for (uint32_t i = 1; i < c->nin; i++)
			tail = stb_task_at(tail - 1)->free_next;
		chain_put(c->in, tail, c->nin);
		c->nin = 0;
	}
}

struct stb_task *stb_task_alloc(const bthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	struct stb_task *t = stb_task_pop_free();
	if (!t) {
		t = stb_task_new_slot();
		if (!t)
			return NULL;
	}
	uint32_t version = t->version + 1;
	if (version == 0) /* keep ids non-zero even for slot 0 after wrap */
		version = 1;
	__atomic_store_n(&t->version, version, __ATOMIC_RELEASE);
	t->id = ((bthread_t)version << 32) | t->slot;
	t->fn = fn;
	t->arg = arg;
	t->exit_ret = NULL;
	t->stack = NULL;
	t->attr = *attr;
	t->attr.name[sizeof(t->attr.name) - 1] = '\0';
	t->tag = attr->tag >= 0 ? attr->tag : BTHREAD_TAG_DEFAULT;
	t->flags = (attr->flags & BTHREAD_NOSIGNAL) ? STB_TASK_F_NOSIGNAL : 0;
	if (attr->flags & BTHREAD_LOG_CONTEXT_SWITCH)
		t->flags |= STB_TASK_F_LOG_SWITCH;
	if (attr->stack_type == BTHREAD_STACKTYPE_PTHREAD)
		t->flags |= STB_TASK_F_WORKER_STACK;
	__atomic_store_n(&t->stopped, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t->interrupted, 0, __ATOMIC_RELAXED);
	t->about_to_quit = false;
	t->wait_butex = NULL;
	t->waiter = NULL;
	t->next = NULL;
	t->yield_published = false;
	t->keytable = NULL;
	t->span = NULL;
	t->cpu_ns = 0;
#if STB_TRACER
	/* Tag, creator and stack bounds are the caller's to publish once they
	 * are known, and then CREATED: until that state the entry still shows
	 * the slot's previous occupant finished (or the slot unused), so no
	 * reader takes the previous occupant's tag or creator for this task's.
	 * The stack bounds are valid from the first run (abi.h). */
	struct stb_abi_task *p = t->pub;
	__atomic_store_n(&p->id, stb_task_id(t), __ATOMIC_RELAXED);
	__atomic_store_n(&p->since_ns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&p->wait_word, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&p->execq, 0, __ATOMIC_RELAXED);
	p->flags = (t->flags & STB_TASK_F_WORKER_STACK) ? STB_ABI_TASK_F_WORKER_STACK : 0;
	/* memcpy of the bounded array: attr names are at most 31 bytes. */
	memcpy(p->name, t->attr.name, sizeof(t->attr.name));
	_Static_assert(sizeof(t->attr.name) <= sizeof(p->name), "task name fits the table");
#endif
	return t;
}

struct stb_task *stb_task_lookup(bthread_t id)
{
	uint32_t version = (uint32_t)(id >> 32);
	if (version == 0)
		return NULL;
	struct stb_task *t = stb_task_at((uint32_t)id);
	if (!t)
		return NULL;
	/* Issued ids have version <= the slot's current version. */
	if ((int32_t)(__atomic_load_n(&t->version, __ATOMIC_ACQUIRE) - version) < 0)
		return NULL;
	return t;
}

struct stb_task *stb_task_live(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	if (!t)
		return NULL;
	uint32_t v = (uint32_t)(id >> 32);
	if (__atomic_load_n(&t->version, __ATOMIC_ACQUIRE) != v)
		return NULL;
	/* The join butex holds the version of the last occupant that finished. */
	int fin = __atomic_load_n(&t->join->value, __ATOMIC_ACQUIRE);
	if ((int32_t)((uint32_t)fin - v) >= 0)
		return NULL;
	return t;
}

void stb_gate_wait(struct stb_task *t)
{
#if STB_TRACER
	struct stb_abi_task *p = t->pub;
	struct stb_abi_header *h = stb_table.hdr;
	uint64_t start = stb_now_ns(), now = start;
	for (unsigned spins = 0;; spins++) {
		__u64 tr = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE);
		if (tr == 0)
			break;
		uint64_t deadline = STB_ABI_LEASE_DEADLINE(tr);
		now = stb_now_ns();
		if (now >= deadline) {
			/* The tracer is late or dead: break its lease and go on. */
			if (__atomic_compare_exchange_n(&p->trace, &tr, 0, false, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				if (h)
					stb_table_count(&h->gate_giveups, 1);
				break;
			}
			continue;
		}
		if (spins < 200)
			stb_cpu_relax();
		else
			sched_yield();
	}
	now = stb_now_ns(); /* the thread may have slept since it last looked */
	if (h) {
		stb_table_count(&h->gate_waits, 1);
		stb_table_count(&h->gate_wait_ns, now - start);
	}
#else
	(void)t;
#endif
}

/* ---- errno (bthread/errno.h) ---- */

/* errno is redefined by bthread/errno.h to call this; here it is glibc's. */
#undef errno
int *bthread_errno_location(void)
{
	return __errno_location();
}
