/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The opt-in debug HTTP endpoint (stb_debug_http_start): bRPC-style
 * /bthreads, /bthreads/<id>[?st=1] and /bthreads/all pages on 127.0.0.1,
 * served by bthreads with bthread_fd_wait. Owns only the HTTP side; the tasks
 * come from stb_self_collect (dump.c), every format from the report writers
 * (runtime/stacks/report/), the HTML for browsers from debug_html.c.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "debug_html.h"
#include "internal.h"
#include "report/formats.h"
#include "stb/stb.h"
#include "trace.h"

#define STB_DH_MAX_CONNS 16
#define STB_DH_HEAD_MAX 8192          /* request line + headers, bytes */
#define STB_DH_IO_TIMEOUT_MS 5000     /* to receive the request / send the response */
#define STB_DH_BACKLOG 64

struct stb_dh_conn {
	bthread_t tid;
	int fd;
	uint32_t done;               /* set by the connection bthread as it ends */
};

static struct {
	pthread_mutex_t lock;        /* serializes start and stop */
	bool running;
	int lfd;
	bthread_t listener;
	uint32_t stopping;
	struct stb_dh_conn conns[STB_DH_MAX_CONNS]; /* owned by the listener bthread */
} stb_dh = {.lock = PTHREAD_MUTEX_INITIALIZER, .lfd = -1};

/*
 * errno of the calling thread, read afresh: the bthread may have moved to
 * another worker during a wait, and glibc's __errno_location() is const, so a
 * plain errno could be read at the old thread's address.
 */
static STB_NOIPA int stb_dh_errno(void)
{
	return errno;
}

/* ---- one request ---- */

struct stb_dh_response {
	int status;
	const char *type;            /* Content-Type */
	char *body;                  /* malloc'd (open_memstream) or NULL */
	size_t len;
	bool head_only;              /* HEAD: no body on the wire */
};

static const char *dh_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	default: return "Error";
	}
}

/* Sets a text/plain response "<status> <reason>: <message>\n". */
static void dh_error(struct stb_dh_response *res, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void dh_error(struct stb_dh_response *res, int status, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	free(res->body);
	res->body = NULL;
	res->len = 0;
	res->status = status;
	res->type = stb_format_get(STB_FORMAT_TEXT)->mime;
	int n = asprintf(&res->body, "%d %s: %s\n", status, dh_reason(status), msg);
	if (n < 0)
		res->body = NULL;
	else
		res->len = (size_t)n;
}

/* Strict decimal bthread id (no sign, no leading garbage, fits 64 bits). */
static bool dh_parse_id(const char *s, size_t len, uint64_t *out)
{
	if (len == 0 || len > 20)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

struct stb_dh_query {
	bool st;
	bool json;
	int format;          /* enum stb_format, STB_FORMAT_HTML_PAGE; -1: not given */
	bool runtime_frames; /* runtime_frames=1 */
	bool lines;          /* lines=0 turns it off */
	bool all_ids;        /* v=1 */
	bool no_threads;     /* threads=0 */
	uint64_t stuck_ns;   /* stuck=SECONDS */
};

/* A 0|1 value. */
static bool dh_flag(const char *v, size_t vlen, bool *out)
{
	if (vlen != 1 || (v[0] != '0' && v[0] != '1'))
		return false;
	*out = v[0] == '1';
	return true;
}

/* Parses "k=v&k=v": st, runtime_frames, lines, threads and v (0|1), format
 * (text, json, pprof, folded, flamegraph, html), stuck=SECONDS; other keys
 * are ignored. */
static bool dh_parse_query(const char *q, size_t len, struct stb_dh_query *out, char *why,
			       size_t whylen)
{
	size_t i = 0;
	while (i < len) {
		size_t j = i;
		while (j < len && q[j] != '&')
			j++;
		const char *kv = q + i;
		size_t n = j - i;
		const char *eq = memchr(kv, '=', n);
		size_t klen = eq ? (size_t)(eq - kv) : n;
		const char *v = eq ? eq + 1 : "";
		size_t vlen = eq ? n - klen - 1 : 0;
		if (klen == 2 && memcmp(kv, "st", 2) == 0) {
			if (vlen == 1 && (v[0] == '0' || v[0] == '1')) {
				out->st = v[0] == '1';
			} else {
				snprintf(why, whylen, "st must be 0 or 1");
				return false;
			}
		} else if (klen == 5 && memcmp(kv, "stuck", 5) == 0) {
			if (!stb_parse_seconds(v, vlen, 86400, &out->stuck_ns)) {
				snprintf(why, whylen, "stuck must be seconds (e.g. 5 or 0.5)");
				return false;
			}
		} else if (klen == 1 && kv[0] == 'v') {
			if (!dh_flag(v, vlen, &out->all_ids)) {
				snprintf(why, whylen, "v must be 0 or 1");
				return false;
			}
		} else if (klen == 6 && memcmp(kv, "format", 6) == 0) {
			char name[16];
			const struct stb_format_info *f = NULL;
			if (vlen < sizeof(name)) {
				memcpy(name, v, vlen);
				name[vlen] = '\0';
				f = stb_format_named(name, true);
			}
			if (!f) {
				char list[64];
				stb_format_list(list, sizeof(list), STB_FORMATS_PAGES);
				snprintf(why, whylen, "format must be %s", list);
				return false;
			}
			out->format = f->format;
			out->json = f->format == STB_FORMAT_JSON;
		} else if (klen == 14 && memcmp(kv, "runtime_frames", 14) == 0) {
			if (!dh_flag(v, vlen, &out->runtime_frames)) {
				snprintf(why, whylen, "runtime_frames must be 0 or 1");
				return false;
			}
		} else if (klen == 5 && memcmp(kv, "lines", 5) == 0) {
			if (!dh_flag(v, vlen, &out->lines)) {
				snprintf(why, whylen, "lines must be 0 or 1");
				return false;
			}
		} else if (klen == 7 && memcmp(kv, "threads", 7) == 0) {
			bool threads;
			if (!dh_flag(v, vlen, &threads)) {
				snprintf(why, whylen, "threads must be 0 or 1");
				return false;
			}
			out->no_threads = !threads;
		}
		i = j + 1;
	}
	return true;
}

static const char stb_dh_index[] =
	"stb debug endpoint\n"
	"  /bthreads               live bthreads: id, name, state (tid when running)\n"
	"  /bthreads/<id>          one bthread; ?st=1 adds its stack\n"
	"  /bthreads/all           every stack, grouped by identical stack and wait, with the\n"
	"                          count, times, ids (?v=1: every member) and the deadlocks,\n"
	"                          then every thread of the process (?threads=0: not them)\n"
	"  /bthreads/leaks         bthreads by creation site: count, oldest and median age,\n"
	"                          states\n"
	"Add ?stuck=S for the tasks blocked, or running without a switch, S seconds or more.\n"
	"Add ?format=json for JSON (schemas stb-tasks/1, stb-stacks/1); stacks also in\n"
	"?format=pprof (go tool pprof http://HOST:PORT/bthreads/all?format=pprof), folded,\n"
	"flamegraph; ?runtime_frames=1 shows the runtime's own frames, ?lines=0 leaves\n"
	"out file:line. Browsers (Accept: text/html) get HTML.\n";

/* Replaces the text body of res by its HTML page. false on ENOMEM. */
static bool dh_html_wrap(struct stb_dh_response *res, const char *path, size_t plen)
{
	char title[256];
	snprintf(title, sizeof(title), "stb %.*s", (int)(plen > 200 ? 200 : plen), path);
	char *body = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&body, &len);
	if (!out)
		return false;
	int rc = stb_dh_html_page(out, title, res->body, res->len);
	if (fclose(out) != 0 || rc != 0) {
		free(body);
		return false;
	}
	free(res->body);
	res->body = body;
	res->len = len;
	res->type = stb_format_get(STB_FORMAT_HTML_PAGE)->mime;
	return true;
}

/*
 * Renders the page for path/query into res. Not inlined: its caller's frame
 * (the connection bthread) is where a self-trace of this bthread starts.
 */
static __attribute__((noinline)) void stb_dh_render(const char *path, size_t plen,
						    const struct stb_dh_query *q,
						    struct stb_dh_response *res)
{
	uint64_t self_ip, self_sp, self_bp;
	STB_CALLER_FRAME(self_ip, self_sp, self_bp);
	static const char prefix[] = "/bthreads";
	const size_t pre = sizeof(prefix) - 1;
	struct stb_self_set set;
	memset(&set, 0, sizeof(set));
	FILE *out = NULL;
	bool all = false, list = false, one = false, leaks = false;
	uint64_t id = 0;

	bool html = q->format == STB_FORMAT_HTML_PAGE;
	int format = q->format >= 0 ? q->format : STB_FORMAT_TEXT;
	const struct stb_format_info *fi = stb_format_get(format);
	if (plen == 1 && path[0] == '/' && html) {
		out = open_memstream(&res->body, &res->len);
		if (!out || stb_dh_html_index(out) != 0 || fclose(out) != 0) {
			out = NULL;
			dh_error(res, 500, "out of memory");
			goto cleanup;
		}
		out = NULL;
		res->status = 200;
		res->type = stb_format_get(STB_FORMAT_HTML_PAGE)->mime;
		goto cleanup;
	}
	if (plen == 1 && path[0] == '/') {
		res->status = 200;
		res->type = stb_format_get(STB_FORMAT_TEXT)->mime;
		res->body = strdup(stb_dh_index);
		if (!res->body)
			dh_error(res, 500, "out of memory");
		else
			res->len = strlen(res->body);
		goto cleanup;
	}
	if (plen < pre || memcmp(path, prefix, pre) != 0 ||
	    (plen > pre && path[pre] != '/')) {
		dh_error(res, 404, "no page %.*s (try /bthreads)", (int)(plen > 200 ? 200 : plen),
			     path);
		goto cleanup;
	}
	const char *rest = path + pre + (plen > pre);
	size_t rlen = plen > pre ? plen - pre - 1 : 0;
	if (rlen == 0) {
		list = true;
	} else if (rlen == 3 && memcmp(rest, "all", 3) == 0) {
		all = true;
	} else if (rlen == 5 && memcmp(rest, "leaks", 5) == 0) {
		leaks = true;
	} else if (dh_parse_id(rest, rlen, &id) && id != 0) {
		one = true;
	} else if (memchr(rest, '/', rlen)) {
		dh_error(res, 404, "no page %.*s", (int)(plen > 200 ? 200 : plen), path);
		goto cleanup;
	} else {
		dh_error(res, 400, "'%.*s' is not a bthread id (a decimal number as listed by "
				       "/bthreads)", (int)(rlen > 64 ? 64 : rlen), rest);
		goto cleanup;
	}

	bool stacks = all || (one && q->st);
	if (leaks && !fi->write_leaks) {
		dh_error(res, 400, "/bthreads/leaks is text, json or html, not %s", fi->name);
		goto cleanup;
	}
	if (!stacks && !fi->lists) {
		dh_error(res, 400, "format=%s needs stacks: /bthreads/all or /bthreads/<id>?st=1",
			 fi->name);
		goto cleanup;
	}
	if (leaks && q->stuck_ns) {
		dh_error(res, 400, "stuck does not apply to /bthreads/leaks (every bthread)");
		goto cleanup;
	}
	const struct stb_self_opts so = {
		.only = one ? id : 0, .stacks = stacks, .stuck_ns = q->stuck_ns,
		.deadlocks = !leaks, .holders = !leaks, .threads = all && !leaks && !q->no_threads,
		.self_ip = self_ip, .self_sp = self_sp, .self_bp = self_bp,
	};
	int rc = stb_self_collect(&so, &set);
	if (rc == -ESRCH) {
		dh_error(res, 404, "no live bthread %" PRIu64, id);
		goto cleanup;
	}
	if (rc < 0) {
		dh_error(res, 500, "cannot collect the tasks: %s", strerror(-rc));
		goto cleanup;
	}
	out = open_memstream(&res->body, &res->len);
	if (!out) {
		dh_error(res, 500, "out of memory");
		goto cleanup;
	}
	if (leaks) {
		rc = stb_self_leaks(out, "stb debug http", &set, format);
		goto written;
	}
	struct stb_report_meta meta;
	struct stb_report r;
	stb_self_report(&r, &meta, out, "stb debug http", &set);
	r.group = all;
	r.all_ids = q->all_ids;
	r.max_depth = 64;
	r.runtime_frames = q->runtime_frames;
	r.lines = q->lines;
	r.runtime_hint = "?runtime_frames=1";
	r.deadlock_hint = "/bthreads/all shows it";
	r.threads_hint = "?threads=0";
	if (stacks)
		rc = stb_report_write(&r, set.res.tasks, set.res.n, format);
	else
		rc = stb_report_list(&r, set.res.tasks, set.res.n, q->json);
	if (list && !q->json)
		fprintf(out, "%zu tasks\n", set.res.n);
written:
	if (fclose(out) != 0 || rc < 0) {
		out = NULL;
		dh_error(res, 500, "cannot format the report");
		goto cleanup;
	}
	out = NULL;
	res->status = 200;
	res->type = fi->mime;
	if (html && !dh_html_wrap(res, path, plen))
		dh_error(res, 500, "out of memory");
cleanup:
	if (out)
		fclose(out);
	stb_self_set_free(&set);
}

/* Does a header line "Accept: ..." of headers name text/html (a browser)? */
static bool dh_accepts_html(const char *headers)
{
	for (const char *p = headers; *p;) {
		const char *eol = strpbrk(p, "\r\n");
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		if (n > 7 && strncasecmp(p, "accept:", 7) == 0) {
			for (size_t i = 7; i + 9 <= n; i++)
				if (strncasecmp(p + i, "text/html", 9) == 0)
					return true;
		}
		p += n;
		while (*p == '\r' || *p == '\n')
			p++;
	}
	return false;
}

/* Parses the request head (NUL-terminated) and renders the response. */
static void dh_handle(char *head, struct stb_dh_response *res)
{
	char *eol = strpbrk(head, "\r\n");
	const char *headers = eol ? eol + 1 : NULL;
	if (eol)
		*eol = '\0';
	char *sp1 = strchr(head, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strchr(sp2 + 1, ' ') || sp1 == head || sp2 == sp1 + 1) {
		dh_error(res, 400, "malformed request line");
		return;
	}
	*sp1 = '\0';
	*sp2 = '\0';
	const char *method = head, *target = sp1 + 1, *version = sp2 + 1;
	if (strcmp(version, "HTTP/1.1") != 0 && strcmp(version, "HTTP/1.0") != 0) {
		dh_error(res, 400, "unsupported protocol version");
		return;
	}
	if (strcmp(method, "HEAD") == 0) {
		res->head_only = true;
	} else if (strcmp(method, "GET") != 0) {
		dh_error(res, 405, "only GET and HEAD are served");
		return;
	}
	if (target[0] != '/') {
		dh_error(res, 400, "the request target must be an absolute path");
		return;
	}
	const char *qm = strchr(target, '?');
	size_t plen = qm ? (size_t)(qm - target) : strlen(target);
	struct stb_dh_query q = {.format = -1, .lines = true};
	char why[96];
	if (qm && !dh_parse_query(qm + 1, strlen(qm + 1), &q, why, sizeof(why))) {
		dh_error(res, 400, "%s", why);
		return;
	}
	if (q.format == -1 && headers && dh_accepts_html(headers))
		q.format = STB_FORMAT_HTML_PAGE;
	stb_dh_render(target, plen, &q, res);
}

static struct timespec dh_abstime(int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000l;
	if (ts.tv_nsec >= 1000000000l) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000l;
	}
	return ts;
}

/* Writes all of buf; 0 or -1 (timeout, error, stopped). */
static int dh_write_all(int fd, const char *buf, size_t len, const struct timespec *until)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n < 0 && (stb_dh_errno() == EAGAIN || stb_dh_errno() == EWOULDBLOCK)) {
			/* A stop's interrupt ends the wait with 0 (as bRPC's). */
			if (bthread_fd_timedwait(fd, EPOLLOUT, until) != 0 ||
			    __atomic_load_n(&stb_dh.stopping, __ATOMIC_ACQUIRE))
				return -1;
		} else if (!(n < 0 && stb_dh_errno() == EINTR)) {
			return -1;
		}
	}
	return 0;
}

/*
 * Reads the request head into buf (size STB_DH_HEAD_MAX + 1, NUL-terminated).
 * Returns 0, or an HTTP status to answer with (400: incomplete, or a NUL byte;
 * 408, 431), or -1 to close
 * without answering (peer closed, error, endpoint stopping).
 */
static int dh_read_head(int fd, char *buf, const struct timespec *until)
{
	size_t len = 0;
	for (;;) {
		ssize_t n = recv(fd, buf + len, STB_DH_HEAD_MAX - len, 0);
		if (n > 0) {
			/* A NUL byte is no part of an HTTP head (and would hide its end
			 * from the string functions below). */
			if (memchr(buf + len, '\0', (size_t)n))
				return 400;
			len += (size_t)n;
			buf[len] = '\0';
			if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
				return 0;
			if (len == STB_DH_HEAD_MAX)
				return 431;
			continue;
		}
		if (n == 0)
			return len ? 400 : -1;
		if (stb_dh_errno() == EINTR)
			continue;
		if (stb_dh_errno() != EAGAIN && stb_dh_errno() != EWOULDBLOCK)
			return -1;
		if (bthread_fd_timedwait(fd, EPOLLIN, until) != 0) {
			if (stb_dh_errno() == ETIMEDOUT && !__atomic_load_n(&stb_dh.stopping, __ATOMIC_ACQUIRE))
				return 408;
			return -1;
		}
		if (__atomic_load_n(&stb_dh.stopping, __ATOMIC_ACQUIRE))
			return -1; /* woken by the stop's interrupt (the wait returns 0) */
	}
}

static void *dh_conn_main(void *arg)
{
	struct stb_dh_conn *c = arg;
	struct stb_dh_response res = {.status = 500};
	char *head = malloc(STB_DH_HEAD_MAX + 1);
	char *hdr = NULL;
	if (!head)
		goto cleanup;
	struct timespec until = dh_abstime(STB_DH_IO_TIMEOUT_MS);
	int st = dh_read_head(c->fd, head, &until);
	if (st < 0)
		goto cleanup;
	if (st > 0)
		dh_error(&res, st, "%s", st == 431 ? "the request head exceeds 8192 bytes"
					      : st == 408 ? "no complete request within 5 s"
							  : "incomplete request");
	else
		dh_handle(head, &res);
	if (!res.body) {
		dh_error(&res, 500, "out of memory");
		if (!res.body)
			goto cleanup;
	}
	int hlen = asprintf(&hdr,
			    "HTTP/1.1 %d %s\r\n"
			    "Content-Type: %s\r\n"
			    "Content-Length: %zu\r\n"
			    "%s"
			    "Cache-Control: no-store\r\n"
			    "Connection: close\r\n\r\n",
			    res.status, dh_reason(res.status), res.type, res.len,
			    res.status == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (hlen < 0) {
		hdr = NULL;
		goto cleanup;
	}
	until = dh_abstime(STB_DH_IO_TIMEOUT_MS);
	if (dh_write_all(c->fd, hdr, (size_t)hlen, &until) == 0 && !res.head_only)
		dh_write_all(c->fd, res.body, res.len, &until);
	shutdown(c->fd, SHUT_WR);
cleanup:
	free(hdr);
	free(res.body);
	free(head);
	close(c->fd);
	c->fd = -1;
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ---- listener ---- */

/* Joins finished connection bthreads; returns a free entry or NULL. */
static struct stb_dh_conn *dh_reap(void)
{
	struct stb_dh_conn *free_slot = NULL;
	for (int i = 0; i < STB_DH_MAX_CONNS; i++) {
		struct stb_dh_conn *c = &stb_dh.conns[i];
		if (c->tid && __atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
			bthread_join(c->tid, NULL);
			c->tid = 0;
		}
		if (!c->tid && !free_slot)
			free_slot = c;
	}
	return free_slot;
}

static void *dh_listen_main(void *arg)
{
	(void)arg;
	int lfd = stb_dh.lfd;
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, "stb debug http conn");
	while (!__atomic_load_n(&stb_dh.stopping, __ATOMIC_ACQUIRE)) {
		struct stb_dh_conn *c = dh_reap();
		if (!c) {
			bthread_usleep(10000); /* all connections busy: let one finish */
			continue;
		}
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int err = stb_dh_errno();
			if (err == EAGAIN || err == EWOULDBLOCK)
				bthread_fd_wait(lfd, EPOLLIN);
			else if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
				bthread_usleep(100000);
			continue; /* EINTR, ECONNABORTED, ... */
		}
		c->fd = fd;
		__atomic_store_n(&c->done, 0, __ATOMIC_RELAXED);
		if (bthread_start_background(&c->tid, &attr, dh_conn_main, c) != 0) {
			c->tid = 0;
			close(fd);
		}
	}
	for (int i = 0; i < STB_DH_MAX_CONNS; i++) {
		struct stb_dh_conn *c = &stb_dh.conns[i];
		if (!c->tid)
			continue;
		bthread_stop(c->tid); /* interrupts its socket waits */
		bthread_join(c->tid, NULL);
		c->tid = 0;
	}
	return NULL;
}

int stb_debug_http_start(uint16_t port, uint16_t *bound_port)
{
	int rc = 0;
	int fd = -1;
	pthread_mutex_lock(&stb_dh.lock);
	if (stb_dh.running) {
		rc = -EALREADY;
		goto cleanup;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		goto cleanup;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t slen = sizeof(sa);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, STB_DH_BACKLOG) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &slen) != 0) {
		rc = -errno;
		goto cleanup;
	}
	stb_dh.lfd = fd;
	__atomic_store_n(&stb_dh.stopping, 0, __ATOMIC_RELEASE);
	memset(stb_dh.conns, 0, sizeof(stb_dh.conns));
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, "stb debug http");
	int err = bthread_start_background(&stb_dh.listener, &attr, dh_listen_main, NULL);
	if (err != 0) {
		stb_dh.lfd = -1;
		rc = -err;
		goto cleanup;
	}
	fd = -1; /* the listener owns it now */
	stb_dh.running = true;
	if (bound_port)
		*bound_port = ntohs(sa.sin_port);
cleanup:
	if (fd >= 0)
		close(fd);
	pthread_mutex_unlock(&stb_dh.lock);
	return rc;
}

int stb_debug_http_stop(void)
{
	int rc = 0;
	pthread_mutex_lock(&stb_dh.lock);
	if (!stb_dh.running) {
		rc = -ESRCH;
		goto cleanup;
	}
	__atomic_store_n(&stb_dh.stopping, 1, __ATOMIC_RELEASE);
	bthread_stop(stb_dh.listener); /* ends its accept wait (or sleep) */
	bthread_join(stb_dh.listener, NULL);
	close(stb_dh.lfd);
	stb_dh.lfd = -1;
	stb_dh.listener = 0;
	stb_dh.running = false;
cleanup:
	pthread_mutex_unlock(&stb_dh.lock);
	return rc;
}
