/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The differential conformance runner (doc/conformance.md).
 *
 * A scenario is a short script of socket calls, one call a step, written
 * in the table (scenarios.txt) or made by the random generator.  The
 * runner executes it in one process and prints a transcript of every
 * observable, normalized so that two runs can be compared: descriptor
 * numbers relative to the lowest free one at the start, ports and
 * addresses by symbolic names, data by its position in the stream, and
 * every wait bounded and ended by a state, never by a clock.  The same
 * scenarios run natively and under the preload must print the same
 * transcript.
 */
#ifndef CONFORM_H
#define CONFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct scenario {
	char *name;
	char *need;	/* words: ipv6 alt (or NULL) */
	char *xdiff;	/* an expected difference: its reason (or NULL) */
	char **steps;	/* one call each, as written */
	int *lines;	/* the table line of each step */
	int nsteps;
	int line;	/* the table line of the header */
};

/* --- table.c: the text form ------------------------------------------- */

/* Parse scenarios from TEXT (ORIGIN names it in errors): "== NAME" opens
 * one; "need:" and "xdiff:" lines annotate it; other lines are steps,
 * several on a line separated by ';'; '#' starts a comment.  0, or -1
 * with the reason in err. */
int table_parse(const char *text, const char *origin, struct scenario **out, int *n,
		char *err, size_t errlen);
int table_load(const char *path, struct scenario **out, int *n, char *err, size_t errlen);
void table_free(struct scenario *s, int n);
/* The scenario as table text (header, annotations, a step a line). */
void scenario_print(FILE *f, const struct scenario *sc);

/* --- exec.c: running one ---------------------------------------------- */

/* What the runs are given (TEST_HOST, TEST_HOST6, TEST_SLOW). */
void exec_init(void);
/* Is there an IPv6 address to run on (TEST_HOST6)? */
bool exec_have_ipv6(void);
/* Run SC, writing its transcript to OUT.  0, or -1 when the scenario
 * itself is wrong (a syntax error: the transcript says where). */
int exec_scenario(const struct scenario *sc, FILE *out);

/* --- gen.c: the random generator -------------------------------------- */

/* A sequence of operations on a connected pair, made from SEED, as a
 * scenario named NAME (IPv6 and dual-stack ones too when HAVE6). */
/* Make no step that would show an expected difference (gen.c lists
 * them); on by default. */
extern bool gen_avoid_known;
struct scenario *gen_sequence(uint64_t seed, const char *name, bool have6);
/* Shrink support: SC with steps [from, from+count) removed, or NULL when
 * that leaves a sequence the generator's model rejects (one that would
 * block for ever, say). */
struct scenario *gen_without(const struct scenario *sc, int from, int count);
/* SC with step I replaced by a simpler form of it (number NTH of the
 * simplifications the step has), or NULL when there is no such one. */
struct scenario *gen_simpler(const struct scenario *sc, int i, int nth);
void gen_free(struct scenario *sc);

/* Tokens of a step: words separated by blanks (table.c).  At most
 * MAXTOK; -1 if there are more. */
#define MAXTOK 16
int tokenize(char *s, char **tok, int max);

#endif
