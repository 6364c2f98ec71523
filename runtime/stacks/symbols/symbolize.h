/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Symbolization of code addresses of this process (pid 0) or another one:
 * function + offset, module + build id, source file:line and inline frames,
 * with libdwfl (elfutils) behind one mutex and a per-address result cache.
 * Files the target maps are never mapped here (they are read, or copied).
 * Shared by the in-process tracer and stb-bpf-loader.
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_SYMBOLIZE_H
#define STB_RUNTIME_STACKS_SYMBOLS_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct stb_sym;

/* A symbolizer for pid (0 = this process) with a registry of its own;
 * reports the modules now. Returns
 * NULL and sets errno on failure (ESRCH: no such process, ENOMEM). May block
 * on file I/O. */
struct stb_sym *stb_sym_new(pid_t pid);

struct stb_mods;

/* A symbolizer on an existing module registry (takes a reference of its
 * own), e.g. stb_unw_proc_mods() of the unwinder of the same target: one
 * scan of the target's mappings for both. Returns NULL and sets errno
 * (EINVAL, ENOMEM). May block on file I/O. */
struct stb_sym *stb_sym_new_mods(struct stb_mods *mods);

/* Releases s and every string it returned; accepts NULL. No lookup may be
 * running on s. */
void stb_sym_free(struct stb_sym *s);

/* One logical frame inlined at an address. */
struct stb_sym_inline {
	const char *function; /* the inlined function (demangled), NULL if unknown */
	const char *file;     /* position inside that function, NULL/0 if unknown */
	int line;
};

struct stb_sym_info {
	const char *function;   /* symbol holding ip, demangled where possible; NULL if unknown */
	uint64_t offset;        /* ip - start of that symbol */
	const char *module;     /* path of the mapped file, "[vdso]"; NULL if unknown */
	uint64_t module_offset; /* ip - load bias = the ELF virtual address (addr2line, pprof) */
	const char *build_id;   /* lowercase hex, NULL if none */
	unsigned module_flags;  /* STB_UNW_MOD_* of the module (MOD_CHANGED: no symbols from it) */
	/* Source position inside `function` (for inlined code: the call site of
	 * the outermost inlined call); NULL/0 without debug info. */
	const char *file;
	int line;
	/* Inlined calls at ip, innermost first; the logical call stack at ip is
	 * inlines[0], ..., inlines[ninline - 1], then function at file:line. */
	unsigned ninline;
	const struct stb_sym_inline *inlines;
};

/* stb_sym_lookup flags. */
#define STB_SYM_RETURN 0x1    /* ip is a return address: look up ip - 1 */
#define STB_SYM_NO_SOURCE 0x2 /* skip file:line and inline frames (no DWARF read) */

/*
 * Symbolizes ip. flags: STB_SYM_RETURN and STB_SYM_NO_SOURCE (any other
 * non-zero value in bit 0 means STB_SYM_RETURN). With STB_SYM_RETURN, ip
 * comes from a caller's frame and
 * the lookup uses ip - 1 (the call instruction), while offset and
 * module_offset still describe ip itself. Results are cached per (ip, flag);
 * strings are owned by s and stay valid until stb_sym_free. An ip in no known
 * module makes s re-read the module list (at most once a second).
 * Thread-safe (one internal mutex); may block on file I/O when a module is
 * first used. Returns 0; -ENOENT when no function is known (module, build_id
 * and module_offset may still be set); -EINVAL on bad arguments.
 */
int stb_sym_lookup(struct stb_sym *s, uint64_t ip, int flags, struct stb_sym_info *out);

struct stb_frame;

/*
 * stb_sym_lookup of f->ip, then f's symbol, offset, module, module_offset,
 * build_id, file and line from the result (strings owned by s). Returns true
 * when anything was known (a function or at least the module); f is left
 * alone otherwise. *si gets the whole result (inline frames). s may be NULL
 * (returns false). Thread-safety and blocking as stb_sym_lookup.
 */
bool stb_sym_fill_frame(struct stb_sym *s, int flags, struct stb_frame *f,
			struct stb_sym_info *si);

/* What a string a stb_sym hands out knows of itself, just before its bytes:
 * computed from them once, when the symbolizer first met the string. */
struct stb_sym_str {
	size_t len;
	bool plain; /* stb_text_plain of its bytes: no escape needed in text */
	char bytes[];
};

/*
 * The length of str, a string a stb_sym handed out (any string of a
 * stb_sym_info, or of a frame stb_sym_fill_frame filled), and in *plain
 * whether it needs no escape in text output. O(1), no lock; str must come
 * from a stb_sym not yet freed (any other pointer is undefined behaviour).
 */
static inline size_t stb_sym_str_len(const char *str, bool *plain)
{
	const struct stb_sym_str *h =
		(const struct stb_sym_str *)(const void *)(str - offsetof(struct stb_sym_str, bytes));
	*plain = h->plain;
	return h->len;
}

/* Re-reads the target's module list (dlopen/dlclose in the target) and drops
 * cached results (strings already returned stay valid). Returns 0 or -errno. */
int stb_sym_refresh(struct stb_sym *s);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_SYMBOLIZE_H */
