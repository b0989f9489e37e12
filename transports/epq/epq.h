/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The queues of an endpoint whose backend makes its completions and
 * connection events itself, in memory, where a verbs device has its CQ
 * and rdma_cm its event channel: tcp-fallback and shm.  The backend
 * reserves a CQ place when work is posted (so that completing it can
 * never fail for want of memory), pushes the completion when the work is
 * done, and pops completions and events for the engine's poll_cq() and
 * get_event().  Also the address helpers both need.
 *
 * No locking: the engine holds the owning socket's lock around every call
 * on an endpoint (transports/oti.h).
 */
#ifndef SDP_EPQ_H
#define SDP_EPQ_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "oti.h"

/* A posted receive buffer. */
struct epq_recv {
	uint8_t *addr;
	uint32_t len;
	uint64_t ctx;
};

struct epq {
	/* At most RESOLVED, then one outcome, then the end. */
	struct oti_event ev[4];
	unsigned ev_head, ev_count;
	/* A ring of cq_cap completions, cq_count of them from cq_head on;
	 * cq_owed places kept for work posted and not yet complete. */
	struct oti_wc *cq;
	uint32_t cq_cap, cq_head, cq_count, cq_owed;
	/* Posted receives, oldest first: rq_count of them from rq_head on. */
	struct epq_recv *rq;
	uint32_t rq_cap, rq_head, rq_count;
};

/* A ring of *cap elements of size elem, count of them from *head on, made
 * at least want large (*head becomes 0).  0 or -ENOMEM. */
int epq_ring_reserve(void **arr, uint32_t *cap, uint32_t *head, uint32_t count, uint32_t want,
		     size_t elem);
/* Keep a CQ place for one more operation about to be posted. */
int epq_cq_reserve(struct epq *q);
/* A completion of an operation that epq_cq_reserve() counted. */
void epq_push_wc(struct epq *q, uint64_t ctx, enum oti_wc_op op, int status, uint32_t len);
/* A connection event (private data of len bytes, at most
 * OTI_MAX_PRIVATE_DATA); dropped beyond the four an endpoint can have. */
void epq_push_event(struct epq *q, enum oti_event_type type, int status, const void *pdata,
		    size_t len);
/* The oldest event into *ev: false if there is none. */
bool epq_pop_event(struct epq *q, struct oti_event *ev);
/* Up to n completions, oldest first, into wc[]: how many. */
int epq_pop_wcs(struct epq *q, struct oti_wc *wc, int n);
/* post_recv(): -EINVAL for a bad sge, -ENOMEM; on a connection that is
 * over (dead) the receive completes at once with -ECANCELED. */
int epq_post_recv(struct epq *q, const struct oti_sge *sge, uint64_t ctx, bool dead);
/* The oldest posted receive, or NULL. */
static inline struct epq_recv *epq_recv_head(struct epq *q)
{
	return q->rq_count ? &q->rq[q->rq_head] : NULL;
}
/* The oldest posted receive completes (status, len bytes). */
void epq_recv_done(struct epq *q, int status, uint32_t len);
/* Every posted receive completes with -ECANCELED. */
void epq_cancel_recvs(struct epq *q);
/* Free what the queues allocated. */
void epq_free(struct epq *q);

/* The length of a sockaddr of family (AF_INET6, else AF_INET). */
socklen_t epq_sa_len(int family);
/* 0, or the errno an endpoint or listener gives for the address: -EINVAL
 * (none, too short), -EAFNOSUPPORT (not IPv4 or IPv6). */
int epq_check_addr(const struct sockaddr *sa, socklen_t len);
/* The port (host order) of an IPv4 or IPv6 sockaddr, and into one. */
uint16_t epq_get_port(const void *sa);
void epq_set_port(void *sa, uint16_t port);

#endif
