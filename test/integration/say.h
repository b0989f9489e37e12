/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * say(): how conn_storm, hostile_peer and zcopy_check report, a line at a
 * time on stdout, each line one printf() and flushed, so that the lines
 * of threads and of child processes do not mix.
 */
#ifndef SDP_TEST_SAY_H
#define SDP_TEST_SAY_H

/* Each program defines it: "NAME" puts "NAME: " before every line, NULL
 * nothing. */
extern const char *say_prefix;

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* SDP_TEST_SAY_H */
