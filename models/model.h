/*
 * models/model.h: a model = a GGUF file + its architecture, hyper-parameters
 * and the named weight tensors of each layer, plus its id and manifest.
 *
 * Part: models/. No tensor math here: the engine (runtime/) computes with the
 * tensors this file finds. Supported architectures: llama (incl. Mixtral
 * experts), qwen2 (QKV biases), qwen3 (q/k RMSNorm), qwen3moe, deepseek2
 * (DeepSeek V2/V3, Kimi K2: MLA, shared + routed experts), gpt-oss (attention
 * sinks, sliding-window layers, biases everywhere, clamped SwiGLU experts),
 * glm4moe (GLM-4.5/4.6: QKV biases, optional q/k RMSNorm, partial rotary,
 * leading dense layers, sigmoid routing with its selection bias, a shared
 * expert; its NextN layer is skipped).
 *
 * Shapes use GGUF's convention (ne[0] innermost, see gguf.h):
 *   token_embd   {n_embd, n_vocab}
 *   wq           {n_embd, n_head * head_dim}      bq {n_head * head_dim}
 *   wk, wv       {n_embd, n_head_kv * head_dim}   bk, bv {n_head_kv * head_dim}
 *   wo           {n_head * head_dim, n_embd}
 *   q_norm,k_norm {head_dim}
 *   ffn_gate/up  {n_embd, n_ff}    ffn_down {n_ff, n_embd}
 *   ffn_gate_inp {n_embd, n_expert}
 *   ffn_gate_exps/up_exps {n_embd, n_ff_exp, n_expert}
 *   ffn_down_exps {n_ff_exp, n_embd, n_expert}
 *   output       {n_embd, n_vocab}  (== token_embd when the head is tied)
 * deepseek2 (MLA; head_dim = nope + rope, rope dims last in a query head):
 *   wq_a {n_embd, q_lora}  q_a_norm {q_lora}  wq_b {q_lora, n_head * head_dim}
 *     (or wq {n_embd, n_head * head_dim} when q_lora_rank is 0)
 *   wkv_a {n_embd, kv_lora + n_rot}  kv_a_norm {kv_lora}
 *   wk_b {qk_nope, kv_lora, n_head}  wv_b {kv_lora, v_head_dim, n_head}
 *     (older files: wkv_b {kv_lora, n_head * (qk_nope + v_head_dim)}, each
 *     head's key rows then its value rows)
 *   wo {n_head * v_head_dim, n_embd}  exp_probs_b {n_expert}
 *   ffn_gate/up_shexp {n_embd, n_ff_shexp}  ffn_down_shexp {n_ff_shexp, n_embd}
 * gpt-oss (the ffn_norm is the file's post_attention_norm, used before the FFN):
 *   bq, bk, bv as qwen2; bo {n_embd}; attn_sinks {n_head} (optional)
 *   ffn_gate_inp_b {n_expert}
 *   ffn_gate_exps_b, ffn_up_exps_b {n_ff_exp, n_expert}  ffn_down_exps_b {n_embd, n_expert}
 */
#ifndef SHOAL_MODELS_MODEL_H
#define SHOAL_MODELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/gguf.h"

typedef enum shoal_arch {
	SHOAL_ARCH_LLAMA = 0,
	SHOAL_ARCH_QWEN2,
	SHOAL_ARCH_QWEN3,
	SHOAL_ARCH_QWEN3MOE,
	SHOAL_ARCH_DEEPSEEK2,
	SHOAL_ARCH_GPT_OSS,
	SHOAL_ARCH_GLM4MOE,
	SHOAL_ARCH__COUNT
} shoal_arch;

typedef enum shoal_rope_type {
	SHOAL_ROPE_NORM = 0, /* llama: rotate adjacent pairs (x[2i], x[2i+1]) */
	SHOAL_ROPE_NEOX = 1, /* qwen2/3: rotate (x[i], x[i + d/2]) */
} shoal_rope_type;

/* Expert groups a file may declare (DeepSeek V3 has 8). */
#define SHOAL_MOE_MAX_GROUPS 64

typedef enum shoal_moe_gating {
	SHOAL_MOE_GATING_SOFTMAX = 0, /* softmax over all experts */
	SHOAL_MOE_GATING_SIGMOID = 1, /* sigmoid per expert (DeepSeek V3) */
	/* top-k of the router's logits, then softmax over those k (gpt-oss) */
	SHOAL_MOE_GATING_SOFTMAX_TOPK = 2,
} shoal_moe_gating;

typedef struct shoal_hparams {
	shoal_arch arch;
	uint32_t n_layer;
	uint32_t n_embd;
	uint32_t n_head;
	uint32_t n_head_kv;
	uint32_t head_dim; /* key/value length per head */
	uint32_t n_ff;     /* dense FFN width (0 if every layer is MoE) */
	uint32_t n_vocab;
	uint32_t n_ctx_train;
	uint32_t n_rot; /* rotated dims per head (== head_dim usually) */
	float rope_freq_base;
	float rope_freq_scale; /* 1.0 unless the metadata scales */
	shoal_rope_type rope_type;
	float rms_eps;
	uint32_t n_expert;        /* 0 for dense models */
	uint32_t n_expert_used;   /* top-k */
	uint32_t n_ff_exp;        /* expert FFN width */
	bool expert_weights_norm; /* renormalise the top-k gate weights */
	bool tied_head;           /* no output.weight: head is token_embd */
	/* Routing beyond softmax-top-k (deepseek2; defaults elsewhere). */
	shoal_moe_gating gating;
	float expert_weights_scale;   /* routed weights times this (1.0) */
	uint32_t n_expert_group;      /* groups of experts (0 or 1: none) */
	uint32_t n_expert_group_used; /* groups a token may choose from */
	uint32_t n_expert_shared;     /* shared experts (one FFN n_ff_shexp wide) */
	uint32_t n_ff_shexp;          /* n_expert_shared * n_ff_exp */
	uint32_t n_layer_dense_lead;  /* layers [0, this) have a dense FFN */
	uint32_t n_nextn;             /* MTP layers in the file after n_layer (not in
	                                 n_layer; the first is shoal_model.nextn) */
	/* MLA (deepseek2): the KV cache keeps kv_lora_rank + n_rot per token. */
	bool mla;
	bool mla_kv_b;         /* the older file form: one attn_kv_b per layer */
	uint32_t q_lora_rank;  /* 0: plain query projection */
	uint32_t kv_lora_rank; /* the compressed latent */
	uint32_t v_head_dim;   /* value dims per head (head_dim is nope + rope) */
	/* YaRN rope scaling (rope_yarn): positions interpolated by
	 * rope_freq_scale with the ramp between beta_fast and beta_slow over
	 * n_ctx_orig; scores scaled by yarn_mscale^2. */
	bool rope_yarn;
	uint32_t n_ctx_orig;
	float yarn_ext_factor, yarn_beta_fast, yarn_beta_slow;
	float yarn_mscale; /* attn_factor * (1 + log_mul * ln(factor)), 1 without yarn */
	/* Sliding-window attention (gpt-oss): a sliding layer's query at
	 * position p sees the keys at positions p - n_swa + 1 .. p; layer il
	 * slides when il % swa_period != swa_period - 1 (gpt-oss: period 2,
	 * even layers slide, odd ones attend to the whole context). n_swa 0:
	 * every layer attends to the whole context. */
	uint32_t n_swa;
	uint32_t swa_period;
	/* gpt-oss's clamped SwiGLU on the experts:
	 *   g = min(g, limit), u = clamp(u, -limit, limit)
	 *   h = g * sigmoid(alpha * g) * (u + 1) */
	bool swiglu_oai;
	float swiglu_alpha, swiglu_limit;
} shoal_hparams;

typedef struct shoal_layer {
	const shoal_gguf_tensor *attn_norm; /* {n_embd} */
	const shoal_gguf_tensor *wq, *wk, *wv, *wo;
	const shoal_gguf_tensor *bq, *bk, *bv;                 /* qwen2, else NULL */
	const shoal_gguf_tensor *q_norm, *k_norm;              /* qwen3, else NULL */
	const shoal_gguf_tensor *ffn_norm;                     /* {n_embd} */
	const shoal_gguf_tensor *ffn_gate, *ffn_up, *ffn_down; /* dense, else NULL */
	const shoal_gguf_tensor *ffn_gate_inp;                 /* MoE router, else NULL */
	const shoal_gguf_tensor *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;
	/* deepseek2, else NULL (wq is attn_q when q_lora_rank is 0) */
	const shoal_gguf_tensor *wq_a, *q_a_norm, *wq_b;
	const shoal_gguf_tensor *wkv_a, *kv_a_norm, *wk_b, *wv_b;
	const shoal_gguf_tensor *wkv_b;       /* older files instead of wk_b, wv_b */
	const shoal_gguf_tensor *exp_probs_b; /* selection-only bias {n_expert} */
	const shoal_gguf_tensor *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp;
	/* gpt-oss, else NULL */
	const shoal_gguf_tensor *bo;             /* attn_output.bias {n_embd} */
	const shoal_gguf_tensor *attn_sinks;     /* {n_head}, or NULL: no sinks */
	const shoal_gguf_tensor *ffn_gate_inp_b; /* router bias {n_expert} */
	const shoal_gguf_tensor *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b;
} shoal_layer;

/* DeepSeek's multi-token prediction (MTP) layer, blk.<n_layer> of a
 * deepseek2 file (runtime/engine/mtp.h runs it): its own input norms and
 * projection, then one whole layer of the model's kind (MLA attention; an
 * MoE FFN when n_layer >= n_layer_dense_lead), then its own head norm and
 * head. embd and head fall back to the model's token_embd and output when
 * the file does not repeat them (llama.cpp's names, NEXTN_*). */
typedef struct shoal_nextn {
	const shoal_gguf_tensor *eh_proj;       /* {2 n_embd, n_embd} */
	const shoal_gguf_tensor *enorm, *hnorm; /* {n_embd} */
	const shoal_gguf_tensor *head_norm;     /* shared_head_norm {n_embd} */
	const shoal_gguf_tensor *head;          /* shared_head_head, or output */
	const shoal_gguf_tensor *embd;          /* embed_tokens, or token_embd */
	shoal_layer layer;                      /* the block's own tensors */
} shoal_nextn;

typedef struct shoal_model {
	shoal_gguf *gguf; /* owned */
	shoal_hparams hp;
	const shoal_gguf_tensor *tok_embd;
	const shoal_gguf_tensor *output_norm;
	const shoal_gguf_tensor *output; /* == tok_embd when hp.tied_head */
	shoal_layer *layers;             /* (n_layer), owned */
	/* Llama 3.1-style rope scaling: per-frequency divisors {n_rot / 2}
	 * applied to every layer's rotation; NULL when the file has none. */
	const shoal_gguf_tensor *rope_freqs;
	/* The first MTP layer, when hp.n_nextn > 0 and the file holds its
	 * tensors (blk.<n_layer>.nextn.eh_proj present); else NULL. Owned. */
	shoal_nextn *nextn;
} shoal_model;

/* Open a model: reads the GGUF, detects the architecture (unknown ->
 * SHOAL_ERR_UNSUPPORTED with a reason listing the supported ones), reads the
 * hyper-parameters and finds and shape-checks every tensor (missing or
 * inconsistent -> SHOAL_ERR_FORMAT naming the tensor). */
shoal_err shoal_model_open(const char *path, shoal_model **out, char *why, size_t why_len);
/* Same, over an already open GGUF; takes ownership of g even on failure. */
shoal_err shoal_model_from_gguf(shoal_gguf *g, shoal_model **out, char *why, size_t why_len);
void shoal_model_free(shoal_model *m); /* NULL is a no-op */

const char *shoal_arch_name(shoal_arch a);

/* The tensors of layer L that live with the layer (attention, norms,
 * dense FFN, router, selection bias, shared experts): everything but the
 * routed experts' ffn_*_exps, which may live on other peers. Writes the
 * present ones to out (borrowed from the model) and returns how many. */
#define SHOAL_LAYER_MAX_TENSORS 32
size_t shoal_layer_own_tensors(const shoal_layer *L,
                               const shoal_gguf_tensor *out[SHOAL_LAYER_MAX_TENSORS]);

/* The routed experts' tensors of layer L, which a peer serving some of
 * its experts needs: the router, ffn_*_exps and, where the file has
 * them, their biases (gpt-oss). Returns how many (0 for a dense layer). */
#define SHOAL_LAYER_MAX_EXPERT_TENSORS 8
size_t shoal_layer_expert_tensors(const shoal_layer *L,
                                  const shoal_gguf_tensor *out[SHOAL_LAYER_MAX_EXPERT_TENSORS]);

/* The tensors of the model's MTP layer (m->nextn; none without one): its
 * projection and norms, its block's own and expert tensors (once each),
 * and its embedding and head where they are its own (not token_embd and
 * output, which it then shares). The bytes a peer holds to run it beside
 * what a last stage holds (models/manifest.c: mtp_bytes; the fetch of a
 * last stage's part, runtime/node/serve_part.c). Borrowed; returns how
 * many went into out. */
#define SHOAL_NEXTN_MAX_TENSORS (6 + SHOAL_LAYER_MAX_TENSORS + SHOAL_LAYER_MAX_EXPERT_TENSORS)
size_t shoal_nextn_tensors(const shoal_model *m,
                           const shoal_gguf_tensor *out[SHOAL_NEXTN_MAX_TENSORS]);

/* Whether layer il of a model with these hparams attends through a
 * sliding window (hp->n_swa > 0 and the layer is one of the sliding ones). */
bool shoal_hparams_layer_swa(const shoal_hparams *hp, uint32_t il);

#endif
