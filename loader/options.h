/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's command line (options.c): its options in one table, from
 * which the parser and --help come.
 */
#ifndef STB_LOADER_OPTIONS_H
#define STB_LOADER_OPTIONS_H

#include "loader.h"

/*
 * Parses argv into *o (zeroed first, defaults set) and checks that the
 * options go together, printing why they do not. Returns 0, -1 when the run
 * is done (--help, --version printed) or STB_EXIT_USAGE. Not thread-safe
 * (getopt).
 */
int stb_loader_parse_args(int argc, char **argv, struct stb_loader_opts *o);

#endif /* STB_LOADER_OPTIONS_H */
