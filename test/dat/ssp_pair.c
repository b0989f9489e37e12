/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ssp_pair: an example of the DAT iWARP extension's Socket Service Points
 * (SSP), a pair of plain DAPL programs (<dat2/udat.h>, the extension's
 * header dat_iw_extensions.h, -ldat2 only).
 *
 *   ssp_pair --server [-P ia_name] [-p tcp_port] [-n messages] [-s bytes]
 *   ssp_pair --client -h server_addr [-P ia_name] [-p tcp_port] [-n ...] [-s ...]
 *
 * What an application does with an SSP: it starts as an ordinary TCP
 * program, talks its own protocol on the socket for a while ("streaming
 * mode"), and then both sides agree to continue over RDMA on the same
 * connection.  The extension makes that switch:
 *
 *   1. The client connects a TCP socket to the server, which accepts it:
 *      plain sockets, the address being the one of the server's IA (the
 *      RDMA connection goes between the addresses of the TCP connection).
 *   2. They exchange a few lines of their protocol over the socket.
 *   3. The server decides to go to RDMA: dat_iw_ssp_create() on the
 *      socket, with an EP (unconnected) and a CR EVD, and a last message
 *      of its streaming protocol ("final streaming-mode message"), which
 *      the call sends on the socket before it returns.
 *   4. The client reads that final message with its own socket calls (it
 *      knows its length from the protocol: here a fixed-size record),
 *      then calls dat_iw_socket_connect() on its EP and the socket, with
 *      private data.
 *   5. The server gets one DAT_CONNECTION_REQUEST_EVENT on the SSP's EVD,
 *      looks at the private data (dat_cr_query) and calls dat_cr_accept()
 *      (or dat_cr_reject(): then the socket is the server's again and the
 *      client gets PEER_REJECTED and its socket back).
 *   6. Both get DAT_CONNECTION_EVENT_ESTABLISHED on their EP's connect
 *      EVD.  From then on the provider owns the TCP socket: it has closed
 *      it on both sides; the program must not use or close it.
 *   7. The EPs are connected as after dat_ep_connect/dat_cr_accept: here
 *      the client sends several checksummed messages (at most as many
 *      as the server has receives posted: see M_ACK), the server announces
 *      a buffer (address, rmr_context, length) in a send, the client
 *      RDMA-writes into it and sends the checksum, the server checks it
 *      and says so; then the client disconnects.
 *
 * Each side prints one line at the end: "ssp_pair: server OK ..." or
 * "ssp_pair: client FAIL ...".  Exit status 0 only on OK.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dat2/udat.h>
/* after udat.h; a program built against an installed libsdp writes
 * #include <dat2/dat_iw_extensions.h> (make install puts it there) */
#include "dat_iw_extensions.h"
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TMO (30u * 1000 * 1000)	/* every dat_evd_wait: 30 s, in microseconds */
#define NRECV 4			/* receives kept posted */
#define MSG_BYTES 4096		/* payload of one data message */

/* ---- the application's streaming-mode protocol (step 2 and 3) ------- */

/* The server's greeting and the client's answer: text lines. */
#define SERVER_HELLO "SSPDEMO 1 server ready\n"
#define CLIENT_HELLO "SSPDEMO 1 client ready, RDMA please\n"

/* The final streaming-mode message: a fixed-size record, so that the
 * client knows how many bytes to read before it hands the socket over. */
struct final_msg {
	char magic[8];		/* "SSPGO\0\0\0" */
	uint32_t version;	/* 1 */
	uint32_t nmsgs;		/* how many data messages the server expects */
	uint64_t bytes;		/* size of the buffer the client will RDMA-write */
};

/* ---- the RDMA-mode protocol (step 7): SEND messages ------------------ */

/*
 * Flow control: a SEND needs a receive posted on the other side.  On
 * iWARP one that finds none breaks the connection (there is no
 * receiver-not-ready retry as on InfiniBand), so the server keeps NRECV
 * receives posted and the client sends at most NRECV data messages
 * before the server's M_ACK says they are posted again.
 */
enum { M_DATA = 1, M_ACK, M_BUF, M_WRITTEN, M_DONE };

struct hdr {
	uint32_t type;
	uint32_t seq;		/* M_DATA: 0, 1, ...  */
	uint32_t rkey;		/* M_BUF: rmr_context of the server's buffer */
	uint32_t pad;
	uint64_t addr;		/* M_BUF: its address */
	uint64_t len;		/* M_BUF: its length; M_DATA: payload length */
	uint64_t sum;		/* M_DATA: payload checksum; M_WRITTEN: buffer's */
};

struct msgbuf {
	struct hdr h;
	unsigned char payload[MSG_BYTES];
};

static const char *role = "?";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("ssp_pair: %s FAIL ", role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

/* Every DAT call's result is checked; dat_strerror names it. */
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
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		b[i] = (unsigned char)seed;
	}
}

/* Socket I/O of the streaming mode, bounded by poll(). */
static void sock_read(int fd, void *buf, size_t n, const char *what)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 30000) != 1)
			fail("%s: nothing to read for 30 s", what);
		r = read(fd, (char *)buf + got, n - got);
		if (r == 0)
			fail("%s: the peer closed the socket", what);
		if (r < 0 && errno != EINTR)
			fail("%s: %s", what, strerror(errno));
		if (r > 0)
			got += (size_t)r;
	}
}

static void sock_write(int fd, const void *buf, size_t n, const char *what)
{
	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		fail("%s: %s", what, strerror(errno));
}

/* ---- the DAT objects of one side ------------------------------------- */

struct side {
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE conn_evd, cr_evd;
	DAT_EVD_HANDLE req_evd;	/* completions of sends and RDMA writes */
	DAT_EVD_HANDLE rcv_evd;	/* completions of receives */
	DAT_EP_HANDLE ep;
	DAT_IW_SSP_HANDLE ssp;
	struct msgbuf *msgs;	/* [0..NRECV-1] receive, [NRECV] send */
	DAT_LMR_HANDLE msg_lmr;
	DAT_LMR_CONTEXT msg_lctx;
	unsigned char *data;	/* the RDMA-written buffer */
	size_t size;
	DAT_LMR_HANDLE data_lmr;
	DAT_LMR_CONTEXT data_lctx;
	DAT_RMR_CONTEXT data_rctx;
	struct sockaddr_storage addr;	/* the IA's address */
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

static void post_recv(struct side *s, int i)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)&s->msgs[i], sizeof(struct msgbuf),
				s->msg_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = (DAT_UINT64)i };

	ck(dat_ep_post_recv(s->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), "post_recv");
}

/* Send the header (and len bytes of payload) from the send slot. */
static void send_msg(struct side *s, const struct hdr *h, const void *payload, size_t len)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)&s->msgs[NRECV],
				(DAT_SEG_LENGTH)(sizeof(struct hdr) + len), s->msg_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = NRECV };

	s->msgs[NRECV].h = *h;
	if (len)
		memcpy(s->msgs[NRECV].payload, payload, len);
	ck(dat_ep_post_send(s->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), "post_send");
	wait_ev(s->req_evd, DAT_DTO_COMPLETION_EVENT, "send completion");
}

/* The next received message (of the given type); its receive is posted
 * again once copied out. */
static struct msgbuf *recv_msg(struct side *s, uint32_t type, struct msgbuf *out)
{
	DAT_EVENT ev = wait_ev(s->rcv_evd, DAT_DTO_COMPLETION_EVENT, "receive");
	DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	int i = (int)d->user_cookie.as_64;

	if (d->operation != DAT_DTO_RECEIVE || i < 0 || i >= NRECV ||
	    d->transfered_length < sizeof(struct hdr))
		fail("receive: operation %d, cookie %d, %u bytes", d->operation, i,
		     (unsigned)d->transfered_length);
	memcpy(out, &s->msgs[i], d->transfered_length);
	post_recv(s, i);
	if (out->h.type != type)
		fail("message type %u, wanted %u", out->h.type, type);
	return out;
}

/* IA, PZ, EVDs, one EP with its receives posted, registered buffers. */
static void setup(struct side *s, const char *ia_name, int server)
{
	DAT_REGION_DESCRIPTION region;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pattr;
	DAT_EP_ATTR attr;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	int ssp = 0;

	ck(dat_ia_open((DAT_NAME_PTR)ia_name, 8, &async, &s->ia), "dat_ia_open");
	/* an IA that has the extension says so in its provider attributes */
	ck(dat_ia_query(s->ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pattr),
	   "dat_ia_query");
	for (int i = 0; i < pattr.num_provider_specific_attr; i++)
		if (!strcmp(pattr.provider_specific_attr[i].name, DAT_IW_ATTR_SSP) &&
		    !strcmp(pattr.provider_specific_attr[i].value, "TRUE"))
			ssp = 1;
	if (ia_attr.extension_supported != DAT_EXTENSION_IW || !ssp)
		fail("IA %s has no Socket Service Points", ia_name);
	memcpy(&s->addr, ia_attr.ia_address_ptr,
	       ia_attr.ia_address_ptr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							     : sizeof(struct sockaddr_in));

	ck(dat_pz_create(s->ia, &s->pz), "dat_pz_create");
	ck(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd),
	   "evd_create (connection)");
	/* receives and requests complete on EVDs of their own: a receive
	 * may complete while we wait for a send's completion */
	ck(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req_evd),
	   "evd_create (requests)");
	ck(dat_evd_create(s->ia, NRECV, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv_evd),
	   "evd_create (receives)");
	/* the SSP's EVD: connection requests (and the socket-down event) */
	if (server)
		ck(dat_evd_create(s->ia, 4, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd),
		   "evd_create (CR)");

	memset(&attr, 0, sizeof(attr));
	attr.service_type = DAT_SERVICE_TYPE_RC;
	attr.max_message_size = sizeof(struct msgbuf);
	attr.max_rdma_size = 1u << 24;
	attr.qos = DAT_QOS_BEST_EFFORT;
	attr.max_recv_dtos = NRECV;
	attr.max_request_dtos = 8;
	attr.max_recv_iov = 1;
	attr.max_request_iov = 1;
	attr.max_rdma_read_in = 1;
	attr.max_rdma_read_out = 1;
	attr.max_rdma_read_iov = 1;
	attr.max_rdma_write_iov = 1;
	ck(dat_ep_create(s->ia, s->pz, s->rcv_evd, s->req_evd, s->conn_evd, &attr, &s->ep),
	   "dat_ep_create");

	s->msgs = aligned_alloc(64, sizeof(struct msgbuf) * (NRECV + 1));
	s->data = aligned_alloc(4096, s->size);
	if (!s->msgs || !s->data)
		fail("out of memory");
	memset(s->data, 0, s->size);
	region.for_va = s->msgs;
	ck(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(struct msgbuf) * (NRECV + 1),
			  s->pz, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
			  DAT_VA_TYPE_VA, &s->msg_lmr, &s->msg_lctx, &(DAT_RMR_CONTEXT){ 0 },
			  &rlen, &raddr), "lmr_create (messages)");
	/* the server's buffer is written by the peer: remote write */
	region.for_va = s->data;
	ck(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, s->size, s->pz,
			  server ? DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG
				 : DAT_MEM_PRIV_LOCAL_READ_FLAG,
			  DAT_VA_TYPE_VA, &s->data_lmr, &s->data_lctx, &s->data_rctx, &rlen, &raddr),
	   "lmr_create (data)");
	/* receives may be posted before the EP is connected */
	for (int i = 0; i < NRECV; i++)
		post_recv(s, i);
}

static void teardown(struct side *s)
{
	DAT_EVENT ev;

	/* the flushed receives */
	while (dat_evd_dequeue(s->rcv_evd, &ev) == DAT_SUCCESS)
		;
	if (s->ssp)
		ck(dat_iw_ssp_free(s->ssp), "dat_iw_ssp_free");
	ck(dat_ep_free(s->ep), "dat_ep_free");
	ck(dat_lmr_free(s->data_lmr), "lmr_free");
	ck(dat_lmr_free(s->msg_lmr), "lmr_free");
	ck(dat_evd_free(s->rcv_evd), "evd_free");
	ck(dat_evd_free(s->req_evd), "evd_free");
	ck(dat_evd_free(s->conn_evd), "evd_free");
	if (s->cr_evd)
		ck(dat_evd_free(s->cr_evd), "evd_free");
	ck(dat_pz_free(s->pz), "pz_free");
	ck(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close");
	free(s->msgs);
	free(s->data);
}

/* ---- the server ------------------------------------------------------ */

static void server(struct side *s, const char *ia_name, unsigned port, unsigned nmsgs)
{
	static const char accept_pd[] = "ssp_pair server: welcome";
	struct final_msg fin = { .magic = "SSPGO", .version = 1 };
	char line[sizeof(CLIENT_HELLO)];
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&s->addr;
	DAT_CR_PARAM crp;
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	struct msgbuf m;
	int lfd, sock, one = 1;

	setup(s, ia_name, 1);

	/* 1. a plain TCP listener on the IA's address */
	a6->sin6_port = htons((uint16_t)port);	/* same place in sockaddr_in */
	lfd = socket(s->addr.ss_family, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 ||
	    bind(lfd, (struct sockaddr *)&s->addr,
		 s->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					       : sizeof(struct sockaddr_in)) < 0 ||
	    listen(lfd, 1) < 0)
		fail("TCP listener on port %u: %s", port, strerror(errno));
	fprintf(stderr, "ssp_pair: server: listening on TCP port %u\n", port);
	if (poll(&(struct pollfd){ .fd = lfd, .events = POLLIN }, 1, 60000) != 1)
		fail("no client within 60 s");
	sock = accept(lfd, NULL, NULL);
	if (sock < 0)
		fail("accept: %s", strerror(errno));
	close(lfd);

	/* 2. streaming mode: greeting, answer */
	sock_write(sock, SERVER_HELLO, strlen(SERVER_HELLO), "server hello");
	sock_read(sock, line, strlen(CLIENT_HELLO), "client hello");
	if (memcmp(line, CLIENT_HELLO, strlen(CLIENT_HELLO)))
		fail("unexpected client hello");

	/* 3. to RDMA mode: the SSP sends the final message on the socket */
	fin.nmsgs = nmsgs;
	fin.bytes = s->size;
	ck(dat_iw_ssp_create(s->ia, sock, s->ep, s->cr_evd, &fin, sizeof(fin), &s->ssp),
	   "dat_iw_ssp_create");

	/* 5. the client's request: look at it, accept it */
	ev = wait_ev(s->cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	ck(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), "dat_cr_query");
	if (crp.private_data_size != (DAT_COUNT)sizeof("ssp_pair client") ||
	    memcmp(crp.private_data, "ssp_pair client", sizeof("ssp_pair client")))
		fail("request private data: %d bytes", crp.private_data_size);
	/* DAT_HANDLE_NULL would also do: it means the SSP's EP */
	ck(dat_cr_accept(cr, s->ep, sizeof(accept_pd), (DAT_PVOID)accept_pd), "dat_cr_accept");

	/* 6. connected; `sock` is the provider's now (closed): forget it */
	wait_ev(s->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	sock = -1;

	/* 7. the client's messages, each checksummed */
	for (unsigned i = 0; i < nmsgs; i++) {
		recv_msg(s, M_DATA, &m);
		if (m.h.seq != i || m.h.len > MSG_BYTES || fnv(m.payload, m.h.len) != m.h.sum)
			fail("data message %u: seq %u, %llu bytes, checksum %s", i, m.h.seq,
			     (unsigned long long)m.h.len,
			     fnv(m.payload, m.h.len) == m.h.sum ? "ok" : "WRONG");
		/* a window taken (and its receives posted again): more credit */
		if ((i + 1) % NRECV == 0 && i + 1 < nmsgs)
			send_msg(s, &(struct hdr){ .type = M_ACK, .seq = i }, NULL, 0);
	}
	/* announce the buffer the client will RDMA-write */
	send_msg(s, &(struct hdr){ .type = M_BUF, .rkey = s->data_rctx,
				   .addr = (uint64_t)(uintptr_t)s->data, .len = s->size },
		 NULL, 0);
	/* the client says when it has written, with the checksum */
	recv_msg(s, M_WRITTEN, &m);
	if (fnv(s->data, s->size) != m.h.sum)
		fail("RDMA write: the %zu bytes in the buffer do not match the checksum", s->size);
	/* the verdict; the client disconnects only after it (a receive must
	 * not be posted again on an EP the peer has disconnected) */
	send_msg(s, &(struct hdr){ .type = M_DONE }, NULL, 0);

	/* the client disconnects */
	wait_ev(s->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
	teardown(s);
	printf("ssp_pair: server OK: %u messages and %zu RDMA-written bytes checksummed\n",
	       nmsgs, s->size);
}

/* ---- the client ------------------------------------------------------ */

static void client(struct side *s, const char *ia_name, const char *host, unsigned port,
		   unsigned nmsgs)
{
	static const char request_pd[] = "ssp_pair client";
	struct addrinfo *ai, hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct final_msg fin;
	char line[sizeof(SERVER_HELLO)], svc[16];
	unsigned char payload[MSG_BYTES];
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET rmr;
	DAT_DTO_COOKIE cookie = { .as_64 = 0x77 };
	DAT_EVENT ev;
	struct msgbuf m;
	int sock = -1, tries;

	setup(s, ia_name, 0);

	/* 1. a plain TCP connection (the server may not listen yet: retry) */
	snprintf(svc, sizeof(svc), "%u", port);
	if (getaddrinfo(host, svc, &hints, &ai) != 0)
		fail("cannot resolve %s", host);
	for (tries = 0; tries < 300; tries++) {
		sock = socket(ai->ai_family, SOCK_STREAM, 0);
		if (sock >= 0 && connect(sock, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		close(sock);
		sock = -1;
		nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
	}
	freeaddrinfo(ai);
	if (sock < 0)
		fail("cannot connect to %s port %u", host, port);

	/* 2. streaming mode */
	sock_read(sock, line, strlen(SERVER_HELLO), "server hello");
	if (memcmp(line, SERVER_HELLO, strlen(SERVER_HELLO)))
		fail("unexpected server hello");
	sock_write(sock, CLIENT_HELLO, strlen(CLIENT_HELLO), "client hello");

	/* 4. the final streaming-mode message, read by our own means; the
	 * provider reads nothing on the socket before socket_connect */
	sock_read(sock, &fin, sizeof(fin), "final message");
	if (memcmp(fin.magic, "SSPGO", 6) || fin.version != 1 || fin.nmsgs != nmsgs ||
	    fin.bytes > s->size)
		fail("unexpected final message");
	ck(dat_iw_socket_connect(s->ep, sock, TMO, sizeof(request_pd), (DAT_PVOID)request_pd),
	   "dat_iw_socket_connect");
	ev = wait_ev(s->conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	/* 6. the server's accept private data; `sock` is the provider's now */
	sock = -1;
	if (ev.event_data.connect_event_data.private_data_size !=
		    (DAT_COUNT)sizeof("ssp_pair server: welcome") ||
	    memcmp(ev.event_data.connect_event_data.private_data, "ssp_pair server: welcome",
		   sizeof("ssp_pair server: welcome")))
		fail("accept private data: %d bytes",
		     ev.event_data.connect_event_data.private_data_size);

	/* 7. checksummed messages of varying length, NRECV at a time */
	for (unsigned i = 0; i < nmsgs; i++) {
		size_t len = MSG_BYTES - (i * 397) % MSG_BYTES;

		if (i && i % NRECV == 0)
			recv_msg(s, M_ACK, &m);

		fill(payload, len, 0x9e3779b97f4a7c15ull + i);
		send_msg(s, &(struct hdr){ .type = M_DATA, .seq = i, .len = len,
					   .sum = fnv(payload, len) }, payload, len);
	}
	/* the server's buffer, then one RDMA write into it */
	recv_msg(s, M_BUF, &m);
	if (m.h.len < s->size)
		fail("the server's buffer has %llu bytes, we have %zu",
		     (unsigned long long)m.h.len, s->size);
	fill(s->data, s->size, 0x0123456789abcdefull);
	iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)s->data, (DAT_SEG_LENGTH)s->size,
				 s->data_lctx };
	rmr = (DAT_RMR_TRIPLET){ m.h.addr, (DAT_SEG_LENGTH)s->size, m.h.rkey };
	ck(dat_ep_post_rdma_write(s->ep, 1, &iov, cookie, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
	   "dat_ep_post_rdma_write");
	ev = wait_ev(s->req_evd, DAT_DTO_COMPLETION_EVENT, "RDMA write completion");
	if (ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_WRITE)
		fail("RDMA write completion: operation %d",
		     ev.event_data.dto_completion_event_data.operation);
	/* sends after a write arrive after it: the checksum tells it is there */
	send_msg(s, &(struct hdr){ .type = M_WRITTEN, .sum = fnv(s->data, s->size) }, NULL, 0);
	/* the server has checked it: done */
	recv_msg(s, M_DONE, &m);

	ck(dat_ep_disconnect(s->ep, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
	wait_ev(s->conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
	teardown(s);
	printf("ssp_pair: client OK: %u messages sent, %zu bytes RDMA-written\n", nmsgs, s->size);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", no_argument, NULL, 'S' },
		{ "client", no_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ia_name = "ofa-v2-sdp-iwarp", *host = NULL;
	unsigned port = 18600, nmsgs = 16;
	struct side s;
	int mode = 0, o;

	memset(&s, 0, sizeof(s));
	s.size = 1u << 20;
	while ((o = getopt_long(argc, argv, "P:h:p:n:s:", opts, NULL)) != -1) {
		switch (o) {
		case 'S': mode = 'S'; break;
		case 'C': mode = 'C'; break;
		case 'P': ia_name = optarg; break;
		case 'h': host = optarg; break;
		case 'p': port = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': nmsgs = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': s.size = (size_t)strtoull(optarg, NULL, 0); break;
		default: mode = 0; break;
		}
	}
	if (!mode || (mode == 'C' && !host) || !s.size || port > 65535) {
		fprintf(stderr, "usage: ssp_pair --server|--client -h ADDR [-P ia_name] "
				"[-p tcp_port] [-n messages] [-s bytes]\n");
		return 2;
	}
	role = mode == 'S' ? "server" : "client";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mode == 'S')
		server(&s, ia_name, port, nmsgs);
	else
		client(&s, ia_name, host, port, nmsgs);
	return 0;
}
