/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of conf/: the sdp.conf grammar, every error it reports,
 * rule matching, and a fuzz run that must never crash (it is meant to run
 * under ASan too: configure --enable-sanitizers).
 *
 * Error messages are compared whole: they are what an administrator sees,
 * and the line and column in them are the point.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "conf_impl.h"
#include "oti.h"
#include "scratch_dir.h"
#include "tunables.h"

#define S CONF_ROLE_SERVER
#define C CONF_ROLE_CLIENT
#define TCP CONF_USE_TCP
#define SDP CONF_USE_SDP
#define BOTH CONF_USE_BOTH

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The harness exports SDP_TRANSPORTS; tests that apply tunables must see
 * what the policy sets, not the environment. */
static void tc_clean_env(void)
{
	unsetenv("SDP_TRANSPORTS");
	unsetenv("SDP_RECV_BUFS");
	unsetenv("SDP_LOG_FILE");
	unsetenv("SDP_CONNECT_TIMEOUT_MS");
	unsetenv("POSIXLY_CORRECT");
	tun_reset();
}

static char tc_dir[64];

static void tc_fini(void)
{
	if (tc_dir[0])
		ut_scratch_dir_remove(tc_dir);
	tc_dir[0] = '\0';
	tc_clean_env();
}

TestSuite(conf, .init = tc_clean_env, .fini = tc_fini);

static socklen_t tc_sa(struct sockaddr_storage *ss, const char *ip, unsigned int port)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		cr_assert_eq(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1, "%s", ip);
		return sizeof(*sin6);
	}
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;

	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	cr_assert_eq(inet_pton(AF_INET, ip, &sin->sin_addr), 1, "%s", ip);
	return sizeof(*sin);
}

static enum conf_use tc_m(const struct conf_policy *p, enum conf_role role,
			  const char *prog, const char *ip, unsigned int port)
{
	struct sockaddr_storage ss;
	socklen_t len = tc_sa(&ss, ip, port);

	return conf_match(p, role, prog, (struct sockaddr *)&ss, len);
}

static struct conf_policy *tc_load(const char *text)
{
	struct conf_policy *p = NULL;
	char err[512] = "untouched";
	int ret = conf_load_string("t.conf", text, &p, err, sizeof(err));

	cr_assert_eq(ret, 0, "ret %d for:\n%s\n%s", ret, text, err);
	cr_assert_str_eq(err, "");
	cr_assert_not_null(p);
	return p;
}

/* A connection a policy is asked about, and the answer it must give. */
struct tc_conn {
	enum conf_role role;
	const char *prog, *ip;
	unsigned int port;
	enum conf_use want;
};

static const char *tc_use_name(enum conf_use u)
{
	return u == TCP ? "tcp" : u == SDP ? "sdp" : u == BOTH ? "both" : "?";
}

/* Every row of conns, asked of p. */
static void tc_check(const struct conf_policy *p, const struct tc_conn *conns, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct tc_conn *c = &conns[i];
		enum conf_use got = tc_m(p, c->role, c->prog, c->ip, c->port);

		cr_assert_eq(got, c->want, "row %zu: %s \"%s\" %s port %u: %s, want %s", i,
			     c->role == S ? "server" : "client", c->prog, c->ip, c->port,
			     tc_use_name(got), tc_use_name(c->want));
	}
}
#define TC_CHECK(p, conns) tc_check(p, conns, NELEM(conns))

/* The policy in text must give every row of conns its answer. */
static void tc_policy(const char *text, const struct tc_conn *conns, size_t n)
{
	struct conf_policy *p = tc_load(text);

	tc_check(p, conns, n);
	conf_free(p);
}
#define TC_POLICY(text, conns) tc_policy(text, conns, NELEM(conns))

/* The safe policy: TCP for everything, nothing applied. */
static void tc_assert_safe(const struct conf_policy *p)
{
	static const struct tc_conn conns[] = {
		{ S, "prog", "10.0.0.1", 80, TCP },
		{ C, "prog", "10.0.0.1", 80, TCP },
		{ C, "prog", "::1", 0, TCP },
		{ S, "", "0.0.0.0", 65535, TCP },
	};
	const char *path = "x";

	cr_assert_not_null(p);
	TC_CHECK(p, conns);
	cr_assert(!conf_may_use_sdp(p, S, "prog"));
	cr_assert(!conf_may_use_sdp(p, C, "prog"));
	cr_assert_eq(conf_log_min_level(p), 0);
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_UNSET);
	cr_assert_null(path);
	cr_assert_str_eq(conf_transports(p), "shm,ib,iwarp");
	cr_assert_eq(conf_apply_tunables(p), 0);
}

/* text must be refused with exactly this message. */
static void tc_err(const char *text, const char *want)
{
	struct conf_policy *p = NULL;
	char err[512] = "untouched";
	int ret = conf_load_string("t.conf", text, &p, err, sizeof(err));

	cr_assert_eq(ret, -EINVAL, "ret %d for: %s", ret, text);
	cr_assert_str_eq(err, want, "for: %s\n got: %s", text, err);
	tc_assert_safe(p);
	conf_free(p);
}

/* A text the parser must refuse, and its whole message. */
struct tc_bad {
	const char *text, *err;
};

static void tc_refused(const struct tc_bad *bad, size_t n)
{
	for (size_t i = 0; i < n; i++)
		tc_err(bad[i].text, bad[i].err);
}
#define TC_REFUSED(bad) tc_refused(bad, NELEM(bad))

static const char *tc_file(const char *name, const void *data, size_t len)
{
	static char path[128];
	FILE *f;

	if (!tc_dir[0]) {
		strcpy(tc_dir, "/tmp/test_conf.XXXXXX");
		cr_assert_not_null(mkdtemp(tc_dir));
	}
	snprintf(path, sizeof(path), "%s/%s", tc_dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	return path;
}

/* --- statements ----------------------------------------------------------- */

Test(conf, use_every_form)
{
	static const struct {
		const char *fam;
		enum conf_use use;
	} fams[] = { { "tcp", TCP }, { "sdp", SDP }, { "both", BOTH } };
	static const struct {
		const char *kw;
		enum conf_role role;
	} roles[] = { { "server", S }, { "listen", S }, { "client", C }, { "connect", C } };
	char text[128];

	for (size_t f = 0; f < NELEM(fams); f++) {
		for (size_t r = 0; r < NELEM(roles); r++) {
			snprintf(text, sizeof(text), "use %s %s prog 192.168.1.0/24:5000\n",
				 fams[f].fam, roles[r].kw);
			struct conf_policy *p = tc_load(text);
			enum conf_role other = roles[r].role == S ? C : S;

			cr_assert_eq(tc_m(p, roles[r].role, "prog", "192.168.1.77", 5000),
				     fams[f].use, "%s", text);
			/* Rules belong to their role only. */
			cr_assert_eq(tc_m(p, other, "prog", "192.168.1.77", 5000), BOTH);
			/* Program, address and port must all match. */
			cr_assert_eq(tc_m(p, roles[r].role, "other", "192.168.1.77", 5000), BOTH);
			cr_assert_eq(tc_m(p, roles[r].role, "prog", "192.168.2.77", 5000), BOTH);
			cr_assert_eq(tc_m(p, roles[r].role, "prog", "192.168.1.77", 5001), BOTH);
			conf_free(p);
		}
	}
}

Test(conf, blanks_tabs_and_comments)
{
	static const struct tc_conn conns[] = {
		{ S, "a", "1.2.3.4", 1, SDP },
		{ S, "b", "1.2.3.4", 2, SDP },
		{ S, "c", "1.2.3.4", 3, SDP },
		{ S, "d", "1.2.3.4", 4, BOTH },
	};

	TC_POLICY("# a comment\n"
		  "\n"
		  "   \t  \n"
		  "   # an indented comment\n"
		  "\tuse\tsdp   server\t a  *:1   # trailing comment\n"
		  "use sdp server b *:2# no blank before it\n"
		  "use sdp server c *:3 #\n"
		  "#use sdp server d *:4\n",
		  conns);
}

Test(conf, crlf_and_last_line_without_newline)
{
	static const struct tc_conn ab[] = {
		{ S, "a", "1.2.3.4", 1, SDP },
		{ S, "b", "1.2.3.4", 2, TCP },
	};
	static const struct tc_conn x[] = {
		{ C, "x", "1.2.3.4", 9, SDP },
	};

	TC_POLICY("use sdp server a *:1\r\n"
		  "# comment\r\n"
		  "\r\n"
		  "use tcp server b *:2",
		  ab);

	struct conf_policy *p = tc_load("log min-level 7");

	cr_assert_eq(conf_log_min_level(p), 7);
	conf_free(p);
	TC_POLICY("use sdp client x *:*\r", x);
	/* A byte order mark is not part of the first word. */
	TC_POLICY("\xef\xbb\xbfuse sdp client x *:*\n", x);
	/* A CR anywhere else is not a line end. */
	tc_err("use sdp\rclient x *:*\n", "t.conf:1:8: control character 0x0d");
}

Test(conf, line_numbers_stay_right)
{
	/* OFED's trailing-comment rule counted a line twice. */
	tc_err("use both server * *:* # one\n"
	       "# two\n"
	       "use both client * *:*   # three\r\n"
	       "\n"
	       "use both servr * *:*\n",
	       "t.conf:5:10: expected 'server', 'listen', 'client' or 'connect' after 'use both', got 'servr'");
}

Test(conf, empty_and_comment_only_files)
{
	static const char *const texts[] = { "", "\n", "\n\n\n", "# x", "# x\n\t\n", "\r\n" };

	for (size_t i = 0; i < NELEM(texts); i++) {
		struct conf_policy *p = tc_load(texts[i]);

		cr_assert_eq(tc_m(p, S, "a", "1.2.3.4", 1), BOTH);
		cr_assert_eq(tc_m(p, C, "a", "::1", 1), BOTH);
		cr_assert(conf_may_use_sdp(p, S, "a"));
		cr_assert_eq(conf_log_min_level(p), 0);
		cr_assert_eq(conf_log_destination(p, NULL), CONF_LOG_DEST_UNSET);
		cr_assert_str_eq(conf_transports(p), "shm,ib,iwarp");
		conf_free(p);
	}
}

/* --- programs ------------------------------------------------------------- */

Test(conf, programs_named_like_keywords)
{
	static const char *const names[] = {
		"tcp", "sdp", "both", "log", "use", "set", "transport", "server", "listen",
		"client", "connect", "enable", "file", "min-level", "destination", "1234",
		"0", "65535", "99999999999999999999", "-", "x:y", "1.2.3.4", "::1",
	};
	char text[256];

	for (size_t i = 0; i < NELEM(names); i++) {
		snprintf(text, sizeof(text),
			 "use tcp server %s *:*\nuse sdp client %s 10.0.0.0/8:*\n",
			 names[i], names[i]);
		struct conf_policy *p = tc_load(text);

		cr_assert_eq(tc_m(p, S, names[i], "1.2.3.4", 80), TCP, "%s", names[i]);
		cr_assert_eq(tc_m(p, C, names[i], "10.1.1.1", 80), SDP, "%s", names[i]);
		cr_assert_eq(tc_m(p, S, "other", "1.2.3.4", 80), BOTH, "%s", names[i]);
		cr_assert_eq(tc_m(p, C, "other", "10.1.1.1", 80), BOTH, "%s", names[i]);
		conf_free(p);
	}
}

Test(conf, program_globs)
{
	static const struct tc_conn conns[] = {
		{ S, "ttcp", "1.1.1.1", 1, SDP },
		{ S, "ttcp-server", "1.1.1.1", 1, SDP },
		{ S, "attcp", "1.1.1.1", 1, TCP },
		{ S, "xping", "1.1.1.1", 1, SDP },
		{ S, "ping", "1.1.1.1", 1, TCP },
		{ S, "xxping", "1.1.1.1", 1, TCP },
		{ S, "srv7", "1.1.1.1", 1, SDP },
		{ S, "srv", "1.1.1.1", 1, TCP },
		{ S, "srv77", "1.1.1.1", 1, TCP },
		{ S, "Ax", "1.1.1.1", 1, SDP },
		{ S, "ax", "1.1.1.1", 1, TCP },
		{ S, "d1z", "1.1.1.1", 1, SDP },
		{ S, "dz1", "1.1.1.1", 1, TCP },
		{ S, "lit*", "1.1.1.1", 1, SDP },
		{ S, "litx", "1.1.1.1", 1, TCP },
		{ S, "with blank#and hash", "1.1.1.1", 1, SDP },
		{ S, "anything", "10.0.0.1", 1, SDP },
	};
	struct conf_policy *p = tc_load(
		"use sdp server ttcp* *:*\n"
		"use sdp server ?ping *:*\n"
		"use sdp server srv[0-9] *:*\n"
		"use sdp server [!a-z]x *:*\n"
		"use sdp server d[[:digit:]][[:alpha:]] *:*\n"
		"use sdp server lit\\* *:*\n"
		"use sdp server \"with blank#and hash\" *:*\n"
		"use sdp server \"*\" 10.0.0.1:*\n"
		"use tcp server * *:*\n");

	TC_CHECK(p, conns);
	/* A NULL program is the empty name: only "*" and the like match it. */
	cr_assert_eq(conf_match(p, S, NULL, NULL, 0), TCP);
	struct sockaddr_storage ss;
	socklen_t len = tc_sa(&ss, "10.0.0.1", 1);
	cr_assert_eq(conf_match(p, S, NULL, (struct sockaddr *)&ss, len), SDP);
	conf_free(p);
}

Test(conf, glob_agrees_with_fnmatch)
{
	static const char *const atoms[] = {
		"a", "b", "c", "*", "*", "?", "\\*", "\\a", "[ab]", "[!a]", "[^b]", "[]a]",
		"[!]]", "[a-c]", "[c-a]", "[a-]", "[-a]", "[[:alpha:]]", "[[:digit:]x]",
		"[![:lower:]]", "[\\]]", "[a\\-c]", "-", "[", "]", ":", ".", "[[]", "[*?]",
		"[[:punct:]]", "[[:space:][:upper:]]",
	};
	static const char chars[] = "abcxA1-]*?[\\:. ";
	char pat[64], str[16];
	unsigned int seed = 12345;
	int checked = 0;

	/* fnmatch in the C locale is the reference conf_glob_match copies. */
	cr_assert_not_null(setlocale(LC_ALL, "C"));
	for (int i = 0; i < 20000; i++) {
		size_t pl = 0, sl = (size_t)(rand_r(&seed) % 8);
		int natoms = rand_r(&seed) % 6;
		size_t bad;
		const char *why;

		pat[0] = '\0';
		for (int a = 0; a < natoms; a++) {
			const char *atom = atoms[rand_r(&seed) % NELEM(atoms)];

			if (pl + strlen(atom) + 1 >= sizeof(pat))
				break;
			strcpy(pat + pl, atom);
			pl += strlen(atom);
		}
		for (size_t k = 0; k < sl; k++)
			str[k] = chars[rand_r(&seed) % (sizeof(chars) - 1)];
		str[sl] = '\0';
		if (conf_glob_check(pat, &bad, &why))
			continue;
		checked++;
		cr_assert_eq(conf_glob_match(pat, str), fnmatch(pat, str, 0) == 0,
			     "pattern \"%s\" string \"%s\"", pat, str);
	}
	cr_assert_gt(checked, 10000);
	/* Bytes above 0x7f compare as unsigned, whatever the locale. */
	cr_assert(conf_glob_match("[\x80-\xff]x", "\xe9x"));
	cr_assert(!conf_glob_match("[a-z]x", "\xe9x"));
	cr_assert(conf_glob_match("caf\xc3\xa9*", "caf\xc3\xa9-d"));
}

Test(conf, malformed_globs)
{
	static const struct tc_bad refused[] = {
		{ "use sdp server abc[ *:*",
		  "t.conf:1:19: program pattern 'abc[': unterminated '[' (write \\[ for a literal bracket)" },
		{ "use sdp server \"x y\\\" *:*",
		  "t.conf:1:20: program pattern 'x y\\': a trailing '\\' quotes nothing" },
		{ "use sdp server a[[:foo:]] *:*",
		  "t.conf:1:18: program pattern 'a[[:foo:]]': unknown character class (alnum, alpha, blank, cntrl, digit, graph, lower, print, punct, space, upper, xdigit)" },
		{ "use sdp server [[.a.]] *:*",
		  "t.conf:1:17: program pattern '[[.a.]]': collating elements [. .] and [= =] are not supported" },
		{ "use sdp server \"\" *:*", "t.conf:1:16: the program name is empty" },
	};
	static const struct {
		const char *pat;
		size_t bad;
	} cases[] = {
		{ "abc[", 3 }, { "a[b", 1 }, { "[]", 0 }, { "[!]", 0 }, { "x\\", 1 },
		{ "[[:alpha:]", 0 }, { "[[:nope:]]", 1 }, { "[[.a.]]", 1 }, { "[[=a=]]", 1 },
		{ "[a-[.b.]]", 3 }, { "[a\\", 0 }, { "[[:alpha", 0 },
	};
	size_t bad;
	const char *why;

	for (size_t i = 0; i < NELEM(cases); i++) {
		bad = 99;
		why = NULL;
		cr_assert_eq(conf_glob_check(cases[i].pat, &bad, &why), -EINVAL, "%s",
			     cases[i].pat);
		cr_assert_eq(bad, cases[i].bad, "%s: %zu", cases[i].pat, bad);
		cr_assert_not_null(why);
	}
	TC_REFUSED(refused);
}

/* --- addresses ------------------------------------------------------------- */

Test(conf, ipv4_prefixes)
{
	static const struct tc_conn conns[] = {
		{ C, "a", "10.0.0.1", 1, SDP },
		{ C, "a", "10.0.0.2", 1, SDP },
		{ C, "a", "10.0.0.3", 1, TCP },
		{ C, "a", "10.0.0.4", 1, SDP },
		{ C, "a", "10.0.0.5", 1, SDP },
		{ C, "a", "10.0.0.6", 1, TCP },
		{ C, "a", "192.168.7.0", 1, SDP },
		{ C, "a", "192.168.7.255", 1, SDP },
		{ C, "a", "192.168.8.1", 1, TCP },
		{ C, "a", "172.31.255.255", 1, SDP },
		{ C, "a", "172.32.0.0", 1, TCP },
		{ C, "a", "172.15.255.255", 1, TCP },
		/* /0 covers all of IPv4 and nothing of IPv6. */
		{ C, "a", "255.255.255.255", 1, TCP },
		{ C, "a", "0.0.0.0", 1, TCP },
		{ C, "a", "::1", 1, BOTH },
	};
	static const struct tc_bad refused[] = {
		{ "use sdp client * 10.0.0.0/33:*",
		  "t.conf:1:27: prefix length /33 is too long for an IPv4 address (at most /32)" },
		{ "use sdp client * 10.0.0.0/:*",
		  "t.conf:1:27: expected a prefix length (decimal digits) after '/'" },
		{ "use sdp client * 10.0.0.0/-1:*",
		  "t.conf:1:27: expected a prefix length (decimal digits) after '/'" },
		{ "use sdp client * 10.0.0.0/8/8:*",
		  "t.conf:1:27: expected a prefix length (decimal digits) after '/'" },
		{ "use sdp client * 10.0.0.0/99999999999:*",
		  "t.conf:1:27: prefix length /99999999999 is too long for an IPv4 address (at most /32)" },
		{ "use sdp client * 10.0.0/8:*",
		  "t.conf:1:18: '10.0.0' is not an IPv4 or IPv6 address" },
		{ "use sdp client * 10.0.0.256:*",
		  "t.conf:1:18: '10.0.0.256' is not an IPv4 or IPv6 address" },
		{ "use sdp client * host.example.com:*",
		  "t.conf:1:18: 'host.example.com' is not an IPv4 or IPv6 address" },
		{ "use sdp client * */8:*",
		  "t.conf:1:18: '*' (any address) takes no prefix length" },
		{ "use sdp client * :80", "t.conf:1:18: expected an address or '*' before ':PORT'" },
	};

	TC_POLICY("use sdp client * 10.0.0.1:*\n"		/* /32 by default */
		  "use sdp client * 10.0.0.2/32:*\n"
		  "use sdp client * 10.0.0.4/31:*\n"
		  "use sdp client * 192.168.7.200/24:*\n"	/* host bits ignored */
		  "use sdp client * 172.16.0.0/12:*\n"
		  "use tcp client * 0.0.0.0/0:*\n", conns);
	TC_REFUSED(refused);
}

Test(conf, ipv6_prefixes)
{
	static const struct tc_conn conns[] = {
		{ C, "a", "1234:5678::1", 1, SDP },
		{ C, "a", "1234:5678:0:0:ffff:ffff:ffff:ffff", 1, SDP },
		{ C, "a", "1234:5678:0:1::", 1, TCP },
		{ C, "a", "fd00:abcd::1", 80, SDP },
		{ C, "a", "fd00:abcd::1", 81, TCP },
		{ C, "a", "fd00:abcd::2", 80, TCP },
		{ C, "a", "fd00:1::", 1, SDP },
		{ C, "a", "fd00:1::1", 1, SDP },
		{ C, "a", "fd00:1::2", 1, TCP },
		{ C, "a", "fd00:2:0:ffff::9", 1, SDP },
		{ C, "a", "fd00:2:1::", 1, TCP },
		{ C, "a", "fd00:3::5", 7, SDP },
		{ C, "a", "fd00:3::5", 8, TCP },
		{ C, "a", "::ffff:10.9.200.1", 1, SDP },
		{ C, "a", "2001:db8::", 1, SDP },
		{ C, "a", "2001:db8::1", 1, TCP },
		/* ::/0 covers all of IPv6 and nothing of IPv4. */
		{ C, "a", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, TCP },
		{ C, "a", "::", 1, TCP },
		{ C, "a", "10.0.0.1", 1, BOTH },
	};
	static const struct tc_conn any[] = {
		{ S, "a", "::", 5000, SDP },
		{ S, "a", "::", 5001, SDP },
		{ S, "a", "::1", 5000, BOTH },
	};
	static const struct tc_bad refused[] = {
		{ "use sdp client * fd00::/129:*",
		  "t.conf:1:25: prefix length /129 is too long for an IPv6 address (at most /128)" },
		{ "use sdp client * [fd00::]/129:*",
		  "t.conf:1:27: prefix length /129 is too long for an IPv6 address (at most /128)" },
		{ "use sdp client * [fd00::/200]:*",
		  "t.conf:1:26: prefix length /200 is too long for an IPv6 address (at most /128)" },
		{ "use sdp client * [fd00::/64]/64:*", "t.conf:1:25: two prefix lengths" },
		{ "use sdp client * [fd00::]x:*",
		  "t.conf:1:26: expected '/PREFIX' or ':PORT' after ']'" },
		{ "use sdp client * [fd00:::*", "t.conf:1:18: unterminated '['" },
		{ "use sdp client * [fd00::]", "t.conf:1:18: expected ADDRESS:PORT (the port after the last ':'), got '[fd00::]'" },
		{ "use sdp client * [10.0.0.1]:*",
		  "t.conf:1:18: brackets are for IPv6 addresses, got '[10.0.0.1]'" },
		{ "use sdp client * fd00::1::2:*",
		  "t.conf:1:18: 'fd00::1::2' is not an IPv4 or IPv6 address" },
		{ "use sdp client * fe80::1%eth0:*",
		  "t.conf:1:18: 'fe80::1%eth0' is not an IPv4 or IPv6 address" },
		/* Without a port the last group would be read as one: say so. */
		{ "use sdp client * ::1",
		  "t.conf:1:18: '::1' has no port: the port follows the last ':' (write [::1]:PORT or ::1:*)" },
		{ "use sdp client * 1234:5678::",
		  "t.conf:1:18: '1234:5678::' has no port: the port follows the last ':' (write [1234:5678::]:PORT or 1234:5678:::*)" },
	};

	TC_POLICY("use sdp client * 1234:5678::0/64:*\n"		/* OFED's own example */
		  "use sdp client * FD00:ABCD::1:80\n"		/* upper case, /128 */
		  "use sdp client * [fd00:1::]/127:*\n"
		  "use sdp client * [fd00:2::/48]:*\n"
		  "use sdp client * [fd00:3::5]:7\n"
		  "use sdp client * ::ffff:10.9.0.0/112:*\n"
		  "use sdp client * 2001:db8::/128:*\n"
		  "use tcp client * ::/0:*\n", conns);
	/* "::" and the any address with a port, unbracketed. */
	TC_POLICY("use sdp server * :::5000\nuse sdp server * [::]:5001\n", any);

	TC_REFUSED(refused);
}

Test(conf, ipv4_mapped_addresses)
{
	static const struct tc_conn conns[] = {
		{ C, "a", "::ffff:10.1.2.3", 1, SDP },
		{ C, "a", "10.1.2.3", 1, SDP },
		{ C, "a", "::ffff:192.168.0.9", 1, TCP },
		/* The IPv6 rule does not turn into an IPv4 one. */
		{ C, "a", "192.168.0.9", 1, BOTH },
		/* Only ::ffff:0:0/96 is mapped, not the deprecated compatible form. */
		{ C, "a", "::10.1.2.3", 1, BOTH },
	};

	TC_POLICY("use sdp client * 10.1.0.0/16:*\n"
		  "use tcp client * ::ffff:192.168.0.0/120:*\n", conns);
}

Test(conf, addresses_that_are_not_ip)
{
	struct conf_policy *p = tc_load("use sdp client * *:*\nuse sdp server * *:*\n");
	struct sockaddr_storage ss;
	socklen_t len;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	cr_assert_eq(conf_match(p, C, "a", (struct sockaddr *)&ss, sizeof(ss)), TCP);
	cr_assert_eq(conf_match(p, C, "a", NULL, 0), TCP);
	cr_assert_eq(conf_match(p, C, "a", NULL, sizeof(ss)), TCP);
	len = tc_sa(&ss, "10.0.0.1", 80);
	cr_assert_eq(conf_match(p, C, "a", (struct sockaddr *)&ss, len), SDP);
	cr_assert_eq(conf_match(p, C, "a", (struct sockaddr *)&ss, len - 1), TCP);
	cr_assert_eq(conf_match(p, C, "a", (struct sockaddr *)&ss, 0), TCP);
	len = tc_sa(&ss, "fd00::1", 80);
	cr_assert_eq(conf_match(p, S, "a", (struct sockaddr *)&ss, len), SDP);
	cr_assert_eq(conf_match(p, S, "a", (struct sockaddr *)&ss, len - 1), TCP);
	/* A role that does not exist is not a reason to offload. */
	cr_assert_eq(conf_match(p, (enum conf_role)7, "a", (struct sockaddr *)&ss, len), TCP);
	cr_assert(!conf_may_use_sdp(p, (enum conf_role)7, "a"));
	cr_assert_eq(conf_match(NULL, S, "a", (struct sockaddr *)&ss, len), TCP);
	conf_free(p);
}

/* --- ports ------------------------------------------------------------------ */

Test(conf, port_ranges)
{
	static const struct tc_conn conns[] = {
		{ S, "a", "1.1.1.1", 21, TCP },
		{ S, "a", "1.1.1.1", 22, SDP },
		{ S, "a", "1.1.1.1", 25, SDP },
		{ S, "a", "1.1.1.1", 26, TCP },
		{ S, "a", "1.1.1.1", 0, SDP },
		{ S, "a", "1.1.1.1", 1, TCP },
		{ S, "a", "1.1.1.1", 65535, SDP },
		{ S, "a", "1.1.1.1", 65534, TCP },
		{ S, "a", "1.1.1.1", 1000, SDP },
		{ S, "a", "1.1.1.1", 80, SDP },
	};
	static const struct tc_conn spaced[] = {
		{ S, "a", "1.1.1.1", 5000, SDP },
		{ S, "a", "1.1.1.1", 5010, SDP },
		{ S, "a", "1.1.1.1", 5011, BOTH },
		{ C, "a", "10.0.0.1", 7, SDP },
		{ C, "a", "fd00::1", 9, SDP },
	};
	static const struct tc_bad refused[] = {
		{ "use sdp server * *:65536", "t.conf:1:20: port '65536' is out of range (0 to 65535)" },
		{ "use sdp server * *:1-65536", "t.conf:1:22: port '65536' is out of range (0 to 65535)" },
		{ "use sdp server * *:99999999999999999999",
		  "t.conf:1:20: port '99999999999999999999' is out of range (0 to 65535)" },
		{ "use sdp server * *:25-22",
		  "t.conf:1:20: port range 25-22 is reversed (the first port must not be above the second)" },
		{ "use sdp server * *:",
		  "t.conf:1:20: expected a port, a port range N-M or '*' after ':', got nothing" },
		{ "use sdp server * *:-5",
		  "t.conf:1:20: expected a port, a port range N-M or '*' after ':', got '-5'" },
		{ "use sdp server * *:5-",
		  "t.conf:1:22: expected a port number after '-', got nothing" },
		{ "use sdp server * *:5-x",
		  "t.conf:1:22: expected a port number after '-', got 'x'" },
		{ "use sdp server * *:*-5",
		  "t.conf:1:20: expected a port, a port range N-M or '*' after ':', got '*-5'" },
		{ "use sdp server * *:+5",
		  "t.conf:1:20: expected a port, a port range N-M or '*' after ':', got '+5'" },
		{ "use sdp server * *:0x50",
		  "t.conf:1:20: expected a port, a port range N-M or '*' after ':', got '0x50'" },
		{ "use sdp server * *:5-6-7",
		  "t.conf:1:22: expected a port number after '-', got '6-7'" },
		{ "use sdp server * *:80 extra", "t.conf:1:23: unexpected 'extra' after ADDRESS:PORT" },
		{ "use sdp server * *:80 *:81", "t.conf:1:23: unexpected '*:81' after ADDRESS:PORT" },
		{ "use sdp server * *", "t.conf:1:18: expected ADDRESS:PORT (the port after the last ':'), got '*'" },
		{ "use sdp server * 10.0.0.1",
		  "t.conf:1:18: expected ADDRESS:PORT (the port after the last ':'), got '10.0.0.1'" },
	};

	TC_POLICY("use sdp server * *:22-25\n"
		  "use sdp server * *:0\n"
		  "use sdp server * *:65535\n"
		  "use sdp server * *:1000-1000\n"
		  "use sdp server * *:0080\n"
		  "use tcp server * *:*\n", conns);
	/* OFED's lexer skipped blanks between ADDRESS, ':' and the ports. */
	TC_POLICY("use sdp server * * : 5000 - 5010\n"
		  "use sdp client * 10.0.0.1 :7\n"
		  "use sdp client * fd00::1: 8-\t9 # c\n", spaced);

	TC_REFUSED(refused);
}

/* --- matching ---------------------------------------------------------------- */

Test(conf, first_match_wins_per_role)
{
	static const struct tc_conn conns[] = {
		{ S, "sshd", "1.1.1.1", 5500, TCP },
		{ S, "web", "1.1.1.1", 5500, SDP },
		{ S, "web", "1.1.1.1", 7000, TCP },
		{ C, "web", "10.0.5.5", 1, SDP },
		{ C, "sshd", "10.0.5.5", 1, SDP },
		/* Nothing in the client list matched: the default. */
		{ C, "web", "11.0.0.1", 1, BOTH },
	};

	TC_POLICY("use tcp server sshd *:*\n"
		  "use sdp client * 10.0.0.0/8:*\n"
		  "use sdp server * *:5000-6000\n"
		  "use tcp client * 10.0.0.0/16:*\n"	/* hidden by the /8 rule */
		  "use both server * *:5500\n"		/* hidden by the range */
		  "use tcp server * *:*\n"
		  "use sdp server * *:7000\n",		/* hidden by the line above */
		  conns);
}

Test(conf, default_when_nothing_matches)
{
	static const struct tc_conn conns[] = {
		{ S, "y", "1.1.1.1", 1, BOTH },
		{ S, "x", "1.1.1.1", 2, BOTH },
		/* No client rules: both, not OFED's simple SDP mode. */
		{ C, "x", "1.1.1.1", 1, BOTH },
	};
	static const struct tc_conn no_rules[] = {
		{ S, "any", "0.0.0.0", 0, BOTH },
		{ C, "any", "::1", 65535, BOTH },
	};

	/* OFED: "If no match is made libsdp will default to 'both'". */
	TC_POLICY("use sdp server x *:1\n", conns);
	/* A file with log lines but no rules at all: both everywhere. */
	TC_POLICY("log min-level 9\nset recv_bufs 32\n", no_rules);
}

Test(conf, may_use_sdp)
{
	struct conf_policy *p = tc_load(
		"use tcp server sshd *:*\n"
		"use tcp server nginx *:80\n"
		"use sdp server nginx *:8080\n"
		"use tcp server db* 10.0.0.0/8:*\n"
		"use tcp server db* *:*\n"
		"use both server * *:*\n"
		"use tcp client * *:*\n");

	cr_assert(!conf_may_use_sdp(p, S, "sshd"));
	cr_assert(conf_may_use_sdp(p, S, "nginx"));
	cr_assert(!conf_may_use_sdp(p, S, "db1"));
	cr_assert(conf_may_use_sdp(p, S, "web"));
	cr_assert(!conf_may_use_sdp(p, C, "web"));
	cr_assert(!conf_may_use_sdp(p, C, "sshd"));
	conf_free(p);

	/* tcp rules that leave some addresses or ports open fall through to
	 * the default, which is both. */
	p = tc_load("use tcp client * *:1-65535\nuse tcp client * 0.0.0.0/0:*\n");
	cr_assert(conf_may_use_sdp(p, C, "a"));
	cr_assert(conf_may_use_sdp(p, S, "a"));
	conf_free(p);
	cr_assert(!conf_may_use_sdp(NULL, C, "a"));
}

/* --- log ---------------------------------------------------------------------- */

Test(conf, log_statement)
{
	static const struct tc_bad refused[] = {
		{ "log min-level 0", "t.conf:1:15: expected a level from 1 to 9 after 'min-level', got '0'" },
		{ "log min-level 10", "t.conf:1:15: expected a level from 1 to 9 after 'min-level', got '10'" },
		{ "log min-level -1", "t.conf:1:15: expected a level from 1 to 9 after 'min-level', got '-1'" },
		{ "log min-level", "t.conf:1:14: expected a level from 1 to 9 after 'min-level', got end of line" },
		{ "log min-level # 5", "t.conf:1:15: expected a level from 1 to 9 after 'min-level', got end of line" },
		{ "log destination", "t.conf:1:16: expected 'stderr', 'syslog' or 'file' after 'destination', got end of line" },
		{ "log destination stdout", "t.conf:1:17: expected 'stderr', 'syslog' or 'file' after 'destination', got 'stdout'" },
		{ "log destination file", "t.conf:1:21: expected a file name after 'destination file', got end of line" },
		{ "log destination file \"\"", "t.conf:1:22: the log file name is empty" },
		{ "log level 9", "t.conf:1:5: expected 'min-level' or 'destination' in a 'log' statement, got 'level'" },
		{ "log min-level 5 verbose", "t.conf:1:17: expected 'min-level' or 'destination' in a 'log' statement, got 'verbose'" },
	};
	const char *path = "untouched";
	struct conf_policy *p = tc_load("log min-level 7 destination stderr\n");

	cr_assert_eq(conf_log_min_level(p), 7);
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_STDERR);
	cr_assert_null(path);
	conf_free(p);

	/* Any order, repeated, on several lines: the last of each wins. */
	p = tc_load("log destination syslog min-level 1\n"
		    "log\n"
		    "log min-level 3 min-level 4\n"
		    "log destination file /var/tmp/x.log destination file \"/tmp/a b#c.log\"\n");
	cr_assert_eq(conf_log_min_level(p), 4);
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_FILE);
	cr_assert_str_eq(path, "/tmp/a b#c.log");
	conf_free(p);

	/* OFED's shipped file used a relative name. */
	p = tc_load("log min-level 9 destination file libsdp.log\n");
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_FILE);
	cr_assert_str_eq(path, "/var/log/libsdp.log");
	cr_assert_eq(conf_log_destination(p, NULL), CONF_LOG_DEST_FILE);
	conf_free(p);

	/* A file name that is a keyword is a file name. */
	p = tc_load("log destination file syslog\n");
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_FILE);
	cr_assert_str_eq(path, "/var/log/syslog");
	conf_free(p);

	p = tc_load("log destination syslog\n");
	cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_SYSLOG);
	cr_assert_null(path);
	cr_assert_eq(conf_log_min_level(p), 0);
	conf_free(p);

	TC_REFUSED(refused);
}

/* A relative log file name is a file in /var/log itself; no name climbs
 * with '..'. */
Test(conf, log_file_names)
{
	static const struct {
		const char *word, *path;
	} good[] = {
		{ "libsdp.log", "/var/log/libsdp.log" },
		{ "..x", "/var/log/..x" },
		{ "x..", "/var/log/x.." },
		{ "a..b", "/var/log/a..b" },
		{ ".hidden", "/var/log/.hidden" },
		{ "\"a b.log\"", "/var/log/a b.log" },
		{ "/var/tmp/x.log", "/var/tmp/x.log" },
		{ "/tmp/..x/y..", "/tmp/..x/y.." },
		{ "/var/log/libsdp/x.log", "/var/log/libsdp/x.log" },
	};
	static const struct {
		const char *word, *err;
	} bad[] = {
		{ "../../tmp/x", "t.conf:1:22: the log file name '../../tmp/x' has a '..' component (write the path without it)" },
		{ "..", "t.conf:1:22: the log file name '..' has a '..' component (write the path without it)" },
		{ "x/..", "t.conf:1:24: the log file name 'x/..' has a '..' component (write the path without it)" },
		{ "x/../y", "t.conf:1:24: the log file name 'x/../y' has a '..' component (write the path without it)" },
		{ "\"a/../../b\"", "t.conf:1:25: the log file name 'a/../../b' has a '..' component (write the path without it)" },
		{ "/var/log/../../etc/x", "t.conf:1:31: the log file name '/var/log/../../etc/x' has a '..' component (write the path without it)" },
		{ "/tmp/..", "t.conf:1:27: the log file name '/tmp/..' has a '..' component (write the path without it)" },
		{ "sub/x.log", "t.conf:1:25: the relative log file name 'sub/x.log' has a '/': a relative name is a file in /var/log/ itself (write an absolute path for another directory)" },
		{ "./x", "t.conf:1:23: the relative log file name './x' has a '/': a relative name is a file in /var/log/ itself (write an absolute path for another directory)" },
		{ "x/", "t.conf:1:23: the relative log file name 'x/' has a '/': a relative name is a file in /var/log/ itself (write an absolute path for another directory)" },
		{ ".", "t.conf:1:22: the log file name '.' names /var/log/ itself" },
	};
	char text[128];
	const char *path;

	for (size_t i = 0; i < NELEM(good); i++) {
		snprintf(text, sizeof(text), "log destination file %s\n", good[i].word);
		struct conf_policy *p = tc_load(text);

		cr_assert_eq(conf_log_destination(p, &path), CONF_LOG_DEST_FILE, "%s", text);
		cr_assert_str_eq(path, good[i].path, "%s", text);
		conf_free(p);
	}
	for (size_t i = 0; i < NELEM(bad); i++) {
		snprintf(text, sizeof(text), "log destination file %s", bad[i].word);
		tc_err(text, bad[i].err);
	}
}

/* --- set ----------------------------------------------------------------------- */

Test(conf, set_good)
{
	struct conf_policy *p = tc_load("set recv_bufs 32\n"
					"set connect_timeout_ms 0x7d0\n"
					"set log_file \"\"\n"
					"set recv_bufs 64   # the last one wins\n");

	/* Recorded, not applied: parsing has no side effect. */
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
	cr_assert_eq(conf_apply_tunables(p), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 64);
	cr_assert_eq(tun_int(TUN_connect_timeout_ms), 2000);
	cr_assert_str_eq(tun_str(TUN_log_file), "");
	cr_assert_str_eq(tun_str(TUN_transports), "shm,ib,iwarp");
	conf_free(p);
}

Test(conf, set_environment_still_wins)
{
	struct conf_policy *p = tc_load("set recv_bufs 32\ntransport enable tcp-fallback\n");

	setenv("SDP_RECV_BUFS", "128", 1);
	setenv("SDP_TRANSPORTS", "tcp-fallback", 1);
	tun_reset();
	cr_assert_eq(conf_apply_tunables(p), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 128);
	cr_assert_str_eq(tun_str(TUN_transports), "tcp-fallback");
	conf_free(p);
}

Test(conf, set_bad)
{
	static const struct tc_bad refused[] = {
		{ "set no_such_tunable 1",
		  "t.conf:1:5: unknown tunable 'no_such_tunable' (sdp_tool --list-tunables lists them)" },
		{ "set RECV_BUFS 32",
		  "t.conf:1:5: unknown tunable 'RECV_BUFS' (sdp_tool --list-tunables lists them)" },
		{ "set recv_bufs 5000",
		  "t.conf:1:15: bad value '5000' for tunable 'recv_bufs': expected an integer from 4 to 1024" },
		{ "set recv_bufs abc",
		  "t.conf:1:15: bad value 'abc' for tunable 'recv_bufs': expected an integer from 4 to 1024" },
		{ "set recv_bufs \"\"",
		  "t.conf:1:15: bad value '' for tunable 'recv_bufs': expected an integer from 4 to 1024" },
		{ "set recv_bufs 16k",
		  "t.conf:1:15: bad value '16k' for tunable 'recv_bufs': expected an integer from 4 to 1024" },
		{ "set recv_bufs 3",
		  "t.conf:1:15: bad value '3' for tunable 'recv_bufs': expected an integer from 4 to 1024" },
		{ "set recv_bufs", "t.conf:1:14: expected a value after 'set recv_bufs', got end of line (write \"\" for an empty value)" },
		{ "set", "t.conf:1:4: expected a tunable name after 'set', got end of line" },
		{ "set recv_bufs 16 17",
		  "t.conf:1:18: unexpected '17' after the value (quote a value that has blanks or '#')" },
		{ "set transports ib",
		  "t.conf:1:5: write 'transport enable NAME' or 'transport disable NAME' rather than 'set transports'" },
		{ "set log_file \"/tmp/x\"y", "t.conf:1:22: expected a blank after the closing '\"'" },
		{ "set log_file \"/tmp/x", "t.conf:1:14: unterminated quoted string" },
	};
	char text[400];

	TC_REFUSED(refused);

	/* A string value as long as tunables.c takes, and one byte more. */
	memset(text, 0, sizeof(text));
	strcpy(text, "set log_file /");
	memset(text + strlen(text), 'x', 254);
	struct conf_policy *p = tc_load(text);
	conf_free(p);
	strcat(text, "y");
	tc_err(text, "t.conf:1:14: bad value for tunable 'log_file': longer than 255 bytes");
}

/* The parser checks "set" values without calling tun_set(): it must say
 * yes and no exactly where tun_set() does, for every tunable. */
Test(conf, set_agrees_with_tun_set)
{
	static const char *const names[] = {
#define TUNABLE(id, type, def, min, max, help) #id,
#include "tunables.def"
#undef TUNABLE
		"nonexistent", "",
	};
	static const char *const values[] = {
		"", "0", "1", "3", "4", "9", "10", "16", "1024", "1025", "1040", "65535",
		"65536", "100000", "600000", "600001", "1048592", "1048593", "-1", "+5",
		"0x10", "0X10", "0x", "0x7fffffff", "010", " 5", "5 ", "abc", "16k",
		"99999999999999999999", "tcp-fallback", "/tmp/log file",
	};
	char text[600], longval[300];
	int checked = 0;

	memset(longval, 'v', sizeof(longval) - 1);
	longval[sizeof(longval) - 1] = '\0';
	for (size_t n = 0; n < NELEM(names); n++) {
		if (!strcmp(names[n], "transports") || !names[n][0])
			continue;
		for (size_t v = 0; v <= NELEM(values) + 1; v++) {
			const char *value = v < NELEM(values) ? values[v] : longval;
			struct conf_policy *p = NULL;
			int ret, want;

			if (v == NELEM(values) + 1)
				longval[255] = '\0';
			snprintf(text, sizeof(text), "set %s \"%s\"", names[n], value);
			ret = conf_load_string("t.conf", text, &p, NULL, 0);
			tun_reset();
			want = tun_set(names[n], value);
			cr_assert_eq(ret == 0, want == 0, "%s: parser %d, tun_set %d", text, ret, want);
			if (ret == 0) {
				tun_reset();
				cr_assert_eq(conf_apply_tunables(p), 0, "%s", text);
			}
			conf_free(p);
			checked++;
		}
	}
	cr_assert_gt(checked, 100);
}

/* --- transport ------------------------------------------------------------------ */

Test(conf, transports)
{
	static const struct {
		const char *text;
		const char *want;
	} cases[] = {
		{ "", "shm,ib,iwarp" },
		{ "transport enable tcp-fallback", "shm,ib,iwarp,tcp-fallback" },
		{ "transport enable ib", "shm,ib,iwarp" },
		{ "transport disable ib", "shm,iwarp" },
		{ "transport disable ib\ntransport enable ib", "shm,iwarp,ib" },
		{ "transport enable tcp-fallback\ntransport disable ib\ntransport enable ib",
		  "shm,iwarp,tcp-fallback,ib" },
		{ "transport disable ib\ntransport disable iwarp", "shm" },
		{ "transport disable shm", "ib,iwarp" },
		{ "transport disable shm\ntransport disable ib\ntransport disable iwarp", "" },
		{ "transport disable ib\ntransport disable iwarp\ntransport enable tcp-fallback",
		  "shm,tcp-fallback" },
		{ "transport disable tcp-fallback", "shm,ib,iwarp" },
		{ "transport enable tcp-fallback\ntransport enable tcp-fallback",
		  "shm,ib,iwarp,tcp-fallback" },
	};
	static const struct tc_bad refused[] = {
		{ "transport enable rxe",
		  "t.conf:1:18: expected a transport ('shm', 'ib', 'iwarp' or 'tcp-fallback') after 'transport enable', got 'rxe'" },
		{ "transport disable",
		  "t.conf:1:18: expected a transport ('shm', 'ib', 'iwarp' or 'tcp-fallback') after 'transport disable', got end of line" },
		{ "transport on ib", "t.conf:1:11: expected 'enable' or 'disable' after 'transport', got 'on'" },
		{ "transport enable ib iwarp", "t.conf:1:21: unexpected 'iwarp' after the transport name" },
	};

	for (size_t i = 0; i < NELEM(cases); i++) {
		struct conf_policy *p = tc_load(cases[i].text);

		cr_assert_str_eq(conf_transports(p), cases[i].want, "%s", cases[i].text);
		tun_reset();
		cr_assert_eq(conf_apply_tunables(p), 0);
		cr_assert_str_eq(tun_str(TUN_transports), cases[i].want);
		conf_free(p);
	}
	TC_REFUSED(refused);
}

/* The names a file may use are the transport registry's, every one of
 * them, and the message for a wrong one lists them all. */
Test(conf, transport_names_are_the_registrys)
{
	char text[128], want[512], list[256] = "";
	size_t n = 0, o = 0;

	while (oti_name((unsigned int)n))
		n++;
	cr_assert_geq(n, 3);
	for (size_t i = 0; i < n; i++) {
		const char *name = oti_name((unsigned int)i);
		struct conf_policy *p;

		cr_assert_not_null(oti_find(name));
		snprintf(text, sizeof(text), "transport disable shm\ntransport disable ib\n"
			 "transport disable iwarp\ntransport enable %s", name);
		p = tc_load(text);
		cr_assert_str_eq(conf_transports(p), name);
		conf_free(p);
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s'%s'",
				      !i ? "" : i + 1 == n ? " or " : ", ", name);
	}
	snprintf(want, sizeof(want),
		 "t.conf:1:18: expected a transport (%s) after 'transport enable', got 'rdma'", list);
	tc_err("transport enable rdma", want);
}

/* --- errors ---------------------------------------------------------------------- */

Test(conf, statement_errors)
{
	static const struct tc_bad refused[] = {
		{ "usr both server * *:*",
		  "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got 'usr'" },
		{ "USE both server * *:*",
		  "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got 'USE'" },
		{ "\"use\" both server * *:*",
		  "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got 'use'" },
		{ "  *:*", "t.conf:1:3: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got a word of 3 bytes that is no keyword (not shown: is this an sdp.conf?)" },
		{ "use", "t.conf:1:4: expected 'tcp', 'sdp' or 'both' after 'use', got end of line" },
		{ "use rdma server * *:*", "t.conf:1:5: expected 'tcp', 'sdp' or 'both' after 'use', got 'rdma'" },
		{ "use both", "t.conf:1:9: expected 'server', 'listen', 'client' or 'connect' after 'use both', got end of line" },
		{ "use both servr * *:*",
		  "t.conf:1:10: expected 'server', 'listen', 'client' or 'connect' after 'use both', got 'servr'" },
		{ "use tcp listen", "t.conf:1:15: expected a program name or '*' after 'use tcp listen', got end of line" },
		{ "use tcp listen # x", "t.conf:1:16: expected a program name or '*' after 'use tcp listen', got end of line" },
		{ "use sdp connect ssh", "t.conf:1:20: expected ADDRESS:PORT after 'use sdp connect ssh', got end of line" },
		{ "use sdp connect ssh  ", "t.conf:1:22: expected ADDRESS:PORT after 'use sdp connect ssh', got end of line" },
		{ "use sdp connect \"a b\"",
		  "t.conf:1:22: expected ADDRESS:PORT after 'use sdp connect a b', got end of line" },
		/* Only the first error is reported, and nothing of the file is kept. */
		{ "use sdp server * *:*\nbad one\nbad two\n",
		  "t.conf:2:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got 'bad'" },
	};

	TC_REFUSED(refused);
}

Test(conf, what_error_messages_show)
{
	static const struct tc_bad refused[] = {
		/* Long words are cut, bytes that are not printable ASCII escaped. */
		{ "use frobnicate0123456789012345678901234567890123456789",
		  "t.conf:1:5: expected 'tcp', 'sdp' or 'both' after 'use', got 'frobnicate012345678901234567890123456789...'" },
		/* A statement's first word is shown only if it could be a
		 * misspelt keyword: another file named by mistake (here the
		 * start of a shadow(5) line) keeps its content out of the log. */
		{ "root:$6$salt$hash:19000:0:99999:7:::",
		  "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got a word of 36 bytes that is no keyword (not shown: is this an sdp.conf?)" },
		{ "# a comment, then a secret\nhunter2hunter2hunter2 x",
		  "t.conf:2:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got a word of 21 bytes that is no keyword (not shown: is this an sdp.conf?)" },
		{ "password=secret", "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got a word of 15 bytes that is no keyword (not shown: is this an sdp.conf?)" },
		{ "transprot enable ib",
		  "t.conf:1:1: expected 'use', 'log', 'set' or 'transport' at the start of a statement, got 'transprot'" },
		{ "use both serv\xc3\xa9r * *:*",
		  "t.conf:1:10: expected 'server', 'listen', 'client' or 'connect' after 'use both', got 'serv\\xc3\\xa9r'" },
		{ "use both server \xff *",
		  "t.conf:1:19: expected ADDRESS:PORT (the port after the last ':'), got '*'" },
	};

	TC_REFUSED(refused);
}

Test(conf, errbuf_and_errno_contract)
{
	struct conf_policy *p = NULL;
	char small[12];
	int ret;

	/* A short buffer is cut and terminated; none at all is fine. */
	ret = conf_load_string("t.conf", "bogus", &p, small, sizeof(small));
	cr_assert_eq(ret, -EINVAL);
	cr_assert_str_eq(small, "t.conf:1:1:");
	tc_assert_safe(p);
	ret = conf_load_string("t.conf", "bogus", &p, NULL, 0);
	cr_assert_eq(ret, -EINVAL);
	tc_assert_safe(p);
	ret = conf_load_string(NULL, "bogus", &p, small, sizeof(small));
	cr_assert_eq(ret, -EINVAL);
	cr_assert_str_eq(small, "<string>:1:");
	ret = conf_load_string("t.conf", NULL, &p, small, sizeof(small));
	cr_assert_eq(ret, -EINVAL);
	tc_assert_safe(p);

	/* errno is the application's: left as it was. */
	errno = EXDEV;
	/* strtol sets ERANGE on this one inside the parser. */
	ret = conf_load_string("t.conf", "set recv_bufs 99999999999999999999999", &p, NULL, 0);
	cr_assert_eq(ret, -EINVAL);
	cr_assert_eq(errno, EXDEV);
	ret = conf_load_file("/nonexistent/sdp.conf", &p, NULL, 0);
	cr_assert_eq(ret, -ENOENT);
	cr_assert_eq(errno, EXDEV);
	p = tc_load("use sdp server * *:*");
	cr_assert_eq(errno, EXDEV);
	cr_assert_eq(tc_m(p, S, "a", "1.1.1.1", 1), SDP);
	cr_assert_eq(errno, EXDEV);
	conf_free(p);

	/* The safe policy and NULL may be freed. */
	conf_free(NULL);
	conf_load_string("t.conf", "bogus", &p, NULL, 0);
	conf_free(p);
	conf_free(p);
	tc_assert_safe(p);
}

/* The safe policy applies nothing, even what came before the error. */
Test(conf, safe_policy_after_error)
{
	struct conf_policy *p = NULL;
	char err[256];
	int ret = conf_load_string("t.conf",
				   "log min-level 1 destination file /tmp/x\n"
				   "set recv_bufs 32\n"
				   "transport enable tcp-fallback\n"
				   "use sdp server * *:*\n"
				   "use sdp client * *:*\n"
				   "use sdp client * *:99999\n",
				   &p, err, sizeof(err));

	cr_assert_eq(ret, -EINVAL);
	cr_assert_str_eq(err, "t.conf:6:20: port '99999' is out of range (0 to 65535)");
	tc_assert_safe(p);
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
}

/* --- files ------------------------------------------------------------------------ */

Test(conf, load_file)
{
	static const char text[] = "use sdp server * *:5001\nlog min-level 8\n";
	const char *path = tc_file("good.conf", text, sizeof(text) - 1);
	struct conf_policy *p = NULL;
	char err[256] = "untouched";

	cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), 0);
	cr_assert_str_eq(err, "");
	cr_assert_eq(tc_m(p, S, "a", "1.1.1.1", 5001), SDP);
	cr_assert_eq(conf_log_min_level(p), 8);
	conf_free(p);

	/* /dev/null is an empty policy, not an error. */
	cr_assert_eq(conf_load_file("/dev/null", &p, err, sizeof(err)), 0);
	cr_assert_eq(tc_m(p, S, "a", "1.1.1.1", 5001), BOTH);
	conf_free(p);
}

Test(conf, file_errors)
{
	struct conf_policy *p = NULL;
	char err[256], want[256];
	const char *path;

	cr_assert_eq(conf_load_file("/nonexistent/sdp.conf", &p, err, sizeof(err)), -ENOENT);
	cr_assert_str_eq(err, "/nonexistent/sdp.conf: cannot open: No such file or directory");
	tc_assert_safe(p);

	cr_assert_eq(conf_load_file("/", &p, err, sizeof(err)), -EISDIR);
	cr_assert_str_eq(err, "/: is a directory, not a policy file");
	tc_assert_safe(p);

	path = tc_file("f", "x", 1);
	snprintf(want, sizeof(want), "%s/sdp.conf", path);
	cr_assert_eq(conf_load_file(want, &p, err, sizeof(err)), -ENOTDIR);
	tc_assert_safe(p);

	/* A FIFO would block a program's start-up until someone wrote. */
	snprintf(want, sizeof(want), "%s/fifo", tc_dir);
	cr_assert_eq(mkfifo(want, 0600), 0);
	cr_assert_eq(conf_load_file(want, &p, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, strcat(want, ": not a regular file"));
	tc_assert_safe(p);

	/* Opens, then fails to read. */
	cr_assert_eq(conf_load_file("/proc/self/mem", &p, err, sizeof(err)), -EIO);
	cr_assert_str_eq(err, "/proc/self/mem: cannot read: Input/output error");
	tc_assert_safe(p);

	cr_assert_eq(conf_load_file(NULL, &p, err, sizeof(err)), -EINVAL);
	tc_assert_safe(p);
}

Test(conf, file_without_permission)
{
	const char *path = tc_file("secret.conf", "use sdp server * *:*\n", 21);
	int status;
	pid_t pid;

	cr_assert_eq(chmod(path, 0), 0);
	cr_assert_eq(chmod(tc_dir, 0755), 0);
	/* root reads anything: try as nobody, in a child, so that this
	 * process can still clean up. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct conf_policy *p = NULL;
		char err[256], want[300];
		int ret;

		if (geteuid() == 0 && setresuid(65534, 65534, 65534))
			_exit(2);
		ret = conf_load_file(path, &p, err, sizeof(err));
		snprintf(want, sizeof(want), "%s: cannot open: Permission denied", path);
		if (ret != -EACCES || strcmp(err, want))
			_exit(3);
		if (conf_match(p, S, "a", NULL, 0) != TCP || conf_may_use_sdp(p, S, "a"))
			_exit(4);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0);
}

Test(conf, nul_bytes_and_control_characters)
{
	static const char nul[] = "use sdp server * *:*\nuse sdp\0 server * *:*\n";
	static const char bell[] = "\n\nlog \a\n";
	struct conf_policy *p = NULL;
	char err[256], want[300];
	const char *path = tc_file("nul.conf", nul, sizeof(nul) - 1);

	cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2:8: NUL byte (is this a text file?)", path);
	cr_assert_str_eq(err, want);
	tc_assert_safe(p);

	path = tc_file("bell.conf", bell, sizeof(bell) - 1);
	cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:3:5: control character 0x07", path);
	cr_assert_str_eq(err, want);

	tc_err("use sdp server * *:*\x7f", "t.conf:1:21: control character 0x7f");
	tc_err("log\v", "t.conf:1:4: control character 0x0b");
}

Test(conf, line_and_file_limits)
{
	struct conf_policy *p = NULL;
	char err[256], want[300];
	size_t big = CONF_FILE_MAX + 1;
	char *text = malloc(big + 16);

	cr_assert_not_null(text);
	/* A comment line of exactly CONF_LINE_MAX bytes, with CR LF. */
	memset(text, '#', CONF_LINE_MAX);
	strcpy(text + CONF_LINE_MAX, "\r\nuse sdp server * *:*\n");
	p = tc_load(text);
	cr_assert_eq(tc_m(p, S, "a", "1.1.1.1", 1), SDP);
	conf_free(p);
	/* One more is refused, comment or not. */
	memset(text, '#', CONF_LINE_MAX + 1);
	strcpy(text + CONF_LINE_MAX + 1, "\n");
	tc_err(text, "t.conf:1:4097: line longer than 4096 bytes");
	/* Not only comments: the second line is 4097 bytes of statement. */
	strcpy(text, "\nset log_file ");
	memset(text + 14, 'x', CONF_LINE_MAX + 1 - 13);
	strcpy(text + CONF_LINE_MAX + 2, "\r\n");
	tc_err(text, "t.conf:2:4097: line longer than 4096 bytes");

	/* The file as a whole: CONF_FILE_MAX bytes, then one more. */
	for (size_t i = 0; i < big; i++)
		text[i] = (i % 64 == 63) ? '\n' : '#';
	const char *path = tc_file("big.conf", text, big - 1);
	cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), 0, "%s", err);
	conf_free(p);
	path = tc_file("big.conf", text, big);
	cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), -EFBIG);
	snprintf(want, sizeof(want), "%s: larger than 1048576 bytes", path);
	cr_assert_str_eq(err, want);
	tc_assert_safe(p);
	free(text);
}

/* The file installed with libsdp, and the man page's examples. */
Test(conf, shipped_file_and_examples)
{
	static const struct tc_conn man[] = {
		{ S, "sshd", "0.0.0.0", 22, TCP },
		{ C, "ssh", "192.168.10.1", 22, TCP },
		{ C, "scp", "192.168.10.1", 22, SDP },
		{ C, "scp", "1234:5678::9", 22, SDP },
	};
	static const struct tc_conn man_tcpf[] = {
		{ S, "memcached", "::", 11211, SDP },
		{ C, "x", "fd00:10::1", 11211, SDP },
		{ C, "x", "fd00:10::1", 11212, TCP },
	};
	static const struct tc_conn ofed[] = {
		{ S, "ttcp", "0.0.0.0", 5001, SDP },
		{ S, "ttcp-x", "0.0.0.0", 23, TCP },
	};
	static const struct tc_conn shipped[] = {
		{ S, "anything", "0.0.0.0", 80, BOTH },
		{ C, "anything", "fd00::1", 80, BOTH },
	};
	const char *srcdir = getenv("top_srcdir");
	char path[512], err[256];
	const char *logpath;
	struct conf_policy *p = NULL;

	if (srcdir) {
		snprintf(path, sizeof(path), "%s/conf/sdp.conf", srcdir);
		cr_assert_eq(conf_load_file(path, &p, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(conf_log_min_level(p), 9);
		cr_assert_eq(conf_log_destination(p, &logpath), CONF_LOG_DEST_STDERR);
		cr_assert_str_eq(conf_transports(p), "shm,ib,iwarp");
		TC_CHECK(p, shipped);
		conf_free(p);
	}

	TC_POLICY("log min-level 7 destination file libsdp.log\n"
		  "use tcp server sshd *:*\n"
		  "use tcp client ssh *:22\n"
		  "use sdp client * 192.168.10.0/24:*\n"
		  "use sdp client * 1234:5678::0/64:*\n"
		  "use both server * *:*\n"
		  "use both client * *:*\n", man);
	p = tc_load("transport enable tcp-fallback\n"
		    "set connect_timeout_ms 2000\n"
		    "use sdp server memcached *:11211\n"
		    "use sdp client * [fd00:10::]/64:11211\n"
		    "use tcp client * *:*\n");
	TC_CHECK(p, man_tcpf);
	cr_assert_str_eq(conf_transports(p), "shm,ib,iwarp,tcp-fallback");
	conf_free(p);
	/* OFED's documented examples, unchanged. */
	TC_POLICY("use sdp connect * 192.168.1.0/24:*\n"
		  "use sdp connect * 1234:5678::0/64:*\n"
		  "use sdp listen ttcp *:5001\n"
		  "use tcp server ttcp* *:22-25\n"
		  "use both server * *:8080\n"
		  "use both connect * 11.4.8.0/24:22\n"
		  "log min-level 9 destination file libsdp.log\n", ofed);
}

/* --- fuzz ---------------------------------------------------------------------------- */

static const char *const tc_corpus[] = {
	"use both server * *:*",
	"use sdp client ttcp* 192.168.1.0/24:5000-5010 # c",
	"use tcp listen \"a b\" [fd00::1]/64:80",
	"use sdp connect * 1234:5678::0/64:*",
	"use both server * * : 1 - 2",
	"log min-level 7 destination file /tmp/x.log",
	"log destination syslog min-level 3",
	"set recv_bufs 32",
	"set log_file \"/tmp/a b\"",
	"transport enable tcp-fallback",
	"transport disable ib",
	"use sdp server [[:alpha:]]?[!x]*\\* ::ffff:10.0.0.0/104:0-65535",
	"# comment",
	"",
};

static void tc_mutate(char *line, size_t *len, size_t cap, unsigned int *seed)
{
	static const char special[] = ":/[]#\"\\-*?! \t\r0123456789abcdefABCDEF.x\xff\x80\x01";
	int ops = 1 + rand_r(seed) % 4;

	for (int o = 0; o < ops; o++) {
		size_t at = *len ? (size_t)rand_r(seed) % (*len + 1) : 0;
		char c = special[rand_r(seed) % (sizeof(special) - 1)];

		switch (rand_r(seed) % 6) {
		case 0:	/* replace a byte */
			if (at < *len)
				line[at] = c;
			break;
		case 1:	/* insert a byte */
			if (*len + 1 < cap) {
				memmove(line + at + 1, line + at, *len - at);
				line[at] = c;
				(*len)++;
			}
			break;
		case 2:	/* delete a run */
			if (at < *len) {
				size_t n = 1 + (size_t)rand_r(seed) % (*len - at);

				memmove(line + at, line + at + n, *len - at - n);
				*len -= n;
			}
			break;
		case 3:	/* truncate */
			*len = at;
			break;
		case 4: {	/* splice in a piece of another line */
			const char *src = tc_corpus[rand_r(seed) % NELEM(tc_corpus)];
			size_t sl = strlen(src), from = sl ? (size_t)rand_r(seed) % sl : 0;
			size_t n = sl - from;

			if (*len + n < cap) {
				memmove(line + at + n, line + at, *len - at);
				memcpy(line + at, src + from, n);
				*len += n;
			}
			break;
		}
		default:	/* a random byte anywhere, even a NUL or a newline */
			if (at < *len)
				line[at] = (char)rand_r(seed);
		}
	}
}

static void tc_check_outcome(int ret, struct conf_policy *p, const char *err,
			     const char *name)
{
	cr_assert(ret == 0 || ret == -EINVAL, "ret %d", ret);
	cr_assert_not_null(p);
	if (ret) {
		cr_assert_eq(strncmp(err, name, strlen(name)), 0, "%s", err);
		for (const char *c = err; *c; c++)
			cr_assert(*c >= 0x20 && *c < 0x7f, "unprintable in: %s", err);
		cr_assert_eq(tc_m(p, S, "x", "10.0.0.1", 1), TCP);
		cr_assert_eq(tc_m(p, C, "x", "::1", 1), TCP);
		return;
	}
	cr_assert_str_eq(err, "");
	for (int role = 0; role < 2; role++) {
		enum conf_use u = tc_m(p, (enum conf_role)role, "ttcp", "192.168.1.5", 5005);

		cr_assert(u >= TCP && u <= BOTH);
		u = tc_m(p, (enum conf_role)role, "a b", "fd00::1", 80);
		cr_assert(u >= TCP && u <= BOTH);
	}
	(void)conf_may_use_sdp(p, S, "x");
	cr_assert_leq(conf_log_min_level(p), 9);
	cr_assert_not_null(conf_transports(p));
}

Test(conf, fuzz_never_crashes)
{
	unsigned int seed = 20240611;
	char line[8192], err[512], text[4 * sizeof(line)];
	int accepted = 0, refused = 0;

	for (int i = 0; i < 20000; i++) {
		const char *base = tc_corpus[rand_r(&seed) % NELEM(tc_corpus)];
		size_t len = strlen(base);
		struct conf_policy *p = NULL;
		int ret;

		memcpy(line, base, len);
		tc_mutate(line, &len, sizeof(line) - 1, &seed);
		line[len] = '\0';
		/* As a string (up to the first NUL) ... */
		ret = conf_load_string("fuzz", line, &p, err, sizeof(err));
		tc_check_outcome(ret, p, err, "fuzz");
		ret ? refused++ : accepted++;
		conf_free(p);
		/* ... and, now and then, several lines at once through a file,
		 * NULs and all. */
		if (i % 50 == 0) {
			size_t tl = 0;

			for (int l = 0; l < 4; l++) {
				base = tc_corpus[rand_r(&seed) % NELEM(tc_corpus)];
				len = strlen(base);
				memcpy(line, base, len);
				tc_mutate(line, &len, sizeof(line) - 1, &seed);
				memcpy(text + tl, line, len);
				tl += len;
				text[tl++] = rand_r(&seed) % 3 ? '\n' : '\r';
			}
			const char *path = tc_file("fuzz.conf", text, tl);
			ret = conf_load_file(path, &p, err, sizeof(err));
			tc_check_outcome(ret, p, err, path);
			conf_free(p);
		}
	}
	/* The mutations must exercise both outcomes. */
	cr_assert_gt(accepted, 1000);
	cr_assert_gt(refused, 1000);
}

Test(conf, fuzz_long_and_pathological_lines)
{
	char *text = malloc(CONF_LINE_MAX + 64);
	unsigned int seed = 7;
	struct conf_policy *p;
	int ret;

	cr_assert_not_null(text);
	/* Lines just under the limit made of the characters that drive the
	 * address and glob scanners longest. */
	static const char *const fill[] = { ":", "[", "*", "\"", "-", " :", "a*", "[!", "0" };
	for (size_t f = 0; f < NELEM(fill); f++) {
		for (int prefix = 0; prefix < 3; prefix++) {
			static const char *const starts[] = {
				"use sdp server ", "use sdp server * ", "set log_file ",
			};
			size_t o = (size_t)snprintf(text, CONF_LINE_MAX + 64, "%s", starts[prefix]);
			while (o + strlen(fill[f]) < CONF_LINE_MAX) {
				memcpy(text + o, fill[f], strlen(fill[f]));
				o += strlen(fill[f]);
			}
			text[o] = '\0';
			ret = conf_load_string("long", text, &p, NULL, 0);
			cr_assert(ret == 0 || ret == -EINVAL);
			conf_free(p);
		}
	}
	/* A glob of stars against a long name stays quick (one backtrack
	 * point). */
	ret = conf_load_string("long", "use sdp server *a*a*a*a*a*a*a*a*a*a*b *:*", &p, NULL, 0);
	cr_assert_eq(ret, 0);
	memset(text, 'a', 4000);
	text[4000] = '\0';
	struct sockaddr_storage ss;
	socklen_t len = tc_sa(&ss, "1.1.1.1", 1);
	cr_assert_eq(conf_match(p, S, text, (struct sockaddr *)&ss, len), BOTH);
	conf_free(p);
	(void)seed;
	free(text);
}
