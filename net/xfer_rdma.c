/*
 * net/xfer_rdma.c: the RDMA transport of the data plane, over the thin
 * verbs interface (net/verbs.h), so that its logic runs against the real
 * libibverbs and against the in-process double of the tests alike.
 *
 * Part: net/. Send/recv on an RC queue pair, not RDMA write: a frame is at
 * most one slot, the receiver chooses where it lands (its pre-posted ring),
 * no remote addresses or rkeys need exchanging, and write-with-immediate
 * would consume a posted receive per message anyway, so the credit rules
 * are the same; at decode sizes (<= 16 KiB) both are one packet train.
 *
 * Memory: one registration per link: a ring of `slots` receive buffers and
 * `nsend` send buffers, slot_size bytes each, reused for every frame.
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
 * Completions: one CQ with a completion channel; waits block on its fd
 * (and on the TCP socket, whose EOF or data means the peer is leaving),
 * after an optional bounded spin of spin_us. For an event loop, frames
 * that a send took off the CQ (while waiting for a credit) are announced
 * by a self-pipe that stays readable until they have been received, so
 * the fds of pollfds are level-triggered like a socket's.
 */
#include "net/xfer_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

/* Completions taken per poll: 16 covers a full default ring in one call. */
#define XFER_RDMA_WC_BATCH 16
#define XFER_RDMA_SEND_BIT (1ull << 32)

struct xfer__rdma {
	const shoal_verbs_ops *v;
	void *dev, *pd, *mr, *cq, *qp;
	int chan_fd;
	int watch_fd;           /* the link's TCP socket */
	const xfer__tcp *watch; /* its transport: bytes it has buffered count too */
	shoal_verbs_port port;
	uint32_t spin_us;
	uint32_t slots, nsend, slot_size;
	uint8_t *mem; /* (slots + nsend, slot_size) */
	uint32_t qpn, psn;
	/* receive ring: completed slots in arrival order */
	uint32_t *ready_slot, *ready_len; /* (slots) each */
	uint32_t ready_head, ready_count;
	int borrowed; /* slot handed to the link, reposted at the next recv */
	uint32_t owed;
	/* sending */
	uint32_t credits, peer_slots, peer_slot_size;
	uint32_t *send_free; /* (nsend) stack of free send slots */
	uint32_t n_free;
	int sig[2];   /* self-pipe: readable while frames wait that no fd announced */
	int signaled; /* a byte is in sig */
	int in_recv;  /* inside rdma_recv: its caller takes ready frames at once */
	int connected, broken;
	shoal_err broken_e; /* the error of the first failure */
	char broken_why[200];
	uint64_t credit_sent, credit_recv, credit_waits;
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

/* ---- life cycle ------------------------------------------------------ */

shoal_err xfer__rdma_open(const shoal_xfer_config *cfg, xfer__rdma **out, const char **dev_name,
                          char *why, size_t why_len)
{
	char r[200];
	xfer__rdma *x = calloc(1, sizeof *x);
	if (!x)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory");
	x->v = cfg->verbs;
	x->chan_fd = x->watch_fd = -1;
	x->sig[0] = x->sig[1] = -1;
	x->borrowed = -1;
	x->spin_us = cfg->spin_us;
	/* 4 slots at least: one is held by the frame the link last handed out
	 * (reposted at the next recv), one is kept for credit returns (rule
	 * 2), which leaves 2 for frames in flight; 4096 bounds the memory. */
	x->slots = cfg->rdma_slots < 4 ? 4 : cfg->rdma_slots > 4096 ? 4096 : cfg->rdma_slots;
	/* Sends complete in about one RTT; a quarter of the ring (4 of 16)
	 * keeps the pipe full at decode sizes, 2 at least for a credit frame. */
	x->nsend = x->slots / 4 < 2 ? 2 : x->slots / 4;
	shoal_err e = x->v->open(cfg->verbs_ctx, cfg->rdma_device, &x->dev, &x->port, r, sizeof r);
	if (e) {
		free(x);
		return shoal_why(why, why_len, e, "no rdma device: %s", r);
	}
	*out = x;
	*dev_name = x->port.name;
	return SHOAL_OK;
}

shoal_err xfer__rdma_setup(xfer__rdma *x, uint32_t slot_size, shoal_xfer_qp_info *local, char *why,
                           size_t why_len)
{
	/* Slots are 64-byte aligned so every frame's payload is aligned. */
	x->slot_size = (slot_size + 63) & ~63u;
	size_t total = (size_t)(x->slots + x->nsend) * x->slot_size;
	shoal_err e = x->v->alloc_pd(x->dev, &x->pd, why, why_len);
	if (e)
		return e;
	if (posix_memalign((void **)&x->mem, 4096, total)) {
		x->mem = NULL;
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory for %zu bytes of slots",
		                 total);
	}
	x->ready_slot = calloc(x->slots, sizeof *x->ready_slot);
	x->ready_len = calloc(x->slots, sizeof *x->ready_len);
	x->send_free = calloc(x->nsend, sizeof *x->send_free);
	if (!x->ready_slot || !x->ready_len || !x->send_free)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory");
	if (pipe(x->sig)) {
		x->sig[0] = x->sig[1] = -1;
		return shoal_why(why, why_len, SHOAL_ERR_IO, "pipe: %s", strerror(errno));
	}
	if (xfer__fd_setup(x->sig[0], 1) || xfer__fd_setup(x->sig[1], 1)) /* closed by free */
		return shoal_why(why, why_len, SHOAL_ERR_IO, "pipe flags: %s", strerror(errno));
	for (uint32_t i = 0; i < x->nsend; i++)
		x->send_free[i] = x->nsend - 1 - i;
	x->n_free = x->nsend;
	e = x->v->reg_mr(x->pd, x->mem, total, &x->mr, why, why_len);
	if (!e)
		e = x->v->create_cq(x->dev, (int)(x->slots + x->nsend), &x->cq, &x->chan_fd, why,
		                    why_len);
	if (!e)
		e = x->v->create_qp(x->pd, x->cq, x->nsend, x->slots, &x->qp, &x->qpn, why,
		                    why_len);
	if (!e)
		e = x->v->qp_init(x->qp, &x->port, why, why_len);
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
	return x->v->post_recv(x->qp, x->mr, slot, slot_addr(x, slot), x->slot_size, why, why_len);
}

shoal_err xfer__rdma_connect(xfer__rdma *x, const shoal_xfer_qp_info *rem, const xfer__tcp *watch,
                             char *why, size_t why_len)
{
	char r[200];
	if (rem->slot_size < x->slot_size)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "peer slots of %u bytes, frames may be %u", rem->slot_size,
		                 x->slot_size);
	for (uint32_t i = 0; i < x->slots; i++) {
		shoal_err e = repost(x, i, r, sizeof r);
		if (e)
			return shoal_why(why, why_len, e, "posting the receive ring: %s", r);
	}
	shoal_verbs_remote rv = {.qpn = rem->qpn,
	                         .psn = rem->psn,
	                         .lid = rem->lid,
	                         .mtu = rem->mtu < x->port.mtu ? rem->mtu : x->port.mtu};
	memcpy(rv.gid, rem->gid, 16);
	shoal_err e = x->v->qp_rtr(x->qp, &x->port, &rv, r, sizeof r);
	if (e)
		return shoal_why(why, why_len, e, "qp failed to reach RTR: %s", r);
	e = x->v->qp_rts(x->qp, x->psn, r, sizeof r);
	if (e)
		return shoal_why(why, why_len, e, "qp failed to reach RTS: %s", r);
	x->credits = x->peer_slots = rem->slots;
	x->peer_slot_size = rem->slot_size;
	x->watch = watch;
	x->watch_fd = xfer__tcp_fd(watch);
	x->connected = 1;
	return SHOAL_OK;
}

static void rdma_free(void *p)
{
	xfer__rdma *x = p;
	if (!x)
		return;
	if (x->qp)
		x->v->destroy_qp(x->qp);
	if (x->cq)
		x->v->destroy_cq(x->cq);
	if (x->mr)
		x->v->dereg_mr(x->mr);
	if (x->pd)
		x->v->dealloc_pd(x->pd);
	x->v->close(x->dev);
	free(x->mem);
	free(x->ready_slot);
	free(x->ready_len);
	free(x->send_free);
	if (x->sig[0] >= 0) {
		close(x->sig[0]);
		close(x->sig[1]);
	}
	free(x);
}

/* ---- credits and completions ----------------------------------------- */

/* Post a CREDIT frame when rule 4 says so and a send slot is free. */
static void maybe_send_credit(xfer__rdma *x)
{
	uint32_t thresh = x->slots / 2 ? x->slots / 2 : 1;
	if (x->broken || x->owed < thresh || x->credits < 1 || !x->n_free)
		return;
	uint32_t s = x->send_free[--x->n_free];
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_CREDIT, .credits = x->owed};
	size_t len;
	char r[200];
	shoal_xfer_frame_encode_head(&h, slot_addr(x, x->slots + s), x->slot_size, &len);
	if (x->v->post_send(x->qp, x->mr, XFER_RDMA_SEND_BIT | s, slot_addr(x, x->slots + s),
	                    (uint32_t)len, r, sizeof r)) {
		broke(x, SHOAL_ERR_IO, "post send (credit): %s", r);
		return;
	}
	x->owed = 0;
	x->credits--;
	x->credit_sent++;
}

static shoal_err on_wc(xfer__rdma *x, const shoal_verbs_wc *wc)
{
	char r[200];
	if (wc->status)
		return broke(x, SHOAL_ERR_IO, "%s completion with error: %s",
		             (wc->wr_id & XFER_RDMA_SEND_BIT) ? "send" : "receive",
		             x->v->wc_status_str(wc->status));
	if (wc->wr_id & XFER_RDMA_SEND_BIT) {
		uint32_t s = (uint32_t)wc->wr_id;
		if (s < x->nsend && x->n_free < x->nsend)
			x->send_free[x->n_free++] = s;
		return SHOAL_OK;
	}
	uint32_t s = (uint32_t)wc->wr_id, fl;
	if (s >= x->slots)
		return broke(x, SHOAL_ERR_IO, "receive completion for unknown slot");
	const uint8_t *b = slot_addr(x, s);
	shoal_err e = shoal_xfer_frame_peek(b, wc->byte_len, x->slot_size, &fl, r, sizeof r);
	if (!e && fl != wc->byte_len)
		e = shoal_why(r, sizeof r, SHOAL_ERR_PROTO, "frame_len %u in a %u-byte message", fl,
		              wc->byte_len);
	if (e)
		return broke(x, SHOAL_ERR_PROTO, "%s", r);
	uint32_t c = get32le(b + SHOAL_XFER_OFF_CREDITS);
	if (c > x->peer_slots - x->credits)
		return broke(x, SHOAL_ERR_PROTO, "peer returned more credits than it had");
	x->credits += c;
	if (b[6] == SHOAL_XFER_KIND_CREDIT) {
		x->credit_recv++;
		e = repost(x, s, r, sizeof r);
		if (e)
			return broke(x, e, "post receive: %s", r);
		x->owed++;
		return SHOAL_OK;
	}
	uint32_t tail = (x->ready_head + x->ready_count) % x->slots;
	x->ready_slot[tail] = s;
	x->ready_len[tail] = wc->byte_len;
	x->ready_count++;
	if (!x->in_recv && !x->signaled) {
		ssize_t k = write(x->sig[1], "f", 1);
		x->signaled = k == 1;
	}
	return SHOAL_OK;
}

static shoal_err drain(xfer__rdma *x, int *got)
{
	shoal_verbs_wc wc[XFER_RDMA_WC_BATCH];
	*got = 0;
	for (;;) {
		int n = x->v->poll_cq(x->cq, wc, XFER_RDMA_WC_BATCH);
		if (n < 0)
			return broke(x, SHOAL_ERR_IO, "poll cq failed");
		for (int i = 0; i < n; i++) {
			shoal_err e = on_wc(x, &wc[i]);
			if (e)
				return e;
		}
		*got += n;
		if (n < XFER_RDMA_WC_BATCH)
			break;
	}
	maybe_send_credit(x);
	return SHOAL_OK;
}

/* Make progress: take completions, else spin up to spin_us, else block on
 * the channel fd and the TCP socket until deadline_us (-1: forever).
 * SHOAL_ERR_BUSY: the TCP socket has bytes (the peer spoke there). */
static shoal_err progress(xfer__rdma *x, int64_t deadline_us, char *why, size_t why_len)
{
	int got;
	char r[200];
	shoal_err e = drain(x, &got);
	if (e || got)
		goto out;
	if (x->spin_us) {
		/* The spin spends real CPU time, so it reads the real clock
		 * (a test's frozen clock would make it spin forever). */
		uint64_t end = shoal_clock_monotonic_ns() + (uint64_t)x->spin_us * 1000u;
		while (shoal_clock_monotonic_ns() < end) {
			e = drain(x, &got);
			if (e || got)
				goto out;
		}
	}
	e = x->v->arm_cq(x->cq, r, sizeof r);
	if (e)
		return shoal_why(why, why_len, broke(x, e, "arm cq: %s", r), "%s", x->broken_why);
	e = drain(x, &got); /* a completion may have come before the arm */
	if (e || got)
		goto out;
	/* A frame the TCP side already read off its socket wakes no poll. */
	if (x->watch && xfer__tcp_pending(x->watch))
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "the peer wrote on the tcp link");
	for (;;) {
		struct pollfd pf[2] = {{.fd = x->chan_fd, .events = POLLIN},
		                       {.fd = x->watch_fd, .events = POLLIN}};
		int ms = -1;
		if (deadline_us >= 0) {
			int64_t l = deadline_us - (int64_t)shoal_clock_now_us();
			ms = l <= 0 ? 0 : (int)((l + 999) / 1000);
		}
		int n = poll(pf, x->watch_fd >= 0 ? 2 : 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s", strerror(errno));
		if (n == 0)
			return shoal_why(why, why_len, SHOAL_ERR_TIMEOUT, "timed out");
		if (pf[0].revents) {
			e = x->v->take_event(x->cq, r, sizeof r);
			if (e)
				return shoal_why(why, why_len, broke(x, e, "cq event: %s", r), "%s",
				                 x->broken_why);
			e = drain(x, &got);
			goto out;
		}
		if (pf[1].revents) {
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
	if (e)
		return shoal_why(why, why_len, e, "%s", x->broken_why);
	return SHOAL_OK;
}

void xfer__rdma_arm(xfer__rdma *x)
{
	int got;
	char r[200];
	if (!drain(x, &got) && !x->v->arm_cq(x->cq, r, sizeof r))
		drain(x, &got); /* a completion before the arm: announced by sig */
}

/* ---- send and receive ------------------------------------------------ */

static shoal_err rdma_send(void *p, const struct iovec *iov, int iovcnt, size_t total,
                           int timeout_ms, int *partial, char *why, size_t why_len)
{
	xfer__rdma *x = p;
	char r[200];
	*partial = 0;
	if (x->broken)
		return shoal_why(why, why_len, x->broken_e, "%s", x->broken_why);
	if (total > x->peer_slot_size)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "frame of %zu bytes, slots of %u",
		                 total, x->peer_slot_size);
	int64_t deadline =
	    timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_us() + (int64_t)timeout_ms * 1000;
	int waited = 0;
	while (x->credits < 2 || !x->n_free) {
		if (!waited && x->credits < 2)
			x->credit_waits++;
		waited = 1;
		shoal_err e = progress(x, deadline, why, why_len);
		if (e == SHOAL_ERR_BUSY)
			return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
			                 "peer is closing (it wrote on the tcp link)");
		if (e == SHOAL_ERR_TIMEOUT)
			return shoal_why(why, why_len, e, "no %s within %d ms",
			                 x->credits < 2 ? "credit" : "free send slot", timeout_ms);
		if (e)
			return e;
	}
	uint32_t s = x->send_free[--x->n_free];
	uint8_t *d = slot_addr(x, x->slots + s);
	size_t off = 0;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(d + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	put32le(d + SHOAL_XFER_OFF_CREDITS, x->owed);
	shoal_err e =
	    x->v->post_send(x->qp, x->mr, XFER_RDMA_SEND_BIT | s, d, (uint32_t)total, r, sizeof r);
	if (e)
		return shoal_why(why, why_len, broke(x, e, "post send: %s", r), "%s",
		                 x->broken_why);
	x->owed = 0;
	x->credits--;
	/* Waiting may have consumed the channel's event and taken frames off
	 * the CQ: re-arm, so the event loop's fds stay truthful. */
	if (waited)
		xfer__rdma_arm(x);
	return SHOAL_OK;
}

static shoal_err recv_inner(xfer__rdma *x, int timeout_ms, const uint8_t **buf, size_t *len,
                            char *why, size_t why_len)
{
	char r[200];
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
		shoal_err e = progress(x, deadline, why, why_len);
		/* Frames that arrived before a failure are still delivered. */
		if (e && !x->ready_count)
			return e;
	}
}

static shoal_err rdma_recv(void *p, int timeout_ms, const uint8_t **buf, size_t *len, char *why,
                           size_t why_len)
{
	xfer__rdma *x = p;
	x->in_recv = 1;
	shoal_err e = recv_inner(x, timeout_ms, buf, len, why, why_len);
	x->in_recv = 0;
	if (x->signaled && !x->ready_count) { /* all announced frames are taken */
		char b[8];
		while (read(x->sig[0], b, sizeof b) > 0)
			;
		x->signaled = 0;
	}
	return e;
}

static int rdma_pollfds(void *p, struct pollfd *pf, int cap)
{
	xfer__rdma *x = p;
	int n = 0;
	if (cap > n)
		pf[n++] = (struct pollfd){.fd = x->chan_fd, .events = POLLIN};
	if (cap > n)
		pf[n++] = (struct pollfd){.fd = x->sig[0], .events = POLLIN};
	if (cap > n && x->watch_fd >= 0)
		pf[n++] = (struct pollfd){.fd = x->watch_fd, .events = POLLIN};
	return n;
}

static void rdma_own_counts(void *p, uint64_t *sent, uint64_t *recv, uint64_t *waits)
{
	xfer__rdma *x = p;
	*sent = x->credit_sent;
	*recv = x->credit_recv;
	*waits = x->credit_waits;
}

const xfer__transport_ops xfer__rdma_ops = {
    .name = "rdma",
    .send = rdma_send,
    .recv = rdma_recv,
    .pollfds = rdma_pollfds,
    .own_counts = rdma_own_counts,
    .free = rdma_free,
};
