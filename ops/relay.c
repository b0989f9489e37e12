/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fork() with SDP connections open: the relay (doc/fork.md).
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
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

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
	if (atomic_load(&s->relayed)) {
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

/* The relay's end; relay_lock held, r unlinked. */
static void relay_end(struct relay *r)
{
	bool gates = r->dir[OPS_IO_RD].gate && r->dir[OPS_IO_WR].gate;
	bool abort = r->abort || r->err || r->dir[OPS_IO_RD].off < r->dir[OPS_IO_RD].len;

	if (gates) {
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
	else
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
	if (r->dir[dir].gate)
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
	pump_up(r);
	pump_down(r);
	pump_up(r);	/* what A wrote while we sent down */
	dir_idle(&r->dir[OPS_IO_RD]);
	dir_idle(&r->dir[OPS_IO_WR]);
	r->done = relay_finished(r);
}

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
		size_t n = 1;

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
	int wake = sys.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (wake < 0)
		return -errno;
	__atomic_store_n(&relay_wake, wake, __ATOMIC_RELEASE);
	/* The thread must never take the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&t, NULL, relay_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		__atomic_store_n(&relay_wake, -1, __ATOMIC_RELEASE);
		sys.close(wake);
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
 * s (locked, an established SDP connection) becomes relayed; fds are the
 * fds that named it when the table was read.  Returns the relay, or NULL
 * when s stays as it was (then it is "inherited" in the child, as
 * before relays existed).
 */
static struct relay *relay_make(struct ops_sock *s, const struct cand *fds, size_t nfds)
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
	 * file, which a child from an earlier fork may keep open. */
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
		ops_epoll_restack(s);	/* as it was */
		goto fail;
	}
	sys.close(sv[0]);
	r->s = s;
	ops_sock_get(s);
	r->sd = s->sd;
	r->b = sv[1];
	r->fd = ph;
	s->rinfo = ri;
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

/* --- fork handlers ------------------------------------------------------------------ */

struct cands {
	struct cand *v;
	size_t n, cap;
	bool oom;
};

static bool relayable(const struct ops_sock *s)
{
	return !s->relayed && !s->inherited && s->stack == OPS_STACK_SDP && s->sd >= 0 &&
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
	bool started = false;
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
			if (want)
				r = relay_make(s, c.v + i, j - i);
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
	free(relay_pfds);
	relay_pfds = NULL;
	relay_pcap = 0;
	if (relay_wake >= 0)
		sys.close(relay_wake);
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
