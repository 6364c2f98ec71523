/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The text report (writers.h): one section per task, or per group of
 * identical stacks, the frame lines (also bthread_stack_trace's), the notes
 * and the footer. The same code prints stb_dump's output, the debug
 * endpoint's and stb-bpf-loader's, so all look alike.
 */
#include <emmintrin.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "encode/escape.h"
#include "report/leaks.h"
#include "report/model.h"
#include "report/why.h"
#include "report/writers.h"
#include "stb/abi.h"
#include "symbols/symbolize.h"
#include "util.h"

/* Frame lines store digits as whole words, in memory order, and make them
 * 16 at a time with SSE2 (part of x86-64). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__ || !defined(__SSE2__)
#error "frame lines are formatted for a little-endian machine with SSE2"
#endif

/* The 16 hex digits of v, most significant first, as the 16 bytes of a
 * vector: each byte split into its two nibbles, then every nibble turned
 * into its digit at once. */
static __m128i hex16(uint64_t v)
{
	const __m128i x = _mm_cvtsi64_si128((long long)__builtin_bswap64(v));
	const __m128i low = _mm_set1_epi8(0x0f);
	__m128i d = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), low),
				      _mm_and_si128(x, low));
	__m128i letter = _mm_and_si128(_mm_cmpgt_epi8(d, _mm_set1_epi8(9)),
				       _mm_set1_epi8('a' - '0' - 10));
	return _mm_add_epi8(_mm_add_epi8(d, _mm_set1_epi8('0')), letter);
}

/* Stores the first n (1..8) bytes of w, in memory order, at p: exactly n
 * bytes written, without a call. */
static char *put_first(char *p, uint64_t w, unsigned n)
{
	if (n == 8) {
		memcpy(p, &w, 8);
		return p + 8;
	}
	if (n & 4) {
		uint32_t x = (uint32_t)w;
		memcpy(p, &x, 4);
		p += 4;
		w >>= 32;
	}
	if (n & 2) {
		uint16_t x = (uint16_t)w;
		memcpy(p, &x, 2);
		p += 2;
		w >>= 16;
	}
	if (n & 1)
		*p++ = (char)w;
	return p;
}

/* The 16 hex digits of v at p. */
static char *put_hex16(char *p, uint64_t v)
{
	_mm_storeu_si128((__m128i *)(void *)p, hex16(v));
	return p + 16;
}

/* The hex digits of v at p, no leading zero (one digit for 0). */
static char *put_hex(char *p, uint64_t v)
{
	unsigned n = v ? (unsigned)(67 - __builtin_clzll(v)) / 4 : 1;
	/* Shifted so that its n digits come first. */
	__m128i d = hex16(v << (4 * (16 - n)));
	uint64_t w = (uint64_t)_mm_cvtsi128_si64(d);
	if (n > 8) {
		memcpy(p, &w, 8);
		p += 8;
		n -= 8;
		w = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(d, d));
	}
	return put_first(p, w, n);
}

static char *put_dec(char *p, unsigned v)
{
	if (v < 10) {
		*p = (char)('0' + v);
		return p + 1;
	}
	if (v < 100) {
		p[0] = (char)('0' + v / 10);
		p[1] = (char)('0' + v % 10);
		return p + 2;
	}
	char t[10];
	int n = 0;
	do {
		t[9 - n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	memcpy(p, t + 10 - n, (size_t)n);
	return p + n;
}

#define STB_NAME_MAX 512 /* escaped names are cut at 511 bytes: a line stays readable */
/* More than the bytes of a frame line but its name can be (81: "#", 10
 * digits, " 0x", 16, " ?? (", "+0x", 16, ")", " [fp]", " [build id
 * mismatch]", "\n"), and its NUL. */
#define STB_FRAME_FIXED 96
#define STB_PUT(p, lit) (memcpy(p, lit, sizeof(lit) - 1), (p) + sizeof(lit) - 1)

/* Copies n bytes from s to p; up to 32 without a call: two overlapping
 * pieces of the largest size that fits. */
static char *put_bytes(char *p, const char *s, size_t n)
{
	if (n > 32) {
		memcpy(p, s, n);
	} else if (n > 16) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + n - 16));
		_mm_storeu_si128((__m128i *)(void *)p, a);
		_mm_storeu_si128((__m128i *)(void *)(p + n - 16), b);
	} else if (n >= 8) {
		uint64_t a, b;
		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(p, &a, 8);
		memcpy(p + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(p, &a, 4);
		memcpy(p + n - 4, &b, 4);
	} else if (n) {
		/* 1..3 bytes: the first, the middle and the last one. */
		char a = s[0], b = s[n / 2], c = s[n - 1];
		p[0] = a;
		p[n / 2] = b;
		p[n - 1] = c;
	}
	return p + n;
}

/* n bytes of name, copied as they are when copy (they need no escape, n <
 * STB_NAME_MAX), escaped and cut at STB_NAME_MAX - 1 bytes otherwise. */
static char *put_name(char *p, const char *name, size_t n, bool copy)
{
	if (copy)
		return put_bytes(p, name, n);
	size_t w = stb_text_escape(p, STB_NAME_MAX, name, n);
	return p + (w < STB_NAME_MAX ? w : STB_NAME_MAX - 1);
}

/* "0x" and the digits of v after the byte c: the 4 bytes of "c0x" and its
 * NUL in one store, the NUL then covered by the first digit. */
#define STB_PUT_0X(p, c, v, put) (memcpy(p, c "0x", 4), put((p) + 3, v))

/* The line of frame f at p, with n bytes of name (the symbol, else the
 * module's file name; put_name). Writes at most STB_FRAME_FIXED + (copy ? n
 * : STB_NAME_MAX) bytes, no NUL; returns the end. */
static char *frame_line(char *p, unsigned idx, const struct stb_frame *f, const char *name,
			size_t n, bool copy)
{
	p = STB_PUT(p, "#");
	p = put_dec(p, idx);
	p = STB_PUT_0X(p, " ", f->ip, put_hex16);
	if (!name)
		p = STB_PUT(p, " ??");
	else if (f->symbol)
		p = STB_PUT(p, " ");
	else
		p = STB_PUT(p, " ?? (");
	if (name) {
		p = put_name(p, name, n, copy);
		p = STB_PUT_0X(p, "+", f->symbol ? f->offset : f->module_offset, put_hex);
		if (!f->symbol)
			p = STB_PUT(p, ")");
	}
	/* Frames found by following frame pointers (beyond a stack copy) say so,
	 * and those in a module whose file is not the one mapped. */
	if (f->flags & (STB_FRAME_F_FP | STB_FRAME_F_MISMATCH)) {
		if (f->flags & STB_FRAME_F_FP)
			p = STB_PUT(p, " [fp]");
		if (f->flags & STB_FRAME_F_MISMATCH)
			p = STB_PUT(p, " [build id mismatch]");
	}
	return STB_PUT(p, "\n");
}

size_t stb_format_frame(char *buf, size_t size, unsigned idx, const struct stb_frame *f)
{
	struct stb_frame_text t = {.buf = buf, .size = size, .idx = idx, .foreign = true};
	stb_frame_text_add(f, &t);
	return t.len;
}

int stb_frame_text_add(const struct stb_frame *f, void *arg)
{
	struct stb_frame_text *t = arg;
	/* The name shown: the symbol, else the module's file name. */
	const char *name = f->symbol ? f->symbol : f->module;
	size_t len = 0;
	bool plain = false;
	if (name)
		len = t->foreign ? strlen(name) : stb_sym_str_len(name, &plain);
	if (name && !f->symbol) {
		const char *slash = memrchr(name, '/', len);
		if (slash) {
			len -= (size_t)(slash + 1 - name);
			name = slash + 1;
		}
	}
	bool copy = name && len < STB_NAME_MAX && (plain || stb_text_plain(name, len));
	/* Straight into the buffer when the longest line this can be fits,
	 * else in a local line copied with snprintf's contract. */
	size_t room = t->len < t->size ? t->size - t->len : 0;
	char line[STB_FRAME_FIXED + STB_NAME_MAX];
	bool direct = room > STB_FRAME_FIXED + (copy ? len : STB_NAME_MAX);
	char *start = direct ? t->buf + t->len : line;
	size_t n = (size_t)(frame_line(start, t->idx++, f, name, len, copy) - start);
	if (direct) {
		start[n] = '\0';
	} else if (room) {
		size_t k = n < room ? n : room - 1;
		memcpy(t->buf + t->len, line, k);
		t->buf[t->len + k] = '\0';
	}
	t->len += n;
	return 0;
}


/* ---- text ---- */

/* "bthread 123 "conn 7" [suspended, 5.2 s] waiting on mutex 0x... held by ..." */
static void text_header(const struct stb_why *w, const struct stb_report_task *t)
{
	FILE *out = w->r->out;
	if (t->is_thread)
		fprintf(out, "thread %" PRIu32, t->tid);
	else
		fprintf(out, "%s %" PRIu64, t->is_pthread ? "pthread" : "bthread", t->id);
	if (stb_report_task_name(t)[0]) {
		fputs(" \"", out);
		stb_text_put(out, t->name);
		fputc('"', out);
	}
	stb_why_text_bracket(w, t);
	stb_why_text_pins(w, t);
	const struct stb_report_signal *signal = stb_report_more(t)->signal;
	if (signal) {
		/* A core's fatal signal, taken on this task's thread. */
		char sig[160];
		stb_report_signal_text(signal, sig, sizeof(sig));
		fprintf(out, " -- killed by %s", sig);
	}
	stb_why_text_wait(w, t);
	stb_why_text_execq(w, t);
	fputc('\n', out);
}

/* " at file:line" of a frame, escaped; nothing when unknown. */
static void text_source(FILE *out, const char *file, int line)
{
	if (!file)
		return;
	fputs(" at ", out);
	stb_text_put(out, file);
	if (line > 0)
		fprintf(out, ":%d", line);
}

/* With file:line: every frame with its position, the calls inlined at its
 * address before it (stb_report_frame_inlines). */
static void text_frames_lines(const struct stb_report *r, const struct stb_report_task *t)
{
	FILE *out = r->out;
	unsigned idx = 0;
	char line[1024];
	for (unsigned i = 0; i < t->nframes; i++) {
		const struct stb_frame *f = &t->frames[i];
		struct stb_sym_info si;
		unsigned ninl = stb_report_frame_inlines(r, t, i, &si);
		for (unsigned k = 0; k < ninl; k++) {
			char name[512];
			const char *fn = si.inlines[k].function;
			stb_text_escape(name, sizeof(name), fn ? fn : "??", fn ? strlen(fn) : 2);
			fprintf(out, "#%u 0x%016" PRIx64 " %s [inlined]", idx++, f->ip, name);
			text_source(out, si.inlines[k].file, si.inlines[k].line);
			fputc('\n', out);
		}
		size_t n = stb_format_frame(line, sizeof(line), idx++, f);
		if (n > 0 && n < sizeof(line) && line[n - 1] == '\n')
			line[n - 1] = '\0';
		fputs(line, out);
		if (f->flags & STB_FRAME_F_INLINED)
			fputs(" [inlined]", out);
		text_source(out, f->file, f->line);
		fputc('\n', out);
	}
}

static void text_frames(const struct stb_report *r, struct stb_report_task *t)
{
	FILE *out = r->out;
	if (t->err < 0) {
		fputs("(trace failed: ", out);
		stb_text_put(out, stb_report_task_error(t));
		fputs(")\n", out);
		return;
	}
	if (t->nframes == 0 && t->is_thread) {
		uint64_t task = stb_report_more(t)->task;
		if (task)
			fprintf(out, "(its stack is %s %" PRIu64 "'s, above)\n",
				t->on_worker ? "bthread" : "pthread", task);
		else
			fputs("(no stack: the thread exited, or its capture was not asked for)\n", out);
		return;
	}
	if (t->nframes == 0) {
		fprintf(out, "(no stack: %s)\n", stb_state_name(t->state));
		return;
	}
	stb_report_symbolize(r, t, r->lines); /* file:line with --lines only */
	if (r->lines) {
		text_frames_lines(r, t);
	} else {
		char line[1024];
		for (unsigned i = 0; i < t->nframes; i++) {
			stb_format_frame(line, sizeof(line), i, &t->frames[i]);
			fputs(line, out);
		}
	}
	const char *why = stb_report_trunc_text(t->truncated_why);
	bool cut = t->truncated_why && t->truncated_why <= STB_REPORT_TRUNC_DEADLINE;
	if (t->not_shown)
		fprintf(out, "(%s%u more %s not shown%s%s)\n", t->beyond_more ? "over " : "",
			t->not_shown, t->not_shown == 1 ? "frame" : "frames",
			cut ? "; and the walk ended early: " : "", cut ? why : "");
	else if (t->truncated)
		fprintf(out, "(more frames not shown: %s)\n", why ? why : "the walk ended early");
}

/* The header line, a comment as the notes are ("# stb_dump of pid ..."):
 * producer, pid and program, time, tasks by state, table slots used
 * (model.h); nothing without a meta. */
static void text_first_line(const struct stb_report *r)
{
	char line[768];
	if (!r->meta)
		return;
	size_t n = stb_report_meta_header(r->meta, line, sizeof(line));
	fputs("# ", r->out);
	fputs(line, r->out);
	fputs(n >= sizeof(line) ? "...\n\n" : "\n\n", r->out);
}

/* The line before the tasks a report added (model.h: added). */
static void text_added_heading(const struct stb_report *r)
{
	fputs("# not selected, shown because the tasks above wait on them:\n\n", r->out);
}

static void text_notes(const struct stb_report *r)
{
	const struct stb_report_meta *m = r->meta;
	for (unsigned i = 0; m && i < m->nnotes; i++) {
		fputs("# note: ", r->out);
		stb_text_put(r->out, m->notes[i]);
		fputs("\n\n", r->out);
	}
}

static void text_footer(const struct stb_report *r, const struct stb_report_task *tasks, size_t n)
{
	const struct stb_report_meta *m = r->meta;
	bool hidden = false;
	for (size_t i = 0; i < n && !hidden && r->runtime_hint; i++)
		hidden = tasks[i].hidden != 0;
	if (hidden) {
		fputs("# the runtime's own frames (stb_jump_stack, stb_sched_suspend, ..., "
		      "stb_task_entry) are not shown: ", r->out);
		stb_text_put(r->out, r->runtime_hint);
		fputs(" shows them\n", r->out);
	}
	if (m && m->run && !m->complete) {
		fputs("# ", r->out);
		stb_text_put(r->out, m->partial ? m->partial : "not every task was traced");
		fputs(": the output is partial\n", r->out);
	}
}


/* The heading of the thread section: "# 12 threads (--no-threads hides
 * them)". */
static void text_threads_heading(const struct stb_report *r, size_t nthreads)
{
	fprintf(r->out, "# %zu thread%s of the process", nthreads, nthreads == 1 ? "" : "s");
	if (r->threads_hint) {
		fputs(" (", r->out);
		stb_text_put(r->out, r->threads_hint);
		fputs(" hides them)", r->out);
	}
	fputs(":\n\n", r->out);
}

int stb_report_text(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const struct stb_format_info *f)
{
	(void)f;
	struct stb_why w;
	/* The thread section: the threads that are no task, but one that took a
	 * core's fatal signal, which comes first with the tasks. */
	size_t nthreads = 0;
	for (size_t i = 0; i < n; i++)
		nthreads += tasks[i].is_thread && !stb_report_more(&tasks[i])->signal;
	stb_why_init(&w, r, tasks, n);
	text_first_line(r);
	text_notes(r);
	if (!r->group) {
		/* The selected tasks, then those added (in the order of the scan). */
		for (int added = 0; added < 2; added++) {
			bool heading = false;
			for (size_t i = 0; i < n; i++) {
				struct stb_report_task *t = &tasks[i];
				if ((t->is_thread && !stb_report_more(t)->signal) || t->added != (added != 0))
					continue;
				if (added && !heading)
					text_added_heading(r);
				heading = true;
				text_header(&w, t);
				stb_why_text_holds(&w, t);
				text_frames(r, t);
				stb_why_text_created(&w, t);
				fputc('\n', r->out);
			}
		}
		stb_why_text_deadlocks(&w, text_frames);
		if (nthreads)
			text_threads_heading(r, nthreads);
		for (size_t i = 0; i < n; i++) {
			if (!tasks[i].is_thread || stb_report_more(&tasks[i])->signal)
				continue;
			stb_why_text_thread(&w, &tasks[i]);
			fputc('\n', r->out);
			text_frames(r, &tasks[i]);
			fputc('\n', r->out);
		}
	} else {
		size_t ng;
		struct stb_report_task **leaders = stb_report_group(tasks, n, &ng);
		if (!leaders) {
			stb_why_fini(&w);
			return -ENOMEM;
		}
		/* The tasks' groups (what took a core's fatal signal alone and
		 * first, then those of selected tasks: stb_report_group), the
		 * deadlocks, then the threads' groups. */
		for (int threads = 0; threads < 2; threads++) {
			if (threads) {
				stb_why_text_deadlocks(&w, text_frames);
				if (nthreads)
					text_threads_heading(r, nthreads);
			}
			for (size_t g = 0; g < ng; g++) {
				struct stb_report_task *t = leaders[g];
				if ((t->is_thread && !stb_report_more(t)->signal) != (threads != 0))
					continue;
				if (t->added && (g == 0 || !leaders[g - 1]->added))
					text_added_heading(r);
				if (stb_report_more(t)->signal) {
					text_header(&w, t);
					stb_why_text_holds(&w, t);
					text_frames(r, t);
					stb_why_text_created(&w, t);
					fputc('\n', r->out);
					continue;
				}
				stb_why_text_group(&w, t);
				stb_why_text_group_holds(&w, t);
				text_frames(r, t);
				stb_why_text_group_created(&w, t);
				fputc('\n', r->out);
			}
		}
		free(leaders);
	}
	stb_why_fini(&w);
	text_footer(r, tasks, n);
	return ferror(r->out) ? -EIO : 0;
}


int stb_report_text_list(const struct stb_report *r, struct stb_report_task *tasks, size_t n)
{
	struct stb_why w;
	stb_why_init(&w, r, tasks, n);
	text_first_line(r);
	for (int added = 0; added < 2; added++) {
		bool heading = false;
		for (size_t i = 0; i < n; i++) {
			if (tasks[i].added != (added != 0))
				continue;
			if (added && !heading) {
				fputc('\n', r->out);
				text_added_heading(r);
			}
			heading = true;
			text_header(&w, &tasks[i]);
		}
	}
	stb_why_fini(&w);
	return ferror(r->out) ? -EIO : 0;
}


/* States of a site or group: "8,990 suspended, 10 ready". */
static void text_states(FILE *out, const uint64_t by_state[STB_TASK_NSTATES])
{
	const char *sep = "";
	for (unsigned st = 0; st < STB_TASK_NSTATES; st++) {
		if (!by_state[st])
			continue;
		char c[32];
		stb_report_count_text(c, sizeof(c), by_state[st]);
		fprintf(out, "%s%s %s", sep, c, stb_state_name(st));
		sep = ", ";
	}
}

int stb_report_text_leaks(const struct stb_report *r, const struct stb_leaks *l)
{
	struct stb_why w;
	FILE *out = r->out;
	stb_why_init(&w, r, NULL, 0);
	text_first_line(r);
	text_notes(r);
	if (!l->n)
		fputs("no bthreads\n", out);
	for (size_t i = 0; i < l->n; i++) {
		const struct stb_leak_site *s = &l->sites[i];
		char c[32], site[1024], a[32], b[32];
		stb_report_count_text(c, sizeof(c), s->count);
		fprintf(out, "%s bthread%s created ", c, s->count == 1 ? "" : "s");
		if (s->ip) {
			stb_why_text_site(&w, s->ip, site, sizeof(site));
			fprintf(out, "by %s\n", site);
		} else {
			fputs("at a site not known\n", out);
		}
		fputs("  ", out);
		if (s->aged) {
			stb_why_text_duration(&w, s->oldest_ns, a, sizeof(a));
			stb_why_text_duration(&w, s->median_ns, b, sizeof(b));
			fprintf(out, "oldest %s, median %s", a, b);
			if (s->aged < s->count) {
				stb_report_count_text(c, sizeof(c), s->aged);
				fprintf(out, " (of the %s whose start time is known)", c);
			}
			fputs("; ", out);
		}
		text_states(out, s->by_state);
		if (l->has_prev) {
			stb_why_text_duration(&w, l->now_ns > l->prev_ns ? l->now_ns - l->prev_ns : 0,
					      a, sizeof(a));
			fprintf(out, "; %+" PRId64 " in %s", s->growth, a);
		}
		fputs("\n\n", out);
	}
	stb_why_fini(&w);
	text_footer(r, NULL, 0);
	return ferror(out) ? -EIO : 0;
}
