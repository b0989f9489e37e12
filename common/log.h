/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The one logger.  Levels follow libsdp.conf's "log min-level": a message
 * is written when its level >= the log_level tunable.  Output goes to
 * stderr or to the log_file tunable, never to stdout; errno is preserved.
 */
#ifndef SDP_COMMON_LOG_H
#define SDP_COMMON_LOG_H

enum sdp_log_level {
	SDP_LOG_DEBUG = 1,
	SDP_LOG_FUNC = 2,
	SDP_LOG_MATCH_NEG = 3,
	SDP_LOG_MATCH_POS = 4,
	SDP_LOG_CONN = 7,	/* connection summary */
	SDP_LOG_WARN = 8,
	SDP_LOG_ERR = 9,
};

/* Current threshold; cheap (one load) so that debug calls cost nothing
 * when off. */
extern int sdp_log_min_level;

void sdp_log_init(void);
void sdp_log_set_level(int level);
/* Redirect to a file (appended); NULL or "" means stderr.  Returns 0 or
 * a negative errno. */
int sdp_log_set_file(const char *path);

void sdp_log_write(int level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define sdp_log(level, subsys, ...)                                  \
	do {                                                         \
		if ((level) >= sdp_log_min_level)                    \
			sdp_log_write((level), (subsys), __VA_ARGS__); \
	} while (0)

#define sdp_err(subsys, ...) sdp_log(SDP_LOG_ERR, subsys, __VA_ARGS__)
#define sdp_warn(subsys, ...) sdp_log(SDP_LOG_WARN, subsys, __VA_ARGS__)
#define sdp_conn_log(subsys, ...) sdp_log(SDP_LOG_CONN, subsys, __VA_ARGS__)
#define sdp_dbg(subsys, ...) sdp_log(SDP_LOG_DEBUG, subsys, __VA_ARGS__)

#endif
