/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The "why" parts of a report, private to the report writers (text.c,
 * jsondoc.c, tasks_pprof.c): times in a state, wait clauses with their owners named, "created
 * by", the summary of a group, and the deadlocks section -- in text and
 * JSON. Everything the target controls is escaped.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_WHY_H
#define STB_RUNTIME_STACKS_REPORT_WHY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "report/model.h"

struct stb_json;

/* What the writers of one report share: the tasks by id (owners and
 * deadlock members are named from them) and the clock's tick. */
struct stb_why {
	const struct stb_report *r;
	/* The tasks by id: the report's own array when it is in id order (a
	 * scan in slot order mostly is: no copy), else byid, sorted; n is 0 out
	 * of memory (nothing named). */
	struct stb_report_task *sorted;
	struct stb_report_task **byid;
	size_t n;
	uint64_t tick_ns; /* resolution of CLOCK_MONOTONIC_COARSE */
};

/* Sets w up for tasks[0 .. n) of r. Never fails (without memory, owners
 * are not named). Free with stb_why_fini. */
void stb_why_init(struct stb_why *w, const struct stb_report *r, struct stb_report_task *tasks,
		  size_t n);
void stb_why_fini(struct stb_why *w);

/* The task with id, or NULL. */
struct stb_report_task *stb_why_find(const struct stb_why *w, uint64_t id);

/* How long t has been in its state at r->now_ns: blocked (suspended, a
 * pthread in a wait) or running without a switch. false: not known. */
bool stb_why_in_state_ns(const struct stb_why *w, const struct stb_report_task *t, uint64_t *ns);

/* Text: t's " [state, time, tid N]" bracket (" [in system call read(5),
 * 1.5 s]" for a task blocked in one); " \u2014 blocks worker 3 (tid N)" of a
 * bthread pinning its worker in a system call (nothing otherwise); its
 * " waiting on ..." clause (owners named with their bracket); its "created
 * by ..." line. */
void stb_why_text_bracket(const struct stb_why *w, const struct stb_report_task *t);
void stb_why_text_pins(const struct stb_why *w, const struct stb_report_task *t);

/* Text: the header of thread t (is_thread), without its newline: "thread
 * 1234 "comm" [in system call futex] \u2014 worker 3, runs bthread N". */
void stb_why_text_thread(const struct stb_why *w, const struct stb_report_task *t);
void stb_why_text_wait(const struct stb_why *w, const struct stb_report_task *t);
/* Text: ", working on execution queue 0x... (N queued)" of a consumer. */
void stb_why_text_execq(const struct stb_why *w, const struct stb_report_task *t);
void stb_why_text_created(const struct stb_why *w, struct stb_report_task *t);

/* Text: the header of group lead, a few lines that fit a screen: count,
 * state, shortest and longest time, wait; the names ("first" ... "last");
 * the ids, elided after the first few that fit 100 columns ("and 3,091
 * more") -- or, with r->all_ids, every member on a line: id, name, and its
 * wait when the members' waits differ. */
void stb_why_text_group(const struct stb_why *w, const struct stb_report_task *lead);

/* Text: the "created by" line of group lead when its members share it. */
void stb_why_text_group_created(const struct stb_why *w, const struct stb_report_task *lead);

/* Text: the "  holds mutex 0x... — 3 waiting" lines of t (what it holds
 * that others wait on, from r->deadlocks), and of a group's members (each
 * named when the group has several). */
void stb_why_text_holds(const struct stb_why *w, const struct stb_report_task *t);
void stb_why_text_group_holds(const struct stb_why *w, const struct stb_report_task *lead);

/* Text: "Found N deadlocks:" and each member's wait and stack (frames
 * written by frames(r, task)) of the cycles with a selected task (one the
 * report did not add); one line for the others (r->deadlock_hint says how
 * to see them); nothing when there is none. */
void stb_why_text_deadlocks(const struct stb_why *w,
			    void (*frames)(const struct stb_report *r, struct stb_report_task *t));

/* Text: where a return address is, "fn+0x2b at file.c:12" (what is known
 * of it; escaped) into buf[size]; a duration for people ("2.1 s", "<4 ms"). */
void stb_why_text_site(const struct stb_why *w, uint64_t ip, char *buf, size_t size);
void stb_why_text_duration(const struct stb_why *w, uint64_t ns, char *buf, size_t size);

/* JSON members of a return address: "ip", and what is known of "function"
 * with "offset", "file" with "line". */
void stb_why_json_site(const struct stb_why *w, struct stb_json *j, uint64_t ip);

/* JSON members of task t: "selected" (false when added), "worker",
 * "syscall", blocked_s / running_s, "wait", "execution_queue",
 * "created_by", "holds". */
void stb_why_json_task(const struct stb_why *w, struct stb_json *j, struct stb_report_task *t);

/* JSON members of group lead: "syscall", "wait", "execution_queue" (when
 * its members share one), "shortest_s", "longest_s", "names". */
void stb_why_json_group(const struct stb_why *w, struct stb_json *j,
			const struct stb_report_task *lead);

/* The top-level "deadlocks" member (the cycles with a selected task) and
 * "deadlocks_elsewhere" (how many others), when the search ran. */
void stb_why_json_deadlocks(const struct stb_why *w, struct stb_json *j);

/* Wait labels of t for pprof: up to 3 key/value pairs into keys/vals (vals
 * point into buf[3][32] or static strings). Returns their number. */
unsigned stb_why_labels(const struct stb_report_task *t, const char *keys[3], const char *vals[3],
			char buf[3][32]);

#endif /* STB_RUNTIME_STACKS_REPORT_WHY_H */
