/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn_storm: socket-level tests of the engine through its public API, in
 * one process.  Three modes:
 *
 *   conn_storm [--tcp] [--conns N] [--bytes B] [--greet]   (the storm, default)
 *       One server thread runs an event loop over the listener and every
 *       connection with sdp_poll(); N client threads connect at once and
 *       each sends B bytes of its own seeded stream in random write sizes,
 *       shuts down writing and waits for the server's verdict (count and
 *       XXH64).  Every connection must complete with matching data.  With
 *       --greet the server speaks first: it sends a greeting the moment it
 *       accepts, and each client reads it before anything else (on iWARP
 *       the passive side must hold that message until the active side's
 *       first one has arrived: sdp/engine.h, await_first_rx).
 *
 *   conn_storm --api
 *       The same sequence of calls against the kernel's TCP and against SDP
 *       (errno semantics: refused connect, non-blocking connect, ENOTCONN,
 *       EINVAL, EADDRINUSE, EAGAIN, MSG_PEEK, MSG_WAITALL, SO_RCVTIMEO, names,
 *       EBADF, resets, ...), printed side by side.  Linux is the
 *       expectation: any difference fails.
 *
 *   conn_storm --half-close
 *       Half-close semantics, for TCP and SDP alike with fixed expectations:
 *       data flows after SHUT_WR in the other direction, EOF is seen, a send
 *       after SHUT_WR gives EPIPE, with SIGPIPE raised in the calling thread
 *       unless MSG_NOSIGNAL.
 *
 * Exit status 0 pass, 1 fail.  A watchdog turns a hang into a failure.
 */

#include "sdp.h"
#include "say.h"
#include "xfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>

const char *say_prefix = "conn_storm";

static const char *errname(int e)
{
	static __thread char buf[16];

	switch (e) {
#define E(x) case x: return #x
	E(EPERM); E(ENOENT); E(EINTR); E(EIO); E(EBADF); E(EAGAIN); E(ENOMEM);
	E(EFAULT); E(EBUSY); E(EINVAL); E(ENFILE); E(EMFILE); E(EPIPE);
	E(ENOTSOCK); E(EDESTADDRREQ); E(EMSGSIZE); E(EPROTOTYPE); E(ENOPROTOOPT);
	E(EPROTONOSUPPORT); E(EOPNOTSUPP); E(EAFNOSUPPORT); E(EADDRINUSE);
	E(EADDRNOTAVAIL); E(ENETDOWN); E(ENETUNREACH); E(ECONNABORTED);
	E(ECONNRESET); E(ENOBUFS); E(EISCONN); E(ENOTCONN); E(ETIMEDOUT);
	E(ECONNREFUSED); E(EHOSTUNREACH); E(EALREADY); E(EINPROGRESS); E(EPROTO);
#undef E
	default:
		snprintf(buf, sizeof(buf), "E#%d", e);
		return buf;
	}
}

/* "0", "-ECONNREFUSED", "42". */
static const char *rv(long r)
{
	static __thread char bufs[8][32];
	static __thread int k;
	char *b = bufs[k++ % 8];

	if (r < 0)
		snprintf(b, 32, "-%s", errname((int)-r));
	else
		snprintf(b, 32, "%ld", r);
	return b;
}

/* An fd-returning call: the number itself differs between APIs. */
static const char *rfd(long r)
{
	return r >= 0 ? "fd" : rv(r);
}

static const char *evname(int ev)
{
	static __thread char bufs[4][96];
	static __thread int k;
	char *b = bufs[k++ % 4];

	if (ev < 0) {
		snprintf(b, 96, "%s", rv(ev));
		return b;
	}
	b[0] = '\0';
	if (ev & POLLIN)
		strcat(b, "|IN");
	if (ev & POLLOUT)
		strcat(b, "|OUT");
	if (ev & POLLRDHUP)
		strcat(b, "|RDHUP");
	if (ev & POLLHUP)
		strcat(b, "|HUP");
	if (ev & POLLERR)
		strcat(b, "|ERR");
	if (!b[0])
		strcpy(b, "|none");
	memmove(b, b + 1, strlen(b));
	return b;
}

/* --- watchdog ----------------------------------------------------------- */

static const char *volatile watch_what = "start-up";

static void on_alarm(int sig)
{
	char m[256];
	int n;

	(void)sig;
	n = snprintf(m, sizeof(m), "%s: FAIL: timed out in: %s\n", say_prefix, watch_what);
	(void)!write(STDOUT_FILENO, m, (size_t)n);
	_exit(1);
}

/* TEST_SLOW (test/integration/lib.sh): a factor for the watchdogs, which
 * are there to catch hangs, not to time anything. */
static unsigned slow = 1;

static void watch(const char *what, unsigned secs)
{
	watch_what = what;
	alarm(secs * slow);
}

/* --- shared helpers --------------------------------------------------------- */

/* The address every connection uses: TEST_HOST, 127.0.0.1 by default (an
 * RDMA transport serves no loopback; lib.sh gives an interface address). */
static struct in_addr host_addr = { .s_addr = 0 };
static char host_str[INET_ADDRSTRLEN] = "127.0.0.1";

/* The transport every SDP connection must run on (TEST_TRANSPORT), or NULL:
 * no check.  Connections on another one are counted as failures. */
static const char *want_transport;
static atomic_int transport_checked, transport_wrong;

static int test_env_init(void)
{
	const char *h = getenv("TEST_HOST"), *t = getenv("TEST_TRANSPORT");
	const char *f = getenv("TEST_SLOW");

	if (h && *h)
		snprintf(host_str, sizeof(host_str), "%s", h);
	if (inet_pton(AF_INET, host_str, &host_addr) != 1) {
		say("FAIL: TEST_HOST '%s' is not an IPv4 address", host_str);
		return -1;
	}
	if (t && *t)
		want_transport = t;
	if (f && atoi(f) > 0)
		slow = (unsigned)atoi(f);
	return 0;
}

static struct sockaddr_in host_sin(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = host_addr,
				   .sin_port = htons((uint16_t)port) };
	return sin;
}

/* A connected SDP socket must run on the transport under test. */
static void check_transport(const struct xsock_ops *o, int sd)
{
	const char *t;

	if (o != &xsock_sdp || !want_transport || sd < 0)
		return;
	t = sdp_transport_name(sd);
	if (!t)
		return;	/* not connected (any more): nothing to check */
	atomic_fetch_add(&transport_checked, 1);
	if (strcmp(t, want_transport) && atomic_fetch_add(&transport_wrong, 1) == 0)
		say("FAIL: an SDP connection runs on transport %s, not on %s (TEST_TRANSPORT)", t,
		    want_transport);
}

/* A listener on TEST_HOST:0; its port in *port. */
static int mk_listener(const struct xsock_ops *o, int flags, int *port)
{
	struct sockaddr_in sin = host_sin(0);
	int ls = xfer_listen(o, (struct sockaddr *)&sin, sizeof(sin), flags, 128, false, NULL);

	if (ls >= 0)
		*port = ntohs(sin.sin_port);
	return ls;
}

/* A connected pair through a temporary listener; 0 or -errno. */
static int mk_pair(const struct xsock_ops *o, int *cli, int *srv)
{
	int port, ls = mk_listener(o, 0, &port);

	if (ls < 0)
		return ls;
	struct sockaddr_in sin = host_sin(port);

	*cli = xfer_dial(o, (struct sockaddr *)&sin, sizeof(sin), -1, NULL);
	if (*cli < 0) {
		o->close(ls);
		return *cli;
	}
	*srv = o->accept(ls, NULL, NULL, 0);
	o->close(ls);
	if (*srv < 0) {
		o->close(*cli);
		return *srv;
	}
	check_transport(o, *cli);
	check_transport(o, *srv);
	return 0;
}

/* A port nobody listens on: a listener's, after closing it. */
static int closed_port(const struct xsock_ops *o)
{
	int port, ls = mk_listener(o, 0, &port);

	if (ls < 0)
		return -1;
	o->close(ls);
	return port;
}

/* ======================================================================= */
/* storm                                                                    */
/* ======================================================================= */

enum { SC_HDR, SC_DATA, SC_VERDICT, SC_DONE };

struct sconn {
	int sd;
	int state;
	uint8_t hdr[XFER_HDR_LEN];
	size_t hdr_got;
	struct xfer_hdr h;
	struct xgen gen;
	struct xhash hash;
	uint64_t got;
	uint64_t bad_off;
	uint8_t verdict[XFER_VERDICT_LEN];
	size_t vsent;
};

struct client {
	int id;
	pthread_t thread;
	uint32_t seed;
	volatile int stage;	/* for the watchdog's report */
	int ok;
	char err[160];
};

static const char *const client_stage[] = {
	"not started", "connecting", "sending", "reading verdict", "done",
};

static const char greeting[16] = "conn_storm hi!\n";

static struct {
	const struct xsock_ops *o;
	int conns;
	uint64_t bytes;
	bool greet;
	int port;
	int ls;
	pthread_barrier_t start;
	struct client *clients;
	/* server */
	int accepted, finished, server_failures;
	char server_err[256];
} st;

static void server_fail(struct sconn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void server_fail(struct sconn *c, const char *fmt, ...)
{
	va_list ap;

	st.server_failures++;
	va_start(ap, fmt);
	vsnprintf(st.server_err, sizeof(st.server_err), fmt, ap);
	va_end(ap);
	say("server: connection %d: %s", c->sd, st.server_err);
	c->state = SC_DONE;
}

/* Read what is there; false when the connection is finished. */
static void server_read(struct sconn *c, uint8_t *buf, size_t cap)
{
	for (int burst = 0; burst < 4 && (c->state == SC_HDR || c->state == SC_DATA); burst++) {
		size_t want = c->state == SC_HDR ? XFER_HDR_LEN - c->hdr_got : cap;
		ssize_t n = st.o->recv(c->sd, c->state == SC_HDR ? c->hdr + c->hdr_got : buf,
				       want, 0);

		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n < 0) {
			server_fail(c, "recv: %s after %" PRIu64 " bytes", rv(n), c->got);
			return;
		}
		if (n == 0) {
			if (c->state == SC_HDR) {
				server_fail(c, "EOF inside the header");
				return;
			}
			if (c->got != c->h.bytes)
				server_fail(c, "EOF after %" PRIu64 " of %" PRIu64 " bytes",
					    c->got, c->h.bytes);
			else if (c->bad_off != XFER_UNLIMITED)
				server_fail(c, "data differs at byte %" PRIu64, c->bad_off);
			if (c->state == SC_DONE)
				return;
			xfer_verdict_encode(c->verdict, c->got, xhash_digest(&c->hash));
			c->state = SC_VERDICT;
			return;
		}
		if (c->state == SC_HDR) {
			c->hdr_got += (size_t)n;
			if (c->hdr_got == XFER_HDR_LEN) {
				xfer_hdr_decode(c->hdr, &c->h);
				if (c->h.magic != XFER_MAGIC_ONEWAY) {
					server_fail(c, "bad magic");
					return;
				}
				xgen_init(&c->gen, c->h.seed);
				c->state = SC_DATA;
			}
			continue;
		}
		size_t bad = xgen_check(&c->gen, buf, (size_t)n);

		if (bad < (size_t)n && c->bad_off == XFER_UNLIMITED)
			c->bad_off = c->got + bad;
		xhash_update(&c->hash, buf, (size_t)n);
		c->got += (uint64_t)n;
	}
}

static void server_write(struct sconn *c)
{
	while (c->vsent < XFER_VERDICT_LEN) {
		ssize_t n = st.o->send(c->sd, c->verdict + c->vsent, XFER_VERDICT_LEN - c->vsent,
				       MSG_NOSIGNAL);

		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n < 0) {
			server_fail(c, "sending verdict: %s", rv(n));
			return;
		}
		c->vsent += (size_t)n;
	}
	int r = st.o->shutdown(c->sd, SHUT_WR);

	if (r)
		server_fail(c, "shutdown: %s", rv(r));
	c->state = SC_DONE;
}

static void *server_main(void *arg)
{
	int n = st.conns;
	struct sconn *cs = calloc((size_t)n, sizeof(*cs));
	struct pollfd *pf = calloc((size_t)n + 1, sizeof(*pf));
	int *idx = calloc((size_t)n + 1, sizeof(*idx));
	uint8_t *buf = malloc(65536);

	(void)arg;
	if (!cs || !pf || !idx || !buf) {
		say("server: out of memory");
		st.server_failures++;
		goto out;
	}
	while (st.finished < n) {
		int np = 0;

		if (st.accepted < n) {
			pf[np] = (struct pollfd){ .fd = st.ls, .events = POLLIN };
			idx[np++] = -1;
		}
		for (int i = 0; i < st.accepted; i++) {
			if (cs[i].state == SC_DONE)
				continue;
			pf[np] = (struct pollfd){
				.fd = cs[i].sd,
				.events = cs[i].state == SC_VERDICT ? POLLOUT : POLLIN,
			};
			idx[np++] = i;
		}
		int r = st.o->poll(pf, (nfds_t)np, 5000);

		if (r == -EINTR)
			continue;
		if (r < 0) {
			say("server: poll: %s", rv(r));
			st.server_failures++;
			break;
		}
		for (int k = 0; k < np; k++) {
			if (!pf[k].revents)
				continue;
			if (pf[k].revents & POLLNVAL) {
				say("server: poll says POLLNVAL for sd %d", pf[k].fd);
				st.server_failures++;
				goto out;
			}
			if (idx[k] < 0) {
				for (;;) {
					int sd = st.o->accept(st.ls, NULL, NULL, SOCK_NONBLOCK);

					if (sd == -EAGAIN || sd == -EINTR)
						break;
					if (sd < 0) {
						say("server: accept: %s", rv(sd));
						st.server_failures++;
						goto out;
					}
					if (st.accepted == n) {
						say("server: more connections than clients");
						st.o->close(sd);
						st.server_failures++;
						goto out;
					}
					struct sconn *c = &cs[st.accepted++];

					c->sd = sd;
					c->state = SC_HDR;
					c->bad_off = XFER_UNLIMITED;
					xhash_init(&c->hash);
					/* 16 bytes into an empty send buffer: a
					 * non-blocking send takes them whole */
					if (st.greet) {
						ssize_t w = st.o->send(sd, greeting,
								       sizeof(greeting), 0);

						if (w != (ssize_t)sizeof(greeting))
							server_fail(c, "greeting: %s", rv(w));
					}
				}
				continue;
			}
			struct sconn *c = &cs[idx[k]];

			if (c->state == SC_HDR || c->state == SC_DATA)
				server_read(c, buf, 65536);
			if (c->state == SC_VERDICT)
				server_write(c);
			if (c->state == SC_DONE) {
				int cr = st.o->close(c->sd);

				if (cr)
					say("server: close: %s", rv(cr));
				st.finished++;
			}
		}
	}
out:
	for (int i = 0; i < st.accepted; i++)
		if (cs && cs[i].state != SC_DONE)
			st.o->close(cs[i].sd);
	free(cs);
	free(pf);
	free(idx);
	free(buf);
	return NULL;
}

static void client_fail(struct client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void client_fail(struct client *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	c->ok = 0;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	const struct xsock_ops *o = st.o;
	struct sockaddr_in sin = host_sin(st.port);
	uint8_t hdr[XFER_HDR_LEN], verdict[XFER_VERDICT_LEN + 1];
	struct xfer_pump p;
	const char *step;
	int sd, r;

	pthread_barrier_wait(&st.start);
	c->stage = 1;
	sd = xfer_dial(o, (struct sockaddr *)&sin, sizeof(sin), -1, &step);
	if (sd < 0) {
		client_fail(c, "%s: %s", step, rv(sd));
		return NULL;
	}
	xfer_pump_init(&p, o, sd);
	check_transport(o, sd);
	if (st.greet) {
		char g[sizeof(greeting)];
		ssize_t got = xfer_recv_all(o, sd, g, sizeof(g), -1);

		if (got != (ssize_t)sizeof(g) || memcmp(g, greeting, sizeof(g))) {
			client_fail(c, "greeting: %s", got < 0 ? rv(got) : "short or wrong");
			goto out;
		}
	}
	c->stage = 2;
	struct xfer_hdr h = { .magic = XFER_MAGIC_ONEWAY, .seed = c->seed, .bytes = st.bytes };

	xfer_hdr_encode(hdr, &h);
	ssize_t n = xfer_send_all(o, sd, hdr, sizeof(hdr), -1);

	if (n < 0) {
		client_fail(c, "send header: %s", rv(n));
		goto out;
	}
	r = xfer_pump_tx(&p, st.bytes, c->seed, 1, 65536, xfer_size_seed(c->seed, 9), true);
	if (!r)
		r = xfer_pump_run(&p);
	if (r) {
		client_fail(c, "%s: %s after %" PRIu64 " bytes", p.err_op ? p.err_op : "pump",
			    rv(r), p.tx_done);
		goto out;
	}
	c->stage = 3;
	n = xfer_recv_all(o, sd, verdict, sizeof(verdict), -1);
	if (n != XFER_VERDICT_LEN) {
		client_fail(c, "verdict: %s", n < 0 ? rv(n) :
			    n < XFER_VERDICT_LEN ? "EOF before it" : "data after it");
		goto out;
	}
	uint64_t vb, vh;

	xfer_verdict_decode(verdict, &vb, &vh);
	if (vb != st.bytes || vh != xhash_digest(&p.tx_hash)) {
		client_fail(c, "server got %" PRIu64 " of %" PRIu64 " bytes, checksum %s", vb,
			    st.bytes, vh == xhash_digest(&p.tx_hash) ? "ok" : "MISMATCH");
		goto out;
	}
	c->ok = 1;
	c->stage = 4;
out:
	xfer_pump_free(&p);
	r = o->close(sd);
	if (r && c->ok)
		client_fail(c, "close: %s", rv(r));
	return NULL;
}

static int run_storm(unsigned timeout_s)
{
	int failures = 0;
	pthread_t server;
	struct sdp_stats s0, s1;

	/* 100 connections: each is an sd plus transport fds in this process
	 * at both ends. */
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	sdp_get_stats(&s0);
	st.ls = mk_listener(st.o, SOCK_NONBLOCK, &st.port);
	if (st.ls < 0) {
		say("FAIL: listener: %s", rv(st.ls));
		return 1;
	}
	st.clients = calloc((size_t)st.conns, sizeof(*st.clients));
	if (!st.clients || pthread_barrier_init(&st.start, NULL, (unsigned)st.conns + 1)) {
		say("FAIL: out of memory");
		return 1;
	}
	say("%s: %d concurrent connections to %s:%d, %" PRIu64 " bytes each", st.o->name,
	    st.conns, host_str, st.port, st.bytes);
	/* Backstop only: the timed joins below report a hang in detail.
	 * timeout_s is the caller's whole limit, TEST_SLOW included. */
	watch_what = "the storm";
	alarm(timeout_s + 30);
	if (pthread_create(&server, NULL, server_main, NULL)) {
		say("FAIL: pthread_create");
		return 1;
	}
	for (int i = 0; i < st.conns; i++) {
		struct client *c = &st.clients[i];

		c->id = i;
		c->seed = 1000 + (uint32_t)i;
		/* Small stacks: a hundred threads, little on each stack. */
		pthread_attr_t a;

		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 256 * 1024);
		if (pthread_create(&c->thread, &a, client_main, c)) {
			say("FAIL: pthread_create for client %d", i);
			return 1;
		}
		pthread_attr_destroy(&a);
	}
	uint64_t t0 = xfer_now_ns();

	pthread_barrier_wait(&st.start);
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_s;
	for (int i = 0; i < st.conns; i++) {
		if (pthread_timedjoin_np(st.clients[i].thread, NULL, &deadline) == 0)
			continue;
		/* A hang: say where everyone is, then fail. */
		int stages[5] = { 0 };

		for (int k = 0; k < st.conns; k++)
			stages[st.clients[k].stage]++;
		say("FAIL: not finished after %u s; clients:", timeout_s);
		for (int k = 0; k < 5; k++)
			if (stages[k])
				say("  %3d %s", stages[k], client_stage[k]);
		say("server: %d accepted, %d finished, %d failures", st.accepted, st.finished,
		    st.server_failures);
		_exit(1);
	}
	uint64_t ns = xfer_now_ns() - t0;

	/* The clients' verdicts first: a client that failed early leaves the
	 * server waiting for a connection that never comes. */
	for (int i = 0; i < st.conns; i++) {
		struct client *c = &st.clients[i];

		if (!c->ok) {
			failures++;
			if (failures <= 10)
				say("client %d: %s", i, c->err);
		}
	}
	if (failures > 10)
		say("... and %d more failed clients", failures - 10);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += failures ? 5 : 30 * slow;
	if (pthread_timedjoin_np(server, NULL, &deadline)) {
		say("FAIL: the server is not done %s after the clients: %d accepted, %d finished, "
		    "%d failures%s%s", failures ? "5 s" : "30 s", st.accepted, st.finished,
		    st.server_failures, st.server_failures ? ", last: " : "", st.server_err);
		_exit(1);
	}
	alarm(0);
	st.o->close(st.ls);
	if (st.server_failures)
		say("server: %d failure(s), last: %s", st.server_failures, st.server_err);
	say("%d/%d connections ok, %" PRIu64 " bytes in %.3f s = %.2f Gbit/s aggregate",
	    st.conns - failures, st.conns, st.bytes * (uint64_t)st.conns, ns / 1e9,
	    xfer_gbit_s(st.bytes * (uint64_t)st.conns, ns));
	if (st.o == &xsock_sdp) {
		sdp_get_stats(&s1);
		say("engine: %" PRIu64 " active + %" PRIu64 " passive connections, %" PRIu64
		    " resets, %" PRIu64 " protocol errors, %" PRIu64 " credit stalls",
		    s1.connections_active - s0.connections_active,
		    s1.connections_passive - s0.connections_passive, s1.resets - s0.resets,
		    s1.protocol_errors - s0.protocol_errors, s1.credit_stalls - s0.credit_stalls);
	}
	pthread_barrier_destroy(&st.start);
	free(st.clients);
	return failures || st.server_failures || st.finished != st.conns;
}

/* ======================================================================= */
/* --api: the same calls against TCP and SDP                               */
/* ======================================================================= */

#define RES_LEN 200

typedef void (*check_fn)(const struct xsock_ops *o, char *res);

static void add(char *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(char *res, const char *fmt, ...)
{
	size_t l = strlen(res);
	va_list ap;

	if (l && l < RES_LEN - 1)
		res[l++] = ' ';
	va_start(ap, fmt);
	vsnprintf(res + l, RES_LEN - l, fmt, ap);
	va_end(ap);
}

/* getsockopt of an int, as "ret:value" (the call is sequenced before the
 * value is read: argument evaluation order is unspecified). */
static const char *getint(const struct xsock_ops *o, int s, int level, int name)
{
	static __thread char bufs[4][48];
	static __thread int k;
	char *b = bufs[k++ % 4];
	int v = -1;
	socklen_t len = sizeof(v);
	int r = o->getsockopt(s, level, name, &v, &len);

	snprintf(b, 48, "%s:%d", rv(r), v);
	return b;
}

static void ck_connect_refused(const struct xsock_ops *o, char *res)
{
	struct sockaddr_in sin = host_sin(closed_port(o));
	int s = o->socket(AF_INET, SOCK_STREAM, 0), err = -1;
	socklen_t len = sizeof(err);

	add(res, "connect=%s", rv(o->connect(s, (struct sockaddr *)&sin, sizeof(sin))));
	o->getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
	add(res, "so_error=%d", err);
	/* A failed attempt may be retried (Linux allows it). */
	add(res, "again=%s", rv(o->connect(s, (struct sockaddr *)&sin, sizeof(sin))));
	o->close(s);
}

static void ck_nonblock_connect(const struct xsock_ops *o, char *res)
{
	int port, ls = mk_listener(o, 0, &port);
	struct sockaddr_in sin = host_sin(port);
	int s = o->socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = -1;
	socklen_t len = sizeof(err);
	int r = o->connect(s, (struct sockaddr *)&sin, sizeof(sin));

	/* Loopback TCP may finish at once; both are Linux behaviour. */
	add(res, "connect=%s", r == 0 || r == -EINPROGRESS ? "0|-EINPROGRESS" : rv(r));
	int ev = xfer_wait(o, s, POLLOUT, 5000);

	add(res, "wait=%s", evname(ev & (POLLOUT | POLLERR | POLLHUP)));
	o->getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
	add(res, "so_error=%d", err);
	add(res, "connect_again=%s", rv(o->connect(s, (struct sockaddr *)&sin, sizeof(sin))));
	int a = o->accept(ls, NULL, NULL, 0);

	add(res, "accept=%s", rfd(a));
	if (a >= 0)
		o->close(a);
	o->close(s);
	o->close(ls);
}

static void ck_nonblock_connect_refused(const struct xsock_ops *o, char *res)
{
	struct sockaddr_in sin = host_sin(closed_port(o));
	int s = o->socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = -1;
	socklen_t len = sizeof(err);
	int r = o->connect(s, (struct sockaddr *)&sin, sizeof(sin));

	if (r == -EINPROGRESS) {
		int ev = xfer_wait(o, s, POLLOUT, 5000);

		o->getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
		add(res, "refused=%s", err == ECONNREFUSED ? "yes" : errname(err));
		add(res, "wait_has_out+err=%d", (ev & (POLLOUT | POLLERR)) == (POLLOUT | POLLERR));
	} else {
		/* Refused on the spot: also Linux. */
		add(res, "refused=%s", r == -ECONNREFUSED ? "yes" : rv(r));
		add(res, "wait_has_out+err=1");
	}
	err = -1;
	o->getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
	add(res, "so_error_after=%d", err);
	o->close(s);
}

static void ck_unconnected(const struct xsock_ops *o, char *res)
{
	int s = o->socket(AF_INET, SOCK_STREAM, 0);
	char b[4];
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);

	add(res, "socket=%s", rfd(s));
	add(res, "recv=%s", rv(o->recv(s, b, sizeof(b), 0)));
	add(res, "recv_dontwait=%s", rv(o->recv(s, b, sizeof(b), MSG_DONTWAIT)));
	add(res, "send=%s", rv(o->send(s, "x", 1, MSG_NOSIGNAL)));
	add(res, "getpeername=%s", rv(o->getpeername(s, (struct sockaddr *)&sin, &len)));
	add(res, "shutdown=%s", rv(o->shutdown(s, SHUT_WR)));
	add(res, "accept=%s", rv(o->accept(s, NULL, NULL, 0)));
	len = sizeof(sin);
	int r = o->getsockname(s, (struct sockaddr *)&sin, &len);

	add(res, "getsockname=%s family=%d port=%d", rv(r), sin.sin_family, ntohs(sin.sin_port));
	o->close(s);
}

static void ck_bind(const struct xsock_ops *o, char *res)
{
	struct sockaddr_in sin = host_sin(0);
	int s = o->socket(AF_INET, SOCK_STREAM, 0);

	add(res, "bind=%s", rv(o->bind(s, (struct sockaddr *)&sin, sizeof(sin))));
	add(res, "bind_twice=%s", rv(o->bind(s, (struct sockaddr *)&sin, sizeof(sin))));
	add(res, "accept_bound=%s", rv(o->accept(s, NULL, NULL, 0)));
	o->close(s);

	s = o->socket(AF_INET, SOCK_STREAM, 0);
	add(res, "bind_short_len=%s", rv(o->bind(s, (struct sockaddr *)&sin, 4)));
	o->close(s);

	int port, ls = mk_listener(o, 0, &port);
	struct sockaddr_in used = host_sin(port);
	int one = 1;

	s = o->socket(AF_INET, SOCK_STREAM, 0);
	add(res, "bind_inuse=%s", rv(o->bind(s, (struct sockaddr *)&used, sizeof(used))));
	o->close(s);
	s = o->socket(AF_INET, SOCK_STREAM, 0);
	o->setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	add(res, "bind_inuse_reuseaddr=%s",
	    rv(o->bind(s, (struct sockaddr *)&used, sizeof(used))));
	o->close(s);
	o->close(ls);
}

static void ck_listen_unbound(const struct xsock_ops *o, char *res)
{
	int s = o->socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);

	add(res, "listen=%s", rv(o->listen(s, 8)));
	int r = o->getsockname(s, (struct sockaddr *)&sin, &len);

	add(res, "getsockname=%s port_picked=%d addr_any=%d", rv(r), ntohs(sin.sin_port) != 0,
	    sin.sin_addr.s_addr == htonl(INADDR_ANY));
	add(res, "listen_again=%s", rv(o->listen(s, 16)));
	add(res, "so_acceptconn=%s", getint(o, s, SOL_SOCKET, SO_ACCEPTCONN));

	/* The picked port takes connections on loopback. */
	struct sockaddr_in to = host_sin(ntohs(sin.sin_port));
	int c = o->socket(AF_INET, SOCK_STREAM, 0);

	add(res, "connect=%s", rv(o->connect(c, (struct sockaddr *)&to, sizeof(to))));
	int a = o->accept(s, NULL, NULL, 0);

	add(res, "accept=%s", rfd(a));
	add(res, "listen_on_connected=%s", rv(o->listen(c, 8)));
	add(res, "connect_connected=%s", rv(o->connect(c, (struct sockaddr *)&to, sizeof(to))));
	if (a >= 0)
		o->close(a);
	o->close(c);
	o->close(s);
}

static void ck_accept_nonblock(const struct xsock_ops *o, char *res)
{
	int port, ls = mk_listener(o, SOCK_NONBLOCK, &port);

	add(res, "accept_empty=%s", rv(o->accept(ls, NULL, NULL, 0)));
	o->close(ls);
}

static void ck_dontwait(const struct xsock_ops *o, char *res)
{
	int c, s;
	char b[8];

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "recv_dontwait=%s", rv(o->recv(s, b, sizeof(b), MSG_DONTWAIT)));
	add(res, "send_zero=%s", rv(o->send(c, b, 0, MSG_NOSIGNAL)));
	add(res, "recv_zero_len=%s", rv(o->recv(s, b, 0, MSG_DONTWAIT)));
	add(res, "nread=%s", rv(o->nread(s)));
	o->close(c);
	o->close(s);
}

static void ck_peek(const struct xsock_ops *o, char *res)
{
	int c, s;
	char b[64] = { 0 };

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "send=%s", rv(o->send(c, "hello world", 11, MSG_NOSIGNAL)));
	add(res, "wait=%s", evname(xfer_wait(o, s, POLLIN, 5000) & POLLIN));
	/* One send of 11 bytes arrives whole on both; give it a moment. */
	usleep(20000);
	add(res, "nread=%s", rv(o->nread(s)));
	ssize_t n = o->recv(s, b, 5, MSG_PEEK);

	add(res, "peek=%s:%.5s", rv(n), b);
	memset(b, 0, sizeof(b));
	n = o->recv(s, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	add(res, "peek_all=%s:%s", rv(n), b);
	memset(b, 0, sizeof(b));
	n = o->recv(s, b, sizeof(b), 0);
	add(res, "recv=%s:%s", rv(n), b);
	add(res, "after=%s", rv(o->recv(s, b, sizeof(b), MSG_DONTWAIT)));
	o->close(c);
	o->close(s);
}

struct slow_sender {
	const struct xsock_ops *o;
	int sd;
};

static void *slow_send(void *arg)
{
	struct slow_sender *ss = arg;
	uint8_t b[1000];

	for (int i = 0; i < 3; i++) {
		memset(b, 'a' + i, sizeof(b));
		usleep(50000);
		xfer_send_all(ss->o, ss->sd, b, sizeof(b), 5000);
	}
	return NULL;
}

static void ck_waitall(const struct xsock_ops *o, char *res)
{
	int c, s;
	static uint8_t b[4000];
	pthread_t t;

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	struct slow_sender ss = { o, c };

	pthread_create(&t, NULL, slow_send, &ss);
	ssize_t n = o->recv(s, b, 3000, MSG_WAITALL);
	bool good = n == 3000 && b[0] == 'a' && b[1999] == 'b' && b[2999] == 'c';

	add(res, "waitall=%s content_ok=%d", rv(n), good);
	pthread_join(t, NULL);
	/* WAITALL stops early at EOF with what it has. */
	xfer_send_all(o, c, b, 10, 5000);
	o->shutdown(c, SHUT_WR);
	add(res, "waitall_eof=%s", rv(o->recv(s, b, 3000, MSG_WAITALL)));
	o->close(c);
	o->close(s);
}

static void ck_rcvtimeo(const struct xsock_ops *o, char *res)
{
	int c, s;
	char b[8];
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 }, got = { 0 };
	socklen_t len = sizeof(got);

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "set=%s", rv(o->setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))));
	o->getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got, &len);
	add(res, "get=%ld.%06ld", (long)got.tv_sec, (long)got.tv_usec);
	uint64_t t0 = xfer_now_ns();
	ssize_t n = o->recv(s, b, sizeof(b), 0);
	uint64_t ms = (xfer_now_ns() - t0) / 1000000;

	add(res, "recv=%s waited_about_200ms=%d", rv(n), ms >= 150 && ms < 3000);
	o->close(c);
	o->close(s);
}

static void ck_names(const struct xsock_ops *o, char *res)
{
	int port, ls = mk_listener(o, 0, &port);
	struct sockaddr_in sin = host_sin(port);
	struct sockaddr_storage a, b;
	socklen_t la, lb;
	char sa[80], sb[80];
	int c = o->socket(AF_INET, SOCK_STREAM, 0);

	add(res, "connect=%s", rv(o->connect(c, (struct sockaddr *)&sin, sizeof(sin))));
	la = sizeof(a);
	memset(&a, 0, sizeof(a));
	int s = o->accept(ls, (struct sockaddr *)&a, &la, 0);

	add(res, "accept=%s", rfd(s));
	xfer_format_addr((struct sockaddr *)&a, sa, sizeof(sa));
	lb = sizeof(b);
	o->getsockname(c, (struct sockaddr *)&b, &lb);
	xfer_format_addr((struct sockaddr *)&b, sb, sizeof(sb));
	add(res, "accept_addr==client_name:%d len=%u", !strcmp(sa, sb), la);
	la = sizeof(a);
	o->getpeername(s, (struct sockaddr *)&a, &la);
	xfer_format_addr((struct sockaddr *)&a, sa, sizeof(sa));
	add(res, "server_peer==client_name:%d", !strcmp(sa, sb));
	la = sizeof(a);
	o->getpeername(c, (struct sockaddr *)&a, &la);
	xfer_format_addr((struct sockaddr *)&a, sa, sizeof(sa));
	lb = sizeof(b);
	o->getsockname(s, (struct sockaddr *)&b, &lb);
	xfer_format_addr((struct sockaddr *)&b, sb, sizeof(sb));
	add(res, "client_peer==server_name:%d server_port==listener:%d", !strcmp(sa, sb),
	    xfer_addr_port((struct sockaddr *)&b) == port);
	/* A short buffer: truncated, and the real length reported. */
	la = 4;
	o->getsockname(c, (struct sockaddr *)&a, &la);
	add(res, "short_len=%u", la);
	o->close(c);
	o->close(s);
	o->close(ls);
}

static void ck_badsd(const struct xsock_ops *o, char *res)
{
	/* Far above any descriptor this process has. */
	const int bad = 987654;
	char b[4] = "bad";

	add(res, "recv=%s", rv(o->recv(bad, b, sizeof(b), 0)));
	add(res, "send=%s", rv(o->send(bad, b, sizeof(b), MSG_NOSIGNAL)));
	add(res, "close=%s", rv(o->close(bad)));
	add(res, "shutdown=%s", rv(o->shutdown(bad, SHUT_WR)));
	add(res, "listen=%s", rv(o->listen(bad, 1)));
	add(res, "connect=%s", rv(o->connect(bad, NULL, 0)));
	add(res, "accept=%s", rv(o->accept(bad, NULL, NULL, 0)));
}

static void ck_sockopts(const struct xsock_ops *o, char *res)
{
	int s = o->socket(AF_INET, SOCK_STREAM, 0), one = 1, v;
	socklen_t len = sizeof(v);

	add(res, "so_type=%s", getint(o, s, SOL_SOCKET, SO_TYPE));
	add(res, "so_error=%s", getint(o, s, SOL_SOCKET, SO_ERROR));
	add(res, "so_acceptconn=%s", getint(o, s, SOL_SOCKET, SO_ACCEPTCONN));
	add(res, "set_nodelay=%s",
	    rv(o->setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))));
	v = -1;
	int r = o->getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &len);

	add(res, "get_nodelay=%s:%d", rv(r), v != 0);
	add(res, "so_keepalive=%s", getint(o, s, SOL_SOCKET, SO_KEEPALIVE));
	len = sizeof(v);
	add(res, "unknown=%s", rv(o->getsockopt(s, SOL_SOCKET, 12345, &v, &len)));
	add(res, "set_unknown=%s", rv(o->setsockopt(s, SOL_SOCKET, 12345, &one, sizeof(one))));
	add(res, "short_optlen=%s",
	    rv(o->setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, 1)));
	o->close(s);
}

static void ck_eof(const struct xsock_ops *o, char *res)
{
	int c, s;
	char b[8];

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "shutdown=%s", rv(o->shutdown(c, SHUT_WR)));
	add(res, "recv=%s", rv(o->recv(s, b, sizeof(b), 0)));
	add(res, "recv_again=%s", rv(o->recv(s, b, sizeof(b), 0)));
	add(res, "recv_dontwait=%s", rv(o->recv(s, b, sizeof(b), MSG_DONTWAIT)));
	add(res, "shutdown_twice=%s", rv(o->shutdown(c, SHUT_WR)));
	add(res, "shutdown_bad_how=%s", rv(o->shutdown(c, 7)));
	o->close(c);
	o->close(s);
}

static void ck_reset(const struct xsock_ops *o, char *res)
{
	int c, s;
	char b[8];
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	/* An abortive close: the peer sees a reset. */
	add(res, "linger0=%s", rv(o->setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg))));
	add(res, "close=%s", rv(o->close(c)));
	int ev = xfer_wait(o, s, POLLIN, 5000);

	add(res, "wait=%s", evname(ev & (POLLIN | POLLERR | POLLHUP)));
	add(res, "recv=%s", rv(o->recv(s, b, sizeof(b), 0)));
	add(res, "recv_again=%s", rv(o->recv(s, b, sizeof(b), 0)));
	add(res, "send=%s", rv(o->send(s, "x", 1, MSG_NOSIGNAL)));
	o->close(s);
}

static void ck_send_after_peer_close(const struct xsock_ops *o, char *res)
{
	int c, s;

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "peer_close=%s", rv(o->close(c)));
	usleep(100000);
	/* The first send still goes out; the peer answers it with a reset. */
	add(res, "send1=%s", rv(o->send(s, "x", 1, MSG_NOSIGNAL)));
	usleep(200000);
	add(res, "send2=%s", rv(o->send(s, "x", 1, MSG_NOSIGNAL)));
	add(res, "send3=%s", rv(o->send(s, "x", 1, MSG_NOSIGNAL)));
	o->close(s);
}

static void ck_nonblock_full(const struct xsock_ops *o, char *res)
{
	int c, s;
	static uint8_t b[65536];
	uint64_t total = 0;
	ssize_t n = 0;

	add(res, "pair=%s", rv(mk_pair(o, &c, &s)));
	add(res, "nonblock=%s", rv(o->set_nonblock(c, 1)));
	/* Nobody reads: the send side must fill and say EAGAIN, well
	 * before 256 MiB. */
	while (total < (256u << 20)) {
		n = o->send(c, b, sizeof(b), MSG_NOSIGNAL);
		if (n <= 0)
			break;
		total += (uint64_t)n;
	}
	add(res, "fills_with=%s", rv(n));
	int ev = o->events(c);

	add(res, "pollout_when_full=%d", ev >= 0 && (ev & POLLOUT) != 0);
	add(res, "send_dontwait_blocking=%s", rv(o->send(s, b, 0, MSG_DONTWAIT)));
	o->close(c);
	o->close(s);
}

static const struct {
	const char *name;
	check_fn fn;
} checks[] = {
	{ "connect to a closed port", ck_connect_refused },
	{ "non-blocking connect", ck_nonblock_connect },
	{ "non-blocking connect, refused", ck_nonblock_connect_refused },
	{ "calls on an unconnected socket", ck_unconnected },
	{ "bind", ck_bind },
	{ "listen without bind", ck_listen_unbound },
	{ "non-blocking accept, none pending", ck_accept_nonblock },
	{ "MSG_DONTWAIT without data", ck_dontwait },
	{ "MSG_PEEK", ck_peek },
	{ "MSG_WAITALL", ck_waitall },
	{ "SO_RCVTIMEO", ck_rcvtimeo },
	{ "getsockname / getpeername", ck_names },
	{ "bad sd", ck_badsd },
	{ "socket options", ck_sockopts },
	{ "EOF after shutdown", ck_eof },
	{ "reset (SO_LINGER 0 close)", ck_reset },
	{ "send after the peer closed", ck_send_after_peer_close },
	{ "non-blocking send, full", ck_nonblock_full },
};

static int run_api(void)
{
	int diffs = 0, n = (int)(sizeof(checks) / sizeof(checks[0]));

	for (int i = 0; i < n; i++) {
		char tcp[RES_LEN] = "", sdp[RES_LEN] = "";

		watch(checks[i].name, 30);
		checks[i].fn(&xsock_tcp, tcp);
		checks[i].fn(&xsock_sdp, sdp);
		alarm(0);
		bool same = !strcmp(tcp, sdp);

		printf("%s %s\n", same ? "ok  " : "DIFF", checks[i].name);
		if (same) {
			printf("     tcp = sdp: %s\n", tcp);
		} else {
			printf("     tcp: %s\n", tcp);
			printf("     sdp: %s\n", sdp);
		}
		fflush(stdout);
		if (!same)
			diffs++;
	}
	say("%d of %d checks behave as Linux TCP, %d differ", n - diffs, n, diffs);
	return diffs ? 1 : 0;
}

/* ======================================================================= */
/* --half-close                                                             */
/* ======================================================================= */

static volatile sig_atomic_t sigpipes;
static volatile pid_t sigpipe_tid;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
	sigpipe_tid = (pid_t)syscall(SYS_gettid);
}

static int hc_failures;

static void expect(const char *api, const char *what, const char *got, const char *want)
{
	bool ok = !strcmp(got, want);

	printf("  %s %-4s %-58s %s%s%s\n", ok ? "ok  " : "FAIL", api, what, got,
	       ok ? "" : "   expected ", ok ? "" : want);
	fflush(stdout);
	if (!ok)
		hc_failures++;
}

/* Receive to EOF (or error), checking the stream; "N ok" / "N bad" / error. */
static const char *recv_stream(const struct xsock_ops *o, int sd, uint32_t seed, size_t rsz)
{
	static __thread char out[64];
	struct xfer_pump p;
	int r;

	xfer_pump_init(&p, o, sd);
	r = xfer_pump_rx(&p, XFER_UNLIMITED, true, seed, 1, rsz, seed);
	if (!r)
		r = xfer_pump_run(&p);
	if (r)
		snprintf(out, sizeof(out), "%s after %" PRIu64, rv(r), p.rx_done);
	else
		snprintf(out, sizeof(out), "%" PRIu64 " %s", p.rx_done,
			 p.rx_bad_off == XFER_UNLIMITED ? "ok" : "bad");
	xfer_pump_free(&p);
	return out;
}

static const char *send_stream(const struct xsock_ops *o, int sd, uint64_t bytes, uint32_t seed)
{
	static __thread char out[64];
	struct xfer_pump p;
	int r;

	xfer_pump_init(&p, o, sd);
	r = xfer_pump_tx(&p, bytes, seed, 1, 8192, seed, false);
	if (!r)
		r = xfer_pump_run(&p);
	snprintf(out, sizeof(out), "%s", r ? rv(r) : rv((long)p.tx_done));
	xfer_pump_free(&p);
	return out;
}

#define HC_EV (POLLIN | POLLRDHUP | POLLHUP | POLLERR)

struct tsend {
	const struct xsock_ops *o;
	int sd;
	ssize_t ret;
	pid_t tid;
};

static void *thread_send(void *arg)
{
	struct tsend *t = arg;

	t->tid = (pid_t)syscall(SYS_gettid);
	t->ret = t->o->send(t->sd, "x", 1, 0);
	return NULL;
}

static void run_half_close_api(const struct xsock_ops *o)
{
	const char *n = o->name;
	int c, s, r;
	char buf[16];

	/* A: the client stops sending first and keeps receiving. */
	watch("half-close A", 30);
	r = mk_pair(o, &c, &s);
	expect(n, "A connect", rv(r), "0");
	if (r)
		return;
	expect(n, "A client sends 1000 bytes", send_stream(o, c, 1000, 1), "1000");
	expect(n, "A client shutdown(SHUT_WR)", rv(o->shutdown(c, SHUT_WR)), "0");
	expect(n, "A server reads to EOF", recv_stream(o, s, 1, 333), "1000 ok");
	expect(n, "A server recv after EOF", rv(o->recv(s, buf, sizeof(buf), 0)), "0");
	expect(n, "A server events after EOF", evname(o->events(s) & HC_EV), "IN|RDHUP");
	unsigned before = (unsigned)sigpipes;

	expect(n, "A client send after SHUT_WR, MSG_NOSIGNAL",
	       rv(o->send(c, "x", 1, MSG_NOSIGNAL)), "-EPIPE");
	expect(n, "A ... and no SIGPIPE", (unsigned)sigpipes == before ? "none" : "raised",
	       "none");
	expect(n, "A client send after SHUT_WR, no flags", rv(o->send(c, "x", 1, 0)), "-EPIPE");
	expect(n, "A ... and SIGPIPE raised", (unsigned)sigpipes == before + 1 ? "raised once" :
	       (unsigned)sigpipes == before ? "none" : "several", "raised once");

	struct tsend ts = { .o = o, .sd = c };
	pthread_t t;

	before = (unsigned)sigpipes;
	pthread_create(&t, NULL, thread_send, &ts);
	pthread_join(t, NULL);
	expect(n, "A send from another thread", rv(ts.ret), "-EPIPE");
	expect(n, "A ... SIGPIPE goes to that thread",
	       (unsigned)sigpipes == before + 1 && sigpipe_tid == ts.tid ? "yes" : "no", "yes");
	expect(n, "A client shutdown(SHUT_WR) again", rv(o->shutdown(c, SHUT_WR)), "0");
	expect(n, "A client still connected: getpeername",
	       rv(o->getpeername(c, (struct sockaddr *)&(struct sockaddr_storage){ 0 },
				 &(socklen_t){ sizeof(struct sockaddr_storage) })), "0");
	expect(n, "A server sends 200000 bytes after the client's SHUT_WR",
	       send_stream(o, s, 200000, 2), "200000");
	expect(n, "A server shutdown(SHUT_WR)", rv(o->shutdown(s, SHUT_WR)), "0");
	expect(n, "A client reads them to EOF", recv_stream(o, c, 2, 7000), "200000 ok");
	expect(n, "A client events, both halves closed", evname(o->events(c) & HC_EV),
	       "IN|RDHUP|HUP");
	expect(n, "A server events, both halves closed", evname(o->events(s) & HC_EV),
	       "IN|RDHUP|HUP");
	expect(n, "A client close", rv(o->close(c)), "0");
	expect(n, "A server close", rv(o->close(s)), "0");

	/* B: the server stops sending first. */
	watch("half-close B", 30);
	r = mk_pair(o, &c, &s);
	expect(n, "B connect", rv(r), "0");
	if (r)
		return;
	expect(n, "B server sends 300 bytes", send_stream(o, s, 300, 3), "300");
	expect(n, "B server shutdown(SHUT_WR)", rv(o->shutdown(s, SHUT_WR)), "0");
	expect(n, "B client reads to EOF", recv_stream(o, c, 3, 1), "300 ok");
	expect(n, "B client events", evname(o->events(c) & HC_EV), "IN|RDHUP");
	expect(n, "B client sends 300000 bytes after EOF", send_stream(o, c, 300000, 4),
	       "300000");
	expect(n, "B client shutdown(SHUT_WR)", rv(o->shutdown(c, SHUT_WR)), "0");
	expect(n, "B server reads them to EOF", recv_stream(o, s, 4, 65536), "300000 ok");
	expect(n, "B client close", rv(o->close(c)), "0");
	expect(n, "B server close", rv(o->close(s)), "0");

	/* C: SHUT_RD and SHUT_RDWR. */
	watch("half-close C", 30);
	r = mk_pair(o, &c, &s);
	expect(n, "C connect", rv(r), "0");
	if (r)
		return;
	expect(n, "C client shutdown(SHUT_RD)", rv(o->shutdown(c, SHUT_RD)), "0");
	expect(n, "C client recv after SHUT_RD", rv(o->recv(c, buf, sizeof(buf), 0)), "0");
	expect(n, "C client can still send", send_stream(o, c, 5000, 5), "5000");
	expect(n, "C client shutdown(SHUT_RDWR)", rv(o->shutdown(c, SHUT_RDWR)), "0");
	expect(n, "C server reads to EOF", recv_stream(o, s, 5, 4096), "5000 ok");
	expect(n, "C client send after SHUT_RDWR", rv(o->send(c, "x", 1, MSG_NOSIGNAL)),
	       "-EPIPE");
	expect(n, "C client close", rv(o->close(c)), "0");
	expect(n, "C server close", rv(o->close(s)), "0");
	alarm(0);
}

static int run_half_close(void)
{
	struct sigaction sa = { .sa_handler = on_sigpipe };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
	run_half_close_api(&xsock_tcp);
	int tcp_failures = hc_failures;

	run_half_close_api(&xsock_sdp);
	say("%d failure(s) with TCP (the test's own reference), %d with SDP", tcp_failures,
	    hc_failures - tcp_failures);
	return hc_failures ? 1 : 0;
}

/* ======================================================================= */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: conn_storm [--tcp] [--conns N] [--bytes B] [--greet] [--timeout SEC]\n"
		"       conn_storm --api\n"
		"       conn_storm --half-close\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tcp", no_argument, NULL, 't' },
		{ "conns", required_argument, NULL, 'n' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "greet", no_argument, NULL, 'g' },
		{ "api", no_argument, NULL, 'a' },
		{ "half-close", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, mode = 's';
	unsigned timeout_s = 120;
	char *end;

	st.o = &xsock_sdp;
	st.conns = 100;
	st.bytes = 256 << 10;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			st.o = &xsock_tcp;
			break;
		case 'g':
			st.greet = true;
			break;
		case 'n':
			st.conns = (int)strtol(optarg, &end, 10);
			if (*end || st.conns < 1 || st.conns > 10000) {
				usage(stderr);
				return 2;
			}
			break;
		case 'b':
			if (xfer_parse_size(optarg, &st.bytes)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'T':
			timeout_s = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !timeout_s) {
				usage(stderr);
				return 2;
			}
			break;
		case 'a':
		case 'H':
			mode = c;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGALRM, on_alarm);
	if (mode != 'H')
		signal(SIGPIPE, SIG_IGN);
	if (test_env_init())
		return 1;
	int ret = sdp_init();

	/* The storm over TCP is the reference, which needs no transport. */
	if (ret <= 0 && (mode != 's' || st.o == &xsock_sdp)) {
		say("FAIL: sdp_init: %s", ret < 0 ? rv(ret) : "no usable transport");
		return 1;
	}
	switch (mode) {
	case 'a':
		say_prefix = "api_errors";
		ret = run_api();
		break;
	case 'H':
		say_prefix = "half_close";
		ret = run_half_close();
		break;
	default:
		ret = run_storm(timeout_s);
		break;
	}
	if (want_transport) {
		int n = atomic_load(&transport_checked), w = atomic_load(&transport_wrong);

		say("transport: %d SDP connection(s) checked, %d not on %s", n, w, want_transport);
		if (w)
			ret = 1;
	}
	say("%s", ret ? "FAIL" : "PASS");
	return ret;
}
