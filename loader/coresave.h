/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --pid P --save FILE: a core file of a live process written
 * by the loader itself, for --core later (here or on another machine): the
 * task table, every traced task's stack as its trace read it, the running
 * tasks' registers, the first pages of its modules (build ids), its file
 * mappings -- what --core reads, nothing more. Taken like a snapshot (the
 * same collector, leases and BPF captures), so it works where gcore cannot
 * copy the stacks (MADV_GUARD_INSTALL guards, Linux 6.13+).
 */
#ifndef STB_LOADER_CORESAVE_H
#define STB_LOADER_CORESAVE_H

#include "loader.h"

/* The default size budget of a saved core (--save-max, MiB). */
#define STB_CORESAVE_DEFAULT_MAX_MIB 1024u
#define STB_CORESAVE_MAX_MIB (1u << 20) /* 1 TiB */

/*
 * Saves process o->pid into o->save (o->overwrite: replace an existing file;
 * o->save_max_mib: the budget), bounded by o's deadline. Prints what it did
 * and why it failed on stderr. Exit status: 0 every task saved with its
 * stack, 1 otherwise (a task not traced, the budget reached, the deadline,
 * an error: nothing is left at FILE unless it was written completely).
 */
int stb_coresave_run(const struct stb_loader_opts *o);

#endif /* STB_LOADER_CORESAVE_H */
