/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared library of the compiler-variant target: an exported function
 * whose inlined helper calls a function of the library, which calls back
 * into the program. Built with the variant's compiler and flags, -fPIC.
 */
#include "cct.h"

CCT_FN void cct_lib_leaf(void (*park)(void))
{
	park(); /* @cct:lib_leaf */
	CCT_NO_TAIL();
}

CCT_INLINE void cct_lib_inl(void (*park)(void))
{
	cct_lib_leaf(park); /* @cct:lib_inl */
	CCT_NO_TAIL();
}

CCT_FN void cct_lib_entry(void (*park)(void))
{
	cct_lib_inl(park); /* @cct:lib_entry */
	CCT_NO_TAIL();
}
