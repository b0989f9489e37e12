/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * dat_pair: a plain DAPL program (only <dat2/udat.h> and -ldat2) that
 * checks a DAT provider end to end.
 *
 *   dat_pair --server [-P ia_name] [-p port] [-s bytes] [-n N]
 *   dat_pair --client -h server_addr [-P ia_name] [-p port] [-s bytes] [-x addr] [-n N]
 *
 * The server refuses the first connect request with private data (the
 * client checks it got DAT_CONNECTION_EVENT_PEER_REJECTED with that data,
 * resets its EP and connects again); with -x the client first connects an
 * EP of its own to an address that does not answer, with a 1 s timeout.
 * The client connects with private data, the server checks it and
 * accepts with its own.  They swap {address, rmr_context, length} of a
 * data buffer in SEND messages.  The client RDMA-writes its buffer (a
 * seeded pattern) into the server's in 1 MiB pieces (all but the last
 * with DAT_COMPLETION_SUPPRESS_FLAG) and sends WRITE_DONE with the
 * checksum; the server checks its buffer against it.  The server then
 * fills its buffer with another pattern and sends READ_READY with that
 * checksum; the client RDMA-reads it and checks.  The client disconnects,
 * and both see DISCONNECTED.  With -n N (both sides) N short connections
 * follow on the same EPs (reset, connect, accept): in each the server
 * sends first, right at ESTABLISHED, and the client answers, then
 * disconnects.  A responder that sends at once is what an iWARP initiator
 * must survive (dat/README.md, the RTR handshake).  Each side prints one
 * line: "dat_pair: server OK ..." or "dat_pair: client FAIL ...".  Exit
 * status 0 only on OK.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dat2/udat.h>
#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define TMO (30u * 1000 * 1000)	/* evd_wait timeout: 30 s in microseconds */
#define NRECV 4
#define CHUNK (1u << 20)

#define NOT_YET "dat_pair: not yet"

enum { MSG_INFO = 1, MSG_WRITE_DONE, MSG_READ_READY, MSG_READ_DONE, MSG_HELLO, MSG_HELLO_ACK };

struct msg {
	uint32_t type;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
	uint64_t sum;
};

static const char *role = "?";
static int checks;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("dat_pair: %s FAIL ", role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void ck(DAT_RETURN rc, const char *what)
{
	const char *maj = "", *min = "";

	if (rc == DAT_SUCCESS)
		return;
	dat_strerror(rc, &maj, &min);
	fail("%s: 0x%08x %s %s", what, rc, maj, min);
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static void fill(void *p, size_t n, uint64_t seed)
{
	uint64_t *w = p;

	for (size_t i = 0; i < n / 8; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		w[i] = seed;
	}
}

struct ctx {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, cr_evd, conn_evd, req_evd, rcv_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	char *data;
	size_t size;
	DAT_LMR_HANDLE data_lmr, msg_lmr;
	DAT_LMR_CONTEXT data_lctx, msg_lctx;
	DAT_RMR_CONTEXT data_rctx, msg_rctx;
	struct msg *msgs;	/* [0..NRECV-1] receive, [NRECV] send */
	struct msg peer;	/* the peer's buffer */
	unsigned port;
};

static DAT_EVENT wait_ev(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, const char *what)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	ck(dat_evd_wait(evd, TMO, 1, &ev, &nmore), what);
	if (ev.event_number != want)
		fail("%s: event 0x%x, wanted 0x%x", what, ev.event_number, want);
	if (want == DAT_DTO_COMPLETION_EVENT &&
	    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		fail("%s: DTO status %d", what, ev.event_data.dto_completion_event_data.status);
	return ev;
}

static void post_recv(struct ctx *c, int i)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)&c->msgs[i], sizeof(struct msg),
				c->msg_lctx };
	DAT_DTO_COOKIE ck_ = { .as_64 = (DAT_UINT64)i };

	ck(dat_ep_post_recv(c->ep, 1, &iov, ck_, DAT_COMPLETION_DEFAULT_FLAG), "post_recv");
}

static void send_msg(struct ctx *c, const struct msg *m)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)&c->msgs[NRECV], sizeof(struct msg),
				c->msg_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = 0x5e9d };
	DAT_EVENT ev;

	c->msgs[NRECV] = *m;
	ck(dat_ep_post_send(c->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), "post_send");
	ev = wait_ev(c->req_evd, DAT_DTO_COMPLETION_EVENT, "send completion");
	if (ev.event_data.dto_completion_event_data.user_cookie.as_64 != 0x5e9d ||
	    ev.event_data.dto_completion_event_data.ep_handle != c->ep ||
	    ev.event_data.dto_completion_event_data.transfered_length != sizeof(struct msg))
		fail("send completion: wrong cookie, EP or length");
	checks++;
}

static struct msg recv_msg(struct ctx *c, uint32_t type)
{
	DAT_EVENT ev = wait_ev(c->rcv_evd, DAT_DTO_COMPLETION_EVENT, "recv completion");
	int i = (int)ev.event_data.dto_completion_event_data.user_cookie.as_64;
	struct msg m;

	if (i < 0 || i >= NRECV ||
	    ev.event_data.dto_completion_event_data.transfered_length != sizeof(struct msg))
		fail("recv completion: cookie %d length %u", i,
		     ev.event_data.dto_completion_event_data.transfered_length);
	m = c->msgs[i];
	/* READ_DONE and HELLO_ACK are a connection's last message: the
	 * client disconnects right after, and a receive posted on a
	 * disconnected EP is DAT_INVALID_STATE */
	if (type != MSG_READ_DONE && type != MSG_HELLO_ACK)
		post_recv(c, i);
	if (m.type != type)
		fail("message type %u, wanted %u", m.type, type);
	checks++;
	return m;
}

static void setup(struct ctx *c, const char *ia_name, int server)
{
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_EP_ATTR attr;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pattr;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;
	int ssp = 0;

	c->async_evd = DAT_HANDLE_NULL;
	ck(dat_ia_open((DAT_NAME_PTR)ia_name, 8, &c->async_evd, &c->ia), "dat_ia_open");
	ck(dat_ia_query(c->ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pattr),
	   "dat_ia_query");
	for (int i = 0; i < pattr.num_provider_specific_attr; i++)
		if (!strcmp(pattr.provider_specific_attr[i].name, "DAT_IW_ATTR_SSP") &&
		    !strcmp(pattr.provider_specific_attr[i].value, "TRUE"))
			ssp = 1;
	if (ia_attr.extension_supported != DAT_EXTENSION_IW || !ssp)
		fail("ia_query: extension %d, DAT_IW_ATTR_SSP %s", ia_attr.extension_supported,
		     ssp ? "TRUE" : "missing");
	fprintf(stderr, "dat_pair: %s: IA %s on %s, max private data %d\n", role, ia_name,
		ia_attr.adapter_name, pattr.max_private_data_size);
	checks++;
	ck(dat_pz_create(c->ia, &c->pz), "dat_pz_create");
	if (server)
		ck(dat_evd_create(c->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &c->cr_evd),
		   "evd_create cr");
	ck(dat_evd_create(c->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &c->conn_evd),
	   "evd_create conn");
	ck(dat_evd_create(c->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &c->req_evd),
	   "evd_create req");
	ck(dat_evd_create(c->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &c->rcv_evd),
	   "evd_create rcv");
	/* an empty EVD: dequeue says so, a short wait times out */
	rc = dat_evd_dequeue(c->rcv_evd, &ev);
	if (DAT_GET_TYPE(rc) != DAT_QUEUE_EMPTY)
		fail("dequeue on an empty EVD: 0x%08x", rc);
	rc = dat_evd_wait(c->rcv_evd, 20000, 1, &ev, &nmore);
	if (DAT_GET_TYPE(rc) != DAT_TIMEOUT_EXPIRED)
		fail("20 ms wait on an empty EVD: 0x%08x", rc);
	checks += 2;

	memset(&attr, 0, sizeof(attr));
	attr.service_type = DAT_SERVICE_TYPE_RC;
	attr.max_message_size = 1u << 24;
	attr.max_rdma_size = 1u << 24;
	attr.qos = DAT_QOS_BEST_EFFORT;
	attr.max_recv_dtos = 16;
	attr.max_request_dtos = 16;
	attr.max_recv_iov = 1;
	attr.max_request_iov = 1;
	attr.max_rdma_read_in = 4;
	attr.max_rdma_read_out = 4;
	attr.max_rdma_read_iov = 1;
	attr.max_rdma_write_iov = 1;
	ck(dat_ep_create(c->ia, c->pz, c->rcv_evd, c->req_evd, c->conn_evd, &attr, &c->ep),
	   "dat_ep_create");

	c->data = aligned_alloc(4096, c->size);
	c->msgs = aligned_alloc(64, sizeof(struct msg) * (NRECV + 1) + 64);
	if (!c->data || !c->msgs)
		fail("out of memory");
	memset(c->data, 0, c->size);
	region.for_va = c->data;
	ck(dat_lmr_create(c->ia, DAT_MEM_TYPE_VIRTUAL, region, c->size, c->pz,
			  DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &c->data_lmr, &c->data_lctx,
			  &c->data_rctx, &rlen, &raddr), "lmr_create data");
	region.for_va = c->msgs;
	ck(dat_lmr_create(c->ia, DAT_MEM_TYPE_VIRTUAL, region,
			  sizeof(struct msg) * (NRECV + 1), c->pz,
			  DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
			  DAT_VA_TYPE_VA, &c->msg_lmr, &c->msg_lctx, &c->msg_rctx, &rlen, &raddr),
	   "lmr_create msgs");
	for (int i = 0; i < NRECV; i++)
		post_recv(c, i);
}

static void want_type(DAT_RETURN rc, DAT_RETURN type, const char *what)
{
	if (DAT_GET_TYPE(rc) != DAT_GET_TYPE(type))
		fail("%s: 0x%08x, wanted type 0x%08x", what, rc, type);
	checks++;
}

/* What a consumer may rely on before connecting: return codes, contexts,
 * handle types, software events, the extension hook. */
static void api_checks(struct ctx *c, int server)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)c->data, 64, c->data_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = 1 };
	DAT_CONTEXT ctx = { .as_64 = 0x1234 }, got;
	DAT_HANDLE_TYPE type;
	DAT_EVD_HANDLE sw;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_EP_PARAM epp;
	DAT_PSP_HANDLE psp2;

	want_type(dat_ep_post_send(c->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_INVALID_STATE, "post_send before connect");
	want_type(dat_evd_post_se(c->req_evd, &ev), DAT_INVALID_PARAMETER,
		  "post_se on a DTO EVD");
	want_type(dat_pz_free(c->pz), DAT_INVALID_STATE, "pz_free of a PZ in use");
	want_type(dat_ia_close(c->ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_INVALID_STATE,
		  "graceful ia_close with objects");
	/* an op the extension has not (0-3 are the SSP's; libdat2 itself
	 * takes DAT_OPEN_EXTENSION_BASE, 0x1000, and up, with an IA name) */
	want_type(dat_extension_op(c->ep, 0xff), DAT_NOT_IMPLEMENTED, "extension op 0xff");
	/* a handle of the wrong type */
	want_type(dat_ep_post_send(c->pz, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_INVALID_HANDLE, "post_send on a PZ handle");
	want_type(dat_pz_free(c->ep), DAT_INVALID_HANDLE, "pz_free of an EP handle");

	ck(dat_set_consumer_context(c->ia, ctx), "set_consumer_context(ia)");
	ck(dat_get_consumer_context(c->ia, &got), "get_consumer_context(ia)");
	ck(dat_set_consumer_context(c->ep, ctx), "set_consumer_context(ep)");
	ck(dat_get_consumer_context(c->ep, &got), "get_consumer_context(ep)");
	if (got.as_64 != 0x1234)
		fail("consumer context lost");
	ck(dat_get_handle_type(c->ep, &type), "get_handle_type");
	if (type != DAT_HANDLE_TYPE_EP)
		fail("handle type %d for an EP", type);
	ck(dat_ep_query(c->ep, DAT_EP_FIELD_ALL, &epp), "ep_query");
	if (epp.ep_state != DAT_EP_STATE_UNCONNECTED || epp.ep_attr.max_recv_dtos != 16)
		fail("ep_query: state %d, max_recv_dtos %d", epp.ep_state,
		     epp.ep_attr.max_recv_dtos);
	checks += 3;

	ck(dat_evd_create(c->ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &sw), "evd sw");
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = c;
	ck(dat_evd_post_se(sw, &ev), "post_se");
	memset(&ev, 0, sizeof(ev));
	ck(dat_evd_wait(sw, TMO, 1, &ev, &nmore), "wait software event");
	if (ev.event_number != DAT_SOFTWARE_EVENT || ev.event_data.software_event_data.pointer != c ||
	    nmore != 0)
		fail("software event came back wrong");
	ck(dat_evd_free(sw), "evd_free sw");
	checks++;

	if (server) {
		want_type(dat_psp_create(c->ia, c->port, c->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2),
			  DAT_CONN_QUAL_IN_USE, "second PSP on the same conn_qual");
	}
}

static void swap_info(struct ctx *c)
{
	struct msg m = { .type = MSG_INFO, .rkey = c->data_rctx,
			 .addr = (uint64_t)(uintptr_t)c->data, .len = c->size };

	send_msg(c, &m);
	c->peer = recv_msg(c, MSG_INFO);
	if (c->peer.len < c->size)
		fail("peer buffer %llu bytes < %zu", (unsigned long long)c->peer.len, c->size);
}

static void disconnect(struct ctx *c, int active)
{
	DAT_EVENT ev;

	if (active)
		ck(dat_ep_disconnect(c->ep, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
	ev = wait_ev(c->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect event");
	if (ev.event_data.connect_event_data.ep_handle != c->ep)
		fail("disconnect event names another EP");
	checks++;
}

/* Reset the EP after a connection: collect the receives the reset
 * flushed and post them again. */
static void reset_ep(struct ctx *c)
{
	DAT_EVENT ev;

	ck(dat_ep_reset(c->ep), "dat_ep_reset");
	while (dat_evd_dequeue(c->rcv_evd, &ev) == DAT_SUCCESS)
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_ERR_FLUSHED)
			fail("reset: a receive completed with status %d",
			     ev.event_data.dto_completion_event_data.status);
	for (int i = 0; i < NRECV; i++)
		post_recv(c, i);
}

/* -n: short connections on the same EPs, the server sending first. */
static void burst(struct ctx *c, int server, const struct sockaddr *dst, unsigned n)
{
	struct msg m;
	DAT_EVENT ev;
	char what[48];

	for (unsigned i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "burst %u: established", i);
		reset_ep(c);
		if (server) {
			ev = wait_ev(c->cr_evd, DAT_CONNECTION_REQUEST_EVENT, "burst request");
			ck(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, c->ep, 0,
					 NULL), "burst accept");
			wait_ev(c->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, what);
			/* at once: no message of the client's has come yet */
			m = (struct msg){ .type = MSG_HELLO, .len = i };
			send_msg(c, &m);
			m = recv_msg(c, MSG_HELLO_ACK);
			if (m.len != i)
				fail("burst %u: the answer says %llu", i, (unsigned long long)m.len);
			disconnect(c, 0);
		} else {
			ck(dat_ep_connect(c->ep, (DAT_IA_ADDRESS_PTR)dst, c->port, TMO, 0, NULL,
					  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
			   "burst connect");
			wait_ev(c->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, what);
			m = recv_msg(c, MSG_HELLO);
			if (m.len != i)
				fail("burst %u: the server's message says %llu", i,
				     (unsigned long long)m.len);
			m = (struct msg){ .type = MSG_HELLO_ACK, .len = i };
			send_msg(c, &m);
			disconnect(c, 1);
		}
	}
	if (n)
		checks++;
}

static void teardown(struct ctx *c)
{
	/* an EVD still used by an EP cannot go */
	if (DAT_GET_TYPE(dat_evd_free(c->rcv_evd)) != DAT_INVALID_STATE)
		fail("evd_free of an EVD in use did not say DAT_INVALID_STATE");
	checks++;
	if (c->psp)
		ck(dat_psp_free(c->psp), "dat_psp_free");
	ck(dat_ep_free(c->ep), "dat_ep_free");
	ck(dat_lmr_free(c->data_lmr), "lmr_free");
	ck(dat_lmr_free(c->msg_lmr), "lmr_free");
	ck(dat_evd_free(c->rcv_evd), "evd_free");
	ck(dat_evd_free(c->req_evd), "evd_free");
	ck(dat_evd_free(c->conn_evd), "evd_free");
	if (c->cr_evd)
		ck(dat_evd_free(c->cr_evd), "evd_free");
	ck(dat_pz_free(c->pz), "pz_free");
	ck(dat_ia_close(c->ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close");
	free(c->data);
	free(c->msgs);
}

static double secs(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

static void server(struct ctx *c, const char *ia_name, unsigned port, unsigned nburst)
{
	static const char hello[] = "dat_pair server hello";
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;
	struct msg m;

	setup(c, ia_name, 1);
	ck(dat_psp_create(c->ia, port, c->cr_evd, DAT_PSP_CONSUMER_FLAG, &c->psp),
	   "dat_psp_create");
	fprintf(stderr, "dat_pair: server: listening on conn_qual %u\n", port);
	c->port = port;
	api_checks(c, 1);
	/* refuse the first request with a reason, take the next */
	ev = wait_ev(c->cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	ck(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, sizeof(NOT_YET),
			 (DAT_PVOID)NOT_YET), "dat_cr_reject");
	checks++;
	ev = wait_ev(c->cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	if (ev.event_data.cr_arrival_event_data.conn_qual != port ||
	    ev.event_data.cr_arrival_event_data.sp_handle.psp_handle != c->psp)
		fail("CR event: conn_qual %llu or PSP wrong",
		     (unsigned long long)ev.event_data.cr_arrival_event_data.conn_qual);
	ck(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), "dat_cr_query");
	if (crp.private_data_size != (DAT_COUNT)sizeof("dat_pair client hello") ||
	    memcmp(crp.private_data, "dat_pair client hello", (size_t)crp.private_data_size))
		fail("connect private data: %d bytes", crp.private_data_size);
	checks++;
	ck(dat_cr_accept(cr, c->ep, sizeof(hello), (DAT_PVOID)hello), "dat_cr_accept");
	wait_ev(c->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	checks++;
	swap_info(c);

	m = recv_msg(c, MSG_WRITE_DONE);
	if (fnv(c->data, c->size) != m.sum)
		fail("RDMA write: the %zu bytes written do not match the client's checksum",
		     c->size);
	checks++;

	fill(c->data, c->size, 0xfeedbeefcafe1234ull);
	m = (struct msg){ .type = MSG_READ_READY, .sum = fnv(c->data, c->size) };
	send_msg(c, &m);
	recv_msg(c, MSG_READ_DONE);
	disconnect(c, 0);
	burst(c, 1, NULL, nburst);
	teardown(c);
	printf("dat_pair: server OK: %zu bytes RDMA-written by the client verified, %zu bytes "
	       "served to its RDMA read, %u short connections, %d checks\n", c->size, c->size,
	       nburst, checks);
}

/* A connect to an address nobody answers, with a 1 s timeout, on an EP
 * of its own: TIMED_OUT (or UNREACHABLE, if address resolution gives up
 * first), then the EP is freed. */
static void connect_nowhere(struct ctx *c, const char *host, unsigned port)
{
	struct addrinfo *ai, hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	struct timespec t0;

	if (getaddrinfo(host, NULL, &hints, &ai) != 0)
		fail("cannot resolve %s", host);
	ck(dat_ep_create(c->ia, c->pz, c->rcv_evd, c->req_evd, c->conn_evd, NULL, &ep),
	   "dat_ep_create (default attributes)");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)ai->ai_addr, port, 1000000, 0, NULL,
			  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG), "connect nowhere");
	freeaddrinfo(ai);
	ck(dat_evd_wait(c->conn_evd, TMO, 1, &ev, &nmore), "wait connect nowhere");
	if ((ev.event_number != DAT_CONNECTION_EVENT_TIMED_OUT &&
	     ev.event_number != DAT_CONNECTION_EVENT_UNREACHABLE) ||
	    ev.event_data.connect_event_data.ep_handle != ep)
		fail("connect to %s: event 0x%x", host, ev.event_number);
	fprintf(stderr, "dat_pair: client: connect to %s: %s after %.1f s\n", host,
		ev.event_number == DAT_CONNECTION_EVENT_TIMED_OUT ? "TIMED_OUT" : "UNREACHABLE",
		secs(&t0));
	ck(dat_ep_free(ep), "dat_ep_free (nowhere)");
	checks++;
}

static void client(struct ctx *c, const char *ia_name, const char *host, unsigned port,
		   const char *nowhere, unsigned nburst)
{
	static const char hello[] = "dat_pair client hello";
	struct addrinfo *ai, hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	DAT_RMR_TRIPLET rmr;
	DAT_LMR_TRIPLET iov;
	DAT_DTO_COOKIE cookie;
	DAT_EVENT ev;
	DAT_RETURN rc;
	struct timespec t0;
	struct sockaddr_storage dst;
	struct msg m;
	double wsec, rsec;
	int tries = 0, rejected = 0;

	if (getaddrinfo(host, NULL, &hints, &ai) != 0)
		fail("cannot resolve %s", host);
	memset(&dst, 0, sizeof(dst));
	memcpy(&dst, ai->ai_addr, ai->ai_addrlen);
	c->port = port;
	setup(c, ia_name, 0);
	api_checks(c, 0);
	if (nowhere)
		connect_nowhere(c, nowhere, port);
	fill(c->data, c->size, 0x0123456789abcdefull);

	/* the server may not listen yet: retry a refused connect */
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ck(dat_ep_connect(c->ep, (DAT_IA_ADDRESS_PTR)ai->ai_addr, port, TMO,
				  sizeof(hello), (DAT_PVOID)hello, DAT_QOS_BEST_EFFORT,
				  DAT_CONNECT_DEFAULT_FLAG), "dat_ep_connect");
		ck(dat_evd_wait(c->conn_evd, TMO + 5000000, 1, &ev, &(DAT_COUNT){ 0 }),
		   "wait connect");
		if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED)
			break;
		if (ev.event_number == DAT_CONNECTION_EVENT_PEER_REJECTED) {
			/* the server refuses the first request, with a reason */
			if (rejected++ ||
			    ev.event_data.connect_event_data.private_data_size != sizeof(NOT_YET) ||
			    memcmp(ev.event_data.connect_event_data.private_data, NOT_YET,
				   sizeof(NOT_YET)))
				fail("unexpected reject (%d bytes of private data)",
				     ev.event_data.connect_event_data.private_data_size);
			checks++;
		} else if (ev.event_number != DAT_CONNECTION_EVENT_NON_PEER_REJECTED &&
		    ev.event_number != DAT_CONNECTION_EVENT_UNREACHABLE)
			fail("connect: event 0x%x", ev.event_number);
		else
			fprintf(stderr, "dat_pair: client: connect try %d: %s after %.1f s\n",
				tries + 1,
				ev.event_number == DAT_CONNECTION_EVENT_UNREACHABLE
					? "UNREACHABLE" : "NON_PEER_REJECTED", secs(&t0));
		if (++tries > 50)
			fail("connect: refused %d times", tries);
		reset_ep(c);
		nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
	}
	freeaddrinfo(ai);
	if (!rejected)
		fail("connected without the server's reject first");
	if (ev.event_data.connect_event_data.private_data_size !=
		    (DAT_COUNT)sizeof("dat_pair server hello") ||
	    memcmp(ev.event_data.connect_event_data.private_data, "dat_pair server hello",
		   sizeof("dat_pair server hello")))
		fail("accept private data: %d bytes",
		     ev.event_data.connect_event_data.private_data_size);
	checks++;
	swap_info(c);

	/* RDMA write in 1 MiB pieces; only the last one completes */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t off = 0; off < c->size; off += CHUNK) {
		size_t n = c->size - off < CHUNK ? c->size - off : CHUNK;
		int last = off + n >= c->size;

		iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(c->data + off),
					 (DAT_SEG_LENGTH)n, c->data_lctx };
		rmr = (DAT_RMR_TRIPLET){ c->peer.addr + off, (DAT_SEG_LENGTH)n, c->peer.rkey };
		cookie.as_64 = off;
		rc = dat_ep_post_rdma_write(c->ep, 1, &iov, cookie, &rmr,
					    last ? DAT_COMPLETION_DEFAULT_FLAG
						 : DAT_COMPLETION_SUPPRESS_FLAG);
		ck(rc, "dat_ep_post_rdma_write");
		if (last) {
			ev = wait_ev(c->req_evd, DAT_DTO_COMPLETION_EVENT, "write completion");
			if (ev.event_data.dto_completion_event_data.user_cookie.as_64 != off ||
			    ev.event_data.dto_completion_event_data.transfered_length != n ||
			    ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_WRITE)
				fail("write completion: cookie/length/operation wrong");
		}
	}
	wsec = secs(&t0);
	checks++;
	m = (struct msg){ .type = MSG_WRITE_DONE, .sum = fnv(c->data, c->size) };
	send_msg(c, &m);

	m = recv_msg(c, MSG_READ_READY);
	memset(c->data, 0, c->size);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t off = 0; off < c->size; off += CHUNK) {
		size_t n = c->size - off < CHUNK ? c->size - off : CHUNK;

		iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(c->data + off),
					 (DAT_SEG_LENGTH)n, c->data_lctx };
		rmr = (DAT_RMR_TRIPLET){ c->peer.addr + off, (DAT_SEG_LENGTH)n, c->peer.rkey };
		cookie.as_64 = off;
		ck(dat_ep_post_rdma_read(c->ep, 1, &iov, cookie, &rmr,
					 DAT_COMPLETION_DEFAULT_FLAG), "dat_ep_post_rdma_read");
		ev = wait_ev(c->req_evd, DAT_DTO_COMPLETION_EVENT, "read completion");
		if (ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_READ ||
		    ev.event_data.dto_completion_event_data.transfered_length != n)
			fail("read completion: operation/length wrong");
	}
	rsec = secs(&t0);
	if (fnv(c->data, c->size) != m.sum)
		fail("RDMA read: the %zu bytes read do not match the server's checksum", c->size);
	checks++;
	m = (struct msg){ .type = MSG_READ_DONE };
	send_msg(c, &m);
	disconnect(c, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	burst(c, 0, (const struct sockaddr *)&dst, nburst);
	fprintf(stderr, "dat_pair: client: %u short connections in %.2f s\n", nburst, secs(&t0));
	teardown(c);
	printf("dat_pair: client OK: RDMA write %zu bytes (%.1f MB/s) and RDMA read %zu bytes "
	       "(%.1f MB/s) checksummed, %u short connections, %d checks\n", c->size,
	       c->size / wsec / 1e6, c->size, c->size / rsec / 1e6, nburst, checks);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", no_argument, NULL, 'S' },
		{ "client", no_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ia_name = "ofa-v2-sdp-iwarp", *host = NULL, *nowhere = NULL;
	unsigned port = 18515, nburst = 0;
	size_t size = 4u << 20;
	struct ctx c;
	int mode = 0, o;

	while ((o = getopt_long(argc, argv, "P:h:p:s:x:n:", opts, NULL)) != -1) {
		switch (o) {
		case 'S': mode = 'S'; break;
		case 'C': mode = 'C'; break;
		case 'P': ia_name = optarg; break;
		case 'h': host = optarg; break;
		case 'p': port = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': size = (size_t)strtoull(optarg, NULL, 0); break;
		case 'x': nowhere = optarg; break;
		case 'n': nburst = (unsigned)strtoul(optarg, NULL, 0); break;
		default: mode = 0; break;
		}
	}
	if (!mode || (mode == 'C' && !host) || size < 8 || size % 8) {
		fprintf(stderr, "usage: dat_pair --server|--client -h ADDR [-P ia_name] [-p port] "
				"[-s bytes, a multiple of 8]\n"
				"       [-x ADDR: client, first time out a connect to ADDR]\n"
				"       [-n N: then N short connections, the server sending first]\n");
		return 2;
	}
	memset(&c, 0, sizeof(c));
	c.size = size;
	role = mode == 'S' ? "server" : "client";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mode == 'S')
		server(&c, ia_name, port, nburst);
	else
		client(&c, ia_name, host, port, nowhere, nburst);
	return 0;
}
