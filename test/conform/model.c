/* SPDX-License-Identifier: BSD-2-Clause */
/* The connection model: see model.h.  The rules are Linux TCP's
 * (net/ipv4/tcp.c tcp_close, tcp_input.c tcp_rcv_state_process). */
#include "model.h"

static void kill_conn(struct mep *e)
{
	e->dead = true;
	if (e->peer) {
		e->peer->dead = true;
		if (e->peer->open)
			e->peer->rst_in = e->peer->rst_new = true;
	}
}

void m_send(struct mep *e, uint64_t n)
{
	struct mep *p = e->peer;

	e->tx += n;
	if (n == 0 || !p || e->dead)
		return;
	/* Data for an end that will read no more and has sent its FIN (a
	 * closed socket, or one shut down both ways while the peer still
	 * sends) is answered with a reset, which both ends get. */
	if (p->shut_rd && p->shut_wr) {
		kill_conn(e);
		if (e->open)
			e->rst_in = e->rst_new = true;
	}
}

void m_recv(struct mep *e, uint64_t n)
{
	e->rx += n;
}

void m_shutdown(struct mep *e, int how)
{
	if (e->dead)
		return;
	if (how != 1)
		e->shut_rd = true;
	if (how != 0 && !e->shut_wr) {
		e->shut_wr = true;
		if (e->peer)
			e->peer->fin_in = true;
	}
}

void m_close(struct mep *e)
{
	e->open = false;
	e->rst_in = e->rst_new = false;
	if (e->dead)
		return;
	/* Unread data, or a zero linger: a reset instead of a FIN.  (A
	 * connection not accepted yet learns of either when it is.) */
	if (e->linger0 || m_pending(e) > 0) {
		kill_conn(e);
		return;
	}
	m_shutdown(e, 2);
}

void m_reset(struct mep *e)
{
	e->dead = true;
	if (e->open)
		e->rst_in = e->rst_new = true;
}
