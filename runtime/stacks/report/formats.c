/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The formats of a report (formats.h): their names and the dispatch of
 * stb_report_write and stb_report_list to the writer of each (writers.h).
 */
#include <errno.h>
#include <string.h>

#include "report/formats.h"
#include "report/model.h"
#include "report/writers.h"

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


/* The formats that print file:line (the others symbolize later, or never). */
static bool format_sources(const struct stb_report *r, int format)
{
	return format == STB_FORMAT_JSON || (format == STB_FORMAT_TEXT && r->lines);
}

int stb_report_write(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     int format)
{
	if (!r || !r->out || (n && !tasks) || !stb_format_name(format))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		stb_report_view(r, &tasks[i], format_sources(r, format));
	switch (format) {
	case STB_FORMAT_TEXT:
		return stb_report_text(r, tasks, n);
	case STB_FORMAT_JSON:
		return stb_report_json(r, tasks, n);
	case STB_FORMAT_PPROF:
	case STB_FORMAT_FOLDED:
		return stb_report_pprof(r, tasks, n, format);
	case STB_FORMAT_FLAMEGRAPH:
		return stb_report_pprof(r, tasks, n, format);
	default:
		return -EINVAL;
	}
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
