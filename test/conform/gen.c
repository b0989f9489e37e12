/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The random generator: sequences of socket calls on a connected pair,
 * written as table rows.  A simulation (the model of model.h plus what
 * blocks) runs each proposed step first: a step that would block for ever
 * (a recv with nothing coming, a send beyond what both stacks surely
 * buffer) or whose outcome depends on how much a stack buffers is not
 * taken.  The same simulation vets the shrinker's candidates, so that a
 * shrunk sequence is one the generator could have made.
 */
#include "conform.h"
#include "model.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define GV 8		/* variables */
#define GE 6		/* sockets */
#define SAFE 32768	/* bytes in flight each way that any stack holds */
#define SAFE_SMALL 2048	/* the same with 4 KiB buffers */
#define SMALLBUF 4096

struct gep {
	struct mep m;
	bool listener;
	int target;		/* connect: the listener's index */
	bool accepted;		/* a connecting end accept() returned */
	bool nonblock;		/* O_NONBLOCK (the open file's: shared by dups) */
	bool rcvtimeo, sndtimeo;
	bool small_snd, small_rcv;
	bool fuzzy;		/* a fill ran: the next step must be its drain */
	int busy;		/* a background step: 1 bgrecv, 2 bgsend */
	uint64_t busy_n;
};

struct gvar {
	char name[8];
	int ep;			/* -1: an epoll set */
};

struct gstate {
	struct gep e[GE];
	int ne;
	struct gvar v[GV];
	int nv;
	bool have6;
};

static void fix_peers(struct gstate *dst, const struct gstate *src)
{
	for (int i = 0; i < src->ne; i++)
		dst->e[i].m.peer = src->e[i].m.peer
					   ? &dst->e[(struct gep *)src->e[i].m.peer - src->e].m
					   : NULL;
}

static void copy_state(struct gstate *dst, const struct gstate *src)
{
	*dst = *src;
	fix_peers(dst, src);
}

static int var_idx(const struct gstate *g, const char *name)
{
	for (int i = 0; i < g->nv; i++)
		if (strcmp(g->v[i].name, name) == 0)
			return i;
	return -1;
}

static struct gep *sock_of(struct gstate *g, const char *name)
{
	int i = var_idx(g, name);

	return i >= 0 && g->v[i].ep >= 0 ? &g->e[g->v[i].ep] : NULL;
}

static struct gep *peer(struct gep *e)
{
	return (struct gep *)e->m.peer;
}

static bool has(int n, char **tok, const char *w)
{
	for (int i = 0; i < n; i++)
		if (strcmp(tok[i], w) == 0)
			return true;
	return false;
}

static uint64_t sum_sizes(const char *s)
{
	uint64_t t = 0;

	for (const char *p = s; *p;) {
		char *end;
		uint64_t v = strtoull(p, &end, 10);

		if (*end == 'K')
			v <<= 10, end++;
		else if (*end == 'M')
			v <<= 20, end++;
		t += v;
		p = *end == ',' ? end + 1 : end;
		if (end == p && *p)
			break;
	}
	return t;
}

static int refs(const struct gstate *g, int ep)
{
	int n = 0;

	for (int i = 0; i < g->nv; i++)
		n += g->v[i].ep == ep;
	return n;
}

static bool alive(const struct gep *e)
{
	return e->m.peer && !e->m.dead;
}

bool gen_avoid_known = true;

/*
 * The expected differences (the table's "xdiff:" rows, libsdp(7)): steps
 * that would show one are not made while gen_avoid_known is set, so that a
 * random run finds what is not known yet.  --all (main.c) makes them.
 *   shut.rdwr_then_data, send.to_closed_twice: bytes sent toward an end
 *     that has closed or shut down both ways; TCP answers with a reset,
 *     SDP does not (or without POLLERR/EPIPE after the peer's DisConn).
 *   close.fin, send.to_closed_twice: a reset (close with linger 0 or with
 *     bytes unread) after this end's DisConn: the peer takes it for an
 *     orderly close (no POLLERR, SO_ERROR, ENOTCONN from getpeername).
 *   opt.cork: TCP_CORK or MSG_MORE; SDP holds the tail until uncorked,
 *     Linux sends it after 200 ms at most.
 *   libsdp(7) only: SO_SNDBUF/SO_RCVBUF of 4 KiB (the bytes in flight
 *     split otherwise between the two ends' queues: Linux counts its own
 *     overhead), or set on a connection (they move limits within the
 *     buffers it has; Linux's grow).
 */
static bool known_diff(const struct gstate *g, const char *op, int n, char **a,
		       const struct gep *x, const struct gep *y, bool is_send)
{
	if (!gen_avoid_known)
		return false;
	if (is_send && y && !x->m.shut_wr && !x->m.dead &&
	    (!y->m.open || (y->m.shut_rd && y->m.shut_wr)))
		return true;
	if ((strcmp(op, "setopt") == 0 && n == 4 && strcmp(a[2], "TCP_CORK") == 0 &&
	     atoi(a[3]) != 0) ||
	    (is_send && has(n, a, "more")))
		return true;
	if (strcmp(op, "setopt") == 0 && n == 4 &&
	    (strcmp(a[2], "SO_RCVBUF") == 0 || strcmp(a[2], "SO_SNDBUF") == 0) &&
	    (atoi(a[3]) <= SMALLBUF || x->m.peer))
		return true;
	if (strcmp(op, "close") == 0 && x->m.shut_wr && y && y->m.open && !x->m.dead &&
	    (x->m.linger0 || m_pending(&x->m) > 0)) {
		/* The last descriptor: the close resets the connection. */
		if (refs(g, (int)(x - g->e)) == 1)
			return true;
	}
	return false;
}

static uint64_t safe(const struct gep *from, const struct gep *to)
{
	return from->small_snd || to->small_rcv ? SAFE_SMALL : SAFE;
}

/* Would a read of N bytes with these flags on E wait for data that may
 * never come? */
static bool read_blocks(const struct gep *e, uint64_t n, bool dontwait, bool waitall)
{
	uint64_t avail = m_pending(&e->m);

	if (dontwait || e->nonblock || !e->m.peer || e->m.dead || e->m.fin_in || e->m.shut_rd)
		return false;
	if (e->rcvtimeo)
		return false;	/* it waits, then EAGAIN */
	return waitall ? avail < n : avail == 0;
}

/* One step on G; -1 when it is not one the generator would make there. */
static int sim_step(struct gstate *g, const char *text)
{
	char buf[256], *tok[MAXTOK], **a;
	int n, vi;
	const char *dst = NULL;
	struct gep *x, *y;

	snprintf(buf, sizeof(buf), "%s", text);
	n = tokenize(buf, tok, MAXTOK);
	if (n < 1)
		return -1;
	a = tok;
	if (n >= 3 && strcmp(tok[1], "=") == 0) {
		dst = tok[0];
		a += 2;
		n -= 2;
		if (var_idx(g, dst) >= 0 || g->nv == GV)
			return -1;
	}
	const char *op = a[0];

	if (dst && (strcmp(op, "listener") == 0 || strcmp(op, "socket") == 0)) {
		if (g->ne == GE)
			return -1;
		x = &g->e[g->ne];
		memset(x, 0, sizeof(*x));
		x->m.open = true;
		x->listener = op[0] == 'l';
		x->target = -1;
		x->nonblock = has(n, a, "nonblock");
		snprintf(g->v[g->nv].name, sizeof(g->v[0].name), "%s", dst);
		g->v[g->nv++].ep = g->ne++;
		return 0;
	}
	if (dst && (strcmp(op, "accept") == 0 || strcmp(op, "accept4") == 0)) {
		struct gep *l = n >= 2 ? sock_of(g, a[1]) : NULL;
		int li = l ? (int)(l - g->e) : -1, ci = -1;

		if (!l || !l->listener || g->ne == GE)
			return -1;
		for (int i = 0; i < g->ne && ci < 0; i++)
			if (g->e[i].target == li && !g->e[i].accepted)
				ci = i;
		if (ci < 0)
			return -1;	/* accept would block */
		x = &g->e[g->ne];
		memset(x, 0, sizeof(*x));
		x->m.open = true;
		x->target = -1;
		x->nonblock = has(n, a, "nonblock");
		x->small_rcv = l->small_rcv;	/* options a listener's children inherit */
		x->small_snd = l->small_snd;
		g->e[ci].accepted = true;
		x->m.peer = &g->e[ci].m;
		g->e[ci].m.peer = &x->m;
		if (g->e[ci].m.dead)
			m_reset(&x->m);
		else if (g->e[ci].m.shut_wr)
			x->m.fin_in = true;
		snprintf(g->v[g->nv].name, sizeof(g->v[0].name), "%s", dst);
		g->v[g->nv++].ep = g->ne++;
		return 0;
	}
	if (dst && strcmp(op, "epoll") == 0) {
		snprintf(g->v[g->nv].name, sizeof(g->v[0].name), "%s", dst);
		g->v[g->nv++].ep = -1;
		return 0;
	}
	if (dst && strcmp(op, "dup") == 0) {
		vi = n == 2 ? var_idx(g, a[1]) : -1;
		if (vi < 0 || g->v[vi].ep < 0)
			return -1;
		snprintf(g->v[g->nv].name, sizeof(g->v[0].name), "%s", dst);
		g->v[g->nv++].ep = g->v[vi].ep;
		return 0;
	}
	if (dst || n < 2)
		return -1;
	if (strncmp(op, "epoll_", 6) == 0) {
		vi = var_idx(g, a[1]);
		if (vi < 0 || g->v[vi].ep >= 0)
			return -1;
		return strcmp(op, "epoll_wait") == 0 || (n >= 4 && sock_of(g, a[3])) ? 0 : -1;
	}
	x = sock_of(g, a[1]);
	if (!x)
		return -1;
	y = peer(x);
	/* A background step lets only its partner run meanwhile. */
	for (int i = 0; i < g->ne; i++)
		if (g->e[i].busy && !(strcmp(op, "join") == 0 && &g->e[i] == x) &&
		    !(&g->e[i] == y && (strcmp(op, "send") == 0 || strcmp(op, "recvall") == 0)))
			return -1;
	/* After a fill, its drain.  Looking at the receiving end is fine;
	 * whether the filled end is writable again depends on when the
	 * receiver's stack made room (seen 1 run in 3 of random.1400966). */
	for (int i = 0; i < g->ne; i++)
		if (g->e[i].fuzzy && !(strcmp(op, "drain") == 0 && peer(x) == &g->e[i]) &&
		    !(strcmp(op, "poll") == 0 && x != &g->e[i]))
			return -1;
	bool is_send = strcmp(op, "send") == 0 || strcmp(op, "sendto") == 0 ||
		       strcmp(op, "write") == 0 || strcmp(op, "writev") == 0 ||
		       strcmp(op, "sendmsg") == 0 || strcmp(op, "sendfile") == 0 ||
		       strcmp(op, "splice_to") == 0;

	if (known_diff(g, op, n, a, x, y, is_send && n >= 3 && sum_sizes(a[2]) > 0))
		return -1;
	if (strcmp(op, "bind") == 0 || strcmp(op, "name") == 0 || strcmp(op, "peer") == 0 ||
	    strcmp(op, "getopt") == 0 || strcmp(op, "poll") == 0 || strcmp(op, "select") == 0 ||
	    strcmp(op, "settle") == 0)
		return 0;
	if (strcmp(op, "listen") == 0) {
		x->listener = true;
		return 0;
	}
	if (strcmp(op, "connect") == 0) {
		struct gep *l = n == 3 ? sock_of(g, a[2]) : NULL;

		if (!l || !l->listener || x->target >= 0 || x->listener)
			return -1;
		x->target = (int)(l - g->e);
		return 0;
	}
	if (strcmp(op, "close") == 0) {
		int ep;

		vi = var_idx(g, a[1]);	/* before nv changes */
		ep = g->v[vi].ep;
		g->v[vi] = g->v[--g->nv];
		if (refs(g, ep) > 0)
			return 0;
		m_close(&x->m);
		if (x->listener)
			for (int i = 0; i < g->ne; i++)
				if (g->e[i].target == ep && !g->e[i].accepted)
					m_reset(&g->e[i].m);
		return 0;
	}
	if (x->listener)
		return -1;
	if (strcmp(op, "setopt") == 0 && n == 4) {
		if (strcmp(a[2], "SO_LINGER") == 0)
			x->m.linger0 = strcmp(a[3], "1,0") == 0;
		else if (strcmp(a[2], "SO_RCVTIMEO") == 0)
			x->rcvtimeo = atoi(a[3]) > 0;
		else if (strcmp(a[2], "SO_SNDTIMEO") == 0)
			x->sndtimeo = atoi(a[3]) > 0;
		else if (strcmp(a[2], "SO_RCVBUF") == 0 && atoi(a[3]) <= SMALLBUF)
			x->small_rcv = true;
		else if (strcmp(a[2], "SO_SNDBUF") == 0 && atoi(a[3]) <= SMALLBUF)
			x->small_snd = true;
		return 0;
	}
	if (strcmp(op, "fcntl") == 0) {
		if (n >= 3 && strcmp(a[2], "setfl") == 0)
			x->nonblock = has(n, a, "nonblock");
		return 0;
	}
	if (strcmp(op, "ioctl") == 0) {
		/* SIOCOUTQ of a reset socket is whatever the stack left there. */
		if (n >= 3 && strcmp(a[2], "SIOCOUTQ") == 0 && (!alive(x) || x->m.shut_wr))
			return -1;
		return 0;
	}
	if (strcmp(op, "shutdown") == 0) {
		if (!x->m.peer)
			return -1;
		m_shutdown(&x->m, strcmp(a[2], "rd") == 0 ? 0 : strcmp(a[2], "wr") == 0 ? 1 : 2);
		return 0;
	}
	bool is_recv = strcmp(op, "recv") == 0 || strcmp(op, "recvfrom") == 0 ||
		       strcmp(op, "read") == 0 || strcmp(op, "readv") == 0 ||
		       strcmp(op, "recvmsg") == 0 || strcmp(op, "splice_from") == 0 ||
		       strcmp(op, "recvall") == 0;

	if ((is_send || is_recv) && (n < 3 || !x->m.peer))
		return -1;
	if (is_send) {
		uint64_t len = sum_sizes(a[2]);

		if (x->m.shut_wr || x->m.dead)
			return 0;	/* EPIPE, ECONNRESET: nothing moves */
		if (y->m.open && !(y->m.shut_rd && y->m.shut_wr) &&
		    m_pending(&y->m) + len > safe(x, y) + (y->busy == 1 ? y->busy_n : 0))
			return -1;	/* beyond what surely fits */
		if (!y->m.open && len > SAFE_SMALL)
			return -1;
		m_send(&x->m, len);
		return 0;
	}
	if (is_recv) {
		uint64_t len = sum_sizes(a[2]), avail = m_pending(&x->m);
		bool peek = has(n, a, "peek"),
		     all = has(n, a, "waitall") || strcmp(op, "recvall") == 0;

		if (read_blocks(x, len, has(n, a, "dontwait"), all || peek))
			return -1;
		if (x->busy == 2 && strcmp(op, "recvall") == 0)
			avail += x->busy_n;
		if (!peek && !x->m.dead)
			m_recv(&x->m, len < avail ? len : avail);
		return 0;
	}
	if (strcmp(op, "fill") == 0) {
		if (!alive(x) || x->m.shut_wr || !y->m.open || y->m.shut_rd)
			return -1;
		x->fuzzy = true;
		return 0;
	}
	if (strcmp(op, "drain") == 0) {
		if (!x->m.peer || (!y->fuzzy && m_pending(&x->m) == 0) || y->busy)
			return -1;
		y->fuzzy = false;
		x->m.rx = y->m.tx;	/* whatever the fill sent is read now */
		return 0;
	}
	if (strcmp(op, "bgrecv") == 0 || strcmp(op, "bgsend") == 0) {
		bool rcv = op[2] == 'r';
		struct gep *r = rcv ? x : y;

		if (n != 3 || !alive(x) || !y->m.open || r->nonblock || r->rcvtimeo || x->m.shut_wr ||
		    y->m.shut_wr || m_pending(&x->m) || m_pending(&y->m))
			return -1;
		x->busy = rcv ? 1 : 2;
		x->busy_n = sum_sizes(a[2]);
		return 0;
	}
	if (strcmp(op, "join") == 0) {
		if (!x->busy)
			return -1;
		if (x->busy == 1)
			m_recv(&x->m, m_pending(&x->m) < x->busy_n ? m_pending(&x->m) : x->busy_n);
		else
			m_send(&x->m, x->busy_n);
		x->busy = 0;
		return 0;
	}
	return -1;
}

/* --- making sequences --------------------------------------------------------- */

struct rng {
	uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
	/* splitmix64 */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static unsigned below(struct rng *r, unsigned n)
{
	return (unsigned)(rnd(r) % n);
}

static bool chance(struct rng *r, unsigned pct)
{
	return below(r, 100) < pct;
}

static const char *pick(struct rng *r, const char *const *v, unsigned n)
{
	return v[below(r, n)];
}

struct seq {
	char **steps;
	int n, cap;
};

static void seq_add(struct seq *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seq_add(struct seq *s, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 32;
		s->steps = realloc(s->steps, sizeof(*s->steps) * (size_t)s->cap);
		if (!s->steps)
			abort();
	}
	s->steps[s->n] = strdup(buf);
	if (!s->steps[s->n])
		abort();
	s->n++;
}

/* Take step TEXT if the simulation allows it. */
static bool try_step(struct gstate *g, struct seq *s, const char *text)
{
	struct gstate t;

	copy_state(&t, g);
	if (sim_step(&t, text) < 0)
		return false;
	copy_state(g, &t);
	seq_add(s, "%s", text);
	return true;
}

static uint64_t rand_size(struct rng *r, uint64_t max)
{
	uint64_t n;

	switch (below(r, 10)) {
	case 0: case 1: case 2:
		n = 1 + below(r, 16);
		break;
	case 3: case 4: case 5:
		n = 17 + below(r, 1500);
		break;
	case 6: case 7: case 8:
		n = 1500 + below(r, 15000);
		break;
	default:
		n = 1 + rnd(r) % (max ? max : 1);
		break;
	}
	return max && n > max ? 1 + rnd(r) % max : n;
}

/* Split N into 1..4 lengths, "a,b,c". */
static void split(struct rng *r, uint64_t n, char *buf, size_t len)
{
	unsigned parts = 1 + below(r, 4);
	size_t used = 0;

	for (unsigned i = 0; i < parts && n > 0; i++) {
		uint64_t k = i + 1 == parts ? n : rnd(r) % (n + 1);

		used += (size_t)snprintf(buf + used, len - used, "%s%llu", used ? "," : "",
					 (unsigned long long)k);
		n -= k;
	}
	if (!used)
		snprintf(buf, len, "0");
}

static const char *const sockopts_get[] = {
	"SO_ERROR",	"TCP_NODELAY", "SO_KEEPALIVE", "SO_TYPE",     "SO_LINGER",
	"TCP_INFO",	"TCP_CORK",    "SO_RCVTIMEO",  "SO_ACCEPTCONN", "SO_DOMAIN",
};

/* One step on an end of the connection; false if none was taken. */
static bool gen_step(struct rng *r, struct gstate *g, struct seq *s, const char *xn,
		     const char *yn)
{
	struct gep *x = sock_of(g, xn), *y = yn ? sock_of(g, yn) : NULL;
	char t[200], l[64];
	uint64_t n;
	static const char *const sflags[] = { "", " dontwait", " nosignal", " dontwait nosignal" };
	static const char *const rflags[] = { "", " dontwait", " peek", " waitall", " peek dontwait",
					       " trunc", " waitall dontwait" };

	if (!x)
		return false;
	unsigned k = below(r, 100);
	uint64_t room = y && y->m.open && x->m.peer ? safe(x, y) : SAFE_SMALL;

	if (y && y->m.open && x->m.peer)
		room = m_pending(&y->m) < room ? room - m_pending(&y->m) : 0;
	if (k < 30) {	/* send */
		if (room == 0)
			return false;
		n = rand_size(r, room);
		switch (below(r, 9)) {
		case 0: case 1: case 2:
			snprintf(t, sizeof(t), "send %s %llu%s%s", xn, (unsigned long long)n,
				 pick(r, sflags, 4), chance(r, 3) ? " more" : "");
			break;
		case 3:
			snprintf(t, sizeof(t), "write %s %llu", xn, (unsigned long long)n);
			break;
		case 4:
			split(r, n, l, sizeof(l));
			snprintf(t, sizeof(t), "writev %s %s", xn, l);
			break;
		case 5:
			split(r, n, l, sizeof(l));
			snprintf(t, sizeof(t), "sendmsg %s %s%s", xn, l, pick(r, sflags, 4));
			break;
		case 6:
			snprintf(t, sizeof(t), "sendto %s %llu%s", xn, (unsigned long long)n,
				 pick(r, sflags, 4));
			break;
		case 7:
			snprintf(t, sizeof(t), "sendfile %s %llu", xn, (unsigned long long)n);
			break;
		default:
			snprintf(t, sizeof(t), "splice_to %s %llu", xn,
				 (unsigned long long)(n > 60000 ? 60000 : n));
			break;
		}
		return try_step(g, s, t);
	}
	if (k < 60) {	/* receive */
		uint64_t avail = m_pending(&x->m);

		n = chance(r, 50) && avail ? 1 + rnd(r) % (avail + avail / 4 + 1) : rand_size(r, 0);
		switch (below(r, 8)) {
		case 0: case 1: case 2:
			snprintf(t, sizeof(t), "recv %s %llu%s", xn, (unsigned long long)n,
				 pick(r, rflags, 7));
			break;
		case 3:
			snprintf(t, sizeof(t), "read %s %llu", xn, (unsigned long long)n);
			break;
		case 4:
			split(r, n, l, sizeof(l));
			snprintf(t, sizeof(t), "readv %s %s", xn, l);
			break;
		case 5:
			split(r, n, l, sizeof(l));
			snprintf(t, sizeof(t), "recvmsg %s %s%s", xn, l, pick(r, rflags, 7));
			break;
		case 6:
			snprintf(t, sizeof(t), "recvfrom %s %llu%s", xn, (unsigned long long)n,
				 pick(r, rflags, 3));
			break;
		default:
			snprintf(t, sizeof(t), "recvall %s %llu", xn, (unsigned long long)n);
			break;
		}
		if (try_step(g, s, t))
			return true;
		/* Would block: the same without waiting. */
		snprintf(t, sizeof(t), "recv %s %llu dontwait", xn, (unsigned long long)n);
		return try_step(g, s, t);
	}
	if (k < 75) {	/* look */
		switch (below(r, 9)) {
		case 0:
			snprintf(t, sizeof(t), "poll %s", xn);
			break;
		case 1:
			snprintf(t, sizeof(t), "ioctl %s FIONREAD", xn);
			break;
		case 2:
			snprintf(t, sizeof(t), "ioctl %s SIOCOUTQ", xn);
			break;
		case 3:
			snprintf(t, sizeof(t), "%s %s", chance(r, 50) ? "name" : "peer", xn);
			break;
		case 4:
			snprintf(t, sizeof(t), "select %s", xn);
			break;
		case 5:
			snprintf(t, sizeof(t), "fcntl %s getfl", xn);
			break;
		case 6:
			if (var_idx(g, "E") >= 0) {
				snprintf(t, sizeof(t), "epoll_wait E");
				break;
			}
			/* fall through */
		default:
			snprintf(t, sizeof(t), "getopt %s %s", xn, pick(r, sockopts_get, 10));
			break;
		}
		return try_step(g, s, t);
	}
	if (k < 84) {	/* options */
		static const char *const sets[] = { "TCP_NODELAY 1", "TCP_NODELAY 0", "SO_KEEPALIVE 1",
						    "TCP_KEEPIDLE 30", "SO_RCVBUF 131072",
						    "SO_SNDBUF 131072", "SO_RCVTIMEO 30",
						    "SO_RCVTIMEO 0", "SO_LINGER 1,0", "SO_LINGER 0,0",
						    "TCP_CORK 1", "TCP_CORK 0", "SO_SNDTIMEO 50" };
		const char *o = pick(r, sets, 13);

		if (strncmp(o, "TCP_CORK 1", 10) == 0 && !chance(r, 20))
			o = "TCP_CORK 0";
		snprintf(t, sizeof(t), "setopt %s %s", xn, o);
		return try_step(g, s, t);
	}
	if (k < 88) {	/* blocking or not */
		snprintf(t, sizeof(t), "fcntl %s setfl%s", xn, chance(r, 50) ? " nonblock" : "");
		return try_step(g, s, t);
	}
	if (k < 91) {	/* a bulk transfer: the stacks' paths for big sends */
		if (!y || !alive(x) || x->nonblock || x->sndtimeo || x->m.shut_wr || !y->m.open ||
		    y->nonblock || y->rcvtimeo || y->m.shut_rd || m_pending(&x->m) ||
		    m_pending(&y->m))
			return false;
		n = 65536 + rnd(r) % (3u << 20);
		snprintf(t, sizeof(t), "bgrecv %s %llu", yn, (unsigned long long)n);
		if (!try_step(g, s, t))
			return false;
		snprintf(t, sizeof(t), "send %s %llu", xn, (unsigned long long)n);
		try_step(g, s, t);
		snprintf(t, sizeof(t), "join %s", yn);
		return try_step(g, s, t);
	}
	if (k < 93) {	/* back-pressure */
		snprintf(t, sizeof(t), "fill %s", xn);
		if (!y || !try_step(g, s, t))
			return false;
		if (chance(r, 50)) {
			snprintf(t, sizeof(t), "poll %s", chance(r, 50) ? xn : yn);
			try_step(g, s, t);
		}
		snprintf(t, sizeof(t), "drain %s", yn);
		return try_step(g, s, t);
	}
	if (k < 95) {	/* another descriptor for it */
		char nn[8];

		snprintf(nn, sizeof(nn), "%c%d", xn[0], s->n);
		snprintf(t, sizeof(t), "%s = dup %s", nn, xn);
		if (var_idx(g, nn) >= 0 || !try_step(g, s, t))
			return false;
		snprintf(t, sizeof(t), "close %s", xn);
		return try_step(g, s, t);
	}
	if (k < 98) {	/* shutdown */
		static const char *const how[] = { "rd", "wr", "rdwr" };

		snprintf(t, sizeof(t), "shutdown %s %s", xn, pick(r, how, 3));
		return try_step(g, s, t);
	}
	/* close, gracefully or not */
	if (chance(r, 40)) {
		snprintf(t, sizeof(t), "setopt %s SO_LINGER 1,0", xn);
		try_step(g, s, t);
	}
	snprintf(t, sizeof(t), "close %s", xn);
	return try_step(g, s, t);
}

/* The name of the variable for end I (0 client, 1 server), which dup may
 * have renamed. */
static const char *end_name(const struct gstate *g, int ep)
{
	for (int i = 0; i < g->nv; i++)
		if (g->v[i].ep == ep)
			return g->v[i].name;
	return NULL;
}

static struct scenario *to_scenario(struct seq *s, const char *name, bool v6)
{
	struct scenario *sc = calloc(1, sizeof(*sc));

	if (!sc)
		abort();
	sc->name = strdup(name);
	sc->need = v6 ? strdup("ipv6") : NULL;
	sc->steps = s->steps;
	sc->nsteps = s->n;
	sc->lines = calloc((size_t)s->n + 1, sizeof(int));
	if (!sc->name || !sc->lines || (v6 && !sc->need))
		abort();
	return sc;
}

struct scenario *gen_sequence(uint64_t seed, const char *name, bool have6)
{
	struct rng r = { seed * 0x2545f4914f6cdd1dULL + 1 };
	struct gstate g = { .have6 = have6 };
	struct seq s = { 0 };
	bool v6 = have6 && chance(&r, 30), dual = !v6 && have6 && chance(&r, 10);
	const char *fam = v6 ? "inet6" : "inet";

	/* The pair, with what programs do before connecting. */
	if (dual)
		try_step(&g, &s, "L = listener inet6 any6:0 v6only=0");
	else
		try_step(&g, &s, v6 ? "L = listener inet6" : "L = listener inet");
	if (chance(&r, 10) && !gen_avoid_known) {
		seq_add(&s, "setopt L SO_RCVBUF %d", SMALLBUF);
		sim_step(&g, s.steps[s.n - 1]);
	}
	bool nb = chance(&r, 25);
	char t[128];

	snprintf(t, sizeof(t), "C = socket %s%s", fam, nb ? " nonblock" : "");
	try_step(&g, &s, t);
	if (chance(&r, 60))
		try_step(&g, &s, "setopt C TCP_NODELAY 1");
	if (chance(&r, 10) && !gen_avoid_known) {
		seq_add(&s, "setopt C SO_SNDBUF %d", SMALLBUF);
		sim_step(&g, s.steps[s.n - 1]);
	}
	if (chance(&r, 10))
		try_step(&g, &s, v6 ? "bind C host6:0" : "bind C host:0");
	try_step(&g, &s, "connect C L");
	if (nb)
		try_step(&g, &s, "poll C out");
	switch (below(&r, 4)) {
	case 0:
		try_step(&g, &s, "S = accept4 L nonblock");
		break;
	case 1:
		try_step(&g, &s, "S = accept4 L cloexec");
		break;
	default:
		try_step(&g, &s, "S = accept L");
		break;
	}
	if (chance(&r, 60))
		try_step(&g, &s, "setopt S TCP_NODELAY 1");
	if (chance(&r, 80))
		try_step(&g, &s, "close L");
	if (chance(&r, 15)) {
		try_step(&g, &s, "E = epoll");
		try_step(&g, &s, "epoll_ctl E add C in,out,rdhup");
		try_step(&g, &s, "epoll_ctl E add S in,out,rdhup");
	}
	/* Then calls at either end, until one end is gone and a few more. */
	int len = 1 + (int)below(&r, 24), tries = 0, ci = 1, si = -1;

	for (int i = 0; i < g.ne; i++)
		if (!g.e[i].listener && g.e[i].target < 0)
			si = i;
	ci = (int)(peer(&g.e[si]) - g.e);
	for (int done = 0; done < len && tries < len * 8; tries++) {
		const char *cn = end_name(&g, ci), *sn = end_name(&g, si);

		if (!cn && !sn)
			break;
		bool at_c = cn && (!sn || chance(&r, 50));

		if (gen_step(&r, &g, &s, at_c ? cn : sn, at_c ? sn : cn))
			done++;
	}
	return to_scenario(&s, name, v6 || dual);
}

void gen_free(struct scenario *sc)
{
	if (!sc)
		return;
	table_free(sc, 1);
}

static bool valid(char **steps, int n, bool have6)
{
	struct gstate g = { .have6 = have6 };

	for (int i = 0; i < n; i++)
		if (sim_step(&g, steps[i]) < 0)
			return false;
	/* Anything still in the background is joined by the runner. */
	return true;
}

static struct scenario *with_steps(const struct scenario *sc, char **steps, int n)
{
	struct seq s = { 0 };

	for (int i = 0; i < n; i++)
		seq_add(&s, "%s", steps[i]);
	return to_scenario(&s, sc->name, sc->need != NULL);
}

struct scenario *gen_without(const struct scenario *sc, int from, int count)
{
	char **v = malloc(sizeof(char *) * (size_t)sc->nsteps);
	int n = 0;
	struct scenario *out = NULL;

	if (!v)
		abort();
	for (int i = 0; i < sc->nsteps; i++)
		if (i < from || i >= from + count)
			v[n++] = sc->steps[i];
	if (n < sc->nsteps && valid(v, n, true))
		out = with_steps(sc, v, n);
	free(v);
	return out;
}

/* Simplifications of a step: each number halved, each flag word dropped. */
struct scenario *gen_simpler(const struct scenario *sc, int i, int nth)
{
	char buf[256], *tok[MAXTOK], out[256];
	int n, k = 0, hit = -1;
	bool halve = false;

	snprintf(buf, sizeof(buf), "%s", sc->steps[i]);
	n = tokenize(buf, tok, MAXTOK);
	for (int j = 1; j < n && hit < 0; j++) {
		static const char *const fl[] = { "dontwait", "peek", "waitall", "trunc", "more",
						  "nosignal", "nonblock", "cloexec" };
		bool num = tok[j][0] >= '0' && tok[j][0] <= '9' && strtoull(tok[j], NULL, 10) > 1 &&
			   !strchr(tok[j], ',') && !strchr(tok[j], ':') && strcmp(tok[0], "setopt") != 0;
		bool flag = false;

		for (size_t f = 0; f < sizeof(fl) / sizeof(fl[0]); f++)
			flag |= strcmp(tok[j], fl[f]) == 0;
		if ((num || flag) && k++ == nth) {
			hit = j;
			halve = num;
		}
	}
	if (hit < 0)
		return NULL;
	size_t used = 0;
	char half[24];

	for (int j = 0; j < n; j++) {
		const char *w = tok[j];

		if (j == hit && !halve)
			continue;
		if (j == hit) {
			snprintf(half, sizeof(half), "%llu", strtoull(w, NULL, 10) / 2);
			w = half;
		}
		used += (size_t)snprintf(out + used, sizeof(out) - used, "%s%s", used ? " " : "", w);
	}
	char **v = malloc(sizeof(char *) * (size_t)sc->nsteps);
	struct scenario *res = NULL;

	if (!v)
		abort();
	for (int j = 0; j < sc->nsteps; j++)
		v[j] = j == i ? out : sc->steps[j];
	if (valid(v, sc->nsteps, true))
		res = with_steps(sc, v, sc->nsteps);
	free(v);
	return res;
}
