/*
 * runtime/backend.h: the compute backend of the engine, as a versioned
 * const ops table. The CPU backend (runtime/cpu/backend_cpu.h: kernels
 * table + thread pool) is the first implementation; a Metal or CUDA
 * backend fills the same table and the engine's layer-range API
 * (engine.h) does not change. The engine never names a backend: its
 * caller passes one in the engine config, chosen by the registry of
 * backend kinds (runtime/backends.h).
 *
 * Part: runtime/ (the interface between engine/ and a backend room such
 * as cpu/). The conventions every op follows are listed below the
 * includes.
 */
#ifndef SHOAL_RUNTIME_BACKEND_H
#define SHOAL_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/dtype.h"

/* The version of this table's layout and contract; an engine refuses a
 * table of another version. Raise it with any change to the table. */
#define SHOAL_BACKEND_ABI 8u

/*
 * Conventions for every op:
 *   - activations are row-major F32 matrices: "(n_rows, n) ld" means row r
 *     starts at x + r * ld floats;
 *   - device addresses: every pointer an op reads or writes through, the
 *     activations, the KV cache, weight matrices and tables, is a *device
 *     address*: inside a buffer of this instance (buf_addr) or a range
 *     that weights() made available, plus an offset. Only the parameters
 *     marked "host" are host memory (positions, token ids, per-row
 *     pointer tables, top_k's results), read or written during the call.
 *     The CPU backend's device addresses are host pointers; a GPU
 *     backend's are not, and its caller never dereferences them: it moves
 *     bytes with write() and read(). Address arithmetic inside one buffer
 *     or weights range is allowed (a row, a head, an expert);
 *   - ops may run later than the call (a GPU backend records them and
 *     submits at the next sync, read, or top_k), but always in call order,
 *     each seeing the results of the ones before;
 *   - every output element is computed by one thread in a fixed order that
 *     depends only on the op's sizes, never on n_rows, the thread count or
 *     the other rows: results are bitwise independent of threads and batch;
 *   - ops never allocate, never block on anything but their own workers,
 *     and take no ownership of the pointers they get;
 *   - sizes are trusted (the engine checks outside input before calling);
 *   - every member is required (none may be NULL); an instance is used by
 *     one caller thread at a time.
 */

typedef struct shoal_backend shoal_backend;         /* opaque instance of a backend */
typedef struct shoal_backend_buf shoal_backend_buf; /* memory of an instance */

/* What supports() is asked about, each for one tensor type. */
typedef enum shoal_backend_op {
	SHOAL_BACKEND_OP_MATMUL = 1, /* weights of the type in matmul */
	SHOAL_BACKEND_OP_EMBED,      /* an embedding table of the type */
	SHOAL_BACKEND_OP_TO_F32,     /* to_f32 of the type (norm weights, biases) */
	SHOAL_BACKEND_OP_KV_CACHE,   /* a KV cache of the type (kv_store, attention) */
	/* ABI 6, asked with F32: attention honours shoal_backend_attn.sinks;
	 * swiglu_oai computes (a backend that says no is never given either) */
	SHOAL_BACKEND_OP_ATTN_SINKS,
	SHOAL_BACKEND_OP_SWIGLU_OAI,
	/* ABI 7, asked with the KV cache's type: attention reads ring planes
	 * (shoal_backend_attn.ring, .first); a backend that says no is given
	 * ring 0 only, and the engine keeps a sliding layer's whole context */
	SHOAL_BACKEND_OP_ATTN_RING,
	/* ABI 8, asked with F32: moe_route computes (a backend that says no
	 * is never called there: the engine routes on the host); moe_ffn
	 * honours shoal_backend_moe's expert biases and oai (a backend that
	 * says no is given neither, and gpt-oss's experts run one by one) */
	SHOAL_BACKEND_OP_MOE_ROUTE,
	SHOAL_BACKEND_OP_MOE_BIAS,
} shoal_backend_op;

/* What kind of processor a device is. */
typedef enum shoal_device_kind {
	SHOAL_DEVICE_CPU = 0,
	SHOAL_DEVICE_GPU,
} shoal_device_kind;

/* One compute device as the scheduler wants to know it. */
typedef struct shoal_backend_device {
	char name[64];          /* e.g. "cpu avx2 x2", "NVIDIA H100 (vulkan)" */
	shoal_device_kind kind; /* CPU or GPU */
	bool unified;           /* shares the host's memory (a Mac, an iGPU, the CPU) */
	bool software;          /* an emulated device (Mesa's lavapipe): never chosen by auto */
	uint64_t mem_bytes;     /* memory weights can live in (host RAM for the CPU) */
	double read_gbps;       /* measured streaming read bandwidth, GB/s; 0: not measured */
	double gflops;          /* measured F32 multiply-add rate, GFLOP/s; 0: not measured */
} shoal_backend_device;

/* A weight matrix used as y = W x, in place in the model mapping.
 * Shape {n_in, n_out} (GGUF order): n_out rows of n_in elements of `type`,
 * row_bytes apart. */
typedef struct shoal_backend_mat {
	shoal_dtype type;
	int64_t n_in;
	int64_t n_out;
	size_t row_bytes;
	const void *data; /* (n_out, n_in) of type: a device address */
} shoal_backend_mat;

/* Attention of n_rows query rows, each over its own session's cache. */
typedef struct shoal_backend_attn {
	uint32_t n_rows;
	uint32_t n_head, n_head_kv, head_dim; /* n_head % n_head_kv == 0 (GQA) */
	float scale;                          /* 1/sqrt(head_dim) */
	const float *q;                       /* (n_rows, n_head * head_dim) after RoPE */
	shoal_dtype kv_type;                  /* the cache's elements (supports KV_CACHE) */
	/* host (n_rows) -> cache (device addresses): KV head h's row at
	 * position t starts at element h * head_ld + t * pos_ld of k[r] (the
	 * engine keeps each head's positions together: head_ld = n_ctx *
	 * head_dim, or ring * head_dim, pos_ld = head_dim). k[r] == v[r] for one shared plane
	 * (MLA: the latent row is both key and value). */
	const void *const *k;
	const void *const *v;
	size_t head_ld, pos_ld;
	const uint32_t *n_kv; /* host (n_rows): row r sees n_kv[r] cache positions */
	float *out;           /* (n_rows, n_head * head_dim) */
	/* (n_head) per query head, or NULL (ABI 6; only for a backend that
	 * supports ATTN_SINKS): a sink is one more score in the softmax's
	 * sum, with no value: p_t = exp(s_t - m) / (sum_t' exp(s_t' - m) +
	 * exp(sink - m)), m the largest of the scores and the sink. A device
	 * address. */
	const float *sinks;
	/* ABI 7; only for a backend that supports ATTN_RING, else 0 and NULL.
	 * ring > 0: the planes are rings of `ring` positions: position t is at
	 * slot t % ring (element h * head_ld + (t % ring) * pos_ld), and row r
	 * sees positions [first[r], first[r] + n_kv[r]) (n_kv[r] <= ring),
	 * read in that order, so a window that wraps past the ring's end gives
	 * the bits of the same positions in a plane of the whole context.
	 * first: host (n_rows). ring 0: first is NULL and row r sees [0, n_kv[r])
	 * as above. */
	uint32_t ring;
	const uint32_t *first;
} shoal_backend_attn;

#define SHOAL_BACKEND_MAX_MATS 4

/* The routed experts of a mixture-of-experts FFN over n_rows rows (ABI 5):
 * for each row r, with e_j = ids[r * k + j] and w_j = w[r * k + j],
 *   out[r] = sum over j = 0..k-1, in that order, of
 *            w_j * down_e(silu(gate_e x[r]) * up_e x[r])   (e = e_j)
 * each product rounded to F32 before it is added, the first term not
 * added to anything (out is not read). Expert e's matrix of gate is
 * gate.data + e * gate_stride ({n_embd, n_ff}), likewise up ({n_embd,
 * n_ff}) and down ({n_ff, n_embd}); each expert's products are matmul's
 * (the same activation rounding and sums as that backend's matmul of the
 * expert's matrix), silu(g) * u is swiglu's. The routing (ids, w) is
 * device memory: a row's k ids are distinct and ascending, each < n_expert
 * (trusted: the engine chooses and sorts them). ids_host: the same ids in
 * host memory where the caller has them (the engine, when it routed on the
 * host or read a batch's ids back), or NULL: a backend may plan its work
 * from them (which experts run, on how many rows) instead of reading ids
 * back. scratch: device memory of
 * n_rows * k * (2 * n_ff + n_embd) floats that the op may overwrite. */
typedef struct shoal_backend_moe {
	uint32_t n_rows, k, n_expert;
	uint32_t n_embd, n_ff;
	shoal_backend_mat gate, up, down;           /* expert 0's matrices */
	size_t gate_stride, up_stride, down_stride; /* bytes from one expert to the next */
	const float *x;                             /* (n_rows, n_embd) ldx */
	size_t ldx;
	const int32_t *ids;      /* (n_rows, k) expert ids */
	const int32_t *ids_host; /* host (n_rows, k): the same, or NULL */
	const float *w;          /* (n_rows, k) their weights */
	float *out;              /* (n_rows, n_embd) ldo, not overlapping x */
	size_t ldo;
	float *scratch;
	/* ABI 8; only for a backend that supports MOE_BIAS, else NULL and
	 * false. Expert biases (gpt-oss), each NULL or a device address:
	 * gate_b (n_expert, n_ff), up_b (n_expert, n_ff), down_b (n_expert,
	 * n_embd): expert e's row added to its product (after the product is
	 * rounded, as add() adds: g = gate_e x + gate_b[e], likewise u and the
	 * down product before w_j weighs it). oai: h = swiglu_oai(g, u, alpha,
	 * limit) instead of silu(g) * u. */
	const float *gate_b, *up_b, *down_b;
	bool oai;
	float alpha, limit;
} shoal_backend_moe;

/* The router of an MoE layer after its product (ABI 8, moe_route): for
 * each of n_rows rows of logits l (n_expert, ld apart), with
 *   p = softmax(l) over all experts      (SOFTMAX: the backend's softmax)
 *       sigmoid(l) = 1 / (1 + exp(-l))    (SIGMOID)
 *       l                                 (SOFTMAX_TOPK)
 * the k experts chosen by the key
 *   key = l                  when bias is NULL and n_group < 2 (softmax
 *                            and sigmoid are increasing, so this is p's
 *                            order, and every backend reads the same bits)
 *   key = p + bias           otherwise, then, when n_group >= 2, a group
 *                            (n_expert / n_group experts in a row) scores
 *                            the sum of its two best keys, and the keys
 *                            outside the n_group_used best groups (ties to
 *                            the lower group) become -inf;
 * top k of key, ties to the lower id, NaN lowest (shoal_backend_top_k_rows);
 * their weights w_j = p[id_j] (SOFTMAX_TOPK: the softmax of the k chosen
 * logits, sum in double), divided by max(sum_j w_j, 2^-14) when norm,
 * times scale; then the k (id, weight) pairs sorted by ascending id into
 * ids and w. Chosen ids are the CPU's exactly where the key is l; with a
 * bias or groups a backend's key differs from the CPU's by its softmax's
 * or sigmoid's rounding (a few ulp), so only keys that close to a tie may
 * choose differently. Weights: within 1e-4 relative of the CPU's (a float
 * sum of up to SHOAL_BACKEND_ROUTE_MAX_EXPERT terms, in any order). */
#define SHOAL_BACKEND_ROUTE_MAX_EXPERT 1024u
#define SHOAL_BACKEND_ROUTE_MAX_K      64u
#define SHOAL_BACKEND_ROUTE_MAX_GROUPS 64u

typedef enum shoal_backend_gating {
	SHOAL_BACKEND_GATING_SOFTMAX = 0,
	SHOAL_BACKEND_GATING_SIGMOID,
	SHOAL_BACKEND_GATING_SOFTMAX_TOPK,
} shoal_backend_gating;

typedef struct shoal_backend_route {
	uint32_t n_rows;
	uint32_t n_expert; /* <= SHOAL_BACKEND_ROUTE_MAX_EXPERT */
	uint32_t k;        /* 1 <= k <= min(n_expert, SHOAL_BACKEND_ROUTE_MAX_K) */
	shoal_backend_gating gating;
	/* n_group < 2: no groups; else n_group <= SHOAL_BACKEND_ROUTE_MAX_GROUPS
	 * divides n_expert and 1 <= n_group_used <= n_group, and the groups
	 * left hold at least k experts */
	uint32_t n_group, n_group_used;
	bool norm;
	float scale;
	const float *logits; /* (n_rows, n_expert) ld, read only */
	size_t ld;
	const float *bias; /* (n_expert) selection bias (DeepSeek-V3), or NULL */
	int32_t *ids;      /* (n_rows, k) out */
	float *w;          /* (n_rows, k) out */
} shoal_backend_route;

/* What an instance must be able to do; scratch is sized from these once. */
typedef struct shoal_backend_limits {
	uint32_t n_threads; /* workers, the caller's thread included (>= 1) */
	uint32_t max_ctx;   /* positions one attention row may span */
	uint32_t max_rows;  /* rows of one op */
	uint32_t max_n;     /* the widest matrix input */
	uint32_t max_group; /* query heads per KV head (GQA group) */
	/* The bytes of the weights the engine will multiply (its layers and
	 * head), for the backend's choice of keeping a second, packed copy of
	 * them (the CPU backend: only where they fit its last-level cache
	 * twice over); 0: unknown (never). */
	uint64_t weight_bytes;
} shoal_backend_limits;

typedef struct shoal_backend_ops {
	uint32_t abi;     /* SHOAL_BACKEND_ABI of the table's build */
	const char *name; /* "cpu" */

	/* Whether op can take tensors of type t; asked before create (the
	 * engine checks every tensor of its layers with it). */
	bool (*supports)(shoal_backend_op op, shoal_dtype t);

	/* n elements of type t at src (whole blocks) to F32 at dst, on the
	 * host: for the small vectors the engine keeps (supports TO_F32). */
	void (*to_f32)(shoal_dtype t, const void *src, float *dst, size_t n);

	/* Make an instance able to run ops within *lim (copied). *out is
	 * owned by the caller (destroy). */
	shoal_err (*create)(const shoal_backend_limits *lim, shoal_backend **out);
	void (*destroy)(shoal_backend *b); /* NULL is a no-op */

	/* Describe up to cap devices into out; returns how many there are
	 * (the instance computes on the first). measure: run the bandwidth
	 * probe (blocks for ~0.1-1 s). */
	size_t (*devices)(shoal_backend *b, bool measure, shoal_backend_device *out, size_t cap);

	/* For each m < n_mat: y[m] (n_rows, n_out[m]) ldy[m] = x W[m]^T, with
	 * x (n_rows, n_in) ldx. All W[m] have the same n_in. The backend
	 * picks the activation type each weight type wants and converts x
	 * once per such type for all of them (the CPU backend: Q8_0 or Q8_K
	 * rows for quantized weights). */
	void (*matmul)(shoal_backend *b, uint32_t n_mat, const shoal_backend_mat *w, const float *x,
	               size_t ldx, uint32_t n_rows, float *const *y, const size_t *ldy);

	/* y = x / sqrt(mean(x^2) + eps) * w, per row of n; x (n_rows, n) ldx,
	 * y (n_rows, n) ldy (may alias x with the same ld); w (n). Sum of
	 * squares in double on the CPU (a GPU: F32 partial sums combined in a
	 * fixed tree). */
	void (*rms_norm)(shoal_backend *b, const float *x, size_t ldx, const float *w, uint32_t n,
	                 uint32_t n_rows, float eps, float *y, size_t ldy);

	/* RoPE in place on x (n_rows, n_head * head_dim) ld (ld >= n_head *
	 * head_dim): the first n_rot dims of each head rotate by the angles of
	 * row r's position pos[r] (host); cs (n_ctx, n_rot) holds (cos, sin)
	 * pairs per position and pair (YaRN's mix is in the table); neox:
	 * pairs (i, i + n_rot/2), else adjacent pairs (2i, 2i+1). */
	void (*rope)(shoal_backend *b, float *x, size_t ld, uint32_t n_rows, uint32_t n_head,
	             uint32_t head_dim, uint32_t n_rot, const uint32_t *pos, const float *cs,
	             bool neox);

	/* Causal GQA attention, softmax in F32 with the sum in double; the
	 * cached elements are read as their exact F32 values. */
	void (*attention)(shoal_backend *b, const shoal_backend_attn *a);

	/* The new cache rows of n_rows rows: src (n_rows, n_head_kv *
	 * head_dim) ld F32 into cache elements of type t (supports KV_CACHE;
	 * F16: round to nearest even): row r's head h goes to element
	 * h * head_ld + pos[r] * head_dim of plane[r]. plane (host, n_rows)
	 * holds device addresses, pos is host (a ring plane's caller passes
	 * slots, position % ring, as pos). */
	void (*kv_store)(shoal_backend *b, shoal_dtype t, const float *src, size_t ld,
	                 uint32_t n_rows, uint32_t n_head_kv, uint32_t head_dim, void *const *plane,
	                 const uint32_t *pos, size_t head_ld);

	/* h = silu(g) * u elementwise over n; g, u, h may alias. */
	void (*swiglu)(shoal_backend *b, const float *g, const float *u, size_t n, float *h);

	/* gpt-oss's clamped SwiGLU elementwise over n (ABI 6; called only
	 * where supports(SWIGLU_OAI, F32)): with g' = min(g, limit) and
	 * u' = min(max(u, -limit), limit), h = g' / (1 + exp(-alpha g')) *
	 * (u' + 1), in F32; g, u, h may alias. */
	void (*swiglu_oai)(shoal_backend *b, const float *g, const float *u, size_t n, float alpha,
	                   float limit, float *h);

	/* y (n_rows, n) ldy += x (n_rows, n) ldx elementwise; ldx 0 adds the
	 * one row x to every row (a bias). */
	void (*add)(shoal_backend *b, float *y, size_t ldy, const float *x, size_t ldx, uint32_t n,
	            uint32_t n_rows);

	/* dst (n_rows, n) ldd = src (n_rows, n) lds, F32; the two do not
	 * overlap. */
	void (*copy)(shoal_backend *b, float *dst, size_t ldd, const float *src, size_t lds,
	             uint32_t n, uint32_t n_rows);

	/* Rows of an embedding table: out (n_rows, n_embd) = rows ids (host)
	 * of table (n_vocab, n_embd) of type t (ids already checked < n_vocab). */
	void (*embed)(shoal_backend *b, shoal_dtype t, const void *table, size_t row_bytes,
	              uint32_t n_embd, const int32_t *ids, uint32_t n_rows, float *out);

	/* The MoE router. softmax: each of n_rows rows of n (ld apart) in
	 * place, exp(x - max) / sum with the sum in double. top_k: the k <= n
	 * largest of each row, best first, ties to the lower index, NaN
	 * lowest; ids (n_rows, k) and their values vals (n_rows, k) are host
	 * memory, so top_k waits for the ops before it. */
	void (*softmax)(shoal_backend *b, float *x, uint32_t n, uint32_t n_rows, size_t ld);
	void (*top_k)(shoal_backend *b, const float *x, uint32_t n, uint32_t n_rows, size_t ld,
	              uint32_t k, int32_t *ids, float *vals);

	/* The routed experts of an MoE FFN (shoal_backend_moe above), every
	 * row and expert in one go: a GPU backend records it without waiting
	 * (no read-back between experts). The matrices' types are ones that
	 * supports(MATMUL) takes. */
	void (*moe_ffn)(shoal_backend *b, const shoal_backend_moe *m);

	/* The router's choice (shoal_backend_route above) from logits in
	 * device memory into ids and w in device memory, recorded without
	 * waiting (ABI 8; called only where supports(MOE_ROUTE, F32)). */
	void (*moe_route)(shoal_backend *b, const shoal_backend_route *r);

	/* Memory of the instance, which may live on a device: bytes zeroed
	 * (NOMEM when there is not enough). buf_addr: the device address of
	 * its first byte, for ops. buf_host: where the host may read and
	 * write it directly (the CPU backend), or NULL for device memory. */
	shoal_err (*buf_alloc)(shoal_backend *b, size_t bytes, shoal_backend_buf **out);
	void (*buf_free)(shoal_backend *b, shoal_backend_buf *buf); /* NULL is a no-op */
	void *(*buf_addr)(shoal_backend_buf *buf);
	void *(*buf_host)(shoal_backend_buf *buf);

	/* Make bytes of host memory that stay valid and unchanged for the
	 * instance's life (the model mapping's weights, the engine's F32
	 * copies) available to ops: *dev is their device address. The CPU
	 * backend hands back host itself; a GPU backend uploads them once
	 * (NOMEM when its memory is full), or maps them where memory is
	 * unified. Freed with the instance. */
	shoal_err (*weights)(shoal_backend *b, const void *host, size_t bytes, const void **dev);

	/* Host <-> device bytes at a device address, in call order with the
	 * ops: write() is seen by the ops after it; read() waits for the ops
	 * before it, then copies. */
	void (*write)(shoal_backend *b, void *dev, const void *src, size_t n);
	void (*read)(shoal_backend *b, const void *dev, void *dst, size_t n);

	/* Wait until every op called so far has finished. */
	void (*sync)(shoal_backend *b);
} shoal_backend_ops;

/* The top_k contract of the ops table on host rows: x (n_rows, n) ld, the
 * k <= n largest of each row, best first, ties to the lower index, NaN
 * lowest, into ids and vals (n_rows, k) (runtime/backend_host.c: what the
 * backends share, so that they choose alike). */
void shoal_backend_top_k_rows(const float *x, uint32_t n, uint32_t n_rows, size_t ld, uint32_t k,
                              int32_t *ids, float *vals);

/* Whether r's sizes are within what every moe_route takes (n_expert, k
 * and n_group against the SHOAL_BACKEND_ROUTE_MAX_* bounds): the backends
 * assert it. */
bool shoal_backend_route_sized(const shoal_backend_route *r);

/* One row of the moe_route contract on host memory: lg (n_expert) the
 * row's logits, p (n_expert) its gate scores (shoal_backend_route's p, as
 * the caller's softmax or sigmoid computed them; lg for SOFTMAX_TOPK),
 * sel (n_expert) scratch; ids and w (k) out. Only r's sizes and flags
 * are read (not its pointers). */
void shoal_backend_route_row(const shoal_backend_route *r, const float *lg, const float *p,
                             float *sel, int32_t *ids, float *w);

/* The moe_ffn contract for a backend whose device addresses are host
 * pointers (the CPU), through its own ops: experts in ascending id order,
 * the rows routed to each gathered into scratch, one matmul of gate and
 * up, swiglu and one matmul of down for all of them, and each row's terms
 * added into out in slot order (ascending ids: the order of the experts). */
void shoal_backend_moe_ffn_host(shoal_backend *b, const shoal_backend_ops *ops,
                                const shoal_backend_moe *m);

#endif
