/*
 * runtime/engine/engine_steps.c: the steps of a layer that the engine's other
 * files share: a matrix's row slice, the cache store with attention, the
 * attention of a range of KV heads, and the SwiGLU FFN.
 *
 * Part: runtime/ (engine). Just above engine_kv.c (the cache's layout):
 * engine.c (the layer loop), engine_moe.c (shared experts) and engine_tp.c
 * (a tensor member's slices) call into it, and it calls none of them.
 * Divisions: matrices and the cache, attention, FFN.
 */
#include "runtime/engine/engine_impl.h"

/* ---- host and device ---------------------------------------------------------- */

const float *engine__to_dev(shoal_engine *e, float *dev, const float *host, size_t n)
{
	if (e->host_ok)
		return host;
	e->ops->write(e->bk, dev, host, n * sizeof(float));
	return dev;
}

void engine__to_host(shoal_engine *e, const float *dev, float *host, size_t n)
{
	if (dev != host)
		e->ops->read(e->bk, dev, host, n * sizeof(float));
}

/* ---- matrices and the cache -------------------------------------------------- */

shoal_backend_mat engine__mat_rows(shoal_backend_mat m, uint32_t first, uint32_t count)
{
	m.data = (const uint8_t *)m.data + (size_t)first * m.row_bytes;
	m.n_out = count;
	return m;
}

/* ---- attention --------------------------------------------------------------- */

void engine__attend(shoal_engine *e, const shoal_engine_batch *b, uint32_t li, uint32_t n_head,
                    uint32_t n_head_kv, uint32_t head_dim, const float *q, const float *sinks,
                    uint32_t window, float *out)
{
	uint32_t n = b->n_rows, kvd = e->kv_cache_dim, cap = e->kv_cap[li];
	uint32_t ring = cap < e->cfg.n_ctx ? cap : 0; /* a sliding layer's ring */
	size_t head_ld = (size_t)cap * head_dim;
	/* every row's K/V goes in before any row attends: a prefill chunk's
	 * row at position p sees the chunk's rows at positions < p. A plane
	 * is (n_head_kv, n_ctx or ring, head_dim): attention reads one head's
	 * positions as one stream (a ring's as at most two) */
	const shoal_dtype kt = e->cfg.kv_type;
	const uint32_t *at = b->pos; /* where each row's K/V goes */
	for (uint32_t r = 0; r < n; r++) {
		e->krow[r] = engine__kv_plane(e, b->session[r], li, 0);
		e->vrow[r] =
		    e->kv_planes == 2 ? engine__kv_plane(e, b->session[r], li, 1) : e->krow[r];
		e->n_kv[r] = b->pos[r] + 1;
		if (ring)
			e->kv_slot[r] = b->pos[r] % ring;
	}
	if (ring)
		at = e->kv_slot;
	e->ops->kv_store(e->bk, kt, e->k, kvd, n, n_head_kv, head_dim, e->krow, at, head_ld);
	if (e->kv_planes == 2)
		e->ops->kv_store(e->bk, kt, e->v, kvd, n, n_head_kv, head_dim, e->vrow, at,
		                 head_ld);
	/* a sliding layer's row sees its window, positions [first, pos]: a
	 * ring reads them from slot first % ring on (engine_kv.c: the ring
	 * still holds them); a whole plane from the window's first position */
	for (uint32_t r = 0; ring && r < n; r++) {
		uint32_t first = b->pos[r] + 1 > window ? b->pos[r] + 1 - window : 0;
		e->kv_first[r] = first;
		e->n_kv[r] -= first;
	}
	for (uint32_t r = 0; !ring && window && r < n; r++) {
		uint32_t first = b->pos[r] + 1 > window ? b->pos[r] + 1 - window : 0;
		size_t skip = (size_t)first * head_dim * e->kv_elt;
		e->krow[r] = (uint8_t *)e->krow[r] + skip;
		if (e->kv_planes == 2)
			e->vrow[r] = (uint8_t *)e->vrow[r] + skip;
		else
			e->vrow[r] = e->krow[r];
		e->n_kv[r] -= first;
	}
	shoal_backend_attn a = {
	    .n_rows = n,
	    .n_head = n_head,
	    .n_head_kv = n_head_kv,
	    .head_dim = head_dim,
	    .scale = e->kq_scale,
	    .q = q,
	    .kv_type = kt,
	    .k = (const void *const *)e->krow,
	    .v = (const void *const *)e->vrow,
	    .head_ld = head_ld,
	    .pos_ld = head_dim,
	    .n_kv = e->n_kv,
	    .out = out,
	    .sinks = sinks,
	    .ring = ring,
	    .first = ring ? e->kv_first : NULL,
	};
	e->ops->attention(e->bk, &a);
}

void engine__attn_heads(shoal_engine *e, uint32_t il, const shoal_engine_batch *b, uint32_t h0,
                        uint32_t hn, float *out)
{
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[il];
	uint32_t n = b->n_rows, li = il - e->cfg.layer_begin, G = hp->n_head / hp->n_head_kv;
	uint32_t hd = hp->head_dim, nq = hn * G, qd = nq * hd, kvd = hn * hd;
	uint32_t q0 = h0 * G * hd, k0 = h0 * hd; /* the heads' first columns */

	shoal_backend_mat w[3] = {engine__mat_rows(L->wq, q0, qd), engine__mat_rows(L->wk, k0, kvd),
	                          engine__mat_rows(L->wv, k0, kvd)};
	float *y[3] = {e->q, e->k, e->v};
	size_t ldy[3] = {qd, kvd, kvd};
	ops->matmul(e->bk, 3, w, e->xn, hp->n_embd, n, y, ldy);
	if (L->bq)
		ops->add(e->bk, e->q, qd, L->bq + q0, 0, qd, n);
	if (L->bk)
		ops->add(e->bk, e->k, kvd, L->bk + k0, 0, kvd, n);
	if (L->bv)
		ops->add(e->bk, e->v, kvd, L->bv + k0, 0, kvd, n);
	if (L->q_norm)
		ops->rms_norm(e->bk, e->q, hd, L->q_norm, hd, n * nq, hp->rms_eps, e->q, hd);
	if (L->k_norm)
		ops->rms_norm(e->bk, e->k, hd, L->k_norm, hd, n * hn, hp->rms_eps, e->k, hd);
	bool neox = hp->rope_type == SHOAL_ROPE_NEOX;
	ops->rope(e->bk, e->q, qd, n, nq, hd, hp->n_rot, b->pos, e->rope_cs, neox);
	ops->rope(e->bk, e->k, kvd, n, hn, hd, hp->n_rot, b->pos, e->rope_cs, neox);
	engine__attend(e, b, li, nq, hn, hd, e->q, L->sinks ? L->sinks + (size_t)h0 * G : NULL,
	               L->window, out);
}

/* ---- FFN --------------------------------------------------------------------- */

void engine__ffn_swiglu(shoal_engine *e, const shoal_backend_mat *gate, const shoal_backend_mat *up,
                        const shoal_backend_mat *down, uint32_t ff, uint32_t n, float *out)
{
	const shoal_backend_ops *ops = e->ops;
	shoal_backend_mat w[2] = {*gate, *up};
	float *y[2] = {e->ff_g, e->ff_u};
	size_t ldy[2] = {ff, ff};
	ops->matmul(e->bk, 2, w, e->xn, e->hp.n_embd, n, y, ldy);
	ops->swiglu(e->bk, e->ff_g, e->ff_u, (size_t)n * ff, e->ff_g);
	size_t ld_out = e->hp.n_embd;
	ops->matmul(e->bk, 1, down, e->ff_g, ff, n, &out, &ld_out);
}
