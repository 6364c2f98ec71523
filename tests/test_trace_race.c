/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tracer under races: 100,000 traces of random tasks while 1,000 bthreads
 * yield, sleep, lock, create, spin, exit and are replaced; every successful
 * trace shows only its task's own function family (chosen by the id). Also
 * tasks that exit while traced, and bthreads that trace each other.
 */
#include "test_util.h"
#include "trace_util.h"

#include <pthread.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/abi.h>
#include <stb/stb.h>

#include "internal.h" /* stb_table_worker: what each worker runs now */

#define STB_RACE_TASKS 1000u
#define STB_RACE_TRACES 100000u
#define STB_RACE_TRACERS 2u
#define STB_RACE_RING 1024u
#define STB_RACE_LOCKS 8u
#define STB_RACE_FAMILIES 4u
#define STB_RACE_NFRAMES 64

/* stb_race_task.flags */
#define STB_RACE_F_CHILD 0x1u   /* started by another task: no children, no replacement */
#define STB_RACE_F_SHORT 0x2u   /* no work at all (exit-during-trace test) */

struct stb_race_task {
	uint64_t rng;
	unsigned flags;
};

static struct {
	int stop;                 /* no more replacements */
	uint64_t started, finished;
	uint64_t ring_pos;
	bthread_t ring[STB_RACE_RING];
	bthread_mutex_t locks[STB_RACE_LOCKS];
	void *never;              /* a butex nobody wakes (timed waits) */
} stb_race;

static unsigned stb_race_family(bthread_t id)
{
	uint64_t h = id * 0x9e3779b97f4a7c15ull;
	return (unsigned)(h >> 62);
}

/* splitmix64 finalizer: seeds from similar ids must not give similar sequences. */
static uint64_t stb_race_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x ? x : 1;
}

static uint64_t stb_race_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static void *stb_race_entry(void *arg);

static void stb_race_spawn(unsigned flags)
{
	__atomic_fetch_add(&stb_race.started, 1, __ATOMIC_ACQ_REL);
	int rc = bthread_start_background(NULL, NULL, stb_race_entry, (void *)(uintptr_t)flags);
	STB_EXPECT_EQ(rc, 0);
	if (rc != 0)
		__atomic_fetch_add(&stb_race.finished, 1, __ATOMIC_ACQ_REL);
}

/* The common work loop (a "runtime" frame for the family check). */
STB_NOIPA static void stb_race_work(struct stb_race_task *rt)
{
	if (rt->flags & STB_RACE_F_SHORT)
		return;
	unsigned iters = 3 + (unsigned)(stb_race_rand(&rt->rng) % 20);
	for (unsigned i = 0; i < iters; i++) {
		uint64_t r = stb_race_rand(&rt->rng);
		switch (r % 8) {
		case 0:
			bthread_yield();
			break;
		case 1:
			bthread_usleep((r >> 8) % 300);
			break;
		case 2: {
			bthread_mutex_t *m = &stb_race.locks[(r >> 8) % STB_RACE_LOCKS];
			bthread_mutex_lock(m);
			if ((r >> 16) % 4 == 0)
				bthread_yield();
			bthread_mutex_unlock(m);
			break;
		}
		case 3:
			if (!(rt->flags & STB_RACE_F_CHILD)) {
				bthread_t c;
				__atomic_fetch_add(&stb_race.started, 1, __ATOMIC_ACQ_REL);
				int rc = bthread_start_urgent(&c, NULL, stb_race_entry,
							      (void *)(uintptr_t)STB_RACE_F_CHILD);
				STB_EXPECT_EQ(rc, 0);
				if (rc == 0) {
					/* ESRCH: it finished and its slot was reused since. */
					rc = bthread_join(c, NULL);
					STB_EXPECT(rc == 0 || rc == ESRCH);
				} else {
					__atomic_fetch_add(&stb_race.finished, 1, __ATOMIC_ACQ_REL);
				}
			}
			break;
		case 4: {
			struct timespec ts = stb_realtime_after_ms(1);
			butex_wait(stb_race.never, 0, &ts);
			break;
		}
		case 5:
		case 6: {
			uint64_t end = stb_now_ns() + 30000;
			while (stb_now_ns() < end)
				__asm__ volatile("pause");
			break;
		}
		default:
			if ((r >> 8) % 16 == 0)
				return; /* leave early */
			bthread_yield();
			break;
		}
	}
	STB_NO_TAIL();
}

/* Four families of the same shape; a task's family follows from its id. */
#define STB_RACE_FAMILY(k)                                                                 \
	STB_NOIPA static void stb_fam##k##_f3(struct stb_race_task *rt)                    \
	{                                                                                  \
		stb_race_work(rt);                                                         \
		STB_NO_TAIL();                                                             \
	}                                                                                  \
	STB_NOIPA static void stb_fam##k##_f2(struct stb_race_task *rt)                    \
	{                                                                                  \
		stb_fam##k##_f3(rt);                                                       \
		STB_NO_TAIL();                                                             \
	}                                                                                  \
	STB_NOIPA static void stb_fam##k##_f1(struct stb_race_task *rt)                    \
	{                                                                                  \
		stb_fam##k##_f2(rt);                                                       \
		STB_NO_TAIL();                                                             \
	}

STB_RACE_FAMILY(0)
STB_RACE_FAMILY(1)
STB_RACE_FAMILY(2)
STB_RACE_FAMILY(3)

static void *stb_race_entry(void *arg)
{
	struct stb_race_task rt = {.flags = (unsigned)(uintptr_t)arg};
	bthread_t self = bthread_self();
	rt.rng = stb_race_mix(self);
	uint64_t pos = __atomic_fetch_add(&stb_race.ring_pos, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&stb_race.ring[pos % STB_RACE_RING], self, __ATOMIC_RELEASE);
	switch (stb_race_family(self)) {
	case 0:
		stb_fam0_f1(&rt);
		break;
	case 1:
		stb_fam1_f1(&rt);
		break;
	case 2:
		stb_fam2_f1(&rt);
		break;
	default:
		stb_fam3_f1(&rt);
		break;
	}
	STB_NO_TAIL();
	if (!(rt.flags & (STB_RACE_F_CHILD | STB_RACE_F_SHORT)) &&
	    !__atomic_load_n(&stb_race.stop, __ATOMIC_ACQUIRE))
		stb_race_spawn(0);
	if (!(rt.flags & STB_RACE_F_SHORT))
		__atomic_fetch_add(&stb_race.finished, 1, __ATOMIC_ACQ_REL);
	return NULL;
}

/* ---- checking one trace ---- */

struct stb_race_counts {
	uint64_t max_ns;          /* longest trace */
	uint64_t ok, context, signal, no_stack, esrch, with_family, wrong, other_err;
	int last_err;
	char first_wrong[1024];
	char first_err[256];
};

/*
 * Zero when the frames are a consistent stack of a task of family fam. Only
 * frame 0 of a signal capture may lack a symbol (the symbolizer names no PLT
 * stubs, e.g. clock_gettime@plt), and then its module must be known.
 */
static int stb_race_check_frames(const struct stb_frame *f, int n, unsigned fam, bool signal,
				 bool *has_family, char *why, size_t size)
{
	*has_family = false;
	if (n < 2 || !stb_sym_is(f[n - 1].symbol, "stb_ctx_trampoline") ||
	    !stb_sym_is(f[n - 2].symbol, "stb_task_entry")) {
		snprintf(why, size, "the bottom is not stb_task_entry, stb_ctx_trampoline");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		unsigned k, lvl;
		if (!f[i].symbol && i == 0 && signal && f[i].module)
			continue;
		if (!f[i].symbol) {
			snprintf(why, size, "frame %d (0x%llx) has no symbol", i,
				 (unsigned long long)f[i].ip);
			return -1;
		}
		if (sscanf(f[i].symbol, "stb_fam%u_f%u", &k, &lvl) != 2)
			continue;
		if (k != fam) {
			snprintf(why, size, "frame %d is %s in a task of family %u", i, f[i].symbol,
				 fam);
			return -1;
		}
		/* fK_f3 -> fK_f2 -> fK_f1 -> stb_race_entry, consecutive. */
		char next[32];
		if (lvl > 1)
			snprintf(next, sizeof(next), "stb_fam%u_f%u", k, lvl - 1);
		else
			snprintf(next, sizeof(next), "stb_race_entry");
		if (i + 1 >= n || !stb_sym_is(f[i + 1].symbol, next)) {
			snprintf(why, size, "frame %d is %s but frame %d is not %s", i, f[i].symbol,
				 i + 1, next);
			return -1;
		}
		*has_family = true;
	}
	return 0;
}

static void stb_race_account(struct stb_race_counts *c, bthread_t id, int rc,
			     const struct stb_frame *f, const struct stb_trace_info *info)
{
	char why[512];
	if (rc == -ESRCH) {
		c->esrch++;
		return;
	}
	if (rc < 0) {
		c->other_err++;
		if (!c->first_err[0])
			snprintf(c->first_err, sizeof(c->first_err), "%d: %s", rc, info->error);
		c->last_err = rc;
		return;
	}
	if (rc == 0) {
		if (info->mode == STB_TRACE_NO_STACK &&
		    (info->state == STB_TASK_CREATED || info->state == STB_TASK_READY_NO_STACK)) {
			c->no_stack++;
			return;
		}
		c->wrong++;
		if (!c->first_wrong[0])
			snprintf(c->first_wrong, sizeof(c->first_wrong),
				 "empty success: mode %u state %u", info->mode, info->state);
		return;
	}
	bool has_family;
	int n = rc < STB_RACE_NFRAMES ? rc : STB_RACE_NFRAMES;
	/* A running task whose worker blocks in a system call (the runtime's own
	 * lock while it switches, a sleep) is read from /proc, without a signal. */
	bool running = info->mode == STB_TRACE_SIGNAL || info->mode == STB_TRACE_SYSCALL;
	if (info->truncated || (info->mode != STB_TRACE_CONTEXT && !running) ||
	    stb_race_check_frames(f, n, stb_race_family(id), running, &has_family, why,
				  sizeof(why)) != 0) {
		if (info->truncated)
			snprintf(why, sizeof(why), "truncated");
		else if (info->mode != STB_TRACE_CONTEXT && !running)
			snprintf(why, sizeof(why), "mode %u", info->mode);
		c->wrong++;
		if (!c->first_wrong[0]) {
			snprintf(c->first_wrong, sizeof(c->first_wrong), "%s (mode %u state %u)", why,
				 info->mode, info->state);
			stb_frames_describe(f, n, c->first_wrong, sizeof(c->first_wrong));
		}
		return;
	}
	c->ok++;
	c->with_family += has_family;
	if (info->mode == STB_TRACE_CONTEXT)
		c->context++;
	else
		c->signal++;
}

/* ---- the main race ---- */

struct stb_tracer {
	unsigned traces;
	uint64_t seed;
	struct stb_race_counts c;
};

static void *stb_tracer_main(void *arg)
{
	struct stb_tracer *tr = arg;
	struct stb_frame fr[STB_RACE_NFRAMES];
	struct stb_trace_info info;
	for (unsigned i = 0; i < tr->traces;) {
		uint64_t r = stb_race_rand(&tr->seed);
		bthread_t id = __atomic_load_n(&stb_race.ring[r % STB_RACE_RING], __ATOMIC_ACQUIRE);
		if ((r >> 40) % 16 == 0) {
			/* A task on a worker right now (it may leave the CPU meanwhile). */
			struct stb_abi_worker *w = stb_table_worker((uint32_t)(r >> 50) % 2);
			bthread_t cur = w ? __atomic_load_n(&w->current, __ATOMIC_ACQUIRE) : 0;
			if (cur)
				id = cur;
		}
		if (id == 0)
			continue;
		/* A generous timeout: this test looks for wrong stacks, crashes and
		 * hangs, not for latency (2 CPUs are shared by 5 busy threads). */
		struct stb_trace_opts o = {.max_depth = STB_RACE_NFRAMES, .timeout_ms = 10000,
					   .runtime_frames = 1};
		uint64_t t0 = stb_now_ns();
		int rc = stb_trace(id, &o, fr, STB_RACE_NFRAMES, &info);
		uint64_t ns = stb_now_ns() - t0;
		if (ns > tr->c.max_ns)
			tr->c.max_ns = ns;
		stb_race_account(&tr->c, id, rc, fr, &info);
		i++;
		if ((r >> 20) % 64 == 0) {
			/* Now and then the text form of the same task. */
			char text[4096], why[256];
			int len = bthread_stack_trace(id, text, sizeof(text));
			if (len > 0 && text[0] == '#') {
				/* Line 0 of a signal capture may be an unnamed PLT stub. */
				const char *body = text;
				if (strncmp(text, "#0 ", 3) == 0 && strstr(text, " ?? (") &&
				    strstr(text, " ?? (") < strchr(text, '\n'))
					body = strchr(text, '\n') + 1;
				STB_EXPECT(body == text ? stb_text_check(text, NULL, 0, why, sizeof(why)) > 0
							: strncmp(body, "#1 0x", 5) == 0);
				/* The runtime's frames are hidden there. */
				STB_EXPECT(strstr(text, " stb_ctx_trampoline+0x") == NULL);
			} else if (len > 0) {
				STB_EXPECT(strncmp(text, "(no stack: ", 11) == 0);
			} else {
				STB_EXPECT_EQ(len, -ESRCH);
			}
		}
	}
	return NULL;
}

static void stb_counts_add(struct stb_race_counts *sum, const struct stb_race_counts *c)
{
	if (c->max_ns > sum->max_ns)
		sum->max_ns = c->max_ns;
	sum->ok += c->ok;
	sum->context += c->context;
	sum->signal += c->signal;
	sum->no_stack += c->no_stack;
	sum->esrch += c->esrch;
	sum->with_family += c->with_family;
	sum->wrong += c->wrong;
	sum->other_err += c->other_err;
	if (!sum->first_wrong[0])
		memcpy(sum->first_wrong, c->first_wrong, sizeof(sum->first_wrong));
	if (!sum->first_err[0])
		memcpy(sum->first_err, c->first_err, sizeof(sum->first_err));
}

static void stb_counts_assert(const char *what, const struct stb_race_counts *c)
{
	print_message("%s: ok %llu (context %llu, signal %llu, with family frames %llu), "
		      "no stack %llu, finished %llu, wrong %llu, other errors %llu; "
		      "longest trace %.3f ms\n",
		      what, (unsigned long long)c->ok, (unsigned long long)c->context,
		      (unsigned long long)c->signal, (unsigned long long)c->with_family,
		      (unsigned long long)c->no_stack, (unsigned long long)c->esrch,
		      (unsigned long long)c->wrong, (unsigned long long)c->other_err,
		      (double)c->max_ns / 1e6);
	if (c->wrong)
		fail_msg("%llu wrong stacks; first: %s", (unsigned long long)c->wrong, c->first_wrong);
	if (c->other_err)
		fail_msg("%llu unexpected errors; first: %s", (unsigned long long)c->other_err,
			 c->first_err);
}

static void test_race_traces_vs_churn(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	uint64_t t0 = stb_now_ns();
	struct stb_stats s0, s1;
	stb_get_stats(&s0);
	for (unsigned i = 0; i < STB_RACE_TASKS; i++)
		stb_race_spawn(0);
	pthread_t th[STB_RACE_TRACERS];
	struct stb_tracer tr[STB_RACE_TRACERS];
	memset(tr, 0, sizeof(tr));
	for (unsigned i = 0; i < STB_RACE_TRACERS; i++) {
		tr[i].traces = STB_RACE_TRACES / STB_RACE_TRACERS;
		tr[i].seed = stb_race_mix(i + 1);
		assert_int_equal(pthread_create(&th[i], NULL, stb_tracer_main, &tr[i]), 0);
	}
	stb_test_wd_note = "tracers running";
	for (unsigned i = 0; i < STB_RACE_TRACERS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	stb_test_wd_note = "waiting for every task to finish";
	__atomic_store_n(&stb_race.stop, 1, __ATOMIC_RELEASE);
	/* No lost wake-up: every task ever started finishes. */
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_race.finished, __ATOMIC_ACQUIRE) ==
					   __atomic_load_n(&stb_race.started, __ATOMIC_ACQUIRE),
				   60000));
	stb_get_stats(&s1);
	struct stb_race_counts sum;
	memset(&sum, 0, sizeof(sum));
	for (unsigned i = 0; i < STB_RACE_TRACERS; i++)
		stb_counts_add(&sum, &tr[i].c);
	print_message("%llu tasks ran; %.0f ms; gate waits %llu (%.3f ms), give-ups %llu, "
		      "retries %llu, signal timeouts %llu\n",
		      (unsigned long long)stb_race.started, stb_test_ms_since(t0),
		      (unsigned long long)(s1.gate_waits - s0.gate_waits),
		      (double)(s1.gate_wait_ns - s0.gate_wait_ns) / 1e6,
		      (unsigned long long)(s1.gate_giveups - s0.gate_giveups),
		      (unsigned long long)(s1.retries - s0.retries),
		      (unsigned long long)(s1.signal_timeouts - s0.signal_timeouts));
	stb_counts_assert("traces", &sum);
	assert_int_equal(sum.ok + sum.no_stack + sum.esrch, STB_RACE_TRACES);
	/* The mix is real: both modes, most stacks inside a family chain. */
	assert_true(sum.context > 0 && sum.signal > 0);
	assert_true(sum.with_family * 2 > sum.ok);
	assert_true(stb_race.started > STB_RACE_TASKS * 2);
	/* A lease lasts 5 ms and is renewed between attempts: a tracer that is
	 * preempted longer (this machine is often oversubscribed) loses it and
	 * the task moves on. That must stay rare. */
	assert_true(s1.gate_giveups - s0.gate_giveups <= STB_RACE_TRACES / 100);
	STB_TEST_END();
}

/* ---- tasks that exit while being traced ---- */

static void test_exit_during_trace(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	unsigned rounds = 20000u;
	struct stb_race_counts c;
	memset(&c, 0, sizeof(c));
	struct stb_frame fr[STB_RACE_NFRAMES];
	struct stb_trace_info info;
	bthread_t ids[64];
	for (unsigned i = 0; i < rounds; i++) {
		unsigned flags = STB_RACE_F_SHORT | STB_RACE_F_CHILD;
		bthread_t id;
		int rc = i % 2 ? bthread_start_background(&id, &BTHREAD_ATTR_SMALL, stb_race_entry,
							  (void *)(uintptr_t)flags)
			       : bthread_start_urgent(&id, NULL, stb_race_entry,
						      (void *)(uintptr_t)flags);
		assert_int_equal(rc, 0);
		struct stb_trace_opts o = {.max_depth = STB_RACE_NFRAMES, .timeout_ms = 10000,
					   .runtime_frames = 1};
		rc = stb_trace(id, &o, fr, STB_RACE_NFRAMES, &info);
		stb_race_account(&c, id, rc, fr, &info);
		ids[i % 64] = id;
		if (i % 64 == 63)
			for (unsigned k = 0; k < 64; k++) {
				rc = bthread_join(ids[k], NULL);
				assert_true(rc == 0 || rc == ESRCH); /* ESRCH: slot reused since */
			}
	}
	stb_counts_assert("exit during trace", &c);
	/* Each outcome is possible; at least the common ones showed up. */
	assert_true(c.ok + c.no_stack > 0);
	STB_TEST_END();
}

/* ---- bthreads tracing each other (and themselves) ---- */

struct stb_mutual {
	bthread_t peer;
	unsigned rounds;
	int go;
	struct stb_race_counts c;
	unsigned self_ok;
};

static bthread_t stb_mutual_ids[2];
static unsigned stb_mutual_done, stb_mutual_running;

STB_NOIPA static void stb_mutual_loop(struct stb_mutual *m)
{
	struct stb_frame fr[STB_RACE_NFRAMES];
	struct stb_trace_info info;
	char why[1024];
	/* Both run before either traces (a worker may take a while to wake). */
	__atomic_fetch_add(&stb_mutual_running, 1, __ATOMIC_ACQ_REL);
	while (!__atomic_load_n(&m->go, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&stb_mutual_running, __ATOMIC_ACQUIRE) < 2)
		__asm__ volatile("pause");
	for (unsigned i = 0; i < m->rounds; i++) {
		bthread_t target = i % 8 == 7 ? bthread_self() : __atomic_load_n(&m->peer, __ATOMIC_ACQUIRE);
		struct stb_trace_opts o = {.timeout_ms = 10000, .runtime_frames = 1};
		int rc = stb_trace(target, &o, fr, STB_RACE_NFRAMES, &info);
		if (rc == 0 && info.mode == STB_TRACE_NO_STACK &&
		    info.state == STB_TASK_READY_NO_STACK) {
			m->c.no_stack++; /* the peer has not run yet */
			continue;
		}
		if (rc <= 0) {
			m->c.other_err++;
			if (!m->c.first_err[0])
				snprintf(m->c.first_err, sizeof(m->c.first_err),
					 "%d: mode %u state %u %s", rc, info.mode, info.state,
					 info.error);
			continue;
		}
		static const char *const chain[] = {"stb_mutual_loop", "stb_mutual_main"};
		if (!stb_frames_check_chain(fr, rc, chain, 2, NULL, 0, false, true, why,
					    sizeof(why))) {
			m->c.wrong++;
			if (!m->c.first_wrong[0])
				snprintf(m->c.first_wrong, sizeof(m->c.first_wrong), "%s", why);
			continue;
		}
		m->c.ok++;
		if (info.mode == STB_TRACE_SIGNAL)
			m->c.signal++;
		else if (info.mode == STB_TRACE_SELF)
			m->self_ok++;
		else
			m->c.context++;
	}
	/* Stay in this chain until the peer is done tracing us. */
	__atomic_fetch_add(&stb_mutual_done, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&stb_mutual_done, __ATOMIC_ACQUIRE) < 2)
		__asm__ volatile("pause");
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_mutual_main(void *arg)
{
	stb_mutual_loop(arg);
	STB_NO_TAIL();
	return NULL;
}

static void test_bthreads_trace_each_other(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct stb_mutual m[2];
	memset(m, 0, sizeof(m));
	for (int i = 0; i < 2; i++) {
		m[i].rounds = STB_TEST_SCALE(5000u, 2000u);
		assert_int_equal(bthread_start_background(&stb_mutual_ids[i], NULL, stb_mutual_main,
							  &m[i]), 0);
	}
	m[0].peer = stb_mutual_ids[1];
	m[1].peer = stb_mutual_ids[0];
	for (int i = 0; i < 2; i++)
		__atomic_store_n(&m[i].go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		assert_int_equal(bthread_join(stb_mutual_ids[i], NULL), 0);
	for (int i = 0; i < 2; i++) {
		stb_counts_assert(i ? "bthread tracer 1" : "bthread tracer 0", &m[i].c);
		assert_int_equal(m[i].c.ok + m[i].c.no_stack, m[i].rounds);
		assert_true(m[i].c.signal > m[i].rounds / 2);
		assert_true(m[i].self_ok > 0);
	}
	STB_TEST_END();
}

static int stb_race_setup(void **state)
{
	(void)state;
	/* bthread_stack_trace has no per-call timeout: see stb_tracer_main. */
	if (stb_set_signal_trace_timeout_ms(10000) != 0)
		return -1;
	for (unsigned i = 0; i < STB_RACE_LOCKS; i++)
		if (bthread_mutex_init(&stb_race.locks[i], NULL) != 0)
			return -1;
	stb_race.never = butex_create();
	return stb_race.never ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_race_traces_vs_churn),
		cmocka_unit_test(test_exit_during_trace),
		cmocka_unit_test(test_bthreads_trace_each_other),
	};
	return cmocka_run_group_tests(tests, stb_race_setup, NULL);
}
