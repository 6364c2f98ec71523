/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writer of the ELF core files that corefile.h reads, for --save: an
 * ELF64 ET_CORE file of x86_64 with PT_LOAD segments (memory bytes streamed
 * to the file as they come) and one PT_NOTE (NT_PRSTATUS per thread,
 * NT_PRPSINFO, NT_AUXV, NT_FILE, and the "STB" list of threads of
 * corefile.h), the layout the kernel writes. The file is
 * built unnamed (O_TMPFILE, else PATH.tmp.PID), within a byte budget, and
 * appears at its path only once complete and synced (mode 0600).
 */
#ifndef STB_LOADER_COREFILE_WRITE_H
#define STB_LOADER_COREFILE_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/unwind.h" /* struct stb_regs */

struct stb_corewrite;

/*
 * Starts core file path: refuses an existing path unless force (EEXIST),
 * creates the unnamed file in its directory. budget: bytes of segments and
 * notes the file may hold (must segments may pass it, see
 * stb_corewrite_load); max_segs: PT_LOADs at most. The notes (notes_room
 * bytes; more go after the last segment) and the program headers are
 * reserved at the front, as the kernel lays a core out: a truncated file
 * keeps them. NULL with errno and err[errlen] naming the cause. May block
 * on I/O. Not thread-safe (one writer).
 */
struct stb_corewrite *stb_corewrite_open(const char *path, bool force, uint64_t budget,
					 size_t max_segs, size_t notes_room, char *err,
					 size_t errlen);

/* The bytes a note of desc_len bytes takes at most (for notes_room). */
size_t stb_corewrite_note_size(size_t desc_len);

/* Bytes kept out of the budget for must segments still to come. */
void stb_corewrite_reserve(struct stb_corewrite *w, uint64_t bytes);

/* Budget left for segments that are not must (0 when spent). */
uint64_t stb_corewrite_left(const struct stb_corewrite *w);

#define STB_COREWRITE_MUST 0x100u /* flags: written whatever the budget (from the reserve) */

/*
 * A PT_LOAD: the memsz bytes mapped at vaddr, of which the first len are
 * bytes[] (written now); flags PF_R | PF_W | PF_X, | STB_COREWRITE_MUST.
 * Segments may overlap: at the end, one starting inside an earlier one is
 * cut to begin where that one ends (the earlier one's bytes count). 0;
 * -EFBIG the budget is spent (nothing written); -E2BIG max_segs reached;
 * -errno writing (the file is then unusable: stb_corewrite_abort).
 */
int stb_corewrite_load(struct stb_corewrite *w, uint64_t vaddr, uint64_t memsz, const void *bytes,
		       size_t len, unsigned flags);

/* More bytes of the last PT_LOAD (its file bytes grow by len, within its
 * memsz), with the same flags' budget rule. Same returns. */
int stb_corewrite_more(struct stb_corewrite *w, const void *bytes, size_t len, unsigned flags);

/* Notes: a thread's registers (pr_cursig 0: no fatal signal; syscall_nr
 * >= 0: blocked in that system call, with first argument arg0, as the
 * kernel holds such a thread's registers: orig_rax the call, rax -ENOSYS),
 * a thread of the "STB" list (corefile.h: its name, STB_COREFILE_THREAD_*
 * flags, enum stb_cut), the process's id and command name, its auxiliary
 * vector (raw), a file mapping [start, end) at file offset off (a multiple
 * of 4096). 0 or -ENOMEM. A thread given twice keeps its first registers;
 * the caller gives each thread of the list once. */
int stb_corewrite_thread(struct stb_corewrite *w, uint32_t tid, const struct stb_regs *regs,
			 int64_t syscall_nr, uint64_t arg0);
int stb_corewrite_thread_info(struct stb_corewrite *w, uint32_t tid, const char *name,
			      unsigned flags, unsigned cut);
int stb_corewrite_process(struct stb_corewrite *w, uint32_t pid, const char *comm);
int stb_corewrite_auxv(struct stb_corewrite *w, const void *auxv, size_t len);
int stb_corewrite_file(struct stb_corewrite *w, uint64_t start, uint64_t end, uint64_t off,
		       const char *path);

/*
 * Writes the notes and headers, syncs the file and gives it its path (with
 * force, replacing what was there atomically; without, failing with EEXIST
 * if a file appeared there meanwhile). Frees w whatever the result. 0, or
 * -errno with err[errlen] naming the cause (nothing is left behind).
 */
int stb_corewrite_commit(struct stb_corewrite *w, char *err, size_t errlen);

/* Bytes of the file so far (data and reserved headers). */
uint64_t stb_corewrite_size(const struct stb_corewrite *w);

/* Drops the file (nothing is left behind) and frees w; accepts NULL. */
void stb_corewrite_abort(struct stb_corewrite *w);

#endif /* STB_LOADER_COREFILE_WRITE_H */
