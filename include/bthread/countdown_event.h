/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread::CountdownEvent (bRPC's bthread/countdown_event.h): waiters block
 * until the counter drops to 0. Header-only over a butex; the wait itself is
 * stb_countdown_wait, so a tracer sees it as a COUNTDOWN wait on the event.
 */
#ifndef STB_BTHREAD_COUNTDOWN_EVENT_H
#define STB_BTHREAD_COUNTDOWN_EVENT_H

#include <time.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/export.h>

STB_BEGIN_DECLS
/*
 * Waits until *counter (a butex from butex_create) is <= 0, until abstime
 * (CLOCK_REALTIME, NULL: no limit). event is what a tracer shows as the
 * object waited on. Returns 0, ETIMEDOUT, EINVAL (counter NULL) or ENOMEM.
 * Blocks the calling bthread (or pthread); a stop does not end the wait.
 */
STB_EXPORT int stb_countdown_wait(int *counter, const struct timespec *abstime,
				  const void *event);
STB_END_DECLS

#if defined(__cplusplus)
#include <new>

namespace bthread {

class CountdownEvent {
public:
	explicit CountdownEvent(int initial_count = 1) : _wait_was_invoked(false)
	{
		_butex = static_cast<int *>(butex_create());
		if (!_butex)
			throw std::bad_alloc();
		__atomic_store_n(_butex, initial_count < 0 ? 0 : initial_count, __ATOMIC_RELAXED);
	}
	~CountdownEvent() { butex_destroy(_butex); }
	CountdownEvent(const CountdownEvent &) = delete;
	CountdownEvent &operator=(const CountdownEvent &) = delete;

	/* Decreases the counter by sig; wakes the waiters when it reaches 0.
	 * Safe when a woken waiter destroys *this right away. */
	void signal(int sig = 1, bool flush = false)
	{
		(void)flush;
		int *const saved = _butex; /* *this may be gone after the decrement */
		const int prev = __atomic_fetch_sub(saved, sig, __ATOMIC_RELEASE);
		if (prev > sig)
			return;
		butex_wake_all(saved);
	}
	/* Waits until the counter is 0 or less. Returns 0 (or ENOMEM). */
	int wait()
	{
		_wait_was_invoked = true;
		return stb_countdown_wait(_butex, NULL, this);
	}
	void add_count(int v = 1)
	{
		if (v > 0)
			__atomic_fetch_add(_butex, v, __ATOMIC_RELEASE);
	}
	/* Sets the counter to v (>= 0) for another round. */
	void reset(int v = 1)
	{
		if (v < 0)
			return;
		__atomic_store_n(_butex, v, __ATOMIC_RELEASE);
		_wait_was_invoked = false;
	}
	/* Like wait() until duetime (CLOCK_REALTIME): 0 or ETIMEDOUT. */
	int timed_wait(const timespec &duetime)
	{
		_wait_was_invoked = true;
		return stb_countdown_wait(_butex, &duetime, this);
	}

private:
	int *_butex;
	bool _wait_was_invoked;
};

} // namespace bthread

#endif /* __cplusplus */

#endif /* STB_BTHREAD_COUNTDOWN_EVENT_H */
