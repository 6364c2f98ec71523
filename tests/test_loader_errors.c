/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's errors: usage, no such process (and what -o then leaves:
 * whatever was there), not a stb runtime, another ABI, and the fallbacks without BPF, perf events or ptrace access (each with
 * its message and exit status). Exits 77 unprivileged.
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "loader_checks.h"

/* ---- bad input ---- */

static void test_usage_errors(void **state)
{
	(void)state;
	static const struct {
		const char *args[12];
		const char *msg;
	} cases[] = {
		{{NULL}, "--pid or --core is required"},
		{{"--bthread", "4294967296", NULL}, "--pid or --core is required"},
		{{"--pid", "1", "--core", "core", NULL}, "--pid and --core exclude each other"},
		{{"--pid", "1", "--exe", "a.out", NULL}, "--exe and --sysroot need --core"},
		{{"--sysroot", "/", NULL}, "--pid or --core is required"},
		{{"--core", "core", "--profile", NULL}, "--profile samples a running process"},
		{{"--core", NULL}, "needs a value"},
		{{"--pid", "abc", NULL}, "--pid: 'abc'"},
		{{"--pid", "0", NULL}, "--pid: '0'"},
		{{"--pid", "-5", NULL}, "--pid: '-5'"},
		{{"--pid", "99999999999", NULL}, "--pid: '99999999999'"},
		{{"--pid", "12x", NULL}, "--pid: '12x'"},
		{{"--pid", "1", "--bthread", "-7", NULL}, "--bthread: '-7'"},
		{{"--pid", "1", "--bthread", "x1", NULL}, "--bthread: 'x1'"},
		{{"--pid", "1", "--bthread", "18446744073709551616", NULL},
		 "--bthread: '18446744073709551616'"},
		{{"--pid", "1", "--leaks", "--group", NULL}, "--group and --stuck do not apply"},
		{{"--pid", "1", "--leaks", "--bthread", "4294967296", NULL}, "--leaks views every"},
		{{"--pid", "1", "--leaks", "--stuck", "5", NULL}, "--leaks views every"},
		{{"--pid", "1", "--leaks", "--profile", NULL}, "--leaks views every"},
		{{"--pid", "1", "--leaks", "--format", "pprof", NULL}, "--leaks writes text or json"},
		{{"--pid", "1", "--leaks", "-o", "x.pb.gz", NULL}, "--leaks writes text or json"},
		{{"--pid", "1", "--max-depth", "0", NULL}, "--max-depth: '0'"},
		{{"--pid", "1", "--max-depth", "5000", NULL}, "--max-depth: '5000'"},
		{{"--pid", "1", "--timeout", "0", NULL}, "--timeout: '0'"},
		{{"--pid", "1", "--timeout", "1s", NULL}, "--timeout: '1s'"},
		{{"--pid", "1", "--state", "sleeping", NULL}, "unknown state 'sleeping'"},
		{{"--pid", "1", "--frob", NULL}, "unknown option --frob"},
		{{"--pid", "1", "-z", NULL}, "unknown option"},
		{{"--pid", "1", "--format", "xml", NULL}, "--format: 'xml'"},
		{{"--pid", "1", "--format", NULL}, "needs a value"},
		{{"--pid", "1", "extra", NULL}, "unexpected argument 'extra'"},
		{{"--pid", "1", "--all", "--bthread", "4294967296", NULL}, "exclude each other"},
		{{"--pid", "1", "--deadline", "0", NULL}, "--deadline: '0'"},
		{{"--pid", "1", "--deadline", "1.5s", NULL}, "--deadline: '1.5s'"},
		{{"--pid", "1", "--deadline", "25h", NULL}, "--deadline: '25h'"},
		{{"--pid", "1", "--profile", "--duration", "10s", "--deadline", "5s", NULL},
		 "--deadline must be longer than --duration"},
		{{"--pid", "1", "--pid", "2", NULL}, "--pid given twice"},
		{{"--pid", "1", "--every", "10s", NULL}, "--every needs --out-dir"},
		{{"--pid", "1", "--keep", "5", NULL}, "--out-dir and --keep need --every"},
		{{"--pid", "1", "--every", "10s", "--out-dir", "/tmp", "--keep", "0", NULL},
		 "--keep: '0'"},
		{{"--pid", "1", "--every", "10s", "--out-dir", "/tmp", "-o", "/tmp/x", NULL},
		 "--every writes its files into --out-dir"},
		{{"--pid", "1", "--out-dir", "", "--every", "1s", NULL}, "--out-dir: an empty path"},
		{{"--pid", "1", "--format", "svg", NULL}, "--format: 'svg'"},
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[14];
		int n = 0;
		argv[n++] = loader_path;
		for (int k = 0; cases[i].args[k]; k++)
			argv[n++] = (char *)cases[i].args[k];
		argv[n] = NULL;
		struct ts_proc p;
		assert_int_equal(ts_proc_start(&p, argv, NULL, NULL, NULL), 0);
		assert_int_equal(ts_proc_wait(&p, LOADER_TIMEOUT_MS), 0);
		int code = ts_proc_exit_code(&p);
		if (code != 64 || !strstr(p.err.p, cases[i].msg) || p.out.len != 0 ||
		    sanitizer_report(p.err.p))
			fail_msg("case %u (%s ...): exit %d, stderr '%s' (want 64 and '%s')", i,
				 cases[i].args[0] ? cases[i].args[0] : "no args", code, p.err.p,
				 cases[i].msg);
		ts_proc_free(&p);
	}
	struct run r;
	run_loader(&r, "--help", NULL);
	expect_exit(&r, 0, NULL);
	assert_non_null(strstr(r.out, "Usage: stb-bpf-loader --pid PID"));
	assert_non_null(strstr(r.out, "--deadline"));
	assert_non_null(strstr(r.out, "--every"));
	run_free(&r);
	char want[80];
	snprintf(want, sizeof(want), "(reads stb task tables of ABI version %u)", STB_ABI_VERSION);
	for (int v = 0; v < 2; v++) {
		run_loader(&r, v ? "-V" : "--version", NULL);
		expect_exit(&r, 0, NULL);
		if (strncmp(r.out, "stb-bpf-loader ", 15) != 0 || !strstr(r.out, want))
			fail_msg("--version printed '%s' (want '%s')", r.out, want);
		run_free(&r);
	}
}

/* Durations in hours are accepted up to the 24 hours the messages promise:
 * the run goes on to the target (here not a stb runtime), never a usage error. */
static void test_duration_hours(void **state)
{
	(void)state;
	char *argv[] = {"sleep", "60", NULL};
	struct ts_proc s;
	assert_int_equal(ts_proc_start(&s, argv, NULL, NULL, NULL), 0);
	ts_sleep_ms(50);
	char p[32];
	snprintf(p, sizeof(p), "%d", (int)s.pid);
	struct run r;
	run_loader(&r, "--pid", p, "--deadline", "24h", NULL);
	expect_exit(&r, 1, "not a stb runtime");
	run_free(&r);
	run_loader_all_frames = false; /* a profile keeps every frame anyway */
	run_loader(&r, "--pid", p, "--profile", "--duration", "1h", "--deadline", "2h", NULL);
	run_loader_all_frames = true;
	expect_exit(&r, 1, "not a stb runtime");
	run_free(&r);
	ts_proc_free(&s);
}

/* -o is opened before anything is traced: an output that cannot be written
 * fails at once, without touching the target's tasks. */
static void test_output_first(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	uint64_t t0 = ts_now_ns();
	run_loader(&r, "--pid", pid_arg(&tg), "-v", "-o", "/nonexistent-dir/stacks.txt", NULL);
	expect_exit(&r, 1, "cannot write /nonexistent-dir/stacks.txt");
	assert_null(strstr(r.err, "tasks traced"));
	assert_true(ts_now_ns() - t0 < 5000000000ull);
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

static void test_no_such_process(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid); /* reaped: the pid is free */
	char p[32];
	snprintf(p, sizeof(p), "%d", (int)pid);
	struct run r;
	run_loader(&r, "--pid", p, NULL);
	expect_exit(&r, 1, "no such process");
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
}

/* What the path held, if at most 255 bytes ("" when missing). */
static void file_text(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
	buf[n] = '\0';
	if (f)
		fclose(f);
}

/* -o of a run that traces nothing: an existing file keeps its contents (also
 * through a symbolic link), a FIFO stays, a new file is not left behind; a
 * run that writes replaces all of an older, longer file. */
static void test_output_kept(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	char p[32], dir[] = "/tmp/stb-out-XXXXXX", old[64], link[64], fifo[64], fresh[64];
	snprintf(p, sizeof(p), "%d", (int)pid);
	assert_non_null(mkdtemp(dir));
	snprintf(old, sizeof(old), "%s/old.txt", dir);
	snprintf(link, sizeof(link), "%s/link.txt", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(fresh, sizeof(fresh), "%s/fresh.txt", dir);
	FILE *f = fopen(old, "we");
	assert_non_null(f);
	fputs("the stacks of yesterday\n", f);
	fclose(f);
	assert_int_equal(symlink(old, link), 0);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	int rd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* the writer needs a reader */
	assert_true(rd >= 0);
	const char *const outs[] = {old, link, fifo, fresh};
	for (unsigned i = 0; i < 4; i++) {
		for (unsigned prof = 0; prof < 2; prof++) {
			struct run r;
			if (prof)
				run_loader(&r, "--profile", "--duration", "1s", "--pid", p, "-o",
					   outs[i], NULL);
			else
				run_loader(&r, "--pid", p, "-o", outs[i], NULL);
			expect_exit(&r, 1, "no such process");
			run_free(&r);
			char text[256];
			file_text(old, text, sizeof(text));
			assert_string_equal(text, "the stacks of yesterday\n");
			struct stat st;
			assert_int_equal(lstat(link, &st), 0);
			assert_true(S_ISLNK(st.st_mode));
			assert_int_equal(lstat(fifo, &st), 0);
			assert_true(S_ISFIFO(st.st_mode));
			assert_int_equal(lstat(fresh, &st), -1);
			assert_int_equal(errno, ENOENT);
		}
	}
	close(rd);

	/* A run that writes: all of it, none of the old file's tail. */
	f = fopen(old, "we");
	assert_non_null(f);
	for (int i = 0; i < 100000; i++)
		fputc('x', f);
	fclose(f);
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--group", "-o", link, NULL);
	expect_exit(&r, 0, NULL);
	run_free(&r);
	struct stat st;
	assert_int_equal(stat(old, &st), 0);
	assert_true(st.st_size > 0 && st.st_size < 100000);
	char *all = calloc(1, (size_t)st.st_size + 1);
	assert_non_null(all);
	f = fopen(old, "re");
	assert_non_null(f);
	assert_int_equal(fread(all, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	assert_non_null(strstr(all, "bthread"));
	assert_null(strstr(all, "xxxxxxxx"));
	assert_int_equal(all[st.st_size - 1], '\n');
	free(all);
	target_finish(&tg, DEFAULT_TASKS);
	unlink(link);
	unlink(fifo);
	unlink(old);
	rmdir(dir);
}

static void test_not_stb_runtime(void **state)
{
	(void)state;
	char *argv[] = {"sleep", "60", NULL};
	struct ts_proc s;
	assert_int_equal(ts_proc_start(&s, argv, NULL, NULL, NULL), 0);
	ts_sleep_ms(50); /* let it exec */
	char p[32];
	snprintf(p, sizeof(p), "%d", (int)s.pid);
	struct run r;
	run_loader(&r, "--pid", p, NULL);
	ts_proc_free(&s);
	expect_exit(&r, 1, "not a stb runtime");
	run_free(&r);
}

static void test_abi_mismatch(void **state)
{
	(void)state;
	static const char *const args[] = {"--fake-abi", "7", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, args, NULL);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), NULL);
	char want[64];
	snprintf(want, sizeof(want), "understands ABI version %u", STB_ABI_VERSION);
	expect_exit(&r, 1, "ABI version 7");
	expect_exit(&r, 1, want);
	run_free(&r);
	char bye[128];
	assert_int_equal(ts_ltarget_quit(&tg, bye, sizeof(bye)), 0);
	target_forget(&tg);
	assert_int_equal(ts_field(bye, "signals"), 0);
}

/* Without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN but with CAP_SYS_PTRACE: context
 * mode only, with a warning and a note; suspended stacks still complete; the
 * running bthreads on a CPU fail, so exit 1. For both table backings (BPF map
 * and memfd). */
static void test_no_bpf_caps(void **state)
{
	(void)state;
	uint64_t caps = child_caps(drop_bpf_caps);
	assert_false(caps >> CAP_BPF & 1);
	assert_false(caps >> CAP_PERFMON & 1);
	assert_false(caps >> CAP_SYS_ADMIN & 1);
	assert_true(caps >> CAP_SYS_PTRACE & 1);

	static char map_env[] = "STB_TABLE=bpf";
	char *const envs[2][2] = {{map_env, NULL}, {NULL, NULL}}; /* the default: memfd */
	for (int b = 0; b < 2; b++) {
		struct ts_ltarget tg;
		target_start(&tg, target_path, NULL, envs[b]);
		struct run r;
		run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), NULL);
		expect_exit(&r, 1, "warning: BPF unavailable");
		expect_exit(&r, 1, "CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN)");
		expect_exit(&r, 1, "context mode only");
		expect_exit(&r, 1, "could not be traced");
		/* The header line, then the notes. */
		assert_true(strncmp(r.out, "# stb-bpf-loader snapshot of pid ", 33) == 0);
		assert_non_null(strchr(r.out, '\n'));
		assert_true(strncmp(strchr(r.out, '\n'), "\n\n# note: ", 10) == 0);
		struct tout *o = malloc(sizeof(*o));
		assert_non_null(o);
		parse_text(r.out, o);
		assert_true(o->note);
		assert_int_equal(o->n, DEFAULT_TASKS);
		for (unsigned k = 0; k < 4; k++) /* the suspended chains */
			for (unsigned i = 0; i < ts_ltarget_chain(&tg, expects[k].chain)->n; i++)
				check_text_task(o, &tg, &expects[k], i);
		const struct ttask *t = text_task(o, chain_id(&tg, "spin", 0));
		assert_non_null(t);
		assert_true(t->failed);
		assert_non_null(strstr(t->error, "not captured"));
		free(o);
		run_free(&r);

		/* Only suspended bthreads asked for: BPF is never needed, never
		 * loaded, and its absence is no warning. */
		run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), "--format", "json",
			       "--state", "suspended", NULL);
		expect_exit(&r, 0, NULL);
		assert_null(strstr(r.err, "warning"));
		struct ts_json *doc = parse_json(r.out);
		assert_string_equal(ts_json_str(doc, "capture"), "context");
		for (unsigned k = 0; k < 4; k++)
			for (unsigned i = 0; i < ts_ltarget_chain(&tg, expects[k].chain)->n; i++)
				check_json_task(doc, &tg, &expects[k], i, false);
		ts_json_free(doc);
		run_free(&r);
		target_finish(&tg, DEFAULT_TASKS);
	}
}

/* --profile without BPF: the loader's one explanation, naming every
 * capability that would do, and none of libbpf's raw messages before it
 * (as in snapshot mode). */
static void test_profile_no_bpf_caps(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), "--profile", "--duration",
		       "1s", "--format", "folded", NULL);
	expect_exit(&r, 1, "--profile needs the BPF capture program");
	if (strstr(r.err, "libbpf") || strncmp(r.err, "stb-bpf-loader: ", 16) != 0)
		fail_msg("libbpf's messages before the loader's own:\n%s", r.err);
	assert_non_null(strstr(r.err, "CAP_BPF + CAP_PERFMON"));
	assert_non_null(strstr(r.err, "CAP_SYS_ADMIN"));
	assert_string_equal(r.out, "");
	run_free(&r);
	/* -v: libbpf's own words too. */
	run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), "--profile", "--duration",
		       "1s", "--format", "folded", "-v", NULL);
	expect_exit(&r, 1, "--profile needs the BPF capture program");
	assert_non_null(strstr(r.err, "libbpf"));
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* In the child: every call of system call *(long *)arg fails with EPERM (a
 * seccomp filter). */
static int block_syscall(void *arg)
{
	long nr = *(const long *)arg;
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
		return -errno;
	return 0;
}

/* bpf(2) or perf_event_open(2) refused: context mode only; the running
 * bthreads on a CPU fail, so exit 1. */
static void run_blocked_syscall(long nr, const char *warning)
{
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, block_syscall, &nr, "--pid", pid_arg(&tg), "--format", "json", NULL);
	expect_exit(&r, 1, warning);
	struct ts_json *doc = parse_json(r.out);
	assert_string_equal(ts_json_str(doc, "capture"), "context-only");
	for (unsigned k = 0; k < 4; k++)
		for (unsigned i = 0; i < ts_ltarget_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	const struct ts_json *t = json_task(doc, chain_id(&tg, "spin", 0));
	assert_non_null(t);
	assert_non_null(strstr(ts_json_str(t, "error"), "not captured"));
	ts_json_free(doc);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* No bpf(2) at all, as on kernels before 6.5 for a process without CAP_BPF
 * (even BPF_OBJ_GET_INFO_BY_FD is refused under
 * kernel.unprivileged_bpf_disabled): the table, a BPF map since the target is
 * root, is still found and mapped; suspended stacks are printed. */
static void test_no_bpf_syscall(void **state)
{
	(void)state;
	run_blocked_syscall(SYS_bpf, "warning: BPF unavailable");
}

/* BPF loads but perf events cannot be opened. */
static void test_no_perf_events(void **state)
{
	(void)state;
	run_blocked_syscall(SYS_perf_event_open, "warning: perf events unavailable");
}

static void test_no_ptrace(void **state)
{
	(void)state;
	assert_int_equal(child_caps(become_nobody), 0);
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, become_nobody, NULL, "--pid", pid_arg(&tg), NULL);
	expect_exit(&r, 1, "CAP_SYS_PTRACE");
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* In the child: only the capabilities in mask (effective, permitted,
 * inheritable and ambient, so that they survive exec), the bounding set
 * emptied of the rest; then, when uid is not 0, become that user. */
static int only_caps(uint64_t mask, uid_t uid)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2] = {{0}};
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
		return -errno;
	for (unsigned c = 0; c < 64; c++) {
		if (mask >> c & 1)
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
			return -errno;
	}
	if (uid && (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
		    setresuid(uid, uid, uid) != 0))
		return -errno;
	for (unsigned c = 0; c < 64; c++)
		if (mask >> c & 1) {
			d[c >> 5].effective |= 1u << (c & 31);
			d[c >> 5].permitted |= 1u << (c & 31);
			d[c >> 5].inheritable |= 1u << (c & 31);
		}
	if (syscall(SYS_capset, &h, d) != 0)
		return -errno;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	for (unsigned c = 0; c < 64; c++)
		if (mask >> c & 1 && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) != 0)
			return -errno;
	return 0;
}

static int nobody_with_ptrace(void *arg)
{
	(void)arg;
	return only_caps(1ull << CAP_SYS_PTRACE, 65534);
}

static int root_without_caps(void *arg)
{
	(void)arg;
	return only_caps(0, 0);
}

/* CAP_SYS_ADMIN instead of CAP_BPF + CAP_PERFMON (the docs say it does). */
static int root_with_sys_admin(void *arg)
{
	(void)arg;
	return only_caps(1ull << CAP_SYS_PTRACE | 1ull << CAP_SYS_ADMIN, 0);
}

/* Root with CAP_SYS_PTRACE and CAP_SYS_ADMIN but neither CAP_BPF nor
 * CAP_PERFMON: running bthreads are captured by BPF all the same, and a
 * profile is taken. */
static void test_sys_admin_suffices(void **state)
{
	(void)state;
	assert_int_equal(child_caps(root_with_sys_admin),
			 1ull << CAP_SYS_PTRACE | 1ull << CAP_SYS_ADMIN);
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, root_with_sys_admin, NULL, "--pid", pid_arg(&tg), "--state", "running",
		       "--format", "json", "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *doc = parse_json(r.out);
	const struct ts_json *t = json_task(doc, chain_id(&tg, "spin", 0));
	assert_non_null(t);
	assert_string_equal(ts_json_str(t, "capture"), "bpf");
	ts_json_free(doc);
	run_free(&r);
	run_loader_pre(&r, root_with_sys_admin, NULL, "--pid", pid_arg(&tg), "--profile",
		       "--duration", "500ms", "--format", "folded", NULL);
	expect_exit(&r, 0, "profiled pid");
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* Each case names the permission really missing: CAP_SYS_PTRACE alone cannot
 * list /proc/PID/fd of another user's process (CAP_DAC_READ_SEARCH), and
 * root without capabilities lacks CAP_SYS_PTRACE (never "not a stb
 * runtime"). */
static void test_permission_names(void **state)
{
	(void)state;
	assert_int_equal(child_caps(nobody_with_ptrace), 1ull << CAP_SYS_PTRACE);
	assert_int_equal(child_caps(root_without_caps), 0);
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, nobody_with_ptrace, NULL, "--pid", pid_arg(&tg), NULL);
	expect_exit(&r, 1, "missing CAP_DAC_READ_SEARCH;");
	assert_null(strstr(r.err, "no ptrace access"));
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
	run_loader_pre(&r, root_without_caps, NULL, "--pid", pid_arg(&tg), NULL);
	expect_exit(&r, 1, "missing CAP_SYS_PTRACE (this process runs as root but without it)");
	assert_null(strstr(r.err, "not a stb runtime"));
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_usage_errors, teardown),
		cmocka_unit_test_teardown(test_duration_hours, teardown),
		cmocka_unit_test_teardown(test_output_first, teardown),
		cmocka_unit_test_teardown(test_no_such_process, teardown),
		cmocka_unit_test_teardown(test_output_kept, teardown),
		cmocka_unit_test_teardown(test_not_stb_runtime, teardown),
		cmocka_unit_test_teardown(test_abi_mismatch, teardown),
		cmocka_unit_test_teardown(test_no_bpf_caps, teardown),
		cmocka_unit_test_teardown(test_profile_no_bpf_caps, teardown),
		cmocka_unit_test_teardown(test_no_bpf_syscall, teardown),
		cmocka_unit_test_teardown(test_no_perf_events, teardown),
		cmocka_unit_test_teardown(test_no_ptrace, teardown),
		cmocka_unit_test_teardown(test_permission_names, teardown),
		cmocka_unit_test_teardown(test_sys_admin_suffices, teardown),
	};
	return loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_errors");
}
