/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The module registry of modules.h. A table is built from /proc/PID/maps:
 * for this process, loaded objects are read in place (dl_iterate_phdr: the
 * memory is ours and stays mapped while loaded); for another process, each
 * mapped file is opened through /proc/PID/map_files (identity checked
 * against the mapping), read with pread into owned buffers (elf_image.c),
 * and its build id compared with the one in the target's memory; the vdso
 * is copied with process_vm_readv. Images of unchanged modules pass from
 * one table to the next.
 */
#include "hashset.h"
#include "unwind/elf_image.h"
#include "unwind/modules.h"
#include "util.h"

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
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096u
#define REMOTE_REFRESH_NS (100ull * 1000 * 1000)
#define SELF_REFRESH_NS (1ull * 1000 * 1000)
#define FUSE_SUPER_MAGIC 0x65735546

/* stb_mod_image.tables, for an image whose tables are read on first use */
enum { TABLES_DEFERRED, TABLES_READY, TABLES_NONE };

struct stb_mod_image {
	_Atomic int refs; /* tables using it */
	struct stb_elf_mod em;
	uint8_t *vdso;
	size_t vdso_len;
	/* A live target's file: em located its tables, stb_mods_tables reads
	 * them (under the registry's tables_lock) and then publishes READY. */
	bool lazy;
	_Atomic int tables;
	struct stb_cfi_bytes eh_frame; /* READY: em's .eh_frame */
};

/* A frozen target (stb_mods_new_frozen). */
struct mods_frozen {
	stb_mods_read_fn read;
	void *ctx;
	char *sysroot; /* "" for / */
	char *exe_path, *exe;
	const struct stb_mods_map *maps; /* during the first build only */
	size_t nmaps;
};

struct stb_mods {
	pid_t pid, read_pid; /* -1 when frozen */
	struct mods_frozen *frozen; /* NULL: a live process */
	_Atomic int refs;
	pthread_rwlock_t lock;        /* tab: taking a reference vs swapping it */
	pthread_mutex_t refresh_lock; /* one rebuild at a time */
	pthread_mutex_t tables_lock;  /* reading a module's deferred tables */
	struct stb_modtab *tab;
	_Atomic uint64_t gen;
	_Atomic uint64_t last_refresh_ns;
	_Atomic uint64_t refreshes;
	_Atomic uint64_t tables_read; /* deferred tables read (stb_mods_tables) */
	uint64_t next_gen;                   /* under refresh_lock */
	unsigned long long dl_adds, dl_subs; /* pid 0: dl_iterate_phdr counters of tab */
};

/* ------------------------------------------------------------ tables */

static void image_unref(struct stb_mod_image *im)
{
	if (!im || atomic_fetch_sub_explicit(&im->refs, 1, memory_order_acq_rel) != 1)
		return;
	stb_elf_mod_free(&im->em);
	free(im->vdso);
	free(im);
}

static void modtab_free(struct stb_modtab *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nmods; i++) {
		image_unref(t->mods[i].img);
		free(t->mods[i].path);
	}
	free(t->mods);
	free(t->segs);
	free(t);
}

static struct stb_mod *modtab_add(struct stb_modtab *t)
{
	if (t->nmods >= STB_MODS_MAX_MODULES)
		return NULL;
	if (stb_grow(&t->mods, &t->capmods, t->nmods + 1, sizeof(*t->mods)) != 0)
		return NULL;
	struct stb_mod *m = &t->mods[t->nmods++];
	memset(m, 0, sizeof(*m));
	return m;
}

static int modtab_add_seg(struct stb_modtab *t, uint64_t lo, uint64_t len, const uint8_t *local,
			  bool direct, const void *owner)
{
	if (len == 0 || lo + len < lo)
		return 0;
	if (stb_grow(&t->segs, &t->capsegs, t->nsegs + 1, sizeof(*t->segs)) != 0)
		return -ENOMEM;
	t->segs[t->nsegs++] = (struct stb_seg){
	    .lo = lo, .hi = lo + len, .local = local, .direct = direct, .owner = owner};
	return 0;
}

static int mod_cmp(const void *a, const void *b)
{
	const struct stb_mod *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int seg_cmp(const void *a, const void *b)
{
	const struct stb_seg *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

const struct stb_mod *stb_modtab_find(const struct stb_modtab *t, uint64_t ip)
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
	const struct stb_mod *m = &t->mods[lo - 1];
	return ip < m->hi ? m : NULL;
}

const struct stb_seg *stb_modtab_find_seg(const struct stb_modtab *t, uint64_t addr)
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
	const struct stb_seg *s = &t->segs[lo - 1];
	return addr < s->hi ? s : NULL;
}

int stb_mods_read_target(pid_t pid, uint64_t addr, void *dst, size_t len)
{
	struct iovec l = {.iov_base = dst, .iov_len = len};
	struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

int stb_mods_read(const struct stb_mods *r, uint64_t addr, void *dst, size_t len)
{
	if (r->frozen)
		return r->frozen->read(r->frozen->ctx, addr, dst, len);
	return stb_mods_read_target(r->read_pid, addr, dst, len);
}

/* Publishes the tables of an image in module m and as segments of t. */
static int mod_use_image(struct stb_modtab *t, struct stb_mod *m, struct stb_mod_image *im)
{
	const struct stb_elf_mod *em = &im->em;
	int ret = 0;

	m->img = im;
	atomic_fetch_add_explicit(&im->refs, 1, memory_order_relaxed);
	if (im->vdso) {
		m->image = im->vdso;
		m->image_len = im->vdso_len;
	}
	if (im->lazy) {
		/* Read on first use (stb_mods_tables): no segments for them. */
		m->lazy_table = true;
		t->nlazy++;
	} else if (em->has_table) {
		m->has_table = true;
		m->table = em->table;
		m->eh_frame = (struct stb_cfi_bytes){
		    .data = em->eh_frame.data, .len = em->eh_frame.len, .addr = em->eh_frame.addr};
		ret = modtab_add_seg(t, em->hdr.addr, em->hdr.len, em->hdr.data, false, im);
		if (ret == 0)
			ret = modtab_add_seg(t, em->eh_frame.addr, em->eh_frame.len,
					     em->eh_frame.data, false, im);
	} else {
		m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY |
			    (em->flags & STB_ELF_TOO_BIG ? STB_UNW_MOD_TOO_BIG : 0);
	}
	return ret;
}

static void mod_set_elf(struct stb_mod *m, const struct stb_elf_mod *em)
{
	m->lo = em->exec_lo;
	m->hi = em->exec_hi;
	m->bias = em->bias;
	m->load_lo = em->load_lo;
	m->load_hi = em->load_hi;
	m->build_id_len = em->build_id_len;
	memcpy(m->build_id, em->build_id, em->build_id_len);
}

/* ------------------------------------------------------------ this process */

struct dlobj {
	uint64_t base;
	const Elf64_Phdr *phdr;
	unsigned phnum;
};

struct dlset {
	struct dlobj *objs;
	size_t n, cap;
	bool oom;
};

static int dl_collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct dlset *d = arg;

	(void)size;
	if (stb_grow(&d->objs, &d->cap, d->n + 1, sizeof(*d->objs)) != 0) {
		d->oom = true;
		return 1;
	}
	d->objs[d->n++] = (struct dlobj){
	    .base = info->dlpi_addr, .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum};
	return 0;
}

static int dl_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

static bool dl_holds(const struct dlobj *o, uint64_t addr)
{
	for (unsigned i = 0; i < o->phnum; i++) {
		const Elf64_Phdr *ph = &o->phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
		    addr >= o->base + ph->p_vaddr && addr - (o->base + ph->p_vaddr) < ph->p_memsz)
			return true;
	}
	return false;
}

/* A loaded object of this process, described from its program headers and
 * read in place. */
static int mod_from_self(struct stb_modtab *t, struct stb_mod *m, const struct dlobj *o)
{
	const Elf64_Phdr *first = NULL;
	int ret = 0;

	m->bias = o->base;
	m->lo = UINT64_MAX;
	for (unsigned i = 0; i < o->phnum && ret == 0; i++) {
		const Elf64_Phdr *ph = &o->phdr[i];
		uint64_t lo = o->base + ph->p_vaddr;
		const uint8_t *mem = (const uint8_t *)(uintptr_t)lo;
		if (ph->p_type == PT_LOAD) {
			if (!first)
				first = ph;
			if ((ph->p_flags & PF_X) && lo < m->lo)
				m->lo = lo;
			if ((ph->p_flags & PF_X) && lo + ph->p_memsz > m->hi)
				m->hi = lo + ph->p_memsz;
			if (lo + ph->p_memsz > m->load_hi)
				m->load_hi = lo + ph->p_memsz;
			ret = modtab_add_seg(t, lo, ph->p_filesz, mem, true, NULL);
		} else if (ph->p_type == PT_NOTE && !m->build_id_len) {
			m->build_id_len = stb_elf_build_id(mem, ph->p_filesz, ph->p_align,
							   m->build_id, sizeof(m->build_id));
		}
	}
	if (ret < 0)
		return ret;
	if (!first || m->lo >= m->hi)
		return -ENOEXEC;
	m->load_lo = (first->p_vaddr & (0 - first->p_align)) + o->base;
	for (unsigned i = 0; i < o->phnum; i++) {
		if (o->phdr[i].p_type != PT_GNU_EH_FRAME)
			continue;
		uint64_t a = o->base + o->phdr[i].p_vaddr;
		struct stb_cfi_bytes hb = {
		    .data = (const uint8_t *)(uintptr_t)a, .len = o->phdr[i].p_memsz, .addr = a};
		const struct stb_seg *s;
		if (stb_cfi_hdr_parse(&hb, &m->table) < 0)
			break;
		/* .eh_frame: to the end of the loaded segment holding it. */
		for (size_t k = 0; k < t->nsegs; k++) {
			s = &t->segs[k];
			if (s->direct && m->table.eh_frame >= s->lo && m->table.eh_frame < s->hi) {
				m->eh_frame = (struct stb_cfi_bytes){
				    .data = (const uint8_t *)(uintptr_t)m->table.eh_frame,
				    .len = (size_t)(s->hi - m->table.eh_frame),
				    .addr = m->table.eh_frame};
				m->has_table = true;
			}
		}
		break;
	}
	if (!m->has_table)
		m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
	return 0;
}

/* ------------------------------------------------------------ other processes */

struct mapline {
	uint64_t start, end, off;
	uint64_t base; /* frozen: where the file's offset 0 is mapped (its ELF header), 0: unknown */
	bool maybe;    /* frozen: not known to be executable (the file tells) */
	unsigned dmaj, dmin;
	unsigned long ino;
	char perms[5];
	const char *path; /* "" for anonymous */
};

static int parse_mapline(char *line, struct mapline *ml)
{
	int n = 0;
	size_t len;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %lu %n", &ml->start,
		   &ml->end, ml->perms, &ml->off, &ml->dmaj, &ml->dmin, &ml->ino, &n) < 7 ||
	    ml->end <= ml->start)
		return -EINVAL;
	char *path = line + n;
	while (*path == ' ')
		path++;
	len = strlen(path);
	while (len && (path[len - 1] == '\n' || path[len - 1] == ' '))
		path[--len] = '\0';
	if (len > 10 && strcmp(path + len - 10, " (deleted)") == 0)
		path[len - 10] = '\0';
	ml->path = path;
	return 0;
}

struct fd_src {
	int fd;
};

static int fd_read(void *arg, uint64_t off, void *dst, size_t len)
{
	struct fd_src *s = arg;
	uint8_t *d = dst;

	while (len) {
		ssize_t n = pread(s->fd, d, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* shrunk since fstat */
		d += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Frozen: the file on this machine for a mapped path (--exe for the main
 * program, else sysroot + path). false for paths it never looks up:
 * relative, with a ".." component, too long. */
static bool frozen_local(const struct stb_mods *r, const char *path, char *buf, size_t len)
{
	const struct mods_frozen *f = r->frozen;
	if (f->exe && f->exe_path && strcmp(path, f->exe_path) == 0)
		return (size_t)snprintf(buf, len, "%s", f->exe) < len;
	if (path[0] != '/')
		return false;
	for (const char *p = path; (p = strstr(p, "/..")) != NULL; p += 3)
		if (p[3] == '/' || p[3] == '\0')
			return false;
	return (size_t)snprintf(buf, len, "%s%s", f->sysroot, path) < len;
}

/* Frozen: the build id in the target's memory of the object whose file
 * offset 0 is mapped at base (its ELF header and program headers, then its
 * note). Returns its length, 0 when the memory does not hold one. */
static unsigned frozen_build_id(const struct stb_mods *r, uint64_t base, uint8_t *id, size_t cap)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[64];
	if (!base || stb_mods_read(r, base, &eh, sizeof(eh)) != 0 ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum == 0 || eh.e_phoff > PAGE * 16)
		return 0;
	unsigned n = eh.e_phnum < 64 ? eh.e_phnum : 64;
	if (stb_mods_read(r, base + eh.e_phoff, ph, n * sizeof(ph[0])) != 0)
		return 0;
	uint64_t first = UINT64_MAX;
	for (unsigned i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0 && first == UINT64_MAX)
			first = ph[i].p_vaddr & ~(uint64_t)(PAGE - 1);
	if (first == UINT64_MAX)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t addr;
		if (ph[i].p_type != PT_NOTE || ph[i].p_filesz == 0 ||
		    ph[i].p_filesz > STB_ELF_MAX_NOTE_BYTES || ph[i].p_vaddr < first ||
		    __builtin_add_overflow(base, ph[i].p_vaddr - first, &addr))
			continue;
		uint8_t *note = malloc((size_t)ph[i].p_filesz);
		if (!note)
			return 0;
		unsigned k = 0;
		if (stb_mods_read(r, addr, note, (size_t)ph[i].p_filesz) == 0)
			k = stb_elf_build_id(note, (size_t)ph[i].p_filesz, ph[i].p_align, id, cap);
		free(note);
		if (k)
			return k;
	}
	return 0;
}

int stb_mods_open(const struct stb_mods *r, const char *path, dev_t dev, ino_t ino, uint64_t map_lo,
		  uint64_t map_hi)
{
	char buf[PATH_MAX + 64];
	struct statfs sf;
	struct stat st;
	int fd;

	if (r->frozen) {
		/* Only a regular file is opened (a device could act on open). */
		if (!frozen_local(r, path, buf, sizeof(buf)) || stat(buf, &st) != 0 ||
		    !S_ISREG(st.st_mode))
			return -ENOENT;
		fd = open(buf, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	} else {
		snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
			 (int)r->read_pid, map_lo, map_hi);
		fd = open(buf, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	}
	if (fd < 0 && !r->frozen) {
		snprintf(buf, sizeof(buf), "/proc/%d/root%s", (int)r->read_pid, path);
		fd = open(buf, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	}
	if (fd < 0 && path[0] == '/' && !r->frozen)
		fd = open(path,
			  O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* the target is gone: same file? */
	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != ino || st.st_dev != dev) {
		close(fd);
		return -ESTALE;
	}
	if (fstatfs(fd, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* The same file already loaded by the previous table (its image is reused). */
static const struct stb_mod *find_old(const struct stb_modtab *old, const struct mapline *ml)
{
	if (!old)
		return NULL;
	for (size_t i = 0; i < old->nmods; i++) {
		const struct stb_mod *o = &old->mods[i];
		if (o->img && !o->image && o->ino == ml->ino &&
		    o->dev == makedev(ml->dmaj, ml->dmin) && ml->start >= o->lo &&
		    ml->start < o->hi && o->path && strcmp(o->path, ml->path) == 0)
			return o;
	}
	return NULL;
}

/* The build id in the target's memory must be the file's. */
static bool same_build_id(pid_t pid, const struct stb_elf_mod *em)
{
	for (unsigned i = 0; i < em->nnotes; i++) {
		const struct stb_elf_note *n = &em->notes[i];
		uint8_t id[64];
		if (n->len == 0 || n->len > STB_ELF_MAX_NOTE_BYTES)
			continue;
		uint8_t *note = malloc((size_t)n->len);
		if (!note)
			return true; /* cannot tell: trust the file */
		unsigned k = 0;
		if (stb_mods_read_target(pid, n->addr, note, (size_t)n->len) == 0)
			k = stb_elf_build_id(note, (size_t)n->len, n->align, id, sizeof(id));
		free(note);
		if (k)
			return k == em->build_id_len && memcmp(id, em->build_id, k) == 0;
	}
	return true;
}

/* Loads a file module for a remote target. Returns 0 (m filled; failures
 * leave a range-only module), 1 (ml->maybe: the mapping is not executable)
 * or -ENOMEM. */
static int mod_from_file(struct stb_mods *r, struct stb_modtab *t, struct stb_mod *m,
			 const struct mapline *ml)
{
	struct stb_mod_image *im = NULL;
	uint64_t left = STB_MODS_MAX_BYTES - t->bytes;
	struct stat st;
	int fd, ret;

	if (t->files >= STB_MODS_MAX_FILES || t->bytes >= STB_MODS_MAX_BYTES) {
		m->flags |= STB_UNW_MOD_TOO_BIG;
		return 0;
	}
	fd = stb_mods_open(r, ml->path, makedev(ml->dmaj, ml->dmin), ml->ino, ml->start, ml->end);
	if (fd >= 0 && fstat(fd, &st) < 0) {
		close(fd);
		fd = -EIO;
	}
	if (fd < 0) {
		m->flags |= fd == -ESTALE ? STB_UNW_MOD_CHANGED : STB_UNW_MOD_NO_FILE;
		return 0;
	}
	t->files++;
	im = calloc(1, sizeof(*im));
	if (!im) {
		close(fd);
		return -ENOMEM;
	}
	struct fd_src fs = {.fd = fd};
	/* A live target's tables are read when a walk first needs them: most
	 * modules of a process are never on a traced stack. */
	struct stb_elf_src src = {.read = fd_read, .arg = &fs, .size = (uint64_t)st.st_size,
				  .defer_tables = !r->frozen && r->pid != 0};
	ret = stb_elf_mod_load(&src, ml->start, ml->off, &left, &im->em);
	close(fd);
	if (ret == -ENOMEM) {
		free(im);
		return ret;
	}
	if (ret < 0) {
		free(im);
		if (ret == -ENOEXEC && ml->maybe)
			return 1; /* not an executable mapping of the file */
		m->flags |= STB_UNW_MOD_NO_FILE;
		return 0;
	}
	if (r->frozen) {
		/* The file must be the object the core was made with. */
		uint8_t id[64];
		unsigned k = frozen_build_id(r, ml->base, id, sizeof(id));
		if (!k) {
			m->flags |= STB_UNW_MOD_UNVERIFIED;
		} else if (k != im->em.build_id_len || memcmp(id, im->em.build_id, k) != 0) {
			stb_elf_mod_free(&im->em);
			free(im);
			m->flags |= STB_UNW_MOD_CHANGED;
			m->build_id_len = k; /* the mapped object's */
			memcpy(m->build_id, id, k);
			return 0;
		}
	} else if (!same_build_id(r->read_pid, &im->em)) {
		stb_elf_mod_free(&im->em);
		free(im);
		m->flags |= STB_UNW_MOD_CHANGED;
		return 0;
	}
	if (im->em.tables_deferred) {
		im->lazy = true; /* the budget is taken now, for when they are read */
		atomic_init(&im->tables, TABLES_DEFERRED);
		t->bytes += im->em.hdr_len + im->em.eh_frame_len;
	} else {
		t->bytes += im->em.hdr.len + im->em.eh_frame.len;
	}
	mod_set_elf(m, &im->em);
	ret = mod_use_image(t, m, im);
	if (ret < 0) {
		return ret; /* im is owned by m (refs 1), released with t */
	}
	return 0;
}

/* Reads from a vdso copy (an image as loaded). */
static int vdso_read(void *arg, uint64_t off, void *dst, size_t len)
{
	const struct stb_mod_image *im = arg;

	if (off > im->vdso_len || len > im->vdso_len - off)
		return -EIO;
	memcpy(dst, im->vdso + off, len);
	return 0;
}

static int add_vdso(struct stb_mods *r, struct stb_modtab *t, const struct mapline *ml)
{
	struct stb_mod *m = modtab_add(t);
	size_t len = (size_t)(ml->end - ml->start);
	uint64_t left = STB_MODS_MAX_VDSO;
	struct stb_mod_image *im;
	int ret;

	if (!m)
		return -ENOMEM;
	m->flags = STB_UNW_MOD_VDSO;
	m->lo = ml->start;
	m->hi = ml->end;
	m->path = strdup("[vdso]");
	if (!m->path)
		return -ENOMEM;
	if (ml->end - ml->start > STB_MODS_MAX_VDSO) {
		m->flags |= STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_TOO_BIG;
		return 0;
	}
	im = calloc(1, sizeof(*im));
	if (!im)
		return -ENOMEM;
	im->vdso = malloc(len);
	if (!im->vdso) {
		free(im);
		return -ENOMEM;
	}
	im->vdso_len = len;
	if (r->pid == 0 && ml->start == getauxval(AT_SYSINFO_EHDR))
		memcpy(im->vdso, (const void *)(uintptr_t)ml->start, len);
	else if (stb_mods_read(r, ml->start, im->vdso, len) < 0)
		goto noimage;
	struct stb_elf_src src = {.read = vdso_read, .arg = im, .size = len, .mem_layout = true};
	ret = stb_elf_mod_load(&src, ml->start, 0, &left, &im->em);
	if (ret == -ENOMEM) {
		free(im->vdso);
		free(im);
		return ret;
	}
	if (ret < 0)
		goto noimage;
	mod_set_elf(m, &im->em);
	m->lo = ml->start;
	m->hi = ml->end;
	if (m->load_lo > m->lo || m->load_lo == 0)
		m->load_lo = m->lo;
	if (m->load_hi < m->hi)
		m->load_hi = m->hi;
	/* The whole image is readable locally (code included). */
	ret = modtab_add_seg(t, ml->start, len, im->vdso, false, im);
	if (ret < 0) {
		stb_elf_mod_free(&im->em);
		free(im->vdso);
		free(im);
		return ret;
	}
	t->bytes += len;
	/* Tables from the pieces copied out of the image; the image itself is
	 * the one segment (code included) and what libdwfl reads. */
	m->img = im;
	atomic_init(&im->refs, 1);
	m->image = im->vdso;
	m->image_len = len;
	if (im->em.has_table) {
		m->has_table = true;
		m->table = im->em.table;
		m->eh_frame = (struct stb_cfi_bytes){.data = im->em.eh_frame.data,
						     .len = im->em.eh_frame.len,
						     .addr = im->em.eh_frame.addr};
	} else {
		m->flags |= STB_UNW_MOD_NO_TABLE | STB_UNW_MOD_FP_ONLY;
	}
	return 0;
noimage:
	free(im->vdso);
	free(im);
	m->flags |= STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE;
	return 0;
}

/* The module of a file-backed executable mapping. Returns 0 or -ENOMEM. */
static int add_file(struct stb_mods *r, struct stb_modtab *t, const struct stb_modtab *old,
		    const struct dlset *dl, const struct mapline *ml)
{
	const struct stb_mod *o;
	struct stb_mod *m;
	size_t nsegs = t->nsegs;
	int ret;

	/* The same file mapped again inside a module already added. */
	for (size_t i = 0; i < t->nmods; i++) {
		const struct stb_mod *x = &t->mods[i];
		if (x->ino == ml->ino && x->dev == makedev(ml->dmaj, ml->dmin) &&
		    ml->start >= x->lo && ml->start < x->hi)
			return 0;
	}
	m = modtab_add(t);
	if (!m)
		return t->nmods >= STB_MODS_MAX_MODULES ? 0 : -ENOMEM;
	m->dev = makedev(ml->dmaj, ml->dmin);
	m->ino = ml->ino;
	m->map_lo = ml->start;
	m->map_hi = ml->end;
	m->path = strdup(ml->path);
	if (!m->path)
		return -ENOMEM; /* m is released with t */
	if (r->pid == 0) {
		for (size_t k = 0; k < dl->n; k++) {
			if (!dl_holds(&dl->objs[k], ml->start))
				continue;
			ret = mod_from_self(t, m, &dl->objs[k]);
			if (ret == 0 || ret == -ENOMEM)
				return ret;
			t->nsegs = nsegs;
			m->lo = m->hi = m->load_lo = m->load_hi = 0;
			m->flags = 0;
			m->has_table = false;
			m->build_id_len = 0;
			break;
		}
	}
	o = find_old(old, ml);
	if (o) {
		mod_set_elf(m, &o->img->em);
		return mod_use_image(t, m, o->img);
	}
	ret = mod_from_file(r, t, m, ml);
	if (ret < 0)
		return ret;
	if (ret == 1) {
		free(m->path); /* m is the last module */
		t->nmods--;
		t->nsegs = nsegs;
		return 0;
	}
	if (m->lo < m->hi)
		return 0;
	/* Unreadable or not ELF: keep the range known so that its ips do not
	 * trigger refreshes; walks use frame pointers there. */
	t->nsegs = nsegs;
	m->lo = ml->start;
	m->hi = ml->end;
	m->flags |= STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE;
	if (!(m->flags & (STB_UNW_MOD_CHANGED | STB_UNW_MOD_TOO_BIG)))
		m->flags |= STB_UNW_MOD_NO_FILE;
	return 0;
}

/* The module of one executable mapping. Returns 0 or -ENOMEM. */
static int add_mapping(struct stb_mods *r, struct stb_modtab *t, const struct stb_modtab *old,
		       const struct dlset *dl, const struct mapline *ml)
{
	if (strcmp(ml->path, "[vdso]") == 0)
		return add_vdso(r, t, ml);
	/* A frozen target's file is looked up even when it is missing here
	 * (ino 0): the module then says that it has no file. */
	if (ml->path[0] == '/' && (ml->ino != 0 || r->frozen))
		return add_file(r, t, old, dl, ml);
	struct stb_mod *m = modtab_add(t);
	if (!m)
		return t->nmods >= STB_MODS_MAX_MODULES ? 0 : -ENOMEM;
	m->lo = ml->start;
	m->hi = ml->end;
	m->flags = STB_UNW_MOD_ANON | STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_NO_TABLE;
	m->path = strdup(ml->path);
	return m->path ? 0 : -ENOMEM;
}

/* Frozen: mapping i as a maps line (the identity of its file here, where
 * its ELF header is mapped). false: not executable. */
static bool frozen_mapline(const struct stb_mods *r, size_t i, struct mapline *ml)
{
	const struct mods_frozen *f = r->frozen;
	const struct stb_mods_map *m = &f->maps[i];
	char buf[PATH_MAX + 64];
	struct stat st;
	if (m->exec == 0 || m->end <= m->start)
		return false;
	memset(ml, 0, sizeof(*ml));
	ml->start = m->start;
	ml->end = m->end;
	ml->off = m->off;
	memcpy(ml->perms, "r-xp", 5);
	ml->path = m->path ? m->path : "";
	ml->maybe = m->exec < 0;
	if (ml->maybe && (!m->path || m->path[0] != '/'))
		return false; /* an executable anonymous mapping is in the core */
	if (!m->path || m->path[0] != '/')
		return true;
	if (frozen_local(r, m->path, buf, sizeof(buf)) && stat(buf, &st) == 0 && S_ISREG(st.st_mode)) {
		ml->dmaj = major(st.st_dev);
		ml->dmin = minor(st.st_dev);
		ml->ino = (unsigned long)st.st_ino;
	}
	/* The mapping of the same file from offset 0 (nearest below). */
	for (size_t k = i + 1, n = 0; k-- > 0 && n < 256; n++) {
		const struct stb_mods_map *b = &f->maps[k];
		if (b->path && b->off == 0 && strcmp(b->path, m->path) == 0 && b->start <= m->start) {
			ml->base = b->start;
			break;
		}
	}
	return true;
}

/* Builds a table from /proc/PID/maps (frozen: from its mappings), reusing
 * the images of old. */
static int build(struct stb_mods *r, const struct stb_modtab *old, uint64_t deadline_ns,
		 struct stb_modtab **out)
{
	struct stb_modtab *t = NULL;
	struct dlset dl = {0};
	char path[64], *line = NULL;
	size_t linecap = 0;
	FILE *f = NULL;
	int ret = 0;

	if (!r->frozen) {
		snprintf(path, sizeof(path), "/proc/%d/maps", (int)r->read_pid);
		f = fopen(path, "re");
		if (!f) {
			ret = errno == ENOENT ? -ESRCH : -errno;
			goto cleanup;
		}
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		ret = -ENOMEM;
		goto cleanup;
	}
	if (r->pid == 0) {
		dl_iterate_phdr(dl_collect, &dl);
		if (dl.oom) {
			ret = -ENOMEM;
			goto cleanup;
		}
	}
	for (size_t i = 0; r->frozen && i < r->frozen->nmaps; i++) {
		struct mapline ml;
		if (deadline_ns && stb_now_ns() > deadline_ns) {
			ret = -ETIMEDOUT;
			goto cleanup;
		}
		if (frozen_mapline(r, i, &ml) && (ret = add_mapping(r, t, old, &dl, &ml)) < 0)
			goto cleanup;
	}
	while (f && getline(&line, &linecap, f) > 0) {
		struct mapline ml;

		if (deadline_ns && stb_now_ns() > deadline_ns) {
			ret = -ETIMEDOUT;
			goto cleanup;
		}
		if (parse_mapline(line, &ml) < 0 || ml.perms[2] != 'x')
			continue;
		ret = add_mapping(r, t, old, &dl, &ml);
		if (ret < 0)
			goto cleanup;
	}
	if (f && ferror(f)) {
		ret = -EIO;
		goto cleanup;
	}
	qsort(t->mods, t->nmods, sizeof(*t->mods), mod_cmp);
	qsort(t->segs, t->nsegs, sizeof(*t->segs), seg_cmp);
	/* Overlapping ranges (a hostile /proc view cannot make them, but a
	 * mapping replaced mid-read can): keep the first of each overlap. */
	size_t w = 0;
	for (size_t i = 0; i < t->nmods; i++) {
		struct stb_mod *m = &t->mods[i];
		if (w == 0 || m->lo >= t->mods[w - 1].hi) {
			t->mods[w++] = *m;
			continue;
		}
		if (m->img) {
			size_t k = 0;
			for (size_t j = 0; j < t->nsegs; j++)
				if (t->segs[j].owner != m->img)
					t->segs[k++] = t->segs[j];
			t->nsegs = k;
		}
		image_unref(m->img);
		free(m->path);
	}
	t->nmods = w;
	*out = t;
	t = NULL;
cleanup:
	modtab_free(t);
	free(dl.objs);
	free(line);
	if (f)
		fclose(f);
	return ret;
}

/* ------------------------------------------------------------ registry */

static void frozen_free(struct mods_frozen *f)
{
	if (!f)
		return;
	free(f->sysroot);
	free(f->exe_path);
	free(f->exe);
	free(f);
}

/* The registry of pid, or of a frozen target (pid -1, frozen owned). */
static struct stb_mods *mods_create(pid_t pid, struct mods_frozen *frozen)
{
	struct stb_mods *r = NULL;
	pthread_rwlockattr_t ra;
	unsigned long long counts[2] = {0, 0};
	int ret = 0, have_lock = 0, have_mutex = 0;

	if (pid < 0 && !frozen) {
		ret = -EINVAL;
		goto cleanup;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		ret = -ENOMEM;
		goto cleanup;
	}
	r->pid = pid;
	r->read_pid = pid ? pid : getpid();
	r->frozen = frozen;
	atomic_init(&r->refs, 1);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	ret = -pthread_rwlock_init(&r->lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	if (ret < 0)
		goto cleanup;
	have_lock = 1;
	ret = -pthread_mutex_init(&r->refresh_lock, NULL);
	if (ret < 0)
		goto cleanup;
	have_mutex = 1;
	ret = -pthread_mutex_init(&r->tables_lock, NULL);
	if (ret < 0)
		goto cleanup;
	have_mutex = 2;
	if (pid == 0)
		dl_iterate_phdr(dl_counts, counts);
	ret = build(r, NULL, 0, &r->tab);
	if (ret < 0)
		goto cleanup;
	r->tab->gen = r->next_gen = 1;
	atomic_init(&r->tab->refs, 1);
	atomic_store_explicit(&r->gen, 1, memory_order_release);
	r->dl_adds = counts[0];
	r->dl_subs = counts[1];
	atomic_store_explicit(&r->last_refresh_ns, stb_now_ns(), memory_order_relaxed);
cleanup:
	if (ret < 0) {
		if (r) {
			if (have_lock)
				pthread_rwlock_destroy(&r->lock);
			if (have_mutex)
				pthread_mutex_destroy(&r->refresh_lock);
			if (have_mutex > 1)
				pthread_mutex_destroy(&r->tables_lock);
			free(r);
		}
		frozen_free(frozen);
		errno = -ret;
		return NULL;
	}
	if (frozen) {
		frozen->maps = NULL; /* never rebuilt */
		frozen->nmaps = 0;
	}
	return r;
}

struct stb_mods *stb_mods_new(pid_t pid)
{
	if (pid < 0) {
		errno = EINVAL;
		return NULL;
	}
	return mods_create(pid, NULL);
}

static char *dup_or_null(const char *s, bool *oom)
{
	char *d = s ? strdup(s) : NULL;
	if (s && !d)
		*oom = true;
	return d;
}

struct stb_mods *stb_mods_new_frozen(const struct stb_mods_frozen *f)
{
	if (!f || !f->read || (f->nmaps && !f->maps)) {
		errno = EINVAL;
		return NULL;
	}
	struct mods_frozen *z = calloc(1, sizeof(*z));
	bool oom = !z;
	if (z) {
		z->read = f->read;
		z->ctx = f->ctx;
		z->maps = f->maps;
		z->nmaps = f->nmaps;
		/* sysroot "/" or "dir/" is "" or "dir": paths start with '/'. */
		size_t n = f->sysroot ? strlen(f->sysroot) : 0;
		while (n && f->sysroot[n - 1] == '/')
			n--;
		z->sysroot = strndup(f->sysroot ? f->sysroot : "", n);
		oom = !z->sysroot;
		z->exe_path = dup_or_null(f->exe_path, &oom);
		z->exe = dup_or_null(f->exe, &oom);
	}
	if (oom) {
		frozen_free(z);
		errno = ENOMEM;
		return NULL;
	}
	return mods_create(-1, z);
}

struct stb_mods *stb_mods_ref(struct stb_mods *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
	return r;
}

void stb_mods_unref(struct stb_mods *r)
{
	if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
		return;
	stb_mods_release(r->tab);
	frozen_free(r->frozen);
	pthread_rwlock_destroy(&r->lock);
	pthread_mutex_destroy(&r->refresh_lock);
	pthread_mutex_destroy(&r->tables_lock);
	free(r);
}

/* Reads the deferred tables of m's image (under tables_lock). Returns the
 * image's new state; DEFERRED again when memory ran out. */
static int read_tables(struct stb_mods *r, const struct stb_mod *m, struct stb_mod_image *im)
{
	struct stat st;
	int fd, ret;

	fd = stb_mods_open(r, m->path, m->dev, m->ino, m->map_lo, m->map_hi);
	if (fd < 0)
		return TABLES_NONE; /* gone or replaced since the registry read it */
	if (fstat(fd, &st) < 0) {
		close(fd);
		return TABLES_NONE;
	}
	struct fd_src fs = {.fd = fd};
	struct stb_elf_src src = {.read = fd_read, .arg = &fs, .size = (uint64_t)st.st_size};
	ret = stb_elf_mod_load_tables(&src, &im->em);
	close(fd);
	if (ret == -ENOMEM)
		return TABLES_DEFERRED;
	if (ret < 0)
		return TABLES_NONE;
	im->eh_frame = (struct stb_cfi_bytes){
	    .data = im->em.eh_frame.data, .len = im->em.eh_frame.len, .addr = im->em.eh_frame.addr};
	atomic_fetch_add_explicit(&r->tables_read, 1, memory_order_relaxed);
	return TABLES_READY;
}

uint64_t stb_mods_tables_read(const struct stb_mods *r)
{
	return atomic_load_explicit(&r->tables_read, memory_order_relaxed);
}

const uint8_t *stb_modtab_table_bytes(const struct stb_modtab *t, uint64_t addr, size_t len)
{
	for (size_t i = 0; i < t->nmods && t->nlazy; i++) {
		const struct stb_mod *m = &t->mods[i];
		if (!m->lazy_table || atomic_load_explicit(&m->img->tables, memory_order_acquire) !=
					  TABLES_READY)
			continue;
		const struct stb_elf_piece *pc[2] = {&m->img->em.hdr, &m->img->em.eh_frame};
		for (int k = 0; k < 2; k++)
			if (addr - pc[k]->addr < pc[k]->len && pc[k]->len - (addr - pc[k]->addr) >= len)
				return pc[k]->data + (addr - pc[k]->addr);
	}
	return NULL;
}

int stb_mods_tables(struct stb_mods *r, const struct stb_mod *m, const struct stb_cfi_hdr **hdr,
		    const struct stb_cfi_bytes **eh_frame)
{
	struct stb_mod_image *im = m->img;
	int state;

	if (!m->lazy_table) {
		if (!m->has_table)
			return -ENOENT;
		*hdr = &m->table;
		*eh_frame = &m->eh_frame;
		return 0;
	}
	state = atomic_load_explicit(&im->tables, memory_order_acquire);
	if (state == TABLES_DEFERRED) {
		pthread_mutex_lock(&r->tables_lock);
		state = atomic_load_explicit(&im->tables, memory_order_relaxed);
		if (state == TABLES_DEFERRED) {
			state = read_tables(r, m, im);
			if (state != TABLES_DEFERRED)
				atomic_store_explicit(&im->tables, state, memory_order_release);
		}
		pthread_mutex_unlock(&r->tables_lock);
	}
	if (state != TABLES_READY)
		return -ENOENT;
	*hdr = &im->em.table;
	*eh_frame = &im->eh_frame;
	return 0;
}

pid_t stb_mods_pid(const struct stb_mods *r)
{
	return r->pid;
}

pid_t stb_mods_read_pid(const struct stb_mods *r)
{
	return r->read_pid;
}

const struct stb_modtab *stb_mods_acquire(struct stb_mods *r)
{
	struct stb_modtab *t;

	pthread_rwlock_rdlock(&r->lock);
	t = r->tab;
	atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
	pthread_rwlock_unlock(&r->lock);
	return t;
}

void stb_mods_release(const struct stb_modtab *t)
{
	struct stb_modtab *m = (struct stb_modtab *)(uintptr_t)t;

	if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
		modtab_free(m);
}

uint64_t stb_mods_gen(struct stb_mods *r)
{
	return atomic_load_explicit(&r->gen, memory_order_acquire);
}

uint64_t stb_mods_refreshes(struct stb_mods *r)
{
	return atomic_load_explicit(&r->refreshes, memory_order_relaxed);
}

int stb_mods_refresh(struct stb_mods *r, bool forced, uint64_t deadline_ns)
{
	struct stb_modtab *t = NULL, *old;
	unsigned long long counts[2] = {0, 0};
	uint64_t now = stb_now_ns(), min = r->pid ? REMOTE_REFRESH_NS : SELF_REFRESH_NS;
	int ret;

	if (r->frozen)
		return 0; /* nothing changes in a core */
	if (!forced && now - atomic_load_explicit(&r->last_refresh_ns, memory_order_relaxed) < min)
		return 0;
	if (forced)
		pthread_mutex_lock(&r->refresh_lock);
	else if (pthread_mutex_trylock(&r->refresh_lock) != 0)
		return 0; /* someone else is rebuilding */
	if (r->pid == 0) {
		dl_iterate_phdr(dl_counts, counts);
		if (!forced && counts[0] == r->dl_adds && counts[1] == r->dl_subs) {
			atomic_store_explicit(&r->last_refresh_ns, now, memory_order_relaxed);
			ret = 0;
			goto cleanup;
		}
	}
	old = r->tab; /* stable: only replaced under refresh_lock */
	ret = build(r, old, deadline_ns, &t);
	if (ret < 0)
		goto cleanup;
	t->gen = ++r->next_gen;
	atomic_init(&t->refs, 1); /* the registry's */
	pthread_rwlock_wrlock(&r->lock);
	r->tab = t;
	atomic_store_explicit(&r->gen, t->gen, memory_order_release);
	pthread_rwlock_unlock(&r->lock);
	stb_mods_release(old); /* freed when the last walk using it ends */
	r->dl_adds = counts[0];
	r->dl_subs = counts[1];
	atomic_fetch_add_explicit(&r->refreshes, 1, memory_order_relaxed);
	ret = 1;
cleanup:
	atomic_store_explicit(&r->last_refresh_ns, stb_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&r->refresh_lock);
	return ret;
}
