/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collector's copier: threads that make a batch's stack copies
 * (stb_driver_copy_many: hold, read, validate) while the collector unwinds
 * and hands over the batch before it -- the kernel's copying of a million
 * stacks overlaps the unwinding instead of preceding it. The collector
 * copies too once it waits, and the threads fault in its next pages when
 * they have nothing to copy: whichever side is ahead helps the other.
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
 * Has the threads run stb_driver_copy_many(d, jobs, n, buf, cap), cut into
 * chunks of jobs (each with its share of buf, 16-byte aligned). The
 * arguments (and what they point to) are the copier's until stb_copier_wait
 * returns; one batch at a time. Does not block (for a thread's step of
 * stb_copier_ahead at most).
 */
void stb_copier_start(struct stb_copier *cp, const struct stb_driver *d,
		      struct stb_driver_job *jobs, unsigned n, void *buf, size_t cap);

/*
 * Memory the caller writes next, in order: while they have no chunk to
 * copy, the threads fault in the pages of [from, to) (rounded down to
 * pages), a step at a time, so that the caller's writes find them present
 * -- where a fresh page is dear (a VM whose host takes freed memory back)
 * its cost moves off the caller's thread. A later call moves the range on
 * (the pages before the threads' place are not touched again). The pages'
 * contents are not changed: the caller may write them meanwhile.
 * stb_copier_ahead(cp, NULL, NULL) ends it and returns when no thread
 * touches the range any more (it may then be unmapped or moved); it blocks
 * for one step at most. A kernel without MADV_POPULATE_WRITE: nothing.
 */
void stb_copier_ahead(struct stb_copier *cp, void *from, void *to);

/* Copies, on the caller's thread, the chunks of the batch started last that
 * no thread has begun, then waits until every chunk is copied (at once when
 * no batch is). Only the caller of stb_copier_start calls it. */
void stb_copier_wait(struct stb_copier *cp);

/* Finishes the batch in progress (stb_copier_wait), ends the threads, frees
 * cp (NULL: nothing). */
void stb_copier_free(struct stb_copier *cp);

#endif /* STB_RUNTIME_STACKS_COLLECT_COPIER_H */
