/*
 * models/model_hparams.c: a model's architecture names and its
 * hyper-parameters from the GGUF metadata (<arch>.* keys, defaults and
 * sanity bounds), for models/model.c (see model.h, model_impl.h).
 *
 * Part: models/. Divisions: architectures, hyper-parameters (the common
 * keys, then deepseek2's MLA and routing, rope scaling, gpt-oss).
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- architectures ------------------------------------------------------ */

static const char *const arch_names[SHOAL_ARCH__COUNT] = {
    [SHOAL_ARCH_LLAMA] = "llama",         [SHOAL_ARCH_QWEN2] = "qwen2",
    [SHOAL_ARCH_QWEN3] = "qwen3",         [SHOAL_ARCH_QWEN3MOE] = "qwen3moe",
    [SHOAL_ARCH_DEEPSEEK2] = "deepseek2", [SHOAL_ARCH_GPT_OSS] = "gpt-oss",
    [SHOAL_ARCH_GLM4MOE] = "glm4moe",
};

const char *shoal_arch_name(shoal_arch a)
{
	return (unsigned)a < SHOAL_ARCH__COUNT ? arch_names[a] : "?";
}

int model__arch_find(const char *a, size_t al)
{
	for (int i = 0; i < SHOAL_ARCH__COUNT; i++)
		if (strlen(arch_names[i]) == al && !memcmp(arch_names[i], a, al))
			return i;
	return -1;
}

/* Copy an untrusted string for a message: at most 40 bytes, printable. */
const char *model__printable(const char *s, size_t len, char out[48])
{
	size_t n = len < 40 ? len : 40;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	out[n] = '\0';
	return out;
}

/* ---- hyper-parameters --------------------------------------------------- */

/* Largest values we accept: far above any released model, low enough that
 * products of two of them stay far from 2^64 in the manifest arithmetic. */
#define MODEL_MAX_DIM     (1u << 20) /* n_embd, n_ff, head_dim, ... */
#define MODEL_MAX_HEADS   (1u << 12) /* n_head, n_head_kv */
#define MODEL_MAX_EXPERTS (1u << 12)
/* Released models have at most ~128 layers; 4096 keeps the per-layer table
 * (about 150 bytes a layer) under 1 MB before any tensor is checked. */
#define MODEL_MAX_LAYERS 4096u

typedef struct hp_ctx {
	const shoal_gguf *g;
	const char *arch;
	char *why;
	size_t why_len;
} hp_ctx;

/* key[128] = <arch>.<suffix>; *present whether the file has it. FORMAT
 * when it is required and absent. */
static shoal_err hp_key(const hp_ctx *c, const char *suffix, bool required, char *key,
                        bool *present)
{
	snprintf(key, 128, "%s.%s", c->arch, suffix);
	*present = shoal_gguf_find(c->g, key) >= 0;
	if (!*present && required)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT, "missing key '%s'", key);
	return SHOAL_OK;
}

/* <arch>.<suffix> as a u32; `def` if absent and not required. */
static shoal_err hp_u32(const hp_ctx *c, const char *suffix, bool required, uint32_t def,
                        uint32_t lo, uint32_t hi, uint32_t *out)
{
	char key[128];
	bool present;
	shoal_err e = hp_key(c, suffix, required, key, &present);
	if (e || !present) {
		*out = def;
		return e;
	}
	uint64_t v;
	if (!shoal_gguf_get_u64(c->g, key, &v))
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "key '%s' is not a non-negative integer", key);
	if (v < lo || v > hi)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "key '%s' = %llu out of range [%u, %u]", key,
		                 (unsigned long long)v, lo, hi);
	*out = (uint32_t)v;
	return SHOAL_OK;
}

static shoal_err hp_f32(const hp_ctx *c, const char *suffix, bool required, float def, float *out)
{
	char key[128];
	bool present;
	shoal_err e = hp_key(c, suffix, required, key, &present);
	if (e || !present) {
		*out = def;
		return e;
	}
	float v;
	if (!shoal_gguf_get_f32(c->g, key, &v))
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT, "key '%s' is not a float",
		                 key);
	if (!isfinite(v) || v <= 0)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "key '%s' = %g must be finite and positive", key, (double)v);
	*out = v;
	return SHOAL_OK;
}

/* <arch>.<suffix> as a bool; `def` if absent. */
static shoal_err hp_bool(const hp_ctx *c, const char *suffix, bool def, bool *out)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
	*out = def;
	if (shoal_gguf_find(c->g, key) >= 0 && !shoal_gguf_get_bool(c->g, key, out))
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT, "key '%s' is not a bool",
		                 key);
	return SHOAL_OK;
}

/* deepseek2 attention: MLA in the split form current conversion writes
 * (attn_k_b, attn_v_b; key_length = kv_lora + rope, the row cached per
 * token, and key_length_mla = nope + rope, a query head), or the older
 * form (one attn_kv_b; key_length and value_length are a head's, and
 * head_count_kv = head_count), which the engine turns into the split one. */
static shoal_err hp_read_mla(const hp_ctx *c, shoal_hparams *hp)
{
	shoal_err e;
	uint32_t klen, vlen;
	hp->mla = true;
	hp->mla_kv_b = shoal_gguf_find(c->g, "deepseek2.attention.key_length_mla") < 0;
	const char *klen_key = hp->mla_kv_b ? "attention.key_length" : "attention.key_length_mla";
	const char *vlen_key =
	    hp->mla_kv_b ? "attention.value_length" : "attention.value_length_mla";
	if ((e = hp_u32(c, "attention.q_lora_rank", false, 0, 0, MODEL_MAX_DIM,
	                &hp->q_lora_rank)) ||
	    (e = hp_u32(c, "attention.kv_lora_rank", true, 0, 1, MODEL_MAX_DIM,
	                &hp->kv_lora_rank)) ||
	    (e = hp_u32(c, klen_key, true, 0, 2, MODEL_MAX_DIM, &hp->head_dim)) ||
	    (e = hp_u32(c, vlen_key, true, 0, 1, MODEL_MAX_DIM, &hp->v_head_dim)) ||
	    (e = hp_u32(c, "rope.dimension_count", true, 0, 2, hp->head_dim - 1, &hp->n_rot)))
		return e;
	if (hp->n_rot % 2)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "rope dimension count %u is odd", hp->n_rot);
	if (hp->mla_kv_b) {
		if (hp->n_head_kv != hp->n_head)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "deepseek2 without key_length_mla: %u KV heads of %u "
			                 "heads (the attn_kv_b form has as many)",
			                 hp->n_head_kv, hp->n_head);
		hp->n_head_kv = 1; /* one latent row serves every head */
		return SHOAL_OK;
	}
	uint32_t row = hp->kv_lora_rank + hp->n_rot;
	if ((e = hp_u32(c, "attention.key_length", false, row, 1, MODEL_MAX_DIM, &klen)) ||
	    (e = hp_u32(c, "attention.value_length", false, hp->kv_lora_rank, 1, MODEL_MAX_DIM,
	                &vlen)))
		return e;
	if (klen != row || vlen != hp->kv_lora_rank || hp->n_head_kv != 1)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
		                 "deepseek2: key length %u, value length %u, %u KV heads; the "
		                 "MLA form needs %u, %u and 1",
		                 klen, vlen, hp->n_head_kv, row, hp->kv_lora_rank);
	return SHOAL_OK;
}

/* deepseek2 FFN and routing: leading dense layers, shared experts, gating,
 * groups, weight scale; MTP (nextn) layers are dropped from n_layer. */
static shoal_err hp_read_ds2_moe(const hp_ctx *c, shoal_hparams *hp)
{
	shoal_err e;
	uint32_t gf;
	if ((e = hp_u32(c, "nextn_predict_layers", false, 0, 0, hp->n_layer - 1, &hp->n_nextn)))
		return e;
	hp->n_layer -= hp->n_nextn;
	if ((e = hp_u32(c, "leading_dense_block_count", false, 0, 0, hp->n_layer,
	                &hp->n_layer_dense_lead)) ||
	    (e = hp_u32(c, "feed_forward_length", hp->n_layer_dense_lead > 0, 0, 0, MODEL_MAX_DIM,
	                &hp->n_ff)) ||
	    (e = hp_u32(c, "expert_feed_forward_length", true, 0, 1, MODEL_MAX_DIM,
	                &hp->n_ff_exp)) ||
	    (e = hp_u32(c, "expert_shared_count", false, 0, 0, 64, &hp->n_expert_shared)) ||
	    /* glm4moe routes by sigmoid when its file says nothing */
	    (e = hp_u32(c, "expert_gating_func", false, hp->arch == SHOAL_ARCH_GLM4MOE ? 2 : 0, 0,
	                UINT32_MAX, &gf)) ||
	    (e = hp_u32(c, "expert_group_count", false, 0, 0, SHOAL_MOE_MAX_GROUPS,
	                &hp->n_expert_group)) ||
	    (e = hp_u32(c, "expert_group_used_count", false, 0, 0, hp->n_expert,
	                &hp->n_expert_group_used)) ||
	    (e = hp_f32(c, "expert_weights_scale", false, 1.0f, &hp->expert_weights_scale)) ||
	    (e = hp_bool(c, "expert_weights_norm", false, &hp->expert_weights_norm)))
		return e;
	if (hp->n_layer_dense_lead > 0 && hp->n_ff == 0)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "%u leading dense layers but feed_forward_length is 0",
		                 hp->n_layer_dense_lead);
	hp->n_ff_shexp = hp->n_expert_shared * hp->n_ff_exp;
	/* 0 is what files from before the key have (V2, V2.5): softmax */
	if (gf > 2)
		return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
		                 "expert gating function %u is not supported (1 softmax, 2 "
		                 "sigmoid)",
		                 gf);
	hp->gating = gf == 2 ? SHOAL_MOE_GATING_SIGMOID : SHOAL_MOE_GATING_SOFTMAX;
	if (hp->n_expert_group > 1) {
		uint32_t per = hp->n_expert / hp->n_expert_group;
		/* a group scores by its two best experts */
		if (hp->n_expert % hp->n_expert_group || per < 2 || hp->n_expert_group_used < 1 ||
		    (uint64_t)hp->n_expert_group_used * per < hp->n_expert_used)
			return shoal_why(
			    c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			    "%u experts in %u groups, %u groups used, %u experts used: "
			    "groups must be equal, of 2 or more, and hold the used "
			    "experts",
			    hp->n_expert, hp->n_expert_group, hp->n_expert_group_used,
			    hp->n_expert_used);
	}
	return SHOAL_OK;
}

/* rope.scaling.*: none, linear (positions divided by the factor) or yarn
 * (deepseek2 only). */
static shoal_err hp_read_rope_scaling(const hp_ctx *c, shoal_hparams *hp)
{
	char key[128], nb[48];
	const char *st;
	size_t stl;
	shoal_err e;
	float factor = 1.0f;
	snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch);
	bool linear = false, yarn = false;
	if (shoal_gguf_get_str(c->g, key, &st, &stl)) {
		if (stl == 6 && !memcmp(st, "linear", 6))
			linear = true;
		else if (stl == 4 && !memcmp(st, "yarn", 4) &&
		         (hp->arch == SHOAL_ARCH_DEEPSEEK2 || hp->arch == SHOAL_ARCH_GPT_OSS))
			yarn = true;
		else if (!(stl == 4 && !memcmp(st, "none", 4)))
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "rope scaling '%s' is not supported for %s (linear%s)",
			                 model__printable(st, stl, nb), c->arch,
			                 hp->arch == SHOAL_ARCH_DEEPSEEK2 ||
			                         hp->arch == SHOAL_ARCH_GPT_OSS
			                     ? ", yarn"
			                     : "");
	}
	if ((linear || yarn) && (e = hp_f32(c, "rope.scaling.factor", false, 1.0f, &factor)))
		return e;
	if (!linear && !yarn && (e = hp_f32(c, "rope.scale_linear", false, 1.0f, &factor)))
		return e;
	hp->rope_freq_scale = 1.0f / factor;
	hp->yarn_mscale = 1.0f;
	if (!yarn)
		return SHOAL_OK;
	/* the reference's defaults: ramp between 32 and 1 rotations, full
	 * extrapolation mix, original context = training context */
	/* gpt-oss's files carry no log multiplier: the reference's rope
	 * scales cos and sin by 1 + 0.1 ln(factor) itself (YaRN's mscale),
	 * on the query and the key, so the scores by its square */
	float log_mul = hp->arch == SHOAL_ARCH_GPT_OSS ? 0.1f : 0.0f, attn_factor = 1.0f;
	hp->rope_yarn = true;
	if ((e = hp_u32(c, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1,
	                UINT32_MAX, &hp->n_ctx_orig)) ||
	    (e = hp_f32(c, "rope.scaling.yarn_ext_factor", false, 1.0f, &hp->yarn_ext_factor)) ||
	    (e = hp_f32(c, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->yarn_beta_fast)) ||
	    (e = hp_f32(c, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->yarn_beta_slow)) ||
	    (e = hp_f32(c, "rope.scaling.attn_factor", false, 1.0f, &attn_factor)))
		return e;
	snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", c->arch);
	if (shoal_gguf_find(c->g, key) >= 0 &&
	    (!shoal_gguf_get_f32(c->g, key, &log_mul) || !isfinite(log_mul) || log_mul < 0))
		return shoal_why(c->why, c->why_len, SHOAL_ERR_FORMAT,
		                 "key '%s' is not a non-negative float", key);
	/* DeepSeek's softmax_scale correction: mscale^2 on the scores */
	hp->yarn_mscale = attn_factor * (1.0f + log_mul * logf(factor));
	return SHOAL_OK;
}

/* gpt-oss: sliding window on the even layers, top-k then softmax routing,
 * the clamped SwiGLU. alpha 1.702 and limit 7.0 are the reference's
 * constants (its files carry no key for them). */
static shoal_err hp_read_oss(const hp_ctx *c, shoal_hparams *hp)
{
	hp->gating = SHOAL_MOE_GATING_SOFTMAX_TOPK;
	hp->swa_period = 2;
	hp->swiglu_oai = true;
	hp->swiglu_alpha = 1.702f;
	hp->swiglu_limit = 7.0f;
	return hp_u32(c, "attention.sliding_window", false, 0, 0, UINT32_MAX, &hp->n_swa);
}

bool shoal_hparams_layer_swa(const shoal_hparams *hp, uint32_t il)
{
	return hp->n_swa > 0 && hp->swa_period > 0 && il % hp->swa_period != hp->swa_period - 1;
}

shoal_err model__hp_read(const shoal_gguf *g, shoal_arch arch, shoal_hparams *hp, char *why,
                         size_t why_len)
{
	hp_ctx c = {.g = g, .arch = arch_names[arch], .why = why, .why_len = why_len};
	shoal_err e;
	bool ds2 = arch == SHOAL_ARCH_DEEPSEEK2;
	bool oss = arch == SHOAL_ARCH_GPT_OSS;
	bool glm = arch == SHOAL_ARCH_GLM4MOE;
	bool moe = arch == SHOAL_ARCH_QWEN3MOE || ds2 || oss || glm;
	memset(hp, 0, sizeof *hp);
	hp->arch = arch;
	hp->rope_type = arch == SHOAL_ARCH_LLAMA || ds2 ? SHOAL_ROPE_NORM : SHOAL_ROPE_NEOX;
	hp->gating = SHOAL_MOE_GATING_SOFTMAX;
	hp->expert_weights_scale = 1.0f;

	if ((e = hp_u32(&c, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &hp->n_layer)))
		return e;
	if ((e = hp_u32(&c, "embedding_length", true, 0, 1, MODEL_MAX_DIM, &hp->n_embd)))
		return e;
	if ((e = hp_u32(&c, "attention.head_count", true, 0, 1, MODEL_MAX_HEADS, &hp->n_head)))
		return e;
	if ((e = hp_u32(&c, "attention.head_count_kv", false, hp->n_head, 1, MODEL_MAX_HEADS,
	                &hp->n_head_kv)))
		return e;
	if (hp->n_head % hp->n_head_kv)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%u attention heads are not a multiple of %u KV heads", hp->n_head,
		                 hp->n_head_kv);
	if (ds2 && (e = hp_read_mla(&c, hp)))
		return e;
	if (!ds2) {
		uint32_t def_hd = hp->n_embd / hp->n_head;
		if ((e = hp_u32(&c, "attention.key_length", false, def_hd, 1, MODEL_MAX_DIM,
		                &hp->head_dim)))
			return e;
		uint32_t vlen;
		if ((e = hp_u32(&c, "attention.value_length", false, hp->head_dim, 1, MODEL_MAX_DIM,
		                &vlen)))
			return e;
		if (vlen != hp->head_dim)
			return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
			                 "key length %u != value length %u is not supported",
			                 hp->head_dim, vlen);
		if (hp->head_dim % 2)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "head dimension %u is odd",
			                 hp->head_dim);
		if ((e = hp_u32(&c, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim,
		                &hp->n_rot)))
			return e;
		if (hp->n_rot % 2)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "rope dimension count %u is odd", hp->n_rot);
	}
	if ((e = hp_u32(&c, "context_length", true, 0, 1, UINT32_MAX, &hp->n_ctx_train)))
		return e;
	if ((e = hp_f32(&c, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps)))
		return e;
	if ((e = hp_f32(&c, "rope.freq_base", false, 10000.0f, &hp->rope_freq_base)))
		return e;

	if ((e = hp_read_rope_scaling(&c, hp)))
		return e;

	/* Experts: llama (Mixtral) and qwen3moe. */
	if ((e = hp_u32(&c, "expert_count", moe, 0, 0, MODEL_MAX_EXPERTS, &hp->n_expert)))
		return e;
	if (moe && hp->n_expert == 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s.expert_count is 0", c.arch);
	if (hp->n_expert > 0 && arch != SHOAL_ARCH_LLAMA && !moe)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "experts in a '%s' model are not supported", c.arch);
	if (hp->n_expert > 0) {
		if ((e = hp_u32(&c, "expert_used_count", true, 0, 1, hp->n_expert,
		                &hp->n_expert_used)))
			return e;
		if (ds2 || glm) /* the same keys: dense lead, shared experts, routing */
			return hp_read_ds2_moe(&c, hp);
		uint32_t ff = 0;
		if ((e = hp_u32(&c, "feed_forward_length", !moe, 0, 0, MODEL_MAX_DIM, &ff)))
			return e;
		/* Mixtral's experts are feed_forward_length wide; qwen3moe says
		 * expert_feed_forward_length (the reference engine falls back to
		 * feed_forward_length / expert_used_count). */
		uint32_t def_ff_exp = moe ? ff / hp->n_expert_used : ff;
		if ((e = hp_u32(&c, "expert_feed_forward_length", false, def_ff_exp, 1,
		                MODEL_MAX_DIM, &hp->n_ff_exp)))
			return e;
		if (hp->n_ff_exp == 0)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "no expert FFN width (%s.expert_feed_forward_length)",
			                 c.arch);
		/* The reference engine renormalises the top-k softmax weights
		 * for both Mixtral (llama) and qwen3moe (norm_w = true in its
		 * build_moe_ffn calls); a file may say otherwise. */
		if ((e = hp_bool(&c, "expert_weights_norm", !oss, &hp->expert_weights_norm)))
			return e;
		if (oss && (e = hp_read_oss(&c, hp)))
			return e;
	} else {
		if ((e = hp_u32(&c, "feed_forward_length", true, 0, 1, MODEL_MAX_DIM, &hp->n_ff)))
			return e;
	}
	return SHOAL_OK;
}
