/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copier's threads (copier.h), one lane each: a share of the batch
 * handed over under the lane's mutex, copied, its end signalled on the
 * lane's condition variable. Either side spins a little before it sleeps:
 * the other is usually about to be done (a futex wake-up per batch cost the
 * collector 7 % of a million-task run here).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "collect/copier.h"

/* One thread and its share of the batch. */
struct lane {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* The batch, under mu: set by start, cleared by the thread when copied. */
	const struct stb_driver *d;
	struct stb_driver_job *jobs;
	unsigned n;
	void *buf;
	size_t cap;
	bool busy; /* atomic: spin() reads it without mu */
	bool quit;
};

struct stb_copier {
	unsigned n;
	struct lane lane[];
};

#define BUSY(l) __atomic_load_n(&(l)->busy, __ATOMIC_ACQUIRE)

/* Spins while *flag is want, at most ~50 us: true when it changed. */
static bool spin(const bool *flag, bool want)
{
	for (unsigned i = 0; i < 2000; i++) {
		if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != want)
			return true;
		__builtin_ia32_pause();
	}
	return false;
}

static void *copier_main(void *arg)
{
	struct lane *l = arg;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		if (!BUSY(l) && !l->quit) {
			pthread_mutex_unlock(&l->mu);
			spin(&l->busy, false);
			pthread_mutex_lock(&l->mu);
		}
		while (!BUSY(l) && !l->quit)
			pthread_cond_wait(&l->cv, &l->mu);
		if (!BUSY(l))
			break; /* quit, nothing left to copy */
		pthread_mutex_unlock(&l->mu);
		stb_driver_copy_many(l->d, l->jobs, l->n, l->buf, l->cap);
		pthread_mutex_lock(&l->mu);
		__atomic_store_n(&l->busy, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&l->cv);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static void lane_stop(struct lane *l)
{
	pthread_mutex_lock(&l->mu);
	l->quit = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->thread, NULL);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
}

static int lane_start(struct lane *l)
{
	int rc = pthread_mutex_init(&l->mu, NULL);
	if (rc)
		return rc;
	if ((rc = pthread_cond_init(&l->cv, NULL)) != 0) {
		pthread_mutex_destroy(&l->mu);
		return rc;
	}
	/* The caller's signals stay the caller's (an interrupted --every). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&l->thread, NULL, copier_main, l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_cond_destroy(&l->cv);
		pthread_mutex_destroy(&l->mu);
	}
	return rc;
}

struct stb_copier *stb_copier_new(unsigned threads)
{
	if (threads < 1)
		threads = 1;
	if (threads > STB_COPIER_MAX_THREADS)
		threads = STB_COPIER_MAX_THREADS;
	struct stb_copier *cp = calloc(1, sizeof(*cp) + threads * sizeof(cp->lane[0]));
	if (!cp)
		return NULL;
	for (; cp->n < threads; cp->n++) {
		int rc = lane_start(&cp->lane[cp->n]);
		if (rc) {
			if (cp->n)
				break; /* fewer threads */
			free(cp);
			errno = rc;
			return NULL;
		}
	}
	return cp;
}

void stb_copier_start(struct stb_copier *cp, const struct stb_driver *d,
		      struct stb_driver_job *jobs, unsigned n, void *buf, size_t cap)
{
	/* Lane k: the k-th share of the jobs and of the buffer (16-byte
	 * aligned, as the copies within it). */
	size_t share = cap / cp->n & ~(size_t)15;
	for (unsigned k = 0; k < cp->n; k++) {
		struct lane *l = &cp->lane[k];
		unsigned from = (unsigned)((uint64_t)n * k / cp->n);
		unsigned to = (unsigned)((uint64_t)n * (k + 1) / cp->n);
		pthread_mutex_lock(&l->mu);
		l->d = d;
		l->jobs = jobs + from;
		l->n = to - from;
		l->buf = (char *)buf + share * k;
		l->cap = share;
		__atomic_store_n(&l->busy, true, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
	}
}

void stb_copier_wait(struct stb_copier *cp)
{
	for (unsigned k = 0; k < cp->n; k++) {
		struct lane *l = &cp->lane[k];
		if (spin(&l->busy, true))
			continue; /* the thread stored it after the copies: acquire sees them */
		pthread_mutex_lock(&l->mu);
		while (BUSY(l))
			pthread_cond_wait(&l->cv, &l->mu);
		pthread_mutex_unlock(&l->mu);
	}
}

unsigned stb_copier_threads(const struct stb_copier *cp)
{
	return cp->n;
}

void stb_copier_free(struct stb_copier *cp)
{
	if (!cp)
		return;
	for (unsigned k = 0; k < cp->n; k++)
		lane_stop(&cp->lane[k]);
	free(cp);
}
