/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The formats a report is written in (enum stb_format of stb/stb.h, and the
 * debug endpoint's HTML page), in one table: name, file extension, MIME
 * type, binary or not, whether a task list, a profile or the leak view can
 * be written in it, and its writers. The loader's options, --every's file names, the
 * endpoint and stb_format_name all read it; stb_report_write and
 * stb_report_list hand a report to the writer of its format (writers.h).
 */
#ifndef STB_RUNTIME_STACKS_REPORT_FORMATS_H
#define STB_RUNTIME_STACKS_REPORT_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "report/model.h"

struct stb_pprof;
struct stb_leaks;

/* The debug endpoint's page: the text report as HTML (not a stb_format). */
#define STB_FORMAT_HTML_PAGE (-2)

/* What a profile is written with (stb_format_info.write_profile). */
struct stb_profile_out {
	const char *root_key;  /* label drawn as each stack's first frame ("state") */
	unsigned value;        /* which value of the builder's samples */
	const char *title;     /* flame graph: the page's heading; NULL: "stb flame graph" */
	const char *unit;      /* flame graph: what a count is; NULL: "samples" */
	const struct stb_report_meta *meta; /* may be NULL */
};

/* stb_format_info.lines */
#define STB_FORMAT_LINES_ALWAYS 1u /* frames with file:line in every report */
#define STB_FORMAT_LINES_ASKED 2u  /* with file:line when the report asks (r->lines) */

struct stb_format_info;

/* The writer of a report in format f: its tasks viewed (stb_report_view).
 * 0 or -errno (-ENOMEM, -EIO). */
typedef int (*stb_format_write_fn)(const struct stb_report *r, struct stb_report_task *tasks,
				   size_t n, const struct stb_format_info *f);

struct stb_format_info {
	int format;             /* enum stb_format, or STB_FORMAT_HTML_PAGE */
	const char *name;       /* --format NAME, ?format=NAME */
	const char *ext;        /* extension of a file of it (--every's) */
	const char *suffixes;   /* "-o FILE" ending so picks it by default: ' '-separated */
	const char *mime;       /* Content-Type on HTTP */
	bool binary;            /* not text: never written to a terminal */
	bool lists;             /* a task list without stacks can be written in it */
	unsigned lines;         /* STB_FORMAT_LINES_*: when frames carry file:line */
	stb_format_write_fn write; /* a report; NULL: none (the page wraps the text) */
	/* A profile builder (--profile); NULL: profiles are not written in it. */
	int (*write_profile)(struct stb_pprof *p, FILE *out, const struct stb_profile_out *o);
	/* The leak view (leaks.h); NULL: it is not written in it. */
	int (*write_leaks)(const struct stb_report *r, const struct stb_leaks *l);
};

/* The format of that value, NULL when there is none. */
const struct stb_format_info *stb_format_get(int format);

/* The format of that name (pages: the endpoint's page too), NULL when none. */
const struct stb_format_info *stb_format_named(const char *name, bool pages);

/* The format a file named path is written in by default (its suffix), NULL
 * when its name says none. */
const struct stb_format_info *stb_format_for_path(const char *path);

/* stb_format_list: which formats */
#define STB_FORMATS_PAGES 0x1u   /* the endpoint's page too */
#define STB_FORMATS_PROFILE 0x2u /* only those a profile is written in */

/* The names of the formats, "text, json, pprof, folded or flamegraph", into
 * buf[len] (snprintf's contract); for messages. */
size_t stb_format_list(char *buf, size_t len, unsigned which);

/*
 * Writes the report of tasks[0 .. n) to r->out in format (enum stb_format):
 * text (one section per task, or per group), the "stb-stacks/1" JSON
 * document, pprof, folded stacks or a flame graph. First trims each task's
 * stack once (in place): the runtime's own frames left out unless
 * r->runtime_frames, the rest cut at r->max_depth, what was left out counted
 * (hidden, not_shown). Returns 0 or -errno (-EINVAL: bad format; -ENOMEM;
 * -EIO: writing failed). Not thread-safe for one r.
 */
int stb_report_write(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     int format);

/*
 * A task list without stacks: text is the header line of each task (as in
 * the text report); json is the "stb-tasks/1" document (the task members of
 * "stb-stacks/1" except truncated and frames). Returns 0 or -errno.
 */
int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json);

/*
 * The leak view l (leaks.h) of the process r->meta describes, in a format
 * whose write_leaks it has: text or the "stb-leaks/1" JSON document
 * (-EINVAL for the others), creation sites symbolized with r->sym, ages as
 * durations. Returns 0 or -errno (-EIO: writing failed).
 */
int stb_report_leaks(const struct stb_report *r, const struct stb_leaks *l, int format);

#endif /* STB_RUNTIME_STACKS_REPORT_FORMATS_H */
