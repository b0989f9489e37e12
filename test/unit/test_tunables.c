/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests of common/tunables.c.  The expectations are generated from
 * tunables.def itself, so a tunable added there is covered without
 * touching this file.
 *
 * Each Criterion test runs in its own process (the default), but the
 * fixture still scrubs SDP_* variables on both ends: the harness exports
 * SDP_TRANSPORTS, and a --no-fork run must not leak one test's setenv
 * into the next.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "tunables.h"

enum { TT_STR, TT_INT };

static const struct {
	const char *name;
	int type;
	const char *def;
	long min, max;
	const char *help;
} tt_table[TUN_COUNT] = {
#define TUNABLE(id, type, def, min, max, help) \
	[TUN_##id] = { #id, TT_##type, def, min, max, help },
#include "tunables.def"
#undef TUNABLE
};

/* SDP_<NAME>, spelled independently of tunables.c. */
static void tt_env_name(int id, char *out, size_t cap)
{
	size_t n = (size_t)snprintf(out, cap, "SDP_%s", tt_table[id].name);

	cr_assert_lt(n, cap);
	for (size_t i = 4; out[i]; i++)
		out[i] = (char)toupper((unsigned char)out[i]);
}

static void tt_clean_env(void)
{
	char env[64];

	for (int id = 0; id < TUN_COUNT; id++) {
		tt_env_name(id, env, sizeof(env));
		unsetenv(env);
	}
	unsetenv("LIBSDP_CONFIG_FILE");
	tun_reset_as(0);
}

static long tt_default_int(int id)
{
	return strtol(tt_table[id].def, NULL, 0);
}

/* tun_set() of integer tunable id to v, written in decimal. */
static int tt_set_int(int id, long v)
{
	char text[32];

	snprintf(text, sizeof(text), "%ld", v);
	return tun_set(tt_table[id].name, text);
}

/* After tun_reset(), with nothing in the environment: the defaults again. */
static void tt_assert_reset_to_defaults(void)
{
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
	cr_assert_str_eq(tun_str(TUN_transports), "tcp-fallback");
}

TestSuite(tunables, .init = tt_clean_env, .fini = tt_clean_env);

Test(tunables, defaults)
{
	for (int id = 0; id < TUN_COUNT; id++) {
		if (tt_table[id].type == TT_INT) {
			cr_assert_eq(tun_int(id), tt_default_int(id), "%s",
				     tt_table[id].name);
			/* A default outside its own range would be refused
			 * by tun_set: the table must be self-consistent. */
			cr_assert_geq(tt_default_int(id), tt_table[id].min, "%s",
				      tt_table[id].name);
			cr_assert_leq(tt_default_int(id), tt_table[id].max, "%s",
				      tt_table[id].name);
		} else {
			cr_assert_str_eq(tun_str(id), tt_table[id].def, "%s",
					 tt_table[id].name);
		}
	}
	/* The values other layers rely on by name. */
	cr_assert_eq(tun_int(TUN_log_level), 9);
	cr_assert_str_eq(tun_str(TUN_log_file), "");
	cr_assert_str_eq(tun_str(TUN_transports), "tcp-fallback");
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
}

Test(tunables, environment_overrides_default)
{
	setenv("SDP_RECV_BUFS", "64", 1);
	setenv("SDP_LOG_FILE", "/tmp/sdp-test.log", 1);
	setenv("SDP_TCPF_PORT_OFFSET", "0x100", 1);
	setenv("SDP_LOG_LEVEL", "1", 1);
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 64);
	cr_assert_str_eq(tun_str(TUN_log_file), "/tmp/sdp-test.log");
	cr_assert_eq(tun_int(TUN_tcpf_port_offset), 256);
	cr_assert_eq(tun_int(TUN_log_level), 1);
	/* The others keep their defaults. */
	cr_assert_eq(tun_int(TUN_send_bufs), 16);

	/* Range ends are inclusive. */
	setenv("SDP_RECV_BUFS", "1024", 1);
	setenv("SDP_SEND_BUFS", "4", 1);
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 1024);
	cr_assert_eq(tun_int(TUN_send_bufs), 4);

	/* An empty string is a valid value for a string tunable. */
	setenv("SDP_TRANSPORTS", "", 1);
	tun_reset();
	cr_assert_str_eq(tun_str(TUN_transports), "");

	/* Unsetting and resetting goes back to the default. */
	unsetenv("SDP_RECV_BUFS");
	unsetenv("SDP_TRANSPORTS");
	tt_assert_reset_to_defaults();
}

Test(tunables, every_tunable_has_its_variable)
{
	char env[64];

	for (int id = 0; id < TUN_COUNT; id++) {
		tt_env_name(id, env, sizeof(env));
		if (tt_table[id].type == TT_INT) {
			char v[32];
			/* The end of the range that is not the default. */
			long want = tt_default_int(id) == tt_table[id].max ?
				    tt_table[id].min : tt_table[id].max;

			snprintf(v, sizeof(v), "%ld", want);
			setenv(env, v, 1);
			tun_reset();
			cr_assert_eq(tun_int(id), want, "%s", env);
		} else {
			setenv(env, "from-env", 1);
			tun_reset();
			cr_assert_str_eq(tun_str(id), "from-env", "%s", env);
		}
		unsetenv(env);
	}
}

Test(tunables, malformed_environment_ignored)
{
	static const char *const bad[] = {
		"", "abc", "12abc", "16 ", "1.5", "0x", "-", "3", "1025", "-16",
		"99999999999999999999999", "0x7fffffffffffffffff",
	};
	char longstr[300];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("SDP_RECV_BUFS", bad[i], 1);
		tun_reset();
		cr_assert_eq(tun_int(TUN_recv_bufs), 16, "SDP_RECV_BUFS=\"%s\"", bad[i]);
	}
	/* A bad variable spoils only itself. */
	setenv("SDP_RECV_BUFS", "junk", 1);
	setenv("SDP_SEND_BUFS", "32", 1);
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
	cr_assert_eq(tun_int(TUN_send_bufs), 32);

	/* A string too long for the value buffer keeps the default. */
	memset(longstr, 'x', sizeof(longstr) - 1);
	longstr[sizeof(longstr) - 1] = '\0';
	setenv("SDP_LOG_FILE", longstr, 1);
	setenv("SDP_TRANSPORTS", longstr, 1);
	tun_reset();
	cr_assert_str_eq(tun_str(TUN_log_file), "");
	cr_assert_str_eq(tun_str(TUN_transports), "tcp-fallback");
}

Test(tunables, set_by_name)
{
	cr_assert_eq(tun_set("recv_bufs", "32"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 32);
	cr_assert_eq(tun_set("recv_bufs", "0x40"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 64);
	cr_assert_eq(tun_set("transports", "ib,tcp-fallback"), 0);
	cr_assert_str_eq(tun_str(TUN_transports), "ib,tcp-fallback");
	cr_assert_eq(tun_set("log_file", ""), 0);
	cr_assert_str_eq(tun_str(TUN_log_file), "");
	/* The last set wins. */
	cr_assert_eq(tun_set("recv_bufs", "8"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 8);
	/* And tun_reset forgets all of them. */
	tt_assert_reset_to_defaults();
}

Test(tunables, set_checks_range_and_syntax)
{
	char longstr[300];

	for (int id = 0; id < TUN_COUNT; id++) {
		long min = tt_table[id].min, max = tt_table[id].max;

		if (tt_table[id].type != TT_INT)
			continue;
		cr_assert_eq(tt_set_int(id, min - 1), -EINVAL, "%s=%ld", tt_table[id].name, min - 1);
		cr_assert_eq(tt_set_int(id, max + 1), -EINVAL, "%s=%ld", tt_table[id].name, max + 1);
		cr_assert_eq(tun_int(id), tt_default_int(id), "%s changed by a refused set",
			     tt_table[id].name);
		cr_assert_eq(tt_set_int(id, min), 0);
		cr_assert_eq(tun_int(id), min);
		cr_assert_eq(tt_set_int(id, max), 0);
		cr_assert_eq(tun_int(id), max);
	}

	tun_reset();
	cr_assert_eq(tun_set("recv_bufs", "abc"), -EINVAL);
	cr_assert_eq(tun_set("recv_bufs", ""), -EINVAL);
	cr_assert_eq(tun_set("recv_bufs", "16k"), -EINVAL);
	cr_assert_eq(tun_set("recv_bufs", "99999999999999999999999"), -EINVAL);
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);

	memset(longstr, 'y', sizeof(longstr) - 1);
	longstr[sizeof(longstr) - 1] = '\0';
	cr_assert_eq(tun_set("log_file", longstr), -EINVAL);
	cr_assert_str_eq(tun_str(TUN_log_file), "");
	/* 255 characters still fit. */
	longstr[255] = '\0';
	cr_assert_eq(tun_set("log_file", longstr), 0);
	cr_assert_str_eq(tun_str(TUN_log_file), longstr);
}

Test(tunables, set_unknown_name)
{
	cr_assert_eq(tun_set("no_such_tunable", "1"), -ENOENT);
	cr_assert_eq(tun_set("", "1"), -ENOENT);
	/* Names are the .def ids exactly, not the variable names. */
	cr_assert_eq(tun_set("RECV_BUFS", "32"), -ENOENT);
	cr_assert_eq(tun_set("SDP_RECV_BUFS", "32"), -ENOENT);
	cr_assert_eq(tun_set("recv_buf", "32"), -ENOENT);
	cr_assert_eq(tun_set("recv_bufsx", "32"), -ENOENT);
	/* Unknown wins over malformed: the name is looked at first. */
	cr_assert_eq(tun_set("no_such_tunable", "junk"), -ENOENT);
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
}

/* tun_check() says what tun_set() would, and sets nothing. */
Test(tunables, check_agrees_with_set)
{
	static const char *const values[] = { "", "0", "1", "16", "0x10", "abc", "-1", "65536" };
	char longstr[300];
	struct tun_limits lim;

	memset(longstr, 'y', sizeof(longstr) - 1);
	longstr[sizeof(longstr) - 1] = '\0';
	for (int id = 0; id < TUN_COUNT; id++) {
		const char *name = tt_table[id].name;
		char v[32];

		cr_assert_neq(tun_check(name, "", &lim), -ENOENT, "%s", name);
		cr_assert_eq(lim.is_int, tt_table[id].type == TT_INT, "%s", name);
		if (lim.is_int) {
			cr_assert_eq(lim.min, tt_table[id].min, "%s", name);
			cr_assert_eq(lim.max, tt_table[id].max, "%s", name);
			snprintf(v, sizeof(v), "%ld", tt_table[id].max + 1);
			cr_assert_eq(tun_check(name, v, NULL), -EINVAL, "%s=%s", name, v);
			snprintf(v, sizeof(v), "%ld", tt_table[id].min);
			cr_assert_eq(tun_check(name, v, NULL), 0, "%s=%s", name, v);
		} else {
			cr_assert_eq(lim.max_len, 255, "%s", name);
			cr_assert_eq(tun_check(name, longstr, NULL), -EINVAL, "%s", name);
		}
		for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
			int checked = tun_check(name, values[i], NULL);

			tun_reset();
			cr_assert_eq(checked, tun_set(name, values[i]), "%s=\"%s\"", name,
				     values[i]);
		}
	}
	tun_reset();
	cr_assert_eq(tun_check("no_such_tunable", "1", &lim), -ENOENT);
	cr_assert_eq(tun_check("recv_bufs", "32", NULL), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 16, "tun_check set a value");
	cr_assert_eq(tun_check("transports", "ib", NULL), 0);
	cr_assert_str_eq(tun_str(TUN_transports), "tcp-fallback", "tun_check set a value");
}

Test(tunables, environment_wins_over_set)
{
	setenv("SDP_RECV_BUFS", "64", 1);
	setenv("SDP_TRANSPORTS", "ib", 1);
	tun_reset();
	/* Accepted (the value is valid) but shadowed by the environment. */
	cr_assert_eq(tun_set("recv_bufs", "32"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 64);
	cr_assert_eq(tun_set("transports", "tcp-fallback"), 0);
	cr_assert_str_eq(tun_str(TUN_transports), "ib");
	/* Still validated, even though it would not take effect. */
	cr_assert_eq(tun_set("recv_bufs", "100000"), -EINVAL);
	/* Other tunables are still settable. */
	cr_assert_eq(tun_set("send_bufs", "32"), 0);
	cr_assert_eq(tun_int(TUN_send_bufs), 32);
}

Test(tunables, malformed_environment_does_not_block_set)
{
	setenv("SDP_RECV_BUFS", "lots", 1);
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 16);
	cr_assert_eq(tun_set("recv_bufs", "32"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 32);
}

Test(tunables, list_mentions_everything)
{
	char *text = NULL;
	size_t size = 0;
	FILE *f;

	setenv("SDP_SEND_BUFS", "48", 1);
	setenv("SDP_LOG_FILE", "/var/log/sdp-list-test", 1);
	tun_reset();
	f = open_memstream(&text, &size);
	cr_assert_not_null(f);
	tun_list(f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_not_null(text);

	for (int id = 0; id < TUN_COUNT; id++) {
		char env[64];

		tt_env_name(id, env, sizeof(env));
		cr_assert_not_null(strstr(text, env), "%s missing from:\n%s", env, text);
		cr_assert_not_null(strstr(text, tt_table[id].name));
		cr_assert_not_null(strstr(text, tt_table[id].help), "help of %s",
				   tt_table[id].name);
	}
	/* Current values, not only defaults. */
	cr_assert_not_null(strstr(text, "48 (default 16"));
	cr_assert_not_null(strstr(text, "\"/var/log/sdp-list-test\""));
	free(text);
}

/* No fixture: the first use must read the environment by itself. */
Test(tunables_lazy, first_use_reads_environment)
{
	unsetenv("SDP_SEND_BUFS");
	setenv("SDP_RECV_BUFS", "128", 1);
	cr_assert_eq(tun_int(TUN_recv_bufs), 128);
	cr_assert_eq(tun_int(TUN_send_bufs), 16);
	/* Later changes to the environment wait for tun_reset. */
	setenv("SDP_RECV_BUFS", "256", 1);
	cr_assert_eq(tun_int(TUN_recv_bufs), 128);
	tun_reset();
	cr_assert_eq(tun_int(TUN_recv_bufs), 256);
	unsetenv("SDP_RECV_BUFS");
	tun_reset();
}

/* --- what is said about the environment ---------------------------------------------- */

static void tt_report_twice(void)
{
	tun_report_env();
	tun_report_env();
}

/* stdout and stderr into files of their own while fn runs; what each got,
 * the logger's line prefix ("libsdp[pid.tid] time error SUBSYS: ") cut
 * from stderr's lines. */
static void tt_capture(void (*fn)(void), char *out, size_t outcap, char *err, size_t errcap)
{
	FILE *fo = tmpfile(), *fe = tmpfile();
	int o = dup(1), e = dup(2);

	cr_assert(fo && fe && o >= 0 && e >= 0);
	fflush(stdout);
	fflush(stderr);
	cr_assert_geq(dup2(fileno(fo), 1), 0);
	cr_assert_geq(dup2(fileno(fe), 2), 0);
	fn();
	dup2(o, 1);
	dup2(e, 2);
	close(o);
	close(e);
	rewind(fo);
	out[fread(out, 1, outcap - 1, fo)] = '\0';
	fclose(fo);
	rewind(fe);
	size_t n = 0;
	char line[1024];

	while (fgets(line, sizeof(line), fe)) {
		const char *m = strstr(line, " error ");

		cr_assert(m && strchr(m, ':'), "not a line of the logger's: %s", line);
		m = strchr(m, ':') + 2;
		n += (size_t)snprintf(err + n, errcap - n, "%s", m);
	}
	err[n < errcap ? n : errcap - 1] = '\0';
	fclose(fe);
}

/* What tun_report_env() says (it says things once: it runs twice). */
static void tt_report(char *out, size_t outcap, char *err, size_t errcap)
{
	tt_capture(tt_report_twice, out, outcap, err, errcap);
}

/* Each malformed variable is reported once, on stderr (never stdout),
 * with its value, the range, and the value that applies instead. */
Test(tunables, malformed_environment_reported)
{
	char longstr[300], out[256], err[4096];
	static const struct {
		const char *var, *value, *said;
	} cases[] = {
		{ "SDP_RECV_BUFS", "abc",
		  "SDP_RECV_BUFS=\"abc\" ignored: not an integer from 4 to 1024; recv_bufs is 16 (default 16)\n" },
		{ "SDP_BUF_SIZE", "1",
		  "SDP_BUF_SIZE=\"1\" ignored: not an integer from 1040 to 1048592; buf_size is 262160 (default 262160)\n" },
		{ "SDP_LOG_LEVEL", "zzz",
		  "SDP_LOG_LEVEL=\"zzz\" ignored: not an integer from 1 to 9; log_level is 9 (default 9)\n" },
		{ "SDP_SEND_BUFS", "",
		  "SDP_SEND_BUFS=\"\" ignored: not an integer from 4 to 1024; send_bufs is 16 (default 16)\n" },
		/* What the value holds is shown as one clean line. */
		{ "SDP_SPIN_US", "1\n2\"\x1b\\",
		  "SDP_SPIN_US=\"1\\x0a2\\x22\\x1b\\x5c\" ignored: not an integer from 0 to 100000; spin_us is 0 (default 0)\n" },
		{ "SDP_TRANSPORTS", NULL,
		  "SDP_TRANSPORTS=\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" ignored: longer than 255 bytes; transports is \"tcp-fallback\" (default \"tcp-fallback\")\n" },
	};

	memset(longstr, 'x', sizeof(longstr) - 1);
	longstr[sizeof(longstr) - 1] = '\0';
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setenv(cases[i].var, cases[i].value ? cases[i].value : longstr, 1);
		tun_reset();
		tt_report(out, sizeof(out), err, sizeof(err));
		cr_assert_str_eq(out, "", "%s: stdout got: %s", cases[i].var, out);
		cr_assert_str_eq(err, cases[i].said, "%s said: %s", cases[i].var, err);
		unsetenv(cases[i].var);
	}
	/* Several at once: one line each; good ones say nothing. */
	setenv("SDP_RECV_BUFS", "abc", 1);
	setenv("SDP_SEND_BUFS", "32", 1);
	setenv("SDP_LOG_LEVEL", "zzz", 1);
	tun_reset();
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_str_eq(err, "SDP_LOG_LEVEL=\"zzz\" ignored: not an integer from 1 to 9; log_level is 9 (default 9)\n"
			      "SDP_RECV_BUFS=\"abc\" ignored: not an integer from 4 to 1024; recv_bufs is 16 (default 16)\n");
	/* What sdp.conf set is what applies instead. */
	tun_reset();
	cr_assert_eq(tun_set("recv_bufs", "32"), 0);
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_not_null(strstr(err, "recv_bufs is 32 (default 16)\n"), "%s", err);
	/* Nothing malformed: nothing said. */
	unsetenv("SDP_RECV_BUFS");
	unsetenv("SDP_LOG_LEVEL");
	tun_reset();
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_str_eq(err, "");
	cr_assert_str_eq(out, "");
}

/* In secure execution no variable of libsdp's is taken, good or bad, and
 * one line names them (never their values). */
Test(tunables, secure_execution_ignores_environment)
{
	char out[256], err[4096];

	setenv("SDP_RECV_BUFS", "64", 1);
	setenv("SDP_LOG_FILE", "/nonexistent/sdp-secure-victim", 1);
	setenv("SDP_SEND_BUFS", "junk", 1);
	setenv("LIBSDP_CONFIG_FILE", "/etc/shadow", 1);

	tun_reset_as(1);
	for (int id = 0; id < TUN_COUNT; id++) {
		if (tt_table[id].type == TT_INT)
			cr_assert_eq(tun_int(id), tt_default_int(id), "%s", tt_table[id].name);
		else
			cr_assert_str_eq(tun_str(id), tt_table[id].def, "%s", tt_table[id].name);
	}
	cr_assert_null(tun_getenv("LIBSDP_CONFIG_FILE"));
	cr_assert_null(tun_getenv("LIBSDP_CONFIG_FILE"));
	cr_assert_null(tun_getenv("LIBSDP_NOT_SET"));
	/* sdp.conf (the administrator's) still applies. */
	cr_assert_eq(tun_set("recv_bufs", "32"), 0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 32);
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_str_eq(out, "");
	cr_assert_str_eq(err, "secure execution (set-user-ID, set-group-ID or file capabilities): "
			      "the environment is not trusted, ignored: SDP_LOG_FILE SDP_RECV_BUFS "
			      "SDP_SEND_BUFS LIBSDP_CONFIG_FILE\n");

	/* The same environment, trusted: taken (the logger already writes
	 * to stderr, and stays there). */
	tun_reset_as(0);
	cr_assert_eq(tun_int(TUN_recv_bufs), 64);
	cr_assert_str_eq(tun_str(TUN_log_file), "/nonexistent/sdp-secure-victim");
	cr_assert_str_eq(tun_getenv("LIBSDP_CONFIG_FILE"), "/etc/shadow");
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_str_eq(err, "SDP_SEND_BUFS=\"junk\" ignored: not an integer from 4 to 1024; send_bufs is 16 (default 16)\n");

	/* Nothing set: nothing said. */
	tt_clean_env();
	tun_reset_as(1);
	cr_assert_null(tun_getenv("LIBSDP_CONFIG_FILE"));
	tt_report(out, sizeof(out), err, sizeof(err));
	cr_assert_str_eq(err, "");
}

/* The log file is never opened through a symbolic link; the logger says
 * so on stderr and stays there. */
Test(tunables, log_file_symlink_refused)
{
	char dir[] = "/tmp/sdp-tt-XXXXXX", link[64], target[64], out[256], err[1024], want[512];
	struct stat st;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(link, sizeof(link), "%s/sdp.log", dir);
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	cr_assert_eq(symlink(target, link), 0);
	setenv("SDP_LOG_FILE", link, 1);
	tun_reset();
	tt_capture(sdp_log_init, out, sizeof(out), err, sizeof(err));
	snprintf(want, sizeof(want), "cannot open the log file %s: %s; logging to stderr\n", link,
		 strerror(ELOOP));
	cr_assert_str_eq(err, want);
	cr_assert_str_eq(out, "");
	cr_assert_neq(lstat(target, &st), 0, "written through the symbolic link");
	unlink(link);
	rmdir(dir);
}
