/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime's own frames of a stack (rtframes.h): names of the runtime's
 * functions and of its public API, nothing else.
 */
#include <string.h>

#include "rtframes.h"

static bool has_prefix(const char *s, const char *prefix)
{
	return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* name is want, or want with a compiler suffix (".constprop.0", ".isra.0"). */
static bool is_fn(const char *name, const char *want)
{
	size_t n = strlen(want);
	return name && strncmp(name, want, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

static bool is_api(const char *name)
{
	return has_prefix(name, "bthread_") || has_prefix(name, "butex_") ||
	       has_prefix(name, "bthread::");
}

static bool same_module(const struct stb_frame *a, const struct stb_frame *b)
{
	if (!a->module || !b->module)
		return a->module == b->module;
	return a->module == b->module || strcmp(a->module, b->module) == 0;
}

void stb_rtframes_find(const struct stb_frame *f, unsigned n, bool complete, unsigned *inner,
		       unsigned *outer)
{
	*inner = 0;
	*outer = 0;
	if (n == 0)
		return;
	if (has_prefix(f[0].symbol, "stb_")) {
		unsigned lim = n < STB_RTFRAMES_INNER_MAX ? n : STB_RTFRAMES_INNER_MAX;
		for (unsigned i = 1; i < lim; i++) {
			if (!f[i].symbol || !same_module(&f[i], &f[0]))
				break;
			if (is_api(f[i].symbol)) {
				*inner = i;
				break;
			}
		}
	}
	if (complete) {
		while (*outer < n - *inner) {
			const char *s = f[n - 1 - *outer].symbol;
			if (!is_fn(s, "stb_ctx_trampoline") && !is_fn(s, "stb_task_entry"))
				break;
			(*outer)++;
		}
	}
	if (*inner + *outer >= n)
		*outer = n - *inner - 1; /* inner < n: one frame stays */
}
