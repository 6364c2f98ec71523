/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writers of a report, one per format of the table (formats.h), called
 * by stb_report_write once every task is viewed (stb_report_view): text
 * (text.c), JSON (jsondoc.c), pprof, folded stacks and flame graphs
 * (tasks_pprof.c), each a stb_format_write_fn;
 * and the frame lines of the text, which bthread_stack_trace writes too.
 * Each returns 0 or -errno (-ENOMEM, -EIO); none is thread-safe for one r.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_WRITERS_H
#define STB_RUNTIME_STACKS_REPORT_WRITERS_H

#include <stdbool.h>
#include <stddef.h>

#include "report/formats.h"
#include "report/model.h"

/* Formats "#idx 0x%016x symbol+0xoff\n" into buf (symbol and module
 * escaped); returns the full length (snprintf). */
size_t stb_format_frame(char *buf, size_t size, unsigned idx, const struct stb_frame *f);

/* A text made of frame lines, with snprintf's contract on buf[size] (NULL
 * when size is 0): len counts every byte, also those that did not fit. */
struct stb_frame_text {
	char *buf;
	size_t size, len;
	unsigned idx; /* the next line's number */
	bool foreign; /* the frames' strings may come from anywhere (not only
			 from a stb_sym): measured and checked for escapes */
};

/*
 * stb_frame_fn appending stb_format_frame's line of f to the stb_frame_text
 * arg (the text stays NUL-terminated). Unless the text is foreign, f's
 * strings must come from a stb_sym (stb_sym_fill_frame): their lengths and
 * whether they need an escape are known (stb_sym_str_len), not scanned
 * again. Returns 0 (never stops a walk). Not thread-safe for one text.
 */
int stb_frame_text_add(const struct stb_frame *f, void *arg);

/* Text: one section per task, or per group (r->group), the deadlocks, the
 * footer. */
int stb_report_text(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const struct stb_format_info *f);

/* Text: the header line of each task (no stacks). */
int stb_report_text_list(const struct stb_report *r, struct stb_report_task *tasks, size_t n);

/* The "stb-stacks/1" JSON document (grouped: "groups" with the stacks). */
int stb_report_json(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const struct stb_format_info *f);

/* The "stb-tasks/1" JSON document (the task members of "stb-stacks/1"
 * except truncated and frames). */
int stb_report_json_list(const struct stb_report *r, struct stb_report_task *tasks, size_t n);

struct stb_leaks;

/* The leak view (leaks.h): text (the header line, then two lines per
 * creation site) and the "stb-leaks/1" JSON document. */
int stb_report_text_leaks(const struct stb_report *r, const struct stb_leaks *l);
int stb_report_json_leaks(const struct stb_report *r, const struct stb_leaks *l);

/*
 * The tasks as a profile in format f (pprof, folded stacks or a flame graph:
 * the folded stacks drawn by flamegraph.c; f->write_profile writes it).
 * pprof: sample type bthreads/count; one
 * sample per task with labels bthread_id, state, worker_tid (running
 * tasks), name, kind ("pthread" for registered pthreads), blocked
 * (nanoseconds, suspended tasks), error (failed traces) -- or, with
 * r->group, one sample per group of identical stacks, valued with its count,
 * labelled with its state and every member's bthread_id. Folded: "state;
 * frames... count", counts of identical lines summed. Tasks without a stack,
 * failed traces and truncated stacks get the synthetic frames
 * STB_PPROF_NOTE_*. Symbols and mappings come from r->sym and r->unw; r->meta
 * goes into the pprof comments.
 */
int stb_report_pprof(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     const struct stb_format_info *f);

#endif /* STB_RUNTIME_STACKS_REPORT_WRITERS_H */
