/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chain of inlined calls at an address of a compile unit: the concrete
 * DW_TAG_inlined_subroutine DIEs whose ranges contain it, found by one walk
 * down the unit's DIEs. The walk looks inside namespaces, classes,
 * structures, unions and modules, which have no address of their own: clang
 * puts C++ definitions there, and dwarf_getscopes of libdw 0.188 prunes them.
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_INLCHAIN_H
#define STB_RUNTIME_STACKS_SYMBOLS_INLCHAIN_H

#include <elfutils/libdw.h>

/* Nesting of DIEs followed (containers and scopes together). */
#define STB_INLCHAIN_MAX_DEPTH 64u
/* DIEs looked at by one walk. */
#define STB_INLCHAIN_MAX_DIES (1u << 20)

/*
 * Walks cu (a unit's DIE) to the innermost scope of code containing addr (a
 * DWARF address) and writes the inlined calls on the way into out[0..max),
 * innermost first (the outermost ones when there are more than max), and the
 * function (DW_TAG_subprogram) they are inlined into in *func when func is
 * not NULL and one was found (else *func is left alone). Returns
 * how many (0: addr is in a function but in no inlined call), -ENOENT (no
 * function of cu contains addr) or -E2BIG (the walk ran out of budget).
 * Reads DWARF through libdw: not thread-safe for one Dwarf; never blocks
 * beyond reading the file libdw reads.
 */
int stb_inlchain_find(Dwarf_Die *cu, Dwarf_Addr addr, Dwarf_Die *out, unsigned max, Dwarf_Die *func);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_INLCHAIN_H */
