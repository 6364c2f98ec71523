/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: loader/corefile.c, the core file reader, on an arbitrary file
 * (a memfd holding the input): opened and checked; when it opens, every
 * thread and file it lists is looked up and reads are tried at the start,
 * middle and end of each segment and across its ends.
 */
#include "fuzz.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "corefile.h"
#include "table/driver.h" /* enum stb_cut */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_corefile", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t off = 0;
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);
		if (n <= 0) {
			close(fd);
			return 0;
		}
		off += (size_t)n;
	}
	char err[512];
	struct stb_corefile *c = stb_corefile_open_fd(fd, "fuzz", err, sizeof(err));
	if (!c) {
		close(fd);
		return 0;
	}
	uint8_t buf[256];
	size_t segs = c->nsegs < 64 ? c->nsegs : 64;
	for (size_t i = 0; i < segs; i++) {
		const struct stb_corefile_seg *s = &c->segs[i];
		uint64_t at[] = {s->vaddr, s->vaddr + s->memsz / 2, s->vaddr + s->memsz - 8,
				 s->vaddr + s->memsz - 1, s->vaddr - 1};
		for (unsigned k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
			(void)stb_corefile_seg_at(c, at[k]);
			(void)stb_corefile_map_at(c, at[k]);
			(void)stb_corefile_read(c, at[k], buf, sizeof(buf));
			(void)stb_corefile_read(c, at[k], buf, 1);
		}
	}
	size_t threads = c->nthreads < 64 ? c->nthreads : 64;
	for (size_t i = 0; i < threads; i++) {
		const struct stb_corefile_thread *t = stb_corefile_thread_any(c, c->threads[i].tid);
		if (!t || (t->has_regs && stb_corefile_thread_of(c, t->tid) != t) ||
		    t->name[sizeof(t->name) - 1] != '\0' || t->cut >= STB_CUT_NKINDS)
			__builtin_trap(); /* the index, a name's end and a cut's range hold */
	}
	size_t files = c->nfiles < 64 ? c->nfiles : 64;
	for (size_t i = 0; i < files; i++)
		if (c->files[i].path)
			(void)strlen(c->files[i].path);
	stb_corefile_close(c);
	close(fd);
	return 0;
}
