/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A module's symbols sorted by address, for address-to-symbol lookups in
 * O(log n): libdwfl's dwfl_module_addrinfo reads the whole symbol table for
 * every address. The index answers only where its answer is libdwfl's (see
 * stb_symidx_find); the caller asks libdwfl for the rest.
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_SYMINDEX_H
#define STB_RUNTIME_STACKS_SYMBOLS_SYMINDEX_H

#include <stddef.h>
#include <stdint.h>

#include <elfutils/libdwfl.h>

/* Symbols an index takes at most; a module with more is left to libdwfl. */
#define STB_SYMIDX_MAX_SYMS (1u << 20)

/* stb_symidx_sym.bind: the ELF binding reduced to what the choice needs. */
enum stb_symidx_bind {
	STB_SYMIDX_LOCAL = 0,
	STB_SYMIDX_WEAK = 1,
	STB_SYMIDX_UNIQUE = 2,
	STB_SYMIDX_GLOBAL = 3,
};

/* One symbol, as libdwfl's symbol table lists it (the caller filters out
 * what libdwfl never returns: no name, undefined, section, file, TLS). */
struct stb_symidx_sym {
	uint64_t addr;    /* its address in the target (st_value adjusted) */
	uint64_t size;    /* st_size; 0: a label without size */
	const char *name; /* kept by the caller for the index's lifetime */
	uint32_t order;   /* its index in the symbol table */
	uint32_t shndx;   /* its section index (>= 0xff00: absolute and other specials) */
	uint8_t bind;     /* enum stb_symidx_bind */
};

struct stb_symidx;

/* Where an index gets its memory: never freed one by one (an arena). */
typedef void *(*stb_symidx_alloc_fn)(void *ctx, size_t size);

/*
 * Builds the index of n symbols (copied; names are not). Returns NULL with
 * errno ENOMEM when alloc fails and E2BIG when n > STB_SYMIDX_MAX_SYMS.
 * Sizes whose end would wrap past 2^64 are cut at 2^64 - 1. Pure
 * computation: thread-safe, never blocks.
 */
struct stb_symidx *stb_symidx_new(const struct stb_symidx_sym *syms, size_t n,
				  stb_symidx_alloc_fn alloc, void *ctx);

/*
 * The index of mod's symbol table as libdwfl lists it (dwfl_module_getsymtab,
 * dwfl_module_getsym_info: what its lookup can return), names pointing into
 * libdwfl's copy: valid while mod is. Reads the table once, as one libdwfl
 * lookup does. NULL with errno ENOENT (no symbols), E2BIG (more than
 * STB_SYMIDX_MAX_SYMS) or ENOMEM. Not thread-safe for one Dwfl session (libdwfl
 * is not); may block on reading the module's file.
 */
struct stb_symidx *stb_symidx_build(Dwfl_Module *mod, stb_symidx_alloc_fn alloc, void *ctx);

/*
 * The symbol that libdwfl's address lookup returns for addr, with *off =
 * addr - its address: among the sized symbols containing addr, the one that
 * starts highest; at one address global before unique before weak before
 * local, then the smaller, then the first in the table. NULL when the index
 * cannot tell -- no sized symbol contains addr (libdwfl may still return a
 * label), or the choice is a local symbol while a non-local one contains
 * addr or a non-local label in its section lies at or below addr (libdwfl
 * looks at non-local symbols first) -- and the caller asks libdwfl. Read
 * only: thread-safe on a built index, never blocks.
 */
const char *stb_symidx_find(const struct stb_symidx *x, uint64_t addr, uint64_t *off);

/* Symbols indexed (sized ones). */
size_t stb_symidx_count(const struct stb_symidx *x);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_SYMINDEX_H */
