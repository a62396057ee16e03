/*
 * models/spec.c: JSON model spec -> shoal_manifest (bytes, FLOPs and KV per
 * layer and per expert) by counting the weights each layer has.
 *
 * Part: models/. Divisions: quant types, reading fields, counting, the
 * manifest. Counting rules: matrices are stored at the spec's bits per
 * weight, norm vectors and the MoE router at F32 (as GGUF files keep them);
 * FLOPs are 2 per weight of a matrix; the KV cache is F16 (as the engine
 * keeps it, SHOAL_MANIFEST_KV_ELT bytes an element): GQA caches K and V
 * (2 x kv_heads x head_dim per token), MLA the compressed latent and the
 * rope key (kv_lora_rank + qk_rope_head_dim).
 */
#include "models/spec.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- quant types ------------------------------------------------------- */

/* Mixes are averages over the reference quantizer's choice per tensor:
 * Q4_K_M 4.85 (Q4_K, Q6_K for some attn_v/ffn_down and the output);
 * Q2_K 2.95 (in MoE models: experts' gate/up Q2_K at 2.625, ffn_down Q3_K
 * at 3.4375, average 2.90, plus Q3_K-Q6_K attention and output); IQ4_XS
 * 4.26 (136 bytes per 256 = 4.25, a few larger tensors). */
static const struct {
	const char *name;
	uint32_t mbits;
} spec_quants[] = {
    {"F32", 32000},   {"F16", 16000}, {"BF16", 16000}, {"Q8_0", 8500},   {"Q6_K", 6562},
    {"Q4_K_M", 4850}, {"Q4_0", 4500}, {"Q2_K", 2950},  {"IQ4_XS", 4260},
};

uint32_t shoal_spec_quant_mbits(const char *quant)
{
	for (size_t i = 0; i < sizeof spec_quants / sizeof spec_quants[0]; i++)
		if (!strcmp(quant, spec_quants[i].name))
			return spec_quants[i].mbits;
	return 0;
}

/* ---- reading fields ---------------------------------------------------- */

/* Dimensions up to 2^20 (the widest published models are ~2^15 wide) and
 * counts up to 4096 (experts) keep every product below 2^63; layers up to
 * 1024, the scheduler's limit (published models have <= 128). */
#define SPEC_DIM_MAX   (1u << 20)
#define SPEC_COUNT_MAX 4096u
#define SPEC_LAYER_MAX 1024u

static shoal_err get_u32(const json_t *o, const char *key, bool required, uint32_t def,
                         uint32_t max, uint32_t *out, char *why, size_t why_len)
{
	const json_t *v = json_object_get(o, key);
	if (!v) {
		if (required)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "spec: missing \"%s\"",
			                 key);
		*out = def;
		return SHOAL_OK;
	}
	if (!json_is_integer(v))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "spec: \"%s\" is not an integer",
		                 key);
	json_int_t x = json_integer_value(v);
	if (x < 0 || (uint64_t)x > max)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "spec: \"%s\" = %lld not in 0..%u",
		                 key, (long long)x, max);
	*out = (uint32_t)x;
	return SHOAL_OK;
}

typedef struct spec_hp {
	uint32_t layers, dim, heads, kv_heads, head_dim, ffn, vocab;
	uint32_t experts, experts_used, expert_ffn, shared, shared_ffn, dense_first;
	bool mla, tied, qk_norm;
	uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
	uint32_t mbits;
	uint32_t swa, swa_period; /* sliding window; every period-th layer, from the
	                             last of each period, attends to all */
	uint32_t nextn;           /* MTP layers after the main ones (DeepSeek's:
	                             one); the first is counted (mtp_bytes) */
} spec_hp;

#define GET(key, req, def, max, dst)                                                               \
	do {                                                                                       \
		e = get_u32(j, key, req, def, max, dst, why, why_len);                             \
		if (e)                                                                             \
			return e;                                                                  \
	} while (0)

static shoal_err read_hp(const json_t *j, spec_hp *h, shoal_spec_info *info, char *why,
                         size_t why_len)
{
	shoal_err e;
	memset(h, 0, sizeof *h);
	GET("layers", true, 0, SPEC_LAYER_MAX, &h->layers);
	GET("dim", true, 0, SPEC_DIM_MAX, &h->dim);
	GET("heads", true, 0, SPEC_DIM_MAX, &h->heads);
	GET("kv_heads", false, h->heads, SPEC_DIM_MAX, &h->kv_heads);
	if (!h->layers || !h->dim || !h->heads || !h->kv_heads)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "spec: layers, dim, heads and kv_heads must be positive");
	GET("head_dim", false, h->dim / h->heads, SPEC_DIM_MAX, &h->head_dim);
	GET("ffn", false, 0, SPEC_DIM_MAX, &h->ffn);
	GET("vocab", true, 0, SPEC_DIM_MAX, &h->vocab);
	GET("experts", false, 0, SPEC_COUNT_MAX, &h->experts);
	GET("experts_used", false, 0, SPEC_COUNT_MAX, &h->experts_used);
	GET("expert_ffn", false, 0, SPEC_DIM_MAX, &h->expert_ffn);
	GET("shared_experts", false, 0, SPEC_COUNT_MAX, &h->shared);
	GET("shared_expert_ffn", false, h->expert_ffn, SPEC_DIM_MAX, &h->shared_ffn);
	GET("dense_first_layers", false, h->experts ? 0 : h->layers, h->layers, &h->dense_first);
	GET("nextn_layers", false, 0, 1, &h->nextn);
	GET("sliding_window", false, 0, SPEC_DIM_MAX, &h->swa);
	GET("sliding_period", false, 2, SPEC_LAYER_MAX, &h->swa_period);
	if (h->swa && h->swa_period < 2)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "spec: sliding_period must be at least 2 (every period-th "
		                 "layer attends to the whole context)");
	if (h->experts && (!h->experts_used || h->experts_used > h->experts || !h->expert_ffn))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "spec: an MoE needs 1 <= experts_used <= experts and expert_ffn");
	if (h->dense_first && !h->ffn)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "spec: dense layers need \"ffn\"");
	const json_t *att = json_object_get(j, "attention");
	if (att && !json_is_string(att))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "spec: \"attention\" is not a string");
	if (att && !strcmp(json_string_value(att), "mla")) {
		h->mla = true;
		GET("q_lora_rank", false, 0, SPEC_DIM_MAX, &h->q_lora);
		GET("kv_lora_rank", true, 0, SPEC_DIM_MAX, &h->kv_lora);
		GET("qk_nope_head_dim", true, 0, SPEC_DIM_MAX, &h->qk_nope);
		GET("qk_rope_head_dim", true, 0, SPEC_DIM_MAX, &h->qk_rope);
		GET("v_head_dim", true, 0, SPEC_DIM_MAX, &h->v_head);
	} else if (att && strcmp(json_string_value(att), "gqa")) {
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "spec: attention \"%s\": known kinds are gqa and mla",
		                 json_string_value(att));
	}
	const json_t *t = json_object_get(j, "tied_head");
	if (t && !json_is_boolean(t))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "spec: \"tied_head\" is not a boolean");
	h->tied = t && json_is_true(t);
	t = json_object_get(j, "qk_norm");
	h->qk_norm = t && json_is_true(t);

	const json_t *q = json_object_get(j, "quant");
	const json_t *bpw = json_object_get(j, "bits_per_weight");
	snprintf(info->quant, sizeof info->quant, "custom");
	if (q) {
		if (!json_is_string(q))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "spec: \"quant\" is not a string");
		h->mbits = shoal_spec_quant_mbits(json_string_value(q));
		snprintf(info->quant, sizeof info->quant, "%s", json_string_value(q));
	}
	if (bpw) {
		if (!json_is_number(bpw))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "spec: \"bits_per_weight\" is not a number");
		double b = json_number_value(bpw);
		if (!(b >= 1.0 && b <= 32.0))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "spec: bits_per_weight %g not in 1..32", b);
		/* one rounding, to millibits, here; integers from then on */
		h->mbits = (uint32_t)lround(b * 1000.0);
	}
	if (!h->mbits)
		return shoal_why(
		    why, why_len, SHOAL_ERR_UNSUPPORTED,
		    "spec: quant \"%s\" unknown: give \"bits_per_weight\" (known: F32, "
		    "F16, BF16, Q8_0, Q6_K, Q4_K_M, Q4_0, Q2_K, IQ4_XS)",
		    q ? json_string_value(q) : "(none)");
	info->mbits_per_weight = h->mbits;
	return SHOAL_OK;
}

/* ---- counting ---------------------------------------------------------- */

static uint64_t qbytes(uint64_t n_weights, uint32_t mbits)
{
	return (n_weights * mbits + 7999) / 8000;
}

/* At most 2^48 weights in all (~281 trillion; the largest published models
 * have ~2^41): every per-layer count stays below 2^63 by the field limits
 * above, but their sum over 1024 layers, and a count times 32000 millibits,
 * would not. Below this bound every byte and FLOP figure fits 64 bits. */
#define SPEC_PARAMS_MAX (1ull << 48)

/* False if the total weight count wraps 64 bits (m is then unusable). */
static bool fill(const spec_hp *h, shoal_manifest *m, shoal_spec_info *info)
{
	bool wrap = false;
	uint64_t D = h->dim, H = h->heads;
	uint64_t attn_w, attn_f32, kv, attn_fl;
	if (h->mla) {
		uint64_t qk = h->qk_nope + h->qk_rope;
		attn_w = (h->q_lora ? D * h->q_lora + (uint64_t)h->q_lora * H * qk : D * H * qk) +
		         D * (h->kv_lora + h->qk_rope) +
		         (uint64_t)h->kv_lora * H * (h->qk_nope + h->v_head) + H * h->v_head * D;
		attn_f32 = (uint64_t)h->q_lora + h->kv_lora;
		kv = ((uint64_t)h->kv_lora + h->qk_rope) * SHOAL_MANIFEST_KV_ELT;
		/* absorbed MLA: scores over the latent + rope key, values from the
		 * latent: per head 2 * (kv_lora + rope) + 2 * kv_lora FLOPs */
		attn_fl = H * 2 * (2ULL * h->kv_lora + h->qk_rope);
	} else {
		uint64_t hd = h->head_dim;
		attn_w = D * H * hd * 2 + D * h->kv_heads * hd * 2;
		attn_f32 = h->qk_norm ? 2 * hd : 0;
		kv = 2ULL * h->kv_heads * hd * SHOAL_MANIFEST_KV_ELT;
		attn_fl = 4 * H * hd; /* QK^T and AV: 2 FLOPs each per query element */
	}
	uint64_t norms = 2 * D + attn_f32; /* attn_norm, ffn_norm (+ attention's) */
	info->n_params = info->n_params_active = 0;
	for (uint32_t l = 0; l < h->layers; l++) {
		shoal_manifest_layer *y = &m->layers[l];
		bool dense = l < h->dense_first || !h->experts;
		uint64_t mat = attn_w, f32 = norms;
		if (dense) {
			mat += 3 * D * h->ffn;
		} else {
			mat += 3 * D * (uint64_t)h->shared * h->shared_ffn;
			f32 += D * h->experts; /* router */
			y->n_expert = h->experts;
			y->n_expert_used = h->experts_used;
			y->expert_bytes = qbytes(3 * D * h->expert_ffn, h->mbits);
			y->expert_flops = 2 * 3 * D * h->expert_ffn;
		}
		y->bytes = qbytes(mat, h->mbits) + 4 * f32;
		y->flops = 2 * mat + (dense ? 0 : 2 * D * h->experts);
		y->kv_bytes_per_token = kv;
		y->attn_flops_per_ctx = attn_fl;
		/* a sliding layer keeps a ring (models/manifest.c alike) */
		if (h->swa && l % h->swa_period != h->swa_period - 1)
			y->kv_positions = h->swa + SHOAL_MANIFEST_KV_RING_ROWS;
		/* tensor groups split GQA attention by KV heads (MLA's latent
		 * cache is shared by every head: its attention stays whole on
		 * every member) */
		y->n_head_kv = h->mla ? 0 : h->kv_heads;
		y->attn_bytes = qbytes(attn_w, h->mbits);
		y->n_ff = dense ? h->ffn : 0;
		uint64_t exp_w = dense ? 0 : 3 * D * h->expert_ffn;
		wrap |= __builtin_add_overflow(info->n_params, mat + f32 + exp_w * h->experts,
		                               &info->n_params);
		info->n_params_active += mat + f32 + exp_w * h->experts_used;
	}
	if (h->nextn) {
		/* the MTP layer: a layer of the kind that follows the last
		 * one, its projection {2 D, D} and three norms (enorm, hnorm,
		 * its head's); embedding and head shared with the model's */
		bool dense = h->layers < h->dense_first || !h->experts;
		uint64_t mat = attn_w + 2 * D * D, f32 = norms + 3 * D, exp_w = 0;
		if (dense) {
			mat += 3 * D * h->ffn;
		} else {
			mat += 3 * D * (uint64_t)h->shared * h->shared_ffn;
			f32 += D * h->experts;
			exp_w = 3 * D * h->expert_ffn;
		}
		m->mtp_bytes =
		    qbytes(mat, h->mbits) + 4 * f32 + h->experts * qbytes(exp_w, h->mbits);
		m->mtp_kv_bytes_per_token = kv;
		m->mtp_shares_embd = true;
		/* not in n_params: published counts leave it out (V3: 671B) */
	}
	uint64_t emb = D * h->vocab;
	m->n_layer = h->layers;
	m->n_embd = h->dim;
	m->n_vocab = h->vocab;
	m->embd_bytes = qbytes(emb, h->mbits);
	m->head_bytes = 4 * D + qbytes(emb, h->mbits); /* output norm + matrix */
	m->head_flops = 2 * emb;
	m->tied_head = h->tied;
	m->act_bytes_per_token = 4 * D;
	wrap |=
	    __builtin_add_overflow(info->n_params, D + emb * (h->tied ? 1 : 2), &info->n_params);
	info->n_params_active += D + emb * (h->tied ? 1 : 2);
	return !wrap;
}

/* ---- the manifest ------------------------------------------------------ */

static shoal_err from_json(const json_t *j, shoal_manifest *m, shoal_spec_info *info, char *why,
                           size_t why_len)
{
	shoal_spec_info tmp;
	if (!info)
		info = &tmp;
	memset(info, 0, sizeof *info);
	memset(m, 0, sizeof *m);
	if (!json_is_object(j))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "spec: not a JSON object");
	spec_hp h;
	shoal_err e = read_hp(j, &h, info, why, why_len);
	if (e)
		return e;
	const json_t *name = json_object_get(j, "name");
	snprintf(m->name, sizeof m->name, "%s",
	         json_is_string(name) ? json_string_value(name) : "unnamed");
	m->layers = calloc(h.layers, sizeof *m->layers);
	if (!m->layers)
		return SHOAL_ERR_NOMEM;
	if (!fill(&h, m, info) || info->n_params > SPEC_PARAMS_MAX) {
		shoal_spec_manifest_fini(m);
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "spec: more than 2^48 weights in all; check the sizes");
	}
	return SHOAL_OK;
}

shoal_err shoal_spec_parse(const char *text, size_t len, shoal_manifest *m, shoal_spec_info *info,
                           char *why, size_t why_len)
{
	json_error_t err;
	json_t *j = json_loadb(text, len, 0, &err);
	if (!j)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "spec: %s at line %d", err.text,
		                 err.line);
	shoal_err e = from_json(j, m, info, why, why_len);
	json_decref(j);
	return e;
}

shoal_err shoal_spec_load(const char *path, shoal_manifest *m, shoal_spec_info *info, char *why,
                          size_t why_len)
{
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	if (!j)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: %s (line %d)", path, err.text,
		                 err.line);
	shoal_err e = from_json(j, m, info, why, why_len);
	json_decref(j);
	return e;
}

void shoal_spec_manifest_fini(shoal_manifest *m)
{
	if (!m)
		return;
	free(m->layers);
	m->layers = NULL;
}
