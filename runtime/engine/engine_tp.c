/*
 * runtime/engine/engine_tp.c: a tensor group's member (engine.h): its shares
 * of each layer, the layer's split steps and the all-gathers between them.
 *
 * Part: runtime/ (engine). Divisions: shares, slices, attention, dense FFN,
 * MoE FFN, head.
 *
 * Why it is exact: every output element of every matrix is one kernel dot
 * product over the whole input row, computed by one member with the same
 * kernel as the unsplit engine (a member's matrix is the unsplit matrix's
 * rows [first, first + count), the same bytes); per-head steps (norms, RoPE,
 * attention) do not look at other heads; the gathers only move bytes into
 * place. So each reassembled activation, and the replicated residual stream,
 * equals the unsplit engine's bit for bit. One layer, member m:
 *
 *   xn = rmsnorm(x) * attn_norm                      (replicated)
 *   q, k, v of m's KV heads and their query heads     (Wq, Wk, Wv rows)
 *   norms, RoPE, cache k, v (m's heads only), attention of m's heads
 *     (gpt-oss: their sinks, the layer's window)
 *   gather ATTN      -> att (n, q_dim)
 *   o = att Wo^T, m's columns; gather ATTN_OUT -> x += o (+ Wo's bias,
 *     replicated, gpt-oss)
 *   xn = rmsnorm(x) * ffn_norm                       (replicated)
 *   dense: h = silu(xn Wg^T) * (xn Wu^T), m's columns; gather FFN_ACT
 *          f = h Wd^T, m's columns; gather FFN_OUT  -> x += f
 *   MoE:   route (replicated); contributions of m's experts (with their
 *          biases and gpt-oss's clamped SwiGLU); gather MOE;
 *          combine in expert-id order, shared experts whole on every
 *          member                                    -> x += f
 * After the last layer, with split_head (every member has_head):
 *   xn = rmsnorm(x) * output_norm of the rows wanting logits (replicated)
 *   logits of m's vocab rows (head rows); gather HEAD to the root only
 * Without split_head the head is the unsplit engine's, and so is the
 * embedding always (has_embd). MLA (deepseek2): the latent cache is every
 * head's, so attention is not split: every member runs the whole layer's
 * attention (the unsplit engine's steps on the same replicated input: the
 * same bits) and keeps the whole cache; its FFN and experts are split as
 * above. The plan counts an MLA model's attention whole on each member
 * (models/manifest.c).
 */
#include "runtime/engine/engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/plan.h"

/* Members of a group at most: 256 (the plan's groups are bounded by its 64
 * peers considered for groups, with room to spare). */
#define ENGINE_TP_MAX 256

struct engine__tp {
	uint32_t n, me;
	uint64_t *w;       /* (n) weights */
	uint32_t *h0, *hn; /* (n) KV heads */
	uint32_t *e0, *en; /* (n) columns of n_embd (Wo, down) */
	uint32_t *f0, *fn; /* (n) columns of n_ff */
	uint32_t *x0, *xn; /* (n) experts */
	uint32_t *v0, *vn; /* (n) vocab rows of the head (split_head) */
	float *buf;        /* (max_rows, max(q_dim, n_ff, n_embd)) the slices of
	                      one gather, packed, member after member */
	float *mbuf;       /* (max_rows, k, n_embd) the same for MoE contributions */
	void **bufs;       /* (n) into buf or mbuf */
	size_t *len;       /* (n) bytes */
	bool split_head;   /* the head split by vocab rows */
	uint32_t root;     /* then the member that gets the logits */
	float *hbuf;       /* split_head: (max_rows, vn[me]) our logits, or on
	                      the root (max_rows, n_vocab - vn[root]) the
	                      others' slices packed in member order */
	shoal_engine_tp_link link;
};

/* ---- shares ------------------------------------------------------------------ */

void engine__tp_free(engine__tp *t)
{
	if (!t)
		return;
	free(t->w);
	free(t->h0);
	free(t->buf);
	free(t->hbuf);
	free(t->mbuf);
	free(t->bufs);
	free(t->len);
	free(t);
}

/* Columns [first, first + count) of dim in whole blocks of
 * SHOAL_PLAN_TP_COLS (the last block may be short). */
static void tp_cols(const engine__tp *t, uint32_t dim, uint32_t *first, uint32_t *count)
{
	uint32_t blocks = (dim + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS;
	shoal_plan_split(t->w, t->n, blocks, first, count);
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t a = first[i] * SHOAL_PLAN_TP_COLS,
		         b = (first[i] + count[i]) * SHOAL_PLAN_TP_COLS;
		first[i] = a > dim ? dim : a;
		count[i] = (b > dim ? dim : b) - first[i];
	}
}

shoal_err engine__tp_init(shoal_engine *e, char *why, size_t why_len)
{
	const shoal_engine_tp *c = &e->cfg.tp;
	const shoal_hparams *hp = &e->hp;
	if (c->n_members > ENGINE_TP_MAX || c->member >= c->n_members || !c->weights ||
	    !c->link.exchange)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "tensor member %u of %u: needs weights and an exchange, at most "
		                 "%u members",
		                 c->member, c->n_members, ENGINE_TP_MAX);
	if (e->cfg.expert_mask)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "a tensor member's experts are its share: no expert mask");
	if (c->split_head && (!e->cfg.has_head || c->head_root >= c->n_members || !c->link.gather))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "a split head needs has_head, a root member below %u and a gather",
		                 c->n_members);
	unsigned __int128 tot = 0;
	for (uint32_t i = 0; i < c->n_members; i++)
		tot += c->weights[i];
	if (!tot)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "tensor shares weigh nothing");
	engine__tp *t = calloc(1, sizeof *t);
	if (!t)
		return SHOAL_ERR_NOMEM;
	e->tp = t;
	uint32_t n = t->n = c->n_members;
	t->me = c->member;
	t->link = c->link;
	t->w = malloc(n * sizeof *t->w);
	t->h0 = malloc(10 * (size_t)n * sizeof *t->h0); /* h0 hn e0 en f0 fn x0 xn v0 vn */
	t->bufs = calloc(n, sizeof *t->bufs);
	t->len = calloc(n, sizeof *t->len);
	uint32_t R = e->cfg.max_rows, wide = hp->n_embd;
	if (e->q_dim > wide)
		wide = e->q_dim;
	if (hp->n_ff > wide)
		wide = hp->n_ff;
	t->buf = calloc((size_t)R * wide, sizeof *t->buf);
	if (hp->n_expert)
		t->mbuf = calloc((size_t)R * hp->n_expert_used * hp->n_embd, sizeof *t->mbuf);
	if (!t->w || !t->h0 || !t->bufs || !t->len || !t->buf || (hp->n_expert && !t->mbuf))
		return SHOAL_ERR_NOMEM; /* the engine's destructor frees t */
	memcpy(t->w, c->weights, n * sizeof *t->w);
	t->hn = t->h0 + n;
	t->e0 = t->hn + n;
	t->en = t->e0 + n;
	t->f0 = t->en + n;
	t->fn = t->f0 + n;
	t->x0 = t->fn + n;
	t->xn = t->x0 + n;
	t->v0 = t->xn + n;
	t->vn = t->v0 + n;
	shoal_plan_split(t->w, n, hp->n_head_kv, t->h0, t->hn);
	tp_cols(t, hp->n_embd, t->e0, t->en);
	tp_cols(t, hp->n_ff, t->f0, t->fn);
	if (hp->n_expert) {
		shoal_plan_split(t->w, n, hp->n_expert, t->x0, t->xn);
		for (uint32_t l = 0; l < hp->n_layer; l++)
			for (uint32_t x = 0; x < hp->n_expert; x++)
				e->expert_mask[(size_t)l * hp->n_expert + x] =
				    x >= t->x0[t->me] && x < t->x0[t->me] + t->xn[t->me];
	}
	if ((t->split_head = c->split_head)) {
		t->root = c->head_root;
		tp_cols(t, hp->n_vocab, t->v0, t->vn);
		uint32_t w = t->me == t->root ? hp->n_vocab - t->vn[t->root] : t->vn[t->me];
		if (!(t->hbuf = calloc((size_t)R * (w ? w : 1), sizeof *t->hbuf)))
			return SHOAL_ERR_NOMEM;
	}
	if (!hp->mla) /* MLA: the whole latent cache on every member */
		e->kv_cache_dim = t->hn[t->me] * hp->head_dim;
	return SHOAL_OK;
}

/* ---- slices ------------------------------------------------------------------ */

/* One all-gather of an (n, dim) activation split by columns first/count
 * (scaled by mul: heads -> floats). Member i's slice is packed, (n,
 * count[i] * mul), at buf + n * first[i] * mul: the member's own was
 * written there by its step. Exchange, then write each member's slice into
 * out (n, ld) at its columns, in member order. */
static shoal_err tp_gather(shoal_engine *e, uint32_t il, shoal_engine_tp_round round, uint32_t n,
                           const uint32_t *first, const uint32_t *count, uint32_t mul, float *out,
                           size_t ld, char *why, size_t why_len)
{
	engine__tp *t = e->tp;
	for (uint32_t i = 0; i < t->n; i++) {
		t->bufs[i] = t->buf + (size_t)n * first[i] * mul;
		t->len[i] = (size_t)n * count[i] * mul * sizeof(float);
	}
	shoal_err err = t->link.exchange(t->link.ctx, il, round, t->bufs, t->len);
	if (err)
		return shoal_why(why, why_len, err, "layer %u: tensor exchange %d failed", il,
		                 (int)round);
	for (uint32_t i = 0; i < t->n; i++) {
		size_t w = (size_t)count[i] * mul;
		const float *src = t->bufs[i]; /* (n, w) */
		for (uint32_t r = 0; r < n && w; r++)
			memcpy(out + (size_t)r * ld + (size_t)first[i] * mul, src + (size_t)r * w,
			       w * sizeof(float));
	}
	return SHOAL_OK;
}

/* ---- attention --------------------------------------------------------------- */

shoal_err engine__tp_attn(shoal_engine *e, uint32_t il, const shoal_engine_batch *b, char *why,
                          size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[il];
	engine__tp *t = e->tp;
	uint32_t n = b->n_rows, me = t->me;
	uint32_t hd = hp->head_dim, G = hp->n_head / hp->n_head_kv;

	ops->rms_norm(e->bk, e->x, hp->n_embd, L->attn_norm, hp->n_embd, n, hp->rms_eps, e->xn,
	              hp->n_embd);
	uint32_t qf[ENGINE_TP_MAX], qc[ENGINE_TP_MAX];
	for (uint32_t i = 0; i < t->n; i++) {
		qf[i] = t->h0[i] * G; /* query heads */
		qc[i] = t->hn[i] * G;
	}
	/* this member's heads into its packed slice, (n, qc[me] x head_dim) */
	if (t->hn[me])
		engine__attn_heads(e, il, b, t->h0[me], t->hn[me],
		                   t->buf + (size_t)n * qf[me] * hd);
	shoal_err err =
	    tp_gather(e, il, SHOAL_ENGINE_TP_ATTN, n, qf, qc, hd, e->att, e->q_dim, why, why_len);
	if (err)
		return err;
	uint32_t ec = t->en[me];
	if (ec) {
		shoal_backend_mat wo = engine__mat_rows(L->wo, t->e0[me], ec);
		float *o = t->buf + (size_t)n * t->e0[me]; /* (n, ec) packed */
		size_t ld = ec;
		ops->matmul(e->bk, 1, &wo, e->att, e->q_dim, n, &o, &ld);
	}
	err = tp_gather(e, il, SHOAL_ENGINE_TP_ATTN_OUT, n, t->e0, t->en, 1, e->tmp, hp->n_embd,
	                why, why_len);
	if (err)
		return err;
	if (L->bo) /* gpt-oss: Wo's bias on the gathered rows, as unsplit */
		ops->add(e->bk, e->tmp, hp->n_embd, L->bo, 0, hp->n_embd, n);
	ops->add(e->bk, e->x, hp->n_embd, e->tmp, hp->n_embd, hp->n_embd, n);
	return SHOAL_OK;
}

/* ---- dense FFN --------------------------------------------------------------- */

shoal_err engine__tp_ffn(shoal_engine *e, uint32_t il, uint32_t n, char *why, size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	const engine__layer *L = &e->layers[il];
	engine__tp *t = e->tp;
	uint32_t me = t->me, ff = e->hp.n_ff, d = e->hp.n_embd;
	uint32_t fc = t->fn[me], ec = t->en[me];
	if (fc) {
		shoal_backend_mat w[2] = {engine__mat_rows(L->gate, t->f0[me], fc),
		                          engine__mat_rows(L->up, t->f0[me], fc)};
		float *y[2] = {e->ff_g, e->ff_u}; /* (n, fc) */
		size_t ldy[2] = {fc, fc};
		ops->matmul(e->bk, 2, w, e->xn, d, n, y, ldy);
		ops->swiglu(e->bk, e->ff_g, e->ff_u, (size_t)n * fc,
		            t->buf + (size_t)n * t->f0[me]);
	}
	shoal_err err = tp_gather(e, il, SHOAL_ENGINE_TP_FFN_ACT, n, t->f0, t->fn, 1, e->ff_g, ff,
	                          why, why_len);
	if (err)
		return err;
	if (ec) {
		shoal_backend_mat dn = engine__mat_rows(L->down, t->e0[me], ec);
		float *o = t->buf + (size_t)n * t->e0[me]; /* (n, ec) packed */
		size_t ld = ec;
		ops->matmul(e->bk, 1, &dn, e->ff_g, ff, n, &o, &ld);
	}
	return tp_gather(e, il, SHOAL_ENGINE_TP_FFN_OUT, n, t->e0, t->en, 1, e->tmp, d, why,
	                 why_len);
}

/* ---- MoE FFN ----------------------------------------------------------------- */

/* The member owning expert x. */
static uint32_t tp_expert_owner(const engine__tp *t, int32_t x)
{
	uint32_t i = 0;
	while (i + 1 < t->n && (uint32_t)x >= t->x0[i] + t->xn[i])
		i++;
	return i;
}

shoal_err engine__tp_moe(shoal_engine *e, uint32_t il, uint32_t n, char *why, size_t why_len)
{
	engine__tp *t = e->tp;
	uint32_t k = e->hp.n_expert_used, d = e->hp.n_embd;
	shoal_err err = shoal_engine_moe_route(e, il, n, e->xn, e->moe_ids, e->moe_w);
	if (err)
		return shoal_why(why, why_len, err, "layer %u: routing failed", il);
	shoal_moe_rows rows = {.n_rows = n, .k = k, .x = e->xn, .ids = e->moe_ids, .w = e->moe_w};
	err = shoal_engine_moe_partial(e, il, &rows, NULL, e->moe_contrib, why, why_len);
	if (err)
		return err;
	/* slots per member (the routing is replicated: every member counts
	 * alike), then this member's contributions packed in slot order */
	size_t at = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		size_t c = 0;
		for (size_t s = 0; s < (size_t)n * k; s++)
			c += tp_expert_owner(t, e->moe_ids[s]) == i;
		t->bufs[i] = t->mbuf + at * d;
		t->len[i] = c * d * sizeof(float);
		at += c;
	}
	float *mine = t->bufs[t->me];
	for (size_t s = 0, j = 0; s < (size_t)n * k; s++)
		if (tp_expert_owner(t, e->moe_ids[s]) == t->me)
			memcpy(mine + j++ * d, e->moe_contrib + s * d, d * sizeof(float));
	err = t->link.exchange(t->link.ctx, il, SHOAL_ENGINE_TP_MOE, t->bufs, t->len);
	if (err)
		return shoal_why(why, why_len, err, "layer %u: tensor exchange %d failed", il,
		                 (int)SHOAL_ENGINE_TP_MOE);
	for (uint32_t i = 0; i < t->n; i++) {
		if (i == t->me)
			continue;
		const float *src = t->bufs[i];
		for (size_t s = 0, j = 0; s < (size_t)n * k; s++)
			if (tp_expert_owner(t, e->moe_ids[s]) == i)
				memcpy(e->moe_contrib + s * d, src + j++ * d, d * sizeof(float));
	}
	shoal_engine_moe_combine(n, k, d, e->moe_contrib, e->tmp);
	const engine__layer *L = &e->layers[il];
	if (L->shexp) {
		/* shared experts: whole on every member (moe_x is free again) */
		engine__ffn_swiglu(e, &L->gate_sh, &L->up_sh, &L->down_sh, e->hp.n_ff_shexp, n,
		                   e->moe_x);
		e->ops->add(e->bk, e->tmp, d, e->moe_x, d, d, n);
	}
	return SHOAL_OK;
}

/* ---- head -------------------------------------------------------------------- */

bool engine__tp_split_head(const shoal_engine *e)
{
	return e->tp && e->tp->split_head;
}

bool engine__tp_needs_logits(const shoal_engine *e)
{
	return !engine__tp_split_head(e) || e->tp->me == e->tp->root;
}

shoal_err engine__tp_head(shoal_engine *e, uint32_t n, float *logits, char *why, size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	engine__tp *t = e->tp;
	uint32_t me = t->me, root = t->root, V = e->hp.n_vocab, d = e->hp.n_embd;
	/* our rows: straight into the logits on the root, packed elsewhere */
	if (t->vn[me]) {
		shoal_backend_mat w = engine__mat_rows(e->head, t->v0[me], t->vn[me]);
		float *y = me == root ? logits + t->v0[me] : t->hbuf;
		size_t ld = me == root ? V : t->vn[me];
		ops->matmul(e->bk, 1, &w, e->xn, d, n, &y, &ld);
	}
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t at = t->v0[i] > t->v0[root] ? t->v0[i] - t->vn[root] : t->v0[i];
		t->bufs[i] = me == root ? t->hbuf + (size_t)n * at : t->hbuf;
		t->len[i] = (size_t)n * t->vn[i] * sizeof(float);
	}
	shoal_err err = t->link.gather(t->link.ctx, root, t->bufs, t->len);
	if (err)
		return shoal_why(why, why_len, err, "the head's gather failed");
	if (me != root)
		return SHOAL_OK;
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t w = t->vn[i];
		const float *src = t->bufs[i]; /* (n, w) */
		for (uint32_t r = 0; i != root && r < n && w; r++)
			memcpy(logits + (size_t)r * V + t->v0[i], src + (size_t)r * w,
			       w * sizeof(float));
	}
	return SHOAL_OK;
}
