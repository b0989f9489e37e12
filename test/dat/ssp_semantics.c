/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ssp_semantics: the DAT iWARP extension's Socket Service Points
 * (dat_iw_ssp_create/free/query, dat_iw_socket_connect) case by case.
 *
 *   ssp_semantics [-P ia_name] [-v]
 *
 * -v prints notes (provider attributes, each case's time); SSP_CASES=10,12
 * in the environment runs only those cases (the others print as skipped).
 *
 * One process, one IA: it plays both sides itself.  Each case makes a TCP
 * connection to the IA's own address (a listening socket bound to it),
 * gives the accepted socket ("passive", whose local IP is the IA's) to
 * dat_iw_ssp_create and the connecting one ("active") to
 * dat_iw_socket_connect; the active side's protocol runs in the
 * provider's progress thread, so this one thread can answer as the
 * passive side.  Every wait is bounded: a provider bug fails a case, it
 * does not hang the program.
 *
 * Output is TAP-like: "1..N", then "ok N name" or "not ok N name: why"
 * per case, "# ..." for notes; exit status 1 if any case failed.  A
 * crash leaves cases unprinted: the plan line tells.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dat2/udat.h>
#include "dat_iw_extensions.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEC 1000000u
#define WAIT_YES (20u * SEC)	/* an event that must come (TCG guests are slow) */
#define WAIT_NO (2500000u)	/* how long we look for an event that must not come */
#define IO_MS 10000		/* socket reads that must succeed */

#define BUF_SIZE (64u << 10)
#define OFF_RECV_P 0		/* passive side's receive slots */
#define OFF_RECV_A 4096		/* active side's receive slots */
#define OFF_SEND 8192		/* send staging */
#define OFF_SRC 16384		/* RDMA write source (active) */
#define OFF_DST 32768		/* RDMA write sink (passive) */
#define RDMA_LEN 16384u

static const char FINAL_MSG[] = "ssp_semantics: final streaming-mode message";

static DAT_IA_HANDLE ia;
static DAT_PZ_HANDLE pz;
static struct sockaddr_storage ia_addr;	/* the IA's address, port 0 */
static socklen_t ia_len;
static struct sockaddr_storage lst_addr;	/* the listening socket's */
static socklen_t lst_len;
static int lfd = -1;
static int verbose;
static int ia_closed;	/* by the last case */
static char why[1024];

/* One case's objects: two sides (p: passive, SSP; a: active). */
struct env {
	DAT_EVD_HANDLE cr_evd, conn_p, conn_a, dto_p, dto_a;
	DAT_EP_HANDLE ep_p, ep_a;
	DAT_IW_SSP_HANDLE ssp;
	int ssp_freed;
	int sock_p, sock_a;	/* -1 when not ours to close */
	char *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
};

/* ---- helpers -------------------------------------------------------- */

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return -1;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static const char *rcname(DAT_RETURN rc)
{
	static char s[160];
	const char *maj = "?", *min = "";

	dat_strerror(rc, &maj, &min);
	snprintf(s, sizeof(s), "0x%08x %s%s%s", (unsigned)rc, maj, *min ? " " : "", min);
	return s;
}

static const char *evname(DAT_EVENT_NUMBER n)
{
	static char s[32];

	switch ((int)n) {
	case DAT_CONNECTION_REQUEST_EVENT: return "CONNECTION_REQUEST";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR: return "ACCEPT_COMPLETION_ERROR";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "TIMED_OUT";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "UNREACHABLE";
	case DAT_DTO_COMPLETION_EVENT: return "DTO_COMPLETION";
	case DAT_IW_SOCKET_DOWN_EVENT: return "DAT_IW_SOCKET_DOWN_EVENT";
	default:
		snprintf(s, sizeof(s), "event 0x%x", (unsigned)n);
		return s;
	}
}

/* rc must be of type `type` (DAT_GET_TYPE) */
static int want(DAT_RETURN rc, DAT_RETURN type, const char *what)
{
	if (DAT_GET_TYPE(rc) != DAT_GET_TYPE(type))
		return bad("%s: got %s, wanted type 0x%08x", what, rcname(rc), (unsigned)type);
	return 0;
}

#define TRY(x) do { if ((x) < 0) return -1; } while (0)
#define OK(rc, what) TRY(want((rc), DAT_SUCCESS, (what)))

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One event from evd within tmo µs; its number must be `num`. */
static int wait_ev(DAT_EVD_HANDLE evd, DAT_TIMEOUT tmo, DAT_EVENT_NUMBER num, DAT_EVENT *ev,
		   const char *what)
{
	DAT_COUNT nmore = 0;
	DAT_RETURN rc;

	memset(ev, 0, sizeof(*ev));
	rc = dat_evd_wait(evd, tmo, 1, ev, &nmore);
	if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
		return bad("%s: no event in %.1f s (wanted %s)", what, tmo / 1e6, evname(num));
	if (rc != DAT_SUCCESS)
		return bad("%s: dat_evd_wait: %s", what, rcname(rc));
	if (ev->event_number != num) {
		if (ev->event_number == DAT_DTO_COMPLETION_EVENT)
			return bad("%s: got DTO_COMPLETION (status %d), wanted %s", what,
				   ev->event_data.dto_completion_event_data.status, evname(num));
		return bad("%s: got %s, wanted %s", what, evname(ev->event_number),
			   evname(num));
	}
	return 0;
}

/* No event on evd for tmo µs. */
static int no_ev(DAT_EVD_HANDLE evd, DAT_TIMEOUT tmo, const char *what)
{
	DAT_EVENT ev;
	DAT_COUNT nmore = 0;
	DAT_RETURN rc = dat_evd_wait(evd, tmo, 1, &ev, &nmore);

	if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
		return 0;
	if (rc == DAT_SUCCESS)
		return bad("%s: unexpected %s", what, evname(ev.event_number));
	return bad("%s: dat_evd_wait: %s (wanted DAT_TIMEOUT_EXPIRED)", what, rcname(rc));
}

/* Nothing queued on evd right now (dequeue). */
static int empty(DAT_EVD_HANDLE evd, const char *what)
{
	DAT_EVENT ev;
	DAT_RETURN rc = dat_evd_dequeue(evd, &ev);

	if (DAT_GET_TYPE(rc) == DAT_QUEUE_EMPTY)
		return 0;
	if (rc == DAT_SUCCESS)
		return bad("%s: an extra %s is queued", what, evname(ev.event_number));
	return bad("%s: dat_evd_dequeue: %s", what, rcname(rc));
}

static int tcp_socket(void)
{
	return socket(ia_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

/* A TCP connection to the IA's own address: *a connected, *p accepted. */
static int tcp_pair(int *a, int *p)
{
	struct pollfd pfd = { .fd = lfd, .events = POLLIN };

	*a = tcp_socket();
	if (*a < 0)
		return bad("socket: %s", strerror(errno));
	if (connect(*a, (struct sockaddr *)&lst_addr, lst_len) < 0)
		return bad("connect to the listener: %s", strerror(errno));
	if (poll(&pfd, 1, IO_MS) != 1)
		return bad("accept: nothing to accept after %d ms", IO_MS);
	*p = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (*p < 0)
		return bad("accept: %s", strerror(errno));
	return 0;
}

static unsigned port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static const char *addr_str(const struct sockaddr *sa)
{
	static char s[2][INET6_ADDRSTRLEN + 8];
	static int i;
	char *o = s[i++ & 1];

	if (!sa)
		return "(null)";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &s4->sin_addr, o, INET6_ADDRSTRLEN);
		sprintf(o + strlen(o), ":%u", ntohs(s4->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &s6->sin6_addr, o, INET6_ADDRSTRLEN);
		sprintf(o + strlen(o), ".%u", ntohs(s6->sin6_port));
	} else {
		sprintf(o, "(family %d)", sa->sa_family);
	}
	return o;
}

static int same_ip(const struct sockaddr *x, const struct sockaddr *y)
{
	if (!x || !y || x->sa_family != y->sa_family)
		return 0;
	if (x->sa_family == AF_INET)
		return ((const struct sockaddr_in *)x)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)y)->sin_addr.s_addr;
	if (x->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)x)->sin6_addr,
			       &((const struct sockaddr_in6 *)y)->sin6_addr, 16);
	return 0;
}

/* Read exactly n bytes within IO_MS. */
static int read_exact(int fd, void *buf, size_t n, const char *what)
{
	size_t got = 0;
	double end = now() + IO_MS / 1e3;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int ms = (int)((end - now()) * 1e3);
		ssize_t r;

		if (ms <= 0 || poll(&pfd, 1, ms) != 1)
			return bad("%s: %zu of %zu bytes after %d ms", what, got, n, IO_MS);
		r = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
		if (r == 0)
			return bad("%s: EOF after %zu of %zu bytes", what, got, n);
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			return bad("%s: recv: %s after %zu of %zu bytes", what, strerror(errno),
				   got, n);
		if (r > 0)
			got += (size_t)r;
	}
	return 0;
}

/* Nothing to read on fd for ms milliseconds (no bytes, no EOF). */
static int no_bytes(int fd, int ms, const char *what)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char b[64];
	ssize_t r;

	if (poll(&pfd, 1, ms) == 0)
		return 0;
	r = recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
	if (r == 0)
		return bad("%s: the socket reads EOF", what);
	if (r < 0)
		return bad("%s: the socket is in error: %s", what,
			   strerror(errno == EAGAIN ? ECONNRESET : errno));
	return bad("%s: %zd unexpected byte(s) on the socket (first 0x%02x)", what, r,
		   (unsigned char)b[0]);
}

static int send_all(int fd, const void *buf, size_t n, const char *what)
{
	ssize_t r = send(fd, buf, n, MSG_NOSIGNAL);

	if (r != (ssize_t)n)
		return bad("%s: send: %s", what, r < 0 ? strerror(errno) : "short");
	return 0;
}

static ino_t ino_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* Has the provider closed fd (whose inode was ino)?  A reused number with
 * another inode counts as closed. */
static int is_closed(int fd, ino_t ino)
{
	if (fcntl(fd, F_GETFD) == -1)
		return errno == EBADF;
	return ino_of(fd) != ino;
}

static DAT_EP_ATTR ep_attr(void)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_message_size = 1u << 20;
	a.max_rdma_size = 1u << 20;
	a.qos = DAT_QOS_BEST_EFFORT;
	a.max_recv_dtos = 8;
	a.max_request_dtos = 8;
	a.max_recv_iov = 1;
	a.max_request_iov = 1;
	a.max_rdma_read_in = 1;
	a.max_rdma_read_out = 1;
	a.max_rdma_read_iov = 1;
	a.max_rdma_write_iov = 1;
	return a;
}

static int env_open(struct env *e)
{
	DAT_EP_ATTR attr = ep_attr();
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(e, 0, sizeof(*e));
	e->sock_p = e->sock_a = -1;
	OK(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &e->cr_evd), "evd_create cr");
	OK(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &e->conn_p),
	   "evd_create conn p");
	OK(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &e->conn_a),
	   "evd_create conn a");
	OK(dat_evd_create(ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &e->dto_p), "evd_create dto p");
	OK(dat_evd_create(ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &e->dto_a), "evd_create dto a");
	OK(dat_ep_create(ia, pz, e->dto_p, e->dto_p, e->conn_p, &attr, &e->ep_p), "ep_create p");
	OK(dat_ep_create(ia, pz, e->dto_a, e->dto_a, e->conn_a, &attr, &e->ep_a), "ep_create a");
	e->buf = aligned_alloc(4096, BUF_SIZE);
	if (!e->buf)
		return bad("out of memory");
	memset(e->buf, 0, BUF_SIZE);
	region.for_va = e->buf;
	OK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_SIZE, pz, DAT_MEM_PRIV_ALL_FLAG,
			  DAT_VA_TYPE_VA, &e->lmr, &e->lctx, &e->rctx, &rlen, &raddr),
	   "lmr_create");
	return 0;
}

static void drain(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	while (evd && dat_evd_dequeue(evd, &ev) == DAT_SUCCESS)
		;
}

/* Free what is left; complain (as a note) only about what fails. */
static void env_close(struct env *e)
{
	DAT_RETURN rc;

	if (ia_closed)
		return;
	if (e->ssp && !e->ssp_freed && (rc = dat_iw_ssp_free(e->ssp)) != DAT_SUCCESS)
		note("cleanup: dat_iw_ssp_free: %s", rcname(rc));
	if (e->ep_p && (rc = dat_ep_free(e->ep_p)) != DAT_SUCCESS)
		note("cleanup: dat_ep_free (passive): %s", rcname(rc));
	if (e->ep_a && (rc = dat_ep_free(e->ep_a)) != DAT_SUCCESS)
		note("cleanup: dat_ep_free (active): %s", rcname(rc));
	if (e->lmr)
		dat_lmr_free(e->lmr);
	free(e->buf);
	DAT_EVD_HANDLE evds[] = { e->cr_evd, e->conn_p, e->conn_a, e->dto_p, e->dto_a };
	for (size_t i = 0; i < sizeof(evds) / sizeof(evds[0]); i++) {
		if (!evds[i])
			continue;
		drain(evds[i]);
		if ((rc = dat_evd_free(evds[i])) != DAT_SUCCESS)
			note("cleanup: dat_evd_free: %s", rcname(rc));
	}
	if (e->sock_p >= 0)
		close(e->sock_p);
	if (e->sock_a >= 0)
		close(e->sock_a);
}

/* The passive side's SSP on a fresh TCP connection; the active side reads
 * the final message (and checks nothing else came). */
static int ssp_up(struct env *e, const void *msg, DAT_COUNT len)
{
	char got[256];

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	OK(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->cr_evd, msg, len, &e->ssp),
	   "dat_iw_ssp_create");
	if (len > 0) {
		TRY(read_exact(e->sock_a, got, (size_t)len, "active side reading the final message"));
		if (memcmp(got, msg, (size_t)len))
			return bad("the final message arrived altered");
	}
	return 0;
}

/* The active side's request; the CR event on the SSP's EVD, checked. */
static int request(struct env *e, DAT_TIMEOUT tmo, DAT_COUNT pdsize, const void *pdata,
		   DAT_CR_HANDLE *cr)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	DAT_CR_ARRIVAL_EVENT_DATA *d;
	DAT_EVENT ev;

	OK(dat_iw_socket_connect(e->ep_a, e->sock_a, tmo, pdsize, pdata), "dat_iw_socket_connect");
	TRY(wait_ev(e->cr_evd, WAIT_YES, DAT_CONNECTION_REQUEST_EVENT, &ev, "connection request"));
	d = &ev.event_data.cr_arrival_event_data;
	getsockname(e->sock_p, (struct sockaddr *)&me, &ml);
	if (d->sp_handle.psp_handle != (DAT_PSP_HANDLE)e->ssp)
		return bad("CR event: sp_handle %p is not the SSP %p", (void *)d->sp_handle.psp_handle,
			   (void *)e->ssp);
	if (!d->cr_handle)
		return bad("CR event: no cr_handle");
	if (d->conn_qual != port_of(&me))
		return bad("CR event: conn_qual %llu, the socket's local port is %u",
			   (unsigned long long)d->conn_qual, port_of(&me));
	if (ev.evd_handle != e->cr_evd)
		note("CR event: evd_handle %p, not the SSP's EVD %p", (void *)ev.evd_handle,
		     (void *)e->cr_evd);
	*cr = d->cr_handle;
	return 0;
}

/* dat_cr_query: private data, local EP, remote address. */
static int check_cr(struct env *e, DAT_CR_HANDLE cr, DAT_COUNT pdsize, const void *pdata)
{
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	DAT_CR_PARAM p;

	memset(&p, 0, sizeof(p));
	OK(dat_cr_query(cr, DAT_CR_FIELD_ALL, &p), "dat_cr_query");
	if (p.private_data_size != pdsize)
		return bad("cr_query: private_data_size %d, the request sent %d",
			   p.private_data_size, pdsize);
	if (pdsize && (!p.private_data || memcmp(p.private_data, pdata, (size_t)pdsize)))
		return bad("cr_query: the private data (%d bytes) differs from what was sent",
			   pdsize);
	if (p.local_ep_handle != e->ep_p)
		return bad("cr_query: local_ep_handle %p, the SSP's EP is %p",
			   (void *)p.local_ep_handle, (void *)e->ep_p);
	getpeername(e->sock_p, (struct sockaddr *)&peer, &pl);
	if (!same_ip(p.remote_ia_address_ptr, (struct sockaddr *)&peer))
		return bad("cr_query: remote_ia_address_ptr %s, the TCP peer is %s",
			   addr_str(p.remote_ia_address_ptr), addr_str((struct sockaddr *)&peer));
	if (port_of((const struct sockaddr_storage *)p.remote_ia_address_ptr) != port_of(&peer))
		return bad("cr_query: remote_ia_address_ptr %s, the TCP peer is %s (port differs)",
			   addr_str(p.remote_ia_address_ptr), addr_str((struct sockaddr *)&peer));
	return 0;
}

static int post_recv(DAT_EP_HANDLE ep, struct env *e, size_t off, uint64_t cookie)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)(e->buf + off), 256, e->lctx };
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	OK(dat_ep_post_recv(ep, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG), "post_recv");
	return 0;
}

/* Send text from one EP, check the other received exactly it. */
static int send_check(struct env *e, DAT_EP_HANDLE from, DAT_EVD_HANDLE from_dto,
		      DAT_EVD_HANDLE to_dto, size_t to_off, const char *text, const char *what)
{
	size_t n = strlen(text) + 1;
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)(e->buf + OFF_SEND), (DAT_SEG_LENGTH)n,
				e->lctx };
	DAT_DTO_COOKIE c = { .as_64 = 0x5e4d };
	DAT_EVENT ev;
	char m[160];

	memcpy(e->buf + OFF_SEND, text, n);
	OK(dat_ep_post_send(from, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG), "post_send");
	snprintf(m, sizeof(m), "%s: send completion", what);
	TRY(wait_ev(from_dto, WAIT_YES, DAT_DTO_COMPLETION_EVENT, &ev, m));
	if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		return bad("%s: send status %d", what, ev.event_data.dto_completion_event_data.status);
	snprintf(m, sizeof(m), "%s: receive", what);
	TRY(wait_ev(to_dto, WAIT_YES, DAT_DTO_COMPLETION_EVENT, &ev, m));
	if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS ||
	    ev.event_data.dto_completion_event_data.transfered_length != n ||
	    strcmp(e->buf + to_off, text))
		return bad("%s: receive status %d, %u bytes, \"%.40s\"", what,
			   ev.event_data.dto_completion_event_data.status,
			   (unsigned)ev.event_data.dto_completion_event_data.transfered_length,
			   e->buf + to_off);
	return 0;
}

/* TIMED_OUT came `el` seconds after a connect with a timeout of `tmo`
 * seconds: not before it, and not long after (5 s of slack for a slow
 * emulated guest). */
static int timed_out_in_time(double el, double tmo)
{
	if (el < tmo - 0.1)
		return bad("TIMED_OUT after %.2f s, before the %.1f s timeout", el, tmo);
	if (el > tmo + 5.0)
		return bad("TIMED_OUT only after %.2f s, the timeout was %.1f s", el, tmo);
	return 0;
}

/* ---- the cases ------------------------------------------------------ */

/* dat_ia_query lists the extension. */
static int c_ia_attrs(struct env *e)
{
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;
	int iface = 0, ver = 0, ssp = 0;

	(void)e;
	OK(dat_ia_query(ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p), "dat_ia_query");
	for (int i = 0; i < p.num_provider_specific_attr; i++) {
		const DAT_NAMED_ATTR *n = &p.provider_specific_attr[i];

		if (verbose)
			note("provider attribute %s=%s", n->name, n->value);
		if (!strcmp(n->name, DAT_EXTENSION_ATTR))
			iface = 1;
		if (!strcmp(n->name, DAT_EXTENSION_ATTR_VERSION))
			ver = !strcmp(n->value, DAT_EXTENSION_ATTR_VERSION_VALUE) ? 1 : -1;
		if (!strcmp(n->name, DAT_IW_ATTR_SSP))
			ssp = 1;
	}
	if (!iface || ver != 1 || !ssp)
		return bad("provider attributes: %s %s, %s %s, %s %s", DAT_EXTENSION_ATTR,
			   iface ? "listed" : "missing", DAT_EXTENSION_ATTR_VERSION,
			   ver == 1 ? "2.0.1" : ver ? "not 2.0.1" : "missing", DAT_IW_ATTR_SSP,
			   ssp ? "listed" : "missing");
	if (a.extension_supported != DAT_EXTENSION_IW)
		return bad("extension_supported %d, not DAT_EXTENSION_IW", a.extension_supported);
	if (a.extension_version != DAT_IW_EXTENSION_VERSION)
		return bad("extension_version %d, not %d", a.extension_version,
			   DAT_IW_EXTENSION_VERSION);
	return 0;
}

/* ssp_create with a bad EP or EVD handle: DAT_INVALID_HANDLE, no SSP. */
static int c_create_bad_handles(struct env *e)
{
	DAT_IW_SSP_HANDLE s = DAT_HANDLE_NULL;

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, DAT_HANDLE_NULL, e->cr_evd, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_HANDLE, "ep NULL"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, pz, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG),
				   &s), DAT_INVALID_HANDLE, "ep = a PZ handle"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->cr_evd, e->cr_evd, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_HANDLE, "ep = an EVD handle"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, DAT_HANDLE_NULL, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_HANDLE, "evd NULL"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, pz, FINAL_MSG, sizeof(FINAL_MSG), &s),
		 DAT_INVALID_HANDLE, "evd = a PZ handle"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->conn_p, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_HANDLE,
		 "evd without DAT_EVD_CR_FLAG (a connection EVD)"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->dto_p, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_HANDLE,
		 "evd without DAT_EVD_CR_FLAG (a DTO EVD)"));
	if (s != DAT_HANDLE_NULL)
		return bad("a failed create wrote an SSP handle");
	/* a failed create neither wrote on the socket nor took it */
	TRY(no_bytes(e->sock_a, 200, "after the failed creates"));
	if (fcntl(e->sock_p, F_GETFD) < 0)
		return bad("a failed create closed the consumer's socket");
	return 0;
}

/* ssp_create on something that is not a connected TCP socket. */
static int c_create_bad_socket(struct env *e)
{
	DAT_IW_SSP_HANDLE s = DAT_HANDLE_NULL;
	int pfd[2], udp, tcp, lst;
	struct sockaddr_storage a = ia_addr;

	if (pipe(pfd) < 0)
		return bad("pipe: %s", strerror(errno));
	udp = socket(ia_addr.ss_family, SOCK_DGRAM, 0);
	tcp = tcp_socket();
	lst = tcp_socket();
	if (udp < 0 || tcp < 0 || lst < 0 || bind(udp, (struct sockaddr *)&a, ia_len) < 0 ||
	    bind(lst, (struct sockaddr *)&a, ia_len) < 0 || listen(lst, 1) < 0)
		return bad("sockets: %s", strerror(errno));
	/* a UDP socket "connected" to the listener's address still is not TCP */
	connect(udp, (struct sockaddr *)&lst_addr, lst_len);
	TRY(want(dat_iw_ssp_create(ia, -1, e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &s),
		 DAT_INVALID_PARAMETER, "socket -1"));
	TRY(want(dat_iw_ssp_create(ia, 100000, e->ep_p, e->cr_evd, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_PARAMETER,
		 "socket 100000 (not open)"));
	TRY(want(dat_iw_ssp_create(ia, pfd[1], e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG),
				   &s), DAT_INVALID_PARAMETER, "socket = a pipe"));
	TRY(want(dat_iw_ssp_create(ia, udp, e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &s),
		 DAT_INVALID_PARAMETER, "socket = a connected UDP socket"));
	TRY(want(dat_iw_ssp_create(ia, tcp, e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &s),
		 DAT_INVALID_PARAMETER, "socket = an unconnected TCP socket"));
	TRY(want(dat_iw_ssp_create(ia, lst, e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &s),
		 DAT_INVALID_PARAMETER, "socket = a listening TCP socket"));
	/* connected, but over loopback: its local address is not the IA's */
	if (ia_addr.ss_family == AF_INET) {
		struct sockaddr_in lo = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t ll = sizeof(lo);
		int l2 = socket(AF_INET, SOCK_STREAM, 0), c2 = socket(AF_INET, SOCK_STREAM, 0), a2;

		if (l2 < 0 || c2 < 0 || bind(l2, (struct sockaddr *)&lo, sizeof(lo)) < 0 ||
		    listen(l2, 1) < 0 || getsockname(l2, (struct sockaddr *)&lo, &ll) < 0 ||
		    connect(c2, (struct sockaddr *)&lo, sizeof(lo)) < 0 ||
		    (a2 = accept(l2, NULL, NULL)) < 0)
			return bad("a loopback TCP connection: %s", strerror(errno));
		TRY(want(dat_iw_ssp_create(ia, a2, e->ep_p, e->cr_evd, FINAL_MSG,
					   sizeof(FINAL_MSG), &s), DAT_INVALID_PARAMETER,
			 "socket connected over 127.0.0.1, not the IA's address"));
		TRY(no_bytes(c2, 200, "loopback peer after the failed create"));
		close(a2);
		close(c2);
		close(l2);
	}
	if (s != DAT_HANDLE_NULL)
		return bad("a failed create wrote an SSP handle");
	close(pfd[0]);
	close(pfd[1]);
	close(udp);
	close(tcp);
	close(lst);
	return 0;
}

/* ssp_create with a bad message or no place for the handle. */
static int c_create_bad_args(struct env *e)
{
	DAT_IW_SSP_HANDLE s = DAT_HANDLE_NULL;

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->cr_evd, FINAL_MSG, -1, &s),
		 DAT_INVALID_PARAMETER, "final_sm_msg_len -1"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->cr_evd, NULL, 5, &s),
		 DAT_INVALID_PARAMETER, "final_sm_msg NULL, length 5"));
	TRY(want(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->cr_evd, FINAL_MSG,
				   sizeof(FINAL_MSG), NULL), DAT_INVALID_PARAMETER,
		 "ssp_handle pointer NULL"));
	if (s != DAT_HANDLE_NULL)
		return bad("a failed create wrote an SSP handle");
	TRY(no_bytes(e->sock_a, 200, "after the failed creates"));
	return 0;
}

/* ssp_create with an EP that is not UNCONNECTED: DAT_INVALID_STATE.  The
 * EP is made ACTIVE_CONNECTION_PENDING by a dat_ep_connect to a PSP of
 * ours that holds the request unanswered. */
static int c_create_ep_busy(struct env *e)
{
	DAT_IW_SSP_HANDLE s = DAT_HANDLE_NULL;
	DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
	struct sockaddr_storage to = ia_addr;
	DAT_CONN_QUAL q = 0;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;
	DAT_RETURN rc = DAT_SUCCESS;
	int r = -1;

	memset(&ev, 0, sizeof(ev));
	/* a conn_qual nobody uses: the listener's port + 1000, a few tries */
	for (unsigned i = 0; i < 20; i++) {
		q = 20000 + (port_of(&lst_addr) + 1000 + i * 7) % 40000;
		rc = dat_psp_create(ia, q, e->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp);
		if (rc == DAT_SUCCESS)
			break;
	}
	if (!psp)
		return bad("no PSP: %s", rcname(rc));
	if (want(dat_ep_connect(e->ep_a, (DAT_IA_ADDRESS_PTR)&to, q, WAIT_YES, 0, NULL,
				DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG), DAT_SUCCESS,
		 "dat_ep_connect") < 0) {
		dat_psp_free(psp);
		return -1;
	}
	if (wait_ev(e->cr_evd, WAIT_YES, DAT_CONNECTION_REQUEST_EVENT, &ev, "PSP request") < 0)
		goto out;
	if (dat_ep_query(e->ep_a, DAT_EP_FIELD_EP_STATE, &epp) != DAT_SUCCESS ||
	    epp.ep_state == DAT_EP_STATE_UNCONNECTED) {
		bad("the EP did not leave UNCONNECTED while connecting");
		goto out;
	}
	if (tcp_pair(&e->sock_a, &e->sock_p) < 0)
		goto out;
	if (want(dat_iw_ssp_create(ia, e->sock_p, e->ep_a, e->cr_evd, FINAL_MSG,
				   sizeof(FINAL_MSG), &s), DAT_INVALID_STATE,
		 "an EP in ACTIVE_CONNECTION_PENDING") < 0)
		goto out;
	if (no_bytes(e->sock_a, 200, "after the failed create") < 0)
		goto out;
	r = 0;
out:
	if (ev.event_number == DAT_CONNECTION_REQUEST_EVENT &&
	    ev.event_data.cr_arrival_event_data.cr_handle)
		dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL);
	dat_evd_wait(e->conn_a, WAIT_YES, 1, &ev, &(DAT_COUNT){ 0 });
	dat_psp_free(psp);
	if (r == 0 && s != DAT_HANDLE_NULL) {
		e->ssp = s;
		return bad("the failed create wrote an SSP handle");
	}
	return r;
}

/* ssp_create sends the final message before it returns; query says what
 * was given, OPERATIONAL. */
static int c_create_and_query(struct env *e)
{
	DAT_IW_SSP_PARAM p;
	char got[sizeof(FINAL_MSG)];
	int sp;

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	sp = e->sock_p;
	OK(dat_iw_ssp_create(ia, sp, e->ep_p, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &e->ssp),
	   "dat_iw_ssp_create");
	if (!e->ssp)
		return bad("create succeeded with a NULL handle");
	/* sent before create returned: on a local connection the bytes are
	 * already queued at the peer */
	if (recv(e->sock_a, got, sizeof(got), MSG_DONTWAIT | MSG_PEEK) <= 0)
		return bad("no byte of the final message is readable right after create returned");
	TRY(read_exact(e->sock_a, got, sizeof(got), "reading the final message"));
	if (memcmp(got, FINAL_MSG, sizeof(got)))
		return bad("the final message arrived altered");
	TRY(no_bytes(e->sock_a, 300, "after the final message"));
	memset(&p, 0xa5, sizeof(p));
	OK(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL, &p), "dat_iw_ssp_query");
	if (p.ia_handle != ia)
		return bad("query: ia_handle %p, create was given %p", (void *)p.ia_handle, (void *)ia);
	if (p.socket_id != sp || p.evd_handle != e->cr_evd || p.ep_handle != e->ep_p)
		return bad("query: socket %d evd %p ep %p, create was given %d %p %p", p.socket_id,
			   (void *)p.evd_handle, (void *)p.ep_handle, sp, (void *)e->cr_evd,
			   (void *)e->ep_p);
	if (p.ssp_state != DAT_IW_SSP_STATE_OPERATIONAL)
		return bad("query: state %d right after create, not OPERATIONAL", p.ssp_state);
	memset(&p, 0xa5, sizeof(p));
	OK(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_SSP_STATE, &p), "query of the state alone");
	if (p.ssp_state != DAT_IW_SSP_STATE_OPERATIONAL)
		return bad("query of the state alone: %d", p.ssp_state);
	OK(dat_iw_ssp_free(e->ssp), "dat_iw_ssp_free");
	e->ssp_freed = 1;
	return 0;
}

/* An empty final message (NULL, 0) is allowed and sends nothing. */
static int c_create_empty_msg(struct env *e)
{
	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	OK(dat_iw_ssp_create(ia, e->sock_p, e->ep_p, e->cr_evd, NULL, 0, &e->ssp),
	   "dat_iw_ssp_create(msg NULL, len 0)");
	TRY(no_bytes(e->sock_a, 300, "after a create with an empty message"));
	return 0;
}

/* ssp_query's errors. */
static int c_query_errors(struct env *e)
{
	DAT_IW_SSP_PARAM p;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	TRY(want(dat_iw_ssp_query(e->ep_p, DAT_IW_SSP_FIELD_ALL, &p), DAT_INVALID_HANDLE,
		 "query on an EP handle"));
	TRY(want(dat_iw_ssp_query(e->cr_evd, DAT_IW_SSP_FIELD_ALL, &p), DAT_INVALID_HANDLE,
		 "query on an EVD handle"));
	TRY(want(dat_iw_ssp_query(ia, DAT_IW_SSP_FIELD_ALL, &p), DAT_INVALID_HANDLE,
		 "query on the IA handle"));
	TRY(want(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL | 0x20, &p),
		 DAT_INVALID_PARAMETER, "mask with bit 0x20"));
	TRY(want(dat_iw_ssp_query(e->ssp, (DAT_IW_SSP_PARAM_MASK)0x80000000u, &p),
		 DAT_INVALID_PARAMETER, "mask with bit 0x80000000"));
	TRY(want(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL, NULL), DAT_INVALID_PARAMETER,
		 "param NULL"));
	OK(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL, &p), "the SSP after the bad queries");
	return 0;
}

/* socket_connect's errors; none writes on the socket. */
static int c_connect_bad_args(struct env *e)
{
	char pd[240];
	int pfd[2], udp, tcp;

	memset(pd, 'p', sizeof(pd));
	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	TRY(want(dat_iw_socket_connect(e->ep_a, e->sock_a, 0, 4, pd), DAT_INVALID_PARAMETER,
		 "timeout 0"));
	TRY(no_bytes(e->sock_p, 500, "passive side after a connect with timeout 0"));
	TRY(want(dat_iw_socket_connect(pz, e->sock_a, 5 * SEC, 4, pd), DAT_INVALID_HANDLE,
		 "ep = a PZ handle"));
	TRY(want(dat_iw_socket_connect(e->cr_evd, e->sock_a, 5 * SEC, 4, pd), DAT_INVALID_HANDLE,
		 "ep = an EVD handle"));
	TRY(want(dat_iw_socket_connect(ia, e->sock_a, 5 * SEC, 4, pd), DAT_INVALID_HANDLE,
		 "ep = the IA handle"));
	TRY(want(dat_iw_socket_connect(e->ep_a, e->sock_a, 5 * SEC, -1, pd),
		 DAT_INVALID_PARAMETER, "private_data_size -1"));
	TRY(want(dat_iw_socket_connect(e->ep_a, e->sock_a, 5 * SEC, 237, pd),
		 DAT_INVALID_PARAMETER, "private_data_size 237"));
	if (pipe(pfd) < 0)
		return bad("pipe: %s", strerror(errno));
	udp = socket(ia_addr.ss_family, SOCK_DGRAM, 0);
	tcp = tcp_socket();
	connect(udp, (struct sockaddr *)&lst_addr, lst_len);
	TRY(want(dat_iw_socket_connect(e->ep_a, -1, 5 * SEC, 4, pd), DAT_INVALID_PARAMETER,
		 "socket -1"));
	TRY(want(dat_iw_socket_connect(e->ep_a, pfd[1], 5 * SEC, 4, pd), DAT_INVALID_PARAMETER,
		 "socket = a pipe"));
	TRY(want(dat_iw_socket_connect(e->ep_a, udp, 5 * SEC, 4, pd), DAT_INVALID_PARAMETER,
		 "socket = a connected UDP socket"));
	TRY(want(dat_iw_socket_connect(e->ep_a, tcp, 5 * SEC, 4, pd), DAT_INVALID_PARAMETER,
		 "socket = an unconnected TCP socket"));
	close(pfd[0]);
	close(pfd[1]);
	close(udp);
	close(tcp);
	TRY(no_bytes(e->sock_p, 300, "passive side after the failed connects"));
	TRY(empty(e->conn_a, "the active EP's connect EVD after the failed connects"));
	return 0;
}

/* The whole way: request, CR event and query, accept, ESTABLISHED on
 * both sides with the sockets closed by the provider, sends both ways,
 * an RDMA write, a disconnect, ssp_free. */
static int c_accept(struct env *e)
{
	static const char req_pd[] = "ssp_semantics request";
	static const char acc_pd[] = "ssp_semantics accept, a reply";
	DAT_CR_HANDLE cr;
	DAT_EP_HANDLE other = DAT_HANDLE_NULL;
	DAT_EP_ATTR attr = ep_attr();
	DAT_EVENT ev;
	ino_t ino_p, ino_a;
	int r = -1;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	ino_p = ino_of(e->sock_p);
	ino_a = ino_of(e->sock_a);
	TRY(post_recv(e->ep_p, e, OFF_RECV_P, 1));
	TRY(post_recv(e->ep_a, e, OFF_RECV_A, 2));
	TRY(request(e, WAIT_YES, sizeof(req_pd), req_pd, &cr));
	TRY(check_cr(e, cr, sizeof(req_pd), req_pd));
	TRY(no_ev(e->conn_a, 300000, "active side before the accept"));

	/* another EP than the SSP's */
	OK(dat_ep_create(ia, pz, e->dto_p, e->dto_p, e->conn_p, &attr, &other), "ep_create other");
	if (want(dat_cr_accept(cr, other, 0, NULL), DAT_INVALID_PARAMETER,
		 "dat_cr_accept with another EP than the SSP's") < 0)
		goto out;
	if (want(dat_cr_accept(cr, e->ep_p, sizeof(acc_pd), (DAT_PVOID)acc_pd), DAT_SUCCESS,
		 "dat_cr_accept") < 0)
		goto out;
	/* the sockets now belong to the provider */
	if (wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "passive side ESTABLISHED") < 0)
		goto out;
	if (!is_closed(e->sock_p, ino_p)) {
		bad("passive socket still open after ESTABLISHED");
		goto out;
	}
	e->sock_p = -1;
	if (ev.event_data.connect_event_data.ep_handle != e->ep_p) {
		bad("passive ESTABLISHED names EP %p, not %p",
		    (void *)ev.event_data.connect_event_data.ep_handle, (void *)e->ep_p);
		goto out;
	}
	if (wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "active side ESTABLISHED") < 0)
		goto out;
	if (!is_closed(e->sock_a, ino_a)) {
		bad("active socket still open after ESTABLISHED");
		goto out;
	}
	e->sock_a = -1;
	if (ev.event_data.connect_event_data.ep_handle != e->ep_a ||
	    ev.event_data.connect_event_data.private_data_size != (DAT_COUNT)sizeof(acc_pd) ||
	    !ev.event_data.connect_event_data.private_data ||
	    memcmp(ev.event_data.connect_event_data.private_data, acc_pd, sizeof(acc_pd))) {
		bad("active ESTABLISHED: EP %s, %d bytes of private data (wanted the accept's %zu)",
		    ev.event_data.connect_event_data.ep_handle == e->ep_a ? "right" : "wrong",
		    ev.event_data.connect_event_data.private_data_size, sizeof(acc_pd));
		goto out;
	}
	if (empty(e->cr_evd, "the SSP's EVD after the accept") < 0 ||
	    empty(e->conn_p, "passive connect EVD") < 0 || empty(e->conn_a, "active connect EVD") < 0)
		goto out;

	/* sends both ways */
	if (send_check(e, e->ep_a, e->dto_a, e->dto_p, OFF_RECV_P, "active to passive",
		       "send a->p") < 0 ||
	    send_check(e, e->ep_p, e->dto_p, e->dto_a, OFF_RECV_A, "passive to active",
		       "send p->a") < 0)
		goto out;
	/* an RDMA write from the active side into the passive side's buffer,
	 * then a send that tells it is there */
	{
		DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)(e->buf + OFF_SRC), RDMA_LEN, e->lctx };
		DAT_RMR_TRIPLET rmr = { (DAT_VADDR)(uintptr_t)(e->buf + OFF_DST), RDMA_LEN,
					e->rctx };
		DAT_DTO_COOKIE c = { .as_64 = 0x3e3e };

		for (unsigned i = 0; i < RDMA_LEN; i++)
			e->buf[OFF_SRC + i] = (char)(i * 7 + 3);
		if (post_recv(e->ep_p, e, OFF_RECV_P, 3) < 0)
			goto out;
		if (want(dat_ep_post_rdma_write(e->ep_a, 1, &iov, c, &rmr,
						DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS,
			 "post_rdma_write") < 0 ||
		    wait_ev(e->dto_a, WAIT_YES, DAT_DTO_COMPLETION_EVENT, &ev,
			    "RDMA write completion") < 0)
			goto out;
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) {
			bad("RDMA write status %d", ev.event_data.dto_completion_event_data.status);
			goto out;
		}
		if (post_recv(e->ep_a, e, OFF_RECV_A, 4) < 0 ||
		    send_check(e, e->ep_a, e->dto_a, e->dto_p, OFF_RECV_P, "written",
			       "send after the write") < 0)
			goto out;
		if (memcmp(e->buf + OFF_SRC, e->buf + OFF_DST, RDMA_LEN)) {
			bad("the RDMA-written bytes differ");
			goto out;
		}
		/* and an RDMA read the other way: the passive side reads the
		 * active side's source into a zeroed sink */
		iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(e->buf + OFF_DST), RDMA_LEN,
					 e->lctx };
		rmr = (DAT_RMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(e->buf + OFF_SRC), RDMA_LEN,
					 e->rctx };
		memset(e->buf + OFF_DST, 0, RDMA_LEN);
		if (want(dat_ep_post_rdma_read(e->ep_p, 1, &iov, c, &rmr,
					       DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS,
			 "post_rdma_read") < 0 ||
		    wait_ev(e->dto_p, WAIT_YES, DAT_DTO_COMPLETION_EVENT, &ev,
			    "RDMA read completion") < 0)
			goto out;
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS ||
		    memcmp(e->buf + OFF_SRC, e->buf + OFF_DST, RDMA_LEN)) {
			bad("RDMA read: status %d, bytes %s",
			    ev.event_data.dto_completion_event_data.status,
			    memcmp(e->buf + OFF_SRC, e->buf + OFF_DST, RDMA_LEN) ? "differ" : "same");
			goto out;
		}
	}
	if (want(dat_ep_disconnect(e->ep_a, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS,
		 "dat_ep_disconnect") < 0 ||
	    wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "active DISCONNECTED") < 0 ||
	    wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "passive DISCONNECTED") < 0)
		goto out;
	if (want(dat_iw_ssp_free(e->ssp), DAT_SUCCESS, "dat_iw_ssp_free after the connection") < 0)
		goto out;
	e->ssp_freed = 1;
	drain(e->dto_p);	/* the flushed receive */
	drain(e->dto_a);
	r = 0;
out:
	if (other && dat_ep_free(other) != DAT_SUCCESS)
		note("cleanup: the other EP");
	return r;
}

/* dat_cr_accept with DAT_HANDLE_NULL takes the SSP's EP. */
static int c_accept_null_ep(struct env *e)
{
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	ino_t ino_p, ino_a;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	ino_p = ino_of(e->sock_p);
	ino_a = ino_of(e->sock_a);
	TRY(post_recv(e->ep_p, e, OFF_RECV_P, 1));
	TRY(request(e, WAIT_YES, 0, NULL, &cr));
	TRY(check_cr(e, cr, 0, NULL));
	OK(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), "dat_cr_accept(cr, DAT_HANDLE_NULL)");
	TRY(wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "passive ESTABLISHED"));
	if (!is_closed(e->sock_p, ino_p))
		return bad("passive socket still open after ESTABLISHED");
	e->sock_p = -1;
	if (ev.event_data.connect_event_data.ep_handle != e->ep_p)
		return bad("passive ESTABLISHED names another EP");
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "active ESTABLISHED"));
	if (!is_closed(e->sock_a, ino_a))
		return bad("active socket still open after ESTABLISHED");
	e->sock_a = -1;
	if (ev.event_data.connect_event_data.private_data_size != 0)
		return bad("active ESTABLISHED: %d bytes of private data, the accept gave none",
			   ev.event_data.connect_event_data.private_data_size);
	TRY(send_check(e, e->ep_a, e->dto_a, e->dto_p, OFF_RECV_P, "over the SSP's EP",
		       "send a->p"));
	OK(dat_ep_disconnect(e->ep_p, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect (passive)");
	TRY(wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "passive DISCONNECTED"));
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "active DISCONNECTED"));
	return 0;
}

/* A slow accept, still within the connect's timeout: ESTABLISHED. */
static int c_accept_slow(struct env *e)
{
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	TRY(request(e, 8 * SEC, 0, NULL, &cr));
	TRY(no_ev(e->conn_a, 2 * SEC, "active side while the accept waits"));
	OK(dat_cr_accept(cr, e->ep_p, 0, NULL), "dat_cr_accept 2 s into an 8 s timeout");
	TRY(wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "passive ESTABLISHED"));
	e->sock_p = -1;
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "active ESTABLISHED"));
	e->sock_a = -1;
	return 0;
}

/* An accept after the active side's timeout: the active side gets
 * TIMED_OUT, and the passive side must not get ESTABLISHED alone (a
 * failed accept call or a failure event are both fine). */
static int c_accept_too_late(struct env *e)
{
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	DAT_RETURN rc;
	DAT_COUNT nmore;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	TRY(request(e, 1 * SEC, 0, NULL, &cr));
	usleep(2500000);
	rc = dat_cr_accept(cr, e->ep_p, 0, NULL);
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_TIMED_OUT, &ev,
		    "active side, accepted 1.5 s after its timeout"));
	e->sock_a = -1;
	if (rc != DAT_SUCCESS) {
		note("the late dat_cr_accept returned %s", rcname(rc));
		return 0;
	}
	memset(&ev, 0, sizeof(ev));
	rc = dat_evd_wait(e->conn_p, WAIT_YES, 1, &ev, &nmore);
	if (rc != DAT_SUCCESS)
		return bad("passive side: no event after a late accept (%s)", rcname(rc));
	if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED)
		return bad("passive side ESTABLISHED while the active side TIMED_OUT");
	note("passive side after the late accept: %s", evname(ev.event_number));
	e->sock_p = -1;
	return 0;
}

/* A reject, then the stream bytes both ways on the sockets, clean. */
static int reject_and_stream(struct env *e, int check_stream)
{
	static const char rej_pd[] = "ssp_semantics: rejected";
	static const char p2a[] = "passive to active, after the reject";
	static const char a2p[] = "active to passive, after the reject";
	char pd[236], got[64];
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;

	for (unsigned i = 0; i < sizeof(pd); i++)
		pd[i] = (char)(i ^ 0x5a);
	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	/* the largest private data there is room for */
	TRY(request(e, WAIT_YES, sizeof(pd), pd, &cr));
	TRY(check_cr(e, cr, sizeof(pd), pd));
	OK(dat_cr_reject(cr, sizeof(rej_pd), (DAT_PVOID)rej_pd), "dat_cr_reject");
	/* the passive socket is ours again, right away */
	if (fcntl(e->sock_p, F_GETFD) < 0)
		return bad("the passive socket is closed after dat_cr_reject returned");
	if (check_stream)
		TRY(send_all(e->sock_p, p2a, sizeof(p2a), "passive stream send after the reject"));
	{
		DAT_IW_SSP_PARAM q;

		OK(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_SSP_STATE, &q),
		   "dat_iw_ssp_query after the reject");
		if (q.ssp_state != DAT_IW_SSP_STATE_NON_OPERATIONAL)
			return bad("SSP state %d once its request was answered, not NON_OPERATIONAL",
				   q.ssp_state);
	}
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_PEER_REJECTED, &ev,
		    "active side's outcome"));
	if (ev.event_data.connect_event_data.ep_handle != e->ep_a)
		return bad("PEER_REJECTED names another EP");
	if (verbose && (ev.event_data.connect_event_data.private_data_size != sizeof(rej_pd) ||
			memcmp(ev.event_data.connect_event_data.private_data, rej_pd,
			       sizeof(rej_pd))))
		note("PEER_REJECTED carries %d bytes of private data, not the reject's %zu",
		     ev.event_data.connect_event_data.private_data_size, sizeof(rej_pd));
	if (fcntl(e->sock_a, F_GETFD) < 0)
		return bad("the active socket is closed after PEER_REJECTED");
	if (!check_stream)
		return 0;
	TRY(read_exact(e->sock_a, got, sizeof(p2a), "active side reading the passive's bytes"));
	if (memcmp(got, p2a, sizeof(p2a)))
		return bad("active side read \"%.*s\", not the passive side's first bytes",
			   (int)sizeof(p2a), got);
	TRY(send_all(e->sock_a, a2p, sizeof(a2p), "active stream send after the reject"));
	TRY(read_exact(e->sock_p, got, sizeof(a2p), "passive side reading the active's bytes"));
	if (memcmp(got, a2p, sizeof(a2p)))
		return bad("passive side read \"%.*s\", not the active side's first bytes",
			   (int)sizeof(a2p), got);
	TRY(no_bytes(e->sock_a, 300, "active socket after the exchange"));
	TRY(no_bytes(e->sock_p, 300, "passive socket after the exchange"));
	TRY(empty(e->cr_evd, "the SSP's EVD after the reject"));
	TRY(empty(e->conn_a, "active connect EVD after PEER_REJECTED"));
	return 0;
}

static int c_reject(struct env *e)
{
	return reject_and_stream(e, 1);
}

/* One SSP, one request: a second socket_connect after the reject gets no
 * CR event and times out. */
static int c_one_request(struct env *e)
{
	DAT_EVENT ev;
	double t0;

	TRY(reject_and_stream(e, 1));
	OK(dat_ep_reset(e->ep_a), "dat_ep_reset of the rejected EP");
	t0 = now();
	OK(dat_iw_socket_connect(e->ep_a, e->sock_a, 1 * SEC, 0, NULL),
	   "second dat_iw_socket_connect");
	TRY(no_ev(e->cr_evd, WAIT_NO, "the SSP's EVD after a second request"));
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_TIMED_OUT, &ev,
		    "second request's outcome"));
	TRY(timed_out_in_time(now() - t0, 1.0));
	/* whose is the active socket now: leave it */
	e->sock_a = -1;
	return 0;
}

/* The peer goes away before requesting: DAT_IW_SOCKET_DOWN_EVENT, then
 * the SSP is NON_OPERATIONAL. */
static int socket_down(struct env *e, int reset)
{
	DAT_IW_EXTENSION_EVENT_DATA *x;
	DAT_IW_SSP_PARAM p;
	DAT_EVENT ev;
	int sp;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	sp = e->sock_p;
	if (reset)
		setsockopt(e->sock_a, SOL_SOCKET, SO_LINGER,
			   &(struct linger){ .l_onoff = 1, .l_linger = 0 }, sizeof(struct linger));
	close(e->sock_a);
	e->sock_a = -1;
	TRY(wait_ev(e->cr_evd, WAIT_YES, (DAT_EVENT_NUMBER)DAT_IW_SOCKET_DOWN_EVENT, &ev,
		    "the SSP's EVD"));
	x = (DAT_IW_EXTENSION_EVENT_DATA *)(void *)ev.event_extension_data;
	if (x->ssp_handle != e->ssp || x->socket_id != sp)
		return bad("socket-down event data: ssp %p socket %d, wanted %p %d",
			   (void *)x->ssp_handle, x->socket_id, (void *)e->ssp, sp);
	OK(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL, &p), "dat_iw_ssp_query");
	if (p.ssp_state != DAT_IW_SSP_STATE_NON_OPERATIONAL)
		return bad("state %d after the socket went down, not NON_OPERATIONAL", p.ssp_state);
	TRY(no_ev(e->cr_evd, 300000, "the SSP's EVD after the socket-down event"));
	/* whose the passive socket is now is not said: leave it */
	e->sock_p = -1;
	return 0;
}

static int c_socket_down_close(struct env *e)
{
	return socket_down(e, 0);
}

static int c_socket_down_reset(struct env *e)
{
	return socket_down(e, 1);
}

/* socket_connect outcomes against a plain TCP peer (no SSP). */
static int plain_peer(struct env *e, const char *how, DAT_EVENT_NUMBER want_ev)
{
	static const char plain[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
	DAT_TIMEOUT tmo = !strcmp(how, "silent") ? 1 * SEC : 10 * SEC;
	struct pollfd pfd;
	DAT_EVENT ev;
	char b[512];
	double t0;

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	t0 = now();
	OK(dat_iw_socket_connect(e->ep_a, e->sock_a, tmo, 8, "request"), "dat_iw_socket_connect");
	/* the request arrives on the passive socket as bytes */
	pfd = (struct pollfd){ .fd = e->sock_p, .events = POLLIN };
	if (poll(&pfd, 1, IO_MS) != 1 || recv(e->sock_p, b, sizeof(b), MSG_DONTWAIT) <= 0)
		return bad("no request bytes reached the passive socket in %d ms", IO_MS);
	if (!strcmp(how, "plain")) {
		TRY(send_all(e->sock_p, plain, sizeof(plain) - 1, "plain answer"));
	} else if (!strcmp(how, "close")) {
		close(e->sock_p);
		e->sock_p = -1;
	} else if (!strcmp(how, "reset")) {
		setsockopt(e->sock_p, SOL_SOCKET, SO_LINGER,
			   &(struct linger){ .l_onoff = 1, .l_linger = 0 }, sizeof(struct linger));
		close(e->sock_p);
		e->sock_p = -1;
	}
	TRY(wait_ev(e->conn_a, WAIT_YES, want_ev, &ev, "active side's outcome"));
	if (ev.event_data.connect_event_data.ep_handle != e->ep_a)
		return bad("%s names another EP", evname(want_ev));
	if (want_ev == DAT_CONNECTION_EVENT_TIMED_OUT)
		TRY(timed_out_in_time(now() - t0, tmo / 1e6));
	TRY(no_ev(e->conn_a, 300000, "active connect EVD after the outcome"));
	if (want_ev == DAT_CONNECTION_EVENT_TIMED_OUT) {
		/* the socket is ours again and nothing of the provider's is
		 * left to read in it: bytes the peer sends now come first */
		static const char late[] = "the peer speaks late";
		char got[sizeof(late)];

		if (fcntl(e->sock_a, F_GETFD) < 0)
			return bad("the active socket is closed after TIMED_OUT");
		TRY(send_all(e->sock_p, late, sizeof(late), "peer's bytes after TIMED_OUT"));
		TRY(read_exact(e->sock_a, got, sizeof(late), "active side after TIMED_OUT"));
		if (memcmp(got, late, sizeof(late)))
			return bad("after TIMED_OUT the active socket read \"%.*s\" first",
				   (int)sizeof(late), got);
		return 0;
	}
	if (want_ev == DAT_CONNECTION_EVENT_NON_PEER_REJECTED) {
		/* the socket is ours again, the peer's answer unread in it */
		char got[sizeof(plain)];

		if (fcntl(e->sock_a, F_GETFD) < 0)
			return bad("the active socket is closed after NON_PEER_REJECTED");
		TRY(read_exact(e->sock_a, got, sizeof(plain) - 1,
			       "the peer's plain answer, after NON_PEER_REJECTED"));
		if (memcmp(got, plain, sizeof(plain) - 1))
			return bad("the peer's plain answer was consumed or altered: \"%.*s\"",
				   (int)sizeof(plain) - 1, got);
		return 0;
	}
	e->sock_a = -1;	/* leave it: whose it is after a failure is not said */
	return 0;
}

static int c_timed_out(struct env *e)
{
	return plain_peer(e, "silent", DAT_CONNECTION_EVENT_TIMED_OUT);
}

static int c_non_peer_rejected(struct env *e)
{
	return plain_peer(e, "plain", DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
}

static int c_unreachable_close(struct env *e)
{
	return plain_peer(e, "close", DAT_CONNECTION_EVENT_UNREACHABLE);
}

static int c_unreachable_reset(struct env *e)
{
	return plain_peer(e, "reset", DAT_CONNECTION_EVENT_UNREACHABLE);
}

/* ssp_free: the handle is gone; a later request is rejected. */
static int c_free(struct env *e)
{
	DAT_IW_SSP_PARAM p;
	DAT_EVENT ev;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	OK(dat_iw_ssp_free(e->ssp), "dat_iw_ssp_free");
	e->ssp_freed = 1;
	OK(dat_iw_socket_connect(e->ep_a, e->sock_a, 10 * SEC, 0, NULL),
	   "dat_iw_socket_connect after the free");
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_PEER_REJECTED, &ev,
		    "outcome of a request to a freed SSP"));
	TRY(empty(e->cr_evd, "the freed SSP's EVD"));
	e->sock_a = -1;
	e->sock_p = -1;
	/* last: the freed handle (libdat2 reads its first word) */
	TRY(want(dat_iw_ssp_query(e->ssp, DAT_IW_SSP_FIELD_ALL, &p), DAT_INVALID_HANDLE,
		 "query of a freed SSP"));
	return 0;
}

/* A request delivered before ssp_free stays answerable. */
static int c_free_after_request(struct env *e)
{
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	TRY(request(e, WAIT_YES, 0, NULL, &cr));
	OK(dat_iw_ssp_free(e->ssp), "dat_iw_ssp_free with a request delivered");
	e->ssp_freed = 1;
	OK(dat_cr_accept(cr, e->ep_p, 0, NULL), "dat_cr_accept after the SSP was freed");
	TRY(wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "passive ESTABLISHED"));
	e->sock_p = -1;
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
		    "active ESTABLISHED"));
	e->sock_a = -1;
	OK(dat_ep_disconnect(e->ep_a, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
	TRY(wait_ev(e->conn_a, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "active DISCONNECTED"));
	TRY(wait_ev(e->conn_p, WAIT_YES, DAT_CONNECTION_EVENT_DISCONNECTED, &ev,
		    "passive DISCONNECTED"));
	return 0;
}

/* Two SSPs on one EVD at once: each CR names its own SSP and EP; both
 * connections come up. */
static int c_two_ssps(struct env *e)
{
	DAT_EP_ATTR attr = ep_attr();
	DAT_EP_HANDLE ep_p2 = DAT_HANDLE_NULL, ep_a2 = DAT_HANDLE_NULL;
	DAT_IW_SSP_HANDLE ssp2 = DAT_HANDLE_NULL;
	int sa2 = -1, sp2 = -1, r = -1, est_p = 0, est_a = 0;
	char got[sizeof(FINAL_MSG)];
	DAT_EVENT ev;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	OK(dat_ep_create(ia, pz, e->dto_p, e->dto_p, e->conn_p, &attr, &ep_p2), "ep_create p2");
	if (want(dat_ep_create(ia, pz, e->dto_a, e->dto_a, e->conn_a, &attr, &ep_a2), DAT_SUCCESS,
		 "ep_create a2") < 0 || tcp_pair(&sa2, &sp2) < 0 ||
	    want(dat_iw_ssp_create(ia, sp2, ep_p2, e->cr_evd, FINAL_MSG, sizeof(FINAL_MSG), &ssp2),
		 DAT_SUCCESS, "second dat_iw_ssp_create") < 0 ||
	    read_exact(sa2, got, sizeof(got), "second final message") < 0)
		goto out;
	if (ssp2 == e->ssp) {
		bad("two SSPs, one handle");
		goto out;
	}
	/* the second one requests first */
	if (want(dat_iw_socket_connect(ep_a2, sa2, WAIT_YES, 2, "2"), DAT_SUCCESS,
		 "socket_connect 2") < 0 ||
	    want(dat_iw_socket_connect(e->ep_a, e->sock_a, WAIT_YES, 2, "1"), DAT_SUCCESS,
		 "socket_connect 1") < 0)
		goto out;
	for (int i = 0; i < 2; i++) {
		DAT_CR_ARRIVAL_EVENT_DATA *d = &ev.event_data.cr_arrival_event_data;
		DAT_CR_PARAM p;
		int second;

		if (wait_ev(e->cr_evd, WAIT_YES, DAT_CONNECTION_REQUEST_EVENT, &ev,
			    "a connection request") < 0)
			goto out;
		second = d->sp_handle.psp_handle == (DAT_PSP_HANDLE)ssp2;
		if (!second && d->sp_handle.psp_handle != (DAT_PSP_HANDLE)e->ssp) {
			bad("a CR event names neither SSP");
			goto out;
		}
		if (want(dat_cr_query(d->cr_handle, DAT_CR_FIELD_ALL, &p), DAT_SUCCESS,
			 "dat_cr_query") < 0)
			goto out;
		if (p.local_ep_handle != (second ? ep_p2 : e->ep_p) || p.private_data_size != 2 ||
		    memcmp(p.private_data, second ? "2" : "1", 2)) {
			bad("the CR of SSP %d has the other SSP's EP or private data", second + 1);
			goto out;
		}
		if (want(dat_cr_accept(d->cr_handle, DAT_HANDLE_NULL, 0, NULL), DAT_SUCCESS,
			 "dat_cr_accept") < 0)
			goto out;
	}
	for (int i = 0; i < 4; i++) {
		DAT_EVD_HANDLE evd = i < 2 ? e->conn_p : e->conn_a;

		if (wait_ev(evd, WAIT_YES, DAT_CONNECTION_EVENT_ESTABLISHED, &ev,
			    i < 2 ? "passive ESTABLISHED" : "active ESTABLISHED") < 0)
			goto out;
		DAT_EP_HANDLE ep = ev.event_data.connect_event_data.ep_handle;

		if (i < 2)
			est_p |= ep == e->ep_p ? 1 : ep == ep_p2 ? 2 : 4;
		else
			est_a |= ep == e->ep_a ? 1 : ep == ep_a2 ? 2 : 4;
	}
	e->sock_a = e->sock_p = sa2 = sp2 = -1;
	if (est_p != 3 || est_a != 3) {
		bad("ESTABLISHED named the EPs wrong (passive mask %d, active %d)", est_p, est_a);
		goto out;
	}
	r = 0;
out:
	if (ssp2)
		dat_iw_ssp_free(ssp2);
	if (ep_a2)
		dat_ep_free(ep_a2);
	if (ep_p2)
		dat_ep_free(ep_p2);
	if (sa2 >= 0)
		close(sa2);
	if (sp2 >= 0)
		close(sp2);
	return r;
}

/* Freeing the EP while its socket connect waits gives the socket back. */
static int c_ep_free_while_connecting(struct env *e)
{
	struct pollfd pfd;
	char b[512];
	double t0;

	TRY(tcp_pair(&e->sock_a, &e->sock_p));
	OK(dat_iw_socket_connect(e->ep_a, e->sock_a, 30 * SEC, 0, NULL), "dat_iw_socket_connect");
	pfd = (struct pollfd){ .fd = e->sock_p, .events = POLLIN };
	if (poll(&pfd, 1, IO_MS) != 1 || recv(e->sock_p, b, sizeof(b), MSG_DONTWAIT) <= 0)
		return bad("no request bytes reached the passive socket in %d ms", IO_MS);
	t0 = now();
	OK(dat_ep_free(e->ep_a), "dat_ep_free while the connect waits");
	e->ep_a = DAT_HANDLE_NULL;
	if (now() - t0 > 15.0)
		return bad("dat_ep_free took %.1f s", now() - t0);
	if (fcntl(e->sock_a, F_GETFD) < 0)
		return bad("the socket is closed after dat_ep_free, not given back");
	TRY(no_ev(e->conn_a, 300000, "the freed EP's connect EVD"));
	return 0;
}

/* Last: an abrupt dat_ia_close with an SSP waiting for its request and a
 * socket connect waiting for its answer returns (bounded by alarm()). */

static void close_hung(int sig)
{
	static const char m[] = "# dat_ia_close did not return within 30 s\n";

	(void)sig;
	if (write(1, m, sizeof(m) - 1) < 0)
		_exit(3);
	_exit(3);
}

static int c_ia_close_busy(struct env *e)
{
	int sa2, sp2;
	double t0;
	DAT_RETURN rc;

	TRY(ssp_up(e, FINAL_MSG, sizeof(FINAL_MSG)));
	TRY(tcp_pair(&sa2, &sp2));
	OK(dat_iw_socket_connect(e->ep_a, sa2, 60 * SEC, 0, NULL), "dat_iw_socket_connect");
	usleep(200000);
	signal(SIGALRM, close_hung);
	alarm(30);
	t0 = now();
	rc = dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	alarm(0);
	ia_closed = 1;
	memset(e, 0, sizeof(*e));	/* gone with the IA; the sockets: left */
	e->sock_p = e->sock_a = -1;
	TRY(want(rc, DAT_SUCCESS, "abrupt dat_ia_close"));
	if (now() - t0 > 15.0)
		return bad("dat_ia_close took %.1f s", now() - t0);
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(struct env *);
} cases[] = {
	{ "ia_query lists DAT_EXTENSION_INTERFACE, DAT_EXTENSION_VERSION 2.0.1, DAT_IW_ATTR_SSP",
	  c_ia_attrs },
	{ "ssp_create: bad EP or EVD handle, EVD without CR flag -> DAT_INVALID_HANDLE",
	  c_create_bad_handles },
	{ "ssp_create: socket -1, not a socket, UDP, unconnected, not on the IA's address -> DAT_INVALID_PARAMETER",
	  c_create_bad_socket },
	{ "ssp_create: len < 0, msg NULL with len > 0, ssp NULL -> DAT_INVALID_PARAMETER",
	  c_create_bad_args },
	{ "ssp_create: EP not UNCONNECTED -> DAT_INVALID_STATE", c_create_ep_busy },
	{ "ssp_create sends the final message before returning; query right after",
	  c_create_and_query },
	{ "ssp_create with an empty final message sends nothing", c_create_empty_msg },
	{ "ssp_query: bad handle, mask, NULL param", c_query_errors },
	{ "socket_connect: timeout 0 writes nothing; bad EP, socket, pdsize", c_connect_bad_args },
	{ "request, CR event and query, accept, ESTABLISHED, sockets closed, sends, RDMA write/read",
	  c_accept },
	{ "dat_cr_accept with DAT_HANDLE_NULL takes the SSP's EP", c_accept_null_ep },
	{ "dat_cr_accept 2 s into an 8 s connect timeout: ESTABLISHED", c_accept_slow },
	{ "dat_cr_accept after the connect timed out: TIMED_OUT, no one-sided ESTABLISHED",
	  c_accept_too_late },
	{ "dat_cr_reject (236 bytes of private data): PEER_REJECTED, clean streams, NON_OPERATIONAL",
	  c_reject },
	{ "one SSP, one request: a second connect gets no CR and TIMED_OUT", c_one_request },
	{ "peer closes before requesting: DAT_IW_SOCKET_DOWN_EVENT, NON_OPERATIONAL",
	  c_socket_down_close },
	{ "peer resets before requesting: DAT_IW_SOCKET_DOWN_EVENT, NON_OPERATIONAL",
	  c_socket_down_reset },
	{ "socket_connect to a silent peer: TIMED_OUT in time, the socket clean", c_timed_out },
	{ "socket_connect answered with plain stream data: NON_PEER_REJECTED, the data unread",
	  c_non_peer_rejected },
	{ "socket_connect, the peer closes the socket: UNREACHABLE", c_unreachable_close },
	{ "socket_connect, the peer resets the socket: UNREACHABLE", c_unreachable_reset },
	{ "ssp_free with a request delivered: the request can still be accepted",
	  c_free_after_request },
	{ "two SSPs on one EVD: each CR names its SSP and EP, both accepted", c_two_ssps },
	{ "dat_ep_free while a socket connect waits gives the socket back",
	  c_ep_free_while_connecting },
	{ "ssp_free: handle invalid after, a later request PEER_REJECTED", c_free },
	{ "abrupt dat_ia_close with an SSP and a socket connect waiting returns",
	  c_ia_close_busy },
};

static int setup(const char *ia_name)
{
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_ATTR a;
	DAT_RETURN rc;
	int one = 1;

	rc = dat_ia_open((DAT_NAME_PTR)ia_name, 8, &async, &ia);
	if (rc != DAT_SUCCESS)
		return bad("dat_ia_open(%s): %s", ia_name, rcname(rc));
	OK(dat_ia_query(ia, NULL, DAT_IA_ALL, &a, 0, NULL), "dat_ia_query");
	OK(dat_pz_create(ia, &pz), "dat_pz_create");
	memset(&ia_addr, 0, sizeof(ia_addr));
	if (a.ia_address_ptr->sa_family == AF_INET) {
		ia_len = sizeof(struct sockaddr_in);
	} else if (a.ia_address_ptr->sa_family == AF_INET6) {
		ia_len = sizeof(struct sockaddr_in6);
	} else {
		return bad("IA address family %d", a.ia_address_ptr->sa_family);
	}
	memcpy(&ia_addr, a.ia_address_ptr, ia_len);
	((struct sockaddr_in *)&ia_addr)->sin_port = 0;	/* same place in sockaddr_in6 */
	lfd = tcp_socket();
	if (lfd < 0)
		return bad("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ia_addr, ia_len) < 0 || listen(lfd, 16) < 0)
		return bad("listen on the IA's address %s: %s",
			   addr_str((struct sockaddr *)&ia_addr), strerror(errno));
	lst_len = sizeof(lst_addr);
	getsockname(lfd, (struct sockaddr *)&lst_addr, &lst_len);
	printf("# IA %s on %s, TCP listener %s\n", ia_name, a.adapter_name,
	       addr_str((struct sockaddr *)&lst_addr));
	return 0;
}

int main(int argc, char **argv)
{
	const char *ia_name = "ofa-v2-sdp-iwarp";
	const char *only = getenv("SSP_CASES");	/* e.g. "10,12": run only those */
	int n = (int)(sizeof(cases) / sizeof(cases[0])), failed = 0, o;

	while ((o = getopt(argc, argv, "P:v")) != -1) {
		switch (o) {
		case 'P': ia_name = optarg; break;
		case 'v': verbose = 1; break;
		default:
			fprintf(stderr, "usage: ssp_semantics [-P ia_name] [-v]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%d\n", n);
	if (setup(ia_name) < 0) {
		printf("Bail out! %s\n", why);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct env e;
		char tag[16];
		double t0 = now();
		int r;

		snprintf(tag, sizeof(tag), ",%d,", i + 1);
		if (only) {
			char list[256];

			snprintf(list, sizeof(list), ",%s,", only);
			if (!strstr(list, tag)) {
				printf("ok %d %s # SKIP not in SSP_CASES\n", i + 1, cases[i].name);
				continue;
			}
		}
		why[0] = 0;
		r = env_open(&e);
		if (r == 0)
			r = cases[i].fn(&e);
		if (r == 0) {
			printf("ok %d %s\n", i + 1, cases[i].name);
		} else {
			printf("not ok %d %s: %s\n", i + 1, cases[i].name, why);
			failed++;
		}
		if (verbose)
			note("case %d took %.2f s", i + 1, now() - t0);
		env_close(&e);
	}
	if (!ia_closed) {
		dat_pz_free(pz);
		if (dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG) != DAT_SUCCESS)
			note("dat_ia_close failed");
	}
	close(lfd);
	printf("# ssp_semantics: %d of %d cases failed\n", failed, n);
	return failed ? 1 : 0;
}
