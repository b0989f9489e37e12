/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The live statistics file: one per process that uses libsdp, written by
 * ops/stats.c inside that process and read by sdpstat(1) through
 * common/stats_read.c.  This header is the whole contract between the two,
 * so every field has a fixed width and an asserted offset: a writer and a
 * reader built by different compilers, or from different commits with the
 * same SDP_STATS_VERSION, must agree byte for byte.
 *
 * Path: $SDP_STATS_DIR/libsdp-stats.<pid>, SDP_STATS_DIR defaulting to
 * /dev/shm.  Size: SDP_STATS_FILE_SIZE (the file is sparse: tmpfs only
 * allocates the pages of rows that were used).  Host byte order: the file
 * never leaves the machine.
 *
 * The enum values of stats_names.h (stack, state, fallback reason, counter
 * index) are stored as they are, so they are part of the format: new
 * values may be appended (the reader prints unknown ones as numbers), but
 * renumbering one needs a new SDP_STATS_VERSION.
 *
 * Concurrency.  A row is written under its seqlock: a writer moves seq from
 * even to odd with a compare-and-swap (which also excludes other writers of
 * the same row), stores, then moves it to the next even value with release
 * semantics.  A reader copies the row between two reads of seq and retries
 * when they differ or are odd.  The byte counters of a row and of the
 * header are outside any seqlock: they are only ever added to atomically
 * (and reset when a row is reused), and a reader takes each one as it is.
 * The program name has a seqlock of its own (prog_seq).  magic is stored
 * last, with release semantics, when a file is made: a reader that sees
 * another value skips the file (still being made, or not ours).
 */
#ifndef SDP_COMMON_STATS_SHM_H
#define SDP_COMMON_STATS_SHM_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "stats_names.h"

#define SDP_STATS_MAGIC UINT64_C(0x5354415453504453) /* "SDPSTATS", little-endian */
#define SDP_STATS_VERSION 2	/* 2: room for 64 counters */

#define SDP_STATS_DIR_ENV "SDP_STATS_DIR"
#define SDP_STATS_DEFAULT_DIR "/dev/shm"
#define SDP_STATS_FILE_PREFIX "libsdp-stats."

#define SDP_STATS_CAPACITY 4096		/* rows in a file */
#define SDP_STATS_PROG_LEN 64
#define SDP_STATS_MAX_COUNTERS 64	/* room for enum ops_counter to grow */
#define SDP_STATS_MAX_FALLBACKS 16	/* room for enum ops_fallback to grow */
#define SDP_STATS_TRANSPORT_LEN 16
#define SDP_STATS_MODE_LEN 8
#define SDP_STATS_ADDR_LEN 28		/* sizeof(struct sockaddr_in6) */

/* A socket address as the switch saw it, truncated to SDP_STATS_ADDR_LEN
 * bytes (AF_INET and AF_INET6 addresses fit whole). */
struct sdp_stats_addr {
	uint8_t raw[SDP_STATS_ADDR_LEN];
	uint16_t family;	/* AF_*, copied out of raw for convenience */
	uint16_t len;		/* bytes of raw that are valid; 0: no address */
};

struct sdp_stats_hdr {
	uint64_t magic;		/* SDP_STATS_MAGIC, stored last */
	uint32_t version;	/* SDP_STATS_VERSION */
	uint32_t hdr_size;	/* sizeof(struct sdp_stats_hdr): where rows start */
	uint32_t row_size;	/* sizeof(struct sdp_stats_row) */
	uint32_t capacity;	/* rows in the file */
	int32_t pid;
	uint32_t row_hwm;	/* rows [0, row_hwm) have been used at least once */
	/* Field 22 of /proc/<pid>/stat (clock ticks after boot) when the
	 * file was made; a reader compares it with the live value to tell a
	 * reused pid from the owner.  0: unknown. */
	uint64_t start_time;
	uint32_t prog_seq;	/* seqlock of program */
	uint32_t n_counters;	/* valid entries of counters (OPS_C_MAX) */
	uint32_t n_fallbacks;	/* valid entries of fallbacks (OPS_FB_MAX) */
	uint32_t reserved0;
	char program[SDP_STATS_PROG_LEN];	/* NUL-padded, maybe not terminated */
	/* enum ops_counter order.  Counted since the process started, or since
	 * it was forked: a child's file starts with zero counters (its rows
	 * are a copy of its parent's), so that summing over processes does
	 * not count an event twice. */
	uint64_t counters[SDP_STATS_MAX_COUNTERS];
	uint64_t fallbacks[SDP_STATS_MAX_FALLBACKS];	/* enum ops_fallback order */
	uint8_t reserved[8];
};

struct sdp_stats_row {
	uint32_t seq;		/* seqlock: odd while a writer is inside */
	/* From here to bytes_tx: under seq. */
	uint8_t in_use;		/* 1: the row describes an open socket */
	uint8_t stack;		/* enum ops_stack */
	uint8_t state;		/* enum ops_sock_state */
	uint8_t fallback;	/* enum ops_fallback */
	int32_t fd;
	uint32_t flags;		/* SDP_STATS_ROW_*; 0 from writers older than them */
	char transport[SDP_STATS_TRANSPORT_LEN];	/* NUL-padded, maybe not terminated */
	char mode[SDP_STATS_MODE_LEN];			/* same */
	struct sdp_stats_addr local;
	struct sdp_stats_addr peer;
	/* Atomic adds, outside the seqlock. */
	uint64_t bytes_tx;
	uint64_t bytes_rx;
	uint8_t reserved[8];
};

/* struct sdp_stats_row.flags */
#define SDP_STATS_ROW_RELAYED 1u	/* the application reaches the SDP connection
					 * through a relay (a fork happened) */

#define SDP_STATS_FILE_SIZE \
	(sizeof(struct sdp_stats_hdr) + (size_t)SDP_STATS_CAPACITY * sizeof(struct sdp_stats_row))

static_assert(sizeof(struct sdp_stats_addr) == 32, "sdp_stats_addr layout");
static_assert(offsetof(struct sdp_stats_addr, family) == 28, "sdp_stats_addr layout");
static_assert(sizeof(struct sdp_stats_hdr) == 768, "sdp_stats_hdr layout");
static_assert(offsetof(struct sdp_stats_hdr, start_time) == 32, "sdp_stats_hdr layout");
static_assert(offsetof(struct sdp_stats_hdr, program) == 56, "sdp_stats_hdr layout");
static_assert(offsetof(struct sdp_stats_hdr, counters) == 120, "sdp_stats_hdr layout");
static_assert(offsetof(struct sdp_stats_hdr, fallbacks) == 632, "sdp_stats_hdr layout");
static_assert(sizeof(struct sdp_stats_row) == 128, "sdp_stats_row layout");
static_assert(offsetof(struct sdp_stats_row, fd) == 8, "sdp_stats_row layout");
static_assert(offsetof(struct sdp_stats_row, transport) == 16, "sdp_stats_row layout");
static_assert(offsetof(struct sdp_stats_row, local) == 40, "sdp_stats_row layout");
static_assert(offsetof(struct sdp_stats_row, peer) == 72, "sdp_stats_row layout");
static_assert(offsetof(struct sdp_stats_row, bytes_tx) == 104, "sdp_stats_row layout");
static_assert(OPS_C_MAX <= SDP_STATS_MAX_COUNTERS, "counters do not fit the file");
static_assert(OPS_FB_MAX <= SDP_STATS_MAX_FALLBACKS, "fallback reasons do not fit the file");
static_assert(OPS_STACK_MAX <= 256 && OPS_ST_MAX <= 256 && OPS_FB_MAX <= 256,
	      "row enums are stored in one byte");

#endif
