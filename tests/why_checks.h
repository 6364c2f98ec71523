/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What test_why (stb_dump, the debug endpoint) and test_loader_why
 * (stb-bpf-loader) check in the same way: why_target started and its ids,
 * and the "why" of each of its tasks in the text and JSON reports -- waits,
 * owners, fds, sleeps, joins, creators, deadlocks, group headers, an
 * execution queue's consumer and joiner (with --execq).
 */
#ifndef STB_TESTS_WHY_CHECKS_H
#define STB_TESTS_WHY_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

#include "support/json_parse.h"
#include "support/ltarget.h"

/* Deadlock scenarios of why_target. */
enum why_dl { WHY_DL_NONE, WHY_DL_MUTEX2, WHY_DL_MUTEX3, WHY_DL_JOIN, WHY_DL_PTHREAD };

struct why_target {
	struct ts_ltarget t;
	bool started;
	enum why_dl dl;
	uint64_t owner, waiter, tidwaiter, fd, sleep, cond, creator, child, joiner;
	uint64_t dlids[3];
	unsigned ndl;
	uint64_t objs[9]; /* owned, tidheld, cond, condm, dl0, dl1, dl2, rwlock, id */
	uint64_t wrlocker, reader, writer, idlocker, idwaiter;
	const struct ts_chain *fdwaiters, *fdnums;
	uint64_t tid, fdnum, port;
	uint64_t many_first, many_last;
	uint64_t spin;
	uint64_t execq_consumer, execq_joiner, execq_queue; /* --execq, else 0 */
	const struct ts_chain *churn, *yield, *tickers;
};

/* Starts why_target (path from $STB_WHY_TARGET) for scenario dl with extra
 * arguments (NULL-terminated, may be NULL) and environment. Fails the test
 * on error. */
void why_start(struct why_target *w, enum why_dl dl, const char *const *extra, char *const env[]);

/* Quits and reaps it (kills it if it does not answer). Accepts one not started. */
void why_stop(struct why_target *w);

/* Reads a whole file (malloc'd, NUL-terminated); fails the test on error. */
char *why_read_file(const char *path);

/* The text report's header line of task id (the first "bthread ID " or
 * "pthread ID " line), copied into line; false when there is none. */
bool why_text_line(const char *text, uint64_t id, char *line, size_t len);

/* The checks of a full (ungrouped) report of w. */
void why_check_text(const char *text, const struct why_target *w);
void why_check_json(const struct ts_json *doc, const struct why_target *w);

/* A JSON task by id, or NULL. */
const struct ts_json *why_json_task(const struct ts_json *doc, uint64_t id);

/* Runs tests/check_json_schema.py on text (args: "--grouped", "--loader"
 * or NULL); fails the test when it rejects it. */
void why_check_schema(const char *text, const char *arg1, const char *arg2);

/* The header line of a text report by producer ("stb_dump", "stb-bpf-loader
 * snapshot") of why_target pid: time now, tasks by state, table slots. */
void why_check_header(const char *text, const char *producer, int pid);
void why_check_header_json(const struct ts_json *doc, int pid);

/* The holders of w's mutex, rwlock and id in the report -- with their
 * stacks, what they hold and how many wait, after the selected tasks when
 * the run was filtered (JSON: "selected": false) -- and the waiters naming
 * them. */
void why_check_holders_text(const char *text, const struct why_target *w, bool filtered);
void why_check_holders_json(const struct ts_json *doc, const struct why_target *w, bool filtered);

/* The creation site of an "stb-leaks/1" document in function; fails the
 * test when there is none. */
const struct ts_json *why_json_site(const struct ts_json *doc, const char *function);

/* GET path from 127.0.0.1:port; returns the status and the body (malloc'd). */
int why_http_get(unsigned port, const char *path, char **body);

/* Parses text as JSON; fails the test on error. */
struct ts_json *why_parse_json(const char *text);

#endif /* STB_TESTS_WHY_CHECKS_H */
