/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Tunables: typed settings with a default and help text, declared once in
 * tunables.def.  Values come from, in rising priority: the default, the
 * configuration file (tun_set), and the environment (SDP_<NAME>).
 */
#ifndef SDP_COMMON_TUNABLES_H
#define SDP_COMMON_TUNABLES_H

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

/* Print every tunable: name, environment variable, current value, default,
 * help. */
void tun_list(FILE *out);

/* Forget values set by tun_set() and re-read the environment (tests). */
void tun_reset(void);

#endif
