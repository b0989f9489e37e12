/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The verbs core: what libsdp's two users of librdmacm and libibverbs
 * share, below both of them.
 *
 *   transports/verbs/verbs.c  the "ib" and "iwarp" transports, behind the
 *                             OTI (the SDP engine's consumer of RDMA);
 *   dat/                      the uDAPL provider libdaplsdp, a consumer of
 *                             RDMA of its own (DAPL programs).
 *
 * Each calls down into this file only; the core knows nothing of the OTI,
 * of SDP or of DAT.  It holds no state of its own, so the copy linked into
 * libsdp and the one linked into libdaplsdp never meet.  What it gives:
 *
 *   - the library boundary: every call into rdma-core that may make a
 *     libc call goes through RDMA() (common/internal.h says why);
 *   - rdma_cm ids, event channels, listening, connecting, accepting,
 *     rejecting and disconnecting, with 0 / negative errno results;
 *   - private data framing, and telling a peer consumer's reject from a
 *     refusal by the stack;
 *   - protection domains, memory regions, queue pairs, completion queues
 *     with their channel, asynchronous device events;
 *   - the iWARP start rule (struct vc_rtr): one mechanism for both users.
 *
 * Descriptors rdma-core makes (an event channel's, a completion channel's)
 * come back non-blocking.  Moving them out of the application's range is
 * the caller's choice (verbs.c does, common/fdspace.h; the DAT provider,
 * which its program loads on purpose, leaves them where rdma-core put
 * them: a second region in a process that has the preload would contend
 * with the preload's for the same numbers).
 */
#ifndef VCORE_H
#define VCORE_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "internal.h"

/*
 * A call into librdmacm or libibverbs.  Their own calls to libc (the
 * device files they open, the sockets and descriptors they make) reach the
 * preload's wrappers, which must pass them to libc and move what they make
 * out of the application's descriptor numbers: the flag says so
 * (internal.h).  The data path (post, poll, notify) makes none of those
 * calls and is left bare.  In libdaplsdp the flag is the provider's own
 * (its exports are fixed: dat/libdaplsdp.map), so there it marks the
 * boundary and nothing reads it.
 */
#define RDMA(call)                                      \
	__extension__({                                 \
		sdp_internal_enter();                   \
		__typeof__(call) rdma_ret_ = (call);    \
		sdp_internal_leave();                   \
		rdma_ret_;                              \
	})
#define RDMA_VOID(call)               \
	do {                          \
		sdp_internal_enter(); \
		call;                 \
		sdp_internal_leave(); \
	} while (0)

/* rdma_cm's address and route resolution, each. */
#define VC_RESOLVE_MS 2000

uint64_t vc_now_ms(void);

/* --- addresses (AF_INET, AF_INET6) ---------------------------------------- */

socklen_t vc_sa_len(const struct sockaddr *a);
uint16_t vc_sa_port(const struct sockaddr *a);
void vc_sa_set_port(struct sockaddr *a, uint16_t port);
/* a into *out (zeroed first), with port. */
void vc_sa_copy(struct sockaddr_storage *out, const struct sockaddr *a, uint16_t port);
bool vc_same_ip(const struct sockaddr *a, const struct sockaddr *b);

/* --- private data --------------------------------------------------------- */

/*
 * What a consumer gives travels framed: one length byte, then the bytes,
 * so that the receiver gets the exact size whatever the wire adds
 * (librdmacm pads an IB connect request's data to its 56 bytes), and so
 * that a reject that carries no framing is known for the stack's.
 */
#define VC_PDATA_MAX 255	/* rdma_conn_param's private_data_len is one byte */
#define VC_IB_REQ_ROOM 56	/* IB/RoCE: the consumer's bytes in a connect request */
#define VC_IB_REJ_CONSUMER 28	/* IB_CM_REJ_CONSUMER_DEFINED: rdma_reject()'s reason */

/* [len][bytes] into out; the framed length, or -EINVAL when more than
 * room (or VC_PDATA_MAX) bytes would go out. */
int vc_frame(uint8_t *out, size_t room, const void *pdata, size_t len);
/* The consumer's bytes (at most VC_PDATA_MAX - 1) into out; their number,
 * or -EPROTO when in is not framed (nothing, or too short). */
int vc_unframe(const void *in, size_t inlen, uint8_t *out);

/*
 * A REJECTED event on a connecting id: the peer consumer's reject, whose
 * framed bytes go to out (their number returned), or -ECONNREFUSED for a
 * refusal by the stack (no listener, an unframed reject).  On IB/RoCE the
 * consumer's reject has its own reason; on iWARP an MPA reject carries
 * the rejecting consumer's framed data and a refused TCP connect none.
 */
int vc_rejected(const struct rdma_cm_event *ev, bool iwarp, uint8_t *out);

/* --- devices and descriptors ---------------------------------------------- */

bool vc_iwarp(const struct ibv_context *ctx);
/* fd made non-blocking: 0 or a negative errno. */
int vc_nonblock(int fd);
/* An event channel whose fd is non-blocking, or NULL (errno set). */
struct rdma_event_channel *vc_channel_new(void);
void vc_channel_free(struct rdma_event_channel *ch);

/* --- rdma_cm ids ---------------------------------------------------------- */

int vc_id_new(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context);
void vc_id_free(struct rdma_cm_id *id);
/* Its own address family only (IPV6_V6ONLY for an IPv6 listener). */
int vc_id_afonly(struct rdma_cm_id *id);
/* Bind to addr's address and port; port_zero: any port. */
int vc_bind(struct rdma_cm_id *id, const struct sockaddr *addr, bool port_zero);
int vc_listen(struct rdma_cm_id *id, int backlog);
/* A listener on addr: a new id on ch, bound (EADDRINUSE as bind(2)) and
 * listening; on failure nothing is left. */
int vc_listen_on(struct rdma_event_channel *ch, const struct sockaddr *addr, int backlog,
		 void *context, struct rdma_cm_id **out);
int vc_resolve_addr(struct rdma_cm_id *id, const struct sockaddr *src,
		    const struct sockaddr *dst);
int vc_resolve_route(struct rdma_cm_id *id);
int vc_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch);
/* The next event on ch, or -EAGAIN; vc_cm_ack() it once handled. */
int vc_cm_next(struct rdma_event_channel *ch, struct rdma_cm_event **ev);
void vc_cm_ack(struct rdma_cm_event *ev);

/* Connect and accept parameters: pdata (framed, n bytes), RDMA read
 * depths, and the retry counts both users want (7: as many as there are). */
struct rdma_conn_param vc_conn_param(const uint8_t *pdata, int n, uint8_t responder_resources,
				     uint8_t initiator_depth);
int vc_connect(struct rdma_cm_id *id, const struct rdma_conn_param *p);
int vc_accept(struct rdma_cm_id *id, const struct rdma_conn_param *p);
/* pdata already framed (or NULL, 0: a refusal without data). */
int vc_reject(struct rdma_cm_id *id, const uint8_t *pdata, int n);
int vc_disconnect(struct rdma_cm_id *id);
/* rdma_disconnect() once per connection: *called remembers it. */
void vc_disconnect_once(struct rdma_cm_id *id, bool *called);

/* --- protection domains, memory, queue pairs ------------------------------ */

struct ibv_pd *vc_pd_new(struct ibv_context *ctx);
void vc_pd_free(struct ibv_pd *pd);
/* IBV_ACCESS_* flags; remote write brings local write, as verbs asks. */
struct ibv_mr *vc_mr_reg(struct ibv_pd *pd, void *addr, size_t len, int access);
int vc_mr_dereg(struct ibv_mr *mr);
int vc_qp_new(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
/* The QP rdma_create_qp() made on id. */
void vc_qp_free(struct rdma_cm_id *id);
/* Into the error state: posted work completes flushed. */
void vc_qp_flush(struct ibv_qp *qp);
/* A QP that may have moved between ids (vc_qp_move): id, if given,
 * forgets it first. */
void vc_qp_destroy(struct rdma_cm_id *id, struct ibv_qp *qp);
/* The QP of from goes to to (an accept onto a request's id, keeping the
 * receives posted before it); from keeps no QP and no context. */
void vc_qp_move(struct rdma_cm_id *from, struct rdma_cm_id *to);

/* --- completion queues ---------------------------------------------------- */

struct vc_cq {
	struct ibv_comp_channel *cc;	/* its fd non-blocking */
	struct ibv_cq *cq;
	unsigned events;		/* taken, not yet acknowledged */
};

/*
 * How a caller keeps the descriptors rdma-core makes for it out of the
 * application's numbers (the transport: common/fdspace.h).  making() is
 * called before the call that makes one, made() after it, with the
 * field rdma-core keeps it in (NULL: the call failed), and returns
 * <0 to give up; made() leaves the descriptor non-blocking.
 */
struct vc_fds {
	void (*making)(void);
	int (*made)(int *field);
};

/* own: NULL leaves the channel's descriptor where rdma-core put it (the
 * uDAPL provider, whose program sees its descriptors anyway). */
int vc_cq_open(struct ibv_context *ctx, int cqe, void *cq_context, const struct vc_fds *own,
	       struct vc_cq *out);
/* Acknowledges what was taken, destroys; safe on a zeroed or failed one. */
void vc_cq_close(struct vc_cq *c);
/* Take a notification of the channel, if one is there (acknowledged in
 * batches); how many (0 or 1). */
int vc_cq_take_events(struct vc_cq *c);

/* --- asynchronous device events ------------------------------------------- */

enum vc_async {
	VC_ASYNC_OTHER,
	VC_ASYNC_QP,		/* fatal, request or access error: element.qp */
	VC_ASYNC_CQ,		/* element.cq */
	VC_ASYNC_PORT,		/* port error: element.port_num */
	VC_ASYNC_DEVICE,	/* the device is gone */
};

/* The next one (the context's async_fd non-blocking), or -EAGAIN. */
int vc_async_next(struct ibv_context *ctx, struct ibv_async_event *ev);
void vc_async_ack(struct ibv_async_event *ev);
enum vc_async vc_async_kind(const struct ibv_async_event *ev);

/* --- the iWARP start rule ------------------------------------------------- */

/*
 * An MPA responder must not send before it has received the initiator's
 * first FPDU (RFC 5044, 7.1.2), and siw enforces it: when the responder's
 * first message reaches an siw initiator together with the MPA reply,
 * siw fails the connect (CONNECT_ERROR) while the responder believes it
 * is connected.  siw offers no MPA v2 RTR, so the core makes the first
 * FPDU itself, a ready-to-receive (RTR) handshake in the connection's
 * private data:
 *
 *   - the initiator's connect request carries a flags byte after its
 *     framed bytes (VC_RTR_WANTED: vc_rtr_ask);
 *   - an accept of such a request carries, after its framed bytes, the
 *     address and rkey of an 8-byte word of the responder's
 *     (VC_RTR_LEN bytes: vc_rtr_accept);
 *   - the initiator RDMA-writes that word before it reports the
 *     connection up (vc_rtr_established), and the responder reports it
 *     up only once the word has changed (vc_rtr_tick polls it, every
 *     millisecond, for VC_RTR_MS at most).
 *
 * siw's responder also overlooks bytes that arrive while it hands the
 * socket from connection setup to the QP, until more arrive: the
 * initiator writes the word again 10, 100 and 1000 ms later, unsignalled
 * where the QP allows, into its own memory; the send queue needs
 * VC_RTR_SQ_ROOM beyond the consumer's requests for them.  A peer that
 * does not ask (an older libsdp) gets no handshake, and one that is not
 * asked gives no target.  Only on iWARP: the other devices have no such
 * rule.
 */
#define VC_RTR_WANTED 0x01
#define VC_RTR_LEN 12
#define VC_RTR_MS 30000
#define VC_RTR_RESENDS 3
#define VC_RTR_SQ_ROOM (1 + VC_RTR_RESENDS)

struct vc_rtr {
	uint64_t word;		/* the responder's target; the initiator's source */
	struct ibv_mr *mr;	/* the word, remotely writable */
	bool promised;		/* responder: our accept carried the target */
	bool wait;		/* responder: up, the write not seen yet */
	uint64_t deadline_ms;	/* responder: the wait ends then */
	uint64_t first_ms;	/* initiator: the first write (0: none to repeat) */
	int resends;		/* initiator: writes done after the first */
	uint64_t addr;		/* initiator: the responder's target */
	uint32_t rkey;
};

/* Register the word on pd (an iWARP connection's): 0 or a negative errno. */
int vc_rtr_init(struct vc_rtr *r, struct ibv_pd *pd);
void vc_rtr_fini(struct vc_rtr *r);
/* A new connection (or a failed one): nothing promised, awaited or due. */
void vc_rtr_reset(struct vc_rtr *r);
/* Connect request: after the n framed bytes in out, the flags byte; the
 * new length (out holds VC_PDATA_MAX). */
int vc_rtr_ask(uint8_t *out, int n);
/* Did the request (its raw private data) ask for the handshake? */
bool vc_rtr_asked(const void *pdata, size_t len);
/* Accept: after the n framed bytes in out, the target when the request
 * asked and r has a word; the new length.  The caller framed the
 * consumer's bytes in VC_RTR_LEN less room when asked. */
int vc_rtr_accept(struct vc_rtr *r, bool asked, uint8_t *out, int n);
/* The target an accept carries after its framed bytes, if any. */
bool vc_rtr_target(const void *pdata, size_t len, uint64_t *addr, uint32_t *rkey);

/*
 * rdma_cm said ESTABLISHED.  The initiator (active) writes the word the
 * accept's raw private data names, if any, on qp; the responder starts
 * waiting if it promised.  Returns 1: report the connection up now; 0:
 * not yet (the responder waits: vc_rtr_tick); or the negative errno of a
 * write that could not be posted (the connection is unusable).
 */
int vc_rtr_established(struct vc_rtr *r, struct ibv_qp *qp, bool active, const void *pdata,
		       size_t len, uint64_t now_ms);

enum {
	VC_RTR_IDLE = 0,	/* nothing to report */
	VC_RTR_SEEN = 1,	/* responder: the write landed, report the connection up */
};

/*
 * Time has passed: the initiator's repeats that are due are written; the
 * responder looks at its word.  Returns VC_RTR_SEEN, VC_RTR_IDLE, or
 * -ETIMEDOUT when the responder gave up waiting (report an accept
 * failure).  *next_ms is lowered to when it wants to be called again
 * (left alone when never: -1 there means no wish yet).  *waited_ms, with
 * VC_RTR_SEEN: how long the responder waited.
 */
int vc_rtr_tick(struct vc_rtr *r, struct ibv_qp *qp, uint64_t now_ms, int *next_ms,
		uint64_t *waited_ms);
/* Anything left to do for vc_rtr_tick? */
bool vc_rtr_busy(const struct vc_rtr *r);
/* The connection is no longer up (or going up): stop waiting and repeating. */
void vc_rtr_stop(struct vc_rtr *r);

#endif /* VCORE_H */
