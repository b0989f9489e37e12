/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Data calls on SDP sockets: the read/write/send/recv families, sendfile
 * and splice.  Everything else is the native stack's (OPS_PASS), and so
 * is a relayed socket (relay.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"

#define LOGSYS "io"

/* Flags that Linux TCP accepts and that change nothing for a stream. */
#define HARMLESS_SEND_FLAGS (MSG_EOR | MSG_CONFIRM)

/*
 * The SDP socket behind fd for a data call in direction dir (OPS_IO_*),
 * with a reference in *sp and counted in flight (io_done() ends both), or
 * OPS_PASS.  A connect still in flight is settled first: a non-blocking
 * call gets -EAGAIN meanwhile (as a send on a connecting TCP socket
 * does), a blocking one waits.  A relayed socket's calls are the
 * kernel's.
 */
static int sdp_for_io(int fd, struct ops_sock **sp, bool dontwait, int dir)
{
	struct ops_sock *s = ops_fd_get(fd);

	*sp = NULL;
	if (!s)
		return OPS_PASS;
	for (;;) {
		if (s->conn == OPS_CONN_SDP || s->conn == OPS_CONN_SDP_ONLY)
			ops_connect_advance(fd, s);
		if (s->conn != OPS_CONN_SDP && s->conn != OPS_CONN_SDP_ONLY)
			break;
		int fl = sys.fcntl(fd, F_GETFL);

		if (dontwait || (fl >= 0 && (fl & O_NONBLOCK))) {
			ops_sock_put(s);
			return -EAGAIN;
		}
		struct pollfd p = { .fd = s->sd, .events = POLLOUT };
		struct timespec ts = { 0, 100 * 1000000L };	/* re-check the fallback deadline */
		int r = sdp_ppoll(&p, 1, &ts, NULL);

		if (r == -EINTR) {
			ops_sock_put(s);
			return -EINTR;
		}
	}
again:
	/* Held (a fork's copy, relay.c): its first use claims it. */
	if (atomic_load(&s->held))
		ops_hold_claim(fd, s);
	if (s->stack != OPS_STACK_SDP || s->sd < 0) {
		ops_sock_put(s);
		return OPS_PASS;
	}
	if (s->inherited) {
		static bool told;

		if (!__atomic_exchange_n(&told, true, __ATOMIC_RELAXED))
			sdp_err(LOGSYS, "fd %d is an SDP connection of the parent process: a forked "
				"child cannot use it (ENOTCONN); see sdp.conf(5), FORK", fd);
		ops_sock_put(s);
		return -ENOTCONN;
	}
	if (!ops_io_enter(s, dir)) {
		/* Moved away meanwhile: claimed back. */
		if (atomic_load(&s->held) && !s->relayed)
			goto again;
		ops_sock_put(s);
		return OPS_PASS;
	}
	*sp = s;
	return 0;
}

static void io_done(struct ops_sock *s, int dir)
{
	ops_io_leave(s, dir);
	ops_sock_put(s);
}

ssize_t ops_sendv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct ops_sock *s;
	int r = sdp_for_io(fd, &s, flags & MSG_DONTWAIT, OPS_IO_WR);

	if (r)
		return r;
	ssize_t n = sdp_sendv(s->sd, iov, iovcnt, flags & ~HARMLESS_SEND_FLAGS);

	if (n > 0)
		ops_stats_sock_bytes(s->row, (uint64_t)n, 0);
	io_done(s, OPS_IO_WR);
	return n;
}

ssize_t ops_recvv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct ops_sock *s;
	int r = sdp_for_io(fd, &s, flags & MSG_DONTWAIT, OPS_IO_RD);

	if (r)
		return r;
	ssize_t n = sdp_recvv(s->sd, iov, iovcnt, flags);

	if (n > 0 && !(flags & MSG_PEEK))
		ops_stats_sock_bytes(s->row, 0, (uint64_t)n);
	io_done(s, OPS_IO_RD);
	return n;
}

ssize_t ops_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	/* A stream socket ignores msg_name once connected (as Linux TCP
	 * does) and has no use for ancillary data here. */
	if (msg->msg_iovlen > INT32_MAX)
		return -EMSGSIZE;
	return ops_sendv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t ops_recvmsg(int fd, struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen > INT32_MAX)
		return -EMSGSIZE;
	ssize_t n = ops_recvv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);

	if (n >= 0) {
		/* TCP reports no source address and no ancillary data. */
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return n;
}

/* --- sendfile and splice --------------------------------------------------------- */

#define COPY_CHUNK (256 * 1024)

ssize_t ops_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct ops_sock *in = ops_fd_get(in_fd);

	if (in) {
		bool sdp = in->stack == OPS_STACK_SDP;

		ops_sock_put(in);
		if (sdp)
			return -EINVAL;	/* a socket is no file to send from, as in Linux */
	}
	struct ops_sock *s;
	int r = sdp_for_io(out_fd, &s, false, OPS_IO_WR);

	if (r)
		return r;
	char *buf = malloc(count < COPY_CHUNK ? (count ? count : 1) : COPY_CHUNK);
	ssize_t total = 0;

	if (!buf) {
		io_done(s, OPS_IO_WR);
		return -ENOMEM;
	}
	while ((size_t)total < count) {
		size_t want = count - (size_t)total;

		if (want > COPY_CHUNK)
			want = COPY_CHUNK;
		ssize_t got = offset ? pread(in_fd, buf, want, *offset) : sys.read(in_fd, buf, want);

		if (got < 0) {
			if (!total)
				total = -errno;
			break;
		}
		if (got == 0)
			break;
		ssize_t sent = 0;

		while (sent < got) {
			ssize_t n = sdp_send(s->sd, buf + sent, (size_t)(got - sent), 0);

			if (n < 0) {
				if (!total && !sent)
					total = n;
				break;
			}
			sent += n;
		}
		if (sent > 0) {
			ops_stats_sock_bytes(s->row, (uint64_t)sent, 0);
			if (total < 0)
				total = 0;
			total += sent;
			if (offset)
				*offset += sent;
		}
		if (sent < got) {
			/* What was read but not sent goes back to the file. */
			if (!offset)
				(void)lseek(in_fd, -(off_t)(got - sent), SEEK_CUR);
			break;
		}
		/* One pass per call when the socket is non-blocking would
		 * be enough too; a full count is what blocking sockets get. */
	}
	free(buf);
	io_done(s, OPS_IO_WR);
	return total;
}

/* socket -> pipe: peek what the pipe can take, write it, then consume it. */
static ssize_t splice_from_sdp(struct ops_sock *s, int pipe_fd, size_t len, unsigned int flags)
{
	int cap = sys.fcntl(pipe_fd, F_GETPIPE_SZ);
	int queued = 0;

	if (cap < 0)
		return -EINVAL;	/* not a pipe: Linux needs one end to be a pipe */
	if (sys.ioctl(pipe_fd, FIONREAD, &queued) < 0)
		queued = 0;
	size_t room = cap > queued ? (size_t)(cap - queued) : 0;

	if (!room)
		return -EAGAIN;
	if (len > room)
		len = room;
	char *buf = malloc(len ? len : 1);

	if (!buf)
		return -ENOMEM;
	ssize_t n = sdp_recv(s->sd, buf, len,
				    MSG_PEEK | ((flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0));

	if (n > 0) {
		ssize_t w = sys.write(pipe_fd, buf, (size_t)n);

		if (w < 0) {
			n = -errno;
		} else {
			n = sdp_recv(s->sd, buf, (size_t)w, MSG_DONTWAIT);
			if (n > 0)
				ops_stats_sock_bytes(s->row, 0, (uint64_t)n);
		}
	}
	free(buf);
	return n;
}

/* pipe -> socket: what is read from the pipe is sent in full. */
static ssize_t splice_to_sdp(struct ops_sock *s, int pipe_fd, size_t len)
{
	if (sys.fcntl(pipe_fd, F_GETPIPE_SZ) < 0)
		return -EINVAL;
	if (len > COPY_CHUNK)
		len = COPY_CHUNK;
	char *buf = malloc(len ? len : 1);

	if (!buf)
		return -ENOMEM;
	ssize_t got = sys.read(pipe_fd, buf, len), sent = 0;

	if (got < 0)
		sent = -errno;
	while (got > 0 && sent < got) {
		struct pollfd p = { .fd = s->sd, .events = POLLOUT };
		ssize_t n = sdp_send(s->sd, buf + sent, (size_t)(got - sent), MSG_DONTWAIT);

		if (n == -EAGAIN) {
			/* Data taken from the pipe must not be lost. */
			(void)sdp_ppoll(&p, 1, NULL, NULL);
			continue;
		}
		if (n < 0) {
			if (!sent)
				sent = n;
			break;
		}
		sent += n;
	}
	if (sent > 0)
		ops_stats_sock_bytes(s->row, (uint64_t)sent, 0);
	free(buf);
	return sent;
}

ssize_t ops_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
		   unsigned int flags)
{
	struct ops_sock *s;
	int r = sdp_for_io(fd_in, &s, flags & SPLICE_F_NONBLOCK, OPS_IO_RD);

	if (r == 0) {
		ssize_t n = off_in ? -ESPIPE : splice_from_sdp(s, fd_out, len, flags);

		(void)off_out;
		io_done(s, OPS_IO_RD);
		return n;
	}
	if (r != OPS_PASS)
		return r;
	r = sdp_for_io(fd_out, &s, flags & SPLICE_F_NONBLOCK, OPS_IO_WR);
	if (r)
		return r;
	ssize_t n = off_out ? -ESPIPE : splice_to_sdp(s, fd_in, len);

	io_done(s, OPS_IO_WR);
	return n;
}
