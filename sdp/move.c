/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * An established connection moved to another process (doc/fork.md,
 * issue 17): sdp_conn_export() turns it into a description and the
 * transport's descriptor, sdp_conn_import() makes a socket of them in the
 * process that holds that descriptor (a fork child, which inherited it).
 *
 * What moves is everything the engine knows of the connection that the
 * peer counts on: the credits (sequence numbers, buffers advertised, so
 * that the peer's view of our receive ring stays true), the modes of the
 * two halves, the options, the bytes received and not yet read (with
 * their urgent mark), the bytes written and not yet posted (waiting for
 * credits), which receive buffers are posted, and the transport's own
 * part (OTI ep_export).  The new owner's rings have the old one's sizes,
 * its receive buffers the same slots: what the peer was promised holds
 * to the byte.
 *
 * Only a quiet connection moves (-EBUSY otherwise, nothing changed): no
 * send or control message posted and not complete, no control message
 * waiting for a credit but a DisConn (which moves, waiting for the data
 * before it), and no zero-copy exchange under way (no advert
 * of ours the peer may use: its keys are registrations of this process;
 * nor of the peer's that we are reading or writing).  A caller that gets
 * -EBUSY drives the connection and tries again; between the drive and
 * the export, under the socket's lock, nothing moves.  The peer takes no
 * part: the transport's stream goes on where it was.
 *
 * The description is for the same build of libsdp on the same host: host
 * order, checked by magic and size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fdspace.h"
#include "log.h"

#define LOGSYS "move"

#define MOVE_MAGIC 0x53444d56u	/* "SDMV" */

struct move_rec {
	uint32_t magic;
	uint32_t size;		/* sizeof(struct move_rec) */
	char transport[32];
	int32_t domain;
	struct sockaddr_storage local, peer;
	/* Options. */
	int32_t rcvbuf, sndbuf, keepalive, reuseaddr, reuseport, oobinline, nodelay, cork;
	int32_t keepidle, keepintvl, keepcnt, rcvlowat, zcopy_thresh;
	uint8_t rcvbuf_set, sndbuf_set, shut_rd, shut_wr;
	struct linger linger;
	struct timeval rcvtimeo, sndtimeo;
	/* The connection. */
	struct sdp_credits cr;
	uint32_t nrx, rx_size, rx_max, nidle, rxq_count;
	uint32_t ntx, tx_size, tx_count;	/* tx_count buffers waiting for credits */
	uint32_t bl_count;	/* chunks of the send backlog (post.c) */
	uint32_t rx_want;	/* the peer's ask that waits (post.c) */
	uint64_t rx_bytes, tx_queued_bytes;
	uint8_t urg, urg_byte, peer_max_adverts, disconn_rcvd;
	uint8_t disconn_sent, disconn_last;
	/* Our receive buffers were growing (post.c, "Growing buffers"): the
	 * new owner posts them all at the new size, so the peer's ChRcvBuf
	 * is answered at once.  The send side's growth is not carried: an
	 * answer to our ask then changes nothing, and the next stream asks
	 * again. */
	uint8_t rcvbuf_ack_due, rx_fixed, tx_fixed;
	uint8_t tx_mode, rx_mode, mch_next, req_pipe, was_pipelined, trans_last_send;
	uint32_t mch_mseq, small_sends, stale_adverts, trans_streak;
	uint32_t nond_sent, nond_rcvd, zc_refusals;
	uint32_t tp_len;	/* the transport's description, last */
	/* Then: rx_posted[nrx] (a byte each), rx_idle[nidle], the rxq_count
	 * segments, the bytes of each, the tx_count buffers' tx_len and
	 * tx_urg and bytes (BSDH room included), the backlog's bl_count
	 * chunks (length, urgent flag, bytes), the transport's part. */
};

/* --- the description, written and read in order ---------------------------- */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

static void put(struct wbuf *w, const void *v, size_t n)
{
	if (w->oom || !n)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;

		while (cap < w->len + n)
			cap *= 2;
		uint8_t *p = realloc(w->p, cap);

		if (!p) {
			w->oom = true;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->len, v, n);
	w->len += n;
}

struct rbuf {
	const uint8_t *p;
	size_t left;
};

static bool get(struct rbuf *r, void *v, size_t n)
{
	if (n > r->left)
		return false;
	memcpy(v, r->p, n);
	r->p += n;
	r->left -= n;
	return true;
}

/* --- export ---------------------------------------------------------------- */

static int move_quiet(const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;

	/* Shut for writing moves too, its DisConn sent or waiting for the
	 * data before it: a forked child that shuts its end down before it
	 * closes (python's socketserver) hands the connection back to be
	 * closed by a process that lives on. */
	if (s->state != SDP_S_ESTABLISHED || !c || !c->ep || s->parent || s->reset ||
	    s->so_error || c->transport_down || c->post_failed || c->disconnected)
		return -ENOTCONN;
	if (!c->t->ep_export)
		return -EOPNOTSUPP;
	if (s->waiters || s->ep_parked || c->tx_done != c->tx_posted ||
	    c->ctrl_done != c->ctrl_posted || (c->ctrl_pending & ~(unsigned)SDP_CTRL_DISCONN) ||
	    c->tx_sa.active ||
	    c->rx_sa.active || c->snk.active || c->psnk.active || c->wr_inflight ||
	    c->snk_acks_due || c->psnk_cancels || c->rdcompl_bytes || c->trans_held)
		return -EBUSY;
	for (uint32_t i = 0; i < c->rxq_count; i++)
		if (rxq_at(c, i)->slot >= c->nrx && rxq_at(c, i)->slot != SDP_SLOT_HEAP)
			return -EBUSY;	/* staged or zero-copy bytes */
	return 0;
}

static uint32_t bl_count(const struct sdp_conn *c)
{
	uint32_t n = 0;

	for (const struct sdp_tx_chunk *k = c->bl_head; k; k = k->next)
		n++;
	return n;
}

static void put_conn(struct wbuf *w, const struct sdp_sock *s)
{
	const struct sdp_conn *c = s->conn;
	struct move_rec m = {
		.magic = MOVE_MAGIC,
		.size = sizeof(m),
		.domain = s->domain,
		.local = s->local,
		.peer = s->peer,
		.rcvbuf = s->rcvbuf, .sndbuf = s->sndbuf, .keepalive = s->keepalive,
		.reuseaddr = s->reuseaddr, .reuseport = s->reuseport, .oobinline = s->oobinline,
		.nodelay = s->nodelay, .cork = s->cork, .keepidle = s->keepidle,
		.keepintvl = s->keepintvl, .keepcnt = s->keepcnt, .rcvlowat = s->rcvlowat,
		.zcopy_thresh = s->zcopy_thresh,
		.rcvbuf_set = s->rcvbuf_set, .sndbuf_set = s->sndbuf_set, .shut_rd = s->shut_rd,
		.shut_wr = s->shut_wr,
		.linger = s->linger, .rcvtimeo = s->rcvtimeo, .sndtimeo = s->sndtimeo,
		.cr = c->cr,
		.nrx = c->nrx, .rx_size = c->rx_size, .rx_max = c->rx_max, .nidle = c->nidle,
		.rxq_count = c->rxq_count,
		.ntx = c->ntx, .tx_size = c->tx_size, .tx_count = c->tx_filled - c->tx_posted,
		.bl_count = bl_count(c), .rx_want = c->rx_want,
		.rx_bytes = c->rx_bytes, .tx_queued_bytes = c->tx_queued_bytes,
		.urg = (uint8_t)c->urg, .urg_byte = c->urg_byte,
		.peer_max_adverts = c->peer_max_adverts, .disconn_rcvd = c->disconn_rcvd,
		.disconn_sent = c->disconn_sent, .disconn_last = c->disconn_last,
		.rcvbuf_ack_due = c->rx_old_mem && c->rx_old_posted,
		.rx_fixed = c->rx_fixed, .tx_fixed = c->tx_fixed,
		.tx_mode = c->tx_mode, .rx_mode = c->rx_mode, .mch_next = c->mch_next,
		.req_pipe = c->req_pipe, .was_pipelined = c->was_pipelined,
		.trans_last_send = c->trans_last_send,
		.mch_mseq = c->mch_mseq, .small_sends = c->small_sends,
		.stale_adverts = c->stale_adverts, .trans_streak = c->trans_streak,
		.nond_sent = c->nond_sent, .nond_rcvd = c->nond_rcvd, .zc_refusals = c->zc_refusals,
	};

	strncpy(m.transport, c->t->name, sizeof(m.transport) - 1);
	put(w, &m, sizeof(m));
	for (uint32_t i = 0; i < c->nrx; i++) {
		uint8_t b = c->rx_posted[i];

		put(w, &b, 1);
	}
	put(w, c->rx_idle, (size_t)c->nidle * sizeof(*c->rx_idle));
	for (uint32_t i = 0; i < c->rxq_count; i++)
		put(w, rxq_at(c, i), sizeof(struct sdp_rx_seg));
	for (uint32_t i = 0; i < c->rxq_count; i++) {
		const struct sdp_rx_seg *g = rxq_at(c, i);

		put(w, (g->slot == SDP_SLOT_HEAP ? g->heap : rx_buf((struct sdp_conn *)c, g->slot)) +
			       g->off, g->len);
	}
	for (uint32_t k = c->tx_posted; k != c->tx_filled; k++) {
		uint32_t slot = k % c->ntx;
		uint8_t urg = c->tx_urg[slot];

		put(w, &c->tx_len[slot], sizeof(c->tx_len[slot]));
		put(w, &urg, 1);
		put(w, c->tx_mem + (size_t)slot * c->tx_size, SDP_BSDH_LEN + c->tx_len[slot]);
	}
	for (const struct sdp_tx_chunk *k = c->bl_head; k; k = k->next) {
		uint32_t n = k->len - k->off;
		uint8_t urg = k->urg;

		put(w, &n, sizeof(n));
		put(w, &urg, 1);
		put(w, k->data + k->off, n);
	}
}

/* s (locked, driven just now): on success its connection is in *blob and
 * *fd, and s is left closed without a word to the peer. */
int conn_export(struct sdp_sock *s, void **blob, size_t *len, int *fd)
{
	struct sdp_conn *c = s->conn;
	struct wbuf w = { 0 };
	void *tp;
	size_t tp_len;
	int ret = move_quiet(s);

	if (ret)
		return ret;
	put_conn(&w, s);
	if (w.oom) {
		free(w.p);
		return -ENOMEM;
	}
	/* Out of the progress thread's set while the ep is still whole. */
	conn_leave_progress(s);
	ret = c->t->ep_export(c->ep, &tp, &tp_len, fd);
	if (ret) {
		free(w.p);
		if (progress_add_ep(s, c) == 0)
			c->in_progress_set = true;
		return ret;
	}
	c->ep = NULL;
	c->ep_fd = -1;
	((struct move_rec *)w.p)->tp_len = (uint32_t)tp_len;
	put(&w, tp, tp_len);
	free(tp);
	if (w.oom) {
		/* The transport's state is gone with the memory: so is the
		 * connection. */
		sdp_err(LOGSYS, "sd %d: out of memory moving the connection: it is lost", s->sd);
		fdspace_close(*fd);
		conn_free(s);
		s->state = SDP_S_CLOSED;
		free(w.p);
		return -ENOMEM;
	}
	sdp_conn_log(LOGSYS, "sd %d: connection exported (%zu bytes unread, %u buffers unsent)",
		     s->sd, (size_t)c->rx_bytes, c->tx_filled - c->tx_posted);
	/* No DisConn, no reset: the connection lives on elsewhere. */
	c->rx_bytes = 0;
	conn_rx_free_heap(c);
	c->rxq_count = 0;
	conn_free(s);
	s->state = SDP_S_CLOSED;
	*blob = w.p;
	*len = w.len;
	return 0;
}

/* --- import ---------------------------------------------------------------- */

static void set_options(struct sdp_sock *s, const struct move_rec *m)
{
	s->local = m->local;
	s->peer = m->peer;
	s->bound = true;
	s->rcvbuf = m->rcvbuf;
	s->sndbuf = m->sndbuf;
	s->keepalive = m->keepalive;
	s->reuseaddr = m->reuseaddr;
	s->reuseport = m->reuseport;
	s->oobinline = m->oobinline;
	s->nodelay = m->nodelay;
	s->cork = m->cork;
	s->keepidle = m->keepidle;
	s->keepintvl = m->keepintvl;
	s->keepcnt = m->keepcnt;
	s->rcvlowat = m->rcvlowat;
	s->zcopy_thresh = m->zcopy_thresh;
	s->rcvbuf_set = m->rcvbuf_set;
	s->sndbuf_set = m->sndbuf_set;
	s->shut_rd = m->shut_rd;
	s->shut_wr = m->shut_wr;
	s->linger = m->linger;
	s->rcvtimeo = m->rcvtimeo;
	s->sndtimeo = m->sndtimeo;
}

static void set_conn(struct sdp_conn *c, const struct move_rec *m)
{
	c->cr = m->cr;
	c->rx_max = m->rx_max;
	c->urg = (enum sdp_urg)m->urg;
	c->urg_byte = m->urg_byte;
	c->peer_max_adverts = m->peer_max_adverts;
	c->disconn_rcvd = m->disconn_rcvd;
	c->disconn_sent = m->disconn_sent;
	c->disconn_last = m->disconn_last;
	c->tx_mode = m->tx_mode;
	c->rx_mode = m->rx_mode;
	c->mch_next = m->mch_next;
	c->req_pipe = m->req_pipe;
	c->was_pipelined = m->was_pipelined;
	c->trans_last_send = m->trans_last_send;
	c->mch_mseq = m->mch_mseq;
	c->small_sends = m->small_sends;
	c->stale_adverts = m->stale_adverts;
	c->trans_streak = m->trans_streak;
	c->nond_sent = m->nond_sent;
	c->nond_rcvd = m->nond_rcvd;
	c->zc_refusals = m->zc_refusals;
}

/* Which receive buffers were posted, after the record. */
static bool get_posted(struct rbuf *r, const struct move_rec *m, bool *post)
{
	for (uint32_t i = 0; i < m->nrx; i++) {
		uint8_t b;

		if (!get(r, &b, 1))
			return false;
		post[i] = b;
	}
	return true;
}

/* The rings' contents, after that; false if the description is not one
 * export made. */
static bool get_rings(struct rbuf *r, struct sdp_conn *c, const struct move_rec *m)
{
	if (!get(r, c->rx_idle, (size_t)m->nidle * sizeof(*c->rx_idle)))
		return false;
	c->nidle = m->nidle;
	for (uint32_t i = 0; i < m->nidle; i++)
		if (c->rx_idle[i] >= m->nrx || c->rx_posted[c->rx_idle[i]])
			return false;
	uint64_t bytes = 0;
	uint32_t heap = 0, segs = 0;

	if (m->rxq_count > c->rxq_cap)
		return false;
	for (uint32_t i = 0; i < m->rxq_count; i++) {
		struct sdp_rx_seg *g = &c->rxq[i];

		if (!get(r, g, sizeof(*g)))
			return false;
		g->heap = NULL;	/* the exporter's address */
		if (g->slot == SDP_SLOT_HEAP) {
			/* Copied out (post.c): at most SDP_RX_HEAP_MAX in all. */
			if (g->len == 0 || g->len > SDP_RX_HEAP_MAX - heap ||
			    ++segs > SDP_RX_HEAP_SEGS)
				return false;
			g->off = 0;
			heap += g->len;
		} else if (g->slot >= m->nrx || c->rx_posted[g->slot] || g->off > m->rx_size ||
			   g->len > m->rx_size - g->off) {
			return false;
		}
		bytes += g->len;
	}
	if (bytes != m->rx_bytes)
		return false;
	c->rxq_head = 0;
	c->rxq_count = m->rxq_count;	/* from here, conn_free() frees the heap's */
	c->rx_bytes = m->rx_bytes;
	for (uint32_t i = 0; i < m->rxq_count; i++) {
		struct sdp_rx_seg *g = &c->rxq[i];

		if (g->slot == SDP_SLOT_HEAP && !(g->heap = malloc(g->len)))
			return false;
		if (!get(r, g->slot == SDP_SLOT_HEAP ? g->heap : rx_buf(c, g->slot) + g->off,
			 g->len))
			return false;
	}
	for (uint32_t k = 0; k < m->tx_count; k++) {
		uint8_t urg;

		if (!get(r, &c->tx_len[k], sizeof(c->tx_len[k])) || !get(r, &urg, 1) ||
		    c->tx_len[k] > m->tx_size - SDP_BSDH_LEN ||
		    !get(r, c->tx_mem + (size_t)k * m->tx_size, SDP_BSDH_LEN + c->tx_len[k]))
			return false;
		c->tx_urg[k] = urg;
	}
	/* Renumbered from 0: nothing was in flight. */
	c->tx_done = c->tx_posted = 0;
	c->tx_filled = m->tx_count;
	c->tx_queued_bytes = m->tx_queued_bytes;
	uint64_t queued = 0;

	for (uint32_t k = 0; k < m->tx_count; k++)
		queued += c->tx_len[k];
	for (uint32_t i = 0; i < m->bl_count; i++) {
		uint32_t n;
		uint8_t urg;
		struct sdp_tx_chunk *k;

		if (!get(r, &n, sizeof(n)) || !get(r, &urg, 1) || !n || n > r->left)
			return false;
		k = malloc(sizeof(*k) + n);
		if (!k)
			return false;
		*k = (struct sdp_tx_chunk){ .len = n, .urg = urg };
		(void)get(r, k->data, n);
		if (c->bl_tail)
			c->bl_tail->next = k;
		else
			c->bl_head = k;
		c->bl_tail = k;
		queued += n;
	}
	return queued == m->tx_queued_bytes && r->left == m->tp_len;
}

int conn_import(const void *blob, size_t len, int fd, int flags, struct sdp_sock **out)
{
	struct rbuf r = { blob, len };
	struct move_rec m;
	struct sdp_sock *s;
	struct sdp_conn *c;
	bool *post = NULL;
	int ret = -EINVAL;

	if (!get(&r, &m, sizeof(m)) || m.magic != MOVE_MAGIC || m.size != sizeof(m) ||
	    (m.domain != AF_INET && m.domain != AF_INET6) || !m.nrx || !m.ntx || m.rx_max > m.nrx ||
	    m.nrx > 65536 || m.ntx > 65536 || m.rx_size <= SDP_BSDH_LEN ||
	    m.tx_size <= SDP_BSDH_LEN || m.tp_len > r.left) {
		fdspace_close(fd);
		return -EINVAL;
	}
	m.transport[sizeof(m.transport) - 1] = 0;
	s = sock_alloc(m.domain, flags & SOCK_NONBLOCK, flags & SOCK_CLOEXEC, false);
	c = s ? conn_new() : NULL;
	if (!c) {
		fdspace_close(fd);
		if (s)
			sock_put(s);
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->lock);
	s->conn = c;
	c->t = oti_find(m.transport);
	if (!c->t || !c->t->ep_import) {
		fdspace_close(fd);
		goto fail;
	}
	c->t->query_caps(&c->caps);
	ret = c->t->ep_import(r.p + (r.left - m.tp_len), m.tp_len, fd, &c->ep);
	if (ret)
		goto fail;
	c->ep_fd = c->t->ep_fd(c->ep);
	c->nrx = m.nrx;
	c->rx_size = m.rx_size;
	c->ntx = m.ntx;
	c->tx_size = m.tx_size;
	c->rx_fixed = m.rx_fixed;
	c->tx_fixed = m.tx_fixed;
	post = calloc(m.nrx, sizeof(*post));
	ret = -ENOMEM;
	if (!post)
		goto fail;
	ret = -EINVAL;
	if (!get_posted(&r, &m, post))
		goto fail;
	/* The buffers the old owner had posted, the same slots: the peer
	 * may be sending into them. */
	ret = conn_make_rx(c, post);
	if (!ret)
		ret = conn_make_tx(c);
	if (ret)
		goto fail;
	if (m.rcvbuf_ack_due && conn_fits(c, SDP_U32H_LEN))
		c->ctrl_pending |= SDP_CTRL_CH_RCV_BUF_ACK;
	c->rx_want = m.rx_want;	/* taken once that answer is out */
	ret = -EINVAL;
	if (!get_rings(&r, c, &m))
		goto fail;
	free(post);
	post = NULL;
	set_options(s, &m);
	set_conn(c, &m);
	s->state = SDP_S_ESTABLISHED;
	s->was_established = true;
	/* Shut for writing, its DisConn not sent yet: it waits for the
	 * data before it, as it did at the old owner. */
	if (s->shut_wr)
		conn_shutdown_write(s);
	ret = progress_add_ep(s, c);
	if (ret)
		goto fail;
	c->in_progress_set = true;
	sdp_conn_log(LOGSYS, "sd %d: connection imported over %s (%zu bytes unread, %u buffers "
		     "unsent)", s->sd, c->t->name, (size_t)c->rx_bytes, c->tx_filled);
	/* Credits or data that were waiting may go now. */
	conn_progress(s);
	pthread_mutex_unlock(&s->lock);
	*out = s;
	return 0;
fail:
	free(post);
	sdp_warn(LOGSYS, "a moved connection could not be imported: %s", strerror(-ret));
	conn_free(s);
	s->state = SDP_S_CLOSED;
	pthread_mutex_unlock(&s->lock);
	sock_put(s);
	return ret;
}
