/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Text, grouped and JSON reports of traced tasks, the report metadata in
 * every format, and the dispatch to the pprof/folded writers (see report.h).
 * The same code prints stb_dump's output, the debug endpoint's and
 * stb-bpf-loader's, so all look alike.
 */
#include <emmintrin.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "json.h"
#include "pprof.h"
#include "report.h"
#include "rtframes.h"
#include "report_why.h"
#include "stb/abi.h"
#include "symbolize.h"
#include "util.h"

static const char *const state_names[STB_TASK_NSTATES] = {
	"unused", "created", "ready-without-stack", "ready", "about-to-run",
	"running", "suspending", "suspended", "destroyed",
};

const char *stb_state_name(unsigned state)
{
	return state < STB_TASK_NSTATES ? state_names[state] : "invalid";
}

static const char *const format_names[] = {
	[STB_FORMAT_TEXT] = "text", [STB_FORMAT_FOLDED] = "folded",
	[STB_FORMAT_PPROF] = "pprof", [STB_FORMAT_JSON] = "json",
	[STB_FORMAT_FLAMEGRAPH] = "flamegraph",
};

const char *stb_format_name(int format)
{
	if (format < 0 || (size_t)format >= sizeof(format_names) / sizeof(format_names[0]))
		return NULL;
	return format_names[format];
}

int stb_format_from_name(const char *name)
{
	for (size_t i = 0; name && i < sizeof(format_names) / sizeof(format_names[0]); i++)
		if (strcmp(name, format_names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

void stb_report_meta_note(struct stb_report_meta *m, const char *note)
{
	if (note && m->nnotes < STB_REPORT_MAX_NOTES)
		m->notes[m->nnotes++] = note;
}

bool stb_trace_mode_exact(unsigned mode)
{
	return mode == STB_TRACE_SIGNAL || mode == STB_TRACE_BPF || mode == STB_TRACE_SYSCALL ||
	       mode == STB_TRACE_CORE;
}

bool stb_report_task_exact(const struct stb_report_task *t)
{
	return stb_trace_mode_exact(t->mode) && !t->inexact;
}

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

void stb_report_symbolize(const struct stb_report *r, struct stb_report_task *t, bool with_source)
{
	if (!r->sym || (r->sym_deadline && stb_now_ns() >= r->sym_deadline))
		return;
	bool exact = stb_report_task_exact(t);
	for (unsigned i = 0; i < t->nframes; i++) {
		struct stb_frame *f = &t->frames[i];
		struct stb_sym_info si;
		if (!f->symbol && !f->module)
			stb_sym_fill_frame(r->sym,
					   (i > 0 || !exact ? STB_SYM_RETURN : 0) |
						   (with_source ? 0 : STB_SYM_NO_SOURCE),
					   f, &si);
	}
}

/* ---- the view of a stack ---- */

/* Leaves out t's runtime frames (unless r->runtime_frames) and what is past
 * r->max_depth, counting both; once per task. A shared stack (stackset.h)
 * is viewed once, for all its tasks (they have the same key: the same
 * view), and stays as stored: its tasks point into it. */
static void report_trim(const struct stb_report *r, struct stb_report_task *t, bool with_source)
{
	if (t->trimmed)
		return;
	t->trimmed = true;
	if (t->err < 0 || t->nframes == 0 || !t->frames) {
		t->not_shown = t->beyond;
		return;
	}
	struct stb_stackset_entry *k = t->stack;
	if (k && (t->frames != k->frames || t->nframes != k->n))
		k = NULL; /* not its stack as stored: viewed as its own */
	if (k && k->viewed) {
		t->frames = k->frames + k->first;
		t->nframes = k->shown;
		t->hidden = k->hidden;
		t->not_shown = k->not_shown;
		t->inexact = k->inexact;
		t->truncated = k->truncated;
		return;
	}
	unsigned inner = 0, outer = 0;
	if (!r->runtime_frames && r->sym) {
		stb_report_symbolize(r, t, with_source);
		stb_rtframes_find(t->frames, t->nframes, !t->truncated && !t->beyond, &inner,
				  &outer);
	}
	unsigned vis = t->nframes - inner - outer;
	unsigned shown = r->max_depth && vis > r->max_depth ? r->max_depth : vis;
	t->hidden = inner + outer;
	t->not_shown = vis - shown + t->beyond;
	if (inner) {
		if (k)
			t->frames += inner;
		else
			memmove(t->frames, t->frames + inner, shown * sizeof(*t->frames));
		t->inexact = true;
	}
	t->nframes = shown;
	if (t->not_shown)
		t->truncated = 1;
	/* A view made once the symbol deadline passed may lack names (and so
	 * runtime frames): not kept for the stack's other tasks and later
	 * snapshots, which view it again. */
	if (k && !(r->sym && r->sym_deadline && stb_now_ns() >= r->sym_deadline)) {
		k->viewed = true;
		k->first = inner;
		k->shown = t->nframes;
		k->hidden = t->hidden;
		k->not_shown = t->not_shown;
		k->inexact = t->inexact;
		k->truncated = t->truncated != 0;
	}
}

uint32_t stb_report_stack_key(const struct stb_report_task *t)
{
	uint32_t beyond = t->beyond < (1u << 28) ? t->beyond : (1u << 28) - 1;
	return beyond << 3 | (uint32_t)(t->truncated != 0) << 2 | (uint32_t)t->beyond_more << 1 |
	       (uint32_t)stb_report_task_exact(t);
}

/* The formats that print file:line (the others symbolize later, or never). */
static bool format_sources(const struct stb_report *r, int format)
{
	return format == STB_FORMAT_JSON || (format == STB_FORMAT_TEXT && r->lines);
}

/* ---- text ---- */

/* "bthread 123 "conn 7" [suspended, 5.2 s] waiting on mutex 0x... held by ..." */
static void text_header(const struct stb_why *w, const struct stb_report_task *t)
{
	FILE *out = w->r->out;
	fprintf(out, "%s %" PRIu64, t->is_pthread ? "pthread" : "bthread", t->id);
	if (t->name[0]) {
		fputs(" \"", out);
		stb_text_put(out, t->name);
		fputc('"', out);
	}
	stb_why_text_bracket(w, t);
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

/* --lines: every frame with its file:line, inline frames before the frame
 * they were inlined into. */
static void text_frames_lines(const struct stb_report *r, const struct stb_report_task *t)
{
	FILE *out = r->out;
	bool have_inline = false, exact = stb_report_task_exact(t);
	for (unsigned i = 0; i < t->nframes; i++)
		have_inline |= (t->frames[i].flags & STB_FRAME_F_INLINED) != 0;
	unsigned idx = 0;
	char line[1024];
	for (unsigned i = 0; i < t->nframes; i++) {
		const struct stb_frame *f = &t->frames[i];
		struct stb_sym_info si;
		if (!have_inline && r->sym &&
		    stb_sym_lookup(r->sym, f->ip, i > 0 || !exact ? STB_SYM_RETURN : 0, &si) == 0) {
			for (unsigned k = 0; k < si.ninline; k++) {
				char name[512];
				const char *fn = si.inlines[k].function;
				stb_text_escape(name, sizeof(name), fn ? fn : "??", fn ? strlen(fn) : 2);
				fprintf(out, "#%u 0x%016" PRIx64 " %s [inlined]", idx++, f->ip, name);
				text_source(out, si.inlines[k].file, si.inlines[k].line);
				fputc('\n', out);
			}
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
		stb_text_put(out, t->error && t->error[0] ? t->error : strerror(-t->err));
		fputs(")\n", out);
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
	if (t->not_shown)
		fprintf(out, "(%s%u more %s not shown)\n", t->beyond_more ? "over " : "",
			t->not_shown, t->not_shown == 1 ? "frame" : "frames");
	else if (t->truncated)
		fprintf(out, "(more frames not shown: the walk ended early)\n");
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
	uint64_t hidden = 0;
	for (size_t i = 0; i < n; i++)
		hidden += tasks[i].hidden;
	if (hidden && r->runtime_hint) {
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

static uint64_t task_hash(const struct stb_report_task *t)
{
	uint64_t h = 1469598103934665603ull ^ t->state ^ ((uint64_t)(t->err < 0) << 8) ^
		     ((uint64_t)t->wait.kind << 16);
	for (unsigned i = 0; i < t->nframes; i++) {
		h ^= t->frames[i].ip;
		h *= 1099511628211ull;
	}
	return h;
}

static bool task_same(const struct stb_report_task *a, const struct stb_report_task *b)
{
	if (a->hash != b->hash || a->state != b->state || a->nframes != b->nframes ||
	    (a->err < 0) != (b->err < 0) || a->wait.kind != b->wait.kind)
		return false;
	for (unsigned i = 0; i < a->nframes; i++)
		if (a->frames[i].ip != b->frames[i].ip)
			return false;
	return true;
}

static int group_cmp(const void *x, const void *y)
{
	const struct stb_report_task *a = *(struct stb_report_task *const *)x;
	const struct stb_report_task *b = *(struct stb_report_task *const *)y;
	if (a->group_count != b->group_count)
		return a->group_count > b->group_count ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

struct stb_report_task **stb_report_group(struct stb_report_task *tasks, size_t n,
					  size_t *ngroups)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	struct stb_report_task **tab = calloc(cap, sizeof(*tab));
	struct stb_report_task **leaders = calloc(n ? n : 1, sizeof(*leaders));
	size_t ng = 0;
	if (!tab || !leaders) {
		free(leaders);
		leaders = NULL;
		errno = ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		struct stb_report_task *t = &tasks[i];
		t->hash = task_hash(t);
		t->group_next = NULL;
		t->group_tail = t;
		t->group_count = 1;
		size_t k = t->hash & (cap - 1);
		while (tab[k] && !task_same(tab[k], t))
			k = (k + 1) & (cap - 1);
		if (tab[k]) {
			struct stb_report_task *lead = tab[k];
			lead->group_tail->group_next = t;
			lead->group_tail = t;
			lead->group_count++;
		} else {
			tab[k] = t;
			leaders[ng++] = t;
		}
	}
	qsort(leaders, ng, sizeof(*leaders), group_cmp);
	*ngroups = ng;
cleanup:
	free(tab);
	return leaders;
}

static int report_text(const struct stb_report *r, struct stb_report_task *tasks, size_t n)
{
	struct stb_why w;
	stb_why_init(&w, r, tasks, n);
	text_notes(r);
	if (!r->group) {
		for (size_t i = 0; i < n; i++) {
			text_header(&w, &tasks[i]);
			text_frames(r, &tasks[i]);
			stb_why_text_created(&w, &tasks[i]);
			fputc('\n', r->out);
		}
	} else {
		size_t ng;
		struct stb_report_task **leaders = stb_report_group(tasks, n, &ng);
		if (!leaders) {
			stb_why_fini(&w);
			return -ENOMEM;
		}
		for (size_t g = 0; g < ng; g++) {
			stb_why_text_group(&w, leaders[g]);
			text_frames(r, leaders[g]);
			stb_why_text_group_created(&w, leaders[g]);
			fputc('\n', r->out);
		}
		free(leaders);
	}
	stb_why_text_deadlocks(&w, text_frames);
	stb_why_fini(&w);
	text_footer(r, tasks, n);
	return ferror(r->out) ? -EIO : 0;
}

/* ---- JSON ---- */

static const char *const mode_names[] = {"none", "context", "signal", "self", "bpf", "syscall",
					 "core"};

void stb_report_meta_json(struct stb_json *j, const struct stb_report_meta *m)
{
	if (!m)
		return;
	if (m->pid)
		stb_json_kv_i64(j, "pid", m->pid);
	if (m->comm)
		stb_json_kv_string(j, "comm", m->comm);
	if (m->table) {
		stb_json_kv_u64(j, "abi_version", m->abi_version);
		stb_json_kv_u64(j, "table_capacity", m->table_capacity);
		stb_json_kv_u64(j, "untraceable", m->untraceable);
	}
	if (m->capture)
		stb_json_kv_string(j, "capture", m->capture);
	if (m->freq_hz)
		stb_json_kv_u64(j, "freq_hz", m->freq_hz);
	if (m->run) {
		stb_json_kv_bool(j, "complete", m->complete);
		if (!m->complete && m->partial)
			stb_json_kv_string(j, "partial", m->partial);
		stb_json_kv_u64(j, "not_traced", m->not_traced);
		stb_json_kv_u64(j, "failed", m->failed);
		stb_json_kv_u64(j, "finished", m->finished);
	}
	if (m->nnotes) {
		stb_json_key(j, "notes");
		stb_json_array(j);
		for (unsigned i = 0; i < m->nnotes; i++)
			stb_json_string(j, m->notes[i]);
		stb_json_end(j);
	}
	if (m->stats) {
		stb_json_key(j, "stats");
		stb_json_object(j);
		for (unsigned i = 0; i < m->nstats; i++)
			stb_json_kv_u64(j, m->stats[i].key, m->stats[i].value);
		stb_json_end(j);
	}
}

int stb_report_meta_lines(const struct stb_report_meta *m,
			  int (*add)(void *arg, const char *line), void *arg)
{
	char line[512];
	int rc = 0;
	if (!m)
		return 0;
	if (m->producer) {
		int k = snprintf(line, sizeof(line), "%s", m->producer);
		if (m->pid)
			k += snprintf(line + k, sizeof(line) - (size_t)k, " of pid %d", m->pid);
		if (m->comm) {
			char comm[128];
			stb_text_escape(comm, sizeof(comm), m->comm, strlen(m->comm));
			snprintf(line + k, sizeof(line) - (size_t)k, " (%s)", comm);
		}
		if (m->capture) {
			size_t len = strlen(line);
			snprintf(line + len, sizeof(line) - len, ": %s", m->capture);
		}
		rc = add(arg, line);
	}
	for (unsigned i = 0; rc == 0 && i < m->nnotes; i++)
		rc = add(arg, m->notes[i]);
	if (rc == 0 && m->run && !m->complete) {
		snprintf(line, sizeof(line), "%s: partial", m->partial ? m->partial : "incomplete");
		rc = add(arg, line);
	}
	return rc;
}

/* The value of "frames": t's frames, symbolized. */
static void json_frames(const struct stb_report *r, struct stb_json *j, struct stb_report_task *t)
{
	stb_report_symbolize(r, t, true);
	stb_json_array(j);
	for (unsigned i = 0; i < t->nframes; i++) {
		const struct stb_frame *f = &t->frames[i];
		stb_json_object(j);
		stb_json_kv_hex(j, "ip", f->ip);
		if (f->symbol) {
			stb_json_kv_string(j, "function", f->symbol);
			stb_json_kv_u64(j, "offset", f->offset);
		}
		if (f->module) {
			stb_json_kv_string(j, "module", f->module);
			stb_json_kv_hex(j, "module_offset", f->module_offset);
		}
		if (f->build_id)
			stb_json_kv_string(j, "build_id", f->build_id);
		if (f->file) {
			stb_json_kv_string(j, "file", f->file);
			stb_json_kv_i64(j, "line", f->line);
		}
		if (f->flags & STB_FRAME_F_MISMATCH)
			stb_json_kv_bool(j, "module_mismatch", true);
		stb_json_kv_bool(j, "inlined", (f->flags & STB_FRAME_F_INLINED) != 0);
		stb_json_kv_string(j, "source", (f->flags & STB_FRAME_F_FP) ? "fp" : "dwarf");
		stb_json_end(j);
	}
	stb_json_end(j);
}

/* The frames of a stack that tasks share, written once by the same writer
 * (kept in the stackset, within its budget) and spliced for each. false:
 * not kept; write them. */
static bool json_frames_shared(const struct stb_report *r, struct stb_json *j,
			       struct stb_report_task *t)
{
	struct stb_stackset_entry *k = t->stack;
	if (!k || !r->stacks || k->refs < 2 || !k->viewed || t->frames != k->frames + k->first)
		return false;
	if (k->json && k->json_depth != j->depth)
		return false;
	if (!k->json) {
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);
		if (!f)
			return false;
		struct stb_json v;
		stb_json_init_value(&v, f, j);
		json_frames(r, &v, t);
		int rc = stb_json_value_finish(&v);
		if (fclose(f) != 0 || rc != 0 || !stb_stackset_json_room(r->stacks, len)) {
			free(text);
			return false;
		}
		k->json = text;
		k->json_len = len;
		k->json_depth = j->depth;
	}
	stb_json_splice(j, k->json, k->json_len);
	return true;
}

/* The members of a task object up to (not including) "truncated". */
static void json_task_head(const struct stb_why *w, struct stb_json *j,
			   struct stb_report_task *t)
{
	stb_json_kv_u64(j, "id", t->id);
	stb_json_kv_string(j, "kind", t->is_pthread ? "pthread" : "bthread");
	stb_json_kv_string(j, "name", t->name);
	stb_json_kv_string(j, "state", stb_state_name(t->state));
	stb_json_kv_string(j, "capture", t->mode < sizeof(mode_names) / sizeof(mode_names[0])
						 ? mode_names[t->mode] : "none");
	if (t->tid)
		stb_json_kv_u64(j, "tid", t->tid);
	stb_why_json_task(w, j, t);
	if (t->err < 0)
		stb_json_kv_string(j, "error", t->error && t->error[0] ? t->error : strerror(-t->err));
}

/* The members describing the stack shown: of a task, or once for a group
 * (its first member's, as the text shows). */
static void json_stack(const struct stb_report *r, struct stb_json *j, struct stb_report_task *t)
{
	if (t->hidden)
		stb_json_kv_u64(j, "runtime_frames_hidden", t->hidden);
	if (t->not_shown)
		stb_json_kv_u64(j, "frames_not_shown", t->not_shown);
	stb_json_kv_bool(j, "truncated", t->truncated != 0);
	stb_json_key(j, "frames");
	if (!json_frames_shared(r, j, t))
		json_frames(r, j, t);
}

/* Grouped, a task carries no frames but the index of its group, and the
 * group its members' ids and the stack, once. */
static int report_json(const struct stb_report *r, struct stb_report_task *tasks, size_t n)
{
	struct stb_json j;
	struct stb_why w;
	size_t ng = 0;
	struct stb_report_task **leaders = NULL;
	uint32_t *group_of = NULL;
	if (r->group) {
		leaders = stb_report_group(tasks, n, &ng);
		group_of = malloc((n ? n : 1) * sizeof(*group_of));
		if (!leaders || !group_of) {
			free(leaders);
			free(group_of);
			return -ENOMEM;
		}
		for (size_t g = 0; g < ng; g++)
			for (struct stb_report_task *m = leaders[g]; m; m = m->group_next)
				group_of[m - tasks] = (uint32_t)g;
	}
	stb_why_init(&w, r, tasks, n);
	stb_json_init(&j, r->out);
	stb_json_object(&j);
	stb_json_kv_string(&j, "schema", "stb-stacks/1");
	stb_report_meta_json(&j, r->meta);
	stb_json_key(&j, "tasks");
	stb_json_array(&j);
	for (size_t i = 0; i < n; i++) {
		stb_json_object(&j);
		json_task_head(&w, &j, &tasks[i]);
		if (r->group)
			stb_json_kv_u64(&j, "group", group_of[i]);
		else
			json_stack(r, &j, &tasks[i]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	if (r->group) {
		stb_json_key(&j, "groups");
		stb_json_array(&j);
		for (size_t g = 0; g < ng; g++) {
			struct stb_report_task *t = leaders[g];
			stb_json_object(&j);
			stb_json_kv_u64(&j, "count", t->group_count);
			stb_json_kv_string(&j, "state", stb_state_name(t->state));
			stb_why_json_group(&w, &j, t);
			stb_json_key(&j, "ids");
			stb_json_array(&j);
			for (struct stb_report_task *m = t; m; m = m->group_next)
				stb_json_u64(&j, m->id);
			stb_json_end(&j);
			json_stack(r, &j, t);
			stb_json_end(&j);
		}
		stb_json_end(&j);
	}
	stb_why_json_deadlocks(&w, &j);
	stb_json_end(&j);
	stb_why_fini(&w);
	free(leaders);
	free(group_of);
	return stb_json_finish(&j);
}

int stb_report_write(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     int format)
{
	if (!r || !r->out || (n && !tasks) || !stb_format_name(format))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		report_trim(r, &tasks[i], format_sources(r, format));
	switch (format) {
	case STB_FORMAT_TEXT:
		return report_text(r, tasks, n);
	case STB_FORMAT_JSON:
		return report_json(r, tasks, n);
	case STB_FORMAT_PPROF:
	case STB_FORMAT_FOLDED:
		return stb_report_pprof(r, tasks, n, format);
	case STB_FORMAT_FLAMEGRAPH:
		return stb_report_pprof(r, tasks, n, format);
	default:
		return -EINVAL;
	}
}

/* ---- task lists (no stacks) ---- */

int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json)
{
	/* The writers only read the tasks here (no frames to symbolize). */
	struct stb_report_task *ts = (struct stb_report_task *)tasks;
	struct stb_why w;
	stb_why_init(&w, r, ts, n);
	if (!json) {
		for (size_t i = 0; i < n; i++)
			text_header(&w, &ts[i]);
		stb_why_fini(&w);
		return ferror(r->out) ? -EIO : 0;
	}
	struct stb_json j;
	stb_json_init(&j, r->out);
	stb_json_object(&j);
	stb_json_kv_string(&j, "schema", "stb-tasks/1");
	stb_report_meta_json(&j, r->meta);
	stb_json_key(&j, "tasks");
	stb_json_array(&j);
	for (size_t i = 0; i < n; i++) {
		stb_json_object(&j);
		json_task_head(&w, &j, &ts[i]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	stb_json_end(&j);
	stb_why_fini(&w);
	return stb_json_finish(&j);
}
