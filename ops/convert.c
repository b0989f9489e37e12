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
 *
 * The preload leaves a TCP socket's epoll memberships to the kernel
 * alone (recording them would cost every TCP program), so the conversion
 * finds them where the kernel shows them, /proc/self/fdinfo of each
 * epoll fd, takes them off the TCP socket and registers them again on
 * the SDP connection, with the same events and data.
 * On failure fd is untouched, its TCP stream as it was.
 *
 * The socket must not be used by another thread while it converts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdspace.h"
#include "log.h"
#include "sys.h"
#include "ops.h"
#include "sdp.h"
#include "sock.h"
#include "stats.h"

#define LOGSYS "switch"

/* Where fd's socket is registered in an epoll set. */
struct ep_reg {
	int epfd;
	struct epoll_event ev;
};

#define MAX_EP_REGS 16

/* fd's registrations in the process's epoll sets (the kernel's own, from
 * /proc/self/fdinfo): how many, at most max. */
static int find_epoll_regs(int fd, struct ep_reg *regs, int max)
{
	struct stat st;
	DIR *d;
	int n = 0;

	if (fstat(fd, &st) || !(d = opendir("/proc/self/fd")))
		return 0;
	for (struct dirent *e; n < max && (e = readdir(d));) {
		char path[64], link[64], line[256];
		int epfd = atoi(e->d_name);
		ssize_t ll;

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || epfd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", epfd);
		ll = readlink(path, link, sizeof(link) - 1);
		if (ll <= 0)
			continue;
		link[ll] = 0;
		if (strcmp(link, "anon_inode:[eventpoll]"))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
		FILE *f = fopen(path, "re");

		if (!f)
			continue;
		while (n < max && fgets(line, sizeof(line), f)) {
			int tfd;
			unsigned ev;
			unsigned long long data;
			unsigned long ino;
			char *p = strstr(line, "ino:");

			if (sscanf(line, "tfd: %d events: %x data: %llx", &tfd, &ev, &data) != 3 ||
			    tfd != fd || !p || sscanf(p, "ino:%lx", &ino) != 1 || ino != st.st_ino)
				continue;
			regs[n].epfd = epfd;
			regs[n].ev.events = ev;
			regs[n].ev.data.u64 = data;
			n++;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/* A placeholder socket over fd, with fd's flags. */
static int replace_with_placeholder(int fd, int domain)
{
	int fl = sys.fcntl(fd, F_GETFL), fdfl = sys.fcntl(fd, F_GETFD);

	if (fl < 0 || fdfl < 0)
		return -errno;
	/* ph has a low number for a moment: a window (common/fdspace.h). */
	fdspace_making();
	int ph = sys.socket(domain, SOCK_STREAM | ((fl & O_NONBLOCK) ? SOCK_NONBLOCK : 0), 0);

	if (ph < 0) {
		int e = errno;

		fdspace_unmade();
		return -e;
	}
	int r = sys.dup3(ph, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);

	r = r < 0 ? -errno : 0;
	sys.close(ph);
	fdspace_unmade();
	return r;
}

int ops_convert(int fd, int name, const void *val, socklen_t len)
{
	const struct sdp_convert_arg *a = val;
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);

	/* In Linux's order: the fd, then the option's length. */
	if (sys.getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
		return -errno;
	if (!val || len != sizeof(*a))
		return -EINVAL;
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
		ops_set_stack(s, OPS_STACK_TCP);
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
	int tmp = sys.fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (tmp < 0) {
		r = -errno;
		goto out;
	}
	int sd = name == SDP_CONVERT_CONNECT
			 ? sdp_convert_connect(tmp, a->timeout_ms)
			 : sdp_convert_accept(tmp, a->final_msg, a->final_len, a->timeout_ms);

	if (sd < 0) {
		sys.close(tmp);	/* fd, the same socket, stays as it was */
		r = sd;
		goto out;
	}
	/* tmp is closed and the TCP connection shut down: fd takes sd.  The
	 * TCP socket leaves its epoll sets first (another process may
	 * still hold it, whose registration would outlive the dup3). */
	struct ep_reg regs[MAX_EP_REGS];
	int nregs = find_epoll_regs(fd, regs, MAX_EP_REGS);

	for (int i = 0; i < nregs; i++)
		(void)sys.epoll_ctl(regs[i].epfd, EPOLL_CTL_DEL, fd, NULL);
	r = replace_with_placeholder(fd, me.ss_family);
	if (r) {
		sdp_warn(LOGSYS, "fd %d: converted, but the fd could not take the SDP "
			 "connection: %s", fd, strerror(-r));
		(void)sdp_close(sd);
		goto out;
	}
	if (fresh) {
		s->row = ops_stats_sock_alloc(fd);
		r = ops_fd_install(fd, s);
		if (r) {
			(void)sdp_close(sd);
			goto out;
		}
	}
	ops_switch_to_sdp(fd, s, sd);
	sdp_conn_log(LOGSYS, "fd %d: TCP connection converted to SDP (%s)", fd,
		     sdp_transport_name(sd) ?: "?");
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	/* Back into its epoll sets, as an SDP member now. */
	for (int i = 0; i < nregs; i++) {
		int er = ops_epoll_ctl(regs[i].epfd, EPOLL_CTL_ADD, fd, &regs[i].ev);

		if (er < 0)
			sdp_warn(LOGSYS, "fd %d: converted, but not back in epoll set %d: %s", fd,
				 regs[i].epfd, strerror(-er));
	}
	return 0;
out:
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	return r;
}
