// SPDX-License-Identifier: BSD-2-Clause
/*
 * Converting a TCP connection to SDP in place, under the preload:
 *
 *   struct sdp_convert_arg a = { .timeout_ms = 5000 };
 *   setsockopt(fd, SOL_SDP, SDP_CONVERT_CONNECT, &a, sizeof(a));
 *
 * (SDP_CONVERT_ACCEPT for the other end, with the final streaming-mode
 * message in a).  The engine runs the handshake of sdp/convert.c on a
 * duplicate of fd; on success the SDP connection it returns takes the
 * TCP socket's place behind the same fd number: a placeholder socket is
 * dup3()'d over fd, as for every SDP connection of the preload, which
 * releases the TCP socket (the engine has already shut it down in
 * order).  The fd keeps its O_NONBLOCK and FD_CLOEXEC, its epoll
 * memberships follow it to SDP, and every later call on it goes to SDP.
 * On failure fd is untouched, its TCP stream as it was.
 *
 * The socket must not be used by another thread while it converts.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "native.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"
#include "stats.h"

#define LOGSYS "switch"

/* A placeholder socket over fd, with fd's flags. */
static int replace_with_placeholder(int fd, int domain)
{
	int fl = native.fcntl(fd, F_GETFL), fdfl = native.fcntl(fd, F_GETFD);

	if (fl < 0 || fdfl < 0)
		return -errno;
	int ph = native.socket(domain, SOCK_STREAM | ((fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0), 0);

	if (ph < 0)
		return -errno;
	int r = native.dup3(ph, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);

	r = r < 0 ? -errno : 0;
	native.close(ph);
	return r;
}

int ops_convert(int fd, int name, const void *val, socklen_t len)
{
	const struct sdp_convert_arg *a = val;
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);

	if (!val || len != sizeof(*a))
		return -EINVAL;
	if (native.getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
		return -errno;
	if (me.ss_family != AF_INET && me.ss_family != AF_INET6)
		return -EOPNOTSUPP;

	int r = ops_engine_up();

	if (r)
		return r;

	/* A socket the preload has not seen (made before it was loaded, or
	 * passed in) gets a record now. */
	struct ops_sock *s = ops_fd_get(fd);
	bool fresh = !s;

	if (fresh) {
		s = ops_sock_new(me.ss_family);
		if (!s)
			return -ENOMEM;
		ops_set_stack(s, OPS_STACK_TCP, OPS_FB_NONE);
		ops_set_state(s, OPS_ST_ESTABLISHED);
	}
	pthread_mutex_lock(&s->lock);
	if (s->stack == OPS_STACK_SDP) {
		r = s->state == OPS_ST_ESTABLISHED ? -EISCONN : -EINVAL;
		goto out;
	}
	if (s->stack != OPS_STACK_TCP || s->inherited) {
		r = -ENOTCONN;	/* a listener, or not connected yet */
		goto out;
	}
	int tmp = native.fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (tmp < 0) {
		r = -errno;
		goto out;
	}
	int sd = name == SDP_CONVERT_CONNECT
			 ? ENGINE(sdp_convert_connect(tmp, a->timeout_ms))
			 : ENGINE(sdp_convert_accept(tmp, a->final_msg, a->final_len, a->timeout_ms));

	if (sd < 0) {
		native.close(tmp);	/* fd, the same socket, stays as it was */
		r = sd;
		goto out;
	}
	/* tmp is closed and the TCP connection shut down: fd takes sd. */
	r = replace_with_placeholder(fd, me.ss_family);
	if (r) {
		sdp_warn(LOGSYS, "fd %d: converted, but the fd could not take the SDP "
			 "connection: %s", fd, strerror(-r));
		(void)ENGINE(sdp_close(sd));
		goto out;
	}
	if (fresh) {
		s->row = ops_stats_sock_alloc(fd);
		r = ops_fd_install(fd, s);
		if (r) {
			(void)ENGINE(sdp_close(sd));
			goto out;
		}
	}
	ops_switch_to_sdp(fd, s, sd);
	sdp_conn_log(LOGSYS, "fd %d: TCP connection converted to SDP (%s)", fd,
		     ENGINE(sdp_transport_name(sd)) ?: "?");
out:
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}
