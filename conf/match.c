/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Reading a policy: rule matching and the other queries.  This runs on
 * every listen() and connect() of a preloaded program, so it only
 * compares what the parser prepared: no allocation, no locale, no errno.
 */
#include "conf_impl.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

/* --- globs --------------------------------------------------------------- */

static bool conf_glob_class(const unsigned char *name, size_t len, int c,
			    bool *known)
{
	/* The C locale's classes: the application's locale must not change
	 * what a policy file means. */
	bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
	bool digit = c >= '0' && c <= '9';
	bool alpha = upper || lower, alnum = alpha || digit;
	bool graph = c > 0x20 && c < 0x7f;
	static const struct {
		const char *name;
		int idx;
	} classes[] = {
		{ "alnum", 0 }, { "alpha", 1 }, { "blank", 2 }, { "cntrl", 3 },
		{ "digit", 4 }, { "graph", 5 }, { "lower", 6 }, { "print", 7 },
		{ "punct", 8 }, { "space", 9 }, { "upper", 10 }, { "xdigit", 11 },
	};

	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
		if (strlen(classes[i].name) != len || memcmp(classes[i].name, name, len))
			continue;
		*known = true;
		switch (classes[i].idx) {
		case 0: return alnum;
		case 1: return alpha;
		case 2: return c == ' ' || c == '\t';
		case 3: return (c >= 0 && c < 0x20) || c == 0x7f;
		case 4: return digit;
		case 5: return graph;
		case 6: return lower;
		case 7: return graph || c == ' ';
		case 8: return graph && !alnum;
		case 9: return c == ' ' || (c >= '\t' && c <= '\r');
		case 10: return upper;
		default: return digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
		}
	}
	*known = false;
	return false;
}

/*
 * One bracket expression, p just after its '['.  c is the byte to test,
 * or -1 to only check the syntax.  Returns 1 (c is in the set), 0 (it is
 * not) or -EINVAL (malformed, *bad and *why say where and why); *end is
 * set past the closing ']'.  The check and the match share this walk so
 * that a pattern that passed the check cannot send the match past its
 * end.  The rules are glibc's fnmatch in the C locale: '!' or '^' first
 * negates, a ']' first is literal, '\' quotes, a '-' between two
 * characters is a range unless it is last.
 */
static int conf_glob_bracket(const unsigned char *start, const unsigned char *p,
			     int c, const unsigned char **end, size_t *bad,
			     const char **why)
{
	const unsigned char *open = p - 1;
	bool neg = false, hit = false, first = true;

	if (*p == '!' || *p == '^') {
		neg = true;
		p++;
	}
	for (;;) {
		unsigned char lo, hi;

		if (*p == '\0')
			goto unterminated;
		if (*p == ']' && !first) {
			p++;
			break;
		}
		first = false;
		if (p[0] == '[' && (p[1] == '.' || p[1] == '=')) {
			*bad = (size_t)(p - start);
			*why = "collating elements [. .] and [= =] are not supported";
			return -EINVAL;
		}
		if (p[0] == '[' && p[1] == ':') {
			const unsigned char *name = p + 2, *q = name;
			bool known;

			while (*q && !(q[0] == ':' && q[1] == ']'))
				q++;
			if (*q == '\0')
				goto unterminated;
			if (conf_glob_class(name, (size_t)(q - name), c, &known))
				hit = true;
			if (!known) {
				*bad = (size_t)(p - start);
				*why = "unknown character class (alnum, alpha, blank, cntrl, digit, graph, lower, print, punct, space, upper, xdigit)";
				return -EINVAL;
			}
			p = q + 2;
			continue;
		}
		lo = *p++;
		if (lo == '\\') {
			lo = *p++;
			if (lo == '\0')
				goto unterminated;
		}
		if (p[0] == '-' && p[1] != ']' && p[1] != '\0') {
			p++;
			hi = *p++;
			if (hi == '\\') {
				hi = *p++;
				if (hi == '\0')
					goto unterminated;
			}
			if (hi == '[' && (*p == '.' || *p == '=')) {
				*bad = (size_t)(p - 1 - start);
				*why = "collating elements [. .] and [= =] are not supported";
				return -EINVAL;
			}
			if (c >= lo && c <= hi)
				hit = true;
		} else if (c == lo) {
			hit = true;
		}
	}
	*end = p;
	return hit != neg;

unterminated:
	*bad = (size_t)(open - start);
	*why = "unterminated '[' (write \\[ for a literal bracket)";
	return -EINVAL;
}

int conf_glob_check(const char *pattern, size_t *bad, const char **why)
{
	const unsigned char *start = (const unsigned char *)pattern, *p = start;
	const unsigned char *end;
	int ret;

	while (*p) {
		switch (*p) {
		case '\\':
			if (p[1] == '\0') {
				*bad = (size_t)(p - start);
				*why = "a trailing '\\' quotes nothing";
				return -EINVAL;
			}
			p += 2;
			break;
		case '[':
			ret = conf_glob_bracket(start, p + 1, -1, &end, bad, why);
			if (ret < 0)
				return ret;
			p = end;
			break;
		default:
			p++;
		}
	}
	return 0;
}

bool conf_glob_match(const char *pattern, const char *s)
{
	const unsigned char *p = (const unsigned char *)pattern;
	const unsigned char *n = (const unsigned char *)s;
	/* Only the last '*' needs to be retried: every other element takes
	 * exactly one byte, so the classic one-backtrack-point walk is exact
	 * and linear in practice. */
	const unsigned char *star_p = NULL, *star_n = NULL;
	const unsigned char *next = NULL;
	size_t bad;
	const char *why;

	for (;;) {
		bool ok = false;

		if (*p == '*') {
			while (*p == '*')
				p++;
			if (*p == '\0')
				return true;
			star_p = p;
			star_n = n;
			continue;
		}
		if (*n == '\0') {
			if (*p == '\0')
				return true;
		} else {
			switch (*p) {
			case '\0':
				break;
			case '?':
				ok = true;
				next = p + 1;
				break;
			case '[':
				ok = conf_glob_bracket(p, p + 1, *n, &next, &bad, &why) == 1;
				break;
			case '\\':
				ok = p[1] == *n;
				next = p + 2;
				break;
			default:
				ok = *p == *n;
				next = p + 1;
			}
			if (ok) {
				p = next;
				n++;
				continue;
			}
		}
		if (!star_p || *star_n == '\0')
			return false;
		p = star_p;
		n = ++star_n;
	}
}

/* --- rules --------------------------------------------------------------- */

/* The address being matched, in the rules' form. */
struct conf_key {
	uint8_t family;
	uint8_t addr[16];
	/* An IPv4-mapped IPv6 address also as IPv4 (family2 AF_INET). */
	uint8_t family2;
	uint8_t addr2[4];
	uint16_t port;
};

static bool conf_key_from(struct conf_key *k, const struct sockaddr *sa, socklen_t len)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return false;
	k->family2 = 0;
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		k->family = AF_INET;
		memcpy(k->addr, &sin->sin_addr, 4);
		k->port = ntohs(sin->sin_port);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		k->family = AF_INET6;
		memcpy(k->addr, &sin6->sin6_addr, 16);
		k->port = ntohs(sin6->sin6_port);
		if (!memcmp(k->addr, v4mapped, sizeof(v4mapped))) {
			k->family2 = AF_INET;
			memcpy(k->addr2, k->addr + 12, 4);
		}
		return true;
	}
	return false;
}

static bool conf_prefix_eq(const uint8_t *net, const uint8_t *addr, unsigned int bits)
{
	unsigned int bytes = bits / 8, rest = bits % 8;

	if (memcmp(net, addr, bytes))
		return false;
	if (!rest)
		return true;
	uint8_t mask = (uint8_t)(0xff00 >> rest);
	return (addr[bytes] & mask) == net[bytes];
}

static bool conf_rule_addr(const struct conf_rule *r, const struct conf_key *k)
{
	if (r->family == 0)
		return true;
	if (r->family == k->family && conf_prefix_eq(r->addr, k->addr, r->prefix))
		return true;
	return k->family2 && r->family == k->family2 &&
	       conf_prefix_eq(r->addr, k->addr2, r->prefix);
}

static bool conf_rule_program(const struct conf_rule *r, const char *program)
{
	return !r->program || conf_glob_match(r->program, program);
}

static bool conf_role_ok(enum conf_role role)
{
	return (unsigned int)role < CONF_ROLES;
}

enum conf_use conf_match(const struct conf_policy *p, enum conf_role role,
			 const char *program, const struct sockaddr *addr,
			 socklen_t addrlen)
{
	struct conf_key k;

	if (!p || p->safe || !conf_role_ok(role) || !conf_key_from(&k, addr, addrlen))
		return CONF_USE_TCP;
	if (!program)
		program = "";
	for (size_t i = 0; i < p->nrules[role]; i++) {
		const struct conf_rule *r = &p->rules[role][i];

		if (k.port < r->port_lo || k.port > r->port_hi)
			continue;
		if (!conf_rule_addr(r, &k) || !conf_rule_program(r, program))
			continue;
		return (enum conf_use)r->use;
	}
	/* OFED's documented default for an unmatched socket, and also ours
	 * for a file without rules: both falls back to TCP, so a host
	 * without SDP loses nothing. */
	return CONF_USE_BOTH;
}

bool conf_may_use_sdp(const struct conf_policy *p, enum conf_role role,
		      const char *program)
{
	if (!p || p->safe || !conf_role_ok(role))
		return false;
	if (!program)
		program = "";
	for (size_t i = 0; i < p->nrules[role]; i++) {
		const struct conf_rule *r = &p->rules[role][i];

		if (!conf_rule_program(r, program))
			continue;
		if (r->use != CONF_USE_TCP)
			return true;
		/* A tcp rule for every address and port hides all below. */
		if (r->family == 0 && r->port_lo == 0 && r->port_hi == 65535)
			return false;
	}
	return true;
}

/* --- the rest ------------------------------------------------------------ */

int conf_log_min_level(const struct conf_policy *p)
{
	return p ? p->log_level : 0;
}

enum conf_log_dest conf_log_destination(const struct conf_policy *p,
					const char **path)
{
	enum conf_log_dest d = p ? p->log_dest : CONF_LOG_DEST_UNSET;

	if (path)
		*path = d == CONF_LOG_DEST_FILE ? p->log_path : NULL;
	return d;
}

const char *conf_transports(const struct conf_policy *p)
{
	return p ? p->transports : "shm,ib,iwarp";
}
