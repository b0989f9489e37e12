/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conform: the differential conformance runner (doc/conformance.md).
 *
 *   conform TABLE [NAME...]    run the table's scenarios (or those named),
 *                              transcript on stdout
 *   conform --list TABLE       their names
 *   conform --serve            scenarios in table text on stdin, each ended
 *                              by a line "."; each transcript ended by "."
 *   conform --gen SEED [N [--all]]
 *                              print N random sequences from SEED on
 *   conform --random SEED N [--sdp-env "VAR=VALUE ..."] [--max-seconds S] [--all]
 *                              run N random sequences (seeds SEED...) in two
 *                              --serve workers, one with the environment
 *                              given (the preload), compare the transcripts,
 *                              shrink each difference and print it as a row;
 *                              --all: steps that show an expected difference
 *                              too (gen.c lists them)
 *
 * Exit status: 0; 1 when --random found differences; 2 on bad usage or a
 * scenario that does not parse.
 */
#include "conform.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* sockapi's util.c (linked for its names) wants it. */
const char *self_exe = "/proc/self/exe";

static int usage(void)
{
	fprintf(stderr, "usage: conform TABLE [NAME...] | --list TABLE | --serve | --gen SEED [N [--all]] |\n"
			"       --random SEED N [--sdp-env \"VAR=VALUE ...\"] [--max-seconds S] [--all]\n");
	return 2;
}

static int run_table(int argc, char **argv, bool list)
{
	struct scenario *v;
	int n, rc = 0;
	char err[512];

	if (table_load(argv[0], &v, &n, err, sizeof(err)) < 0) {
		fprintf(stderr, "conform: %s\n", err);
		return 2;
	}
	for (int i = 0; i < n; i++) {
		bool want = argc == 1;

		for (int j = 1; j < argc; j++)
			want |= strcmp(argv[j], v[i].name) == 0;
		if (!want)
			continue;
		if (list)
			printf("%s\n", v[i].name);
		else if (exec_scenario(&v[i], stdout) < 0)
			rc = 2;
	}
	table_free(v, n);
	return rc;
}

/* --- serving a coordinator ------------------------------------------------------- */

static int serve(void)
{
	char *text = NULL, *line = NULL;
	size_t cap = 0, len = 0, lcap = 0;
	ssize_t got;

	while ((got = getline(&line, &lcap, stdin)) > 0) {
		if (strcmp(line, ".\n") != 0) {
			if (len + (size_t)got + 1 > cap) {
				cap = (len + (size_t)got + 1) * 2;
				text = realloc(text, cap);
				if (!text)
					return 2;
			}
			memcpy(text + len, line, (size_t)got + 1);
			len += (size_t)got;
			continue;
		}
		struct scenario *v;
		int n;
		char err[512];

		if (table_parse(text ? text : "", "stdin", &v, &n, err, sizeof(err)) < 0) {
			printf("  SYNTAX ERROR: %s\n", err);
		} else {
			for (int i = 0; i < n; i++)
				exec_scenario(&v[i], stdout);
			table_free(v, n);
		}
		printf(".\n");
		fflush(stdout);
		len = 0;
		if (text)
			text[0] = '\0';
	}
	free(text);
	free(line);
	return 0;
}

/* --- the coordinator ---------------------------------------------------------------- */

struct worker {
	const char *label;
	char **env;		/* VAR=VALUE added for it */
	pid_t pid;
	int to, from;		/* its stdin, its stdout */
	char *buf;		/* what it wrote, not yet taken */
	size_t len, cap;
};

static int worker_start(struct worker *w)
{
	int in[2], out[2];

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -1;
	w->pid = fork();
	if (w->pid < 0)
		return -1;
	if (w->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		for (char **e = w->env; e && *e; e++)
			putenv(*e);
		execl("/proc/self/exe", "conform", "--serve", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	w->to = in[1];
	w->from = out[0];
	w->len = 0;
	return 0;
}

static void worker_stop(struct worker *w)
{
	if (w->pid <= 0)
		return;
	close(w->to);
	close(w->from);
	kill(w->pid, SIGKILL);
	waitpid(w->pid, NULL, 0);
	w->pid = 0;
}

static int write_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t r = write(fd, s, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		s += r;
		n -= (size_t)r;
	}
	return 0;
}

static char *scenario_text(const struct scenario *sc)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		abort();
	scenario_print(f, sc);
	fputs(".\n", f);
	fclose(f);
	return buf;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The transcript up to the "." line, within LIMIT_MS; a worker that dies
 * or hangs is restarted and the transcript says so. */
static char *worker_take(struct worker *w, int64_t deadline)
{
	for (;;) {
		char *end = NULL;

		if (w->len >= 2 && memcmp(w->buf, ".\n", 2) == 0)
			end = w->buf;
		else if (w->len)
			end = memmem(w->buf, w->len, "\n.\n", 3);
		if (end) {
			size_t n = (size_t)(end - w->buf) + (end == w->buf ? 0 : 1);
			char *t = strndup(w->buf, n);
			size_t rest = w->len - n - 2;

			memmove(w->buf, w->buf + n + 2, rest);
			w->len = rest;
			return t;
		}
		int64_t left = deadline - now_ms();
		struct pollfd p = { .fd = w->from, .events = POLLIN };
		int r = left > 0 ? poll(&p, 1, (int)left) : 0;

		if (r > 0) {
			if (w->len + 65536 > w->cap) {
				w->cap = (w->len + 65536) * 2;
				w->buf = realloc(w->buf, w->cap);
				if (!w->buf)
					abort();
			}
			ssize_t got = read(w->from, w->buf + w->len, w->cap - w->len - 1);

			if (got > 0) {
				w->len += (size_t)got;
				continue;
			}
		} else if (r < 0 && errno == EINTR) {
			continue;
		}
		/* Died (EOF) or hung (time): keep what it said, start anew. */
		char *t;
		int st = 0;
		bool hung = r == 0;

		if (hung)
			kill(w->pid, SIGKILL);
		waitpid(w->pid, &st, 0);
		w->pid = 0;
		if (asprintf(&t, "%.*s\n  WORKER %s: %s\n", (int)w->len, w->buf ? w->buf : "",
			     w->label,
			     hung ? "hung (killed)"
			     : WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited") < 0)
			abort();
		close(w->to);
		close(w->from);
		w->len = 0;
		if (worker_start(w) < 0) {
			perror("conform: restarting a worker");
			exit(2);
		}
		return t;
	}
}

struct pair_run {
	char *a, *b;
};

static int limit_ms;

/* Run SC on both workers at once; 1 if the transcripts differ. */
static int run_both(struct worker *w, const struct scenario *sc, struct pair_run *out)
{
	char *text = scenario_text(sc);
	int64_t deadline = now_ms() + limit_ms;

	if (write_all(w[0].to, text, strlen(text)) < 0 || write_all(w[1].to, text, strlen(text)) < 0) {
		/* A dead worker: take() sees its end. */
	}
	free(text);
	out->a = worker_take(&w[0], deadline);
	out->b = worker_take(&w[1], deadline);
	return strcmp(out->a, out->b) != 0;
}

static void pair_free(struct pair_run *p)
{
	free(p->a);
	free(p->b);
	p->a = p->b = NULL;
}

static bool differs(struct worker *w, const struct scenario *sc)
{
	struct pair_run p;
	int d = run_both(w, sc, &p);

	pair_free(&p);
	return d;
}

/* Lines of S (NUL-terminated in place). */
static int split_lines(char *s, char ***out)
{
	int n = 0, cap = 16;
	char **v = malloc(sizeof(char *) * (size_t)cap);

	for (char *p = s; v && *p;) {
		char *nl = strchr(p, '\n');

		if (n == cap)
			v = realloc(v, sizeof(char *) * (size_t)(cap *= 2));
		if (!v)
			break;
		v[n++] = p;
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	if (!v)
		abort();
	*out = v;
	return n;
}

/* A line diff (longest common subsequence): "-" native only, "+" the
 * other only. */
static void print_diff(const char *a, const char *b, const char *la, const char *lb)
{
	char *x = strdup(a), *y = strdup(b), **u, **v;
	int n, m;

	if (!x || !y)
		abort();
	n = split_lines(x, &u);
	m = split_lines(y, &v);
	int *t = calloc((size_t)(n + 1) * (size_t)(m + 1), sizeof(int));

	if (!t)
		abort();
#define T(i, j) t[(size_t)(i) * (size_t)(m + 1) + (size_t)(j)]
	for (int i = n - 1; i >= 0; i--)
		for (int j = m - 1; j >= 0; j--)
			T(i, j) = strcmp(u[i], v[j]) == 0 ? T(i + 1, j + 1) + 1
				  : T(i + 1, j) > T(i, j + 1) ? T(i + 1, j) : T(i, j + 1);
	printf("    --- %s\n    +++ %s\n", la, lb);
	int i = 0, j = 0;

	while (i < n || j < m) {
		if (i < n && j < m && strcmp(u[i], v[j]) == 0) {
			printf("     %s\n", u[i]);
			i++, j++;
		} else if (j >= m || (i < n && T(i + 1, j) >= T(i, j + 1))) {
			printf("    -%s\n", u[i++]);
		} else {
			printf("    +%s\n", v[j++]);
		}
	}
#undef T
	free(t);
	free(u);
	free(v);
	free(x);
	free(y);
}

/* Shrink SC (which differs) to a shorter or simpler sequence that still
 * differs: chunks of steps out, then each step simplified.  Takes SC. */
static struct scenario *shrink(struct worker *w, struct scenario *sc)
{
	bool changed = true;

	for (int pass = 0; changed && pass < 8; pass++) {
		changed = false;
		for (int chunk = sc->nsteps / 2; chunk >= 1; chunk /= 2)
			for (int i = 0; i + chunk <= sc->nsteps;) {
				struct scenario *c = gen_without(sc, i, chunk);

				if (c && differs(w, c)) {
					gen_free(sc);
					sc = c;
					changed = true;
				} else {
					gen_free(c);
					i += chunk;
				}
			}
		for (int i = 0; i < sc->nsteps; i++)
			for (int k = 0;;) {
				struct scenario *c = gen_simpler(sc, i, k);

				if (!c)
					break;
				if (differs(w, c)) {
					gen_free(sc);
					sc = c;
					changed = true;
				} else {
					gen_free(c);
					k++;
				}
			}
	}
	return sc;
}

static char **split_env(const char *s)
{
	char *copy = strdup(s), *save = NULL;
	char **v = calloc(strlen(s) / 2 + 2, sizeof(char *));
	int n = 0;

	if (!copy || !v)
		abort();
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
		v[n++] = t;
	return v;
}

static int random_run(uint64_t seed, long count, const char *sdp_env, long max_s)
{
	struct worker w[2] = { { .label = "native" }, { .label = "sdp" } };
	long done = 0, ndiff = 0, nsteps = 0;
	int64_t start = now_ms();
	bool have6 = exec_have_ipv6();

	if (sdp_env)
		w[1].env = split_env(sdp_env);
	else
		w[1].label = "native (again)";
	if (worker_start(&w[0]) < 0 || worker_start(&w[1]) < 0) {
		perror("conform: starting the workers");
		return 2;
	}
	for (long i = 0; i < count; i++) {
		char name[48];
		struct pair_run p;

		if (max_s > 0 && now_ms() - start > max_s * 1000) {
			printf("random: stopped after %ld s (--max-seconds)\n", max_s);
			break;
		}
		snprintf(name, sizeof(name), "random.%llu", (unsigned long long)(seed + (uint64_t)i));
		struct scenario *sc = gen_sequence(seed + (uint64_t)i, name, have6);

		nsteps += sc->nsteps;
		done++;
		if (!run_both(w, sc, &p)) {
			pair_free(&p);
			gen_free(sc);
			continue;
		}
		ndiff++;
		/* Again, twice: is it the sequence or the moment? */
		int again = differs(w, sc) + differs(w, sc);
		int orig = sc->nsteps;

		printf("\nrandom: sequence %s differs (%d of 3 runs)\n", name, 1 + again);
		print_diff(p.a, p.b, w[0].label, w[1].label);
		pair_free(&p);
		if (again == 2) {
			sc = shrink(w, sc);
			run_both(w, sc, &p);
			printf("  shrunk from %d to %d steps; the row (paste it into the table):\n\n", orig,
			       sc->nsteps);
			scenario_print(stdout, sc);
			printf("\n  its transcripts:\n");
			print_diff(p.a, p.b, w[0].label, w[1].label);
			pair_free(&p);
		} else {
			printf("  not reproduced every time: a race; not shrunk\n");
		}
		fflush(stdout);
		gen_free(sc);
	}
	worker_stop(&w[0]);
	worker_stop(&w[1]);
	printf("random: %ld sequences (seeds %llu..%llu, %ld steps) in %.1f s: %ld differ\n", done,
	       (unsigned long long)seed, (unsigned long long)(seed + (uint64_t)done - 1), nsteps,
	       (double)(now_ms() - start) / 1000.0, ndiff);
	free(w[1].env ? w[1].env[0] : NULL);
	free(w[1].env);
	free(w[0].buf);
	free(w[1].buf);
	return ndiff ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	exec_init();
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "--serve") == 0)
		return serve();
	if (argc >= 3 && strcmp(argv[1], "--list") == 0)
		return run_table(argc - 2, argv + 2, true);
	if (argc >= 3 && strcmp(argv[1], "--gen") == 0) {
		uint64_t seed = strtoull(argv[2], NULL, 0);
		long n = argc > 3 ? atol(argv[3]) : 1;

		gen_avoid_known = !(argc > 4 && strcmp(argv[4], "--all") == 0);

		for (long i = 0; i < n; i++) {
			char name[48];

			snprintf(name, sizeof(name), "random.%llu", (unsigned long long)(seed + (uint64_t)i));
			struct scenario *sc = gen_sequence(seed + (uint64_t)i, name, exec_have_ipv6());

			scenario_print(stdout, sc);
			gen_free(sc);
		}
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "--random") == 0) {
		const char *sdp_env = NULL, *slow = getenv("TEST_SLOW");
		long max_s = 0;

		for (int i = 4; i < argc; i++)
			if (strcmp(argv[i], "--all") == 0)
				gen_avoid_known = false;
			else if (i + 1 < argc && strcmp(argv[i], "--sdp-env") == 0)
				sdp_env = argv[++i];
			else if (i + 1 < argc && strcmp(argv[i], "--max-seconds") == 0)
				max_s = atol(argv[++i]);
			else
				return usage();
		/* A sequence's steps each have their watchdog; this is the
		 * worker's as a whole. */
		limit_ms = 120000 * (slow && atoi(slow) > 0 ? atoi(slow) : 1);
		return random_run(strtoull(argv[2], NULL, 0), atol(argv[3]), sdp_env, max_s);
	}
	if (argc >= 2 && argv[1][0] != '-')
		return run_table(argc - 1, argv + 1, false);
	return usage();
}
