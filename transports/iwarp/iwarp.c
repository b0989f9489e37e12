/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The "iwarp" transport: SDP over RDMA verbs on iWARP RNICs and soft-iWARP
 * (siw): any device whose transport type is iWARP.  The verbs body is
 * shared with the "ib" transport (transports/verbs/verbs.c); this file
 * says what is iWARP's own.
 *
 * Ports: an iWARP connection is set up over a real TCP connection to the
 * rdma_cm port, in the host's TCP port space.  An SDP listener on port P
 * therefore listens on rdma_cm port (P + iwarp_port_offset) mod 65536, so
 * that it never collides with a native TCP listener on P (the preload
 * listens on both stacks on one port); a connect to SDP port P goes to the
 * same shifted port.  The default offset, 30000, differs from
 * tcp-fallback's 20000, which listens over TCP on the same host too
 * (doc/port-scheme.md).
 *
 * Private data travels in the MPA request and reply.  librdmacm adds no
 * header of its own on iWARP, but the room is bounded three times: the
 * length in struct rdma_conn_param is one byte (255), the rdma_ucm ABI
 * carries 256 (RDMA_MAX_PRIVATE_DATA), and MPA v2's enhanced connection
 * setup spends 4 of the provider's 256 (MPA_MAX_PRIVDATA in siw, erdma)
 * on IRD/ORD.  248 stays below all of them with room to spare.  The start
 * rule's handshake (below) takes a flags byte of a connect request's and
 * 12 bytes of an accept's: the engine gets 235, and the full Hello (92
 * bytes) and HelloAck (196) fit: no compact Hello on iWARP.
 *
 * Source ports: rdma_cm picks a connecting id's port from its own port
 * space, which knows nothing of the host's TCP sockets; siw then binds a
 * kernel TCP socket to it and fails with EADDRINUSE when TCP has that port
 * (a TIME_WAIT of an earlier native connection, say).  So the verbs body
 * asks the TCP stack for a free port first (tcp_source_ports).
 *
 * Wildcard listens: an rdma_cm listen on [::] refused IPv4 connects on siw
 * (to the guest's own address, at least), where one on 0.0.0.0 took them;
 * so a listen on [::] is two, one per address family (split_dual_stack).
 *
 * iWARP rules (OTI_CAP_IWARP_RULES): the sink of an RDMA read needs remote
 * write access (the engine asks for it, sdp/zcopy.c), no RDMA write with
 * immediate data (the verbs body never posts one), and the MPA start rule:
 * a responder sends no FPDU before it has received the initiator's first
 * (RFC 5044, 7.1.2).  siw as initiator enforces it: a responder's message
 * that arrives with the MPA reply fails the connect (CONNECT_ERROR), or,
 * a moment later, sits unseen in the socket; and siw's responder has the
 * mirror weakness, bytes that arrive while it hands the socket to the QP
 * going unseen until more arrive.  The transport keeps the rule itself,
 * with the handshake the uDAPL provider uses too (transports/verbs/vcore.h,
 * struct vc_rtr): the active side RDMA-writes a word of the passive side's
 * before it reports OTI_EV_ESTABLISHED, and again 10, 100 and 1000 ms
 * later; the passive side reports OTI_EV_ESTABLISHED once the word has
 * landed.  A peer of an older libsdp does not ask for it and gets none.
 * The engine's own hold (sdp/engine.h, await_first_rx and first_nudges)
 * stays: it is what keeps the rule with such a peer.
 */
#include "tunables.h"
#include "verbs/verbs.h"

#define IW_PRIVATE_DATA 248

static uint16_t iw_port_offset(void)
{
	return (uint16_t)(tun_int(TUN_iwarp_port_offset) & 0xffff);
}

/* Rejects: an MPA reply with the reject bit (status -ECONNRESET from siw,
 * -ECONNREFUSED from others) carries the rejecting peer's framed data; a
 * TCP connection refused (no listener) carries none (vcore.c,
 * vc_rejected). */
static struct vb_flavor iw_flavor = {
	.name = "iwarp",
	.dev_type = IBV_TRANSPORT_IWARP,
	.cap_flags = OTI_CAP_IWARP_RULES,
	.pdata_room = IW_PRIVATE_DATA,
	.port_offset = iw_port_offset,
	.rtr = true,
	.tcp_source_ports = true,
	.split_dual_stack = true,
};

static int iw_init(void)
{
	return vb_init(&iw_flavor);
}

static void iw_fini(void)
{
	vb_fini(&iw_flavor);
}

static int iw_probe(const struct sockaddr *local, const struct sockaddr *remote)
{
	return vb_probe(&iw_flavor, local, remote);
}

static void iw_query_caps(struct oti_caps *caps)
{
	vb_query_caps(&iw_flavor, caps);
}

static int iw_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog,
		     unsigned flags, struct oti_listener **out)
{
	return vb_listen(&iw_flavor, addr, addrlen, backlog, flags, out);
}

static int iw_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
		      socklen_t srclen, struct oti_ep **out)
{
	return vb_ep_open(&iw_flavor, dst, dstlen, src, srclen, out);
}

const struct oti_ops iwarp_transport_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "iwarp",
	.init = iw_init,
	.fini = iw_fini,
	.probe = iw_probe,
	.query_caps = iw_query_caps,
	.listen = iw_listen,
	.ep_open = iw_ep_open,
	VB_SHARED_OPS,
};
