/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A module's compile units by the address ranges their own DIEs state
 * (DW_AT_low_pc/high_pc, DW_AT_ranges, DWARF 2 to 5 forms through libdw):
 * libdw before 0.191 finds a unit for an address only through
 * .debug_aranges, which clang does not emit by default and which a module
 * linked from mixed objects covers only in part.
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_CUINDEX_H
#define STB_RUNTIME_STACKS_SYMBOLS_CUINDEX_H

#include <stddef.h>
#include <stdint.h>

#include <elfutils/libdw.h>
#include <libelf.h>

/* Units an index reads at most (the rest of a larger module is not found). */
#define STB_CUIDX_MAX_UNITS (1u << 18)
/* Ranges taken of one unit, and of a whole module (an index of the most
 * takes 32 MiB, within the symbolizer's budget for its indexes). */
#define STB_CUIDX_MAX_UNIT_RANGES (1u << 16)
#define STB_CUIDX_MAX_RANGES (1u << 20)

/* An address range of code, [lo, hi), in DWARF addresses. */
struct stb_cuidx_span {
	uint64_t lo, hi;
};

/* Spans stb_cuidx_text gives at most. */
#define STB_CUIDX_MAX_TEXT 16u

/*
 * The executable segments (PT_LOAD with PF_X) of elf, shifted by shift (what
 * turns the file's addresses into those of its DWARF), into out[0..
 * STB_CUIDX_MAX_TEXT): where a module's code can be. Returns how many (0:
 * none, or no program headers). Reads elf's headers: not thread-safe for
 * one Elf.
 */
size_t stb_cuidx_text(Elf *elf, uint64_t shift, struct stb_cuidx_span *out);

struct stb_cuidx;

/* Where an index gets its memory: never freed one by one (an arena). */
typedef void *(*stb_cuidx_alloc_fn)(void *ctx, size_t size);

/*
 * Reads the units of dw (compile, partial and skeleton units; not type
 * units, never a split unit's separate file) and indexes every range that
 * lies inside one of the ntext spans of code (the module's executable
 * segments: ranges a linker left at 0 for discarded functions drop out).
 * Reads within the limits above; a module beyond them is indexed in part.
 * Temporary memory comes from malloc, the index from alloc. Returns NULL
 * with errno ENOENT (no unit has a range of code) or ENOMEM. Not
 * thread-safe for one Dwarf (libdw is not); may block on reading the file.
 */
struct stb_cuidx *stb_cuidx_build(Dwarf *dw, const struct stb_cuidx_span *text, size_t ntext,
				  stb_cuidx_alloc_fn alloc, void *ctx);

/*
 * The unit whose ranges contain addr (a DWARF address: module address minus
 * the DWARF bias) into *cu: of several, the range that starts highest (the
 * innermost). Returns 0 or -ENOENT. Read only: thread-safe on a built
 * index, never blocks.
 */
int stb_cuidx_find(const struct stb_cuidx *x, uint64_t addr, Dwarf_Die *cu);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_CUINDEX_H */
