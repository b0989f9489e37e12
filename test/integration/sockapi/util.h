/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sockapi_check helpers: the check result (reason and trace), errno and
 * event names, connection pairs (on TEST_HOST) made with plain socket() calls
 * (so that a preloaded library sees every one of them), and I/O with
 * time limits.
 *
 * Everything a check prints must be deterministic: results, errno names,
 * event names and counts, never addresses, ports or timings.  The same
 * output is expected natively and under LD_PRELOAD=libsdp.so.
 */
#ifndef SOCKAPI_UTIL_H
#define SOCKAPI_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>

/* A check returns 0 when it passed, -1 when it failed (after fail()). */
typedef int (*check_fn)(void);

struct check {
	const char *name;
	check_fn fn;
	const char *what; /* one line for --list */
};

/* The tables of the check groups (checks_*.c), each ended by {NULL}. */
extern const struct check checks_basic[];
extern const struct check checks_io[];
extern const struct check checks_xfer[];
extern const struct check checks_opts[];
extern const struct check checks_fd[];
extern const struct check checks_fdnum[];
extern const struct check checks_poll[];
extern const struct check checks_epoll[];
extern const struct check checks_proc[];
extern const struct check checks_bufs[];
extern const struct check checks_oob[];

/* The program's own path for exec (argv[0] fallback). */
extern const char *self_exe;

/* --- the result of the running check --------------------------------- */

/* The name of the check that runs: checks that are rows of one table
 * share a fn, which finds its row by the name. */
const char *check_name(void);
/* Start a new check: clears the trace and the reason. */
void result_reset(void);
/* Append a word or words to the trace (printed on success and failure). */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record why the check failed (the first reason wins); returns -1. */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *result_trace(void);
const char *result_reason(void);

/* FAIL(...): record the reason and leave through the check's "out:". */
#define FAIL(...)                  \
	do {                       \
		fail(__VA_ARGS__); \
		goto out;          \
	} while (0)
/* FAIL_ERRNO("what"): "what: ENAME". */
#define FAIL_ERRNO(what) FAIL("%s: %s", (what), errname(errno))

/* --- names ----------------------------------------------------------- */

/* "EAGAIN", "ECONNRESET", ...; "0" for 0; "E<n>" if unknown.  Static. */
const char *errname(int e);
/* "POLLIN|POLLOUT" (the bits named; unknown ones as hex) or "0". */
const char *pollname(int revents, char *buf, size_t len);
/* The same for epoll event masks. */
const char *epollname(uint32_t events, char *buf, size_t len);

/* --- sockets --------------------------------------------------------- */

struct pair {
	int c; /* the connecting side */
	int s; /* the accepted side */
};

/* Is fd an open descriptor (fcntl F_GETFD works)? */
int fd_is_open(int fd);
/* close(*fd) if it is >= 0, then set it to -1. */
void xclose(int *fd);
/* The address every check binds and connects to: TEST_HOST (set by
 * test/integration/lib.sh; an RDMA transport serves no loopback), 127.0.0.1
 * by default.  A TEST_HOST that is not an IPv4 address ends the program. */
struct in_addr test_host(void);
/* A listening TCP socket on test_host() port 0 (socket type flags added to
 * SOCK_STREAM); its address in *addr.  -1 (after fail()) on error. */
int make_listener(int type_flags, struct sockaddr_in *addr);
/* A connected pair on test_host(): listener, socket(), blocking connect(),
 * accept(); the listener is closed.  Both ends blocking, no CLOEXEC.
 * 0 or -1 (after fail()). */
int pair_open(struct pair *p);
void pair_close(struct pair *p);
/* An address of test_host() on which nothing listens: a socket bound to port 0
 * and kept open but not listening (*holder; close it afterwards). */
int closed_port(struct sockaddr_in *addr, int *holder);

/* poll() one fd for EVENTS for up to MS milliseconds (EINTR retried):
 * revents, 0 on timeout, -1 on error. */
int wait_fd(int fd, short events, int ms);
/* Write all of BUF (blocking or not: waits for POLLOUT), 0 or -1. */
int write_all(int fd, const void *buf, size_t len, int ms);
/* Read exactly LEN bytes within MS milliseconds: 0, or -1 with errno
 * (ETIMEDOUT on time out, 0 meaning EOF arrived first). */
int read_exact(int fd, void *buf, size_t len, int ms);
/* Wait for EOF: read and discard until read() returns 0.  0 on EOF, -1
 * with errno otherwise (ETIMEDOUT). */
int wait_eof(int fd, int ms);

/* --- child processes -------------------------------------------------- */

/* fork, then exec this program (self_exe) with the arguments given (up to
 * three, NULL ending them early) in the child, with no alarm pending;
 * the child's pid, or -1 with errno. */
pid_t spawn_self(const char *a1, const char *a2, const char *a3);
/* Wait up to MS ms for child PID: "exit=N", "signal=N" or "timeout" in
 * *what; returns the exit code, or -1 (killed by a signal, or killed by
 * us after the time limit). */
int wait_child(pid_t pid, int ms, char *what, size_t len);

/* Exit codes of "sockapi_check --nb-connect PORT" (a fresh process's
 * first non-blocking connect to test_host():PORT). */
enum { NB_FRESH_EINPROGRESS = 0, NB_FRESH_ZERO = 1, NB_FRESH_ERROR = 2 };

/* --- misc ------------------------------------------------------------ */

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t now_ms(void);
void sleep_ms(int ms);
/* 64-bit FNV-1a, continued from h (start with FNV_INIT). */
#define FNV_INIT 0xcbf29ce484222325ULL
uint64_t fnv1a(uint64_t h, const void *buf, size_t len);
/* The pattern byte at offset OFF of stream SEED (positional check). */
uint8_t pattern_byte(uint32_t seed, uint64_t off);
void pattern_fill(uint32_t seed, uint64_t off, void *buf, size_t len);
/* Offset of the first byte that differs from the pattern, or -1. */
int64_t pattern_check(uint32_t seed, uint64_t off, const void *buf, size_t len);
/* xorshift32 step (state must not be 0). */
uint32_t rnd32(uint32_t *state);

/* SIGUSR1: a handler installed without SA_RESTART counts deliveries. */
void usr1_install(void);
extern volatile int usr1_count;
/* A thread that sends SIGUSR1 to TARGET every 50 ms until stopped (at
 * most 200 times), to interrupt a blocking call there with EINTR. */
struct kicker {
	pthread_t target;
	pthread_t thread;
	int stop; /* __atomic */
	int started;
};
int kicker_start(struct kicker *k);
void kicker_stop(struct kicker *k);

/* SIGPIPE: counted while a check wants to see it, ignored otherwise. */
void sigpipe_count(void);
void sigpipe_ignore(void);
extern volatile int sigpipe_seen;

#endif
