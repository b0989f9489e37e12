/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Reading sdp.conf into a struct conf_policy.  The grammar is in
 * sdp.conf(5).  A hand-written parser that looks at one statement at a
 * time and at each position expects only what may stand there: OFED's
 * flex lexer recognised keywords wherever they appeared, so a program
 * called "tcp" or "1234" broke the file.
 */
#include "conf_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oti.h"
#include "sys.h"
#include "tunables.h"

/* Returned whenever a file cannot be used.  Static so that it exists
 * even when memory does not; never written. */
static struct conf_policy conf_safe = {
	.safe = true,
	.transports = "shm,ib,iwarp",
};

/* --- transports ----------------------------------------------------------- */

/* What a file enables unless it says otherwise (sdp.conf(5)): shared
 * memory, which only ever carries a connection between two libsdp
 * processes of this host and namespace and is faster than the kernel's
 * TCP there (doc/shm.md), and the RDMA transports.  conf_safe's list
 * above says the same.  The names a file
 * may use are the transport registry's (oti_name()). */
static const char *const conf_default_transports[] = { "shm", "ib", "iwarp" };
#define CONF_NDEFAULT_TRANSPORTS \
	(sizeof(conf_default_transports) / sizeof(conf_default_transports[0]))

static size_t conf_ntransports(void)
{
	size_t n = 0;

	while (oti_name((unsigned int)n))
		n++;
	return n;
}

/* The names for a message: "'ib', 'iwarp' or 'tcp-fallback'". */
static const char *conf_transport_choice(char *buf, size_t cap)
{
	size_t n = conf_ntransports(), o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s'%s'",
				      !i ? "" : i + 1 == n ? " or " : ", ", oti_name((unsigned int)i));
	return buf;
}

/* --- the parser's state ------------------------------------------------- */

struct conf_word {
	const char *s;		/* NULL at the end of the statement */
	size_t len;
	size_t col;		/* 1-based */
	bool quoted;
};

struct conf_parser {
	const char *name;
	unsigned int lineno;
	const char *line;	/* not NUL-terminated */
	size_t len;
	size_t pos;
	char *errbuf;
	size_t errlen;
	struct conf_policy *p;
	size_t cap[CONF_ROLES];
	size_t setcap;
	/* Enabled transports, in order: room for the defaults and every
	 * name the registry has. */
	const char **tr;
	size_t ntr;
	/* ADDRESS:PORT with the blanks OFED allowed around ':' and '-'
	 * removed, and the column each byte came from. */
	char spec[CONF_LINE_MAX + 1];
	size_t speccol[CONF_LINE_MAX + 1];
};

static void conf_msg(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void conf_msg(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static int conf_err(struct conf_parser *ps, size_t col, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Report at the current line and col; always -EINVAL. */
static int conf_err(struct conf_parser *ps, size_t col, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	conf_msg(ps->errbuf, ps->errlen, "%s:%u:%zu: %s", ps->name, ps->lineno, col, msg);
	return -EINVAL;
}

/*
 * s quoted for a message: at most 40 bytes shown, anything that is not
 * printable ASCII as \xNN, so that a log line stays one clean line
 * whatever the file holds.
 */
static const char *conf_show(const char *s, size_t len, char *buf, size_t cap)
{
	size_t o = 0, i;

	buf[o++] = '\'';
	for (i = 0; i < len && i < 40 && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f)
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
	}
	if (i < len && o + 5 < cap) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '\'';
	buf[o] = '\0';
	return buf;
}

#define CONF_SHOW_MAX 200

static const char *conf_got(const struct conf_word *w, char *buf, size_t cap)
{
	if (!w->s)
		return "end of line";
	return conf_show(w->s, w->len, buf, cap);
}

/* --- words ---------------------------------------------------------------- */

static bool conf_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Where the statement stops: end of line or a '#' comment. */
static bool conf_stop(const struct conf_parser *ps, size_t pos)
{
	return pos >= ps->len || ps->line[pos] == '#';
}

static void conf_skip_blanks(struct conf_parser *ps)
{
	while (ps->pos < ps->len && conf_blank(ps->line[ps->pos]))
		ps->pos++;
}

/*
 * The next word: a run of bytes up to a blank or '#', or "..." (any
 * bytes but '"', possibly none: the way to write a blank, a '#' or an
 * empty value).  At the end of the statement w->s is NULL.
 */
static int conf_next_word(struct conf_parser *ps, struct conf_word *w)
{
	size_t start;

	conf_skip_blanks(ps);
	w->col = ps->pos + 1;
	w->quoted = false;
	w->s = NULL;
	w->len = 0;
	if (conf_stop(ps, ps->pos))
		return 0;
	if (ps->line[ps->pos] == '"') {
		const char *q = memchr(ps->line + ps->pos + 1, '"', ps->len - ps->pos - 1);

		if (!q)
			return conf_err(ps, w->col, "unterminated quoted string");
		w->s = ps->line + ps->pos + 1;
		w->len = (size_t)(q - w->s);
		w->quoted = true;
		ps->pos = (size_t)(q - ps->line) + 1;
		if (ps->pos < ps->len && !conf_blank(ps->line[ps->pos]) &&
		    ps->line[ps->pos] != '#')
			return conf_err(ps, ps->pos + 1, "expected a blank after the closing '\"'");
		return 0;
	}
	start = ps->pos;
	while (!conf_stop(ps, ps->pos) && !conf_blank(ps->line[ps->pos]))
		ps->pos++;
	w->s = ps->line + start;
	w->len = ps->pos - start;
	return 0;
}

/* Keywords are never quoted: quotes make a word literal text. */
static bool conf_is(const struct conf_word *w, const char *kw)
{
	return w->s && !w->quoted && w->len == strlen(kw) && !memcmp(w->s, kw, w->len);
}

/* Nothing but blanks and a comment may follow a complete statement. */
static int conf_expect_end(struct conf_parser *ps, const char *after)
{
	struct conf_word w;
	char buf[CONF_SHOW_MAX];
	int ret = conf_next_word(ps, &w);

	if (ret)
		return ret;
	if (w.s)
		return conf_err(ps, w.col, "unexpected %s after %s",
				conf_got(&w, buf, sizeof(buf)), after);
	return 0;
}

/* Decimal digits only (no sign, no blank), saturating: *val is left
 * above any limit a caller checks when the text is long. */
static bool conf_digits(const char *s, size_t len, unsigned long *val)
{
	unsigned long v = 0;

	if (!len)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v < 10000000)
			v = v * 10 + (unsigned long)(s[i] - '0');
	}
	*val = v;
	return true;
}

/* --- use -------------------------------------------------------------------- */

/* Column of spec[i] (or just past the last byte). */
static size_t conf_spec_col(const struct conf_parser *ps, size_t n, size_t i)
{
	if (i < n)
		return ps->speccol[i];
	return n ? ps->speccol[n - 1] + 1 : ps->pos + 1;
}

static int conf_parse_ports(struct conf_parser *ps, struct conf_rule *r, size_t n,
			    size_t from)
{
	const char *s = ps->spec + from;
	size_t len = n - from, dash;
	unsigned long lo, hi;
	char buf[CONF_SHOW_MAX];

	if (len == 1 && s[0] == '*') {
		r->port_lo = 0;
		r->port_hi = 65535;
		return 0;
	}
	for (dash = 0; dash < len && s[dash] != '-'; dash++)
		;
	if (!conf_digits(s, dash, &lo))
		return conf_err(ps, conf_spec_col(ps, n, from),
				"expected a port, a port range N-M or '*' after ':', got %s",
				len ? conf_show(s, len, buf, sizeof(buf)) : "nothing");
	if (dash == len) {
		hi = lo;
	} else if (!conf_digits(s + dash + 1, len - dash - 1, &hi)) {
		return conf_err(ps, conf_spec_col(ps, n, from + dash + 1),
				"expected a port number after '-', got %s",
				dash + 1 < len ? conf_show(s + dash + 1, len - dash - 1, buf,
							   sizeof(buf)) :
						 "nothing");
	}
	if (lo > 65535)
		return conf_err(ps, conf_spec_col(ps, n, from),
				"port %s is out of range (0 to 65535)",
				conf_show(s, dash, buf, sizeof(buf)));
	if (hi > 65535)
		return conf_err(ps, conf_spec_col(ps, n, from + dash + 1),
				"port %s is out of range (0 to 65535)",
				conf_show(s + dash + 1, len - dash - 1, buf, sizeof(buf)));
	if (lo > hi)
		return conf_err(ps, conf_spec_col(ps, n, from),
				"port range %lu-%lu is reversed (the first port must not be above the second)",
				lo, hi);
	r->port_lo = (uint16_t)lo;
	r->port_hi = (uint16_t)hi;
	return 0;
}

/* The address part spec[from, to): '*', ADDR, ADDR/P, [ADDR], [ADDR]/P,
 * [ADDR/P]. */
static int conf_parse_addr(struct conf_parser *ps, struct conf_rule *r, size_t n,
			   size_t from, size_t to)
{
	const char *s = ps->spec + from;
	size_t len = to - from, alen, pfx_at = 0;
	const char *a = s;
	bool bracket = false, has_pfx = false;
	unsigned long pfx = 0;
	char buf[CONF_SHOW_MAX], text[64];
	size_t max;

	if (len == 0)
		return conf_err(ps, conf_spec_col(ps, n, from),
				"expected an address or '*' before ':PORT'");
	if (len == 1 && s[0] == '*') {
		r->family = 0;
		r->prefix = 0;
		return 0;
	}
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close)
			return conf_err(ps, conf_spec_col(ps, n, from), "unterminated '['");
		bracket = true;
		a = s + 1;
		alen = (size_t)(close - a);
		if (close + 1 < s + len) {
			size_t after_close = from + (size_t)(close - s) + 1;

			if (close[1] != '/')
				return conf_err(ps, conf_spec_col(ps, n, after_close),
						"expected '/PREFIX' or ':PORT' after ']'");
			has_pfx = true;
			pfx_at = (size_t)(close - s) + 2;
		}
	} else {
		alen = len;
	}
	const char *slash = memchr(a, '/', alen);
	if (slash) {
		if (has_pfx)
			return conf_err(ps, conf_spec_col(ps, n, from + (size_t)(slash - s)),
					"two prefix lengths");
		has_pfx = true;
		pfx_at = (size_t)(slash - s) + 1;
		/* Inside brackets the prefix ends at ']'. */
		size_t pend = bracket ? (size_t)(a + alen - s) : len;
		if (!conf_digits(slash + 1, pend - pfx_at, &pfx))
			goto bad_prefix;
		alen = (size_t)(slash - a);
	} else if (has_pfx && !conf_digits(s + pfx_at, len - pfx_at, &pfx)) {
		goto bad_prefix;
	}

	if (alen == 1 && a[0] == '*' && !bracket)
		return conf_err(ps, conf_spec_col(ps, n, from + (size_t)(a - s)),
				"'*' (any address) takes no prefix length");
	if (alen == 0 || alen >= sizeof(text))
		goto bad_addr;
	memcpy(text, a, alen);
	text[alen] = '\0';
	if (memchr(text, ':', alen)) {
		r->family = AF_INET6;
		if (inet_pton(AF_INET6, text, r->addr) != 1)
			goto bad_addr;
		max = 128;
	} else {
		if (bracket)
			return conf_err(ps, conf_spec_col(ps, n, from),
					"brackets are for IPv6 addresses, got %s",
					conf_show(s, len, buf, sizeof(buf)));
		r->family = AF_INET;
		if (inet_pton(AF_INET, text, r->addr) != 1)
			goto bad_addr;
		max = 32;
	}
	if (!has_pfx)
		pfx = max;
	if (pfx > max) {
		size_t plen = 0;

		while (pfx_at + plen < len && s[pfx_at + plen] >= '0' &&
		       s[pfx_at + plen] <= '9')
			plen++;
		return conf_err(ps, conf_spec_col(ps, n, from + pfx_at),
				"prefix length /%.*s is too long for an %s address (at most /%zu)",
				(int)(plen > 20 ? 20 : plen), s + pfx_at,
				max == 32 ? "IPv4" : "IPv6", max);
	}
	r->prefix = (uint8_t)pfx;
	/* Host bits past the prefix are ignored, as in "10.1.2.3/8". */
	for (size_t bit = pfx; bit < max; bit++)
		r->addr[bit / 8] &= (uint8_t)~(0x80u >> (bit % 8));
	return 0;

bad_prefix:
	return conf_err(ps, conf_spec_col(ps, n, from + pfx_at),
			"expected a prefix length (decimal digits) after '/'");
bad_addr:
	/* "::1" alone reads as address ":" and port 1: say so. */
	if (!bracket && n < sizeof(text)) {
		uint8_t tmp[16];

		memcpy(text, ps->spec, n);
		text[n] = '\0';
		if (inet_pton(AF_INET6, text, tmp) == 1)
			return conf_err(ps, conf_spec_col(ps, n, 0),
					"%s has no port: the port follows the last ':' (write [%s]:PORT or %s:*)",
					conf_show(ps->spec, n, buf, sizeof(buf)), text, text);
	}
	return conf_err(ps, conf_spec_col(ps, n, from + (size_t)(a - s)),
			"%s is not an IPv4 or IPv6 address",
			conf_show(a, alen, buf, sizeof(buf)));
}

/*
 * ADDRESS:PORT from the current position to the end of the statement.
 * OFED's lexer skipped blanks between its tokens, so "*: *" and
 * "*:5000 - 5010" were valid there: pieces are joined where a blank
 * touches ':' or '-', and anything left over is an error.
 */
static int conf_parse_spec(struct conf_parser *ps, struct conf_rule *r, const char *after)
{
	size_t n = 0, colon, i;
	bool bracket;
	int ret;

	conf_skip_blanks(ps);
	if (conf_stop(ps, ps->pos))
		return conf_err(ps, ps->pos + 1,
				"expected ADDRESS:PORT after %s, got end of line", after);
	for (;;) {
		while (!conf_stop(ps, ps->pos) && !conf_blank(ps->line[ps->pos])) {
			ps->spec[n] = ps->line[ps->pos];
			ps->speccol[n++] = ++ps->pos;
		}
		size_t save = ps->pos;
		conf_skip_blanks(ps);
		if (conf_stop(ps, ps->pos))
			break;
		char next = ps->line[ps->pos];
		char last = ps->spec[n - 1];
		if (last != ':' && last != '-' && next != ':' && next != '-') {
			ps->pos = save;
			break;
		}
	}

	/* The port follows the last ':' (so that unbracketed IPv6 works, as
	 * in OFED), or for [v6] the first ':' after the ']'. */
	bracket = ps->spec[0] == '[';
	colon = n;
	for (i = n; i-- > 0;) {
		if (ps->spec[i] == ']' && bracket)
			break;
		if (ps->spec[i] == ':') {
			colon = i;
			if (!bracket)
				break;
		}
	}
	if (colon == n) {
		char buf[CONF_SHOW_MAX];

		return conf_err(ps, conf_spec_col(ps, n, 0),
				"expected ADDRESS:PORT (the port after the last ':'), got %s",
				conf_show(ps->spec, n, buf, sizeof(buf)));
	}
	ret = conf_parse_addr(ps, r, n, 0, colon);
	if (!ret)
		ret = conf_parse_ports(ps, r, n, colon + 1);
	if (!ret)
		ret = conf_expect_end(ps, "ADDRESS:PORT");
	return ret;
}

static int conf_add_rule(struct conf_parser *ps, enum conf_role role,
			 const struct conf_rule *r)
{
	struct conf_policy *p = ps->p;

	if (p->nrules[role] == ps->cap[role]) {
		size_t cap = ps->cap[role] ? ps->cap[role] * 2 : 16;
		struct conf_rule *nr = realloc(p->rules[role], cap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		p->rules[role] = nr;
		ps->cap[role] = cap;
	}
	p->rules[role][p->nrules[role]++] = *r;
	return 0;
}

static int conf_parse_use(struct conf_parser *ps)
{
	struct conf_rule r = { .line = ps->lineno };
	struct conf_word w;
	char buf[CONF_SHOW_MAX], after[CONF_SHOW_MAX + 32];
	const char *fam, *role_kw;
	enum conf_role role;
	int ret;

	if ((ret = conf_next_word(ps, &w)))
		return ret;
	if (conf_is(&w, "tcp"))
		r.use = CONF_USE_TCP;
	else if (conf_is(&w, "sdp"))
		r.use = CONF_USE_SDP;
	else if (conf_is(&w, "both"))
		r.use = CONF_USE_BOTH;
	else
		return conf_err(ps, w.col, "expected 'tcp', 'sdp' or 'both' after 'use', got %s",
				conf_got(&w, buf, sizeof(buf)));
	fam = r.use == CONF_USE_TCP ? "tcp" : r.use == CONF_USE_SDP ? "sdp" : "both";

	if ((ret = conf_next_word(ps, &w)))
		return ret;
	if (conf_is(&w, "server") || conf_is(&w, "listen"))
		role = CONF_ROLE_SERVER;
	else if (conf_is(&w, "client") || conf_is(&w, "connect"))
		role = CONF_ROLE_CLIENT;
	else
		return conf_err(ps, w.col,
				"expected 'server', 'listen', 'client' or 'connect' after 'use %s', got %s",
				fam, conf_got(&w, buf, sizeof(buf)));
	/* The keyword as written, for the messages below. */
	role_kw = conf_is(&w, "server") ? "server" : conf_is(&w, "listen") ? "listen" :
		  conf_is(&w, "client") ? "client" : "connect";

	/* Whatever the word is, it is the program here: "tcp", "log" and
	 * "1234" are names like any other. */
	if ((ret = conf_next_word(ps, &w)))
		return ret;
	if (!w.s)
		return conf_err(ps, w.col,
				"expected a program name or '*' after 'use %s %s', got end of line",
				fam, role_kw);
	if (!w.len)
		return conf_err(ps, w.col, "the program name is empty");
	if (!(w.len == 1 && w.s[0] == '*')) {
		size_t bad;
		const char *why;

		r.program = strndup(w.s, w.len);
		if (!r.program)
			return -ENOMEM;
		if (conf_glob_check(r.program, &bad, &why)) {
			ret = conf_err(ps, w.col + bad + w.quoted, "program pattern %s: %s",
				       conf_show(w.s, w.len, buf, sizeof(buf)), why);
			free(r.program);
			return ret;
		}
	}
	conf_show(w.s, w.len, buf, sizeof(buf));
	snprintf(after, sizeof(after), "'use %s %s %.*s'", fam, role_kw,
		 (int)strlen(buf) - 2, buf + 1);
	ret = conf_parse_spec(ps, &r, after);
	if (!ret)
		ret = conf_add_rule(ps, role, &r);
	if (ret)
		free(r.program);
	return ret;
}

/* --- log ------------------------------------------------------------------- */

/* Where OFED put a relative log file name (for root); anything else would
 * depend on the working directory of whichever program is preloaded. */
#define CONF_LOG_DIR "/var/log/"

/*
 * A relative log file name is a file in CONF_LOG_DIR itself: no '/', so
 * that it can neither climb out ("../../tmp/x") nor pass through a
 * directory below it that someone else may own and turn into a symbolic
 * link; an absolute path is taken as written, but without '..'.  The
 * file itself is never a symbolic link: the logger opens it with
 * O_NOFOLLOW.
 */
static int conf_check_log_path(struct conf_parser *ps, const struct conf_word *w)
{
	char buf[CONF_SHOW_MAX];
	size_t col = w->col + w->quoted;

	for (size_t i = 0; i < w->len; i++) {
		size_t end = i;

		while (end < w->len && w->s[end] != '/')
			end++;
		if (end - i == 2 && w->s[i] == '.' && w->s[i + 1] == '.')
			return conf_err(ps, col + i,
					"the log file name %s has a '..' component (write the path without it)",
					conf_show(w->s, w->len, buf, sizeof(buf)));
		i = end;
	}
	if (w->s[0] == '/')
		return 0;
	const char *slash = memchr(w->s, '/', w->len);

	if (slash)
		return conf_err(ps, col + (size_t)(slash - w->s),
				"the relative log file name %s has a '/': a relative name is a file in "
				CONF_LOG_DIR " itself (write an absolute path for another directory)",
				conf_show(w->s, w->len, buf, sizeof(buf)));
	if (w->len == 1 && w->s[0] == '.')
		return conf_err(ps, col, "the log file name '.' names " CONF_LOG_DIR " itself");
	return 0;
}

static int conf_parse_log(struct conf_parser *ps)
{
	struct conf_policy *p = ps->p;
	char buf[CONF_SHOW_MAX];
	struct conf_word w;
	unsigned long level;
	int ret;

	/* Options in any order, any number of times; the last one wins.  A
	 * bare "log" is valid, as it was in OFED. */
	for (;;) {
		if ((ret = conf_next_word(ps, &w)))
			return ret;
		if (!w.s)
			return 0;
		if (conf_is(&w, "min-level")) {
			if ((ret = conf_next_word(ps, &w)))
				return ret;
			if (!conf_digits(w.s, w.len, &level) || level < 1 || level > 9)
				return conf_err(ps, w.col,
						"expected a level from 1 to 9 after 'min-level', got %s",
						conf_got(&w, buf, sizeof(buf)));
			p->log_level = (int)level;
		} else if (conf_is(&w, "destination")) {
			if ((ret = conf_next_word(ps, &w)))
				return ret;
			if (conf_is(&w, "stderr")) {
				p->log_dest = CONF_LOG_DEST_STDERR;
			} else if (conf_is(&w, "syslog")) {
				p->log_dest = CONF_LOG_DEST_SYSLOG;
			} else if (conf_is(&w, "file")) {
				char *path;

				if ((ret = conf_next_word(ps, &w)))
					return ret;
				if (!w.s)
					return conf_err(ps, w.col,
							"expected a file name after 'destination file', got end of line");
				if (!w.len)
					return conf_err(ps, w.col, "the log file name is empty");
				if ((ret = conf_check_log_path(ps, &w)))
					return ret;
				if (w.s[0] == '/')
					path = strndup(w.s, w.len);
				else if (asprintf(&path, CONF_LOG_DIR "%.*s", (int)w.len, w.s) < 0)
					path = NULL;
				if (!path)
					return -ENOMEM;
				free(p->log_path);
				p->log_path = path;
				p->log_dest = CONF_LOG_DEST_FILE;
			} else {
				return conf_err(ps, w.col,
						"expected 'stderr', 'syslog' or 'file' after 'destination', got %s",
						conf_got(&w, buf, sizeof(buf)));
			}
		} else {
			return conf_err(ps, w.col,
					"expected 'min-level' or 'destination' in a 'log' statement, got %s",
					conf_got(&w, buf, sizeof(buf)));
		}
	}
}

/* --- set ------------------------------------------------------------------- */

static int conf_parse_set(struct conf_parser *ps)
{
	struct conf_policy *p = ps->p;
	struct conf_word name, value;
	char buf[CONF_SHOW_MAX], buf2[CONF_SHOW_MAX];
	char *n = NULL, *v = NULL;
	struct tun_limits lim;
	int ret;

	if ((ret = conf_next_word(ps, &name)))
		return ret;
	if (!name.s)
		return conf_err(ps, name.col, "expected a tunable name after 'set', got end of line");
	if ((ret = conf_next_word(ps, &value)))
		return ret;
	if (!value.s) {
		/* The name without conf_show's quotes. */
		conf_show(name.s, name.len, buf, sizeof(buf));
		return conf_err(ps, value.col,
				"expected a value after 'set %.*s', got end of line (write \"\" for an empty value)",
				(int)strlen(buf) - 2, buf + 1);
	}
	if ((ret = conf_expect_end(ps, "the value (quote a value that has blanks or '#')")))
		return ret;
	n = strndup(name.s, name.len);
	v = strndup(value.s, value.len);
	if (!n || !v) {
		ret = -ENOMEM;
		goto free_strings;
	}
	/* Two ways to say one thing would need a rule for which wins. */
	if (!strcmp(n, "transports")) {
		ret = conf_err(ps, name.col,
			       "write 'transport enable NAME' or 'transport disable NAME' rather than 'set transports'");
		goto free_strings;
	}
	ret = tun_check(n, v, &lim);
	if (ret == -ENOENT) {
		ret = conf_err(ps, name.col,
			       "unknown tunable %s (sdp_tool --list-tunables lists them)",
			       conf_show(name.s, name.len, buf, sizeof(buf)));
		goto free_strings;
	}
	if (ret == -EINVAL && lim.is_int) {
		ret = conf_err(ps, value.col,
			       "bad value %s for tunable %s: expected an integer from %ld to %ld",
			       conf_show(value.s, value.len, buf, sizeof(buf)),
			       conf_show(name.s, name.len, buf2, sizeof(buf2)), lim.min, lim.max);
		goto free_strings;
	}
	if (ret == -EINVAL) {
		ret = conf_err(ps, value.col,
			       "bad value for tunable %s: longer than %zu bytes",
			       conf_show(name.s, name.len, buf2, sizeof(buf2)), lim.max_len);
		goto free_strings;
	}
	if (p->nsettings == ps->setcap) {
		size_t cap = ps->setcap ? ps->setcap * 2 : 8;
		struct conf_setting *ns = realloc(p->settings, cap * sizeof(*ns));

		if (!ns) {
			ret = -ENOMEM;
			goto free_strings;
		}
		p->settings = ns;
		ps->setcap = cap;
	}
	p->settings[p->nsettings].name = n;
	p->settings[p->nsettings].value = v;
	p->nsettings++;
	return 0;

free_strings:
	free(n);
	free(v);
	return ret;
}

/* --- transport ------------------------------------------------------------ */

static int conf_parse_transport(struct conf_parser *ps)
{
	char buf[CONF_SHOW_MAX], list[128];
	const char *name;
	struct conf_word w;
	bool enable;
	unsigned int t;
	size_t i;
	int ret;

	if ((ret = conf_next_word(ps, &w)))
		return ret;
	if (conf_is(&w, "enable"))
		enable = true;
	else if (conf_is(&w, "disable"))
		enable = false;
	else
		return conf_err(ps, w.col,
				"expected 'enable' or 'disable' after 'transport', got %s",
				conf_got(&w, buf, sizeof(buf)));
	if ((ret = conf_next_word(ps, &w)))
		return ret;
	for (t = 0; (name = oti_name(t)) && !conf_is(&w, name); t++)
		;
	if (!name)
		return conf_err(ps, w.col, "expected a transport (%s) after '%s', got %s",
				conf_transport_choice(list, sizeof(list)),
				enable ? "transport enable" : "transport disable",
				conf_got(&w, buf, sizeof(buf)));
	if ((ret = conf_expect_end(ps, "the transport name")))
		return ret;

	for (i = 0; i < ps->ntr && strcmp(ps->tr[i], name); i++)
		;
	/* Enabling keeps the place of one already enabled; one enabled again
	 * after a disable goes last, since the order is the priority. */
	if (enable && i == ps->ntr)
		ps->tr[ps->ntr++] = name;
	if (!enable && i < ps->ntr) {
		memmove(&ps->tr[i], &ps->tr[i + 1], (ps->ntr - i - 1) * sizeof(ps->tr[0]));
		ps->ntr--;
	}
	return 0;
}

/* --- lines ----------------------------------------------------------------- */

/*
 * Whether the first word of a statement could be a misspelt keyword, and
 * so worth showing.  Other files than an sdp.conf get named by mistake
 * (LIBSDP_CONFIG_FILE, a wrong path): their first line's content stays
 * out of the log, which others may read.
 */
static bool conf_keyword_like(const struct conf_word *w)
{
	if (w->len > 16)
		return false;
	for (size_t i = 0; i < w->len; i++) {
		unsigned char c = (unsigned char)w->s[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    c != '-' && c != '_')
			return false;
	}
	return true;
}

static int conf_parse_line(struct conf_parser *ps)
{
	char buf[CONF_SHOW_MAX];
	struct conf_word w;
	int ret;

	for (size_t i = 0; i < ps->len; i++) {
		unsigned char c = (unsigned char)ps->line[i];

		if (c == '\0')
			return conf_err(ps, i + 1, "NUL byte (is this a text file?)");
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return conf_err(ps, i + 1, "control character 0x%02x", c);
	}
	ps->pos = 0;
	if ((ret = conf_next_word(ps, &w)))
		return ret;
	if (!w.s)
		return 0;
	if (conf_is(&w, "use"))
		return conf_parse_use(ps);
	if (conf_is(&w, "log"))
		return conf_parse_log(ps);
	if (conf_is(&w, "set"))
		return conf_parse_set(ps);
	if (conf_is(&w, "transport"))
		return conf_parse_transport(ps);
	if (!conf_keyword_like(&w))
		return conf_err(ps, w.col,
				"expected 'use', 'log', 'set' or 'transport' at the start of a statement, "
				"got a word of %zu bytes that is no keyword (not shown: is this an sdp.conf?)",
				w.len);
	return conf_err(ps, w.col,
			"expected 'use', 'log', 'set' or 'transport' at the start of a statement, got %s",
			conf_got(&w, buf, sizeof(buf)));
}

static void conf_policy_free(struct conf_policy *p)
{
	if (!p || p == &conf_safe)
		return;
	for (int role = 0; role < CONF_ROLES; role++) {
		for (size_t i = 0; i < p->nrules[role]; i++)
			free(p->rules[role][i].program);
		free(p->rules[role]);
	}
	for (size_t i = 0; i < p->nsettings; i++) {
		free(p->settings[i].name);
		free(p->settings[i].value);
	}
	free(p->settings);
	free(p->log_path);
	free(p);
}

static int conf_parse(const char *name, const char *text, size_t len,
		      struct conf_policy **out, char *errbuf, size_t errlen)
{
	struct conf_parser *ps;
	size_t pos = 0, o = 0;
	int ret = 0;

	ps = calloc(1, sizeof(*ps));
	if (!ps)
		goto nomem;
	ps->p = calloc(1, sizeof(*ps->p));
	if (!ps->p)
		goto nomem;
	ps->name = name;
	ps->errbuf = errbuf;
	ps->errlen = errlen;
	ps->tr = calloc(CONF_NDEFAULT_TRANSPORTS + conf_ntransports(), sizeof(*ps->tr));
	if (!ps->tr)
		goto nomem;
	for (size_t i = 0; i < CONF_NDEFAULT_TRANSPORTS; i++)
		ps->tr[ps->ntr++] = conf_default_transports[i];

	/* A UTF-8 byte order mark, as some editors write one. */
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		pos = 3;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;

		ps->lineno++;
		ps->line = text + pos;
		ps->len = end - pos;
		if (ps->len && ps->line[ps->len - 1] == '\r')
			ps->len--;
		if (ps->len > CONF_LINE_MAX)
			ret = conf_err(ps, CONF_LINE_MAX + 1, "line longer than %d bytes",
				       CONF_LINE_MAX);
		else
			ret = conf_parse_line(ps);
		if (ret == -ENOMEM)
			goto nomem;
		if (ret)
			goto fail;
		pos = end + 1;
	}

	for (size_t i = 0; i < ps->ntr; i++)
		o += (size_t)snprintf(ps->p->transports + o, sizeof(ps->p->transports) - o,
				      "%s%s", i ? "," : "", ps->tr[i]);
	*out = ps->p;
	free(ps->tr);
	free(ps);
	return 0;

nomem:
	conf_msg(errbuf, errlen, "%s: out of memory", name);
	ret = -ENOMEM;
fail:
	if (ps) {
		conf_policy_free(ps->p);
		free(ps->tr);
	}
	free(ps);
	*out = &conf_safe;
	return ret;
}

/* --- the API --------------------------------------------------------------- */

int conf_load_string(const char *name, const char *text, struct conf_policy **out,
		     char *errbuf, size_t errlen)
{
	int saved = errno, ret;

	conf_msg(errbuf, errlen, "%s", "");
	if (!name)
		name = "<string>";
	if (!text) {
		conf_msg(errbuf, errlen, "%s: no text", name);
		*out = &conf_safe;
		errno = saved;
		return -EINVAL;
	}
	ret = conf_parse(name, text, strlen(text), out, errbuf, errlen);
	errno = saved;
	return ret;
}

/*
 * The whole file, at most CONF_FILE_MAX bytes.  Read through stdio, whose
 * read() and close() are libc's own: a preload that interposes read and
 * close is then not re-entered while it loads its policy.
 */
static int conf_read_file(const char *path, char **text, size_t *len, char *errbuf,
			  size_t errlen)
{
	char ebuf[128];
	struct stat st;
	size_t cap = 4096, n = 0;
	char *buf = NULL;
	FILE *f;
	int fd, ret;

	/* O_NONBLOCK so that a FIFO or a terminal cannot hang the program
	 * in its start-up; O_NOCTTY so that a terminal is not adopted. */
	fd = sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		ret = -errno;
		conf_msg(errbuf, errlen, "%s: cannot open: %s", path,
			 strerror_r(-ret, ebuf, sizeof(ebuf)));
		return ret;
	}
	f = fdopen(fd, "r");
	if (!f) {
		ret = -errno;
		sys.close(fd);
		conf_msg(errbuf, errlen, "%s: %s", path, strerror_r(-ret, ebuf, sizeof(ebuf)));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		conf_msg(errbuf, errlen, "%s: cannot stat: %s", path,
			 strerror_r(-ret, ebuf, sizeof(ebuf)));
		goto close_file;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = -EISDIR;
		conf_msg(errbuf, errlen, "%s: is a directory, not a policy file", path);
		goto close_file;
	}
	if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
		ret = -EINVAL;
		conf_msg(errbuf, errlen, "%s: not a regular file", path);
		goto close_file;
	}
	errno = 0;
	for (;;) {
		if (n == cap || !buf) {
			char *nb;

			if (buf)
				cap *= 2;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				ret = -ENOMEM;
				conf_msg(errbuf, errlen, "%s: out of memory", path);
				goto close_file;
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n > CONF_FILE_MAX) {
			ret = -EFBIG;
			conf_msg(errbuf, errlen, "%s: larger than %d bytes", path, CONF_FILE_MAX);
			goto close_file;
		}
		if (got)
			continue;
		if (ferror(f)) {
			ret = errno ? -errno : -EIO;
			conf_msg(errbuf, errlen, "%s: cannot read: %s", path,
				 strerror_r(-ret, ebuf, sizeof(ebuf)));
			goto close_file;
		}
		break;
	}
	fclose(f);
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;

close_file:
	fclose(f);
	free(buf);
	return ret;
}

int conf_load_file(const char *path, struct conf_policy **out, char *errbuf, size_t errlen)
{
	int saved = errno, ret;
	char *text = NULL;
	size_t len = 0;

	conf_msg(errbuf, errlen, "%s", "");
	*out = &conf_safe;
	if (!path) {
		conf_msg(errbuf, errlen, "(null): no file name");
		return -EINVAL;
	}
	ret = conf_read_file(path, &text, &len, errbuf, errlen);
	if (!ret)
		ret = conf_parse(path, text, len, out, errbuf, errlen);
	free(text);
	errno = saved;
	return ret;
}

void conf_free(struct conf_policy *p)
{
	conf_policy_free(p);
}

int conf_apply_tunables(const struct conf_policy *p)
{
	int ret, first;

	if (!p || p->safe)
		return 0;
	first = tun_set("transports", p->transports);
	for (size_t i = 0; i < p->nsettings; i++) {
		ret = tun_set(p->settings[i].name, p->settings[i].value);
		if (ret && !first)
			first = ret;
	}
	return first;
}
