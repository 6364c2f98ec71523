/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libunwind fallback of the unwinder: a remote address space whose
 * accessors read through the walk (stack copy, module images, budgeted
 * target reads) and find CFI through each module's .eh_frame_hdr table.
 * Every accessor call counts against the step's budget and the walk's
 * deadline, so libunwind's own loops (its DWARF expression evaluator reads
 * each opcode through access_mem) end. Used for frames the CFI rows cannot
 * describe (no CFI, CFI this code does not take) and for STB_UNW_LIBUNWIND_ONLY.
 */
#include "unwind/unwind_int.h"

#include <string.h>

#include <libunwind.h>

/* Exported by libunwind-x86_64.so but declared only in libunwind's private
 * headers: searches a UNW_INFO_FORMAT_REMOTE_TABLE through the accessors. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

/* Counts one accessor call; false when the step's budget or the walk's
 * deadline is spent. */
static bool charge(struct stb_unw_ctx *w)
{
	if (w->lu_calls == 0) {
		if (!w->end)
			w->end = STB_UNW_END_EXPR_BUDGET;
		return false;
	}
	w->lu_calls--;
	if ((w->lu_calls & 63) == 0 && stb_unw_ctx_late(w))
		return false;
	return true;
}

static int acc_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			      int need_unwind_info, void *arg)
{
	struct stb_unw_ctx *w = arg;
	const struct stb_mod *m;
	unw_dyn_info_t di;
	int ret;

	if (!charge(w))
		return -UNW_EINVAL;
	m = stb_unw_ctx_mod(w, ip);
	const struct stb_cfi_hdr *hdr;
	const struct stb_cfi_bytes *eh_frame;
	if (!m || (m->flags & STB_UNW_MOD_FP_ONLY) ||
	    stb_mods_tables(w->mods, m, &hdr, &eh_frame) < 0) {
		w->fpi_failed = true;
		return -UNW_ENOINFO;
	}
	memset(&di, 0, sizeof(di));
	di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	di.start_ip = m->lo;
	di.end_ip = m->hi;
	di.gp = 0; /* x86-64 .eh_frame uses no data-relative pointers */
	di.u.rti.name_ptr = 0;
	di.u.rti.segbase = hdr->hdr_addr;
	di.u.rti.table_data = hdr->table_addr;
	di.u.rti.table_len = hdr->count * 8 / sizeof(unw_word_t);
	ret = UNW_OBJ(dwarf_search_unwind_table)(as, ip, &di, pi, need_unwind_info, arg);
	if (ret < 0)
		w->fpi_failed = true;
	return ret;
}

static void acc_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	/* Table-format unwind info is allocated and freed by libunwind itself. */
	(void)as;
	(void)pi;
	(void)arg;
}

static int acc_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	(void)as;
	(void)addr;
	(void)arg;
	return -UNW_ENOINFO;
}

static int acc_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			  void *arg)
{
	(void)as;
	if (write)
		return -UNW_EREADONLYREG;
	if (!charge(arg))
		return -UNW_EINVAL;
	return stb_unw_ctx_read(arg, addr, val, sizeof(*val)) == 0 ? 0 : -UNW_EINVAL;
}

static const int8_t lu_dwreg[] = {
    [UNW_X86_64_RAX] = 0,  [UNW_X86_64_RDX] = 1,  [UNW_X86_64_RCX] = 2,  [UNW_X86_64_RBX] = 3,
    [UNW_X86_64_RSI] = 4,  [UNW_X86_64_RDI] = 5,  [UNW_X86_64_RBP] = 6,  [UNW_X86_64_RSP] = 7,
    [UNW_X86_64_R8] = 8,   [UNW_X86_64_R9] = 9,   [UNW_X86_64_R10] = 10, [UNW_X86_64_R11] = 11,
    [UNW_X86_64_R12] = 12, [UNW_X86_64_R13] = 13, [UNW_X86_64_R14] = 14, [UNW_X86_64_R15] = 15,
    [UNW_X86_64_RIP] = 16,
};

static int acc_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
			  void *arg)
{
	struct stb_unw_ctx *w = arg;

	(void)as;
	if (write)
		return -UNW_EREADONLYREG;
	if (!charge(w))
		return -UNW_EINVAL;
	if (reg == UNW_X86_64_RIP) {
		*val = w->ip0;
		return 0;
	}
	if (reg < 0 || (size_t)reg >= sizeof(lu_dwreg) || !(w->cur.known & (1u << lu_dwreg[reg])))
		return -UNW_EBADREG;
	*val = w->cur.r[lu_dwreg[reg]];
	return 0;
}

static int acc_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			    void *arg)
{
	(void)as;
	(void)reg;
	(void)val;
	(void)write;
	(void)arg;
	return -UNW_EBADREG;
}

static int acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	(void)as;
	(void)c;
	(void)arg;
	return -UNW_EINVAL;
}

static int acc_get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			     unw_word_t *off, void *arg)
{
	(void)as;
	(void)addr;
	(void)buf;
	(void)len;
	(void)off;
	(void)arg;
	return -UNW_ENOINFO; /* symbolize.c does names */
}

static unw_accessors_t lu_accessors = {
    .find_proc_info = acc_find_proc_info,
    .put_unwind_info = acc_put_unwind_info,
    .get_dyn_info_list_addr = acc_get_dyn_info_list_addr,
    .access_mem = acc_access_mem,
    .access_reg = acc_access_reg,
    .access_fpreg = acc_access_fpreg,
    .resume = acc_resume,
    .get_proc_name = acc_get_proc_name,
};

void *stb_unw_lu_new(void)
{
	unw_addr_space_t as = unw_create_addr_space(&lu_accessors, 0);

	/*
	 * libunwind only steps the frames the CFI rows cannot describe. Its own
	 * cache would cost a lock and two sigprocmask calls per step (Debian
	 * builds it without UNW_CACHE_PER_THREAD, which falls back to GLOBAL).
	 */
	if (as)
		unw_set_caching_policy(as, UNW_CACHE_NONE);
	return as;
}

void stb_unw_lu_free(void *as)
{
	if (as)
		unw_destroy_addr_space(as);
}

int stb_unw_lu_step(struct stb_unw_ctx *w, void *as, struct stb_cfi_regs *regs, uint64_t lookup,
		    bool *fp)
{
	static const int ids[8] = {UNW_X86_64_RIP, UNW_X86_64_RSP, UNW_X86_64_RBP, UNW_X86_64_RBX,
				   UNW_X86_64_R12, UNW_X86_64_R13, UNW_X86_64_R14, UNW_X86_64_R15};
	static const uint8_t dw[8] = {STB_CFI_RA, STB_CFI_RSP, STB_CFI_RBP, STB_CFI_RBX,
				      12,         13,          14,          15};
	struct stb_cfi_regs out = {.known = 0};
	unw_cursor_t c;
	int ret;

	if (stb_unw_ctx_late(w))
		return -1;
	w->cur = *regs;
	w->ip0 = lookup;
	w->lu_calls = STB_UNW_LU_CALLS;
	if (unw_init_remote(&c, (unw_addr_space_t)as, w) < 0)
		return -1;
	w->fpi_failed = false;
	ret = unw_step(&c);
	*fp = w->fpi_failed;
	if (ret <= 0)
		return ret < 0 ? -1 : 0;
	for (int i = 0; i < 8; i++) {
		unw_word_t v;
		if (unw_get_reg(&c, ids[i], &v) < 0)
			return -1;
		out.r[dw[i]] = v;
		out.known |= 1u << dw[i];
	}
	*regs = out;
	return 1;
}
