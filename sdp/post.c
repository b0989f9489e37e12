/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One connection's buffers and what is posted from them (doc/layers.md:
 * below the zero-copy and mode logic, which post through it, and below
 * the receive dispatch in conn.c):
 *
 *  - set-up of the receive ring, the send ring and the control slots,
 *    sized for SO_RCVBUF and SO_SNDBUF;
 *  - credit flow control and segmentation into the peer's buffers
 *    (Bcopy): conn_send() copies the application's bytes into the send
 *    ring, conn_flush() posts what credits allow, control messages
 *    included, and a credit update when the peer runs short;
 *  - conn_recv(): reassembly of received segments into the
 *    application's buffer, reposting what it consumed;
 *  - the end of a connection as the transport sees it: abort, a post
 *    that failed, a protocol error;
 *  - readiness: the poll mask computed the way tcp_poll() does, and
 *    sock_changed(), which every layer above calls when something a
 *    waiter may care about changed.
 *
 * Every function here runs with the socket's lock held.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "engine.h"
#include "log.h"
#include "sys.h"
#include "tunables.h"

#define LOGSYS "conn"

uint8_t *rx_buf(struct sdp_conn *c, uint32_t slot)
{
	if (c->rx_in_old && c->rx_in_old[slot])
		return c->rx_old_mem + (size_t)slot * c->rx_old_size;
	return c->rx_mem + (size_t)slot * c->rx_size;
}

/* Where a queued segment's bytes are. */
static uint8_t *seg_buf(struct sdp_conn *c, const struct sdp_rx_seg *seg)
{
	if (seg->slot == SDP_SLOT_STAGE)
		return c->stage_mem;
	if (seg->slot == SDP_SLOT_HEAP)
		return seg->heap;
	return rx_buf(c, seg->slot);
}

static uint8_t *tx_buf(struct sdp_conn *c, uint32_t slot)
{
	return c->tx_mem + (size_t)slot * c->tx_size;
}

static uint32_t tx_payload_max(const struct sdp_conn *c)
{
	return c->tx_size - SDP_BSDH_LEN;
}

static bool tail_open(const struct sdp_conn *c);
static bool tx_next_slot(struct sdp_conn *c, uint32_t *slot);
static uint32_t rx_start_size(const struct sdp_conn *c);
static void rx_old_release(struct sdp_conn *c, uint32_t slot);
static void rx_old_free(struct sdp_conn *c);
static void rx_grow_deferred(struct sdp_sock *s);

/* --- set-up ------------------------------------------------------------- */

struct sdp_conn *conn_new(void)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));

	if (c) {
		c->ep_fd = -1;
		mode_init(c);
	}
	return c;
}

static int conn_post_rx(struct sdp_conn *c, uint32_t slot)
{
	struct oti_sge sge = {
		.addr = rx_buf(c, slot), .len = c->rx_size, .mr = c->rx_mr,
	};
	int ret = c->t->post_recv(c->ep, &sge, SDP_CTX_RX | slot);

	if (!ret)
		c->rx_posted[slot] = true;
	return ret;
}

/* A consumed receive buffer goes back to the transport; the peer may
 * learn of it. */
static int conn_post_again(struct sdp_sock *s, uint32_t slot)
{
	struct sdp_conn *c = s->conn;
	int ret = conn_post_rx(c, slot);

	if (ret) {
		conn_post_failed(s, ret, false);
		return ret;
	}
	sdp_credits_on_repost(&c->cr);
	return 0;
}

/*
 * Once the transport connection is down there is nobody to receive from:
 * the buffer just retires.  Beyond SO_RCVBUF's count it waits, unposted,
 * until the option grows again.
 */
static int repost_one(struct sdp_sock *s, uint32_t slot)
{
	struct sdp_conn *c = s->conn;

	if (c->rx_in_old && c->rx_in_old[slot])
		rx_old_release(c, slot);
	if (c->transport_down || c->post_failed)
		return 0;
	if (c->cr.posted >= c->rx_max) {
		c->rx_idle[c->nidle++] = slot;
		return 0;
	}
	return conn_post_again(s, slot);
}

int conn_repost(struct sdp_sock *s, uint32_t slot)
{
	int ret = repost_one(s, slot);

	if (s->conn->rx_want)
		rx_grow_deferred(s);	/* the old ring may have gone just now */
	return ret;
}

/*
 * SO_RCVBUF and SO_SNDBUF in buffers (sock.c, "SO_SNDBUF and SO_RCVBUF").
 * A set SO_RCVBUF of `budget` bytes is what the peer may send before we
 * read: the credits of all but the two buffers the peer keeps in reserve
 * for control messages (credits.h), so ceil(budget / payload) + 2 buffers,
 * never fewer than four (two data messages in flight) nor more than the
 * recv_bufs tunable may be set to.  Before the handshake the buffer size
 * is ours to choose: a small budget gets smaller buffers, four for data,
 * down to SDP_RX_SIZE_MIN (every control message, and a SinkAvail
 * carrying a Transaction request, fit with room to spare).  A set
 * SO_SNDBUF sizes the send ring to hold it.
 */
#define SDP_BUFS_MIN 4
#define SDP_BUFS_MAX 1024	/* recv_bufs' and send_bufs' maxima */
#define SDP_RX_RESERVE 2
#define SDP_RX_SMALL_DATA_BUFS 4
#define SDP_RX_SIZE_MIN 1040	/* buf_size's minimum */

static uint32_t bufs_for(uint64_t budget, uint32_t size, uint32_t extra)
{
	uint64_t n = (budget + size - SDP_BSDH_LEN - 1) / (size - SDP_BSDH_LEN) + extra;

	return n < SDP_BUFS_MIN ? SDP_BUFS_MIN : n > SDP_BUFS_MAX ? SDP_BUFS_MAX : (uint32_t)n;
}

/* A receive buffer size within SDP_RX_SIZE_MIN and buf_size. */
static uint32_t rx_size_clamp(uint64_t size)
{
	uint64_t cap = (uint64_t)tun_int(TUN_buf_size);

	return size < SDP_RX_SIZE_MIN ? SDP_RX_SIZE_MIN : size > cap ? (uint32_t)cap : (uint32_t)size;
}

static uint32_t rx_size_for(uint64_t budget)
{
	return rx_size_clamp(budget / SDP_RX_SMALL_DATA_BUFS + SDP_BSDH_LEN);
}

/* Buffers to keep posted for s's SO_RCVBUF, at most the ring. */
static uint32_t rx_max_for(const struct sdp_sock *s, const struct sdp_conn *c)
{
	if (!s->rcvbuf_set)
		return c->nrx;
	uint32_t n = bufs_for((uint64_t)s->rcvbuf, c->rx_size, SDP_RX_RESERVE);

	return n < c->nrx ? n : c->nrx;
}

void conn_rcvbuf_changed(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->rx_idle)
		return;
	/* What is posted stays posted: the peer may already be using it. */
	c->rx_max = rx_max_for(s, c);
	if (s->state != SDP_S_ESTABLISHED || c->transport_down || c->post_failed)
		return;
	while (c->nidle && c->cr.posted < c->rx_max) {
		if (conn_post_again(s, c->rx_idle[--c->nidle]))
			return;
	}
	conn_flush(s);
}

/* --- rings kept for the next connection ----------------------------------
 * A connection's rings are megabytes of address space (recv_bufs and
 * send_bufs buffers of buf_size): each one is mapped anew and unmapped
 * at the close, and the pages a connection touched are cleared again for
 * the next one; for a program that makes a connection per request that
 * was a good part of its set-up (doc/fastpath.md, "Connection set-up").
 * So the rings of a connection that moved little data (at most
 * RING_KEEP_BYTES through them, so that they hold a few resident pages,
 * not megabytes) are kept, RING_KEEP of them, and the next connection
 * takes one of the same size.  RING_KEEP covers the connections a
 * program has closed but whose close is still under way (the DisConn
 * exchange) while it opens the next ones: 4 were too few for a client
 * and server on one host, whose closes finish in batches.  A kept
 * ring's old bytes are never sent: only what a connection writes or
 * receives is.  Trylocks: a miss costs
 * only the allocation, and a child forked while another thread held the
 * lock never waits for it.
 */
#define RING_KEEP 32
#define RING_KEEP_BYTES (64u * 1024)

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *mem;
	size_t len;
} ring_kept[RING_KEEP];	/* [0, ring_nkept): kept rings */
static int ring_nkept;

static size_t ring_len(uint32_t n, uint32_t size)
{
	return ((size_t)n * size + 4095) & ~(size_t)4095;
}

/*
 * Rings are mapped, not taken from malloc (ring_len() makes every length
 * a positive multiple of the page).  glibc raises its mmap threshold to
 * the size of every mapped chunk freed (up to 32 MiB), and its trim
 * threshold to twice that: a grown ring's free (4 MiB) made every later
 * allocation below 4 MiB, the application's included, come from the
 * heap, and the heap keep 8 MiB of free pages before giving any back.  A
 * connection that went idle after a burst then kept its backlog and
 * copied-out memory resident (scale.sh's idle check, buffers grown from
 * 1536 bytes), and a preload must not change the program's malloc.
 */
static void *ring_get(size_t len)
{
	void *mem = NULL;

	if (pthread_mutex_trylock(&ring_lock) == 0) {
		for (int i = 0; i < ring_nkept; i++) {
			if (ring_kept[i].len == len) {
				mem = ring_kept[i].mem;
				ring_kept[i] = ring_kept[--ring_nkept];
				break;
			}
		}
		pthread_mutex_unlock(&ring_lock);
	}
	if (!mem) {
		SDP_STAT_INC(ring_allocs, 1);
		mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			mem = NULL;
	}
	return mem;
}

static void ring_put(void *mem, size_t len, bool keep)
{
	if (!mem)
		return;
	if (keep && pthread_mutex_trylock(&ring_lock) == 0) {
		if (ring_nkept < RING_KEEP) {
			ring_kept[ring_nkept].mem = mem;
			ring_kept[ring_nkept++].len = len;
			mem = NULL;
		}
		pthread_mutex_unlock(&ring_lock);
	}
	if (mem)
		munmap(mem, len);
}

void conn_free_rings(struct sdp_conn *c)
{
	bool keep = c->ring_bytes <= RING_KEEP_BYTES;

	rx_old_free(c);
	while (c->bl_head) {
		struct sdp_tx_chunk *k = c->bl_head;

		c->bl_head = k->next;
		free(k);
	}
	c->bl_tail = NULL;

	ring_put(c->rx_mem, c->rx_mem_len, keep);
	ring_put(c->tx_mem, c->tx_mem_len, keep);
	c->rx_mem = c->tx_mem = NULL;
}

int conn_setup_rx(struct sdp_conn *c, const struct sdp_sock *s)
{
	c->nrx = (uint32_t)tun_int(TUN_recv_bufs);
	c->rx_size = rx_start_size(c);
	if (s->rcvbuf_set) {
		c->rx_size = rx_size_for((uint64_t)s->rcvbuf);
		c->nrx = bufs_for((uint64_t)s->rcvbuf, c->rx_size, SDP_RX_RESERVE);
		c->rx_fixed = true;
	}
	if (c->caps.max_recv_wr && c->nrx > c->caps.max_recv_wr)
		c->nrx = c->caps.max_recv_wr;
	c->rx_max = c->nrx;
	return conn_make_rx(c, NULL);
}

int conn_make_rx(struct sdp_conn *c, const bool *post)
{
	int ret;

	c->rx_mem_len = ring_len(c->nrx, c->rx_size);
	c->rx_mem = ring_get(c->rx_mem_len);
	c->rxq_cap = c->nrx + SDP_RXQ_EXTRA;
	c->rxq = calloc(c->rxq_cap, sizeof(*c->rxq));
	c->rx_idle = calloc(c->nrx, sizeof(*c->rx_idle));
	c->rx_posted = calloc(c->nrx, sizeof(*c->rx_posted));
	if (!c->rx_mem || !c->rxq || !c->rx_idle || !c->rx_posted)
		return -ENOMEM;
	c->buf_bytes += (uint64_t)c->nrx * c->rx_size;
	SDP_STAT_INC(buf_bytes, (uint64_t)c->nrx * c->rx_size);
	ret = c->t->mr_reg(c->ep, c->rx_mem, (size_t)c->nrx * c->rx_size,
			   OTI_ACCESS_LOCAL_WRITE, &c->rx_mr);
	if (ret)
		return ret;
	ret = c->t->mr_reg(c->ep, c->ctrl_mem, sizeof(c->ctrl_mem), 0, &c->ctrl_mr);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < c->nrx; i++) {
		ret = post && !post[i] ? 0 : conn_post_rx(c, i);
		if (ret)
			return ret;
	}
	return 0;
}

/* Send ring, sized for the peer's receive buffers and s's SO_SNDBUF
 * (plus one buffer: the first may be partly sent already). */
int conn_setup_tx(struct sdp_conn *c, uint32_t peer_rcvsz, const struct sdp_sock *s)
{
	uint32_t cap = (uint32_t)tun_int(TUN_buf_size);

	c->tx_size = peer_rcvsz < cap ? peer_rcvsz : cap;
	c->ntx = (uint32_t)tun_int(TUN_send_bufs);
	if (s->sndbuf_set) {
		c->ntx = bufs_for((uint64_t)s->sndbuf, c->tx_size, 1);
		c->tx_fixed = true;
	}
	return conn_make_tx(c);
}

int conn_make_tx(struct sdp_conn *c)
{
	c->tx_mem_len = ring_len(c->ntx, c->tx_size);
	c->tx_mem = ring_get(c->tx_mem_len);
	c->tx_len = calloc(c->ntx, sizeof(*c->tx_len));
	c->tx_urg = calloc(c->ntx, sizeof(*c->tx_urg));
	if (!c->tx_mem || !c->tx_len || !c->tx_urg)
		return -ENOMEM;
	c->buf_bytes += (uint64_t)c->ntx * c->tx_size;
	SDP_STAT_INC(buf_bytes, (uint64_t)c->ntx * c->tx_size);
	return c->t->mr_reg(c->ep, c->tx_mem, (size_t)c->ntx * c->tx_size, 0, &c->tx_mr);
}

/* --- send backlog ----------------------------------------------------------
 * The ring is the registered staging area of the send side, and it may
 * be small (growing buffers, below): 16 buffers of the peer's size.  A
 * send that finds it full goes on into the backlog, unregistered memory
 * in order behind the ring, as long as SO_SNDBUF's bytes (set, or its
 * default of send_bufs x buf_size) are not all queued; flush_data()
 * moves the backlog into the ring as buffers come back.  So a program
 * whose peer is not reading yet can send about as much as before the
 * buffers were small, and nothing of it is pinned.
 */

/* Take up to `max` bytes of iov (from offset off of its first element)
 * into the backlog: how many. */
static size_t bl_append(const struct sdp_sock *s, struct sdp_conn *c, const struct iovec *iov,
			int iovcnt, size_t off, size_t max)
{
	uint64_t cap = (uint64_t)s->sndbuf;
	size_t want = 0, skip = off;

	if (c->tx_queued_bytes >= cap)
		return 0;
	if (max > cap - c->tx_queued_bytes)
		max = (size_t)(cap - c->tx_queued_bytes);
	for (int i = 0; i < iovcnt && want < max; i++, skip = 0)
		want += iov[i].iov_len - skip;
	if (want > max)
		want = max;
	if (want > UINT32_MAX)
		want = UINT32_MAX;
	if (!want)
		return 0;
	struct sdp_tx_chunk *k = malloc(sizeof(*k) + want);

	if (!k)
		return 0;	/* the caller waits for the ring, as before */
	*k = (struct sdp_tx_chunk){ .len = (uint32_t)want };
	size_t got = 0;

	for (int i = 0; got < want; i++, off = 0) {
		size_t n = iov[i].iov_len - off;

		if (n > want - got)
			n = want - got;
		memcpy(k->data + got, (const uint8_t *)iov[i].iov_base + off, n);
		got += n;
	}
	if (c->bl_tail)
		c->bl_tail->next = k;
	else
		c->bl_head = k;
	c->bl_tail = k;
	c->tx_queued_bytes += want;
	return want;
}

/* Move the backlog into the ring while it has room. */
static void bl_drain(struct sdp_conn *c)
{
	while (c->bl_head) {
		struct sdp_tx_chunk *k = c->bl_head;
		uint32_t slot;

		if (!tx_next_slot(c, &slot))
			return;
		uint32_t n = tx_payload_max(c) - c->tx_len[slot];

		if (n > k->len - k->off)
			n = k->len - k->off;
		memcpy(tx_buf(c, slot) + SDP_BSDH_LEN + c->tx_len[slot], k->data + k->off, n);
		c->tx_len[slot] += n;
		k->off += n;
		if (k->off < k->len)
			continue;
		c->tx_urg[slot] = k->urg;
		c->bl_head = k->next;
		if (!c->bl_head)
			c->bl_tail = NULL;
		free(k);
	}
}

/* --- growing buffers ---------------------------------------------------------
 * On a transport whose registrations pin memory (ib, iwarp) a connection
 * starts with small buffers (buf_size_start: 1536 bytes, so that 16 + 16
 * of them and the control slots pin about 56 KiB, not 8 MiB), and they
 * grow as TCP's autotuned buffers do, with the SDP message made for it:
 *
 * - The sender (tx_maybe_ask()): once SDP_GROW_FULL sends since its last
 *   ask found every buffer of its ring in use (or the backlog behind it
 *   not empty), a stream is waiting on the buffers (a request of a few
 *   KiB fills a few of them and leaves); it
 *   asks the peer with ChRcvBuf for SDP_GROW_STEP times its buffers'
 *   size, up to buf_size, one ask at a time.
 * - The receiver (conn_grow_rx()) makes and registers a ring of the new
 *   size at once and from then on posts its buffers in place of the
 *   old ones as those are consumed: every receive posted earlier still
 *   takes only a small message.  Once the transport holds no old buffer
 *   it answers with ChRcvBufAck and the new size (the rule OFED's
 *   receiver follows), and once no old buffer holds unread data either,
 *   the old ring goes.  It answers at once, with the size it has, when
 *   it will not grow: SO_RCVBUF set before the handshake (fixed buffers,
 *   as Linux's SOCK_RCVBUF_LOCK stops autotuning), already at buf_size,
 *   or the registration failed.  SO_RCVBUF set later bounds how many
 *   buffers are posted, not their size: fewer of the larger ones.
 * - The sender, answered with a larger size, stops starting buffers until
 *   its ring has drained, then swaps it for one of the new size
 *   (conn_tx_regrow()); an answer that is not larger means the peer will
 *   not grow, and it asks no more.  Nor does it ask when SO_SNDBUF was
 *   set before the handshake.
 *
 * So a connection that carries requests and replies of a few KiB keeps
 * small buffers, a bulk stream reaches buf_size in steps (four from
 * 1536), and the slots' count (the credits) never changes.  What the
 * application has not read yet is copied out of the small buffers
 * (below, "Unread data copied out"), so that it may leave 64 KiB unread
 * as on TCP.  A peer that never asks (OFED
 * never sends ChRcvBuf) keeps ours small.  When the connection idles the
 * send ring shrinks again (conn_tx_shrink(), below); the receive buffers
 * do not: they are posted, and a posted receive cannot be taken back
 * from a QP.
 */
/* 1520 bytes of payload, an Ethernet frame's worth: 16 + 16 buffers fill
 * 12 pages, and an idle connection end pins less than 64 KiB. */
#define SDP_RX_SIZE_PINNED 1536
#define SDP_GROW_FULL 2
#define SDP_GROW_STEP 4

static uint32_t rx_start_size(const struct sdp_conn *c)
{
	uint64_t size = (uint64_t)tun_int(TUN_buf_size_start);

	if (!size)
		size = (c->caps.flags & OTI_CAP_SOFTWARE) ? (uint64_t)tun_int(TUN_buf_size)
							 : SDP_RX_SIZE_PINNED;
	return rx_size_clamp(size);
}

static void rx_old_free(struct sdp_conn *c)
{
	if (!c->rx_old_mem)
		return;
	if (c->rx_old_mr)
		c->t->mr_dereg(c->rx_old_mr);
	ring_put(c->rx_old_mem, c->rx_old_len, false);	/* used: its pages are resident */
	c->buf_bytes -= (uint64_t)c->nrx * c->rx_old_size;
	SDP_STAT_INC(buf_bytes, -(uint64_t)c->nrx * c->rx_old_size);
	free(c->rx_in_old);
	c->rx_in_old = NULL;
	c->rx_old_mem = NULL;
	c->rx_old_mr = NULL;
}

/* Old buffer slot is done with (its message handled or read): it is a
 * slot of the new ring from now on. */
static void rx_old_release(struct sdp_conn *c, uint32_t slot)
{
	c->rx_in_old[slot] = false;
	if (--c->rx_old_refs == 0)
		rx_old_free(c);
}

/* The transport gave back an old buffer it held (consumed or flushed). */
void conn_rx_old_done(struct sdp_sock *s, uint32_t slot)
{
	struct sdp_conn *c = s->conn;

	if (!c->rx_in_old || !c->rx_in_old[slot])
		return;
	if (--c->rx_old_posted == 0 && conn_fits(c, SDP_U32H_LEN))
		c->ctrl_pending |= SDP_CTRL_CH_RCV_BUF_ACK;
}

/* The size our buffers would grow to for a ChRcvBuf asking `want`: 0 if
 * they do not grow. */
static uint32_t rx_grow_size(const struct sdp_conn *c, uint32_t want)
{
	uint64_t cap = (uint64_t)tun_int(TUN_buf_size);

	if (c->rx_fixed || !c->rx_posted)
		return 0;
	if (c->caps.max_msg_size && cap > c->caps.max_msg_size)
		cap = c->caps.max_msg_size;
	if (want > cap)
		want = (uint32_t)cap;
	return want > c->rx_size ? want : 0;
}

void conn_grow_rx(struct sdp_sock *s, uint32_t want)
{
	struct sdp_conn *c = s->conn;

	/* Asked while still growing, or before the answer went (a second
	 * growth now would change the size that answer carries while
	 * buffers of the first are still posted): the ask waits, and is
	 * taken once the old ring is gone and the answer sent.  Left
	 * unanswered, it would stop the peer's growth for good. */
	if (c->rx_old_mem || (c->ctrl_pending & SDP_CTRL_CH_RCV_BUF_ACK)) {
		if (want > c->rx_want)
			c->rx_want = want;
		return;
	}
	uint32_t size = rx_grow_size(c, want);
	size_t len = ring_len(c->nrx, size);
	uint8_t *mem = size ? ring_get(len) : NULL;
	bool *in_old = mem ? calloc(c->nrx, sizeof(*in_old)) : NULL;
	struct oti_mr *mr = NULL;
	uint32_t refs = 0, posted = 0;

	if (in_old && c->t->mr_reg(c->ep, mem, (size_t)c->nrx * size, OTI_ACCESS_LOCAL_WRITE,
				   &mr) == 0) {
		/* Old: what the transport holds, and what holds unread data.
		 * The rest (consumed, waiting beyond SO_RCVBUF, the message
		 * being handled now) is new already. */
		for (uint32_t i = 0; i < c->rxq_count; i++) {
			const struct sdp_rx_seg *seg = rxq_at(c, i);

			if (seg->slot < c->nrx)
				in_old[seg->slot] = true;
		}
		for (uint32_t i = 0; i < c->nrx; i++) {
			posted += c->rx_posted[i];
			in_old[i] = in_old[i] || c->rx_posted[i];
			refs += in_old[i];
		}
		c->rx_old_mem = c->rx_mem;
		c->rx_old_mr = c->rx_mr;
		c->rx_old_size = c->rx_size;
		c->rx_old_len = c->rx_mem_len;
		c->rx_in_old = in_old;
		c->rx_old_posted = posted;
		c->rx_old_refs = refs;
		c->rx_mem = mem;
		c->rx_mr = mr;
		c->rx_size = size;
		c->rx_mem_len = len;
		c->rx_max = rx_max_for(s, c);	/* a later SO_RCVBUF: fewer, larger */
		c->buf_bytes += (uint64_t)c->nrx * size;
		SDP_STAT_INC(buf_bytes, (uint64_t)c->nrx * size);
		SDP_STAT_INC(buf_grows, 1);
		sdp_dbg(LOGSYS, "sd %d: receive buffers grow from %u to %u bytes", s->sd,
			c->rx_old_size, size);
		if (!refs)
			rx_old_free(c);
		if (posted)
			return;	/* answered once the last old buffer is consumed */
	} else if (size) {
		sdp_dbg(LOGSYS, "sd %d: receive buffers stay at %u bytes: no memory for %u",
			s->sd, c->rx_size, size);
		ring_put(mem, len, false);
		free(in_old);
	}
	if (conn_fits(c, SDP_U32H_LEN))
		c->ctrl_pending |= SDP_CTRL_CH_RCV_BUF_ACK;
}

/* An ask that had to wait (conn_grow_rx()), once it can be taken. */
static void rx_grow_deferred(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	uint32_t want = c->rx_want;

	if (!want || c->rx_old_mem || (c->ctrl_pending & SDP_CTRL_CH_RCV_BUF_ACK))
		return;
	c->rx_want = 0;
	conn_grow_rx(s, want);
}

/* A stream is waiting on the buffer size: ask the peer for larger ones. */
static void tx_maybe_ask(const struct sdp_sock *s, struct sdp_conn *c)
{
	uint32_t cap = (uint32_t)tun_int(TUN_buf_size);

	if (c->tx_full < SDP_GROW_FULL || c->tx_ask || c->tx_next_size || c->grow_refused ||
	    c->tx_fixed || c->tx_size >= cap || c->disconn_sent || !conn_fits(c, SDP_U32H_LEN))
		return;
	uint64_t want = (uint64_t)c->tx_size * SDP_GROW_STEP;

	c->tx_ask = want < cap ? (uint32_t)want : cap;
	c->ctrl_pending |= SDP_CTRL_CH_RCV_BUF;
	sdp_dbg(LOGSYS, "sd %d: asks the peer for buffers of %u bytes", s->sd, c->tx_ask);
}

/* The drained send ring (nothing in [tx_done, tx_filled)) becomes one of
 * size-byte buffers: 0, or -ENOMEM and the ring is as it was. */
static int tx_swap(struct sdp_sock *s, uint32_t size)
{
	struct sdp_conn *c = s->conn;
	size_t len = ring_len(c->ntx, size);
	uint8_t *mem = ring_get(len);
	struct oti_mr *mr = NULL;

	if (!mem || c->t->mr_reg(c->ep, mem, (size_t)c->ntx * size, 0, &mr)) {
		ring_put(mem, len, false);
		return -ENOMEM;
	}
	if (c->tx_mr)
		c->t->mr_dereg(c->tx_mr);
	ring_put(c->tx_mem, c->tx_mem_len, false);
	c->buf_bytes += (uint64_t)c->ntx * size - (uint64_t)c->ntx * c->tx_size;
	SDP_STAT_INC(buf_bytes, (uint64_t)c->ntx * size - (uint64_t)c->ntx * c->tx_size);
	sdp_dbg(LOGSYS, "sd %d: send buffers from %u to %u bytes", s->sd, c->tx_size, size);
	c->tx_mem = mem;
	c->tx_mr = mr;
	c->tx_mem_len = len;
	c->tx_size = size;
	return 0;
}

/* Once the ring has drained, it takes the peer's new size. */
void conn_tx_regrow(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c->tx_next_size || c->tx_filled != c->tx_done)
		return;
	uint32_t size = c->tx_next_size;

	c->tx_next_size = 0;
	if (tx_swap(s, size)) {
		sdp_dbg(LOGSYS, "sd %d: send buffers stay at %u bytes: no memory for %u", s->sd,
			c->tx_size, size);
		c->grow_refused = true;
	}
}

/*
 * On a transport whose registrations pin (no mem_idle), the send ring a
 * stream grew goes back to the start size once the connection has been
 * idle for buf_idle_ms with the ring drained and no backlog (the idle
 * sweep, below), and a later stream asks again.  The peer's receive
 * buffers stay as they grew (a posted receive cannot be taken back), so
 * it answers that ask at once with their size, and the ring is back to
 * full size at the first swap.
 */
static bool tx_shrinkable(const struct sdp_conn *c)
{
	return !c->t->mem_idle && !c->tx_fixed && c->tx_size > rx_start_size(c);
}

static void conn_tx_shrink(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c->tx_mem || !tx_shrinkable(c) || c->tx_filled != c->tx_done || c->bl_head ||
	    c->tx_ask || c->tx_next_size)
		return;
	if (tx_swap(s, rx_start_size(c)) == 0) {
		c->grow_refused = false;
		c->tx_full = 0;
	}
}

void conn_rcvbuf_acked(struct sdp_sock *s, uint32_t size)
{
	struct sdp_conn *c = s->conn;
	uint32_t cap = (uint32_t)tun_int(TUN_buf_size);

	if (!c->tx_ask)
		return;	/* unasked: it changes nothing */
	c->tx_ask = 0;
	c->tx_full = 0;
	sdp_dbg(LOGSYS, "sd %d: the peer's buffers are %u bytes", s->sd, size);
	if (size > cap)
		size = cap;
	if (size <= c->tx_size) {
		c->grow_refused = true;
		return;
	}
	c->tx_next_size = size;
	conn_tx_regrow(s);
}

/* --- unread data copied out -----------------------------------------------------
 * A TCP receiver takes about 64 KiB that the application has not read yet
 * before its window closes, and more as autotuning grows it.  SDP's is
 * its posted buffers: with the small ones a pinning transport starts
 * with (above), a receiver that does not read at once would stop the
 * sender after a few KiB, and a program that sends a request of some
 * tens of KiB and only then reads its peer's (or sendfile()s a file into
 * a peer that reads later) would see it stall where TCP does not.
 *
 * So, while its buffers are still small, a connection whose posted
 * buffers have fallen to half copies the unread bytes of the oldest
 * filled buffers to the heap and posts those buffers again: up to
 * SDP_RX_HEAP_MAX bytes, the window TCP starts with.  The copy keeps its
 * place in the receive queue (an SDP_SLOT_HEAP segment; consecutive
 * ones are merged, so there are at most SDP_RX_HEAP_SEGS), so the
 * stream's order, the urgent mark and MSG_PEEK are those of the buffers.
 * A reader that keeps up never triggers it; one that lags pays one more
 * copy of what it reads late, and the sender, still waiting, asks for
 * larger buffers as before.  Not on a connection whose buffers are at
 * buf_size (the software transports, or grown), nor past a set
 * SO_RCVBUF's bytes unread.
 */
/* Segment i of the receive queue taken out (zcopy.c's too). */
void rxq_remove(struct sdp_conn *c, uint32_t i)
{
	for (; i + 1 < c->rxq_count; i++)
		*rxq_at(c, i) = *rxq_at(c, i + 1);
	c->rxq_count--;
}

void conn_rx_free_heap(struct sdp_conn *c)
{
	for (uint32_t i = 0; i < c->rxq_count; i++) {
		struct sdp_rx_seg *seg = rxq_at(c, i);

		if (seg->slot == SDP_SLOT_HEAP) {
			free(seg->heap);
			seg->heap = NULL;
		}
	}
}

/* The heap segments in rxq and their unread bytes (at most
 * SDP_RX_HEAP_SEGS of them, in a queue of nrx + SDP_RXQ_EXTRA). */
static uint32_t rx_heap_bytes(const struct sdp_conn *c, uint32_t *segs)
{
	uint32_t bytes = 0;

	*segs = 0;
	for (uint32_t i = 0; i < c->rxq_count; i++) {
		const struct sdp_rx_seg *seg = rxq_at(c, i);

		if (seg->slot == SDP_SLOT_HEAP) {
			bytes += seg->len;
			(*segs)++;
		}
	}
	return bytes;
}

/* seg's bytes appended to prev, a heap segment before it: false if there
 * is no memory. */
static bool rx_heap_append(struct sdp_rx_seg *prev, const uint8_t *src, uint32_t len)
{
	if (prev->off >= prev->len) {
		/* Mostly read: its rest to the front, so that it stays small. */
		memmove(prev->heap, prev->heap + prev->off, prev->len);
		prev->off = 0;
	}
	uint8_t *m = realloc(prev->heap, (size_t)prev->off + prev->len + len);

	if (!m)
		return false;
	memcpy(m + prev->off + prev->len, src, len);
	prev->heap = m;
	prev->len += len;
	return true;
}

static void rx_spill(struct sdp_sock *s, uint32_t heap, uint32_t segs)
{
	struct sdp_conn *c = s->conn;

	for (uint32_t i = 0; i < c->rxq_count; i++) {
		struct sdp_rx_seg *seg = rxq_at(c, i);
		uint32_t slot = seg->slot;

		if (slot >= c->nrx)
			continue;	/* the peer's SrcAvail, staged or heap bytes */
		if (heap + seg->len > SDP_RX_HEAP_MAX)
			break;
		const uint8_t *src = rx_buf(c, slot) + seg->off;
		struct sdp_rx_seg *prev = i ? rxq_at(c, i - 1) : NULL;

		if (prev && prev->slot == SDP_SLOT_HEAP && !prev->urg) {
			if (!rx_heap_append(prev, src, seg->len))
				break;
			prev->urg = seg->urg;	/* the mark, if it was here */
			heap += seg->len;
			rxq_remove(c, i);
			i--;
		} else {
			if (segs >= SDP_RX_HEAP_SEGS)
				break;
			uint8_t *m = malloc(seg->len ? seg->len : 1);

			if (!m)
				break;
			memcpy(m, src, seg->len);
			seg->slot = SDP_SLOT_HEAP;
			seg->heap = m;
			seg->off = 0;
			segs++;
			heap += seg->len;
		}
		SDP_STAT_INC(rx_copied_out, 1);
		if (conn_repost(s, slot))
			break;
	}
}

void conn_rx_spill_maybe(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	uint32_t heap, segs;

	if (c->cr.posted > c->rx_max / 2 ||
	    (s->rcvbuf_set && c->rx_bytes >= (uint64_t)s->rcvbuf) ||
	    c->rx_size >= (uint32_t)tun_int(TUN_buf_size) || c->transport_down || c->post_failed)
		return;
	heap = rx_heap_bytes(c, &segs);
	if (heap < SDP_RX_HEAP_MAX)
		rx_spill(s, heap, segs);
}

/* --- idle buffers -------------------------------------------------------------
 * Like TCP's socket memory, a connection's buffers cost what it uses: on a
 * transport whose registrations pin nothing (tcp-fallback) the rings are
 * reserved whole but a page is resident only once data went through it,
 * and when the data has stopped for buf_idle_ms the free buffers' pages
 * go back (oti mem_idle): receive buffers the transport holds empty, send
 * buffers outside [tx_done, tx_filled).  Data that moves marks the
 * connection (conn_moved()); the progress thread's idle sweep
 * (progress_idle_watch()) looks at it now and then until it is quiet.
 */

void conn_moved(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	c->moved = true;
	if (c->idle_watched || (!c->t->mem_idle && !tx_shrinkable(c)) || s->is_child ||
	    !tun_int(TUN_buf_idle_ms))
		return;
	c->idle_watched = true;
	c->quiet_since_ns = 0;
	progress_idle_watch(s);
}

/* Give back the pages of free buffers [first, end) of a ring of bufs
 * (all but the transport's in-flight frame, which mem_idle keeps). */
static void give_back_run(struct sdp_conn *c, uint8_t *mem, uint32_t size, uint32_t first,
			  uint32_t end)
{
	if (end > first)
		c->t->mem_idle(c->ep, mem + (size_t)first * size, (size_t)(end - first) * size);
}

static void conn_give_back(struct sdp_conn *c)
{
	uint32_t run = 0;

	if (!c->t->mem_idle)
		return;

	/* Growing: each posted buffer is in one ring or the other. */
	for (uint32_t i = 0; c->rx_old_mem && i < c->nrx; i++) {
		if (c->rx_posted[i])
			c->t->mem_idle(c->ep, rx_buf(c, i),
				       c->rx_in_old[i] ? c->rx_old_size : c->rx_size);
	}
	for (uint32_t i = 0; !c->rx_old_mem && i <= c->nrx; i++) {
		if (i < c->nrx && c->rx_posted[i])
			continue;
		give_back_run(c, c->rx_mem, c->rx_size, run, i);
		run = i + 1;
	}
	if (!c->tx_mem)
		return;
	/* [tx_done, tx_filled) holds data, counted in a ring of ntx. */
	uint32_t busy = c->tx_filled - c->tx_done;
	uint32_t from = c->tx_filled % c->ntx, to = c->tx_done % c->ntx;

	if (busy == 0) {
		give_back_run(c, c->tx_mem, c->tx_size, 0, c->ntx);
	} else if (busy < c->ntx && from < to) {
		give_back_run(c, c->tx_mem, c->tx_size, from, to);
	} else if (busy < c->ntx) {
		give_back_run(c, c->tx_mem, c->tx_size, from, c->ntx);
		give_back_run(c, c->tx_mem, c->tx_size, 0, to);
	}
}

/* struct sdp_upcalls.idle: true while s should be looked at again. */
bool conn_idle_sweep(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	uint64_t now = sdp_now_ns();

	if (!c || !c->ep || c->transport_down || s->state != SDP_S_ESTABLISHED) {
		if (c)
			c->idle_watched = false;
		return false;
	}
	if (c->moved || !c->quiet_since_ns) {
		c->moved = false;
		c->quiet_since_ns = now;
		return true;
	}
	if (now - c->quiet_since_ns < (uint64_t)tun_int(TUN_buf_idle_ms) * 1000000ull)
		return true;
	conn_give_back(c);
	conn_tx_shrink(s);
	c->idle_watched = false;
	return false;
}

/*
 * The transport will report nothing more on this ep: take its fd out of
 * the progress thread's set (an fd that is never armed again would keep
 * it awake).  Children are in the set on their listener's behalf.
 */
void conn_leave_progress(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (c->in_progress_set || c->prog_deferred) {
		if (c->in_progress_set)
			progress_del(s->parent ? s->parent : s, c->ep_fd);
		c->in_progress_set = false;
		c->prog_deferred = false;
		/* Out of the watches' sets too, while the fd is still
		 * this ep's (it is closed next). */
		progress_watch_sync(s);
	}
}

/*
 * The transport's fd is dead (oti.h ep_fd_dead): it leaves every epoll set
 * the engine put it in, by its number while the number still names it,
 * and only then does a quiet file take the number (ep_quiet).  A
 * registration of the socket that a forked child's copy keeps alive
 * would otherwise stay, firing for ever with a pointer to a socket that
 * is freed, and could no longer be removed by its number.  s's lock held.
 */
void conn_quiet_dead_fd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->ep || !c->t->ep_fd_dead || !c->t->ep_fd_dead(c->ep))
		return;
	conn_leave_progress(s);
	/* And out of a watch's set whatever the flags say (a failed
	 * conn_undefer() left them both down). */
	progress_watch_sync(s);
	c->t->ep_quiet(c->ep);
}

/* --- teardown ------------------------------------------------------------- */

void conn_kill_ep(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || !c->ep)
		return;
	conn_leave_progress(s);
	c->t->ep_close(c->ep);
	c->ep = NULL;
	c->ep_fd = -1;
	c->transport_down = true;
	c->disconnected = true;
	/* No DISCONNECTED will come for a closed ep to give the verdict
	 * (conn_post_failed() leaves it to that): a blocked call would
	 * wait for ever. */
	conn_lost(s, false);
	sock_changed(s, false);
}

void conn_transport_down(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || c->transport_down)
		return;
	c->transport_down = true;
	if (c->ep)
		c->t->disconnect(c->ep);
}

void conn_set_reset(struct sdp_sock *s, int err)
{
	if (s->state == SDP_S_CLOSED && s->reset)
		return;
	if (s->state == SDP_S_ESTABLISHED)
		SDP_STAT_INC(resets, 1);
	s->reset = true;
	sdp_dbg(LOGSYS, "sd %d: connection reset (%s)%s", s->sd, strerror(err),
		s->app_closed ? ", after close" : "");
	if (!s->app_closed)
		s->so_error = err;
	s->state = SDP_S_CLOSED;
	/* Data not yet sent is lost, as with a TCP reset. */
	if (s->conn) {
		s->conn->tx_filled = s->conn->tx_posted;
		s->conn->ctrl_pending = 0;
	}
	sock_changed(s, true);
}

void conn_lost(struct sdp_sock *s, bool error)
{
	struct sdp_conn *c = s->conn;

	if (s->state != SDP_S_ESTABLISHED)
		return;
	/* A transport error after the peer's DisConn, when the peer also
	 * has every message of ours that mattered, loses nothing: the peer
	 * closed, and our credit updates reached its closed socket (its
	 * kernel answers them with a reset).  The stream ends as it would
	 * have, with no error for the program. */
	if (!c->disconn_rcvd ||
	    (error && (!sdp_peer_has_all(&c->cr) || conn_tx_unposted(c)))) {
		conn_set_reset(s, ECONNRESET);
		return;
	}
	s->state = SDP_S_CLOSED;
	c->tx_filled = c->tx_posted;
	sock_changed(s, true);
}

void conn_abort(struct sdp_sock *s, int err)
{
	conn_set_reset(s, err);
	conn_transport_down(s);
}

/*
 * A transport post failed.  Our data lost is a reset.  A credit update or
 * a receive that cannot be posted usually means the peer's transport went
 * away, maybe in its orderly close whose DisConn is still in our completion
 * queue: stop posting and let the DISCONNECTED event, which comes after
 * those completions, tell an orderly close from a reset (with a deadline
 * in case it never comes).  The application never sees the transport's
 * own errno.
 */
void conn_post_failed(struct sdp_sock *s, int ret, bool data)
{
	struct sdp_conn *c = s->conn;

	sdp_dbg(LOGSYS, "sd %d: transport post failed: %d", s->sd, ret);
	if (data) {
		conn_abort(s, ECONNRESET);
		return;
	}
	if (c->post_failed)
		return;
	c->post_failed = true;
	c->ctrl_pending = 0;
	c->deadline_ns = sdp_now_ns() + 1000000000ull;
	progress_watch(s);
}

void conn_protocol_error(struct sdp_sock *s, const char *why)
{
	SDP_STAT_INC(protocol_errors, 1);
	sdp_warn(LOGSYS, "sd %d: protocol error from peer: %s; aborting the connection",
		 s->sd, why);
	conn_abort(s, ECONNRESET);
}

bool conn_finished(const struct sdp_sock *s)
{
	return !s->conn || s->conn->transport_down || s->state != SDP_S_ESTABLISHED;
}

/* --- sending -------------------------------------------------------------- */

static void conn_fill_bsdh(struct sdp_conn *c, void *buf, uint8_t mid, uint8_t flags,
			   uint32_t len)
{
	struct sdp_bsdh h = {
		.mid = mid,
		.flags = flags,
		.bufs = (uint16_t)(c->cr.posted > 0xffff ? 0xffff : c->cr.posted),
		.len = len,
		.mseq_ack = c->cr.last_rx_mseq,
	};

	h.mseq = sdp_credits_on_send(&c->cr, mid == SDP_MID_DATA && len == SDP_BSDH_LEN);
	sdp_bsdh_encode(buf, &h);
}

static int conn_post_ctrl_flags(struct sdp_sock *s, uint8_t mid, uint8_t flags, const void *ext,
				size_t extlen)
{
	struct sdp_conn *c = s->conn;
	uint32_t slot = c->ctrl_posted % SDP_CTRL_SLOTS;
	uint8_t *buf = c->ctrl_mem + slot * SDP_CTRL_SLOT_SIZE;
	struct oti_sge sge = { .addr = buf, .len = (uint32_t)(SDP_BSDH_LEN + extlen), .mr = c->ctrl_mr };
	int ret;

	if (!conn_fits(c, extlen)) {
		/* Our bug: the peer's buffer would be overrun. */
		sdp_err(LOGSYS, "sd %d: a %s of %u bytes does not fit the peer's %u-byte buffers",
			s->sd, sdp_mid_name(mid), sge.len, c->tx_size);
		conn_abort(s, ECONNRESET);
		return -EMSGSIZE;
	}
	if (ext)
		memcpy(buf + SDP_BSDH_LEN, ext, extlen);
	conn_fill_bsdh(c, buf, mid, flags, sge.len);
	ret = c->t->post_send(c->ep, &sge, SDP_CTX_CTRL | slot, OTI_SEND_INLINE);
	if (ret) {
		/* A SrcAvail and an RdmaWrCompl carry stream bytes: losing
		 * one is a reset. */
		conn_post_failed(s, ret, mid == SDP_MID_SRC_AVAIL || mid == SDP_MID_RDMA_WR_COMPL);
		return ret;
	}
	c->ctrl_posted++;
	SDP_STAT_INC(msgs_sent, 1);
	return 0;
}

int conn_post_ctrl(struct sdp_sock *s, uint8_t mid, const void *ext, size_t extlen)
{
	return conn_post_ctrl_flags(s, mid, 0, ext, extlen);
}

uint32_t conn_piggyback_max(const struct sdp_conn *c)
{
	return conn_fits(c, SDP_SINKAH_LEN) ? c->tx_size - SDP_BSDH_LEN - SDP_SINKAH_LEN : 0;
}

int conn_post_sink_avail(struct sdp_sock *s, const struct sdp_sinkah *a)
{
	struct sdp_conn *c = s->conn;
	uint8_t ext[SDP_SINKAH_LEN];

	sdp_sinkah_encode(ext, a);
	if (c->trans_held) {
		uint32_t slot = (c->tx_filled - 1) % c->ntx;

		c->trans_held = false;
		/* OOB_PRES is for Data only. */
		if (c->tx_posted + 1 == c->tx_filled && c->tx_len[slot] <= conn_piggyback_max(c) &&
		    !c->tx_urg[slot] && sdp_can_send_data(&c->cr)) {
			/* The held request becomes the SinkAvail's payload, in
			 * place: BSDH, SinkAH, request. */
			uint8_t *buf = tx_buf(c, slot);
			struct oti_sge sge = {
				.addr = buf,
				.len = SDP_BSDH_LEN + SDP_SINKAH_LEN + c->tx_len[slot],
				.mr = c->tx_mr,
			};
			int ret;

			memmove(buf + SDP_BSDH_LEN + SDP_SINKAH_LEN, buf + SDP_BSDH_LEN,
				c->tx_len[slot]);
			memcpy(buf + SDP_BSDH_LEN, ext, sizeof(ext));
			conn_fill_bsdh(c, buf, SDP_MID_SINK_AVAIL, 0, sge.len);
			ret = c->t->post_send(c->ep, &sge, SDP_CTX_TX | slot, 0);
			if (ret) {
				conn_post_failed(s, ret, true);
				return ret;
			}
			c->tx_posted++;
			c->nond_sent++;
			c->psnk.active = false;	/* stream bytes: see write_zcopy.c */
			SDP_STAT_INC(msgs_sent, 1);
			SDP_STAT_INC(bytes_sent, c->tx_len[slot]);
			SDP_STAT_INC(trans_piggybacks, 1);
			return 0;
		}
		/* It does not fit: it goes first, on its own. */
		mode_note_trans_miss(s);
		conn_flush(s);
		if (c->post_failed || !ctrl_slot_free(c) || !sdp_can_send_ctrl(&c->cr))
			return -ENOBUFS;
	}
	return conn_post_ctrl(s, SDP_MID_SINK_AVAIL, ext, sizeof(ext));
}

bool ctrl_slot_free(const struct sdp_conn *c)
{
	return c->ctrl_posted - c->ctrl_done < SDP_CTRL_SLOTS;
}

/* Bytes a send may add under a set SO_SNDBUF: what is in the send
 * buffers, unsent or not yet completed, stays within it. */
static size_t conn_sndbuf_room(const struct sdp_sock *s)
{
	uint64_t queued = s->conn->tx_queued_bytes;

	if (!s->sndbuf_set)
		return SIZE_MAX;
	return queued < (uint64_t)s->sndbuf ? (size_t)((uint64_t)s->sndbuf - queued) : 0;
}

/* Too little SO_SNDBUF room for POLLOUT: as sk_stream_is_writeable(),
 * there must be room for half of what is queued, so that a poller wakes
 * to a useful amount of it. */
static bool conn_sndbuf_low(const struct sdp_sock *s)
{
	if (!s->sndbuf_set)
		return false;
	size_t room = conn_sndbuf_room(s);

	return !room || room < s->conn->tx_queued_bytes / 2;
}

/*
 * Hold a partly filled last buffer back while the application said more
 * is coming (MSG_MORE / TCP_CORK), or, as Linux's autocorking does, while
 * an earlier send is still in flight: its completion flushes the tail, so
 * a stream of small writes becomes few full messages (each costs a peer
 * buffer and a credit) and a lone request still leaves at once.
 */
static bool conn_hold_tail(const struct sdp_sock *s, const struct sdp_conn *c)
{
	uint32_t slot = (c->tx_filled - 1) % c->ntx;

	/* A Transaction request waits for our recv()'s SinkAvail. */
	if (c->trans_held)
		return true;
	/* Urgent data goes at once, as tcp_push() marks it; so does what
	 * conn_push() pushed. */
	if (c->tx_len[slot] >= tx_payload_max(c) || c->tx_urg[slot] || c->tx_push)
		return false;
	/* SO_SNDBUF is full: no more is coming until this goes, so it goes
	 * (tcp_sendmsg() pushes a corked tail before it waits for room). */
	if (conn_sndbuf_low(s))
		return false;
	return s->cork || c->tx_posted != c->tx_done;
}

/* Post data buffers while credits last.  Nothing of the stream may
 * overtake our SrcAvail's bytes: data waits until the sink is done with
 * it.  1 if any went, 0 if none, -1 if a post failed. */
static int flush_data(struct sdp_sock *s, struct sdp_conn *c)
{
	int sent = 0;

	bl_drain(c);
	while (c->tx_posted != c->tx_filled && !c->tx_sa.active) {
		if (c->tx_posted + 1 == c->tx_filled && conn_hold_tail(s, c))
			break;
		if (!sdp_can_send_data(&c->cr)) {
			SDP_STAT_INC(credit_stalls, 1);
			break;
		}
		uint32_t slot = c->tx_posted % c->ntx;
		uint8_t *buf = tx_buf(c, slot);
		struct oti_sge sge = {
			.addr = buf, .len = SDP_BSDH_LEN + c->tx_len[slot], .mr = c->tx_mr,
		};
		conn_fill_bsdh(c, buf, SDP_MID_DATA,
			       c->tx_urg[slot] ? SDP_FLAG_OOB_PRES | SDP_FLAG_OOB_PEND : 0, sge.len);
		int ret = c->t->post_send(c->ep, &sge, SDP_CTX_TX | slot,
					  sge.len <= c->caps.max_inline ? OTI_SEND_INLINE : 0);
		if (ret) {
			conn_post_failed(s, ret, true);
			return -1;
		}
		c->tx_posted++;
		c->nond_sent++;
		/* Stream bytes by Data: the peer's advert is dropped unused
		 * (write_zcopy.c). */
		c->psnk.active = false;
		SDP_STAT_INC(msgs_sent, 1);
		SDP_STAT_INC(bytes_sent, c->tx_len[slot]);
		sent = 1;
	}
	if (c->tx_posted == c->tx_filled && !c->bl_head)
		c->tx_push = false;
	return sent;
}

/* The pending control message `bit` (SDP_CTRL_*), if a slot and a
 * credit allow: 1 posted (the bit cleared), 0 not now, -1 the post
 * failed. */
static int flush_pending(struct sdp_sock *s, unsigned bit, uint8_t mid, uint8_t flags,
			 const void *ext, size_t extlen)
{
	struct sdp_conn *c = s->conn;

	if (!(c->ctrl_pending & bit) || !ctrl_slot_free(c) || !sdp_can_send_ctrl(&c->cr))
		return 0;
	if (conn_post_ctrl_flags(s, mid, flags, ext, extlen))
		return -1;
	c->ctrl_pending &= ~bit;
	return 1;
}

/* Control messages, in the order of the rules that bind them: 1 if any
 * went, 0 if none, -1 if a post failed. */
static int flush_ctrl(struct sdp_sock *s, struct sdp_conn *c)
{
	uint8_t u32[SDP_U32H_LEN], mch[SDP_MCH_LEN];
	int sent = 0, r;

	/* What we read of the peer's SrcAvail is reported before a SendSM
	 * that ends it. */
	sdp_u32h_encode(u32, c->rdcompl_bytes);
	r = flush_pending(s, SDP_CTRL_RDMA_RD_COMPL, SDP_MID_RDMA_RD_COMPL,
			  c->req_pipe ? SDP_FLAG_REQ_PIPE : 0, u32, sizeof(u32));
	if (r < 0)
		return r;
	if (r) {
		c->req_pipe = false;
		c->rdcompl_bytes = 0;
		sent = 1;
	}
	r = flush_pending(s, SDP_CTRL_SEND_SM, SDP_MID_SEND_SM, 0, NULL, 0);
	if (r < 0)
		return r;
	sent |= r;
	r = flush_pending(s, SDP_CTRL_SRC_AVAIL_CANCEL, SDP_MID_SRC_AVAIL_CANCEL, 0, NULL, 0);
	if (r < 0)
		return r;
	if (r) {
		c->tx_sa.cancel_sent = true;
		SDP_STAT_INC(zcopy_cancels, 1);
		sent = 1;
	}
	while (c->psnk_cancels && ctrl_slot_free(c) && sdp_can_send_ctrl(&c->cr)) {
		if (conn_post_ctrl(s, SDP_MID_SINK_CANCEL_ACK, NULL, 0))
			return -1;
		c->psnk_cancels--;
		sent = 1;
	}
	r = flush_pending(s, SDP_CTRL_SINK_AVAIL_CANCEL, SDP_MID_SINK_AVAIL_CANCEL, 0, NULL, 0);
	if (r < 0)
		return r;
	if (r) {
		c->snk.cancel_sent = true;
		c->snk_acks_due++;
		SDP_STAT_INC(zcopy_sink_cancels, 1);
		sent = 1;
	}
	if (mode_change_may_go(c)) {
		uint32_t mseq = c->cr.next_mseq;

		sdp_mch_encode(mch, 0, (enum sdp_mode)c->mch_next);
		r = flush_pending(s, SDP_CTRL_MODE_CHANGE, SDP_MID_MODE_CHANGE, 0, mch, sizeof(mch));
		if (r < 0)
			return r;
		if (r) {
			mode_change_sent(s, mseq);
			SDP_STAT_INC(mode_changes_sent, 1);
			sent = 1;
		}
	}
	sdp_u32h_encode(u32, c->tx_ask);
	r = flush_pending(s, SDP_CTRL_CH_RCV_BUF, SDP_MID_CH_RCV_BUF, 0, u32, sizeof(u32));
	if (r < 0)
		return r;
	sent |= r;
	/* Due once no smaller buffer of ours is posted (conn_grow_rx()). */
	sdp_u32h_encode(u32, c->rx_size);
	r = flush_pending(s, SDP_CTRL_CH_RCV_BUF_ACK, SDP_MID_CH_RCV_BUF_ACK, 0, u32, sizeof(u32));
	if (r < 0)
		return r;
	if (r)
		rx_grow_deferred(s);	/* its answer is queued: it goes next time */
	sent |= r;
	/* DisConn only once all data is out. */
	if (!conn_tx_unposted(c) && !c->tx_sa.active) {
		r = flush_pending(s, SDP_CTRL_DISCONN, SDP_MID_DISCONN, 0, NULL, 0);
		if (r < 0)
			return r;
		if (r) {
			c->disconn_sent = true;
			c->psnk.active = false;	/* the sink knows: no bytes after DisConn */
			c->disconn_last = c->disconn_rcvd;
			sent = 1;
			sdp_dbg(LOGSYS, "sd %d: DisConn sent", s->sd);
		}
	}
	return sent;
}

/*
 * Post whatever may go now: data buffers while credits last, then control
 * messages (DisConn only once all data is out), then a credit update if
 * the peer is running short of buffers it knows about.
 */
void conn_flush(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (s->state != SDP_S_ESTABLISHED || c->transport_down || c->post_failed ||
	    c->await_first_rx)
		return;
	int data = flush_data(s, c);

	if (data < 0)
		return;
	int ctrl = flush_ctrl(s, c);

	if (ctrl < 0)
		return;
	bool sent = data || ctrl;

	/* Credit updates go on after our DisConn while the peer may still
	 * send.  After its DisConn it sends no data, but while our stream
	 * lasts it still answers it -- RdmaRdCompl for each read of our
	 * SrcAvail, SendSM, SinkAvail -- and only our updates give it the
	 * credits for that; once both DisConns are out nothing is owed, and
	 * ours stays our last message (the transport's closer waits for it).
	 * While our SrcAvail is out, the last credits are kept for its
	 * SrcAvailCancel.  The peer's DisConn is acknowledged at once
	 * (cr.ack_owed), for a close that lingers on it. */
	bool update = sdp_update_needed(&c->cr) ||
		      (c->cr.ack_owed && sdp_can_send_update(&c->cr));

	if (!sent && !(c->disconn_rcvd && c->disconn_sent) && update && ctrl_slot_free(c) &&
	    !(c->tx_sa.active && !c->tx_sa.cancel_sent && sdp_tx_credits(&c->cr) <= 2)) {
		if (conn_post_ctrl(s, SDP_MID_DATA, NULL, 0) == 0) {
			SDP_STAT_INC(credit_updates_sent, 1);
			sent = true;
		}
	}
	if (sent)
		progress_posted(s);
}

/*
 * Everything queued goes now, as credits allow.  The mark stays until it
 * has all been posted, so the flush that a completion or a credit update
 * makes later posts it too: a tail this call could not post (an earlier
 * send was still in flight) is not left to wait for an uncork that a
 * program blocked in send() cannot give.
 */
void conn_push(struct sdp_sock *s)
{
	if (!s->conn)
		return;
	if (s->conn->trans_held) {
		/* The request goes alone: the program is not waiting for
		 * the reply in recv() (write_zcopy.c). */
		s->conn->trans_held = false;
		mode_note_trans_miss(s);
	}
	s->conn->tx_push = conn_tx_unposted(s->conn);
	conn_flush(s);
}

void conn_end_hold(struct sdp_sock *s)
{
	if (s->conn && s->conn->trans_held)
		conn_push(s);
}

/* The last filled buffer still takes bytes: not posted, not full, and
 * not ended by an urgent byte (which must stay its message's last). */
static bool tail_open(const struct sdp_conn *c)
{
	uint32_t slot = (c->tx_filled - 1) % c->ntx;

	return c->tx_filled != c->tx_posted && c->tx_len[slot] < tx_payload_max(c) &&
	       !c->tx_urg[slot];
}

/* The buffer the next bytes go into: the open tail, or a new one while
 * the ring has room and does not wait to grow.  false: none. */
static bool tx_next_slot(struct sdp_conn *c, uint32_t *slot)
{
	if (tail_open(c)) {
		*slot = (c->tx_filled - 1) % c->ntx;
	} else if (c->tx_filled - c->tx_done < c->ntx && !c->tx_next_size) {
		*slot = c->tx_filled % c->ntx;
		c->tx_len[*slot] = 0;
		c->tx_urg[*slot] = false;
		c->tx_filled++;
	} else {
		return false;
	}
	return true;
}

bool conn_writable(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	if (!c || !c->tx_len || conn_sndbuf_low(s))
		return false;
	if (!c->bl_head && c->tx_filled - c->tx_done < c->ntx && !c->tx_next_size)
		return true;
	if (!c->bl_head && tail_open(c))
		return true;
	/* The ring is full, or waits to drain before it grows: the backlog
	 * takes more once at most half of SO_SNDBUF is queued (as
	 * sk_stream_is_writeable()). */
	return c->tx_queued_bytes <= (uint64_t)s->sndbuf / 2;
}

/*
 * Copy as much of iov (after skipping `skip` bytes) as the send buffers
 * take, then flush.  Returns bytes taken (possibly 0) or a negative errno.
 */
ssize_t conn_send(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip, size_t limit)
{
	struct sdp_conn *c = s->conn;
	size_t taken = 0;
	size_t off = skip;
	int i = iov_seek(iov, iovcnt, &off);
	size_t sndbuf_room = conn_sndbuf_room(s);

	if (limit > sndbuf_room)
		limit = sndbuf_room;
	while (i < iovcnt && taken < limit && !c->bl_head) {
		uint32_t slot;

		if (!tx_next_slot(c, &slot))
			break;
		uint32_t room = tx_payload_max(c) - c->tx_len[slot];
		size_t n = iov[i].iov_len - off;

		if (n > room)
			n = room;
		if (n > limit - taken)
			n = limit - taken;
		memcpy(tx_buf(c, slot) + SDP_BSDH_LEN + c->tx_len[slot],
		       (const uint8_t *)iov[i].iov_base + off, n);
		c->tx_len[slot] += (uint32_t)n;
		c->tx_queued_bytes += n;
		taken += n;
		off += n;
		if (off == iov[i].iov_len) {
			off = 0;
			i++;
		}
	}
	if (i < iovcnt && taken < limit) {
		/* The ring is full: a stream is waiting on the buffers. */
		if (!c->tx_next_size)
			c->tx_full++;
		taken += bl_append(s, c, iov + i, iovcnt - i, off, limit - taken);
	}
	/* sdp_sendv() gives MSG_OOB for the call's last byte alone: the
	 * backlog's last, if there is one. */
	if ((flags & MSG_OOB) && taken && c->bl_tail)
		c->bl_tail->urg = true;
	else if ((flags & MSG_OOB) && taken)
		c->tx_urg[(c->tx_filled - 1) % c->ntx] = true;
	tx_maybe_ask(s, c);
	bool more = flags & MSG_MORE;
	int saved_cork = s->cork;

	if (more)
		s->cork = 1;
	conn_flush(s);
	s->cork = saved_cork;
	return (ssize_t)taken;
}

void conn_shutdown_write(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;

	if (!c || c->disconn_sent || (c->ctrl_pending & SDP_CTRL_DISCONN))
		return;
	c->ctrl_pending |= SDP_CTRL_DISCONN;
	/* A corked tail must go out before the DisConn. */
	conn_push(s);
}

/* --- receiving ------------------------------------------------------------ */

/*
 * Copy queued data into iov (after `skip` bytes already filled).  Consumed
 * buffers are posted again, and the peer is told when that matters.
 */
ssize_t conn_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip)
{
	struct sdp_conn *c = s->conn;
	bool peek = flags & MSG_PEEK;
	size_t copied = 0;
	uint32_t q = 0;		/* segments looked at (peek) */
	uint32_t qoff = 0;	/* bytes already taken from segment q (peek) */
	size_t off = skip;
	int i = iov_seek(iov, iovcnt, &off);
	bool reposted = false;
	bool passed_mark = false;

	while (i < iovcnt && q < c->rxq_count) {
		struct sdp_rx_seg *seg = rxq_at(c, q);

		/* A SrcAvail's bytes are still with the peer: zc_recv(). */
		if (seg->slot == SDP_SLOT_SA)
			break;
		uint32_t avail = seg->len - (peek ? qoff : 0);
		size_t n = iov[i].iov_len - off;
		bool hidden = false;	/* the urgent byte, skipped */

		if (n > avail)
			n = avail;
		if (seg->urg && avail == 1) {
			/* At the mark: a read that has bytes stops there;
			 * one that has none takes the urgent byte inline or
			 * skips it (tcp_recvmsg()). */
			if (skip + copied)
				break;
			hidden = !s->oobinline;
		} else if (seg->urg && n == avail) {
			n = avail - 1;	/* up to the mark */
		}
		if (hidden) {
			n = 1;
		} else {
			memcpy((uint8_t *)iov[i].iov_base + off,
			       seg_buf(c, seg) + seg->off + (peek ? qoff : 0), n);
			copied += n;
			off += n;
			if (off == iov[i].iov_len) {
				off = 0;
				i++;
			}
		}
		if (peek) {
			qoff += (uint32_t)n;
			if (qoff == seg->len) {
				q++;
				qoff = 0;
			}
			continue;
		}
		seg->off += (uint32_t)n;
		seg->len -= (uint32_t)n;
		c->rx_bytes -= n;
		if (seg->len == 0) {
			uint32_t slot = seg->slot;

			if (seg->urg) {
				/* Past the mark: no urgent data any more. */
				seg->urg = false;
				c->urg = SDP_URG_NONE;
				passed_mark = true;
			}

			c->rxq_head = (c->rxq_head + 1) % c->rxq_cap;
			c->rxq_count--;
			if (slot == SDP_SLOT_STAGE)
				continue;	/* the staging buffer is free again */
			if (slot == SDP_SLOT_HEAP) {
				free(seg->heap);
				continue;
			}
			if (conn_repost(s, slot))
				break;
			reposted = true;
		}
	}
	if (!peek && copied)
		SDP_STAT_INC(bytes_received, copied);
	/* Drained, or past the mark: the readiness fd must follow. */
	if (passed_mark || (!peek && copied && !c->rx_bytes))
		sock_changed(s, false);
	if (reposted)
		conn_flush(s);
	return (ssize_t)copied;
}

/* --- urgent data ---------------------------------------------------------- *
 *
 * Linux's model, which is what a program sees: the urgent byte stays in
 * the stream, and the mark is its place.  Without SO_OOBINLINE a read
 * skips it (as the option is when the read comes, not when the byte
 * came); with it, a read returns it; either way a read stops at the mark
 * when it has bytes already.  recv(MSG_OOB) takes the byte out of band
 * while it is valid (sock.c).  A newer urgent byte moves the mark: the
 * older byte becomes ordinary data, unless the reader stands at the old
 * mark, which then is skipped (tcp_check_urg()).
 */

/* The segment of the mark, and the bytes queued before the urgent byte. */
static struct sdp_rx_seg *urg_seg(const struct sdp_conn *c, uint64_t *before)
{
	uint64_t n = 0;

	for (uint32_t q = 0; q < c->rxq_count; q++) {
		struct sdp_rx_seg *seg = rxq_at(c, q);

		if (seg->urg) {
			if (before)
				*before = n + seg->len - 1;
			return seg;
		}
		n += seg->len;
	}
	return NULL;
}

bool conn_at_mark(const struct sdp_conn *c)
{
	return c->urg != SDP_URG_NONE && c->rxq_count && rxq_at(c, 0)->urg &&
	       rxq_at(c, 0)->len == 1;
}

/* The urgent byte is next and a read would skip it. */
static bool urg_hidden(const struct sdp_sock *s)
{
	return !s->oobinline && conn_at_mark(s->conn);
}

void conn_urg_rcvd(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	struct sdp_rx_seg *old = urg_seg(c, NULL);
	struct sdp_rx_seg *seg = rxq_at(c, c->rxq_count - 1);

	if (old) {
		if (urg_hidden(s)) {
			/* The reader stands at the old mark: its byte goes. */
			uint32_t slot = old->slot;

			old->off++;
			old->len--;
			c->rx_bytes--;
			c->rxq_head = (c->rxq_head + 1) % c->rxq_cap;
			c->rxq_count--;
			if (slot == SDP_SLOT_HEAP)
				free(old->heap);
			else if (slot != SDP_SLOT_STAGE)
				(void)conn_repost(s, slot);
		}
		old->urg = false;
	}
	seg->urg = true;
	c->urg = SDP_URG_VALID;
	c->urg_byte = seg_buf(c, seg)[seg->off + seg->len - 1];
}

uint64_t conn_rx_readable(const struct sdp_sock *s, bool peek)
{
	const struct sdp_conn *c = s->conn;

	if (!c)
		return 0;
	return c->rx_bytes - (peek && urg_hidden(s) ? 1 : 0);
}

uint64_t conn_rx_inq(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;
	uint64_t before;

	/* Without SO_OOBINLINE, SIOCINQ counts up to the mark only. */
	if (s->oobinline || c->urg == SDP_URG_NONE || !urg_seg(c, &before))
		return c->rx_bytes;
	return before;
}

/* --- readiness ------------------------------------------------------------ */

int sock_events_locked(struct sdp_sock *s)
{
	struct sdp_conn *c = s->conn;
	int ev = 0;

	switch (s->state) {
	case SDP_S_NEW:
		/* A socket that is neither connected nor listening is
		 * "closed" to tcp_poll(): writable and hung up. */
		return POLLOUT | POLLWRNORM | POLLHUP;
	case SDP_S_LISTEN:
		return s->acceptq_len ? POLLIN | POLLRDNORM : 0;
	case SDP_S_RESOLVING:
	case SDP_S_CONNECTING:
		return 0;
	case SDP_S_CLOSED:
		ev = POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM | POLLHUP;
		if (s->so_error)
			ev |= POLLERR;
		return ev;
	case SDP_S_ESTABLISHED:
		break;
	}
	bool rd_shut = s->shut_rd || c->disconn_rcvd;
	bool wr_shut = s->shut_wr || c->disconn_sent || (c->ctrl_pending & SDP_CTRL_DISCONN);

	/* A hidden urgent byte alone is no data (tcp_poll()'s target++). */
	if (c->rx_bytes > (urg_hidden(s) ? 1u : 0u) || rd_shut)
		ev |= POLLIN | POLLRDNORM;
	if (c->urg == SDP_URG_VALID)
		ev |= POLLPRI;
	if (rd_shut)
		ev |= POLLRDHUP;
	/* A shut sending side is "writable" so that send() reports EPIPE. */
	if (wr_shut || conn_writable(s))
		ev |= POLLOUT | POLLWRNORM;
	if (rd_shut && wr_shut)
		ev |= POLLHUP;
	if (s->so_error)
		ev |= POLLERR;
	return ev;
}

void sock_notify(struct sdp_sock *s, int band)
{
	if (s->notify)
		s->notify(s->notify_arg, band);
}

__thread int sock_muted_efd = -1;

void sock_changed(struct sdp_sock *s, bool edge)
{
	uint64_t one = 1, v;

	for (struct sdp_waiter *w = s->waiters; w; w = w->next) {
		if (w->changes)
			atomic_fetch_add(w->changes, 1);
		if (w->edges && edge)
			atomic_fetch_add(w->edges, 1);
		/* The thread reporting the watch's set sees this change
		 * through the counters, in the report it is making. */
		if (w->changes && w->fd == sock_muted_efd)
			continue;
		/* Nobody asleep on the set but maybe the thread making
		 * the change: the counters carry it (sdp_watch_gate()). */
		if (w->gate) {
			__atomic_fetch_add(&w->gate->changes, 1, __ATOMIC_SEQ_CST);
			if (!__atomic_load_n(&w->gate->sleepers, __ATOMIC_SEQ_CST))
				continue;
		}
		/* A set watched from outside rings only for what it would
		 * report (sdp_watch_ring_when()). */
		unsigned when = __atomic_load_n(&w->ring_when, __ATOMIC_SEQ_CST);

		if (when && !((unsigned)sock_events_locked(s) & when & ~RING_FILTERED))
			continue;
		if (w->gate && __atomic_exchange_n(&w->gate->rung, 1, __ATOMIC_SEQ_CST))
			continue;
		SDP_STAT_INC(watch_writes, 1);
		if (sys.write(w->fd, &one, sizeof(one)) < 0) {
			/* Counter saturated: the waiter wakes anyway. */
		}
	}
	if (s->sd < 0 || !sock_sd_is_fd())
		return;
	bool ready = sock_events_locked(s) & (s->interest | POLLHUP | POLLERR);

	if (ready && (!s->fd_level || edge)) {
		SDP_STAT_INC(readiness_writes, 1);
		if (sys.write(s->sd, &one, sizeof(one)) == sizeof(one))
			s->fd_level = true;
	} else if (!ready && s->fd_level) {
		if (sys.read(s->sd, &v, sizeof(v)) < 0) {
			/* Already drained. */
		}
		s->fd_level = false;
	}
}
