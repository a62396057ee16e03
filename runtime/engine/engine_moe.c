/*
 * runtime/engine/engine_moe.c: the mixture-of-experts FFN: routing, the per-expert
 * contributions (locally or through the hook for remote experts) and their
 * fixed-order combine.
 *
 * Part: runtime/ (engine). Semantics as the reference engine:
 *   p = softmax(x Wr^T) over all n_expert (F32, sum in double)
 *   top-k of p (ties: lower expert id), w = p[top-k]
 *   w /= max(sum(w), 2^-14) when hp.expert_weights_norm (models/ sets it
 *     for Mixtral-style llama and qwen3moe unless the file says otherwise)
 *   out = sum_j w_j * down_j(silu(gate_j x) * up_j x)
 * except that the k terms are added in expert-id order (not weight order),
 * so that a sum of contributions computed on several peers is exact.
 * deepseek2 adds, in the reference's order:
 *   p = sigmoid(x Wr^T) instead of the softmax (expert_gating_func 2)
 *   s = p + exp_probs_b, used only to choose the experts
 *   groups: a group scores the sum of its two best s; experts outside
 *     the n_expert_group_used best groups are out (s = -inf)
 *   top-k of s, w = p[top-k]; normalised as above; w *= expert_weights_scale
 *   out += the shared experts' down(silu(gate x) * up x), on the layer's
 *     owner (shared experts never leave their layer)
 * gpt-oss (SHOAL_MOE_GATING_SOFTMAX_TOPK, expert biases, swiglu_oai):
 *   l = x Wr^T + br; top-k of l; w = softmax over those k values
 *   out = sum_j w_j * (down_j(h) + bd_j), h = swiglu_oai(gate_j x + bg_j,
 *     up_j x + bu_j) (models/model.h: the clamped form)
 *   always the per-expert path below (the backends' moe_ffn has no biases)
 *
 * Where it runs: the routing's choice on the host (one read of the
 * router's scores; the backends' shared top-k); the routed experts of a
 * layer whose experts are all here as one backend moe_ffn with the
 * routing written to the device (no read-back per expert: backend.h says
 * the op adds the terms as moe_combine does, so the tokens are those of
 * the per-expert path); a layer with remote experts per expert here
 * (shoal_engine_moe_partial) plus the hook, combined on the host.
 */
#include "runtime/engine/engine_impl.h"

#include <math.h>
#include <string.h>

#include "base/assert.h"

/* Renormalisation floor: the reference clamps the weight sum at 2^-14
 * (6.1035e-5, the smallest normal half float) to avoid dividing by ~0. */
#define SHOAL_MOE_WSUM_MIN 6.103515625e-5f

/* Selection scores of one row: sel (n_expert) = p + bias, then the experts
 * outside the best groups set to -inf (ties to the lower group). */
static void engine_route_select(const shoal_hparams *hp, const float *bias, const float *p,
                                float *sel)
{
	uint32_t ne = hp->n_expert, ng = hp->n_expert_group;
	for (uint32_t x = 0; x < ne; x++)
		sel[x] = bias ? p[x] + bias[x] : p[x];
	if (ng < 2)
		return;
	uint32_t per = ne / ng;
	float gs[SHOAL_MOE_MAX_GROUPS]; /* (n_group) */
	uint8_t keep[SHOAL_MOE_MAX_GROUPS] = {0};
	for (uint32_t g = 0; g < ng; g++) {
		float b1 = -INFINITY, b2 = -INFINITY; /* the two best of the group */
		for (uint32_t i = 0; i < per; i++) {
			float v = sel[g * per + i];
			if (v > b1) {
				b2 = b1;
				b1 = v;
			} else if (v > b2) {
				b2 = v;
			}
		}
		gs[g] = b1 + b2;
	}
	for (uint32_t u = 0; u < hp->n_expert_group_used; u++) {
		uint32_t best = ng;
		for (uint32_t g = 0; g < ng; g++)
			if (!keep[g] && (best == ng || gs[g] > gs[best]))
				best = g;
		keep[best] = 1;
	}
	for (uint32_t g = 0; g < ng; g++)
		if (!keep[g])
			for (uint32_t i = 0; i < per; i++)
				sel[g * per + i] = -INFINITY;
}

/* The softmax of a row's k chosen logits w (best first, so w[0] is the
 * largest) in place, the sum in double. */
static void engine_softmax_k(float *w, uint32_t k)
{
	double s = 0;
	float m = w[0];
	for (uint32_t j = 0; j < k; j++) {
		w[j] = expf(w[j] - m);
		s += (double)w[j];
	}
	for (uint32_t j = 0; j < k; j++)
		w[j] = (float)((double)w[j] / s);
}

/* Row r's k routes after the backend's softmax and top-k: renormalised
 * when asked, scaled, then sorted by expert id. */
static void engine_route_row(uint32_t k, bool norm, float scale, int32_t *ids, float *w)
{
	if (norm) {
		double s = 0;
		for (uint32_t j = 0; j < k; j++)
			s += w[j];
		float fs = (float)s;
		if (fs < SHOAL_MOE_WSUM_MIN)
			fs = SHOAL_MOE_WSUM_MIN;
		for (uint32_t j = 0; j < k; j++)
			w[j] /= fs;
	}
	if (scale != 1.0f)
		for (uint32_t j = 0; j < k; j++)
			w[j] *= scale;
	/* sort the k slots by expert id (insertion sort: k is small) */
	for (uint32_t j = 1; j < k; j++) {
		int32_t id = ids[j];
		float wj = w[j];
		uint32_t i = j;
		for (; i > 0 && ids[i - 1] > id; i--) {
			ids[i] = ids[i - 1];
			w[i] = w[i - 1];
		}
		ids[i] = id;
		w[i] = wj;
	}
}

/* Rows n_rows of xd (a device address, (n_rows, n_embd)) routed: ids and
 * w (host, (n_rows, k)). The router's product and the softmax on the
 * device, one read of the scores, the rest on the host (the selection is
 * the backends' shared shoal_backend_top_k_rows, so reading the scores
 * once is all the device waits for). */
static void engine_route(shoal_engine *e, uint32_t layer, uint32_t n_rows, const float *xd,
                         int32_t *ids, float *w)
{
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[layer];
	float *lg_d = e->moe_lg_d, *lg = e->moe_logits; /* (n_rows, n_expert) */
	size_t ld = hp->n_expert, n_lg = (size_t)n_rows * ld;
	e->ops->matmul(e->bk, 1, &L->router, xd, hp->n_embd, n_rows, &lg_d, &ld);
	if (L->router_b)
		e->ops->add(e->bk, lg_d, ld, L->router_b, 0, hp->n_expert, n_rows);
	uint32_t k = hp->n_expert_used;
	if (hp->gating == SHOAL_MOE_GATING_SOFTMAX_TOPK) {
		engine__to_host(e, lg_d, lg, n_lg);
		shoal_backend_top_k_rows(lg, hp->n_expert, n_rows, ld, k, ids, w);
		for (uint32_t r = 0; r < n_rows; r++)
			engine_softmax_k(w + (size_t)r * k, k);
	} else if (hp->gating == SHOAL_MOE_GATING_SIGMOID) {
		engine__to_host(e, lg_d, lg, n_lg);
		for (size_t i = 0; i < n_lg; i++)
			lg[i] = 1.0f / (1.0f + expf(-lg[i]));
	} else {
		e->ops->softmax(e->bk, lg_d, hp->n_expert, n_rows, ld);
		engine__to_host(e, lg_d, lg, n_lg);
	}
	if (hp->gating == SHOAL_MOE_GATING_SOFTMAX_TOPK) {
		/* chosen and weighed above */
	} else if (L->exp_probs_b || hp->n_expert_group > 1) {
		/* choose by the biased, group-masked scores; weigh by p */
		for (uint32_t r = 0; r < n_rows; r++)
			engine_route_select(hp, L->exp_probs_b, lg + (size_t)r * ld,
			                    e->moe_sel + (size_t)r * ld);
		shoal_backend_top_k_rows(e->moe_sel, hp->n_expert, n_rows, ld, k, ids, w);
		for (size_t i = 0; i < (size_t)n_rows * k; i++)
			w[i] = lg[(i / k) * ld + (size_t)ids[i]];
	} else {
		shoal_backend_top_k_rows(lg, hp->n_expert, n_rows, ld, k, ids, w);
	}
	for (uint32_t r = 0; r < n_rows; r++)
		engine_route_row(k, hp->expert_weights_norm, hp->expert_weights_scale,
		                 ids + (size_t)r * k, w + (size_t)r * k);
}

shoal_err shoal_engine_moe_route(shoal_engine *e, uint32_t layer, uint32_t n_rows, const float *x,
                                 int32_t *ids, float *w)
{
	/* only the layer's owner routes, over rows it holds: a bad layer or
	 * row count is a bug of the caller */
	SHOAL_ASSERT(e && x && ids && w);
	const shoal_hparams *hp = &e->hp;
	SHOAL_ASSERT(layer < hp->n_layer && e->layers[layer].moe && n_rows <= e->cfg.max_rows);
	if (n_rows == 0)
		return SHOAL_OK;
	/* x staged on the device unless it is already a device address of a
	 * host backend */
	const float *xd = engine__to_dev(e, e->moe_xd, x, (size_t)n_rows * hp->n_embd);
	engine_route(e, layer, n_rows, xd, ids, w);
	return SHOAL_OK;
}

shoal_err shoal_engine_moe_partial(shoal_engine *e, uint32_t layer, const shoal_moe_rows *rows,
                                   const uint8_t *mask, float *contrib, char *why, size_t why_len)
{
	/* the layer, sizes and ids may come from the network (an expert
	 * server's request): those are checked below; the pointers are ours */
	SHOAL_ASSERT(e && rows && rows->x && rows->ids && rows->w && contrib);
	const shoal_hparams *hp = &e->hp;
	const shoal_backend_ops *ops = e->ops;
	if (layer >= hp->n_layer || !e->layers[layer].moe)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "layer %u is not an MoE layer",
		                 layer);
	const engine__layer *L = &e->layers[layer];
	if (!L->exp_mapped)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "layer %u: its experts are not on backend %s here", layer,
		                 ops->name);
	uint32_t k = hp->n_expert_used, n = rows->n_rows, ne = hp->n_expert;
	uint32_t d = hp->n_embd, ff = hp->n_ff_exp;
	if (rows->k != k || n > e->cfg.max_rows)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%u rows of %u slots (this layer routes to %u, at most %u rows)",
		                 n, rows->k, k, e->cfg.max_rows);
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t j = 0; j < k; j++) {
			int32_t id = rows->ids[(size_t)r * k + j];
			if (id < 0 || (uint32_t)id >= ne ||
			    (j > 0 && id <= rows->ids[(size_t)r * k + j - 1]))
				return shoal_why(why, why_len, SHOAL_ERR_RANGE,
				                 "row %u: expert ids not ascending in [0, %u)", r,
				                 ne);
		}
	const uint8_t *own = e->expert_mask + (size_t)layer * ne;
	for (uint32_t x = 0; x < ne; x++) {
		if (!own[x] || (mask && !mask[x]))
			continue;
		/* gather the rows routed to expert x: (m, n_embd) */
		uint32_t m = 0;
		for (uint32_t r = 0; r < n; r++)
			for (uint32_t j = 0; j < k; j++)
				if (rows->ids[(size_t)r * k + j] == (int32_t)x) {
					memcpy(e->moe_x + (size_t)m * d, rows->x + (size_t)r * d,
					       d * sizeof(float));
					e->moe_slot[m++] = r * k + j;
				}
		if (!m)
			continue;
		shoal_backend_mat w[2] = {L->gate_exp, L->up_exp};
		w[0].data = (const uint8_t *)L->gate_exp.data + (size_t)x * L->gate_exp_stride;
		w[1].data = (const uint8_t *)L->up_exp.data + (size_t)x * L->up_exp_stride;
		float *y[2] = {e->ff_g, e->ff_u}; /* (m, n_ff_exp) */
		size_t ldy[2] = {ff, ff};
		const float *xd = engine__to_dev(e, e->moe_xd, e->moe_x, (size_t)m * d);
		ops->matmul(e->bk, 2, w, xd, d, m, y, ldy);
		if (L->gate_exp_b)
			ops->add(e->bk, e->ff_g, ff, L->gate_exp_b + (size_t)x * ff, 0, ff, m);
		if (L->up_exp_b)
			ops->add(e->bk, e->ff_u, ff, L->up_exp_b + (size_t)x * ff, 0, ff, m);
		if (hp->swiglu_oai)
			ops->swiglu_oai(e->bk, e->ff_g, e->ff_u, (size_t)m * ff, hp->swiglu_alpha,
			                hp->swiglu_limit, e->ff_g);
		else
			ops->swiglu(e->bk, e->ff_g, e->ff_u, (size_t)m * ff, e->ff_g);
		shoal_backend_mat dn = L->down_exp;
		dn.data = (const uint8_t *)L->down_exp.data + (size_t)x * L->down_exp_stride;
		float *od = e->moe_xd; /* (m, n_embd), the gathered input is spent */
		size_t ld = d;
		ops->matmul(e->bk, 1, &dn, e->ff_g, ff, m, &od, &ld);
		if (L->down_exp_b)
			ops->add(e->bk, od, ld, L->down_exp_b + (size_t)x * d, 0, d, m);
		float *o = e->moe_x; /* its host view */
		engine__to_host(e, od, o, (size_t)m * d);
		for (uint32_t i = 0; i < m; i++) {
			float gw = rows->w[e->moe_slot[i]];
			float *c = contrib + (size_t)e->moe_slot[i] * d; /* (n_embd) */
			const float *oi = o + (size_t)i * d;             /* (n_embd) */
			for (uint32_t t = 0; t < d; t++)
				c[t] = oi[t] * gw;
		}
	}
	return SHOAL_OK;
}

void shoal_engine_moe_combine(uint32_t n_rows, uint32_t k, uint32_t n_embd, const float *contrib,
                              float *out)
{
	SHOAL_ASSERT((contrib && out) || n_rows == 0);
	for (uint32_t r = 0; r < n_rows; r++) {
		float *o = out + (size_t)r * n_embd;               /* (n_embd) */
		const float *c = contrib + (size_t)r * k * n_embd; /* (k, n_embd) */
		memcpy(o, c, n_embd * sizeof(float));
		for (uint32_t j = 1; j < k; j++)
			for (uint32_t t = 0; t < n_embd; t++)
				o[t] += c[(size_t)j * n_embd + t];
	}
}

/* The routed experts of a layer whose experts are all here, on e->xn into
 * e->tmp: routed on the host, then the backend's moe_ffn with the routing
 * written to the device (one small write; no read-back per expert). */
static void engine_moe_local(shoal_engine *e, uint32_t l, uint32_t n_rows)
{
	const engine__layer *L = &e->layers[l];
	const shoal_hparams *hp = &e->hp;
	uint32_t k = hp->n_expert_used;
	engine_route(e, l, n_rows, e->xn, e->moe_ids, e->moe_w);
	const int32_t *ids = e->moe_ids;
	const float *w = e->moe_w;
	if (!e->host_ok) {
		size_t n = (size_t)n_rows * k;
		e->ops->write(e->bk, e->moe_ids_d, e->moe_ids, n * sizeof(int32_t));
		e->ops->write(e->bk, e->moe_w_d, e->moe_w, n * sizeof(float));
		ids = e->moe_ids_d, w = e->moe_w_d;
	}
	shoal_backend_moe m = {
	    .n_rows = n_rows,
	    .k = k,
	    .n_expert = hp->n_expert,
	    .n_embd = hp->n_embd,
	    .n_ff = hp->n_ff_exp,
	    .gate = L->gate_exp,
	    .up = L->up_exp,
	    .down = L->down_exp,
	    .gate_stride = L->gate_exp_stride,
	    .up_stride = L->up_exp_stride,
	    .down_stride = L->down_exp_stride,
	    .x = e->xn,
	    .ldx = hp->n_embd,
	    .ids = ids,
	    .ids_host = e->moe_ids,
	    .w = w,
	    .out = e->tmp,
	    .ldo = hp->n_embd,
	    .scratch = e->moe_scr,
	};
	e->ops->moe_ffn(e->bk, &m);
}

/* The routed experts of a layer with experts elsewhere, on e->xn into
 * e->tmp: routing, the gather and the combine on the host (xn's rows
 * there), the remote experts' parts through the hook. */
static shoal_err engine_moe_remote(shoal_engine *e, uint32_t l, uint32_t n_rows, char *why,
                                   size_t why_len)
{
	const engine__layer *L = &e->layers[l];
	const uint32_t d = e->hp.n_embd;
	engine__to_host(e, e->xn, e->xn_h, (size_t)n_rows * d);
	shoal_err err = shoal_engine_moe_route(e, l, n_rows, e->xn_h, e->moe_ids, e->moe_w);
	if (err)
		return shoal_why(why, why_len, err, "layer %u: routing failed", l);
	shoal_moe_rows rows = {
	    .n_rows = n_rows,
	    .k = e->hp.n_expert_used,
	    .x = e->xn_h,
	    .ids = e->moe_ids,
	    .w = e->moe_w,
	};
	const shoal_engine_moe_hook *hook = &e->cfg.moe_hook;
	if (!L->all_local && hook->dispatch) {
		err = hook->dispatch(hook->ctx, l, &rows);
		if (err)
			return shoal_why(why, why_len, err, "layer %u: expert dispatch failed", l);
	}
	err = shoal_engine_moe_partial(e, l, &rows, NULL, e->moe_contrib, why, why_len);
	if (err)
		return err;
	if (!L->all_local) {
		err = hook->collect(hook->ctx, l, &rows, e->moe_contrib);
		if (err)
			return shoal_why(why, why_len, err, "layer %u: remote experts failed", l);
	}
	shoal_engine_moe_combine(n_rows, rows.k, d, e->moe_contrib, e->tmp_h);
	engine__to_dev(e, e->tmp, e->tmp_h, (size_t)n_rows * d);
	return SHOAL_OK;
}

shoal_err engine__moe_ffn(shoal_engine *e, uint32_t l, uint32_t n_rows, char *why, size_t why_len)
{
	const engine__layer *L = &e->layers[l];
	const uint32_t d = e->hp.n_embd;
	if (L->all_local && L->exp_mapped && !e->hp.swiglu_oai) {
		engine_moe_local(e, l, n_rows);
	} else {
		shoal_err err = engine_moe_remote(e, l, n_rows, why, why_len);
		if (err)
			return err;
	}
	if (L->shexp) {
		/* moe_xd is free: (n_rows, n_embd) */
		engine__ffn_swiglu(e, &L->gate_sh, &L->up_sh, &L->down_sh, e->hp.n_ff_shexp, n_rows,
		                   e->moe_xd);
		e->ops->add(e->bk, e->tmp, d, e->moe_xd, d, d, n_rows);
	}
	return SHOAL_OK;
}
