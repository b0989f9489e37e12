/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Internals of the switch: the state of one application socket and the
 * fd table that names it.
 *
 * Locking: ops_sock.lock protects the decision (stack, sd, connect
 * state) and is held across the short engine calls that change it, never
 * across a wait.  It is also held around every change of the fds that
 * name a socket (close, dup), so that a fork's relay (relay.c) sees them
 * all.  The epoll registry (epset.c) has one lock, which may be taken
 * under an ops_sock lock, never the reverse.  The fd table is read
 * without locks (fdtable.c).
 */
#ifndef SDP_OPS_SOCK_H
#define SDP_OPS_SOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>

#include "conf.h"
#include "sys.h"
#include "stats.h"

/* Where an SDP connect with a TCP fallback stands. */
enum ops_connect {
	OPS_CONN_NONE = 0,
	OPS_CONN_SDP,		/* SDP connect in flight; TCP if it fails */
	OPS_CONN_SDP_ONLY,	/* SDP connect in flight; no fallback */
	OPS_CONN_DONE,		/* settled on one stack */
};

/* A socket option set before the stack was known, replayed on the SDP
 * socket when there is one. */
struct ops_opt {
	int level, name;
	socklen_t len;
	uint8_t val[16];
};
#define OPS_MAX_OPTS 16

struct ops_ep;
struct ops_epi;
struct ops_relayed;

struct ops_sock {
	atomic_int ref;		/* one per fd naming it, one per call in flight */
	pthread_mutex_t lock;
	struct ops_sock *next_free;

	int domain;		/* AF_INET or AF_INET6 (also for the SDP families) */
	bool direct;		/* made as AF_INET_SDP: SDP only */
	enum ops_stack stack;
	enum ops_sock_state state;
	enum ops_fallback fallback;
	int sd;			/* the engine socket (connection or listener), or -1 */
	int notify_fd;		/* sigio.c: the fd whose owner gets SIGURG, SIGIO */
	bool inherited;		/* from before a fork(): the parent's connection */
	/* A listener whose engine side is shared with forked children
	 * (sdp_listener_share()): it stays SDP in parent and children. */
	bool lsn_shared;

	/* Relayed (relay.c): since a fork, the application's fds name a Unix
	 * socket that a relay thread joins to the SDP connection; every call
	 * but the socket's names and TCP options is the kernel's.  Set once
	 * (seq_cst, see ops_io_enter) and never cleared; rinfo is its own. */
	atomic_bool relayed;
	struct ops_relayed *rinfo;
	/* Engine data calls in flight, receiving and sending (OPS_IO_*):
	 * a relay takes over each direction once its count is zero. */
	atomic_int io_calls[2];
	/* Holds (relay.c, doc/fork.md): since the first fork that copied
	 * this connection, its fds name end A of a socket pair whose end B
	 * its owner keeps; hold_ino is A's inode, which names the
	 * connection to its owner.  own_pid and own_token name the owner's
	 * control socket.  held: this process is not the owner, and its
	 * first use claims the connection (set and cleared seq_cst, see
	 * ops_io_enter). */
	uint64_t hold_ino;
	pid_t own_pid;
	uint64_t own_token;
	unsigned hold_moves;	/* between processes so far (relay.c) */
	int hold_b;		/* B, while this process owns it (s->lock) */
	/* Whom this process took it from: its last close hands it back
	 * there to finish (a child may _exit() at once). */
	pid_t prev_pid;
	uint64_t prev_token;
	atomic_bool held;

	/* A "both" listener keeps its native socket non-blocking and
	 * emulates the application's O_NONBLOCK. */
	bool both_nonblock;
	unsigned accept_turn;	/* alternates which stack accept() tries first */
	bool any_port;		/* bound to port 0: the kernel chose the port, and
				 * the program has not looked at it (getsockname),
				 * so listen() may choose another one */

	/* Connect with fallback. */
	enum ops_connect conn;
	uint64_t conn_deadline_ns;
	struct sockaddr_storage conn_addr;
	socklen_t conn_addrlen;
	int conn_error;		/* positive errno to report once via SO_ERROR */

	struct ops_opt opts[OPS_MAX_OPTS];
	int nopts;

	struct ops_epi *epis;	/* epoll memberships (epoll registry lock) */
	struct ops_stats_sock *row;
};

/* --- clock.c -------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns: every deadline of the switch is on it. */
uint64_t ops_now_ns(void);
/* The time left until deadline as a relative timeout for sdp_ppoll():
 * ts filled (zero once past), or NULL for deadline 0, "no timeout". */
struct timespec *ops_timeout_until(uint64_t deadline, struct timespec *ts);
/* The deadline a timeout option (SO_RCVTIMEO, SO_SNDTIMEO) sets from
 * now, or 0 for a zero timeout ("none"). */
uint64_t ops_deadline_after(const struct timeval *tv);

/* --- fdtable.c ------------------------------------------------------------------ */

/* The socket fd names, with a reference; NULL if not ours. */
struct ops_sock *ops_fd_get(int fd);
/* Make fd name s (takes a new reference).  The kernel just gave out fd,
 * so a socket still in the slot is stale and is released.  -EMFILE if fd
 * is beyond the table. */
int ops_fd_install(int fd, struct ops_sock *s);
/* Empty fd's slot; returns its reference or NULL. */
struct ops_sock *ops_fd_remove(int fd);
struct ops_sock *ops_sock_new(int domain);
/* A reference more (the caller already has one, or holds a lock that
 * keeps s alive: the epoll registry's for its members). */
static inline void ops_sock_get(struct ops_sock *s)
{
	atomic_fetch_add(&s->ref, 1);
}
/* Drop a reference; the last one tears the socket down (engine close,
 * epoll memberships, statistics row). */
void ops_sock_put(struct ops_sock *s);
/* In a fork child, before anything else: the table's lock. */
void ops_fd_atfork_child(void);
/* Call fn on every socket in the table (fork handling); no references. */
void ops_fd_for_each(void (*fn)(int fd, struct ops_sock *s, void *arg), void *arg);
/* Does fd name s right now?  No reference taken. */
bool ops_fd_names(int fd, const struct ops_sock *s);
/* No fd at or above this is in the table. */
int ops_fd_end(void);

/* --- sigio.c -------------------------------------------------------------------- */

/* s's SDP connection is at fd now: its urgent data and readiness raise
 * SIGURG and SIGIO for fd's owner, as the kernel would (sigio.c). */
void ops_sigio_attach(int fd, struct ops_sock *s);
/* The process turned O_ASYNC on for some fd: SIGIO may be owed from now. */
void ops_sigio_async_on(void);

/* --- switch.c ------------------------------------------------------------------- */

extern struct conf_policy *ops_policy;
extern const char *ops_program;

/* Start the engine once; 0 or a negative errno (no transport). */
int ops_engine_up(void);
/* Drive a connect with fallback one step without waiting: may finish
 * it on SDP, or give up on SDP and start the native connect.  fd is
 * the application's fd (for the native connect).  Caller holds no lock. */
void ops_connect_advance(int fd, struct ops_sock *s);
/* The program is about to see the port bind(0) gave fd: move it to one
 * whose SDP side is free too, while it can (switch.c).  Caller holds
 * s->lock. */
void ops_settle_any_port(int fd, struct ops_sock *s);
/* Deadline of a connect in flight that ops_connect_advance() must see
 * (ns, CLOCK_MONOTONIC), or 0. */
uint64_t ops_connect_deadline(struct ops_sock *s);
/* fd's TCP connection was converted to the SDP connection sd: s names
 * sd from now on.  Caller holds s->lock. */
void ops_switch_to_sdp(int fd, struct ops_sock *s, int sd);
/* Set a socket's stack (and its statistics row) as decided: no fallback.
 * Caller holds s->lock. */
void ops_set_stack(struct ops_sock *s, enum ops_stack st);
/* s moves to TCP after all, for reason why: the only way a fallback is
 * made, counted and logged (switch.c says more).  Caller holds s->lock. */
void ops_fall_back(int fd, struct ops_sock *s, enum ops_fallback why, int err,
		   const struct sockaddr *peer, const char *then);
void ops_set_state(struct ops_sock *s, enum ops_sock_state st);

/* --- peercache.c ---------------------------------------------------------------- */

/* Remember that dst said no to SDP (why: refused or timeout), for the
 * fallback_cache_ms tunable. */
void ops_peercache_note(const struct sockaddr *dst, socklen_t len, enum ops_fallback why);
/* Whether dst said no recently: then *why is what it said, *age_ms how
 * long ago. */
bool ops_peercache_check(const struct sockaddr *dst, socklen_t len, enum ops_fallback *why,
			 uint64_t *age_ms);
/* SDP worked with dst: forget anything remembered. */
void ops_peercache_forget(const struct sockaddr *dst, socklen_t len);
void ops_peercache_atfork_child(void);

/* --- epset.c -------------------------------------------------------------------- */

/* The epoll sets with SDP members, and what the members report. */

/* s moved between stacks: move its epoll memberships along. */
void ops_epoll_restack(struct ops_sock *s);
/* s is being torn down: drop its memberships. */
void ops_epoll_forget(struct ops_sock *s);
/* Make epfd's readiness exact for a poll() on it: its doorbell rings
 * only if an SDP member would be reported now. */
void ops_epoll_settle(int epfd);
/* An epoll fd is being closed. */
void ops_epoll_closing(int epfd);
void ops_epoll_atfork_prepare(void);
void ops_epoll_atfork_child(void);
/* No fd at or above this is an emulated epoll fd. */
int ops_epoll_end(void);

/* s is being relayed (relay.c): its memberships stop (before its fds
 * change), then become the kernel's, with the application's events and
 * data, on its fds (which name the relay's Unix socket by then), and the
 * registry forgets them.  Caller holds s->lock. */
void ops_epoll_detach_all(struct ops_sock *s);
void ops_epoll_to_native(struct ops_sock *s);

/* For epoll.c.  EPOLL_CTL_* op on s (named by fd) in epfd's set: 0, a
 * negative errno (-ENOENT: not a member we know of), or OPS_PASS (no
 * record of epfd: the kernel's call).  Caller holds s->lock. */
int ops_epset_ctl(int epfd, int op, int fd, struct ops_sock *s, struct epoll_event *ev);
/* epfd's record, held for an epoll_wait; NULL if epfd has no SDP members. */
struct ops_ep *ops_epset_get(int epfd);
void ops_epset_put(struct ops_ep *ep);
/* Up to max members with a connect in flight, each with a reference (the
 * caller puts them) and the fd it was added by; returns how many. */
int ops_epset_connecting(struct ops_ep *ep, struct ops_sock **socks, int *fds, int max);
/* What epoll_wait(epfd, events, maxevents, 0) reports now: the SDP
 * members first, then the kernel's; or a negative errno.  *seen: the
 * set's changes as of before the report, for ops_epset_sleep(). */
int ops_epset_report(struct ops_ep *ep, struct epoll_event *events, int maxevents,
		     unsigned *seen);
/* The caller is about to sleep in epoll_wait on ep's epfd, its last
 * report having seen the changes seen: true if it may (the members'
 * changes now ring the doorbell), false if something changed since
 * (report again).  After the sleep, ops_epset_woken(). */
bool ops_epset_sleep(struct ops_ep *ep, unsigned seen);
void ops_epset_woken(struct ops_ep *ep);
/* n events the kernel reported for ep's epfd, our markers taken out (in
 * place); returns the count left. */
int ops_epset_filter(struct ops_ep *ep, struct epoll_event *evs, int n);

/* --- relay.c -------------------------------------------------------------------- */

/* The directions of a connection's data (ops_sock.io_calls). */
enum { OPS_IO_RD = 0, OPS_IO_WR = 1 };

/* Register the fork handlers that relay SDP connections; once, when the
 * engine starts (before any SDP connection exists). */
void ops_relay_init(void);
/* Around an engine data call on s in direction dir: enter returns false
 * (and counts nothing) when s is relayed, the call then being the
 * kernel's. */
bool ops_io_enter(struct ops_sock *s, int dir);
void ops_io_leave(struct ops_sock *s, int dir);
/* s (fd names it, no lock held) is held by this process: ask its owner
 * for it.  On return s is this process's (an SDP connection again), or
 * relayed (the move could not be made: the owner relays it, logged and
 * counted), or still held only if this thread lost a race with another
 * that claims it. */
void ops_hold_claim(int fd, struct ops_sock *s);
/* An fd naming s (with a pair, s->hold_ino) was closed: if that was the
 * last copy of A anywhere, the connection ends now, in this thread (as a
 * close ends a TCP connection before the process exits), not later in
 * the relay thread. */
void ops_hold_closed(struct ops_sock *s);
/* ops_exec_prepare() (fork.c): spawn when this process lives on. */
void ops_hold_exec(bool spawn);

/* --- relayed.c ------------------------------------------------------------------ */

struct sockaddr_un;
/* What s (locked, an established SDP connection whose placeholder is fd)
 * answers once relayed: its names and the values of its options now;
 * NULL without memory, or when the engine does not know the names. */
struct ops_relayed *ops_relayed_new(struct ops_sock *s, int fd);
/* The address B is bound to: it names libsdp and ri's family and
 * addresses (ops_relay_adopt() reads it after exec). */
socklen_t ops_relayed_addr(const struct ops_relayed *ri, int domain, struct sockaddr_un *un);
/* A relayed socket's answers, as Linux TCP gives them. */
int ops_relayed_name(struct ops_sock *s, bool peer, struct sockaddr *addr, socklen_t *len);
int ops_relayed_getsockopt(int fd, struct ops_sock *s, int level, int name, void *val,
			   socklen_t *len);
int ops_relayed_setsockopt(int fd, struct ops_sock *s, int level, int name, const void *val,
			   socklen_t len);

/* --- fork.c --------------------------------------------------------------------- */

/* True in a child that shares the parent's memory (vfork, clone with
 * CLONE_VM): it must change nothing the parent sees. */
bool ops_in_vfork_child(void);

#endif
