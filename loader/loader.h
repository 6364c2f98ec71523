/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the parts of stb-bpf-loader share: the parsed command line, the run's
 * deadline and its watchdog (deadline.c), the snapshot (snapshot.c) and the
 * profile (profile.c) runs, and continuous mode (every.c) repeating either.
 */
#ifndef STB_LOADER_LOADER_H
#define STB_LOADER_LOADER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define STB_EXIT_OK 0
#define STB_EXIT_FAIL 1
#define STB_EXIT_USAGE 64

#define STB_LOADER_MAX_IDS 1024u
#define STB_LOADER_DEFAULT_DEADLINE_S 30u
#define STB_LOADER_MAX_DEADLINE_S 86400u

struct stb_loader_opts {
	pid_t pid;
	uint64_t ids[STB_LOADER_MAX_IDS];
	unsigned nids;
	unsigned state_mask; /* 1u << state, states < STB_TASK_NSTATES */
	bool group;
	unsigned max_depth;
	bool runtime_frames; /* show the runtime's own frames */
	bool lines;          /* --lines: file:line and inline frames in text (the default) */
	bool no_lines;       /* --no-lines: text without them */
	bool no_threads;     /* --no-threads: leave out the thread section */
	int format; /* enum stb_format */
	bool format_set;
	uint64_t stuck_ns;    /* --stuck: only tasks stuck this long; 0 = all */
	bool leaks;           /* --leaks: bthreads by creation site, no stacks */
	unsigned timeout_ms;  /* per task */
	uint64_t deadline_ns; /* the whole run, from its start */
	uint64_t start_ns;    /* CLOCK_MONOTONIC when the run started */
	int verbose;
	const char *output;
	/* --core: a core file instead of a process (no root needed) */
	const char *core;
	const char *exe;     /* --exe: the main program's file */
	const char *sysroot; /* --sysroot: where the core's files are */
	/* --save: a core file of the --pid process, written by the loader */
	const char *save;
	bool overwrite;        /* --overwrite: replace an existing --save file */
	unsigned save_max_mib; /* --save-max: its size budget */
	/* --profile */
	bool profile;
	uint64_t duration_ns;
	unsigned freq;
	/* --every: continuous mode */
	uint64_t every_ns;   /* 0: one run */
	const char *out_dir;
	unsigned keep;       /* files kept in out_dir */
};

/*
 * Output streams (output.c). stb_loader_out_buffer gives out, right after it
 * is opened and before anything is written to it, a buffer of 1 MiB, unless
 * it is a terminal: one for stdout, and one for a single file stream at a
 * time, which stb_loader_out_close (fclose's result) gives back. Not
 * thread-safe: the main thread's.
 */
void stb_loader_out_buffer(FILE *out);
int stb_loader_out_close(FILE *out);

/*
 * The -o file. stb_loader_out_open opens path for writing, buffered: a new
 * file is created (0666 less the umask); an existing regular file keeps its
 * contents until the first byte is written, then is truncated; a device or
 * pipe (/dev/null, /dev/stderr) is written as it is. Returns 0 or -errno (a
 * file it created is removed again). stb_loader_out_finish closes it (fclose's
 * result) and, when !keep (nothing was written), removes the file only if this
 * run created it and it is still the one at path. Not thread-safe.
 */
struct stb_loader_out {
	FILE *f;
	const char *path;
	bool created;
	dev_t dev;
	ino_t ino;
};
int stb_loader_out_open(struct stb_loader_out *o, const char *path);
int stb_loader_out_finish(struct stb_loader_out *o, bool keep);

/* The run's end (CLOCK_MONOTONIC ns). */
static inline uint64_t stb_loader_deadline(const struct stb_loader_opts *o)
{
	return o->start_ns + o->deadline_ns;
}

/* Time kept at the end of the run for writing the output: tracing stops
 * this long before the deadline (a quarter of it, at most 5 s). Symbols are
 * looked up until a fifth of it is left; then frames keep their addresses
 * only, and the rest is plain writing. */
static inline uint64_t stb_loader_reserve_ns(const struct stb_loader_opts *o)
{
	uint64_t r = o->deadline_ns / 4;
	return r < 5000000000ull ? r : 5000000000ull;
}

static inline uint64_t stb_loader_sym_deadline(const struct stb_loader_opts *o)
{
	return stb_loader_deadline(o) - stb_loader_reserve_ns(o) / 5;
}

/*
 * Starts the watchdog: a thread that ends the process with exit status 1 and
 * a message at the run's deadline if it is still running then (a phase that
 * cannot be interrupted, e.g. parsing a huge module); the message says that
 * the output is incomplete. Returns 0 or -errno.
 */
int stb_deadline_start(const struct stb_loader_opts *o);

/* Names what the run is doing now, for the watchdog's message (a string
 * literal). Thread-safe. */
void stb_deadline_phase(const char *phase);

/* Re-arms the watchdog: the process ends at CLOCK_MONOTONIC end_ns
 * (UINT64_MAX: never, until re-armed). Thread-safe. */
void stb_deadline_arm(uint64_t end_ns);

/* The sentence of every report about n bthreads created beyond a table of
 * capacity slots: not in the report, and the capacity that would hold them
 * (snapshot.c). */
void stb_loader_untraceable_note(char *buf, size_t len, uint64_t n, uint32_t capacity);

/* The snapshot (snapshot.c) and the profile (profile.c): exit status. */
int stb_snapshot_run(const struct stb_loader_opts *o);
int stb_profile_run(const struct stb_loader_opts *o);

/*
 * A snapshot session (snapshot.c): the target opened, its modules read and
 * the symbolizer, the BPF capture (loaded at the first running task), kept
 * for any number of snapshots. stb_snapshot_open prints why it failed and
 * returns NULL. stb_snapshot_once traces and writes one snapshot to out
 * (per o's deadline from start_ns) and returns its exit status;
 * stb_snapshot_close accepts NULL. Not thread-safe.
 */
struct stb_snapshot_session;

struct stb_run_result {
	bool written;      /* the report was written (maybe partial) */
	bool write_failed; /* writing it failed */
	bool target_gone;  /* the target exited */
	size_t tasks;
};

struct stb_snapshot_session *stb_snapshot_open(const struct stb_loader_opts *o);
int stb_snapshot_once(struct stb_snapshot_session *s, uint64_t start_ns, FILE *out,
		      struct stb_run_result *res);
bool stb_snapshot_target_alive(struct stb_snapshot_session *s);
void stb_snapshot_close(struct stb_snapshot_session *s);

/* Continuous mode (every.c): snapshots or profiles every o->every_ns into
 * o->out_dir until SIGTERM/SIGINT or the target's exit. Exit status. */
int stb_every_run(const struct stb_loader_opts *o);

#endif /* STB_LOADER_LOADER_H */
