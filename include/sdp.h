/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libsdp-engine: the Sockets Direct Protocol engine as a library.
 *
 * A socket-like API over SDP.  It is what the LD_PRELOAD library, the tools,
 * the benchmarks and the tests drive; a program may use it directly (link
 * with -lsdp-engine, pkg-config libsdp-engine).
 *
 * Conventions that differ from libc, on purpose:
 *   - Every call returns a non-negative value on success and a NEGATIVE
 *     errno on failure (-ECONNRESET, -EAGAIN, ...); errno is not used.
 *     The errno values are those Linux TCP gives in the same situation.
 *   - A socket is named by an int "sd".  The sd is a real file descriptor
 *     owned by the engine (an eventfd, O_CLOEXEC unless the socket was made
 *     without SOCK_CLOEXEC): it is the socket's readiness fd, see
 *     sdp_set_interest().  Close it only with sdp_close().  After
 *     sdp_virtual_sds() an sd is a number that is no descriptor instead.
 *   - Addresses are ordinary struct sockaddr_in / sockaddr_in6.
 *   - SIGPIPE: a send on a socket whose sending side is shut down or
 *     reset returns -EPIPE and raises SIGPIPE in the calling thread,
 *     unless MSG_NOSIGNAL is given, as Linux TCP does.
 *
 *   - fork(): a socket inherited from the parent is the parent's.  In the
 *     child every call on it fails with -EBADF, except sdp_close(), which
 *     releases the child's copy of the sd without touching the
 *     connection.  A listener shared by sdp_listener_share() before the
 *     fork is the exception: the child accepts on it too.
 *
 * All calls are thread-safe.
 */
#ifndef LIBSDP_SDP_H
#define LIBSDP_SDP_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Address families as OFED defined them; the engine accepts these and
 * AF_INET/AF_INET6 alike in sdp_socket(). */
#define SDP_AF_INET_SDP 27
#define SDP_AF_INET6_SDP 28

/* Socket options of SDP itself, at level SOL_SDP (OFED's numbers). */
#define SOL_SDP 1025
/* int: the zero-copy threshold of this socket's sends and receives, in
 * bytes (0 = off); starts as the zcopy_thresh tunable (262144).  Values
 * other than 0 below 4096 are raised to 4096. */
#define SDP_ZCOPY_THRESH 80

/*
 * Under the preload (LD_PRELOAD=libsdp.so) only, on a connected TCP
 * socket: convert its connection to SDP in place (doc/conversion.md),
 *   struct sdp_convert_arg a = { .timeout_ms = 5000 };
 *   setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a));
 * on one end, SDP_CONVERT_ACCEPT (with the final streaming-mode message
 * in a) on the other: sdp_convert_connect() and sdp_convert_accept() on
 * the fd.  On success the same fd carries the SDP connection; on failure
 * setsockopt() returns -1 with those calls' errno and fd is untouched.
 * EISCONN: the socket is SDP already.  Write-only.
 */
#define SDP_CONVERT_CONNECT 90
#define SDP_CONVERT_ACCEPT 91
struct sdp_convert_arg {
	int timeout_ms;
	unsigned int final_len;		/* SDP_CONVERT_ACCEPT */
	const void *final_msg;		/* SDP_CONVERT_ACCEPT */
};

/* Start-up is implicit; sdp_init() only makes its cost explicit.  Returns
 * the number of usable transports, or a negative errno. */
int sdp_init(void);

/* Name the sockets made from now on by numbers no descriptor of the
 * process can have (at or above fs.nr_open and the hard RLIMIT_NOFILE)
 * instead of readiness eventfds: a socket then costs no descriptor of its
 * own, and its sd cannot be polled by the kernel, only by sdp_poll(),
 * sdp_ppoll() and watches.  For the preload, which never polls an sd.
 * Returns 0; -EBUSY once a socket has been made (the sds stay
 * eventfds), -ERANGE when the numbers would not fit in an int. */
int sdp_virtual_sds(void);

/* domain AF_INET/AF_INET6 (or the SDP families), type SOCK_STREAM optionally
 * with SOCK_NONBLOCK | SOCK_CLOEXEC, protocol 0 or IPPROTO_TCP. */
int sdp_socket(int domain, int type, int protocol);
int sdp_bind(int sd, const struct sockaddr *addr, socklen_t len);
/*
 * Name the source of the connection sd is about to make, without
 * reserving anything in the transport (sdp_bind() does, for a listener):
 * the caller holds the address itself, as the preload does with the
 * kernel socket it bound for the program.  The transport connects from
 * addr's IP address; addr's port is this socket's port, which the Hello
 * carries so that the peer's accept() and getpeername() report it, and
 * this socket's getsockname().  Port 0: the transport's own.  -EINVAL
 * once sd is bound, connecting or connected.
 */
int sdp_bind_source(int sd, const struct sockaddr *addr, socklen_t len);
int sdp_listen(int sd, int backlog);
/* flags: SOCK_NONBLOCK | SOCK_CLOEXEC for the new socket (accept4). */
int sdp_accept(int sd, struct sockaddr *addr, socklen_t *len, int flags);
/*
 * Before fork(): listener sd is to be shared with the children, as a TCP
 * listener is: each process holding it accepts connections from the one
 * queue, and from then on a process takes a connection only while it is
 * accepting (in sdp_accept(), polling sd for POLLIN, or with a watch on
 * it).  0; -EOPNOTSUPP when a transport's listener cannot be shared
 * (rdma_cm) or sds are readiness eventfds (without sdp_virtual_sds());
 * -EINVAL if sd is not listening.
 */
int sdp_listener_share(int sd);
/*
 * Moving an established connection to another process (doc/fork.md):
 * sdp_conn_export() describes sd's connection in *blob (malloc()ed, *len
 * bytes; the caller frees it) and gives the descriptor *fd that carries
 * it, which the importing process must hold (a fork child has it at the
 * same number); sd is then closed, the connection not: the peer sees
 * nothing.  -EBUSY while the connection is not quiet (a send or a
 * zero-copy exchange under way: try again once it has moved on),
 * -ENOTCONN if it is not established or is closing, -EOPNOTSUPP if its
 * transport cannot move (verbs); sd is then unchanged.
 * sdp_conn_import() makes a socket of them, in the process holding fd,
 * which it takes whatever the result; flags: SOCK_NONBLOCK |
 * SOCK_CLOEXEC.  The new sd, or -EINVAL for a description that is not
 * one sdp_conn_export() made, -ENOMEM...
 */
int sdp_conn_export(int sd, void **blob, size_t *len, int *fd);
int sdp_conn_import(const void *blob, size_t len, int fd, int flags);
/* Blocking, or -EINPROGRESS on a non-blocking socket: wait for writable,
 * then read SO_ERROR, as with TCP. */
int sdp_connect(int sd, const struct sockaddr *addr, socklen_t len);

/*
 * Why sd's last connect attempt gave no SDP connection, for a caller that
 * then falls back to TCP and says why (the preload counts and logs it).
 * The kernel's SMC fallback reasons are the model.  Set when sdp_connect()
 * fails or the attempt ends in failure (SO_ERROR), kept until the next
 * attempt (reading SO_ERROR does not clear it); SDP_FB_NONE while no
 * attempt has failed.  sdp_fallback_reason() returns it, or -EBADF.
 */
enum sdp_fallback_reason {
	SDP_FB_NONE = 0,
	SDP_FB_NO_ROUTE,	/* no enabled transport serves the address pair */
	SDP_FB_REFUSED,		/* no SDP listener there: the peer, or its transport, said no */
	SDP_FB_REJECTED,	/* the peer broke off the SDP handshake, or answered it with
				 * something unusable */
	SDP_FB_TIMEOUT,		/* no answer within the connect_timeout_ms tunable */
	SDP_FB_TRANSPORT,	/* the transport, or the engine, failed */
	SDP_FB_RESOURCE,	/* out of memory or descriptors */
};
int sdp_fallback_reason(int sd);

/* flags: MSG_DONTWAIT, MSG_NOSIGNAL, MSG_MORE, MSG_OOB (send); MSG_DONTWAIT,
 * MSG_PEEK, MSG_WAITALL, MSG_OOB (recv).  Urgent data as on Linux TCP: the
 * last byte of a MSG_OOB send is urgent; recv(MSG_OOB) reads it (-EINVAL
 * when there is none, it was read, or SO_OOBINLINE is on); a read stops
 * at the mark. */
ssize_t sdp_send(int sd, const void *buf, size_t len, int flags);
ssize_t sdp_recv(int sd, void *buf, size_t len, int flags);
ssize_t sdp_sendv(int sd, const struct iovec *iov, int iovcnt, int flags);
ssize_t sdp_recvv(int sd, const struct iovec *iov, int iovcnt, int flags);

int sdp_shutdown(int sd, int how);
int sdp_close(int sd);

/*
 * The process is about to end without exit()'s handlers (_exit(), as a
 * fork server's child ends): wait, as exit() would (exit_linger_ms
 * without progress at most), for the connections the program closed to
 * hand their last data and close to the peer.  The progress thread does
 * the work; this only looks, with trylocks and sleeps, since _exit() may
 * be called from a signal handler that interrupted a thread holding any
 * lock of libsdp's or malloc's.  Sockets still open are left as the
 * kernel would not leave them (it closes them): closing one takes locks.
 */
void sdp_exit_quick(void);

int sdp_getsockname(int sd, struct sockaddr *addr, socklen_t *len);
int sdp_getpeername(int sd, struct sockaddr *addr, socklen_t *len);

/*
 * SOL_SOCKET: SO_ERROR, SO_TYPE, SO_DOMAIN, SO_PROTOCOL, SO_ACCEPTCONN,
 * SO_RCVBUF, SO_SNDBUF, SO_KEEPALIVE, SO_LINGER, SO_REUSEADDR, SO_REUSEPORT,
 * SO_RCVTIMEO, SO_SNDTIMEO, SO_RCVLOWAT, SO_SNDLOWAT, SO_OOBINLINE;
 * IPPROTO_TCP: TCP_NODELAY, TCP_CORK, TCP_MAXSEG, TCP_KEEPIDLE, TCP_KEEPINTVL,
 * TCP_KEEPCNT.  Others: -ENOPROTOOPT.
 */
int sdp_getsockopt(int sd, int level, int name, void *val, socklen_t *len);
int sdp_setsockopt(int sd, int level, int name, const void *val, socklen_t len);

/* O_NONBLOCK on or off; sdp_get_nonblock() returns 0 or 1. */
int sdp_set_nonblock(int sd, int on);
int sdp_get_nonblock(int sd);
/* Bytes that a recv() would return now (FIONREAD / SIOCINQ): up to the
 * mark while urgent data is pending and not inline, as Linux counts. */
int sdp_nread(int sd);
/* Bytes sent but not yet acknowledged by the peer (SIOCOUTQ). */
int sdp_nwrite(int sd);
/* 1 if the next byte read is at the urgent mark (SIOCATMARK), else 0. */
int sdp_atmark(int sd);
/* fn(arg, band) runs at the moments Linux raises SIGURG and SIGIO: band
 * POLLPRI when urgent data arrives, POLLIN when data or the end of the
 * stream arrives, POLLOUT when room to send returns after a send found
 * none.  It runs in whichever thread processed the event, with the
 * socket's lock held: it must not call the engine.  fn NULL: none. */
int sdp_set_notify(int sd, void (*fn)(long arg, int band), long arg);

/*
 * Readiness.  sdp_events() returns the socket's current poll(2) mask:
 * POLLIN (data, EOF, or a connection to accept), POLLOUT (send would not
 * block; a non-blocking connect finished), POLLRDHUP (peer shut down its
 * sending side), POLLHUP (both directions closed or reset), POLLERR
 * (pending error, see SO_ERROR).
 *
 * The sd itself is pollable: it is readable exactly while
 * sdp_events(sd) & interest is non-zero (POLLHUP and POLLERR always count),
 * and every new arrival of data or connections makes it signal again, so
 * epoll's edge-triggered mode sees each one.  interest defaults to
 * POLLIN | POLLRDHUP.  It never reports POLLOUT itself: wait for readable
 * and ask sdp_events().
 */
int sdp_events(int sd);
/*
 * The same, without reading the transport for news: for a caller that
 * knows that nothing arrived since the last drive, because an arrival
 * wakes whoever waits on the socket's wait sources (sdp_watch_fds, the
 * progress thread), and that one drives it.  It still takes what the
 * transport has queued and moves the socket's output.
 */
int sdp_events_quiet(int sd);
int sdp_set_interest(int sd, int events);

/* poll(2) over sds (not ordinary fds): same semantics and return values
 * (count of ready entries, 0 on timeout, -EINTR on a signal). */
int sdp_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms);

/*
 * ppoll(2) over any mix of sds and ordinary fds: the kernel polls the
 * entries that are not sds of this engine, in the same sleep as the
 * engine's.  timeout NULL waits for ever; sigmask as for ppoll(2).
 * Returns the count of ready entries, 0 on timeout, or a negative errno
 * (-EINTR on a signal).
 */
int sdp_ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
	      const sigset_t *sigmask);

/*
 * A watch on a socket, for building event loops (the preload's epoll):
 * while it exists, every change of the socket's readiness (data, space,
 * a connection, a state change) writes 1 to the eventfd efd and bumps the
 * watch's change counter.  It does not say what changed: ask
 * sdp_events().  The watch keeps the socket's memory alive; delete every
 * watch before or right after sdp_close().  On failure returns NULL and
 * *err = -EBADF or -ENOMEM.
 */
struct sdp_watch;
struct sdp_watch *sdp_watch_add(int sd, int efd, int *err);
unsigned sdp_watch_changes(const struct sdp_watch *w);
/* Of those changes, the arrivals: data, end of stream, a connection to
 * accept (what an edge-triggered EPOLLIN reports once each). */
unsigned sdp_watch_edges(const struct sdp_watch *w);
/*
 * The socket's wait sources (its transport's fds: tcp-fallback's TCP
 * socket, the verbs ep's completion and event channels, a listener's
 * fds) registered in the epoll instance epfd, edge-triggered for EPOLLIN
 * with data.u64 = key, and kept registered as they change (a connection
 * made, a listener listening, a connection whose transport went quiet)
 * until sdp_watch_del(): a thread asleep in epoll_wait(epfd) is then
 * woken by the transport itself, and should drive the socket
 * (sdp_events()) when key comes back.  The engine's progress thread is
 * registered after such sets with EPOLLEXCLUSIVE where the fd takes it,
 * so the kernel wakes it only when no thread sleeps in one of them.
 * key comes back for news of the transport only: changes made by other
 * threads still come through efd.  epfd -1 takes them out again.
 * Returns 0.
 */
int sdp_watch_fds(struct sdp_watch *w, int epfd, uint64_t key);
/* Until sdp_watch_mute(-1), this thread's changes to watched sockets do
 * not write the watches' eventfd efd (they still count): for the thread
 * reporting the set efd wakes, which sees them in its report. */
void sdp_watch_mute(int efd);
/*
 * A gate shared by the watches of one set: while sleepers is 0, a change
 * does not write the watch's eventfd but bumps changes, so that a set
 * whose only waiter is the thread making the changes (its own recv and
 * send outside a report) costs no eventfd write and no extra wakeup per
 * change.  The waiter before it sleeps on efd adds 1 to sleepers, then
 * reads changes: if they moved since it last looked, it looks again
 * instead of sleeping (a change either sees the sleeper or is seen by
 * it); it takes the 1 back when it wakes.  A set something else may wait
 * on (a poll() of it, another epoll set holding it, a forked child)
 * keeps sleepers above 0 for good.  rung: the eventfd was written and
 * not drained since; further changes do not write it again (a batch of
 * changes, one wakeup).  Whoever drains efd sets rung to 0 after the
 * read, then looks at the sockets.  The fields are read and written
 * with the __atomic builtins, sequentially consistent, only.
 */
struct sdp_watch_gate {
	unsigned sleepers;
	unsigned changes;
	unsigned rung;
};
void sdp_watch_gate(struct sdp_watch *w, struct sdp_watch_gate *g);
/*
 * From now on the watch writes its eventfd only for a change after which
 * sdp_events() & events is non-zero (the counters still count every
 * change): for a set something else watches (an outer epoll set holding
 * it, a poll() of it), which must not find it readable when no member
 * would be reported.  events 0: never; -1: for every change (the
 * default).  Takes no lock.
 */
void sdp_watch_ring_when(struct sdp_watch *w, int events);
void sdp_watch_del(struct sdp_watch *w);

/*
 * Converting a connected TCP socket into an SDP connection between the
 * same two hosts (doc/conversion.md).  The peer must run libsdp and make
 * the matching call: one end sdp_convert_accept(), the other
 * sdp_convert_connect().
 *
 * sdp_convert_accept() first sends final_msg (final_len bytes, may be 0):
 * the last bytes of the TCP stream, which the other end's program reads
 * before it calls sdp_convert_connect().  Then both agree over the socket
 * and an SDP connection is made between the socket's two addresses.
 *
 * On success the call returns the new connection's sd, blocking or not
 * as fd was, with fd's SO_KEEPALIVE, TCP_NODELAY, SO_OOBINLINE,
 * SO_LINGER, SO_RCVTIMEO and SO_SNDTIMEO; the TCP connection has ended
 * in order and fd is closed.
 *
 * On failure fd is open and as it was, usable for streaming, and nothing
 * the consumer sent has been read from it:
 *   -ETIMEDOUT     no agreement within timeout_ms
 *   -ECONNREFUSED  the peer refused, or the SDP connection failed (the
 *                  connect side returns sdp_connect()'s error then)
 *   -EPROTO        the peer sent stream data where its part of the
 *                  handshake belonged: it does not convert (its bytes are
 *                  left for the caller to read)
 *   -EPROTONOSUPPORT  the peer speaks another version of the handshake
 *   -EINVAL        timeout_ms 0
 *   -EBADF, -ENOTCONN, -ENOTSOCK, -EOPNOTSUPP (not a connected TCP socket)
 *   -ECONNRESET    the TCP connection ended
 * timeout_ms < 0 waits for ever.  Signals do not interrupt the calls.
 */
int sdp_convert_connect(int fd, int timeout_ms);
int sdp_convert_accept(int fd, const void *final_msg, size_t final_len, int timeout_ms);

/* Is sd a socket of this engine? 1 or 0. */
int sdp_is_socket(int sd);

/* Name of the transport a connected socket runs on ("tcp-fallback"), or
 * NULL if the socket is not connected. */
const char *sdp_transport_name(int sd);

/* Process-wide counters, for tools and tests. */
struct sdp_stats {
	uint64_t sockets_open;
	uint64_t connections_active;	/* established since start */
	uint64_t connections_passive;
	uint64_t connect_failures;
	uint64_t resets;		/* connections ended by reset or protocol error */
	uint64_t protocol_errors;	/* malformed or hostile peer messages */
	uint64_t bytes_sent;
	uint64_t bytes_received;
	uint64_t msgs_sent;
	uint64_t msgs_received;
	uint64_t credit_updates_sent;
	uint64_t credit_stalls;		/* sends that waited for credits */
	/* Read Zcopy (SrcAvail / RDMA read / RdmaRdCompl). */
	uint64_t zcopy_offers;		/* SrcAvails we sent */
	uint64_t zcopy_bytes_sent;	/* our bytes the peer RDMA-read */
	uint64_t zcopy_refused;		/* SendSM answers: finished by Bcopy */
	uint64_t zcopy_cancels;		/* SrcAvailCancels we sent */
	uint64_t zcopy_reads;		/* RDMA reads we posted */
	uint64_t zcopy_bytes_received;	/* bytes we RDMA-read */
	uint64_t zcopy_direct_bytes;	/* of those, straight into the application's buffer */
	/* Write Zcopy (SinkAvail / RDMA write / RdmaWrCompl), modes, Transaction. */
	uint64_t zcopy_pulled;		/* SrcAvails taken back for the peer's SinkAvail */
	uint64_t zcopy_writes;		/* RDMA writes into the peer's SinkAvails */
	uint64_t zcopy_bytes_written;		/* our bytes written that way */
	uint64_t zcopy_sink_adverts;		/* SinkAvails we sent */
	uint64_t zcopy_sink_bytes;		/* bytes the peer wrote into them */
	uint64_t zcopy_sink_stale;		/* of ours, dead before use (data crossed) */
	uint64_t zcopy_sink_cancels;		/* SinkAvailCancels we sent */
	uint64_t mode_changes_sent;		/* ModeChanges we sent */
	uint64_t mode_changes_received;
	uint64_t trans_piggybacks;		/* Transaction requests carried on a SinkAvail */
	uint64_t trans_misses;		/* held requests that had to go alone */
	/* Registration cache (application buffers of zero-copy reads). */
	uint64_t regcache_hits;
	uint64_t regcache_misses;
	uint64_t regcache_evictions;	/* dropped to stay within bounds */
	uint64_t regcache_invalidations;	/* dropped because the memory was freed or unmapped */
	/* Added later, so at the end. */
	uint64_t zcopy_peer_adverts;		/* SinkAvails the peer sent us (used or stale) */
	uint64_t progress_fd_drives;		/* sockets the progress thread drove because
						 * their transport fd woke it */
	uint64_t readiness_writes;		/* signals of a socket's readiness fd (the
						 * sd, see sdp_set_interest()) */
	uint64_t progress_lock_waits;		/* times the progress thread waited for a
						 * socket lock another thread held */
	uint64_t progress_busy_skips;		/* sockets whose fd woke it that it left to
						 * the thread holding their lock */
	uint64_t progress_wakeups;		/* the progress thread's returns from its
						 * sleep: fds, pokes, ticks */
	uint64_t progress_set_changes;		/* epoll_ctl calls on the progress
						 * thread's set */
	uint64_t ring_allocs;			/* connection rings allocated, not
						 * reused */
	uint64_t watch_writes;			/* writes of a watch's eventfd (an epoll
						 * set's doorbell) for a change */
	uint64_t transport_empty_reads;		/* reads of a software transport, in a
						 * drive, that found it empty */
	/* Not counts but what is held now (issue 16). */
	uint64_t buf_bytes;	/* the connections' send and receive rings, reserved
				 * (registered with the transport: pinned on RDMA) */
	uint64_t fds;		/* descriptors the library holds for itself */
	/* Added later, so after those. */
	uint64_t spin_poll_answers;		/* waits a look at the transport answered
						 * (no system call, no sleep: shm) */
	uint64_t buf_grows;			/* receive rings enlarged at the peer's
						 * ChRcvBuf (buffers that grow with use) */
	uint64_t rx_copied_out;			/* receive buffers whose unread bytes
						 * were copied to memory of the heap
						 * and the buffer posted again */
};
/*
 * The struct grows at its end.  sdp_get_stats(st) is a macro that passes
 * the size the program was built with: the library fills that many bytes
 * (the fields it knows; those it does not are zeroed), never more, so a
 * program built with an older, shorter struct is not overrun by a newer
 * library.  The function of that name, for programs built before the
 * macro, fills the struct as it was then (up to rx_copied_out).
 */
void sdp_get_stats_size(struct sdp_stats *st, size_t size);
void sdp_get_stats(struct sdp_stats *st);
#define sdp_get_stats(st) sdp_get_stats_size((st), sizeof(*(st)))

#ifdef __cplusplus
}
#endif
#endif /* LIBSDP_SDP_H */
