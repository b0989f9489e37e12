/* SPDX-License-Identifier: BSD-2-Clause */
/* The example pairs' common part (pair.h says what and why). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pair.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pair_prog = "?";
const char *pair_role = "?";
int pair_checks;

void pair_fail(const char *fmt, ...)
{
	va_list ap;

	printf("%s: %s FAIL ", pair_prog, pair_role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

void pair_ck(DAT_RETURN rc, const char *what)
{
	const char *maj = "", *min = "";

	if (rc == DAT_SUCCESS)
		return;
	dat_strerror(rc, &maj, &min);
	pair_fail("%s: 0x%08x %s %s", what, rc, maj, min);
}

void pair_want_type(DAT_RETURN rc, DAT_RETURN type, const char *what)
{
	if (DAT_GET_TYPE(rc) != DAT_GET_TYPE(type))
		pair_fail("%s: 0x%08x, wanted type 0x%08x", what, rc, type);
	pair_checks++;
}

uint64_t pair_fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

void pair_fill(void *p, size_t n, uint64_t seed)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i += 8) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		memcpy(b + i, &seed, n - i < 8 ? n - i : 8);
	}
}

DAT_EVENT pair_wait(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, const char *what)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	pair_ck(dat_evd_wait(evd, PAIR_TMO, 1, &ev, &nmore), what);
	if (ev.event_number != want)
		pair_fail("%s: event 0x%x, wanted 0x%x", what, ev.event_number, want);
	if (want == DAT_DTO_COMPLETION_EVENT &&
	    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		pair_fail("%s: DTO status %d", what, ev.event_data.dto_completion_event_data.status);
	return ev;
}

static void *alloc(size_t align, size_t n)
{
	void *p = aligned_alloc(align, (n + align - 1) / align * align);

	if (!p)
		pair_fail("out of memory");
	return p;
}

void pair_open(struct pair_side *s, const struct pair_setup *cfg)
{
	DAT_REGION_DESCRIPTION region;
	DAT_EP_ATTR attr = cfg->ep_attr;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	int ssp = 0;

	s->async_evd = DAT_HANDLE_NULL;
	pair_ck(dat_ia_open((DAT_NAME_PTR)cfg->ia_name, 8, &s->async_evd, &s->ia), "dat_ia_open");
	pair_ck(dat_ia_query(s->ia, NULL, DAT_IA_ALL, &s->ia_attr, DAT_PROVIDER_FIELD_ALL,
			     &s->pattr), "dat_ia_query");
	/* DAT_IW_ATTR_SSP, named here without the extension's header */
	for (int i = 0; i < s->pattr.num_provider_specific_attr; i++)
		if (!strcmp(s->pattr.provider_specific_attr[i].name, "DAT_IW_ATTR_SSP") &&
		    !strcmp(s->pattr.provider_specific_attr[i].value, "TRUE"))
			ssp = 1;
	if (s->ia_attr.extension_supported != DAT_EXTENSION_IW || !ssp)
		pair_fail("IA %s: extension %d, DAT_IW_ATTR_SSP %s: no Socket Service Points",
			  cfg->ia_name, s->ia_attr.extension_supported, ssp ? "TRUE" : "missing");
	pair_checks++;

	pair_ck(dat_pz_create(s->ia, &s->pz), "dat_pz_create");
	if (cfg->cr_evd)
		pair_ck(dat_evd_create(s->ia, cfg->cr_qlen, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG,
				       &s->cr_evd), "evd_create (CR)");
	pair_ck(dat_evd_create(s->ia, cfg->conn_qlen, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
			       &s->conn_evd), "evd_create (connection)");
	pair_ck(dat_evd_create(s->ia, cfg->req_qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
			       &s->req_evd), "evd_create (requests)");
	pair_ck(dat_evd_create(s->ia, cfg->rcv_qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
			       &s->rcv_evd), "evd_create (receives)");
	pair_ck(dat_ep_create(s->ia, s->pz, s->rcv_evd, s->req_evd, s->conn_evd, &attr, &s->ep),
		"dat_ep_create");

	s->nrecv = cfg->nrecv;
	s->slot = cfg->slot;
	s->size = cfg->size;
	s->msgs = alloc(64, s->slot * (size_t)(s->nrecv + 1));
	s->data = alloc(4096, s->size);
	memset(s->data, 0, s->size);
	region.for_va = s->msgs;
	pair_ck(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region,
			       s->slot * (size_t)(s->nrecv + 1), s->pz,
			       DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
			       DAT_VA_TYPE_VA, &s->msg_lmr, &s->msg_lctx, &(DAT_RMR_CONTEXT){ 0 },
			       &rlen, &raddr), "lmr_create (messages)");
	region.for_va = s->data;
	pair_ck(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, s->size, s->pz,
			       cfg->data_priv, DAT_VA_TYPE_VA, &s->data_lmr, &s->data_lctx,
			       &s->data_rctx, &rlen, &raddr), "lmr_create (data)");
	for (int i = 0; i < s->nrecv; i++)
		pair_post_recv(s, i);
}

void pair_close(struct pair_side *s)
{
	pair_ck(dat_ep_free(s->ep), "dat_ep_free");
	pair_ck(dat_lmr_free(s->data_lmr), "lmr_free (data)");
	pair_ck(dat_lmr_free(s->msg_lmr), "lmr_free (messages)");
	pair_ck(dat_evd_free(s->rcv_evd), "evd_free (receives)");
	pair_ck(dat_evd_free(s->req_evd), "evd_free (requests)");
	pair_ck(dat_evd_free(s->conn_evd), "evd_free (connection)");
	if (s->cr_evd)
		pair_ck(dat_evd_free(s->cr_evd), "evd_free (CR)");
	pair_ck(dat_pz_free(s->pz), "pz_free");
	pair_ck(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close");
	free(s->msgs);
	free(s->data);
}

static unsigned char *slot(struct pair_side *s, int i)
{
	return s->msgs + (size_t)i * s->slot;
}

void pair_post_recv(struct pair_side *s, int i)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)slot(s, i), (DAT_SEG_LENGTH)s->slot,
				s->msg_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = (DAT_UINT64)i };

	pair_ck(dat_ep_post_recv(s->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		"post_recv");
}

void pair_post_send(struct pair_side *s, const void *msg, size_t len)
{
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)slot(s, s->nrecv), (DAT_SEG_LENGTH)len,
				s->msg_lctx };
	DAT_DTO_COOKIE cookie = { .as_64 = 0x5e9d };

	if (len > s->slot)
		pair_fail("a %zu-byte message in a %zu-byte slot", len, s->slot);
	memcpy(slot(s, s->nrecv), msg, len);
	pair_ck(dat_ep_post_send(s->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
		"post_send");
}

int pair_send_done(struct pair_side *s, size_t len, int flushed_ok)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	int flushed;

	pair_ck(dat_evd_wait(s->req_evd, PAIR_TMO, 1, &ev, &nmore), "send completion");
	if (ev.event_number != DAT_DTO_COMPLETION_EVENT)
		pair_fail("send completion: event 0x%x", ev.event_number);
	d = &ev.event_data.dto_completion_event_data;
	flushed = flushed_ok && d->status == DAT_DTO_ERR_FLUSHED;
	if (d->status != DAT_DTO_SUCCESS && !flushed)
		pair_fail("send completion: DTO status %d", d->status);
	if (d->user_cookie.as_64 != 0x5e9d || d->ep_handle != s->ep ||
	    d->operation != DAT_DTO_SEND || (!flushed && d->transfered_length != len))
		pair_fail("send completion: wrong cookie, EP, length or operation");
	pair_checks++;
	return flushed;
}

void pair_send(struct pair_side *s, const void *msg, size_t len)
{
	pair_post_send(s, msg, len);
	pair_send_done(s, len, 0);
}

size_t pair_recv(struct pair_side *s, void *out, size_t min_len, int repost)
{
	DAT_EVENT ev = pair_wait(s->rcv_evd, DAT_DTO_COMPLETION_EVENT, "receive");
	DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	int i = (int)d->user_cookie.as_64;
	size_t n = d->transfered_length;

	if (d->operation != DAT_DTO_RECEIVE || d->ep_handle != s->ep || i < 0 || i >= s->nrecv ||
	    n < min_len || n > s->slot)
		pair_fail("receive: operation %d, cookie %d, %zu bytes", d->operation, i, n);
	memcpy(out, slot(s, i), n);
	if (repost)
		pair_post_recv(s, i);
	pair_checks++;
	return n;
}

void pair_drop_flushed(struct pair_side *s)
{
	DAT_EVENT ev;

	while (dat_evd_dequeue(s->rcv_evd, &ev) == DAT_SUCCESS)
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_ERR_FLUSHED)
			pair_fail("a receive completed with status %d after the connection",
				  ev.event_data.dto_completion_event_data.status);
}
