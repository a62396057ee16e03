/*
 * runtime/dist/dist_tensor.c: a tensor group member's data plane: the
 * engine's exchange (one all-gather: a GATHER frame to every other member,
 * one from each) and the entry member's relay of the stage's frames.
 *
 * Part: runtime/ (distributed inference, dist.h invariant 9). Divisions:
 * the relay, the exchange (and the head's gather, its one-way case).
 *
 * Waiting: a member that finished its slice first waits for the others'.
 * On loopback or a fast link a slice comes within tens of microseconds,
 * less than a sleep and wake-up costs (poll and the scheduler: ~5-50 us
 * each way, more when the peers share cores and the waker must be
 * scheduled), so the wait first polls its links without sleeping for
 * tp_spin_us, then blocks in poll(2) until a slice or the timeout comes.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "runtime/dist/dist_impl.h"

#define LOG_PART "dist"

/* ---- the relay ---------------------------------------------------------- */

bool dist__tp_relay(shoal_dist_stage *s, const shoal_xfer_frame *f, char *why, size_t why_len)
{
	const shoal_xfer_hdr *in = &f->hdr;
	shoal_xfer_hdr h = {.kind = in->kind,
	                    .dtype = in->dtype,
	                    .layer_first = in->layer_first,
	                    .layer_end = in->layer_end,
	                    .dim = in->dim,
	                    .n_rows = in->n_rows,
	                    .rows = in->rows,
	                    .payload_len = in->payload_len};
	struct iovec v = {.iov_base = (void *)f->payload, .iov_len = in->payload_len};
	for (uint32_t m = 1; m < s->cfg.tp_n; m++) {
		shoal_xfer_link *k = s->cfg.tp_relay(s->cfg.tp_relay_ctx, s->cfg.tp_peer[m]);
		shoal_err e =
		    k ? shoal_xfer_link_send(k, &h, &v, 1, s->cfg.timeout_ms, why, why_len)
		      : shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no link to member %u", m);
		if (e)
			return false;
		s->met.relayed++;
	}
	return true;
}

/* ---- the exchange -------------------------------------------------------- */

static shoal_err tp_fail(shoal_err e, uint32_t layer, unsigned round, const char *what)
{
	SHOAL_LOG_W(LOG_PART, "tensor exchange, layer %u round %u: %s", layer, round, what);
	return e;
}

/* Check piece frame f of a member's slice (len bytes, *got of them in buf
 * already) against what we expect; OK: appended to buf. */
static shoal_err take_piece(shoal_dist_stage *s, const shoal_xfer_frame *f, uint32_t layer,
                            unsigned round, uint8_t *buf, size_t len, size_t *got, char *why,
                            size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	bool ok = h->kind == SHOAL_XFER_KIND_GATHER && h->layer_first == layer &&
	          h->n_aux == round && h->n_rows == s->tp_rows && h->payload_len <= len - *got &&
	          (h->payload_len > 0 || len == 0);
	for (uint32_t r = 0; ok && r < h->n_rows; r++)
		ok = h->rows[r].session == s->tags[s->tp_row0 + r].session &&
		     h->rows[r].pos == s->tags[s->tp_row0 + r].pos;
	if (!ok)
		return shoal_why(
		    why, why_len, SHOAL_ERR_PROTO,
		    "a %s frame of layer %u round %u, %u rows, %u bytes where %zu more "
		    "bytes of a slice for %u rows were due",
		    shoal_xfer_kind_name(h->kind), h->layer_first, h->n_aux, h->n_rows,
		    h->payload_len, len - *got, s->tp_rows);
	memcpy(buf + *got, f->payload, h->payload_len);
	*got += h->payload_len;
	s->met.gather_frames_recv++;
	return SHOAL_OK;
}

/* Our slice to member link k: one message, in as few frames as fit the
 * link (a prefill's FFN slice of a large model exceeds one frame). */
static shoal_err send_slice(shoal_dist_stage *s, shoal_xfer_link *k, shoal_xfer_hdr *h,
                            const uint8_t *buf, size_t len, char *why, size_t why_len)
{
	h->dim = 0;
	h->payload_len = 0;
	uint64_t head = shoal_xfer_frame_head_len(h), max = shoal_xfer_link_max_send(k);
	size_t piece = max > head + 4 ? (size_t)(max - head) / 4u * 4u : 0;
	if (!piece)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "the rows do not fit a frame");
	size_t off = 0;
	do {
		size_t n = len - off < piece ? len - off : piece;
		h->dim = (uint32_t)(n / 4u);
		h->payload_len = (uint32_t)n;
		struct iovec v = {.iov_base = (void *)(buf + off), .iov_len = n};
		shoal_err e = shoal_xfer_link_send(k, h, &v, 1, s->cfg.timeout_ms, why, why_len);
		if (e)
			return e;
		s->met.gather_frames_sent++;
		s->met.gather_bytes += head + n;
		off += n;
	} while (off < len);
	return SHOAL_OK;
}

/* The slices of the members m with from[m], in any order of arrival, into
 * bufs[m] (len[m] bytes each); *n_got counts the whole ones. */
static shoal_err recv_slices(shoal_dist_stage *s, uint32_t layer, unsigned round, const bool *from,
                             void *const *bufs, const size_t *len, uint64_t *n_got)
{
	uint32_t n = s->cfg.tp_n;
	char why[SHOAL_WHY_LEN] = "";
	bool got[SHOAL_DIST_TP_MAX] = {false};
	size_t have[SHOAL_DIST_TP_MAX] = {0}; /* bytes of each slice so far */
	uint32_t left = 0;
	for (uint32_t m = 0; m < n; m++)
		left += from[m];
	uint64_t t0 = dist__now_ns(), spin_end = t0 + (uint64_t)s->cfg.tp_spin_us * 1000u;
	uint64_t end = t0 + (uint64_t)(s->cfg.timeout_ms > 0 ? s->cfg.timeout_ms : 1000) * 1000000u;
	bool blocked = false;
	while (left) {
		struct pollfd pf[3 * SHOAL_DIST_TP_MAX];
		int np = 0;
		bool missing = false;  /* a member's link not there yet */
		bool progress = false; /* a frame came in this pass */
		for (uint32_t m = 0; m < n; m++) {
			if (!from[m] || got[m])
				continue;
			shoal_xfer_link *k = s->cfg.tp_recv(s->cfg.tp_recv_ctx, s->cfg.tp_peer[m]);
			if (!k) {
				missing = true;
				continue;
			}
			shoal_xfer_frame f;
			shoal_err e = shoal_xfer_link_recv(k, 0, &f, why, sizeof why);
			if (e == SHOAL_ERR_TIMEOUT) {
				np += shoal_xfer_link_pollfds(k, pf + np, 3);
				continue;
			}
			if (!e)
				e = take_piece(s, &f, layer, round, bufs[m], len[m], &have[m], why,
				               sizeof why);
			if (e)
				return tp_fail(e, layer, round, why);
			progress = true;
			if (have[m] < len[m]) /* more pieces to come */
				continue;
			got[m] = true;
			(*n_got)++;
			left--;
		}
		if (!left)
			break;
		uint64_t now = dist__now_ns();
		if (now >= end)
			return tp_fail(SHOAL_ERR_TIMEOUT, layer, round,
			               "the members' slices are late");
		if (now < spin_end || progress)
			continue;
		blocked = true;
		/* 1 ms while a link is still being accepted: look again soon */
		uint64_t ms = (end - now) / 1000000u + 1;
		poll(pf, (nfds_t)np, missing || ms > 1000 ? (missing ? 1 : 1000) : (int)ms);
	}
	if (blocked)
		s->met.gather_blocked++;
	s->met.gather_wait_ns += dist__now_ns() - t0;
	return SHOAL_OK;
}

/* Our slice bufs[me] to member m (its own GATHER message). */
static shoal_err send_to(shoal_dist_stage *s, uint32_t m, uint32_t layer, unsigned round,
                         const void *buf, size_t len)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_GATHER,
	                    .dtype = SHOAL_XFER_DTYPE_F32,
	                    .layer_first = (uint16_t)layer,
	                    .layer_end = (uint16_t)(layer + 1),
	                    .n_rows = s->tp_rows,
	                    .rows = s->tags + s->tp_row0,
	                    .n_aux = (uint32_t)round};
	shoal_xfer_link *k = s->cfg.tp_send(s->cfg.tp_send_ctx, s->cfg.tp_peer[m]);
	if (!k)
		return tp_fail(SHOAL_ERR_CLOSED, layer, round, "no link to a member");
	shoal_err e = send_slice(s, k, &h, buf, len, why, sizeof why);
	return e ? tp_fail(e, layer, round, why) : SHOAL_OK;
}

shoal_err dist__tp_exchange(void *ctx, uint32_t layer, shoal_engine_tp_round round,
                            void *const *bufs, const size_t *len)
{
	shoal_dist_stage *s = ctx;
	uint32_t n = s->cfg.tp_n, me = s->cfg.tp_me;
	s->met.gathers++;
	bool from[SHOAL_DIST_TP_MAX] = {false};
	for (uint32_t m = 0; m < n; m++) {
		if (m == me)
			continue;
		shoal_err e = send_to(s, m, layer, round, bufs[me], len[me]);
		if (e)
			return e;
		s->met.gather_sent++;
		from[m] = true;
	}
	return recv_slices(s, layer, round, from, bufs, len, &s->met.gather_recv);
}

shoal_err dist__tp_gather(void *ctx, uint32_t root, void *const *bufs, const size_t *len)
{
	shoal_dist_stage *s = ctx;
	uint32_t n = s->cfg.tp_n, me = s->cfg.tp_me, layer = s->cfg.layer_end;
	s->met.head_gathers++;
	if (me != root) {
		shoal_err e = send_to(s, root, layer, SHOAL_ENGINE_TP_HEAD, bufs[me], len[me]);
		if (!e)
			s->met.head_sent++;
		return e;
	}
	bool from[SHOAL_DIST_TP_MAX] = {false};
	for (uint32_t m = 0; m < n; m++)
		from[m] = m != me;
	return recv_slices(s, layer, SHOAL_ENGINE_TP_HEAD, from, bufs, len, &s->met.head_recv);
}
