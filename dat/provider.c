/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: the provider's entry points (dat_provider_init/fini), its
 * DAT_PROVIDER table and the helpers every file uses.
 *
 * libdat2 calls the table's pointers without NULL checks, so every entry
 * is filled.  These return DAT_NOT_IMPLEMENTED (they have the exact
 * prototype of their DAT_*_FUNC type):
 *   CNO:  cno_create, cno_modify_agent, cno_query, cno_free, cno_wait,
 *         cno_fd_create, cno_trigger, evd_modify_cno
 *         (evd_create accepts only DAT_HANDLE_NULL for the CNO)
 *   CR:   cr_handoff
 *   EP:   ep_dup_connect, ep_common_connect, ep_create_with_srq,
 *         ep_recv_query, ep_set_watermark, ep_post_send_with_invalidate,
 *         ep_post_rdma_read_to_rmr
 *   RMR:  rmr_create, rmr_create_for_ep, rmr_query, rmr_bind, rmr_free
 *   RSP:  rsp_create, rsp_query, rsp_free
 *   SRQ:  srq_create, srq_free, srq_post_recv, srq_query, srq_resize,
 *         srq_set_lw
 *   CSP:  csp_create, csp_query, csp_free
 *   IA:   ia_ha_related
 *   PSP:  psp_create/psp_create_any with DAT_PSP_PROVIDER_FLAG
 *   LMR:  memory types other than DAT_MEM_TYPE_VIRTUAL, DAT_VA_TYPE_ZB
 *   EVD:  evd_resize
 *   extensions: every op but the iWARP extension's four (ssp.c), which
 *         dsp_handle_extendedop dispatches
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"
#include "dat_iw_extensions.h"

int dsp_debug;

void dsp_dbg(const char *fmt, ...)
{
	va_list ap;

	fputs("daplsdp: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void dsp_hdr_init(struct dsp_hdr *h, struct dsp_ia *ia, enum dsp_type type)
{
	h->provider = ia ? &ia->p->prov : NULL;
	h->magic = DSP_MAGIC;
	h->type = type;
	h->context.as_ptr = NULL;
	h->ia = ia;
	h->next = h->prev = NULL;
}

void dsp_list_init(struct dsp_list *l)
{
	l->head.next = l->head.prev = &l->head;
	l->count = 0;
}

void dsp_list_add(struct dsp_list *l, struct dsp_hdr *h)
{
	h->next = l->head.next;
	h->prev = &l->head;
	l->head.next->prev = h;
	l->head.next = h;
	l->count++;
}

void dsp_list_del(struct dsp_list *l, struct dsp_hdr *h)
{
	if (!h->next)
		return;
	h->prev->next = h->next;
	h->next->prev = h->prev;
	h->next = h->prev = NULL;
	l->count--;
}

/* A conn_qual that fits a port is the port; larger ones are folded into
 * the upper half of the port space the way upstream DAPL's cma provider
 * does, so that the two agree on the wire. */
DAT_CONN_QUAL dsp_qual_to_port(DAT_CONN_QUAL q)
{
	return q > 0xffff ? (q % 32001) + (65535 - 32001) : q;
}

/* The framed room for a consumer's private data (its maximum is one less):
 * on iWARP an accept keeps VC_RTR_LEN of the MPA reply's for the start
 * rule's target, and requests get the same maximum, so that one number
 * (the IA's max_private_data_size) holds for all. */
int dsp_pdata_room(const struct dsp_ia *ia)
{
	return ia->iwarp ? DSP_IW_ROOM - VC_RTR_LEN : VC_IB_REQ_ROOM;
}

/* A connect request's private data: framed, and on iWARP followed by the
 * flags byte that asks for the start rule's handshake (vcore.h).  The
 * framed length, or a negative errno when the bytes do not fit. */
int dsp_frame_connect_pdata(const struct dsp_ia *ia, uint8_t *out, const void *pdata,
			    DAT_COUNT len)
{
	int n = len < 0 ? -EINVAL : vc_frame(out, (size_t)dsp_pdata_room(ia), pdata, (size_t)len);

	return n < 0 || !ia->iwarp ? n : vc_rtr_ask(out, n);
}

/* ---- the extension hook ------------------------------------------------ */

/*
 * dat_extension_op(handle, op, ...) lands here with the handle translated
 * by libdat2 when it is an IA's (the varargs are not: an IA handle inside
 * them is the consumer's small integer, see dats_get_ia_handle()).  The iWARP
 * Socket Service Point ops will be cases of this switch.
 */
DAT_RETURN dsp_handle_extendedop(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args)
{
	if (!handle || ((struct dsp_hdr *)handle)->magic != DSP_MAGIC)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_NO_SUBTYPE);
	switch ((int)op) {
	case DAT_IW_SSP_CREATE_OP:
		if (!dsp_check(handle, DSP_T_IA))
			return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
		return dsp_ssp_create(handle, args);
	case DAT_IW_SSP_FREE_OP:
		return dsp_ssp_free(handle);
	case DAT_IW_SSP_QUERY_OP:
		return dsp_ssp_query(handle, args);
	case DAT_IW_SOCKET_CONNECT_OP:
		return dsp_socket_connect(handle, args);
	default:
		DSP_DBG("extension op %d not implemented", (int)op);
		return DSP_NOT_IMPL;
	}
}

/* ---- not implemented (see the list at the top) -------------------------- */

static DAT_RETURN ni_cno_create(DAT_IA_HANDLE a, DAT_OS_WAIT_PROXY_AGENT b, DAT_CNO_HANDLE *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_modify_agent(DAT_CNO_HANDLE a, DAT_OS_WAIT_PROXY_AGENT b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_query(DAT_CNO_HANDLE a, DAT_CNO_PARAM_MASK b, DAT_CNO_PARAM *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_free(DAT_CNO_HANDLE a)
{ (void)a; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_wait(DAT_CNO_HANDLE a, DAT_TIMEOUT b, DAT_EVD_HANDLE *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_fd_create(DAT_IA_HANDLE a, DAT_FD *b, DAT_CNO_HANDLE *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cno_trigger(DAT_CNO_HANDLE a, DAT_EVD_HANDLE *b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_evd_modify_cno(DAT_EVD_HANDLE a, DAT_CNO_HANDLE b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_cr_handoff(DAT_CR_HANDLE a, DAT_CONN_QUAL b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_dup_connect(DAT_EP_HANDLE a, DAT_EP_HANDLE b, DAT_TIMEOUT c,
				    DAT_COUNT d, const DAT_PVOID e, DAT_QOS f)
{ (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_common_connect(DAT_EP_HANDLE a, DAT_IA_ADDRESS_PTR b, DAT_TIMEOUT c,
				       DAT_COUNT d, const DAT_PVOID e)
{ (void)a; (void)b; (void)c; (void)d; (void)e; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_create_with_srq(DAT_IA_HANDLE a, DAT_PZ_HANDLE b, DAT_EVD_HANDLE c,
					DAT_EVD_HANDLE d, DAT_EVD_HANDLE e, DAT_SRQ_HANDLE f,
					const DAT_EP_ATTR *g, DAT_EP_HANDLE *h)
{ (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; (void)g; (void)h; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_recv_query(DAT_EP_HANDLE a, DAT_COUNT *b, DAT_COUNT *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_set_watermark(DAT_EP_HANDLE a, DAT_COUNT b, DAT_COUNT c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_post_send_with_invalidate(DAT_EP_HANDLE a, DAT_COUNT b,
						  DAT_LMR_TRIPLET *c, DAT_DTO_COOKIE d,
						  DAT_COMPLETION_FLAGS e, DAT_BOOLEAN f,
						  DAT_RMR_CONTEXT g)
{ (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; (void)g; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE a, const DAT_RMR_TRIPLET *b,
					      DAT_DTO_COOKIE c, const DAT_RMR_TRIPLET *d,
					      DAT_COMPLETION_FLAGS e)
{ (void)a; (void)b; (void)c; (void)d; (void)e; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rmr_create(DAT_PZ_HANDLE a, DAT_RMR_HANDLE *b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rmr_create_for_ep(DAT_PZ_HANDLE a, DAT_RMR_HANDLE *b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rmr_query(DAT_RMR_HANDLE a, DAT_RMR_PARAM_MASK b, DAT_RMR_PARAM *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rmr_bind(DAT_RMR_HANDLE a, DAT_LMR_HANDLE b, const DAT_LMR_TRIPLET *c,
			      DAT_MEM_PRIV_FLAGS d, DAT_VA_TYPE e, DAT_EP_HANDLE f,
			      DAT_RMR_COOKIE g, DAT_COMPLETION_FLAGS h, DAT_RMR_CONTEXT *i)
{ (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; (void)g; (void)h; (void)i;
  return DSP_NOT_IMPL; }
static DAT_RETURN ni_rmr_free(DAT_RMR_HANDLE a)
{ (void)a; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rsp_create(DAT_IA_HANDLE a, DAT_CONN_QUAL b, DAT_EP_HANDLE c,
				DAT_EVD_HANDLE d, DAT_RSP_HANDLE *e)
{ (void)a; (void)b; (void)c; (void)d; (void)e; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rsp_query(DAT_RSP_HANDLE a, DAT_RSP_PARAM_MASK b, DAT_RSP_PARAM *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_rsp_free(DAT_RSP_HANDLE a)
{ (void)a; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_create(DAT_IA_HANDLE a, DAT_PZ_HANDLE b, DAT_SRQ_ATTR *c,
				DAT_SRQ_HANDLE *d)
{ (void)a; (void)b; (void)c; (void)d; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_free(DAT_SRQ_HANDLE a)
{ (void)a; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_post_recv(DAT_SRQ_HANDLE a, DAT_COUNT b, DAT_LMR_TRIPLET *c,
				   DAT_DTO_COOKIE d)
{ (void)a; (void)b; (void)c; (void)d; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_query(DAT_SRQ_HANDLE a, DAT_SRQ_PARAM_MASK b, DAT_SRQ_PARAM *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_resize(DAT_SRQ_HANDLE a, DAT_COUNT b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_srq_set_lw(DAT_SRQ_HANDLE a, DAT_COUNT b)
{ (void)a; (void)b; return DSP_NOT_IMPL; }
static DAT_RETURN ni_csp_create(DAT_IA_HANDLE a, DAT_COMM *b, DAT_IA_ADDRESS_PTR c,
				DAT_EVD_HANDLE d, DAT_CSP_HANDLE *e)
{ (void)a; (void)b; (void)c; (void)d; (void)e; return DSP_NOT_IMPL; }
static DAT_RETURN ni_csp_query(DAT_CSP_HANDLE a, DAT_CSP_PARAM_MASK b, DAT_CSP_PARAM *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }
static DAT_RETURN ni_csp_free(DAT_CSP_HANDLE a)
{ (void)a; return DSP_NOT_IMPL; }
static DAT_RETURN ni_ia_ha_related(DAT_IA_HANDLE a, const DAT_NAME_PTR b, DAT_BOOLEAN *c)
{ (void)a; (void)b; (void)c; return DSP_NOT_IMPL; }

static const DAT_PROVIDER dsp_template = {
	.device_name = NULL,
	.extension = NULL,
	.ia_open_func = dsp_ia_open,
	.ia_query_func = dsp_ia_query,
	.ia_close_func = dsp_ia_close,
	.set_consumer_context_func = dsp_set_consumer_context,
	.get_consumer_context_func = dsp_get_consumer_context,
	.get_handle_type_func = dsp_get_handle_type,
	.cno_create_func = ni_cno_create,
	.cno_modify_agent_func = ni_cno_modify_agent,
	.cno_query_func = ni_cno_query,
	.cno_free_func = ni_cno_free,
	.cno_wait_func = ni_cno_wait,
	.cr_query_func = dsp_cr_query,
	.cr_accept_func = dsp_cr_accept,
	.cr_reject_func = dsp_cr_reject,
	.cr_handoff_func = ni_cr_handoff,
	.evd_create_func = dsp_evd_create,
	.evd_query_func = dsp_evd_query,
	.evd_modify_cno_func = ni_evd_modify_cno,
	.evd_enable_func = dsp_evd_enable,
	.evd_disable_func = dsp_evd_disable,
	.evd_wait_func = dsp_evd_wait,
	.evd_resize_func = dsp_evd_resize,
	.evd_post_se_func = dsp_evd_post_se,
	.evd_dequeue_func = dsp_evd_dequeue,
	.evd_free_func = dsp_evd_free,
	.ep_create_func = dsp_ep_create,
	.ep_query_func = dsp_ep_query,
	.ep_modify_func = dsp_ep_modify,
	.ep_connect_func = dsp_ep_connect,
	.ep_dup_connect_func = ni_ep_dup_connect,
	.ep_disconnect_func = dsp_ep_disconnect,
	.ep_post_send_func = dsp_ep_post_send,
	.ep_post_recv_func = dsp_ep_post_recv,
	.ep_post_rdma_read_func = dsp_ep_post_rdma_read,
	.ep_post_rdma_write_func = dsp_ep_post_rdma_write,
	.ep_get_status_func = dsp_ep_get_status,
	.ep_free_func = dsp_ep_free,
	.lmr_create_func = dsp_lmr_create,
	.lmr_query_func = dsp_lmr_query,
	.lmr_free_func = dsp_lmr_free,
	.rmr_create_func = ni_rmr_create,
	.rmr_query_func = ni_rmr_query,
	.rmr_bind_func = ni_rmr_bind,
	.rmr_free_func = ni_rmr_free,
	.psp_create_func = dsp_psp_create,
	.psp_query_func = dsp_psp_query,
	.psp_free_func = dsp_psp_free,
	.rsp_create_func = ni_rsp_create,
	.rsp_query_func = ni_rsp_query,
	.rsp_free_func = ni_rsp_free,
	.pz_create_func = dsp_pz_create,
	.pz_query_func = dsp_pz_query,
	.pz_free_func = dsp_pz_free,
	.psp_create_any_func = dsp_psp_create_any,
	.ep_reset_func = dsp_ep_reset,
	.evd_set_unwaitable_func = dsp_evd_set_unwaitable,
	.evd_clear_unwaitable_func = dsp_evd_clear_unwaitable,
	.lmr_sync_rdma_read_func = dsp_lmr_sync_rdma_read,
	.lmr_sync_rdma_write_func = dsp_lmr_sync_rdma_write,
	.ep_create_with_srq_func = ni_ep_create_with_srq,
	.ep_recv_query_func = ni_ep_recv_query,
	.ep_set_watermark_func = ni_ep_set_watermark,
	.srq_create_func = ni_srq_create,
	.srq_free_func = ni_srq_free,
	.srq_post_recv_func = ni_srq_post_recv,
	.srq_query_func = ni_srq_query,
	.srq_resize_func = ni_srq_resize,
	.srq_set_lw_func = ni_srq_set_lw,
	.csp_create_func = ni_csp_create,
	.csp_query_func = ni_csp_query,
	.csp_free_func = ni_csp_free,
	.ep_common_connect_func = ni_ep_common_connect,
	.rmr_create_for_ep_func = ni_rmr_create_for_ep,
	.ep_post_send_with_invalidate_func = ni_ep_post_send_with_invalidate,
	.ep_post_rdma_read_to_rmr_func = ni_ep_post_rdma_read_to_rmr,
	.cno_fd_create_func = ni_cno_fd_create,
	.cno_trigger_func = ni_cno_trigger,
	.ia_ha_related_func = ni_ia_ha_related,
	.handle_extendedop_func = dsp_handle_extendedop,
};

/* ---- registration ------------------------------------------------------- */

/* One DAT_PROVIDER per dat.conf name: libdat2 calls init once per name. */
static pthread_mutex_t providers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dsp_provider *providers;

struct dsp_provider *dsp_provider_find(const char *name)
{
	struct dsp_provider *p;

	pthread_mutex_lock(&providers_lock);
	for (p = providers; p; p = p->next)
		if (strcmp(p->info.ia_name, name) == 0)
			break;
	pthread_mutex_unlock(&providers_lock);
	return p;
}

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *ia_params);
void dat_provider_fini(const DAT_PROVIDER_INFO *info);
void dapl_extensions(void);

/* libdat2, built with DAT_EXTENSIONS, looks this symbol up to tell a
 * provider that has extensions (dat_iw_extensions.h) from one that has
 * none, and warns when it is missing.  Only its presence matters. */
void dapl_extensions(void)
{
}

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *ia_params)
{
	struct dsp_provider *p;
	const char *dbg = getenv("DAPL_SDP_DEBUG");

	dsp_debug = dbg && *dbg && strcmp(dbg, "0") != 0;
	if (!info)
		return;
	p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->prov = dsp_template;
	p->info = *info;
	p->info.ia_name[sizeof(p->info.ia_name) - 1] = '\0';
	snprintf(p->ia_params, sizeof(p->ia_params), "%s", ia_params ? ia_params : "");
	/* libdat2 rebuilds its registry key from device_name at dat_ia_close */
	p->prov.device_name = p->info.ia_name;
	p->prov.extension = p;
	pthread_mutex_lock(&providers_lock);
	p->next = providers;
	providers = p;
	pthread_mutex_unlock(&providers_lock);
	if (dat_registry_add_provider(&p->prov, info) != DAT_SUCCESS) {
		DSP_DBG("dat_registry_add_provider(%s) failed", info->ia_name);
		return;
	}
	DSP_DBG("registered %s params \"%s\"", p->info.ia_name, p->ia_params);
}

void dat_provider_fini(const DAT_PROVIDER_INFO *info)
{
	struct dsp_provider **pp, *p;

	if (!info)
		return;
	pthread_mutex_lock(&providers_lock);
	for (pp = &providers; (p = *pp); pp = &p->next)
		if (strcmp(p->info.ia_name, info->ia_name) == 0)
			break;
	if (p)
		*pp = p->next;
	pthread_mutex_unlock(&providers_lock);
	if (!p)
		return;
	dat_registry_remove_provider(&p->prov, info);
	free(p);
}
