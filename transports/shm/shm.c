/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * shm: the OTI backend for two processes on the same host and in the same
 * network namespace (doc/shm.md).  Messages go through two rings in one
 * shared memfd (shm_ring.h), one per direction; a Unix socket set up with
 * the connection carries the handshake and the memfd, then only wake-up
 * bytes, and tells each side when the other is gone.
 *
 * FINDING THE PEER
 *   An shm listener on (address A, port P) also listens on abstract Unix
 *   sockets (SOCK_SEQPACKET) named "libsdp-shm/v1/<family>/<A>/<P>"; a
 *   wildcard listener's name has the wildcard address, and a dual-stack
 *   IPv6 one takes the IPv4 wildcard name too when it is free.  Abstract
 *   names belong to the network namespace, so only a process there finds
 *   them.  The active side tries the exact name, then the wildcard of the
 *   family, and only for an address of this host (loopback, or one a
 *   socket can bind): when nothing answers, ep_open() says -ENODEV and the
 *   engine goes on to the next transport (tcp-fallback), synchronously.
 *   Both ends compare their network namespaces (the inode of
 *   /proc/self/ns/net) in the handshake.
 *
 * HANDSHAKE (over the Unix socket)
 *   CONNECT (active): its namespace, ring size, addresses and private
 *   data, with the memfd (SCM_RIGHTS), sealed against shrinking so that
 *   no page of the mapping can vanish under the other side.  The passive
 *   side checks the size (fstat) and the seals before it maps it.  ACCEPT
 *   or REJECT (passive): private data.
 *
 * DATA
 *   The memfd: a control page (the rings' indexes, each side's "asleep"
 *   flag), then the ring from the active side, then the one from the
 *   passive side.  A send is copied into the ring and completes at once;
 *   one that does not fit waits in a private queue.  A record lands in the
 *   oldest posted receive; records wait in the ring while none is posted.
 *   No RDMA read or write (the engine then uses Bcopy only).  Every index
 *   and length read from the shared page is checked (shm_ring.c); a breach
 *   resets the connection.
 *
 * WAKING (doc/shm.md has the whole protocol)
 *   ep_fd() is the Unix socket.  Each side has an "asleep" word in the
 *   control page, raised by that side only (ep_arm(), and every drive),
 *   with SHM_WANTS_ROOM while a send of its waits for room.  A side that
 *   puts a record in takes the other's word (exchange to 0) if it is up,
 *   and then writes one byte to the socket; one that takes a record out
 *   does so only if the word asks for room.  A side reads the socket only
 *   for the bytes it is owed (its word was taken), and once in
 *   SHM_QUIET_ARMS arms for an EOF.  A side inside a drive is sent no
 *   byte; one that has armed or ended a drive since it was woken is.
 *
 * GOING DOWN
 *   disconnect() puts a DISC record after the data; the peer sees it in
 *   order.  The peer's death closes the socket: EOF or ECONNRESET, and
 *   the connection is reset (what is in the ring is still delivered).
 *   Once down, a quiet eventfd takes the socket's number, as tcp-fallback
 *   does, so that nothing spins on a dead socket: when the engine, which
 *   has taken the number out of its epoll sets first, calls ep_quiet()
 *   (oti.h ep_fd_dead).
 *
 * LOCKING
 *   None inside: the engine holds the owning socket's lock around every
 *   call (oti.h).  The shared page is touched only with atomics.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "fdspace.h"
#include "log.h"
#include "epq/epq.h"
#include "oti.h"
#include "shm_ring.h"
#include "sys.h"
#include "tunables.h"

#define SHM "shm"

#define SHM_MAGIC 0x53444d31u	/* "SDM1" */
#define SHM_VERSION 1
/* The control page ahead of the rings. */
#define SHM_CTL_BYTES 4096u
#define SHM_RING_MIN (64u * 1024)
#define SHM_RING_MAX (64u * 1024 * 1024)
/* ep_arm() reads the socket at least once in this many arms (the
 * peer's EOF comes with no wake byte to announce it). */
#define SHM_QUIET_ARMS 8
/* Connections a listener holds before their CONNECT came. */
#define SHM_MAX_HALF 256
/* listen(0): attempts at a free port. */
#define SHM_LISTEN_TRIES 64

enum { SHM_CONNECT = 1, SHM_ACCEPT, SHM_REJECT };
enum { REC_DATA = 1, REC_DISC };

/* The control page.  Side 0 is the active side. */
struct shm_ctl {
	uint32_t magic, version;
	uint8_t pad[56];
	struct shm_ring_ctl ring[2];	/* ring[i]: written by side i */
	_Atomic uint32_t asleep[2];
	uint8_t pad2[56];
};

_Static_assert(sizeof(struct shm_ctl) <= SHM_CTL_BYTES, "control page");

/* The handshake's one message, both ways. */
struct shm_hs {
	uint32_t magic;
	uint16_t version, kind;
	uint64_t netns;
	uint32_t ring_size;
	uint32_t pdata_len;
	struct sockaddr_storage src, dst;	/* CONNECT: the active side's view */
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
};

static atomic_int shm_objects;
static uint64_t shm_netns;

/* --- addresses ------------------------------------------------------------ */

static bool is_any(const void *sa)
{
	const struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
}

static bool is_loopback(const void *sa)
{
	const struct sockaddr *s = sa;

	if (s->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
}

/* Is this one of the host's addresses (in our namespace)?  A UDP socket
 * binds only to those. */
static bool is_local(const struct sockaddr *sa)
{
	struct sockaddr_storage ss;
	bool ok;
	int fd;

	if (is_loopback(sa))
		return true;
	fd = sys.socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	memcpy(&ss, sa, epq_sa_len(sa->sa_family));
	epq_set_port(&ss, 0);
	ok = sys.bind(fd, (struct sockaddr *)&ss, epq_sa_len(sa->sa_family)) == 0;
	sys.close(fd);
	return ok;
}

/* sa's address, without the port. */
static const char *addr_str(const struct sockaddr *sa, char a[INET6_ADDRSTRLEN])
{
	strcpy(a, "?");
	if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, INET6_ADDRSTRLEN);
	else
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, INET6_ADDRSTRLEN);
	return a;
}

/* The abstract name for (address of sa, port). */
static socklen_t unix_name(struct sockaddr_un *un, const struct sockaddr *sa, uint16_t port)
{
	char a[INET6_ADDRSTRLEN];
	int n;

	addr_str(sa, a);
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "libsdp-shm/v1/%d/%s/%u",
		     sa->sa_family == AF_INET6 ? 6 : 4, a, port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void wildcard_of(struct sockaddr_storage *w, int family)
{
	memset(w, 0, sizeof(*w));
	w->ss_family = (sa_family_t)family;
}

static int unix_socket(void)
{
	return FDSPACE_MAKE(sys.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

/* --- objects -------------------------------------------------------------- */

struct shm_mr {
	struct oti_mr pub;
};

/* A send waiting for room in the ring. */
struct shm_send {
	const uint8_t *addr;
	uint32_t len;
	uint64_t ctx;
};

enum shm_state {
	SS_ACTIVE,	/* active: before ACCEPT */
	SS_PASSIVE,	/* passive: before accept() */
	SS_UP,
	SS_DOWN,
};

struct shm_ep {
	int fd;			/* the Unix socket; a quiet eventfd once ep_quiet() */
	/* The socket will stay ready for good (the peer is gone): it waits
	 * for ep_quiet(), which gives its number to a quiet eventfd. */
	bool fd_dead;
	bool fd_quieted;
	int side;		/* 0 active, 1 passive */
	enum shm_state state;
	bool connect_sent;
	bool shut_wanted;	/* disconnect(): DISC once the queue is out */
	bool down_held;		/* DISCONNECTED waits for an empty CQ */
	int down_status;
	/* The socket said the peer is gone (EOF, reset): what it left in
	 * the ring is still delivered, then the connection goes down. */
	bool peer_gone;
	int gone_status;
	/* Our asleep word (see "waking"): raised by us and not yet seen
	 * taken; the wake bytes the peer sent for its takes that we have not
	 * read; arms since the socket was last read. */
	bool raised;
	uint32_t owed;
	uint32_t quiet_arms;
	/* A waiter polls the rings (ep_poll()) and will arm before it
	 * sleeps: our word stays down, so the peer sends no byte for what
	 * the waiter sees anyway. */
	bool polling;
	int memfd;		/* active: until CONNECT took it */
	struct shm_ctl *ctl;
	size_t map_len;
	uint32_t ring_size;
	struct shm_ring tx, rx;
	struct sockaddr_storage local, peer;

	/* Events and completions; every operation posted and not yet
	 * completed has a CQ place kept (cq_owed), so a completion is
	 * never dropped. */
	struct epq q;

	struct shm_send *sq;
	uint32_t sq_cap, sq_head, sq_count;
};

static inline struct shm_ep *EP(struct oti_ep *ep)
{
	return (struct shm_ep *)ep;
}

/* --- the shared memory ---------------------------------------------------- */

static size_t map_bytes(uint32_t ring_size)
{
	return SHM_CTL_BYTES + 2 * (size_t)ring_size;
}

/*
 * The ring size: room for every message the engine can have posted at
 * once, which its credits bound to the peer's receive buffers (recv_bufs
 * of buf_size bytes; ours stand for the peer's, which run the same
 * tunables), plus a few control messages.  So a posted send never has to
 * wait in this process's memory, which would die with it: what a process
 * sent before it exited is in the shared ring, as TCP's is in the
 * kernel, and the peer still reads it.
 */
static uint32_t ring_size_for_engine(void)
{
	uint64_t msg = (uint64_t)tun_int(TUN_buf_size) + SHM_REC_HDR + 8;
	uint64_t want = ((uint64_t)tun_int(TUN_recv_bufs) + 4) * msg;
	uint32_t size = SHM_RING_MIN;

	if (want < 2 * msg)
		want = 2 * msg;
	while (size < want && size < SHM_RING_MAX)
		size *= 2;
	return size;
}

static int attach_rings(struct shm_ep *e)
{
	uint8_t *base = (uint8_t *)e->ctl;
	uint8_t *ring[2] = { base + SHM_CTL_BYTES, base + SHM_CTL_BYTES + e->ring_size };
	int me = e->side, peer = 1 - e->side;

	if (shm_ring_attach(&e->tx, &e->ctl->ring[me], ring[me], e->ring_size) ||
	    shm_ring_attach(&e->rx, &e->ctl->ring[peer], ring[peer], e->ring_size))
		return -EINVAL;
	return 0;
}

/* Active side: a fresh memfd of the rings, sealed so that it can never
 * shrink under the peer's mapping. */
static int make_memfd(struct shm_ep *e)
{
	size_t len = map_bytes(e->ring_size);
	int fd = FDSPACE_MAKE(memfd_create("libsdp-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
	void *p;

	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)len) < 0 ||
	    sys.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int err = -errno;

		fdspace_close(fd);
		return err;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		fdspace_close(fd);
		return err;
	}
	e->memfd = fd;
	e->ctl = p;
	e->map_len = len;
	e->ctl->magic = SHM_MAGIC;
	e->ctl->version = SHM_VERSION;
	return attach_rings(e);
}

/* Passive side: map what the active side sent, after checking that it is
 * as large as the rings it announced and cannot shrink. */
static int map_peer_memfd(int fd, uint32_t ring_size, struct shm_ctl **out, size_t *len)
{
	struct stat st;
	int seals;
	void *p;

	if (ring_size < SHM_RING_MIN || ring_size > SHM_RING_MAX || (ring_size & (ring_size - 1)))
		return -EPROTO;
	*len = map_bytes(ring_size);
	seals = sys.fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != *len ||
	    seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPROTO;
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

/* --- waking ----------------------------------------------------------------- */

/*
 * The full fence of the wake protocol's store-fence-load (doc/shm.md).
 * ThreadSanitizer does not model fences, and gcc says so with -Wtsan,
 * an error under -Werror (the TSan build): every access to the shared
 * page is atomic, so there is no data race for it to miss, only the
 * ordering, which it does not check anyway.
 */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void shm_fence(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic pop
#endif

/*
 * A side's "asleep" word in the control page: 0 while it is awake (or
 * after the other side took the word and sent its wake byte), else
 * SHM_ASLEEP, plus SHM_WANTS_ROOM while a send of its waits for room in
 * its ring.  Only the side itself raises the word; the other only takes
 * it (exchange to 0), and writes one byte for each time it took it.
 */
#define SHM_ASLEEP 1u
#define SHM_WANTS_ROOM 2u

static uint32_t sleep_word(struct shm_ep *e)
{
	return SHM_ASLEEP | (e->sq_count || e->shut_wanted ? SHM_WANTS_ROOM : 0);
}

/*
 * We changed a ring the peer may be waiting on: wake it if it sleeps for
 * what we did (why: SHM_ASLEEP, a record put in; SHM_WANTS_ROOM, one
 * taken out).  A take wakes only a peer with a send waiting: the records
 * of a request/response exchange always fit, and waking the sender for
 * room it does not need cost a byte through the socket and a drain per
 * message (doc/shm.md).
 */
static void wake_peer(struct shm_ep *e, uint32_t why)
{
	static const uint8_t b = 1;
	_Atomic uint32_t *w = &e->ctl->asleep[1 - e->side];

	shm_fence();
	if ((atomic_load_explicit(w, memory_order_relaxed) & why) && atomic_exchange(w, 0))
		(void)sys.send(e->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Our word raised to v, or lowered (v 0).  A word the peer took since
 * we raised it owes us the byte it writes for it. */
static void set_word(struct shm_ep *e, uint32_t v)
{
	uint32_t old = atomic_exchange(&e->ctl->asleep[e->side], v);

	if (e->raised && !old)
		e->owed++;
	e->raised = v != 0;
}

/* Has the peer taken our word?  Then its byte is owed. */
static void see_word(struct shm_ep *e)
{
	if (e->raised && !atomic_load(&e->ctl->asleep[e->side])) {
		e->owed++;
		e->raised = false;
	}
}

/* --- going down --------------------------------------------------------------- */

static bool shm_ep_fd_dead(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	return e->fd_dead && !e->fd_quieted;
}

/* The engine has taken the socket's number out of its epoll sets. */
static void shm_ep_quiet(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	if (!shm_ep_fd_dead(oep))
		return;
	e->fd_quieted = true;
	/* On failure the socket stays: spurious wake-ups only. */
	(void)fdspace_quiet(e->fd);
}

static void flush_all(struct shm_ep *e)
{
	while (e->sq_count) {
		epq_push_wc(&e->q, e->sq[e->sq_head].ctx, OTI_WC_SEND, -ECANCELED, 0);
		e->sq_head = (e->sq_head + 1) % e->sq_cap;
		e->sq_count--;
	}
	epq_cancel_recvs(&e->q);
}

static void go_down(struct shm_ep *e, int status)
{
	enum shm_state was = e->state;

	if (was == SS_DOWN)
		return;
	e->state = SS_DOWN;
	flush_all(e);
	/* On an error, closing our reference to the socket (ep_quiet(),
	 * once the engine has let go of its number) tells the peer, once
	 * no other process holds one: never shutdown(), which would
	 * end the socket for a forked process that shares it too.  An
	 * orderly end keeps the socket until ep_close(), as tcp-fallback
	 * does: a descriptor made now, by whichever thread drives, would
	 * take a low number for a moment under the application's feet. */
	if (status)
		e->fd_dead = true;
	if (was == SS_ACTIVE) {
		epq_push_event(&e->q, OTI_EV_UNREACHABLE, status && status != -ECONNRESET ? status
									 : -ECONNREFUSED,
			   NULL, 0);
		return;
	}
	e->down_held = true;
	e->down_status = status;
}

static void protocol_error(struct shm_ep *e, const char *why)
{
	sdp_warn(SHM, "peer broke the transport's rules (%s): connection reset", why);
	go_down(e, -EPROTO);
}

/* --- moving data ------------------------------------------------------------- */

/*
 * A send waits for room: if this side's word is up (a sleep may follow
 * without a new arm: an epoll set's report drives and sleeps), the
 * peer's takes must wake it too.  Raised, then looked again (Dekker's
 * pattern, as in ep_arm()): true when room came meanwhile.
 */
static bool ask_room(struct shm_ep *e)
{
	_Atomic uint32_t *w = &e->ctl->asleep[e->side];
	uint32_t v = atomic_load(w);

	while (v && !(v & SHM_WANTS_ROOM))
		if (atomic_compare_exchange_weak(w, &v, v | SHM_WANTS_ROOM)) {
			shm_fence();
			return shm_ring_room(&e->tx, e->sq_count ? e->sq[e->sq_head].len : 0) != 0;
		}
	return false;
}

/* Queued sends into the ring while they fit; each completes there. */
static void flush_sends(struct shm_ep *e)
{
	bool put;

again:
	put = false;
	while (e->sq_count && e->state == SS_UP) {
		struct shm_send *s = &e->sq[e->sq_head];
		int ret = shm_ring_put(&e->tx, REC_DATA, s->addr, s->len);

		if (ret == -EAGAIN)
			break;
		if (ret) {
			protocol_error(e, "impossible ring index");
			return;
		}
		put = true;
		epq_push_wc(&e->q, s->ctx, OTI_WC_SEND, 0, 0);
		e->sq_head = (e->sq_head + 1) % e->sq_cap;
		e->sq_count--;
	}
	if (e->state == SS_UP && e->shut_wanted && !e->sq_count) {
		int ret = shm_ring_put(&e->tx, REC_DISC, NULL, 0);

		if (ret == 0) {
			put = true;
			wake_peer(e, SHM_ASLEEP);
			go_down(e, 0);
			return;
		}
		if (ret != -EAGAIN) {
			protocol_error(e, "impossible ring index");
			return;
		}
	}
	if (put)
		wake_peer(e, SHM_ASLEEP);
	if (e->state == SS_UP && (e->sq_count || e->shut_wanted) && ask_room(e))
		goto again;
}

/* Records into posted receives. */
static void deliver(struct shm_ep *e)
{
	bool took = false;

	while (e->state == SS_UP) {
		uint32_t kind, len;
		int ret = shm_ring_peek(&e->rx, &kind, &len);

		if (ret == -EAGAIN)
			break;
		if (ret) {
			protocol_error(e, "impossible ring index or record");
			return;
		}
		if (kind == REC_DISC) {
			if (len) {
				protocol_error(e, "malformed disconnect");
				return;
			}
			(void)shm_ring_take(&e->rx, NULL);
			go_down(e, 0);
			return;
		}
		if (kind != REC_DATA) {
			protocol_error(e, "unknown record");
			return;
		}
		struct epq_recv *r = epq_recv_head(&e->q);

		if (!r)
			break;	/* the record waits for the engine's next receive */
		if (len > r->len) {
			epq_recv_done(&e->q, -EMSGSIZE, 0);
			protocol_error(e, "a message longer than the receive buffer");
			return;
		}
		(void)shm_ring_take(&e->rx, r->addr);
		epq_recv_done(&e->q, 0, len);
		took = true;
	}
	if (took && e->state == SS_UP)
		wake_peer(e, SHM_WANTS_ROOM);
}

/* Active side: the answer to CONNECT. */
static void read_answer(struct shm_ep *e)
{
	struct shm_hs hs;
	ssize_t n = sys.recv(e->fd, &hs, sizeof(hs), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n < (ssize_t)offsetof(struct shm_hs, pdata) || hs.magic != SHM_MAGIC ||
	    hs.version != SHM_VERSION || hs.pdata_len > OTI_MAX_PRIVATE_DATA ||
	    (size_t)n < offsetof(struct shm_hs, pdata) + hs.pdata_len ||
	    (hs.kind != SHM_ACCEPT && hs.kind != SHM_REJECT)) {
		go_down(e, n < 0 ? -errno : -ECONNREFUSED);
		return;
	}
	if (hs.kind == SHM_REJECT) {
		epq_push_event(&e->q, OTI_EV_REJECTED, -ECONNREFUSED, hs.pdata, hs.pdata_len);
		e->state = SS_DOWN;	/* the peer closes */
		flush_all(e);
		return;
	}
	e->state = SS_UP;
	epq_push_event(&e->q, OTI_EV_ESTABLISHED, 0, hs.pdata, hs.pdata_len);
}

/* The peer is gone and nothing of its is left in the ring: down (a DISC
 * record, delivered in order, has taken it down orderly already). */
static void check_gone(struct shm_ep *e)
{
	uint32_t kind, len;

	if (e->peer_gone && e->state == SS_UP && shm_ring_peek(&e->rx, &kind, &len) == -EAGAIN)
		go_down(e, e->gone_status);
}

/* Wake-up bytes out of the socket, up to 16 in one system call (one
 * recv() each, and one more to see it empty, cost two per wake-up).  At
 * its EOF or reset the peer is gone: the socket is dead, for a quiet
 * eventfd to take its place (ep_quiet(): an EOF would keep it readable
 * while the engine has not yet taken what the ring holds). */
static void drain_socket(struct shm_ep *e)
{
	enum { N = 16 };
	uint8_t buf[N];
	struct iovec iov[N];
	struct mmsghdr mm[N];

	for (int i = 0; i < N; i++) {
		iov[i] = (struct iovec){ .iov_base = &buf[i], .iov_len = 1 };
		mm[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1 } };
	}
	e->quiet_arms = 0;
	while (!e->peer_gone) {
		int n = sys.recvmmsg(e->fd, mm, N, MSG_DONTWAIT, NULL);
		int eof = 0;

		if (n > 0)
			e->owed = (uint32_t)n >= e->owed ? 0 : e->owed - (uint32_t)n;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		for (int i = 0; i < n && !eof; i++)
			eof = mm[i].msg_len == 0;
		if (n > 0 && !eof) {
			if (n < N)
				break;	/* empty now: recvmmsg stopped at EAGAIN */
			continue;
		}
		e->peer_gone = true;
		/* EOF: as tcp-fallback reports its peer's EOF (the engine tells a
		 * close from a death by the DisConn it did or did not get). */
		e->gone_status = n < 0 ? -errno : 0;
		e->fd_dead = true;
	}
	check_gone(e);
}

static bool ring_work(struct shm_ep *e);

/*
 * Every drive leaves this side's word raised, as ep_arm() does: the
 * engine may sleep on the fd after a drive without arming (an epoll set's
 * report), so a drive must leave the fd able to wake it; but not while a
 * waiter polls the rings (ep_poll()), which arms or ends its polling
 * (ep_poll_end()) before anybody sleeps.  The socket is read only for the
 * bytes the peer owes us (see_word()).
 */
static void ep_progress(struct shm_ep *e)
{
	if (e->state == SS_ACTIVE && e->connect_sent) {
		read_answer(e);
		return;
	}
	if (e->state != SS_UP)
		return;
	see_word(e);
	if (!e->peer_gone && e->owed)
		drain_socket(e);
	for (int round = 0; round < 64 && e->state == SS_UP; round++) {
		deliver(e);
		flush_sends(e);
		if (e->state != SS_UP)
			break;
		if (!e->polling) {
			set_word(e, sleep_word(e));
			shm_fence();
		}
		if (!ring_work(e))
			break;
	}
	check_gone(e);
}

/* --- init, probe, caps ------------------------------------------------------ */

static int shm_init(void)
{
	struct stat st;

	/* Without a namespace to compare, peers cannot be told apart. */
	if (stat("/proc/self/ns/net", &st) < 0)
		return -ENODEV;
	shm_netns = (uint64_t)st.st_ino;
	return 0;
}

static void shm_fini(void)
{
	int left = atomic_load(&shm_objects);

	if (left)
		sdp_dbg(SHM, "fini with %d endpoints or listeners still open", left);
}

static int shm_probe(const struct sockaddr *local, const struct sockaddr *remote)
{
	const struct sockaddr *sa[2] = { local, remote };

	for (int i = 0; i < 2; i++)
		if (sa[i] && sa[i]->sa_family != AF_INET && sa[i]->sa_family != AF_INET6)
			return -ENODEV;
	return 0;
}

static void shm_query_caps(struct oti_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->flags = OTI_CAP_SOFTWARE | OTI_CAP_HOST_LOCAL;
	caps->max_private_data = OTI_MAX_PRIVATE_DATA;
	caps->max_inline = 256;
	caps->max_send_wr = 4096;
	caps->max_recv_wr = 4096;
	caps->max_msg_size = shm_ring_max_payload(ring_size_for_engine());
}

/* --- passive side -------------------------------------------------------------- */

struct shm_half {
	struct shm_half *next;
	int fd;
	uint64_t since_ns;
	/* Once its CONNECT came: */
	struct shm_ctl *ctl;
	size_t map_len;
	uint32_t ring_size;
	struct sockaddr_storage src, dst;
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	size_t pdata_len;
};

struct oti_connreq {
	struct shm_half h;
};

struct shm_listener {
	int lfd[2], nlfd;
	int epfd;
	bool taking;		/* lfd[] are in epfd and accept4()ed from */
	struct sockaddr_storage name;
	struct shm_half *half;	/* waiting for CONNECT */
	int nhalf;
	struct shm_half *ready, *ready_tail;
	struct shm_half *given;
};

static inline struct shm_listener *LS(struct oti_listener *l)
{
	return (struct shm_listener *)l;
}

static void half_unlink(struct shm_half **list, struct shm_half *h)
{
	for (struct shm_half **pp = list; *pp; pp = &(*pp)->next) {
		if (*pp == h) {
			*pp = h->next;
			return;
		}
	}
}

static void half_free(struct shm_half *h)
{
	if (h->ctl)
		munmap(h->ctl, h->map_len);
	if (h->fd >= 0)
		fdspace_close(h->fd);
	free(h);
}

/* Bind and listen on the abstract name of (sa, port). */
static int listen_name(const struct sockaddr *sa, uint16_t port, int *out)
{
	struct sockaddr_un un;
	socklen_t len = unix_name(&un, sa, port);
	int fd = unix_socket();

	if (fd < 0)
		return fd;
	if (sys.bind(fd, (struct sockaddr *)&un, len) < 0 || sys.listen(fd, SOMAXCONN) < 0) {
		int err = -errno;

		fdspace_close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

static int random_port(uint16_t *port)
{
	uint16_t r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		return -EAGAIN;
	*port = (uint16_t)(32768 + r % (61000 - 32768));
	return 0;
}

static int shm_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog, unsigned flags,
		      struct oti_listener **out)
{
	struct shm_listener *l;
	struct sockaddr_storage ss;
	uint16_t port;
	int ret;

	(void)backlog;
	ret = epq_check_addr(addr, addrlen);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	memcpy(&ss, addr, epq_sa_len(addr->sa_family));
	port = epq_get_port(&ss);
	if (port) {
		ret = listen_name((struct sockaddr *)&ss, port, &l->lfd[0]);
	} else {
		/* Alone, with no other transport to choose the port: one
		 * whose name is free (the engine lets another transport choose
		 * when there is one, OTI_CAP_HOST_LOCAL). */
		ret = -EADDRINUSE;
		for (int i = 0; i < SHM_LISTEN_TRIES && ret == -EADDRINUSE; i++) {
			ret = random_port(&port);
			if (!ret)
				ret = listen_name((struct sockaddr *)&ss, port, &l->lfd[0]);
		}
	}
	if (ret) {
		free(l);
		return ret;
	}
	l->nlfd = 1;
	l->taking = true;
	epq_set_port(&ss, port);
	l->name = ss;
	if (ss.ss_family == AF_INET6 && is_any(&ss) && !(flags & OTI_LISTEN_V6ONLY)) {
		struct sockaddr_storage v4;

		/* Dual stack: IPv4 peers too, unless an IPv4 listener has
		 * the port already. */
		wildcard_of(&v4, AF_INET);
		if (listen_name((struct sockaddr *)&v4, port, &l->lfd[1]) == 0)
			l->nlfd = 2;
	}
	l->epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));
	ret = l->epfd < 0 ? l->epfd : 0;
	for (int i = 0; !ret && i < l->nlfd; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };

		if (sys.epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd[i], &ev) < 0)
			ret = -errno;
	}
	if (ret) {
		for (int i = 0; i < l->nlfd; i++)
			fdspace_close(l->lfd[i]);
		if (l->epfd >= 0)
			fdspace_close(l->epfd);
		free(l);
		return ret;
	}
	atomic_fetch_add(&shm_objects, 1);
	sdp_dbg(SHM, "listening on port %u", port);
	*out = (struct oti_listener *)l;
	return 0;
}

static int shm_listener_name(struct oti_listener *ol, struct sockaddr *addr, socklen_t *addrlen)
{
	struct shm_listener *l = LS(ol);
	socklen_t len = epq_sa_len(l->name.ss_family);

	if (*addrlen < len)
		return -EINVAL;
	memcpy(addr, &l->name, len);
	*addrlen = len;
	return 0;
}

static int shm_listener_fd(struct oti_listener *ol)
{
	return LS(ol)->epfd;
}

static int shm_listener_arm(struct oti_listener *ol)
{
	return LS(ol)->ready ? -EAGAIN : 0;
}

static void half_drop(struct shm_listener *l, struct shm_half **pp)
{
	struct shm_half *h = *pp;

	*pp = h->next;
	(void)sys.epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	half_free(h);
	l->nhalf--;
}

static void take_new(struct shm_listener *l)
{
	for (int i = 0; i < l->nlfd; i++) {
		for (;;) {
			int fd = FDSPACE_MAKE(sys.accept4(l->lfd[i], NULL, NULL,
							  SOCK_NONBLOCK | SOCK_CLOEXEC));

			if (fd < 0)
				break;
			struct shm_half *h = calloc(1, sizeof(*h));
			struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };

			if (!h || sys.epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
				free(h);
				fdspace_close(fd);
				continue;
			}
			h->fd = fd;
			h->since_ns = mono_ns();
			h->next = l->half;
			l->half = h;
			if (++l->nhalf > SHM_MAX_HALF) {
				struct shm_half **pp = &l->half;

				while ((*pp)->next)
					pp = &(*pp)->next;
				half_drop(l, pp);
			}
		}
	}
}

/* Close every descriptor a message carried. */
static int take_fds(struct msghdr *mh, int *fd)
{
	int n = 0;

	*fd = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)(void *)CMSG_DATA(c);

		for (size_t i = 0; i < k; i++) {
			if (*fd < 0 && n == 0)
				*fd = fds[i];
			else
				sys.close(fds[i]);
			n++;
		}
	}
	return n;
}

/* A half-open connection's CONNECT: 1 done (a request), 0 not yet, -1 drop. */
static int read_connect_in(struct shm_half *h)
{
	struct shm_hs hs;
	union {
		struct cmsghdr align;
		uint8_t buf[CMSG_SPACE(sizeof(int) * 4)];
	} cm;
	struct iovec iov = { &hs, sizeof(hs) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	ssize_t n = sys.recvmsg(h->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int memfd, nfd;

	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	nfd = take_fds(&mh, &memfd);
	if (n < (ssize_t)offsetof(struct shm_hs, pdata) || nfd != 1 ||
	    (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || hs.magic != SHM_MAGIC ||
	    hs.version != SHM_VERSION || hs.kind != SHM_CONNECT || hs.netns != shm_netns ||
	    hs.pdata_len > OTI_MAX_PRIVATE_DATA ||
	    (size_t)n < offsetof(struct shm_hs, pdata) + hs.pdata_len ||
	    epq_check_addr((struct sockaddr *)&hs.src, sizeof(hs.src)) ||
	    epq_check_addr((struct sockaddr *)&hs.dst, sizeof(hs.dst))) {
		if (memfd >= 0)
			sys.close(memfd);
		return -1;
	}
	int ret = map_peer_memfd(memfd, hs.ring_size, &h->ctl, &h->map_len);

	sys.close(memfd);
	if (ret)
		return -1;
	if (h->ctl->magic != SHM_MAGIC) {
		munmap(h->ctl, h->map_len);
		h->ctl = NULL;
		return -1;
	}
	h->ring_size = hs.ring_size;
	h->src = hs.src;
	h->dst = hs.dst;
	h->pdata_len = hs.pdata_len;
	memcpy(h->pdata, hs.pdata, hs.pdata_len);
	return 1;
}

/* The memfd a CONNECT carries has a low number until it is closed: in a
 * window (common/fdspace.h). */
static int read_connect(struct shm_half *h)
{
	fdspace_making();
	int r = read_connect_in(h);

	fdspace_unmade();
	return r;
}

static void read_halves(struct shm_listener *l)
{
	uint64_t now = mono_ns();
	uint64_t limit = (uint64_t)tun_int(TUN_connect_timeout_ms) * 1000000ull;

	for (struct shm_half **pp = &l->half; *pp;) {
		struct shm_half *h = *pp;
		int r = read_connect(h);

		if (r < 0 || (r == 0 && now - h->since_ns > limit)) {
			half_drop(l, pp);
			continue;
		}
		if (r == 0) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		(void)sys.epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
		l->nhalf--;
		h->next = NULL;
		if (l->ready_tail)
			l->ready_tail->next = h;
		else
			l->ready = h;
		l->ready_tail = h;
	}
}

static int shm_get_connreq(struct oti_listener *ol, struct oti_connreq **req, void *pdata,
			   size_t *pdata_len, struct sockaddr_storage *peer)
{
	struct shm_listener *l = LS(ol);

	if (!l->ready) {
		if (l->taking)
			take_new(l);
		read_halves(l);
	}
	struct shm_half *h = l->ready;

	if (!h)
		return -EAGAIN;
	l->ready = h->next;
	if (!l->ready)
		l->ready_tail = NULL;
	h->next = l->given;
	l->given = h;
	*pdata_len = h->pdata_len;
	memcpy(pdata, h->pdata, h->pdata_len);
	*peer = h->src;
	*req = (struct oti_connreq *)h;
	return 0;
}

static void send_answer(int fd, uint16_t kind, const void *pdata, size_t len)
{
	struct shm_hs hs = { .magic = SHM_MAGIC, .version = SHM_VERSION, .kind = kind,
			     .netns = shm_netns, .pdata_len = (uint32_t)len };

	if (len)
		memcpy(hs.pdata, pdata, len);
	/* A fresh socket's buffer takes this, or the peer is gone. */
	(void)sys.send(fd, &hs, offsetof(struct shm_hs, pdata) + len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static int shm_reject(struct oti_listener *ol, struct oti_connreq *req, const void *pdata,
		      size_t len)
{
	half_unlink(&LS(ol)->given, &req->h);
	if (len > OTI_MAX_PRIVATE_DATA)
		len = OTI_MAX_PRIVATE_DATA;
	send_answer(req->h.fd, SHM_REJECT, pdata, len);
	half_free(&req->h);
	return 0;
}

static void shm_listener_close(struct oti_listener *ol)
{
	struct shm_listener *l = LS(ol);

	for (int i = 0; i < l->nlfd; i++)
		fdspace_close(l->lfd[i]);
	while (l->half)
		half_drop(l, &l->half);
	for (struct shm_half **list = &l->ready; list; list = list == &l->ready ? &l->given : NULL) {
		while (*list) {
			struct shm_half *h = *list;

			*list = h->next;
			send_answer(h->fd, SHM_REJECT, NULL, 0);
			half_free(h);
		}
	}
	fdspace_close(l->epfd);
	free(l);
	atomic_fetch_sub(&shm_objects, 1);
}

/* lfd[] into (on) or out of l's epoll set; false if one could not go in. */
static bool listen_fds_watched(struct shm_listener *l, bool on)
{
	bool ok = true;

	for (int i = 0; i < l->nlfd; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };

		if (sys.epoll_ctl(l->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->lfd[i], &ev) < 0 &&
		    on && errno != EEXIST)
			ok = false;
	}
	return ok;
}

static void shm_listener_take(struct oti_listener *ol, bool on)
{
	struct shm_listener *l = LS(ol);

	if (on == l->taking)
		return;
	/* Not all in: not taking, and asked again at the next accept. */
	if (listen_fds_watched(l, on) || !on)
		l->taking = on;
	else
		listen_fds_watched(l, false);
}

/* The requests in list were the parent's: this process's copies of their
 * socket and mapping go, the parent's stay. */
static void forget_list(struct shm_half **list)
{
	while (*list) {
		struct shm_half *h = *list;

		*list = h->next;
		half_free(h);
	}
}

static int shm_listener_forked(struct oti_listener *ol)
{
	struct shm_listener *l = LS(ol);

	forget_list(&l->half);
	forget_list(&l->ready);
	forget_list(&l->given);
	l->ready_tail = NULL;
	l->nhalf = 0;
	/* The inherited epoll instance is the parent's too. */
	fdspace_close(l->epfd);
	l->epfd = FDSPACE_MAKE(sys.epoll_create1(EPOLL_CLOEXEC));
	if (l->epfd < 0)
		return l->epfd;
	if (l->taking && !listen_fds_watched(l, true)) {
		listen_fds_watched(l, false);
		l->taking = false;
	}
	return 0;
}

/* --- endpoints ---------------------------------------------------------------- */

static struct shm_ep *ep_new(int fd, int side)
{
	struct shm_ep *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->fd = fd;
	e->side = side;
	e->memfd = -1;
	atomic_fetch_add(&shm_objects, 1);
	return e;
}

static int shm_ep_accept_open(struct oti_listener *ol, struct oti_connreq *req,
			      struct oti_ep **out)
{
	struct shm_listener *l = LS(ol);
	struct shm_half *h = &req->h;
	struct shm_ep *e;

	half_unlink(&l->given, h);
	e = ep_new(h->fd, 1);
	if (!e) {
		half_free(h);
		return -ENOMEM;
	}
	e->state = SS_PASSIVE;
	e->ctl = h->ctl;
	e->map_len = h->map_len;
	e->ring_size = h->ring_size;
	e->peer = h->src;
	e->local = h->dst;
	if (is_any(&l->name) == false)
		memcpy(&e->local, &l->name, epq_sa_len(l->name.ss_family));
	epq_set_port(&e->local, epq_get_port(&l->name));
	free(h);
	if (attach_rings(e)) {
		/* Cannot happen: the size was checked. */
		munmap(e->ctl, e->map_len);
		fdspace_close(e->fd);
		free(e);
		atomic_fetch_sub(&shm_objects, 1);
		return -EPROTO;
	}
	*out = (struct oti_ep *)e;
	return 0;
}

static int shm_accept(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct shm_ep *e = EP(oep);

	if (e->state != SS_PASSIVE || len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	send_answer(e->fd, SHM_ACCEPT, pdata, len);
	e->state = SS_UP;
	epq_push_event(&e->q, OTI_EV_ESTABLISHED, 0, NULL, 0);
	return 0;
}

static int shm_ep_reject(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct shm_ep *e = EP(oep);

	if (e->state != SS_PASSIVE || len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	send_answer(e->fd, SHM_REJECT, pdata, len);
	e->state = SS_DOWN;
	return 0;
}

/* A listener of ours for dst, if one is there: the connected socket. */
static int find_listener(const struct sockaddr *dst, int *out)
{
	struct sockaddr_storage w;
	const struct sockaddr *try[2] = { dst, NULL };
	uint16_t port = epq_get_port(dst);

	if (!port || !is_local(dst))
		return -ENODEV;
	if (!is_any(dst)) {
		wildcard_of(&w, dst->sa_family);
		try[1] = (struct sockaddr *)&w;
	}
	for (int i = 0; i < 2 && try[i]; i++) {
		struct sockaddr_un un;
		socklen_t len = unix_name(&un, try[i], port);
		int fd = unix_socket();

		if (fd < 0)
			return fd;
		if (sys.connect(fd, (struct sockaddr *)&un, len) == 0) {
			*out = fd;
			return 0;
		}
		fdspace_close(fd);
	}
	return -ENODEV;
}

static int shm_ep_open(const struct sockaddr *dst, socklen_t dstlen, const struct sockaddr *src,
		       socklen_t srclen, struct oti_ep **out)
{
	char a[INET6_ADDRSTRLEN];
	struct shm_ep *e;
	uint16_t port;
	int fd, ret = epq_check_addr(dst, dstlen);

	if (ret)
		return ret;
	if (src && (ret = epq_check_addr(src, srclen)))
		return ret;
	if (src && src->sa_family != dst->sa_family)
		return -EAFNOSUPPORT;
	ret = find_listener(dst, &fd);
	if (ret) {
		/* The usual case for a peer elsewhere, in another network
		 * namespace (whose abstract names we cannot see) or without
		 * libsdp: the engine goes on to the next transport. */
		sdp_conn_log(SHM, "nobody listens on shm at %s port %u: next transport",
			     addr_str(dst, a), epq_get_port(dst));
		return ret;
	}
	e = ep_new(fd, 0);
	if (!e) {
		fdspace_close(fd);
		return -ENOMEM;
	}
	e->state = SS_ACTIVE;
	e->ring_size = ring_size_for_engine();
	memcpy(&e->peer, dst, epq_sa_len(dst->sa_family));
	/* The local address: the source asked for, or the destination's
	 * (a local one); the port, like an ephemeral one, at random. */
	memcpy(&e->local, src && !is_any(src) ? src : dst, epq_sa_len(dst->sa_family));
	ret = random_port(&port);
	epq_set_port(&e->local, ret ? 0 : port);
	ret = make_memfd(e);
	if (ret) {
		if (e->ctl)
			munmap(e->ctl, e->map_len);
		if (e->memfd >= 0)
			fdspace_close(e->memfd);
		fdspace_close(fd);
		free(e);
		atomic_fetch_sub(&shm_objects, 1);
		/* No rings (memfd_create refused by a sandbox, out of
		 * descriptors or memory): the connection can still go over
		 * the next transport, which -ENODEV makes the engine try. */
		sdp_warn(SHM, "cannot make the rings for %s port %u (%s): next transport",
			 addr_str(dst, a), epq_get_port(dst), strerror(-ret));
		return -ENODEV;
	}
	epq_push_event(&e->q, OTI_EV_RESOLVED, 0, NULL, 0);
	*out = (struct oti_ep *)e;
	return 0;
}

static int shm_connect(struct oti_ep *oep, const void *pdata, size_t len)
{
	struct shm_ep *e = EP(oep);
	struct shm_hs hs = { .magic = SHM_MAGIC, .version = SHM_VERSION, .kind = SHM_CONNECT,
			     .netns = shm_netns, .ring_size = e->ring_size,
			     .pdata_len = (uint32_t)len, .src = e->local, .dst = e->peer };
	union {
		struct cmsghdr align;
		uint8_t buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { &hs, offsetof(struct shm_hs, pdata) + len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *c;

	if (e->state != SS_ACTIVE || e->connect_sent)
		return e->state == SS_DOWN ? -ENOTCONN : -EINVAL;
	if (len > OTI_MAX_PRIVATE_DATA)
		return -EINVAL;
	if (len)
		memcpy(hs.pdata, pdata, len);
	memset(&cm, 0, sizeof(cm));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &e->memfd, sizeof(int));
	if (sys.sendmsg(e->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		go_down(e, -errno);
		return 0;
	}
	/* The peer holds its own reference now. */
	fdspace_close(e->memfd);
	e->memfd = -1;
	e->connect_sent = true;
	return 0;
}

static int shm_ep_names(struct oti_ep *oep, struct sockaddr_storage *local,
			struct sockaddr_storage *peer)
{
	struct shm_ep *e = EP(oep);

	if (local)
		*local = e->local;
	if (peer)
		*peer = e->peer;
	return 0;
}

static int shm_ep_fd(struct oti_ep *oep)
{
	return EP(oep)->fd;
}

/* Can the rings move now: a record for a posted receive (or a control
 * record, or a breach to report), or room for the oldest queued send? */
static bool ring_work(struct shm_ep *e)
{
	uint32_t kind, len;

	if (e->state != SS_UP)
		return false;
	int r = shm_ring_peek(&e->rx, &kind, &len);

	if (r == -EPROTO || (r == 0 && (e->q.rq_count || kind != REC_DATA)) ||
	    (r == -EAGAIN && e->peer_gone))
		return true;
	if (e->sq_count && shm_ring_room(&e->tx, e->sq[e->sq_head].len) != 0)
		return true;
	return e->shut_wanted && shm_ring_room(&e->tx, 0) != 0;
}

/* Anything to do without waiting? */
static bool has_work(struct shm_ep *e)
{
	return e->q.ev_count || e->q.cq_count || e->down_held || ring_work(e);
}

static int shm_ep_arm(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	e->polling = false;
	if (has_work(e))
		return -EAGAIN;
	if (e->state != SS_UP)
		return 0;
	/* Before a sleep the socket must hold nothing but news: the bytes
	 * the peer owes us are read.  It is read anyway every
	 * SHM_QUIET_ARMS arms without a read, for what no byte announces
	 * (the peer's end: EOF), which would otherwise bring back each
	 * sleep at once, for ever. */
	see_word(e);
	if (e->owed || ++e->quiet_arms >= SHM_QUIET_ARMS)
		drain_socket(e);
	if (e->state != SS_UP)
		return -EAGAIN;
	set_word(e, sleep_word(e));
	shm_fence();
	if (has_work(e)) {
		set_word(e, 0);
		return -EAGAIN;
	}
	return 0;
}

/*
 * A waiter's look at the rings, no system call: loads of the peer's
 * index (and the checks of what it says, shm_ring_peek()).  While it
 * polls, our word is down: the peer puts records in without a byte for
 * us, and the waiter sees them here.
 */
static bool shm_ep_poll(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	if (e->state == SS_UP && !e->polling) {
		e->polling = true;
		if (e->raised)
			set_word(e, 0);
	}
	return has_work(e);
}

/* Polling ends without a sleep: the word goes up again, as at the end of
 * a drive, and what came before the peer could see it is for the caller
 * to drive now (Dekker's pattern, as in ep_arm()). */
static bool shm_ep_poll_end(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	if (!e->polling)
		return false;
	e->polling = false;
	if (e->state == SS_UP) {
		set_word(e, sleep_word(e));
		shm_fence();
	}
	return has_work(e);
}

static short shm_ep_wait_events(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	return e->state == SS_DOWN || e->state == SS_PASSIVE ? 0 : POLLIN;
}

static int shm_get_event(struct oti_ep *oep, struct oti_event *ev)
{
	struct shm_ep *e = EP(oep);

	if (!e->q.ev_count)
		ep_progress(e);
	if (!e->q.ev_count && e->down_held && !e->q.cq_count) {
		e->down_held = false;
		epq_push_event(&e->q, OTI_EV_DISCONNECTED, e->down_status, NULL, 0);
	}
	return epq_pop_event(&e->q, ev) ? 0 : -EAGAIN;
}

static int shm_poll_cq(struct oti_ep *oep, struct oti_wc *wc, int n)
{
	struct shm_ep *e = EP(oep);

	if (e->q.cq_count < (uint32_t)n)
		ep_progress(e);
	return epq_pop_wcs(&e->q, wc, n);
}

/* --- data ------------------------------------------------------------------ */

static int shm_mr_reg(struct oti_ep *oep, void *addr, size_t len, unsigned access,
		      struct oti_mr **out)
{
	struct shm_mr *mr;

	(void)oep;
	if (!addr || !len)
		return -EINVAL;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	/* No remote access exists on this transport: the key names nothing. */
	mr->pub = (struct oti_mr){ .addr = addr, .len = len, .rkey = 0, .raddr_base = 0,
				   .access = access };
	*out = &mr->pub;
	return 0;
}

static int shm_mr_dereg(struct oti_mr *pub)
{
	free(pub);
	return 0;
}

static bool posted_on_dead(struct shm_ep *e, uint64_t ctx, enum oti_wc_op op)
{
	if (e->state != SS_DOWN)
		return false;
	epq_push_wc(&e->q, ctx, op, -ECANCELED, 0);
	return true;
}

static int shm_post_recv(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx)
{
	struct shm_ep *e = EP(oep);

	return epq_post_recv(&e->q, sge, ctx, e->state == SS_DOWN);
}

static int shm_post_send(struct oti_ep *oep, const struct oti_sge *sge, uint64_t ctx,
			 unsigned flags)
{
	struct shm_ep *e = EP(oep);

	(void)flags;
	if (!sge || (!sge->addr && sge->len))
		return -EINVAL;
	if (sge->len > shm_ring_max_payload(e->ring_size))
		return -EMSGSIZE;
	if (e->state == SS_ACTIVE || e->state == SS_PASSIVE)
		return -ENOTCONN;
	if (epq_ring_reserve((void **)&e->sq, &e->sq_cap, &e->sq_head, e->sq_count, e->sq_count + 1,
			 sizeof(*e->sq)) ||
	    epq_cq_reserve(&e->q))
		return -ENOMEM;
	if (posted_on_dead(e, ctx, OTI_WC_SEND))
		return 0;
	e->sq[(e->sq_head + e->sq_count) % e->sq_cap] =
		(struct shm_send){ .addr = sge->addr, .len = sge->len, .ctx = ctx };
	e->sq_count++;
	flush_sends(e);
	return 0;
}

/* --- teardown ---------------------------------------------------------------- */

static int shm_disconnect(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	if (e->state == SS_DOWN)
		return 0;
	if (e->state != SS_UP)
		return -ENOTCONN;
	e->shut_wanted = true;
	flush_sends(e);
	return 0;
}

static void shm_ep_close(struct oti_ep *oep)
{
	struct shm_ep *e = EP(oep);

	/* A connection still up is reset: the peer sees the socket close. */
	fdspace_close(e->fd);
	if (e->memfd >= 0)
		fdspace_close(e->memfd);
	if (e->ctl)
		munmap(e->ctl, e->map_len);
	epq_free(&e->q);
		free(e->sq);
	free(e);
	atomic_fetch_sub(&shm_objects, 1);
}

const struct oti_ops shm_transport_ops = {
	.size = sizeof(struct oti_ops),
	.version = OTI_VERSION,
	.name = "shm",
	.init = shm_init,
	.fini = shm_fini,
	.probe = shm_probe,
	.query_caps = shm_query_caps,
	.listen = shm_listen,
	.listener_name = shm_listener_name,
	.listener_fd = shm_listener_fd,
	.listener_arm = shm_listener_arm,
	.get_connreq = shm_get_connreq,
	.reject = shm_reject,
	.listener_close = shm_listener_close,
	.listener_take = shm_listener_take,
	.listener_forked = shm_listener_forked,
	.ep_accept_open = shm_ep_accept_open,
	.accept = shm_accept,
	.ep_reject = shm_ep_reject,
	.ep_open = shm_ep_open,
	.connect = shm_connect,
	.ep_names = shm_ep_names,
	.ep_fd = shm_ep_fd,
	.ep_arm = shm_ep_arm,
	.ep_wait_events = shm_ep_wait_events,
	.get_event = shm_get_event,
	.poll_cq = shm_poll_cq,
	.mr_reg = shm_mr_reg,
	.mr_dereg = shm_mr_dereg,
	.post_recv = shm_post_recv,
	.post_send = shm_post_send,
	.rdma_read = oti_no_rdma,
	.rdma_write = oti_no_rdma,
	.disconnect = shm_disconnect,
	.ep_close = shm_ep_close,
	.ep_poll = shm_ep_poll,
	.ep_poll_end = shm_ep_poll_end,
	.ep_fd_dead = shm_ep_fd_dead,
	.ep_quiet = shm_ep_quiet,
};
