/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copier thread (copier.h): a batch handed over under a mutex, copied,
 * its end signalled on a condition variable. Either side spins a little
 * before it sleeps: the other is usually about to be done (a futex wake-up
 * per batch cost the collector 7 % of a million-task run here).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#include "collect/copier.h"

struct stb_copier {
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

#define BUSY(cp) __atomic_load_n(&(cp)->busy, __ATOMIC_ACQUIRE)

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
	struct stb_copier *cp = arg;
	pthread_mutex_lock(&cp->mu);
	for (;;) {
		if (!BUSY(cp) && !cp->quit) {
			pthread_mutex_unlock(&cp->mu);
			spin(&cp->busy, false);
			pthread_mutex_lock(&cp->mu);
		}
		while (!BUSY(cp) && !cp->quit)
			pthread_cond_wait(&cp->cv, &cp->mu);
		if (!BUSY(cp))
			break; /* quit, nothing left to copy */
		pthread_mutex_unlock(&cp->mu);
		stb_driver_copy_many(cp->d, cp->jobs, cp->n, cp->buf, cp->cap);
		pthread_mutex_lock(&cp->mu);
		__atomic_store_n(&cp->busy, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&cp->cv);
	}
	pthread_mutex_unlock(&cp->mu);
	return NULL;
}

struct stb_copier *stb_copier_new(void)
{
	struct stb_copier *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return NULL;
	int rc = pthread_mutex_init(&cp->mu, NULL);
	if (rc) {
		free(cp);
		errno = rc;
		return NULL;
	}
	if ((rc = pthread_cond_init(&cp->cv, NULL)) != 0) {
		pthread_mutex_destroy(&cp->mu);
		free(cp);
		errno = rc;
		return NULL;
	}
	/* The caller's signals stay the caller's (an interrupted --every). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&cp->thread, NULL, copier_main, cp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_cond_destroy(&cp->cv);
		pthread_mutex_destroy(&cp->mu);
		free(cp);
		errno = rc;
		return NULL;
	}
	return cp;
}

void stb_copier_start(struct stb_copier *cp, const struct stb_driver *d,
		      struct stb_driver_job *jobs, unsigned n, void *buf, size_t cap)
{
	pthread_mutex_lock(&cp->mu);
	cp->d = d;
	cp->jobs = jobs;
	cp->n = n;
	cp->buf = buf;
	cp->cap = cap;
	__atomic_store_n(&cp->busy, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&cp->cv);
	pthread_mutex_unlock(&cp->mu);
}

void stb_copier_wait(struct stb_copier *cp)
{
	if (spin(&cp->busy, true))
		return; /* the thread stored it after the copies: acquire sees them */
	pthread_mutex_lock(&cp->mu);
	while (BUSY(cp))
		pthread_cond_wait(&cp->cv, &cp->mu);
	pthread_mutex_unlock(&cp->mu);
}

void stb_copier_free(struct stb_copier *cp)
{
	if (!cp)
		return;
	pthread_mutex_lock(&cp->mu);
	cp->quit = true;
	pthread_cond_broadcast(&cp->cv);
	pthread_mutex_unlock(&cp->mu);
	pthread_join(cp->thread, NULL);
	pthread_cond_destroy(&cp->cv);
	pthread_mutex_destroy(&cp->mu);
	free(cp);
}
