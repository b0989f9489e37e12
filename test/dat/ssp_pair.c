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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

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

/* Socket I/O of the streaming mode, bounded by poll(). */
static void sock_read(int fd, void *buf, size_t n, const char *what)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 30000) != 1)
			pair_fail("%s: nothing to read for 30 s", what);
		r = read(fd, (char *)buf + got, n - got);
		if (r == 0)
			pair_fail("%s: the peer closed the socket", what);
		if (r < 0 && errno != EINTR)
			pair_fail("%s: %s", what, strerror(errno));
		if (r > 0)
			got += (size_t)r;
	}
}

static void sock_write(int fd, const void *buf, size_t n, const char *what)
{
	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		pair_fail("%s: %s", what, strerror(errno));
}

/* ---- the DAT objects of one side ------------------------------------- */

struct side {
	struct pair_side s;
	DAT_IW_SSP_HANDLE ssp;
	struct sockaddr_storage addr;	/* the IA's address */
};

/* Send the header (and len bytes of payload). */
static void send_msg(struct side *s, const struct hdr *h, const void *payload, size_t len)
{
	struct msgbuf m;

	m.h = *h;
	if (len)
		memcpy(m.payload, payload, len);
	pair_send(&s->s, &m, sizeof(struct hdr) + len);
}

/* The next received message (of the given type); its receive is posted
 * again once copied out. */
static struct msgbuf *recv_msg(struct side *s, uint32_t type, struct msgbuf *out)
{
	pair_recv(&s->s, out, sizeof(struct hdr), 1);
	if (out->h.type != type)
		pair_fail("message type %u, wanted %u", out->h.type, type);
	return out;
}

/* IA, PZ, EVDs, one EP with its receives posted, registered buffers. */
static void setup(struct side *s, const char *ia_name, int server)
{
	const struct pair_setup cfg = {
		.ia_name = ia_name,
		/* the SSP's EVD: connection requests (and the socket-down event) */
		.cr_evd = server,
		.cr_qlen = 4,
		.conn_qlen = 8,
		.req_qlen = 8,
		.rcv_qlen = NRECV,
		.ep_attr = {
			.service_type = DAT_SERVICE_TYPE_RC,
			.max_message_size = sizeof(struct msgbuf),
			.max_rdma_size = 1u << 24,
			.qos = DAT_QOS_BEST_EFFORT,
			.max_recv_dtos = NRECV,
			.max_request_dtos = 8,
			.max_recv_iov = 1,
			.max_request_iov = 1,
			.max_rdma_read_in = 1,
			.max_rdma_read_out = 1,
			.max_rdma_read_iov = 1,
			.max_rdma_write_iov = 1,
		},
		.nrecv = NRECV,
		.slot = sizeof(struct msgbuf),
		/* the server's buffer is written by the peer: remote write */
		.data_priv = server ? DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG
				    : DAT_MEM_PRIV_LOCAL_READ_FLAG,
		.size = s->s.size,
	};
	const struct sockaddr *ia_addr;

	pair_open(&s->s, &cfg);
	ia_addr = s->s.ia_attr.ia_address_ptr;
	memcpy(&s->addr, ia_addr, ia_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								: sizeof(struct sockaddr_in));
}

static void teardown(struct side *s)
{
	/* the flushed receives */
	pair_drop_flushed(&s->s);
	if (s->ssp)
		pair_ck(dat_iw_ssp_free(s->ssp), "dat_iw_ssp_free");
	pair_close(&s->s);
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
		pair_fail("TCP listener on port %u: %s", port, strerror(errno));
	fprintf(stderr, "ssp_pair: server: listening on TCP port %u\n", port);
	if (poll(&(struct pollfd){ .fd = lfd, .events = POLLIN }, 1, 60000) != 1)
		pair_fail("no client within 60 s");
	sock = accept(lfd, NULL, NULL);
	if (sock < 0)
		pair_fail("accept: %s", strerror(errno));
	close(lfd);

	/* 2. streaming mode: greeting, answer */
	sock_write(sock, SERVER_HELLO, strlen(SERVER_HELLO), "server hello");
	sock_read(sock, line, strlen(CLIENT_HELLO), "client hello");
	if (memcmp(line, CLIENT_HELLO, strlen(CLIENT_HELLO)))
		pair_fail("unexpected client hello");

	/* 3. to RDMA mode: the SSP sends the final message on the socket */
	fin.nmsgs = nmsgs;
	fin.bytes = s->s.size;
	pair_ck(dat_iw_ssp_create(s->s.ia, sock, s->s.ep, s->s.cr_evd, &fin, sizeof(fin), &s->ssp),
	   "dat_iw_ssp_create");

	/* 5. the client's request: look at it, accept it */
	ev = pair_wait(s->s.cr_evd, DAT_CONNECTION_REQUEST_EVENT, "connection request");
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	pair_ck(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), "dat_cr_query");
	if (crp.private_data_size != (DAT_COUNT)sizeof("ssp_pair client") ||
	    memcmp(crp.private_data, "ssp_pair client", sizeof("ssp_pair client")))
		pair_fail("request private data: %d bytes", crp.private_data_size);
	/* DAT_HANDLE_NULL would also do: it means the SSP's EP */
	pair_ck(dat_cr_accept(cr, s->s.ep, sizeof(accept_pd), (DAT_PVOID)accept_pd), "dat_cr_accept");

	/* 6. connected; `sock` is the provider's now (closed): forget it */
	pair_wait(s->s.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	sock = -1;

	/* 7. the client's messages, each checksummed */
	for (unsigned i = 0; i < nmsgs; i++) {
		recv_msg(s, M_DATA, &m);
		if (m.h.seq != i || m.h.len > MSG_BYTES || pair_fnv(m.payload, m.h.len) != m.h.sum)
			pair_fail("data message %u: seq %u, %llu bytes, checksum %s", i, m.h.seq,
			     (unsigned long long)m.h.len,
			     pair_fnv(m.payload, m.h.len) == m.h.sum ? "ok" : "WRONG");
		/* a window taken (and its receives posted again): more credit */
		if ((i + 1) % NRECV == 0 && i + 1 < nmsgs)
			send_msg(s, &(struct hdr){ .type = M_ACK, .seq = i }, NULL, 0);
	}
	/* announce the buffer the client will RDMA-write */
	send_msg(s, &(struct hdr){ .type = M_BUF, .rkey = s->s.data_rctx,
				   .addr = (uint64_t)(uintptr_t)s->s.data, .len = s->s.size },
		 NULL, 0);
	/* the client says when it has written, with the checksum */
	recv_msg(s, M_WRITTEN, &m);
	if (pair_fnv(s->s.data, s->s.size) != m.h.sum)
		pair_fail("RDMA write: the %zu bytes in the buffer do not match the checksum", s->s.size);
	/* the verdict; the client disconnects only after it (a receive must
	 * not be posted again on an EP the peer has disconnected).  Its
	 * completion is taken after the disconnect, which proves it arrived:
	 * the client's disconnect request can overtake the transport's
	 * acknowledgement, and the send then completes flushed (as in
	 * dat_pair's burst; RC orders neither against the other). */
	{
		struct hdr done = { .type = M_DONE };

		pair_post_send(&s->s, &done, sizeof(done));
		pair_wait(s->s.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
		pair_send_done(&s->s, sizeof(done), 1);
	}
	teardown(s);
	printf("ssp_pair: server OK: %u messages and %zu RDMA-written bytes checksummed\n",
	       nmsgs, s->s.size);
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
		pair_fail("cannot resolve %s", host);
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
		pair_fail("cannot connect to %s port %u", host, port);

	/* 2. streaming mode */
	sock_read(sock, line, strlen(SERVER_HELLO), "server hello");
	if (memcmp(line, SERVER_HELLO, strlen(SERVER_HELLO)))
		pair_fail("unexpected server hello");
	sock_write(sock, CLIENT_HELLO, strlen(CLIENT_HELLO), "client hello");

	/* 4. the final streaming-mode message, read by our own means; the
	 * provider reads nothing on the socket before socket_connect */
	sock_read(sock, &fin, sizeof(fin), "final message");
	if (memcmp(fin.magic, "SSPGO", 6) || fin.version != 1 || fin.nmsgs != nmsgs ||
	    fin.bytes > s->s.size)
		pair_fail("unexpected final message");
	pair_ck(dat_iw_socket_connect(s->s.ep, sock, PAIR_TMO, sizeof(request_pd), (DAT_PVOID)request_pd),
	   "dat_iw_socket_connect");
	ev = pair_wait(s->s.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, "established");
	/* 6. the server's accept private data; `sock` is the provider's now */
	sock = -1;
	if (ev.event_data.connect_event_data.private_data_size !=
		    (DAT_COUNT)sizeof("ssp_pair server: welcome") ||
	    memcmp(ev.event_data.connect_event_data.private_data, "ssp_pair server: welcome",
		   sizeof("ssp_pair server: welcome")))
		pair_fail("accept private data: %d bytes",
		     ev.event_data.connect_event_data.private_data_size);

	/* 7. checksummed messages of varying length, NRECV at a time */
	for (unsigned i = 0; i < nmsgs; i++) {
		size_t len = MSG_BYTES - (i * 397) % MSG_BYTES;

		if (i && i % NRECV == 0)
			recv_msg(s, M_ACK, &m);

		pair_fill(payload, len, 0x9e3779b97f4a7c15ull + i);
		send_msg(s, &(struct hdr){ .type = M_DATA, .seq = i, .len = len,
					   .sum = pair_fnv(payload, len) }, payload, len);
	}
	/* the server's buffer, then one RDMA write into it */
	recv_msg(s, M_BUF, &m);
	if (m.h.len < s->s.size)
		pair_fail("the server's buffer has %llu bytes, we have %zu",
		     (unsigned long long)m.h.len, s->s.size);
	pair_fill(s->s.data, s->s.size, 0x0123456789abcdefull);
	iov = (DAT_LMR_TRIPLET){ (DAT_VADDR)(uintptr_t)s->s.data, (DAT_SEG_LENGTH)s->s.size,
				 s->s.data_lctx };
	rmr = (DAT_RMR_TRIPLET){ m.h.addr, (DAT_SEG_LENGTH)s->s.size, m.h.rkey };
	pair_ck(dat_ep_post_rdma_write(s->s.ep, 1, &iov, cookie, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
	   "dat_ep_post_rdma_write");
	ev = pair_wait(s->s.req_evd, DAT_DTO_COMPLETION_EVENT, "RDMA write completion");
	if (ev.event_data.dto_completion_event_data.operation != DAT_DTO_RDMA_WRITE)
		pair_fail("RDMA write completion: operation %d",
		     ev.event_data.dto_completion_event_data.operation);
	/* sends after a write arrive after it: the checksum tells it is there */
	send_msg(s, &(struct hdr){ .type = M_WRITTEN, .sum = pair_fnv(s->s.data, s->s.size) }, NULL, 0);
	/* the server has checked it: done */
	recv_msg(s, M_DONE, &m);

	pair_ck(dat_ep_disconnect(s->s.ep, DAT_CLOSE_GRACEFUL_FLAG), "dat_ep_disconnect");
	pair_wait(s->s.conn_evd, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnect");
	teardown(s);
	printf("ssp_pair: client OK: %u messages sent, %zu bytes RDMA-written\n", nmsgs, s->s.size);
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
	s.s.size = 1u << 20;
	while ((o = getopt_long(argc, argv, "P:h:p:n:s:", opts, NULL)) != -1) {
		switch (o) {
		case 'S': mode = 'S'; break;
		case 'C': mode = 'C'; break;
		case 'P': ia_name = optarg; break;
		case 'h': host = optarg; break;
		case 'p': port = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': nmsgs = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': s.s.size = (size_t)strtoull(optarg, NULL, 0); break;
		default: mode = 0; break;
		}
	}
	if (!mode || (mode == 'C' && !host) || !s.s.size || port > 65535) {
		fprintf(stderr, "usage: ssp_pair --server|--client -h ADDR [-P ia_name] "
				"[-p tcp_port] [-n messages] [-s bytes]\n");
		return 2;
	}
	pair_prog = "ssp_pair";
	pair_role = mode == 'S' ? "server" : "client";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mode == 'S')
		server(&s, ia_name, port, nmsgs);
	else
		client(&s, ia_name, host, port, nmsgs);
	return 0;
}
