/*
 * runtime/engine/engine.h: the engine: runs a LAYER RANGE of a model over a BATCH
 * OF ROWS, each row one token of some session at some position.
 *
 * Part: runtime/ (engine). Single-node and distributed use this one path:
 * `shoal run` owns [0, n_layer) with the embedding and the head; a pipeline
 * stage owns [l0, l1) and passes hidden states on; an expert peer only calls
 * shoal_engine_moe_partial. Compute goes through the backend ops table
 * (backend.h); weights are used in place from the model's mapping.
 * Divisions: MoE types, creation, sessions, running, MoE pieces.
 */
#ifndef SHOAL_RUNTIME_ENGINE_H
#define SHOAL_RUNTIME_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/model.h"
#include "runtime/backend.h"

/*
 * Shapes: row-major, "(n_rows, n_embd)" = n_rows rows of n_embd F32 each.
 * A hidden state is the residual stream between layers, before any norm.
 *
 * Determinism: every per-row step (norms, RoPE, attention over the row's
 * own session, router, top-k) is computed per row, and every matrix output
 * element by one kernel dot product in a fixed order, so logits are bitwise
 * independent of the thread count, of which rows share a batch, and of how
 * layers are split among engines (DESIGN invariant 2).
 *
 * Memory: everything (scratch for max_rows, KV caches of max_sessions x
 * n_ctx) is allocated by shoal_engine_new; nothing per token. An engine is
 * used by one thread at a time (it runs its own workers inside).
 *
 * A pipeline stage, for example:
 *     cfg = shoal_engine_config_default(m);
 *     shoal_backend_pick(NULL, &cfg.backend, why, sizeof why);
 *                                          (runtime/backends.h: "auto")
 *     cfg.layer_begin = 8; cfg.layer_end = 16; cfg.has_embd = false;
 *     cfg.has_head = false; cfg.max_sessions = 16;
 *     shoal_engine_new(m, &cfg, &e, why, sizeof why);
 *     shoal_engine_session_open(e, &slot);       (per remote session)
 *     batch = {n_rows, .hidden_in = recv, .session = slots, .pos = pos,
 *              .hidden_out = send};
 *     shoal_engine_run(e, &batch, why, sizeof why);
 */

typedef struct shoal_engine shoal_engine; /* opaque */

/* ---- MoE: routing and partial expert sums -------------------------------
 *
 * The rows of one MoE layer after routing. Each row's k = n_expert_used
 * slots are sorted by expert id (ascending); slot j of row r carries expert
 * ids[r*k + j] with gate weight w[r*k + j]. A "contribution" is one slot's
 * output: w * down(silu(gate x) * up x), (n_embd) floats. The layer's FFN
 * output for row r is the sum of its k contributions added in slot order,
 * i.e. in expert-id order (shoal_engine_moe_combine), so it does not depend
 * on which peer computed which expert, nor on arrival order. */
typedef struct shoal_moe_rows {
	uint32_t n_rows;
	uint32_t k;         /* slots per row: n_expert_used */
	const float *x;     /* (n_rows, n_embd) the FFN input, after ffn_norm */
	const int32_t *ids; /* (n_rows, k) expert ids, ascending within a row */
	const float *w;     /* (n_rows, k) gate weights */
} shoal_moe_rows;

/* How the layer's owner gets the contributions of experts it does not own
 * (filled by the network layer; unused when the engine owns all experts).
 * dispatch is called once per MoE layer and run, after routing and before
 * the local experts are computed: it should send the rows routed to remote
 * experts and return without waiting. collect then waits (it may block) and
 * writes the contribution of every remote slot into contrib (n_rows, k,
 * n_embd); it must not touch local slots. A non-OK return aborts the run
 * with that error. Pointers are valid only during the call. */
typedef struct shoal_engine_moe_hook {
	void *ctx;
	shoal_err (*dispatch)(void *ctx, uint32_t layer, const shoal_moe_rows *rows);
	shoal_err (*collect)(void *ctx, uint32_t layer, const shoal_moe_rows *rows, float *contrib);
} shoal_engine_moe_hook;

/* ---- tensor-parallel members (engine_tp.c) --------------------------------
 *
 * A member of a tensor group runs the same layers as the other members of
 * its group and computes whole output elements of every matrix: its KV
 * heads' query, key and value heads and their attention, its columns of the
 * attention output, its FFN columns and its columns of the FFN output (in
 * blocks of 32 columns), its experts (id blocks) in MoE layers. Shares are
 * shoal_plan_split of the members' weights (the plan's). The residual
 * stream is replicated: after each split matrix the members exchange their
 * slices in one all-gather and every member reassembles the whole in member
 * order, so every member holds bitwise the state of the unsplit engine.
 * Exchanges per layer and batch: 2 in attention (heads' outputs, then Wo's
 * columns), 2 in a dense FFN (silu(gate) * up, then down's columns), 1 in
 * an MoE FFN (expert contributions).
 *
 * The head (split_head, every member has_head): each member computes the
 * logits of its vocab rows (blocks of 32, the same shares) for every row
 * wanting logits, from the replicated final norm, and member head_root
 * gathers them: one gather per batch with logits, one message from every
 * other member to the root. Only the root hands out logits. */

/* The rounds of a layer, in the order they happen. */
typedef enum shoal_engine_tp_round {
	SHOAL_ENGINE_TP_ATTN = 0,     /* (n_rows, its heads x head_dim) attention out */
	SHOAL_ENGINE_TP_ATTN_OUT = 1, /* (n_rows, its columns of n_embd) of a Wo^T */
	SHOAL_ENGINE_TP_FFN_ACT = 2,  /* (n_rows, its columns of n_ff) silu(g) * u */
	SHOAL_ENGINE_TP_FFN_OUT = 3,  /* (n_rows, its columns of n_embd) of down */
	SHOAL_ENGINE_TP_MOE = 4,      /* (its slots, n_embd) contributions of its
	                                 experts, slots in (row, slot) order */
	SHOAL_ENGINE_TP_HEAD = 5,     /* (n_logits, its vocab rows) logits: the
	                                 gather to the root, after the last layer */
} shoal_engine_tp_round;

/* How a member exchanges slices with the others (filled by the data plane;
 * in-process by a test). exchange is one all-gather: every member of the
 * group calls it in the same sequence of (layer, round); it sends
 * bufs[member] (len[member] bytes, F32) to every other member and fills
 * bufs[m] with exactly len[m] bytes from member m, for every other m; it
 * may block and may return in any order of arrivals (the engine uses the
 * slices in member order). Every length is known to every member before
 * the call (shares, and in MoE layers the routing, are replicated), so a
 * message of another length is an error. Buffers are the engine's and
 * valid during the call only. A non-OK return aborts the run. */
typedef struct shoal_engine_tp_link {
	void *ctx;
	shoal_err (*exchange)(void *ctx, uint32_t layer, shoal_engine_tp_round round,
	                      void *const *bufs, const size_t *len);
	/* The head's gather (round SHOAL_ENGINE_TP_HEAD), required with
	 * split_head, called by every member in the same sequence as exchange:
	 * a member other than root sends bufs[member] (len[member] bytes) to
	 * root alone and receives nothing; root fills bufs[m] with exactly
	 * len[m] bytes from each other member m and sends nothing. May block;
	 * the same ownership and errors as exchange. */
	shoal_err (*gather)(void *ctx, uint32_t root, void *const *bufs, const size_t *len);
} shoal_engine_tp_link;

typedef struct shoal_engine_tp {
	uint32_t n_members;      /* 0 or 1: not a member (the whole layer here) */
	uint32_t member;         /* this engine's index, < n_members */
	const uint64_t *weights; /* (n_members) shares' weights, sum > 0; copied */
	/* With has_head: the head is split by vocab rows (above); head_root <
	 * n_members gets the logits, the others' batches need no logits
	 * buffer. false: every member with has_head computes the whole head. */
	bool split_head;
	uint32_t head_root;
	shoal_engine_tp_link link;
} shoal_engine_tp;

/* ---- creation ------------------------------------------------------------ */

typedef struct shoal_engine_config {
	uint32_t n_threads;    /* >= 1 */
	uint32_t n_ctx;        /* positions per session (0: the model's n_ctx_train) */
	uint32_t max_sessions; /* session slots (>= 1) */
	uint32_t max_rows;     /* rows per shoal_engine_run call (>= 1) */
	uint32_t layer_begin;  /* the layers owned: [layer_begin, layer_end) */
	uint32_t layer_end;
	bool has_embd; /* rows come in as token ids (else hidden states) */
	bool has_head; /* rows may ask for logits (output norm + head) */
	/* Experts owned, (n_layer, n_expert) bytes, nonzero = owned; NULL: all.
	 * Copied. Experts not owned in an owned layer need moe_hook. */
	const uint8_t *expert_mask;
	shoal_engine_moe_hook moe_hook;
	/* A tensor group's member (n_members >= 2): its layers are split as
	 * above; then expert_mask must be NULL (its experts are its share) and
	 * moe_hook is unused. */
	shoal_engine_tp tp;
	const shoal_backend_ops *backend; /* required (runtime/backends.h picks one) */
	/* The KV cache's element type, one the backend supports as a
	 * KV_CACHE: F16 (the default) or F32. Tokens depend on it, so every
	 * engine of one generation must use the same. */
	shoal_dtype kv_type;
	/* Whether a tensor's data is there: a model file that is a weights
	 * cache (models/wcache.h) holds only the tensors fetched, and a tensor
	 * this says is not held is refused by name when it is bound (never
	 * read as zeros). NULL: every tensor is held. */
	bool (*tensor_held)(void *ctx, const struct shoal_gguf_tensor *t);
	void *tensor_held_ctx;
	/* Keep every layer's whole context, a sliding layer's too (else a
	 * sliding layer keeps a ring of window + max_rows positions where the
	 * backend supports ATTN_RING; the bits are the same). */
	bool kv_full;
} shoal_engine_config;

/* A config for the whole model on one node: all layers, embedding, head,
 * all experts, no backend (the caller sets one), 1 session of n_ctx_train,
 * 512 rows, 1 thread, an F16 KV cache. */
shoal_engine_config shoal_engine_config_default(const shoal_model *m);

/* Make an engine for model m (borrowed: must outlive the engine).
 * Bad config or unsupported tensor types -> error and a one-line reason. */
shoal_err shoal_engine_new(const shoal_model *m, const shoal_engine_config *cfg, shoal_engine **out,
                           char *why, size_t why_len);
void shoal_engine_free(shoal_engine *e); /* NULL is a no-op */

const shoal_model *shoal_engine_model(const shoal_engine *e);
uint32_t shoal_engine_n_ctx(const shoal_engine *e);
uint32_t shoal_engine_max_rows(const shoal_engine *e);
/* The KV cache as allocated: elements (of cfg.kv_type) per position of
 * one session, per owned layer (2 x kv_heads x head_dim, or MLA's
 * kv_lora_rank + n_rot: the latent and the rope key), and in bytes over
 * all owned layers. */
size_t shoal_engine_kv_row_elems(const shoal_engine *e);
uint64_t shoal_engine_kv_bytes_per_token(const shoal_engine *e);
/* The KV cache's bytes as allocated, every session: a full layer's planes
 * hold n_ctx positions, a sliding layer's rings shoal_engine_kv_ring. */
uint64_t shoal_engine_kv_bytes(const shoal_engine *e);
/* Positions of a sliding layer's ring (window + max_rows), or 0: every
 * owned layer keeps the whole context. */
uint32_t shoal_engine_kv_ring(const shoal_engine *e);
/* The KV bytes one session of n positions holds over the owned layers: n
 * positions of each full layer, min(n, ring) of each sliding layer's. */
uint64_t shoal_engine_kv_bytes_held(const shoal_engine *e, uint32_t n);
/* The backend instance (for devices()) and its ops. */
const shoal_backend_ops *shoal_engine_backend_ops(const shoal_engine *e);
shoal_backend *shoal_engine_backend(shoal_engine *e);

/* ---- sessions ---------------------------------------------------------------
 * A session slot holds the KV cache of one sequence for the owned layers.
 * Positions of a session fill in order: a batch may write positions
 * p..p+m-1 of a session only if p <= its current length (p < length
 * rewinds: later positions are forgotten), and, where a sliding layer
 * keeps a ring (engine_kv.c), only if p is 0 or its window is still in
 * the ring: any rewind of up to max_rows positions is, a longer one may
 * not be (shoal_engine_session_reusable; else the batch is refused). */
/* A slot passed to reset, close and len is one session_open gave, so it is
 * below max_sessions: another is a bug of the caller and aborts
 * (SHOAL_ASSERT). */
shoal_err shoal_engine_session_open(shoal_engine *e, uint32_t *slot); /* BUSY if none free */
/* Length 0; NOTFOUND if the slot is not open. */
shoal_err shoal_engine_session_reset(shoal_engine *e, uint32_t slot);
void shoal_engine_session_close(shoal_engine *e, uint32_t slot); /* closed slot: no-op */
/* Positions [0, length) are in the cache (0 for a closed slot). */
uint32_t shoal_engine_session_len(const shoal_engine *e, uint32_t slot);
/* How much of the session's first n positions (n capped at its length) a
 * batch may continue from: n where its rings hold the window before n (or
 * the engine keeps no rings), else 0 (compute it again from the start). */
uint32_t shoal_engine_session_reusable(const shoal_engine *e, uint32_t slot, uint32_t n);
/* The lowest position every ring of the session still holds (0 without
 * rings, or before any ring wrapped). */
uint32_t shoal_engine_session_kept_from(const shoal_engine *e, uint32_t slot);

/* ---- running ----------------------------------------------------------------- */

typedef struct shoal_engine_batch {
	uint32_t n_rows;            /* 1..max_rows */
	const int32_t *tokens;      /* (n_rows) token ids: required iff has_embd */
	const float *hidden_in;     /* (n_rows, n_embd): required iff !has_embd */
	const uint32_t *session;    /* (n_rows) open session slots */
	const uint32_t *pos;        /* (n_rows) positions; a session's rows must
	                               hold consecutive positions, in row order */
	const uint8_t *want_logits; /* (n_rows) nonzero: logits for this row; NULL:
	                               none. Only with has_head. */
	float *hidden_out;          /* (n_rows, n_embd) hidden state after the last
	                               owned layer, or NULL */
	float *logits;              /* (n_logits, n_vocab), n_logits = rows wanting
	                               logits, in row order; required if any
	                               (except on a split head's non-root
	                               member: not written there, may be NULL) */
} shoal_engine_batch;

/* Run the owned layers over the batch: embed (has_embd) or take hidden_in,
 * run [layer_begin, layer_end) (writing each row's K/V at its position),
 * then hand out hidden_out and/or logits. The caller owns every buffer.
 * Bad tags, tokens or sizes (possibly from the network) -> SHOAL_ERR_INVAL
 * or _RANGE with a reason, and no session is changed. */
shoal_err shoal_engine_run(shoal_engine *e, const shoal_engine_batch *b, char *why, size_t why_len);

/* ---- MoE pieces (for the network layer and the tests) --------------------------- */

/* Route rows of MoE layer `layer` (owned by e): x (n_rows, n_embd) after
 * ffn_norm; ids, w (n_rows, k) out, as in shoal_moe_rows (softmax over all
 * experts, or sigmoid per expert; top-k with ties to the lower id, chosen
 * by the scores plus the layer's selection bias among the best expert
 * groups where the model has them; weights the unbiased scores,
 * renormalised when the model says and times its routed scale; then
 * sorted by id). The shared experts are not routed: the layer's owner adds
 * them (engine_moe.c). A layer that is not MoE, n_rows over max_rows or
 * a NULL pointer is a bug of the caller (abort); returns SHOAL_OK. */
shoal_err shoal_engine_moe_route(shoal_engine *e, uint32_t layer, uint32_t n_rows, const float *x,
                                 int32_t *ids, float *w);

/* Contributions of the experts in `mask` ((n_expert) bytes, nonzero = do it;
 * NULL = the experts this engine owns) to the rows: for every slot whose
 * expert is in the mask and owned, contrib[(r*k + j) * n_embd ...] (n_embd)
 * is written; other slots are left untouched. rows->n_rows <= max_rows.
 * Expert ids and sizes from the network are checked: bad -> error. */
shoal_err shoal_engine_moe_partial(shoal_engine *e, uint32_t layer, const shoal_moe_rows *rows,
                                   const uint8_t *mask, float *contrib, char *why, size_t why_len);

/* out (n_rows, n_embd) = sum over slots j = 0..k-1 (expert-id order) of
 * contrib (n_rows, k, n_embd). */
void shoal_engine_moe_combine(uint32_t n_rows, uint32_t k, uint32_t n_embd, const float *contrib,
                              float *out);

#endif
