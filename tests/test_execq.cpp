/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread::ExecutionQueue (bthread/execution_queue.h), as bRPC programs use
 * it: push order kept per producer (bthreads and pthreads), the stopped
 * call exactly once after every task, EINVAL after stop, join; consumers on
 * a bthread, a resident pthread, an Executor, or in place on the pusher;
 * high-priority tasks first (also ending a normal pass); cancel of queued,
 * running, finished and recycled tasks; move-only, large and over-aligned
 * tasks destroyed once each; scoped references holding the stopped call
 * back; stale ids; and what the tracers see: the consumer naming its queue,
 * the queued count, joiners and an idle pthread consumer in EXECQ waits.
 */
#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <bthread/execution_queue.h>
#include <stb/abi.h>

#include <atomic>
#include <string.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
bool stb_test_c_parked(bthread_t tid, unsigned kind, unsigned ms);
uint64_t stb_test_c_wait_object(bthread_t tid);
uint64_t stb_test_c_now_ns(void);
uint64_t stb_test_c_execq_of(bthread_t tid);
bthread_t stb_test_c_execq_task(uint64_t queue, bool pthread);
unsigned stb_test_c_wait_kind(bthread_t tid, uint64_t *object);
}

/* Polls cond every 0.2 ms for up to ms milliseconds. */
template <typename F> static bool wait_until(F cond, unsigned ms = 5000)
{
	const uint64_t end = stb_test_c_now_ns() + (uint64_t)ms * 1000000u;
	while (!cond()) {
		if (stb_test_c_now_ns() > end)
			return false;
		usleep(200);
	}
	return true;
}

/* A hang fails the test (SIGALRM ends the process). */
static void watchdog(unsigned seconds)
{
	alarm(seconds);
}

/* ---- a queue that records what it ran ---- */

struct Rec {
	std::vector<long> ran;        /* task values in run order */
	int stopped_calls = 0;
	int calls = 0;
	bool saw_bthread = false, saw_pthread = false;
	pthread_t thread{};
	int *gate = nullptr;          /* a task of value -1 waits here until *gate != 0 */
	std::atomic<int> blocked{0};  /* a task of value -1 is waiting on the gate */
	std::atomic<size_t> nran{0};  /* ran.size(), for polling while it runs */
	bthread_t consumer = 0;       /* bthread_self() of the last call */
};

static int record(void *meta, bthread::TaskIterator<long> &it)
{
	Rec *r = static_cast<Rec *>(meta);
	r->calls++;
	r->consumer = bthread_self();
	r->thread = pthread_self();
	(bthread_self() ? r->saw_bthread : r->saw_pthread) = true;
	if (it.is_queue_stopped()) {
		assert_false((bool)it);
		r->stopped_calls++;
		return 0;
	}
	for (; it; ++it) {
		if (*it == -1 && r->gate) {
			r->blocked.store(1);
			while (__atomic_load_n(r->gate, __ATOMIC_ACQUIRE) == 0)
				butex_wait(r->gate, 0, NULL);
			r->blocked.store(0);
		}
		r->ran.push_back(*it);
		r->nran.store(r->ran.size());
	}
	return 0;
}

static void open_gate(int *gate)
{
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
	butex_wake_all(gate);
}

static void test_order_and_stop(void **)
{
	watchdog(60);
	for (int mode = 0; mode < 2; mode++) {
		Rec r;
		bthread::ExecutionQueueId<long> id = {0};
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		assert_true(id.value != 0);
		for (long i = 0; i < 1000; i++)
			assert_int_equal(bthread::execution_queue_execute(id, i), 0);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		/* Stopped: no more tasks, no second stop. */
		assert_int_equal(bthread::execution_queue_execute(id, 5L), EINVAL);
		assert_int_equal(bthread::execution_queue_stop(id), EINVAL);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		assert_int_equal(r.ran.size(), 1000);
		for (long i = 0; i < 1000; i++)
			assert_int_equal(r.ran[i], i);
		assert_int_equal(r.stopped_calls, 1);
		if (mode == 0)
			assert_true(r.saw_bthread && !r.saw_pthread);
		else
			assert_true(r.saw_pthread && !r.saw_bthread);
		/* Joined again: at once; a stale id names nothing. */
		assert_int_equal(bthread::execution_queue_join(id), 0);
		assert_false((bool)bthread::execution_queue_address(id));
	}
	/* Ids of slots used again are new ids. */
	std::vector<uint64_t> ids;
	for (int i = 0; i < 200; i++) {
		Rec r;
		bthread::ExecutionQueueId<long> id;
		assert_int_equal(bthread::execution_queue_start(&id, NULL, record, &r), 0);
		assert_int_equal(bthread::execution_queue_execute(id, (long)i), 0);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		assert_int_equal(r.ran.size(), 1);
		for (uint64_t o : ids)
			assert_true(o != id.value);
		ids.push_back(id.value);
	}
	/* An id no queue ever had. */
	bthread::ExecutionQueueId<long> never = {((uint64_t)2 << 32) | 0x7fffff};
	assert_int_equal(bthread::execution_queue_join(never), EINVAL);
	assert_int_equal(bthread::execution_queue_execute(never, 1L), EINVAL);
	assert_int_equal(bthread::execution_queue_stop(never), EINVAL);
	bthread::ExecutionQueueId<long> id;
	int (*no_fn)(void *, bthread::TaskIterator<long> &) = NULL;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, no_fn, NULL), EINVAL);
}

/* ---- producers on bthreads and pthreads, each in order ---- */

struct Order {
	static const int NPROD = 8;
	long next[NPROD] = {};
	long disorder = 0;
	long total = 0;
	bthread::ExecutionQueueId<long> id;
	std::atomic<int> started{0};
};

static int check_order(void *meta, bthread::TaskIterator<long> &it)
{
	Order *o = static_cast<Order *>(meta);
	for (; it; ++it) {
		const int p = (int)(*it >> 32);
		const long seq = *it & 0xffffffff;
		if (seq != o->next[p]++)
			o->disorder++;
		o->total++;
	}
	return 0;
}

static const long ORDER_N = 20000;

static void *produce(void *arg)
{
	Order *o = static_cast<Order *>(arg);
	const long p = o->started.fetch_add(1);
	const bthread::TaskOptions *opt = p % 3 == 2 ? &bthread::TASK_OPTIONS_INPLACE : NULL;
	for (long i = 0; i < ORDER_N; i++)
		if (bthread::execution_queue_execute(o->id, p << 32 | i, opt) != 0)
			o->disorder += 1000000;
	return NULL;
}

static void test_producers_keep_order(void **)
{
	watchdog(120);
	for (int mode = 0; mode < 2; mode++) {
		Order o;
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&o.id, &opt, check_order, &o), 0);
		pthread_t pt[Order::NPROD / 2];
		bthread_t bt[Order::NPROD / 2];
		for (auto &t : pt)
			assert_int_equal(pthread_create(&t, NULL, produce, &o), 0);
		for (auto &t : bt)
			assert_int_equal(bthread_start_background(&t, NULL, produce, &o), 0);
		for (auto &t : pt)
			assert_int_equal(pthread_join(t, NULL), 0);
		for (auto &t : bt)
			assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(bthread::execution_queue_stop(o.id), 0);
		assert_int_equal(bthread::execution_queue_join(o.id), 0);
		assert_int_equal(o.disorder, 0);
		assert_int_equal(o.total, ORDER_N * Order::NPROD);
	}
}

/* ---- high priority ---- */

static void test_high_priority(void **)
{
	watchdog(60);
	for (int mode = 0; mode < 2; mode++) {
		Rec r;
		int *gate = static_cast<int *>(butex_create());
		r.gate = gate;
		bthread::ExecutionQueueId<long> id;
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		assert_int_equal(bthread::execution_queue_execute(id, -1L), 0);
		assert_true(wait_until([&] { return r.blocked.load() == 1; }));
		/* While -1 runs: normal 1..3, urgent 100, 101, normal 4. */
		for (long v : {1L, 2L, 3L})
			assert_int_equal(bthread::execution_queue_execute(id, v), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 100L, &bthread::TASK_OPTIONS_URGENT), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 101L, &bthread::TASK_OPTIONS_URGENT), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 4L), 0);
		open_gate(gate);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		const std::vector<long> want = {-1, 100, 101, 1, 2, 3, 4};
		assert_int_equal(r.ran.size(), want.size());
		for (size_t i = 0; i < want.size(); i++)
			assert_int_equal(r.ran[i], want[i]);
		butex_destroy(gate);
	}
}

/* A normal pass that is under way ends at the next task when a high-priority
 * one comes (bRPC's execute_urgent): the urgent task is the next to run. */
struct Urgent {
	int *gate;
	std::atomic<int> at_gate{0};
	std::vector<long> ran;
	int passes = 0;
	bool next_was_last = false;
};

static int urgent_exec(void *meta, bthread::TaskIterator<long> &it)
{
	Urgent *u = static_cast<Urgent *>(meta);
	if (it.is_queue_stopped())
		return 0;
	u->passes++;
	for (; it; ++it) {
		u->ran.push_back(*it);
		if (*it == 0) {
			u->at_gate.store(1);
			while (__atomic_load_n(u->gate, __ATOMIC_ACQUIRE) == 0)
				butex_wait(u->gate, 0, NULL);
			++it;
			u->next_was_last = !it; /* the pass ends before task 1 */
			if (!it)
				return 0;
			u->ran.push_back(*it);
		}
	}
	return 0;
}

static void test_urgent_breaks_pass(void **)
{
	watchdog(30);
	Urgent u;
	u.gate = static_cast<int *>(butex_create());
	bthread::ExecutionQueueId<long> id;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, urgent_exec, &u), 0);
	for (long v : {0L, 1L, 2L})
		assert_int_equal(bthread::execution_queue_execute(id, v), 0);
	assert_true(wait_until([&] { return u.at_gate.load() == 1; }));
	assert_int_equal(bthread::execution_queue_execute(id, 9L, &bthread::TASK_OPTIONS_URGENT), 0);
	open_gate(u.gate);
	assert_int_equal(bthread::execution_queue_stop(id), 0);
	assert_int_equal(bthread::execution_queue_join(id), 0);
	assert_true(u.next_was_last);
	const std::vector<long> want = {0, 9, 1, 2};
	assert_int_equal(u.ran.size(), want.size());
	for (size_t i = 0; i < want.size(); i++)
		assert_int_equal(u.ran[i], want[i]);
	butex_destroy(u.gate);
}

/* ---- in place ---- */

static void *push_in_place(void *arg)
{
	auto *a = static_cast<std::pair<bthread::ExecutionQueueId<long>, Rec *> *>(arg);
	bthread::execution_queue_execute(a->first, 7L, &bthread::TASK_OPTIONS_INPLACE);
	return NULL;
}

static void test_in_place(void **)
{
	watchdog(30);
	for (int mode = 0; mode < 2; mode++) {
		/* An empty queue: runs on the pushing thread, before the push returns. */
		Rec r;
		bthread::ExecutionQueueId<long> id;
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 5L, &bthread::TASK_OPTIONS_INPLACE), 0);
		assert_int_equal(r.ran.size(), 1);
		assert_true(pthread_equal(r.thread, pthread_self()));
		/* From a bthread: on that bthread. */
		std::pair<bthread::ExecutionQueueId<long>, Rec *> a(id, &r);
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, push_in_place, &a), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(r.ran.size(), 2);
		assert_int_equal(r.consumer, t);
		/* A busy queue: queued, run by the consumer. */
		int *gate = static_cast<int *>(butex_create());
		r.gate = gate;
		assert_int_equal(bthread::execution_queue_execute(id, -1L), 0);
		assert_true(wait_until([&] { return r.blocked.load() == 1; }));
		assert_int_equal(bthread::execution_queue_execute(id, 8L, &bthread::TASK_OPTIONS_INPLACE), 0);
		assert_int_equal(r.ran.size(), 2); /* not run by this push */
		open_gate(gate);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		assert_int_equal(r.ran.size(), 4);
		assert_int_equal(r.ran[3], 8);
		assert_false(pthread_equal(r.thread, pthread_self()));
		butex_destroy(gate);
	}
}

/* ---- an Executor ---- */

class ThreadExecutor : public bthread::Executor {
public:
	int submit(void *(*fn)(void *), void *args) override
	{
		submitted++;
		if (refuse)
			return -1;
		std::thread([fn, args] { fn(args); }).detach();
		return 0;
	}
	std::atomic<int> submitted{0};
	bool refuse = false;
};

static void test_executor(void **)
{
	watchdog(30);
	for (int refuse = 0; refuse < 2; refuse++) {
		ThreadExecutor ex;
		ex.refuse = refuse != 0;
		Rec r;
		bthread::ExecutionQueueId<long> id;
		bthread::ExecutionQueueOptions opt;
		opt.executor = &ex;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 1L), 0);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		assert_true(ex.submitted.load() >= 1);
		assert_int_equal(r.ran.size(), 1);
		assert_int_equal(r.stopped_calls, 1);
		assert_true(r.saw_pthread && !r.saw_bthread);
		/* A refused submit runs the tasks on the pusher itself. */
		if (refuse)
			assert_true(pthread_equal(r.thread, pthread_self()));
	}
}

/* ---- cancel ---- */

static void test_cancel(void **)
{
	watchdog(30);
	for (int mode = 0; mode < 2; mode++) {
		Rec r;
		int *gate = static_cast<int *>(butex_create());
		r.gate = gate;
		bthread::ExecutionQueueId<long> id;
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		bthread::TaskHandle none;
		assert_int_equal(bthread::execution_queue_cancel(none), -1);
		bthread::TaskHandle running, queued, urgent, kept;
		assert_int_equal(bthread::execution_queue_execute(id, -1L, NULL, &running), 0);
		assert_true(wait_until([&] { return r.blocked.load() == 1; }));
		assert_int_equal(bthread::execution_queue_cancel(running), 1);
		assert_int_equal(bthread::execution_queue_cancel(running), 1);
		assert_int_equal(bthread::execution_queue_execute(id, 10L, NULL, &queued), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 11L, &bthread::TASK_OPTIONS_URGENT, &urgent), 0);
		assert_int_equal(bthread::execution_queue_execute(id, 12L, NULL, &kept), 0);
		assert_int_equal(bthread::execution_queue_cancel(queued), 0);
		assert_int_equal(bthread::execution_queue_cancel(queued), -1);
		assert_int_equal(bthread::execution_queue_cancel(urgent), 0);
		open_gate(gate);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_int_equal(bthread::execution_queue_join(id), 0);
		/* Only -1 and 12 ran (a cancelled high-priority task does not hold up
		 * the queue either). */
		assert_int_equal(r.ran.size(), 2);
		assert_int_equal(r.ran[0], -1);
		assert_int_equal(r.ran[1], 12);
		/* Done, and their nodes recycled since: -1 for every handle. */
		for (auto *h : {&running, &queued, &urgent, &kept})
			assert_int_equal(bthread::execution_queue_cancel(*h), -1);
		butex_destroy(gate);
	}
}

/* ---- task types ---- */

static std::atomic<long> live_tasks{0};

struct MoveOnly {
	explicit MoveOnly(long v) : value(v) { live_tasks++; }
	MoveOnly(MoveOnly &&o) noexcept : value(o.value) { live_tasks++; }
	MoveOnly(const MoveOnly &) = delete;
	MoveOnly &operator=(const MoveOnly &) = delete;
	~MoveOnly() { live_tasks--; }
	long value;
};

struct Big {
	explicit Big(long v) : value(v) { live_tasks++; memset(pad, (int)v, sizeof(pad)); }
	Big(const Big &o) : value(o.value) { live_tasks++; memcpy(pad, o.pad, sizeof(pad)); }
	~Big() { live_tasks--; }
	long value;
	char pad[500];
};

struct alignas(64) Aligned {
	explicit Aligned(long v) : value(v) { live_tasks++; }
	Aligned(const Aligned &o) : value(o.value) { live_tasks++; }
	~Aligned() { live_tasks--; }
	long value;
};

template <typename T> struct Sum {
	long sum = 0;
	long count = 0;
	bool misaligned = false;
};

template <typename T> static int sum_tasks(void *meta, bthread::TaskIterator<T> &it)
{
	Sum<T> *s = static_cast<Sum<T> *>(meta);
	for (; it; ++it) {
		s->sum += it->value;
		s->count++;
		if ((uintptr_t)&*it % alignof(T))
			s->misaligned = true;
	}
	return 0;
}

template <typename T> static void run_typed(bool cancel_some)
{
	Sum<T> s;
	bthread::ExecutionQueueId<T> id;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, sum_tasks<T>, &s), 0);
	long want = 0, want_count = 0;
	for (long i = 1; i <= 300; i++) {
		bthread::TaskHandle h;
		assert_int_equal(bthread::execution_queue_execute(id, T(i), NULL, &h), 0);
		if (cancel_some && i % 3 == 0 && bthread::execution_queue_cancel(h) == 0)
			continue;
		want += i;
		want_count++;
	}
	assert_int_equal(bthread::execution_queue_stop(id), 0);
	assert_int_equal(bthread::execution_queue_join(id), 0);
	assert_int_equal(s.sum, want);
	assert_int_equal(s.count, want_count);
	assert_false(s.misaligned);
}

static void test_task_types(void **)
{
	watchdog(30);
	run_typed<MoveOnly>(false);
	run_typed<MoveOnly>(true);
	run_typed<Big>(true);
	run_typed<Aligned>(true);
	/* Every task constructed was destroyed once (cancelled ones too). */
	assert_int_equal(live_tasks.load(), 0);
	/* Through an lvalue: copied. */
	Big b(3);
	Sum<Big> s;
	bthread::ExecutionQueueId<Big> id;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, sum_tasks<Big>, &s), 0);
	assert_int_equal(bthread::execution_queue_execute(id, b), 0);
	assert_int_equal(bthread::execution_queue_stop(id), 0);
	assert_int_equal(bthread::execution_queue_join(id), 0);
	assert_int_equal(s.sum, 3);
	assert_int_equal(live_tasks.load(), 1); /* b itself */
}

/* ---- references ---- */

static void test_address_holds_stop(void **)
{
	watchdog(30);
	Rec r;
	bthread::ExecutionQueueId<long> id;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, record, &r), 0);
	{
		bthread::ExecutionQueue<long>::scoped_ptr_t p = bthread::execution_queue_address(id);
		assert_true((bool)p);
		assert_true(p != nullptr);
		assert_false(p->stopped());
		assert_int_equal(p->execute(1L), 0);
		long two = 2;
		assert_int_equal(p->execute(two), 0);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		assert_true(p->stopped());
		assert_int_equal(p->execute(3L), EINVAL);
		/* The stopped call waits for this reference. */
		usleep(20000);
		assert_int_equal(r.stopped_calls, 0);
		bthread::ExecutionQueue<long>::scoped_ptr_t q = std::move(p);
		assert_false((bool)p);
		assert_true((bool)q);
		usleep(5000);
		assert_int_equal(r.stopped_calls, 0);
	}
	assert_int_equal(bthread::execution_queue_join(id), 0);
	assert_int_equal(r.stopped_calls, 1);
	assert_int_equal(r.ran.size(), 2);
	assert_false((bool)bthread::execution_queue_address(id));
}

/* ---- a function that takes one task per call ---- */

static int one_per_call(void *meta, bthread::TaskIterator<long> &it)
{
	if (it)
		static_cast<Rec *>(meta)->ran.push_back(*it);
	return 0;
}

static void test_one_task_per_call(void **)
{
	watchdog(30);
	Rec r;
	bthread::ExecutionQueueId<long> id;
	assert_int_equal(bthread::execution_queue_start(&id, NULL, one_per_call, &r), 0);
	for (long i = 0; i < 100; i++)
		assert_int_equal(bthread::execution_queue_execute(id, i), 0);
	assert_int_equal(bthread::execution_queue_stop(id), 0);
	assert_int_equal(bthread::execution_queue_join(id), 0);
	assert_int_equal(r.ran.size(), 100);
	for (long i = 0; i < 100; i++)
		assert_int_equal(r.ran[i], i);
}

/* ---- what the tracers see ---- */

static uint64_t queue_addr(bthread::ExecutionQueueId<long> id)
{
	bthread::ExecutionQueue<long>::scoped_ptr_t p = bthread::execution_queue_address(id);
	struct stb_execq *q = p ? stb_execq_address(id.value) : NULL;
	if (q)
		stb_execq_release(q);
	return (uint64_t)(uintptr_t)q;
}

static uint64_t queued_of(uint64_t addr)
{
	const struct stb_abi_execq *h = reinterpret_cast<const struct stb_abi_execq *>(addr);
	return __atomic_load_n(&h->pushed, __ATOMIC_ACQUIRE) - __atomic_load_n(&h->taken, __ATOMIC_ACQUIRE);
}

static void *join_queue(void *arg)
{
	return (void *)(intptr_t)bthread::execution_queue_join(
		*static_cast<bthread::ExecutionQueueId<long> *>(arg));
}

static void test_published(void **)
{
	watchdog(30);
	for (int mode = 0; mode < 2; mode++) {
		Rec r;
		int *gate = static_cast<int *>(butex_create());
		r.gate = gate;
		bthread::ExecutionQueueId<long> id;
		bthread::ExecutionQueueOptions opt;
		opt.use_pthread = mode == 1;
		assert_int_equal(bthread::execution_queue_start(&id, &opt, record, &r), 0);
		const uint64_t q = queue_addr(id);
		assert_true(q != 0);
		assert_int_equal(bthread::execution_queue_execute(id, -1L), 0);
		assert_true(wait_until([&] { return r.blocked.load() == 1; }));
		/* The consumer (blocked in the task) names the queue. */
		const bthread_t c = stb_test_c_execq_task(q, mode == 1);
		assert_true(c != 0);
		if (mode == 0) {
			assert_int_equal(c, r.consumer);
			assert_true(stb_test_c_parked(c, STB_WAIT_BUTEX, 5000));
		}
		assert_int_equal(stb_test_c_execq_of(c), q);
		/* Queued: the tasks pushed behind the running one. */
		assert_int_equal(queued_of(q), 0);
		for (long v = 1; v <= 5; v++)
			assert_int_equal(bthread::execution_queue_execute(id, v), 0);
		assert_int_equal(queued_of(q), 5);
		open_gate(gate);
		assert_true(wait_until([&] { return queued_of(q) == 0 && r.nran.load() == 6; }));
		if (mode == 0) {
			/* The consumer bthread ended with its queue empty. */
			assert_true(wait_until([&] { return stb_test_c_execq_task(q, false) == 0; }));
		} else {
			/* The resident pthread waits for work, in an EXECQ wait on the queue. */
			uint64_t obj = 0;
			assert_true(wait_until([&] {
				return stb_test_c_wait_kind(c, &obj) == STB_WAIT_EXECQ && obj == q;
			}));
			assert_int_equal(stb_test_c_execq_of(c), q);
		}
		/* A joiner waits on the queue (EXECQ) until the stopped call ran. */
		bthread_t j;
		assert_int_equal(bthread_start_background(&j, NULL, join_queue, &id), 0);
		assert_true(stb_test_c_parked(j, STB_WAIT_EXECQ, 5000));
		assert_int_equal(stb_test_c_wait_object(j), q);
		assert_int_equal(bthread::execution_queue_stop(id), 0);
		void *rc = (void *)-1;
		assert_int_equal(bthread_join(j, &rc), 0);
		assert_int_equal((intptr_t)rc, 0);
		assert_int_equal(r.stopped_calls, 1);
		if (mode == 1) /* its pthread left the queue (and exits) */
			assert_true(wait_until([&] { return stb_test_c_execq_task(q, true) == 0; }));
		butex_destroy(gate);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_and_stop),
		cmocka_unit_test(test_producers_keep_order),
		cmocka_unit_test(test_high_priority),
		cmocka_unit_test(test_urgent_breaks_pass),
		cmocka_unit_test(test_in_place),
		cmocka_unit_test(test_executor),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_task_types),
		cmocka_unit_test(test_address_holds_stop),
		cmocka_unit_test(test_one_task_per_call),
		cmocka_unit_test(test_published),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
