/* SPDX-License-Identifier: BSD-2-Clause */
/* sockapi_check helpers: see util.h. */

#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- the result ------------------------------------------------------ */

static pthread_mutex_t result_lock = PTHREAD_MUTEX_INITIALIZER;
static char trace[1024];
static char reason[512];

void result_reset(void)
{
	pthread_mutex_lock(&result_lock);
	trace[0] = '\0';
	reason[0] = '\0';
	pthread_mutex_unlock(&result_lock);
}

static void append(char *dst, size_t cap, const char *fmt, va_list ap)
{
	size_t n = strlen(dst);

	if (n > 0 && n + 1 < cap) {
		dst[n++] = ' ';
		dst[n] = '\0';
	}
	if (n + 1 < cap)
		vsnprintf(dst + n, cap - n, fmt, ap);
}

void note(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&result_lock);
	va_start(ap, fmt);
	append(trace, sizeof(trace), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&result_lock);
}

int fail(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&result_lock);
	if (reason[0] == '\0') {
		va_start(ap, fmt);
		vsnprintf(reason, sizeof(reason), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&result_lock);
	return -1;
}

const char *result_trace(void)
{
	return trace;
}

const char *result_reason(void)
{
	return reason;
}

/* --- names ----------------------------------------------------------- */

#define E(x) { x, #x }
static const struct {
	int e;
	const char *name;
} errnames[] = {
	E(EPERM), E(ENOENT), E(EINTR), E(EIO), E(EBADF), E(EAGAIN), E(ENOMEM),
	E(EACCES), E(EFAULT), E(EBUSY), E(EEXIST), E(ENODEV), E(ENOTDIR),
	E(EINVAL), E(ENFILE), E(EMFILE), E(ENOTTY), E(ENOSPC), E(ESPIPE),
	E(EPIPE), E(ERANGE), E(ENOSYS), E(ELOOP), E(ENOTSOCK), E(EDESTADDRREQ),
	E(EMSGSIZE), E(EPROTOTYPE), E(ENOPROTOOPT), E(EPROTONOSUPPORT),
	E(EOPNOTSUPP), E(EAFNOSUPPORT), E(EADDRINUSE), E(EADDRNOTAVAIL),
	E(ENETDOWN), E(ENETUNREACH), E(ECONNABORTED), E(ECONNRESET),
	E(ENOBUFS), E(EISCONN), E(ENOTCONN), E(ESHUTDOWN), E(ETIMEDOUT),
	E(ECONNREFUSED), E(EHOSTUNREACH), E(EALREADY), E(EINPROGRESS),
	E(ECHILD), E(ESRCH), E(E2BIG), E(ENXIO), E(EXDEV),
};
#undef E

const char *errname(int e)
{
	static __thread char buf[16];
	size_t i;

	if (e == 0)
		return "0";
	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (errnames[i].e == e)
			return errnames[i].name;
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

struct bitname {
	uint32_t bit;
	const char *name;
};

static const char *bitnames(uint32_t v, const struct bitname *t, size_t n,
			    char *buf, size_t len)
{
	size_t i, used = 0;

	buf[0] = '\0';
	if (v == 0) {
		snprintf(buf, len, "0");
		return buf;
	}
	for (i = 0; i < n; i++) {
		if (!(v & t[i].bit))
			continue;
		v &= ~t[i].bit;
		used += (size_t)snprintf(buf + used, used < len ? len - used : 0,
					 "%s%s", used ? "|" : "", t[i].name);
		if (used >= len)
			return buf;
	}
	if (v)
		snprintf(buf + used, len - used, "%s0x%x", used ? "|" : "", v);
	return buf;
}

const char *pollname(int revents, char *buf, size_t len)
{
	static const struct bitname t[] = {
		{ POLLIN, "POLLIN" },	  { POLLPRI, "POLLPRI" },
		{ POLLOUT, "POLLOUT" },	  { POLLRDHUP, "POLLRDHUP" },
		{ POLLERR, "POLLERR" },	  { POLLHUP, "POLLHUP" },
		{ POLLNVAL, "POLLNVAL" }, { POLLRDNORM, "POLLRDNORM" },
		{ POLLRDBAND, "POLLRDBAND" }, { POLLWRNORM, "POLLWRNORM" },
		{ POLLWRBAND, "POLLWRBAND" },
	};
	return bitnames((uint32_t)(unsigned short)revents, t,
			sizeof(t) / sizeof(t[0]), buf, len);
}

const char *epollname(uint32_t events, char *buf, size_t len)
{
	static const struct bitname t[] = {
		{ EPOLLIN, "EPOLLIN" },		{ EPOLLPRI, "EPOLLPRI" },
		{ EPOLLOUT, "EPOLLOUT" },	{ EPOLLRDHUP, "EPOLLRDHUP" },
		{ EPOLLERR, "EPOLLERR" },	{ EPOLLHUP, "EPOLLHUP" },
		{ EPOLLRDNORM, "EPOLLRDNORM" }, { EPOLLRDBAND, "EPOLLRDBAND" },
		{ EPOLLWRNORM, "EPOLLWRNORM" }, { EPOLLWRBAND, "EPOLLWRBAND" },
	};
	return bitnames(events, t, sizeof(t) / sizeof(t[0]), buf, len);
}

/* --- sockets --------------------------------------------------------- */

int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

void xclose(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

struct in_addr test_host(void)
{
	const char *h = getenv("TEST_HOST");
	struct in_addr a = { .s_addr = htonl(INADDR_LOOPBACK) };

	if (h && *h && inet_pton(AF_INET, h, &a) != 1) {
		fprintf(stderr, "sockapi_check: TEST_HOST '%s' is not an IPv4 address\n", h);
		exit(2);
	}
	return a;
}

int make_listener(int type_flags, struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_STREAM | type_flags, 0);

	if (fd < 0)
		return fail("listener socket: %s", errname(errno));
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr = test_host();
	addr->sin_port = 0;
	if (bind(fd, (struct sockaddr *)addr, sizeof(*addr)) < 0) {
		fail("listener bind: %s", errname(errno));
		goto bad;
	}
	if (listen(fd, 16) < 0) {
		fail("listen: %s", errname(errno));
		goto bad;
	}
	if (getsockname(fd, (struct sockaddr *)addr, &len) < 0) {
		fail("listener getsockname: %s", errname(errno));
		goto bad;
	}
	if (addr->sin_port == 0) {
		fail("listener got port 0");
		goto bad;
	}
	return fd;
bad:
	close(fd);
	return -1;
}

int pair_open(struct pair *p)
{
	struct sockaddr_in a;
	int l;

	p->c = p->s = -1;
	l = make_listener(0, &a);
	if (l < 0)
		return -1;
	p->c = socket(AF_INET, SOCK_STREAM, 0);
	if (p->c < 0) {
		fail("client socket: %s", errname(errno));
		goto bad;
	}
	if (connect(p->c, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fail("pair connect: %s", errname(errno));
		goto bad;
	}
	if (wait_fd(l, POLLIN, 10000) <= 0) {
		fail("pair: listener not readable within 10 s");
		goto bad;
	}
	p->s = accept(l, NULL, NULL);
	if (p->s < 0) {
		fail("pair accept: %s", errname(errno));
		goto bad;
	}
	close(l);
	return 0;
bad:
	close(l);
	pair_close(p);
	return -1;
}

void pair_close(struct pair *p)
{
	xclose(&p->c);
	xclose(&p->s);
}

int closed_port(struct sockaddr_in *addr, int *holder)
{
	socklen_t len = sizeof(*addr);

	*holder = socket(AF_INET, SOCK_STREAM, 0);
	if (*holder < 0)
		return fail("holder socket: %s", errname(errno));
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr = test_host();
	if (bind(*holder, (struct sockaddr *)addr, sizeof(*addr)) < 0 ||
	    getsockname(*holder, (struct sockaddr *)addr, &len) < 0) {
		fail("holder bind: %s", errname(errno));
		xclose(holder);
		return -1;
	}
	return 0;
}

int wait_fd(int fd, short events, int ms)
{
	int64_t end = now_ms() + ms;
	struct pollfd pfd = { .fd = fd, .events = events };
	int n;

	for (;;) {
		int left = (int)(end - now_ms());

		if (left < 0)
			left = 0;
		pfd.revents = 0;
		n = poll(&pfd, 1, left);
		if (n > 0)
			return pfd.revents;
		if (n == 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

int write_all(int fd, const void *buf, size_t len, int ms)
{
	const char *p = buf;
	int64_t end = now_ms() + ms;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (now_ms() >= end) {
			errno = ETIMEDOUT;
			return -1;
		}
		wait_fd(fd, POLLOUT, 100);
	}
	return 0;
}

int read_exact(int fd, void *buf, size_t len, int ms)
{
	char *p = buf;
	int64_t end = now_ms() + ms;

	while (len > 0) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0) {
			errno = 0;
			return -1;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -1;
		if (now_ms() >= end) {
			errno = ETIMEDOUT;
			return -1;
		}
		wait_fd(fd, POLLIN, 100);
	}
	return 0;
}

int wait_eof(int fd, int ms)
{
	char buf[4096];
	int64_t end = now_ms() + ms;

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n == 0)
			return 0;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (now_ms() >= end) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (n < 0)
			wait_fd(fd, POLLIN, 100);
	}
}

/* --- misc ------------------------------------------------------------ */

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

uint64_t fnv1a(uint64_t h, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len--) {
		h ^= *p++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint8_t pattern_byte(uint32_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ULL + seed;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return (uint8_t)(x >> ((off & 7) * 8));
}

void pattern_fill(uint32_t seed, uint64_t off, void *buf, size_t len)
{
	unsigned char *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pattern_byte(seed, off + i);
}

int64_t pattern_check(uint32_t seed, uint64_t off, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, off + i))
			return (int64_t)(off + i);
	return -1;
}

uint32_t rnd32(uint32_t *state)
{
	uint32_t x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*state = x;
	return x;
}

/* --- signals --------------------------------------------------------- */

volatile int usr1_count;
volatile int sigpipe_seen;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_count++;
}

static void on_pipe(int sig)
{
	(void)sig;
	sigpipe_seen++;
}

void usr1_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: blocking calls end with EINTR */
	sigaction(SIGUSR1, &sa, NULL);
}

void sigpipe_count(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_pipe;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
	sigpipe_seen = 0;
}

void sigpipe_ignore(void)
{
	signal(SIGPIPE, SIG_IGN);
}

static int stopped(struct kicker *k)
{
	return __atomic_load_n(&k->stop, __ATOMIC_SEQ_CST);
}

static void *kicker_run(void *v)
{
	struct kicker *k = v;
	int i;

	for (i = 0; i < 200 && !stopped(k); i++) {
		sleep_ms(50);
		if (!stopped(k))
			pthread_kill(k->target, SIGUSR1);
	}
	return NULL;
}

int kicker_start(struct kicker *k)
{
	k->target = pthread_self();
	__atomic_store_n(&k->stop, 0, __ATOMIC_SEQ_CST);
	k->started = pthread_create(&k->thread, NULL, kicker_run, k) == 0;
	return k->started ? 0 : fail("pthread_create");
}

void kicker_stop(struct kicker *k)
{
	if (!k->started)
		return;
	__atomic_store_n(&k->stop, 1, __ATOMIC_SEQ_CST);
	pthread_join(k->thread, NULL);
	k->started = 0;
}

int wait_child(pid_t pid, int ms, char *what, size_t len)
{
	int64_t end = now_ms() + ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			snprintf(what, len, "waitpid=%s", errname(errno));
			return -1;
		}
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			snprintf(what, len, "timeout");
			return -1;
		}
		sleep_ms(5);
	}
	if (WIFEXITED(st)) {
		snprintf(what, len, "exit=%d", WEXITSTATUS(st));
		return WEXITSTATUS(st);
	}
	snprintf(what, len, "signal=%d", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
	return -1;
}

pid_t spawn_self(const char *a1, const char *a2, const char *a3)
{
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		alarm(0);
		execl(self_exe, "sockapi_check", a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	return pid;
}
