/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwinding from registers plus a stack copy (unwind.h). Owns the module
 * table of a target process (built from /proc/PID/maps and local read-only
 * mappings of the mapped ELF files), a per-process cache of CFI rules
 * computed from .eh_frame (the fast path), the libunwind remote address space
 * for the frames those rules cannot describe (accessors reading the stack
 * copy / module images / process_vm_readv, find_proc_info over each module's
 * .eh_frame_hdr table), and the frame-pointer walker.
 */
#include "unwind.h"
#include "util.h"

#include <stb/abi.h>

#include <assert.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <libunwind.h>

/* Exported by libunwind-x86_64.so but declared only in libunwind's private
 * headers: searches a UNW_INFO_FORMAT_REMOTE_TABLE through the accessors. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

/* DWARF pointer encodings used by .eh_frame_hdr (LSB "DWARF Extensions"). */
enum {
	STB_EH_PE_absptr = 0x00, STB_EH_PE_udata2 = 0x02, STB_EH_PE_udata4 = 0x03,
	STB_EH_PE_udata8 = 0x04, STB_EH_PE_sdata2 = 0x0a, STB_EH_PE_sdata4 = 0x0b,
	STB_EH_PE_sdata8 = 0x0c, STB_EH_PE_pcrel = 0x10, STB_EH_PE_datarel = 0x30,
	STB_EH_PE_omit = 0xff,
};

#define STB_UNW_PAGE 4096u
#define STB_UNW_RCACHE 8192u /* rule cache entries per proc (power of 2) */
#define STB_UNW_PCACHE_PAGES 4u
/* Minimum time between two automatic refreshes of a remote module table. */
#define STB_UNW_REMOTE_REFRESH_NS (100ull * 1000 * 1000)
/* Same for pid 0, where the check itself (dl_iterate_phdr counters) is cheap. */
#define STB_UNW_SELF_REFRESH_NS (1ull * 1000 * 1000)

/* A target address range served from local memory. */
struct stb_unw_seg {
	uint64_t lo, hi;
	const uint8_t *local; /* byte at target address lo */
	int direct;           /* local == lo: our own memory, read without ASan checks */
};

struct stb_unw_mod {
	uint64_t lo, hi; /* executable range */
	uint64_t bias;
	unsigned flags;  /* STB_UNW_MOD_* */
	unsigned build_id_len;
	uint8_t build_id[64];
	char *path;
	dev_t dev;
	ino_t ino;
	void *image;     /* mmap of the file, or malloc'ed vdso copy; owned */
	size_t image_len;
	int image_malloced;
	int has_table;
	unw_dyn_info_t di;
	struct stb_unw_mod *borrowed_from; /* during a rebuild: old module whose image this one uses */
};

struct stb_unw_modtab {
	struct stb_unw_mod *mods; /* sorted by lo */
	size_t nmods, capmods;
	struct stb_unw_seg *segs; /* sorted by lo */
	size_t nsegs, capsegs;
};

struct stb_unw_proc {
	pid_t pid;       /* as given: 0 = self */
	pid_t read_pid;  /* pid for process_vm_readv and /proc */
	unw_addr_space_t as;
	pthread_rwlock_t lock;          /* protects tab: walks read, swaps write */
	pthread_mutex_t refresh_lock;   /* one rebuild at a time */
	struct stb_unw_modtab *tab;
	_Atomic uint64_t last_refresh_ns;
	unsigned long long dl_adds, dl_subs; /* pid 0: dl_iterate_phdr counters at last rebuild */
	struct stb_unw_rcache_ent *rcache; /* STB_UNW_RCACHE entries */
	_Atomic uint64_t st_walks, st_steps, st_frames, st_copy_reads, st_image_reads,
		st_target_reads, st_target_read_failures, st_refreshes;
};

/* One cached unwind rule (struct stb_unw_rule packed), behind a seqlock:
 * walks on several threads fill and read the cache concurrently. */
struct stb_unw_rcache_ent {
	_Atomic uint64_t seq; /* odd while being written */
	_Atomic uint64_t ip;  /* lookup address; 0 = empty */
	_Atomic uint64_t w[3];
};

struct stb_unw_pcache {
	uint64_t page[STB_UNW_PCACHE_PAGES];
	int state[STB_UNW_PCACHE_PAGES]; /* 0 empty, 1 valid, 2 unreadable */
	unsigned next;
	uint8_t data[STB_UNW_PCACHE_PAGES][STB_UNW_PAGE];
};

/* Per-walk state, the `arg` of every libunwind accessor. */
struct stb_unw_walkctx {
	struct stb_unw_proc *p;
	struct stb_unw_modtab *tab;
	struct stb_regs cur; /* registers of the frame libunwind starts from */
	uint64_t ip0;        /* rip handed to libunwind (ip - 1 for a return address) */
	uint64_t copy_lo;
	const uint8_t *copy;
	size_t copy_len;
	const struct stb_unw_seg *last_seg;
	const struct stb_unw_mod *last_mod;
	struct stb_unw_pcache *pc;
	int refresh_tried;
	int copy_only;  /* STB_UNW_COPY_ONLY */
	int fpi_failed; /* find_proc_info found no CFI since the last reset */
	uint64_t n_copy, n_image, n_target, n_target_fail;
};

/* Forgets every rule; called with p->lock held for writing. */
static void stb_unw_rcache_clear(struct stb_unw_proc *p)
{
	for (unsigned i = 0; i < STB_UNW_RCACHE; i++) {
		uint64_t s = atomic_load_explicit(&p->rcache[i].seq, memory_order_relaxed);
		atomic_store_explicit(&p->rcache[i].seq, s + 1, memory_order_relaxed);
		atomic_store_explicit(&p->rcache[i].ip, 0, memory_order_relaxed);
		atomic_store_explicit(&p->rcache[i].seq, s + 2, memory_order_release);
	}
}


__attribute__((no_sanitize("address", "thread")))
void stb_unw_copy_raw(void *dst, const void *src, size_t n)
{
	const volatile uint8_t *s = src;
	uint8_t *d = dst;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = *(const volatile uint64_t *)(const volatile void *)(s + i);
		__builtin_memcpy(d + i, &v, 8);
	}
	for (; i < n; i++)
		d[i] = s[i];
}

/* ---------------------------------------------------------------- modules */

static void stb_unw_mod_release(struct stb_unw_mod *m)
{
	if (m->image) {
		if (m->image_malloced)
			free(m->image);
		else
			munmap(m->image, m->image_len);
	}
	m->image = NULL;
	free(m->path);
	m->path = NULL;
}

static void stb_unw_modtab_free(struct stb_unw_modtab *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nmods; i++)
		stb_unw_mod_release(&t->mods[i]);
	free(t->mods);
	free(t->segs);
	free(t);
}

static struct stb_unw_mod *stb_unw_modtab_add(struct stb_unw_modtab *t)
{
	if (t->nmods == t->capmods) {
		size_t cap = t->capmods ? t->capmods * 2 : 32;
		struct stb_unw_mod *n = realloc(t->mods, cap * sizeof(*n));
		if (!n)
			return NULL;
		t->mods = n;
		t->capmods = cap;
	}
	struct stb_unw_mod *m = &t->mods[t->nmods++];
	memset(m, 0, sizeof(*m));
	return m;
}

static int stb_unw_modtab_add_seg(struct stb_unw_modtab *t, uint64_t lo, uint64_t hi,
				  const uint8_t *local, int direct)
{
	if (hi <= lo)
		return 0;
	if (t->nsegs == t->capsegs) {
		size_t cap = t->capsegs ? t->capsegs * 2 : 64;
		struct stb_unw_seg *n = realloc(t->segs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		t->segs = n;
		t->capsegs = cap;
	}
	t->segs[t->nsegs++] = (struct stb_unw_seg){ .lo = lo, .hi = hi, .local = local, .direct = direct };
	return 0;
}

static int stb_unw_mod_cmp(const void *a, const void *b)
{
	const struct stb_unw_mod *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int stb_unw_seg_cmp(const void *a, const void *b)
{
	const struct stb_unw_seg *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static const struct stb_unw_mod *stb_unw_modtab_find(const struct stb_unw_modtab *t, uint64_t ip)
{
	size_t lo = 0, hi = t->nmods;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->mods[mid].lo <= ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct stb_unw_mod *m = &t->mods[lo - 1];
	return ip < m->hi ? m : NULL;
}

static const struct stb_unw_seg *stb_unw_modtab_find_seg(const struct stb_unw_modtab *t, uint64_t addr)
{
	size_t lo = 0, hi = t->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->segs[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct stb_unw_seg *s = &t->segs[lo - 1];
	return addr < s->hi ? s : NULL;
}

/* Reads a DW_EH_PE-encoded value at *pos of buf (target address of buf[0] is
 * base). Only the fixed-size formats; absolute, pc- and data-relative. */
static int stb_unw_read_encoded(const uint8_t *buf, size_t len, size_t *pos, uint8_t enc,
				uint64_t base, uint64_t datarel, uint64_t *out)
{
	uint64_t v;
	size_t n;

	switch (enc & 0x0f) {
	case STB_EH_PE_absptr: n = 8; break;
	case STB_EH_PE_udata2: case STB_EH_PE_sdata2: n = 2; break;
	case STB_EH_PE_udata4: case STB_EH_PE_sdata4: n = 4; break;
	case STB_EH_PE_udata8: case STB_EH_PE_sdata8: n = 8; break;
	default: return -EINVAL;
	}
	if (*pos > len || len - *pos < n)
		return -EINVAL;
	switch (enc & 0x0f) {
	case STB_EH_PE_udata2: { uint16_t x; memcpy(&x, buf + *pos, 2); v = x; break; }
	case STB_EH_PE_sdata2: { int16_t x; memcpy(&x, buf + *pos, 2); v = (uint64_t)(int64_t)x; break; }
	case STB_EH_PE_udata4: { uint32_t x; memcpy(&x, buf + *pos, 4); v = x; break; }
	case STB_EH_PE_sdata4: { int32_t x; memcpy(&x, buf + *pos, 4); v = (uint64_t)(int64_t)x; break; }
	default: memcpy(&v, buf + *pos, 8); break;
	}
	switch (enc & 0x70) {
	case STB_EH_PE_absptr: break;
	case STB_EH_PE_pcrel: v += base + *pos; break;
	case STB_EH_PE_datarel: v += datarel; break;
	default: return -EINVAL;
	}
	*pos += n;
	*out = v;
	return 0;
}

/* Sets up m->di from the .eh_frame_hdr at target address haddr, whose len
 * bytes are readable locally at h. */
static void stb_unw_mod_set_table(struct stb_unw_mod *m, const uint8_t *h, size_t len, uint64_t haddr)
{
	size_t pos = 4;
	uint64_t eh_frame, count;

	if (len < 4 || h[0] != 1 || h[1] == STB_EH_PE_omit || h[2] == STB_EH_PE_omit ||
	    h[3] != (STB_EH_PE_datarel | STB_EH_PE_sdata4))
		goto notable;
	if (stb_unw_read_encoded(h, len, &pos, h[1], haddr, haddr, &eh_frame) < 0 ||
	    stb_unw_read_encoded(h, len, &pos, h[2], haddr, haddr, &count) < 0)
		goto notable;
	if (count == 0 || count > (len - pos) / 8)
		goto notable;
	m->di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	m->di.start_ip = m->lo;
	m->di.end_ip = m->hi;
	m->di.gp = 0; /* x86-64 .eh_frame uses no data-relative pointers */
	m->di.u.rti.name_ptr = 0;
	m->di.u.rti.segbase = haddr;
	m->di.u.rti.table_data = haddr + pos;
	m->di.u.rti.table_len = count * 8 / sizeof(unw_word_t);
	m->has_table = 1;
	return;
notable:
	m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
}

/* Finds the NT_GNU_BUILD_ID descriptor in a note area. */
static unsigned stb_unw_find_build_id(const uint8_t *n, size_t len, size_t align, uint8_t *out, size_t outlen)
{
	size_t pos = 0;

	if (align < 4)
		align = 4;
	while (len - pos >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		memcpy(&nh, n + pos, sizeof(nh));
		pos += sizeof(nh);
		size_t namesz = (nh.n_namesz + align - 1) & ~(align - 1);
		size_t descsz = (nh.n_descsz + align - 1) & ~(align - 1);
		if (namesz > len - pos || descsz > len - pos - namesz)
			return 0;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(n + pos, "GNU", 4) == 0) {
			if (nh.n_descsz == 0 || nh.n_descsz > outlen)
				return 0;
			memcpy(out, n + pos + namesz, nh.n_descsz);
			return nh.n_descsz;
		}
		pos += namesz + descsz;
	}
	return 0;
}

/* Validates an ELF image and returns its program headers (in place). */
static const Elf64_Phdr *stb_unw_elf_phdrs(const uint8_t *img, size_t len, unsigned *phnum)
{
	Elf64_Ehdr eh;

	if (len < sizeof(eh))
		return NULL;
	memcpy(&eh, img, sizeof(eh));
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff % 8 != 0 ||
	    eh.e_phoff > len || (len - eh.e_phoff) / sizeof(Elf64_Phdr) < eh.e_phnum)
		return NULL;
	*phnum = eh.e_phnum;
	return (const Elf64_Phdr *)(const void *)(img + eh.e_phoff);
}

static int stb_unw_read_target(pid_t pid, uint64_t addr, void *dst, size_t len)
{
	struct iovec l = { .iov_base = dst, .iov_len = len };
	struct iovec r = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

/* Fills a module from an ELF image that is laid out as a file (offsets).
 * exec_off/exec_start: one executable mapping of it in the target. */
static int stb_unw_mod_from_file(struct stb_unw_modtab *t, struct stb_unw_mod *m, pid_t pid,
				 uint64_t exec_start, uint64_t exec_off)
{
	const uint8_t *img = m->image;
	const Elf64_Phdr *ph;
	unsigned phnum, i;
	int have_bias = 0, ret;

	ph = stb_unw_elf_phdrs(img, m->image_len, &phnum);
	if (!ph)
		return -ENOEXEC;
	for (i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) &&
		    (ph[i].p_offset & ~(uint64_t)(STB_UNW_PAGE - 1)) == exec_off) {
			m->bias = exec_start - (ph[i].p_vaddr & ~(uint64_t)(STB_UNW_PAGE - 1));
			have_bias = 1;
			break;
		}
	}
	if (!have_bias)
		return -ENOEXEC;
	m->lo = UINT64_MAX;
	m->hi = 0;
	for (i = 0; i < phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		uint64_t lo = ph[i].p_vaddr + m->bias;
		if (ph[i].p_flags & PF_X) {
			if (lo < m->lo)
				m->lo = lo;
			if (lo + ph[i].p_memsz > m->hi)
				m->hi = lo + ph[i].p_memsz;
		}
		/* Writable segments differ from the file once relocated: those are
		 * read from the target. */
		if (!(ph[i].p_flags & PF_W) && ph[i].p_offset <= m->image_len &&
		    ph[i].p_filesz <= m->image_len - ph[i].p_offset) {
			ret = stb_unw_modtab_add_seg(t, lo, lo + ph[i].p_filesz, img + ph[i].p_offset, 0);
			if (ret < 0)
				return ret;
		}
	}
	if (m->lo >= m->hi)
		return -ENOEXEC;
	for (i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_NOTE && m->build_id_len == 0 && ph[i].p_offset <= m->image_len &&
		    ph[i].p_filesz <= m->image_len - ph[i].p_offset)
			m->build_id_len = stb_unw_find_build_id(img + ph[i].p_offset, ph[i].p_filesz,
								ph[i].p_align, m->build_id, sizeof(m->build_id));
	}
	/* The build id in the target's memory must be the file's. */
	for (i = 0; i < phnum && m->build_id_len && pid; i++) {
		if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > 4096)
			continue;
		uint8_t note[4096], id[64];
		if (stb_unw_read_target(pid, ph[i].p_vaddr + m->bias, note, ph[i].p_filesz) < 0)
			continue;
		unsigned n = stb_unw_find_build_id(note, ph[i].p_filesz, ph[i].p_align, id, sizeof(id));
		if (n && (n != m->build_id_len || memcmp(id, m->build_id, n) != 0)) {
			m->flags |= STB_UNW_MOD_CHANGED | STB_UNW_MOD_FP_ONLY;
			return 0;
		}
	}
	for (i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_GNU_EH_FRAME && ph[i].p_offset <= m->image_len &&
		    ph[i].p_filesz <= m->image_len - ph[i].p_offset) {
			stb_unw_mod_set_table(m, img + ph[i].p_offset, ph[i].p_filesz, ph[i].p_vaddr + m->bias);
			return 0;
		}
	}
	m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
	return 0;
}

/* Fills a module from a memory image of [start, start + len) (the vdso). */
static int stb_unw_mod_from_memory(struct stb_unw_modtab *t, struct stb_unw_mod *m,
				   const uint8_t *img, size_t len, uint64_t start, int direct)
{
	const Elf64_Phdr *ph;
	unsigned phnum, i;
	int have_bias = 0;

	ph = stb_unw_elf_phdrs(img, len, &phnum);
	if (!ph)
		return -ENOEXEC;
	for (i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0) {
			m->bias = start - ph[i].p_vaddr;
			have_bias = 1;
			break;
		}
	}
	if (!have_bias)
		return -ENOEXEC;
	m->lo = start;
	m->hi = start + len;
	int ret = stb_unw_modtab_add_seg(t, start, start + len, img, direct);
	if (ret < 0)
		return ret;
	for (i = 0; i < phnum; i++) {
		uint64_t a = ph[i].p_vaddr + m->bias;
		if (a < start || a - start > len || ph[i].p_memsz > len - (a - start))
			continue;
		if (ph[i].p_type == PT_NOTE && !m->build_id_len)
			m->build_id_len = stb_unw_find_build_id(img + (a - start), ph[i].p_memsz,
								ph[i].p_align, m->build_id, sizeof(m->build_id));
		if (ph[i].p_type == PT_GNU_EH_FRAME && !m->has_table)
			stb_unw_mod_set_table(m, img + (a - start), ph[i].p_memsz, a);
	}
	if (!m->has_table)
		m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
	return 0;
}

/* One line of /proc/PID/maps. */
struct stb_unw_mapline {
	uint64_t start, end, off;
	unsigned dmaj, dmin;
	unsigned long ino;
	char perms[5];
	const char *path; /* "" for anonymous */
	int deleted;
};

static int stb_unw_parse_mapline(char *line, struct stb_unw_mapline *ml)
{
	int n = 0;
	size_t len;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %lu %n", &ml->start, &ml->end,
		   ml->perms, &ml->off, &ml->dmaj, &ml->dmin, &ml->ino, &n) < 7)
		return -EINVAL;
	char *path = line + n;
	while (*path == ' ')
		path++;
	len = strlen(path);
	while (len && (path[len - 1] == '\n' || path[len - 1] == ' '))
		path[--len] = '\0';
	ml->deleted = 0;
	if (len > 10 && strcmp(path + len - 10, " (deleted)") == 0) {
		path[len - 10] = '\0';
		ml->deleted = 1;
	}
	ml->path = path;
	return 0;
}

/* Old module with the same identity (its image can be taken over). */
static struct stb_unw_mod *stb_unw_find_old(struct stb_unw_modtab *old, const struct stb_unw_mapline *ml,
					    uint64_t exec_start)
{
	if (!old)
		return NULL;
	for (size_t i = 0; i < old->nmods; i++) {
		struct stb_unw_mod *o = &old->mods[i];
		if (o->image && !o->image_malloced && o->ino == ml->ino &&
		    o->dev == makedev(ml->dmaj, ml->dmin) && exec_start >= o->lo && exec_start < o->hi &&
		    o->path && strcmp(o->path, ml->path) == 0)
			return o;
	}
	return NULL;
}

static int stb_unw_open_mapped(pid_t pid, const struct stb_unw_mapline *ml, struct stat *st)
{
	char buf[PATH_MAX + 64];
	int fd;

	snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, ml->start, ml->end);
	fd = open(buf, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(buf, sizeof(buf), "/proc/%d/root%s", (int)pid, ml->path);
		fd = open(buf, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		fd = open(ml->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		return -ENOEXEC;
	}
	return fd;
}

/* A loaded object of this process, from dl_iterate_phdr. */
struct stb_unw_dlobj {
	uint64_t base;
	const Elf64_Phdr *phdr;
	unsigned phnum;
};

struct stb_unw_dlset {
	struct stb_unw_dlobj *objs;
	size_t n, cap;
	int oom;
};

static int stb_unw_dl_collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct stb_unw_dlset *d = arg;

	(void)size;
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 32;
		struct stb_unw_dlobj *n = realloc(d->objs, cap * sizeof(*n));
		if (!n) {
			d->oom = 1;
			return 1;
		}
		d->objs = n;
		d->cap = cap;
	}
	d->objs[d->n++] = (struct stb_unw_dlobj){ .base = info->dlpi_addr, .phdr = info->dlpi_phdr,
						   .phnum = info->dlpi_phnum };
	return 0;
}

/* pid 0 without a usable file: describe the loaded object holding addr from
 * its program headers, reading its memory in place. */
static int stb_unw_mod_from_self(struct stb_unw_modtab *t, struct stb_unw_mod *m, uint64_t addr)
{
	struct stb_unw_dlset d = { 0 };
	int ret = -ENOENT;

	dl_iterate_phdr(stb_unw_dl_collect, &d);
	if (d.oom) {
		ret = -ENOMEM;
		goto cleanup;
	}
	for (size_t k = 0; k < d.n && ret == -ENOENT; k++) {
		const struct stb_unw_dlobj *o = &d.objs[k];
		int hit = 0;
		for (unsigned i = 0; i < o->phnum; i++) {
			const Elf64_Phdr *ph = &o->phdr[i];
			if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && addr >= o->base + ph->p_vaddr &&
			    addr - (o->base + ph->p_vaddr) < ph->p_memsz)
				hit = 1;
		}
		if (!hit)
			continue;
		m->bias = o->base;
		m->lo = UINT64_MAX;
		m->hi = 0;
		ret = 0;
		for (unsigned i = 0; i < o->phnum && ret == 0; i++) {
			const Elf64_Phdr *ph = &o->phdr[i];
			uint64_t lo = o->base + ph->p_vaddr;
			const uint8_t *mem = (const uint8_t *)(uintptr_t)lo;
			if (ph->p_type == PT_LOAD) {
				if ((ph->p_flags & PF_X) && lo < m->lo)
					m->lo = lo;
				if ((ph->p_flags & PF_X) && lo + ph->p_memsz > m->hi)
					m->hi = lo + ph->p_memsz;
				ret = stb_unw_modtab_add_seg(t, lo, lo + ph->p_memsz, mem, 1);
			} else if (ph->p_type == PT_NOTE && !m->build_id_len) {
				m->build_id_len = stb_unw_find_build_id(mem, ph->p_memsz, ph->p_align, m->build_id,
									sizeof(m->build_id));
			}
		}
		for (unsigned i = 0; i < o->phnum && ret == 0; i++)
			if (o->phdr[i].p_type == PT_GNU_EH_FRAME)
				stb_unw_mod_set_table(m, (const uint8_t *)(uintptr_t)(o->base + o->phdr[i].p_vaddr),
						      o->phdr[i].p_memsz, o->base + o->phdr[i].p_vaddr);
		if (ret == 0 && !m->has_table)
			m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
	}
cleanup:
	free(d.objs);
	return ret;
}

/* Adds the module of a file-backed executable mapping. Returns 0 or -ENOMEM. */
static int stb_unw_add_file_mod(struct stb_unw_proc *p, struct stb_unw_modtab *t, struct stb_unw_modtab *old,
				const struct stb_unw_mapline *ml)
{
	struct stb_unw_mod *m, *o;
	struct stat st;
	size_t nsegs;
	int fd = -1, ret;

	/* The same file mapped again inside a module already added. */
	for (size_t i = 0; i < t->nmods; i++) {
		struct stb_unw_mod *x = &t->mods[i];
		if (x->ino == ml->ino && x->dev == makedev(ml->dmaj, ml->dmin) && ml->start >= x->lo &&
		    ml->start < x->hi)
			return 0;
	}
	m = stb_unw_modtab_add(t);
	if (!m)
		return -ENOMEM;
	m->dev = makedev(ml->dmaj, ml->dmin);
	m->ino = ml->ino;
	m->path = strdup(ml->path);
	if (!m->path)
		return -ENOMEM; /* m is released with t */
	o = stb_unw_find_old(old, ml, ml->start);
	if (o) {
		/* Use the old image; ownership moves when the tables are swapped. */
		m->image = o->image;
		m->image_len = o->image_len;
		m->borrowed_from = o;
	} else {
		fd = stb_unw_open_mapped(p->read_pid, ml, &st);
		if (fd < 0)
			goto nofile;
		if (st.st_ino != ml->ino || major(st.st_dev) != ml->dmaj || minor(st.st_dev) != ml->dmin) {
			/* The path now names another file than the one mapped. */
			m->flags |= STB_UNW_MOD_CHANGED;
			goto nofile;
		}
		if (st.st_size <= 0)
			goto nofile;
		m->image_len = (size_t)st.st_size;
		m->image = mmap(NULL, m->image_len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m->image == MAP_FAILED) {
			m->image = NULL;
			goto nofile;
		}
		close(fd);
		fd = -1;
	}
	nsegs = t->nsegs;
	ret = stb_unw_mod_from_file(t, m, p->read_pid, ml->start, ml->off);
	if (ret == 0)
		return 0;
	if (ret == -ENOMEM)
		return ret;
	t->nsegs = nsegs;
	if (!o && m->image)
		munmap(m->image, m->image_len);
	m->image = NULL;
	m->borrowed_from = NULL;
nofile:
	if (fd >= 0)
		close(fd);
	m->bias = 0;
	m->build_id_len = 0;
	m->has_table = 0;
	if (p->pid == 0) {
		/* Our own memory: read the loaded object in place. */
		unsigned keep = m->flags & STB_UNW_MOD_CHANGED;
		m->flags = 0;
		nsegs = t->nsegs;
		ret = stb_unw_mod_from_self(t, m, ml->start);
		if (ret == 0)
			return 0;
		t->nsegs = nsegs;
		if (ret == -ENOMEM)
			return ret;
		m->flags = keep;
	}
	/* Keep the range known so that its ips do not trigger refreshes. */
	m->lo = ml->start;
	m->hi = ml->end;
	m->flags |= STB_UNW_MOD_FP_ONLY | (m->flags & STB_UNW_MOD_CHANGED ? 0 : STB_UNW_MOD_NO_FILE);
	return 0;
}

static int stb_unw_add_vdso(struct stb_unw_proc *p, struct stb_unw_modtab *t, const struct stb_unw_mapline *ml)
{
	struct stb_unw_mod *m = stb_unw_modtab_add(t);
	size_t len = ml->end - ml->start, nsegs = t->nsegs;
	int ret;

	if (!m)
		return -ENOMEM;
	m->flags = STB_UNW_MOD_VDSO;
	m->path = strdup("[vdso]");
	if (!m->path)
		return -ENOMEM;
	if (p->pid == 0 && ml->start == getauxval(AT_SYSINFO_EHDR)) {
		ret = stb_unw_mod_from_memory(t, m, (const uint8_t *)(uintptr_t)ml->start, len, ml->start, 1);
	} else {
		m->image = malloc(len);
		if (!m->image)
			return -ENOMEM;
		m->image_malloced = 1;
		m->image_len = len;
		ret = stb_unw_read_target(p->read_pid, ml->start, m->image, len);
		if (ret == 0)
			ret = stb_unw_mod_from_memory(t, m, m->image, len, ml->start, 0);
	}
	if (ret == -ENOMEM)
		return ret;
	if (ret < 0) {
		t->nsegs = nsegs;
		m->lo = ml->start;
		m->hi = ml->end;
		m->has_table = 0;
		m->flags |= STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE;
	}
	return 0;
}

static int stb_unw_dl_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

/*
 * Builds a module table for p from /proc/PID/maps. Modules equal to ones of
 * old use their images (borrowed_from); the caller moves ownership once old
 * is unreachable. Returns 0 or -errno.
 */
static int stb_unw_build(struct stb_unw_proc *p, struct stb_unw_modtab *old, struct stb_unw_modtab **out)
{
	struct stb_unw_modtab *t = NULL;
	char path[64], *line = NULL;
	size_t linecap = 0;
	FILE *f = NULL;
	int ret = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)p->read_pid);
	f = fopen(path, "re");
	if (!f) {
		ret = errno == ENOENT ? -ESRCH : -errno;
		goto cleanup;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		ret = -ENOMEM;
		goto cleanup;
	}
	while (getline(&line, &linecap, f) > 0) {
		struct stb_unw_mapline ml;

		if (stb_unw_parse_mapline(line, &ml) < 0 || ml.perms[2] != 'x')
			continue;
		if (strcmp(ml.path, "[vdso]") == 0) {
			ret = stb_unw_add_vdso(p, t, &ml);
		} else if (ml.path[0] == '/' && ml.ino != 0) {
			ret = stb_unw_add_file_mod(p, t, old, &ml);
		} else {
			struct stb_unw_mod *m = stb_unw_modtab_add(t);
			if (!m) {
				ret = -ENOMEM;
			} else {
				m->lo = ml.start;
				m->hi = ml.end;
				m->flags = STB_UNW_MOD_ANON | STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE;
				m->path = strdup(ml.path);
				ret = m->path ? 0 : -ENOMEM;
			}
		}
		if (ret < 0)
			goto cleanup;
	}
	if (ferror(f)) {
		ret = -EIO;
		goto cleanup;
	}
	qsort(t->mods, t->nmods, sizeof(*t->mods), stb_unw_mod_cmp);
	qsort(t->segs, t->nsegs, sizeof(*t->segs), stb_unw_seg_cmp);
	*out = t;
	t = NULL;
cleanup:
	if (t) {
		for (size_t i = 0; i < t->nmods; i++)
			if (t->mods[i].borrowed_from)
				t->mods[i].image = NULL; /* belongs to old */
		stb_unw_modtab_free(t);
	}
	free(line);
	if (f)
		fclose(f);
	return ret;
}

/* Rebuilds p's module table. forced = 0: only when due and (pid 0) when the
 * dynamic linker's counters changed. Called without p->lock held. */
static int stb_unw_refresh(struct stb_unw_proc *p, int forced)
{
	struct stb_unw_modtab *t = NULL, *old;
	unsigned long long counts[2] = { 0, 0 };
	int ret;

	if (forced) {
		pthread_mutex_lock(&p->refresh_lock);
	} else if (pthread_mutex_trylock(&p->refresh_lock) != 0) {
		return 0; /* someone else is refreshing */
	}
	if (p->pid == 0) {
		dl_iterate_phdr(stb_unw_dl_counts, counts);
		if (!forced && counts[0] == p->dl_adds && counts[1] == p->dl_subs) {
			atomic_store_explicit(&p->last_refresh_ns, stb_now_ns(), memory_order_relaxed);
			ret = 0;
			goto cleanup;
		}
	}
	old = p->tab; /* stable: only changed under refresh_lock */
	ret = stb_unw_build(p, old, &t);
	if (ret < 0)
		goto cleanup;
	pthread_rwlock_wrlock(&p->lock);
	p->tab = t;
	stb_unw_rcache_clear(p); /* rules may describe code that is gone */
	pthread_rwlock_unlock(&p->lock);
	/* No walk sees old any more: hand borrowed images over, free the rest. */
	for (size_t i = 0; i < t->nmods; i++) {
		if (t->mods[i].borrowed_from) {
			t->mods[i].borrowed_from->image = NULL;
			t->mods[i].borrowed_from = NULL;
		}
	}
	stb_unw_modtab_free(old);
	t = NULL;
	p->dl_adds = counts[0];
	p->dl_subs = counts[1];
	atomic_fetch_add_explicit(&p->st_refreshes, 1, memory_order_relaxed);
	atomic_store_explicit(&p->last_refresh_ns, stb_now_ns(), memory_order_relaxed);
cleanup:
	pthread_mutex_unlock(&p->refresh_lock);
	return ret;
}

int stb_unw_proc_refresh(struct stb_unw_proc *p)
{
	if (!p)
		return -EINVAL;
	return stb_unw_refresh(p, 1);
}

int stb_unw_proc_module(struct stb_unw_proc *p, uint64_t ip, struct stb_unw_module_info *out)
{
	const struct stb_unw_mod *m;
	int ret = -ENOENT;

	if (!p || !out)
		return -EINVAL;
	pthread_rwlock_rdlock(&p->lock);
	m = stb_unw_modtab_find(p->tab, ip);
	if (m) {
		memset(out, 0, sizeof(*out));
		out->lo = m->lo;
		out->hi = m->hi;
		out->bias = m->bias;
		out->flags = m->flags;
		out->build_id_len = m->build_id_len;
		memcpy(out->build_id, m->build_id, m->build_id_len);
		snprintf(out->path, sizeof(out->path), "%s", m->path ? m->path : "");
		ret = 0;
	}
	pthread_rwlock_unlock(&p->lock);
	return ret;
}

void stb_unw_proc_stats(struct stb_unw_proc *p, struct stb_unw_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->walks = atomic_load_explicit(&p->st_walks, memory_order_relaxed);
	out->steps = atomic_load_explicit(&p->st_steps, memory_order_relaxed);
	out->frames = atomic_load_explicit(&p->st_frames, memory_order_relaxed);
	out->copy_reads = atomic_load_explicit(&p->st_copy_reads, memory_order_relaxed);
	out->image_reads = atomic_load_explicit(&p->st_image_reads, memory_order_relaxed);
	out->target_reads = atomic_load_explicit(&p->st_target_reads, memory_order_relaxed);
	out->target_read_failures = atomic_load_explicit(&p->st_target_read_failures, memory_order_relaxed);
	out->refreshes = atomic_load_explicit(&p->st_refreshes, memory_order_relaxed);
}

/* ------------------------------------------------------------------ reads */

/* Reads len bytes of target memory through the walk's page cache. */
static int stb_unw_walk_read_target(struct stb_unw_walkctx *w, uint64_t addr, uint8_t *dst, size_t len)
{
	while (len) {
		uint64_t page = addr & ~(uint64_t)(STB_UNW_PAGE - 1);
		size_t off = (size_t)(addr - page), n = STB_UNW_PAGE - off;
		unsigned i;

		if (n > len)
			n = len;
		if (!w->pc) {
			w->pc = calloc(1, sizeof(*w->pc));
			if (!w->pc)
				return -ENOMEM;
		}
		for (i = 0; i < STB_UNW_PCACHE_PAGES; i++)
			if (w->pc->state[i] && w->pc->page[i] == page)
				break;
		if (i == STB_UNW_PCACHE_PAGES) {
			i = w->pc->next++ % STB_UNW_PCACHE_PAGES;
			w->pc->page[i] = page;
			w->n_target++;
			if (stb_unw_read_target(w->p->read_pid, page, w->pc->data[i], STB_UNW_PAGE) == 0) {
				w->pc->state[i] = 1;
			} else {
				w->pc->state[i] = 2;
				w->n_target_fail++;
			}
		}
		if (w->pc->state[i] != 1)
			return -EFAULT;
		memcpy(dst, w->pc->data[i] + off, n);
		dst += n;
		addr += n;
		len -= n;
	}
	return 0;
}

/* Reads len (<= 16) bytes at target address addr: stack copy, then module
 * images, then the target itself. */
static int stb_unw_walk_read(struct stb_unw_walkctx *w, uint64_t addr, void *dst, size_t len)
{
	const struct stb_unw_seg *s;

	if (addr - w->copy_lo < w->copy_len && w->copy_len - (addr - w->copy_lo) >= len) {
		memcpy(dst, w->copy + (addr - w->copy_lo), len);
		w->n_copy++;
		return 0;
	}
	s = w->last_seg;
	if (!s || addr < s->lo || addr >= s->hi) {
		s = stb_unw_modtab_find_seg(w->tab, addr);
		if (s)
			w->last_seg = s;
	}
	if (s) {
		size_t n = s->hi - addr < len ? (size_t)(s->hi - addr) : len;
		if (s->direct)
			stb_unw_copy_raw(dst, s->local + (addr - s->lo), n);
		else
			memcpy(dst, s->local + (addr - s->lo), n);
		if (n < len)
			memset((uint8_t *)dst + n, 0, len - n); /* past the end of the section */
		w->n_image++;
		return 0;
	}
	if (w->copy_only)
		return -EFAULT;
	return stb_unw_walk_read_target(w, addr, dst, len);
}

/* The module of ip; on a miss, one (rate-limited) refresh per walk. Called
 * with p->lock held for reading; may drop and retake it. */
static const struct stb_unw_mod *stb_unw_walk_mod(struct stb_unw_walkctx *w, uint64_t ip)
{
	const struct stb_unw_mod *m = w->last_mod;
	struct stb_unw_proc *p = w->p;

	if (m && ip >= m->lo && ip < m->hi)
		return m;
	m = stb_unw_modtab_find(w->tab, ip);
	if (!m && !w->refresh_tried) {
		uint64_t min = p->pid ? STB_UNW_REMOTE_REFRESH_NS : STB_UNW_SELF_REFRESH_NS;
		uint64_t now = stb_now_ns();
		w->refresh_tried = 1;
		if (now - atomic_load_explicit(&p->last_refresh_ns, memory_order_relaxed) >= min) {
			pthread_rwlock_unlock(&p->lock);
			(void)stb_unw_refresh(p, 0);
			pthread_rwlock_rdlock(&p->lock);
			w->tab = p->tab;
			w->last_seg = NULL;
			m = stb_unw_modtab_find(w->tab, ip);
		}
	}
	if (m)
		w->last_mod = m;
	return m;
}

/* ------------------------------------------------------------ CFI fast path */

/*
 * Most frames of x86-64 code are described by a CFI row of one simple shape:
 * CFA = rsp or rbp + offset, return address and callee-saved registers at
 * fixed offsets from the CFA (or unchanged). Such a row is computed once per
 * ip from the FDE (found through the module's .eh_frame_hdr table in the
 * local image), packed into a cache entry, and applied with a few reads; the
 * walk needs libunwind only for the other frames (expressions, signal
 * frames, code without CFI). libunwind's own rule cache cannot be used
 * without a lock and two sigprocmask calls per step in Debian's 1.6.2.
 */

enum {
	STB_RULE_NONE = 0,     /* not computed */
	STB_RULE_OK = 1,       /* apply it */
	STB_RULE_BOTTOM = 2,   /* return address undefined: outermost frame */
	STB_RULE_LIBUNWIND = 3, /* not expressible here: step with libunwind */
	STB_RULE_SIGNAL = 4,   /* libunwind, and the next frame's ip is exact */
};

#define STB_RULE_SAME INT16_MIN
/* Callee-saved registers the rules track, in stb_unw_rule.off order, as
 * DWARF register numbers. */
static const uint8_t stb_unw_dwreg[6] = { 6 /* rbp */, 3 /* rbx */, 12, 13, 14, 15 };
#define STB_DW_RSP 7
#define STB_DW_RA 16

struct stb_unw_rule {
	unsigned kind;
	unsigned cfa_rbp; /* CFA base: 0 rsp, 1 rbp */
	int32_t cfa_off;
	int16_t ra_off;
	int16_t off[6];   /* rbp, rbx, r12..r15: saved at CFA + off, or STB_RULE_SAME */
};

static void stb_unw_rule_pack(const struct stb_unw_rule *r, uint64_t w[3])
{
	w[0] = (uint64_t)(uint32_t)r->cfa_off | (uint64_t)(r->kind & 0xff) << 32 | (uint64_t)(r->cfa_rbp & 1) << 40 |
	       (uint64_t)(uint16_t)r->ra_off << 48;
	w[1] = (uint64_t)(uint16_t)r->off[0] | (uint64_t)(uint16_t)r->off[1] << 16 |
	       (uint64_t)(uint16_t)r->off[2] << 32 | (uint64_t)(uint16_t)r->off[3] << 48;
	w[2] = (uint64_t)(uint16_t)r->off[4] | (uint64_t)(uint16_t)r->off[5] << 16;
}

static void stb_unw_rule_unpack(const uint64_t w[3], struct stb_unw_rule *r)
{
	r->cfa_off = (int32_t)(uint32_t)w[0];
	r->kind = (unsigned)(w[0] >> 32) & 0xff;
	r->cfa_rbp = (unsigned)(w[0] >> 40) & 1;
	r->ra_off = (int16_t)(uint16_t)(w[0] >> 48);
	for (int i = 0; i < 4; i++)
		r->off[i] = (int16_t)(uint16_t)(w[1] >> (16 * i));
	r->off[4] = (int16_t)(uint16_t)w[2];
	r->off[5] = (int16_t)(uint16_t)(w[2] >> 16);
}

static struct stb_unw_rcache_ent *stb_unw_rcache_slot(struct stb_unw_proc *p, uint64_t ip)
{
	uint64_t h = ip * 0x9e3779b97f4a7c15ull;
	return &p->rcache[(h >> 40) & (STB_UNW_RCACHE - 1)];
}

static int stb_unw_rcache_get(struct stb_unw_proc *p, uint64_t ip, struct stb_unw_rule *r)
{
	struct stb_unw_rcache_ent *e = stb_unw_rcache_slot(p, ip);
	uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire), w[3];

	if (s1 & 1)
		return 0;
	if (atomic_load_explicit(&e->ip, memory_order_acquire) != ip)
		return 0;
	/* Acquire loads keep the second read of seq after them (no fences:
	 * ThreadSanitizer does not model them). */
	for (int i = 0; i < 3; i++)
		w[i] = atomic_load_explicit(&e->w[i], memory_order_acquire);
	if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1)
		return 0;
	stb_unw_rule_unpack(w, r);
	return r->kind != STB_RULE_NONE;
}

static void stb_unw_rcache_put(struct stb_unw_proc *p, uint64_t ip, const struct stb_unw_rule *r)
{
	struct stb_unw_rcache_ent *e = stb_unw_rcache_slot(p, ip);
	uint64_t s = atomic_load_explicit(&e->seq, memory_order_relaxed), w[3];

	if ((s & 1) || !atomic_compare_exchange_strong_explicit(&e->seq, &s, s + 1, memory_order_acquire,
								 memory_order_relaxed))
		return; /* another writer: leave it */
	/* Release stores: no reader sees new data with the old (even) seq. */
	stb_unw_rule_pack(r, w);
	atomic_store_explicit(&e->ip, ip, memory_order_release);
	for (int i = 0; i < 3; i++)
		atomic_store_explicit(&e->w[i], w[i], memory_order_release);
	atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

/* A bounded cursor over local bytes that mirror target addresses. */
struct stb_unw_cur {
	const uint8_t *p, *end;
	uint64_t addr; /* target address of *p */
	int bad;
};

static uint64_t stb_unw_cur_fixed(struct stb_unw_cur *c, unsigned n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = 1;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, n); /* little-endian */
	c->p += n;
	c->addr += n;
	return v;
}

static uint64_t stb_unw_cur_uleb(struct stb_unw_cur *c)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (c->p < c->end) {
		uint8_t b = *c->p++;
		c->addr++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			return v;
	}
	c->bad = 1;
	return 0;
}

static int64_t stb_unw_cur_sleb(struct stb_unw_cur *c)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b = 0;

	while (c->p < c->end) {
		b = *c->p++;
		c->addr++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			return (int64_t)v;
		}
	}
	c->bad = 1;
	return 0;
}

/* A DW_EH_PE-encoded pointer (pc-relative or absolute; no indirection). */
static uint64_t stb_unw_cur_ptr(struct stb_unw_cur *c, uint8_t enc)
{
	uint64_t at = c->addr, v;

	if (enc == STB_EH_PE_omit)
		return 0;
	switch (enc & 0x0f) {
	case STB_EH_PE_absptr: v = stb_unw_cur_fixed(c, 8); break;
	case STB_EH_PE_udata2: v = stb_unw_cur_fixed(c, 2); break;
	case STB_EH_PE_sdata2: v = (uint64_t)(int64_t)(int16_t)stb_unw_cur_fixed(c, 2); break;
	case STB_EH_PE_udata4: v = stb_unw_cur_fixed(c, 4); break;
	case STB_EH_PE_sdata4: v = (uint64_t)(int64_t)(int32_t)stb_unw_cur_fixed(c, 4); break;
	case STB_EH_PE_udata8: case STB_EH_PE_sdata8: v = stb_unw_cur_fixed(c, 8); break;
	case 0x01: v = stb_unw_cur_uleb(c); break;
	case 0x09: v = (uint64_t)stb_unw_cur_sleb(c); break;
	default: c->bad = 1; return 0;
	}
	if ((enc & 0x70) == STB_EH_PE_pcrel)
		v += at;
	else if ((enc & 0x70) != 0 || (enc & 0x80))
		c->bad = 1; /* datarel/textrel/funcrel/indirect: not in x86-64 .eh_frame */
	return v;
}

/* Opens a cursor on [addr, addr + len) of a module image. */
static int stb_unw_cur_open(struct stb_unw_walkctx *w, uint64_t addr, uint64_t len, struct stb_unw_cur *c)
{
	const struct stb_unw_seg *s = stb_unw_modtab_find_seg(w->tab, addr);

	if (!s || len > s->hi - addr)
		return -1;
	w->n_image++;
	c->p = s->local + (addr - s->lo);
	c->end = c->p + len;
	c->addr = addr;
	c->bad = 0;
	return 0;
}

/* Register rule while interpreting CFI. */
enum { STB_REG_SAME = 0, STB_REG_OFFSET, STB_REG_UNDEF, STB_REG_OTHER };

struct stb_unw_cfa_state {
	unsigned cfa_reg;
	int64_t cfa_off;
	int cfa_expr;
	uint8_t how[17];
	int64_t off[17];
};

/* Runs CFA instructions until the row for ip (loc advances past ip).
 * Returns 0, or -1 on something not understood. */
static int stb_unw_cfa_run(struct stb_unw_cur *c, struct stb_unw_cfa_state *st, const struct stb_unw_cfa_state *init,
			   uint64_t *loc, uint64_t ip, uint64_t caf, int64_t daf)
{
	struct stb_unw_cfa_state stack[8];
	unsigned depth = 0;

	while (c->p < c->end && !c->bad) {
		uint8_t op = (uint8_t)stb_unw_cur_fixed(c, 1);
		uint64_t reg, delta = 0;
		int64_t off;

		switch (op >> 6) {
		case 1: delta = (op & 0x3f) * caf; goto advance;
		case 2:
			reg = op & 0x3f;
			off = (int64_t)stb_unw_cur_uleb(c) * daf;
			goto set_offset;
		case 3:
			reg = op & 0x3f;
			goto restore;
		default: break;
		}
		switch (op) {
		case 0x00: continue; /* nop */
		case 0x01: return -1; /* set_loc: not produced for .eh_frame by GCC/LLVM */
		case 0x02: delta = stb_unw_cur_fixed(c, 1) * caf; goto advance;
		case 0x03: delta = stb_unw_cur_fixed(c, 2) * caf; goto advance;
		case 0x04: delta = stb_unw_cur_fixed(c, 4) * caf; goto advance;
		case 0x05: /* offset_extended */
			reg = stb_unw_cur_uleb(c);
			off = (int64_t)stb_unw_cur_uleb(c) * daf;
			goto set_offset;
		case 0x06: /* restore_extended */
			reg = stb_unw_cur_uleb(c);
			goto restore;
		case 0x07: /* undefined */
			reg = stb_unw_cur_uleb(c);
			if (reg < 17)
				st->how[reg] = STB_REG_UNDEF;
			continue;
		case 0x08: /* same_value */
			reg = stb_unw_cur_uleb(c);
			if (reg < 17)
				st->how[reg] = STB_REG_SAME;
			continue;
		case 0x09: /* register */
			reg = stb_unw_cur_uleb(c);
			stb_unw_cur_uleb(c);
			if (reg < 17)
				st->how[reg] = STB_REG_OTHER;
			continue;
		case 0x0a: /* remember_state */
			if (depth == 8)
				return -1;
			stack[depth++] = *st;
			continue;
		case 0x0b: /* restore_state */
			if (depth == 0)
				return -1;
			*st = stack[--depth];
			continue;
		case 0x0c: /* def_cfa */
			st->cfa_reg = (unsigned)stb_unw_cur_uleb(c);
			st->cfa_off = (int64_t)stb_unw_cur_uleb(c);
			st->cfa_expr = 0;
			continue;
		case 0x0d: st->cfa_reg = (unsigned)stb_unw_cur_uleb(c); st->cfa_expr = 0; continue;
		case 0x0e: st->cfa_off = (int64_t)stb_unw_cur_uleb(c); continue;
		case 0x0f: /* def_cfa_expression */
			st->cfa_expr = 1;
			off = (int64_t)stb_unw_cur_uleb(c);
			if (off < 0 || (uint64_t)off > (uint64_t)(c->end - c->p))
				return -1;
			c->p += off;
			c->addr += (uint64_t)off;
			continue;
		case 0x10: /* expression */
		case 0x16: /* val_expression */
			reg = stb_unw_cur_uleb(c);
			off = (int64_t)stb_unw_cur_uleb(c);
			if (off < 0 || (uint64_t)off > (uint64_t)(c->end - c->p))
				return -1;
			c->p += off;
			c->addr += (uint64_t)off;
			if (reg < 17)
				st->how[reg] = STB_REG_OTHER;
			continue;
		case 0x11: /* offset_extended_sf */
			reg = stb_unw_cur_uleb(c);
			off = stb_unw_cur_sleb(c) * daf;
			goto set_offset;
		case 0x12: /* def_cfa_sf */
			st->cfa_reg = (unsigned)stb_unw_cur_uleb(c);
			st->cfa_off = stb_unw_cur_sleb(c) * daf;
			st->cfa_expr = 0;
			continue;
		case 0x13: st->cfa_off = stb_unw_cur_sleb(c) * daf; continue; /* def_cfa_offset_sf */
		case 0x14: /* val_offset */
		case 0x15: /* val_offset_sf */
			reg = stb_unw_cur_uleb(c);
			if (op == 0x14)
				stb_unw_cur_uleb(c);
			else
				stb_unw_cur_sleb(c);
			if (reg < 17)
				st->how[reg] = STB_REG_OTHER;
			continue;
		case 0x2e: stb_unw_cur_uleb(c); continue; /* GNU_args_size */
		case 0x2f: /* GNU_negative_offset_extended */
			reg = stb_unw_cur_uleb(c);
			off = -(int64_t)stb_unw_cur_uleb(c) * daf;
			goto set_offset;
		default: return -1;
		}
advance:
		if (*loc + delta > ip)
			return 0;
		*loc += delta;
		continue;
set_offset:
		if (reg < 17) {
			st->how[reg] = STB_REG_OFFSET;
			st->off[reg] = off;
		}
		continue;
restore:
		if (!init)
			return -1; /* restore inside a CIE */
		if (reg < 17) {
			st->how[reg] = init->how[reg];
			st->off[reg] = init->off[reg];
		}
		continue;
	}
	return c->bad ? -1 : 0;
}

/* Computes the rule for lookup address ip in module m. */
static void stb_unw_rule_compute(struct stb_unw_walkctx *w, const struct stb_unw_mod *m, uint64_t ip,
				 struct stb_unw_rule *r)
{
	struct stb_unw_cur t, f, ci;
	struct stb_unw_cfa_state init, st;
	uint64_t fde_addr, cie_addr, len, pc_begin, pc_range, caf, loc, count;
	int64_t daf;
	uint8_t fde_enc = STB_EH_PE_absptr, version;
	int z = 0, signal = 0;
	const char *aug;

	memset(r, 0, sizeof(*r));
	r->kind = STB_RULE_LIBUNWIND;
	if (!m->has_table || (m->flags & STB_UNW_MOD_FP_ONLY))
		return;
	/* Binary search of the .eh_frame_hdr table: (start, fde) pairs relative
	 * to the header, sorted by start. */
	count = m->di.u.rti.table_len * sizeof(unw_word_t) / 8;
	if (stb_unw_cur_open(w, m->di.u.rti.table_data, count * 8, &t) < 0)
		return;
	int64_t rel = (int64_t)(ip - m->di.u.rti.segbase);
	uint64_t lo = 0, hi = count;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		int32_t start;
		memcpy(&start, t.p + mid * 8, 4);
		if (rel < start)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo == 0)
		return;
	int32_t fde_rel;
	memcpy(&fde_rel, t.p + (lo - 1) * 8 + 4, 4);
	fde_addr = m->di.u.rti.segbase + (uint64_t)(int64_t)fde_rel;

	/* FDE header. */
	if (stb_unw_cur_open(w, fde_addr, 8, &f) < 0)
		return;
	len = stb_unw_cur_fixed(&f, 4);
	if (len == 0 || len >= 0xfffffff0u || stb_unw_cur_open(w, fde_addr + 4, len, &f) < 0)
		return;
	uint64_t cie_id = stb_unw_cur_fixed(&f, 4);
	if (cie_id == 0)
		return;
	cie_addr = fde_addr + 4 - cie_id;

	/* CIE. */
	if (stb_unw_cur_open(w, cie_addr, 4, &ci) < 0)
		return;
	len = stb_unw_cur_fixed(&ci, 4);
	if (len == 0 || len >= 0xfffffff0u || stb_unw_cur_open(w, cie_addr + 4, len, &ci) < 0)
		return;
	if (stb_unw_cur_fixed(&ci, 4) != 0)
		return;
	version = (uint8_t)stb_unw_cur_fixed(&ci, 1);
	if (version != 1 && version != 3 && version != 4)
		return;
	aug = (const char *)ci.p;
	const uint8_t *nul = memchr(ci.p, 0, (size_t)(ci.end - ci.p));
	if (!nul)
		return;
	ci.addr += (uint64_t)(nul + 1 - ci.p);
	ci.p = nul + 1;
	if (version == 4 && (stb_unw_cur_fixed(&ci, 1) != 8 || stb_unw_cur_fixed(&ci, 1) != 0))
		return;
	caf = stb_unw_cur_uleb(&ci);
	daf = stb_unw_cur_sleb(&ci);
	if ((version == 1 ? stb_unw_cur_fixed(&ci, 1) : stb_unw_cur_uleb(&ci)) != STB_DW_RA)
		return;
	if (aug[0] == 'z') {
		z = 1;
		uint64_t alen = stb_unw_cur_uleb(&ci);
		struct stb_unw_cur a = ci;
		if (alen > (uint64_t)(ci.end - ci.p))
			return;
		a.end = ci.p + alen;
		for (const char *q = aug + 1; *q; q++) {
			if (*q == 'R')
				fde_enc = (uint8_t)stb_unw_cur_fixed(&a, 1);
			else if (*q == 'P')
				stb_unw_cur_ptr(&a, (uint8_t)stb_unw_cur_fixed(&a, 1) & 0x7f);
			else if (*q == 'L')
				stb_unw_cur_fixed(&a, 1);
			else if (*q == 'S')
				signal = 1;
			else if (*q != 'B')
				return;
		}
		if (a.bad)
			return;
		ci.p += alen;
		ci.addr += alen;
	} else if (aug[0]) {
		return;
	}
	if (ci.bad)
		return;
	if (signal) {
		r->kind = STB_RULE_SIGNAL;
		return;
	}

	/* FDE body. */
	pc_begin = stb_unw_cur_ptr(&f, fde_enc);
	pc_range = stb_unw_cur_ptr(&f, fde_enc & 0x0f);
	if (f.bad || ip < pc_begin || ip - pc_begin >= pc_range)
		return;
	if (z) {
		uint64_t alen = stb_unw_cur_uleb(&f);
		if (f.bad || alen > (uint64_t)(f.end - f.p))
			return;
		f.p += alen;
		f.addr += alen;
	}

	memset(&init, 0, sizeof(init));
	init.cfa_reg = STB_DW_RSP;
	loc = pc_begin;
	if (stb_unw_cfa_run(&ci, &init, NULL, &loc, UINT64_MAX, caf, daf) < 0)
		return;
	st = init;
	loc = pc_begin;
	if (stb_unw_cfa_run(&f, &st, &init, &loc, ip, caf, daf) < 0)
		return;

	/* Expressible? */
	if (st.cfa_expr || (st.cfa_reg != STB_DW_RSP && st.cfa_reg != 6) || st.cfa_off < INT32_MIN ||
	    st.cfa_off > INT32_MAX)
		return;
	if (st.how[STB_DW_RA] == STB_REG_UNDEF) {
		r->kind = STB_RULE_BOTTOM;
		return;
	}
	if (st.how[STB_DW_RA] != STB_REG_OFFSET || st.off[STB_DW_RA] <= INT16_MIN || st.off[STB_DW_RA] > INT16_MAX)
		return;
	for (int i = 0; i < 6; i++) {
		unsigned reg = stb_unw_dwreg[i];
		if (st.how[reg] == STB_REG_SAME) {
			r->off[i] = STB_RULE_SAME;
		} else if (st.how[reg] == STB_REG_OFFSET && st.off[reg] > INT16_MIN && st.off[reg] <= INT16_MAX) {
			r->off[i] = (int16_t)st.off[reg];
		} else {
			return; /* undefined callee-saved register, or a rule we do not take */
		}
	}
	r->cfa_rbp = st.cfa_reg == 6;
	r->cfa_off = (int32_t)st.cfa_off;
	r->ra_off = (int16_t)st.off[STB_DW_RA];
	r->kind = STB_RULE_OK;
}

/* The rule for the frame at ip (lookup at ip - 1 unless exact). */
static void stb_unw_rule_get(struct stb_unw_walkctx *w, uint64_t lookup, struct stb_unw_rule *r)
{
	const struct stb_unw_mod *m;

	if (stb_unw_rcache_get(w->p, lookup, r))
		return;
	m = stb_unw_walk_mod(w, lookup);
	if (!m) {
		memset(r, 0, sizeof(*r));
		r->kind = STB_RULE_LIBUNWIND; /* not cached: the module may appear */
		return;
	}
	stb_unw_rule_compute(w, m, lookup, r);
	stb_unw_rcache_put(w->p, lookup, r);
}

/* Applies an STB_RULE_OK rule to the registers. Returns 0 or -1 (a read failed). */
static int stb_unw_rule_apply(struct stb_unw_walkctx *w, const struct stb_unw_rule *r, struct stb_regs *regs)
{
	uint64_t *dst[6] = { &regs->bp, &regs->bx, &regs->r12, &regs->r13, &regs->r14, &regs->r15 };
	uint64_t cfa = (r->cfa_rbp ? regs->bp : regs->sp) + (uint64_t)(int64_t)r->cfa_off, v[6], ra;

	if (stb_unw_walk_read(w, cfa + (uint64_t)(int64_t)r->ra_off, &ra, 8) < 0)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (r->off[i] != STB_RULE_SAME && stb_unw_walk_read(w, cfa + (uint64_t)(int64_t)r->off[i], &v[i], 8) < 0)
			return -1;
	}
	for (int i = 0; i < 6; i++)
		if (r->off[i] != STB_RULE_SAME)
			*dst[i] = v[i];
	regs->ip = ra;
	regs->sp = cfa;
	return 0;
}

/* One step with libunwind from regs (lookup: ip or ip - 1). Returns 1 when
 * a caller frame was found (regs updated), 0 at the bottom, -1 on failure;
 * *fp tells whether libunwind had no CFI and guessed from rbp. */
static int stb_unw_step_libunwind(struct stb_unw_walkctx *w, struct stb_regs *regs, uint64_t lookup, int *fp)
{
	static const int ids[8] = { UNW_X86_64_RIP, UNW_X86_64_RSP, UNW_X86_64_RBP, UNW_X86_64_RBX,
				    UNW_X86_64_R12, UNW_X86_64_R13, UNW_X86_64_R14, UNW_X86_64_R15 };
	uint64_t *dst[8] = { &regs->ip, &regs->sp, &regs->bp, &regs->bx, &regs->r12, &regs->r13, &regs->r14, &regs->r15 };
	unw_word_t v[8];
	unw_cursor_t c;
	int ret;

	w->cur = *regs;
	w->ip0 = lookup;
	if (unw_init_remote(&c, w->p->as, w) < 0)
		return -1;
	w->fpi_failed = 0;
	ret = unw_step(&c);
	*fp = w->fpi_failed;
	if (ret <= 0)
		return ret < 0 ? -1 : 0;
	for (int i = 0; i < 8; i++)
		if (unw_get_reg(&c, ids[i], &v[i]) < 0)
			return -1;
	for (int i = 0; i < 8; i++)
		*dst[i] = v[i];
	return 1;
}

/* ------------------------------------------------------ libunwind accessors */

static int stb_unw_acc_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
				      int need_unwind_info, void *arg)
{
	struct stb_unw_walkctx *w = arg;
	const struct stb_unw_mod *m = stb_unw_walk_mod(w, ip);
	unw_dyn_info_t di;
	int ret;

	if (!m || !m->has_table || (m->flags & STB_UNW_MOD_FP_ONLY)) {
		w->fpi_failed = 1;
		return -UNW_ENOINFO;
	}
	di = m->di; /* the search may outlive a table swap done by a nested refresh */
	ret = UNW_OBJ(dwarf_search_unwind_table)(as, ip, &di, pi, need_unwind_info, arg);
	if (ret < 0)
		w->fpi_failed = 1;
	return ret;
}

static void stb_unw_acc_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	/* Table-format unwind info is allocated and freed by libunwind itself. */
	(void)as;
	(void)pi;
	(void)arg;
}

static int stb_unw_acc_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	(void)as;
	(void)addr;
	(void)arg;
	return -UNW_ENOINFO;
}

static int stb_unw_acc_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg)
{
	(void)as;
	if (write)
		return -UNW_EREADONLYREG;
	return stb_unw_walk_read(arg, addr, val, sizeof(*val)) == 0 ? 0 : -UNW_EINVAL;
}

static int stb_unw_acc_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg)
{
	struct stb_unw_walkctx *w = arg;
	const struct stb_regs *r = &w->cur;

	(void)as;
	if (write)
		return -UNW_EREADONLYREG;
	switch (reg) {
	case UNW_X86_64_RIP: *val = w->ip0; return 0;
	case UNW_X86_64_RSP: *val = r->sp; return 0;
	case UNW_X86_64_RBP: *val = r->bp; return 0;
	case UNW_X86_64_RBX: *val = r->bx; return 0;
	case UNW_X86_64_R12: *val = r->r12; return 0;
	case UNW_X86_64_R13: *val = r->r13; return 0;
	case UNW_X86_64_R14: *val = r->r14; return 0;
	case UNW_X86_64_R15: *val = r->r15; return 0;
	default: return -UNW_EBADREG;
	}
}

static int stb_unw_acc_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write, void *arg)
{
	(void)as;
	(void)reg;
	(void)val;
	(void)write;
	(void)arg;
	return -UNW_EBADREG;
}

static int stb_unw_acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	(void)as;
	(void)c;
	(void)arg;
	return -UNW_EINVAL;
}

static int stb_unw_acc_get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
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

static unw_accessors_t stb_unw_accessors = {
	.find_proc_info = stb_unw_acc_find_proc_info,
	.put_unwind_info = stb_unw_acc_put_unwind_info,
	.get_dyn_info_list_addr = stb_unw_acc_get_dyn_info_list_addr,
	.access_mem = stb_unw_acc_access_mem,
	.access_reg = stb_unw_acc_access_reg,
	.access_fpreg = stb_unw_acc_access_fpreg,
	.resume = stb_unw_acc_resume,
	.get_proc_name = stb_unw_acc_get_proc_name,
};

/* ------------------------------------------------------------------- procs */

struct stb_unw_proc *stb_unw_proc_new(pid_t pid)
{
	struct stb_unw_proc *p = NULL;
	pthread_rwlockattr_t ra;
	unsigned long long counts[2] = { 0, 0 };
	int ret = 0, have_lock = 0, have_mutex = 0;

	if (pid < 0) {
		ret = -EINVAL;
		goto cleanup;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		ret = -ENOMEM;
		goto cleanup;
	}
	p->pid = pid;
	p->read_pid = pid ? pid : getpid();
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	ret = -pthread_rwlock_init(&p->lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	if (ret < 0)
		goto cleanup;
	have_lock = 1;
	ret = -pthread_mutex_init(&p->refresh_lock, NULL);
	if (ret < 0)
		goto cleanup;
	have_mutex = 1;
	if (pid == 0)
		dl_iterate_phdr(stb_unw_dl_counts, counts);
	ret = stb_unw_build(p, NULL, &p->tab);
	if (ret < 0)
		goto cleanup;
	p->dl_adds = counts[0];
	p->dl_subs = counts[1];
	atomic_store_explicit(&p->last_refresh_ns, stb_now_ns(), memory_order_relaxed);
	p->rcache = calloc(STB_UNW_RCACHE, sizeof(*p->rcache));
	if (!p->rcache) {
		ret = -ENOMEM;
		goto cleanup;
	}
	p->as = unw_create_addr_space(&stb_unw_accessors, 0);
	if (!p->as) {
		ret = -ENOMEM;
		goto cleanup;
	}
	/*
	 * libunwind only steps the frames the rule cache cannot describe. Its
	 * own cache would cost a lock and two sigprocmask calls per step (Debian
	 * builds it without UNW_CACHE_PER_THREAD, which falls back to GLOBAL).
	 */
	unw_set_caching_policy(p->as, UNW_CACHE_NONE);
cleanup:
	if (ret < 0) {
		if (p) {
			if (p->as)
				unw_destroy_addr_space(p->as);
			stb_unw_modtab_free(p->tab);
			free(p->rcache);
			if (have_lock)
				pthread_rwlock_destroy(&p->lock);
			if (have_mutex)
				pthread_mutex_destroy(&p->refresh_lock);
			free(p);
		}
		errno = -ret;
		return NULL;
	}
	return p;
}

void stb_unw_proc_free(struct stb_unw_proc *p)
{
	if (!p)
		return;
	unw_destroy_addr_space(p->as);
	stb_unw_modtab_free(p->tab);
	free(p->rcache);
	pthread_rwlock_destroy(&p->lock);
	pthread_mutex_destroy(&p->refresh_lock);
	free(p);
}

void stb_unw_regs_from_switch(struct stb_regs *regs, uint64_t ip, uint64_t sp, uint64_t bp,
			      const struct stb_stack_copy *copy)
{
	memset(regs, 0, sizeof(*regs));
	regs->ip = ip;
	regs->sp = sp;
	regs->bp = bp;
	regs->flags = STB_UNW_IP_IS_RETURN;
	if (!copy || !copy->bytes || sp < STB_ABI_SWITCH_FRAME)
		return;
	uint64_t a = sp - STB_ABI_SWITCH_FRAME;
	if (a < copy->addr || a - copy->addr > copy->len ||
	    copy->len - (a - copy->addr) < sizeof(struct stb_abi_switch_frame))
		return;
	struct stb_abi_switch_frame f;
	memcpy(&f, (const uint8_t *)copy->bytes + (a - copy->addr), sizeof(f));
	regs->bx = f.rbx;
	regs->r12 = f.r12;
	regs->r13 = f.r13;
	regs->r14 = f.r14;
	regs->r15 = f.r15;
}

/* ------------------------------------------------------------------- walks */

static int stb_unw_walk_begin(struct stb_unw_walkctx *w, struct stb_unw_proc *p, const struct stb_regs *regs,
			      const struct stb_stack_copy *copy)
{
	memset(w, 0, sizeof(*w));
	w->p = p;
	w->cur = *regs;
	w->copy_only = (regs->flags & STB_UNW_COPY_ONLY) != 0;
	if (copy && copy->bytes && copy->len) {
		w->copy_lo = copy->addr;
		w->copy = copy->bytes;
		w->copy_len = copy->len;
	}
	pthread_rwlock_rdlock(&p->lock);
	w->tab = p->tab;
	return 0;
}

static void stb_unw_walk_end(struct stb_unw_walkctx *w, uint64_t steps, uint64_t frames)
{
	struct stb_unw_proc *p = w->p;

	pthread_rwlock_unlock(&p->lock);
	free(w->pc);
	atomic_fetch_add_explicit(&p->st_walks, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->st_steps, steps, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->st_frames, frames, memory_order_relaxed);
	if (w->n_copy)
		atomic_fetch_add_explicit(&p->st_copy_reads, w->n_copy, memory_order_relaxed);
	if (w->n_image)
		atomic_fetch_add_explicit(&p->st_image_reads, w->n_image, memory_order_relaxed);
	if (w->n_target)
		atomic_fetch_add_explicit(&p->st_target_reads, w->n_target, memory_order_relaxed);
	if (w->n_target_fail)
		atomic_fetch_add_explicit(&p->st_target_read_failures, w->n_target_fail, memory_order_relaxed);
}

int stb_unw_walk(struct stb_unw_proc *p, const struct stb_regs *regs, const struct stb_stack_copy *copy,
		 unsigned skip, unsigned max_depth, stb_unw_frame_fn fn, void *arg)
{
	struct stb_unw_walkctx w;
	struct stb_regs r;
	unsigned idx = 0, delivered = 0, how = STB_FRAME_DWARF;
	uint64_t steps = 0;
	int exact;

	if (!p || !regs || !fn)
		return -EINVAL;
	if (max_depth == 0)
		max_depth = STB_UNW_DEFAULT_DEPTH;
	stb_unw_walk_begin(&w, p, regs, copy);
	r = *regs;
	exact = !(regs->flags & STB_UNW_IP_IS_RETURN);
	while (r.ip != 0) {
		struct stb_unw_rule rule;
		uint64_t lookup;

		if (idx >= skip) {
			struct stb_unw_frame f = { .ip = r.ip, .sp = r.sp, .how = how };
			delivered++;
			if (fn(&f, arg) || delivered == max_depth)
				break;
		}
		idx++;
		steps++;
		/* A return address is the instruction after a call: the caller's
		 * row is the one of the call itself. */
		lookup = exact ? r.ip : r.ip - 1;
		stb_unw_rule_get(&w, lookup, &rule);
		if ((regs->flags & STB_UNW_LIBUNWIND_ONLY) && rule.kind != STB_RULE_SIGNAL)
			rule.kind = STB_RULE_LIBUNWIND;
		if (rule.kind == STB_RULE_BOTTOM)
			break;
		if (rule.kind == STB_RULE_OK) {
			uint64_t sp = r.sp;
			if (stb_unw_rule_apply(&w, &rule, &r) < 0 || r.sp <= sp)
				break; /* unreadable, or not moving up the stack */
			how = STB_FRAME_DWARF;
			exact = 0;
		} else {
			int fp = 0;
			if (stb_unw_step_libunwind(&w, &r, lookup, &fp) <= 0)
				break;
			how = fp ? STB_FRAME_FP : STB_FRAME_DWARF;
			/* Past a signal frame, ip is where the signal interrupted. */
			exact = rule.kind == STB_RULE_SIGNAL;
		}
	}
	stb_unw_walk_end(&w, steps, delivered);
	return (int)delivered;
}

int stb_unw_walk_fp(struct stb_unw_proc *p, const struct stb_regs *regs, const struct stb_stack_copy *copy,
		    unsigned skip, unsigned max_depth, stb_unw_frame_fn fn, void *arg)
{
	struct stb_unw_walkctx w;
	unsigned idx = 0, delivered = 0;
	uint64_t ip, sp, bp, steps = 0;

	if (!p || !regs || !fn)
		return -EINVAL;
	if (max_depth == 0)
		max_depth = STB_UNW_DEFAULT_DEPTH;
	stb_unw_walk_begin(&w, p, regs, copy);
	ip = regs->ip;
	sp = regs->sp;
	bp = regs->bp;
	for (;;) {
		uint64_t fr[2];

		if (idx >= skip) {
			struct stb_unw_frame f = { .ip = ip, .sp = sp, .how = STB_FRAME_FP };
			delivered++;
			if (fn(&f, arg) || delivered == max_depth)
				break;
		}
		idx++;
		steps++;
		/* bp must point into the stack above the current frame. */
		if (bp == 0 || (bp & 7) || bp < sp || bp > UINT64_MAX - 16)
			break;
		if (stb_unw_walk_read(&w, bp, fr, sizeof(fr)) < 0)
			break;
		if (fr[1] == 0 || !stb_unw_walk_mod(&w, fr[1]))
			break;
		ip = fr[1];
		sp = bp + 16;
		if (fr[0] != 0 && fr[0] <= bp)
			fr[0] = 0; /* not a caller's frame: this frame is the last one */
		bp = fr[0];
	}
	stb_unw_walk_end(&w, steps, delivered);
	return (int)delivered;
}
