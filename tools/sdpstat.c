/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sdpstat: the processes running with libsdp and their sockets, read from
 * the live statistics files (common/stats_shm.h) without disturbing them.
 * Modelled on smcss (one line per socket) and vma_stats (per-process
 * counters).  Files of processes that are gone are removed when we may,
 * silently: they are debris, not news.  Built from the reader alone; it
 * links no engine code.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stats_read.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

struct opts {
	int json;
	int counters_only;
	int all;
	pid_t pid;		/* 0: every process */
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdpstat [-p PID] [-c] [-a] [--json]\n"
		"\n"
		"Lists the processes using libsdp: per process a line of counters,\n"
		"then its open sockets.\n"
		"\n"
		"  -p, --pid PID    only this process\n"
		"  -c, --counters   counters only, no socket table (every process)\n"
		"  -a, --all        also processes that have no open socket now\n"
		"  -j, --json       the same as one JSON document\n"
		"  -V, --version    print the libsdp version\n"
		"  -h, --help       this text\n"
		"\n"
		"Files are read from $SDP_STATS_DIR, default " SDP_STATS_DEFAULT_DIR ".\n");
}

/* A name, or the number when this build does not know the value. */
static const char *name_or_num(const char *name, unsigned v, char *buf, size_t cap)
{
	if (name)
		return name;
	snprintf(buf, cap, "%u", v);
	return buf;
}

static uint64_t ctr(const struct sdp_stats_snap *s, enum ops_counter c)
{
	return (unsigned)c < s->n_counters ? s->counters[c] : 0;
}

static void print_summary(const struct sdp_stats_snap *s)
{
	char prog[SDP_STATS_PROG_LEN + 1];
	const char *sep = " (";

	sdp_stats_clean_text(prog, sizeof(prog), s->program);
	printf("pid %ld %s: open %zu, sockets %" PRIu64 " (direct %" PRIu64 ")"
	       ", listen sdp/tcp/both %" PRIu64 "/%" PRIu64 "/%" PRIu64
	       ", connect sdp/tcp %" PRIu64 "/%" PRIu64 ", accept sdp/tcp %" PRIu64 "/%" PRIu64
	       ", fallbacks %" PRIu64,
	       (long)s->pid, *prog ? prog : "?", s->n_socks, ctr(s, OPS_C_SOCKETS),
	       ctr(s, OPS_C_SOCKETS_DIRECT), ctr(s, OPS_C_LISTEN_SDP), ctr(s, OPS_C_LISTEN_TCP),
	       ctr(s, OPS_C_LISTEN_BOTH), ctr(s, OPS_C_CONNECT_SDP), ctr(s, OPS_C_CONNECT_TCP),
	       ctr(s, OPS_C_ACCEPT_SDP), ctr(s, OPS_C_ACCEPT_TCP), ctr(s, OPS_C_FALLBACKS));
	/* Only the reasons that happened. */
	for (unsigned r = 1; r < s->n_fallbacks; r++) {
		char num[16];

		if (!s->fallbacks[r])
			continue;
		printf("%s%s %" PRIu64, sep,
		       name_or_num(sdp_stats_fallback_name(r), r, num, sizeof(num)),
		       s->fallbacks[r]);
		sep = ", ";
	}
	if (*sep == ',')
		putchar(')');
	printf(", conn-errors %" PRIu64 ", sdp-bytes tx/rx %" PRIu64 "/%" PRIu64,
	       ctr(s, OPS_C_CONN_ERRORS), ctr(s, OPS_C_SDP_BYTES_TX), ctr(s, OPS_C_SDP_BYTES_RX));
	/* Zero copy and its registration cache, once a process used them
	 * (--json always has every counter). */
	if (ctr(s, OPS_C_ZCOPY_OFFERS) || ctr(s, OPS_C_ZCOPY_READS))
		printf(", zcopy offers/refused/cancels %" PRIu64 "/%" PRIu64 "/%" PRIu64
		       ", zcopy reads %" PRIu64 ", zcopy-bytes tx/rx/direct %" PRIu64 "/%" PRIu64
		       "/%" PRIu64,
		       ctr(s, OPS_C_ZCOPY_OFFERS), ctr(s, OPS_C_ZCOPY_REFUSED),
		       ctr(s, OPS_C_ZCOPY_CANCELS), ctr(s, OPS_C_ZCOPY_READS),
		       ctr(s, OPS_C_ZCOPY_BYTES_SENT), ctr(s, OPS_C_ZCOPY_BYTES_RECEIVED),
		       ctr(s, OPS_C_ZCOPY_DIRECT_BYTES));
	if (ctr(s, OPS_C_REGCACHE_HITS) || ctr(s, OPS_C_REGCACHE_MISSES))
		printf(", regcache hits/misses/evictions/invalidations %" PRIu64 "/%" PRIu64
		       "/%" PRIu64 "/%" PRIu64,
		       ctr(s, OPS_C_REGCACHE_HITS), ctr(s, OPS_C_REGCACHE_MISSES),
		       ctr(s, OPS_C_REGCACHE_EVICTIONS), ctr(s, OPS_C_REGCACHE_INVALIDATIONS));
	if (ctr(s, OPS_C_ZCOPY_WRITES) || ctr(s, OPS_C_ZCOPY_SINK_ADVERTS) ||
	    ctr(s, OPS_C_ZCOPY_PEER_ADVERTS))
		printf(", sink adverts/stale/cancels %" PRIu64 "/%" PRIu64 "/%" PRIu64
		       ", peer adverts %" PRIu64
		       ", zcopy writes %" PRIu64 ", written-bytes tx/rx %" PRIu64 "/%" PRIu64,
		       ctr(s, OPS_C_ZCOPY_SINK_ADVERTS), ctr(s, OPS_C_ZCOPY_SINK_STALE),
		       ctr(s, OPS_C_ZCOPY_SINK_CANCELS), ctr(s, OPS_C_ZCOPY_PEER_ADVERTS),
		       ctr(s, OPS_C_ZCOPY_WRITES),
		       ctr(s, OPS_C_ZCOPY_BYTES_WRITTEN), ctr(s, OPS_C_ZCOPY_SINK_BYTES));
	if (ctr(s, OPS_C_MODE_CHANGES_SENT) || ctr(s, OPS_C_MODE_CHANGES_RECEIVED))
		printf(", mode changes tx/rx %" PRIu64 "/%" PRIu64
		       ", transaction piggybacks/misses %" PRIu64 "/%" PRIu64,
		       ctr(s, OPS_C_MODE_CHANGES_SENT), ctr(s, OPS_C_MODE_CHANGES_RECEIVED),
		       ctr(s, OPS_C_TRANS_PIGGYBACKS), ctr(s, OPS_C_TRANS_MISSES));
	/* The single counters, each once it is not 0. */
	static const struct {
		enum ops_counter c;
		const char *label;
	} singles[] = {
		{ OPS_C_RELAYS, "relays" },
		{ OPS_C_PROGRESS_FD_DRIVES, "progress fd drives" },
		{ OPS_C_READINESS_WRITES, "readiness writes" },
		{ OPS_C_SIGIO_LOOKUPS, "sigio lookups" },
		{ OPS_C_PROGRESS_LOCK_WAITS, "progress lock waits" },
		{ OPS_C_PROGRESS_BUSY_SKIPS, "progress busy skips" },
		{ OPS_C_PROGRESS_WAKEUPS, "progress wakeups" },
		{ OPS_C_EPOLL_LOOKS, "epoll looks" },
		{ OPS_C_SPIN_POLL_ANSWERS, "spin poll answers" },
		{ OPS_C_WATCH_WRITES, "watch writes" },
		{ OPS_C_EPOLL_RINGS, "epoll rings" },
		{ OPS_C_TRANSPORT_EMPTY_READS, "transport empty reads" },
		{ OPS_C_MOVES_OUT, "moves out" },
		{ OPS_C_MOVES_IN, "moves in" },
		{ OPS_C_MOVES_REFUSED, "moves refused" },
	};
	for (size_t i = 0; i < sizeof(singles) / sizeof(singles[0]); i++)
		if (ctr(s, singles[i].c))
			printf(", %s %" PRIu64, singles[i].label, ctr(s, singles[i].c));
	if (ctr(s, OPS_C_BUF_BYTES) || ctr(s, OPS_C_FDS))
		printf(", holds buffers %" PRIu64 " KiB, descriptors %" PRIu64,
		       ctr(s, OPS_C_BUF_BYTES) / 1024, ctr(s, OPS_C_FDS));
	/* Counters of a newer writer, by number. */
	for (unsigned c = OPS_C_MAX; c < s->n_counters; c++)
		printf(", counter%u %" PRIu64, c, s->counters[c]);
	if (s->n_busy)
		printf(", %u rows busy", s->n_busy);
	putchar('\n');
}

enum { COL_FD, COL_STACK, COL_STATE, COL_TRANSPORT, COL_MODE, COL_FALLBACK, COL_LOCAL,
       COL_PEER, COL_TX, COL_RX, NCOLS };

static const char *const col_title[NCOLS] = {
	"FD", "STACK", "STATE", "TRANSPORT", "MODE", "FALLBACK", "LOCAL", "PEER", "TX", "RX",
};

#define CELL 72

/* The cells of one socket's line. */
static void sock_cells(const struct sdp_stats_sock_snap *k, char cell[NCOLS][CELL])
{
	char num[16];

	if (k->fd >= 0)
		snprintf(cell[COL_FD], CELL, "%d", (int)k->fd);
	else
		snprintf(cell[COL_FD], CELL, "-");
	snprintf(cell[COL_STACK], CELL, "%s",
		 name_or_num(sdp_stats_stack_name(k->stack), k->stack, num, sizeof(num)));
	snprintf(cell[COL_STATE], CELL, "%s%s",
		 name_or_num(sdp_stats_state_name(k->state), k->state, num, sizeof(num)),
		 (k->flags & SDP_STATS_ROW_RELAYED) ? ",relayed" : "");
	sdp_stats_clean_text(cell[COL_TRANSPORT], CELL, *k->transport ? k->transport : "-");
	sdp_stats_clean_text(cell[COL_MODE], CELL, *k->mode ? k->mode : "-");
	snprintf(cell[COL_FALLBACK], CELL, "%s",
		 name_or_num(sdp_stats_fallback_name(k->fallback), k->fallback, num,
			     sizeof(num)));
	sdp_stats_format_addr(&k->local, cell[COL_LOCAL], CELL);
	sdp_stats_format_addr(&k->peer, cell[COL_PEER], CELL);
	snprintf(cell[COL_TX], CELL, "%" PRIu64, k->bytes_tx);
	snprintf(cell[COL_RX], CELL, "%" PRIu64, k->bytes_rx);
}

static void print_row(char cell[NCOLS][CELL], const int *width)
{
	fputs(" ", stdout);
	for (int c = 0; c < NCOLS; c++) {
		/* Numbers right-aligned, the last column not padded. */
		int right = c == COL_FD || c == COL_TX || c == COL_RX;

		if (c == NCOLS - 1)
			printf(" %*s", width[c], cell[c]);
		else
			printf(right ? " %*s" : " %-*s", width[c], cell[c]);
	}
	putchar('\n');
}

static int print_table(const struct sdp_stats_snap *s)
{
	char (*cells)[NCOLS][CELL] = calloc(s->n_socks + 1, sizeof(*cells));
	int width[NCOLS];

	if (!cells)
		return -ENOMEM;
	for (int c = 0; c < NCOLS; c++) {
		snprintf(cells[0][c], CELL, "%s", col_title[c]);
		width[c] = (int)strlen(col_title[c]);
	}
	for (size_t i = 0; i < s->n_socks; i++) {
		sock_cells(&s->socks[i], cells[i + 1]);
		for (int c = 0; c < NCOLS; c++) {
			int w = (int)strlen(cells[i + 1][c]);

			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t i = 0; i <= s->n_socks; i++)
		print_row(cells[i], width);
	free(cells);
	return 0;
}

static void json_addr(const struct sdp_stats_addr *a)
{
	char host[INET6_ADDRSTRLEN + 16];
	unsigned port;
	int ret = sdp_stats_addr_host(a, host, sizeof(host), &port);

	if (ret == -ENOENT) {
		fputs("null", stdout);
	} else if (ret) {
		printf("{\"family\":%u}", (unsigned)a->family);
	} else {
		printf("{\"family\":\"%s\",\"address\":", a->family == AF_INET6 ? "inet6" : "inet");
		sdp_stats_json_string(stdout, host);
		printf(",\"port\":%u}", port);
	}
}

/* A name as a JSON string, or the number when it has none. */
static void json_enum(const char *key, const char *name, unsigned v)
{
	printf(",\"%s\":", key);
	if (name)
		sdp_stats_json_string(stdout, name);
	else
		printf("%u", v);
}

static void json_opt_string(const char *key, const char *s)
{
	printf(",\"%s\":", key);
	if (*s)
		sdp_stats_json_string(stdout, s);
	else
		fputs("null", stdout);
}

static void json_process(const struct sdp_stats_snap *s, const struct opts *o)
{
	printf("{\"pid\":%ld,\"program\":", (long)s->pid);
	sdp_stats_json_string(stdout, s->program);
	printf(",\"start_time\":%" PRIu64 ",\"open_sockets\":%zu", s->start_time, s->n_socks);
	fputs(",\"counters\":{", stdout);
	for (unsigned c = 0; c < s->n_counters; c++) {
		const char *name = sdp_stats_counter_name(c);

		if (name)
			printf("%s\"%s\":%" PRIu64, c ? "," : "", name, s->counters[c]);
		else
			printf("%s\"counter%u\":%" PRIu64, c ? "," : "", c, s->counters[c]);
	}
	fputs("},\"fallbacks\":{", stdout);
	/* Every reason, zero or not: a fixed set of keys for scripts. */
	for (unsigned r = 1; r < s->n_fallbacks; r++) {
		const char *name = sdp_stats_fallback_name(r);

		if (r > 1)
			putchar(',');
		if (name)
			sdp_stats_json_string(stdout, name);
		else
			printf("\"reason%u\"", r);
		printf(":%" PRIu64, s->fallbacks[r]);
	}
	putchar('}');
	if (s->n_busy)
		printf(",\"busy_rows\":%u", s->n_busy);
	if (!o->counters_only) {
		fputs(",\"sockets\":[", stdout);
		for (size_t i = 0; i < s->n_socks; i++) {
			const struct sdp_stats_sock_snap *k = &s->socks[i];

			printf("%s\n  {\"fd\":", i ? "," : "");
			if (k->fd >= 0)
				printf("%d", (int)k->fd);
			else
				fputs("null", stdout);
			json_enum("stack", sdp_stats_stack_name(k->stack), k->stack);
			json_enum("state", sdp_stats_state_name(k->state), k->state);
			printf(",\"relayed\":%s", (k->flags & SDP_STATS_ROW_RELAYED) ? "true" : "false");
			json_opt_string("transport", k->transport);
			json_opt_string("mode", k->mode);
			json_enum("fallback", sdp_stats_fallback_name(k->fallback), k->fallback);
			fputs(",\"local\":", stdout);
			json_addr(&k->local);
			fputs(",\"peer\":", stdout);
			json_addr(&k->peer);
			printf(",\"tx\":%" PRIu64 ",\"rx\":%" PRIu64 "}", k->bytes_tx, k->bytes_rx);
		}
		putchar(']');
	}
	putchar('}');
}

/*
 * One process's snapshot.  A file still being made is retried for a
 * moment; a stale one is removed; one we cannot read is reported on
 * stderr, as it is not the state of a socket but a problem of ours.
 */
static int read_one(const char *dir, pid_t pid, struct sdp_stats_snap *snap)
{
	int ret;

	for (int attempt = 0;; attempt++) {
		ret = sdp_stats_read(dir, pid, SDP_STATS_REMOVE_STALE, snap);
		if (ret != -EAGAIN || attempt == 20)
			break;
		nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
	}
	if (ret == -EPROTO)
		fprintf(stderr, "sdpstat: %s/" SDP_STATS_FILE_PREFIX "%ld: not a statistics file "
			"this sdpstat can read (another libsdp version?)\n", dir, (long)pid);
	else if (ret && ret != -ENOENT && ret != -ESRCH && ret != -EAGAIN)
		fprintf(stderr, "sdpstat: %s/" SDP_STATS_FILE_PREFIX "%ld: %s\n", dir, (long)pid,
			strerror(-ret));
	return ret;
}

static int parse_pid(const char *s, pid_t *pid)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > INT_MAX)
		return -EINVAL;
	*pid = (pid_t)v;
	return 0;
}

static int run(const struct opts *o)
{
	const char *dir = sdp_stats_dir();
	pid_t *pids = NULL;
	size_t n = 0, shown = 0, hidden = 0;
	int ret = 0;

	if (o->pid) {
		pids = malloc(sizeof(*pids));
		if (!pids)
			return -ENOMEM;
		pids[0] = o->pid;
		n = 1;
	} else {
		ret = sdp_stats_list(dir, &pids, &n);
		if (ret == -ENOENT) {
			ret = 0;	/* no directory: nobody uses libsdp */
		} else if (ret) {
			fprintf(stderr, "sdpstat: %s: %s\n", dir, strerror(-ret));
			return ret;
		}
	}

	if (o->json)
		fputs("{\"processes\":[", stdout);
	for (size_t i = 0; i < n; i++) {
		struct sdp_stats_snap snap;

		if (read_one(dir, pids[i], &snap))
			continue;
		/* Counters matter with or without open sockets; the socket
		 * listing shows by default only processes that have some. */
		if (!snap.n_socks && !o->all && !o->counters_only && !o->pid) {
			hidden++;
			sdp_stats_snap_free(&snap);
			continue;
		}
		if (o->json) {
			fputs(shown ? ",\n" : "\n", stdout);
			json_process(&snap, o);
		} else {
			if (shown && !o->counters_only)
				putchar('\n');
			print_summary(&snap);
			if (!o->counters_only) {
				if (snap.n_socks)
					ret = print_table(&snap);
				else
					puts("  no open sockets");
			}
		}
		shown++;
		sdp_stats_snap_free(&snap);
		if (ret)
			break;
	}
	free(pids);
	if (o->json) {
		fputs("]}\n", stdout);
	} else if (!shown) {
		if (o->pid)
			printf("no libsdp statistics for pid %ld\n", (long)o->pid);
		else if (hidden)
			printf("no process using libsdp has an open socket (%zu without: --all shows "
			       "them)\n", hidden);
		else
			puts("no process is using libsdp");
	} else if (hidden) {
		printf("\n%zu more process%s with no open sockets (--all shows them)\n", hidden,
		       hidden == 1 ? "" : "es");
	}
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "counters", no_argument, NULL, 'c' },
		{ "all", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	int c, ret;

	while ((c = getopt_long(argc, argv, "p:cajVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_pid(optarg, &o.pid)) {
				fprintf(stderr, "sdpstat: not a pid: %s\n", optarg);
				return 2;
			}
			break;
		case 'c':
			o.counters_only = 1;
			break;
		case 'a':
			o.all = 1;
			break;
		case 'j':
			o.json = 1;
			break;
		case 'V':
			printf("sdpstat (libsdp) %s\n", PACKAGE_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	ret = run(&o);
	/* stdout may be a closed pipe or a full disk: say so in the status. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		perror("sdpstat: stdout");
		return 1;
	}
	return ret ? 1 : 0;
}
