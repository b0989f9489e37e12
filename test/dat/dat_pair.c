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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "pair.h"

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

struct ctx {
	struct pair_side s;
	DAT_PSP_HANDLE psp;
	struct msg peer;	/* the peer's buffer */
	unsigned port;
};

static void send_msg(struct ctx *c, const struct msg *m)
{
	pair_send(&c->s, m, sizeof(*m));
}

static struct msg recv_msg(struct ctx *c, uint32_t type)
{
	struct msg m;

	/* READ_DONE and HELLO_ACK are a connection's last message: the
	 * client disconnects right after */
	pair_recv(&c->s, &m, sizeof(m), type != MSG_READ_DONE && type != MSG_HELLO_ACK);
	if (m.type != type)
		pair_fail("message type %u, wanted %u", m.type, type);
	return m;
}

static void setup(struct ctx *c, const char *ia_name, int server)
{
	const struct pair_setup cfg = {
		.ia_name = ia_name,
		.cr_evd = server,
		.cr_qlen = 8,
		.conn_qlen = 8,
		.req_qlen = 32,
		.rcv_qlen = 32,
		.ep_attr = {
			.service_type = DAT_SERVICE_TYPE_RC,
			.max_message_size = 1u << 24,
			.max_rdma_size = 1u << 24,
			.qos = DAT_QOS_BEST_EFFORT,
			.max_recv_dtos = 16,
			.max_request_dtos = 16,
			.max_recv_iov = 1,
			.max_request_iov = 1,
			.max_rdma_read_in = 4,
			.max_rdma_read_out = 4,
			.max_rdma_read_iov = 1,
			.max_rdma_write_iov = 1,
		},
		.nrecv = NRECV,
		.slot = sizeof(struct msg),
		.data_priv = DAT_MEM_PRIV_ALL_FLAG,
		.size = c->s.size,
	};
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;

	pair_open(&c->s, &cfg);
	fprintf(stderr, "dat_pair: %s: IA %s on %s, max private data %d\n", pair_role, ia_name,
		c->s.ia_attr.adapter_name, c->s.pattr.max_private_data_size);
	/* an empty EVD: dequeue says so, a short wait times out */
	rc = dat_evd_dequeue(c->s.rcv_evd, &ev);
	if (DAT_GET_TYPE(rc) != DAT_QUEUE_EMPTY)
		pair_fail("dequeue on an empty EVD: 0x%08x", rc);
	rc = dat_evd_wait(c->s.rcv_evd, 20000, 1, &ev, &nmore);
	if (DAT_GET_TYPE(rc) != DAT_TIMEOUT_EXPIRED)
		pair_fail("20 ms wait on an empty EVD: 0x%08x", rc);
	pair_checks += 2;
}

/* What a consumer may rely on before connecting: return codes, contexts,
 * handle types, software events, the extension hook. */
static void api_checks(struct ctx *c, int server)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)c->s.data, 64, c->s.data_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = 1 };
	DAT_CONTEXT ctx = { .as_64 = 0x1234 }, got;
	DAT_HANDLE_TYPE type;
	DAT_EVD_HANDLE sw;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_EP_PARAM epp;
	DAT_PSP_HANDLE psp2;

	pair_want_type(dat_ep_post_send(c->s.ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_INVALID_STATE, "post_send before connect");
	pair_want_type(dat_evd_post_se(c->s.req_evd, &ev), DAT_INVALID_PARAMETER,
		  "post_se on a DTO EVD");
	pair_want_type(dat_pz_free(c->s.pz), DAT_INVALID_STATE, "pz_free of a PZ in use");
	pair_want_type(dat_ia_close(c->s.ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_INVALID_STATE,
		  "graceful ia_close with objects");
	/* an op the extension has not (0-3 are the SSP's; libdat2 itself
	 * takes DAT_OPEN_EXTENSION_BASE, 0x1000, and up, with an IA name) */
	pair_want_type(dat_extension_op(c->s.ep, 0xff), DAT_NOT_IMPLEMENTED, "extension op 0xff");
	/* a handle of the wrong type */
	pair_want_type(dat_ep_post_send(c->s.pz, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		  DAT_INVALID_HANDLE, "post_send on a PZ handle");
	pair_want_type(dat_pz_free(c->s.ep), DAT_INVALID_HANDLE, "pz_free of an EP handle");

	pair_ck(dat_set_consumer_context(c->s.ia, ctx), "set_consumer_context(ia)");
	pair_ck(dat_get_consumer_context(c->s.ia, &got), "get_consumer_context(ia)");
	pair_ck(dat_set_consumer_context(c->s.ep, ctx), "set_consumer_context(ep)");
	pair_ck(dat_get_consumer_context(c->s.ep, &got), "get_consumer_context(ep)");
	if (got.as_64 != 0x1234)
		pair_fail("consumer context lost");
	pair_ck(dat_get_handle_type(c->s.ep, &type), "get_handle_type");
	if (type != DAT_HANDLE_TYPE_EP)
		pair_fail("handle type %d for an EP", type);
	pair_ck(dat_ep_query(c->s.ep, DAT_EP_FIELD_ALL, &epp), "ep_query");
	if (epp.ep_state != DAT_EP_STATE_UNCONNECTED || epp.ep_attr.max_recv_dtos != 16)
		pair_fail("ep_query: state %d, max_recv_dtos %d", epp.ep_state,
		     epp.ep_attr.max_recv_dtos);
	pair_checks += 3;

	pair_ck(dat_evd_create(c->s.ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &sw), "evd sw");
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = c;
	pair_ck(dat_evd_post_se(sw, &ev), "post_se");
	memset(&ev, 0, sizeof(ev));
	pair_ck(dat_evd_wait(sw, PAIR_TMO, 1, &ev, &nmore), "wait software event");
	if (ev.event_number != DAT_SOFTWARE_EVENT || ev.event_data.software_event_data.pointer != c ||
	    nmore != 0)
		pair_fail("software event came back wrong");
	pair_ck(dat_evd_free(sw), "evd_free sw");
	pair_checks++;

	if (server) {
		pair_want_type(dat_psp_create(c->s.ia, c->port, c->s.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2),
			  DAT_CONN_QUAL_IN_USE, "second PSP on the same conn_qual");
	}
}

static void swap_info(struct ctx *c)
{
	struct msg m = { .type = MSG_INFO, .rkey = c->s.data_rctx,
			 .addr = (uint64_t)(uintptr_t)c->s.data, .len = c->s.size };

	send_msg(c, &m);
	c->peer = recv_msg(c, MSG_INFO);
	if (c->peer.len < c->s.size)
		pair_fail("peer buffer %llu bytes < %zu", (unsigned long long)c->peer.len, c->s.size);
}

static void disconnect(struct ctx *c, int active)
{
	DAT_EVENT ev;

	if (active)
		pair_ck(dat_ep_disconnect(c->s.ep, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
	ev = pair_wait(c->s.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect event");
	if (ev.event_data.connect_event_data.ep_handle != c->s.ep)
		pair_fail("disconnect event names another EP");
	pair_checks++;
}

/* Reset the EP after a connection: collect the receives the reset
 * flushed and post them again. */
static void reset_ep(struct ctx *c)
{
	pair_ck(dat_ep_reset(c->s.ep), "dat_ep_reset");
	pair_drop_flushed(&c->s);
	for (int i = 0; i < NRECV; i++)
		pair_post_recv(&c->s, i);
}

/* -n: short connections on the same EPs, the server sending first. */
static void burst(struct ctx *c, int server, const struct sockaddr *dst, unsigned n)
{
	struct msg m;
	DAT_EVENT ev;
	char what[48];
	unsigned flushed = 0;

	for (unsigned i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "burst %u: established", i);
		reset_ep(c);
		if (server) {
			ev = pair_wait(c->s.cr_evd, DAT_CONNECTION_REQUEST_EVENT, "burst request");
			pair_ck(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, c->s.ep, 0,
					 NULL), "burst accept");
			pair_wait(c->s.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, what);
			/* at once: no message of the client's has come yet.  The
			 * client answers and disconnects: the send's completion
			 * is taken after the answer (pair_post_send) */
			m = (struct msg){ .type = MSG_HELLO, .len = i };
			pair_post_send(&c->s, &m, sizeof(m));
			m = recv_msg(c, MSG_HELLO_ACK);
			if (m.len != i)
				pair_fail("burst %u: the answer says %llu", i, (unsigned long long)m.len);
			flushed += pair_send_done(&c->s, sizeof(m), 1);
			disconnect(c, 0);
		} else {
			pair_ck(dat_ep_connect(c->s.ep, (DAT_IA_ADDRESS_PTR)dst, c->port, PAIR_TMO, 0, NULL,
					  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
			   "burst connect");
			pair_wait(c->s.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, what);
			m = recv_msg(c, MSG_HELLO);
			if (m.len != i)
				pair_fail("burst %u: the server's message says %llu", i,
				     (unsigned long long)m.len);
			m = (struct msg){ .type = MSG_HELLO_ACK, .len = i };
			send_msg(c, &m);
			disconnect(c, 1);
		}
	}
	if (n)
		pair_checks++;
	if (flushed)
		fprintf(stderr, "dat_pair: %s: %u of %u burst messages answered, then flushed by "
			"the client's disconnect\n", pair_role, flushed, n);
}

static void teardown(struct ctx *c)
{
	/* an EVD still used by an EP cannot go */
	if (DAT_GET_TYPE(dat_evd_free(c->s.rcv_evd)) != DAT_INVALID_STATE)
		pair_fail("evd_free of an EVD in use did not say DAT_INVALID_STATE");
	pair_checks++;
	if (c->psp)
		pair_ck(dat_psp_free(c->psp), "dat_psp_free");
	pair_close(&c->s);
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
	pair_ck(dat_psp_create(c->s.ia, port, c->s.cr_evd, DAT_PSP_CONSUMER_FLAG, &c->psp),
	   "dat_psp_create");
	fprintf(stderr, "dat_pair: server: listening on conn_qual %u\n", port);
	c->port = port;
	api_checks(c, 1);
	/* refuse the first request with a reason, take the next */
	ev = pair_wait(c->s.cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	pair_ck(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, sizeof(NOT_YET),
			 (DAT_PVOID)NOT_YET), "dat_cr_reject");
	pair_checks++;
	ev = pair_wait(c->s.cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	if (ev.event_data.cr_arrival_event_data.conn_qual != port ||
	    ev.event_data.cr_arrival_event_data.sp_handle.psp_handle != c->psp)
		pair_fail("CR event: conn_qual %llu or PSP wrong",
		     (unsigned long long)ev.event_data.cr_arrival_event_data.conn_qual);
	pair_ck(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), "dat_cr_query");
	if (crp.private_data_size != (DAT_COUNT)sizeof("dat_pair client hello") ||
	    memcmp(crp.private_data, "dat_pair client hello", (size_t)crp.private_data_size))
		pair_fail("connect private data: %d bytes", crp.private_data_size);
	pair_checks++;
	pair_ck(dat_cr_accept(cr, c->s.ep, sizeof(hello), (DAT_PVOID)hello), "dat_cr_accept");
	pair_wait(c->s.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	pair_checks++;
	swap_info(c);

	m = recv_msg(c, MSG_WRITE_DONE);
	if (pair_fnv(c->s.data, c->s.size) != m.sum)
		pair_fail("RDMA write: the %zu bytes written do not match the client's checksum",
		     c->s.size);
	pair_checks++;

	pair_fill(c->s.data, c->s.size, 0xfeedbeefcafe1234ull);
	m = (struct msg){ .type = MSG_READ_READY, .sum = pair_fnv(c->s.data, c->s.size) };
	send_msg(c, &m);
	recv_msg(c, MSG_READ_DONE);
	disconnect(c, 0);
	burst(c, 1, NULL, nburst);
	teardown(c);
	printf("dat_pair: server OK: %zu bytes RDMA-written by the client verified, %zu bytes "
	       "served to its RDMA read, %u short connections, %d checks\n", c->s.size, c->s.size,
	       nburst, pair_checks);
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
		pair_fail("cannot resolve %s", host);
	pair_ck(dat_ep_create(c->s.ia, c->s.pz, c->s.rcv_evd, c->s.req_evd, c->s.conn_evd, NULL, &ep),
	   "dat_ep_create (default attributes)");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pair_ck(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)ai->ai_addr, port, 1000000, 0, NULL,
			  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG), "connect nowhere");
	freeaddrinfo(ai);
	pair_ck(dat_evd_wait(c->s.conn_evd, PAIR_TMO, 1, &ev, &nmore), "wait connect nowhere");
	if ((ev.event_number != DAT_CONNECTION_EVENT_TIMED_OUT &&
	     ev.event_number != DAT_CONNECTION_EVENT_UNREACHABLE) ||
	    ev.event_data.connect_event_data.ep_handle != ep)
		pair_fail("connect to %s: event 0x%x", host, ev.event_number);
	fprintf(stderr, "dat_pair: client: connect to %s: %s after %.1f s\n", host,
		ev.event_number == DAT_CONNECTION_EVENT_TIMED_OUT ? "TIMED_OUT" : "UNREACHABLE",
		secs(&t0));
	pair_ck(dat_ep_free(ep), "dat_ep_free (nowhere)");
	pair_checks++;
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
		pair_fail("cannot resolve %s", host);
	memset(&dst, 0, sizeof(dst));
	memcpy(&dst, ai->ai_addr, ai->ai_addrlen);
	c->port = port;
	setup(c, ia_name, 0);
	api_checks(c, 0);
	if (nowhere)
		connect_nowhere(c, nowhere, port);
	pair_fill(c->s.data, c->s.size, 0x0123456789abcdefull);

	/* the server may not listen yet: retry a refused connect */
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pair_ck(dat_ep_connect(c->s.ep, (DAT_IA_ADDRESS_PTR)ai->ai_addr, port, PAIR_TMO,
				  sizeof(hello), (DAT_PVOID)hello, DAT_QOS_BEST_EFFORT,
				  DAT_CONNECT_DEFAULT_FLAG), "dat_ep_connect");
		pair_ck(dat_evd_wait(c->s.conn_evd, PAIR_TMO + 5000000, 1, &ev, &(DAT_COUNT){ 0 }),
		   "wait connect");
		if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED)
			break;
		if (ev.event_number == DAT_CONNECTION_EVENT_PEER_REJECTED) {
			/* the server refuses the first request, with a reason */
			if (rejected++ ||
			    ev.event_data.connect_event_data.private_data_size != sizeof(NOT_YET) ||
			    memcmp(ev.event_data.connect_event_data.private_data, NOT_YET,
				   sizeof(NOT_YET)))
				pair_fail("unexpected reject (%d bytes of private data)",
				     ev.event_data.connect_event_data.private_data_size);
			pair_checks++;
		} else if (ev.event_number != DAT_CONNECTION_EVENT_NON_PEER_REJECTED &&
		    ev.event_number != DAT_CONNECTION_EVENT_UNREACHABLE)
			pair_fail("connect: event 0x%x", ev.event_number);
		else
			fprintf(stderr, "dat_pair: client: connect try %d: %s after %.1f s\n",
				tries + 1,
				ev.event_number == DAT_CONNECTION_EVENT_UNREACHABLE
					? "UNREACHABLE" : "NON_PEER_REJECTED", secs(&t0));
		if (++tries > 50)
			pair_fail("connect: refused %d times", tries);
		reset_ep(c);
		nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
	}
	freeaddrinfo(ai);
	if (!rejected)
		pair_fail("connected without the server's reject first");
	if (ev.event_data.connect_event_data.private_data_size !=
		    (DAT_COUNT)sizeof("dat_pair server hello") ||
	    memcmp(ev.event_data.connect_event_data.private_data, "dat_pair server hello",
		   sizeof("dat_pair server hello")))
		pair_fail("accept private data: %d bytes",
		     ev.event_data.connect_event_data.private_data_size);
	pair_checks++;
	swap_info(c);

	/* RDMA write in 1 MiB pieces; only the last one completes */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t off = 0; off < c->s.size; off += CHUNK) {
		size_t n = c->s.size - off < CHUNK ? c->s.size - off : CHUNK;
		int last = off + n >= c->s.size;

		iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(c->s.data + off),
					 (DAT_SEG_LENGTH)n, c->s.data_lctx };
		rmr = (DAT_RMR_TRIPLET){ c->peer.addr + off, (DAT_SEG_LENGTH)n, c->peer.rkey };
		cookie.as_64 = off;
		rc = dat_ep_post_rdma_write(c->s.ep, 1, &iov, cookie, &rmr,
					    last ? DAT_COMPLETION_DEFAULT_FLAG
						 : DAT_COMPLETION_SUPPRESS_FLAG);
		pair_ck(rc, "dat_ep_post_rdma_write");
		if (last) {
			ev = pair_wait(c->s.req_evd, DAT_DTO_COMPLETION_EVENT, "write completion");
			if (ev.event_data.dto_completion_event_data.user_cookie.as_64 != off ||
			    ev.event_data.dto_completion_event_data.transfered_length != n ||
			    ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_WRITE)
				pair_fail("write completion: cookie/length/operation wrong");
		}
	}
	wsec = secs(&t0);
	pair_checks++;
	m = (struct msg){ .type = MSG_WRITE_DONE, .sum = pair_fnv(c->s.data, c->s.size) };
	send_msg(c, &m);

	m = recv_msg(c, MSG_READ_READY);
	memset(c->s.data, 0, c->s.size);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t off = 0; off < c->s.size; off += CHUNK) {
		size_t n = c->s.size - off < CHUNK ? c->s.size - off : CHUNK;

		iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)(c->s.data + off),
					 (DAT_SEG_LENGTH)n, c->s.data_lctx };
		rmr = (DAT_RMR_TRIPLET){ c->peer.addr + off, (DAT_SEG_LENGTH)n, c->peer.rkey };
		cookie.as_64 = off;
		pair_ck(dat_ep_post_rdma_read(c->s.ep, 1, &iov, cookie, &rmr,
					 DAT_COMPLETION_DEFAULT_FLAG), "dat_ep_post_rdma_read");
		ev = pair_wait(c->s.req_evd, DAT_DTO_COMPLETION_EVENT, "read completion");
		if (ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_READ ||
		    ev.event_data.dto_completion_event_data.transfered_length != n)
			pair_fail("read completion: operation/length wrong");
	}
	rsec = secs(&t0);
	if (pair_fnv(c->s.data, c->s.size) != m.sum)
		pair_fail("RDMA read: the %zu bytes read do not match the server's checksum", c->s.size);
	pair_checks++;
	m = (struct msg){ .type = MSG_READ_DONE };
	send_msg(c, &m);
	disconnect(c, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	burst(c, 0, (const struct sockaddr *)&dst, nburst);
	fprintf(stderr, "dat_pair: client: %u short connections in %.2f s\n", nburst, secs(&t0));
	teardown(c);
	printf("dat_pair: client OK: RDMA write %zu bytes (%.1f MB/s) and RDMA read %zu bytes "
	       "(%.1f MB/s) checksummed, %u short connections, %d checks\n", c->s.size,
	       c->s.size / wsec / 1e6, c->s.size, c->s.size / rsec / 1e6, nburst, pair_checks);
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
	c.s.size = size;
	pair_prog = "dat_pair";
	pair_role = mode == 'S' ? "server" : "client";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mode == 'S')
		server(&c, ia_name, port, nburst);
	else
		client(&c, ia_name, host, port, nowhere, nburst);
	return 0;
}
