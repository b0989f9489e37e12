// SPDX-License-Identifier: BSD-2-Clause
/*
 * Converting a connected TCP socket into an SDP connection between the
 * same two hosts: sdp_convert_connect() on one end, sdp_convert_accept()
 * on the other (doc/conversion.md is the user's description).
 *
 * Linux cannot hand an established kernel TCP connection to an RDMA
 * device, so the SDP connection is a new one; the TCP socket carries the
 * agreement and is then closed.  The handshake (frames in convert.h):
 *
 *   accept side                          connect side
 *   [final streaming-mode bytes] ---->   (the consumer reads them)
 *                                <----   REQ nonce
 *   one-shot SDP listener, port Q
 *   RSP ok, Q, nonce             ---->
 *                                <====   SDP connect to (TCP peer IP, Q),
 *                                        first bytes: the nonce
 *   accept, check the nonce
 *                                <----   FIN ok (or FIN failed, if the
 *                                        connect failed)
 *   FIN ok                       ---->
 *
 * Each side sends exactly one opening frame (REQ or RSP) and one FIN, and
 * returns only after reading the other's two: whatever happens, neither
 * leaves a frame of ours in the other's stream, and both reach the same
 * verdict.  Success needs both FINs ok.  A refusal (RSP failed) is still
 * followed by the two FINs.  When the connect side's time runs out before
 * the RSP, it sends its FIN (failed) at once and reads the RSP and FIN the
 * accept side then sends; it waits for them for a grace period, past
 * which it returns with the stream in an unknown state (-ETIMEDOUT and
 * a log line: only a peer that has stopped answering gets there).
 *
 * On failure the TCP socket is the caller's again, as it was: no byte of
 * the consumer's stream was consumed (frames are peeked at before they
 * are read, and anything that is not one is left for the consumer).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "convert.h"
#include "log.h"
#include "sdp.h"
#include "sys.h"

#define LOGSYS "convert"

/* How long the connect side waits for the answer to its FIN, after its
 * own time ran out, at most. */
#define CONV_GRACE_MS 10000

/* --- addresses and options -------------------------------------------------------- */

/* An IPv4-mapped IPv6 address as the IPv4 one it is. */
static void unmap_v4(struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return;
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = s6->sin6_port };

	memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &s4, sizeof(s4));
	*len = sizeof(s4);
}

static int sock_addr(int fd, bool peer, struct sockaddr_storage *ss, socklen_t *len)
{
	*len = sizeof(*ss);
	memset(ss, 0, sizeof(*ss));
	if (peer ? sys.getpeername(fd, (struct sockaddr *)ss, len)
		 : sys.getsockname(fd, (struct sockaddr *)ss, len))
		return -errno;
	unmap_v4(ss, len);
	return 0;
}

/* fd is a connected TCP socket: its peer's address, IPv4 as IPv4. */
static int tcp_peer(int fd, struct sockaddr_storage *peer, socklen_t *len)
{
	int r = conv_check_socket(fd);

	return r ? r : sock_addr(fd, true, peer, len);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* The TCP socket's options that mean the same on SDP, onto sd. */
static void keep_options(int fd, int sd)
{
	static const struct {
		int level, name;
		socklen_t len;
	} opts[] = {
		{ SOL_SOCKET, SO_KEEPALIVE, sizeof(int) },
		{ IPPROTO_TCP, TCP_NODELAY, sizeof(int) },
		{ SOL_SOCKET, SO_OOBINLINE, sizeof(int) },
		{ SOL_SOCKET, SO_LINGER, sizeof(struct linger) },
		{ SOL_SOCKET, SO_RCVTIMEO, sizeof(struct timeval) },
		{ SOL_SOCKET, SO_SNDTIMEO, sizeof(struct timeval) },
	};

	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		union {
			int i;
			struct linger l;
			struct timeval tv;
		} v;
		socklen_t len = opts[i].len;

		if (sys.getsockopt(fd, opts[i].level, opts[i].name, &v, &len) == 0) {
			int r = sdp_setsockopt(sd, opts[i].level, opts[i].name, &v, len);

			if (r)
				sdp_warn(LOGSYS, "option %d/%d not kept: %s", opts[i].level,
					 opts[i].name, strerror(-r));
		}
	}
	int fl = sys.fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_NONBLOCK))
		(void)sdp_set_nonblock(sd, 1);
}

/* Receive exactly len bytes on the new SDP socket, before the deadline. */
static int sdp_read_exact(int sd, void *buf, size_t len, uint64_t deadline_ns)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd pf = { .fd = sd, .events = POLLIN };
		int ms = -1;

		if (deadline_ns) {
			uint64_t now = conv_now_ns();

			if (now >= deadline_ns)
				return -ETIMEDOUT;
			ms = (int)((deadline_ns - now + 999999) / 1000000);
		}
		int r = sdp_poll(&pf, 1, ms);

		if (r == -EINTR || r == 0)
			continue;
		if (r < 0)
			return r;
		ssize_t n = sdp_recv(sd, (uint8_t *)buf + got, len - got, MSG_DONTWAIT);

		if (n == -EAGAIN || n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

static const char *reason_text(uint8_t reason)
{
	switch (reason) {
	case CONV_R_NONE:
		return "no reason given";
	case CONV_R_NO_TRANSPORT:
		return "no SDP listener possible there";
	case CONV_R_VERSION:
		return "version not supported";
	case CONV_R_REFUSED:
		return "refused";
	case CONV_R_TIMEOUT:
		return "timed out";
	case CONV_R_CONNECT:
		return "the SDP connection failed";
	case CONV_R_SHUTDOWN:
		return "given up";
	default:
		return "unknown reason";
	}
}

/* Map a peer's reason to what our caller sees. */
static int reason_errno(uint8_t reason)
{
	switch (reason) {
	case CONV_R_TIMEOUT:
		return -ETIMEDOUT;
	case CONV_R_VERSION:
		return -EPROTONOSUPPORT;
	default:
		return -ECONNREFUSED;
	}
}

/*
 * The end of either side.  Failed (ret): the SDP connection, if any, goes
 * and fd stays as it is.  Converted: sd takes fd's options, the TCP
 * connection ends in order (both FINs were read, nothing of ours is left
 * unread) and fd is released.  Returns sd or ret.
 */
static int conclude(int fd, int sd, int ret)
{
	if (ret) {
		if (sd >= 0)
			sdp_close(sd);
		return ret;
	}
	keep_options(fd, sd);
	(void)sys.shutdown(fd, SHUT_RDWR);
	sys.close(fd);
	sdp_conn_log(LOGSYS, "fd %d converted: sd %d, over %s", fd, sd, sdp_transport_name(sd));
	return sd;
}

/* --- the connect side ------------------------------------------------------------- */

/* Read the RSP and FIN an accept side sends after our early FIN. */
static void drain_after_abort(int fd)
{
	uint64_t grace = conv_deadline_in(CONV_GRACE_MS);
	struct conv_frame f;
	int r = conv_recv(fd, &f, grace);

	if (!r)
		r = conv_recv(fd, &f, grace);
	if (r)
		sdp_warn(LOGSYS, "fd %d: the peer did not finish the abandoned conversion (%s): "
			 "the stream may still hold its frames", fd, strerror(-r));
}

int sdp_convert_connect(int fd, int timeout_ms)
{
	struct conv_frame req = { .type = CONV_REQ }, rsp, fin = { .type = CONV_FIN };
	struct sockaddr_storage peer;
	socklen_t plen;
	int r, sd = -1;

	if (timeout_ms == 0)
		return -EINVAL;
	r = tcp_peer(fd, &peer, &plen);
	if (r)
		return r;
	if (getrandom(req.nonce, sizeof(req.nonce), 0) != (ssize_t)sizeof(req.nonce))
		return -EAGAIN;

	uint64_t deadline = conv_deadline_in(timeout_ms);

	r = conv_send(fd, &req, deadline);
	if (r)
		return r;	/* nothing of it went, or the socket broke */
	r = conv_recv(fd, &rsp, deadline);
	if (r == -EPROTO) {
		/* The peer answered with stream data: it does not convert.
		 * Our REQ is in its stream; its bytes stay in ours. */
		sdp_conn_log(LOGSYS, "fd %d: the peer answered with stream data, not a conversion",
			     fd);
		return -EPROTO;
	}
	if (r == -ETIMEDOUT) {
		fin.status = CONV_FAILED;
		fin.reason = CONV_R_TIMEOUT;
		if (conv_send(fd, &fin, conv_deadline_in(CONV_GRACE_MS)) == 0)
			drain_after_abort(fd);
		return -ETIMEDOUT;
	}
	if (r)
		return r;
	if (rsp.type != CONV_RSP || memcmp(rsp.nonce, req.nonce, CONV_NONCE_LEN)) {
		sdp_warn(LOGSYS, "fd %d: a conversion answer that is not the answer to ours", fd);
		return -EPROTO;
	}
	int ret = 0;

	if (rsp.status != CONV_OK) {
		sdp_conn_log(LOGSYS, "fd %d: the peer refused the conversion: %s", fd,
			     reason_text(rsp.reason));
		ret = reason_errno(rsp.reason);
		fin.status = CONV_FAILED;
		fin.reason = CONV_R_NONE;
	} else {
		/* Between the TCP connection's own two addresses. */
		struct sockaddr_storage me;
		socklen_t mlen;

		set_port(&peer, rsp.port);
		ret = sock_addr(fd, false, &me, &mlen);
		if (!ret) {
			set_port(&me, 0);
			sd = sdp_socket(peer.ss_family, SOCK_STREAM, 0);
			ret = sd < 0 ? sd : sdp_bind(sd, (struct sockaddr *)&me, mlen);
		}
		if (!ret)
			ret = sdp_connect(sd, (struct sockaddr *)&peer, plen);
		if (!ret) {
			/* The nonce proves to the listener that this is the
			 * connection it was told of. */
			ssize_t n = sdp_send(sd, req.nonce, CONV_NONCE_LEN, MSG_NOSIGNAL);

			ret = n == CONV_NONCE_LEN ? 0 : n < 0 ? (int)n : -EIO;
		}
		if (ret) {
			sdp_conn_log(LOGSYS, "fd %d: SDP connection for the conversion: %s", fd,
				     strerror(-ret));
			fin.status = CONV_FAILED;
			fin.reason = CONV_R_CONNECT;
		}
	}
	/* Our FIN, then theirs: the verdict is shared. */
	uint64_t fin_deadline = deadline ? conv_deadline_in(CONV_GRACE_MS) : 0;
	struct conv_frame theirs;

	r = conv_send(fd, &fin, fin_deadline);
	if (!r)
		r = conv_recv(fd, &theirs, fin_deadline);
	if (!r && theirs.type != CONV_FIN)
		r = -EPROTO;
	if (!ret && r)
		ret = r;
	if (!ret && theirs.status != CONV_OK)
		ret = reason_errno(theirs.reason);
	return conclude(fd, sd, ret);
}

/* --- the accept side -------------------------------------------------------------- */

/* A one-shot SDP listener on the TCP socket's own address, any port. */
static int open_listener(int fd, uint16_t *port)
{
	struct sockaddr_storage me;
	socklen_t len;
	int r = sock_addr(fd, false, &me, &len);

	if (r)
		return r;
	set_port(&me, 0);
	int ls = sdp_socket(me.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (ls < 0)
		return ls;
	r = sdp_bind(ls, (struct sockaddr *)&me, len);
	if (!r)
		r = sdp_listen(ls, 1);
	if (!r) {
		len = sizeof(me);
		r = sdp_getsockname(ls, (struct sockaddr *)&me, &len);
	}
	if (r) {
		sdp_close(ls);
		return r;
	}
	*port = ntohs(me.ss_family == AF_INET ? ((struct sockaddr_in *)&me)->sin_port
					      : ((struct sockaddr_in6 *)&me)->sin6_port);
	return ls;
}

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

/*
 * After our RSP ok: wait for the connection that carries the nonce, or
 * for the connect side's FIN.  A FIN ok may overtake the connection it
 * speaks of (they travel on different connections): it is kept in *fin
 * (*fin_read set) and the wait goes on for the connection.  Returns the
 * connection's sd, or PEER_GAVE_UP when a FIN failed came (in *fin), or
 * another negative errno.
 */
#define PEER_GAVE_UP (-ECANCELED)	/* sdp_accept() never gives it */

static int await_connection(int fd, int ls, const uint8_t *nonce,
			    const struct sockaddr_storage *tcp_peer, uint64_t deadline,
			    struct conv_frame *fin, bool *fin_read)
{
	*fin_read = false;
	for (;;) {
		struct pollfd pf[2] = { { .fd = ls, .events = POLLIN },
					{ .fd = fd, .events = *fin_read ? 0 : POLLIN } };
		struct timespec ts, *tsp = NULL;

		if (deadline) {
			uint64_t now = conv_now_ns();

			if (now >= deadline)
				return -ETIMEDOUT;
			ts.tv_sec = (time_t)((deadline - now) / 1000000000ull);
			ts.tv_nsec = (long)((deadline - now) % 1000000000ull);
			tsp = &ts;
		}
		int r = sdp_ppoll(pf, 2, tsp, NULL);

		if (r == -EINTR || r == 0)
			continue;
		if (r < 0)
			return r;
		if (pf[1].revents) {
			r = conv_recv(fd, fin, deadline);
			if (r)
				return r;
			if (fin->type != CONV_FIN)
				return -EPROTO;
			if (fin->status != CONV_OK)
				return PEER_GAVE_UP;
			*fin_read = true;
		}
		if (!pf[0].revents)
			continue;
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		int sd = sdp_accept(ls, (struct sockaddr *)&from, &flen, 0);

		if (sd == -EAGAIN || sd == -EINTR || sd == -ECONNABORTED)
			continue;
		if (sd < 0)
			return sd;
		unmap_v4(&from, &flen);

		uint8_t got[CONV_NONCE_LEN];
		uint64_t nonce_by = conv_now_ns() + 5000000000ull;

		if (deadline && deadline < nonce_by)
			nonce_by = deadline;
		if (same_host(&from, tcp_peer) && sdp_read_exact(sd, got, sizeof(got), nonce_by) == 0 &&
		    !memcmp(got, nonce, CONV_NONCE_LEN))
			return sd;
		/* Not the connection we are waiting for. */
		sdp_warn(LOGSYS, "fd %d: dropped a connection to the conversion listener "
			 "without the right nonce", fd);
		sdp_close(sd);
	}
}

int sdp_convert_accept(int fd, const void *final_msg, size_t final_len, int timeout_ms)
{
	struct conv_frame req, rsp = { .type = CONV_RSP }, fin = { .type = CONV_FIN }, theirs;
	struct sockaddr_storage peer;
	socklen_t plen;
	int r, ls = -1, sd = -1, ret = 0;
	bool fin_read = false;

	if (timeout_ms == 0 || (final_len && !final_msg))
		return -EINVAL;
	r = tcp_peer(fd, &peer, &plen);
	if (r)
		return r;

	uint64_t deadline = conv_deadline_in(timeout_ms);

	if (final_len) {
		r = conv_send_bytes(fd, final_msg, final_len, deadline);
		if (r)
			return r;
	}
	/* Nothing of ours has been read until the REQ is: a failure here
	 * leaves the stream as it was. */
	r = conv_recv(fd, &req, deadline);
	if (r)
		return r;
	if (req.type != CONV_REQ) {
		sdp_warn(LOGSYS, "fd %d: a conversion frame of type %u where a request belonged",
			 fd, req.type);
		return -EPROTO;
	}
	memcpy(rsp.nonce, req.nonce, CONV_NONCE_LEN);
	if (req.version != CONV_VERSION) {
		rsp.status = CONV_FAILED;
		rsp.reason = CONV_R_VERSION;
		ret = -EPROTONOSUPPORT;
	} else {
		uint16_t port = 0;

		ls = open_listener(fd, &port);
		if (ls < 0) {
			sdp_conn_log(LOGSYS, "fd %d: no SDP listener for the conversion: %s", fd,
				     strerror(-ls));
			rsp.status = CONV_FAILED;
			rsp.reason = CONV_R_NO_TRANSPORT;
			ret = ls;
		} else {
			rsp.port = port;
		}
	}
	/* From here on both FINs are exchanged, whatever happens. */
	uint64_t phase = deadline ? conv_deadline_in(timeout_ms) : 0;

	r = conv_send(fd, &rsp, phase);
	if (r) {
		ret = r;
		goto out;
	}
	if (rsp.status == CONV_OK) {
		sd = await_connection(fd, ls, req.nonce, &peer, phase, &theirs, &fin_read);
		if (sd == PEER_GAVE_UP) {
			/* The connect side's FIN came first: it failed. */
			ret = reason_errno(theirs.reason);
			sdp_conn_log(LOGSYS, "fd %d: the peer gave the conversion up: %s", fd,
				     reason_text(theirs.reason));
			fin.status = CONV_FAILED;
			r = conv_send(fd, &fin, conv_deadline_in(CONV_GRACE_MS));
			if (r)
				ret = r;
			goto out;
		}
		if (sd < 0) {
			ret = sd;
			fin.status = CONV_FAILED;
			fin.reason = sd == -ETIMEDOUT ? CONV_R_TIMEOUT : CONV_R_CONNECT;
		}
	} else {
		fin.status = CONV_FAILED;
		fin.reason = rsp.reason;
	}
	/* Their FIN, then ours (a timed-out wait sends ours first and
	 * still reads theirs, within the grace period). */
	uint64_t grace = conv_deadline_in(CONV_GRACE_MS);

	if (fin.status != CONV_OK) {
		r = conv_send(fd, &fin, grace);
		if (!r && !fin_read)
			r = conv_recv(fd, &theirs, grace);
		if (r)
			sdp_warn(LOGSYS, "fd %d: the peer did not finish the failed conversion (%s)",
				 fd, strerror(-r));
		goto out;
	}
	r = fin_read ? 0 : conv_recv(fd, &theirs, grace);
	if (!r && theirs.type != CONV_FIN)
		r = -EPROTO;
	if (!r && theirs.status != CONV_OK)
		r = reason_errno(theirs.reason);
	fin.status = r ? CONV_FAILED : CONV_OK;
	if (conv_send(fd, &fin, grace) && !r)
		r = -ECONNRESET;
	ret = r;
out:
	if (ls >= 0)
		sdp_close(ls);
	return conclude(fd, sd, ret);
}
