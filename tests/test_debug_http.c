/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of the debug HTTP endpoint (runtime/tracer/debug_http.c): bthreads parked in
 * known call chains, then plain-socket HTTP requests for every page, checking
 * status, headers, frames, grouping with counts, JSON shape, error statuses,
 * and start/stop behaviour (double start, stop with an idle client, restart).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <bthread/butex.h>
#include <stb/abi.h>
#include <stb/stb.h>

#include "test_util.h"
#include "trace_util.h"

#define DH_NCHAIN 3
#define DH_BODY_MAX (4u << 20)

/* ---- bthreads in known chains ---- */

static void *dh_butex;          /* value 0 while the chains must stay parked */
static bthread_t dh_chain_ids[DH_NCHAIN];
static bthread_t dh_other_id;
static uint16_t dh_port;

STB_NOIPA static void dh_chain_f3(void)
{
	while (__atomic_load_n((int *)dh_butex, __ATOMIC_ACQUIRE) == 0) {
		butex_wait(dh_butex, 0, NULL);
		STB_NO_TAIL();
	}
	STB_NO_TAIL();
}

STB_NOIPA static void dh_chain_f2(void)
{
	dh_chain_f3();
	STB_NO_TAIL();
}

STB_NOIPA static void *dh_chain_f1(void *arg)
{
	dh_chain_f2();
	STB_NO_TAIL();
	return arg;
}

STB_NOIPA static void dh_other_f2(void)
{
	bthread_usleep(60u * 1000u * 1000u); /* ended by bthread_stop */
	STB_NO_TAIL();
}

STB_NOIPA static void *dh_other_f1(void *arg)
{
	dh_other_f2();
	STB_NO_TAIL();
	return arg;
}

static void *dh_quick(void *arg)
{
	return arg;
}

/* Waits until id is suspended with frame want in its stack. */
static bool dh_wait_parked(bthread_t id, const char *want)
{
	struct stb_frame f[64];
	struct stb_trace_info info;
	return STB_WAIT_UNTIL(({
		int n = stb_trace(id, NULL, f, 64, &info);
		n > 0 && info.state == STB_TASK_SUSPENDED && stb_frames_find(f, n, want, 0) >= 0;
	}), 5000);
}

/* ---- a minimal HTTP client ---- */

struct dh_resp {
	int status;
	char type[128];
	char allow[128];       /* Allow header, "" when absent */
	long clen;             /* -1: no Content-Length */
	bool conn_close;
	char *body;            /* NUL-terminated */
	size_t blen;
};

static int dh_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* Finds header name (case-insensitive, "Name: ") in the head; copies its value. */
static bool dh_header(const char *head, const char *name, char *val, size_t size)
{
	size_t n = strlen(name);
	for (const char *l = head; l && *l; l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : NULL) {
		if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
			const char *v = l + n + 1;
			while (*v == ' ')
				v++;
			size_t len = strcspn(v, "\r\n");
			if (len >= size)
				len = size - 1;
			memcpy(val, v, len);
			val[len] = '\0';
			return true;
		}
	}
	return false;
}

/* Sends raw request bytes and parses the whole response (read until EOF). */
static void dh_request(const char *req, size_t reqlen, struct dh_resp *r)
{
	memset(r, 0, sizeof(*r));
	r->clen = -1;
	int fd = dh_connect(dh_port);
	assert_true(fd >= 0);
	size_t off = 0;
	while (off < reqlen) {
		ssize_t n = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
		if (n <= 0)
			break; /* the server may answer (431) and close before reading it all */
		off += (size_t)n;
	}
	char *buf = malloc(DH_BODY_MAX + 1);
	assert_non_null(buf);
	size_t len = 0;
	for (;;) {
		ssize_t n = recv(fd, buf + len, DH_BODY_MAX - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
		assert_true(len < DH_BODY_MAX);
	}
	close(fd);
	buf[len] = '\0';
	char *end = strstr(buf, "\r\n\r\n");
	if (!end)
		fail_msg("no complete response head in %zu bytes: %.200s", len, buf);
	*end = '\0';
	assert_int_equal(sscanf(buf, "HTTP/1.1 %d ", &r->status), 1);
	char v[128];
	if (dh_header(buf, "Content-Type", v, sizeof(v)))
		snprintf(r->type, sizeof(r->type), "%s", v);
	if (dh_header(buf, "Content-Length", v, sizeof(v)))
		r->clen = strtol(v, NULL, 10);
	if (dh_header(buf, "Allow", v, sizeof(v)))
		snprintf(r->allow, sizeof(r->allow), "%s", v);
	r->conn_close = dh_header(buf, "Connection", v, sizeof(v)) && strcmp(v, "close") == 0;
	r->blen = len - (size_t)(end + 4 - buf);
	r->body = malloc(r->blen + 1);
	assert_non_null(r->body);
	memcpy(r->body, end + 4, r->blen);
	r->body[r->blen] = '\0';
	free(buf);
}

/* GET path; checks status, the Content-Length/Connection headers and the type. */
static void dh_get(const char *path, int want_status, const char *want_type, struct dh_resp *r)
{
	char req[512];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
	dh_request(req, (size_t)n, r);
	if (r->status != want_status)
		fail_msg("GET %s: status %d, want %d; body: %.300s", path, r->status, want_status,
			 r->body);
	assert_true(r->conn_close);
	assert_int_equal(r->clen, (long)r->blen);
	if (want_type && strncmp(r->type, want_type, strlen(want_type)) != 0)
		fail_msg("GET %s: Content-Type '%s', want %s", path, r->type, want_type);
}

static void dh_free(struct dh_resp *r)
{
	free(r->body);
	r->body = NULL;
}

/*
 * Cheap JSON shape check: one top-level object, braces and brackets balanced
 * and properly nested outside strings, strings terminated, nothing after.
 */
static bool dh_json_shape(const char *s)
{
	char stack[64];
	int depth = 0;
	bool in_str = false, seen = false;
	while (*s == ' ' || *s == '\n')
		s++;
	if (*s != '{')
		return false;
	for (; *s; s++) {
		char c = *s;
		if (in_str) {
			if (c == '\\' && s[1])
				s++;
			else if (c == '"')
				in_str = false;
			else if ((unsigned char)c < 0x20)
				return false;
			continue;
		}
		if (seen && depth == 0 && c != ' ' && c != '\n')
			return false; /* text after the top-level object */
		if (c == '"') {
			in_str = true;
		} else if (c == '{' || c == '[') {
			if (depth == (int)sizeof(stack))
				return false;
			stack[depth++] = c;
		} else if (c == '}' || c == ']') {
			if (depth == 0 || stack[depth - 1] != (c == '}' ? '{' : '['))
				return false;
			if (--depth == 0)
				seen = true;
		}
	}
	return !in_str && depth == 0 && seen;
}

/* Positions of a, b, c in s are increasing (all present). */
static bool dh_in_order(const char *s, const char *a, const char *b, const char *c)
{
	const char *pa = strstr(s, a);
	const char *pb = pa ? strstr(pa, b) : NULL;
	return pb && strstr(pb, c);
}

/* ---- fixture ---- */

static int dh_setup(void **state)
{
	(void)state;
	dh_butex = butex_create();
	if (!dh_butex)
		return -1;
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, "dh chain");
	for (int i = 0; i < DH_NCHAIN; i++)
		if (bthread_start_background(&dh_chain_ids[i], &attr, dh_chain_f1, NULL) != 0)
			return -1;
	bthread_attr_set_name(&attr, "dh other");
	if (bthread_start_background(&dh_other_id, &attr, dh_other_f1, NULL) != 0)
		return -1;
	for (int i = 0; i < DH_NCHAIN; i++)
		if (!dh_wait_parked(dh_chain_ids[i], "dh_chain_f3"))
			return -1;
	if (!dh_wait_parked(dh_other_id, "dh_other_f2"))
		return -1;
	return stb_debug_http_start(0, &dh_port) == 0 && dh_port != 0 ? 0 : -1;
}

static int dh_teardown(void **state)
{
	(void)state;
	int rc = stb_debug_http_stop();
	__atomic_store_n((int *)dh_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(dh_butex);
	for (int i = 0; i < DH_NCHAIN; i++)
		bthread_join(dh_chain_ids[i], NULL);
	bthread_stop(dh_other_id);
	bthread_join(dh_other_id, NULL);
	butex_destroy(dh_butex);
	return rc == 0 || rc == -ESRCH ? 0 : -1;
}

/* ---- tests ---- */

static void test_list(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct dh_resp r;
	dh_get("/bthreads", 200, "text/plain", &r);
	for (int i = 0; i < DH_NCHAIN; i++) {
		char line[96];
		snprintf(line, sizeof(line), "bthread %llu \"dh chain\" [suspended",
			 (unsigned long long)dh_chain_ids[i]);
		if (!strstr(r.body, line))
			fail_msg("/bthreads lacks '%s':\n%s", line, r.body);
	}
	char line[96];
	snprintf(line, sizeof(line), "bthread %llu \"dh other\" [suspended",
		 (unsigned long long)dh_other_id);
	assert_non_null(strstr(r.body, line));
	assert_null(strstr(r.body, "#0 ")); /* no stacks in the list */
	/* The endpoint's own bthreads are listed too; the trailer counts the
	 * lines, which follow the header line. */
	assert_non_null(strstr(r.body, "\"stb debug http\""));
	char head[64];
	snprintf(head, sizeof(head), "# stb debug http of pid %d (", (int)getpid());
	if (strncmp(r.body, head, strlen(head)) != 0 || !strstr(r.body, " UTC: ") ||
	    !strstr(r.body, " table slots used\n\n"))
		fail_msg("/bthreads does not start with the header line:\n%s", r.body);
	int lines = 0;
	for (const char *p = r.body; (p = strstr(p, "\nbthread ")) != NULL; p++)
		lines++;
	char trailer[32];
	snprintf(trailer, sizeof(trailer), "\n%d tasks\n", lines);
	if (!strstr(r.body, trailer))
		fail_msg("trailer '%s' missing:\n%s", trailer + 1, r.body);
	dh_free(&r);
	STB_TEST_END();
}

static void test_one_task(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	char path[128];
	struct dh_resp r;
	snprintf(path, sizeof(path), "/bthreads/%llu?st=1&runtime_frames=1&lines=0",
		 (unsigned long long)dh_chain_ids[1]);
	dh_get(path, 200, "text/plain", &r);
	char head[96];
	snprintf(head, sizeof(head), "bthread %llu \"dh chain\" [suspended",
		 (unsigned long long)dh_chain_ids[1]);
	/* After the header line, the task. */
	assert_true(strncmp(r.body, "# stb debug http of pid ", 24) == 0);
	assert_non_null(strstr(r.body, "\n\n"));
	if (strstr(r.body, head) != strstr(r.body, "\n\n") + 2)
		fail_msg("not the header line and then the task:\n%s", r.body);
	if (!dh_in_order(r.body, " dh_chain_f3+0x", " dh_chain_f2+0x", " dh_chain_f1+0x"))
		fail_msg("no f3 < f2 < f1 chain in:\n%s", r.body);
	/* Every frame line is bRPC-style; the section ends with a blank line. */
	char *frames = strstr(r.body, "\n#0 0x");
	assert_non_null(frames);
	char *blank = strstr(frames, "\n\n");
	assert_non_null(blank);
	assert_ptr_equal(blank + 2, r.body + r.blen);
	blank[1] = '\0';
	/* The section ends with who created the task: the pthread that ran dh_setup. */
	char *created = strstr(frames, "\ncreated by dh_setup+0x");
	if (!created || !strstr(created, " in pthread tid "))
		fail_msg("no 'created by dh_setup+0x… in pthread tid' line:\n%s", r.body);
	created[1] = '\0';
	char why[256];
	int nl = stb_text_check(frames + 1, NULL, 0, why, sizeof(why));
	if (nl < 5)
		fail_msg("frame lines: %d (%s):\n%s", nl, why, r.body);
	dh_free(&r);

	/* Without st=1: just the task's line. */
	snprintf(path, sizeof(path), "/bthreads/%llu", (unsigned long long)dh_other_id);
	dh_get(path, 200, "text/plain", &r);
	snprintf(head, sizeof(head), "bthread %llu \"dh other\" [suspended",
		 (unsigned long long)dh_other_id);
	/* The header line, and the task's. */
	assert_true(strncmp(r.body, "# stb debug http of pid ", 24) == 0);
	assert_ptr_equal(strstr(r.body, head), strstr(r.body, "\n\n") + 2);
	assert_null(strstr(r.body, "#0"));
	assert_ptr_equal(strchr(strstr(r.body, head), '\n'), r.body + r.blen - 1);
	dh_free(&r);

	/* st=0 is the same as no st. */
	snprintf(path, sizeof(path), "/bthreads/%llu?st=0", (unsigned long long)dh_other_id);
	dh_get(path, 200, "text/plain", &r);
	assert_null(strstr(r.body, "#0"));
	dh_free(&r);
	STB_TEST_END();
}

static void test_all_grouped(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct dh_resp r;
	dh_get("/bthreads/all", 200, "text/plain", &r);
	/* The three chains share one stack: one group of 3 listing their ids. */
	/* "3 bthreads [suspended, T] waiting on butex 0x…", then their one name
	 * and "  ids ..." before the frames. */
	char *g = strstr(r.body, "3 bthreads [suspended, ");
	if (g && (!strstr(g, "] waiting on butex 0x") || !strstr(g, "\n  name \"dh chain\"\n")))
		g = NULL;
	if (!g)
		fail_msg("no group of 3 suspended tasks:\n%s", r.body);
	char *eol = strstr(g, "\n#0 ");
	assert_non_null(eol);
	*eol = '\0';
	char *ids = strstr(g, "\n  ids ");
	if (!ids)
		fail_msg("group '%s' has no ids line", g);
	for (int i = 0; i < DH_NCHAIN; i++) {
		char id[32];
		snprintf(id, sizeof(id), " %llu", (unsigned long long)dh_chain_ids[i]);
		if (!strstr(ids, id))
			fail_msg("group '%s' lacks%s", g, id);
	}
	*eol = '\n';
	char *next = strstr(eol, "\n\n");
	assert_non_null(next);
	*next = '\0';
	if (!dh_in_order(eol, " dh_chain_f3+0x", " dh_chain_f2+0x", " dh_chain_f1+0x"))
		fail_msg("group of 3 has no f3 < f2 < f1 chain:\n%s", g);
	*next = '\n';
	/* The other bthread is a group of its own. */
	char one[64];
	snprintf(one, sizeof(one), "\n  id %llu\n", (unsigned long long)dh_other_id);
	char *o = strstr(r.body, one);
	if (o && !strstr(r.body, "1 bthread [suspended, "))
		o = NULL;
	if (!o)
		fail_msg("no group '%s' in:\n%s", one, r.body);
	assert_non_null(strstr(o, " dh_other_f2+0x"));
	/* The serving bthread traced itself: a running group with the endpoint's frames. */
	assert_non_null(strstr(r.body, "dh_conn_main"));
	dh_free(&r);
	STB_TEST_END();
}

/* Runs cmd (sh -c) and returns its standard output (malloc'd), NULL if it
 * could not run or exited non-zero. */
static char *dh_run(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	if (!p)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (len + 1 == cap) {
			char *g = realloc(buf, cap * 2);
			if (!g) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = g;
			cap *= 2;
		}
	}
	int st = pclose(p);
	if (buf)
		buf[len] = '\0';
	if (st != 0) {
		fprintf(stderr, "'%s' exited with status 0x%x:\n%s\n", cmd, st, buf ? buf : "");
		free(buf);
		return NULL;
	}
	return buf;
}

/* The runtime's own frames hidden by default (and said so), shown on
 * request; file:line by default, left out on request. */
static void test_runtime_frames_and_lines(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct dh_resp r;
	dh_get("/bthreads/all", 200, "text/plain", &r);
	assert_null(strstr(r.body, " stb_jump_stack"));
	assert_null(strstr(r.body, " stb_task_entry+"));
	assert_non_null(strstr(r.body, "?runtime_frames=1 shows them"));
	if (!dh_in_order(r.body, "#0 0x", " butex_wait+0x", " dh_chain_f3+0x"))
		fail_msg("the chain does not start at butex_wait:\n%s", r.body);
	dh_free(&r);
	dh_get("/bthreads/all?runtime_frames=1", 200, "text/plain", &r);
	assert_non_null(strstr(r.body, " stb_task_entry+"));
	dh_free(&r);
	dh_get("/bthreads/all", 200, "text/plain", &r);
	assert_non_null(strstr(r.body, "test_debug_http.c:"));
	/* Not the runtime's internals inlined into butex_wait either. */
	const char *chain = strstr(r.body, "name \"dh chain\"");
	assert_non_null(chain);
	const char *end = strstr(chain, "\n\n");
	assert_non_null(end);
	if (strstr(chain, "[inlined]") && strstr(chain, "[inlined]") < end)
		fail_msg("inline frames of the runtime shown:\n%.*s", (int)(end - chain), chain);
	dh_free(&r);
	dh_get("/bthreads/all?lines=1", 200, "text/plain", &r);
	assert_non_null(strstr(r.body, "test_debug_http.c:"));
	dh_free(&r);
	dh_get("/bthreads/all?lines=0", 200, "text/plain", &r);
	assert_null(strstr(r.body, "test_debug_http.c:"));
	assert_non_null(strstr(r.body, " dh_chain_f3+0x"));
	dh_free(&r);
	dh_get("/bthreads/all?lines=2", 400, "text/plain", &r);
	dh_free(&r);
	STB_TEST_END();
}

/* pprof (read by go tool pprof over HTTP), folded, flame graph. */
static void test_profile_formats(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	struct dh_resp r;
	dh_get("/bthreads/all?format=pprof", 200, "application/octet-stream", &r);
	assert_true(r.blen > 2 && (unsigned char)r.body[0] == 0x1f &&
		    (unsigned char)r.body[1] == 0x8b);
	dh_free(&r);
	const char *go = getenv("STB_GO");
	char tmp[] = "/tmp/stb_dh_pprof_XXXXXX";
	assert_non_null(mkdtemp(tmp));
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "PPROF_TMPDIR=%s HOME=%s timeout 120 %s tool pprof -raw "
		 "'http://127.0.0.1:%u/bthreads/all?format=pprof' 2>&1",
		 tmp, tmp, go && *go ? go : "go", dh_port);
	char *raw = dh_run(cmd);
	if (!raw)
		fail_msg("go tool pprof could not read the endpoint's pprof (STB_GO=%s)",
			 go ? go : "");
	assert_non_null(strstr(raw, "bthreads/count"));
	assert_non_null(strstr(raw, "dh_chain_f3"));
	free(raw);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	assert_int_equal(system(cmd), 0);

	dh_get("/bthreads/all?format=folded", 200, "text/plain", &r);
	char line[64];
	snprintf(line, sizeof(line), "dh_chain_f1;dh_chain_f2;dh_chain_f3;butex_wait %d\n",
		 DH_NCHAIN);
	if (!strstr(r.body, line))
		fail_msg("no folded line ...%s in:\n%s", line, r.body);
	dh_free(&r);
	dh_get("/bthreads/all?format=flamegraph", 200, "text/html", &r);
	assert_non_null(strstr(r.body, "id=\"fg-data\""));
	assert_non_null(strstr(r.body, "\"dh_chain_f3\""));
	dh_free(&r);
	/* A list has no stacks. */
	dh_get("/bthreads?format=pprof", 400, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads/all?format=svg", 400, "text/plain", &r);
	dh_free(&r);
	STB_TEST_END();
}

/* Browsers get HTML: escaped, ids linking to each task's page; checked by
 * headless Chromium as well. */
static void test_html(void **state)
{
	(void)state;
	STB_TEST_BEGIN(180);
	bthread_attr_t attr;
	bthread_attr_init(&attr);
	bthread_attr_set_name(&attr, "<b>x&y\"'</b>");
	bthread_t odd;
	assert_int_equal(bthread_start_background(&odd, &attr, dh_other_f1, NULL), 0);
	bthread_attr_destroy(&attr);
	assert_true(dh_wait_parked(odd, "dh_other_f2"));
	char req[256];
	int n = snprintf(req, sizeof(req), "GET /bthreads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
					  "Accept: text/html,application/xhtml+xml\r\n\r\n");
	struct dh_resp r;
	dh_request(req, (size_t)n, &r);
	assert_int_equal(r.status, 200);
	assert_true(strncmp(r.type, "text/html", 9) == 0);
	char link[128];
	snprintf(link, sizeof(link), "<a class=\"id\" href=\"/bthreads/%llu?st=1\">%llu</a>",
		 (unsigned long long)odd, (unsigned long long)odd);
	if (!strstr(r.body, link))
		fail_msg("no link %s in:\n%s", link, r.body);
	assert_non_null(strstr(r.body, "&lt;b&gt;x&amp;y\\&quot;&#39;&lt;/b&gt;"));
	assert_null(strstr(r.body, "<b>x"));
	dh_free(&r);
	char path[96];
	snprintf(path, sizeof(path), "/bthreads/%llu?st=1&format=html", (unsigned long long)odd);
	dh_get(path, 200, "text/html", &r);
	assert_non_null(strstr(r.body, " dh_other_f2+0x"));
	dh_free(&r);
	dh_get("/?format=html", 200, "text/html", &r);
	assert_non_null(strstr(r.body, "href=\"/bthreads/all?format=pprof\""));
	dh_free(&r);
	/* Chromium: the DOM it builds has the link of every listed task. */
	char dir[] = "/tmp/stb_dh_chromium_XXXXXX";
	assert_non_null(mkdtemp(dir));
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "timeout 120 chromium --headless --no-sandbox --disable-gpu "
		 "--disable-background-networking --disable-component-update --disable-sync "
		 "--no-first-run --user-data-dir=%s --dump-dom http://127.0.0.1:%u/bthreads "
		 "2>/dev/null", dir, dh_port);
	char *dom = dh_run(cmd);
	if (!dom)
		fail_msg("headless chromium could not load the page (apt-get install chromium)");
	for (int i = 0; i < DH_NCHAIN; i++) {
		snprintf(link, sizeof(link), "href=\"/bthreads/%llu?st=1\"",
			 (unsigned long long)dh_chain_ids[i]);
		if (!strstr(dom, link))
			fail_msg("chromium's DOM lacks %s:\n%.3000s", link, dom);
	}
	/* The escaped name is text, not markup, in the DOM too. */
	assert_non_null(strstr(dom, "&lt;b&gt;x&amp;y"));
	free(dom);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(bthread_stop(odd), 0);
	assert_int_equal(bthread_join(odd, NULL), 0);
	STB_TEST_END();
}

static void test_json(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct dh_resp r;
	char path[128];

	dh_get("/bthreads?format=json", 200, "application/json", &r);
	if (!dh_json_shape(r.body))
		fail_msg("not a JSON object:\n%s", r.body);
	assert_non_null(strstr(r.body, "\"schema\": \"stb-tasks/1\""));
	assert_non_null(strstr(r.body, "\"pid\": "));
	assert_non_null(strstr(r.body, "\"tasks\": ["));
	assert_non_null(strstr(r.body, "\"name\": \"dh chain\""));
	assert_null(strstr(r.body, "\"frames\""));
	dh_free(&r);

	snprintf(path, sizeof(path), "/bthreads/%llu?st=1&format=json",
		 (unsigned long long)dh_chain_ids[0]);
	dh_get(path, 200, "application/json", &r);
	if (!dh_json_shape(r.body))
		fail_msg("not a JSON object:\n%s", r.body);
	assert_non_null(strstr(r.body, "\"schema\": \"stb-stacks/1\""));
	assert_non_null(strstr(r.body, "\"state\": \"suspended\""));
	assert_non_null(strstr(r.body, "\"capture\": \"context\""));
	if (!dh_in_order(r.body, "\"function\": \"dh_chain_f3\"", "\"function\": \"dh_chain_f2\"",
			 "\"function\": \"dh_chain_f1\""))
		fail_msg("no f3 < f2 < f1 in:\n%s", r.body);
	dh_free(&r);

	dh_get("/bthreads/all?format=json", 200, "application/json", &r);
	if (!dh_json_shape(r.body))
		fail_msg("not a JSON object:\n%s", r.body);
	char *groups = strstr(r.body, "\"groups\": [");
	assert_non_null(groups);
	char *g3 = strstr(groups, "{\"count\": 3, \"state\": \"suspended\", \"wait\": "
				  "{\"kind\": \"butex\", \"object\": \"0x");
	if (g3 && (!strstr(g3, "\"shortest_s\": ") || !strstr(g3, "\"longest_s\": ") ||
		   !strstr(g3, "\"names\": [")))
		g3 = NULL;
	if (!g3)
		fail_msg("no group of 3 in:\n%s", groups);
	assert_non_null(strstr(g3, "\"function\": \"dh_chain_f3\""));
	dh_free(&r);
	STB_TEST_END();
}

static void test_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	struct dh_resp r;
	char path[128];

	dh_get("/nope", 404, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreadsX", 404, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads/all/more", 404, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads/12345", 404, "text/plain", &r); /* version 0: never an id */
	dh_free(&r);
	/* A finished (joined) bthread. */
	bthread_t done;
	assert_int_equal(bthread_start_background(&done, NULL, dh_quick, NULL), 0);
	bthread_join(done, NULL);
	snprintf(path, sizeof(path), "/bthreads/%llu?st=1", (unsigned long long)done);
	dh_get(path, 404, "text/plain", &r);
	dh_free(&r);

	dh_get("/bthreads/abc", 400, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads/-1", 400, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads/99999999999999999999999", 400, "text/plain", &r);
	dh_free(&r);
	snprintf(path, sizeof(path), "/bthreads/%llu?st=2", (unsigned long long)dh_other_id);
	dh_get(path, 400, "text/plain", &r);
	dh_free(&r);
	dh_get("/bthreads?format=xml", 400, "text/plain", &r);
	dh_free(&r);

	static const char bad_line[] = "GARBAGE\r\n\r\n";
	dh_request(bad_line, sizeof(bad_line) - 1, &r);
	assert_int_equal(r.status, 400);
	dh_free(&r);
	static const char bad_version[] = "GET /bthreads HTTP/2.0\r\n\r\n";
	dh_request(bad_version, sizeof(bad_version) - 1, &r);
	assert_int_equal(r.status, 400);
	dh_free(&r);
	static const char post[] = "POST /bthreads HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
	dh_request(post, sizeof(post) - 1, &r);
	assert_int_equal(r.status, 405);
	assert_string_equal(r.allow, "GET, HEAD");
	dh_free(&r);
	static const char rel[] = "GET bthreads HTTP/1.1\r\n\r\n";
	dh_request(rel, sizeof(rel) - 1, &r);
	assert_int_equal(r.status, 400);
	dh_free(&r);

	/* A NUL byte in the head: 400 at once, not 408 after the I/O timeout. */
	static const char nul[] = "GET /bthreads\0x HTTP/1.1\r\n\r\n";
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dh_request(nul, sizeof(nul) - 1, &r);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(r.status, 400);
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
	dh_free(&r);

	/* A request head over 8 KiB. */
	size_t big = 16384;
	char *req = malloc(big);
	assert_non_null(req);
	int n = snprintf(req, big, "GET /bthreads HTTP/1.1\r\nX-Pad: ");
	memset(req + n, 'a', big - (size_t)n);
	dh_request(req, big, &r);
	assert_int_equal(r.status, 431);
	assert_int_equal(r.clen, (long)r.blen);
	free(req);
	dh_free(&r);

	/* HEAD: the headers of GET, no body. */
	static const char head[] = "HEAD /bthreads HTTP/1.1\r\n\r\n";
	dh_request(head, sizeof(head) - 1, &r);
	assert_int_equal(r.status, 200);
	assert_true(r.clen > 0);
	assert_int_equal(r.blen, 0);
	dh_free(&r);

	/* The index page. */
	dh_get("/", 200, "text/plain", &r);
	assert_non_null(strstr(r.body, "/bthreads/all"));
	dh_free(&r);
	STB_TEST_END();
}

static void test_start_stop(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	uint16_t p2 = 0;
	assert_int_equal(stb_debug_http_start(0, &p2), -EALREADY);

	/* An idle client (connected, sends nothing) must not hold up stop. */
	int idle = dh_connect(dh_port);
	assert_true(idle >= 0);
	stb_test_sleep_ms(50);
	uint64_t t0 = stb_now_ns();
	assert_int_equal(stb_debug_http_stop(), 0);
	double ms = stb_test_ms_since(t0);
	if (ms > 2000)
		fail_msg("stop took %.0f ms with an idle client", ms);
	char c;
	assert_true(recv(idle, &c, 1, 0) <= 0); /* closed without an answer */
	close(idle);
	assert_true(dh_connect(dh_port) < 0);   /* nobody listens any more */
	assert_int_equal(stb_debug_http_stop(), -ESRCH);

	/* Restart; the same port is free again. */
	assert_int_equal(stb_debug_http_start(dh_port, &p2), 0);
	assert_int_equal(p2, dh_port);
	struct dh_resp r;
	dh_get("/bthreads", 200, "text/plain", &r);
	dh_free(&r);

	/* A port in use. */
	assert_int_equal(stb_debug_http_stop(), 0);
	int blocker = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	assert_int_equal(bind(blocker, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(blocker, 1), 0);
	assert_int_equal(getsockname(blocker, (struct sockaddr *)&sa, &sl), 0);
	assert_int_equal(stb_debug_http_start(ntohs(sa.sin_port), NULL), -EADDRINUSE);
	close(blocker);
	/* Leave it running for the teardown. */
	assert_int_equal(stb_debug_http_start(dh_port, NULL), 0);
	STB_TEST_END();
}

/* Many concurrent clients, more than the endpoint serves at once. */
static void test_concurrent(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	enum { N = 40 };
	int fds[N];
	static const char req[] = "GET /bthreads/all HTTP/1.1\r\n\r\n";
	for (int i = 0; i < N; i++) {
		fds[i] = dh_connect(dh_port);
		assert_true(fds[i] >= 0);
		assert_int_equal(send(fds[i], req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	}
	char *buf = malloc(DH_BODY_MAX);
	assert_non_null(buf);
	for (int i = 0; i < N; i++) {
		size_t len = 0;
		ssize_t n;
		while ((n = recv(fds[i], buf + len, DH_BODY_MAX - 1 - len, 0)) > 0)
			len += (size_t)n;
		buf[len] = '\0';
		close(fds[i]);
		if (strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) != 0 || !strstr(buf, "3 bthreads [suspended, "))
			fail_msg("client %d: %.200s", i, buf);
	}
	free(buf);
	STB_TEST_END();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_one_task),
		cmocka_unit_test(test_all_grouped),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_runtime_frames_and_lines),
		cmocka_unit_test(test_profile_formats),
		cmocka_unit_test(test_html),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_concurrent),
		cmocka_unit_test(test_start_stop),
	};
	return cmocka_run_group_tests(tests, dh_setup, dh_teardown);
}
