/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * For tests whose cases each need a fresh kernel TCP connection between
 * two processes (convert_check, preload_convert): the connection, and the
 * two forked parts of a case, one on each end.
 */
#ifndef LIBSDP_TEST_TCP_PAIR_H
#define LIBSDP_TEST_TCP_PAIR_H

#include <netinet/in.h>
#include <stdbool.h>

/* A connection over the kernel's TCP on host: *a the connecting end, *b
 * the accepted one, both close-on-exec.  0, or a negative errno. */
int tcp_pair(struct in_addr host, int *a, int *b);

/*
 * server(b) and client(a), each in a forked process that a SIGALRM ends
 * after secs.  Before calling its function the child sets *part to
 * "server" or "client"; it exits 1 if *fails is then non-zero, else 0.
 * The parent closes a and b, waits for both, and returns whether both
 * exited 0; a part killed by a signal is reported as "  PROG: PART killed
 * by signal N".
 */
bool tcp_pair_run(int a, int b, void (*client)(int), void (*server)(int), unsigned secs,
		  const char **part, const int *fails, const char *prog);

#endif
