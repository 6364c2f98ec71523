/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-process tracer: holds one task through the STB gate (a lease in its
 * table entry) and copies its stack (context mode), or has a signal handler on
 * its thread copy it without holding it (signal mode); then unwinds and
 * symbolizes the copy. Also pthread registration, configuration, statistics.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <ucontext.h>

#include "internal.h"
#include "report/model.h"
#include "report/writers.h"
#include "stb/stb.h"
#include "symbols/symbolize.h"
#include "table/driver.h"
#include "table/insyscall.h"
#include "trace.h"
#include "unwind/unwind.h"
#include "util.h"

#define STB_SLOTS 16u
#define STB_COPY_MAX (256u << 10) /* bytes of stack copied at most */
#define STB_RED_ZONE 128u          /* x86_64 SysV red zone below rsp */

enum stb_slot_phase {
	STB_SLOT_ARMED = 1,     /* request sent, handler may take it */
	STB_SLOT_WRITING = 2,   /* the handler is copying */
	STB_SLOT_DONE = 3,      /* capture complete */
	STB_SLOT_DECLINED = 4,  /* the task was not running on that thread */
	STB_SLOT_ABANDONED = 5, /* the tracer gave up; a late handler must not write */
};

/* A capture buffer. Owned by one trace at a time (busy); state is tagged so a
 * late signal handler never writes into a newer request's buffer. */
struct stb_slot {
	uint32_t busy;
	uint64_t state;          /* tag << 8 | phase */
	bthread_t want;
	uint32_t want_tid;       /* non-zero: a thread that is no task (want 0) */
	struct stb_regs regs;
	uint64_t addr;           /* address of buf[0] in the task's stack */
	size_t len;
	uint64_t handler_ns;
	uint8_t *buf;            /* STB_COPY_MAX bytes */
} STB_ALIGNED_CL;

static struct stb_slot stb_slots[STB_SLOTS];
static uint64_t stb_slot_tag;

static int stb_trace_signo;            /* 0 until configured */
static int stb_timeout_ms = 50;
static int stb_text_runtime_frames;    /* bthread_stack_trace shows the runtime's frames */
static pthread_once_t stb_handler_once = PTHREAD_ONCE_INIT;
static int stb_handler_err;
static bool stb_handler_installed;

static pthread_once_t stb_self_once = PTHREAD_ONCE_INIT;
static struct stb_unw_proc *stb_self_proc;
static struct stb_sym *stb_self_sym;
static int stb_self_err;

static struct {
	uint64_t traces, signal_captures, signal_timeouts, retries;
} stb_tstats;

static __thread struct stb_task *stb_tls_pthread_task __attribute__((tls_model("initial-exec")));
static pthread_key_t stb_pthread_key;
static pthread_once_t stb_pthread_once = PTHREAD_ONCE_INIT;

static void count(uint64_t *c)
{
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* ---- configuration ---- */

static int parse_int_env(const char *name, int lo, int hi, int dflt)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "stb: ignoring %s=%s (want %d..%d)\n", name, s, lo, hi);
		return dflt;
	}
	return (int)v;
}

/* The runtime's one call into the tracer (runtime/core/internal.h). */
void stb_tracer_attach(void)
{
	/* Only when set: a value given to stb_set_signal_trace_timeout_ms()
	 * before the runtime started must not be reset to the default here. */
	int ms = parse_int_env("STB_SIGNAL_TRACE_TIMEOUT_MS", 1, 60000, 0);
	if (ms)
		__atomic_store_n(&stb_timeout_ms, ms, __ATOMIC_RELAXED);
	int rf = parse_int_env("STB_TRACE_RUNTIME_FRAMES", 0, 1, -1);
	if (rf >= 0)
		stb_set_trace_runtime_frames(rf);
	int sig = parse_int_env("STB_TRACE_SIGNAL", 1, SIGRTMAX, 0);
	if (sig && stb_set_trace_signal(sig) != 0)
		fprintf(stderr, "stb: STB_TRACE_SIGNAL=%d is not usable\n", sig);
	stb_dump_signal_init();
	stb_watchdog_env_init();
}

int stb_set_signal_trace_timeout_ms(int ms)
{
	if (ms < 1 || ms > 60000)
		return -EINVAL;
	__atomic_store_n(&stb_timeout_ms, ms, __ATOMIC_RELAXED);
	return 0;
}

int stb_set_trace_runtime_frames(int show)
{
	__atomic_store_n(&stb_text_runtime_frames, show != 0, __ATOMIC_RELAXED);
	return 0;
}

int stb_set_trace_signal(int signo)
{
	if (signo <= 0 || signo > SIGRTMAX || signo == SIGKILL || signo == SIGSTOP)
		return -EINVAL;
	if (__atomic_load_n(&stb_handler_installed, __ATOMIC_ACQUIRE))
		return -EBUSY;
	__atomic_store_n(&stb_trace_signo, signo, __ATOMIC_RELEASE);
	return 0;
}

int stb_trace_timeout_ms(void)
{
	return __atomic_load_n(&stb_timeout_ms, __ATOMIC_RELAXED);
}

static int trace_signo(void)
{
	int s = __atomic_load_n(&stb_trace_signo, __ATOMIC_ACQUIRE);
	return s ? s : SIGRTMAX - 3;
}

/* ---- the signal handler (async-signal-safe: no locks, no allocation) ---- */

static struct stb_task *thread_task(void)
{
	struct stb_task *t = stb_task_self();
	return t ? t : stb_tls_pthread_task;
}

/* The registers of the interrupted code, from the signal's context. */
static void regs_of(struct stb_slot *s, const greg_t *g)
{
	s->regs.ip = (uint64_t)g[REG_RIP];
	s->regs.sp = (uint64_t)g[REG_RSP];
	s->regs.bp = (uint64_t)g[REG_RBP];
	s->regs.bx = (uint64_t)g[REG_RBX];
	s->regs.r12 = (uint64_t)g[REG_R12];
	s->regs.r13 = (uint64_t)g[REG_R13];
	s->regs.r14 = (uint64_t)g[REG_R14];
	s->regs.r15 = (uint64_t)g[REG_R15];
	s->regs.flags = 0;
}

/* A thread that is no task: its stack's bounds are not known here, so it
 * is copied from the red zone up with process_vm_readv, a page at a time,
 * up to the first page that cannot be read (a system call: async-signal-
 * safe, and it fails where a load would fault). */
static void thread_capture(struct stb_slot *s, const greg_t *g, uint64_t tag, uint64_t start)
{
	if ((uint32_t)syscall(SYS_gettid) != s->want_tid) {
		__atomic_store_n(&s->state, tag << 8 | STB_SLOT_DECLINED, __ATOMIC_RELEASE);
		return;
	}
	regs_of(s, g);
	uint64_t from = s->regs.sp > STB_RED_ZONE ? s->regs.sp - STB_RED_ZONE : 0;
	size_t got = 0, step = 4096 - (size_t)(from & 4095);
	pid_t self = getpid();
	while (got < STB_COPY_MAX) {
		size_t n = step < STB_COPY_MAX - got ? step : STB_COPY_MAX - got;
		struct iovec l = {.iov_base = s->buf + got, .iov_len = n};
		struct iovec r = {.iov_base = (void *)(uintptr_t)(from + got), .iov_len = n};
		if (process_vm_readv(self, &l, 1, &r, 1, 0) != (ssize_t)n)
			break;
		got += n;
		step = 4096;
	}
	s->addr = from;
	s->len = got;
	s->handler_ns = stb_now_ns() - start;
	__atomic_store_n(&s->state, tag << 8 | STB_SLOT_DONE, __ATOMIC_RELEASE);
}

static void signal_handler(int sig, siginfo_t *si, void *uctx)
{
	(void)sig;
	int saved_errno = errno;
	uint64_t start = stb_now_ns();
	if (si->si_code != SI_QUEUE || si->si_pid != getpid())
		goto out;
	uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	if ((v & 0xff) >= STB_SLOTS)
		goto out;
	struct stb_slot *s = &stb_slots[v & 0xff];
	uint64_t tag = v >> 8;
	uint64_t armed = tag << 8 | STB_SLOT_ARMED;
	if (!__atomic_compare_exchange_n(&s->state, &armed, tag << 8 | STB_SLOT_WRITING, false,
					 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		goto out; /* stale request: its buffer may belong to someone else now */
	const greg_t *g = ((ucontext_t *)uctx)->uc_mcontext.gregs;
	uint64_t sp = (uint64_t)g[REG_RSP];
	if (s->want_tid) {
		thread_capture(s, g, tag, start);
		goto out;
	}
	struct stb_task *t = thread_task();
	uint64_t lo = t ? t->pub->stack_lo : 0, hi = t ? t->pub->stack_hi : 0;
	if (!t || stb_task_id(t) != s->want || !stb_task_running_here(t) || sp < lo || sp >= hi) {
		__atomic_store_n(&s->state, tag << 8 | STB_SLOT_DECLINED, __ATOMIC_RELEASE);
		goto out;
	}
	regs_of(s, g);
	/* Copy the 128-byte red zone below sp too: interrupted in an epilogue,
	 * frame 0's CFI still finds the caller's rbp (and rbx...) in the slots
	 * just popped (e.g. rbp at CFA-16 on `ret`). The kernel left them intact
	 * (the signal frame lies below the red zone); read later from the live
	 * stack they would be stale and the walk would stop or go wrong. */
	uint64_t from = sp - lo >= STB_RED_ZONE ? sp - STB_RED_ZONE : lo;
	size_t len = hi - from < STB_COPY_MAX ? (size_t)(hi - from) : STB_COPY_MAX;
	stb_unw_copy_raw(s->buf, (const void *)(uintptr_t)from, len);
	s->addr = from;
	s->len = len;
	s->handler_ns = stb_now_ns() - start;
	__atomic_store_n(&s->state, tag << 8 | STB_SLOT_DONE, __ATOMIC_RELEASE);
out:
	errno = saved_errno;
}

static void install_handler_once(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = signal_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	sigfillset(&sa.sa_mask);
	if (sigaction(trace_signo(), &sa, NULL) != 0)
		stb_handler_err = errno;
	else
		__atomic_store_n(&stb_handler_installed, true, __ATOMIC_RELEASE);
}

/* ---- slots, leases ---- */

static struct stb_slot *slot_get(uint64_t deadline)
{
	for (unsigned round = 0;; round++) {
		for (unsigned i = 0; i < STB_SLOTS; i++) {
			struct stb_slot *s = &stb_slots[i];
			uint32_t z = 0;
			if (__atomic_load_n(&s->busy, __ATOMIC_RELAXED) ||
			    !__atomic_compare_exchange_n(&s->busy, &z, 1, false, __ATOMIC_ACQUIRE,
							 __ATOMIC_RELAXED))
				continue;
			if (!s->buf) {
				void *m = mmap(NULL, STB_COPY_MAX, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (m == MAP_FAILED) {
					__atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
					return NULL;
				}
				s->buf = m;
			}
			return s;
		}
		if (stb_now_ns() >= deadline)
			return NULL;
		if (round > 16)
			usleep(50);
		else
			sched_yield();
	}
}

static void slot_put(struct stb_slot *s)
{
	__atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* "blocked" or "ignored" when thread tid's /proc status says signal signo
 * is (SigBlk, SigIgn); NULL when it says neither, or cannot be read. */
static const char *signal_refused(pid_t tid, int signo)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	const char *why = NULL;
	while (!why && fgets(line, sizeof(line), f)) {
		unsigned long long mask;
		if (sscanf(line, "SigBlk: %llx", &mask) == 1 && (mask >> (signo - 1) & 1))
			why = "blocked";
		else if (sscanf(line, "SigIgn: %llx", &mask) == 1 && (mask >> (signo - 1) & 1))
			why = "ignored";
	}
	fclose(f);
	return why;
}

#if defined(STB_TEST_HOOKS)
int stb_test_unanswered_signals;

/* Test builds: the next stb_test_unanswered_signals requests are never
 * answered, as if their thread got no CPU before the timeout. */
static bool unanswered(void)
{
	return __atomic_load_n(&stb_test_unanswered_signals, __ATOMIC_ACQUIRE) > 0 &&
	       __atomic_fetch_sub(&stb_test_unanswered_signals, 1, __ATOMIC_ACQ_REL) > 0;
}
#else
static bool unanswered(void)
{
	return false;
}
#endif

/*
 * Signal mode: asks the handler on thread ktid to copy its registers and
 * stack into slot s: of task want running there, or (want_tid) of the thread
 * itself. A request with no reply by the deadline is asked once more, for
 * timeout_ms: the handler may only be late (its thread was not scheduled in
 * time on a busy machine). Only then does the thread's /proc status say
 * whether the signal is blocked or ignored there; a blocked mask seen once
 * may be a handler running at that instant. 0 = captured, -EAGAIN = the task
 * was not running there any more (retry), -ESRCH = thread want_tid is gone,
 * other -errno = failure.
 */
static int signal_request(bthread_t want, uint32_t want_tid, pid_t ktid, struct stb_slot *s,
			  uint64_t deadline, int timeout_ms, struct stb_capture *capt, char *err,
			  size_t errlen)
{
	int signo = trace_signo();
	pthread_once(&stb_handler_once, install_handler_once);
	if (stb_handler_err) {
		stb_say(err, errlen, "cannot install the handler of signal %d: %s", signo,
			strerror(stb_handler_err));
		return -stb_handler_err;
	}
	struct sigaction cur;
	if (sigaction(signo, NULL, &cur) == 0 &&
	    (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != signal_handler)) {
		stb_say(err, errlen,
			"the handler of trace signal %d was replaced by the application "
			"(choose another with STB_TRACE_SIGNAL)",
			signo);
		return -EPERM;
	}
	if (ktid <= 0)
		return -EAGAIN; /* where it runs is not known (yet): re-read the task */
	uint64_t st = 0, tag = 0;
	for (unsigned attempt = 0;; attempt++) {
		tag = __atomic_add_fetch(&stb_slot_tag, 1, __ATOMIC_RELAXED);
		s->want = want;
		s->want_tid = want_tid;
		__atomic_store_n(&s->state, tag << 8 | STB_SLOT_ARMED, __ATOMIC_RELEASE);
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		si.si_signo = signo;
		si.si_code = SI_QUEUE;
		si.si_pid = getpid();
		si.si_uid = getuid();
		si.si_value.sival_ptr = (void *)(uintptr_t)(tag << 8 | (uint64_t)(s - stb_slots));
		if (!unanswered() &&
		    syscall(SYS_rt_tgsigqueueinfo, getpid(), ktid, signo, &si) != 0) {
			int e = errno;
			__atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
			if (e == ESRCH) /* the thread is gone: re-read the task */
				return want_tid ? -ESRCH : -EAGAIN;
			stb_say(err, errlen, "cannot signal thread %d: %s", (int)ktid, strerror(e));
			return -e;
		}
		bool late = false;
		for (unsigned spins = 0;; spins++) {
			st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
			if ((st & 0xff) == STB_SLOT_DONE || (st & 0xff) == STB_SLOT_DECLINED)
				break;
			if (stb_now_ns() >= deadline) {
				uint64_t armed = tag << 8 | STB_SLOT_ARMED;
				if (__atomic_compare_exchange_n(&s->state, &armed,
								tag << 8 | STB_SLOT_ABANDONED, false,
								__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
					late = true;
					break;
				}
				continue; /* the handler is writing: it finishes quickly */
			}
			if (spins < 2000)
				stb_cpu_relax();
			else
				sched_yield();
		}
		if (!late)
			break;
		count(&stb_tstats.signal_timeouts);
		if (attempt == 0 && timeout_ms > 0) {
			deadline = stb_now_ns() + (uint64_t)timeout_ms * 1000000u;
			continue; /* the stale request's handler, if it ever runs, does nothing */
		}
		const char *refused = signal_refused(ktid, signo);
		if (refused) {
			stb_say(err, errlen, "signal %d is %s on thread %d (its /proc status says so)",
				signo, refused, (int)ktid);
			return -ETIMEDOUT;
		}
		/* Fits stb_trace_info.error (128 bytes) at any tid, timeout, signal. */
		stb_say(err, errlen,
			"no reply from thread %d in %d ms, asked twice (signal %d not blocked or "
			"ignored); STB_SIGNAL_TRACE_TIMEOUT_MS raises it",
			(int)ktid, timeout_ms > 0 ? timeout_ms : stb_trace_timeout_ms(), signo);
		return -ETIMEDOUT;
	}
	if ((st & 0xff) == STB_SLOT_DECLINED)
		return -EAGAIN;
	count(&stb_tstats.signal_captures);
	capt->held_ns = s->handler_ns;
	capt->tid = (uint32_t)ktid;
	return 0;
}

/* The calling task, traced from the frame of the public function's caller:
 * its own stack is stable while it reads it. */
static int self_capture(struct stb_self_tracer *st, struct stb_abi_task *p,
			struct stb_capture *capt)
{
	struct stb_slot *s = st->slot;
	uint64_t hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	size_t len = hi > st->sp ? (size_t)(hi - st->sp) : 0;
	if (len > STB_COPY_MAX)
		len = STB_COPY_MAX;
	stb_unw_copy_raw(s->buf, (const void *)(uintptr_t)st->sp, len);
	capt->copy.addr = st->sp;
	capt->copy.bytes = s->buf;
	capt->copy.len = len;
	capt->cut = st->sp + len < hi ? STB_CUT_COPY : STB_CUT_NONE;
	capt->regs.ip = st->ip;
	capt->regs.sp = st->sp;
	capt->regs.bp = st->bp;
	capt->regs.flags = STB_UNW_IP_IS_RETURN;
	capt->mode = STB_TRACE_SELF;
	capt->tid = (uint32_t)stb_gettid();
	return 0;
}

/* The capture backend of the in-process tracer (driver.h): the calling task
 * from its own frame, any other running one in signal mode. */
static int tracer_capture(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
			  const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
			  struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_self_tracer *st = ctx;
	struct stb_slot *s = st->slot;
	(void)buf;
	(void)cap;
	if (id && id == st->self_id)
		return self_capture(st, p, capt);
	/* Blocked in a system call on its thread: the call from /proc. One
	 * that a signal would cut short (sleep() and epoll_wait() return
	 * early) is read with its stack from there too; any other is restarted
	 * after the handler (SA_RESTART), whose registers give the exact walk,
	 * and keeps its state when the handler interrupted that very call. */
	int tid = (int)at->tid;
	uint64_t lo = __atomic_load_n(&p->stack_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	int rc = hi && tid > 0 ? stb_insyscall_capture(&stb_self_checked_mem, 0, tid, lo, hi,
						       s->buf, STB_COPY_MAX, capt)
			       : -EAGAIN;
	struct stb_capture call = {0};
	bool in_call = rc == 0;
	if (rc == 0) {
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN; /* the call may be its thread's after it left */
		if (stb_syscall_cut_by_signal(capt->syscall_nr))
			return 0;
		call = *capt;
	} else if (rc == -EBUSY) {
		return -EAGAIN; /* it left the call meanwhile: read it again */
	}
	rc = signal_request(id, 0, (pid_t)tid, s, deadline, st->timeout_ms, capt, err, errlen);
	if (rc == -ETIMEDOUT && in_call) {
		/* No handler ran while it blocked (a sanitizer defers signals in
		 * its blocking calls; a mask we cannot see): the call and its
		 * stack from /proc, as stb-bpf-loader reads them. */
		if (stb_insyscall_capture(&stb_self_checked_mem, 0, tid, lo, hi, s->buf,
					  STB_COPY_MAX, capt) == 0 &&
		    !stb_run_at_moved(at, p, id, w1))
			return 0;
	}
	if (rc != 0)
		return rc;
	capt->unwind = NULL;
	capt->unwind_ctx = NULL;
	/* Interrupted in the call /proc showed (at its syscall instruction,
	 * rewound for the restart, or just after it): still blocked in it. */
	capt->in_syscall = call.in_syscall && s->regs.sp == call.regs.sp &&
			   (s->regs.ip == call.regs.ip || s->regs.ip + 2 == call.regs.ip);
	capt->syscall_nr = capt->in_syscall ? call.syscall_nr : 0;
	capt->syscall_arg0 = capt->in_syscall ? call.syscall_arg0 : 0;
	capt->regs = s->regs;
	capt->copy.addr = s->addr;
	capt->copy.bytes = s->buf;
	capt->copy.len = s->len;
	capt->mode = STB_TRACE_SIGNAL;
	/* The handler copied STB_COPY_MAX bytes at most. */
	hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	capt->cut = s->addr + s->len < hi ? STB_CUT_COPY : STB_CUT_NONE;
	return 0;
}

/* The calling thread, which is no task (a pthread calling stb_dump): from
 * its caller's frame, its stack up to its top. */
static int self_thread_capture(struct stb_self_tracer *st, struct stb_capture *capt)
{
	struct stb_slot *s = st->slot;
	uint64_t hi = 0;
	pthread_attr_t a;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		void *lo;
		size_t size;
		if (pthread_attr_getstack(&a, &lo, &size) == 0)
			hi = (uint64_t)(uintptr_t)lo + size;
		pthread_attr_destroy(&a);
	}
	if (hi <= st->sp)
		return -EPROTO;
	size_t len = hi - st->sp < STB_COPY_MAX ? (size_t)(hi - st->sp) : STB_COPY_MAX;
	stb_unw_copy_raw(s->buf, (const void *)(uintptr_t)st->sp, len);
	capt->copy = (struct stb_stack_copy){.addr = st->sp, .bytes = s->buf, .len = len};
	capt->cut = st->sp + len < hi ? STB_CUT_COPY : STB_CUT_NONE;
	capt->regs = (struct stb_regs){.ip = st->ip, .sp = st->sp, .bp = st->bp,
				       .flags = STB_UNW_IP_IS_RETURN};
	capt->mode = STB_TRACE_SELF;
	capt->tid = (uint32_t)stb_gettid();
	capt->state = STB_TASK_RUNNING;
	return 0;
}

/* A thread of this process that is no task (driver.h capture_thread):
 * blocked in a system call, from /proc and its stack. It is never signalled:
 * a handler would end its next call early where SA_RESTART does not hold
 * (connect or recv with a socket timeout, sleep, poll: EINTR in code that is
 * not ours). On a CPU it is left out with an error; stb-bpf-loader's BPF
 * capture reads it without a signal. */
static int tracer_capture_thread(void *ctx, uint32_t tid, uint64_t deadline, void *buf,
				 size_t cap, struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_self_tracer *st = ctx;
	struct stb_slot *s = st->slot;
	(void)buf;
	(void)cap;
	if (tid == 0 || tid > INT32_MAX)
		return -EINVAL;
	if (tid == (uint32_t)stb_gettid())
		return self_thread_capture(st, capt);
	int rc = -EAGAIN;
	/* Between two calls for an instant, maybe: look again, briefly. */
	for (int look = 0; look < 3 && rc == -EAGAIN && stb_now_ns() < deadline; look++) {
		if (look)
			usleep(1000);
		rc = stb_insyscall_capture(&stb_self_checked_mem, 0, (int)tid, 0, 0, s->buf,
					   STB_COPY_MAX, capt);
	}
	if (rc == -EBUSY)
		return -EAGAIN; /* it left the call meanwhile: again */
	if (rc != -EAGAIN)
		return rc;
	stb_say(err, errlen, "on a CPU: a thread that is no task is not signalled in process "
			     "(stb-bpf-loader captures it)");
	return -ENOTSUP;
}

/* Reads this process's memory (the memory backend: the range is mapped while
 * the lease holds the task). */
static int read_self(void *ctx, uint64_t addr, void *dst, size_t len)
{
	(void)ctx;
	stb_unw_copy_raw(dst, (const void *)(uintptr_t)addr, len);
	return 0;
}

/* A batch of copies, each under its task's lease. */
static unsigned read_self_many(void *ctx, const struct stb_mem_seg *segs, unsigned n)
{
	(void)ctx;
	for (unsigned i = 0; i < n; i++)
		stb_unw_copy_raw(segs[i].dst, (const void *)(uintptr_t)segs[i].addr, segs[i].len);
	return n;
}

static const struct stb_mem stb_self_mem = {
    .read = read_self, .read_many = read_self_many, .flags = STB_MEM_F_FAULTS};

/* Reads memory of this process that may be gone or never was: process_vm_readv
 * fails where a load would fault. */
static int read_self_checked(void *ctx, uint64_t addr, void *dst, size_t len)
{
	(void)ctx;
	struct iovec l = {.iov_base = dst, .iov_len = len};
	struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EFAULT;
}

const struct stb_mem stb_self_checked_mem = {.read = read_self_checked};

/* ---- unwinding and symbols ---- */

static void self_init(void)
{
	stb_self_proc = stb_unw_proc_new(0);
	if (!stb_self_proc) {
		stb_self_err = errno ? errno : ENOMEM;
		return;
	}
	stb_self_sym = stb_sym_new_mods(stb_unw_proc_mods(stb_self_proc));
	if (!stb_self_sym)
		stb_self_err = errno ? errno : ENOMEM;
}

void stb_trace_symbolize(uint64_t ip, int flags, struct stb_frame *f)
{
	struct stb_sym_info si;
	pthread_once(&stb_self_once, self_init);
	f->ip = ip;
	stb_sym_fill_frame(stb_self_sym, flags, f, &si);
}

void stb_trace_self_tools(struct stb_unw_proc **unw, struct stb_sym **sym)
{
	pthread_once(&stb_self_once, self_init);
	*unw = stb_self_proc;
	*sym = stb_self_sym;
}

struct stb_tview_wsrc stb_self_wsrc(void)
{
	return (struct stb_tview_wsrc){.w = stb_table_worker(0), .hdr = stb_table_workers_header()};
}

int stb_self_tracer_open(struct stb_self_tracer *st, uint64_t self_ip, uint64_t self_sp,
			 uint64_t self_bp, uint64_t deadline, char *err, size_t errlen)
{
	memset(st, 0, sizeof(*st));
	pthread_once(&stb_self_once, self_init);
	if (stb_self_err) {
		stb_say(err, errlen, "cannot set up unwinding: %s", strerror(stb_self_err));
		return -stb_self_err;
	}
	st->slot = slot_get(deadline);
	if (!st->slot) {
		stb_say(err, errlen, "no capture buffer available");
		return -ENOMEM;
	}
	struct stb_task *me = thread_task();
	st->self_id = me ? stb_task_id(me) : 0;
	st->ip = self_ip;
	st->sp = self_sp;
	st->bp = self_bp;
	st->timeout_ms = stb_trace_timeout_ms();
	st->ops = (struct stb_capture_ops){
	    .capture = tracer_capture, .capture_thread = tracer_capture_thread, .ctx = st};
	st->drv = (struct stb_driver){
	    .mem = &stb_self_mem, .capture = &st->ops, .flags = STB_DRIVER_F_LEASE,
	    .buf = st->slot->buf, .cap = STB_COPY_MAX, .workers = stb_self_wsrc(),
	};
	st->unw = stb_self_proc;
	st->sym = stb_self_sym;
	/* Stacks are not unmapped while a tracer copies one (abi.h). */
	__atomic_fetch_add(&stb_stack_readers, 1, __ATOMIC_SEQ_CST);
	return 0;
}

void stb_self_tracer_close(struct stb_self_tracer *st)
{
	if (!st->slot)
		return;
	__atomic_fetch_sub(&stb_stack_readers, 1, __ATOMIC_SEQ_CST);
	slot_put(st->slot);
	st->slot = NULL;
}

void stb_trace_count(int rc, const struct stb_capture *capt)
{
	if (capt->retries)
		__atomic_fetch_add(&stb_tstats.retries, capt->retries, __ATOMIC_RELAXED);
	if (rc == 0 && capt->mode != STB_TRACE_NO_STACK)
		count(&stb_tstats.traces);
}

/* Frames walked into a local buffer at most (more: from the heap). */
#define STB_TRACE_LOCAL_FRAMES 128u

/*
 * Unwinds a capture as opts says, without the runtime's own frames: into a
 * buffer first, since whether the innermost ones are the runtime's is known
 * only from a public function further out, and the bottom ones only once the
 * walk reached the stack's base. The report's view decides (report/model.h,
 * as for every report); the frames shown go to frames and on_frame.
 */
static int unwind_view(struct stb_self_tracer *st, const struct stb_capture *capt,
		       const struct stb_trace_opts *o, struct stb_frame *frames, size_t nframes,
		       struct stb_trace_info *info)
{
	unsigned max = o->max_depth ? o->max_depth : STB_UNW_DEFAULT_DEPTH;
	if (max > STB_REPORT_WALK_MAX)
		max = STB_REPORT_WALK_MAX; /* deeper: truncated (a bounded buffer) */
	unsigned keep = stb_report_keep(max);
	struct stb_frame local[STB_TRACE_LOCAL_FRAMES];
	struct stb_frame *buf = keep <= STB_TRACE_LOCAL_FRAMES ? local
							       : calloc(keep, sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	/* Names decide: symbols even with no_symbols (taken off below). A walk
	 * longer than keep is truncated, and says so. */
	struct stb_frame_sink sink = {
		.frames = buf, .nframes = keep, .max = keep, .skip = o->skip, .sym = st->sym,
		.no_source = o->no_source || o->no_symbols,
		.inline_frames = o->inline_frames && !o->no_symbols,
	};
	int rc = stb_capture_unwind(st->unw, NULL, capt, &sink);
	if (rc < 0)
		goto cleanup;
	struct stb_report_task t = {
		.mode = capt->mode, .frames = buf, .nframes = sink.n, .truncated = sink.truncated,
		.beyond_more = sink.truncated,
	};
	const struct stb_report r = {.sym = st->sym, .max_depth = max};
	stb_report_view(&r, &t, !sink.no_source);
	unsigned n = 0;
	bool stopped = false;
	for (; n < t.nframes && !stopped; n++) {
		struct stb_frame *f = &t.frames[n];
		if (o->no_symbols) {
			unsigned flags = f->flags & STB_FRAME_F_FP;
			*f = (struct stb_frame){.ip = f->ip, .sp = f->sp, .flags = flags};
		}
		if (frames && n < nframes)
			frames[n] = *f;
		stopped = o->on_frame && o->on_frame(f, o->arg) != 0;
	}
	info->nframes = n;
	info->truncated = t.truncated || (stopped && n < t.nframes) || sink.timed_out;
	rc = (int)n;
cleanup:
	if (buf != local)
		free(buf);
	return rc;
}

/*
 * One task, traced and unwound into frames as opts says. self_ip/sp/bp: the
 * frame of the public function's caller, used when a task traces itself.
 */
static int trace_one(bthread_t tid, const struct stb_trace_opts *opts, struct stb_frame *frames,
		     size_t nframes, struct stb_trace_info *info, uint64_t self_ip,
		     uint64_t self_sp, uint64_t self_bp)
{
	static const struct stb_trace_opts dflt;
	struct stb_trace_info scratch;
	const struct stb_trace_opts *o = opts ? opts : &dflt;
	if (!info)
		info = &scratch;
	memset(info, 0, sizeof(*info));
	info->id = tid;

	int ms = o->timeout_ms > 0 ? o->timeout_ms : __atomic_load_n(&stb_timeout_ms, __ATOMIC_RELAXED);
	/* The first trace reads this process's modules: not on the clock. */
	pthread_once(&stb_self_once, self_init);
	uint64_t deadline = stb_now_ns() + (uint64_t)ms * 1000000u;
	struct stb_task *t = stb_task_lookup(tid);
	if (!t || __atomic_load_n(&t->pub->id, __ATOMIC_ACQUIRE) != tid) {
		stb_say(info->error, sizeof(info->error), "no live bthread %llu",
			(unsigned long long)tid);
		return -ESRCH;
	}
	struct stb_self_tracer st;
	int rc = stb_self_tracer_open(&st, self_ip, self_sp, self_bp, deadline, info->error,
				      sizeof(info->error));
	if (rc != 0)
		return rc;
	st.timeout_ms = ms;
	memcpy(info->name, t->pub->name, sizeof(info->name));
	info->name[sizeof(info->name) - 1] = '\0';
	info->is_pthread = (t->flags & STB_TASK_F_PTHREAD) != 0;
	info->since_ns = t->pub->since_ns;

	struct stb_capture capt;
	rc = stb_driver_trace(&st.drv, t->pub, tid, deadline, &capt, info->error, sizeof(info->error));
	if (capt.retries)
		__atomic_fetch_add(&stb_tstats.retries, capt.retries, __ATOMIC_RELAXED);
	info->state = capt.state;
	info->mode = capt.mode;
	info->held_ns = capt.held_ns;
	if (capt.tid)
		info->tid = capt.tid;
	if (rc == 0 && capt.mode != STB_TRACE_NO_STACK && !o->runtime_frames) {
		rc = unwind_view(&st, &capt, o, frames, nframes, info);
		if (rc < 0)
			stb_say(info->error, sizeof(info->error), "unwinding failed: %s",
				strerror(-rc));
		else
			count(&stb_tstats.traces);
	} else if (rc == 0 && capt.mode != STB_TRACE_NO_STACK) {
		struct stb_frame_sink sink = {
			.frames = frames, .nframes = nframes, .max = o->max_depth, .skip = o->skip,
			.on_frame = o->on_frame, .arg = o->arg,
			.sym = o->no_symbols ? NULL : st.sym, .no_source = o->no_source != 0,
			.inline_frames = o->inline_frames != 0,
		};
		rc = stb_capture_unwind(st.unw, NULL, &capt, &sink);
		if (rc < 0) {
			stb_say(info->error, sizeof(info->error), "unwinding failed: %s",
				strerror(-rc));
		} else {
			info->nframes = sink.n;
			info->truncated = sink.truncated || sink.stopped;
			count(&stb_tstats.traces);
		}
	}
	stb_self_tracer_close(&st);
	return rc;
}

__attribute__((noinline)) int stb_trace(bthread_t tid, const struct stb_trace_opts *opts,
					struct stb_frame *frames, size_t nframes,
					struct stb_trace_info *info)
{
	uint64_t ip, sp, bp;
	STB_CALLER_FRAME(ip, sp, bp);
	return trace_one(tid, opts, frames, nframes, info, ip, sp, bp);
}

__attribute__((noinline)) int bthread_stack_trace(bthread_t tid, char *buf, size_t size)
{
	uint64_t ip, sp, bp;
	STB_CALLER_FRAME(ip, sp, bp);
	if (!buf && size)
		return -EINVAL;
	if (size)
		buf[0] = '\0';
	/* The frames' strings come from stb_self_sym, as stb_frame_text_add needs. */
	struct stb_frame_text tx = {.buf = buf, .size = size};
	struct stb_trace_opts o = {
		.no_source = 1, .on_frame = stb_frame_text_add, .arg = &tx,
		.runtime_frames = __atomic_load_n(&stb_text_runtime_frames, __ATOMIC_RELAXED),
	};
	struct stb_trace_info info;
	int rc = trace_one(tid, &o, NULL, 0, &info, ip, sp, bp);
	if (rc < 0)
		return rc;
	if (info.mode == STB_TRACE_NO_STACK)
		tx.len = (size_t)snprintf(buf, size, "(no stack: %s)\n", stb_state_name(info.state));
	if (size && tx.len >= size)
		buf[size - 1] = '\0';
	return tx.len > INT32_MAX ? INT32_MAX : (int)tx.len;
}

/* ---- registered pthreads ---- */

static void pthread_unregister(void *arg)
{
	struct stb_task *t = arg;
	stb_tls_pthread_task = NULL;
	stb_pthread_task_set(NULL);
	/* As a bthread's end (sched.c): destroyed in the table before joiners
	 * wake, so that a joiner never finds it live there afterwards. */
	stb_task_set_state(t, STB_TASK_SUSPENDING);
	stb_task_set_state(t, STB_TASK_DESTROYED);
	struct stb_butex *j = t->join;
	stb_lock(&j->lock);
	t->ret = NULL;
	t->ret_version = t->version;
	__atomic_store_n(&j->value, (int)t->version, __ATOMIC_RELEASE);
	stb_unlock(&j->lock);
	stb_butex_wake(j, true);
	stb_task_release(t);
}

static void pthread_key_init(void)
{
	pthread_key_create(&stb_pthread_key, pthread_unregister);
}

bthread_t bthread_init_for_pthread_stack_trace(void)
{
	if (stb_task_self()) {
		errno = EINVAL;
		return 0;
	}
	struct stb_task *t = stb_tls_pthread_task;
	if (t)
		return stb_task_id(t);
	int rc = stb_runtime_init();
	if (rc != 0) {
		errno = rc;
		return 0;
	}
	pthread_once(&stb_pthread_once, pthread_key_init);
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	char name[16] = "";
	pthread_getname_np(pthread_self(), name, sizeof(name));
	bthread_attr_set_name(&attr, name);
	t = stb_task_alloc(&attr, NULL, NULL);
	if (!t)
		return 0;
	t->flags |= STB_TASK_F_PTHREAD;
	struct stb_abi_task *p = t->pub;
	p->flags |= STB_ABI_TASK_F_PTHREAD;
	p->tag = (uint32_t)t->tag;
	p->creator_id = 0; /* not started by anyone */
	p->creator_ip = 0;
	p->creator_tid = 0;
	p->created_ns = 0; /* registered, not started: not the slot's previous occupant's */
	p->stack_lo = 0;
	p->stack_hi = 0;
	pthread_attr_t pa;
	if (pthread_getattr_np(pthread_self(), &pa) == 0) {
		void *lo;
		size_t size;
		pthread_attr_getstack(&pa, &lo, &size);
		pthread_attr_destroy(&pa);
		p->stack_lo = (uint64_t)(uintptr_t)lo;
		p->stack_hi = (uint64_t)(uintptr_t)lo + size;
	}
	p->tid = (uint32_t)stb_gettid();
	p->worker = UINT32_MAX;
	stb_task_set_state(t, STB_TASK_CREATED);
	stb_tls_pthread_task = t;
	stb_pthread_task_set(t);
	if (pthread_setspecific(stb_pthread_key, t) != 0) {
		stb_tls_pthread_task = NULL;
		stb_pthread_task_set(NULL);
		stb_task_set_state(t, STB_TASK_DESTROYED);
		stb_task_release(t);
		errno = ENOMEM;
		return 0;
	}
	stb_task_set_state(t, STB_TASK_RUNNING);
	return stb_task_id(t);
}

int stb_get_stats(struct stb_stats *out)
{
	memset(out, 0, sizeof(*out));
	struct stb_abi_header *h = __atomic_load_n(&stb_table.hdr, __ATOMIC_ACQUIRE);
	if (h) {
		out->untraceable = __atomic_load_n(&h->untraceable, __ATOMIC_RELAXED);
		out->gate_waits = __atomic_load_n(&h->gate_waits, __ATOMIC_RELAXED);
		out->gate_wait_ns = __atomic_load_n(&h->gate_wait_ns, __ATOMIC_RELAXED);
		out->gate_giveups = __atomic_load_n(&h->gate_giveups, __ATOMIC_RELAXED);
	}
	out->traces = __atomic_load_n(&stb_tstats.traces, __ATOMIC_RELAXED);
	out->signal_captures = __atomic_load_n(&stb_tstats.signal_captures, __ATOMIC_RELAXED);
	out->signal_timeouts = __atomic_load_n(&stb_tstats.signal_timeouts, __ATOMIC_RELAXED);
	out->retries = __atomic_load_n(&stb_tstats.retries, __ATOMIC_RELAXED);
	return 0;
}
