/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The module registry of one target process (pid 0 = this one): its
 * executable mappings, each with its load bias, build id, file identity and
 * owned copies of its unwind tables (elf_image.h), rebuilt from
 * /proc/PID/maps on demand. One registry feeds both the unwinder (unwind.c)
 * and the symbolizer's libdwfl session (symbolize.c): the target's
 * mappings are scanned once. Reference-counted, and so are its tables:
 * immutable once published, each kept alive by the walks using it, so that
 * no lock is held while a walk calls back (a callback may symbolize, and
 * the symbolizer may refresh the registry).
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_MODULES_H
#define STB_RUNTIME_STACKS_UNWIND_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind/cfi.h"
#include "unwind/unwind.h" /* STB_UNW_MOD_* flags, struct stb_mods */

/* Caps on what one registry reads from the target's files. */
#define STB_MODS_MAX_BYTES (128ull * 1024 * 1024) /* owned unwind-table copies, all modules */
#define STB_MODS_MAX_FILES 4096u                  /* modules whose files are read */
#define STB_MODS_MAX_MODULES 65536u               /* executable mappings kept */
#define STB_MODS_MAX_VDSO (1u << 20)

struct stb_mod_image; /* owned bytes of a module, shared by successive tables */

/* A target address range served from local memory. */
struct stb_seg {
	uint64_t lo, hi;
	const uint8_t *local; /* byte at target address lo */
	bool direct;       /* local == lo: this process's own memory (read without ASan checks) */
	const void *owner; /* the image holding local, NULL in place */
};

struct stb_mod {
	uint64_t lo, hi;           /* executable range */
	uint64_t bias;             /* target address = ELF p_vaddr + bias */
	uint64_t load_lo, load_hi; /* whole object as libdwfl places it; 0/0 when unknown */
	unsigned flags;            /* STB_UNW_MOD_* */
	unsigned build_id_len;
	uint8_t build_id[64];
	char *path; /* mapped path, "[vdso]", or the anonymous mapping's name */
	dev_t dev;
	ino_t ino;
	uint64_t map_lo, map_hi; /* one mapping of the file (for /proc/PID/map_files) */
	/* The unwind tables: read with the module (has_table: then here), or
	 * located only and read on first use (lazy_table: stb_mods_tables). */
	bool has_table, lazy_table;
	struct stb_cfi_hdr table;      /* .eh_frame_hdr search table */
	struct stb_cfi_bytes eh_frame; /* .eh_frame (to its segment's end) */
	const uint8_t *image;          /* vdso: its whole image (for libdwfl), else NULL */
	size_t image_len;
	struct stb_mod_image *img; /* owner of the bytes above, NULL when in place */
};

struct stb_modtab {
	struct stb_mod *mods; /* sorted by lo, not overlapping */
	size_t nmods, capmods;
	struct stb_seg *segs; /* sorted by lo */
	size_t nsegs, capsegs;
	uint64_t gen;      /* distinct for every table of a registry, never 0 */
	uint64_t bytes;    /* owned bytes of the images */
	unsigned files;    /* modules read from files */
	unsigned nlazy;    /* modules whose tables are read on first use */
	_Atomic long refs; /* the registry's (while current) + stb_mods_acquire's */
};

/* Builds the registry of pid (0 = this process) now. Returns NULL and sets
 * errno (ESRCH, EACCES/EPERM: /proc/PID/maps unreadable, ENOMEM, EINVAL). May
 * block on file I/O (bounded by the caps above). */
struct stb_mods *stb_mods_new(pid_t pid);

/* A mapping of a frozen target (a core file), for stb_mods_new_frozen. */
struct stb_mods_map {
	uint64_t start, end, off; /* [start, end) maps the file from offset off */
	int exec;                 /* 1 executable (only these become modules), 0 not, -1 not
				     known (gcore leaves code out): the file tells */
	const char *path;         /* as the process saw it; NULL: anonymous; "[vdso]" */
};

/* Reads len bytes of a frozen target's memory at addr: 0, -EFAULT, -errno. */
typedef int (*stb_mods_read_fn)(void *ctx, uint64_t addr, void *dst, size_t len);

struct stb_mods_frozen {
	const struct stb_mods_map *maps; /* every mapping, sorted by start */
	size_t nmaps;
	stb_mods_read_fn read; /* its memory; must stay valid while the registry lives */
	void *ctx;
	const char *sysroot;  /* the files are looked up under DIR (NULL: /) */
	const char *exe_path; /* mapped path of the main program (NULL: not known) */
	const char *exe;      /* the file to read for it instead (NULL: none) */
};

/*
 * The registry of a target that does not run any more (a core file): its
 * modules come from f->maps, their files from f->sysroot (f->exe for the
 * main program), read as for a live target (owned copies, caps), and each
 * file is used only when its build id is the one in the target's memory
 * (the ELF header page the core holds): a file that differs gets
 * STB_UNW_MOD_CHANGED (no unwind tables, no symbols), one whose build id
 * is not in the core STB_UNW_MOD_UNVERIFIED. Never refreshed. Paths that
 * are not absolute or contain ".." are not looked up. Returns NULL and sets
 * errno (EINVAL, ENOMEM). May block on file I/O.
 */
struct stb_mods *stb_mods_new_frozen(const struct stb_mods_frozen *f);

/* Reads target memory for r: process_vm_readv of its pid, or the frozen
 * target's read. Returns 0, -EFAULT, or -errno. Thread-safe. */
int stb_mods_read(const struct stb_mods *r, uint64_t addr, void *dst, size_t len);

/*
 * m's unwind tables (m from a table of r the caller holds): its own, or for
 * a module whose tables were deferred (lazy_table: the file modules of a
 * live remote target) read from its file at the first call, which checks
 * that the file is still the one mapped. Returns 0 with *hdr and *eh_frame
 * set (valid while the caller holds the table), or -ENOENT when m has none.
 * Thread-safe; the first call for a module blocks on reading its file.
 */
int stb_mods_tables(struct stb_mods *r, const struct stb_mod *m, const struct stb_cfi_hdr **hdr,
		    const struct stb_cfi_bytes **eh_frame);

/* Modules whose deferred tables stb_mods_tables has read so far. Lock-free. */
uint64_t stb_mods_tables_read(const struct stb_mods *r);

/* len bytes at target address addr inside the unwind tables of one of t's
 * modules that stb_mods_tables read (they have no segment), or NULL.
 * Thread-safe; linear in the modules. */
const uint8_t *stb_modtab_table_bytes(const struct stb_modtab *t, uint64_t addr, size_t len);

/* Takes a reference; returns r. Thread-safe. */
struct stb_mods *stb_mods_ref(struct stb_mods *r);

/* Drops a reference, freeing r with the last; accepts NULL. Nothing may hold
 * r's lock then. */
void stb_mods_unref(struct stb_mods *r);

/* The pid as given (0 = self) / the pid to read from (getpid() for 0). */
pid_t stb_mods_pid(const struct stb_mods *r);
pid_t stb_mods_read_pid(const struct stb_mods *r);

/* r's current table, with a reference: valid (unchanged) until
 * stb_mods_release, whatever refreshes happen meanwhile. Thread-safe,
 * never blocks for long (a short lock against a swap). */
const struct stb_modtab *stb_mods_acquire(struct stb_mods *r);
/* Drops a reference of stb_mods_acquire; accepts NULL. */
void stb_mods_release(const struct stb_modtab *t);

/* Generation of the current table (changes with every rebuild). Lock-free. */
uint64_t stb_mods_gen(struct stb_mods *r);

/* Rebuilds r's table. forced = false: only when the minimum interval since
 * the last rebuild has passed (100 ms remote, 1 ms for pid 0) and, for pid
 * 0, the dynamic linker's counters changed; and never while another thread
 * rebuilds. deadline_ns (stb_now_ns clock, 0 = none): a rebuild not done by
 * then is abandoned (the old table stays). Tables acquired before stay valid.
 * Returns 1 when a new table was published, 0 when none was needed, or
 * -errno (-ETIMEDOUT, -ESRCH, -ENOMEM...). */
int stb_mods_refresh(struct stb_mods *r, bool forced, uint64_t deadline_ns);

/* Tables published since stb_mods_new. */
uint64_t stb_mods_refreshes(struct stb_mods *r);

/* Lookups in a table (binary search). NULL when nothing holds the address. */
const struct stb_mod *stb_modtab_find(const struct stb_modtab *t, uint64_t ip);
const struct stb_seg *stb_modtab_find_seg(const struct stb_modtab *t, uint64_t addr);

/* Opens a file that r's target maps (path as in /proc/PID/maps, one mapping
 * [map_lo, map_hi) of it) through /proc/PID/map_files, /proc/PID/root or,
 * the target gone, the path itself (frozen: under its sysroot, or --exe),
 * and checks that it is the file mapped: regular, same device and inode,
 * not served by FUSE (whose daemon the target could be). Returns an fd
 * (O_RDONLY | O_CLOEXEC; read it with pread, never map it) or -errno
 * (-ESTALE: another file now; -ENOENT; -EPERM). */
int stb_mods_open(const struct stb_mods *r, const char *path, dev_t dev, ino_t ino, uint64_t map_lo,
		  uint64_t map_hi);

/* process_vm_readv of exactly len bytes. Returns 0, -EFAULT (short or
 * unmapped), or -errno. */
int stb_mods_read_target(pid_t pid, uint64_t addr, void *dst, size_t len);

#endif /* STB_RUNTIME_STACKS_UNWIND_MODULES_H */
