/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The Offload Protocol Switch: start-up, the policy, and the life of a
 * socket up to the moment it is settled on one stack (socket, bind,
 * listen, accept, connect with fallback).
 *
 * socket() makes a native kernel socket and, for a candidate, a record in
 * the fd table; the stack is chosen at listen() (server rules, against
 * the bound address) or connect() (client rules, against the peer).  An
 * SDP socket keeps its kernel socket as a placeholder for the fd number.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fdspace.h"
#include "log.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"
#include "tunables.h"

#define LOGSYS "switch"

struct conf_policy *ops_policy;
const char *ops_program = "";

/* --- start-up ---------------------------------------------------------------- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool policy_may_sdp;	/* any rule of this program could give SDP */

static void apply_log_settings(struct conf_policy *p)
{
	const char *path = NULL;
	char num[16];
	int level = conf_log_min_level(p);

	if (level > 0) {
		snprintf(num, sizeof(num), "%d", level);
		(void)tun_set("log_level", num);
	}
	switch (conf_log_destination(p, &path)) {
	case CONF_LOG_DEST_FILE:
		(void)tun_set("log_file", path);
		break;
	case CONF_LOG_DEST_SYSLOG:
		(void)tun_set("log_file", "syslog");
		break;
	default:
		break;
	}
}

static void init_once_fn(void)
{
	char err[512];
	/* Not in a set-user-ID program (tun_getenv): its parse errors
	 * would show another user's file. */
	const char *path = tun_getenv("LIBSDP_CONFIG_FILE");
	bool named = path && *path;
	int r;

	if (!named)
		path = SYSCONFDIR "/sdp.conf";
	if (program_invocation_short_name)
		ops_program = program_invocation_short_name;
	r = conf_load_file(path, &ops_policy, err, sizeof(err));
	apply_log_settings(ops_policy);
	(void)conf_apply_tunables(ops_policy);
	sdp_log_init();
	if (r < 0 && (named || r != -ENOENT))
		sdp_err(LOGSYS, "%s; every socket of %s stays on TCP", err, ops_program);
	policy_may_sdp = conf_may_use_sdp(ops_policy, CONF_ROLE_SERVER, ops_program) ||
			 conf_may_use_sdp(ops_policy, CONF_ROLE_CLIENT, ops_program);
	ops_stats_set_program(ops_program);
	sdp_dbg(LOGSYS, "policy %s loaded for %s: SDP %s", path, ops_program,
		policy_may_sdp ? "possible" : "never used");
}

void ops_init(void)
{
	pthread_once(&init_once, init_once_fn);
}

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static int engine_status;

static void engine_once_fn(void)
{
	int r = sdp_init();

	/* The application's fd is the socket's only descriptor above the
	 * transport's (issue 16): nothing of ours polls an sd. */
	if (r > 0) {
		int v = sdp_virtual_sds();

		if (v < 0)
			sdp_warn(LOGSYS, "every SDP socket keeps an eventfd: %s", strerror(-v));
	}
	engine_status = r < 0 ? r : r == 0 ? -ENODEV : 0;
	if (engine_status)
		sdp_conn_log(LOGSYS, "no SDP transport is available (transports \"%s\"): %s",
			     tun_str(TUN_transports), strerror(-engine_status));
	else
		ops_relay_init();	/* before the first SDP connection */
}

int ops_engine_up(void)
{
	pthread_once(&engine_once, engine_once_fn);
	return engine_status;
}

/* --- helpers ------------------------------------------------------------------- */

static const char *addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(buf, len, "%s:%u", host, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(buf, len, "[%s]:%u", host, port);
	} else {
		snprintf(buf, len, "(family %d)", sa->sa_family);
	}
	return buf;
}

void ops_set_stack(struct ops_sock *s, enum ops_stack st)
{
	s->stack = st;
	s->fallback = OPS_FB_NONE;
	ops_stats_sock_set_stack(s->row, st, OPS_FB_NONE);
}

void ops_set_state(struct ops_sock *s, enum ops_sock_state st)
{
	s->state = st;
	ops_stats_sock_set_state(s->row, st);
}

/* fd's connection is up: its signals (sigio.c); addresses and transport
 * into the statistics row. */
static void publish_conn(int fd, struct ops_sock *s)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);

	ops_sigio_attach(fd, s);
	/* Nothing here sleeps on the sd itself (poll and epoll wait on the
	 * transport and the watches' doorbells, doc/fastpath.md), so its
	 * readiness level would cost an eventfd write per arrival and a
	 * read per drain for nobody. */
	if (s->sd >= 0)
		(void)sdp_set_interest(s->sd, 0);
	if (!s->row)
		return;
	if (s->sd >= 0) {
		if (sdp_getsockname(s->sd, (void *)&l, &ll) < 0)
			ll = 0;
		if (sdp_getpeername(s->sd, (void *)&p, &pl) < 0)
			pl = 0;
		const char *t = sdp_transport_name(s->sd);

		/* A listener has no transport until a connection comes. */
		ops_stats_sock_set_transport(s->row, t, t ? "bcopy" : NULL);
	} else {
		if (sys.getsockname(fd, (void *)&l, &ll) < 0)
			ll = 0;
		if (sys.getpeername(fd, (void *)&p, &pl) < 0)
			pl = 0;
		ops_stats_sock_set_transport(s->row, NULL, NULL);
	}
	ops_stats_sock_set_addrs(s->row, ll ? (void *)&l : NULL, ll, pl ? (void *)&p : NULL, pl);
}

/* err says libsdp had no room for its own descriptors (common/fdspace.h). */
static bool no_fd_room(int err)
{
	return err == -EMFILE || err == -ENFILE;
}

static bool app_nonblock(int fd, struct ops_sock *s)
{
	if (s->stack == OPS_STACK_BOTH)
		return s->both_nonblock;
	int fl = sys.fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Options the application set before there was an SDP socket. */
static void replay_opts(struct ops_sock *s)
{
	for (int i = 0; i < s->nopts; i++) {
		struct ops_opt *o = &s->opts[i];

		(void)sdp_setsockopt(s->sd, o->level, o->name, o->val, o->len);
	}
}

/* An SDP socket of s's family, non-blocking (the switch waits itself). */
static int new_engine_socket(struct ops_sock *s)
{
	int sd = sdp_socket(s->domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (sd < 0)
		return sd;
	s->sd = sd;
	replay_opts(s);
	return 0;
}

static void drop_engine_socket(struct ops_sock *s)
{
	if (s->sd >= 0) {
		int sd = s->sd;

		s->sd = -1;
		(void)sdp_close(sd);
	}
}

/* --- the way to TCP ----------------------------------------------------------- */

/*
 * s, meant for SDP, moves to the kernel's TCP for good, for reason why:
 * the one place where that happens, so that every fallback is counted
 * (sdpstat's fallbacks and the socket's row) and logged alike.  Its
 * engine socket goes and its epoll memberships follow.  peer: where a
 * connect was going, or NULL for a listener (its own address is named);
 * err: our own error that made SDP fail (logged as a warning), or 0;
 * then: what happens instead, for the log line.  The caller finishes the
 * call on TCP.  A fork child's copy of a socket (inherited) only records
 * the move: the engine socket and the log are the parent's.  Caller
 * holds s->lock.
 */
void ops_fall_back(int fd, struct ops_sock *s, enum ops_fallback why, int err,
		   const struct sockaddr *peer, const char *then)
{
	struct sockaddr_storage l;
	socklen_t ll = sizeof(l);
	char buf[80];

	s->stack = OPS_STACK_TCP;
	s->fallback = why;
	ops_stats_sock_set_stack(s->row, OPS_STACK_TCP, why);
	ops_stats_fallback(why);
	if (s->inherited)
		return;
	drop_engine_socket(s);
	ops_epoll_restack(s);
	if (peer)
		addr_str(peer, buf, sizeof(buf));
	else if (sys.getsockname(fd, (void *)&l, &ll) == 0)
		addr_str((void *)&l, buf, sizeof(buf));
	else
		snprintf(buf, sizeof(buf), "?");
	if (err)
		sdp_warn(LOGSYS, "fd %d: no SDP %s %s (%s: %s): %s", fd, peer ? "to" : "on", buf,
			 ops_fallback_name(why), strerror(-err), then);
	else
		sdp_conn_log(LOGSYS, "fd %d: no SDP %s %s (%s): %s", fd, peer ? "to" : "on", buf,
			     ops_fallback_name(why), then);
}

/* --- socket ---------------------------------------------------------------------- */

static int sdp_family_of(int domain)
{
	long v4 = tun_int(TUN_af_inet_sdp), v6 = tun_int(TUN_af_inet6_sdp);

	if (v4 && domain == v4)
		return AF_INET;
	if (v6 && domain == v6)
		return AF_INET6;
	return 0;
}

int ops_socket(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	int sdp_family = sdp_family_of(domain);
	bool direct = sdp_family != 0;
	bool candidate = (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM &&
			 (protocol == 0 || protocol == IPPROTO_TCP);

	if (!direct && (!candidate || !policy_may_sdp))
		return SYS_RET(FDSPACE_APP(sys.socket(domain, type, protocol)));
	if (direct) {
		if (base != SOCK_STREAM)
			return -ESOCKTNOSUPPORT;
		if (protocol != 0 && protocol != IPPROTO_TCP)
			return -EPROTONOSUPPORT;
		if (ops_engine_up() < 0)
			return -EAFNOSUPPORT;	/* as without the SDP module */
		domain = sdp_family;
		protocol = 0;
	}

	int fd = FDSPACE_APP(sys.socket(domain, type, protocol));

	if (fd < 0)
		return -errno;
	struct ops_sock *s = ops_sock_new(domain);
	int r = -ENOMEM;

	if (!s)
		goto close_fd;
	s->direct = direct;
	s->row = ops_stats_sock_alloc(fd);
	ops_set_stack(s, OPS_STACK_UNDECIDED);
	ops_set_state(s, OPS_ST_NEW);
	if (direct) {
		r = new_engine_socket(s);
		if (r < 0)
			goto put_sock;
		ops_set_stack(s, OPS_STACK_SDP);
	}
	r = ops_fd_install(fd, s);
	if (r < 0)
		goto put_sock;
	ops_sock_put(s);	/* the table's reference remains */
	ops_stats_count(direct ? OPS_C_SOCKETS_DIRECT : OPS_C_SOCKETS, 1);
	return fd;

put_sock:
	ops_sock_put(s);
close_fd:
	sys.close(fd);
	return r;
}

/* --- bind ------------------------------------------------------------------------ */

static int addr_port(const struct sockaddr *a, socklen_t len)
{
	if (a && a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
		return ntohs(((const struct sockaddr_in *)a)->sin_port);
	if (a && a->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
		return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
	return -1;
}

/* Not the wildcard address. */
static bool addr_is_specific(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr != htonl(INADDR_ANY);
	if (a->sa_family == AF_INET6)
		return !IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return false;
}

/*
 * OFED's AF_INET_SDP (27) took IPv6 addresses too, and programs rely on it:
 * qperf's sdp_bw and sdp_lat make a 27 socket for whatever getaddrinfo()
 * gave, the IPv6 wildcard first.  So a direct IPv4 socket that is given an
 * IPv6 address before anything else becomes an IPv6 one (as if made with
 * 28): its kernel socket is made again as AF_INET6 at the same fd, with
 * its flags and options, and so is its engine socket.  Caller holds
 * s->lock.
 */
static int direct_take_family(int fd, struct ops_sock *s, const struct sockaddr *addr,
			      socklen_t len)
{
	if (!s->direct || s->domain != AF_INET || s->state != OPS_ST_NEW || !addr ||
	    len < sizeof(struct sockaddr_in6) || addr->sa_family != AF_INET6)
		return 0;
	int fl = sys.fcntl(fd, F_GETFL), fdfl = sys.fcntl(fd, F_GETFD);
	/* nfd has a low number for a moment: a window (common/fdspace.h). */
	fdspace_making();
	int nfd = sys.socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fl < 0 || fdfl < 0 || nfd < 0) {
		int e = errno;

		if (nfd >= 0)
			sys.close(nfd);
		fdspace_unmade();
		return -e;
	}
	for (int i = 0; i < s->nopts; i++)
		(void)sys.setsockopt(nfd, s->opts[i].level, s->opts[i].name, s->opts[i].val,
					s->opts[i].len);
	int r = sys.dup3(nfd, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0 ? -errno : 0;

	sys.close(nfd);
	fdspace_unmade();
	if (r < 0)
		return r;
	sys.fcntl(fd, F_SETFL, fl);
	drop_engine_socket(s);
	s->domain = AF_INET6;
	return new_engine_socket(s);
}

static int sdp_listen_same_port(int fd, struct ops_sock *s, struct sockaddr_storage *l,
				socklen_t *ll, int backlog);

int ops_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return SYS_RET(sys.bind(fd, addr, len));
	pthread_mutex_lock(&s->lock);
	r = direct_take_family(fd, s, addr, len);
	pthread_mutex_unlock(&s->lock);
	if (r < 0) {
		ops_sock_put(s);
		return r;
	}
	/* The kernel socket is bound in every case: it reserves the port
	 * (a "both" listener needs it, port 0 picks it) and gives Linux's
	 * errors for the address. */
	r = SYS_RET(sys.bind(fd, addr, len));
	pthread_mutex_lock(&s->lock);
	if (r == 0)
		s->any_port = addr_port(addr, len) == 0;
	if (r == 0 && s->sd >= 0 && s->state == OPS_ST_NEW) {
		struct sockaddr_storage l;
		socklen_t ll = sizeof(l);

		/* Port 0: the kernel's port may be free where the
		 * transport's is not; Linux's bind() never fails for that. */
		if (sys.getsockname(fd, (void *)&l, &ll) == 0)
			r = s->any_port ? sdp_listen_same_port(fd, s, &l, &ll, -1)
					: sdp_bind(s->sd, (void *)&l, ll);
	}
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}

/* --- listen ---------------------------------------------------------------------- */

/* listen() binds an unbound socket to a free port; do it now so that
 * the rules see the port and both stacks get the same one. */
static int bound_addr(int fd, struct ops_sock *s, struct sockaddr_storage *l, socklen_t *ll)
{
	*ll = sizeof(*l);
	if (sys.getsockname(fd, (void *)l, ll) < 0)
		return -errno;
	in_port_t port = l->ss_family == AF_INET6 ? ((struct sockaddr_in6 *)l)->sin6_port
						  : ((struct sockaddr_in *)l)->sin_port;

	if (port)
		return 0;
	struct sockaddr_storage any;

	memset(&any, 0, sizeof(any));
	any.ss_family = (sa_family_t)s->domain;
	if (sys.bind(fd, (void *)&any, s->domain == AF_INET6 ? sizeof(struct sockaddr_in6)
								 : sizeof(struct sockaddr_in)) < 0)
		return -errno;
	s->any_port = true;
	*ll = sizeof(*l);
	return sys.getsockname(fd, (void *)l, ll) < 0 ? -errno : 0;
}

static int sdp_listen_on(int fd, struct ops_sock *s, const struct sockaddr_storage *l,
			 socklen_t ll, int backlog)
{
	int r;

	if (s->sd < 0) {
		r = new_engine_socket(s);
		if (r < 0)
			return r;
	}
	if (s->domain == AF_INET6) {
		/* IPV6_V6ONLY as the kernel socket has it (set by the program
		 * or net.ipv6.bindv6only): a dual-stack listener, or one
		 * beside an IPv4 listener on the same port (asyncio's
		 * start_server(), redis's bind * -::*). */
		int v6only = 0;
		socklen_t vl = sizeof(v6only);

		if (sys.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl) == 0)
			(void)sdp_setsockopt(s->sd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, vl);
	}
	r = sdp_bind(s->sd, (const void *)l, ll);
	if (backlog < 0)
		return r;	/* bind() of a direct socket */
	if (r == 0 || r == -EINVAL)	/* -EINVAL: bound already (direct) */
		r = sdp_listen(s->sd, backlog);
	return r;
}

/*
 * The kernel chose port P for fd, but the SDP listener cannot have it
 * (on the software transport P + offset is another socket's, or
 * privileged).  Since the application asked for any port and has not
 * looked at the one it got (s->any_port), fd gets a fresh kernel socket
 * bound to another one, with the same flags and the options it was
 * given.  The ports tried stay bound until the end, so that the kernel
 * offers a new one each time.  A program that has seen its port keeps
 * it: the listener then serves TCP only, like any listener whose SDP
 * side cannot be had.  A direct socket's SDP side is bound at bind()
 * (its errors are bind's): there backlog is -1 and nothing listens yet.
 */
#define REBIND_TRIES 32

static int sdp_listen_same_port(int fd, struct ops_sock *s, struct sockaddr_storage *l,
				socklen_t *ll, int backlog)
{
	int held[REBIND_TRIES], nheld = 0;
	int r = sdp_listen_on(fd, s, l, *ll, backlog);

	/* -EACCES: P + offset is a privileged port. */
	while ((r == -EADDRINUSE || r == -EACCES) && s->any_port && nheld < REBIND_TRIES) {
		/* Held until the end: each in a window (common/fdspace.h). */
		fdspace_making();
		int nfd = sys.socket(s->domain, SOCK_STREAM | SOCK_CLOEXEC, 0);

		drop_engine_socket(s);
		if (nfd < 0) {
			fdspace_unmade();
			break;
		}
		held[nheld++] = nfd;
		for (int i = 0; i < s->nopts; i++)
			(void)sys.setsockopt(nfd, s->opts[i].level, s->opts[i].name,
						s->opts[i].val, s->opts[i].len);
		if (s->domain == AF_INET6) {
			int v6only = 0;
			socklen_t vl = sizeof(v6only);

			if (sys.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl) == 0)
				(void)sys.setsockopt(nfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, vl);
		}
		if (l->ss_family == AF_INET6)
			((struct sockaddr_in6 *)l)->sin6_port = 0;
		else
			((struct sockaddr_in *)l)->sin_port = 0;
		*ll = sizeof(*l);
		if (sys.bind(nfd, (void *)l, l->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
									  : sizeof(struct sockaddr_in)) < 0 ||
		    sys.getsockname(nfd, (void *)l, ll) < 0)
			break;
		r = sdp_listen_on(nfd, s, l, *ll, backlog);
		if (r == 0) {
			/* This one: it takes fd's number, flags and all. */
			int fl = sys.fcntl(fd, F_GETFL), fdfl = sys.fcntl(fd, F_GETFD);

			if (sys.dup3(nfd, fd, fdfl >= 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
				r = -errno;
				drop_engine_socket(s);
				break;
			}
			if (fl >= 0)
				sys.fcntl(fd, F_SETFL, fl);
		}
	}
	while (nheld) {
		sys.close(held[--nheld]);
		fdspace_unmade();
	}
	return r;
}

/*
 * getsockname() on a socket bound to port 0 that has not listened: once
 * the program knows the port, listen() can no longer move it when its
 * SDP side is taken (above), and the listener would serve TCP only.  So
 * the SDP side is tried now, and fd moved to another port if it is
 * taken.  On tcp-fallback and iWARP it is port P + offset in the host's
 * own port space (doc/port-scheme.md), which any other socket may hold:
 * python's socketserver looks at its port between bind() and listen().
 * The SDP socket is dropped again: a socket that goes on to connect
 * needs none, and listen() makes its own.
 */
void ops_settle_any_port(int fd, struct ops_sock *s)
{
	struct sockaddr_storage l;
	socklen_t ll = sizeof(l);

	if (s->state != OPS_ST_NEW || !s->any_port || s->sd >= 0 || s->inherited ||
	    s->stack != OPS_STACK_UNDECIDED || (s->domain != AF_INET && s->domain != AF_INET6))
		return;
	if (sys.getsockname(fd, (void *)&l, &ll) < 0)
		return;
	/* A listen here would be TCP only (listen_first()): nothing to try,
	 * and no engine to start for it. */
	if (conf_match(ops_policy, CONF_ROLE_SERVER, ops_program, (void *)&l, ll) == CONF_USE_TCP ||
	    ops_engine_up() < 0)
		return;
	(void)sdp_listen_same_port(fd, s, &l, &ll, -1);
	drop_engine_socket(s);
}

/* A listener on SDP only.  Caller holds s->lock. */
static int listen_sdp(int fd, struct ops_sock *s, struct sockaddr_storage *l, socklen_t *ll,
		      int backlog)
{
	char buf[80];
	int r = ops_engine_up();

	if (r < 0) {
		sdp_err(LOGSYS, "listen on %s: policy says SDP only, but no SDP transport is available",
			addr_str((void *)l, buf, sizeof(buf)));
		return -EOPNOTSUPP;
	}
	r = sdp_listen_same_port(fd, s, l, ll, backlog);
	if (r < 0) {
		drop_engine_socket(s);
		return r;
	}
	/* The engine listener follows the application's O_NONBLOCK. */
	(void)sdp_set_nonblock(s->sd, app_nonblock(fd, s));
	ops_set_stack(s, OPS_STACK_SDP);
	ops_stats_count(OPS_C_LISTEN_SDP, 1);
	sdp_conn_log(LOGSYS, "fd %d: listening on %s over SDP", fd,
		     addr_str((void *)l, buf, sizeof(buf)));
	return 0;
}

/* A listener on both stacks, or on TCP alone when the SDP side cannot
 * be had.  Caller holds s->lock. */
static int listen_both(int fd, struct ops_sock *s, struct sockaddr_storage *l, socklen_t *ll,
		       int backlog)
{
	enum ops_fallback why = OPS_FB_NONE;
	char buf[80];
	int e = ops_engine_up();

	/* The SDP side first: it may move both to another port.  Its
	 * failure is the switch's own (engine socket, bind, listen): no
	 * peer said anything. */
	if (e < 0) {
		why = OPS_FB_NO_TRANSPORT;
		e = 0;	/* logged once, when the engine did not start */
	} else if ((e = sdp_listen_same_port(fd, s, l, ll, backlog)) < 0) {
		why = no_fd_room(e) ? OPS_FB_RESOURCE : OPS_FB_TRANSPORT_ERROR;
		drop_engine_socket(s);
	}
	int r = SYS_RET(sys.listen(fd, backlog));

	if (r < 0) {
		drop_engine_socket(s);
		return r;
	}
	if (why != OPS_FB_NONE) {
		ops_fall_back(fd, s, why, e, NULL, "listening on TCP only");
		ops_stats_count(OPS_C_LISTEN_TCP, 1);
		return 0;
	}
	/* Both queues are tried without blocking; the application's
	 * O_NONBLOCK is emulated. */
	int fl = sys.fcntl(fd, F_GETFL);

	s->both_nonblock = fl >= 0 && (fl & O_NONBLOCK);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		sys.fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	ops_set_stack(s, OPS_STACK_BOTH);
	ops_stats_count(OPS_C_LISTEN_BOTH, 1);
	sdp_conn_log(LOGSYS, "fd %d: listening on %s over SDP and TCP", fd,
		     addr_str((void *)l, buf, sizeof(buf)));
	return 0;
}

/* The first listen(): the server rules choose the stack, against the
 * bound address.  Caller holds s->lock. */
static int listen_first(int fd, struct ops_sock *s, int backlog)
{
	struct sockaddr_storage l;
	socklen_t ll;
	int r = bound_addr(fd, s, &l, &ll);

	if (r < 0)
		return r;
	enum conf_use use = s->direct ? CONF_USE_SDP
				      : conf_match(ops_policy, CONF_ROLE_SERVER, ops_program,
						   (void *)&l, ll);

	if (use == CONF_USE_TCP) {
		r = SYS_RET(sys.listen(fd, backlog));
		if (r == 0) {
			ops_set_stack(s, OPS_STACK_TCP);
			ops_stats_count(OPS_C_LISTEN_TCP, 1);
		}
		return r;
	}
	if (use == CONF_USE_SDP)
		return listen_sdp(fd, s, &l, &ll, backlog);
	return listen_both(fd, s, &l, &ll, backlog);
}

int ops_listen(int fd, int backlog)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return SYS_RET(sys.listen(fd, backlog));
	pthread_mutex_lock(&s->lock);
	if (s->state == OPS_ST_LISTEN) {
		/* listen() again only changes the backlog. */
		r = 0;
		if (s->stack != OPS_STACK_SDP)
			r = SYS_RET(sys.listen(fd, backlog));
		if (r == 0 && s->sd >= 0)
			r = sdp_listen(s->sd, backlog);
	} else if (s->state != OPS_ST_NEW) {
		r = -EINVAL;	/* connected or connecting: as Linux */
	} else {
		r = listen_first(fd, s, backlog);
		if (r == 0) {
			ops_set_state(s, OPS_ST_LISTEN);
			ops_epoll_restack(s);
			publish_conn(fd, s);
		}
	}
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}

/* --- accept ---------------------------------------------------------------------- */

/* A record for a socket accepted on the kernel's TCP. */
static void track_native_accept(int nfd, int domain)
{
	struct ops_sock *n = ops_sock_new(domain);

	if (!n)
		return;		/* untracked: it is native anyway */
	n->row = ops_stats_sock_alloc(nfd);
	ops_set_stack(n, OPS_STACK_TCP);
	ops_set_state(n, OPS_ST_ESTABLISHED);
	publish_conn(nfd, n);
	(void)ops_fd_install(nfd, n);
	ops_sock_put(n);
	ops_stats_count(OPS_C_ACCEPT_TCP, 1);
	sdp_conn_log(LOGSYS, "fd %d: accepted a TCP connection", nfd);
}

/* Wrap an accepted SDP connection in a placeholder fd. */
static int wrap_sdp_accept(int nsd, int domain, int flags)
{
	int type = SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC));
	int nfd = FDSPACE_APP(sys.socket(domain, type, 0));
	int r;

	if (nfd < 0) {
		r = -errno;
		(void)sdp_close(nsd);
		return r;
	}
	struct ops_sock *n = ops_sock_new(domain);

	if (!n) {
		sys.close(nfd);
		(void)sdp_close(nsd);
		return -ENOMEM;
	}
	n->sd = nsd;
	n->row = ops_stats_sock_alloc(nfd);
	ops_set_stack(n, OPS_STACK_SDP);
	ops_set_state(n, OPS_ST_ESTABLISHED);
	publish_conn(nfd, n);
	r = ops_fd_install(nfd, n);
	ops_sock_put(n);	/* on failure this closes nsd */
	if (r < 0) {
		sys.close(nfd);
		return r;
	}
	ops_stats_count(OPS_C_ACCEPT_SDP, 1);
	sdp_conn_log(LOGSYS, "fd %d: accepted an SDP connection (%s)", nfd,
		     sdp_transport_name(nsd) ?: "?");
	return nfd;
}

static int accept_sdp(int sd, int domain, struct sockaddr *addr, socklen_t *len, int flags)
{
	int nsd = sdp_accept(sd, addr, len, (flags & SOCK_NONBLOCK) | SOCK_CLOEXEC);

	if (nsd < 0)
		return nsd;
	return wrap_sdp_accept(nsd, domain, flags);
}

static int accept_native(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int nfd = FDSPACE_APP(sys.accept4(fd, addr, len, flags));

	return nfd < 0 ? -errno : nfd;
}

static uint64_t rcvtimeo_deadline(int fd)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);

	if (sys.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) < 0)
		return 0;
	return ops_deadline_after(&tv);
}

/* A "both" listener: both queues, fairly, without blocking on either. */
static int accept_both(int fd, struct ops_sock *s, struct sockaddr *addr, socklen_t *len,
		       int flags)
{
	uint64_t deadline = 0;

	for (;;) {
		unsigned turn = __atomic_fetch_add(&s->accept_turn, 1, __ATOMIC_RELAXED);

		for (int i = 0; i < 2; i++) {
			int r = ((turn + (unsigned)i) & 1)
					? accept_sdp(s->sd, s->domain, addr, len, flags)
					: accept_native(fd, addr, len, flags);

			if (r >= 0 && !((turn + (unsigned)i) & 1))
				track_native_accept(r, s->domain);
			if (r != -EAGAIN)
				return r;
		}
		if (s->both_nonblock)
			return -EAGAIN;
		if (!deadline)
			deadline = rcvtimeo_deadline(fd);
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = s->sd, .events = POLLIN } };
		struct timespec ts;

		if (deadline && ops_now_ns() >= deadline)
			return -EAGAIN;
		int r = sdp_ppoll(p, 2, ops_timeout_until(deadline, &ts), NULL);

		if (r < 0)
			return r;
	}
}

int ops_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return SYS_RET(FDSPACE_APP(sys.accept4(fd, addr, len, flags)));
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
		r = -EINVAL;
	} else if (s->inherited) {
		r = accept_native(fd, addr, len, flags);
	} else if (s->stack == OPS_STACK_BOTH) {
		r = accept_both(fd, s, addr, len, flags);
	} else if (s->stack == OPS_STACK_SDP) {
		r = s->state == OPS_ST_LISTEN ? accept_sdp(s->sd, s->domain, addr, len, flags)
					      : -EINVAL;
	} else {
		r = accept_native(fd, addr, len, flags);
		if (r >= 0)
			track_native_accept(r, s->domain);
	}
	ops_sock_put(s);
	return r;
}

/* --- connect --------------------------------------------------------------------- */

/* Why the engine's connect on sd failed (include/sdp.h), in the words of
 * the switch's statistics. */
static enum ops_fallback engine_reason(int sd)
{
	switch (sdp_fallback_reason(sd)) {
	case SDP_FB_NO_ROUTE:
		return OPS_FB_NO_ROUTE;
	case SDP_FB_REFUSED:
		return OPS_FB_REFUSED;
	case SDP_FB_REJECTED:
		return OPS_FB_REJECTED;
	case SDP_FB_TIMEOUT:
		return OPS_FB_TIMEOUT;
	case SDP_FB_RESOURCE:
		return OPS_FB_RESOURCE;
	default:
		/* SDP_FB_TRANSPORT, or no reason: the engine refused the
		 * attempt's arguments, or its connection was lost once made. */
		return OPS_FB_TRANSPORT_ERROR;
	}
}

/*
 * The kernel's connect, for a socket settled on TCP by this connect (the
 * policy, or a fallback).  Caller holds s->lock, which is dropped around
 * the call: a blocking connect can take minutes.  Returns its result (0
 * or -errno; -EINPROGRESS on a non-blocking socket).
 */
static int native_connect(int fd, struct ops_sock *s, const struct sockaddr *addr,
			  socklen_t len)
{
	pthread_mutex_unlock(&s->lock);
	int r = SYS_RET(sys.connect(fd, addr, len));

	pthread_mutex_lock(&s->lock);
	if (r == 0 || r == -EINPROGRESS) {
		ops_set_state(s, r ? OPS_ST_CONNECTING : OPS_ST_ESTABLISHED);
		ops_stats_count(OPS_C_CONNECT_TCP, 1);
		if (!r)
			publish_conn(fd, s);
	}
	return r;
}

/* SDP is given up: the connect goes to the kernel.  Caller holds s->lock
 * (dropped around the native connect; s is settled on TCP by then).
 * Returns the native connect's result. */
static int fall_back(int fd, struct ops_sock *s, enum ops_fallback why)
{
	s->conn = OPS_CONN_DONE;
	if (why == OPS_FB_REFUSED || why == OPS_FB_TIMEOUT)
		ops_peercache_note((void *)&s->conn_addr, s->conn_addrlen, why);
	ops_fall_back(fd, s, why, 0, (void *)&s->conn_addr, "connecting over TCP");
	int r = native_connect(fd, s, (void *)&s->conn_addr, s->conn_addrlen);

	if (r < 0 && r != -EINPROGRESS)
		ops_set_state(s, OPS_ST_CLOSED);
	return r;
}

/* The SDP connect finished; caller holds s->lock. */
static void sdp_connected(int fd, struct ops_sock *s)
{
	char buf[80];

	s->conn = OPS_CONN_DONE;
	ops_set_state(s, OPS_ST_ESTABLISHED);
	(void)sdp_set_nonblock(s->sd, app_nonblock(fd, s));
	ops_stats_count(OPS_C_CONNECT_SDP, 1);
	ops_peercache_forget((void *)&s->conn_addr, s->conn_addrlen);
	publish_conn(fd, s);
	sdp_conn_log(LOGSYS, "fd %d: connected to %s over SDP (%s)", fd,
		     addr_str((void *)&s->conn_addr, buf, sizeof(buf)),
		     sdp_transport_name(s->sd) ?: "?");
}

/* fd's TCP connection was converted to the SDP connection sd (ops/convert.c):
 * s now names sd.  Caller holds s->lock. */
void ops_switch_to_sdp(int fd, struct ops_sock *s, int sd)
{
	s->sd = sd;
	s->conn = OPS_CONN_DONE;
	ops_set_stack(s, OPS_STACK_SDP);
	ops_set_state(s, OPS_ST_ESTABLISHED);
	(void)sdp_set_nonblock(sd, app_nonblock(fd, s));
	ops_epoll_restack(s);
	publish_conn(fd, s);
}

/*
 * One step of a connect in flight, without waiting.  Caller holds
 * s->lock.  Returns 0 when it is settled (on SDP, failed, or handed to
 * the kernel: *native_r then holds the native connect's result),
 * -EINPROGRESS while SDP is still trying.
 */
static int advance_locked(int fd, struct ops_sock *s, int *native_r)
{
	*native_r = 1;
	if (s->conn != OPS_CONN_SDP && s->conn != OPS_CONN_SDP_ONLY)
		return 0;
	int ev = sdp_events(s->sd);

	if (ev < 0)
		ev = POLLERR;
	if (ev & (POLLOUT | POLLERR | POLLHUP)) {
		int err = 0;
		socklen_t l = sizeof(err);

		if (sdp_getsockopt(s->sd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
			err = EIO;
		if (!err && !(ev & POLLOUT))
			err = ECONNRESET;
		if (!err) {
			sdp_connected(fd, s);
		} else if (s->conn == OPS_CONN_SDP) {
			*native_r = fall_back(fd, s, engine_reason(s->sd));
		} else {
			s->conn = OPS_CONN_DONE;
			s->conn_error = err;
			ops_set_state(s, OPS_ST_CLOSED);
			ops_stats_count(OPS_C_CONN_ERRORS, 1);
		}
		return 0;
	}
	if (s->conn == OPS_CONN_SDP && ops_now_ns() >= s->conn_deadline_ns) {
		*native_r = fall_back(fd, s, OPS_FB_TIMEOUT);
		return 0;
	}
	return -EINPROGRESS;
}

void ops_connect_advance(int fd, struct ops_sock *s)
{
	int nr;

	pthread_mutex_lock(&s->lock);
	(void)advance_locked(fd, s, &nr);
	if (nr < 0 && nr != -EINPROGRESS)
		s->conn_error = -nr;	/* the kernel refused at once: SO_ERROR says so */
	pthread_mutex_unlock(&s->lock);
}

uint64_t ops_connect_deadline(struct ops_sock *s)
{
	return s->conn == OPS_CONN_SDP ? s->conn_deadline_ns : 0;
}

static uint64_t sndtimeo_deadline(int fd, struct ops_sock *s)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);

	if (s->sd >= 0 && sdp_getsockopt(s->sd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0) {
		/* set on the engine socket by replay_opts */
	} else if (sys.getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) < 0) {
		return 0;
	}
	return ops_deadline_after(&tv);
}

/* A blocking connect: wait for the SDP attempt to settle.  Called and
 * returns with s->lock held; drops it while waiting. */
static int wait_connect(int fd, struct ops_sock *s)
{
	uint64_t timeo = sndtimeo_deadline(fd, s);

	for (;;) {
		int nr, r = advance_locked(fd, s, &nr);

		if (r == 0) {
			if (nr != 1)
				return nr;	/* fell back: the kernel's answer */
			if (s->conn_error) {
				int e = s->conn_error;

				s->conn_error = 0;
				return -e;
			}
			/* This connect() reports the success: the engine
			 * socket (non-blocking, see new_engine_socket) keeps
			 * it for a second connect(), which for a blocking
			 * one must say EISCONN. */
			if (s->stack == OPS_STACK_SDP)
				(void)sdp_connect(s->sd, (void *)&s->conn_addr, s->conn_addrlen);
			return 0;
		}
		uint64_t deadline = ops_connect_deadline(s);

		if (timeo && (!deadline || timeo < deadline))
			deadline = timeo;
		struct pollfd p = { .fd = s->sd, .events = POLLOUT };
		struct timespec ts;

		if (deadline && deadline == timeo && ops_now_ns() >= deadline)
			return -EINPROGRESS;	/* SO_SNDTIMEO, as Linux */
		struct timespec *tsp = ops_timeout_until(deadline, &ts);

		pthread_mutex_unlock(&s->lock);
		r = sdp_ppoll(&p, 1, tsp, NULL);
		pthread_mutex_lock(&s->lock);
		if (r == -EINTR)
			return -EINTR;	/* the connect goes on, as in Linux */
	}
}

/*
 * A program that bound its socket before connect() (a source address, a
 * port, or port 0 on an address) gets that source on SDP too: the kernel
 * socket holds the address, the engine connects from its IP and the Hello
 * carries its port, so that getsockname() here and the peer's accept()
 * name it as on TCP.
 */
static int name_source(int fd, struct ops_sock *s)
{
	struct sockaddr_storage l;
	socklen_t ll = sizeof(l);

	if (sys.getsockname(fd, (void *)&l, &ll) < 0)
		return -errno;
	if (!addr_port((void *)&l, ll) && !addr_is_specific((void *)&l))
		return 0;	/* not bound */
	return sdp_bind_source(s->sd, (void *)&l, ll);
}

static bool ip_family(const struct sockaddr *addr, socklen_t len)
{
	return addr && len >= sizeof(sa_family_t) &&
	       (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
}

/*
 * connect() on a socket that had one already (in flight or settled), or
 * that listens: the stack it is on answers.  Caller holds s->lock.
 * CONNECT_FIRST: none yet, the policy decides (connect_first).
 */
#define CONNECT_FIRST 1

static int connect_again(int fd, struct ops_sock *s, const struct sockaddr *addr,
			 socklen_t len)
{
	int r;

	if (s->inherited || s->relayed)
		return s->relayed ? -EISCONN : -ENOTCONN;
	if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY) {
		int nr;

		if (advance_locked(fd, s, &nr) == -EINPROGRESS)
			return -EALREADY;
		/* Settled: the stack it settled on answers, below. */
	}
	if (s->stack == OPS_STACK_TCP || s->stack == OPS_STACK_BOTH) {
		pthread_mutex_unlock(&s->lock);
		r = SYS_RET(sys.connect(fd, addr, len));
		pthread_mutex_lock(&s->lock);
		if ((r == 0 || r == -EISCONN) && s->state == OPS_ST_CONNECTING) {
			ops_set_state(s, OPS_ST_ESTABLISHED);
			publish_conn(fd, s);
		}
		return r;
	}
	if (s->stack == OPS_STACK_SDP && s->state != OPS_ST_NEW) {
		if (s->conn_error) {
			r = -s->conn_error;
			s->conn_error = 0;
			return r;
		}
		return sdp_connect(s->sd, addr, len);
	}
	if (s->state == OPS_ST_LISTEN)
		return -EISCONN;	/* what Linux says for connect on a listener */
	return CONNECT_FIRST;
}

/* An SDP-only connect failed at once (no fallback).  Caller holds s->lock. */
static int sdp_connect_failed(int fd, struct ops_sock *s, int r)
{
	ops_set_state(s, OPS_ST_CLOSED);
	ops_stats_count(OPS_C_CONN_ERRORS, 1);
	/* Linux reports a refused or reset non-blocking connect later,
	 * through SO_ERROR, even on loopback. */
	if ((r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ECONNRESET) && app_nonblock(fd, s)) {
		s->conn_error = -r;
		r = -EINPROGRESS;
	}
	return r;
}

/*
 * The SDP connect to s->conn_addr, with a fallback to TCP when both
 * says so.  Caller holds s->lock; a blocking socket waits here for the
 * outcome (wait_connect), a non-blocking one gets -EINPROGRESS and the
 * waits of poll, epoll and the data calls settle it (ops_connect_advance).
 */
static int connect_sdp(int fd, struct ops_sock *s, bool both)
{
	int r = ops_engine_up();

	if (r == 0 && s->sd < 0) {
		r = new_engine_socket(s);
		if (r == 0)
			r = name_source(fd, s);
	}
	if (r < 0) {
		if (both)
			return fall_back(fd, s, no_fd_room(r) ? OPS_FB_RESOURCE : OPS_FB_NO_TRANSPORT);
		sdp_err(LOGSYS, "fd %d: policy says SDP only, but SDP is not available: %s", fd,
			strerror(-r));
		return -ENETUNREACH;
	}
	ops_set_stack(s, OPS_STACK_SDP);
	ops_set_state(s, OPS_ST_CONNECTING);
	/* The engine socket is non-blocking: an attempt that starts says
	 * EINPROGRESS, even if the transport finished it at once. */
	r = sdp_connect(s->sd, (void *)&s->conn_addr, s->conn_addrlen);
	if (r != -EINPROGRESS)
		return both ? fall_back(fd, s, engine_reason(s->sd)) : sdp_connect_failed(fd, s, r);
	s->conn = both ? OPS_CONN_SDP : OPS_CONN_SDP_ONLY;
	s->conn_deadline_ns = ops_now_ns() + (uint64_t)tun_int(TUN_fallback_timeout_ms) * 1000000ull;
	ops_epoll_restack(s);
	if (app_nonblock(fd, s))
		return -EINPROGRESS;
	return wait_connect(fd, s);
}

/* The first connect(): the client rules choose the stack.  Caller holds
 * s->lock. */
static int connect_first(int fd, struct ops_sock *s, const struct sockaddr *addr,
			 socklen_t len)
{
	enum conf_use use = CONF_USE_TCP;

	if (s->direct)
		use = CONF_USE_SDP;
	else if (ip_family(addr, len))
		use = conf_match(ops_policy, CONF_ROLE_CLIENT, ops_program, addr, len);
	if (use == CONF_USE_TCP) {
		ops_set_stack(s, OPS_STACK_TCP);
		return native_connect(fd, s, addr, len);
	}
	if (!ip_family(addr, len) || len > sizeof(s->conn_addr))
		return sdp_connect(s->sd, addr, len);	/* the engine's EINVAL/EAFNOSUPPORT */
	memcpy(&s->conn_addr, addr, len);
	s->conn_addrlen = len;
	bool both = use == CONF_USE_BOTH;
	enum ops_fallback said;
	uint64_t age_ms;

	if (both && ops_peercache_check(addr, len, &said, &age_ms)) {
		/* It said no a moment ago: not again for every connection. */
		sdp_dbg(LOGSYS, "fd %d: the SDP side of the destination %s %llu ms ago", fd,
			said == OPS_FB_TIMEOUT ? "timed out" : "refused", (unsigned long long)age_ms);
		return fall_back(fd, s, OPS_FB_REMEMBERED);
	}
	return connect_sdp(fd, s, both);
}

int ops_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return SYS_RET(sys.connect(fd, addr, len));
	pthread_mutex_lock(&s->lock);
	r = direct_take_family(fd, s, addr, len);
	if (r == 0)
		r = connect_again(fd, s, addr, len);
	if (r == CONNECT_FIRST)
		r = connect_first(fd, s, addr, len);
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}
