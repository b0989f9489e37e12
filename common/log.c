/* SPDX-License-Identifier: BSD-2-Clause */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "fdspace.h"
#include "sys.h"
#include "tunables.h"

int sdp_log_min_level = SDP_LOG_ERR;

/* Protects log_fd and log_ready. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO;
static int log_ready;
static bool log_syslog;		/* log_file "syslog": syslog(3) instead of a file */

static int log_open_file_locked(const char *path)
{
	log_syslog = path && !strcmp(path, "syslog");
	if (!path || !*path || log_syslog) {
		if (log_fd != STDERR_FILENO)
			fdspace_close(log_fd);
		log_fd = STDERR_FILENO;
		return 0;
	}
	/* O_NOFOLLOW: a log path in a shared directory must not be turned
	 * into a write to someone else's file through a symlink; O_NOCTTY: a
	 * terminal named there is not the program's to adopt. */
	int fd = FDSPACE_MAKE(sys.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
					     O_NOCTTY, 0600));
	if (fd < 0)
		return fd;
	if (log_fd != STDERR_FILENO)
		fdspace_close(log_fd);
	log_fd = fd;
	return 0;
}

void sdp_log_init(void)
{
	int saved = errno, failed = 0;
	const char *path = tun_str(TUN_log_file);

	pthread_mutex_lock(&log_lock);
	if (!log_ready) {
		sdp_log_min_level = (int)tun_int(TUN_log_level);
		failed = log_open_file_locked(path);
		log_ready = 1;
	}
	pthread_mutex_unlock(&log_lock);
	/* Both said once the logger can say them. */
	if (failed)
		sdp_err("log", "cannot open the log file %s: %s; logging to stderr", path,
			strerror(-failed));
	tun_report_env();
	errno = saved;
}

void sdp_log_set_level(int level)
{
	sdp_log_min_level = level;
}

int sdp_log_set_file(const char *path)
{
	pthread_mutex_lock(&log_lock);
	int ret = log_open_file_locked(path);
	log_ready = 1;
	pthread_mutex_unlock(&log_lock);
	return ret;
}

static const char *log_level_name(int level)
{
	if (level >= SDP_LOG_ERR)
		return "error";
	if (level >= SDP_LOG_WARN)
		return "warning";
	if (level >= SDP_LOG_CONN)
		return "conn";
	return "debug";
}

/*
 * One write per line keeps lines whole between processes.  It goes to
 * libc (sys.h), never to the preload's wrappers: a program may have put a
 * socket on stderr, an SDP one even, and a log line must neither enter
 * its stream nor call back into the engine, which may be logging under
 * log_lock already.  A pipe or socket whose reader is gone must not kill
 * the program either: SIGPIPE is held back for the write and taken back
 * if the write raised it.  A failed log write has nowhere to be reported.
 * Caller holds log_lock.
 */
static void log_put(const char *line, size_t len)
{
	sigset_t pipe_set, old, pending;

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
	ssize_t w = sys.write(log_fd, line, len);

	if (w < 0 && errno == EPIPE && !was_pending) {
		struct timespec zero = { 0, 0 };

		(void)sigtimedwait(&pipe_set, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void sdp_log_write(int level, const char *subsys, const char *fmt, ...)
{
	int saved = errno;
	char line[1024];
	struct timespec ts;
	va_list ap;

	if (!log_ready)
		sdp_log_init();
	clock_gettime(CLOCK_REALTIME, &ts);
	int n = snprintf(line, sizeof(line), "libsdp[%d.%ld] %ld.%06ld %s %s: ",
			 (int)getpid(), (long)syscall(SYS_gettid), (long)ts.tv_sec,
			 ts.tv_nsec / 1000, log_level_name(level), subsys);
	if (n < 0)
		n = 0;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';

	pthread_mutex_lock(&log_lock);
	if (log_syslog) {
		/* syslog stamps time and pid itself: the message only. */
		syslog(level >= SDP_LOG_ERR ? LOG_ERR : level >= SDP_LOG_WARN ? LOG_WARNING
			: level >= SDP_LOG_CONN ? LOG_INFO : LOG_DEBUG,
		       "libsdp %s %s: %.*s", log_level_name(level), subsys,
		       (int)(len - 1 - (size_t)n), line + n);
	} else {
		log_put(line, len);
	}
	pthread_mutex_unlock(&log_lock);
	errno = saved;
}
