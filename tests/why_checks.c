/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared checks of test_why and test_loader_why (why_checks.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/env.h"
#include "support/proc.h"
#include "why_checks.h"

static uint64_t one_id(const struct ts_ltarget *t, const char *chain, unsigned i)
{
	const struct ts_chain *c = ts_ltarget_chain(t, chain);
	if (!c || c->n <= i)
		fail_msg("why_target did not report %s[%u]", chain, i);
	return c->ids[i];
}

void why_start(struct why_target *w, enum why_dl dl, const char *const *extra, char *const env[])
{
	static const char *const flags[] = {NULL, "--deadlock2", "--deadlock3", "--joincycle",
					    "--pthread"};
	const char *args[24];
	unsigned n = 0;
	if (flags[dl])
		args[n++] = flags[dl];
	for (unsigned i = 0; extra && extra[i] && n < 23; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	memset(w, 0, sizeof(*w));
	int rc = ts_ltarget_start(&w->t, ts_env("STB_WHY_TARGET", "why_target"), args, env);
	if (rc != 0)
		fail_msg("why_target did not start: %s", strerror(-rc));
	w->started = true;
	w->dl = dl;
	w->owner = one_id(&w->t, "owner", 0);
	w->waiter = one_id(&w->t, "waiter", 0);
	w->tidwaiter = one_id(&w->t, "tidwaiter", 0);
	w->fd = one_id(&w->t, "fd", 0);
	w->sleep = one_id(&w->t, "sleep", 0);
	w->cond = one_id(&w->t, "cond", 0);
	w->creator = one_id(&w->t, "creator", 0);
	w->child = one_id(&w->t, "child", 0);
	w->joiner = one_id(&w->t, "joiner", 0);
	for (unsigned i = 0; i < 9; i++)
		w->objs[i] = one_id(&w->t, "objects", i);
	w->wrlocker = one_id(&w->t, "wrlocker", 0);
	w->reader = one_id(&w->t, "rwwaiters", 0);
	w->writer = one_id(&w->t, "rwwaiters", 1);
	w->idlocker = one_id(&w->t, "idlocker", 0);
	w->idwaiter = one_id(&w->t, "idwaiter", 0);
	w->fdwaiters = ts_ltarget_chain(&w->t, "fdwaiters");
	w->fdnums = ts_ltarget_chain(&w->t, "fdnums");
	w->tid = one_id(&w->t, "info", 0);
	w->fdnum = one_id(&w->t, "info", 1);
	w->port = one_id(&w->t, "info", 2);
	const struct ts_chain *d = ts_ltarget_chain(&w->t, "deadlock");
	w->ndl = d ? d->n : 0;
	for (unsigned i = 0; i < w->ndl && i < 3; i++)
		w->dlids[i] = d->ids[i];
	const struct ts_chain *m = ts_ltarget_chain(&w->t, "many");
	if (m && m->n == 2) {
		w->many_first = m->ids[0];
		w->many_last = m->ids[1];
	}
	const struct ts_chain *s = ts_ltarget_chain(&w->t, "spin");
	w->spin = s && s->n ? s->ids[0] : 0;
	const struct ts_chain *e = ts_ltarget_chain(&w->t, "execq");
	if (e && e->n == 3) {
		w->execq_consumer = e->ids[0];
		w->execq_joiner = e->ids[1];
		w->execq_queue = e->ids[2];
	}
	w->churn = ts_ltarget_chain(&w->t, "churn");
	w->yield = ts_ltarget_chain(&w->t, "yield");
	w->tickers = ts_ltarget_chain(&w->t, "tickers");
}

void why_stop(struct why_target *w)
{
	if (!w->started)
		return;
	char bye[128];
	if (ts_ltarget_quit(&w->t, bye, sizeof(bye)) < 0)
		ts_ltarget_kill(&w->t);
	w->started = false;
}

char *why_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot read %s: %s", path, strerror(errno));
	struct ts_buf b = {0};
	char chunk[65536];
	size_t k;
	while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
		assert_int_equal(ts_buf_add(&b, chunk, k), 0);
	fclose(f);
	if (!b.p)
		assert_int_equal(ts_buf_add(&b, "", 0), 0);
	return b.p;
}

bool why_text_line(const char *text, uint64_t id, char *line, size_t len)
{
	char want[2][48];
	snprintf(want[0], sizeof(want[0]), "bthread %" PRIu64 " ", id);
	snprintf(want[1], sizeof(want[1]), "pthread %" PRIu64 " ", id);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		for (int k = 0; k < 2; k++) {
			if (strncmp(p, want[k], strlen(want[k])) == 0) {
				size_t c = n < len - 1 ? n : len - 1;
				memcpy(line, p, c);
				line[c] = '\0';
				return true;
			}
		}
		p = nl ? nl + 1 : NULL;
	}
	return false;
}

static void need_in(const char *hay, const char *needle, const char *what)
{
	if (!strstr(hay, needle))
		fail_msg("%s: \"%s\" not in:\n%s", what, needle, hay);
}

static void line_of(const char *text, uint64_t id, char *line, size_t len)
{
	if (!why_text_line(text, id, line, len))
		fail_msg("no header line of task %" PRIu64 " in:\n%.4000s", id, text);
}

/* Member i of a deadlock waits on this object (the next one's first lock). */
static uint64_t dl_object(const struct why_target *w, unsigned i)
{
	if (w->dl == WHY_DL_JOIN)
		return 0;
	if (w->dl == WHY_DL_PTHREAD) /* the pthread holds dl0 and waits on dl1 */
		return w->objs[4 + (i == 0 ? 1 : 0)];
	return w->objs[4 + (i + 1) % w->ndl];
}

void why_check_text(const char *text, const struct why_target *w)
{
	char line[1024], want[256];
	/* A mutex held by a named bthread. */
	line_of(text, w->waiter, line, sizeof(line));
	snprintf(want, sizeof(want),
		 " waiting on mutex 0x%" PRIx64 " held by bthread %" PRIu64 " \"why owner\" [suspended,",
		 w->objs[0], w->owner);
	need_in(line, want, "mutex waiter names its owner");
	need_in(line, "\"why waiter\" [suspended, ", "mutex waiter's state and time");
	/* A mutex held by a plain pthread. */
	line_of(text, w->tidwaiter, line, sizeof(line));
	snprintf(want, sizeof(want), " held by pthread tid %" PRIu64, w->tid);
	need_in(line, want, "owner by tid");
	/* fd and events. */
	line_of(text, w->fd, line, sizeof(line));
	snprintf(want, sizeof(want), " waiting on fd %" PRIu64 " for EPOLLIN", w->fdnum);
	need_in(line, want, "fd wait");
	/* A sleep and the time left (100 s from the start). */
	line_of(text, w->sleep, line, sizeof(line));
	const char *s = strstr(line, " sleeping, ");
	if (!s)
		fail_msg("no sleep in: %s", line);
	double left = strtod(s + 11, NULL);
	if (!(left > 40.0 && left <= 100.0) || !strstr(s, " s left"))
		fail_msg("sleep time left wrong: %s", line);
	/* A cond wait and its mutex. */
	line_of(text, w->cond, line, sizeof(line));
	snprintf(want, sizeof(want), " waiting on cond 0x%" PRIx64 " (mutex 0x%" PRIx64 ")",
		 w->objs[2], w->objs[3]);
	need_in(line, want, "cond wait");
	/* A join. */
	line_of(text, w->joiner, line, sizeof(line));
	snprintf(want, sizeof(want), " waiting on join of bthread %" PRIu64 " \"why sleep\"",
		 w->sleep);
	need_in(line, want, "join");
	/* An execution queue: its consumer asleep in a task (three queued), and
	 * a joiner waiting on the queue. */
	if (w->execq_consumer) {
		line_of(text, w->execq_consumer, line, sizeof(line));
		snprintf(want, sizeof(want), " working on execution queue 0x%" PRIx64 " (3 queued)",
			 w->execq_queue);
		need_in(line, want, "execution queue consumer");
		need_in(line, " sleeping, ", "execution queue consumer's sleep");
		line_of(text, w->execq_joiner, line, sizeof(line));
		snprintf(want, sizeof(want), " waiting on execution queue 0x%" PRIx64 " (3 queued)",
			 w->execq_queue);
		need_in(line, want, "execution queue joiner");
	}
	/* Created by: the creator's function, in the creator bthread. */
	char child[64];
	snprintf(child, sizeof(child), "bthread %" PRIu64 " \"why child\"", w->child);
	const char *c = strstr(text, child);
	assert_non_null(c);
	const char *cb = strstr(c, "\ncreated by ");
	const char *next = strstr(c + 1, "\n\n");
	if (!cb || (next && cb > next))
		fail_msg("no created-by line for the child in:\n%.2000s", c);
	snprintf(want, sizeof(want), "\ncreated by creator_fn+0x");
	need_in(c, want, "created by function");
	snprintf(want, sizeof(want), " in bthread %" PRIu64 " \"why creator\"\n", w->creator);
	need_in(cb, want, "created by bthread");

	/* Deadlocks: found with each member's wait and stack, or none. */
	const char *found = strstr(text, "Found ");
	if (w->dl == WHY_DL_NONE) {
		if (found)
			fail_msg("a deadlock reported on a target without one:\n%s", found);
		return;
	}
	if (!found || strncmp(found, "Found 1 deadlock:\n", 18) != 0)
		fail_msg("no \"Found 1 deadlock:\" in:\n%.6000s", text);
	for (unsigned i = 0; i < w->ndl; i++) {
		uint64_t next_id = w->dlids[(i + 1) % w->ndl];
		if (!why_text_line(found, w->dlids[i], line, sizeof(line)))
			fail_msg("deadlock member %" PRIu64 " missing in:\n%s", w->dlids[i], found);
		if (w->dl == WHY_DL_JOIN)
			snprintf(want, sizeof(want), " waiting on join of bthread %" PRIu64, next_id);
		else
			snprintf(want, sizeof(want),
				 " waiting on mutex 0x%" PRIx64 " held by %s %" PRIu64,
				 dl_object(w, i),
				 w->dl == WHY_DL_PTHREAD && (i + 1) % w->ndl == 0 ? "pthread"
										 : "bthread",
				 next_id);
		need_in(line, want, "deadlock member's wait");
		/* And its stack right below. */
		const char *l = strstr(found, line);
		const char *st = strchr(l, '\n');
		if (!st || strncmp(st + 1, "#0 0x", 5) != 0)
			fail_msg("deadlock member %" PRIu64 " without its stack:\n%s", w->dlids[i],
				 found);
	}
}

const struct ts_json *why_json_task(const struct ts_json *doc, uint64_t id)
{
	const struct ts_json *tasks = ts_json_get(doc, "tasks");
	for (const struct ts_json *t = tasks ? tasks->child : NULL; t; t = t->next)
		if (ts_json_u64(t, "id", 0) == id)
			return t;
	return NULL;
}

static const struct ts_json *json_wait(const struct ts_json *doc, uint64_t id, const char *kind)
{
	const struct ts_json *t = why_json_task(doc, id);
	if (!t)
		fail_msg("task %" PRIu64 " not in the JSON document", id);
	const struct ts_json *w = ts_json_get(t, "wait");
	if (!w || !ts_json_str(w, "kind") || strcmp(ts_json_str(w, "kind"), kind) != 0)
		fail_msg("task %" PRIu64 ": no wait of kind %s", id, kind);
	return w;
}

static uint64_t hex_of(const struct ts_json *o, const char *key)
{
	const char *s = ts_json_str(o, key);
	if (!s || strncmp(s, "0x", 2) != 0)
		fail_msg("\"%s\" is not a hex string", key);
	return strtoull(s + 2, NULL, 16);
}

void why_check_json(const struct ts_json *doc, const struct why_target *w)
{
	const struct ts_json *v = json_wait(doc, w->waiter, "mutex");
	assert_int_equal(hex_of(v, "object"), w->objs[0]);
	assert_int_equal(ts_json_u64(v, "owner", 0), w->owner);
	v = json_wait(doc, w->tidwaiter, "mutex");
	assert_int_equal(ts_json_u64(v, "owner_tid", 0), w->tid);
	assert_null(ts_json_get(v, "owner"));
	v = json_wait(doc, w->fd, "fd");
	assert_int_equal(ts_json_u64(v, "fd", 99999), w->fdnum);
	assert_int_equal(ts_json_u64(v, "events", 0), 1); /* EPOLLIN */
	v = json_wait(doc, w->sleep, "sleep");
	const struct ts_json *d = ts_json_get(v, "deadline_in_s");
	assert_non_null(d);
	double left = strtod(d->str, NULL);
	if (!(left > 40.0 && left <= 100.0))
		fail_msg("deadline_in_s of the sleep: %s", d->str);
	v = json_wait(doc, w->cond, "cond");
	assert_int_equal(hex_of(v, "object"), w->objs[2]);
	assert_int_equal(hex_of(v, "mutex"), w->objs[3]);
	v = json_wait(doc, w->joiner, "join");
	assert_int_equal(ts_json_u64(v, "target", 0), w->sleep);
	if (w->execq_consumer) {
		const struct ts_json *c = why_json_task(doc, w->execq_consumer);
		assert_non_null(c);
		const struct ts_json *q = ts_json_get(c, "execution_queue");
		if (!q)
			fail_msg("the execution queue consumer has no \"execution_queue\"");
		assert_int_equal(hex_of(q, "queue"), w->execq_queue);
		assert_int_equal(ts_json_u64(q, "queued", 99), 3);
		v = json_wait(doc, w->execq_joiner, "execution-queue");
		assert_int_equal(hex_of(v, "object"), w->execq_queue);
		assert_int_equal(ts_json_u64(v, "queued", 99), 3);
		assert_null(ts_json_get(why_json_task(doc, w->execq_joiner), "execution_queue"));
	}
	const struct ts_json *t = why_json_task(doc, w->waiter);
	assert_non_null(ts_json_get(t, "blocked_s"));
	/* Created by. */
	t = why_json_task(doc, w->child);
	assert_non_null(t);
	const struct ts_json *cb = ts_json_get(t, "created_by");
	assert_non_null(cb);
	assert_int_equal(ts_json_u64(cb, "bthread", 0), w->creator);
	assert_true(hex_of(cb, "ip") != 0);
	assert_non_null(ts_json_str(cb, "function"));
	assert_string_equal(ts_json_str(cb, "function"), "creator_fn");

	const struct ts_json *dls = ts_json_get(doc, "deadlocks");
	if (!dls || dls->type != TS_JARR)
		fail_msg("no \"deadlocks\" array");
	if (w->dl == WHY_DL_NONE) {
		if (dls->n)
			fail_msg("%u deadlocks reported on a target without one", dls->n);
		return;
	}
	assert_int_equal(dls->n, 1);
	const struct ts_json *cyc = dls->child;
	assert_int_equal(cyc->type, TS_JARR);
	assert_int_equal(cyc->n, w->ndl);
	/* Every member once, each held by the next one of the target's cycle. */
	unsigned seen = 0;
	for (const struct ts_json *m = cyc->child; m; m = m->next) {
		uint64_t id = ts_json_u64(m, "bthread", 0);
		unsigned i = 0;
		while (i < w->ndl && w->dlids[i] != id)
			i++;
		if (i == w->ndl)
			fail_msg("deadlock member %" PRIu64 " is not one of the cycle", id);
		seen |= 1u << i;
		assert_string_equal(ts_json_str(m, "kind"), w->dl == WHY_DL_JOIN ? "join" : "mutex");
		assert_int_equal(ts_json_u64(m, "held_by", 0), w->dlids[(i + 1) % w->ndl]);
		uint64_t obj = hex_of(m, "object");
		if (w->dl != WHY_DL_JOIN)
			assert_int_equal(obj, dl_object(w, i));
	}
	assert_int_equal(seen, (1u << w->ndl) - 1);
}

void why_check_schema(const char *text, const char *arg1, const char *arg2)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/why-schema-%d.json", ts_tmpdir(), (int)getpid());
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	const char *py = ts_env("STB_PYTHON3", "python3");
	const char *checker = ts_env("STB_JSON_CHECKER", "check_json_schema.py");
	char *argv[6] = {(char *)py, (char *)checker, path, (char *)arg1,
			 arg1 ? (char *)arg2 : NULL, NULL};
	char *out = NULL, *err = NULL;
	int rc = ts_run(argv, &out, &err, 120);
	if (rc != 0)
		fail_msg("check_json_schema.py (exit %d): %s%s", rc, out ? out : "", err ? err : "");
	free(out);
	free(err);
	unlink(path);
}

int why_http_get(unsigned port, const char *path, char **body)
{
	*body = NULL;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		fail_msg("connect to port %u: %s", port, strerror(errno));
	char req[512];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
	assert_int_equal(write(fd, req, (size_t)n), n);
	struct ts_buf b = {0};
	char chunk[65536];
	ssize_t k;
	while ((k = read(fd, chunk, sizeof(chunk))) > 0)
		assert_int_equal(ts_buf_add(&b, chunk, (size_t)k), 0);
	close(fd);
	assert_non_null(b.p);
	int status = 0;
	sscanf(b.p, "HTTP/1.1 %d", &status);
	const char *h = strstr(b.p, "\r\n\r\n");
	*body = strdup(h ? h + 4 : "");
	ts_buf_free(&b);
	return status;
}

struct ts_json *why_parse_json(const char *text)
{
	const char *err = NULL;
	struct ts_json *doc = ts_json_parse(text, &err);
	if (!doc)
		fail_msg("not JSON (%s): %.2000s", err ? err : "?", text);
	return doc;
}

/* ---- issue 27: the header, holders, what they hold, filtered runs ---- */

void why_check_header(const char *text, const char *producer, int pid)
{
	char want[160];
	snprintf(want, sizeof(want), "# %s of pid %d (why_target) at ", producer, pid);
	if (strncmp(text, want, strlen(want)) != 0)
		fail_msg("the report does not start with \"%s\":\n%.600s", want, text);
	const char *eol = strchr(text, '\n');
	if (!eol || eol[1] != '\n')
		fail_msg("the header is not one line and a blank one:\n%.600s", text);
	char line[600];
	snprintf(line, sizeof(line), "%.*s", (int)(eol - text), text);
	/* The time: a date and a time of day in UTC, within a minute of now. */
	int y, mo, d, h, mi, sec, ms;
	const char *at = line + strlen(want);
	if (sscanf(at, "%d-%d-%d %d:%d:%d.%d UTC: ", &y, &mo, &d, &h, &mi, &sec, &ms) != 7)
		fail_msg("no time in the header: %s", line);
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
			.tm_min = mi, .tm_sec = sec};
	time_t t = timegm(&tm);
	if (labs((long)(t - time(NULL))) > 60)
		fail_msg("the header's time is not now: %s", line);
	/* Tasks by state, and the table's slots (of the default capacity). */
	const char *tasks = strstr(at, " UTC: ");
	unsigned n = 0, used = 0;
	char cap[32];
	if (!tasks || sscanf(tasks, " UTC: %u bthreads", &n) != 1 || n < 10 ||
	    !strstr(tasks, " suspended") || !strstr(tasks, "; ") ||
	    sscanf(strstr(tasks, "; "), "; %u of %31s table slots used", &used, cap) != 2 ||
	    used < n || strcmp(cap, "1,048,576") != 0 || strcmp(line + strlen(line) - 17,
							      " table slots used") != 0)
		fail_msg("no tasks by state and table slots in the header: %s", line);
}

void why_check_header_json(const struct ts_json *doc, int pid)
{
	assert_int_equal(ts_json_u64(doc, "pid", 0), (uint64_t)pid);
	uint64_t t = ts_json_u64(doc, "time_ns", 0);
	uint64_t now = (uint64_t)time(NULL) * 1000000000ull;
	if (t + 60000000000ull < now || t > now + 60000000000ull)
		fail_msg("time_ns %" PRIu64 " is not now", t);
	const struct ts_json *st = ts_json_get(doc, "tasks_by_state");
	if (!st || st->type != TS_JOBJ || ts_json_u64(st, "suspended", 0) < 10)
		fail_msg("no tasks_by_state with the suspended tasks");
	assert_non_null(ts_json_get(doc, "registered_pthreads"));
	assert_true(ts_json_u64(doc, "slots_used", 0) >= ts_json_u64(st, "suspended", 0));
}

/* The text after the heading of the tasks a report added, or NULL. */
static const char *added_part(const char *text)
{
	return strstr(text, "\n# not selected, shown because the tasks above wait on them:\n\n");
}

/* The section of task id (from its header line to the blank line). */
static void section_of(const char *text, uint64_t id, char *buf, size_t len)
{
	char line[1024];
	line_of(text, id, line, sizeof(line));
	const char *s = strstr(text, line);
	const char *e = strstr(s, "\n\n");
	size_t n = e ? (size_t)(e - s) : strlen(s);
	snprintf(buf, len, "%.*s", (int)(n < len - 1 ? n : len - 1), s);
}

void why_check_holders_text(const char *text, const struct why_target *w, bool filtered)
{
	char sec[4096], want[256];
	const char *added = added_part(text);
	if (filtered && !added)
		fail_msg("no tasks added for what the selected ones wait on:\n%.6000s", text);
	/* Each holder, after the selected tasks when the run was filtered, with
	 * what it holds and how many wait on it, and its stack. */
	static const struct {
		const char *fn;
		unsigned obj;
		const char *what;
		unsigned waiting;
	} holders[] = {
		{"owner_fn", 0, "mutex", 1},
		{"wrlocker_fn", 7, "rwlock", 2},
		{"idlocker_fn", 8, "bthread_id", 1},
	};
	const uint64_t ids[] = {w->owner, w->wrlocker, w->idlocker};
	for (unsigned i = 0; i < 3; i++) {
		char line[1024];
		line_of(filtered ? added : text, ids[i], line, sizeof(line));
		section_of(filtered ? added : text, ids[i], sec, sizeof(sec));
		snprintf(want, sizeof(want), "\n  holds %s 0x%" PRIx64 "%s \xe2\x80\x94 %u waiting\n",
			 holders[i].what, w->objs[holders[i].obj],
			 holders[i].obj == 7 ? " for writing" : "", holders[i].waiting);
		char withnl[4200];
		snprintf(withnl, sizeof(withnl), "%s\n", sec);
		need_in(withnl, want, "what a holder holds");
		snprintf(want, sizeof(want), " %s+0x", holders[i].fn);
		need_in(sec, want, "a holder's stack");
		need_in(line, " sleeping", "the holder's state");
	}
	/* The waiters name their holders. */
	char line[1024];
	line_of(text, w->reader, line, sizeof(line));
	snprintf(want, sizeof(want), " waiting on rwlock 0x%" PRIx64 " to read held by bthread %" PRIu64
		 " \"why wrlocker\" [suspended, ", w->objs[7], w->wrlocker);
	need_in(line, want, "an rwlock reader names the writer");
	line_of(text, w->idwaiter, line, sizeof(line));
	snprintf(want, sizeof(want), " waiting on bthread_id 0x%" PRIx64 " held by bthread %" PRIu64
		 " \"why idlocker\" [suspended, ", w->objs[8], w->idlocker);
	need_in(line, want, "an id waiter names the locker");
}

void why_check_holders_json(const struct ts_json *doc, const struct why_target *w, bool filtered)
{
	static const char *const kinds[] = {"mutex", "rwlock-write", "id"};
	const uint64_t ids[] = {w->owner, w->wrlocker, w->idlocker};
	const uint64_t objs[] = {w->objs[0], w->objs[7], w->objs[8]};
	const uint64_t waiting[] = {1, 2, 1};
	for (unsigned i = 0; i < 3; i++) {
		const struct ts_json *t = why_json_task(doc, ids[i]);
		if (!t)
			fail_msg("holder %" PRIu64 " not in the JSON document", ids[i]);
		const struct ts_json *sel = ts_json_get(t, "selected");
		if (filtered != (sel != NULL))
			fail_msg("holder %" PRIu64 ": \"selected\" %s", ids[i],
				 sel ? "present in a run without a filter" : "missing");
		const struct ts_json *h = ts_json_get(t, "holds");
		if (!h || h->type != TS_JARR || h->n != 1)
			fail_msg("holder %" PRIu64 ": no \"holds\" of one object", ids[i]);
		assert_string_equal(ts_json_str(h->child, "kind"), kinds[i]);
		assert_int_equal(hex_of(h->child, "object"), objs[i]);
		assert_int_equal(ts_json_u64(h->child, "waiting", 0), waiting[i]);
	}
	/* Who holds nothing that others wait on says nothing. */
	assert_null(ts_json_get(why_json_task(doc, w->waiter), "holds"));
}

const struct ts_json *why_json_site(const struct ts_json *doc, const char *function)
{
	const struct ts_json *sites = ts_json_get(doc, "sites");
	for (const struct ts_json *s = sites ? sites->child : NULL; s; s = s->next)
		if (ts_json_str(s, "function") && strcmp(ts_json_str(s, "function"), function) == 0)
			return s;
	fail_msg("no creation site in %s in the leak view", function);
	return NULL;
}
