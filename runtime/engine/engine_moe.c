/*
 * runtime/engine/engine_moe.c: the mixture-of-experts FFN: routing, the per-expert
 * contributions (locally or through the hook for remote experts) and their
 * fixed-order combine.
 *
 * Part: runtime/ (engine). Semantics as the reference engine:
 *   p = softmax(x Wr^T) over all n_expert (F32, sum in double)
 *   top-k of p (ties: lower expert id; chosen by the logits, below),
 *   w = p[top-k]
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
 * The experts are chosen by the logits themselves where there is no
 * selection bias and no groups (softmax and sigmoid keep their order, and
 * every backend reads the same bits), else by p + bias (backend.h's
 * shoal_backend_route).
 *
 * Where it runs: the router's product on the backend, then its moe_route
 * (ABI 8: the choice and the weights on the device), or, for a backend
 * without it, one read of the logits and the same row on the host
 * (backend_host.c's shoal_backend_route_row); the routed experts of a
 * layer whose experts are all here as one backend moe_ffn fed by the
 * device's routing without a read-back (a batch of more than
 * SHOAL_ENGINE_MOE_PLAN_ROWS reads the ids back for the op's plan), with
 * gpt-oss's biases and clamp where the backend supports MOE_BIAS
 * (backend.h says the op adds the terms as moe_combine does, so the tokens
 * are those of the per-expert path); a layer with remote experts, or
 * gpt-oss's on a backend without MOE_BIAS, per expert here
 * (shoal_engine_moe_partial) plus the hook, combined on the host, from
 * routing read back to the host.
 */
#include "runtime/engine/engine_impl.h"

#include <math.h>
#include <string.h>

#include "base/assert.h"

/* The router's product of rows n_rows of xd (a device address, (n_rows,
 * n_embd)), its bias added, as moe_route takes it: into r, logits in
 * moe_lg_d (device), ids and w where the caller says. */
static void engine_route_logits(shoal_engine *e, uint32_t layer, uint32_t n_rows, const float *xd,
                                int32_t *ids, float *w, shoal_backend_route *r)
{
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[layer];
	float *lg_d = e->moe_lg_d; /* (n_rows, n_expert) */
	size_t ld = hp->n_expert;
	e->ops->matmul(e->bk, 1, &L->router, xd, hp->n_embd, n_rows, &lg_d, &ld);
	if (L->router_b)
		e->ops->add(e->bk, lg_d, ld, L->router_b, 0, hp->n_expert, n_rows);
	*r = (shoal_backend_route){
	    .n_rows = n_rows,
	    .n_expert = hp->n_expert,
	    .k = hp->n_expert_used,
	    .gating = hp->gating == SHOAL_MOE_GATING_SIGMOID ? SHOAL_BACKEND_GATING_SIGMOID
	              : hp->gating == SHOAL_MOE_GATING_SOFTMAX_TOPK
	                  ? SHOAL_BACKEND_GATING_SOFTMAX_TOPK
	                  : SHOAL_BACKEND_GATING_SOFTMAX,
	    .n_group = hp->n_expert_group > 1 ? hp->n_expert_group : 0,
	    .n_group_used = hp->n_expert_group > 1 ? hp->n_expert_group_used : 0,
	    .norm = hp->expert_weights_norm,
	    .scale = hp->expert_weights_scale,
	    .logits = lg_d,
	    .ld = ld,
	    .bias = L->exp_probs_b_d,
	    .ids = ids,
	    .w = w,
	};
}

/* The routing on the host, for a backend without moe_route: the logits
 * read once, p by expf with the sum in double (a NaN's p 0, as the CPU's
 * softmax has it), then the contract's row (backend_host.c). */
static void engine_route_host(shoal_engine *e, uint32_t layer, shoal_backend_route *r)
{
	uint32_t ne = r->n_expert;
	r->bias = e->layers[layer].exp_probs_b;     /* its host copy */
	float *lg = e->moe_logits, *p = e->moe_sel; /* host (n_rows, n_expert) */
	engine__to_host(e, r->logits, lg, (size_t)r->n_rows * ne);
	for (uint32_t i = 0; i < r->n_rows; i++) {
		const float *l = lg + (size_t)i * ne;
		float *pi = p + (size_t)i * ne, mx = -INFINITY;
		double sum = 0;
		for (uint32_t x = 0; x < ne; x++)
			mx = l[x] > mx ? l[x] : mx;
		for (uint32_t x = 0; x < ne; x++) {
			if (r->gating == SHOAL_BACKEND_GATING_SIGMOID)
				pi[x] = 1.0f / (1.0f + expf(-l[x]));
			else if (r->gating == SHOAL_BACKEND_GATING_SOFTMAX)
				sum += pi[x] = l[x] == l[x] ? expf(l[x] - mx) : 0.0f; /* NaN: 0 */
			else
				pi[x] = l[x];
		}
		if (r->gating == SHOAL_BACKEND_GATING_SOFTMAX)
			for (uint32_t x = 0; x < ne; x++)
				pi[x] = (float)(pi[x] / sum);
		shoal_backend_route_row(r, l, pi, e->moe_key, r->ids + (size_t)i * r->k,
		                        r->w + (size_t)i * r->k);
	}
}

/* Rows n_rows of xd (a device address, (n_rows, n_embd)) routed: ids and
 * w (host, (n_rows, k)). With the backend's moe_route, on the device and
 * the two small results read back (the CPU: written in place); else on
 * the host. */
static void engine_route(shoal_engine *e, uint32_t layer, uint32_t n_rows, const float *xd,
                         int32_t *ids, float *w)
{
	shoal_backend_route r;
	size_t n = (size_t)n_rows * e->hp.n_expert_used;
	if (!e->moe_route_op) {
		engine_route_logits(e, layer, n_rows, xd, ids, w, &r);
		engine_route_host(e, layer, &r);
	} else if (e->host_ok) {
		engine_route_logits(e, layer, n_rows, xd, ids, w, &r);
		e->ops->moe_route(e->bk, &r);
	} else {
		engine_route_logits(e, layer, n_rows, xd, e->moe_ids_d, e->moe_w_d, &r);
		e->ops->moe_route(e->bk, &r);
		e->ops->read(e->bk, e->moe_ids_d, ids, n * sizeof(int32_t));
		e->ops->read(e->bk, e->moe_w_d, w, n * sizeof(float));
	}
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
 * e->tmp: with the backend's moe_route, the routing made on the device
 * goes straight into moe_ffn (no read-back; only a batch of more than
 * SHOAL_ENGINE_MOE_PLAN_ROWS rows reads its ids back, for moe_ffn to plan
 * from); else routed on the host and written to the device. */
static void engine_moe_local(shoal_engine *e, uint32_t l, uint32_t n_rows)
{
	const engine__layer *L = &e->layers[l];
	const shoal_hparams *hp = &e->hp;
	uint32_t k = hp->n_expert_used;
	size_t n = (size_t)n_rows * k;
	const int32_t *ids = e->moe_ids, *ids_host = e->moe_ids;
	const float *w = e->moe_w;
	if (e->moe_route_op && !e->host_ok) {
		shoal_backend_route r;
		engine_route_logits(e, l, n_rows, e->xn, e->moe_ids_d, e->moe_w_d, &r);
		e->ops->moe_route(e->bk, &r);
		ids = e->moe_ids_d, w = e->moe_w_d, ids_host = NULL;
		if (n_rows > SHOAL_ENGINE_MOE_PLAN_ROWS) {
			e->ops->read(e->bk, e->moe_ids_d, e->moe_ids, n * sizeof(int32_t));
			ids_host = e->moe_ids;
		}
	} else {
		engine_route(e, l, n_rows, e->xn, e->moe_ids, e->moe_w);
		if (!e->host_ok) {
			e->ops->write(e->bk, e->moe_ids_d, e->moe_ids, n * sizeof(int32_t));
			e->ops->write(e->bk, e->moe_w_d, e->moe_w, n * sizeof(float));
			ids = e->moe_ids_d, w = e->moe_w_d;
		}
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
	    .ids_host = ids_host,
	    .w = w,
	    .out = e->tmp,
	    .ldo = hp->n_embd,
	    .scratch = e->moe_scr,
	    .gate_b = L->gate_exp_b,
	    .up_b = L->up_exp_b,
	    .down_b = L->down_exp_b,
	    .oai = hp->swiglu_oai,
	    .alpha = hp->swiglu_alpha,
	    .limit = hp->swiglu_limit,
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
	bool plain = !e->hp.swiglu_oai && !L->gate_exp_b && !L->up_exp_b && !L->down_exp_b;
	if (L->all_local && L->exp_mapped && (plain || e->moe_bias_op)) {
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
