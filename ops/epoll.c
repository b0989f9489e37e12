/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * epoll_ctl and epoll_wait over any mix of native and SDP sockets.
 *
 * The registry of epoll sets with SDP members and what the members report
 * are epset.c's (its header comment says how the emulation works).  Here
 * are the application's calls, which sit above the switch: epoll_wait
 * settles the SDP connects in flight among the members (falling back to
 * TCP when one fails or times out) before it reports, and sleeps no
 * longer than the first of their deadlines.
 */
#include <errno.h>
#include <stdint.h>

#include "ops.h"
#include "sock.h"
#include "spin.h"
#include "sys.h"

int ops_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct ops_sock *s = ops_fd_get(fd);
	int r;

	if (!s)
		return OPS_PASS;
	if (atomic_load(&s->held))
		ops_hold_claim(fd, s);	/* interest claims it (relay.c) */
	/* A socket settled on TCP moves only by a conversion, which puts its
	 * memberships back itself (ops/convert.c): the kernel has it alone.
	 * So has a relayed socket, for good (relay.c). */
	if (s->relayed || (s->stack == OPS_STACK_TCP && !ops_fd_is_emulated_epoll(epfd))) {
		ops_sock_put(s);
		return OPS_PASS;
	}
	if (fd == epfd) {
		ops_sock_put(s);
		return -EINVAL;
	}
	if (op != EPOLL_CTL_DEL && !ev) {
		ops_sock_put(s);
		return -EFAULT;
	}
	pthread_mutex_lock(&s->lock);
	r = ops_epset_ctl(epfd, op, fd, s, ev);
	pthread_mutex_unlock(&s->lock);
	ops_sock_put(s);
	if (r == -ENOENT && op != EPOLL_CTL_ADD)
		r = OPS_PASS;	/* the kernel knows whether it is a member */
	return r;
}

/* Settle the connects in flight among ep's members; returns the first
 * deadline of those still in flight, or 0. */
static uint64_t settle_connects(struct ops_ep *ep)
{
	struct ops_sock *socks[64];
	int fds[64], n = ops_epset_connecting(ep, socks, fds, 64);
	uint64_t first = 0;

	for (int i = 0; i < n; i++) {
		ops_connect_advance(fds[i], socks[i]);
		uint64_t d = ops_connect_deadline(socks[i]);

		if (d && (!first || d < first))
			first = d;
		ops_sock_put(socks[i]);
	}
	return first;
}

int ops_epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
		    const sigset_t *sigmask)
{
	struct ops_ep *ep = ops_epset_get(epfd);

	if (!ep)
		return OPS_PASS;
	if (maxevents <= 0 || maxevents > (int)(INT32_MAX / sizeof(struct epoll_event))) {
		ops_epset_put(ep);
		return -EINVAL;
	}
	uint64_t deadline = timeout > 0 ? ops_now_ns() + (uint64_t)timeout * 1000000ull : 0;
	struct spin sp;
	unsigned seen;
	int ret;

	spin_begin(&sp);
	for (;;) {
		uint64_t cdl = settle_connects(ep);

		ret = ops_epset_report(ep, events, maxevents, &seen);
		if (ret != 0 || timeout == 0)
			break;
		/* Poll-then-block (common/spin.h): each report drives the SDP
		 * members and asks the kernel for the native ones. */
		if (spin_again(&sp)) {
			if (deadline && ops_now_ns() >= deadline)
				break;
			continue;
		}
		spin_sleeping(&sp);
		/* Sleep in the kernel on everything: native members and the
		 * doorbell. */
		int ms = -1;
		uint64_t wake = deadline;

		if (cdl && (!wake || cdl < wake))
			wake = cdl;
		if (wake) {
			uint64_t now = ops_now_ns();

			if (deadline && now >= deadline) {
				ret = 0;
				break;
			}
			uint64_t d = wake > now ? (wake - now + 999999) / 1000000 : 0;

			ms = d > INT32_MAX ? INT32_MAX : (int)d;
		}
		/* Members changed since the report (the progress thread drove
		 * one, another thread sent): they rang no doorbell. */
		if (!ops_epset_sleep(ep, seen))
			continue;
		int m = sys.epoll_pwait(epfd, events, maxevents, ms, sigmask);

		ops_epset_woken(ep);
		if (m < 0) {
			ret = -errno;
			break;
		}
		m = ops_epset_filter(ep, events, m);
		if (m > 0) {
			/* Kernel events (possibly edge-triggered) are never
			 * dropped; SDP members wait for the next call. */
			ret = m;
			break;
		}
	}
	if (timeout != 0)
		spin_end(&sp, ret > 0);
	ops_epset_put(ep);
	return ret;
}
