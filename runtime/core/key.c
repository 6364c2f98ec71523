/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread-local storage: keys, the per-bthread and per-pthread key tables,
 * their destructors at exit, and keytable pools (bthread_attr_t.keytable_pool)
 * whose tables bthreads borrow and give back without running destructors.
 * A table is two-level (31 x 32 slots); each slot keeps the version of the
 * key that set it, so a deleted key's value is never returned again.
 */
#include <stdlib.h>

#include "bthread/unstable.h"
#include "sync.h"

#define KEY_L1 31u
#define KEY_L2 32u
#define KEYS_MAX (KEY_L1 * KEY_L2)
#define DTOR_ROUNDS 4

struct key_info {
	uint32_t version;            /* current version; bumped by delete */
	bool in_use;
	void (*dtor)(void *);
	void (*dtor2)(void *, const void *);
	const void *dtor_args;
};

struct kt_slot {
	uint32_t version;
	void *ptr;
};

struct kt_sub {
	struct kt_slot s[KEY_L2];
};

struct keytable {
	struct kt_sub *sub[KEY_L1];
	struct keytable *next;       /* free list of a pool */
};

static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;
static struct key_info keys[KEYS_MAX];
static uint32_t keys_hwm;        /* indexes ever used */
static uint32_t keys_free[KEYS_MAX];
static uint32_t keys_nfree;

/* The table of a pthread that is not running a bthread; destructors at its exit. */
static __thread struct keytable *tls_keytable __attribute__((tls_model("initial-exec")));
/* While a pool is destroyed: the table its destructors see as the caller's. */
static __thread struct keytable *tls_override __attribute__((tls_model("initial-exec")));
static pthread_key_t pthread_exit_key;
/* One short lock for the free lists of every pool (pools are few, the lock is held briefly). */
static struct stb_lock pools_lock;
static pthread_once_t pthread_exit_once = PTHREAD_ONCE_INIT;

static void keytable_free(struct keytable *kt);

static void pthread_exit_dtor(void *arg)
{
	struct keytable *kt = arg;
	/* tls_keytable stays set while destructors run: they may set values again. */
	keytable_free(kt);
	tls_keytable = NULL;
}

static void pthread_exit_init(void)
{
	if (pthread_key_create(&pthread_exit_key, pthread_exit_dtor) != 0)
		pthread_exit_key = (pthread_key_t)-1;
}

int bthread_key_create2(bthread_key_t *key, void (*dtor)(void *, const void *),
			const void *dtor_args)
{
	if (!key)
		return EINVAL;
	pthread_mutex_lock(&keys_lock);
	uint32_t idx;
	if (keys_nfree)
		idx = keys_free[--keys_nfree];
	else if (keys_hwm < KEYS_MAX)
		idx = keys_hwm++;
	else {
		pthread_mutex_unlock(&keys_lock);
		return EAGAIN;
	}
	struct key_info *k = &keys[idx];
	if (k->version == 0)
		__atomic_store_n(&k->version, 1u, __ATOMIC_RELAXED);
	k->dtor = NULL;
	k->dtor2 = dtor;
	k->dtor_args = dtor_args;
	__atomic_store_n(&k->in_use, true, __ATOMIC_RELEASE);
	key->index = idx;
	key->version = k->version;
	pthread_mutex_unlock(&keys_lock);
	return 0;
}

int bthread_key_create(bthread_key_t *key, void (*destructor)(void *))
{
	int rc = bthread_key_create2(key, NULL, NULL);
	if (rc == 0 && destructor) {
		pthread_mutex_lock(&keys_lock);
		keys[key->index].dtor = destructor;
		pthread_mutex_unlock(&keys_lock);
	}
	return rc;
}

int bthread_key_delete(bthread_key_t key)
{
	if (key.index >= KEYS_MAX)
		return EINVAL;
	pthread_mutex_lock(&keys_lock);
	struct key_info *k = &keys[key.index];
	if (!k->in_use || k->version != key.version) {
		pthread_mutex_unlock(&keys_lock);
		return EINVAL;
	}
	__atomic_store_n(&k->in_use, false, __ATOMIC_RELAXED);
	uint32_t v = k->version + 1;
	__atomic_store_n(&k->version, v ? v : 1u, __ATOMIC_RELEASE);
	k->dtor = NULL;
	k->dtor2 = NULL;
	keys_free[keys_nfree++] = key.index;
	pthread_mutex_unlock(&keys_lock);
	return 0;
}

static inline bool key_valid(bthread_key_t key)
{
	return key.index < KEYS_MAX &&
	       __atomic_load_n(&keys[key.index].version, __ATOMIC_ACQUIRE) == key.version &&
	       __atomic_load_n(&keys[key.index].in_use, __ATOMIC_ACQUIRE);
}

/* Takes a table from pool, NULL when it has none (or was destroyed). */
static struct keytable *pool_borrow(bthread_keytable_pool_t *pool)
{
	if (!__atomic_load_n(&pool->free_keytables, __ATOMIC_RELAXED))
		return NULL;
	struct keytable *kt = NULL;
	stb_lock(&pools_lock);
	if (!pool->destroyed && pool->free_keytables) {
		kt = pool->free_keytables;
		pool->free_keytables = kt->next;
		pool->size--;
	}
	stb_unlock(&pools_lock);
	return kt;
}

/* Gives kt back to pool; false when the pool is destroyed (the caller frees kt). */
static bool pool_return(bthread_keytable_pool_t *pool, struct keytable *kt)
{
	bool ok = false;
	stb_lock(&pools_lock);
	if (!pool->destroyed) {
		kt->next = pool->free_keytables;
		pool->free_keytables = kt;
		pool->size++;
		ok = true;
	}
	stb_unlock(&pools_lock);
	return ok;
}

/*
 * The caller's table: the one being destroyed, else the running bthread's
 * (borrowed from its pool on first use), else this pthread's. create:
 * allocate one when there is none (NULL only on ENOMEM).
 */
static __attribute__((noinline)) struct keytable *current_table_slow(bool create)
{
	if (STB_UNLIKELY(tls_override != NULL))
		return tls_override;
	struct stb_task *t = stb_task_self();
	if (t) {
		struct keytable *kt = t->keytable;
		if (kt || (!create && !t->attr.keytable_pool))
			return kt;
		if (t->attr.keytable_pool)
			kt = pool_borrow(t->attr.keytable_pool);
		if (!kt && create)
			kt = calloc(1, sizeof(*kt));
		t->keytable = kt;
		return kt;
	}
	struct keytable *kt = tls_keytable;
	if (kt || !create)
		return kt;
	pthread_once(&pthread_exit_once, pthread_exit_init);
	kt = calloc(1, sizeof(*kt));
	if (!kt)
		return NULL;
	if (pthread_exit_key != (pthread_key_t)-1)
		pthread_setspecific(pthread_exit_key, kt);
	tls_keytable = kt;
	return kt;
}

/* The running bthread's table, else this pthread's (NULL: none yet). */
static inline struct keytable *caller_table(void)
{
	struct stb_task *t = stb_task_here();
	return t ? t->keytable : tls_keytable;
}

/* current_table's common case inline: a table that exists already. */
static inline struct keytable *current_table(bool create)
{
	if (STB_LIKELY(tls_override == NULL)) {
		struct keytable *kt = caller_table();
		if (STB_LIKELY(kt != NULL))
			return kt;
	}
	return current_table_slow(create);
}

void *bthread_getspecific(bthread_key_t key)
{
	/* A deleted key's version was bumped: its values are never returned. */
	if (key.index >= KEYS_MAX ||
	    __atomic_load_n(&keys[key.index].version, __ATOMIC_RELAXED) != key.version)
		return NULL;
	struct keytable *kt = current_table(false);
	if (!kt)
		return NULL;
	struct kt_sub *sub = kt->sub[key.index / KEY_L2];
	if (!sub)
		return NULL;
	const struct kt_slot *s = &sub->s[key.index % KEY_L2];
	return s->version == key.version ? s->ptr : NULL;
}

/* bthread_setspecific's rare case: the caller has no table or no block of
 * slots for this key yet. */
static __attribute__((noinline)) int setspecific_slow(bthread_key_t key, void *data)
{
	struct keytable *kt = current_table(true);
	if (!kt)
		return ENOMEM;
	struct kt_sub **sub = &kt->sub[key.index / KEY_L2];
	if (!*sub) {
		*sub = calloc(1, sizeof(**sub));
		if (!*sub)
			return ENOMEM;
	}
	struct kt_slot *s = &(*sub)->s[key.index % KEY_L2];
	s->version = key.version;
	s->ptr = data;
	return 0;
}

int bthread_setspecific(bthread_key_t key, void *data)
{
	if (!key_valid(key))
		return EINVAL;
	/* The common case inline: a table with this key's block of slots. */
	if (STB_LIKELY(tls_override == NULL)) {
		struct keytable *kt = caller_table();
		struct kt_sub *sub = kt ? kt->sub[key.index / KEY_L2] : NULL;
		if (STB_LIKELY(sub != NULL)) {
			struct kt_slot *s = &sub->s[key.index % KEY_L2];
			s->version = key.version;
			s->ptr = data;
			return 0;
		}
	}
	return setspecific_slow(key, data);
}

/* Runs the destructors of kt's values (rounds while they set values again). */
static void keytable_run_dtors(struct keytable *kt)
{
	for (int round = 0; round < DTOR_ROUNDS; round++) {
		bool called = false;
		for (uint32_t i = 0; i < KEY_L1; i++) {
			struct kt_sub *sub = kt->sub[i];
			if (!sub)
				continue;
			for (uint32_t j = 0; j < KEY_L2; j++) {
				struct kt_slot *s = &sub->s[j];
				void *p = s->ptr;
				if (!p)
					continue;
				const uint32_t ver = s->version;
				s->ptr = NULL;
				pthread_mutex_lock(&keys_lock);
				const struct key_info k = keys[i * KEY_L2 + j];
				pthread_mutex_unlock(&keys_lock);
				if (!k.in_use || k.version != ver)
					continue; /* the key was deleted */
				if (k.dtor2) {
					k.dtor2(p, k.dtor_args);
					called = true;
				} else if (k.dtor) {
					k.dtor(p);
					called = true;
				}
			}
		}
		if (!called)
			break;
	}
}

static void keytable_free(struct keytable *kt)
{
	if (!kt)
		return;
	keytable_run_dtors(kt);
	for (uint32_t i = 0; i < KEY_L1; i++)
		free(kt->sub[i]);
	free(kt);
}

void stb_keys_task_exit(struct stb_task *t)
{
	struct keytable *kt = t->keytable;
	if (!kt)
		return;
	if (t->attr.keytable_pool && pool_return(t->attr.keytable_pool, kt)) {
		t->keytable = NULL;
		return;
	}
	keytable_run_dtors(kt); /* t->keytable still kt: destructors may set values */
	t->keytable = NULL;
	for (uint32_t i = 0; i < KEY_L1; i++)
		free(kt->sub[i]);
	free(kt);
}

/* ---- keytable pools ---- */

int bthread_keytable_pool_init(bthread_keytable_pool_t *pool)
{
	if (!pool)
		return EINVAL;
	pool->impl = NULL;
	pool->list = NULL;
	pool->free_keytables = NULL;
	pool->size = 0;
	pool->destroyed = 0;
	return 0;
}

int bthread_keytable_pool_destroy(bthread_keytable_pool_t *pool)
{
	if (!pool)
		return EINVAL;
	stb_lock(&pools_lock);
	pool->destroyed = 1;
	struct keytable *kt = pool->free_keytables;
	pool->free_keytables = NULL;
	pool->size = 0;
	stb_unlock(&pools_lock);
	/* Destructors run with the table they clear as the caller's (they may set values). */
	struct keytable *saved = tls_override;
	while (kt) {
		struct keytable *next = kt->next;
		tls_override = kt;
		keytable_free(kt);
		kt = next;
	}
	tls_override = saved;
	return 0;
}

int bthread_keytable_pool_getstat(bthread_keytable_pool_t *pool,
				  bthread_keytable_pool_stat_t *stat)
{
	if (!pool || !stat)
		return EINVAL;
	stb_lock(&pools_lock);
	stat->nfree = pool->size;
	stb_unlock(&pools_lock);
	return 0;
}

int get_thread_local_keytable_list_length(bthread_keytable_pool_t *pool)
{
	if (!pool)
		return EINVAL;
	return 0; /* stb keeps one shared free list per pool, no per-thread lists */
}

void bthread_keytable_pool_reserve(bthread_keytable_pool_t *pool, size_t nfree,
				   bthread_key_t key, void *ctor(const void *args),
				   const void *args)
{
	if (!pool || !ctor || !key_valid(key))
		return;
	for (;;) {
		stb_lock(&pools_lock);
		const bool enough = pool->destroyed || pool->size >= nfree;
		stb_unlock(&pools_lock);
		if (enough)
			return;
		struct keytable *kt = calloc(1, sizeof(*kt));
		struct kt_sub *sub = kt ? calloc(1, sizeof(*sub)) : NULL;
		void *data = sub ? ctor(args) : NULL;
		if (!data) {
			free(sub);
			free(kt);
			return;
		}
		kt->sub[key.index / KEY_L2] = sub;
		sub->s[key.index % KEY_L2].version = key.version;
		sub->s[key.index % KEY_L2].ptr = data;
		if (!pool_return(pool, kt)) {
			struct keytable *saved = tls_override;
			tls_override = kt;
			keytable_free(kt);
			tls_override = saved;
			return;
		}
	}
}
