/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Running a scenario: each step is a socket call (or a few) whose every
 * observable goes into the transcript, normalized (conform.h).  Before
 * each step the sockets settle: the runner waits, within a bound, until
 * each connection is in the state the model (model.h) predicts, so that
 * what a step sees does not depend on how fast a stack moved bytes.
 * Every blocking call runs under a per-thread watchdog that interrupts it
 * (EINTR, and "stuck" in the transcript) instead of hanging the run.
 */
#include "conform.h"
#include "model.h"
#include "../integration/sockapi/util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAXV 24		/* variables of a scenario */
#define MAXEP 24	/* sockets of a scenario */
#define MAXPORTS 32
#define SMALL 24	/* reads up to this size print their bytes */
#define STEP_MS 5000	/* a step's watchdog (times TEST_SLOW) */
#define SETTLE_MS 3000	/* how long settling may take (times TEST_SLOW) */
#define WAIT_MS 2000	/* a wait for events with no limit given (times TEST_SLOW) */
#define BIG (64u << 20)	/* the most one step moves */

/* --- what the runs are given ----------------------------------------------- */

static struct {
	struct in_addr host, alt;
	struct in6_addr host6;
	bool have6, have_alt;
	int slow;
} env;

void exec_init(void)
{
	const char *h = getenv("TEST_HOST"), *h6 = getenv("TEST_HOST6"), *s = getenv("TEST_SLOW");

	env.host.s_addr = htonl(INADDR_LOOPBACK);
	if (h && *h && inet_pton(AF_INET, h, &env.host) != 1) {
		fprintf(stderr, "conform: TEST_HOST '%s' is not an IPv4 address\n", h);
		exit(2);
	}
	if (h6 && *h6) {
		if (inet_pton(AF_INET6, h6, &env.host6) != 1) {
			fprintf(stderr, "conform: TEST_HOST6 '%s' is not an IPv6 address\n", h6);
			exit(2);
		}
		env.have6 = true;
	}
	/* A second local address: the loopback net has all of 127/8. */
	if (env.host.s_addr == htonl(INADDR_LOOPBACK)) {
		env.alt.s_addr = htonl(INADDR_LOOPBACK + 1);
		env.have_alt = true;
	}
	env.slow = s && atoi(s) > 0 ? atoi(s) : 1;
}

bool exec_have_ipv6(void)
{
	return env.have6;
}

/* --- the watchdog ------------------------------------------------------------ */

static __thread timer_t wd_timer;
static __thread bool wd_made;
static __thread volatile sig_atomic_t wd_fired;
static volatile sig_atomic_t sigpipes;

static void on_alarm(int sig)
{
	(void)sig;
	wd_fired = 1;
}

static void on_pipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void signals_once(void)
{
	static bool done;
	struct sigaction sa = { 0 };

	if (done)
		return;
	done = true;
	/* No SA_RESTART: the watchdog must end a blocking call. */
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = on_pipe;
	sigaction(SIGPIPE, &sa, NULL);
}

/* Interrupt this thread's blocking call after MS ms (0: disarm).  A
 * process timer could land on a thread of the preload's instead. */
static void wd_arm(int ms)
{
	struct itimerspec its = { 0 };

	if (!wd_made) {
		struct sigevent sev = { 0 };

		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGALRM;
		sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);	/* glibc names it not */
		if (timer_create(CLOCK_MONOTONIC, &sev, &wd_timer) < 0) {
			perror("conform: timer_create");
			exit(2);
		}
		wd_made = true;
	}
	if (ms > 0) {
		wd_fired = 0;
		its.it_value.tv_sec = ms / 1000;
		its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	}
	timer_settime(wd_timer, 0, &its, NULL);
}

static void wd_done(void)
{
	if (wd_made) {
		timer_delete(wd_timer);
		wd_made = false;
	}
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void nap_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* --- the data: a printable stream per sender, checked by position -------- */

static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* Byte OFF of sender ID's stream: runs of the alphabet (readable in small
 * reads), each run shifted by a hash of its number (so a lost or repeated
 * run shows). */
static char pat(int id, uint64_t off)
{
	uint64_t blk = off / 62, x = (blk + 1) * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)id << 40);

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 29;
	return alnum[(off % 62 + (uint64_t)id * 17 + (blk ? x % 62 : 0)) % 62];
}

static void pat_fill(int id, uint64_t off, char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pat(id, off + i);
}

/* Offset in BUF of the first byte that is not sender ID's at OFF, or -1. */
static long pat_check(int id, uint64_t off, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pat(id, off + i))
			return (long)i;
	return -1;
}

/* --- the scenario's state ------------------------------------------------------ */

enum { K_NEW, K_LISTEN, K_CONN };

struct ep {
	struct mep m;
	int id;			/* creation order: the stream's seed */
	int refs;		/* variables naming it */
	int fam;
	int kind;
	struct ep *target;	/* the listener a connect went to */
	struct sockaddr_storage local;	/* a connecting end's name, for accept */
	socklen_t local_len;
	bool busy;		/* a background thread moves its data */
	bool fuzzy;		/* back-pressure: the counts are the stack's own */
	bool shifted;		/* and so is the stream offset from then on */
};

enum { V_SOCK, V_EPOLL };

struct bg {
	pthread_t th;
	bool on;
	bool send;
	int fd;
	int peer_id;		/* bgrecv: the stream it reads */
	int id;			/* bgsend: its own stream */
	uint64_t off, want, done;
	int err;		/* errno that ended it, 0, or -1 for EOF */
	long bad;		/* offset of the first wrong byte, or -1 */
	bool stuck;
};

struct var {
	char name[16];
	int fd;
	int type;
	int slot;		/* a number for epoll's data (names[]) */
	struct ep *ep;
	struct bg bg;
};

struct ctx {
	FILE *out;
	const struct scenario *sc;
	int base;		/* the lowest free fd at the start */
	struct var v[MAXV];
	int nv;
	struct ep *eps[MAXEP];
	int nep;
	char names[MAXV * 4][16];	/* every variable's name by slot */
	int nslots;
	uint16_t ports[MAXPORTS];	/* ports by order of appearance: p1, p2... */
	int nports;
	int holders[8];		/* sockets holding the ports of "closed" */
	int nholders;
	char res[4096];		/* the step's result */
	char err[256];		/* a syntax error */
	int stepno;
	bool some;		/* "some" step: a count is all, some or none */
	/* names whose "X = ..." step failed (accept -> -1 ...): a later
	 * step naming one is not run, and says so, so that the transcript
	 * shows the difference where a syntax error would end the run */
	char unmade[8][16];
	int nunmade;
};

static void say(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct ctx *c, const char *fmt, ...)
{
	size_t n = strlen(c->res);
	va_list ap;

	if (n + 1 >= sizeof(c->res))
		return;
	va_start(ap, fmt);
	vsnprintf(c->res + n, sizeof(c->res) - n, fmt, ap);
	va_end(ap);
}

static int bad(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct ctx *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return -1;
}

/* "-1 ENAME" for a failed call, or the number. */
static void say_rc(struct ctx *c, long rc, int e)
{
	if (rc < 0)
		say(c, "-1 %s", errname(e));
	else
		say(c, "%ld", rc);
}

/* The same for a call just made: say_ret(c, call(...)) reads errno after
 * it (an argument list has no order). */
static void say_ret(struct ctx *c, long rc)
{
	say_rc(c, rc, errno);
}

static struct var *var_find(struct ctx *c, const char *name)
{
	for (int i = 0; i < c->nv; i++)
		if (strcmp(c->v[i].name, name) == 0)
			return &c->v[i];
	return NULL;
}

static struct var *need_var(struct ctx *c, const char *name, int type)
{
	struct var *v = var_find(c, name);

	if (!v)
		bad(c, "no socket named '%s'", name);
	else if (v->type != type)
		bad(c, "'%s' is not %s", name, type == V_SOCK ? "a socket" : "an epoll set");
	return v && v->type == type ? v : NULL;
}

static struct ep *ep_new(struct ctx *c, int fam)
{
	struct ep *e;

	if (c->nep == MAXEP)
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e) {
		fprintf(stderr, "conform: out of memory\n");
		exit(2);
	}
	e->id = c->nep + 1;
	e->fam = fam;
	e->m.open = true;
	c->eps[c->nep++] = e;
	return e;
}

static struct var *var_add(struct ctx *c, const char *name, int fd, int type, struct ep *ep)
{
	struct var *v;

	if (var_find(c, name)) {
		bad(c, "'%s' is in use (close it first)", name);
		return NULL;
	}
	if (c->nv == MAXV || c->nslots == (int)(sizeof(c->names) / sizeof(c->names[0]))) {
		bad(c, "too many variables");
		return NULL;
	}
	v = &c->v[c->nv++];
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->fd = fd;
	v->type = type;
	v->ep = ep;
	v->slot = c->nslots;
	snprintf(c->names[c->nslots++], sizeof(c->names[0]), "%s", name);
	if (ep)
		ep->refs++;
	return v;
}

static int fd_of(struct ctx *c, const struct ep *e)
{
	for (int i = 0; i < c->nv; i++)
		if (c->v[i].ep == e)
			return c->v[i].fd;
	return -1;
}

static void ep_closed(struct ctx *c, struct ep *e)
{
	m_close(&e->m);
	/* Connections queued on a listener that closes are reset. */
	if (e->kind == K_LISTEN)
		for (int i = 0; i < c->nep; i++)
			if (c->eps[i]->target == e && !c->eps[i]->m.peer)
				m_reset(&c->eps[i]->m);
}

/* The variable goes (its descriptor was closed); the socket with it
 * when no other variable names it. */
static void var_drop(struct ctx *c, struct var *v)
{
	struct ep *e = v->ep;

	*v = c->v[--c->nv];
	if (e && --e->refs == 0)
		ep_closed(c, e);
}

/* --- addresses and ports ------------------------------------------------------- */

static const char *port_name(struct ctx *c, uint16_t port, char *buf, size_t len)
{
	int i;

	if (port == 0)
		return "0";
	for (i = 0; i < c->nports; i++)
		if (c->ports[i] == port)
			break;
	if (i == c->nports && c->nports < MAXPORTS)
		c->ports[c->nports++] = port;
	if (i == MAXPORTS)
		snprintf(buf, len, "port%u", port);
	else
		snprintf(buf, len, "p%d", i + 1);
	return buf;
}

static const char *v4_name(struct in_addr a, char *buf, size_t len)
{
	if (a.s_addr == env.host.s_addr)
		return "host";
	if (env.have_alt && a.s_addr == env.alt.s_addr)
		return "alt";
	if (a.s_addr == htonl(INADDR_ANY))
		return "any";
	if (a.s_addr == htonl(INADDR_LOOPBACK))
		return "lo";
	inet_ntop(AF_INET, &a, buf, (socklen_t)len);
	return buf;
}

static void say_addr(struct ctx *c, const struct sockaddr_storage *ss, socklen_t len)
{
	char a[INET6_ADDRSTRLEN + 16], p[16];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

		say(c, "%s:%s", v4_name(s4->sin_addr, a, sizeof(a)),
		    port_name(c, ntohs(s4->sin_port), p, sizeof(p)));
		if (len != sizeof(*s4))
			say(c, "/len=%u", len);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		const char *n;

		if (env.have6 && memcmp(&s6->sin6_addr, &env.host6, 16) == 0)
			n = "host6";
		else if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			n = "any6";
		else if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			n = "lo6";
		else if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			struct in_addr v4;
			char b[INET_ADDRSTRLEN];

			memcpy(&v4, &s6->sin6_addr.s6_addr[12], 4);
			snprintf(a, sizeof(a), "mapped-%s", v4_name(v4, b, sizeof(b)));
			n = a;
		} else {
			inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
			n = a;
		}
		say(c, "[%s]:%s", n, port_name(c, ntohs(s6->sin6_port), p, sizeof(p)));
		if (len != sizeof(*s6))
			say(c, "/len=%u", len);
		if (s6->sin6_flowinfo || s6->sin6_scope_id)
			say(c, "/flow=%u,scope=%u", s6->sin6_flowinfo, s6->sin6_scope_id);
	} else if (len == 0) {
		say(c, "(none)");
	} else {
		say(c, "family%d/len=%u", ss->ss_family, len);
	}
}

/* A port no socket of ours or the preload's uses: free on TCP and at the
 * software transports' offsets (doc/port-scheme.md).  Raw system calls:
 * these sockets are the runner's, not part of the scenario. */
static uint16_t free_port(int fam)
{
	for (int tries = 0; tries < 100; tries++) {
		int s = (int)syscall(SYS_socket, fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_storage ss = { 0 };
		socklen_t len = sizeof(ss);
		uint16_t port = 0;
		bool ok = true;

		if (s < 0)
			return 0;
		ss.ss_family = (sa_family_t)fam;
		if (syscall(SYS_bind, s, &ss, fam == AF_INET ? sizeof(struct sockaddr_in)
							     : sizeof(struct sockaddr_in6)) == 0 &&
		    syscall(SYS_getsockname, s, &ss, &len) == 0)
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		syscall(SYS_close, s);
		for (int off = 20000; port && off <= 30000 && ok; off += 10000) {
			struct sockaddr_in a = { .sin_family = AF_INET,
						 .sin_port = htons((uint16_t)(port + off)) };

			s = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			ok = s >= 0 && syscall(SYS_bind, s, &a, sizeof(a)) == 0;
			if (s >= 0)
				syscall(SYS_close, s);
		}
		if (port && ok)
			return port;
	}
	return 0;
}

static uint16_t var_port(struct var *v)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(v->fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void set_v4(struct sockaddr_storage *ss, socklen_t *len, struct in_addr a, uint16_t port)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	s4->sin_family = AF_INET;
	s4->sin_addr = a;
	s4->sin_port = htons(port);
	*len = sizeof(*s4);
}

static void set_v6(struct sockaddr_storage *ss, socklen_t *len, const struct in6_addr *a,
		   uint16_t port)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	s6->sin6_family = AF_INET6;
	s6->sin6_addr = *a;
	s6->sin6_port = htons(port);
	*len = sizeof(*s6);
}

static void set_mapped(struct sockaddr_storage *ss, socklen_t *len, struct in_addr a,
		       uint16_t port)
{
	struct in6_addr m = IN6ADDR_ANY_INIT;

	m.s6_addr[10] = m.s6_addr[11] = 0xff;
	memcpy(&m.s6_addr[12], &a, 4);
	set_v6(ss, len, &m, port);
}

/* "WHO:PORT": host host6 any any6 alt lo lo6 mapped mapped-alt; the port
 * a number, free (a new free one), pN (one named before) or @X (socket
 * X's).  FAM picks the address family where WHO does not. */
static int parse_addr(struct ctx *c, const char *spec, int fam, struct sockaddr_storage *ss,
		      socklen_t *len)
{
	char who[32];
	const char *colon = strrchr(spec, ':'), *ps;
	uint16_t port = 0;

	if (!colon || (size_t)(colon - spec) >= sizeof(who))
		return bad(c, "address '%s': WHO:PORT", spec);
	memcpy(who, spec, (size_t)(colon - spec));
	who[colon - spec] = '\0';
	ps = colon + 1;
	if (strcmp(ps, "free") == 0) {
		char b[16];

		port = free_port(AF_INET);
		if (!port)
			return bad(c, "no free port");
		port_name(c, port, b, sizeof(b));
	} else if (ps[0] == '@') {
		struct var *v = need_var(c, ps + 1, V_SOCK);

		if (!v)
			return -1;
		port = var_port(v);
	} else if (ps[0] == 'p' && isdigit((unsigned char)ps[1])) {
		int i = atoi(ps + 1);

		if (i < 1 || i > c->nports)
			return bad(c, "port %s not named yet", ps);
		port = c->ports[i - 1];
	} else if (isdigit((unsigned char)ps[0])) {
		port = (uint16_t)atoi(ps);
	} else {
		return bad(c, "port '%s'", ps);
	}
	if (strcmp(who, "host") == 0)
		set_v4(ss, len, env.host, port);
	else if (strcmp(who, "alt") == 0)
		set_v4(ss, len, env.alt, port);
	else if (strcmp(who, "lo") == 0)
		set_v4(ss, len, (struct in_addr){ htonl(INADDR_LOOPBACK) }, port);
	else if (strcmp(who, "any") == 0 && fam == AF_INET)
		set_v4(ss, len, (struct in_addr){ htonl(INADDR_ANY) }, port);
	else if (strcmp(who, "any") == 0 || strcmp(who, "any6") == 0)
		set_v6(ss, len, &in6addr_any, port);
	else if (strcmp(who, "host6") == 0)
		set_v6(ss, len, &env.host6, port);
	else if (strcmp(who, "lo6") == 0)
		set_v6(ss, len, &in6addr_loopback, port);
	else if (strcmp(who, "mapped") == 0)
		set_mapped(ss, len, env.host, port);
	else if (strcmp(who, "mapped-alt") == 0)
		set_mapped(ss, len, env.alt, port);
	else
		return bad(c, "address '%s'", who);
	return 0;
}

/* Where a connect to listener L goes from a socket of family FAM: L's
 * address, with an unspecified one replaced by host (host6), and an IPv4
 * one mapped for an IPv6 socket. */
static int listener_addr(struct ctx *c, struct var *l, int fam, struct sockaddr_storage *ss,
			 socklen_t *len)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);

	if (getsockname(l->fd, (struct sockaddr *)&a, &alen) < 0)
		return bad(c, "getsockname(%s): %s", l->name, errname(errno));
	uint16_t port = ntohs(((struct sockaddr_in *)&a)->sin_port);

	if (a.ss_family == AF_INET) {
		struct in_addr v4 = ((struct sockaddr_in *)&a)->sin_addr;

		if (v4.s_addr == htonl(INADDR_ANY))
			v4 = env.host;
		if (fam == AF_INET6)
			set_mapped(ss, len, v4, port);
		else
			set_v4(ss, len, v4, port);
	} else {
		struct in6_addr v6 = ((struct sockaddr_in6 *)&a)->sin6_addr;

		if (fam == AF_INET)
			set_v4(ss, len, env.host, port);
		else if (IN6_IS_ADDR_UNSPECIFIED(&v6))
			set_v6(ss, len, &env.host6, port);
		else
			set_v6(ss, len, &v6, port);
	}
	return 0;
}

/* --- settling -------------------------------------------------------------------- */

static int revents_of(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP };

	return poll(&p, 1, 0) == 1 ? p.revents : 0;
}

static int ioctl_int(int fd, unsigned long req)
{
	int v = 0;

	return ioctl(fd, req, &v) < 0 ? -1 : v;
}

/* Is E where the model says it ends up?  If not, why not. */
static bool ep_settled(struct ctx *c, struct ep *e, char *why, size_t len)
{
	int fd = fd_of(c, e), pfd, rev, inq, outq;
	struct ep *p;

	if (fd < 0 || e->busy || e->kind != K_CONN)
		return true;
	rev = revents_of(fd);
	if (e->m.rst_in) {
		/* POLLHUP alone may be this end's own shutdown both ways.
		 * A reset that came before any FIN of the peer's also sets
		 * POLLERR until a call takes the error: wait for that once.
		 * (Linux's reset on loopback lands within the call that
		 * caused it, SDP's a little later.) */
		bool err_due = e->m.rst_new && !e->m.fin_in;

		if (!(rev & POLLHUP) || (err_due && !(rev & POLLERR))) {
			snprintf(why, len, "waiting for the reset (POLLHUP)");
			return false;
		}
		e->m.rst_new = false;
		return true;
	}
	if (e->m.dead || !e->m.peer)
		return true;
	p = (struct ep *)e->m.peer;
	if (p->busy)
		return true;
	pfd = fd_of(c, p);
	uint64_t want = m_pending(&e->m);

	inq = ioctl_int(fd, FIONREAD);
	outq = pfd >= 0 ? ioctl_int(pfd, SIOCOUTQ) : 0;
	/* Everything arrived and was acknowledged (SIOCOUTQ counts a FIN
	 * until then, and data held back by corking).  Under back-pressure
	 * the stack decides what waits where: each byte in one of the two
	 * queues, once acknowledged. */
	if (inq < 0 || outq < 0 ||
	    (e->m.backlog ? pfd >= 0 && (uint64_t)inq + (uint64_t)outq != want
			  : (uint64_t)inq != want || outq != 0)) {
		snprintf(why, len, "FIONREAD %d and the peer's SIOCOUTQ %d, for %llu sent", inq, outq,
			 (unsigned long long)want);
		return false;
	}
	if (e->m.backlog && (uint64_t)inq == want && outq == 0)
		e->m.backlog = false;	/* all of it here */
	if (pfd < 0 && !e->m.backlog && ioctl_int(fd, SIOCOUTQ) != 0) {
		snprintf(why, len, "SIOCOUTQ %d to a closed peer", ioctl_int(fd, SIOCOUTQ));
		return false;
	}
	if (e->m.fin_in && !(e->m.backlog && (uint64_t)inq < want) && !(rev & POLLRDHUP)) {
		snprintf(why, len, "waiting for the FIN (POLLRDHUP)");
		return false;
	}
	return true;
}

static void settle(struct ctx *c)
{
	int64_t start = now_us(), end = start + (int64_t)SETTLE_MS * 1000 * env.slow;
	char why[160] = "";
	int who = -1;

	for (;;) {
		who = -1;
		for (int i = 0; i < c->nep && who < 0; i++)
			if (!ep_settled(c, c->eps[i], why, sizeof(why)))
				who = i;
		if (who < 0)
			return;
		if (now_us() >= end)
			break;
		/* Loopback moves a message in microseconds: look often first. */
		nap_us(now_us() - start < 2000 ? 50 : 1000);
	}
	for (int i = 0; i < c->nv; i++)
		if (c->v[i].ep == c->eps[who]) {
			fprintf(c->out, "  (unsettled: %s: %s)\n", c->v[i].name, why);
			return;
		}
}

/* --- parsing arguments --------------------------------------------------------- */

/* 10, 4K, 1M. */
static int parse_size(struct ctx *c, const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return bad(c, "size '%s'", s);
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	if (*end || v > BIG)
		return bad(c, "size '%s'", s);
	*out = (size_t)v;
	return 0;
}

/* "3,5,10": iovec lengths. */
static int parse_list(struct ctx *c, const char *s, size_t *out, int max)
{
	char buf[128], *save = NULL, *t;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return bad(c, "too many lengths in '%s'", s);
		if (parse_size(c, t, &out[n++]) < 0)
			return -1;
	}
	return n ? n : bad(c, "lengths '%s'", s);
}

static int parse_msgflags(struct ctx *c, int argc, char **argv, int *flags)
{
	static const struct {
		const char *n;
		int f;
	} t[] = { { "dontwait", MSG_DONTWAIT }, { "peek", MSG_PEEK },	{ "waitall", MSG_WAITALL },
		  { "trunc", MSG_TRUNC },	{ "more", MSG_MORE },	{ "nosignal", MSG_NOSIGNAL },
		  { "oob", MSG_OOB },		{ "eor", MSG_EOR },	{ "cmsg_cloexec", MSG_CMSG_CLOEXEC } };

	*flags = 0;
	for (int i = 0; i < argc; i++) {
		size_t j;

		for (j = 0; j < sizeof(t) / sizeof(t[0]); j++)
			if (strcmp(argv[i], t[j].n) == 0)
				break;
		if (j == sizeof(t) / sizeof(t[0]))
			return bad(c, "flag '%s'", argv[i]);
		*flags |= t[j].f;
	}
	return 0;
}

static const char *msgflag_names(int f, char *buf, size_t len)
{
	static const struct {
		int f;
		const char *n;
	} t[] = { { MSG_TRUNC, "MSG_TRUNC" }, { MSG_CTRUNC, "MSG_CTRUNC" }, { MSG_OOB, "MSG_OOB" },
		  { MSG_EOR, "MSG_EOR" },     { MSG_ERRQUEUE, "MSG_ERRQUEUE" } };
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (f & t[i].f) {
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "|" : "", t[i].n);
			f &= ~t[i].f;
		}
	if (f)
		snprintf(buf + used, len - used, "%s0x%x", used ? "|" : "", f);
	return used || f ? buf : "0";
}

static int parse_events(struct ctx *c, const char *s, int *ev, bool epoll)
{
	char buf[128], *save = NULL, *t;

	*ev = 0;
	if (strcmp(s, "-") == 0)
		return 0;
	snprintf(buf, sizeof(buf), "%s", s);
	for (t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (strcmp(t, "in") == 0)
			*ev |= POLLIN;
		else if (strcmp(t, "out") == 0)
			*ev |= POLLOUT;
		else if (strcmp(t, "pri") == 0)
			*ev |= POLLPRI;
		else if (strcmp(t, "rdhup") == 0)
			*ev |= POLLRDHUP;
		else if (strcmp(t, "err") == 0)
			*ev |= POLLERR;
		else if (strcmp(t, "hup") == 0)
			*ev |= POLLHUP;
		else if (epoll && strcmp(t, "et") == 0)
			*ev |= (int)EPOLLET;
		else if (epoll && strcmp(t, "oneshot") == 0)
			*ev |= EPOLLONESHOT;
		else if (epoll && strcmp(t, "exclusive") == 0)
			*ev |= EPOLLEXCLUSIVE;
		else
			return bad(c, "event '%s'", t);
	}
	return 0;
}

static int parse_fam(struct ctx *c, const char *s, int *fam)
{
	if (strcmp(s, "inet") == 0)
		*fam = AF_INET;
	else if (strcmp(s, "inet6") == 0)
		*fam = AF_INET6;
	else
		return bad(c, "family '%s' (inet or inet6)", s);
	return 0;
}

static bool has_word(int argc, char **argv, const char *w)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], w) == 0)
			return true;
	return false;
}

/* Waits given in a step are scaled by TEST_SLOW like every limit. */
static int wait_ms(int argc, char **argv, int i, int dflt)
{
	return (argc > i ? atoi(argv[i]) : dflt) * env.slow;
}

/* --- printing data --------------------------------------------------------------- */

static const struct ep *peer_of(const struct ep *e)
{
	return (const struct ep *)e->m.peer;
}

/* N bytes read on E at stream offset OFF: their text when few, else
 * whether they are the peer's bytes at that offset. */
static void say_data(struct ctx *c, const struct ep *e, uint64_t off, const char *buf, size_t n)
{
	const struct ep *p = peer_of(e);

	if (n == 0)
		return;
	/* The bytes themselves, where their place in the stream is the same
	 * on every stack. */
	if (n <= SMALL && !(p && p->shifted)) {
		say(c, " \"");
		for (size_t i = 0; i < n; i++)
			say(c, isprint((unsigned char)buf[i]) && buf[i] != '"' && buf[i] != '\\'
				       ? "%c" : "\\x%02x",
			    (unsigned char)buf[i]);
		say(c, "\"");
		return;
	}
	if (!p) {
		say(c, " (from no known peer)");
		return;
	}
	long b = pat_check(p->id, off, buf, n);

	if (b < 0)
		say(c, " data ok");
	else
		say(c, " data WRONG from byte %ld", b);
}

/* A count the other stack may not share (after a fill) is not printed. */
static void say_count(struct ctx *c, const struct ep *e, uint64_t n)
{
	if (e->fuzzy || (peer_of(e) && peer_of(e)->fuzzy))
		say(c, "some");
	else
		say(c, "%llu", (unsigned long long)n);
}

/* N of the WANT a call asked for; after "some", only whether it was all
 * of it: how much a call takes when the stack is short of room is the
 * stack's own. */
static void say_moved(struct ctx *c, const struct ep *e, uint64_t n, uint64_t want)
{
	if (c->some && n > 0)
		say(c, n == want ? "all" : "some");
	else
		say_count(c, e, n);
}

static char *xmalloc(size_t n)
{
	char *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "conform: out of memory\n");
		exit(2);
	}
	return p;
}

/* --- the steps ------------------------------------------------------------------- */

typedef int (*op_fn)(struct ctx *c, int argc, char **argv, const char *dst);

static int op_socket(struct ctx *c, int argc, char **argv, const char *dst)
{
	int fam = AF_INET, type = SOCK_STREAM, fd;

	if (argc < 2 || parse_fam(c, argv[1], &fam) < 0)
		return bad(c, "socket inet|inet6 [nonblock] [cloexec]");
	if (has_word(argc, argv, "nonblock"))
		type |= SOCK_NONBLOCK;
	if (has_word(argc, argv, "cloexec"))
		type |= SOCK_CLOEXEC;
	fd = socket(fam, type, 0);
	if (fd < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	say(c, "fd+%d", fd - c->base);
	struct ep *e = ep_new(c, fam);

	if (!e) {
		close(fd);
		return bad(c, "too many sockets");
	}
	return var_add(c, dst, fd, V_SOCK, e) ? 0 : -1;
}

static int setint(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

/* socket, options, bind, listen: the usual server start. */
static int op_listener(struct ctx *c, int argc, char **argv, const char *dst)
{
	int fam = AF_INET, fd, backlog = 16, e = 0;
	struct sockaddr_storage ss;
	socklen_t len = 0;
	const char *addr = NULL;

	if (argc < 2 || parse_fam(c, argv[1], &fam) < 0)
		return bad(c, "listener inet|inet6 [ADDR] [backlog=N] [v6only=0|1] [reuseaddr] "
			      "[reuseport] [nonblock]");
	for (int i = 2; i < argc; i++)
		if (strchr(argv[i], ':'))
			addr = argv[i];
		else if (strncmp(argv[i], "backlog=", 8) == 0)
			backlog = atoi(argv[i] + 8);
	if (parse_addr(c, addr ? addr : fam == AF_INET ? "host:0" : "host6:0", fam, &ss, &len) < 0)
		return -1;
	fd = socket(fam, SOCK_STREAM | (has_word(argc, argv, "nonblock") ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	for (int i = 2; i < argc && !e; i++)
		if (strncmp(argv[i], "v6only=", 7) == 0 &&
		    setint(fd, IPPROTO_IPV6, IPV6_V6ONLY, atoi(argv[i] + 7)) < 0)
			e = errno;
	if (!e && has_word(argc, argv, "reuseaddr") && setint(fd, SOL_SOCKET, SO_REUSEADDR, 1) < 0)
		e = errno;
	if (!e && has_word(argc, argv, "reuseport") && setint(fd, SOL_SOCKET, SO_REUSEPORT, 1) < 0)
		e = errno;
	if (!e && bind(fd, (struct sockaddr *)&ss, len) < 0)
		e = errno;
	if (!e && listen(fd, backlog) < 0)
		e = errno;
	if (e) {
		close(fd);
		say(c, "-1 %s", errname(e));
		return 0;
	}
	say(c, "fd+%d ", fd - c->base);
	len = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &len);
	say_addr(c, &ss, len);
	struct ep *ep = ep_new(c, fam);

	if (!ep) {
		close(fd);
		return bad(c, "too many sockets");
	}
	ep->kind = K_LISTEN;
	return var_add(c, dst, fd, V_SOCK, ep) ? 0 : -1;
}

static int op_bind(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	struct var *v;

	(void)dst;
	if (argc != 3)
		return bad(c, "bind X ADDR");
	v = need_var(c, argv[1], V_SOCK);
	if (!v || parse_addr(c, argv[2], v->ep->fam, &ss, &len) < 0)
		return -1;
	int r = bind(v->fd, (struct sockaddr *)&ss, len);

	say_rc(c, r, errno);
	return 0;
}

static int op_listen(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;

	(void)dst;
	if (argc < 2 || argc > 3)
		return bad(c, "listen X [BACKLOG]");
	v = need_var(c, argv[1], V_SOCK);
	if (!v)
		return -1;
	int r = listen(v->fd, argc == 3 ? atoi(argv[2]) : 16);

	say_rc(c, r, errno);
	if (r == 0)
		v->ep->kind = K_LISTEN;
	return 0;
}

static int op_connect(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	struct var *v, *l = NULL;

	(void)dst;
	if (argc != 3)
		return bad(c, "connect X L|ADDR|closed");
	v = need_var(c, argv[1], V_SOCK);
	if (!v)
		return -1;
	if (strcmp(argv[2], "closed") == 0) {
		/* Bound, not listening: nothing answers there. */
		int h = (int)syscall(SYS_socket, v->ep->fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_storage hs = { 0 };
		socklen_t hl = v->ep->fam == AF_INET ? sizeof(struct sockaddr_in)
						     : sizeof(struct sockaddr_in6);

		if (v->ep->fam == AF_INET)
			set_v4(&hs, &hl, env.host, 0);
		else
			set_v6(&hs, &hl, &env.host6, 0);
		if (h < 0 || c->nholders == (int)(sizeof(c->holders) / sizeof(c->holders[0])) ||
		    syscall(SYS_bind, h, &hs, hl) < 0 || syscall(SYS_getsockname, h, &ss, &hl) < 0) {
			if (h >= 0)
				syscall(SYS_close, h);
			return bad(c, "cannot make a closed port");
		}
		c->holders[c->nholders++] = h;
		len = hl;
	} else if (strchr(argv[2], ':')) {
		if (parse_addr(c, argv[2], v->ep->fam, &ss, &len) < 0)
			return -1;
		/* A connect to a listener's port by address still goes to it. */
		uint16_t port = ntohs(((struct sockaddr_in *)&ss)->sin_port);

		for (int i = 0; i < c->nv && !l; i++)
			if (c->v[i].type == V_SOCK && c->v[i].ep->kind == K_LISTEN &&
			    var_port(&c->v[i]) == port)
				l = &c->v[i];
	} else {
		l = need_var(c, argv[2], V_SOCK);
		if (!l || listener_addr(c, l, v->ep->fam, &ss, &len) < 0)
			return -1;
	}
	int r = connect(v->fd, (struct sockaddr *)&ss, len), e = errno;

	say_rc(c, r, e);
	if (r == 0 || e == EINPROGRESS) {
		v->ep->kind = K_CONN;
		v->ep->target = l ? l->ep : NULL;
		v->ep->local_len = sizeof(v->ep->local);
		if (getsockname(v->fd, (struct sockaddr *)&v->ep->local, &v->ep->local_len) < 0)
			v->ep->local_len = 0;
	}
	return 0;
}

static bool same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const void *aa, *ba;
	uint8_t m[16];

	if (((const struct sockaddr_in *)a)->sin_port != ((const struct sockaddr_in *)b)->sin_port)
		return false;
	/* Compare as IPv6, an IPv4 address mapped. */
	if (a->ss_family == AF_INET) {
		memset(m, 0, 10);
		m[10] = m[11] = 0xff;
		memcpy(m + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
		aa = m;
	} else {
		aa = &((const struct sockaddr_in6 *)a)->sin6_addr;
	}
	if (b->ss_family == AF_INET) {
		if (a->ss_family == AF_INET)
			return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
				      &((const struct sockaddr_in *)b)->sin_addr, 4) == 0;
		const uint8_t *x = aa;

		return memcmp(x + 12, &((const struct sockaddr_in *)b)->sin_addr, 4) == 0 &&
		       x[10] == 0xff && x[11] == 0xff;
	}
	ba = &((const struct sockaddr_in6 *)b)->sin6_addr;
	return memcmp(aa, ba, 16) == 0;
}

/* The connecting socket an accepted one is the other end of: the one
 * whose name is the accepted socket's peer, else the oldest waiting. */
static void link_accepted(struct ctx *c, struct ep *s, struct ep *l,
			  const struct sockaddr_storage *from)
{
	struct ep *first = NULL, *match = NULL;

	for (int i = 0; i < c->nep && !match; i++) {
		struct ep *e = c->eps[i];

		if (e == s || e->kind != K_CONN || e->m.peer || e->target != l)
			continue;
		if (!first)
			first = e;
		if (e->local_len && same_endpoint(&e->local, from))
			match = e;
	}
	if (!match)
		match = first;
	if (!match)
		return;
	s->m.peer = &match->m;
	match->m.peer = &s->m;
	/* What the connecting end did before: its FIN or reset is due. */
	if (match->m.dead)
		m_reset(&s->m);
	else if (match->m.shut_wr)
		s->m.fin_in = true;
}

static int do_accept(struct ctx *c, int argc, char **argv, const char *dst, bool four)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct var *l;
	int flags = 0, fd;

	if (argc < 2)
		return bad(c, "accept L / accept4 L [nonblock] [cloexec]");
	l = need_var(c, argv[1], V_SOCK);
	if (!l)
		return -1;
	if (has_word(argc, argv, "nonblock"))
		flags |= SOCK_NONBLOCK;
	if (has_word(argc, argv, "cloexec"))
		flags |= SOCK_CLOEXEC;
	memset(&ss, 0, sizeof(ss));
	fd = four ? accept4(l->fd, (struct sockaddr *)&ss, &len, flags)
		  : accept(l->fd, (struct sockaddr *)&ss, &len);
	if (fd < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	say(c, "fd+%d from ", fd - c->base);
	say_addr(c, &ss, len);
	struct ep *e = ep_new(c, ss.ss_family);

	if (!e) {
		close(fd);
		return bad(c, "too many sockets");
	}
	e->kind = K_CONN;
	link_accepted(c, e, l->ep, &ss);
	return var_add(c, dst, fd, V_SOCK, e) ? 0 : -1;
}

static int op_accept(struct ctx *c, int argc, char **argv, const char *dst)
{
	return do_accept(c, argc, argv, dst, false);
}

static int op_accept4(struct ctx *c, int argc, char **argv, const char *dst)
{
	return do_accept(c, argc, argv, dst, true);
}

static void step_text(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void step_text(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static int exec_step(struct ctx *c, const char *text);

/* pair FAM [X Y Z]: listener X, socket Y, connect Y X, Z = accept X. */
static int op_pair(struct ctx *c, int argc, char **argv, const char *dst)
{
	char s[4][64];
	const char *l = argc >= 5 ? argv[2] : "L", *cl = argc >= 5 ? argv[3] : "C",
		   *sv = argc >= 5 ? argv[4] : "S";

	(void)dst;
	if (argc != 2 && argc != 5)
		return bad(c, "pair inet|inet6 [L C S]");
	step_text(s[0], sizeof(s[0]), "%s = listener %s", l, argv[1]);
	step_text(s[1], sizeof(s[1]), "%s = socket %s", cl, argv[1]);
	step_text(s[2], sizeof(s[2]), "connect %s %s", cl, l);
	step_text(s[3], sizeof(s[3]), "%s = accept %s", sv, l);
	say(c, "(4 steps)");
	fprintf(c->out, "  %s -> %s\n", argv[0], c->res);
	c->res[0] = '\0';
	for (int i = 0; i < 4; i++)
		if (exec_step(c, s[i]) < 0)
			return -1;
	return 1;	/* printed */
}

static int op_close(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;

	(void)dst;
	if (argc != 2 || !(v = var_find(c, argv[1])))
		return bad(c, "close X (a variable)");
	int r = close(v->fd);

	say_rc(c, r, errno);
	var_drop(c, v);
	return 0;
}

static int op_shutdown(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	int how;

	(void)dst;
	if (argc != 3 || !(v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "shutdown X rd|wr|rdwr");
	if (strcmp(argv[2], "rd") == 0)
		how = SHUT_RD;
	else if (strcmp(argv[2], "wr") == 0)
		how = SHUT_WR;
	else if (strcmp(argv[2], "rdwr") == 0)
		how = SHUT_RDWR;
	else if (isdigit((unsigned char)argv[2][0]))
		how = atoi(argv[2]);	/* a bad one, for its error */
	else
		return bad(c, "shutdown X rd|wr|rdwr|NUMBER");
	int r = shutdown(v->fd, how);

	say_rc(c, r, errno);
	if (r == 0 && how <= SHUT_RDWR)
		m_shutdown(&v->ep->m, how);
	return 0;
}

/* --- sending ------------------------------------------------------------------- */

/* A send on E took less than it was given: the way to the peer is full,
 * and how much waits on which side, and so how much was sent, is the
 * stack's own until the peer drains it. */
static void set_backlog(struct ep *e)
{
	e->fuzzy = e->shifted = true;
	if (e->m.peer)
		e->m.peer->backlog = true;
}

enum { S_SEND, S_SENDTO, S_WRITE, S_WRITEV, S_SENDMSG, S_SENDFILE, S_SPLICE };

static ssize_t splice_in(int sock, const char *buf, size_t n, int *err)
{
	int p[2];
	ssize_t r = -1, w;

	/* A pipe holds 64 KiB: splice steps are kept below that. */
	if (pipe2(p, O_CLOEXEC) < 0) {
		*err = errno;
		return -1;
	}
	w = write(p[1], buf, n);
	if (w >= 0)
		r = splice(p[0], NULL, sock, NULL, (size_t)w, 0);
	*err = errno;
	close(p[0]);
	close(p[1]);
	return r;
}

static ssize_t sendfile_n(int sock, const char *buf, size_t n, int *err)
{
	int f = memfd_create("conform", MFD_CLOEXEC);
	ssize_t r = -1;

	if (f < 0 || write(f, buf, n) != (ssize_t)n) {
		*err = errno;
		if (f >= 0)
			close(f);
		return -1;
	}
	off_t off = 0;

	r = sendfile(sock, f, &off, n);
	*err = errno;
	close(f);
	return r;
}

/*
 * A data step's words, "OP X N[,N...] [flags]": the socket, and n
 * buffers of the sizes given (a list when vectored) in one allocation
 * (*buf, *total bytes) that iov describes.  -1 (after bad()) on error.
 */
static int io_args(struct ctx *c, int argc, char **argv, bool vectored, struct var **v,
		   struct iovec iov[8], int *n, int *flags, char **buf, size_t *total)
{
	size_t lens[8], off = 0;

	*total = 0;
	*flags = 0;
	if (argc < 3 || !(*v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "%s X N [flags]", argv[0]);
	if (vectored)
		*n = parse_list(c, argv[2], lens, 8);
	else
		*n = parse_size(c, argv[2], &lens[0]) < 0 ? -1 : 1;
	if (*n < 0 || parse_msgflags(c, argc - 3, argv + 3, flags) < 0)
		return -1;
	for (int i = 0; i < *n; i++)
		*total += lens[i];
	*buf = xmalloc(*total);
	for (int i = 0; i < *n; i++) {
		iov[i].iov_base = *buf + off;
		iov[i].iov_len = lens[i];
		off += lens[i];
	}
	return 0;
}

static int do_send(struct ctx *c, int argc, char **argv, int how)
{
	size_t total;
	int n, flags, e = 0;
	struct var *v;
	ssize_t r;
	struct iovec iov[8];
	char *buf;

	if (io_args(c, argc, argv, how == S_WRITEV || how == S_SENDMSG, &v, iov, &n, &flags,
		    &buf, &total) < 0)
		return -1;
	pat_fill(v->ep->id, v->ep->m.tx, buf, total);
	switch (how) {
	case S_SEND:
		r = send(v->fd, buf, total, flags);
		break;
	case S_SENDTO:
		r = sendto(v->fd, buf, total, flags, NULL, 0);
		break;
	case S_WRITE:
		r = write(v->fd, buf, total);
		break;
	case S_WRITEV:
		r = writev(v->fd, iov, n);
		break;
	case S_SENDMSG: {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };

		r = sendmsg(v->fd, &mh, flags);
		break;
	}
	case S_SENDFILE:
		r = sendfile_n(v->fd, buf, total, &e);
		errno = e;
		break;
	default:
		r = splice_in(v->fd, buf, total, &e);
		errno = e;
		break;
	}
	e = errno;
	free(buf);
	if (r < 0) {
		say_rc(c, -1, e);
		return 0;
	}
	say_moved(c, v->ep, (uint64_t)r, total);
	m_send(&v->ep->m, (uint64_t)r);
	if ((uint64_t)r < total)
		set_backlog(v->ep);
	return 0;
}

/* --- receiving ------------------------------------------------------------------- */

enum { R_RECV, R_RECVFROM, R_READ, R_READV, R_RECVMSG, R_SPLICE };

static ssize_t splice_out(int sock, char *buf, size_t n, int flags, int *err)
{
	int p[2];
	ssize_t r;

	if (pipe2(p, O_CLOEXEC) < 0) {
		*err = errno;
		return -1;
	}
	r = splice(sock, NULL, p[1], NULL, n, (unsigned)flags);
	*err = errno;
	if (r > 0 && read(p[0], buf, (size_t)r) != r) {
		*err = EIO;
		r = -1;
	}
	close(p[0]);
	close(p[1]);
	return r;
}

static int do_recv(struct ctx *c, int argc, char **argv, int how)
{
	size_t total;
	int n, flags, e = 0;
	struct var *v;
	ssize_t r;
	struct sockaddr_storage from;
	socklen_t fromlen = sizeof(from);
	struct msghdr mh = { 0 };
	struct iovec iov[8];
	char *buf;

	if (io_args(c, argc, argv, how == R_READV || how == R_RECVMSG, &v, iov, &n, &flags,
		    &buf, &total) < 0)
		return -1;
	memset(buf, 0, total);
	memset(&from, 0xa5, sizeof(from));
	switch (how) {
	case R_RECV:
		r = recv(v->fd, buf, total, flags);
		break;
	case R_RECVFROM:
		r = recvfrom(v->fd, buf, total, flags, (struct sockaddr *)&from, &fromlen);
		break;
	case R_READ:
		r = read(v->fd, buf, total);
		break;
	case R_READV:
		r = readv(v->fd, iov, n);
		break;
	case R_RECVMSG:
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)n;
		mh.msg_name = &from;
		mh.msg_namelen = sizeof(from);
		r = recvmsg(v->fd, &mh, flags);
		break;
	default:
		r = splice_out(v->fd, buf, total, flags & MSG_DONTWAIT ? SPLICE_F_NONBLOCK : 0, &e);
		errno = e;
		break;
	}
	e = errno;
	if (r < 0) {
		say_rc(c, -1, e);
	} else {
		say_moved(c, v->ep, (uint64_t)r, total);
		if (r == 0 && total > 0)
			say(c, " EOF");
		/* MSG_TRUNC on TCP discards: nothing to look at. */
		if (!(flags & MSG_TRUNC))
			say_data(c, v->ep, v->ep->m.rx, buf, (size_t)r > total ? total : (size_t)r);
		if (!(flags & MSG_PEEK))
			m_recv(&v->ep->m, (uint64_t)r);
		if (how == R_RECVFROM)
			say(c, " fromlen=%u", fromlen);
		if (how == R_RECVMSG) {
			char fb[96];

			say(c, " namelen=%u flags=%s", mh.msg_namelen,
			    msgflag_names(mh.msg_flags, fb, sizeof(fb)));
		}
	}
	free(buf);
	return 0;
}

/* The data calls, one step each: the sending and receiving families
 * differ only in the call they make (how); some take exactly one size. */
static const struct {
	const char *name;
	bool out;
	int how;
	const char *usage;	/* exactly "X N": its usage; else NULL */
} io_ops[] = {
	{ "send", true, S_SEND, NULL },
	{ "sendto", true, S_SENDTO, NULL },
	{ "write", true, S_WRITE, "write X N" },
	{ "writev", true, S_WRITEV, "writev X N,N,..." },
	{ "sendmsg", true, S_SENDMSG, NULL },
	{ "sendfile", true, S_SENDFILE, "sendfile X N" },
	{ "splice_to", true, S_SPLICE, "splice_to X N (N < 64K)" },
	{ "recv", false, R_RECV, NULL },
	{ "recvfrom", false, R_RECVFROM, NULL },
	{ "read", false, R_READ, "read X N" },
	{ "readv", false, R_READV, "readv X N,N,..." },
	{ "recvmsg", false, R_RECVMSG, NULL },
	{ "splice_from", false, R_SPLICE, NULL },
};

static int op_io(struct ctx *c, int argc, char **argv, const char *dst)
{
	(void)dst;
	for (size_t i = 0; i < sizeof(io_ops) / sizeof(io_ops[0]); i++) {
		if (strcmp(io_ops[i].name, argv[0]) != 0)
			continue;
		if (io_ops[i].usage && argc != 3)
			return bad(c, "%s", io_ops[i].usage);
		return io_ops[i].out ? do_send(c, argc, argv, io_ops[i].how)
				     : do_recv(c, argc, argv, io_ops[i].how);
	}
	return bad(c, "unknown data step '%s'", argv[0]);
}

/* Read until N bytes, EOF or an error, blocking. */
static void read_loop(int fd, char *buf, uint64_t want, uint64_t *got, int *err)
{
	*err = 0;
	while (*got < want) {
		size_t chunk = want - *got > (1u << 20) ? (1u << 20) : (size_t)(want - *got);
		ssize_t r = recv(fd, buf, chunk, 0);

		if (r < 0 && errno == EINTR && !wd_fired)
			continue;
		if (r <= 0) {
			*err = r == 0 ? -1 : errno;
			return;
		}
		buf += r;
		*got += (uint64_t)r;
	}
}

static void say_end(struct ctx *c, int err, bool stuck)
{
	if (err == -1)
		say(c, " then EOF");
	else if (err)
		say(c, " then -1 %s", errname(err));
	if (stuck)
		say(c, " (stuck: the watchdog ended it)");
}

static int op_recvall(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	size_t want;
	uint64_t got = 0;
	int err;

	(void)dst;
	if (argc != 3 || !(v = need_var(c, argv[1], V_SOCK)) || parse_size(c, argv[2], &want) < 0)
		return bad(c, "recvall X N");
	char *buf = xmalloc(want);

	read_loop(v->fd, buf, want, &got, &err);
	say_count(c, v->ep, got);
	say_data(c, v->ep, v->ep->m.rx, buf, (size_t)got);
	say_end(c, err, wd_fired);
	m_recv(&v->ep->m, got);
	free(buf);
	return 0;
}

/* Read what the peer sent, waiting for it within the step's limit: the
 * count of a fill is the stack's own, its end is not. */
static int op_drain(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	uint64_t got = 0, start;
	int err = 0;
	long bad_at = -1;
	const size_t chunk = 256 << 10;

	(void)dst;
	if (argc != 2 || !(v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "drain X");
	char *buf = xmalloc(chunk);

	start = v->ep->m.rx;
	while (m_pending(&v->ep->m) > 0 && !wd_fired) {
		struct pollfd p = { .fd = v->fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 100) == 0)
			continue;
		r = recv(v->fd, buf, chunk, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0) {
			err = r == 0 ? -1 : errno;
			break;
		}
		if (bad_at < 0 && peer_of(v->ep)) {
			long b = pat_check(peer_of(v->ep)->id, v->ep->m.rx, buf, (size_t)r);

			if (b >= 0)
				bad_at = (long)(v->ep->m.rx - start) + b;
		}
		m_recv(&v->ep->m, (uint64_t)r);
		got += (uint64_t)r;
	}
	free(buf);
	say_count(c, v->ep, got);
	if (!peer_of(v->ep))
		say(c, " (from no known peer)");
	else if (bad_at >= 0)
		say(c, " data WRONG from byte %ld", bad_at);
	else if (got)
		say(c, " data ok");
	say_end(c, err, wd_fired);
	/* All of it read: counts are the model's again. */
	if (m_pending(&v->ep->m) == 0 && peer_of(v->ep))
		((struct ep *)v->ep->m.peer)->fuzzy = false;
	return 0;
}

/* Send without blocking until the stack takes no more: back-pressure.
 * How much it took is the stack's own; "fill X BOUND" says whether it
 * stayed within BOUND. */
/* fill's EAGAIN holds once no room comes back within this (times
 * env.slow): a stack whose sends complete after the call that made them
 * (SDP on siw in the emulated guest: a few KiB still in flight when the
 * EAGAIN came) frees room a moment later, which poll then reported where
 * TCP on loopback, whose acknowledgements are immediate, had none. */
#define FILL_SETTLE_MS 20

static bool room_comes_back(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	return poll(&p, 1, FILL_SETTLE_MS * env.slow) == 1 && (p.revents & POLLOUT);
}

static int op_fill(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	size_t bound = 0;
	uint64_t total = 0;
	int err = 0, again = 0;
	const size_t chunk = 64 << 10;

	(void)dst;
	if (argc < 2 || argc > 3 || !(v = need_var(c, argv[1], V_SOCK)) ||
	    (argc == 3 && parse_size(c, argv[2], &bound) < 0))
		return bad(c, "fill X [BOUND]");
	char *buf = xmalloc(chunk);

	while (total < BIG) {
		pat_fill(v->ep->id, v->ep->m.tx, buf, chunk);
		ssize_t r = send(v->fd, buf, chunk, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (r < 0) {
			err = errno;
			/* (A POLLOUT that no send can use ends it too: 100 tries.) */
			if (err == EAGAIN && ++again <= 100 && room_comes_back(v->fd)) {
				err = 0;
				continue;
			}
			break;
		}
		m_send(&v->ep->m, (uint64_t)r);
		total += (uint64_t)r;
	}
	free(buf);
	set_backlog(v->ep);
	if (err)
		say(c, "-1 %s", errname(err));
	else
		say(c, "no back-pressure within %u MiB", BIG >> 20);
	if (bound)
		say(c, total <= bound ? " within %s" : " beyond %s", argv[2]);
	else if (total == 0)
		say(c, " at once");
	return 0;
}

/* --- in the background ---------------------------------------------------------- */

static void *bg_run(void *arg)
{
	struct bg *b = arg;
	size_t chunk = b->want > (1u << 20) ? (1u << 20) : (size_t)b->want;
	char *buf = xmalloc(chunk);

	wd_arm(STEP_MS * env.slow * 4);
	b->bad = -1;
	if (b->send) {
		while (b->done < b->want) {
			size_t n = b->want - b->done < chunk ? (size_t)(b->want - b->done) : chunk;

			pat_fill(b->id, b->off + b->done, buf, n);
			ssize_t r = send(b->fd, buf, n, MSG_NOSIGNAL);

			if (r < 0 && errno == EINTR && !wd_fired)
				continue;
			if (r < 0) {
				b->err = errno;
				break;
			}
			b->done += (uint64_t)r;
		}
	} else {
		while (b->done < b->want) {
			uint64_t got = 0;
			size_t n = b->want - b->done < chunk ? (size_t)(b->want - b->done) : chunk;

			read_loop(b->fd, buf, n, &got, &b->err);
			long x = b->peer_id ? pat_check(b->peer_id, b->off + b->done, buf, (size_t)got) : -1;

			if (x >= 0 && b->bad < 0)
				b->bad = (long)b->done + x;
			b->done += got;
			if (b->err)
				break;
		}
	}
	b->stuck = wd_fired;
	wd_arm(0);
	wd_done();
	free(buf);
	return NULL;
}

static int do_bg(struct ctx *c, int argc, char **argv, bool send)
{
	struct var *v;
	size_t want;

	if (argc != 3 || !(v = need_var(c, argv[1], V_SOCK)) || parse_size(c, argv[2], &want) < 0)
		return bad(c, "%s X N", argv[0]);
	if (v->bg.on || v->ep->busy)
		return bad(c, "%s: a background step runs on it already", argv[1]);
	memset(&v->bg, 0, sizeof(v->bg));
	v->bg.send = send;
	v->bg.fd = v->fd;
	v->bg.want = want;
	v->bg.id = v->ep->id;
	v->bg.peer_id = peer_of(v->ep) ? peer_of(v->ep)->id : 0;
	v->bg.off = send ? v->ep->m.tx : v->ep->m.rx;
	if (pthread_create(&v->bg.th, NULL, bg_run, &v->bg) != 0)
		return bad(c, "pthread_create failed");
	v->bg.on = true;
	v->ep->busy = true;
	say(c, "started");
	return 0;
}

static int op_bgsend(struct ctx *c, int argc, char **argv, const char *dst)
{
	(void)dst;
	return do_bg(c, argc, argv, true);
}

static int op_bgrecv(struct ctx *c, int argc, char **argv, const char *dst)
{
	(void)dst;
	return do_bg(c, argc, argv, false);
}

static void bg_join(struct ctx *c, struct var *v, bool quiet)
{
	pthread_join(v->bg.th, NULL);
	v->bg.on = false;
	v->ep->busy = false;
	if (v->bg.send)
		m_send(&v->ep->m, v->bg.done);
	else
		m_recv(&v->ep->m, v->bg.done);
	if (quiet)
		return;
	say_count(c, v->ep, v->bg.done);
	if (!v->bg.send && v->bg.done)
		say(c, v->bg.bad < 0 ? " data ok" : " data WRONG from byte %ld", v->bg.bad);
	say_end(c, v->bg.err, v->bg.stuck);
}

static int op_join(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;

	(void)dst;
	if (argc != 2 || !(v = need_var(c, argv[1], V_SOCK)) || !v->bg.on)
		return bad(c, "join X (after bgsend or bgrecv X)");
	bg_join(c, v, false);
	return 0;
}

/* --- options ------------------------------------------------------------------- */

enum { T_INT, T_ERR, T_LINGER, T_TIMEO, T_INFO, T_STR };

static const struct opt {
	const char *name;
	int level, opt, type;
} opts[] = {
	{ "SO_REUSEADDR", SOL_SOCKET, SO_REUSEADDR, T_INT },
	{ "SO_REUSEPORT", SOL_SOCKET, SO_REUSEPORT, T_INT },
	{ "SO_KEEPALIVE", SOL_SOCKET, SO_KEEPALIVE, T_INT },
	{ "SO_SNDBUF", SOL_SOCKET, SO_SNDBUF, T_INT },
	{ "SO_RCVBUF", SOL_SOCKET, SO_RCVBUF, T_INT },
	{ "SO_RCVLOWAT", SOL_SOCKET, SO_RCVLOWAT, T_INT },
	{ "SO_SNDLOWAT", SOL_SOCKET, SO_SNDLOWAT, T_INT },
	{ "SO_TYPE", SOL_SOCKET, SO_TYPE, T_INT },
	{ "SO_DOMAIN", SOL_SOCKET, SO_DOMAIN, T_INT },
	{ "SO_PROTOCOL", SOL_SOCKET, SO_PROTOCOL, T_INT },
	{ "SO_ACCEPTCONN", SOL_SOCKET, SO_ACCEPTCONN, T_INT },
	{ "SO_ERROR", SOL_SOCKET, SO_ERROR, T_ERR },
	{ "SO_OOBINLINE", SOL_SOCKET, SO_OOBINLINE, T_INT },
	{ "SO_PRIORITY", SOL_SOCKET, SO_PRIORITY, T_INT },
	{ "SO_DONTROUTE", SOL_SOCKET, SO_DONTROUTE, T_INT },
	{ "SO_BROADCAST", SOL_SOCKET, SO_BROADCAST, T_INT },
	{ "SO_LINGER", SOL_SOCKET, SO_LINGER, T_LINGER },
	{ "SO_RCVTIMEO", SOL_SOCKET, SO_RCVTIMEO, T_TIMEO },
	{ "SO_SNDTIMEO", SOL_SOCKET, SO_SNDTIMEO, T_TIMEO },
	{ "TCP_NODELAY", IPPROTO_TCP, TCP_NODELAY, T_INT },
	{ "TCP_CORK", IPPROTO_TCP, TCP_CORK, T_INT },
	{ "TCP_KEEPIDLE", IPPROTO_TCP, TCP_KEEPIDLE, T_INT },
	{ "TCP_KEEPINTVL", IPPROTO_TCP, TCP_KEEPINTVL, T_INT },
	{ "TCP_KEEPCNT", IPPROTO_TCP, TCP_KEEPCNT, T_INT },
	{ "TCP_MAXSEG", IPPROTO_TCP, TCP_MAXSEG, T_INT },
	{ "TCP_QUICKACK", IPPROTO_TCP, TCP_QUICKACK, T_INT },
	{ "TCP_USER_TIMEOUT", IPPROTO_TCP, TCP_USER_TIMEOUT, T_INT },
	{ "TCP_DEFER_ACCEPT", IPPROTO_TCP, TCP_DEFER_ACCEPT, T_INT },
	{ "TCP_SYNCNT", IPPROTO_TCP, TCP_SYNCNT, T_INT },
	{ "TCP_LINGER2", IPPROTO_TCP, TCP_LINGER2, T_INT },
	{ "TCP_WINDOW_CLAMP", IPPROTO_TCP, TCP_WINDOW_CLAMP, T_INT },
	{ "TCP_NOTSENT_LOWAT", IPPROTO_TCP, TCP_NOTSENT_LOWAT, T_INT },
	{ "TCP_INFO", IPPROTO_TCP, TCP_INFO, T_INFO },
	{ "TCP_CONGESTION", IPPROTO_TCP, TCP_CONGESTION, T_STR },
	{ "IPV6_V6ONLY", IPPROTO_IPV6, IPV6_V6ONLY, T_INT },
	{ "IPV6_TCLASS", IPPROTO_IPV6, IPV6_TCLASS, T_INT },
	{ "IP_TOS", IPPROTO_IP, IP_TOS, T_INT },
	{ "IP_TTL", IPPROTO_IP, IP_TTL, T_INT },
};

static const struct opt *find_opt(struct ctx *c, const char *name)
{
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (strcmp(opts[i].name, name) == 0)
			return &opts[i];
	bad(c, "option '%s'", name);
	return NULL;
}

static const char *tcp_state_name(int st)
{
	static const char *n[] = { "0",	       "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
				   "FIN_WAIT1", "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
				   "CLOSE_WAIT", "LAST_ACK",   "LISTEN",    "CLOSING" };

	return st >= 0 && st < (int)(sizeof(n) / sizeof(n[0])) ? n[st] : "?";
}

static int op_setopt(struct ctx *c, int argc, char **argv, const char *dst)
{
	const struct opt *o;
	struct var *v;
	int r;

	(void)dst;
	if (argc != 4 || !(v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "setopt X NAME VALUE");
	if (!(o = find_opt(c, argv[2])))
		return -1;
	switch (o->type) {
	case T_LINGER: {
		struct linger l = { 0, 0 };

		if (sscanf(argv[3], "%d,%d", &l.l_onoff, &l.l_linger) != 2)
			return bad(c, "SO_LINGER ON,SECS");
		r = setsockopt(v->fd, o->level, o->opt, &l, sizeof(l));
		if (r == 0)
			v->ep->m.linger0 = l.l_onoff && l.l_linger == 0;
		break;
	}
	case T_TIMEO: {
		int ms = atoi(argv[3]);
		struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

		r = setsockopt(v->fd, o->level, o->opt, &tv, sizeof(tv));
		break;
	}
	case T_STR:
		r = setsockopt(v->fd, o->level, o->opt, argv[3], (socklen_t)strlen(argv[3]));
		break;
	case T_INT:
		r = setint(v->fd, o->level, o->opt, atoi(argv[3]));
		break;
	default:
		return bad(c, "%s cannot be set", o->name);
	}
	say_rc(c, r, errno);
	return 0;
}

static int op_getopt(struct ctx *c, int argc, char **argv, const char *dst)
{
	const struct opt *o;
	struct var *v;
	union {
		int i;
		struct linger l;
		struct timeval tv;
		struct tcp_info ti;
		char s[64];
	} u;
	socklen_t len = sizeof(u);
	int r;

	(void)dst;
	if (argc != 3 || !(v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "getopt X NAME");
	if (!(o = find_opt(c, argv[2])))
		return -1;
	memset(&u, 0, sizeof(u));
	if (o->type == T_INT || o->type == T_ERR)
		len = sizeof(int);
	r = getsockopt(v->fd, o->level, o->opt, &u, &len);
	if (r < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	switch (o->type) {
	case T_INT:
		say(c, "%d", u.i);
		break;
	case T_ERR:
		say(c, "%s", errname(u.i));
		break;
	case T_LINGER:
		say(c, "%d,%d", u.l.l_onoff, u.l.l_linger);
		break;
	case T_TIMEO:
		say(c, "%ldms", (long)u.tv.tv_sec * 1000 + (long)u.tv.tv_usec / 1000);
		break;
	case T_INFO:
		/* The rest is the stack's own measurement (RTT, windows). */
		say(c, "state %s", tcp_state_name(u.ti.tcpi_state));
		break;
	default:
		say(c, "%.*s", (int)strnlen(u.s, len), u.s);
		break;
	}
	if (len != sizeof(int) && (o->type == T_INT || o->type == T_ERR))
		say(c, " len=%u", len);
	return 0;
}

static int op_ioctl(struct ctx *c, int argc, char **argv, const char *dst)
{
	static const struct {
		const char *n;
		unsigned long req;
	} t[] = { { "FIONREAD", FIONREAD },	{ "SIOCINQ", SIOCINQ },
		  { "SIOCOUTQ", SIOCOUTQ },	{ "SIOCOUTQNSD", SIOCOUTQNSD },
		  { "SIOCATMARK", SIOCATMARK }, { "FIONBIO", FIONBIO } };
	struct var *v;
	size_t i;
	int val, r;

	(void)dst;
	if (argc < 3 || !(v = var_find(c, argv[1])))
		return bad(c, "ioctl X REQUEST [VALUE]");
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(t[i].n, argv[2]) == 0)
			break;
	if (i == sizeof(t) / sizeof(t[0]))
		return bad(c, "ioctl '%s'", argv[2]);
	val = argc > 3 ? atoi(argv[3]) : 0;
	r = ioctl(v->fd, t[i].req, &val);
	if (r < 0)
		say_rc(c, -1, errno);
	else if (t[i].req == FIONBIO)
		say(c, "0");
	else if (!v->ep)
		say(c, "%d", val);
	else if ((t[i].req == SIOCOUTQ || t[i].req == SIOCOUTQNSD) && v->ep->fuzzy)
		say(c, "%s", val ? ">0" : "0");	/* how much waits is the stack's own */
	else
		say_count(c, v->ep, (uint64_t)val);
	return 0;
}

static int op_fcntl(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	int r;

	(void)dst;
	if (argc < 3 || !(v = var_find(c, argv[1])))
		return bad(c, "fcntl X getfl|setfl [nonblock]|getfd|setfd [cloexec]");
	if (strcmp(argv[2], "getfl") == 0) {
		r = fcntl(v->fd, F_GETFL);
		if (r < 0)
			say_rc(c, -1, errno);
		else
			say(c, "%s%s%s", (r & O_ACCMODE) == O_RDWR ? "O_RDWR" : "O_ACC?",
			    r & O_NONBLOCK ? "|O_NONBLOCK" : "",
			    r & ~(O_ACCMODE | O_NONBLOCK) ? "|other" : "");
	} else if (strcmp(argv[2], "setfl") == 0) {
		int fl = fcntl(v->fd, F_GETFL);

		fl = has_word(argc, argv, "nonblock") ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
		say_ret(c, fcntl(v->fd, F_SETFL, fl));
	} else if (strcmp(argv[2], "getfd") == 0) {
		r = fcntl(v->fd, F_GETFD);
		if (r < 0)
			say_rc(c, -1, errno);
		else
			say(c, "%s", r & FD_CLOEXEC ? "FD_CLOEXEC" : "0");
	} else if (strcmp(argv[2], "setfd") == 0) {
		say_ret(c, fcntl(v->fd, F_SETFD, has_word(argc, argv, "cloexec") ? FD_CLOEXEC : 0));
	} else {
		return bad(c, "fcntl X getfl|setfl [nonblock]|getfd|setfd [cloexec]");
	}
	return 0;
}

/* dup, dup2 X N, dup3 X N [cloexec], dupfd X N [cloexec]; N counts from
 * the scenario's first fd. */
static int op_dup(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v, *old;
	int fd, target = -1;

	if (argc < 2 || !(v = var_find(c, argv[1])))
		return bad(c, "%s X [N] [cloexec]", argv[0]);
	if (strcmp(argv[0], "dup") != 0) {
		if (argc < 3)
			return bad(c, "%s X N [cloexec]", argv[0]);
		target = c->base + atoi(argv[2]);
	}
	if (strcmp(argv[0], "dup") == 0)
		fd = dup(v->fd);
	else if (strcmp(argv[0], "dup2") == 0)
		fd = dup2(v->fd, target);
	else if (strcmp(argv[0], "dup3") == 0)
		fd = dup3(v->fd, target, has_word(argc, argv, "cloexec") ? O_CLOEXEC : 0);
	else
		fd = fcntl(v->fd, has_word(argc, argv, "cloexec") ? F_DUPFD_CLOEXEC : F_DUPFD, target);
	if (fd < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	say(c, "fd+%d", fd - c->base);
	if (fd == v->fd)
		return bad(c, "%s onto itself: name it once", argv[0]);
	/* dup2 onto a variable's fd closed what it named. */
	for (int i = 0; i < c->nv; i++)
		if (c->v[i].fd == fd) {
			say(c, " (closed %s)", c->v[i].name);
			var_drop(c, &c->v[i]);
			break;
		}
	v = var_find(c, argv[1]);
	old = var_add(c, dst, fd, v->type, v->ep);
	if (!old)
		return -1;
	if (v->type == V_EPOLL)
		old->slot = v->slot;
	return 0;
}

static int op_name(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct var *v;
	int r;

	(void)dst;
	if (argc != 2 || !(v = need_var(c, argv[1], V_SOCK)))
		return bad(c, "%s X", argv[0]);
	memset(&ss, 0, sizeof(ss));
	r = strcmp(argv[0], "name") == 0 ? getsockname(v->fd, (struct sockaddr *)&ss, &len)
					 : getpeername(v->fd, (struct sockaddr *)&ss, &len);
	if (r < 0)
		say_rc(c, -1, errno);
	else
		say_addr(c, &ss, len);
	return 0;
}

/* poll X [EVENTS [MS]]: wait until all of EVENTS are reported (or MS
 * pass), then print everything poll reports. */
static int op_poll(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	int want = 0;
	char buf[160];

	(void)dst;
	if (argc < 2 || argc > 4 || !(v = var_find(c, argv[1])) ||
	    (argc > 2 && parse_events(c, argv[2], &want, false) < 0))
		return bad(c, "poll X [EVENTS [MS]]");
	int64_t end = now_us() + (int64_t)wait_ms(argc, argv, 3, want ? WAIT_MS : 0) * 1000;
	bool timeout = false;
	struct pollfd p = { .fd = v->fd, .events = (short)(want ? want : POLLIN) };

	while (want) {
		int64_t left = (end - now_us()) / 1000;
		int r;

		p.revents = 0;
		r = poll(&p, 1, left > 0 ? (int)left : 0);
		if (r < 0 && errno != EINTR) {
			say_rc(c, -1, errno);
			return 0;
		}
		if ((p.revents & want) == want)
			break;
		if (now_us() >= end || wd_fired) {
			timeout = true;
			break;
		}
		if (r > 0)	/* some of them: look again soon */
			nap_us(500);
	}
	p.events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP;
	p.revents = 0;
	say_ret(c, poll(&p, 1, 0));
	say(c, " %s%s", pollname(p.revents, buf, sizeof(buf)), timeout ? " (timeout)" : "");
	return 0;
}

/* select X [r][w][e] [MS]: the same with select(). */
static int op_select(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *v;
	const char *w = argc > 2 ? argv[2] : "";

	(void)dst;
	if (argc < 2 || argc > 4 || !(v = var_find(c, argv[1])) || v->fd >= FD_SETSIZE ||
	    strspn(w, "rwe") != strlen(w))
		return bad(c, "select X [r][w][e] [MS]");
	bool wr = strchr(w, 'r'), ww = strchr(w, 'w'), we = strchr(w, 'e'), timeout = false;
	int64_t end = now_us() + (int64_t)wait_ms(argc, argv, 3, *w ? WAIT_MS : 0) * 1000;
	fd_set r, wt, e;
	int n;

	for (;;) {
		int64_t left = (end - now_us());
		struct timeval tv = { 0, 0 };

		if (left > 0) {
			tv.tv_sec = left / 1000000;
			tv.tv_usec = left % 1000000;
		}
		FD_ZERO(&r);
		FD_ZERO(&wt);
		FD_ZERO(&e);
		FD_SET(v->fd, &r);
		FD_SET(v->fd, &wt);
		FD_SET(v->fd, &e);
		n = select(v->fd + 1, wr ? &r : NULL, ww ? &wt : NULL, we ? &e : NULL,
			   *w ? &tv : &(struct timeval){ 0, 0 });
		if (n < 0 && errno != EINTR) {
			say_rc(c, -1, errno);
			return 0;
		}
		if (n >= 0 && (!wr || FD_ISSET(v->fd, &r)) && (!ww || FD_ISSET(v->fd, &wt)) &&
		    (!we || FD_ISSET(v->fd, &e)))
			break;
		if (now_us() >= end || wd_fired) {
			timeout = true;
			break;
		}
		nap_us(500);
	}
	/* What is ready of all three, at once. */
	FD_ZERO(&r);
	FD_ZERO(&wt);
	FD_ZERO(&e);
	FD_SET(v->fd, &r);
	FD_SET(v->fd, &wt);
	FD_SET(v->fd, &e);
	n = select(v->fd + 1, &r, &wt, &e, &(struct timeval){ 0, 0 });
	say_rc(c, n, errno);
	say(c, " %s%s%s%s", FD_ISSET(v->fd, &r) ? "r" : "", FD_ISSET(v->fd, &wt) ? "w" : "",
	    FD_ISSET(v->fd, &e) ? "e" : "", timeout ? " (timeout)" : "");
	return 0;
}

static int op_epoll(struct ctx *c, int argc, char **argv, const char *dst)
{
	int fd;

	fd = epoll_create1(has_word(argc, argv, "cloexec") ? EPOLL_CLOEXEC : 0);
	if (fd < 0) {
		say_rc(c, -1, errno);
		return 0;
	}
	say(c, "fd+%d", fd - c->base);
	return var_add(c, dst, fd, V_EPOLL, NULL) ? 0 : -1;
}

static int op_epoll_ctl(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct var *e, *v;
	int op, ev = 0;

	(void)dst;
	if (argc < 4 || !(e = need_var(c, argv[1], V_EPOLL)) || !(v = var_find(c, argv[3])) ||
	    (argc > 4 && parse_events(c, argv[4], &ev, true) < 0))
		return bad(c, "epoll_ctl E add|mod|del X [EVENTS]");
	if (strcmp(argv[2], "add") == 0)
		op = EPOLL_CTL_ADD;
	else if (strcmp(argv[2], "mod") == 0)
		op = EPOLL_CTL_MOD;
	else if (strcmp(argv[2], "del") == 0)
		op = EPOLL_CTL_DEL;
	else
		return bad(c, "epoll_ctl E add|mod|del X [EVENTS]");
	struct epoll_event ee = { .events = (uint32_t)ev, .data.u64 = (uint64_t)v->slot };

	say_ret(c, epoll_ctl(e->fd, op, v->fd, &ee));
	return 0;
}

/* epoll_wait E [MS]: one call; what it reports, by name, in name order. */
static int op_epoll_wait(struct ctx *c, int argc, char **argv, const char *dst)
{
	struct epoll_event ev[16];
	struct var *e;
	int n;

	(void)dst;
	if (argc < 2 || argc > 3 || !(e = need_var(c, argv[1], V_EPOLL)))
		return bad(c, "epoll_wait E [MS]");
	do
		n = epoll_wait(e->fd, ev, 16, wait_ms(argc, argv, 2, 0));
	while (n < 0 && errno == EINTR && !wd_fired);
	say_rc(c, n, errno);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (strcmp(c->names[ev[j].data.u64], c->names[ev[i].data.u64]) < 0) {
				struct epoll_event t = ev[i];

				ev[i] = ev[j];
				ev[j] = t;
			}
	for (int i = 0; i < n; i++) {
		char buf[160];

		say(c, " %s:%s", c->names[ev[i].data.u64], epollname(ev[i].events, buf, sizeof(buf)));
	}
	return 0;
}

static int op_settle(struct ctx *c, int argc, char **argv, const char *dst)
{
	(void)argc;
	(void)argv;
	(void)dst;
	say(c, "ok");	/* done before every step; an explicit one prints too */
	return 0;
}

static int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (fd >= 0)
		close(fd);
	return fd;
}

static int op_fdbase(struct ctx *c, int argc, char **argv, const char *dst)
{
	(void)argc;
	(void)argv;
	(void)dst;
	say(c, "lowest free fd %d (the scenario's first was %d)", lowest_free_fd(), c->base);
	return 0;
}

static const struct {
	const char *name;
	op_fn fn;
	bool assigns;
} ops[] = {
	{ "socket", op_socket, true },	     { "listener", op_listener, true },
	{ "bind", op_bind, false },	     { "listen", op_listen, false },
	{ "connect", op_connect, false },    { "accept", op_accept, true },
	{ "accept4", op_accept4, true },     { "pair", op_pair, false },
	{ "close", op_close, false },	     { "shutdown", op_shutdown, false },
	{ "send", op_io, false },	     { "sendto", op_io, false },
	{ "write", op_io, false },	     { "writev", op_io, false },
	{ "sendmsg", op_io, false },	     { "sendfile", op_io, false },
	{ "splice_to", op_io, false },	     { "recv", op_io, false },
	{ "recvfrom", op_io, false },	     { "read", op_io, false },
	{ "readv", op_io, false },	     { "recvmsg", op_io, false },
	{ "splice_from", op_io, false },     { "recvall", op_recvall, false },
	{ "drain", op_drain, false },	     { "fill", op_fill, false },
	{ "bgsend", op_bgsend, false },	     { "bgrecv", op_bgrecv, false },
	{ "join", op_join, false },	     { "setopt", op_setopt, false },
	{ "getopt", op_getopt, false },	     { "ioctl", op_ioctl, false },
	{ "fcntl", op_fcntl, false },	     { "dup", op_dup, true },
	{ "dup2", op_dup, true },	     { "dup3", op_dup, true },
	{ "dupfd", op_dup, true },	     { "name", op_name, false },
	{ "peer", op_name, false },	     { "poll", op_poll, false },
	{ "select", op_select, false },	     { "epoll", op_epoll, true },
	{ "epoll_ctl", op_epoll_ctl, false }, { "epoll_wait", op_epoll_wait, false },
	{ "settle", op_settle, false },	     { "fdbase", op_fdbase, false },
};

/* name's "X = ..." step failed (unmade) or made it: the list follows. */
static void unmade_note(struct ctx *c, const char *name, bool unmade)
{
	for (int u = 0; u < c->nunmade; u++)
		if (strcmp(c->unmade[u], name) == 0) {
			if (!unmade)
				memcpy(c->unmade[u], c->unmade[--c->nunmade], sizeof(c->unmade[u]));
			return;
		}
	if (unmade && c->nunmade < (int)(sizeof(c->unmade) / sizeof(c->unmade[0])))
		snprintf(c->unmade[c->nunmade++], sizeof(c->unmade[0]), "%s", name);
}

/* [X =] [timed MS] [some] OP ARGS... */
static int exec_step(struct ctx *c, const char *text)
{
	char buf[512], *tok[MAXTOK];
	int n, timed = -1, r;
	const char *dst = NULL;
	char **argv;
	size_t i;

	snprintf(buf, sizeof(buf), "%s", text);
	n = tokenize(buf, tok, MAXTOK);
	if (n < 1)
		return bad(c, "too many words");
	argv = tok;
	if (n >= 3 && strcmp(tok[1], "=") == 0) {
		dst = tok[0];
		argv += 2;
		n -= 2;
	}
	if (n >= 3 && strcmp(argv[0], "timed") == 0) {
		timed = atoi(argv[1]);
		argv += 2;
		n -= 2;
	}
	c->some = n >= 2 && strcmp(argv[0], "some") == 0;
	if (c->some) {
		argv++;
		n--;
	}
	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strcmp(ops[i].name, argv[0]) == 0)
			break;
	if (i == sizeof(ops) / sizeof(ops[0]))
		return bad(c, "unknown step '%s'", argv[0]);
	if (ops[i].assigns != (dst != NULL))
		return bad(c, ops[i].assigns ? "'%s' needs 'X = %s ...'" : "'%s' assigns nothing",
			   argv[0], argv[0]);
	for (int k = 1; k < n; k++)
		for (int u = 0; u < c->nunmade; u++)
			if (strcmp(argv[k], c->unmade[u]) == 0) {
				fprintf(c->out, "  %s -> not run: %s was not made\n", text, argv[k]);
				return 0;
			}
	settle(c);
	c->res[0] = '\0';
	int sp = sigpipes;
	int64_t t0 = now_us();

	wd_arm((STEP_MS + (timed > 0 ? timed : 0)) * env.slow);
	r = ops[i].fn(c, n, argv, dst);
	wd_arm(0);
	if (r < 0)
		return -1;
	if (dst)
		unmade_note(c, dst, var_find(c, dst) == NULL);
	if (r > 0)
		return 0;	/* printed its own */
	if (timed >= 0)
		say(c, now_us() - t0 >= (int64_t)timed * 500 ? " [waited]" : " [at once]");
	if (sigpipes != sp)
		say(c, " +SIGPIPE");
	if (wd_fired)
		say(c, " (stuck: the watchdog interrupted it)");
	fprintf(c->out, "  %s -> %s\n", text, c->res);
	return 0;
}

static bool needs_met(const struct scenario *sc, char *why, size_t len)
{
	char buf[128], *tok[8];
	int n;

	if (!sc->need)
		return true;
	snprintf(buf, sizeof(buf), "%s", sc->need);
	n = tokenize(buf, tok, 8);
	for (int i = 0; i < n; i++) {
		if (strcmp(tok[i], "ipv6") == 0 && !env.have6) {
			snprintf(why, len, "no IPv6 address (TEST_HOST6)");
			return false;
		}
		if (strcmp(tok[i], "alt") == 0 && !env.have_alt) {
			snprintf(why, len, "no second local address (TEST_HOST is not 127.0.0.1)");
			return false;
		}
	}
	return true;
}

int exec_scenario(const struct scenario *sc, FILE *out)
{
	struct ctx *c = calloc(1, sizeof(*c));
	char why[128];
	int rc = 0;

	if (!c) {
		fprintf(stderr, "conform: out of memory\n");
		exit(2);
	}
	signals_once();
	c->out = out;
	c->sc = sc;
	fprintf(out, "== %s\n", sc->name);
	if (sc->xdiff)
		fprintf(out, "xdiff: %s\n", sc->xdiff);
	if (!needs_met(sc, why, sizeof(why))) {
		fprintf(out, "  skipped: %s\n", why);
		free(c);
		return 0;
	}
	c->base = lowest_free_fd();
	for (int i = 0; i < sc->nsteps && rc == 0; i++) {
		c->stepno = i;
		if (exec_step(c, sc->steps[i]) < 0) {
			fprintf(out, "  SYNTAX ERROR at line %d, '%s': %s\n", sc->lines[i], sc->steps[i],
				c->err);
			rc = -1;
		}
	}
	/* The end: everything closed; the fds must all come back. */
	for (int i = 0; i < c->nv; i++)
		if (c->v[i].bg.on)
			bg_join(c, &c->v[i], true);
	while (c->nv > 0) {
		close(c->v[0].fd);
		var_drop(c, &c->v[0]);
	}
	for (int i = 0; i < c->nholders; i++)
		syscall(SYS_close, c->holders[i]);
	int low = lowest_free_fd();

	if (low != c->base)
		fprintf(out, "  end: lowest free fd is first+%d, not first (a descriptor leaked)\n",
			low - c->base);
	for (int i = 0; i < c->nep; i++)
		free(c->eps[i]);
	free(c);
	fflush(out);
	return rc;
}
