/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An ELF core file of an x86_64 Linux process, as written by the kernel, by
 * gdb's gcore or by stb-bpf-loader --save, read as untrusted input: its
 * memory segments (PT_LOAD), its threads' registers (NT_PRSTATUS), its
 * mapped files (NT_FILE), auxiliary vector (NT_AUXV), process info
 * (NT_PRPSINFO) and, in a saved core, its threads' names and how their
 * stacks were read (the "STB" note below). Nothing is mapped: every read is
 * a bounded pread of the file, checked against the file's size.
 */
#ifndef STB_LOADER_COREFILE_H
#define STB_LOADER_COREFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/unwind.h" /* struct stb_regs */

/* Bounds on what one core may claim (more is refused or cut, with a note). */
#define STB_COREFILE_MAX_SEGMENTS (1u << 20)     /* PT_LOADs */
#define STB_COREFILE_MAX_NOTES_BYTES (64u << 20) /* all PT_NOTE segments */
#define STB_COREFILE_MAX_THREADS 65536u
#define STB_COREFILE_MAX_FILES (1u << 20) /* NT_FILE entries */
#define STB_COREFILE_MAX_PATH 4096u

struct stb_corefile_seg {
	uint64_t vaddr, memsz; /* the mapping */
	uint64_t off;          /* where its bytes start in the file */
	uint64_t filesz;       /* bytes in the file (the rest was not dumped), cut to the file */
	uint32_t flags;        /* PF_R | PF_W | PF_X */
	bool cut;              /* the file ends inside this segment's bytes */
};

/*
 * The note of a saved core (stb-bpf-loader --save, corefile_write.h) that
 * lists the threads of the process: owner "STB", type
 * STB_COREFILE_NT_THREADS, an array of struct stb_corefile_note_thread, one
 * per thread (with or without an NT_PRSTATUS). Kernel and gdb cores have
 * none: their threads have no names.
 */
#define STB_COREFILE_NOTE_OWNER "STB"
#define STB_COREFILE_NT_THREADS 0x54485244u /* "THRD" */
/* stb_corefile_note_thread.flags */
#define STB_COREFILE_THREAD_SP_ONLY                                          \
	0x1u /* of the registers only ip and sp are known (a thread blocked \
		in a system call, read from /proc): the frame pointer is    \
		found on its stack (table/insyscall.h) */
struct stb_corefile_note_thread {
	uint32_t tid;
	uint32_t flags;  /* STB_COREFILE_THREAD_* */
	uint32_t cut;    /* enum stb_cut (table/driver.h): its stack as saved ends early */
	uint32_t zero;
	char name[16];   /* /proc/PID/task/TID/comm, NUL-padded (untrusted bytes) */
};
_Static_assert(sizeof(struct stb_corefile_note_thread) == 32, "the note's layout");

struct stb_corefile_thread {
	uint32_t tid;
	int signo; /* pr_cursig: the signal that stopped it (0: none) */
	bool has_regs; /* false: listed by a saved core's note only (no NT_PRSTATUS) */
	struct stb_regs regs;
	/* Blocked in a system call (x86_64: orig_rax a call's number and rax
	 * what a blocked or interrupted call holds: -ENOSYS, -EINTR, -ERESTART*):
	 * the call and its first argument (rdi). */
	bool in_syscall;
	uint32_t syscall_nr;
	uint64_t syscall_arg0;
	/* Created but not yet run (orig_rax clone or clone3, rax 0: the new
	 * thread's registers as the call made them, before its first return
	 * to user space; the kernel writes it into a core that catches it
	 * then, gdb too): it ran no instruction of its own, its stack holds
	 * nothing yet (often not even a page), its one frame is ip. */
	bool starting;
	/* From a saved core's note (zero otherwise). */
	char name[16]; /* NUL-terminated, untrusted bytes: escape on output */
	unsigned flags; /* STB_COREFILE_THREAD_* */
	unsigned cut;   /* enum stb_cut, range-checked */
};

struct stb_corefile_map {
	uint64_t start, end, off; /* mapping [start, end) of file offset off (bytes) */
	const char *path;         /* as the process saw it; " (deleted)" removed */
	bool deleted;
};

struct stb_corefile {
	int fd;
	uint64_t size; /* of the file */
	struct stb_corefile_seg *segs; /* sorted by vaddr, not overlapping */
	size_t nsegs;
	/* In note order (the first one dumped the core), then those a saved
	 * core's note lists without registers (has_regs false). */
	struct stb_corefile_thread *threads;
	size_t nthreads, capthreads;
	uint32_t *by_tid; /* indices of threads sorted by tid */
	struct stb_corefile_note_thread *listed; /* the reader's, while the notes are read */
	size_t nlisted, caplisted;
	struct stb_corefile_map *files; /* sorted by start */
	size_t nfiles;
	char *file_names;            /* storage of the paths */
	uint32_t pid;                /* NT_PRPSINFO, else the first thread's tid; 0: unknown */
	char comm[17];               /* NT_PRPSINFO pr_fname (NUL-terminated, untrusted bytes) */
	int signo;                   /* signal that killed it (first thread's), 0: unknown */
	/* NT_SIGINFO, the kernel's record of that signal (the first such note:
	 * gdb writes one per thread, the signalled thread first). */
	bool has_siginfo;
	int sig_code;                /* si_code: > 0 the kernel's (a fault), <= 0 sent */
	bool sig_has_addr;           /* a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
					with si_code > 0): sig_addr is si_addr */
	uint64_t sig_addr;
	bool sig_has_sender;         /* sent (kill, tgkill, sigqueue: si_code <= 0) */
	uint32_t sig_pid, sig_uid;   /* by this process and user */
	/* The thread that took it: the first NT_PRSTATUS (the kernel writes the
	 * dumping thread's first: the one the fatal signal was delivered to), 0:
	 * no thread in the core. */
	uint32_t sig_tid;
	uint64_t at_entry, at_phdr, at_vdso; /* NT_AUXV: AT_ENTRY, AT_PHDR, AT_SYSINFO_EHDR */
	bool truncated;              /* the file is shorter than its segments say */
	unsigned bad_notes;          /* notes that were malformed and skipped */
	bool files_cut;              /* NT_FILE held more than STB_COREFILE_MAX_FILES / was cut */
};

/*
 * Opens and checks core file path: ELF64 little-endian, ET_CORE, EM_X86_64,
 * program headers inside the file, notes parsed with every size checked.
 * Returns NULL with errno and a message naming the cause in err[errlen]:
 * ENOENT/EACCES... the file cannot be opened; ENOEXEC not an ELF file, or an
 * ELF file that is not a core dump; EPROTO a core of another architecture,
 * or one too malformed to read (headers outside the file); ENOMEM. A core
 * whose segments are cut short opens (truncated is set). May block on I/O.
 */
struct stb_corefile *stb_corefile_open(const char *path, char *err, size_t errlen);

/* The same on an open file descriptor (duplicated: the caller keeps fd);
 * name is used in messages. */
struct stb_corefile *stb_corefile_open_fd(int fd, const char *name, char *err, size_t errlen);

/* Closes everything; accepts NULL. */
void stb_corefile_close(struct stb_corefile *c);

/*
 * Copies len bytes of the process's memory at addr into dst (an
 * stb_mem.read / stb_hold_read_fn for ctx = c). Returns 0; -EFAULT when a
 * byte is in no segment or was not dumped (or the file is cut there); -EIO
 * when the file shrank since it was opened. Thread-safe (pread).
 */
int stb_corefile_read(void *c, uint64_t addr, void *dst, size_t len);

/* The segment holding addr, or NULL. */
const struct stb_corefile_seg *stb_corefile_seg_at(const struct stb_corefile *c, uint64_t addr);

/* The thread tid with its registers (NT_PRSTATUS), or NULL. */
const struct stb_corefile_thread *stb_corefile_thread_of(const struct stb_corefile *c, uint32_t tid);

/* The thread tid, with or without registers (has_regs), or NULL. */
const struct stb_corefile_thread *stb_corefile_thread_any(const struct stb_corefile *c,
							  uint32_t tid);

/* Was the core written because of a fatal signal (one whose default action
 * dumps core: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS,
 * SIGQUIT, SIGXCPU, SIGXFSZ) taken by thread sig_tid? False for a core
 * taken of a live process (gcore: SIGSTOP or no signal). */
bool stb_corefile_fatal(const struct stb_corefile *c);

/* The mapped file whose mapping holds addr, or NULL. */
const struct stb_corefile_map *stb_corefile_map_at(const struct stb_corefile *c, uint64_t addr);

#endif /* STB_LOADER_COREFILE_H */
