// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The record program, linked (cookie = worker index) to a cpu-clock event on
 * each worker thread of the target. Request mode: one record per armed request
 * while the requested bthread is RUNNING there; sample mode: one per sample.
 * Reads the abi.h task table as the target's BPF map or from target memory.
 * A bthread runs where a worker's current names it (abi.h, "Running"); the
 * program runs on that worker's thread, so it sees that worker's stores in
 * their order: current == id means the switch to the task is complete.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include <stb/abi.h>
#include "record.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define STB_ENOENT 2
#define STB_ERANGE 34

#define STB_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
/* Hides a value from the compiler so that it cannot rewrite the bound checks
 * that follow into forms the verifier does not track. */
#define STB_OPAQUE(x) asm volatile("" : "=r"(x) : "0"(x))

/*
 * Configuration, written by loader/bpf_prog.c before the object is loaded
 * (read-only afterwards, so the verifier prunes the unused table backing and
 * mode).
 */
const volatile __u32 stb_mode = STB_RECORD_MODE_REQUEST;   /* enum stb_record_mode */
const volatile __u32 stb_backing = STB_ABI_BACKING_BPF_MAP; /* enum stb_abi_backing */
const volatile __u64 stb_table_addr = 0;    /* memfd: table address in the target */
const volatile __u32 stb_task_capacity = 0; /* task slots in the table */
const volatile __u32 stb_sample_stack = 0;  /* sample mode: copy the stack too */
const volatile __u32 stb_target_tgid = 0;   /* the target process (thread requests) */

/*
 * Requests, one per worker, written by user space through the mmapped .bss:
 * stb_req_id[w] first, then stb_req_tag[w] (non-zero: armed) with a release
 * store. The program claims a request by a CAS of the tag back to 0, so a
 * request yields at most one record.
 */
__u64 stb_req_id[STB_RECORD_SLOTS];
__u64 stb_req_tag[STB_RECORD_SLOTS];
/* Non-zero: the request of that (pthread) slot is for a thread of the target
 * that is no task: stb_req_id is its tid, and no table entry is read. */
__u64 stb_req_thread[STB_RECORD_SLOTS];

/* Counters, atomically incremented, read by user space. */
__u64 stb_cnt_runs;     /* program runs (samples delivered) */
__u64 stb_cnt_idle;     /* capture mode: no request armed for the worker */
__u64 stb_cnt_mismatch; /* armed, but the requested task was not RUNNING there */
__u64 stb_cnt_records;  /* records submitted */
__u64 stb_cnt_rb_full;  /* ring buffer full: record lost */
__u64 stb_cnt_read_err; /* a table entry could not be read */

/* The task table when it is a BPF map: the loader replaces this definition
 * with the target's map (bpf_map__reuse_fd) before load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STB_ABI_ENTRY_SIZE);
	__uint(max_entries, 1);
} stb_tasks SEC(".maps");

/* Records to user space; size set by the loader. Submitted without wakeup:
 * user space polls. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} stb_records SEC(".maps");

/* x86_64 user pt_regs (uapi asm/ptrace.h), the layout of the perf_event
 * context (bpf_user_pt_regs_t) and, on x86_64, also of the kernel's struct
 * pt_regs that bpf_task_pt_regs() returns. ABI, so not relocated: the program
 * has no CO-RE relocation at all, which spares libbpf from parsing the 5 MB
 * kernel BTF (~14 ms of 4 KiB sysfs reads per loader run). Reads must be 8
 * bytes wide: the verifier rejects a 2-byte read of cs. */
struct stb_uapi_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

_Static_assert(__builtin_offsetof(struct stb_abi_task, stack_lo) == 6 * 8 &&
	       __builtin_offsetof(struct stb_abi_task, stack_hi) == 7 * 8 &&
	       __builtin_offsetof(struct stb_abi_task, tid) == 8 * 8 + 4,
	       "stb_read_task reads the first 9 words of a task entry");

/* The fields of a task entry the program needs. */
struct stb_task_view {
	__u64 id;
	__u64 word;
	__u64 stack_lo;
	__u64 stack_hi;
	__u32 tid;
};

static __always_inline void stb_count(__u64 *counter)
{
	__sync_fetch_and_add(counter, 1);
}

/* Worker w's current (STB_ABI_CURRENT_*). 0 or a negative error. */
static __always_inline long stb_read_current(__u32 w, __u64 *cur)
{
	if (stb_backing == STB_ABI_BACKING_BPF_MAP) {
		__u32 key = STB_ABI_WORKER_BASE + w;
		struct stb_abi_worker *e = bpf_map_lookup_elem(&stb_tasks, &key);

		if (!e)
			return -STB_ENOENT;
		*cur = STB_READ_ONCE(e->current);
		return 0;
	}
	return bpf_probe_read_user(cur, sizeof(*cur),
				   (const void *)(stb_table_addr + STB_ABI_WORKER_OFFSET(w)));
}

/* The task entry of id's slot. 0 or a negative error. */
static __always_inline long stb_read_task(__u64 id, struct stb_task_view *t)
{
	__u32 slot = STB_ABI_SLOT(id);

	if (slot >= stb_task_capacity)
		return -STB_ERANGE;
	if (stb_backing == STB_ABI_BACKING_BPF_MAP) {
		__u32 key = STB_ABI_TASK_BASE + slot;
		struct stb_abi_task *e = bpf_map_lookup_elem(&stb_tasks, &key);

		if (!e)
			return -STB_ENOENT;
		t->word = STB_READ_ONCE(e->word);
		t->id = STB_READ_ONCE(e->id);
		t->stack_lo = STB_READ_ONCE(e->stack_lo);
		t->stack_hi = STB_READ_ONCE(e->stack_hi);
		t->tid = STB_READ_ONCE(e->tid);
		return 0;
	} else {
		/* One read of the first 72 bytes: id, word, ..., stack_hi, worker/tid. */
		__u64 head[9];
		long err = bpf_probe_read_user(head, sizeof(head),
					       (const void *)(stb_table_addr + STB_ABI_TASK_OFFSET(slot)));

		if (err)
			return err;
		t->id = head[0];
		t->word = head[1];
		t->stack_lo = head[6];
		t->stack_hi = head[7];
		t->tid = (__u32)(head[8] >> 32);
		return 0;
	}
}

/* The user registers at the sample when it hit user mode: copies them from
 * the perf context and returns 1; returns 0 when the sample hit kernel mode.
 * A subprogram (not inlined) so that the compiler cannot merge these context
 * loads with the kernel-mode loads below into loads through a selected
 * pointer, which the verifier rejects ("dereference of modified ctx ptr"). */
static __noinline int stb_ctx_user_regs(struct bpf_perf_event_data *ctx,
					struct stb_record_regs *out)
{
	const struct stb_uapi_regs *r = (const void *)ctx;

	if ((r->cs & 3) != 3)
		return 0;
	out->ip = r->ip;
	out->sp = r->sp;
	out->bp = r->bp;
	out->bx = r->bx;
	out->r12 = r->r12;
	out->r13 = r->r13;
	out->r14 = r->r14;
	out->r15 = r->r15;
	return 1;
}

/* The user registers at the sample. Returns 1 when the sample hit kernel mode
 * (registers taken from the task's entry frame), else 0. */
static __always_inline int stb_user_regs(struct bpf_perf_event_data *ctx,
					 struct stb_record_regs *out)
{
	const struct stb_uapi_regs *u;

	if (stb_ctx_user_regs(ctx, out))
		return 0;
	/* Kernel mode (syscall, page fault, interrupt): the user registers are
	 * the ones saved on kernel entry. */
	u = (const struct stb_uapi_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	out->ip = u->ip;
	out->sp = u->sp;
	out->bp = u->bp;
	out->bx = u->bx;
	out->r12 = u->r12;
	out->r13 = u->r13;
	out->r14 = u->r14;
	out->r15 = u->r15;
	return 1;
}

/*
 * Copies the red zone [sp - 128, sp) into rec->red_zone (record.h), then
 * [sp, min(hi, sp + ~STB_RECORD_STACK_MAX)) page by page into
 * rec->stack: first the bytes up to the first page boundary (first, 1..PAGE)
 * at offset 0, then page k >= 1 at offset first + (k - 1) * PAGE, so every
 * read is provably inside the record. Stops at the first page that cannot be
 * read (non-resident: the program cannot fault pages in).
 *
 * Shape for the verifier: only the full-page path goes round the loop (a
 * partial last page or a fault leaves it), and the copied size lives in the
 * record, not in a register, so the states at the loop head of all paths
 * are equal and the verification cost grows linearly with the page count
 * (a "done += n" loop explodes: 16 pages ~47k insns, 32 pages > 1M).
 */
static __always_inline void stb_copy_stack(struct stb_record *rec, __u64 sp,
					   __u64 lo, __u64 hi)
{
	__u64 avail, pgoff, first, off, n;
	long err;
	__u32 k;

	rec->stack_size = 0;
	rec->stack_err = 0;
	rec->red_zone_len = 0;
	if (sp < lo || sp >= hi) {
		rec->flags |= STB_RECORD_F_SP_OUTSIDE;
		return;
	}
	/* The red zone: one fixed-size read; left out (length 0) when it is not
	 * inside the stack or not resident. */
	if (sp - lo >= STB_RECORD_RED_ZONE &&
	    bpf_probe_read_user(rec->red_zone, STB_RECORD_RED_ZONE,
				(const void *)(sp - STB_RECORD_RED_ZONE)) == 0)
		rec->red_zone_len = STB_RECORD_RED_ZONE;
	avail = hi - sp;
	pgoff = sp & (STB_RECORD_PAGE_SIZE - 1);
	STB_OPAQUE(pgoff);
	first = STB_RECORD_PAGE_SIZE - pgoff;
	n = avail < first ? avail : first;
	STB_OPAQUE(n);
	if (n > STB_RECORD_PAGE_SIZE)
		return;
	err = bpf_probe_read_user(rec->stack, n, (const void *)sp);
	if (err)
		goto fault;
	rec->stack_size = n;
	if (n == avail)
		return;
	for (k = 1; k < STB_RECORD_STACK_PAGES; k++) {
		off = first + (__u64)(k - 1) * STB_RECORD_PAGE_SIZE;
		/* Keeps off a plain scalar added to the record pointer (clang
		 * would otherwise fold "- pgoff" into the pointer) and bounds
		 * it: off + PAGE <= STB_RECORD_STACK_MAX. */
		STB_OPAQUE(off);
		if (off > (STB_RECORD_STACK_PAGES - 1) * STB_RECORD_PAGE_SIZE || off >= avail)
			return;
		n = avail - off;
		if (n < STB_RECORD_PAGE_SIZE) {
			/* The last, partial page below stack_hi. */
			err = bpf_probe_read_user(rec->stack + off, n, (const void *)(sp + off));
			if (err)
				goto fault;
			rec->stack_size = off + n;
			return;
		}
		err = bpf_probe_read_user(rec->stack + off, STB_RECORD_PAGE_SIZE,
					  (const void *)(sp + off));
		if (err)
			goto fault;
		rec->stack_size = off + STB_RECORD_PAGE_SIZE;
	}
	if (rec->stack_size < avail)
		rec->flags |= STB_RECORD_F_STACK_LIMIT;
	return;
fault:
	rec->stack_err = err;
	rec->flags |= STB_RECORD_F_STACK_FAULT;
}

/* Fills everything but kind/flags/tag/id/prog_ns. with_stack: rec has room for
 * the stack copy. */
static __always_inline void stb_fill(struct bpf_perf_event_data *ctx,
				     struct stb_record *rec, __u32 w,
				     const struct stb_task_view *t, __u64 t0, int with_stack)
{
	long n;

	rec->worker = w;
	rec->tid = (__u32)bpf_get_current_pid_tgid();
	rec->cpu = bpf_get_smp_processor_id();
	rec->word = t->word;
	rec->stack_lo = t->stack_lo;
	rec->stack_hi = t->stack_hi;
	rec->time_ns = t0;
	rec->red_zone_len = 0;
	if (stb_user_regs(ctx, &rec->regs))
		rec->flags |= STB_RECORD_F_KERNEL;
	n = bpf_get_stack(ctx, rec->frames, sizeof(rec->frames), BPF_F_USER_STACK);
	if (n < 0) {
		rec->nframes = 0;
		rec->frames_err = n;
	} else {
		rec->nframes = n / sizeof(rec->frames[0]);
		rec->frames_err = 0;
	}
	if (with_stack) {
		stb_copy_stack(rec, rec->regs.sp, t->stack_lo, t->stack_hi);
	} else {
		rec->stack_size = 0;
		rec->stack_err = 0;
	}
}

static __always_inline int stb_on_capture(struct bpf_perf_event_data *ctx, __u32 w, __u64 t0)
{
	struct stb_record *rec;
	struct stb_task_view t;
	__u64 tag, id, cur;

	tag = STB_READ_ONCE(stb_req_tag[w]);
	if (!tag) {
		stb_count(&stb_cnt_idle);
		return 0;
	}
	id = STB_READ_ONCE(stb_req_id[w]);
	if (w >= STB_ABI_MAX_WORKERS && STB_READ_ONCE(stb_req_thread[w])) {
		/* A thread that is no task: it is the one if the sample ran on
		 * it, in the target. Its stack's bounds are not known: the copy
		 * goes from sp up to the first page that cannot be read. */
		__u64 pt = bpf_get_current_pid_tgid();

		if ((__u32)(pt >> 32) != stb_target_tgid || (__u32)pt != (__u32)id || !stb_target_tgid) {
			stb_count(&stb_cnt_mismatch);
			return 0;
		}
		t.id = id;
		t.word = STB_TASK_RUNNING;
		t.stack_lo = 0;
		t.stack_hi = ~0ull;
		t.tid = (__u32)pt;
		goto record;
	}
	if (w < STB_ABI_MAX_WORKERS) {
		if (stb_read_current(w, &cur)) {
			stb_count(&stb_cnt_read_err);
			return 0;
		}
	} else {
		/* A registered pthread: it is the task if the entry names this thread. */
		cur = id;
	}
	if (stb_read_task(id, &t)) {
		stb_count(&stb_cnt_read_err);
		return 0;
	}
	if (w >= STB_ABI_MAX_WORKERS) {
		/* A registered pthread: its own entry says RUNNING. */
		if (t.tid != (__u32)bpf_get_current_pid_tgid() ||
		    STB_ABI_STATE(t.word) != STB_TASK_RUNNING)
			cur = 0;
	} else if (!STB_ABI_RUNNABLE(STB_ABI_STATE(t.word))) {
		cur = 0; /* leaving the worker (SUSPENDING), or not a bthread's word */
	}
	if (cur != id || t.id != id) {
		stb_count(&stb_cnt_mismatch);
		return 0;
	}
	/* The record says what the task is: running (its word says READY). */
	t.word = (t.word & ~(__u64)0xff) | STB_TASK_RUNNING;
record:
	rec = bpf_ringbuf_reserve(&stb_records, sizeof(*rec), 0);
	if (!rec) {
		stb_count(&stb_cnt_rb_full);
		return 0;
	}
	if (__sync_val_compare_and_swap(&stb_req_tag[w], tag, 0) != tag) {
		/* User space withdrew or replaced the request meanwhile. */
		bpf_ringbuf_discard(rec, BPF_RB_NO_WAKEUP);
		return 0;
	}
	rec->kind = STB_RECORD_MODE_REQUEST;
	rec->flags = STB_RECORD_F_RUNNING;
	rec->tag = tag;
	rec->id = id;
	stb_fill(ctx, rec, w, &t, t0, 1);
	rec->prog_ns = bpf_ktime_get_ns() - t0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	stb_count(&stb_cnt_records);
	/* Non-zero: the sample counts against the event's limit, so an event
	 * armed with PERF_EVENT_IOC_REFRESH(1) disables itself now. */
	return 1;
}

static __always_inline int stb_on_sample(struct bpf_perf_event_data *ctx, __u32 w, __u64 t0)
{
	struct stb_record *rec;
	struct stb_task_view t = {};
	__u32 flags = 0;
	__u64 cur = 0;
	int switching;

	if (stb_read_current(w, &cur)) {
		stb_count(&stb_cnt_read_err);
		cur = 0;
	}
	switching = STB_ABI_CURRENT_IS_SWITCHING(cur);
	cur = STB_ABI_CURRENT_ID(cur);
	if (!cur) {
		flags |= STB_RECORD_F_NO_TASK;
	} else if (stb_read_task(cur, &t) || t.id != cur) {
		flags |= STB_RECORD_F_NO_TASK;
		t.id = t.word = t.stack_lo = t.stack_hi = 0;
	} else if (STB_ABI_RUNNABLE(STB_ABI_STATE(t.word))) {
		/* Named by this worker: running, or switching to it. The record
		 * says which (its word says READY: abi.h). */
		if (!switching)
			flags |= STB_RECORD_F_RUNNING;
		t.word = (t.word & ~(__u64)0xff) |
			 (switching ? STB_TASK_ABOUT_TO_RUN : STB_TASK_RUNNING);
	}

	if (stb_sample_stack) {
		rec = bpf_ringbuf_reserve(&stb_records, sizeof(*rec), 0);
		if (!rec) {
			stb_count(&stb_cnt_rb_full);
			return 0;
		}
		rec->flags = flags;
		stb_fill(ctx, rec, w, &t, t0, !(flags & STB_RECORD_F_NO_TASK));
	} else {
		rec = bpf_ringbuf_reserve(&stb_records, STB_RECORD_HDR_SIZE, 0);
		if (!rec) {
			stb_count(&stb_cnt_rb_full);
			return 0;
		}
		rec->flags = flags | STB_RECORD_F_NO_STACK;
		stb_fill(ctx, rec, w, &t, t0, 0);
	}
	rec->kind = STB_RECORD_MODE_SAMPLE;
	rec->tag = 0;
	rec->id = cur;
	rec->prog_ns = bpf_ktime_get_ns() - t0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	stb_count(&stb_cnt_records);
	/* Zero: the sample has no further effect on the event. */
	return 0;
}

SEC("perf_event")
int stb_record_prog(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = bpf_ktime_get_ns();
	__u64 w = bpf_get_attach_cookie(ctx);

	stb_count(&stb_cnt_runs);
	if (w >= STB_RECORD_SLOTS)
		return 0;
	if (stb_mode == STB_RECORD_MODE_SAMPLE)
		return w < STB_ABI_MAX_WORKERS ? stb_on_sample(ctx, (__u32)w, t0) : 0;
	return stb_on_capture(ctx, (__u32)w, t0);
}
