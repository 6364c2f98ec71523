/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime's own frames of a stack (rtframes.h): names of the runtime's
 * functions and of its public API, nothing else.
 */
#include <string.h>

#include "report/rtframes.h"

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

/*
 * The public functions named stb_* (include/), where a task can be parked too:
 * bthread::CountdownEvent, header-only, waits in stb_countdown_wait. Exactly
 * the STB_EXPORT stb_* declarations there (tests/check_rtframes.sh checks).
 */
static const char *const public_stb[] = {
	"stb_countdown_wait",
	"stb_debug_http_start",
	"stb_debug_http_stop",
	"stb_dump",
	"stb_execq_address",
	"stb_execq_cancel",
	"stb_execq_iter_next",
	"stb_execq_join",
	"stb_execq_node_alloc",
	"stb_execq_node_free",
	"stb_execq_push",
	"stb_execq_release",
	"stb_execq_start",
	"stb_execq_stop",
	"stb_execq_stopped",
	"stb_format_from_name",
	"stb_format_name",
	"stb_get_stats",
	"stb_id_create2",
	"stb_id_error2",
	"stb_id_list_reset2",
	"stb_id_list_reset2_bthreadsafe",
	"stb_id_list_reset2_pthreadsafe",
	"stb_id_status",
	"stb_id_value",
	"stb_set_signal_trace_timeout_ms",
	"stb_set_trace_runtime_frames",
	"stb_set_trace_signal",
	"stb_state_name",
	"stb_table_set_capacity",
	"stb_trace",
	"stb_watchdog_start",
	"stb_watchdog_stop",
};

static bool is_api(const char *name)
{
	if (has_prefix(name, "bthread_") || has_prefix(name, "butex_") ||
	    has_prefix(name, "bthread::"))
		return true;
	if (!has_prefix(name, "stb_"))
		return false;
	for (size_t i = 0; i < sizeof(public_stb) / sizeof(public_stb[0]); i++)
		if (is_fn(name, public_stb[i]))
			return true;
	return false;
}

/* A frame of the C library, its dynamic loader or the vdso: where the
 * runtime's internals make their system calls (sched_yield at a gate, a
 * futex wait, clock_gettime). No program code is in those modules. */
static bool is_libc(const struct stb_frame *f)
{
	if (!f->module)
		return false;
	const char *base = strrchr(f->module, '/');
	base = base ? base + 1 : f->module;
	return has_prefix(base, "libc.so") || has_prefix(base, "libc-") ||
	       has_prefix(base, "ld-linux") || has_prefix(base, "libpthread") ||
	       strcmp(base, "[vdso]") == 0;
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
	/* Frame 0 may be inlined (jump_stack_inline into stb_jump_stack), or
	 * the C library's (sched_yield called at a gate): the runtime's function
	 * they are part of, or that called them, decides. */
	unsigned p0 = 0;
	while (p0 + 1 < n && p0 < STB_RTFRAMES_INNER_MAX &&
	       ((f[p0].flags & STB_FRAME_F_INLINED) || is_libc(&f[p0])))
		p0++;
	if (has_prefix(f[p0].symbol, "stb_")) {
		unsigned lim = n < STB_RTFRAMES_INNER_MAX ? n : STB_RTFRAMES_INNER_MAX;
		for (unsigned i = 1; i < lim; i++) {
			if (!f[i].symbol || !same_module(&f[i], &f[p0]))
				break;
			if (is_api(f[i].symbol)) {
				*inner = i;
				break;
			}
		}
		/* The call the user made is the outermost of the public functions
		 * calling each other there (bthread_sem_wait calls
		 * bthread_sem_timedwait, bthread_id_lock_verbose calls
		 * bthread_id_lock_and_reset_range_verbose): those it called are
		 * hidden too. A C++ wrapper of the headers (bthread::Mutex::lock)
		 * is compiled into its caller's module. */
		for (unsigned i = *inner + 1; *inner && i < n; i++) {
			if (!f[i].symbol || !is_api(f[i].symbol) ||
			    (!same_module(&f[i], &f[0]) && !has_prefix(f[i].symbol, "bthread::")))
				break;
			*inner = i;
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

bool stb_rtframes_inlines_hidden(const char *symbol)
{
	return is_api(symbol) || has_prefix(symbol, "stb_");
}
