/* SPDX-License-Identifier: Apache-2.0 */
/*
 * C++ over bthread_rwlock_t (bRPC's bthread/rwlock.h): bthread::RWLock, the
 * guards RWLockRdGuard / RWLockWrGuard, and std::lock_guard specializations
 * for bthread_rwlock_t and bthread::RWLock taking (lock, read). Header-only.
 */
#ifndef STB_BTHREAD_RWLOCK_H
#define STB_BTHREAD_RWLOCK_H

#include <bthread/bthread.h>

#if defined(__cplusplus)
#include <mutex>
#include <system_error>

namespace bthread {

class RWLock {
public:
	typedef bthread_rwlock_t *native_handler_type;
	typedef bthread_rwlock_t *native_handle_type;
	RWLock()
	{
		const int ec = bthread_rwlock_init(&_rwlock, NULL);
		if (ec != 0)
			throw std::system_error(std::error_code(ec, std::system_category()),
						"bthread::RWLock: bthread_rwlock_init failed");
	}
	~RWLock() { bthread_rwlock_destroy(&_rwlock); }
	RWLock(const RWLock &) = delete;
	RWLock &operator=(const RWLock &) = delete;
	native_handler_type native_handler() { return &_rwlock; }
	native_handle_type native_handle() { return &_rwlock; }

	void rdlock() { check(bthread_rwlock_rdlock(&_rwlock), "rdlock"); }
	bool try_rdlock() { return bthread_rwlock_tryrdlock(&_rwlock) == 0; }
	bool timed_rdlock(const struct timespec *abstime)
	{
		return bthread_rwlock_timedrdlock(&_rwlock, abstime) == 0;
	}
	void wrlock() { check(bthread_rwlock_wrlock(&_rwlock), "wrlock"); }
	bool try_wrlock() { return bthread_rwlock_trywrlock(&_rwlock) == 0; }
	bool timed_wrlock(const struct timespec *abstime)
	{
		return bthread_rwlock_timedwrlock(&_rwlock, abstime) == 0;
	}
	void unlock() { bthread_rwlock_unlock(&_rwlock); }
	/* std::shared_mutex-style names. */
	void lock() { wrlock(); }
	bool try_lock() { return try_wrlock(); }
	void lock_shared() { rdlock(); }
	bool try_lock_shared() { return try_rdlock(); }
	void unlock_shared() { unlock(); }

private:
	static void check(int ec, const char *what)
	{
		if (ec != 0)
			throw std::system_error(std::error_code(ec, std::system_category()), what);
	}
	bthread_rwlock_t _rwlock;
};

/* Holds a read lock for its lifetime. */
class RWLockRdGuard {
public:
	explicit RWLockRdGuard(bthread_rwlock_t &rwlock) : _rwlock(&rwlock) { bthread_rwlock_rdlock(_rwlock); }
	explicit RWLockRdGuard(RWLock &rwlock) : RWLockRdGuard(*rwlock.native_handler()) {}
	~RWLockRdGuard() { bthread_rwlock_unlock(_rwlock); }
	RWLockRdGuard(const RWLockRdGuard &) = delete;
	RWLockRdGuard &operator=(const RWLockRdGuard &) = delete;

private:
	bthread_rwlock_t *_rwlock;
};

/* Holds the write lock for its lifetime. */
class RWLockWrGuard {
public:
	explicit RWLockWrGuard(bthread_rwlock_t &rwlock) : _rwlock(&rwlock) { bthread_rwlock_wrlock(_rwlock); }
	explicit RWLockWrGuard(RWLock &rwlock) : RWLockWrGuard(*rwlock.native_handler()) {}
	~RWLockWrGuard() { bthread_rwlock_unlock(_rwlock); }
	RWLockWrGuard(const RWLockWrGuard &) = delete;
	RWLockWrGuard &operator=(const RWLockWrGuard &) = delete;

private:
	bthread_rwlock_t *_rwlock;
};

} // namespace bthread

namespace std {

/* lock_guard(rwlock, read): a read lock when read is true, else the write lock. */
template <> class lock_guard<bthread_rwlock_t> {
public:
	lock_guard(bthread_rwlock_t &rwlock, bool read) : _rwlock(&rwlock)
	{
		if (read)
			bthread_rwlock_rdlock(_rwlock);
		else
			bthread_rwlock_wrlock(_rwlock);
	}
	~lock_guard() { bthread_rwlock_unlock(_rwlock); }
	lock_guard(const lock_guard &) = delete;
	lock_guard &operator=(const lock_guard &) = delete;

private:
	bthread_rwlock_t *_rwlock;
};

template <> class lock_guard<bthread::RWLock> {
public:
	lock_guard(bthread::RWLock &rwlock, bool read) : _guard(*rwlock.native_handler(), read) {}

private:
	lock_guard<bthread_rwlock_t> _guard;
};

} // namespace std

#endif /* __cplusplus */

#endif /* STB_BTHREAD_RWLOCK_H */
