/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_id: bRPC's RPC correlation ids. An id names a slot and a range of
 * versions; the slot's lock butex holds first_ver when unlocked, locked_ver
 * when locked, locked_ver + 1 when contended, locked_ver + 2 when about to be
 * destroyed, and end_ver after destruction (versions of a slot only grow,
 * so a stale id never names a later one). Errors reported while the id is
 * locked queue up and run at unlock. Also bthread_id_list_*.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bthread/id.h"
#include "sync.h"

#define ID_MAX_RANGE 1024u
#define ID_CHUNK 256u
#define ID_MAX_CHUNKS 65536u

struct id_pending {
	bthread_id_t id;
	int error_code;
	void *text;                 /* owned copy or NULL */
	void (*free_text)(void *);
	const char *location;
};

struct id_meta {
	struct stb_lock lock;       /* short: never held while blocked or in a callback */
	uint32_t first_ver;
	uint32_t locked_ver;
	void *data;
	int (*on_error)(bthread_id_t, void *, int);
	stb_id_on_error2_fn on_error2;
	void *on_error2_ctx;
	const void *empty_text;     /* passed to on_error2 for errors without text */
	const char *lock_location;
	uint64_t locker;            /* owner word of the lock (STB_ABI_OWNER_*), 0 = free */
	struct stb_butex *butex;    /* value: see above */
	struct stb_butex *join_butex;
	struct id_pending *pending; /* ring buffer of errors that came while locked */
	uint32_t pending_head, pending_n, pending_cap;
	uint32_t free_next;         /* free list link: slot + 1, 0 = end */
};

static struct id_meta *id_chunks[ID_MAX_CHUNKS];
static uint32_t id_nslots;      /* slots ever handed out */
static uint32_t id_free_head;   /* slot + 1 */
static struct stb_lock id_pool_lock;

static inline uint32_t id_slot(bthread_id_t id)
{
	return (uint32_t)(id.value >> 32);
}

static inline uint32_t id_version(bthread_id_t id)
{
	return (uint32_t)id.value;
}

static inline bthread_id_t make_id(uint32_t slot, uint32_t ver)
{
	bthread_id_t id = {((uint64_t)slot << 32) | ver};
	return id;
}

static struct id_meta *id_meta_at(uint32_t slot)
{
	if (slot >= __atomic_load_n(&id_nslots, __ATOMIC_ACQUIRE))
		return NULL;
	struct id_meta *c = __atomic_load_n(&id_chunks[slot / ID_CHUNK], __ATOMIC_ACQUIRE);
	return c ? &c[slot % ID_CHUNK] : NULL;
}

static inline bool has_version(const struct id_meta *m, uint32_t ver)
{
	return ver >= m->first_ver && ver < m->locked_ver;
}

static inline uint32_t contended_ver(const struct id_meta *m)
{
	return m->locked_ver + 1;
}

static inline uint32_t unlockable_ver(const struct id_meta *m)
{
	return m->locked_ver + 2;
}

static inline uint32_t end_ver(const struct id_meta *m)
{
	return m->locked_ver + 3;
}

static inline uint32_t bval(const struct stb_butex *b)
{
	return (uint32_t)__atomic_load_n(&b->value, __ATOMIC_RELAXED);
}

static inline void bset(struct stb_butex *b, uint32_t v)
{
	__atomic_store_n(&b->value, (int)v, __ATOMIC_RELEASE);
}

/* A slot from the free list or a new one; NULL on ENOMEM. Sets *slot. */
static struct id_meta *id_slot_get(uint32_t *slot)
{
	struct id_meta *m = NULL;
	stb_lock(&id_pool_lock);
	if (id_free_head) {
		*slot = id_free_head - 1;
		m = id_meta_at(*slot);
		id_free_head = m->free_next;
		goto cleanup;
	}
	uint32_t s = id_nslots;
	if (s / ID_CHUNK >= ID_MAX_CHUNKS)
		goto cleanup;
	struct id_meta *c = id_chunks[s / ID_CHUNK];
	if (!c) {
		c = calloc(ID_CHUNK, sizeof(*c));
		if (!c)
			goto cleanup;
		__atomic_store_n(&id_chunks[s / ID_CHUNK], c, __ATOMIC_RELEASE);
	}
	m = &c[s % ID_CHUNK];
	m->butex = stb_butex_new();
	m->join_butex = m->butex ? stb_butex_new() : NULL;
	if (!m->join_butex) {
		stb_butex_free(m->butex);
		m->butex = NULL;
		m = NULL;
		goto cleanup;
	}
	*slot = s;
	__atomic_store_n(&id_nslots, s + 1, __ATOMIC_RELEASE);
cleanup:
	stb_unlock(&id_pool_lock);
	return m;
}

static void id_slot_put(uint32_t slot, struct id_meta *m)
{
	stb_lock(&id_pool_lock);
	m->free_next = id_free_head;
	id_free_head = slot + 1;
	stb_unlock(&id_pool_lock);
}

static int default_on_error(bthread_id_t id, void *data, int error_code)
{
	(void)data;
	(void)error_code;
	return bthread_id_unlock_and_destroy(id);
}

static int id_create(bthread_id_t *id, void *data, int (*on_error)(bthread_id_t, void *, int),
		     stb_id_on_error2_fn on_error2, void *ctx, const void *empty_text, int range)
{
	if (!id || range < 1 || range > (int)ID_MAX_RANGE)
		return EINVAL;
	uint32_t slot;
	struct id_meta *m = id_slot_get(&slot);
	if (!m)
		return ENOMEM;
	stb_lock(&m->lock);
	m->data = data;
	m->on_error = on_error2 ? NULL : (on_error ? on_error : default_on_error);
	m->on_error2 = on_error2;
	m->on_error2_ctx = ctx;
	m->empty_text = empty_text;
	m->lock_location = NULL;
	m->locker = 0;
	m->pending_head = m->pending_n = 0;
	uint32_t v = bval(m->butex);
	if (v == 0 || v + ID_MAX_RANGE + 2 < v)
		v = 1; /* never 0, and no wrap-around within a range */
	bset(m->butex, v);
	bset(m->join_butex, v);
	m->first_ver = v;
	m->locked_ver = v + (uint32_t)range;
	stb_unlock(&m->lock);
	*id = make_id(slot, v);
	return 0;
}

int bthread_id_create(bthread_id_t *id, void *data, int (*on_error)(bthread_id_t, void *, int))
{
	return id_create(id, data, on_error, NULL, NULL, NULL, 1);
}

int bthread_id_create_ranged(bthread_id_t *id, void *data,
			     int (*on_error)(bthread_id_t, void *, int), int range)
{
	return id_create(id, data, on_error, NULL, NULL, NULL, range);
}

int stb_id_create2(bthread_id_t *id, void *data, stb_id_on_error2_fn on_error2, void *ctx,
		   const void *empty_text, int range)
{
	if (!on_error2 || !empty_text)
		return EINVAL;
	return id_create(id, data, NULL, on_error2, ctx, empty_text, range);
}

/* Runs the error handler of m (the id is locked by the caller now). text: owned or NULL. */
static int id_call(struct id_meta *m, bthread_id_t id, int code, void *text,
		   void (*free_text)(void *), bool text_owned)
{
	void *data = m->data;
	int rc;
	if (m->on_error2)
		rc = m->on_error2(id, data, code, text ? text : m->empty_text, m->on_error2_ctx);
	else
		rc = m->on_error(id, data, code);
	if (text && text_owned && free_text)
		free_text(text);
	return rc;
}

static void pending_clear(struct id_meta *m)
{
	for (uint32_t i = 0; i < m->pending_n; i++) {
		struct id_pending *p = &m->pending[(m->pending_head + i) % m->pending_cap];
		if (p->text && p->free_text)
			p->free_text(p->text);
	}
	m->pending_head = m->pending_n = 0;
}

/* Under m->lock. ENOMEM when the queue cannot grow. */
static int pending_push(struct id_meta *m, const struct id_pending *e)
{
	if (m->pending_n == m->pending_cap) {
		uint32_t cap = m->pending_cap ? m->pending_cap * 2 : 4;
		struct id_pending *q = malloc(cap * sizeof(*q));
		if (!q)
			return ENOMEM;
		for (uint32_t i = 0; i < m->pending_n; i++)
			q[i] = m->pending[(m->pending_head + i) % m->pending_cap];
		free(m->pending);
		m->pending = q;
		m->pending_cap = cap;
		m->pending_head = 0;
	}
	m->pending[(m->pending_head + m->pending_n) % m->pending_cap] = *e;
	m->pending_n++;
	return 0;
}

int stb_id_error2(bthread_id_t id, int error_code, const void *text,
		  void *(*copy_text)(const void *), void (*free_text)(void *),
		  const char *location)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	const uint32_t ver = id_version(id);
	stb_lock(&m->lock);
	if (!has_version(m, ver)) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	if (bval(m->butex) == m->first_ver) {
		bset(m->butex, m->locked_ver);
		m->lock_location = location;
		__atomic_store_n(&m->locker, stb_owner_self(), __ATOMIC_RELAXED);
		stb_unlock(&m->lock);
		return id_call(m, id, error_code, (void *)text, NULL, false);
	}
	struct id_pending e = {.id = id, .error_code = error_code, .location = location};
	if (text && copy_text) {
		e.text = copy_text(text);
		if (!e.text) {
			stb_unlock(&m->lock);
			return ENOMEM;
		}
		e.free_text = free_text;
	}
	int rc = pending_push(m, &e);
	stb_unlock(&m->lock);
	if (rc && e.text && free_text)
		free_text(e.text);
	return rc;
}

int bthread_id_error_verbose(bthread_id_t id, int error_code, const char *location)
{
	return stb_id_error2(id, error_code, NULL, NULL, NULL, location);
}

int bthread_id_trylock(bthread_id_t id, void **pdata)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	stb_lock(&m->lock);
	if (!has_version(m, id_version(id))) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	if (bval(m->butex) != m->first_ver) {
		stb_unlock(&m->lock);
		return EBUSY;
	}
	bset(m->butex, m->locked_ver);
	__atomic_store_n(&m->locker, stb_owner_self(), __ATOMIC_RELAXED);
	stb_unlock(&m->lock);
	if (pdata)
		*pdata = m->data;
	return 0;
}

int bthread_id_lock_and_reset_range_verbose(bthread_id_t id, void **pdata, int range,
					    const char *location)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	const uint32_t ver = id_version(id);
	bool ever_contended = false;
	stb_lock(&m->lock);
	while (has_version(m, ver)) {
		const uint32_t v = bval(m->butex);
		if (v == m->first_ver) {
			m->lock_location = location;
			if (range > 0 && range <= (int)ID_MAX_RANGE &&
			    m->first_ver + (uint32_t)range > m->locked_ver)
				m->locked_ver = m->first_ver + (uint32_t)range;
			/* A contended locker wakes the next one at its unlock. */
			bset(m->butex, ever_contended ? contended_ver(m) : m->locked_ver);
			__atomic_store_n(&m->locker, stb_owner_self(), __ATOMIC_RELAXED);
			stb_unlock(&m->lock);
			if (pdata)
				*pdata = m->data;
			return 0;
		}
		if (v == unlockable_ver(m)) { /* bthread_id_about_to_destroy was called */
			stb_unlock(&m->lock);
			return EPERM;
		}
		const uint32_t expected = contended_ver(m);
		bset(m->butex, expected);
		stb_unlock(&m->lock);
		ever_contended = true;
		struct stb_wait why = stb_wait_make(STB_WAIT_ID, NULL, &m->locker);
		why.object = id.value;
		int rc = stb_butex_wait_mono(m->butex, (int)expected, 0, &why);
		if (rc && rc != EWOULDBLOCK && rc != EINTR)
			return rc;
		stb_lock(&m->lock);
	}
	stb_unlock(&m->lock);
	return EINVAL;
}

int bthread_id_lock_verbose(bthread_id_t id, void **pdata, const char *location)
{
	return bthread_id_lock_and_reset_range_verbose(id, pdata, 0, location);
}

int bthread_id_about_to_destroy(bthread_id_t id)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	stb_lock(&m->lock);
	if (!has_version(m, id_version(id))) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	const uint32_t v = bval(m->butex);
	if (v == m->first_ver) {
		stb_unlock(&m->lock);
		return EPERM; /* not locked */
	}
	bset(m->butex, unlockable_ver(m));
	stb_unlock(&m->lock);
	if (v == contended_ver(m))
		stb_butex_wake(m->butex, true); /* every waiting locker gets EPERM */
	return 0;
}

int bthread_id_cancel(bthread_id_t id)
{
	uint32_t slot = id_slot(id);
	struct id_meta *m = id_meta_at(slot);
	if (!m)
		return EINVAL;
	stb_lock(&m->lock);
	if (!has_version(m, id_version(id))) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	if (bval(m->butex) != m->first_ver) {
		stb_unlock(&m->lock);
		return EPERM; /* in use (locked): bRPC's code */
	}
	const uint32_t next = end_ver(m);
	bset(m->butex, next);
	bset(m->join_butex, next);
	m->first_ver = m->locked_ver = next;
	stb_unlock(&m->lock);
	id_slot_put(slot, m);
	return 0;
}

int bthread_id_join(bthread_id_t id)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	const uint32_t ver = id_version(id);
	for (;;) {
		stb_lock(&m->lock);
		const bool live = has_version(m, ver);
		const uint32_t expected = bval(m->join_butex);
		stb_unlock(&m->lock);
		if (!live)
			return 0;
		struct stb_wait why = stb_wait_make(STB_WAIT_ID, NULL, &m->locker);
		why.object = id.value;
		/* A stop does not end a join (bRPC). */
		int rc = stb_butex_wait_mono(m->join_butex, (int)expected, 0, &why);
		if (rc && rc != EWOULDBLOCK && rc != EINTR)
			return rc;
	}
}

int bthread_id_unlock(bthread_id_t id)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return EINVAL;
	stb_lock(&m->lock);
	if (!has_version(m, id_version(id))) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	const uint32_t v = bval(m->butex);
	if (v == m->first_ver) {
		stb_unlock(&m->lock);
		return EPERM; /* not locked */
	}
	if (m->pending_n) {
		/* The lock passes to the handler of the first queued error. */
		struct id_pending e = m->pending[m->pending_head];
		m->pending_head = (m->pending_head + 1) % m->pending_cap;
		m->pending_n--;
		m->lock_location = e.location;
		stb_unlock(&m->lock);
		return id_call(m, e.id, e.error_code, e.text, e.free_text, true);
	}
	__atomic_store_n(&m->locker, 0, __ATOMIC_RELAXED);
	bset(m->butex, m->first_ver);
	stb_unlock(&m->lock);
	if (v == contended_ver(m))
		stb_butex_wake(m->butex, false);
	return 0;
}

int bthread_id_unlock_and_destroy(bthread_id_t id)
{
	uint32_t slot = id_slot(id);
	struct id_meta *m = id_meta_at(slot);
	if (!m)
		return EINVAL;
	stb_lock(&m->lock);
	if (!has_version(m, id_version(id))) {
		stb_unlock(&m->lock);
		return EINVAL;
	}
	if (bval(m->butex) == m->first_ver) {
		stb_unlock(&m->lock);
		return EPERM; /* not locked */
	}
	const uint32_t next = end_ver(m);
	__atomic_store_n(&m->locker, 0, __ATOMIC_RELAXED);
	bset(m->butex, next);
	bset(m->join_butex, next);
	m->first_ver = m->locked_ver = next;
	pending_clear(m);
	stb_unlock(&m->lock);
	stb_butex_wake(m->butex, true);
	stb_butex_wake(m->join_butex, true);
	id_slot_put(slot, m);
	return 0;
}

uint32_t stb_id_value(bthread_id_t id)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	return m ? bval(m->butex) : 0;
}

int stb_id_status(bthread_id_t id, char *buf, size_t size)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return snprintf(buf, size, "Invalid id=%llu\n", (unsigned long long)id.value);
	stb_lock(&m->lock);
	const uint32_t ver = id_version(id), v = bval(m->butex);
	const bool valid = has_version(m, ver);
	const uint32_t first = m->first_ver, locked = m->locked_ver, npending = m->pending_n;
	const char *loc = m->lock_location;
	const uint64_t locker = m->locker;
	stb_unlock(&m->lock);
	if (!valid)
		return snprintf(buf, size, "Invalid id=%llu (destroyed)\n",
				(unsigned long long)id.value);
	const char *state = v == first ? "unlocked"
			  : v == locked ? "locked"
			  : v == locked + 1 ? "contended"
			  : v == locked + 2 ? "about to destroy" : "unknown";
	return snprintf(buf, size,
			"First id: %llu\nRange: %u\nStatus: %s\nLocker: 0x%llx\n"
			"Locked at: %s\nPending errors: %u\n",
			(unsigned long long)make_id(id_slot(id), first).value, locked - first,
			state, (unsigned long long)locker,
			(v != first && loc) ? loc : "-", npending);
}

/* ---- bthread_id_list ---- */

struct id_list {
	bthread_id_t *ids;
	size_t n, cap;
};

static bool id_alive(bthread_id_t id)
{
	struct id_meta *m = id_meta_at(id_slot(id));
	if (!m)
		return false;
	stb_lock(&m->lock);
	bool live = has_version(m, id_version(id));
	stb_unlock(&m->lock);
	return live;
}

int bthread_id_list_init(bthread_id_list_t *list, unsigned size, unsigned conflict_size)
{
	(void)size;
	(void)conflict_size;
	if (!list)
		return EINVAL;
	memset(list, 0, sizeof(*list));
	struct id_list *l = calloc(1, sizeof(*l));
	if (!l)
		return ENOMEM;
	list->impl = l;
	return 0;
}

void bthread_id_list_destroy(bthread_id_list_t *list)
{
	if (!list || !list->impl)
		return;
	struct id_list *l = list->impl;
	free(l->ids);
	free(l);
	list->impl = NULL;
}

int bthread_id_list_add(bthread_id_list_t *list, bthread_id_t id)
{
	if (!list)
		return EINVAL;
	if (!list->impl) {
		int rc = bthread_id_list_init(list, 0, 0);
		if (rc)
			return rc;
	}
	struct id_list *l = list->impl;
	if (l->n == l->cap) {
		/* Drop ids that are gone before growing. */
		size_t k = 0;
		for (size_t i = 0; i < l->n; i++)
			if (id_alive(l->ids[i]))
				l->ids[k++] = l->ids[i];
		l->n = k;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		bthread_id_t *ids = realloc(l->ids, cap * sizeof(*ids));
		if (!ids)
			return ENOMEM;
		l->ids = ids;
		l->cap = cap;
	}
	l->ids[l->n++] = id;
	return 0;
}

void bthread_id_list_swap(bthread_id_list_t *dest, bthread_id_list_t *src)
{
	if (!dest || !src)
		return;
	void *t = dest->impl;
	dest->impl = src->impl;
	src->impl = t;
}

int stb_id_list_reset2(bthread_id_list_t *list, int error_code, const void *text,
		       void *(*copy_text)(const void *), void (*free_text)(void *))
{
	if (!list)
		return EINVAL;
	struct id_list *l = list->impl;
	if (!l)
		return 0;
	for (size_t i = 0; i < l->n; i++)
		stb_id_error2(l->ids[i], error_code, text, copy_text, free_text, NULL);
	l->n = 0;
	return 0;
}

int bthread_id_list_reset(bthread_id_list_t *list, int error_code)
{
	return stb_id_list_reset2(list, error_code, NULL, NULL, NULL);
}

/* Takes the ids out of list under the caller's lock, then resets them outside it. */
static int list_reset_locked(bthread_id_list_t *list, int error_code, const void *text,
			     void *(*copy_text)(const void *), void (*free_text)(void *),
			     void (*lock)(void *), void (*unlock)(void *), void *mu)
{
	if (!list || !mu)
		return EINVAL;
	if (!list->impl)
		return 0;
	bthread_id_list_t tmp;
	int rc = bthread_id_list_init(&tmp, 0, 0);
	if (rc)
		return rc;
	lock(mu);
	bthread_id_list_swap(list, &tmp);
	unlock(mu);
	rc = stb_id_list_reset2(&tmp, error_code, text, copy_text, free_text);
	bthread_id_list_destroy(&tmp);
	return rc;
}

static void plock(void *m)
{
	pthread_mutex_lock(m);
}

static void punlock(void *m)
{
	pthread_mutex_unlock(m);
}

static void block(void *m)
{
	bthread_mutex_lock(m);
}

static void bunlock(void *m)
{
	bthread_mutex_unlock(m);
}

int stb_id_list_reset2_pthreadsafe(bthread_id_list_t *list, int error_code, const void *text,
				   void *(*copy_text)(const void *), void (*free_text)(void *),
				   pthread_mutex_t *mutex)
{
	return list_reset_locked(list, error_code, text, copy_text, free_text, plock, punlock,
				 mutex);
}

int stb_id_list_reset2_bthreadsafe(bthread_id_list_t *list, int error_code, const void *text,
				   void *(*copy_text)(const void *), void (*free_text)(void *),
				   bthread_mutex_t *mutex)
{
	return list_reset_locked(list, error_code, text, copy_text, free_text, block, bunlock,
				 mutex);
}

int bthread_id_list_reset_pthreadsafe(bthread_id_list_t *list, int error_code,
				      pthread_mutex_t *mutex)
{
	return stb_id_list_reset2_pthreadsafe(list, error_code, NULL, NULL, NULL, mutex);
}

int bthread_id_list_reset_bthreadsafe(bthread_id_list_t *list, int error_code,
				      bthread_mutex_t *mutex)
{
	return stb_id_list_reset2_bthreadsafe(list, error_code, NULL, NULL, NULL, mutex);
}
