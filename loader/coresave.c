/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --save (coresave.h): one pass of the collector over the
 * live target, as a snapshot takes it, whose traces are kept -- each stack
 * copy as it was validated (a deep running stack with the part read past
 * the BPF copy), each running task's registers, every thread of the
 * process with its registers, stack, name and how it was read -- together
 * with the owner words the pass read, then the table (header, workers, the
 * entries in use) set to what the traces saw, the modules' first pages and
 * the file mappings, written as an ELF core (corefile_write.h) that
 * postmortem.c reads like a kernel's. Nothing the target wrote is trusted:
 * sizes are bounded, every loop has a budget, the run a deadline.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/collect.h"
#include "corefile.h" /* the "STB" note's flags */
#include "corefile_write.h"
#include "coresave.h"
#include "hashset.h"
#include "record_unwind.h"
#include "running.h"
#include "target.h"
#include "unwind/unwind.h"
#include "util.h"

/* A stack copied per task at most: the snapshot's (and the core reader's). */
#define COPY_MAX (256u << 10)
/* Owner words and the like read by the pass: kept up to this many reads of
 * at most READ_MAX bytes each. */
#define READS_MAX 65536u
#define READ_MAX 64u
#define READ_SEGS_MAX 4096u /* the runs of them (segments) */
/* A module's first bytes kept (ELF header, program headers, notes). */
#define MODULE_HEAD_MAX (64u << 10)
/* The vDSO kept whole, up to this. */
#define VDSO_MAX (64u << 10)
/* /proc/PID/maps: lines read at most (a million stacks with mprotect guards
 * are two million mappings). */
#define MAPS_LINES_MAX (4u << 20)
#define PAGE 4096u

/* One trace kept: what the table entry must say for its stack to be read;
 * for a running task or a thread, what its thread's notes say. */
struct kept {
	uint64_t id; /* a task's, or STB_ABI_OWNER_TID(tid) of a thread */
	struct stb_regs regs;
	uint32_t tid;
	unsigned state, seq;
	uint32_t order; /* of the traces */
	bool running;   /* a running task */
	bool thread;    /* a thread that is no task */
	bool in_syscall;
	uint32_t syscall_nr;
	uint64_t syscall_arg0;
	unsigned flags; /* STB_COREFILE_THREAD_* */
	unsigned cut;   /* enum stb_cut */
};

struct piece {
	uint64_t addr;
	uint32_t len;
	uint8_t bytes[READ_MAX];
};

struct range {
	uint64_t start, end;
};

struct save {
	const struct stb_loader_opts *o;
	struct stb_target *tg;
	struct stb_unw_proc *unw;
	struct stb_running run;
	struct stb_mem mem, owners;
	struct stb_capture_ops ops;      /* the live backend (running.h) */
	struct stb_capture_ops save_ops; /* it, keeping each thread's capture */
	struct stb_collector *coll;
	struct stb_corewrite *w;
	uint8_t *buf;
	struct kept *kept;
	size_t nkept, capkept;
	struct piece *reads;
	size_t nreads, capreads;
	struct range *named; /* the named mappings (files, memfds, [vdso]), by address */
	size_t nnamed;
	uint64_t stacks, stack_bytes, left_out, reads_left_out, moved, gone;
	uint64_t deep_left_out; /* deep stacks kept only as far as the BPF copy */
	int werr; /* writing failed: the file is lost */
};

/* ---- what the pass reads ---- */

/* The owner words, queues and the like the pass reads (collect.h, owners):
 * read from the target and kept for the core. */
static int owners_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct save *S = ctx;
	int rc = stb_target_read(S->tg, addr, dst, len);
	if (rc != 0 || len == 0)
		return rc;
	if (len > READ_MAX || S->nreads >= READS_MAX ||
	    stb_grow(&S->reads, &S->capreads, S->nreads + 1, sizeof(*S->reads)) != 0) {
		S->reads_left_out++;
		return rc;
	}
	struct piece *p = &S->reads[S->nreads++];
	p->addr = addr;
	p->len = (uint32_t)len;
	memcpy(p->bytes, dst, len);
	return rc;
}

/* The registers and stack copy a capture's walk reads: a BPF record's own
 * (running.c leaves unwind_ctx the record unless it read the stack past the
 * record's copy), else capt's. 0 or -ENODATA. */
static int capture_copy(const struct stb_capture *capt, struct stb_regs *regs,
			struct stb_stack_copy *c)
{
	if (capt->mode == STB_TRACE_BPF && capt->unwind_ctx)
		return stb_record_copy(capt->unwind_ctx, sizeof(struct stb_record), regs, c);
	*regs = capt->regs;
	*c = capt->copy;
	return c->bytes && c->len ? 0 : -ENODATA;
}

/* A thread's stack copy [addr, addr + len) read up from sp as far as the
 * target could be read (its top is not known): it ends before the first
 * named mapping above sp (a memfd such as the task table, a module), whose
 * bytes it would otherwise stand for in the file. The new length. */
static size_t clip_thread(const struct save *S, uint64_t sp, uint64_t addr, size_t len)
{
	size_t lo = 0, hi = S->nnamed;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (S->named[mid].start <= sp)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < S->nnamed && S->named[lo].start > addr && S->named[lo].start - addr < len)
		return (size_t)(S->named[lo].start - addr);
	return len;
}

/* Capture capt of task id (thread: of thread capt->tid, which is no task)
 * kept: its stack into the file at once, its context for the table and the
 * notes. A deep running stack that does not fit the size budget is kept as
 * far as the BPF record's copy, cut there. */
static void keep(struct save *S, uint64_t id, const struct stb_capture *capt, bool thread)
{
	struct stb_stack_copy c;
	struct stb_regs regs;
	bool running = !thread && capt->state == STB_TASK_RUNNING;
	unsigned cut = capt->cut < STB_CUT_NKINDS ? capt->cut : STB_CUT_COPY;
	if (S->werr || capture_copy(capt, &regs, &c) != 0 || ((running || thread) && !capt->tid))
		return;
	if (thread)
		c.len = clip_thread(S, regs.sp, c.addr, c.len);
	if (stb_grow(&S->kept, &S->capkept, S->nkept + 1, sizeof(*S->kept)) != 0) {
		S->werr = -ENOMEM;
		return;
	}
	int wr = stb_corewrite_load(S->w, c.addr, c.len, c.bytes, c.len, PF_R | PF_W);
	/* Read past the record's copy (running.c): the record is still the
	 * last capture's, with the same registers. */
	struct stb_stack_copy rc_copy;
	struct stb_regs rc_regs;
	if ((wr == -EFBIG || wr == -E2BIG) && capt->mode == STB_TRACE_BPF && !capt->unwind_ctx &&
	    stb_record_copy(S->run.rec, sizeof(struct stb_record), &rc_regs, &rc_copy) == 0 &&
	    rc_regs.sp == regs.sp && rc_regs.ip == regs.ip && rc_copy.len < c.len) {
		wr = stb_corewrite_load(S->w, rc_copy.addr, rc_copy.len, rc_copy.bytes, rc_copy.len,
					PF_R | PF_W);
		if (wr == 0) {
			c = rc_copy;
			cut = STB_CUT_COPY;
			S->deep_left_out++;
		}
	}
	if (wr == -EFBIG || wr == -E2BIG || wr == -EINVAL) {
		S->left_out++;
		return;
	}
	if (wr) {
		S->werr = wr;
		return;
	}
	S->stacks++;
	S->stack_bytes += c.len;
	S->kept[S->nkept++] = (struct kept){
	    .id = id, .regs = regs, .tid = capt->tid, .state = capt->state, .seq = capt->seq,
	    .order = (uint32_t)S->nkept, .running = running, .thread = thread,
	    .in_syscall = capt->in_syscall, .syscall_nr = capt->syscall_nr,
	    .syscall_arg0 = capt->syscall_arg0,
	    /* Read from /proc: its frame pointer is not known. */
	    .flags = capt->mode == STB_TRACE_SYSCALL ? STB_COREFILE_THREAD_SP_ONLY : 0,
	    .cut = cut};
}

/* Each trace as it is made (collect.h, traced). */
static void traced(void *arg, uint64_t id, int rc, const struct stb_capture *capt)
{
	if (rc == 0 && capt->mode != STB_TRACE_NO_STACK)
		keep(arg, id, capt, false);
}

/* The capture backend of the pass: the live one (running.h), each thread
 * that is no task kept as it is captured. */
static int save_capture(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
			const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
			struct stb_capture *capt, char *err, size_t errlen)
{
	struct save *S = ctx;
	return S->ops.capture(S->ops.ctx, p, id, w1, at, deadline, buf, cap, capt, err, errlen);
}

static int save_capture_thread(void *ctx, uint32_t tid, uint64_t deadline, void *buf, size_t cap,
			       struct stb_capture *capt, char *err, size_t errlen)
{
	struct save *S = ctx;
	int rc = S->ops.capture_thread(S->ops.ctx, tid, deadline, buf, cap, capt, err, errlen);
	if (rc == 0 && capt->tid == tid)
		keep(S, STB_ABI_OWNER_TID(tid), capt, true);
	return rc;
}

/* ---- modules and mappings ---- */

struct mapping {
	uint64_t start, end, off;
	char perms[5];
	char *path;
};

static void maps_free(struct mapping *m, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(m[i].path);
	free(m);
}

/* The target's named mappings (files, [vdso]) from /proc/PID/maps. 0 or
 * -errno (err set). */
static int read_maps(struct save *S, struct mapping **out, size_t *nout, char *err, size_t errlen)
{
	char path[64], *line = NULL;
	size_t linecap = 0, n = 0, cap = 0, lines = 0;
	struct mapping *m = NULL;
	int rc = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)S->o->pid);
	FILE *f = fopen(path, "re");
	if (!f) {
		rc = errno == ENOENT ? -ESRCH : -errno;
		stb_say(err, errlen, "cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	uint64_t deadline = stb_loader_deadline(S->o);
	while (getline(&line, &linecap, f) > 0) {
		if (++lines > MAPS_LINES_MAX || ((lines & 1023) == 0 && stb_now_ns() >= deadline)) {
			rc = -ETIMEDOUT;
			stb_say(err, errlen, "process %d has too many mappings to save in time",
				(int)S->o->pid);
			goto cleanup;
		}
		unsigned long long start, end, off;
		char perms[5];
		int at = 0;
		if (sscanf(line, "%llx-%llx %4s %llx %*s %*s %n", &start, &end, perms, &off, &at) < 4 ||
		    at <= 0 || end <= start)
			continue;
		char *p = line + at;
		p[strcspn(p, "\n")] = '\0';
		if (p[0] != '/' && strcmp(p, "[vdso]") != 0)
			continue;
		if (strlen(p) >= 4096 || stb_grow(&m, &cap, n + 1, sizeof(*m)) != 0) {
			if (strlen(p) >= 4096)
				continue;
			rc = -ENOMEM;
			stb_say(err, errlen, "out of memory");
			goto cleanup;
		}
		m[n] = (struct mapping){.start = start, .end = end, .off = off, .path = strdup(p)};
		memcpy(m[n].perms, perms, sizeof(perms));
		if (!m[n].path) {
			rc = -ENOMEM;
			stb_say(err, errlen, "out of memory");
			goto cleanup;
		}
		n++;
	}
cleanup:
	free(line);
	fclose(f);
	if (rc) {
		maps_free(m, n);
		return rc;
	}
	*out = m;
	*nout = n;
	return 0;
}

static unsigned pflags(const char *perms)
{
	return (perms[0] == 'r' ? PF_R : 0) | (perms[1] == 'w' ? PF_W : 0) |
	       (perms[2] == 'x' ? PF_X : 0);
}

/* How many bytes from a module's start hold its ELF header, program
 * headers and notes (what its build id is read from), within its mapping
 * and MODULE_HEAD_MAX; 0 when it is not an ELF file. */
static size_t module_head(struct save *S, const struct mapping *m)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[64];
	uint64_t room = m->end - m->start < MODULE_HEAD_MAX ? m->end - m->start : MODULE_HEAD_MAX;
	if (room < sizeof(eh) || stb_target_read(S->tg, m->start, &eh, sizeof(eh)) != 0 ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff >= room)
		return 0;
	unsigned n = eh.e_phnum < 64 ? eh.e_phnum : 64;
	uint64_t need = eh.e_phoff + (uint64_t)n * sizeof(Elf64_Phdr);
	if (need > room || stb_target_read(S->tg, m->start + eh.e_phoff, ph, n * sizeof(ph[0])) != 0)
		return (size_t)(room < PAGE ? room : PAGE);
	uint64_t first = UINT64_MAX;
	for (unsigned i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0 && first == UINT64_MAX)
			first = ph[i].p_vaddr & ~(uint64_t)(PAGE - 1);
	for (unsigned i = 0; i < n && first != UINT64_MAX; i++) {
		uint64_t end;
		if (ph[i].p_type != PT_NOTE || ph[i].p_vaddr < first ||
		    __builtin_add_overflow(ph[i].p_vaddr - first, ph[i].p_filesz, &end))
			continue;
		if (end <= room && end > need)
			need = end;
	}
	need = (need + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	return (size_t)(need < room ? need : room);
}

/* The mappings into the core: every file one in NT_FILE, the first bytes of
 * each module, the vDSO whole. 0 or -errno (err set). */
static int save_modules(struct save *S, const struct mapping *m, size_t n, char *err,
			size_t errlen)
{
	uint8_t *bytes = malloc(MODULE_HEAD_MAX > VDSO_MAX ? MODULE_HEAD_MAX : VDSO_MAX);
	int rc = 0;
	if (!bytes) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		size_t len = 0;
		if (m[i].path[0] == '/') {
			if (stb_corewrite_file(S->w, m[i].start, m[i].end, m[i].off, m[i].path) != 0)
				continue; /* an offset that is no page: not listed */
			if (m[i].off == 0 && m[i].perms[0] == 'r' && strncmp(m[i].path, "/memfd:", 7) != 0)
				len = module_head(S, &m[i]);
		} else if (m[i].end - m[i].start <= VDSO_MAX) {
			len = (size_t)(m[i].end - m[i].start); /* [vdso] */
		}
		if (!len || stb_target_read(S->tg, m[i].start, bytes, len) != 0)
			continue;
		rc = stb_corewrite_load(S->w, m[i].start, m[i].end - m[i].start, bytes, len,
					pflags(m[i].perms));
		if (rc == -EFBIG || rc == -E2BIG)
			stb_say(err, errlen,
				"the modules' first pages do not fit in the size budget (--save-max %u "
				"MiB)",
				S->o->save_max_mib);
		else if (rc)
			stb_say(err, errlen, "cannot write %s: %s", S->o->save, strerror(-rc));
	}
	free(bytes);
	return rc;
}

/* NT_AUXV: the main program's entry and the vDSO's address. */
static void save_auxv(struct save *S)
{
	char path[64];
	uint8_t auxv[4096];
	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)S->o->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, auxv, sizeof(auxv));
	close(fd);
	if (n >= 16)
		stb_corewrite_auxv(S->w, auxv, (size_t)n & ~(size_t)15);
}

/* ---- the table ---- */

static int kept_cmp(const void *a, const void *b)
{
	const struct kept *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* By id, then in the order traced. */
static int kept_order_cmp(const void *a, const void *b)
{
	const struct kept *x = a, *y = b;
	int c = kept_cmp(a, b);
	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static const struct kept *kept_of(const struct save *S, uint64_t id)
{
	struct kept key = {.id = id};
	return bsearch(&key, S->kept, S->nkept, sizeof(*S->kept), kept_cmp);
}

/* Entry e as its kept trace saw it: a task that ran on (or finished) after
 * its trace is set back to the context its stack was copied in. */
static void entry_as_traced(struct save *S, struct stb_abi_task *e)
{
	e->trace = 0; /* leases are the live table's */
	const struct kept *k = e->id ? kept_of(S, e->id) : NULL;
	if (!k || k->running)
		return;
	uint64_t word = (uint64_t)k->seq << 32 | k->state;
	if (e->word == word && e->sp == k->regs.sp && e->ip == k->regs.ip && e->bp == k->regs.bp)
		return;
	e->word = word;
	e->sp = k->regs.sp;
	e->ip = k->regs.ip;
	e->bp = k->regs.bp;
	S->moved++;
}

/* The workers as the traces saw them: a worker runs the task captured on
 * its thread; one that names a task traced off its CPU runs none. */
static void workers_as_traced(struct save *S, struct stb_abi_worker *wk, uint32_t n)
{
	for (uint32_t w = 0; w < n; w++) {
		uint64_t cur = STB_ABI_CURRENT_ID(wk[w].current);
		const struct kept *k = cur ? kept_of(S, cur) : NULL;
		if (k && !(k->running && k->tid == wk[w].tid)) {
			wk[w].current = 0;
			S->moved++;
		}
	}
	for (size_t i = 0; i < S->nkept; i++) {
		const struct kept *k = &S->kept[i];
		for (uint32_t w = 0; k->running && w < n; w++) {
			if (wk[w].tid != k->tid || wk[w].current == k->id)
				continue;
			wk[w].current = k->id;
			S->moved++;
		}
	}
}

/* The table: header and workers, then the entries [0, hwm) a window at a
 * time, as the traces saw them. 0 or -errno (err set). */
static int save_table(struct save *S, char *err, size_t errlen)
{
	const struct stb_tview_info *ti = &S->tg->info;
	uint32_t hwm = stb_tview_hwm(S->tg->hdr, ti, NULL);
	size_t head = (size_t)STB_ABI_TASK_OFFSET(0), chunk = 4096;
	uint8_t *b = malloc(head > chunk * sizeof(struct stb_abi_task) ? head
								      : chunk * sizeof(struct stb_abi_task));
	if (!b) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* One PT_LOAD of the whole table whose file bytes are those of the
	 * header, the workers and the entries [0, hwm), in that order. */
	memcpy(b, S->tg->hdr, head);
	struct stb_abi_header *h = (struct stb_abi_header *)b;
	h->slot_hwm = hwm;
	uint32_t nw = stb_tview_nworkers(h, NULL);
	workers_as_traced(S, (struct stb_abi_worker *)(b + STB_ABI_WORKER_OFFSET(0)), nw);
	int rc = stb_corewrite_load(S->w, ti->table_addr, ti->table_size, b, head,
				    PF_R | PF_W | STB_COREWRITE_MUST);
	for (uint32_t s = 0; s < hwm && !rc; s += (uint32_t)chunk) {
		uint32_t k = hwm - s < chunk ? hwm - s : (uint32_t)chunk;
		struct stb_abi_task *e = (struct stb_abi_task *)b;
		for (uint32_t i = 0; i < k; i++) {
			const struct stb_abi_task *p = stb_target_task(S->tg, s + i);
			if (p)
				memcpy(&e[i], p, sizeof(e[i]));
			else
				memset(&e[i], 0, sizeof(e[i]));
			entry_as_traced(S, &e[i]);
		}
		/* The segment goes on: these bytes follow the header's in the file. */
		rc = stb_corewrite_more(S->w, e, (size_t)k * sizeof(*e), STB_COREWRITE_MUST);
	}
	free(b);
	if (rc)
		stb_say(err, errlen, "cannot write %s: %s", S->o->save, strerror(-rc));
	return rc;
}

/* ---- owner words ---- */

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The reads kept, as segments: adjacent and overlapping ones merged. */
static int save_reads(struct save *S)
{
	qsort(S->reads, S->nreads, sizeof(*S->reads), piece_cmp);
	uint8_t seg[4096];
	size_t nsegs = 0;
	for (size_t i = 0; i < S->nreads; nsegs++) {
		uint64_t lo = S->reads[i].addr, hi = lo + S->reads[i].len;
		size_t j = i;
		memset(seg, 0, sizeof(seg));
		for (; j < S->nreads && S->reads[j].addr <= hi &&
		       S->reads[j].addr + S->reads[j].len - lo <= sizeof(seg);
		     j++) {
			memcpy(seg + (S->reads[j].addr - lo), S->reads[j].bytes, S->reads[j].len);
			if (S->reads[j].addr + S->reads[j].len > hi)
				hi = S->reads[j].addr + S->reads[j].len;
		}
		int rc = nsegs < READ_SEGS_MAX ? stb_corewrite_load(S->w, lo, hi - lo, seg,
								     (size_t)(hi - lo), PF_R | PF_W)
					       : -E2BIG;
		if (rc == -EFBIG || rc == -E2BIG)
			S->reads_left_out += j - i;
		else if (rc)
			return rc;
		i = j;
	}
	return 0;
}

/* ---- the threads ---- */

/* One thread of the list: its name (the pass's record of it) and how its
 * stack was read (the first capture kept on it). */
struct listed {
	uint32_t tid, order;
	unsigned flags, cut;
	const char *name; /* NULL: from a capture */
};

static int listed_cmp(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

/* The list of threads (corefile.h, the "STB" note): every thread the pass
 * listed, and every thread whose registers are kept. 0 or -errno. */
static int save_threads(struct save *S, const struct stb_collect_result *res)
{
	size_t n = 0, cap = S->nkept + res->threads + 1;
	struct listed *l = malloc(cap * sizeof(*l));
	int rc = 0;
	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < S->nkept && n < cap; i++) {
		const struct kept *e = &S->kept[i];
		if (!e->running && !e->thread)
			continue;
		l[n] = (struct listed){.tid = e->tid, .order = (uint32_t)n, .flags = e->flags,
				       .cut = e->cut};
		n++;
	}
	for (size_t i = 0; i < res->n && n < cap; i++) {
		const struct stb_report_task *t = &res->tasks[i];
		if (!t->is_thread || !t->tid)
			continue;
		l[n] = (struct listed){.tid = t->tid, .order = (uint32_t)n, .name = t->name};
		n++;
	}
	qsort(l, n, sizeof(*l), listed_cmp);
	for (size_t i = 0; i < n && !rc;) {
		/* A tid's entries: the first capture's flags, the record's name. */
		size_t j = i;
		const char *name = NULL;
		bool captured = false;
		unsigned flags = 0, cut = 0;
		for (; j < n && l[j].tid == l[i].tid; j++) {
			if (l[j].name && !name)
				name = l[j].name;
			if (!l[j].name && !captured) {
				captured = true;
				flags = l[j].flags;
				cut = l[j].cut;
			}
		}
		rc = stb_corewrite_thread_info(S->w, l[i].tid, name, flags, cut);
		i = j;
	}
	free(l);
	return rc;
}

/* ---- the run ---- */

static void save_close(struct save *S)
{
	stb_collector_free(S->coll);
	stb_running_fini(&S->run);
	stb_unw_proc_free(S->unw);
	stb_target_close(S->tg);
	stb_corewrite_abort(S->w);
	free(S->buf);
	free(S->kept);
	free(S->reads);
	free(S->named);
}

/* The threads of pid now (bounded), 0 when unknown. */
static size_t count_threads(pid_t pid)
{
	char path[64];
	size_t n = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	for (struct dirent *e; n < STB_ABI_MAX_WORKERS * 64u && (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Opens the target and the file, saves the modules. 0 or -errno (err set). */
static int save_open(struct save *S, char *err, size_t errlen)
{
	const struct stb_loader_opts *o = S->o;
	struct mapping *maps = NULL;
	size_t nmaps = 0;
	stb_deadline_phase("opening the target's table");
	S->tg = stb_target_open(o->pid, err, errlen);
	if (!S->tg)
		return -errno;
	stb_deadline_phase("reading the target's mappings");
	int rc = read_maps(S, &maps, &nmaps, err, errlen);
	if (rc)
		return rc;
	/* A PT_LOAD per stack (a task of the table, or one started meanwhile),
	 * per module, per run of owner words, and the table. */
	const struct stb_tview_info *ti = &S->tg->info;
	uint32_t hwm = stb_tview_hwm(S->tg->hdr, ti, NULL);
	uint64_t slots = (uint64_t)hwm + STB_TARGET_SLOT_SLACK;
	slots = slots < ti->capacity ? slots : ti->capacity;
	size_t max_segs = (size_t)slots + nmaps + READ_SEGS_MAX + 8;
	uint64_t budget = (uint64_t)o->save_max_mib << 20;
	uint64_t table = STB_ABI_TASK_OFFSET(slots);
	if (table > budget) {
		stb_say(err, errlen,
			"the task table of process %d alone takes %" PRIu64 " MiB (%u slots in use): "
			"more than the size budget; raise it with --save-max MIB",
			(int)o->pid, (table + (1u << 20) - 1) >> 20, hwm);
		maps_free(maps, nmaps);
		return -EFBIG;
	}
	/* The notes: the process, its auxv, its file mappings, a thread's
	 * registers and an entry of the list of threads per thread (its
	 * threads now, and more started meanwhile: the rest go after the
	 * data). */
	size_t threads = count_threads(o->pid) + 64;
	size_t notes = stb_corewrite_note_size(sizeof(struct elf_prpsinfo)) +
		       stb_corewrite_note_size(4096) + stb_corewrite_note_size(16) +
		       threads * stb_corewrite_note_size(sizeof(struct elf_prstatus)) +
		       stb_corewrite_note_size(threads * sizeof(struct stb_corefile_note_thread));
	for (size_t i = 0; i < nmaps; i++)
		notes += 24 + strlen(maps[i].path) + 1;
	S->w = stb_corewrite_open(o->save, o->overwrite, budget, max_segs, notes, err, errlen);
	if (!S->w) {
		rc = -errno;
		maps_free(maps, nmaps);
		return rc;
	}
	stb_corewrite_reserve(S->w, table);
	S->named = malloc((nmaps ? nmaps : 1) * sizeof(*S->named));
	if (!S->named) {
		maps_free(maps, nmaps);
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < nmaps; i++) /* /proc lists them by address */
		S->named[S->nnamed++] = (struct range){maps[i].start, maps[i].end};
	stb_deadline_phase("saving the target's modules");
	rc = save_modules(S, maps, nmaps, err, errlen);
	maps_free(maps, nmaps);
	if (rc)
		return rc;
	save_auxv(S);
	stb_corewrite_process(S->w, (uint32_t)o->pid, S->tg->comm);
	stb_deadline_phase("reading the target's modules");
	S->unw = stb_unw_proc_new(o->pid);
	if (!S->unw) {
		rc = -errno;
		stb_say(err, errlen, "cannot read the modules of process %d: %s", (int)o->pid,
			strerror(-rc));
		return rc;
	}
	S->buf = malloc(COPY_MAX);
	if (!S->buf || stb_running_init(&S->run, S->tg, o->verbose) != 0) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct stb_collect_src src;
	stb_target_mem(S->tg, &S->mem);
	S->owners = S->mem;
	S->owners.read = owners_read;
	S->owners.read_many = NULL;
	S->owners.ctx = S;
	stb_running_ops(&S->run, &S->ops);
	S->save_ops = (struct stb_capture_ops){
	    .capture = save_capture, .capture_thread = save_capture_thread, .ctx = S};
	stb_target_collect_src(S->tg, &S->mem, &src);
	src.owners = &S->owners;
	src.drv = (struct stb_driver){.mem = &S->mem,
				      .capture = &S->save_ops,
				      .flags = STB_DRIVER_F_LEASE,
				      .buf = S->buf,
				      .cap = COPY_MAX,
				      .workers = stb_target_workers(S->tg)};
	src.unw = S->unw;
	S->coll = stb_collector_new(&src, 0);
	if (!S->coll) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int stb_coresave_run(const struct stb_loader_opts *o)
{
	struct save S = {.o = o};
	char err[640];
	int status = STB_EXIT_FAIL;
	int rc = save_open(&S, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		goto cleanup;
	}
	uint64_t t0 = stb_now_ns();
	const struct stb_collect_opts co = {
	    .stacks = true,
	    .walk_max = 1, /* the stacks are walked when the core is read */
	    .keep = 1,
	    .timeout_ns = (uint64_t)o->timeout_ms * 1000000u,
	    .trace_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o),
	    .late = STB_COLLECT_LATE_COUNT,
	    .holders = true,
	    .deadlocks = true,
	    .threads = true, /* every thread of the process: keep() has their stacks */
	    .deadlock_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o) / 2,
	    .traced = traced,
	    .arg = &S,
	    .phase = stb_deadline_phase,
	};
	struct stb_collect_result res;
	stb_collect(S.coll, &co, &res);
	if (res.err || S.werr) {
		fprintf(stderr, "stb-bpf-loader: %s\n",
			res.err || S.werr == -ENOMEM ? "out of memory"
						     : "writing the core file failed");
		if (S.werr && S.werr != -ENOMEM)
			fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", o->save,
				strerror(-S.werr));
		goto cleanup;
	}
	if (res.target_gone) {
		fprintf(stderr, "stb-bpf-loader: process %d exited while it was saved: nothing "
				"written\n", (int)o->pid);
		goto cleanup;
	}
	uint64_t t1 = stb_now_ns();
	stb_deadline_phase("writing the core file");
	/* A task traced twice (a holder) keeps its first trace. */
	qsort(S.kept, S.nkept, sizeof(*S.kept), kept_order_cmp);
	size_t k = 0;
	for (size_t i = 0; i < S.nkept; i++)
		if (k == 0 || S.kept[k - 1].id != S.kept[i].id)
			S.kept[k++] = S.kept[i];
	S.nkept = k;
	for (size_t i = 0; i < S.nkept && !rc; i++) {
		const struct kept *e = &S.kept[i];
		if (e->running || e->thread)
			rc = stb_corewrite_thread(S.w, e->tid, &e->regs,
						  e->in_syscall ? (int64_t)e->syscall_nr : -1,
						  e->syscall_arg0);
	}
	if (!rc)
		rc = save_threads(&S, &res);
	if (!rc)
		rc = save_reads(&S);
	if (rc) {
		fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", o->save, strerror(-rc));
		goto cleanup;
	}
	rc = save_table(&S, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		goto cleanup;
	}
	uint64_t size = stb_corewrite_size(S.w);
	rc = stb_corewrite_commit(S.w, err, sizeof(err));
	S.w = NULL;
	if (rc) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		goto cleanup;
	}
	size_t ntasks = res.n - res.threads;
	fprintf(stderr,
		"stb-bpf-loader: process %d saved to %s: %zu tasks, %" PRIu64 " threads, %" PRIu64
		" stacks (%.1f MiB), %" PRIu64 " MiB in all; read it with --core %s\n",
		(int)o->pid, o->save, ntasks, res.threads, S.stacks,
		(double)S.stack_bytes / (1u << 20), (size + (1u << 20) - 1) >> 20, o->save);
	if (o->verbose)
		fprintf(stderr,
			"stb-bpf-loader: %zu tasks and threads traced in %.3f ms (%" PRIu64
			" failed), %" PRIu64 " entries set back to what their trace saw, %zu owner "
			"words kept\n",
			res.n, (double)(t1 - t0) / 1e6, res.failed, S.moved, S.nreads);
	bool ok = !S.deep_left_out;
	if (S.deep_left_out)
		fprintf(stderr,
			"stb-bpf-loader: the size budget (--save-max %u MiB) was reached: %" PRIu64
			" deep running stacks are in the file only as far as the BPF copy (--core "
			"shows them truncated); raise --save-max\n",
			o->save_max_mib, S.deep_left_out);
	if (S.left_out || S.reads_left_out) {
		fprintf(stderr,
			"stb-bpf-loader: the size budget (--save-max %u MiB) was reached: %" PRIu64
			" stacks and %" PRIu64 " owner words are not in the file (their tasks show "
			"errors with --core); raise --save-max\n",
			o->save_max_mib, S.left_out, S.reads_left_out);
		ok = false;
	}
	if (res.not_traced) {
		fprintf(stderr,
			"stb-bpf-loader: the run's deadline came first: %" PRIu64 " tasks were not "
			"traced, their stacks are not in the file\n",
			res.not_traced);
		ok = false;
	}
	uint64_t failed_threads = 0;
	for (size_t i = 0; i < res.n; i++)
		failed_threads += res.tasks[i].is_thread && res.tasks[i].err < 0;
	if (res.failed > failed_threads) {
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %zu tasks could not be traced: their stacks "
			"are not in the file (--core shows why)\n",
			res.failed - failed_threads, ntasks);
		ok = false;
	}
	if (failed_threads || res.threads_left) {
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %" PRIu64 " threads could not be read: their "
			"stacks are not in the file (--pid shows why)\n",
			failed_threads + res.threads_left, res.threads + res.threads_left);
		ok = false;
	}
	if (S.run.tried && !S.run.prog)
		fprintf(stderr, "stb-bpf-loader: %s; running bthreads are not in the file\n",
			S.run.note);
	status = ok ? STB_EXIT_OK : STB_EXIT_FAIL;
cleanup:
	save_close(&S);
	return status;
}
