/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * sdpcat: move a checksummed, seeded pseudo-random stream over SDP (or,
 * with --tcp, the kernel's TCP for comparison) and say whether every byte
 * arrived, in order, and how fast.
 *
 *   sdpcat [--tcp|--convert] -l [ADDR:]PORT [--port-file FILE] [--count N]
 *          [--echo] [--read-delay MS]
 *   sdpcat [--tcp|--convert] -c HOST:PORT [--bytes N] [--seed S]
 *          [--wsize MIN[-MAX]] [--rsize MIN[-MAX]] [--bidir] [--nonblock]
 *
 * --convert: the connection is made with the kernel's TCP, the server
 * sends a greeting line over it, and both ends convert it to SDP
 * (sdp_convert_accept/sdp_convert_connect, doc/conversion.md); the stream
 * then goes over SDP.
 *
 * The protocol is described in xfer.h.  The client exits 0 only when the
 * server's verdict (byte count and XXH64 of what it received) matches what
 * was sent and, with --bidir, the server's stream checked out too.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdp.h"
#include "xfer.h"

#define MAX_IO_SIZE (64u << 20)

/* --convert: the server's last line over TCP, read before converting. */
static const char convert_greeting[] = "sdpcat: converting to SDP\n";
#define CONVERT_GREETING_LEN (sizeof(convert_greeting) - 1)

struct opts {
	const struct xsock_ops *ops;
	bool convert;		/* TCP first, then converted to SDP */
	bool listen;
	const char *addr;
	const char *port_file;
	long count;		/* connections to serve; 0: forever */
	bool echo;
	uint64_t bytes;
	uint32_t seed;
	size_t wmin, wmax;
	size_t rmin, rmax;
	bool bidir;
	bool nonblock;
	int timeout_ms;		/* -1: none */
	int read_delay_ms;	/* the server reads the stream this late */
	int verbose;
};

static struct opts opt = {
	.ops = &xsock_sdp,
	.bytes = 64u << 20,
	.seed = 0x5eed,
	.wmin = 65536, .wmax = 65536,
	.rmin = 65536, .rmax = 65536,
	.timeout_ms = -1,
};

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	/* One write per line: server threads print concurrently. */
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "sdpcat: %s\n", line);
}

static const char *api_name(void)
{
	return opt.ops->name;
}

static const char *transport_of(int sd)
{
	const char *t = opt.ops->transport(sd);

	return t ? t : "?";
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sdpcat [--tcp|--convert] -l [ADDR:]PORT [--port-file FILE] [--count N]\n"
		"              [--echo] [--read-delay MS]\n"
		"       sdpcat [--tcp|--convert] -c HOST:PORT [--bytes N] [--seed S]\n"
		"              [--wsize MIN[-MAX]] [--rsize MIN[-MAX]] [--bidir] [--nonblock]\n"
		"\n"
		"  -l, --listen ADDR    serve on [ADDR:]PORT (PORT 0: pick one; see --port-file)\n"
		"  -c, --connect ADDR   send to HOST:PORT ([IPV6]:PORT for IPv6)\n"
		"  --tcp                use the kernel's TCP instead of SDP (for comparison)\n"
		"  --convert            connect with TCP, then convert the connection to SDP\n"
		"  --port-file FILE     write the listening port to FILE once listening\n"
		"  --count N            serve N connections, then exit (status 1 if any failed)\n"
		"  --echo               echo every byte back instead of checking a stream\n"
		"  --bytes N            bytes to send (suffixes K, M, G, T; default 64M)\n"
		"  --seed S             seed of the generated stream (default 0x5eed)\n"
		"  --wsize MIN[-MAX]    random write sizes in [MIN, MAX] (default 64K)\n"
		"  --rsize MIN[-MAX]    random read sizes in [MIN, MAX] (default 64K)\n"
		"  --bidir              the server streams the same amount back concurrently\n"
		"  --nonblock           client uses a non-blocking socket and poll\n"
		"  --timeout SEC        give up after SEC seconds without progress\n"
		"  --read-delay MS      server: read a stream MS milliseconds after its header\n"
		"  -v, --verbose        report each connection on stderr; twice: and\n"
		"                       the engine's buf_grows, rx_copied_out, buf_bytes at exit\n"
		"  -h, --help           this text\n"
		"\n"
		"The client prints one summary line and exits 0 only if the server\n"
		"received exactly the bytes sent (count and checksum).\n");
}

/* --- server ------------------------------------------------------------- */

struct conn {
	int sd;
	char peer[80];
	int ok;			/* result: 1 good, 0 failed */
	bool detached;		/* serving forever: nobody joins, the thread frees */
	pthread_t thread;
	struct conn *next;
};

static int set_timeouts(int sd)
{
	struct timeval tv;

	if (opt.timeout_ms < 0)
		return 0;
	tv.tv_sec = opt.timeout_ms / 1000;
	tv.tv_usec = (opt.timeout_ms % 1000) * 1000;
	int ret = opt.ops->setsockopt(sd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

	if (!ret)
		ret = opt.ops->setsockopt(sd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return ret;
}

static int serve_echo(struct conn *c)
{
	uint8_t *buf = malloc(opt.rmax);
	uint64_t total = 0;
	int ret = 0;

	if (!buf) {
		msg("%s: out of memory", c->peer);
		return 0;
	}
	for (;;) {
		ssize_t n = opt.ops->recv(c->sd, buf, opt.rmax, 0);

		if (n == -EINTR)
			continue;
		if (n < 0) {
			msg("%s: recv: %s after %" PRIu64 " bytes", c->peer,
			    strerror((int)-n), total);
			ret = (int)n;
			break;
		}
		if (n == 0)
			break;
		ssize_t w = xfer_send_all(opt.ops, c->sd, buf, (size_t)n, opt.timeout_ms);

		if (w < 0) {
			msg("%s: send: %s after %" PRIu64 " bytes", c->peer,
			    strerror((int)-w), total);
			ret = (int)w;
			break;
		}
		total += (uint64_t)n;
	}
	free(buf);
	if (!ret)
		ret = opt.ops->shutdown(c->sd, SHUT_WR);
	if (opt.verbose && !ret)
		msg("%s: echoed %" PRIu64 " bytes", c->peer, total);
	return ret == 0;
}

static int serve_stream(struct conn *c)
{
	uint8_t hdrb[XFER_HDR_LEN], verdict[XFER_VERDICT_LEN];
	struct xfer_hdr h;
	struct xfer_pump p;
	int ret, ok = 0;
	ssize_t n;

	n = xfer_recv_all(opt.ops, c->sd, hdrb, sizeof(hdrb), opt.timeout_ms);
	if (n < 0) {
		msg("%s: reading header: %s", c->peer, strerror((int)-n));
		return 0;
	}
	if (n < (ssize_t)sizeof(hdrb)) {
		msg("%s: EOF after %zd bytes of the header", c->peer, n);
		return 0;
	}
	xfer_hdr_decode(hdrb, &h);
	if (h.magic != XFER_MAGIC_ONEWAY && h.magic != XFER_MAGIC_BIDIR) {
		msg("%s: bad header magic 0x%08x", c->peer, h.magic);
		return 0;
	}
	bool bidir = h.magic == XFER_MAGIC_BIDIR;

	if (opt.read_delay_ms)
		usleep((useconds_t)opt.read_delay_ms * 1000u);

	xfer_pump_init(&p, opt.ops, c->sd);
	p.idle_timeout_ms = opt.timeout_ms;
	ret = xfer_pump_rx(&p, XFER_UNLIMITED, true, h.seed, opt.rmin, opt.rmax,
			   xfer_size_seed(h.seed, 1));
	if (!ret && bidir)
		ret = xfer_pump_tx(&p, h.bytes, xfer_reply_seed(h.seed), opt.wmin, opt.wmax,
				   xfer_size_seed(h.seed, 2), false);
	if (ret) {
		msg("%s: %s", c->peer, strerror(-ret));
		goto out;
	}
	if (bidir) {
		/* Both directions at once need poll; a blocking send could
		 * wait on a peer that is itself blocked sending to us. */
		ret = opt.ops->set_nonblock(c->sd, 1);
		if (ret) {
			msg("%s: set_nonblock: %s", c->peer, strerror(-ret));
			goto out;
		}
		p.nonblock = true;
	}
	uint64_t t0 = xfer_now_ns();

	ret = xfer_pump_run(&p);
	if (ret) {
		msg("%s: %s: %s after %" PRIu64 " of %" PRIu64 " bytes received%s",
		    c->peer, p.err_op, strerror(-ret), p.rx_done, h.bytes,
		    bidir ? " (bidir)" : "");
		/* What came before the error must be intact all the same. */
		if (p.rx_bad_off != XFER_UNLIMITED)
			msg("%s: data mismatch at byte %" PRIu64 " of %" PRIu64, c->peer,
			    p.rx_bad_off, h.bytes);
		goto out;
	}
	uint64_t ns = xfer_now_ns() - t0;
	bool good = true;

	if (p.rx_done != h.bytes) {
		msg("%s: short transfer: EOF after %" PRIu64 " of %" PRIu64 " bytes",
		    c->peer, p.rx_done, h.bytes);
		good = false;
	} else if (p.rx_bad_off != XFER_UNLIMITED) {
		msg("%s: data mismatch at byte %" PRIu64 " of %" PRIu64, c->peer,
		    p.rx_bad_off, h.bytes);
		good = false;
	}
	/* The verdict goes back even on a mismatch: the client decides and
	 * reports, and we say what we saw.  After a short transfer the peer
	 * is probably gone, so errors from here on are only worth reporting
	 * when the data was good. */
	xfer_verdict_encode(verdict, p.rx_done, xhash_digest(&p.rx_hash));
	n = xfer_send_all(opt.ops, c->sd, verdict, sizeof(verdict), opt.timeout_ms);
	if (n < 0) {
		if (good)
			msg("%s: sending verdict: %s", c->peer, strerror((int)-n));
		goto out;
	}
	ret = opt.ops->shutdown(c->sd, SHUT_WR);
	if (ret) {
		if (good)
			msg("%s: shutdown: %s", c->peer, strerror(-ret));
		goto out;
	}
	if (!good)
		goto out;
	ok = 1;
	if (opt.verbose)
		msg("%s: received %" PRIu64 " bytes%s in %.3f s = %.2f Gbit/s, data ok",
		    c->peer, p.rx_done, bidir ? " (and sent as many)" : "", ns / 1e9,
		    xfer_gbit_s(p.rx_done, ns));
out:
	xfer_pump_free(&p);
	return ok;
}

static void *serve_thread(void *arg)
{
	struct conn *c = arg;

	if (set_timeouts(c->sd))
		msg("%s: cannot set timeouts", c->peer);
	c->ok = opt.echo ? serve_echo(c) : serve_stream(c);
	int ret = opt.ops->close(c->sd);

	if (ret) {
		msg("%s: close: %s", c->peer, strerror(-ret));
		c->ok = 0;
	}
	if (c->detached)
		free(c);
	return NULL;
}

static int write_port_file(const char *path, int port)
{
	char tmp[4096];
	FILE *f;

	/* Written aside and renamed, so a script polling for the file never
	 * reads it half-written. */
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		int err = errno;

		unlink(tmp);
		return -err;
	}
	return 0;
}

static int run_server(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	const char *step;
	int ls, ret;
	long served = 0, failed = 0;
	struct conn *conns = NULL;

	/* With --convert the listener is the kernel's; the connections it
	 * gives become SDP ones. */
	const struct xsock_ops *lops = opt.convert ? &xsock_tcp : opt.ops;

	ret = xfer_parse_addr(opt.addr, true, &ss, &len);
	if (ret) {
		msg("bad listen address '%s': %s", opt.addr, strerror(-ret));
		return 2;
	}
	ls = xfer_listen(lops, (struct sockaddr *)&ss, len, 0, 128, true, &step);
	if (ls < 0) {
		if (!strcmp(step, "bind") || !strcmp(step, "listen"))
			msg("listen on %s: %s", opt.addr, strerror(-ls));
		else
			msg("%s: %s", step, strerror(-ls));
		return 1;
	}
	char name[80];

	xfer_format_addr((struct sockaddr *)&ss, name, sizeof(name));
	if (opt.verbose)
		msg("%s: listening on %s", lops->name, name);
	if (opt.port_file) {
		ret = write_port_file(opt.port_file, xfer_addr_port((struct sockaddr *)&ss));
		if (ret) {
			msg("%s: %s", opt.port_file, strerror(-ret));
			lops->close(ls);
			return 1;
		}
	}

	while (!opt.count || served < opt.count) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int sd = lops->accept(ls, (struct sockaddr *)&peer, &plen, 0);

		if (sd == -EINTR || sd == -ECONNABORTED)
			continue;
		if (sd < 0) {
			msg("accept: %s", strerror(-sd));
			failed++;
			break;
		}
		if (opt.convert) {
			int fd = sd;

			sd = sdp_convert_accept(fd, convert_greeting, CONVERT_GREETING_LEN,
						opt.timeout_ms > 0 ? opt.timeout_ms : 30000);
			if (sd < 0) {
				msg("converting the connection to SDP: %s", strerror(-sd));
				close(fd);
				served++;
				failed++;
				continue;
			}
		}
		struct conn *c = calloc(1, sizeof(*c));

		if (!c) {
			msg("out of memory");
			opt.ops->close(sd);
			failed++;
			break;
		}
		c->sd = sd;
		xfer_format_addr((struct sockaddr *)&peer, c->peer, sizeof(c->peer));
		if (opt.verbose)
			msg("accepted %s connection from %s over %s", api_name(), c->peer,
			    transport_of(sd));
		served++;
		c->detached = !opt.count;
		ret = pthread_create(&c->thread, NULL, serve_thread, c);
		if (ret) {
			msg("pthread_create: %s", strerror(ret));
			opt.ops->close(sd);
			free(c);
			failed++;
			break;
		}
		if (!opt.count) {
			/* Serving forever: nobody will join. */
			pthread_detach(c->thread);
			continue;
		}
		c->next = conns;
		conns = c;
	}
	while (conns) {
		struct conn *c = conns;

		conns = c->next;
		pthread_join(c->thread, NULL);
		if (!c->ok)
			failed++;
		free(c);
	}
	lops->close(ls);
	if (opt.verbose || failed)
		msg("served %ld connection(s), %ld failed", served, failed);
	return failed ? 1 : 0;
}

/* --- client ------------------------------------------------------------- */

/* --convert: a kernel TCP connection, the server's greeting read off it,
 * then converted; the SDP sd, or a negative errno. */
static int connect_converted(const struct sockaddr_storage *ss, socklen_t len)
{
	char greeting[CONVERT_GREETING_LEN];
	int fd = xfer_dial(&xsock_tcp, (const struct sockaddr *)ss, len, opt.timeout_ms, NULL);
	int ret = 0;

	if (fd < 0)
		return fd;
	ssize_t n = xfer_recv_all(&xsock_tcp, fd, greeting, sizeof(greeting), opt.timeout_ms);

	if (n != (ssize_t)sizeof(greeting) || memcmp(greeting, convert_greeting, n))
		ret = n < 0 ? (int)n : -EPROTO;
	if (!ret) {
		int sd = sdp_convert_connect(fd, opt.timeout_ms > 0 ? opt.timeout_ms : 30000);

		if (sd >= 0)
			return sd;	/* fd is closed */
		ret = sd;
	}
	xsock_tcp.close(fd);
	return ret;
}

static int run_client(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int sd, ret, status = 1;
	uint8_t hdrb[XFER_HDR_LEN], verdict[XFER_VERDICT_LEN + 1];
	struct xfer_pump p;
	ssize_t n;

	ret = xfer_parse_addr(opt.addr, false, &ss, &len);
	if (ret) {
		msg("bad address '%s': %s", opt.addr, strerror(-ret));
		return 2;
	}
	uint64_t t0 = xfer_now_ns();

	sd = opt.convert ? connect_converted(&ss, len) : opt.ops->socket(ss.ss_family, SOCK_STREAM, 0);
	if (sd < 0) {
		msg("%s: %s", opt.convert ? "conversion" : "socket", strerror(-sd));
		return 1;
	}
	xfer_pump_init(&p, opt.ops, sd);
	if (set_timeouts(sd)) {
		msg("cannot set timeouts");
		goto out;
	}
	if (opt.nonblock || opt.bidir) {
		ret = opt.ops->set_nonblock(sd, 1);
		if (ret) {
			msg("set_nonblock: %s", strerror(-ret));
			goto out;
		}
		p.nonblock = true;
	}
	ret = opt.convert ? 0 : xfer_connect(opt.ops, sd, (struct sockaddr *)&ss, len,
					     opt.timeout_ms);
	if (ret) {
		msg("connect to %s: %s", opt.addr, strerror(-ret));
		goto out;
	}
	const char *transport = transport_of(sd);

	if (opt.verbose)
		msg("%s: connected to %s over %s", api_name(), opt.addr, transport);

	struct xfer_hdr h = {
		.magic = opt.bidir ? XFER_MAGIC_BIDIR : XFER_MAGIC_ONEWAY,
		.seed = opt.seed,
		.bytes = opt.bytes,
	};

	xfer_hdr_encode(hdrb, &h);
	n = xfer_send_all(opt.ops, sd, hdrb, sizeof(hdrb), opt.timeout_ms);
	if (n < 0) {
		msg("sending header: %s", strerror((int)-n));
		goto out;
	}
	p.idle_timeout_ms = opt.timeout_ms;
	ret = xfer_pump_tx(&p, opt.bytes, opt.seed, opt.wmin, opt.wmax,
			   xfer_size_seed(opt.seed, 3), true);
	if (!ret && opt.bidir)
		ret = xfer_pump_rx(&p, opt.bytes, true, xfer_reply_seed(opt.seed), opt.rmin,
				   opt.rmax, xfer_size_seed(opt.seed, 4));
	if (ret) {
		msg("%s", strerror(-ret));
		goto out;
	}
	ret = xfer_pump_run(&p);
	if (ret) {
		msg("%s: %s after %" PRIu64 " of %" PRIu64 " bytes sent%s", p.err_op,
		    strerror(-ret), p.tx_done, opt.bytes,
		    opt.bidir ? " (bidir)" : "");
		if (p.rx_bad_off != XFER_UNLIMITED)
			msg("data mismatch from the server at byte %" PRIu64, p.rx_bad_off);
		goto out;
	}
	if (opt.bidir && p.rx_done != opt.bytes) {
		msg("short transfer from the server: EOF after %" PRIu64 " of %" PRIu64
		    " bytes", p.rx_done, opt.bytes);
		goto out;
	}
	/* Read one byte past the verdict: the server must close right after
	 * it, and anything more is a protocol error. */
	n = xfer_recv_all(opt.ops, sd, verdict, sizeof(verdict), opt.timeout_ms);
	uint64_t ns = xfer_now_ns() - t0;

	if (n < 0) {
		msg("reading verdict: %s", strerror((int)-n));
		goto out;
	}
	if (n != XFER_VERDICT_LEN) {
		if (n < XFER_VERDICT_LEN)
			msg("EOF after %zd bytes of the server's verdict (server failed?)", n);
		else
			msg("unexpected data after the server's verdict");
		goto out;
	}
	uint64_t vbytes, vhash, hash = xhash_digest(&p.tx_hash);

	xfer_verdict_decode(verdict, &vbytes, &vhash);

	const char *dir = opt.bidir ? "sent and received each way" : "sent";
	double secs = ns / 1e9;

	if (vbytes != opt.bytes) {
		msg("%s %s: short transfer: server received %" PRIu64 " of %" PRIu64
		    " bytes", api_name(), transport, vbytes, opt.bytes);
		goto out;
	}
	if (vhash != hash) {
		msg("%s %s: %" PRIu64 " bytes %s in %.3f s, CHECKSUM MISMATCH: "
		    "server 0x%016" PRIx64 ", sent 0x%016" PRIx64,
		    api_name(), transport, opt.bytes, dir, secs, vhash, hash);
		goto out;
	}
	if (opt.bidir && p.rx_bad_off != XFER_UNLIMITED) {
		msg("%s %s: data from the server differs at byte %" PRIu64,
		    api_name(), transport, p.rx_bad_off);
		goto out;
	}
	printf("sdpcat: %s %s: %" PRIu64 " bytes %s in %.3f s = %.2f Gbit/s, checksum ok\n",
	       api_name(), transport, opt.bytes, dir, secs,
	       xfer_gbit_s(opt.bytes, ns));
	fflush(stdout);
	status = 0;
out:
	xfer_pump_free(&p);
	ret = opt.ops->close(sd);
	if (ret && !status) {
		msg("close: %s", strerror(-ret));
		status = 1;
	}
	return status;
}

/* --- main ----------------------------------------------------------------- */

enum {
	OPT_TCP = 256, OPT_CONVERT, OPT_PORT_FILE, OPT_COUNT, OPT_ECHO, OPT_BYTES, OPT_SEED,
	OPT_WSIZE, OPT_RSIZE, OPT_BIDIR, OPT_NONBLOCK, OPT_TIMEOUT, OPT_READ_DELAY,
};

static const struct option longopts[] = {
	{ "listen", required_argument, NULL, 'l' },
	{ "connect", required_argument, NULL, 'c' },
	{ "tcp", no_argument, NULL, OPT_TCP },
	{ "convert", no_argument, NULL, OPT_CONVERT },
	{ "port-file", required_argument, NULL, OPT_PORT_FILE },
	{ "count", required_argument, NULL, OPT_COUNT },
	{ "echo", no_argument, NULL, OPT_ECHO },
	{ "bytes", required_argument, NULL, OPT_BYTES },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "wsize", required_argument, NULL, OPT_WSIZE },
	{ "rsize", required_argument, NULL, OPT_RSIZE },
	{ "bidir", no_argument, NULL, OPT_BIDIR },
	{ "nonblock", no_argument, NULL, OPT_NONBLOCK },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "read-delay", required_argument, NULL, OPT_READ_DELAY },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int bad_arg(const char *what, const char *val)
{
	msg("bad %s '%s'", what, val);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	int c, mode = 0;
	char *end;

	while ((c = getopt_long(argc, argv, "l:c:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
		case 'c':
			if (mode)
				return bad_arg("usage: -l and -c together", optarg);
			mode = c;
			opt.addr = optarg;
			break;
		case OPT_CONVERT:
			opt.convert = true;
			break;
		case OPT_TCP:
			opt.ops = &xsock_tcp;
			break;
		case OPT_PORT_FILE:
			opt.port_file = optarg;
			break;
		case OPT_COUNT:
			opt.count = strtol(optarg, &end, 10);
			if (*end || opt.count < 0)
				return bad_arg("--count", optarg);
			break;
		case OPT_ECHO:
			opt.echo = true;
			break;
		case OPT_BYTES:
			if (xfer_parse_size(optarg, &opt.bytes))
				return bad_arg("--bytes", optarg);
			break;
		case OPT_SEED: {
			unsigned long long s;

			errno = 0;
			s = strtoull(optarg, &end, 0);
			if (errno || *end || s > UINT32_MAX)
				return bad_arg("--seed", optarg);
			opt.seed = (uint32_t)s;
			break;
		}
		case OPT_WSIZE:
			if (xfer_parse_range(optarg, MAX_IO_SIZE, &opt.wmin, &opt.wmax))
				return bad_arg("--wsize", optarg);
			break;
		case OPT_RSIZE:
			if (xfer_parse_range(optarg, MAX_IO_SIZE, &opt.rmin, &opt.rmax))
				return bad_arg("--rsize", optarg);
			break;
		case OPT_BIDIR:
			opt.bidir = true;
			break;
		case OPT_NONBLOCK:
			opt.nonblock = true;
			break;
		case OPT_TIMEOUT: {
			double s = strtod(optarg, &end);

			if (*end || s <= 0 || s > 86400)
				return bad_arg("--timeout", optarg);
			opt.timeout_ms = (int)(s * 1000);
			break;
		}
		case OPT_READ_DELAY: {
			long ms = strtol(optarg, &end, 10);

			if (*end || ms < 0 || ms > 600000)
				return bad_arg("--read-delay", optarg);
			opt.read_delay_ms = (int)ms;
			break;
		}
		case 'v':
			opt.verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !mode) {
		usage(stderr);
		return 2;
	}
	if (opt.convert && opt.ops == &xsock_tcp) {
		msg("--convert and --tcp exclude each other");
		return 2;
	}
	/* Errors are reported by send(); a dead peer must not kill us
	 * silently (MSG_NOSIGNAL covers most sends, this covers the rest). */
	signal(SIGPIPE, SIG_IGN);
	if (opt.ops == &xsock_sdp) {
		int ret = sdp_init();

		if (ret < 0) {
			msg("sdp_init: %s", strerror(-ret));
			return 1;
		}
		if (ret == 0) {
			msg("sdp_init: no usable transport (SDP_TRANSPORTS=%s)",
			    getenv("SDP_TRANSPORTS") ? getenv("SDP_TRANSPORTS") : "");
			return 1;
		}
	}
	int status = mode == 'l' ? run_server() : run_client();

	if (opt.verbose > 1) {
		struct sdp_stats st;

		sdp_get_stats(&st);
		msg("engine: buf_grows=%" PRIu64 " rx_copied_out=%" PRIu64 " buf_bytes=%" PRIu64,
		    st.buf_grows, st.rx_copied_out, st.buf_bytes);
	}
	return status;
}
