/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What the two example pairs of DAPL programs share (dat_pair.c, the
 * provider end to end; ssp_pair.c, the Socket Service Points): one
 * side's DAT objects, made from a table of what it wants (struct
 * pair_setup), message slots for sends and receives, checked waits, and
 * the way a side fails.  Plain DAPL: <dat2/udat.h> and -ldat2 only.
 *
 * Every DAT call's result is checked (pair_ck); the first failure prints
 * one line, "<prog>: <role> FAIL <why>", and exits 1.
 */
#ifndef TEST_DAT_PAIR_H
#define TEST_DAT_PAIR_H

#include <dat2/udat.h>
#include <stddef.h>
#include <stdint.h>

#define PAIR_TMO (30u * 1000 * 1000)	/* every dat_evd_wait: 30 s, in microseconds */

extern const char *pair_prog;	/* "dat_pair", "ssp_pair" */
extern const char *pair_role;	/* "server", "client" */
extern int pair_checks;		/* checks passed so far */

void pair_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* rc must be DAT_SUCCESS; dat_strerror names it otherwise. */
void pair_ck(DAT_RETURN rc, const char *what);
/* rc must be of type `type` (DAT_GET_TYPE); counts a check. */
void pair_want_type(DAT_RETURN rc, DAT_RETURN type, const char *what);
uint64_t pair_fnv(const void *p, size_t n);
/* A seeded pattern (xorshift, eight bytes at a time), any length. */
void pair_fill(void *p, size_t n, uint64_t seed);
/* The next event on evd within PAIR_TMO: it must be `want`, and a DTO
 * completion must have succeeded. */
DAT_EVENT pair_wait(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, const char *what);

/* What one side wants made. */
struct pair_setup {
	const char *ia_name;
	int cr_evd;			/* a CR EVD (the server's) */
	DAT_COUNT conn_qlen, req_qlen, rcv_qlen, cr_qlen;
	DAT_EP_ATTR ep_attr;
	int nrecv;			/* receive slots, all posted */
	size_t slot;			/* bytes of one message slot */
	DAT_MEM_PRIV_FLAGS data_priv;	/* the data buffer's LMR */
	size_t size;			/* the data buffer's bytes */
};

/* One side's objects. */
struct pair_side {
	DAT_IA_HANDLE ia;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pattr;
	DAT_EVD_HANDLE async_evd, cr_evd, conn_evd;
	DAT_EVD_HANDLE req_evd;		/* completions of sends and RDMA */
	DAT_EVD_HANDLE rcv_evd;		/* completions of receives */
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	/* message slots: nrecv receives, then one send; slot bytes each */
	unsigned char *msgs;
	size_t slot;
	int nrecv;
	DAT_LMR_HANDLE msg_lmr;
	DAT_LMR_CONTEXT msg_lctx;
	unsigned char *data;		/* the RDMA buffer, zeroed */
	size_t size;
	DAT_LMR_HANDLE data_lmr;
	DAT_LMR_CONTEXT data_lctx;
	DAT_RMR_CONTEXT data_rctx;
};

/*
 * The IA (it must have the iWARP extension's Socket Service Points: the
 * provider says so in its attributes), a PZ, the EVDs (receives and
 * requests on EVDs of their own: a receive may complete while a send's
 * completion is awaited), the EP, the two LMRs, and every receive slot
 * posted (receives may be posted before the EP is connected).
 */
void pair_open(struct pair_side *s, const struct pair_setup *cfg);
/* Frees all of it, the IA last (a graceful close: nothing may be left). */
void pair_close(struct pair_side *s);

/* Receive slot i posted (again). */
void pair_post_recv(struct pair_side *s, int i);
/* Send len bytes of msg from the send slot and wait for the completion,
 * which must name the EP, the cookie and the length. */
void pair_send(struct pair_side *s, const void *msg, size_t len);
/*
 * pair_send in two halves, for a message whose peer answers it and then
 * disconnects at once: the send is posted, the answer awaited, and only
 * then the send's completion, which may be flushed (flushed_ok; 1 is
 * returned then).  The answer proves the message arrived; RC gives no
 * order between the transport's acknowledgement of a send and the peer's
 * disconnect request, which travels apart (the CM's own QP), so the
 * disconnect that flushes this side's queue may overtake it (seen on
 * rxe under load).
 */
void pair_post_send(struct pair_side *s, const void *msg, size_t len);
int pair_send_done(struct pair_side *s, size_t len, int flushed_ok);
/* The next receive's bytes into out (at most s->slot), their number
 * returned; at least min_len must have come.  The slot is posted again
 * unless this is the connection's last message (a receive posted on an
 * EP the peer has disconnected is DAT_INVALID_STATE). */
size_t pair_recv(struct pair_side *s, void *out, size_t min_len, int repost);
/* Receives flushed by a reset or a disconnect, taken off the EVD. */
void pair_drop_flushed(struct pair_side *s);

#endif
