/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: Endpoints.  An EP is an RC QP created on an rdma_cm id of
 * its own (bound to the IA's address, so that it has a device), with the
 * request EVD's CQ as send CQ and the receive EVD's CQ as receive CQ.
 * The active side connects that id; on the passive side dat_cr_accept
 * moves the QP to the connect request's id (cr.c), as upstream DAPL's cma
 * provider does, so receives posted before the accept are kept.
 *
 * Every signalled work request has a slot (struct dsp_slot) that its
 * wr_id points to: the cookie, the operation and the length a DTO event
 * needs.  DAT_COMPLETION_SUPPRESS_FLAG requests go unsignalled with a
 * wr_id of 0.
 *
 * Connect: rdma_resolve_addr, rdma_resolve_route and rdma_connect are
 * chained by the IA's progress thread (dsp_ep_cm_event), which also
 * enforces the consumer's connect timeout (DAT_CONNECTION_EVENT_TIMED_OUT).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "provider.h"

#define DSP_MAX_SGE 32
#define DSP_DEF_DTOS 64

static struct dsp_ep *get_ep(DAT_EP_HANDLE h)
{
	return dsp_check(h, DSP_T_EP) ? (struct dsp_ep *)h : NULL;
}

#define EP_OR_FAIL(ep, h)                                                     \
	struct dsp_ep *ep = get_ep(h);                                         \
	if (!ep)                                                               \
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)

static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* ---- slots ------------------------------------------------------------------ */

static struct dsp_slot *slot_get(struct dsp_ep *ep, bool recv)
{
	struct dsp_slot *s;

	pthread_mutex_lock(&ep->slot_lock);
	s = ep->free_slots;
	if (s) {
		ep->free_slots = s->next_free;
		ep->outstanding++;
		if (recv)
			ep->out_recv++;
	}
	pthread_mutex_unlock(&ep->slot_lock);
	return s;
}

void dsp_slot_put(struct dsp_slot *s)
{
	struct dsp_ep *ep = s->ep;

	pthread_mutex_lock(&ep->slot_lock);
	if (s->op == DAT_DTO_RECEIVE)
		ep->out_recv--;
	ep->outstanding--;
	s->next_free = ep->free_slots;
	ep->free_slots = s;
	pthread_mutex_unlock(&ep->slot_lock);
}

/* ---- QP and id -------------------------------------------------------------- */

static void cq_account(struct dsp_evd *evd, int n)
{
	pthread_mutex_lock(&evd->lock);
	evd->cq_used += n;
	if (n > 0 && evd->cq_used > evd->vcq.cq->cqe &&
	    RDMA(ibv_resize_cq(evd->vcq.cq, evd->cq_used)) != 0)
		DSP_DBG("cq of evd %p: %d requests on %d entries (resize failed)",
			(void *)evd, evd->cq_used, evd->vcq.cq->cqe);
	pthread_mutex_unlock(&evd->lock);
}

/* A fresh id bound to the IA's address and a QP on it. */
static DAT_RETURN qp_setup(struct dsp_ep *ep)
{
	struct dsp_ia *ia = ep->h.ia;
	struct ibv_qp_init_attr qa;
	int r;

	if (vc_id_new(ia->ch, &ep->id, ep) != 0)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	if (vc_bind(ep->id, (struct sockaddr *)&ia->addr, true) != 0 ||
	    ep->id->verbs != ia->verbs) {
		vc_id_free(ep->id);
		ep->id = NULL;
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = ep;
	qa.send_cq = ep->req_evd->vcq.cq;
	qa.recv_cq = ep->recv_evd->vcq.cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	/* more on iWARP for the start rule's writes (vcore.h) */
	qa.cap.max_send_wr = (uint32_t)ep->attr.max_request_dtos + (ia->iwarp ? VC_RTR_SQ_ROOM : 0);
	qa.cap.max_recv_wr = (uint32_t)ep->attr.max_recv_dtos;
	qa.cap.max_send_sge = (uint32_t)ep->attr.max_request_iov;
	qa.cap.max_recv_sge = (uint32_t)ep->attr.max_recv_iov;
	r = vc_qp_new(ep->id, ep->pz->pd, &qa);
	if (r) {
		DSP_DBG("rdma_create_qp: %s", strerror(-r));
		vc_id_free(ep->id);
		ep->id = NULL;
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	}
	ep->qp = ep->id->qp;
	ep->state = DAT_EP_STATE_UNCONNECTED;
	ep->disconnect_called = false;
	ep->deadline_ms = 0;
	vc_rtr_reset(&ep->rtr);
	return DAT_SUCCESS;
}

/* Flush the QP, collect its completions, destroy QP and id.  Called
 * without ia->lock.  Returns false when completions are still owed (the
 * slots must then outlive the EP). */
static bool qp_teardown(struct dsp_ep *ep)
{
	struct dsp_ia *ia = ep->h.ia;
	struct rdma_cm_id *id;
	uint64_t until = vc_now_ms() + 2000;
	bool drained;

	pthread_mutex_lock(&ia->lock);
	id = ep->id;
	ep->id = NULL;
	if (id)
		id->context = NULL;	/* late events find no EP */
	pthread_mutex_unlock(&ia->lock);
	if (ep->qp) {
		vc_qp_flush(ep->qp);
		for (;;) {
			dsp_evd_drain_cq(ep->req_evd);
			dsp_evd_drain_cq(ep->recv_evd);
			pthread_mutex_lock(&ep->slot_lock);
			drained = ep->outstanding == 0;
			pthread_mutex_unlock(&ep->slot_lock);
			if (drained || vc_now_ms() >= until)
				break;
			usleep(1000);
		}
		vc_qp_destroy(id, ep->qp);
		ep->qp = NULL;
	}
	vc_id_free(id);
	pthread_mutex_lock(&ep->slot_lock);
	drained = ep->outstanding == 0;
	pthread_mutex_unlock(&ep->slot_lock);
	return drained;
}

/* ---- create / free ---------------------------------------------------------- */

static void default_attr(const struct dsp_ia *ia, DAT_EP_ATTR *a)
{
	const struct ibv_device_attr *d = &ia->dev_attr;

	memset(a, 0, sizeof(*a));
	a->service_type = DAT_SERVICE_TYPE_RC;
	a->max_message_size = 1u << 30;
	a->max_rdma_size = 1u << 30;
	a->qos = DAT_QOS_BEST_EFFORT;
	a->recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->max_recv_dtos = imin(DSP_DEF_DTOS, d->max_qp_wr);
	a->max_request_dtos = imin(DSP_DEF_DTOS, d->max_qp_wr);
	a->max_recv_iov = imin(4, d->max_sge);
	a->max_request_iov = imin(4, d->max_sge);
	a->max_rdma_read_in = imin(4, d->max_qp_rd_atom);
	a->max_rdma_read_out = imin(4, d->max_qp_init_rd_atom);
	a->max_rdma_read_iov = 1;
	a->max_rdma_write_iov = a->max_request_iov;
}

DAT_RETURN dsp_ep_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle,
			 DAT_EVD_HANDLE recv_evd_h, DAT_EVD_HANDLE req_evd_h,
			 DAT_EVD_HANDLE conn_evd_h, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_pz *pz = pz_handle;
	struct dsp_evd *recv_evd = recv_evd_h, *req_evd = req_evd_h, *conn_evd = conn_evd_h;
	const struct ibv_device_attr *d;
	struct dsp_ep *ep;
	DAT_RETURN rc;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	d = &ia->dev_attr;
	/* an EP without PZ or EVDs (UNCONFIGURED) is not supported */
	if (!dsp_check(pz, DSP_T_PZ) || pz->h.ia != ia)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!dsp_check(recv_evd, DSP_T_EVD) || !(recv_evd->flags & DAT_EVD_DTO_FLAG))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV);
	if (!dsp_check(req_evd, DSP_T_EVD) || !(req_evd->flags & DAT_EVD_DTO_FLAG))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
	if (!dsp_check(conn_evd, DSP_T_EVD) || !(conn_evd->flags & DAT_EVD_CONNECTION_FLAG))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (attr)
		ep->attr = *attr;
	else
		default_attr(ia, &ep->attr);
	if (ep->attr.service_type != DAT_SERVICE_TYPE_RC ||
	    ep->attr.max_recv_dtos <= 0 || ep->attr.max_recv_dtos > d->max_qp_wr ||
	    ep->attr.max_request_dtos <= 0 || ep->attr.max_request_dtos > d->max_qp_wr ||
	    ep->attr.max_recv_iov <= 0 || ep->attr.max_recv_iov > imin(d->max_sge, DSP_MAX_SGE) ||
	    ep->attr.max_request_iov <= 0 ||
	    ep->attr.max_request_iov > imin(d->max_sge, DSP_MAX_SGE) ||
	    ep->attr.max_rdma_read_in < 0 || ep->attr.max_rdma_read_in > d->max_qp_rd_atom ||
	    ep->attr.max_rdma_read_out < 0 ||
	    ep->attr.max_rdma_read_out > d->max_qp_init_rd_atom) {
		free(ep);
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	}
	/* we never point into the consumer's attribute lists */
	ep->attr.ep_transport_specific_count = 0;
	ep->attr.ep_transport_specific = NULL;
	ep->attr.ep_provider_specific_count = 0;
	ep->attr.ep_provider_specific = NULL;
	dsp_hdr_init(&ep->h, ia, DSP_T_EP);
	ep->pz = pz;
	ep->recv_evd = recv_evd;
	ep->req_evd = req_evd;
	ep->conn_evd = conn_evd;
	pthread_mutex_init(&ep->slot_lock, NULL);
	ep->nslots = ep->attr.max_recv_dtos + ep->attr.max_request_dtos;
	ep->slots = calloc((size_t)ep->nslots, sizeof(*ep->slots));
	if (!ep->slots) {
		free(ep);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	for (int i = 0; i < ep->nslots; i++) {
		ep->slots[i].ep = ep;
		ep->slots[i].next_free = ep->free_slots;
		ep->free_slots = &ep->slots[i];
	}
	if (ia->iwarp) {
		/* the start rule's word, written by the initiator */
		int r = vc_rtr_init(&ep->rtr, pz->pd);

		if (r) {
			DSP_DBG("ibv_reg_mr (the start rule's word): %s", strerror(-r));
			free(ep->slots);
			free(ep);
			return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		}
	}
	cq_account(req_evd, ep->attr.max_request_dtos);
	cq_account(recv_evd, ep->attr.max_recv_dtos);
	rc = qp_setup(ep);
	if (rc != DAT_SUCCESS) {
		cq_account(req_evd, -ep->attr.max_request_dtos);
		cq_account(recv_evd, -ep->attr.max_recv_dtos);
		vc_rtr_fini(&ep->rtr);
		free(ep->slots);
		free(ep);
		return rc;
	}
	pthread_mutex_lock(&ia->lock);
	pz->refs++;
	recv_evd->refs++;
	req_evd->refs++;
	conn_evd->refs++;
	dsp_list_add(&ia->eps, &ep->h);
	pthread_mutex_unlock(&ia->lock);
	*out = ep;
	return DAT_SUCCESS;
}

void dsp_ep_destroy(struct dsp_ep *ep)
{
	struct dsp_ia *ia = ep->h.ia;
	bool drained;

	dsp_ssp_release_ep(ep);
	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->eps, &ep->h);
	ep->freeing = true;
	if (ep->state == DAT_EP_STATE_CONNECTED ||
	    ep->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING ||
	    ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING)
		vc_disconnect_once(ep->id, &ep->disconnect_called);
	pthread_mutex_unlock(&ia->lock);
	drained = qp_teardown(ep);
	if (drained)
		vc_rtr_fini(&ep->rtr);	/* no QP can write it any more */
	cq_account(ep->req_evd, -ep->attr.max_request_dtos);
	cq_account(ep->recv_evd, -ep->attr.max_recv_dtos);
	pthread_mutex_lock(&ia->lock);
	ep->pz->refs--;
	ep->recv_evd->refs--;
	ep->req_evd->refs--;
	ep->conn_evd->refs--;
	pthread_mutex_unlock(&ia->lock);
	ep->h.magic = 0;
	if (!drained) {
		/* completions still name these slots: keep them (a leak, not a
		 * use after free) */
		DSP_DBG("ep %p freed with %d requests unaccounted", (void *)ep, ep->outstanding);
		return;
	}
	pthread_mutex_destroy(&ep->slot_lock);
	free(ep->slots);
	free(ep);
}

DAT_RETURN dsp_ep_free(DAT_EP_HANDLE h)
{
	EP_OR_FAIL(ep, h);

	dsp_ep_destroy(ep);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ep_reset(DAT_EP_HANDLE h)
{
	EP_OR_FAIL(ep, h);
	struct dsp_ia *ia = ep->h.ia;
	DAT_EP_STATE st;
	DAT_RETURN rc;

	pthread_mutex_lock(&ia->lock);
	st = ep->state;
	pthread_mutex_unlock(&ia->lock);
	if (st == DAT_EP_STATE_UNCONNECTED)
		return DAT_SUCCESS;
	if (st != DAT_EP_STATE_DISCONNECTED)
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED);
	if (!qp_teardown(ep))
		return DSP_ERR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	rc = qp_setup(ep);
	if (rc != DAT_SUCCESS) {
		pthread_mutex_lock(&ia->lock);
		ep->state = DAT_EP_STATE_DISCONNECTED;
		pthread_mutex_unlock(&ia->lock);
	}
	return rc;
}

/* ---- query / modify / status --------------------------------------------- */

DAT_RETURN dsp_ep_query(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *p)
{
	EP_OR_FAIL(ep, h);
	struct dsp_ia *ia = ep->h.ia;

	if (!p)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&ia->lock);
	p->ia_handle = ia;
	p->ep_state = ep->state;
	p->local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->addr;
	if (ep->id) {
		struct sockaddr *sa = rdma_get_local_addr(ep->id);

		p->local_ia_address_ptr = sa;
		p->local_port_qual = ntohs(rdma_get_src_port(ep->id));
	}
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->remote;
	p->remote_port_qual = ep->remote_port;
	p->pz_handle = ep->pz;
	p->recv_evd_handle = ep->recv_evd;
	p->request_evd_handle = ep->req_evd;
	p->connect_evd_handle = ep->conn_evd;
	p->srq_handle = DAT_HANDLE_NULL;
	p->ep_attr = ep->attr;
	pthread_mutex_unlock(&ia->lock);
	return DAT_SUCCESS;
}

/* Only the completion flags can change (they are applied per post);
 * anything that would mean a new QP is not implemented. */
DAT_RETURN dsp_ep_modify(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *p)
{
	EP_OR_FAIL(ep, h);
	const DAT_EP_PARAM_MASK simple = DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS |
					 DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS;

	if (!p)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (mask & ~simple)
		return DSP_NOT_IMPL;
	if (mask & DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS)
		ep->attr.recv_completion_flags = p->ep_attr.recv_completion_flags;
	if (mask & DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS)
		ep->attr.request_completion_flags = p->ep_attr.request_completion_flags;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ep_get_status(DAT_EP_HANDLE h, DAT_EP_STATE *state, DAT_BOOLEAN *in_idle,
			     DAT_BOOLEAN *out_idle)
{
	EP_OR_FAIL(ep, h);

	if (state) {
		pthread_mutex_lock(&ep->h.ia->lock);
		*state = ep->state;
		pthread_mutex_unlock(&ep->h.ia->lock);
	}
	pthread_mutex_lock(&ep->slot_lock);
	if (in_idle)
		*in_idle = ep->out_recv == 0 ? DAT_TRUE : DAT_FALSE;
	if (out_idle)
		*out_idle = ep->outstanding - ep->out_recv == 0 ? DAT_TRUE : DAT_FALSE;
	pthread_mutex_unlock(&ep->slot_lock);
	return DAT_SUCCESS;
}

/* ---- connection management ------------------------------------------------ */

void dsp_conn_event(struct dsp_ep *ep, DAT_EVENT_NUMBER num, const void *pdata, int len)
{
	DAT_EVENT ev;

	if (ep->conv) {
		dsp_ssp_hook_event(ep->conv, num, pdata, len);
		return;
	}
	memset(&ev, 0, sizeof(ev));
	ev.event_number = num;
	ev.evd_handle = ep->conn_evd;
	ev.event_data.connect_event_data.ep_handle = ep;
	if (pdata && len > 0) {
		memcpy(ep->ev_pdata, pdata, (size_t)len);
		ev.event_data.connect_event_data.private_data_size = len;
		ev.event_data.connect_event_data.private_data = ep->ev_pdata;
	}
	DSP_DBG("ep %p: connection event 0x%x", (void *)ep, num);
	dsp_evd_push(ep->conn_evd, &ev);
}

static struct rdma_conn_param conn_param(struct dsp_ep *ep, const uint8_t *pdata, int len)
{
	const struct ibv_device_attr *d = &ep->h.ia->dev_attr;

	return vc_conn_param(pdata, len,
			     (uint8_t)imin(ep->attr.max_rdma_read_in, d->max_qp_rd_atom),
			     (uint8_t)imin(ep->attr.max_rdma_read_out, d->max_qp_init_rd_atom));
}

static void ep_down(struct dsp_ep *ep, DAT_EVENT_NUMBER num, const void *pdata, int len)
{
	ep->state = DAT_EP_STATE_DISCONNECTED;
	ep->deadline_ms = 0;
	vc_rtr_stop(&ep->rtr);
	dsp_conn_event(ep, num, pdata, len);
}

/* An accept's private data (ia->lock held): framed, and when the request
 * asked for the start rule's handshake followed by the target of the
 * initiator's write, which the EP then waits for.  Returns the length, or
 * a negative errno when the consumer's bytes do not fit. */
int dsp_ep_accept_pdata(struct dsp_ep *ep, bool rtr_wanted, uint8_t *out, const void *pdata,
			DAT_COUNT len)
{
	bool rtr = rtr_wanted && ep->rtr.mr;
	int n = len < 0 ? -EINVAL
			: vc_frame(out, DSP_IW_ROOM - (rtr ? VC_RTR_LEN : 0), pdata, (size_t)len);

	return n < 0 ? n : vc_rtr_accept(&ep->rtr, rtr, out, n);
}

/* An accept onto a request's id (ia->lock held): the EP's QP moves there
 * (vc_qp_move), with the receives posted before it; the EP's own id is
 * then the caller's to destroy, without the lock. */
void dsp_ep_take_id(struct dsp_ep *ep, struct rdma_cm_id *id,
		    const struct sockaddr_storage *remote)
{
	vc_qp_move(ep->id, id);
	ep->id = id;
	id->context = ep;
	ep->remote = *remote;
	ep->remote_port = vc_sa_port((const struct sockaddr *)remote);
	ep->disconnect_called = false;
}

/* An accept's parameters: the request's RDMA read depths, within the EP's. */
struct rdma_conn_param dsp_ep_accept_param(struct dsp_ep *ep, const uint8_t *pdata, int len,
					   uint8_t initiator_depth, uint8_t responder_resources)
{
	return vc_conn_param(pdata, len, (uint8_t)imin(ep->attr.max_rdma_read_in, initiator_depth),
			     (uint8_t)imin(ep->attr.max_rdma_read_out, responder_resources));
}

static bool pending(const struct dsp_ep *ep)
{
	return ep->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING ||
	       ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
}

/* rdma_cm's ESTABLISHED on a pending EP: the start rule's handshake
 * (vcore.h) first, then the consumer's event. */
static void established(struct dsp_ep *ep, const struct rdma_cm_event *ev)
{
	uint8_t pd[VC_PDATA_MAX];
	int n = vc_rtr_established(&ep->rtr, ep->qp,
				   ep->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING,
				   ev->param.conn.private_data, ev->param.conn.private_data_len,
				   vc_now_ms());

	if (n < 0) {
		DSP_DBG("ep %p: the RTR write: %s", (void *)ep, strerror(-n));
		vc_disconnect_once(ep->id, &ep->disconnect_called);
		ep_down(ep, DAT_CONNECTION_EVENT_BROKEN, NULL, 0);
		return;
	}
	if (!n) {
		/* dsp_ep_check_timeouts reports it once the write lands */
		DSP_DBG("ep %p: established, waiting for the initiator's RTR write", (void *)ep);
		return;
	}
	ep->state = DAT_EP_STATE_CONNECTED;
	ep->deadline_ms = 0;
	n = vc_unframe(ev->param.conn.private_data, ev->param.conn.private_data_len, pd);
	dsp_conn_event(ep, DAT_CONNECTION_EVENT_ESTABLISHED, pd, n > 0 ? n : 0);
}

void dsp_ep_cm_event(struct dsp_ep *ep, struct rdma_cm_event *ev)
{
	struct rdma_conn_param cp;
	uint8_t pd[VC_PDATA_MAX];
	int n;

	if (ev->id != ep->id)
		return;	/* an id the EP has left */
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (ep->state != DAT_EP_STATE_ACTIVE_CONNECTION_PENDING)
			break;
		if (vc_resolve_route(ep->id) != 0)
			ep_down(ep, DAT_CONNECTION_EVENT_UNREACHABLE, NULL, 0);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (ep->state != DAT_EP_STATE_ACTIVE_CONNECTION_PENDING)
			break;
		cp = conn_param(ep, ep->pdata, ep->pdata_len);
		n = vc_connect(ep->id, &cp);
		if (n) {
			DSP_DBG("rdma_connect: %s", strerror(-n));
			ep_down(ep, DAT_CONNECTION_EVENT_UNREACHABLE, NULL, 0);
		}
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		if (pending(ep))
			ep_down(ep, DAT_CONNECTION_EVENT_UNREACHABLE, NULL, 0);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (ep->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING)
			ep_down(ep, DAT_CONNECTION_EVENT_UNREACHABLE, NULL, 0);
		else if (ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING)
			ep_down(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, NULL, 0);
		else if (ep->state == DAT_EP_STATE_CONNECTED)
			ep_down(ep, DAT_CONNECTION_EVENT_BROKEN, NULL, 0);
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (!pending(ep))
			break;
		/* our peer frames what it sends; a reject without that
		 * framing (no listener, a stack's refusal) is not a peer's */
		n = vc_rejected(ev, ep->h.ia->iwarp, pd);
		if (n >= 0)
			ep_down(ep, DAT_CONNECTION_EVENT_PEER_REJECTED, pd, n);
		else
			ep_down(ep, DAT_CONNECTION_EVENT_NON_PEER_REJECTED, NULL, 0);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (pending(ep))
			established(ep, ev);
		else	/* timed out or disconnected meanwhile */
			vc_disconnect_once(ep->id, &ep->disconnect_called);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* answer the peer's disconnect so that its side completes */
		vc_disconnect_once(ep->id, &ep->disconnect_called);
		if (ep->state == DAT_EP_STATE_CONNECTED ||
		    ep->state == DAT_EP_STATE_DISCONNECT_PENDING || pending(ep))
			ep_down(ep, DAT_CONNECTION_EVENT_DISCONNECTED, NULL, 0);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (ep->state != DAT_EP_STATE_DISCONNECTED &&
		    ep->state != DAT_EP_STATE_UNCONNECTED)
			ep_down(ep, DAT_CONNECTION_EVENT_BROKEN, NULL, 0);
		break;
	default:
		break;
	}
}

void dsp_ep_check_timeouts(struct dsp_ia *ia, int *next_ms)
{
	uint64_t now = vc_now_ms();
	struct dsp_hdr *h;

	for (h = ia->eps.head.next; h != &ia->eps.head; h = h->next) {
		struct dsp_ep *ep = (struct dsp_ep *)h;
		uint64_t waited = 0;
		int r;

		/* the handshake runs while connected (the initiator's repeats)
		 * or accepting (the responder's wait) only */
		if (ep->state != DAT_EP_STATE_CONNECTED &&
		    ep->state != DAT_EP_STATE_PASSIVE_CONNECTION_PENDING)
			vc_rtr_stop(&ep->rtr);
		r = vc_rtr_busy(&ep->rtr) ? vc_rtr_tick(&ep->rtr, ep->qp, now, next_ms, &waited)
					  : VC_RTR_IDLE;
		if (r == VC_RTR_SEEN) {
			if (waited >= 5)	/* slow, or caught up by a repeat */
				DSP_DBG("ep %p: the RTR write seen after %llu ms", (void *)ep,
					(unsigned long long)waited);
			ep->state = DAT_EP_STATE_CONNECTED;
			dsp_conn_event(ep, DAT_CONNECTION_EVENT_ESTABLISHED, NULL, 0);
		} else if (r < 0) {
			DSP_DBG("ep %p: no RTR write from the initiator", (void *)ep);
			ep_down(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, NULL, 0);
			vc_disconnect_once(ep->id, &ep->disconnect_called);
		}
		if (!ep->deadline_ms || ep->state != DAT_EP_STATE_ACTIVE_CONNECTION_PENDING)
			continue;
		if (now >= ep->deadline_ms) {
			ep_down(ep, DAT_CONNECTION_EVENT_TIMED_OUT, NULL, 0);
			vc_disconnect_once(ep->id, &ep->disconnect_called);
			continue;
		}
		if (*next_ms < 0 || (int)(ep->deadline_ms - now) < *next_ms)
			*next_ms = (int)(ep->deadline_ms - now);
	}
}

DAT_RETURN dsp_ep_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR remote, DAT_CONN_QUAL qual,
			  DAT_TIMEOUT timeout, DAT_COUNT pdsize, const DAT_PVOID pdata,
			  DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	EP_OR_FAIL(ep, h);
	struct dsp_ia *ia = ep->h.ia;
	struct sockaddr_storage dst;
	DAT_RETURN rc = DAT_SUCCESS;

	if (!remote || (remote->sa_family != AF_INET && remote->sa_family != AF_INET6))
		return DSP_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	if (pdsize < 0 || pdsize > dsp_pdata_room(ia) - 1 || (pdsize > 0 && !pdata))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (qos != DAT_QOS_BEST_EFFORT)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	if (flags & DAT_CONNECT_MULTIPATH_REQUIRED_FLAG)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	vc_sa_copy(&dst, remote, (uint16_t)dsp_qual_to_port(qual));
	pthread_mutex_lock(&ia->lock);
	if (ep->state != DAT_EP_STATE_UNCONNECTED || !ep->id) {
		rc = DSP_ERR(DAT_INVALID_STATE, ep->state == DAT_EP_STATE_CONNECTED
						       ? DAT_INVALID_STATE_EP_CONNECTED
						       : DAT_INVALID_STATE_EP_NOTREADY);
		goto out;
	}
	ep->pdata_len = dsp_frame_connect_pdata(ia, ep->pdata, pdata, pdsize);
	ep->state = DAT_EP_STATE_ACTIVE_CONNECTION_PENDING;
	rc = dsp_ep_start_connect(ep, &dst, timeout);
	if (rc != DAT_SUCCESS)
		ep->state = DAT_EP_STATE_UNCONNECTED;
out:
	pthread_mutex_unlock(&ia->lock);
	return rc;
}

DAT_RETURN dsp_ep_start_connect(struct dsp_ep *ep, const struct sockaddr_storage *dst,
				DAT_TIMEOUT timeout)
{
	struct dsp_ia *ia = ep->h.ia;
	int r;

	ep->remote = *dst;
	ep->remote_port = vc_sa_port((const struct sockaddr *)dst);
	ep->deadline_ms = timeout == DAT_TIMEOUT_INFINITE ? 0
				: vc_now_ms() + (timeout + 999) / 1000;
	r = vc_resolve_addr(ep->id, NULL, (const struct sockaddr *)dst);
	if (r) {
		DSP_DBG("rdma_resolve_addr: %s", strerror(-r));
		ep->deadline_ms = 0;
		return DSP_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
	}
	/* wake the progress thread so that it sees the new deadline */
	if (timeout != DAT_TIMEOUT_INFINITE)
		dsp_ia_kick(ia);
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ep_disconnect(DAT_EP_HANDLE h, DAT_CLOSE_FLAGS flags)
{
	EP_OR_FAIL(ep, h);
	struct dsp_ia *ia = ep->h.ia;
	DAT_RETURN rc = DAT_SUCCESS;

	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ia->lock);
	switch (ep->state) {
	case DAT_EP_STATE_CONNECTED:
		/* rdma_cm reports DISCONNECTED once the QP is flushed */
		ep->state = DAT_EP_STATE_DISCONNECT_PENDING;
		if (!ep->disconnect_called) {
			ep->disconnect_called = true;
			if (vc_disconnect(ep->id) != 0)
				ep_down(ep, DAT_CONNECTION_EVENT_DISCONNECTED, NULL, 0);
		}
		break;
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
		/* cancel: the connect's own events are ignored from now */
		vc_disconnect_once(ep->id, &ep->disconnect_called);
		ep_down(ep, DAT_CONNECTION_EVENT_DISCONNECTED, NULL, 0);
		break;
	case DAT_EP_STATE_DISCONNECT_PENDING:
	case DAT_EP_STATE_DISCONNECTED:
		break;
	default:
		rc = DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
		break;
	}
	pthread_mutex_unlock(&ia->lock);
	return rc;
}

/* ---- data transfer ------------------------------------------------------- */

static DAT_RETURN build_sge(struct dsp_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			    DAT_COUNT max, struct ibv_sge *sge, int *nsge, DAT_SEG_LENGTH *total)
{
	uint64_t sum = 0;

	(void)ep;
	if (n < 0 || n > max)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (n > 0 && !iov)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	*nsge = 0;
	for (DAT_COUNT i = 0; i < n; i++) {
		if (iov[i].segment_length == 0)
			continue;	/* the spec lets such a triplet be garbage */
		sge[*nsge].addr = iov[i].virtual_address;
		sge[*nsge].length = iov[i].segment_length;
		sge[*nsge].lkey = iov[i].lmr_context;
		sum += iov[i].segment_length;
		(*nsge)++;
	}
	if (sum > UINT32_MAX)
		return DSP_ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	*total = (DAT_SEG_LENGTH)sum;
	return DAT_SUCCESS;
}

static DAT_RETURN post_sq(DAT_EP_HANDLE h, DAT_DTOS op, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *rmr,
			  DAT_COMPLETION_FLAGS flags)
{
	EP_OR_FAIL(ep, h);
	struct ibv_sge sge[DSP_MAX_SGE];
	struct ibv_send_wr wr, *bad;
	struct dsp_slot *slot = NULL;
	DAT_SEG_LENGTH total;
	DAT_EP_STATE st;
	DAT_RETURN rc;
	int nsge;

	st = ep->state;	/* a racy read is fine: the QP has the last word */
	if (st != DAT_EP_STATE_CONNECTED)
		return DSP_ERR(DAT_INVALID_STATE, st == DAT_EP_STATE_DISCONNECTED
							  ? DAT_INVALID_STATE_EP_DISCONNECTED
							  : DAT_INVALID_STATE_EP_NOTREADY);
	rc = build_sge(ep, n, iov, ep->attr.max_request_iov, sge, &nsge, &total);
	if (rc != DAT_SUCCESS)
		return rc;
	memset(&wr, 0, sizeof(wr));
	if (op != DAT_DTO_SEND) {
		if (!rmr)
			return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
		if (total > rmr->segment_length)
			return DSP_ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
		wr.wr.rdma.remote_addr = rmr->virtual_address;
		wr.wr.rdma.rkey = rmr->rmr_context;
	}
	if (!(flags & DAT_COMPLETION_SUPPRESS_FLAG)) {
		slot = slot_get(ep, false);
		if (!slot)
			return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
		slot->cookie = cookie;
		slot->op = op;
		slot->len = total;
		wr.send_flags |= IBV_SEND_SIGNALED;
	}
	wr.wr_id = (uintptr_t)slot;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	wr.opcode = op == DAT_DTO_SEND ? IBV_WR_SEND
		  : op == DAT_DTO_RDMA_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
	if (flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG)
		wr.send_flags |= IBV_SEND_SOLICITED;
	if (flags & DAT_COMPLETION_BARRIER_FENCE_FLAG)
		wr.send_flags |= IBV_SEND_FENCE;
	if (ibv_post_send(ep->qp, &wr, &bad) != 0) {
		DSP_DBG("ibv_post_send: %s", strerror(errno));
		if (slot)
			dsp_slot_put(slot);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	}
	return DAT_SUCCESS;
}

DAT_RETURN dsp_ep_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post_sq(h, DAT_DTO_SEND, n, iov, cookie, NULL, flags);
}

DAT_RETURN dsp_ep_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *rmr,
				  DAT_COMPLETION_FLAGS flags)
{
	return post_sq(h, DAT_DTO_RDMA_WRITE, n, iov, cookie, rmr, flags);
}

DAT_RETURN dsp_ep_post_rdma_read(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *rmr,
				 DAT_COMPLETION_FLAGS flags)
{
	return post_sq(h, DAT_DTO_RDMA_READ, n, iov, cookie, rmr, flags);
}

DAT_RETURN dsp_ep_post_recv(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	EP_OR_FAIL(ep, h);
	struct ibv_sge sge[DSP_MAX_SGE];
	struct ibv_recv_wr wr, *bad;
	struct dsp_slot *slot;
	DAT_SEG_LENGTH total;
	DAT_RETURN rc;
	int nsge;

	(void)flags;	/* a receive always completes (verbs cannot suppress it) */
	if (ep->state == DAT_EP_STATE_DISCONNECTED || !ep->qp)
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED);
	rc = build_sge(ep, n, iov, ep->attr.max_recv_iov, sge, &nsge, &total);
	if (rc != DAT_SUCCESS)
		return rc;
	slot = slot_get(ep, true);
	if (!slot)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	slot->cookie = cookie;
	slot->op = DAT_DTO_RECEIVE;
	slot->len = total;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uintptr_t)slot;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	if (ibv_post_recv(ep->qp, &wr, &bad) != 0) {
		DSP_DBG("ibv_post_recv: %s", strerror(errno));
		dsp_slot_put(slot);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	}
	return DAT_SUCCESS;
}
