/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SDP over RDMA verbs, shared by the "ib" transport (InfiniBand, RoCE,
 * rxe: devices whose transport type is IB) and the "iwarp" transport
 * (iWARP RNICs, siw): librdmacm for connections and libibverbs for the
 * data path, both through the verbs core (vcore.h), which the uDAPL
 * provider (dat/) stands on too.  What differs between the two is a
 * struct vb_flavor (verbs.h): which devices are served, the capability
 * flags, the rdma_cm port an SDP port maps to, the private data room,
 * whether the iWARP start rule applies.
 *
 * Connection management: RDMA_PS_TCP port space.  On IB and RoCE the
 * rdma_cm port space is a space of its own, so the SDP port is the
 * rdma_cm port.  On iWARP the connection is set up over a real TCP
 * connection on that port, which would collide with a native TCP listener
 * on the same port: the flavor shifts it by an offset (doc/port-scheme.md).
 * Each endpoint has its own event channel (a passive one is migrated to
 * it from the listener's), one CQ with a completion channel, and one RC QP.
 *
 * Private data: the transport frames what the engine gives it as one
 * length byte followed by the bytes (vc_frame), so the receiver gets
 * exactly what was sent whatever padding the wire adds (librdmacm pads a
 * connect request's data on IB/RoCE to its full 56 bytes).  On iWARP the
 * start rule's handshake (vcore.h, struct vc_rtr) adds a flags byte to a
 * connect request and its 12 bytes of target to the accept.  The engine
 * sees max_private_data = room - 1 (- 12 on iWARP) and picks the compact
 * Hello if the full one does not fit.
 *
 * The iWARP start rule: the passive side reports OTI_EV_ESTABLISHED only
 * once the active side's first FPDU (its RTR write) has landed, and the
 * active side makes that write, and its repeats, itself; meanwhile a
 * timerfd in the endpoint's epoll set brings the owner back to poll the
 * word or repeat the write (rtr_progress).  So the engine may send the
 * moment it sees OTI_EV_ESTABLISHED, on either side.
 *
 * One pollable fd per endpoint: an epoll set holding the event channel's
 * fd, the completion channel's fd, and while the start rule's handshake
 * runs its timerfd.  The device's async-event fd is in the sets of
 * VB_ASYNC_WATCHERS endpoints of the device only (the watchers, handed on
 * when one closes): the kernel refuses (EINVAL) a file reachable through
 * more than 500 nested epoll sets (fs/eventpoll.c, reverse_path_check),
 * which capped a process at 500 verbs connections when every endpoint's
 * set held it.  An async event that a watcher read for another endpoint
 * rings that endpoint by adding the process's doorbell (an eventfd that
 * is always readable) to its set, which the owner takes out again
 * (vb_ring, take_async): no descriptor of its own per endpoint for that.
 *
 * Completions: the transport keeps the engine's context and the operation
 * of every posted request in two rings (send queue, receive queue) and
 * answers completions, error and flush completions included (whose opcode
 * verbs leaves undefined), from them: the receive ring's head (receives
 * complete in order), the send ring's slot that the wr_id names (send-queue
 * requests need not complete in order on iWARP: struct vb_slot).
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "fdspace.h"
#include "log.h"
#include "oti.h"
#include "sys.h"
#include "vcore.h"
#include "verbs.h"

/* Room for framed private data: rdma_conn_param's length is one byte. */
#define VB_PDATA_BUF (VC_PDATA_MAX + 1)
/*
 * Tries at a QP that could not be made (ENOMEM), 1, 2, 4 ms apart.  siw
 * in the testbed's guest refuses one now and then when several
 * connections are set up at once: 2 of 4 many_conns runs on siw lost a
 * connection to it (librdmacm reports any failure of ibv_create_qp as
 * ENOMEM), with 2.9 GB of the guest's memory free and nothing in dmesg.
 * The completion queue the same: siw's ibv_create_cq failed (EIO, now and
 * then ENOSPC) in 8 of 12 guest runs of bench/qp_cost, usually at the
 * 17th CQ made in a row (doc/scale.md).
 */
#define VB_QP_TRIES 4
#define VB_SQ_DEPTH 256
#define VB_RQ_DEPTH 256
/* the start rule's writes complete too (the QP signals every request) */
#define VB_CQ_DEPTH (VB_SQ_DEPTH + VC_RTR_SQ_ROOM + VB_RQ_DEPTH)
#define VB_WC_BATCH 32

/*
 * A descriptor rdma-core made and keeps in a public field (an event
 * channel's fd, a completion channel's, a context's async_fd), moved out
 * of the application's range (common/fdspace.h) and made non-blocking.
 * rdma-core reads those fields on every use and keeps no copy, so the
 * field is simply updated; nobody else uses the object yet (a completion
 * channel's file is the kernel's, whatever its number).  On failure the
 * field is -1 (the descriptor is closed) and rdma-core's destroy call
 * only frees the object.
 */
static int vb_own_fd(int *field)
{
	int fd = fdspace_take(*field);

	*field = fd < 0 ? -1 : fd;
	return fd < 0 ? fd : vc_nonblock(fd);
}

/* The same for a descriptor made in a window (fdspace_making()), which
 * this closes: a completion channel's, made for each connection. */
static int vb_made_fd(int *field)
{
	if (!field) {
		fdspace_unmade();
		return 0;
	}
	int r = vb_own_fd(field);

	fdspace_unmade();
	return r;
}

static const struct vc_fds vb_fds = { .making = fdspace_making, .made = vb_made_fd };

/* --- devices: the contexts in use (protection domains are per ep) ------------- */

struct vb_dev {
	struct ibv_context *ctx;
	struct vb_dev *next;
	int watchers;	/* eps whose set holds ctx->async_fd (vb_lock) */
};

/* Endpoints of a device whose epoll set holds its async fd (above). */
#define VB_ASYNC_WATCHERS 2

/* Protects vb_devs, vb_eps, the async-event dispatch and the rings of
 * the doorbell (vb_ring).  A leaf: taken under a socket's lock, never the
 * other way round. */
static pthread_mutex_t vb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vb_dev *vb_devs;
static int vb_nup;	/* flavors up: the device list goes with the last */
/*
 * The doorbell: an eventfd made readable once (a count of 1 that nobody
 * reads), so that an epoll set it is added to is readable until it is
 * taken out again.  One per process, made with the first endpoint (vb_lock),
 * inherited by a fork child, where it stays what it is.
 */
static int vb_bell = -1;

static struct vb_dev *vb_dev_of(struct ibv_context *ctx)
{
	struct vb_dev *d;

	pthread_mutex_lock(&vb_lock);
	for (d = vb_devs; d; d = d->next)
		if (d->ctx == ctx)
			break;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (d) {
			d->ctx = ctx;
			/* The async fd is polled, never waited on
			 * directly: non-blocking.  rdma_cm opened the
			 * context; its first ep here comes before any
			 * user of async_fd (CQ and QP creation read it). */
			if (vb_own_fd(&ctx->async_fd) < 0) {
				pthread_mutex_unlock(&vb_lock);
				free(d);
				return NULL;
			}
			d->next = vb_devs;
			vb_devs = d;
		}
	}
	pthread_mutex_unlock(&vb_lock);
	return d;
}

/* --- objects ------------------------------------------------------------------- */

struct vb_listener {
	const struct vb_flavor *fl;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_id *id4;	/* split_dual_stack: the IPv4 half of [::] */
	bool afonly;		/* id takes its own family only (IPV6_V6ONLY) */
	uint16_t port_off;	/* rdma_cm port - SDP port, read at listen */
};

struct oti_connreq {
	struct rdma_cm_id *id;	/* the new connection's id */
	bool rtr_asked;		/* the start rule's handshake (vcore.h) */
};

/*
 * A posted work request.  Receives complete in order (one wr_id, a
 * FIFO).  Send-queue requests need not: siw completes a Send as soon as
 * TCP took it, while an RDMA Read posted before it completes only when its
 * response has arrived.  So a send-queue request's wr_id names its slot
 * (VB_WRID_SQ + index), and the ring's head moves past a slot only once
 * every slot before it has completed too.
 */
struct vb_slot {
	uint64_t ctx;
	enum oti_wc_op op;
	bool busy;		/* send queue: posted, not completed */
};

#define VB_WRID_RQ 1
#define VB_WRID_SQ 2

enum vb_state {
	VB_RESOLVING_ADDR,
	VB_RESOLVING_ROUTE,
	VB_RESOLVED,		/* QP made, connect() may be called */
	VB_CONNECTING,
	VB_CONNECTED,
	VB_DOWN,
};

struct vb_ep {
	const struct vb_flavor *fl;
	uint16_t port_off;	/* rdma_cm port - SDP port of the listening side */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct vb_dev *dev;
	struct vb_pd *pd;	/* this connection's own (see struct vb_pd) */
	struct vc_cq cq;
	int epfd;
	/*
	 * An async event for this ep read by another ep's thread, which
	 * holds only its own connection's lock: it sets async_err and adds
	 * the doorbell to epfd (both under vb_lock); this ep's owner takes
	 * the doorbell out and turns the flag into OTI_EV_ERROR.
	 */
	atomic_int async_err;
	enum vb_state state;
	bool passive;
	bool disconnect_called;
	uint32_t max_inline;

	/* iWARP's start rule (vcore.h): the handshake's word and its state;
	 * rtr_tfd, a timerfd in the epoll set while it runs (else -1). */
	struct vc_rtr rtr;
	bool rtr_asked;		/* passive: the request asked for it */
	int rtr_tfd;

	/* Events translated but not yet taken by get_event(). */
	struct oti_event pending[4];
	int npending;
	/* The engine's drive (oti drive_begin): the event channel and the
	 * async fd are read at most once in it (looked), not at all in a
	 * quiet one; empty_reads: those reads that found nothing. */
	bool driving, looked;
	unsigned empty_reads;

	/* Completions polled by ep_arm() ahead of poll_cq(). */
	struct ibv_wc wc[VB_WC_BATCH];
	int nwc, wc_next;

	struct vb_slot sq[VB_SQ_DEPTH], rq[VB_RQ_DEPTH];
	unsigned sq_head, sq_tail, rq_head, rq_tail;

	struct vb_ep *next_ep;	/* eps with a QP, for async events (vb_lock) */
	atomic_bool async_watch;	/* its set holds the device's async fd (vb_lock) */
};

/*
 * Every connection has a protection domain of its own, so that a remote
 * key is good on the one connection it was given to: a peer on another
 * connection that guesses it (rxe keys carry 8 random bits) reaches
 * nothing.  The engine deregisters memory after ep_close() (the contract
 * in oti.h), so the domain is shared by the ep and its registrations and
 * freed by the last of them.
 */
struct vb_pd {
	struct ibv_pd *pd;
	atomic_int refs;
};

static struct vb_pd *vb_pd_new(struct ibv_context *ctx)
{
	struct vb_pd *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pd = vc_pd_new(ctx);
	if (!p->pd) {
		free(p);
		return NULL;
	}
	atomic_init(&p->refs, 1);
	return p;
}

static void vb_pd_put(struct vb_pd *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1) {
		vc_pd_free(p->pd);
		free(p);
	}
}

struct vb_mr {
	struct oti_mr pub;	/* first: the engine's view */
	struct ibv_mr *mr;
	struct vb_pd *pd;	/* a reference */
};

static struct vb_ep *vb_eps;	/* vb_lock */

static struct vb_ep *vb_ep(struct oti_ep *ep)
{
	return (struct vb_ep *)ep;
}

static int neg_errno(int fallback)
{
	return errno ? -errno : -fallback;
}

/* An event channel whose fd is in libsdp's region; NULL with *err.  Made
 * in a window (common/fdspace.h): one is made for every connection, while
 * the application may be making its next socket. */
static struct rdma_event_channel *new_channel(int *err)
{
	struct rdma_event_channel *ch;

	errno = 0;
	fdspace_making();
	ch = vc_channel_new();
	if (!ch) {
		*err = neg_errno(ENOMEM);
		fdspace_unmade();
		return NULL;
	}
	*err = vb_made_fd(&ch->fd);
	if (*err < 0) {
		vc_channel_free(ch);
		return NULL;
	}
	*err = 0;
	return ch;
}

/* The engine's private data without our framing (OTI_MAX_PRIVATE_DATA
 * holds more than a length byte can say); nothing if it is not framed. */
static size_t unframe_pdata(const void *in, size_t inlen, uint8_t *out)
{
	int n = vc_unframe(in, inlen, out);

	return n < 0 ? 0 : (size_t)n;
}

/* --- init and probe ------------------------------------------------------------ */

/* A device of this type is present. */
static bool have_device(enum ibv_transport_type type)
{
	int n = 0;
	bool found = false;
	struct ibv_device **list = RDMA(ibv_get_device_list(&n));

	for (int i = 0; list && i < n; i++)
		if (list[i]->transport_type == type)
			found = true;
	if (list)
		RDMA_VOID(ibv_free_device_list(list));
	return found;
}

int vb_init(struct vb_flavor *fl)
{
	pthread_mutex_lock(&vb_lock);
	if (fl->up) {
		pthread_mutex_unlock(&vb_lock);
		return 0;
	}
	pthread_mutex_unlock(&vb_lock);
	if (!have_device(fl->dev_type))
		return -ENODEV;
	pthread_mutex_lock(&vb_lock);
	if (!fl->up) {
		fl->up = true;
		vb_nup++;
	}
	pthread_mutex_unlock(&vb_lock);
	return 0;
}

static void linger_reap(bool all);

void vb_fini(struct vb_flavor *fl)
{
	linger_reap(true);
	pthread_mutex_lock(&vb_lock);
	if (fl->up) {
		fl->up = false;
		vb_nup--;
	}
	while (!vb_nup && vb_devs) {
		struct vb_dev *d = vb_devs;

		vb_devs = d->next;
		free(d);
	}
	if (!vb_nup && vb_bell >= 0) {
		fdspace_close(vb_bell);
		vb_bell = -1;
	}
	pthread_mutex_unlock(&vb_lock);
}

/* The rdma_cm port for SDP port p, and back. */
static uint16_t port_off_of(const struct vb_flavor *fl)
{
	return fl->port_offset ? fl->port_offset() : 0;
}

/*
 * Does a device of the flavor's type serve this local address (or, for a
 * remote one, the local address the kernel would send from)?
 * rdma_bind_addr() answers: it binds the id to the device of the
 * address's net device.
 */
static int serves_local(const struct vb_flavor *fl, const struct sockaddr *local)
{
	int ret;
	struct rdma_event_channel *ch = new_channel(&ret);
	struct rdma_cm_id *id = NULL;

	if (!ch)
		return -ENODEV;
	ret = -ENODEV;
	if (vc_id_new(ch, &id, NULL) == 0) {
		/* A wildcard binds without a device: every device may serve. */
		if (vc_bind(id, local, true) == 0 &&
		    (!id->verbs || id->verbs->device->transport_type == fl->dev_type))
			ret = 0;
		vc_id_free(id);
	}
	vc_channel_free(ch);
	return ret;
}

/* The source address the kernel would use towards remote. */
static int route_source(const struct sockaddr *remote, struct sockaddr_storage *src)
{
	int fd = sys.socket(remote->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ret = -ENETUNREACH;

	if (fd < 0)
		return -errno;
	socklen_t sl = sizeof(*src);

	if (sys.connect(fd, remote, vc_sa_len(remote)) == 0 &&
	    sys.getsockname(fd, (struct sockaddr *)src, &sl) == 0)
		ret = 0;
	sys.close(fd);
	return ret;
}

static bool is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return false;
}

int vb_probe(const struct vb_flavor *fl, const struct sockaddr *local,
	     const struct sockaddr *remote)
{
	struct sockaddr_storage src;

	if (!fl->up)
		return -ENODEV;
	/* rdma_cm binds a loopback address to some device, but RoCE (rxe
	 * included) cannot resolve a route to it (ENODEV at connect), and an
	 * iWARP device would have to carry it over the loopback interface:
	 * loopback is left to the other transports.  An RDMA connection to
	 * this host uses an interface address. */
	if ((local && is_loopback(local)) || (remote && is_loopback(remote)))
		return -ENODEV;
	if (local && local->sa_family != AF_INET && local->sa_family != AF_INET6)
		return -ENODEV;
	if (remote) {
		if (remote->sa_family != AF_INET && remote->sa_family != AF_INET6)
			return -ENODEV;
		if (!local) {
			if (route_source(remote, &src) < 0)
				return -ENETUNREACH;
			local = (struct sockaddr *)&src;
		}
	}
	if (!local)
		return 0;
	return serves_local(fl, local);
}

void vb_query_caps(const struct vb_flavor *fl, struct oti_caps *caps)
{
	*caps = (struct oti_caps){
		.flags = OTI_CAP_RDMA_READ | OTI_CAP_RDMA_WRITE | fl->cap_flags,
		/* one byte frames the length; an accept carries the start
		 * rule's target too */
		.max_private_data = fl->pdata_room - 1 - (fl->rtr ? VC_RTR_LEN : 0),
		.max_inline = 64,
		.max_send_wr = VB_SQ_DEPTH,
		.max_recv_wr = VB_RQ_DEPTH,
		.max_msg_size = 1u << 30,
	};
}

/* --- listener -------------------------------------------------------------------- */

/*
 * Bind the listener's id to addr with its port shifted.  Port 0 lets
 * rdma_cm choose; the one port it may choose whose SDP port would be 0
 * is held while another is taken, then given back.
 */
static int listen_bind(struct vb_listener *l, const struct sockaddr *addr)
{
	struct sockaddr_storage a;
	struct rdma_cm_id *held;
	uint16_t p = vc_sa_port(addr);
	int ret;

	vc_sa_copy(&a, addr, p);
	if (p) {
		uint16_t cm = (uint16_t)(p + l->port_off);

		if (!cm)
			return -EADDRNOTAVAIL;
		vc_sa_set_port((struct sockaddr *)&a, cm);
	}
	ret = vc_bind(l->id, (struct sockaddr *)&a, false);
	if (ret)
		return ret;
	if (p || !l->port_off || vc_sa_port(rdma_get_local_addr(l->id)) != l->port_off)
		return 0;
	held = l->id;
	ret = vc_id_new(l->ch, &l->id, l);
	if (ret) {
		l->id = held;
		return ret;
	}
	if (l->id4 || l->afonly)
		vc_id_afonly(l->id);
	ret = vc_bind(l->id, (struct sockaddr *)&a, false);
	vc_id_free(held);
	return ret;
}

#define VB_LISTEN_PORT_TRIES 8

int vb_listen(const struct vb_flavor *fl, const struct sockaddr *addr, socklen_t addrlen,
	      int backlog, unsigned flags, struct oti_listener **out)
{
	struct vb_listener *l;
	int ret, tries = 0;
	bool v6only = (flags & OTI_LISTEN_V6ONLY) && addr->sa_family == AF_INET6;

	(void)addrlen;
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->fl = fl;
	l->port_off = port_off_of(fl);
	l->ch = new_channel(&ret);
	if (!l->ch) {
		ret = -ENODEV;
		goto free_l;
	}
again:
	ret = vc_id_new(l->ch, &l->id, l);
	if (ret)
		goto destroy_ch;
	if (v6only) {
		/* IPv6 peers only: an IPv4 listener may hold the port too. */
		ret = vc_id_afonly(l->id);
		if (ret)
			goto destroy_id;
		l->afonly = true;
	} else if (fl->split_dual_stack && addr->sa_family == AF_INET6 &&
		   IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr)) {
		/* Both halves AF-only, else rdma_cm refuses the second on the
		 * port; its bind follows the first's, whose port it takes. */
		ret = vc_id_new(l->ch, &l->id4, l);
		if (!ret)
			ret = vc_id_afonly(l->id);
		if (!ret)
			ret = vc_id_afonly(l->id4);
		if (ret)
			goto destroy_id;
	}
	ret = listen_bind(l, addr);
	if (ret)
		goto destroy_id;
	ret = vc_listen(l->id, backlog > 0 ? backlog : 128);
	if (ret)
		goto destroy_id;
	if (l->id4) {
		struct sockaddr_in a4 = {
			.sin_family = AF_INET,
			.sin_port = htons(vc_sa_port(rdma_get_local_addr(l->id))),
		};

		ret = vc_bind(l->id4, (struct sockaddr *)&a4, false);
		if (!ret)
			ret = vc_listen(l->id4, backlog > 0 ? backlog : 128);
		if (ret)
			goto destroy_id;
	}
	/* A bind to a device's address has rdma_cm open its context, whose
	 * async fd would hold a low number until the first connection moved
	 * it: the application's next socket would get another fd than on
	 * TCP (test/conform, pair.basic on rxe).  Move it now. */
	if ((l->id->verbs && !vb_dev_of(l->id->verbs)) ||
	    (l->id4 && l->id4->verbs && !vb_dev_of(l->id4->verbs))) {
		ret = -EMFILE;
		goto destroy_id;
	}
	*out = (struct oti_listener *)l;
	return 0;

destroy_id:
	vc_id_free(l->id4);
	vc_id_free(l->id);
	l->id4 = NULL;
	l->id = NULL;
	/* A port rdma_cm chose may be one the host's TCP stack holds, which
	 * an iWARP device's listen (a real TCP listen) then cannot take:
	 * choose again. */
	if (ret == -EADDRINUSE && vc_sa_port(addr) == 0 && ++tries < VB_LISTEN_PORT_TRIES)
		goto again;
destroy_ch:
	vc_channel_free(l->ch);
free_l:
	free(l);
	return ret;
}

int vb_listener_name(struct oti_listener *ol, struct sockaddr *addr, socklen_t *addrlen)
{
	struct vb_listener *l = (struct vb_listener *)ol;
	struct sockaddr *a = rdma_get_local_addr(l->id);
	socklen_t len = vc_sa_len(a);

	if (*addrlen < len)
		return -EINVAL;
	memcpy(addr, a, len);
	*addrlen = len;
	vc_sa_set_port(addr, (uint16_t)(vc_sa_port(a) - l->port_off));
	return 0;
}

int vb_listener_fd(struct oti_listener *ol)
{
	return ((struct vb_listener *)ol)->ch->fd;
}

int vb_listener_arm(struct oti_listener *ol)
{
	/* The channel's fd is readable while events are queued. */
	(void)ol;
	return 0;
}

int vb_get_connreq(struct oti_listener *ol, struct oti_connreq **req, void *pdata,
		   size_t *pdata_len, struct sockaddr_storage *peer)
{
	struct vb_listener *l = (struct vb_listener *)ol;
	struct rdma_cm_event *ev;
	int ret;

	for (;;) {
		ret = vc_cm_next(l->ch, &ev);
		if (ret)
			return ret;
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			/* Nothing else is expected here (children are
			 * migrated before they could have events). */
			vc_cm_ack(ev);
			continue;
		}
		struct oti_connreq *r = NULL;

		/* A wildcard listen hears every device: one of the other
		 * flavor's is not ours to answer. */
		if (ev->id->verbs && ev->id->verbs->device->transport_type == l->fl->dev_type)
			r = malloc(sizeof(*r));
		if (!r) {
			vc_reject(ev->id, NULL, 0);
			vc_cm_ack(ev);
			vc_id_free(ev->id);
			continue;
		}
		r->id = ev->id;
		r->rtr_asked = l->fl->rtr && vc_rtr_asked(ev->param.conn.private_data,
							  ev->param.conn.private_data_len);
		*pdata_len = unframe_pdata(ev->param.conn.private_data,
					   ev->param.conn.private_data_len, pdata);
		struct sockaddr *pa = rdma_get_peer_addr(ev->id);

		vc_sa_copy(peer, pa, vc_sa_port(pa));
		vc_cm_ack(ev);
		*req = r;
		return 0;
	}
}

int vb_reject(struct oti_listener *ol, struct oti_connreq *req, const void *pdata,
	      size_t len)
{
	struct vb_listener *l = (struct vb_listener *)ol;
	uint8_t buf[VB_PDATA_BUF];
	int n = vc_frame(buf, l->fl->pdata_room, pdata, len);
	int ret;

	if (n < 0)
		n = vc_frame(buf, l->fl->pdata_room, NULL, 0);
	ret = vc_reject(req->id, buf, n);
	vc_id_free(req->id);
	free(req);
	return ret;
}

void vb_listener_close(struct oti_listener *ol)
{
	struct vb_listener *l = (struct vb_listener *)ol;
	struct rdma_cm_event *ev;

	if (!l)
		return;
	/* Pending requests are refused. */
	while (vc_cm_next(l->ch, &ev) == 0) {
		struct rdma_cm_id *id = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;

		if (id)
			vc_reject(id, NULL, 0);
		vc_cm_ack(ev);
		vc_id_free(id);
	}
	vc_id_free(l->id4);
	vc_id_free(l->id);
	vc_channel_free(l->ch);
	free(l);
}

/* --- endpoints ------------------------------------------------------------------- */

/* e watches its device's async fd from now on (vb_lock held). */
static void async_watch_add(struct vb_ep *e)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (sys.epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->dev->ctx->async_fd, &ev) == 0) {
		atomic_store(&e->async_watch, true);
		e->dev->watchers++;
	}
}

/* A new ep with a QP: listed for async events, and one of the device's
 * watchers while it has fewer than VB_ASYNC_WATCHERS. */
static void ep_list_add(struct vb_ep *e)
{
	pthread_mutex_lock(&vb_lock);
	e->next_ep = vb_eps;
	vb_eps = e;
	if (e->dev->watchers < VB_ASYNC_WATCHERS)
		async_watch_add(e);
	pthread_mutex_unlock(&vb_lock);
}

/* An ep that goes: a watcher hands its watch to another ep of the device
 * (listed eps are closed only after this, so their sets are alive). */
static void ep_list_del(struct vb_ep *e)
{
	pthread_mutex_lock(&vb_lock);
	for (struct vb_ep **p = &vb_eps; *p; p = &(*p)->next_ep)
		if (*p == e) {
			*p = e->next_ep;
			break;
		}
	if (atomic_load(&e->async_watch)) {
		sys.epoll_ctl(e->epfd, EPOLL_CTL_DEL, e->dev->ctx->async_fd, NULL);
		atomic_store(&e->async_watch, false);
		e->dev->watchers--;
		for (struct vb_ep *o = vb_eps; o && e->dev->watchers < VB_ASYNC_WATCHERS;
		     o = o->next_ep)
			if (o->dev == e->dev && !atomic_load(&o->async_watch))
				async_watch_add(o);
	}
	pthread_mutex_unlock(&vb_lock);
}

static void push_event(struct vb_ep *e, enum oti_event_type type, int status, const void *pdata,
		       size_t pdlen)
{
	if (e->npending == (int)(sizeof(e->pending) / sizeof(e->pending[0])))
		return;
	struct oti_event *ev = &e->pending[e->npending++];

	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->status = status;
	ev->private_data_len = pdlen;
	if (pdlen)
		memcpy(ev->private_data, pdata, pdlen);
}

/* The doorbell, made once: 0 or a negative errno. */
static int make_bell(void)
{
	const uint64_t one = 1;
	int r = 0;

	pthread_mutex_lock(&vb_lock);
	if (vb_bell < 0) {
		int fd = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));

		if (fd < 0)
			r = fd;
		else if (sys.write(fd, &one, sizeof(one)) != sizeof(one)) {
			r = -errno;
			fdspace_close(fd);
		} else
			vb_bell = fd;
	}
	pthread_mutex_unlock(&vb_lock);
	return r;
}

/* A new ep's fds and channel; NULL with *err (-EMFILE: no room left in
 * libsdp's fd region, which is not a lack of memory). */
static struct vb_ep *ep_alloc(int *err)
{
	struct vb_ep *e;

	linger_reap(false);	/* a process that only opens ends them too */
	e = calloc(1, sizeof(*e));
	*err = -ENOMEM;
	if (!e)
		return NULL;
	e->epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));
	if (e->epfd < 0) {
		*err = e->epfd;
		free(e);
		return NULL;
	}
	e->rtr_tfd = -1;
	*err = make_bell();
	e->ch = *err ? NULL : new_channel(err);
	if (!e->ch) {
		fdspace_close(e->epfd);
		free(e);
		return NULL;
	}
	struct epoll_event ev = { .events = EPOLLIN };

	sys.epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->ch->fd, &ev);
	return e;
}

static void drain_async(struct vb_ep *self, bool watcher_only);

/* What a connection's set-up could not make (its fds, a verb the device
 * refused), as a warning (SDP_LOG_LEVEL 8): a connect or accept that fails
 * with ENOMEM or EIO otherwise does not say which.  Returns r. */
static int setup_fail(const struct vb_flavor *fl, bool passive, const char *what, int r)
{
	sdp_warn(fl->name, "%s connection: %s failed: %s", passive ? "accepted" : "outgoing",
		 what, strerror(-r));
	return r;
}

static int qp_fail(const struct vb_ep *e, const char *what, int r)
{
	return setup_fail(e->fl, e->passive, what, r);
}

/* The verbs objects once the id is bound to a device: CQ and QP, and on
 * iWARP the start rule's word. */
static int ep_make_qp(struct vb_ep *e)
{
	struct ibv_context *ctx = e->id->verbs;
	int r;

	errno = 0;
	e->dev = vb_dev_of(ctx);
	if (!e->dev)
		return qp_fail(e, "the device's async fd", neg_errno(ENOMEM));
	/* What the device's async queue holds now happened before this ep
	 * had a CQ or QP: a port that went down and up while no ep read the
	 * queue (a listener between connections) would otherwise hit this
	 * ep once it is listed, and reset a connection made after the
	 * port came back.  Hand it to the eps that were there. */
	drain_async(e, false);
	errno = 0;
	e->pd = vb_pd_new(ctx);
	if (!e->pd)
		return qp_fail(e, "ibv_alloc_pd", neg_errno(ENOMEM));
	for (int t = 0;; t++) {
		r = vc_cq_open(ctx, VB_CQ_DEPTH, e, &vb_fds, &e->cq);
		if (!r || t + 1 == VB_QP_TRIES)
			break;
		setup_fail(e->fl, e->passive, "ibv_create_cq (tried again)", r);
		usleep(1000u << t);
	}
	if (r < 0)
		return qp_fail(e, "the completion queue", r);
	if (ibv_req_notify_cq(e->cq.cq, 0))
		return qp_fail(e, "ibv_req_notify_cq", -EIO);
	if (e->fl->rtr) {
		r = vc_rtr_init(&e->rtr, e->pd->pd);
		if (r)
			return qp_fail(e, "the start rule's memory registration", r);
	}

	struct ibv_qp_init_attr attr;

	for (int t = 0;; t++) {
		attr = (struct ibv_qp_init_attr){
			.send_cq = e->cq.cq,
			.recv_cq = e->cq.cq,
			.cap = { .max_send_wr = VB_SQ_DEPTH + (e->fl->rtr ? VC_RTR_SQ_ROOM : 0),
				 .max_recv_wr = VB_RQ_DEPTH,
				 .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64 },
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 1,
		};
		if (!vc_qp_new(e->id, e->pd->pd, &attr))
			break;
		/* Some devices cannot inline: try without. */
		attr.cap.max_inline_data = 0;
		r = vc_qp_new(e->id, e->pd->pd, &attr);
		if (!r)
			break;
		if (r != -ENOMEM || t + 1 == VB_QP_TRIES)
			return qp_fail(e, "rdma_create_qp", r);
		setup_fail(e->fl, e->passive, "rdma_create_qp (tried again)", r);
		usleep(1000u << t);
	}
	e->max_inline = attr.cap.max_inline_data;

	struct epoll_event ev = { .events = EPOLLIN };

	sys.epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->cq.cc->fd, &ev);
	ep_list_add(e);
	return 0;
}

static void rtr_timer_close(struct vb_ep *e)
{
	if (e->rtr_tfd >= 0)
		fdspace_close(e->rtr_tfd);
	e->rtr_tfd = -1;
}

static void ep_destroy(struct vb_ep *e)
{
	if (e->id && e->id->qp) {
		ep_list_del(e);
		vc_qp_free(e->id);
	}
	vc_cq_close(&e->cq);
	vc_rtr_fini(&e->rtr);	/* no QP writes it any more */
	vb_pd_put(e->pd);
	vc_id_free(e->id);
	vc_channel_free(e->ch);
	rtr_timer_close(e);
	fdspace_close(e->epfd);
	free(e);
}

int vb_ep_accept_open(struct oti_listener *ol, struct oti_connreq *req,
		      struct oti_ep **out)
{
	struct vb_listener *l = (struct vb_listener *)ol;
	int ret;
	struct vb_ep *e = ep_alloc(&ret);

	if (!e) {
		setup_fail(l->fl, true, "making its fds", ret);
		vc_reject(req->id, NULL, 0);
		vc_id_free(req->id);
		free(req);
		return ret;
	}
	e->id = req->id;
	e->passive = true;
	e->fl = l->fl;
	e->port_off = l->port_off;
	e->rtr_asked = req->rtr_asked;
	free(req);
	/* Its events from now on come to the ep's own channel. */
	ret = vc_migrate(e->id, e->ch);
	if (!ret) {
		e->id->context = e;
		ret = ep_make_qp(e);
	}
	if (ret) {
		vc_reject(e->id, NULL, 0);
		ep_destroy(e);
		return ret;
	}
	e->state = VB_RESOLVED;
	*out = (struct oti_ep *)e;
	return 0;
}

/* RDMA reads in flight, each way. */
#define VB_RD_DEPTH 4

int vb_accept(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct vb_ep *e = vb_ep(oep);
	uint8_t buf[VB_PDATA_BUF];
	int n = vc_frame(buf, e->fl->pdata_room - (e->rtr_asked ? VC_RTR_LEN : 0), pdata, len);

	if (n < 0)
		return n;
	n = vc_rtr_accept(&e->rtr, e->rtr_asked, buf, n);

	struct rdma_conn_param p = vc_conn_param(buf, n, VB_RD_DEPTH, VB_RD_DEPTH);
	int ret = vc_accept(e->id, &p);

	if (ret)
		return ret;
	e->state = VB_CONNECTING;
	return 0;
}

int vb_ep_reject(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct vb_ep *e = vb_ep(oep);
	uint8_t buf[VB_PDATA_BUF];
	int n;

	if (!e->passive || e->state != VB_RESOLVED)
		return -EINVAL;
	n = vc_frame(buf, e->fl->pdata_room, pdata, len);
	if (n < 0)
		return n;
	e->state = VB_DOWN;
	return vc_reject(e->id, buf, n);
}

/*
 * For tcp_source_ports: bind id to a port the host's TCP stack has free
 * right now (a socket bound to port 0 gets one that no socket, TIME_WAIT
 * included, holds), on src's address or the wildcard; rdma_resolve_addr()
 * then keeps the port.  Tried a few times: rdma_cm may hold the port in
 * its own space.  Failing that, rdma_cm picks as before.  The port is
 * free again between close() and the device's bind, a window other
 * programs could hit only by binding that very port in it.
 */
#define VB_TCP_PORT_TRIES 8

static void bind_tcp_free_port(struct rdma_cm_id *id, int family, const struct sockaddr *src)
{
	for (int i = 0; i < VB_TCP_PORT_TRIES; i++) {
		struct sockaddr_storage a;
		socklen_t alen = sizeof(a);
		int fd = sys.socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return;
		memset(&a, 0, sizeof(a));
		if (src)
			memcpy(&a, src, vc_sa_len(src));
		a.ss_family = (sa_family_t)family;
		vc_sa_set_port((struct sockaddr *)&a, 0);
		if (sys.bind(fd, (struct sockaddr *)&a, vc_sa_len((struct sockaddr *)&a)) ||
		    sys.getsockname(fd, (struct sockaddr *)&a, &alen)) {
			sys.close(fd);
			return;
		}
		sys.close(fd);
		if (vc_bind(id, (struct sockaddr *)&a, false) != -EADDRINUSE)
			return;
	}
}

int vb_ep_open(const struct vb_flavor *fl, const struct sockaddr *dst, socklen_t dstlen,
	       const struct sockaddr *src, socklen_t srclen, struct oti_ep **out)
{
	struct sockaddr_storage to;
	struct vb_ep *e;
	int ret;

	(void)dstlen;
	(void)srclen;
	if (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	e = ep_alloc(&ret);
	if (!e)
		return setup_fail(fl, false, "making its fds", ret);
	e->fl = fl;
	e->port_off = port_off_of(fl);
	vc_sa_copy(&to, dst, (uint16_t)(vc_sa_port(dst) + e->port_off));
	ret = vc_id_new(e->ch, &e->id, e);
	if (ret) {
		ep_destroy(e);
		return ret;
	}
	if (fl->tcp_source_ports && (!src || vc_sa_port(src) == 0)) {
		bind_tcp_free_port(e->id, dst->sa_family, src);
		if (rdma_get_local_addr(e->id)->sa_family != AF_UNSPEC)
			src = NULL;	/* bound: resolve from there */
	}
	e->state = VB_RESOLVING_ADDR;
	ret = vc_resolve_addr(e->id, src, (struct sockaddr *)&to);
	if (ret) {
		ep_destroy(e);
		return ret;
	}
	*out = (struct oti_ep *)e;
	return 0;
}

int vb_connect(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct vb_ep *e = vb_ep(oep);
	uint8_t buf[VB_PDATA_BUF];
	/* on iWARP the start rule's flags byte follows */
	int n = vc_frame(buf, e->fl->pdata_room - (e->fl->rtr ? 1 : 0), pdata, len);

	if (n < 0)
		return n;
	if (e->state != VB_RESOLVED)
		return -EINVAL;
	if (e->fl->rtr)
		n = vc_rtr_ask(buf, n);

	struct rdma_conn_param p = vc_conn_param(buf, n, VB_RD_DEPTH, VB_RD_DEPTH);
	int ret = vc_connect(e->id, &p);

	if (ret)
		return ret;
	e->state = VB_CONNECTING;
	return 0;
}

int vb_ep_names(struct oti_ep *oep, struct sockaddr_storage *local,
		struct sockaddr_storage *peer)
{
	struct vb_ep *e = vb_ep(oep);

	/* The listening side's port is an SDP port shifted by port_off; the
	 * connecting side's is whatever source port was chosen, as is. */
	if (local) {
		struct sockaddr *a = rdma_get_local_addr(e->id);

		vc_sa_copy(local, a, (uint16_t)(vc_sa_port(a) - (e->passive ? e->port_off : 0)));
	}
	if (peer) {
		struct sockaddr *a = rdma_get_peer_addr(e->id);

		vc_sa_copy(peer, a, (uint16_t)(vc_sa_port(a) - (e->passive ? 0 : e->port_off)));
	}
	return 0;
}

int vb_ep_fd(struct oti_ep *oep)
{
	return vb_ep(oep)->epfd;
}

/* --- events ------------------------------------------------------------------------ */

/*
 * The start rule's timer (vcore.h), ms from now (0: at once): a timerfd in
 * the epoll set while the handshake runs, closed when it is over (an
 * established connection keeps none).  False when none could be set.
 */
static bool rtr_timer(struct vb_ep *e, int ms)
{
	struct itimerspec its = { .it_value = { .tv_sec = ms / 1000,
						.tv_nsec = (ms % 1000) * 1000000L + 1 } };

	if (e->rtr_tfd < 0) {
		struct epoll_event ev = { .events = EPOLLIN };

		e->rtr_tfd = FDSPACE_MAKE(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
		if (e->rtr_tfd < 0 || sys.epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->rtr_tfd, &ev) < 0) {
			sdp_dbg(e->fl->name, "no timer for the start rule's handshake: carrying on "
					     "without its wait or repeats");
			rtr_timer_close(e);
			return false;
		}
	}
	return timerfd_settime(e->rtr_tfd, 0, &its, NULL) == 0;
}

/* The connection is up for the engine; pdata, len: the peer's accept as
 * rdma_cm gives it (framed). */
static void ep_up(struct vb_ep *e, const void *pdata, size_t len)
{
	uint8_t pd[VC_PDATA_MAX];

	e->state = VB_CONNECTED;
	push_event(e, OTI_EV_ESTABLISHED, 0, pd, unframe_pdata(pdata, len, pd));
}

/* No more of the start rule's handshake: nothing awaited or repeated. */
static void rtr_end(struct vb_ep *e)
{
	vc_rtr_stop(&e->rtr);
	rtr_timer_close(e);
}

/* The connection is gone or broken (the event is the caller's). */
static void ep_down(struct vb_ep *e)
{
	e->state = VB_DOWN;
	rtr_end(e);
}

/*
 * The timer for what is left of the start rule's handshake (ms from now),
 * or the handshake's end.  Without a timer the handshake ends at once:
 * the responder reports the connection up without its wait, the initiator
 * repeats nothing (the connection goes on as with a peer that did not
 * ask).
 */
static void rtr_schedule(struct vb_ep *e, int ms)
{
	bool waiting = e->rtr.wait;

	if (vc_rtr_busy(&e->rtr) && rtr_timer(e, ms))
		return;
	rtr_end(e);
	if (waiting)
		ep_up(e, NULL, 0);
}

/* The connection failed for the start rule: it goes down (OTI_EV_ERROR). */
static void rtr_failed(struct vb_ep *e, int err)
{
	ep_down(e);
	vc_disconnect_once(e->id, &e->disconnect_called);
	push_event(e, OTI_EV_ERROR, err, NULL, 0);
}

/* rdma_cm's ESTABLISHED: the start rule's handshake first (vcore.h). */
static void established(struct vb_ep *e, const struct rdma_cm_event *ev)
{
	int r = vc_rtr_established(&e->rtr, e->id->qp, !e->passive, ev->param.conn.private_data,
				   ev->param.conn.private_data_len, vc_now_ms());

	if (r < 0) {
		sdp_dbg(e->fl->name, "the start rule's write could not be posted (%d)", r);
		rtr_failed(e, r);
		return;
	}
	if (r)
		ep_up(e, ev->param.conn.private_data, ev->param.conn.private_data_len);
	/* the responder polls its word every millisecond; the initiator
	 * repeats its write 10 ms after the first */
	rtr_schedule(e, r ? 10 : 1);
}

/* The start rule's work that is due: the initiator's repeats, the
 * responder's look at its word.  Owner only. */
static void rtr_progress(struct vb_ep *e)
{
	uint64_t n, waited = 0;
	int next = -1, r;

	if (!vc_rtr_busy(&e->rtr))
		return;
	if (e->rtr_tfd >= 0 && sys.read(e->rtr_tfd, &n, sizeof(n)) < 0) {
		/* not expired yet: the word may have landed anyway */
	}
	r = vc_rtr_tick(&e->rtr, e->id->qp, vc_now_ms(), &next, &waited);
	if (r == VC_RTR_SEEN) {
		if (waited >= 5)	/* slow, or caught up by a repeat */
			sdp_dbg(e->fl->name, "the RTR write seen after %llu ms",
				(unsigned long long)waited);
		ep_up(e, NULL, 0);
	} else if (r < 0) {
		sdp_dbg(e->fl->name, "no RTR write from the initiator in %d s", VC_RTR_MS / 1000);
		rtr_failed(e, r);
	}
	rtr_schedule(e, next);
}

/* One rdma_cm event into the pending queue (or an internal step). */
static void handle_cm_event(struct vb_ep *e, struct rdma_cm_event *ev)
{
	uint8_t pd[VC_PDATA_MAX];
	int r;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		e->state = VB_RESOLVING_ROUTE;
		r = vc_resolve_route(e->id);
		if (r)
			push_event(e, OTI_EV_UNREACHABLE, r, NULL, 0);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		/* The route leads to another flavor's device. */
		if (e->id->verbs->device->transport_type != e->fl->dev_type) {
			push_event(e, OTI_EV_UNREACHABLE, -ENETUNREACH, NULL, 0);
			break;
		}
		r = ep_make_qp(e);
		if (r) {
			push_event(e, OTI_EV_UNREACHABLE, r, NULL, 0);
			break;
		}
		e->state = VB_RESOLVED;
		push_event(e, OTI_EV_RESOLVED, 0, NULL, 0);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		push_event(e, OTI_EV_UNREACHABLE, ev->status < 0 ? ev->status : -EHOSTUNREACH,
			   NULL, 0);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		/* a responder still waiting for the write stops waiting */
		rtr_end(e);
		push_event(e, OTI_EV_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		break;
	case RDMA_CM_EVENT_REJECTED:
		/* A consumer reject carries our framing; anything else (no
		 * listener) is a refusal without an SDP peer. */
		r = vc_rejected(ev, e->fl->dev_type == IBV_TRANSPORT_IWARP, pd);
		if (r >= 0)
			push_event(e, OTI_EV_REJECTED, -ECONNREFUSED, pd, (size_t)r);
		else
			push_event(e, OTI_EV_UNREACHABLE, -ECONNREFUSED, NULL, 0);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		established(e, ev);
		break;
	case RDMA_CM_EVENT_DISCONNECTED: {
		/* A responder still waiting for the RTR write: the initiator
		 * was connected (it had our accept) and went away before its
		 * write landed or was seen (an abortive close right after
		 * connect() flushes it).  Linux's accept() returns such a
		 * connection, reset; so the engine sees it up, then down. */
		bool was_up = e->rtr.wait;

		/* Answer the peer's DREQ so its side completes. */
		vc_disconnect_once(e->id, &e->disconnect_called);
		ep_down(e);
		if (was_up) {
			sdp_dbg(e->fl->name, "the initiator left before its RTR write was seen");
			push_event(e, OTI_EV_ESTABLISHED, 0, NULL, 0);
		}
		push_event(e, OTI_EV_DISCONNECTED, 0, NULL, 0);
		break;
	}
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ep_down(e);
		push_event(e, OTI_EV_ERROR, -ENODEV, NULL, 0);
		break;
	default:
		/* CONNECT_RESPONSE (not with a QP made by rdma_create_qp),
		 * TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing for the engine. */
		break;
	}
}

static void drain_cm(struct vb_ep *e)
{
	struct rdma_cm_event *ev;

	/* room for the two events one rdma_cm event may make */
	while (e->npending + 2 <= (int)(sizeof(e->pending) / sizeof(e->pending[0])) &&
	       vc_cm_next(e->ch, &ev) == 0) {
		handle_cm_event(e, ev);
		vc_cm_ack(ev);
	}
}

/* Hand an async event to e (vb_lock held): its flag, and the doorbell in
 * its epoll set, so that its owner, asleep on the set or not, looks.  The
 * doorbell is added only by the ring that set the flag, and taken out by
 * the owner under vb_lock before it clears the flag (take_async), so it is
 * in the set exactly while the flag is set. */
static void vb_ring(struct vb_ep *e)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (!atomic_exchange(&e->async_err, 1) &&
	    sys.epoll_ctl(e->epfd, EPOLL_CTL_ADD, vb_bell, &ev) < 0) {
		/* Only without memory for the registration: the owner
		 * still finds the flag at its next drive. */
	}
}

/* Asynchronous device events: QP fatal, port down.  The device's
 * watchers read them (and a new ep, once, what came before it); each is
 * handed to the ep it concerns (vb_ring), whose owner makes it an
 * OTI_EV_ERROR: the reader holds no lock of the others, so it must not
 * touch their event queues or state.  Another ep does not look, which
 * saves its drives a read() that finds nothing. */
static void drain_async(struct vb_ep *self, bool watcher_only)
{
	struct ibv_async_event aev;

	if (!self->dev || (watcher_only && !atomic_load_explicit(&self->async_watch,
								  memory_order_relaxed)))
		return;
	pthread_mutex_lock(&vb_lock);
	while (vc_async_next(self->dev->ctx, &aev) == 0) {
		for (struct vb_ep *e = vb_eps; e; e = e->next_ep) {
			bool hit = false;

			switch (vc_async_kind(&aev)) {
			case VC_ASYNC_QP:
				hit = e->id && e->id->qp == aev.element.qp;
				break;
			case VC_ASYNC_CQ:
				hit = e->cq.cq == aev.element.cq;
				break;
			case VC_ASYNC_PORT:
				hit = e->dev == self->dev && e->id &&
				      e->id->port_num == aev.element.port_num;
				break;
			case VC_ASYNC_DEVICE:
				hit = e->dev == self->dev;
				break;
			case VC_ASYNC_OTHER:
				break;
			}
			if (hit)
				vb_ring(e);
		}
		vc_async_ack(&aev);
	}
	pthread_mutex_unlock(&vb_lock);
}

/* An async event handed to this ep, as an OTI_EV_ERROR.  Owner only. */
static void take_async(struct vb_ep *e)
{
	bool rung;

	if (!atomic_load(&e->async_err))
		return;
	pthread_mutex_lock(&vb_lock);
	sys.epoll_ctl(e->epfd, EPOLL_CTL_DEL, vb_bell, NULL);
	rung = atomic_exchange(&e->async_err, 0);
	pthread_mutex_unlock(&vb_lock);
	if (rung && e->state != VB_DOWN) {
		ep_down(e);
		push_event(e, OTI_EV_ERROR, -EIO, NULL, 0);
	}
}

/*
 * A drive reads the event channel and (a watcher) the async fd once, and
 * a quiet drive not at all: what arrives later keeps the ep's set
 * readable, and whoever wakes on it drives again (oti.h drive_begin).
 * Reading them on every get_event() cost two system calls per round of
 * every drive, nearly always EAGAIN, on a path that carries data.
 */
void vb_drive_begin(struct oti_ep *oep, bool read)
{
	struct vb_ep *e = vb_ep(oep);

	e->driving = true;
	e->looked = !read;
	e->empty_reads = 0;
}

unsigned vb_drive_end(struct oti_ep *oep)
{
	struct vb_ep *e = vb_ep(oep);

	e->driving = e->looked = false;
	return e->empty_reads;
}

int vb_get_event(struct oti_ep *oep, struct oti_event *ev)
{
	struct vb_ep *e = vb_ep(oep);
	bool look = !e->looked;

	if (e->driving)
		e->looked = true;
	if (!e->npending && look) {
		drain_cm(e);
		if (!e->npending)
			e->empty_reads++;
	}
	if (!e->npending)
		rtr_progress(e);
	if (!e->npending && look)
		drain_async(e, true);
	if (!e->npending)
		take_async(e);
	if (!e->npending)
		return -EAGAIN;
	*ev = e->pending[0];
	memmove(&e->pending[0], &e->pending[1], (size_t)(e->npending - 1) * sizeof(e->pending[0]));
	e->npending--;
	return 0;
}

/* --- completions ------------------------------------------------------------------ */

int vb_ep_arm(struct oti_ep *oep)
{
	struct vb_ep *e = vb_ep(oep);

	/* rdma_cm's events are not read here: the channel is in the ep's
	 * set, which a pending one keeps readable, so the sleep ends at
	 * once and the drive after it takes the event (a read here cost a
	 * system call per sleep, nearly always EAGAIN). */
	rtr_progress(e);
	if (e->npending || atomic_load(&e->async_err))
		return -EAGAIN;
	if (!e->cq.cq)
		return 0;
	vc_cq_take_events(&e->cq);
	if (e->wc_next < e->nwc)
		return -EAGAIN;
	if (ibv_req_notify_cq(e->cq.cq, 0))
		return -EAGAIN;
	/* What arrived before the notification was armed. */
	int n = ibv_poll_cq(e->cq.cq, VB_WC_BATCH, e->wc);

	if (n > 0) {
		e->nwc = n;
		e->wc_next = 0;
		return -EAGAIN;
	}
	return 0;
}

static int wc_status(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED;
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return -EACCES;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ETIMEDOUT;
	default:
		return -EIO;
	}
}

static const char *wc_op_name(enum oti_wc_op op)
{
	switch (op) {
	case OTI_WC_SEND:
		return "send";
	case OTI_WC_RECV:
		return "receive";
	case OTI_WC_RDMA_READ:
		return "RDMA read";
	case OTI_WC_RDMA_WRITE:
		return "RDMA write";
	}
	return "?";
}

int vb_poll_cq(struct oti_ep *oep, struct oti_wc *wc, int n)
{
	struct vb_ep *e = vb_ep(oep);
	int got = 0;

	if (!e->cq.cq)
		return 0;
	while (got < n) {
		if (e->wc_next >= e->nwc) {
			int m = ibv_poll_cq(e->cq.cq, VB_WC_BATCH, e->wc);

			if (m < 0)
				return got ? got : -EIO;
			if (m == 0)
				break;
			e->nwc = m;
			e->wc_next = 0;
		}
		struct ibv_wc *w = &e->wc[e->wc_next++];
		struct vb_slot *slot;

		if (w->wr_id == VB_WRID_RQ) {
			if (e->rq_head == e->rq_tail)
				continue;	/* cannot happen: nothing posted */
			slot = &e->rq[e->rq_head++ % VB_RQ_DEPTH];
		} else {
			uint64_t i = w->wr_id - VB_WRID_SQ;

			/* the start rule's writes (wr_id 0) are the
			 * transport's own */
			if (w->wr_id < VB_WRID_SQ || i >= VB_SQ_DEPTH || !e->sq[i].busy)
				continue;
			slot = &e->sq[i];
			slot->busy = false;
		}
		if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR)
			sdp_dbg(e->fl->name, "%s completion: %s (vendor error 0x%x)",
				wc_op_name(slot->op), ibv_wc_status_str(w->status), w->vendor_err);
		wc[got] = (struct oti_wc){
			.ctx = slot->ctx,
			.op = slot->op,
			.status = wc_status(w->status),
			.len = slot->op == OTI_WC_RECV ? w->byte_len : 0,
		};
		got++;
		while (e->sq_head != e->sq_tail && !e->sq[e->sq_head % VB_SQ_DEPTH].busy)
			e->sq_head++;
	}
	return got;
}

/* --- data ---------------------------------------------------------------------------- */

int vb_mr_reg(struct oti_ep *oep, void *addr, size_t len, unsigned access,
	      struct oti_mr **out)
{
	struct vb_ep *e = vb_ep(oep);
	struct vb_mr *m;
	int flags = 0;

	if (!e->pd)
		return -EINVAL;	/* not bound to a device yet */
	if (access & OTI_ACCESS_LOCAL_WRITE)
		flags |= IBV_ACCESS_LOCAL_WRITE;
	if (access & OTI_ACCESS_REMOTE_READ)
		flags |= IBV_ACCESS_REMOTE_READ;
	if (access & OTI_ACCESS_REMOTE_WRITE)
		flags |= IBV_ACCESS_REMOTE_WRITE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->mr = vc_mr_reg(e->pd->pd, addr, len, flags);
	if (!m->mr) {
		int ret = neg_errno(ENOMEM);

		sdp_warn(e->fl->name, "ibv_reg_mr of %zu bytes failed: %s", len, strerror(-ret));
		free(m);
		return ret;
	}
	m->pd = e->pd;
	atomic_fetch_add(&m->pd->refs, 1);
	m->pub = (struct oti_mr){ .addr = addr, .len = len, .rkey = m->mr->rkey,
				  .raddr_base = (uint64_t)(uintptr_t)addr, .access = access };
	*out = &m->pub;
	return 0;
}

int vb_mr_dereg(struct oti_mr *omr)
{
	struct vb_mr *m = (struct vb_mr *)omr;
	int ret;

	if (!m)
		return 0;
	ret = vc_mr_dereg(m->mr);
	vb_pd_put(m->pd);
	free(m);
	return ret;
}

static struct ibv_sge to_sge(const struct oti_sge *s)
{
	return (struct ibv_sge){ .addr = (uint64_t)(uintptr_t)s->addr, .length = s->len,
				 .lkey = ((struct vb_mr *)s->mr)->mr->lkey };
}

int vb_post_recv(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx)
{
	struct vb_ep *e = vb_ep(oep);
	struct ibv_sge s = to_sge(sge);
	struct ibv_recv_wr wr = { .wr_id = VB_WRID_RQ, .sg_list = &s, .num_sge = 1 }, *bad;

	if (!e->id || !e->id->qp)
		return -ENOTCONN;
	if (e->rq_tail - e->rq_head >= VB_RQ_DEPTH)
		return -EAGAIN;
	int r = ibv_post_recv(e->id->qp, &wr, &bad);

	if (r)
		return -r;
	e->rq[e->rq_tail++ % VB_RQ_DEPTH] = (struct vb_slot){ .ctx = ctx, .op = OTI_WC_RECV };
	return 0;
}

static int post_sq(struct vb_ep *e, struct ibv_send_wr *wr, uint64_t ctx, enum oti_wc_op op)
{
	struct ibv_send_wr *bad;

	if (!e->id || !e->id->qp)
		return -ENOTCONN;
	if (e->state == VB_DOWN)
		return -ECANCELED;
	if (e->sq_tail - e->sq_head >= VB_SQ_DEPTH)
		return -EAGAIN;
	unsigned i = e->sq_tail % VB_SQ_DEPTH;

	wr->wr_id = VB_WRID_SQ + i;
	int r = ibv_post_send(e->id->qp, wr, &bad);

	if (r)
		return -r;
	e->sq[i] = (struct vb_slot){ .ctx = ctx, .op = op, .busy = true };
	e->sq_tail++;
	return 0;
}

int vb_post_send(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx,
		 unsigned flags)
{
	struct vb_ep *e = vb_ep(oep);
	struct ibv_sge s = to_sge(sge);
	struct ibv_send_wr wr = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };

	if ((flags & OTI_SEND_INLINE) && sge->len <= e->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (flags & OTI_SEND_SOLICITED)
		wr.send_flags |= IBV_SEND_SOLICITED;
	return post_sq(e, &wr, ctx, OTI_WC_SEND);
}

static int vb_rdma(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
		   uint32_t rkey, uint64_t ctx, bool write)
{
	struct vb_ep *e = vb_ep(oep);
	struct ibv_sge s = to_sge(local);
	struct ibv_send_wr wr = {
		.sg_list = &s,
		.num_sge = 1,
		.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};

	return post_sq(e, &wr, ctx, write ? OTI_WC_RDMA_WRITE : OTI_WC_RDMA_READ);
}

int vb_rdma_read(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
		 uint32_t rkey, uint64_t ctx)
{
	return vb_rdma(oep, local, raddr, rkey, ctx, false);
}

int vb_rdma_write(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
		  uint32_t rkey, uint64_t ctx)
{
	return vb_rdma(oep, local, raddr, rkey, ctx, true);
}

/* --- teardown -------------------------------------------------------------------------- */

int vb_disconnect(struct oti_ep *oep)
{
	struct vb_ep *e = vb_ep(oep);

	if (e->disconnect_called || e->state == VB_DOWN)
		return 0;
	if (e->state != VB_CONNECTED && e->state != VB_CONNECTING)
		return -ENOTCONN;
	e->disconnect_called = true;
	return vc_disconnect(e->id);
}

/*
 * Closing IB eps whose disconnect is still on its way.  rdma_disconnect()
 * only starts it: the DREQ is a MAD that the CM sends and
 * repeats until the peer answers, and destroying the cm_id cancels it, so
 * a peer whose DREQ was not out yet (a busy host) never hears of the end:
 * its connection stays up, silent (conform's connect.listener_closed: a
 * client of a listener closed before accepting waited for its reset for
 * ever, seen twice on rxe under load).  Such an ep keeps its cm_id and QP
 * here until its DISCONNECTED (or TIMEWAIT_EXIT) comes or VB_LINGER_MS
 * pass, longer than a lost DREQ's first repeat (about 4 s with rdma_cm's
 * response timeout).  Nobody waits on them: each ep open and close looks
 * at the list (linger_reap), and vb_fini() ends what is left.  A fork
 * child inherits the list but not the eps (their channels are its
 * parent's files too): only the process that put an ep here ends it, and
 * a child only forgets the entry.
 * The SDP layer has forgotten these eps: their fds are in no epoll set
 * of the engine's (conn_leave_progress).
 */
#define VB_LINGER_MS 15000

struct vb_linger {
	struct vb_ep *e;
	pid_t pid;
	uint64_t since_ms;	/* vc_now_ms() at close */
	struct vb_linger *next;
};

static pthread_mutex_t vb_linger_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf */
static struct vb_linger *vb_lingering;

/* Has the disconnect of a lingering ep ended?  Reads its own channel. */
static bool linger_done(struct vb_ep *e)
{
	struct rdma_cm_event *ev;
	bool done = false;

	while (vc_cm_next(e->ch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED ||
		    ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT ||
		    ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
			done = true;
		vc_cm_ack(ev);
	}
	return done;
}

/* End the lingering eps that are done, or past their time, or all of
 * them (vb_fini).  The eps are destroyed outside the list's lock:
 * ep_destroy() takes vb_lock. */
static void linger_reap(bool all)
{
	struct vb_linger *due = NULL, **p;
	pid_t me;
	uint64_t now;

	pthread_mutex_lock(&vb_linger_lock);
	if (!vb_lingering) {
		/* Every connection's open and close come here. */
		pthread_mutex_unlock(&vb_linger_lock);
		return;
	}
	me = getpid();
	now = vc_now_ms();
	for (p = &vb_lingering; *p;) {
		struct vb_linger *g = *p;
		bool done = g->pid == me && linger_done(g->e);

		if (g->pid != me || all || done || now - g->since_ms >= VB_LINGER_MS) {
			if (g->pid == me)
				sdp_dbg(g->e->fl->name, "a closed ep's disconnect %s after %llu ms",
					done ? "ended" : "given up",
					(unsigned long long)(now - g->since_ms));
			*p = g->next;
			g->next = due;
			due = g;
		} else {
			p = &g->next;
		}
	}
	pthread_mutex_unlock(&vb_linger_lock);
	while (due) {
		struct vb_linger *g = due;

		due = g->next;
		/* A parent's ep stays as every ep a child inherits: on
		 * vb_eps, untouched. */
		if (g->pid == me)
			ep_destroy(g->e);
		free(g);
	}
}

/* Keep a disconnecting ep until its disconnect ends; false: destroy it now. */
static bool linger_add(struct vb_ep *e)
{
	struct vb_linger *g = malloc(sizeof(*g));

	if (!g)
		return false;
	g->e = e;
	g->pid = getpid();
	g->since_ms = vc_now_ms();
	pthread_mutex_lock(&vb_linger_lock);
	g->next = vb_lingering;
	vb_lingering = g;
	pthread_mutex_unlock(&vb_linger_lock);
	return true;
}

/*
 * A passive ep closed before the initiator's RTU came: a listener closed
 * over a connection it had not accepted yet, at once after the client's
 * connect() returned.  The initiator took our REP for the connection,
 * but IB's CM has no DREQ before the RTU, and destroying the id then
 * sends a REJ, which an initiator already established ignores: it would
 * wait for ever for the reset (conform's connect.listener_closed on rxe,
 * under load).  So the close waits for the RTU (ESTABLISHED), which
 * follows the REP at once unless the initiator is gone, and disconnects
 * then; true if it came.  Bounded by VB_RTU_WAIT_MS.
 */
#define VB_RTU_WAIT_MS 1000

static bool await_established(struct vb_ep *e)
{
	uint64_t start = vc_now_ms();

	for (;;) {
		struct rdma_cm_event *ev;

		if (vc_cm_next(e->ch, &ev) == 0) {
			bool up = ev->event == RDMA_CM_EVENT_ESTABLISHED;

			vc_cm_ack(ev);
			/* Anything else: rejected, unreachable, gone. */
			if (up)
				sdp_dbg(e->fl->name, "closed before the initiator's RTU: it came "
						     "after %llu ms; disconnecting",
					(unsigned long long)(vc_now_ms() - start));
			return up;
		}
		uint64_t now = vc_now_ms();

		if (now - start >= VB_RTU_WAIT_MS)
			return false;
		struct pollfd p = { .fd = e->ch->fd, .events = POLLIN };

		if (sys.poll(&p, 1, (int)(start + VB_RTU_WAIT_MS - now)) < 0 && errno != EINTR)
			return false;
	}
}

void vb_ep_close(struct oti_ep *oep)
{
	struct vb_ep *e = vb_ep(oep);

	if (!e)
		return;
	if (e->passive && e->state == VB_CONNECTING && e->fl->dev_type == IBV_TRANSPORT_IB &&
	    await_established(e)) {
		e->state = VB_CONNECTED;
		/* A disconnect made before could send no DREQ. */
		e->disconnect_called = false;
	}
	if (e->state == VB_CONNECTED || e->state == VB_CONNECTING)
		vc_disconnect_once(e->id, &e->disconnect_called);
	/* On IB rdma_disconnect() has also moved the QP to the error state:
	 * nothing the peer still sends lands in the buffers the engine frees
	 * next.  iWARP's end is a TCP close in the kernel, which a destroyed
	 * id does not cancel. */
	if (!(e->state == VB_CONNECTED && e->fl->dev_type == IBV_TRANSPORT_IB && linger_add(e)))
		ep_destroy(e);
	linger_reap(false);
}
