/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Inside conf/: the policy's layout, shared by the parser (which builds
 * it) and the matcher (which reads it), and the glob matcher, which the
 * unit tests also call directly.
 */
#ifndef SDP_CONF_CONF_IMPL_H
#define SDP_CONF_CONF_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

struct conf_rule {
	/* NULL for "*", which every program matches without a glob walk. */
	char *program;
	uint8_t use;		/* enum conf_use */
	uint8_t family;		/* 0 (any address), AF_INET or AF_INET6 */
	uint8_t prefix;		/* bits of addr that must match */
	uint8_t addr[16];	/* network order, bits past prefix zeroed */
	uint16_t port_lo;	/* inclusive, host order */
	uint16_t port_hi;
	unsigned int line;	/* for diagnostics */
};

struct conf_setting {
	char *name;
	char *value;
};

#define CONF_ROLES 2
/* "shm,ib,iwarp,tcp-fallback" and its terminator, with room to spare. */
#define CONF_TRANSPORTS_MAX 64

struct conf_policy {
	/* The safe policy: every socket TCP, nothing applied. */
	bool safe;
	struct conf_rule *rules[CONF_ROLES];
	size_t nrules[CONF_ROLES];
	struct conf_setting *settings;
	size_t nsettings;
	int log_level;
	enum conf_log_dest log_dest;
	char *log_path;
	char transports[CONF_TRANSPORTS_MAX];
};

/*
 * fnmatch(pattern, s, 0) in the C locale, byte by byte, without
 * allocating: glibc's fnmatch goes through wide characters, and may call
 * malloc, in a multibyte locale, and the application picks the locale.
 * pattern must have passed conf_glob_check.
 */
bool conf_glob_match(const char *pattern, const char *s);

/*
 * 0 if pattern is a glob conf_glob_match handles; otherwise -EINVAL with
 * *bad set to the offset of the offending character and *why to a static
 * explanation.  Refused where fnmatch's answer would be surprising or an
 * error: an unterminated '[', a trailing '\', an unknown [:class:], and
 * the collating forms [.x.] and [=x=].
 */
int conf_glob_check(const char *pattern, size_t *bad, const char **why);

#endif
