/*
 * net/xfer.c: data-plane links (see xfer.h): admission, capability
 * negotiation, the RDMA upgrade, and frame send/receive over whichever
 * transport the link uses, with exact per-kind counters.
 *
 * Part: net/. Divisions: link object, send and receive, the handshake
 * (HELLO, admission), the RDMA upgrade, listener (admission of many
 * connections at once), connector.
 *
 * Link states:
 *
 *   connect/accept --> HELLO --> NEGOTIATE --+--> TCP ----+--> CLOSED
 *                                            +--> RDMA ---+
 *
 *   transition                         function
 *   start -> HELLO                     shoal_xfer_link_connect (sends HELLO),
 *                                      pending_accept, pending_read (reads it,
 *                                      no link yet: a pending connection)
 *   HELLO -> NEGOTIATE (admitted)      link_connect, pending_admit (HELLO_ACK)
 *   HELLO -> CLOSED (refused, garbage, pending_drop
 *            late, evicted)
 *   NEGOTIATE -> TCP | RDMA            negotiate (falls back, fails only if
 *                                      the TCP connection itself does)
 *   TCP | RDMA -> CLOSED               fail_link (framing broke, peer gone)
 *
 * Negotiation, after HELLO / HELLO_ACK, every step on the TCP connection:
 *  1. Unless both HELLOs offer rdma, both ends stay on TCP; the status says
 *     whose offer was missing and why (the local reason first).
 *  2. Each end creates PD, MR, CQ and QP (to INIT) and sends RDMA_QP: status
 *     0 and its 40-byte qp info, or its error and reason. Each reads the
 *     other's. Any failure: both stay on TCP.
 *  3. Each end posts its receive ring, moves the QP to RTR and RTS, and
 *     sends RDMA_VERDICT; each reads the other's. Any failure: TCP.
 *  4. The connector sends a PROBE over the QP, the acceptor echoes it; then
 *     the connector sends its RDMA_VERDICT, and only then the acceptor.
 *     Both ok: the link switches to RDMA; otherwise both stay on TCP.
 * Every step is taken by both ends or by neither, since both decide from
 * the same pair of statuses; the whole exchange is bounded by handshake_ms.
 */
#include "config.h"

#include "net/xfer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "base/assert.h"
#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"

/* 16 iovecs reach the transport: the head + 15 payload pieces. */
#define XFER_IOV_MAX 16
/* An ERROR frame on a dying link gets this long: enough for a 351-byte
 * frame into an idle socket, short enough not to stall the caller. */
#define XFER_GOODBYE_MS 100
/* Probe payload: 64 bytes, enough to see that bytes crossed intact. */
#define XFER_PROBE_BYTES 64
/* The ERROR frame to a dropped connection must not raise SIGPIPE (macOS:
 * SO_NOSIGPIPE, set by xfer__fd_setup). */
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

struct shoal_xfer_link {
	shoal_xfer_config cfg;
	shoal_xfer_limits lim;
	xfer__tcp *tcp;
	xfer__rdma *rdma;               /* set while negotiating and once upgraded */
	const xfer__transport_ops *ops; /* the transport in use */
	void *t;
	uint8_t *txhead; /* (txcap) head of the frame being sent */
	size_t txcap;
	shoal_xfer_row *rows;     /* (max_rows) decoded tags of the last frame */
	shoal_xfer_route *routes; /* (max_routes) its routes */
	uint8_t digest[SHOAL_DIGEST_BYTES];
	uint64_t epoch;
	int have_plan;
	uint64_t tx_seq, rx_seq;
	uint32_t max_send;
	uint8_t peer[SHOAL_PEER_ID_LEN];
	char addr[64];
	char devname[SHOAL_XFER_DEVNAME_MAX]; /* our RDMA device, when offered */
	int closed;
	int peer_bye; /* the peer's goodbye (ERROR, SHOAL_ERR_CLOSED) was read */
	char status[SHOAL_WHY_WRAP_LEN];
	shoal_xfer_metrics m;
};

static int left_ms(int64_t deadline)
{
	int64_t l = deadline - (int64_t)shoal_clock_now_ms();
	return l < 0 ? 0 : (int)l;
}

static uint64_t get64le(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#ifndef SHOAL_HAVE_RDMA
const shoal_verbs_ops *shoal_verbs_ibv(void)
{
	return NULL;
}
#endif

void shoal_xfer_config_default(shoal_xfer_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->max_frame = SHOAL_XFER_MAX_FRAME_DEFAULT;
	cfg->max_rows = SHOAL_XFER_MAX_ROWS_DEFAULT;
	cfg->max_routes = SHOAL_XFER_MAX_ROUTES_DEFAULT;
	cfg->handshake_ms = SHOAL_XFER_HANDSHAKE_MS_DEFAULT;
	cfg->verbs = shoal_verbs_ibv();
	cfg->rdma_slots = SHOAL_XFER_RDMA_SLOTS_DEFAULT;
}

/* ---- link object ----------------------------------------------------- */

void shoal_xfer_link_free(shoal_xfer_link *k)
{
	if (!k)
		return;
	xfer__rdma_ops.free(k->rdma);
	xfer__tcp_ops.free(k->tcp);
	free(k->txhead);
	free(k->rows);
	free(k->routes);
	free(k);
}

/* A link around a connected socket (owned by the link from here on, also
 * on failure). */
static shoal_err link_new(const shoal_xfer_config *cfg, int fd, shoal_xfer_link **out, char *why,
                          size_t why_len)
{
	shoal_err e;
	shoal_xfer_link *k = calloc(1, sizeof *k);
	if (!k) {
		close(fd);
		return SHOAL_ERR_NOMEM;
	}
	k->cfg = *cfg;
	k->cfg.rdma.device = NULL; /* borrowed string: used during the handshake only */
	if (cfg->max_frame < SHOAL_XFER_HDR_SIZE + SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX ||
	    !cfg->max_rows || !cfg->max_routes) {
		close(fd);
		e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "max_frame %u too small",
		              cfg->max_frame);
		goto fail;
	}
	k->lim = (shoal_xfer_limits){cfg->max_frame, cfg->max_rows, cfg->max_routes};
	e = xfer__tcp_new(fd, cfg->max_frame, &k->tcp, why, why_len);
	if (e) {
		close(fd);
		goto fail;
	}
	shoal_xfer_hdr h = {
	    .kind = SHOAL_XFER_KIND_EXPERT_REQ, .n_rows = cfg->max_rows, .n_aux = cfg->max_routes};
	k->txcap = (size_t)shoal_xfer_frame_head_len(&h);
	k->txhead = aligned_alloc(64, (k->txcap + 63) & ~(size_t)63);
	k->rows = calloc(cfg->max_rows, sizeof *k->rows);
	k->routes = calloc(cfg->max_routes, sizeof *k->routes);
	if (!k->txhead || !k->rows || !k->routes) {
		e = SHOAL_ERR_NOMEM;
		goto fail;
	}
	k->ops = &xfer__tcp_ops;
	k->t = k->tcp;
	k->max_send = cfg->max_frame;
	snprintf(k->status, sizeof k->status, "tcp (handshake)");
	*out = k;
	return SHOAL_OK;
fail:
	shoal_xfer_link_free(k);
	return e;
}

void shoal_xfer_link_set_plan(shoal_xfer_link *k, const uint8_t digest[SHOAL_DIGEST_BYTES],
                              uint64_t epoch)
{
	memcpy(k->digest, digest, SHOAL_DIGEST_BYTES);
	k->epoch = epoch;
	k->have_plan = 1;
}

const char *shoal_xfer_link_transport(const shoal_xfer_link *k)
{
	return k->ops->name;
}

const char *shoal_xfer_link_status(const shoal_xfer_link *k)
{
	return k->status;
}

void shoal_xfer_link_peer(const shoal_xfer_link *k, uint8_t peer[SHOAL_PEER_ID_LEN])
{
	memcpy(peer, k->peer, SHOAL_PEER_ID_LEN);
}

uint32_t shoal_xfer_link_max_send(const shoal_xfer_link *k)
{
	return k->max_send;
}

int shoal_xfer_link_pollfds(const shoal_xfer_link *k, struct pollfd *pf, int cap)
{
	return k->ops->pollfds(k->t, pf, cap);
}

void shoal_xfer_link_metrics(const shoal_xfer_link *k, shoal_xfer_metrics *m)
{
	*m = k->m;
	if (k->rdma) {
		uint64_t s, r, w;
		xfer__rdma_ops.own_counts(k->rdma, &s, &r, &w);
		m->frames_sent[SHOAL_XFER_KIND_CREDIT] = s;
		m->bytes_sent[SHOAL_XFER_KIND_CREDIT] = s * SHOAL_XFER_HDR_SIZE;
		m->frames_recv[SHOAL_XFER_KIND_CREDIT] = r;
		m->bytes_recv[SHOAL_XFER_KIND_CREDIT] = r * SHOAL_XFER_HDR_SIZE;
		m->credit_waits = w;
		xfer__rdma_sends(k->rdma, &m->rdma_sends, &m->rdma_signaled, &m->rdma_inline,
		                 &m->rdma_max_inline);
	}
}

/* ---- send and receive ------------------------------------------------ */

/* CREDIT and PROBE belong to a transport, not to the frame sequence: a
 * probe lost on a failing queue pair must not desynchronise seq. Nor does
 * ERROR: a dying RDMA link sends it over TCP, possibly overtaking frames
 * still in flight on the queue pair, and it must still be read. */
static int kind_sequenced(unsigned kind)
{
	return kind != SHOAL_XFER_KIND_CREDIT && kind != SHOAL_XFER_KIND_PROBE &&
	       kind != SHOAL_XFER_KIND_ERROR;
}

/* Encode and hand one frame to transport (ops, t); no state change on
 * failure but *partial. */
static shoal_err send_on(shoal_xfer_link *k, const xfer__transport_ops *ops, void *t,
                         const shoal_xfer_hdr *hdr, const struct iovec *iov, int iovcnt,
                         int timeout_ms, int *partial, char *why, size_t why_len)
{
	shoal_xfer_hdr h = *hdr;
	struct iovec v[XFER_IOV_MAX];
	size_t head, payload = 0;
	*partial = 0;
	SHOAL_ASSERT(iovcnt == 0 || iov != NULL);
	if (h.kind == SHOAL_XFER_KIND_NONE || h.kind >= SHOAL_XFER_KIND__COUNT ||
	    h.kind == SHOAL_XFER_KIND_CREDIT)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "cannot send kind %u", h.kind);
	if (iovcnt < 0 || iovcnt > XFER_IOV_MAX - 1)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%d payload pieces (max %d)",
		                 iovcnt, XFER_IOV_MAX - 1);
	if (h.n_rows > k->lim.max_rows ||
	    (shoal_xfer_kind_has_routes(h.kind) && h.n_aux > k->lim.max_routes))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u rows, %u routes (max %u, %u)",
		                 h.n_rows, h.n_aux, k->lim.max_rows, k->lim.max_routes);
	if (shoal_xfer_kind_is_data(h.kind)) {
		if (!k->have_plan)
			return shoal_why(why, why_len, SHOAL_ERR_STATE, "no plan set on this link");
		memcpy(h.digest, k->digest, SHOAL_DIGEST_BYTES);
		h.epoch = k->epoch;
	}
	for (int i = 0; i < iovcnt; i++) {
		SHOAL_ASSERT(iov[i].iov_base != NULL || iov[i].iov_len == 0);
		payload += iov[i].iov_len;
		v[i + 1] = iov[i];
	}
	if (payload > k->max_send)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "payload of %zu bytes (max %u)",
		                 payload, k->max_send);
	h.payload_len = (uint32_t)payload;
	h.seq = kind_sequenced(h.kind) ? k->tx_seq : 0;
	h.credits = 0;
	if (shoal_xfer_frame_encode_head(&h, k->txhead, k->txcap, &head) ||
	    head + payload > k->max_send)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "frame of %zu bytes (max %u)",
		                 head + payload, k->max_send);
	v[0] = (struct iovec){.iov_base = k->txhead, .iov_len = head};
	shoal_err e =
	    ops->send(t, v, iovcnt + 1, head + payload, timeout_ms, partial, why, why_len);
	if (e)
		return e;
	if (kind_sequenced(h.kind))
		k->tx_seq++;
	k->m.frames_sent[h.kind]++;
	k->m.bytes_sent[h.kind] += head + payload;
	return SHOAL_OK;
}

/* Mark the link closed with a reason and log it; when `tell`, first send
 * the peer an ERROR frame over TCP (best effort). Not after a partial
 * write: the frame would land inside the broken one. */
static void fail_link(shoal_xfer_link *k, shoal_err code, const char *reason, int tell)
{
	if (k->closed)
		return;
	char id[2 * SHOAL_PEER_ID_LEN + 1];
	shoal_hex_encode(k->peer, SHOAL_PEER_ID_LEN, id);
	if (tell) {
		int partial;
		size_t n = strnlen(reason, SHOAL_XFER_REASON_MAX);
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_ERROR, .n_aux = code};
		struct iovec v = {.iov_base = (void *)reason, .iov_len = n};
		send_on(k, &xfer__tcp_ops, k->tcp, &h, &v, 1, XFER_GOODBYE_MS, &partial, NULL, 0);
	}
	shoal_log(tell && code != SHOAL_ERR_CLOSED ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "xfer",
	          "closing link to %s (%.8s): %s", k->addr, id, reason);
	k->closed = 1;
	snprintf(k->status, sizeof k->status, "closed (%s)", reason);
	shutdown(xfer__tcp_fd(k->tcp), SHUT_RDWR);
}

void shoal_xfer_link_bye(shoal_xfer_link *k, const char *reason)
{
	if (k)
		fail_link(k, SHOAL_ERR_CLOSED, reason, 1);
}

int shoal_xfer_link_is_open(const shoal_xfer_link *k)
{
	return k && !k->closed;
}

int shoal_xfer_link_peer_bye(const shoal_xfer_link *k)
{
	return k && k->peer_bye;
}

static shoal_err recv_on(shoal_xfer_link *k, const xfer__transport_ops *ops, void *t,
                         int timeout_ms, shoal_xfer_frame *f, char *why, size_t why_len);

/* A send failed: before the link closes, read what the peer sent before
 * it went, without waiting. A goodbye there means the peer closed the link
 * on purpose (a plan change while we were stopped or busy): the send
 * error is no evidence of a death. Frames before it are dropped (the link
 * is going anyway); at most 64 are read, then it gives up. */
static void seek_goodbye(shoal_xfer_link *k)
{
	char r[SHOAL_WHY_LEN];
	shoal_xfer_frame f;
	for (int i = 0; i < 64 && !k->peer_bye; i++) {
		shoal_err e = recv_on(k, &xfer__tcp_ops, k->tcp, 0, &f, r, sizeof r);
		if (e == SHOAL_OK && f.hdr.kind == SHOAL_XFER_KIND_ERROR &&
		    f.hdr.n_aux == SHOAL_ERR_CLOSED)
			k->peer_bye = 1;
		else if (e != SHOAL_OK && e != SHOAL_ERR_FORMAT && e != SHOAL_ERR_MISMATCH)
			break;
	}
}

shoal_err shoal_xfer_link_send(shoal_xfer_link *k, const shoal_xfer_hdr *hdr,
                               const struct iovec *iov, int iovcnt, int timeout_ms, char *why,
                               size_t why_len)
{
	char r[SHOAL_WHY_LEN];
	int partial;
	if (k->closed)
		return shoal_why(why, why_len, SHOAL_ERR_CLOSED, "link %s", k->status);
	shoal_err e = send_on(k, k->ops, k->t, hdr, iov, iovcnt, timeout_ms, &partial, r, sizeof r);
	if (!e)
		return SHOAL_OK;
	if (partial || e == SHOAL_ERR_CLOSED || e == SHOAL_ERR_IO || e == SHOAL_ERR_PROTO) {
		if (e != SHOAL_ERR_PROTO)
			seek_goodbye(k);
		fail_link(k, e, r, !partial && e != SHOAL_ERR_CLOSED);
	}
	return shoal_why(why, why_len, e, "%s", r);
}

/* Receive one frame from (ops, t) and judge it. Errors leave the link as
 * it is; the caller decides what closes it. */
static shoal_err recv_on(shoal_xfer_link *k, const xfer__transport_ops *ops, void *t,
                         int timeout_ms, shoal_xfer_frame *f, char *why, size_t why_len)
{
	const uint8_t *buf;
	size_t len;
	shoal_err e = ops->recv(t, timeout_ms, &buf, &len, why, why_len);
	if (e)
		return e;
	/* Passed the framing check: >= 96 bytes, so seq and kind are there. */
	unsigned kind = buf[6];
	uint64_t seq = get64le(buf + 56);
	if (kind_sequenced(kind)) {
		if (seq != k->rx_seq)
			return shoal_why(why, why_len, SHOAL_ERR_PROTO,
			                 "frame seq %llu, expected %llu", (unsigned long long)seq,
			                 (unsigned long long)k->rx_seq);
		k->rx_seq++;
	}
	e = shoal_xfer_frame_decode(buf, len, &k->lim, &f->hdr, k->rows, k->routes, &f->payload,
	                            why, why_len);
	if (e) {
		k->m.rejected++;
		return e;
	}
	if (shoal_xfer_kind_is_data(kind)) {
		if (!k->have_plan || memcmp(f->hdr.digest, k->digest, SHOAL_DIGEST_BYTES) ||
		    f->hdr.epoch != k->epoch) {
			k->m.rejected++;
			char theirs[5], ours[5]; /* digest prefixes */
			shoal_hex_encode(f->hdr.digest, 2, theirs);
			shoal_hex_encode(k->digest, 2, ours);
			return shoal_why(why, why_len, SHOAL_ERR_MISMATCH,
			                 "%s frame of plan %s../epoch %llu, the link is on "
			                 "%s../epoch %llu%s",
			                 shoal_xfer_kind_name(kind), theirs,
			                 (unsigned long long)f->hdr.epoch, ours,
			                 (unsigned long long)k->epoch,
			                 k->have_plan ? "" : " (no plan set)");
		}
	}
	k->m.frames_recv[kind]++;
	k->m.bytes_recv[kind] += len;
	return SHOAL_OK;
}

shoal_err shoal_xfer_link_recv(shoal_xfer_link *k, int timeout_ms, shoal_xfer_frame *f, char *why,
                               size_t why_len)
{
	char r[SHOAL_WHY_LEN];
	if (k->closed)
		return shoal_why(why, why_len, SHOAL_ERR_CLOSED, "link %s", k->status);
	shoal_err e = recv_on(k, k->ops, k->t, timeout_ms, f, r, sizeof r);
	if (e == SHOAL_ERR_BUSY) /* RDMA link: the peer wrote on the TCP side */
		e = recv_on(k, &xfer__tcp_ops, k->tcp, timeout_ms, f, r, sizeof r);
	switch (e) {
	case SHOAL_OK:
		if (f->hdr.kind == SHOAL_XFER_KIND_ERROR && f->hdr.n_aux == SHOAL_ERR_CLOSED)
			k->peer_bye = 1;
		return SHOAL_OK;
	case SHOAL_ERR_TIMEOUT:
		return shoal_why(why, why_len, e, "no frame within %d ms", timeout_ms);
	case SHOAL_ERR_FORMAT:
	case SHOAL_ERR_MISMATCH:
		SHOAL_LOG_W("xfer", "dropped a frame from %s: %s", k->addr, r);
		return shoal_why(why, why_len, e, "%s", r);
	case SHOAL_ERR_PROTO:
		fail_link(k, e, r, 1);
		return shoal_why(why, why_len, e, "%s", r);
	default:
		fail_link(k, e, r, 0);
		return shoal_why(why, why_len, e, "%s", r);
	}
}

/* ---- the handshake --------------------------------------------------- */

static shoal_err hs_send(shoal_xfer_link *k, unsigned kind, uint32_t n_aux, const void *p, size_t n,
                         int64_t deadline, char *why, size_t why_len)
{
	int partial;
	shoal_xfer_hdr h = {.kind = (uint8_t)kind, .n_aux = n_aux};
	struct iovec v = {.iov_base = (void *)p, .iov_len = n};
	return send_on(k, &xfer__tcp_ops, k->tcp, &h, &v, n ? 1 : 0, left_ms(deadline), &partial,
	               why, why_len);
}

/* Receive a frame of kind `want` over TCP. A peer's ERROR frame becomes
 * its code with "peer: reason". */
static shoal_err hs_recv(shoal_xfer_link *k, unsigned want, int64_t deadline, shoal_xfer_frame *f,
                         char *why, size_t why_len)
{
	shoal_err e = recv_on(k, &xfer__tcp_ops, k->tcp, left_ms(deadline), f, why, why_len);
	if (e)
		return e;
	if (f->hdr.kind == SHOAL_XFER_KIND_ERROR)
		return shoal_why(why, why_len, (shoal_err)f->hdr.n_aux, "peer: %.*s",
		                 (int)f->hdr.payload_len, (const char *)f->payload);
	if (f->hdr.kind != want)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "expected a %s frame, got %s",
		                 shoal_xfer_kind_name(want), shoal_xfer_kind_name(f->hdr.kind));
	return SHOAL_OK;
}

/* Our HELLO block; opens the RDMA device to know what to offer. */
static void hello_fill(shoal_xfer_link *k, const shoal_xfer_config *cfg, shoal_xfer_hello *hl,
                       char *noreason, size_t nr_len)
{
	const char *dev = NULL;
	memset(hl, 0, sizeof *hl);
	hl->max_frame = k->cfg.max_frame;
	memcpy(hl->peer, k->cfg.self_id, SHOAL_PEER_ID_LEN);
	if (!cfg->verbs) {
		snprintf(noreason, nr_len, "rdma not configured");
		return;
	}
	shoal_err e = xfer__rdma_open(cfg, xfer__tcp_fd(k->tcp), &k->rdma, &dev, noreason, nr_len);
	if (e)
		return;
	hl->flags |= SHOAL_XFER_HELLO_RDMA;
	hl->rdma_slots = cfg->rdma_slots;
	snprintf(hl->device, sizeof hl->device, "%s", dev);
	snprintf(k->devname, sizeof k->devname, "%s", dev);
}

/* ---- the RDMA upgrade ------------------------------------------------ */

/* Exchange a status (and its reason) over TCP in a frame of `kind`:
 * send ours, then read the peer's (recv_first: the other way round). Returns the peer's status in
 * *peer_e and its reason in peer_why; the return value is a transport failure. */
static shoal_err exchange_status(shoal_xfer_link *k, unsigned kind, int recv_first, shoal_err mine,
                                 const char *reason, const void *ok_payload, size_t ok_len,
                                 int64_t deadline, shoal_xfer_frame *f, shoal_err *peer_e,
                                 char *peer_why, size_t pw_len, char *why, size_t why_len)
{
	const void *p = mine ? reason : ok_payload;
	size_t n = mine ? strnlen(reason, SHOAL_XFER_REASON_MAX) : ok_len;
	shoal_err e = SHOAL_OK;
	if (recv_first)
		e = hs_recv(k, kind, deadline, f, why, why_len);
	if (!e)
		e = hs_send(k, kind, mine, p, n, deadline, why, why_len);
	if (!e && !recv_first)
		e = hs_recv(k, kind, deadline, f, why, why_len);
	if (e)
		return e;
	*peer_e = (shoal_err)f->hdr.n_aux;
	if (*peer_e)
		snprintf(peer_why, pw_len, "%.*s", (int)f->hdr.payload_len,
		         (const char *)f->payload);
	return SHOAL_OK;
}

/* One PROBE round trip over the queue pair, the connector first. */
static shoal_err probe(shoal_xfer_link *k, int connector, int64_t deadline, char *why,
                       size_t why_len)
{
	uint8_t pat[XFER_PROBE_BYTES];
	for (int i = 0; i < XFER_PROBE_BYTES; i++)
		pat[i] = (uint8_t)(i * 37 + 11);
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_PROBE, .dtype = SHOAL_XFER_DTYPE_U8};
	struct iovec v = {.iov_base = pat, .iov_len = sizeof pat};
	shoal_xfer_frame f;
	int partial;
	shoal_err e;
	if (connector) {
		e = send_on(k, &xfer__rdma_ops, k->rdma, &h, &v, 1, left_ms(deadline), &partial,
		            why, why_len);
		if (e)
			return e;
	}
	e = recv_on(k, &xfer__rdma_ops, k->rdma, left_ms(deadline), &f, why, why_len);
	if (e == SHOAL_ERR_BUSY) /* its verdict is on the TCP side: it gave up */
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "peer gave up on the probe");
	if (e)
		return e;
	if (f.hdr.kind != SHOAL_XFER_KIND_PROBE || f.hdr.payload_len != sizeof pat ||
	    memcmp(f.payload, pat, sizeof pat))
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "probe came back altered");
	if (!connector)
		return send_on(k, &xfer__rdma_ops, k->rdma, &h, &v, 1, left_ms(deadline), &partial,
		               why, why_len);
	return SHOAL_OK;
}

/* Both HELLOs are known: upgrade to RDMA when both offered and the queue
 * pair comes up; otherwise stay on TCP with the reason in k->status. A
 * return other than SHOAL_OK means the TCP link itself failed. */
static shoal_err negotiate(shoal_xfer_link *k, int connector, const shoal_xfer_hello *peer,
                           const char *noreason, int64_t deadline, char *why, size_t why_len)
{
	char r[SHOAL_WHY_LEN], pr[SHOAL_WHY_LEN];
	shoal_xfer_frame f;
	shoal_xfer_qp_info local = {0}, remote;
	uint8_t qpblock[SHOAL_XFER_QPINFO_SIZE];
	shoal_err pe, e;
	int peer_offers = (peer->flags & SHOAL_XFER_HELLO_RDMA) != 0;
	if (!k->rdma || !peer_offers) {
		snprintf(k->status, sizeof k->status, "tcp (%s)",
		         !k->rdma ? noreason : "peer offers no rdma");
		goto stay;
	}
	/* 1. Resources and queue-pair details, both ways. */
	e = xfer__rdma_setup(k->rdma, k->max_send, &local, r, sizeof r);
	shoal_xfer_qp_info_encode(&local, qpblock);
	shoal_err te = exchange_status(k, SHOAL_XFER_KIND_RDMA_QP, 0, e, r, qpblock, sizeof qpblock,
	                               deadline, &f, &pe, pr, sizeof pr, why, why_len);
	if (te)
		return te;
	/* Every later step runs on both ends or on neither: each end decides
	 * from the same pair of statuses. */
	if (e || pe)
		goto verdict;
	e = shoal_xfer_qp_info_decode(f.payload, f.hdr.payload_len, &remote, r, sizeof r);
	/* 2. Receives posted, INIT -> RTR -> RTS; verdicts both ways. */
	if (!e)
		e = xfer__rdma_connect(k->rdma, &remote, k->tcp, r, sizeof r);
	te = exchange_status(k, SHOAL_XFER_KIND_RDMA_VERDICT, 0, e, r, NULL, 0, deadline, &f, &pe,
	                     pr, sizeof pr, why, why_len);
	if (te)
		return te;
	if (e || pe)
		goto verdict;
	/* 3. A round trip over the queue pair; verdicts both ways, the
	 * connector's first: the acceptor writes nothing on TCP until the
	 * connector is done with the queue pair, so TCP bytes seen while
	 * waiting on it always mean "the peer gave up", never a race. */
	/* Half of the time left: the verdicts need the other half when a
	 * probe is lost and both ends wait it out. */
	e = probe(k, connector, (int64_t)shoal_clock_now_ms() + left_ms(deadline) / 2, r, sizeof r);
	if (e) { /* r goes out as the verdict's reason: one SHOAL_WHY_LEN, its end cut */
		char t[SHOAL_WHY_LEN];
		memcpy(t, r, sizeof t);
		shoal_why(r, sizeof r, e, "rdma probe failed: %s", t);
	}
	te = exchange_status(k, SHOAL_XFER_KIND_RDMA_VERDICT, !connector, e, r, NULL, 0, deadline,
	                     &f, &pe, pr, sizeof pr, why, why_len);
	if (te)
		return te;
verdict:
	if (e == SHOAL_ERR_BUSY && pe) /* ours only echoes the peer's failure */
		e = SHOAL_OK;
	if (e)
		snprintf(k->status, sizeof k->status, "tcp (%s)", r);
	else if (pe)
		snprintf(k->status, sizeof k->status, "tcp (peer: %s)", pr);
	if (e || pe)
		goto stay;
	k->ops = &xfer__rdma_ops;
	k->t = k->rdma;
	xfer__rdma_arm(k->rdma);
	snprintf(k->status, sizeof k->status, "rdma (%s to %s)", k->devname, peer->device);
	return SHOAL_OK;
stay:
	xfer__rdma_ops.free(k->rdma);
	k->rdma = NULL;
	return SHOAL_OK;
}

/* ---- listener: admission --------------------------------------------- */

/* The first frame of a connection, read before anything is allocated for
 * it: header, HELLO block and the longest token (96 + 64 + 64 bytes). */
#define XFER_HELLO_FRAME_MAX (SHOAL_XFER_HDR_SIZE + SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX)
/* New connections taken per wake-up: 16, a quarter of the pending set, so
 * one wake-up evicts at most a quarter of it before the others' bytes are
 * read again. */
#define XFER_ACCEPT_BATCH 16
/* Unread bytes a dropped connection may have sent that are read before
 * close, so that close sends FIN, not a RST that would destroy our ERROR
 * frame before the peer reads it: 4 KiB, a few garbage writes. */
#define XFER_DRAIN_BYTES 4096

/* A connection that has not yet presented a whole HELLO. */
typedef struct xfer_pending {
	int fd;           /* non-blocking; -1: a free slot */
	int64_t deadline; /* ms: its HELLO (and the handshake after it) is due by then */
	uint64_t serial;  /* accept order: the lowest is the oldest */
	uint32_t have;    /* bytes of hello[] received */
	char addr[64];
	uint8_t hello[XFER_HELLO_FRAME_MAX];
} xfer_pending;

struct shoal_xfer_listener {
	shoal_xfer_config cfg;
	int fd;
	uint16_t port;
	shoal_xfer_admit_fn admit;
	void *ctx;
	xfer_pending pend[SHOAL_XFER_PENDING_MAX];
	uint64_t serial; /* of the last accepted connection */
};

shoal_err shoal_xfer_listener_new(const shoal_xfer_config *cfg, const char *host, uint16_t port,
                                  shoal_xfer_admit_fn admit, void *ctx, shoal_xfer_listener **out,
                                  char *why, size_t why_len)
{
	shoal_xfer_listener *l = calloc(1, sizeof *l);
	if (!l)
		return SHOAL_ERR_NOMEM;
	l->cfg = *cfg;
	l->admit = admit;
	l->ctx = ctx;
	for (int i = 0; i < SHOAL_XFER_PENDING_MAX; i++)
		l->pend[i].fd = -1;
	shoal_err e = xfer__tcp_listen(host, port, &l->fd, &l->port, why, why_len);
	if (e) {
		free(l);
		return e;
	}
	*out = l;
	return SHOAL_OK;
}

void shoal_xfer_listener_free(shoal_xfer_listener *l)
{
	if (!l)
		return;
	for (int i = 0; i < SHOAL_XFER_PENDING_MAX; i++)
		if (l->pend[i].fd >= 0)
			close(l->pend[i].fd);
	close(l->fd);
	free(l);
}

uint16_t shoal_xfer_listener_port(const shoal_xfer_listener *l)
{
	return l->port;
}

int shoal_xfer_listener_fd(const shoal_xfer_listener *l)
{
	return l->fd;
}

/* Drop a connection in handshake: when `tell`, an ERROR frame (best
 * effort, never waits), then a log line at `lv`, its unread bytes, close.
 * Returns code with "refused ADDR: reason" in why. */
static shoal_err pending_drop(xfer_pending *p, shoal_err code, const char *reason, int tell,
                              shoal_log_level lv, char *why, size_t why_len)
{
	if (tell) {
		uint8_t f[SHOAL_XFER_HDR_SIZE + SHOAL_XFER_REASON_MAX];
		size_t n = strnlen(reason, SHOAL_XFER_REASON_MAX), head;
		shoal_xfer_hdr h = {
		    .kind = SHOAL_XFER_KIND_ERROR, .n_aux = code, .payload_len = (uint32_t)n};
		if (!shoal_xfer_frame_encode_head(&h, f, sizeof f, &head)) {
			memcpy(f + head, reason, n);
			shoal_xfer_frame_seal(f, head + n); /* as the TCP transport would */
			ssize_t w = send(p->fd, f, head + n, MSG_NOSIGNAL);
			(void)w; /* a peer that cannot take 351 bytes does not get them */
		}
	}
	shoal_log(lv, "xfer", "dropped data connection from %s: %s", p->addr, reason);
	uint8_t sink[512];
	for (size_t got = 0; got < XFER_DRAIN_BYTES;) {
		ssize_t n = read(p->fd, sink, sizeof sink);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p->fd);
	p->fd = -1;
	return shoal_why(why, why_len, code, "refused %s: %s", p->addr, reason);
}

/* Read what p sent, never past the end of its first frame: 1 when that
 * frame is whole, 0 while bytes are missing, -1 when the connection broke
 * or the bytes are no frame of at most XFER_HELLO_FRAME_MAX (*e, why). */
static int pending_read(xfer_pending *p, shoal_err *e, char *why, size_t why_len)
{
	for (;;) {
		uint32_t need = SHOAL_XFER_HDR_SIZE;
		if (p->have >= SHOAL_XFER_HDR_SIZE) {
			*e = shoal_xfer_frame_peek(p->hello, p->have, XFER_HELLO_FRAME_MAX, &need,
			                           why, why_len);
			if (*e)
				return -1;
		}
		if (p->have == need)
			return 1;
		ssize_t n = read(p->fd, p->hello + p->have, need - p->have);
		if (n > 0) {
			p->have += (uint32_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		*e =
		    shoal_why(why, why_len, SHOAL_ERR_CLOSED, "peer %s after %u bytes of its HELLO",
		              n == 0 ? "closed the connection" : strerror(errno), p->have);
		return -1;
	}
}

/* The HELLO block of p's whole first frame, or why it is none. */
static shoal_err pending_hello(const xfer_pending *p, shoal_xfer_hello *hl, char *why,
                               size_t why_len)
{
	static const shoal_xfer_limits lim = {XFER_HELLO_FRAME_MAX, 0, 0};
	shoal_xfer_hdr h;
	const uint8_t *payload;
	shoal_err e = shoal_xfer_frame_check_head(p->hello, why, why_len); /* read raw: seal here */
	if (!e)
		e = shoal_xfer_frame_check_body(p->hello, p->have, why, why_len);
	if (!e)
		e = shoal_xfer_frame_decode(p->hello, p->have, &lim, &h, NULL, NULL, &payload, why,
		                            why_len);
	if (e)
		return e;
	if (h.kind == SHOAL_XFER_KIND_ERROR)
		return shoal_why(why, why_len, (shoal_err)h.n_aux, "peer: %.*s", (int)h.payload_len,
		                 (const char *)payload);
	if (h.kind != SHOAL_XFER_KIND_HELLO)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "expected a %s frame, got %s",
		                 shoal_xfer_kind_name(SHOAL_XFER_KIND_HELLO),
		                 shoal_xfer_kind_name(h.kind));
	if (h.seq)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "frame seq %llu, expected 0",
		                 (unsigned long long)h.seq);
	return shoal_xfer_hello_decode(payload, h.payload_len, hl, why, why_len);
}

/* p's HELLO is whole: judge its token; admitted, the link takes p's fd and
 * runs the rest of the handshake (HELLO_ACK, RDMA negotiation) by p's
 * deadline, synchronously: only key holders get this far. */
static shoal_err pending_admit(shoal_xfer_listener *l, xfer_pending *p, shoal_xfer_link **out,
                               char *why, size_t why_len)
{
	char r[SHOAL_WHY_LEN], nr[SHOAL_WHY_LEN], id[2 * SHOAL_PEER_ID_LEN + 1];
	shoal_xfer_hello peer, mine;
	shoal_err e = pending_hello(p, &peer, r, sizeof r);
	if (e)
		return pending_drop(p, SHOAL_ERR_PROTO, r, 1, SHOAL_LOG_WARN, why, why_len);
	if (peer.token_len == 0)
		return pending_drop(p, SHOAL_ERR_AUTH, "no admission token presented", 1,
		                    SHOAL_LOG_WARN, why, why_len);
	shoal_hex_encode(peer.peer, SHOAL_PEER_ID_LEN, id);
	if (!l->admit(l->ctx, peer.peer, p->addr, peer.token, peer.token_len)) {
		snprintf(r, sizeof r, "admission token not valid for peer %s", id);
		return pending_drop(p, SHOAL_ERR_AUTH, r, 1, SHOAL_LOG_WARN, why, why_len);
	}
	int fd = p->fd;
	p->fd = -1;
	shoal_xfer_link *k;
	e = link_new(&l->cfg, fd, &k, why, why_len);
	if (e)
		return e;
	snprintf(k->addr, sizeof k->addr, "%s", p->addr);
	memcpy(k->peer, peer.peer, SHOAL_PEER_ID_LEN);
	k->rx_seq = 1; /* the HELLO was frame 0 */
	k->m.frames_recv[SHOAL_XFER_KIND_HELLO]++;
	k->m.bytes_recv[SHOAL_XFER_KIND_HELLO] += p->have;
	k->max_send = peer.max_frame < k->cfg.max_frame ? peer.max_frame : k->cfg.max_frame;
	hello_fill(k, &l->cfg, &mine, nr, sizeof nr);
	uint8_t blk[SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX];
	size_t bl = shoal_xfer_hello_encode(&mine, blk, sizeof blk);
	e = hs_send(k, SHOAL_XFER_KIND_HELLO_ACK, 0, blk, bl, p->deadline, why, why_len);
	if (!e)
		e = negotiate(k, 0, &peer, nr, p->deadline, why, why_len);
	if (e) {
		shoal_xfer_link_free(k);
		return e;
	}
	*out = k;
	return SHOAL_OK;
}

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char host[48] = "?";
	snprintf(out, len, "?");
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
		snprintf(out, len, "%s:%u", host, ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
		snprintf(out, len, "[%s]:%u", host, ntohs(a->sin6_port));
	}
}

/* Take up to XFER_ACCEPT_BATCH waiting connections into the pending set;
 * when it is full, the oldest pending connection makes room. */
static void pending_accept(shoal_xfer_listener *l)
{
	char why[SHOAL_WHY_LEN];
	for (int i = 0; i < XFER_ACCEPT_BATCH; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept(l->fd, (struct sockaddr *)&ss, &sl);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				SHOAL_LOG_D("xfer", "accept: %s", strerror(errno));
			return;
		}
		if (xfer__fd_setup(fd, 1)) {
			close(fd);
			continue;
		}
		xfer_pending *p = NULL, *old = NULL;
		for (int j = 0; j < SHOAL_XFER_PENDING_MAX && !p; j++) {
			xfer_pending *q = &l->pend[j];
			if (q->fd < 0)
				p = q;
			else if (!old || q->serial < old->serial)
				old = q;
		}
		if (!p) {
			snprintf(why, sizeof why, "%d connections in handshake, this the oldest",
			         SHOAL_XFER_PENDING_MAX);
			pending_drop(old, SHOAL_ERR_BUSY, why, 1, SHOAL_LOG_INFO, NULL, 0);
			p = old;
		}
		p->fd = fd;
		p->deadline = (int64_t)shoal_clock_now_ms() + l->cfg.handshake_ms;
		p->serial = ++l->serial;
		p->have = 0;
		addr_text(&ss, p->addr, sizeof p->addr);
	}
}

shoal_err shoal_xfer_listener_accept(shoal_xfer_listener *l, int timeout_ms, shoal_xfer_link **out,
                                     char *why, size_t why_len)
{
	struct pollfd pf[1 + SHOAL_XFER_PENDING_MAX];
	int slot[1 + SHOAL_XFER_PENDING_MAX];
	int64_t end = timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_ms() + timeout_ms;
	char r[SHOAL_WHY_LEN];
	for (int polled = 0;; polled = 1) {
		int64_t now = (int64_t)shoal_clock_now_ms();
		xfer_pending *due = NULL; /* the earliest deadline */
		int n = 0;
		pf[n++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
		for (int i = 0; i < SHOAL_XFER_PENDING_MAX; i++) {
			xfer_pending *p = &l->pend[i];
			if (p->fd < 0)
				continue;
			if (!due || p->deadline < due->deadline)
				due = p;
			slot[n] = i;
			pf[n++] = (struct pollfd){.fd = p->fd, .events = POLLIN};
		}
		if (due && due->deadline <= now) {
			snprintf(r, sizeof r, "no whole HELLO within %d ms (%u bytes): timed out",
			         l->cfg.handshake_ms, due->have);
			return pending_drop(due, SHOAL_ERR_TIMEOUT, r, 1, SHOAL_LOG_INFO, why,
			                    why_len);
		}
		if (polled && end >= 0 && now >= end)
			return shoal_why(why, why_len, SHOAL_ERR_TIMEOUT,
			                 "no connection within %d ms", timeout_ms);
		int64_t wait = end < 0 ? -1 : end - now;
		if (due && (wait < 0 || due->deadline - now < wait))
			wait = due->deadline - now;
		int rc = poll(pf, (nfds_t)n, wait < 0 ? -1 : (int)wait);
		if (rc < 0 && errno != EINTR)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s", strerror(errno));
		if (rc <= 0)
			continue;
		/* Bytes first, then new connections: a peer whose HELLO is here
		 * is served before another batch can evict it. */
		for (int i = 1; i < n; i++) {
			if (!pf[i].revents)
				continue;
			xfer_pending *p = &l->pend[slot[i]];
			shoal_err e;
			int got = pending_read(p, &e, r, sizeof r);
			if (got > 0)
				return pending_admit(l, p, out, why, why_len);
			if (got < 0)
				return pending_drop(p, e == SHOAL_ERR_CLOSED ? e : SHOAL_ERR_PROTO,
				                    r, e != SHOAL_ERR_CLOSED,
				                    e == SHOAL_ERR_CLOSED ? SHOAL_LOG_INFO
				                                          : SHOAL_LOG_WARN,
				                    why, why_len);
		}
		if (pf[0].revents)
			pending_accept(l);
	}
}

/* ---- connector ------------------------------------------------------- */

shoal_err shoal_xfer_link_connect(const shoal_xfer_config *cfg, const char *host, uint16_t port,
                                  const uint8_t *token, size_t token_len, shoal_xfer_link **out,
                                  char *why, size_t why_len)
{
	int fd;
	if (token_len > SHOAL_XFER_TOKEN_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "token of %zu bytes (max %u)",
		                 token_len, SHOAL_XFER_TOKEN_MAX);
	int64_t deadline = (int64_t)shoal_clock_now_ms() + cfg->handshake_ms;
	shoal_err e = xfer__tcp_connect(host, port, cfg->handshake_ms, &fd, why, why_len);
	if (e)
		return e;
	shoal_xfer_link *k;
	e = link_new(cfg, fd, &k, why, why_len);
	if (e)
		return e;
	snprintf(k->addr, sizeof k->addr, "%s:%u", host, port);
	char nr[SHOAL_WHY_LEN];
	shoal_xfer_hello mine, peer;
	shoal_xfer_frame f;
	uint8_t blk[SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX];
	hello_fill(k, cfg, &mine, nr, sizeof nr);
	mine.token_len = (uint32_t)token_len;
	if (token_len)
		memcpy(mine.token, token, token_len);
	size_t bl = shoal_xfer_hello_encode(&mine, blk, sizeof blk);
	e = hs_send(k, SHOAL_XFER_KIND_HELLO, 0, blk, bl, deadline, why, why_len);
	if (!e)
		e = hs_recv(k, SHOAL_XFER_KIND_HELLO_ACK, deadline, &f, why, why_len);
	if (!e)
		e = shoal_xfer_hello_decode(f.payload, f.hdr.payload_len, &peer, why, why_len);
	if (e)
		goto fail;
	memcpy(k->peer, peer.peer, SHOAL_PEER_ID_LEN);
	k->max_send = peer.max_frame < cfg->max_frame ? peer.max_frame : cfg->max_frame;
	e = negotiate(k, 1, &peer, nr, deadline, why, why_len);
	if (e)
		goto fail;
	*out = k;
	return SHOAL_OK;
fail:
	shoal_xfer_link_free(k);
	return e;
}
