/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Reading the live statistics files (common/stats_shm.h): what sdpstat(1)
 * is built on, and what the unit tests check the writer with.  Also the
 * two helpers the writer shares with the reader (the file's path, the
 * process start time), so that both compute them the same way.
 *
 * A file is read with pread(), not mapped: a file that its owner
 * truncates while we read it then gives a short read instead of SIGBUS.
 * Every function returns 0 or a negative errno.
 */
#ifndef SDP_COMMON_STATS_READ_H
#define SDP_COMMON_STATS_READ_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "stats_shm.h"

/* One open socket, a consistent copy of its row. */
struct sdp_stats_sock_snap {
	uint32_t row;		/* index in the file's table */
	int32_t fd;		/* -1: unknown */
	uint8_t stack;		/* enum ops_stack (may be one this build does not know) */
	uint8_t state;		/* enum ops_sock_state */
	uint8_t fallback;	/* enum ops_fallback */
	uint32_t flags;		/* SDP_STATS_ROW_* */
	char transport[SDP_STATS_TRANSPORT_LEN + 1];	/* "" when none */
	char mode[SDP_STATS_MODE_LEN + 1];
	struct sdp_stats_addr local;	/* len is 0 when there is none */
	struct sdp_stats_addr peer;
	uint64_t bytes_tx;
	uint64_t bytes_rx;
};

/* One process. */
struct sdp_stats_snap {
	pid_t pid;
	uint64_t start_time;
	char program[SDP_STATS_PROG_LEN + 1];
	uint32_t n_counters;	/* valid entries below */
	uint32_t n_fallbacks;
	uint64_t counters[SDP_STATS_MAX_COUNTERS];
	uint64_t fallbacks[SDP_STATS_MAX_FALLBACKS];
	size_t n_socks;
	struct sdp_stats_sock_snap *socks;	/* sorted by fd; malloc'd */
	/* Rows left out because a writer stayed inside them for the whole
	 * retry budget (a process stopped in the middle of an update). */
	unsigned n_busy;
};

/* The directory: $SDP_STATS_DIR, or SDP_STATS_DEFAULT_DIR when unset or
 * empty (or when the program runs set-user-ID). */
const char *sdp_stats_dir(void);

/* dir/libsdp-stats.<pid> into buf; -ENAMETOOLONG when it does not fit. */
int sdp_stats_path(const char *dir, pid_t pid, char *buf, size_t cap);

/* The pids that have a file in dir, ascending, in a malloc'd array (NULL
 * when there are none).  Only names of the exact form
 * libsdp-stats.<decimal pid> count. */
int sdp_stats_list(const char *dir, pid_t **pids, size_t *n);

/* Flags of sdp_stats_read(). */
#define SDP_STATS_REMOVE_STALE 1u	/* unlink a stale file (if allowed) */

/*
 * A snapshot of the file of pid in dir.  On success *out holds it (free
 * it with sdp_stats_snap_free()); on failure *out is empty.
 *   -ENOENT   no such file;
 *   -ESRCH    stale: the process is gone (or a zombie) or its pid now
 *             belongs to another process (start time differs);
 *             removed first with SDP_STATS_REMOVE_STALE when we may;
 *   -EAGAIN   the process is still making its file;
 *   -EPROTO   not a file this reader understands (other version, not a
 *             regular file, inconsistent sizes, another pid inside);
 *   -ENOMEM, or the errno of open/pread.
 */
int sdp_stats_read(const char *dir, pid_t pid, unsigned flags, struct sdp_stats_snap *out);
void sdp_stats_snap_free(struct sdp_stats_snap *snap);

/* From the text of /proc/<pid>/stat: the state letter (field 3) and the
 * start time (field 22).  -EINVAL when the text is not one. */
int sdp_stats_parse_proc_stat(const char *buf, size_t len, char *state, uint64_t *start_time);
/* The same, read from /proc (pid 0: this process); -ENOENT when there is
 * no such process. */
int sdp_stats_proc_start(pid_t pid, char *state, uint64_t *start_time);

/* An address as "a.b.c.d:port", "[v6]:port" ("[v6%scope]:port"), "-"
 * when there is none, "family N" for another family. */
void sdp_stats_format_addr(const struct sdp_stats_addr *a, char *buf, size_t cap);
/* The host part and port of an AF_INET or AF_INET6 address; -ENOENT when
 * there is none, -EAFNOSUPPORT for another family, -EINVAL when the
 * length is too short for the family. */
int sdp_stats_addr_host(const struct sdp_stats_addr *a, char *host, size_t cap,
			unsigned *port);

/* src for a terminal, into dst (cap bytes, terminated): control
 * characters and bytes that are not UTF-8 become '?'. */
void sdp_stats_clean_text(char *dst, size_t cap, const char *src);

/* s as a JSON string, quotes included: '"', '\\' and control characters
 * escaped, bytes that are not UTF-8 written as U+FFFD, so the output is
 * valid JSON whatever a process put in its file. */
void sdp_stats_json_string(FILE *out, const char *s);

#endif
