/* SPDX-License-Identifier: Apache-2.0 */
/*
 * C++ over bthread_mutex_t (bRPC's bthread/mutex.h): bthread::Mutex,
 * bthread::FastPthreadMutex, and std::lock_guard / std::unique_lock
 * specializations for bthread_mutex_t. Header-only; in C it only declares
 * the C API (bthread/bthread.h).
 */
#ifndef STB_BTHREAD_MUTEX_H
#define STB_BTHREAD_MUTEX_H

#include <bthread/bthread.h>

#if defined(__cplusplus)
#include <errno.h>
#include <linux/futex.h>
#include <mutex>
#include <sys/syscall.h>
#include <system_error>
#include <time.h>
#include <unistd.h>

namespace bthread {

/* A bthread_mutex_t that locks and unlocks like std::mutex. Throws
 * std::system_error when it cannot be initialized or locked. */
class Mutex {
public:
	typedef bthread_mutex_t *native_handler_type;
	typedef bthread_mutex_t *native_handle_type;
	Mutex()
	{
		const int ec = bthread_mutex_init(&_mutex, NULL);
		if (ec != 0)
			throw std::system_error(std::error_code(ec, std::system_category()),
						"bthread::Mutex: bthread_mutex_init failed");
	}
	~Mutex() { bthread_mutex_destroy(&_mutex); }
	Mutex(const Mutex &) = delete;
	Mutex &operator=(const Mutex &) = delete;
	native_handler_type native_handler() { return &_mutex; }
	native_handle_type native_handle() { return &_mutex; }
	void lock()
	{
		const int ec = bthread_mutex_lock(&_mutex);
		if (ec != 0)
			throw std::system_error(std::error_code(ec, std::system_category()),
						"bthread::Mutex::lock failed");
	}
	void unlock() { bthread_mutex_unlock(&_mutex); }
	bool try_lock() { return bthread_mutex_trylock(&_mutex) == 0; }
	/* abstime is CLOCK_REALTIME; false when it passed before the lock was taken. */
	bool timed_lock(const struct timespec *abstime)
	{
		return bthread_mutex_timedlock(&_mutex, abstime) == 0;
	}

private:
	bthread_mutex_t _mutex;
};

/*
 * A futex-based mutex for pthreads: it blocks the calling thread (a worker
 * too), never suspends a bthread. For short critical sections that must not
 * depend on the bthread scheduler.
 */
class FastPthreadMutex {
public:
	FastPthreadMutex() : _futex(0) {}
	FastPthreadMutex(const FastPthreadMutex &) = delete;
	FastPthreadMutex &operator=(const FastPthreadMutex &) = delete;
	void lock() { timed_lock(NULL); }
	bool try_lock()
	{
		unsigned z = 0;
		return __atomic_compare_exchange_n(&_futex, &z, 1u, false, __ATOMIC_ACQUIRE,
						   __ATOMIC_RELAXED);
	}
	/* abstime is CLOCK_REALTIME (NULL: no limit). */
	bool timed_lock(const struct timespec *abstime)
	{
		if (try_lock())
			return true;
		while (__atomic_exchange_n(&_futex, 2u, __ATOMIC_ACQUIRE) != 0) {
			if (syscall(SYS_futex, &_futex, FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME,
				    2u, abstime, NULL, FUTEX_BITSET_MATCH_ANY) != 0 &&
			    errno == ETIMEDOUT)
				return false;
		}
		return true;
	}
	void unlock()
	{
		if (__atomic_exchange_n(&_futex, 0u, __ATOMIC_RELEASE) == 2u)
			syscall(SYS_futex, &_futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}

private:
	unsigned _futex; /* 0 free, 1 locked, 2 locked with waiters */
};

namespace internal {
typedef bthread::FastPthreadMutex FastPthreadMutex;
}

} // namespace bthread

namespace std {

template <> class lock_guard<bthread_mutex_t> {
public:
	explicit lock_guard(bthread_mutex_t &mutex) : _pmutex(&mutex) { bthread_mutex_lock(_pmutex); }
	~lock_guard() { bthread_mutex_unlock(_pmutex); }
	lock_guard(const lock_guard &) = delete;
	lock_guard &operator=(const lock_guard &) = delete;

private:
	bthread_mutex_t *_pmutex;
};

template <> class unique_lock<bthread_mutex_t> {
public:
	typedef bthread_mutex_t mutex_type;
	unique_lock() : _mutex(NULL), _owns_lock(false) {}
	explicit unique_lock(mutex_type &mutex) : _mutex(&mutex), _owns_lock(false) { lock(); }
	unique_lock(mutex_type &mutex, defer_lock_t) : _mutex(&mutex), _owns_lock(false) {}
	unique_lock(mutex_type &mutex, try_to_lock_t)
		: _mutex(&mutex), _owns_lock(bthread_mutex_trylock(&mutex) == 0)
	{
	}
	unique_lock(mutex_type &mutex, adopt_lock_t) : _mutex(&mutex), _owns_lock(true) {}
	unique_lock(const unique_lock &) = delete;
	unique_lock &operator=(const unique_lock &) = delete;
	unique_lock(unique_lock &&o) noexcept : _mutex(o._mutex), _owns_lock(o._owns_lock)
	{
		o._mutex = NULL;
		o._owns_lock = false;
	}
	~unique_lock()
	{
		if (_owns_lock)
			unlock();
	}
	void lock()
	{
		if (!_mutex)
			throw std::system_error(std::make_error_code(std::errc::operation_not_permitted));
		if (_owns_lock)
			throw std::system_error(
				std::make_error_code(std::errc::resource_deadlock_would_occur));
		bthread_mutex_lock(_mutex);
		_owns_lock = true;
	}
	bool try_lock()
	{
		if (!_mutex)
			throw std::system_error(std::make_error_code(std::errc::operation_not_permitted));
		if (_owns_lock)
			throw std::system_error(
				std::make_error_code(std::errc::resource_deadlock_would_occur));
		_owns_lock = bthread_mutex_trylock(_mutex) == 0;
		return _owns_lock;
	}
	bool timed_lock(const struct timespec *abstime)
	{
		if (!_mutex || _owns_lock)
			return false;
		_owns_lock = bthread_mutex_timedlock(_mutex, abstime) == 0;
		return _owns_lock;
	}
	void unlock()
	{
		if (!_owns_lock)
			throw std::system_error(std::make_error_code(std::errc::operation_not_permitted));
		bthread_mutex_unlock(_mutex);
		_owns_lock = false;
	}
	void swap(unique_lock &rhs)
	{
		std::swap(_mutex, rhs._mutex);
		std::swap(_owns_lock, rhs._owns_lock);
	}
	mutex_type *release()
	{
		mutex_type *m = _mutex;
		_mutex = NULL;
		_owns_lock = false;
		return m;
	}
	mutex_type *mutex() { return _mutex; }
	bool owns_lock() const { return _owns_lock; }
	operator bool() const { return owns_lock(); }

private:
	mutex_type *_mutex;
	bool _owns_lock;
};

} // namespace std

#endif /* __cplusplus */

#endif /* STB_BTHREAD_MUTEX_H */
