/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The policy file (sdp.conf, see sdp.conf(5)): which stack carries a
 * stream socket, what the logger does, tunables and transports.
 *
 * A policy is built once (conf_load_file or conf_load_string) and is
 * immutable afterwards: any number of threads may call the query
 * functions on it at the same time without locking.  Swapping one policy
 * for another while other threads use it is the caller's business.
 *
 * Nothing here prints, logs, exits or touches the tunables except
 * conf_apply_tunables: errors come back as text for the caller to log.
 * errno is preserved by every function.
 */
#ifndef SDP_CONF_CONF_H
#define SDP_CONF_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Which stack a socket uses.  Zero is never a valid value. */
enum conf_use {
	CONF_USE_TCP = 1,	/* the kernel's TCP only */
	CONF_USE_SDP,		/* SDP only, no fallback */
	CONF_USE_BOTH,		/* server: listen on both; client: SDP, then TCP */
};

/* Which rule list applies: server rules at listen(), client rules at
 * connect(). */
enum conf_role {
	CONF_ROLE_SERVER,
	CONF_ROLE_CLIENT,
};

enum conf_log_dest {
	CONF_LOG_DEST_UNSET = 0,	/* the file does not say */
	CONF_LOG_DEST_STDERR,
	CONF_LOG_DEST_SYSLOG,
	CONF_LOG_DEST_FILE,
};

/* Longest line accepted in a policy file, in bytes, without its line end. */
#define CONF_LINE_MAX 4096
/* Largest policy file read, in bytes. */
#define CONF_FILE_MAX (1024 * 1024)

struct conf_policy;

/*
 * Parse the file at path.  *out is always set, also on error: to the
 * file's policy on success, or to the safe policy (every socket native
 * TCP, nothing from the file applied) on any error.  Returns 0, or
 * -EINVAL (the text is malformed), -ENOENT, -EACCES, -EISDIR, -EIO, ...
 * (the file cannot be read; a FIFO, socket or block device is -EINVAL),
 * -EFBIG (larger than CONF_FILE_MAX) or -ENOMEM.  On error errbuf (if
 * errlen > 0) receives one line without a newline, starting with
 * "path:" and, for a malformed text, "path:line:column:", saying what
 * was expected; on success it is the empty string.  A character device
 * is read like a file, so /dev/null gives the empty policy.
 */
int conf_load_file(const char *path, struct conf_policy **out, char *errbuf,
		   size_t errlen);

/*
 * Same from a NUL-terminated text; name is used in error messages only
 * (NULL means "<string>").  A NULL text is -EINVAL.
 */
int conf_load_string(const char *name, const char *text, struct conf_policy **out,
		     char *errbuf, size_t errlen);

/* Free a policy from conf_load_*.  NULL and the safe policy are accepted
 * (the safe policy is static and is not freed). */
void conf_free(struct conf_policy *p);

/*
 * The stack for a socket of this program (its short name, as in
 * program_invocation_short_name; NULL is taken as "") in this role, for
 * addr: the local bound address at listen() for CONF_ROLE_SERVER, the
 * remote address at connect() for CONF_ROLE_CLIENT, port included.  The
 * first rule of the role's list that matches wins; no match gives
 * CONF_USE_BOTH, and the safe policy gives CONF_USE_TCP.  An address
 * that is not AF_INET or AF_INET6, or shorter than its family's sockaddr
 * (addrlen), gives CONF_USE_TCP: no offload for what is not IP.  An
 * IPv4-mapped IPv6 address (::ffff:a.b.c.d) matches IPv4 rules for
 * a.b.c.d as well as IPv6 rules.  Never allocates, never blocks.
 */
enum conf_use conf_match(const struct conf_policy *p, enum conf_role role,
			 const char *program, const struct sockaddr *addr,
			 socklen_t addrlen);

/*
 * false when no socket of this program in this role can ever be given
 * SDP or both by conf_match (its rules are all tcp up to one that covers
 * every address and port, or p is the safe policy), so that the switch
 * can leave such a program alone; true otherwise, conservatively.
 */
bool conf_may_use_sdp(const struct conf_policy *p, enum conf_role role,
		      const char *program);

/* The file's last "log min-level", 1..9, or 0 when it has none. */
int conf_log_min_level(const struct conf_policy *p);

/*
 * The file's last "log destination".  For CONF_LOG_DEST_FILE, *path (if
 * path is not NULL) is set to the absolute file name, valid as long as
 * the policy; otherwise to NULL.
 */
enum conf_log_dest conf_log_destination(const struct conf_policy *p,
					const char **path);

/*
 * The enabled transports, comma-separated in priority order, in the
 * syntax of the "transports" tunable: "shm,ib,iwarp" unless the file's
 * "transport" statements changed it ("shm,ib,iwarp,tcp-fallback" after
 * "transport enable tcp-fallback"; "" if all are disabled).  Valid as
 * long as the policy.
 */
const char *conf_transports(const struct conf_policy *p);

/*
 * Apply the file's tunables: tun_set("transports", conf_transports(p)),
 * then tun_set() for each "set" statement in file order.  All are
 * attempted; returns 0 or the first error of tun_set() (they were
 * checked while parsing, so an error means tunables.def changed under a
 * loaded policy).  The safe policy applies nothing.  The environment
 * still wins over these, as tun_set() documents.
 */
int conf_apply_tunables(const struct conf_policy *p);

#endif
