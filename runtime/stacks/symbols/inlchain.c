/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The inlined calls at an address (inlchain.h): a depth-first walk of a
 * unit's DIEs with an explicit stack, entering containers of definitions
 * always and scopes of code only when their ranges hold the address; once a
 * scope holds it, the walk goes on inside that scope alone.
 */
#include "symbols/inlchain.h"

#include <errno.h>
#include <stdbool.h>

#include <dwarf.h>

/* DIEs without addresses that hold definitions of code. */
static bool is_container(int tag)
{
	return tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
	       tag == DW_TAG_union_type || tag == DW_TAG_module;
}

/* DIEs of code, with ranges, that may hold inlined calls. */
static bool is_scope(int tag)
{
	return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
	       tag == DW_TAG_lexical_block || tag == DW_TAG_entry_point || tag == DW_TAG_try_block ||
	       tag == DW_TAG_catch_block || tag == DW_TAG_with_stmt;
}

int stb_inlchain_find(Dwarf_Die *cu, Dwarf_Addr addr, Dwarf_Die *out, unsigned max, Dwarf_Die *func)
{
	Dwarf_Die stack[STB_INLCHAIN_MAX_DEPTH]; /* stack[i]: the DIE looked at on level i */
	Dwarf_Die chain[STB_INLCHAIN_MAX_DEPTH];
	unsigned sp = 0, nchain = 0, levels = 0;
	bool in_code = false;

	if (dwarf_child(cu, &stack[0]) != 0)
		return -ENOENT;
	sp = 1;
	for (unsigned visits = 0; sp > 0; visits++) {
		Dwarf_Die *d = &stack[sp - 1], c;
		int tag = dwarf_tag(d);

		if (visits >= STB_INLCHAIN_MAX_DIES)
			return -E2BIG;
		if (is_scope(tag) && dwarf_haspc(d, addr) > 0) {
			/* Everything at addr is inside d: go on there alone. */
			in_code = true;
			if (tag == DW_TAG_inlined_subroutine && nchain < STB_INLCHAIN_MAX_DEPTH)
				chain[nchain++] = *d;
			else if (tag == DW_TAG_subprogram && func)
				*func = *d;
			if (++levels >= STB_INLCHAIN_MAX_DEPTH || dwarf_child(d, &c) != 0)
				break;
			stack[0] = c;
			sp = 1;
			continue;
		}
		if (is_container(tag) && !in_code && sp < STB_INLCHAIN_MAX_DEPTH &&
		    dwarf_child(d, &c) == 0) {
			stack[sp++] = c;
			continue;
		}
		/* The next DIE: d's sibling, else its parent's, and so on. */
		while (sp > 0) {
			Dwarf_Die next;
			if (dwarf_siblingof(&stack[sp - 1], &next) == 0) {
				stack[sp - 1] = next;
				break;
			}
			sp--;
		}
	}
	if (!in_code)
		return -ENOENT;
	unsigned n = nchain < max ? nchain : max;
	for (unsigned i = 0; i < n; i++)
		out[i] = chain[n - 1 - i];
	return (int)n;
}
