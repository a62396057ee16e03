/*
 * runtime/engine/engine.c: the engine (see engine.h): creation, session slots and
 * the layer loop of shoal_engine_run.
 *
 * Part: runtime/ (engine). Divisions: weights, creation, sessions, the run
 * (checks, attention, the loop). The MoE FFN is engine_moe.c, a tensor
 * member's split steps engine_tp.c, and the steps all three share (a range
 * of heads' attention, the SwiGLU FFN) engine_steps.c.
 */
#include "runtime/engine/engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

/*
 * One layer, for the n rows of a batch (the reference engine's order):
 *   xn = rmsnorm(x) * attn_norm
 *   q, k, v = xn Wq^T (+bq), xn Wk^T (+bk), xn Wv^T (+bv)
 *   q, k = rmsnorm per head * q_norm, k_norm           (qwen3, qwen3moe)
 *   q, k = rope(q, k, pos)                             (norm or neox pairs)
 *   cache[session][pos] = k, v;  a = attention(q, cache[session][0..pos])
 *   x += a Wo^T
 *   xn = rmsnorm(x) * ffn_norm
 *   x += down(silu(gate xn) * up xn)   or the MoE FFN
 * MLA layers (deepseek2) replace q, k, v and the cache by the latent form:
 *   q = (rmsnorm(xn Wq_a^T) * q_a_norm) Wq_b^T   (or xn Wq^T), per head
 *       [nope | rope]
 *   [c | kr] = xn Wkv_a^T; c = rmsnorm(c) * kv_a_norm (the latent)
 *   cache[session][pos] = [rope(kr) | c]   one row, no per-head K or V
 *   per head: query [rope(q_rope) | Wk_b q_nope] over the rows gives
 *   scores and a latent mix m; the head's value is Wv_b m[c part]
 *   x += [values] Wo^T
 * which is the expanded form's function (the keys' no-rope part is
 * Wk_b^T c, the values Wv_b c).
 */

/* ---- weights ----------------------------------------------------------------- */

/* The kernels read weights through typed pointers (floats, the fp16 fields
 * of the blocks, Q8_K's float scale): a file whose general.alignment is 1 or
 * 2 may place a tensor off its type's natural alignment, which would make
 * those reads undefined. */
static bool engine_aligned(const shoal_gguf_tensor *t)
{
	uintptr_t a = (t->type == SHOAL_DTYPE_F32 || t->type == SHOAL_DTYPE_Q8_K) ? 4 : 2;
	return (uintptr_t)t->data % a == 0;
}

/* Whether tensor t's data may be bound: aligned (above) and held
 * (cfg.tensor_held). */
static shoal_err engine_usable(const shoal_engine *e, const shoal_gguf_tensor *t, char *why,
                               size_t why_len)
{
	if (e->cfg.tensor_held && !e->cfg.tensor_held(e->cfg.tensor_held_ctx, t))
		return shoal_why(
		    why, why_len, SHOAL_ERR_NOTFOUND,
		    "tensor %s is not held here (the weights cache has not fetched it)", t->name);
	if (!engine_aligned(t))
		return shoal_why(
		    why, why_len, SHOAL_ERR_FORMAT,
		    "tensor %s: %s data at file offset %llu is not aligned for its type", t->name,
		    shoal_dtype_name(t->type), (unsigned long long)t->file_offset);
	return SHOAL_OK;
}

/* Make n bytes of host memory at host (valid for the engine's life)
 * available to the backend's ops: *dev their device address. */
static shoal_err engine_map(shoal_engine *e, const void *host, size_t n, const void **dev,
                            const char *what, char *why, size_t why_len)
{
	shoal_err err = e->ops->weights(e->bk, host, n, dev);
	if (err)
		return shoal_why(why, why_len, err, "backend %s: %s (%zu bytes) does not fit: %s",
		                 e->ops->name, what, n, shoal_strerror(err));
	return SHOAL_OK;
}

static shoal_err engine_mat(shoal_engine *e, const shoal_gguf_tensor *t, int64_t n_in,
                            int64_t n_out, uint64_t n_stack, shoal_backend_mat *out, size_t *stride,
                            char *why, size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	if (!t)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "a weight tensor is missing");
	if ((int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out || t->ne[2] != n_stack)
		return shoal_why(
		    why, why_len, SHOAL_ERR_FORMAT,
		    "tensor %s has shape {%llu, %llu, %llu}, expected {%lld, %lld, %llu}", t->name,
		    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
		    (unsigned long long)t->ne[2], (long long)n_in, (long long)n_out,
		    (unsigned long long)n_stack);
	if (!ops->supports(SHOAL_BACKEND_OP_MATMUL, t->type))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "tensor %s has type %s, which backend %s does not compute with",
		                 t->name, shoal_dtype_name(t->type), ops->name);
	shoal_err err = engine_usable(e, t, why, why_len);
	if (err)
		return err;
	size_t rb = shoal_dtype_row_bytes(t->type, (uint64_t)n_in);
	if (rb == SIZE_MAX || (uint64_t)rb * (uint64_t)n_out * n_stack != t->nbytes)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "tensor %s: rows of %lld are not whole %s blocks", t->name,
		                 (long long)n_in, shoal_dtype_name(t->type));
	out->type = t->type;
	out->n_in = n_in;
	out->n_out = n_out;
	out->row_bytes = rb;
	out->data = t->data;
	if (stride)
		*stride = rb * (size_t)n_out;
	if (e->map_now)
		return engine_map(e, t->data, t->nbytes, &out->data, t->name, why, why_len);
	return SHOAL_OK;
}

/* Keep h, a malloc'd host copy of n floats, for the engine's life (freed
 * with it; taken in every case) and make it available to ops: *dev. */
static shoal_err engine_keep(shoal_engine *e, float *h, size_t n, const float **dev,
                             const char *what, char *why, size_t why_len)
{
	if (e->n_vecs == e->cap_vecs) {
		size_t cap = e->cap_vecs ? 2 * e->cap_vecs : 64;
		float **v = realloc(e->vecs, cap * sizeof *v);
		if (!v) {
			free(h);
			return SHOAL_ERR_NOMEM;
		}
		e->vecs = v;
		e->cap_vecs = cap;
	}
	e->vecs[e->n_vecs++] = h;
	const void *d = NULL;
	shoal_err err = engine_map(e, h, n * sizeof(float), &d, what, why, why_len);
	*dev = d;
	return err;
}

/* An F32 copy of a small vector tensor of n elements, kept by the engine:
 * *out its device address, *host (when not NULL) the host copy (NULL t:
 * both NULL). */
static shoal_err engine_vec(shoal_engine *e, const shoal_gguf_tensor *t, uint32_t n,
                            const float **out, const float **host, char *why, size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	*out = NULL;
	if (host)
		*host = NULL;
	if (!t)
		return SHOAL_OK;
	if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "tensor %s has %llu elements, expected %u", t->name,
		                 (unsigned long long)t->ne[0], n);
	if (!ops->supports(SHOAL_BACKEND_OP_TO_F32, t->type) ||
	    shoal_dtype_row_bytes(t->type, n) != t->nbytes)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "tensor %s: type %s", t->name,
		                 shoal_dtype_name(t->type));
	shoal_err err = engine_usable(e, t, why, why_len);
	if (err)
		return err;
	float *h = malloc((size_t)n * sizeof *h);
	if (!h)
		return SHOAL_ERR_NOMEM;
	ops->to_f32(t->type, t->data, h, n);
	if (host)
		*host = h;
	return engine_keep(e, h, n, out, t->name, why, why_len);
}

/* An F32 copy of a stack of count vectors of n elements each (a tensor
 * {n, count}: gpt-oss's expert biases), kept by the engine: *out its
 * device address (NULL t: NULL). */
static shoal_err engine_vecs(shoal_engine *e, const shoal_gguf_tensor *t, uint32_t n,
                             uint32_t count, const float **out, char *why, size_t why_len)
{
	*out = NULL;
	if (!t)
		return SHOAL_OK;
	size_t total = (size_t)n * count;
	if (t->ne[0] != n || t->ne[1] != count || t->ne[2] != 1 || t->ne[3] != 1)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "tensor %s has shape {%llu, %llu}, expected {%u, %u}", t->name,
		                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], n,
		                 count);
	if (!e->ops->supports(SHOAL_BACKEND_OP_TO_F32, t->type) ||
	    shoal_dtype_row_bytes(t->type, n) * count != t->nbytes)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "tensor %s: type %s", t->name,
		                 shoal_dtype_name(t->type));
	shoal_err err = engine_usable(e, t, why, why_len);
	if (err)
		return err;
	float *h = malloc(total * sizeof *h);
	if (!h)
		return SHOAL_ERR_NOMEM;
	size_t rb = shoal_dtype_row_bytes(t->type, n);
	for (uint32_t i = 0; i < count; i++)
		e->ops->to_f32(t->type, (const uint8_t *)t->data + i * rb, h + (size_t)i * n, n);
	return engine_keep(e, h, total, out, t->name, why, why_len);
}

/* The older files' attn_kv_b {kv_lora, n_head * (nope + v_head_dim)} as
 * the split form: a head's value rows are its wv_b in place (rows nope..
 * of the head's block); its key rows W (nope, kv_lora) are needed as
 * W^T (kv_lora, nope) to absorb the query, so they are turned into an F32
 * copy (n_head, kv_lora, nope), owned by the layer, the memory the
 * manifest adds for such files. */
static void *engine_calloc3(size_t a, size_t b, size_t c, size_t sz); /* creation */

static shoal_err engine_split_kv_b(shoal_engine *e, const shoal_layer *src, engine__layer *L,
                                   char *why, size_t why_len)
{
	const shoal_hparams *hp = &e->hp;
	uint32_t H = hp->n_head, kvl = hp->kv_lora_rank, nope = hp->head_dim - hp->n_rot;
	uint32_t vh = hp->v_head_dim;
	shoal_backend_mat kvb;
	shoal_err err =
	    engine_mat(e, src->wkv_b, kvl, (int64_t)H * (nope + vh), 1, &kvb, NULL, why, why_len);
	if (err)
		return err;
	if (!e->ops->supports(SHOAL_BACKEND_OP_TO_F32, kvb.type) ||
	    !e->ops->supports(SHOAL_BACKEND_OP_MATMUL, SHOAL_DTYPE_F32))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "tensor %s: backend %s cannot turn %s keys into F32",
		                 src->wkv_b->name, e->ops->name, shoal_dtype_name(kvb.type));
	L->wv_b = kvb;
	L->wv_b.n_out = vh;
	L->wv_b.data = (const uint8_t *)kvb.data + (size_t)nope * kvb.row_bytes;
	L->wv_b_stride = (size_t)(nope + vh) * kvb.row_bytes;
	float *kt = engine_calloc3(H, kvl, nope, sizeof(float)); /* (n_head, kv_lora, nope) */
	float *row = malloc((size_t)kvl * sizeof *row);          /* (kv_lora) */
	if (!kt || !row) {
		free(kt);
		free(row);
		return SHOAL_ERR_NOMEM;
	}
	for (uint32_t h = 0; h < H; h++)
		for (uint32_t d = 0; d < nope; d++) {
			const uint8_t *w = (const uint8_t *)src->wkv_b->data +
			                   ((size_t)h * (nope + vh) + d) * kvb.row_bytes;
			e->ops->to_f32(kvb.type, w, row, kvl);
			for (uint32_t c = 0; c < kvl; c++)
				kt[((size_t)h * kvl + c) * nope + d] = row[c];
		}
	free(row);
	const float *kt_dev = NULL;
	if ((err = engine_keep(e, kt, (size_t)H * kvl * nope, &kt_dev, src->wkv_b->name, why,
	                       why_len)))
		return err;
	L->wk_b = (shoal_backend_mat){.type = SHOAL_DTYPE_F32,
	                              .n_in = nope,
	                              .n_out = kvl,
	                              .row_bytes = (size_t)nope * sizeof(float),
	                              .data = kt_dev};
	L->wk_b_stride = (size_t)kvl * nope * sizeof(float);
	return SHOAL_OK;
}

/* The MLA attention weights of an owned deepseek2 layer. */
static shoal_err engine_layer_mla(shoal_engine *e, const shoal_layer *src, engine__layer *L,
                                  char *why, size_t why_len)
{
	const shoal_hparams *hp = &e->hp;
	uint32_t E = hp->n_embd, H = hp->n_head, kvl = hp->kv_lora_rank, ql = hp->q_lora_rank;
	shoal_err err;
	if (ql ? (err = engine_mat(e, src->wq_a, E, ql, 1, &L->wq_a, NULL, why, why_len)) ||
	             (err = engine_vec(e, src->q_a_norm, ql, &L->q_a_norm, NULL, why, why_len)) ||
	             (err = engine_mat(e, src->wq_b, ql, e->q_dim, 1, &L->wq_b, NULL, why, why_len))
	       : (err = engine_mat(e, src->wq, E, e->q_dim, 1, &L->wq, NULL, why, why_len)))
		return err;
	if ((err = engine_mat(e, src->wkv_a, E, e->kv_dim, 1, &L->wkv_a, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->kv_a_norm, kvl, &L->kv_a_norm, NULL, why, why_len)) ||
	    (err = engine_mat(e, src->wo, H * hp->v_head_dim, E, 1, &L->wo, NULL, why, why_len)))
		return err;
	if (hp->mla_kv_b)
		return engine_split_kv_b(e, src, L, why, why_len);
	if ((err = engine_mat(e, src->wk_b, hp->head_dim - hp->n_rot, kvl, H, &L->wk_b,
	                      &L->wk_b_stride, why, why_len)) ||
	    (err = engine_mat(e, src->wv_b, kvl, hp->v_head_dim, H, &L->wv_b, &L->wv_b_stride, why,
	                      why_len)))
		return err;
	if ((ql && !L->q_a_norm) || !L->kv_a_norm)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "an MLA layer lacks its norms");
	return SHOAL_OK;
}

static shoal_err engine_layer_init(shoal_engine *e, uint32_t il, bool owned, char *why,
                                   size_t why_len)
{
	const shoal_layer *src = &e->m->layers[il];
	engine__layer *L = &e->layers[il];
	const shoal_hparams *hp = &e->hp;
	shoal_err err;
	L->moe = src->ffn_gate_inp != NULL;
	if (L->moe) {
		if (hp->n_expert == 0 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "layer %u: MoE with %u of %u experts", il,
			                 hp->n_expert_used, hp->n_expert);
		L->all_local = true;
		bool any = false;
		for (uint32_t x = 0; x < hp->n_expert; x++) {
			if (!e->expert_mask[(size_t)il * hp->n_expert + x])
				L->all_local = false;
			else
				any = true;
		}
		/* a layer of another stage is taken where this engine was given
		 * some of its experts to serve; without a mask, on the host only
		 * (a backend with device memory would upload every layer's
		 * experts) and not from a fetched part (cfg.tensor_held: a peer
		 * holds only the tensors of its part) */
		L->exp_mapped =
		    owned || (e->expert_masked ? any : e->host_ok && !e->cfg.tensor_held);
		e->map_now = L->exp_mapped;
		if (L->exp_mapped &&
		    ((err =
		          engine_mat(e, src->ffn_gate_exps, hp->n_embd, hp->n_ff_exp, hp->n_expert,
		                     &L->gate_exp, &L->gate_exp_stride, why, why_len)) ||
		     (err = engine_mat(e, src->ffn_up_exps, hp->n_embd, hp->n_ff_exp, hp->n_expert,
		                       &L->up_exp, &L->up_exp_stride, why, why_len)) ||
		     (err =
		          engine_mat(e, src->ffn_down_exps, hp->n_ff_exp, hp->n_embd, hp->n_expert,
		                     &L->down_exp, &L->down_exp_stride, why, why_len)) ||
		     (err = engine_mat(e, src->ffn_gate_inp, hp->n_embd, hp->n_expert, 1,
		                       &L->router, NULL, why, why_len)) ||
		     (err = engine_vec(e, src->exp_probs_b, hp->n_expert, &L->exp_probs_b_d,
		                       &L->exp_probs_b, why, why_len))))
			return err;
		/* gpt-oss's expert biases go with the experts' matrices */
		if (e->map_now &&
		    ((err = engine_vecs(e, src->ffn_gate_exps_b, hp->n_ff_exp, hp->n_expert,
		                        &L->gate_exp_b, why, why_len)) ||
		     (err = engine_vecs(e, src->ffn_up_exps_b, hp->n_ff_exp, hp->n_expert,
		                        &L->up_exp_b, why, why_len)) ||
		     (err = engine_vecs(e, src->ffn_down_exps_b, hp->n_embd, hp->n_expert,
		                        &L->down_exp_b, why, why_len))))
			return err;
		e->map_now = true;
	}
	if (!owned)
		return SHOAL_OK;
	if (hp->mla)
		err = engine_layer_mla(e, src, L, why, why_len);
	else if (!(err = engine_mat(e, src->wq, hp->n_embd, e->q_dim, 1, &L->wq, NULL, why,
	                            why_len)) &&
	         !(err = engine_mat(e, src->wk, hp->n_embd, e->kv_dim, 1, &L->wk, NULL, why,
	                            why_len)) &&
	         !(err = engine_mat(e, src->wv, hp->n_embd, e->kv_dim, 1, &L->wv, NULL, why,
	                            why_len)))
		err = engine_mat(e, src->wo, e->q_dim, hp->n_embd, 1, &L->wo, NULL, why, why_len);
	if (err ||
	    (err = engine_vec(e, src->attn_norm, hp->n_embd, &L->attn_norm, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->ffn_norm, hp->n_embd, &L->ffn_norm, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->q_norm, hp->head_dim, &L->q_norm, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->k_norm, hp->head_dim, &L->k_norm, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->bq, e->q_dim, &L->bq, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->bk, e->kv_dim, &L->bk, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->bv, e->kv_dim, &L->bv, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->bo, hp->n_embd, &L->bo, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->attn_sinks, hp->n_head, &L->sinks, NULL, why, why_len)) ||
	    (err = engine_vec(e, src->ffn_gate_inp_b, hp->n_expert, &L->router_b, NULL, why,
	                      why_len)))
		return err;
	L->window = shoal_hparams_layer_swa(hp, il) ? hp->n_swa : 0;
	if (!L->attn_norm || !L->ffn_norm)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "layer %u has no norm weights",
		                 il);
	if (!L->moe && ((err = engine_mat(e, src->ffn_gate, hp->n_embd, hp->n_ff, 1, &L->gate, NULL,
	                                  why, why_len)) ||
	                (err = engine_mat(e, src->ffn_up, hp->n_embd, hp->n_ff, 1, &L->up, NULL,
	                                  why, why_len)) ||
	                (err = engine_mat(e, src->ffn_down, hp->n_ff, hp->n_embd, 1, &L->down, NULL,
	                                  why, why_len))))
		return err;
	L->shexp = L->moe && src->ffn_gate_shexp;
	if (L->shexp && ((err = engine_mat(e, src->ffn_gate_shexp, hp->n_embd, hp->n_ff_shexp, 1,
	                                   &L->gate_sh, NULL, why, why_len)) ||
	                 (err = engine_mat(e, src->ffn_up_shexp, hp->n_embd, hp->n_ff_shexp, 1,
	                                   &L->up_sh, NULL, why, why_len)) ||
	                 (err = engine_mat(e, src->ffn_down_shexp, hp->n_ff_shexp, hp->n_embd, 1,
	                                   &L->down_sh, NULL, why, why_len))))
		return err;
	if (L->moe && !L->all_local && !e->cfg.moe_hook.collect && !e->tp)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "layer %u has experts owned elsewhere but no MoE hook", il);
	return SHOAL_OK;
}

/* ---- creation ------------------------------------------------------------------- */

/* Positions per session when the caller does not say: the model's training
 * context, capped at 4096 so a 128k-context model does not reserve GBs of
 * KV cache (a 7B model's K+V is ~0.5 MB per position in F32). */
#define SHOAL_ENGINE_DEFAULT_CTX_CAP 4096
/* Rows per run by default: a prefill chunk of 512 tokens amortises each
 * weight read over enough rows to be compute-bound, as in the reference. */
#define SHOAL_ENGINE_DEFAULT_ROWS 512

/* The bytes of the weights the engine multiplies: its layers' tensors
 * (every routed expert counted) and the head (shoal_backend_limits). */
static uint64_t engine_weight_bytes(const shoal_engine *e)
{
	const shoal_model *m = e->m;
	const shoal_gguf_tensor *own[SHOAL_LAYER_MAX_TENSORS];
	uint64_t sum = 0;
	for (uint32_t il = e->cfg.layer_begin; il < e->cfg.layer_end; il++) {
		const shoal_layer *L = &m->layers[il];
		size_t n = shoal_layer_own_tensors(L, own);
		for (size_t i = 0; i < n; i++)
			sum += own[i]->nbytes;
		const shoal_gguf_tensor *ex[3] = {L->ffn_gate_exps, L->ffn_up_exps,
		                                  L->ffn_down_exps};
		for (int i = 0; i < 3; i++)
			sum += ex[i] ? ex[i]->nbytes : 0;
	}
	if (e->cfg.has_head && m->output)
		sum += m->output->nbytes;
	return sum;
}

shoal_engine_config shoal_engine_config_default(const shoal_model *m)
{
	shoal_engine_config c = {0};
	c.n_threads = 1;
	c.n_ctx = m->hp.n_ctx_train < SHOAL_ENGINE_DEFAULT_CTX_CAP ? m->hp.n_ctx_train
	                                                           : SHOAL_ENGINE_DEFAULT_CTX_CAP;
	c.max_sessions = 1;
	c.max_rows = SHOAL_ENGINE_DEFAULT_ROWS;
	c.layer_begin = 0;
	c.layer_end = m->hp.n_layer;
	c.has_embd = true;
	c.has_head = true;
	c.kv_type = SHOAL_DTYPE_F16;
	return c;
}

void shoal_engine_free(shoal_engine *e)
{
	if (!e)
		return;
	if (e->bk) {
		e->ops->buf_free(e->bk, e->kv_buf);
		e->ops->buf_free(e->bk, e->act_buf);
		e->ops->destroy(e->bk);
	}
	for (size_t i = 0; i < e->n_vecs; i++)
		free(e->vecs[i]);
	free(e->vecs);
	free(e->layers);
	free(e->expert_mask);
	free(e->sess_open);
	free(e->sess_len);
	free(e->sess_next);
	free(e->sess_lo);
	free(e->kv_cap);
	free(e->kv_off);
	free(e->krow);
	free(e->vrow);
	free(e->n_kv);
	free(e->kv_slot);
	free(e->kv_first);
	free(e->moe_ids);
	free(e->moe_w);
	free(e->moe_key);
	free(e->moe_contrib);
	free(e->moe_slot);
	free(e->host_block);
	engine__tp_free(e->tp);
	free(e);
}

/* calloc of a*b*c elements of size sz, NULL on overflow. */
static void *engine_calloc3(size_t a, size_t b, size_t c, size_t sz)
{
	if (b && a > SIZE_MAX / b)
		return NULL;
	if (c && a * b > SIZE_MAX / c)
		return NULL;
	size_t n = a * b * c;
	return calloc(n ? n : 1, sz);
}

/* YaRN's mix of interpolated and extrapolated angle for pair i: the
 * reference's ramp over the pairs between the correction dims, where
 * beta_fast and beta_slow rotations fit in the original context. */
static float engine_yarn_mix(const shoal_hparams *hp, uint32_t i)
{
	float n = (float)hp->n_rot, two_pi = 6.28318530717958647692f, lb = logf(hp->rope_freq_base);
	float lo =
	    floorf(n * logf((float)hp->n_ctx_orig / (hp->yarn_beta_fast * two_pi)) / (2 * lb));
	float hi =
	    ceilf(n * logf((float)hp->n_ctx_orig / (hp->yarn_beta_slow * two_pi)) / (2 * lb));
	lo = lo > 0 ? lo : 0;
	hi = hi < n - 1 ? hi : n - 1;
	float y = ((float)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
	y = y < 0 ? 0 : y > 1 ? 1 : y;
	return (1 - y) * hp->yarn_ext_factor;
}

/* freqs: (n_rot/2) Llama 3.1-style per-pair divisors of the angle (the
 * model's rope_freqs tensor), or NULL for none. */
static void engine_rope_table(shoal_engine *e, const float *freqs, float *table)
{
	const shoal_hparams *hp = &e->hp;
	uint32_t n_rot = hp->n_rot;
	/* YaRN: theta = interp * (1 - mix_i) + extrap * mix_i; the reference
	 * also scales cos and sin by (1 + 0.1 ln(1/freq_scale)) but deepseek2
	 * passes the inverse as its attn_factor, so their size stays 1 */
	/* theta_i = pos * base^(-2i/n_rot) / freqs[i] * freq_scale, the angle
	 * advanced by a float product per pair as the reference engine does */
	float theta_scale = powf(hp->rope_freq_base, -2.0f / (float)n_rot);
	for (uint32_t p = 0; p < e->cfg.n_ctx; p++) {
		float *cs = table + (size_t)p * n_rot; /* (n_rot/2, 2) */
		float theta = (float)p;
		for (uint32_t i = 0; i < n_rot / 2; i++) {
			float ex = freqs ? theta / freqs[i] : theta;
			float t = hp->rope_freq_scale * ex;
			if (hp->rope_yarn) {
				float mix = engine_yarn_mix(hp, i);
				t = t * (1 - mix) + ex * mix;
			}
			cs[2 * i] = cosf(t);
			cs[2 * i + 1] = sinf(t);
			theta *= theta_scale;
		}
	}
}

/* The scratch of max_rows rows: activations in one buffer of the backend
 * (device memory on a GPU), the host-only tables, and the host views of
 * the MoE and combine steps (aliases of the device scratch if host_ok). */
static shoal_err engine_scratch(shoal_engine *e, uint32_t n_ff, char *why, size_t why_len)
{
	const shoal_hparams *hp = &e->hp;
	const size_t R = e->cfg.max_rows, E = hp->n_embd, NE = hp->n_expert;
	const size_t ff = n_ff ? n_ff : 1;
	const size_t K = hp->n_expert_used;
	struct {
		float **at;
		size_t n; /* floats; 0: not needed */
	} dev[] = {
	    {&e->x, R * E},
	    {&e->xn, R * E},
	    {&e->tmp, R * E},
	    {&e->q, R * e->q_dim},
	    {&e->att, R * e->q_dim},
	    {&e->k, R * e->kv_dim},
	    {&e->v, R * e->kv_dim},
	    {&e->ff_g, R * ff},
	    {&e->ff_u, R * ff},
	    {&e->logits_d, e->host_ok ? 0 : (size_t)SHOAL_ENGINE_LOGIT_ROWS * hp->n_vocab},
	    {&e->moe_lg_d, R * NE},
	    {&e->moe_sel_d, e->host_ok ? R * NE : 0}, /* moe_sel's memory (host_ok) */
	    {&e->moe_xd, NE ? R * E : 0},
	    {&e->moe_scr, NE ? R * K * (2 * (size_t)hp->n_ff_exp + E) : 0},
	    {(float **)&e->moe_ids_d, NE && !e->host_ok ? R * K : 0},
	    {&e->moe_w_d, NE && !e->host_ok ? R * K : 0},
	    {&e->mla_qa, hp->mla ? R * (hp->q_lora_rank ? hp->q_lora_rank : 1) : 0},
	    {&e->mla_q, hp->mla ? R * hp->n_head * e->kv_dim : 0},
	    {&e->mla_att, hp->mla ? R * hp->n_head * e->kv_dim : 0},
	    {&e->mla_v, hp->mla ? R * hp->n_head * hp->v_head_dim : 0},
	};
	/* each array starts on a 256-byte boundary (64 floats) */
	size_t total = 0;
	for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
		total += (dev[i].n + 63) / 64 * 64;
	shoal_err err = e->ops->buf_alloc(e->bk, total * sizeof(float), &e->act_buf);
	if (err)
		return shoal_why(why, why_len, err,
		                 "backend %s: no memory for the scratch of %zu rows (%zu bytes)",
		                 e->ops->name, R, total * sizeof(float));
	float *base = e->ops->buf_addr(e->act_buf);
	for (size_t i = 0, at = 0; i < sizeof dev / sizeof dev[0]; i++) {
		*dev[i].at = dev[i].n ? base + at : NULL;
		at += (dev[i].n + 63) / 64 * 64;
	}
	e->sess_open = calloc(e->cfg.max_sessions, 1);
	e->sess_len = calloc(e->cfg.max_sessions, sizeof *e->sess_len);
	e->sess_next = calloc(e->cfg.max_sessions, sizeof *e->sess_next);
	e->sess_lo = calloc(e->cfg.max_sessions, sizeof *e->sess_lo);
	e->krow = calloc(R, sizeof *e->krow);
	e->vrow = calloc(R, sizeof *e->vrow);
	e->n_kv = calloc(R, sizeof *e->n_kv);
	e->kv_slot = calloc(R, sizeof *e->kv_slot);
	e->kv_first = calloc(R, sizeof *e->kv_first);
	if (NE) {
		e->moe_ids = engine_calloc3(R, K, 1, sizeof(int32_t));
		e->moe_w = engine_calloc3(R, K, 1, sizeof(float));
		e->moe_contrib = engine_calloc3(R, K, E, sizeof(float));
		e->moe_slot = calloc(R, sizeof *e->moe_slot);
		e->moe_key = calloc(NE, sizeof *e->moe_key);
	}
	if (e->host_ok) {
		e->xn_h = e->xn, e->tmp_h = e->tmp, e->moe_logits = e->moe_lg_d;
		e->moe_sel = e->moe_sel_d, e->moe_x = e->moe_xd;
	} else if ((e->host_block = engine_calloc3(R, 3 * E + 2 * NE, 1, sizeof(float)))) {
		float *h = e->host_block;
		e->xn_h = h, e->tmp_h = h + R * E, e->moe_x = h + 2 * R * E;
		e->moe_logits = h + 3 * R * E, e->moe_sel = h + 3 * R * E + R * NE;
	}
	if (!e->sess_open || !e->sess_len || !e->sess_next || !e->sess_lo || !e->krow || !e->vrow ||
	    !e->n_kv || !e->kv_slot || !e->kv_first || !e->xn_h ||
	    (NE && (!e->moe_ids || !e->moe_w || !e->moe_contrib || !e->moe_slot || !e->moe_key)))
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM,
		                 "no memory for %u sessions and %zu rows", e->cfg.max_sessions, R);
	return SHOAL_OK;
}

/* What gpt-oss layers need of the backend: sinks, the clamped SwiGLU. */
static shoal_err engine_check_oss(const shoal_model *m, const shoal_engine_config *cfg, char *why,
                                  size_t why_len)
{
	const shoal_hparams *hp = &m->hp;
	const shoal_backend_ops *ops = cfg->backend;
	bool sinks = false;
	for (uint32_t il = 0; il < hp->n_layer; il++)
		sinks |= m->layers[il].attn_sinks != NULL;
	if (sinks && !ops->supports(SHOAL_BACKEND_OP_ATTN_SINKS, SHOAL_DTYPE_F32))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "backend %s has no attention sinks, which this %s model needs",
		                 ops->name, shoal_arch_name(hp->arch));
	if (hp->swiglu_oai && !ops->supports(SHOAL_BACKEND_OP_SWIGLU_OAI, SHOAL_DTYPE_F32))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "backend %s has no clamped SwiGLU, which this %s model needs",
		                 ops->name, shoal_arch_name(hp->arch));
	return SHOAL_OK;
}

shoal_err shoal_engine_new(const shoal_model *m, const shoal_engine_config *cfg, shoal_engine **out,
                           char *why, size_t why_len)
{
	SHOAL_ASSERT(m && cfg && out);
	*out = NULL;
	const shoal_hparams *hp = &m->hp;
	shoal_err err = SHOAL_ERR_NOMEM;
	if (cfg->n_threads < 1 || cfg->max_sessions < 1 || cfg->max_rows < 1)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "threads, sessions and rows must be >= 1");
	if (cfg->layer_begin > cfg->layer_end || cfg->layer_end > hp->n_layer)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "layer range [%u, %u) of %u",
		                 cfg->layer_begin, cfg->layer_end, hp->n_layer);
	if (hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv ||
	    hp->head_dim == 0 || hp->n_rot % 2 || hp->n_rot > hp->head_dim || hp->n_embd == 0 ||
	    hp->n_vocab == 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "bad heads: %u heads, %u KV heads, head dim %u, %u rotated",
		                 hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot);

	const shoal_backend_ops *ops = cfg->backend;
	if (!ops)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "no backend");
	if (ops->abi != SHOAL_BACKEND_ABI)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "backend %s has ABI version %u, this engine needs %u",
		                 ops->name ? ops->name : "?", ops->abi, SHOAL_BACKEND_ABI);
	if (!ops->supports(SHOAL_BACKEND_OP_KV_CACHE, cfg->kv_type))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "backend %s cannot keep a KV cache of %s", ops->name,
		                 shoal_dtype_name(cfg->kv_type));

	if ((err = engine_check_oss(m, cfg, why, why_len)))
		return err;

	shoal_engine *e = calloc(1, sizeof *e);
	if (!e)
		return SHOAL_ERR_NOMEM;
	e->ops = ops;
	e->m = m;
	e->hp = *hp;
	e->cfg = *cfg;
	e->cfg.expert_mask = NULL;
	e->expert_masked = cfg->expert_mask != NULL;
	if (e->cfg.n_ctx == 0)
		e->cfg.n_ctx = hp->n_ctx_train ? hp->n_ctx_train : SHOAL_ENGINE_DEFAULT_CTX_CAP;
	e->q_dim = hp->n_head * hp->head_dim;
	e->kv_dim = hp->mla ? hp->kv_lora_rank + hp->n_rot : hp->n_head_kv * hp->head_dim;
	e->kv_planes = hp->mla ? 1 : 2;
	e->kv_elt = shoal_dtype_row_bytes(cfg->kv_type, 1);
	e->kq_scale = hp->yarn_mscale * hp->yarn_mscale / sqrtf((float)hp->head_dim);
	e->n_own = cfg->layer_end - cfg->layer_begin;
	const uint32_t R = cfg->max_rows, C = e->cfg.n_ctx;

	size_t n_mask = (size_t)hp->n_layer * (hp->n_expert ? hp->n_expert : 1);
	e->expert_mask = malloc(n_mask);
	e->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *e->layers);
	if (!e->expert_mask || !e->layers)
		goto fail;
	if (cfg->expert_mask && hp->n_expert)
		memcpy(e->expert_mask, cfg->expert_mask, n_mask);
	else
		memset(e->expert_mask, 1, n_mask);
	e->kv_cache_dim = e->kv_dim;
	if (cfg->tp.n_members > 1 && (err = engine__tp_init(e, why, why_len)))
		goto fail;

	uint32_t n_ff = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
	if (hp->n_ff_shexp > n_ff)
		n_ff = hp->n_ff_shexp;
	uint32_t max_n = hp->n_embd;
	uint32_t widths[] = {e->q_dim, n_ff, hp->q_lora_rank, hp->kv_lora_rank,
	                     hp->n_head * hp->v_head_dim};
	for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
		if (widths[i] > max_n)
			max_n = widths[i];
	shoal_backend_limits lim = {
	    .n_threads = cfg->n_threads,
	    .max_ctx = C,
	    .max_rows = R,
	    .max_n = max_n,
	    .max_group = hp->n_head / hp->n_head_kv,
	    .weight_bytes = engine_weight_bytes(e),
	};
	err = e->ops->create(&lim, &e->bk);
	if (err) {
		shoal_why(why, why_len, err, "backend %s: %s", e->ops->name, shoal_strerror(err));
		goto fail;
	}
	/* the KV cache in the backend's memory: whole planes, or rings for
	 * sliding layers */
	if ((err = engine__kv_layout(e, ops->supports(SHOAL_BACKEND_OP_ATTN_RING, cfg->kv_type))))
		goto fail;
	size_t kv_bytes = (size_t)cfg->max_sessions * e->kv_sess_bytes;
	if ((err = e->ops->buf_alloc(e->bk, kv_bytes, &e->kv_buf))) {
		shoal_why(why, why_len, err, "backend %s: no memory for the KV cache (%zu bytes)",
		          e->ops->name, kv_bytes);
		goto fail;
	}
	e->kv = e->ops->buf_addr(e->kv_buf);
	e->host_ok = e->ops->buf_host(e->kv_buf) == (void *)e->kv;
	e->moe_route_op = e->hp.n_expert &&
	                  e->ops->supports(SHOAL_BACKEND_OP_MOE_ROUTE, SHOAL_DTYPE_F32) &&
	                  e->hp.n_expert <= SHOAL_BACKEND_ROUTE_MAX_EXPERT &&
	                  e->hp.n_expert_used <= SHOAL_BACKEND_ROUTE_MAX_K &&
	                  e->hp.n_expert_group <= SHOAL_BACKEND_ROUTE_MAX_GROUPS;
	e->moe_bias_op = e->ops->supports(SHOAL_BACKEND_OP_MOE_BIAS, SHOAL_DTYPE_F32);
	e->map_now = true;
	if (e->tp && !e->host_ok) {
		err = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                "backend %s keeps its memory on a device; tensor groups "
		                "exchange host rows and run on the CPU backend only for now",
		                e->ops->name);
		goto fail;
	}
	err = SHOAL_ERR_NOMEM;

	for (uint32_t il = 0; il < hp->n_layer; il++) {
		bool owned = il >= cfg->layer_begin && il < cfg->layer_end;
		err = engine_layer_init(e, il, owned, why, why_len);
		if (err)
			goto fail;
	}
	if (cfg->has_embd && !m->tok_embd) {
		err = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "no token_embd tensor");
		goto fail;
	}
	if (cfg->has_embd) {
		const shoal_gguf_tensor *t = m->tok_embd;
		size_t rb = shoal_dtype_row_bytes(t->type, hp->n_embd);
		if (t->ne[0] != hp->n_embd || t->ne[1] != hp->n_vocab ||
		    !e->ops->supports(SHOAL_BACKEND_OP_EMBED, t->type) || rb == SIZE_MAX ||
		    (uint64_t)rb * hp->n_vocab != t->nbytes) {
			err = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                "token_embd: bad shape or type %s",
			                shoal_dtype_name(t->type));
			goto fail;
		}
		if ((err = engine_usable(e, t, why, why_len)) ||
		    (err = engine_map(e, t->data, t->nbytes, &e->embd, t->name, why, why_len)))
			goto fail;
	}
	if (cfg->has_head) {
		if ((err = engine_mat(e, m->output, hp->n_embd, hp->n_vocab, 1, &e->head, NULL, why,
		                      why_len)) ||
		    (err = engine_vec(e, m->output_norm, hp->n_embd, &e->out_norm, NULL, why,
		                      why_len)))
			goto fail;
		if (!e->out_norm) {
			err = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "no output_norm tensor");
			goto fail;
		}
	}

	if ((err = engine_scratch(e, n_ff, why, why_len)))
		goto fail;
	/* Llama 3.1 and later scale each rotated pair's frequency by the
	 * file's rope_freqs (the reference's freq_factors); ignoring them
	 * gives wrong logits beyond the first position. */
	const float *freqs = NULL, *freqs_dev = NULL;
	if ((err = engine_vec(e, m->rope_freqs, hp->n_rot / 2, &freqs_dev, &freqs, why, why_len)))
		goto fail;
	for (uint32_t i = 0; freqs && i < hp->n_rot / 2; i++)
		if (!isfinite(freqs[i]) || freqs[i] <= 0) {
			err = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                "rope_freqs.weight[%u] = %g is not a positive number", i,
			                (double)freqs[i]);
			goto fail;
		}
	float *cs = engine_calloc3(C, hp->n_rot ? hp->n_rot : 1, 1, sizeof(float));
	if (!cs) {
		err = SHOAL_ERR_NOMEM;
		goto fail;
	}
	engine_rope_table(e, freqs, cs);
	if ((err = engine_keep(e, cs, (size_t)C * (hp->n_rot ? hp->n_rot : 1), &e->rope_cs,
	                       "the RoPE table", why, why_len)))
		goto fail;

	*out = e;
	return SHOAL_OK;
fail:
	shoal_engine_free(e);
	return err;
}

const shoal_model *shoal_engine_model(const shoal_engine *e)
{
	return e->m;
}

uint32_t shoal_engine_n_ctx(const shoal_engine *e)
{
	return e->cfg.n_ctx;
}

uint32_t shoal_engine_max_rows(const shoal_engine *e)
{
	return e->cfg.max_rows;
}

size_t shoal_engine_kv_row_elems(const shoal_engine *e)
{
	return (size_t)e->kv_planes * e->kv_cache_dim;
}

uint64_t shoal_engine_kv_bytes_per_token(const shoal_engine *e)
{
	return (uint64_t)e->n_own * shoal_engine_kv_row_elems(e) * e->kv_elt;
}

const shoal_backend_ops *shoal_engine_backend_ops(const shoal_engine *e)
{
	return e->ops;
}

shoal_backend *shoal_engine_backend(shoal_engine *e)
{
	return e->bk;
}

/* ---- sessions --------------------------------------------------------------------- */

shoal_err shoal_engine_session_open(shoal_engine *e, uint32_t *slot)
{
	SHOAL_ASSERT(e && slot);
	for (uint32_t s = 0; s < e->cfg.max_sessions; s++) {
		if (!e->sess_open[s]) {
			e->sess_open[s] = 1;
			e->sess_len[s] = 0;
			e->sess_lo[s] = 0;
			*slot = s;
			return SHOAL_OK;
		}
	}
	return SHOAL_ERR_BUSY;
}

shoal_err shoal_engine_session_reset(shoal_engine *e, uint32_t slot)
{
	SHOAL_ASSERT(e && slot < e->cfg.max_sessions);
	if (!e->sess_open[slot])
		return SHOAL_ERR_NOTFOUND;
	e->sess_len[slot] = 0;
	e->sess_lo[slot] = 0;
	return SHOAL_OK;
}

void shoal_engine_session_close(shoal_engine *e, uint32_t slot)
{
	SHOAL_ASSERT(e && slot < e->cfg.max_sessions);
	e->sess_open[slot] = 0;
	e->sess_len[slot] = 0;
	e->sess_lo[slot] = 0;
}

uint32_t shoal_engine_session_len(const shoal_engine *e, uint32_t slot)
{
	SHOAL_ASSERT(e && slot < e->cfg.max_sessions);
	if (!e->sess_open[slot])
		return 0;
	return e->sess_len[slot];
}

/* ---- the run ------------------------------------------------------------------------- */

#define SHOAL_NO_POS UINT32_MAX

/* Check everything outside input in the batch before touching any state. */
static shoal_err engine_check(shoal_engine *e, const shoal_engine_batch *b, uint32_t *n_logits,
                              char *why, size_t why_len)
{
	const shoal_hparams *hp = &e->hp;
	shoal_err err = SHOAL_OK;
	*n_logits = 0;
	if (b->n_rows < 1 || b->n_rows > e->cfg.max_rows)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%u rows (this engine takes 1..%u)",
		                 b->n_rows, e->cfg.max_rows);
	if (!b->session || !b->pos)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "rows without session/pos tags");
	if (e->cfg.has_embd ? !b->tokens : !b->hidden_in)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "the batch lacks its %s",
		                 e->cfg.has_embd ? "token ids" : "hidden states");
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t s = b->session[r];
		if (s >= e->cfg.max_sessions || !e->sess_open[s]) {
			err = shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                "row %u: session slot %u is not open", r, s);
			goto out;
		}
		e->sess_next[s] = SHOAL_NO_POS;
	}
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t s = b->session[r], p = b->pos[r];
		if (e->cfg.has_embd &&
		    (b->tokens[r] < 0 || (uint32_t)b->tokens[r] >= hp->n_vocab)) {
			err = shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                "row %u: token %d outside the vocabulary of %u", r,
			                b->tokens[r], hp->n_vocab);
			goto out;
		}
		if (p >= e->cfg.n_ctx) {
			err = shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                "row %u: position %u beyond the context of %u", r, p,
			                e->cfg.n_ctx);
			goto out;
		}
		uint32_t want = e->sess_next[s];
		if (want == SHOAL_NO_POS ? p > e->sess_len[s] : p != want) {
			err = shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                "row %u: position %u of session %u leaves a gap (%s %u)", r,
			                p, s, want == SHOAL_NO_POS ? "length" : "expected",
			                want == SHOAL_NO_POS ? e->sess_len[s] : want);
			goto out;
		}
		if (want == SHOAL_NO_POS && !engine__kv_can_start(e, s, p)) {
			err = shoal_why(
			    why, why_len, SHOAL_ERR_RANGE,
			    "row %u: position %u of session %u rewinds past its sliding "
			    "window's ring (it holds positions from %u; start again at 0)",
			    r, p, s, e->sess_lo[s]);
			goto out;
		}
		e->sess_next[s] = p + 1;
		if (b->want_logits && b->want_logits[r])
			(*n_logits)++;
	}
	if (*n_logits && !e->cfg.has_head)
		err = shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                "rows want logits but this engine has no head");
	else if (*n_logits && !b->logits && engine__tp_needs_logits(e))
		err = shoal_why(why, why_len, SHOAL_ERR_INVAL, "rows want logits but no buffer");
out:
	return err;
}

/* Attention block of owned layer il on e->x. */
static void engine_attn(shoal_engine *e, uint32_t il, const shoal_engine_batch *b)
{
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[il];
	uint32_t n = b->n_rows;

	uint32_t E = hp->n_embd;
	ops->rms_norm(e->bk, e->x, E, L->attn_norm, E, n, hp->rms_eps, e->xn, E);
	engine__attn_heads(e, il, b, 0, hp->n_head_kv, e->att);
	size_t ld_out = E;
	float *o = e->tmp; /* (n_rows, n_embd) */
	ops->matmul(e->bk, 1, &L->wo, e->att, e->q_dim, n, &o, &ld_out);
	if (L->bo)
		ops->add(e->bk, e->tmp, E, L->bo, 0, E, n);
	ops->add(e->bk, e->x, E, e->tmp, E, E, n);
}

/* MLA attention block of owned layer il on e->x (see the top). Shapes:
 * q (n, n_head, head_dim) as [nope | rope]; k (n, kv_dim) the new cache
 * rows [rope key | latent]; mla_q, mla_att (n, n_head, kv_dim) in the
 * cache row's order; mla_v (n, n_head, v_head_dim). */
static void engine_attn_mla(shoal_engine *e, uint32_t il, const shoal_engine_batch *b)
{
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	const engine__layer *L = &e->layers[il];
	uint32_t n = b->n_rows, li = il - e->cfg.layer_begin, H = hp->n_head;
	uint32_t hd = hp->head_dim, nr = hp->n_rot, nope = hd - nr, kvl = hp->kv_lora_rank;
	uint32_t kvd = e->kv_dim, qd = e->q_dim, vh = hp->v_head_dim, E = hp->n_embd;
	size_t ld_q = qd, ld_kv = kvd, ld_h = (size_t)H * kvd, ld_v = (size_t)H * vh, ld_e = E;

	ops->rms_norm(e->bk, e->x, E, L->attn_norm, E, n, hp->rms_eps, e->xn, E);
	if (hp->q_lora_rank) {
		size_t ld_a = hp->q_lora_rank;
		ops->matmul(e->bk, 1, &L->wq_a, e->xn, E, n, &e->mla_qa, &ld_a);
		ops->rms_norm(e->bk, e->mla_qa, ld_a, L->q_a_norm, hp->q_lora_rank, n, hp->rms_eps,
		              e->mla_qa, ld_a);
		ops->matmul(e->bk, 1, &L->wq_b, e->mla_qa, ld_a, n, &e->q, &ld_q);
	} else {
		ops->matmul(e->bk, 1, &L->wq, e->xn, E, n, &e->q, &ld_q);
	}
	/* e->v (n, kv_dim) = [latent | rope key] as the weight gives them */
	ops->matmul(e->bk, 1, &L->wkv_a, e->xn, E, n, &e->v, &ld_kv);
	/* k (n, kv_dim) = [rope key | normed latent]; each head's rope query
	 * first in mla_q: rows (r, h) of hd floats in q, of kv_dim in mla_q */
	ops->copy(e->bk, e->k, kvd, e->v + kvl, kvd, nr, n);
	ops->rms_norm(e->bk, e->v, kvd, L->kv_a_norm, kvl, n, hp->rms_eps, e->k + nr, kvd);
	ops->copy(e->bk, e->mla_q, kvd, e->q + nope, hd, nr, n * H);
	for (uint32_t h = 0; h < H; h++) {
		shoal_backend_mat wk = L->wk_b;
		wk.data = (const uint8_t *)wk.data + (size_t)h * L->wk_b_stride;
		float *y = e->mla_q + (size_t)h * kvd + nr; /* (n) ld ld_h */
		ops->matmul(e->bk, 1, &wk, e->q + (size_t)h * hd, ld_q, n, &y, &ld_h);
	}
	ops->rope(e->bk, e->mla_q, ld_h, n, H, kvd, nr, b->pos, e->rope_cs, false);
	ops->rope(e->bk, e->k, kvd, n, 1, kvd, nr, b->pos, e->rope_cs, false);
	engine__attend(e, b, li, H, 1, kvd, e->mla_q, NULL, 0, e->mla_att);
	for (uint32_t h = 0; h < H; h++) {
		shoal_backend_mat wv = L->wv_b;
		wv.data = (const uint8_t *)wv.data + (size_t)h * L->wv_b_stride;
		float *y = e->mla_v + (size_t)h * vh; /* (n) ld ld_v */
		ops->matmul(e->bk, 1, &wv, e->mla_att + (size_t)h * kvd + nr, ld_h, n, &y, &ld_v);
	}
	float *o = e->tmp; /* (n_rows, n_embd) */
	ops->matmul(e->bk, 1, &L->wo, e->mla_v, ld_v, n, &o, &ld_e);
	ops->add(e->bk, e->x, E, e->tmp, E, E, n);
}

/* The logits of the rows that want them, into b->logits (n_logits,
 * n_vocab): their hidden states gathered (consecutive wanted rows in one
 * copy), normed, times the head; on a backend with device memory through
 * logits_d, SHOAL_ENGINE_LOGIT_ROWS rows at a time. */
static shoal_err engine_logits(shoal_engine *e, const shoal_engine_batch *b, uint32_t n_logits,
                               char *why, size_t why_len)
{
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	const uint32_t E = hp->n_embd, n = b->n_rows;
	uint32_t j = 0;
	for (uint32_t r = 0; r < n;) {
		if (!b->want_logits[r]) {
			r++;
			continue;
		}
		uint32_t run = 1;
		while (r + run < n && b->want_logits[r + run])
			run++;
		ops->copy(e->bk, e->tmp + (size_t)j * E, E, e->x + (size_t)r * E, E, E, run);
		j += run;
		r += run;
	}
	ops->rms_norm(e->bk, e->tmp, E, e->out_norm, E, n_logits, hp->rms_eps, e->xn, E);
	if (engine__tp_split_head(e))
		return engine__tp_head(e, n_logits, b->logits, why, why_len);
	size_t ld = hp->n_vocab;
	if (e->host_ok) {
		ops->matmul(e->bk, 1, &e->head, e->xn, E, n_logits, &b->logits, &ld);
		return SHOAL_OK;
	}
	for (uint32_t r = 0; r < n_logits; r += SHOAL_ENGINE_LOGIT_ROWS) {
		uint32_t c =
		    n_logits - r < SHOAL_ENGINE_LOGIT_ROWS ? n_logits - r : SHOAL_ENGINE_LOGIT_ROWS;
		ops->matmul(e->bk, 1, &e->head, e->xn + (size_t)r * E, E, c, &e->logits_d, &ld);
		ops->read(e->bk, e->logits_d, b->logits + (size_t)r * ld,
		          (size_t)c * ld * sizeof(float));
	}
	return SHOAL_OK;
}

/* Tell the rings' bookkeeping the positions each session of the batch
 * wrote (its rows' positions are consecutive, in row order): sess_next,
 * run()'s scratch, first takes each session's last position + 1, then a
 * session's first row reports [its position, that end). Nothing to tell
 * without rings. */
static void engine_wrote(shoal_engine *e, const shoal_engine_batch *b)
{
	if (!e->ring_window)
		return;
	for (uint32_t r = 0; r < b->n_rows; r++)
		e->sess_next[b->session[r]] = b->pos[r] + 1;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t s = b->session[r];
		if (e->sess_next[s] == SHOAL_NO_POS)
			continue; /* not its first row */
		engine__kv_wrote(e, s, b->pos[r], e->sess_next[s]);
		e->sess_next[s] = SHOAL_NO_POS;
	}
}

shoal_err shoal_engine_run(shoal_engine *e, const shoal_engine_batch *b, char *why, size_t why_len)
{
	SHOAL_ASSERT(e && b); /* the batch's contents may come from the network: checked */
	const shoal_backend_ops *ops = e->ops;
	const shoal_hparams *hp = &e->hp;
	uint32_t n = b->n_rows, n_logits;
	shoal_err err = engine_check(e, b, &n_logits, why, why_len);
	if (err)
		return err;

	const uint32_t E = hp->n_embd;
	if (e->cfg.has_embd) {
		const shoal_gguf_tensor *t = e->m->tok_embd;
		ops->embed(e->bk, t->type, e->embd, shoal_dtype_row_bytes(t->type, E), E, b->tokens,
		           n, e->x);
	} else {
		ops->write(e->bk, e->x, b->hidden_in, (size_t)n * E * sizeof(float));
	}

	for (uint32_t il = e->cfg.layer_begin; il < e->cfg.layer_end; il++) {
		const engine__layer *L = &e->layers[il];
		if (e->tp && !hp->mla && (err = engine__tp_attn(e, il, b, why, why_len)))
			goto fail;
		if (hp->mla)
			engine_attn_mla(e, il, b);
		else if (!e->tp)
			engine_attn(e, il, b);
		ops->rms_norm(e->bk, e->x, E, L->ffn_norm, E, n, hp->rms_eps, e->xn, E);
		if (L->moe) {
			err = e->tp ? engine__tp_moe(e, il, n, why, why_len)
			            : engine__moe_ffn(e, il, n, why, why_len);
			if (err)
				goto fail;
		} else if (e->tp) {
			if ((err = engine__tp_ffn(e, il, n, why, why_len)))
				goto fail;
		} else {
			engine__ffn_swiglu(e, &L->gate, &L->up, &L->down, hp->n_ff, n, e->tmp);
		}
		ops->add(e->bk, e->x, E, e->tmp, E, E, n);
	}

	/* the rows' sessions now hold positions up to their last row */
	engine_wrote(e, b);
	for (uint32_t r = 0; r < n; r++)
		e->sess_len[b->session[r]] = b->pos[r] + 1;
	if (b->hidden_out)
		ops->read(e->bk, e->x, b->hidden_out, (size_t)n * E * sizeof(float));
	if (n_logits && (err = engine_logits(e, b, n_logits, why, why_len)))
		goto fail;
	if (!b->hidden_out && !n_logits)
		ops->sync(e->bk);
	return SHOAL_OK;
fail:
	/* the caches of the batch's sessions may hold this batch's positions
	 * for some layers only: forget from the batch's first position on
	 * (what the rings overwrote counted as written) */
	engine_wrote(e, b);
	for (uint32_t r = 0; r < n; r++)
		if (e->sess_len[b->session[r]] > b->pos[r])
			e->sess_len[b->session[r]] = b->pos[r];
	return err;
}
