/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The debug endpoint's HTML (debug_html.h): markup around text that is
 * escaped by the one HTML escape (runtime/stacks/encode/escape.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "debug_html.h"
#include "encode/escape.h"

static const char dh_style[] =
	"body{font:14px sans-serif;margin:12px}pre{font:13px monospace}"
	"nav a{margin-right:1em}a.id{text-decoration:none}";

static void head(FILE *out, const char *title)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
	      out);
	stb_html_put(out, title, strlen(title));
	fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n"
		     "<nav><a href=\"/\">index</a><a href=\"/bthreads\">bthreads</a>"
		     "<a href=\"/bthreads/all\">all stacks</a>"
		     "<a href=\"/bthreads/all?format=flamegraph\">flame graph</a>"
		     "<a href=\"/bthreads/leaks\">leaks</a></nav>\n<h1>",
		dh_style);
	stb_html_put(out, title, strlen(title));
	fputs("</h1>\n", out);
}

/* The decimal number at s[0 .. n) when it is a bthread id (>= 2^32). */
static bool is_id(const char *s, size_t n, uint64_t *id)
{
	if (n < 10 || n > 20)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*id = v;
	return v >> 32 != 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* One line (without its newline). */
static void put_line(FILE *out, const char *s, size_t n)
{
	bool frame = n >= 2 && s[0] == '#' && is_digit(s[1]);
	bool quoted = false;
	size_t i = 0, plain = 0;
	while (!frame && i < n) {
		char c = s[i];
		if (c == '\\' && quoted) {
			i += i + 1 < n ? 2 : 1; /* an escaped byte inside a name */
			continue;
		}
		if (c == '"')
			quoted = !quoted;
		bool start = !quoted && is_digit(c) && (i == 0 || !is_digit(s[i - 1])) &&
			     (i == 0 || s[i - 1] == ' ' || s[i - 1] == ':' || s[i - 1] == ',');
		if (!start) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && is_digit(s[j]))
			j++;
		uint64_t id;
		if ((j == n || s[j] == ' ' || s[j] == ',' || s[j] == ')' || s[j] == ']') &&
		    is_id(s + i, j - i, &id)) {
			stb_html_put(out, s + plain, i - plain);
			fprintf(out, "<a class=\"id\" href=\"/bthreads/%" PRIu64 "?st=1\">%" PRIu64
				     "</a>", id, id);
			plain = j;
		}
		i = j;
	}
	stb_html_put(out, s + plain, n - plain);
}

int stb_dh_html_page(FILE *out, const char *title, const char *text, size_t len)
{
	head(out, title);
	fputs("<pre>", out);
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		put_line(out, text + i, n);
		if (nl)
			fputc('\n', out);
		i += n + (nl ? 1 : 0);
	}
	fputs("</pre>\n</body>\n</html>\n", out);
	return ferror(out) ? -EIO : 0;
}

int stb_dh_html_index(FILE *out)
{
	head(out, "stb debug endpoint");
	fputs("<ul>\n"
	      "<li><a href=\"/bthreads\">/bthreads</a>: live bthreads, with links to each "
	      "one's stack (<a href=\"/bthreads?format=json\">json</a>)</li>\n"
	      "<li><a href=\"/bthreads/all\">/bthreads/all</a>: every stack, grouped by "
	      "identical stack (<a href=\"/bthreads/all?format=json\">json</a>, "
	      "<a href=\"/bthreads/all?format=pprof\">pprof</a>, "
	      "<a href=\"/bthreads/all?format=folded\">folded</a>, "
	      "<a href=\"/bthreads/all?format=flamegraph\">flame graph</a>, "
	      "<a href=\"/bthreads/all?runtime_frames=1\">with the runtime's frames</a>, "
	      "<a href=\"/bthreads/all?lines=0\">without file:line</a>)</li>\n"
	      "<li><a href=\"/bthreads/leaks\">/bthreads/leaks</a>: bthreads by creation site, "
	      "with their count, oldest and median age and states "
	      "(<a href=\"/bthreads/leaks?format=json\">json</a>)</li>\n"
	      "</ul>\n"
	      "<p>go tool pprof http://HOST:PORT/bthreads/all?format=pprof</p>\n"
	      "</body>\n</html>\n",
	      out);
	return ferror(out) ? -EIO : 0;
}
