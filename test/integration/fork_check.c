/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Accepted connections shared with forked children (fork_servers.sh).
 *
 *   fork_check [--host ADDR] [--expect-sdp] [--timeout SECS] [--only CASE]
 *
 * A server (this process) and a client (a process forked before any
 * socket exists, so that only the server's forks are under test) run
 * one case after another; each case gets a fresh listener, one
 * connection, and prints "CASE: ok" or "CASE: FAIL reason".  Exit 0 when
 * every case passed.  With --expect-sdp both ends of every connection
 * must be SDP (under the preload, "use both" or "use sdp" rules).  Run
 * natively it checks the cases against Linux TCP.
 *
 * Cases:
 *   child_serves    accept, fork: the child checks the names and some
 *                   options, reads the request and writes the reply, the
 *                   parent closes its copy at once; the client then sees
 *                   EOF
 *   exec_helper     the child dup2()s the socket to 0 and 1 and execs
 *                   this program as a helper, which checks getpeername
 *                   (the client's address), getsockname, SO_DOMAIN,
 *                   SO_PROTOCOL, TCP_NODELAY and IP_TOS set and read
 *                   back, then echoes 1 MiB
 *   helper_fork     a child that never touches the connection lives
 *                   while the parent uses it (1 MiB echoed both ways,
 *                   through an epoll set, a dup'd copy, O_NONBLOCK,
 *                   FD_CLOEXEC and SO_RCVTIMEO set before the fork), then
 *                   exits, and the parent's connection still works; no
 *                   fd below 1024 is libsdp's relay socket
 *   parent_closes   the parent closes its copy while the child still
 *                   uses the connection: it lives on until the child
 *                   closes, then the client sees EOF
 *   reader_in_flight  a thread is blocked in read() on the connection when
 *                   another forks: it gets the first bytes the client
 *                   sends, the parent's next read the next ones, and a
 *                   write is not held up meanwhile
 *   peer_resets     the client resets the connection (SO_LINGER 0): the
 *                   child's read ends (EOF or ECONNRESET), never hangs
 *
 *   fork_check --exec-helper CLIENT-ADDR CLIENT-PORT SERVER-PORT
 *                   the exec'd helper (the connection on fd 0 and 1)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sdp.h"

#define BULK (1 << 20)
#define CHUNK 16384

static const char *host = "127.0.0.1";
static int expect_sdp;
static int timeout_s = 60;
static char reason[512];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	if (reason[0])
		return -1;	/* the first reason wins */
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	return -1;
}

#define FAIL(...)                  \
	do {                       \
		fail(__VA_ARGS__); \
		goto out;          \
	} while (0)
#define FAIL_ERRNO(what) FAIL("%s: %s", (what), strerror(errno))

/* --- I/O helpers ------------------------------------------------------------- */

/* All n bytes each way, waiting out EAGAIN on a non-blocking socket;
 * -1 with errno (0 for an early EOF). */
static int io_exact(int fd, char *p, size_t n, bool out)
{
	while (n) {
		ssize_t r = out ? write(fd, p, n) : read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = out ? POLLOUT : POLLIN };

			poll(&pf, 1, -1);
			continue;
		}
		if (r == 0)
			errno = 0;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
	return io_exact(fd, (char *)buf, n, true);
}

static int read_exact(int fd, void *buf, size_t n)
{
	return io_exact(fd, buf, n, false);
}

/* The next read gives EOF (0), not data. */
static int expect_eof(int fd)
{
	char c;
	ssize_t r;

	for (;;) {
		r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			/* non-blocking, or past SO_RCVTIMEO */
			struct pollfd pf = { .fd = fd, .events = POLLIN };

			poll(&pf, 1, -1);
			continue;
		}
		break;
	}
	if (r == 0)
		return 0;
	return r < 0 ? fail("waiting for EOF: %s", strerror(errno)) : fail("data where EOF was due");
}

static unsigned char pattern(uint64_t i, unsigned seed)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	return (unsigned char)(x >> 29);
}

/*
 * Send n bytes of pattern seed and read back what the peer echoes, both
 * at once (the echo must never wait for the sender to read), checking
 * every byte.
 */
static int exchange(int fd, size_t n, unsigned seed)
{
	static unsigned char out[CHUNK], in[CHUNK];
	size_t sent = 0, got = 0;

	while (got < n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN | (sent < n ? POLLOUT : 0) };

		if (poll(&pf, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return fail("poll: %s", strerror(errno));
		}
		if (sent < n && (pf.revents & POLLOUT)) {
			size_t k = n - sent < CHUNK ? n - sent : CHUNK;

			for (size_t i = 0; i < k; i++)
				out[i] = pattern(sent + i, seed);
			ssize_t w = send(fd, out, k, MSG_DONTWAIT | MSG_NOSIGNAL);

			if (w < 0 && errno != EAGAIN && errno != EINTR)
				return fail("send at %zu: %s", sent, strerror(errno));
			if (w > 0)
				sent += (size_t)w;
		}
		if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = recv(fd, in, sizeof(in), MSG_DONTWAIT);

			if (r == 0)
				return fail("EOF after %zu of %zu echoed bytes", got, n);
			if (r < 0 && errno != EAGAIN && errno != EINTR)
				return fail("recv at %zu: %s", got, strerror(errno));
			for (ssize_t i = 0; i < r; i++, got++)
				if (in[i] != pattern(got, seed))
					return fail("echo differs at byte %zu", got);
		}
	}
	return 0;
}

/* Echo n bytes from in to out (blocking reads and writes). */
static int echo(int in, int out, size_t n)
{
	static char buf[CHUNK];

	while (n) {
		ssize_t r = read(in, buf, n < sizeof(buf) ? n : sizeof(buf));

		if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
			struct pollfd pf = { .fd = in, .events = POLLIN };

			poll(&pf, 1, -1);
			continue;
		}
		if (r <= 0)
			return fail("echo: read: %s", r ? strerror(errno) : "EOF");
		if (write_all(out, buf, (size_t)r) < 0)
			return fail("echo: write: %s", strerror(errno));
		n -= (size_t)r;
	}
	return 0;
}

/* Is fd an SDP socket of the preload?  Only SDP answers SOL_SDP. */
static int is_sdp(int fd)
{
	int v;
	socklen_t l = sizeof(v);

	return getsockopt(fd, SOL_SDP, SDP_ZCOPY_THRESH, &v, &l) == 0;
}

static int wait_child(pid_t pid, const char *who)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return fail("waitpid %s: %s", who, strerror(errno));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFEXITED(st))
		return fail("%s exited %d", who, WEXITSTATUS(st));
	return fail("%s killed by signal %d", who, WTERMSIG(st));
}

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == b->sin_family && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* A child's report: a message on stderr and the exit status. */
static void child_exit(int rc)
{
	if (rc)
		fprintf(stderr, "fork_check child: %s\n", reason[0] ? reason : "failed");
	fflush(stderr);
	_exit(rc ? 1 : 0);
}

/* --- the cases: server side ------------------------------------------------------- */

struct conn {
	int s;				/* the accepted socket */
	struct sockaddr_in peer, local;	/* the client's and the server's address */
};

/* Both names from the socket itself, as the client and listener had them. */
static int names_match(int fd, const struct conn *c, const char *where)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	if (getpeername(fd, (struct sockaddr *)&a, &l) < 0)
		return fail("%s: getpeername: %s", where, strerror(errno));
	if (l != sizeof(a) || !same_addr(&a, &c->peer))
		return fail("%s: getpeername is not the client's address", where);
	l = sizeof(a);
	if (getsockname(fd, (struct sockaddr *)&a, &l) < 0)
		return fail("%s: getsockname: %s", where, strerror(errno));
	if (l != sizeof(a) || !same_addr(&a, &c->local))
		return fail("%s: getsockname is not the server's address", where);
	return 0;
}

/* Options as a TCP socket answers them (what a relayed socket must). */
static int tcp_options(int fd, const char *where)
{
	int v, one = 1, idle = 30, zero = 0, tos = IPTOS_LOWDELAY | 3;
	socklen_t l = sizeof(v);
	struct tcp_info ti;

	if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
	    getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &l) < 0 || v != idle)
		return fail("%s: TCP_KEEPIDLE does not read back", where);
	if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &zero, sizeof(zero)) == 0 || errno != EINVAL)
		return fail("%s: TCP_KEEPCNT 0: %s, not EINVAL", where, strerror(errno));
	if (setsockopt(fd, IPPROTO_TCP, 9999, &one, sizeof(one)) == 0 || errno != ENOPROTOOPT)
		return fail("%s: an unknown TCP option: %s, not ENOPROTOOPT", where, strerror(errno));
	l = sizeof(v);
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &l) < 0 || !v)
		return fail("%s: SO_KEEPALIVE does not read back", where);
	/* TCP keeps the ECN bits to itself. */
	l = sizeof(v);
	if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0 ||
	    getsockopt(fd, IPPROTO_IP, IP_TOS, &v, &l) < 0 || v != IPTOS_LOWDELAY)
		return fail("%s: IP_TOS reads back as %#x", where, v);
	l = sizeof(ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 || ti.tcpi_state != TCP_ESTABLISHED)
		return fail("%s: TCP_INFO is not an established connection's", where);
	return 0;
}

static int srv_child_serves(struct conn *c)
{
	char buf[8];
	pid_t pid = fork();

	if (pid < 0)
		return fail("fork: %s", strerror(errno));
	if (pid == 0) {
		int rc = names_match(c->s, c, "child");

		if (!rc)
			rc = tcp_options(c->s, "child");
		if (!rc && read_exact(c->s, buf, 3) < 0)
			rc = fail("child: request: %s", errno ? strerror(errno) : "EOF");
		if (!rc && memcmp(buf, "req", 3))
			rc = fail("child: wrong request");
		if (!rc && write_all(c->s, "reply", 5) < 0)
			rc = fail("child: reply: %s", strerror(errno));
		close(c->s);
		child_exit(rc);
	}
	close(c->s);	/* the parent's copy, at once */
	c->s = -1;
	return wait_child(pid, "child");
}

static int cli_child_serves(int fd)
{
	char buf[8];

	if (write_all(fd, "req", 3) < 0)
		return fail("request: %s", strerror(errno));
	if (read_exact(fd, buf, 5) < 0)
		return fail("reply: %s", errno ? strerror(errno) : "EOF");
	if (memcmp(buf, "reply", 5))
		return fail("wrong reply");
	return expect_eof(fd);
}

static const char *self_exe = "/proc/self/exe";

static int srv_exec_helper(struct conn *c)
{
	char addr[INET_ADDRSTRLEN], cport[16], sport[16];
	pid_t pid;

	inet_ntop(AF_INET, &c->peer.sin_addr, addr, sizeof(addr));
	snprintf(cport, sizeof(cport), "%u", ntohs(c->peer.sin_port));
	snprintf(sport, sizeof(sport), "%u", ntohs(c->local.sin_port));
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return fail("fork: %s", strerror(errno));
	if (pid == 0) {
		if (dup2(c->s, 0) < 0 || dup2(c->s, 1) < 0)
			child_exit(fail("child: dup2: %s", strerror(errno)));
		if (c->s > 1)
			close(c->s);
		execl(self_exe, "fork_check", "--exec-helper", addr, cport, sport, (char *)NULL);
		child_exit(fail("child: exec: %s", strerror(errno)));
	}
	close(c->s);
	c->s = -1;
	return wait_child(pid, "exec'd helper");
}

static int cli_exec_helper(int fd)
{
	if (exchange(fd, BULK, 1) < 0)
		return -1;
	if (shutdown(fd, SHUT_WR) < 0)
		return fail("shutdown: %s", strerror(errno));
	return expect_eof(fd);
}

/* The exec'd helper: the connection is fd 0 and 1. */
static int exec_helper(const char *caddr, const char *cport, const char *sport)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int v, one = 1, tos = IPTOS_LOWDELAY;
	char buf[CHUNK];

	if (getpeername(0, (struct sockaddr *)&a, &l) < 0)
		return fail("helper: getpeername: %s", strerror(errno));
	char got[INET_ADDRSTRLEN] = "?";

	if (a.sin_family == AF_INET)
		inet_ntop(AF_INET, &a.sin_addr, got, sizeof(got));
	if (l != sizeof(a) || a.sin_family != AF_INET || strcmp(got, caddr) ||
	    ntohs(a.sin_port) != atoi(cport))
		return fail("helper: getpeername gives family %d %s:%u, not the client's %s:%s",
			    a.sin_family, got, ntohs(a.sin_port), caddr, cport);
	l = sizeof(a);
	if (getsockname(1, (struct sockaddr *)&a, &l) < 0 || a.sin_family != AF_INET ||
	    ntohs(a.sin_port) != atoi(sport))
		return fail("helper: getsockname is not the server's address");
	if (setsockopt(0, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return fail("helper: TCP_NODELAY: %s", strerror(errno));
	l = sizeof(v);
	if (getsockopt(0, IPPROTO_TCP, TCP_NODELAY, &v, &l) < 0 || !v)
		return fail("helper: TCP_NODELAY does not read back");
	l = sizeof(v);
	if (getsockopt(1, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_INET)
		return fail("helper: SO_DOMAIN is %d, not AF_INET", v);
	l = sizeof(v);
	if (getsockopt(1, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return fail("helper: SO_PROTOCOL is %d, not IPPROTO_TCP", v);
	l = sizeof(v);
	if (getsockopt(1, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
		return fail("helper: SO_TYPE is %d", v);
	if (setsockopt(1, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0)
		return fail("helper: IP_TOS: %s", strerror(errno));
	l = sizeof(v);
	if (getsockopt(1, IPPROTO_IP, IP_TOS, &v, &l) < 0 || v != IPTOS_LOWDELAY)
		return fail("helper: IP_TOS reads back as %d", v);
	if (tcp_options(0, "helper") < 0)
		return -1;
	/* The echo, until the client's EOF. */
	for (;;) {
		ssize_t r = read(0, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return fail("helper: read: %s", strerror(errno));
		if (r == 0)
			break;
		if (write_all(1, buf, (size_t)r) < 0)
			return fail("helper: write: %s", strerror(errno));
	}
	return 0;
}

static int srv_helper_fork(struct conn *c)
{
	struct timeval tv = { 0, 200 * 1000 }, got;
	socklen_t l;
	int ep = -1, s2 = -1, go[2] = { -1, -1 }, rc = -1, fl;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x5eed }, out;
	struct stat st1, st2;
	char b;
	pid_t pid = -1;

	/* Set before the fork: they must hold on the socket after it. */
	if (setsockopt(c->s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		FAIL_ERRNO("SO_RCVTIMEO");
	if (fcntl(c->s, F_SETFD, FD_CLOEXEC) < 0 || fcntl(c->s, F_SETFL, O_NONBLOCK) < 0)
		FAIL_ERRNO("fcntl");
	s2 = dup(c->s);
	ep = epoll_create1(0);
	if (s2 < 0 || ep < 0)
		FAIL_ERRNO("dup, epoll_create1");
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c->s, &ev) < 0)
		FAIL_ERRNO("EPOLL_CTL_ADD");
	if (pipe(go) < 0)
		FAIL_ERRNO("pipe");
	pid = fork();
	if (pid < 0)
		FAIL_ERRNO("fork");
	if (pid == 0) {
		/* Lives without a look at the connection; exits when told. */
		close(go[1]);
		while (read(go[0], &b, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	/* Whatever the fork made for libsdp (a relay's socket) is out of
	 * the range of fd numbers the program is given. */
	for (int fd = 0; fd < 1024; fd++) {
		struct sockaddr_un un;

		l = sizeof(un);
		if (getsockname(fd, (struct sockaddr *)&un, &l) == 0 && un.sun_family == AF_UNIX &&
		    l > offsetof(struct sockaddr_un, sun_path) + 13 && !un.sun_path[0] &&
		    !memcmp(un.sun_path + 1, "libsdp-relay", 12))
			FAIL("a relay's socket at fd %d, among the program's", fd);
	}
	close(go[0]);
	go[0] = -1;
	/* The parent, with the child alive. */
	fl = fcntl(c->s, F_GETFD);
	if (fl < 0 || !(fl & FD_CLOEXEC))
		FAIL("FD_CLOEXEC lost at the fork");
	fl = fcntl(c->s, F_GETFL);
	if (fl < 0 || !(fl & O_NONBLOCK))
		FAIL("O_NONBLOCK lost at the fork");
	if (read(c->s, &b, 1) != -1 || errno != EAGAIN)
		FAIL("a non-blocking read with nothing to read: %s", strerror(errno));
	if (fcntl(c->s, F_SETFL, fl & ~O_NONBLOCK) < 0)
		FAIL_ERRNO("F_SETFL");
	l = sizeof(got);
	if (getsockopt(c->s, SOL_SOCKET, SO_RCVTIMEO, &got, &l) < 0 || got.tv_sec != tv.tv_sec ||
	    got.tv_usec != tv.tv_usec)
		FAIL("SO_RCVTIMEO lost at the fork");
	/* The client waits for our "g": this read times out. */
	if (read(c->s, &b, 1) != -1 || (errno != EAGAIN && errno != EWOULDBLOCK))
		FAIL("a read past SO_RCVTIMEO: %s", strerror(errno));
	if (fstat(c->s, &st1) < 0 || fstat(s2, &st2) < 0 || st1.st_ino != st2.st_ino)
		FAIL("the dup'd fd is not the same socket any more");
	if (names_match(s2, c, "dup'd fd") < 0)
		goto out;
	if (epoll_wait(ep, &out, 1, 0) != 0)
		FAIL("an epoll event before the client spoke");
	if (write_all(c->s, "g", 1) < 0)
		FAIL_ERRNO("go");
	if (epoll_wait(ep, &out, 1, -1) != 1)
		FAIL_ERRNO("epoll_wait");
	if (out.data.u64 != 0x5eed || !(out.events & EPOLLIN))
		FAIL("epoll reports data %#llx events %#x", (unsigned long long)out.data.u64,
		     out.events);
	if (echo(c->s, s2, BULK) < 0)
		goto out;
	/* The child goes; the connection stays ours. */
	close(go[1]);
	go[1] = -1;
	if (wait_child(pid, "idle child") < 0)
		goto out;
	pid = -1;
	if (echo(s2, c->s, BULK) < 0 || expect_eof(c->s) < 0)
		goto out;
	rc = 0;
out:
	if (go[1] >= 0)
		close(go[1]);
	if (go[0] >= 0)
		close(go[0]);
	if (pid > 0)
		wait_child(pid, "idle child");
	if (s2 >= 0)
		close(s2);
	if (ep >= 0)
		close(ep);
	return rc;
}

static int cli_helper_fork(int fd)
{
	char b;

	if (read_exact(fd, &b, 1) < 0 || b != 'g')
		return fail("no go: %s", errno ? strerror(errno) : "EOF");
	if (exchange(fd, BULK, 2) < 0 || exchange(fd, BULK, 3) < 0)
		return -1;
	if (shutdown(fd, SHUT_WR) < 0)
		return fail("shutdown: %s", strerror(errno));
	return expect_eof(fd);
}

static int srv_parent_closes(struct conn *c)
{
	int note[2], closed[2];
	char buf[8];
	pid_t pid;

	if (pipe(note) < 0 || pipe(closed) < 0)
		return fail("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		return fail("fork: %s", strerror(errno));
	if (pid == 0) {
		int rc = 0;

		close(note[0]);
		close(closed[1]);
		if (read_exact(c->s, buf, 3) < 0 || memcmp(buf, "one", 3) ||
		    write_all(c->s, "ONE", 3) < 0)
			rc = fail("child: first exchange: %s", strerror(errno));
		/* Tell the parent, which closes its copy, and wait for it. */
		if (!rc && (write_all(note[1], "x", 1) < 0 || read_exact(closed[0], buf, 1) < 0))
			rc = fail("child: the parent did not close");
		if (!rc && (read_exact(c->s, buf, 3) < 0 || memcmp(buf, "two", 3) ||
			    write_all(c->s, "TWO", 3) < 0))
			rc = fail("child: exchange after the parent's close: %s",
				  errno ? strerror(errno) : "EOF");
		if (!rc)
			rc = echo(c->s, c->s, BULK);
		close(c->s);
		child_exit(rc);
	}
	close(note[1]);
	close(closed[0]);
	int rc = 0;

	if (read_exact(note[0], buf, 1) < 0)
		rc = fail("the child did not serve the first exchange");
	close(c->s);
	c->s = -1;
	if (write_all(closed[1], "x", 1) < 0)
		rc = fail("pipe: %s", strerror(errno));
	close(note[0]);
	close(closed[1]);
	if (wait_child(pid, "child") < 0)
		rc = -1;
	return rc;
}

static int cli_parent_closes(int fd)
{
	char buf[8];

	if (write_all(fd, "one", 3) < 0 || read_exact(fd, buf, 3) < 0 || memcmp(buf, "ONE", 3))
		return fail("first exchange: %s", errno ? strerror(errno) : "EOF");
	if (write_all(fd, "two", 3) < 0 || read_exact(fd, buf, 3) < 0 || memcmp(buf, "TWO", 3))
		return fail("exchange after the parent's close: %s", errno ? strerror(errno) : "EOF");
	if (exchange(fd, BULK, 4) < 0)
		return -1;
	return expect_eof(fd);
}

/* A thread blocked in read() on the connection while another forks. */
struct reader {
	int fd;
	char buf[4];
	int err;		/* errno, or -1 for EOF, 0 when it read 3 bytes */
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;

	rd->err = read_exact(rd->fd, rd->buf, 3) < 0 ? (errno ? errno : -1) : 0;
	return NULL;
}

static int srv_reader_in_flight(struct conn *c)
{
	struct reader rd = { .fd = c->s };
	int go[2] = { -1, -1 }, rc = -1, joined = 0;
	char buf[4];
	pthread_t t;
	pid_t pid = -1;

	if (pipe(go) < 0)
		return fail("pipe: %s", strerror(errno));
	if ((errno = pthread_create(&t, NULL, reader_main, &rd)) != 0) {
		fail("pthread_create: %s", strerror(errno));
		close(go[0]);
		close(go[1]);
		return -1;
	}
	/* The reader is (most likely) asleep in its read by now; what
	 * arrives first is its, however the fork changed the socket. */
	struct timespec ts = { 0, 50 * 1000000L };

	nanosleep(&ts, NULL);
	pid = fork();
	if (pid < 0)
		FAIL_ERRNO("fork");
	if (pid == 0) {
		char b;

		close(go[1]);
		while (read(go[0], &b, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(go[0]);
	go[0] = -1;
	/* Writing is not held up by the reader. */
	if (write_all(c->s, "W", 1) < 0)
		FAIL_ERRNO("write");
	pthread_join(t, NULL);
	joined = 1;
	if (rd.err)
		FAIL("the reader: %s", rd.err > 0 ? strerror(rd.err) : "EOF");
	if (memcmp(rd.buf, "abc", 3))
		FAIL("the reader got %.3s, not abc", rd.buf);
	if (read_exact(c->s, buf, 3) < 0 || memcmp(buf, "def", 3))
		FAIL("after the reader: %s", errno ? strerror(errno) : "wrong data or EOF");
	if (write_all(c->s, "X", 1) < 0)
		FAIL_ERRNO("write");
	close(go[1]);
	go[1] = -1;
	if (wait_child(pid, "idle child") < 0)
		goto out;
	pid = -1;
	rc = expect_eof(c->s);
out:
	if (!joined) {
		shutdown(c->s, SHUT_RDWR);
		pthread_join(t, NULL);
	}
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
	if (pid > 0)
		wait_child(pid, "idle child");
	return rc;
}

static int cli_reader_in_flight(int fd)
{
	char b;

	if (read_exact(fd, &b, 1) < 0 || b != 'W')
		return fail("W: %s", errno ? strerror(errno) : "EOF or wrong data");
	if (write_all(fd, "abc", 3) < 0)
		return fail("abc: %s", strerror(errno));
	/* They may arrive as one: the reader takes three bytes, the
	 * parent's next read the next three. */
	if (write_all(fd, "def", 3) < 0)
		return fail("def: %s", strerror(errno));
	if (read_exact(fd, &b, 1) < 0 || b != 'X')
		return fail("X: %s", errno ? strerror(errno) : "EOF or wrong data");
	if (shutdown(fd, SHUT_WR) < 0)
		return fail("shutdown: %s", strerror(errno));
	return expect_eof(fd);
}

static int srv_peer_resets(struct conn *c)
{
	pid_t pid = fork();

	if (pid < 0)
		return fail("fork: %s", strerror(errno));
	if (pid == 0) {
		char b;
		ssize_t r;
		int rc = 0;

		if (write_all(c->s, "r", 1) < 0)
			child_exit(fail("child: ready: %s", strerror(errno)));
		do
			r = read(c->s, &b, 1);
		while (r < 0 && errno == EINTR);
		if (r > 0)
			rc = fail("child: data after the reset");
		else if (r < 0 && errno != ECONNRESET)
			rc = fail("child: read after the reset: %s", strerror(errno));
		close(c->s);
		child_exit(rc);
	}
	close(c->s);
	c->s = -1;
	return wait_child(pid, "child");
}

static int cli_peer_resets(int fd)
{
	struct linger lg = { 1, 0 };
	char b;

	if (read_exact(fd, &b, 1) < 0)
		return fail("ready: %s", errno ? strerror(errno) : "EOF");
	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		return fail("SO_LINGER: %s", strerror(errno));
	return 0;	/* the caller's close() resets */
}

/* --- the driver --------------------------------------------------------------------- */

static const struct fcase {
	const char *name;
	int (*server)(struct conn *c);
	int (*client)(int fd);
} cases[] = {
	{ "child_serves", srv_child_serves, cli_child_serves },
	{ "exec_helper", srv_exec_helper, cli_exec_helper },
	{ "helper_fork", srv_helper_fork, cli_helper_fork },
	{ "parent_closes", srv_parent_closes, cli_parent_closes },
	{ "reader_in_flight", srv_reader_in_flight, cli_reader_in_flight },
	{ "peer_resets", srv_peer_resets, cli_peer_resets },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* The client process: for each "INDEX PORT" line on ctl, connect, run the
 * case, and answer on res with "ok" or the reason. */
static void client_main(FILE *ctl, int res)
{
	unsigned idx, port;

	while (fscanf(ctl, "%u %u", &idx, &port) == 2 && idx < NCASES) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		char line[600];

		reason[0] = 0;
		inet_pton(AF_INET, host, &a.sin_addr);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			fail("client: connect: %s", strerror(errno));
		else if (expect_sdp && !is_sdp(fd))
			fail("client: the connection is not SDP");
		else
			cases[idx].client(fd);
		if (fd >= 0)
			close(fd);
		snprintf(line, sizeof(line), "%s\n", reason[0] ? reason : "ok");
		if (write_all(res, line, strlen(line)) < 0)
			break;
	}
	_exit(0);
}

static int run_case(unsigned idx, FILE *ctl, FILE *res)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t l = sizeof(a);
	struct conn c = { .s = -1 };
	char cres[600] = "";
	int lfd = socket(AF_INET, SOCK_STREAM, 0), rc = -1;

	reason[0] = 0;
	inet_pton(AF_INET, host, &a.sin_addr);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &l) < 0)
		FAIL_ERRNO("listener");
	fprintf(ctl, "%u %u\n", idx, ntohs(a.sin_port));
	fflush(ctl);
	l = sizeof(c.peer);
	c.s = accept(lfd, (struct sockaddr *)&c.peer, &l);
	if (c.s < 0)
		FAIL_ERRNO("accept");
	close(lfd);
	lfd = -1;
	l = sizeof(c.local);
	if (getsockname(c.s, (struct sockaddr *)&c.local, &l) < 0)
		FAIL_ERRNO("getsockname");
	if (expect_sdp && !is_sdp(c.s))
		FAIL("the accepted connection is not SDP");
	rc = cases[idx].server(&c);
out:
	if (lfd >= 0)
		close(lfd);
	if (c.s >= 0)
		close(c.s);
	/* The client's verdict too (it ends its case whatever ours was). */
	if (!fgets(cres, sizeof(cres), res)) {
		rc = fail("no word from the client");
	} else {
		cres[strcspn(cres, "\n")] = 0;
		if (strcmp(cres, "ok")) {
			rc = -1;
			if (!reason[0])
				snprintf(reason, sizeof(reason), "client: %s", cres);
		}
	}
	printf("%s: %s%s\n", cases[idx].name, rc ? "FAIL " : "ok", rc ? reason : "");
	fflush(stdout);
	return rc;
}

static const char *running;

static void on_alarm(int sig)
{
	char m[128];
	int n = snprintf(m, sizeof(m), "%s: FAIL timed out\n", running ? running : "?");

	(void)sig;
	if (write(1, m, (size_t)n) < 0) {
		/* nothing more to say */
	}
	_exit(2);
}

int main(int argc, char **argv)
{
	const char *only = NULL;
	int ctlp[2], resp[2], failed = 0;

	if (argc == 5 && !strcmp(argv[1], "--exec-helper")) {
		int rc = exec_helper(argv[2], argv[3], argv[4]);

		if (rc)
			fprintf(stderr, "fork_check: %s\n", reason);
		return rc ? 1 : 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--host") && i + 1 < argc) {
			host = argv[++i];
		} else if (!strcmp(argv[i], "--expect-sdp")) {
			expect_sdp = 1;
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			timeout_s = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "usage: fork_check [--host ADDR] [--expect-sdp] "
					"[--timeout SECS] [--only CASE]\n");
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (pipe(ctlp) < 0 || pipe(resp) < 0) {
		perror("pipe");
		return 2;
	}
	pid_t client = fork();

	if (client < 0) {
		perror("fork");
		return 2;
	}
	if (client == 0) {
		close(ctlp[1]);
		close(resp[0]);
		client_main(fdopen(ctlp[0], "r"), resp[1]);
	}
	close(ctlp[0]);
	close(resp[1]);
	FILE *ctl = fdopen(ctlp[1], "w"), *res = fdopen(resp[0], "r");

	signal(SIGALRM, on_alarm);
	for (unsigned i = 0; i < NCASES; i++) {
		if (only && strcmp(only, cases[i].name))
			continue;
		running = cases[i].name;
		alarm((unsigned)timeout_s);
		if (run_case(i, ctl, res))
			failed++;
		alarm(0);
	}
	fclose(ctl);	/* the client's end */
	fclose(res);
	waitpid(client, NULL, 0);
	return failed ? 1 : 0;
}
