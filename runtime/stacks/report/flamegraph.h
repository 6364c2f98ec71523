/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Flame graphs: one self-contained HTML page (no external script, style or
 * font, no network) drawing the folded stacks of a profile builder (pprof.h)
 * as an interactive icicle graph on a canvas -- zoom, search, tooltips --
 * split by state like the folded output. Sized for 10,000s of stacks: the
 * stacks are merged into one tree, names are written once.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_FLAMEGRAPH_H
#define STB_RUNTIME_STACKS_REPORT_FLAMEGRAPH_H

#include <stdio.h>

struct stb_pprof;
struct stb_report_meta;

struct stb_flamegraph_opts {
	const char *title;    /* the page's heading; NULL: "stb flame graph" */
	const char *unit;     /* what a count is ("bthreads", "samples"); NULL: "samples" */
	const char *root_key; /* label drawn as each stack's first frame ("state"), or NULL */
	unsigned value;       /* which value of the builder's samples */
	const struct stb_report_meta *meta; /* producer, pid, notes: shown; may be NULL */
};

/*
 * Writes the page of p's folded stacks (stb_pprof_folded_each) to out.
 * Everything from the target is escaped for HTML and for the embedded JSON.
 * Memory grows with the distinct frames of the tree. Returns 0 or -errno
 * (-ENOMEM, -EIO, -EINVAL).
 */
int stb_flamegraph_write(struct stb_pprof *p, FILE *out, const struct stb_flamegraph_opts *o);

#endif /* STB_RUNTIME_STACKS_REPORT_FLAMEGRAPH_H */
