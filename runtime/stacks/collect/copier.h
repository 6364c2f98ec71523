/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collector's copier: one thread that makes a batch's stack copies
 * (stb_driver_copy_many: hold, read, validate) while the collector unwinds
 * and hands over the batch before it -- the kernel's copying of a million
 * stacks overlaps the unwinding instead of preceding it.
 */
#ifndef STB_RUNTIME_STACKS_COLLECT_COPIER_H
#define STB_RUNTIME_STACKS_COLLECT_COPIER_H

#include <stddef.h>

#include "table/driver.h"

struct stb_copier;

#define STB_COPIER_MAX_THREADS 8u

/* A copier and its threads (1 .. STB_COPIER_MAX_THREADS; every signal
 * blocked in them; fewer when not all can be had). NULL with errno when
 * none can: the caller copies by itself then. */
struct stb_copier *stb_copier_new(unsigned threads);

/* How many threads cp has. */
unsigned stb_copier_threads(const struct stb_copier *cp);

/*
 * Has the thread run stb_driver_copy_many(d, jobs, n, buf, cap). The
 * arguments (and what they point to) are the thread's until
 * stb_copier_wait returns; one batch at a time. Does not block.
 */
void stb_copier_start(struct stb_copier *cp, const struct stb_driver *d,
		      struct stb_driver_job *jobs, unsigned n, void *buf, size_t cap);

/* Waits until the batch started last is copied (at once when none is). */
void stb_copier_wait(struct stb_copier *cp);

/* Waits for the batch in progress, ends the thread, frees cp (NULL: nothing). */
void stb_copier_free(struct stb_copier *cp);

#endif /* STB_RUNTIME_STACKS_COLLECT_COPIER_H */
