/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What one shared cache line costs the core that writes it, on this machine:
 * a thread stores to a line in a loop (4 stores a round, like a switch's four
 * task-word stores, plus a locked add on its own line, like a run queue's
 * CAS) while a second thread, on another CPU, leaves the line alone, reads it,
 * or writes it once every K rounds. The extra time per round over the private
 * case, divided by the rounds the other thread touched, is the price of one
 * line transfer. Plain pthreads, no runtime: it isolates the hardware.
 * Not a test (docs/benchmarks.md, "The switch path's cache lines").
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 64

struct line {
	uint64_t w[8];
} __attribute__((aligned(128)));

static struct line shared_line, own_line, other_own;
static int stop, mode, every;
static long other_touches;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

/* The other CPU: mode 0 idle spin on its own line, 1 reads the shared line,
 * 2 writes it; once every `every` rounds of its own loop (~ the writer's). */
static void *other(void *arg)
{
	(void)arg;
	pin(1);
	long n = 0, touches = 0;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&other_own.w[0], 1, __ATOMIC_RELAXED);
		__asm__ volatile("" ::: "memory");
		if (++n % every == 0) {
			if (mode == 1)
				(void)__atomic_load_n(&shared_line.w[1], __ATOMIC_ACQUIRE);
			else if (mode == 2)
				__atomic_store_n(&shared_line.w[7], (uint64_t)n, __ATOMIC_RELEASE);
			touches += mode != 0;
		}
	}
	other_touches = touches;
	return NULL;
}

/* ns per writer round with the other thread in mode m, touching every k rounds;
 * *per_touch: extra ns per touch over base_ns (0: not computed). */
static double run(int m, int k, double secs, double base_ns, double *per_touch)
{
	mode = m;
	every = k;
	stop = 0;
	pthread_t th;
	pthread_create(&th, NULL, other, NULL);
	usleep(10000);
	long n = 0;
	double t0 = now(), t1;
	do {
		for (int i = 0; i < 1000; i++) {
			/* Four release stores to the line, then a locked op on an own
			 * line: the store buffer drains there, as at a queue's CAS. */
			__atomic_store_n(&shared_line.w[0], (uint64_t)n, __ATOMIC_RELEASE);
			__atomic_store_n(&shared_line.w[1], (uint64_t)n, __ATOMIC_RELEASE);
			__atomic_store_n(&shared_line.w[2], (uint64_t)n, __ATOMIC_RELEASE);
			__atomic_store_n(&shared_line.w[3], (uint64_t)n, __ATOMIC_RELEASE);
			__atomic_fetch_add(&own_line.w[0], 1, __ATOMIC_ACQ_REL);
			n++;
		}
		t1 = now();
	} while (t1 - t0 < secs);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	double ns = (t1 - t0) * 1e9 / (double)n;
	if (per_touch)
		*per_touch = other_touches ? (ns - base_ns) * (double)n / (double)other_touches : 0;
	return ns;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	int rounds = 9;
	double secs = 0.2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc)
			secs = atof(argv[++i]);
		else {
			fprintf(argv[i][0] == '-' && argv[i][1] == 'h' ? stdout : stderr,
				"usage: bench_lines [--rounds N (1-%d)] [--secs S]\n"
				"  e.g. bench_lines --rounds 9\n"
				"Needs 2 CPUs (0 and 1).\n",
				MAX_ROUNDS);
			return argv[i][0] == '-' && argv[i][1] == 'h' ? 0 : 64;
		}
	}
	if (rounds < 1 || rounds > MAX_ROUNDS || secs <= 0 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "bench_lines: --rounds 1-%d, --secs > 0, 2 CPUs\n", MAX_ROUNDS);
		return 64;
	}
	pin(0);
	static const int ks[] = {1000, 100, 10};
	printf("bench_lines: 4 stores + 1 locked add a round on CPU 0; CPU 1 touches the line "
	       "once every K of its rounds; %d rounds, medians\n",
	       rounds);
	printf("| the other CPU | ns per writer round | extra ns per touch |\n|---|---|---|\n");
	double base[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++)
		base[r] = run(0, 1000, secs, 0, NULL);
	double b = median(base, rounds);
	printf("| leaves the line alone | %.2f | |\n", b);
	for (int m = 1; m <= 2; m++)
		for (unsigned j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
			double ns[MAX_ROUNDS], pt[MAX_ROUNDS];
			for (int r = 0; r < rounds; r++)
				ns[r] = run(m, ks[j], secs, b, &pt[r]);
			printf("| %s it every %d rounds | %.2f | %.1f |\n", m == 1 ? "reads" : "writes",
			       ks[j], median(ns, rounds), median(pt, rounds));
		}
	return 0;
}
