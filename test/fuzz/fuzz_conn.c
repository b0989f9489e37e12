/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A whole SDP connection's receive path fed by a hostile peer.  The engine
 * runs as in any program (include/sdp.h, its progress thread), over a mock
 * transport (the OTI backend "mock" below, installed with
 * oti_test_backend()) that plays the peer: its HelloAck (or, when the
 * engine is the passive side, its Hello) and every message the engine
 * receives come from the input, and what the engine sends is checked and
 * acknowledged.
 *
 * The input is a flags byte, the peer's private data if the flags say so,
 * then a script of records {op, n (u16 LE)}, messages followed by their n
 * bytes:
 *
 *   byte 0 bit 1   clear: the engine connects (active side); set: it
 *                  listens and accepts the peer's request (passive side)
 *   byte 0 bit 0   set: n (u16 LE) and n bytes follow, the peer's HelloAck
 *                  (active) or Hello (passive) private data; clear: a
 *                  valid one (buffers of MOCK_PEER_RCVSZ)
 *   op % 10 == 0   a message of n bytes, with the BSDH's mseq, mseq_ack
 *                  and len set to what an honest peer would send, so that
 *                  the fuzzer explores what lies behind the header checks
 *             1    a message of n bytes exactly as given
 *             2    the application: non-blocking recv of up to n * 16
 *             3    the application: non-blocking send of n * 64 bytes
 *                  (large ones go zero copy, SrcAvail)
 *             4    the transport: DISCONNECTED (n even) or ERROR
 *             5    the application: shutdown(SHUT_WR)
 *             6    the RDMA reads and writes the engine posts from now on
 *                  complete with success for an even n, else with -EIO
 *             7    the application: non-blocking recv of n with MSG_PEEK
 *             8    the application: blocking send of n * 64 bytes, with
 *                  an SO_SNDTIMEO of 20 ms (every blocking path must keep
 *                  its deadline whatever the peer withholds)
 *             9    the application: blocking recv of up to n * 16, with
 *                  an SO_RCVTIMEO of 20 ms
 *
 * RDMA completes at once, as on an RC transport, where the peer's NIC, not
 * its program, serves it (on tcp-fallback a stopped peer process could
 * hold a read: the engine waits for reads it posted, zcopy.c).
 * A message goes into the receive buffer the engine posted first; one
 * longer than that buffer completes with an error and the transport goes
 * down, as the OTI contract says.  Then the application closes the
 * socket, the transport reports DISCONNECTED, and the engine must close
 * the endpoint within a time limit.
 *
 * Properties, besides the sanitizers': every call returns; the engine's
 * Hello or HelloAck is valid, and so is every message it sends
 * (sdp_bsdh_decode()), no longer than the buffers the peer advertised;
 * a Hello the engine refuses gets a reject; the engine lets go of the
 * endpoint.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "fuzz.h"
#include "oti.h"
#include "sdp.h"
#include "wire.h"

#define MOCK_PEER_RCVSZ 4096u	/* the default HelloAck's buffer size */
#define MOCK_MAX_RECV 64
#define MOCK_MAX_CQ 256
#define MOCK_MAX_EV 16

struct mock_recv {
	void *addr;
	uint32_t len;
	uint64_t ctx;
};

struct oti_ep {
	int efd;
	bool failed;		/* in error: no more work completes */
	struct mock_recv recv[MOCK_MAX_RECV];
	unsigned nrecv;
	struct oti_wc cq[MOCK_MAX_CQ];
	unsigned ncq;
	struct oti_event ev[MOCK_MAX_EV];
	unsigned nev;
	int rdma_status;	/* what the next RDMA operations complete with */
	uint32_t sent;		/* messages the engine sent: its last mseq */
	uint32_t peer_mseq;	/* messages the peer sent */
	uint32_t peer_rcvsz;	/* the peer's buffer size once it said it, else 0 */
};

/* Protects the one ep, the one listener and every field of them, and
 * next_pdata: the engine calls in from its progress thread and from the
 * application's, the script from its own. */
static pthread_mutex_t mock_lock = PTHREAD_MUTEX_INITIALIZER;
static struct oti_ep *mock_ep;
static uint32_t mock_next_rkey = 1;
/* The HelloAck (active side) or Hello (passive) of the next connection:
 * the input's or a valid one. */
static uint8_t next_pdata[OTI_MAX_PRIVATE_DATA];
static size_t next_pdata_len;

/* The one listener; a request is pending until the engine takes it. */
struct oti_listener {
	int efd;
	uint16_t port;
	bool pending;		/* a connection request waits */
	bool rejected;		/* the engine refused it */
};
static struct oti_listener *mock_lsn;

static void mock_kick(struct oti_ep *ep)
{
	uint64_t one = 1;

	if (write(ep->efd, &one, sizeof(one)) < 0)
		abort();
}

static void mock_event(struct oti_ep *ep, enum oti_event_type type, int status,
		       const void *pdata, size_t len)
{
	if (ep->nev == MOCK_MAX_EV)
		return;
	struct oti_event *ev = &ep->ev[ep->nev++];

	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->status = status;
	ev->private_data_len = len;
	if (len)
		memcpy(ev->private_data, pdata, len);
	mock_kick(ep);
}

static void mock_complete(struct oti_ep *ep, uint64_t ctx, enum oti_wc_op op, int status,
			  uint32_t len)
{
	/* A full queue is an overrun, which a real CQ reports as an error. */
	if (ep->ncq == MOCK_MAX_CQ) {
		ep->failed = true;
		return;
	}
	ep->cq[ep->ncq++] = (struct oti_wc){ .ctx = ctx, .op = op, .status = status, .len = len };
	mock_kick(ep);
}

/* The transport is down: posted receives are flushed. */
static void mock_down(struct oti_ep *ep, enum oti_event_type type, int status)
{
	for (unsigned i = 0; i < ep->nrecv; i++)
		mock_complete(ep, ep->recv[i].ctx, OTI_WC_RECV, -ECANCELED, 0);
	ep->nrecv = 0;
	if (!ep->failed)
		mock_event(ep, type, status, NULL, 0);
	ep->failed = true;
}

static int mock_init(void) { return 0; }
static void mock_fini(void) {}
static int mock_probe(const struct sockaddr *l, const struct sockaddr *r) { return 0; }

static void mock_caps(struct oti_caps *caps)
{
	*caps = (struct oti_caps){
		.flags = OTI_CAP_RDMA_READ | OTI_CAP_RDMA_WRITE | OTI_CAP_SOFTWARE,
		.max_private_data = OTI_MAX_PRIVATE_DATA,
		.max_inline = 64,
		.max_send_wr = 1024,
		.max_recv_wr = MOCK_MAX_RECV,
		.max_msg_size = 1u << 30,
	};
}

static int mock_listen(const struct sockaddr *a, socklen_t l, int backlog, unsigned f,
		       struct oti_listener **out)
{
	struct oti_listener *lsn = calloc(1, sizeof(*lsn));

	if (!lsn)
		return -ENOMEM;
	lsn->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (lsn->efd < 0) {
		free(lsn);
		return -EMFILE;
	}
	lsn->port = ntohs(((const struct sockaddr_in *)a)->sin_port);
	if (!lsn->port)
		lsn->port = 5555;
	pthread_mutex_lock(&mock_lock);
	mock_lsn = lsn;
	pthread_mutex_unlock(&mock_lock);
	*out = lsn;
	return 0;
}

static int mock_listener_name(struct oti_listener *lsn, struct sockaddr *a, socklen_t *len)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(lsn->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	if (*len < sizeof(in))
		return -EINVAL;
	memcpy(a, &in, sizeof(in));
	*len = sizeof(in);
	return 0;
}

static int mock_listener_fd(struct oti_listener *lsn) { return lsn->efd; }

static int mock_listener_arm(struct oti_listener *lsn)
{
	uint64_t v;
	int ret = 0;

	pthread_mutex_lock(&mock_lock);
	if (read(lsn->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		abort();
	if (lsn->pending) {
		if (write(lsn->efd, &(uint64_t){ 1 }, sizeof(v)) < 0)
			abort();
		ret = -EAGAIN;
	}
	pthread_mutex_unlock(&mock_lock);
	return ret;
}

/* The request's "handle" is the listener itself: there is one at a time. */
static int mock_get_connreq(struct oti_listener *lsn, struct oti_connreq **req, void *pdata,
			    size_t *len, struct sockaddr_storage *peer)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(4242),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int ret = -EAGAIN;

	pthread_mutex_lock(&mock_lock);
	if (lsn->pending) {
		lsn->pending = false;
		memcpy(pdata, next_pdata, next_pdata_len);
		*len = next_pdata_len;
		memset(peer, 0, sizeof(*peer));
		memcpy(peer, &in, sizeof(in));
		*req = (struct oti_connreq *)lsn;
		ret = 0;
	}
	pthread_mutex_unlock(&mock_lock);
	return ret;
}

static int mock_reject(struct oti_listener *lsn, struct oti_connreq *req, const void *p,
		       size_t len)
{
	pthread_mutex_lock(&mock_lock);
	lsn->rejected = true;
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static void mock_listener_close(struct oti_listener *lsn)
{
	pthread_mutex_lock(&mock_lock);
	close(lsn->efd);
	free(lsn);
	mock_lsn = NULL;
	pthread_mutex_unlock(&mock_lock);
}

static struct oti_ep *mock_ep_new(void)
{
	struct oti_ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	ep->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ep->efd < 0) {
		free(ep);
		return NULL;
	}
	pthread_mutex_lock(&mock_lock);
	if (mock_ep) {
		/* One connection per input: the last one is still open. */
		pthread_mutex_unlock(&mock_lock);
		close(ep->efd);
		free(ep);
		return NULL;
	}
	mock_ep = ep;
	return ep;	/* with mock_lock held */
}

/* The engine took the Hello: the peer's buffers are the ones it names. */
static int mock_ep_accept_open(struct oti_listener *lsn, struct oti_connreq *req,
			       struct oti_ep **out)
{
	struct sdp_hello h;
	struct oti_ep *ep = mock_ep_new();

	if (!ep)
		return -ENOMEM;
	FUZZ_CHECK(sdp_hello_decode(next_pdata, next_pdata_len, &h) == 0);
	ep->peer_rcvsz = h.localrcvsz;
	pthread_mutex_unlock(&mock_lock);
	*out = ep;
	return 0;
}

static int mock_accept(struct oti_ep *ep, const void *pdata, size_t len)
{
	struct sdp_hello_ack a;

	FUZZ_CHECK(sdp_hello_ack_decode(pdata, len, &a) == 0);
	pthread_mutex_lock(&mock_lock);
	mock_event(ep, OTI_EV_ESTABLISHED, 0, NULL, 0);
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static int mock_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
			socklen_t srclen, struct oti_ep **out)
{
	struct oti_ep *ep = mock_ep_new();

	if (!ep)
		return -ENOMEM;
	mock_event(ep, OTI_EV_RESOLVED, 0, NULL, 0);
	pthread_mutex_unlock(&mock_lock);
	*out = ep;
	return 0;
}

/* The Hello is the engine's to get right; the answer is the input's. */
static int mock_connect(struct oti_ep *ep, const void *pdata, size_t len)
{
	struct sdp_hello h;
	struct sdp_hello_ack ack;

	FUZZ_CHECK(sdp_hello_decode(pdata, len, &h) == 0);
	pthread_mutex_lock(&mock_lock);
	if (sdp_hello_ack_decode(next_pdata, next_pdata_len, &ack) == 0)
		ep->peer_rcvsz = ack.actrcvsz;
	mock_event(ep, OTI_EV_ESTABLISHED, 0, next_pdata, next_pdata_len);
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static int mock_ep_names(struct oti_ep *ep, struct sockaddr_storage *local,
			 struct sockaddr_storage *peer)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(4242),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	if (local)
		memcpy(local, &a, sizeof(a));
	a.sin_port = htons(80);
	if (peer)
		memcpy(peer, &a, sizeof(a));
	return 0;
}

static int mock_ep_fd(struct oti_ep *ep) { return ep->efd; }

static int mock_ep_arm(struct oti_ep *ep)
{
	uint64_t v;
	int ret = 0;

	pthread_mutex_lock(&mock_lock);
	if (read(ep->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		abort();
	if (ep->ncq || ep->nev) {
		mock_kick(ep);
		ret = -EAGAIN;
	}
	pthread_mutex_unlock(&mock_lock);
	return ret;
}

static int mock_get_event(struct oti_ep *ep, struct oti_event *ev)
{
	int ret = -EAGAIN;

	pthread_mutex_lock(&mock_lock);
	if (ep->nev) {
		*ev = ep->ev[0];
		memmove(ep->ev, ep->ev + 1, --ep->nev * sizeof(ep->ev[0]));
		ret = 0;
	}
	pthread_mutex_unlock(&mock_lock);
	return ret;
}

static int mock_poll_cq(struct oti_ep *ep, struct oti_wc *wc, int n)
{
	int k;

	pthread_mutex_lock(&mock_lock);
	k = (int)ep->ncq < n ? (int)ep->ncq : n;
	memcpy(wc, ep->cq, (size_t)k * sizeof(*wc));
	memmove(ep->cq, ep->cq + k, (ep->ncq - (unsigned)k) * sizeof(ep->cq[0]));
	ep->ncq -= (unsigned)k;
	pthread_mutex_unlock(&mock_lock);
	return k;
}

static int mock_mr_reg(struct oti_ep *ep, void *addr, size_t len, unsigned access,
		       struct oti_mr **out)
{
	struct oti_mr *mr = calloc(1, sizeof(*mr));

	if (!mr)
		return -ENOMEM;
	pthread_mutex_lock(&mock_lock);
	*mr = (struct oti_mr){ .addr = addr, .len = len, .rkey = mock_next_rkey++,
			       .raddr_base = 0, .access = access };
	pthread_mutex_unlock(&mock_lock);
	*out = mr;
	return 0;
}

static int mock_mr_dereg(struct oti_mr *mr)
{
	free(mr);
	return 0;
}

static int mock_post_recv(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx)
{
	int ret = 0;

	pthread_mutex_lock(&mock_lock);
	if (ep->failed)
		mock_complete(ep, ctx, OTI_WC_RECV, -ECANCELED, 0);
	else if (ep->nrecv == MOCK_MAX_RECV)
		ret = -ENOMEM;
	else
		ep->recv[ep->nrecv++] = (struct mock_recv){ sge->addr, sge->len, ctx };
	pthread_mutex_unlock(&mock_lock);
	return ret;
}

/* Every message the engine sends must be one the peer can take. */
static int mock_post_send(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx,
			  unsigned flags)
{
	struct sdp_bsdh h;

	pthread_mutex_lock(&mock_lock);
	FUZZ_CHECK(sdp_bsdh_decode(sge->addr, sge->len, &h) == 0);
	FUZZ_CHECK(!ep->peer_rcvsz || sge->len <= ep->peer_rcvsz);
	ep->sent = h.mseq;
	if (ep->failed)
		mock_complete(ep, ctx, OTI_WC_SEND, -ECANCELED, 0);
	else
		mock_complete(ep, ctx, OTI_WC_SEND, 0, 0);
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static int mock_rdma(struct oti_ep *ep, const struct oti_sge *local, uint64_t ctx,
		     enum oti_wc_op op)
{
	pthread_mutex_lock(&mock_lock);
	if (ep->failed) {
		mock_complete(ep, ctx, op, -ECANCELED, 0);
	} else {
		if (op == OTI_WC_RDMA_READ && !ep->rdma_status)
			memset(local->addr, 0x5a, local->len);
		mock_complete(ep, ctx, op, ep->rdma_status, ep->rdma_status ? 0 : local->len);
	}
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static int mock_rdma_read(struct oti_ep *ep, const struct oti_sge *local, uint64_t raddr,
			  uint32_t rkey, uint64_t ctx)
{
	return mock_rdma(ep, local, ctx, OTI_WC_RDMA_READ);
}

static int mock_rdma_write(struct oti_ep *ep, const struct oti_sge *local, uint64_t raddr,
			   uint32_t rkey, uint64_t ctx)
{
	return mock_rdma(ep, local, ctx, OTI_WC_RDMA_WRITE);
}

static int mock_disconnect(struct oti_ep *ep)
{
	pthread_mutex_lock(&mock_lock);
	mock_down(ep, OTI_EV_DISCONNECTED, 0);
	pthread_mutex_unlock(&mock_lock);
	return 0;
}

static void mock_ep_close(struct oti_ep *ep)
{
	pthread_mutex_lock(&mock_lock);
	close(ep->efd);
	free(ep);
	mock_ep = NULL;
	pthread_mutex_unlock(&mock_lock);
}

static const struct oti_ops mock_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "mock",
	.init = mock_init,
	.fini = mock_fini,
	.probe = mock_probe,
	.query_caps = mock_caps,
	.listen = mock_listen,
	.listener_name = mock_listener_name,
	.listener_fd = mock_listener_fd,
	.listener_arm = mock_listener_arm,
	.get_connreq = mock_get_connreq,
	.reject = mock_reject,
	.listener_close = mock_listener_close,
	.ep_accept_open = mock_ep_accept_open,
	.accept = mock_accept,
	.ep_open = mock_ep_open,
	.connect = mock_connect,
	.ep_names = mock_ep_names,
	.ep_fd = mock_ep_fd,
	.ep_arm = mock_ep_arm,
	.ep_wait_events = oti_wait_pollin,
	.get_event = mock_get_event,
	.poll_cq = mock_poll_cq,
	.mr_reg = mock_mr_reg,
	.mr_dereg = mock_mr_dereg,
	.post_recv = mock_post_recv,
	.post_send = mock_post_send,
	.rdma_read = mock_rdma_read,
	.rdma_write = mock_rdma_write,
	.disconnect = mock_disconnect,
	.ep_close = mock_ep_close,
};

/* --- the script ------------------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Small buffers and a low zero-copy threshold: every path within
	 * a few hundred bytes of input. */
	setenv("SDP_TRANSPORTS", "mock", 1);
	setenv("SDP_BUF_SIZE", "4112", 1);
	setenv("SDP_RECV_BUFS", "4", 1);
	setenv("SDP_SEND_BUFS", "4", 1);
	setenv("SDP_ZCOPY_THRESH", "8192", 1);
	setenv("SDP_ZCOPY_STAGE", "4096", 1);
	setenv("SDP_EXIT_LINGER_MS", "0", 1);
	setenv("SDP_DISCONNECT_TIMEOUT_MS", "200", 1);
	setenv("SDP_ZCOPY_CANCEL_TIMEOUT_MS", "200", 1);
	setenv("SDP_ZCOPY_STALL_MS", "100", 1);
	if (oti_test_backend(&mock_ops) || sdp_init() < 0) {
		fprintf(stderr, "fuzz_conn: cannot set up the engine on the mock transport\n");
		abort();
	}
	return 0;
}

static void default_hello_ack(void)
{
	struct sdp_hello_ack a = {
		.bsdh = { .bufs = 4 },
		.major = SDP_MAJOR_VERSION,
		.minor = SDP_MINOR_VERSION,
		.ip_version = 4,
		.max_adverts = 1,
		.actrcvsz = MOCK_PEER_RCVSZ,
	};

	next_pdata_len = (size_t)sdp_hello_ack_encode(next_pdata, sizeof(next_pdata), &a);
}

/* A message from the peer into the first posted receive. */
static void deliver(const uint8_t *p, size_t len, bool fix)
{
	struct oti_ep *ep = mock_ep;

	if (!ep || ep->failed)
		return;
	if (!ep->nrecv) {
		/* The engine gave no buffer: a real transport drops the
		 * connection (RNR), as here. */
		mock_down(ep, OTI_EV_ERROR, -EIO);
		return;
	}
	struct mock_recv r = ep->recv[0];

	memmove(ep->recv, ep->recv + 1, --ep->nrecv * sizeof(ep->recv[0]));
	if (len > r.len) {
		mock_complete(ep, r.ctx, OTI_WC_RECV, -EMSGSIZE, 0);
		mock_down(ep, OTI_EV_ERROR, -EMSGSIZE);
		return;
	}
	memcpy(r.addr, p, len);
	if (fix && len >= SDP_BSDH_LEN) {
		struct sdp_bsdh h = {
			.mid = p[0], .flags = p[1], .bufs = (uint16_t)(p[2] << 8 | p[3]),
			.len = (uint32_t)len, .mseq = ++ep->peer_mseq, .mseq_ack = ep->sent,
		};

		sdp_bsdh_encode(r.addr, &h);
	} else {
		ep->peer_mseq++;
	}
	mock_complete(ep, r.ctx, OTI_WC_RECV, 0, (uint32_t)len);
}

/*
 * Let the engine take what was queued.  Bounded: it may have stopped
 * listening, which is its right once the connection is over; so is the
 * whole input's waiting (settle_budget polls), so that a long script on
 * a dead connection does not pass for a hang.
 */
#define SETTLE_POLL_US 50
static int settle_budget;

static void settle(void)
{
	while (settle_budget > 0) {
		pthread_mutex_lock(&mock_lock);
		bool idle = !mock_ep || (!mock_ep->ncq && !mock_ep->nev);

		pthread_mutex_unlock(&mock_lock);
		if (idle)
			return;
		usleep(SETTLE_POLL_US);
		settle_budget--;
	}
}

static uint8_t app_buf[1 << 18];

static void app_op(int sd, uint8_t op, size_t len)
{
	switch (op) {
	case 2:
		(void)sdp_recv(sd, app_buf, len * 16 < sizeof(app_buf) ? len * 16 : sizeof(app_buf),
			       MSG_DONTWAIT);
		break;
	case 3:
		(void)sdp_send(sd, app_buf, len * 64 < sizeof(app_buf) ? len * 64 : sizeof(app_buf),
			       MSG_DONTWAIT | MSG_NOSIGNAL);
		break;
	case 5:
		(void)sdp_shutdown(sd, SHUT_WR);
		break;
	case 7:
		(void)sdp_recv(sd, app_buf, len < sizeof(app_buf) ? len : sizeof(app_buf),
			       MSG_DONTWAIT | MSG_PEEK);
		(void)sdp_nread(sd);
		break;
	case 8:
	case 9: {
		struct timeval tv = { .tv_usec = 20000 };

		sdp_set_nonblock(sd, 0);
		sdp_setsockopt(sd, SOL_SOCKET, op == 8 ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, sizeof(tv));
		if (op == 8)
			(void)sdp_send(sd, app_buf, len * 64 < sizeof(app_buf) ? len * 64
							: sizeof(app_buf), MSG_NOSIGNAL);
		else
			(void)sdp_recv(sd, app_buf, len * 16 < sizeof(app_buf) ? len * 16
							: sizeof(app_buf), 0);
		sdp_set_nonblock(sd, 1);
		break;
	}
	}
}

static void default_hello(void)
{
	struct sdp_hello h = {
		.bsdh = { .bufs = 4 },
		.major = SDP_MAJOR_VERSION,
		.minor = SDP_MINOR_VERSION,
		.ip_version = 4,
		.max_adverts = 1,
		.desremrcvsz = MOCK_PEER_RCVSZ,
		.localrcvsz = MOCK_PEER_RCVSZ,
		.src_port = 4242,
	};

	next_pdata_len = (size_t)sdp_hello_encode(next_pdata, sizeof(next_pdata), &h);
}

/* The script, from data[pos], on the connected socket sd. */
static void play(int sd, const uint8_t *data, size_t size, size_t pos)
{
	sdp_set_nonblock(sd, 1);
	while (pos + 3 <= size) {
		uint8_t op = data[pos] % 10;
		size_t n = (size_t)(data[pos + 1] | data[pos + 2] << 8);
		const uint8_t *p = data + pos + 3;

		pos += 3;
		if (op <= 1) {
			if (n > size - pos)
				n = size - pos;
			pos += n;
		}
		pthread_mutex_lock(&mock_lock);
		switch (op) {
		case 0:
		case 1:
			deliver(p, n, op == 0);
			break;
		case 4:
			if (mock_ep && !mock_ep->failed)
				mock_down(mock_ep, n % 2 ? OTI_EV_ERROR : OTI_EV_DISCONNECTED,
					  n % 2 ? -EIO : 0);
			break;
		case 6:
			if (mock_ep)
				mock_ep->rdma_status = n % 2 ? -EIO : 0;
			break;
		}
		pthread_mutex_unlock(&mock_lock);
		app_op(sd, op, n);
		settle();
	}
}

/* Listen, let the peer's request in, accept it: the accepted socket, or
 * -1 when the engine refused the request (which it must for a Hello it
 * cannot decode). */
static int passive_open(int lsd)
{
	struct sockaddr_in any = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sdp_hello h;
	bool valid = sdp_hello_decode(next_pdata, next_pdata_len, &h) == 0;
	int sd = -1;

	FUZZ_CHECK(sdp_bind(lsd, (struct sockaddr *)&any, sizeof(any)) == 0);
	FUZZ_CHECK(sdp_listen(lsd, 4) == 0);
	sdp_set_nonblock(lsd, 1);
	pthread_mutex_lock(&mock_lock);
	FUZZ_CHECK(mock_lsn != NULL);
	mock_lsn->pending = true;
	if (write(mock_lsn->efd, &(uint64_t){ 1 }, sizeof(uint64_t)) < 0)
		abort();
	pthread_mutex_unlock(&mock_lock);
	for (int i = 0; i < 20000 && sd < 0; i++) {
		sd = sdp_accept(lsd, NULL, NULL, 0);
		pthread_mutex_lock(&mock_lock);
		bool rejected = mock_lsn->rejected;

		pthread_mutex_unlock(&mock_lock);
		if (sd < 0 && rejected)
			break;
		if (sd < 0)
			usleep(100);
	}
	if (!valid)
		FUZZ_CHECK(sd < 0 && mock_lsn->rejected);
	/* A valid Hello: accepted, or refused for want of resources. */
	FUZZ_CHECK(sd >= 0 || mock_lsn->rejected);
	return sd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(80),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	size_t pos = 1;
	bool passive;

	if (size < 1 || size > 64 * 1024)
		return 0;
	settle_budget = 2000000 / SETTLE_POLL_US;	/* 2 s */
	passive = data[0] & 2;
	pthread_mutex_lock(&mock_lock);
	if (data[0] & 1) {
		size_t len = size >= 3 ? (size_t)(data[1] | data[2] << 8) : 0;

		if (len > OTI_MAX_PRIVATE_DATA || 3 + len > size) {
			pthread_mutex_unlock(&mock_lock);
			return 0;
		}
		memcpy(next_pdata, data + 3, len);
		next_pdata_len = len;
		pos = 3 + len;
	} else if (passive) {
		default_hello();
	} else {
		default_hello_ack();
	}
	pthread_mutex_unlock(&mock_lock);

	int sd = sdp_socket(AF_INET, SOCK_STREAM, 0), lsd = -1;

	FUZZ_CHECK(sd >= 0);
	if (passive) {
		lsd = sd;
		sd = passive_open(lsd);
	} else if (sdp_connect(sd, (struct sockaddr *)&dst, sizeof(dst))) {
		sdp_close(sd);
		sd = -1;
	}
	if (sd >= 0) {
		play(sd, data, size, pos);
		sdp_close(sd);
	}
	if (lsd >= 0)
		sdp_close(lsd);
	/* The peer goes away; the engine must let go of the endpoint. */
	pthread_mutex_lock(&mock_lock);
	if (mock_ep)
		mock_down(mock_ep, OTI_EV_DISCONNECTED, 0);
	pthread_mutex_unlock(&mock_lock);
	bool closed = false;

	for (int i = 0; i < 100000 && !closed; i++) {
		pthread_mutex_lock(&mock_lock);
		closed = !mock_ep && !mock_lsn;
		pthread_mutex_unlock(&mock_lock);
		if (!closed)
			usleep(100);
	}
	FUZZ_CHECK(closed);
	return 0;
}
