/*
 * scheduler/manifest.h: what the scheduler needs to know about a model,
 * without its weights: bytes and work per layer and per expert.
 *
 * Part: scheduler/ (declared here, filled by models/ from a GGUF header or
 * by the scheduler from a JSON spec). Integers only (bytes, FLOPs), so that
 * every peer computes the same plan from the same manifest.
 */
#ifndef SHOAL_SCHEDULER_MANIFEST_H
#define SHOAL_SCHEDULER_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

/* Bytes of one KV cache element: the engine's default F16 cache
 * (runtime/engine/engine.h, shoal_engine_config.kv_type). */
#define SHOAL_MANIFEST_KV_ELT 2u
/* The rows a serving node's engine adds to a session in one call
 * (runtime/node's SHOAL_SERVE_MAX_ROWS, checked equal there): a sliding
 * layer keeps window + this many positions (runtime/engine/engine_kv.c). */
#define SHOAL_MANIFEST_KV_RING_ROWS 32u

/* Bytes of the model id a manifest carries: models/model_id.h's
 * SHOAL_MODEL_ID_BYTES (a BLAKE2b-256 digest), named here because the
 * scheduler, which keeps it in every plan, sits below models/. */
#define SHOAL_MANIFEST_MODEL_ID_BYTES 32

typedef struct shoal_manifest_layer {
	uint64_t bytes;              /* weights of the layer except routed experts:
	                                norms, attention, router, shared experts,
	                                dense FFN */
	uint64_t flops;              /* FLOPs per token of those weights (2 per
	                                multiply-add; attention over the context
	                                is added by the scheduler from kv) */
	uint64_t kv_bytes_per_token; /* K and V cache, SHOAL_MANIFEST_KV_ELT bytes an
	                                element as the engine keeps it */
	uint32_t kv_positions;       /* the most positions its KV holds (a sliding
	                                layer: window + SHOAL_MANIFEST_KV_RING_ROWS),
	                                0: the whole context; the scheduler counts
	                                min(ctx, this) for memory and reads */
	uint32_t n_expert;           /* routed experts in this layer (0: dense) */
	uint32_t n_expert_used;      /* experts each token is routed to */
	uint64_t expert_bytes;       /* bytes of one routed expert (gate+up+down) */
	uint64_t expert_flops;       /* FLOPs per token routed to one expert */
	uint64_t attn_flops_per_ctx; /* attention FLOPs per generated token per
	                                cached token (QK^T and AV); 0: the
	                                scheduler assumes kv_bytes_per_token / 2 */
	/* For tensor groups (scheduler/tensor.c); zero where unknown, and then
	 * that part of the layer is computed whole on every member. */
	uint32_t n_head_kv;  /* KV heads: attention splits by these */
	uint32_t n_ff;       /* columns of the dense FFN: it splits by these */
	uint64_t attn_bytes; /* attention's part of bytes (Q, K, V, O, their
	                        biases; MLA's projections): split with the
	                        heads, or whole on every member where
	                        n_head_kv is 0 (MLA); the rest of a dense
	                        layer splits with the FFN columns */
} shoal_manifest_layer;

/* The positions of layer y's KV the scheduler counts at a context of ctx. */
static inline uint64_t shoal_manifest_kv_ctx(const shoal_manifest_layer *y, uint64_t ctx)
{
	return y->kv_positions && y->kv_positions < ctx ? y->kv_positions : ctx;
}

typedef struct shoal_manifest {
	uint8_t model_id[SHOAL_MANIFEST_MODEL_ID_BYTES]; /* all zero when planning from a spec */
	char name[64];                                   /* NUL-terminated, for messages */
	uint32_t n_layer;
	uint32_t n_embd;
	uint32_t n_vocab;
	shoal_manifest_layer *layers; /* (n_layer); owned by whoever filled it */
	uint64_t embd_bytes;          /* the whole token_embd table */
	uint64_t head_bytes;          /* output norm + output matrix (the matrix is
	                                 token_embd again when tied_head) */
	uint64_t head_flops;          /* FLOPs per token of the head */
	bool tied_head;               /* head == token_embd: counted on both peers */
	uint64_t act_bytes_per_token; /* one hidden-state row on the wire */
	/* DeepSeek's MTP layer (a deepseek2 file's nextn block), which the
	 * last stage runs when the cluster drafts with it (a peer of the
	 * view offers mtp: scheduler/view.h); 0 bytes: the model has none.
	 * What it needs on the head peer beyond the head: mtp_bytes, its KV
	 * at the policy's context and sessions, and the embedding when it
	 * shares token_embd and the head does not hold it already. */
	uint64_t mtp_bytes;              /* its own tensors as stored (models/
	                                    model.h: shoal_nextn_tensors) */
	uint64_t mtp_kv_bytes_per_token; /* its KV cache, as a layer's */
	bool mtp_shares_embd;            /* it embeds with token_embd */
} shoal_manifest;

#endif
