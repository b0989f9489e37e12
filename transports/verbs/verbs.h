/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The verbs body shared by the "ib" and "iwarp" transports (verbs.c):
 * librdmacm for connections, libibverbs for the data path, through the
 * verbs core (vcore.h) that the uDAPL provider uses too.  What differs
 * between the two device families is gathered in a struct vb_flavor; each
 * transport file (transports/ib/ib.c, transports/iwarp/iwarp.c) defines
 * one flavor and an oti_ops table whose entries without an object to
 * carry the flavor (init, fini, probe, query_caps, listen, ep_open) are
 * two-line wrappers, and whose other entries are VB_SHARED_OPS.
 *
 * Listeners, requests and endpoints remember the flavor they were made
 * by, so one process may run both transports at once (an rxe and a siw
 * device side by side).
 */
#ifndef VERBS_H
#define VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>

#include "oti.h"

struct vb_flavor {
	const char *name;	/* the transport's name, for logs */
	/* Devices of this type are this transport's; others are left alone
	 * (probe says no, a request arriving on one is rejected, a route
	 * resolved to one is unreachable). */
	enum ibv_transport_type dev_type;
	uint32_t cap_flags;	/* OTI_CAP_* beyond RDMA read and write */
	/* Consumer bytes rdma_cm carries in a connect request and in an
	 * accept or reject (the transport spends one on framing, and the
	 * start rule's handshake its own: rtr). */
	uint32_t pdata_room;
	/* The rdma_cm port for SDP port P is (P + port_offset()) mod 65536;
	 * NULL: the same port (a port space of its own). */
	uint16_t (*port_offset)(void);
	/* iWARP's start rule: the responder sends nothing before the
	 * initiator's first FPDU, which the transport makes itself (the
	 * handshake of vcore.h, struct vc_rtr). */
	bool rtr;
	/* Connections are TCP connections of the host (iWARP): a connecting
	 * id takes its source port from the TCP stack, not from rdma_cm's
	 * port space alone, where it could be one TCP already uses. */
	bool tcp_source_ports;
	/* A listen on the IPv6 wildcard does not hear IPv4 connections (siw
	 * refused them, over loopback at least): listen on [::] and 0.0.0.0
	 * apart, each address family only. */
	bool split_dual_stack;
	bool up;		/* init() succeeded */
};

int vb_init(struct vb_flavor *fl);
void vb_fini(struct vb_flavor *fl);
int vb_probe(const struct vb_flavor *fl, const struct sockaddr *local,
	     const struct sockaddr *remote);
void vb_query_caps(const struct vb_flavor *fl, struct oti_caps *caps);
int vb_listen(const struct vb_flavor *fl, const struct sockaddr *addr, socklen_t addrlen,
	      int backlog, unsigned flags, struct oti_listener **out);
int vb_ep_open(const struct vb_flavor *fl, const struct sockaddr *dst, socklen_t dstlen,
	       const struct sockaddr *src, socklen_t srclen, struct oti_ep **out);

int vb_listener_name(struct oti_listener *l, struct sockaddr *addr, socklen_t *addrlen);
int vb_listener_fd(struct oti_listener *l);
int vb_listener_arm(struct oti_listener *l);
int vb_get_connreq(struct oti_listener *l, struct oti_connreq **req, void *pdata,
		   size_t *pdata_len, struct sockaddr_storage *peer);
int vb_reject(struct oti_listener *l, struct oti_connreq *req, const void *pdata, size_t len);
void vb_listener_close(struct oti_listener *l);
int vb_ep_accept_open(struct oti_listener *l, struct oti_connreq *req, struct oti_ep **out);
int vb_accept(struct oti_ep *ep, const void *pdata, size_t len);
int vb_ep_reject(struct oti_ep *ep, const void *pdata, size_t len);
int vb_connect(struct oti_ep *ep, const void *pdata, size_t len);
int vb_ep_names(struct oti_ep *ep, struct sockaddr_storage *local,
		struct sockaddr_storage *peer);
int vb_ep_fd(struct oti_ep *ep);
int vb_ep_arm(struct oti_ep *ep);
int vb_get_event(struct oti_ep *ep, struct oti_event *ev);
int vb_poll_cq(struct oti_ep *ep, struct oti_wc *wc, int n);
void vb_drive_begin(struct oti_ep *ep, bool read);
unsigned vb_drive_end(struct oti_ep *ep);
int vb_mr_reg(struct oti_ep *ep, void *addr, size_t len, unsigned access, struct oti_mr **out);
int vb_mr_dereg(struct oti_mr *mr);
int vb_post_recv(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx);
int vb_post_send(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx, unsigned flags);
int vb_rdma_read(struct oti_ep *ep, const struct oti_sge *local, uint64_t raddr, uint32_t rkey,
		 uint64_t ctx);
int vb_rdma_write(struct oti_ep *ep, const struct oti_sge *local, uint64_t raddr,
		  uint32_t rkey, uint64_t ctx);
int vb_disconnect(struct oti_ep *ep);
void vb_ep_close(struct oti_ep *ep);

/* The entries of an oti_ops table that every verbs flavor shares. */
#define VB_SHARED_OPS \
	.listener_name = vb_listener_name, \
	.listener_fd = vb_listener_fd, \
	.listener_arm = vb_listener_arm, \
	.get_connreq = vb_get_connreq, \
	.reject = vb_reject, \
	.listener_close = vb_listener_close, \
	.ep_accept_open = vb_ep_accept_open, \
	.accept = vb_accept, \
	.ep_reject = vb_ep_reject, \
	.connect = vb_connect, \
	.ep_names = vb_ep_names, \
	.ep_fd = vb_ep_fd, \
	.ep_arm = vb_ep_arm, \
	.ep_wait_events = oti_wait_pollin, \
	.get_event = vb_get_event, \
	.poll_cq = vb_poll_cq, \
	.drive_begin = vb_drive_begin, \
	.drive_end = vb_drive_end, \
	.mr_reg = vb_mr_reg, \
	.mr_dereg = vb_mr_dereg, \
	.post_recv = vb_post_recv, \
	.post_send = vb_post_send, \
	.rdma_read = vb_rdma_read, \
	.rdma_write = vb_rdma_write, \
	.disconnect = vb_disconnect, \
	.ep_close = vb_ep_close

#endif /* VERBS_H */
