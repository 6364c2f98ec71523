/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor thread: every STB_ABI_MONITOR_PERIOD_NS / 2 it looks at what
 * each worker runs and publishes, in the worker's table entry, since when the
 * task running there has run without a switch (run_seq/run_since_ns), and
 * header.monitor_ns. Nothing of this is on the switch path: the monitor reads
 * the words the switch already writes (worker current, the task word's seq,
 * which changes when a run ends) and writes only the second line of a worker's
 * entry, which the worker never writes. When every worker is parked it sleeps
 * until a worker leaves its parking lot.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#if STB_TRACER

/* What the monitor saw last on each worker (its own memory). */
struct seen {
	uint64_t current;
	uint32_t seq;
	uint32_t yields; /* the worker's yields without a switch */
};

static struct seen stb_seen[STB_ABI_MAX_WORKERS];
/* 1 while the monitor sleeps because every worker is parked. */
static uint32_t stb_monitor_idle;
static pthread_once_t stb_monitor_once = PTHREAD_ONCE_INIT;
static int stb_monitor_err;

/* Publishes a worker's run_seq/run_since_ns: a reader that reads since, seq,
 * since again and gets the same non-zero since has a matching pair. */
static void worker_publish(struct stb_abi_worker *w, uint32_t seq, uint64_t since)
{
	__atomic_store_n(&w->run_since_ns, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&w->run_seq, seq, __ATOMIC_RELEASE);
	__atomic_store_n(&w->run_since_ns, since, __ATOMIC_RELEASE);
}

/* One pass over the workers. Returns true if any worker is not parked. */
static bool monitor_pass(struct stb_abi_header *h)
{
	uint32_t n = __atomic_load_n(&h->nworkers, __ATOMIC_ACQUIRE);
	if (n > STB_ABI_MAX_WORKERS)
		n = STB_ABI_MAX_WORKERS;
	bool busy = false;
	for (uint32_t i = 0; i < n; i++) {
		struct stb_abi_worker *w = stb_table_worker(i);
		uint32_t state = __atomic_load_n(&w->state, __ATOMIC_ACQUIRE);
		uint64_t cur = __atomic_load_n(&w->current, __ATOMIC_ACQUIRE);
		if (state != STB_WORKER_PARKED && state != STB_WORKER_STOPPED)
			busy = true;
		struct seen *s = &stb_seen[i];
		/* A worker switching to a task (abi.h) runs none yet: unknown. */
		struct stb_abi_task *t = cur && !STB_ABI_CURRENT_IS_SWITCHING(cur)
						 ? stb_table_task(STB_ABI_SLOT(cur))
						 : NULL;
		if (!t) {
			/* Nothing running (or an untraceable task): unknown. */
			if (s->current) {
				worker_publish(w, 0, 0);
				s->current = 0;
			}
			continue;
		}
		uint32_t seq = STB_ABI_SEQ(__atomic_load_n(&t->word, __ATOMIC_ACQUIRE));
		uint32_t yields = __atomic_load_n(&w->yields, __ATOMIC_RELAXED);
		if (cur != s->current || seq != s->seq || yields != s->yields) {
			/* A new run since the last pass (or a yield that found
			 * nothing else to run): it started at most a period ago, and
			 * no later than now, read after it was seen. */
			s->current = cur;
			s->seq = seq;
			s->yields = yields;
			worker_publish(w, seq, stb_now_ns());
		}
	}
	__atomic_store_n(&h->monitor_ns, stb_now_ns(), __ATOMIC_RELEASE);
	return busy;
}

static void *monitor_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_monitor");
	struct stb_abi_header *h = stb_table.hdr;
	const struct timespec period = {0, STB_ABI_MONITOR_PERIOD_NS / 2};
	for (;;) {
		if (monitor_pass(h)) {
			nanosleep(&period, NULL);
			continue;
		}
		/* Every worker parked: sleep until one leaves its parking lot (Dekker
		 * with stb_monitor_kick: idle is set before the states are read again). */
		__atomic_store_n(&stb_monitor_idle, 1, __ATOMIC_SEQ_CST);
		if (monitor_pass(h)) {
			__atomic_store_n(&stb_monitor_idle, 0, __ATOMIC_RELAXED);
			continue;
		}
		while (__atomic_load_n(&stb_monitor_idle, __ATOMIC_ACQUIRE))
			stb_futex_wait(&stb_monitor_idle, 1, NULL);
	}
	return NULL;
}

static void monitor_start_once(void)
{
	if (!stb_table.hdr)
		return;
	pthread_t th;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64u << 10);
	int rc = pthread_create(&th, &attr, monitor_main, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		stb_monitor_err = rc;
		return;
	}
	pthread_detach(th);
}

int stb_monitor_start(void)
{
	pthread_once(&stb_monitor_once, monitor_start_once);
	return stb_monitor_err;
}

void stb_monitor_kick(void)
{
	/* Pairs with the monitor's seq_cst store of idle: this locked read
	 * orders the worker's state store (SCHEDULING) before the load. */
	if (__atomic_fetch_add(&stb_monitor_idle, 0, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&stb_monitor_idle, 0, __ATOMIC_SEQ_CST))
		stb_futex_wake(&stb_monitor_idle, 1);
}

#else /* !STB_TRACER */

int stb_monitor_start(void)
{
	return 0;
}

void stb_monitor_kick(void)
{
}

#endif
