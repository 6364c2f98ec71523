/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace driver (runtime/stacks/table/driver.c) and the frame sink (frames.c)
 * on synthetic task entries and a fake memory backend: a good copy, entries
 * that lie (state and stack pointer out of range), tasks that never settle,
 * leases always held by "another tracer", a slot reused during the copy, a
 * target that exits, running tasks with and without a capture backend, the
 * no-wait and frozen modes; the sink's limit, array bound and deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "collect/copier.h"
#include "symbols/frames.h"
#include "table/driver.h"
#include "table/hold.h"
#include "table/insyscall.h"
#include "util.h"

#define STACK_ADDR 0x7f0000100000ull /* where the fake stack lives in the "target" */
#define STACK_LEN 8192u
#define ID (3ull << 32 | 7)

static uint8_t stack_bytes[STACK_LEN];

struct fake {
	struct stb_abi_task *p; /* the entry */
	struct stb_abi_worker *w; /* the worker entry that names it when it runs */
	bool reuse_during_copy; /* the slot gets another task while it is copied */
	bool run_during_copy;   /* it slipped past its gate: a worker names it meanwhile */
	bool ran_during_copy;   /* ... and its run ended before the copy did (seq + 1) */
	bool gone;              /* the target has exited */
	unsigned reads;
};

static int fake_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct fake *f = ctx;
	f->reads++;
	if (f->gone)
		return -ESRCH;
	if (f->reuse_during_copy)
		__atomic_store_n(&f->p->id, ID + (1ull << 32), __ATOMIC_RELEASE);
	if (f->run_during_copy) {
		f->run_during_copy = false;
		__atomic_store_n(&f->w->current, ID, __ATOMIC_RELEASE);
	}
	if (f->ran_during_copy) {
		f->ran_during_copy = false;
		__atomic_add_fetch(&f->p->word, 1ull << 32, __ATOMIC_RELEASE);
	}
	if (addr < STACK_ADDR || addr - STACK_ADDR > STACK_LEN ||
	    STACK_LEN - (addr - STACK_ADDR) < len)
		return -EFAULT;
	memcpy(dst, stack_bytes + (addr - STACK_ADDR), len);
	return 0;
}

static bool fake_alive(void *ctx)
{
	return !((struct fake *)ctx)->gone;
}

static void entry(struct stb_abi_task *p, unsigned state)
{
	memset(p, 0, sizeof(*p));
	p->id = ID;
	p->word = (uint64_t)9 << 32 | state;
	p->stack_lo = STACK_ADDR;
	p->stack_hi = STACK_ADDR + STACK_LEN;
	p->sp = STACK_ADDR + 4096;
	p->ip = 0x401000;
	p->bp = STACK_ADDR + 4200;
	p->tid = 1234;
}

struct env {
	struct stb_abi_task p;
	struct stb_abi_worker w[2];
	struct fake f;
	struct stb_mem mem;
	struct stb_driver d;
	uint8_t buf[STACK_LEN];
	struct stb_capture capt;
	char err[160];
};

static void env_init(struct env *e, unsigned state, unsigned flags)
{
	memset(e, 0, sizeof(*e));
	/* A bthread runs where a worker's current names it; its word says
	 * READY then (abi.h, "Running"). */
	bool named = state == STB_TASK_RUNNING || state == STB_TASK_ABOUT_TO_RUN;
	entry(&e->p, named ? STB_TASK_READY : state);
	e->w[0].current = ID + 1; /* another task */
	e->w[0].tid = 1111;
	e->w[1].tid = 1234;
	if (named)
		e->w[1].current = state == STB_TASK_RUNNING ? ID : ID | STB_ABI_CURRENT_SWITCHING;
	e->f.p = &e->p;
	e->f.w = &e->w[1];
	e->mem = (struct stb_mem){.read = fake_read, .alive = fake_alive, .ctx = &e->f};
	e->d = (struct stb_driver){.mem = &e->mem,
				   .flags = flags,
				   .buf = e->buf,
				   .cap = sizeof(e->buf),
				   .no_capture = "no BPF here",
				   .workers = {.w = e->w, .n = 2}};
}

static int trace(struct env *e, uint64_t timeout_ms)
{
	return stb_driver_trace(&e->d, &e->p, ID, stb_now_ns() + timeout_ms * 1000000u, &e->capt,
				e->err, sizeof(e->err));
}

static void test_context_copy(void **state)
{
	(void)state;
	static struct env e;
	for (unsigned i = 0; i < STACK_LEN; i++)
		stack_bytes[i] = (uint8_t)i;
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	assert_int_equal(trace(&e, 100), 0);
	assert_int_equal(e.capt.mode, STB_TRACE_CONTEXT);
	assert_int_equal(e.capt.state, STB_TASK_SUSPENDED);
	assert_int_equal(e.capt.seq, 9);
	assert_int_equal(e.capt.copy.addr, e.p.sp - STB_ABI_SWITCH_FRAME);
	assert_int_equal(e.capt.copy.len, STACK_LEN - 4096 + STB_ABI_SWITCH_FRAME);
	assert_int_equal(e.capt.regs.sp, e.p.sp);
	assert_int_equal(e.p.trace, 0); /* the lease was given back */
	/* Without a lease, the same (process_vm_readv cannot fault). */
	env_init(&e, STB_TASK_READY, 0);
	assert_int_equal(trace(&e, 100), 0);
	assert_int_equal(e.capt.mode, STB_TRACE_CONTEXT);
	/* A direct read needs the lease. */
	env_init(&e, STB_TASK_READY, 0);
	e.mem.flags = STB_MEM_F_FAULTS;
	assert_int_equal(trace(&e, 100), -EINVAL);
	assert_int_equal(e.f.reads, 0);
	/* No stack yet. */
	env_init(&e, STB_TASK_READY_NO_STACK, STB_DRIVER_F_LEASE);
	assert_int_equal(trace(&e, 100), 0);
	assert_int_equal(e.capt.mode, STB_TRACE_NO_STACK);
}

static void test_lying_entries(void **state)
{
	(void)state;
	static struct env e;
	/* States out of range fail at once, whatever their value. */
	for (unsigned st = STB_TASK_NSTATES; st < 256; st += 37) {
		env_init(&e, st, STB_DRIVER_F_LEASE);
		uint64_t t0 = stb_now_ns();
		assert_int_equal(trace(&e, 1000), -EPROTO);
		assert_true(stb_now_ns() - t0 < 100000000ull);
		assert_non_null(strstr(e.err, "out of range"));
	}
	/* sp outside the stack, sp below the switch frame, an empty stack: no read. */
	const uint64_t sps[] = {0, 8, STACK_ADDR - 8, STACK_ADDR + STACK_LEN + 8, UINT64_MAX};
	for (size_t i = 0; i < sizeof(sps) / sizeof(sps[0]); i++) {
		env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
		e.p.sp = sps[i];
		assert_int_equal(trace(&e, 1000), -EPROTO);
		assert_int_equal(e.f.reads, 0);
		assert_non_null(strstr(e.err, "outside its stack"));
	}
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.p.stack_lo = e.p.stack_hi = 0;
	assert_int_equal(trace(&e, 1000), -EPROTO);
	/* Bounds that point anywhere readable: bounded by the copy buffer. */
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.p.stack_hi = UINT64_MAX;
	assert_int_equal(trace(&e, 1000), -EFAULT);
	assert_non_null(strstr(e.err, "cannot read the stack"));
}

static void test_never_settles(void **state)
{
	(void)state;
	static struct env e;
	const unsigned states[] = {STB_TASK_ABOUT_TO_RUN, STB_TASK_SUSPENDING};
	for (int i = 0; i < 2; i++) {
		env_init(&e, states[i], STB_DRIVER_F_LEASE);
		uint64_t t0 = stb_now_ns();
		assert_int_equal(trace(&e, 30), -ETIMEDOUT);
		uint64_t took = stb_now_ns() - t0;
		assert_true(took >= 30000000ull && took < 2000000000ull);
		assert_non_null(strstr(e.err, "did not settle within 30 ms"));
		assert_true(e.capt.retries > 0);
		assert_int_equal(e.p.trace, 0);
	}
	/* No waiting: one retry, then -EAGAIN. */
	env_init(&e, STB_TASK_ABOUT_TO_RUN, STB_DRIVER_F_NO_WAIT);
	assert_int_equal(trace(&e, 1000), -EAGAIN);
	assert_int_equal(e.capt.retries, 2);
	/* A frozen target (a core file) does not move: no wait at all. */
	env_init(&e, STB_TASK_SUSPENDING, STB_DRIVER_F_LEASE);
	e.mem.flags = STB_MEM_F_FROZEN;
	uint64_t t0 = stb_now_ns();
	assert_int_equal(trace(&e, 1000), -ETIMEDOUT);
	assert_true(stb_now_ns() - t0 < 100000000ull);
	assert_int_equal(e.p.trace, 0); /* and no lease is written into it */
}

static void test_held_by_another(void **state)
{
	(void)state;
	static struct env e;
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	uint64_t other = STB_ABI_LEASE_ENCODE(UINT64_MAX >> 1, 0x77);
	e.p.trace = other; /* a lease that ends in centuries */
	uint64_t t0 = stb_now_ns();
	assert_int_equal(trace(&e, 30), -EBUSY);
	assert_true(stb_now_ns() - t0 < 2000000000ull);
	assert_non_null(strstr(e.err, "another tracer"));
	assert_int_equal(e.p.trace, other); /* never taken over */
	assert_int_equal(e.f.reads, 0);
}

/* A lease whose deadline has passed protects nobody (its tracer died, or is
 * late): taken over -- as the task's gate breaks it -- and given back. */
static void test_expired_lease(void **state)
{
	(void)state;
	static struct env e;
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	uint64_t dead = STB_ABI_LEASE_ENCODE(stb_now_ns() - 2000000u, 0x77);
	e.p.trace = dead;
	assert_int_equal(trace(&e, 1000), 0);
	assert_int_equal(e.p.trace, 0); /* ours given back, theirs gone */
	uint64_t lease = 0;
	e.p.trace = dead;
	assert_int_equal(stb_hold_try(&e.p, stb_now_ns(), UINT64_MAX, &lease), 0);
	assert_int_not_equal(lease, dead);
	assert_int_equal(e.p.trace, lease);
	/* One that is still running is not. */
	uint64_t live = STB_ABI_LEASE_ENCODE(stb_now_ns() + 60000000000ull, 0x77);
	e.p.trace = live;
	assert_int_equal(stb_hold_try(&e.p, stb_now_ns(), UINT64_MAX, &lease), -EBUSY);
	assert_int_equal(e.p.trace, live);
}

static void test_slot_reused(void **state)
{
	(void)state;
	static struct env e;
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.f.reuse_during_copy = true;
	assert_int_equal(trace(&e, 100), -ESRCH);
	assert_false(e.capt.target_gone);
	assert_non_null(strstr(e.err, "slot was reused"));
	/* The target exited: said so, not taken for a finished task. */
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.f.gone = true;
	assert_int_equal(trace(&e, 100), -ESRCH);
	assert_true(e.capt.target_gone);
	assert_non_null(strstr(e.err, "the target exited"));
	/* Another task in the slot before the trace. */
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.p.id = ID + 1;
	assert_int_equal(trace(&e, 100), -ESRCH);
	env_init(&e, STB_TASK_DESTROYED, STB_DRIVER_F_LEASE);
	assert_int_equal(trace(&e, 100), -ESRCH);
	assert_non_null(strstr(e.err, "has finished"));
}

/* A copy that a run of the task changed is never used (abi.h): the run is
 * seen by its worker's current, or, once it ended, by the word's seq. */
static void test_ran_during_copy(void **state)
{
	(void)state;
	static struct env e;
	env_init(&e, STB_TASK_READY, STB_DRIVER_F_LEASE);
	e.f.run_during_copy = true;
	assert_int_equal(trace(&e, 100), -ENOTSUP); /* running now: not a context */
	assert_non_null(strstr(e.err, "running: not captured"));
	assert_true(e.capt.retries > 0);
	assert_int_equal(e.p.trace, 0);

	env_init(&e, STB_TASK_READY, STB_DRIVER_F_LEASE);
	e.f.ran_during_copy = true;
	assert_int_equal(trace(&e, 100), 0);
	assert_int_equal(e.capt.mode, STB_TRACE_CONTEXT);
	assert_int_equal(e.capt.seq, 10); /* the second copy's */
	assert_true(e.capt.retries > 0);
	assert_int_equal(e.f.reads, 2);

	/* A bthread's word never says RUNNING: only a worker's current may. */
	env_init(&e, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	e.p.word = (uint64_t)9 << 32 | STB_TASK_RUNNING;
	assert_int_equal(trace(&e, 100), -EPROTO);
	assert_non_null(strstr(e.err, "a bthread's word says running"));
	/* A registered pthread's does, and its entry says where. */
	static struct env p;
	env_init(&p, STB_TASK_SUSPENDED, STB_DRIVER_F_LEASE);
	p.p.word = (uint64_t)9 << 32 | STB_TASK_RUNNING;
	p.p.flags = STB_ABI_TASK_F_PTHREAD;
	assert_int_equal(trace(&p, 100), -ENOTSUP);
}

struct cap {
	unsigned calls, moved_first;
	uint64_t lease_seen;
	uint32_t worker, tid;
};

static int fake_capture(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
			const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
			struct stb_capture *capt, char *err, size_t errlen)
{
	struct cap *c = ctx;
	(void)id;
	(void)w1;
	(void)deadline;
	(void)buf;
	(void)cap;
	(void)err;
	(void)errlen;
	c->calls++;
	c->lease_seen = p->trace;
	c->worker = at->worker;
	c->tid = at->tid;
	if (c->calls <= c->moved_first)
		return -EAGAIN;
	capt->mode = STB_TRACE_BPF;
	capt->tid = 99;
	capt->regs.ip = 0x1234;
	return 0;
}

static void test_running(void **state)
{
	(void)state;
	static struct env e;
	env_init(&e, STB_TASK_RUNNING, STB_DRIVER_F_LEASE);
	assert_int_equal(trace(&e, 100), -ENOTSUP);
	assert_non_null(strstr(e.err, "running: not captured (no BPF here)"));
	assert_int_equal(e.p.trace, 0);

	struct cap c = {.moved_first = 2};
	struct stb_capture_ops ops = {.capture = fake_capture, .ctx = &c};
	env_init(&e, STB_TASK_RUNNING, STB_DRIVER_F_LEASE);
	e.d.capture = &ops;
	assert_int_equal(trace(&e, 100), 0);
	assert_int_equal(c.calls, 3);
	assert_int_equal(c.lease_seen, 0); /* not held while it is captured */
	assert_int_equal(e.capt.mode, STB_TRACE_BPF);
	assert_int_equal(e.capt.state, STB_TASK_RUNNING);
	assert_int_equal(e.capt.tid, 99);
	assert_int_equal(e.p.trace, 0);
	assert_int_equal(c.worker, 1); /* where the worker entry says it runs */
	assert_int_equal(c.tid, 1234);

	/* The off-CPU pass skips what runs. */
	env_init(&e, STB_TASK_RUNNING, STB_DRIVER_F_NO_WAIT);
	assert_int_equal(trace(&e, 100), -EAGAIN);
}

/* ---- the frame sink ---- */

static void feed(struct stb_frame_sink *s, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct stb_unw_frame f = {.ip = 0x1000 + i,
					  .sp = 0x8000 + 16 * i,
					  .how = i & 1 ? STB_FRAME_FP : STB_FRAME_DWARF};
		if (stb_frame_sink_add(&f, s))
			return;
	}
}

/* ---- many tasks at once (stb_driver_trace_many) ---- */

#define MANY 40u
#define MANY_STACK 1024u
#define MANY_ADDR 0x7f0000400000ull

static uint8_t many_bytes[MANY * MANY_STACK];

struct many {
	struct stb_abi_task p[MANY];
	struct stb_abi_worker w[1];
	unsigned reads, read_manys, segs; /* atomic: the copier's threads read too */
	unsigned fail_at;      /* read_many: segments from this one on are not read */
	/* read_many on another thread than main waits (up to 5 s) until main
	 * reads too (test_copier_helps); main_read: it did. */
	bool hold_others;
	pthread_t main;
	bool main_read;
	int bump;              /* read_many: the task whose word moves during the read */
	unsigned done[MANY];
	uint8_t buf[16384];
};

static int many_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct many *m = ctx;
	__atomic_add_fetch(&m->reads, 1, __ATOMIC_RELAXED);
	if (addr < MANY_ADDR || addr - MANY_ADDR > sizeof(many_bytes) ||
	    sizeof(many_bytes) - (addr - MANY_ADDR) < len)
		return -EFAULT;
	memcpy(dst, many_bytes + (addr - MANY_ADDR), len);
	return 0;
}

static unsigned many_read_many(void *ctx, const struct stb_mem_seg *segs, unsigned n)
{
	struct many *m = ctx;
	__atomic_add_fetch(&m->read_manys, 1, __ATOMIC_RELAXED);
	assert_true(n <= STB_MEM_SEGS_MAX);
	__atomic_add_fetch(&m->segs, n, __ATOMIC_RELAXED);
	if (m->hold_others && pthread_equal(pthread_self(), m->main)) {
		__atomic_store_n(&m->main_read, true, __ATOMIC_RELEASE);
	} else if (m->hold_others) {
		for (unsigned k = 0; k < 5000 && !__atomic_load_n(&m->main_read, __ATOMIC_ACQUIRE); k++)
			usleep(1000);
	}
	if (m->bump >= 0)
		__atomic_add_fetch(&m->p[m->bump].word, 1ull << 32, __ATOMIC_RELEASE);
	unsigned i = 0;
	for (; i < n && i < m->fail_at; i++)
		if (many_read(ctx, segs[i].addr, segs[i].dst, segs[i].len) != 0)
			break;
	__atomic_sub_fetch(&m->reads, i, __ATOMIC_RELAXED); /* counted as one read_many */
	return i;
}

static void many_done(void *arg, struct stb_driver_job *j)
{
	struct many *m = arg;
	unsigned i = (unsigned)(j->p - m->p);
	m->done[i]++;
	if (j->rc != 0)
		return;
	/* The copy is there during the call: the task's stack from sp - 64. */
	assert_int_equal(j->capt.mode, STB_TRACE_CONTEXT);
	uint64_t from = j->p->sp - STB_ABI_SWITCH_FRAME;
	assert_int_equal(j->capt.copy.addr, from);
	assert_int_equal(j->capt.copy.len, j->p->stack_hi - from);
	assert_memory_equal(j->capt.copy.bytes, many_bytes + (from - MANY_ADDR), j->capt.copy.len);
	assert_int_equal(j->capt.regs.sp, j->p->sp);
}

/* The memory of m, a driver on it (flags) and a job for each of its tasks. */
static void many_setup(struct many *m, struct stb_mem *mem, struct stb_driver *d,
		       struct stb_driver_job *jobs, unsigned flags)
{
	*mem = (struct stb_mem){.read = many_read, .read_many = many_read_many, .ctx = m};
	*d = (struct stb_driver){.mem = mem, .flags = flags, .buf = m->buf, .cap = sizeof(m->buf),
				 .no_capture = "none here", .workers = {.w = m->w, .n = 1}};
	static char errs[MANY][128];
	for (unsigned i = 0; i < MANY; i++)
		jobs[i] = (struct stb_driver_job){.p = &m->p[i], .id = m->p[i].id,
						  .deadline = UINT64_MAX,
						  .timeout_ns = 50000000ull,
						  .err = errs[i], .errlen = sizeof(errs[i])};
}

static void many_run(struct many *m, struct stb_driver_job *jobs, unsigned flags)
{
	struct stb_mem mem;
	struct stb_driver d;
	many_setup(m, &mem, &d, jobs, flags);
	stb_driver_trace_many(&d, jobs, MANY, many_done, m);
	for (unsigned i = 0; i < MANY; i++)
		assert_int_equal(m->done[i], 1); /* each job once */
}

static void many_init(struct many *m)
{
	memset(m, 0, sizeof(*m));
	m->fail_at = UINT32_MAX;
	m->bump = -1;
	for (unsigned i = 0; i < sizeof(many_bytes); i++)
		many_bytes[i] = (uint8_t)(i * 7 + i / 251);
	for (unsigned i = 0; i < MANY; i++) {
		struct stb_abi_task *p = &m->p[i];
		p->id = (uint64_t)(i + 1) << 32 | i;
		p->word = (uint64_t)5 << 32 | (i % 3 ? STB_TASK_SUSPENDED : STB_TASK_READY);
		p->stack_lo = MANY_ADDR + (uint64_t)i * MANY_STACK;
		p->stack_hi = p->stack_lo + MANY_STACK;
		p->sp = p->stack_hi - 128 - 8 * (i % 5);
		p->ip = 0x401000 + i;
	}
}

static void test_many(void **state)
{
	(void)state;
	static struct many m;
	static struct stb_driver_job jobs[MANY];

	/* Every task ready or suspended: one read per batch, nothing alone. */
	many_init(&m);
	many_run(&m, jobs, STB_DRIVER_F_LEASE);
	assert_int_equal(m.read_manys, (MANY + STB_DRIVER_MANY_MAX - 1) / STB_DRIVER_MANY_MAX);
	assert_int_equal(m.segs, MANY);
	assert_int_equal(m.reads, 0);
	for (unsigned i = 0; i < MANY; i++) {
		assert_int_equal(jobs[i].rc, 0);
		assert_int_equal(m.p[i].trace, 0); /* every lease given back */
	}

	/* Tasks that cannot be batched are traced alone, with their own errors:
	 * a lying entry, a lease held by another tracer, a running task without
	 * a capture backend, a finished one. */
	many_init(&m);
	m.p[1].sp = m.p[1].stack_hi + 64;
	uint64_t theirs = STB_ABI_LEASE_ENCODE(stb_now_ns() + 60000000000ull, 9);
	m.p[2].trace = theirs;
	m.p[3].word = (uint64_t)5 << 32 | STB_TASK_READY;
	m.w[0].current = m.p[3].id; /* running there */
	m.p[4].word = (uint64_t)5 << 32 | STB_TASK_DESTROYED;
	many_run(&m, jobs, STB_DRIVER_F_LEASE);
	assert_int_equal(jobs[1].rc, -EPROTO);
	assert_int_equal(jobs[2].rc, -EBUSY);
	assert_int_equal(jobs[3].rc, -ENOTSUP);
	assert_int_equal(jobs[4].rc, -ESRCH);
	for (unsigned i = 5; i < MANY; i++)
		assert_int_equal(jobs[i].rc, 0);
	assert_int_equal(m.segs, MANY - 4);
	assert_int_equal(m.p[2].trace, theirs); /* their lease is left alone */

	/* A batched read that stops part way: the rest are read alone. */
	many_init(&m);
	m.fail_at = 5;
	many_run(&m, jobs, STB_DRIVER_F_LEASE);
	for (unsigned i = 0; i < MANY; i++)
		assert_int_equal(jobs[i].rc, 0);
	assert_int_equal(m.reads, MANY - 5 * m.read_manys);

	/* A task that ran during the batched read: its copy is not used, it is
	 * traced again alone (its word is stable by then). */
	many_init(&m);
	m.bump = 6;
	many_run(&m, jobs, STB_DRIVER_F_LEASE);
	for (unsigned i = 0; i < MANY; i++)
		assert_int_equal(jobs[i].rc, 0);
	assert_true(m.reads >= 1);
	assert_int_equal(jobs[6].capt.seq, 6);

	/* Without a lease (or without read_many) every task is traced alone. */
	many_init(&m);
	many_run(&m, jobs, 0);
	assert_int_equal(m.read_manys, 0);
	assert_int_equal(m.reads, MANY);
}

/* The driver's two halves as the collector runs them: the copies made on
 * the copier's two threads into a buffer of their own, then finished here --
 * the same captures as stb_driver_trace_many, each job done once; a buffer
 * too small for every stack leaves the rest to be traced alone. */
static void test_copy_then_finish(void **state)
{
	(void)state;
	static struct many m;
	static struct stb_driver_job jobs[MANY];
	static uint8_t own[MANY * MANY_STACK];
	struct stb_copier *cp = stb_copier_new(2);
	assert_non_null(cp);
	for (unsigned round = 0; round < 2; round++) {
		many_init(&m);
		struct stb_mem mem;
		struct stb_driver d;
		many_setup(&m, &mem, &d, jobs, STB_DRIVER_F_LEASE);
		/* Round 1: room for the first 3 stacks of the 40 (each copy
		 * starts 16-byte aligned). */
		size_t cap = sizeof(own);
		if (round) {
			cap = 0;
			for (unsigned i = 0; i < 3; i++)
				cap += (m.p[i].stack_hi - (m.p[i].sp - STB_ABI_SWITCH_FRAME) + 15) &
				       ~(size_t)15;
		}
		stb_copier_start(cp, &d, jobs, MANY, own, cap);
		stb_copier_wait(cp);
		unsigned copied = 0;
		for (unsigned i = 0; i < MANY; i++) {
			copied += jobs[i].copied;
			assert_int_equal(m.p[i].trace, 0); /* every lease given back */
		}
		/* Two threads, each with half the buffer: round 1 copies 1 to 3
		 * of them (a share ends where a stack no longer fits). */
		if (round)
			assert_true(copied >= 1 && copied <= 3);
		else
			assert_int_equal(copied, MANY);
		assert_int_equal(m.reads, 0);
		stb_driver_finish_many(&d, jobs, MANY, many_done, &m);
		for (unsigned i = 0; i < MANY; i++) {
			assert_int_equal(jobs[i].rc, 0);
			assert_int_equal(m.done[i], 1);
		}
		assert_int_equal(m.reads, MANY - copied); /* the rest alone */
	}
	stb_copier_free(cp);
	stb_copier_free(NULL);
}

/* The caller of stb_copier_wait copies what no thread has begun: with the
 * copier's one thread stuck in its chunk, the caller copies the other (a
 * caller that only waited would leave the thread waiting 5 s for it), and
 * every stack is copied once. */
static void test_copier_helps(void **state)
{
	(void)state;
	static struct many m;
	static struct stb_driver_job jobs[MANY];
	static uint8_t own[MANY * MANY_STACK];
	struct stb_copier *cp = stb_copier_new(1);
	assert_non_null(cp);
	many_init(&m);
	m.hold_others = true;
	m.main = pthread_self();
	struct stb_mem mem;
	struct stb_driver d;
	many_setup(&m, &mem, &d, jobs, STB_DRIVER_F_LEASE);
	uint64_t t0 = stb_now_ns();
	stb_copier_start(cp, &d, jobs, MANY, own, sizeof(own));
	stb_copier_wait(cp);
	assert_true(__atomic_load_n(&m.main_read, __ATOMIC_ACQUIRE)); /* it helped */
	assert_true(stb_now_ns() - t0 < 4000000000ull);		   /* nobody waited it out */
	for (unsigned i = 0; i < MANY; i++) {
		assert_true(jobs[i].copied);
		assert_int_equal(m.p[i].trace, 0); /* every lease given back */
	}
	assert_int_equal(m.segs, MANY); /* each stack read once */
	stb_copier_free(cp);
}

/* Between batches the copier's thread faults in the pages it is given, and
 * stops touching them when told (they may then go). */
static void test_copier_ahead(void **state)
{
	(void)state;
	struct stb_copier *cp = stb_copier_new(1);
	assert_non_null(cp);
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 256 * page;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	assert_true(p != MAP_FAILED);
	unsigned char vec[256];
	assert_int_equal(mincore(p, len, vec), 0);
	unsigned resident = 0;
	for (unsigned i = 0; i < 256; i++)
		resident += vec[i] & 1;
	assert_int_equal(resident, 0);
	/* The first half, from an address within a page (rounded down). */
	stb_copier_ahead(cp, p + 10, p + 128 * page);
	for (unsigned k = 0; k < 5000 && resident < 128; k++) {
		usleep(1000);
		assert_int_equal(mincore(p, len, vec), 0);
		resident = 0;
		for (unsigned i = 0; i < 256; i++)
			resident += vec[i] & 1;
	}
	assert_int_equal(resident, 128); /* those pages, not one more */
	assert_int_equal(p[5], 0);       /* zero, as a fault would leave them */
	stb_copier_ahead(cp, NULL, NULL);
	assert_int_equal(munmap(p, len), 0); /* no thread touches them now */
	stb_copier_free(cp);
}

/* ---- a thread blocked in a call, seen from /proc (insyscall.h) ---- */

#define FLIP_A 0xa1a1a1a1a1a1a1a1ull
#define FLIP_B 0xb2b2b2b2b2b2b2b2ull

/* A thread that blocks in one futex call, at one sp and pc, from frames
 * that differ each time (a marker of A or B), mostly for 20 us, every 16th
 * time for 5 ms. */
struct flipper {
	pthread_t thread;
	int tid;
	uint64_t mid; /* the middle of its markers, once known */
	bool stop;
	uint32_t word;
};

static __attribute__((noinline)) void flip_block(struct flipper *f, uint64_t mark, long ns)
{
	volatile uint64_t marks[64];
	for (unsigned k = 0; k < 64; k++)
		marks[k] = mark;
	__atomic_store_n(&f->mid, (uint64_t)(uintptr_t)&marks[32], __ATOMIC_RELEASE);
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
	syscall(SYS_futex, &f->word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
	marks[0] = 0; /* the frame lives until the call returns */
}

static void *flip_main(void *arg)
{
	struct flipper *f = arg;
	__atomic_store_n(&f->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	for (unsigned i = 0; !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); i++)
		flip_block(f, i & 1 ? FLIP_A : FLIP_B, i % 16 == 15 ? 5000000 : 20000);
	return NULL;
}

/* This process's memory read in two halves around the flipper's markers,
 * half a millisecond apart: a copy the flipper changes midway. */
static int flip_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct flipper *f = ctx;
	uint64_t mid = __atomic_load_n(&f->mid, __ATOMIC_ACQUIRE);
	size_t cut = mid > addr && mid - addr < len ? (size_t)(mid - addr) : len;
	for (size_t at = 0; at < len;) {
		size_t n = at < cut ? cut - at : len - at;
		struct iovec l = {.iov_base = (char *)dst + at, .iov_len = n};
		struct iovec r = {.iov_base = (void *)(uintptr_t)(addr + at), .iov_len = n};
		if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)n)
			return -EFAULT;
		at += n;
		if (at == cut && cut < len)
			usleep(500);
	}
	return 0;
}

/* A thread that left its call and came back to the same sp and pc while its
 * stack was copied is caught (its run time moved): every copy taken holds
 * one marker, never both. */
static void test_insyscall_torn(void **state)
{
	(void)state;
	static struct flipper f;
	memset(&f, 0, sizeof(f));
	assert_int_equal(pthread_create(&f.thread, NULL, flip_main, &f), 0);
	while (!__atomic_load_n(&f.tid, __ATOMIC_ACQUIRE) || !__atomic_load_n(&f.mid, __ATOMIC_ACQUIRE))
		usleep(1000);
	struct stb_mem mem = {.read = flip_read, .ctx = &f};
	static uint8_t buf[16384];
	unsigned ok = 0, torn = 0;
	uint64_t end = stb_now_ns() + 1500000000ull;
	while (stb_now_ns() < end) {
		struct stb_capture capt;
		memset(&capt, 0, sizeof(capt));
		if (stb_insyscall_capture(&mem, 0, f.tid, 0, 0, buf, sizeof(buf), &capt) != 0)
			continue;
		ok++;
		/* The markers' words (elsewhere a register spill may hold either). */
		bool a = false, b = false;
		uint64_t mid = __atomic_load_n(&f.mid, __ATOMIC_ACQUIRE);
		for (size_t i = 0; i + 8 <= capt.copy.len; i += 8) {
			uint64_t v, at = capt.copy.addr + i;
			if (at < mid - 32 * 8 || at >= mid + 32 * 8)
				continue;
			memcpy(&v, capt.copy.bytes + i, 8);
			a |= v == FLIP_A;
			b |= v == FLIP_B;
		}
		torn += a && b;
	}
	__atomic_store_n(&f.stop, true, __ATOMIC_RELEASE);
	pthread_join(f.thread, NULL);
	if (torn)
		fail_msg("%u of %u copies taken hold frames of two calls", torn, ok);
	assert_true(ok >= 10); /* the long waits are taken */
}

static void test_sink(void **state)
{
	(void)state;
	struct stb_frame fr[8];
	memset(fr, 0xab, sizeof(fr));
	struct stb_frame_sink s = {.frames = fr, .nframes = 3, .max = 5};
	assert_int_equal(stb_frame_sink_depth(&s), 6);
	feed(&s, 10);
	assert_int_equal(s.n, 5); /* delivered (counted) */
	assert_true(s.truncated); /* a sixth existed */
	assert_int_equal(fr[2].ip, 0x1002);
	assert_int_equal(fr[1].flags, STB_FRAME_F_FP);
	assert_int_equal(fr[3].ip, 0xababababababababull); /* never past nframes */

	memset(&s, 0, sizeof(s));
	s.frames = fr;
	s.nframes = 8;
	s.max = 5;
	feed(&s, 5);
	assert_int_equal(s.n, 5);
	assert_false(s.truncated); /* exactly max: nothing beyond */

	/* A deadline long past: the clock is read before every 16th frame (the
	 * caller looked before the walk), so a walk stops within 15 frames. */
	memset(&s, 0, sizeof(s));
	s.deadline = 1;
	feed(&s, 5);
	assert_int_equal(s.n, 5);
	assert_false(s.timed_out);
	memset(&s, 0, sizeof(s));
	s.deadline = 1;
	feed(&s, 40);
	assert_int_equal(s.n, 15);
	assert_true(s.timed_out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_context_copy),  cmocka_unit_test(test_lying_entries),
	    cmocka_unit_test(test_never_settles), cmocka_unit_test(test_held_by_another),
	    cmocka_unit_test(test_slot_reused),   cmocka_unit_test(test_running),
	    cmocka_unit_test(test_ran_during_copy),
	    cmocka_unit_test(test_sink),          cmocka_unit_test(test_many),
	    cmocka_unit_test(test_expired_lease), cmocka_unit_test(test_copy_then_finish),
	    cmocka_unit_test(test_copier_helps), cmocka_unit_test(test_copier_ahead),
	    cmocka_unit_test(test_insyscall_torn),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
