/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ELF core file reader of corefile.h: the ELF header and program headers
 * checked against the file's size, the PT_LOAD segments sorted for lookups,
 * the notes parsed with every length checked before use. Memory reads are
 * preads of the segments' dumped bytes.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corefile.h"
#include "hashset.h"
#include "table/driver.h" /* enum stb_cut */
#include "util.h"

#define PRSTATUS_PID 32u
#define PRSTATUS_CURSIG 12u
#define PRSTATUS_REGS 112u
#define PRSTATUS_MIN (PRSTATUS_REGS + 27u * 8u) /* pr_reg: struct user_regs_struct */
#define PRPSINFO_PID 24u
#define PRPSINFO_FNAME 40u
#define PRPSINFO_MIN (PRPSINFO_FNAME + 16u)
#define NOTE_FILE 0x46494c45u    /* NT_FILE */
#define NOTE_SIGINFO 0x53494749u /* NT_SIGINFO */
/* siginfo_t on x86_64: si_signo, si_errno, si_code, then the union at 16
 * (_sigfault: si_addr; _kill: si_pid, si_uid). */
#define SIGINFO_CODE 8u
#define SIGINFO_UNION 16u
#define SIGINFO_MIN (SIGINFO_UNION + 8u)

/* Exactly len bytes at off: 0, -EIO (short: the file ends), -errno. */
static int read_at(int fd, uint64_t off, void *dst, size_t len)
{
	uint8_t *d = dst;
	while (len) {
		if (off > (uint64_t)INT64_MAX)
			return -EIO;
		ssize_t n = pread(fd, d, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		d += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static const char *machine_name(unsigned m)
{
	switch (m) {
	case EM_386: return "i386";
	case EM_ARM: return "32-bit ARM";
	case EM_AARCH64: return "aarch64";
	case EM_PPC64: return "ppc64";
	case EM_S390: return "s390";
	case EM_RISCV: return "riscv";
	case EM_MIPS: return "mips";
	default: return "another architecture";
	}
}

static int seg_cmp(const void *a, const void *b)
{
	const struct stb_corefile_seg *x = a, *y = b;
	return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

static int file_cmp(const void *a, const void *b)
{
	const struct stb_corefile_map *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* ---- notes ---- */

/* x86_64 errno values of a system call that blocks (the kernel's -ENOSYS
 * until it returns) or that the dump interrupted (-EINTR, -ERESTARTSYS,
 * -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK). */
static bool call_pending(uint64_t rax)
{
	int64_t v = (int64_t)rax;
	return v == -ENOSYS || v == -EINTR || (v <= -512 && v >= -516 && v != -515);
}

/* Calls numbered at most this (x86_64 has about 460). */
#define SYSCALL_NR_MAX 1024u
/* x86_64 clone(2) and clone3(2): a new thread's first registers are the
 * caller's, with orig_rax the call and rax 0 (corefile.h: starting). */
#define SYSCALL_NR_CLONE 56u
#define SYSCALL_NR_CLONE3 435u

static void note_prstatus(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	if (len < PRSTATUS_MIN) {
		c->bad_notes++;
		return;
	}
	if (c->nthreads >= STB_COREFILE_MAX_THREADS)
		return;
	uint32_t tid = get32(d + PRSTATUS_PID);
	if (tid == 0)
		return;
	/* A thread given twice keeps its first note (threads_index). */
	if (stb_grow(&c->threads, &c->capthreads, c->nthreads + 1, sizeof(*c->threads)) != 0)
		return;
	const uint8_t *r = d + PRSTATUS_REGS;
	struct stb_corefile_thread *t = &c->threads[c->nthreads++];
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->has_regs = true;
	uint16_t sig;
	memcpy(&sig, d + PRSTATUS_CURSIG, sizeof(sig));
	t->signo = sig;
	/* struct user_regs_struct: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx
	 * rdx rsi rdi orig_rax rip cs eflags rsp ss ... */
	t->regs.r15 = get64(r + 0 * 8);
	t->regs.r14 = get64(r + 1 * 8);
	t->regs.r13 = get64(r + 2 * 8);
	t->regs.r12 = get64(r + 3 * 8);
	t->regs.bp = get64(r + 4 * 8);
	t->regs.bx = get64(r + 5 * 8);
	t->regs.ip = get64(r + 16 * 8);
	t->regs.sp = get64(r + 19 * 8);
	uint64_t orig_rax = get64(r + 15 * 8), rax = get64(r + 10 * 8);
	if (orig_rax < SYSCALL_NR_MAX && call_pending(rax)) {
		t->in_syscall = true;
		t->syscall_nr = (uint32_t)orig_rax;
		t->syscall_arg0 = get64(r + 14 * 8);
	}
	/* Every entry into the kernel sets orig_rax (a call's number, -1 for
	 * an interrupt or a fault), and the parent of a clone gets the child's
	 * tid: clone with rax 0 is only a child that has not returned to user
	 * space yet. */
	t->starting = rax == 0 && (orig_rax == SYSCALL_NR_CLONE || orig_rax == SYSCALL_NR_CLONE3);
}

/* A saved core's list of threads (corefile.h): kept until the notes are
 * read, then merged into the threads (threads_index). */
static void note_threads(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	const size_t one = sizeof(struct stb_corefile_note_thread);
	if (len % one) {
		c->bad_notes++;
		return;
	}
	for (uint64_t at = 0; at < len && c->nlisted < STB_COREFILE_MAX_THREADS; at += one) {
		if (stb_grow(&c->listed, &c->caplisted, c->nlisted + 1, one) != 0)
			return;
		memcpy(&c->listed[c->nlisted++], d + at, one);
	}
}

struct tid_at {
	uint32_t tid, at; /* a thread's tid, its index in note order */
};

static int tid_at_cmp(const void *a, const void *b)
{
	const struct tid_at *x = a, *y = b;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int listed_cmp(const void *a, const void *b)
{
	const struct stb_corefile_note_thread *x = a, *y = b;
	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

/* c->by_tid for c->threads: their indices by tid, then in note order.
 * 0 or -ENOMEM. */
static int sort_threads(struct stb_corefile *c)
{
	size_t n = c->nthreads ? c->nthreads : 1;
	struct tid_at *v = malloc(n * sizeof(*v));
	free(c->by_tid);
	c->by_tid = malloc(n * sizeof(*c->by_tid));
	if (!v || !c->by_tid) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->nthreads; i++)
		v[i] = (struct tid_at){c->threads[i].tid, (uint32_t)i};
	qsort(v, c->nthreads, sizeof(*v), tid_at_cmp);
	for (size_t i = 0; i < c->nthreads; i++)
		c->by_tid[i] = v[i].at;
	free(v);
	return 0;
}

/* After the notes: one entry per thread (its first NT_PRSTATUS, in note
 * order), the saved core's list merged in -- names and how stacks were read
 * for threads with registers, entries without for the others -- and the
 * index by tid. 0 or -ENOMEM. */
static int threads_index(struct stb_corefile *c)
{
	int rc = sort_threads(c);
	if (rc)
		return rc;
	/* Duplicates after the first of a tid are dropped, the order kept. */
	bool *dup = calloc(c->nthreads ? c->nthreads : 1, sizeof(*dup));
	if (!dup)
		return -ENOMEM;
	for (size_t i = 1; i < c->nthreads; i++)
		dup[c->by_tid[i]] = c->threads[c->by_tid[i]].tid == c->threads[c->by_tid[i - 1]].tid;
	size_t k = 0;
	for (size_t i = 0; i < c->nthreads; i++)
		if (!dup[i])
			c->threads[k++] = c->threads[i];
	free(dup);
	c->nthreads = k;
	rc = sort_threads(c);
	if (rc || !c->nlisted)
		return rc;
	qsort(c->listed, c->nlisted, sizeof(*c->listed), listed_cmp);
	size_t with_regs = c->nthreads;
	for (size_t i = 0; i < c->nlisted; i++) {
		const struct stb_corefile_note_thread *l = &c->listed[i];
		if (l->tid == 0 || (i && l->tid == c->listed[i - 1].tid))
			continue;
		/* The threads with registers, by tid (the index covers them). */
		size_t lo = 0, hi = with_regs;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (c->threads[c->by_tid[mid]].tid < l->tid)
				lo = mid + 1;
			else
				hi = mid;
		}
		struct stb_corefile_thread *t = NULL;
		if (lo < with_regs && c->threads[c->by_tid[lo]].tid == l->tid) {
			t = &c->threads[c->by_tid[lo]];
		} else if (c->nthreads < STB_COREFILE_MAX_THREADS &&
			   stb_grow(&c->threads, &c->capthreads, c->nthreads + 1,
				    sizeof(*c->threads)) == 0) {
			t = &c->threads[c->nthreads++];
			memset(t, 0, sizeof(*t));
			t->tid = l->tid;
		}
		if (!t)
			continue;
		memcpy(t->name, l->name, sizeof(t->name) - 1);
		t->name[sizeof(t->name) - 1] = '\0';
		t->flags = l->flags & STB_COREFILE_THREAD_SP_ONLY;
		t->cut = l->cut < STB_CUT_NKINDS ? l->cut : STB_CUT_COPY;
	}
	return sort_threads(c);
}

static void note_prpsinfo(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	if (len < PRPSINFO_MIN) {
		c->bad_notes++;
		return;
	}
	c->pid = get32(d + PRPSINFO_PID);
	memcpy(c->comm, d + PRPSINFO_FNAME, 16);
	c->comm[16] = '\0';
}

static void note_auxv(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	for (uint64_t i = 0; i + 16 <= len; i += 16) {
		uint64_t type = get64(d + i), val = get64(d + i + 8);
		if (type == AT_NULL)
			break;
		if (type == AT_ENTRY)
			c->at_entry = val;
		else if (type == AT_PHDR)
			c->at_phdr = val;
		else if (type == AT_SYSINFO_EHDR)
			c->at_vdso = val;
	}
}

static bool fault_signal(int signo)
{
	return signo == SIGSEGV || signo == SIGBUS || signo == SIGILL || signo == SIGFPE ||
	       signo == SIGTRAP;
}

/* NT_SIGINFO: the first one (the kernel writes one; gdb one per thread, the
 * signalled thread's first). */
static void note_siginfo(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	if (c->has_siginfo)
		return;
	if (len < SIGINFO_MIN) {
		c->bad_notes++;
		return;
	}
	int signo = (int)get32(d), code = (int)get32(d + SIGINFO_CODE);
	if (signo <= 0 || signo >= 65) {
		c->bad_notes++;
		return;
	}
	c->has_siginfo = true;
	if (!c->signo)
		c->signo = signo;
	c->sig_code = code;
	if (fault_signal(signo) && code > 0) {
		c->sig_has_addr = true;
		c->sig_addr = get64(d + SIGINFO_UNION);
	} else if (code <= 0) {
		c->sig_has_sender = true;
		c->sig_pid = get32(d + SIGINFO_UNION);
		c->sig_uid = get32(d + SIGINFO_UNION + 4);
	}
}

/* NT_FILE: count, page size, count * (start, end, page offset), then count
 * NUL-terminated paths. */
static int note_file(struct stb_corefile *c, const uint8_t *d, uint64_t len)
{
	if (c->files || len < 16) {
		c->bad_notes += c->files ? 0 : 1;
		return 0;
	}
	uint64_t count = get64(d), page = get64(d + 8);
	if (page == 0 || (page & (page - 1)) || (len - 16) / 24 < count) {
		c->bad_notes++;
		return 0;
	}
	if (count > STB_COREFILE_MAX_FILES) {
		count = STB_COREFILE_MAX_FILES;
		c->files_cut = true;
	}
	const uint8_t *names = d + 16 + count * 24;
	uint64_t left = len - 16 - count * 24;
	c->file_names = malloc(left + 1);
	c->files = calloc(count ? count : 1, sizeof(*c->files));
	if (!c->file_names || !c->files)
		return -ENOMEM;
	memcpy(c->file_names, names, left);
	c->file_names[left] = '\0';
	char *p = c->file_names, *end = c->file_names + left;
	for (uint64_t i = 0; i < count; i++) {
		if (p >= end) {
			c->files_cut = true; /* fewer names than entries */
			break;
		}
		size_t n = strnlen(p, (size_t)(end - p));
		char *path = p;
		p += n + 1;
		const uint8_t *e = d + 16 + i * 24;
		uint64_t start = get64(e), stop = get64(e + 8), pgoff = get64(e + 16), off;
		if (stop <= start || __builtin_mul_overflow(pgoff, page, &off) || n == 0 ||
		    n >= STB_COREFILE_MAX_PATH)
			continue;
		struct stb_corefile_map *f = &c->files[c->nfiles++];
		f->start = start;
		f->end = stop;
		f->off = off;
		static const char del[] = " (deleted)";
		if (n > sizeof(del) - 1 && strcmp(path + n - (sizeof(del) - 1), del) == 0) {
			path[n - (sizeof(del) - 1)] = '\0';
			f->deleted = true;
		}
		f->path = path;
	}
	qsort(c->files, c->nfiles, sizeof(*c->files), file_cmp);
	return 0;
}

/* Parses the notes in buf[len]. 0 or -ENOMEM. */
static int parse_notes(struct stb_corefile *c, const uint8_t *buf, uint64_t len)
{
	uint64_t p = 0;
	while (len - p >= 12) {
		uint32_t namesz = get32(buf + p), descsz = get32(buf + p + 4);
		uint32_t type = get32(buf + p + 8);
		uint64_t name_pad = ((uint64_t)namesz + 3) & ~3ull;
		uint64_t desc_pad = ((uint64_t)descsz + 3) & ~3ull;
		p += 12;
		if (name_pad > len - p || desc_pad > len - p - name_pad) {
			c->bad_notes++;
			return 0; /* the rest is unreadable */
		}
		const char *name = (const char *)buf + p;
		const uint8_t *desc = buf + p + name_pad;
		p += name_pad + desc_pad;
		bool core = namesz == 5 && memcmp(name, "CORE", 5) == 0;
		if (namesz == sizeof(STB_COREFILE_NOTE_OWNER) &&
		    memcmp(name, STB_COREFILE_NOTE_OWNER, namesz) == 0 &&
		    type == STB_COREFILE_NT_THREADS)
			note_threads(c, desc, descsz);
		if (!core)
			continue;
		switch (type) {
		case NT_PRSTATUS:
			note_prstatus(c, desc, descsz);
			break;
		case NT_PRPSINFO:
			note_prpsinfo(c, desc, descsz);
			break;
		case NT_AUXV:
			note_auxv(c, desc, descsz);
			break;
		case NOTE_FILE:
			if (note_file(c, desc, descsz) < 0)
				return -ENOMEM;
			break;
		case NOTE_SIGINFO:
			note_siginfo(c, desc, descsz);
			break;
		default:
			break;
		}
	}
	return 0;
}

/* ---- header and segments ---- */

/* The ELF header: 0, or -errno with err set. */
static int check_ehdr(int fd, uint64_t size, const char *name, Elf64_Ehdr *eh, uint64_t *phnum,
		      char *err, size_t errlen)
{
	uint8_t ident[EI_NIDENT] = {0};
	if (size < 4 || read_at(fd, 0, ident, size < EI_NIDENT ? (size_t)size : EI_NIDENT) != 0 ||
	    memcmp(ident, ELFMAG, SELFMAG) != 0) {
		stb_say(err, errlen, "%s is not a core file: it is not an ELF file", name);
		return -ENOEXEC;
	}
	if (size < sizeof(*eh)) {
		stb_say(err, errlen,
			"%s is truncated: %" PRIu64 " bytes, shorter than an ELF header", name,
			size);
		return -EPROTO;
	}
	if (ident[EI_CLASS] != ELFCLASS64 || ident[EI_DATA] != ELFDATA2LSB) {
		stb_say(err, errlen,
			"%s is a %s ELF file; this reader understands x86_64 core files only", name,
			ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "big-endian or unknown-class");
		return -EPROTO;
	}
	int rc = read_at(fd, 0, eh, sizeof(*eh));
	if (rc)
		return rc;
	if (eh->e_type != ET_CORE) {
		const char *what = eh->e_type == ET_EXEC	  ? "an executable"
				   : eh->e_type == ET_DYN ? "a shared object or PIE executable"
				   : eh->e_type == ET_REL ? "an object file"
							  : "an ELF file of unknown type";
		stb_say(err, errlen,
			"%s is %s, not a core dump (--core takes the core file; give the program "
			"with --exe)",
			name, what);
		return -ENOEXEC;
	}
	if (eh->e_machine != EM_X86_64) {
		stb_say(err, errlen,
			"%s is a core dump of %s (ELF machine %u); this reader understands x86_64 "
			"cores only",
			name, machine_name(eh->e_machine), eh->e_machine);
		return -EPROTO;
	}
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0) {
		stb_say(err, errlen, "%s is malformed: program header size %u, count %u", name,
			eh->e_phentsize, eh->e_phnum);
		return -EPROTO;
	}
	*phnum = eh->e_phnum;
	if (eh->e_phnum == PN_XNUM) {
		/* More than 65534 segments: the count is in section header 0. */
		Elf64_Shdr sh;
		if (eh->e_shoff == 0 || eh->e_shoff > size || size - eh->e_shoff < sizeof(sh) ||
		    read_at(fd, eh->e_shoff, &sh, sizeof(sh)) != 0) {
			stb_say(err, errlen,
				"%s is truncated or malformed: its segment count is in a section "
				"header that is not in the file",
				name);
			return -EPROTO;
		}
		*phnum = sh.sh_info;
	}
	uint64_t bytes;
	if (*phnum > STB_COREFILE_MAX_SEGMENTS + 64u ||
	    __builtin_mul_overflow(*phnum, (uint64_t)sizeof(Elf64_Phdr), &bytes) ||
	    eh->e_phoff > size || size - eh->e_phoff < bytes) {
		stb_say(err, errlen,
			"%s is truncated or malformed: its %" PRIu64
			" program headers at offset %" PRIu64 " do not fit in its %" PRIu64
			" bytes",
			name, *phnum, (uint64_t)eh->e_phoff, size);
		return -EPROTO;
	}
	return 0;
}

struct stb_corefile *stb_corefile_open_fd(int fd, const char *name, char *err, size_t errlen)
{
	struct stb_corefile *c = calloc(1, sizeof(*c));
	Elf64_Phdr *ph = NULL;
	uint8_t *notes = NULL;
	int rc = 0;
	if (!c) {
		stb_say(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = -errno;
		stb_say(err, errlen, "cannot read %s: %s", name, strerror(-rc));
		goto cleanup;
	}
	struct stat st;
	if (fstat(c->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		stb_say(err, errlen, "%s is not a regular file", name);
		goto cleanup;
	}
	c->size = (uint64_t)st.st_size;
	Elf64_Ehdr eh;
	uint64_t phnum;
	rc = check_ehdr(c->fd, c->size, name, &eh, &phnum, err, errlen);
	if (rc)
		goto cleanup;
	ph = malloc((size_t)phnum * sizeof(*ph));
	if (!ph) {
		rc = -ENOMEM;
		goto cleanup;
	}
	rc = read_at(c->fd, eh.e_phoff, ph, (size_t)phnum * sizeof(*ph));
	if (rc) {
		stb_say(err, errlen, "cannot read the program headers of %s: %s", name,
			strerror(-rc));
		goto cleanup;
	}
	size_t nloads = 0;
	uint64_t note_bytes = 0;
	for (uint64_t i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_LOAD)
			nloads++;
		else if (ph[i].p_type == PT_NOTE && note_bytes < STB_COREFILE_MAX_NOTES_BYTES)
			note_bytes += ph[i].p_filesz < STB_COREFILE_MAX_NOTES_BYTES ? ph[i].p_filesz
										: STB_COREFILE_MAX_NOTES_BYTES;
	}
	if (nloads > STB_COREFILE_MAX_SEGMENTS)
		nloads = STB_COREFILE_MAX_SEGMENTS;
	c->segs = calloc(nloads ? nloads : 1, sizeof(*c->segs));
	if (!c->segs) {
		rc = -ENOMEM;
		goto cleanup;
	}
	uint64_t notes_left = STB_COREFILE_MAX_NOTES_BYTES;
	for (uint64_t i = 0; i < phnum; i++) {
		const Elf64_Phdr *p = &ph[i];
		uint64_t end;
		if (p->p_type == PT_NOTE) {
			uint64_t n = p->p_filesz;
			if (n && p->p_offset >= c->size)
				c->truncated = true; /* the notes are past its end */
			if (p->p_offset >= c->size || n == 0 || notes_left == 0)
				continue;
			if (n > c->size - p->p_offset) {
				n = c->size - p->p_offset; /* cut: parse what is there */
				c->truncated = true;
			}
			if (n > notes_left)
				n = notes_left;
			notes_left -= n;
			notes = malloc((size_t)n);
			if (!notes) {
				rc = -ENOMEM;
				goto cleanup;
			}
			if (read_at(c->fd, p->p_offset, notes, (size_t)n) == 0 &&
			    parse_notes(c, notes, n) < 0) {
				rc = -ENOMEM;
				goto cleanup;
			}
			free(notes);
			notes = NULL;
			continue;
		}
		if (p->p_type != PT_LOAD || p->p_memsz == 0 || c->nsegs >= nloads ||
		    __builtin_add_overflow(p->p_vaddr, p->p_memsz, &end))
			continue;
		struct stb_corefile_seg *s = &c->segs[c->nsegs++];
		s->vaddr = p->p_vaddr;
		s->memsz = p->p_memsz;
		s->off = p->p_offset;
		s->flags = p->p_flags;
		s->filesz = p->p_filesz < p->p_memsz ? p->p_filesz : p->p_memsz;
		if (s->filesz && (s->off >= c->size || c->size - s->off < s->filesz)) {
			s->filesz = s->off >= c->size ? 0 : c->size - s->off;
			s->cut = true;
			c->truncated = true;
		}
	}
	qsort(c->segs, c->nsegs, sizeof(*c->segs), seg_cmp);
	size_t w = 0;
	for (size_t i = 0; i < c->nsegs; i++)
		if (w == 0 || c->segs[i].vaddr >= c->segs[w - 1].vaddr + c->segs[w - 1].memsz)
			c->segs[w++] = c->segs[i];
	c->nsegs = w;
	rc = threads_index(c);
	free(c->listed);
	c->listed = NULL;
	c->nlisted = 0;
	if (rc)
		goto cleanup;
	if (!c->pid && c->nthreads)
		c->pid = c->threads[0].tid;
	if (!c->signo && c->nthreads && c->threads[0].has_regs)
		c->signo = c->threads[0].signo;
	if (c->nthreads && c->threads[0].has_regs)
		c->sig_tid = c->threads[0].tid;
cleanup:
	free(ph);
	free(notes);
	if (rc) {
		if (rc == -ENOMEM)
			stb_say(err, errlen, "out of memory reading %s", name);
		stb_corefile_close(c);
		errno = -rc;
		return NULL;
	}
	return c;
}

struct stb_corefile *stb_corefile_open(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		stb_say(err, errlen, "cannot open the core file %s: %s", path, strerror(e));
		errno = e;
		return NULL;
	}
	struct stb_corefile *c = stb_corefile_open_fd(fd, path, err, errlen);
	int e = errno;
	close(fd);
	errno = e;
	return c;
}

void stb_corefile_close(struct stb_corefile *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->segs);
	free(c->threads);
	free(c->by_tid);
	free(c->listed);
	free(c->files);
	free(c->file_names);
	free(c);
}

const struct stb_corefile_seg *stb_corefile_seg_at(const struct stb_corefile *c, uint64_t addr)
{
	size_t lo = 0, hi = c->nsegs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->segs[mid].vaddr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct stb_corefile_seg *s = &c->segs[lo - 1];
	return addr - s->vaddr < s->memsz ? s : NULL;
}

bool stb_corefile_fatal(const struct stb_corefile *c)
{
	if (!c->sig_tid)
		return false;
	switch (c->signo) {
	case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGABRT: case SIGTRAP:
	case SIGSYS: case SIGQUIT: case SIGXCPU: case SIGXFSZ:
		return true;
	default:
		return false;
	}
}

const struct stb_corefile_map *stb_corefile_map_at(const struct stb_corefile *c, uint64_t addr)
{
	size_t lo = 0, hi = c->nfiles;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->files[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct stb_corefile_map *f = &c->files[lo - 1];
	return addr < f->end ? f : NULL;
}

const struct stb_corefile_thread *stb_corefile_thread_any(const struct stb_corefile *c,
							  uint32_t tid)
{
	size_t lo = 0, hi = c->by_tid ? c->nthreads : 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t t = c->threads[c->by_tid[mid]].tid;
		if (t == tid)
			return &c->threads[c->by_tid[mid]];
		if (t < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct stb_corefile_thread *stb_corefile_thread_of(const struct stb_corefile *c, uint32_t tid)
{
	const struct stb_corefile_thread *t = stb_corefile_thread_any(c, tid);
	return t && t->has_regs ? t : NULL;
}

int stb_corefile_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	const struct stb_corefile *c = ctx;
	uint8_t *d = dst;
	while (len) {
		const struct stb_corefile_seg *s = stb_corefile_seg_at(c, addr);
		if (!s || addr - s->vaddr >= s->filesz)
			return -EFAULT; /* not mapped, or not dumped */
		uint64_t avail = s->filesz - (addr - s->vaddr);
		size_t n = avail < len ? (size_t)avail : len;
		int rc = read_at(c->fd, s->off + (addr - s->vaddr), d, n);
		if (rc)
			return rc;
		d += n;
		addr += n;
		len -= n;
	}
	return 0;
}
