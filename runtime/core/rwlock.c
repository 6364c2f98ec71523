/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_rwlock_t: a read-write lock with writer preference (bRPC's: a
 * waiting writer keeps new readers out) unless the attribute asks for
 * readers first. The fast paths are one CAS on the state word; contended
 * paths take a short internal lock and sleep on one of two sequence butexes.
 * A writer's unlock hands the lock to every reader waiting at that moment;
 * the last reader out wakes one waiting writer. A writer takes a free lock
 * even while other writers wait (as bRPC's, whose writers take a mutex), and
 * a waiting writer is woken once per look it takes: an unlock finds it poked
 * already and neither locks nor wakes -- under contention the holder goes
 * on without sleeping or waking anyone on each turn.
 */
#include "sync.h"

#define RD_MASK 0x0fffffffu    /* readers holding the lock */
#define WR_POKED (1u << 28)    /* a waiting writer was woken and has not looked yet */
#define RD_WAITING (1u << 29)  /* readers blocked (nrd_waiting > 0) */
#define WR_WAITING (1u << 30)  /* writers blocked (nwr_waiting > 0) */
#define WR_HELD (1u << 31)     /* a writer holds the lock */

static inline bool prefer_reader(const bthread_rwlock_t *rw)
{
	return rw->kind == BTHREAD_RWLOCK_PREFER_READER_NP;
}

static inline bool can_read(const bthread_rwlock_t *rw, unsigned s)
{
	if (s & WR_HELD || (s & RD_MASK) == RD_MASK)
		return false;
	return !(s & WR_WAITING) || prefer_reader(rw);
}

int bthread_rwlockattr_init(bthread_rwlockattr_t *attr)
{
	if (!attr)
		return EINVAL;
	attr->lockkind = BTHREAD_RWLOCK_DEFAULT_NP;
	return 0;
}

int bthread_rwlockattr_destroy(bthread_rwlockattr_t *attr)
{
	return attr ? 0 : EINVAL;
}

int bthread_rwlockattr_getkind_np(const bthread_rwlockattr_t *attr, int *pref)
{
	if (!attr || !pref)
		return EINVAL;
	*pref = attr->lockkind;
	return 0;
}

int bthread_rwlockattr_setkind_np(bthread_rwlockattr_t *attr, int pref)
{
	if (!attr)
		return EINVAL;
	switch (pref) {
	case BTHREAD_RWLOCK_PREFER_READER_NP:
	case BTHREAD_RWLOCK_PREFER_WRITER_NP:
	case BTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP:
		attr->lockkind = pref;
		return 0;
	default:
		return EINVAL;
	}
}

int bthread_rwlock_init(bthread_rwlock_t *rw, const bthread_rwlockattr_t *attr)
{
	if (!rw)
		return EINVAL;
	struct stb_butex *rd = stb_butex_new();
	struct stb_butex *wr = rd ? stb_butex_new() : NULL;
	if (!wr) {
		stb_butex_free(rd);
		return ENOMEM;
	}
	rw->state = 0;
	rw->nrd_waiting = 0;
	rw->nwr_waiting = 0;
	rw->grant_gen = 0;
	rw->rd_seq = &rd->value;
	rw->wr_seq = &wr->value;
	rw->lock = 0;
	rw->kind = attr ? attr->lockkind : BTHREAD_RWLOCK_DEFAULT_NP;
	rw->writer = 0;
	return 0;
}

int bthread_rwlock_destroy(bthread_rwlock_t *rw)
{
	if (!rw || !rw->rd_seq)
		return EINVAL;
	stb_butex_free(stb_butex_of_value(rw->rd_seq));
	stb_butex_free(stb_butex_of_value(rw->wr_seq));
	rw->rd_seq = rw->wr_seq = NULL;
	return 0;
}

static inline void set_bits(bthread_rwlock_t *rw, unsigned bits)
{
	__atomic_fetch_or(&rw->state, bits, __ATOMIC_RELAXED);
}

static inline void clear_bits(bthread_rwlock_t *rw, unsigned bits)
{
	__atomic_fetch_and(&rw->state, ~bits, __ATOMIC_RELEASE);
}

/*
 * Under rw->lock: gives a read lock to every reader blocked now, in the
 * same CAS that releases the writer's hold when unlocking (else a writer
 * taking the free lock in between would hold it beside them); without
 * unlocking, not while a writer holds the lock (its unlock grants them).
 * Returns true when readers must be woken (after the unlock).
 */
static bool grant_readers(bthread_rwlock_t *rw, bool unlocking)
{
	unsigned n = rw->nrd_waiting;
	unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	for (;;) {
		if (!unlocking && (s & WR_HELD) && n)
			return false;
		unsigned ns = unlocking ? s & ~WR_HELD : s;
		ns = (ns + n) & ~RD_WAITING;
		if (__atomic_compare_exchange_n(&rw->state, &s, ns, true, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			break;
	}
	if (n == 0)
		return false;
	rw->nrd_waiting = 0;
	rw->grant_gen++;
	__atomic_fetch_add(rw->rd_seq, 1, __ATOMIC_RELEASE);
	return true;
}

/* Under rw->lock: lets one blocked writer look again (unless one is woken
 * already and has not looked yet). Wake after the unlock. */
static bool poke_writer(bthread_rwlock_t *rw)
{
	if (rw->nwr_waiting == 0 || (__atomic_load_n(&rw->state, __ATOMIC_RELAXED) & WR_POKED))
		return false;
	set_bits(rw, WR_POKED);
	__atomic_fetch_add(rw->wr_seq, 1, __ATOMIC_RELEASE);
	return true;
}

static void wake(bthread_rwlock_t *rw, bool readers, bool writer)
{
	if (readers)
		stb_butex_wake(stb_butex_of_value(rw->rd_seq), true);
	if (writer)
		stb_butex_wake(stb_butex_of_value(rw->wr_seq), false);
}

static int rdlock_slow(bthread_rwlock_t *rw, uint64_t deadline)
{
	struct stb_lock *l = stb_lock_at(&rw->lock);
	stb_lock(l);
	for (;;) {
		unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
		if (can_read(rw, s)) {
			if (!__atomic_compare_exchange_n(&rw->state, &s, s + 1, false,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				continue;
			if ((s & RD_WAITING) && rw->nrd_waiting == 0)
				clear_bits(rw, RD_WAITING); /* left by a reader that was stopped */
			break;
		}
		if (!(s & RD_WAITING) &&
		    !__atomic_compare_exchange_n(&rw->state, &s, s | RD_WAITING, false,
						 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		rw->nrd_waiting++;
		const unsigned gen = rw->grant_gen;
		const int seq = __atomic_load_n(rw->rd_seq, __ATOMIC_RELAXED);
		stb_unlock(l);
		const struct stb_wait why = stb_wait_make(STB_WAIT_RWLOCK_RD, rw, &rw->writer);
		int rc = stb_butex_wait_mono(stb_butex_of_value(rw->rd_seq), seq, deadline, &why);
		stb_lock(l);
		if (rw->grant_gen != gen)
			break; /* a writer's unlock (or a writer giving up) handed it to us */
		rw->nrd_waiting--;
		if (rc == ETIMEDOUT || rc == ENOMEM) {
			if (rw->nrd_waiting == 0)
				clear_bits(rw, RD_WAITING);
			stb_unlock(l);
			return rc;
		}
	}
	/* A granted reader synchronized with the granting writer through l. */
	stb_unlock(l);
	return 0;
}

static int rdlock(bthread_rwlock_t *rw, const struct timespec *abstime, bool try_only)
{
	if (!rw || !rw->rd_seq)
		return EINVAL;
	unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	while (can_read(rw, s))
		if (__atomic_compare_exchange_n(&rw->state, &s, s + 1, true, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return 0;
	if (try_only)
		return EBUSY;
	return rdlock_slow(rw, stb_abstime_to_mono(abstime));
}

static int wrlock_slow(bthread_rwlock_t *rw, uint64_t deadline)
{
	struct stb_lock *l = stb_lock_at(&rw->lock);
	stb_lock(l);
	rw->nwr_waiting++;
	set_bits(rw, WR_WAITING);
	for (;;) {
		/* Looking now: the next unlock must wake a writer again. */
		clear_bits(rw, WR_POKED);
		unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
		if (!(s & (WR_HELD | RD_MASK))) {
			unsigned ns = s | WR_HELD;
			if (rw->nwr_waiting == 1)
				ns &= ~WR_WAITING;
			if (__atomic_compare_exchange_n(&rw->state, &s, ns, false,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				rw->nwr_waiting--;
				break;
			}
			continue;
		}
		const int seq = __atomic_load_n(rw->wr_seq, __ATOMIC_RELAXED);
		stb_unlock(l);
		const struct stb_wait why = stb_wait_make(STB_WAIT_RWLOCK_WR, rw, &rw->writer);
		int rc = stb_butex_wait_mono(stb_butex_of_value(rw->wr_seq), seq, deadline, &why);
		stb_lock(l);
		if (rc == ETIMEDOUT || rc == ENOMEM) {
			bool readers = false, writer = false;
			/* A wake meant for us (the poke) goes to another. */
			clear_bits(rw, WR_POKED);
			if (--rw->nwr_waiting == 0) {
				/* Readers held back by this writer alone may go now. */
				clear_bits(rw, WR_WAITING);
				readers = grant_readers(rw, false);
			} else if (!(__atomic_load_n(&rw->state, __ATOMIC_RELAXED) &
				     (WR_HELD | RD_MASK))) {
				writer = poke_writer(rw); /* a wake meant for us may be lost */
			}
			stb_unlock(l);
			wake(rw, readers, writer);
			return rc;
		}
	}
	stb_unlock(l);
	__atomic_store_n(&rw->writer, stb_owner_self(), __ATOMIC_RELAXED);
	return 0;
}

static int wrlock(bthread_rwlock_t *rw, const struct timespec *abstime, bool try_only)
{
	if (!rw || !rw->rd_seq)
		return EINVAL;
	unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	/* A free lock is taken even while writers wait; readers that wait
	 * first go first only when the lock prefers readers. */
	if (!(s & (WR_HELD | RD_MASK)) && !((s & RD_WAITING) && prefer_reader(rw)) &&
	    __atomic_compare_exchange_n(&rw->state, &s, s | WR_HELD, false, __ATOMIC_ACQUIRE,
					__ATOMIC_RELAXED)) {
		__atomic_store_n(&rw->writer, stb_owner_self(), __ATOMIC_RELAXED);
		return 0;
	}
	if (try_only) {
		while (!(s & (WR_HELD | RD_MASK)))
			if (__atomic_compare_exchange_n(&rw->state, &s, s | WR_HELD, true,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				__atomic_store_n(&rw->writer, stb_owner_self(), __ATOMIC_RELAXED);
				return 0;
			}
		return EBUSY;
	}
	return wrlock_slow(rw, stb_abstime_to_mono(abstime));
}

static void rdunlock(bthread_rwlock_t *rw)
{
	unsigned old = __atomic_fetch_sub(&rw->state, 1, __ATOMIC_RELEASE);
	if ((old & RD_MASK) != 1 || !(old & WR_WAITING))
		return;
	/* The last reader out with a writer waiting: let one writer look. */
	struct stb_lock *l = stb_lock_at(&rw->lock);
	stb_lock(l);
	bool writer = poke_writer(rw);
	stb_unlock(l);
	wake(rw, false, writer);
}

static void wrunlock(bthread_rwlock_t *rw)
{
	__atomic_store_n(&rw->writer, 0, __ATOMIC_RELAXED);
	unsigned s = WR_HELD;
	if (__atomic_compare_exchange_n(&rw->state, &s, 0, false, __ATOMIC_RELEASE,
					__ATOMIC_RELAXED))
		return;
	/* Only writers wait and one was woken already: it will look. */
	s = WR_HELD | WR_WAITING | WR_POKED;
	if (__atomic_compare_exchange_n(&rw->state, &s, WR_WAITING | WR_POKED, false,
					__ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return;
	struct stb_lock *l = stb_lock_at(&rw->lock);
	stb_lock(l);
	bool readers = grant_readers(rw, true);
	bool writer = !readers && poke_writer(rw);
	stb_unlock(l);
	wake(rw, readers, writer);
}

int bthread_rwlock_rdlock(bthread_rwlock_t *rw)
{
	return rdlock(rw, NULL, false);
}

int bthread_rwlock_tryrdlock(bthread_rwlock_t *rw)
{
	return rdlock(rw, NULL, true);
}

int bthread_rwlock_timedrdlock(bthread_rwlock_t *rw, const struct timespec *abstime)
{
	return rdlock(rw, abstime, false);
}

int bthread_rwlock_wrlock(bthread_rwlock_t *rw)
{
	return wrlock(rw, NULL, false);
}

int bthread_rwlock_trywrlock(bthread_rwlock_t *rw)
{
	return wrlock(rw, NULL, true);
}

int bthread_rwlock_timedwrlock(bthread_rwlock_t *rw, const struct timespec *abstime)
{
	return wrlock(rw, abstime, false);
}

int bthread_rwlock_unlock(bthread_rwlock_t *rw)
{
	if (!rw || !rw->rd_seq)
		return EINVAL;
	unsigned s = __atomic_load_n(&rw->state, __ATOMIC_RELAXED);
	if (s & WR_HELD)
		wrunlock(rw);
	else if (s & RD_MASK)
		rdunlock(rw);
	else
		return EPERM;
	return 0;
}
