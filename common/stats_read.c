/* SPDX-License-Identifier: BSD-2-Clause */
#include "stats_read.h"
#include "sys.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *sdp_stats_dir(void)
{
	/* secure_getenv: the writer runs inside arbitrary programs, set-user-ID
	 * ones included, and must not be pointed at another directory by
	 * whoever started them. */
	const char *dir = secure_getenv(SDP_STATS_DIR_ENV);

	return dir && *dir ? dir : SDP_STATS_DEFAULT_DIR;
}

int sdp_stats_path(const char *dir, pid_t pid, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/" SDP_STATS_FILE_PREFIX "%ld", dir, (long)pid);

	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

static int stats_pid_cmp(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

/* The pid in a file name, or 0 when the name is not one of ours. */
static pid_t stats_name_pid(const char *name)
{
	static const char prefix[] = SDP_STATS_FILE_PREFIX;
	long v = 0;

	if (strncmp(name, prefix, sizeof(prefix) - 1))
		return 0;
	name += sizeof(prefix) - 1;
	/* Digits only, no sign, no leading zero: exactly what the writer
	 * makes, so each pid has one name. */
	if (*name < '1' || *name > '9')
		return 0;
	for (; *name; name++) {
		if (*name < '0' || *name > '9' || v > (INT_MAX - 9) / 10)
			return 0;
		v = v * 10 + (*name - '0');
	}
	return (pid_t)v;
}

int sdp_stats_list(const char *dir, pid_t **pids, size_t *n)
{
	DIR *d = opendir(dir);
	pid_t *v = NULL;
	size_t len = 0, cap = 0;
	struct dirent *e;

	*pids = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		pid_t pid = stats_name_pid(e->d_name);

		if (!pid)
			continue;
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 32;
			pid_t *nv = realloc(v, ncap * sizeof(*v));

			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
			cap = ncap;
		}
		v[len++] = pid;
	}
	closedir(d);
	if (len)
		qsort(v, len, sizeof(*v), stats_pid_cmp);
	*pids = v;
	*n = len;
	return 0;
}

int sdp_stats_parse_proc_stat(const char *buf, size_t len, char *state, uint64_t *start_time)
{
	/* Field 2 is the command in parentheses and may itself hold ')' and
	 * blanks: the fields after it start after the last ')'. */
	const char *p = memrchr(buf, ')', len);
	const char *end = buf + len;
	int field = 2;

	if (!p)
		return -EINVAL;
	p++;
	for (;;) {
		while (p < end && *p == ' ')
			p++;
		if (p >= end)
			return -EINVAL;
		const char *tok = p;

		while (p < end && *p != ' ' && *p != '\n')
			p++;
		field++;
		if (field == 3) {
			if (p - tok != 1)
				return -EINVAL;
			*state = *tok;
		} else if (field == 22) {
			uint64_t v = 0;

			/* A number cut by the end of the buffer is not one. */
			if (p >= end || p == tok)
				return -EINVAL;
			for (const char *q = tok; q < p; q++) {
				if (*q < '0' || *q > '9' || v > (UINT64_MAX - 9) / 10)
					return -EINVAL;
				v = v * 10 + (uint64_t)(*q - '0');
			}
			*start_time = v;
			return 0;
		}
		if (p < end && *p == '\n')
			return -EINVAL;
	}
}

int sdp_stats_proc_start(pid_t pid, char *state, uint64_t *start_time)
{
	char path[64], buf[1024];
	ssize_t n;
	int fd, ret;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	else
		strcpy(path, "/proc/self/stat");
	fd = sys.open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Field 22 comes within the first few hundred bytes (the command is
	 * at most 16 bytes): one read is enough, and the parser refuses a
	 * number cut short. */
	do
		n = sys.read(fd, buf, sizeof(buf));
	while (n < 0 && errno == EINTR);
	ret = n < 0 ? -errno : sdp_stats_parse_proc_stat(buf, (size_t)n, state, start_time);
	sys.close(fd);
	/* A process that exits between open and read reads as ESRCH. */
	return ret == -ESRCH ? -ENOENT : ret;
}

/* Exactly len bytes at off, or -EPROTO (the file is shorter than its
 * header says: truncated under us, or not a stats file). */
static int stats_pread(int fd, void *buf, size_t len, off_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, off + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPROTO;
		done += (size_t)n;
	}
	return 0;
}

/* Waiting for a writer to leave a seqlock: a few yields, then short
 * sleeps, about 20 ms in all before giving up. */
#define STATS_RETRIES 250

static void stats_backoff(int attempt)
{
	if (attempt < 50) {
		sched_yield();
	} else {
		struct timespec ts = { 0, 100 * 1000 };

		nanosleep(&ts, NULL);
	}
}

/*
 * len bytes at off, protected by the seqlock at seq_off: the sequence is
 * read before and after the data, each in a pread of its own so that the
 * system calls order the reads.  -EBUSY when no consistent copy came.
 */
static int stats_read_seq(int fd, off_t seq_off, void *buf, size_t len, off_t off)
{
	for (int attempt = 0; attempt < STATS_RETRIES; attempt++) {
		uint32_t s1, s2;
		int ret = stats_pread(fd, &s1, sizeof(s1), seq_off);

		if (!ret && !(s1 & 1))
			ret = stats_pread(fd, buf, len, off);
		if (!ret && !(s1 & 1))
			ret = stats_pread(fd, &s2, sizeof(s2), seq_off);
		if (ret)
			return ret;
		if (!(s1 & 1) && s1 == s2)
			return 0;
		stats_backoff(attempt);
	}
	return -EBUSY;
}

static void stats_copy_str(char *dst, const char *src, size_t len)
{
	memcpy(dst, src, len);
	dst[len] = '\0';
}

static int stats_sock_cmp(const void *a, const void *b)
{
	const struct sdp_stats_sock_snap *x = a, *y = b;

	if (x->fd != y->fd)
		return (x->fd > y->fd) - (x->fd < y->fd);
	return (x->row > y->row) - (x->row < y->row);
}

/* Distrust what a process wrote: a length beyond the buffer is cut. */
static void stats_clean_addr(struct sdp_stats_addr *a)
{
	if (a->len > SDP_STATS_ADDR_LEN)
		a->len = SDP_STATS_ADDR_LEN;
	if (!a->len)
		a->family = 0;
}

/* Rows are first read in bulk to find the ones in use, then each of those
 * again under its seqlock. */
#define STATS_BULK_ROWS 256

static int stats_read_rows(int fd, const struct sdp_stats_hdr *h, struct sdp_stats_snap *out)
{
	uint32_t hwm = h->row_hwm < h->capacity ? h->row_hwm : h->capacity;
	struct sdp_stats_row *bulk = malloc(STATS_BULK_ROWS * sizeof(*bulk));
	size_t cap = 0;
	int ret = 0;

	if (!bulk)
		return -ENOMEM;
	for (uint32_t base = 0; base < hwm && !ret; base += STATS_BULK_ROWS) {
		uint32_t n = hwm - base < STATS_BULK_ROWS ? hwm - base : STATS_BULK_ROWS;
		off_t off = (off_t)h->hdr_size + (off_t)base * h->row_size;

		ret = stats_pread(fd, bulk, n * sizeof(*bulk), off);
		for (uint32_t i = 0; i < n && !ret; i++) {
			off_t roff = off + (off_t)i * h->row_size;
			struct sdp_stats_row r;

			/* A row that is free in the bulk copy and whose writer is
			 * not inside is free; a row being allocated right now
			 * may be missed, as it would be a moment earlier. */
			if (!bulk[i].in_use && !(bulk[i].seq & 1))
				continue;
			ret = stats_read_seq(fd, roff + (off_t)offsetof(struct sdp_stats_row, seq),
					     &r, sizeof(r), roff);
			if (ret == -EBUSY) {
				out->n_busy++;
				ret = 0;
				continue;
			}
			if (ret || !r.in_use)
				continue;
			if (out->n_socks == cap) {
				size_t ncap = cap ? cap * 2 : 16;
				void *nv = realloc(out->socks, ncap * sizeof(*out->socks));

				if (!nv) {
					ret = -ENOMEM;
					break;
				}
				out->socks = nv;
				cap = ncap;
			}
			struct sdp_stats_sock_snap *s = &out->socks[out->n_socks++];

			memset(s, 0, sizeof(*s));
			s->row = base + i;
			s->fd = r.fd;
			s->stack = r.stack;
			s->state = r.state;
			s->fallback = r.fallback;
			s->flags = r.flags;
			stats_copy_str(s->transport, r.transport, sizeof(r.transport));
			stats_copy_str(s->mode, r.mode, sizeof(r.mode));
			s->local = r.local;
			s->peer = r.peer;
			stats_clean_addr(&s->local);
			stats_clean_addr(&s->peer);
			s->bytes_tx = r.bytes_tx;
			s->bytes_rx = r.bytes_rx;
		}
	}
	free(bulk);
	if (!ret && out->n_socks > 1)
		qsort(out->socks, out->n_socks, sizeof(*out->socks), stats_sock_cmp);
	return ret;
}

static int stats_read_fd(int fd, const struct stat *st, pid_t pid, struct sdp_stats_snap *out)
{
	struct sdp_stats_hdr h;
	uint64_t live_start = 0;
	char pstate = '?';
	int ret;

	/* Whether the owner lives decides first: a dead process's file is
	 * stale whatever it holds, even half made. */
	ret = sdp_stats_proc_start(pid, &pstate, &live_start);
	if (ret == -ENOENT || (!ret && (pstate == 'Z' || pstate == 'X')))
		return -ESRCH;
	if (ret)
		live_start = 0;	/* cannot tell (hidden /proc): trust the file */

	if (st->st_size < (off_t)sizeof(h))
		return -EAGAIN;	/* not yet sized */
	ret = stats_pread(fd, &h, sizeof(h), 0);
	if (ret)
		return ret;
	if (h.magic != SDP_STATS_MAGIC)
		return h.magic ? -EPROTO : -EAGAIN;
	if (h.version != SDP_STATS_VERSION || h.hdr_size != sizeof(struct sdp_stats_hdr) ||
	    h.row_size != sizeof(struct sdp_stats_row) || h.capacity > (1u << 20) ||
	    st->st_size < (off_t)h.hdr_size + (off_t)h.capacity * h.row_size || h.pid != pid)
		return -EPROTO;
	if (live_start && h.start_time && h.start_time != live_start)
		return -ESRCH;

	out->pid = pid;
	out->start_time = h.start_time;
	ret = stats_read_seq(fd, offsetof(struct sdp_stats_hdr, prog_seq), h.program,
			     sizeof(h.program), offsetof(struct sdp_stats_hdr, program));
	if (ret == -EBUSY)
		memset(h.program, 0, sizeof(h.program));
	else if (ret)
		return ret;
	stats_copy_str(out->program, h.program, sizeof(h.program));
	out->n_counters = h.n_counters < SDP_STATS_MAX_COUNTERS ? h.n_counters
								 : SDP_STATS_MAX_COUNTERS;
	out->n_fallbacks = h.n_fallbacks < SDP_STATS_MAX_FALLBACKS ? h.n_fallbacks
								   : SDP_STATS_MAX_FALLBACKS;
	memcpy(out->counters, h.counters, out->n_counters * sizeof(h.counters[0]));
	memcpy(out->fallbacks, h.fallbacks, out->n_fallbacks * sizeof(h.fallbacks[0]));
	return stats_read_rows(fd, &h, out);
}

int sdp_stats_read(const char *dir, pid_t pid, unsigned flags, struct sdp_stats_snap *out)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, ret;

	memset(out, 0, sizeof(*out));
	if (pid <= 0)
		return -EINVAL;
	ret = sdp_stats_path(dir, pid, path, sizeof(path));
	if (ret)
		return ret;
	/* O_NONBLOCK: a FIFO planted under our name must not hang the reader;
	 * O_NOFOLLOW: nor a symlink send it elsewhere. */
	fd = sys.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return errno == ELOOP ? -EPROTO : -errno;
	if (fstat(fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = -EPROTO;
	else
		ret = stats_read_fd(fd, &st, pid, out);
	sys.close(fd);
	if (ret == -ESRCH && (flags & SDP_STATS_REMOVE_STALE)) {
		struct stat now;

		/* Only if the name still is the file we judged: a new process
		 * with the same pid may have replaced it meanwhile. */
		if (!lstat(path, &now) && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
			(void)unlink(path);
	}
	if (ret)
		sdp_stats_snap_free(out);
	return ret;
}

void sdp_stats_snap_free(struct sdp_stats_snap *snap)
{
	free(snap->socks);
	memset(snap, 0, sizeof(*snap));
}

int sdp_stats_addr_host(const struct sdp_stats_addr *a, char *host, size_t cap, unsigned *port)
{
	if (!a->len)
		return -ENOENT;
	if (a->family == AF_INET) {
		struct sockaddr_in sin;

		if (a->len < sizeof(sin))
			return -EINVAL;
		memcpy(&sin, a->raw, sizeof(sin));
		if (!inet_ntop(AF_INET, &sin.sin_addr, host, (socklen_t)cap))
			return -errno;
		*port = ntohs(sin.sin_port);
		return 0;
	}
	if (a->family == AF_INET6) {
		struct sockaddr_in6 sin6;

		if (a->len < sizeof(sin6))
			return -EINVAL;
		memcpy(&sin6, a->raw, sizeof(sin6));
		if (!inet_ntop(AF_INET6, &sin6.sin6_addr, host, (socklen_t)cap))
			return -errno;
		if (sin6.sin6_scope_id) {
			size_t n = strlen(host);
			int m = snprintf(host + n, cap - n, "%%%u", (unsigned)sin6.sin6_scope_id);

			if (m < 0 || (size_t)m >= cap - n)
				return -ENOSPC;
		}
		*port = ntohs(sin6.sin6_port);
		return 0;
	}
	return -EAFNOSUPPORT;
}

void sdp_stats_format_addr(const struct sdp_stats_addr *a, char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN + 16];
	unsigned port;
	int ret = sdp_stats_addr_host(a, host, sizeof(host), &port);

	if (ret == -ENOENT)
		snprintf(buf, cap, "-");
	else if (ret == -EAFNOSUPPORT)
		snprintf(buf, cap, "family %u", (unsigned)a->family);
	else if (ret)
		snprintf(buf, cap, "?");
	else if (a->family == AF_INET6)
		snprintf(buf, cap, "[%s]:%u", host, port);
	else
		snprintf(buf, cap, "%s:%u", host, port);
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), 0 when there is none. */
static size_t stats_utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	/* A NUL ends the string before any continuation byte is read past. */
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

void sdp_stats_json_string(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	putc('"', out);
	while (*p) {
		size_t n;

		if (*p == '"' || *p == '\\') {
			putc('\\', out);
			putc(*p++, out);
		} else if (*p < 0x20 || *p == 0x7f) {
			fprintf(out, "\\u%04x", *p++);
		} else if (*p < 0x80) {
			putc(*p++, out);
		} else if ((n = stats_utf8_len(p))) {
			fwrite(p, 1, n, out);
			p += n;
		} else {
			fputs("\\ufffd", out);
			p++;
		}
	}
	putc('"', out);
}

void sdp_stats_clean_text(char *dst, size_t cap, const char *src)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t i = 0;

	if (!cap)
		return;
	while (*p && i + 1 < cap) {
		size_t n = *p >= 0x80 ? stats_utf8_len(p) : 1;

		if (n > 1 && i + n < cap) {
			memcpy(dst + i, p, n);
			i += n;
			p += n;
			continue;
		}
		if (n > 1)
			break;	/* a character that does not fit is left out whole */
		dst[i++] = (n == 0 || *p < 0x20 || *p == 0x7f) ? '?' : (char)*p;
		p++;
	}
	dst[i] = '\0';
}
