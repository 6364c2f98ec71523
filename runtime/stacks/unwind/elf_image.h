/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading an ELF object that the target maps, without ever parsing the
 * file in place: the header, program headers, build-id note, .eh_frame_hdr
 * and .eh_frame are read through a callback (pread on the file, a memory
 * copy) into buffers owned by the caller, each with a bounded size. A file
 * the target shrinks or rewrites meanwhile gives a short read (an error),
 * never a fault. Pure apart from the callback; x86-64 ELF64 only.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_ELF_IMAGE_H
#define STB_RUNTIME_STACKS_UNWIND_ELF_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/cfi.h"

#define STB_ELF_MAX_PHDRS 256u
#define STB_ELF_MAX_NOTES 4u                /* PT_NOTE segments kept */
#define STB_ELF_MAX_NOTE_BYTES (64u * 1024) /* per PT_NOTE read */
#define STB_ELF_MAX_EH_FRAME_HDR (16u * 1024 * 1024)
#define STB_ELF_MAX_EH_FRAME (64u * 1024 * 1024)
#define STB_ELF_BUILD_ID_MAX 64u

/* Reads len bytes at offset off of the object into dst. Returns 0, or
 * -errno (-EIO for a short read). */
typedef int (*stb_elf_read_fn)(void *arg, uint64_t off, void *dst, size_t len);

struct stb_elf_src {
	stb_elf_read_fn read;
	void *arg;
	uint64_t size; /* bytes readable (file size, image length) */
	/* false: a file (offsets are p_offset); true: an image of the loaded
	 * object starting at its first PT_LOAD (offsets are p_vaddr - that
	 * segment's p_vaddr), e.g. a copy of the vdso. */
	bool mem_layout;
	/* true: stb_elf_mod_load only locates the unwind tables (and checks
	 * them against the budget); stb_elf_mod_load_tables reads them. */
	bool defer_tables;
};

/* An owned copy of target bytes: data[i] is at target address addr + i. */
struct stb_elf_piece {
	uint64_t addr;
	uint8_t *data; /* malloc'ed, NULL when absent */
	size_t len;
};

/* stb_elf_mod.flags */
#define STB_ELF_NO_TABLE 0x1u /* no usable .eh_frame_hdr / .eh_frame */
#define STB_ELF_TOO_BIG 0x2u  /* the unwind tables exceed the byte budget */

struct stb_elf_note {
	uint64_t addr; /* target address */
	uint64_t len, align;
};

struct stb_elf_mod {
	uint64_t bias;             /* target address = p_vaddr + bias */
	uint64_t exec_lo, exec_hi; /* executable PT_LOADs, target addresses */
	/* The object as libdwfl places it: (first PT_LOAD p_vaddr & -p_align) +
	 * bias, to the end of the last PT_LOAD. */
	uint64_t load_lo, load_hi;
	unsigned flags; /* STB_ELF_* */
	unsigned build_id_len;
	uint8_t build_id[STB_ELF_BUILD_ID_MAX];
	unsigned nnotes;
	struct stb_elf_note notes[STB_ELF_MAX_NOTES];
	struct stb_elf_piece hdr, eh_frame; /* .eh_frame_hdr, .eh_frame (to its segment's end) */
	bool has_table;
	struct stb_cfi_hdr table; /* parsed from hdr (points into hdr.data) */
	/* Located, not read yet (src->defer_tables): where the two pieces are
	 * in the object's bytes and in the target. */
	bool tables_deferred;
	uint64_t hdr_off, hdr_len, hdr_addr, eh_frame_off, eh_frame_len, eh_frame_addr;
};

/*
 * Loads the object that the target maps with an executable mapping at
 * map_start from file offset map_off (file layout), or whose first PT_LOAD
 * is at map_start (mem_layout; map_off ignored). *bytes_left is the budget
 * for the owned copies (decremented; a module over it gets STB_ELF_TOO_BIG
 * and no tables). On success m owns its pieces (stb_elf_mod_free).
 * Returns 0; -ENOEXEC: not an x86-64 ELF64 object or no PT_LOAD matches the
 * mapping; -ENOMEM; or the read callback's -errno.
 */
int stb_elf_mod_load(const struct stb_elf_src *src, uint64_t map_start, uint64_t map_off,
		     uint64_t *bytes_left, struct stb_elf_mod *m);

/*
 * Reads the tables that stb_elf_mod_load located (m->tables_deferred) from
 * src, the same object: 0 and m->has_table; -ENOMEM (m has none yet and may
 * be asked again); otherwise the read's -errno or -ENOEXEC, -EINVAL,
 * -ENOTSUP when the bytes are not the tables located any more, and m has
 * none for good. Not thread-safe for one m; blocks on the reads.
 */
int stb_elf_mod_load_tables(const struct stb_elf_src *src, struct stb_elf_mod *m);

/* Frees m's pieces; accepts a zeroed m. */
void stb_elf_mod_free(struct stb_elf_mod *m);

/* The NT_GNU_BUILD_ID descriptor in a note area of len bytes (align as in
 * PT_NOTE, 4 or 8): its length (copied to out), or 0 when there is none or
 * it does not fit cap. Pure. */
unsigned stb_elf_build_id(const uint8_t *notes, size_t len, uint64_t align, uint8_t *out,
			  size_t cap);

#endif /* STB_RUNTIME_STACKS_UNWIND_ELF_IMAGE_H */
