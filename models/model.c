/*
 * models/model.c: from a GGUF file to a model: architecture, hyper-parameters
 * (read by models/model_hparams.c) and the shape-checked weight tensors of
 * every layer (see model.h).
 *
 * Part: models/. Divisions, in order:
 *   - tensors: find each by name and check its shape against the hparams
 *   - open/free
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensors ------------------------------------------------------------ */

typedef struct t_ctx {
	const shoal_gguf *g;
	char *why;
	size_t why_len;
} t_ctx;

static void shape_str(const uint64_t *ne, int n, char *buf, size_t cap)
{
	size_t o = 0;
	o += (size_t)snprintf(buf + o, cap - o, "{");
	for (int i = 0; i < n && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%llu", i ? ", " : "",
		                      (unsigned long long)ne[i]);
	if (o < cap)
		snprintf(buf + o, cap - o, "}");
}

/* Find `name` and check its shape is exactly ne[0..n) (trailing dims 1).
 * Absent: *out = NULL and an error if required. */
static shoal_err t_get(const t_ctx *c, const char *name, bool required, int n, const uint64_t *ne,
                       const shoal_gguf_tensor **out)
{
	const shoal_gguf_tensor *t = shoal_gguf_tensor_find(c->g, name);
	*out = NULL;
	if (!t) {
		if (required)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
			                 "missing tensor '%s'", name);
		return SHOAL_OK;
	}
	bool ok = true;
	for (int i = 0; i < SHOAL_GGUF_MAX_DIMS; i++)
		if (t->ne[i] != (i < n ? ne[i] : 1))
			ok = false;
	if (!ok) {
		char want[96], got[96];
		shape_str(ne, n, want, sizeof want);
		shape_str(t->ne, (int)t->n_dims, got, sizeof got);
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "tensor '%s': shape %s, expected %s", name, got, want);
	}
	*out = t;
	return SHOAL_OK;
}

#define T_GET(name, req, out, ...)                                                                 \
	do {                                                                                       \
		const uint64_t ne_[] = {__VA_ARGS__};                                              \
		shoal_err e_ = t_get(&c, name, req, (int)(sizeof ne_ / sizeof ne_[0]), ne_, out);  \
		if (e_)                                                                            \
			return e_;                                                                 \
	} while (0)

/* The MLA attention tensors of deepseek2 layer il. */
static shoal_err layer_find_mla(const t_ctx *cp, const shoal_hparams *hp, uint32_t il,
                                shoal_layer *L)
{
	t_ctx c = *cp;
	char n[96];
	uint64_t E = hp->n_embd, H = hp->n_head, q = H * hp->head_dim;
	uint64_t nope = hp->head_dim - hp->n_rot, kvl = hp->kv_lora_rank, qa = hp->q_lora_rank;
#define NAME(s) (snprintf(n, sizeof n, "blk.%u." s ".weight", il), n)
	if (qa) {
		T_GET(NAME("attn_q_a"), true, &L->wq_a, E, qa);
		T_GET(NAME("attn_q_a_norm"), true, &L->q_a_norm, qa);
		T_GET(NAME("attn_q_b"), true, &L->wq_b, qa, q);
	} else {
		T_GET(NAME("attn_q"), true, &L->wq, E, q);
	}
	T_GET(NAME("attn_kv_a_mqa"), true, &L->wkv_a, E, kvl + hp->n_rot);
	T_GET(NAME("attn_kv_a_norm"), true, &L->kv_a_norm, kvl);
	if (hp->mla_kv_b) {
		T_GET(NAME("attn_kv_b"), true, &L->wkv_b, kvl, H * (nope + hp->v_head_dim));
	} else {
		T_GET(NAME("attn_k_b"), true, &L->wk_b, nope, kvl, H);
		T_GET(NAME("attn_v_b"), true, &L->wv_b, kvl, hp->v_head_dim, H);
	}
	T_GET(NAME("attn_output"), true, &L->wo, H * hp->v_head_dim, E);
#undef NAME
	return SHOAL_OK;
}

static shoal_err layer_find(const t_ctx *cp, const shoal_hparams *hp, uint32_t il, shoal_layer *L)
{
	t_ctx c = *cp;
	char n[96];
	uint64_t E = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim,
	         kv = (uint64_t)hp->n_head_kv * hp->head_dim;
	bool oss = hp->arch == SHOAL_ARCH_GPT_OSS;
	bool glm = hp->arch == SHOAL_ARCH_GLM4MOE;
	bool qwen2 = hp->arch == SHOAL_ARCH_QWEN2 || oss || glm;
	bool qknorm = hp->arch == SHOAL_ARCH_QWEN3 || hp->arch == SHOAL_ARCH_QWEN3MOE;
#define NAME(s)  (snprintf(n, sizeof n, "blk.%u." s ".weight", il), n)
#define BNAME(s) (snprintf(n, sizeof n, "blk.%u." s ".bias", il), n)
	T_GET(NAME("attn_norm"), true, &L->attn_norm, E);
	if (hp->mla) {
		shoal_err e = layer_find_mla(&c, hp, il, L);
		if (e)
			return e;
	} else {
		T_GET(NAME("attn_q"), true, &L->wq, E, q);
		T_GET(NAME("attn_k"), true, &L->wk, E, kv);
		T_GET(NAME("attn_v"), true, &L->wv, E, kv);
		T_GET(NAME("attn_output"), true, &L->wo, q, E);
	}
	if (qwen2) {
		T_GET(BNAME("attn_q"), true, &L->bq, q);
		T_GET(BNAME("attn_k"), true, &L->bk, kv);
		T_GET(BNAME("attn_v"), true, &L->bv, kv);
	}
	if (qknorm || glm) { /* GLM-4.5/4.6 have them, GLM-4.5-Air not */
		T_GET(NAME("attn_q_norm"), !glm, &L->q_norm, hp->head_dim);
		T_GET(NAME("attn_k_norm"), !glm, &L->k_norm, hp->head_dim);
		if (!L->q_norm != !L->k_norm)
			return shoal_why(c.why, c.why_len, SHOAL_ERR_FORMAT,
			                 "layer %u has one of attn_q_norm and attn_k_norm", il);
	}
	if (oss) {
		T_GET(BNAME("attn_output"), true, &L->bo, E);
		T_GET(NAME("attn_sinks"), false, &L->attn_sinks, hp->n_head);
	}
	/* gpt-oss and glm4moe name the norm before their FFN post_attention_norm */
	T_GET(oss || glm ? NAME("post_attention_norm") : NAME("ffn_norm"), true, &L->ffn_norm, E);
	if (hp->n_expert == 0 || il < hp->n_layer_dense_lead) {
		T_GET(NAME("ffn_gate"), true, &L->ffn_gate, E, hp->n_ff);
		T_GET(NAME("ffn_up"), true, &L->ffn_up, E, hp->n_ff);
		T_GET(NAME("ffn_down"), true, &L->ffn_down, hp->n_ff, E);
		return SHOAL_OK;
	}
	uint64_t X = hp->n_expert, F = hp->n_ff_exp, S = hp->n_ff_shexp;
	/* Old Mixtral conversions stored one tensor per expert. */
	snprintf(n, sizeof n, "blk.%u.ffn_gate.0.weight", il);
	if (shoal_gguf_tensor_find(c.g, n))
		return shoal_why(c.why, c.why_len, SHOAL_ERR_UNSUPPORTED,
		                 "per-expert tensors ('%s') are not supported: reconvert with "
		                 "stacked ffn_*_exps tensors",
		                 n);
	T_GET(NAME("ffn_gate_inp"), true, &L->ffn_gate_inp, E, X);
	T_GET(NAME("ffn_gate_exps"), true, &L->ffn_gate_exps, E, F, X);
	T_GET(NAME("ffn_up_exps"), true, &L->ffn_up_exps, E, F, X);
	T_GET(NAME("ffn_down_exps"), true, &L->ffn_down_exps, F, E, X);
	if (hp->arch == SHOAL_ARCH_DEEPSEEK2 || glm)
		T_GET(BNAME("exp_probs_b"), false, &L->exp_probs_b, X);
	if (oss) {
		T_GET(BNAME("ffn_gate_inp"), true, &L->ffn_gate_inp_b, X);
		T_GET(BNAME("ffn_gate_exps"), true, &L->ffn_gate_exps_b, F, X);
		T_GET(BNAME("ffn_up_exps"), true, &L->ffn_up_exps_b, F, X);
		T_GET(BNAME("ffn_down_exps"), true, &L->ffn_down_exps_b, E, X);
	}
	if (S) {
		T_GET(NAME("ffn_gate_shexp"), true, &L->ffn_gate_shexp, E, S);
		T_GET(NAME("ffn_up_shexp"), true, &L->ffn_up_shexp, E, S);
		T_GET(NAME("ffn_down_shexp"), true, &L->ffn_down_shexp, S, E);
	}
#undef NAME
#undef BNAME
	return SHOAL_OK;
}

/* The first MTP layer, blk.<n_layer>, when the file holds it: kept in
 * m->nextn (shapes checked like a layer's); a file that declares nextn
 * layers but dropped their tensors (some conversions do) has none. */
static shoal_err nextn_find(const t_ctx *cp, shoal_model *m)
{
	t_ctx c = *cp;
	char n[96];
	const shoal_hparams *hp = &m->hp;
	uint32_t il = hp->n_layer;
	uint64_t E = hp->n_embd, V = hp->n_vocab;
	if (hp->n_nextn == 0)
		return SHOAL_OK;
#define NAME(s) (snprintf(n, sizeof n, "blk.%u.nextn." s ".weight", il), n)
	if (!shoal_gguf_tensor_find(c.g, NAME("eh_proj")))
		return SHOAL_OK;
	shoal_nextn *x = calloc(1, sizeof *x);
	if (!x)
		return shoal_why(c.why, c.why_len, SHOAL_ERR_NOMEM, "out of memory");
	m->nextn = x;
	T_GET(NAME("eh_proj"), true, &x->eh_proj, 2 * E, E);
	T_GET(NAME("enorm"), true, &x->enorm, E);
	T_GET(NAME("hnorm"), true, &x->hnorm, E);
	T_GET(NAME("shared_head_norm"), true, &x->head_norm, E);
	T_GET(NAME("shared_head_head"), false, &x->head, E, V);
	T_GET(NAME("embed_tokens"), false, &x->embd, E, V);
#undef NAME
	if (!x->head)
		x->head = m->output;
	if (!x->embd)
		x->embd = m->tok_embd;
	return layer_find(&c, hp, il, &x->layer);
}

static shoal_err model_find(shoal_model *m, char *why, size_t why_len)
{
	t_ctx c = {.g = m->gguf, .why = why, .why_len = why_len};
	const shoal_hparams *hp0 = &m->hp;
	const shoal_gguf_tensor *te = shoal_gguf_tensor_find(m->gguf, "token_embd.weight");
	if (!te)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "missing tensor 'token_embd.weight'");
	if (te->ne[1] == 0 || te->ne[1] > UINT32_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "tensor 'token_embd.weight': %llu tokens",
		                 (unsigned long long)te->ne[1]);
	m->hp.n_vocab = (uint32_t)te->ne[1];
	T_GET("token_embd.weight", true, &m->tok_embd, hp0->n_embd, hp0->n_vocab);
	T_GET("output_norm.weight", true, &m->output_norm, hp0->n_embd);
	T_GET("output.weight", false, &m->output, hp0->n_embd, hp0->n_vocab);
	if (!m->output) {
		m->output = m->tok_embd;
		m->hp.tied_head = true;
	}
	T_GET("rope_freqs.weight", false, &m->rope_freqs, hp0->n_rot / 2);
	for (uint32_t il = 0; il < hp0->n_layer; il++) {
		shoal_err e = layer_find(&c, hp0, il, &m->layers[il]);
		if (e)
			return e;
	}
	/* glm4moe's NextN layer is skipped: its layer is not DeepSeek's form
	 * that runtime/engine/mtp.c runs */
	return hp0->arch == SHOAL_ARCH_GLM4MOE ? SHOAL_OK : nextn_find(&c, m);
}

size_t shoal_layer_own_tensors(const shoal_layer *L,
                               const shoal_gguf_tensor *out[SHOAL_LAYER_MAX_TENSORS])
{
	/* one line per part: attention, MLA, FFN, routing */
	/* clang-format off */
	const shoal_gguf_tensor *all[] = {
	    L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv, L->q_norm, L->k_norm,
	    L->bo, L->attn_sinks,
	    L->wq_a, L->q_a_norm, L->wq_b, L->wkv_a, L->kv_a_norm, L->wk_b, L->wv_b, L->wkv_b,
	    L->ffn_norm, L->ffn_gate, L->ffn_up, L->ffn_down,
	    L->ffn_gate_inp, L->ffn_gate_inp_b, L->exp_probs_b,
	    L->ffn_gate_shexp, L->ffn_up_shexp, L->ffn_down_shexp};
	/* clang-format on */
	_Static_assert(sizeof all / sizeof all[0] <= SHOAL_LAYER_MAX_TENSORS, "raise the max");
	size_t n = 0;
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i])
			out[n++] = all[i];
	return n;
}

size_t shoal_layer_expert_tensors(const shoal_layer *L,
                                  const shoal_gguf_tensor *out[SHOAL_LAYER_MAX_EXPERT_TENSORS])
{
	const shoal_gguf_tensor *all[] = {L->ffn_gate_inp,  L->ffn_gate_inp_b, L->ffn_gate_exps,
	                                  L->ffn_up_exps,   L->ffn_down_exps,  L->ffn_gate_exps_b,
	                                  L->ffn_up_exps_b, L->ffn_down_exps_b};
	_Static_assert(sizeof all / sizeof all[0] <= SHOAL_LAYER_MAX_EXPERT_TENSORS, "raise it");
	size_t n = 0;
	if (!L->ffn_gate_exps)
		return 0;
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i])
			out[n++] = all[i];
	return n;
}

/* x appended to out[n] unless NULL or there already; the new count. */
static size_t nextn_add(const shoal_gguf_tensor **out, size_t n, const shoal_gguf_tensor *x)
{
	for (size_t i = 0; x && i < n; i++)
		if (out[i] == x)
			return n;
	if (x)
		out[n++] = x;
	return n;
}

size_t shoal_nextn_tensors(const shoal_model *m,
                           const shoal_gguf_tensor *out[SHOAL_NEXTN_MAX_TENSORS])
{
	const shoal_nextn *x = m->nextn;
	if (!x)
		return 0;
	size_t n = 0;
	n = nextn_add(out, n, x->eh_proj);
	n = nextn_add(out, n, x->enorm);
	n = nextn_add(out, n, x->hnorm);
	n = nextn_add(out, n, x->head_norm);
	if (x->head != m->output)
		n = nextn_add(out, n, x->head);
	if (x->embd != m->tok_embd)
		n = nextn_add(out, n, x->embd);
	const shoal_gguf_tensor *ts[SHOAL_LAYER_MAX_TENSORS];
	size_t nt = shoal_layer_own_tensors(&x->layer, ts);
	for (size_t i = 0; i < nt; i++)
		n = nextn_add(out, n, ts[i]);
	const shoal_gguf_tensor *xs[SHOAL_LAYER_MAX_EXPERT_TENSORS];
	size_t nx = shoal_layer_expert_tensors(&x->layer, xs);
	for (size_t i = 0; i < nx; i++)
		n = nextn_add(out, n, xs[i]);
	return n;
}

/* ---- open/free ---------------------------------------------------------- */

shoal_err shoal_model_from_gguf(shoal_gguf *g, shoal_model **out, char *why, size_t why_len)
{
	shoal_err e;
	*out = NULL;
	if (!g)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "no GGUF given");
	shoal_model *m = calloc(1, sizeof *m);
	if (!m) {
		shoal_gguf_free(g);
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	}
	m->gguf = g;

	const char *a;
	size_t al;
	if (!shoal_gguf_get_str(g, "general.architecture", &a, &al)) {
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		              "missing key 'general.architecture' (a string)");
		goto fail;
	}
	int arch = model__arch_find(a, al);
	if (arch < 0) {
		char nb[48];
		e = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		              "architecture '%s' is not supported (supported: llama, qwen2, qwen3, "
		              "qwen3moe, deepseek2, gpt-oss, glm4moe)",
		              model__printable(a, al, nb));
		goto fail;
	}
	if ((e = model__hp_read(g, (shoal_arch)arch, &m->hp, why, why_len)))
		goto fail;
	m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
	if (!m->layers) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((e = model_find(m, why, why_len)))
		goto fail;
	*out = m;
	return SHOAL_OK;
fail:
	shoal_model_free(m);
	return e;
}

shoal_err shoal_model_open(const char *path, shoal_model **out, char *why, size_t why_len)
{
	shoal_gguf *g;
	*out = NULL;
	shoal_err e = shoal_gguf_open(path, &g, why, why_len);
	if (e)
		return e;
	return shoal_model_from_gguf(g, out, why, why_len);
}

void shoal_model_free(shoal_model *m)
{
	if (!m)
		return;
	shoal_gguf_free(m->gguf);
	free(m->layers);
	free(m->nextn);
	free(m);
}
