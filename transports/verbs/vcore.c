/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The verbs core (vcore.h): rdma-core for the "ib"/"iwarp" transports and
 * for the uDAPL provider alike.  Results are 0 or a negative errno; errno
 * is set to 0 before a call whose failure it explains, so that a library
 * that fails without setting it still gives a reason (the fallback).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "sys.h"
#include "vcore.h"

static int vc_err(int fallback)
{
	return errno > 0 ? -errno : -fallback;
}

uint64_t vc_now_ms(void)
{
	return mono_ns() / 1000000;
}

/* --- addresses ------------------------------------------------------------ */

socklen_t vc_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

uint16_t vc_sa_port(const struct sockaddr *a)
{
	return ntohs(a->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
					      : ((const struct sockaddr_in *)a)->sin_port);
}

void vc_sa_set_port(struct sockaddr *a, uint16_t port)
{
	if (a->sa_family == AF_INET6)
		((struct sockaddr_in6 *)a)->sin6_port = htons(port);
	else if (a->sa_family == AF_INET)
		((struct sockaddr_in *)a)->sin_port = htons(port);
}

void vc_sa_copy(struct sockaddr_storage *out, const struct sockaddr *a, uint16_t port)
{
	memset(out, 0, sizeof(*out));
	memcpy(out, a, vc_sa_len(a));
	vc_sa_set_port((struct sockaddr *)out, port);
}

bool vc_same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (!a || !b || a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return a->sa_family == AF_INET6 &&
	       !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

/* --- private data --------------------------------------------------------- */

int vc_frame(uint8_t *out, size_t room, const void *pdata, size_t len)
{
	if (len + 1 > room || len + 1 > VC_PDATA_MAX)
		return -EINVAL;
	out[0] = (uint8_t)len;
	if (len)
		memcpy(out + 1, pdata, len);
	return (int)len + 1;
}

int vc_unframe(const void *in, size_t inlen, uint8_t *out)
{
	const uint8_t *p = in;

	if (!p || inlen < 1 || p[0] > inlen - 1)
		return -EPROTO;
	memcpy(out, p + 1, p[0]);
	return p[0];
}

int vc_rejected(const struct rdma_cm_event *ev, bool iwarp, uint8_t *out)
{
	int n = vc_unframe(ev->param.conn.private_data, ev->param.conn.private_data_len, out);

	if (n >= 0 && (iwarp || ev->status == VC_IB_REJ_CONSUMER))
		return n;
	return -ECONNREFUSED;
}

/* --- devices and descriptors ---------------------------------------------- */

bool vc_iwarp(const struct ibv_context *ctx)
{
	return ctx && ctx->device->transport_type == IBV_TRANSPORT_IWARP;
}

int vc_nonblock(int fd)
{
	int fl = sys.fcntl(fd, F_GETFL);

	if (fl < 0 || sys.fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

struct rdma_event_channel *vc_channel_new(void)
{
	struct rdma_event_channel *ch = RDMA(rdma_create_event_channel());
	int r;

	if (ch && (r = vc_nonblock(ch->fd)) < 0) {
		RDMA_VOID(rdma_destroy_event_channel(ch));
		errno = -r;
		return NULL;
	}
	return ch;
}

void vc_channel_free(struct rdma_event_channel *ch)
{
	if (ch)
		RDMA_VOID(rdma_destroy_event_channel(ch));
}

/* --- rdma_cm ids ---------------------------------------------------------- */

int vc_id_new(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context)
{
	errno = 0;
	return RDMA(rdma_create_id(ch, id, context, RDMA_PS_TCP)) ? vc_err(ENOMEM) : 0;
}

void vc_id_free(struct rdma_cm_id *id)
{
	if (id)
		RDMA(rdma_destroy_id(id));
}

int vc_id_afonly(struct rdma_cm_id *id)
{
	int one = 1;

	errno = 0;
	return RDMA(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)))
		       ? vc_err(EINVAL)
		       : 0;
}

int vc_bind(struct rdma_cm_id *id, const struct sockaddr *addr, bool port_zero)
{
	struct sockaddr_storage a;

	vc_sa_copy(&a, addr, port_zero ? 0 : vc_sa_port(addr));
	errno = 0;
	return RDMA(rdma_bind_addr(id, (struct sockaddr *)&a)) ? vc_err(EADDRNOTAVAIL) : 0;
}

int vc_listen(struct rdma_cm_id *id, int backlog)
{
	errno = 0;
	return RDMA(rdma_listen(id, backlog)) ? vc_err(EADDRINUSE) : 0;
}

int vc_listen_on(struct rdma_event_channel *ch, const struct sockaddr *addr, int backlog,
		 void *context, struct rdma_cm_id **out)
{
	struct rdma_cm_id *id;
	int r = vc_id_new(ch, &id, context);

	if (r)
		return r;
	r = vc_bind(id, addr, false);
	if (!r)
		r = vc_listen(id, backlog);
	if (r) {
		vc_id_free(id);
		return r;
	}
	*out = id;
	return 0;
}

int vc_resolve_addr(struct rdma_cm_id *id, const struct sockaddr *src,
		    const struct sockaddr *dst)
{
	errno = 0;
	return RDMA(rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst,
				      VC_RESOLVE_MS))
		       ? vc_err(EHOSTUNREACH)
		       : 0;
}

int vc_resolve_route(struct rdma_cm_id *id)
{
	errno = 0;
	return RDMA(rdma_resolve_route(id, VC_RESOLVE_MS)) ? vc_err(EHOSTUNREACH) : 0;
}

int vc_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	errno = 0;
	return RDMA(rdma_migrate_id(id, ch)) ? vc_err(EIO) : 0;
}

int vc_cm_next(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	errno = 0;
	return RDMA(rdma_get_cm_event(ch, ev)) == 0 ? 0 : vc_err(EAGAIN);
}

void vc_cm_ack(struct rdma_cm_event *ev)
{
	RDMA(rdma_ack_cm_event(ev));
}

struct rdma_conn_param vc_conn_param(const uint8_t *pdata, int n, uint8_t responder_resources,
				     uint8_t initiator_depth)
{
	return (struct rdma_conn_param){
		.private_data = pdata,
		.private_data_len = (uint8_t)n,
		.responder_resources = responder_resources,
		.initiator_depth = initiator_depth,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
}

int vc_connect(struct rdma_cm_id *id, const struct rdma_conn_param *p)
{
	errno = 0;
	return RDMA(rdma_connect(id, (struct rdma_conn_param *)p)) ? vc_err(EIO) : 0;
}

int vc_accept(struct rdma_cm_id *id, const struct rdma_conn_param *p)
{
	errno = 0;
	return RDMA(rdma_accept(id, (struct rdma_conn_param *)p)) ? vc_err(EIO) : 0;
}

int vc_reject(struct rdma_cm_id *id, const uint8_t *pdata, int n)
{
	errno = 0;
	return RDMA(rdma_reject(id, pdata, (uint8_t)n)) ? vc_err(EIO) : 0;
}

int vc_disconnect(struct rdma_cm_id *id)
{
	errno = 0;
	return RDMA(rdma_disconnect(id)) ? vc_err(EIO) : 0;
}

void vc_disconnect_once(struct rdma_cm_id *id, bool *called)
{
	if (id && !*called) {
		*called = true;
		vc_disconnect(id);
	}
}

/* --- protection domains, memory, queue pairs ------------------------------ */

struct ibv_pd *vc_pd_new(struct ibv_context *ctx)
{
	return RDMA(ibv_alloc_pd(ctx));
}

void vc_pd_free(struct ibv_pd *pd)
{
	if (pd)
		RDMA(ibv_dealloc_pd(pd));
}

struct ibv_mr *vc_mr_reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	if (access & IBV_ACCESS_REMOTE_WRITE)
		access |= IBV_ACCESS_LOCAL_WRITE;
	errno = 0;
	return RDMA(ibv_reg_mr(pd, addr, len, access));
}

int vc_mr_dereg(struct ibv_mr *mr)
{
	return mr && RDMA(ibv_dereg_mr(mr)) ? -EIO : 0;
}

int vc_qp_new(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	errno = 0;
	return RDMA(rdma_create_qp(id, pd, attr)) ? vc_err(ENOMEM) : 0;
}

void vc_qp_free(struct rdma_cm_id *id)
{
	if (id && id->qp)
		RDMA_VOID(rdma_destroy_qp(id));
}

void vc_qp_flush(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	RDMA(ibv_modify_qp(qp, &a, IBV_QP_STATE));
}

void vc_qp_destroy(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	if (id && id->qp == qp)
		id->qp = NULL;
	RDMA(ibv_destroy_qp(qp));
}

void vc_qp_move(struct rdma_cm_id *from, struct rdma_cm_id *to)
{
	to->qp = from->qp;
	from->qp = NULL;
	from->context = NULL;
}

/* --- completion queues ---------------------------------------------------- */

int vc_cq_open(struct ibv_context *ctx, int cqe, void *cq_context, const struct vc_fds *own,
	       struct vc_cq *out)
{
	int r;

	memset(out, 0, sizeof(*out));
	errno = 0;
	if (own)
		own->making();
	out->cc = RDMA(ibv_create_comp_channel(ctx));
	if (!out->cc) {
		r = vc_err(ENOMEM);
		if (own)
			own->made(NULL);
		return r;
	}
	r = own ? own->made(&out->cc->fd) : vc_nonblock(out->cc->fd);
	if (r)
		goto fail;
	errno = 0;
	out->cq = RDMA(ibv_create_cq(ctx, cqe, cq_context, out->cc, 0));
	if (!out->cq) {
		r = vc_err(ENOMEM);
		goto fail;
	}
	return 0;
fail:
	vc_cq_close(out);
	return r;
}

void vc_cq_close(struct vc_cq *c)
{
	if (c->cq) {
		RDMA_VOID(ibv_ack_cq_events(c->cq, c->events));
		RDMA(ibv_destroy_cq(c->cq));
	}
	if (c->cc)
		RDMA(ibv_destroy_comp_channel(c->cc));
	memset(c, 0, sizeof(*c));
}

/* Acknowledging takes a lock in rdma-core: every 64th is enough, and
 * vc_cq_close() acknowledges the rest before the CQ goes. */
#define VC_CQ_ACK_BATCH 64

int vc_cq_take_events(struct vc_cq *c)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = 0;

	/* One: an arm makes one notification.  Reading on until EAGAIN
	 * cost a system call per sleep; one left behind keeps the channel
	 * readable and is taken at the next wake. */
	if (c->cc && RDMA(ibv_get_cq_event(c->cc, &cq, &ctx)) == 0) {
		c->events++;
		n++;
	}
	if (c->events >= VC_CQ_ACK_BATCH) {
		RDMA_VOID(ibv_ack_cq_events(c->cq, c->events));
		c->events = 0;
	}
	return n;
}

/* --- asynchronous device events ------------------------------------------- */

int vc_async_next(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	return RDMA(ibv_get_async_event(ctx, ev)) == 0 ? 0 : -EAGAIN;
}

void vc_async_ack(struct ibv_async_event *ev)
{
	RDMA_VOID(ibv_ack_async_event(ev));
}

enum vc_async vc_async_kind(const struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		return VC_ASYNC_QP;
	case IBV_EVENT_CQ_ERR:
		return VC_ASYNC_CQ;
	case IBV_EVENT_PORT_ERR:
		return VC_ASYNC_PORT;
	case IBV_EVENT_DEVICE_FATAL:
		return VC_ASYNC_DEVICE;
	default:
		return VC_ASYNC_OTHER;
	}
}

/* --- the iWARP start rule ------------------------------------------------- */

int vc_rtr_init(struct vc_rtr *r, struct ibv_pd *pd)
{
	memset(r, 0, sizeof(*r));
	r->mr = vc_mr_reg(pd, &r->word, sizeof(r->word),
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	return r->mr ? 0 : vc_err(ENOMEM);
}

void vc_rtr_fini(struct vc_rtr *r)
{
	vc_mr_dereg(r->mr);
	r->mr = NULL;
}

void vc_rtr_reset(struct vc_rtr *r)
{
	r->promised = false;
	vc_rtr_stop(r);
}

void vc_rtr_stop(struct vc_rtr *r)
{
	r->wait = false;
	r->first_ms = 0;
}

bool vc_rtr_busy(const struct vc_rtr *r)
{
	return r->wait || r->first_ms;
}

int vc_rtr_ask(uint8_t *out, int n)
{
	out[n] = VC_RTR_WANTED;
	return n + 1;
}

bool vc_rtr_asked(const void *pdata, size_t len)
{
	const uint8_t *p = pdata;

	return p && len >= 2 && p[0] <= len - 2 && (p[1 + p[0]] & VC_RTR_WANTED);
}

/* The target: address (8 bytes) and rkey (4), big-endian. */
int vc_rtr_accept(struct vc_rtr *r, bool asked, uint8_t *out, int n)
{
	uint64_t addr = (uint64_t)(uintptr_t)&r->word;

	r->promised = asked && r->mr;
	if (!r->promised)
		return n;
	__atomic_store_n(&r->word, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 8; i++)
		out[n + i] = (uint8_t)(addr >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		out[n + 8 + i] = (uint8_t)(r->mr->rkey >> (24 - 8 * i));
	return n + VC_RTR_LEN;
}

bool vc_rtr_target(const void *pdata, size_t len, uint64_t *addr, uint32_t *rkey)
{
	const uint8_t *p = pdata;
	uint64_t a = 0;
	uint32_t k = 0;

	if (!p || len < 1 + VC_RTR_LEN || p[0] > len - 1 - VC_RTR_LEN)
		return false;
	p += 1 + p[0];
	for (int i = 0; i < 8; i++)
		a = a << 8 | p[i];
	for (int i = 8; i < 12; i++)
		k = k << 8 | p[i];
	*addr = a;
	*rkey = k;
	return true;
}

/* The initiator's first FPDU: an RDMA write of a non-zero word to the
 * responder's target, unsignalled (wr_id 0: only an error completes it,
 * on a QP that does not signal everything). */
static int rtr_write(struct vc_rtr *r, struct ibv_qp *qp)
{
	struct ibv_sge sge = { .addr = (uintptr_t)&r->word, .length = sizeof(r->word),
			       .lkey = r->mr->lkey };
	struct ibv_send_wr wr, *bad;
	int e;

	r->word = 1;
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = r->addr;
	wr.wr.rdma.rkey = r->rkey;
	e = ibv_post_send(qp, &wr, &bad);
	return e ? -e : 0;
}

int vc_rtr_established(struct vc_rtr *r, struct ibv_qp *qp, bool active, const void *pdata,
		       size_t len, uint64_t now_ms)
{
	uint64_t addr;
	uint32_t rkey;
	int e;

	if (!active) {
		if (!r->promised)
			return 1;
		r->wait = true;
		r->deadline_ms = now_ms + VC_RTR_MS;
		return 0;
	}
	if (!r->mr || !vc_rtr_target(pdata, len, &addr, &rkey))
		return 1;
	r->addr = addr;
	r->rkey = rkey;
	e = rtr_write(r, qp);
	if (e)
		return e;
	r->resends = 0;
	r->first_ms = now_ms;
	return 1;
}

static void lower(int *next_ms, uint64_t due, uint64_t now)
{
	int ms = due > now ? (int)(due - now) : 0;

	if (*next_ms < 0 || ms < *next_ms)
		*next_ms = ms;
}

int vc_rtr_tick(struct vc_rtr *r, struct ibv_qp *qp, uint64_t now_ms, int *next_ms,
		uint64_t *waited_ms)
{
	static const int after_ms[VC_RTR_RESENDS] = { 10, 100, 1000 };

	if (r->first_ms) {
		uint64_t due = r->first_ms + (uint64_t)after_ms[r->resends];

		if (now_ms >= due) {
			/* a repeat that cannot be posted changes nothing:
			 * the first one went */
			(void)rtr_write(r, qp);
			if (++r->resends == VC_RTR_RESENDS)
				r->first_ms = 0;
			else
				due = r->first_ms + (uint64_t)after_ms[r->resends];
		}
		if (r->first_ms)
			lower(next_ms, due, now_ms);
	}
	if (!r->wait)
		return VC_RTR_IDLE;
	if (__atomic_load_n(&r->word, __ATOMIC_ACQUIRE)) {
		r->wait = false;
		*waited_ms = now_ms + VC_RTR_MS - r->deadline_ms;
		return VC_RTR_SEEN;
	}
	if (now_ms >= r->deadline_ms) {
		r->wait = false;
		return -ETIMEDOUT;
	}
	/* the word is polled: a write completes nothing on this side */
	lower(next_ms, now_ms + 1, now_ms);
	return VC_RTR_IDLE;
}
