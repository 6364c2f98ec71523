/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Execution queues (bthread/execution_queue.h): a wait-free MPSC list of
 * task nodes per queue, the consumer started by the push that finds a queue
 * empty (a bthread, a resident pthread, an executor, or the pusher itself in
 * place), its passes over the tasks (high-priority ones first), cancel,
 * versioned ids with reference counts (address/stop/join), and the node
 * pool. The consumer publishes the queue in its table entry (abi.h execq).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bthread/execution_queue.h"
#include "internal.h"

/* Node status (low 2 bits of state). */
#define NODE_QUEUED 0u
#define NODE_RUNNING 1u
#define NODE_DONE 2u
/* next of a node whose producer has not linked it yet. */
#define NODE_UNLINKED ((struct stb_execq_node *)(intptr_t)-1)

#define EXECQ_CHUNK 256u
#define EXECQ_MAX_CHUNKS 4096u /* a million queues at once */
#define NODE_SLAB 64u
#define NODE_CACHE_MAX 256u

struct stb_execq {
	/* Line 0: producers (abi.h struct stb_abi_execq.pushed first). */
	uint64_t pushed;
	struct stb_execq_node *head;    /* newest task; NULL: no consumer */
	int64_t high_priority;          /* high-priority tasks pushed, not yet passed */
	uint8_t pad0[STB_CACHELINE - 24];
	/* Line 1: the consumer (struct stb_abi_execq.taken). */
	uint64_t taken;
	uint8_t pad1[STB_CACHELINE - 8];
	/* Line 2: references. version << 32 | count: version even while the
	 * id is live, odd once stopped, +2 when the last reference is gone. */
	uint64_t vref;
	bool stopped;
	uint8_t pad2[STB_CACHELINE - 9];
	/* Line 3+: set at start. */
	uint64_t id;
	uint32_t slot;
	stb_execq_run_fn run;
	stb_execq_clear_fn clear;
	void *meta;
	void *user_fn;
	bthread_attr_t attr;
	bool use_pthread;
	bool pthread_started;           /* the starter's (starters follow each other) */
	void *executor;
	stb_execq_submit_fn submit;
	struct stb_butex *join;         /* value: the live id's version; += 2 at the end */
	struct stb_butex *wake;         /* the resident pthread waits here for... */
	struct stb_execq_node *pending; /* ...a first node handed to it */
} STB_ALIGNED_CL;

_Static_assert(offsetof(struct stb_execq, pushed) == offsetof(struct stb_abi_execq, pushed),
	       "queue head is struct stb_abi_execq");
_Static_assert(offsetof(struct stb_execq, taken) == offsetof(struct stb_abi_execq, taken),
	       "queue head is struct stb_abi_execq");

static struct stb_execq **execq_chunks[EXECQ_MAX_CHUNKS];
static uint32_t execq_nslots;          /* slots ever made */
static uint32_t *execq_free;           /* free slots (a stack) */
static uint32_t execq_nfree, execq_free_cap;
static struct stb_lock execq_lock;     /* slots and the free stack */

static inline uint32_t vref_version(uint64_t v)
{
	return (uint32_t)(v >> 32);
}

static inline uint32_t vref_count(uint64_t v)
{
	return (uint32_t)v;
}

static inline uint64_t vref_make(uint32_t version, uint32_t count)
{
	return (uint64_t)version << 32 | count;
}

static struct stb_execq *execq_at(uint32_t slot)
{
	if (slot >= __atomic_load_n(&execq_nslots, __ATOMIC_ACQUIRE))
		return NULL;
	struct stb_execq **chunk = __atomic_load_n(&execq_chunks[slot / EXECQ_CHUNK], __ATOMIC_ACQUIRE);
	return chunk ? __atomic_load_n(&chunk[slot % EXECQ_CHUNK], __ATOMIC_ACQUIRE) : NULL;
}

/* A free slot's queue, or a new one (version 2: ids are never 0). Lock held. */
static struct stb_execq *slot_get_locked(void)
{
	if (execq_nfree)
		return execq_at(execq_free[--execq_nfree]);
	uint32_t slot = execq_nslots;
	if (slot >= EXECQ_CHUNK * EXECQ_MAX_CHUNKS)
		return NULL;
	struct stb_execq **chunk = execq_chunks[slot / EXECQ_CHUNK];
	if (!chunk) {
		chunk = calloc(EXECQ_CHUNK, sizeof(*chunk));
		if (!chunk)
			return NULL;
		__atomic_store_n(&execq_chunks[slot / EXECQ_CHUNK], chunk, __ATOMIC_RELEASE);
	}
	struct stb_execq *q;
	if (posix_memalign((void **)&q, STB_CACHELINE, sizeof(*q)) != 0)
		return NULL;
	memset(q, 0, sizeof(*q));
	q->join = stb_butex_new();
	q->wake = stb_butex_new();
	if (!q->join || !q->wake) {
		stb_butex_free(q->join);
		stb_butex_free(q->wake);
		free(q);
		return NULL;
	}
	q->slot = slot;
	q->vref = vref_make(2, 0);
	q->join->value = 2;
	__atomic_store_n(&chunk[slot % EXECQ_CHUNK], q, __ATOMIC_RELEASE);
	__atomic_store_n(&execq_nslots, slot + 1, __ATOMIC_RELEASE);
	return q;
}

/* Gives q's slot back (its stop call ran). */
static void slot_put(struct stb_execq *q)
{
	stb_lock(&execq_lock);
	if (execq_nfree == execq_free_cap) {
		uint32_t cap = execq_free_cap ? execq_free_cap * 2 : 64;
		uint32_t *f = realloc(execq_free, cap * sizeof(*f));
		if (!f) {
			stb_unlock(&execq_lock);
			return; /* the slot is lost: its memory stays valid */
		}
		execq_free = f;
		execq_free_cap = cap;
	}
	execq_free[execq_nfree++] = q->slot;
	stb_unlock(&execq_lock);
}

/* ---- the node pool: slabs never freed (handles read old nodes) ---- */

struct node_slab {
	struct node_slab *next;
	struct stb_execq_node nodes[NODE_SLAB];
};

static struct stb_lock node_lock;
static struct node_slab *node_slabs;        /* every slab, to keep them reachable */
static struct stb_execq_node *node_global;  /* free nodes shared by all threads */
static __thread struct stb_execq_node *node_cache;
static __thread unsigned node_ncache;
static pthread_key_t node_key;
static pthread_once_t node_key_once = PTHREAD_ONCE_INIT;

/* A thread that exits gives its cached nodes to the others. */
static void node_cache_flush(void *arg)
{
	(void)arg;
	stb_lock(&node_lock);
	while (node_cache) {
		struct stb_execq_node *n = node_cache;
		node_cache = n->next;
		n->next = node_global;
		node_global = n;
	}
	node_ncache = 0;
	stb_unlock(&node_lock);
}

static void node_key_init(void)
{
	if (pthread_key_create(&node_key, node_cache_flush) != 0)
		node_key = (pthread_key_t)-1;
}

struct stb_execq_node *stb_execq_node_alloc(void)
{
	struct stb_execq_node *n = node_cache;
	if (STB_LIKELY(n != NULL)) {
		node_cache = n->next;
		node_ncache--;
		return n;
	}
	pthread_once(&node_key_once, node_key_init);
	if (node_key != (pthread_key_t)-1)
		pthread_setspecific(node_key, (void *)1); /* the flush runs at exit */
	stb_lock(&node_lock);
	for (unsigned i = 0; i < NODE_SLAB && node_global; i++) {
		struct stb_execq_node *g = node_global;
		node_global = g->next;
		g->next = node_cache;
		node_cache = g;
		node_ncache++;
	}
	if (!node_cache) {
		struct node_slab *s;
		if (posix_memalign((void **)&s, STB_CACHELINE, sizeof(*s)) == 0) {
			memset(s, 0, sizeof(*s));
			s->next = node_slabs;
			node_slabs = s;
			for (unsigned i = 0; i < NODE_SLAB; i++) {
				s->nodes[i].next = node_cache;
				node_cache = &s->nodes[i];
			}
			node_ncache = NODE_SLAB;
		}
	}
	stb_unlock(&node_lock);
	n = node_cache;
	if (!n) {
		errno = ENOMEM;
		return NULL;
	}
	node_cache = n->next;
	node_ncache--;
	return n;
}

void stb_execq_node_free(struct stb_execq_node *n)
{
	n->next = node_cache;
	node_cache = n;
	if (++node_ncache <= NODE_CACHE_MAX)
		return;
	/* Half of the cache to the others. */
	stb_lock(&node_lock);
	while (node_ncache > NODE_CACHE_MAX / 2) {
		struct stb_execq_node *g = node_cache;
		node_cache = g->next;
		node_ncache--;
		g->next = node_global;
		node_global = g;
	}
	stb_unlock(&node_lock);
}

/* ---- node state ---- */

static inline struct stb_execq_node *node_next(const struct stb_execq_node *n)
{
	return __atomic_load_n(&n->next, __ATOMIC_ACQUIRE);
}

static inline void node_set_next(struct stb_execq_node *n, struct stb_execq_node *next)
{
	__atomic_store_n(&n->next, next, __ATOMIC_RELEASE);
}

/* Queued -> running: true when the consumer may run it (not cancelled). */
static bool node_take(struct stb_execq_node *n)
{
	uint64_t s = __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
	return (s & 3u) == NODE_QUEUED &&
	       __atomic_compare_exchange_n(&n->state, &s, (s & ~3ull) | NODE_RUNNING, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void node_set_done(struct stb_execq_node *n)
{
	/* Only a queued node changes under us (cancel: to done as well). */
	uint64_t s = __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
	__atomic_store_n(&n->state, (s & ~3ull) | NODE_DONE, __ATOMIC_RELEASE);
}

int stb_execq_cancel(struct stb_execq_node *n, int64_t version)
{
	uint64_t s = __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
	for (;;) {
		if ((s >> 2) != (uint64_t)version)
			return -1; /* recycled: that task is long done */
		if ((s & 3u) == NODE_RUNNING)
			return 1;
		if ((s & 3u) == NODE_DONE)
			return -1;
		if (__atomic_compare_exchange_n(&n->state, &s, (s & ~3ull) | NODE_DONE, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return 0;
	}
}

/*
 * Destroys n's task with clear (its queue's, read before the queue could end:
 * a consumer that emptied its queue may give back its last node after
 * another consumer finished the queue and its slot began a new one) and
 * gives n back with a new version (handles go stale).
 */
static void node_return(stb_execq_clear_fn clear, struct stb_execq_node *n)
{
	if (!n->stop)
		clear(n);
	n->q = NULL;
	n->stop = 0;
	uint64_t s = __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
	__atomic_store_n(&n->state, ((s >> 2) + 1) << 2 | NODE_QUEUED, __ATOMIC_RELEASE);
	stb_execq_node_free(n);
}

/* ---- what the consumer publishes (abi.h execq) ---- */

static uint64_t publish(struct stb_execq *q)
{
#if STB_TRACER
	struct stb_task *t = stb_task_current();
	if (!t)
		return 0;
	uint64_t prev = __atomic_load_n(&t->pub->execq, __ATOMIC_RELAXED);
	__atomic_store_n(&t->pub->execq, (uint64_t)(uintptr_t)q, __ATOMIC_RELEASE);
	return prev;
#else
	(void)q;
	return 0;
#endif
}

static void unpublish(uint64_t prev)
{
#if STB_TRACER
	struct stb_task *t = stb_task_current();
	if (t)
		__atomic_store_n(&t->pub->execq, prev, __ATOMIC_RELEASE);
#else
	(void)prev;
#endif
}

/* ---- the passes ---- */

/* The consumer went past a task (run or cancelled): its own counter. */
static inline void taken_add(struct stb_execq *q, uint64_t n)
{
	__atomic_store_n(&q->taken, __atomic_load_n(&q->taken, __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

void stb_execq_iter_next(struct stb_execq_iter *it)
{
	if (!stb_execq_iter_valid(it))
		return;
	if (it->cur->iterated)
		it->cur = node_next(it->cur);
	/* A normal pass ends when a high-priority task is pushed (it is then at
	 * most one task late). */
	if (!it->high_priority && __atomic_load_n(&it->q->high_priority, __ATOMIC_RELAXED) > 0) {
		it->should_break = true;
		return;
	}
	while (it->cur && !it->cur->stop) {
		struct stb_execq_node *n = it->cur;
		if ((bool)n->high_priority == it->high_priority && !n->iterated) {
			n->iterated = 1;
			it->niterated++;
			taken_add(it->q, 1);
			if (node_take(n))
				return; /* run it */
			/* cancelled: passed all the same */
		}
		it->cur = node_next(n);
	}
}

/* The end of a pass: the tasks of its kind it went past are done (a
 * high-priority one may sit amid normal ones and stay queued a while). */
static void iter_fini(struct stb_execq_iter *it)
{
	if (it->stopped)
		return;
	for (struct stb_execq_node *n = it->head; n && n != it->cur; n = node_next(n))
		if (n->iterated && (bool)n->high_priority == it->high_priority)
			node_set_done(n);
	struct stb_execq_node *c = it->cur;
	if (it->should_break && c && (bool)c->high_priority == it->high_priority && c->iterated)
		node_set_done(c);
}

/* One pass from head. ESTOP when head is the stop node (the stopped call ran). */
static int execq_pass(struct stb_execq *q, struct stb_execq_node *head, bool high_priority,
		      int *niterated)
{
	if (head->stop) {
		head->iterated = 1;
		node_set_done(head);
		struct stb_execq_iter it = {.q = q, .stopped = true};
		q->run(q->meta, q->user_fn, &it);
		if (niterated)
			*niterated = 0;
		return ESTOP;
	}
	struct stb_execq_iter it = {.cur = head, .head = head, .q = q,
				    .high_priority = high_priority};
	stb_execq_iter_next(&it);
	if (stb_execq_iter_valid(&it))
		q->run(q->meta, q->user_fn, &it);
	iter_fini(&it);
	/* Counted even when every task it found was cancelled: the
	 * high-priority count must drop by what the pass went past. */
	if (niterated)
		*niterated = it.niterated;
	return 0;
}

/*
 * The consumer's end of a batch at tail: with no new task, leaves the queue
 * empty (false) -- or keeps tail as head when has_unpassed (true: another
 * pass). With new tasks, links them after tail in push order, sets *new_tail
 * to the newest and returns true.
 */
static bool more_tasks(struct stb_execq *q, struct stb_execq_node *tail,
		       struct stb_execq_node **new_tail, bool has_unpassed)
{
	struct stb_execq_node *expected = tail;
	if (__atomic_compare_exchange_n(&q->head, &expected, has_unpassed ? tail : NULL, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return has_unpassed;
	/* expected: the newest task. Reverse the producers' list down to tail. */
	*new_tail = expected;
	struct stb_execq_node *rev = NULL, *p = expected;
	do {
		struct stb_execq_node *older;
		unsigned spins = 0;
		/* Its producer swapped head and is about to link it. */
		while ((older = node_next(p)) == NODE_UNLINKED) {
			if (++spins < 64)
				stb_cpu_relax();
			else
				sched_yield();
		}
		node_set_next(p, rev);
		rev = p;
		p = older;
	} while (p != tail);
	node_set_next(tail, rev);
	return true;
}

/*
 * Runs the tasks from head (the consumer's first node) until the queue is
 * empty. Returns true when it ran the stop call: the queue is finished.
 */
static bool execq_consume(struct stb_execq *q, struct stb_execq_node *head)
{
	const stb_execq_clear_fn clear = q->clear;
	struct stb_execq_node *tail = NULL;
	bool finished = false;
	for (;;) {
		if (head->iterated) {
			struct stb_execq_node *next = node_next(head);
			node_return(clear, head);
			head = next;
		}
		int rc;
		if (__atomic_load_n(&q->high_priority, __ATOMIC_RELAXED) > 0) {
			int n = 0;
			rc = execq_pass(q, head, true, &n);
			__atomic_fetch_sub(&q->high_priority, n, __ATOMIC_RELAXED);
			if (n == 0)
				sched_yield(); /* counted, not linked yet */
		} else {
			rc = execq_pass(q, head, false, NULL);
		}
		if (rc == ESTOP)
			finished = true;
		/* Give back the passed nodes up to the first unpassed (or last) one. */
		struct stb_execq_node *next;
		while ((next = node_next(head)) != NULL && head->iterated) {
			node_return(clear, head);
			head = next;
		}
		if (!tail)
			for (tail = head; node_next(tail); tail = node_next(tail))
				;
		if (!more_tasks(q, tail, &tail, !head->iterated)) {
			node_return(clear, head); /* q may be another queue's by now */
			return finished;
		}
	}
}

/* After the stop call ran: joiners return, the slot is free again. */
static void execq_finish(struct stb_execq *q)
{
	__atomic_fetch_add(&q->join->value, 2, __ATOMIC_RELEASE);
	stb_butex_wake(q->join, true);
	slot_put(q);
}

/* A consumer bthread (or an executor's call): runs until the queue is empty. */
static void *execq_consumer(void *arg)
{
	struct stb_execq_node *head = arg;
	struct stb_execq *q = head->q;
	uint64_t prev = publish(q);
	bool finished = execq_consume(q, head);
	unpublish(prev);
	if (finished)
		execq_finish(q);
	return NULL;
}

/* The tracer's registration of a pthread (weak: absent without it). */
bthread_t bthread_init_for_pthread_stack_trace(void) __attribute__((weak));

/* The resident pthread of a use_pthread queue: consumes, then waits for the
 * next first node, until the stop call ran. */
static void *execq_pthread_main(void *arg)
{
	struct stb_execq_node *head = arg;
	struct stb_execq *q = head->q;
	pthread_setname_np(pthread_self(), "execution_queue");
	if (bthread_init_for_pthread_stack_trace)
		bthread_init_for_pthread_stack_trace(); /* a task entry: tracers see it */
	uint64_t prev = publish(q);
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_EXECQ, 0, 0, 0),
				     .object = (uint64_t)(uintptr_t)q};
	while (!execq_consume(q, head)) {
		for (;;) {
			int v = __atomic_load_n(&q->wake->value, __ATOMIC_ACQUIRE);
			head = __atomic_exchange_n(&q->pending, NULL, __ATOMIC_ACQ_REL);
			if (head)
				break;
			stb_butex_wait_mono(q->wake, v, 0, &why);
		}
	}
	unpublish(prev);
	execq_finish(q);
	return NULL;
}

/* Starts the consumer of q at head; runs it here when nothing else can. */
static void consumer_start(struct stb_execq *q, struct stb_execq_node *head)
{
	if (q->executor) {
		if (q->submit(q->executor, execq_consumer, head) != 0)
			execq_consumer(head);
		return;
	}
	if (q->use_pthread) {
		if (q->pthread_started) {
			__atomic_store_n(&q->pending, head, __ATOMIC_RELEASE);
			__atomic_fetch_add(&q->wake->value, 1, __ATOMIC_RELEASE);
			stb_butex_wake(q->wake, false);
			return;
		}
		pthread_t th;
		if (pthread_create(&th, NULL, execq_pthread_main, head) != 0) {
			execq_consumer(head);
			return;
		}
		pthread_detach(th);
		q->pthread_started = true;
		return;
	}
	/* In the background: the code after the push may be urgent (an unlock). */
	bthread_t tid;
	if (bthread_start_background(&tid, &q->attr, execq_consumer, head) != 0)
		execq_consumer(head);
}

void stb_execq_push(struct stb_execq *q, struct stb_execq_node *n, bool high_priority,
		    bool in_place)
{
	n->iterated = 0;
	n->high_priority = high_priority;
	n->in_place = in_place;
	__atomic_store_n(&n->next, NODE_UNLINKED, __ATOMIC_RELAXED);
	if (!n->stop)
		__atomic_fetch_add(&q->pushed, 1, __ATOMIC_RELAXED);
	/* Counted before it is linked: a consumer that sees the count and not
	 * the task yields until it is there. */
	if (high_priority)
		__atomic_fetch_add(&q->high_priority, 1, __ATOMIC_RELAXED);
	struct stb_execq_node *prev = __atomic_exchange_n(&q->head, n, __ATOMIC_ACQ_REL);
	if (prev) {
		node_set_next(n, prev);
		return;
	}
	/* The queue was empty: this push starts its consumer. */
	node_set_next(n, NULL);
	n->q = q;
	if (in_place) {
		uint64_t prevq = publish(q);
		int niterated = 0;
		execq_pass(q, n, high_priority, &niterated);
		if (high_priority)
			__atomic_fetch_sub(&q->high_priority, niterated, __ATOMIC_RELAXED);
		struct stb_execq_node *tail = n;
		const stb_execq_clear_fn clear = q->clear;
		bool more = more_tasks(q, n, &tail, !n->iterated);
		unpublish(prevq);
		if (!more) {
			node_return(clear, n);
			return;
		}
	}
	consumer_start(q, n);
}

/* ---- ids and references ---- */

/* q's references dropped to 0 for good: its stop call is queued last. */
static void execq_recycle(struct stb_execq *q)
{
	struct stb_execq_node *n;
	while (!(n = stb_execq_node_alloc()))
		bthread_usleep(1000);
	n->stop = 1;
	stb_execq_push(q, n, false, false);
}

void stb_execq_release(struct stb_execq *q)
{
	uint64_t v = __atomic_fetch_sub(&q->vref, 1, __ATOMIC_RELEASE);
	if (vref_count(v) != 1)
		return;
	/* Whoever takes the count from 1 to 0 with the id's version (or the
	 * stopped one) moves the version on, once. */
	uint32_t ver = vref_version(v), idver = (uint32_t)(q->id >> 32);
	if (ver != idver && ver != idver + 1)
		return;
	uint64_t expected = v - 1;
	if (__atomic_compare_exchange_n(&q->vref, &expected, vref_make(idver + 2, 0), false,
					__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		execq_recycle(q);
}

struct stb_execq *stb_execq_address(uint64_t id)
{
	struct stb_execq *q = execq_at((uint32_t)id);
	if (!q)
		return NULL;
	uint32_t idver = (uint32_t)(id >> 32);
	uint64_t v1 = __atomic_fetch_add(&q->vref, 1, __ATOMIC_ACQUIRE);
	if (vref_version(v1) == idver)
		return q;
	/* Another version: undo. Being the last reference of a stopped queue,
	 * finish what a concurrent release left to us. */
	uint64_t v2 = __atomic_fetch_sub(&q->vref, 1, __ATOMIC_RELEASE);
	uint32_t ver2 = vref_version(v2);
	if (vref_count(v2) == 1 && (ver2 & 1u) &&
	    (vref_version(v1) == ver2 || vref_version(v1) + 1 == ver2)) {
		uint64_t expected = v2 - 1;
		if (__atomic_compare_exchange_n(&q->vref, &expected, vref_make(ver2 + 1, 0), false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			execq_recycle(q);
	}
	return NULL;
}

bool stb_execq_stopped(const struct stb_execq *q)
{
	return __atomic_load_n(&q->stopped, __ATOMIC_ACQUIRE);
}

int stb_execq_stop(struct stb_execq *q)
{
	uint32_t idver = (uint32_t)(q->id >> 32);
	uint64_t v = __atomic_load_n(&q->vref, __ATOMIC_RELAXED);
	for (;;) {
		if (vref_version(v) != idver)
			return EINVAL; /* stopped already */
		if (__atomic_compare_exchange_n(&q->vref, &v, vref_make(idver + 1, vref_count(v)),
						false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			break;
	}
	__atomic_store_n(&q->stopped, true, __ATOMIC_RELEASE);
	stb_execq_release(q); /* the reference of stb_execq_start */
	return 0;
}

int stb_execq_start(uint64_t *id, const struct stb_execq_options *opts, stb_execq_run_fn run,
		    stb_execq_clear_fn clear, void *meta, void *user_fn)
{
	if (!id || !run || !clear)
		return EINVAL;
	stb_lock(&execq_lock);
	struct stb_execq *q = slot_get_locked();
	stb_unlock(&execq_lock);
	if (!q)
		return ENOMEM;
	q->run = run;
	q->clear = clear;
	q->meta = meta;
	q->user_fn = user_fn;
	q->attr = opts && opts->attr ? *opts->attr : BTHREAD_ATTR_NORMAL;
	q->use_pthread = opts && opts->use_pthread;
	q->pthread_started = false;
	q->executor = opts ? opts->executor : NULL;
	q->submit = opts ? opts->submit : NULL;
	if (!q->submit)
		q->executor = NULL;
	__atomic_store_n(&q->pending, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&q->stopped, false, __ATOMIC_RELAXED);
	/* The slot is ours: only stale addresses touch vref, and they undo. */
	uint32_t ver = vref_version(__atomic_load_n(&q->vref, __ATOMIC_RELAXED));
	q->id = (uint64_t)ver << 32 | q->slot;
	__atomic_fetch_add(&q->vref, 1, __ATOMIC_RELEASE); /* the queue's own reference */
	*id = q->id;
	return 0;
}

int stb_execq_join(uint64_t id)
{
	struct stb_execq *q = execq_at((uint32_t)id);
	if (!q)
		return EINVAL;
	int ver = (int)(uint32_t)(id >> 32);
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_EXECQ, 0, 0, 0),
				     .object = (uint64_t)(uintptr_t)q};
	while (__atomic_load_n(&q->join->value, __ATOMIC_ACQUIRE) == ver)
		stb_butex_wait_mono(q->join, ver, 0, &why);
	return 0;
}
