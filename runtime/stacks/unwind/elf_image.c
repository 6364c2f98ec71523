/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ELF reader of elf_image.h: header and program-header validation, the
 * load bias of a mapping, build-id notes, and owned copies of
 * .eh_frame_hdr and .eh_frame, every size checked against the source's
 * size and the caps before anything is allocated or read.
 */
#include "unwind/elf_image.h"

#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096u

unsigned stb_elf_build_id(const uint8_t *n, size_t len, uint64_t align, uint8_t *out, size_t cap)
{
	size_t pos = 0;

	if (align != 8)
		align = 4; /* PT_NOTE alignment is 4 or 8; anything else reads as 4 */
	while (len - pos >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		memcpy(&nh, n + pos, sizeof(nh));
		pos += sizeof(nh);
		uint64_t namesz = ((uint64_t)nh.n_namesz + align - 1) & ~(align - 1);
		uint64_t descsz = ((uint64_t)nh.n_descsz + align - 1) & ~(align - 1);
		if (namesz > len - pos || descsz > len - pos - namesz)
			return 0;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
		    memcmp(n + pos, "GNU", 4) == 0) {
			if (nh.n_descsz == 0 || nh.n_descsz > cap)
				return 0;
			memcpy(out, n + pos + namesz, nh.n_descsz);
			return nh.n_descsz;
		}
		pos += (size_t)(namesz + descsz);
	}
	return 0;
}

void stb_elf_mod_free(struct stb_elf_mod *m)
{
	if (!m)
		return;
	free(m->hdr.data);
	free(m->eh_frame.data);
	m->hdr.data = m->eh_frame.data = NULL;
	m->has_table = false;
}

/* Source offset of [addr, addr + len) (target addresses), if the object's
 * bytes hold it (file: inside one PT_LOAD's file extent). *avail: bytes
 * readable from there to the end of that extent. */
static int src_offset(const struct stb_elf_src *src, const Elf64_Phdr *ph, unsigned phnum,
		      const struct stb_elf_mod *m, uint64_t first_vaddr, uint64_t addr,
		      uint64_t *off, uint64_t *avail)
{
	uint64_t vaddr = addr - m->bias;

	for (unsigned i = 0; i < phnum; i++) {
		if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr ||
		    vaddr - ph[i].p_vaddr >= ph[i].p_filesz)
			continue;
		uint64_t o, rest = ph[i].p_filesz - (vaddr - ph[i].p_vaddr);
		if (src->mem_layout) {
			if (ph[i].p_vaddr < first_vaddr)
				return -ENOEXEC;
			o = vaddr - first_vaddr;
		} else {
			if (__builtin_add_overflow(ph[i].p_offset, vaddr - ph[i].p_vaddr, &o))
				return -ENOEXEC;
		}
		if (o >= src->size)
			return -ENOEXEC;
		*off = o;
		*avail = rest < src->size - o ? rest : src->size - o;
		return 0;
	}
	return -ENOENT;
}

/* Copies len bytes at source offset off into an owned piece at addr. */
static int read_piece(const struct stb_elf_src *src, uint64_t off, uint64_t len, uint64_t addr,
		      struct stb_elf_piece *p)
{
	int ret;

	if (len == 0 || off > src->size || len > src->size - off)
		return -ENOEXEC;
	p->data = malloc((size_t)len);
	if (!p->data)
		return -ENOMEM;
	ret = src->read(src->arg, off, p->data, (size_t)len);
	if (ret < 0) {
		free(p->data);
		p->data = NULL;
		return ret;
	}
	p->addr = addr;
	p->len = (size_t)len;
	return 0;
}

/* .eh_frame_hdr and .eh_frame. Errors other than -ENOMEM leave the module
 * without tables. */
static int load_tables(const struct stb_elf_src *src, const Elf64_Phdr *ph, unsigned phnum,
		       uint64_t first_vaddr, uint64_t *bytes_left, struct stb_elf_mod *m)
{
	const Elf64_Phdr *eh = NULL;
	uint64_t off, avail, len, hdr_addr;
	int ret;

	for (unsigned i = 0; i < phnum && !eh; i++)
		if (ph[i].p_type == PT_GNU_EH_FRAME)
			eh = &ph[i];
	if (!eh || eh->p_filesz == 0 || eh->p_filesz > STB_ELF_MAX_EH_FRAME_HDR)
		return -ENOENT;
	hdr_addr = eh->p_vaddr + m->bias;
	if (src->mem_layout) {
		ret = src_offset(src, ph, phnum, m, first_vaddr, hdr_addr, &off, &avail);
		if (ret < 0)
			return ret;
	} else {
		off = eh->p_offset;
		avail = off < src->size ? src->size - off : 0;
	}
	len = eh->p_filesz < avail ? eh->p_filesz : avail;
	if (len < eh->p_filesz)
		return -ENOEXEC; /* the file ends inside the header */
	if (len > *bytes_left)
		return -E2BIG;
	/* Located first from the header's first pointer (where .eh_frame is);
	 * read now, or by stb_elf_mod_load_tables when deferred. */
	uint64_t eh_frame_addr, hdr_off = off, hdr_len = len;
	uint8_t head[32];
	struct stb_cfi_bytes hb = {.data = head, .len = len < sizeof(head) ? len : sizeof(head),
				   .addr = hdr_addr};
	ret = src->read(src->arg, off, head, hb.len);
	if (ret == 0)
		ret = stb_cfi_hdr_eh_frame(&hb, &eh_frame_addr);
	if (ret < 0)
		return ret;
	*bytes_left -= len;
	/* .eh_frame: from eh_frame_ptr to the end of its segment's file bytes. */
	ret = src_offset(src, ph, phnum, m, first_vaddr, eh_frame_addr, &off, &avail);
	if (ret < 0)
		return ret;
	len = avail < STB_ELF_MAX_EH_FRAME ? avail : STB_ELF_MAX_EH_FRAME;
	if (len > *bytes_left)
		return -E2BIG;
	if (len == 0 || off > src->size || len > src->size - off)
		return -ENOEXEC;
	*bytes_left -= len;
	m->tables_deferred = true;
	m->hdr_off = hdr_off;
	m->hdr_len = hdr_len;
	m->hdr_addr = hdr_addr;
	m->eh_frame_off = off;
	m->eh_frame_len = len;
	m->eh_frame_addr = eh_frame_addr;
	return src->defer_tables ? 0 : stb_elf_mod_load_tables(src, m);
}

int stb_elf_mod_load_tables(const struct stb_elf_src *src, struct stb_elf_mod *m)
{
	int ret;

	if (!m->tables_deferred || m->has_table)
		return m->has_table ? 0 : -EINVAL;
	ret = read_piece(src, m->hdr_off, m->hdr_len, m->hdr_addr, &m->hdr);
	if (ret == 0) {
		struct stb_cfi_bytes hb = {.data = m->hdr.data, .len = m->hdr.len,
					   .addr = m->hdr.addr};
		ret = stb_cfi_hdr_parse(&hb, &m->table);
		/* The header must still say what it said when it was located. */
		if (ret == 0 && m->table.eh_frame != m->eh_frame_addr)
			ret = -ENOEXEC;
	}
	if (ret == 0)
		ret = read_piece(src, m->eh_frame_off, m->eh_frame_len, m->eh_frame_addr,
				 &m->eh_frame);
	if (ret < 0) {
		stb_elf_mod_free(m);
		if (ret != -ENOMEM)
			m->tables_deferred = false; /* not the tables located: none */
		return ret;
	}
	m->tables_deferred = false;
	m->has_table = true;
	return 0;
}

int stb_elf_mod_load(const struct stb_elf_src *src, uint64_t map_start, uint64_t map_off,
		     uint64_t *bytes_left, struct stb_elf_mod *m)
{
	Elf64_Ehdr eh;
	Elf64_Phdr *ph = NULL;
	const Elf64_Phdr *first = NULL;
	uint64_t phsize;
	bool have_bias = false;
	int ret;

	memset(m, 0, sizeof(*m));
	if (src->size < sizeof(eh))
		return -ENOEXEC;
	ret = src->read(src->arg, 0, &eh, sizeof(eh));
	if (ret < 0)
		return ret;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum == 0 || eh.e_phnum > STB_ELF_MAX_PHDRS)
		return -ENOEXEC;
	phsize = (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr);
	if (eh.e_phoff > src->size || phsize > src->size - eh.e_phoff)
		return -ENOEXEC;
	ph = malloc((size_t)phsize);
	if (!ph)
		return -ENOMEM;
	ret = src->read(src->arg, eh.e_phoff, ph, (size_t)phsize);
	if (ret < 0)
		goto cleanup;
	ret = -ENOEXEC;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (!first)
			first = &ph[i];
		if (have_bias)
			continue;
		if (src->mem_layout ? ph[i].p_offset == 0
				    : ((ph[i].p_flags & PF_X) &&
				       (ph[i].p_offset & ~(uint64_t)(PAGE - 1)) == map_off)) {
			m->bias = src->mem_layout
				      ? map_start - ph[i].p_vaddr
				      : map_start - (ph[i].p_vaddr & ~(uint64_t)(PAGE - 1));
			have_bias = true;
		}
	}
	if (!have_bias)
		goto cleanup;
	m->exec_lo = UINT64_MAX;
	m->load_lo = (first->p_vaddr & (0 - first->p_align)) + m->bias;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		uint64_t lo, hi;
		if (ph[i].p_type == PT_NOTE && m->nnotes < STB_ELF_MAX_NOTES) {
			m->notes[m->nnotes++] =
			    (struct stb_elf_note){.addr = ph[i].p_vaddr + m->bias,
						  .len = ph[i].p_filesz,
						  .align = ph[i].p_align};
			continue;
		}
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (__builtin_add_overflow(ph[i].p_vaddr, ph[i].p_memsz, &hi))
			goto cleanup;
		lo = ph[i].p_vaddr + m->bias;
		hi += m->bias;
		if (hi < lo)
			goto cleanup; /* wraps around the address space */
		if (hi > m->load_hi)
			m->load_hi = hi;
		if (ph[i].p_flags & PF_X) {
			if (lo < m->exec_lo)
				m->exec_lo = lo;
			if (hi > m->exec_hi)
				m->exec_hi = hi;
		}
	}
	if (m->exec_lo >= m->exec_hi || m->load_lo >= m->load_hi)
		goto cleanup;
	/* The build id, from the object's own bytes. */
	for (unsigned i = 0; i < eh.e_phnum && !m->build_id_len; i++) {
		uint64_t off = ph[i].p_offset, len = ph[i].p_filesz;
		if (ph[i].p_type != PT_NOTE || len == 0 || len > STB_ELF_MAX_NOTE_BYTES)
			continue;
		if (src->mem_layout) {
			uint64_t avail;
			if (src_offset(src, ph, eh.e_phnum, m, first->p_vaddr,
				       ph[i].p_vaddr + m->bias, &off, &avail) < 0 ||
			    avail < len)
				continue;
		} else if (off > src->size || len > src->size - off) {
			continue;
		}
		uint8_t *note = malloc((size_t)len);
		if (!note) {
			ret = -ENOMEM;
			goto cleanup;
		}
		if (src->read(src->arg, off, note, (size_t)len) == 0)
			m->build_id_len = stb_elf_build_id(note, (size_t)len, ph[i].p_align,
							   m->build_id, sizeof(m->build_id));
		free(note);
	}
	ret = load_tables(src, ph, eh.e_phnum, first->p_vaddr, bytes_left, m);
	if (ret == -ENOMEM)
		goto cleanup;
	if (ret < 0) {
		stb_elf_mod_free(m);
		m->flags |= STB_ELF_NO_TABLE | (ret == -E2BIG ? STB_ELF_TOO_BIG : 0);
	}
	ret = 0;
cleanup:
	if (ret < 0)
		stb_elf_mod_free(m);
	free(ph);
	return ret;
}
