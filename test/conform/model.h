/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What a TCP connection should look like once everything in flight has
 * landed: bytes each way, FINs and resets, by the rules of Linux TCP.
 * The runner (exec.c) feeds it what the calls really did and waits for
 * the sockets to reach the state it predicts before every step (settle),
 * so that no observation depends on how fast a stack moves bytes.  The
 * generator (gen.c) feeds it what the calls would do, to make sequences
 * that never block for ever.
 */
#ifndef CONFORM_MODEL_H
#define CONFORM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

struct mep {
	struct mep *peer;	/* the other end of the connection, once known */
	uint64_t tx, rx;	/* bytes sent (accepted by a send call) and consumed */
	bool open;		/* a descriptor still names it */
	bool shut_rd, shut_wr;	/* shutdown() this end has done (close: both) */
	bool linger0;		/* SO_LINGER {1, 0}: close resets */
	bool fin_in;		/* the peer's FIN is due here */
	bool rst_in;		/* a reset is due here (POLLHUP) */
	bool rst_new;		/* ... and not yet seen by a settle: its error is pending */
	bool dead;		/* the connection was reset */
	bool backlog;		/* the way here is full: part of what the peer sent waits there */
};

/* Bytes the peer sent that this end has not consumed. */
static inline uint64_t m_pending(const struct mep *e)
{
	return e->peer ? e->peer->tx - e->rx : 0;
}

/* N bytes were accepted by a send call on E. */
void m_send(struct mep *e, uint64_t n);
/* N bytes were consumed (read or discarded) on E. */
void m_recv(struct mep *e, uint64_t n);
/* shutdown(SHUT_RD = 0, SHUT_WR = 1, SHUT_RDWR = 2). */
void m_shutdown(struct mep *e, int how);
/* The last descriptor naming E was closed. */
void m_close(struct mep *e);
/* A connection that never reached accept() was reset (its listener closed). */
void m_reset(struct mep *e);

#endif
