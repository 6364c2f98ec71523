/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread::ConditionVariable (bRPC's bthread/condition_variable.h): a
 * bthread_cond_t used with std::unique_lock of bthread::Mutex or of
 * bthread_mutex_t. Header-only. Timed waits return ETIMEDOUT or 0, as bRPC;
 * wait(lock, pred) waits until pred() is true, as std::condition_variable.
 */
#ifndef STB_BTHREAD_CONDITION_VARIABLE_H
#define STB_BTHREAD_CONDITION_VARIABLE_H

#include <bthread/mutex.h>

#if defined(__cplusplus)
#include <time.h>

namespace bthread {

class ConditionVariable {
public:
	typedef bthread_cond_t *native_handler_type;
	typedef bthread_cond_t *native_handle_type;
	ConditionVariable()
	{
		const int ec = bthread_cond_init(&_cond, NULL);
		if (ec != 0)
			throw std::system_error(std::error_code(ec, std::system_category()),
						"bthread::ConditionVariable: bthread_cond_init failed");
	}
	~ConditionVariable() { bthread_cond_destroy(&_cond); }
	ConditionVariable(const ConditionVariable &) = delete;
	ConditionVariable &operator=(const ConditionVariable &) = delete;
	native_handler_type native_handler() { return &_cond; }
	native_handle_type native_handle() { return &_cond; }

	void wait(std::unique_lock<bthread::Mutex> &lock)
	{
		bthread_cond_wait(&_cond, lock.mutex()->native_handler());
	}
	void wait(std::unique_lock<bthread_mutex_t> &lock) { bthread_cond_wait(&_cond, lock.mutex()); }
	/* Waits until pred() returns true; pred runs with the lock held. */
	template <typename Predicate>
	void wait(std::unique_lock<bthread::Mutex> &lock, Predicate pred)
	{
		while (!pred())
			wait(lock);
	}
	template <typename Predicate>
	void wait(std::unique_lock<bthread_mutex_t> &lock, Predicate pred)
	{
		while (!pred())
			wait(lock);
	}

	/* Relative timeout in microseconds. */
	int wait_for(std::unique_lock<bthread::Mutex> &lock, long timeout_us)
	{
		return wait_until(lock, from_now(timeout_us));
	}
	int wait_for(std::unique_lock<bthread_mutex_t> &lock, long timeout_us)
	{
		return wait_until(lock, from_now(timeout_us));
	}
	/* duetime is CLOCK_REALTIME. */
	int wait_until(std::unique_lock<bthread::Mutex> &lock, timespec duetime)
	{
		const int rc = bthread_cond_timedwait(&_cond, lock.mutex()->native_handler(),
						      &duetime);
		return rc == ETIMEDOUT ? ETIMEDOUT : 0;
	}
	int wait_until(std::unique_lock<bthread_mutex_t> &lock, timespec duetime)
	{
		const int rc = bthread_cond_timedwait(&_cond, lock.mutex(), &duetime);
		return rc == ETIMEDOUT ? ETIMEDOUT : 0;
	}

	void notify_one() { bthread_cond_signal(&_cond); }
	void notify_all() { bthread_cond_broadcast(&_cond); }

private:
	static timespec from_now(long us)
	{
		timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		long long ns = (long long)ts.tv_nsec + (long long)us * 1000;
		ts.tv_sec += (time_t)(ns / 1000000000);
		ns %= 1000000000;
		if (ns < 0) {
			ns += 1000000000;
			ts.tv_sec--;
		}
		ts.tv_nsec = (long)ns;
		return ts;
	}
	bthread_cond_t _cond;
};

} // namespace bthread

#endif /* __cplusplus */

#endif /* STB_BTHREAD_CONDITION_VARIABLE_H */
