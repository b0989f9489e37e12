/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Completion and event queues of the backends that make their own
 * (transports/epq/epq.h).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "epq.h"

int epq_ring_reserve(void **arr, uint32_t *cap, uint32_t *head, uint32_t count, uint32_t want,
		     size_t elem)
{
	if (want <= *cap)
		return 0;
	uint32_t ncap = *cap ? *cap : 16;

	while (ncap < want)
		ncap *= 2;
	uint8_t *n = malloc((size_t)ncap * elem), *o = *arr;

	if (!n)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++)
		memcpy(n + (size_t)i * elem, o + (size_t)((*head + i) % *cap) * elem, elem);
	free(o);
	*arr = n;
	*cap = ncap;
	*head = 0;
	return 0;
}

int epq_cq_reserve(struct epq *q)
{
	int ret = epq_ring_reserve((void **)&q->cq, &q->cq_cap, &q->cq_head, q->cq_count,
				   q->cq_count + q->cq_owed + 1, sizeof(*q->cq));

	if (!ret)
		q->cq_owed++;
	return ret;
}

void epq_push_wc(struct epq *q, uint64_t ctx, enum oti_wc_op op, int status, uint32_t len)
{
	q->cq_owed--;
	q->cq[(q->cq_head + q->cq_count++) % q->cq_cap] =
		(struct oti_wc){ .ctx = ctx, .op = op, .status = status, .len = len };
}

void epq_push_event(struct epq *q, enum oti_event_type type, int status, const void *pdata,
		    size_t len)
{
	const unsigned n = sizeof(q->ev) / sizeof(q->ev[0]);

	if (q->ev_count == n)
		return;
	struct oti_event *ev = &q->ev[(q->ev_head + q->ev_count++) % n];

	memset(ev, 0, offsetof(struct oti_event, private_data));
	ev->type = type;
	ev->status = status;
	ev->private_data_len = len;
	if (len)
		memcpy(ev->private_data, pdata, len);
}

bool epq_pop_event(struct epq *q, struct oti_event *ev)
{
	if (!q->ev_count)
		return false;
	*ev = q->ev[q->ev_head];
	q->ev_head = (q->ev_head + 1) % (sizeof(q->ev) / sizeof(q->ev[0]));
	q->ev_count--;
	return true;
}

int epq_pop_wcs(struct epq *q, struct oti_wc *wc, int n)
{
	int got = 0;

	while (got < n && q->cq_count) {
		wc[got++] = q->cq[q->cq_head];
		q->cq_head = (q->cq_head + 1) % q->cq_cap;
		q->cq_count--;
	}
	return got;
}

int epq_post_recv(struct epq *q, const struct oti_sge *sge, uint64_t ctx, bool dead)
{
	if (!sge || (!sge->addr && sge->len))
		return -EINVAL;
	if (epq_ring_reserve((void **)&q->rq, &q->rq_cap, &q->rq_head, q->rq_count,
			     q->rq_count + 1, sizeof(*q->rq)) ||
	    epq_cq_reserve(q))
		return -ENOMEM;
	if (dead) {
		epq_push_wc(q, ctx, OTI_WC_RECV, -ECANCELED, 0);
		return 0;
	}
	q->rq[(q->rq_head + q->rq_count) % q->rq_cap] =
		(struct epq_recv){ .addr = sge->addr, .len = sge->len, .ctx = ctx };
	q->rq_count++;
	return 0;
}

void epq_recv_done(struct epq *q, int status, uint32_t len)
{
	epq_push_wc(q, q->rq[q->rq_head].ctx, OTI_WC_RECV, status, len);
	q->rq_head = (q->rq_head + 1) % q->rq_cap;
	q->rq_count--;
}

void epq_cancel_recvs(struct epq *q)
{
	while (q->rq_count)
		epq_recv_done(q, -ECANCELED, 0);
}

void epq_free(struct epq *q)
{
	free(q->cq);
	free(q->rq);
	memset(q, 0, sizeof(*q));
}

socklen_t epq_sa_len(int family)
{
	return family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int epq_check_addr(const struct sockaddr *sa, socklen_t len)
{
	if (!sa)
		return -EINVAL;
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (len < epq_sa_len(sa->sa_family))
		return -EINVAL;
	return 0;
}

uint16_t epq_get_port(const void *sa)
{
	const struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

void epq_set_port(void *sa, uint16_t port)
{
	struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)sa)->sin_port = htons(port);
}
