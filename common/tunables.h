/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Tunables: typed settings with a default and help text, declared once in
 * tunables.def.  Values come from, in rising priority: the default, the
 * configuration file (tun_set), and the environment (SDP_<NAME>).
 *
 * The environment is not trusted in a secure-execution process (AT_SECURE:
 * set-user-ID, set-group-ID, file capabilities; libsdp may be in
 * /etc/ld.so.preload): there no variable of libsdp's is read at all, and
 * tun_report_env() says once which were ignored.  A malformed value is
 * ignored too (the default or sdp.conf's value stays) and reported once.
 */
#ifndef SDP_COMMON_TUNABLES_H
#define SDP_COMMON_TUNABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum tun_id {
#define TUNABLE(id, type, def, min, max, help) TUN_##id,
#include "tunables.def"
#undef TUNABLE
	TUN_COUNT
};

/* Current value; the environment is read on first use. */
long tun_int(enum tun_id id);
const char *tun_str(enum tun_id id);

/*
 * Set by name, as a config file would ("log_level", "12").  The
 * environment still wins.  Returns 0, -ENOENT (no such tunable) or
 * -EINVAL (not a number, out of range) and leaves the value unchanged.
 */
int tun_set(const char *name, const char *value);

/* What a tunable takes, for a caller's messages. */
struct tun_limits {
	bool is_int;
	long min, max;		/* an integer's range */
	size_t max_len;		/* a string's longest value, in bytes */
};

/*
 * Would tun_set(name, value) take value?  0, -ENOENT or -EINVAL, as
 * tun_set() would say, but nothing is set (sdp.conf's parser checks its
 * "set" statements with it).  When name exists and limits is not NULL,
 * *limits says what it takes.
 */
int tun_check(const char *name, const char *value, struct tun_limits *limits);

/* Print every tunable: name, environment variable, current value, default,
 * help. */
void tun_list(FILE *out);

/* Forget values set by tun_set() and re-read the environment (tests). */
void tun_reset(void);
/* tun_reset() as a process that runs in secure execution (1) or not (0)
 * would; -1 asks the kernel again (tests). */
void tun_reset_as(int secure);

/*
 * Another variable of libsdp's own (LIBSDP_CONFIG_FILE): getenv(), except
 * in secure execution, where it is NULL and the name (a string that lives
 * for ever) is noted for tun_report_env().
 */
const char *tun_getenv(const char *name);

/*
 * Log, at error level and once, each SDP_<NAME> whose value was refused
 * (the value, the range, what applies instead) and, in secure execution,
 * the names of the variables ignored.  sdp_log_init() calls it, when the
 * values from sdp.conf are in place too.
 */
void tun_report_env(void);

#endif
