/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address symbolization (symbolize.h): one libdwfl session per target
 * process, a per-(ip, flag) cache of results, an arena that owns every string
 * and array handed out, string interning, and C++ demangling through
 * __cxa_demangle found at run time.
 */
#include "symbolize.h"
#include "util.h"
#include "stb/stb.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#define STB_SYM_ARENA_CHUNK (64u * 1024)
#define STB_SYM_AUTO_REFRESH_NS (1000ull * 1000 * 1000)

typedef char *(*stb_sym_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

struct stb_sym_chunk {
	struct stb_sym_chunk *next;
	size_t used, size;
	_Alignas(16) unsigned char data[];
};

struct stb_sym_entry {
	uint64_t ip;
	int is_ret;
	int ret;
	int src_done; /* file/line/inlines resolved */
	struct stb_sym_info info;
};

struct stb_sym {
	pthread_mutex_t lock;
	pid_t pid;          /* real pid, also for pid 0 */
	Dwfl *dwfl;
	Dwfl_Callbacks cb;
	struct stb_sym_chunk *chunks;
	struct stb_sym_entry **cache; /* open addressing, NULL = empty */
	size_t cache_cap, cache_n;
	const char **strs;  /* interned strings, open addressing */
	size_t strs_cap, strs_n;
	stb_sym_demangle_fn demangle;
	int demangle_tried;
	uint64_t last_refresh_ns;
};


static uint64_t stb_sym_hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint64_t stb_sym_hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* ------------------------------------------------------------------ arena */

static void *stb_sym_alloc(struct stb_sym *s, size_t size)
{
	struct stb_sym_chunk *c = s->chunks;

	size = (size + 15) & ~(size_t)15;
	if (!c || c->size - c->used < size) {
		size_t cs = size > STB_SYM_ARENA_CHUNK ? size : STB_SYM_ARENA_CHUNK;
		c = malloc(sizeof(*c) + cs);
		if (!c)
			return NULL;
		c->size = cs;
		c->used = 0;
		c->next = s->chunks;
		s->chunks = c;
	}
	void *p = c->data + c->used;
	c->used += size;
	return p;
}

/* Returns the arena copy of str, one per distinct string; NULL on OOM. */
static const char *stb_sym_intern(struct stb_sym *s, const char *str)
{
	uint64_t h;
	size_t i;

	if (!str)
		return NULL;
	if (s->strs_n * 2 >= s->strs_cap) {
		size_t cap = s->strs_cap ? s->strs_cap * 2 : 1024;
		const char **n = calloc(cap, sizeof(*n));
		if (!n)
			return NULL;
		for (size_t k = 0; k < s->strs_cap; k++) {
			if (!s->strs[k])
				continue;
			for (i = stb_sym_hash_str(s->strs[k]) & (cap - 1); n[i]; i = (i + 1) & (cap - 1))
				;
			n[i] = s->strs[k];
		}
		free(s->strs);
		s->strs = n;
		s->strs_cap = cap;
	}
	h = stb_sym_hash_str(str);
	for (i = h & (s->strs_cap - 1); s->strs[i]; i = (i + 1) & (s->strs_cap - 1))
		if (strcmp(s->strs[i], str) == 0)
			return s->strs[i];
	size_t len = strlen(str) + 1;
	char *copy = stb_sym_alloc(s, len);
	if (!copy)
		return NULL;
	memcpy(copy, str, len);
	s->strs[i] = copy;
	s->strs_n++;
	return copy;
}

/* ------------------------------------------------------------------ cache */

static struct stb_sym_entry *stb_sym_cache_find(struct stb_sym *s, uint64_t ip, int is_ret)
{
	if (!s->cache_cap)
		return NULL;
	for (size_t i = stb_sym_hash64(ip ^ (uint64_t)is_ret) & (s->cache_cap - 1); s->cache[i];
	     i = (i + 1) & (s->cache_cap - 1))
		if (s->cache[i]->ip == ip && s->cache[i]->is_ret == is_ret)
			return s->cache[i];
	return NULL;
}

/* Inserts e (not present); on OOM the result is just not cached. */
static void stb_sym_cache_put(struct stb_sym *s, struct stb_sym_entry *e)
{
	size_t i;

	if ((s->cache_n + 1) * 2 > s->cache_cap) {
		size_t cap = s->cache_cap ? s->cache_cap * 2 : 1024;
		struct stb_sym_entry **n = calloc(cap, sizeof(*n));
		if (!n)
			return;
		for (size_t k = 0; k < s->cache_cap; k++) {
			struct stb_sym_entry *x = s->cache[k];
			if (!x)
				continue;
			for (i = stb_sym_hash64(x->ip ^ (uint64_t)x->is_ret) & (cap - 1); n[i]; i = (i + 1) & (cap - 1))
				;
			n[i] = x;
		}
		free(s->cache);
		s->cache = n;
		s->cache_cap = cap;
	}
	for (i = stb_sym_hash64(e->ip ^ (uint64_t)e->is_ret) & (s->cache_cap - 1); s->cache[i];
	     i = (i + 1) & (s->cache_cap - 1))
		;
	s->cache[i] = e;
	s->cache_n++;
}

/* ------------------------------------------------------------ demangling */

/* Interned demangled form of a C++ symbol, else of name itself. */
static const char *stb_sym_name(struct stb_sym *s, const char *name)
{
	if (!name)
		return NULL;
	if (name[0] == '_' && name[1] == 'Z') {
		if (!s->demangle_tried) {
			void *h;
			s->demangle_tried = 1;
			s->demangle = (stb_sym_demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
			/* Not loaded here: load it privately, once; it stays loaded. */
			if (!s->demangle && (h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL)))
				s->demangle = (stb_sym_demangle_fn)dlsym(h, "__cxa_demangle");
		}
		if (s->demangle) {
			int status = -1;
			char *d = s->demangle(name, NULL, NULL, &status);
			if (d && status == 0) {
				const char *r = stb_sym_intern(s, d);
				free(d);
				if (r)
					return r;
			} else {
				free(d);
			}
		}
	}
	return stb_sym_intern(s, name);
}

/* ------------------------------------------------------------- libdwfl */

/* Like dwfl_standard_find_debuginfo, but never asks debuginfod servers
 * (a network round trip inside a tracer): with DEBUGINFOD_URLS set, only the
 * local build-id tree is searched besides the file itself. */
static int stb_sym_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
				  const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
				  char **debuginfo_file_name)
{
	const char *urls = getenv("DEBUGINFOD_URLS");
	const unsigned char *bits;
	GElf_Addr vaddr;
	char path[256];
	int len, n;

	if (!urls || !*urls)
		return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
						    debuglink_crc, debuginfo_file_name);
	len = dwfl_module_build_id(mod, &bits, &vaddr);
	if (len < 2 || len > 64)
		return -1;
	n = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", bits[0]);
	for (int i = 1; i < len; i++)
		n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", bits[i]);
	snprintf(path + n, sizeof(path) - (size_t)n, ".debug");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		*debuginfo_file_name = strdup(path);
	}
	return fd;
}

static int stb_sym_report(struct stb_sym *s)
{
	int ret;

	dwfl_report_begin(s->dwfl);
	ret = dwfl_linux_proc_report(s->dwfl, s->pid);
	if (dwfl_report_end(s->dwfl, NULL, NULL) != 0 && ret == 0)
		ret = ENOMEM;
	s->last_refresh_ns = stb_now_ns();
	if (ret > 0)
		return ret == ENOENT ? -ESRCH : -ret;
	return ret < 0 ? -EIO : 0;
}

struct stb_sym *stb_sym_new(pid_t pid)
{
	struct stb_sym *s = NULL;
	int ret = 0, have_lock = 0;

	if (pid < 0) {
		ret = -EINVAL;
		goto cleanup;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		ret = -ENOMEM;
		goto cleanup;
	}
	s->pid = pid ? pid : getpid();
	ret = -pthread_mutex_init(&s->lock, NULL);
	if (ret < 0)
		goto cleanup;
	have_lock = 1;
	s->cb.find_elf = dwfl_linux_proc_find_elf;
	s->cb.find_debuginfo = stb_sym_find_debuginfo;
	s->dwfl = dwfl_begin(&s->cb);
	if (!s->dwfl) {
		ret = -ENOMEM;
		goto cleanup;
	}
	ret = stb_sym_report(s);
cleanup:
	if (ret < 0) {
		if (s) {
			if (s->dwfl)
				dwfl_end(s->dwfl);
			if (have_lock)
				pthread_mutex_destroy(&s->lock);
			free(s);
		}
		errno = -ret;
		return NULL;
	}
	return s;
}

void stb_sym_free(struct stb_sym *s)
{
	if (!s)
		return;
	dwfl_end(s->dwfl);
	while (s->chunks) {
		struct stb_sym_chunk *c = s->chunks;
		s->chunks = c->next;
		free(c);
	}
	free(s->cache);
	free(s->strs);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void stb_sym_cache_clear(struct stb_sym *s)
{
	if (s->cache)
		memset(s->cache, 0, s->cache_cap * sizeof(*s->cache));
	s->cache_n = 0;
}

int stb_sym_refresh(struct stb_sym *s)
{
	int ret;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	ret = stb_sym_report(s);
	stb_sym_cache_clear(s);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* Name of a DWARF function DIE (follows abstract origins), demangled. */
static const char *stb_sym_die_name(struct stb_sym *s, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *n = NULL;

	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
		n = dwarf_formstring(&a);
	if (!n && dwarf_attr_integrate(die, DW_AT_name, &a))
		n = dwarf_formstring(&a);
	return stb_sym_name(s, n);
}

/* Fills the inline frames at addr (module-relative by dbias) and moves
 * file/line out to the outermost call site. */
static void stb_sym_inlines(struct stb_sym *s, Dwfl_Module *mod, Dwarf_Addr addr, struct stb_sym_info *info)
{
	Dwarf_Addr dbias = 0;
	Dwarf_Die *cu = dwfl_module_addrdie(mod, addr, &dbias);
	Dwarf_Die *scopes = NULL;
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	int n, k = 0;

	if (!cu)
		return;
	n = dwarf_getscopes(cu, addr - dbias, &scopes);
	if (n <= 0)
		goto cleanup;
	for (int i = 0; i < n; i++)
		if (dwarf_tag(&scopes[i]) == DW_TAG_inlined_subroutine)
			k++;
	if (k == 0)
		goto cleanup;
	struct stb_sym_inline *inl = stb_sym_alloc(s, (size_t)k * sizeof(*inl));
	if (!inl)
		goto cleanup;
	if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
		files = NULL;
	const char *file = info->file;
	int line = info->line, j = 0;
	for (int i = 0; i < n; i++) {
		Dwarf_Attribute a;
		Dwarf_Word w;

		if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine)
			continue;
		inl[j].function = stb_sym_die_name(s, &scopes[i]);
		inl[j].file = file;
		inl[j].line = line;
		j++;
		file = NULL;
		line = 0;
		if (files && dwarf_attr(&scopes[i], DW_AT_call_file, &a) && dwarf_formudata(&a, &w) == 0 && w < nfiles)
			file = stb_sym_intern(s, dwarf_filesrc(files, w, NULL, NULL));
		if (dwarf_attr(&scopes[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0)
			line = (int)w;
	}
	info->ninline = (unsigned)k;
	info->inlines = inl;
	info->file = file;
	info->line = line;
cleanup:
	free(scopes);
}

static void stb_sym_resolve(struct stb_sym *s, uint64_t ip, int is_ret, struct stb_sym_entry *e)
{
	struct stb_sym_info *info = &e->info;
	Dwarf_Addr addr = is_ret && ip ? ip - 1 : ip, start, bias = 0;
	const unsigned char *bits;
	GElf_Addr idaddr;
	const char *name, *mainfile = NULL;
	Dwfl_Module *mod;
	GElf_Off off = 0;
	GElf_Sym sym;
	int len;

	memset(info, 0, sizeof(*info));
	e->ret = -ENOENT;
	mod = dwfl_addrmodule(s->dwfl, addr);
	if (!mod && stb_now_ns() - s->last_refresh_ns >= STB_SYM_AUTO_REFRESH_NS) {
		/* The target may have loaded a module since. */
		stb_sym_report(s);
		stb_sym_cache_clear(s);
		mod = dwfl_addrmodule(s->dwfl, addr);
	}
	if (!mod)
		return;
	Elf *elf = dwfl_module_getelf(mod, &bias); /* finds the file: sets mainfile */
	name = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, &mainfile, NULL);
	info->module_offset = elf ? ip - bias : ip - start;
	if (name && strncmp(name, "[vdso", 5) == 0)
		info->module = stb_sym_intern(s, "[vdso]");
	else
		info->module = stb_sym_intern(s, name ? name : mainfile);
	len = dwfl_module_build_id(mod, &bits, &idaddr);
	if (len > 0 && len <= 64) {
		char hex[129];
		for (int i = 0; i < len; i++)
			snprintf(hex + 2 * i, 3, "%02x", bits[i]);
		info->build_id = stb_sym_intern(s, hex);
	}
	name = dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);
	if (name) {
		info->function = stb_sym_name(s, name);
		info->offset = off + (ip - addr);
	}
	e->ret = info->function ? 0 : -ENOENT;
}

/* Source position and inline frames of an entry (reads DWARF: may be slow). */
static void stb_sym_resolve_source(struct stb_sym *s, struct stb_sym_entry *e)
{
	struct stb_sym_info *info = &e->info;
	Dwarf_Addr addr = e->is_ret && e->ip ? e->ip - 1 : e->ip;
	e->src_done = 1;
	Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
	if (!mod)
		return;
	Dwfl_Line *l = dwfl_module_getsrc(mod, addr);
	if (l) {
		int lineno = 0;
		const char *file = dwfl_lineinfo(l, NULL, &lineno, NULL, NULL, NULL);
		if (file) {
			info->file = stb_sym_intern(s, file);
			info->line = lineno;
		}
	}
	stb_sym_inlines(s, mod, addr, info);
}

int stb_sym_lookup(struct stb_sym *s, uint64_t ip, int flags, struct stb_sym_info *out)
{
	struct stb_sym_entry *e, tmp;
	int is_ret = flags & STB_SYM_RETURN, ret;

	if (!s || !out)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	e = stb_sym_cache_find(s, ip, is_ret);
	if (!e) {
		e = stb_sym_alloc(s, sizeof(*e));
		if (!e)
			e = &tmp; /* answer without caching */
		e->ip = ip;
		e->is_ret = is_ret;
		e->src_done = 0;
		stb_sym_resolve(s, ip, is_ret, e);
		if (e != &tmp)
			stb_sym_cache_put(s, e);
	}
	if (!(flags & STB_SYM_NO_SOURCE) && !e->src_done)
		stb_sym_resolve_source(s, e);
	*out = e->info;
	if (flags & STB_SYM_NO_SOURCE && !e->src_done) {
		out->file = NULL;
		out->line = 0;
		out->ninline = 0;
		out->inlines = NULL;
	}
	ret = e->ret;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

bool stb_sym_fill_frame(struct stb_sym *s, int flags, struct stb_frame *f,
			struct stb_sym_info *si)
{
	memset(si, 0, sizeof(*si));
	if (!s || (stb_sym_lookup(s, f->ip, flags, si) != 0 && !si->module))
		return false;
	f->symbol = si->function;
	f->offset = si->offset;
	f->module = si->module;
	f->module_offset = si->module_offset;
	f->build_id = si->build_id;
	f->file = si->file;
	f->line = si->line;
	return true;
}
