/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target of the writers of what the target controls (runtime/stacks/:
 * encode/, report/ text and JSON): the input is split into strings used as task
 * names, errors, symbols, inline frames, modules, comm and notes; the text and
 * JSON reports (with the header line, a task added for what another waits on,
 * what a task holds, deadlocks of selected tasks and of others, names of tasks
 * not shown, every member of a group), a task list and the leak view are
 * written, and checked: no control byte but newlines, the JSON valid UTF-8
 * with balanced structure, the text escape's length contract.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode/escape.h"
#include "encode/json.h"
#include "fuzz.h"
#include "report/flamegraph.h"
#include "report/formats.h"
#include "report/leaks.h"
#include "report/pprof.h"
#include "report/stackset.h"
#include "report/writers.h"
#include "symbols/symbolize.h"
#include "table/deadlock.h"

/* The profile writers and the symbolizer are not under test here: reports
 * are written in text and JSON only, with a symbolizer that knows nothing but
 * the inline frames at FZ_INLINE_IP (names and files from the input). */
#define FZ_INLINE_IP 0x1000
static struct stb_sym_inline fz_inlines[2];
static const char *fz_function; /* the function they are inlined into */
int stb_report_pprof(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     const struct stb_format_info *f)
{
	(void)r;
	(void)tasks;
	(void)n;
	(void)f;
	return -EINVAL;
}

int stb_pprof_write(struct stb_pprof *p, FILE *out)
{
	(void)p;
	(void)out;
	return -EINVAL;
}

int stb_pprof_write_folded(struct stb_pprof *p, FILE *out, const char *root_key, unsigned value)
{
	(void)p;
	(void)out;
	(void)root_key;
	(void)value;
	return -EINVAL;
}

int stb_pprof_write_json(struct stb_pprof *p, FILE *out, const struct stb_report_meta *meta)
{
	(void)p;
	(void)out;
	(void)meta;
	return -EINVAL;
}

int stb_flamegraph_write(struct stb_pprof *p, FILE *out, const struct stb_flamegraph_opts *o)
{
	(void)p;
	(void)out;
	(void)o;
	return -EINVAL;
}

bool stb_sym_fill_frame(struct stb_sym *s, int flags, struct stb_frame *f, struct stb_sym_info *si)
{
	(void)s;
	(void)flags;
	(void)f;
	(void)si;
	return false;
}

int stb_sym_lookup(struct stb_sym *s, uint64_t ip, int flags, struct stb_sym_info *out)
{
	(void)s;
	memset(out, 0, sizeof(*out));
	/* Frame 0 of an exact capture is looked up as it is, others at ip - 1. */
	if (ip != FZ_INLINE_IP || (flags & STB_SYM_NO_SOURCE))
		return -ENOENT;
	out->function = fz_function;
	out->ninline = 2;
	out->inlines = fz_inlines;
	return 0;
}

static void check_output(const char *s, size_t n, bool json)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\n') || c == 0x7f)
			__builtin_trap();
		if (json && c >= 0x80) {
			uint32_t cp;
			size_t k = stb_utf8_decode((const unsigned char *)s + i, n - i, &cp);
			if (k == 0)
				__builtin_trap(); /* JSON must be valid UTF-8 */
			i += k;
			continue;
		}
		i++;
	}
	if (json) {
		/* Outside strings, brackets balance. */
		int depth = 0;
		bool str = false, esc = false;
		for (size_t i = 0; i < n; i++) {
			char c = s[i];
			if (str) {
				if (esc)
					esc = false;
				else if (c == '\\')
					esc = true;
				else if (c == '"')
					str = false;
				continue;
			}
			if (c == '"')
				str = true;
			else if (c == '{' || c == '[')
				depth++;
			else if (c == '}' || c == ']')
				depth--;
			if (depth < 0)
				__builtin_trap();
		}
		if (depth != 0 || str)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Up to 8 strings separated by 0xfe. */
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	const char *str[8] = {"", "", "", "", "", "", "", ""};
	unsigned ns = 0;
	char *p = buf;
	str[ns++] = p;
	for (size_t i = 0; i < size && ns < 8; i++) {
		if ((unsigned char)buf[i] == 0xfe) {
			buf[i] = '\0';
			str[ns++] = buf + i + 1;
		}
	}
	/* The text escape: length contract at every buffer size. */
	size_t full = stb_text_escape(NULL, 0, str[0], strlen(str[0]));
	char small[17];
	size_t got = stb_text_escape(small, sizeof(small), str[0], strlen(str[0]));
	if (got != full || strlen(small) != (full < sizeof(small) ? full : sizeof(small) - 1))
		__builtin_trap();

	/* Two calls inlined at frame 0's address: one named from the input, one
	 * unknown, with the input's file. */
	fz_inlines[0] = (struct stb_sym_inline){.function = str[6], .file = str[5], .line = 3};
	fz_inlines[1] = (struct stb_sym_inline){.function = NULL, .file = str[4], .line = 0};
	fz_function = str[3];
	struct stb_frame frames[2] = {
	    {.ip = 0x1000, .symbol = str[3], .module = str[4], .file = str[5], .line = 7},
	    {.ip = 0x2000, .module = str[4], .flags = STB_FRAME_F_FP},
	};
	struct stb_report_task t[6];
	struct stb_report_more mo[6]; /* t[i].more */
	memset(t, 0, sizeof(t));
	memset(mo, 0, sizeof(mo));
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		t[i].more = &mo[i];
	t[0].id = 1ull << 32;
	t[0].state = size % STB_TASK_NSTATES;
	t[0].mode = (unsigned)(size % 7);
	t[0].nframes = 2;
	t[0].frames = frames;
	static char name0[STB_ABI_NAME_LEN]; /* names are table-sized */
	snprintf(name0, sizeof(name0), "%s", str[1]);
	t[0].name = name0;
	/* A system call of any number and first argument (names, fds, the
	 * numbers beyond the table). */
	uint64_t word = 0;
	memcpy(&word, data, size < 8 ? size : 8);
	t[0].in_syscall = size & 2;
	mo[0].syscall_nr = (uint32_t)(word >> 16);
	mo[0].syscall_arg0 = word;
	t[0].on_worker = size & 4;
	t[0].worker = (uint32_t)word;
	t[0].tid = (uint32_t)(word >> 32);
	t[0].truncated = (word >> 60) & 1;
	t[0].truncated_why = (unsigned)(word >> 61);
	t[1].id = 2ull << 32;
	t[1].state = STB_TASK_SUSPENDED;
	t[1].since_ns = 1;
	t[1].err = -EIO;
	mo[1].error = str[2];
	/* Execution queues: a consumer (t[0]), a joiner (t[1]), and a group
	 * working on one queue or two (t[2], t[3]). */
	mo[0].execq = 0x7f0000000040ull;
	mo[0].execq_queued_known = (size >> 2) & 1;
	mo[0].execq_queued = size * 977;
	t[1].wait.kind = STB_WAIT_EXECQ;
	t[1].wait.object = mo[0].execq;
	mo[1].wait_queued_known = (size >> 3) & 1;
	mo[1].wait_queued = UINT64_MAX - size;
	/* Two tasks sharing one stored stack (its JSON written once, spliced). */
	struct stb_stackset *set = stb_stackset_new();
	for (int i = 2; i < 4 && set; i++) {
		t[i].id = (uint64_t)(i + 1) << 32;
		t[i].state = STB_TASK_SUSPENDED;
		t[i].mode = STB_TRACE_CONTEXT;
		t[i].truncated = (size >> 1) & 1;
		t[i].stack = stb_stackset_add(set, frames, 2, stb_report_stack_key(&t[i]));
		t[i].frames = t[i].stack ? t[i].stack->frames : frames;
		t[i].nframes = 2;
		t[i].name = name0;
		/* A group blocked in one call, on the same fd or not. */
		t[i].in_syscall = (size >> 3) & 1;
		mo[i].syscall_nr = (uint32_t)(word & 0x1ff);
		mo[i].syscall_arg0 = (size >> 4) & 1 ? (uint64_t)i : 5;
		t[i].on_worker = true;
		t[i].worker = (unsigned)i;
		t[i].tid = 100u + (unsigned)i;
		mo[i].execq = (size >> 4) & 1 ? 0x7f0000000080ull * (unsigned)i : mo[0].execq;
		mo[i].execq_queued_known = true;
		mo[i].execq_queued = (uint64_t)i;
	}
	unsigned nt = set ? 4 : 2;
	/* Numbers of the input: the header's census and time, ages, sites. */
	uint64_t num[4] = {0};
	for (size_t i = 0; i < size && i < 32; i++)
		num[i / 8] = num[i / 8] << 8 | data[i];
	/* t[0] waits on a mutex t[1] holds; t[1] is added for it; t[0] was
	 * created by a task the report names only (a ref). */
	t[0].wait = (struct stb_wait_view){.kind = STB_WAIT_MUTEX, .object = num[0],
					   .owner = t[1].id};
	t[0].since_ns = 1;
	t[0].creator = (struct stb_creator){.id = 9ull << 32, .ip = num[1] | 1,
					    .created_ns = num[2]};
	t[1].added = true;
	t[1].creator = (struct stb_creator){.ip = num[1] | 1, .created_ns = num[3]};
	if (nt > 2)
		t[2].creator = (struct stb_creator){.ip = 0x4000, .created_ns = 1};
	struct stb_report_ref refs[1] = {{.id = 9ull << 32}};
	snprintf(refs[0].name, sizeof(refs[0].name), "%s", str[6]);
	/* The table's graph: t[1] holds the mutex and an rwlock; a cycle of t[0]
	 * and t[1], and one of tasks not in the report. */
	struct stb_deadlock_hold holds[2] = {
	    {.owner = t[1].id, .object = num[0], .kind = STB_WAIT_MUTEX, .waiting = num[3] | 1},
	    {.owner = t[1].id, .object = num[2], .kind = STB_WAIT_RWLOCK_WR, .waiting = 2},
	};
	struct stb_deadlock_member members[3] = {
	    {.id = t[0].id, .wait = t[0].wait, .held_by = t[1].id},
	    {.id = t[1].id, .wait = {.kind = STB_WAIT_JOIN, .owner = t[0].id}, .held_by = t[0].id},
	    {.id = 77ull << 32, .wait = {.kind = STB_WAIT_ID, .object = num[1]},
	     .held_by = 77ull << 32},
	};
	size_t starts[3] = {0, 2, 3};
	struct stb_deadlocks dl = {.members = members, .nmembers = 3, .starts = starts,
				   .ncycles = 2, .holds = holds, .nholds = 2,
				   .partial = (size >> 2) & 1};
	/* Threads of the process (their section): one with a stack (truncated
	 * for any reason, even one out of range), one naming its task. */
	for (unsigned i = 0; i < 2; i++, nt++) {
		struct stb_report_task *th = &t[nt];
		th->is_thread = true;
		th->tid = (uint32_t)(word >> (8 * i)) | 1u;
		th->id = STB_ABI_OWNER_TID(th->tid);
		th->state = STB_TASK_RUNNING;
		static char thname[2][STB_ABI_NAME_LEN];
		snprintf(thname[i], sizeof(thname[i]), "%s", str[1 + i]);
		th->name = thname[i];
		th->on_worker = i == 1;
		th->worker = (uint32_t)size;
		mo[nt].task = i == 1 ? word | 1 : 0;
		th->in_syscall = (word >> 5) & 1;
		mo[nt].syscall_nr = (uint32_t)(word >> 40);
		mo[nt].syscall_arg0 = word >> 3;
		if (i == 0) {
			th->mode = STB_TRACE_SYSCALL;
			th->frames = frames;
			th->nframes = 2;
			th->truncated = 1;
			th->truncated_why = (unsigned)(word >> 56);
		}
	}
	struct stb_report_meta m = {
	    .producer = "fuzz",
	    .pid = 1,
	    .comm = str[6],
	    .time_ns = num[0],
	    .census = (size >> 3) & 1,
	    .tasks = {.by_state = {num[1], num[2], num[3], num[0]}, .pthreads = num[2]},
	    .slots_used = num[3],
	    .table = true,
	    .table_capacity = (uint32_t)num[1],
	    .run = true,
	    .complete = size & 1,
	    .partial = str[7],
	    .capture = str[5],
	};
	stb_report_meta_note(&m, str[7]);
	for (int format = 0; format < 4; format++) {
		for (int list = 0; list < 3; list++) {
			char *out = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&out, &len);
			if (!f)
				break;
			static char not_a_symbolizer;
			struct stb_report r = {.out = f,
					       .meta = &m,
					       .group = format == 1 || list == 2,
					       .all_ids = list == 2 || (size & 2),
					       .now_ns = 2000000000,
					       .stacks = set,
					       .sym = (struct stb_sym *)(void *)&not_a_symbolizer,
					       .lines = (size >> 2) & 1,
					       .runtime_frames = (size >> 3) & 1,
					       .deadlocks = &dl,
					       .deadlock_hint = "see it elsewhere",
					       .refs = refs,
					       .nrefs = 1};
			int rc = list == 1 ? stb_report_list(&r, t, nt, format == STB_FORMAT_JSON)
					   : stb_report_write(&r, t, nt, format);
			fclose(f);
			if (rc == 0)
				check_output(out, len, format == STB_FORMAT_JSON);
			free(out);
		}
	}
	/* The leak view, alone and against an earlier one. */
	struct stb_leaks prev, cur;
	if (stb_leaks_build(&prev, t, 2, num[0], NULL) == 0) {
		if (stb_leaks_build(&cur, t, nt, num[1], NULL) == 0) {
			stb_leaks_growth(&cur, &prev);
			for (int json = 0; json < 2; json++) {
				char *out = NULL;
				size_t len = 0;
				FILE *f = open_memstream(&out, &len);
				if (!f)
					break;
				struct stb_report r = {.out = f, .meta = &m, .now_ns = num[1]};
				int rc = stb_report_leaks(&r, json ? &cur : &prev,
							  json ? STB_FORMAT_JSON : STB_FORMAT_TEXT);
				fclose(f);
				if (rc == 0)
					check_output(out, len, json);
				free(out);
			}
			stb_leaks_free(&cur);
		}
		stb_leaks_free(&prev);
	}
	stb_stackset_free(set);
	free(buf);
	return 0;
}
