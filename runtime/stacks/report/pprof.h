/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stack profiles people can look at, shared by stb_dump (in-process) and
 * stb-bpf-loader (snapshots and --profile): a builder that interns stacks,
 * merges samples with the same stack and labels, symbolizes at the end (inline
 * frames, mappings with build ids) and writes pprof (gzipped profile.proto,
 * runtime/stacks/report/profile.proto), Brendan Gregg's folded stacks, or JSON.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_PPROF_H
#define STB_RUNTIME_STACKS_REPORT_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report/model.h"

struct stb_sym;
struct stb_unw_proc;

#define STB_PPROF_MAX_VALUES 4u

/* Synthetic frames (no address). */
#define STB_PPROF_NOTE_NO_STACK "[no stack]"
#define STB_PPROF_NOTE_FAILED "[trace failed]"
#define STB_PPROF_NOTE_TRUNCATED "[truncated]"
#define STB_PPROF_NOTE_KERNEL "[kernel]"
#define STB_PPROF_NOTE_UNTRACEABLE "[beyond the table capacity]"

struct stb_pprof_type {
	const char *type; /* e.g. "samples", "cpu" */
	const char *unit; /* e.g. "count", "nanoseconds" */
};

struct stb_pprof_opts {
	unsigned nvalues;                                  /* 1..STB_PPROF_MAX_VALUES */
	struct stb_pprof_type types[STB_PPROF_MAX_VALUES]; /* meaning of each value */
	int default_type;                 /* index into types shown by default; -1: none */
	struct stb_pprof_type period_type; /* type NULL: none */
	int64_t period;
	int64_t time_ns;                  /* start, Unix epoch ns; 0: unset */
	int64_t duration_ns;
	/* Symbolization at write time of the process the addresses belong to:
	 * functions, source lines and inline frames from sym, mapping ranges and
	 * build ids from unw. sym NULL: addresses only; unw NULL: mappings from
	 * the symbolizer's module and offset. Borrowed; must outlive the writes. */
	struct stb_sym *sym;
	struct stb_unw_proc *unw;
	/* Bounded memory: at most this many distinct stacks (and four times as
	 * many distinct addresses); 0 = no bound. */
	unsigned max_stacks;
	/* CLOCK_MONOTONIC ns after which no symbol is looked up (addresses and
	 * mappings only); 0 = none. */
	uint64_t sym_deadline;
	/* Leave out the runtime's own frames when written (rtframes.h): those
	 * of each stack, as a report's view does, and the runtime's internals
	 * inlined into its functions. Needs sym. */
	bool hide_runtime;
};

/* A label of a sample: a string (str != NULL) or a number. */
struct stb_pprof_label {
	const char *key;
	const char *str;
	int64_t num;
	const char *unit; /* numbers only; may be NULL */
};

/* A stack to intern: physical frames, the innermost first. */
struct stb_pprof_stack {
	const uint64_t *ips;
	unsigned n;
	bool first_exact;  /* ips[0] is the interrupted instruction (running capture),
	                      not a return address */
	const char *leaf;  /* synthetic frame inside ips[0] (STB_PPROF_NOTE_*), or NULL */
	const char *root;  /* synthetic frame above ips[n - 1], or NULL */
};

struct stb_pprof;

/* A new, empty profile. Returns NULL with errno EINVAL (bad opts) or ENOMEM. */
struct stb_pprof *stb_pprof_new(const struct stb_pprof_opts *opts);

/* Frees p; accepts NULL. */
void stb_pprof_free(struct stb_pprof *p);

/* Interns a stack. Returns its id (>= 0), -ENOSPC when it is new and
 * opts.max_stacks is reached, or -ENOMEM / -EINVAL. */
int64_t stb_pprof_stack(struct stb_pprof *p, const struct stb_pprof_stack *s);

/*
 * Adds values (opts.nvalues of them) to the sample with this stack id and
 * these labels (in this order), creating it if needed. Returns the sample's
 * index (>= 0), usable with stb_pprof_sample_add, or -ENOMEM / -EINVAL.
 */
int64_t stb_pprof_sample(struct stb_pprof *p, uint32_t stack, const struct stb_pprof_label *labels,
			 unsigned nlabels, const int64_t *values);

/* Adds values to sample idx (from stb_pprof_sample). Returns 0 or -EINVAL. */
int stb_pprof_sample_add(struct stb_pprof *p, uint32_t idx, const int64_t *values);

/* Number of samples / of distinct stacks so far. */
size_t stb_pprof_nsamples(const struct stb_pprof *p);
size_t stb_pprof_nstacks(const struct stb_pprof *p);

/* Sets Profile.duration_nanos (known only at the end of a profile). */
void stb_pprof_set_duration(struct stb_pprof *p, int64_t duration_ns);

/* Comment lines longer than this are wrapped. */
#define STB_PPROF_COMMENT_WIDTH 80u

/* Appends a comment (pprof Profile.comment, JSON "comments"): one line, or
 * several when longer than STB_PPROF_COMMENT_WIDTH (wrapped at spaces,
 * continuation lines indented by two). 0 or -ENOMEM. */
int stb_pprof_comment(struct stb_pprof *p, const char *text);

/* Writes the gzipped profile.proto. Returns 0 or -errno (-EIO: write error). */
int stb_pprof_write(struct stb_pprof *p, FILE *out);

/*
 * Writes folded stacks: one line per distinct logical stack, root first,
 * frames separated by ';', then a space and the sum of value `value` over the
 * samples that share the line; lines sorted. The first frame is the sample's
 * root_key label (e.g. "state") when it has one. Inline frames are expanded;
 * unknown functions are "module+0xoffset" or "0xaddress"; ';' in names
 * becomes ':'. Lines whose sum is 0 are left out. Returns 0 or -errno.
 */
int stb_pprof_write_folded(struct stb_pprof *p, FILE *out, const char *root_key, unsigned value);

/* The lines of stb_pprof_write_folded, without the count, in the same order:
 * calls fn(arg, line, count) for each. Returns 0, fn's first non-zero
 * return, or -errno. */
int stb_pprof_folded_each(struct stb_pprof *p, const char *root_key, unsigned value,
			  int (*fn)(void *arg, const char *line, int64_t count), void *arg);

/*
 * Writes the JSON document "stb-profile/1" of docs/json.md, with the members
 * of meta (may be NULL) at the top. 0 or -errno.
 */
int stb_pprof_write_json(struct stb_pprof *p, FILE *out, const struct stb_report_meta *meta);

#endif /* STB_RUNTIME_STACKS_REPORT_PPROF_H */
