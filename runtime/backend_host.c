/*
 * runtime/backend_host.c: host code that more than one backend room shares
 * (backend.h declares it): the MoE router's top-k selection, which the CPU
 * backend runs on its rows and the Vulkan backend on rows it read back, so
 * that both choose the same experts; one row of moe_route (the CPU
 * backend's, and the engine's when a backend has no moe_route); and moe_ffn for a backend whose
 * device addresses are host pointers, through its own matmul and swiglu.
 *
 * Part: runtime/ (the interface between engine/ and the backend rooms).
 */
#include "runtime/backend.h"

#include <math.h>
#include <string.h>

void shoal_backend_top_k_rows(const float *x, uint32_t n, uint32_t n_rows, size_t ld, uint32_t k,
                              int32_t *ids, float *vals)
{
	for (uint32_t r = 0; r < n_rows; r++) {
		const float *p = x + (size_t)r * ld;
		int32_t *id = ids + (size_t)r * k;
		float *val = vals + (size_t)r * k;
		for (uint32_t j = 0; j < k; j++) {
			int32_t best = -1;
			float bv = -INFINITY;
			for (uint32_t i = 0; i < n; i++) {
				bool taken = false;
				for (uint32_t q = 0; q < j && !taken; q++)
					taken = id[q] == (int32_t)i;
				float v = p[i] != p[i] ? -INFINITY : p[i];
				if (!taken && (best < 0 || v > bv)) {
					best = (int32_t)i;
					bv = v;
				}
			}
			id[j] = best;
			val[j] = p[best];
		}
	}
}

/* Renormalisation floor: the reference clamps the weight sum at 2^-14
 * (6.1035e-5, the smallest normal half float) to avoid dividing by ~0. */
#define ROUTE_WSUM_MIN 6.103515625e-5f

/* The selection keys of a row with a bias or groups: sel = p + bias, then
 * the experts outside the best groups set to -inf (ties to the lower
 * group). */
static void route_select(const shoal_backend_route *r, const float *p, float *sel)
{
	uint32_t ne = r->n_expert, ng = r->n_group;
	for (uint32_t x = 0; x < ne; x++)
		sel[x] = r->bias ? p[x] + r->bias[x] : p[x];
	if (ng < 2)
		return;
	uint32_t per = ne / ng;
	float gs[SHOAL_BACKEND_ROUTE_MAX_GROUPS]; /* (n_group) */
	uint8_t keep[SHOAL_BACKEND_ROUTE_MAX_GROUPS] = {0};
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
	for (uint32_t u = 0; u < r->n_group_used; u++) {
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

bool shoal_backend_route_sized(const shoal_backend_route *r)
{
	return r->n_expert <= SHOAL_BACKEND_ROUTE_MAX_EXPERT && r->k >= 1 && r->k <= r->n_expert &&
	       r->k <= SHOAL_BACKEND_ROUTE_MAX_K && r->n_group <= SHOAL_BACKEND_ROUTE_MAX_GROUPS;
}

void shoal_backend_route_row(const shoal_backend_route *r, const float *lg, const float *p,
                             float *sel, int32_t *ids, float *w)
{
	uint32_t k = r->k;
	const float *key = lg;
	if (r->bias || r->n_group >= 2) {
		route_select(r, p, sel);
		key = sel;
	}
	shoal_backend_top_k_rows(key, r->n_expert, 1, r->n_expert, k, ids, w);
	if (r->gating == SHOAL_BACKEND_GATING_SOFTMAX_TOPK) {
		/* the softmax of the k chosen logits, best first (w[0] the
		 * largest), the sum in double */
		double s = 0;
		float m = lg[ids[0]];
		for (uint32_t j = 0; j < k; j++) {
			w[j] = expf(lg[ids[j]] - m);
			s += (double)w[j];
		}
		for (uint32_t j = 0; j < k; j++)
			w[j] = (float)((double)w[j] / s);
	} else {
		for (uint32_t j = 0; j < k; j++)
			w[j] = p[ids[j]];
	}
	if (r->norm) {
		double s = 0;
		for (uint32_t j = 0; j < k; j++)
			s += w[j];
		float fs = (float)s;
		if (fs < ROUTE_WSUM_MIN)
			fs = ROUTE_WSUM_MIN;
		for (uint32_t j = 0; j < k; j++)
			w[j] /= fs;
	}
	if (r->scale != 1.0f)
		for (uint32_t j = 0; j < k; j++)
			w[j] *= r->scale;
	/* the k slots sorted by expert id (insertion sort: k is small) */
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

/* The rows routed to expert x, gathered in row order into xg (m, n_embd):
 * m. */
static uint32_t moe_gather(const shoal_backend_moe *m, int32_t x, float *xg)
{
	uint32_t n = 0;
	for (uint32_t r = 0; r < m->n_rows; r++)
		for (uint32_t j = 0; j < m->k; j++)
			if (m->ids[(size_t)r * m->k + j] == x)
				memcpy(xg + (size_t)n++ * m->n_embd, m->x + (size_t)r * m->ldx,
				       m->n_embd * sizeof(float));
	return n;
}

/* Expert x's outputs o (gathered rows, n_embd) weighed into out: the
 * product rounded to F32 first (in place in o), then added, or stored for
 * a row's slot 0 (the slots' ascending ids put expert x's term after the
 * terms of the row's earlier slots). */
static void moe_scatter(const shoal_backend_moe *m, int32_t x, float *o)
{
	uint32_t i = 0, d = m->n_embd;
	for (uint32_t r = 0; r < m->n_rows; r++)
		for (uint32_t j = 0; j < m->k; j++) {
			size_t s = (size_t)r * m->k + j;
			if (m->ids[s] != x)
				continue;
			float gw = m->w[s], *oi = o + (size_t)i++ * d; /* (n_embd) */
			float *y = m->out + (size_t)r * m->ldo;        /* (n_embd) */
			for (uint32_t t = 0; t < d; t++)
				oi[t] *= gw;
			if (j == 0)
				memcpy(y, oi, d * sizeof(float));
			else
				for (uint32_t t = 0; t < d; t++)
					y[t] += oi[t];
		}
}

void shoal_backend_moe_ffn_host(shoal_backend *b, const shoal_backend_ops *ops,
                                const shoal_backend_moe *m)
{
	uint32_t d = m->n_embd, ff = m->n_ff;
	/* scratch: the gathered rows (then their down products), gate, up */
	float *xg = m->scratch;                /* (n_rows, n_embd) */
	float *g = xg + (size_t)m->n_rows * d; /* (n_rows, n_ff) */
	float *u = g + (size_t)m->n_rows * ff; /* (n_rows, n_ff) */
	for (uint32_t x = 0; x < m->n_expert; x++) {
		uint32_t n = moe_gather(m, (int32_t)x, xg);
		if (!n)
			continue;
		shoal_backend_mat w[2] = {m->gate, m->up};
		w[0].data = (const uint8_t *)m->gate.data + (size_t)x * m->gate_stride;
		w[1].data = (const uint8_t *)m->up.data + (size_t)x * m->up_stride;
		float *y[2] = {g, u};
		size_t ldy[2] = {ff, ff};
		ops->matmul(b, 2, w, xg, d, n, y, ldy);
		if (m->gate_b)
			ops->add(b, g, ff, m->gate_b + (size_t)x * ff, 0, ff, n);
		if (m->up_b)
			ops->add(b, u, ff, m->up_b + (size_t)x * ff, 0, ff, n);
		if (m->oai)
			ops->swiglu_oai(b, g, u, (size_t)n * ff, m->alpha, m->limit, g);
		else
			ops->swiglu(b, g, u, (size_t)n * ff, g);
		shoal_backend_mat dn = m->down;
		dn.data = (const uint8_t *)m->down.data + (size_t)x * m->down_stride;
		size_t ld = d;
		ops->matmul(b, 1, &dn, g, ff, n, &xg, &ld);
		if (m->down_b)
			ops->add(b, xg, d, m->down_b + (size_t)x * d, 0, d, n);
		moe_scatter(m, (int32_t)x, xg);
	}
}
