/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The leak view: the bthreads of a report grouped by the site that created
 * them (the return address of their bthread_start_* call; the addresses of
 * one source line are one site), each site with
 * its count, its states, the age of its oldest and of its median bthread,
 * and its growth since the producer's previous view. Built from the report
 * model (tasks with their creator and creation time); written by the text
 * and JSON writers (stb_report_leaks, formats.h).
 */
#ifndef STB_RUNTIME_STACKS_REPORT_LEAKS_H
#define STB_RUNTIME_STACKS_REPORT_LEAKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "report/model.h"

struct stb_leak_site {
	uint64_t ip;        /* where they were created (a return address); 0: not known */
	uint64_t count;     /* bthreads created there, live now */
	uint64_t by_state[STB_TASK_NSTATES];
	uint64_t aged;      /* of which the creation time is known */
	uint64_t oldest_ns; /* the oldest one's age (aged > 0) */
	uint64_t median_ns; /* the median age (the lower one of an even count) */
	int64_t growth;     /* count minus the previous view's (has_prev) */
};

struct stb_leaks {
	struct stb_leak_site *sites; /* most bthreads first, then by ip */
	size_t n;
	uint64_t bthreads;  /* bthreads viewed (registered pthreads are left out) */
	uint64_t now_ns;    /* CLOCK_MONOTONIC_COARSE of the ages */
	bool has_prev;      /* growth is set: the view is compared with an earlier one */
	uint64_t prev_ns;   /* that view's now_ns */
};

/*
 * The view of tasks[0 .. n) at now_ns (CLOCK_MONOTONIC_COARSE; creation
 * times after it count as age 0) into *l (free it with stb_leaks_free).
 * With r's symbolizer (r may be NULL; its symbol deadline is kept), the
 * addresses of one source line are one site, named by the lowest of them: a
 * compiler may call bthread_start_* from two copies of one line (clang peels
 * a loop's first iteration). Returns 0 or -ENOMEM. Memory: a few words per
 * bthread while it runs. Thread-safety: as r's symbolizer.
 */
int stb_leaks_build(struct stb_leaks *l, const struct stb_report_task *tasks, size_t n,
		    uint64_t now_ns, const struct stb_report *r);

/* Sets the growth of each site of l against prev (an earlier view of the
 * same process; a site it did not have grew by its whole count). */
void stb_leaks_growth(struct stb_leaks *l, const struct stb_leaks *prev);

/* Frees l's sites; l is empty and may be built again. Accepts an empty one. */
void stb_leaks_free(struct stb_leaks *l);

#endif /* STB_RUNTIME_STACKS_REPORT_LEAKS_H */
