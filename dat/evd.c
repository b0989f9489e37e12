/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: Event Dispatchers.
 *
 * An EVD is a bounded ring of DAT_EVENTs (qlen, plus a little room when
 * the EVD also takes connection or software events) and, when it has
 * DAT_EVD_DTO_FLAG, a CQ with a completion channel of its own.
 *
 * Progress is done in the waiter: dat_evd_wait and dat_evd_dequeue poll
 * the CQ themselves (only as many completions as the ring has room for,
 * so nothing is ever lost; the rest stays in the CQ), and dat_evd_wait
 * sleeps in poll() on the completion channel and on an eventfd that the
 * IA's progress thread (ia.c) writes after queueing connection, CR or
 * async events.  So no thread of ours ever touches a CQ while the
 * consumer does not ask for events, and a DTO-only program pays for no
 * thread hand-off.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "provider.h"

#define DSP_EVD_EXTRA 16	/* room for non-DTO events in a merged EVD */
#define DSP_CQ_MIN 64

static DAT_DTO_COMPLETION_STATUS wc_status(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return DAT_DTO_SUCCESS;
	case IBV_WC_WR_FLUSH_ERR: return DAT_DTO_ERR_FLUSHED;
	case IBV_WC_LOC_LEN_ERR: return DAT_DTO_ERR_LOCAL_LENGTH;
	case IBV_WC_LOC_QP_OP_ERR: return DAT_DTO_ERR_LOCAL_EP;
	case IBV_WC_LOC_PROT_ERR: return DAT_DTO_ERR_LOCAL_PROTECTION;
	case IBV_WC_BAD_RESP_ERR: return DAT_DTO_ERR_BAD_RESPONSE;
	case IBV_WC_REM_ACCESS_ERR: return DAT_DTO_ERR_REMOTE_ACCESS;
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR: return DAT_DTO_ERR_REMOTE_RESPONDER;
	case IBV_WC_RNR_RETRY_EXC_ERR: return DAT_DTO_ERR_RECEIVER_NOT_READY;
	default: return DAT_DTO_ERR_TRANSPORT;
	}
}

/* Ring operations, evd->lock held. */
static bool ring_put(struct dsp_evd *evd, const DAT_EVENT *ev)
{
	if (evd->count == evd->cap)
		return false;
	evd->ring[(evd->head + evd->count) % evd->cap] = *ev;
	evd->count++;
	return true;
}

static void ring_get(struct dsp_evd *evd, DAT_EVENT *ev)
{
	*ev = evd->ring[evd->head];
	evd->head = (evd->head + 1) % evd->cap;
	evd->count--;
}

/* Move completions from the CQ to the ring while it has room (all of
 * them when drain: completions of EPs being freed must leave the CQ). */
static void poll_cq_locked(struct dsp_evd *evd, bool drain)
{
	struct ibv_wc wc[8];

	if (!evd->vcq.cq)
		return;
	for (;;) {
		int room = drain ? 8 : evd->cap - evd->count;
		int n;

		if (room <= 0)
			return;
		n = ibv_poll_cq(evd->vcq.cq, room < 8 ? room : 8, wc);
		if (n <= 0)
			return;
		for (int i = 0; i < n; i++) {
			struct dsp_slot *s = (struct dsp_slot *)(uintptr_t)wc[i].wr_id;
			struct dsp_ep *ep;
			DAT_EVENT ev;

			if (!s)	/* an unsignalled request's error: nobody to tell */
				continue;
			ep = s->ep;
			memset(&ev, 0, sizeof(ev));
			ev.event_number = DAT_DTO_COMPLETION_EVENT;
			ev.evd_handle = evd;
			ev.event_data.dto_completion_event_data.ep_handle = ep;
			ev.event_data.dto_completion_event_data.user_cookie = s->cookie;
			ev.event_data.dto_completion_event_data.status = wc_status(wc[i].status);
			ev.event_data.dto_completion_event_data.operation = s->op;
			if (wc[i].status == IBV_WC_SUCCESS)
				ev.event_data.dto_completion_event_data.transfered_length =
					s->op == DAT_DTO_RECEIVE ? wc[i].byte_len : s->len;
			if (wc[i].status != IBV_WC_SUCCESS)
				DSP_DBG("completion error %s on ep %p op %d",
					ibv_wc_status_str(wc[i].status), (void *)ep, (int)s->op);
			dsp_slot_put(s);
			if (ep->freeing)
				continue;
			if (!ring_put(evd, &ev))
				DSP_DBG("evd %p overflow: completion dropped", (void *)evd);
		}
	}
}

void dsp_evd_drain_cq(struct dsp_evd *evd)
{
	pthread_mutex_lock(&evd->lock);
	poll_cq_locked(evd, true);
	pthread_mutex_unlock(&evd->lock);
}

bool dsp_evd_push(struct dsp_evd *evd, const DAT_EVENT *ev)
{
	bool ok;
	uint64_t one = 1;

	pthread_mutex_lock(&evd->lock);
	ok = ring_put(evd, ev);
	pthread_mutex_unlock(&evd->lock);
	if (!ok) {
		DSP_DBG("evd %p full: event 0x%x dropped", (void *)evd, ev->event_number);
		return false;
	}
	if (write(evd->efd, &one, sizeof(one)) < 0)
		DSP_DBG("eventfd write: %s", strerror(errno));
	return true;
}

static struct dsp_evd *get_evd(DAT_EVD_HANDLE h)
{
	return dsp_check(h, DSP_T_EVD) ? (struct dsp_evd *)h : NULL;
}

#define EVD_OR_FAIL(evd, h)                                                   \
	struct dsp_evd *evd = get_evd(h);                                      \
	if (!evd)                                                              \
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_NO_SUBTYPE)

DAT_RETURN dsp_evd_create(DAT_IA_HANDLE ia_handle, DAT_COUNT qlen, DAT_CNO_HANDLE cno,
			  DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *out)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_evd *evd;
	const DAT_EVD_FLAGS known = DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG |
				    DAT_EVD_CONNECTION_FLAG | DAT_EVD_RMR_BIND_FLAG |
				    DAT_EVD_ASYNC_FLAG;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (qlen <= 0 || qlen > ia->dev_attr.max_cqe)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (cno != DAT_HANDLE_NULL)
		return DSP_NOT_IMPL;	/* no CNOs */
	if (!flags || (flags & ~known))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	evd = calloc(1, sizeof(*evd));
	if (!evd)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	dsp_hdr_init(&evd->h, ia, DSP_T_EVD);
	evd->flags = flags;
	evd->qlen = qlen;
	evd->cap = qlen + ((flags & ~DAT_EVD_DTO_FLAG) ? DSP_EVD_EXTRA : 0);
	evd->enabled = true;
	evd->waitable = true;
	pthread_mutex_init(&evd->lock, NULL);
	evd->ring = calloc((size_t)evd->cap, sizeof(DAT_EVENT));
	evd->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!evd->ring || evd->efd < 0)
		goto nomem;
	if (flags & DAT_EVD_DTO_FLAG) {
		int cqe = qlen < DSP_CQ_MIN ? DSP_CQ_MIN : qlen;

		if (cqe > ia->dev_attr.max_cqe)
			cqe = ia->dev_attr.max_cqe;
		if (vc_cq_open(ia->verbs, cqe, evd, NULL, &evd->vcq) != 0)
			goto nomem;
	}
	pthread_mutex_lock(&ia->lock);
	dsp_list_add(&ia->evds, &evd->h);
	pthread_mutex_unlock(&ia->lock);
	*out = evd;
	return DAT_SUCCESS;
nomem:
	if (evd->efd >= 0)
		close(evd->efd);
	free(evd->ring);
	pthread_mutex_destroy(&evd->lock);
	free(evd);
	return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

void dsp_evd_destroy(struct dsp_evd *evd)
{
	struct dsp_ia *ia = evd->h.ia;

	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->evds, &evd->h);
	pthread_mutex_unlock(&ia->lock);
	evd->h.magic = 0;
	vc_cq_close(&evd->vcq);
	close(evd->efd);
	free(evd->ring);
	pthread_mutex_destroy(&evd->lock);
	free(evd);
}

DAT_RETURN dsp_evd_free(DAT_EVD_HANDLE h)
{
	EVD_OR_FAIL(evd, h);
	struct dsp_ia *ia = evd->h.ia;

	pthread_mutex_lock(&ia->lock);
	if (evd->refs > 0 || evd->waiters > 0) {
		pthread_mutex_unlock(&ia->lock);
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	}
	pthread_mutex_unlock(&ia->lock);
	dsp_evd_destroy(evd);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_query(DAT_EVD_HANDLE h, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *param)
{
	EVD_OR_FAIL(evd, h);

	if (!param)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	memset(param, 0, sizeof(*param));
	param->ia_handle = evd->h.ia;
	param->evd_qlen = evd->qlen;
	param->evd_state = (evd->enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
			   (evd->waitable ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE);
	param->cno_handle = DAT_HANDLE_NULL;
	param->evd_flags = evd->flags;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_enable(DAT_EVD_HANDLE h)
{
	EVD_OR_FAIL(evd, h);

	pthread_mutex_lock(&evd->lock);
	evd->enabled = true;
	pthread_mutex_unlock(&evd->lock);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_disable(DAT_EVD_HANDLE h)
{
	EVD_OR_FAIL(evd, h);

	pthread_mutex_lock(&evd->lock);
	evd->enabled = false;
	pthread_mutex_unlock(&evd->lock);
	return DAT_SUCCESS;
}

/* A waiter is woken (and gets DAT_INVALID_STATE) by set_unwaitable. */
DAT_RETURN dsp_evd_set_unwaitable(DAT_EVD_HANDLE h)
{
	EVD_OR_FAIL(evd, h);
	uint64_t one = 1;

	pthread_mutex_lock(&evd->lock);
	evd->waitable = false;
	pthread_mutex_unlock(&evd->lock);
	if (write(evd->efd, &one, sizeof(one)) < 0)
		DSP_DBG("eventfd write: %s", strerror(errno));
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_clear_unwaitable(DAT_EVD_HANDLE h)
{
	EVD_OR_FAIL(evd, h);

	pthread_mutex_lock(&evd->lock);
	evd->waitable = true;
	pthread_mutex_unlock(&evd->lock);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_resize(DAT_EVD_HANDLE h, DAT_COUNT qlen)
{
	(void)h;
	(void)qlen;
	return DSP_NOT_IMPL;
}

DAT_RETURN dsp_evd_post_se(DAT_EVD_HANDLE h, const DAT_EVENT *event)
{
	EVD_OR_FAIL(evd, h);
	DAT_EVENT ev;

	if (!(evd->flags & DAT_EVD_SOFTWARE_FLAG))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	if (!event || event->event_number != DAT_SOFTWARE_EVENT)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	ev = *event;
	ev.evd_handle = evd;
	if (!dsp_evd_push(evd, &ev))
		return DSP_ERR(DAT_QUEUE_FULL, DAT_NO_SUBTYPE);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT *event)
{
	EVD_OR_FAIL(evd, h);
	DAT_RETURN rc = DAT_SUCCESS;

	if (!event)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&evd->lock);
	poll_cq_locked(evd, false);
	if (evd->count > 0)
		ring_get(evd, event);
	else
		rc = DSP_ERR(DAT_QUEUE_EMPTY, DAT_NO_SUBTYPE);
	pthread_mutex_unlock(&evd->lock);
	return rc;
}

static void drain_efd(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
}

DAT_RETURN dsp_evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold,
			DAT_EVENT *event, DAT_COUNT *nmore)
{
	EVD_OR_FAIL(evd, h);
	DAT_RETURN rc = DAT_SUCCESS;
	uint64_t deadline = 0;

	if (threshold <= 0 || threshold > evd->qlen)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!event)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!nmore)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (timeout != DAT_TIMEOUT_INFINITE)
		deadline = vc_now_ms() + (timeout + 999) / 1000;

	pthread_mutex_lock(&evd->lock);
	if (!evd->waitable) {
		pthread_mutex_unlock(&evd->lock);
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
	}
	if (evd->waiters) {
		pthread_mutex_unlock(&evd->lock);
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	}
	evd->waiters++;
	for (;;) {
		struct pollfd pfd[2];
		int n = 0, ms = -1;

		drain_efd(evd->efd);
		poll_cq_locked(evd, false);
		if (evd->count >= threshold)
			break;
		if (!evd->waitable) {
			rc = DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
			break;
		}
		if (evd->vcq.cq && !evd->armed) {
			/* arm, then look again: a completion between the poll
			 * and the arming would not raise the channel */
			if (ibv_req_notify_cq(evd->vcq.cq, 0) != 0) {
				rc = DSP_ERR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
				break;
			}
			evd->armed = true;
			continue;
		}
		if (deadline) {
			uint64_t now = vc_now_ms();

			if (now >= deadline) {
				rc = DSP_ERR(DAT_TIMEOUT_EXPIRED, DAT_NO_SUBTYPE);
				break;
			}
			ms = (int)(deadline - now);
		}
		pfd[n++] = (struct pollfd){ .fd = evd->efd, .events = POLLIN };
		if (evd->vcq.cc)
			pfd[n++] = (struct pollfd){ .fd = evd->vcq.cc->fd, .events = POLLIN };
		pthread_mutex_unlock(&evd->lock);
		if (poll(pfd, (nfds_t)n, ms) < 0 && errno != EINTR) {
			pthread_mutex_lock(&evd->lock);
			rc = DSP_ERR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
			break;
		}
		pthread_mutex_lock(&evd->lock);
		if (n > 1 && pfd[1].revents && vc_cq_take_events(&evd->vcq) > 0)
			evd->armed = false;
	}
	if (rc == DAT_SUCCESS)
		ring_get(evd, event);
	*nmore = evd->count;
	evd->waiters--;
	pthread_mutex_unlock(&evd->lock);
	return rc;
}
