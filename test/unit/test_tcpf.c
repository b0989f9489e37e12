/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tcp-fallback transport, driven through the OTI only, in one process
 * over loopback.  The harness plays the engine's progress thread: it drains
 * every object into per-object queues, arms them all and sleeps in poll()
 * on their fds, so a missing wake-up shows up as a timeout, never a hang.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "oti.h"
#include "tcp-fallback/tcpf_wire.h"
#include "tunables.h"

#define WAIT_MS 5000
#define MAXQ 1024

/* Events and completions in the order the harness took them (seq). */
struct tep {
	struct oti_ep *ep;
	struct oti_event ev[16];
	int ev_seq[16];
	int evh, evt;
	struct oti_wc wc[MAXQ];
	int wc_seq[MAXQ];
	int wch, wct;
	int last_seq;		/* seq of what wait_event/wait_wc returned last */
};

struct treq {
	struct oti_connreq *req;
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	size_t len;
	struct sockaddr_storage peer;
};

struct tlis {
	struct oti_listener *l;
	struct treq q[64];
	int h, t;
};

static const struct oti_ops *T;
static int seq;
static struct tep *eps[64];
static struct tlis *liss[8];

static void tcpf_setup(void)
{
	cr_assert_geq(oti_init(), 1);
	T = oti_find("tcp-fallback");
	cr_assert_not_null(T);
	memset(eps, 0, sizeof(eps));
	memset(liss, 0, sizeof(liss));
}

static void tcpf_teardown(void)
{
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		if (eps[i]) {
			T->ep_close(eps[i]->ep);
			free(eps[i]);
			eps[i] = NULL;
		}
	}
	for (size_t i = 0; i < sizeof(liss) / sizeof(liss[0]); i++) {
		if (liss[i]) {
			T->listener_close(liss[i]->l);
			free(liss[i]);
			liss[i] = NULL;
		}
	}
	oti_fini();
}

/*
 * A tunable changed through its environment variable, which wins over
 * tun_set() (and which the test harness itself exports for "transports");
 * env_restore() puts the old value back.
 */
struct env_saved {
	const char *name;
	char *value;
	bool had;
};

static struct env_saved env_change(const char *name, const char *value)
{
	const char *old = getenv(name);
	struct env_saved saved = { .name = name, .had = old != NULL };

	if (old)
		saved.value = strdup(old);
	cr_assert_eq(setenv(name, value, 1), 0);
	tun_reset();
	return saved;
}

static void env_restore(struct env_saved *saved)
{
	if (saved->had)
		setenv(saved->name, saved->value, 1);
	else
		unsetenv(saved->name);
	free(saved->value);
	tun_reset();
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static struct tep *track_ep(struct oti_ep *ep)
{
	struct tep *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	t->ep = ep;
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		if (!eps[i]) {
			eps[i] = t;
			return t;
		}
	}
	cr_assert_fail("too many eps");
	return NULL;
}

static void untrack_ep(struct tep *t)
{
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
		if (eps[i] == t)
			eps[i] = NULL;
	T->ep_close(t->ep);
	free(t);
}

static struct tlis *track_lis(struct oti_listener *l)
{
	struct tlis *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	t->l = l;
	for (size_t i = 0; i < sizeof(liss) / sizeof(liss[0]); i++) {
		if (!liss[i]) {
			liss[i] = t;
			return t;
		}
	}
	cr_assert_fail("too many listeners");
	return NULL;
}

static void untrack_lis(struct tlis *t)
{
	for (size_t i = 0; i < sizeof(liss) / sizeof(liss[0]); i++)
		if (liss[i] == t)
			liss[i] = NULL;
	T->listener_close(t->l);
	free(t);
}

/* Drain one ep into its queues, as the engine does when its fd fires. */
static void pump_ep(struct tep *t)
{
	struct oti_wc wc[32];
	int n;

	while (T->get_event(t->ep, &t->ev[t->evt % 16]) == 0) {
		t->ev_seq[t->evt % 16] = ++seq;
		t->evt++;
		cr_assert_lt(t->evt - t->evh, 16, "event queue overflow");
	}
	while ((n = T->poll_cq(t->ep, wc, 32)) > 0) {
		for (int i = 0; i < n; i++) {
			t->wc[t->wct % MAXQ] = wc[i];
			t->wc_seq[t->wct % MAXQ] = ++seq;
			t->wct++;
			cr_assert_lt(t->wct - t->wch, MAXQ, "wc queue overflow");
		}
	}
	cr_assert_geq(n, 0, "poll_cq failed: %d", n);
	/* As the engine does after a drive (conn_quiet_dead_fd()): this
	 * test has no epoll registration of the fd to take out first. */
	if (T->ep_fd_dead(t->ep))
		T->ep_quiet(t->ep);
}

static void pump_lis(struct tlis *t)
{
	for (;;) {
		struct treq *r = &t->q[t->t % 64];
		int ret;

		cr_assert_lt(t->t - t->h, 64, "request queue overflow");
		ret = T->get_connreq(t->l, &r->req, r->pdata, &r->len, &r->peer);
		if (ret == -EAGAIN)
			return;
		cr_assert_eq(ret, 0, "get_connreq: %d", ret);
		t->t++;
	}
}

/*
 * One round of the progress loop: drain everything; if that produced
 * nothing, arm everything and sleep on all fds (at most ms).  The sleep is
 * not cut short by a timer, so a wake-up that never comes fails the test.
 */
static void progress(int ms)
{
	struct pollfd pfd[72];
	int n = 0, got = 0;
	bool again = false;

	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		if (!eps[i])
			continue;
		int before = eps[i]->evt + eps[i]->wct;
		pump_ep(eps[i]);
		got += eps[i]->evt + eps[i]->wct - before;
	}
	for (size_t i = 0; i < sizeof(liss) / sizeof(liss[0]); i++) {
		if (!liss[i])
			continue;
		int before = liss[i]->t;
		pump_lis(liss[i]);
		got += liss[i]->t - before;
	}
	if (got)
		return;

	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
		if (!eps[i])
			continue;
		int ret = T->ep_arm(eps[i]->ep);
		cr_assert(ret == 0 || ret == -EAGAIN, "ep_arm: %d", ret);
		if (ret == -EAGAIN)
			again = true;
		pfd[n].fd = T->ep_fd(eps[i]->ep);
		pfd[n++].events = T->ep_wait_events(eps[i]->ep);
	}
	for (size_t i = 0; i < sizeof(liss) / sizeof(liss[0]); i++) {
		if (!liss[i])
			continue;
		int ret = T->listener_arm(liss[i]->l);
		cr_assert(ret == 0 || ret == -EAGAIN, "listener_arm: %d", ret);
		if (ret == -EAGAIN)
			again = true;
		pfd[n].fd = T->listener_fd(liss[i]->l);
		pfd[n++].events = POLLIN;
	}
	if (!again)
		poll(pfd, (nfds_t)n, ms);
}

/*
 * A few rounds of progress.  A stray native connection is no valid request:
 * the listener takes it in, sees it close and drops it.
 */
static void settle(void)
{
	for (int i = 0; i < 5; i++)
		progress(20);
}

static void wait_event(struct tep *t, struct oti_event *ev)
{
	long end = now_ms() + WAIT_MS;

	while (t->evh == t->evt) {
		cr_assert_lt(now_ms(), end, "timed out waiting for an event");
		progress((int)(end - now_ms()) + 1);
	}
	*ev = t->ev[t->evh % 16];
	t->last_seq = t->ev_seq[t->evh % 16];
	t->evh++;
}

static void wait_event_type(struct tep *t, enum oti_event_type type, struct oti_event *ev)
{
	wait_event(t, ev);
	cr_assert_eq(ev->type, type, "event %d (status %d), expected %d", ev->type, ev->status,
		     type);
}

static struct oti_wc wait_wc(struct tep *t)
{
	long end = now_ms() + WAIT_MS;

	while (t->wch == t->wct) {
		cr_assert_lt(now_ms(), end, "timed out waiting for a completion");
		progress((int)(end - now_ms()) + 1);
	}
	t->last_seq = t->wc_seq[t->wch % MAXQ];
	return t->wc[t->wch++ % MAXQ];
}

static struct treq wait_connreq(struct tlis *l)
{
	long end = now_ms() + WAIT_MS;

	while (l->h == l->t) {
		cr_assert_lt(now_ms(), end, "timed out waiting for a connection request");
		progress((int)(end - now_ms()) + 1);
	}
	return l->q[l->h++ % 64];
}

/* Drained and armed, the ep's fd stays quiet for what the transport
 * waits for: nothing spins. */
static void assert_quiet(struct tep *t)
{
	struct pollfd pfd = { .fd = T->ep_fd(t->ep) };
	int ret;

	for (int i = 0; i < 10; i++) {
		pump_ep(t);
		ret = T->ep_arm(t->ep);
		if (ret != -EAGAIN)
			break;
	}
	cr_assert_eq(ret, 0, "ep_arm: %d", ret);
	pfd.events = T->ep_wait_events(t->ep);
	cr_assert_eq(poll(&pfd, 1, 100), 0, "armed idle ep fd is readable");
}

static struct sockaddr_storage mkaddr(int family, const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	}
	return ss;
}

static socklen_t salen(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
	       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
}

static uint16_t offset(void)
{
	return (uint16_t)tun_int(TUN_tcpf_port_offset);
}

/* A TCP port nobody listens on right now (bound, then released). */
static uint16_t free_tcp_port(int family, const char *ip)
{
	struct sockaddr_storage ss = mkaddr(family, ip, 0);
	socklen_t len = sizeof(ss);
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&ss, salen(&ss)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	close(fd);
	return port_of(&ss);
}

static struct tlis *listen_on(int family, const char *ip, uint16_t app_port,
			      struct sockaddr_storage *name)
{
	struct sockaddr_storage ss = mkaddr(family, ip, app_port);
	struct oti_listener *l;
	socklen_t len = sizeof(*name);

	cr_assert_eq(T->listen((struct sockaddr *)&ss, salen(&ss), 16, 0, &l), 0);
	cr_assert_eq(T->listener_name(l, (struct sockaddr *)name, &len), 0);
	cr_assert_eq(name->ss_family, family);
	cr_assert_neq(port_of(name), 0);
	return track_lis(l);
}

static struct tep *open_to(const struct sockaddr_storage *dst)
{
	struct oti_ep *ep;
	struct oti_event ev;

	cr_assert_eq(T->ep_open((const struct sockaddr *)dst, salen(dst), NULL, 0, &ep), 0);
	struct tep *t = track_ep(ep);
	wait_event_type(t, OTI_EV_RESOLVED, &ev);
	return t;
}

struct buf {
	uint8_t *p;
	size_t len;
	struct oti_mr *mr;
};

static struct buf mkbuf(struct tep *t, size_t len, unsigned access)
{
	struct buf b = { .len = len };

	b.p = calloc(1, len);
	cr_assert_not_null(b.p);
	cr_assert_eq(T->mr_reg(t->ep, b.p, len, access, &b.mr), 0);
	cr_assert_eq(b.mr->addr, (void *)b.p);
	cr_assert_eq(b.mr->len, len);
	return b;
}

static void freebuf(struct buf *b)
{
	cr_assert_eq(T->mr_dereg(b->mr), 0);
	free(b->p);
}

static void post_recv(struct tep *t, struct buf *b, size_t off, uint32_t len, uint64_t ctx)
{
	struct oti_sge sge = { .addr = b->p + off, .len = len, .mr = b->mr };

	cr_assert_eq(T->post_recv(t->ep, &sge, ctx), 0);
}

static void post_send(struct tep *t, struct buf *b, size_t off, uint32_t len, uint64_t ctx,
		      unsigned flags)
{
	struct oti_sge sge = { .addr = b->p + off, .len = len, .mr = b->mr };

	cr_assert_eq(T->post_send(t->ep, &sge, ctx, flags), 0);
}

struct pair {
	struct tlis *l;
	struct tep *a, *b;		/* active, passive */
	struct sockaddr_storage name;	/* listener's application address */
	struct buf arx, brx;		/* receive areas, 16 x 64 KiB */
};

#define RXSLOT 65536
#define NRX 16

/* A connected pair with receives posted on both sides (ctx = slot). */
static void connect_pair(struct pair *p, int family, const char *ip)
{
	static const char cdata[] = "hello from the active side";
	static const char adata[] = "and welcome from the passive side";
	struct oti_event ev;

	p->l = listen_on(family, ip, 0, &p->name);
	p->a = open_to(&p->name);
	p->arx = mkbuf(p->a, (size_t)RXSLOT * NRX, OTI_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NRX; i++)
		post_recv(p->a, &p->arx, (size_t)i * RXSLOT, RXSLOT, (uint64_t)i);
	cr_assert_eq(T->connect(p->a->ep, cdata, sizeof(cdata)), 0);

	struct treq r = wait_connreq(p->l);
	cr_assert_eq(r.len, sizeof(cdata));
	cr_assert_arr_eq(r.pdata, cdata, sizeof(cdata));
	cr_assert_eq(r.peer.ss_family, family);

	struct oti_ep *bep;
	cr_assert_eq(T->ep_accept_open(p->l->l, r.req, &bep), 0);
	p->b = track_ep(bep);
	p->brx = mkbuf(p->b, (size_t)RXSLOT * NRX, OTI_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NRX; i++)
		post_recv(p->b, &p->brx, (size_t)i * RXSLOT, RXSLOT, (uint64_t)i);
	cr_assert_eq(T->accept(p->b->ep, adata, sizeof(adata)), 0);

	wait_event_type(p->a, OTI_EV_ESTABLISHED, &ev);
	cr_assert_eq(ev.status, 0);
	cr_assert_eq(ev.private_data_len, sizeof(adata));
	cr_assert_arr_eq(ev.private_data, adata, sizeof(adata));
	wait_event_type(p->b, OTI_EV_ESTABLISHED, &ev);
	cr_assert_eq(ev.status, 0);

	/* The request's peer is the active side's TCP address. */
	struct sockaddr_storage alocal, apeer;
	cr_assert_eq(T->ep_names(p->a->ep, &alocal, &apeer), 0);
	cr_assert(same_ip(&alocal, &r.peer));
	cr_assert_eq(port_of(&alocal), port_of(&r.peer));
	cr_assert(same_ip(&apeer, &p->name));
	cr_assert_eq(port_of(&apeer), port_of(&p->name));

	/* The passive side's local name is the application address. */
	struct sockaddr_storage blocal, bpeer;
	cr_assert_eq(T->ep_names(p->b->ep, &blocal, &bpeer), 0);
	cr_assert_eq(port_of(&blocal), port_of(&p->name));
	cr_assert(same_ip(&bpeer, &alocal));
	cr_assert_eq(port_of(&bpeer), port_of(&alocal));
}

/* The verbs order, as the contract asks: eps first, then registrations. */
static void close_pair(struct pair *p)
{
	untrack_ep(p->a);
	untrack_ep(p->b);
	untrack_lis(p->l);
	freebuf(&p->arx);
	freebuf(&p->brx);
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 31u + i * 7u + (i >> 8));
}

/* ------------------------------------------------------------------------ */

/*
 * Starting the transports must not take the application's signals (the
 * libfabric the software transport once used installed crash and
 * SIGINT/SIGTERM handlers at load time).  No .init here: this test starts
 * the transport itself, in a fresh worker.
 */
Test(tcpf, init_leaves_signals_alone)
{
	struct sigaction before[NSIG], after;

	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, NULL, &before[sig]);
	cr_assert_gt(oti_init(), 0, "no transport came up");
	for (int sig = 1; sig < NSIG; sig++) {
		if (sigaction(sig, NULL, &after) < 0)
			continue;
		cr_expect_eq((void *)after.sa_handler, (void *)before[sig].sa_handler,
			     "signal %d (%s): disposition changed by oti_init()", sig,
			     strsignal(sig));
	}
	oti_fini();
}

Test(tcpf, registry, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage v4 = mkaddr(AF_INET, "127.0.0.1", 1);
	struct sockaddr_storage v6 = mkaddr(AF_INET6, "::1", 1);
	struct sockaddr unix_sa = { .sa_family = AF_UNIX };
	struct oti_caps caps;

	/* Idempotent. */
	int n = oti_init();
	cr_assert_geq(n, 1);
	cr_assert_eq(oti_init(), n);

	cr_assert_str_eq(T->name, "tcp-fallback");
	cr_assert_null(oti_find("no-such-transport"));
	cr_assert_eq(oti_select((struct sockaddr *)&v4, (struct sockaddr *)&v4), T);
	cr_assert_eq(oti_select(NULL, (struct sockaddr *)&v6), T);
	cr_assert_eq(oti_select(NULL, NULL), T);
	cr_assert_null(oti_select(NULL, &unix_sa));
	cr_assert_eq(T->probe(&unix_sa, NULL), -ENODEV);

	/* Disabled by the tunable: still found by name, never selected. */
	struct env_saved saved = env_change("SDP_TRANSPORTS", "ib, iwarp");
	cr_assert_null(oti_select(NULL, (struct sockaddr *)&v4));
	cr_assert_eq(oti_find("tcp-fallback"), T);
	env_restore(&saved);
	saved = env_change("SDP_TRANSPORTS", "ib , tcp-fallback");
	cr_assert_eq(oti_select(NULL, (struct sockaddr *)&v4), T);
	env_restore(&saved);

	cr_assert_eq(oti_no_rdma(NULL, NULL, 0, 0, 0), -EOPNOTSUPP);

	T->query_caps(&caps);
	cr_assert(caps.flags & OTI_CAP_RDMA_READ);
	cr_assert(caps.flags & OTI_CAP_RDMA_WRITE);
	cr_assert(caps.flags & OTI_CAP_SOFTWARE);
	cr_assert_not(caps.flags & OTI_CAP_IWARP_RULES);
	cr_assert_gt(caps.max_private_data, 64);
	cr_assert_leq(caps.max_private_data, OTI_MAX_PRIVATE_DATA);
	cr_assert_gt(caps.max_inline, 0);
	cr_assert_geq(caps.max_send_wr, NRX);
	cr_assert_geq(caps.max_recv_wr, NRX);
	cr_assert_geq(caps.max_msg_size, 1u << 20);

	/* fini then init again works. */
	oti_fini();
	cr_assert_eq(oti_init(), n);
}

Test(tcpf, port_mapping, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage name;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	uint16_t app = port_of(&name);

	/* The real TCP listener is at app + offset. */
	struct sockaddr_storage tcp = mkaddr(AF_INET, "127.0.0.1", (uint16_t)(app + offset()));
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&tcp, salen(&tcp)), 0,
		     "no TCP listener at %u + %u: %s", app, offset(), strerror(errno));
	close(fd);
	settle();
	cr_assert_eq(l->h, l->t);
	untrack_lis(l);

	/* An explicit application port P: a native listener on P and the
	 * SDP listener for P coexist.  (Retried: another process may take
	 * the free port first.) */
	uint16_t t = 0, p = 0;
	int nfd = -1;
	bool native = false;
	struct oti_listener *lp = NULL;
	for (int tries = 0; tries < 5 && !lp; tries++) {
		t = free_tcp_port(AF_INET, "127.0.0.1");
		p = (uint16_t)(t - offset());
		cr_assert_neq(p, 0);
		struct sockaddr_storage nat = mkaddr(AF_INET, "127.0.0.1", p);
		if (nfd >= 0)
			close(nfd);
		nfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		native = bind(nfd, (struct sockaddr *)&nat, salen(&nat)) == 0 &&
			 listen(nfd, 4) == 0;
		int ret = T->listen((struct sockaddr *)&nat, salen(&nat), 16, 0, &lp);
		cr_assert(ret == 0 || ret == -EADDRINUSE, "listen: %d", ret);
	}
	cr_assert_not_null(lp);
	l = track_lis(lp);
	socklen_t nlen = sizeof(name);
	cr_assert_eq(T->listener_name(lp, (struct sockaddr *)&name, &nlen), 0);
	cr_assert_eq(port_of(&name), p);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	tcp = mkaddr(AF_INET, "127.0.0.1", t);
	cr_assert_eq(connect(fd, (struct sockaddr *)&tcp, salen(&tcp)), 0);
	close(fd);
	settle();
	if (native)
		cr_log_info("native listener on %u coexists with the SDP one", p);
	close(nfd);

	/* Listening twice on one application port fails as bind(2) does. */
	struct sockaddr_storage again = mkaddr(AF_INET, "127.0.0.1", p);
	struct oti_listener *l2;
	cr_assert_eq(T->listen((struct sockaddr *)&again, salen(&again), 4, 0, &l2), -EADDRINUSE);
	untrack_lis(l);

	/* Another offset moves the TCP port with it. */
	struct env_saved saved = env_change("SDP_TCPF_PORT_OFFSET", "12345");
	l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	tcp = mkaddr(AF_INET, "127.0.0.1", (uint16_t)(port_of(&name) + 12345));
	cr_assert_eq(connect(fd, (struct sockaddr *)&tcp, salen(&tcp)), 0);
	close(fd);
	settle();
	untrack_lis(l);
	env_restore(&saved);
}

Test(tcpf, connect_accept_private_data, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;

	connect_pair(&p, AF_INET, "127.0.0.1");
	close_pair(&p);
}

Test(tcpf, resolved_names_before_connect, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage name, local, peer;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct tep *a = open_to(&name);

	/* After RESOLVED the local IP is known (the engine puts it in its
	 * Hello), and the peer is the application address asked for. */
	cr_assert_eq(T->ep_names(a->ep, &local, &peer), 0);
	cr_assert(same_ip(&local, &name));
	cr_assert(same_ip(&peer, &name));
	cr_assert_eq(port_of(&peer), port_of(&name));
	/* Nothing else is pending: the fd sleeps once armed. */
	assert_quiet(a);
	cr_assert_eq(T->disconnect(a->ep), -ENOTCONN);
	untrack_ep(a);
	untrack_lis(l);
}

Test(tcpf, messages_in_order, .init = tcpf_setup, .fini = tcpf_teardown)
{
	static const uint32_t sizes[] = { 1, 7, 100, 128, 129, 1000, 4096, 9000, 32768, 65536 };
	const size_t n = sizeof(sizes) / sizeof(sizes[0]);
	struct pair p;
	struct oti_caps caps;

	T->query_caps(&caps);
	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, (size_t)RXSLOT * n, 0);
	struct buf btx = mkbuf(p.b, (size_t)RXSLOT * n, 0);

	for (size_t i = 0; i < n; i++) {
		fill(tx.p + i * RXSLOT, sizes[i], (unsigned)i);
		post_send(p.a, &tx, i * RXSLOT, sizes[i], 100 + i,
			  sizes[i] <= caps.max_inline ? OTI_SEND_INLINE : 0);
	}
	/* Sends complete in order, receives complete in posting order. */
	for (size_t i = 0; i < n; i++) {
		struct oti_wc wc = wait_wc(p.a);
		cr_assert_eq(wc.op, OTI_WC_SEND);
		cr_assert_eq(wc.status, 0);
		cr_assert_eq(wc.ctx, 100 + i);
	}
	for (size_t i = 0; i < n; i++) {
		struct oti_wc wc = wait_wc(p.b);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.status, 0, "recv %zu: %d", i, wc.status);
		cr_assert_eq(wc.ctx, i);
		cr_assert_eq(wc.len, sizes[i]);
		cr_assert_arr_eq(p.brx.p + i * RXSLOT, tx.p + i * RXSLOT, sizes[i]);
	}

	/* And the other way, with the receive slots reposted. */
	for (size_t i = 0; i < n; i++) {
		post_recv(p.b, &p.brx, i * RXSLOT, RXSLOT, 200 + i);
		fill(btx.p + i * RXSLOT, sizes[n - 1 - i], (unsigned)(50 + i));
		post_send(p.b, &btx, i * RXSLOT, sizes[n - 1 - i], 300 + i, 0);
	}
	for (size_t i = 0; i < n; i++) {
		struct oti_wc wc = wait_wc(p.a);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.status, 0);
		cr_assert_eq(wc.ctx, i);
		cr_assert_eq(wc.len, sizes[n - 1 - i]);
		cr_assert_arr_eq(p.arx.p + i * RXSLOT, btx.p + i * RXSLOT, sizes[n - 1 - i]);
	}
	for (size_t i = 0; i < n; i++) {
		struct oti_wc wc = wait_wc(p.b);
		cr_assert_eq(wc.op, OTI_WC_SEND);
		cr_assert_eq(wc.ctx, 300 + i);
	}
	close_pair(&p);
	freebuf(&tx);
	freebuf(&btx);
}

Test(tcpf, rdma_write_then_send, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf sink = mkbuf(p.b, 256 * 1024, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	struct buf src = mkbuf(p.a, 256 * 1024, 0);
	struct buf note = mkbuf(p.a, 64, 0);
	const size_t off = 1000, len = 200 * 1024;

	memset(sink.p, 0xee, sink.len);
	fill(src.p, len, 9);
	/* The engine learns rkey/raddr from the peer's messages. */
	uint64_t raddr = sink.mr->raddr_base + off;
	struct oti_sge sge = { .addr = src.p, .len = (uint32_t)len, .mr = src.mr };
	cr_assert_eq(T->rdma_write(p.a->ep, &sge, raddr, sink.mr->rkey, 77), 0);
	memcpy(note.p, "write done", 11);
	post_send(p.a, &note, 0, 11, 78, OTI_SEND_INLINE);

	/* The send arrives after the write has landed. */
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.op, OTI_WC_RECV);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, 11);
	cr_assert_str_eq((char *)p.brx.p, "write done");
	cr_assert_arr_eq(sink.p + off, src.p, len);
	cr_assert_eq(sink.p[off - 1], 0xee);
	cr_assert_eq(sink.p[off + len], 0xee);

	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RDMA_WRITE);
	cr_assert_eq(wc.ctx, 77);
	cr_assert_eq(wc.status, 0);
	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_SEND);
	cr_assert_eq(wc.ctx, 78);
	close_pair(&p);
	freebuf(&sink);
	freebuf(&src);
	freebuf(&note);
}

Test(tcpf, rdma_read, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf src = mkbuf(p.b, 128 * 1024, OTI_ACCESS_REMOTE_READ);
	struct buf dst = mkbuf(p.a, 128 * 1024,
			       OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	const size_t off = 512, len = 96 * 1024 + 3;

	fill(src.p, src.len, 4);
	memset(dst.p, 0x11, dst.len);
	struct oti_sge sge = { .addr = dst.p + 8, .len = (uint32_t)len, .mr = dst.mr };
	cr_assert_eq(T->rdma_read(p.a->ep, &sge, src.mr->raddr_base + off, src.mr->rkey, 55), 0);
	struct oti_wc wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RDMA_READ);
	cr_assert_eq(wc.ctx, 55);
	cr_assert_eq(wc.status, 0);
	cr_assert_arr_eq(dst.p + 8, src.p + off, len);
	cr_assert_eq(dst.p[7], 0x11);
	cr_assert_eq(dst.p[8 + len], 0x11);
	/* The target side saw no completion for it. */
	cr_assert_eq(p.b->wch, p.b->wct);
	close_pair(&p);
	freebuf(&src);
	freebuf(&dst);
}

Test(tcpf, reject_with_data, .init = tcpf_setup, .fini = tcpf_teardown)
{
	static const char why[] = "no such service here";
	struct sockaddr_storage name;
	struct oti_event ev;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);

	struct tep *a = open_to(&name);
	cr_assert_eq(T->connect(a->ep, "hi", 2), 0);
	struct treq r = wait_connreq(l);
	cr_assert_eq(r.len, 2);
	cr_assert_eq(T->reject(l->l, r.req, why, sizeof(why)), 0);
	wait_event_type(a, OTI_EV_REJECTED, &ev);
	cr_assert_eq(ev.status, -ECONNREFUSED);
	cr_assert_eq(ev.private_data_len, sizeof(why));
	cr_assert_arr_eq(ev.private_data, why, sizeof(why));
	assert_quiet(a);
	cr_assert_eq(a->evh, a->evt);
	untrack_ep(a);

	/* Empty reject data is still a reject, not "nobody listens". */
	a = open_to(&name);
	cr_assert_eq(T->connect(a->ep, NULL, 0), 0);
	r = wait_connreq(l);
	cr_assert_eq(r.len, 0);
	cr_assert_eq(T->reject(l->l, r.req, NULL, 0), 0);
	wait_event_type(a, OTI_EV_REJECTED, &ev);
	cr_assert_eq(ev.status, -ECONNREFUSED);
	cr_assert_eq(ev.private_data_len, 0);
	untrack_ep(a);

	/* A maximal reject payload goes through whole. */
	struct oti_caps caps;
	uint8_t big[OTI_MAX_PRIVATE_DATA];
	T->query_caps(&caps);
	fill(big, caps.max_private_data, 3);
	a = open_to(&name);
	cr_assert_eq(T->connect(a->ep, big, caps.max_private_data), 0);
	r = wait_connreq(l);
	cr_assert_eq(r.len, caps.max_private_data);
	cr_assert_arr_eq(r.pdata, big, caps.max_private_data);
	cr_assert_eq(T->reject(l->l, r.req, big, caps.max_private_data), 0);
	wait_event_type(a, OTI_EV_REJECTED, &ev);
	cr_assert_eq(ev.private_data_len, caps.max_private_data);
	cr_assert_arr_eq(ev.private_data, big, caps.max_private_data);
	untrack_ep(a);
	untrack_lis(l);
}

/* A request refused after its ep was opened (the engine could not set the
 * connection up): the active side gets the reject and its data, and the
 * passive ep can no longer accept. */
Test(tcpf, ep_reject_after_open, .init = tcpf_setup, .fini = tcpf_teardown)
{
	static const char why[] = "lsdp\1\2";
	struct sockaddr_storage name;
	struct oti_event ev;
	struct oti_ep *ep;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct tep *a = open_to(&name);

	cr_assert_eq(T->connect(a->ep, "hi", 2), 0);
	struct treq r = wait_connreq(l);
	cr_assert_eq(T->ep_accept_open(l->l, r.req, &ep), 0);
	struct tep *b = track_ep(ep);
	cr_assert_eq(T->ep_reject(ep, why, sizeof(why)), 0);
	cr_assert_eq(T->accept(ep, NULL, 0), -EINVAL);
	cr_assert_eq(T->ep_reject(ep, why, sizeof(why)), -EINVAL);
	wait_event_type(a, OTI_EV_REJECTED, &ev);
	cr_assert_eq(ev.status, -ECONNREFUSED);
	cr_assert_eq(ev.private_data_len, sizeof(why));
	cr_assert_arr_eq(ev.private_data, why, sizeof(why));
	untrack_ep(b);
	untrack_ep(a);
	untrack_lis(l);
}

Test(tcpf, listener_close_rejects_pending, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage name;
	struct oti_event ev;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct tep *a = open_to(&name);

	cr_assert_eq(T->connect(a->ep, "x", 1), 0);
	(void)wait_connreq(l);
	/* The request is pending, never accepted nor rejected. */
	untrack_lis(l);
	wait_event_type(a, OTI_EV_REJECTED, &ev);
	cr_assert_eq(ev.status, -ECONNREFUSED);
	untrack_ep(a);
}

/* A shared listener not taking (listener_take off: no process accepting,
 * doc/fork.md) leaves a connection in the kernel's queue, its fd quiet;
 * taking again, the request comes. */
Test(tcpf, listener_take_off_leaves_queue, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage name;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct pollfd pfd = { .fd = T->listener_fd(l->l), .events = POLLIN };

	T->listener_take(l->l, false);
	struct tep *a = open_to(&name);

	cr_assert_eq(T->connect(a->ep, "x", 1), 0);
	pump_ep(a);
	cr_assert_eq(poll(&pfd, 1, 200), 0, "a listener not taking reports a connection");
	pump_lis(l);
	cr_assert_eq(l->t, 0, "a listener not taking took a connection");
	T->listener_take(l->l, true);
	T->listener_take(l->l, true);	/* twice: no change */
	struct treq r = wait_connreq(l);

	cr_assert_eq(r.len, 1);
	cr_assert_eq(T->reject(l->l, r.req, NULL, 0), 0);
	untrack_ep(a);
	untrack_lis(l);
}

Test(tcpf, unreachable_refused, .init = tcpf_setup, .fini = tcpf_teardown)
{
	uint16_t t = free_tcp_port(AF_INET, "127.0.0.1");
	struct sockaddr_storage dst = mkaddr(AF_INET, "127.0.0.1", (uint16_t)(t - offset()));
	struct oti_event ev;
	struct tep *a = open_to(&dst);

	cr_assert_eq(T->connect(a->ep, "anyone?", 7), 0);
	wait_event_type(a, OTI_EV_UNREACHABLE, &ev);
	cr_assert_eq(ev.status, -ECONNREFUSED);
	/* One terminal event, then quiet. */
	assert_quiet(a);
	cr_assert_eq(a->evh, a->evt);
	untrack_ep(a);
}

Test(tcpf, disconnect_after_sends, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct oti_event ev;
	const int n = 8;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, (size_t)RXSLOT * n, 0);
	for (int i = 0; i < n; i++) {
		fill(tx.p + (size_t)i * RXSLOT, RXSLOT, (unsigned)i);
		post_send(p.a, &tx, (size_t)i * RXSLOT, RXSLOT, (uint64_t)i, 0);
	}
	/* Straight after posting: what was posted still arrives. */
	cr_assert_eq(T->disconnect(p.a->ep), 0);

	int data_seq = 0;
	for (int i = 0; i < n; i++) {
		struct oti_wc wc = wait_wc(p.b);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.status, 0, "recv %d: %d", i, wc.status);
		cr_assert_eq(wc.len, RXSLOT);
		cr_assert_arr_eq(p.brx.p + (size_t)i * RXSLOT, tx.p + (size_t)i * RXSLOT, RXSLOT);
		data_seq = p.b->last_seq;
	}
	wait_event_type(p.b, OTI_EV_DISCONNECTED, &ev);
	/* No completion carries data after DISCONNECTED. */
	cr_assert_gt(p.b->last_seq, data_seq);
	/* The passive side's remaining receives are flushed. */
	for (int i = n; i < NRX; i++) {
		struct oti_wc wc = wait_wc(p.b);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.status, -ECANCELED);
		cr_assert_eq(wc.ctx, (uint64_t)i);
	}
	/* The active side: its sends completed, its receives flushed, and it
	 * sees DISCONNECTED too. */
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);
	int sends = 0, flushed = 0;
	while (sends + flushed < n + NRX) {
		struct oti_wc wc = wait_wc(p.a);
		if (wc.op == OTI_WC_SEND) {
			cr_assert_eq(wc.status, 0);
			cr_assert_eq(wc.ctx, (uint64_t)sends);
			sends++;
		} else {
			cr_assert_eq(wc.op, OTI_WC_RECV);
			cr_assert_eq(wc.status, -ECANCELED);
			flushed++;
		}
	}
	assert_quiet(p.a);
	assert_quiet(p.b);
	/* What is posted now is flushed. */
	post_send(p.a, &tx, 0, 1, 77, 0);
	struct oti_wc wc = wait_wc(p.a);
	cr_assert_eq(wc.ctx, 77);
	cr_assert_eq(wc.status, -ECANCELED);
	cr_assert_eq(T->disconnect(p.a->ep), 0);
	close_pair(&p);
	freebuf(&tx);
}

Test(tcpf, close_is_seen_by_peer, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct oti_event ev;

	connect_pair(&p, AF_INET, "127.0.0.1");
	untrack_ep(p.b);
	freebuf(&p.brx);

	wait_event(p.a, &ev);
	cr_assert_eq(ev.type, OTI_EV_DISCONNECTED);
	for (int i = 0; i < NRX; i++) {
		struct oti_wc wc = wait_wc(p.a);
		cr_assert_eq(wc.status, -ECANCELED);
	}
	assert_quiet(p.a);
	untrack_ep(p.a);
	untrack_lis(p.l);
	freebuf(&p.arx);
}

Test(tcpf, fd_wakes_after_arm, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct pollfd pfd;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, 65536, 0);

	/* Idle: drained and armed, the fds stay quiet (no spinning). */
	progress(0);
	cr_assert_eq(T->ep_arm(p.a->ep), 0);
	cr_assert_eq(T->ep_arm(p.b->ep), 0);
	pfd.fd = T->ep_fd(p.b->ep);
	pfd.events = POLLIN;
	cr_assert_eq(poll(&pfd, 1, 200), 0, "idle ep fd is readable");
	pfd.fd = T->ep_fd(p.a->ep);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "idle ep fd is readable");

	for (int round = 0; round < 3; round++) {
		uint32_t len = round == 0 ? 5 : (round == 1 ? 4000 : 65536);

		cr_assert_eq(T->ep_arm(p.b->ep), 0);
		fill(tx.p, len, (unsigned)round);
		post_send(p.a, &tx, 0, len, 1, 0);
		/* Only the sender is driven; B's fd must wake by itself. */
		long end = now_ms() + WAIT_MS;
		for (;;) {
			struct pollfd two[2] = {
				{ .fd = T->ep_fd(p.b->ep), .events = T->ep_wait_events(p.b->ep) },
				{ .fd = T->ep_fd(p.a->ep), .events = T->ep_wait_events(p.a->ep) },
			};
			pump_ep(p.a);
			if (T->ep_arm(p.a->ep) == -EAGAIN)
				continue;
			cr_assert_geq(poll(two, 2, 100), 0);
			if (two[0].revents & POLLIN)
				break;
			cr_assert_lt(now_ms(), end, "ep fd did not become readable");
		}
		struct oti_wc wc = wait_wc(p.b);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.len, len);
		cr_assert_arr_eq(p.brx.p + wc.ctx * RXSLOT, tx.p, len);
		post_recv(p.b, &p.brx, wc.ctx * RXSLOT, RXSLOT, wc.ctx);
		wc = wait_wc(p.a);
		cr_assert_eq(wc.op, OTI_WC_SEND);
	}
	close_pair(&p);
	freebuf(&tx);
}

Test(tcpf, ipv6_loopback, .init = tcpf_setup, .fini = tcpf_teardown)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage lo = mkaddr(AF_INET6, "::1", 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&lo, salen(&lo)) < 0) {
		if (fd >= 0)
			close(fd);
		cr_skip_test("no IPv6 loopback");
	}
	close(fd);

	struct pair p;
	connect_pair(&p, AF_INET6, "::1");
	struct buf tx = mkbuf(p.a, 4096, 0);
	fill(tx.p, 4096, 6);
	post_send(p.a, &tx, 0, 4096, 9, 0);
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.status, 0);
	cr_assert_arr_eq(p.brx.p, tx.p, 4096);
	close_pair(&p);
	freebuf(&tx);
}

/* The transport must work on the host's real addresses, not just lo. */
Test(tcpf, non_loopback_address, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct ifaddrs *ifa, *i;
	char ip[INET_ADDRSTRLEN] = "";

	cr_assert_eq(getifaddrs(&ifa), 0);
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)i->ifa_addr;
		if ((ntohl(s4->sin_addr.s_addr) >> 24) == 127)
			continue;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		break;
	}
	freeifaddrs(ifa);
	if (!ip[0])
		cr_skip_test("no non-loopback IPv4 address");

	struct pair p;
	connect_pair(&p, AF_INET, ip);
	struct buf tx = mkbuf(p.a, 100, 0);
	fill(tx.p, 100, 1);
	post_send(p.a, &tx, 0, 100, 9, OTI_SEND_INLINE);
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, 100);
	close_pair(&p);
	freebuf(&tx);
}

/* Several connections at once, each with its own queues, one listener. */
Test(tcpf, many_connections, .init = tcpf_setup, .fini = tcpf_teardown)
{
	enum { N = 24 };
	struct sockaddr_storage name;
	struct oti_event ev;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct tep *a[N], *b[N];
	struct buf arx[N], btx[N];

	for (int i = 0; i < N; i++) {
		a[i] = open_to(&name);
		arx[i] = mkbuf(a[i], 64, OTI_ACCESS_LOCAL_WRITE);
		post_recv(a[i], &arx[i], 0, 64, (uint64_t)i);
		uint8_t id = (uint8_t)i;
		cr_assert_eq(T->connect(a[i]->ep, &id, 1), 0);
	}
	for (int i = 0; i < N; i++) {
		struct treq r = wait_connreq(l);
		struct oti_ep *ep;

		cr_assert_eq(r.len, 1);
		int who = r.pdata[0];
		cr_assert_lt(who, N);
		cr_assert_eq(T->ep_accept_open(l->l, r.req, &ep), 0);
		b[who] = track_ep(ep);
		btx[who] = mkbuf(b[who], 64, 0);
		cr_assert_eq(T->accept(ep, NULL, 0), 0);
	}
	for (int i = 0; i < N; i++) {
		wait_event_type(a[i], OTI_EV_ESTABLISHED, &ev);
		wait_event_type(b[i], OTI_EV_ESTABLISHED, &ev);
		btx[i].p[0] = (uint8_t)i;
		post_send(b[i], &btx[i], 0, 1, 0, 0);
	}
	for (int i = 0; i < N; i++) {
		struct oti_wc wc = wait_wc(a[i]);
		cr_assert_eq(wc.status, 0);
		cr_assert_eq(arx[i].p[0], i);
	}
	for (int i = 0; i < N; i++) {
		untrack_ep(a[i]);
		untrack_ep(b[i]);
		freebuf(&arx[i]);
		freebuf(&btx[i]);
	}
	untrack_lis(l);
}

/* A message longer than the receive buffer: an error, then the ep is down. */
Test(tcpf, message_longer_than_buffer, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct oti_event ev;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, RXSLOT + 4096, 0);
	post_send(p.a, &tx, 0, RXSLOT + 4096, 1, 0);
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.op, OTI_WC_RECV);
	cr_assert_eq(wc.status, -EMSGSIZE);
	cr_assert_eq(wc.ctx, 0);
	wait_event_type(p.b, OTI_EV_DISCONNECTED, &ev);
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);
	close_pair(&p);
	freebuf(&tx);
}

/*
 * An RDMA write outside what the peer allowed: the write completes locally
 * (completion means "handed to TCP"), then the target drops the connection.
 */
Test(tcpf, rdma_access_violation_drops_connection, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct oti_event ev;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf sink = mkbuf(p.b, 4096, OTI_ACCESS_LOCAL_WRITE);
	struct buf src = mkbuf(p.a, 4096, 0);
	struct oti_sge sge = { .addr = src.p, .len = 4096, .mr = src.mr };

	memset(sink.p, 0x5a, sink.len);
	fill(src.p, src.len, 2);
	cr_assert_eq(T->rdma_write(p.a->ep, &sge, sink.mr->raddr_base, sink.mr->rkey, 5), 0);
	wait_event_type(p.b, OTI_EV_DISCONNECTED, &ev);
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);
	assert_quiet(p.a);
	assert_quiet(p.b);
	cr_assert_eq(sink.p[0], 0x5a);
	cr_assert_eq(sink.p[4095], 0x5a);
	close_pair(&p);
	freebuf(&sink);
	freebuf(&src);
}

/*
 * Megabytes both ways at once, with the receiver's buffers as the only
 * flow control (as SDP credits are): socket buffers fill up, and the data
 * must keep moving on fd wake-ups alone.
 */
Test(tcpf, bulk_both_ways, .init = tcpf_setup, .fini = tcpf_teardown)
{
	enum { MSGS = 256 };
	struct pair p;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct tep *side[2] = { p.a, p.b };
	struct buf rx[2] = { p.arx, p.brx };
	struct buf tx[2] = {
		mkbuf(p.a, (size_t)RXSLOT * NRX, 0),
		mkbuf(p.b, (size_t)RXSLOT * NRX, 0),
	};
	int sent[2] = { 0, 0 }, done[2] = { 0, 0 }, got[2] = { 0, 0 };
	long end = now_ms() + 4 * WAIT_MS;

	while (got[0] < MSGS || got[1] < MSGS || done[0] < MSGS || done[1] < MSGS) {
		bool busy = false;

		cr_assert_lt(now_ms(), end, "bulk transfer stalled at %d/%d %d/%d", got[0], got[1],
			     done[0], done[1]);
		for (int s = 0; s < 2; s++) {
			struct tep *me = side[s];
			int peer = !s;

			/* A send only when the peer has a buffer posted, and
			 * a tx slot is free (sent - done < NRX). */
			while (sent[s] < MSGS && sent[s] < got[peer] + NRX &&
			       sent[s] - done[s] < NRX) {
				size_t slot = (size_t)(sent[s] % NRX) * RXSLOT;

				fill(tx[s].p + slot, RXSLOT, (unsigned)(sent[s] * 2 + s));
				post_send(me, &tx[s], slot, RXSLOT, (uint64_t)sent[s], 0);
				sent[s]++;
				busy = true;
			}
			while (me->wch < me->wct) {
				struct oti_wc wc = me->wc[me->wch++ % MAXQ];

				busy = true;
				cr_assert_eq(wc.status, 0);
				if (wc.op == OTI_WC_SEND) {
					cr_assert_eq(wc.ctx, (uint64_t)done[s]);
					done[s]++;
					continue;
				}
				cr_assert_eq(wc.op, OTI_WC_RECV);
				cr_assert_eq(wc.len, RXSLOT);
				uint8_t expect[64];
				fill(expect, sizeof(expect), (unsigned)(got[s] * 2 + peer));
				cr_assert_arr_eq(rx[s].p + wc.ctx * RXSLOT, expect, sizeof(expect));
				got[s]++;
				post_recv(me, &rx[s], wc.ctx * RXSLOT, RXSLOT, wc.ctx);
			}
		}
		if (!busy)
			progress((int)(end - now_ms()) + 1);
	}
	close_pair(&p);
	freebuf(&tx[0]);
	freebuf(&tx[1]);
}

/*
 * RDMA far larger than the socket buffers: the initiator's socket fills,
 * and both sides move on only when their fds wake them.
 */
Test(tcpf, large_rdma, .init = tcpf_setup, .fini = tcpf_teardown)
{
	const size_t len = 24u << 20;
	struct pair p;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf remote = mkbuf(p.b, len,
				  OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE |
				  OTI_ACCESS_REMOTE_READ);
	struct buf local = mkbuf(p.a, len, OTI_ACCESS_LOCAL_WRITE);
	struct oti_sge sge = { .addr = local.p, .len = (uint32_t)len, .mr = local.mr };

	fill(local.p, len, 21);
	cr_assert_eq(T->rdma_write(p.a->ep, &sge, remote.mr->raddr_base, remote.mr->rkey, 1), 0);
	post_send(p.a, &local, 0, 16, 2, 0);
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, 16);
	cr_assert(!memcmp(remote.p, local.p, len), "RDMA write data differs");
	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RDMA_WRITE);
	cr_assert_eq(wc.status, 0);
	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_SEND);

	fill(remote.p, len, 22);
	memset(local.p, 0, len);
	cr_assert_eq(T->rdma_read(p.a->ep, &sge, remote.mr->raddr_base, remote.mr->rkey, 3), 0);
	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RDMA_READ);
	cr_assert_eq(wc.status, 0);
	cr_assert(!memcmp(remote.p, local.p, len), "RDMA read data differs");
	close_pair(&p);
	freebuf(&remote);
	freebuf(&local);
}

/*
 * Threads, each with its own connection, all on the shared fabric and
 * domain, as the engine runs connections from several threads at once.
 * Each worker is its own little progress loop; no Criterion asserts off the
 * main thread, a worker reports what went wrong instead.
 */
struct mt_worker {
	pthread_t tid;
	int id;
	char failed[160];
};

#define MT_FAIL(w, ...)                                                   \
	do {                                                              \
		snprintf((w)->failed, sizeof((w)->failed), __VA_ARGS__); \
		goto out;                                                 \
	} while (0)

/* Wait until ep's next event (other objects are driven meanwhile). */
static int mt_drive(struct oti_ep **eps_, int neps, struct oti_listener *l,
		    struct oti_connreq **req, struct oti_event *ev, int ev_on,
		    struct oti_wc *wc, int wc_on)
{
	long end = now_ms() + WAIT_MS;

	for (;;) {
		struct pollfd pfd[4];
		int n = 0, again = 0;

		if (l && req) {
			uint8_t pd[OTI_MAX_PRIVATE_DATA];
			size_t len;
			struct sockaddr_storage peer;
			int ret = T->get_connreq(l, req, pd, &len, &peer);

			if (ret == 0)
				return 0;
			if (ret != -EAGAIN)
				return ret;
		}
		if (ev_on >= 0) {
			int ret = T->get_event(eps_[ev_on], ev);

			if (ret != -EAGAIN)
				return ret;
		}
		if (wc_on >= 0) {
			int ret = T->poll_cq(eps_[wc_on], wc, 1);

			if (ret == 1)
				return 0;
			if (ret < 0)
				return ret;
		}
		/* The others are driven by arming (which runs the provider's
		 * progress) without taking their events or completions. */
		for (int i = 0; i < neps; i++) {
			if (!eps_[i])
				continue;
			if (T->ep_arm(eps_[i]) == -EAGAIN)
				again = 1;
			pfd[n].fd = T->ep_fd(eps_[i]);
			pfd[n++].events = T->ep_wait_events(eps_[i]);
		}
		if (l) {
			if (T->listener_arm(l) == -EAGAIN)
				again = 1;
			pfd[n].fd = T->listener_fd(l);
			pfd[n++].events = POLLIN;
		}
		if (now_ms() > end)
			return -ETIMEDOUT;
		if (!again)
			poll(pfd, (nfds_t)n, (int)(end - now_ms()) + 1);
	}
}

static void *mt_run(void *arg)
{
	struct mt_worker *w = arg;
	struct sockaddr_storage ss = mkaddr(AF_INET, "127.0.0.1", 0);
	struct oti_listener *l = NULL;
	struct oti_ep *ep[2] = { NULL, NULL };
	struct oti_mr *mr[2] = { NULL, NULL };
	struct oti_connreq *req;
	struct oti_event ev;
	struct oti_wc wc;
	static __thread uint8_t mem[2][2][4096];
	socklen_t len = sizeof(ss);
	int ret;

	if ((ret = T->listen((struct sockaddr *)&ss, salen(&ss), 4, 0, &l)))
		MT_FAIL(w, "listen %d", ret);
	T->listener_name(l, (struct sockaddr *)&ss, &len);
	if ((ret = T->ep_open((struct sockaddr *)&ss, salen(&ss), NULL, 0, &ep[0])))
		MT_FAIL(w, "ep_open %d", ret);
	if ((ret = mt_drive(ep, 2, l, NULL, &ev, 0, NULL, -1)) || ev.type != OTI_EV_RESOLVED)
		MT_FAIL(w, "resolved %d/%d", ret, ev.type);
	if ((ret = T->mr_reg(ep[0], mem[0], sizeof(mem[0]), OTI_ACCESS_LOCAL_WRITE, &mr[0])))
		MT_FAIL(w, "mr_reg %d", ret);
	if ((ret = T->connect(ep[0], &w->id, sizeof(w->id))))
		MT_FAIL(w, "connect %d", ret);
	if ((ret = mt_drive(ep, 2, l, &req, NULL, -1, NULL, -1)))
		MT_FAIL(w, "connreq %d", ret);
	if ((ret = T->ep_accept_open(l, req, &ep[1])))
		MT_FAIL(w, "accept_open %d", ret);
	if ((ret = T->mr_reg(ep[1], mem[1], sizeof(mem[1]), OTI_ACCESS_LOCAL_WRITE, &mr[1])))
		MT_FAIL(w, "mr_reg %d", ret);
	if ((ret = T->accept(ep[1], NULL, 0)))
		MT_FAIL(w, "accept %d", ret);
	for (int s = 0; s < 2; s++)
		if ((ret = mt_drive(ep, 2, NULL, NULL, &ev, s, NULL, -1)) ||
		    ev.type != OTI_EV_ESTABLISHED)
			MT_FAIL(w, "established %d: %d/%d", s, ret, ev.type);

	/* Ping-pong: each side answers what it receives. */
	for (int i = 0; i < 200; i++) {
		int from = i & 1, to = !from;
		struct oti_sge rx = { .addr = mem[to][1], .len = 4096, .mr = mr[to] };
		struct oti_sge tx = { .addr = mem[from][0], .len = 1 + (uint32_t)(i * 37 % 4000),
				      .mr = mr[from] };

		if ((ret = T->post_recv(ep[to], &rx, (uint64_t)i)))
			MT_FAIL(w, "post_recv %d", ret);
		memset(mem[from][0], w->id * 7 + i, tx.len);
		if ((ret = T->post_send(ep[from], &tx, (uint64_t)i, 0)))
			MT_FAIL(w, "post_send %d", ret);
		if ((ret = mt_drive(ep, 2, NULL, NULL, NULL, -1, &wc, to)) || wc.status ||
		    wc.op != OTI_WC_RECV || wc.len != tx.len ||
		    memcmp(mem[to][1], mem[from][0], tx.len))
			MT_FAIL(w, "recv %d: %d/%d", i, ret, wc.status);
		if ((ret = mt_drive(ep, 2, NULL, NULL, NULL, -1, &wc, from)) || wc.status ||
		    wc.op != OTI_WC_SEND)
			MT_FAIL(w, "send %d: %d/%d", i, ret, wc.status);
	}
out:
	for (int s = 0; s < 2; s++) {
		if (ep[s])
			T->ep_close(ep[s]);
		if (mr[s])
			T->mr_dereg(mr[s]);
	}
	if (l)
		T->listener_close(l);
	return NULL;
}

Test(tcpf, threads_share_the_domain, .init = tcpf_setup, .fini = tcpf_teardown)
{
	enum { NT = 6 };
	struct mt_worker w[NT];

	for (int i = 0; i < NT; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		cr_assert_eq(pthread_create(&w[i].tid, NULL, mt_run, &w[i]), 0);
	}
	for (int i = 0; i < NT; i++) {
		pthread_join(w[i].tid, NULL);
		cr_expect_str_empty(w[i].failed, "worker %d: %s", i, w[i].failed);
	}
}

/*
 * Messages and the close are all in B's socket before B looks: the
 * DISCONNECTED the provider finds while reading them must still come after
 * their completions (no completion carries data after DISCONNECTED).
 */
Test(tcpf, disconnected_comes_after_data, .init = tcpf_setup, .fini = tcpf_teardown)
{
	enum { N = 8, LEN = 4096 };
	struct pair p;
	struct oti_event ev;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, (size_t)N * LEN, 0);
	for (int i = 0; i < N; i++) {
		fill(tx.p + (size_t)i * LEN, LEN, (unsigned)i);
		post_send(p.a, &tx, (size_t)i * LEN, LEN, (uint64_t)i, 0);
	}
	cr_assert_eq(T->disconnect(p.a->ep), 0);

	/* Drive A alone until it is down: everything has left it. */
	long end = now_ms() + WAIT_MS;
	while (p.a->evh == p.a->evt) {
		struct pollfd pfd = { .fd = T->ep_fd(p.a->ep), .events = T->ep_wait_events(p.a->ep) };

		pump_ep(p.a);
		if (p.a->evh != p.a->evt || T->ep_arm(p.a->ep) == -EAGAIN)
			continue;
		cr_assert_lt(now_ms(), end, "A never went down");
		poll(&pfd, 1, (int)(end - now_ms()) + 1);
	}
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);

	/* B's engine asks for events first, as one may. */
	int ret, data = 0;
	while ((ret = T->get_event(p.b->ep, &ev)) == -EAGAIN) {
		struct oti_wc wc;
		int n = T->poll_cq(p.b->ep, &wc, 1);

		cr_assert_geq(n, 0);
		if (n == 0) {
			struct pollfd pfd = { .fd = T->ep_fd(p.b->ep),
					      .events = T->ep_wait_events(p.b->ep) };

			if (T->ep_arm(p.b->ep) == 0)
				cr_assert_eq(poll(&pfd, 1, WAIT_MS), 1, "B never woke");
			continue;
		}
		cr_assert_eq(wc.op, OTI_WC_RECV);
		if (wc.status == 0) {
			cr_assert_eq(wc.len, LEN);
			cr_assert_arr_eq(p.brx.p + wc.ctx * RXSLOT, tx.p + wc.ctx * LEN, LEN);
			data++;
		} else {
			cr_assert_eq(wc.status, -ECANCELED);
		}
	}
	cr_assert_eq(ret, 0);
	cr_assert_eq(ev.type, OTI_EV_DISCONNECTED);
	cr_assert_eq(data, N, "%d data completions before DISCONNECTED", data);
	/* And none after it. */
	struct oti_wc wc;
	cr_assert_eq(T->poll_cq(p.b->ep, &wc, 1), 0);
	close_pair(&p);
	freebuf(&tx);
}

/*
 * Work posted while the connection is going away completes with -ECANCELED
 * (as on a verbs QP in error), also work the provider took after it had
 * already seen the close (it would keep such a receive forever), and before
 * the DISCONNECTED event.
 */
Test(tcpf, posts_on_a_dead_connection_are_flushed, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	struct oti_event ev;
	struct oti_wc wc[4];

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, 64, 0);
	untrack_ep(p.b);

	/* Let A's provider find the close, without A reading its events. */
	struct pollfd pfd = { .fd = T->ep_fd(p.a->ep), .events = POLLIN };
	cr_assert_eq(poll(&pfd, 1, WAIT_MS), 1);
	usleep(20000);
	int n = T->poll_cq(p.a->ep, wc, 4);
	cr_assert_geq(n, 0);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(wc[i].status, -ECANCELED);
		p.a->wc[p.a->wct++ % MAXQ] = wc[i];
	}
	post_recv(p.a, &p.arx, 0, 64, 100);
	post_send(p.a, &tx, 0, 64, 101, 0);

	int flushed_rx = 0, flushed_tx = 0;
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);
	int down_seq = p.a->last_seq;
	while (p.a->wch < p.a->wct) {
		struct oti_wc w = wait_wc(p.a);

		cr_assert_eq(w.status, -ECANCELED, "ctx %lu: %d", (unsigned long)w.ctx, w.status);
		cr_assert_lt(p.a->last_seq, down_seq);
		if (w.op == OTI_WC_RECV)
			flushed_rx++;
		else
			flushed_tx++;
	}
	cr_assert_eq(flushed_rx, NRX + 1);
	cr_assert_eq(flushed_tx, 1);

	/* Known dead: posting still works, and flushes. */
	post_recv(p.a, &p.arx, 0, 64, 200);
	post_send(p.a, &tx, 0, 64, 201, OTI_SEND_INLINE);
	struct oti_wc w = wait_wc(p.a);
	cr_assert_eq(w.status, -ECANCELED);
	w = wait_wc(p.a);
	cr_assert_eq(w.status, -ECANCELED);
	assert_quiet(p.a);
	untrack_ep(p.a);
	untrack_lis(p.l);
	freebuf(&p.arx);
	freebuf(&p.brx);
	freebuf(&tx);
}

/*
 * An IPv6 listener with OTI_LISTEN_V6ONLY beside an IPv4 one on the same
 * application port (what asyncio's start_server() and redis do): both are
 * made, each takes its own family's clients.  Without the flag, the IPv6
 * listener is dual-stack and the port is taken.
 */
Test(tcpf, v6only_beside_v4, .init = tcpf_setup, .fini = tcpf_teardown)
{
	int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage lo6 = mkaddr(AF_INET6, "::1", 0);

	if (probe < 0 || bind(probe, (struct sockaddr *)&lo6, salen(&lo6)) < 0) {
		if (probe >= 0)
			close(probe);
		cr_skip_test("no IPv6 loopback");
	}
	close(probe);

	struct sockaddr_storage any4 = mkaddr(AF_INET, "0.0.0.0", 0), name4, name6;
	struct oti_listener *l4, *l6;
	socklen_t len = sizeof(name4);

	cr_assert_eq(T->listen((struct sockaddr *)&any4, salen(&any4), 16, 0, &l4), 0);
	struct tlis *t4 = track_lis(l4);
	cr_assert_eq(T->listener_name(l4, (struct sockaddr *)&name4, &len), 0);
	struct sockaddr_storage any6 = mkaddr(AF_INET6, "::", port_of(&name4));

	cr_assert_eq(T->listen((struct sockaddr *)&any6, salen(&any6), 16, 0, &l6), -EADDRINUSE,
		     "a dual-stack listener took a port an IPv4 listener holds");
	cr_assert_eq(T->listen((struct sockaddr *)&any6, salen(&any6), 16, OTI_LISTEN_V6ONLY, &l6), 0);
	struct tlis *t6 = track_lis(l6);
	len = sizeof(name6);
	cr_assert_eq(T->listener_name(l6, (struct sockaddr *)&name6, &len), 0);
	cr_assert_eq(port_of(&name6), port_of(&name4));

	struct sockaddr_storage to4 = mkaddr(AF_INET, "127.0.0.1", port_of(&name4));
	struct sockaddr_storage to6 = mkaddr(AF_INET6, "::1", port_of(&name4));
	struct tep *c4 = open_to(&to4), *c6 = open_to(&to6);

	cr_assert_eq(T->connect(c4->ep, "4", 1), 0);
	cr_assert_eq(T->connect(c6->ep, "6", 1), 0);
	struct treq r4 = wait_connreq(t4), r6 = wait_connreq(t6);

	cr_assert_eq(r4.pdata[0], '4');
	cr_assert_eq(r4.peer.ss_family, AF_INET);
	cr_assert_eq(r6.pdata[0], '6');
	cr_assert_eq(r6.peer.ss_family, AF_INET6);
	cr_assert_eq(T->reject(l4, r4.req, NULL, 0), 0);
	cr_assert_eq(T->reject(l6, r6.req, NULL, 0), 0);
	untrack_ep(c4);
	untrack_ep(c6);
	untrack_lis(t4);
	untrack_lis(t6);
}

/*
 * A registration belongs to its connection: a peer that learned another
 * connection's key (the key is 32 bits and the offset no secret) cannot
 * reach that memory through its own connection; its write is refused and
 * its connection dropped, the other connection untouched.
 */
Test(tcpf, registrations_are_per_connection, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p1, p2;
	struct oti_event ev;

	connect_pair(&p1, AF_INET, "127.0.0.1");
	connect_pair(&p2, AF_INET, "127.0.0.1");
	struct buf sink = mkbuf(p1.b, 4096, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE |
						 OTI_ACCESS_REMOTE_READ);
	struct buf src = mkbuf(p2.a, 4096, OTI_ACCESS_LOCAL_WRITE);
	struct oti_sge sge = { .addr = src.p, .len = 4096, .mr = src.mr };

	memset(sink.p, 0x5a, sink.len);
	fill(src.p, src.len, 7);
	/* p2's B has no registration with p1's key. */
	cr_assert_eq(T->rdma_write(p2.a->ep, &sge, sink.mr->raddr_base, sink.mr->rkey, 1), 0);
	wait_event_type(p2.b, OTI_EV_DISCONNECTED, &ev);
	cr_assert_eq(sink.p[0], 0x5a);
	cr_assert_eq(sink.p[4095], 0x5a);
	/* Reading it is refused the same way (a fresh pair). */
	struct pair p3;

	connect_pair(&p3, AF_INET, "127.0.0.1");
	struct buf dst = mkbuf(p3.a, 4096, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	struct oti_sge rsge = { .addr = dst.p, .len = 4096, .mr = dst.mr };

	cr_assert_eq(T->rdma_read(p3.a->ep, &rsge, sink.mr->raddr_base, sink.mr->rkey, 2), 0);
	wait_event_type(p3.b, OTI_EV_DISCONNECTED, &ev);
	struct oti_wc wc = wait_wc(p3.a);
	cr_assert_eq(wc.op, OTI_WC_RDMA_READ);
	cr_assert_neq(wc.status, 0);
	/* The owner's own connection still works. */
	struct buf msg = mkbuf(p1.a, 64, 0);

	memcpy(msg.p, "still here", 11);
	post_send(p1.a, &msg, 0, 11, 3, 0);
	wc = wait_wc(p1.b);
	cr_assert_eq(wc.status, 0);
	cr_assert_str_eq((char *)p1.brx.p, "still here");
	close_pair(&p1);
	close_pair(&p2);
	close_pair(&p3);
	freebuf(&sink);
	freebuf(&src);
	freebuf(&dst);
	freebuf(&msg);
}

/* Keys are random: two registrations of the same memory differ, and so
 * do the keys of fresh connections (no counter to guess). */
Test(tcpf, keys_are_random, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	uint32_t keys[64];

	connect_pair(&p, AF_INET, "127.0.0.1");
	for (int i = 0; i < 64; i++) {
		struct buf b = mkbuf(p.a, 64, OTI_ACCESS_REMOTE_READ);

		keys[i] = b.mr->rkey;
		cr_assert_neq(keys[i], 0);
		freebuf(&b);
	}
	int ascending = 0;

	for (int i = 1; i < 64; i++)
		ascending += keys[i] == keys[i - 1] + 1;
	cr_assert_lt(ascending, 4, "keys look sequential");
	close_pair(&p);
}

/* --- a hostile peer, speaking the frames itself (tcpf_wire.h) --- */

/* A raw TCP connection to listener l's TCP port that has sent CONNECT
 * (with private data "raw") and been accepted: the accepted ep in *b,
 * with NRX receive buffers of RXSLOT bytes posted in *brx. */
static int raw_connect(struct tlis *l, const struct sockaddr_storage *name, struct tep **b,
		       struct buf *brx)
{
	struct sockaddr_storage to = *name;
	uint8_t f[TCPF_HDR_LEN + 3];
	struct tcpf_hdr h = { .type = TCPF_CONNECT, .len = 3, .key = TCPF_MAGIC, .id = TCPF_PROTO };
	int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	if (to.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&to)->sin6_port = htons((uint16_t)(port_of(name) + offset()));
	else
		((struct sockaddr_in *)&to)->sin_port = htons((uint16_t)(port_of(name) + offset()));
	cr_assert_eq(connect(fd, (struct sockaddr *)&to, salen(&to)), 0);
	tcpf_hdr_put(f, &h);
	memcpy(f + TCPF_HDR_LEN, "raw", 3);
	cr_assert_eq(write(fd, f, sizeof(f)), (ssize_t)sizeof(f));

	struct treq r = wait_connreq(l);
	struct oti_ep *ep;
	struct oti_event ev;

	cr_assert_eq(r.len, 3);
	cr_assert_eq(T->ep_accept_open(l->l, r.req, &ep), 0);
	*b = track_ep(ep);
	*brx = mkbuf(*b, (size_t)RXSLOT * NRX, OTI_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NRX; i++)
		post_recv(*b, brx, (size_t)i * RXSLOT, RXSLOT, (uint64_t)i);
	cr_assert_eq(T->accept(ep, NULL, 0), 0);
	wait_event_type(*b, OTI_EV_ESTABLISHED, &ev);
	/* The ACCEPT frame. */
	cr_assert_eq(read(fd, f, TCPF_HDR_LEN), TCPF_HDR_LEN);
	tcpf_hdr_get(f, &h);
	cr_assert_eq(h.type, TCPF_ACCEPT);
	return fd;
}

static void raw_send(int fd, const struct tcpf_hdr *h, const void *payload, size_t len)
{
	uint8_t f[TCPF_HDR_LEN];

	tcpf_hdr_put(f, h);
	cr_assert_eq(write(fd, f, sizeof(f)), (ssize_t)sizeof(f));
	if (len)
		cr_assert_eq(write(fd, payload, len), (ssize_t)len);
}

/* The accepted side went down (a reset on the wire for the raw peer),
 * its receives flushed, nothing placed in its registered memory. */
static void expect_dropped(struct tep *b, int fd)
{
	struct oti_event ev;
	char c;

	wait_event_type(b, OTI_EV_DISCONNECTED, &ev);
	cr_assert_neq(ev.status, 0, "a broken rule is not an orderly close");
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	cr_assert_eq(poll(&pfd, 1, WAIT_MS), 1);
	cr_assert_leq(read(fd, &c, 1), 0, "the peer was not cut off");
	assert_quiet(b);
}

Test(tcpf, hostile_frames, .init = tcpf_setup, .fini = tcpf_teardown)
{
	static const struct {
		const char *what;
		struct tcpf_hdr h;
		uint32_t payload;	/* bytes of payload sent after the header */
	} cases[] = {
		{ "unknown frame type", { .type = 99 }, 0 },
		{ "CONNECT again", { .type = TCPF_CONNECT, .key = TCPF_MAGIC, .id = TCPF_PROTO }, 0 },
		{ "ACCEPT out of place", { .type = TCPF_ACCEPT }, 0 },
		{ "SEND longer than the receive", { .type = TCPF_SEND, .len = RXSLOT + 1 }, RXSLOT + 1 },
		{ "WRITE with a key never given", { .type = TCPF_WRITE, .len = 16, .key = 0x12345678 }, 16 },
		{ "READ_REQ with a key never given", { .type = TCPF_READ_REQ, .len = 4, .key = 7 }, 4 },
		{ "READ_REQ malformed", { .type = TCPF_READ_REQ, .len = 9 }, 9 },
		{ "READ_RESP nobody asked for", { .type = TCPF_READ_RESP, .len = 8, .id = 3 }, 8 },
		{ "a 1 GiB SEND header", { .type = TCPF_SEND, .len = 1u << 30 }, 0 },
	};
	struct sockaddr_storage name;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	static uint8_t junk[RXSLOT + 1];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tep *b;
		struct buf brx;
		int fd = raw_connect(l, &name, &b, &brx);

		cr_log_info("case: %s", cases[i].what);
		memset(brx.p, 0x77, brx.len);
		raw_send(fd, &cases[i].h, junk, cases[i].payload);
		expect_dropped(b, fd);
		if (cases[i].h.type == TCPF_SEND && cases[i].payload)
			cr_assert_eq(brx.p[0], 0x77, "%s: bytes were placed", cases[i].what);
		close(fd);
		untrack_ep(b);
		freebuf(&brx);
	}
	/* A region the peer may write, then a write just past its end. */
	struct tep *b;
	struct buf brx;
	int fd = raw_connect(l, &name, &b, &brx);
	struct buf sink = mkbuf(b, 4096, OTI_ACCESS_LOCAL_WRITE | OTI_ACCESS_REMOTE_WRITE);
	struct tcpf_hdr w = { .type = TCPF_WRITE, .len = 16, .key = sink.mr->rkey, .addr = 4090 };

	memset(sink.p, 0x33, sink.len);
	raw_send(fd, &w, junk, 16);
	expect_dropped(b, fd);
	cr_assert_eq(sink.p[4090], 0x33);
	close(fd);
	untrack_ep(b);
	freebuf(&brx);
	freebuf(&sink);

	/* Too many reads at once: refused, not queued without bound. */
	fd = raw_connect(l, &name, &b, &brx);
	sink = mkbuf(b, 1u << 20, OTI_ACCESS_REMOTE_READ);
	for (int i = 0; i < 200; i++) {
		struct tcpf_hdr r = { .type = TCPF_READ_REQ, .len = 4, .key = sink.mr->rkey,
				      .id = (uint32_t)i };
		uint8_t n[4];

		tcpf_put32(n, 1u << 20);
		raw_send(fd, &r, n, 4);
	}
	struct oti_event ev;

	wait_event_type(b, OTI_EV_DISCONNECTED, &ev);
	close(fd);
	untrack_ep(b);
	freebuf(&brx);
	freebuf(&sink);

	/* Listener side: a CONNECT with the wrong magic, one with private
	 * data too large, and a connection that says nothing and closes:
	 * none becomes a request, the listener goes on. */
	struct tcpf_hdr bad[] = {
		{ .type = TCPF_CONNECT, .key = 0xdeadbeef, .id = TCPF_PROTO },
		{ .type = TCPF_CONNECT, .key = TCPF_MAGIC, .id = TCPF_PROTO, .len = OTI_MAX_PRIVATE_DATA + 1 },
		{ .type = TCPF_SEND, .len = 4 },
	};
	for (size_t i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
		struct sockaddr_storage to = mkaddr(AF_INET, "127.0.0.1",
						    (uint16_t)(port_of(&name) + offset()));
		int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		char x;

		cr_assert_eq(connect(c, (struct sockaddr *)&to, salen(&to)), 0);
		if (i < sizeof(bad) / sizeof(bad[0])) {
			raw_send(c, &bad[i], junk, 0);
			struct pollfd pfd = { .fd = c, .events = POLLIN };

			for (int k = 0; k < 50 && poll(&pfd, 1, 0) == 0; k++)
				progress(20);
			cr_assert_leq(read(c, &x, 1), 0, "bad CONNECT %zu: not closed", i);
		}
		close(c);
	}
	settle();
	cr_assert_eq(l->h, l->t, "a bad connection became a request");
	/* And a good one still works. */
	fd = raw_connect(l, &name, &b, &brx);
	struct tcpf_hdr sh = { .type = TCPF_SEND, .len = 5 };

	raw_send(fd, &sh, "hello", 5);
	struct oti_wc wc = wait_wc(b);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, 5);
	cr_assert_arr_eq(brx.p, "hello", 5);
	close(fd);
	untrack_ep(b);
	freebuf(&brx);
	untrack_lis(l);
}


/* --- moving an endpoint to another process (ep_export, ep_import) ---------- */

/* t's ep is no longer the harness's (exported): forget it unclosed. */
static void forget_ep(struct tep *t)
{
	for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++)
		if (eps[i] == t)
			eps[i] = NULL;
	free(t);
}

/* Export t (quiet), then import its description on a copy of its
 * descriptor, the exporter's own copy closed first as another process
 * would leave it: the new ep, tracked, with NRX receives posted in *rx. */
static struct tep *move_ep(struct tep *t, struct buf *rx)
{
	void *blob;
	size_t len;
	int fd, copy;
	struct oti_ep *ep;

	cr_assert_eq(T->ep_export(t->ep, &blob, &len, &fd), 0);
	forget_ep(t);
	copy = dup(fd);
	cr_assert_geq(copy, 0);
	cr_assert_eq(close(fd), 0);
	cr_assert_eq(T->ep_import(blob, len, copy, &ep), 0);
	free(blob);
	struct tep *n = track_ep(ep);
	*rx = mkbuf(n, (size_t)RXSLOT * NRX, OTI_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NRX; i++)
		post_recv(n, rx, (size_t)i * RXSLOT, RXSLOT, (uint64_t)i);
	return n;
}

/* Messages sent before, during and after a move arrive once each, in
 * order, at the new ep, and the new ep's own go out on the same
 * connection: the peer takes no part. */
Test(tcpf, export_import_carries_the_stream, .init = tcpf_setup, .fini = tcpf_teardown)
{
	const int n = 6;
	struct pair p;
	struct buf nrx;

	connect_pair(&p, AF_INET, "127.0.0.1");
	struct buf tx = mkbuf(p.a, (size_t)RXSLOT * n, 0);
	for (int i = 0; i < n; i++)
		fill(tx.p + (size_t)i * RXSLOT, 1000u + (unsigned)i * 9000u, (unsigned)i);
	post_send(p.a, &tx, 0, 1000, 0, 0);
	struct oti_wc wc = wait_wc(p.b);
	cr_assert_eq(wc.len, 1000);
	cr_assert_eq(wait_wc(p.a).ctx, 0);

	/* Busy: a completion not yet taken. */
	struct buf btx = mkbuf(p.b, 4096, 0);
	void *blob;
	size_t len;
	int fd;
	post_send(p.b, &btx, 0, 10, 9, 0);
	cr_assert_eq(T->ep_export(p.b->ep, &blob, &len, &fd), -EBUSY);
	cr_assert_eq(wait_wc(p.b).ctx, 9);
	char ten[10];
	cr_assert_eq(wait_wc(p.a).len, 10);
	memcpy(ten, p.arx.p, 10);
	cr_assert_arr_eq(ten, btx.p, 10);

	/* Sent while the connection has no driver, and after. */
	for (int i = 1; i < 3; i++)
		post_send(p.a, &tx, (size_t)i * RXSLOT, 1000u + (unsigned)i * 9000u, (uint64_t)i, 0);
	struct tep *nb = move_ep(p.b, &nrx);
	p.b = nb;
	for (int i = 3; i < n; i++)
		post_send(p.a, &tx, (size_t)i * RXSLOT, 1000u + (unsigned)i * 9000u, (uint64_t)i, 0);
	for (int i = 1; i < n; i++) {
		wc = wait_wc(nb);
		cr_assert_eq(wc.op, OTI_WC_RECV);
		cr_assert_eq(wc.status, 0);
		cr_assert_eq(wc.ctx, (uint64_t)(i - 1));
		cr_assert_eq(wc.len, 1000u + (unsigned)i * 9000u);
		cr_assert_arr_eq(nrx.p + (size_t)(i - 1) * RXSLOT, tx.p + (size_t)i * RXSLOT,
				 wc.len);
	}
	/* And back. */
	struct buf ntx = mkbuf(nb, 4096, 0);
	fill(ntx.p, 4096, 77);
	post_send(nb, &ntx, 0, 4096, 5, 0);
	cr_assert_eq(wait_wc(nb).ctx, 5);
	wc = wait_wc(p.a);
	while (wc.op == OTI_WC_SEND)
		wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RECV);
	cr_assert_eq(wc.len, 4096);
	cr_assert_arr_eq(p.arx.p + RXSLOT, ntx.p, 4096);
	assert_quiet(nb);
	close_pair(&p);
	freebuf(&nrx);
	freebuf(&tx);
	freebuf(&btx);
	freebuf(&ntx);
}

/* What the ep had read and not yet placed (a message begun, part of a
 * header) moves with it and is placed by the new ep. */
Test(tcpf, export_import_mid_frame, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct sockaddr_storage name;
	struct tlis *l = listen_on(AF_INET, "127.0.0.1", 0, &name);
	struct tep *b;
	struct buf brx, nrx, nrx2;
	uint8_t msg[1000], msg2[300], f[TCPF_HDR_LEN];
	int fd = raw_connect(l, &name, &b, &brx);
	struct tcpf_hdr h = { .type = TCPF_SEND, .len = sizeof(msg) };
	struct tcpf_hdr h2 = { .type = TCPF_SEND, .len = sizeof(msg2) };

	fill(msg, sizeof(msg), 3);
	fill(msg2, sizeof(msg2), 4);
	/* A header and 300 bytes of the payload; the ep reads them. */
	tcpf_hdr_put(f, &h);
	cr_assert_eq(write(fd, f, sizeof(f)), (ssize_t)sizeof(f));
	cr_assert_eq(write(fd, msg, 300), 300);
	settle();
	cr_assert_eq(b->wch, b->wct, "a message half sent completed");
	struct tep *nb = move_ep(b, &nrx);
	freebuf(&brx);
	/* The rest, and 10 bytes of the next header. */
	tcpf_hdr_put(f, &h2);
	cr_assert_eq(write(fd, msg + 300, sizeof(msg) - 300), (ssize_t)(sizeof(msg) - 300));
	cr_assert_eq(write(fd, f, 10), 10);
	struct oti_wc wc = wait_wc(nb);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.ctx, 0);
	cr_assert_eq(wc.len, sizeof(msg));
	cr_assert_arr_eq(nrx.p, msg, sizeof(msg));
	settle();
	struct tep *nb2 = move_ep(nb, &nrx2);
	freebuf(&nrx);
	cr_assert_eq(write(fd, f + 10, sizeof(f) - 10), (ssize_t)(sizeof(f) - 10));
	cr_assert_eq(write(fd, msg2, sizeof(msg2)), (ssize_t)sizeof(msg2));
	wc = wait_wc(nb2);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, sizeof(msg2));
	cr_assert_arr_eq(nrx2.p, msg2, sizeof(msg2));
	/* The new ep sends on the same TCP connection. */
	struct buf tx = mkbuf(nb2, 64, 0);
	fill(tx.p, 64, 5);
	post_send(nb2, &tx, 0, 64, 1, 0);
	cr_assert_eq(wait_wc(nb2).ctx, 1);
	uint8_t got[TCPF_HDR_LEN + 64];
	cr_assert_eq(recv(fd, got, sizeof(got), MSG_WAITALL), (ssize_t)sizeof(got));
	tcpf_hdr_get(got, &h);
	cr_assert_eq(h.type, TCPF_SEND);
	cr_assert_eq(h.len, 64);
	cr_assert_arr_eq(got + TCPF_HDR_LEN, tx.p, 64);
	untrack_ep(nb2);
	freebuf(&nrx2);
	freebuf(&tx);
	close(fd);
	untrack_lis(l);
}

/* Only a connected, quiet ep moves; a bad description is refused and its
 * descriptor closed. */
Test(tcpf, export_refused_unless_quiet, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	void *blob;
	size_t len;
	int fd, pfd[2];
	struct oti_ep *ep;

	connect_pair(&p, AF_INET, "127.0.0.1");
	/* An RDMA read of ours in flight. */
	struct buf src = mkbuf(p.b, 4096, OTI_ACCESS_REMOTE_READ);
	struct buf dst = mkbuf(p.a, 4096, OTI_ACCESS_LOCAL_WRITE);
	struct oti_sge sge = { .addr = dst.p, .len = 100, .mr = dst.mr };
	cr_assert_eq(T->rdma_read(p.a->ep, &sge, src.mr->raddr_base, src.mr->rkey, 1), 0);
	cr_assert_eq(T->ep_export(p.a->ep, &blob, &len, &fd), -EBUSY);
	cr_assert_eq(wait_wc(p.a).status, 0);
	/* Not connected (yet, or any more). */
	struct tep *c = open_to(&p.name);
	cr_assert_eq(T->ep_export(c->ep, &blob, &len, &fd), -ENOTCONN);
	untrack_ep(c);
	cr_assert_eq(T->disconnect(p.a->ep), 0);
	cr_assert_eq(T->ep_export(p.a->ep, &blob, &len, &fd), -ENOTCONN);

	/* Descriptions that are not ours. */
	uint8_t junk[512] = { 0 };
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(s, 0);
	cr_assert_eq(T->ep_import(junk, sizeof(junk), s, &ep), -EINVAL);
	cr_assert_eq(fcntl(s, F_GETFD), -1, "the descriptor was not closed");
	/* A good description on a descriptor that is no stream socket. */
	struct buf nrx;
	struct tep *nb = move_ep(p.b, &nrx);
	p.b = nb;
	cr_assert_eq(T->ep_export(nb->ep, &blob, &len, &fd), 0);
	forget_ep(nb);
	p.b = NULL;
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	close(pfd[1]);
	cr_assert_eq(T->ep_import(blob, len, pfd[0], &ep), -EINVAL);
	cr_assert_eq(fcntl(pfd[0], F_GETFD), -1);
	/* Cut short. */
	s = dup(fd);
	cr_assert_eq(T->ep_import(blob, 8, s, &ep), -EINVAL);
	cr_assert_eq(T->ep_import(blob, len, fd, &ep), 0);
	T->ep_close(ep);
	free(blob);
	untrack_ep(p.a);
	untrack_lis(p.l);
	freebuf(&p.arx);
	freebuf(&p.brx);
	freebuf(&nrx);
	freebuf(&src);
	freebuf(&dst);
}

/* The move a fork makes: the child imports the parent's ep on its copy of
 * the descriptor and serves the connection; the parent's close of its
 * copy does not end it; the peer sees the end only when the child's goes. */
static int child_serves(const void *blob, size_t len, int fd, int done)
{
	struct oti_ep *ep;
	struct oti_mr *mr;
	struct oti_wc wc;
	struct oti_event ev;
	static uint8_t rx[RXSLOT], tx[RXSLOT + 1];
	char c;

	/* The parent has closed its copy: told by the pipe. */
	if (read(done, &c, 1) != 1)
		return 10;
	if (T->ep_import(blob, len, fd, &ep) || T->mr_reg(ep, rx, sizeof(rx), OTI_ACCESS_LOCAL_WRITE, &mr))
		return 11;
	struct oti_sge sge = { .addr = rx, .len = sizeof(rx), .mr = mr };
	if (T->post_recv(ep, &sge, 1))
		return 12;
	for (int spins = 0;; spins++) {
		int n = T->poll_cq(ep, &wc, 1);

		if (n == 1)
			break;
		if (n < 0 || T->get_event(ep, &ev) == 0 || spins > 1000)
			return 13;
		if (T->ep_arm(ep) == 0) {
			struct pollfd p = { .fd = T->ep_fd(ep), .events = T->ep_wait_events(ep) };

			poll(&p, 1, WAIT_MS);
		}
	}
	if (wc.status || wc.op != OTI_WC_RECV || wc.len != 5000)
		return 14;
	/* The message back, one byte longer. */
	memcpy(tx, rx, wc.len);
	tx[wc.len] = 0xee;
	struct oti_mr *tmr;
	if (T->mr_reg(ep, tx, sizeof(tx), 0, &tmr))
		return 15;
	struct oti_sge s2 = { .addr = tx, .len = wc.len + 1, .mr = tmr };
	if (T->post_send(ep, &s2, 2, 0))
		return 16;
	for (int spins = 0;; spins++) {
		int n = T->poll_cq(ep, &wc, 1);

		if (n == 1 && wc.ctx == 2 && wc.status == 0)
			break;
		if (n < 0 || spins > 1000)
			return 17;
		if (T->ep_arm(ep) == 0) {
			struct pollfd p = { .fd = T->ep_fd(ep), .events = T->ep_wait_events(ep) };

			poll(&p, 1, WAIT_MS);
		}
	}
	T->ep_close(ep);
	return 0;
}

Test(tcpf, export_import_across_fork, .init = tcpf_setup, .fini = tcpf_teardown)
{
	struct pair p;
	void *blob;
	size_t len;
	int fd, done[2];
	struct oti_event ev;

	connect_pair(&p, AF_INET, "127.0.0.1");
	cr_assert_eq(T->ep_export(p.b->ep, &blob, &len, &fd), 0);
	forget_ep(p.b);
	p.b = NULL;
	cr_assert_eq(pipe2(done, O_CLOEXEC), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(done[1]);
		_exit(child_serves(blob, len, fd, done[0]));
	}
	close(done[0]);
	free(blob);
	cr_assert_eq(close(fd), 0);
	cr_assert_eq(write(done[1], "x", 1), 1);
	close(done[1]);

	struct buf tx = mkbuf(p.a, 5000, 0);
	fill(tx.p, 5000, 8);
	post_send(p.a, &tx, 0, 5000, 1, 0);
	struct oti_wc wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_SEND);
	cr_assert_eq(wc.status, 0);
	wc = wait_wc(p.a);
	cr_assert_eq(wc.op, OTI_WC_RECV);
	cr_assert_eq(wc.status, 0);
	cr_assert_eq(wc.len, 5001);
	cr_assert_arr_eq(p.arx.p, tx.p, 5000);
	cr_assert_eq(p.arx.p[5000], 0xee);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);
	/* The child's copy was the last. */
	wait_event_type(p.a, OTI_EV_DISCONNECTED, &ev);
	untrack_ep(p.a);
	untrack_lis(p.l);
	freebuf(&p.arx);
	freebuf(&p.brx);
	freebuf(&tx);
}
