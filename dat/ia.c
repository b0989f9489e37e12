/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: the Interface Adapter.  dat_ia_open resolves the dat.conf
 * ia_params (first word: a netdev name, an IP address or a host name) to
 * an address, binds an rdma_cm id to it to learn the RDMA device, and
 * starts the IA's progress thread.
 *
 * The progress thread (progress()) sleeps in poll() on the IA's rdma_cm
 * event channel (every cm_id of the IA is on it: EPs, listeners, and the
 * connect requests those get), the device's async-event fd, and an
 * eventfd that stops it.  Connection events become DAT events on the
 * EP's connect EVD or the PSP's CR EVD; async events go to the IA's async
 * EVD.  Connect timeouts are checked there too.  Data completions are
 * not the thread's business (evd.c).
 */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "provider.h"
#include "dat_iw_extensions.h"

/* ---- ia_params ----------------------------------------------------------- */

static int addr_of_netdev(const char *name, struct sockaddr_storage *out)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa) != 0)
		return -1;
	/* IPv4 first, then a global IPv6 address */
	for (int fam = 0; fam < 2 && !found; fam++) {
		for (i = ifa; i && !found; i = i->ifa_next) {
			if (!i->ifa_addr || strcmp(i->ifa_name, name) != 0)
				continue;
			if (fam == 0 && i->ifa_addr->sa_family == AF_INET) {
				memcpy(out, i->ifa_addr, sizeof(struct sockaddr_in));
				found = 1;
			} else if (fam == 1 && i->ifa_addr->sa_family == AF_INET6) {
				const struct sockaddr_in6 *s6 = (const void *)i->ifa_addr;

				if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
					continue;
				memcpy(out, s6, sizeof(*s6));
				found = 1;
			}
		}
	}
	freeifaddrs(ifa);
	return found ? 0 : -1;
}

static int resolve_params(const char *params, struct sockaddr_storage *out)
{
	char word[128];
	struct addrinfo hints, *ai = NULL;
	size_t n = strcspn(params, " \t");

	if (n == 0 || n >= sizeof(word))
		return -1;
	memcpy(word, params, n);
	word[n] = '\0';
	memset(out, 0, sizeof(*out));
	if (if_nametoindex(word) != 0)
		return addr_of_netdev(word, out);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	if (getaddrinfo(word, NULL, &hints, &ai) != 0 || !ai)
		return -1;
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* ---- the progress thread -------------------------------------------------- */

static void handle_cm_event(struct dsp_ia *ia, struct rdma_cm_event *ev)
{
	struct dsp_hdr *h;

	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		h = ev->listen_id ? ev->listen_id->context : NULL;
		if (dsp_check(h, DSP_T_PSP)) {
			dsp_psp_cm_event((struct dsp_psp *)h, ev);
			return;
		}
		vc_reject(ev->id, NULL, 0);
		return;
	}
	h = ev->id->context;
	if (dsp_check(h, DSP_T_EP))
		dsp_ep_cm_event((struct dsp_ep *)h, ev);
	else if (dsp_check(h, DSP_T_CR))
		dsp_cr_cm_event((struct dsp_cr *)h, ev);
	else
		DSP_DBG("cm event %s for no object", rdma_event_str(ev->event));
}

static void async_event(struct dsp_ia *ia, struct ibv_async_event *ae)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	switch (vc_async_kind(ae)) {
	case VC_ASYNC_QP:
		ev.event_number = DAT_ASYNC_ERROR_EP_BROKEN;
		ev.event_data.asynch_error_event_data.dat_handle = ae->element.qp->qp_context;
		break;
	case VC_ASYNC_CQ:
		ev.event_number = DAT_ASYNC_ERROR_EVD_OVERFLOW;
		ev.event_data.asynch_error_event_data.dat_handle = ae->element.cq->cq_context;
		break;
	case VC_ASYNC_DEVICE:
		ev.event_number = DAT_ASYNC_ERROR_IA_CATASTROPHIC;
		ev.event_data.asynch_error_event_data.dat_handle = ia;
		break;
	case VC_ASYNC_PORT:
	case VC_ASYNC_OTHER:
		return;
	}
	ev.event_data.asynch_error_event_data.reason = (DAT_COUNT)ae->event_type;
	if (ia->async_evd) {
		ev.evd_handle = ia->async_evd;
		dsp_evd_push(ia->async_evd, &ev);
	}
}

static void *progress(void *arg)
{
	struct dsp_ia *ia = arg;

	for (;;) {
		struct pollfd pfd[4] = {
			{ .fd = ia->ch->fd, .events = POLLIN },
			{ .fd = ia->verbs->async_fd, .events = POLLIN },
			{ .fd = ia->stop_fd, .events = POLLIN },
			{ .fd = ia->kick_fd, .events = POLLIN },
		};
		int next_ms = -1;

		pthread_mutex_lock(&ia->lock);
		dsp_ep_check_timeouts(ia, &next_ms);
		pthread_mutex_unlock(&ia->lock);
		if (poll(pfd, 4, next_ms) < 0 && errno != EINTR)
			break;
		if (pfd[2].revents)
			break;
		if (pfd[3].revents) {
			uint64_t v;

			while (read(ia->kick_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
				;
		}
		if (pfd[0].revents) {
			struct rdma_cm_event *ev;

			while (vc_cm_next(ia->ch, &ev) == 0) {
				DSP_DBG("cm event %s status %d, %u bytes of private data",
					rdma_event_str(ev->event), ev->status,
					ev->param.conn.private_data_len);
				pthread_mutex_lock(&ia->lock);
				handle_cm_event(ia, ev);
				pthread_mutex_unlock(&ia->lock);
				vc_cm_ack(ev);
			}
		}
		if (pfd[1].revents) {
			struct ibv_async_event ae;

			while (vc_async_next(ia->verbs, &ae) == 0) {
				pthread_mutex_lock(&ia->lock);
				async_event(ia, &ae);
				pthread_mutex_unlock(&ia->lock);
				vc_async_ack(&ae);
			}
		}
	}
	return NULL;
}

void dsp_ia_kick(struct dsp_ia *ia)
{
	uint64_t one = 1;

	if (write(ia->kick_fd, &one, sizeof(one)) < 0)
		DSP_DBG("kick write: %s", strerror(errno));
}

/* ---- open / close ------------------------------------------------------------ */

static void ia_teardown(struct dsp_ia *ia)
{
	if (ia->thread_started) {
		uint64_t one = 1;

		if (write(ia->stop_fd, &one, sizeof(one)) < 0)
			DSP_DBG("stop write: %s", strerror(errno));
		pthread_join(ia->thread, NULL);
	}
	if (ia->stop_fd >= 0)
		close(ia->stop_fd);
	if (ia->kick_fd >= 0)
		close(ia->kick_fd);
	vc_id_free(ia->bind_id);
	vc_channel_free(ia->ch);
	pthread_mutex_destroy(&ia->lock);
	ia->h.magic = 0;
	free(ia);
}

DAT_RETURN dsp_ia_open(const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE *async_evd,
		       DAT_IA_HANDLE *ia_handle)
{
	struct dsp_provider *p;
	struct dsp_ia *ia;
	DAT_RETURN rc;
	int r;

	if (!name)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	if (!async_evd)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!ia_handle)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	p = dsp_provider_find(name);
	if (!p)
		return DSP_ERR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
	ia = calloc(1, sizeof(*ia));
	if (!ia)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	ia->p = p;
	dsp_hdr_init(&ia->h, ia, DSP_T_IA);
	pthread_mutex_init(&ia->lock, NULL);
	ia->stop_fd = -1;
	ia->kick_fd = -1;
	dsp_list_init(&ia->evds);
	dsp_list_init(&ia->pzs);
	dsp_list_init(&ia->lmrs);
	dsp_list_init(&ia->eps);
	dsp_list_init(&ia->psps);
	dsp_list_init(&ia->crs);
	dsp_list_init(&ia->ssps);

	if (resolve_params(p->ia_params, &ia->addr) != 0) {
		DSP_DBG("%s: cannot resolve \"%s\" to an address", name, p->ia_params);
		rc = DSP_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
		goto fail;
	}
	ia->ch = vc_channel_new();
	if (!ia->ch || vc_id_new(ia->ch, &ia->bind_id, NULL) != 0) {
		rc = DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
		goto fail;
	}
	r = vc_bind(ia->bind_id, (struct sockaddr *)&ia->addr, false);
	if (r || !ia->bind_id->verbs) {
		DSP_DBG("%s: no RDMA device serves \"%s\": %s", name, p->ia_params,
			r ? strerror(-r) : "a wildcard address");
		rc = DSP_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
		goto fail;
	}
	ia->verbs = ia->bind_id->verbs;
	ia->iwarp = vc_iwarp(ia->verbs);
	if (RDMA(ibv_query_device(ia->verbs, &ia->dev_attr)) != 0) {
		rc = DSP_ERR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
		goto fail;
	}
	ia->ps_attr[0] = (DAT_NAMED_ATTR){ "DAT_EXTENSION_INTERFACE", "TRUE" };
	ia->ps_attr[1] = (DAT_NAMED_ATTR){ "DAT_EXTENSION_VERSION", "2.0.1" };
	ia->ps_attr[2] = (DAT_NAMED_ATTR){ "DAT_IW_ATTR_SSP", "TRUE" };

	if (*async_evd == DAT_HANDLE_NULL) {
		DAT_EVD_HANDLE e;

		rc = dsp_evd_create(ia, qlen > 0 ? qlen : 8, DAT_HANDLE_NULL, DAT_EVD_ASYNC_FLAG,
				    &e);
		if (rc != DAT_SUCCESS)
			goto fail;
		ia->async_evd = e;
		ia->own_async = true;
	} else {
		struct dsp_evd *e = *async_evd;

		if (!dsp_check(e, DSP_T_EVD) || !(e->flags & DAT_EVD_ASYNC_FLAG)) {
			rc = DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC);
			goto fail;
		}
		ia->async_evd = e;
	}
	ia->async_evd->refs++;

	ia->stop_fd = eventfd(0, EFD_CLOEXEC);
	ia->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ia->stop_fd < 0 || ia->kick_fd < 0 || vc_nonblock(ia->verbs->async_fd) != 0 ||
	    pthread_create(&ia->thread, NULL, progress, ia) != 0) {
		rc = DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		goto fail;
	}
	ia->thread_started = true;
	*async_evd = ia->async_evd;
	*ia_handle = ia;
	DSP_DBG("%s: opened on %s (%s)", name, ibv_get_device_name(ia->verbs->device),
		ia->iwarp ? "iWARP" : "IB/RoCE");
	return DAT_SUCCESS;
fail:
	if (ia->async_evd) {
		ia->async_evd->refs--;
		if (ia->own_async)
			dsp_evd_destroy(ia->async_evd);
	}
	ia_teardown(ia);
	return rc;
}

DAT_RETURN dsp_ia_close(DAT_IA_HANDLE ia_handle, DAT_CLOSE_FLAGS flags)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_hdr *h;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ia->lock);
	if (flags == DAT_CLOSE_GRACEFUL_FLAG &&
	    (ia->eps.count || ia->psps.count || ia->lmrs.count || ia->pzs.count ||
	     dsp_ssp_any_open(ia) ||
	     ia->evds.count > (ia->own_async ? 1 : 0))) {
		pthread_mutex_unlock(&ia->lock);
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE);
	}
	pthread_mutex_unlock(&ia->lock);

	/* The SSPs' and socket connects' threads stop first: they may need
	 * the progress thread to destroy their rdma_cm ids. */
	dsp_ssp_close_all(ia);
	/* Abrupt: everything goes, the thread first (nothing is left unacked
	 * once it has stopped, so rdma_destroy_id cannot wait on it). */
	if (ia->thread_started) {
		uint64_t one = 1;

		if (write(ia->stop_fd, &one, sizeof(one)) < 0)
			DSP_DBG("stop write: %s", strerror(errno));
		pthread_join(ia->thread, NULL);
		ia->thread_started = false;
	}
	while ((h = ia->crs.head.next) != &ia->crs.head)
		dsp_cr_destroy((struct dsp_cr *)h);
	while ((h = ia->psps.head.next) != &ia->psps.head)
		dsp_psp_destroy((struct dsp_psp *)h);
	while ((h = ia->eps.head.next) != &ia->eps.head)
		dsp_ep_destroy((struct dsp_ep *)h);
	while ((h = ia->lmrs.head.next) != &ia->lmrs.head)
		dsp_lmr_destroy((struct dsp_lmr *)h);
	while ((h = ia->pzs.head.next) != &ia->pzs.head)
		dsp_pz_destroy((struct dsp_pz *)h);
	if (ia->async_evd)
		ia->async_evd->refs--;
	while ((h = ia->evds.head.next) != &ia->evds.head) {
		struct dsp_evd *e = (struct dsp_evd *)h;

		/* a consumer-supplied async EVD is the consumer's to free,
		 * but it cannot outlive its IA */
		e->refs = 0;
		dsp_evd_destroy(e);
	}
	ia_teardown(ia);
	return DAT_SUCCESS;
}

/* ---- query ------------------------------------------------------------------ */

static void fill_ia_attr(struct dsp_ia *ia, DAT_IA_ATTR *a)
{
	const struct ibv_device_attr *d = &ia->dev_attr;
	struct ibv_port_attr port;
	unsigned fw_major = 0, fw_minor = 0;
	uint32_t max_msg = 1u << 30;

	if (RDMA(ibv_query_port(ia->verbs, ia->bind_id->port_num ? ia->bind_id->port_num : 1,
				&port)) == 0 && port.max_msg_sz)
		max_msg = port.max_msg_sz;
	sscanf(d->fw_ver, "%u.%u", &fw_major, &fw_minor);
	memset(a, 0, sizeof(*a));
	snprintf(a->adapter_name, sizeof(a->adapter_name), "%s",
		 ibv_get_device_name(ia->verbs->device));
	snprintf(a->vendor_name, sizeof(a->vendor_name), "0x%x", d->vendor_id);
	a->hardware_version_major = d->hw_ver;
	a->hardware_version_minor = d->vendor_part_id;
	a->firmware_version_major = fw_major;
	a->firmware_version_minor = fw_minor;
	a->ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->addr;
	a->max_eps = d->max_qp;
	a->max_dto_per_ep = d->max_qp_wr;
	a->max_rdma_read_per_ep_in = d->max_qp_rd_atom;
	a->max_rdma_read_per_ep_out = d->max_qp_init_rd_atom;
	a->max_evds = d->max_cq;
	a->max_evd_qlen = d->max_cqe;
	a->max_iov_segments_per_dto = d->max_sge;
	a->max_lmrs = d->max_mr;
	a->max_lmr_block_size = d->max_mr_size > UINT32_MAX ? UINT32_MAX
							     : (DAT_SEG_LENGTH)d->max_mr_size;
	a->max_lmr_virtual_address = UINT64_MAX;
	a->max_pzs = d->max_pd;
	a->max_message_size = max_msg;
	a->max_rdma_size = max_msg;
	a->max_rmrs = 0;
	a->max_rmr_target_address = UINT64_MAX;
	a->max_srqs = 0;
	a->max_iov_segments_per_rdma_read =
		ia->iwarp ? 1 : (d->max_sge_rd > 0 ? d->max_sge_rd : d->max_sge);
	a->max_iov_segments_per_rdma_write = d->max_sge;
	a->max_rdma_read_in = d->max_qp_rd_atom;
	a->max_rdma_read_out = d->max_qp_init_rd_atom;
	a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
	a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
	a->zb_supported = DAT_FALSE;
	a->extension_supported = DAT_EXTENSION_IW;
	a->extension_version = DSP_EXT_VERSION;
}

static void fill_provider_attr(struct dsp_ia *ia, DAT_PROVIDER_ATTR *out)
{
	/* evd_stream_merging_supported is const: build, then copy */
	DAT_PROVIDER_ATTR a = {
		.provider_version_major = DSP_VERSION_MAJOR,
		.provider_version_minor = DSP_VERSION_MINOR,
		.dapl_version_major = ia->p->info.dapl_version_major,
		.dapl_version_minor = ia->p->info.dapl_version_minor,
		.lmr_mem_types_supported = DAT_MEM_TYPE_VIRTUAL,
		.iov_ownership_on_return = DAT_IOV_CONSUMER,
		.dat_qos_supported = DAT_QOS_BEST_EFFORT,
		.completion_flags_supported = DAT_COMPLETION_DEFAULT_FLAG |
			DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
			DAT_COMPLETION_BARRIER_FENCE_FLAG,
		.is_thread_safe = ia->p->info.is_thread_safe,
		.max_private_data_size = dsp_pdata_room(ia) - 1,
		.supports_multipath = DAT_FALSE,
		.ep_creator = DAT_PSP_CREATES_EP_NEVER,
		.pz_support = DAT_PZ_UNIQUE,
		.optimal_buffer_alignment = 64,
		.evd_stream_merging_supported = {
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
			{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		},
		.srq_supported = DAT_FALSE,
		.lmr_sync_req = DAT_FALSE,
		.dto_async_return_guaranteed = DAT_FALSE,
		/* iWARP: an RDMA read's sink needs remote write access */
		.rdma_write_for_rdma_read_req = ia->iwarp ? DAT_TRUE : DAT_FALSE,
		.rdma_read_lmr_rmr_context_exposure = ia->iwarp ? DAT_TRUE : DAT_FALSE,
		.rmr_scope_supported = DAT_RMR_SCOPE_PZ,
		.is_signal_safe = DAT_FALSE,
		.ha_supported = DAT_FALSE,
		.ha_loadbalancing = DAT_HA_LB_NONE,
		.num_provider_specific_attr = 3,
		.provider_specific_attr = ia->ps_attr,
	};

	snprintf(a.provider_name, sizeof(a.provider_name), "%s", ia->p->info.ia_name);
	memcpy(out, &a, sizeof(a));
}

DAT_RETURN dsp_ia_query(DAT_IA_HANDLE ia_handle, DAT_EVD_HANDLE *async_evd,
			DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
			DAT_PROVIDER_ATTR_MASK prov_mask, DAT_PROVIDER_ATTR *prov_attr)
{
	struct dsp_ia *ia = ia_handle;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (ia_mask && !ia_attr)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (prov_mask && !prov_attr)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (async_evd)
		*async_evd = ia->async_evd;
	if (ia_attr && ia_mask)
		fill_ia_attr(ia, ia_attr);
	if (prov_attr && prov_mask)
		fill_provider_attr(ia, prov_attr);
	return DAT_SUCCESS;
}

/* ---- any handle ----------------------------------------------------------- */

static struct dsp_hdr *any_handle(DAT_HANDLE handle)
{
	struct dsp_hdr *h = handle;

	return h && h->magic == DSP_MAGIC ? h : NULL;
}

DAT_RETURN dsp_set_consumer_context(DAT_HANDLE handle, DAT_CONTEXT context)
{
	struct dsp_hdr *h = any_handle(handle);

	if (!h)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	h->context = context;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_get_consumer_context(DAT_HANDLE handle, DAT_CONTEXT *context)
{
	struct dsp_hdr *h = any_handle(handle);

	if (!h)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	if (!context)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*context = h->context;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_get_handle_type(DAT_HANDLE handle, DAT_HANDLE_TYPE *type)
{
	struct dsp_hdr *h = any_handle(handle);

	if (!h)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	if (!type)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	switch (h->type) {
	case DSP_T_IA: *type = DAT_HANDLE_TYPE_IA; break;
	case DSP_T_EVD: *type = DAT_HANDLE_TYPE_EVD; break;
	case DSP_T_PZ: *type = DAT_HANDLE_TYPE_PZ; break;
	case DSP_T_LMR: *type = DAT_HANDLE_TYPE_LMR; break;
	case DSP_T_EP: *type = DAT_HANDLE_TYPE_EP; break;
	case DSP_T_PSP: *type = DAT_HANDLE_TYPE_PSP; break;
	case DSP_T_CR: *type = DAT_HANDLE_TYPE_CR; break;
	case DSP_T_SSP: *type = (DAT_HANDLE_TYPE)DAT_IW_HANDLE_TYPE_SSP; break;
	default:
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	}
	return DAT_SUCCESS;
}
