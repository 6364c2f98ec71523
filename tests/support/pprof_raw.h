/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: a parser of `go tool pprof -raw` output (samples with values,
 * labels and location ids; locations with function names; mappings;
 * comments), so that tests check what pprof itself reads.
 */
#ifndef STB_TESTS_SUPPORT_PPROF_RAW_H
#define STB_TESTS_SUPPORT_PPROF_RAW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_PROF_MAX_VALUES 4
#define TS_PROF_MAX_STACK 256

struct ts_sample {
	int64_t v[TS_PROF_MAX_VALUES];
	int nv;
	uint64_t loc[TS_PROF_MAX_STACK]; /* location ids, the leaf first */
	int nloc;
	char labels[2048]; /* "key:[v v] key:[v]" string and numeric lines joined */
};

struct ts_loc {
	uint64_t id;
	uint64_t addr;
	int mapping;
	int nfunc;
	char func[8][128]; /* functions, the innermost first */
	char pos[8][256];  /* "file:line" of each function, "" when pprof shows none */
};

struct ts_map {
	int id;
	char file[512];
	char build_id[129];
	char bits[32];
};

struct ts_prof {
	char types[256]; /* the sample type line */
	char *comments;  /* "Comment: " lines joined with '\n' */
	struct ts_sample *s;
	int ns;
	struct ts_loc *l;
	int nl;
	struct ts_map *m;
	int nm;
};

void ts_prof_free(struct ts_prof *p);

/* Parses the text of `go tool pprof -raw`. Returns 0 or -1 with why set. */
int ts_prof_parse(const char *text, struct ts_prof *p, char *why, size_t wsize);

/* Runs `go tool pprof -raw -symbolize=none file` ($STB_GO) and parses it. 0 or -1. */
int ts_pprof_raw(const char *file, struct ts_prof *p, char *why, size_t wsize);

/* Location id of p, or NULL. */
const struct ts_loc *ts_prof_loc(const struct ts_prof *p, uint64_t id);

/* Writes the logical frames of sample s (the leaf first, inline frames
 * expanded) as "f0;f1;...;fn" into buf. */
void ts_sample_stack(const struct ts_prof *p, const struct ts_sample *s, char *buf, size_t size);

/* Does "key:[...]" in the labels of s contain value as one of its values? */
bool ts_sample_has_label(const struct ts_sample *s, const char *key, const char *value);

/* The number of values of label key in s (0 when absent). */
int ts_sample_label_count(const struct ts_sample *s, const char *key);

/* "key=NUMBER" in text (e.g. the stats comment), or -1. */
long long ts_stat(const char *text, const char *key);

#endif /* STB_TESTS_SUPPORT_PPROF_RAW_H */
