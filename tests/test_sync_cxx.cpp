/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C++ headers of the synchronization module, compiled as C++17 and used
 * as bRPC users do: bthread::Mutex with std::lock_guard / std::unique_lock
 * (also of bthread_mutex_t), FastPthreadMutex, ConditionVariable timeouts,
 * RWLock and its guards, CountdownEvent (and its published COUNTDOWN wait),
 * ConditionVariable::wait with a predicate (both lock types),
 * bthread_id_create2 / error2 with texts (queued copies too), and
 * bthread::stack_trace (bRPC's text for a bthread that finished).
 */
#include <bthread/condition_variable.h>
#include <bthread/countdown_event.h>
#include <bthread/id.h>
#include <bthread/mutex.h>
#include <bthread/rwlock.h>
#include <stb/abi.h>
#include <string>
#include <time.h>
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
}

static double ms_since(uint64_t t0)
{
	return (double)(stb_test_c_now_ns() - t0) / 1e6;
}

static timespec realtime_after_ms(long ms)
{
	timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	return ts;
}

static void test_mutex_and_cv(void **)
{
	bthread::Mutex m;
	{
		std::lock_guard<bthread::Mutex> g(m);
		assert_false(m.try_lock());
	}
	{
		std::unique_lock<bthread_mutex_t> l(*m.native_handle());
		assert_true(l.owns_lock());
		l.unlock();
		assert_true(l.try_lock());
	}
	bthread::FastPthreadMutex f;
	f.lock();
	assert_false(f.try_lock());
	f.unlock();
	bthread::ConditionVariable cv;
	std::unique_lock<bthread::Mutex> l(m);
	uint64_t t0 = stb_test_c_now_ns();
	assert_int_equal(cv.wait_for(l, 20000), ETIMEDOUT);
	assert_true(ms_since(t0) >= 15);
	assert_true(l.owns_lock());
	bthread::RWLock rw;
	{
		bthread::RWLockRdGuard g(rw);
		assert_false(rw.try_wrlock());
		assert_true(rw.try_rdlock());
		rw.unlock();
	}
	{
		std::lock_guard<bthread::RWLock> g(rw, false);
		assert_false(rw.try_rdlock());
	}
}

static void *count_down(void *arg)
{
	bthread_usleep(20000);
	static_cast<bthread::CountdownEvent *>(arg)->signal();
	return NULL;
}

static void *wait_event(void *arg)
{
	return (void *)(intptr_t) static_cast<bthread::CountdownEvent *>(arg)->wait();
}

static void test_countdown(void **)
{
	bthread::CountdownEvent ev(2);
	bthread_t w, s[2];
	assert_int_equal(bthread_start_background(&w, NULL, wait_event, &ev), 0);
	assert_true(stb_test_c_parked(w, STB_WAIT_COUNTDOWN, 5000));
	assert_true(stb_test_c_wait_object(w) == (uint64_t)(uintptr_t)&ev);
	for (auto &t : s)
		assert_int_equal(bthread_start_background(&t, NULL, count_down, &ev), 0);
	void *rc;
	assert_int_equal(bthread_join(w, &rc), 0);
	assert_int_equal((intptr_t)rc, 0);
	for (auto &t : s)
		assert_int_equal(bthread_join(t, NULL), 0);
	ev.reset(1);
	timespec ts = realtime_after_ms(10);
	assert_int_equal(ev.timed_wait(ts), ETIMEDOUT);
	ev.signal();
	assert_int_equal(ev.wait(), 0);
}

static std::vector<std::string> texts;
static int on_error2(bthread_id_t id, void *data, int code, const std::string &text)
{
	(void)data;
	texts.push_back(std::to_string(code) + ":" + text);
	return bthread_id_unlock(id);
}

static void test_id_texts(void **)
{
	bthread_id_t id;
	assert_int_equal(bthread_id_create2(&id, NULL, on_error2), 0);
	assert_int_equal(bthread_id_error2(id, 1, "now"), 0);
	assert_int_equal(bthread_id_lock(id, NULL), 0);
	{
		std::string t = "queued";
		assert_int_equal(bthread_id_error2(id, 2, t), 0);
	} /* the queued error keeps its own copy */
	assert_int_equal(bthread_id_error(id, 3), 0);
	assert_int_equal(bthread_id_unlock(id), 0);
	assert_int_equal((int)texts.size(), 3);
	assert_string_equal(texts[0].c_str(), "1:now");
	assert_string_equal(texts[1].c_str(), "2:queued");
	assert_string_equal(texts[2].c_str(), "3:");
	assert_true(bthread::id_value(id) == (uint32_t)id.value);
	assert_int_equal(bthread_id_lock(id, NULL), 0);
	assert_int_equal(bthread_id_unlock_and_destroy(id), 0);
	assert_true(id != INVALID_BTHREAD_ID);
	/* No handler: bRPC's default one, which unlocks and destroys the id. */
	assert_int_equal(bthread_id_create2(&id, NULL, NULL), 0);
	assert_int_equal(bthread_id_error2(id, 4, "gone"), 0);
	assert_int_equal(bthread_id_lock(id, NULL), EINVAL);
	assert_int_equal(bthread_id_create2_ranged(&id, NULL, NULL, 2), 0);
	assert_int_equal(bthread_id_error2(id, 5, "gone"), 0);
	assert_int_equal(bthread_id_join(id), 0);
	assert_int_equal(bthread_id_lock(id, NULL), EINVAL);
}

static void *sleeper(void *)
{
	bthread_usleep(200000);
	return NULL;
}

static void test_stack_trace(void **)
{
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, sleeper, NULL), 0);
	assert_true(stb_test_c_parked(t, STB_WAIT_SLEEP, 5000));
	std::string s = bthread::stack_trace(t);
	assert_true(s.find("bthread_usleep") != std::string::npos);
	assert_int_equal(bthread_join(t, NULL), 0);
	/* Finished: bRPC's text (its BthreadTest.trace looks for "not exist now"). */
	s = bthread::stack_trace(t);
	const std::string want = "bthread=" + std::to_string(t) + " not exist now";
	if (s.find(want) == std::string::npos)
		fail_msg("stack_trace of a finished bthread: \"%s\"", s.c_str());
	assert_true(s.find("No frame") == 0);
}

/* wait(lock, pred): returns at once when pred() holds, else waits until a
 * notify finds it true (spurious or early notifies do not end it). */
struct pred_state {
	bthread::Mutex m;
	bthread::ConditionVariable cv;
	int value = 0;
	int woke = 0;
	bool native = false;
};

static void *pred_waiter(void *arg)
{
	pred_state *p = static_cast<pred_state *>(arg);
	if (p->native) {
		std::unique_lock<bthread_mutex_t> l(*p->m.native_handler());
		p->cv.wait(l, [p] { return p->value >= 3; });
		p->woke = p->value;
	} else {
		std::unique_lock<bthread::Mutex> l(p->m);
		p->cv.wait(l, [p] { return p->value >= 3; });
		p->woke = p->value;
	}
	return NULL;
}

static void test_cv_predicate(void **)
{
	for (int native = 0; native < 2; native++) {
		pred_state p;
		p.native = native != 0;
		{
			/* Already true: no wait. */
			p.value = 5;
			std::unique_lock<bthread::Mutex> l(p.m);
			p.cv.wait(l, [&p] { return p.value >= 3; });
			std::unique_lock<bthread_mutex_t> l2(*p.m.native_handler(), std::defer_lock);
			l.unlock();
			l2.lock();
			p.cv.wait(l2, [&p] { return p.value == 5; });
			p.value = 0;
		}
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, pred_waiter, &p), 0);
		assert_true(stb_test_c_parked(t, STB_WAIT_COND, 5000));
		for (int i = 1; i <= 3; i++) {
			{
				std::lock_guard<bthread::Mutex> g(p.m);
				p.value = i;
				p.cv.notify_all();
			}
			if (i < 3) /* woken, pred false: it waits again */
				assert_true(stb_test_c_parked(t, STB_WAIT_COND, 5000));
		}
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(p.woke, 3);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mutex_and_cv),
		cmocka_unit_test(test_countdown),
		cmocka_unit_test(test_id_texts),
		cmocka_unit_test(test_stack_trace),
		cmocka_unit_test(test_cv_predicate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
