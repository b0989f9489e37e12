/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: Public Service Points and Connection Requests.  A PSP is
 * an rdma_cm listener on the IA's address, its conn_qual the TCP port
 * (rdma_cm's RDMA_PS_TCP space: on iWARP a real TCP port).  A connect
 * request becomes a CR object and a DAT_CONNECTION_REQUEST_EVENT on the
 * PSP's EVD; dat_cr_accept moves the consumer's EP's QP onto the
 * request's cm_id and accepts it, dat_cr_reject refuses it with the
 * consumer's private data.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

#define DSP_BACKLOG 64

/* ---- PSP ------------------------------------------------------------------- */

static DAT_RETURN psp_listen(struct dsp_ia *ia, DAT_CONN_QUAL qual, struct dsp_evd *evd,
			     DAT_PSP_FLAGS flags, struct dsp_psp **out)
{
	struct sockaddr_storage a;
	struct dsp_psp *psp;
	int r;

	if (!dsp_check(evd, DSP_T_EVD) || evd->h.ia != ia || !(evd->flags & DAT_EVD_CR_FLAG))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
	if (flags == DAT_PSP_PROVIDER_FLAG)
		return DSP_NOT_IMPL;	/* the provider never creates EPs */
	if (flags != DAT_PSP_CONSUMER_FLAG)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	psp = calloc(1, sizeof(*psp));
	if (!psp)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	dsp_hdr_init(&psp->h, ia, DSP_T_PSP);
	psp->evd = evd;
	psp->flags = flags;
	vc_sa_copy(&a, (struct sockaddr *)&ia->addr, (uint16_t)dsp_qual_to_port(qual));
	r = vc_listen_on(ia->ch, (struct sockaddr *)&a, DSP_BACKLOG, psp, &psp->id);
	if (r) {
		free(psp);
		return r == -EADDRINUSE ? DSP_ERR(DAT_CONN_QUAL_IN_USE, DAT_NO_SUBTYPE)
					: DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	psp->qual = qual ? qual : ntohs(rdma_get_src_port(psp->id));
	pthread_mutex_lock(&ia->lock);
	evd->refs++;
	dsp_list_add(&ia->psps, &psp->h);
	pthread_mutex_unlock(&ia->lock);
	DSP_DBG("psp %p listens on port %u", (void *)psp, ntohs(rdma_get_src_port(psp->id)));
	*out = psp;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL qual, DAT_EVD_HANDLE evd,
			  DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_psp *psp;
	DAT_RETURN rc;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (qual == 0)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	rc = psp_listen(ia, qual, evd, flags, &psp);
	if (rc == DAT_SUCCESS)
		*out = psp;
	return rc;
}

/* Any free conn_qual: the port the kernel picks for a port-0 bind. */
DAT_RETURN dsp_psp_create_any(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL *qual, DAT_EVD_HANDLE evd,
			      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_psp *psp;
	DAT_RETURN rc;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (!qual)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	rc = psp_listen(ia, 0, evd, flags, &psp);
	if (rc == DAT_SUCCESS) {
		*qual = psp->qual;
		*out = psp;
	}
	return rc;
}

DAT_RETURN dsp_psp_query(DAT_PSP_HANDLE h, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *p)
{
	struct dsp_psp *psp = h;

	if (!dsp_check(psp, DSP_T_PSP))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
	if (!p)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	p->ia_handle = psp->h.ia;
	p->conn_qual = psp->qual;
	p->evd_handle = psp->evd;
	p->psp_flags = psp->flags;
	return DAT_SUCCESS;
}

void dsp_psp_destroy(struct dsp_psp *psp)
{
	struct dsp_ia *ia = psp->h.ia;
	struct dsp_hdr *h;

	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->psps, &psp->h);
	psp->evd->refs--;
	/* pending requests stay valid: the consumer may still answer them */
	for (h = ia->crs.head.next; h != &ia->crs.head; h = h->next)
		if (((struct dsp_cr *)h)->psp == psp)
			((struct dsp_cr *)h)->psp = NULL;
	psp->h.magic = 0;
	pthread_mutex_unlock(&ia->lock);
	vc_id_free(psp->id);
	free(psp);
}

DAT_RETURN dsp_psp_free(DAT_PSP_HANDLE h)
{
	struct dsp_psp *psp = h;

	if (!dsp_check(psp, DSP_T_PSP))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
	dsp_psp_destroy(psp);
	return DAT_SUCCESS;
}

/* Progress thread, ia->lock held: ev->id is the request's new cm_id. */
void dsp_psp_cm_event(struct dsp_psp *psp, struct rdma_cm_event *ev)
{
	struct dsp_ia *ia = psp->h.ia;
	struct dsp_cr *cr;
	struct sockaddr *peer;
	DAT_EVENT dev;

	if (psp->ssp) {
		dsp_ssp_conn_request(psp, ev);
		return;
	}
	cr = calloc(1, sizeof(*cr));
	if (!cr) {
		vc_reject(ev->id, NULL, 0);
		return;
	}
	dsp_hdr_init(&cr->h, ia, DSP_T_CR);
	cr->id = ev->id;
	cr->id->context = cr;
	cr->psp = psp;
	cr->qual = psp->qual;
	cr->pdata_len = vc_unframe(ev->param.conn.private_data, ev->param.conn.private_data_len,
				   cr->pdata);
	if (cr->pdata_len < 0)
		cr->pdata_len = 0;
	cr->rtr_wanted = ia->iwarp && vc_rtr_asked(ev->param.conn.private_data,
						   ev->param.conn.private_data_len);
	cr->initiator_depth = ev->param.conn.initiator_depth;
	cr->responder_resources = ev->param.conn.responder_resources;
	peer = rdma_get_peer_addr(ev->id);
	if (peer)
		memcpy(&cr->remote, peer, vc_sa_len(peer));
	cr->remote_port = ntohs(rdma_get_dst_port(ev->id));
	dsp_list_add(&ia->crs, &cr->h);

	memset(&dev, 0, sizeof(dev));
	dev.event_number = DAT_CONNECTION_REQUEST_EVENT;
	dev.evd_handle = psp->evd;
	dev.event_data.cr_arrival_event_data.sp_handle.psp_handle = psp;
	dev.event_data.cr_arrival_event_data.local_ia_address_ptr =
		(DAT_IA_ADDRESS_PTR)&ia->addr;
	dev.event_data.cr_arrival_event_data.conn_qual = psp->qual;
	dev.event_data.cr_arrival_event_data.cr_handle = cr;
	dev.event_data.cr_arrival_event_data.truncate_flag = DAT_FALSE;
	if (!dsp_evd_push(psp->evd, &dev)) {
		/* nobody will hear of it: refuse; the CR waits for ia_close
		 * (its id cannot be destroyed before this event is acked) */
		vc_reject(ev->id, NULL, 0);
		cr->psp = NULL;
	}
}

/* Events on a request's id before it is accepted or rejected. */
void dsp_cr_cm_event(struct dsp_cr *cr, struct rdma_cm_event *ev)
{
	DSP_DBG("cr %p: %s before accept", (void *)cr, rdma_event_str(ev->event));
}

/* ---- CR --------------------------------------------------------------------- */

void dsp_cr_destroy(struct dsp_cr *cr)
{
	struct dsp_ia *ia = cr->h.ia;
	struct rdma_cm_id *id;

	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->crs, &cr->h);
	cr->h.magic = 0;
	id = cr->id;
	if (id && id->context == cr)
		id->context = NULL;
	pthread_mutex_unlock(&ia->lock);
	vc_id_free(id);
	free(cr);
}

DAT_RETURN dsp_cr_query(DAT_CR_HANDLE h, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *p)
{
	struct dsp_cr *cr = h;

	if (!dsp_check(cr, DSP_T_CR))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	if (!p)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&cr->remote;
	p->remote_port_qual = cr->remote_port;
	p->private_data_size = cr->pdata_len;
	p->private_data = cr->pdata;
	p->local_ep_handle = cr->ssp ? (DAT_EP_HANDLE)dsp_ssp_ep(cr->ssp) : DAT_HANDLE_NULL;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_cr_accept(DAT_CR_HANDLE h, DAT_EP_HANDLE ep_handle, DAT_COUNT pdsize,
			 const DAT_PVOID pdata)
{
	struct dsp_cr *cr = h;
	struct dsp_ep *ep = ep_handle;
	struct dsp_ia *ia;
	struct rdma_cm_id *old;
	struct rdma_conn_param cp;
	uint8_t framed[VC_PDATA_MAX + 1];
	int flen, r;
	DAT_RETURN rc = DAT_SUCCESS;

	if (!dsp_check(cr, DSP_T_CR))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	ia = cr->h.ia;
	if (cr->ssp)
		return dsp_ssp_accept(cr, ep, pdsize, pdata);
	if (!dsp_check(ep, DSP_T_EP) || ep->h.ia != ia)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (pdsize < 0 || (pdsize > 0 && !pdata))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);

	pthread_mutex_lock(&ia->lock);
	if (ep->state != DAT_EP_STATE_UNCONNECTED || !ep->qp || !ep->id) {
		pthread_mutex_unlock(&ia->lock);
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	}
	if (cr->id->verbs != ep->id->verbs) {
		pthread_mutex_unlock(&ia->lock);
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	/* the accept (MPA reply / IB REP) has room for 196 bytes, less the
	 * RTR target on iWARP */
	flen = dsp_ep_accept_pdata(ep, cr->rtr_wanted, framed, pdata, pdsize);
	if (flen < 0) {
		pthread_mutex_unlock(&ia->lock);
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	}
	/* the QP moves to the request's id; the EP's own id goes */
	old = ep->id;
	dsp_ep_take_id(ep, cr->id, &cr->remote);
	cr->id = NULL;
	ep->state = DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
	cp = dsp_ep_accept_param(ep, framed, flen, cr->initiator_depth, cr->responder_resources);
	r = vc_accept(ep->id, &cp);
	if (r) {
		DSP_DBG("rdma_accept: %s", strerror(-r));
		ep->state = DAT_EP_STATE_DISCONNECTED;
		rc = DSP_ERR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	pthread_mutex_unlock(&ia->lock);
	vc_id_free(old);
	dsp_cr_destroy(cr);
	return rc;
}

DAT_RETURN dsp_cr_reject(DAT_CR_HANDLE h, DAT_COUNT pdsize, const DAT_PVOID pdata)
{
	struct dsp_cr *cr = h;
	uint8_t framed[VC_PDATA_MAX + 1];
	int flen, r;

	if (!dsp_check(cr, DSP_T_CR))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	if (cr->ssp)
		return dsp_ssp_reject(cr, pdsize, pdata);
	/* an IB REJ carries 148 bytes, an MPA reject more */
	flen = pdsize < 0 ? -EINVAL
			  : vc_frame(framed, cr->h.ia->iwarp ? DSP_IW_ROOM : DSP_IB_REJ_ROOM, pdata,
				     (size_t)pdsize);
	if (flen < 0 || (pdsize > 0 && !pdata))
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (cr->id && (r = vc_reject(cr->id, framed, flen)) != 0)
		DSP_DBG("rdma_reject: %s", strerror(-r));
	dsp_cr_destroy(cr);
	return DAT_SUCCESS;
}
