/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * qp_cost: what each verbs object of one SDP connection end costs on an
 * RDMA device, in time and in kernel memory, with libsdp's sizes
 * (transports/verbs/verbs.c, sdp/post.c).  Raw verbs, no libsdp: the
 * figures behind doc/scale.md's "Several connections on one QP or
 * transport connection".
 *
 *   qp_cost ADDR N [MR_N] [--iwarp]
 *
 * ADDR is a local address of the device (in the VM testbed VM_ADDR_RXE or
 * VM_ADDR_SIW); --iwarp gives the send queue the start rule's 4 extra
 * entries, as libsdp does on iWARP.  Phases, each made N times and kept
 * (so that the memory they hold is seen), one line each:
 *
 *   pd       ibv_alloc_pd
 *   cq       ibv_create_comp_channel + ibv_create_cq (516 entries)
 *   id       rdma_create_id + rdma_bind_addr (an id bound to the device)
 *   qp       rdma_create_qp: RC, 256 (+4) send, 256 receive, 1 SGE, 64 B inline
 *   cq32, qp32  the same with queues of 32 (+4) entries each way (a CQ of
 *            68), enough for 16 + 16 buffers: what smaller queues save
 *   mr8m     MR_N times (default N) libsdp's buffers at today's tunables:
 *            ibv_reg_mr of 16 x 262160 B (receive ring, local write),
 *            4 KiB (control), 16 x 262160 B (send ring)
 *   mr64k    the same with a 32 KiB receive and a 32 KiB send ring
 *   connect  N connections to a listener of the same process, each one
 *            whole: id, resolve address and route, PD, CQ, QP on both
 *            ends, rdma_connect with private data of a Hello's size (56
 *            bytes on IB, all a connect request has room for; 92 on
 *            iWARP) and rdma_accept, until both ends are ESTABLISHED
 *            (us_cm: from rdma_connect to both, the exchange alone)
 *   rtt      1000 round trips of a 64-byte SEND on one of those
 *            connections, busy-polled: what a connection set up in band
 *            on a QP already there would pay instead (a Hello and a
 *            HelloAck)
 *
 * Each line has the time per object (median, min, 90th percentile, max,
 * in microseconds) and the change over the phase, per object, of
 * /proc/meminfo (Slab, VmallocUsed, PageTables, MemFree) and of the
 * process's VmRSS and VmPin, in KiB, then the three slab caches that
 * grew the most (from /proc/slabinfo, root only).  The connect phase's
 * memory is that of both ends.  Build: made by `make` (bench/qp_cost);
 * by hand: cc -O2 -o qp_cost bench/qp_cost.c -lrdmacm -libverbs.
 * Needs RLIMIT_MEMLOCK for MR_N x 8 MiB (the testbed's guest: unlimited).
 * siw in the testbed often fails ibv_create_cq (EIO) when N is 20 or
 * more, sometimes sooner (doc/scale.md, which used N = 8 there).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define SQ_DEPTH 256
#define RQ_DEPTH 256
#define RTR_SQ_ROOM 4
#define CQ_DEPTH (SQ_DEPTH + RTR_SQ_ROOM + RQ_DEPTH)
/* queues sized to 16 + 16 buffers with room to spare, for comparison */
#define SMALL_DEPTH 32
#define BUF_SIZE 262160
#define NBUFS 16
#define HELLO_LEN_IB 56
#define HELLO_LEN_IW 92
#define RTT_COUNT 1000
#define MAX_SLABS 512

static struct rdma_event_channel *chan;
static struct ibv_context *ctx;
static struct sockaddr_in addr;
static int iwarp;
static int at = -1;	/* the object being made, for the error message */

__attribute__((noreturn)) static void die(const char *what)
{
	fprintf(stderr, "qp_cost: %s (object %d): %s\n", what, at, strerror(errno ? errno : EIO));
	exit(1);
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* --- memory --------------------------------------------------------------- */

struct slab { char name[64]; long long bytes; };

struct mem {
	long long slab, vmalloc, pagetables, memfree, rss, pin;
	struct slab slabs[MAX_SLABS];
	int nslabs;
};

static long long field(const char *file, const char *key)
{
	FILE *f = fopen(file, "r");
	char line[256];
	long long v = -1;
	size_t n = strlen(key);

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = atoll(line + n + 1);
			break;
		}
	fclose(f);
	return v;
}

static void mem_read(struct mem *m)
{
	FILE *f;
	char line[512];

	m->slab = field("/proc/meminfo", "Slab");
	m->vmalloc = field("/proc/meminfo", "VmallocUsed");
	m->pagetables = field("/proc/meminfo", "PageTables");
	m->memfree = field("/proc/meminfo", "MemFree");
	m->rss = field("/proc/self/status", "VmRSS");
	m->pin = field("/proc/self/status", "VmPin");
	m->nslabs = 0;
	f = fopen("/proc/slabinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && m->nslabs < MAX_SLABS) {
		struct slab *s = &m->slabs[m->nslabs];
		long long active, total, size;

		if (sscanf(line, "%63s %lld %lld %lld", s->name, &active, &total, &size) == 4) {
			s->bytes = active * size;
			m->nslabs++;
		}
	}
	fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int cmp_grow(const void *a, const void *b)
{
	const struct slab *x = a, *y = b;

	return (y->bytes > x->bytes) - (y->bytes < x->bytes);
}

static void report(const char *phase, int n, double *us, const struct mem *a,
		   const struct mem *b, const char *extra)
{
	static struct slab grow[MAX_SLABS];
	int ng = 0;

	qsort(us, (size_t)n, sizeof(*us), cmp_double);
	printf("%-8s n=%d us_med=%.1f us_min=%.1f us_p90=%.1f us_max=%.1f", phase, n,
	       us[n / 2], us[0], us[n * 9 / 10], us[n - 1]);
	printf(" slab_kb=%.2f vmalloc_kb=%.2f pagetables_kb=%.2f memfree_kb=%.2f rss_kb=%.2f pin_kb=%.2f%s\n",
	       (double)(b->slab - a->slab) / n, (double)(b->vmalloc - a->vmalloc) / n,
	       (double)(b->pagetables - a->pagetables) / n, (double)(a->memfree - b->memfree) / n,
	       (double)(b->rss - a->rss) / n, (double)(b->pin - a->pin) / n, extra);
	for (int i = 0; i < b->nslabs; i++)
		for (int j = 0; j < a->nslabs; j++)
			if (!strcmp(a->slabs[j].name, b->slabs[i].name)) {
				grow[ng] = b->slabs[i];
				grow[ng++].bytes -= a->slabs[j].bytes;
				break;
			}
	qsort(grow, (size_t)ng, sizeof(*grow), cmp_grow);
	printf("         slabs grown (bytes per object):");
	for (int i = 0; i < 3 && i < ng && grow[i].bytes > 0; i++)
		printf(" %s %lld", grow[i].name, grow[i].bytes / n);
	printf("\n");
	fflush(stdout);
}

/* --- objects -------------------------------------------------------------- */

struct end {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
};

static void make_cq(struct end *e, int depth)
{
	errno = 0;
	e->cc = ibv_create_comp_channel(ctx);
	if (!e->cc)
		die("ibv_create_comp_channel");
	errno = 0;
	e->cq = ibv_create_cq(ctx, depth, NULL, e->cc, 0);
	if (!e->cq)
		die("ibv_create_cq");
}

static void make_qp(struct end *e, int depth)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = e->cq, .recv_cq = e->cq,
		.cap = { .max_send_wr = depth + (iwarp ? RTR_SQ_ROOM : 0),
			 .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};

	if (!rdma_create_qp(e->id, e->pd, &attr))
		return;
	attr.cap.max_inline_data = 0;	/* as libsdp: some devices cannot inline */
	if (rdma_create_qp(e->id, e->pd, &attr))
		die("rdma_create_qp");
}

static void make_end(struct end *e)
{
	e->pd = ibv_alloc_pd(ctx);
	if (!e->pd)
		die("ibv_alloc_pd");
	make_cq(e, CQ_DEPTH);
	make_qp(e, SQ_DEPTH);
}

static void *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

static void reg(struct ibv_pd *pd, size_t len, int access)
{
	if (!ibv_reg_mr(pd, map(len), len, access))
		die("ibv_reg_mr");
}

/* The next event, which must be `want` (on any id of the channel). */
static struct rdma_cm_id *expect(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	if (rdma_get_cm_event(chan, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "qp_cost: event %s, expected %s (status %d)\n",
			rdma_event_str(ev->event), rdma_event_str(want), ev->status);
		exit(1);
	}
	id = ev->id;
	rdma_ack_cm_event(ev);
	return id;
}

/* Busy-polls cq for one completion; wants a success. */
static void reap(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "qp_cost: completion: %s\n",
			n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void post_recv(struct ibv_qp *qp, struct ibv_sge *sge)
{
	struct ibv_recv_wr wr = { .sg_list = sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct ibv_qp *qp, struct ibv_sge *sge)
{
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

/* Round trips between the two ends of one connection, both in this
 * process: a SEND each way, each received before the next goes. */
static void rtt(struct end *a, struct end *p)
{
	static double us[RTT_COUNT];
	struct mem m0, m1;
	char *buf = map(4096);
	struct ibv_mr *mra = ibv_reg_mr(a->pd, buf, 2048, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mrp = ibv_reg_mr(p->pd, buf + 2048, 2048, IBV_ACCESS_LOCAL_WRITE);

	if (!mra || !mrp)
		die("ibv_reg_mr");
	struct ibv_sge sa = { (uintptr_t)buf, 64, mra->lkey };
	struct ibv_sge ra = { (uintptr_t)buf + 1024, 64, mra->lkey };
	struct ibv_sge sp = { (uintptr_t)buf + 2048, 64, mrp->lkey };
	struct ibv_sge rp = { (uintptr_t)buf + 3072, 64, mrp->lkey };

	mem_read(&m0);
	for (int i = -RTT_COUNT / 10; i < RTT_COUNT; i++) {
		double t = now_us();

		post_recv(p->id->qp, &rp);
		post_recv(a->id->qp, &ra);
		post_send(a->id->qp, &sa);
		reap(p->cq);	/* the peer's receive and ... */
		reap(a->cq);	/* ... our send, in either order: both are needed */
		post_send(p->id->qp, &sp);
		reap(a->cq);
		reap(p->cq);
		if (i >= 0)
			us[i] = now_us() - t;
	}
	mem_read(&m1);
	report("rtt", RTT_COUNT, us, &m0, &m1, "");
}

static void connect_phase(int n, struct rdma_cm_id *listener)
{
	double *us = calloc((size_t)n, sizeof(*us)), *cm = calloc((size_t)n, sizeof(*cm));
	struct end *act = calloc((size_t)n, sizeof(*act)), *pas = calloc((size_t)n, sizeof(*pas));
	struct sockaddr_in dst = addr;
	char pdata[HELLO_LEN_IW] = { 0 };
	struct mem m0, m1;
	char extra[64];

	if (!us || !cm || !act || !pas)
		die("calloc");
	dst.sin_port = rdma_get_src_port(listener);
	mem_read(&m0);
	for (int i = 0; i < n; i++) {
		struct rdma_conn_param cp = { .private_data = pdata,
					      .private_data_len = iwarp ? HELLO_LEN_IW : HELLO_LEN_IB,
					      .responder_resources = 4, .initiator_depth = 4,
					      .retry_count = 7, .rnr_retry_count = 7 };
		double t0 = now_us(), t1;
		at = i;
		if (rdma_create_id(chan, &act[i].id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(act[i].id, NULL, (struct sockaddr *)&dst, 2000))
			die("rdma_resolve_addr");
		expect(RDMA_CM_EVENT_ADDR_RESOLVED);
		if (rdma_resolve_route(act[i].id, 2000))
			die("rdma_resolve_route");
		expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
		make_end(&act[i]);
		t1 = now_us();
		if (rdma_connect(act[i].id, &cp))
			die("rdma_connect");
		pas[i].id = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
		make_end(&pas[i]);
		if (rdma_accept(pas[i].id, &cp))
			die("rdma_accept");
		/* The two ESTABLISHED events, in either order. */
		expect(RDMA_CM_EVENT_ESTABLISHED);
		expect(RDMA_CM_EVENT_ESTABLISHED);
		us[i] = now_us() - t0;
		cm[i] = now_us() - t1;
	}
	mem_read(&m1);
	qsort(cm, (size_t)n, sizeof(*cm), cmp_double);
	snprintf(extra, sizeof(extra), " us_cm_med=%.1f us_cm_min=%.1f us_cm_max=%.1f",
		 cm[n / 2], cm[0], cm[n - 1]);
	report("connect", n, us, &m0, &m1, extra);
	rtt(&act[0], &pas[0]);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listener;
	struct end *e, *f;
	struct mem m0, m1;
	double *us;
	int n, mr_n;

	if (argc < 3) {
		fprintf(stderr, "usage: qp_cost ADDR N [MR_N] [--iwarp]\n");
		return 2;
	}
	n = atoi(argv[2]);
	mr_n = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : n;
	iwarp = !strcmp(argv[argc - 1], "--iwarp");
	if (n < 1 || mr_n < 0)
		return 2;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1)
		return 2;
	us = calloc((size_t)(n > mr_n ? n : mr_n), sizeof(*us));
	e = calloc((size_t)n, sizeof(*e));
	f = calloc((size_t)n, sizeof(*f));
	if (!us || !e || !f)
		die("calloc");
	chan = rdma_create_event_channel();
	if (!chan || rdma_create_id(chan, &listener, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listener, (struct sockaddr *)&addr) || rdma_listen(listener, 128))
		die("rdma_bind_addr/listen");
	ctx = listener->verbs;
	if (!ctx)
		die("no device at that address");
	printf("device %s, n=%d, mr_n=%d%s\n", ibv_get_device_name(ctx->device), n, mr_n,
	       iwarp ? ", iwarp send queue" : "");

#define PHASE(name, count, body)                                 \
	do {                                                     \
		mem_read(&m0);                                   \
		for (int i = 0; i < (count); i++) {              \
			double t = now_us();                     \
			at = i;                                  \
			errno = 0;                               \
			body;                                    \
			us[i] = now_us() - t;                    \
		}                                                \
		mem_read(&m1);                                   \
		if (count)                                       \
			report(name, (count), us, &m0, &m1, ""); \
	} while (0)

	PHASE("pd", n, if (!(e[i].pd = ibv_alloc_pd(ctx))) die("ibv_alloc_pd"));
	PHASE("cq", n, make_cq(&e[i], CQ_DEPTH));
	PHASE("id", n, {
		struct sockaddr_in a = addr;

		a.sin_port = 0;
		if (rdma_create_id(chan, &e[i].id, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(e[i].id, (struct sockaddr *)&a))
			die("rdma_create_id/bind");
	});
	PHASE("qp", n, make_qp(&e[i], SQ_DEPTH));
	PHASE("cq32", n, make_cq(&f[i], 2 * SMALL_DEPTH + RTR_SQ_ROOM));
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = addr;

		a.sin_port = 0;
		f[i].pd = e[i].pd;
		if (rdma_create_id(chan, &f[i].id, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(f[i].id, (struct sockaddr *)&a))
			die("rdma_create_id/bind");
	}
	PHASE("qp32", n, make_qp(&f[i], SMALL_DEPTH));
	PHASE("mr8m", mr_n, {
		struct ibv_pd *pd = e[i % n].pd;

		reg(pd, (size_t)NBUFS * BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
		reg(pd, 4096, 0);
		reg(pd, (size_t)NBUFS * BUF_SIZE, 0);
	});
	PHASE("mr64k", n, {
		reg(e[i].pd, 32768, IBV_ACCESS_LOCAL_WRITE);
		reg(e[i].pd, 4096, 0);
		reg(e[i].pd, 32768, 0);
	});
	connect_phase(n, listener);
	/* Everything is the kernel's to tear down at exit. */
	return 0;
}
