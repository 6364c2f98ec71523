/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTML pages of the debug HTTP endpoint, for browsers: the text pages
 * escaped inside <pre>, with every bthread id linked to its own page, and
 * the index as links. Only markup: the text comes from the report writers.
 */
#ifndef STB_RUNTIME_TRACER_DEBUG_HTML_H
#define STB_RUNTIME_TRACER_DEBUG_HTML_H

#include <stddef.h>
#include <stdio.h>

/*
 * Writes a page titled title (escaped) holding text[0 .. len) (a text page
 * of the endpoint) to out: escaped, in <pre>; in lines that are not frames
 * ("#N 0x..."), decimal numbers of 2^32 and up outside double quotes --
 * bthread ids -- link to /bthreads/<id>?st=1. Returns 0 or -EIO.
 */
int stb_dh_html_page(FILE *out, const char *title, const char *text, size_t len);

/* Writes the index page (links to the pages, in every format). 0 or -EIO. */
int stb_dh_html_index(FILE *out);

#endif /* STB_RUNTIME_TRACER_DEBUG_HTML_H */
