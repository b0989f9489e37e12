/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fork() with SDP connections open: holds, claims and the relay
 * (doc/fork.md).
 *
 * Since issue 17 step 2 an established connection that is in no epoll
 * set is *held* at a fork rather than relayed: the socket pair below is
 * made (A at the application's fds, B kept here) but nothing is pumped.
 * The connection stays this process's (its calls go to the engine) until
 * another process holding A uses it: that one claims it on this
 * process's control socket, and the connection, with every byte it
 * holds, moves there (sdp_conn_export/import) with B.  The kernel counts
 * the holds: B polls POLLHUP once every copy of A is closed, and then
 * the owner closes the connection, or hands it back to the process it
 * took it from to be closed there.  A claim that cannot be met turns the
 * hold into a relay, as described next, logged and counted.
 *
 * An SDP connection lives in the memory of the process that made it and
 * its transport cannot be driven by two processes, but a program that
 * forks expects its children to share its sockets, as they share a
 * kernel TCP socket.  So just before a fork (the prepare handler, in the
 * parent) every established SDP connection the process holds becomes a
 * relayed one:
 *
 *   - socketpair(AF_UNIX) gives A and B.  A takes the place of the
 *     application's placeholder at every fd that names the connection,
 *     with each fd's FD_CLOEXEC, the file's O_NONBLOCK and the socket
 *     options that matter on A (timeouts, keepalive...); the epoll sets
 *     the fds were in get them as plain kernel members, with the
 *     application's events and data.
 *   - B stays here (close-on-exec, at a high fd number): the relay
 *     thread (one per process, "sdp-relay", started at the first fork
 *     that needs it) moves bytes both ways between B and the engine
 *     socket, with non-blocking calls and one sdp_ppoll() over all of
 *     them; idle, it sleeps.
 *
 * Then both processes share A as they would share a TCP socket: whoever
 * reads gets the data, and the SDP connection ends, in order, when the
 * last copy of A is closed (B reads EOF and polls POLLHUP), which the
 * parent's close() alone no longer does.  Each side's end of stream is
 * passed on (the peer's EOF becomes shutdown(B, SHUT_WR); A shut for
 * writing becomes an SDP shutdown); an SDP reset or error closes B (A
 * reads EOF); A closed with data left unread (the peer's, or ours in
 * B's queue) resets the SDP connection, as closing a TCP socket with
 * unread data does.
 *
 * In both processes the record of the fd is "relayed": every call on it
 * is the kernel's (on A), except the socket's names (the connection's,
 * kept when the relay was made) and the options of TCP and IP, which are
 * answered as Linux TCP answers them, remembering what was set
 * (relayed.c).
 *
 * After exec the program has A but an empty fd table.  B is bound to an
 * abstract Unix address that names libsdp and encodes the family and both
 * addresses of the connection, so getpeername(A) tells; the preload asks
 * when a call on an fd that is not ours gets an answer TCP would not give
 * (ops_relay_adopt(), relayed.c), and then makes the fd a relayed record.
 *
 * Limits (sdp.conf(5), FORK): the relay lives in the process that made
 * the SDP connection; when it exits or execs, the relays end and the
 * children's copies read EOF.  Connections still connecting and SDP
 * listeners are not relayed (fork.c).
 *
 * Data calls of the application that were already in the engine when
 * the relay was made finish there (ops_io_enter counts them): the relay
 * takes over each direction only once none is left in it, so that the
 * stream's order holds.
 *
 * Locking: relay_lock protects the relay lists, the thread's start and
 * relay_wake; it is taken after any ops_sock lock is released, never
 * under one.  The prepare handler holds it across fork() (the child
 * then finds the lists whole), the parent and child handlers release
 * it.  A relay's own state is the relay thread's alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fdspace.h"
#include "log.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"
#include "sys.h"

#define LOGSYS "fork"

/* Bytes a relay holds in each direction, in a buffer that exists only
 * while it holds some (an idle relay costs no buffer). */
#define RELAY_BUF (64 * 1024)

/* --- the relays -------------------------------------------------------------------- */

struct relay_dir {
	char *buf;		/* RELAY_BUF bytes, or NULL while empty */
	size_t off, len;	/* buf[off, len): taken from the source, not yet passed on */
	bool eof;		/* the source ended */
	bool shut;		/* and that was passed on */
	bool gate;		/* no call of the application is in the engine any more */
};

struct relay {
	struct relay *next;
	struct ops_sock *s;	/* a reference: s->sd stays open until the last one */
	int sd, b, fd;		/* engine socket, our end, the application's fd (logs) */
	/* OPS_IO_RD: engine -> B (what the application reads);
	 * OPS_IO_WR: B -> engine. */
	struct relay_dir dir[2];
	bool a_gone;		/* every copy of A is closed, or shut for reading */
	bool abort;		/* data would be lost: end with a reset */
	int err;		/* the SDP connection failed (errno) */
	bool done;
	bool fresh;		/* not pumped yet */
	/* A hold: no pump.  The connection is this process's, driven by its
	 * own calls; B only tells (POLLHUP) when every copy of A is closed,
	 * and the control socket hands the connection to a claimant. */
	bool hold;
	bool moved;		/* handed over: nothing of it is ours but B */
	uint64_t ino;		/* A's inode: how claimants name the connection */
	unsigned moves;		/* between processes so far */
	nfds_t pidx, pn;	/* its entries in the thread's poll set */
};

static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static struct relay *relays;		/* the thread's, linked and unlinked under relay_lock */
static struct relay *new_relays;	/* made at a fork, not yet taken by the thread */
static bool relay_running;
static int relay_wake = -1;		/* eventfd: the thread looks again */
/* Process exit: the thread stops touching the engine (relay_atexit). */
static pthread_cond_t relay_cond = PTHREAD_COND_INITIALIZER;
static bool relay_exiting, relay_parked, relay_atexit_done;
/* The thread's poll set (a fork child frees its copy). */
static struct pollfd *relay_pfds;
static size_t relay_pcap;
/* The control socket (made under relay_lock, served by the thread):
 * where holders claim this process's connections. */
static int ctl_fd = -1;
static uint64_t ctl_token;

static void relay_kick(void)
{
	int fd = __atomic_load_n(&relay_wake, __ATOMIC_ACQUIRE);
	uint64_t one = 1;

	if (fd >= 0 && sys.write(fd, &one, sizeof(one)) < 0) {
		/* saturated: it is awake anyway */
	}
}

bool ops_io_enter(struct ops_sock *s, int dir)
{
	/* Dekker with relay_make(): either this sees relayed, or the relay
	 * sees this call in flight.  Both seq_cst. */
	atomic_fetch_add(&s->io_calls[dir], 1);
	if (atomic_load(&s->relayed) || atomic_load(&s->held)) {
		ops_io_leave(s, dir);
		return false;
	}
	return true;
}

void ops_io_leave(struct ops_sock *s, int dir)
{
	if (atomic_fetch_sub(&s->io_calls[dir], 1) == 1 && atomic_load(&s->relayed))
		relay_kick();	/* the relay may take this direction over now */
}

/* d's buffer, to fill; false (and r failed) without memory. */
static bool dir_buf(struct relay *r, struct relay_dir *d)
{
	if (!d->buf && !(d->buf = malloc(RELAY_BUF)))
		r->err = ENOMEM;
	return d->buf != NULL;
}

/* An idle direction gives its buffer back. */
static void dir_idle(struct relay_dir *d)
{
	if (d->off >= d->len) {
		d->off = d->len = 0;
		free(d->buf);
		d->buf = NULL;
	}
}

/* engine -> B */
static void pump_down(struct relay *r)
{
	struct relay_dir *d = &r->dir[OPS_IO_RD];

	while (d->gate && !r->err) {
		if (d->off < d->len) {
			if (r->a_gone) {
				/* Nobody will read it: closing TCP with unread
				 * data resets the connection. */
				r->abort = true;
				d->off = d->len;
				continue;
			}
			ssize_t n = sys.send(r->b, d->buf + d->off, d->len - d->off,
						MSG_DONTWAIT | MSG_NOSIGNAL);

			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					return;
				r->a_gone = true;	/* EPIPE: A closed or shut for reading */
				continue;
			}
			d->off += (size_t)n;
			continue;
		}
		d->off = d->len = 0;
		if (d->eof) {
			if (!d->shut) {
				sys.shutdown(r->b, SHUT_WR);
				d->shut = true;
			}
			return;
		}
		if (r->a_gone)
			return;	/* left in the engine: its close resets */
		if (!dir_buf(r, d))
			return;
		ssize_t n = sdp_recv(r->sd, d->buf, RELAY_BUF, MSG_DONTWAIT);

		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n < 0) {
			r->err = (int)-n;
			return;
		}
		if (n == 0) {
			d->eof = true;
			continue;
		}
		d->len = (size_t)n;
		ops_stats_sock_bytes(r->s->row, 0, (uint64_t)n);
	}
}

/* B -> engine */
static void pump_up(struct relay *r)
{
	struct relay_dir *u = &r->dir[OPS_IO_WR];

	while (u->gate && !r->err) {
		if (u->off < u->len) {
			ssize_t n = sdp_send(r->sd, u->buf + u->off, u->len - u->off,
						    MSG_DONTWAIT | MSG_NOSIGNAL);

			if (n == -EAGAIN || n == -EINTR)
				return;
			if (n < 0) {
				r->err = (int)-n;
				return;
			}
			u->off += (size_t)n;
			ops_stats_sock_bytes(r->s->row, (uint64_t)n, 0);
			continue;
		}
		u->off = u->len = 0;
		if (u->eof) {
			if (!u->shut) {
				(void)sdp_shutdown(r->sd, SHUT_WR);
				u->shut = true;
			}
			return;
		}
		if (!dir_buf(r, u))
			return;
		ssize_t n = sys.recv(r->b, u->buf, RELAY_BUF, MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			/* ECONNRESET: the last A was closed with our data
			 * unread in it, which a TCP socket answers with a
			 * reset. */
			r->abort = true;
			r->a_gone = true;
			n = 0;
		}
		if (n == 0) {
			u->eof = true;
			continue;
		}
		u->len = (size_t)n;
	}
}

static bool relay_finished(const struct relay *r)
{
	const struct relay_dir *d = &r->dir[OPS_IO_RD], *u = &r->dir[OPS_IO_WR];

	if (r->err)
		return true;
	return u->eof && u->shut && ((d->eof && d->shut) || r->a_gone);
}

/* s's last hold is gone: the connection is handed back or closed (relay
 * thread or the application's close(), whichever comes first). */
static void hold_end(struct ops_sock *s, bool thread);

/* The relay's end; relay_lock held, r unlinked. */
static void relay_end(struct relay *r)
{
	bool gates = r->dir[OPS_IO_RD].gate && r->dir[OPS_IO_WR].gate;
	bool abort = r->abort || r->err || r->dir[OPS_IO_RD].off < r->dir[OPS_IO_RD].len;

	if (r->moved) {
		sys.close(r->b);
		ops_sock_put(r->s);
		free(r);
		return;
	}
	if (r->hold) {
		/* Unless a close of the application's ended it already (the
		 * two meet under s's lock, so that a close() returns only once
		 * the connection is handed back or closed). */
		hold_end(r->s, true);
		pthread_mutex_lock(&r->s->lock);
		r->s->hold_b = -1;
		pthread_mutex_unlock(&r->s->lock);
	} else if (gates) {
		/* The close below (at the last reference) must not wait in
		 * this thread for an SO_LINGER the application set. */
		if (abort) {
			struct linger lg = { 1, 0 };

			(void)sdp_setsockopt(r->sd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		(void)sdp_set_nonblock(r->sd, 1);
	}
	sys.close(r->b);
	if (r->err)
		sdp_conn_log(LOGSYS, "fd %d: relayed SDP connection ended: %s", r->fd,
			     strerror(r->err));
	else if (!r->hold)
		sdp_conn_log(LOGSYS, "fd %d: relayed SDP connection closed%s", r->fd,
			     abort ? " (reset: data left unread)" : "");
	ops_sock_put(r->s);
	free(r->dir[OPS_IO_RD].buf);
	free(r->dir[OPS_IO_WR].buf);
	free(r);
}

/* Has the application's last call in the engine in direction dir ended? */
static bool gate_opens(struct relay *r, int dir)
{
	if (r->hold || r->dir[dir].gate)
		return false;
	r->dir[dir].gate = atomic_load(&r->s->io_calls[dir]) == 0;
	return r->dir[dir].gate;
}

/* The thread's poll set: room for n entries. */
static bool poll_room(struct pollfd **p, size_t *cap, size_t n)
{
	if (n <= *cap)
		return true;
	size_t c = *cap ? *cap * 2 : 64;

	while (c < n)
		c *= 2;
	struct pollfd *np = realloc(*p, c * sizeof(*np));

	if (!np)
		return false;
	*p = np;
	*cap = c;
	return true;
}

/* The fds of r to wait on, and for what (nothing: it waits for a kick). */
static nfds_t relay_fds(struct relay *r, struct pollfd *p)
{
	const struct relay_dir *d = &r->dir[OPS_IO_RD], *u = &r->dir[OPS_IO_WR];
	nfds_t n = 0;
	short be = 0, ee = 0;

	if (r->hold) {
		/* POLLHUP: every copy of A is closed. */
		p[n++] = (struct pollfd){ .fd = r->b, .events = 0 };
		return n;
	}

	if (u->gate && !u->eof && u->off >= u->len)
		be |= POLLIN;
	if (d->off < d->len && !r->a_gone)
		be |= POLLOUT;
	/* With no event asked, B still reports POLLHUP when A is gone. */
	if (be || !r->a_gone)
		p[n++] = (struct pollfd){ .fd = r->b, .events = be };
	if (d->gate && !d->eof && d->off >= d->len && !r->a_gone)
		ee |= POLLIN;
	if (u->off < u->len)
		ee |= POLLOUT;
	/* The engine only when something is asked of it: its POLLHUP would
	 * otherwise wake us for nothing. */
	if (ee)
		p[n++] = (struct pollfd){ .fd = r->sd, .events = ee };
	return n;
}

static void relay_pump(struct relay *r)
{
	if (r->hold) {
		r->done = r->a_gone || r->moved;
		return;
	}
	pump_up(r);
	pump_down(r);
	pump_up(r);	/* what A wrote while we sent down */
	dir_idle(&r->dir[OPS_IO_RD]);
	dir_idle(&r->dir[OPS_IO_WR]);
	r->done = relay_finished(r);
}

/* Claims on the control socket (below). */
static void ctl_serve(int ctl);

static void *relay_main(void *arg)
{
	(void)arg;
	for (;;) {
		/* Take the new relays, and end the finished ones: both under
		 * the lock, so that a fork's child sees every B it must close. */
		pthread_mutex_lock(&relay_lock);
		if (relay_exiting) {
			/* The engine's exit flush runs next: never again in
			 * the engine (the kernel closes every B). */
			relay_parked = true;
			pthread_cond_broadcast(&relay_cond);
			for (;;)
				pthread_cond_wait(&relay_cond, &relay_lock);
		}
		while (new_relays) {
			struct relay *r = new_relays;

			new_relays = r->next;
			r->next = relays;
			r->fresh = true;
			relays = r;
		}
		size_t n = 2;	/* the wake-up and the control socket */
		int ctl = ctl_fd;

		for (struct relay **pp = &relays; *pp;) {
			struct relay *r = *pp;

			if (r->done) {
				*pp = r->next;
				relay_end(r);
			} else {
				n += 2;
				pp = &r->next;
			}
		}
		pthread_mutex_unlock(&relay_lock);

		/* Only this thread changes the list: it is read unlocked.
		 * What needs no wait first: new relays, and directions the
		 * application's calls in flight just left (after the kick
		 * that said so was drained, below). */
		bool room = poll_room(&relay_pfds, &relay_pcap, n), ended = false;
		struct pollfd *p = relay_pfds;

		for (struct relay *r = relays; r; r = r->next) {
			/* Both gates are looked at, whatever the first says. */
			bool rd = gate_opens(r, OPS_IO_RD), wr = gate_opens(r, OPS_IO_WR);

			if (r->fresh || !room || rd || wr)
				relay_pump(r);
			r->fresh = false;
			ended |= r->done;
		}
		if (ended)
			continue;
		if (!room) {
			/* No memory for the set: look again after a pause. */
			struct timespec ts = { 0, 10 * 1000000L };

			nanosleep(&ts, NULL);
			continue;
		}
		int wake = __atomic_load_n(&relay_wake, __ATOMIC_RELAXED);
		nfds_t np = 0;
		uint64_t v;

		p[np++] = (struct pollfd){ .fd = wake, .events = POLLIN };
		p[np++] = (struct pollfd){ .fd = ctl, .events = POLLIN };	/* -1: ignored */
		for (struct relay *r = relays; r; r = r->next) {
			r->pidx = np;
			r->pn = relay_fds(r, p + np);
			np += r->pn;
		}
		int ready = sdp_ppoll(p, np, NULL, NULL);

		if (ready < 0 && ready != -EINTR) {
			/* Out of memory, say: no busy loop meanwhile. */
			struct timespec ts = { 0, 10 * 1000000L };

			nanosleep(&ts, NULL);
		}
		if (ready <= 0)
			continue;
		if (p[0].revents && sys.read(wake, &v, sizeof(v)) < 0) {
			/* drained already */
		}
		if (p[1].revents)
			ctl_serve(ctl);
		for (struct relay *r = relays; r; r = r->next) {
			bool busy = false;

			for (nfds_t i = r->pidx; i < r->pidx + r->pn; i++) {
				if (!p[i].revents)
					continue;
				busy = true;
				if (p[i].fd == r->b && (p[i].revents & (POLLHUP | POLLERR)))
					r->a_gone = true;
			}
			if (busy)
				relay_pump(r);
		}
	}
	return NULL;
}

/*
 * exit(): before the destructors, where the engine closes every socket
 * it has (sdp/progress.c), the thread parks outside the engine.  What a
 * relay holds is lost then, as the children are told (sdp.conf(5)).
 */
static void relay_atexit(void)
{
	struct timespec until;

	pthread_mutex_lock(&relay_lock);
	if (relay_running) {
		relay_exiting = true;
		relay_kick();
		/* Bounded: a thread that cannot come (a fork child's copy of
		 * the state, say) must not hold up the exit. */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 2;
		while (!relay_parked &&
		       pthread_cond_timedwait(&relay_cond, &relay_lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&relay_lock);
}

/* Start the thread (relay_lock held); 0 or a negative errno. */
static int relay_start_locked(void)
{
	pthread_t t;
	sigset_t all, old;
	int r;

	if (relay_running)
		return 0;
	int wake = FDSPACE_MAKE(sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));

	if (wake < 0)
		return wake;
	__atomic_store_n(&relay_wake, wake, __ATOMIC_RELEASE);
	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&t, NULL, relay_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		__atomic_store_n(&relay_wake, -1, __ATOMIC_RELEASE);
		fdspace_close(wake);
		return r;
	}
	pthread_setname_np(t, "sdp-relay");
	pthread_detach(t);
	relay_running = true;
	/* Once: a fork child inherits the registration. */
	if (!relay_atexit_done && !atexit(relay_atexit))
		relay_atexit_done = true;
	return 0;
}

/*
 * B's fd: high, out of the range the application is given fds from (so
 * that its numbers stay those it would get on TCP), but not so high that
 * the kernel's fd table grows much for it.
 */
static int relay_high_fd(int fd)
{
	struct rlimit rl;
	rlim_t floor = 4096;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur / 2 < floor)
		floor = rl.rlim_cur / 2;
	int hfd = floor > (rlim_t)fd ? sys.fcntl(fd, F_DUPFD_CLOEXEC, (int)floor) : -1;

	if (hfd < 0)
		return fd;	/* where it is, then */
	sys.close(fd);
	return hfd;
}

/* A socket and an fd that named it when the table was read. */
struct cand {
	struct ops_sock *s;
	int fd;
};

/* Options of the socket itself that live on A: carried over from the
 * placeholder (which kept a copy of every one the application set). */
static const int carried_opts[] = {
	SO_RCVTIMEO, SO_SNDTIMEO, SO_KEEPALIVE, SO_LINGER, SO_OOBINLINE, SO_PRIORITY, SO_RCVLOWAT,
};

/*
 * s (locked, an established SDP connection) becomes relayed, or held
 * (hold: the same socket pair, A at its fds, but no pump: the connection
 * stays this process's until a holder claims it); fds are the fds that
 * named it when the table was read.  Returns the relay, or NULL when s
 * stays as it was (then it is "inherited" in the child, as before relays
 * existed).
 */
static struct relay *relay_make_in(struct ops_sock *s, const struct cand *fds, size_t nfds,
				   bool hold)
{
	struct relay *r = calloc(1, sizeof(*r));
	struct ops_relayed *ri = NULL;
	int sv[2] = { -1, -1 }, ph = -1;

	for (size_t i = 0; i < nfds && ph < 0; i++)
		if (ops_fd_names(fds[i].fd, s))
			ph = fds[i].fd;
	if (!r || ph < 0 || !(ri = ops_relayed_new(s, ph)) ||
	    sys.socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		goto fail;
	sv[1] = relay_high_fd(sv[1]);

	struct sockaddr_un un;
	socklen_t ul = ops_relayed_addr(ri, s->domain, &un);

	if (sys.bind(sv[1], (void *)&un, ul) < 0)
		sdp_warn(LOGSYS, "fd %d: the relay's name: %s; after exec the socket will not be "
			 "known as TCP", ph, strerror(errno));
	if (sys.fcntl(sv[1], F_SETFL, O_NONBLOCK) < 0)
		goto fail;
	for (size_t i = 0; i < sizeof(carried_opts) / sizeof(carried_opts[0]); i++) {
		char v[32];
		socklen_t l = sizeof(v);

		if (sys.getsockopt(ph, SOL_SOCKET, carried_opts[i], v, &l) == 0)
			(void)sys.setsockopt(sv[0], SOL_SOCKET, carried_opts[i], v, l);
	}
	int fl = sys.fcntl(ph, F_GETFL);

	if (fl >= 0 && (fl & O_NONBLOCK) && sys.fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0)
		goto fail;

	/* From here on A takes the placeholder's place.  The epoll
	 * registrations come off first: a kernel one is on the placeholder's
	 * file, which a child from an earlier fork may keep open.  (A held
	 * socket has none: one in an epoll set is relayed.) */
	if (!hold)
		ops_epoll_detach_all(s);
	int named = 0;

	for (size_t i = 0; i < nfds; i++) {
		int fd = fds[i].fd;

		if (!ops_fd_names(fd, s))
			continue;	/* closed meanwhile (ops_close holds s->lock) */
		int fdfl = sys.fcntl(fd, F_GETFD);
		int rr;

		do
			rr = sys.dup3(sv[0], fd, fdfl >= 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
		while (rr < 0 && (errno == EINTR || errno == EBUSY));
		if (rr < 0)
			sdp_err(LOGSYS, "fd %d: cannot take the relay's socket: %s", fd,
				strerror(errno));
		else
			named++;
	}
	if (!named) {
		if (!hold)
			ops_epoll_restack(s);	/* as it was */
		goto fail;
	}
	struct stat st;

	if (fstat(sv[0], &st) == 0)
		r->ino = (uint64_t)st.st_ino;
	sys.close(sv[0]);
	r->s = s;
	ops_sock_get(s);
	r->sd = s->sd;
	r->b = sv[1];
	r->fd = ph;
	s->rinfo = ri;
	s->hold_ino = r->ino;
	s->hold_b = r->b;
	if (hold) {
		/* The child's copy names this process's control socket. */
		s->own_pid = getpid();
		s->own_token = ctl_token;
		r->hold = true;
		sdp_conn_log(LOGSYS, "fd %d: SDP connection held for forked children", ph);
		return r;
	}
	atomic_store(&s->relayed, true);	/* after A is in place: see ops_io_enter */
	ops_epoll_to_native(s);
	/* The relay passes on what it gets at once: nothing may stay corked
	 * (the application's TCP_CORK is remembered above). */
	int zero = 0, one = 1;

	(void)sdp_setsockopt(s->sd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
	(void)sdp_setsockopt(s->sd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ops_stats_sock_set_relayed(s->row);
	ops_stats_count(OPS_C_RELAYS, 1);
	sdp_conn_log(LOGSYS, "fd %d: SDP connection relayed for forked children", ph);
	return r;

fail:
	sdp_err(LOGSYS, "fd %d: SDP connection not relayed (%s): a forked child cannot use it",
		ph >= 0 ? ph : fds[0].fd, strerror(errno ? errno : ENOMEM));
	if (sv[0] >= 0) {
		sys.close(sv[0]);
		sys.close(sv[1]);
	}
	free(r);
	free(ri);
	return NULL;
}

/* The pair's two numbers are low until one is moved and the other closed:
 * in a window (common/fdspace.h). */
static struct relay *relay_make(struct ops_sock *s, const struct cand *fds, size_t nfds, bool hold)
{
	fdspace_making();
	struct relay *r = relay_make_in(s, fds, nfds, hold);

	fdspace_unmade();
	return r;
}

/* --- holds, claims and the control socket -------------------------------------------- */

/*
 * A claim: a holder connects to the owner's control socket (abstract,
 * named by the owner's pid and a random token, so that a reused pid
 * cannot answer), sends a claim_req naming the connection by A's inode,
 * and gets a claim_rep.  With CLAIM_OK come the transport's descriptor
 * and B (SCM_RIGHTS) and the connection's description
 * (sdp_conn_export()).  Both sides check that the other runs under the
 * same uid (SO_PEERCRED); the description is for the same build only
 * (move.c checks its magic and size).
 */
#define CTL_MAGIC 0x5344434cu	/* "SDCL" */

/* CLAIM_CLOSE: the claimant's last hold is closed; it sends the
 * connection (a claim_rep header, the description, the transport's
 * descriptor) for this process to finish closing. */
enum { CLAIM_MOVE = 1, CLAIM_RELAY = 2, CLAIM_CLOSE = 3 };
enum { CLAIM_OK = 1, CLAIM_BUSY, CLAIM_RELAYED, CLAIM_UNKNOWN, CLAIM_REDIRECT };

/* (pad: the hole before token, named so that it is written: the
 * compiler's own would send 4 bytes of this process's stack.) */
struct claim_req {
	uint32_t magic, kind;
	uint64_t ino;
	int32_t pid;		/* the claimant's control socket */
	uint32_t pad;
	uint64_t token;
};

struct claim_rep {
	uint32_t magic, status;
	uint32_t moves, len;
	int32_t pid;		/* CLAIM_REDIRECT: the owner now */
	uint32_t pad;
	uint64_t token;
};

/* A connection that moves more often than this (two processes using it
 * by turns) is relayed instead: a move per call would cost more. */
#define MOVES_MAX 16
/* A claimant asks this many times while the owner answers busy (a call
 * of its own in the connection, a send under way), about a millisecond
 * apart, then asks for a relay. */
#define CLAIM_TRIES 500

static socklen_t ctl_addr(pid_t pid, uint64_t token, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "libsdp-ctl.%d.%016llx",
			 (int)pid, (unsigned long long)token);

	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The control socket of this process (relay_lock held); 0 or a negative errno. */
static int ctl_up_locked(void)
{
	struct sockaddr_un un;
	uint64_t token;

	if (ctl_fd >= 0)
		return 0;
	if (getrandom(&token, sizeof(token), 0) != sizeof(token))
		return -errno;
	int fd = FDSPACE_MAKE(sys.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));

	if (fd < 0)
		return fd;
	socklen_t l = ctl_addr(getpid(), token, &un);

	if (sys.bind(fd, (void *)&un, l) < 0 || sys.listen(fd, 64) < 0) {
		int e = -errno;

		fdspace_close(fd);
		return e;
	}
	ctl_token = token;
	__atomic_store_n(&ctl_fd, fd, __ATOMIC_RELEASE);
	relay_kick();
	return 0;
}

/* The thread and the control socket: this process may hold connections
 * from now on.  No ops_sock lock held. */
static int hold_up(void)
{
	pthread_mutex_lock(&relay_lock);
	int e = relay_start_locked();

	if (!e)
		e = ctl_up_locked();
	pthread_mutex_unlock(&relay_lock);
	return e;
}

/* r, a hold of this process, becomes a relay (the thread's): the
 * connection cannot move, every process's A carries it from now on. */
static void hold_to_relay(struct relay *r, pid_t claimant, bool asked, const char *why)
{
	struct ops_sock *s = r->s;
	int zero = 0, one = 1;

	pthread_mutex_lock(&s->lock);
	ops_epoll_detach_all(s);
	atomic_store(&s->relayed, true);
	ops_epoll_to_native(s);
	(void)sdp_setsockopt(s->sd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
	(void)sdp_setsockopt(s->sd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ops_stats_sock_set_relayed(s->row);
	pthread_mutex_unlock(&s->lock);
	r->hold = false;
	r->fresh = true;
	ops_stats_count(OPS_C_RELAYS, 1);
	ops_stats_count(OPS_C_MOVES_REFUSED, 1);
	if (asked)	/* for an exec or a spawn: as it should be */
		sdp_conn_log(LOGSYS, "fd %d: SDP connection relayed for process %d (%s)", r->fd,
			     (int)claimant, why);
	else
		sdp_warn(LOGSYS, "fd %d: SDP connection not moved to process %d (%s): relayed",
			 r->fd, (int)claimant, why);
}

static bool send_rep(int c, struct claim_rep rep, const void *blob, const int *fds, int nfds)
{
	uint32_t len = rep.len;

	struct iovec iov[2] = { { &rep, sizeof(rep) }, { (void *)blob, len } };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} cm;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };

	if (nfds) {
		memset(&cm, 0, sizeof(cm));
		m.msg_control = cm.b;
		m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);

		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
	}
	/* Blocking (the accepted socket's own mode): small, and the
	 * claimant is waiting for it; SO_SNDTIMEO bounds it. */
	ssize_t n = sys.sendmsg(c, &m, MSG_NOSIGNAL);

	return n == (ssize_t)(sizeof(rep) + len);
}

/* The claim q for hold r, on control connection c: the connection moves
 * (the answer sent here), or the answer to send is returned. */
static uint32_t claim_serve(struct relay *r, const struct claim_req *q, int c)
{
	struct ops_sock *s = r->s;
	void *blob = NULL;
	size_t len = 0;
	int tfd = -1, e = -EBUSY;

	if (q->kind == CLAIM_RELAY) {
		hold_to_relay(r, q->pid, true, "it asked for a relay");
		return CLAIM_RELAYED;
	}
	if (r->moves >= MOVES_MAX) {
		hold_to_relay(r, q->pid, false, "moved too often: used by two processes by turns");
		return CLAIM_RELAYED;
	}
	/* Never wait for the lock here: a thread of ours may hold it while
	 * it asks another process for something. */
	if (pthread_mutex_trylock(&s->lock))
		return CLAIM_BUSY;
	/* Dekker with ops_io_enter(): a call of ours that comes now sees
	 * held and claims the connection back from its new owner. */
	atomic_store(&s->held, true);
	if (atomic_load(&s->io_calls[OPS_IO_RD]) || atomic_load(&s->io_calls[OPS_IO_WR])) {
		atomic_store(&s->held, false);
		pthread_mutex_unlock(&s->lock);
		return CLAIM_BUSY;
	}
	for (int i = 0; i < 20 && e == -EBUSY; i++) {
		struct timespec ts = { 0, 500 * 1000L };

		e = sdp_conn_export(s->sd, &blob, &len, &tfd);
		if (e == -EBUSY)
			nanosleep(&ts, NULL);	/* the progress thread moves it on */
	}
	if (e < 0) {
		atomic_store(&s->held, false);
		pthread_mutex_unlock(&s->lock);
		if (e == -EBUSY)
			return CLAIM_BUSY;
		hold_to_relay(r, q->pid, false, strerror(-e));
		return CLAIM_RELAYED;
	}
	int fds[2] = { tfd, r->b };

	if (len > UINT32_MAX ||
	    !send_rep(c, (struct claim_rep){ CTL_MAGIC, CLAIM_OK, r->moves + 1, (uint32_t)len, 0, 0, 0 },
		      blob, fds, 2)) {
		/* The claimant is gone: the connection stays here. */
		int nsd = sdp_conn_import(blob, len, tfd, SOCK_CLOEXEC);

		free(blob);
		if (nsd < 0) {
			sdp_err(LOGSYS, "fd %d: SDP connection lost in a failed move: %s", r->fd,
				strerror(-nsd));
			s->sd = -1;
			atomic_store(&s->relayed, true);	/* A reads EOF */
			r->moved = true;
			atomic_store(&s->held, false);
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
		s->sd = r->sd = nsd;
		(void)sdp_set_nonblock(nsd, false);
		atomic_store(&s->held, false);
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	free(blob);
	sys.close(tfd);
	s->sd = -1;
	s->hold_b = -1;
	s->own_pid = q->pid;
	s->own_token = q->token;
	ops_stats_sock_free(s->row);
	s->row = NULL;
	pthread_mutex_unlock(&s->lock);
	r->moved = true;
	ops_stats_count(OPS_C_MOVES_OUT, 1);
	sdp_conn_log(LOGSYS, "fd %d: SDP connection moved to process %d", r->fd, (int)q->pid);
	return 0;
}

/* A connection this process has handed on: where it went. */
struct moved_to {
	uint64_t ino;
	pid_t pid;
	uint64_t token;
};

static void find_moved(int fd, struct ops_sock *s, void *arg)
{
	struct moved_to *m = arg;

	(void)fd;
	/* Never waits (ctl_serve_one() says why): busy, the claimant asks
	 * again. */
	if (m->pid || pthread_mutex_trylock(&s->lock))
		return;
	if (s->hold_ino == m->ino && atomic_load(&s->held) && s->own_pid != getpid()) {
		m->pid = s->own_pid;
		m->token = s->own_token;
	}
	pthread_mutex_unlock(&s->lock);
}

/* A connection handed back to be closed here (CLAIM_CLOSE): imported and
 * closed at once, its teardown left to the progress thread of this
 * process, which lives on.  Answers CLAIM_OK once it has it. */
static void close_serve(int c, const struct claim_req *q)
{
	struct claim_rep h;
	int tfd = -1;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { &h, sizeof(h) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			    .msg_controllen = sizeof(cm.b) };
	ssize_t n = sys.recvmsg(c, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
	struct cmsghdr *ch = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;

	if (ch && ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS &&
	    ch->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&tfd, CMSG_DATA(ch), sizeof(int));
	if (n != sizeof(h) || h.magic != CTL_MAGIC || tfd < 0 || h.len > (64u << 20)) {
		if (tfd >= 0)
			sys.close(tfd);
		return;
	}
	void *blob = malloc(h.len ? h.len : 1);

	if (!blob || sys.recv(c, blob, h.len, MSG_WAITALL) != (ssize_t)h.len) {
		free(blob);
		sys.close(tfd);
		return;
	}
	int nsd = sdp_conn_import(blob, h.len, tfd, SOCK_CLOEXEC | SOCK_NONBLOCK);

	free(blob);
	if (nsd < 0) {
		sdp_err(LOGSYS, "an SDP connection process %d handed back to close: %s",
			(int)q->pid, strerror(-nsd));
		return;
	}
	(void)send_rep(c, (struct claim_rep){ CTL_MAGIC, CLAIM_OK, 0, 0, 0, 0, 0 }, NULL, NULL, 0);
	sdp_conn_log(LOGSYS, "SDP connection of process %d closed here", (int)q->pid);
	(void)sdp_close(nsd);	/* non-blocking: no linger in this thread */
}

/* One claimant on the control socket. */
static void ctl_serve_one(int c)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct claim_req q;
	struct timeval tv = { 2, 0 };
	struct claim_rep rep = { CTL_MAGIC, CLAIM_UNKNOWN, 0, 0, 0, 0, 0 };
	struct relay *r;

	if (sys.getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != geteuid())
		return;
	(void)sys.setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)sys.setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (sys.recv(c, &q, sizeof(q), MSG_WAITALL) != sizeof(q) || q.magic != CTL_MAGIC ||
	    q.pid != cr.pid)
		return;
	if (q.kind == CLAIM_CLOSE) {
		close_serve(c, &q);
		return;
	}
	/* Only this thread changes the list: read unlocked. */
	for (r = relays; r; r = r->next)
		if (r->ino == q.ino && !r->moved && !r->done)
			break;
	if (r && !r->hold) {
		rep.status = CLAIM_RELAYED;
	} else if (r) {
		rep.status = claim_serve(r, &q, c);
	} else {
		/* Moved on from here: the claimant asks its new owner. */
		struct moved_to m = { q.ino, 0, 0 };

		ops_fd_for_each(find_moved, &m);
		if (m.pid)
			rep = (struct claim_rep){ CTL_MAGIC, CLAIM_REDIRECT, 0, 0, m.pid, 0, m.token };
	}
	if (rep.status)
		(void)send_rep(c, rep, NULL, NULL, 0);
}

static void ctl_serve(int ctl)
{
	for (int i = 0; i < 64; i++) {
		int c = sys.accept4(ctl, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0)
			return;
		ctl_serve_one(c);
		sys.close(c);
	}
}

/* Ask fd's owner (s locked); the answer, and with CLAIM_OK the
 * description in *blob and the descriptors in fds. */
static uint32_t claim_ask(struct ops_sock *s, uint32_t kind, void **blob, size_t *len, int fds[2])
{
	struct sockaddr_un un;
	socklen_t ul = ctl_addr(s->own_pid, s->own_token, &un);
	struct claim_req q = { CTL_MAGIC, kind, s->hold_ino, getpid(), 0, 0 };
	struct claim_rep rep;
	struct timeval tv = { 5, 0 };
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	uint32_t status = 0;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} cm;
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			    .msg_controllen = sizeof(cm.b) };

	q.token = __atomic_load_n(&ctl_token, __ATOMIC_RELAXED);
	int c = sys.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (c < 0)
		return 0;
	(void)sys.setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)sys.setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (sys.connect(c, (void *)&un, ul) < 0 ||
	    sys.getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.pid != s->own_pid ||
	    cr.uid != geteuid() || sys.send(c, &q, sizeof(q), MSG_NOSIGNAL) != sizeof(q))
		goto out;
	ssize_t n = sys.recvmsg(c, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);

	for (struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
		    h->cmsg_len == CMSG_LEN(2 * sizeof(int)))
			memcpy(fds, CMSG_DATA(h), 2 * sizeof(int));
	}
	if (n != sizeof(rep) || rep.magic != CTL_MAGIC)
		goto out;
	status = rep.status;
	if (status == CLAIM_REDIRECT && rep.pid > 0) {
		s->own_pid = rep.pid;
		s->own_token = rep.token;
	}
	if (status != CLAIM_OK)
		goto out;
	*len = rep.len;
	*blob = malloc(rep.len ? rep.len : 1);
	if (fds[0] < 0 || fds[1] < 0 || !*blob ||
	    sys.recv(c, *blob, rep.len, MSG_WAITALL) != (ssize_t)rep.len) {
		sdp_err(LOGSYS, "a moved SDP connection arrived incomplete");
		status = 0;
		goto out;
	}
	s->hold_moves = rep.moves;
out:
	sys.close(c);
	return status;
}

/* The statistics row of a connection moved here (s locked). */
static void hold_row(struct ops_sock *s, int fd)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	const char *t = sdp_transport_name(s->sd);

	if (!s->row)
		s->row = ops_stats_sock_alloc(fd);
	ops_stats_sock_set_stack(s->row, OPS_STACK_SDP, OPS_FB_NONE);
	ops_stats_sock_set_state(s->row, OPS_ST_ESTABLISHED);
	ops_stats_sock_set_transport(s->row, t, t ? "bcopy" : NULL);
	if (sdp_getsockname(s->sd, (void *)&l, &ll) < 0)
		ll = 0;
	if (sdp_getpeername(s->sd, (void *)&p, &pl) < 0)
		pl = 0;
	ops_stats_sock_set_addrs(s->row, ll ? (void *)&l : NULL, ll, pl ? (void *)&p : NULL, pl);
}

/* The claim; relay_only: ask the owner to relay it (an exec is coming). */
static void hold_claim(int fd, struct ops_sock *s, bool relay_only)
{
	struct relay *r = NULL;
	pid_t from = s->own_pid;
	const char *lost = NULL;
	/* Without a control socket of its own this process could not give
	 * the connection back: it asks for a relay. */
	uint32_t kind = relay_only || hold_up() ? CLAIM_RELAY : CLAIM_MOVE;

	pthread_mutex_lock(&s->lock);
	for (int tries = 0; atomic_load(&s->held) && !lost; tries++) {
		void *blob = NULL;
		size_t len = 0;
		int fds[2] = { -1, -1 };

		from = s->own_pid;
		if (tries == CLAIM_TRIES)
			kind = CLAIM_RELAY;
		if (tries > CLAIM_TRIES) {
			lost = "its owner does not answer";
			break;
		}
		uint32_t st = claim_ask(s, kind, &blob, &len, fds);

		if (st == CLAIM_OK) {
			int nsd = sdp_conn_import(blob, len, fds[0], SOCK_CLOEXEC);
			int fl = sys.fcntl(fd, F_GETFL);

			free(blob);
			if (nsd < 0) {
				sys.close(fds[1]);
				lost = strerror(-nsd);
				break;
			}
			(void)sdp_set_nonblock(nsd, fl >= 0 && (fl & O_NONBLOCK));
			if (!(r = calloc(1, sizeof(*r)))) {
				/* B closed: the connection ends with our last A. */
				sys.close(fds[1]);
			} else {
				ops_sock_get(s);
				*r = (struct relay){ .s = s, .sd = nsd, .b = fds[1], .fd = fd,
						     .hold = true, .ino = s->hold_ino,
						     .moves = s->hold_moves };
			}
			s->sd = nsd;
			s->hold_b = r ? r->b : -1;
			s->prev_pid = s->own_pid;
			s->prev_token = s->own_token;
			s->own_pid = getpid();
			s->own_token = __atomic_load_n(&ctl_token, __ATOMIC_RELAXED);
			hold_row(s, fd);
			ops_sigio_attach(fd, s);
			atomic_store(&s->held, false);
			ops_stats_count(OPS_C_MOVES_IN, 1);
			sdp_conn_log(LOGSYS, "fd %d: SDP connection moved here from process %d (%s)",
				     fd, (int)from, sdp_transport_name(nsd) ?: "?");
			break;
		}
		if (fds[0] >= 0)
			sys.close(fds[0]);
		if (fds[1] >= 0)
			sys.close(fds[1]);
		if (st == CLAIM_RELAYED) {
			atomic_store(&s->relayed, true);
			atomic_store(&s->held, false);
			break;
		}
		if (st == 0 && tries > 2) {
			lost = "its owner is gone";
			break;
		}
		if (st == CLAIM_REDIRECT)
			continue;
		struct timespec ts = { 0, 1000 * 1000L };

		nanosleep(&ts, NULL);	/* busy (or not there yet): again */
	}
	if (lost) {
		/* What A reads is what is left: EOF once the owner's B is
		 * closed, as a relay's ends when its process does. */
		atomic_store(&s->relayed, true);
		atomic_store(&s->held, false);
		ops_stats_count(OPS_C_MOVES_REFUSED, 1);
		sdp_err(LOGSYS, "fd %d: SDP connection of process %d could not move here (%s)", fd,
			(int)from, lost);
	}
	pthread_mutex_unlock(&s->lock);
	if (r) {
		pthread_mutex_lock(&relay_lock);
		r->next = new_relays;
		new_relays = r;
		pthread_mutex_unlock(&relay_lock);
		relay_kick();
	}
}

void ops_hold_claim(int fd, struct ops_sock *s)
{
	hold_claim(fd, s, false);
}

/* Hand sd's connection (s locked, its last hold closed) back to the
 * process this one took it from, to be closed there: true if it has it. */
static bool close_back(struct ops_sock *s, int sd)
{
	struct sockaddr_un un;
	socklen_t ul = ctl_addr(s->prev_pid, s->prev_token, &un);
	struct claim_req q = { CTL_MAGIC, CLAIM_CLOSE, s->hold_ino, getpid(), 0, 0 };
	struct timeval tv = { 5, 0 };
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct claim_rep rep;
	void *blob = NULL;
	size_t len = 0;
	int tfd = -1, e = -EBUSY;
	bool done = false;

	/* Quiet first: what is posted completes, what waits for credits
	 * moves with it.  Bounded: else it closes here. */
	for (int i = 0; i < 200 && e == -EBUSY; i++) {
		struct timespec ts = { 0, 500 * 1000L };

		e = sdp_conn_export(sd, &blob, &len, &tfd);
		if (e == -EBUSY)
			nanosleep(&ts, NULL);
	}
	if (e == -ENOTCONN)
		sdp_conn_log(LOGSYS, "SDP connection over (both ends shut, or reset) at its last "
			     "holder's close: nothing to hand back");
	else if (e < 0)
		sdp_warn(LOGSYS, "SDP connection cannot go back to process %d to finish (%s): "
			 "closed here", (int)s->prev_pid, strerror(-e));
	if (e < 0)
		return false;
	int c = sys.socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (c >= 0) {
		(void)sys.setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		(void)sys.setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		done = sys.connect(c, (void *)&un, ul) == 0 &&
		       sys.getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
		       cr.pid == s->prev_pid && cr.uid == geteuid() &&
		       sys.send(c, &q, sizeof(q), MSG_NOSIGNAL) == sizeof(q) && len <= UINT32_MAX &&
		       send_rep(c, (struct claim_rep){ CTL_MAGIC, CLAIM_OK, 0, (uint32_t)len, 0, 0, 0 },
				blob, &tfd, 1) &&
		       sys.recv(c, &rep, sizeof(rep), MSG_WAITALL) == sizeof(rep) &&
		       rep.magic == CTL_MAGIC && rep.status == CLAIM_OK;
		sys.close(c);
	}
	if (done) {
		sys.close(tfd);
	} else {
		/* Closed here after all. */
		int nsd = sdp_conn_import(blob, len, tfd, SOCK_CLOEXEC);

		if (nsd >= 0)
			(void)sdp_close(nsd);
		else
			sdp_err(LOGSYS, "SDP connection lost at its close: %s", strerror(-nsd));
	}
	free(blob);
	return true;
}

static void hold_end(struct ops_sock *s, bool thread)
{
	int sd = -1;

	pthread_mutex_lock(&s->lock);
	if (!atomic_load(&s->held) && !s->relayed && s->hold_b >= 0 && s->sd >= 0) {
		struct pollfd p = { .fd = s->hold_b, .events = 0 };

		if (sys.poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) {
			sd = s->sd;
			s->sd = -1;
			/* The close of a process that took it over (a fork
			 * child, which may _exit() next) is finished by the one
			 * it came from, which lives on, as a relay's was. */
			if (s->prev_pid && close_back(s, sd)) {
				sdp_conn_log(LOGSYS, "SDP connection closed by its last holder, "
					     "handed back to process %d to finish", (int)s->prev_pid);
				sd = -1;
			}
		}
	}
	if (sd >= 0) {
		/* The relay thread never waits for an SO_LINGER. */
		if (thread)
			(void)sdp_set_nonblock(sd, 1);
		sdp_conn_log(LOGSYS, "SDP connection closed by its last holder");
		(void)sdp_close(sd);
	}
	pthread_mutex_unlock(&s->lock);
}

void ops_hold_closed(struct ops_sock *s)
{
	hold_end(s, false);
}

/* The fds that will carry a connection into the new image. */
struct exec_fds {
	int *v;
	size_t n, cap;
};

static void exec_collect(int fd, struct ops_sock *s, void *arg)
{
	struct exec_fds *e = arg;
	int fl;

	if (!s->hold_ino || s->relayed || (fl = sys.fcntl(fd, F_GETFD)) < 0 || (fl & FD_CLOEXEC))
		return;
	if (e->n == e->cap) {
		size_t cap = e->cap ? 2 * e->cap : 8;
		int *v = realloc(e->v, cap * sizeof(*v));

		if (!v)
			return;
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = fd;
}

void ops_hold_exec(bool spawn)
{
	struct exec_fds e = { 0 };
	int saved = errno;

	ops_fd_for_each(exec_collect, &e);
	for (size_t i = 0; i < e.n; i++) {
		struct ops_sock *s = ops_fd_get(e.v[i]);

		if (!s)
			continue;
		if (atomic_load(&s->held)) {
			hold_claim(e.v[i], s, true);
		} else if (!s->relayed && spawn) {
			/* Ours, and we live on: our own thread relays it
			 * (asked as any claimant would, without s's lock,
			 * which it takes). */
			void *blob = NULL;
			size_t len = 0;
			int fds[2] = { -1, -1 };

			if (claim_ask(s, CLAIM_RELAY, &blob, &len, fds) != CLAIM_RELAYED)
				sdp_err(LOGSYS, "fd %d: SDP connection not relayed for a program "
					"started with it", e.v[i]);
		} else if (!s->relayed)
			/* Its engine and this process's relay thread end with
			 * the exec: the new image's A reads EOF. */
			sdp_warn(LOGSYS, "fd %d: an SDP connection this process drives does not "
				 "survive exec", e.v[i]);
		ops_sock_put(s);
	}
	free(e.v);
	errno = saved;
}

/* --- fork handlers ------------------------------------------------------------------ */

struct cands {
	struct cand *v;
	size_t n, cap;
	bool oom;
};

static bool relayable(const struct ops_sock *s)
{
	return !s->relayed && !s->inherited && !s->hold_ino && s->stack == OPS_STACK_SDP && s->sd >= 0 &&
	       s->state == OPS_ST_ESTABLISHED && s->conn != OPS_CONN_SDP &&
	       s->conn != OPS_CONN_SDP_ONLY;
}

/* Every socket of the table: which ones to relay is decided under each
 * one's lock. */
static void collect(int fd, struct ops_sock *s, void *arg)
{
	struct cands *c = arg;

	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct cand *v = realloc(c->v, cap * sizeof(*v));

		if (!v) {
			c->oom = true;
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct cand){ s, fd };
}

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->s != y->s)
		return (uintptr_t)x->s < (uintptr_t)y->s ? -1 : 1;
	return (x->fd > y->fd) - (x->fd < y->fd);
}

static void relay_atfork_prepare(void)
{
	struct cands c = { 0 };
	struct relay *made = NULL;
	bool started = false, ctl_ok = false;
	int saved = errno;

	ops_fd_for_each(collect, &c);
	if (c.oom)
		sdp_err(LOGSYS, "out of memory: some SDP connections are not relayed for the "
			"forked child");
	if (c.n)
		qsort(c.v, c.n, sizeof(*c.v), cand_cmp);
	for (size_t i = 0; i < c.n;) {
		size_t j = i;

		while (j < c.n && c.v[j].s == c.v[i].s)
			j++;
		/* A reference, through the table: the socket may have been
		 * closed since it was read. */
		struct ops_sock *s = ops_fd_get(c.v[i].fd);
		struct relay *r = NULL;

		if (s == c.v[i].s) {
			pthread_mutex_lock(&s->lock);
			bool want = relayable(s);

			if (want && !started) {
				/* The thread first: a relay made cannot be
				 * undone.  (relay_lock is never taken under an
				 * ops_sock lock.) */
				pthread_mutex_unlock(&s->lock);
				pthread_mutex_lock(&relay_lock);
				int e = relay_start_locked();

				if (!e) {
					int ce = ctl_up_locked();

					ctl_ok = ce == 0;
					if (ce)
						sdp_warn(LOGSYS, "no control socket (%s): SDP connections "
							 "are relayed for forked children, not moved",
							 strerror(-ce));
				}
				pthread_mutex_unlock(&relay_lock);
				if (e < 0) {
					sdp_err(LOGSYS, "no relay thread (%s): a forked child cannot "
						"use the SDP connections", strerror(-e));
					ops_sock_put(s);
					break;
				}
				started = true;
				pthread_mutex_lock(&s->lock);
				want = relayable(s);
			}
			/* Held, to move to the child that uses it, unless in an
			 * epoll set (relayed: its kernel registrations go
			 * with A) or without a control socket. */
			if (want)
				r = relay_make(s, c.v + i, j - i, ctl_ok && !s->epis);
			pthread_mutex_unlock(&s->lock);
		}
		if (r) {
			r->next = made;
			made = r;
		}
		if (s)
			ops_sock_put(s);
		i = j;
	}
	free(c.v);
	pthread_mutex_lock(&relay_lock);	/* until the parent or child handler */
	while (made) {
		struct relay *r = made;

		made = r->next;
		r->next = new_relays;
		new_relays = r;
	}
	errno = saved;
}

static void relay_atfork_parent(void)
{
	pthread_mutex_unlock(&relay_lock);
	relay_kick();
}

/* A held record's engine socket in a fork child is the parent's, stale:
 * forgotten now (its number then names nothing of this record), so that
 * an import at the claim, which may be given that number, is not closed
 * with it. */
static void forget_stale(int fd, struct ops_sock *s, void *arg)
{
	(void)fd;
	(void)arg;
	if (atomic_load(&s->held) && s->sd >= 0) {
		(void)sdp_close(s->sd);
		s->sd = -1;
	}
}

/* The child: the relays are the parent's; their B copies close (or the
 * children's A would not see the parent's relay end), and their
 * references go, which frees the sockets no fd names. */
static void relay_atfork_child(void)
{
	/* Released, not re-initialised: this thread took it in prepare
	 * (regcache.c says why). */
	pthread_mutex_unlock(&relay_lock);
	for (int pass = 0; pass < 2; pass++) {
		struct relay *r = pass ? new_relays : relays;

		while (r) {
			struct relay *next = r->next;

			sys.close(r->b);
			/* The connection's row is the parent's to show. */
			ops_stats_sock_free(r->s->row);
			r->s->row = NULL;
			ops_sock_put(r->s);
			free(r->dir[OPS_IO_RD].buf);
			free(r->dir[OPS_IO_WR].buf);
			free(r);
			r = next;
		}
	}
	relays = new_relays = NULL;
	ops_fd_for_each(forget_stale, NULL);
	/* The parent's: this process makes its own when it needs one. */
	if (ctl_fd >= 0)
		fdspace_close(ctl_fd);
	ctl_fd = -1;
	ctl_token = 0;
	free(relay_pfds);
	relay_pfds = NULL;
	relay_pcap = 0;
	if (relay_wake >= 0)
		fdspace_close(relay_wake);
	relay_wake = -1;
	relay_running = false;
	relay_exiting = relay_parked = false;
	/* A parent thread may have been waiting on it. */
	pthread_cond_init(&relay_cond, NULL);
}

static void relay_register(void)
{
	/* Registered at run time, after every constructor's: this prepare
	 * handler runs before the others (the switch's, the engine's), and
	 * this child handler after them, once the engine's locks are the
	 * child's (sdp_close() is called here). */
	if (pthread_atfork(relay_atfork_prepare, relay_atfork_parent, relay_atfork_child))
		sdp_err(LOGSYS, "pthread_atfork failed: a forked child cannot use SDP connections");
}

void ops_relay_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, relay_register);
}
