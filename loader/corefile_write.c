/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The core file writer of corefile_write.h: segment bytes appended as they
 * come after a header area reserved for the program headers, the notes
 * after the last segment, then the ELF header; the unnamed file is synced
 * and linked at its path (or renamed over it with --overwrite).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <sys/user.h>
#include <unistd.h>

#include "corefile.h" /* the "STB" note */
#include "corefile_write.h"
#include "hashset.h"
#include "util.h"

#define PAGE 4096u
#define NOTE_FILE 0x46494c45u /* NT_FILE */
#define NOTES_AT 128u         /* after the ELF header and section header 0 */

/* What corefile.c reads of these notes, at the offsets it reads them. */
_Static_assert(offsetof(struct elf_prstatus, pr_pid) == 32, "pr_pid");
_Static_assert(offsetof(struct elf_prstatus, pr_reg) == 112, "pr_reg");
_Static_assert(offsetof(struct elf_prpsinfo, pr_pid) == 24, "pr_pid");
_Static_assert(offsetof(struct elf_prpsinfo, pr_fname) == 40, "pr_fname");
_Static_assert(sizeof(elf_gregset_t) == sizeof(struct user_regs_struct), "pr_reg");

struct wfile {
	uint64_t start, end, pgoff;
	size_t name; /* offset in names */
};

struct stb_corewrite {
	int fd;
	char *path;
	char *tmp;      /* the named temporary (no O_TMPFILE here), else NULL */
	char *dir;      /* path's directory */
	bool force;
	uint64_t budget, reserve, used;
	uint64_t off;   /* where the next bytes go */
	size_t notes_room;
	uint64_t phdrs_at;
	Elf64_Phdr *loads;
	size_t nloads, max_loads;
	uint8_t *notes; /* NT_PRSTATUS notes, then the others at commit */
	size_t nnotes_len, capnotes;
	uint32_t *tids;
	size_t ntids, captids;
	struct stb_corefile_note_thread *listed; /* the "STB" note */
	size_t nlisted, caplisted;
	struct wfile *files;
	size_t nfiles, capfiles;
	char *names;
	size_t names_len, capnames;
	uint8_t auxv[4096];
	size_t auxv_len;
	uint32_t pid;
	char comm[16];
};

/* Exactly len bytes at off: 0 or -errno (-ENOSPC for a short write). */
static int write_at(int fd, uint64_t off, const void *src, size_t len)
{
	const uint8_t *s = src;
	while (len) {
		ssize_t n = pwrite(fd, s, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENOSPC;
		s += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* A note of owner "CORE", or of owner (at most 7 bytes) when not NULL. */
static int note_of(struct stb_corewrite *w, const char *owner, uint32_t type, const void *desc,
		   size_t len)
{
	/* namesz, descsz, type; the owner NUL-terminated, padded to 4; desc
	 * padded to 4. */
	char name[8] = "CORE";
	if (owner)
		strncpy(name, owner, sizeof(name) - 1);
	size_t namesz = strlen(name) + 1, name_pad = (namesz + 3) & ~(size_t)3;
	size_t pad = (len + 3) & ~(size_t)3, need = w->nnotes_len + 12 + name_pad + pad;
	if (len > UINT32_MAX || stb_grow(&w->notes, &w->capnotes, need, 1) != 0)
		return -ENOMEM;
	uint8_t *p = w->notes + w->nnotes_len;
	uint32_t hdr[3] = {(uint32_t)namesz, (uint32_t)len, type};
	memcpy(p, hdr, sizeof(hdr));
	memcpy(p + 12, name, name_pad);
	memcpy(p + 12 + name_pad, desc, len);
	memset(p + 12 + name_pad + len, 0, pad - len);
	w->nnotes_len = need;
	return 0;
}

static int note_add(struct stb_corewrite *w, uint32_t type, const void *desc, size_t len)
{
	return note_of(w, NULL, type, desc, len);
}

size_t stb_corewrite_note_size(size_t desc_len)
{
	return 12 + 8 + ((desc_len + 3) & ~(size_t)3);
}

struct stb_corewrite *stb_corewrite_open(const char *path, bool force, uint64_t budget,
					 size_t max_segs, size_t notes_room, char *err,
					 size_t errlen)
{
	struct stb_corewrite *w = calloc(1, sizeof(*w));
	char *copy = strdup(path);
	int rc = 0;
	if (!w || !copy) {
		rc = -ENOMEM;
		stb_say(err, errlen, "out of memory");
		goto cleanup;
	}
	w->fd = -1;
	w->force = force;
	w->budget = budget;
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!force) {
			rc = -EEXIST;
			stb_say(err, errlen, "%s exists: give --overwrite to replace it", path);
			goto cleanup;
		}
		if (!S_ISREG(st.st_mode)) {
			rc = -EEXIST;
			stb_say(err, errlen, "%s exists and is not a regular file: not replaced", path);
			goto cleanup;
		}
	}
	w->path = strdup(path);
	w->dir = strdup(dirname(copy));
	if (max_segs > (1u << 22))
		max_segs = 1u << 22;
	w->max_loads = max_segs;
	w->loads = calloc(max_segs ? max_segs : 1, sizeof(*w->loads));
	if (!w->path || !w->dir || !w->loads) {
		rc = -ENOMEM;
		stb_say(err, errlen, "out of memory");
		goto cleanup;
	}
	w->fd = open(w->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (w->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		/* A file system without unnamed files: a named one, removed on failure. */
		size_t n = strlen(path) + 32;
		w->tmp = malloc(n);
		if (!w->tmp) {
			rc = -ENOMEM;
			stb_say(err, errlen, "out of memory");
			goto cleanup;
		}
		snprintf(w->tmp, n, "%s.tmp.%d", path, (int)getpid());
		w->fd = open(w->tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (w->fd < 0) {
			free(w->tmp);
			w->tmp = NULL;
		}
	}
	if (w->fd < 0 || fchmod(w->fd, 0600) != 0) {
		rc = -errno;
		stb_say(err, errlen, "cannot create %s: %s", path, strerror(-rc));
		goto cleanup;
	}
	/* The ELF header, section header 0 (a count over 65534), the notes and
	 * the program headers: reserved now, written last. */
	if (notes_room > (256u << 20))
		notes_room = 256u << 20;
	w->notes_room = (notes_room + 7) & ~(size_t)7;
	w->phdrs_at = NOTES_AT + w->notes_room;
	w->off = (w->phdrs_at + (uint64_t)(max_segs + 1) * sizeof(Elf64_Phdr) + PAGE - 1) &
		 ~(uint64_t)(PAGE - 1);
cleanup:
	free(copy);
	if (rc) {
		stb_corewrite_abort(w);
		errno = -rc;
		return NULL;
	}
	return w;
}

void stb_corewrite_reserve(struct stb_corewrite *w, uint64_t bytes)
{
	w->reserve = bytes;
}

uint64_t stb_corewrite_left(const struct stb_corewrite *w)
{
	uint64_t spent = w->used + w->reserve;
	return spent < w->budget ? w->budget - spent : 0;
}

uint64_t stb_corewrite_size(const struct stb_corewrite *w)
{
	return w->off + (w->nnotes_len > w->notes_room ? w->nnotes_len : 0);
}

/* Segment bytes at the end of the data, within the budget (a must
 * segment's from the reserve). 0, -EFBIG or -errno. */
static int put(struct stb_corewrite *w, const void *bytes, size_t len, unsigned flags)
{
	if (flags & STB_COREWRITE_MUST)
		w->reserve = w->reserve > len ? w->reserve - len : 0;
	else if (len > stb_corewrite_left(w))
		return -EFBIG;
	int rc = len ? write_at(w->fd, w->off, bytes, len) : 0;
	if (rc)
		return rc;
	w->off += len;
	w->used += len;
	return 0;
}

int stb_corewrite_load(struct stb_corewrite *w, uint64_t vaddr, uint64_t memsz, const void *bytes,
		       size_t len, unsigned flags)
{
	uint64_t end;
	if (len > memsz || memsz == 0 || __builtin_add_overflow(vaddr, memsz, &end))
		return -EINVAL;
	if (w->nloads >= w->max_loads)
		return -E2BIG;
	uint64_t at = w->off;
	int rc = put(w, bytes, len, flags);
	if (rc)
		return rc;
	w->loads[w->nloads++] = (Elf64_Phdr){.p_type = PT_LOAD,
					     .p_flags = flags & (PF_R | PF_W | PF_X),
					     .p_offset = at,
					     .p_vaddr = vaddr,
					     .p_filesz = len,
					     .p_memsz = memsz,
					     .p_align = 1};
	return 0;
}

int stb_corewrite_more(struct stb_corewrite *w, const void *bytes, size_t len, unsigned flags)
{
	if (!w->nloads)
		return -EINVAL;
	Elf64_Phdr *p = &w->loads[w->nloads - 1];
	if (p->p_offset + p->p_filesz != w->off || len > p->p_memsz - p->p_filesz)
		return -EINVAL;
	int rc = put(w, bytes, len, flags);
	if (rc == 0)
		p->p_filesz += len;
	return rc;
}

int stb_corewrite_thread(struct stb_corewrite *w, uint32_t tid, const struct stb_regs *regs,
			 int64_t syscall_nr, uint64_t arg0)
{
	for (size_t i = 0; i < w->ntids; i++)
		if (w->tids[i] == tid)
			return 0;
	if (stb_grow(&w->tids, &w->captids, w->ntids + 1, sizeof(*w->tids)) != 0)
		return -ENOMEM;
	w->tids[w->ntids++] = tid;
	struct user_regs_struct r = {.r15 = regs->r15, .r14 = regs->r14, .r13 = regs->r13,
				     .r12 = regs->r12, .rbp = regs->bp, .rbx = regs->bx,
				     .rip = regs->ip, .rsp = regs->sp, .orig_rax = UINT64_MAX};
	if (syscall_nr >= 0) {
		r.orig_rax = (uint64_t)syscall_nr;
		r.rax = (uint64_t)-ENOSYS;
		r.rdi = arg0;
	}
	struct elf_prstatus ps;
	memset(&ps, 0, sizeof(ps));
	ps.pr_pid = (pid_t)tid;
	ps.pr_ppid = 0;
	memcpy(&ps.pr_reg, &r, sizeof(r));
	return note_add(w, NT_PRSTATUS, &ps, sizeof(ps));
}

int stb_corewrite_thread_info(struct stb_corewrite *w, uint32_t tid, const char *name,
			      unsigned flags, unsigned cut)
{
	if (stb_grow(&w->listed, &w->caplisted, w->nlisted + 1, sizeof(*w->listed)) != 0)
		return -ENOMEM;
	struct stb_corefile_note_thread *l = &w->listed[w->nlisted++];
	memset(l, 0, sizeof(*l));
	l->tid = tid;
	l->flags = flags;
	l->cut = cut;
	if (name)
		strncpy(l->name, name, sizeof(l->name) - 1);
	return 0;
}

int stb_corewrite_process(struct stb_corewrite *w, uint32_t pid, const char *comm)
{
	w->pid = pid;
	memset(w->comm, 0, sizeof(w->comm));
	strncpy(w->comm, comm, sizeof(w->comm) - 1);
	return 0;
}

int stb_corewrite_auxv(struct stb_corewrite *w, const void *auxv, size_t len)
{
	w->auxv_len = len < sizeof(w->auxv) ? len : sizeof(w->auxv);
	memcpy(w->auxv, auxv, w->auxv_len);
	return 0;
}

int stb_corewrite_file(struct stb_corewrite *w, uint64_t start, uint64_t end, uint64_t off,
		       const char *path)
{
	size_t n = strlen(path) + 1;
	if (end <= start || (off & (PAGE - 1)) ||
	    stb_grow(&w->files, &w->capfiles, w->nfiles + 1, sizeof(*w->files)) != 0 ||
	    stb_grow(&w->names, &w->capnames, w->names_len + n, 1) != 0)
		return end <= start || (off & (PAGE - 1)) ? -EINVAL : -ENOMEM;
	w->files[w->nfiles++] = (struct wfile){start, end, off / PAGE, w->names_len};
	memcpy(w->names + w->names_len, path, n);
	w->names_len += n;
	return 0;
}

static int load_cmp(const void *a, const void *b)
{
	const Elf64_Phdr *x = a, *y = b;
	if (x->p_vaddr != y->p_vaddr)
		return x->p_vaddr < y->p_vaddr ? -1 : 1;
	return x->p_offset < y->p_offset ? -1 : x->p_offset > y->p_offset; /* the first written */
}

/* Sorted, and no segment starting inside another (corefile.c drops those):
 * each is cut to begin where the one before it ends, or dropped. */
static void untangle(struct stb_corewrite *w)
{
	qsort(w->loads, w->nloads, sizeof(*w->loads), load_cmp);
	size_t k = 0;
	uint64_t end = 0;
	for (size_t i = 0; i < w->nloads; i++) {
		Elf64_Phdr p = w->loads[i];
		if (k && p.p_vaddr < end) {
			uint64_t cut = end - p.p_vaddr;
			if (cut >= p.p_memsz)
				continue; /* inside the one before */
			p.p_vaddr += cut;
			p.p_memsz -= cut;
			uint64_t fcut = cut < p.p_filesz ? cut : p.p_filesz;
			p.p_offset += fcut;
			p.p_filesz -= fcut;
		}
		end = p.p_vaddr + p.p_memsz;
		w->loads[k++] = p;
	}
	w->nloads = k;
}

/* The notes other than the threads' registers: the list of threads,
 * process, auxv, files. */
static int tail_notes(struct stb_corewrite *w)
{
	if (w->nlisted) {
		int rc = note_of(w, STB_COREFILE_NOTE_OWNER, STB_COREFILE_NT_THREADS, w->listed,
				 w->nlisted * sizeof(*w->listed));
		if (rc)
			return rc;
	}
	struct elf_prpsinfo ps;
	memset(&ps, 0, sizeof(ps));
	ps.pr_pid = (pid_t)w->pid;
	ps.pr_sname = 'R';
	memcpy(ps.pr_fname, w->comm, sizeof(ps.pr_fname));
	memcpy(ps.pr_psargs, w->comm, sizeof(w->comm));
	int rc = note_add(w, NT_PRPSINFO, &ps, sizeof(ps));
	if (!rc && w->auxv_len)
		rc = note_add(w, NT_AUXV, w->auxv, w->auxv_len);
	if (rc || !w->nfiles)
		return rc;
	size_t len = 16 + w->nfiles * 24 + w->names_len;
	uint8_t *d = malloc(len);
	if (!d)
		return -ENOMEM;
	uint64_t head[2] = {w->nfiles, PAGE};
	memcpy(d, head, sizeof(head));
	for (size_t i = 0; i < w->nfiles; i++) {
		uint64_t e[3] = {w->files[i].start, w->files[i].end, w->files[i].pgoff};
		memcpy(d + 16 + i * 24, e, sizeof(e));
	}
	memcpy(d + 16 + w->nfiles * 24, w->names, w->names_len);
	rc = note_add(w, NOTE_FILE, d, len);
	free(d);
	return rc;
}

/* Gives the synced file its name. 0 or -errno (err set). */
static int publish(struct stb_corewrite *w, char *err, size_t errlen)
{
	int rc = 0;
	char fdpath[64], *tmp2 = NULL;
	if (w->tmp) {
		if (w->force)
			rc = rename(w->tmp, w->path) == 0 ? 0 : -errno;
		else if (link(w->tmp, w->path) != 0)
			rc = -errno;
		else
			unlink(w->tmp);
		if (rc == 0) {
			free(w->tmp);
			w->tmp = NULL;
		}
	} else {
		snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", w->fd);
		if (!w->force) {
			rc = linkat(AT_FDCWD, fdpath, AT_FDCWD, w->path, AT_SYMLINK_FOLLOW) == 0 ? 0
												 : -errno;
		} else {
			size_t n = strlen(w->path) + 32;
			tmp2 = malloc(n);
			if (!tmp2)
				return -ENOMEM;
			snprintf(tmp2, n, "%s.tmp.%d", w->path, (int)getpid());
			rc = linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp2, AT_SYMLINK_FOLLOW) == 0 ? 0 : -errno;
			if (rc == 0 && rename(tmp2, w->path) != 0) {
				rc = -errno;
				unlink(tmp2);
			}
		}
	}
	if (rc == -EEXIST)
		stb_say(err, errlen, "%s appeared while it was written: give --overwrite to replace it",
			w->path);
	else if (rc)
		stb_say(err, errlen, "cannot name %s: %s", w->path, strerror(-rc));
	free(tmp2);
	if (rc == 0) {
		/* The name too survives a crash. */
		int d = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d >= 0) {
			fsync(d);
			close(d);
		}
	}
	return rc;
}

int stb_corewrite_commit(struct stb_corewrite *w, char *err, size_t errlen)
{
	int rc = tail_notes(w);
	if (rc) {
		stb_say(err, errlen, "out of memory");
		goto cleanup;
	}
	untangle(w);
	/* In their room at the front, else after the last segment. */
	uint64_t notes_at = w->nnotes_len <= w->notes_room ? NOTES_AT : w->off;
	rc = write_at(w->fd, notes_at, w->notes, w->nnotes_len);
	size_t phnum = w->nloads + 1;
	Elf64_Phdr *ph = malloc(phnum * sizeof(*ph));
	if (!rc && !ph)
		rc = -ENOMEM;
	if (!rc) {
		ph[0] = (Elf64_Phdr){.p_type = PT_NOTE, .p_offset = notes_at,
				     .p_filesz = w->nnotes_len, .p_align = 4};
		memcpy(ph + 1, w->loads, w->nloads * sizeof(*ph));
		rc = write_at(w->fd, w->phdrs_at, ph, phnum * sizeof(*ph));
	}
	free(ph);
	Elf64_Ehdr eh = {.e_type = ET_CORE, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
			 .e_phoff = w->phdrs_at, .e_ehsize = sizeof(Elf64_Ehdr),
			 .e_phentsize = sizeof(Elf64_Phdr)};
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
	Elf64_Shdr sh = {0};
	if (phnum >= PN_XNUM) {
		/* More than 65534: the count goes into section header 0. */
		eh.e_phnum = PN_XNUM;
		eh.e_shoff = sizeof(eh);
		eh.e_shentsize = sizeof(sh);
		eh.e_shnum = 1;
		sh.sh_info = (uint32_t)phnum;
	} else {
		eh.e_phnum = (uint16_t)phnum;
	}
	if (!rc)
		rc = write_at(w->fd, sizeof(eh), &sh, sizeof(sh));
	if (!rc)
		rc = write_at(w->fd, 0, &eh, sizeof(eh));
	if (!rc && fsync(w->fd) != 0)
		rc = -errno;
	if (rc) {
		stb_say(err, errlen, "cannot write %s: %s", w->path, strerror(-rc));
		goto cleanup;
	}
	rc = publish(w, err, errlen);
cleanup:
	stb_corewrite_abort(w); /* frees; the file is named when rc == 0 */
	return rc;
}

void stb_corewrite_abort(struct stb_corewrite *w)
{
	if (!w)
		return;
	if (w->tmp)
		unlink(w->tmp);
	if (w->fd >= 0)
		close(w->fd);
	free(w->tmp);
	free(w->path);
	free(w->dir);
	free(w->loads);
	free(w->notes);
	free(w->tids);
	free(w->listed);
	free(w->files);
	free(w->names);
	free(w);
}
