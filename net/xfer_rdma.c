/*
 * net/xfer_rdma.c: the RDMA transport of the data plane, over the thin
 * verbs interface (net/verbs.h), so that its logic runs against the real
 * libibverbs and against the in-process double of the tests alike.
 *
 * Part: net/. Divisions: devices (the hub, one shared context per
 * device), life cycle of a link, posting and completions, waiting, send
 * and receive.
 *
 * Send/recv on an RC queue pair, not RDMA write: a frame is at most one
 * slot, the receiver chooses where it lands (its pre-posted ring), no
 * remote addresses or rkeys need exchanging, and write-with-immediate
 * would consume a posted receive per message anyway, so the credit rules
 * are the same; at decode sizes (<= 16 KiB) both are one packet train.
 *
 * Device, port and GID: per link, from the interface and local address of
 * its TCP socket (the data endpoint it upgrades), by net/rdma_select.h.
 *
 * Sharing: per device one context, protection domain, completion queue
 * (with its channel) and registered pool, in the hub, counted by the links
 * that use it and freed with the last. Each link owns a queue pair and a
 * region of the pool: a ring of `slots` receive buffers and `nsend` send
 * buffers, slot_size bytes each. A completion names its link in wr_id
 * (link id << 40 | send bit | slot or send seq); whichever link polls the
 * CQ hands each completion to its owner and wakes it (its poke pipe). One
 * mutex per device guards the CQ and the state of its links.
 *
 * Credit rules (the sender never posts more sends than the receiver has
 * posted receives):
 *  1. Initial credits = the peer's posted ring (its qp info `slots`).
 *  2. Each posted send costs one credit. A data frame needs 2 credits in
 *     hand: the last one is kept for a CREDIT frame, so returns can always
 *     flow.
 *  3. A receive slot is reposted when the frame in it has been consumed
 *     (the next recv call); each repost owes the peer one credit.
 *  4. Owed credits ride in the credits field of every frame we send; when
 *     owed reaches slots/2 and nothing carried them, a CREDIT frame does.
 *  5. A peer returning more credits than it was given breaks the link.
 * So receiver-not-ready cannot happen, and rnr_retry is bounded (3): a
 * bug in these rules breaks the link with a named completion error
 * instead of retrying forever.
 *
 * Send queue rules (the SQ and the CQ are never overrun):
 *  1. The SQ holds sq_depth = slots entries; a send needs one free entry.
 *  2. Every sig_every-th send is signaled (sq_depth / 4): its completion
 *     retires it and every send before it, freeing their entries and
 *     buffers. A send that fills the SQ or takes the last free buffer is
 *     signaled too, so a wait for either always has a completion coming.
 *  3. Frames up to the QP's max_inline bytes go inline: the NIC copies
 *     them at post, their buffer is free at once.
 *  4. The CQ is sized for XFER_RDMA_DEV_LINKS links; each link reserves
 *     slots + sq_depth entries (every receive and every send might
 *     complete, with an error on a flush), and a link that does not fit
 *     stays on TCP.
 *
 * Checksums: every frame is sealed as on TCP (xfer_frame.h, head_crc and
 * body_crc). The fabric's ICRC covers each packet on the wire, not the
 * host memory on either side nor a frame posted wrong; a mismatch breaks
 * the link with the checksum's reason (the link then tells the peer in an
 * ERROR frame over TCP). The header is checked as its completion is
 * taken (before its credits, kind and length are used), the body as the
 * frame is handed out (by the receiving thread, outside the device lock:
 * a completion may be taken by another link's wait).
 *
 * The test hook (net/fault.h, link "rdma") on the link's frames, and what
 * each fault does to the rules above:
 *  - drop: the frame is not posted; its buffer goes back, its credit is
 *    not spent, the owed credits it would have carried ride on the next
 *    frame. The transport is as if it had not been sent and nothing
 *    leaks; the link's seq moved on, so the peer's next sequenced frame
 *    breaks the link ("frame seq N, expected N-1"). Until one comes, the
 *    peer's waits end by their timeouts.
 *  - delay: sleeps before a credit or a buffer is taken.
 *  - truncate, corrupt: posted like any frame (a credit, a buffer, one of
 *    the peer's receive slots); the peer refuses it and breaks the link.
 * The CREDIT frames are the transport's own and never faulted: losing
 * one would lose credits for good.
 *
 * Waits block on the CQ's channel fd, the link's poke pipe and the TCP
 * socket (whose EOF or data means the peer is leaving), after an optional
 * bounded spin of spin_us. For an event loop, frames that another wait
 * took off the CQ are announced by a self-pipe that stays readable until
 * they have been received, so the fds of pollfds are level-triggered like
 * a socket's.
 */
#include "net/xfer_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"
#include "net/fault.h"
#include "net/rdma_select.h"

/* Completions taken per poll: 16 covers a full default ring in one call. */
#define XFER_RDMA_WC_BATCH 16
/* wr_id: link id (24 bits) << 40 | send bit | slot or send seq (32 bits). */
#define XFER_RDMA_ID_SHIFT 40
#define XFER_RDMA_SEND_BIT (1ull << 39)
#define XFER_RDMA_ID_MASK  0xffffffu
/* Links per device: the shared CQ is sized for 64 (stage neighbours and
 * expert users are a handful per peer): 64 x (16 + 16) = 2048 entries at
 * the default ring, far below any NIC's max_cqe. */
#define XFER_RDMA_DEV_LINKS 64
/* Registrations per device: the n-th holds 2^n link regions (at most
 * 16), so 16 of them reach the 64 links with few registrations. */
#define XFER_RDMA_ARENAS 16
/* Inline bytes asked of a QP, largest first: 256 covers CREDIT (96 B),
 * PROBE (160 B) and single-row TOKEN frames (~120 B); a device that
 * refuses is asked less, down to 0 (no inline, e.g. soft-RoCE setups). */
static const uint32_t xfer_rdma_inline_asks[] = {256, 128, 0};
/* RNR retries: 3 (7 means forever); see the credit rules. */
#define XFER_RDMA_RNR_RETRY 3
/* Hop limit of routed RoCE v2 when none is configured: 64, the usual
 * IP default (1 would stop at the first router). */
#define XFER_RDMA_HOP_LIMIT 64

typedef struct rdma_dev rdma_dev;

typedef struct rdma_arena {
	uint8_t *mem; /* (n, region) */
	void *mr;
	size_t region;
	uint32_t n;
	uint32_t used; /* bit per region */
} rdma_arena;

struct rdma_dev {
	shoal_xfer_rdma_hub *hub;
	rdma_dev *next;
	const shoal_verbs_ops *v;
	void *ctx;
	char name[64];
	int refs; /* links holding it (under the hub's mutex) */
	pthread_mutex_t mu;
	void *dev, *pd, *cq;
	int chan_fd;
	int cq_depth, cq_used;
	rdma_arena arenas[XFER_RDMA_ARENAS];
	size_t n_arenas;
	xfer__rdma *links[XFER_RDMA_DEV_LINKS];
	uint32_t next_id;
};

struct shoal_xfer_rdma_hub {
	pthread_mutex_t mu;
	int refs; /* the creator's and one per device */
	rdma_dev *devs;
};

struct xfer__rdma {
	const shoal_verbs_ops *v;
	rdma_dev *d;
	void *qp;
	uint32_t id;            /* in wr_id; 0 until registered with d */
	int watch_fd;           /* the link's TCP socket */
	const xfer__tcp *watch; /* its transport: bytes it has buffered count too */
	shoal_verbs_port port;
	char desc[64]; /* "mlx5_0:port1:gid3" (HELLO keeps 31 bytes of it) */
	char ifname[32];
	uint32_t spin_us;
	uint32_t slots, nsend, slot_size;
	uint8_t *mem; /* (slots + nsend, slot_size), inside arena `arena` */
	void *mr;
	int arena, region; /* -1: none */
	int cq_need;       /* CQ entries reserved */
	uint32_t qpn, psn;
	uint32_t max_inline;
	/* receive ring: completed slots in arrival order */
	uint32_t *ready_slot, *ready_len; /* (slots) each */
	uint32_t ready_head, ready_count;
	int borrowed; /* slot handed to the link, reposted at the next recv */
	uint32_t owed;
	/* sending */
	uint32_t credits, peer_slots, peer_slot_size;
	uint32_t *send_free; /* (nsend) stack of free send slots */
	uint32_t n_free;
	uint32_t sq_depth, sig_every, since_sig;
	int32_t *sq_slot;          /* (sq_depth) buffer of each posted send, -1 inline */
	uint64_t sq_head, sq_tail; /* oldest unretired send, next send */
	uint64_t gen;              /* bumped by every completion of ours */
	int sig[2];                /* self-pipe: readable while frames wait that no fd announced */
	int signaled;              /* a byte is in sig */
	int poke[2]; /* wakes our wait when another link's poll took our completions */
	int poked;
	int in_recv; /* inside rdma_recv: its caller takes ready frames at once */
	int connected, broken;
	shoal_err broken_e; /* the error of the first failure */
	char broken_why[SHOAL_WHY_LEN];
	uint64_t credit_sent, credit_recv, credit_waits;
	uint64_t n_sends, n_signaled, n_inline;
};

static uint8_t *slot_addr(xfer__rdma *r, uint32_t i)
{
	return r->mem + (size_t)i * r->slot_size;
}

static uint32_t get32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32le(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Mark the transport broken (the first reason sticks) and return e. */
__attribute__((format(printf, 3, 4))) static shoal_err broke(xfer__rdma *r, shoal_err e,
                                                             const char *fmt, ...)
{
	if (!r->broken) {
		va_list ap;
		va_start(ap, fmt);
		r->broken = 1;
		r->broken_e = e;
		vsnprintf(r->broken_why, sizeof r->broken_why, fmt, ap);
		va_end(ap);
	}
	return e;
}

/* ---- devices: the hub -------------------------------------------------- */

shoal_xfer_rdma_hub *shoal_xfer_rdma_hub_new(void)
{
	shoal_xfer_rdma_hub *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	pthread_mutex_init(&h->mu, NULL);
	h->refs = 1;
	return h;
}

static void hub_unref(shoal_xfer_rdma_hub *h)
{
	pthread_mutex_lock(&h->mu);
	int last = --h->refs == 0;
	pthread_mutex_unlock(&h->mu);
	if (last) {
		pthread_mutex_destroy(&h->mu);
		free(h);
	}
}

void shoal_xfer_rdma_hub_free(shoal_xfer_rdma_hub *h)
{
	if (h)
		hub_unref(h);
}

/* The device `name` of (v, ctx) in hub h, opened on first use; a
 * reference for the caller. */
static shoal_err dev_get(shoal_xfer_rdma_hub *h, const shoal_verbs_ops *v, void *ctx,
                         const char *name, rdma_dev **out, char *why, size_t why_len)
{
	pthread_mutex_lock(&h->mu);
	rdma_dev *d = h->devs;
	while (d && (d->v != v || d->ctx != ctx || strcmp(d->name, name)))
		d = d->next;
	if (d) {
		d->refs++;
		pthread_mutex_unlock(&h->mu);
		*out = d;
		return SHOAL_OK;
	}
	shoal_err e = SHOAL_ERR_NOMEM;
	d = calloc(1, sizeof *d);
	if (d)
		e = v->open(ctx, name, &d->dev, why, why_len);
	else
		shoal_why(why, why_len, e, "no memory");
	if (e) {
		pthread_mutex_unlock(&h->mu);
		free(d);
		return e;
	}
	d->hub = h;
	d->v = v;
	d->ctx = ctx;
	d->chan_fd = -1;
	snprintf(d->name, sizeof d->name, "%s", name);
	pthread_mutex_init(&d->mu, NULL);
	d->refs = 1;
	d->next = h->devs;
	h->devs = d;
	h->refs++;
	pthread_mutex_unlock(&h->mu);
	*out = d;
	return SHOAL_OK;
}

/* Drop a reference; the last frees the device's objects (its links and
 * their queue pairs are gone by then). */
static void dev_put(rdma_dev *d)
{
	shoal_xfer_rdma_hub *h = d->hub;
	pthread_mutex_lock(&h->mu);
	int last = --d->refs == 0;
	if (last) {
		rdma_dev **p = &h->devs;
		while (*p != d)
			p = &(*p)->next;
		*p = d->next;
	}
	pthread_mutex_unlock(&h->mu);
	if (!last)
		return;
	if (d->cq)
		d->v->destroy_cq(d->cq);
	for (size_t i = 0; i < d->n_arenas; i++) {
		d->v->dereg_mr(d->arenas[i].mr);
		free(d->arenas[i].mem);
	}
	if (d->pd)
		d->v->dealloc_pd(d->pd);
	d->v->close(d->dev);
	pthread_mutex_destroy(&d->mu);
	free(d);
	hub_unref(h);
}

/* Under d->mu: the PD and the CQ (made by the first link that needs
 * them), and `need` of the CQ's entries reserved. */
static shoal_err dev_reserve(rdma_dev *d, int need, char *why, size_t why_len)
{
	shoal_err e;
	if (!d->pd && (e = d->v->alloc_pd(d->dev, &d->pd, why, why_len)))
		return e;
	if (!d->cq) {
		int depth = need * XFER_RDMA_DEV_LINKS;
		if ((e = d->v->create_cq(d->dev, depth, &d->cq, &d->chan_fd, why, why_len)))
			return e;
		d->cq_depth = depth;
	}
	if (d->cq_used + need > d->cq_depth)
		return shoal_why(why, why_len, SHOAL_ERR_BUSY,
		                 "%s: its completion queue is full (%d of %d entries held by its "
		                 "links, %d more wanted)",
		                 d->name, d->cq_used, d->cq_depth, need);
	d->cq_used += need;
	return SHOAL_OK;
}

/* Under d->mu: a region of `bytes` from the registered pool. */
static shoal_err dev_region(rdma_dev *d, size_t bytes, xfer__rdma *x, char *why, size_t why_len)
{
	for (size_t i = 0; i < d->n_arenas; i++) {
		rdma_arena *a = &d->arenas[i];
		if (a->region < bytes || a->region > 2 * bytes)
			continue;
		for (uint32_t k = 0; k < a->n; k++)
			if (!(a->used >> k & 1)) {
				a->used |= 1u << k;
				x->mem = a->mem + (size_t)k * a->region;
				x->mr = a->mr;
				x->arena = (int)i;
				x->region = (int)k;
				return SHOAL_OK;
			}
	}
	if (d->n_arenas == XFER_RDMA_ARENAS)
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "%s: %d registrations in use",
		                 d->name, XFER_RDMA_ARENAS);
	rdma_arena *a = &d->arenas[d->n_arenas];
	uint32_t n = 1u << (d->n_arenas < 4 ? d->n_arenas : 4);
	size_t region = (bytes + 4095) & ~(size_t)4095;
	if (region > SIZE_MAX / n)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%zu bytes of slots", bytes);
	if (posix_memalign((void **)&a->mem, 4096, region * n)) {
		a->mem = NULL;
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory for %zu bytes of slots",
		                 region * n);
	}
	shoal_err e = d->v->reg_mr(d->pd, a->mem, region * n, &a->mr, why, why_len);
	if (e) {
		free(a->mem);
		a->mem = NULL;
		return e;
	}
	a->region = region;
	a->n = n;
	a->used = 1;
	d->n_arenas++;
	x->mem = a->mem;
	x->mr = a->mr;
	x->arena = (int)(d->n_arenas - 1);
	x->region = 0;
	return SHOAL_OK;
}

/* Under d->mu: a place in the device's table of links and an id. */
static shoal_err dev_join(rdma_dev *d, xfer__rdma *x, char *why, size_t why_len)
{
	for (int i = 0; i < XFER_RDMA_DEV_LINKS; i++)
		if (!d->links[i]) {
			d->next_id = (d->next_id + 1) & XFER_RDMA_ID_MASK;
			if (!d->next_id)
				d->next_id = 1;
			x->id = d->next_id;
			d->links[i] = x;
			return SHOAL_OK;
		}
	return shoal_why(why, why_len, SHOAL_ERR_BUSY, "%s already carries %d links", d->name,
	                 XFER_RDMA_DEV_LINKS);
}

static xfer__rdma *dev_link(rdma_dev *d, uint32_t id)
{
	for (int i = 0; i < XFER_RDMA_DEV_LINKS; i++)
		if (d->links[i] && d->links[i]->id == id)
			return d->links[i];
	return NULL;
}

/* ---- life cycle ------------------------------------------------------ */

static int pipe_pair(int p[2])
{
	if (pipe(p)) {
		p[0] = p[1] = -1;
		return -1;
	}
	return xfer__fd_setup(p[0], 1) || xfer__fd_setup(p[1], 1) ? -1 : 0;
}

static void pipe_close(int p[2])
{
	if (p[0] >= 0) {
		close(p[0]);
		close(p[1]);
	}
	p[0] = p[1] = -1;
}

/* Which port and GID: the link's interface and address, the devices'
 * tables, the rule of rdma_select.h. Fills x->port, desc, ifname. */
static shoal_err choose(xfer__rdma *x, const shoal_xfer_config *cfg, int fd, char *why,
                        size_t why_len)
{
	char r[SHOAL_WHY_LEN];
	shoal_verbs_netif nif;
	shoal_err e = x->v->netif(cfg->verbs_ctx, fd, &nif, r, sizeof r);
	if (e)
		return shoal_why(why, why_len, e, "no rdma device: the link's interface: %s", r);
	size_t n = 0;
	shoal_rdma_port_desc *ports = calloc(SHOAL_RDMA_MAX_PORTS, sizeof *ports);
	if (!ports)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory");
	e = x->v->devices(cfg->verbs_ctx, ports, SHOAL_RDMA_MAX_PORTS, &n, r, sizeof r);
	if (e) {
		free(ports);
		return shoal_why(why, why_len, e, "no rdma device: %s", r);
	}
	shoal_rdma_choice c;
	e = shoal_rdma_select(ports, n, nif.ifname, nif.addr, cfg->rdma.device,
	                      cfg->rdma.gid_plus1 - 1, &c, r, sizeof r);
	if (e) {
		free(ports);
		return shoal_why(why, why_len, e, "%s", r);
	}
	const shoal_rdma_port_desc *p = &ports[c.port_at];
	shoal_verbs_port *q = &x->port;
	memset(q, 0, sizeof *q);
	snprintf(q->name, sizeof q->name, "%s", p->device);
	q->port = p->port;
	q->lid = p->lid;
	q->mtu = p->mtu;
	q->gid_index = c.gid_index;
	for (size_t i = 0; i < p->n_gid; i++)
		if (p->gids[i].index == c.gid_index)
			memcpy(q->gid, p->gids[i].gid, 16);
	q->hop_limit = cfg->rdma.hop_limit ? cfg->rdma.hop_limit : XFER_RDMA_HOP_LIMIT;
	q->traffic_class = cfg->rdma.tclass;
	q->sl = cfg->rdma.sl;
	q->rnr_retry = XFER_RDMA_RNR_RETRY;
	snprintf(x->ifname, sizeof x->ifname, "%s", nif.ifname);
	snprintf(x->desc, sizeof x->desc, "%.40s:port%u:gid%d", p->device, (unsigned)p->port,
	         c.gid_index);
	SHOAL_LOG_D("xfer", "rdma: link on %s uses %s (%s)", nif.ifname, x->desc, c.how);
	free(ports);
	return SHOAL_OK;
}

shoal_err xfer__rdma_open(const shoal_xfer_config *cfg, int fd, xfer__rdma **out,
                          const char **dev_name, char *why, size_t why_len)
{
	xfer__rdma *x = calloc(1, sizeof *x);
	if (!x)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory");
	x->v = cfg->verbs;
	x->watch_fd = -1;
	x->sig[0] = x->sig[1] = x->poke[0] = x->poke[1] = -1;
	x->borrowed = x->arena = x->region = -1;
	x->spin_us = cfg->spin_us;
	/* 4 slots at least: one is held by the frame the link last handed out
	 * (reposted at the next recv), one is kept for credit returns (rule
	 * 2), which leaves 2 for frames in flight; 4096 bounds the memory. */
	x->slots = cfg->rdma_slots < 4 ? 4 : cfg->rdma_slots > 4096 ? 4096 : cfg->rdma_slots;
	/* Sends complete in about one RTT; a quarter of the ring (4 of 16)
	 * keeps the pipe full at decode sizes, 2 at least for a credit frame. */
	x->nsend = x->slots / 4 < 2 ? 2 : x->slots / 4;
	shoal_err e = choose(x, cfg, fd, why, why_len);
	if (!e) {
		shoal_xfer_rdma_hub *h = cfg->rdma_hub ? cfg->rdma_hub : shoal_xfer_rdma_hub_new();
		char r[SHOAL_WHY_LEN];
		e = h ? dev_get(h, x->v, cfg->verbs_ctx, x->port.name, &x->d, r, sizeof r)
		      : shoal_why(r, sizeof r, SHOAL_ERR_NOMEM, "no memory");
		if (e)
			shoal_why(why, why_len, e, "no rdma device: %s", r);
		if (h && !cfg->rdma_hub)
			hub_unref(h); /* the device holds it now */
	}
	if (e) {
		free(x);
		return e;
	}
	*out = x;
	*dev_name = x->desc;
	return SHOAL_OK;
}

/* Under d->mu: a QP granted as much inline as the device allows. */
static shoal_err make_qp(xfer__rdma *x, char *why, size_t why_len)
{
	rdma_dev *d = x->d;
	shoal_err e = SHOAL_OK;
	for (size_t i = 0; i < sizeof xfer_rdma_inline_asks / sizeof xfer_rdma_inline_asks[0];
	     i++) {
		uint32_t inl = xfer_rdma_inline_asks[i];
		e = d->v->create_qp(d->pd, d->cq, x->sq_depth, x->slots, &inl, &x->qp, &x->qpn, why,
		                    why_len);
		if (!e) {
			x->max_inline = inl;
			return SHOAL_OK;
		}
		if (e != SHOAL_ERR_INVAL) /* only a refused inline size is asked again */
			break;
	}
	return e;
}

shoal_err xfer__rdma_setup(xfer__rdma *x, uint32_t slot_size, shoal_xfer_qp_info *local, char *why,
                           size_t why_len)
{
	rdma_dev *d = x->d;
	/* Slots are 64-byte aligned so every frame's payload is aligned. */
	x->slot_size = (slot_size + 63) & ~63u;
	x->sq_depth = x->slots;
	/* A signaled completion per quarter of the SQ: the queue never runs
	 * dry while one is in flight, and 3 in 4 sends cost no completion. */
	x->sig_every = x->sq_depth / 4 ? x->sq_depth / 4 : 1;
	x->ready_slot = calloc(x->slots, sizeof *x->ready_slot);
	x->ready_len = calloc(x->slots, sizeof *x->ready_len);
	x->send_free = calloc(x->nsend, sizeof *x->send_free);
	x->sq_slot = calloc(x->sq_depth, sizeof *x->sq_slot);
	if (!x->ready_slot || !x->ready_len || !x->send_free || !x->sq_slot)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory");
	if (pipe_pair(x->sig) || pipe_pair(x->poke)) /* closed by free */
		return shoal_why(why, why_len, SHOAL_ERR_IO, "pipe: %s", strerror(errno));
	for (uint32_t i = 0; i < x->nsend; i++)
		x->send_free[i] = x->nsend - 1 - i;
	x->n_free = x->nsend;
	pthread_mutex_lock(&d->mu);
	int need = (int)(x->slots + x->sq_depth);
	shoal_err e = dev_reserve(d, need, why, why_len);
	if (!e) {
		x->cq_need = need;
		e = dev_region(d, (size_t)(x->slots + x->nsend) * x->slot_size, x, why, why_len);
	}
	if (!e)
		e = dev_join(d, x, why, why_len);
	if (!e)
		e = make_qp(x, why, why_len);
	if (!e)
		e = d->v->qp_init(x->qp, &x->port, why, why_len);
	pthread_mutex_unlock(&d->mu);
	if (e)
		return e;
	/* PSN: 24 bits derived from the QPN (Knuth's multiplicative hash), so
	 * a reused QPN starts elsewhere without any randomness. */
	x->psn = (x->qpn * 2654435761u) & 0xffffff;
	memset(local, 0, sizeof *local);
	local->qpn = x->qpn;
	local->psn = x->psn;
	local->lid = x->port.lid;
	local->mtu = x->port.mtu;
	memcpy(local->gid, x->port.gid, 16);
	local->slots = x->slots;
	local->slot_size = x->slot_size;
	return SHOAL_OK;
}

static shoal_err repost(xfer__rdma *x, uint32_t slot, char *why, size_t why_len)
{
	return x->v->post_recv(x->qp, x->mr, (uint64_t)x->id << XFER_RDMA_ID_SHIFT | slot,
	                       slot_addr(x, slot), x->slot_size, why, why_len);
}

shoal_err xfer__rdma_connect(xfer__rdma *x, const shoal_xfer_qp_info *rem, const xfer__tcp *watch,
                             char *why, size_t why_len)
{
	char r[SHOAL_WHY_LEN];
	if (rem->slot_size < x->slot_size)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "peer slots of %u bytes, frames may be %u", rem->slot_size,
		                 x->slot_size);
	shoal_verbs_remote rv = {.qpn = rem->qpn,
	                         .psn = rem->psn,
	                         .lid = rem->lid,
	                         .mtu = rem->mtu < x->port.mtu ? rem->mtu : x->port.mtu};
	memcpy(rv.gid, rem->gid, 16);
	shoal_err e = SHOAL_OK;
	pthread_mutex_lock(&x->d->mu);
	for (uint32_t i = 0; i < x->slots && !e; i++)
		if ((e = repost(x, i, r, sizeof r)))
			shoal_why(why, why_len, e, "posting the receive ring: %s", r);
	if (!e && (e = x->v->qp_rtr(x->qp, &x->port, &rv, r, sizeof r)))
		shoal_why(why, why_len, e, "qp failed to reach RTR: %s", r);
	if (!e && (e = x->v->qp_rts(x->qp, &x->port, x->psn, r, sizeof r)))
		shoal_why(why, why_len, e, "qp failed to reach RTS: %s", r);
	if (!e) {
		x->credits = x->peer_slots = rem->slots;
		x->peer_slot_size = rem->slot_size;
		x->watch = watch;
		x->watch_fd = xfer__tcp_fd(watch);
		x->connected = 1;
	}
	pthread_mutex_unlock(&x->d->mu);
	return e;
}

static void rdma_free(void *p)
{
	xfer__rdma *x = p;
	if (!x)
		return;
	rdma_dev *d = x->d;
	if (d) {
		pthread_mutex_lock(&d->mu);
		if (x->qp)
			x->v->destroy_qp(x->qp);
		for (int i = 0; i < XFER_RDMA_DEV_LINKS; i++)
			if (d->links[i] == x)
				d->links[i] = NULL;
		d->cq_used -= x->cq_need;
		if (x->arena >= 0)
			d->arenas[x->arena].used &= ~(1u << x->region);
		pthread_mutex_unlock(&d->mu);
		dev_put(d);
	}
	free(x->ready_slot);
	free(x->ready_len);
	free(x->send_free);
	free(x->sq_slot);
	pipe_close(x->sig);
	pipe_close(x->poke);
	free(x);
}

/* ---- posting and completions (all under d->mu) ------------------------- */

static int sq_full(const xfer__rdma *x)
{
	return x->sq_tail - x->sq_head >= x->sq_depth;
}

/* Post send slot s (taken off send_free) of len bytes by the send queue
 * rules; the slot goes back at once when inline, else at retirement. */
static shoal_err post_frame(xfer__rdma *x, uint32_t s, uint32_t len, char *why, size_t why_len)
{
	int inl = len <= x->max_inline;
	int sig = x->since_sig + 1 >= x->sig_every || x->sq_tail + 1 - x->sq_head >= x->sq_depth ||
	          (!inl && !x->n_free);
	int flags = (sig ? SHOAL_VERBS_SEND_SIGNALED : 0) | (inl ? SHOAL_VERBS_SEND_INLINE : 0);
	uint64_t wr =
	    (uint64_t)x->id << XFER_RDMA_ID_SHIFT | XFER_RDMA_SEND_BIT | (uint32_t)x->sq_tail;
	shoal_err e =
	    x->v->post_send(x->qp, x->mr, wr, slot_addr(x, x->slots + s), len, flags, why, why_len);
	if (e) {
		x->send_free[x->n_free++] = s;
		return e;
	}
	x->sq_slot[x->sq_tail % x->sq_depth] = inl ? -1 : (int32_t)s;
	if (inl)
		x->send_free[x->n_free++] = s;
	x->sq_tail++;
	x->since_sig = sig ? 0 : x->since_sig + 1;
	x->n_sends++;
	x->n_signaled += sig;
	x->n_inline += inl;
	return SHOAL_OK;
}

/* Post a CREDIT frame when rule 4 says so and a send slot is free. */
static void maybe_send_credit(xfer__rdma *x)
{
	uint32_t thresh = x->slots / 2 ? x->slots / 2 : 1;
	if (x->broken || !x->connected || x->owed < thresh || x->credits < 1 || !x->n_free ||
	    sq_full(x))
		return;
	uint32_t s = x->send_free[--x->n_free];
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_CREDIT, .credits = x->owed};
	size_t len;
	char r[SHOAL_WHY_LEN];
	uint8_t *b = slot_addr(x, x->slots + s);
	shoal_xfer_frame_encode_head(&h, b, x->slot_size, &len);
	shoal_xfer_frame_seal(b, len);
	if (post_frame(x, s, (uint32_t)len, r, sizeof r)) {
		broke(x, SHOAL_ERR_IO, "post send (credit): %s", r);
		return;
	}
	x->owed = 0;
	x->credits--;
	x->credit_sent++;
}

/* A send completion for seq (low 32 bits): it and every send before it
 * are done; their buffers are free. */
static void retire(xfer__rdma *x, uint32_t seq)
{
	uint64_t out = x->sq_tail - x->sq_head;
	uint32_t k = seq - (uint32_t)x->sq_head;
	if (k >= out)
		return; /* already retired by a later completion */
	for (uint32_t i = 0; i <= k; i++) {
		int32_t s = x->sq_slot[x->sq_head % x->sq_depth];
		if (s >= 0 && x->n_free < x->nsend)
			x->send_free[x->n_free++] = (uint32_t)s;
		x->sq_head++;
	}
}

static void on_wc(xfer__rdma *x, const shoal_verbs_wc *wc, int foreign)
{
	char r[SHOAL_WHY_LEN];
	x->gen++;
	if (x->broken)
		return; /* a flush after the first error */
	if (wc->status) {
		broke(x, SHOAL_ERR_IO, "%s completion with error: %s (over %s on %s)",
		      (wc->wr_id & XFER_RDMA_SEND_BIT) ? "send" : "receive",
		      x->v->wc_status_str(wc->status), x->desc, x->ifname);
		return;
	}
	if (wc->wr_id & XFER_RDMA_SEND_BIT) {
		retire(x, (uint32_t)wc->wr_id);
		return;
	}
	uint32_t s = (uint32_t)wc->wr_id, fl;
	if (s >= x->slots) {
		broke(x, SHOAL_ERR_IO, "receive completion for unknown slot");
		return;
	}
	const uint8_t *b = slot_addr(x, s);
	/* Framing, then the header's checksum before credits, kind or length
	 * are trusted; the body's is checked when the frame is handed out
	 * (rdma_recv), by the link's own thread, not under the device lock. */
	shoal_err e = shoal_xfer_frame_peek(b, wc->byte_len, x->slot_size, &fl, r, sizeof r);
	if (!e)
		e = shoal_xfer_frame_check_head(b, r, sizeof r);
	if (!e && fl != wc->byte_len)
		e = shoal_why(r, sizeof r, SHOAL_ERR_PROTO, "frame_len %u in a %u-byte message", fl,
		              wc->byte_len);
	if (!e && b[6] == SHOAL_XFER_KIND_CREDIT)
		e = shoal_xfer_frame_check_body(b, fl, r, sizeof r);
	if (e) {
		broke(x, SHOAL_ERR_PROTO, "%s", r);
		return;
	}
	uint32_t c = get32le(b + SHOAL_XFER_OFF_CREDITS);
	if (c > x->peer_slots - x->credits) {
		broke(x, SHOAL_ERR_PROTO, "peer returned more credits than it had");
		return;
	}
	x->credits += c;
	if (b[6] == SHOAL_XFER_KIND_CREDIT) {
		x->credit_recv++;
		e = repost(x, s, r, sizeof r);
		if (e)
			broke(x, e, "post receive: %s", r);
		else
			x->owed++;
		return;
	}
	uint32_t tail = (x->ready_head + x->ready_count) % x->slots;
	x->ready_slot[tail] = s;
	x->ready_len[tail] = wc->byte_len;
	x->ready_count++;
	if ((foreign || !x->in_recv) && !x->signaled) {
		ssize_t k = write(x->sig[1], "f", 1);
		x->signaled = k == 1;
	}
}

static void poke(xfer__rdma *x)
{
	if (!x->poked) {
		ssize_t k = write(x->poke[1], "p", 1);
		x->poked = k == 1;
	}
}

/* Take every completion off the device's CQ, each to its link (self: the
 * link whose wait polls; the others are poked). */
static void drain(rdma_dev *d, xfer__rdma *self)
{
	shoal_verbs_wc wc[XFER_RDMA_WC_BATCH];
	for (;;) {
		int n = d->v->poll_cq(d->cq, wc, XFER_RDMA_WC_BATCH);
		if (n < 0) { /* the CQ is gone: so is every QP on it */
			for (int i = 0; i < XFER_RDMA_DEV_LINKS; i++)
				if (d->links[i]) {
					broke(d->links[i], SHOAL_ERR_IO, "poll cq failed on %s",
					      d->name);
					d->links[i]->gen++;
					if (d->links[i] != self)
						poke(d->links[i]);
				}
			return;
		}
		for (int i = 0; i < n; i++) {
			xfer__rdma *x = dev_link(d, (uint32_t)(wc[i].wr_id >> XFER_RDMA_ID_SHIFT));
			if (!x)
				continue; /* of a link already gone */
			on_wc(x, &wc[i], x != self);
			if (x != self)
				poke(x);
		}
		if (n < XFER_RDMA_WC_BATCH)
			break;
	}
	for (int i = 0; i < XFER_RDMA_DEV_LINKS; i++)
		if (d->links[i])
			maybe_send_credit(d->links[i]);
}

/* ---- waiting --------------------------------------------------------- */

/* Make progress: take completions, else spin up to spin_us, else block on
 * the channel fd, our poke pipe and the TCP socket until deadline_us (-1:
 * forever). SHOAL_OK means "something may have changed: look again".
 * SHOAL_ERR_BUSY: the TCP socket has bytes (the peer spoke there). */
static shoal_err progress(xfer__rdma *x, int64_t deadline_us, char *why, size_t why_len)
{
	rdma_dev *d = x->d;
	char r[SHOAL_WHY_LEN];
	shoal_err e;
	pthread_mutex_lock(&d->mu);
	uint64_t g0 = x->gen;
	drain(d, x);
	if (x->gen != g0 || x->broken)
		goto out;
	if (x->spin_us) {
		/* The spin spends real CPU time, so it reads the real clock
		 * (a test's frozen clock would make it spin forever). */
		uint64_t end = shoal_clock_monotonic_ns() + (uint64_t)x->spin_us * 1000u;
		while (shoal_clock_monotonic_ns() < end) {
			pthread_mutex_unlock(&d->mu);
			pthread_mutex_lock(&d->mu);
			drain(d, x);
			if (x->gen != g0 || x->broken)
				goto out;
		}
	}
	e = d->v->arm_cq(d->cq, r, sizeof r);
	if (e) {
		broke(x, e, "arm cq: %s", r);
		goto out;
	}
	drain(d, x); /* a completion may have come before the arm */
	if (x->gen != g0 || x->broken)
		goto out;
	pthread_mutex_unlock(&d->mu);
	/* A frame the TCP side already read off its socket wakes no poll. */
	if (x->watch && xfer__tcp_pending(x->watch))
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "the peer wrote on the tcp link");
	for (;;) {
		struct pollfd pf[3] = {{.fd = d->chan_fd, .events = POLLIN},
		                       {.fd = x->poke[0], .events = POLLIN},
		                       {.fd = x->watch_fd, .events = POLLIN}};
		int ms = -1;
		if (deadline_us >= 0) {
			int64_t l = deadline_us - (int64_t)shoal_clock_now_us();
			ms = l <= 0 ? 0 : (int)((l + 999) / 1000);
		}
		int n = poll(pf, x->watch_fd >= 0 ? 3 : 2, ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s", strerror(errno));
		if (n == 0)
			return shoal_why(why, why_len, SHOAL_ERR_TIMEOUT, "timed out");
		if (pf[0].revents || pf[1].revents) {
			pthread_mutex_lock(&d->mu);
			if (pf[1].revents) {
				char b[16];
				while (read(x->poke[0], b, sizeof b) > 0)
					;
				x->poked = 0;
			}
			if (pf[0].revents && (e = d->v->take_event(d->cq, r, sizeof r)))
				broke(x, e, "cq event: %s", r);
			drain(d, x);
			goto out;
		}
		if (pf[2].revents) {
			char c;
			ssize_t k = recv(x->watch_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
			if (k > 0)
				return shoal_why(why, why_len, SHOAL_ERR_BUSY,
				                 "the peer wrote on the tcp link");
			if (k == 0 || (errno != EAGAIN && errno != EINTR))
				return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
				                 "peer closed the connection");
		}
	}
out:
	e = x->broken ? shoal_why(why, why_len, x->broken_e, "%s", x->broken_why) : SHOAL_OK;
	pthread_mutex_unlock(&d->mu);
	return e;
}

void xfer__rdma_arm(xfer__rdma *x)
{
	char r[SHOAL_WHY_LEN];
	pthread_mutex_lock(&x->d->mu);
	drain(x->d, x);
	if (!x->d->v->arm_cq(x->d->cq, r, sizeof r))
		drain(x->d, x); /* a completion before the arm: announced by sig */
	pthread_mutex_unlock(&x->d->mu);
}

/* ---- send and receive ------------------------------------------------ */

static shoal_err rdma_send(void *p, const struct iovec *iov, int iovcnt, size_t total,
                           int timeout_ms, int *partial, char *why, size_t why_len)
{
	xfer__rdma *x = p;
	rdma_dev *d = x->d;
	char r[SHOAL_WHY_LEN];
	*partial = 0;
	if (total > x->peer_slot_size)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "frame of %zu bytes, slots of %u",
		                 total, x->peer_slot_size);
	/* the link's own frame: its encoded header in iov[0] */
	SHOAL_ASSERT(iovcnt >= 1 && iov[0].iov_len >= SHOAL_XFER_HDR_SIZE);
	int64_t deadline =
	    timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_us() + (int64_t)timeout_ms * 1000;
	int waited = 0;
	/* The test hook (fault.h, link "rdma"). A delay sleeps here, before a
	 * credit or a buffer is taken: nothing of the link waits on it. */
	shoal_fault f;
	if (shoal_fault_next("rdma", shoal_xfer_kind_name(((const uint8_t *)iov[0].iov_base)[6]),
	                     &f) == SHOAL_FAULT_DELAY)
		shoal_fault_sleep(f.delay_ms);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		if (x->broken) {
			shoal_err e = shoal_why(why, why_len, x->broken_e, "%s", x->broken_why);
			pthread_mutex_unlock(&d->mu);
			return e;
		}
		if (x->credits >= 2 && x->n_free && !sq_full(x))
			break;
		if (!waited && x->credits < 2)
			x->credit_waits++;
		waited = 1;
		const char *what = x->credits < 2 ? "credit"
		                   : !x->n_free   ? "free send slot"
		                                  : "send queue entry";
		pthread_mutex_unlock(&d->mu);
		shoal_err e = progress(x, deadline, why, why_len);
		if (e == SHOAL_ERR_BUSY)
			return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
			                 "peer is closing (it wrote on the tcp link)");
		if (e == SHOAL_ERR_TIMEOUT)
			return shoal_why(why, why_len, e, "no %s within %d ms", what, timeout_ms);
		if (e)
			return e;
		pthread_mutex_lock(&d->mu);
	}
	uint32_t s = x->send_free[--x->n_free];
	pthread_mutex_unlock(&d->mu);
	uint8_t *b = slot_addr(x, x->slots + s);
	size_t off = 0;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(b + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	/* Sealed as on TCP (xfer_frame.h): the body's CRC here, outside the
	 * device lock; the header's under it, once the credits are in. */
	put32le(b + SHOAL_XFER_OFF_BODY_CRC,
	        shoal_xfer_crc32c(0, b + SHOAL_XFER_HDR_SIZE, total - SHOAL_XFER_HDR_SIZE));
	pthread_mutex_lock(&d->mu);
	shoal_err e = SHOAL_OK;
	if (x->broken || f.kind == SHOAL_FAULT_DROP) {
		/* A dropped frame is taken back whole: its buffer, its credit
		 * and the credits it would have carried (owed rides on the
		 * next frame), so the transport is as if it had never been
		 * sent; only the link's seq moved on (the peer sees the gap). */
		x->send_free[x->n_free++] = s;
		if (x->broken)
			e = shoal_why(why, why_len, x->broken_e, "%s", x->broken_why);
	} else {
		uint32_t len = (uint32_t)total;
		put32le(b + SHOAL_XFER_OFF_CREDITS, x->owed);
		put32le(b + SHOAL_XFER_OFF_HEAD_CRC, shoal_xfer_frame_head_crc(b));
		/* A truncated or corrupted frame costs its credit and buffer
		 * like any other: it takes one receive slot of the peer. */
		if (f.kind == SHOAL_FAULT_TRUNCATE)
			len = 1 + (uint32_t)(f.pick % (total - 1));
		else if (f.kind == SHOAL_FAULT_CORRUPT)
			shoal_fault_flip(b, total, f.pick);
		e = post_frame(x, s, len, r, sizeof r);
		if (e) {
			e = shoal_why(why, why_len, broke(x, e, "post send: %s", r), "%s",
			              x->broken_why);
		} else {
			x->owed = 0;
			x->credits--;
		}
	}
	pthread_mutex_unlock(&d->mu);
	/* Waiting may have consumed the channel's event and taken frames off
	 * the CQ: re-arm, so the event loop's fds stay truthful. */
	if (!e && waited)
		xfer__rdma_arm(x);
	return e;
}

/* Under d->mu. */
static shoal_err recv_inner(xfer__rdma *x, int timeout_ms, const uint8_t **buf, size_t *len,
                            char *why, size_t why_len)
{
	char r[SHOAL_WHY_LEN];
	rdma_dev *d = x->d;
	if (x->borrowed >= 0) {
		shoal_err e = repost(x, (uint32_t)x->borrowed, r, sizeof r);
		x->borrowed = -1;
		if (e)
			return shoal_why(why, why_len, broke(x, e, "post receive: %s", r), "%s",
			                 x->broken_why);
		x->owed++;
		maybe_send_credit(x);
	}
	int64_t deadline =
	    timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_us() + (int64_t)timeout_ms * 1000;
	for (;;) {
		if (x->ready_count) {
			uint32_t s = x->ready_slot[x->ready_head];
			*len = x->ready_len[x->ready_head];
			x->ready_head = (x->ready_head + 1) % x->slots;
			x->ready_count--;
			x->borrowed = (int)s;
			*buf = slot_addr(x, s);
			return SHOAL_OK;
		}
		if (x->broken)
			return shoal_why(why, why_len, x->broken_e, "%s", x->broken_why);
		pthread_mutex_unlock(&d->mu);
		shoal_err e = progress(x, deadline, why, why_len);
		pthread_mutex_lock(&d->mu);
		/* Frames that arrived before a failure are still delivered. */
		if (e && !x->ready_count)
			return e;
	}
}

static shoal_err rdma_recv(void *p, int timeout_ms, const uint8_t **buf, size_t *len, char *why,
                           size_t why_len)
{
	xfer__rdma *x = p;
	pthread_mutex_lock(&x->d->mu);
	x->in_recv = 1;
	shoal_err e = recv_inner(x, timeout_ms, buf, len, why, why_len);
	x->in_recv = 0;
	pthread_mutex_unlock(&x->d->mu);
	/* The body's checksum, before the frame is handed out (the header's
	 * passed in on_wc). The slot is ours until the next recv: no lock. */
	char r[SHOAL_WHY_LEN];
	if (!e && shoal_xfer_frame_check_body(*buf, *len, r, sizeof r)) {
		pthread_mutex_lock(&x->d->mu);
		e = shoal_why(why, why_len, broke(x, SHOAL_ERR_PROTO, "%s", r), "%s",
		              x->broken_why);
		x->ready_count = 0; /* frames after a damaged one are not handed out */
		pthread_mutex_unlock(&x->d->mu);
	}
	pthread_mutex_lock(&x->d->mu);
	if (x->signaled && !x->ready_count) { /* all announced frames are taken */
		char b[8];
		while (read(x->sig[0], b, sizeof b) > 0)
			;
		x->signaled = 0;
	}
	pthread_mutex_unlock(&x->d->mu);
	return e;
}

static int rdma_pollfds(void *p, struct pollfd *pf, int cap)
{
	xfer__rdma *x = p;
	int n = 0;
	if (cap > n)
		pf[n++] = (struct pollfd){.fd = x->d->chan_fd, .events = POLLIN};
	if (cap > n)
		pf[n++] = (struct pollfd){.fd = x->sig[0], .events = POLLIN};
	if (cap > n && x->watch_fd >= 0)
		pf[n++] = (struct pollfd){.fd = x->watch_fd, .events = POLLIN};
	return n;
}

static void rdma_own_counts(void *p, uint64_t *sent, uint64_t *recv, uint64_t *waits)
{
	xfer__rdma *x = p;
	pthread_mutex_lock(&x->d->mu);
	*sent = x->credit_sent;
	*recv = x->credit_recv;
	*waits = x->credit_waits;
	pthread_mutex_unlock(&x->d->mu);
}

void xfer__rdma_sends(const xfer__rdma *x, uint64_t *sends, uint64_t *signaled, uint64_t *inlined,
                      uint32_t *max_inline)
{
	pthread_mutex_lock(&x->d->mu);
	*sends = x->n_sends;
	*signaled = x->n_signaled;
	*inlined = x->n_inline;
	*max_inline = x->max_inline;
	pthread_mutex_unlock(&x->d->mu);
}

const xfer__transport_ops xfer__rdma_ops = {
    .name = "rdma",
    .send = rdma_send,
    .recv = rdma_recv,
    .pollfds = rdma_pollfds,
    .own_counts = rdma_own_counts,
    .free = rdma_free,
};
