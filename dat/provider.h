/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: a uDAPL (DAT 2.0) provider over libibverbs + librdmacm,
 * through libsdp's verbs core (transports/verbs/vcore.h), which the
 * "ib" and "iwarp" transports stand on too.  Internal types shared by the
 * files of dat/.
 *
 * Every object handed to the consumer as a DAT handle starts with a
 * struct dsp_hdr, whose first word is the DAT_PROVIDER pointer: libdat2
 * dispatches through *(DAT_PROVIDER **)handle.  After it come a magic
 * number and a type, checked by every entry point (dsp_check()), so that
 * a wrong or freed handle gives DAT_INVALID_HANDLE instead of a crash.
 *
 * Threads: each IA runs one progress thread (ia.c) that
 * waits on the IA's rdma_cm event channel and the device's async-event
 * fd and turns what arrives into DAT events on EVD queues.  Completions
 * are not handled by that thread: an EVD with a CQ is polled by whoever
 * waits on or dequeues from it (evd.c), sleeping on the CQ's completion
 * channel.  Locks: ia->lock guards object lists and EP/PSP/CR state;
 * evd->lock guards an EVD's queue and its CQ; ep->slot_lock the EP's
 * request slots.  Order: ia->lock before evd->lock.  rdma_destroy_id()
 * is never called with ia->lock held (it waits for the progress thread
 * to ack the id's events, and the thread takes ia->lock first).
 */
#ifndef DAPLSDP_PROVIDER_H
#define DAPLSDP_PROVIDER_H

#include <dat2/udat.h>
#include <dat2/dat_registry.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "verbs/vcore.h"

#define DSP_ERR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (sub)))
#define DSP_NOT_IMPL DSP_ERR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE)

#define DSP_PROVIDER_NAME "libdaplsdp"
#define DSP_VERSION_MAJOR 1
#define DSP_VERSION_MINOR 0
#define DSP_EXT_VERSION 201	/* DAT_EXTENSION_VERSION "2.0.1" */

/* Private data travels framed (vcore.h, vc_frame: one length byte, then
 * the consumer's bytes; the wire may pad it).  The framed room: 196 (an IB
 * REP's; the MPA messages carry as much) for an accept and an iWARP
 * reject, 148 for an IB REJ, VC_IB_REQ_ROOM for an IB connect request; an
 * iWARP connect request gets what an accept leaves beside the start
 * rule's target (dsp_pdata_room). */
#define DSP_IW_ROOM 196
#define DSP_IB_REJ_ROOM 148

#define DSP_MAGIC 0x44535044u	/* "DPSD" */

enum dsp_type {
	DSP_T_IA = 1,
	DSP_T_EVD,
	DSP_T_PZ,
	DSP_T_LMR,
	DSP_T_EP,
	DSP_T_PSP,
	DSP_T_CR,
	DSP_T_SSP,	/* a Socket Service Point, or an EP's socket connect */
};

struct dsp_ia;

struct dsp_hdr {
	DAT_PROVIDER *provider;	/* MUST be first: libdat2 dispatches on it */
	uint32_t magic;
	enum dsp_type type;
	DAT_CONTEXT context;	/* dat_set/get_consumer_context */
	struct dsp_ia *ia;
	struct dsp_hdr *next, *prev;	/* the IA's list of this type */
};

/* One per dat.conf entry naming this library (dat_provider_init). */
struct dsp_provider {
	DAT_PROVIDER prov;
	DAT_PROVIDER_INFO info;
	char ia_params[256];
	struct dsp_provider *next;
};

struct dsp_list {
	struct dsp_hdr head;	/* sentinel */
	int count;
};

struct dsp_evd;
struct dsp_ssp;

struct dsp_ia {
	struct dsp_hdr h;
	struct dsp_provider *p;
	pthread_mutex_t lock;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *bind_id;	/* holds the device and the address */
	struct ibv_context *verbs;
	struct ibv_device_attr dev_attr;
	bool iwarp;
	struct sockaddr_storage addr;
	pthread_t thread;
	bool thread_started;
	int stop_fd;
	int kick_fd;	/* eventfd: look at the connect deadlines again */
	struct dsp_evd *async_evd;
	bool own_async;
	struct dsp_list evds, pzs, lmrs, eps, psps, crs;
	struct dsp_list ssps;	/* SSPs and socket connects (ssp.c) */
	DAT_NAMED_ATTR ps_attr[3];
};

struct dsp_evd {
	struct dsp_hdr h;
	DAT_EVD_FLAGS flags;
	DAT_COUNT qlen;
	pthread_mutex_t lock;
	DAT_EVENT *ring;
	int cap, head, count;
	int efd;	/* eventfd: something was queued by another thread */
	struct vc_cq vcq;	/* DTO EVDs: the CQ and its completion channel */
	bool armed;
	bool enabled, waitable;
	int waiters;
	int refs;	/* EPs, PSPs and the IA (async) using it */
	int cq_used;	/* work requests of the EPs on this CQ */
};

struct dsp_pz {
	struct dsp_hdr h;
	struct ibv_pd *pd;
	int refs;	/* LMRs and EPs */
};

struct dsp_lmr {
	struct dsp_hdr h;
	struct dsp_pz *pz;
	struct ibv_mr *mr;
	DAT_MEM_TYPE mem_type;
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN length;
	DAT_MEM_PRIV_FLAGS priv;
	DAT_VA_TYPE va_type;
};

/* A signalled work request in flight: its wr_id points here. */
struct dsp_slot {
	struct dsp_ep *ep;
	DAT_DTO_COOKIE cookie;
	DAT_DTOS op;
	DAT_SEG_LENGTH len;
	struct dsp_slot *next_free;
};

struct dsp_ep {
	struct dsp_hdr h;
	struct dsp_pz *pz;
	struct dsp_evd *recv_evd, *req_evd, *conn_evd;
	DAT_EP_ATTR attr;
	DAT_EP_STATE state;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	/* connect in progress */
	uint8_t pdata[VC_PDATA_MAX + 1];
	int pdata_len;	/* framed length */
	uint64_t deadline_ms;	/* 0: none */
	bool disconnect_called;
	bool freeing;
	/* what the last connection event carried (event private_data points here) */
	uint8_t ev_pdata[VC_PDATA_MAX];
	struct sockaddr_storage remote;
	DAT_PORT_QUAL remote_port;
	pthread_mutex_t slot_lock;
	struct dsp_slot *slots;
	int nslots;
	struct dsp_slot *free_slots;
	int outstanding;	/* signalled requests in flight */
	int out_recv;		/* of which receives */
	/* a socket conversion (ssp.c) owns the EP's connection events until
	 * it has finished with the socket: dsp_conn_event hands them to it */
	struct dsp_ssp *conv;
	/* iWARP's start rule (vcore.h, struct vc_rtr): the word the
	 * initiator writes and the handshake's state; rtr.mr is NULL on
	 * other devices */
	struct vc_rtr rtr;
};

struct dsp_psp {
	struct dsp_hdr h;
	struct rdma_cm_id *id;
	DAT_CONN_QUAL qual;
	struct dsp_evd *evd;
	DAT_PSP_FLAGS flags;
	struct dsp_ssp *ssp;	/* an SSP's hidden one-shot listener (ssp.c) */
};

struct dsp_cr {
	struct dsp_hdr h;
	struct rdma_cm_id *id;
	struct dsp_psp *psp;	/* NULL once the PSP is gone */
	DAT_CONN_QUAL qual;
	uint8_t pdata[VC_PDATA_MAX];
	int pdata_len;
	struct sockaddr_storage remote;
	DAT_PORT_QUAL remote_port;
	uint8_t initiator_depth, responder_resources;
	bool rtr_wanted;	/* the request asked for the start rule's handshake */
	struct dsp_ssp *ssp;	/* the request came over an SSP's socket (no id) */
};

/* debug: DAPL_SDP_DEBUG=1 in the environment, to stderr */
extern int dsp_debug;
void dsp_dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define DSP_DBG(...) do { if (dsp_debug) dsp_dbg(__VA_ARGS__); } while (0)

/* handles */
void dsp_hdr_init(struct dsp_hdr *h, struct dsp_ia *ia, enum dsp_type type);
void dsp_list_init(struct dsp_list *l);
void dsp_list_add(struct dsp_list *l, struct dsp_hdr *h);
void dsp_list_del(struct dsp_list *l, struct dsp_hdr *h);
static inline bool dsp_check(const void *handle, enum dsp_type type)
{
	const struct dsp_hdr *h = handle;

	return h && h->magic == DSP_MAGIC && h->type == type;
}
DAT_CONN_QUAL dsp_qual_to_port(DAT_CONN_QUAL q);
int dsp_pdata_room(const struct dsp_ia *ia);
int dsp_frame_connect_pdata(const struct dsp_ia *ia, uint8_t *out, const void *pdata,
			    DAT_COUNT len);

/* provider.c */
DAT_RETURN dsp_handle_extendedop(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args);

/* ia.c */
DAT_RETURN dsp_ia_open(const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE *async_evd,
		       DAT_IA_HANDLE *ia_handle);
DAT_RETURN dsp_ia_query(DAT_IA_HANDLE, DAT_EVD_HANDLE *, DAT_IA_ATTR_MASK, DAT_IA_ATTR *,
			DAT_PROVIDER_ATTR_MASK, DAT_PROVIDER_ATTR *);
DAT_RETURN dsp_ia_close(DAT_IA_HANDLE, DAT_CLOSE_FLAGS);
DAT_RETURN dsp_set_consumer_context(DAT_HANDLE, DAT_CONTEXT);
DAT_RETURN dsp_get_consumer_context(DAT_HANDLE, DAT_CONTEXT *);
DAT_RETURN dsp_get_handle_type(DAT_HANDLE, DAT_HANDLE_TYPE *);
struct dsp_provider *dsp_provider_find(const char *name);
void dsp_ia_kick(struct dsp_ia *ia);

/* evd.c */
DAT_RETURN dsp_evd_create(DAT_IA_HANDLE, DAT_COUNT, DAT_CNO_HANDLE, DAT_EVD_FLAGS,
			  DAT_EVD_HANDLE *);
DAT_RETURN dsp_evd_query(DAT_EVD_HANDLE, DAT_EVD_PARAM_MASK, DAT_EVD_PARAM *);
DAT_RETURN dsp_evd_enable(DAT_EVD_HANDLE);
DAT_RETURN dsp_evd_disable(DAT_EVD_HANDLE);
DAT_RETURN dsp_evd_wait(DAT_EVD_HANDLE, DAT_TIMEOUT, DAT_COUNT, DAT_EVENT *, DAT_COUNT *);
DAT_RETURN dsp_evd_resize(DAT_EVD_HANDLE, DAT_COUNT);
DAT_RETURN dsp_evd_post_se(DAT_EVD_HANDLE, const DAT_EVENT *);
DAT_RETURN dsp_evd_dequeue(DAT_EVD_HANDLE, DAT_EVENT *);
DAT_RETURN dsp_evd_free(DAT_EVD_HANDLE);
DAT_RETURN dsp_evd_set_unwaitable(DAT_EVD_HANDLE);
DAT_RETURN dsp_evd_clear_unwaitable(DAT_EVD_HANDLE);
/* queue an event (any thread); false when the queue was full */
bool dsp_evd_push(struct dsp_evd *evd, const DAT_EVENT *ev);
/* drain a CQ of completions belonging to an EP being freed (evd.c) */
void dsp_evd_drain_cq(struct dsp_evd *evd);
void dsp_evd_destroy(struct dsp_evd *evd);

/* mem.c */
DAT_RETURN dsp_pz_create(DAT_IA_HANDLE, DAT_PZ_HANDLE *);
DAT_RETURN dsp_pz_query(DAT_PZ_HANDLE, DAT_PZ_PARAM_MASK, DAT_PZ_PARAM *);
DAT_RETURN dsp_pz_free(DAT_PZ_HANDLE);
DAT_RETURN dsp_lmr_create(DAT_IA_HANDLE, DAT_MEM_TYPE, DAT_REGION_DESCRIPTION, DAT_VLEN,
			  DAT_PZ_HANDLE, DAT_MEM_PRIV_FLAGS, DAT_VA_TYPE, DAT_LMR_HANDLE *,
			  DAT_LMR_CONTEXT *, DAT_RMR_CONTEXT *, DAT_VLEN *, DAT_VADDR *);
DAT_RETURN dsp_lmr_query(DAT_LMR_HANDLE, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM *);
DAT_RETURN dsp_lmr_free(DAT_LMR_HANDLE);
DAT_RETURN dsp_lmr_sync_rdma_read(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
DAT_RETURN dsp_lmr_sync_rdma_write(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
void dsp_lmr_destroy(struct dsp_lmr *lmr);
void dsp_pz_destroy(struct dsp_pz *pz);

/* ep.c */
DAT_RETURN dsp_ep_create(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE,
			 DAT_EVD_HANDLE, const DAT_EP_ATTR *, DAT_EP_HANDLE *);
DAT_RETURN dsp_ep_query(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, DAT_EP_PARAM *);
DAT_RETURN dsp_ep_modify(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, const DAT_EP_PARAM *);
DAT_RETURN dsp_ep_connect(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_CONN_QUAL, DAT_TIMEOUT,
			  DAT_COUNT, const DAT_PVOID, DAT_QOS, DAT_CONNECT_FLAGS);
DAT_RETURN dsp_ep_disconnect(DAT_EP_HANDLE, DAT_CLOSE_FLAGS);
DAT_RETURN dsp_ep_post_send(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			    DAT_COMPLETION_FLAGS);
DAT_RETURN dsp_ep_post_recv(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			    DAT_COMPLETION_FLAGS);
DAT_RETURN dsp_ep_post_rdma_read(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				 const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN dsp_ep_post_rdma_write(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				  const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN dsp_ep_get_status(DAT_EP_HANDLE, DAT_EP_STATE *, DAT_BOOLEAN *, DAT_BOOLEAN *);
DAT_RETURN dsp_ep_free(DAT_EP_HANDLE);
DAT_RETURN dsp_ep_reset(DAT_EP_HANDLE);
void dsp_ep_destroy(struct dsp_ep *ep);
/* the slot a completion names goes back to its EP (evd.c) */
void dsp_slot_put(struct dsp_slot *s);
/* connection events for an EP, called by the progress thread with ia->lock */
void dsp_ep_cm_event(struct dsp_ep *ep, struct rdma_cm_event *ev);
void dsp_ep_check_timeouts(struct dsp_ia *ia, int *next_ms);
int dsp_ep_accept_pdata(struct dsp_ep *ep, bool rtr_wanted, uint8_t *out, const void *pdata,
			DAT_COUNT len);
/* an accept: the EP's QP onto the request's id, and its parameters */
void dsp_ep_take_id(struct dsp_ep *ep, struct rdma_cm_id *id,
		    const struct sockaddr_storage *remote);
struct rdma_conn_param dsp_ep_accept_param(struct dsp_ep *ep, const uint8_t *pdata, int len,
					   uint8_t initiator_depth, uint8_t responder_resources);
void dsp_conn_event(struct dsp_ep *ep, DAT_EVENT_NUMBER num, const void *pdata, int len);
/* start an rdma_cm connect of ep to dst: ia->lock held, ep->pdata framed,
 * state set to ACTIVE_CONNECTION_PENDING by the caller */
DAT_RETURN dsp_ep_start_connect(struct dsp_ep *ep, const struct sockaddr_storage *dst,
				DAT_TIMEOUT timeout);

/* cr.c */
DAT_RETURN dsp_psp_create(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			  DAT_PSP_HANDLE *);
DAT_RETURN dsp_psp_create_any(DAT_IA_HANDLE, DAT_CONN_QUAL *, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			      DAT_PSP_HANDLE *);
DAT_RETURN dsp_psp_query(DAT_PSP_HANDLE, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM *);
DAT_RETURN dsp_psp_free(DAT_PSP_HANDLE);
DAT_RETURN dsp_cr_query(DAT_CR_HANDLE, DAT_CR_PARAM_MASK, DAT_CR_PARAM *);
DAT_RETURN dsp_cr_accept(DAT_CR_HANDLE, DAT_EP_HANDLE, DAT_COUNT, const DAT_PVOID);
DAT_RETURN dsp_cr_reject(DAT_CR_HANDLE, DAT_COUNT, const DAT_PVOID);
void dsp_psp_destroy(struct dsp_psp *psp);
void dsp_cr_destroy(struct dsp_cr *cr);
/* a connect request on a listener, called by the progress thread with ia->lock */
void dsp_psp_cm_event(struct dsp_psp *psp, struct rdma_cm_event *ev);
void dsp_cr_cm_event(struct dsp_cr *cr, struct rdma_cm_event *ev);

/* ssp.c: the iWARP extension's Socket Service Points (dat_iw_extensions.h) */
DAT_RETURN dsp_ssp_create(struct dsp_ia *ia, va_list args);
DAT_RETURN dsp_ssp_free(DAT_HANDLE ssp);
DAT_RETURN dsp_ssp_query(DAT_HANDLE ssp, va_list args);
DAT_RETURN dsp_socket_connect(DAT_HANDLE ep, va_list args);
/* dsp_conn_event for an EP whose conversion is running (ia->lock held) */
void dsp_ssp_hook_event(struct dsp_ssp *s, DAT_EVENT_NUMBER num, const void *pdata, int len);
/* a request on an SSP's hidden listener (progress thread, ia->lock held) */
void dsp_ssp_conn_request(struct dsp_psp *lsn, struct rdma_cm_event *ev);
/* the SSP's answer to its request (cr.c) */
DAT_RETURN dsp_ssp_accept(struct dsp_cr *cr, struct dsp_ep *ep, DAT_COUNT pdsize,
			  const DAT_PVOID pdata);
DAT_RETURN dsp_ssp_reject(struct dsp_cr *cr, DAT_COUNT pdsize, const DAT_PVOID pdata);
/* stop the conversions that use ep, before it goes (ep.c) */
void dsp_ssp_release_ep(struct dsp_ep *ep);
/* the EP an SSP was made for, or NULL once it went */
struct dsp_ep *dsp_ssp_ep(struct dsp_ssp *s);
/* any SSP handle not freed yet? (ia->lock held) */
bool dsp_ssp_any_open(struct dsp_ia *ia);
/* stop and free every SSP and socket connect of the IA (ia.c) */
void dsp_ssp_close_all(struct dsp_ia *ia);

#endif
