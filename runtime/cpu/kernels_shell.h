/*
 * runtime/cpu/kernels_shell.h: the shells every kernel table is built from,
 * written once: the loops over rows and column tiles of a gemv or gemm, the
 * per-type dispatch, the table itself, and templates of the tile bodies
 * (float types, pairs of 32-element blocks, super-blocks) around an ISA's own
 * vector operations. Each ISA file keeps only its inner kernels.
 *
 * Part: runtime/, room cpu/. Names are kernels__* (inside the kernel files only).
 * Everything is static inline or a macro, so each ISA library, compiled with
 * its own -m flags, expands its own copy and needs no other object (but
 * base/assert.c for a caller bug).
 * Divisions: tiles and drivers, tile-body templates, dispatch and table.
 */
#ifndef SHOAL_RUNTIME_KERNELS_SHELL_H
#define SHOAL_RUNTIME_KERNELS_SHELL_H

#include "base/assert.h"
#include "runtime/cpu/kernels_iq.h"

#define KERNELS__INLINE static inline __attribute__((always_inline))

/* Before the loops over a tile's rows and columns (compile-time bounds of
 * 1..4): unrolled whole, so each (row, column) accumulator stays in a
 * register; without it GCC -O2 kept a 4x4 tile's accumulators on the stack
 * (a load and a store around every fma). */
#define KERNELS__UNROLL _Pragma("GCC unroll 4")

/* How far ahead the streaming kernels prefetch weights: one core keeps
 * bandwidth x latency = 20-30 GB/s x ~100-150 ns = 2-4.5 KB in flight, but
 * the out-of-order window of a Q8_0 step (~18 uops per 68 bytes) reaches
 * only ~1.7 KB ahead; prefetching 4 KB ahead measured ~65% -> ~80% of the
 * read bound on one EPYC host (1 thread, into L2). */
#define KERNELS__PF_AHEAD 4096

/* The locality of those prefetches. x86 chooses at run time, as
 * kernels__pf_l2 says (kernels.c: by vendor, then by the start-up probe,
 * SHOAL_PREFETCH to fix it): prefetcht0 (every level) or prefetcht1 (L2 and
 * below). Neither wins everywhere: on a Zen 4 EPYC (avx512_bf16) prefetcht1
 * halved decode (1.1B Q8_0, 1 thread, 9.6-10.0 tok/s against 19-22 with
 * prefetcht0); on a Xeon with AMX (2 vCPUs, a VM) prefetcht0 held Q8_0 gemv
 * to 8.7-9.3 GB/s, 82-87 % of a plain read of the same bytes, and
 * prefetcht1 or prefetcht2 gave 11.1-11.4 GB/s, 107-111 % (the line fill
 * buffers that prefetcht0 holds are few; the L2 streamer keeps more lines
 * in flight). Elsewhere (NEON: PRFM PLDL2KEEP) locality 2, as measured
 * before. */
extern int kernels__pf_l2;

/* Prefetch for reading the line at p, with the locality above. */
KERNELS__INLINE void kernels__prefetch_line(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	if (kernels__pf_l2)
		__builtin_prefetch(p, 0, 2);
	else
		__builtin_prefetch(p, 0, 3);
#else
	__builtin_prefetch(p, 0, 2);
#endif
}

/* Prefetch for reading, as kernels__prefetch_line, the lines of a block
 * KERNELS__PF_AHEAD bytes on. */
KERNELS__INLINE void kernels__prefetch_block(const void *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		kernels__prefetch_line((const char *)p + KERNELS__PF_AHEAD + o);
}

/* ---- the attention cache's rows ----------------------------------------------
 * kernels.h's attention loops read cached rows of F32 or of F16. Each table
 * writes a loop once over `const void *` rows and a compile-time flag f16
 * (p##_scores_kv, p##_values_kv, always inlined; values_kv's flag acc
 * starts its sums from o's values instead of 0) and KERNELS__ATTN_ENTRIES
 * makes its six table entries from them, so the F16 entries run the F32
 * loops' operations on the converted elements (exact: every binary16 is a
 * binary32). */

/* Element i of cached row p. */
KERNELS__INLINE const void *kernels__kv_at(const void *p, size_t i, int f16)
{
	return (const char *)p + i * (f16 ? sizeof(uint16_t) : sizeof(float));
}

KERNELS__INLINE float kernels__kv_get(const void *p, size_t i, int f16)
{
	return f16 ? kernels__fp16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* A table without packed weights (kernels.h pack_bytes 0). */
__attribute__((unused)) static size_t kernels__no_pack_bytes(shoal_dtype wt, int64_t n,
                                                             int64_t nrows)
{
	(void)wt, (void)n, (void)nrows;
	return 0;
}

__attribute__((unused)) static void kernels__no_pack(shoal_dtype wt, int64_t n, const void *w,
                                                     size_t row_bytes, int64_t nrows, void *out)
{
	(void)wt, (void)n, (void)w, (void)row_bytes, (void)nrows, (void)out;
	SHOAL_ASSERT(!"pack on a table without packed weights");
}

__attribute__((unused)) static void
kernels__no_gemm_packed(shoal_dtype wt, int64_t n, const void *packed, int64_t row0, int64_t nrows,
                        const void *xq, size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	(void)wt, (void)n, (void)packed, (void)row0, (void)nrows, (void)xq, (void)xq_stride;
	(void)ncols, (void)y, (void)y_stride;
	SHOAL_ASSERT(!"gemm_packed on a table without packed weights");
}

/* The scores and values entries of p for cached elements of type T
 * (suffix sfx, flag f16). */
#define KERNELS__ATTN_PAIR(p, sfx, T, f16)                                                         \
	__attribute__((unused)) static void p##_attn_scores##sfx(                                  \
	    const float *q, int ng, int hd, const T *k, size_t k_ld, int n, float scale, float *s, \
	    size_t s_ld)                                                                           \
	{                                                                                          \
		p##_scores_kv(q, ng, hd, k, k_ld, n, scale, s, s_ld, f16);                         \
	}                                                                                          \
	__attribute__((unused)) static void p##_attn_values##sfx(const float *pr, size_t p_ld,     \
	                                                         int ng, int hd, const T *v,       \
	                                                         size_t v_ld, int n, float *o)     \
	{                                                                                          \
		p##_values_kv(pr, p_ld, ng, hd, v, v_ld, n, o, f16, 0);                            \
	}                                                                                          \
	__attribute__((unused)) static void p##_attn_values_acc##sfx(const float *pr, size_t p_ld, \
	                                                             int ng, int hd, const T *v,   \
	                                                             size_t v_ld, int n, float *o) \
	{                                                                                          \
		p##_values_kv(pr, p_ld, ng, hd, v, v_ld, n, o, f16, 1);                            \
	}
#define KERNELS__ATTN_ENTRIES(p)                                                                   \
	KERNELS__ATTN_PAIR(p, , float, 0)                                                          \
	KERNELS__ATTN_PAIR(p, _f16, uint16_t, 1)

/* ---- tiles and drivers ----------------------------------------------------------
 * A tile function computes out[c] = dot(w row, xq[c]) for c < ncols (1..4),
 * each column with exactly the operations it would get alone, so gemm (tiles
 * of 4 columns, reusing each weight block from registers or L1) equals gemv
 * (tiles of 1) bitwise. A rows function does the same for R (1..4) rows,
 * row_bytes apart, into out[r * KERNELS__TILE + c]; every (row, column) sees
 * the same operations whatever R and ncols are. */

#define KERNELS__TILE                                                                              \
	4 /* columns per tile: 4 accumulator sets fit the                                          \
	   * 16 ymm / 32 zmm / 32 NEON registers with room for                                     \
	   * the decoded weight block */

typedef void (*kernels__tile_fn)(int64_t n, const void *w, const void *const *xq, int ncols,
                                 float *out);
typedef void (*kernels__rows_fn)(int64_t n, const char *w, size_t row_bytes, int R,
                                 const void *const *xq, int ncols, float *out);
/* A whole product, y[c * y_stride + i] = dot(W row i, xq row c), for a type
 * whose kernels work on groups of rows (ncols 1: the gemv; xq_stride and
 * y_stride 0 then). */
typedef void (*kernels__mm_fn)(int64_t n, const void *w, size_t row_bytes, int64_t nrows,
                               const void *xq, size_t xq_stride, int64_t ncols, float *y,
                               size_t y_stride);

static inline void kernels__run_gemv(kernels__tile_fn f, int64_t n, const void *w, size_t row_bytes,
                                     int64_t nrows, const void *xq, float *y)
{
	const void *x[1] = {xq};
	const char *wr = (const char *)w;
	for (int64_t i = 0; i < nrows; i++, wr += row_bytes)
		f(n, wr, x, 1, &y[i]);
}

/* The activation rows c0 .. c0 + nc - 1 of a gemm, as tile functions take them. */
static inline void kernels__cols(const void *xq, size_t xq_stride, int64_t c0, int nc,
                                 const void **x)
{
	for (int c = 0; c < nc; c++)
		x[c] = (const char *)xq + (size_t)(c0 + c) * xq_stride;
}

/* Columns c0 .. of one column tile: up to KERNELS__TILE of those left. */
static inline int kernels__ncols(int64_t ncols, int64_t c0)
{
	return ncols - c0 < KERNELS__TILE ? (int)(ncols - c0) : KERNELS__TILE;
}

/* kernels__run_gemm for the columns [cb, ce). */
static inline void kernels__run_gemm_block(kernels__tile_fn f, int64_t n, const void *w,
                                           size_t row_bytes, int64_t nrows, const void *xq,
                                           size_t xq_stride, int64_t cb, int64_t ce, float *y,
                                           size_t y_stride)
{
	const char *wr = (const char *)w;
	for (int64_t i = 0; i < nrows; i++, wr += row_bytes) {
		for (int64_t c0 = cb; c0 < ce; c0 += KERNELS__TILE) {
			int nc = kernels__ncols(ce, c0);
			const void *x[KERNELS__TILE];
			float out[KERNELS__TILE];
			kernels__cols(xq, xq_stride, c0, nc, x);
			f(n, wr, x, nc, out);
			for (int c = 0; c < nc; c++)
				y[(size_t)(c0 + c) * y_stride + (size_t)i] = out[c];
		}
	}
}

/* Columns per pass of the gemm drivers: each weight row (tile) meets a
 * block of activation rows that stays in L2 (64 Q8_K rows of 2048 are
 * ~150 KB) instead of all of them streaming from L3 once per row; the
 * weights are then read once per block (a few % of a 512-token prefill's
 * time). The order of (row, column) pairs changes no element's bits. */
#define KERNELS__COL_BLOCK 64

static inline void kernels__run_gemm(kernels__tile_fn f, int64_t n, const void *w, size_t row_bytes,
                                     int64_t nrows, const void *xq, size_t xq_stride, int64_t ncols,
                                     float *y, size_t y_stride)
{
	for (int64_t cb = 0; cb < ncols; cb += KERNELS__COL_BLOCK) {
		int64_t ce = ncols - cb < KERNELS__COL_BLOCK ? ncols : cb + KERNELS__COL_BLOCK;
		kernels__run_gemm_block(f, n, w, row_bytes, nrows, xq, xq_stride, cb, ce, y,
		                        y_stride);
	}
}

/* gemv (ncols 1) and gemm by a rows function. Row tiles: 4 rows when there
 * are >= 4 columns (prefill: compute-bound, each weight pair then serves 16
 * dots), else 1 row: decode streams the weights, and one stream (prefetched
 * KERNELS__PF_AHEAD on) measured ~70-80% of the read bound against ~50-65%
 * for 4 interleaved row streams (AVX-512 Q8_0, EPYC, 1 thread). */
static inline void kernels__run_rows(kernels__rows_fn f, int64_t n, const void *w, size_t row_bytes,
                                     int64_t nrows, const void *xq, size_t xq_stride, int64_t ncols,
                                     float *y, size_t y_stride)
{
	float out[4 * KERNELS__TILE];
	const int64_t rt = ncols >= 4 ? 4 : 1;
	for (int64_t cb = 0; cb < ncols; cb += KERNELS__COL_BLOCK) {
		int64_t ce = ncols - cb < KERNELS__COL_BLOCK ? ncols : cb + KERNELS__COL_BLOCK;
		for (int64_t i = 0; i < nrows; i += rt) {
			int R = nrows - i < rt ? (int)(nrows - i) : (int)rt;
			const char *wr = (const char *)w + (size_t)i * row_bytes;
			for (int64_t c0 = cb; c0 < ce; c0 += KERNELS__TILE) {
				int nc = kernels__ncols(ce, c0);
				const void *x[KERNELS__TILE];
				kernels__cols(xq, xq_stride, c0, nc, x);
				f(n, wr, row_bytes, R, x, nc, out);
				for (int r = 0; r < R; r++)
					for (int c = 0; c < nc; c++)
						y[(size_t)(c0 + c) * y_stride + (size_t)(i + r)] =
						    out[r * KERNELS__TILE + c];
			}
		}
	}
}

/* A tile function from an always-inline body name##_n(n, w, xq, NC, out)
 * with a compile-time column count, so each column's accumulators live in
 * registers and its operations do not depend on how many columns share the
 * weight loads. */
#define KERNELS__TILE_FROM_N(name)                                                                 \
	static void name(int64_t n, const void *w, const void *const *xq, int ncols, float *out)   \
	{                                                                                          \
		switch (ncols) {                                                                   \
		case 1:                                                                            \
			name##_n(n, w, xq, 1, out);                                                \
			break;                                                                     \
		case 2:                                                                            \
			name##_n(n, w, xq, 2, out);                                                \
			break;                                                                     \
		case 3:                                                                            \
			name##_n(n, w, xq, 3, out);                                                \
			break;                                                                     \
		default:                                                                           \
			name##_n(n, w, xq, 4, out);                                                \
			break;                                                                     \
		}                                                                                  \
	}

/* A rows function name##_rows from an always-inline body
 * name##_rc(n, w, row_bytes, R, xq, NC, out), both counts compile-time. */
#define KERNELS__ROWS_FROM_RC(name)                                                                \
	static void name##_rows(int64_t n, const char *w, size_t row_bytes, int R,                 \
	                        const void *const *xq, int NC, float *out)                         \
	{                                                                                          \
		switch ((R - 1) * 4 + (NC - 1)) {                                                  \
			KERNELS__RC_CASES_R(name, 1)                                               \
			KERNELS__RC_CASES_R(name, 2)                                               \
			KERNELS__RC_CASES_R(name, 3)                                               \
			KERNELS__RC_CASE(name, 4, 1)                                               \
			KERNELS__RC_CASE(name, 4, 2)                                               \
			KERNELS__RC_CASE(name, 4, 3)                                               \
		default:                                                                           \
			name##_rc(n, w, row_bytes, 4, xq, 4, out);                                 \
			break;                                                                     \
		}                                                                                  \
	}
#define KERNELS__RC_CASE(name, r, c)                                                               \
	case (r - 1) * 4 + (c - 1):                                                                \
		name##_rc(n, w, row_bytes, r, xq, c, out);                                         \
		break;
#define KERNELS__RC_CASES_R(name, r)                                                               \
	KERNELS__RC_CASE(name, r, 1)                                                               \
	KERNELS__RC_CASE(name, r, 2)                                                               \
	KERNELS__RC_CASE(name, r, 3)                                                               \
	KERNELS__RC_CASE(name, r, 4)

/* ---- tile-body templates -------------------------------------------------------
 * The loops around an ISA's inner kernels, for a vector of floats the ISA
 * names before using them:
 *   KERNELS__V            the float vector type
 *   KERNELS__V_LANES      its floats
 *   KERNELS__V_ZERO()     all zero
 *   KERNELS__V_ADD(a, b)  a + b, per lane
 *   KERNELS__V_FMA(s, a, b)  s + a * b, per lane, fused (one rounding)
 *   KERNELS__V_HSUM(v)    the sum of the lanes, in the ISA's fixed order
 *   KERNELS__H2F(h)       an fp16 scalar as float (exact)
 * Each column keeps its own accumulators and sees the same operations for
 * any NC (gemm == gemv bitwise). */

/* Element j of an F32, F16 or BF16 row p, as float (the scalar tails). */
#define KERNELS__S_F32(p, j)  (((const float *)(p))[j])
#define KERNELS__S_F16(p, j)  KERNELS__H2F(((const uint16_t *)(p))[j])
#define KERNELS__S_BF16(p, j) kernels__bits_f32((uint32_t)((const uint16_t *)(p))[j] << 16)

/* Float types: NACC (2 or 4) accumulators of KERNELS__V_LANES floats over
 * NACC vectors per step, leftover whole vectors into the first, the
 * accumulators summed pairwise ((a0 + a1) + (a2 + a3)), across lanes by
 * KERNELS__V_HSUM, plus the scalar tail (n % lanes, in element order)
 * added last. LOAD(p, i) gives the vector at element i of row p, SCALAR(p,
 * j) one element (KERNELS__S_*), ESIZE the bytes per element; PF (1 or 0)
 * whether each step prefetches the weights KERNELS__PF_AHEAD on. */
#define KERNELS__FLOAT_TILE(name, NACC, LOAD, SCALAR, ESIZE, PF)                                   \
	KERNELS__INLINE void name##_n(int64_t n, const void *w, const void *const *xq,             \
	                              const int NC, float *out)                                    \
	{                                                                                          \
		const int64_t step = (NACC)*KERNELS__V_LANES;                                      \
		KERNELS__V a[KERNELS__TILE][NACC];                                                 \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) for (int k = 0; k < (NACC); k++)      \
		    a[c][k] = KERNELS__V_ZERO();                                                   \
		int64_t i = 0;                                                                     \
		for (; i + step <= n; i += step) {                                                 \
			if (PF)                                                                    \
				kernels__prefetch_block((const char *)w + i * (ESIZE),             \
				                        (size_t)step * (ESIZE));                   \
			KERNELS__V wv[NACC];                                                       \
			for (int k = 0; k < (NACC); k++)                                           \
				wv[k] = LOAD(w, i + k * KERNELS__V_LANES);                         \
			KERNELS__UNROLL for (int c = 0; c < NC; c++) for (int k = 0; k < (NACC);   \
			                                                  k++) a[c][k] =           \
			    KERNELS__V_FMA(a[c][k], wv[k], LOAD(xq[c], i + k * KERNELS__V_LANES)); \
		}                                                                                  \
		for (; i + KERNELS__V_LANES <= n; i += KERNELS__V_LANES) {                         \
			KERNELS__V w0 = LOAD(w, i);                                                \
			KERNELS__UNROLL for (int c = 0; c < NC; c++) a[c][0] =                     \
			    KERNELS__V_FMA(a[c][0], w0, LOAD(xq[c], i));                           \
		}                                                                                  \
		KERNELS__UNROLL for (int c = 0; c < NC; c++)                                       \
		{                                                                                  \
			float tail = 0.0f;                                                         \
			for (int64_t j = i; j < n; j++)                                            \
				tail += SCALAR(w, j) * SCALAR(xq[c], j);                           \
			for (int h = 1; h < (NACC); h *= 2)                                        \
				for (int k = 0; k + h < (NACC); k += 2 * h)                        \
					a[c][k] = KERNELS__V_ADD(a[c][k], a[c][k + h]);            \
			out[c] = KERNELS__V_HSUM(a[c][0]) + tail;                                  \
		}                                                                                  \
	}                                                                                          \
	KERNELS__TILE_FROM_N(name)

/* 32-element blocks (Q8_0, Q4_0) in pairs: name##_pair(wb, b, single, xq,
 * NC, a0, a1) adds block b of the row into a0[c] and, unless single, block
 * b + 1 into a1[c]; an odd last block goes alone; the result is
 * KERNELS__V_HSUM(a0 + a1). */
#define KERNELS__PAIR_TILE(name, WBLOCK)                                                           \
	KERNELS__INLINE void name##_n(int64_t n, const void *w, const void *const *xq,             \
	                              const int NC, float *out)                                    \
	{                                                                                          \
		const WBLOCK *wb = w;                                                              \
		KERNELS__V a0[KERNELS__TILE], a1[KERNELS__TILE];                                   \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) a0[c] = a1[c] = KERNELS__V_ZERO();    \
		int64_t nb = n / KERNELS__QK, b = 0;                                               \
		for (; b + 2 <= nb; b += 2)                                                        \
			name##_pair(wb, b, 0, xq, NC, a0, a1);                                     \
		if (b < nb)                                                                        \
			name##_pair(wb, b, 1, xq, NC, a0, a1);                                     \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) out[c] =                              \
		    KERNELS__V_HSUM(KERNELS__V_ADD(a0[c], a1[c]));                                 \
	}                                                                                          \
	KERNELS__TILE_FROM_N(name)

/* K-quant super-blocks (Q4_K, Q6_K): name##_block(wb, b, xq, NC, acc) adds
 * super-block b of the row into acc[c], after its weights KERNELS__PF_AHEAD
 * on are prefetched; the result is KERNELS__V_HSUM(acc). */
#define KERNELS__SUPER_TILE(name, WBLOCK)                                                          \
	KERNELS__INLINE void name##_n(int64_t n, const void *w, const void *const *xq,             \
	                              const int NC, float *out)                                    \
	{                                                                                          \
		const WBLOCK *wb = w;                                                              \
		KERNELS__V acc[KERNELS__TILE];                                                     \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[c] = KERNELS__V_ZERO();           \
		for (int64_t b = 0; b < n / KERNELS__QKK; b++) {                                   \
			kernels__prefetch_block(wb + b, sizeof *wb);                               \
			name##_block(wb, b, xq, NC, acc);                                          \
		}                                                                                  \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) out[c] = KERNELS__V_HSUM(acc[c]);     \
	}                                                                                          \
	KERNELS__TILE_FROM_N(name)

/* The IQ grid types (kernels_iq.h): as KERNELS__SUPER_TILE, but
 * name##_block(wb, b, G, xq, NC, acc) is also given the grids, fetched
 * once per row. */
#define KERNELS__IQ_TILE(name, WBLOCK)                                                             \
	KERNELS__INLINE void name##_n(int64_t n, const void *w, const void *const *xq,             \
	                              const int NC, float *out)                                    \
	{                                                                                          \
		const WBLOCK *wb = w;                                                              \
		const kernels__iq_grids *G = kernels__iq_grids_get();                              \
		KERNELS__V acc[KERNELS__TILE];                                                     \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[c] = KERNELS__V_ZERO();           \
		for (int64_t b = 0; b < n / KERNELS__QKK; b++) {                                   \
			kernels__prefetch_block(wb + b, sizeof *wb);                               \
			name##_block(wb, b, G, xq, NC, acc);                                       \
		}                                                                                  \
		KERNELS__UNROLL for (int c = 0; c < NC; c++) out[c] = KERNELS__V_HSUM(acc[c]);     \
	}                                                                                          \
	KERNELS__TILE_FROM_N(name)

/* ---- dispatch and table ---------------------------------------------------------- */

/* The weight types a table computes, as indices into its ops. */
enum {
	KERNELS__W_F32,
	KERNELS__W_F16,
	KERNELS__W_BF16,
	KERNELS__W_Q8_0,
	KERNELS__W_Q4_0,
	KERNELS__W_Q4_K,
	KERNELS__W_Q6_K,
	KERNELS__W_Q5_0,
	KERNELS__W_Q5_1,
	KERNELS__W_IQ4_NL,
	KERNELS__W_MXFP4,
	KERNELS__W_Q2_K,
	KERNELS__W_Q3_K,
	KERNELS__W_Q5_K,
	KERNELS__W_IQ4_XS,
	KERNELS__W_IQ2_XXS,
	KERNELS__W_IQ2_XS,
	KERNELS__W_IQ2_S,
	KERNELS__W_IQ3_XXS,
	KERNELS__W_IQ3_S,
	KERNELS__W_IQ1_S,
	KERNELS__W_IQ1_M,
	KERNELS__NW
};

static inline int kernels__windex(shoal_dtype wt)
{
	switch (wt) {
	case SHOAL_DTYPE_F32:
		return KERNELS__W_F32;
	case SHOAL_DTYPE_F16:
		return KERNELS__W_F16;
	case SHOAL_DTYPE_BF16:
		return KERNELS__W_BF16;
	case SHOAL_DTYPE_Q8_0:
		return KERNELS__W_Q8_0;
	case SHOAL_DTYPE_Q4_0:
		return KERNELS__W_Q4_0;
	case SHOAL_DTYPE_Q4_K:
		return KERNELS__W_Q4_K;
	case SHOAL_DTYPE_Q6_K:
		return KERNELS__W_Q6_K;
	case SHOAL_DTYPE_Q5_0:
		return KERNELS__W_Q5_0;
	case SHOAL_DTYPE_Q5_1:
		return KERNELS__W_Q5_1;
	case SHOAL_DTYPE_IQ4_NL:
		return KERNELS__W_IQ4_NL;
	case SHOAL_DTYPE_MXFP4:
		return KERNELS__W_MXFP4;
	case SHOAL_DTYPE_Q2_K:
		return KERNELS__W_Q2_K;
	case SHOAL_DTYPE_Q3_K:
		return KERNELS__W_Q3_K;
	case SHOAL_DTYPE_Q5_K:
		return KERNELS__W_Q5_K;
	case SHOAL_DTYPE_IQ4_XS:
		return KERNELS__W_IQ4_XS;
	case SHOAL_DTYPE_IQ2_XXS:
		return KERNELS__W_IQ2_XXS;
	case SHOAL_DTYPE_IQ2_XS:
		return KERNELS__W_IQ2_XS;
	case SHOAL_DTYPE_IQ2_S:
		return KERNELS__W_IQ2_S;
	case SHOAL_DTYPE_IQ3_XXS:
		return KERNELS__W_IQ3_XXS;
	case SHOAL_DTYPE_IQ3_S:
		return KERNELS__W_IQ3_S;
	case SHOAL_DTYPE_IQ1_S:
		return KERNELS__W_IQ1_S;
	case SHOAL_DTYPE_IQ1_M:
		return KERNELS__W_IQ1_M;
	default:
		return -1;
	}
}

/* What one ISA computes each weight type with: a whole-product function
 * where set, else a rows function where set, else a tile function. */
typedef struct kernels__ops {
	kernels__tile_fn tile[KERNELS__NW];
	kernels__rows_fn rows[KERNELS__NW]; /* optional (NULL) */
	kernels__mm_fn mm[KERNELS__NW];     /* optional (NULL) */
} kernels__ops;

/* y[c * y_stride + i] = dot(W row i, xq row c) by the ops' function for wt
 * (a gemv is ncols 1: row by row into y). */
static inline void kernels__ops_run(const kernels__ops *ops, shoal_dtype wt, int64_t n,
                                    const void *w, size_t row_bytes, int64_t nrows, const void *xq,
                                    size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	int t = kernels__windex(wt);
	/* Every table computes every computable type; another type is a caller
	 * bug (the engine refuses the tensor when it loads). */
	SHOAL_ASSERT(t >= 0 && (ops->mm[t] || ops->rows[t] || ops->tile[t]));
	if (ops->mm[t])
		ops->mm[t](n, w, row_bytes, nrows, xq, xq_stride, ncols, y, y_stride);
	else if (ops->rows[t])
		kernels__run_rows(ops->rows[t], n, w, row_bytes, nrows, xq, xq_stride, ncols, y,
		                  y_stride);
	else if (ncols == 1)
		kernels__run_gemv(ops->tile[t], n, w, row_bytes, nrows, xq, y);
	else
		kernels__run_gemm(ops->tile[t], n, w, row_bytes, nrows, xq, xq_stride, ncols, y,
		                  y_stride);
}

/* The ops of an ISA whose tile functions are named p##_tile_<type>, for the
 * types every table has its own kernels for (KERNELS__TILES_ALL: all). */
#define KERNELS__TILES_BASE(p)                                                                     \
	[KERNELS__W_F32] = p##_tile_f32, [KERNELS__W_F16] = p##_tile_f16,                          \
	[KERNELS__W_BF16] = p##_tile_bf16, [KERNELS__W_Q8_0] = p##_tile_q8_0,                      \
	[KERNELS__W_Q4_0] = p##_tile_q4_0, [KERNELS__W_Q4_K] = p##_tile_q4_k,                      \
	[KERNELS__W_Q6_K] = p##_tile_q6_k
#define KERNELS__TILES_ALL(p)                                                                      \
	KERNELS__TILES_BASE(p),                                                                    \
	    [KERNELS__W_Q5_0] = p##_tile_q5_0, [KERNELS__W_Q5_1] = p##_tile_q5_1,                  \
	    [KERNELS__W_IQ4_NL] = p##_tile_iq4_nl, [KERNELS__W_MXFP4] = p##_tile_mxfp4,            \
	    [KERNELS__W_Q2_K] = p##_tile_q2_k, [KERNELS__W_Q3_K] = p##_tile_q3_k,                  \
	    [KERNELS__W_Q5_K] = p##_tile_q5_k, [KERNELS__W_IQ4_XS] = p##_tile_iq4_xs,              \
	    KERNELS__TILES_IQ(p)
/* The IQ grid types (kernels_iq.h), named p##_tile_<type> as the others. */
#define KERNELS__TILES_IQ(p)                                                                       \
	[KERNELS__W_IQ2_XXS] = p##_tile_iq2_xxs, [KERNELS__W_IQ2_XS] = p##_tile_iq2_xs,            \
	[KERNELS__W_IQ2_S] = p##_tile_iq2_s, [KERNELS__W_IQ3_XXS] = p##_tile_iq3_xxs,              \
	[KERNELS__W_IQ3_S] = p##_tile_iq3_s, [KERNELS__W_IQ1_S] = p##_tile_iq1_s,                  \
	[KERNELS__W_IQ1_M] = p##_tile_iq1_m

/* The table `symbol` named isa_name, computing with the ops given after p
 * (designated initialisers of kernels__ops; p prefixes its static names),
 * the activation converter attn##_quantize_act, the attention loops
 * attn##_attn_scores, attn##_attn_values (KERNELS__ATTN_ENTRIES: with their
 * F16 twins), attn##_softmax, attn##_silu_mul and attn##_pack_bytes, _pack,
 * _gemm_packed (kernels__no_pack* where the table has no packed form). */
#define KERNELS__TABLE(symbol, isa_name, p, attn, ...)                                             \
	static const kernels__ops p##_ops = {__VA_ARGS__};                                         \
	static void p##_gemv(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes,           \
	                     int64_t nrows, const void *xq, float *y)                              \
	{                                                                                          \
		kernels__ops_run(&p##_ops, wt, n, w, row_bytes, nrows, xq, 0, 1, y, 0);            \
	}                                                                                          \
	static void p##_gemm(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes,           \
	                     int64_t nrows, const void *xq, size_t xq_stride, int64_t ncols,       \
	                     float *y, size_t y_stride)                                            \
	{                                                                                          \
		kernels__ops_run(&p##_ops, wt, n, w, row_bytes, nrows, xq, xq_stride, ncols, y,    \
		                 y_stride);                                                        \
	}                                                                                          \
	const shoal_kernels symbol = {                                                             \
	    .isa = isa_name,                                                                       \
	    .quantize_act = attn##_quantize_act,                                                   \
	    .gemv = p##_gemv,                                                                      \
	    .gemm = p##_gemm,                                                                      \
	    .attn_scores = attn##_attn_scores,                                                     \
	    .attn_values = attn##_attn_values,                                                     \
	    .attn_scores_f16 = attn##_attn_scores_f16,                                             \
	    .attn_values_f16 = attn##_attn_values_f16,                                             \
	    .attn_values_acc = attn##_attn_values_acc,                                             \
	    .attn_values_acc_f16 = attn##_attn_values_acc_f16,                                     \
	    .softmax = attn##_softmax,                                                             \
	    .silu_mul = attn##_silu_mul,                                                           \
	    .pack_bytes = attn##_pack_bytes,                                                       \
	    .pack = attn##_pack,                                                                   \
	    .gemm_packed = attn##_gemm_packed,                                                     \
	}

#endif
