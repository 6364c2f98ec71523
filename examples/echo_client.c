/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-echo-client: closed-loop load for stb-echo-server on bthreads (one
 * bthread per connection). Checks every reply byte by byte, mixes in the
 * special request kinds at a given rate, and prints requests/s and latency
 * percentiles from a log-linear histogram (text, or one JSON line).
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bthread/bthread.h>

#include "echo_proto.h"

#define EXIT_USAGE 64
#define MAX_CONNECTIONS 10000u

/*
 * Latency histogram, HdrHistogram-style: values below 64 ns exactly, above
 * that 32 sub-buckets per power of two (at most 3.1 % relative error).
 */
#define HIST_SUB_BITS 5u
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_LINEAR 64u
#define HIST_BUCKETS (HIST_LINEAR + (64u - 6u) * HIST_SUB)

enum { KIND_ECHO, KIND_DB, KIND_RETRY, KIND_CPU, NKINDS };
static const char kind_byte[NKINDS] = {ECHO_KIND_ECHO, ECHO_KIND_DB, ECHO_KIND_RETRY,
				       ECHO_KIND_CPU};
static const char *const kind_name[NKINDS] = {"echo", "db", "retry", "cpu"};

struct client_opts {
	const char *host;
	uint16_t port;
	unsigned connections;
	uint32_t size;
	uint64_t requests;      /* 0: run for duration_s */
	unsigned duration_s;
	unsigned mix_pct;
	unsigned kinds[NKINDS]; /* special kinds in rotation */
	unsigned nkinds;
	int workers;
	unsigned timeout_ms;
	bool json;
};

struct client_conn {
	unsigned no;
	bthread_t tid;
	uint64_t done;
};

static struct {
	struct client_opts o;
	struct sockaddr_in addr;
	uint64_t next_ticket;
	/* start barrier: the clock starts when every connection is established */
	bthread_mutex_t start_lock;
	bthread_cond_t start_cv;
	unsigned arrived;
	bool go;
	uint64_t t0_ns;
	uint64_t deadline_ns;   /* duration mode */
	uint64_t ok, failed, by_kind[NKINDS];
	uint64_t hist[HIST_BUCKETS];
	uint64_t max_ns;
	uint64_t sum_ns;
	unsigned conn_errors;
	char first_error[300];
} g;

static unsigned hist_index(uint64_t v)
{
	if (v < HIST_LINEAR)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v);
	return HIST_LINEAR + (e - 6u) * HIST_SUB + (unsigned)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* Highest value that lands in bucket idx. */
static uint64_t hist_upper(unsigned idx)
{
	if (idx < HIST_LINEAR)
		return idx;
	unsigned e = 6u + (idx - HIST_LINEAR) / HIST_SUB;
	uint64_t sub = (idx - HIST_LINEAR) % HIST_SUB;
	uint64_t low = (HIST_SUB + sub) << (e - HIST_SUB_BITS);
	return low + (1ull << (e - HIST_SUB_BITS)) - 1;
}

static void hist_record(uint64_t ns)
{
	__atomic_fetch_add(&g.hist[hist_index(ns)], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g.sum_ns, ns, __ATOMIC_RELAXED);
	uint64_t m = __atomic_load_n(&g.max_ns, __ATOMIC_RELAXED);
	while (ns > m && !__atomic_compare_exchange_n(&g.max_ns, &m, ns, true, __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
		;
}

/* Value at quantile q (0..1) in ns: the upper end of the bucket holding it. */
static uint64_t hist_quantile(uint64_t total, double q)
{
	if (total == 0)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += g.hist[i];
		if (seen >= rank)
			return hist_upper(i) < g.max_ns ? hist_upper(i) : g.max_ns;
	}
	return g.max_ns;
}

/* Records the first failure (message to stderr always). */
static void client_fail(struct client_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void client_fail(struct client_conn *c, const char *fmt, ...)
{
	char msg[240];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "stb-echo-client: connection %u: %s\n", c->no, msg);
	if (__atomic_fetch_add(&g.conn_errors, 1, __ATOMIC_ACQ_REL) == 0)
		snprintf(g.first_error, sizeof(g.first_error), "connection %u: %s", c->no, msg);
}

/* The kind of request number k: mix_pct % of them are special, in rotation. */
static unsigned kind_of(uint64_t k)
{
	uint64_t pct = g.o.mix_pct;
	if (pct == 0 || g.o.nkinds == 0)
		return KIND_ECHO;
	uint64_t before = k * pct / 100u, after = (k + 1) * pct / 100u;
	if (after == before)
		return KIND_ECHO;
	return g.o.kinds[before % g.o.nkinds];
}

static void fill_request(unsigned char *req, uint32_t size, uint64_t k, unsigned conn, unsigned kind)
{
	echo_put_be32(req, size);
	req[ECHO_HDR] = (unsigned char)kind_byte[kind];
	uint64_t x = k * 0x9E3779B97F4A7C15ull + conn;
	for (uint32_t j = ECHO_MIN_FRAME; j < size; j++) {
		x ^= x >> 29;
		x *= 0xBF58476D1CE4E5B9ull;
		req[j] = (unsigned char)(x >> 56);
	}
}

/* 0 ok; -1 with the failure recorded. */
static int send_all(struct client_conn *c, int fd, const unsigned char *p, size_t len,
		    const struct timespec *until)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n < 0 && (echo_errno() == EAGAIN || echo_errno() == EWOULDBLOCK)) {
			if (bthread_fd_timedwait(fd, EPOLLOUT, until) != 0 && echo_errno() == ETIMEDOUT) {
				client_fail(c, "sending a request timed out after %u ms", g.o.timeout_ms);
				return -1;
			}
		} else if (!(n < 0 && echo_errno() == EINTR)) {
			client_fail(c, "send failed: %s (the server dropped the connection?)",
				    strerror(echo_errno()));
			return -1;
		}
	}
	return 0;
}

static int recv_all(struct client_conn *c, int fd, unsigned char *p, size_t len,
		    const struct timespec *until, uint64_t done)
{
	size_t want = len;
	while (len > 0) {
		ssize_t n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n == 0) {
			client_fail(c, "the server closed the connection after %" PRIu64
				       " replies, %zu of %zu bytes into a reply (reply lost)",
				    done, want - len, want);
			return -1;
		} else if (echo_errno() == EAGAIN || echo_errno() == EWOULDBLOCK) {
			if (bthread_fd_timedwait(fd, EPOLLIN, until) != 0 && echo_errno() == ETIMEDOUT) {
				client_fail(c, "no complete reply within %u ms (reply lost; %zu of %zu "
					       "bytes received)", g.o.timeout_ms, want - len, want);
				return -1;
			}
		} else if (echo_errno() != EINTR) {
			client_fail(c, "recv failed: %s (connection dropped)", strerror(echo_errno()));
			return -1;
		}
	}
	return 0;
}

static int client_connect(struct client_conn *c)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		client_fail(c, "socket: %s", strerror(echo_errno()));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&g.addr, sizeof(g.addr)) != 0) {
		int err = echo_errno();
		if (err == EINPROGRESS) {
			struct timespec until = stb_realtime_after_ms(g.o.timeout_ms);
			socklen_t len = sizeof(err);
			if (bthread_fd_timedwait(fd, EPOLLOUT, &until) != 0)
				err = ETIMEDOUT;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
				err = echo_errno();
		}
		if (err != 0) {
			client_fail(c, "cannot connect to %s:%u: %s%s", g.o.host, (unsigned)g.o.port,
				    strerror(err),
				    err == ECONNREFUSED ? " (is stb-echo-server running there?)" : "");
			close(fd);
			return -1;
		}
	}
	return fd;
}

/*
 * Counts n connections as set up (or failed) and, when wait, blocks until all
 * are; the last one to arrive starts the clock.
 */
static void client_arrive(unsigned n, bool wait)
{
	bthread_mutex_lock(&g.start_lock);
	g.arrived += n;
	if (g.arrived == g.o.connections && !g.go) {
		g.t0_ns = stb_now_ns();
		g.deadline_ns = g.t0_ns + (uint64_t)g.o.duration_s * 1000000000ull;
		g.go = true;
		bthread_cond_broadcast(&g.start_cv);
	}
	while (wait && !g.go)
		bthread_cond_wait(&g.start_cv, &g.start_lock);
	bthread_mutex_unlock(&g.start_lock);
}

static void *client_conn_main(void *arg)
{
	struct client_conn *c = arg;
	unsigned char *req = malloc(g.o.size), *rep = malloc(g.o.size);
	int fd = -1;
	bool arrived = false;
	if (!req || !rep) {
		client_fail(c, "out of memory");
		goto cleanup;
	}
	fd = client_connect(c);
	arrived = true;
	client_arrive(1, true);
	if (fd < 0)
		goto cleanup;
	for (;;) {
		if (!g.o.requests && stb_now_ns() >= g.deadline_ns)
			break;
		uint64_t k = __atomic_fetch_add(&g.next_ticket, 1, __ATOMIC_RELAXED);
		if (g.o.requests && k >= g.o.requests)
			break;
		unsigned kind = kind_of(k);
		fill_request(req, g.o.size, k, c->no, kind);
		struct timespec until = stb_realtime_after_ms(g.o.timeout_ms);
		uint64_t t0 = stb_now_ns();
		if (send_all(c, fd, req, g.o.size, &until) != 0 ||
		    recv_all(c, fd, rep, g.o.size, &until, c->done) != 0) {
			__atomic_fetch_add(&g.failed, 1, __ATOMIC_RELAXED);
			break;
		}
		uint64_t dt = stb_now_ns() - t0;
		if (memcmp(req, rep, g.o.size) != 0) {
			uint32_t at = 0;
			while (req[at] == rep[at])
				at++;
			client_fail(c, "wrong reply to request %" PRIu64 " (%s): byte %u is 0x%02x, "
				       "sent 0x%02x", k, kind_name[kind], at, rep[at], req[at]);
			__atomic_fetch_add(&g.failed, 1, __ATOMIC_RELAXED);
			break;
		}
		hist_record(dt);
		__atomic_fetch_add(&g.ok, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&g.by_kind[kind], 1, __ATOMIC_RELAXED);
		c->done++;
	}
cleanup:
	if (!arrived)
		client_arrive(1, false);
	if (fd >= 0)
		close(fd);
	free(req);
	free(rep);
	return NULL;
}

/* ---- command line ---- */

static void client_usage(FILE *out)
{
	fprintf(out,
		"Usage: stb-echo-client --port N [options]\n"
		"Closed-loop load for stb-echo-server: every connection (a bthread) sends one\n"
		"request, waits for its echo, checks it byte by byte and sends the next. The\n"
		"clock (--duration, requests/s) starts once every connection is established.\n"
		"\n"
		"Options:\n"
		"  -p, --port N          server port (required)\n"
		"  -H, --host ADDR       server IPv4 address or name (default 127.0.0.1)\n"
		"  -c, --connections N   concurrent connections, 1..%u (default 8)\n"
		"  -s, --size BYTES      request size including the 5-byte header, %u..%u\n"
		"                        (default 64)\n"
		"  -d, --duration SEC    run for SEC seconds, 1..86400 (default 5)\n"
		"  -n, --requests N      send N requests in total instead of --duration\n"
		"  -m, --mix PERCENT     make PERCENT %% of the requests special kinds, 0..100\n"
		"                        (default 0), taken in rotation from --kinds\n"
		"  -k, --kinds LIST      special kinds for --mix, comma-separated from db, retry,\n"
		"                        cpu (default db,retry,cpu)\n"
		"  -w, --workers N       bthread worker pthreads, 1..256 (default: 9)\n"
		"  -t, --timeout-ms N    a request fails if its reply takes longer, 1..600000\n"
		"                        (default 10000)\n"
		"  -j, --json            print only a one-line JSON summary\n"
		"  -h, --help            this text\n"
		"\n"
		"Examples:\n"
		"  stb-echo-client --port 7000 --connections 16 --duration 10\n"
		"  stb-echo-client --port 7000 --requests 1000 --mix 20 --kinds db,retry\n"
		"  stb-echo-client --port 7000 --size 4096 --duration 5 --json\n"
		"\n"
		"Exit status: 0 every reply was right, 1 a reply was wrong or lost or a connection\n"
		"failed, 64 usage error.\n",
		MAX_CONNECTIONS, ECHO_MIN_FRAME, ECHO_MAX_FRAME);
}

static bool parse_kinds(const char *s, struct client_opts *o)
{
	o->nkinds = 0;
	while (*s) {
		size_t n = strcspn(s, ",");
		unsigned k = NKINDS;
		for (unsigned i = KIND_DB; i < NKINDS; i++)
			if (strlen(kind_name[i]) == n && strncmp(s, kind_name[i], n) == 0)
				k = i;
		if (k == NKINDS || o->nkinds == NKINDS)
			return false;
		o->kinds[o->nkinds++] = k;
		s += n;
		if (*s == ',' && *++s == '\0')
			return false;
	}
	return o->nkinds > 0;
}

/* Returns 0, -1 (--help shown) or EXIT_USAGE. */
static int client_parse_args(int argc, char **argv, struct client_opts *o)
{
	static const struct option longopts[] = {
		{"port", required_argument, NULL, 'p'},
		{"host", required_argument, NULL, 'H'},
		{"connections", required_argument, NULL, 'c'},
		{"size", required_argument, NULL, 's'},
		{"duration", required_argument, NULL, 'd'},
		{"requests", required_argument, NULL, 'n'},
		{"mix", required_argument, NULL, 'm'},
		{"kinds", required_argument, NULL, 'k'},
		{"workers", required_argument, NULL, 'w'},
		{"timeout-ms", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->host = "127.0.0.1";
	o->connections = 8;
	o->size = 64;
	o->timeout_ms = 10000;
	parse_kinds("db,retry,cpu", o);
	bool have_port = false, have_duration = false;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:H:c:s:d:n:m:k:w:t:jh", longopts, NULL)) != -1) {
		const char *what = NULL;
		switch (c) {
		case 'p':
			if (!stb_parse_u64(optarg, 1, 65535, &v)) {
				what = "--port: not a port (1..65535)";
				break;
			}
			o->port = (uint16_t)v;
			have_port = true;
			break;
		case 'H':
			o->host = optarg;
			break;
		case 'c':
			if (!stb_parse_u64(optarg, 1, MAX_CONNECTIONS, &v))
				what = "--connections: not in 1..10000";
			else
				o->connections = (unsigned)v;
			break;
		case 's':
			if (!stb_parse_u64(optarg, ECHO_MIN_FRAME, ECHO_MAX_FRAME, &v))
				what = "--size: not in 5..1048576";
			else
				o->size = (uint32_t)v;
			break;
		case 'd':
			if (!stb_parse_u64(optarg, 1, 86400, &v)) {
				what = "--duration: not a whole number of seconds in 1..86400";
			} else {
				o->duration_s = (unsigned)v;
				have_duration = true;
			}
			break;
		case 'n':
			if (!stb_parse_u64(optarg, 1, UINT64_MAX / 2, &v))
				what = "--requests: not a positive number";
			else
				o->requests = v;
			break;
		case 'm':
			if (!stb_parse_u64(optarg, 0, 100, &v))
				what = "--mix: not a percentage in 0..100";
			else
				o->mix_pct = (unsigned)v;
			break;
		case 'k':
			if (!parse_kinds(optarg, o))
				what = "--kinds: want a comma-separated list of db, retry, cpu";
			break;
		case 'w':
			if (!stb_parse_u64(optarg, 1, 256, &v))
				what = "--workers: not in 1..256";
			else
				o->workers = (int)v;
			break;
		case 't':
			if (!stb_parse_u64(optarg, 1, 600000, &v))
				what = "--timeout-ms: not in 1..600000";
			else
				o->timeout_ms = (unsigned)v;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			client_usage(stdout);
			return -1;
		case ':':
			fprintf(stderr, "stb-echo-client: option %s needs a value (see --help)\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		default:
			fprintf(stderr, "stb-echo-client: unknown option %s (see --help)\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		}
		if (what) {
			fprintf(stderr, "stb-echo-client: %s: '%s'\n", what, optarg);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stb-echo-client: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	if (!have_port) {
		fprintf(stderr, "stb-echo-client: --port is required (the port stb-echo-server "
				"printed; see --help)\n");
		return EXIT_USAGE;
	}
	if (have_duration && o->requests) {
		fprintf(stderr, "stb-echo-client: --duration and --requests exclude each other\n");
		return EXIT_USAGE;
	}
	if (!have_duration)
		o->duration_s = 5;
	return 0;
}

static int resolve(const char *host, uint16_t port, struct sockaddr_in *out)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "stb-echo-client: cannot resolve --host %s: %s\n", host,
			gai_strerror(rc));
		return -1;
	}
	memcpy(out, res->ai_addr, sizeof(*out));
	out->sin_port = htons(port);
	freeaddrinfo(res);
	return 0;
}

static void print_summary(double secs)
{
	const struct client_opts *o = &g.o;
	double rps = secs > 0 ? (double)g.ok / secs : 0;
	double p50 = (double)hist_quantile(g.ok, 0.50) / 1e3;
	double p99 = (double)hist_quantile(g.ok, 0.99) / 1e3;
	double p999 = (double)hist_quantile(g.ok, 0.999) / 1e3;
	double mean = g.ok ? (double)g.sum_ns / (double)g.ok / 1e3 : 0;
	double max = (double)g.max_ns / 1e3;
	if (o->json) {
		printf("{\"connections\": %u, \"size\": %" PRIu32 ", \"mix_pct\": %u, \"ok\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"connection_errors\": %u, \"seconds\": %.3f, "
		       "\"rps\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
		       "\"mean_us\": %.1f, \"max_us\": %.1f, \"echo\": %" PRIu64 ", \"db\": %" PRIu64
		       ", \"retry\": %" PRIu64 ", \"cpu\": %" PRIu64 "}\n",
		       o->connections, o->size, o->mix_pct, g.ok, g.failed, g.conn_errors, secs, rps,
		       p50, p99, p999, mean, max, g.by_kind[KIND_ECHO], g.by_kind[KIND_DB],
		       g.by_kind[KIND_RETRY], g.by_kind[KIND_CPU]);
		return;
	}
	printf("requests: %" PRIu64 " ok (echo %" PRIu64 ", db %" PRIu64 ", retry %" PRIu64
	       ", cpu %" PRIu64 "), %" PRIu64 " failed, %u connection errors, in %.3f s\n",
	       g.ok, g.by_kind[KIND_ECHO], g.by_kind[KIND_DB], g.by_kind[KIND_RETRY],
	       g.by_kind[KIND_CPU], g.failed, g.conn_errors, secs);
	printf("throughput: %.1f requests/s\n", rps);
	printf("latency: p50 %.1f us, p99 %.1f us, p999 %.1f us, mean %.1f us, max %.1f us\n", p50,
	       p99, p999, mean, max);
}

int main(int argc, char **argv)
{
	int rc = client_parse_args(argc, argv, &g.o);
	if (rc < 0)
		return 0;
	if (rc > 0)
		return rc;
	const struct client_opts *o = &g.o;
	int status = 1;
	struct client_conn *conns = NULL;
	signal(SIGPIPE, SIG_IGN);
	if (resolve(o->host, o->port, &g.addr) != 0)
		goto cleanup;
	/* Fewer than BTHREAD_MIN_CONCURRENCY workers only through the expert override. */
	if (o->workers && o->workers < BTHREAD_MIN_CONCURRENCY) {
		char n[16];
		snprintf(n, sizeof(n), "%d", o->workers);
		setenv("STB_CONCURRENCY", n, 1);
	} else if (o->workers && (rc = bthread_setconcurrency(o->workers)) != 0) {
		fprintf(stderr, "stb-echo-client: cannot use %d workers: %s\n", o->workers,
			strerror(rc));
		goto cleanup;
	}
	conns = calloc(o->connections, sizeof(*conns));
	if (!conns || bthread_mutex_init(&g.start_lock, NULL) != 0 ||
	    bthread_cond_init(&g.start_cv, NULL) != 0) {
		fprintf(stderr, "stb-echo-client: out of memory\n");
		goto cleanup;
	}
	if (!o->json) {
		char what[64];
		if (o->requests)
			snprintf(what, sizeof(what), "%" PRIu64 " requests", o->requests);
		else
			snprintf(what, sizeof(what), "%u s", o->duration_s);
		printf("stb-echo-client: %u connections to %s:%u, %" PRIu32 "-byte requests, %s, "
		       "mix %u%%\n", o->connections, o->host, (unsigned)o->port, o->size, what,
		       o->mix_pct);
		fflush(stdout);
	}
	unsigned started = 0;
	for (unsigned i = 0; i < o->connections; i++) {
		char name[32];
		snprintf(name, sizeof(name), "client conn %u", i + 1);
		bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
		bthread_attr_set_name(&attr, name);
		conns[i].no = i + 1;
		rc = bthread_start_background(&conns[i].tid, &attr, client_conn_main, &conns[i]);
		if (rc != 0) {
			fprintf(stderr, "stb-echo-client: cannot start connection %u: %s\n", i + 1,
				strerror(rc));
			g.conn_errors++;
			break;
		}
		started++;
	}
	if (started < o->connections)
		client_arrive(o->connections - started, false);
	for (unsigned i = 0; i < started; i++)
		bthread_join(conns[i].tid, NULL);
	double secs = (double)(stb_now_ns() - g.t0_ns) / 1e9;
	print_summary(secs);
	if (o->requests && g.ok != o->requests && g.conn_errors == 0)
		fprintf(stderr, "stb-echo-client: only %" PRIu64 " of %" PRIu64 " requests done\n",
			g.ok, o->requests);
	bool all = !o->requests || g.ok == o->requests;
	if (g.conn_errors || g.failed || !all) {
		if (g.first_error[0])
			fprintf(stderr, "stb-echo-client: FAILED: %s\n", g.first_error);
		goto cleanup;
	}
	status = 0;
cleanup:
	free(conns);
	fflush(stdout);
	return status;
}
