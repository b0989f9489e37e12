/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The socket state machine, one transition at a time, in one process over
 * the software transport: what each call does in each state, and the
 * poll mask (sdp_events) after it, which is how the state is visible.
 * The masks are those tcp_poll() gives for the same state.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sdp.h"
#include "tunables.h"

#define EV_MASK (POLLIN | POLLOUT | POLLRDHUP | POLLHUP | POLLERR)

static int ev(int sd)
{
	int e = sdp_events(sd);

	cr_assert_geq(e, 0, "sdp_events: %s", strerror(-e));
	return e & EV_MASK;
}

/* Wait until ev(sd) has all of want (the progress thread moves states). */
static int ev_wait(int sd, int want)
{
	for (int i = 0; i < 5000; i++) {
		int e = ev(sd);

		if ((e & want) == want)
			return e;
		usleep(1000);
	}
	return ev(sd);
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sa;
}

/* A listener on 127.0.0.1, port chosen by the transport. */
static int listener(struct sockaddr_in *sa)
{
	int ls = sdp_socket(AF_INET, SOCK_STREAM, 0);
	socklen_t len = sizeof(*sa);

	cr_assert_geq(ls, 0, "sdp_socket: %s", strerror(-ls));
	*sa = loopback(0);
	cr_assert_eq(sdp_bind(ls, (struct sockaddr *)sa, sizeof(*sa)), 0);
	cr_assert_eq(sdp_listen(ls, 8), 0);
	cr_assert_eq(sdp_getsockname(ls, (struct sockaddr *)sa, &len), 0);
	return ls;
}

/* An established pair: client c, accepted a. */
static void pair(int *ls, int *c, int *a)
{
	struct sockaddr_in sa;

	*ls = listener(&sa);
	*c = sdp_socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(*c, 0);
	cr_assert_eq(sdp_connect(*c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	*a = sdp_accept(*ls, NULL, NULL, 0);
	cr_assert_geq(*a, 0, "sdp_accept: %s", strerror(-*a));
}

static void setup(void)
{
	setenv("SDP_TRANSPORTS", "tcp-fallback", 0);
}

TestSuite(states, .init = setup, .timeout = 60);

Test(states, new_socket)
{
	int s = sdp_socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(s, 0);
	/* tcp_poll() on a socket in CLOSE: writable and hung up. */
	cr_expect_eq(ev(s), POLLOUT | POLLHUP);
	char b;

	cr_expect_eq(sdp_recv(s, &b, 1, MSG_DONTWAIT), -ENOTCONN);
	cr_expect_eq(sdp_send(s, "x", 1, MSG_NOSIGNAL), -EPIPE);
	cr_expect_eq(sdp_shutdown(s, SHUT_RDWR), -ENOTCONN);
	cr_expect_eq(sdp_accept(s, NULL, NULL, 0), -EINVAL);
	cr_expect_eq(sdp_close(s), 0);
	cr_expect_eq(sdp_close(s), -EBADF);
}

Test(states, bound_then_listening)
{
	struct sockaddr_in sa = loopback(0);
	int s = sdp_socket(AF_INET, SOCK_STREAM, 0);
	socklen_t len = sizeof(sa);

	cr_assert_eq(sdp_bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_expect_eq(sdp_bind(s, (struct sockaddr *)&sa, sizeof(sa)), -EINVAL, "bound twice");
	cr_assert_eq(sdp_getsockname(s, (struct sockaddr *)&sa, &len), 0);
	cr_expect_neq(sa.sin_port, 0, "bind to port 0 picks a port");
	cr_assert_eq(sdp_listen(s, 4), 0);
	cr_expect_eq(ev(s), 0, "a listener with nothing pending");
	cr_expect_eq(sdp_listen(s, 16), 0, "listen again changes the backlog");
	int v = 0;
	socklen_t vl = sizeof(v);

	cr_expect_eq(sdp_getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl), 0);
	cr_expect_eq(v, 1);
	cr_expect_eq(sdp_connect(s, (struct sockaddr *)&sa, sizeof(sa)), -EISCONN);
	sdp_set_nonblock(s, 1);
	cr_expect_eq(sdp_accept(s, NULL, NULL, 0), -EAGAIN);
	sdp_close(s);
}

Test(states, connect_establishes_both_sides)
{
	int ls, c, a;

	pair(&ls, &c, &a);
	cr_expect_eq(ev(c), POLLOUT, "established, idle: writable only");
	cr_expect_eq(ev(a), POLLOUT);
	cr_expect_str_eq(sdp_transport_name(c), "tcp-fallback");
	struct sockaddr_in p;
	socklen_t pl = sizeof(p);

	cr_expect_eq(sdp_getpeername(a, (struct sockaddr *)&p, &pl), 0);
	cr_expect_eq(p.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	sdp_close(c);
	sdp_close(a);
	sdp_close(ls);
}

Test(states, listener_readable_when_a_connection_waits)
{
	struct sockaddr_in sa;
	int ls = listener(&sa), c = sdp_socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_eq(sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_expect_eq(ev_wait(ls, POLLIN), POLLIN);
	int a = sdp_accept(ls, NULL, NULL, SOCK_NONBLOCK);

	cr_assert_geq(a, 0);
	cr_expect_eq(ev(ls), 0, "queue empty again");
	cr_expect_eq(sdp_get_nonblock(a), 1, "accept4 flags");
	sdp_close(a);
	sdp_close(c);
	sdp_close(ls);
}

Test(states, nonblocking_connect)
{
	struct sockaddr_in sa;
	int ls = listener(&sa);
	int c = sdp_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa));

	cr_assert(r == 0 || r == -EINPROGRESS, "connect: %d", r);
	if (r == -EINPROGRESS) {
		int again = sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa));

		cr_expect(again == -EALREADY || again == 0, "second connect: %d", again);
	}
	cr_expect_eq(ev_wait(c, POLLOUT), POLLOUT);
	int err = -1;
	socklen_t el = sizeof(err);

	cr_expect_eq(sdp_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el), 0);
	cr_expect_eq(err, 0);
	sdp_close(c);
	sdp_close(ls);
}

Test(states, refused_connect)
{
	struct sockaddr_in sa;
	int ls = listener(&sa);

	sdp_close(ls);	/* nobody listens there now */
	int c = sdp_socket(AF_INET, SOCK_STREAM, 0);

	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa)), -ECONNREFUSED);
	cr_expect_eq(ev(c) & (POLLOUT | POLLHUP), POLLOUT | POLLHUP, "closed after failure");
	/* A failed attempt may be retried. */
	struct sockaddr_in sb;
	int ls2 = listener(&sb);

	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sb, sizeof(sb)), 0, "retry");
	sdp_close(c);
	sdp_close(ls2);
}

/* Why an attempt gave no connection (sdp_fallback_reason()): what the
 * preload reports when it falls back to TCP. */
Test(states, connect_failure_reason_refused)
{
	struct sockaddr_in sa, sb;
	int ls = listener(&sa), err = 0;
	int c = sdp_socket(AF_INET, SOCK_STREAM, 0);
	socklen_t l = sizeof(err);

	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_NONE, "no attempt yet");
	sdp_close(ls);
	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa)), -ECONNREFUSED);
	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_REFUSED);
	cr_expect_eq(sdp_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l), 0);
	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_REFUSED, "reading SO_ERROR keeps it");
	/* The next attempt starts afresh. */
	ls = listener(&sb);
	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sb, sizeof(sb)), 0, "retry");
	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_NONE);
	sdp_close(c);
	sdp_close(ls);
	cr_expect_eq(sdp_fallback_reason(c), -EBADF);
}

/* A transport connection to the SDP port that nobody answers on:
 * tcp-fallback's SDP port for P is P + tcpf_port_offset. */
Test(states, connect_failure_reason_timeout)
{
	if (strcmp(tun_str(TUN_transports), "tcp-fallback"))
		cr_skip_test("the silent SDP port is tcp-fallback's");
	setenv("SDP_CONNECT_TIMEOUT_MS", "100", 1);
	tun_reset();
	int k = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);

	cr_assert_eq(bind(k, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(k, 8), 0);
	cr_assert_eq(getsockname(k, (struct sockaddr *)&sa, &len), 0);
	long q = ntohs(sa.sin_port), p = (q - tun_int(TUN_tcpf_port_offset) + 65536) % 65536;

	if (!p)
		cr_skip_test("SDP port 0");
	sa = loopback((uint16_t)p);
	int c = sdp_socket(AF_INET, SOCK_STREAM, 0);

	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa)), -ETIMEDOUT);
	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_TIMEOUT);
	sdp_close(c);
	close(k);
}

/* No enabled transport serves the destination. */
Test(states, connect_failure_reason_no_route)
{
	struct sockaddr_in sa;
	int ls = listener(&sa);
	int c = sdp_socket(AF_INET, SOCK_STREAM, 0);

	/* The engine is up; the transports tunable now enables none. */
	setenv("SDP_TRANSPORTS", "none", 1);
	tun_reset();
	cr_expect_eq(sdp_connect(c, (struct sockaddr *)&sa, sizeof(sa)), -ENETUNREACH);
	cr_expect_eq(sdp_fallback_reason(c), SDP_FB_NO_ROUTE);
	sdp_close(c);
	sdp_close(ls);
}

Test(states, data_makes_readable)
{
	int ls, c, a;
	char buf[8];

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_send(c, "hello", 5, 0), 5);
	cr_expect_eq(ev_wait(a, POLLIN), POLLIN | POLLOUT);
	cr_expect_eq(sdp_nread(a), 5);
	cr_expect_eq(sdp_recv(a, buf, sizeof(buf), 0), 5);
	cr_expect_eq(ev(a), POLLOUT, "drained");
	sdp_close(c);
	sdp_close(a);
	sdp_close(ls);
}

Test(states, half_close_each_way)
{
	int ls, c, a;
	char buf[8];

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_shutdown(c, SHUT_WR), 0);
	/* The writer's side: still readable later, sending is over. */
	cr_expect_eq(sdp_send(c, "x", 1, MSG_NOSIGNAL), -EPIPE);
	/* The reader sees EOF: readable, RDHUP, still writable. */
	cr_expect_eq(ev_wait(a, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP | POLLOUT);
	cr_expect_eq(sdp_recv(a, buf, sizeof(buf), 0), 0);
	cr_expect_eq(sdp_send(a, "back", 4, 0), 4, "the other half still carries data");
	cr_expect_eq(ev_wait(c, POLLIN), POLLIN | POLLOUT);
	cr_expect_eq(sdp_recv(c, buf, sizeof(buf), 0), 4);
	cr_assert_eq(sdp_shutdown(a, SHUT_WR), 0);
	/* Both halves closed: HUP on both. */
	cr_expect_eq(ev_wait(c, POLLHUP) & POLLHUP, POLLHUP);
	cr_expect_eq(ev_wait(a, POLLHUP) & POLLHUP, POLLHUP);
	cr_expect_eq(sdp_recv(c, buf, sizeof(buf), 0), 0);
	sdp_close(c);
	sdp_close(a);
	sdp_close(ls);
}

Test(states, abortive_close_resets_the_peer)
{
	int ls, c, a;
	char buf[8];
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	cr_assert_eq(sdp_close(c), 0);
	cr_expect_eq(ev_wait(a, POLLERR) & (POLLIN | POLLHUP | POLLERR),
		     POLLIN | POLLHUP | POLLERR);
	cr_expect_eq(sdp_recv(a, buf, sizeof(buf), 0), -ECONNRESET, "reported once");
	cr_expect_eq(sdp_recv(a, buf, sizeof(buf), 0), 0, "then end of stream");
	cr_expect_eq(sdp_send(a, "x", 1, MSG_NOSIGNAL), -EPIPE);
	struct sockaddr_in sa = loopback(1);

	cr_expect_eq(sdp_connect(a, (struct sockaddr *)&sa, sizeof(sa)), -EISCONN,
		     "a reset connection is not retried");
	sdp_close(a);
	sdp_close(ls);
}

Test(states, close_with_unread_data_resets)
{
	int ls, c, a;
	char buf[8];

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_send(c, "unread", 6, 0), 6);
	cr_assert_eq(ev_wait(a, POLLIN) & POLLIN, POLLIN);
	cr_assert_eq(sdp_close(a), 0);	/* data never read: Linux sends RST */
	cr_expect_eq(ev_wait(c, POLLERR) & POLLERR, POLLERR);
	cr_expect_eq(sdp_recv(c, buf, sizeof(buf), 0), -ECONNRESET);
	sdp_close(c);
	sdp_close(ls);
}

Test(states, interest_drives_the_readiness_fd)
{
	int ls, c, a;
	struct pollfd p;

	pair(&ls, &c, &a);
	p = (struct pollfd){ .fd = a, .events = POLLIN };
	cr_expect_eq(poll(&p, 1, 0), 0, "idle: the sd is not readable");
	cr_assert_eq(sdp_send(c, "x", 1, 0), 1);
	cr_expect_eq(poll(&p, 1, 5000), 1, "data: the sd becomes readable");
	char b;

	cr_assert_eq(sdp_recv(a, &b, 1, 0), 1);
	cr_expect_eq(poll(&p, 1, 0), 0, "drained: not readable again");
	sdp_close(c);
	sdp_close(a);
	sdp_close(ls);
}

static double cpu_seconds(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	       (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/*
 * Sockets the application keeps after their connection ended (a reset
 * one, a fully shut one) and an idle established pair must cost no CPU:
 * the progress thread sleeps.  A spinning thread burns the whole second;
 * the bound is far from both.
 */
Test(states, ended_and_idle_connections_do_not_spin)
{
	int ls, c, a, ls2, c2, a2, ls3, c3, a3;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	char b;

	pair(&ls, &c, &a);
	cr_assert_eq(sdp_setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	sdp_close(c);
	ev_wait(a, POLLERR);
	cr_expect_eq(sdp_recv(a, &b, 1, 0), -ECONNRESET);
	pair(&ls2, &c2, &a2);
	sdp_shutdown(c2, SHUT_WR);
	sdp_shutdown(a2, SHUT_WR);
	ev_wait(c2, POLLHUP);
	ev_wait(a2, POLLHUP);
	pair(&ls3, &c3, &a3);
	usleep(100000);

	double t0 = cpu_seconds();

	sleep(1);
	double used = cpu_seconds() - t0;

	cr_expect_lt(used, 0.3, "%.3f s of CPU in 1 s while idle", used);
	sdp_close(a);
	sdp_close(ls);
	sdp_close(c2);
	sdp_close(a2);
	sdp_close(ls2);
	sdp_close(c3);
	sdp_close(a3);
	sdp_close(ls3);
}

/* The eventfd's count: the writes since the last read (0: none). */
static uint64_t efd_take(int efd)
{
	uint64_t v = 0;

	if (read(efd, &v, sizeof(v)) < 0)
		cr_assert_eq(errno, EAGAIN, "read: %s", strerror(errno));
	return v;
}

/* A watch with a gate (sdp_watch_gate): with nobody asleep on the set a
 * change only counts; with a sleeper the first change writes the eventfd
 * and the ones after it, until it is drained, do not. */
/* A watch whose eventfd an outer epoll set sees rings for what the
 * socket would report only: not for space freed or a send when only
 * input counts, yes for data, and never with a mask of 0. */
Test(states, watch_ring_when_filters_changes)
{
	int ls, c, a, err;
	char b[4];

	pair(&ls, &c, &a);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	cr_assert_geq(efd, 0);
	struct sdp_watch *w = sdp_watch_add(a, efd, &err);

	cr_assert_not_null(w, "sdp_watch_add: %s", strerror(-err));
	sdp_watch_ring_when(w, POLLIN | POLLHUP | POLLERR);
	unsigned before = sdp_watch_changes(w);

	cr_assert_eq(sdp_send(a, "p", 1, 0), 1);
	cr_assert_eq(sdp_recv(c, b, 1, MSG_WAITALL), 1);
	(void)sdp_events(a);
	cr_expect_neq(sdp_watch_changes(w), before, "the change was not counted");
	cr_expect_eq(efd_take(efd), 0, "rang for a change that reports no input");

	cr_assert_eq(sdp_send(c, "x", 1, 0), 1);
	for (int i = 0; i < 5000 && !(sdp_events(a) & POLLIN); i++)
		usleep(1000);
	cr_expect_gt(efd_take(efd), 0, "no ring for the data");

	sdp_watch_ring_when(w, 0);
	cr_assert_eq(sdp_shutdown(a, SHUT_RD), 0);
	cr_expect_eq(efd_take(efd), 0, "a mask of 0 rang");

	sdp_watch_del(w);
	close(efd);
	sdp_close(a);
	sdp_close(c);
	sdp_close(ls);
}

Test(states, watch_gate_counts_and_rings_once)
{
	struct sdp_watch_gate g = { 0 };
	int ls, c, a, err;
	char b;

	pair(&ls, &c, &a);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	cr_assert_geq(efd, 0);
	struct sdp_watch *w = sdp_watch_add(a, efd, &err);

	cr_assert_not_null(w, "sdp_watch_add: %s", strerror(-err));
	sdp_watch_gate(w, &g);

	/* Nobody asleep: an arrival is counted, not written. */
	cr_assert_eq(sdp_send(c, "x", 1, 0), 1);
	cr_assert_eq(sdp_recv(a, &b, 1, MSG_PEEK), 1);
	unsigned seen = __atomic_load_n(&g.changes, __ATOMIC_SEQ_CST);

	cr_expect_gt(seen, 0, "the arrival was not counted");
	cr_expect_eq(efd_take(efd), 0, "written with nobody asleep");

	/* A sleeper: one write for the arrival and the shutdown after it. */
	__atomic_store_n(&g.sleepers, 1, __ATOMIC_SEQ_CST);
	cr_assert_eq(sdp_send(c, "y", 1, 0), 1);
	for (int i = 0; i < 5000 && __atomic_load_n(&g.changes, __ATOMIC_SEQ_CST) == seen; i++) {
		(void)sdp_events(a);
		usleep(1000);
	}
	cr_assert_neq(__atomic_load_n(&g.changes, __ATOMIC_SEQ_CST), seen, "no second arrival");
	cr_assert_eq(sdp_shutdown(a, SHUT_RD), 0);
	cr_expect_eq(efd_take(efd), 1, "a batch of changes wrote the eventfd more than once");

	/* Drained and reset: the next change writes again. */
	__atomic_store_n(&g.rung, 0, __ATOMIC_SEQ_CST);
	cr_assert_eq(sdp_shutdown(a, SHUT_WR), 0);
	cr_expect_eq(efd_take(efd), 1, "no write after the drain");

	sdp_watch_del(w);
	close(efd);
	sdp_close(a);
	sdp_close(c);
	sdp_close(ls);
}
