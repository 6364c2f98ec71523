/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The formats a report is written in (enum stb_format of stb/stb.h): their
 * names, and stb_report_write / stb_report_list, which hand a report to the
 * writer of its format (writers.h).
 */
#ifndef STB_RUNTIME_STACKS_REPORT_FORMATS_H
#define STB_RUNTIME_STACKS_REPORT_FORMATS_H

#include <stdbool.h>
#include <stddef.h>

#include "report/model.h"

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

#endif /* STB_RUNTIME_STACKS_REPORT_FORMATS_H */
