/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What a relayed socket answers (relay.c makes them; doc/fork.md).
 *
 * A relayed fd is a Unix socket as far as the kernel is concerned.  What
 * would tell it from the TCP connection it stands for is answered here,
 * as Linux TCP answers it: the socket's names (the SDP connection's,
 * kept when the relay was made), SO_DOMAIN, SO_PROTOCOL, SO_PEERCRED and
 * the options of TCP and IP (their values when the relay was made, then
 * what was set: remembered, not applied).
 *
 * The relay's end, B, is bound to an abstract Unix address that names
 * libsdp and carries the family and both addresses, so that a program
 * that inherits A across exec, with an empty fd table, can still tell
 * (ops_relay_adopt(), getpeername(A) being B's address).
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"

#define LOGSYS "fork"

/* --- the record ----------------------------------------------------------------------- */

/* The options of TCP and IP a relayed socket answers itself, as Linux
 * TCP does: their defaults for a connected socket, what setsockopt
 * accepts, and what it remembers. */
enum {
	RO_BOOL = 1,		/* stored as 0 or 1 */
	RO_V6 = 2,		/* AF_INET6 sockets only */
	RO_TOS = 4,		/* the ECN bits are the stack's, not the application's */
	RO_DEFAULT_NEG = 8,	/* -1 sets the default */
	RO_NOSET = 16,		/* setsockopt fails (EINVAL) once connected */
	RO_CHAR = 32,		/* setsockopt takes a char too (ip_setsockopt) */
	RO_MSS = 64,		/* 0 leaves it as it is; else TCP_MIN_MSS (88) at least */
};

struct ropt {
	int level, name;
	int def, min, max;	/* min > max: any value */
	unsigned flags;
};

static const struct ropt ropts[] = {
	{ IPPROTO_TCP, TCP_NODELAY, 0, 1, 0, RO_BOOL },
	{ IPPROTO_TCP, TCP_CORK, 0, 1, 0, RO_BOOL },
	{ IPPROTO_TCP, TCP_QUICKACK, 1, 1, 0, RO_BOOL },
	{ IPPROTO_TCP, TCP_MAXSEG, 536, 0, 32767, RO_MSS },
	{ IPPROTO_TCP, TCP_KEEPIDLE, 7200, 1, 32767, 0 },
	{ IPPROTO_TCP, TCP_KEEPINTVL, 75, 1, 32767, 0 },
	{ IPPROTO_TCP, TCP_KEEPCNT, 9, 1, 127, 0 },
	{ IPPROTO_TCP, TCP_SYNCNT, 6, 1, 127, 0 },
	{ IPPROTO_TCP, TCP_LINGER2, 60, 1, 0, 0 },
	{ IPPROTO_TCP, TCP_DEFER_ACCEPT, 0, 1, 0, 0 },
	{ IPPROTO_TCP, TCP_USER_TIMEOUT, 0, 0, INT_MAX, 0 },
	{ IPPROTO_TCP, TCP_NOTSENT_LOWAT, -1, 1, 0, 0 },
	{ IPPROTO_TCP, TCP_FASTOPEN, 0, 1, 0, 0 },
	{ IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS, 0, 1, 0, RO_BOOL },
	{ IPPROTO_IP, IP_TOS, 0, 1, 0, RO_TOS | RO_CHAR },
	{ IPPROTO_IP, IP_TTL, 64, 1, 255, RO_DEFAULT_NEG },
	{ IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_WANT, 0, 5, RO_CHAR },
	{ IPPROTO_IP, IP_RECVERR, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IP, IP_FREEBIND, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IP, IP_PKTINFO, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IP, IP_RECVTOS, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IP, IP_RECVTTL, 0, 1, 0, RO_BOOL | RO_CHAR },
	{ IPPROTO_IPV6, IPV6_TCLASS, 0, -1, 255, RO_V6 | RO_DEFAULT_NEG },
	{ IPPROTO_IPV6, IPV6_UNICAST_HOPS, 64, -1, 255, RO_V6 | RO_DEFAULT_NEG },
	{ IPPROTO_IPV6, IPV6_V6ONLY, 0, 1, 0, RO_V6 | RO_BOOL | RO_NOSET },
	{ IPPROTO_IPV6, IPV6_RECVERR, 0, 1, 0, RO_V6 | RO_BOOL },
	{ IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_WANT, 0, 5, RO_V6 },
};
#define NROPTS (sizeof(ropts) / sizeof(ropts[0]))

#define CC_NAME_MAX 16		/* TCP_CA_NAME_MAX */

struct ops_relayed {
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	int opt[NROPTS];		/* by ropts index */
	char cc[CC_NAME_MAX];		/* TCP_CONGESTION */
	int zerocopy;			/* SO_ZEROCOPY (a Unix socket refuses it) */
};

static const struct ropt *ropt_find(int domain, int level, int name, int *idx)
{
	for (size_t i = 0; i < NROPTS; i++) {
		if (ropts[i].level == level && ropts[i].name == name) {
			if ((ropts[i].flags & RO_V6) && domain != AF_INET6)
				return NULL;
			*idx = (int)i;
			return &ropts[i];
		}
	}
	return NULL;
}

static struct ops_relayed *rinfo_new(void)
{
	struct ops_relayed *ri = calloc(1, sizeof(*ri));

	if (!ri)
		return NULL;
	for (size_t i = 0; i < NROPTS; i++)
		ri->opt[i] = ropts[i].def;
	memcpy(ri->cc, "cubic", sizeof("cubic"));
	return ri;
}

struct ops_relayed *ops_relayed_new(struct ops_sock *s, int fd)
{
	struct ops_relayed *ri = rinfo_new();

	if (!ri)
		return NULL;
	ri->local_len = sizeof(ri->local);
	ri->peer_len = sizeof(ri->peer);
	if (sdp_getsockname(s->sd, (void *)&ri->local, &ri->local_len) < 0 ||
	    sdp_getpeername(s->sd, (void *)&ri->peer, &ri->peer_len) < 0) {
		free(ri);
		return NULL;
	}
	/* The options' values: from the engine where it keeps them, else
	 * from the placeholder fd (an unconnected TCP socket holding what
	 * was set, and Linux's defaults otherwise). */
	for (size_t i = 0; i < NROPTS; i++) {
		const struct ropt *o = &ropts[i];
		int v;
		socklen_t l = sizeof(v);

		if ((o->flags & RO_V6) && s->domain != AF_INET6)
			continue;
		if (sdp_getsockopt(s->sd, o->level, o->name, &v, &l) == 0 ||
		    (l = sizeof(v), sys.getsockopt(fd, o->level, o->name, &v, &l) == 0))
			ri->opt[i] = v;
	}
	char cc[CC_NAME_MAX];
	socklen_t l = sizeof(cc);

	if (sys.getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &l) == 0 && l > 0) {
		memset(ri->cc, 0, sizeof(ri->cc));
		memcpy(ri->cc, cc, l < sizeof(ri->cc) ? l : sizeof(ri->cc));
	}
	return ri;
}

/* --- the answers ---------------------------------------------------------------------- */

int ops_relayed_name(struct ops_sock *s, bool peer, struct sockaddr *addr, socklen_t *len)
{
	const struct ops_relayed *ri = s->rinfo;
	socklen_t have = peer ? ri->peer_len : ri->local_len;

	if (!addr || !len)
		return -EFAULT;
	memcpy(addr, peer ? &ri->peer : &ri->local, *len < have ? *len : have);
	*len = have;
	return 0;
}

static int put_int(void *val, socklen_t *len, int v)
{
	socklen_t n = *len < sizeof(v) ? *len : sizeof(v);

	memcpy(val, &v, n);
	*len = n;
	return 0;
}

int ops_relayed_getsockopt(int fd, struct ops_sock *s, int level, int name, void *val,
			   socklen_t *len)
{
	struct ops_relayed *ri = s->rinfo;
	const struct ropt *o;
	int idx;

	if (!len || (!val && *len))
		return -EFAULT;
	if ((int)*len < 0)
		return -EINVAL;
	if (level == SOL_SOCKET) {
		switch (name) {
		case SO_DOMAIN:
			return put_int(val, len, s->domain);
		case SO_PROTOCOL:
			return put_int(val, len, IPPROTO_TCP);
		case SO_ZEROCOPY:
			return put_int(val, len, __atomic_load_n(&ri->zerocopy, __ATOMIC_RELAXED));
		case SO_PEERCRED: {
			/* What TCP gives: no process, no ids. */
			struct ucred uc = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
			socklen_t n = *len < sizeof(uc) ? *len : sizeof(uc);

			memcpy(val, &uc, n);
			*len = n;
			return 0;
		}
		default:
			/* The rest are the socket's own, and A has them. */
			return SYS_RET(sys.getsockopt(fd, level, name, val, len));
		}
	}
	if (level == IPPROTO_TCP && name == TCP_INFO) {
		struct tcp_info ti;
		socklen_t n = *len < sizeof(ti) ? *len : sizeof(ti);

		memset(&ti, 0, sizeof(ti));
		ti.tcpi_state = TCP_ESTABLISHED;
		memcpy(val, &ti, n);
		*len = n;
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
		socklen_t n = *len < CC_NAME_MAX ? *len : CC_NAME_MAX;

		pthread_mutex_lock(&s->lock);
		memcpy(val, ri->cc, n);
		pthread_mutex_unlock(&s->lock);
		*len = n;
		return 0;
	}
	o = ropt_find(s->domain, level, name, &idx);
	if (!o)
		return -ENOPROTOOPT;
	pthread_mutex_lock(&s->lock);
	int v = ri->opt[idx];

	pthread_mutex_unlock(&s->lock);
	return put_int(val, len, v);
}

int ops_relayed_setsockopt(int fd, struct ops_sock *s, int level, int name, const void *val,
			   socklen_t len)
{
	struct ops_relayed *ri = s->rinfo;
	const struct ropt *o;
	int idx, v = 0;

	if (level == SOL_SOCKET) {
		int r = SYS_RET(sys.setsockopt(fd, level, name, val, len));

		if (r == 0 || (r != -EOPNOTSUPP && r != -ENOPROTOOPT))
			return r;
		/* Linux TCP takes every socket-level option: those a Unix
		 * socket refuses are remembered where they read back. */
		if (name == SO_ZEROCOPY) {
			if (!val)
				return -EFAULT;
			if (len < sizeof(int))
				return -EINVAL;
			memcpy(&v, val, sizeof(v));
			if (v != 0 && v != 1)
				return -EINVAL;
			__atomic_store_n(&ri->zerocopy, v, __ATOMIC_RELAXED);
		}
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
		char cc[CC_NAME_MAX] = { 0 };

		if (!val)
			return -EFAULT;
		if (len < 1)
			return -EINVAL;
		memcpy(cc, val, len < sizeof(cc) - 1 ? len : sizeof(cc) - 1);
		/* The algorithms a stock kernel always has. */
		if (strcmp(cc, "cubic") && strcmp(cc, "reno"))
			return -ENOENT;
		pthread_mutex_lock(&s->lock);
		memcpy(ri->cc, cc, sizeof(cc));
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	o = ropt_find(s->domain, level, name, &idx);
	if (!o)
		return -ENOPROTOOPT;
	if (!val)
		return -EFAULT;
	if (len >= sizeof(int)) {
		memcpy(&v, val, sizeof(v));
	} else if (len >= 1 && (o->flags & RO_CHAR)) {
		v = *(const unsigned char *)val;
	} else {
		return -EINVAL;
	}
	if (o->flags & RO_NOSET)
		return -EINVAL;
	if ((o->min <= o->max && (v < o->min || v > o->max)) ||
	    ((o->flags & RO_MSS) && v > 0 && v < 88))
		return -EINVAL;
	if ((o->flags & RO_DEFAULT_NEG) && v == -1)
		v = o->def;
	if (o->flags & RO_BOOL)
		v = v != 0;
	pthread_mutex_lock(&s->lock);
	if (o->flags & RO_TOS)
		v = (v & ~IPTOS_ECN_MASK) | (ri->opt[idx] & IPTOS_ECN_MASK);
	if (!((o->flags & RO_MSS) && v == 0))
		ri->opt[idx] = v;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* --- the relay's address ---------------------------------------------------------
 * Abstract (sun_path[0] == 0), binary, versioned:
 *   "\0" RELAY_PREFIX, version (1 byte), family (4 or 6),
 *   local address, peer address (each: port and address as in the
 *   sockaddr, network order; IPv6 also flowinfo and scope id),
 *   pid and serial (4 bytes each: only to make the name unique).
 */
#define RELAY_PREFIX "libsdp-relay"
#define RELAY_VERSION 1

static size_t addr_bytes(int domain)
{
	return domain == AF_INET6 ? 2 + 16 + 4 + 4 : 2 + 4;
}

static void put_addr(uint8_t *p, int domain, const struct sockaddr_storage *a)
{
	if (domain == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)a;

		memcpy(p, &in6->sin6_port, 2);
		memcpy(p + 2, &in6->sin6_addr, 16);
		memcpy(p + 18, &in6->sin6_flowinfo, 4);
		memcpy(p + 22, &in6->sin6_scope_id, 4);
	} else {
		const struct sockaddr_in *in = (const void *)a;

		memcpy(p, &in->sin_port, 2);
		memcpy(p + 2, &in->sin_addr, 4);
	}
}

static socklen_t get_addr(const uint8_t *p, int domain, struct sockaddr_storage *a)
{
	memset(a, 0, sizeof(*a));
	if (domain == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)a;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_port, p, 2);
		memcpy(&in6->sin6_addr, p + 2, 16);
		memcpy(&in6->sin6_flowinfo, p + 18, 4);
		memcpy(&in6->sin6_scope_id, p + 22, 4);
		return sizeof(*in6);
	}
	struct sockaddr_in *in = (void *)a;

	in->sin_family = AF_INET;
	memcpy(&in->sin_port, p, 2);
	memcpy(&in->sin_addr, p + 2, 4);
	return sizeof(*in);
}

#define NAME_HEAD (1 + sizeof(RELAY_PREFIX) - 1)

static uint32_t relay_serial;

socklen_t ops_relayed_addr(const struct ops_relayed *ri, int domain, struct sockaddr_un *un)
{
	const struct sockaddr_storage *l = &ri->local, *p = &ri->peer;
	uint32_t serial = __atomic_add_fetch(&relay_serial, 1, __ATOMIC_RELAXED);
	uint8_t *n = (uint8_t *)un->sun_path;
	size_t ab = addr_bytes(domain), off = NAME_HEAD;
	uint32_t pid = (uint32_t)getpid();

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	memcpy(n + 1, RELAY_PREFIX, sizeof(RELAY_PREFIX) - 1);
	n[off++] = RELAY_VERSION;
	n[off++] = domain == AF_INET6 ? 6 : 4;
	put_addr(n + off, domain, l);
	off += ab;
	put_addr(n + off, domain, p);
	off += ab;
	memcpy(n + off, &pid, 4);
	memcpy(n + off + 4, &serial, 4);
	off += 8;
	_Static_assert(NAME_HEAD + 2 + 2 * (2 + 16 + 4 + 4) + 8 <= sizeof(un->sun_path),
		       "a relay's name fits");
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + off);
}

/* Is un (len bytes, from getpeername) a relay's name?  Its family and
 * addresses, then. */
static bool relay_name_parse(const struct sockaddr_un *un, socklen_t len, int *domain,
			     struct sockaddr_storage *l, socklen_t *ll, struct sockaddr_storage *p,
			     socklen_t *pl)
{
	const uint8_t *n = (const uint8_t *)un->sun_path;
	size_t off = offsetof(struct sockaddr_un, sun_path);

	if (len <= off + NAME_HEAD + 2 || un->sun_family != AF_UNIX || n[0] ||
	    memcmp(n + 1, RELAY_PREFIX, sizeof(RELAY_PREFIX) - 1) || n[NAME_HEAD] != RELAY_VERSION)
		return false;
	int d = n[NAME_HEAD + 1] == 6 ? AF_INET6 : n[NAME_HEAD + 1] == 4 ? AF_INET : 0;

	if (!d || len != off + NAME_HEAD + 2 + 2 * addr_bytes(d) + 8)
		return false;
	*domain = d;
	*ll = get_addr(n + NAME_HEAD + 2, d, l);
	*pl = get_addr(n + NAME_HEAD + 2 + addr_bytes(d), d, p);
	return true;
}

/* --- after exec ------------------------------------------------------------------------ */

bool ops_relay_adopt(int fd)
{
	struct sockaddr_un un;
	socklen_t ul = sizeof(un);
	struct sockaddr_storage l, p;
	socklen_t ll, pl;
	int domain;

	if (sys.getpeername(fd, (void *)&un, &ul) < 0 ||
	    !relay_name_parse(&un, ul, &domain, &l, &ll, &p, &pl))
		return false;
	struct ops_sock *s = ops_sock_new(domain);
	struct ops_relayed *ri = rinfo_new();

	if (!s || !ri) {
		if (s)
			ops_sock_put(s);
		free(ri);
		return false;
	}
	ri->local = l;
	ri->local_len = ll;
	ri->peer = p;
	ri->peer_len = pl;
	s->rinfo = ri;
	s->stack = OPS_STACK_SDP;
	s->state = OPS_ST_ESTABLISHED;
	atomic_store(&s->relayed, true);
	int r = ops_fd_install(fd, s);

	ops_sock_put(s);
	if (r == 0)
		sdp_dbg(LOGSYS, "fd %d: an SDP connection relayed by an earlier process", fd);
	return r == 0;
}
