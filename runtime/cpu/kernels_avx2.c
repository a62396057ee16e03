/*
 * runtime/cpu/kernels_avx2.c: the AVX2 kernel table (x86-64 with AVX2, FMA,
 * F16C; compiled with those -m flags into libshoal_k_avx2.a).
 *
 * Part: runtime/, room cpu/. The order of accumulation of each dot product
 * (fixed per ISA, see test_kernels.c) is given below the includes.
 * Divisions: helpers, float types, Q8_0/Q4_0 (and Q5_0), IQ4_NL, MXFP4 and
 * Q5_1, Q6_K, Q4_K/Q5_K/Q2_K/Q3_K/IQ4_XS, the IQ grid types (and IQ4_XS's
 * gemv), the table.
 */
#include "runtime/cpu/kernels_x86.h"

/* Integer dots with maddubs/madd (exact: no saturation, see each type).
 * Order of accumulation, per dot product:
 *   F32/F16/BF16: 2 accumulators x 8 lanes over 16 elements per step (FMA),
 *     leftover groups of 8 into the first, (a0 + a1) summed by hsum8
 *     (lanes 0-3 + 4-7, then pairs), plus a scalar tail added last;
 *   Q8_0/Q4_0: block b goes to accumulator b % 2 as fma(float(int lanes),
 *     d_w * d_x, acc), 8 lanes; result hsum8(a0 + a1);
 *   Q4_K: per super-block int32 lanes isum and imin (exact), then
 *     acc = fma(d, isum, acc), acc = fnma(dmin, imin, acc); result hsum8;
 *   Q6_K: per super-block int32 lanes isum (exact), acc = fma(d, isum, acc);
 *   Q5_0 as Q8_0; IQ4_NL/MXFP4: pairs of blocks, in order, into one
 *   accumulator as fma(float(int lanes: 0-3 block b, 4-7 block b + 1),
 *   d_w * d_x of each block, acc) (MXFP4's scale the halved E8M0); result
 *   hsum8; Q5_1 as IQ4_NL, each pair's fma then followed by
 *   acc = fma(float(x-sum lanes), m_w * d_x of each block, acc);
 *   Q5_K/Q2_K as Q4_K, Q3_K/IQ4_XS as Q6_K; the IQ grid types as Q6_K
 *     (kernels_x86.h's kernels__x86_iq_lanes, D_w in place of d_w).
 */

/* ---- the vector for the shells' templates --------------------------------- */

#define KERNELS__V               __m256
#define KERNELS__V_LANES         8
#define KERNELS__V_ZERO()        _mm256_setzero_ps()
#define KERNELS__V_ADD(a, b)     _mm256_add_ps(a, b)
#define KERNELS__V_FMA(s, a, b)  _mm256_fmadd_ps(a, b, s)
#define KERNELS__V_HSUM(v)       kernels__x86_hsum8(v)
#define KERNELS__H2F(h)          kernels__x86_h2f(h)
#define KERNELS__V_SET1(f)       _mm256_set1_ps(f)
#define KERNELS__V_FNMA(s, a, b) _mm256_fnmadd_ps(a, b, s)
#define KERNELS__X86_LANES_V(i)  _mm256_cvtepi32_ps(i)

/* ---- float types ---------------------------------------------------------------
 * KERNELS__FLOAT_TILE's LOAD: 8 floats of row p at element i. */

#define K2_LOAD_F32(p, i) _mm256_loadu_ps((const float *)(p) + (i))
#define K2_LOAD_F16(p, i)                                                                          \
	_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (i))))
#define K2_LOAD_BF16(p, i)                                                                         \
	_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((              \
	                                          const __m128i *)((const uint16_t *)(p) + (i)))), \
	                                      16))

KERNELS__FLOAT_TILE(k2_tile_f32, 2, K2_LOAD_F32, KERNELS__S_F32, 4, 1)
KERNELS__FLOAT_TILE(k2_tile_f16, 2, K2_LOAD_F16, KERNELS__S_F16, 2, 1)
KERNELS__FLOAT_TILE(k2_tile_bf16, 2, K2_LOAD_BF16, KERNELS__S_BF16, 2, 1)

/* ---- Q8_0 and Q4_0 ----------------------------------------------------------------
 * sign trick: dot(w, x) = dot(|w|, sign(x, w)) with |w| as unsigned bytes,
 * the form maddubs takes; pairs are at most 2 * 128 * 127 = 32512 < 2^15, so
 * it never saturates (activations are in [-127, 127], never -128). */

KERNELS__INLINE __m256i k2_dot_i8(__m256i aw, __m256i w, __m256i x)
{
	__m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* 32 nibbles of a Q4_0 block as signed bytes (q - 8), element order. */
KERNELS__INLINE __m256i k2_q4_0_bytes(const uint8_t *qs)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs);
	__m256i b = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
	b = _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
	return _mm256_sub_epi8(b, _mm256_set1_epi8(8));
}

/* Blocks b (into a0) and b + 1 (into a1), or only b when single; the two
 * scale products d_w * d_x are formed in one vector multiply (the same IEEE
 * products as one at a time). */
#define K2_Q32_TILE(name, WBLOCK, WBYTES, WSCALES)                                                 \
	KERNELS__INLINE void name##_pair(const WBLOCK *wb, int64_t b, int single,                  \
	                                 const void *const *xq, const int NC, __m256 *a0,          \
	                                 __m256 *a1)                                               \
	{                                                                                          \
		kernels__prefetch_line((const char *)(wb + b) + KERNELS__PF_AHEAD);                \
		__m256i q0 = WBYTES(wb + b), aq0 = _mm256_abs_epi8(q0);                            \
		__m256i q1 = single ? q0 : WBYTES(wb + b + 1);                                     \
		__m256i aq1 = _mm256_abs_epi8(q1);                                                 \
		__m128 dw = WSCALES(wb, b, single);                                                \
		KERNELS__UNROLL for (int c = 0; c < NC; c++)                                       \
		{                                                                                  \
			const kernels__block_q8_0 *xb = (const kernels__block_q8_0 *)xq[c] + b;    \
			__m128 d =                                                                 \
			    _mm_mul_ps(dw, kernels__x86_h2f_pair(&xb[0].d, single ? 0 : xb[1].d)); \
			__m256i x0 = _mm256_loadu_si256((const __m256i *)xb[0].qs);                \
			__m256 s0 = _mm256_cvtepi32_ps(k2_dot_i8(aq0, q0, x0));                    \
			a0[c] = _mm256_fmadd_ps(s0, _mm256_broadcastss_ps(d), a0[c]);              \
			if (!single) {                                                             \
				__m256i x1 = _mm256_loadu_si256((const __m256i *)xb[1].qs);        \
				__m256 s1 = _mm256_cvtepi32_ps(k2_dot_i8(aq1, q1, x1));            \
				__m256 d1 = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d),    \
				                                     _mm256_set1_epi32(1));        \
				a1[c] = _mm256_fmadd_ps(s1, d1, a1[c]);                            \
			}                                                                          \
		}                                                                                  \
	}                                                                                          \
	KERNELS__PAIR_TILE(name, WBLOCK)

#define K2_Q8_0_BYTES(blk) _mm256_loadu_si256((const __m256i *)(blk)->qs)
#define K2_Q4_0_BYTES(blk) k2_q4_0_bytes((blk)->qs)

K2_Q32_TILE(k2_tile_q8_0, kernels__block_q8_0, K2_Q8_0_BYTES, KERNELS__X86_H2F_SCALES)
K2_Q32_TILE(k2_tile_q4_0, kernels__block_q4_0, K2_Q4_0_BYTES, KERNELS__X86_H2F_SCALES)
K2_Q32_TILE(k2_tile_q5_0, kernels__block_q5_0, kernels__x86_q5_0_bytes, KERNELS__X86_H2F_SCALES)

/* ---- IQ4_NL, MXFP4 and Q5_1 ----------------------------------------------------------
 * A pair of blocks (b, b + 1) at once: the 2 x 16 bytes of nibbles as one
 * vector (block b in the low 128 bits), its low nibbles (elements 0-15 of
 * each block) and high nibbles (16-31) looked up in the table, against
 * the activations rearranged to match, x0 = (x_b[0..15], x_b+1[0..15])
 * and x1 = (x_b[16..31], x_b+1[16..31]): no cross-lane shuffle of the
 * weights, and int32 lanes 0-3 of block b, 4-7 of block b + 1, scaled by
 * one vector (d_w d_x of each block, spread) into one accumulator. An odd
 * last block is a pair whose upper half has zero activations and scales.
 * The gemv and the gemm (one function, below) rearrange each column's
 * activations (and convert d_x) once per segment of pairs and K2_NLR
 * rows, and every (row, column) takes the same operations (gemm == gemv
 * bitwise).
 *   IQ4_NL: dot(w, x) = dot(|x|, w signed by x) (maddubs(|x|, sign(w,
 *   x)): pairs <= 2 * 127 * 127), |x| made with the activations.
 *   MXFP4: the doubled values v in -12..12 as u = v + 12 (0..24), unsigned
 *   for maddubs: pairs <= 2 * 24 * 127 = 6096, so the low and high
 *   nibbles' pairs add in int16 (<= 12192) before one madd; dot(v, x) =
 *   dot(u, x) - 12 sum(x), the 12 sum(x) lanes from the activations alone
 *   (made with them, once per pass in the gemv).
 *   Q5_1 (x = d q + m, q in 0..31 unsigned): pairs <= 2 * 31 * 127 = 7874,
 *   low and high added in int16 (<= 15748) as MXFP4's, then
 *   fma(float(sum(x) lanes), m_w d_x spread) after the d_w d_x step. */

/* pairs per prepared segment and column, 4 columns: 4 x 32 x 160 bytes =
 * 20 KiB; one column (the gemv) takes 4 x 32 pairs: 128 pairs (8192
 * elements, 4.5 KiB of IQ4_NL weights a row) before the next row; with 32
 * the out-of-cache gemv fell from ~12.5 to ~9.5 GB/s (rows that switch
 * every 1.1 KiB defeat the prefetch KERNELS__PF_AHEAD on). */
#define K2_NLP 32
#define K2_NLR 32 /* rows per pass, their accumulators kept between segments */

/* The offset MXFP4's values take (u = v + 12), and its table of u. */
#define K2_MX_OFF 12
static const int8_t k2_mxfp4_u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* A pair's activation side: the rearranged bytes, d_x of both blocks in
 * lanes 0 and 1 (0 for a missing block), and e: for MXFP4 12 sum(x) lanes
 * (e[0]), for IQ4_NL |x0| and |x1|. */
typedef struct k2_xnl {
	__m256i x0, x1, e[2];
	__m128 dx;
} k2_xnl;

/* The activation side of blocks xb[0] and, unless single, xb[1]. */
KERNELS__INLINE void k2_nl_xprep(const kernels__block_q8_0 *xb, int single, const int KIND,
                                 k2_xnl *p)
{
	if (single) {
		p->x0 = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)xb[0].qs));
		p->x1 = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(xb[0].qs + 16)));
	} else {
		p->x0 = kernels__x86_half_pair(xb[0].qs, xb[1].qs);
		p->x1 = kernels__x86_half_pair(xb[0].qs + 16, xb[1].qs + 16);
	}
	p->dx = kernels__x86_h2f_pair(&xb[0].d, single ? 0 : xb[1].d);
	if (KIND) { /* MXFP4: 12 sum(x); Q5_1: float(sum(x)), (d_x0, d_x0, d_x1, d_x1) */
		const __m256i k = _mm256_set1_epi8(KIND == 1 ? K2_MX_OFF : 1);
		__m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(k, p->x0),
		                             _mm256_maddubs_epi16(k, p->x1));
		p->e[0] = _mm256_madd_epi16(t, _mm256_set1_epi16(1));
		if (KIND == 2) {
			p->e[0] = _mm256_castps_si256(_mm256_cvtepi32_ps(p->e[0]));
			p->dx = _mm_unpacklo_ps(p->dx, p->dx);
		}
	} else {
		p->e[0] = _mm256_abs_epi8(p->x0);
		p->e[1] = _mm256_abs_epi8(p->x1);
	}
}

/* A pair's weight side: the looked-up low and high nibbles (MXFP4: u),
 * the weight scales in lanes 0 and 1. */
typedef struct k2_wnl {
	__m256i lo, hi;
	__m128 dw;
} k2_wnl;

KERNELS__INLINE k2_wnl k2_nl_wprep(const uint8_t *qs0, const uint8_t *qs1, const int MX, __m128 dw)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const __m256i t = _mm256_broadcastsi128_si256(
	    _mm_loadu_si128((const __m128i *)(MX ? k2_mxfp4_u : kernels__iq4_values)));
	__m128i a = _mm_loadu_si128((const __m128i *)qs0);
	__m256i v = qs1 ? _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1), a)
	                : _mm256_zextsi128_si256(a);
	k2_wnl r;
	r.lo = _mm256_shuffle_epi8(t, _mm256_and_si256(v, m4));
	r.hi = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
	r.dw = dw;
	return r;
}

KERNELS__INLINE k2_wnl k2_wp_iq4_nl(const kernels__block_iq4_nl *wb, int single)
{
	return k2_nl_wprep(wb[0].qs, single ? NULL : wb[1].qs, 0,
	                   KERNELS__X86_H2F_SCALES(wb, 0, single));
}

KERNELS__INLINE k2_wnl k2_wp_mxfp4(const kernels__block_mxfp4 *wb, int single)
{
	return k2_nl_wprep(wb[0].qs, single ? NULL : wb[1].qs, 1,
	                   KERNELS__X86_E8M0_SCALES(wb, 0, single));
}

/* Q5_1: the nibbles as above (no table) with the fifth bits added as 16:
 * the low nibbles' are bits 0-15 of each block's qh, the high nibbles'
 * bits 16-31; dw = (d_0, m_0, d_1, m_1). */
KERNELS__INLINE k2_wnl k2_wp_q5_1(const kernels__block_q5_1 *wb, int single)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	__m128i a = _mm_loadu_si128((const __m128i *)wb[0].qs);
	__m256i v = single ? _mm256_zextsi128_si256(a)
	                   : _mm256_set_m128i(_mm_loadu_si128((const __m128i *)wb[1].qs), a);
	uint32_t h0, h1 = 0, s0, s1 = 0; /* qh, (d, m) of each block */
	memcpy(&h0, wb[0].qh, 4);
	memcpy(&s0, &wb[0].d, 4);
	if (!single) {
		memcpy(&h1, wb[1].qh, 4);
		memcpy(&s1, &wb[1].d, 4);
	}
	__m256i hl = kernels__x86_bit_bytes((h0 & 0xffffu) | h1 << 16);
	__m256i hh = kernels__x86_bit_bytes(h0 >> 16 | (h1 & 0xffff0000u));
	k2_wnl r;
	r.lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(hl, b4));
	r.hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
	                       _mm256_and_si256(hh, b4));
	r.dw = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)s0 | (uint64_t)s1 << 32)));
	return r;
}

/* acc + the pair's exact int32 lanes times d_w d_x, spread (Q5_1: then +
 * float(sum(x) lanes) times m_w d_x, spread). */
KERNELS__INLINE __m256 k2_nl_dot(const k2_wnl *w, const k2_xnl *x, const int KIND, __m256 acc)
{
	const __m256i one16 = _mm256_set1_epi16(1);
	__m256i s;
	if (KIND == 2) {
		__m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w->lo, x->x0),
		                             _mm256_maddubs_epi16(w->hi, x->x1));
		__m256 p = _mm256_castps128_ps256(_mm_mul_ps(w->dw, x->dx));
		__m256 d = _mm256_permutevar8x32_ps(p, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
		__m256 m = _mm256_permutevar8x32_ps(p, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(t, one16)), d, acc);
		return _mm256_fmadd_ps(_mm256_castsi256_ps(x->e[0]), m, acc);
	}
	if (KIND == 1) {
		__m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w->lo, x->x0),
		                             _mm256_maddubs_epi16(w->hi, x->x1));
		s = _mm256_sub_epi32(_mm256_madd_epi16(t, one16), x->e[0]);
	} else {
		__m256i p0 = _mm256_maddubs_epi16(x->e[0], _mm256_sign_epi8(w->lo, x->x0));
		__m256i p1 = _mm256_maddubs_epi16(x->e[1], _mm256_sign_epi8(w->hi, x->x1));
		s = _mm256_add_epi32(_mm256_madd_epi16(p0, one16), _mm256_madd_epi16(p1, one16));
	}
	__m256 d = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(w->dw, x->dx)),
	                                    _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc);
}

/* name##_mm, the gemv and the gemm: columns in blocks of
 * KERNELS__COL_BLOCK (as kernels__run_gemm), rows in passes of K2_NLR, a
 * block's columns in tiles of up to 4 whose activation sides are prepared
 * once per pass and K2_NLP pairs; each row's pairs then decode their
 * weights once for the tile's columns. Every (row, column) sums its pairs
 * in order into one accumulator from +0, then hsum8, whatever the shape.
 * WFN(wb, single): the pair's weight side. */
#define K2_NL(name, WBLOCK, MX, WFN)                                                               \
	KERNELS__INLINE k2_wnl name##_w(const WBLOCK *wb, int single)                              \
	{                                                                                          \
		kernels__prefetch_line((const char *)wb + KERNELS__PF_AHEAD);                      \
		return WFN(wb, single);                                                            \
	}                                                                                          \
	KERNELS__INLINE void name##_pass(int64_t nb, const char *w, size_t row_bytes, int R,       \
	                                 const kernels__block_q8_0 *const *x, const int NC,        \
	                                 float *y, size_t y_stride)                                \
	{                                                                                          \
		const int sp = KERNELS__TILE * K2_NLP / NC; /* pairs a segment */                  \
		k2_xnl xp[KERNELS__TILE * K2_NLP];                                                 \
		__m256 acc[K2_NLR][KERNELS__TILE];                                                 \
		for (int r = 0; r < R; r++)                                                        \
			KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[r][c] =                   \
			    _mm256_setzero_ps();                                                   \
		for (int64_t b0 = 0; b0 < nb; b0 += 2 * sp) {                                      \
			const int np = (nb - b0 + 1) / 2 < sp ? (int)((nb - b0 + 1) / 2) : sp;     \
			for (int c = 0; c < NC; c++)                                               \
				for (int i = 0; i < np; i++)                                       \
					k2_nl_xprep(x[c] + b0 + 2 * i, b0 + 2 * i + 1 == nb, MX,   \
					            &xp[c * sp + i]);                              \
			for (int r = 0; r < R; r++) {                                              \
				const WBLOCK *wr =                                                 \
				    (const WBLOCK *)(w + (size_t)r * row_bytes) + b0;              \
				__m256 a[KERNELS__TILE];                                           \
				KERNELS__UNROLL for (int c = 0; c < NC; c++) a[c] = acc[r][c];     \
				for (int i = 0; i < np; i++) {                                     \
					k2_wnl wv = name##_w(wr + 2 * i, b0 + 2 * i + 1 == nb);    \
					KERNELS__UNROLL for (int c = 0; c < NC; c++) a[c] =        \
					    k2_nl_dot(&wv, &xp[c * sp + i], MX, a[c]);             \
				}                                                                  \
				KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[r][c] = a[c];     \
			}                                                                          \
		}                                                                                  \
		for (int r = 0; r < R; r++)                                                        \
			KERNELS__UNROLL for (int c = 0; c < NC; c++)                               \
			    y[(size_t)c * y_stride + (size_t)r] = kernels__x86_hsum8(acc[r][c]);   \
	}                                                                                          \
	static void name##_mm(int64_t n, const void *w, size_t row_bytes, int64_t nrows,           \
	                      const void *xq, size_t xq_stride, int64_t ncols, float *y,           \
	                      size_t y_stride)                                                     \
	{                                                                                          \
		const int64_t nb = n / KERNELS__QK;                                                \
		for (int64_t cb = 0; cb < ncols; cb += KERNELS__COL_BLOCK) {                       \
			int64_t ce =                                                               \
			    ncols - cb < KERNELS__COL_BLOCK ? ncols : cb + KERNELS__COL_BLOCK;     \
			for (int64_t r0 = 0; r0 < nrows; r0 += K2_NLR) {                           \
				const int R = nrows - r0 < K2_NLR ? (int)(nrows - r0) : K2_NLR;    \
				const char *wr = (const char *)w + (size_t)r0 * row_bytes;         \
				for (int64_t c0 = cb; c0 < ce; c0 += KERNELS__TILE) {              \
					const int nc = kernels__ncols(ce, c0);                     \
					const void *xv[KERNELS__TILE];                             \
					kernels__cols(xq, xq_stride, c0, nc, xv);                  \
					const kernels__block_q8_0 *const *x =                      \
					    (const kernels__block_q8_0 *const *)xv;                \
					float *yt = y + (size_t)c0 * y_stride + (size_t)r0;        \
					if (nc == 1)                                               \
						name##_pass(nb, wr, row_bytes, R, x, 1, yt,        \
						            y_stride);                             \
					else if (nc == 2)                                          \
						name##_pass(nb, wr, row_bytes, R, x, 2, yt,        \
						            y_stride);                             \
					else if (nc == 3)                                          \
						name##_pass(nb, wr, row_bytes, R, x, 3, yt,        \
						            y_stride);                             \
					else                                                       \
						name##_pass(nb, wr, row_bytes, R, x, 4, yt,        \
						            y_stride);                             \
				}                                                                  \
			}                                                                          \
		}                                                                                  \
	}

K2_NL(k2_iq4_nl, kernels__block_iq4_nl, 0, k2_wp_iq4_nl)
K2_NL(k2_mxfp4, kernels__block_mxfp4, 1, k2_wp_mxfp4)
K2_NL(k2_q5_1, kernels__block_q5_1, 2, k2_wp_q5_1)
#define k2_tile_iq4_nl NULL /* the mm above, for the three */
#define k2_tile_mxfp4  NULL
#define k2_tile_q5_1   NULL

/* ---- Q6_K ------------------------------------------------------------------------------
 * Quants as unsigned 0..63: dot(q - 32, x) = dot(q, x) - 32 * bsum per 16.
 * maddubs pairs <= 2 * 63 * 127 = 16002 (no saturation); madd with the
 * sub-block scales (|sc| <= 128) gives lanes <= 128 * 4 * 8001 ~ 4.1e6, 8
 * parts ~ 3.3e7 < 2^31: exact. The -32 part is madd(bsums, scales) << 5. */

KERNELS__INLINE void k2_tile_q6_k_block(const kernels__block_q6_k *wb, int64_t b,
                                        const void *const *xq, const int NC, __m256 *acc)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
	__m256i isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	const int8_t *sc = wb[b].scales;
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		const uint8_t *ql = wb[b].ql + 64 * ch, *qh = wb[b].qh + 32 * ch;
		__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
		__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
		__m256i h = _mm256_loadu_si256((const __m256i *)qh);
		__m256i q[4];
		q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
		                       _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
		q[1] = _mm256_or_si256(
		    _mm256_and_si256(l1, m4),
		    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
		q[2] = _mm256_or_si256(
		    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
		    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
		q[3] = _mm256_or_si256(
		    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
		    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
		KERNELS__UNROLL for (int p = 0; p < 4; p++)
		{
			const int8_t *s2 = sc + 8 * ch + 2 * p;
			__m256i s = _mm256_set_m128i(_mm_set1_epi16(s2[1]), _mm_set1_epi16(s2[0]));
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 32 * p;
				__m256i xv = _mm256_loadu_si256((const __m256i *)x);
				__m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(q[p], xv), s);
				isum[c] = _mm256_add_epi32(isum[c], t);
			}
		}
	}
	__m256i sc16 = kernels__x86_q6k_scales(sc);
	float dw = kernels__x86_h2f(wb[b].d);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		__m256i is = _mm256_sub_epi32(isum[c], kernels__x86_q6k_offset(xb, sc16));
		acc[c] =
		    _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), _mm256_cvtepi32_ps(is), acc[c]);
	}
}
KERNELS__SUPER_TILE(k2_tile_q6_k, kernels__block_q6_k)

/* ---- Q4_K, Q5_K, Q2_K, Q3_K, IQ4_XS ------------------------------------------------------
 * The exact int32 lanes come from kernels_x86.h (bounds there); the types
 * with mins do acc = fma(d, isum, acc), acc = fnma(dmin, imin, acc), the
 * others acc = fma(d, isum, acc) as Q6_K. */

KERNELS__X86_KQ_MIN_TILE(k2_tile_q4_k, kernels__block_q4_k, kernels__x86_q4k_lanes)
KERNELS__X86_KQ_MIN_TILE(k2_tile_q5_k, kernels__block_q5_k, kernels__x86_q5k_lanes)
KERNELS__X86_KQ_MIN_TILE(k2_tile_q2_k, kernels__block_q2_k, kernels__x86_q2k_lanes)
KERNELS__X86_KQ_TILE(k2_tile_q3_k, kernels__block_q3_k, kernels__x86_q3k_lanes)
KERNELS__X86_KQ_TILE(k2_tile_iq4_xs, kernels__block_iq4_xs, kernels__x86_iq4xs_lanes)

/* The IQ grid types (kernels_x86.h's lanes): as Q6_K, acc = fma(D, isum). */
KERNELS__X86_IQ_TILES(k2)

/* IQ4_XS's gemv: the tile rearranges each sub-block pair's activations
 * (kernels__x86_half_pair: two broadcasts and a blend per 32 bytes) for
 * every row. Here they are made once per K2_XSB super-blocks and K2_NLR
 * rows, with their absolute values: dot(w, x) = dot(|x|, w signed by x)
 * (maddubs(|x|, sign(w, x)): pairs <= 2 * 127 * 127, exact), one
 * operation a vector less than the tile's |w| and x signed by w. The lanes
 * are the tile's exact int32 lanes and each row then takes the tile's float
 * steps at one column, in order (acc from +0, fma(d_w d_x, lanes), hsum8):
 * the same bits (the gemm keeps the tile). */
/* super-blocks per prepared segment: 32 x 512 bytes = 16 KiB, 8192
 * elements (a whole row of both bench_kernels shapes); 16 measured as fast
 * in cache but ~30% slower out of it (rows switching every 2.2 KiB, see
 * K2_NLP). */
#define K2_XSB 32

KERNELS__INLINE __m256i k2_iq4xs_lanes_px(const kernels__block_iq4_xs *w, const __m256i *xv)
{
	__m256i ls = kernels__x86_iq4xs_scales(w), isum = _mm256_setzero_si256();
	KERNELS__UNROLL for (int p = 0; p < 4; p++)
	{
		__m256i q[2], s;
		kernels__x86_iq4xs_pair(w, ls, p, q, &s);
		KERNELS__UNROLL for (int h = 0; h < 2; h++)
		{
			const __m256i *x = xv + 2 * (2 * p + h); /* x, then |x| */
			__m256i pr = _mm256_maddubs_epi16(x[1], _mm256_sign_epi8(q[h], x[0]));
			isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pr, s));
		}
	}
	return isum;
}

static void k2_iq4xs_mm(int64_t n, const void *w, size_t row_bytes, int64_t nrows, const void *xq,
                        size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	if (ncols > 1) {
		kernels__run_gemm(k2_tile_iq4_xs, n, w, row_bytes, nrows, xq, xq_stride, ncols, y,
		                  y_stride);
		return;
	}
	const int64_t nsb = n / KERNELS__QKK;
	const kernels__block_q8_k *xb = xq;
	__m256i xp[K2_XSB][16];
	__m256 acc[K2_NLR];
	for (int64_t r0 = 0; r0 < nrows; r0 += K2_NLR) {
		const int R = nrows - r0 < K2_NLR ? (int)(nrows - r0) : K2_NLR;
		for (int r = 0; r < R; r++)
			acc[r] = _mm256_setzero_ps();
		for (int64_t s0 = 0; s0 < nsb; s0 += K2_XSB) {
			const int sbn = nsb - s0 < K2_XSB ? (int)(nsb - s0) : K2_XSB;
			for (int b = 0; b < sbn; b++)
				for (int k = 0; k < 8; k++) { /* k = 2 p + h */
					const int8_t *x =
					    xb[s0 + b].qs + 64 * (k / 2) + 16 * (k % 2);
					xp[b][2 * k] = kernels__x86_half_pair(x, x + 32);
					xp[b][2 * k + 1] = _mm256_abs_epi8(xp[b][2 * k]);
				}
			for (int r = 0; r < R; r++) {
				const kernels__block_iq4_xs *wr =
				    (const kernels__block_iq4_xs *)((const char *)w +
				                                    (size_t)(r0 + r) * row_bytes) +
				    s0;
				__m256 a = acc[r];
				for (int b = 0; b < sbn; b++) {
					kernels__prefetch_block(wr + b, sizeof *wr);
					__m256i isum = k2_iq4xs_lanes_px(wr + b, xp[b]);
					float d = kernels__x86_h2f(wr[b].d) * xb[s0 + b].d;
					a = _mm256_fmadd_ps(_mm256_set1_ps(d),
					                    _mm256_cvtepi32_ps(isum), a);
				}
				acc[r] = a;
			}
		}
		for (int r = 0; r < R; r++)
			y[r0 + r] = kernels__x86_hsum8(acc[r]);
	}
}

/* ---- the table ----------------------------------------------------------------------- */

KERNELS__TABLE(kernels__avx2, "avx2", k2, kernels__x86, .tile = {KERNELS__TILES_ALL(k2)},
               .mm = {[KERNELS__W_Q5_1] = k2_q5_1_mm,
                      [KERNELS__W_IQ4_NL] = k2_iq4_nl_mm,
                      [KERNELS__W_MXFP4] = k2_mxfp4_mm,
                      [KERNELS__W_IQ4_XS] = k2_iq4xs_mm});
