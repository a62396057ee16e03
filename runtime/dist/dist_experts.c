/*
 * runtime/dist/dist_experts.c: remote experts over data links. The client side
 * is the engine's moe_hook of a stage: dispatch sends each remote expert
 * peer ONE EXPERT_REQ with the rows routed to it and their gates; collect
 * waits for the one EXPERT_REP of each and places the contributions in
 * their (row, slot); the engine combines in expert-id order. The server
 * side answers an EXPERT_REQ with the stage's engine.
 *
 * Part: runtime/ (distributed inference, dist.h invariant 7). The routes
 * of peer p are, on both sides, the slots (r, j) in row-major order whose
 * expert p holds, so a reply is placed by index after its experts match.
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "runtime/dist/dist_impl.h"

#define LOG_PART "dist"

/* An EXPERT_REQ or EXPERT_REP of layer `layer`: n rows of d floats for
 * requests, one contribution of d floats per route for replies. */
static shoal_xfer_hdr expert_hdr(shoal_xfer_kind kind, uint32_t layer, uint32_t d, uint32_t n,
                                 const shoal_xfer_row *rows, uint32_t n_routes,
                                 const shoal_xfer_route *routes, uint32_t n_payload)
{
	return (shoal_xfer_hdr){.kind = kind,
	                        .dtype = SHOAL_XFER_DTYPE_F32,
	                        .layer_first = (uint16_t)layer,
	                        .layer_end = (uint16_t)(layer + 1),
	                        .dim = d,
	                        .n_rows = n,
	                        .rows = rows,
	                        .n_aux = n_routes,
	                        .routes = routes,
	                        .payload_len = n_payload * d * 4u};
}

/* ---- client: dispatch and collect ------------------------------------------- */

static shoal_xfer_link *expert_link(shoal_dist_stage *s, uint32_t p)
{
	if (s->cfg.expert_link)
		return s->cfg.expert_link(s->cfg.expert_link_ctx, s->xpeers[p]);
	return s->cfg.link(s->cfg.link_ctx, s->xpeers[p]);
}

shoal_err dist__experts_dispatch(void *ctx, uint32_t layer, const shoal_moe_rows *rows)
{
	shoal_dist_stage *s = ctx;
	uint32_t k = rows->k, d = s->d, ne = s->n_expert;
	const int8_t *xp = s->xpeer + (size_t)layer * ne; /* (n_expert) peer index or -1 */
	uint8_t used[DIST__MAX_XPEERS] = {0};
	s->n_sent = 0;
	for (uint32_t i = 0; i < rows->n_rows * k; i++) { /* peers in first-use order */
		int p = xp[rows->ids[i]];
		if (p >= 0 && !used[p]) {
			used[p] = 1;
			s->sent[s->n_sent++] = (uint8_t)p;
		}
	}
	for (uint32_t q = 0; q < s->n_sent; q++) {
		int p = s->sent[q];
		uint32_t nr = 0, nroute = 0;
		for (uint32_t r = 0; r < rows->n_rows; r++) {
			bool any = false;
			for (uint32_t j = 0; j < k; j++) {
				int32_t x = rows->ids[(size_t)r * k + j];
				if (xp[x] != p)
					continue;
				any = true;
				s->xroute[nroute++] =
				    (shoal_xfer_route){.row = nr,
				                       .expert = (uint32_t)x,
				                       .gate = rows->w[(size_t)r * k + j]};
			}
			if (!any)
				continue;
			memcpy(s->xx + (size_t)nr * d, rows->x + (size_t)r * d, (size_t)d * 4u);
			s->xtags[nr] = s->tags[r];
			nr++;
		}
		s->sent_routes[q] = nroute;
		shoal_xfer_link *lk = expert_link(s, (uint32_t)p);
		if (!lk) {
			SHOAL_LOG_W(LOG_PART, "layer %u: no link to an expert peer", layer);
			return SHOAL_ERR_NOTFOUND;
		}
		shoal_xfer_hdr h = expert_hdr(SHOAL_XFER_KIND_EXPERT_REQ, layer, d, nr, s->xtags,
		                              nroute, s->xroute, nr);
		struct iovec v = {.iov_base = s->xx, .iov_len = (size_t)nr * d * 4u};
		char why[SHOAL_WHY_LEN];
		shoal_err e =
		    shoal_xfer_link_send(lk, &h, &v, 1, s->cfg.timeout_ms, why, sizeof why);
		if (e) {
			SHOAL_LOG_W(LOG_PART, "layer %u: expert request: %s", layer, why);
			return e;
		}
		s->met.expert_reqs++;
		s->met.expert_req_bytes += shoal_xfer_frame_head_len(&h) + h.payload_len;
	}
	if (s->n_sent)
		s->met.expert_layers++;
	return SHOAL_OK;
}

/* Whether reply f answers the request sent to peer p (index q) for these
 * rows: kind, shape, layer, every row tag and every route's (row, expert)
 * regenerated from the routing. */
static bool reply_matches(const shoal_dist_stage *s, uint32_t q, uint32_t layer,
                          const shoal_moe_rows *rows, const shoal_xfer_frame *f)
{
	const shoal_xfer_hdr *h = &f->hdr;
	uint32_t k = rows->k, ne = s->n_expert;
	int p = s->sent[q];
	const int8_t *xp = s->xpeer + (size_t)layer * ne;
	if (h->kind != SHOAL_XFER_KIND_EXPERT_REP || h->dtype != SHOAL_XFER_DTYPE_F32 ||
	    h->dim != s->d || h->layer_first != layer || h->n_aux != s->sent_routes[q])
		return false;
	uint32_t i = 0, nr = 0;
	for (uint32_t r = 0; r < rows->n_rows; r++) {
		bool any = false;
		for (uint32_t j = 0; j < k; j++) {
			int32_t x = rows->ids[(size_t)r * k + j];
			if (xp[x] != p)
				continue;
			if (i >= h->n_aux || h->routes[i].expert != (uint32_t)x ||
			    h->routes[i].row != nr)
				return false;
			any = true;
			i++;
		}
		if (!any)
			continue;
		if (nr >= h->n_rows || h->rows[nr].session != s->tags[r].session ||
		    h->rows[nr].pos != s->tags[r].pos)
			return false;
		nr++;
	}
	return i == h->n_aux && nr == h->n_rows;
}

/* Wait up to timeout_ms for the reply to request q on lk. Frames dropped
 * by the link and replies that do not match (stale ones, left by a run
 * that gave up) are logged and skipped; an ERROR frame fails the run. */
static shoal_err recv_reply(shoal_dist_stage *s, shoal_xfer_link *lk, uint32_t q, uint32_t layer,
                            const shoal_moe_rows *rows, shoal_xfer_frame *f)
{
	char why[SHOAL_WHY_LEN];
	uint64_t deadline = dist__now_ns() + (uint64_t)s->cfg.timeout_ms * 1000000u;
	if (!lk)
		return SHOAL_ERR_NOTFOUND;
	for (;;) {
		uint64_t now = dist__now_ns();
		int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000u);
		shoal_err e = shoal_xfer_link_recv(lk, left, f, why, sizeof why);
		if (e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
			s->met.dropped++;
			SHOAL_LOG_W(LOG_PART, "layer %u: dropped a frame: %s", layer, why);
			continue;
		}
		if (e) {
			if (e == SHOAL_ERR_TIMEOUT)
				s->met.expert_timeouts++;
			SHOAL_LOG_W(LOG_PART, "layer %u: waiting for experts: %s", layer, why);
			return e;
		}
		if (f->hdr.kind == SHOAL_XFER_KIND_ERROR) {
			SHOAL_LOG_W(LOG_PART, "layer %u: expert peer: %.*s", layer,
			            (int)f->hdr.payload_len, (const char *)f->payload);
			return (shoal_err)f->hdr.n_aux;
		}
		if (reply_matches(s, q, layer, rows, f))
			return SHOAL_OK;
		s->met.dropped++;
		SHOAL_LOG_W(LOG_PART,
		            "layer %u: dropped a %s frame that answers no request of this "
		            "run (layer %u, %u routes)",
		            layer, shoal_xfer_kind_name(f->hdr.kind), f->hdr.layer_first,
		            f->hdr.n_aux);
	}
}

shoal_err dist__experts_collect(void *ctx, uint32_t layer, const shoal_moe_rows *rows,
                                float *contrib)
{
	shoal_dist_stage *s = ctx;
	uint32_t k = rows->k, d = s->d, ne = s->n_expert;
	const int8_t *xp = s->xpeer + (size_t)layer * ne;
	for (uint32_t q = 0; q < s->n_sent; q++) {
		int p = s->sent[q];
		shoal_xfer_link *lk = expert_link(s, (uint32_t)p);
		shoal_xfer_frame f;
		shoal_err e = recv_reply(s, lk, q, layer, rows, &f);
		if (e)
			return e;
		s->met.expert_rep_bytes += shoal_xfer_frame_head_len(&f.hdr) + f.hdr.payload_len;
		uint32_t i = 0; /* routes in the order of reply_matches */
		for (uint32_t r = 0; r < rows->n_rows; r++)
			for (uint32_t j = 0; j < k; j++) {
				if (xp[rows->ids[(size_t)r * k + j]] != p)
					continue;
				memcpy(contrib + ((size_t)r * k + j) * d,
				       f.payload + (size_t)i * d * 4u, (size_t)d * 4u);
				i++;
			}
	}
	return SHOAL_OK;
}

/* ---- server ------------------------------------------------------------------ */

static shoal_err serve_error(shoal_dist_stage *s, shoal_xfer_link *from, shoal_err e,
                             const char *reason, char *why, size_t why_len)
{
	s->met.dropped++;
	SHOAL_LOG_W(LOG_PART, "refused an expert request: %s", reason);
	size_t n = strnlen(reason, SHOAL_XFER_REASON_MAX);
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_ERROR, .n_aux = e, .payload_len = (uint32_t)n};
	struct iovec v = {.iov_base = (void *)reason, .iov_len = n};
	return shoal_xfer_link_send(from, &h, &v, 1, s->cfg.timeout_ms, why, why_len);
}

shoal_err dist__experts_serve(shoal_dist_stage *s, shoal_xfer_link *from, const shoal_xfer_frame *f,
                              char *why, size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	uint32_t k = s->k, d = s->d, ne = s->n_expert, n = h->n_rows, nr = h->n_aux;
	char w[SHOAL_WHY_LEN] = "";
	uint32_t layer = h->layer_first;
	if (h->dtype != SHOAL_XFER_DTYPE_F32 || h->dim != d || h->layer_end != layer + 1 ||
	    layer >= s->n_layer || !ne || n > s->R || nr > n * k) {
		snprintf(w, sizeof w, "expert request of %u rows x %u, %u routes, layer %u", n,
		         h->dim, nr, layer);
		return serve_error(s, from, SHOAL_ERR_FORMAT, w, why, why_len);
	}
	const uint8_t *own = s->mask + (size_t)layer * ne;
	memset(s->ex_req, 0, ne);
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t x = h->routes[i].expert;
		if (x >= ne || !own[x]) {
			snprintf(w, sizeof w, "layer %u: expert %u is not held here", layer, x);
			return serve_error(s, from, SHOAL_ERR_NOTFOUND, w, why, why_len);
		}
		s->ex_req[x] = 1;
	}
	/* each row's k slots: its routes, then padding ids it does not route
	 * to (unrequested ones first, so they are not computed), sorted */
	for (uint32_t r = 0; r < n; r++) {
		int32_t *ids = s->ex_ids + (size_t)r * k;
		float *wt = s->ex_w + (size_t)r * k;
		uint32_t m = 0;
		for (uint32_t i = 0; i < nr; i++) {
			if (h->routes[i].row != r)
				continue;
			for (uint32_t j = 0; j < m; j++)
				if (ids[j] == (int32_t)h->routes[i].expert)
					m = k + 1; /* a duplicate */
			if (m >= k) {
				snprintf(w, sizeof w,
				         "layer %u row %u: more than %u routes or a "
				         "duplicate",
				         layer, r, k);
				return serve_error(s, from, SHOAL_ERR_FORMAT, w, why, why_len);
			}
			ids[m] = (int32_t)h->routes[i].expert;
			wt[m++] = h->routes[i].gate;
		}
		for (int pass = 0; pass < 2 && m < k; pass++)
			for (uint32_t x = 0; x < ne && m < k; x++) {
				bool in = false;
				for (uint32_t j = 0; j < m; j++)
					in |= ids[j] == (int32_t)x;
				if (!in && (pass == 1 || !s->ex_req[x])) {
					ids[m] = (int32_t)x;
					wt[m++] = 0.0f;
				}
			}
		for (uint32_t a = 1; a < k; a++) /* insertion sort by id */
			for (uint32_t b = a; b > 0 && ids[b - 1] > ids[b]; b--) {
				int32_t ti = ids[b];
				ids[b] = ids[b - 1];
				ids[b - 1] = ti;
				float tw = wt[b];
				wt[b] = wt[b - 1];
				wt[b - 1] = tw;
			}
	}
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t r = h->routes[i].row, j = 0;
		while (s->ex_ids[(size_t)r * k + j] != (int32_t)h->routes[i].expert)
			j++;
		s->ex_slot[i] = r * k + j;
	}
	shoal_moe_rows mr = {.n_rows = n,
	                     .k = k,
	                     .x = (const float *)(const void *)f->payload,
	                     .ids = s->ex_ids,
	                     .w = s->ex_w};
	/* the part of a split stage that owns the layer, or the first */
	shoal_engine *eng =
	    s->e2 && layer >= s->cfg.device_end && layer < s->cfg.layer_end ? s->e2 : s->e;
	shoal_err e =
	    shoal_engine_moe_partial(eng, layer, &mr, s->ex_req, s->ex_contrib, w, sizeof w);
	if (e)
		return serve_error(s, from, e, w, why, why_len);
	for (uint32_t i = 0; i < nr; i++)
		memcpy(s->ex_out + (size_t)i * d, s->ex_contrib + (size_t)s->ex_slot[i] * d,
		       (size_t)d * 4u);
	shoal_xfer_hdr rh =
	    expert_hdr(SHOAL_XFER_KIND_EXPERT_REP, layer, d, n, h->rows, nr, h->routes, nr);
	struct iovec v = {.iov_base = s->ex_out, .iov_len = (size_t)nr * d * 4u};
	e = shoal_xfer_link_send(from, &rh, &v, 1, s->cfg.timeout_ms, why, why_len);
	if (!e)
		s->met.expert_served++;
	return e;
}
