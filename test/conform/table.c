/* SPDX-License-Identifier: BSD-2-Clause */
/* The table's text form: see conform.h and doc/conformance.md. */
#include "conform.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (!q) {
		fprintf(stderr, "conform: out of memory\n");
		exit(2);
	}
	return q;
}

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		fprintf(stderr, "conform: out of memory\n");
		exit(2);
	}
	return d;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

static void add_step(struct scenario *sc, const char *text, int line)
{
	sc->steps = xrealloc(sc->steps, sizeof(*sc->steps) * (size_t)(sc->nsteps + 1));
	sc->lines = xrealloc(sc->lines, sizeof(*sc->lines) * (size_t)(sc->nsteps + 1));
	sc->steps[sc->nsteps] = xstrdup(text);
	sc->lines[sc->nsteps] = line;
	sc->nsteps++;
}

static int errf(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

int table_parse(const char *text, const char *origin, struct scenario **out, int *n,
		char *err, size_t errlen)
{
	struct scenario *v = NULL, *cur = NULL;
	char *copy = xstrdup(text), *save = NULL, *ln;
	int nv = 0, line = 0, rc = 0;

	/* strtok_r would skip empty lines and lose the count. */
	for (ln = copy; ln && rc == 0; ln = save) {
		char *nl = strchr(ln, '\n'), *hash, *s;

		save = nl ? nl + 1 : NULL;
		if (nl)
			*nl = '\0';
		line++;
		hash = strchr(ln, '#');
		if (hash)
			*hash = '\0';
		s = trim(ln);
		if (!*s)
			continue;
		if (strncmp(s, "==", 2) == 0) {
			char *name = trim(s + 2), *sp = name;

			while (*sp && !isspace((unsigned char)*sp))
				sp++;
			*sp = '\0';
			if (!*name) {
				rc = errf(err, errlen, "%s:%d: a scenario needs a name", origin, line);
				break;
			}
			for (int i = 0; i < nv; i++)
				if (strcmp(v[i].name, name) == 0)
					rc = errf(err, errlen, "%s:%d: scenario %s again (line %d)",
						  origin, line, name, v[i].line);
			v = xrealloc(v, sizeof(*v) * (size_t)(nv + 1));
			cur = &v[nv++];
			memset(cur, 0, sizeof(*cur));
			cur->name = xstrdup(name);
			cur->line = line;
			continue;
		}
		if (!cur) {
			rc = errf(err, errlen, "%s:%d: a step before the first '== name'", origin, line);
			break;
		}
		if (strncmp(s, "need:", 5) == 0) {
			cur->need = xstrdup(trim(s + 5));
			continue;
		}
		if (strncmp(s, "xdiff:", 6) == 0) {
			cur->xdiff = xstrdup(trim(s + 6));
			if (!*cur->xdiff)
				rc = errf(err, errlen, "%s:%d: xdiff needs its reason", origin, line);
			continue;
		}
		for (char *step = s, *semi; step; step = semi) {
			semi = strchr(step, ';');
			if (semi)
				*semi++ = '\0';
			step = trim(step);
			if (*step)
				add_step(cur, step, line);
		}
	}
	free(copy);
	for (int i = 0; rc == 0 && i < nv; i++)
		if (v[i].nsteps == 0)
			rc = errf(err, errlen, "%s:%d: scenario %s has no steps", origin, v[i].line,
				  v[i].name);
	if (rc) {
		table_free(v, nv);
		return -1;
	}
	*out = v;
	*n = nv;
	return 0;
}

int table_load(const char *path, struct scenario **out, int *n, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0, got;
	int rc;

	if (!f)
		return errf(err, errlen, "%s: %s", path, strerror(errno));
	do {
		if (len + 4096 + 1 > cap) {
			cap = (cap + 4096) * 2;
			buf = xrealloc(buf, cap);
		}
		got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
	} while (got > 0);
	fclose(f);
	buf[len] = '\0';
	rc = table_parse(buf, path, out, n, err, errlen);
	free(buf);
	return rc;
}

void table_free(struct scenario *v, int n)
{
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < v[i].nsteps; j++)
			free(v[i].steps[j]);
		free(v[i].steps);
		free(v[i].lines);
		free(v[i].name);
		free(v[i].need);
		free(v[i].xdiff);
	}
	free(v);
}

void scenario_print(FILE *f, const struct scenario *sc)
{
	fprintf(f, "== %s\n", sc->name);
	if (sc->need)
		fprintf(f, "need: %s\n", sc->need);
	if (sc->xdiff)
		fprintf(f, "xdiff: %s\n", sc->xdiff);
	for (int i = 0; i < sc->nsteps; i++)
		fprintf(f, "%s\n", sc->steps[i]);
}

int tokenize(char *s, char **tok, int max)
{
	int n = 0;

	while (*s) {
		while (isspace((unsigned char)*s))
			s++;
		if (!*s)
			break;
		if (n == max)
			return -1;
		tok[n++] = s;
		while (*s && !isspace((unsigned char)*s))
			s++;
		if (*s)
			*s++ = '\0';
	}
	return n;
}
