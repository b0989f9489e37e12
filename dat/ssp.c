/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: the iWARP extension's Socket Service Points
 * (dat_iw_extensions.h), carried by libsdp's conversion frames
 * (sdp/convert.h, the same REQ / RSP / FIN that sdp_convert_* exchange).
 *
 * Passive side.  dat_iw_ssp_create sends the consumer's final
 * streaming-mode message and starts the SSP's thread, which waits on the
 * socket for the peer's REQ.  The REQ becomes the SSP's one CR (it has no
 * rdma_cm id) and a DAT_CONNECTION_REQUEST_EVENT on the SSP's EVD.
 * dat_cr_accept hands the thread the answer: it opens a hidden one-shot
 * rdma_cm listener on the socket's local address, sends RSP(ok, port,
 * the consumer's private data), and the progress thread accepts, onto the
 * EP's QP, the one connect request that comes from the socket's peer
 * address carrying the REQ's nonce.  When rdma_cm reports the connection
 * ESTABLISHED the two FINs are exchanged, the socket is closed (it
 * belongs to the EP now) and only then does the consumer get ESTABLISHED.
 * dat_cr_reject sends RSP(refused) and the FINs, and returns once the
 * socket is the consumer's again.
 *
 * Active side.  dat_iw_socket_connect checks its arguments, marks the EP
 * pending and starts a thread: REQ(nonce, private data), the RSP, then an
 * ordinary rdma_cm connect of the EP (ep.c) to the peer's address and the
 * RSP's port with the nonce as private data, the FINs, the outcome.
 *
 * While a conversion runs, its EP's connection events are held back
 * (ep->conv, dsp_ssp_hook_event): ESTABLISHED reaches the consumer after
 * the socket was closed, and every failure after the socket is the
 * consumer's again with nothing of ours left in either stream.
 *
 * Objects: an SSP handle and an active connect are both a struct
 * dsp_ssp on ia->ssps, each with one thread.  A thread never frees its
 * struct: ssp_free, a later create or connect on the IA (reap()), the
 * EP's free or dat_ia_close joins it and frees it once it has finished.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "provider.h"
#include "dat_iw_extensions.h"
#include "sdp/convert.h"

#define SSP_SEND_MS 10000	/* the final message onto the socket */
#define SSP_GRACE_MS 10000	/* the peer's frames after a verdict */
#define SSP_ABANDON_MS 1000	/* of a connect's timeout, kept for giving up */
#define SSP_ACCEPT_MS 30000	/* the peer's RDMA connect after our RSP */
#define SSP_HOOKED 4

enum ssp_verdict { V_NONE, V_ACCEPT, V_REJECT };

struct hooked_event {
	DAT_EVENT_NUMBER num;
	uint8_t pd[VC_PDATA_MAX];
	int len;
};

struct dsp_ssp {
	struct dsp_hdr h;	/* DSP_T_SSP; magic 0 once freed, and for a connect */
	bool active;		/* a socket connect, not an SSP handle */
	DAT_IA_HANDLE consumer_ia;	/* what dat_iw_ssp_query gives back */
	int sock;
	struct dsp_ep *ep;	/* NULL once the EP went */
	struct dsp_evd *evd;	/* passive: where the request goes */
	DAT_IW_SSP_STATE state;
	bool freed;		/* the consumer freed the handle */
	bool stopping;		/* the IA closes or the EP goes: give up */
	bool done;		/* the thread has finished */
	bool joined;
	pthread_t thread;
	int stop_fd;
	pthread_cond_t cond;	/* with ia->lock: verdict, hooked event, answered */
	struct sockaddr_storage local, peer;
	uint8_t nonce[CONV_NONCE_LEN];

	/* passive: the request, the consumer's answer, the hidden listener */
	struct dsp_cr *cr;
	enum ssp_verdict verdict;
	uint8_t vpd[CONV_MAX_PDATA];
	int vlen;
	bool answered;		/* a rejection has been exchanged */
	struct dsp_psp *lsn;
	bool matched;		/* also: the active side's rdma_cm connect began */
	struct rdma_cm_id *old_id;	/* the EP's id before its QP moved */
	struct rdma_cm_id **strays;	/* requests refused, destroyed with the listener */
	int nstrays, maxstrays;

	/* active: the connect's arguments */
	DAT_TIMEOUT timeout;
	uint8_t pd[CONV_MAX_PDATA];
	int pdlen;

	/* the EP's connection events, held back (ep->conv == this) */
	struct hooked_event ev[SSP_HOOKED];
	int nev;
};

/* ---- small helpers ---------------------------------------------------------- */

static uint16_t sa_port(const struct sockaddr_storage *a)
{
	return vc_sa_port((const struct sockaddr *)a);
}

/*
 * The socket must be a connected TCP socket whose local address is the
 * IA's: the RDMA connection runs between the socket's two addresses.
 */
static bool socket_ok(struct dsp_ia *ia, int sock, struct dsp_ssp *s)
{
	socklen_t l = sizeof(s->local);

	if (sock < 0 || conv_check_socket(sock) != 0)
		return false;
	if (getsockname(sock, (struct sockaddr *)&s->local, &l) != 0)
		return false;
	l = sizeof(s->peer);
	if (getpeername(sock, (struct sockaddr *)&s->peer, &l) != 0)
		return false;
	if (!vc_same_ip((struct sockaddr *)&s->local, (struct sockaddr *)&ia->addr)) {
		DSP_DBG("ssp: socket %d is not on the IA's address", sock);
		return false;
	}
	return true;
}

static void stop(struct dsp_ssp *s)
{
	uint64_t one = 1;

	s->stopping = true;
	pthread_cond_broadcast(&s->cond);
	if (write(s->stop_fd, &one, sizeof(one)) < 0)
		DSP_DBG("ssp stop: %s", strerror(errno));
}

static struct dsp_ssp *ssp_new(struct dsp_ia *ia, bool active)
{
	struct dsp_ssp *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;

	if (!s)
		return NULL;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0) {
		free(s);
		return NULL;
	}
	dsp_hdr_init(&s->h, ia, DSP_T_SSP);
	if (active)
		s->h.magic = 0;	/* not a handle */
	s->active = active;
	s->sock = -1;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	return s;
}

static void ssp_delete(struct dsp_ssp *s)
{
	pthread_cond_destroy(&s->cond);
	close(s->stop_fd);
	free(s);
}

/* Join and free what has finished and nobody holds (ia->lock not held). */
static void reap(struct dsp_ia *ia)
{
	for (;;) {
		struct dsp_ssp *found = NULL;
		struct dsp_hdr *h;

		pthread_mutex_lock(&ia->lock);
		for (h = ia->ssps.head.next; h != &ia->ssps.head; h = h->next) {
			struct dsp_ssp *s = (struct dsp_ssp *)h;

			if (s->done && (s->active || s->freed) && !s->cr) {
				found = s;
				dsp_list_del(&ia->ssps, h);
				break;
			}
		}
		pthread_mutex_unlock(&ia->lock);
		if (!found)
			return;
		if (!found->joined)
			pthread_join(found->thread, NULL);
		ssp_delete(found);
	}
}

/* ---- waiting ------------------------------------------------------------------ */

static uint64_t deadline_ns(int ms)
{
	return conv_deadline_in(ms);
}

/* The socket readable: 1; the SSP stopped: -ECANCELED; or -ETIMEDOUT. */
static int wait_sock(struct dsp_ssp *s, uint64_t deadline)
{
	for (;;) {
		struct pollfd pf[2] = { { .fd = s->sock, .events = POLLIN },
					{ .fd = s->stop_fd, .events = POLLIN } };
		int ms = -1, r;

		if (deadline) {
			uint64_t now = conv_now_ns();

			if (now >= deadline)
				return -ETIMEDOUT;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		r = poll(pf, 2, ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (pf[1].revents)
			return -ECANCELED;
		if (pf[0].revents)
			return 1;
	}
}

/* Something to read on the socket now? */
static bool sock_readable(struct dsp_ssp *s)
{
	struct pollfd pf = { .fd = s->sock, .events = POLLIN };

	return poll(&pf, 1, 0) == 1;
}

/* One conversion frame off the socket, or why not (stop interrupts it). */
static int recv_frame(struct dsp_ssp *s, struct conv_frame *f, uint64_t deadline)
{
	for (;;) {
		int r = wait_sock(s, deadline);
		uint64_t d;

		if (r < 0)
			return r;
		/* bytes are there: the rest of a frame follows at once */
		d = deadline_ns(1000);
		if (deadline && deadline < d)
			d = deadline;
		r = conv_recv(s->sock, f, d);
		if (r != -ETIMEDOUT || (deadline && conv_now_ns() >= deadline))
			return r;
	}
}

/* ia->lock held: sleep on the SSP's condition until woken or the deadline. */
static void cond_wait(struct dsp_ssp *s, uint64_t deadline)
{
	struct dsp_ia *ia = s->h.ia;

	if (!deadline) {
		pthread_cond_wait(&s->cond, &ia->lock);
	} else {
		struct timespec ts = { (time_t)(deadline / 1000000000ull),
				       (long)(deadline % 1000000000ull) };

		pthread_cond_timedwait(&s->cond, &ia->lock, &ts);
	}
}

/* ---- events ------------------------------------------------------------------- */

void dsp_ssp_hook_event(struct dsp_ssp *s, DAT_EVENT_NUMBER num, const void *pdata, int len)
{
	struct hooked_event *e;

	if (s->nev == SSP_HOOKED) {
		DSP_DBG("ssp: connection event 0x%x dropped while converting", num);
		return;
	}
	e = &s->ev[s->nev++];
	e->num = num;
	e->len = pdata && len > 0 ? len : 0;
	if (e->len)
		memcpy(e->pd, pdata, (size_t)e->len);
	pthread_cond_broadcast(&s->cond);
}

/*
 * ia->lock held: the conversion is over; the EP's events flow again.  On
 * success the held-back events go to the consumer in order (the first is
 * ESTABLISHED, given pd when pd is not NULL); on failure only num does.
 */
static void finish_ep(struct dsp_ssp *s, bool ok, DAT_EVENT_NUMBER num, const void *pd, int len)
{
	struct dsp_ep *ep = s->ep;
	int i;

	if (!ep || s->stopping)
		return;
	if (ep->conv == s)
		ep->conv = NULL;
	if (ok) {
		for (i = 0; i < s->nev; i++) {
			if (i == 0 && pd)
				dsp_conn_event(ep, s->ev[i].num, pd, len);
			else
				dsp_conn_event(ep, s->ev[i].num, s->ev[i].pd, s->ev[i].len);
		}
	} else {
		if (s->matched && (ep->state == DAT_EP_STATE_CONNECTED ||
				   ep->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING ||
				   ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING))
			vc_disconnect_once(ep->id, &ep->disconnect_called);
		ep->state = DAT_EP_STATE_DISCONNECTED;
		ep->deadline_ms = 0;
		dsp_conn_event(ep, num, pd, len);
	}
	s->nev = 0;
}

/* ia->lock held: the peer closed or reset the socket before requesting. */
static void socket_down_event(struct dsp_ssp *s)
{
	DAT_IW_EXTENSION_EVENT_DATA d = { .ssp_handle = s, .socket_id = s->sock };
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = (DAT_EVENT_NUMBER)DAT_IW_SOCKET_DOWN_EVENT;
	ev.evd_handle = s->evd;
	memcpy(ev.event_extension_data, &d, sizeof(d));
	dsp_evd_push(s->evd, &ev);
}

/* ---- the FINs ----------------------------------------------------------------- */

/* Ours (status), then theirs unless already read; 0 when both said OK. */
static int exchange_fins(struct dsp_ssp *s, uint8_t status, uint8_t reason, bool theirs_read,
			 const struct conv_frame *theirs_in)
{
	struct conv_frame fin = { .type = CONV_FIN, .status = status, .reason = reason };
	struct conv_frame theirs;
	uint64_t grace = deadline_ns(SSP_GRACE_MS);
	int r = conv_send(s->sock, &fin, grace);

	if (r)
		return r;
	if (theirs_read)
		theirs = *theirs_in;
	else if ((r = recv_frame(s, &theirs, grace)) != 0)
		return r;
	if (theirs.type != CONV_FIN)
		return -EPROTO;
	return status == CONV_OK && theirs.status == CONV_OK ? 0 : -ECONNREFUSED;
}

/* RSP(failed, reason), then the FINs: the peer keeps its socket. */
static int refuse(struct dsp_ssp *s, const struct conv_frame *req, uint8_t reason,
		  const void *pd, int len)
{
	struct conv_frame rsp = { .type = CONV_RSP, .status = CONV_FAILED, .reason = reason };
	int r;

	memcpy(rsp.nonce, req->nonce, CONV_NONCE_LEN);
	if (pd && len > 0) {
		memcpy(rsp.pdata, pd, (size_t)len);
		rsp.pdata_len = (uint16_t)len;
	}
	r = conv_send(s->sock, &rsp, deadline_ns(SSP_GRACE_MS));
	if (!r)
		r = exchange_fins(s, CONV_FAILED, reason, false, NULL);
	if (r && r != -ECONNREFUSED)
		DSP_DBG("ssp: the refused peer did not finish (%s)", strerror(-r));
	return r;
}

/* ---- passive side ---------------------------------------------------------------- */

static int open_listener(struct dsp_ssp *s, uint16_t *port)
{
	struct dsp_ia *ia = s->h.ia;
	struct sockaddr_storage a;
	struct dsp_psp *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	dsp_hdr_init(&l->h, ia, DSP_T_PSP);	/* on no list: ssp.c's own */
	l->ssp = s;
	l->evd = s->evd;
	vc_sa_copy(&a, (struct sockaddr *)&s->local, 0);
	r = vc_listen_on(ia->ch, (struct sockaddr *)&a, 4, l, &l->id);
	if (!r && l->id->verbs && l->id->verbs != ia->verbs) {
		r = -ENODEV;	/* the address is on another device than the IA's */
		vc_id_free(l->id);
	}
	if (r) {
		free(l);
		return r;
	}
	*port = ntohs(rdma_get_src_port(l->id));
	pthread_mutex_lock(&ia->lock);
	s->lsn = l;
	pthread_mutex_unlock(&ia->lock);
	return 0;
}

/* The listener, the EP's old id and refused requests go (no lock held). */
static void close_listener(struct dsp_ssp *s)
{
	struct dsp_ia *ia = s->h.ia;
	struct dsp_psp *l;
	struct rdma_cm_id *old, **strays;
	int n, i;

	pthread_mutex_lock(&ia->lock);
	l = s->lsn;
	s->lsn = NULL;
	if (l) {
		l->h.magic = 0;	/* its late requests are refused by ia.c */
		l->ssp = NULL;
	}
	old = s->old_id;
	s->old_id = NULL;
	n = s->nstrays;
	strays = s->strays;
	s->strays = NULL;
	s->nstrays = s->maxstrays = 0;
	pthread_mutex_unlock(&ia->lock);
	if (l) {
		vc_id_free(l->id);
		free(l);
	}
	vc_id_free(old);
	for (i = 0; i < n; i++)
		vc_id_free(strays[i]);
	free(strays);
}

/* ia->lock held: keep a refused request's id for close_listener. */
static void add_stray(struct dsp_ssp *s, struct rdma_cm_id *id)
{
	if (s->nstrays == s->maxstrays) {
		int m = s->maxstrays ? 2 * s->maxstrays : 4;
		struct rdma_cm_id **n = realloc(s->strays, (size_t)m * sizeof(*n));

		if (!n) {
			DSP_DBG("ssp: no memory to keep a refused request's id: it leaks");
			return;
		}
		s->strays = n;
		s->maxstrays = m;
	}
	s->strays[s->nstrays++] = id;
}

/* Progress thread, ia->lock held: a request on the hidden listener. */
void dsp_ssp_conn_request(struct dsp_psp *lsn, struct rdma_cm_event *ev)
{
	struct dsp_ssp *s = lsn->ssp;
	struct dsp_ep *ep = s ? s->ep : NULL;
	uint8_t pd[VC_PDATA_MAX], framed[VC_PDATA_MAX + 1];
	struct rdma_conn_param cp;
	int n = vc_unframe(ev->param.conn.private_data, ev->param.conn.private_data_len, pd), r;

	if (!s || s->matched || s->stopping || !ep || ep->conv != s || !ep->qp ||
	    ep->state != DAT_EP_STATE_PASSIVE_CONNECTION_PENDING || ev->id->verbs != ep->qp->context ||
	    n != CONV_NONCE_LEN || memcmp(pd, s->nonce, CONV_NONCE_LEN) ||
	    !vc_same_ip(rdma_get_peer_addr(ev->id), (struct sockaddr *)&s->peer)) {
		DSP_DBG("ssp: a connect request on the hidden listener that is not the peer's");
		vc_reject(ev->id, NULL, 0);
		ev->id->context = NULL;
		if (s)
			add_stray(s, ev->id);
		return;
	}
	s->matched = true;
	/* the QP moves to the request's id, as in dsp_cr_accept */
	s->old_id = ep->id;
	dsp_ep_take_id(ep, ev->id, &s->peer);
	/* the consumer's private data went over the socket (RSP): here only
	 * the start rule's target, if the request asked (vcore.h) */
	n = dsp_ep_accept_pdata(ep, ep->h.ia->iwarp &&
					    vc_rtr_asked(ev->param.conn.private_data,
							 ev->param.conn.private_data_len),
				framed, NULL, 0);
	cp = dsp_ep_accept_param(ep, framed, n, ev->param.conn.initiator_depth,
				 ev->param.conn.responder_resources);
	r = vc_accept(ep->id, &cp);
	if (r) {
		DSP_DBG("ssp: rdma_accept: %s", strerror(-r));
		dsp_ssp_hook_event(s, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, NULL, 0);
	}
	pthread_cond_broadcast(&s->cond);
}

/* The consumer accepted: RSP(ok), the RDMA connection, the FINs. */
static void passive_accept(struct dsp_ssp *s, const struct conv_frame *req)
{
	struct dsp_ia *ia = s->h.ia;
	struct conv_frame rsp = { .type = CONV_RSP }, theirs;
	bool theirs_read = false, established = false, gave_up = false;
	DAT_EVENT_NUMBER fail = DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR;
	uint16_t port = 0;
	int r;

	memcpy(rsp.nonce, req->nonce, CONV_NONCE_LEN);
	r = open_listener(s, &port);
	if (r) {
		DSP_DBG("ssp: no listener on the socket's address: %s", strerror(-r));
		refuse(s, req, CONV_R_NO_TRANSPORT, NULL, 0);
		goto failed;
	}
	rsp.port = port;
	rsp.pdata_len = (uint16_t)s->vlen;
	memcpy(rsp.pdata, s->vpd, (size_t)s->vlen);
	pthread_mutex_lock(&ia->lock);
	if (s->stopping || !s->ep) {
		pthread_mutex_unlock(&ia->lock);
		goto out;
	}
	s->ep->conv = s;
	pthread_mutex_unlock(&ia->lock);
	r = conv_send(s->sock, &rsp, deadline_ns(SSP_GRACE_MS));
	if (r) {
		DSP_DBG("ssp: sending the answer: %s", strerror(-r));
		goto failed;
	}

	/* The peer connects; its FIN may come before our ESTABLISHED. */
	uint64_t until = deadline_ns(SSP_ACCEPT_MS);

	for (;;) {
		pthread_mutex_lock(&ia->lock);
		if (!s->nev && !s->stopping)
			cond_wait(s, deadline_ns(50) < until ? deadline_ns(50) : until);
		bool stopping = s->stopping;
		int nev = s->nev;
		DAT_EVENT_NUMBER first = nev ? s->ev[0].num : 0;

		pthread_mutex_unlock(&ia->lock);
		if (stopping)
			goto out;
		if (nev) {
			established = first == DAT_CONNECTION_EVENT_ESTABLISHED;
			if (!established)
				fail = first;
			break;
		}
		if (conv_now_ns() >= until) {
			DSP_DBG("ssp: the peer's RDMA connection did not come");
			break;
		}
		if (!theirs_read && sock_readable(s)) {
			r = recv_frame(s, &theirs, deadline_ns(SSP_GRACE_MS));
			if (r || theirs.type != CONV_FIN) {
				DSP_DBG("ssp: the peer broke the exchange (%s)",
					r ? strerror(-r) : "not a FIN");
				goto failed;
			}
			theirs_read = true;
			if (theirs.status != CONV_OK) {
				gave_up = true;	/* its connect failed */
				break;
			}
		}
	}
	if (gave_up) {
		struct conv_frame fin = { .type = CONV_FIN, .status = CONV_FAILED };

		conv_send(s->sock, &fin, deadline_ns(SSP_GRACE_MS));
		goto failed;
	}
	r = exchange_fins(s, established ? CONV_OK : CONV_FAILED,
			  established ? CONV_R_NONE : CONV_R_TIMEOUT, theirs_read, &theirs);
	if (r || !established)
		goto failed;

	/* Converted: the socket is the EP's, and the EP needs it no more. */
	shutdown(s->sock, SHUT_RDWR);
	close(s->sock);
	pthread_mutex_lock(&ia->lock);
	s->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
	finish_ep(s, true, 0, NULL, 0);
	pthread_mutex_unlock(&ia->lock);
	goto out;
failed:
	pthread_mutex_lock(&ia->lock);
	s->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
	finish_ep(s, false, fail, NULL, 0);
	pthread_mutex_unlock(&ia->lock);
out:
	close_listener(s);
}

/* ia->lock held: the REQ becomes the SSP's CR and its event. */
static bool deliver_request(struct dsp_ssp *s, const struct conv_frame *req)
{
	struct dsp_ia *ia = s->h.ia;
	struct dsp_cr *cr = calloc(1, sizeof(*cr));
	DAT_EVENT ev;

	if (!cr)
		return false;
	dsp_hdr_init(&cr->h, ia, DSP_T_CR);
	cr->ssp = s;
	cr->qual = sa_port(&s->local);
	cr->pdata_len = req->pdata_len;
	memcpy(cr->pdata, req->pdata, req->pdata_len);
	cr->remote = s->peer;
	cr->remote_port = sa_port(&s->peer);
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
	ev.evd_handle = s->evd;
	ev.event_data.cr_arrival_event_data.sp_handle.psp_handle = (DAT_PSP_HANDLE)s;
	ev.event_data.cr_arrival_event_data.local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&s->local;
	ev.event_data.cr_arrival_event_data.conn_qual = cr->qual;
	ev.event_data.cr_arrival_event_data.cr_handle = cr;
	ev.event_data.cr_arrival_event_data.truncate_flag = DAT_FALSE;
	dsp_list_add(&ia->crs, &cr->h);
	if (!dsp_evd_push(s->evd, &ev)) {
		dsp_list_del(&ia->crs, &cr->h);
		free(cr);
		return false;
	}
	s->cr = cr;
	return true;
}

static void *passive_thread(void *arg)
{
	struct dsp_ssp *s = arg;
	struct dsp_ia *ia = s->h.ia;
	struct conv_frame req;
	int r = recv_frame(s, &req, 0);

	if (r == -ECANCELED)
		goto out;
	if (r == 0 && req.type != CONV_REQ)
		r = -EPROTO;
	if (r) {
		/* -EPROTO: stream data or a frame out of place; the peer is
		 * not converting and its bytes stay for the consumer */
		DSP_DBG("ssp %p: socket %d: %s before a request", (void *)s, s->sock,
			strerror(-r));
		pthread_mutex_lock(&ia->lock);
		s->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
		if (r != -EPROTO && !s->freed && !s->stopping)
			socket_down_event(s);
		pthread_mutex_unlock(&ia->lock);
		goto out;
	}
	memcpy(s->nonce, req.nonce, CONV_NONCE_LEN);
	pthread_mutex_lock(&ia->lock);
	if (s->freed || s->stopping || req.version != CONV_VERSION || !s->ep ||
	    !deliver_request(s, &req)) {
		uint8_t reason = req.version != CONV_VERSION ? CONV_R_VERSION : CONV_R_SHUTDOWN;

		s->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
		pthread_mutex_unlock(&ia->lock);
		refuse(s, &req, reason, NULL, 0);
		goto out;
	}
	/* the one request: wait for the consumer's answer */
	while (s->verdict == V_NONE && !s->stopping)
		cond_wait(s, 0);
	if (s->stopping) {
		pthread_mutex_unlock(&ia->lock);
		goto out;
	}
	pthread_mutex_unlock(&ia->lock);
	if (s->verdict == V_REJECT) {
		refuse(s, &req, CONV_R_REFUSED, s->vpd, s->vlen);
		pthread_mutex_lock(&ia->lock);
		s->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
		s->answered = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&ia->lock);
	} else {
		passive_accept(s, &req);
	}
out:
	pthread_mutex_lock(&ia->lock);
	s->done = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&ia->lock);
	return NULL;
}

DAT_RETURN dsp_ssp_create(struct dsp_ia *ia, va_list args)
{
	DAT_IA_HANDLE consumer_ia = va_arg(args, DAT_IA_HANDLE);
	DAT_IW_SOCKET sock = va_arg(args, DAT_IW_SOCKET);
	struct dsp_ep *ep = va_arg(args, DAT_EP_HANDLE);
	struct dsp_evd *evd = va_arg(args, DAT_EVD_HANDLE);
	const void *msg = va_arg(args, DAT_PVOID);
	DAT_COUNT len = va_arg(args, DAT_COUNT);
	DAT_IW_SSP_HANDLE *out = va_arg(args, DAT_IW_SSP_HANDLE *);
	struct dsp_ssp *s;
	DAT_RETURN rc;
	int r;

	reap(ia);
	if (!dsp_check(ep, DSP_T_EP) || ep->h.ia != ia)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!dsp_check(evd, DSP_T_EVD) || evd->h.ia != ia || !(evd->flags & DAT_EVD_CR_FLAG))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
	if (len < 0 || (len > 0 && !msg))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	s = ssp_new(ia, false);
	if (!s)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (!socket_ok(ia, sock, s)) {
		ssp_delete(s);
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	s->consumer_ia = consumer_ia;
	s->sock = sock;
	s->ep = ep;
	s->evd = evd;
	s->state = DAT_IW_SSP_STATE_OPERATIONAL;

	pthread_mutex_lock(&ia->lock);
	rc = ep->state != DAT_EP_STATE_UNCONNECTED || !ep->qp || ep->conv
		     ? DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY)
		     : DAT_SUCCESS;
	pthread_mutex_unlock(&ia->lock);
	if (rc != DAT_SUCCESS) {
		ssp_delete(s);
		return rc;
	}
	/* The final streaming-mode message goes before anything can answer. */
	if (len > 0) {
		r = conv_send_bytes(sock, msg, (size_t)len, deadline_ns(SSP_SEND_MS));
		if (r) {
			DSP_DBG("ssp: the final message: %s", strerror(-r));
			ssp_delete(s);
			return r == -ETIMEDOUT ? DSP_ERR(DAT_TIMEOUT_EXPIRED, DAT_NO_SUBTYPE)
					       : DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
		}
	}
	pthread_mutex_lock(&ia->lock);
	evd->refs++;
	dsp_list_add(&ia->ssps, &s->h);
	if (pthread_create(&s->thread, NULL, passive_thread, s) != 0) {
		dsp_list_del(&ia->ssps, &s->h);
		evd->refs--;
		pthread_mutex_unlock(&ia->lock);
		ssp_delete(s);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	pthread_mutex_unlock(&ia->lock);
	DSP_DBG("ssp %p on socket %d, %d bytes sent", (void *)s, sock, (int)len);
	*out = s;
	return DAT_SUCCESS;
}

static struct dsp_ssp *get_ssp(DAT_HANDLE h)
{
	struct dsp_ssp *s = h;

	return dsp_check(s, DSP_T_SSP) && !s->active && !s->freed ? s : NULL;
}

DAT_RETURN dsp_ssp_free(DAT_HANDLE h)
{
	struct dsp_ssp *s = get_ssp(h);
	struct dsp_ia *ia;

	if (!s)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_NO_SUBTYPE);
	ia = s->h.ia;
	pthread_mutex_lock(&ia->lock);
	s->freed = true;
	s->h.magic = 0;
	s->evd->refs--;
	/* a thread still waiting for a request stays to refuse it */
	pthread_mutex_unlock(&ia->lock);
	reap(ia);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ssp_query(DAT_HANDLE h, va_list args)
{
	DAT_IW_SSP_PARAM_MASK mask = va_arg(args, DAT_IW_SSP_PARAM_MASK);
	DAT_IW_SSP_PARAM *p = va_arg(args, DAT_IW_SSP_PARAM *);
	struct dsp_ssp *s = get_ssp(h);

	if (!s)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_NO_SUBTYPE);
	if ((unsigned)mask & ~(unsigned)DAT_IW_SSP_FIELD_ALL)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!p)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	pthread_mutex_lock(&s->h.ia->lock);
	if (mask & DAT_IW_SSP_FIELD_IA_HANDLE)
		p->ia_handle = s->consumer_ia;
	if (mask & DAT_IW_SSP_FIELD_SOCKET_ID)
		p->socket_id = s->sock;
	if (mask & DAT_IW_SSP_FIELD_EVD_HANDLE)
		p->evd_handle = s->evd;
	if (mask & DAT_IW_SSP_FIELD_EP_HANDLE)
		p->ep_handle = s->ep;
	if (mask & DAT_IW_SSP_FIELD_SSP_STATE)
		p->ssp_state = s->state;
	pthread_mutex_unlock(&s->h.ia->lock);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ssp_accept(struct dsp_cr *cr, struct dsp_ep *ep, DAT_COUNT pdsize,
			  const DAT_PVOID pdata)
{
	struct dsp_ssp *s = cr->ssp;
	struct dsp_ia *ia = s->h.ia;
	DAT_RETURN rc = DAT_SUCCESS;

	if (ep && !dsp_check(ep, DSP_T_EP))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (pdsize < 0 || pdsize > CONV_MAX_PDATA || (pdsize > 0 && !pdata))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	pthread_mutex_lock(&ia->lock);
	if (ep && ep != s->ep) {
		rc = DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	} else if (!s->ep || s->stopping || s->ep->state != DAT_EP_STATE_UNCONNECTED ||
		   !s->ep->qp || s->ep->conv) {
		rc = DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	} else {
		s->ep->state = DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
		s->vlen = pdsize;
		if (pdsize)
			memcpy(s->vpd, pdata, (size_t)pdsize);
		s->verdict = V_ACCEPT;
		s->cr = NULL;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&ia->lock);
	if (rc == DAT_SUCCESS)
		dsp_cr_destroy(cr);
	return rc;
}

DAT_RETURN dsp_ssp_reject(struct dsp_cr *cr, DAT_COUNT pdsize, const DAT_PVOID pdata)
{
	struct dsp_ssp *s = cr->ssp;
	struct dsp_ia *ia = s->h.ia;

	if (pdsize < 0 || pdsize > CONV_MAX_PDATA || (pdsize > 0 && !pdata))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ia->lock);
	s->vlen = pdsize;
	if (pdsize)
		memcpy(s->vpd, pdata, (size_t)pdsize);
	s->verdict = V_REJECT;
	s->cr = NULL;
	pthread_cond_broadcast(&s->cond);
	/* the socket is the consumer's again once the FINs are exchanged */
	while (!s->answered && !s->done && !s->stopping)
		cond_wait(s, 0);
	pthread_mutex_unlock(&ia->lock);
	dsp_cr_destroy(cr);
	return DAT_SUCCESS;
}

/* ---- active side ----------------------------------------------------------------- */

static DAT_EVENT_NUMBER refused_event(uint8_t reason)
{
	return reason == CONV_R_REFUSED || reason == CONV_R_SHUTDOWN
		       ? DAT_CONNECTION_EVENT_PEER_REJECTED
		       : DAT_CONNECTION_EVENT_NON_PEER_REJECTED;
}

/*
 * The answer did not come in time: tell the peer and, until the end of
 * the connect's timeout (the part kept back for this), take its RSP and
 * FIN if it answers after all, so that they do not stay in the stream.
 * A peer that answers later still leaves them there.
 */
static void abandon(struct dsp_ssp *s, uint64_t until)
{
	struct conv_frame fin = { .type = CONV_FIN, .status = CONV_FAILED, .reason = CONV_R_TIMEOUT };
	struct conv_frame f;

	if (conv_send(s->sock, &fin, until))
		return;
	if (!recv_frame(s, &f, until) && f.type == CONV_RSP)
		recv_frame(s, &f, until);
}

static void *active_thread(void *arg)
{
	struct dsp_ssp *s = arg;
	struct dsp_ia *ia = s->h.ia;
	struct conv_frame req = { .type = CONV_REQ }, rsp;
	uint64_t deadline = s->timeout == DAT_TIMEOUT_INFINITE
				    ? 0
				    : conv_now_ns() + (uint64_t)s->timeout * 1000ull;
	/* the answer is awaited until the last quarter of the timeout (at
	 * most SSP_ABANDON_MS of it), which is kept for giving up cleanly */
	uint64_t keep = s->timeout == DAT_TIMEOUT_INFINITE ? 0 : (uint64_t)s->timeout * 250ull;
	uint64_t answer_by;

	if (keep > (uint64_t)SSP_ABANDON_MS * 1000000ull)
		keep = (uint64_t)SSP_ABANDON_MS * 1000000ull;
	answer_by = deadline ? deadline - keep : 0;
	DAT_EVENT_NUMBER fail = DAT_CONNECTION_EVENT_UNREACHABLE;
	const void *fail_pd = NULL;
	int fail_len = 0, r;

	memcpy(req.nonce, s->nonce, CONV_NONCE_LEN);
	req.pdata_len = (uint16_t)s->pdlen;
	memcpy(req.pdata, s->pd, (size_t)s->pdlen);
	r = conv_send(s->sock, &req, deadline);
	if (r) {
		DSP_DBG("socket connect: the request: %s", strerror(-r));
		fail = r == -ETIMEDOUT ? DAT_CONNECTION_EVENT_TIMED_OUT : fail;
		goto failed;
	}
	r = recv_frame(s, &rsp, answer_by);
	if (r == -ECANCELED)
		goto out;
	if (r == -ETIMEDOUT) {
		abandon(s, deadline);
		fail = DAT_CONNECTION_EVENT_TIMED_OUT;
		goto failed;
	}
	if (r == -EPROTO || (!r && (rsp.type != CONV_RSP ||
				    memcmp(rsp.nonce, req.nonce, CONV_NONCE_LEN)))) {
		/* stream data: the peer does not convert; its bytes stay */
		fail = DAT_CONNECTION_EVENT_NON_PEER_REJECTED;
		goto failed;
	}
	if (r)
		goto failed;
	if (rsp.status != CONV_OK) {
		exchange_fins(s, CONV_FAILED, CONV_R_NONE, false, NULL);
		fail = refused_event(rsp.reason);
		fail_pd = rsp.pdata;
		fail_len = rsp.pdata_len;
		goto failed;
	}

	/* The RDMA connection, to the socket's peer address. */
	struct sockaddr_storage dst = s->peer;
	DAT_RETURN rc;

	vc_sa_set_port((struct sockaddr *)&dst, rsp.port);
	pthread_mutex_lock(&ia->lock);
	if (s->stopping || !s->ep) {
		pthread_mutex_unlock(&ia->lock);
		goto out;
	}
	if (s->nev) {
		rc = DSP_ERR(DAT_ABORT, DAT_NO_SUBTYPE);	/* disconnected meanwhile */
	} else {
		uint64_t now = conv_now_ns();
		DAT_TIMEOUT left = !deadline ? DAT_TIMEOUT_INFINITE
				   : deadline > now ? (DAT_TIMEOUT)((deadline - now) / 1000ull) + 1
						    : 1;

		s->ep->pdata_len = dsp_frame_connect_pdata(ia, s->ep->pdata, s->nonce,
							   CONV_NONCE_LEN);
		rc = dsp_ep_start_connect(s->ep, &dst, left);
		s->matched = rc == DAT_SUCCESS;
	}
	if (rc != DAT_SUCCESS) {
		pthread_mutex_unlock(&ia->lock);
		exchange_fins(s, CONV_FAILED, CONV_R_CONNECT, false, NULL);
		goto failed;
	}
	while (!s->nev && !s->stopping)
		cond_wait(s, 0);	/* the EP's deadline bounds it */
	bool stopping = s->stopping;
	DAT_EVENT_NUMBER first = s->nev ? s->ev[0].num : 0;

	pthread_mutex_unlock(&ia->lock);
	if (stopping)
		goto out;
	if (first != DAT_CONNECTION_EVENT_ESTABLISHED) {
		exchange_fins(s, CONV_FAILED, CONV_R_CONNECT, false, NULL);
		/* our own listener on the far side never refuses the nonce */
		fail = first == DAT_CONNECTION_EVENT_PEER_REJECTED ||
				       first == DAT_CONNECTION_EVENT_NON_PEER_REJECTED
			       ? DAT_CONNECTION_EVENT_UNREACHABLE
			       : first;
		goto failed;
	}
	r = exchange_fins(s, CONV_OK, CONV_R_NONE, false, NULL);
	if (r) {
		DSP_DBG("socket connect: the peer's verdict: %s", strerror(-r));
		goto failed;
	}
	/* Converted: the socket was the EP's, and the EP needs it no more. */
	shutdown(s->sock, SHUT_RDWR);
	close(s->sock);
	pthread_mutex_lock(&ia->lock);
	finish_ep(s, true, 0, rsp.pdata, rsp.pdata_len);
	pthread_mutex_unlock(&ia->lock);
	goto out;
failed:
	pthread_mutex_lock(&ia->lock);
	finish_ep(s, false, fail, fail_pd, fail_len);
	pthread_mutex_unlock(&ia->lock);
out:
	pthread_mutex_lock(&ia->lock);
	s->done = true;
	pthread_mutex_unlock(&ia->lock);
	return NULL;
}

DAT_RETURN dsp_socket_connect(DAT_HANDLE h, va_list args)
{
	struct dsp_ep *ep = h;
	DAT_IW_SOCKET sock = va_arg(args, DAT_IW_SOCKET);
	DAT_TIMEOUT timeout = va_arg(args, DAT_TIMEOUT);
	DAT_COUNT pdsize = va_arg(args, DAT_COUNT);
	const void *pdata = va_arg(args, DAT_PVOID);
	struct dsp_ia *ia;
	struct dsp_ssp *s;
	DAT_RETURN rc = DAT_SUCCESS;

	if (!dsp_check(ep, DSP_T_EP))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	ia = ep->h.ia;
	reap(ia);
	if (timeout == 0)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (pdsize < 0 || pdsize > CONV_MAX_PDATA)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (pdsize > 0 && !pdata)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	s = ssp_new(ia, true);
	if (!s)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (!socket_ok(ia, sock, s)) {
		ssp_delete(s);
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	if (getrandom(s->nonce, CONV_NONCE_LEN, 0) != CONV_NONCE_LEN) {
		ssp_delete(s);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_NO_SUBTYPE);
	}
	s->sock = sock;
	s->ep = ep;
	s->timeout = timeout;
	s->pdlen = pdsize;
	if (pdsize)
		memcpy(s->pd, pdata, (size_t)pdsize);

	pthread_mutex_lock(&ia->lock);
	if (ep->state != DAT_EP_STATE_UNCONNECTED || !ep->id || !ep->qp || ep->conv) {
		rc = DSP_ERR(DAT_INVALID_STATE, ep->state == DAT_EP_STATE_CONNECTED
						       ? DAT_INVALID_STATE_EP_CONNECTED
						       : DAT_INVALID_STATE_EP_NOTREADY);
	} else {
		ep->state = DAT_EP_STATE_ACTIVE_CONNECTION_PENDING;
		ep->conv = s;
		dsp_list_add(&ia->ssps, &s->h);
		if (pthread_create(&s->thread, NULL, active_thread, s) != 0) {
			dsp_list_del(&ia->ssps, &s->h);
			ep->conv = NULL;
			ep->state = DAT_EP_STATE_UNCONNECTED;
			rc = DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		}
	}
	pthread_mutex_unlock(&ia->lock);
	if (rc != DAT_SUCCESS)
		ssp_delete(s);
	return rc;
}

/* ---- the EP and the IA going -------------------------------------------------------- */

static void stop_and_join(struct dsp_ia *ia, struct dsp_ssp *s)
{
	pthread_mutex_lock(&ia->lock);
	stop(s);
	pthread_mutex_unlock(&ia->lock);
	if (!s->joined) {
		pthread_join(s->thread, NULL);
		s->joined = true;
	}
}

void dsp_ssp_release_ep(struct dsp_ep *ep)
{
	struct dsp_ia *ia = ep->h.ia;

	for (;;) {
		struct dsp_ssp *found = NULL;
		struct dsp_hdr *h;

		pthread_mutex_lock(&ia->lock);
		for (h = ia->ssps.head.next; h != &ia->ssps.head; h = h->next) {
			struct dsp_ssp *s = (struct dsp_ssp *)h;

			if (s->ep == ep) {
				found = s;
				break;
			}
		}
		if (ep->conv)
			ep->conv = NULL;
		pthread_mutex_unlock(&ia->lock);
		if (!found)
			break;
		stop_and_join(ia, found);
		pthread_mutex_lock(&ia->lock);
		found->ep = NULL;
		found->state = DAT_IW_SSP_STATE_NON_OPERATIONAL;
		pthread_mutex_unlock(&ia->lock);
		close_listener(found);
	}
	reap(ia);
}

struct dsp_ep *dsp_ssp_ep(struct dsp_ssp *s)
{
	struct dsp_ep *ep;

	pthread_mutex_lock(&s->h.ia->lock);
	ep = s->ep;
	pthread_mutex_unlock(&s->h.ia->lock);
	return ep;
}

bool dsp_ssp_any_open(struct dsp_ia *ia)
{
	struct dsp_hdr *h;

	for (h = ia->ssps.head.next; h != &ia->ssps.head; h = h->next)
		if (h->magic == DSP_MAGIC)
			return true;
	return false;
}

void dsp_ssp_close_all(struct dsp_ia *ia)
{
	struct dsp_hdr *h;

	for (h = ia->ssps.head.next; h != &ia->ssps.head; h = h->next)
		stop_and_join(ia, (struct dsp_ssp *)h);
	while ((h = ia->ssps.head.next) != &ia->ssps.head) {
		struct dsp_ssp *s = (struct dsp_ssp *)h;

		close_listener(s);
		pthread_mutex_lock(&ia->lock);
		/* a stopped thread may have left the EP's events held */
		if (s->ep && s->ep->conv == s)
			s->ep->conv = NULL;
		dsp_list_del(&ia->ssps, h);
		if (!s->active && !s->freed)
			s->evd->refs--;
		pthread_mutex_unlock(&ia->lock);
		ssp_delete(s);
	}
}
