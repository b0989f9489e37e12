/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tcp-fallback: the software OTI backend, on libfabric's "tcp" provider
 * (FI_EP_MSG, FI_MSG | FI_RMA).  It lets SDP run on any host with TCP/IP
 * and is registered last, behind the RDMA backends.
 *
 * PORT SCHEME
 *   One application port will later listen on both stacks at once (native
 *   TCP on P, SDP on P), so an SDP listener must never take TCP port P.
 *   With offset = tunable tcpf_port_offset (default 20000), read when the
 *   listener or ep is created:
 *     listen(P)      binds TCP port T = (P + offset) mod 65536.  A P whose
 *                    T would be 0 cannot be served: -EADDRNOTAVAIL.
 *     listen(0)      lets the OS choose T; the application port reported by
 *                    listener_name() is (T - offset) mod 65536 (a T whose
 *                    application port would be 0 is given back and
 *                    another is chosen).
 *     ep_open(P)     connects to TCP port (P + offset) mod 65536.
 *   Ports of the passive side (listener_name, the local name of an accepted
 *   ep) and the peer of an active ep are application ports.  The source
 *   port of an active ep is not mapped: ep_names() and get_connreq() report
 *   whatever TCP used (the engine only needs the IP of that side).  Both
 *   ends of a connection must use the same offset.
 *
 * PROVIDER FACTS (libfabric 1.17, "tcp"; read at run time where cheap)
 *   - cm data: FI_OPT_CM_DATA_SIZE is 256 bytes.
 *   - mr_mode is empty even when FI_MR_VIRT_ADDR / FI_MR_PROV_KEY are
 *     offered: RMA addresses are offsets into the region (raddr_base = 0)
 *     and keys are ours to choose (random 32-bit here).  Both bits are
 *     honoured should a provider report them.
 *   - inject_size 128, tx/rx queues 256 entries, max_msg_size unlimited.
 *   - Progress: reported FI_PROGRESS_AUTO, yet the 1.17 provider starts no
 *     thread.  Data moves inside fi_cq_read() (and fi_trywait() asks for
 *     POLLOUT when sends are queued), connection management inside
 *     fi_eq_read().  The CQ and EQ wait fds are epoll fds holding the
 *     sockets, readable whenever a socket needs service; so reading the CQ
 *     and EQ when the ep fd is readable is all it takes, and an armed idle
 *     ep costs no CPU.  The RDMA target does its part of a read or write
 *     when its own engine polls its CQ.
 *   - Completions: a send or RDMA write completes once the provider has
 *     handed it to the kernel, not when the peer has it.  An access error
 *     at the RDMA target, or a message longer than the receive buffer
 *     (-EMSGSIZE), makes the provider drop the connection: both sides then
 *     see DISCONNECTED.
 *   - Rejection: the provider reports "nobody listens" and a reject by the
 *     peer identically (FI_ECONNREFUSED, with the reject data as err_data).
 *     Our reject() therefore sends one marker byte in front of the
 *     caller's data; an error with that marker is REJECTED, one without is
 *     UNREACHABLE.  That byte is why max_private_data is one less than the
 *     provider's cm data size.
 *
 * OBJECTS
 *   One fabric and one domain, opened by init(), are shared by every ep and
 *   listener (the domain is FI_THREAD_SAFE).  Each ep has its own CQ and EQ
 *   (FI_WAIT_FD) and one epoll fd holding both wait fds: that is ep_fd().
 *   Connection events that the provider does not produce (RESOLVED, an
 *   UNREACHABLE found while starting the connect) are written into the
 *   ep's own EQ with fi_eq_write(), so they are ordered with the
 *   provider's events and make the fd readable like them.  The provider
 *   finds a closed connection in the data path, behind the completions of
 *   the last messages; get_event() keeps such a DISCONNECTED (or ERROR)
 *   back until poll_cq() has emptied the CQ, so that no completion carries
 *   data after it, as the contract says.  Work posted once the
 *   connection is going or gone completes with -ECANCELED instead of
 *   failing, as on a verbs QP in the error state; so does work the provider
 *   took after it had seen the close (it would never complete it).
 *   An ep holds 8 fds (socket, two epoll fds and two socketpairs inside
 *   libfabric, our epoll fd), a listener 4.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric_lib.h"
#include "fdspace.h"
#include "log.h"
#include "oti.h"
#include "tunables.h"

/* The few libfabric symbols come from the library we load (fabric_lib.h). */
#define fi_getinfo tcpf_fi.getinfo
#define fi_freeinfo tcpf_fi.freeinfo
#define fi_dupinfo tcpf_fi.dupinfo
#define fi_fabric tcpf_fi.fabric
#define fi_strerror tcpf_fi.strerror

#define TCPF "tcpf"

/* The provider behaviour documented above was checked against 1.17. */
#define TCPF_FI_VERSION FI_VERSION(1, 17)

/* Our own EQ events; the provider's are small numbers (FI_NOTIFY ..). */
#define TCPF_EV_RESOLVED 0x7cf00001u
#define TCPF_EV_UNREACHABLE 0x7cf00002u

/* First byte of every reject's cm data, see "Rejection" above. */
#define TCPF_REJECT_MARK 0xa5

/* A key collision is retried with another random key this many times. */
#define TCPF_KEY_TRIES 16

/* listen(0): attempts to get a TCP port whose application port is not 0. */
#define TCPF_LISTEN_TRIES 8

/* Completions read from the provider per fi_cq_read() call. */
#define TCPF_CQ_BATCH 16

/* ------------------------------------------------------------------------ */

/* Set once by init() and read-only until fini(), except objects. */
static struct {
	pthread_mutex_t lock;
	bool ready;
	struct fi_info *info;		/* template for every ep and listener */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	size_t cm_max;			/* provider's cm data size */
	size_t pdata_max;		/* what we offer: see REJECT_MARK */
	size_t inject;
	size_t tx_depth, rx_depth;
	uint64_t max_msg;
	bool virt_addr, prov_key;
	atomic_int objects;		/* live eps, listeners and mrs */
} tcpf = { .lock = PTHREAD_MUTEX_INITIALIZER };

enum tcpf_state {
	TCPF_IDLE,		/* active: resolved, connect() not called */
	TCPF_CONNECTING,	/* active: connect() called */
	TCPF_ACCEPT_READY,	/* passive: opened, accept() not called */
	TCPF_ACCEPTING,		/* passive: accept() called */
	TCPF_CONNECTED,
	TCPF_DOWN,		/* the terminal event was returned */
};

/*
 * One posted work request.  Its address is the libfabric context, so a
 * completion (even an error, whose flags the provider may leave empty)
 * says which operation it was; fictx comes first in case a provider asks
 * for FI_CONTEXT.
 */
enum tcpf_op_where {
	TCPF_OP_FREE,
	TCPF_OP_PROV,		/* handed to the provider */
	TCPF_OP_FLUSH,		/* to complete with -ECANCELED, see tcpf_flush_post */
};

struct tcpf_op {
	struct fi_context fictx;
	uint64_t ctx;
	uint64_t seq;		/* posting order */
	enum oti_wc_op op;
	enum tcpf_op_where where;
	struct tcpf_op *next;
};

struct tcpf_fifo {
	struct tcpf_op *head, **tail;
};

struct tcpf_ep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_eq *eq;
	int epfd;
	int eq_wfd;			/* the EQ's wait fd, see tcpf_cloexec_wait_set */
	uint16_t port_offset;
	enum tcpf_state state;
	bool active;
	/* disconnect() waits for the provider's sends and RDMA ops to
	 * complete before shutting down, so that "sends already posted are
	 * delivered first" holds; shut: fi_shutdown() was called. */
	bool shutdown_pending;
	bool shut;
	/* A DISCONNECTED or ERROR read while completions were still queued:
	 * kept back until poll_cq() has taken them, see tcpf_get_event(). */
	bool held;
	struct oti_event held_ev;
	unsigned prov_tx, prov_rx;	/* ops the provider holds */
	struct tcpf_op *tx_free, *rx_free;
	struct tcpf_fifo tx_flush, rx_flush;
	uint64_t seq;
	struct tcpf_op *ops;		/* tx_depth + rx_depth records */
	/* Active: the application address we connect to, and its TCP twin.
	 * Passive: the peer's TCP address. */
	struct sockaddr_storage peer;
	struct sockaddr_storage dst_tcp;
	size_t evbuf_len;
	uint8_t evbuf[];		/* one EQ entry with cm data */
};

struct tcpf_connreq {
	struct fi_info *info;		/* info->handle is the provider's request */
	struct tcpf_connreq *next, **pprev;
};

struct tcpf_listener {
	struct fid_pep *pep;
	struct fid_eq *eq;
	int fd;
	uint16_t port_offset;
	/* Requests returned by get_connreq() and not yet consumed: rejected
	 * by listener_close(). */
	struct tcpf_connreq *reqs;
	size_t evbuf_len;
	uint8_t evbuf[];
};

struct tcpf_mr {
	struct oti_mr pub;		/* first: the engine sees only this */
	struct fid_mr *mr;
	void *desc;
};

static inline struct tcpf_ep *tcpf_ep(struct oti_ep *ep)
{
	return (struct tcpf_ep *)ep;
}

static inline struct tcpf_listener *tcpf_listener(struct oti_listener *l)
{
	return (struct tcpf_listener *)l;
}

static inline struct tcpf_connreq *tcpf_connreq(struct oti_connreq *r)
{
	return (struct tcpf_connreq *)r;
}

/* ------------------------------------------------------------------------ */

/* libfabric errors are errno values below FI_ERRNO_OFFSET; map the rest. */
static int tcpf_errno(long fi_err)
{
	int e = (int)(fi_err < 0 ? -fi_err : fi_err);

	if (e == 0)
		return 0;
	if (e < FI_ERRNO_OFFSET)
		return -e;
	switch (e) {
	case FI_ETRUNC:
	case FI_ETOOSMALL:
		return -EMSGSIZE;
	case FI_EOPBADSTATE:
		return -ENOTCONN;
	case FI_ENOKEY:
		return -EKEYREJECTED;
	case FI_ECRC:
		return -EBADMSG;
	case FI_EOVERRUN:
		return -EOVERFLOW;
	case FI_EAVAIL:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

static int tcpf_set_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
		return -errno;
	return 0;
}

/*
 * The provider opens its fds (sockets, the socketpair behind each wait
 * object, epoll fds) without O_CLOEXEC.  Every one of them sits in, or is,
 * a wait object's epoll set, which /proc lists: mark those.  The write end
 * of a signal socketpair is in no set; it is the fd after the read end,
 * created in the same call, which the inode numbers confirm.  Best effort:
 * without /proc nothing is marked.
 */
static void tcpf_cloexec_pair_peer(int fd)
{
	struct stat a, b;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (fstat(fd, &a) || !S_ISSOCK(a.st_mode) || fstat(fd + 1, &b) || !S_ISSOCK(b.st_mode))
		return;
	if (b.st_ino != a.st_ino + 1)
		return;
	if (getsockname(fd + 1, (struct sockaddr *)&ss, &len) || ss.ss_family != AF_UNIX ||
	    len > sizeof(sa_family_t))
		return;
	(void)tcpf_set_cloexec(fd + 1);
}

static void tcpf_cloexec_wait_set(int epfd)
{
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	(void)tcpf_set_cloexec(epfd);
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	for (char *line = strstr(buf, "tfd:"); line; line = strstr(line + 4, "tfd:")) {
		int member;

		if (sscanf(line, "tfd: %d", &member) != 1 || member < 0)
			continue;
		(void)tcpf_set_cloexec(member);
		tcpf_cloexec_pair_peer(member);
	}
}

static uint32_t tcpf_addr_format(int family)
{
	return family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
}

static socklen_t tcpf_sa_len(int family)
{
	return family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int tcpf_check_addr(const struct sockaddr *sa, socklen_t len)
{
	if (!sa)
		return -EINVAL;
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (len < tcpf_sa_len(sa->sa_family))
		return -EINVAL;
	return 0;
}

static uint16_t tcpf_get_port(const void *sa)
{
	const struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

static void tcpf_set_port(void *sa, uint16_t port)
{
	struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)sa)->sin_port = htons(port);
}

/* Read once per listener or ep, so that a change of the tunable never
 * makes one object translate its ports two ways. */
static uint16_t tcpf_offset(void)
{
	return (uint16_t)(tun_int(TUN_tcpf_port_offset) & 0xffff);
}

/* Application port -> TCP port; 0 means the port cannot be mapped. */
static uint16_t tcpf_app_to_tcp(uint16_t app, uint16_t off)
{
	return (uint16_t)((app + off) & 0xffff);
}

static uint16_t tcpf_tcp_to_app(uint16_t tcp, uint16_t off)
{
	return (uint16_t)((tcp + 0x10000u - off) & 0xffff);
}

/* A copy of the template info for one ep or listener; addresses are
 * copied in by the caller's pointers (NULL: none). */
static struct fi_info *tcpf_make_info(const struct sockaddr *src, const struct sockaddr *dst)
{
	struct fi_info *info = fi_dupinfo(tcpf.info);
	const struct sockaddr *any = src ? src : dst;

	if (!info)
		return NULL;
	free(info->src_addr);
	free(info->dest_addr);
	info->src_addr = info->dest_addr = NULL;
	info->src_addrlen = info->dest_addrlen = 0;
	if (any)
		info->addr_format = tcpf_addr_format(any->sa_family);
	if (src) {
		info->src_addrlen = tcpf_sa_len(src->sa_family);
		info->src_addr = malloc(info->src_addrlen);
		if (!info->src_addr)
			goto fail;
		memcpy(info->src_addr, src, info->src_addrlen);
	}
	if (dst) {
		info->dest_addrlen = tcpf_sa_len(dst->sa_family);
		info->dest_addr = malloc(info->dest_addrlen);
		if (!info->dest_addr)
			goto fail;
		memcpy(info->dest_addr, dst, info->dest_addrlen);
	}
	return info;
fail:
	fi_freeinfo(info);
	return NULL;
}

static int tcpf_open_eq(struct fid_eq **eq, void *ctx)
{
	struct fi_eq_attr attr = {
		.size = 64,
		.wait_obj = FI_WAIT_FD,
	};

	return tcpf_errno(fi_eq_open(tcpf.fabric, &attr, eq, ctx));
}

static int tcpf_wait_fd(struct fid *fid, int *fd)
{
	int ret = fi_control(fid, FI_GETWAIT, fd);

	if (ret)
		return tcpf_errno(ret);
	tcpf_cloexec_wait_set(*fd);
	return 0;
}

/* ------------------------------------------------------------------------ */

static int tcpf_init_locked(void)
{
	struct fi_info *hints, *info = NULL;
	struct fid_pep *pep;
	size_t cm = 0, optlen = sizeof(cm);
	int ret;

	hints = fi_dupinfo(NULL);	/* fi_allocinfo(), without its symbol */
	if (!hints)
		return -ENOMEM;
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	/* Everything we can honour; the provider keeps what it needs. */
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->mode = FI_CONTEXT;
	if (!hints->fabric_attr->prov_name) {
		fi_freeinfo(hints);
		return -ENOMEM;
	}
	ret = fi_getinfo(TCPF_FI_VERSION, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	if (ret) {
		sdp_dbg(TCPF, "no libfabric tcp provider: %s", fi_strerror(-ret));
		return -ENODEV;
	}
	/* Any interface's info will do: the tcp provider's fabric and domain
	 * are not tied to an interface, the sockets are. */
	tcpf.info = fi_dupinfo(info);
	fi_freeinfo(info);
	if (!tcpf.info)
		return -ENOMEM;

	ret = fi_fabric(tcpf.info->fabric_attr, &tcpf.fabric, NULL);
	if (ret) {
		sdp_err(TCPF, "fi_fabric: %s", fi_strerror(-ret));
		goto err_info;
	}
	ret = fi_domain(tcpf.fabric, tcpf.info, &tcpf.domain, NULL);
	if (ret) {
		sdp_err(TCPF, "fi_domain: %s", fi_strerror(-ret));
		goto err_fabric;
	}

	/* A passive ep without an address has no socket yet: a cheap way to
	 * ask the provider for its cm data size. */
	info = tcpf_make_info(NULL, NULL);
	ret = info ? fi_passive_ep(tcpf.fabric, info, &pep, NULL) : -FI_ENOMEM;
	fi_freeinfo(info);
	if (!ret) {
		ret = fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm, &optlen);
		fi_close(&pep->fid);
	}
	if (ret || cm < 2) {
		sdp_err(TCPF, "cannot learn the cm data size: %s", fi_strerror(-ret));
		ret = -ENODEV;
		goto err_domain;
	}
	tcpf.cm_max = cm;
	tcpf.pdata_max = (cm > OTI_MAX_PRIVATE_DATA ? OTI_MAX_PRIVATE_DATA : cm) - 1;
	tcpf.inject = tcpf.info->tx_attr->inject_size;
	tcpf.tx_depth = tcpf.info->tx_attr->size ? tcpf.info->tx_attr->size : 256;
	tcpf.rx_depth = tcpf.info->rx_attr->size ? tcpf.info->rx_attr->size : 256;
	tcpf.max_msg = tcpf.info->ep_attr->max_msg_size;
	tcpf.virt_addr = tcpf.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	tcpf.prov_key = tcpf.info->domain_attr->mr_mode & FI_MR_PROV_KEY;
	atomic_store(&tcpf.objects, 0);
	tcpf.ready = true;
	sdp_dbg(TCPF, "tcp provider %s: cm data %zu, inject %zu, depth %zu/%zu, mr_mode 0x%x",
		tcpf.info->fabric_attr->name, cm, tcpf.inject, tcpf.tx_depth, tcpf.rx_depth,
		(unsigned)tcpf.info->domain_attr->mr_mode);
	return 0;

err_domain:
	fi_close(&tcpf.domain->fid);
	tcpf.domain = NULL;
err_fabric:
	fi_close(&tcpf.fabric->fid);
	tcpf.fabric = NULL;
err_info:
	fi_freeinfo(tcpf.info);
	tcpf.info = NULL;
	return -ENODEV;
}

static int tcpf_init(void)
{
	int ret = 0;

	pthread_mutex_lock(&tcpf.lock);
	if (!tcpf.ready) {
		struct tcpf_sigstate saved;

		ret = tcpf_fabric_load();
		if (!ret) {
			/* Providers initialise on the first fi_getinfo(). */
			tcpf_signals_save(&saved);
			ret = tcpf_init_locked();
			tcpf_signals_restore(&saved);
		}
	}
	pthread_mutex_unlock(&tcpf.lock);
	return ret;
}

static void tcpf_fini(void)
{
	pthread_mutex_lock(&tcpf.lock);
	if (!tcpf.ready)
		goto out;
	if (atomic_load(&tcpf.objects)) {
		/* Closing the domain under live objects would free memory
		 * they still use; leaking is the lesser harm. */
		sdp_err(TCPF, "fini with %d objects still open; not closing the domain",
			atomic_load(&tcpf.objects));
		goto out;
	}
	fi_close(&tcpf.domain->fid);
	fi_close(&tcpf.fabric->fid);
	fi_freeinfo(tcpf.info);
	tcpf.domain = NULL;
	tcpf.fabric = NULL;
	tcpf.info = NULL;
	tcpf.ready = false;
out:
	pthread_mutex_unlock(&tcpf.lock);
}

static int tcpf_probe(const struct sockaddr *local, const struct sockaddr *remote)
{
	const struct sockaddr *sa[2] = { local, remote };

	for (int i = 0; i < 2; i++)
		if (sa[i] && sa[i]->sa_family != AF_INET && sa[i]->sa_family != AF_INET6)
			return -ENODEV;
	return 0;
}

static void tcpf_query_caps(struct oti_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->flags = OTI_CAP_RDMA_READ | OTI_CAP_RDMA_WRITE | OTI_CAP_SOFTWARE;
	caps->max_private_data = (uint32_t)tcpf.pdata_max;
	caps->max_inline = (uint32_t)tcpf.inject;
	caps->max_send_wr = (uint32_t)tcpf.tx_depth;
	caps->max_recv_wr = (uint32_t)tcpf.rx_depth;
	caps->max_msg_size = tcpf.max_msg > UINT32_MAX ? UINT32_MAX : tcpf.max_msg;
}

/* --- passive side ------------------------------------------------------ */

static void tcpf_reject_handle(struct tcpf_listener *l, fid_t handle, const void *pdata,
			       size_t len)
{
	uint8_t buf[OTI_MAX_PRIVATE_DATA + 1];

	buf[0] = TCPF_REJECT_MARK;
	if (len)
		memcpy(buf + 1, pdata, len);
	int ret = fi_reject(l->pep, handle, buf, len + 1);
	if (ret)
		sdp_warn(TCPF, "fi_reject: %s", fi_strerror(-ret));
}

static void tcpf_listener_free(struct tcpf_listener *l)
{
	/* The pep is bound to the EQ: it goes first. */
	if (l->pep)
		fi_close(&l->pep->fid);
	if (l->eq)
		fi_close(&l->eq->fid);
	free(l);
}

/* One pep on ss, listening; *port gets the TCP port it is bound to. */
static int tcpf_listen_once(const struct sockaddr *ss, struct tcpf_listener **out,
			    uint16_t *port)
{
	struct sockaddr_storage bound;
	size_t blen = sizeof(bound);
	struct tcpf_listener *l;
	struct fi_info *info;
	int ret;

	l = calloc(1, sizeof(*l) + sizeof(struct fi_eq_cm_entry) + tcpf.cm_max);
	if (!l)
		return -ENOMEM;
	l->evbuf_len = sizeof(struct fi_eq_cm_entry) + tcpf.cm_max;
	l->fd = -1;
	info = tcpf_make_info(ss, NULL);
	if (!info) {
		free(l);
		return -ENOMEM;
	}
	ret = tcpf_open_eq(&l->eq, l);
	if (!ret)
		ret = tcpf_errno(fi_passive_ep(tcpf.fabric, info, &l->pep, l));
	fi_freeinfo(info);
	if (!ret)
		ret = tcpf_errno(fi_pep_bind(l->pep, &l->eq->fid, 0));
	if (!ret)
		ret = tcpf_errno(fi_listen(l->pep));
	if (!ret)
		ret = tcpf_wait_fd(&l->eq->fid, &l->fd);
	if (!ret)
		ret = tcpf_errno(fi_getname(&l->pep->fid, &bound, &blen));
	if (ret) {
		tcpf_listener_free(l);
		return ret;
	}
	*port = tcpf_get_port(&bound);
	*out = l;
	return 0;
}

static int tcpf_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog,
		       struct oti_listener **out)
{
	struct tcpf_listener *l, *held = NULL;
	struct sockaddr_storage ss;
	uint16_t app, port, off = tcpf_offset();
	int ret;

	if (!tcpf.ready)
		return -ENODEV;
	ret = tcpf_check_addr(addr, addrlen);
	if (ret)
		return ret;
	memcpy(&ss, addr, tcpf_sa_len(addr->sa_family));
	app = tcpf_get_port(&ss);
	if (app) {
		if (!tcpf_app_to_tcp(app, off))
			return -EADDRNOTAVAIL;
		tcpf_set_port(&ss, tcpf_app_to_tcp(app, off));
	}

	/* The provider's own backlog (4096) applies; ours is not passed on. */
	(void)backlog;
	ret = -EADDRNOTAVAIL;
	for (int attempt = 0; attempt < TCPF_LISTEN_TRIES; attempt++) {
		ret = tcpf_listen_once((struct sockaddr *)&ss, &l, &port);
		if (ret)
			break;
		if (app || tcpf_tcp_to_app(port, off)) {
			sdp_dbg(TCPF, "listening on tcp port %u for app port %u", port,
				tcpf_tcp_to_app(port, off));
			l->port_offset = off;
			atomic_fetch_add(&tcpf.objects, 1);
			*out = (struct oti_listener *)l;
			break;
		}
		/* The OS chose the one TCP port that stands for application
		 * port 0: keep it taken while asking for another. */
		if (held)
			tcpf_listener_free(held);
		held = l;
		ret = -EADDRNOTAVAIL;
	}
	if (held)
		tcpf_listener_free(held);
	return ret;
}

static int tcpf_listener_name(struct oti_listener *ol, struct sockaddr *addr, socklen_t *addrlen)
{
	struct tcpf_listener *l = tcpf_listener(ol);
	struct sockaddr_storage ss;
	size_t len = sizeof(ss);
	int ret;

	ret = tcpf_errno(fi_getname(&l->pep->fid, &ss, &len));
	if (ret)
		return ret;
	tcpf_set_port(&ss, tcpf_tcp_to_app(tcpf_get_port(&ss), l->port_offset));
	/* Truncated to the caller's room, as getsockname(2) does. */
	memcpy(addr, &ss, *addrlen < len ? *addrlen : len);
	*addrlen = (socklen_t)len;
	return 0;
}

static int tcpf_listener_fd(struct oti_listener *ol)
{
	return tcpf_listener(ol)->fd;
}

static int tcpf_trywait(struct fid **fids, int n)
{
	int ret = fi_trywait(tcpf.fabric, fids, n);

	if (ret == -FI_EAGAIN)
		return -EAGAIN;
	return tcpf_errno(ret);
}

static int tcpf_listener_arm(struct oti_listener *ol)
{
	struct fid *fid = &tcpf_listener(ol)->eq->fid;

	return tcpf_trywait(&fid, 1);
}

static int tcpf_get_connreq(struct oti_listener *ol, struct oti_connreq **out, void *pdata,
			    size_t *pdata_len, struct sockaddr_storage *peer)
{
	struct tcpf_listener *l = tcpf_listener(ol);
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)l->evbuf;

	for (;;) {
		uint32_t event;
		ssize_t n = fi_eq_read(l->eq, &event, l->evbuf, l->evbuf_len, 0);

		if (n == -FI_EAGAIN)
			return -EAGAIN;
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };

			if (fi_eq_readerr(l->eq, &err, 0) > 0)
				sdp_dbg(TCPF, "listener error event: %s", fi_strerror(err.err));
			continue;
		}
		if (n < 0)
			return tcpf_errno(n);
		if (event != FI_CONNREQ || (size_t)n < sizeof(*ent) || !ent->info) {
			sdp_dbg(TCPF, "listener: ignoring event %u", event);
			continue;
		}

		struct tcpf_connreq *req = calloc(1, sizeof(*req));
		if (!req) {
			tcpf_reject_handle(l, ent->info->handle, NULL, 0);
			fi_freeinfo(ent->info);
			return -ENOMEM;
		}
		req->info = ent->info;
		size_t len = (size_t)n - sizeof(*ent);
		if (len > OTI_MAX_PRIVATE_DATA)
			len = OTI_MAX_PRIVATE_DATA;
		if (pdata && len)
			memcpy(pdata, ent->data, len);
		if (pdata_len)
			*pdata_len = len;
		if (peer) {
			memset(peer, 0, sizeof(*peer));
			if (req->info->dest_addr && req->info->dest_addrlen <= sizeof(*peer))
				memcpy(peer, req->info->dest_addr, req->info->dest_addrlen);
		}
		req->next = l->reqs;
		req->pprev = &l->reqs;
		if (l->reqs)
			l->reqs->pprev = &req->next;
		l->reqs = req;
		*out = (struct oti_connreq *)req;
		return 0;
	}
}

static void tcpf_connreq_unlink(struct tcpf_connreq *req)
{
	*req->pprev = req->next;
	if (req->next)
		req->next->pprev = req->pprev;
}

static int tcpf_reject(struct oti_listener *ol, struct oti_connreq *oreq, const void *pdata,
		       size_t len)
{
	struct tcpf_listener *l = tcpf_listener(ol);
	struct tcpf_connreq *req = tcpf_connreq(oreq);
	int ret = 0;

	if (len > tcpf.pdata_max) {
		/* Still consumed, as promised, but without the data. */
		len = 0;
		ret = -EINVAL;
	}
	tcpf_reject_handle(l, req->info->handle, pdata, len);
	tcpf_connreq_unlink(req);
	fi_freeinfo(req->info);
	free(req);
	return ret;
}

static void tcpf_listener_close(struct oti_listener *ol)
{
	struct tcpf_listener *l = tcpf_listener(ol);

	if (!l)
		return;
	while (l->reqs)
		tcpf_reject(ol, (struct oti_connreq *)l->reqs, NULL, 0);
	/*
	 * Requests the engine has not seen yet: refuse them too, rather than
	 * leaving the peers to time out.  Reading the EQ also accepts queued
	 * TCP connections, whose request is read on the next pass: hence a
	 * second empty read before stopping.  (A connection that never sends
	 * its request is leaked by the 1.17 provider when the pep closes.)
	 */
	for (int empty = 0; empty < 2;) {
		struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)l->evbuf;
		uint32_t event;
		ssize_t n = fi_eq_read(l->eq, &event, l->evbuf, l->evbuf_len, 0);

		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };

			if (fi_eq_readerr(l->eq, &err, 0) > 0)
				continue;
			break;
		}
		if (n == -FI_EAGAIN) {
			empty++;
			continue;
		}
		if (n < 0)
			break;
		empty = 0;
		if (event == FI_CONNREQ && (size_t)n >= sizeof(*ent) && ent->info) {
			tcpf_reject_handle(l, ent->info->handle, NULL, 0);
			fi_freeinfo(ent->info);
		}
	}
	tcpf_listener_free(l);
	atomic_fetch_sub(&tcpf.objects, 1);
}

/* --- endpoints ---------------------------------------------------------- */

static void tcpf_ep_free(struct tcpf_ep *e)
{
	/* The ep references its CQ and EQ: it must be closed first. */
	if (e->ep)
		fi_close(&e->ep->fid);
	if (e->cq)
		fi_close(&e->cq->fid);
	if (e->eq)
		fi_close(&e->eq->fid);
	if (e->epfd >= 0)
		fdspace_close(e->epfd);
	free(e->ops);
	free(e);
}

static struct tcpf_ep *tcpf_ep_alloc(void)
{
	size_t evlen = sizeof(struct fi_eq_cm_entry) + tcpf.cm_max;
	struct tcpf_ep *e = calloc(1, sizeof(*e) + evlen);
	size_t i;

	if (!e)
		return NULL;
	e->evbuf_len = evlen;
	e->epfd = -1;
	e->ops = calloc(tcpf.tx_depth + tcpf.rx_depth, sizeof(*e->ops));
	if (!e->ops) {
		free(e);
		return NULL;
	}
	for (i = 0; i < tcpf.tx_depth; i++) {
		e->ops[i].next = e->tx_free;
		e->tx_free = &e->ops[i];
	}
	for (; i < tcpf.tx_depth + tcpf.rx_depth; i++) {
		e->ops[i].next = e->rx_free;
		e->rx_free = &e->ops[i];
	}
	e->tx_flush.tail = &e->tx_flush.head;
	e->rx_flush.tail = &e->rx_flush.head;
	return e;
}

/* The CQ, EQ and epoll fd of an ep; e->ep is created by the caller in
 * between tcpf_ep_queues() and tcpf_ep_finish(). */
static int tcpf_ep_queues(struct tcpf_ep *e)
{
	struct fi_cq_attr cq_attr = {
		.size = tcpf.tx_depth + tcpf.rx_depth,
		.format = FI_CQ_FORMAT_MSG,
		.wait_obj = FI_WAIT_FD,
	};
	int ret;

	ret = tcpf_open_eq(&e->eq, e);
	if (ret)
		return ret;
	return tcpf_errno(fi_cq_open(tcpf.domain, &cq_attr, &e->cq, e));
}

static int tcpf_ep_finish(struct tcpf_ep *e)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fds[2], ret;

	ret = tcpf_errno(fi_ep_bind(e->ep, &e->eq->fid, 0));
	if (!ret)
		ret = tcpf_errno(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
	if (!ret)
		ret = tcpf_errno(fi_enable(e->ep));
	if (!ret)
		ret = tcpf_wait_fd(&e->cq->fid, &fds[0]);
	if (!ret)
		ret = tcpf_wait_fd(&e->eq->fid, &fds[1]);
	if (ret)
		return ret;
	e->eq_wfd = fds[1];
	e->epfd = fdspace_take(epoll_create1(EPOLL_CLOEXEC));
	if (e->epfd < 0)
		return e->epfd;
	for (int i = 0; i < 2; i++) {
		ev.data.fd = fds[i];
		if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0)
			return -errno;
	}
	return 0;
}

/* An event of our own, queued behind whatever the provider has posted. */
static int tcpf_post_event(struct tcpf_ep *e, uint32_t event, int status)
{
	struct fi_eq_entry ent = {
		.fid = &e->ep->fid,
		.context = e,
		.data = (uint64_t)(int64_t)status,
	};
	ssize_t n = fi_eq_write(e->eq, event, &ent, sizeof(ent), 0);

	return n == (ssize_t)sizeof(ent) ? 0 : (n < 0 ? tcpf_errno(n) : -EIO);
}

static int tcpf_ep_accept_open(struct oti_listener *ol, struct oti_connreq *oreq,
			       struct oti_ep **out)
{
	struct tcpf_listener *l = tcpf_listener(ol);
	struct tcpf_connreq *req = tcpf_connreq(oreq);
	struct fi_info *info = req->info;
	struct tcpf_ep *e;
	int ret;

	tcpf_connreq_unlink(req);
	free(req);
	e = tcpf_ep_alloc();
	if (!e) {
		ret = -ENOMEM;
		goto reject;
	}
	e->state = TCPF_ACCEPT_READY;
	e->port_offset = l->port_offset;
	if (info->dest_addr && info->dest_addrlen <= sizeof(e->peer))
		memcpy(&e->peer, info->dest_addr, info->dest_addrlen);
	ret = tcpf_ep_queues(e);
	if (ret)
		goto reject;
	ret = tcpf_errno(fi_endpoint(tcpf.domain, info, &e->ep, e));
	if (ret)
		goto reject;
	ret = tcpf_ep_finish(e);
	if (ret)
		goto reject;
	fi_freeinfo(info);
	atomic_fetch_add(&tcpf.objects, 1);
	*out = (struct oti_ep *)e;
	return 0;

reject:
	/* Once an ep exists it owns the socket, and the reject only frees
	 * the provider's request; close the ep first so the peer sees the
	 * connection go away. */
	if (e)
		tcpf_ep_free(e);
	tcpf_reject_handle(l, info->handle, NULL, 0);
	fi_freeinfo(info);
	return ret;
}

static int tcpf_accept(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	int ret;

	if (e->state != TCPF_ACCEPT_READY)
		return -EINVAL;
	if (len > tcpf.pdata_max || (len && !pdata))
		return -EINVAL;
	ret = tcpf_errno(fi_accept(e->ep, pdata, len));
	if (!ret) {
		e->state = TCPF_ACCEPTING;
		/* The connection's socket has just joined the EQ's set. */
		tcpf_cloexec_wait_set(e->eq_wfd);
	}
	return ret;
}

/* The source address the kernel would use towards dst, port 0: a
 * connected UDP socket asks the routing table without sending anything. */
static int tcpf_route_src(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	int fd, ret = 0;

	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, dst, tcpf_sa_len(dst->sa_family)) < 0 ||
	    getsockname(fd, (struct sockaddr *)src, &len) < 0)
		ret = -errno;
	close(fd);
	if (!ret)
		tcpf_set_port(src, 0);
	return ret;
}

static bool tcpf_unreachable_errno(int err)
{
	switch (err) {
	case -ECONNREFUSED:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EHOSTDOWN:
	case -ENETDOWN:
	case -EADDRNOTAVAIL:
		return true;
	default:
		return false;
	}
}

static int tcpf_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
			socklen_t srclen, struct oti_ep **out)
{
	struct sockaddr_storage route_src;
	const struct sockaddr *bind_src = src;
	struct fi_info *info;
	struct tcpf_ep *e;
	uint16_t app, off = tcpf_offset();
	int route_err = 0, ret;

	if (!tcpf.ready)
		return -ENODEV;
	ret = tcpf_check_addr(dst, dstlen);
	if (ret)
		return ret;
	if (src) {
		ret = tcpf_check_addr(src, srclen);
		if (ret)
			return ret;
		if (src->sa_family != dst->sa_family)
			return -EAFNOSUPPORT;
	}
	app = tcpf_get_port(dst);
	if (!app || !tcpf_app_to_tcp(app, off))
		return -EADDRNOTAVAIL;

	e = tcpf_ep_alloc();
	if (!e)
		return -ENOMEM;
	e->active = true;
	e->state = TCPF_IDLE;
	memcpy(&e->peer, dst, tcpf_sa_len(dst->sa_family));
	memcpy(&e->dst_tcp, dst, tcpf_sa_len(dst->sa_family));
	e->port_offset = off;
	tcpf_set_port(&e->dst_tcp, tcpf_app_to_tcp(app, off));

	/* Binding the routed source address up front makes ep_names() give
	 * the real local IP as soon as RESOLVED is seen, as address
	 * resolution does on RDMA; the port is chosen by connect(). */
	if (!src) {
		route_err = tcpf_route_src((struct sockaddr *)&e->dst_tcp, &route_src);
		if (!route_err)
			bind_src = (struct sockaddr *)&route_src;
	}
	info = tcpf_make_info(bind_src, (struct sockaddr *)&e->dst_tcp);
	if (!info) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = tcpf_ep_queues(e);
	if (!ret)
		ret = tcpf_errno(fi_endpoint(tcpf.domain, info, &e->ep, e));
	fi_freeinfo(info);
	if (!ret)
		ret = tcpf_ep_finish(e);
	if (ret)
		goto fail;
	if (route_err && tcpf_unreachable_errno(route_err)) {
		ret = tcpf_post_event(e, TCPF_EV_UNREACHABLE, route_err);
	} else if (route_err) {
		ret = route_err;
	} else {
		ret = tcpf_post_event(e, TCPF_EV_RESOLVED, 0);
	}
	if (ret)
		goto fail;
	atomic_fetch_add(&tcpf.objects, 1);
	*out = (struct oti_ep *)e;
	return 0;
fail:
	tcpf_ep_free(e);
	return ret;
}

static int tcpf_connect(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	int ret;

	if (e->state != TCPF_IDLE)
		return -EINVAL;
	if (len > tcpf.pdata_max || (len && !pdata))
		return -EINVAL;
	ret = tcpf_errno(fi_connect(e->ep, &e->dst_tcp, pdata, len));
	if (ret && tcpf_unreachable_errno(ret)) {
		/* connect(2) failed on the spot (no route...): the contract
		 * reports that as an event, like a late failure. */
		ret = tcpf_post_event(e, TCPF_EV_UNREACHABLE, ret);
	}
	if (!ret) {
		e->state = TCPF_CONNECTING;
		tcpf_cloexec_wait_set(e->eq_wfd);
	}
	return ret;
}

static int tcpf_ep_names(struct oti_ep *oep, struct sockaddr_storage *local,
			 struct sockaddr_storage *peer)
{
	struct tcpf_ep *e = tcpf_ep(oep);

	if (local) {
		size_t len = sizeof(*local);
		int ret = tcpf_errno(fi_getname(&e->ep->fid, local, &len));

		if (ret)
			return ret;
		if (!e->active)
			tcpf_set_port(local, tcpf_tcp_to_app(tcpf_get_port(local), e->port_offset));
	}
	if (peer)
		memcpy(peer, &e->peer, sizeof(*peer));
	return 0;
}

static int tcpf_ep_fd(struct oti_ep *oep)
{
	return tcpf_ep(oep)->epfd;
}

/* Errors that mean the connection itself went away. */
static bool tcpf_conn_lost_errno(int err)
{
	switch (err) {
	case -ECONNRESET:
	case -ECONNABORTED:
	case -EPIPE:
	case -ENOTCONN:
	case -ESHUTDOWN:
	case -ETIMEDOUT:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ENETRESET:
	case -EIO:
		return true;
	default:
		return false;
	}
}

static void tcpf_set_event(struct oti_event *ev, enum oti_event_type type, int status,
			   const void *pdata, size_t len)
{
	ev->type = type;
	ev->status = status;
	if (len > OTI_MAX_PRIVATE_DATA)
		len = OTI_MAX_PRIVATE_DATA;
	ev->private_data_len = len;
	if (len)
		memcpy(ev->private_data, pdata, len);
}

/* Translate one provider error entry; false if it is to be ignored. */
static bool tcpf_error_event(struct tcpf_ep *e, const struct fi_eq_err_entry *err,
			     struct oti_event *ev)
{
	int status = tcpf_errno(err->err ? err->err : FI_EIO);
	const uint8_t *data = err->err_data;
	size_t len = err->err_data ? err->err_data_size : 0;

	switch (e->state) {
	case TCPF_IDLE:
	case TCPF_CONNECTING:
		if (status == -ECONNREFUSED && len >= 1 && data[0] == TCPF_REJECT_MARK)
			tcpf_set_event(ev, OTI_EV_REJECTED, -ECONNREFUSED, data + 1, len - 1);
		else
			tcpf_set_event(ev, OTI_EV_UNREACHABLE, status, NULL, 0);
		break;
	case TCPF_ACCEPT_READY:
	case TCPF_ACCEPTING:
	case TCPF_CONNECTED:
		if (tcpf_conn_lost_errno(status) || status == -ECONNREFUSED)
			tcpf_set_event(ev, OTI_EV_DISCONNECTED, status, NULL, 0);
		else
			tcpf_set_event(ev, OTI_EV_ERROR, status, NULL, 0);
		break;
	case TCPF_DOWN:
		return false;
	}
	e->state = TCPF_DOWN;
	return true;
}

/* Translate one provider event; false if it is to be ignored. */
static bool tcpf_provider_event(struct tcpf_ep *e, uint32_t event, size_t n, struct oti_event *ev)
{
	const struct fi_eq_entry *ent = (const struct fi_eq_entry *)e->evbuf;
	const struct fi_eq_cm_entry *cm = (const struct fi_eq_cm_entry *)e->evbuf;

	if (e->state == TCPF_DOWN)
		return false;
	switch (event) {
	case TCPF_EV_RESOLVED:
		tcpf_set_event(ev, OTI_EV_RESOLVED, 0, NULL, 0);
		return true;
	case TCPF_EV_UNREACHABLE:
		tcpf_set_event(ev, OTI_EV_UNREACHABLE,
			       n >= sizeof(*ent) ? (int)(int64_t)ent->data : -EIO, NULL, 0);
		e->state = TCPF_DOWN;
		return true;
	case FI_CONNECTED:
		if (e->state != TCPF_CONNECTING && e->state != TCPF_ACCEPTING)
			return false;
		if (n > sizeof(*cm) && e->active)
			tcpf_set_event(ev, OTI_EV_ESTABLISHED, 0, cm->data, n - sizeof(*cm));
		else
			tcpf_set_event(ev, OTI_EV_ESTABLISHED, 0, NULL, 0);
		e->state = TCPF_CONNECTED;
		return true;
	case FI_SHUTDOWN:
		tcpf_set_event(ev, OTI_EV_DISCONNECTED, 0, NULL, 0);
		e->state = TCPF_DOWN;
		return true;
	default:
		sdp_dbg(TCPF, "ep %p: ignoring event %u", (void *)e, event);
		return false;
	}
}

/* Completions poll_cq() can give without the provider: flushed work,
 * or work stranded on a dead connection (see tcpf_poll_cq). */
static bool tcpf_soft_pending(const struct tcpf_ep *e)
{
	if (e->rx_flush.head && !e->prov_rx)
		return true;
	if (e->tx_flush.head && !e->prov_tx)
		return true;
	return (e->state == TCPF_DOWN || e->shut) && (e->prov_rx || e->prov_tx);
}

/* Are completions waiting?  A zero-count read of the CQ takes none. */
static bool tcpf_cq_pending(struct tcpf_ep *e)
{
	ssize_t n;

	if (tcpf_soft_pending(e) || e->rx_flush.head || e->tx_flush.head)
		return true;
	n = fi_cq_read(e->cq, NULL, 0);
	return n == 0 || n == -FI_EAVAIL;
}

static int tcpf_ep_arm(struct oti_ep *oep)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	struct fid *fids[2] = { &e->cq->fid, &e->eq->fid };

	/* Work of our own (a held event, flushed completions) shows on no
	 * fd: the caller must come back for it. */
	if (e->held || tcpf_soft_pending(e))
		return -EAGAIN;
	return tcpf_trywait(fids, 2);
}

/*
 * The provider learns of a closed connection while reading the socket,
 * after it has queued the completions of the messages before the close; so
 * when the event is read they may still wait in the CQ.  The contract says
 * no completion carries data after DISCONNECTED: the event waits for them.
 */
static bool tcpf_hold(struct tcpf_ep *e, const struct oti_event *ev)
{
	if (!tcpf_cq_pending(e))
		return false;
	e->held_ev = *ev;
	e->held = true;
	return true;
}

static int tcpf_get_event(struct oti_ep *oep, struct oti_event *ev)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	bool progressed = false;

	if (e->held) {
		if (tcpf_cq_pending(e))
			return -EAGAIN;
		*ev = e->held_ev;
		e->held = false;
		return 0;
	}
	for (;;) {
		enum tcpf_state was = e->state;
		uint32_t event = 0;
		ssize_t n = fi_eq_read(e->eq, &event, e->evbuf, e->evbuf_len, 0);
		bool got;

		if (n == -FI_EAGAIN) {
			if (progressed)
				return -EAGAIN;
			/* The provider notices a peer's close while reading
			 * the socket in the data path: give it that chance,
			 * without taking completions, in case the caller only
			 * asks for events. */
			(void)fi_cq_read(e->cq, NULL, 0);
			progressed = true;
			continue;
		}
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			ssize_t m = fi_eq_readerr(e->eq, &err, 0);

			if (m == -FI_EAGAIN)
				return -EAGAIN;
			if (m < 0)
				return tcpf_errno(m);
			got = tcpf_error_event(e, &err, ev);
		} else if (n < 0) {
			return tcpf_errno(n);
		} else {
			got = tcpf_provider_event(e, event, (size_t)n, ev);
		}
		if (!got)
			continue;
		/* Only an established connection has data completions. */
		if (was == TCPF_CONNECTED && e->state == TCPF_DOWN && tcpf_hold(e, ev))
			return -EAGAIN;
		return 0;
	}
}

static struct tcpf_op *tcpf_take(struct tcpf_ep *e, struct tcpf_op **pool, uint64_t ctx,
				 enum oti_wc_op kind)
{
	struct tcpf_op *op = *pool;

	if (!op)
		return NULL;
	*pool = op->next;
	op->next = NULL;
	op->ctx = ctx;
	op->op = kind;
	op->seq = e->seq++;
	return op;
}

static struct tcpf_op **tcpf_pool(struct tcpf_ep *e, const struct tcpf_op *op)
{
	return op->op == OTI_WC_RECV ? &e->rx_free : &e->tx_free;
}

static void tcpf_give(struct tcpf_ep *e, struct tcpf_op *op)
{
	struct tcpf_op **pool = tcpf_pool(e, op);

	op->where = TCPF_OP_FREE;
	op->next = *pool;
	*pool = op;
}

static void tcpf_fifo_push(struct tcpf_fifo *f, struct tcpf_op *op)
{
	op->next = NULL;
	*f->tail = op;
	f->tail = &op->next;
}

static struct tcpf_op *tcpf_fifo_pop(struct tcpf_fifo *f)
{
	struct tcpf_op *op = f->head;

	f->head = op->next;
	if (!f->head)
		f->tail = &f->head;
	return op;
}

/* Handed to the provider. */
static void tcpf_to_prov(struct tcpf_ep *e, struct tcpf_op *op)
{
	op->where = TCPF_OP_PROV;
	if (op->op == OTI_WC_RECV)
		e->prov_rx++;
	else
		e->prov_tx++;
}

/*
 * Work posted once the connection is going or gone completes with
 * -ECANCELED, as on a verbs QP in the error state, rather than failing:
 * the engine may not know yet that the connection is gone.
 */
static void tcpf_flush_post(struct tcpf_ep *e, struct tcpf_op *op)
{
	op->where = TCPF_OP_FLUSH;
	tcpf_fifo_push(op->op == OTI_WC_RECV ? &e->rx_flush : &e->tx_flush, op);
}

/* One completion: the wc from the op's record, and the record goes back. */
static void tcpf_reap(struct tcpf_ep *e, struct tcpf_op *op, struct oti_wc *wc, int status,
		      uint32_t len)
{
	wc->ctx = op->ctx;
	wc->op = op->op;
	wc->status = status;
	wc->len = op->op == OTI_WC_RECV && !status ? len : 0;
	if (op->where == TCPF_OP_PROV) {
		if (op->op == OTI_WC_RECV)
			e->prov_rx--;
		else
			e->prov_tx--;
	}
	tcpf_give(e, op);
}

static int tcpf_seq_cmp(const void *a, const void *b)
{
	const struct tcpf_op *x = *(struct tcpf_op *const *)a;
	const struct tcpf_op *y = *(struct tcpf_op *const *)b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * The connection is gone and the provider's CQ is empty: the provider
 * flushed what it held when it went down, so whatever it still has was
 * posted after that (1.17 accepts a receive on a dead ep and never
 * completes it).  Those are flushed here, in posting order.
 */
static void tcpf_sweep(struct tcpf_ep *e)
{
	size_t n = tcpf.tx_depth + tcpf.rx_depth, k = 0;
	struct tcpf_op **v;

	if (!e->prov_rx && !e->prov_tx)
		return;
	v = calloc(e->prov_rx + e->prov_tx, sizeof(*v));
	if (!v)
		return;		/* tried again on the next poll */
	for (size_t i = 0; i < n && k < e->prov_rx + e->prov_tx; i++)
		if (e->ops[i].where == TCPF_OP_PROV)
			v[k++] = &e->ops[i];
	qsort(v, k, sizeof(*v), tcpf_seq_cmp);
	/* Flushed ones behind them go after them. */
	struct tcpf_fifo rx = e->rx_flush, tx = e->tx_flush;
	e->rx_flush.head = e->tx_flush.head = NULL;
	e->rx_flush.tail = &e->rx_flush.head;
	e->tx_flush.tail = &e->tx_flush.head;
	for (size_t i = 0; i < k; i++)
		tcpf_flush_post(e, v[i]);
	if (rx.head) {
		*e->rx_flush.tail = rx.head;
		e->rx_flush.tail = rx.tail;
	}
	if (tx.head) {
		*e->tx_flush.tail = tx.head;
		e->tx_flush.tail = tx.tail;
	}
	e->prov_rx = e->prov_tx = 0;
	free(v);
}

/* fi_shutdown() cancels what the provider has not yet written to the
 * socket, so it waits until every send and RDMA op has completed. */
static int tcpf_do_shutdown(struct tcpf_ep *e)
{
	e->shutdown_pending = false;
	e->shut = true;
	return tcpf_errno(fi_shutdown(e->ep, 0));
}

static int tcpf_poll_cq(struct oti_ep *oep, struct oti_wc *wc, int n)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	struct fi_cq_msg_entry ent[TCPF_CQ_BATCH];
	bool drained = false;
	int got = 0;

	while (got < n) {
		int want = n - got < TCPF_CQ_BATCH ? n - got : TCPF_CQ_BATCH;
		ssize_t r = fi_cq_read(e->cq, ent, (size_t)want);

		if (r == -FI_EAGAIN) {
			drained = true;
			break;
		}
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			ssize_t m = fi_cq_readerr(e->cq, &err, 0);

			if (m == -FI_EAGAIN)
				break;
			if (m < 0) {
				if (!got)
					return tcpf_errno(m);
				break;
			}
			if (!err.op_context)
				continue;
			int status = tcpf_errno(err.err ? err.err : FI_EIO);
			/* The provider fails work on a connection it has
			 * already closed with ENOTCONN: that is a flush. */
			if (status == -ENOTCONN)
				status = -ECANCELED;
			else if (status == -EAGAIN)
				status = -EIO;
			tcpf_reap(e, err.op_context, &wc[got++], status, 0);
			continue;
		}
		if (r < 0) {
			if (!got)
				return tcpf_errno(r);
			break;
		}
		for (ssize_t i = 0; i < r; i++)
			tcpf_reap(e, ent[i].op_context, &wc[got++], 0, (uint32_t)ent[i].len);
	}
	if (drained && (e->state == TCPF_DOWN || e->shut))
		tcpf_sweep(e);
	while (got < n) {
		struct tcpf_fifo *f = NULL;

		/* After the provider's own, to keep each queue in order. */
		if (e->rx_flush.head && !e->prov_rx)
			f = &e->rx_flush;
		else if (e->tx_flush.head && !e->prov_tx)
			f = &e->tx_flush;
		if (!f)
			break;
		tcpf_reap(e, tcpf_fifo_pop(f), &wc[got++], -ECANCELED, 0);
	}
	if (e->shutdown_pending && !e->prov_tx) {
		int ret = tcpf_do_shutdown(e);

		if (ret)
			sdp_warn(TCPF, "deferred fi_shutdown: %d", ret);
	}
	return got;
}

/* --- data ---------------------------------------------------------------- */

static uint32_t tcpf_random_key(void)
{
	uint32_t key;

	if (getrandom(&key, sizeof(key), GRND_NONBLOCK) != sizeof(key)) {
		static atomic_uint fallback = 0x5d9e1000u;

		key = atomic_fetch_add(&fallback, 0x9e3779b1u);
	}
	return key;
}

static int tcpf_mr_reg(struct oti_ep *oep, void *addr, size_t len, unsigned access,
		       struct oti_mr **out)
{
	uint64_t fi_access = FI_SEND | FI_WRITE;
	struct tcpf_mr *m;
	int ret = -EIO;

	if (!addr || !len)
		return -EINVAL;
	if (access & OTI_ACCESS_LOCAL_WRITE)
		fi_access |= FI_RECV | FI_READ;
	if (access & OTI_ACCESS_REMOTE_READ)
		fi_access |= FI_REMOTE_READ;
	if (access & OTI_ACCESS_REMOTE_WRITE)
		fi_access |= FI_REMOTE_WRITE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;

	/* Random keys: a peer holding a stale key of a freed registration
	 * must not reach the next one by luck. */
	for (int i = 0; i < TCPF_KEY_TRIES; i++) {
		uint64_t key = tcpf.prov_key ? 0 : tcpf_random_key();

		ret = fi_mr_reg(tcpf.domain, addr, len, fi_access, 0, key, 0, &m->mr, m);
		if (!ret)
			break;
		/* A key already in use is -FI_ENOKEY (checked on 1.17). */
		if (tcpf.prov_key || ret != -FI_ENOKEY)
			break;
	}
	if (ret) {
		free(m);
		return tcpf_errno(ret);
	}
	uint64_t key = fi_mr_key(m->mr);
	if (key > UINT32_MAX) {
		/* The SDP wire carries 32-bit keys. */
		fi_close(&m->mr->fid);
		free(m);
		return -EOVERFLOW;
	}
	m->desc = fi_mr_desc(m->mr);
	m->pub.addr = addr;
	m->pub.len = len;
	m->pub.rkey = (uint32_t)key;
	m->pub.raddr_base = tcpf.virt_addr ? (uint64_t)(uintptr_t)addr : 0;
	m->pub.access = access;
	atomic_fetch_add(&tcpf.objects, 1);
	*out = &m->pub;
	return 0;
}

static int tcpf_mr_dereg(struct oti_mr *pub)
{
	struct tcpf_mr *m = (struct tcpf_mr *)pub;
	int ret;

	if (!m)
		return -EINVAL;
	ret = tcpf_errno(fi_close(&m->mr->fid));
	free(m);
	atomic_fetch_sub(&tcpf.objects, 1);
	return ret;
}

static void *tcpf_desc(const struct oti_sge *sge)
{
	return sge->mr ? ((struct tcpf_mr *)sge->mr)->desc : NULL;
}

/* 1: the work is to be flushed (the connection is going or gone),
 * 0: it goes to the provider, or -ENOTCONN: not connected yet. */
static int tcpf_can_post(const struct tcpf_ep *e, bool recv)
{
	if (e->state == TCPF_DOWN || e->shutdown_pending || e->shut)
		return 1;
	if (!recv && e->state != TCPF_CONNECTED)
		return -ENOTCONN;
	return 0;
}

static int tcpf_post_recv(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	struct tcpf_op *op;
	int ret = tcpf_can_post(e, true);

	if (ret < 0)
		return ret;
	op = tcpf_take(e, &e->rx_free, ctx, OTI_WC_RECV);
	if (!op)
		return -EAGAIN;
	if (ret) {
		tcpf_flush_post(e, op);
		return 0;
	}
	ret = tcpf_errno(fi_recv(e->ep, sge->addr, sge->len, tcpf_desc(sge), 0, op));
	if (ret)
		tcpf_give(e, op);
	else
		tcpf_to_prov(e, op);
	return ret;
}

static int tcpf_post_send(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx,
			  unsigned flags)
{
	struct tcpf_ep *e = tcpf_ep(oep);
	struct tcpf_op *op;
	int ret = tcpf_can_post(e, false);

	if (ret < 0)
		return ret;
	op = tcpf_take(e, &e->tx_free, ctx, OTI_WC_SEND);
	if (!op)
		return -EAGAIN;
	if (ret) {
		tcpf_flush_post(e, op);
		return 0;
	}
	if ((flags & OTI_SEND_INLINE) && sge->len <= tcpf.inject) {
		/* Copied by the provider, so the buffer is free at once; the
		 * completion is still asked for, the engine counts on it. */
		struct iovec iov = { .iov_base = sge->addr, .iov_len = sge->len };
		void *desc = tcpf_desc(sge);
		struct fi_msg msg = {
			.msg_iov = &iov,
			.desc = &desc,
			.iov_count = 1,
			.context = op,
		};

		ret = tcpf_errno(fi_sendmsg(e->ep, &msg, FI_INJECT | FI_COMPLETION));
	} else {
		ret = tcpf_errno(fi_send(e->ep, sge->addr, sge->len, tcpf_desc(sge), 0, op));
	}
	if (ret)
		tcpf_give(e, op);
	else
		tcpf_to_prov(e, op);
	return ret;
}

static int tcpf_rdma(struct tcpf_ep *e, const struct oti_sge *local, uint64_t raddr,
		     uint32_t rkey, uint64_t ctx, enum oti_wc_op kind)
{
	struct tcpf_op *op;
	int ret = tcpf_can_post(e, false);

	if (ret < 0)
		return ret;
	op = tcpf_take(e, &e->tx_free, ctx, kind);
	if (!op)
		return -EAGAIN;
	if (ret) {
		tcpf_flush_post(e, op);
		return 0;
	}
	if (kind == OTI_WC_RDMA_READ)
		ret = tcpf_errno(fi_read(e->ep, local->addr, local->len, tcpf_desc(local), 0,
					 raddr, rkey, op));
	else
		ret = tcpf_errno(fi_write(e->ep, local->addr, local->len, tcpf_desc(local), 0,
					  raddr, rkey, op));
	if (ret)
		tcpf_give(e, op);
	else
		tcpf_to_prov(e, op);
	return ret;
}

static int tcpf_rdma_read(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
			  uint32_t rkey, uint64_t ctx)
{
	return tcpf_rdma(tcpf_ep(oep), local, raddr, rkey, ctx, OTI_WC_RDMA_READ);
}

static int tcpf_rdma_write(struct oti_ep *oep, const struct oti_sge *local, uint64_t raddr,
			   uint32_t rkey, uint64_t ctx)
{
	return tcpf_rdma(tcpf_ep(oep), local, raddr, rkey, ctx, OTI_WC_RDMA_WRITE);
}

/* --- teardown ------------------------------------------------------------- */

static int tcpf_disconnect(struct oti_ep *oep)
{
	struct tcpf_ep *e = tcpf_ep(oep);

	switch (e->state) {
	case TCPF_IDLE:
	case TCPF_ACCEPT_READY:
		return -ENOTCONN;
	case TCPF_DOWN:
		return 0;
	default:
		break;
	}
	if (e->shutdown_pending || e->shut)
		return 0;
	if (e->prov_tx) {
		e->shutdown_pending = true;
		return 0;
	}
	return tcpf_do_shutdown(e);
}

static void tcpf_ep_close(struct oti_ep *oep)
{
	if (!oep)
		return;
	tcpf_ep_free(tcpf_ep(oep));
	atomic_fetch_sub(&tcpf.objects, 1);
}

/*
 * One lock around every entry that enters the provider.  Its progress is
 * shared by the whole domain (reading one endpoint's CQ drives the others),
 * and despite FI_THREAD_SAFE the 1.17 provider was seen to crash inside
 * fi_cq_read() while another thread was closing a different endpoint.  The
 * engine already serialises the calls on one endpoint; this serialises
 * the calls on all of them.  Recursive, in case an entry calls another;
 * re-made in a fork child (a parent thread may have held it).
 */
static pthread_mutex_t tcpf_big_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void tcpf_big_lock_atfork_child(void)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&tcpf_big_lock, &a);
	pthread_mutexattr_destroy(&a);
}

__attribute__((constructor)) static void tcpf_big_lock_register(void)
{
	pthread_atfork(NULL, NULL, tcpf_big_lock_atfork_child);
}

#define TCPF_LOCKED(ret, name, params, args)              \
	static ret name##_locked params                   \
	{                                                 \
		pthread_mutex_lock(&tcpf_big_lock);       \
		ret r_ = name args;                       \
		pthread_mutex_unlock(&tcpf_big_lock);     \
		return r_;                                \
	}
#define TCPF_LOCKED_VOID(name, params, args)              \
	static void name##_locked params                  \
	{                                                 \
		pthread_mutex_lock(&tcpf_big_lock);       \
		name args;                                \
		pthread_mutex_unlock(&tcpf_big_lock);     \
	}

TCPF_LOCKED(int, tcpf_listen, (const struct sockaddr *a, socklen_t l, int b, struct oti_listener **o),
	    (a, l, b, o))
TCPF_LOCKED(int, tcpf_listener_arm, (struct oti_listener *l), (l))
TCPF_LOCKED(int, tcpf_get_connreq, (struct oti_listener *l, struct oti_connreq **r, void *p,
				    size_t *pl, struct sockaddr_storage *peer),
	    (l, r, p, pl, peer))
TCPF_LOCKED(int, tcpf_reject, (struct oti_listener *l, struct oti_connreq *r, const void *p,
			       size_t len),
	    (l, r, p, len))
TCPF_LOCKED_VOID(tcpf_listener_close, (struct oti_listener *l), (l))
TCPF_LOCKED(int, tcpf_ep_accept_open, (struct oti_listener *l, struct oti_connreq *r,
				       struct oti_ep **o),
	    (l, r, o))
TCPF_LOCKED(int, tcpf_accept, (struct oti_ep *e, const void *p, size_t len), (e, p, len))
TCPF_LOCKED(int, tcpf_ep_open, (const struct sockaddr *d, socklen_t dl, const struct sockaddr *s,
				socklen_t sl, struct oti_ep **o),
	    (d, dl, s, sl, o))
TCPF_LOCKED(int, tcpf_connect, (struct oti_ep *e, const void *p, size_t len), (e, p, len))
TCPF_LOCKED(int, tcpf_ep_arm, (struct oti_ep *e), (e))
TCPF_LOCKED(int, tcpf_get_event, (struct oti_ep *e, struct oti_event *ev), (e, ev))
TCPF_LOCKED(int, tcpf_poll_cq, (struct oti_ep *e, struct oti_wc *wc, int n), (e, wc, n))
TCPF_LOCKED(int, tcpf_mr_reg, (struct oti_ep *e, void *a, size_t len, unsigned acc,
			       struct oti_mr **o),
	    (e, a, len, acc, o))
TCPF_LOCKED(int, tcpf_mr_dereg, (struct oti_mr *m), (m))
TCPF_LOCKED(int, tcpf_post_recv, (struct oti_ep *e, const struct oti_sge *sge, uint64_t ctx),
	    (e, sge, ctx))
TCPF_LOCKED(int, tcpf_post_send, (struct oti_ep *e, const struct oti_sge *sge, uint64_t ctx,
				  unsigned fl),
	    (e, sge, ctx, fl))
TCPF_LOCKED(int, tcpf_rdma_read, (struct oti_ep *e, const struct oti_sge *l, uint64_t ra,
				  uint32_t rk, uint64_t ctx),
	    (e, l, ra, rk, ctx))
TCPF_LOCKED(int, tcpf_rdma_write, (struct oti_ep *e, const struct oti_sge *l, uint64_t ra,
				   uint32_t rk, uint64_t ctx),
	    (e, l, ra, rk, ctx))
TCPF_LOCKED(int, tcpf_disconnect, (struct oti_ep *e), (e))
TCPF_LOCKED_VOID(tcpf_ep_close, (struct oti_ep *e), (e))

const struct oti_ops tcpf_transport_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "tcp-fallback",
	.init = tcpf_init,
	.fini = tcpf_fini,
	.probe = tcpf_probe,
	.query_caps = tcpf_query_caps,
	.listen = tcpf_listen_locked,
	.listener_name = tcpf_listener_name,
	.listener_fd = tcpf_listener_fd,
	.listener_arm = tcpf_listener_arm_locked,
	.get_connreq = tcpf_get_connreq_locked,
	.reject = tcpf_reject_locked,
	.listener_close = tcpf_listener_close_locked,
	.ep_accept_open = tcpf_ep_accept_open_locked,
	.accept = tcpf_accept_locked,
	.ep_open = tcpf_ep_open_locked,
	.connect = tcpf_connect_locked,
	.ep_names = tcpf_ep_names,
	.ep_fd = tcpf_ep_fd,
	.ep_arm = tcpf_ep_arm_locked,
	.get_event = tcpf_get_event_locked,
	.poll_cq = tcpf_poll_cq_locked,
	.mr_reg = tcpf_mr_reg_locked,
	.mr_dereg = tcpf_mr_dereg_locked,
	.post_recv = tcpf_post_recv_locked,
	.post_send = tcpf_post_send_locked,
	.rdma_read = tcpf_rdma_read_locked,
	.rdma_write = tcpf_rdma_write_locked,
	.disconnect = tcpf_disconnect_locked,
	.ep_close = tcpf_ep_close_locked,
};
