/*
 * runtime/cpu/backend_cpu.c: the CPU compute backend (see backend.h): matrix
 * products through the kernels table (runtime/cpu/kernels.h) split over a
 * thread pool, and the per-row ops (norm, RoPE, attention, SwiGLU).
 *
 * Part: runtime/ (engine). Divisions: instance, devices, matrix products,
 * attention, per-row ops, the ops table.
 *
 * Work splitting: a matrix product is cut into chunks of output rows taken
 * from an atomic counter, so a thread slowed by another process does not
 * hold the others up; each output element is one kernel dot product, so
 * which thread computes it does not change its bits. Attention is split by
 * (row, head) the same way.
 */
#include "runtime/cpu/backend_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/membw.h"
#include "runtime/cpu/quant.h"
#include "runtime/cpu/threadpool.h"

/* ---- instance ------------------------------------------------------------ */

struct shoal_backend {
	const shoal_kernels *k;
	shoal_threadpool *pool;
	uint32_t n_threads, max_ctx, max_rows, max_n, max_group;
	size_t act_stride; /* bytes per converted activation row: 4 * max_n
	                      (F32 is the widest partner type: 4 B/elem vs
	                      Q8_0 34/32, Q8_K 292/256, F16/BF16 2) */
	uint8_t *act;      /* (max_rows, act_stride) converted activations */
	float *scores;     /* (n_threads, max_group, max_ctx) attention scratch */

	/* Weights packed once for batches of 2+ rows (kernels.h pack), where
	 * the kernels have a packed form and the engine's weights fit the
	 * last-level cache twice over: there the weights come from the cache
	 * and the gemm's on-the-fly repack is most of its time; where they
	 * stream from memory the repack hides behind the reads and a copy
	 * would only double the memory. An open-addressing table by the
	 * matrix's (data, n, rows); packed on first use, freed with the
	 * instance. */
	struct shoal_cpu_pack {
		const void *w;
		int64_t n, nrows;
		void *p; /* NULL: could not pack (no memory): the repack path */
	} * packs;
	size_t pack_cap, n_packs;
	uint64_t pack_bytes, pack_budget; /* budget 0: packing off */

	/* the job in flight (one at a time, see threadpool.h) */
	struct {
		uint32_t n_mat;
		const shoal_backend_mat *w[SHOAL_BACKEND_MAX_MATS];
		float *y[SHOAL_BACKEND_MAX_MATS];
		size_t ldy[SHOAL_BACKEND_MAX_MATS];
		uint32_t chunk_end[SHOAL_BACKEND_MAX_MATS]; /* prefix sums */
		uint32_t rows_per_chunk[SHOAL_BACKEND_MAX_MATS];
		const void *packed[SHOAL_BACKEND_MAX_MATS]; /* or NULL */
		uint32_t n_rows;
		shoal_dtype act_type;
		const float *x; /* (n_rows, n_in) ldx */
		size_t ldx;
		int64_t n_in;
	} mm;
	const shoal_backend_attn *attn;
	struct {
		const float *g, *u;
		float *h;
		size_t n;
	} sw;
	_Atomic uint32_t next; /* next work item of the current job */
};

static void cpu_destroy(shoal_backend *b)
{
	if (!b)
		return;
	shoal_threadpool_free(b->pool);
	for (size_t i = 0; i < b->pack_cap; i++)
		free(b->packs[i].p);
	free(b->packs);
	free(b->act);
	free(b->scores);
	free(b);
}

/* Packing stops at this many bytes whatever the cache (a VM may report a
 * host's whole cache as its own). */
#define SHOAL_CPU_PACK_MAX ((uint64_t)256 << 20)

/* The packing budget for weights of weight_bytes: SHOAL_PACK=0 never, =1
 * always (tests); else those bytes (+1/8 for the groups' padding) when
 * twice them fit the last-level cache, 0 otherwise. */
static uint64_t cpu_pack_budget(const shoal_kernels *k, uint64_t weight_bytes)
{
	if (!k->pack_bytes(SHOAL_DTYPE_Q8_0, 256, 16))
		return 0;
	const char *env = getenv("SHOAL_PACK");
	if (env && !strcmp(env, "0"))
		return 0;
	if (env && !strcmp(env, "1"))
		return UINT64_MAX;
	long llc = -1; /* glibc names the caches; elsewhere: unknown, no packing */
#ifdef _SC_LEVEL3_CACHE_SIZE
	llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
	if (llc <= 0)
		llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
	if (weight_bytes == 0 || llc <= 0 || weight_bytes > SHOAL_CPU_PACK_MAX ||
	    2 * weight_bytes > (uint64_t)llc)
		return 0;
	return weight_bytes + weight_bytes / 8 + ((uint64_t)1 << 20);
}

static shoal_err cpu_create(const shoal_backend_limits *lim, shoal_backend **out)
{
	*out = NULL;
	if (lim->n_threads < 1 || lim->max_ctx < 1 || lim->max_rows < 1 || lim->max_n < 1 ||
	    lim->max_group < 1)
		return SHOAL_ERR_INVAL;
	shoal_err e = SHOAL_ERR_NOMEM;
	shoal_backend *b = calloc(1, sizeof *b);
	if (!b)
		return SHOAL_ERR_NOMEM;
	b->k = shoal_kernels_best();
	b->pack_budget = cpu_pack_budget(b->k, lim->weight_bytes);
	b->n_threads = lim->n_threads;
	b->max_ctx = lim->max_ctx;
	b->max_rows = lim->max_rows;
	b->max_n = lim->max_n;
	b->max_group = lim->max_group;
	b->act_stride = ((size_t)lim->max_n * 4 + 63) & ~(size_t)63;
	size_t n_sc = (size_t)lim->n_threads * lim->max_group;
	if ((size_t)lim->max_rows > SIZE_MAX / b->act_stride || n_sc > SIZE_MAX / 4 / lim->max_ctx)
		goto fail;
	b->act = aligned_alloc(64, (size_t)lim->max_rows * b->act_stride);
	b->scores = calloc(n_sc * lim->max_ctx, sizeof *b->scores);
	if (!b->act || !b->scores)
		goto fail;
	e = shoal_threadpool_new(lim->n_threads, &b->pool);
	if (e)
		goto fail;
	*out = b;
	return SHOAL_OK;
fail:
	cpu_destroy(b);
	return e;
}

/* ---- devices --------------------------------------------------------------- */

/* The probe streams 512 MiB: twice the largest last-level caches of current
 * server parts (256 MiB), so it measures DRAM; a pass takes ~10-100 ms at
 * 5-50 GB/s, and membw runs about 6. */
#define SHOAL_CPU_PROBE_BYTES ((size_t)512 << 20)

static size_t cpu_devices(shoal_backend *b, bool measure, shoal_backend_device *out, size_t cap)
{
	if (cap < 1)
		return 1;
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "cpu %s x%u", b->k->isa, b->n_threads);
	out->kind = SHOAL_DEVICE_CPU;
	out->unified = true;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0)
		out->mem_bytes = (uint64_t)pages * (uint64_t)psz;
	if (measure) {
		double g = shoal_membw_read_gbps((int)b->n_threads, SHOAL_CPU_PROBE_BYTES);
		out->read_gbps = g > 0 ? g : 0;
	}
	return 1;
}

/* ---- matrix products --------------------------------------------------------- */

static void cpu_quantize_worker(void *ctx, uint32_t ith, uint32_t nth)
{
	shoal_backend *b = ctx;
	for (uint32_t r = ith; r < b->mm.n_rows; r += nth)
		b->k->quantize_act(b->mm.act_type, b->mm.x + r * b->mm.ldx,
		                   b->act + r * b->act_stride, b->mm.n_in);
}

static void cpu_matmul_worker(void *ctx, uint32_t ith, uint32_t nth)
{
	shoal_backend *b = ctx;
	const shoal_kernels *k = b->k;
	uint32_t n_chunks = b->mm.chunk_end[b->mm.n_mat - 1];
	for (;;) {
		uint32_t c = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
		if (c >= n_chunks)
			break;
		uint32_t m = 0;
		while (c >= b->mm.chunk_end[m])
			m++;
		const shoal_backend_mat *w = b->mm.w[m];
		uint32_t first = m ? b->mm.chunk_end[m - 1] : 0;
		int64_t r0 = (int64_t)(c - first) * b->mm.rows_per_chunk[m];
		int64_t r1 = r0 + b->mm.rows_per_chunk[m];
		if (r1 > w->n_out)
			r1 = w->n_out;
		const uint8_t *wd = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
		if (b->mm.n_rows == 1)
			k->gemv(w->type, w->n_in, wd, w->row_bytes, r1 - r0, b->act,
			        b->mm.y[m] + r0);
		else if (b->mm.packed[m]) /* r0: a multiple of 16 (rows_per_chunk) */
			k->gemm_packed(w->type, w->n_in, b->mm.packed[m], r0, r1 - r0, b->act,
			               b->act_stride, b->mm.n_rows, b->mm.y[m] + r0, b->mm.ldy[m]);
		else
			k->gemm(w->type, w->n_in, wd, w->row_bytes, r1 - r0, b->act, b->act_stride,
			        b->mm.n_rows, b->mm.y[m] + r0, b->mm.ldy[m]);
	}
	(void)ith;
	(void)nth;
}

/* Rows per chunk: about 4 chunks per thread balances threads slowed by
 * other processes without making chunks so small that the per-chunk atomic
 * (~50 ns) matters: a 2048-wide Q8_0 row is ~2 KB, ~100 ns to stream. One
 * thread takes each matrix whole. Multiples of 16 keep SIMD row tiles whole. */
static uint32_t cpu_rows_per_chunk(int64_t n_out, uint32_t nth)
{
	if (nth == 1)
		return (uint32_t)n_out;
	int64_t r = n_out / ((int64_t)nth * 4);
	r = (r + 15) & ~(int64_t)15;
	if (r < 16)
		r = 16;
	return (uint32_t)r;
}

/* The slot where the pack table of cap (a power of 2) entries starts
 * looking for the matrix at w. */
static size_t cpu_pack_slot(const void *w, size_t cap)
{
	return (size_t)(((uintptr_t)w >> 4) * 0x9e3779b97f4a7c15ull) & (cap - 1);
}

/* The packed copy of w, made now if it is new and fits the budget; NULL
 * where there is none (the kernels repack on the fly). */
static const void *cpu_packed(shoal_backend *b, const shoal_backend_mat *w)
{
	size_t bytes = b->k->pack_bytes(w->type, w->n_in, w->n_out);
	if (!bytes)
		return NULL;
	if (b->n_packs + 1 > b->pack_cap / 2) { /* grow: at most half full */
		size_t cap = b->pack_cap ? 2 * b->pack_cap : 256;
		struct shoal_cpu_pack *t = calloc(cap, sizeof *t);
		if (!t)
			return NULL;
		for (size_t i = 0; i < b->pack_cap; i++) {
			if (!b->packs[i].w)
				continue;
			size_t h = cpu_pack_slot(b->packs[i].w, cap);
			while (t[h].w)
				h = (h + 1) & (cap - 1);
			t[h] = b->packs[i];
		}
		free(b->packs);
		b->packs = t;
		b->pack_cap = cap;
	}
	size_t h = cpu_pack_slot(w->data, b->pack_cap);
	for (; b->packs[h].w; h = (h + 1) & (b->pack_cap - 1))
		if (b->packs[h].w == w->data && b->packs[h].n == w->n_in &&
		    b->packs[h].nrows == w->n_out)
			return b->packs[h].p;
	struct shoal_cpu_pack *e = &b->packs[h];
	e->w = w->data;
	e->n = w->n_in;
	e->nrows = w->n_out;
	b->n_packs++;
	if (bytes > b->pack_budget - b->pack_bytes)
		return NULL; /* over the budget: remembered as not packed */
	e->p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!e->p)
		return NULL;
	b->k->pack(w->type, w->n_in, w->data, w->row_bytes, w->n_out, e->p);
	b->pack_bytes += bytes;
	return e->p;
}

static void cpu_matmul(shoal_backend *b, uint32_t n_mat, const shoal_backend_mat *w, const float *x,
                       size_t ldx, uint32_t n_rows, float *const *y, const size_t *ldy)
{
	if (n_rows == 0 || n_mat == 0)
		return;
	bool done[SHOAL_BACKEND_MAX_MATS] = {0};
	/* One pass per distinct activation type among the matrices (usually
	 * one: mixed quantizations like Q4_K_M pair Q4_K and Q6_K, both Q8_K). */
	for (uint32_t i = 0; i < n_mat; i++) {
		if (done[i])
			continue;
		shoal_dtype act = shoal_kernels_act_type(w[i].type);
		b->mm.n_mat = 0;
		uint32_t n_chunks = 0;
		for (uint32_t j = i; j < n_mat; j++) {
			if (done[j] || shoal_kernels_act_type(w[j].type) != act)
				continue;
			done[j] = true;
			uint32_t m = b->mm.n_mat++;
			uint32_t rpc = cpu_rows_per_chunk(w[j].n_out, b->n_threads);
			b->mm.w[m] = &w[j];
			b->mm.y[m] = y[j];
			b->mm.ldy[m] = ldy[j];
			b->mm.rows_per_chunk[m] = rpc;
			b->mm.packed[m] =
			    n_rows >= 2 && b->pack_budget ? cpu_packed(b, &w[j]) : NULL;
			n_chunks += (uint32_t)((w[j].n_out + rpc - 1) / rpc);
			b->mm.chunk_end[m] = n_chunks;
		}
		b->mm.act_type = act;
		b->mm.x = x;
		b->mm.ldx = ldx;
		b->mm.n_in = w[i].n_in;
		b->mm.n_rows = n_rows;
		if (n_rows >= 2 * b->n_threads && b->n_threads > 1)
			shoal_threadpool_run(b->pool, cpu_quantize_worker, b);
		else
			cpu_quantize_worker(b, 0, 1);
		atomic_store_explicit(&b->next, 0, memory_order_relaxed);
		shoal_threadpool_run(b->pool, cpu_matmul_worker, b);
	}
}

/* ---- attention ------------------------------------------------------------------ */

/* The softmax of n scores with an attention sink (backend.h): the sink
 * joins the max and the sum (in double) but gets no weight of its own. */
static void cpu_softmax_sink(float *s, uint32_t n, float sink)
{
	float m = sink;
	for (uint32_t i = 0; i < n; i++)
		m = s[i] > m ? s[i] : m;
	double sum = (double)expf(sink - m);
	for (uint32_t i = 0; i < n; i++) {
		s[i] = expf(s[i] - m);
		sum += (double)s[i];
	}
	float inv = (float)(1.0 / sum);
	for (uint32_t i = 0; i < n; i++)
		s[i] *= inv;
}

/* Scores of the group's query heads q over n cached keys from element at
 * of plane k, into s (group rows, max_ctx apart). */
static void cpu_attn_scores(shoal_backend *b, const shoal_backend_attn *a, const float *q,
                            uint32_t group, const void *k, size_t at, uint32_t n, float *s)
{
	if (a->kv_type == SHOAL_DTYPE_F16)
		b->k->attn_scores_f16(q, (int)group, a->head_dim, (const uint16_t *)k + at,
		                      a->pos_ld, (int)n, a->scale, s, b->max_ctx);
	else
		b->k->attn_scores(q, (int)group, a->head_dim, (const float *)k + at, a->pos_ld,
		                  (int)n, a->scale, s, b->max_ctx);
}

/* o (group, head_dim) = the weights p (group rows, max_ctx apart) times n
 * cached values from element at of plane v; acc: added to o's sums in
 * the same order (a wrapped ring's second run). */
static void cpu_attn_values(shoal_backend *b, const shoal_backend_attn *a, const float *p,
                            uint32_t group, const void *v, size_t at, uint32_t n, bool acc,
                            float *o)
{
	int hd = (int)a->head_dim, ng = (int)group;
	size_t C = b->max_ctx;
	if (a->kv_type == SHOAL_DTYPE_F16)
		(acc ? b->k->attn_values_acc_f16 : b->k->attn_values_f16)(
		    p, C, ng, hd, (const uint16_t *)v + at, a->pos_ld, (int)n, o);
	else
		(acc ? b->k->attn_values_acc : b->k->attn_values)(
		    p, C, ng, hd, (const float *)v + at, a->pos_ld, (int)n, o);
}

/* One work item is (row, KV head): the group of query heads sharing that
 * KV head is done together, so each cached K and V row is read once per
 * group instead of once per head (at long contexts the cache, not the
 * weights, dominates what decoding reads). Each output element still
 * accumulates over positions 0..n-1 in order, the same bits as one head
 * at a time. */
static void cpu_attn_worker(void *ctx, uint32_t ith, uint32_t nth)
{
	shoal_backend *b = ctx;
	const shoal_backend_attn *a = b->attn;
	uint32_t hd = a->head_dim, n_items = a->n_rows * a->n_head_kv;
	uint32_t group = a->n_head / a->n_head_kv;
	size_t q_ld = (size_t)a->n_head * hd, kv_ld = a->pos_ld;
	size_t C = b->max_ctx;
	float *sc = b->scores + (size_t)ith * b->max_group * C; /* (group, max_ctx) */
	for (;;) {
		uint32_t it = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
		if (it >= n_items)
			break;
		uint32_t r = it / a->n_head_kv, kvh = it % a->n_head_kv, h0 = kvh * group;
		const float *q = a->q + r * q_ld + (size_t)h0 * hd; /* (group, head_dim) */
		float *o = a->out + r * q_ld + (size_t)h0 * hd;     /* (group, head_dim) */
		uint32_t n = a->n_kv[r];
		/* the row's positions as runs of slots: [s0, s0 + n0) then, where
		 * a ring's window wraps, [0, n - n0) */
		uint32_t s0 = 0, n0 = n;
		if (a->ring) {
			s0 = a->first[r] % a->ring;
			n0 = n < a->ring - s0 ? n : a->ring - s0;
		}
		size_t at = kvh * a->head_ld; /* (ring or n_ctx) ld kv_ld from here */
		cpu_attn_scores(b, a, q, group, a->k[r], at + s0 * kv_ld, n0, sc);
		if (n0 < n)
			cpu_attn_scores(b, a, q, group, a->k[r], at, n - n0, sc + n0);
		for (uint32_t g = 0; g < group; g++) {
			if (a->sinks)
				cpu_softmax_sink(sc + g * C, n, a->sinks[h0 + g]);
			else
				b->k->softmax(sc + g * C, (int)n);
		}
		cpu_attn_values(b, a, sc, group, a->v[r], at + s0 * kv_ld, n0, false, o);
		if (n0 < n)
			cpu_attn_values(b, a, sc + n0, group, a->v[r], at, n - n0, true, o);
	}
	(void)nth;
}

static void cpu_attention(shoal_backend *b, const shoal_backend_attn *a)
{
	b->attn = a;
	atomic_store_explicit(&b->next, 0, memory_order_relaxed);
	if (a->n_rows * a->n_head_kv < 2)
		cpu_attn_worker(b, 0, 1);
	else
		shoal_threadpool_run(b->pool, cpu_attn_worker, b);
}

/* ---- per-row ops ------------------------------------------------------------------- */

static void cpu_rms_norm(shoal_backend *b, const float *x, size_t ldx, const float *w, uint32_t n,
                         uint32_t n_rows, float eps, float *y, size_t ldy)
{
	for (uint32_t r = 0; r < n_rows; r++) {
		const float *xr = x + (size_t)r * ldx; /* (n) */
		float *yr = y + (size_t)r * ldy;       /* (n) */
		double ss = 0;
		for (uint32_t i = 0; i < n; i++)
			ss += (double)(xr[i] * xr[i]);
		float mean = (float)(ss / n);
		float scale = 1.0f / sqrtf(mean + eps);
		for (uint32_t i = 0; i < n; i++)
			yr[i] = (xr[i] * scale) * w[i];
	}
	(void)b;
}

static void cpu_rope(shoal_backend *b, float *x, size_t ld, uint32_t n_rows, uint32_t n_head,
                     uint32_t head_dim, uint32_t n_rot, const uint32_t *pos, const float *cs,
                     bool neox)
{
	uint32_t half = n_rot / 2;
	for (uint32_t r = 0; r < n_rows; r++) {
		const float *c = cs + (size_t)pos[r] * n_rot; /* (n_rot/2, 2) cos, sin */
		for (uint32_t h = 0; h < n_head; h++) {
			float *v = x + (size_t)r * ld + (size_t)h * head_dim; /* (head_dim) */
			for (uint32_t i = 0; i < half; i++) {
				float co = c[2 * i], si = c[2 * i + 1];
				uint32_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
				float x0 = v[i0], x1 = v[i1];
				v[i0] = x0 * co - x1 * si;
				v[i1] = x0 * si + x1 * co;
			}
		}
	}
	(void)b;
}

/* SwiGLU in pieces of this many elements, one work item each; a call of
 * fewer (a decode step's row) stays on the caller's thread: the pool's
 * hand-off would cost more than it saves. Elementwise, so the bits do not
 * depend on the split. */
#define SHOAL_CPU_SWIGLU_PIECE 8192

static void cpu_swiglu_worker(void *ctx, uint32_t ith, uint32_t nth)
{
	shoal_backend *b = ctx;
	size_t n = b->sw.n;
	for (;;) {
		size_t i = (size_t)atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed) *
		           SHOAL_CPU_SWIGLU_PIECE;
		if (i >= n)
			break;
		size_t len = n - i < SHOAL_CPU_SWIGLU_PIECE ? n - i : SHOAL_CPU_SWIGLU_PIECE;
		b->k->silu_mul(b->sw.g + i, b->sw.u + i, len, b->sw.h + i);
	}
	(void)ith;
	(void)nth;
}

static void cpu_swiglu(shoal_backend *b, const float *g, const float *u, size_t n, float *h)
{
	if (n < 2 * SHOAL_CPU_SWIGLU_PIECE || b->n_threads < 2) {
		b->k->silu_mul(g, u, n, h);
		return;
	}
	b->sw.g = g, b->sw.u = u, b->sw.h = h, b->sw.n = n;
	atomic_store_explicit(&b->next, 0, memory_order_relaxed);
	shoal_threadpool_run(b->pool, cpu_swiglu_worker, b);
}

static void cpu_swiglu_oai(shoal_backend *b, const float *g, const float *u, size_t n, float alpha,
                           float limit, float *h)
{
	for (size_t i = 0; i < n; i++) {
		float x = g[i] < limit ? g[i] : limit;
		float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
		h[i] = x / (1.0f + expf(-alpha * x)) * (y + 1.0f);
	}
	(void)b;
}

static void cpu_add(shoal_backend *b, float *y, size_t ldy, const float *x, size_t ldx, uint32_t n,
                    uint32_t n_rows)
{
	for (uint32_t r = 0; r < n_rows; r++) {
		float *yr = y + (size_t)r * ldy;       /* (n) */
		const float *xr = x + (size_t)r * ldx; /* (n) */
		for (uint32_t i = 0; i < n; i++)
			yr[i] += xr[i];
	}
	(void)b;
}

static void cpu_copy(shoal_backend *b, float *dst, size_t ldd, const float *src, size_t lds,
                     uint32_t n, uint32_t n_rows)
{
	for (uint32_t r = 0; r < n_rows; r++)
		memcpy(dst + (size_t)r * ldd, src + (size_t)r * lds, n * sizeof(float));
	(void)b;
}

static void cpu_embed(shoal_backend *b, shoal_dtype t, const void *table, size_t row_bytes,
                      uint32_t n_embd, const int32_t *ids, uint32_t n_rows, float *out)
{
	for (uint32_t r = 0; r < n_rows; r++)
		shoal_dequantize_row(t, (const uint8_t *)table + (size_t)ids[r] * row_bytes,
		                     out + (size_t)r * n_embd, n_embd);
	(void)b;
}

/* ---- the router ---------------------------------------------------------------------- */

static void cpu_softmax(shoal_backend *b, float *x, uint32_t n, uint32_t n_rows, size_t ld)
{
	(void)b;
	for (uint32_t r = 0; r < n_rows; r++)
		b->k->softmax(x + (size_t)r * ld, (int)n);
}

/* The shared selection (runtime/backend_host.c): k passes (k is small). */
static void cpu_top_k(shoal_backend *b, const float *x, uint32_t n, uint32_t n_rows, size_t ld,
                      uint32_t k, int32_t *ids, float *vals)
{
	(void)b;
	shoal_backend_top_k_rows(x, n, n_rows, ld, k, ids, vals);
}

/* The router's choice (backend.h's moe_route), row by row on the stack:
 * p is this backend's softmax (the softmax op's kernel) or 1 / (1 +
 * expf(-l)), then the shared selection and weighing (backend_host.c). */
static void cpu_moe_route(shoal_backend *b, const shoal_backend_route *r)
{
	float p[SHOAL_BACKEND_ROUTE_MAX_EXPERT], sel[SHOAL_BACKEND_ROUTE_MAX_EXPERT];
	uint32_t ne = r->n_expert;
	SHOAL_ASSERT(shoal_backend_route_sized(r));
	for (uint32_t i = 0; i < r->n_rows; i++) {
		const float *lg = r->logits + (size_t)i * r->ld; /* (n_expert) */
		const float *pr = lg;
		if (r->gating == SHOAL_BACKEND_GATING_SOFTMAX) {
			memcpy(p, lg, ne * sizeof(float));
			b->k->softmax(p, (int)ne);
			pr = p;
		} else if (r->gating == SHOAL_BACKEND_GATING_SIGMOID) {
			for (uint32_t x = 0; x < ne; x++)
				p[x] = 1.0f / (1.0f + expf(-lg[x]));
			pr = p;
		}
		shoal_backend_route_row(r, lg, pr, sel, r->ids + (size_t)i * r->k,
		                        r->w + (size_t)i * r->k);
	}
}

/* The routed experts through this backend's matmul and swiglu (on host
 * memory: runtime/backend_host.c). */
static const shoal_backend_ops cpu_ops;
static void cpu_moe_ffn(shoal_backend *b, const shoal_backend_moe *m)
{
	shoal_backend_moe_ffn_host(b, &cpu_ops, m);
}

/* ---- buffers, types ------------------------------------------------------------------- */

struct shoal_backend_buf {
	size_t bytes;
	unsigned char *p;
};

static shoal_err cpu_buf_alloc(shoal_backend *b, size_t bytes, shoal_backend_buf **out)
{
	(void)b;
	*out = NULL;
	shoal_backend_buf *buf = calloc(1, sizeof *buf);
	if (!buf || !(buf->p = calloc(bytes ? bytes : 1, 1))) {
		free(buf);
		return SHOAL_ERR_NOMEM;
	}
	buf->bytes = bytes;
	*out = buf;
	return SHOAL_OK;
}

static void cpu_buf_free(shoal_backend *b, shoal_backend_buf *buf)
{
	(void)b;
	if (buf)
		free(buf->p);
	free(buf);
}

static void *cpu_buf_host(shoal_backend_buf *buf)
{
	return buf->p;
}

/* Device addresses are host pointers: weights stay where they are, and
 * every op has finished when it returns. */
static shoal_err cpu_weights(shoal_backend *b, const void *host, size_t bytes, const void **dev)
{
	(void)b;
	(void)bytes;
	*dev = host;
	return SHOAL_OK;
}

static void cpu_write(shoal_backend *b, void *dev, const void *src, size_t n)
{
	(void)b;
	memcpy(dev, src, n);
}

static void cpu_read(shoal_backend *b, const void *dev, void *dst, size_t n)
{
	(void)b;
	memcpy(dst, dev, n);
}

static void cpu_sync(shoal_backend *b)
{
	(void)b;
}

static bool cpu_supports(shoal_backend_op op, shoal_dtype t)
{
	switch (op) {
	case SHOAL_BACKEND_OP_MATMUL:
		return shoal_dtype_computable(t);
	case SHOAL_BACKEND_OP_EMBED:
	case SHOAL_BACKEND_OP_TO_F32:
		return shoal_quant_supported(t);
	case SHOAL_BACKEND_OP_KV_CACHE:
	case SHOAL_BACKEND_OP_ATTN_RING:
		return t == SHOAL_DTYPE_F32 || t == SHOAL_DTYPE_F16;
	case SHOAL_BACKEND_OP_ATTN_SINKS:
	case SHOAL_BACKEND_OP_SWIGLU_OAI:
	case SHOAL_BACKEND_OP_MOE_ROUTE:
	case SHOAL_BACKEND_OP_MOE_BIAS:
		return t == SHOAL_DTYPE_F32;
	}
	return false;
}

static void cpu_to_f32(shoal_dtype t, const void *src, float *dst, size_t n)
{
	shoal_dequantize_row(t, src, dst, (int64_t)n);
}

/* F32 or F16 (the activation converter's round to nearest even). */
static void cpu_kv_store(shoal_backend *b, shoal_dtype t, const float *src, size_t ld,
                         uint32_t n_rows, uint32_t n_head_kv, uint32_t head_dim, void *const *plane,
                         const uint32_t *pos, size_t head_ld)
{
	size_t elt = shoal_dtype_row_bytes(t, 1);
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t h = 0; h < n_head_kv; h++) {
			size_t at = ((size_t)h * head_ld + (size_t)pos[r] * head_dim) * elt;
			b->k->quantize_act(t, src + (size_t)r * ld + (size_t)h * head_dim,
			                   (uint8_t *)plane[r] + at, (int64_t)head_dim);
		}
}

/* ---- the ops table ---------------------------------------------------------------- */

static const shoal_backend_ops cpu_ops = {
    .abi = SHOAL_BACKEND_ABI,
    .name = "cpu",
    .supports = cpu_supports,
    .to_f32 = cpu_to_f32,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .devices = cpu_devices,
    .matmul = cpu_matmul,
    .rms_norm = cpu_rms_norm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .kv_store = cpu_kv_store,
    .swiglu = cpu_swiglu,
    .swiglu_oai = cpu_swiglu_oai,
    .add = cpu_add,
    .copy = cpu_copy,
    .embed = cpu_embed,
    .softmax = cpu_softmax,
    .top_k = cpu_top_k,
    .moe_ffn = cpu_moe_ffn,
    .moe_route = cpu_moe_route,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .buf_addr = cpu_buf_host,
    .buf_host = cpu_buf_host,
    .weights = cpu_weights,
    .write = cpu_write,
    .read = cpu_read,
    .sync = cpu_sync,
};

const shoal_backend_ops *shoal_backend_cpu(void)
{
	return &cpu_ops;
}

const char *shoal_backend_cpu_isa(void)
{
	return shoal_kernels_best()->isa;
}
