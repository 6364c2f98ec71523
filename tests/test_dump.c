/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb_dump: text (a header and frames per live task), grouped (each distinct
 * stack once with its count and ids), state_mask, max_depth, and the dump on
 * $STB_DUMP_SIGNAL=QUIT (ENV property) to stderr without stopping the process.
 * Public API only (links libbthread.so).
 */
#include "test_util.h"
#include "trace_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <bthread/countdown_event.h>
#include <stb/abi.h>
#include <stb/stb.h>

#define STB_NBLOCKED 5
#define STB_NGROUP 100
#define STB_MAX_SECTIONS 4096
#define STB_MAX_LINES 80

/* ---- parsing a text dump ---- */

struct stb_section {
	char *header;
	bool is_group;
	/* task sections */
	bool is_pthread;
	bthread_t id;
	char name[48];
	char state[32];
	double blocked_s;     /* -1 when absent */
	unsigned tid;         /* 0 when absent */
	char *created_by;     /* the "created by" line without those words, or NULL */
	/* group sections */
	unsigned count;
	bthread_t *ids;
	unsigned nids;
	/* frames (lines after the header): physical frames as bthread_stack_trace
	 * prints them (numbered again, without " at file:line"); the calls
	 * inlined into them only counted */
	int nlines;
	int ninlined;
	int nlogical;         /* every "#N" line, numbered 0, 1, ... in the text */
	char *lines[STB_MAX_LINES];
	struct stb_frame frames[STB_MAX_LINES]; /* symbol = parsed name or NULL */
};

#define STB_MAX_THREADS 256

struct stb_parsed {
	char *text;
	int n;
	struct stb_section *s;
	/* The thread section: its sections' header lines and first frame lines
	 * (not counted in n). */
	int nthreads;
	char *thread_header[STB_MAX_THREADS];
	char *thread_frames[STB_MAX_THREADS];
	bool threads_heading;
};

static void stb_parsed_free(struct stb_parsed *p)
{
	for (int i = 0; i < p->n; i++) {
		free(p->s[i].header);
		free(p->s[i].ids);
		free(p->s[i].created_by);
		for (int k = 0; k < p->s[i].nlines; k++) {
			free(p->s[i].lines[k]);
			free((char *)p->s[i].frames[k].symbol);
		}
	}
	for (int i = 0; i < p->nthreads && i < STB_MAX_THREADS; i++) {
		free(p->thread_header[i]);
		free(p->thread_frames[i]);
	}
	free(p->s);
	free(p->text);
	memset(p, 0, sizeof(*p));
}

/* Parses "#N 0x... symbol+0xoff" into f->symbol (malloc'd), or leaves it NULL. */
static void stb_parse_frame_line(const char *line, struct stb_frame *f)
{
	memset(f, 0, sizeof(*f));
	const char *sp1 = strchr(line, ' ');
	const char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	const char *plus = strrchr(line, '+');
	if (!sp2 || !plus || plus < sp2 || strncmp(plus, "+0x", 3) != 0 || strstr(sp2, " ?? "))
		return;
	f->ip = strtoull(sp1 + 1, NULL, 16);
	f->symbol = strndup(sp2 + 1, (size_t)(plus - sp2 - 1));
	f->offset = strtoull(plus + 1, NULL, 16);
}

/* Seconds of a printed duration "40 ms", "<4 ms", "5.3 s", "2.0 min", "1.5 h"; -1 if none. */
static double stb_dur_parse(const char *p)
{
	if (*p == '<')
		return 0.0;
	char *end;
	double v = strtod(p, &end);
	if (end == p || *end != ' ')
		return -1;
	end++;
	if (strncmp(end, "ms", 2) == 0)
		return v / 1e3;
	if (strncmp(end, "min", 3) == 0)
		return v * 60;
	if (*end == 's')
		return v;
	if (*end == 'h')
		return v * 3600;
	return -1;
}

/* The fields after the state in a task's bracket: ", 40 ms", ", tid T", ", blocked 2 ms". */
static void stb_bracket_parse(const char *p, size_t len, struct stb_section *s)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%.*s", (int)len, p);
	char *save = NULL;
	for (char *f = strtok_r(buf, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
		while (*f == ' ')
			f++;
		if (strncmp(f, "tid ", 4) == 0)
			s->tid = (unsigned)strtoul(f + 4, NULL, 10);
		else if (strncmp(f, "blocked ", 8) == 0)
			s->blocked_s = stb_dur_parse(f + 8);
		else
			s->blocked_s = stb_dur_parse(f);
	}
}

/* Splits text into sections separated by blank lines and parses headers. */
static bool stb_dump_parse(char *text, struct stb_parsed *p, char *why, size_t size)
{
	memset(p, 0, sizeof(*p));
	p->text = text;
	p->s = calloc(STB_MAX_SECTIONS, sizeof(*p->s));
	if (!p->s) {
		snprintf(why, size, "out of memory");
		return false;
	}
	regex_t hre, gre;
	/* "bthread N "name" [state, 40 ms, tid T] waiting on ...": the wait clause may
	 * name an owner with a bracket of its own. The state of a task blocked in a
	 * system call is "in system call read(5)". */
	regcomp(&hre,
		"^(bthread|pthread) ([0-9]+)( \"([^\"]*)\")? \\[(in system call [^],]+|[a-z-]+)"
		"((, [^],]+)*)\\]( .*)?$",
		REG_EXTENDED);
	regcomp(&gre,
		"^([0-9]+) (tasks?|bthreads?|pthreads?) \\[(in system call [^],]+|[a-z-]+)[^]]*\\]( .*)?$",
		REG_EXTENDED);
	bool ok = true;
	char *save = NULL;
	struct stb_section *cur = NULL;
	bool in_thread = false;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* strtok_r skips empty lines: a header starts each section. */
		regmatch_t m[9];
		/* The thread section, after the tasks: "# N threads of the
		 * process ...", then "thread TID ..." or "N threads [...]"
		 * sections. */
		if (strncmp(line, "# ", 2) == 0 && strstr(line, " of the process")) {
			p->threads_heading = true;
			in_thread = true;
			cur = NULL;
			continue;
		}
		if (in_thread && strncmp(line, "# ", 2) != 0) {
			bool header = strncmp(line, "thread ", 7) == 0 ||
				      (line[0] >= '1' && line[0] <= '9' && strstr(line, " thread"));
			if (header) {
				if (p->nthreads < STB_MAX_THREADS)
					p->thread_header[p->nthreads] = strdup(line);
				p->nthreads++;
			} else if (p->nthreads && p->nthreads <= STB_MAX_THREADS &&
				   !p->thread_frames[p->nthreads - 1] && line[0] == '#') {
				p->thread_frames[p->nthreads - 1] = strdup(line);
			}
			continue;
		}
		if (regexec(&hre, line, 9, m, 0) == 0 || regexec(&gre, line, 6, m, 0) == 0) {
			if (p->n >= STB_MAX_SECTIONS) {
				snprintf(why, size, "too many sections");
				ok = false;
				break;
			}
			cur = &p->s[p->n++];
			cur->header = strdup(line);
			cur->blocked_s = -1;
			if (line[0] == 'b' || line[0] == 'p') {
				regexec(&hre, line, 9, m, 0);
				cur->is_pthread = line[0] == 'p';
				cur->id = strtoull(line + m[2].rm_so, NULL, 10);
				if (m[4].rm_so >= 0)
					snprintf(cur->name, sizeof(cur->name), "%.*s",
						 (int)(m[4].rm_eo - m[4].rm_so), line + m[4].rm_so);
				snprintf(cur->state, sizeof(cur->state), "%.*s",
					 (int)(m[5].rm_eo - m[5].rm_so), line + m[5].rm_so);
				if (m[6].rm_so >= 0)
					stb_bracket_parse(line + m[6].rm_so,
							  (size_t)(m[6].rm_eo - m[6].rm_so), cur);
			} else {
				cur->is_group = true;
				cur->count = (unsigned)strtoul(line, NULL, 10);
				snprintf(cur->state, sizeof(cur->state), "%.*s",
					 (int)(m[3].rm_eo - m[3].rm_so), line + m[3].rm_so);
				cur->ids = calloc(cur->count + 1, sizeof(bthread_t));
			}
			continue;
		}
		/* A group's "  ids 1 2 ... [and N more]" line ("  id 1" for one),
		 * or with all_ids a line per member: "  ID "name" [its wait]". */
		const char *q = NULL;
		if (cur && cur->is_group && strncmp(line, "  ids ", 6) == 0)
			q = line + 5;
		else if (cur && cur->is_group && strncmp(line, "  id ", 5) == 0)
			q = line + 4;
		if (cur && cur->is_group && line[0] == ' ' && line[1] == ' ' && line[2] >= '0' &&
		    line[2] <= '9') {
			bthread_t id = strtoull(line + 2, NULL, 10);
			if (cur->ids && cur->nids <= cur->count)
				cur->ids[cur->nids] = id;
			cur->nids++;
			continue;
		}
		if (cur && strstr(line, " holds ") && line[0] == ' ')
			continue; /* what it holds that others wait on */
		if (q) {
			while (*q == ' ' && q[1] >= '0' && q[1] <= '9' && cur->ids) {
				char *end;
				bthread_t id = strtoull(q + 1, &end, 10);
				if (cur->nids <= cur->count)
					cur->ids[cur->nids] = id;
				cur->nids++;
				q = end;
			}
			continue;
		}
		if (strncmp(line, "# ", 2) == 0)
			continue; /* a note or the footer, not a frame */
		if (!cur) {
			snprintf(why, size, "text before the first header: \"%.100s\"", line);
			ok = false;
			break;
		}
		if (strncmp(line, "created by ", 11) == 0) {
			free(cur->created_by);
			cur->created_by = strdup(line + 11);
			continue;
		}
		if (cur->is_group && (strncmp(line, "  name \"", 8) == 0 ||
				      strncmp(line, "  names \"", 9) == 0))
			continue;
		if (line[0] == '#') {
			if (atoi(line + 1) != cur->nlogical++) {
				snprintf(why, size, "\"%.100s\": frame %d", line, cur->nlogical - 1);
				ok = false;
				break;
			}
			if (strstr(line, " [inlined]")) {
				cur->ninlined++;
				continue;
			}
			char *at = strstr(line, " at ");
			if (at)
				*at = '\0'; /* file:line */
			/* "#N" becomes "#k", k <= N: it fits where it is. */
			char *rest = strchr(line, ' ');
			char num[16];
			int k = snprintf(num, sizeof(num), "#%d", cur->nlines);
			if (rest) {
				memmove(line + k, rest, strlen(rest) + 1);
				memcpy(line, num, (size_t)k);
			}
		}
		if (cur->nlines < STB_MAX_LINES) {
			cur->lines[cur->nlines] = strdup(line);
			stb_parse_frame_line(line, &cur->frames[cur->nlines]);
			cur->nlines++;
		}
	}
	regfree(&hre);
	regfree(&gre);
	return ok;
}

/* Text of the frame lines of a section, joined as bthread_stack_trace prints them. */
static char *stb_section_frames_text(const struct stb_section *s)
{
	size_t len = 1;
	for (int i = 0; i < s->nlines; i++)
		len += strlen(s->lines[i]) + 1;
	char *t = malloc(len);
	t[0] = '\0';
	for (int i = 0; i < s->nlines; i++) {
		strcat(t, s->lines[i]);
		strcat(t, "\n");
	}
	return t;
}

static const struct stb_section *stb_find_task(const struct stb_parsed *p, bthread_t id,
					       int *count)
{
	const struct stb_section *hit = NULL;
	*count = 0;
	for (int i = 0; i < p->n; i++) {
		const struct stb_section *s = &p->s[i];
		if (!s->is_group && s->id == id) {
			hit = s;
			(*count)++;
		}
		for (unsigned k = 0; s->is_group && k < s->nids && k <= s->count; k++) {
			if (s->ids[k] == id) {
				hit = s;
				(*count)++;
			}
		}
	}
	return hit;
}

/* Runs stb_dump into memory and parses the result. */
/* o NULL: every frame (runtime_frames = 1), to compare with stb_trace. */
static int stb_dump_to_parsed(const struct stb_dump_opts *o, struct stb_parsed *p)
{
	static const struct stb_dump_opts all_frames = {.runtime_frames = 1};
	if (!o)
		o = &all_frames;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	int rc = stb_dump(f, o);
	fclose(f);
	char why[256];
	if (!stb_dump_parse(buf, p, why, sizeof(why)))
		fail_msg("cannot parse the dump: %s", why);
	return rc;
}

/* ---- tasks with known stacks ---- */

static void *stb_dump_butex;
static int stb_dump_stop;

STB_NOIPA static void stb_dump_f3(void)
{
	while (!__atomic_load_n(&stb_dump_stop, __ATOMIC_ACQUIRE)) {
		butex_wait(stb_dump_butex, 0, NULL);
		STB_NO_TAIL();
	}
	STB_NO_TAIL();
}

STB_NOIPA static void stb_dump_f2(void)
{
	stb_dump_f3();
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_dump_f1(void *arg)
{
	(void)arg;
	stb_dump_f2();
	STB_NO_TAIL();
	return NULL;
}

static const char *const stb_dump_chain[] = {"stb_dump_f3", "stb_dump_f2", "stb_dump_f1"};

static uint32_t stb_spin_tid;

STB_NOIPA static void stb_spin_f3(void)
{
	__atomic_store_n(&stb_spin_tid, (uint32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	while (!__atomic_load_n(&stb_dump_stop, __ATOMIC_ACQUIRE))
		__asm__ volatile("pause");
	STB_NO_TAIL();
}

STB_NOIPA static void stb_spin_f2(void)
{
	stb_spin_f3();
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_spin_f1(void *arg)
{
	(void)arg;
	stb_spin_f2();
	STB_NO_TAIL();
	return NULL;
}

static const char *const stb_spin_chain[] = {"stb_spin_f3", "stb_spin_f2", "stb_spin_f1"};

static int stb_pth_fds[2] = {-1, -1};
static bthread_t stb_pth_id;

STB_NOIPA static void stb_pth_f3(void)
{
	char c;
	ssize_t r = read(stb_pth_fds[0], &c, 1);
	(void)r;
	STB_NO_TAIL();
}

STB_NOIPA static void stb_pth_f2(void)
{
	stb_pth_f3();
	STB_NO_TAIL();
}

static void *stb_pth_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "dumppth");
	__atomic_store_n(&stb_pth_id, bthread_init_for_pthread_stack_trace(), __ATOMIC_RELEASE);
	stb_pth_f2();
	STB_NO_TAIL();
	return NULL;
}

static bthread_t stb_blocked[STB_NBLOCKED], stb_grouped[STB_NGROUP], stb_spinner, stb_extra;
static pthread_t stb_pth;
static char stb_names[STB_NBLOCKED][16];

static unsigned stb_state_of(bthread_t id)
{
	struct stb_trace_info info;
	int rc = stb_trace(id, NULL, NULL, 0, &info);
	return rc < 0 ? STB_TASK_UNUSED : info.state;
}

/* Starts everything the tests look for; they stay until the group teardown. */
static int stb_dump_setup(void **state)
{
	(void)state;
	/* A loaded 2-CPU machine must not time the spinner's capture out. */
	if (stb_set_signal_trace_timeout_ms(5000) != 0)
		return -1;
	stb_dump_butex = butex_create();
	if (!stb_dump_butex)
		return -1;
	for (int i = 0; i < STB_NBLOCKED; i++) {
		bthread_attr_t a = BTHREAD_ATTR_NORMAL;
		snprintf(stb_names[i], sizeof(stb_names[i]), "dump-%d", i);
		bthread_attr_set_name(&a, stb_names[i]);
		if (bthread_start_background(&stb_blocked[i], &a, stb_dump_f1, NULL) != 0)
			return -1;
	}
	for (int i = 0; i < STB_NGROUP; i++)
		if (bthread_start_background(&stb_grouped[i], &BTHREAD_ATTR_SMALL, stb_dump_f1,
					     NULL) != 0)
			return -1;
	bthread_attr_t sa = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&sa, "dump-spin");
	if (bthread_start_background(&stb_spinner, &sa, stb_spin_f1, NULL) != 0)
		return -1;
	if (pipe2(stb_pth_fds, O_CLOEXEC) != 0 || pthread_create(&stb_pth, NULL, stb_pth_main, NULL))
		return -1;
	for (int i = 0; i < STB_NBLOCKED; i++)
		if (!STB_WAIT_UNTIL(stb_state_of(stb_blocked[i]) == STB_TASK_SUSPENDED, 10000))
			return -1;
	for (int i = 0; i < STB_NGROUP; i++)
		if (!STB_WAIT_UNTIL(stb_state_of(stb_grouped[i]) == STB_TASK_SUSPENDED, 10000))
			return -1;
	if (!STB_WAIT_UNTIL(__atomic_load_n(&stb_spin_tid, __ATOMIC_ACQUIRE) != 0, 10000) ||
	    !STB_WAIT_UNTIL(__atomic_load_n(&stb_pth_id, __ATOMIC_ACQUIRE) != 0, 10000))
		return -1;
	/* Let the blocked ones age a little ("blocked for" > 0). */
	stb_test_sleep_ms(20);
	return 0;
}

static int stb_dump_teardown(void **state)
{
	(void)state;
	__atomic_store_n(&stb_dump_stop, 1, __ATOMIC_RELEASE);
	__atomic_store_n((int *)stb_dump_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_dump_butex);
	char c = 'x';
	if (write(stb_pth_fds[1], &c, 1) != 1)
		return -1;
	int rc = pthread_join(stb_pth, NULL);
	for (int i = 0; i < STB_NBLOCKED; i++)
		rc |= bthread_join(stb_blocked[i], NULL);
	for (int i = 0; i < STB_NGROUP; i++)
		rc |= bthread_join(stb_grouped[i], NULL);
	rc |= bthread_join(stb_spinner, NULL);
	if (stb_extra)
		rc |= bthread_join(stb_extra, NULL);
	butex_destroy(stb_dump_butex);
	close(stb_pth_fds[0]);
	close(stb_pth_fds[1]);
	return rc ? -1 : 0;
}

static void stb_check_section_chain(const struct stb_section *s, const char *const *chain,
				    bool at_leaf, bool bthread_bottom)
{
	char why[2048];
	char *frames = stb_section_frames_text(s);
	if (stb_text_check(frames, NULL, 0, why, sizeof(why)) != s->nlines)
		fail_msg("section \"%s\": %s", s->header, why);
	free(frames);
	if (!stb_frames_check_chain(s->frames, s->nlines, chain, 3, NULL, 0, at_leaf,
				    bthread_bottom, why, sizeof(why)))
		fail_msg("section \"%s\": %s", s->header, why);
}

/* ---- tests ---- */

static void test_dump_text(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct stb_parsed p;
	int rc = stb_dump_to_parsed(NULL, &p);
	/* One section per live task; every section a task. */
	assert_int_equal(rc, p.n);
	assert_true(p.n >= STB_NBLOCKED + STB_NGROUP + 2);
	for (int i = 0; i < p.n; i++) {
		assert_false(p.s[i].is_group);
		assert_true(p.s[i].nlines > 0);
	}
	int count;
	static const char *const prims[] = {"butex_wait"};
	for (int i = 0; i < STB_NBLOCKED; i++) {
		const struct stb_section *s = stb_find_task(&p, stb_blocked[i], &count);
		assert_int_equal(count, 1);
		assert_false(s->is_pthread);
		assert_string_equal(s->name, stb_names[i]);
		assert_string_equal(s->state, "suspended");
		assert_true(s->blocked_s >= 0.0 && s->blocked_s < 600.0);
		stb_check_section_chain(s, stb_dump_chain, false, true);
		char why[2048];
		if (!stb_frames_check_chain(s->frames, s->nlines, stb_dump_chain, 3, prims, 1, false,
					    true, why, sizeof(why)))
			fail_msg("%s", why);
		/* The same lines as bthread_stack_trace gives for that task (the
		 * runtime's frames shown in both). */
		char text[8192];
		assert_int_equal(stb_set_trace_runtime_frames(1), 0);
		assert_true(bthread_stack_trace(stb_blocked[i], text, sizeof(text)) > 0);
		assert_int_equal(stb_set_trace_runtime_frames(0), 0);
		char *frames = stb_section_frames_text(s);
		assert_string_equal(frames, text);
		free(frames);
	}
	for (int i = 0; i < STB_NGROUP; i++) {
		const struct stb_section *s = stb_find_task(&p, stb_grouped[i], &count);
		assert_int_equal(count, 1);
		assert_string_equal(s->state, "suspended");
		assert_string_equal(s->name, "");
	}
	const struct stb_section *s = stb_find_task(&p, stb_spinner, &count);
	assert_int_equal(count, 1);
	assert_string_equal(s->name, "dump-spin");
	assert_string_equal(s->state, "running");
	assert_int_equal(s->tid, __atomic_load_n(&stb_spin_tid, __ATOMIC_ACQUIRE));
	stb_check_section_chain(s, stb_spin_chain, true, true);

	s = stb_find_task(&p, stb_pth_id, &count);
	assert_int_equal(count, 1);
	assert_true(s->is_pthread);
	assert_string_equal(s->name, "dumppth");
	/* It blocks in read(2): a state of its own. */
	char want[48];
	snprintf(want, sizeof(want), "in system call read(%d)", stb_pth_fds[0]);
	assert_string_equal(s->state, want);
	assert_true(s->tid != 0);
	static const char *const pchain[] = {"stb_pth_f3", "stb_pth_f2", "stb_pth_main"};
	stb_check_section_chain(s, pchain, false, false);
	stb_parsed_free(&p);
	STB_TEST_END();
}

static void test_dump_grouped(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct stb_parsed p;
	struct stb_dump_opts o = {.group = 1, .all_ids = 1, .runtime_frames = 1};
	int rc = stb_dump_to_parsed(&o, &p);
	assert_true(rc >= STB_NBLOCKED + STB_NGROUP + 2);
	int count;
	const struct stb_section *g = stb_find_task(&p, stb_grouped[0], &count);
	assert_int_equal(count, 1);
	assert_true(g->is_group);
	/* The 100 small-stack bthreads and the 5 named ones wait at the same
	 * place: one group of 105, most populous first. */
	assert_int_equal(g->count, STB_NGROUP + STB_NBLOCKED);
	assert_int_equal(g->nids, g->count);
	assert_string_equal(g->state, "suspended");
	assert_true(g == &p.s[0]);
	char head[64];
	snprintf(head, sizeof(head), "%d bthreads [suspended, ", STB_NGROUP + STB_NBLOCKED);
	assert_true(strncmp(g->header, head, strlen(head)) == 0);
	for (int i = 0; i < STB_NGROUP; i++) {
		assert_true(stb_find_task(&p, stb_grouped[i], &count) == g);
		assert_int_equal(count, 1);
	}
	for (int i = 0; i < STB_NBLOCKED; i++) {
		assert_true(stb_find_task(&p, stb_blocked[i], &count) == g);
		assert_int_equal(count, 1);
	}
	/* Every id in the group is one of ours; the stack is printed once. */
	for (unsigned k = 0; k < g->nids; k++) {
		bool ours = false;
		for (int i = 0; i < STB_NGROUP; i++)
			ours = ours || g->ids[k] == stb_grouped[i];
		for (int i = 0; i < STB_NBLOCKED; i++)
			ours = ours || g->ids[k] == stb_blocked[i];
		assert_true(ours);
	}
	stb_check_section_chain(g, stb_dump_chain, false, true);
	/* Total tasks over all groups = the return value. */
	unsigned total = 0;
	for (int i = 0; i < p.n; i++) {
		assert_true(p.s[i].is_group);
		assert_int_equal(p.s[i].nids, p.s[i].count);
		total += p.s[i].count;
	}
	assert_int_equal(total, (unsigned)rc);
	const struct stb_section *sp = stb_find_task(&p, stb_spinner, &count);
	assert_int_equal(count, 1);
	assert_string_equal(sp->state, "running");
	stb_parsed_free(&p);
	STB_TEST_END();
}

static void test_dump_state_mask(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct stb_parsed p;
	int count;
	struct stb_dump_opts o = {.state_mask = 1u << STB_TASK_SUSPENDED};
	int rc = stb_dump_to_parsed(&o, &p);
	assert_int_equal(rc, p.n);
	assert_true(rc >= STB_NBLOCKED + STB_NGROUP);
	for (int i = 0; i < p.n; i++)
		assert_string_equal(p.s[i].state, "suspended");
	assert_null(stb_find_task(&p, stb_spinner, &count));
	assert_null(stb_find_task(&p, stb_pth_id, &count));
	assert_non_null(stb_find_task(&p, stb_blocked[0], &count));
	stb_parsed_free(&p);

	o.state_mask = 1u << STB_TASK_RUNNING;
	rc = stb_dump_to_parsed(&o, &p);
	assert_int_equal(rc, p.n);
	for (int i = 0; i < p.n; i++) /* running, or blocked in a system call */
		if (strcmp(p.s[i].state, "running") != 0 &&
		    strncmp(p.s[i].state, "in system call ", 15) != 0)
			fail_msg("state %s", p.s[i].state);
	assert_non_null(stb_find_task(&p, stb_spinner, &count));
	assert_non_null(stb_find_task(&p, stb_pth_id, &count));
	assert_null(stb_find_task(&p, stb_blocked[0], &count));
	assert_null(stb_find_task(&p, stb_grouped[0], &count));
	stb_parsed_free(&p);
	STB_TEST_END();
}

static void test_dump_max_depth_and_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct stb_parsed p;
	int count;
	/* The runtime's frames are not counted: butex_wait, f3, f2 -- and f1
	 * is the one frame left out (the entry frames below it are hidden). */
	struct stb_dump_opts o = {.max_depth = 3, .state_mask = 1u << STB_TASK_SUSPENDED};
	stb_dump_to_parsed(&o, &p);
	const struct stb_section *s = stb_find_task(&p, stb_blocked[0], &count);
	assert_non_null(s);
	assert_int_equal(s->nlines, 4);
	assert_true(stb_sym_is(s->frames[0].symbol, "butex_wait"));
	assert_true(stb_sym_is(s->frames[2].symbol, "stb_dump_f2"));
	assert_string_equal(s->lines[3], "(1 more frame not shown)");
	stb_parsed_free(&p);
	/* With them, they count: 3 frames, and the count of all the others. */
	struct stb_frame full[64];
	const struct stb_trace_opts all = {.runtime_frames = 1};
	int nfull = stb_trace(stb_blocked[0], &all, full, 64, NULL);
	assert_true(nfull > 6);
	o.runtime_frames = 1;
	stb_dump_to_parsed(&o, &p);
	s = stb_find_task(&p, stb_blocked[0], &count);
	assert_non_null(s);
	assert_int_equal(s->nlines, 4);
	assert_true(stb_sym_is(s->frames[0].symbol, "stb_jump_stack"));
	char want[64];
	snprintf(want, sizeof(want), "(%d more frames not shown)", nfull - 3);
	assert_string_equal(s->lines[3], want);
	stb_parsed_free(&p);
	assert_int_equal(stb_dump(NULL, NULL), -EINVAL);
	struct stb_dump_opts bad = {.format = 99};
	assert_int_equal(stb_dump(stdout, &bad), -EINVAL);
	STB_TEST_END();
}

/* The default: the runtime's own frames hidden (and said so), the stack
 * from the API call the task waits in down to its function. */
static void test_dump_runtime_frames_hidden(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	struct stb_dump_opts o = {.state_mask = 1u << STB_TASK_SUSPENDED};
	assert_true(stb_dump(f, &o) >= STB_NBLOCKED);
	fclose(f);
	assert_null(strstr(buf, " stb_jump_stack+"));
	assert_null(strstr(buf, " stb_sched_suspend+"));
	assert_null(strstr(buf, " stb_task_entry+"));
	assert_null(strstr(buf, " stb_ctx_trampoline+"));
	assert_non_null(strstr(buf, "# the runtime's own frames"));
	assert_non_null(strstr(buf, "stb_dump_opts.runtime_frames = 1 shows them"));
	struct stb_parsed p;
	char why[256];
	if (!stb_dump_parse(buf, &p, why, sizeof(why)))
		fail_msg("cannot parse the dump: %s", why);
	int count;
	const struct stb_section *s = stb_find_task(&p, stb_blocked[0], &count);
	assert_non_null(s);
	assert_true(stb_sym_is(s->frames[0].symbol, "butex_wait"));
	assert_true(stb_sym_is(s->frames[s->nlines - 1].symbol, "stb_dump_f1"));
	stb_parsed_free(&p); /* frees buf */
	/* JSON says how many were hidden; text has file:line unless no_lines. */
	buf = NULL;
	f = open_memstream(&buf, &len);
	o.format = STB_FORMAT_JSON;
	assert_true(stb_dump(f, &o) >= STB_NBLOCKED);
	fclose(f);
	assert_non_null(strstr(buf, "\"runtime_frames_hidden\": "));
	assert_null(strstr(buf, "\"stb_jump_stack"));
	free(buf);
	buf = NULL;
	f = open_memstream(&buf, &len);
	o.format = STB_FORMAT_TEXT;
	assert_true(stb_dump(f, &o) >= STB_NBLOCKED);
	fclose(f);
	assert_true(strstr(buf, " stb_dump_f3+0x") && strstr(buf, "test_dump.c:"));
	free(buf);
	buf = NULL;
	f = open_memstream(&buf, &len);
	o.no_lines = 1;
	assert_true(stb_dump(f, &o) >= STB_NBLOCKED);
	fclose(f);
	assert_true(strstr(buf, " stb_dump_f3+0x") && !strstr(buf, " at /"));
	free(buf);
	STB_TEST_END();
}

static int *stb_cd_counter;
static int stb_cd_event; /* what the waiter names as its object */

STB_NOIPA static void *stb_dump_cd_f1(void *arg)
{
	(void)arg;
	int rc = stb_countdown_wait(stb_cd_counter, NULL, &stb_cd_event);
	STB_NO_TAIL();
	return (void *)(intptr_t)rc;
}

/* A task parked in a public function named stb_* (bthread::CountdownEvent
 * waits in stb_countdown_wait): the runtime frames above it are hidden as
 * above a bthread_* call, and that call is the innermost frame shown. */
static void test_dump_public_stb_frame(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	stb_cd_counter = butex_create();
	assert_non_null(stb_cd_counter);
	*stb_cd_counter = 1;
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_dump_cd_f1, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(t) == STB_TASK_SUSPENDED, 10000));
	struct stb_dump_opts o = {.state_mask = 1u << STB_TASK_SUSPENDED};
	struct stb_parsed p;
	int count;
	stb_dump_to_parsed(&o, &p);
	const struct stb_section *s = stb_find_task(&p, t, &count);
	assert_non_null(s);
	assert_true(s->nlines >= 2);
	if (!stb_sym_is(s->frames[0].symbol, "stb_countdown_wait"))
		fail_msg("innermost frame %s, want stb_countdown_wait", s->lines[0]);
	assert_true(stb_sym_is(s->frames[1].symbol, "stb_dump_cd_f1"));
	stb_parsed_free(&p);
	__atomic_store_n(stb_cd_counter, 0, __ATOMIC_RELEASE);
	butex_wake_all(stb_cd_counter);
	void *rc = NULL;
	assert_int_equal(bthread_join(t, &rc), 0);
	assert_int_equal((intptr_t)rc, 0);
	butex_destroy(stb_cd_counter);
	STB_TEST_END();
}

static bthread_sem_t stb_api_sem;
static bthread_mutex_t stb_api_mutex;
static bthread_cond_t stb_api_cond;
static bthread_id_t stb_api_id;
static int stb_api_cond_go;

STB_NOIPA static void *stb_api_sem_f(void *arg)
{
	(void)arg;
	int rc = bthread_sem_wait(&stb_api_sem);
	STB_NO_TAIL();
	return (void *)(intptr_t)rc;
}

STB_NOIPA static void *stb_api_cond_f(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&stb_api_mutex);
	while (!stb_api_cond_go)
		bthread_cond_wait(&stb_api_cond, &stb_api_mutex);
	bthread_mutex_unlock(&stb_api_mutex);
	STB_NO_TAIL();
	return NULL;
}

STB_NOIPA static void *stb_api_id_f(void *arg)
{
	(void)arg;
	void *data = NULL;
	int rc = bthread_id_lock(stb_api_id, &data);
	STB_NO_TAIL();
	if (rc == 0)
		bthread_id_unlock(stb_api_id);
	return (void *)(intptr_t)rc;
}

static int stb_api_on_error(bthread_id_t id, void *data, int error)
{
	(void)data;
	(void)error;
	return bthread_id_unlock_and_destroy(id);
}

/* A task parked in a public call that calls another public function
 * (bthread_sem_wait -> bthread_sem_timedwait, bthread_cond_wait ->
 * bthread_cond_timedwait, bthread_id_lock -> bthread_id_lock_and_reset_range):
 * the call the user made is #0 and the user's function #1. */
static void test_dump_api_call_first(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(bthread_sem_init(&stb_api_sem, 0), 0);
	assert_int_equal(bthread_mutex_init(&stb_api_mutex, NULL), 0);
	assert_int_equal(bthread_cond_init(&stb_api_cond, NULL), 0);
	assert_int_equal(bthread_id_create(&stb_api_id, NULL, stb_api_on_error), 0);
	void *data;
	assert_int_equal(bthread_id_lock(stb_api_id, &data), 0);
	static const struct {
		void *(*fn)(void *);
		const char *api, *user;
	} want[] = {
		{stb_api_sem_f, "bthread_sem_wait", "stb_api_sem_f"},
		{stb_api_cond_f, "bthread_cond_wait", "stb_api_cond_f"},
		{stb_api_id_f, "bthread_id_lock_verbose", "stb_api_id_f"},
	};
	bthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(bthread_start_background(&t[i], NULL, want[i].fn, NULL), 0);
	for (int i = 0; i < 3; i++)
		assert_true(STB_WAIT_UNTIL(stb_state_of(t[i]) == STB_TASK_SUSPENDED, 10000));
	struct stb_dump_opts o = {.state_mask = 1u << STB_TASK_SUSPENDED};
	struct stb_parsed p;
	int count;
	stb_dump_to_parsed(&o, &p);
	for (int i = 0; i < 3; i++) {
		const struct stb_section *s = stb_find_task(&p, t[i], &count);
		assert_non_null(s);
		assert_true(s->nlines >= 2);
		if (!stb_sym_is(s->frames[0].symbol, want[i].api) ||
		    !stb_sym_is(s->frames[1].symbol, want[i].user))
			fail_msg("%s: #0 %s, #1 %s", want[i].api, s->lines[0], s->lines[1]);
	}
	stb_parsed_free(&p);
	/* With the runtime's frames, the public call it made shows too. */
	o.runtime_frames = 1;
	stb_dump_to_parsed(&o, &p);
	const struct stb_section *s = stb_find_task(&p, t[0], &count);
	assert_non_null(s);
	bool timed = false;
	/* Its own frame (gcc); clang inlines bthread_sem_timedwait into
	 * bthread_sem_wait, whose caller is then the runtime's butex wait. */
	for (int k = 0; k < s->nlines; k++)
		timed |= stb_sym_is(s->frames[k].symbol, "bthread_sem_timedwait") ||
			 strstr(s->lines[k], " bthread_sem_timedwait [inlined]") != NULL ||
			 (k + 1 < s->nlines && stb_sym_is(s->frames[k].symbol, "stb_butex_wait_mono") &&
			  stb_sym_is(s->frames[k + 1].symbol, "bthread_sem_wait"));
	if (!timed)
		for (int k = 0; k < s->nlines; k++)
			print_message("  %s\n", s->lines[k]);
	assert_true(timed);
	stb_parsed_free(&p);
	assert_int_equal(bthread_sem_post(&stb_api_sem), 0);
	bthread_mutex_lock(&stb_api_mutex);
	stb_api_cond_go = 1;
	bthread_cond_signal(&stb_api_cond);
	bthread_mutex_unlock(&stb_api_mutex);
	assert_int_equal(bthread_id_unlock(stb_api_id), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	bthread_id_error(stb_api_id, 0);
	bthread_sem_destroy(&stb_api_sem);
	STB_TEST_END();
}

static int stb_sys_pipe[2] = {-1, -1};
static int stb_sys_sleep_err = -1; /* nanosleep's errno, 0 when it slept through */

STB_NOIPA static void *stb_sys_read_f(void *arg)
{
	(void)arg;
	char c;
	ssize_t n;
	while ((n = read(stb_sys_pipe[0], &c, 1)) < 0 && errno == EINTR)
		;
	STB_NO_TAIL();
	return (void *)(intptr_t)n;
}

STB_NOIPA static void *stb_sys_sleep_f(void *arg)
{
	(void)arg;
	struct timespec ts = {1, 500000000};
	int rc = nanosleep(&ts, NULL);
	__atomic_store_n(&stb_sys_sleep_err, rc == 0 ? 0 : errno, __ATOMIC_RELEASE);
	STB_NO_TAIL();
	return NULL;
}

/* Bthreads blocked in system calls on their workers (a raw read(), a libc
 * sleep) have a state of their own in every format, with the worker they
 * block -- and a dump does not cut their calls short (a call that a signal
 * would end early, the sleep, is read from /proc; the read restarts after
 * the handler). */
static void test_dump_in_syscall(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(pipe(stb_sys_pipe), 0);
	bthread_t rd, sl;
	assert_int_equal(bthread_start_background(&rd, NULL, stb_sys_read_f, NULL), 0);
	assert_int_equal(bthread_start_background(&sl, NULL, stb_sys_sleep_f, NULL), 0);
	usleep(300000);
	struct stb_dump_opts o = {.state_mask = 1u << STB_TASK_RUNNING};
	struct stb_parsed p;
	int count;
	stb_dump_to_parsed(&o, &p);
	char want[64];
	snprintf(want, sizeof(want), "in system call read(%d)", stb_sys_pipe[0]);
	const struct stb_section *s = stb_find_task(&p, rd, &count);
	assert_non_null(s);
	if (strcmp(s->state, want) != 0 || !strstr(s->header, " blocks worker ") ||
	    !strstr(s->header, " (tid ") ||
	    !stb_sym_is(s->frames[s->nlines - 1].symbol, "stb_sys_read_f"))
		fail_msg("reader: %s (%s)", s->header, s->state);
	s = stb_find_task(&p, sl, &count);
	assert_non_null(s);
	if (!strstr(s->state, "in system call clock_nanosleep") &&
	    !strstr(s->state, "in system call nanosleep"))
		fail_msg("sleeper: %s", s->header);
	stb_parsed_free(&p);
	/* Grouped and JSON. */
	o.group = 1;
	stb_dump_to_parsed(&o, &p);
	s = stb_find_task(&p, rd, &count);
	assert_non_null(s);
	assert_true(s->is_group);
	assert_string_equal(s->state, want);
	stb_parsed_free(&p);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	o.group = 0;
	o.format = STB_FORMAT_JSON;
	assert_true(stb_dump(f, &o) >= 2);
	fclose(f);
	snprintf(want, sizeof(want), "\"syscall\": {\"nr\": 0, \"name\": \"read\", \"fd\": %d}",
		 stb_sys_pipe[0]);
	if (!strstr(buf, want) || !strstr(buf, "\"worker\": "))
		fail_msg("JSON: %s", buf);
	free(buf);
	/* The sleep went on undisturbed. */
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_sys_sleep_err, __ATOMIC_ACQUIRE) >= 0, 10000));
	assert_int_equal(__atomic_load_n(&stb_sys_sleep_err, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(write(stb_sys_pipe[1], "x", 1), 1);
	void *n = NULL;
	assert_int_equal(bthread_join(rd, &n), 0);
	assert_int_equal((intptr_t)n, 1);
	assert_int_equal(bthread_join(sl, NULL), 0);
	close(stb_sys_pipe[0]);
	close(stb_sys_pipe[1]);
	STB_TEST_END();
}

static int stb_thr_stop;
static int stb_thr_tid[2];

STB_NOIPA static void stb_thr_nap_leaf(void)
{
	/* Asleep nearly all the time (on 2 busy CPUs a thread that wakes
	 * often is often runnable, and /proc shows no call then). */
	while (!__atomic_load_n(&stb_thr_stop, __ATOMIC_ACQUIRE)) {
		struct timespec ts = {0, 500000000};
		nanosleep(&ts, NULL);
	}
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_thr_nap(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "dump-nap");
	__atomic_store_n(&stb_thr_tid[0], (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	stb_thr_nap_leaf();
	STB_NO_TAIL();
	return NULL;
}

STB_NOIPA static void stb_thr_spin_leaf(void)
{
	while (!__atomic_load_n(&stb_thr_stop, __ATOMIC_ACQUIRE))
		__asm__ volatile("pause");
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_thr_spin(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "dump-spin-pth");
	__atomic_store_n(&stb_thr_tid[1], (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	stb_thr_spin_leaf();
	STB_NO_TAIL();
	return NULL;
}

/* Every thread of the process after the tasks: a plain pthread asleep (from
 * /proc, no signal), one spinning (never signalled: an error says why), the
 * calling thread itself,
 * the workers naming the bthread they run; no_threads leaves them out. */
static void test_dump_threads(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	pthread_t th[2];
	__atomic_store_n(&stb_thr_stop, 0, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(&th[0], NULL, stb_thr_nap, NULL), 0);
	assert_int_equal(pthread_create(&th[1], NULL, stb_thr_spin, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_thr_tid[0], __ATOMIC_ACQUIRE) &&
				   __atomic_load_n(&stb_thr_tid[1], __ATOMIC_ACQUIRE), 5000));
	usleep(50000);
	struct stb_parsed p;
	struct stb_dump_opts o = {0};
	stb_dump_to_parsed(&o, &p);
	assert_true(p.threads_heading);
	static const struct {
		const char *name, *leaf;
	} want[] = {{"\"dump-nap\" [in system call ", "stb_thr_nap_leaf"},
		    {"\"dump-spin-pth\" [running]", "stb_thr_spin_leaf"}};
	for (int k = 0; k < 2; k++) {
		char head[64];
		snprintf(head, sizeof(head), "thread %d ", stb_thr_tid[k]);
		bool found = false;
		for (int i = 0; i < p.nthreads && i < STB_MAX_THREADS; i++)
			found |= strncmp(p.thread_header[i], head, strlen(head)) == 0 &&
				 strstr(p.thread_header[i], want[k].name) != NULL;
		if (!found) {
			for (int i = 0; i < p.nthreads && i < STB_MAX_THREADS; i++)
				print_message("%s\n", p.thread_header[i]);
			fail_msg("no section \"%s...%s\" among %d threads", head, want[k].name,
				 p.nthreads);
		}
	}
	/* The calling thread, from its caller's frame. */
	char self[32];
	snprintf(self, sizeof(self), "thread %d ", (int)syscall(SYS_gettid));
	bool me = false;
	for (int i = 0; i < p.nthreads && i < STB_MAX_THREADS; i++)
		me |= strncmp(p.thread_header[i], self, strlen(self)) == 0;
	assert_true(me);
	stb_parsed_free(&p);
	/* Their frames, in JSON (a thread each). */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	o.format = STB_FORMAT_JSON;
	assert_true(stb_dump(f, &o) >= 0);
	fclose(f);
	const char *threads = strstr(buf, "\"threads\": [");
	if (!threads || !strstr(threads, "stb_thr_nap_leaf") || strstr(threads, "stb_thr_spin_leaf") ||
	    !strstr(threads, "a thread that is no task is not signalled") ||
	    !strstr(threads, "\"name\": \"bthread_w"))
		fail_msg("JSON threads: %s", threads ? threads : buf);
	free(buf);
	/* Hidden on request. */
	o.format = STB_FORMAT_TEXT;
	o.no_threads = 1;
	stb_dump_to_parsed(&o, &p);
	assert_false(p.threads_heading);
	assert_int_equal(p.nthreads, 0);
	stb_parsed_free(&p);
	__atomic_store_n(&stb_thr_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th[0], NULL), 0);
	assert_int_equal(pthread_join(th[1], NULL), 0);
	STB_TEST_END();
}

/* Reads the whole file at fd (from offset 0). */
static char *stb_read_fd(int fd)
{
	off_t end = lseek(fd, 0, SEEK_END);
	char *buf = calloc(1, (size_t)end + 1);
	if (buf && pread(fd, buf, (size_t)end, 0) != end) {
		free(buf);
		return NULL;
	}
	return buf;
}

static unsigned stb_file_count(int fd, const char *needle)
{
	char *t = stb_read_fd(fd);
	unsigned n = 0;
	for (const char *q = t ? strstr(t, needle) : NULL; q; q = strstr(q + 1, needle))
		n++;
	free(t);
	return n;
}

static void test_dump_on_sigquit(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	const char *env = getenv("STB_DUMP_SIGNAL");
	assert_non_null(env);
	assert_string_equal(env, "QUIT");
	char path[] = "/tmp/stb_test_dump_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	/* Twice: the dump thread stays ready for the next signal. */
	bool done1 = false, done2 = false;
	assert_int_equal(kill(getpid(), SIGQUIT), 0);
	done1 = STB_WAIT_UNTIL(stb_file_count(fd, "==== stb: end of dump") == 1, 30000);
	if (done1) {
		assert_int_equal(kill(getpid(), SIGQUIT), 0);
		done2 = STB_WAIT_UNTIL(stb_file_count(fd, "==== stb: end of dump") == 2, 30000);
	}
	fflush(stderr);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	assert_true(done1);
	assert_true(done2);
	char *out = stb_read_fd(fd);
	close(fd);
	assert_non_null(out);
	char begin[96];
	snprintf(begin, sizeof(begin), "==== stb: dump of all bthreads (pid %d) ====\n", (int)getpid());
	assert_true(strncmp(out, begin, strlen(begin)) == 0);
	/* The first dump: between the first begin and end markers. */
	char *end = strstr(out, "==== stb: end of dump (");
	assert_non_null(end);
	unsigned n = 0;
	assert_int_equal(sscanf(end, "==== stb: end of dump (%u tasks) ====", &n), 1);
	assert_true(n >= STB_NBLOCKED + STB_NGROUP + 2);
	*end = '\0';
	struct stb_parsed p;
	char why[256];
	if (!stb_dump_parse(strdup(out + strlen(begin)), &p, why, sizeof(why)))
		fail_msg("cannot parse the signal dump: %s", why);
	assert_int_equal(p.n, (int)n);
	int count;
	for (int i = 0; i < STB_NBLOCKED; i++) {
		const struct stb_section *s = stb_find_task(&p, stb_blocked[i], &count);
		assert_int_equal(count, 1);
		assert_string_equal(s->state, "suspended");
		/* The defaults: the runtime's frames are hidden. */
		stb_check_section_chain(s, stb_dump_chain, false, false);
		assert_true(stb_sym_is(s->frames[s->nlines - 1].symbol, "stb_dump_f1"));
	}
	const struct stb_section *s = stb_find_task(&p, stb_spinner, &count);
	assert_int_equal(count, 1);
	stb_check_section_chain(s, stb_spin_chain, true, false);
	stb_parsed_free(&p);
	free(out);
	/* Still alive, and the runtime still works. */
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_dump_f1, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(t) == STB_TASK_SUSPENDED, 10000));
	assert_int_equal(stb_trace(t, NULL, NULL, 0, NULL) > 0, 1);
	stb_extra = t;
	STB_TEST_END();
}

/* ---- a dump that the program's exit must not cut ---- */

#define STB_EXIT_CHILD_TASKS 3000

static void *stb_exit_child_task(void *arg)
{
	(void)arg;
	bthread_usleep(60 * 1000000);
	return NULL;
}

/*
 * The child: many bthreads (a dump of them takes a while), then main sleeps;
 * SIGQUIT interrupts sleep() and main returns at once, while the dump runs.
 */
static int stb_exit_child(void)
{
	/* As in a program of its own: no signal blocked (the mask of the test
	 * that forked this would be inherited). */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int i = 0; i < STB_EXIT_CHILD_TASKS; i++) {
		bthread_t t;
		if (bthread_start_background(&t, NULL, stb_exit_child_task, NULL) != 0)
			return 2;
	}
	usleep(200000); /* let them park */
	printf("ready\n");
	fflush(stdout);
	unsigned left = sleep(60);
	return left > 0 ? 0 : 3; /* 3: the signal did not interrupt sleep */
}

static void test_dump_at_exit(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	char path[] = "/tmp/stb_test_dump_exit_XXXXXX";
	int efd = mkstemp(path);
	assert_true(efd >= 0);
	unlink(path);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		dup2(efd, STDERR_FILENO);
		close(pfd[0]);
		execl("/proc/self/exe", "test_dump", "--exit-child", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	char buf[16] = "";
	ssize_t n = read(pfd[0], buf, sizeof(buf) - 1);
	close(pfd[0]);
	assert_true(n > 0 && strncmp(buf, "ready", 5) == 0);
	/* Only once main sleeps: a signal taken just before sleep() would leave
	 * it sleeping the whole minute (/proc/PID/syscall names the call a
	 * thread is blocked in: clock_nanosleep or nanosleep). */
	char sys[64];
	snprintf(sys, sizeof(sys), "/proc/%d/syscall", (int)pid);
	bool sleeping = false;
	for (int i = 0; i < 10000 && !sleeping; i++) {
		char now[32] = "";
		int fd = open(sys, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t k = read(fd, now, sizeof(now) - 1);
			now[k > 0 ? k : 0] = '\0';
			close(fd);
		}
		long nr = now[0] ? strtol(now, NULL, 10) : -1;
		sleeping = nr == SYS_clock_nanosleep || nr == SYS_nanosleep;
		if (!sleeping)
			usleep(1000);
	}
	assert_true(sleeping);
	/* To the main thread (a signal to the process may be taken by any
	 * thread, and only the main thread's sleep() returns early). */
	assert_int_equal(syscall(SYS_tgkill, (int)pid, (int)pid, SIGQUIT), 0);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char *out = stb_read_fd(efd);
	close(efd);
	assert_non_null(out);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the child ended with status 0x%x: %.2000s", st, out);
	/* The dump was complete: its end marker with every task. */
	const char *end = strstr(out, "==== stb: end of dump (");
	if (!strstr(out, "==== stb: dump of all bthreads") || !end)
		fail_msg("the dump was cut by the exit (%zu bytes of stderr)", strlen(out));
	unsigned tasks = 0;
	assert_int_equal(sscanf(end, "==== stb: end of dump (%u tasks)", &tasks), 1);
	assert_true(tasks >= STB_EXIT_CHILD_TASKS);
	free(out);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--exit-child") == 0)
		return stb_exit_child();
	/* ctest sets it (ENV property); a manual run gets the same here. It is
	 * read when the runtime starts, which happens in the setup. */
	if (!getenv("STB_DUMP_SIGNAL"))
		setenv("STB_DUMP_SIGNAL", "QUIT", 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dump_text),
		cmocka_unit_test(test_dump_grouped),
		cmocka_unit_test(test_dump_state_mask),
		cmocka_unit_test(test_dump_max_depth_and_errors),
		cmocka_unit_test(test_dump_runtime_frames_hidden),
		cmocka_unit_test(test_dump_public_stb_frame),
		cmocka_unit_test(test_dump_api_call_first),
		cmocka_unit_test(test_dump_in_syscall),
		cmocka_unit_test(test_dump_threads),
		cmocka_unit_test(test_dump_on_sigquit),
		cmocka_unit_test(test_dump_at_exit),
	};
	return cmocka_run_group_tests(tests, stb_dump_setup, stb_dump_teardown);
}
