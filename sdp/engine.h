/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Internals of the SDP engine, shared by its files.  They are layered
 * (doc/layers.md; test/lint_layers.sh checks it), each calling only the
 * ones before it in this list:
 *
 *   wire.c          the message codec
 *   base.c          socket objects, the sd table, statistics, the clock
 *   regcache.c      registrations of application buffers
 *   progress.c      the progress thread, its registrations, blocking waits
 *   mode.c          the modes of the two half-connections (policy, state)
 *   post.c          one connection's buffers, credits, posting, readiness
 *   zcopy.c         Read Zcopy
 *   write_zcopy.c   Write Zcopy and Transaction mode
 *   conn.c          handshake, listeners, receive dispatch, driving
 *   sock.c, poll.c  the API (include/sdp.h); convert.c above them
 *
 * The few calls that must run up go through struct sdp_upcalls (base.c),
 * which conn.c fills in.  The sections below follow the same order.
 *
 * Locking: one mutex per socket (struct sdp_sock.lock) protects everything
 * in the socket, its connection and its transport objects.  The sd table
 * has its own lock (base.c), always taken before a socket lock, never
 * after.  A listener's lock may be held while taking a child's lock (to
 * queue it for accept), never the reverse.  The progress thread's lock
 * (progress.c) comes after a socket lock, never before.
 */
#ifndef SDP_ENGINE_H
#define SDP_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#include "credits.h"
#include "oti.h"
#include "sdp.h"
#include "wire.h"

enum sdp_state {
	SDP_S_NEW,		/* created, maybe bound */
	SDP_S_LISTEN,
	SDP_S_RESOLVING,	/* active: waiting for the transport to resolve */
	SDP_S_CONNECTING,	/* Hello sent / HelloAck sent, not yet established */
	SDP_S_ESTABLISHED,	/* data may flow (possibly half-closed) */
	SDP_S_CLOSED,		/* connection over: reset, failed, or fully closed */
};

/* One received data segment waiting for the application. */
struct sdp_rx_seg {
	uint32_t slot;		/* receive buffer index, or SDP_SLOT_* */
	uint32_t off;		/* first unread byte in that buffer */
	uint32_t len;		/* unread bytes */
	bool urg;		/* its last byte is the urgent byte: the mark */
	uint8_t *heap;		/* SDP_SLOT_HEAP: the copy's memory (malloc) */
};

/* The urgent byte (post.c, "Urgent data"), as Linux's tp->urg_data. */
enum sdp_urg {
	SDP_URG_NONE,	/* no mark in the stream */
	SDP_URG_VALID,	/* the byte can be read with MSG_OOB */
	SDP_URG_READ,	/* read with MSG_OOB; the mark stays until passed */
};

/* Control messages waiting for a credit, sent in this order. */
enum {
	SDP_CTRL_SEND_SM = 1u << 0,
	SDP_CTRL_CH_RCV_BUF_ACK = 1u << 1,
	SDP_CTRL_DISCONN = 1u << 2,
	SDP_CTRL_RDMA_RD_COMPL = 1u << 3,	/* conn.rdcompl_bytes read */
	SDP_CTRL_SRC_AVAIL_CANCEL = 1u << 4,
	SDP_CTRL_MODE_CHANGE = 1u << 5,		/* conn.mch_next */
	SDP_CTRL_SINK_AVAIL_CANCEL = 1u << 6,
	SDP_CTRL_SINK_CANCEL_ACK = 1u << 7,
	SDP_CTRL_CH_RCV_BUF = 1u << 8,		/* conn.tx_ask */
};

/* Segments of the receive queue that are not in a receive buffer. */
#define SDP_SLOT_SA 0xffffffffu		/* the unread rest of the peer's SrcAvail */
#define SDP_SLOT_STAGE 0xfffffffeu	/* bytes read into the staging buffer */
#define SDP_SLOT_HEAP 0xfffffffdu	/* unread bytes copied out of their buffer */
/* Heap segments at most in the receive queue (post.c, "Unread data
 * copied out"): with one SrcAvail and one staging segment, rxq_cap is
 * nrx + SDP_RXQ_EXTRA. */
#define SDP_RX_HEAP_SEGS 4
#define SDP_RX_HEAP_MAX (64u * 1024)	/* bytes in them at most */
#define SDP_RXQ_EXTRA (2 + SDP_RX_HEAP_SEGS)

/* Bytes of the stream a SrcAvail of ours carries inline (Combined mode
 * wants at least one); BSDH + SrcAH + these fill one control slot. */
#define SDP_SA_INLINE 32

#define SDP_CTRL_SLOTS 8
/* iWARP: how many times the active side repeats its first message (first_nudges) */
#define SDP_FIRST_NUDGES 3
#define SDP_MAX_LISTENERS 4	/* transports one listener listens on */
#define SDP_CTRL_SLOT_SIZE 64

/* Completion contexts: kind in the top bits, slot below. */
#define SDP_CTX_RX (1ull << 32)
#define SDP_CTX_TX (2ull << 32)
#define SDP_CTX_CTRL (3ull << 32)
#define SDP_CTX_READ (4ull << 32)	/* an RDMA read of the peer's SrcAvail */
#define SDP_CTX_WRITE (5ull << 32)	/* an RDMA write into the peer's SinkAvail */
#define SDP_CTX_KIND(ctx) ((ctx) & ~0xffffffffull)
#define SDP_CTX_SLOT(ctx) ((uint32_t)(ctx))

struct sdp_conn {
	const struct oti_ops *t;
	struct oti_caps caps;	/* t's, read once: it never changes */
	struct oti_ep *ep;
	int ep_fd;
	bool in_progress_set;	/* ep_fd is in the progress thread's epoll */
	/* Not in it yet, to be put there by whoever takes the connection
	 * over from its waiting caller: a child established as its
	 * listener took it (sdp_accept()), a blocking connect
	 * (sdp_connect()).  Until then the caller drives it. */
	bool prog_deferred;
	uint32_t prog_events;	/* with these epoll events (progress_add_ep) */
	bool prog_excl;		/* registered EPOLLEXCLUSIVE (progress_add_ep) */

	struct sdp_credits cr;

	/* Receive side: nrx buffers of rx_size bytes (BSDH included). */
	uint8_t *rx_mem;
	struct oti_mr *rx_mr;
	uint32_t nrx, rx_size;
	/* SO_RCVBUF on an established connection: at most rx_max buffers
	 * are posted; consumed ones beyond that wait in rx_idle[nidle]. */
	uint32_t rx_max;
	uint32_t *rx_idle, nidle;
	struct sdp_rx_seg *rxq;	/* ring of rxq_cap: data not yet read */
	uint32_t rxq_cap;	/* nrx + SDP_RXQ_EXTRA */
	uint32_t rxq_head, rxq_count;
	uint64_t rx_bytes;	/* sum of rxq lengths */
	enum sdp_urg urg;	/* the one rxq segment with .urg set iff not NONE */
	uint8_t urg_byte;

	/* Send side: ntx buffers of tx_size bytes, used as a ring:
	 * [tx_done, tx_posted) posted and not completed, [tx_posted,
	 * tx_filled) holding data waiting for credits; the last of those may
	 * still be filling. */
	uint8_t *tx_mem;
	struct oti_mr *tx_mr;
	uint32_t ntx, tx_size;	/* tx_size = the peer's buffer size */
	uint32_t *tx_len;	/* payload bytes in each buffer */
	bool *tx_urg;		/* its last byte is urgent: OOB_PRES, nothing appended */
	uint32_t tx_done, tx_posted, tx_filled;
	uint64_t tx_queued_bytes;	/* in buffers, not yet completed, and in bl */
	/* conn_push(): what is queued goes as credits allow, its tail held
	 * back neither by TCP_CORK nor by a send in flight; cleared once all
	 * of it is posted. */
	bool tx_push;
	/* The send backlog (post.c, "Send backlog"): bytes taken while the
	 * ring was full, in order, before any later ones; not registered. */
	struct sdp_tx_chunk *bl_head, *bl_tail;

	/* Buffers given back when idle (post.c, "Idle buffers").  rx_posted:
	 * the transport holds that receive buffer. */
	bool *rx_posted;
	bool moved;		/* data moved since the last idle sweep */
	bool idle_watched;	/* progress_idle_watch() holds s */
	uint64_t quiet_since_ns;	/* a sweep found nothing moved since */
	uint64_t buf_bytes;	/* rx_mem and tx_mem, in sdp_stats.buf_bytes */
	uint64_t ring_bytes;	/* moved through them (conn_free_rings()) */
	size_t rx_mem_len, tx_mem_len;	/* as allocated */

	/* Buffers that grow with use (post.c, "Growing buffers").  Receive
	 * side: the smaller ring being left; a slot with rx_in_old[slot]
	 * still refers to it until its message is done with. */
	uint8_t *rx_old_mem;
	struct oti_mr *rx_old_mr;
	uint32_t rx_old_size;
	size_t rx_old_len;
	bool *rx_in_old;
	uint32_t rx_old_posted;	/* old buffers the transport still holds */
	uint32_t rx_old_refs;	/* old buffers posted or holding data */
	uint32_t rx_want;	/* an ask that came while growing: taken after */
	/* Send side. */
	uint32_t tx_full;	/* sends that found the ring full since the last ask */
	uint32_t tx_ask;	/* the size our ChRcvBuf asks for; 0: none out */
	uint32_t tx_next_size;	/* the peer's buffers grew: the ring's next size */
	bool grow_refused;	/* the peer answered without growing: ask no more */
	/* SO_RCVBUF / SO_SNDBUF were set before the handshake: the buffers
	 * are the ones they chose, and do not grow. */
	bool rx_fixed, tx_fixed;

	uint8_t ctrl_mem[SDP_CTRL_SLOTS * SDP_CTRL_SLOT_SIZE];
	struct oti_mr *ctrl_mr;
	uint32_t ctrl_done, ctrl_posted;
	unsigned ctrl_pending;	/* SDP_CTRL_* */

	uint8_t peer_max_adverts;
	bool disconn_sent, disconn_rcvd;
	bool disconn_last;	/* ours was sent after the peer's arrived: the
				 * peer closes the transport, not us */
	bool transport_down;	/* disconnect() called or DISCONNECTED seen */
	bool post_failed;	/* a post failed: nothing more is posted, the
				 * transport's DISCONNECTED event decides */
	bool disconnected;	/* DISCONNECTED or ERROR seen: the transport
				 * will report nothing more */
	uint64_t deadline_ns;	/* connect or disconnect timeout, 0 = none */

	/* Read Zcopy (zcopy.c).  Source: our one outstanding SrcAvail (we
	 * and the peer both advertise max_adverts 1). */
	struct sdp_tx_sa {
		bool active;
		bool want_cancel;	/* the peer's SrcAvail crossed ours */
		bool cancel_sent;
		bool ended;		/* the sink's SendSM: it reads no more */
		bool pulled;		/* taken back for the sink's SinkAvail */
		uint32_t mseq;		/* of the SrcAvail */
		uint32_t len;		/* advertised, inline bytes included */
		uint32_t inline_len;
		uint32_t read;		/* bytes the sink reported read */
		struct oti_mr *mr;	/* exactly the buffer, remote read only */
	} tx_sa;
	unsigned zc_refusals;	/* SendSMs in a row with nothing read */
	/* Sink: the peer's SrcAvail, its rest queued as an SDP_SLOT_SA seg. */
	struct sdp_rx_sa {
		bool active;
		bool cancelled;		/* SrcAvailCancel came: finish, SendSM */
		bool inflight_stage;	/* the read in flight fills the staging buffer */
		uint32_t rkey;
		uint64_t raddr;		/* the next byte to read */
		uint32_t left;		/* bytes not yet read */
		uint32_t inflight;	/* bytes of the read in flight, 0: none */
		int status;		/* of the last read */
		struct sdp_reg *reg;	/* the application buffer of a direct read */
	} rx_sa;
	uint32_t rdcompl_bytes;	/* read and not yet reported (RdmaRdCompl) */
	uint8_t *stage_mem;	/* staging buffer, made at first use */
	struct oti_mr *stage_mr;
	uint32_t stage_size;
	struct sdp_regcache *regcache;	/* application buffers of direct reads */

	/* Modes of the two half-connections (mode.c): each is chosen by its
	 * data source and announced with ModeChange. */
	uint8_t tx_mode;	/* our send half (enum sdp_mode) */
	uint8_t rx_mode;	/* the peer's send half */
	uint8_t mch_next;	/* the mode a pending ModeChange announces */
	bool req_pipe;		/* ask for Pipelined on the next RdmaRdCompl */
	bool was_pipelined;	/* our send half has been Pipelined */
	uint32_t mch_mseq;	/* mseq of our ModeChange that left Pipelined */
	unsigned small_sends;	/* Pipelined: sends below the threshold in a row */
	unsigned stale_adverts;	/* Pipelined: SinkAvails discarded in a row */
	unsigned trans_streak;	/* small send then advertised recv, in a row */
	bool trans_last_send;	/* the last call on the socket was a small send */
	bool trans_held;	/* Transaction: the tail waits for our SinkAvail */
	uint64_t trans_hold_until;	/* ns; the hold ends then whatever happens */
	/* iWARP, passive side: nothing is sent before the peer's first
	 * message (an MPA responder must wait for the initiator's first
	 * FPDU, RFC 5044 7.1.2; siw fails the connect otherwise).  The
	 * active side sends a credit update first thing for it, and again
	 * (first_nudges, about every SDP_TICK_MS) until a message of the
	 * passive side's shows the first one was seen: siw's passive side
	 * overlooks what arrives just as it hands the socket to the QP,
	 * until more arrives. */
	bool await_first_rx;
	uint8_t first_nudges;

	/* Write Zcopy (write_zcopy.c).  Data messages counted for the
	 * non_discards rule: ones with stream bytes, sent and received. */
	uint32_t nond_sent, nond_rcvd;
	/* Sink: our one SinkAvail, naming the buffer of a recv() in progress. */
	struct sdp_snk {
		bool active;		/* advertised, not yet over */
		bool cancel_sent;	/* SinkAvailCancel posted */
		uint32_t len;		/* advertised bytes */
		uint32_t written;	/* RdmaWrCompl: bytes placed, the advert is over */
		bool done;		/* RdmaWrCompl came */
		bool acked;		/* SinkCancelAck came: the source is done */
		uint32_t mseq;		/* of the SinkAvail */
		bool dead;		/* the source cannot use it any more (Data,
					 * ModeChange or DisConn came after it) */
		struct oti_mr *mr;	/* exactly the buffer, remote write */
	} snk;
	unsigned snk_acks_due;	/* SinkCancelAcks still to come */
	/* Source: the peer's one SinkAvail that we accepted. */
	struct sdp_psnk {
		bool active;
		uint32_t rkey;
		uint64_t raddr;
		uint32_t len;
	} psnk;
	unsigned psnk_cancels;	/* SinkAvailCancels to answer (SinkCancelAck) */
	uint32_t wr_inflight;	/* RDMA writes posted, not completed */
	int wr_status;		/* of the last failed write */
	uint8_t *bounce_mem;	/* small writes are copied here first */
	struct oti_mr *bounce_mr;
	uint32_t bounce_size;
};

/* Someone to tell about every change of a socket: a thread blocked in
 * sdp_wait()/sdp_poll() (transient), or a watch (sdp_watch_add: lives
 * until removed, counts the changes). */
struct sdp_waiter {
	int fd;			/* an eventfd: written 1 per change */
	short ep_events;	/* a thread asleep on the ep fd itself: the
				 * events it polls it for (sdp_wait), else 0 */
	atomic_uint *changes;	/* watches: bumped per change; NULL otherwise */
	atomic_uint *edges;	/* watches: bumped per arrival (data, EOF, a
				 * connection): sock_changed(s, true) */
	struct sdp_watch_gate *gate;	/* watches: sdp_watch_gate(), or NULL */
	/* Watches: fd is written only for a change after which the
	 * socket's events meet the low bits, while RING_FILTERED is set
	 * (sdp_watch_ring_when()); 0: for every change.  __atomic
	 * builtins only. */
	unsigned ring_when;
#define RING_FILTERED 0x80000000u
	/* Watches given an epoll set (sdp_watch_fds): the set, the key
	 * its registrations carry, and the socket's wait sources now
	 * registered there (progress_watch_sync); epfd -1 otherwise. */
	int epfd;
	uint64_t key;
	int nreg;
	int reg_fd[SDP_MAX_LISTENERS];
	/* A watch counted accepting on a listener (listener_accepting()):
	 * 1 + the fork generation it was counted in, else 0.  A child's
	 * inherited watch was counted by its parent until the child
	 * adopts the listener (conn.c, listener_adopt). */
	unsigned accepting_gen;
	struct sdp_waiter *next;
};

struct sdp_sock {
	pthread_mutex_t lock;
	atomic_int ref;		/* table + progress set + callers in flight */
	unsigned fork_gen;	/* sock_fork_gen when made: a socket from before
				 * a fork() belongs to the parent (sock_get) */
	int sd;			/* the readiness eventfd, or a number that is
				 * no descriptor (sdp_virtual_sds()); -1 once
				 * closed */
	int domain;		/* AF_INET or AF_INET6 */
	enum sdp_state state;
	bool nonblock;
	bool app_closed;	/* sdp_close() done: an orphan finishing teardown */
	bool shut_rd, shut_wr;	/* local shutdown() */
	bool bound;
	bool is_child;		/* made by a listener, not yet accepted */
	bool was_established;	/* reached ESTABLISHED once (a child reset
				 * before accept() is still accepted) */
	int so_error;		/* positive errno, as SO_ERROR gives */
	bool reset;		/* connection ended abnormally */
	bool connect_unreported;	/* non-blocking connect not yet confirmed by a
					 * second connect() (which returns 0 once) */
	/* Why the last connect attempt failed (sdp_fallback_reason()): set
	 * with so_error by conn_connect_failed() and conn_start_connect(),
	 * cleared when an attempt starts. */
	enum sdp_fallback_reason fb_reason;

	struct sockaddr_storage local, peer;

	/* Options.  rcvbuf/sndbuf: what getsockopt reports; once set
	 * (the _set flags, Linux's SOCK_*BUF_LOCK) also what SDP buffers
	 * (see "SO_SNDBUF and SO_RCVBUF" in sock.c). */
	int rcvbuf, sndbuf;
	bool rcvbuf_set, sndbuf_set;
	int keepalive, reuseaddr, reuseport, oobinline, nodelay, cork;
	bool v6only;		/* IPV6_V6ONLY: a listener takes IPv6 peers only */
	int keepidle, keepintvl, keepcnt, rcvlowat;
	struct linger linger;
	struct timeval rcvtimeo, sndtimeo;

	/* Readiness: the sd (eventfd) is readable while events & interest. */
	int interest;
	bool fd_level;

	/* sdp_set_notify(): told of the moments Linux raises SIGURG and
	 * SIGIO; tx_nospace: a send found no room, so room is news. */
	void (*notify)(long arg, int band);
	long notify_arg;
	bool tx_nospace;

	/* Threads blocked on this socket (sdp_wait). */
	struct sdp_waiter *waiters;
	/* Waiters sleeping on the connection's ep fd themselves, and that
	 * fd, out of the progress thread's epoll meanwhile (sdp_wait). */
	int ep_parked;
	int parked_fd;
	bool reap_on_exit;	/* a post in the current call left work for
				 * its exit (progress_call_exit) */
	bool drive_quiet;	/* the next conn_progress() reaps without
				 * reading the transport (oti drive_begin) */

	/* Listener: one transport listener per backend serving the bound
	 * address (RDMA first, the software transport last), all on one
	 * port; nlsn > 0 once bound. */
	struct sdp_lsn {
		const struct oti_ops *t;
		struct oti_listener *l;
	} lsn[SDP_MAX_LISTENERS];
	int nlsn;
	int backlog;
	bool in_progress_set;
	/* Shared with forked children (sdp_listener_share()): connections
	 * are taken from the system's queue only while this process is
	 * accepting, i.e. accepting > 0 (threads in sdp_accept() or polling
	 * the listener, epoll watches on it).  lsn_taking: what the
	 * transport listeners were last told (listener_take). */
	bool lsn_shared, lsn_taking;
	int accepting;
	unsigned lock_gen;	/* lock made new in this fork generation
				 * (base.c, relock_inherited) */
	struct sdp_sock *parent;	/* child: its listener, until accepted */
	struct sdp_sock **acceptq;	/* established children, FIFO */
	int acceptq_len, acceptq_cap;
	int pending_children;		/* handshaking, not yet in acceptq */

	/* Connection (state >= RESOLVING). */
	struct sdp_conn *conn;

	int zcopy_thresh;	/* SDP_ZCOPY_THRESH: zero copy from this size, 0 = off */
};

/* Port of an AF_INET or AF_INET6 address, host order. */
static inline uint16_t addr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static inline void addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* The iovec element holding byte *off of iov, and *off made an offset in
 * it; iovcnt if the bytes before it are all of iov. */
static inline int iov_seek(const struct iovec *iov, int iovcnt, size_t *off)
{
	int i = 0;

	while (i < iovcnt && *off >= iov[i].iov_len) {
		*off -= iov[i].iov_len;
		i++;
	}
	return i;
}

/* Entry i (0 = head) of c's receive queue. */
#define rxq_at(c, i) (&(c)->rxq[((c)->rxq_head + (i)) % (c)->rxq_cap])

/* --- base.c: socket objects, the sd table, statistics, the clock ---------- */

/* Lookup by sd, with a reference; NULL if not ours (nor for a socket
 * inherited across fork(): that one is the parent's).  Put with
 * sock_put(). */
struct sdp_sock *sock_get(int sd);
void sock_put(struct sdp_sock *s);
/* sock_get() and lock it; undone by sock_unlock_put(). */
struct sdp_sock *sock_lock_sd(int sd);
void sock_unlock_put(struct sdp_sock *s);
/* A new socket with its readiness fd; in the table if in_table. */
struct sdp_sock *sock_alloc(int domain, bool nonblock, bool cloexec, bool in_table);
/* Enter a child into the sd table when it is accepted. */
int sock_publish(struct sdp_sock *s);
/* Take sd out of the table (sdp_close); the table's reference passes to
 * the caller.  NULL if sd is not in it. */
struct sdp_sock *sock_unpublish(int sd);
/* Give sd back (sdp_close(), the last reference): close the eventfd or
 * free the number. */
void sock_sd_release(int sd);
/* sd stays open over exec(2) (made without SOCK_CLOEXEC). */
void sock_sd_inherit(int sd);
/* Whether sds are readiness eventfds (else numbers: sdp_virtual_sds()). */
bool sock_sd_is_fd(void);
/* fn(sd, socket, arg) for every socket in the table. */
void sock_for_each(void (*fn)(int sd, void *s, void *arg), void *arg);
/* Made in the parent before a fork(): this process's copy is not to be
 * driven, only forgotten. */
bool sock_inherited(const struct sdp_sock *s);
/* The fork generation of this process; sock_own() makes s of it. */
unsigned sock_generation(void);
void sock_own(struct sdp_sock *s);
/* SDP_ZCOPY_THRESH (tunable or option): 0 is off, at least a page. */
int zcopy_thresh_clamp(long v);
uint64_t sdp_now_ns(void);

extern struct sdp_stats sdp_global_stats;
#define SDP_STAT_INC(field, n) \
	__atomic_add_fetch(&sdp_global_stats.field, (n), __ATOMIC_RELAXED)

/*
 * The upcalls.  Calls in sdp/ run downward only (doc/layers.md); three
 * needs below the connection layer run the other way, and go through
 * these pointers, which conn.c installs when the library loads:
 *  - conn_free: the last reference to a socket with a connection is gone
 *    (base.c's sock_put);
 *  - drive: drive s once -- a listener's requests, or a connection's
 *    transport events and completions -- as a wait for the peer must
 *    (zcopy.c, write_zcopy.c, the exit linger in progress.c);
 *  - service: the progress thread's turn on s, when its fd fired (tick
 *    false) or on a tick; returns whether s stays on the watch list.
 * Each is called with s's lock held, except conn_free (last reference:
 * nobody else can reach s).
 */
struct sdp_upcalls {
	void (*conn_free)(struct sdp_sock *s);
	void (*drive)(struct sdp_sock *s);
	bool (*service)(struct sdp_sock *s, bool tick);
	/* An idle sweep's turn on s (progress_idle_watch()), s's lock held;
	 * true to be looked at again. */
	bool (*idle)(struct sdp_sock *s);
	/* In a fork child, makes the inherited shared listener s this
	 * process's (sock_get(), sdp_close()); 0 or a negative errno. */
	int (*adopt)(struct sdp_sock *s);
};
extern struct sdp_upcalls sdp_upcalls;

static inline void sock_drive(struct sdp_sock *s)
{
	sdp_upcalls.drive(s);
}

/* --- connection state, for every layer ------------------------------------ */

/* A piece of the send backlog: len bytes, the first off of them already
 * copied into the ring; urg: its last byte is urgent (MSG_OOB). */
struct sdp_tx_chunk {
	struct sdp_tx_chunk *next;
	uint32_t len, off;
	bool urg;
	uint8_t data[];
};

/* Stream bytes of ours not yet posted: in the ring waiting for credits
 * (or a held tail), or in the backlog. */
static inline bool conn_tx_unposted(const struct sdp_conn *c)
{
	return c->tx_posted != c->tx_filled || c->bl_head;
}

/*
 * A message of the BSDH and extlen more bytes fits the peer's receive
 * buffers.  A peer may advertise buffers as small as a BSDH and one byte
 * (wire.c) and be honest: then what a longer message would serve is off
 * for the connection -- SrcAvail (32 bytes and its inline ones: Read
 * Zcopy as source), RdmaRdCompl (20: as sink, SendSM declines), SinkAvail
 * (36: Write Zcopy as sink), ModeChange (20: our half stays Combined, so
 * the peer sends no SinkAvail), ChRcvBufAck (20: unanswered, our size is
 * in the Hello anyway).  Data and the 16-byte messages always fit.
 */
static inline bool conn_fits(const struct sdp_conn *c, size_t extlen)
{
	return SDP_BSDH_LEN + extlen <= c->tx_size;
}
/* The transport can RDMA write (Write Zcopy is possible at all). */
static inline bool wz_transport_writes(const struct sdp_conn *c)
{
	return c->caps.flags & OTI_CAP_RDMA_WRITE;
}
/* Our SinkAvail is out and the source may still use it. */
static inline bool wz_advert_live(const struct sdp_conn *c)
{
	return c->snk.active && !c->snk.dead && !c->snk.done;
}

/* --- progress.c ------------------------------------------------------------- */

/* Add a listener fd that drives s to the progress thread; takes a
 * reference on s, dropped by progress_del. */
int progress_add(struct sdp_sock *s, int fd);
/* The same for connection c's ep fd, driven through s (c's own socket,
 * or its listener until it is accepted), with the events its transport
 * waits for (ep_wait_events), kept up to date as the socket is driven. */
int progress_add_ep(struct sdp_sock *s, struct sdp_conn *c);
void progress_del(struct sdp_sock *s, int fd);
/* Take fd out of the progress thread's set, keeping the reference taken
 * when it was added until progress_del (a shared listener's fds,
 * listener_share(); a parked fd, progress_park()). */
void progress_mute(int fd);
/* Whether the calling thread is the progress thread. */
bool progress_on_thread(void);
/* Keep an app-closed socket alive until its teardown finishes. */
void progress_adopt_orphan(struct sdp_sock *s);
/*
 * Work was posted on s's endpoint from an application thread: make sure
 * the transport keeps moving it (a software transport pushes queued output
 * only when driven, once its fd is writable).  Caller holds s->lock.
 */
void progress_posted(struct sdp_sock *s);
/*
 * Run to completion at the calls' exit (doc/fastpath.md, step 0): between
 * progress_call_enter() and progress_call_exit() (sdp_sendv, sdp_recvv),
 * progress_posted() for s only marks it, and the exit drives s once, at a
 * point where no operation is half-way, and then pokes the progress
 * thread only for what is still pending.  A call that sleeps meanwhile
 * sleeps on the transport itself (sdp_wait), so nothing waits for the
 * poke.  Caller holds s->lock for both; enter returns what exit restores
 * (a signal handler's call nests).
 */
struct sdp_sock *progress_call_enter(struct sdp_sock *s);
void progress_call_exit(struct sdp_sock *s, struct sdp_sock *outer);
/* The fds that bring news for s, armed, into fds[] (room for
 * SDP_MAX_LISTENERS) with the events to wait for; returns how many, or
 * -EAGAIN if news is already there.  Caller holds s->lock. */
int progress_wait_fds(struct sdp_sock *s, struct pollfd *fds);
/*
 * A thread about to sleep on s's connection fd itself (one of
 * progress_wait_fds()) takes it out of the progress thread's epoll until
 * it wakes (progress_unpark()): one completion then wakes one thread.
 * False if fd is not one to park.  Caller holds s->lock.
 */
bool progress_park(struct sdp_sock *s, int fd);
void progress_unpark(struct sdp_sock *s);
/*
 * Bring the registrations of s's watches with an epoll set
 * (sdp_watch_fds) in line with s's wait sources now (a connection made,
 * a listener listening, a connection whose fd went quiet), and put the
 * progress thread's registration of a source behind them, so that the
 * kernel wakes a thread asleep in such a set rather than the progress
 * thread (EPOLLEXCLUSIVE, doc/fastpath.md).  Caller holds s->lock.
 */
void progress_watch_sync(struct sdp_sock *s);
/* Tick s, fast, while it holds a Transaction request (conn.trans_held). */
void progress_hold(struct sdp_sock *s);
/* Tick s until its deadline-bound state (connecting, children handshaking)
 * is over, so timeouts fire without any fd activity. */
void progress_watch(struct sdp_sock *s);
/* Look at s now and then (struct sdp_upcalls.idle) until it says no
 * more; one reference is taken.  s's lock may be held. */
void progress_idle_watch(struct sdp_sock *s);
/*
 * Bring the progress thread's registration of c's ep fd (made for owner:
 * c's socket, or its listener) in line with what the transport waits for
 * now: POLLOUT comes and goes with output the transport holds.  Caller
 * holds c's socket lock.
 */
void progress_sync_events(struct sdp_sock *owner, struct sdp_conn *c);
/* The progress thread runs in this process (it started here, not in a
 * parent before fork()). */
bool progress_started_here(void);
/* Process exit, after every socket was closed: wait (exit_linger_ms at
 * most) until closed connections have finished their teardown. */
void progress_linger(void);
/* The same from _exit(): looks only (sdp_exit_quick()). */
void progress_linger_quick(void);

/*
 * Block the calling thread until something changes on s or the deadline
 * (ns since CLOCK_MONOTONIC epoch, 0 = none) passes.  Called and returns
 * with s->lock held.  Returns 0 (re-check), -EAGAIN (deadline), -EINTR.
 */
int sdp_wait(struct sdp_sock *s, uint64_t deadline_ns);
/* The calling thread's wakeup eventfd (created on first use). */
int sdp_thread_waker(void);

/* --- mode.c: the modes of the two half-connections ---------------------------- */

void mode_init(struct sdp_conn *c);
/* Queue a ModeChange of our send half to m (sent by conn_flush()). */
void mode_want(struct sdp_sock *s, enum sdp_mode m);
/* A ModeChange may be posted now. */
bool mode_change_may_go(const struct sdp_conn *c);
/* Our ModeChange (with this mseq) was posted: it is in force. */
void mode_change_sent(struct sdp_sock *s, uint32_t mseq);
/* The peer's ModeChange: NULL if legal (then in force), else what is
 * wrong with it (a protocol error the caller reports). */
const char *mode_change_rcvd(struct sdp_sock *s, int send_half, enum sdp_mode m);
/* The sink set REQ_PIPE on an RdmaRdCompl. */
void mode_req_pipe_rcvd(struct sdp_sock *s);
/* Policy input: a send of ours went out (big: by zero copy, or large). */
void mode_note_send(struct sdp_sock *s, bool big);
/* A SinkAvail arrived stale. */
void mode_note_stale(struct sdp_sock *s);
/* One of our recv()s advertised its buffer. */
void mode_note_advert(struct sdp_sock *s);
/* One of our recv()s read the reply to a small send straight into its
 * buffer, the reply having come before it could advertise. */
void mode_note_reply(struct sdp_sock *s);
/* A held Transaction request had to go out alone. */
void mode_note_trans_miss(struct sdp_sock *s);

/* --- post.c: one connection's buffers, posting, readiness ------------------- */

/* A connection's memory, before its transport endpoint exists. */
struct sdp_conn *conn_new(void);
/* Receive ring and control slots, for s's SO_RCVBUF; must precede the
 * Hello or HelloAck, whose bufs field promises these buffers. */
int conn_setup_rx(struct sdp_conn *c, const struct sdp_sock *s);
/* Send ring, sized for the peer's receive buffers and s's SO_SNDBUF. */
int conn_setup_tx(struct sdp_conn *c, uint32_t peer_rcvsz, const struct sdp_sock *s);
/* The rings of c's nrx x rx_size and ntx x tx_size, made and registered
 * on c->ep; post: which receive buffers to post (NULL: all).  For a
 * connection moved in (move.c), whose sizes are its old owner's. */
int conn_make_rx(struct sdp_conn *c, const bool *post);
int conn_make_tx(struct sdp_conn *c);
/* Data moved on s: its buffers are in use (post.c, "Idle buffers"). */
void conn_moved(struct sdp_sock *s);
/* Buffers that grow with use (post.c, "Growing buffers"): the peer's
 * ChRcvBuf asking `want`; the transport gave back receive buffer slot;
 * the peer's ChRcvBufAck; our send ring takes the peer's new size once
 * it has drained. */
void conn_grow_rx(struct sdp_sock *s, uint32_t want);
void conn_rx_old_done(struct sdp_sock *s, uint32_t slot);
void conn_rcvbuf_acked(struct sdp_sock *s, uint32_t size);
void conn_tx_regrow(struct sdp_sock *s);
/* struct sdp_upcalls.idle: free buffers' pages go back once s is idle. */
bool conn_idle_sweep(struct sdp_sock *s);
/* Receive buffer slot's memory. */
uint8_t *rx_buf(struct sdp_conn *c, uint32_t slot);
/* Unread data copied out of the receive buffers (post.c): a message
 * just queued in one; every heap segment, when the connection goes (one
 * read to its end is freed where it leaves rxq). */
void conn_rx_spill_maybe(struct sdp_sock *s);
void conn_rx_free_heap(struct sdp_conn *c);
/* Remove queue entry i (0 = head) of c's receive queue. */
void rxq_remove(struct sdp_conn *c, uint32_t i);
/* A consumed receive buffer goes back (or waits, beyond SO_RCVBUF). */
int conn_repost(struct sdp_sock *s, uint32_t slot);
/* The transport reports nothing more on c's ep: out of the progress set. */
void conn_leave_progress(struct sdp_sock *s);
/* The transport's fd is dead (oti.h ep_fd_dead): out of every epoll set,
 * then quiet (ep_quiet).  s's lock held. */
void conn_quiet_dead_fd(struct sdp_sock *s);
/* Disconnect the transport (once). */
void conn_transport_down(struct sdp_sock *s);
/* The connection ended abnormally: err (positive) is what the
 * application will see once. */
void conn_set_reset(struct sdp_sock *s, int err);
/* The transport connection is gone (error: it failed) under an established
 * s: a reset, unless the peer's DisConn had come and this is no error;
 * then end of stream, and what we still had to send cannot go. */
void conn_lost(struct sdp_sock *s, bool error);
/* A transport post failed (data: ours was lost, a reset). */
void conn_post_failed(struct sdp_sock *s, int ret, bool data);
/* Post whatever may go now: data, control messages, a credit update. */
void conn_flush(struct sdp_sock *s);

/* Copy user data (at most limit bytes after skip) into send buffers and
 * post what credits allow. */
ssize_t conn_send(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip, size_t limit);
ssize_t conn_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		  size_t skip);
/* Free send space (bytes that a send would accept now). */
bool conn_writable(const struct sdp_sock *s);

/* Urgent data (post.c has the model).  conn_urg_rcvd(): the Data message
 * just queued (the last segment) carries OOB_PRES: the mark moves to its
 * last byte.  conn_rx_readable(): the bytes a recv() without MSG_OOB may
 * take (a peek cannot take an urgent byte at the head that it skips).
 * conn_at_mark(): SIOCATMARK.  conn_rx_inq(): FIONREAD, which Linux stops
 * at the mark. */
void conn_urg_rcvd(struct sdp_sock *s);
uint64_t conn_rx_readable(const struct sdp_sock *s, bool peek);
bool conn_at_mark(const struct sdp_conn *c);
uint64_t conn_rx_inq(const struct sdp_sock *s);
/* Tell sdp_set_notify()'s function of band (POLLIN, POLLOUT, POLLPRI). */
void sock_notify(struct sdp_sock *s, int band);
/* SO_RCVBUF changed: post or withhold receive buffers to match. */
void conn_rcvbuf_changed(struct sdp_sock *s);
/* Start the graceful close of the sending half (DisConn after data). */
void conn_shutdown_write(struct sdp_sock *s);
/* Abortive close: drop everything, peer sees a reset. */
void conn_abort(struct sdp_sock *s, int err);
/* Whether the connection is done and may be freed (orphans). */
bool conn_finished(const struct sdp_sock *s);
/* Protocol error on the connection: abort and count it. */
void conn_protocol_error(struct sdp_sock *s, const char *why);

/* Post every queued data buffer that credits allow, a held tail too. */
void conn_push(struct sdp_sock *s);
/* A payload-free message (or SrcAvail with its inline bytes in ext) from a
 * control slot; the caller checked credits, ctrl_slot_free() and
 * conn_fits(). */
int conn_post_ctrl(struct sdp_sock *s, uint8_t mid, const void *ext, size_t extlen);
bool ctrl_slot_free(const struct sdp_conn *c);
/* The transport may still touch memory we are about to give back (an
 * RDMA read in flight, a buffer the peer may still read) and the
 * connection is dead anyway: close the endpoint now, so it cannot. */
void conn_kill_ep(struct sdp_sock *s);
/* A held Transaction request goes now (the program polls instead of
 * waiting in recv()). */
void conn_end_hold(struct sdp_sock *s);

/* Post our SinkAvail; a held Transaction request goes with it. */
int conn_post_sink_avail(struct sdp_sock *s, const struct sdp_sinkah *a);
/* The largest Transaction request that rides on a SinkAvail. */
uint32_t conn_piggyback_max(const struct sdp_conn *c);

/* Current poll mask; caller holds s->lock. */
int sock_events_locked(struct sdp_sock *s);
/* Something changed: wake waiters and update the readiness fd.  edge:
 * new data or connection arrived (signal even if already readable). */
void sock_changed(struct sdp_sock *s, bool edge);
/* The eventfd whose watches this thread's changes do not write
 * (sdp_watch_mute), -1 for none. */
extern __thread int sock_muted_efd;


/* --- zcopy.c: Read Zcopy ------------------------------------------------------ */

/*
 * The part of iov after `skip` bytes that a blocking send may offer with
 * SrcAvail, or NULL (Bcopy).  *len gets its length (one piece).
 */
const void *zc_send_candidate(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
			      size_t skip, size_t *len);
/* Bytes after skip that go by Bcopy before a piece zc_send_candidate()
 * would take (SIZE_MAX: none). */
size_t zc_bcopy_limit(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
		      size_t skip);
/* How a zc_send() ended, besides the bytes it returns. */
enum zc_outcome {
	ZC_DONE,	/* the sink read it all (or some, then refused) */
	ZC_BCOPY,	/* use Bcopy for the rest of this call */
	ZC_CANCELLED,	/* cancelled for the caller's deadline or a signal */
	ZC_WAIT,	/* the peer's advert is to take it, once credits allow:
			 * wait for a change (write_zcopy.c) */
};
/*
 * Offer buf[0, len) with SrcAvail and wait until the sink is done with it.
 * Returns the bytes the sink took (>= 0; the rest is the caller's again),
 * or a negative errno when nothing was offered (-EAGAIN deadline, -EINTR).
 */
ssize_t zc_send(struct sdp_sock *s, const void *buf, size_t len, uint64_t deadline,
		enum zc_outcome *outcome);
/* The head of the receive queue is the unread rest of a SrcAvail. */
bool zc_rx_at_head(const struct sdp_conn *c);
/* A MSG_PEEK of want bytes would stop at a SrcAvail that could be staged. */
bool zc_peek_wants_stage(struct sdp_conn *c, size_t want);
/*
 * Read the SrcAvail at the head of the receive queue: straight into iov
 * (after skip bytes) when it has room, else into the staging buffer (then
 * conn_recv() serves it); with MSG_PEEK, stage it wherever it is queued.  Returns the bytes placed in iov, 0, or -errno;
 * *busy when another thread's read is in flight (wait for it).
 */
ssize_t zc_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, int flags,
		size_t skip, bool *busy);
/* conn.c's message handlers for the zero-copy messages. */
/* Before anything of it is queued: a protocol error (reported) or 0. */
int zc_src_avail_check(struct sdp_sock *s, const uint8_t *ext, uint32_t inline_len);
void zc_src_avail_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, const uint8_t *ext,
		       uint32_t inline_len);
void zc_rd_compl_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, uint32_t n);
void zc_send_sm_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h);
void zc_cancel_rcvd(struct sdp_sock *s);
/* Completion of an RDMA read (SDP_CTX_READ). */
void zc_read_done(struct sdp_sock *s, const struct oti_wc *wc);
/* Free the zero-copy state; after ep_close(). */
void zc_conn_free(struct sdp_conn *c);
/* Shared with write_zcopy.c: the connection cannot carry on; sleep until
 * something changes (or deadline) and drive; the largest one RDMA
 * operation; the registration cache of application buffers. */
bool zc_conn_dead(const struct sdp_sock *s);
void zc_wait(struct sdp_sock *s, uint64_t deadline, bool *intr);
uint64_t zc_op_max(const struct sdp_conn *c);
int zc_regcache_setup(struct sdp_conn *c);

/* --- write_zcopy.c: Write Zcopy and Transaction mode --------------------------- */

/* A recv() of iov (after skip) with these flags may advertise now. */
bool wz_may_advertise(const struct sdp_sock *s, const struct iovec *iov, int iovcnt,
		      size_t skip, int flags);
/*
 * Advertise iov's buffer (after skip), with a held Transaction request
 * aboard, and wait until the advert is over.  Returns the bytes the
 * source wrote there, 0 if the advert died (what killed it is queued), or
 * -errno (-EAGAIN deadline, -EINTR, -ENOBUFS: could not register).
 */
ssize_t wz_recv(struct sdp_sock *s, const struct iovec *iov, int iovcnt, size_t skip,
		uint64_t deadline);
/* Sink: a message with stream bytes arrived (counts, kills our advert). */
void wz_stream_msg_rcvd(struct sdp_sock *s);
/* Sink: our advert cannot be used any more. */
void wz_advert_dead(struct sdp_sock *s);
void wz_wr_compl_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, uint32_t n);
void wz_cancel_ack_rcvd(struct sdp_sock *s);
/* Source: the peer's SinkAvail (payload: Transaction bytes it carried). */
/* Before its payload is queued: a protocol error (reported) or 0. */
int wz_sink_avail_check(struct sdp_sock *s, uint32_t payload);
void wz_sink_avail_rcvd(struct sdp_sock *s, const struct sdp_bsdh *h, const uint8_t *ext,
			uint32_t payload);
void wz_sink_cancel_rcvd(struct sdp_sock *s);
/* Source: the peer's advert may take our next bytes now. */
bool wz_send_ready(const struct sdp_sock *s);
/* Write iov (after skip) into the peer's advert: returns bytes taken, 0
 * (use Bcopy), or -errno. */
ssize_t wz_send(struct sdp_sock *s, const struct iovec *iov, int iovcnt, size_t skip,
		bool dontwait);
/* Completion of an RDMA write (SDP_CTX_WRITE). */
void wz_write_done(struct sdp_sock *s, const struct oti_wc *wc);
/* Free the Write Zcopy state; after ep_close(). */
void wz_conn_free(struct sdp_conn *c);

/* --- conn.c: handshake, listeners, receive dispatch, driving --------------- */

/*
 * Drive one socket: transport events, completions, deferred sends.  Caller
 * holds s->lock.  Calls sock_changed() when anything visible changed.
 */
void conn_progress(struct sdp_sock *s);
/* Listener: take pending connection requests. */
void listener_progress(struct sdp_sock *s);
/* Active open after the caller validated everything. */
int conn_start_connect(struct sdp_sock *s, const struct sockaddr *dst, socklen_t len);
void conn_undefer(struct sdp_sock *s);
void conn_connect_started(struct sdp_sock *s);
void conn_free_rings(struct sdp_conn *c);
/* iWARP: repeat our first message until the passive side shows it saw it. */
void conn_nudge(struct sdp_sock *s);
/* Free the connection (its endpoint, buffers, zero-copy state). */
void conn_free(struct sdp_sock *s);
/* Reject pending requests and close the transport listener. */
void listener_free(struct sdp_sock *s);

/* --- move.c: a connection moved to another process (doc/fork.md) --------- */

/* s (locked, driven just now): its connection into *blob (malloc()ed,
 * *len bytes) and the transport's descriptor *fd, and s left closed
 * without a word to the peer; -EBUSY while it is not quiet, -ENOTCONN,
 * -EOPNOTSUPP (the transport's endpoints cannot move), s unchanged. */
int conn_export(struct sdp_sock *s, void **blob, size_t *len, int *fd);
/* A new socket (not in the table) for an exported connection; fd is
 * taken whatever the result.  flags: SOCK_NONBLOCK, SOCK_CLOEXEC. */
int conn_import(const void *blob, size_t len, int fd, int flags, struct sdp_sock **out);
/* The transport listeners' fds of s into the progress thread's set
 * (in_progress_set), all or none.  Caller holds s->lock. */
int listener_progress_add(struct sdp_sock *s);
/* Shared listeners (doc/fork.md): delta more (or fewer) accepting in
 * this process, and the transport told whether to take connections.
 * Caller holds s->lock. */
void listener_accepting(struct sdp_sock *s, int delta);
/* Before fork(): s is to be shared with the child, or -EOPNOTSUPP when
 * one of its transports cannot share a listener.  Caller holds s->lock. */
int listener_share(struct sdp_sock *s);

#endif /* SDP_ENGINE_H */
