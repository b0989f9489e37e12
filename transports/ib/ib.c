/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The "ib" transport: SDP over RDMA verbs on InfiniBand, RoCE and
 * Soft-RoCE (rxe): any device whose transport type is IB.  iWARP devices
 * are left to the "iwarp" transport.  The verbs body is shared with it
 * (transports/verbs/verbs.c); this file says what is IB's own.
 *
 * Ports: rdma_cm's RDMA_PS_TCP port space on IB and RoCE is a space of its
 * own, apart from the host's TCP ports, so the SDP port is the rdma_cm port.
 *
 * Private data: librdmacm's header leaves 56 bytes to the consumer in a
 * connect request on IB/RoCE (and pads what it delivers to that length),
 * 196 in a reply: the smaller one is the room, so the engine sees
 * max_private_data = 55 and uses the compact Hello.
 */
#include "verbs/vcore.h"
#include "verbs/verbs.h"

/* Rejects: the peer's reject() has its own reason (vcore.c, vc_rejected);
 * one with any other reason (invalid service ID: no listener) comes from
 * the CM, not from an SDP peer. */
static struct vb_flavor ib_flavor = {
	.name = "ib",
	.dev_type = IBV_TRANSPORT_IB,
	.cap_flags = 0,
	.pdata_room = VC_IB_REQ_ROOM,
	.port_offset = NULL,
};

static int ib_init(void)
{
	return vb_init(&ib_flavor);
}

static void ib_fini(void)
{
	vb_fini(&ib_flavor);
}

static int ib_probe(const struct sockaddr *local, const struct sockaddr *remote)
{
	return vb_probe(&ib_flavor, local, remote);
}

static void ib_query_caps(struct oti_caps *caps)
{
	vb_query_caps(&ib_flavor, caps);
}

static int ib_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog,
		     unsigned flags, struct oti_listener **out)
{
	return vb_listen(&ib_flavor, addr, addrlen, backlog, flags, out);
}

static int ib_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
		      socklen_t srclen, struct oti_ep **out)
{
	return vb_ep_open(&ib_flavor, dst, dstlen, src, srclen, out);
}

const struct oti_ops ib_transport_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "ib",
	.init = ib_init,
	.fini = ib_fini,
	.probe = ib_probe,
	.query_caps = ib_query_caps,
	.listen = ib_listen,
	.ep_open = ib_ep_open,
	VB_SHARED_OPS,
};
