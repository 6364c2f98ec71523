/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of formats (formats.h) and the dispatch of stb_report_write and
 * stb_report_list to the writer of each (writers.h).
 */
#include <errno.h>
#include <string.h>

#include "report/flamegraph.h"
#include "report/formats.h"
#include "report/model.h"
#include "report/pprof.h"
#include "report/writers.h"

/* The writers of a profile builder in each format. */
static int profile_pprof(struct stb_pprof *p, FILE *out, const struct stb_profile_out *o)
{
	(void)o;
	return stb_pprof_write(p, out);
}

static int profile_folded(struct stb_pprof *p, FILE *out, const struct stb_profile_out *o)
{
	return stb_pprof_write_folded(p, out, o->root_key, o->value);
}

static int profile_flamegraph(struct stb_pprof *p, FILE *out, const struct stb_profile_out *o)
{
	const struct stb_flamegraph_opts fo = {
	    .title = o->title, .unit = o->unit, .root_key = o->root_key, .value = o->value,
	    .meta = o->meta,
	};
	return stb_flamegraph_write(p, out, &fo);
}

static int profile_json(struct stb_pprof *p, FILE *out, const struct stb_profile_out *o)
{
	return stb_pprof_write_json(p, out, o->meta);
}

#define TEXT_MIME "text/plain; charset=utf-8"
#define HTML_MIME "text/html; charset=utf-8"

/* Every format, in the order messages list them. */
static const struct stb_format_info formats[] = {
    {.format = STB_FORMAT_TEXT, .name = "text", .ext = "txt", .mime = TEXT_MIME,
     .lists = true, .lines = STB_FORMAT_LINES_ASKED, .write = stb_report_text,
     .write_leaks = stb_report_text_leaks},
    {.format = STB_FORMAT_JSON, .name = "json", .ext = "json", .mime = "application/json",
     .lists = true, .lines = STB_FORMAT_LINES_ALWAYS, .write = stb_report_json,
     .write_profile = profile_json, .write_leaks = stb_report_json_leaks},
    {.format = STB_FORMAT_PPROF, .name = "pprof", .ext = "pb.gz", .suffixes = ".pb.gz .pprof",
     .mime = "application/octet-stream", .binary = true, .write = stb_report_pprof,
     .write_profile = profile_pprof},
    {.format = STB_FORMAT_FOLDED, .name = "folded", .ext = "folded", .mime = TEXT_MIME,
     .write = stb_report_pprof, .write_profile = profile_folded},
    {.format = STB_FORMAT_FLAMEGRAPH, .name = "flamegraph", .ext = "html",
     .suffixes = ".html .htm", .mime = HTML_MIME, .write = stb_report_pprof,
     .write_profile = profile_flamegraph},
    /* The debug endpoint's page (?format=html, Accept: text/html): its text
     * report or task list wrapped as HTML (runtime/tracer/debug_html.c). */
    {.format = STB_FORMAT_HTML_PAGE, .name = "html", .ext = "html", .mime = HTML_MIME,
     .lists = true, .lines = STB_FORMAT_LINES_ASKED},
};
#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

const struct stb_format_info *stb_format_get(int format)
{
	for (size_t i = 0; i < NFORMATS; i++)
		if (formats[i].format == format)
			return &formats[i];
	return NULL;
}

const struct stb_format_info *stb_format_named(const char *name, bool pages)
{
	for (size_t i = 0; name && i < NFORMATS; i++)
		if ((pages || formats[i].format >= 0) && strcmp(name, formats[i].name) == 0)
			return &formats[i];
	return NULL;
}

const struct stb_format_info *stb_format_for_path(const char *path)
{
	size_t n = path ? strlen(path) : 0;
	for (size_t i = 0; i < NFORMATS; i++) {
		for (const char *s = formats[i].suffixes; s && *s;) {
			size_t k = strcspn(s, " ");
			if (n >= k && memcmp(path + n - k, s, k) == 0)
				return &formats[i];
			s += k + (s[k] == ' ');
		}
	}
	return NULL;
}

/* Is f one of which? */
static bool in_list(const struct stb_format_info *f, unsigned which)
{
	if (f->format < 0 && !(which & STB_FORMATS_PAGES))
		return false;
	return !(which & STB_FORMATS_PROFILE) || f->write_profile;
}

size_t stb_format_list(char *buf, size_t len, unsigned which)
{
	size_t total = 0, k = 0;
	for (size_t i = 0; i < NFORMATS; i++)
		total += in_list(&formats[i], which);
	size_t at = 0;
	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < NFORMATS; i++) {
		if (!in_list(&formats[i], which))
			continue;
		const char *sep = k == 0 ? "" : k + 1 == total ? " or " : ", ";
		int w = snprintf(buf + (at < len ? at : len), at < len ? len - at : 0, "%s%s", sep,
				 formats[i].name);
		at += w > 0 ? (size_t)w : 0;
		k++;
	}
	return at;
}

const char *stb_format_name(int format)
{
	const struct stb_format_info *f = format >= 0 ? stb_format_get(format) : NULL;
	return f ? f->name : NULL;
}

int stb_format_from_name(const char *name)
{
	const struct stb_format_info *f = stb_format_named(name, false);
	return f ? f->format : -EINVAL;
}

int stb_report_write(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     int format)
{
	const struct stb_format_info *f = format >= 0 ? stb_format_get(format) : NULL;
	if (!r || !r->out || (n && !tasks) || !f || !f->write)
		return -EINVAL;
	/* The formats that print file:line (the others symbolize later, or never). */
	bool sources = f->lines == STB_FORMAT_LINES_ALWAYS ||
		       (f->lines == STB_FORMAT_LINES_ASKED && r->lines);
	for (size_t i = 0; i < n; i++)
		stb_report_view(r, &tasks[i], sources);
	return f->write(r, tasks, n, f);
}

int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json)
{
	if (!r || !r->out || (n && !tasks))
		return -EINVAL;
	/* The writers only read the tasks here (no frames to symbolize). */
	struct stb_report_task *ts = (struct stb_report_task *)tasks;
	return json ? stb_report_json_list(r, ts, n) : stb_report_text_list(r, ts, n);
}

int stb_report_leaks(const struct stb_report *r, const struct stb_leaks *l, int format)
{
	const struct stb_format_info *f = format >= 0 ? stb_format_get(format) : NULL;
	if (!r || !r->out || !l || !f || !f->write_leaks)
		return -EINVAL;
	return f->write_leaks(r, l);
}
