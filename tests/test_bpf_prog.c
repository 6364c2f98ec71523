/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the BPF capture program and loader/bpf_prog.c against
 * bpf_target_helper, a process with a hand-built task table (BPF map and memfd
 * backings) and a worker spinning in known function chains: record contents,
 * stack copy, kernel-mode samples, timeouts, sampling mode, no signals.
 * Exits 77 when BPF or perf events are unavailable, unless STB_REQUIRE_BPF=1.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/capability.h>

#include "bpf_target_helper.h"
#include "bpf_prog.h"

#define TAKE_TIMEOUT_US 500000u  /* a running task is captured within ~100 us */
#define MISS_TIMEOUT_US 20000u
#define NTIMED 50

struct tgt {
	pid_t pid;
	int to_fd;   /* helper's stdin */
	int from_fd; /* helper's stdout */
	struct stb_helper_info info;
};

static char helper_path[PATH_MAX];

static int read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	unsigned char *p = buf;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int tgt_start(struct tgt *t, const char *backing)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 };
	int err;

	memset(t, 0, sizeof(*t));
	t->to_fd = t->from_fd = -1;
	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		err = -errno;
		goto cleanup;
	}
	t->pid = fork();
	if (t->pid < 0) {
		err = -errno;
		goto cleanup;
	}
	if (t->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execl(helper_path, helper_path, backing, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	t->to_fd = in[1];
	t->from_fd = out[0];
	err = read_full(t->from_fd, &t->info, sizeof(t->info), 10000);
	if (!err && t->info.magic != STB_HELPER_MAGIC)
		err = -EPROTO;
	if (err) {
		close(t->to_fd);
		close(t->from_fd);
		waitpid(t->pid, NULL, 0);
		t->pid = 0;
	}
	return err;

cleanup:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (out[i] >= 0)
			close(out[i]);
	}
	return err;
}

static int tgt_cmd(struct tgt *t, int cmd, struct stb_helper_reply *reply)
{
	unsigned char c = (unsigned char)cmd;
	int err;

	if (write(t->to_fd, &c, 1) != 1)
		return -errno;
	err = read_full(t->from_fd, reply, sizeof(*reply), 10000);
	if (!err && (reply->magic != STB_HELPER_MAGIC || reply->cmd != (__u32)cmd))
		err = -EPROTO;
	return err;
}

/* Stops the helper; *signals = signals it received. 0 or -errno. */
static int tgt_quit(struct tgt *t, __u64 *signals)
{
	struct stb_helper_reply reply;
	int status = 0, err;

	err = tgt_cmd(t, STB_HELPER_CMD_QUIT, &reply);
	if (!err)
		*signals = reply.signals;
	close(t->to_fd);
	close(t->from_fd);
	if (waitpid(t->pid, &status, 0) != t->pid)
		return -errno;
	if (!err && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		err = -ECHILD;
	t->pid = 0;
	return err;
}

static bool in_fn(const struct stb_helper_info *info, int fn, __u64 addr)
{
	return addr >= info->fn[fn][0] && addr < info->fn[fn][1];
}

/* Does the fp chain hold a return address into fn? (frames[0] is the ip) */
static bool frames_have(const struct stb_record *r, const struct stb_helper_info *info,
			int fn)
{
	for (__u32 i = 1; i < r->nframes && i < STB_RECORD_MAX_FRAMES; i++)
		if (in_fn(info, fn, r->frames[i]))
			return true;
	return false;
}

static __u64 stack_word(const struct stb_record *r, __u64 addr)
{
	__u64 v;

	assert_true(addr >= r->regs.sp && addr + 8 <= r->regs.sp + r->stack_size);
	memcpy(&v, r->stack + (addr - r->regs.sp), 8);
	return v;
}

/* Checks that hold for every capture of the running task. */
static void check_common(const struct tgt *t, const struct stb_record *r)
{
	assert_int_equal(r->kind, STB_RECORD_MODE_REQUEST);
	assert_true(r->tag != 0);
	assert_true(r->id == STB_HELPER_ID_RUNNING);
	assert_int_equal(r->worker, 0);
	assert_int_equal(r->tid, t->info.tid);
	assert_true(r->flags & STB_RECORD_F_RUNNING);
	assert_int_equal(STB_ABI_STATE(r->word), STB_TASK_RUNNING);
	assert_true(r->stack_lo == t->info.stack_lo && r->stack_hi == t->info.stack_hi);
	assert_true(r->regs.sp >= t->info.stack_lo && r->regs.sp < t->info.stack_hi);
	assert_true(r->regs.bp >= r->regs.sp && r->regs.bp < t->info.stack_hi);
	assert_int_equal(r->frames_err, 0);
	assert_true(r->nframes >= 3);
	assert_true(r->frames[0] == r->regs.ip);
	assert_true(r->stack_size > 0 && r->stack_size <= STB_RECORD_STACK_MAX);
	assert_true(r->regs.sp + r->stack_size <= r->stack_hi);
	assert_true(r->time_ns > 0 && r->prog_ns > 0);
	/* The copy starts exactly at sp: the return address saved above the
	 * innermost frame's rbp is the chain's first return address. */
	if (r->regs.bp + 16 <= r->regs.sp + r->stack_size)
		assert_true(stack_word(r, r->regs.bp + 8) == r->frames[1]);
}

/* A capture in the user spin chain: ip in spin_c, callers in the chain, the
 * copy as deep as the limit allows, spin_a's pattern copied intact. */
static void check_user(const struct tgt *t, const struct stb_record *r,
		       const struct stb_helper_reply *chain)
{
	unsigned int matched = 0;

	check_common(t, r);
	/* STB_RECORD_F_KERNEL may be set: the sample can hit an interrupt
	 * or fault taken in spin_c; the user registers are spin_c's anyway. */
	assert_true(in_fn(&t->info, STB_HELPER_FN_SPIN_C, r->regs.ip));
	assert_true(frames_have(r, &t->info, STB_HELPER_FN_SPIN_B));
	assert_true(frames_have(r, &t->info, STB_HELPER_FN_SPIN_A));
	/* The stack above sp is deeper than one copy (40 KiB pattern). */
	assert_true(r->stack_size >= STB_RECORD_STACK_MAX - (STB_RECORD_PAGE_SIZE - 1));
	assert_true(r->stack_size >= 8192);
	assert_true(r->flags & STB_RECORD_F_STACK_LIMIT);
	assert_false(r->flags & STB_RECORD_F_STACK_FAULT);
	for (__u64 i = 0; i < chain->pattern_len / 8; i++) {
		__u64 a = chain->pattern_addr + 8 * i;

		if (a < r->regs.sp || a + 8 > r->regs.sp + r->stack_size)
			continue;
		assert_true(stack_word(r, a) == STB_HELPER_PATTERN(i));
		matched++;
	}
	/* The pattern covers all but the first page or so of the copy. */
	assert_true(matched * 8 >= r->stack_size - 2 * STB_RECORD_PAGE_SIZE);
}

static int disarm_for_kernel(void)
{
	struct utsname u;
	unsigned int major = 0, minor = 0;

	if (uname(&u) == 0 && sscanf(u.release, "%u.%u", &major, &minor) == 2 &&
	    (major > 6 || (major == 6 && minor >= 10)))
		return STB_BPF_PROG_DISARM_SELF;
	return STB_BPF_PROG_DISARM_USER;
}

static struct stb_bpf_prog *open_capture(const struct tgt *t, __u32 mode, __u32 disarm,
					bool on_demand, int *map_fd)
{
	struct stb_bpf_prog_opts o;
	struct stb_bpf_prog *c;

	memset(&o, 0, sizeof(o));
	o.mode = mode;
	o.backing = t->info.backing;
	o.disarm = disarm;
	o.on_demand = on_demand;
	*map_fd = -1;
	if (t->info.backing == STB_ABI_BACKING_BPF_MAP) {
		*map_fd = stb_bpf_prog_dup_target_fd(t->pid, t->info.table_fd);
		assert_true(*map_fd >= 0);
		o.table_fd = *map_fd;
	} else {
		o.table_addr = t->info.table_addr;
	}
	if (mode == STB_RECORD_MODE_SAMPLE)
		o.period_ns = 1000000;
	c = stb_bpf_prog_open(t->pid, &o);
	if (!c)
		print_error("stb_bpf_prog_open: %s (%s)\n", strerror(errno),
			    stb_bpf_prog_strerror(-errno));
	assert_non_null(c);
	return c;
}

static int cmp_u64(const void *a, const void *b)
{
	__u64 x = *(const __u64 *)a, y = *(const __u64 *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, __u64 *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	print_message("    %-34s median %7.2f us  p90 %7.2f us  max %7.2f us\n", what,
		      (double)v[n / 2] / 1000.0, (double)v[n * 9 / 10] / 1000.0,
		      (double)v[n - 1] / 1000.0);
}

/* Requests for id on worker 0 time out without a record, although samples
 * hit the worker (retried while the loaded machine gives the worker no CPU
 * time within a window). */
static void expect_miss(struct stb_bpf_prog *c, __u64 id, struct stb_record *r)
{
	struct stb_bpf_prog_stats s0, s1;
	struct stb_bpf_prog_timing tm;

	assert_int_equal(stb_bpf_prog_stats_read(c, &s0), 0);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(stb_bpf_prog_request(c, 0, id, MISS_TIMEOUT_US, r, &tm), -ETIMEDOUT);
		assert_true(tm.seen_ns == 0);
		assert_int_equal(stb_bpf_prog_stats_read(c, &s1), 0);
		assert_true(s1.records == s0.records);
		if (s1.mismatch > s0.mismatch)
			return;
	}
	fail_msg("no sample of worker 0 in 100 windows of %u us", MISS_TIMEOUT_US);
}

/* The whole capture scenario against one helper backing. */
static void run_capture(const char *backing, __u32 disarm, bool on_demand)
{
	struct stb_record *r = malloc(sizeof(*r));
	struct stb_record *blank = malloc(sizeof(*blank));
	struct stb_bpf_prog_stats s0, s1;
	struct stb_bpf_prog_timing tm;
	struct stb_helper_reply chain, rep;
	__u64 arm[NTIMED], prog[NTIMED], seen[NTIMED];
	__u64 signals = 1;
	struct tgt t;
	struct stb_bpf_prog *c;
	int map_fd, err, found;

	assert_non_null(r);
	assert_non_null(blank);
	assert_int_equal(tgt_start(&t, backing), 0);
	c = open_capture(&t, STB_RECORD_MODE_REQUEST, disarm, on_demand, &map_fd);
	assert_int_equal(stb_bpf_prog_stats_enable(c), 0);
	assert_int_equal(stb_bpf_prog_sync_workers(c), 1);
	assert_int_equal(stb_bpf_prog_stats_read(c, &s0), 0);

	/* Idle: nothing armed, the program never runs. */
	usleep(20000);
	assert_int_equal(stb_bpf_prog_stats_read(c, &s1), 0);
	assert_true(s1.runs == s0.runs);

	/* The running task, in the user chain. */
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_USER, &chain), 0);
	assert_true(chain.pattern_addr != 0);
	for (int i = 0; i < NTIMED; i++) {
		err = stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, TAKE_TIMEOUT_US, r, &tm);
		if (err)
			print_error("take: %s\n", stb_bpf_prog_strerror(err));
		assert_int_equal(err, 0);
		check_user(&t, r, &chain);
		assert_true(r->time_ns >= tm.arm_ns && tm.seen_ns >= r->time_ns);
		arm[i] = r->time_ns - tm.arm_ns;
		seen[i] = tm.seen_ns - tm.arm_ns;
		prog[i] = r->prog_ns;
	}
	assert_int_equal(stb_bpf_prog_stats_read(c, &s1), 0);
	print_message("  [%s, disarm %s%s] %d captures of a spinning task, stack copy %u bytes:\n",
		      backing, disarm == STB_BPF_PROG_DISARM_SELF ? "self" : "user",
		      on_demand ? ", events on demand" : "", NTIMED, r->stack_size);
	report("arm -> sample (program entry)", arm, NTIMED);
	report("arm -> record read", seen, NTIMED);
	report("program time (record's prog_ns)", prog, NTIMED);
	if (s1.run_cnt > s0.run_cnt)
		print_message("    bpf_stats: %llu runs, %.2f us per run\n",
			      (unsigned long long)(s1.run_cnt - s0.run_cnt),
			      (double)(s1.run_time_ns - s0.run_time_ns) /
				      (double)(s1.run_cnt - s0.run_cnt) / 1000.0);
	assert_true(s1.records - s0.records == NTIMED);
	assert_int_equal(s1.rb_full, 0);
	assert_int_equal(s1.read_err, 0);
	assert_int_equal(s1.stale, 0);
	/* Self-disarm: no sample ever finds the worker without a request. (On
	 * demand, the event runs before its limit is set: a loaded machine
	 * can put a sample there.) */
	if (disarm == STB_BPF_PROG_DISARM_SELF && !on_demand)
		assert_true(s1.idle == 0);

	/* Another id (SUSPENDED, not current on worker 0): no record. */
	memset(blank, 0x5a, sizeof(*blank));
	memcpy(r, blank, sizeof(*r));
	expect_miss(c, STB_HELPER_ID_SUSPENDED, r);
	assert_memory_equal(r, blank, sizeof(*r));

	/* The right id while its state is not RUNNING: no record. */
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_READY, &rep), 0);
	expect_miss(c, STB_HELPER_ID_RUNNING, r);
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_RUNNING, &rep), 0);
	assert_int_equal(stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, TAKE_TIMEOUT_US, r, NULL), 0);
	check_user(&t, r, &chain);

	/* Kernel mode: the worker spins in read(2); the user registers come
	 * from its entry frame. */
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_KERNEL, &rep), 0);
	found = 0;
	for (int i = 0; i < 50 && !found; i++) {
		assert_int_equal(stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, TAKE_TIMEOUT_US, r,
						  NULL), 0);
		check_common(&t, r);
		assert_true(in_fn(&t.info, STB_HELPER_FN_KSPIN_C, r->regs.ip));
		assert_true(frames_have(r, &t.info, STB_HELPER_FN_KSPIN_B));
		assert_true(frames_have(r, &t.info, STB_HELPER_FN_KSPIN_A));
		found = (r->flags & STB_RECORD_F_KERNEL) != 0;
	}
	assert_true(found);

	/* A non-resident page above sp: the copy stops right there. */
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_HOLE, &rep), 0);
	assert_true(rep.hole_lo != 0);
	assert_int_equal(stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, TAKE_TIMEOUT_US, r, NULL), 0);
	check_common(&t, r);
	assert_true(in_fn(&t.info, STB_HELPER_FN_SPIN_C, r->regs.ip));
	assert_true(frames_have(r, &t.info, STB_HELPER_FN_SPIN_B));
	assert_true(frames_have(r, &t.info, STB_HELPER_FN_HOLE_A));
	assert_true(r->flags & STB_RECORD_F_STACK_FAULT);
	assert_int_equal(r->stack_err, -EFAULT);
	assert_true(rep.hole_lo > r->regs.sp);
	assert_true(r->stack_size == rep.hole_lo - r->regs.sp);

	/* Errors. */
	assert_int_equal(stb_bpf_prog_request(c, 1, STB_HELPER_ID_RUNNING, 1000, r, NULL), -ENODEV);
	assert_int_equal(stb_bpf_prog_request(c, 0, 0, 1000, r, NULL), -EINVAL);
	assert_int_equal(stb_bpf_prog_set_worker(c, 1, 0x3ffffff0), -ESRCH);

	/* The target never saw a signal. */
	assert_int_equal(tgt_quit(&t, &signals), 0);
	assert_true(signals == 0);
	/* Its worker thread is gone now. */
	assert_int_equal(stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, 2000, r, NULL), -ESRCH);

	stb_bpf_prog_close(c);
	if (map_fd >= 0)
		close(map_fd);
	free(r);
	free(blank);
}

static void test_capture_map(void **state)
{
	(void)state;
	run_capture("map", (__u32)disarm_for_kernel(), false);
}

static void test_capture_memfd(void **state)
{
	(void)state;
	run_capture("memfd", (__u32)disarm_for_kernel(), false);
}

static void test_capture_user_disarm(void **state)
{
	(void)state;
	run_capture("memfd", STB_BPF_PROG_DISARM_USER, false);
}

static void test_capture_on_demand(void **state)
{
	(void)state;
	run_capture("map", (__u32)disarm_for_kernel(), true);
}

struct sample_count {
	const struct tgt *t;
	bool with_stack;
	unsigned int n, in_spin_c, bad;
};

static int on_sample(void *arg, const struct stb_record *r, size_t size)
{
	struct sample_count *sc = arg;
	const struct stb_helper_info *info = &sc->t->info;
	bool ok;

	ok = r->kind == STB_RECORD_MODE_SAMPLE && r->tag == 0 && r->worker == 0 &&
	     r->tid == (__u32)info->tid && r->id == STB_HELPER_ID_RUNNING &&
	     (r->flags & STB_RECORD_F_RUNNING) && r->nframes >= 1 && r->frames[0] == r->regs.ip;
	if (sc->with_stack)
		ok = ok && size == sizeof(*r) && !(r->flags & STB_RECORD_F_NO_STACK) &&
		     r->stack_size > 0 && r->regs.sp >= info->stack_lo && r->regs.sp < info->stack_hi;
	else
		ok = ok && size == STB_RECORD_HDR_SIZE && (r->flags & STB_RECORD_F_NO_STACK) &&
		     r->stack_size == 0;
	sc->n++;
	sc->bad += !ok;
	sc->in_spin_c += in_fn(info, STB_HELPER_FN_SPIN_C, r->regs.ip) &&
			 frames_have(r, info, STB_HELPER_FN_SPIN_B);
	return 0;
}

static void run_sample(const char *backing, bool with_stack)
{
	struct sample_count sc = { 0 };
	struct stb_bpf_prog_opts o;
	struct stb_helper_reply chain;
	struct stb_bpf_prog *c;
	__u64 signals = 1;
	struct tgt t;
	int map_fd = -1, n;

	assert_int_equal(tgt_start(&t, backing), 0);
	memset(&o, 0, sizeof(o));
	o.mode = STB_RECORD_MODE_SAMPLE;
	o.backing = t.info.backing;
	o.period_ns = 1000000;
	o.sample_stack = with_stack;
	if (t.info.backing == STB_ABI_BACKING_BPF_MAP) {
		map_fd = stb_bpf_prog_dup_target_fd(t.pid, t.info.table_fd);
		assert_true(map_fd >= 0);
		o.table_fd = map_fd;
	} else {
		o.table_addr = t.info.table_addr;
	}
	c = stb_bpf_prog_open(t.pid, &o);
	assert_non_null(c);
	assert_int_equal(stb_bpf_prog_sync_workers(c), 1);
	assert_int_equal(tgt_cmd(&t, STB_HELPER_CMD_USER, &chain), 0);
	sc.t = &t;
	sc.with_stack = with_stack;
	assert_int_equal(stb_bpf_prog_sample_start(c), 0);
	/* ~100 ms at 1 kHz, longer when the machine is loaded (cpu-clock only
	 * ticks while the worker runs). */
	for (int i = 0; i < 10 || (sc.n < 20 && i < 500); i++) {
		usleep(10000);
		n = stb_bpf_prog_sample_poll(c, on_sample, &sc);
		assert_true(n >= 0);
	}
	assert_int_equal(stb_bpf_prog_sample_stop(c), 0);
	n = stb_bpf_prog_sample_poll(c, on_sample, &sc);
	assert_true(n >= 0);
	print_message("  [%s sample%s] %u samples, %u in spin_c\n", backing,
		      with_stack ? "+stack" : "", sc.n, sc.in_spin_c);
	assert_true(sc.n >= 20);
	assert_int_equal(sc.bad, 0);
	assert_true(sc.in_spin_c * 10 >= sc.n * 9);
	/* Stopped: no more records. */
	usleep(20000);
	assert_int_equal(stb_bpf_prog_sample_poll(c, on_sample, &sc), 0);
	/* Wrong mode. */
	assert_int_equal(stb_bpf_prog_request(c, 0, STB_HELPER_ID_RUNNING, 1000, NULL, NULL), -EINVAL);

	assert_int_equal(tgt_quit(&t, &signals), 0);
	assert_true(signals == 0);
	stb_bpf_prog_close(c);
	if (map_fd >= 0)
		close(map_fd);
}

static void test_sample_map(void **state)
{
	(void)state;
	run_sample("map", false);
}

static void test_sample_memfd_stack(void **state)
{
	(void)state;
	run_sample("memfd", true);
}

static void test_open_errors(void **state)
{
	struct stb_bpf_prog_opts o;
	__u64 signals = 1;
	struct tgt t;

	(void)state;
	assert_int_equal(tgt_start(&t, "memfd"), 0);
	memset(&o, 0, sizeof(o));
	o.backing = STB_ABI_BACKING_MEMFD;
	/* Not the table's address: header check fails. */
	o.table_addr = t.info.table_addr + 4096;
	assert_null(stb_bpf_prog_open(t.pid, &o));
	assert_int_equal(errno, EPROTO);
	o.table_addr = 0;
	assert_null(stb_bpf_prog_open(t.pid, &o));
	assert_int_equal(errno, EINVAL);
	o.backing = STB_ABI_BACKING_BPF_MAP;
	o.table_fd = -1;
	assert_null(stb_bpf_prog_open(t.pid, &o));
	assert_int_equal(errno, EINVAL);
	/* A fd that is not a BPF map. */
	o.table_fd = STDIN_FILENO;
	assert_null(stb_bpf_prog_open(t.pid, &o));
	assert_true(errno == EINVAL || errno == EBADF);
	assert_int_equal(stb_bpf_prog_dup_target_fd(t.pid, 1000), -EBADF);
	stb_bpf_prog_close(NULL);
	assert_int_equal(tgt_quit(&t, &signals), 0);
	assert_true(signals == 0);
}

/* Does this process hold CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON? */
static bool privileged(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	__u64 eff;

	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) != 0)
		return false;
	eff = (__u64)data[0].effective | ((__u64)data[1].effective << 32);
	return (eff >> CAP_SYS_ADMIN & 1) || ((eff >> 39 & 1) && (eff >> 38 & 1)); /* BPF, PERFMON */
}

/* Can BPF be loaded and a perf event attached here? 0 or -errno. */
static int probe(void)
{
	struct stb_bpf_prog_opts o;
	struct stb_bpf_prog *c;
	__u64 signals;
	struct tgt t;
	int err;

	err = tgt_start(&t, "memfd");
	if (err) {
		fprintf(stderr, "test_bpf_prog: cannot start %s: %s\n", helper_path,
			strerror(-err));
		exit(1);
	}
	memset(&o, 0, sizeof(o));
	o.backing = STB_ABI_BACKING_MEMFD;
	o.table_addr = t.info.table_addr;
	c = stb_bpf_prog_open(t.pid, &o);
	if (!c)
		err = -errno;
	else
		err = stb_bpf_prog_set_worker(c, 0, t.info.tid);
	stb_bpf_prog_close(c);
	tgt_quit(&t, &signals);
	return err;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capture_map),
		cmocka_unit_test(test_capture_memfd),
		cmocka_unit_test(test_capture_user_disarm),
		cmocka_unit_test(test_capture_on_demand),
		cmocka_unit_test(test_sample_map),
		cmocka_unit_test(test_sample_memfd_stack),
		cmocka_unit_test(test_open_errors),
	};
	const char *env = getenv("STB_BPF_TARGET_HELPER");
	const char *req = getenv("STB_REQUIRE_BPF");
	bool require = req && strcmp(req, "1") == 0;
	int err;

	if (env && *env) {
		snprintf(helper_path, sizeof(helper_path), "%s", env);
	} else {
		ssize_t n = readlink("/proc/self/exe", helper_path, sizeof(helper_path) - 1);
		char *slash;

		if (n < 0) {
			perror("readlink /proc/self/exe");
			return 1;
		}
		helper_path[n] = '\0';
		slash = strrchr(helper_path, '/');
		snprintf(slash + 1, sizeof(helper_path) - (size_t)(slash + 1 - helper_path),
			 "bpf_target_helper");
	}
	err = probe();
	if (err) {
		fprintf(stderr, "test_bpf_prog: BPF capture unavailable: %s (%s)\n",
			strerror(-err), stb_bpf_prog_strerror(err));
		/* With the privileges, a failure is a bug (e.g. the verifier
		 * rejected the program), not a reason to skip. */
		if (privileged()) {
			fprintf(stderr, "test_bpf_prog: privileged, so this is a failure\n");
			return 1;
		}
		if (require) {
			fprintf(stderr, "test_bpf_prog: STB_REQUIRE_BPF=1: failing\n");
			return 1;
		}
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
