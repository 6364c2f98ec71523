/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-echo-server: a TCP echo server on bthreads (one bthread per connection,
 * non-blocking sockets, waits in bthread_fd_wait). Request kinds park their
 * handlers in well-named functions for the stack tracer; --debug-port serves
 * the /bthreads pages; SIGTERM/SIGINT shut it down gracefully.
 */
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <stb/stb.h>

#include "echo_proto.h"

#ifndef ECHO_NOTRACE
#define ECHO_NOTRACE 0
#endif

#define EXIT_USAGE 64
#define ECHO_WRITE_TIMEOUT_MS 10000u  /* to send a reply */
#define ECHO_REST_TIMEOUT_MS 10000u   /* for the rest of a request that began */
#define ECHO_BUF_INITIAL 4096u

/* A frame of its own in every stack: never inlined, cloned or tail-called into. */
#define ECHO_FRAME STB_NOIPA
#define ECHO_NO_TAIL() __asm__ volatile("" ::: "memory")

enum echo_conn_state { ECHO_CONN_BUSY = 0, ECHO_CONN_IDLE = 1 };

/* How a connection ended. */
enum echo_outcome { ECHO_OUT_PEER = 0, ECHO_OUT_SHUTDOWN = 1, ECHO_OUT_DROPPED = 2 };

struct echo_conn {
	struct echo_conn *prev, *next; /* live list, or finished list (next only) */
	bthread_t tid;
	int fd;
	unsigned no;
	uint32_t state;                /* enum echo_conn_state, seq_cst */
	unsigned char *buf;            /* received bytes [0, len) */
	size_t cap, len;
	char name[32];
};

struct echo_opts {
	const char *bind;
	uint16_t port;
	int workers;
	int debug_port;                /* -1: off */
	unsigned self_dump_ms;         /* 0: off */
};

static struct {
	bthread_mutex_t lock;          /* live, finished, nconns_live */
	bthread_cond_t all_done;       /* live became empty while stopping */
	struct echo_conn live;         /* sentinel of the live list */
	struct echo_conn *finished;    /* ended, not joined yet */
	uint32_t stopping;             /* seq_cst */
	int lfd;
	int sigfd;
	bthread_t acceptor, db;
	int failed;
	/* the "database" */
	bthread_mutex_t db_lock;
	uint64_t db_rows;              /* under db_lock */
	/* statistics */
	uint64_t accepted, closed_peer, closed_shutdown, dropped;
	uint64_t req_echo, req_db, req_retry, req_cpu;
} g;

static volatile uint64_t echo_sink; /* keeps cpu_heavy_checksum's result alive */

static void echo_count(uint64_t *c)
{
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

static bool echo_stopping(void)
{
	return __atomic_load_n(&g.stopping, __ATOMIC_SEQ_CST) != 0;
}

/* ---- the special request kinds ---- */

/* Waits for the database lock, held most of the time by db_slow_transaction. */
static ECHO_FRAME void db_query_wait_for_lock(void)
{
	bthread_mutex_lock(&g.db_lock);
	ECHO_NO_TAIL();
}

static ECHO_FRAME uint64_t db_query(void)
{
	db_query_wait_for_lock();
	uint64_t rows = g.db_rows;
	bthread_mutex_unlock(&g.db_lock);
	return rows;
}

/* The slow "database" bthread: holds the lock while it sleeps. */
static ECHO_FRAME int db_slow_transaction(void)
{
	bthread_mutex_lock(&g.db_lock);
	int rc = bthread_usleep(ECHO_DB_HOLD_US);
	g.db_rows++;
	bthread_mutex_unlock(&g.db_lock);
	return rc;
}

static void *db_main(void *arg)
{
	(void)arg;
	/* bthread_stop ends a sleep with ESTOP at shutdown; a stop that came
	 * while it waited for the lock is seen by bthread_stopped. */
	while (!bthread_stopped(bthread_self()) && db_slow_transaction() == 0 &&
	       bthread_usleep(ECHO_DB_GAP_US) == 0)
		;
	return NULL;
}

/* The backend of a retry request fails its first ECHO_RETRY_FAILURES attempts. */
static ECHO_FRAME int backend_call(unsigned attempt)
{
	return attempt < ECHO_RETRY_FAILURES ? -EAGAIN : 0;
}

static ECHO_FRAME void retry_backoff_sleep(unsigned attempt)
{
	bthread_usleep((uint64_t)ECHO_RETRY_BACKOFF_US << attempt);
	ECHO_NO_TAIL();
}

static ECHO_FRAME void retry_request(void)
{
	for (unsigned attempt = 0; backend_call(attempt) != 0; attempt++)
		retry_backoff_sleep(attempt);
	ECHO_NO_TAIL();
}

/* Spins for spin_ns hashing the frame over and over (a CPU-bound handler). */
static ECHO_FRAME uint64_t cpu_heavy_checksum(const unsigned char *p, size_t len, uint64_t spin_ns)
{
	uint64_t h = 14695981039346656037ull; /* FNV-1a 64 */
	uint64_t end = stb_now_ns() + spin_ns;
	for (unsigned rounds = 1;; rounds++) {
		for (size_t i = 0; i < len; i++)
			h = (h ^ p[i]) * 1099511628211ull;
		if ((rounds & 15) == 0 && stb_now_ns() >= end)
			break;
	}
	return h;
}

/* Runs the code path the request's kind selects; the reply is the frame itself. */
static ECHO_FRAME void echo_handle_request(const unsigned char *frame, size_t len)
{
	switch (frame[ECHO_HDR]) {
	case ECHO_KIND_DB:
		echo_count(&g.req_db);
		echo_sink += db_query();
		break;
	case ECHO_KIND_RETRY:
		echo_count(&g.req_retry);
		retry_request();
		break;
	case ECHO_KIND_CPU:
		echo_count(&g.req_cpu);
		echo_sink += cpu_heavy_checksum(frame, len, (uint64_t)ECHO_CPU_SPIN_US * 1000u);
		break;
	default:
		echo_count(&g.req_echo);
		break;
	}
	ECHO_NO_TAIL();
}

/* ---- connections ---- */

/* An idle connection waits here for its next request. */
static ECHO_FRAME int echo_conn_wait_request(struct echo_conn *c)
{
	int rc = bthread_fd_wait(c->fd, EPOLLIN);
	ECHO_NO_TAIL();
	return rc;
}

/* The rest of a request that arrived in pieces. */
static ECHO_FRAME int echo_conn_wait_rest(struct echo_conn *c, const struct timespec *until)
{
	int rc = bthread_fd_timedwait(c->fd, EPOLLIN, until);
	ECHO_NO_TAIL();
	return rc;
}

static ECHO_FRAME int echo_conn_wait_writable(struct echo_conn *c, const struct timespec *until)
{
	int rc = bthread_fd_timedwait(c->fd, EPOLLOUT, until);
	ECHO_NO_TAIL();
	return rc;
}

/*
 * Reads until c->buf holds a whole frame. Returns its length; 0 when the
 * peer closed between requests; -1 on an error or a malformed or truncated
 * frame; -2 when the server is stopping (no request in flight).
 */
static ECHO_FRAME long echo_conn_read_request(struct echo_conn *c)
{
	struct timespec until = {0, 0};
	bool have_deadline = false;
	for (;;) {
		size_t need = ECHO_HDR;
		if (c->len >= ECHO_HDR) {
			uint32_t flen = echo_get_be32(c->buf);
			if (flen < ECHO_MIN_FRAME || flen > ECHO_MAX_FRAME) {
				fprintf(stderr, "stb-echo-server: %s: bad frame length %" PRIu32
						" (want %u..%u); closing it\n", c->name, flen,
					ECHO_MIN_FRAME, ECHO_MAX_FRAME);
				return -1;
			}
			if (c->len >= flen)
				return (long)flen;
			need = flen;
		}
		if (c->cap < need) {
			size_t cap = c->cap * 2 > need ? c->cap * 2 : need;
			unsigned char *nb = realloc(c->buf, cap);
			if (!nb)
				return -1;
			c->buf = nb;
			c->cap = cap;
		}
		ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
		if (n > 0) {
			c->len += (size_t)n;
			continue;
		}
		if (n == 0)
			return c->len == 0 ? 0 : -1;
		if (echo_errno() == EINTR)
			continue;
		if (echo_errno() != EAGAIN && echo_errno() != EWOULDBLOCK)
			return -1;
		if (c->len > 0) {
			/* In flight: finish it even when stopping, unless the client stalls. */
			if (!have_deadline) {
				until = stb_realtime_after_ms(ECHO_REST_TIMEOUT_MS);
				have_deadline = true;
			}
			if (echo_conn_wait_rest(c, &until) != 0 && echo_errno() == ETIMEDOUT) {
				fprintf(stderr, "stb-echo-server: %s: the rest of a request did not come "
						"within %u ms; closing it\n", c->name, ECHO_REST_TIMEOUT_MS);
				return -1;
			}
			continue;
		}
		/* Idle. The shutdown interrupts idle connections only (see echo_shutdown). */
		__atomic_store_n(&c->state, ECHO_CONN_IDLE, __ATOMIC_SEQ_CST);
		if (echo_stopping())
			return -2;
		echo_conn_wait_request(c);
		__atomic_store_n(&c->state, ECHO_CONN_BUSY, __ATOMIC_SEQ_CST);
		if (echo_stopping())
			return -2;
	}
}

static ECHO_FRAME int echo_conn_write_reply(struct echo_conn *c, size_t len)
{
	const unsigned char *p = c->buf;
	struct timespec until = {0, 0};
	bool have_deadline = false;
	while (len > 0) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && echo_errno() == EINTR)
			continue;
		if (n < 0 && (echo_errno() == EAGAIN || echo_errno() == EWOULDBLOCK)) {
			if (!have_deadline) {
				until = stb_realtime_after_ms(ECHO_WRITE_TIMEOUT_MS);
				have_deadline = true;
			}
			if (echo_conn_wait_writable(c, &until) != 0 && echo_errno() == ETIMEDOUT)
				return -1;
			continue;
		}
		return -1;
	}
	return 0;
}

/* Moves c from the live list to the finished list (the acceptor joins it). */
static void echo_conn_retire(struct echo_conn *c)
{
	bthread_mutex_lock(&g.lock);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->prev = NULL;
	c->next = g.finished;
	g.finished = c;
	if (g.live.next == &g.live)
		bthread_cond_broadcast(&g.all_done);
	bthread_mutex_unlock(&g.lock);
}

/* The connection handler: one bthread per connection. */
static ECHO_FRAME void *echo_conn_main(void *arg)
{
	struct echo_conn *c = arg;
	enum echo_outcome out;
	for (;;) {
		long flen = echo_conn_read_request(c);
		if (flen <= 0) {
			out = flen == 0 ? ECHO_OUT_PEER : flen == -2 ? ECHO_OUT_SHUTDOWN
								: ECHO_OUT_DROPPED;
			break;
		}
		echo_handle_request(c->buf, (size_t)flen);
		if (echo_conn_write_reply(c, (size_t)flen) != 0) {
			out = ECHO_OUT_DROPPED;
			break;
		}
		c->len -= (size_t)flen;
		if (c->len)
			memmove(c->buf, c->buf + flen, c->len);
		if (echo_stopping()) {
			out = ECHO_OUT_SHUTDOWN;
			break;
		}
	}
	close(c->fd);
	c->fd = -1;
	echo_count(out == ECHO_OUT_PEER ? &g.closed_peer
		   : out == ECHO_OUT_SHUTDOWN ? &g.closed_shutdown : &g.dropped);
	echo_conn_retire(c);
	return NULL;
}

/* Joins and frees the connections that have ended. */
static void echo_reap_finished(void)
{
	bthread_mutex_lock(&g.lock);
	struct echo_conn *f = g.finished;
	g.finished = NULL;
	bthread_mutex_unlock(&g.lock);
	while (f) {
		struct echo_conn *next = f->next;
		bthread_join(f->tid, NULL);
		free(f->buf);
		free(f);
		f = next;
	}
}

static ECHO_FRAME int echo_acceptor_wait(int lfd)
{
	int rc = bthread_fd_wait(lfd, EPOLLIN);
	ECHO_NO_TAIL();
	return rc;
}

static void echo_start_conn(int fd, unsigned no)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct echo_conn *c = calloc(1, sizeof(*c));
	unsigned char *buf = malloc(ECHO_BUF_INITIAL);
	if (!c || !buf) {
		fprintf(stderr, "stb-echo-server: out of memory; dropping a new connection\n");
		goto cleanup;
	}
	c->fd = fd;
	c->no = no;
	c->buf = buf;
	c->cap = ECHO_BUF_INITIAL;
	snprintf(c->name, sizeof(c->name), "conn %u", no);
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, c->name);
	bthread_mutex_lock(&g.lock);
	c->next = &g.live;
	c->prev = g.live.prev;
	g.live.prev->next = c;
	g.live.prev = c;
	int rc = bthread_start_background(&c->tid, &attr, echo_conn_main, c);
	if (rc != 0) {
		c->prev->next = c->next;
		c->next->prev = c->prev;
	}
	bthread_mutex_unlock(&g.lock);
	if (rc == 0)
		return;
	fprintf(stderr, "stb-echo-server: cannot start a bthread for %s: %s\n", c->name,
		strerror(rc));
cleanup: /* only reached on failure */
	echo_count(&g.dropped);
	close(fd);
	free(buf);
	free(c);
}

static void *echo_acceptor_main(void *arg)
{
	(void)arg;
	unsigned no = 0;
	while (!echo_stopping()) {
		echo_reap_finished();
		int fd = accept4(g.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			echo_count(&g.accepted);
			echo_start_conn(fd, ++no);
			continue;
		}
		int err = echo_errno();
		if (err == EAGAIN || err == EWOULDBLOCK) {
			echo_acceptor_wait(g.lfd);
		} else if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
			fprintf(stderr, "stb-echo-server: accept: %s; retrying in 100 ms\n",
				strerror(err));
			bthread_usleep(100000);
		} else if (err != EINTR && err != ECONNABORTED && err != EPROTO) {
			fprintf(stderr, "stb-echo-server: accept failed: %s; shutting down\n",
				strerror(err));
			g.failed = 1;
			kill(getpid(), SIGTERM);
			break;
		}
	}
	close(g.lfd);
	g.lfd = -1;
	return NULL;
}

/* ---- in-process dumps (--self-dump-ms) ---- */

#if !ECHO_NOTRACE
static struct {
	pthread_t th;
	bool started;
	uint32_t stop;
	unsigned interval_ms;
	uint64_t dumps, failures, total_ns, max_ns;
} g_dump;

/* A plain pthread that dumps every bthread to /dev/null every interval. */
static void *echo_self_dump_main(void *arg)
{
	(void)arg;
	FILE *null = fopen("/dev/null", "we");
	if (!null)
		return NULL;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	struct stb_dump_opts o = {.group = 1};
	while (!__atomic_load_n(&g_dump.stop, __ATOMIC_ACQUIRE)) {
		uint64_t ns = (uint64_t)next.tv_nsec + (uint64_t)g_dump.interval_ms * 1000000u;
		next.tv_sec += (time_t)(ns / 1000000000u);
		next.tv_nsec = (long)(ns % 1000000000u);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		uint64_t t0 = stb_now_ns();
		int rc = stb_dump(null, &o);
		uint64_t dt = stb_now_ns() - t0;
		if (rc < 0)
			g_dump.failures++;
		g_dump.dumps++;
		g_dump.total_ns += dt;
		if (dt > g_dump.max_ns)
			g_dump.max_ns = dt;
	}
	fclose(null);
	return NULL;
}
#endif

/* ---- shutdown ---- */

/*
 * Stops accepting, lets every connection finish the request it is serving
 * (idle ones are interrupted with bthread_stop), joins them all, then stops
 * the database bthread.
 */
static void echo_shutdown(void)
{
	__atomic_store_n(&g.stopping, 1, __ATOMIC_SEQ_CST);
	bthread_stop(g.acceptor);
	bthread_join(g.acceptor, NULL);
	bthread_mutex_lock(&g.lock);
	/*
	 * A connection stores IDLE and then reads stopping before it waits, and
	 * stores BUSY and reads stopping after; we stored stopping before reading
	 * its state. So a connection seen BUSY sees stopping after its request,
	 * and one seen IDLE is woken here: none is left waiting.
	 */
	for (struct echo_conn *c = g.live.next; c != &g.live; c = c->next)
		if (__atomic_load_n(&c->state, __ATOMIC_SEQ_CST) == ECHO_CONN_IDLE)
			bthread_stop(c->tid);
	while (g.live.next != &g.live)
		bthread_cond_wait(&g.all_done, &g.lock);
	bthread_mutex_unlock(&g.lock);
	echo_reap_finished();
	bthread_stop(g.db);
	bthread_join(g.db, NULL);
}

/* Waits for SIGTERM/SIGINT on the signalfd, then shuts the server down. */
static void *echo_signal_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct signalfd_siginfo si;
		ssize_t n = read(g.sigfd, &si, sizeof(si));
		if (n == (ssize_t)sizeof(si)) {
			fprintf(stderr, "stb-echo-server: %s: shutting down\n",
				si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
			break;
		}
		if (n < 0 && echo_errno() != EAGAIN && echo_errno() != EINTR) {
			fprintf(stderr, "stb-echo-server: reading the signalfd failed: %s\n",
				strerror(echo_errno()));
			g.failed = 1;
			break;
		}
		bthread_fd_wait(g.sigfd, EPOLLIN);
	}
	echo_shutdown();
	return NULL;
}

/* ---- command line ---- */

static void echo_usage(FILE *out)
{
	fprintf(out,
		"Usage: stb-echo-server [options]\n"
		"A TCP echo server on bthreads: one bthread per connection. Frames are a 4-byte\n"
		"big-endian length, a kind byte and payload; the reply is the frame itself. Kinds:\n"
		"  E echo; D waits for the db lock (db_query_wait_for_lock) that the \"db\" bthread\n"
		"  holds %u ms at a time (db_slow_transaction); R fails %u times, sleeping in\n"
		"  retry_backoff_sleep (%u ms, doubling); C computes %u ms in cpu_heavy_checksum.\n"
		"\n"
		"Options:\n"
		"  -p, --port N          TCP port, 0 = any free port (default 0); prints\n"
		"                        \"listening on port N\" once it accepts\n"
		"  -b, --bind ADDR       IPv4 address to listen on (default 127.0.0.1)\n"
		"  -w, --workers N       bthread worker pthreads, 1..256 (default: 9)\n"
		"  -d, --debug-port N    serve /bthreads, /bthreads/<id>?st=1, /bthreads/all on\n"
		"                        127.0.0.1:N (0 = any free port; the port is printed)\n"
		"  -D, --self-dump-ms N  dump every bthread's stack to /dev/null every N ms from a\n"
		"                        pthread (in-process tracer cost measurement), 1..60000\n"
		"  -h, --help            this text\n"
		"\n"
		"Examples:\n"
		"  stb-echo-server --port 7000 --workers 2\n"
		"  stb-echo-server --port 0 --debug-port 0    # then: curl 127.0.0.1:<port>/bthreads/all\n"
		"  sudo stb-bpf-loader --pid $(pidof stb-echo-server) --group\n"
		"\n"
		"SIGTERM or SIGINT: stop accepting, finish the requests in flight, close every\n"
		"connection, print a summary and exit 0. Exit status: 0 ok, 1 failure, 64 usage.\n",
		ECHO_DB_HOLD_US / 1000u, ECHO_RETRY_FAILURES, ECHO_RETRY_BACKOFF_US / 1000u,
		ECHO_CPU_SPIN_US / 1000u);
}

/* Returns 0, -1 (--help shown) or EXIT_USAGE. */
static int echo_parse_args(int argc, char **argv, struct echo_opts *o)
{
	static const struct option longopts[] = {
		{"port", required_argument, NULL, 'p'},
		{"bind", required_argument, NULL, 'b'},
		{"workers", required_argument, NULL, 'w'},
		{"debug-port", required_argument, NULL, 'd'},
		{"self-dump-ms", required_argument, NULL, 'D'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->bind = "127.0.0.1";
	o->debug_port = -1;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:b:w:d:D:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (!stb_parse_u64(optarg, 0, 65535, &v)) {
				fprintf(stderr, "stb-echo-server: --port: '%s' is not a port (0..65535)\n",
					optarg);
				return EXIT_USAGE;
			}
			o->port = (uint16_t)v;
			break;
		case 'b': {
			struct in_addr a;
			if (inet_pton(AF_INET, optarg, &a) != 1) {
				fprintf(stderr, "stb-echo-server: --bind: '%s' is not an IPv4 address "
						"(e.g. 127.0.0.1 or 0.0.0.0)\n", optarg);
				return EXIT_USAGE;
			}
			o->bind = optarg;
			break;
		}
		case 'w':
			if (!stb_parse_u64(optarg, 1, 256, &v)) {
				fprintf(stderr, "stb-echo-server: --workers: '%s' is not in 1..256\n", optarg);
				return EXIT_USAGE;
			}
			o->workers = (int)v;
			break;
		case 'd':
		case 'D':
			if (ECHO_NOTRACE) {
				fprintf(stderr, "stb-echo-server: %s needs the tracer, and this binary "
						"is built without it (use stb-echo-server)\n",
					c == 'd' ? "--debug-port" : "--self-dump-ms");
				return EXIT_USAGE;
			}
			if (c == 'd' && !stb_parse_u64(optarg, 0, 65535, &v)) {
				fprintf(stderr, "stb-echo-server: --debug-port: '%s' is not a port "
						"(0..65535)\n", optarg);
				return EXIT_USAGE;
			}
			if (c == 'D' && !stb_parse_u64(optarg, 1, 60000, &v)) {
				fprintf(stderr, "stb-echo-server: --self-dump-ms: '%s' is not in "
						"1..60000\n", optarg);
				return EXIT_USAGE;
			}
			if (c == 'd')
				o->debug_port = (int)v;
			else
				o->self_dump_ms = (unsigned)v;
			break;
		case 'h':
			echo_usage(stdout);
			return -1;
		case ':':
			fprintf(stderr, "stb-echo-server: option %s needs a value (see --help)\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		default:
			fprintf(stderr, "stb-echo-server: unknown option %s (see --help)\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stb-echo-server: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	return 0;
}

static int echo_listen(const struct echo_opts *o, uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(o->port);
	inet_pton(AF_INET, o->bind, &sa.sin_addr);
	socklen_t len = sizeof(sa);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		int err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

static int echo_start_named(bthread_t *tid, const char *name, void *(*fn)(void *))
{
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, name);
	int rc = bthread_start_background(tid, &attr, fn, NULL);
	if (rc != 0)
		fprintf(stderr, "stb-echo-server: cannot start the %s bthread: %s\n", name,
			strerror(rc));
	return rc;
}

int main(int argc, char **argv)
{
	struct echo_opts o;
	int rc = echo_parse_args(argc, argv, &o);
	if (rc < 0)
		return 0;
	if (rc > 0)
		return rc;

	int status = 1;
	bthread_t sig_tid = 0;
	bool debug_http = false;
	g.lfd = -1;
	g.sigfd = -1;
	g.live.next = g.live.prev = &g.live;

	/* Before any thread exists, so every thread inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
	    (g.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		fprintf(stderr, "stb-echo-server: cannot set up signal handling: %s\n",
			strerror(errno));
		goto cleanup;
	}
	signal(SIGPIPE, SIG_IGN);
	/* Fewer than BTHREAD_MIN_CONCURRENCY workers only through the expert override. */
	if (o.workers && o.workers < BTHREAD_MIN_CONCURRENCY) {
		char n[16];
		snprintf(n, sizeof(n), "%d", o.workers);
		setenv("STB_CONCURRENCY", n, 1);
	} else if (o.workers && (rc = bthread_setconcurrency(o.workers)) != 0) {
		fprintf(stderr, "stb-echo-server: cannot use %d workers: %s\n", o.workers,
			strerror(rc));
		goto cleanup;
	}
	uint16_t port;
	g.lfd = echo_listen(&o, &port);
	if (g.lfd < 0) {
		fprintf(stderr, "stb-echo-server: cannot listen on %s:%u: %s%s\n", o.bind,
			(unsigned)o.port, strerror(errno),
			errno == EADDRINUSE ? " (choose another --port, or 0 for any)" : "");
		goto cleanup;
	}
	if (bthread_mutex_init(&g.lock, NULL) != 0 || bthread_cond_init(&g.all_done, NULL) != 0 ||
	    bthread_mutex_init(&g.db_lock, NULL) != 0) {
		fprintf(stderr, "stb-echo-server: out of memory\n");
		goto cleanup;
	}
	if (echo_start_named(&g.db, "db", db_main) != 0 ||
	    echo_start_named(&sig_tid, "signals", echo_signal_main) != 0)
		goto cleanup;
	if (echo_start_named(&g.acceptor, "acceptor", echo_acceptor_main) != 0)
		goto cleanup; /* lfd is still ours */
#if !ECHO_NOTRACE
	if (o.debug_port >= 0) {
		uint16_t dport;
		rc = stb_debug_http_start((uint16_t)o.debug_port, &dport);
		if (rc != 0) {
			fprintf(stderr, "stb-echo-server: cannot start the debug endpoint on "
					"127.0.0.1:%d: %s\n", o.debug_port, strerror(-rc));
			goto cleanup;
		}
		debug_http = true;
		printf("debug endpoint on http://127.0.0.1:%u/bthreads\n", (unsigned)dport);
	}
	if (o.self_dump_ms) {
		g_dump.interval_ms = o.self_dump_ms;
		rc = pthread_create(&g_dump.th, NULL, echo_self_dump_main, NULL);
		if (rc != 0) {
			fprintf(stderr, "stb-echo-server: cannot start the dump thread: %s\n",
				strerror(rc));
			goto cleanup;
		}
		g_dump.started = true;
	}
#endif
	printf("listening on port %u\n", (unsigned)port);
	fflush(stdout);

	bthread_join(sig_tid, NULL); /* returns after the graceful shutdown */
	sig_tid = 0;
	printf("shutdown: %" PRIu64 " connections: %" PRIu64 " closed by clients, %" PRIu64
	       " closed at shutdown, %" PRIu64 " dropped; requests: %" PRIu64 " echo, %" PRIu64
	       " db, %" PRIu64 " retry, %" PRIu64 " cpu\n",
	       g.accepted, g.closed_peer, g.closed_shutdown, g.dropped, g.req_echo, g.req_db,
	       g.req_retry, g.req_cpu);
	status = g.failed ? 1 : 0;
cleanup:
	if (sig_tid) {
		/* Start-up failed after the signal bthread started: shut down through it. */
		kill(getpid(), SIGTERM);
		bthread_join(sig_tid, NULL);
	}
#if !ECHO_NOTRACE
	if (g_dump.started) {
		__atomic_store_n(&g_dump.stop, 1, __ATOMIC_RELEASE);
		pthread_join(g_dump.th, NULL);
		printf("self-dump: %" PRIu64 " dumps every %u ms, %.2f ms each on average (max %.2f),"
		       " %" PRIu64 " failed\n", g_dump.dumps, g_dump.interval_ms,
		       g_dump.dumps ? (double)g_dump.total_ns / (double)g_dump.dumps / 1e6 : 0.0,
		       (double)g_dump.max_ns / 1e6, g_dump.failures);
		if (g_dump.failures)
			status = 1;
	}
	if (debug_http)
		stb_debug_http_stop();
#else
	(void)debug_http;
#endif
	if (g.lfd >= 0)
		close(g.lfd);
	if (g.sigfd >= 0)
		close(g.sigfd);
	fflush(stdout);
	return status;
}
