/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copier's threads (copier.h): a batch cut into chunks that its threads
 * and the caller, once it waits, claim one at a time -- whichever side is
 * ahead helps the other -- and, between batches, the pages the caller
 * writes next faulted in (stb_copier_ahead). Either side spins a little
 * before it sleeps: the other is usually about to be done (a futex wake-up
 * per batch cost the collector 7 % of a million-task run here).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collect/copier.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Jobs per chunk: two reads of STB_MEM_SEGS_MAX stacks. */
#define STB_COPIER_CHUNK (2 * STB_MEM_SEGS_MAX)

/* Pages faulted in at a time between batches: a thread that has begun a
 * step finishes it before it copies (~4 pages, ~20 us where a fresh page
 * costs 5 us; the caller copies meanwhile). */
#define STB_COPIER_AHEAD_STEP ((size_t)16 << 10)

struct stb_copier {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a batch, its end, pages to fault in, quit */
	/* The batch, set under mu by start. */
	const struct stb_driver *d;
	struct stb_driver_job *jobs;
	unsigned n, nchunks;
	char *buf;
	size_t share; /* of buf, per chunk (16-byte aligned, as the copies) */
	/* Atomic: the batch's generation (high 32 bits) and its next chunk to
	 * claim; the chunks copied. A claim checks the generation: a thread
	 * late from the batch before never takes a chunk of this one. */
	uint64_t next;
	unsigned done;
	unsigned gen;
	bool quit;
	/* The pages to fault in, under mu: [ahead, ahead_end); touching: a
	 * thread faults some in now (outside mu). */
	uintptr_t ahead, ahead_end;
	unsigned touching;
	bool no_populate; /* the kernel has no MADV_POPULATE_WRITE */
	unsigned nthreads;
	pthread_t thread[];
};

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

/* Claims a chunk of batch gen: its index, or -1 when none is left. */
static int64_t claim(struct stb_copier *cp, unsigned gen)
{
	uint64_t v = LOAD(&cp->next);
	for (;;) {
		if ((unsigned)(v >> 32) != gen ||
		    (uint32_t)v >= __atomic_load_n(&cp->nchunks, __ATOMIC_ACQUIRE))
			return -1;
		if (__atomic_compare_exchange_n(&cp->next, &v, v + 1, true, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return (int64_t)(uint32_t)v;
	}
}

/* Copies the chunks of batch gen this side can claim. */
static void copy_chunks(struct stb_copier *cp, unsigned gen)
{
	int64_t k;
	while ((k = claim(cp, gen)) >= 0) {
		unsigned from = (unsigned)k * STB_COPIER_CHUNK;
		unsigned to = from + STB_COPIER_CHUNK < cp->n ? from + STB_COPIER_CHUNK : cp->n;
		stb_driver_copy_many(cp->d, cp->jobs + from, to - from,
				     cp->buf + cp->share * (size_t)k, cp->share);
		if (__atomic_add_fetch(&cp->done, 1, __ATOMIC_ACQ_REL) ==
		    __atomic_load_n(&cp->nchunks, __ATOMIC_ACQUIRE)) {
			pthread_mutex_lock(&cp->mu);
			pthread_cond_broadcast(&cp->cv); /* the batch is copied */
			pthread_mutex_unlock(&cp->mu);
		}
	}
}

/* Is a chunk of the current batch left to claim? */
static bool claimable(struct stb_copier *cp)
{
	uint64_t v = LOAD(&cp->next);
	return (unsigned)(v >> 32) == __atomic_load_n(&cp->gen, __ATOMIC_ACQUIRE) &&
	       (uint32_t)v < __atomic_load_n(&cp->nchunks, __ATOMIC_ACQUIRE);
}

/* With mu held: faults in the next step of the pages (mu released
 * meanwhile). False when there is none. */
static bool touch_ahead(struct stb_copier *cp)
{
	if (cp->ahead >= cp->ahead_end)
		return false;
	uintptr_t p = cp->ahead;
	size_t len = (size_t)(cp->ahead_end - p);
	if (len > STB_COPIER_AHEAD_STEP)
		len = STB_COPIER_AHEAD_STEP;
	cp->ahead = p + len;
	cp->touching++;
	pthread_mutex_unlock(&cp->mu);
	/* Writes nothing: the pages are made present, zero as they would be. A
	 * kernel without MADV_POPULATE_WRITE (< 5.14): the caller faults them. */
	int rc = madvise((void *)p, len, MADV_POPULATE_WRITE);
	int e = errno;
	pthread_mutex_lock(&cp->mu);
	cp->touching--;
	if (rc != 0 && e == EINVAL) {
		cp->ahead = cp->ahead_end = 0;
		cp->no_populate = true;
	}
	pthread_cond_broadcast(&cp->cv);
	return true;
}

/* Spins while nothing is claimable, at most ~50 us: true when something is. */
static bool spin_claimable(struct stb_copier *cp)
{
	for (unsigned i = 0; i < 2000; i++) {
		if (claimable(cp))
			return true;
		__builtin_ia32_pause();
	}
	return false;
}

static void *copier_main(void *arg)
{
	struct stb_copier *cp = arg;
	pthread_mutex_lock(&cp->mu);
	while (!cp->quit) {
		if (claimable(cp)) {
			unsigned gen = cp->gen;
			pthread_mutex_unlock(&cp->mu);
			copy_chunks(cp, gen);
			pthread_mutex_lock(&cp->mu);
			continue;
		}
		if (touch_ahead(cp))
			continue;
		pthread_mutex_unlock(&cp->mu);
		spin_claimable(cp);
		pthread_mutex_lock(&cp->mu);
		while (!cp->quit && !claimable(cp) && cp->ahead >= cp->ahead_end)
			pthread_cond_wait(&cp->cv, &cp->mu);
	}
	pthread_mutex_unlock(&cp->mu);
	return NULL;
}

struct stb_copier *stb_copier_new(unsigned threads)
{
	if (threads < 1)
		threads = 1;
	if (threads > STB_COPIER_MAX_THREADS)
		threads = STB_COPIER_MAX_THREADS;
	struct stb_copier *cp = calloc(1, sizeof(*cp) + threads * sizeof(cp->thread[0]));
	if (!cp)
		return NULL;
	int rc = pthread_mutex_init(&cp->mu, NULL);
	if (rc)
		goto cleanup;
	if ((rc = pthread_cond_init(&cp->cv, NULL)) != 0) {
		pthread_mutex_destroy(&cp->mu);
		goto cleanup;
	}
	/* The caller's signals stay the caller's (an interrupted --every). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (; cp->nthreads < threads; cp->nthreads++)
		if ((rc = pthread_create(&cp->thread[cp->nthreads], NULL, copier_main, cp)) != 0)
			break; /* fewer threads */
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (cp->nthreads)
		return cp;
	pthread_cond_destroy(&cp->cv);
	pthread_mutex_destroy(&cp->mu);
cleanup:
	free(cp);
	errno = rc;
	return NULL;
}

void stb_copier_start(struct stb_copier *cp, const struct stb_driver *d,
		      struct stb_driver_job *jobs, unsigned n, void *buf, size_t cap)
{
	unsigned nchunks = (n + STB_COPIER_CHUNK - 1) / STB_COPIER_CHUNK;
	pthread_mutex_lock(&cp->mu);
	cp->d = d;
	cp->jobs = jobs;
	cp->n = n;
	cp->buf = buf;
	cp->share = nchunks ? cap / nchunks & ~(size_t)15 : 0;
	__atomic_store_n(&cp->nchunks, nchunks, __ATOMIC_RELEASE);
	__atomic_store_n(&cp->done, 0, __ATOMIC_RELEASE);
	unsigned gen = cp->gen + 1;
	__atomic_store_n(&cp->gen, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&cp->next, (uint64_t)gen << 32, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&cp->cv);
	pthread_mutex_unlock(&cp->mu);
}

void stb_copier_wait(struct stb_copier *cp)
{
	unsigned gen = __atomic_load_n(&cp->gen, __ATOMIC_ACQUIRE);
	copy_chunks(cp, gen); /* what is left to claim, on this thread */
	unsigned n = __atomic_load_n(&cp->nchunks, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < 2000; i++) {
		if (LOAD(&cp->done) == n)
			return; /* the last one stored it after its copies: acquire sees them */
		__builtin_ia32_pause();
	}
	pthread_mutex_lock(&cp->mu);
	while (LOAD(&cp->done) != n)
		pthread_cond_wait(&cp->cv, &cp->mu);
	pthread_mutex_unlock(&cp->mu);
}

void stb_copier_ahead(struct stb_copier *cp, void *from, void *to)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t mask = page > 0 ? (uintptr_t)page - 1 : 4095;
	uintptr_t a = (uintptr_t)from & ~mask, e = (uintptr_t)to & ~mask;
	pthread_mutex_lock(&cp->mu);
	if (!from || e <= a || cp->no_populate) {
		cp->ahead = cp->ahead_end = 0;
		while (cp->touching)
			pthread_cond_wait(&cp->cv, &cp->mu);
	} else {
		/* Where the threads are, when that lies within the new range: the
		 * pages before it are done. */
		if (cp->ahead < a || cp->ahead > e)
			cp->ahead = a;
		cp->ahead_end = e;
		pthread_cond_broadcast(&cp->cv);
	}
	pthread_mutex_unlock(&cp->mu);
}

unsigned stb_copier_threads(const struct stb_copier *cp)
{
	return cp->nthreads;
}

void stb_copier_free(struct stb_copier *cp)
{
	if (!cp)
		return;
	stb_copier_wait(cp);
	pthread_mutex_lock(&cp->mu);
	cp->quit = true;
	pthread_cond_broadcast(&cp->cv);
	pthread_mutex_unlock(&cp->mu);
	for (unsigned k = 0; k < cp->nthreads; k++)
		pthread_join(cp->thread[k], NULL);
	pthread_cond_destroy(&cp->cv);
	pthread_mutex_destroy(&cp->mu);
	free(cp);
}
