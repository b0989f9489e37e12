/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The Offload Transport Interface (OTI): the one boundary between the SDP
 * engine (sdp/) and the transports that move its messages (the backends under transports/).
 *
 * A backend fills in a struct oti_ops and is registered, in priority order,
 * by oti_init().  The engine never includes a backend header: it asks
 * oti_select() for the first enabled backend whose probe accepts an address
 * pair and talks to it only through these entries.
 *
 * Object model (all objects are opaque to the engine):
 *   oti_listener   passive side: turns incoming requests into oti_connreq.
 *   oti_connreq    one pending request, with the active side's private data;
 *                  consumed by exactly one of ep_accept_open() or reject().
 *   oti_ep         one reliable, connected, message-oriented endpoint
 *                  (RC QP, FI_EP_MSG endpoint) with its own completion queue
 *                  and connection-event queue.
 *   oti_mr         registered memory, usable for local buffers of the ep it
 *                  was registered on and as a target of remote RDMA.
 *
 * Contracts common to every entry:
 *   - Returns 0 (or a count) on success, a negative errno on failure; never
 *     sets errno for the caller, never prints, never exits.
 *   - Never blocks, except where an entry says otherwise.  Waiting is done by
 *     the caller on the object's fd after *_arm() returned 0.
 *   - Not internally serialised per object: the engine holds the owning
 *     connection's lock around every call on one ep/listener.  Different
 *     objects may be used from different threads at once.
 *   - Every fd a backend creates is O_CLOEXEC.
 */
#ifndef OTI_H
#define OTI_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define OTI_VERSION 2

/* Largest private data any backend may carry; events embed a copy. */
#define OTI_MAX_PRIVATE_DATA 256

struct oti_listener;
struct oti_connreq;
struct oti_ep;

/* Capability flags (struct oti_caps.flags). */
enum {
	OTI_CAP_RDMA_READ = 1u << 0,	/* rdma_read() works */
	OTI_CAP_RDMA_WRITE = 1u << 1,	/* rdma_write() works */
	/* iWARP rules: no write-with-immediate, the sink of an RDMA read
	 * must be registered with OTI_ACCESS_REMOTE_WRITE, MPA limits. */
	OTI_CAP_IWARP_RULES = 1u << 2,
	/* Runs in software over the host's TCP/IP stack (no RNIC). */
	OTI_CAP_SOFTWARE = 1u << 3,
	/* Reaches only peers on this host (shm): it never chooses a
	 * listener's port when another transport listens beside it, and its
	 * ep_open() may answer -ENODEV (nobody of ours there) at once. */
	OTI_CAP_HOST_LOCAL = 1u << 4,
	/* The passive side is up once it accept()ed: once the active side's
	 * connect() has sent its request, the active side's ESTABLISHED
	 * needs no answer from it, so it may be taken late (the engine
	 * then leaves a non-blocking connect to whoever waits for it). */
	OTI_CAP_PASSIVE_DONE = 1u << 5,
};

struct oti_caps {
	uint32_t flags;
	uint32_t max_private_data;	/* bytes of private data on connect/accept/reject */
	uint32_t max_inline;		/* sends at or below this may use OTI_SEND_INLINE */
	uint32_t max_send_wr;		/* outstanding sends + RDMA ops per ep */
	uint32_t max_recv_wr;		/* outstanding receives per ep */
	uint64_t max_msg_size;		/* one send / one RDMA op */
};

/* listen() flags. */
enum {
	/* An IPv6 listener takes IPv6 peers only (IPV6_V6ONLY), so that an
	 * IPv4 listener on the same port can exist beside it. */
	OTI_LISTEN_V6ONLY = 1u << 0,
};

/* Memory access rights for mr_reg(). Local read is implied. */
enum {
	OTI_ACCESS_LOCAL_WRITE = 1u << 0,
	OTI_ACCESS_REMOTE_READ = 1u << 1,
	OTI_ACCESS_REMOTE_WRITE = 1u << 2,
};

/*
 * A registration.  The fields are filled by the backend and read by the
 * engine; the engine must not change them.  The address a peer uses to
 * reach byte p of the region is raddr_base + (p - addr): backends whose
 * RMA addresses are offsets set raddr_base to 0, verbs sets it to addr.
 */
struct oti_mr {
	void *addr;
	size_t len;
	uint32_t rkey;		/* remote key, 32 bits as on the SDP wire */
	uint64_t raddr_base;
	unsigned access;
};

/* One local buffer: must lie inside mr. */
struct oti_sge {
	void *addr;
	uint32_t len;
	struct oti_mr *mr;
};

enum oti_event_type {
	/* Active side: address (and route) resolved; the ep is bound to a
	 * device, so memory may be registered and receives posted; then call
	 * connect(). */
	OTI_EV_RESOLVED = 1,
	/* Both sides: the connection is up.  On the active side private_data
	 * is the peer's accept data. */
	OTI_EV_ESTABLISHED,
	/* Active side: the peer answered with reject(); private_data is its
	 * reject data (may be empty).  status is -ECONNREFUSED. */
	OTI_EV_REJECTED,
	/* Active side: no answer / no route / no listener.  status says why
	 * (-ETIMEDOUT, -EHOSTUNREACH, -ENETUNREACH, -ECONNREFUSED). */
	OTI_EV_UNREACHABLE,
	/* The transport connection is gone (peer disconnect, peer death).
	 * After this no completion will carry data. */
	OTI_EV_DISCONNECTED,
	/* Asynchronous error: QP fatal, device removed, port down. status
	 * is a negative errno.  The ep is unusable afterwards. */
	OTI_EV_ERROR,
};

struct oti_event {
	enum oti_event_type type;
	int status;
	size_t private_data_len;
	uint8_t private_data[OTI_MAX_PRIVATE_DATA];
};

enum oti_wc_op {
	OTI_WC_SEND = 1,
	OTI_WC_RECV,
	OTI_WC_RDMA_READ,
	OTI_WC_RDMA_WRITE,
};

/* One completion.  ctx is the value given when the work was posted. */
struct oti_wc {
	uint64_t ctx;
	enum oti_wc_op op;
	int status;		/* 0, or a negative errno (-ECANCELED on flush) */
	uint32_t len;		/* bytes received (RECV) */
};

/* post_send() flags. */
enum {
	OTI_SEND_INLINE = 1u << 0,	/* a hint; len <= caps.max_inline */
	OTI_SEND_SOLICITED = 1u << 1,	/* urgent data: wake the peer now */
};

struct oti_ops {
	size_t size;		/* sizeof(struct oti_ops) the backend was built with */
	uint32_t version;	/* OTI_VERSION */
	const char *name;	/* short, stable: "tcp-fallback", "ib", "iwarp" */

	/*
	 * Once per process, before any other entry; idempotent.  Opening a
	 * fabric or device list may happen here.  -ENODEV: the backend has
	 * nothing to offer on this host (it is then skipped).
	 */
	int (*init)(void);
	/* Releases what init() set up.  Objects must be destroyed first. */
	void (*fini)(void);

	/*
	 * Can this backend carry a connection between these addresses?  Either
	 * may be NULL (unknown yet).  Cheap: no connection attempt, no
	 * blocking.  0 = yes, -ENODEV / -ENETUNREACH = no.
	 */
	int (*probe)(const struct sockaddr *local, const struct sockaddr *remote);
	void (*query_caps)(struct oti_caps *caps);

	/* --- passive side ------------------------------------------------ */

	/* Listen on addr (port 0: backend picks), OTI_LISTEN_* flags.
	 * -EADDRINUSE as bind(2). */
	int (*listen)(const struct sockaddr *addr, socklen_t addrlen, int backlog, unsigned flags,
		      struct oti_listener **out);
	/* Bound address of the listener (actual port after port 0). */
	int (*listener_name)(struct oti_listener *l, struct sockaddr *addr,
			     socklen_t *addrlen);
	/* Readable when get_connreq() may return a request. */
	int (*listener_fd)(struct oti_listener *l);
	/* 0 = safe to sleep on listener_fd(), -EAGAIN = call get_connreq(). */
	int (*listener_arm)(struct oti_listener *l);
	/*
	 * Next pending request, -EAGAIN if none.  Copies the active side's
	 * private data into pdata (capacity OTI_MAX_PRIVATE_DATA) and its
	 * length into *pdata_len; peer gets the active side's address.
	 */
	int (*get_connreq)(struct oti_listener *l, struct oti_connreq **req,
			   void *pdata, size_t *pdata_len,
			   struct sockaddr_storage *peer);
	/* Refuse a request, with optional private data; consumes req. */
	int (*reject)(struct oti_listener *l, struct oti_connreq *req,
		      const void *pdata, size_t len);
	/* Pending requests are rejected. */
	void (*listener_close)(struct oti_listener *l);
	/*
	 * Sharing a listener with forked children (doc/fork.md, issue 17);
	 * both NULL for a transport whose listener cannot be shared (an
	 * rdma_cm id lives in the process that made it).  The system's
	 * queue of the listener is then one for every process holding it.
	 *
	 * listener_take(): whether get_connreq() takes new connections from
	 * that queue, and listener_fd() reports them (on when listening).
	 * Off, the connections already taken are still completed.
	 *
	 * listener_forked(): in a fork child, makes the inherited copy of l
	 * the child's own: its wait set, and no request of the parent's (the
	 * child's copies of their descriptors are closed; the parent's
	 * connections are left as they are).  Keeps listener_take's setting.
	 * 0 or a negative errno (l then unusable but for listener_close).
	 */
	void (*listener_take)(struct oti_listener *l, bool on);
	int (*listener_forked)(struct oti_listener *l);

	/* --- endpoints --------------------------------------------------- */

	/*
	 * Passive: an ep for req, bound to the device the request arrived
	 * on; consumes req whatever the result.  Register and post receives,
	 * then accept().
	 */
	int (*ep_accept_open)(struct oti_listener *l, struct oti_connreq *req,
			      struct oti_ep **out);
	int (*accept)(struct oti_ep *ep, const void *pdata, size_t len);
	/*
	 * Passive, instead of accept(): refuse the request ep was opened
	 * for, with optional private data, which the active side gets with
	 * OTI_EV_REJECTED (the engine says why: it could not register the
	 * connection's buffers).  ep is then only closed.  NULL in a backend
	 * that cannot: ep_close() alone ends the request, and the active
	 * side sees its connection go down.
	 */
	int (*ep_reject)(struct oti_ep *ep, const void *pdata, size_t len);

	/*
	 * Active: an ep for reaching dst (from src if given).  Resolution is
	 * asynchronous: OTI_EV_RESOLVED (or OTI_EV_UNREACHABLE) follows on
	 * the ep's fd.  Then register, post receives, and connect().
	 * -ENODEV: this backend has found, without waiting, that it cannot
	 * reach dst after all; the engine tries the next one.
	 */
	int (*ep_open)(const struct sockaddr *dst, socklen_t dstlen,
		       const struct sockaddr *src, socklen_t srclen,
		       struct oti_ep **out);
	int (*connect)(struct oti_ep *ep, const void *pdata, size_t len);

	/*
	 * Local and peer transport addresses of a resolved/connected ep.
	 * Either output may be NULL.
	 */
	int (*ep_names)(struct oti_ep *ep, struct sockaddr_storage *local,
			struct sockaddr_storage *peer);

	/*
	 * One pollable fd per ep: readable when get_event() or poll_cq()
	 * may have work.  Level: after arm() returned 0, the fd becomes
	 * readable when new work arrives.
	 */
	int (*ep_fd)(struct oti_ep *ep);
	/* 0 = nothing pending, safe to sleep on ep_fd(); -EAGAIN = poll again. */
	int (*ep_arm)(struct oti_ep *ep);
	/*
	 * What to wait for on ep_fd() once armed: POLLIN, plus POLLOUT while
	 * the backend holds output that the fd's writability lets it move
	 * (a software transport whose socket buffer is full).  Backends
	 * whose fd is readable for every kind of work use oti_wait_pollin.
	 */
	short (*ep_wait_events)(struct oti_ep *ep);
	/* Next connection event, -EAGAIN if none. */
	int (*get_event)(struct oti_ep *ep, struct oti_event *ev);
	/* Up to n completions; returns the count (0 if none) or -errno. */
	int (*poll_cq)(struct oti_ep *ep, struct oti_wc *wc, int n);

	/* --- data ---------------------------------------------------------- */

	/* Register [addr, addr+len) for use with ep (and its device). */
	int (*mr_reg)(struct oti_ep *ep, void *addr, size_t len, unsigned access,
		      struct oti_mr **out);
	int (*mr_dereg)(struct oti_mr *mr);

	/*
	 * Receives complete in posting order; a message longer than the
	 * buffer completes with an error and the ep is then in error.
	 */
	int (*post_recv)(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx);
	/* Sends are delivered in posting order and complete in order. */
	int (*post_send)(struct oti_ep *ep, const struct oti_sge *sge, uint64_t ctx,
			 unsigned flags);
	/*
	 * RDMA to/from the peer's registration named by rkey at raddr (the
	 * peer's raddr_base + offset).  A later send is not delivered before
	 * an earlier RDMA write has landed.
	 */
	int (*rdma_read)(struct oti_ep *ep, const struct oti_sge *local,
			 uint64_t raddr, uint32_t rkey, uint64_t ctx);
	int (*rdma_write)(struct oti_ep *ep, const struct oti_sge *local,
			  uint64_t raddr, uint32_t rkey, uint64_t ctx);

	/* --- teardown ------------------------------------------------------ */

	/*
	 * Orderly transport shutdown: sends already posted are delivered
	 * first, then the peer sees OTI_EV_DISCONNECTED.  Outstanding receives
	 * complete with -ECANCELED.  Never blocks.
	 */
	int (*disconnect)(struct oti_ep *ep);
	/*
	 * Frees the ep; posted work is discarded.  Registrations made on it
	 * stay valid until mr_dereg(), which the engine calls after ep_close()
	 * (the verbs order: QP, then MRs).  If still connected the peer sees
	 * OTI_EV_DISCONNECTED.
	 */
	void (*ep_close)(struct oti_ep *ep);

	/* --- memory -------------------------------------------------------- */

	/*
	 * Appended; NULL in a backend that cannot (registered memory is
	 * pinned: verbs).  The engine does not need what [addr, addr + len),
	 * memory registered on ep, holds now (an idle connection's free
	 * buffers, posted receives included): the backend may give its pages
	 * back to the system, after which they read as zeros, except where a
	 * message it is receiving is being written.
	 */
	void (*mem_idle)(struct oti_ep *ep, void *addr, size_t len);

	/* --- busy polling -------------------------------------------------- */

	/*
	 * Appended; both NULL in a backend whose news only a system call
	 * sees.  ep_poll(): is there work for get_event() or poll_cq(), seen
	 * without a system call (shm: the rings' indexes in shared memory)?
	 * From the first ep_poll() on, the caller is polling, not sleeping,
	 * and promises to call ep_arm() before it sleeps on ep_fd() or
	 * ep_poll_end() when it stops polling otherwise; meanwhile the
	 * backend may stop asking the peer to wake this side (so that a
	 * spinning waiter costs neither side a system call), and ep_fd()
	 * may stay quiet for what arrives.  ep_poll_end(): the caller stops
	 * polling without a sleep; ep_fd() wakes sleepers again from now
	 * on.  True: work came that ep_fd() will not announce, the caller
	 * drives the ep (get_event(), poll_cq()) before it lets it go.
	 */
	bool (*ep_poll)(struct oti_ep *ep);
	bool (*ep_poll_end)(struct oti_ep *ep);

	/* --- drives -------------------------------------------------------- */

	/*
	 * Appended; NULL where looking costs no system call (verbs polls a
	 * CQ in memory).  The engine brackets each drive of ep (a run of
	 * get_event() and poll_cq(), under the connection's lock) with
	 * these.  Within a drive the backend reads its transport until a
	 * read finds it empty, and not again: whatever arrives later makes
	 * ep_fd() readable, and whoever waits on it drives again.  With
	 * read false it does not read at all: the drive reaps what is
	 * queued (the completions of the caller's own posts) and moves its
	 * output.  drive_end() returns the reads of the drive that found
	 * nothing (for the statistics).
	 */
	void (*drive_begin)(struct oti_ep *ep, bool read);
	unsigned (*drive_end)(struct oti_ep *ep);

	/* --- moving an endpoint to another process (doc/fork.md) ------------ */

	/*
	 * Appended; both NULL in a backend whose endpoints cannot leave the
	 * process that made them (verbs: a QP is its process's).
	 *
	 * ep_export(): ep, connected and quiet, becomes a description of its
	 * state (*blob, malloc()ed, *len bytes: the caller frees it) and the
	 * descriptor *fd that carries the connection, which the process
	 * that imports must hold (a fork child has it at the same number
	 * already; otherwise it is passed with SCM_RIGHTS).  Quiet: no event
	 * or completion waiting to be taken, nothing posted but receives (no
	 * send, write or RDMA read of ours unfinished), and no part of an
	 * RDMA write or read answer of the peer's half placed; -EBUSY
	 * otherwise, -ENOTCONN once the connection is not up, and ep is then
	 * as it was.  On success ep is consumed: freed without a word to the
	 * peer, its posted receives forgotten (the bytes of a message it had
	 * begun to place in one travel in the description), *fd left open,
	 * still libsdp's (common/fdspace.h), and the caller's.  Registrations
	 * made on ep stay until mr_dereg() but the peer reaches them no more:
	 * the engine moves only when the peer holds no key of its.
	 *
	 * ep_import(): a connected ep from such a description and its
	 * descriptor, which the ep takes whatever the result (closed on
	 * failure: -EINVAL for a description this backend did not make).  It
	 * has no registration, nothing posted and no event to report: the
	 * caller registers and posts its receives, oldest first (a message
	 * the old ep had begun lands in the first), then drives it as any.
	 */
	int (*ep_export)(struct oti_ep *ep, void **blob, size_t *len, int *fd);
	int (*ep_import)(const void *blob, size_t len, int fd, struct oti_ep **out);

	/* --- a dead descriptor --------------------------------------------- */

	/*
	 * Appended; both NULL in a backend whose ep_fd() never stays ready
	 * for good (verbs).  ep_fd_dead(): the file at ep_fd() will stay
	 * ready for ever (the peer's EOF or reset on a socket) and should
	 * make way for a quiet one.  The engine then takes ep_fd() out of
	 * every epoll set it put it in and calls ep_quiet(), which puts a
	 * file that is never ready (an eventfd) at ep_fd()'s number; the
	 * backend never does so on its own.  An epoll registration is of a
	 * file, removed by the number that names it: if another file took
	 * the number first, a copy of the old one (a forked child holds
	 * one) would keep the registration alive, firing for ever and no
	 * longer removable.
	 */
	bool (*ep_fd_dead)(struct oti_ep *ep);
	void (*ep_quiet)(struct oti_ep *ep);
};

/* --- registry (transports/oti.c) ------------------------------------- */

/*
 * Register the compiled-in backends in priority order (RDMA first,
 * software last) and init() each enabled one.  Thread-safe, idempotent.
 * Returns the number of usable backends.
 */
int oti_init(void);
void oti_fini(void);

/*
 * First usable backend whose probe accepts (local, remote), or NULL.
 * Backends disabled by the "transports" tunable are skipped.
 */
const struct oti_ops *oti_select(const struct sockaddr *local,
				 const struct sockaddr *remote);

/*
 * Every usable backend whose probe accepts (local, remote), in priority
 * order, at most max of them into out[]; returns how many.  A listener
 * listens on each, so clients on any transport reach it.
 */
int oti_select_all(const struct sockaddr *local, const struct sockaddr *remote,
		   const struct oti_ops **out, int max);

/* Backend by name ("tcp-fallback"), whether enabled or not; NULL if none. */
const struct oti_ops *oti_find(const char *name);

/*
 * For test programs only (test/fuzz's mock peer): ops, which must be
 * enabled by the "transports" tunable like any backend, becomes the only
 * backend oti_init(), oti_select*() and oti_find() know.  Before
 * oti_init(): -EBUSY after it.  oti_name() still lists the build's own.
 */
int oti_test_backend(const struct oti_ops *ops);

/* The name of the i-th backend this build has, in priority order, whether
 * enabled or not; NULL past the last.  What the "transports" tunable and
 * sdp.conf's "transport" statements may name. */
const char *oti_name(unsigned int i);

/* Stock entries for backends' ops tables, here rather than in oti.c (the
 * registry, which sits above the backends it lists). */

/* ep_wait_events for backends whose ep fd only ever needs POLLIN. */
static inline short oti_wait_pollin(struct oti_ep *ep)
{
	(void)ep;
	return POLLIN;
}

/* "Not supported", for backends that lack RDMA read or write. */
static inline int oti_no_rdma(struct oti_ep *ep, const struct oti_sge *local, uint64_t raddr,
			      uint32_t rkey, uint64_t ctx)
{
	(void)ep;
	(void)local;
	(void)raddr;
	(void)rkey;
	(void)ctx;
	return -EOPNOTSUPP;
}

/* Backends. */
extern const struct oti_ops ib_transport_ops;
extern const struct oti_ops iwarp_transport_ops;
extern const struct oti_ops shm_transport_ops;
extern const struct oti_ops tcpf_transport_ops;

#endif /* OTI_H */
