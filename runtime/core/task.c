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

static struct stb_task *stb_task_chunks[STB_TASK_MAX_CHUNKS];
static uint32_t stb_task_nslots;      /* slots handed out so far */
/* FIFO of freed slots (slot + 1, 0 = none), under stb_task_free_lock. */
static struct stb_lock stb_task_free_lock;
static uint32_t stb_task_free_head, stb_task_free_tail;
static uint32_t stb_task_free_count;
static struct stb_lock stb_task_grow_lock;

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

/*
 * Freed slots are reused oldest first, and only once more than
 * STB_TASK_QUARANTINE of them wait: a finished bthread's result (and its id's
 * staleness) survives at least that many later starts.
 */
static struct stb_task *stb_task_pop_free(void)
{
	struct stb_task *t = NULL;
	if (__atomic_load_n(&stb_task_free_count, __ATOMIC_RELAXED) <= STB_TASK_QUARANTINE)
		return NULL;
	stb_lock(&stb_task_free_lock);
	if (stb_task_free_count > STB_TASK_QUARANTINE) {
		t = stb_task_at(stb_task_free_head - 1);
		stb_task_free_head = t->free_next;
		if (!stb_task_free_head)
			stb_task_free_tail = 0;
		__atomic_store_n(&stb_task_free_count, stb_task_free_count - 1, __ATOMIC_RELAXED);
	}
	stb_unlock(&stb_task_free_lock);
	return t;
}

void stb_task_release(struct stb_task *t)
{
	t->free_next = 0;
	stb_lock(&stb_task_free_lock);
	if (stb_task_free_tail)
		stb_task_at(stb_task_free_tail - 1)->free_next = t->slot + 1;
	else
		stb_task_free_head = t->slot + 1;
	stb_task_free_tail = t->slot + 1;
	__atomic_store_n(&stb_task_free_count, stb_task_free_count + 1, __ATOMIC_RELAXED);
	stb_unlock(&stb_task_free_lock);
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
