/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shm transport's wake-ups (doc/shm.md, "Waking"), counted through
 * the OTI in one process: a connection's two ends, each armed as the
 * engine arms before it sleeps, and whether the other's put or take made
 * its fd readable (a wake byte) or not.  Counts, never times.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "oti.h"
#include "tunables.h"

#define MSG 1024	/* buf_size: the smallest ring, 64 KiB */
#define NBUF 128

static const struct oti_ops *T;
static struct oti_listener *L;
static struct oti_ep *A, *P;	/* the active and the passive end */
static struct oti_mr *mr_a, *mr_p;
static uint8_t buf_a[NBUF][MSG], buf_p[NBUF][MSG];

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

static bool readable_ep(struct oti_ep *ep)
{
	return readable(T->ep_fd(ep), 0);
}

static void wait_event(struct oti_ep *ep, enum oti_event_type type)
{
	struct oti_event ev;

	for (int i = 0; i < 100; i++) {
		int r = T->get_event(ep, &ev);

		if (r == 0) {
			cr_assert_eq(ev.type, type, "event %d, wanted %d", ev.type, type);
			return;
		}
		cr_assert_eq(r, -EAGAIN);
		(void)readable(T->ep_fd(ep), 50);
	}
	cr_assert_fail("no event %d", type);
}

static void post_recv(struct oti_ep *ep, struct oti_mr *mr, uint8_t *b, uint64_t ctx)
{
	struct oti_sge sge = { .addr = b, .len = MSG, .mr = mr };

	cr_assert_eq(T->post_recv(ep, &sge, ctx), 0);
}

static void post_send(struct oti_ep *ep, struct oti_mr *mr, uint8_t *b, uint32_t len)
{
	struct oti_sge sge = { .addr = b, .len = len, .mr = mr };

	cr_assert_eq(T->post_send(ep, &sge, 0, 0), 0);
}

/* Completions of op reaped from ep now (without waiting). */
static int reap(struct oti_ep *ep, enum oti_wc_op op)
{
	struct oti_wc wc[16];
	int got = 0, n;

	while ((n = T->poll_cq(ep, wc, 16)) > 0)
		for (int i = 0; i < n; i++) {
			cr_assert_eq(wc[i].status, 0);
			got += wc[i].op == op;
		}
	return got;
}

static void setup(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_storage name, peer;
	socklen_t len = sizeof(name);
	struct oti_connreq *req = NULL;
	uint8_t pdata[OTI_MAX_PRIVATE_DATA];
	size_t plen = sizeof(pdata);
	int r = -EAGAIN;

	cr_assert_eq(setenv("SDP_TRANSPORTS", "shm", 1), 0);
	cr_assert_eq(setenv("SDP_BUF_SIZE", "1040", 1), 0);
	cr_assert_eq(setenv("SDP_RECV_BUFS", "4", 1), 0);
	tun_reset();
	cr_assert_geq(oti_init(), 1);
	T = oti_find("shm");
	cr_assert_not_null(T);
	cr_assert_eq(T->listen((struct sockaddr *)&sin, sizeof(sin), 8, 0, &L), 0);
	cr_assert_eq(T->listener_name(L, (struct sockaddr *)&name, &len), 0);
	cr_assert_eq(T->ep_open((struct sockaddr *)&name, len, NULL, 0, &A), 0);
	wait_event(A, OTI_EV_RESOLVED);
	cr_assert_eq(T->connect(A, NULL, 0), 0);
	for (int i = 0; i < 100 && r == -EAGAIN; i++) {
		r = T->get_connreq(L, &req, pdata, &plen, &peer);
		if (r == -EAGAIN)
			(void)readable(T->listener_fd(L), 50);
	}
	cr_assert_eq(r, 0);
	cr_assert_eq(T->ep_accept_open(L, req, &P), 0);
	cr_assert_eq(T->mr_reg(A, buf_a, sizeof(buf_a), 0, &mr_a), 0);
	cr_assert_eq(T->mr_reg(P, buf_p, sizeof(buf_p), 0, &mr_p), 0);
	cr_assert_eq(T->accept(P, NULL, 0), 0);
	wait_event(A, OTI_EV_ESTABLISHED);
	wait_event(P, OTI_EV_ESTABLISHED);
}

static void teardown(void)
{
	T->mr_dereg(mr_a);
	T->mr_dereg(mr_p);	/* shm's regions outlive their ep (no device) */
	T->ep_close(A);
	if (P)
		T->ep_close(P);
	T->listener_close(L);
	oti_fini();
	unsetenv("SDP_BUF_SIZE");
	unsetenv("SDP_RECV_BUFS");
	tun_reset();
}

TestSuite(shm_wake, .init = setup, .fini = teardown);

/* A ping-pong with both ends asleep between messages: each message wakes
 * the end it is for, once, and taking it wakes nobody (the sender has
 * nothing waiting for room). */
Test(shm_wake, one_wake_per_message)
{
	for (int i = 0; i < 4; i++) {
		post_recv(A, mr_a, buf_a[i], (uint64_t)i);
		post_recv(P, mr_p, buf_p[i], (uint64_t)i);
	}
	for (int round = 0; round < 3; round++) {
		cr_assert_eq(T->ep_arm(A), 0);
		cr_assert_eq(T->ep_arm(P), 0);
		cr_assert(!readable_ep(A) && !readable_ep(P), "round %d: armed ends readable", round);

		post_send(A, mr_a, buf_a[8], 64);
		cr_assert_eq(reap(A, OTI_WC_SEND), 1);
		cr_assert(readable_ep(P), "round %d: the message did not wake its receiver", round);
		cr_assert_eq(reap(P, OTI_WC_RECV), 1);
		post_recv(P, mr_p, buf_p[round + 4], 0);
		cr_assert(!readable_ep(A),
			  "round %d: taking a message woke its sender, which waited for no room",
			  round);

		cr_assert_eq(T->ep_arm(P), 0);
		post_send(P, mr_p, buf_p[8], 64);
		cr_assert_eq(reap(P, OTI_WC_SEND), 1);
		cr_assert(readable_ep(A), "round %d: the answer did not wake its receiver", round);
		cr_assert_eq(reap(A, OTI_WC_RECV), 1);
		post_recv(A, mr_a, buf_a[round + 4], 0);
		cr_assert(!readable_ep(P), "round %d: taking the answer woke its sender", round);
	}
}

/* A send that waits for room in the ring is woken when the peer takes a
 * record out (the no-lost-wakeup rule for the room). */
Test(shm_wake, room_wakes_a_queued_send)
{
	int sent = 0, done = 0;

	/* P posts nothing: records stay in the ring until a send waits. */
	while (sent < NBUF) {
		post_send(A, mr_a, buf_a[0], MSG);
		sent++;
		done += reap(A, OTI_WC_SEND);
		if (done < sent)
			break;
	}
	cr_assert_lt(done, sent, "the ring never filled (%d sends)", sent);
	cr_assert_eq(T->ep_arm(A), 0);
	cr_assert(!readable_ep(A));
	post_recv(P, mr_p, buf_p[0], 0);
	cr_assert_eq(reap(P, OTI_WC_RECV), 1);
	cr_assert(readable_ep(A), "room was made and the waiting send was not woken");
	cr_assert_eq(reap(A, OTI_WC_SEND), sent - done);
}

/* The peer's end sends no wake byte: an end armed again and again (its
 * fd readable at EOF each time, as a sleeper loops) still sees it, and
 * the fd is quiet afterwards (a sleep is a sleep again). */
Test(shm_wake, the_peers_end_is_seen_by_an_armed_end)
{
	struct oti_event ev;
	int arms = 0, r = -EAGAIN, armed;

	post_recv(A, mr_a, buf_a[0], 0);
	armed = T->ep_arm(A);
	cr_assert_eq(armed, 0);
	T->ep_close(P);
	P = NULL;
	while (arms < 100) {
		/* As the engine: it sleeps only when the arm said it may. */
		if (armed == 0)
			cr_assert(readable(T->ep_fd(A), 1000),
				  "the peer's end did not wake the armed end");
		struct oti_wc wc[4];

		while (T->poll_cq(A, wc, 4) > 0)
			;	/* the receive, flushed once the end is seen */
		r = T->get_event(A, &ev);
		if (r == 0)
			break;
		cr_assert_eq(r, -EAGAIN);
		armed = T->ep_arm(A);
		arms++;
	}
	cr_assert_eq(r, 0, "no event after %d arms", arms);
	cr_assert_eq(ev.type, OTI_EV_DISCONNECTED);
	/* The engine, which has taken the fd out of its epoll sets, then
	 * has the transport quiet it (conn_quiet_dead_fd()). */
	cr_assert(T->ep_fd_dead(A), "the socket at the peer's end is not said dead");
	T->ep_quiet(A);
	cr_assert(!T->ep_fd_dead(A), "the fd is still dead once quiet");
	cr_assert(!readable_ep(A), "the fd stays readable once the end is reported");
}

/* A waiter that polls the rings (ep_poll(), as recv's spin does) is sent
 * no wake byte: it sees what comes by looking, drives it without raising
 * its word, and only when it stops polling (ep_poll_end(), or an arm
 * before a sleep) does its fd wake it again; what came while it polled
 * is reported by ep_poll_end(), for the caller to drive. */
Test(shm_wake, a_polling_end_is_sent_no_byte)
{
	for (int i = 0; i < 8; i++)
		post_recv(P, mr_p, buf_p[i], (uint64_t)i);
	cr_assert_eq(reap(P, OTI_WC_RECV), 0);	/* a drive: P's word is up */
	cr_assert_not_null(T->ep_poll);
	cr_assert(!T->ep_poll(P), "nothing came yet");

	post_send(A, mr_a, buf_a[8], 64);
	cr_assert_eq(reap(A, OTI_WC_SEND), 1);
	cr_assert(!readable_ep(P), "a message to a polling end sent it a wake byte");
	cr_assert(T->ep_poll(P), "the polling end does not see the message");
	cr_assert_eq(reap(P, OTI_WC_RECV), 1);

	/* Its drive left the word down: the next message costs no byte. */
	post_send(A, mr_a, buf_a[8], 64);
	cr_assert_eq(reap(A, OTI_WC_SEND), 1);
	cr_assert(!readable_ep(P), "a drive of the polling end raised its word");
	cr_assert(T->ep_poll_end(P), "the message that came while it polled is not reported");
	cr_assert_eq(reap(P, OTI_WC_RECV), 1);
	cr_assert(!T->ep_poll_end(P), "polling ended twice");

	/* Polling over: its fd wakes it again. */
	post_send(A, mr_a, buf_a[8], 64);
	cr_assert_eq(reap(A, OTI_WC_SEND), 1);
	cr_assert(readable_ep(P), "an end that stopped polling was not woken");
	cr_assert_eq(reap(P, OTI_WC_RECV), 1);

	/* An arm ends polling as well, before a sleep. */
	cr_assert(!T->ep_poll(P));
	cr_assert_eq(T->ep_arm(P), 0);
	post_send(A, mr_a, buf_a[8], 64);
	cr_assert_eq(reap(A, OTI_WC_SEND), 1);
	cr_assert(readable_ep(P), "an end armed after polling was not woken");
	cr_assert_eq(reap(P, OTI_WC_RECV), 1);
}
