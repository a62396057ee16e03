/*
 * tests/helpers/gen_fixture.c: write a random-weight GGUF model for tests and
 * benchmarks (llama, qwen2, qwen3, qwen3moe, deepseek2, gpt-oss, glm4moe; dense or MoE;
 * any stored type). deepseek2 is DeepSeek V3's layout: MLA attention (optional
 * q_lora), leading dense layers, shared + routed experts, grouped routing,
 * and optional MTP (nextn) layers after the main ones. gpt-oss is OpenAI's:
 * q/k/v/o biases, attention sinks (--no-sinks drops them), a sliding window
 * on the even layers (--window N), router and expert biases.
 *
 * Part: tests (models/). Deterministic for a seed: every tensor draws from
 * its own stream seeded by (seed, tensor name), so a split file holds the
 * same bytes as the unsplit one. Tensors stream to the file row by row, so
 * a 1 GB fixture needs a few MB of memory. The vocabulary is SentencePiece
 * style (<unk>, <s>, </s>, byte tokens <0x00>..<0xFF>, then letter pieces),
 * enough for `shoal run` to tokenize any text by byte fallback. Usage: see
 * usage() below (or run it without arguments).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/dtype.h"
#include "runtime/cpu/quant.h"
#include "tests/helpers/gguf_writer.h"

typedef struct opts {
	const char *arch;
	shoal_dtype type;
	shoal_dtype exp_type; /* the routed experts' type (--exp-type; else type) */
	uint32_t layers, dim, ff, heads, kv_heads, vocab, head_dim;
	uint32_t experts, experts_used, ff_exp;
	uint32_t ctx;
	/* deepseek2 */
	uint32_t q_lora, kv_lora, rope_dim, v_head_dim, dense_lead, shared, groups, groups_used;
	uint32_t nextn;
	uint32_t gating_func; /* written as is when nonzero (tests of refusals) */
	uint32_t yarn;        /* YaRN rope scaling by this factor (0: none) */
	bool kv_b;            /* the older MLA form: one attn_kv_b, no *_mla keys; its rows
	                         hold the values attn_k_b and attn_v_b would (same seed) */
	bool sigmoid;         /* sigmoid gating + exp_probs_b + weight norm, else softmax */
	bool tied;
	/* gpt-oss */
	uint32_t window;    /* attention.sliding_window (0: the key is not written) */
	bool no_sinks;      /* leave out attn_sinks */
	uint32_t exp_scale; /* expert gate/up weights times this (0, 1: as drawn), to
	                       reach the SwiGLU clamp */
	/* layers from quiet_from on (0: none) add their attention's and FFN's
	 * output divided by quiet_div (default 256) to the residual stream:
	 * a draft of the first quiet_from layers and the head then chooses as
	 * the whole model does on most tokens, as a trained model's truncated
	 * copy may (random weights alone give a truncated copy no agreement) */
	uint32_t quiet_from, quiet_div;
	/* glm4moe (the routing options and --rope-dim are deepseek2's) */
	bool no_qk_norm; /* leave out attn_q_norm and attn_k_norm (GLM-4.5-Air) */
	/* broken files for tests of refusals: leave out the tensor named
	 * drop; give the one named grow one more element in its first
	 * dimension (an F32 tensor) */
	const char *drop, *grow;
	uint64_t seed;
	uint32_t split;
	const char *out;
} opts;

typedef enum kind { K_WEIGHT, K_EMBD, K_NORM, K_BIAS, K_ROUTER, K_KV_B, K_SINK } kind;

typedef struct tplan {
	char name[64];
	shoal_dtype type;
	uint32_t n_dims;
	uint64_t ne[4];
	kind k;
} tplan;

/* ---- random numbers ----------------------------------------------------- */

/* splitmix64: tiny, fast and good enough for weights. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_unit(uint64_t *s)
{
	return (float)((double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	return h ^ (seed * 0x9e3779b97f4a7c15ull);
}

/* ---- the plan ----------------------------------------------------------- */

/* Append one tensor; norms, biases and the router stay F32 (as in real
 * GGUF files). Returns the new count. */
static __attribute__((format(printf, 9, 10))) int plan_add(tplan *t, int n, shoal_dtype type,
                                                           kind k, uint32_t nd, uint64_t a,
                                                           uint64_t b, uint64_t c, const char *fmt,
                                                           ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t[n].name, sizeof t[n].name, fmt, ap);
	va_end(ap);
	t[n].type =
	    (k == K_NORM || k == K_BIAS || k == K_ROUTER || k == K_SINK) ? SHOAL_DTYPE_F32 : type;
	t[n].k = k;
	t[n].n_dims = nd;
	t[n].ne[0] = a;
	t[n].ne[1] = b;
	t[n].ne[2] = c;
	t[n].ne[3] = 1;
	return n + 1;
}

/* The MLA attention of deepseek2 layer l. */
static int plan_mla(const opts *o, tplan *t, int n, uint32_t l)
{
	uint64_t E = o->dim, H = o->heads, q = H * o->head_dim, kvl = o->kv_lora;
	uint64_t nope = o->head_dim - o->rope_dim;
	shoal_dtype ty = o->type;
	if (o->q_lora) {
		n = plan_add(t, n, ty, K_WEIGHT, 2, E, o->q_lora, 1, "blk.%u.attn_q_a.weight", l);
		n = plan_add(t, n, ty, K_NORM, 1, o->q_lora, 1, 1, "blk.%u.attn_q_a_norm.weight",
		             l);
		n = plan_add(t, n, ty, K_WEIGHT, 2, o->q_lora, q, 1, "blk.%u.attn_q_b.weight", l);
	} else {
		n = plan_add(t, n, ty, K_WEIGHT, 2, E, q, 1, "blk.%u.attn_q.weight", l);
	}
	n = plan_add(t, n, ty, K_WEIGHT, 2, E, kvl + o->rope_dim, 1, "blk.%u.attn_kv_a_mqa.weight",
	             l);
	n = plan_add(t, n, ty, K_NORM, 1, kvl, 1, 1, "blk.%u.attn_kv_a_norm.weight", l);
	if (o->kv_b) {
		n = plan_add(t, n, ty, K_KV_B, 2, kvl, H * (nope + o->v_head_dim), 1,
		             "blk.%u.attn_kv_b.weight", l);
	} else {
		n = plan_add(t, n, ty, K_WEIGHT, 3, nope, kvl, H, "blk.%u.attn_k_b.weight", l);
		n = plan_add(t, n, ty, K_WEIGHT, 3, kvl, o->v_head_dim, H, "blk.%u.attn_v_b.weight",
		             l);
	}
	n = plan_add(t, n, ty, K_WEIGHT, 2, H * o->v_head_dim, E, 1, "blk.%u.attn_output.weight",
	             l);
	return n;
}

static int plan_build(const opts *o, tplan *t)
{
	bool oss = !strcmp(o->arch, "gpt-oss");
	bool glm = !strcmp(o->arch, "glm4moe");
	bool qwen2 = !strcmp(o->arch, "qwen2") || oss || glm;
	bool qk =
	    !strcmp(o->arch, "qwen3") || !strcmp(o->arch, "qwen3moe") || (glm && !o->no_qk_norm);
	bool ds2 = !strcmp(o->arch, "deepseek2");
	uint64_t E = o->dim, q = (uint64_t)o->heads * o->head_dim,
	         kv = (uint64_t)o->kv_heads * o->head_dim;
	shoal_dtype ty = o->type;
	int n = 0;
	n = plan_add(t, n, ty, K_EMBD, 2, E, o->vocab, 1, "token_embd.weight");
	for (uint32_t l = 0; l < o->layers + o->nextn; l++) {
		n = plan_add(t, n, ty, K_NORM, 1, E, 1, 1, "blk.%u.attn_norm.weight", l);
		if (l >= o->layers) {
			/* an MTP block: its own input projection and norms, then a
			 * full layer (runtime/engine/mtp.c runs it) */
			n = plan_add(t, n, ty, K_WEIGHT, 2, 2 * E, E, 1,
			             "blk.%u.nextn.eh_proj.weight", l);
			n = plan_add(t, n, ty, K_NORM, 1, E, 1, 1, "blk.%u.nextn.enorm.weight", l);
			n = plan_add(t, n, ty, K_NORM, 1, E, 1, 1, "blk.%u.nextn.hnorm.weight", l);
			/* its own head norm and head (embed_tokens is left out: the
			 * model's token_embd serves, as in files that share it) */
			n = plan_add(t, n, ty, K_NORM, 1, E, 1, 1,
			             "blk.%u.nextn.shared_head_norm.weight", l);
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, o->vocab, 1,
			             "blk.%u.nextn.shared_head_head.weight", l);
		}
		if (ds2) {
			n = plan_mla(o, t, n, l);
		} else {
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, q, 1, "blk.%u.attn_q.weight", l);
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, kv, 1, "blk.%u.attn_k.weight", l);
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, kv, 1, "blk.%u.attn_v.weight", l);
		}
		if (qwen2) {
			n = plan_add(t, n, ty, K_BIAS, 1, q, 1, 1, "blk.%u.attn_q.bias", l);
			n = plan_add(t, n, ty, K_BIAS, 1, kv, 1, 1, "blk.%u.attn_k.bias", l);
			n = plan_add(t, n, ty, K_BIAS, 1, kv, 1, 1, "blk.%u.attn_v.bias", l);
		}
		if (qk) {
			n = plan_add(t, n, ty, K_NORM, 1, o->head_dim, 1, 1,
			             "blk.%u.attn_q_norm.weight", l);
			n = plan_add(t, n, ty, K_NORM, 1, o->head_dim, 1, 1,
			             "blk.%u.attn_k_norm.weight", l);
		}
		if (!ds2)
			n = plan_add(t, n, ty, K_WEIGHT, 2, q, E, 1, "blk.%u.attn_output.weight",
			             l);
		if (oss) {
			n = plan_add(t, n, ty, K_BIAS, 1, E, 1, 1, "blk.%u.attn_output.bias", l);
			if (!o->no_sinks)
				n = plan_add(t, n, ty, K_SINK, 1, o->heads, 1, 1,
				             "blk.%u.attn_sinks.weight", l);
		}
		n = plan_add(
		    t, n, ty, K_NORM, 1, E, 1, 1,
		    oss || glm ? "blk.%u.post_attention_norm.weight" : "blk.%u.ffn_norm.weight", l);
		if (o->experts && l >= o->dense_lead) {
			uint64_t X = o->experts, F = o->ff_exp;
			shoal_dtype xt = o->exp_type;
			n = plan_add(t, n, ty, K_ROUTER, 2, E, X, 1, "blk.%u.ffn_gate_inp.weight",
			             l);
			n = plan_add(t, n, xt, K_WEIGHT, 3, E, F, X, "blk.%u.ffn_gate_exps.weight",
			             l);
			n = plan_add(t, n, xt, K_WEIGHT, 3, E, F, X, "blk.%u.ffn_up_exps.weight",
			             l);
			n = plan_add(t, n, xt, K_WEIGHT, 3, F, E, X, "blk.%u.ffn_down_exps.weight",
			             l);
			if ((ds2 || glm) && o->sigmoid)
				n = plan_add(t, n, ty, K_BIAS, 1, X, 1, 1,
				             "blk.%u.exp_probs_b.bias", l);
			if (oss) {
				n = plan_add(t, n, ty, K_BIAS, 1, X, 1, 1,
				             "blk.%u.ffn_gate_inp.bias", l);
				n = plan_add(t, n, ty, K_BIAS, 2, F, X, 1,
				             "blk.%u.ffn_gate_exps.bias", l);
				n = plan_add(t, n, ty, K_BIAS, 2, F, X, 1,
				             "blk.%u.ffn_up_exps.bias", l);
				n = plan_add(t, n, ty, K_BIAS, 2, E, X, 1,
				             "blk.%u.ffn_down_exps.bias", l);
			}
			uint64_t S = (uint64_t)o->shared * F;
			if (S) {
				n = plan_add(t, n, ty, K_WEIGHT, 2, E, S, 1,
				             "blk.%u.ffn_gate_shexp.weight", l);
				n = plan_add(t, n, ty, K_WEIGHT, 2, E, S, 1,
				             "blk.%u.ffn_up_shexp.weight", l);
				n = plan_add(t, n, ty, K_WEIGHT, 2, S, E, 1,
				             "blk.%u.ffn_down_shexp.weight", l);
			}
		} else {
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, o->ff, 1, "blk.%u.ffn_gate.weight",
			             l);
			n = plan_add(t, n, ty, K_WEIGHT, 2, E, o->ff, 1, "blk.%u.ffn_up.weight", l);
			n = plan_add(t, n, ty, K_WEIGHT, 2, o->ff, E, 1, "blk.%u.ffn_down.weight",
			             l);
		}
	}
	n = plan_add(t, n, ty, K_NORM, 1, E, 1, 1, "output_norm.weight");
	if (!o->tied)
		n = plan_add(t, n, ty, K_WEIGHT, 2, E, o->vocab, 1, "output.weight");
	int kept = 0;
	for (int i = 0; i < n; i++) {
		if (o->drop && !strcmp(t[i].name, o->drop))
			continue;
		if (o->grow && !strcmp(t[i].name, o->grow))
			t[i].ne[0]++;
		t[kept++] = t[i];
	}
	return kept;
}

/* ---- vocabulary ----------------------------------------------------------- */

#define VOCAB_FIRST_PIECE 259 /* 3 specials + 256 byte tokens */

/* Piece i (0-based after the byte tokens): lowercase strings of length
 * 1, 2, 3, ... each first bare then with the SentencePiece space mark. */
static void vocab_piece(uint64_t i, char *out)
{
	uint64_t count = 26;
	int len = 1;
	while (i >= 2 * count) {
		i -= 2 * count;
		count *= 26;
		len++;
	}
	char *p = out;
	if (i >= count) {
		i -= count;
		memcpy(p, "\xe2\x96\x81", 3); /* U+2581 */
		p += 3;
	}
	for (int k = len - 1; k >= 0; k--) {
		p[k] = (char)('a' + i % 26);
		i /= 26;
	}
	p[len] = '\0';
}

static int write_vocab(shoal_gguf_writer *w, uint32_t V)
{
	char **toks = calloc(V, sizeof *toks);
	float *scores = calloc(V, sizeof *scores);
	int32_t *types = calloc(V, sizeof *types);
	if (!toks || !scores || !types)
		return -1;
	for (uint32_t i = 0; i < V; i++) {
		toks[i] = malloc(32);
		if (!toks[i])
			return -1;
		if (i == 0) {
			strcpy(toks[i], "<unk>");
			types[i] = 2; /* unknown */
		} else if (i == 1 || i == 2) {
			strcpy(toks[i], i == 1 ? "<s>" : "</s>");
			types[i] = 3; /* control */
		} else if (i < VOCAB_FIRST_PIECE) {
			snprintf(toks[i], 32, "<0x%02X>", i - 3);
			types[i] = 6; /* byte */
		} else {
			vocab_piece(i - VOCAB_FIRST_PIECE, toks[i]);
			types[i] = 1; /* normal */
			scores[i] = -(float)(i - VOCAB_FIRST_PIECE);
		}
	}
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.pre", "default");
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, V);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", SHOAL_GGUF_FLOAT32, scores, V);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", SHOAL_GGUF_INT32, types, V);
	shoal_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
	shoal_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
	shoal_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	shoal_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
	shoal_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false);
	for (uint32_t i = 0; i < V; i++)
		free(toks[i]);
	free(toks);
	free(scores);
	free(types);
	return 0;
}

/* ---- metadata ------------------------------------------------------------- */

static uint32_t file_type(shoal_dtype t)
{
	switch (t) {
	case SHOAL_DTYPE_F32:
		return 0;
	case SHOAL_DTYPE_F16:
		return 1;
	case SHOAL_DTYPE_Q4_0:
		return 2;
	case SHOAL_DTYPE_Q8_0:
		return 7;
	case SHOAL_DTYPE_Q4_K:
		return 15; /* "Q4_K_M" */
	case SHOAL_DTYPE_Q6_K:
		return 18;
	case SHOAL_DTYPE_BF16:
		return 32;
	case SHOAL_DTYPE_Q5_0:
		return 8;
	case SHOAL_DTYPE_Q5_1:
		return 9;
	case SHOAL_DTYPE_Q2_K:
		return 10;
	case SHOAL_DTYPE_Q3_K:
		return 12; /* "Q3_K_M" */
	case SHOAL_DTYPE_Q5_K:
		return 17; /* "Q5_K_M" */
	case SHOAL_DTYPE_IQ4_NL:
		return 25;
	case SHOAL_DTYPE_IQ4_XS:
		return 30;
	case SHOAL_DTYPE_IQ2_XXS:
		return 19;
	case SHOAL_DTYPE_IQ2_XS:
		return 20;
	case SHOAL_DTYPE_IQ3_XXS:
		return 23;
	case SHOAL_DTYPE_IQ1_S:
		return 24;
	case SHOAL_DTYPE_IQ3_S:
		return 26;
	case SHOAL_DTYPE_IQ2_S:
		return 28;
	case SHOAL_DTYPE_IQ1_M:
		return 31;
	case SHOAL_DTYPE_MXFP4:
		return 38; /* "MXFP4_MOE" */
	default:
		return 0;
	}
}

static int write_meta(shoal_gguf_writer *w, const opts *o)
{
	char k[128];
	const char *a = o->arch;
	bool qwen = strncmp(a, "qwen", 4) == 0;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
	shoal_gguf_writer_kv_str(w, "general.architecture", a);
	shoal_gguf_writer_kv_str(w, "general.name", "gen-fixture");
	/* MXFP4 experts beside other types: the reference's MXFP4_MOE */
	shoal_gguf_writer_kv_u32(
	    w, "general.file_type",
	    file_type(o->exp_type == SHOAL_DTYPE_MXFP4 ? SHOAL_DTYPE_MXFP4 : o->type));
	shoal_gguf_writer_kv_u32(w, "general.quantization_version", 2);
	shoal_gguf_writer_kv_u64(w, "general.seed", o->seed);
	shoal_gguf_writer_kv_u32(w, KEY("vocab_size"), o->vocab);
	shoal_gguf_writer_kv_u32(w, KEY("context_length"), o->ctx);
	shoal_gguf_writer_kv_u32(w, KEY("embedding_length"), o->dim);
	shoal_gguf_writer_kv_u32(w, KEY("block_count"), o->layers + o->nextn);
	shoal_gguf_writer_kv_u32(w, KEY("feed_forward_length"), o->ff);
	shoal_gguf_writer_kv_u32(w, KEY("attention.head_count"), o->heads);
	shoal_gguf_writer_kv_u32(w, KEY("attention.head_count_kv"), o->kv_heads);
	bool ds2 = !strcmp(a, "deepseek2"), oss = !strcmp(a, "gpt-oss"),
	     glm = !strcmp(a, "glm4moe");
	if (oss && o->window)
		shoal_gguf_writer_kv_u32(w, KEY("attention.sliding_window"), o->window);
	if (oss && o->yarn) {
		/* gpt-oss's: factor 32 over 4096, no log multiplier key */
		shoal_gguf_writer_kv_str(w, KEY("rope.scaling.type"), "yarn");
		shoal_gguf_writer_kv_f32(w, KEY("rope.scaling.factor"), (float)o->yarn);
		shoal_gguf_writer_kv_u32(w, KEY("rope.scaling.original_context_length"),
		                         o->ctx / o->yarn ? o->ctx / o->yarn : 1);
	}
	if (ds2) {
		/* as the converter writes MLA: one KV "head" of latent + rope;
		 * the older form gives a head's own key and value lengths */
		shoal_gguf_writer_kv_u32(w, KEY("attention.key_length"),
		                         o->kv_b ? o->head_dim : o->kv_lora + o->rope_dim);
		shoal_gguf_writer_kv_u32(w, KEY("attention.value_length"),
		                         o->kv_b ? o->v_head_dim : o->kv_lora);
		if (!o->kv_b) {
			shoal_gguf_writer_kv_u32(w, KEY("attention.key_length_mla"), o->head_dim);
			shoal_gguf_writer_kv_u32(w, KEY("attention.value_length_mla"),
			                         o->v_head_dim);
		}
		shoal_gguf_writer_kv_u32(w, KEY("attention.kv_lora_rank"), o->kv_lora);
		if (o->q_lora)
			shoal_gguf_writer_kv_u32(w, KEY("attention.q_lora_rank"), o->q_lora);
	} else if (o->head_dim != o->dim / o->heads) {
		shoal_gguf_writer_kv_u32(w, KEY("attention.key_length"), o->head_dim);
		shoal_gguf_writer_kv_u32(w, KEY("attention.value_length"), o->head_dim);
	}
	if (ds2 || glm) {
		shoal_gguf_writer_kv_u32(w, KEY("leading_dense_block_count"), o->dense_lead);
		shoal_gguf_writer_kv_u32(w, KEY("expert_shared_count"), o->shared);
		shoal_gguf_writer_kv_u32(w, KEY("expert_gating_func"),
		                         o->gating_func ? o->gating_func
		                         : o->sigmoid   ? 2
		                                        : 1);
		if (o->yarn) {
			/* DeepSeek V3's: factor 40 over 4096, log multiplier 0.1 */
			shoal_gguf_writer_kv_str(w, KEY("rope.scaling.type"), "yarn");
			shoal_gguf_writer_kv_f32(w, KEY("rope.scaling.factor"), (float)o->yarn);
			shoal_gguf_writer_kv_u32(w, KEY("rope.scaling.original_context_length"),
			                         o->ctx / o->yarn ? o->ctx / o->yarn : 1);
			shoal_gguf_writer_kv_f32(w, KEY("rope.scaling.yarn_log_multiplier"), 0.1f);
		}
		shoal_gguf_writer_kv_f32(w, KEY("expert_weights_scale"), o->sigmoid ? 2.5f : 1.5f);
		shoal_gguf_writer_kv_bool(w, KEY("expert_weights_norm"), o->sigmoid);
		if (o->groups) {
			shoal_gguf_writer_kv_u32(w, KEY("expert_group_count"), o->groups);
			shoal_gguf_writer_kv_u32(w, KEY("expert_group_used_count"), o->groups_used);
		}
		if (o->nextn)
			shoal_gguf_writer_kv_u32(w, KEY("nextn_predict_layers"), o->nextn);
	}
	/* Qwen's released models use eps 1e-6 and rope base 1e6. */
	shoal_gguf_writer_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"),
	                         qwen || ds2 ? 1e-6f : 1e-5f);
	shoal_gguf_writer_kv_f32(w, KEY("rope.freq_base"), qwen ? 1000000.0f : 10000.0f);
	/* glm4moe rotates half of each head unless told */
	shoal_gguf_writer_kv_u32(w, KEY("rope.dimension_count"),
	                         ds2   ? o->rope_dim
	                         : glm ? (o->rope_dim ? o->rope_dim : o->head_dim / 2)
	                               : o->head_dim);
	if (o->experts) {
		shoal_gguf_writer_kv_u32(w, KEY("expert_count"), o->experts);
		shoal_gguf_writer_kv_u32(w, KEY("expert_used_count"), o->experts_used);
		if (strcmp(a, "llama") || o->ff_exp != o->ff)
			shoal_gguf_writer_kv_u32(w, KEY("expert_feed_forward_length"), o->ff_exp);
	}
#undef KEY
	return write_vocab(w, o->vocab);
}

/* ---- tensors -------------------------------------------------------------- */

static int write_row(shoal_gguf_writer *w, const tplan *t, const float *row, void *qrow)
{
	uint64_t n_in = t->ne[0];
	const void *src = row;
	if (t->type != SHOAL_DTYPE_F32) {
		shoal_quantize_row(t->type, row, qrow, (int64_t)n_in);
		src = qrow;
	}
	return shoal_gguf_writer_write(w, src, shoal_dtype_row_bytes(t->type, n_in)) ? -1 : 0;
}

/* attn_kv_b of layer l from the streams of the attn_k_b and attn_v_b the
 * split form would have: per head, the key rows (k_b transposed), then the
 * value rows. */
static int write_kv_b(shoal_gguf_writer *w, const opts *o, const tplan *t, float *row, void *qrow)
{
	unsigned l = 0;
	char kn[64], vn[64];
	sscanf(t->name, "blk.%u.", &l);
	snprintf(kn, sizeof kn, "blk.%u.attn_k_b.weight", l);
	snprintf(vn, sizeof vn, "blk.%u.attn_v_b.weight", l);
	uint64_t ks = name_seed(o->seed, kn), vs = name_seed(o->seed, vn);
	uint32_t kvl = o->kv_lora, nope = o->head_dim - o->rope_dim;
	float ak = (float)sqrt(3.0 / nope), av = (float)sqrt(3.0 / kvl);
	float *kb = malloc((size_t)kvl * nope * sizeof *kb); /* (kv_lora, nope) one head */
	if (!kb)
		return -1;
	int rc = 0;
	for (uint32_t h = 0; h < o->heads && !rc; h++) {
		for (size_t i = 0; i < (size_t)kvl * nope; i++)
			kb[i] = ak * rng_unit(&ks);
		for (uint32_t d = 0; d < nope && !rc; d++) {
			for (uint32_t c = 0; c < kvl; c++)
				row[c] = kb[(size_t)c * nope + d];
			rc = write_row(w, t, row, qrow);
		}
		for (uint32_t j = 0; j < o->v_head_dim && !rc; j++) {
			for (uint32_t c = 0; c < kvl; c++)
				row[c] = av * rng_unit(&vs);
			rc = write_row(w, t, row, qrow);
		}
	}
	free(kb);
	return rc;
}

static int write_tensor(shoal_gguf_writer *w, const opts *o, const tplan *t, float *row, void *qrow)
{
	if (t->k == K_KV_B)
		return write_kv_b(w, o, t, row, qrow);
	uint64_t s = name_seed(o->seed, t->name);
	uint64_t n_in = t->ne[0], rows = t->ne[1] * t->ne[2];
	/* Uniform(-a, a) has variance a^2/3: a = sqrt(3 / n_in) keeps each
	 * output of W x at about the variance of x. */
	float a = (float)sqrt(3.0 / (double)n_in);
	if (o->exp_scale > 1 &&
	    (strstr(t->name, "ffn_gate_exps.weight") || strstr(t->name, "ffn_up_exps.weight")))
		a *= (float)o->exp_scale;
	unsigned layer;
	if (o->quiet_from && sscanf(t->name, "blk.%u.", &layer) == 1 && layer >= o->quiet_from &&
	    (strstr(t->name, "attn_output.weight") || strstr(t->name, "ffn_down")))
		a /= (float)(o->quiet_div ? o->quiet_div : 256);
	for (uint64_t r = 0; r < rows; r++) {
		for (uint64_t i = 0; i < n_in; i++) {
			float u = rng_unit(&s);
			switch (t->k) {
			case K_NORM:
				row[i] = 1.0f + 0.1f * u;
				break;
			case K_BIAS:
				row[i] = 0.05f * u;
				break;
			case K_SINK:
				row[i] = 2.0f * u;
				break;
			case K_EMBD:
				row[i] = 0.5f * u;
				break;
			default:
				row[i] = a * u;
				break;
			}
		}
		if (write_row(w, t, row, qrow))
			return -1;
	}
	return 0;
}

static int write_shard(const opts *o, const char *path, const tplan *t, int first, int end,
                       int shard, int n_total, float *row, void *qrow)
{
	shoal_gguf_writer *w;
	if (shoal_gguf_writer_new(path, &w)) {
		fprintf(stderr, "gen_fixture: cannot create %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = -1;
	if (shard == 0 && write_meta(w, o))
		goto out;
	if (o->split > 1) {
		shoal_gguf_writer_kv_u16(w, "split.no", (uint16_t)shard);
		shoal_gguf_writer_kv_u16(w, "split.count", (uint16_t)o->split);
		shoal_gguf_writer_kv_i32(w, "split.tensors.count", n_total);
	}
	for (int i = first; i < end; i++)
		shoal_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne);
	if (shoal_gguf_writer_begin_data(w))
		goto out;
	for (int i = first; i < end; i++)
		if (write_tensor(w, o, &t[i], row, qrow))
			goto out;
	if (shoal_gguf_writer_finish(w))
		goto out;
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "gen_fixture: writing %s failed\n", path);
	shoal_gguf_writer_free(w);
	return rc;
}

/* ---- options ---------------------------------------------------------------- */

static int usage(void)
{
	fprintf(
	    stderr,
	    "usage: gen_fixture --arch llama|qwen2|qwen3|qwen3moe|deepseek2|gpt-oss|glm4moe --type "
	    "F32|F16|BF16|Q8_0|Q4_0|Q5_0|Q5_1|IQ4_NL|MXFP4|Q2_K|Q3_K|Q4_K|Q5_K|Q6_K|IQ4_XS|\n"
	    "  IQ2_XXS|IQ2_XS|IQ2_S|IQ3_XXS|IQ3_S|IQ1_S|IQ1_M\n"
	    "  --layers N --dim D --ff F --heads H --kv-heads K --vocab V [--head-dim D]\n"
	    "  [--experts E --experts-used K --ff-exp F] [--tied] [--seed S] [--split N]\n"
	    "  [--ctx N] [--drop TENSOR] [--grow TENSOR] [--exp-type T (the routed\n"
	    "  experts' type, e.g. MXFP4 as gpt-oss ships them; default --type)]\n"
	    "  [--quiet-from L [--quiet-div N] (layers L.. add their outputs / N, 256)] OUT.gguf\n"
	    "deepseek2 (--head-dim is nope + rope; --kv-heads is ignored):\n"
	    "  --kv-lora R --rope-dim D --v-head-dim D [--q-lora R] [--dense-lead N]\n"
	    "  [--shared N] [--groups G --groups-used U] [--sigmoid] [--nextn N]\n"
	    "  [--yarn FACTOR] [--gating-func N] [--kv-b (the old form)]\n"
	    "gpt-oss (MoE): [--window N] [--no-sinks] [--exp-scale N] [--yarn FACTOR]\n"
	    "glm4moe (MoE): [--rope-dim D (default half the head)] [--dense-lead N]\n"
	    "  [--shared N] [--groups G --groups-used U] [--sigmoid] [--no-qk-norm]\n");
	return 2;
}

static bool parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || end == s || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

static int parse(int argc, char **argv, opts *o)
{
	memset(o, 0, sizeof *o);
	o->type = o->exp_type = SHOAL_DTYPE__MAX;
	o->ctx = 2048;
	o->seed = 1;
	o->split = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint32_t *u = NULL;
		if (!strcmp(a, "--no-sinks")) {
			o->no_sinks = true;
			continue;
		}
		if (!strcmp(a, "--no-qk-norm")) {
			o->no_qk_norm = true;
			continue;
		}
		if (!strcmp(a, "--tied") || !strcmp(a, "--sigmoid") || !strcmp(a, "--kv-b")) {
			*(a[2] == 't' ? &o->tied : a[2] == 's' ? &o->sigmoid : &o->kv_b) = true;
			continue;
		}
		if (a[0] != '-' || a[1] != '-') {
			if (o->out)
				return usage();
			o->out = a;
			continue;
		}
		if (!v)
			return usage();
		i++;
		if (!strcmp(a, "--arch")) {
			o->arch = v;
		} else if (!strcmp(a, "--drop")) {
			o->drop = v;
		} else if (!strcmp(a, "--grow")) {
			o->grow = v;
		} else if (!strcmp(a, "--type") || !strcmp(a, "--exp-type")) {
			shoal_dtype *to = a[2] == 't' ? &o->type : &o->exp_type;
			*to = SHOAL_DTYPE__MAX;
			for (uint32_t k = 0; k < SHOAL_DTYPE__MAX; k++)
				if (shoal_dtype_known(k) && k != SHOAL_DTYPE_Q8_K &&
				    shoal_quant_supported((shoal_dtype)k) &&
				    !strcmp(v, shoal_dtype_name((shoal_dtype)k)))
					*to = (shoal_dtype)k;
			if (*to == SHOAL_DTYPE__MAX) {
				fprintf(stderr, "gen_fixture: unknown type '%s'\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--seed")) {
			char *end;
			o->seed = strtoull(v, &end, 10);
			if (*end)
				return usage();
		} else {
			if (!strcmp(a, "--layers"))
				u = &o->layers;
			else if (!strcmp(a, "--dim"))
				u = &o->dim;
			else if (!strcmp(a, "--ff"))
				u = &o->ff;
			else if (!strcmp(a, "--heads"))
				u = &o->heads;
			else if (!strcmp(a, "--kv-heads"))
				u = &o->kv_heads;
			else if (!strcmp(a, "--vocab"))
				u = &o->vocab;
			else if (!strcmp(a, "--head-dim"))
				u = &o->head_dim;
			else if (!strcmp(a, "--experts"))
				u = &o->experts;
			else if (!strcmp(a, "--experts-used"))
				u = &o->experts_used;
			else if (!strcmp(a, "--ff-exp"))
				u = &o->ff_exp;
			else if (!strcmp(a, "--split"))
				u = &o->split;
			else if (!strcmp(a, "--ctx"))
				u = &o->ctx;
			else if (!strcmp(a, "--q-lora"))
				u = &o->q_lora;
			else if (!strcmp(a, "--kv-lora"))
				u = &o->kv_lora;
			else if (!strcmp(a, "--rope-dim"))
				u = &o->rope_dim;
			else if (!strcmp(a, "--v-head-dim"))
				u = &o->v_head_dim;
			else if (!strcmp(a, "--dense-lead"))
				u = &o->dense_lead;
			else if (!strcmp(a, "--shared"))
				u = &o->shared;
			else if (!strcmp(a, "--groups"))
				u = &o->groups;
			else if (!strcmp(a, "--groups-used"))
				u = &o->groups_used;
			else if (!strcmp(a, "--nextn"))
				u = &o->nextn;
			else if (!strcmp(a, "--gating-func"))
				u = &o->gating_func;
			else if (!strcmp(a, "--yarn"))
				u = &o->yarn;
			else if (!strcmp(a, "--window"))
				u = &o->window;
			else if (!strcmp(a, "--exp-scale"))
				u = &o->exp_scale;
			else if (!strcmp(a, "--quiet-from"))
				u = &o->quiet_from;
			else if (!strcmp(a, "--quiet-div"))
				u = &o->quiet_div;
			else
				return usage();
			if (!parse_u32(v, u)) {
				fprintf(stderr, "gen_fixture: %s wants a number, got '%s'\n", a, v);
				return 2;
			}
		}
	}
	if (!o->arch || o->type == SHOAL_DTYPE__MAX || !o->layers || !o->dim || !o->heads ||
	    !o->vocab || !o->out)
		return usage();
	if (strcmp(o->arch, "llama") && strcmp(o->arch, "qwen2") && strcmp(o->arch, "qwen3") &&
	    strcmp(o->arch, "qwen3moe") && strcmp(o->arch, "deepseek2") &&
	    strcmp(o->arch, "gpt-oss") && strcmp(o->arch, "glm4moe")) {
		fprintf(stderr, "gen_fixture: unknown arch '%s'\n", o->arch);
		return 2;
	}
	if (!o->kv_heads)
		o->kv_heads = o->heads;
	if (!o->head_dim)
		o->head_dim = o->dim / o->heads;
	bool oss = !strcmp(o->arch, "gpt-oss"), glm = !strcmp(o->arch, "glm4moe");
	if ((!strcmp(o->arch, "qwen3moe") || !strcmp(o->arch, "deepseek2") || oss || glm) &&
	    !o->experts) {
		fprintf(stderr, "gen_fixture: %s needs --experts\n", o->arch);
		return 2;
	}
	if (!strcmp(o->arch, "deepseek2")) {
		o->kv_heads = o->kv_b ? o->heads : 1;
		if (!o->kv_lora || !o->rope_dim || o->rope_dim % 2 || o->rope_dim >= o->head_dim ||
		    !o->v_head_dim || o->dense_lead > o->layers || (o->dense_lead && !o->ff) ||
		    (o->groups && (o->experts % o->groups || o->experts / o->groups < 2 ||
		                   !o->groups_used || o->groups_used > o->groups))) {
			fprintf(stderr,
			        "gen_fixture: deepseek2 needs --kv-lora, an even --rope-dim "
			        "below --head-dim, --v-head-dim, --ff with --dense-lead, and "
			        "equal groups of 2 or more experts\n");
			return 2;
		}
	} else if (glm) {
		if (o->q_lora || o->kv_lora || o->v_head_dim || o->nextn || o->kv_b || o->yarn ||
		    o->rope_dim % 2 || o->rope_dim > o->head_dim || o->dense_lead > o->layers ||
		    (o->dense_lead && !o->ff) ||
		    (o->groups && (o->experts % o->groups || o->experts / o->groups < 2 ||
		                   !o->groups_used || o->groups_used > o->groups))) {
			fprintf(stderr, "gen_fixture: glm4moe takes no MLA options; an even "
			                "--rope-dim up to --head-dim, --ff with --dense-lead, and "
			                "equal groups of 2 or more experts\n");
			return 2;
		}
	} else if (o->q_lora || o->kv_lora || o->rope_dim || o->v_head_dim || o->dense_lead ||
	           o->shared || o->groups || o->nextn || o->sigmoid || (o->yarn && !oss) ||
	           o->gating_func || o->kv_b) {
		fprintf(stderr, "gen_fixture: the MLA and routing options are for deepseek2\n");
		return 2;
	}
	if (!oss && (o->window || o->no_sinks || o->exp_scale)) {
		fprintf(stderr, "gen_fixture: --window, --no-sinks, --exp-scale are for gpt-oss\n");
		return 2;
	}
	if ((o->quiet_from && o->quiet_from >= o->layers) || (o->quiet_div && !o->quiet_from)) {
		fprintf(stderr, "gen_fixture: --quiet-from wants a layer below --layers "
		                "(--quiet-div goes with it)\n");
		return 2;
	}
	if (o->exp_type != SHOAL_DTYPE__MAX && !o->experts) {
		fprintf(stderr, "gen_fixture: --exp-type is for models with --experts\n");
		return 2;
	}
	if (o->exp_type == SHOAL_DTYPE__MAX)
		o->exp_type = o->type;
	if (o->experts) {
		if (!o->experts_used || o->experts_used > o->experts) {
			fprintf(stderr, "gen_fixture: --experts-used must be 1..%u\n", o->experts);
			return 2;
		}
		if (!o->ff_exp)
			o->ff_exp = o->ff;
	}
	if (!o->experts && !o->ff) {
		fprintf(stderr, "gen_fixture: --ff is required for a dense model\n");
		return 2;
	}
	if (o->heads % o->kv_heads || o->head_dim % 2 || o->vocab < VOCAB_FIRST_PIECE + 1 ||
	    o->split < 1 || o->split > 99) {
		fprintf(stderr,
		        "gen_fixture: need heads %% kv-heads == 0, an even head dim, "
		        "vocab > %d and split in 1..99\n",
		        VOCAB_FIRST_PIECE);
		return 2;
	}
	if (!shoal_quant_supported(o->type)) {
		fprintf(stderr, "gen_fixture: cannot write %s\n", shoal_dtype_name(o->type));
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	opts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc;
	int cap = 3 + (int)(o.layers + o.nextn) * 26;
	tplan *t = calloc((size_t)cap, sizeof *t);
	if (!t)
		return 1;
	int n = plan_build(&o, t);
	uint64_t max_in = 0;
	for (int i = 0; i < n; i++) {
		uint32_t be = shoal_dtype_block_elems(t[i].type);
		if (t[i].ne[0] % be) {
			fprintf(stderr,
			        "gen_fixture: %s has %llu columns, not a multiple of the %s "
			        "block size %u\n",
			        t[i].name, (unsigned long long)t[i].ne[0],
			        shoal_dtype_name(t[i].type), be);
			free(t);
			return 2;
		}
		if (t[i].ne[0] > max_in)
			max_in = t[i].ne[0];
	}
	float *row = malloc(max_in * sizeof *row);
	void *qrow = malloc(max_in * sizeof *row); /* any stored row is at most F32 size */
	rc = row && qrow ? 0 : 1;
	if (!rc && o.split <= 1) {
		rc = write_shard(&o, o.out, t, 0, n, 0, n, row, qrow) ? 1 : 0;
	} else if (!rc) {
		/* <prefix>-00001-of-0000N.gguf, the reference tool's naming; the
		 * prefix is OUT without its .gguf. */
		size_t pl = strlen(o.out);
		if (pl > 5 && !strcmp(o.out + pl - 5, ".gguf"))
			pl -= 5;
		char *path = malloc(pl + 32);
		if (o.split > (uint32_t)n)
			o.split = (uint32_t)n;
		for (uint32_t s = 0; path && s < o.split && !rc; s++) {
			snprintf(path, pl + 32, "%.*s-%05u-of-%05u.gguf", (int)pl, o.out, s + 1,
			         o.split);
			int first = (int)((uint64_t)n * s / o.split);
			int end = (int)((uint64_t)n * (s + 1) / o.split);
			rc = write_shard(&o, path, t, first, end, (int)s, n, row, qrow) ? 1 : 0;
		}
		if (!path)
			rc = 1;
		free(path);
	}
	free(row);
	free(qrow);
	free(t);
	return rc;
}
