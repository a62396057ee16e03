/*
 * runtime/engine/engine_impl.h: the engine's layout and the functions its
 * files share: engine.c (creation, sessions, the layer loop), engine_tp.c
 * (a tensor group's member), engine_moe.c (routing, experts) and
 * engine_steps.c (the layer steps they share), engine_kv.c (the KV cache's
 * layout and rings). Calls between them go one way, down that list:
 * engine.c -> engine_tp.c -> engine_moe.c -> engine_steps.c -> engine_kv.c,
 * never back up (tests/sh/cycle_check.sh).
 *
 * Part: runtime/ (engine); not a public header. Dimension convention as in
 * engine.h: row-major F32, "(rows, cols)".
 */
#ifndef SHOAL_RUNTIME_ENGINE_IMPL_H
#define SHOAL_RUNTIME_ENGINE_IMPL_H

#include "runtime/engine/engine.h"

/* One layer as the engine uses it. Every pointer is a device address of
 * the backend (runtime/backend.h): matrices are the mapping's tensors made
 * available by ops->weights; the small vectors are F32 copies made at
 * creation (owned layers only; their host copies are in e->vecs). */
typedef struct engine__layer {
	const float *attn_norm, *ffn_norm; /* (n_embd) */
	const float *q_norm, *k_norm;      /* (head_dim) or NULL */
	const float *bq;                   /* (q_dim) or NULL */
	const float *bk, *bv;              /* (kv_dim) or NULL */
	shoal_backend_mat wq;              /* {n_embd, q_dim} */
	shoal_backend_mat wk, wv;          /* {n_embd, kv_dim} */
	shoal_backend_mat wo;              /* {q_dim, n_embd} */
	shoal_backend_mat gate, up;        /* {n_embd, n_ff} (dense) */
	shoal_backend_mat down;            /* {n_ff, n_embd} (dense) */
	bool moe;
	bool all_local;                     /* every expert of the layer is owned */
	bool exp_mapped;                    /* the expert tensors below are mapped */
	shoal_backend_mat router;           /* {n_embd, n_expert} */
	shoal_backend_mat gate_exp, up_exp; /* expert 0 of {n_embd, n_ff_exp, n_expert} */
	shoal_backend_mat down_exp;         /* expert 0 of {n_ff_exp, n_embd, n_expert} */
	size_t gate_exp_stride, up_exp_stride, down_exp_stride; /* bytes per expert */
	const float *exp_probs_b;         /* host (n_expert) selection bias, or NULL */
	const float *exp_probs_b_d;       /* the same, a device address (moe_route) */
	bool shexp;                       /* shared experts (owned layers) */
	shoal_backend_mat gate_sh, up_sh; /* {n_embd, n_ff_shexp} */
	shoal_backend_mat down_sh;        /* {n_ff_shexp, n_embd} */
	/* MLA (hp.mla): wq above is used when q_lora_rank is 0 */
	const float *q_a_norm;           /* (q_lora_rank) */
	const float *kv_a_norm;          /* (kv_lora_rank) */
	shoal_backend_mat wq_a, wq_b;    /* {n_embd, q_lora}, {q_lora, q_dim} */
	shoal_backend_mat wkv_a;         /* {n_embd, kv_lora + n_rot} */
	shoal_backend_mat wk_b;          /* head 0 of {nope, kv_lora, n_head} */
	shoal_backend_mat wv_b;          /* head 0 of {kv_lora, v_head_dim, n_head} */
	size_t wk_b_stride, wv_b_stride; /* bytes per head */
	/* gpt-oss, else NULL / 0 */
	const float *bo;         /* (n_embd) Wo's bias */
	const float *sinks;      /* (n_head) attention sinks */
	uint32_t window;         /* a sliding layer's window (positions), 0: whole context */
	const float *router_b;   /* (n_expert) the router's bias (owned layers) */
	const float *gate_exp_b; /* (n_expert, n_ff_exp) expert biases, where the */
	const float *up_exp_b;   /* (n_expert, n_ff_exp) experts are mapped */
	const float *down_exp_b; /* (n_expert, n_embd) */
} engine__layer;

typedef struct engine__tp engine__tp; /* engine_tp.c */

struct shoal_engine {
	const shoal_model *m;
	shoal_hparams hp;
	shoal_engine_config cfg;
	uint32_t q_dim, kv_dim, n_own; /* n_head*head_dim, n_head_kv*head_dim, layers */
	uint32_t kv_planes;            /* 2 (K and V), or 1 for MLA: kv_dim is then
	                                  kv_lora + n_rot, the latent and rope key */
	float kq_scale;                /* 1/sqrt(head_dim), times yarn_mscale^2 */
	const shoal_backend_ops *ops;
	shoal_backend *bk;
	/* the backend's device addresses are host pointers (the CPU): host
	 * arrays may be handed to ops, and the host views below alias the
	 * device scratch, so nothing is copied */
	bool host_ok;
	/* the backend's moe_route takes this model's router (supports
	 * MOE_ROUTE, sizes within backend.h's limits); its moe_ffn takes
	 * expert biases and the clamped SwiGLU (MOE_BIAS) */
	bool moe_route_op, moe_bias_op;
	bool map_now;           /* engine_mat maps what it checks (creation) */
	engine__layer *layers;  /* (n_layer) */
	const float *out_norm;  /* (n_embd), with has_head */
	shoal_backend_mat head; /* {n_embd, n_vocab} */
	const void *embd;       /* the token_embd table (device), with has_embd */
	uint8_t *expert_mask;   /* (n_layer, n_expert) nonzero = owned */
	bool expert_masked;     /* cfg.expert_mask was given (else every expert is owned) */
	const float *rope_cs;   /* (n_ctx, n_rot) cos, sin pairs (device) */
	float **vecs;           /* (n_vecs) host F32 copies the engine made */
	size_t n_vecs, cap_vecs;

	/* sessions */
	uint8_t *sess_open;         /* (max_sessions) */
	uint32_t *sess_len;         /* (max_sessions) */
	uint32_t *sess_next;        /* (max_sessions) run() scratch */
	uint32_t *sess_lo;          /* (max_sessions) the lowest position its
	                               rings still hold (engine_kv.c) */
	shoal_backend_buf *kv_buf;  /* the KV cache's memory */
	shoal_backend_buf *act_buf; /* the device scratch below */
	/* per session (kv_sess_bytes apart), per owned layer li (from byte
	 * kv_off[li]): kv_planes planes of (n_kv_heads, kv_cap[li], head size)
	 * elements of cfg.kv_type, kv_elt bytes each, in kv_buf. kv_cap is
	 * n_ctx, or a sliding layer's ring (engine_kv.c) */
	uint8_t *kv;
	size_t kv_elt;
	size_t kv_sess_bytes;
	uint32_t *kv_cap;      /* (n_own) positions of a plane */
	size_t *kv_off;        /* (n_own) bytes from a session's first */
	uint32_t ring_window;  /* the window of the ring layers; 0: no rings */
	uint32_t kv_cache_dim; /* kv_dim, or a tensor member's KV heads x head_dim */
	engine__tp *tp;        /* a tensor group's member, or NULL */

	/* device scratch, for max_rows rows (in act_buf) */
	float *x;            /* (max_rows, n_embd) residual stream */
	float *xn;           /* (max_rows, n_embd) normed */
	float *tmp;          /* (max_rows, n_embd) */
	float *q, *att;      /* (max_rows, q_dim) */
	float *k, *v;        /* (max_rows, kv_dim) */
	float *ff_g, *ff_u;  /* (max_rows, max(n_ff, n_ff_exp)) */
	void **krow, **vrow; /* host (max_rows) cache plane of each row's session */
	/* MLA scratch (hp.mla only) */
	float *mla_qa;                /* (max_rows, q_lora_rank) */
	float *mla_q;                 /* (max_rows, n_head, kv_dim) rope part first, then the
	                                 no-rope query absorbed into the latent */
	float *mla_att;               /* (max_rows, n_head, kv_dim) attention over the cache rows */
	float *mla_v;                 /* (max_rows, n_head * v_head_dim) */
	uint32_t *n_kv;               /* host (max_rows) */
	uint32_t *kv_slot, *kv_first; /* host (max_rows) a ring's slots, windows */
	float *logits_d; /* (SHOAL_ENGINE_LOGIT_ROWS, n_vocab) device logits, !host_ok */
	/* MoE scratch (MoE models only): device, and host views (routing and
	 * the combine run on the host; aliases of the device ones if host_ok) */
	float *moe_lg_d, *moe_sel_d, *moe_xd; /* device */
	/* moe_ffn's scratch (max_rows, k, 2 n_ff_exp + n_embd) and, !host_ok,
	 * the routing written for it (max_rows, k): device */
	float *moe_scr;
	int32_t *moe_ids_d;
	float *moe_w_d;
	float *moe_logits;   /* host (max_rows, n_expert) */
	int32_t *moe_ids;    /* host (max_rows, k) */
	float *moe_w;        /* host (max_rows, k) */
	float *moe_contrib;  /* host (max_rows, k, n_embd) */
	float *moe_x;        /* host (max_rows, n_embd) rows routed to one expert */
	uint32_t *moe_slot;  /* host (max_rows) their (r*k + j) */
	float *moe_sel;      /* host (max_rows, n_expert) gate scores (host routing) */
	float *moe_key;      /* host (n_expert) one row's selection keys (host routing) */
	float *xn_h, *tmp_h; /* host (max_rows, n_embd) views of xn and tmp */
	void *host_block;    /* the host views' memory when !host_ok */
};

/* Rows of an MoE batch above which the engine reads the routing's ids
 * back for moe_ffn to plan from (backend.h's ids_host: the Vulkan
 * backend groups a batch's slots by expert so that each expert's weights
 * are read once): 8, the rows of a decode step or a speculative check,
 * stay on the device; a prefill batch pays one small read per layer. */
#define SHOAL_ENGINE_MOE_PLAN_ROWS 8u

/* Logit rows per head product on a backend with device memory: the device
 * logits buffer holds this many rows, read back after each. */
#define SHOAL_ENGINE_LOGIT_ROWS 16u

/* engine_moe.c: the FFN of MoE layer l for the rows in e->xn, into e->tmp. */
shoal_err engine__moe_ffn(shoal_engine *e, uint32_t l, uint32_t n_rows, char *why, size_t why_len);

/* engine_tp.c: a tensor group's member. init (after expert_mask, before the
 * layers) checks cfg.tp, computes the shares, sets kv_cache_dim and this
 * member's experts in expert_mask, and allocates the slices' buffers. */
shoal_err engine__tp_init(shoal_engine *e, char *why, size_t why_len);
void engine__tp_free(engine__tp *t); /* NULL is a no-op */
/* The member's attention block on e->x (x += attention), its dense FFN and
 * its MoE FFN on e->xn into e->tmp, each with its exchanges. */
shoal_err engine__tp_attn(shoal_engine *e, uint32_t il, const shoal_engine_batch *b, char *why,
                          size_t why_len);
shoal_err engine__tp_ffn(shoal_engine *e, uint32_t il, uint32_t n, char *why, size_t why_len);
shoal_err engine__tp_moe(shoal_engine *e, uint32_t il, uint32_t n, char *why, size_t why_len);
/* The head of a split_head member on e->xn (n, n_embd), normed: its vocab
 * rows' logits, gathered into logits (n, n_vocab) on the root (logits is
 * not read elsewhere). */
shoal_err engine__tp_head(shoal_engine *e, uint32_t n, float *logits, char *why, size_t why_len);
bool engine__tp_split_head(const shoal_engine *e);   /* a member with split_head */
bool engine__tp_needs_logits(const shoal_engine *e); /* not a split head's non-root */

/* engine_kv.c (the layout and the rings, see there): kv_cap, kv_off and
 * kv_sess_bytes for the owned layers (after kv_cache_dim, before the
 * cache's allocation), with rings where rings_ok (the backend's
 * ATTN_RING); NOMEM. */
shoal_err engine__kv_layout(shoal_engine *e, bool rings_ok);
/* The K (which 0) or V (1) plane of session s, owned layer li. */
void *engine__kv_plane(const shoal_engine *e, uint32_t s, uint32_t li, int which);
/* Whether a call may start session s at p0 (its rings hold p0's window). */
bool engine__kv_can_start(const shoal_engine *e, uint32_t s, uint32_t p0);
/* A call wrote positions [p0, p1) of session s (or may have, on failure). */
void engine__kv_wrote(shoal_engine *e, uint32_t s, uint32_t p0, uint32_t p1);

/* engine_steps.c: n floats of host memory as a device address for ops: host
 * itself when host_ok, else written to dev (device scratch) and dev. */
const float *engine__to_dev(shoal_engine *e, float *dev, const float *host, size_t n);
/* n floats at device address dev into host (nothing when they are the same
 * memory). */
void engine__to_host(shoal_engine *e, const float *dev, float *host, size_t n);
/* Rows [first, first + count) of a matrix {n_in, n_out}: the same bytes. */
shoal_backend_mat engine__mat_rows(shoal_backend_mat m, uint32_t first, uint32_t count);
/* The rows' new cache entries in (owned layer li), then attention for
 * n_head query heads of q (n_rows, n_head, head_dim) into out, same shape,
 * with sinks (n_head, device, or NULL) and, window > 0, each row seeing
 * only the window positions up to its own.
 * The new keys are e->k and the values e->v, (n_rows, kv_cache_dim) each;
 * with one cache plane (MLA) the cache row is both key and value and e->v
 * is not read. */
void engine__attend(shoal_engine *e, const shoal_engine_batch *b, uint32_t li, uint32_t n_head,
                    uint32_t n_head_kv, uint32_t head_dim, const float *q, const float *sinks,
                    uint32_t window, float *out);
/* Attention of owned layer il for KV heads [h0, h0 + hn) and their query
 * heads, on e->xn (normed): q, k, v (+ biases, norms, RoPE), K/V into the
 * cache (kv_cache_dim = hn x head_dim columns per position), out (n_rows,
 * hn x group x head_dim) before Wo. */
void engine__attn_heads(shoal_engine *e, uint32_t il, const shoal_engine_batch *b, uint32_t h0,
                        uint32_t hn, float *out);
/* out (n_rows, n_embd) = down(silu(gate xn) * up xn), ff wide, from e->xn
 * through e->ff_g, e->ff_u. */
void engine__ffn_swiglu(shoal_engine *e, const shoal_backend_mat *gate, const shoal_backend_mat *up,
                        const shoal_backend_mat *down, uint32_t ff, uint32_t n, float *out);

#endif
