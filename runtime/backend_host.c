/*
 * runtime/backend_host.c: host code that more than one backend room shares
 * (backend.h declares it): the MoE router's top-k selection, which the CPU
 * backend runs on its rows and the Vulkan backend on rows it read back, so
 * that both choose the same experts; and moe_ffn for a backend whose
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
		ops->swiglu(b, g, u, (size_t)n * ff, g);
		shoal_backend_mat dn = m->down;
		dn.data = (const uint8_t *)m->down.data + (size_t)x * m->down_stride;
		size_t ld = d;
		ops->matmul(b, 1, &dn, g, ff, n, &xg, &ld);
		moe_scatter(m, (int32_t)x, xg);
	}
}
