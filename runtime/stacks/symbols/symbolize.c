/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address symbolization (symbolize.h): one libdwfl session per target
 * process, fed by the target's module registry (modules.h) instead of its
 * own /proc scan; libdwfl never maps a target's file: main files are opened
 * with ELF_C_READ (pread on demand), separate debug files are copied into a
 * sealed memfd first. A per-(ip, flag) cache of results, a symbol index per
 * module (symindex.h) in front of libdwfl's lookup, an arena that owns
 * every string and array handed out, string interning, C++ demangling
 * through __cxa_demangle found at run time, the compile unit of an address
 * from .debug_aranges or else from the units' own ranges (cuindex.h), and
 * inline frames from the concrete inlined calls at the address
 * (inlchain.h), innermost first.
 */
#include "encode/escape.h"
#include "hashset.h"
#include "stb/stb.h"
#include "symbols/cuindex.h"
#include "symbols/inlchain.h"
#include "symbols/symbolize.h"
#include "symbols/symindex.h"
#include "unwind/modules.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <libelf.h>
#include <zlib.h>

#define STB_SYM_ARENA_CHUNK (64u * 1024)
#define STB_SYM_AUTO_REFRESH_NS (1000ull * 1000 * 1000)
/* Separate debug files larger than this are not used (they are copied). */
#define STB_SYM_MAX_DEBUG_FILE (512ull * 1024 * 1024)
/* Symbol and unit indexes of one session together (symindex.h, cuindex.h):
 * beyond, libdwfl alone. */
#define STB_SYM_MAX_INDEX_BYTES (64ull * 1024 * 1024)
#define STB_SYM_FUSE_MAGIC 0x65735546

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

/* What find_elf needs of a module: the userdata of its Dwfl_Module. */
struct stb_sym_modrec {
	struct stb_sym *s;
	const char *path;
	dev_t dev;
	ino_t ino;
	uint64_t map_lo, map_hi;
	const uint8_t *image; /* vdso: our copy (arena), else NULL */
	size_t image_len;
	bool elf_ok;          /* the registry parsed it as the mapped file */
	unsigned mflags;      /* the registry's STB_UNW_MOD_* */
	unsigned lookups;     /* addresses looked up before the index was built */
	bool no_index;        /* the index could not be built: libdwfl alone */
	struct stb_symidx *idx; /* its symbols by address (arena), built at the second lookup */
	bool no_cuidx;        /* no unit index: no ranges of code, or no memory */
	struct stb_cuidx *cuidx; /* its units by address (arena), built when aranges fail */
};

struct stb_sym {
	pthread_mutex_t lock;
	pid_t pid;          /* real pid, also for pid 0 */
	struct stb_mods *mods; /* a reference */
	uint64_t reported_gen; /* registry table last reported to dwfl */
	Dwfl *dwfl;
	Dwfl_Callbacks cb;
	struct stb_sym_chunk *chunks;
	struct stb_sym_entry **cache; /* looked up: cache_set indexes them by ip */
	size_t cache_cap, cache_n;
	struct stb_hashset cache_set;
	const char **strs;  /* interned strings: str_set indexes them */
	size_t strs_cap, strs_n;
	struct stb_hashset str_set;
	stb_sym_demangle_fn demangle;
	int demangle_tried;
	uint64_t last_refresh_ns;
	uint64_t index_bytes; /* arena bytes of the symbol and unit indexes */
};


static uint64_t str_hash(const char *str)
{
	return stb_fnv1a64_add(STB_FNV1A64_BASIS, str, strlen(str));
}

static uint64_t str_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_sym *s = ctx;
	return str_hash(s->strs[idx]);
}

static bool str_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_sym *s = ctx;
	return strcmp(s->strs[idx], key) == 0;
}

/* An entry's key: its ip, and whether that is a return address. */
struct cache_key {
	uint64_t ip;
	int is_ret;
};

static uint64_t cache_hash(uint64_t ip, int is_ret)
{
	return stb_hash_u64(ip ^ (uint64_t)is_ret);
}

static uint64_t cache_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_sym_entry *e = ((const struct stb_sym *)ctx)->cache[idx];
	return cache_hash(e->ip, e->is_ret);
}

static bool cache_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_sym_entry *e = ((const struct stb_sym *)ctx)->cache[idx];
	const struct cache_key *k = key;
	return e->ip == k->ip && e->is_ret == k->is_ret;
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
	if (!str)
		return NULL;
	if (s->strs_n >= UINT32_MAX - 1 || stb_hashset_reserve(&s->str_set, s, str_rehash) != 0 ||
	    stb_grow(&s->strs, &s->strs_cap, s->strs_n + 1, sizeof(*s->strs)) != 0)
		return NULL;
	uint32_t *slot = stb_hashset_find(&s->str_set, str_hash(str), s, str_eq, str);
	if (*slot)
		return s->strs[*slot - 1];
	size_t len = strlen(str);
	/* With its length and plain flag (symbolize.h) in front. */
	struct stb_sym_str *copy = stb_sym_alloc(s, sizeof(*copy) + len + 1);
	if (!copy)
		return NULL;
	copy->len = len;
	copy->plain = stb_text_plain(str, len);
	memcpy(copy->bytes, str, len + 1);
	s->strs[s->strs_n] = copy->bytes;
	*slot = (uint32_t)++s->strs_n;
	s->str_set.n++;
	return copy->bytes;
}

/* ------------------------------------------------------------------ cache */

static struct stb_sym_entry *stb_sym_cache_find(struct stb_sym *s, uint64_t ip, int is_ret)
{
	const struct cache_key k = {.ip = ip, .is_ret = is_ret};
	int64_t i = stb_hashset_get(&s->cache_set, cache_hash(ip, is_ret), s, cache_eq, &k);
	return i < 0 ? NULL : s->cache[i];
}

/* Inserts e (not present); on OOM the result is just not cached. */
static void stb_sym_cache_put(struct stb_sym *s, struct stb_sym_entry *e)
{
	if (s->cache_n >= UINT32_MAX - 1 ||
	    stb_hashset_reserve(&s->cache_set, s, cache_rehash) != 0 ||
	    stb_grow(&s->cache, &s->cache_cap, s->cache_n + 1, sizeof(*s->cache)) != 0)
		return;
	const struct cache_key k = {.ip = e->ip, .is_ret = e->is_ret};
	uint32_t *slot = stb_hashset_find(&s->cache_set, cache_hash(e->ip, e->is_ret), s, cache_eq,
					  &k);
	s->cache[s->cache_n] = e;
	*slot = (uint32_t)++s->cache_n;
	s->cache_set.n++;
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

static void stb_sym_cache_clear(struct stb_sym *s);

/* ------------------------------------------------------------- files */

/* libdwfl's main file of a module: the very file the target maps, opened
 * for reads on demand (ELF_C_READ: no mapping that a shrinking file could
 * turn into SIGBUS); the vdso from our copy of its image. */
static int stb_sym_find_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			    char **file_name, Elf **elfp)
{
	struct stb_sym_modrec *rec = *userdata;
	int fd;

	(void)mod;
	(void)modname;
	(void)base;
	*elfp = NULL;
	if (!rec || !rec->elf_ok)
		return -1;
	if (rec->image) {
		*elfp = elf_memory((char *)(uintptr_t)rec->image, rec->image_len);
		return -1;
	}
	fd = stb_mods_open(rec->s->mods, rec->path, rec->dev, rec->ino, rec->map_lo, rec->map_hi);
	if (fd < 0)
		return -1;
	*elfp = elf_begin(fd, ELF_C_READ, NULL);
	if (!*elfp) {
		close(fd);
		return -1;
	}
	*file_name = strdup(rec->path); /* libdwfl looks for debug links next to it */
	return fd;
}

/* A private, sealed copy of a (regular, bounded) file: libdwfl maps what we
 * return, and only our own memfd cannot change under it. *crc: its CRC-32
 * (the .gnu_debuglink checksum). Returns the memfd or -1. */
static int stb_sym_copy_file(const char *path, uint32_t *crc)
{
	struct statfs sf;
	struct stat st;
	char buf[64 * 1024];
	uint64_t left;
	uLong c = crc32(0L, Z_NULL, 0);
	int fd, mfd = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > STB_SYM_MAX_DEBUG_FILE ||
	    (fstatfs(fd, &sf) == 0 && sf.f_type == STB_SYM_FUSE_MAGIC))
		goto fail;
	mfd = memfd_create("stb-debuginfo", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0)
		goto fail;
	for (left = (uint64_t)st.st_size; left;) {
		ssize_t n = read(fd, buf, left < sizeof(buf) ? (size_t)left : sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto fail; /* shrunk or unreadable */
		c = crc32(c, (const Bytef *)buf, (uInt)n);
		for (ssize_t w = 0; w < n;) {
			ssize_t k = write(mfd, buf + w, (size_t)(n - w));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				goto fail;
			w += k;
		}
		left -= (uint64_t)n;
	}
	if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		goto fail;
	close(fd);
	*crc = (uint32_t)c;
	return mfd;
fail:
	if (mfd >= 0)
		close(mfd);
	close(fd);
	return -1;
}

/* Does the copy carry the build id the module wants? */
static bool stb_sym_id_matches(int mfd, const unsigned char *want, int want_len)
{
	Elf *e = elf_begin(mfd, ELF_C_READ, NULL);
	const void *id = NULL;
	ssize_t n = e ? dwelf_elf_gnu_build_id(e, &id) : -1;
	bool ok = n > 0 && n == want_len && memcmp(id, want, (size_t)n) == 0;

	if (e)
		elf_end(e);
	return ok;
}

/*
 * libdwfl's separate debug files (and dwz alt files): the build-id tree,
 * then the debug link next to the file, in its .debug/ and under
 * /usr/lib/debug; never debuginfod servers (a network round trip inside a
 * tracer). Each candidate is checked (build id, else CRC) on a sealed copy,
 * which is what libdwfl gets.
 */
static int stb_sym_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
				  const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
				  char **debuginfo_file_name)
{
	const unsigned char *bits = NULL;
	char paths[4][PATH_MAX];
	unsigned np = 0;
	GElf_Addr vaddr;
	int len;
	/* A dwz alt file is asked for by name with no CRC: it has its own id. */
	bool alt = debuglink_file && debuglink_crc == 0;

	(void)userdata;
	(void)modname;
	(void)base;
	len = dwfl_module_build_id(mod, &bits, &vaddr);
	if (!alt && len >= 2 && len <= 64) {
		int n = snprintf(paths[np], PATH_MAX, "/usr/lib/debug/.build-id/%02x/", bits[0]);
		for (int i = 1; i < len; i++)
			n += snprintf(paths[np] + n, PATH_MAX - (size_t)n, "%02x", bits[i]);
		snprintf(paths[np] + n, PATH_MAX - (size_t)n, ".debug");
		np++;
	}
	if (debuglink_file && debuglink_file[0] == '/') {
		snprintf(paths[np++], PATH_MAX, "%s", debuglink_file);
	} else if (debuglink_file && !strchr(debuglink_file, '/') && file_name && file_name[0] == '/') {
		const char *slash = strrchr(file_name, '/');
		int dlen = (int)(slash - file_name);
		snprintf(paths[np++], PATH_MAX, "%.*s/%s", dlen, file_name, debuglink_file);
		snprintf(paths[np++], PATH_MAX, "%.*s/.debug/%s", dlen, file_name, debuglink_file);
		snprintf(paths[np++], PATH_MAX, "/usr/lib/debug%.*s/%s", dlen, file_name, debuglink_file);
	}
	for (unsigned i = 0; i < np; i++) {
		uint32_t crc;
		int mfd;
		if (file_name && strcmp(paths[i], file_name) == 0)
			continue; /* the main file itself */
		mfd = stb_sym_copy_file(paths[i], &crc);
		if (mfd < 0)
			continue;
		bool ok = alt || (len > 0 ? stb_sym_id_matches(mfd, bits, len) : crc == debuglink_crc);
		if (ok) {
			*debuginfo_file_name = strdup(paths[i]);
			return mfd;
		}
		close(mfd);
	}
	return -1;
}

/* ------------------------------------------------------------- reporting */

/* The registry's modules, reported to libdwfl. A module that is the same
 * as before (name, range, identity) keeps its Dwfl_Module (and what libdwfl
 * read of it); one whose identity changed needs a fresh session. */
static int stb_sym_report(struct stb_sym *s)
{
	const struct stb_modtab *t;
	uint64_t prev_hi = 0;
	int ret = 0;
	bool stale = false;

	t = stb_mods_acquire(s->mods);
	dwfl_report_begin(s->dwfl);
	for (size_t i = 0; i < t->nmods && ret == 0; i++) {
		const struct stb_mod *m = &t->mods[i];
		uint64_t lo = m->lo, hi = m->hi;
		bool elf_ok = false;
		void **slot;

		if ((m->flags & STB_UNW_MOD_ANON) || !m->path || !m->path[0])
			continue;
		/* libdwfl computes the bias from the range's start: report the
		 * whole object when the registry could place it. */
		if (m->load_lo && m->load_lo <= m->lo && m->hi <= m->load_hi && m->load_lo >= prev_hi &&
		    !(m->flags & (STB_UNW_MOD_CHANGED | STB_UNW_MOD_NO_FILE))) {
			lo = m->load_lo;
			hi = m->load_hi;
			elf_ok = true;
		}
		if (lo < prev_hi)
			continue;
		Dwfl_Module *dm = dwfl_report_module(s->dwfl, m->path, lo, hi);
		if (!dm) {
			ret = -ENOMEM;
			break;
		}
		prev_hi = hi;
		dwfl_module_info(dm, &slot, NULL, NULL, NULL, NULL, NULL, NULL);
		struct stb_sym_modrec *rec = *slot;
		if (rec) {
			if (rec->dev != m->dev || rec->ino != m->ino || rec->elf_ok != elf_ok)
				stale = true;
			continue;
		}
		rec = stb_sym_alloc(s, sizeof(*rec));
		if (!rec) {
			ret = -ENOMEM;
			break;
		}
		*rec = (struct stb_sym_modrec){ .s = s, .path = stb_sym_intern(s, m->path), .dev = m->dev,
						.ino = m->ino, .map_lo = m->map_lo, .map_hi = m->map_hi,
						.elf_ok = elf_ok, .mflags = m->flags };
		if (m->image && elf_ok) {
			uint8_t *copy = stb_sym_alloc(s, m->image_len);
			if (copy) {
				memcpy(copy, m->image, m->image_len);
				rec->image = copy;
				rec->image_len = m->image_len;
			} else {
				rec->elf_ok = false;
			}
		} else if (!m->map_hi) {
			rec->elf_ok = false; /* no file mapping to open */
		}
		if (!rec->path)
			rec->elf_ok = false;
		*slot = rec;
	}
	if (dwfl_report_end(s->dwfl, NULL, NULL) != 0 && ret == 0)
		ret = -ENOMEM;
	s->reported_gen = t->gen;
	stb_mods_release(t);
	if (ret == 0 && stale) {
		/* Same name and range, another file: start a new session. */
		Dwfl *n = dwfl_begin(&s->cb);
		if (!n)
			return -ENOMEM;
		dwfl_end(s->dwfl);
		s->dwfl = n;
		return stb_sym_report(s);
	}
	return ret;
}

/* Brings the session up to date with the registry; with `refresh`, asks the
 * registry to rescan first (rate-limited there and here). */
static int stb_sym_sync(struct stb_sym *s, bool refresh, bool forced)
{
	int ret = 0;

	if (refresh) {
		s->last_refresh_ns = stb_now_ns();
		ret = stb_mods_refresh(s->mods, forced, 0);
	}
	if (stb_mods_gen(s->mods) != s->reported_gen) {
		int r = stb_sym_report(s);
		stb_sym_cache_clear(s);
		if (ret >= 0)
			ret = r;
	}
	return ret < 0 ? ret : 0;
}

struct stb_sym *stb_sym_new_mods(struct stb_mods *mods)
{
	struct stb_sym *s = NULL;
	int ret = 0, have_lock = 0;

	if (!mods) {
		ret = -EINVAL;
		goto cleanup;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		ret = -ENOMEM;
		goto cleanup;
	}
	s->mods = stb_mods_ref(mods);
	s->pid = stb_mods_read_pid(mods);
	ret = -pthread_mutex_init(&s->lock, NULL);
	if (ret < 0)
		goto cleanup;
	have_lock = 1;
	elf_version(EV_CURRENT);
	s->cb.find_elf = stb_sym_find_elf;
	s->cb.find_debuginfo = stb_sym_find_debuginfo;
	s->dwfl = dwfl_begin(&s->cb);
	if (!s->dwfl) {
		ret = -ENOMEM;
		goto cleanup;
	}
	ret = stb_sym_report(s);
	s->last_refresh_ns = stb_now_ns();
cleanup:
	if (ret < 0) {
		if (s) {
			if (s->dwfl)
				dwfl_end(s->dwfl);
			if (have_lock)
				pthread_mutex_destroy(&s->lock);
			stb_mods_unref(s->mods);
			while (s->chunks) {
				struct stb_sym_chunk *c = s->chunks;
				s->chunks = c->next;
				free(c);
			}
			free(s->strs);
			stb_hashset_free(&s->str_set);
			free(s);
		}
		errno = -ret;
		return NULL;
	}
	return s;
}

struct stb_sym *stb_sym_new(pid_t pid)
{
	struct stb_mods *mods = stb_mods_new(pid);
	struct stb_sym *s;
	int err;

	if (!mods)
		return NULL;
	s = stb_sym_new_mods(mods);
	err = errno;
	stb_mods_unref(mods); /* s holds its own reference */
	errno = err;
	return s;
}

void stb_sym_free(struct stb_sym *s)
{
	if (!s)
		return;
	dwfl_end(s->dwfl);
	stb_mods_unref(s->mods);
	while (s->chunks) {
		struct stb_sym_chunk *c = s->chunks;
		s->chunks = c->next;
		free(c);
	}
	free(s->cache);
	stb_hashset_free(&s->cache_set);
	free(s->strs);
	stb_hashset_free(&s->str_set);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void stb_sym_cache_clear(struct stb_sym *s)
{
	stb_hashset_clear(&s->cache_set);
	s->cache_n = 0;
}

int stb_sym_refresh(struct stb_sym *s)
{
	int ret;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	ret = stb_sym_sync(s, true, true);
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

/* The DIE a function scope is an instance of: its abstract origin, else
 * itself. */
static Dwarf_Off stb_sym_origin(Dwarf_Die *die)
{
	Dwarf_Attribute a;
	Dwarf_Die o;

	if (dwarf_attr(die, DW_AT_abstract_origin, &a) && dwarf_formref_die(&a, &o))
		return dwarf_dieoffset(&o);
	return dwarf_dieoffset(die);
}

/*
 * Is inl, an inlined instance, GCC's copy of the very function it sits in
 * (outer: the scope enclosing it), "called" from that function's own
 * declaration line? GCC 12 emits one when it turns a function's tail into a
 * loop or splits it (mutex_timedlock inside mutex_timedlock at mutex.c:107,
 * its first line): not a call anybody wrote, and shown it would repeat the
 * frame. A real recursive call inlined into itself is called from within the
 * body, and stays.
 */
static bool stb_sym_self_inline(Dwarf_Die *inl, Dwarf_Die *outer)
{
	Dwarf_Attribute a;
	Dwarf_Word call;
	int decl;

	return stb_sym_origin(outer) == stb_sym_origin(inl) && dwarf_attr(inl, DW_AT_call_line, &a) &&
	       dwarf_formudata(&a, &call) == 0 && dwarf_decl_line(inl, &decl) == 0 && call == (Dwarf_Word)decl;
}

static void *stb_sym_index_alloc(void *ctx, size_t size)
{
	struct stb_sym *s = ctx;

	if (size > STB_SYM_MAX_INDEX_BYTES - s->index_bytes)
		return NULL; /* a target with huge symbol tables: libdwfl's lookup */
	s->index_bytes += size;
	return stb_sym_alloc(s, size);
}

/*
 * The compile unit holding addr (a module address), with its DWARF bias in
 * *dbias: libdwfl's answer (.debug_aranges), else the module's unit index
 * (built at the first address libdwfl cannot place; the answer in *buf).
 * NULL when no unit holds addr.
 */
static Dwarf_Die *stb_sym_cu(struct stb_sym *s, struct stb_sym_modrec *rec, Dwfl_Module *mod,
			     Dwarf_Addr addr, Dwarf_Die *buf, Dwarf_Addr *dbias)
{
	Dwarf_Die *cu = dwfl_module_addrdie(mod, addr, dbias);
	Dwarf *dw;

	if (cu)
		return cu;
	if (!rec || rec->no_cuidx || !(dw = dwfl_module_getdwarf(mod, dbias)))
		return NULL;
	if (!rec->cuidx) {
		/* Where the module's code is, in its DWARF's addresses. */
		struct stb_cuidx_span text[STB_CUIDX_MAX_TEXT];
		GElf_Addr bias = 0;
		Elf *elf = dwfl_module_getelf(mod, &bias);
		size_t nt = stb_cuidx_text(elf, bias - *dbias, text);
		rec->cuidx = stb_cuidx_build(dw, text, nt, stb_sym_index_alloc, s);
		rec->no_cuidx = rec->cuidx == NULL;
		if (!rec->cuidx)
			return NULL;
	}
	if (addr < *dbias || stb_cuidx_find(rec->cuidx, addr - *dbias, buf) != 0)
		return NULL;
	return buf;
}

/* Fills the inline frames at addr (module-relative by dbias) of unit cu and
 * moves file/line out to the outermost call site. */
static void stb_sym_inlines(struct stb_sym *s, Dwarf_Die *cu, Dwarf_Addr addr, Dwarf_Addr dbias,
			    struct stb_sym_info *info)
{
	Dwarf_Die chain[STB_INLCHAIN_MAX_DEPTH], func = {.addr = NULL};
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	int n = stb_inlchain_find(cu, addr - dbias, chain, STB_INLCHAIN_MAX_DEPTH, &func), k = 0;

	if (n <= 0)
		return; /* no inlined code here (the common case), or unreadable */
	bool have_func = func.addr != NULL; /* the walk wrote it */
	for (int i = 0; i < n; i++) {
		Dwarf_Die *outer = i + 1 < n ? &chain[i + 1] : have_func ? &func : NULL;
		if (!outer || !stb_sym_self_inline(&chain[i], outer))
			chain[k++] = chain[i]; /* a self-inlined copy keeps its function's position */
	}
	if (k == 0)
		return;
	struct stb_sym_inline *inl = stb_sym_alloc(s, (size_t)k * sizeof(*inl));
	if (!inl)
		return;
	if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
		files = NULL;
	const char *file = info->file;
	int line = info->line;
	for (int i = 0; i < k; i++) {
		Dwarf_Attribute a;
		Dwarf_Word w;

		inl[i].function = stb_sym_die_name(s, &chain[i]);
		inl[i].file = file;
		inl[i].line = line;
		file = NULL;
		line = 0;
		if (files && dwarf_attr(&chain[i], DW_AT_call_file, &a) && dwarf_formudata(&a, &w) == 0 && w < nfiles)
			file = stb_sym_intern(s, dwarf_filesrc(files, w, NULL, NULL));
		if (dwarf_attr(&chain[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0 && w <= INT_MAX)
			line = (int)w;
	}
	info->ninline = (unsigned)k;
	info->inlines = inl;
	info->file = file;
	info->line = line;
}

/*
 * The symbol containing addr in mod and addr's offset in it, as
 * dwfl_module_addrinfo says. libdwfl reads the whole symbol table for every
 * address; a module's second lookup builds its index (symindex.h), which
 * answers from then on wherever it knows libdwfl's answer.
 */
static const char *stb_sym_addr_name(struct stb_sym *s, struct stb_sym_modrec *rec,
				     Dwfl_Module *mod, Dwarf_Addr addr, GElf_Off *off)
{
	GElf_Sym sym;

	if (rec && !rec->idx && !rec->no_index && rec->lookups++ > 0) {
		rec->idx = stb_symidx_build(mod, stb_sym_index_alloc, s);
		rec->no_index = rec->idx == NULL;
	}
	if (rec && rec->idx) {
		uint64_t o;
		const char *name = stb_symidx_find(rec->idx, addr, &o);
		if (name) {
			*off = o;
			return name;
		}
	}
	return dwfl_module_addrinfo(mod, addr, off, &sym, NULL, NULL, NULL);
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
	int len;

	memset(info, 0, sizeof(*info));
	e->ret = -ENOENT;
	mod = dwfl_addrmodule(s->dwfl, addr);
	if (!mod && stb_now_ns() - s->last_refresh_ns >= STB_SYM_AUTO_REFRESH_NS) {
		/* The target may have loaded a module since. */
		stb_sym_sync(s, true, false);
		mod = dwfl_addrmodule(s->dwfl, addr);
	}
	if (!mod)
		return;
	Elf *elf = dwfl_module_getelf(mod, &bias); /* finds the file: sets mainfile */
	void **slot = NULL;
	name = dwfl_module_info(mod, &slot, &start, NULL, NULL, NULL, &mainfile, NULL);
	struct stb_sym_modrec *rec = slot ? *slot : NULL;
	if (rec)
		info->module_flags = rec->mflags;
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
	name = stb_sym_addr_name(s, rec, mod, addr, &off);
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
	Dwarf_Addr dbias = 0;
	Dwarf_Die buf, *cu;
	void **slot = NULL;

	if (!mod)
		return;
	dwfl_module_info(mod, &slot, NULL, NULL, NULL, NULL, NULL, NULL);
	cu = stb_sym_cu(s, slot ? *slot : NULL, mod, addr, &buf, &dbias);
	if (!cu)
		return;
	/* The row libdwfl's dwfl_module_getsrc picks, in the unit found. */
	Dwarf_Line *l = dwarf_getsrc_die(cu, addr - dbias);
	if (l) {
		int lineno = 0;
		const char *file = dwarf_linesrc(l, NULL, NULL);
		if (file && dwarf_lineno(l, &lineno) == 0) {
			info->file = stb_sym_intern(s, file);
			info->line = lineno;
		}
	}
	stb_sym_inlines(s, cu, addr, dbias, info);
}

int stb_sym_lookup(struct stb_sym *s, uint64_t ip, int flags, struct stb_sym_info *out)
{
	struct stb_sym_entry *e, tmp;
	int is_ret = flags & STB_SYM_RETURN, ret;

	if (!s || !out)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (stb_mods_gen(s->mods) != s->reported_gen)
		stb_sym_sync(s, false, false); /* the unwinder refreshed the registry */
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
	if (si->module_flags & STB_UNW_MOD_CHANGED)
		f->flags |= STB_FRAME_F_MISMATCH;
	return true;
}
