/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The user-space side of the BPF capture program: loads the skeleton for one
 * target, owns the per-worker cpu-clock perf events and their BPF links, the
 * request slots in the program's .bss and the ring-buffer consumer. See
 * bpf_prog.h and bpf/record.h for the contract and bpf/stb_record.bpf.c for the
 * kernel side.
 */
#include "bpf_prog.h"
#include "table/tview.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <linux/perf_event.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "stb_record_bpf.skel.h"

#define STB_BPF_PROG_DEFAULT_PERIOD_CAPTURE 20000ull    /* 20 us */
#define STB_BPF_PROG_DEFAULT_PERIOD_SAMPLE 10000000ull  /* 10 ms */
#define STB_BPF_PROG_DEFAULT_RB_CAPTURE (256u * 1024u)
#define STB_BPF_PROG_DEFAULT_RB_SAMPLE (4u * 1024u * 1024u)
#define STB_BPF_PROG_DEFAULT_SPIN_US 50u
#define STB_BPF_PROG_SLEEP_NS 50000ull

struct stb_bpf_prog_worker {
	int perf_fd;        /* cpu-clock event on tid, -1 when none */
	int link_fd;        /* BPF link of the program to perf_fd */
	pid_t tid;
	bool limit_pending;   /* DISARM_SELF: event_limit is still 1 (armed, unused) */
	bool disable_pending; /* DISARM_SELF: disabled itself after a record; the
	                         PERF_EVENT_IOC_DISABLE is left to the next arm */
};

struct stb_bpf_prog {
	pid_t pid;
	__u32 mode;
	__u32 backing;
	__u64 table_addr;
	__u32 task_capacity;
	__u64 period_ns;
	unsigned int spin_us;
	bool self_disarm;
	bool on_demand; /* events exist only during stb_bpf_prog_request */
	bool sampling;
	int table_fd; /* BPF_MAP backing: our duplicate; else -1 */
	int stats_fd; /* BPF_ENABLE_STATS fd, -1 when not enabled */
	struct stb_record_bpf *skel;
	struct ring_buffer *rb;
	__u64 next_tag;
	/* The request stb_bpf_prog_request is waiting for. */
	__u64 want_tag;
	struct stb_record *want_out;
	bool got;
	__u64 seen_ns;
	__u64 stale;
	/* stb_bpf_prog_sample_poll's consumer. */
	stb_bpf_prog_sample_fn sample_fn;
	void *sample_arg;
	struct stb_bpf_prog_worker workers[STB_RECORD_SLOTS];
};


/* Does thread tid of process pid exist? */
static bool thread_alive(pid_t pid, pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	return access(path, F_OK) == 0;
}

/* Kernel >= 6.10 lets a perf_event BPF program that returns 0 suppress the
 * sample's side effects, event_limit included; the SELF disarm relies on it. */
static bool kernel_self_disarm(void)
{
	struct utsname u;
	unsigned int major = 0, minor = 0;

	if (uname(&u) != 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2)
		return false;
	return major > 6 || (major == 6 && minor >= 10);
}

/* The one check of a table header (table/tview.h). */
static bool header_ok(const struct stb_abi_header *h)
{
	struct stb_tview_info info;
	char why[160];
	return stb_tview_check_header(h, 0, &info, why, sizeof(why)) == 0;
}

/* Reads len bytes at offset off of the table. 0 or -errno. */
static int table_read(const struct stb_bpf_prog *c, __u64 off, void *buf, size_t len)
{
	if (c->backing == STB_ABI_BACKING_BPF_MAP) {
		unsigned char *p = buf;

		/* Whole entries only. */
		if (off % STB_ABI_ENTRY_SIZE || len % STB_ABI_ENTRY_SIZE)
			return -EINVAL;
		for (size_t done = 0; done < len; done += STB_ABI_ENTRY_SIZE) {
			__u32 key = (__u32)((off + done) / STB_ABI_ENTRY_SIZE);

			if (bpf_map_lookup_elem(c->table_fd, &key, p + done) != 0)
				return -errno;
		}
		return 0;
	} else {
		struct iovec local = { .iov_base = buf, .iov_len = len };
		struct iovec remote = { .iov_base = (void *)(uintptr_t)(c->table_addr + off),
					.iov_len = len };
		ssize_t n = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);

		if (n < 0)
			return -errno;
		return (size_t)n == len ? 0 : -EFAULT;
	}
}

/* Checks the table and sets c->task_capacity. 0 or -errno. */
static int table_check(struct stb_bpf_prog *c)
{
	struct stb_abi_header h;
	int err;

	if (c->backing == STB_ABI_BACKING_BPF_MAP) {
		struct bpf_map_info info;
		__u32 len = sizeof(info);

		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(c->table_fd, &info, &len) != 0)
			return -errno;
		if (info.type != BPF_MAP_TYPE_ARRAY || info.key_size != 4 ||
		    info.value_size != STB_ABI_ENTRY_SIZE || info.max_entries <= STB_ABI_TASK_BASE ||
		    strncmp(info.name, STB_ABI_TABLE_NAME, sizeof(info.name)) != 0)
			return -EPROTO;
		c->task_capacity = info.max_entries - STB_ABI_TASK_BASE;
	}
	err = table_read(c, 0, &h, sizeof(h));
	if (err)
		return err;
	if (!header_ok(&h))
		return -EPROTO;
	if (c->backing == STB_ABI_BACKING_MEMFD) {
		if (h.table_addr != c->table_addr)
			return -EPROTO;
		c->task_capacity = h.task_capacity;
	} else if (h.task_capacity < c->task_capacity) {
		c->task_capacity = h.task_capacity;
	}
	return 0;
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct stb_bpf_prog *c = ctx;
	const struct stb_record *rec = data;

	if (size < STB_RECORD_HDR_SIZE) {
		c->stale++;
		return 0;
	}
	if (c->mode == STB_RECORD_MODE_SAMPLE) {
		if (!c->sample_fn)
			return 0;
		return c->sample_fn(c->sample_arg, rec, size);
	}
	if (c->want_out && !c->got && rec->kind == STB_RECORD_MODE_REQUEST &&
	    rec->tag == c->want_tag) {
		size_t n = STB_RECORD_HDR_SIZE;

		if (rec->stack_size <= STB_RECORD_STACK_MAX &&
		    STB_RECORD_HDR_SIZE + rec->stack_size <= size)
			n += rec->stack_size;
		memcpy(c->want_out, rec, n);
		if (n == STB_RECORD_HDR_SIZE)
			c->want_out->stack_size = 0;
		c->got = true;
		c->seen_ns = stb_now_ns();
		return 0;
	}
	c->stale++;
	return 0;
}

static void event_close(struct stb_bpf_prog_worker *ev);

/* Forgets worker w: closes its event and link, clears its request. */
static void worker_close(struct stb_bpf_prog *c, unsigned int w)
{
	struct stb_bpf_prog_worker *ev = &c->workers[w];

	event_close(ev);
	ev->tid = 0;
	if (c->skel && c->skel->bss)
		__atomic_store_n(&c->skel->bss->stb_req_tag[w], 0, __ATOMIC_RELEASE);
}

struct stb_bpf_prog *stb_bpf_prog_open(pid_t pid, const struct stb_bpf_prog_opts *opts)
{
	struct stb_bpf_prog *c = NULL;
	__u32 rb_bytes;
	int err;

	if (pid <= 0 || !opts) {
		errno = EINVAL;
		return NULL;
	}
	if ((opts->mode != 0 && opts->mode != STB_RECORD_MODE_REQUEST &&
	     opts->mode != STB_RECORD_MODE_SAMPLE) ||
	    (opts->backing == STB_ABI_BACKING_BPF_MAP && opts->table_fd < 0) ||
	    (opts->backing == STB_ABI_BACKING_MEMFD && opts->table_addr == 0) ||
	    (opts->backing != STB_ABI_BACKING_BPF_MAP && opts->backing != STB_ABI_BACKING_MEMFD) ||
	    opts->disarm > STB_BPF_PROG_DISARM_USER ||
	    (opts->on_demand && opts->mode == STB_RECORD_MODE_SAMPLE) ||
	    (opts->period_ns != 0 && opts->period_ns < 10000)) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->pid = pid;
	c->mode = opts->mode ? opts->mode : STB_RECORD_MODE_REQUEST;
	c->backing = opts->backing;
	c->table_addr = opts->table_addr;
	c->table_fd = -1;
	c->stats_fd = -1;
	c->next_tag = 1;
	c->spin_us = opts->spin_us ? opts->spin_us : STB_BPF_PROG_DEFAULT_SPIN_US;
	c->on_demand = opts->on_demand;
	c->period_ns = opts->period_ns;
	if (!c->period_ns)
		c->period_ns = c->mode == STB_RECORD_MODE_REQUEST ? STB_BPF_PROG_DEFAULT_PERIOD_CAPTURE
								   : STB_BPF_PROG_DEFAULT_PERIOD_SAMPLE;
	if (opts->disarm == STB_BPF_PROG_DISARM_AUTO)
		c->self_disarm = kernel_self_disarm();
	else
		c->self_disarm = opts->disarm == STB_BPF_PROG_DISARM_SELF;
	for (unsigned int w = 0; w < STB_RECORD_SLOTS; w++) {
		c->workers[w].perf_fd = -1;
		c->workers[w].link_fd = -1;
	}
	rb_bytes = opts->ringbuf_bytes;
	if (!rb_bytes)
		rb_bytes = c->mode == STB_RECORD_MODE_REQUEST ? STB_BPF_PROG_DEFAULT_RB_CAPTURE
							       : STB_BPF_PROG_DEFAULT_RB_SAMPLE;
	if ((rb_bytes & (rb_bytes - 1)) || rb_bytes < 4 * sizeof(struct stb_record)) {
		err = -EINVAL;
		goto cleanup;
	}

	if (c->backing == STB_ABI_BACKING_BPF_MAP) {
		c->table_fd = fcntl(opts->table_fd, F_DUPFD_CLOEXEC, 3);
		if (c->table_fd < 0) {
			err = -errno;
			goto cleanup;
		}
	}
	if (opts->task_capacity > STB_ABI_MAX_CAPACITY) {
		err = -EINVAL;
		goto cleanup;
	}
	/* A table its caller checked already is not read again. */
	c->task_capacity = opts->task_capacity;
	err = c->task_capacity ? 0 : table_check(c);
	if (err)
		goto cleanup;

	c->skel = stb_record_bpf__open();
	if (!c->skel) {
		err = -errno;
		goto cleanup;
	}
	c->skel->rodata->stb_mode = c->mode;
	c->skel->rodata->stb_backing = c->backing;
	c->skel->rodata->stb_table_addr = c->table_addr;
	c->skel->rodata->stb_task_capacity = c->task_capacity;
	c->skel->rodata->stb_sample_stack = opts->sample_stack ? 1 : 0;
	c->skel->rodata->stb_target_tgid = (__u32)pid;
	err = bpf_map__set_max_entries(c->skel->maps.stb_records, rb_bytes);
	if (err)
		goto cleanup;
	if (c->backing == STB_ABI_BACKING_BPF_MAP) {
		err = bpf_map__reuse_fd(c->skel->maps.stb_tasks, c->table_fd);
		if (err)
			goto cleanup;
	}
	err = stb_record_bpf__load(c->skel);
	if (err)
		goto cleanup;
	if (!c->skel->bss) {
		err = -ENOTSUP; /* .bss not mmapable: requests cannot be posted */
		goto cleanup;
	}
	c->rb = ring_buffer__new(bpf_map__fd(c->skel->maps.stb_records), on_record, c,
				 NULL);
	if (!c->rb) {
		err = -errno;
		goto cleanup;
	}
	return c;

cleanup:
	stb_bpf_prog_close(c);
	errno = -err;
	return NULL;
}

void stb_bpf_prog_close(struct stb_bpf_prog *c)
{
	if (!c)
		return;
	for (unsigned int w = 0; w < STB_RECORD_SLOTS; w++)
		worker_close(c, w);
	ring_buffer__free(c->rb);
	stb_record_bpf__destroy(c->skel);
	if (c->table_fd >= 0)
		close(c->table_fd);
	if (c->stats_fd >= 0)
		close(c->stats_fd);
	free(c);
}

/* Opens worker w's cpu-clock event on tid, enabled or not, and links the
 * program to it (cookie = w). 0 or -errno (-ESRCH: no such thread in the
 * target). */
static int event_open(struct stb_bpf_prog *c, unsigned int w, pid_t tid, bool enabled)
{
	LIBBPF_OPTS(bpf_link_create_opts, lopts);
	struct stb_bpf_prog_worker *ev = &c->workers[w];
	struct perf_event_attr attr;
	int perf_fd = -1, link_fd = -1;
	int err;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = c->period_ns;
	/* Opening it enabled saves the IPI of a later PERF_EVENT_IOC_ENABLE:
	 * installing an event on a running task interrupts it anyway. */
	attr.disabled = enabled ? 0 : 1;
	attr.exclude_hv = 1;
	/* Kernel-mode samples are wanted: the program then takes the user
	 * registers from the task's entry frame. */
	perf_fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (perf_fd < 0) {
		err = -errno;
		goto cleanup;
	}
	/* A BPF link (not PERF_EVENT_IOC_SET_BPF) carries the worker index as
	 * cookie, and unlike bpf_program__attach_perf_event it does not enable
	 * the event. */
	lopts.perf_event.bpf_cookie = w;
	link_fd = bpf_link_create(bpf_program__fd(c->skel->progs.stb_record_prog), perf_fd,
				  BPF_PERF_EVENT, &lopts);
	if (link_fd < 0) {
		err = link_fd;
		goto cleanup;
	}
	ev->perf_fd = perf_fd;
	ev->link_fd = link_fd;
	ev->limit_pending = false;
	ev->disable_pending = false;
	return 0;

cleanup:
	if (link_fd >= 0)
		close(link_fd);
	if (perf_fd >= 0)
		close(perf_fd);
	/* The thread may have exited between the caller's check and the open. */
	if (err == -ESRCH || !thread_alive(c->pid, tid))
		return -ESRCH;
	return err;
}

/* Closes worker w's event and link, keeping its tid. */
static void event_close(struct stb_bpf_prog_worker *ev)
{
	if (ev->link_fd >= 0)
		close(ev->link_fd);
	if (ev->perf_fd >= 0)
		close(ev->perf_fd);
	ev->link_fd = -1;
	ev->perf_fd = -1;
	ev->limit_pending = false;
	ev->disable_pending = false;
}

int stb_bpf_prog_set_worker(struct stb_bpf_prog *c, unsigned int worker, pid_t tid)
{
	struct stb_bpf_prog_worker *ev;
	int err;

	if (!c || worker >= STB_RECORD_SLOTS || tid < 0)
		return -EINVAL;
	ev = &c->workers[worker];
	if (tid != 0 && ev->tid == tid && (ev->perf_fd >= 0 || c->on_demand))
		return 0;
	worker_close(c, worker);
	if (tid == 0)
		return 0;
	if (!thread_alive(c->pid, tid))
		return -ESRCH;
	if (!c->on_demand) {
		err = event_open(c, worker, tid, c->sampling);
		if (err)
			return err;
	}
	ev->tid = tid;
	return 0;
}

int stb_bpf_prog_sync_workers(struct stb_bpf_prog *c)
{
	struct stb_abi_header h;
	struct stb_abi_worker *ws = NULL;
	int err, n = 0;

	if (!c)
		return -EINVAL;
	err = table_read(c, 0, &h, sizeof(h));
	if (err)
		return err;
	if (!header_ok(&h))
		return -EPROTO;
	/* The target's count, clamped: its worker entries are read, never more. */
	__u32 nworkers = h.nworkers < STB_ABI_MAX_WORKERS ? h.nworkers : STB_ABI_MAX_WORKERS;
	if (nworkers) {
		ws = calloc(nworkers, sizeof(*ws));
		if (!ws)
			return -ENOMEM;
		err = table_read(c, STB_ABI_WORKER_OFFSET(0), ws, (size_t)nworkers * sizeof(*ws));
		if (err)
			goto cleanup;
	}
	for (unsigned int w = 0; w < STB_ABI_MAX_WORKERS; w++) {
		pid_t tid = w < nworkers && ws[w].tid <= INT32_MAX ? (pid_t)ws[w].tid : 0;

		err = stb_bpf_prog_set_worker(c, w, tid);
		if (err == -ESRCH)
			err = stb_bpf_prog_set_worker(c, w, 0);
		if (err)
			goto cleanup;
		if (c->workers[w].tid != 0)
			n++;
	}
	err = n;

cleanup:
	free(ws);
	return err;
}

/* Busy-wait hint. */
static void relax(void)
{
	__asm__ __volatile__("pause" ::: "memory");
}

static int request(struct stb_bpf_prog *c, unsigned int worker, __u64 id, bool thread,
		   unsigned int timeout_us, struct stb_record *out,
		   struct stb_bpf_prog_timing *timing)
{
	struct stb_bpf_prog_worker *ev;
	__u64 tag, arm_ns, now, deadline, spin_end;
	__u32 polls = 0;
	int err = 0, n;

	if (!c || !out || worker >= STB_RECORD_SLOTS || id == 0 ||
	    c->mode != STB_RECORD_MODE_REQUEST || (thread && worker < STB_ABI_MAX_WORKERS))
		return -EINVAL;
	ev = &c->workers[worker];
	if (ev->tid == 0)
		return -ENODEV;

	/* Drop whatever an earlier, failed call left behind. */
	c->want_out = NULL;
	c->want_tag = 0;
	n = ring_buffer__consume(c->rb);
	if (n < 0)
		return n;

	tag = c->next_tag++;
	c->want_tag = tag;
	c->want_out = out;
	c->got = false;
	c->seen_ns = 0;
	__atomic_store_n(&c->skel->bss->stb_req_id[worker], id, __ATOMIC_RELAXED);
	__atomic_store_n(&c->skel->bss->stb_req_thread[worker], thread ? 1 : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->skel->bss->stb_req_tag[worker], tag, __ATOMIC_RELEASE);

	/* Arm. Every enable of an event on a running thread interrupts it
	 * (IPI), so there is exactly one per capture. */
	arm_ns = stb_now_ns();
	if (c->on_demand) {
		err = event_open(c, worker, ev->tid, true);
		/* Already enabled: REFRESH only sets event_limit (no IPI). A
		 * record produced before it does not disable the event; the
		 * close below does. */
		if (!err && c->self_disarm && ioctl(ev->perf_fd, PERF_EVENT_IOC_REFRESH, 1) != 0)
			err = -errno;
	} else {
		/* After a self-disarmed capture the event disabled itself (from
		 * irq_work right after the sample); this DISABLE then finds it
		 * off and costs no IPI. It orders the REFRESH below after that
		 * disable, which would otherwise undo the REFRESH's enable. */
		if (ev->disable_pending && ioctl(ev->perf_fd, PERF_EVENT_IOC_DISABLE, 0) != 0)
			err = -errno;
		ev->disable_pending = false;
		if (err) {
			/* nothing armed */
		} else if (c->self_disarm && !ev->limit_pending) {
			/* event_limit += 1 and enable: the sample whose program
			 * run returns non-zero (the one that submits the record)
			 * disables the event. */
			if (ioctl(ev->perf_fd, PERF_EVENT_IOC_REFRESH, 1) != 0)
				err = -errno;
			else
				ev->limit_pending = true;
		} else if (ioctl(ev->perf_fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
			err = -errno;
		}
	}

	deadline = arm_ns + (__u64)timeout_us * 1000ull;
	spin_end = stb_now_ns() + (__u64)c->spin_us * 1000ull;
	while (!err) {
		n = ring_buffer__consume(c->rb);
		polls++;
		if (n < 0) {
			err = n;
			break;
		}
		if (c->got)
			break;
		now = stb_now_ns();
		if (now >= deadline)
			break;
		if (now < spin_end) {
			for (int i = 0; i < 64; i++)
				relax();
		} else {
			__u64 wait = deadline - now < STB_BPF_PROG_SLEEP_NS ? deadline - now
									  : STB_BPF_PROG_SLEEP_NS;
			struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)wait };

			nanosleep(&ts, NULL);
		}
	}

	/* Disarm. A self-disarmed event that produced its record is off
	 * already (or about to be): skip the DISABLE and its IPI now, the next
	 * arm does it. Otherwise disable first (it returns once no program run
	 * on this event is in progress), withdraw the request, then read what
	 * was submitted before the disable. */
	if (c->got && c->self_disarm && !c->on_demand) {
		ev->disable_pending = true;
	} else if (ev->perf_fd >= 0 && ioctl(ev->perf_fd, PERF_EVENT_IOC_DISABLE, 0) != 0 && !err) {
		err = -errno;
	}
	__atomic_store_n(&c->skel->bss->stb_req_tag[worker], 0, __ATOMIC_RELEASE);
	n = ring_buffer__consume(c->rb);
	polls++;
	if (n < 0 && !err)
		err = n;
	if (c->got) {
		/* The program returned non-zero: event_limit went back to 0. */
		ev->limit_pending = false;
		err = 0;
	} else if (!err || err == -ESRCH) {
		err = thread_alive(c->pid, ev->tid) ? -ETIMEDOUT : -ESRCH;
	}
	if (c->on_demand)
		event_close(ev);
	if (timing) {
		timing->arm_ns = arm_ns;
		timing->seen_ns = c->got ? c->seen_ns : 0;
		timing->polls = polls;
	}
	c->want_out = NULL;
	c->want_tag = 0;
	return err;
}

int stb_bpf_prog_request(struct stb_bpf_prog *c, unsigned int worker, __u64 id,
		     unsigned int timeout_us, struct stb_record *out,
		     struct stb_bpf_prog_timing *timing)
{
	return request(c, worker, id, false, timeout_us, out, timing);
}

int stb_bpf_prog_request_thread(struct stb_bpf_prog *c, unsigned int slot, pid_t tid,
				unsigned int timeout_us, struct stb_record *out,
				struct stb_bpf_prog_timing *timing)
{
	if (tid <= 0)
		return -EINVAL;
	return request(c, slot, (__u64)tid, true, timeout_us, out, timing);
}

static int sample_ioctl(struct stb_bpf_prog *c, unsigned long req)
{
	int err = 0;

	for (unsigned int w = 0; w < STB_ABI_MAX_WORKERS; w++) {
		if (c->workers[w].perf_fd < 0)
			continue;
		if (ioctl(c->workers[w].perf_fd, req, 0) != 0 && !err)
			err = -errno;
	}
	return err;
}

int stb_bpf_prog_sample_start(struct stb_bpf_prog *c)
{
	if (!c || c->mode != STB_RECORD_MODE_SAMPLE)
		return -EINVAL;
	c->sampling = true;
	return sample_ioctl(c, PERF_EVENT_IOC_ENABLE);
}

int stb_bpf_prog_sample_stop(struct stb_bpf_prog *c)
{
	if (!c || c->mode != STB_RECORD_MODE_SAMPLE)
		return -EINVAL;
	c->sampling = false;
	return sample_ioctl(c, PERF_EVENT_IOC_DISABLE);
}

int stb_bpf_prog_sample_poll(struct stb_bpf_prog *c, stb_bpf_prog_sample_fn fn, void *arg)
{
	int n;

	if (!c || !fn || c->mode != STB_RECORD_MODE_SAMPLE)
		return -EINVAL;
	c->sample_fn = fn;
	c->sample_arg = arg;
	n = ring_buffer__consume(c->rb);
	c->sample_fn = NULL;
	c->sample_arg = NULL;
	return n;
}

int stb_bpf_prog_stats_enable(struct stb_bpf_prog *c)
{
	int fd;

	if (!c)
		return -EINVAL;
	if (c->stats_fd >= 0)
		return 0;
	fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (fd < 0)
		return -errno;
	c->stats_fd = fd;
	return 0;
}

int stb_bpf_prog_stats_read(const struct stb_bpf_prog *c, struct stb_bpf_prog_stats *out)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	const struct stb_record_bpf__bss *bss;

	if (!c || !out)
		return -EINVAL;
	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(bpf_program__fd(c->skel->progs.stb_record_prog), &info,
				   &len) != 0)
		return -errno;
	bss = c->skel->bss;
	memset(out, 0, sizeof(*out));
	out->run_time_ns = info.run_time_ns;
	out->run_cnt = info.run_cnt;
	out->recursion_misses = info.recursion_misses;
	out->runs = __atomic_load_n(&bss->stb_cnt_runs, __ATOMIC_RELAXED);
	out->idle = __atomic_load_n(&bss->stb_cnt_idle, __ATOMIC_RELAXED);
	out->mismatch = __atomic_load_n(&bss->stb_cnt_mismatch, __ATOMIC_RELAXED);
	out->records = __atomic_load_n(&bss->stb_cnt_records, __ATOMIC_RELAXED);
	out->rb_full = __atomic_load_n(&bss->stb_cnt_rb_full, __ATOMIC_RELAXED);
	out->read_err = __atomic_load_n(&bss->stb_cnt_read_err, __ATOMIC_RELAXED);
	out->stale = c->stale;
	return 0;
}

int stb_bpf_prog_dup_target_fd(pid_t pid, int target_fd)
{
	int pidfd, fd, err;

	if (pid <= 0 || target_fd < 0)
		return -EINVAL;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -errno;
	fd = (int)syscall(SYS_pidfd_getfd, pidfd, target_fd, 0);
	err = fd < 0 ? -errno : fd;
	close(pidfd);
	return err;
}

static bool stb_bpf_prog_verbose;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (!stb_bpf_prog_verbose || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

void stb_bpf_prog_log(bool verbose)
{
	stb_bpf_prog_verbose = verbose;
	libbpf_set_print(libbpf_print);
}

const char *stb_bpf_prog_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EPERM:
		return "operation not permitted: loading BPF and opening perf events on "
		       "another process needs root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN, "
		       "which includes both) and ptrace access to the target";
	case -EACCES:
		return "permission denied: missing CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), "
		       "or the verifier rejected the program (-v shows libbpf's log)";
	case -ESRCH:
	case -ENOENT:
		return "the target process or worker thread is gone";
	case -ETIMEDOUT:
		return "the task was not running on that worker during the window (blocked, "
		       "suspended, or on another worker)";
	case -ENODEV:
		return "no perf event for that worker (stb_bpf_prog_set_worker/sync_workers)";
	case -EPROTO:
		return "the target's task table is missing, not initialised yet, or of "
		       "another ABI version";
	case -EINVAL:
		return "invalid argument";
	case -ENOMEM:
		return "out of memory";
	case -EOPNOTSUPP:
		return "not supported by this kernel (needs BPF perf_event links, "
		       "mmapable global data, ring buffers)";
	default:
		return "system error (see errno)";
	}
}
