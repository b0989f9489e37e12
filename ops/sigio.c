/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Signal-driven I/O on SDP sockets: SIGURG for urgent data, SIGIO (or the
 * F_SETSIG signal) under O_ASYNC.
 *
 * The application's F_SETOWN, F_SETOWN_EX, F_SETSIG, O_ASYNC, FIOASYNC and
 * FIOSETOWN land on the kernel placeholder at its fd, which keeps them:
 * they belong to the open file, which dups share.  The kernel raises
 * nothing for the placeholder, since SDP's bytes never pass through it;
 * the engine says when Linux would (sdp_set_notify()), and this raises
 * the signals from the placeholder's settings, as sk_send_sigurg() and
 * sk_wake_async() do.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ops.h"
#include "sdp.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

/* si_code and si_band of a queued SIGIO, as the kernel's band_table. */
static void sigpoll_info(siginfo_t *si, int sig, int fd, int band)
{
	memset(si, 0, sizeof(*si));
	si->si_signo = sig;
	if (band == POLLPRI) {
		si->si_code = POLL_PRI;
		si->si_band = POLLPRI | POLLRDBAND;
	} else if (band == POLLOUT) {
		si->si_code = POLL_OUT;
		si->si_band = POLLOUT | POLLWRNORM | POLLWRBAND;
	} else {
		si->si_code = POLL_IN;
		si->si_band = POLLIN | POLLRDNORM;
	}
	si->si_fd = fd;
}

/*
 * Send sig to the owner; with a siginfo for F_SETSIG.  The kernel takes
 * a positive si_code only from the thread it is about to reach, so from
 * another one (the progress thread, say) the siginfo goes as SI_QUEUE,
 * with the same si_fd and si_band.
 */
static void signal_owner(const struct f_owner_ex *own, int sig, const siginfo_t *info)
{
	pid_t self = getpid();

	switch (own->type) {
	case F_OWNER_TID:
		if (!info) {
			(void)syscall(SYS_tgkill, self, own->pid, sig);
			return;
		}
		if (syscall(SYS_rt_tgsigqueueinfo, self, own->pid, sig, info) == 0)
			return;
		break;
	case F_OWNER_PID:
		if (!info || own->pid != self) {
			(void)kill(own->pid, sig);
			return;
		}
		if (syscall(SYS_rt_sigqueueinfo, self, sig, info) == 0)
			return;
		break;
	case F_OWNER_PGRP:
		(void)kill(-own->pid, sig);
		return;
	default:
		return;
	}
	siginfo_t q = *info;

	q.si_code = SI_QUEUE;
	if (own->type == F_OWNER_TID)
		(void)syscall(SYS_rt_tgsigqueueinfo, self, own->pid, sig, &q);
	else
		(void)syscall(SYS_rt_sigqueueinfo, self, sig, &q);
}

/*
 * Set once this process turns O_ASYNC on for any fd (fcntl F_SETFL,
 * ioctl FIOASYNC: both pass through ops_fcntl()/ops_ioctl()).  Until then
 * no SDP socket can owe a SIGIO, and a notice for data or room ends here,
 * because looking it up on the placeholder costs a fcntl() per message
 * on each side.  SIGURG needs only an owner, so it is always looked up.
 */
static atomic_bool sigio_async_seen;

void ops_sigio_async_on(void)
{
	atomic_store(&sigio_async_seen, true);
}

/* The engine's notice (sdp_set_notify()), with its socket locked: only
 * system calls here, no lock. */
static void ops_sigio_notify(long arg, int band)
{
	struct ops_sock *s = (struct ops_sock *)arg;
	int fd = s->notify_fd;
	struct f_owner_ex own;

	if (band != POLLPRI && !atomic_load(&sigio_async_seen))
		return;
	ops_stats_count(OPS_C_SIGIO_LOOKUPS, 1);
	/* A closed fd, or one that names something else now, has no say. */
	if (!ops_fd_names(fd, s))
		return;
	if (sys.fcntl(fd, F_GETOWN_EX, &own) < 0 || own.pid == 0)
		return;
	if (band == POLLPRI)
		signal_owner(&own, SIGURG, NULL);
	int fl = sys.fcntl(fd, F_GETFL);

	if (fl < 0 || !(fl & O_ASYNC))
		return;
	int sig = sys.fcntl(fd, F_GETSIG);
	siginfo_t si;

	if (sig <= 0) {
		signal_owner(&own, SIGIO, NULL);
		return;
	}
	sigpoll_info(&si, sig, fd, band);
	signal_owner(&own, sig, &si);
}

void ops_sigio_attach(int fd, struct ops_sock *s)
{
	if (s->sd < 0)
		return;
	s->notify_fd = fd;
	(void)sdp_set_notify(s->sd, ops_sigio_notify, (long)s);
}
