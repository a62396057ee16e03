/*
 * runtime/cpu/kernels_avx512.c: the AVX-512 kernel tables (F, BW, VL), compiled
 * twice: with KERNELS_VNNI=1 (-mavx512vnni, table "avx512": int8 dots with
 * vpdpbusd) and KERNELS_VNNI=0 (table "avx512bw": maddubs + madd). Both give
 * the same int32 lanes (each sums the same 4 byte products, no saturation),
 * so the two tables give bitwise equal results.
 *
 * Part: runtime/, room cpu/. The order of accumulation of each dot product
 * (fixed per ISA, see test_kernels.c) is given below the includes.
 * Divisions: helpers, float types, Q4_0 pairs (and Q5_0, IQ4_NL, MXFP4,
 * Q5_1), the pair types' gemv, Q8_0 in groups of 16 rows, Q4_K and Q5_K in groups of 16 rows, Q6_K
 * in groups of 16 rows, Q2_K and Q3_K in groups of 16 rows, IQ4_XS, the IQ grid types, attention
 * (zmm twins of kernels_x86.h's loops, the same bits), the table.
 */
#include "runtime/cpu/kernels_x86.h"

/* Order of accumulation, per dot product:
 *   F32/F16/BF16: 2 accumulators x 16 lanes over 32 elements per step (FMA),
 *     a leftover 16 into the first, hsum16(a0 + a1) (halves, then as AVX2),
 *     plus a scalar tail of n % 16 added last;
 *   Q8_0: per row one float, over the blocks in order, acc =
 *     fma(float(isum_b), d_w * d_x, acc) (the row groups below);
 *   Q4_0: blocks in pairs (lanes 0-7 block 2k, 8-15 block 2k+1), in
 *     order into one accumulator as fma(float(lanes), d_w * d_x, acc); an
 *     odd last block is a pair with an empty upper half (scale 0); hsum16;
 *   Q4_K and Q5_K: per row one float, over the super-blocks in order,
 *     fma(d, ISUM), then fnma(dmin, IMIN) (the row groups below);
 *   Q6_K: per row one float, over the super-blocks in order, fma(d,
 *     ISUM) (the row groups below);
 *   Q2_K as Q4_K, Q3_K as Q6_K (per row one float; the row groups below);
 *   Q5_0/IQ4_NL/MXFP4 as Q4_0; IQ4_XS: per super-block 16 exact int32
 *     lanes (lanes 4 i .. 4 i + 3: sub-blocks i and 4 + i, k5_iq4xs_lanes),
 *     fma into one accumulator, hsum16;
 *   Q5_1 as Q4_0, each pair fma(float(lanes), d_w d_x) then
 *     fma(float(x-sum lanes), m_w d_x) into the one accumulator;
 *   the IQ grid types: per super-block kernels_x86.h's 8 exact int32
 *     lanes in the low half, fma(D_w d_x) into one accumulator, hsum16.
 */

#ifndef KERNELS_VNNI
#define KERNELS_VNNI 0
#endif

/* ---- helpers ---------------------------------------------------------------- */

KERNELS__INLINE float k5_hsum(__m512 v)
{
	__m256 lo = _mm512_castps512_ps256(v);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	return kernels__x86_hsum8(_mm256_add_ps(lo, hi));
}

/* Lanes 0-7 = lane 0 of p, lanes 8-15 = lane 1 of p. */
KERNELS__INLINE __m512 k5_spread_pair(__m128 p)
{
	const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
}

/* acc + the sums of each 2 products of int16 lanes a and b (vpdpwssd with
 * VNNI, one instruction; madd + add without): the same exact int32 lanes. */
KERNELS__INLINE __m512i k5_madd_acc(__m512i acc, __m512i a, __m512i b)
{
#if KERNELS_VNNI
	return _mm512_dpwssd_epi32(acc, a, b);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

KERNELS__INLINE __m512i k5_pair_si(__m256i a, __m256i b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/* ---- float types ------------------------------------------------------------------
 * The vector of the shell's templates; KERNELS__FLOAT_TILE's LOAD: 16 floats
 * of row p at element i. */

#define KERNELS__V               __m512
#define KERNELS__V_LANES         16
#define KERNELS__V_ZERO()        _mm512_setzero_ps()
#define KERNELS__V_ADD(a, b)     _mm512_add_ps(a, b)
#define KERNELS__V_FMA(s, a, b)  _mm512_fmadd_ps(a, b, s)
#define KERNELS__V_HSUM(v)       k5_hsum(v)
#define KERNELS__H2F(h)          kernels__x86_h2f(h)
#define KERNELS__V_SET1(f)       _mm512_set1_ps(f)
#define KERNELS__V_FNMA(s, a, b) _mm512_fnmadd_ps(a, b, s)
#define KERNELS__X86_LANES_V(i)  _mm512_cvtepi32_ps(_mm512_zextsi256_si512(i))

#define K5_LOAD_F32(p, i) _mm512_loadu_ps((const float *)(p) + (i))
#define K5_LOAD_F16(p, i)                                                                          \
	_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(p) + (i))))
#define K5_LOAD_BF16(p, i)                                                                         \
	_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((           \
	                                          const __m256i *)((const uint16_t *)(p) + (i)))), \
	                                      16))
KERNELS__FLOAT_TILE(k5_tile_f32, 2, K5_LOAD_F32, KERNELS__S_F32, 4, 1)
KERNELS__FLOAT_TILE(k5_tile_f16, 2, K5_LOAD_F16, KERNELS__S_F16, 2, 1)
KERNELS__FLOAT_TILE(k5_tile_bf16, 2, K5_LOAD_BF16, KERNELS__S_BF16, 2, 1)

/* ---- Q4_0 (and the Q8_0 block loads) ------------------------------------------------
 * dot(w, x) = dot(|w|, x negated where w < 0): |w| <= 128 as an unsigned
 * byte, activations in [-127, 127] (never -128, so negating is safe). */

KERNELS__INLINE __m256i k5_q8_0_bytes(const kernels__block_q8_0 *b)
{
	return _mm256_loadu_si256((const __m256i *)b->qs);
}

/* Blocks b[0] and b[1] (b[1] empty when single) as 64 signed bytes. */
KERNELS__INLINE __m512i k5_q8_0_pair(const kernels__block_q8_0 *b, int single)
{
	return k5_pair_si(k5_q8_0_bytes(b), single ? _mm256_setzero_si256() : k5_q8_0_bytes(b + 1));
}

/* The nibbles of two blocks' 16 bytes of quants q0 and q1 (q1 NULL: zero
 * bytes) in element order, 0..15: the halves placed as (q0, q0, q1, q1)
 * in 128-bit lanes, odd lanes shifted right 4 (high nibbles), masked. */
KERNELS__INLINE __m512i k5_nibbles_pair(const uint8_t *q0, const uint8_t *q1)
{
	const long long s4 = 0x0004000400040004LL;
	__m128i lo = _mm_loadu_si128((const __m128i *)q0);
	__m128i hi = q1 ? _mm_loadu_si128((const __m128i *)q1) : _mm_setzero_si128();
	__m512i v = _mm512_castsi256_si512(_mm256_set_m128i(hi, lo));
	v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 1, 0, 0));
	v = _mm512_srlv_epi16(v, _mm512_set_epi64(s4, s4, 0, 0, s4, s4, 0, 0));
	return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

/* The same for Q4_0 (q - 8). When single, b[1] reads as 16 zero bytes
 * (-8s): the activation half is zero then, so its products are too. */
KERNELS__INLINE __m512i k5_q4_0_pair(const kernels__block_q4_0 *b, int single)
{
	return _mm512_sub_epi8(k5_nibbles_pair(b[0].qs, single ? NULL : b[1].qs),
	                       _mm512_set1_epi8(8));
}

/* Tiles of R rows x NC columns (each <= 4; name##_rows, which
 * kernels__run_rows drives: 4 rows for prefill, 1 for decode), so that both
 * the weight side (load, sign or offset, scale) and the activation side are
 * prepared once and used 4 times. Every (row, column) has one accumulator and sees the
 * same operations whatever R and NC are: gemv (NC = 1) and gemm agree
 * bitwise, and so do row tiles of any height.
 *
 * A 4-row tile reads 4 streams that each cross a 4 KiB page (where
 * hardware prefetchers stop) every row or so: it prefetches the same place
 * 4 rows on, which the next row tile reads; a 1-row tile prefetches
 * KERNELS__PF_AHEAD on in its own row.
 *
 * VNNI: x + 128 is an unsigned byte (x in [-127, 127]), so vpdpbusd sums
 * (x + 128) w = x w + 128 w; starting each lane from -128 * (its 4 w) leaves
 * exactly sum x w. Without VNNI: |w| times x negated where w < 0, by
 * maddubs (pairs <= 2 * 128 * 127 = 32512, no saturation) and madd. */
#define K5_Q32_RC(name, WBLOCK, WPAIR, WSCALES)                                                    \
	KERNELS__INLINE void name##_rc(int64_t n, const char *w, size_t row_bytes, const int R,    \
	                               const void *const *xq, const int NC, float *out)            \
	{                                                                                          \
		__m512 acc[4][KERNELS__TILE];                                                      \
		KERNELS__UNROLL for (int r = 0; r < R; r++)                                        \
		    KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();  \
		const __m256i z = _mm256_setzero_si256();                                          \
		const size_t pf = R == 1 ? KERNELS__PF_AHEAD : 4 * row_bytes;                      \
		int64_t nb = n / KERNELS__QK;                                                      \
		for (int64_t b = 0; b < nb; b += 2) {                                              \
			const int single = b + 1 == nb;                                            \
			__m512i xv[KERNELS__TILE];                                                 \
			__m512 dx[KERNELS__TILE];                                                  \
			KERNELS__UNROLL for (int c = 0; c < NC; c++)                               \
			{                                                                          \
				const kernels__block_q8_0 *xb =                                    \
				    (const kernels__block_q8_0 *)xq[c] + b;                        \
				xv[c] = k5_pair_si(k5_q8_0_bytes(xb),                              \
				                   single ? z : k5_q8_0_bytes(xb + 1));            \
				if (KERNELS_VNNI)                                                  \
					xv[c] = _mm512_xor_si512(xv[c], _mm512_set1_epi8(-128));   \
				dx[c] = k5_spread_pair(                                            \
				    kernels__x86_h2f_pair(&xb[0].d, single ? 0 : xb[1].d));        \
			}                                                                          \
			KERNELS__UNROLL for (int r = 0; r < R; r++)                                \
			{                                                                          \
				const WBLOCK *wb =                                                 \
				    (const WBLOCK *)(w + (size_t)r * row_bytes) + b;               \
				kernels__prefetch_line((const char *)wb + pf);                     \
				__m512i q = WPAIR(wb, single);                                     \
				__m512 dw = k5_spread_pair(WSCALES(wb, 0, single));                \
				__m512i base = k5_q32_base(q);                                     \
				__m512i aq = _mm512_abs_epi8(q);                                   \
				__mmask64 neg = _mm512_movepi8_mask(q);                            \
				KERNELS__UNROLL for (int c = 0; c < NC; c++)                       \
				{                                                                  \
					__m512i s = k5_q32_dot(base, aq, neg, q, xv[c]);           \
					acc[r][c] =                                                \
					    _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),                 \
					                    _mm512_mul_ps(dw, dx[c]), acc[r][c]);  \
				}                                                                  \
			}                                                                          \
		}                                                                                  \
		KERNELS__UNROLL for (int r = 0; r < R; r++)                                        \
		    KERNELS__UNROLL for (int c = 0; c < NC; c++) out[r * KERNELS__TILE + c] =      \
		        k5_hsum(acc[r][c]);                                                        \
	}                                                                                          \
	KERNELS__ROWS_FROM_RC(name)

/* VNNI: -128 * (sum of each 4 w), the start of every column's lanes. */
KERNELS__INLINE __m512i k5_q32_base(__m512i q)
{
#if KERNELS_VNNI
	__m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), q);
	return _mm512_sub_epi32(_mm512_setzero_si512(), s);
#else
	(void)q;
	return _mm512_setzero_si512();
#endif
}

/* The exact int32 lanes sum of 4 (x w), x prepared as in K5_Q32_RC. */
KERNELS__INLINE __m512i k5_q32_dot(__m512i base, __m512i aq, __mmask64 neg, __m512i q, __m512i x)
{
#if KERNELS_VNNI
	(void)aq;
	(void)neg;
	return _mm512_dpbusd_epi32(base, x, q);
#else
	(void)base;
	(void)q;
	__m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
	return _mm512_madd_epi16(_mm512_maddubs_epi16(aq, sx), _mm512_set1_epi16(1));
#endif
}

/* Q5_0, IQ4_NL, MXFP4: two blocks of signed bytes from kernels_x86.h, the
 * second zero when single. */
#define K5_Q32_PAIR(name, WBLOCK, BYTES)                                                           \
	KERNELS__INLINE __m512i name(const WBLOCK *b, int single)                                  \
	{                                                                                          \
		return k5_pair_si(BYTES(b), single ? _mm256_setzero_si256() : BYTES(b + 1));       \
	}
K5_Q32_PAIR(k5_q5_0_pair, kernels__block_q5_0, kernels__x86_q5_0_bytes)

/* IQ4_NL and MXFP4: both blocks' nibbles at once (k5_nibbles_pair), looked
 * up in the 16-entry table by one 512-bit byte shuffle (the same bytes as
 * kernels_x86.h's per-block lookup, in two shuffles and an insert fewer). */
#define K5_TABLE_PAIR(name, WBLOCK, TABLE)                                                         \
	KERNELS__INLINE __m512i name(const WBLOCK *b, int single)                                  \
	{                                                                                          \
		const __m512i t =                                                                  \
		    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(TABLE)));             \
		__m512i q = k5_nibbles_pair(                                                       \
		    b[0].qs, single ? NULL : b[1].qs); /* single: the upper half zero, as the      \
		                                          per-block form gave it */                \
		return _mm512_maskz_shuffle_epi8(single ? 0xffffffffULL : ~0ULL, t, q);            \
	}
K5_TABLE_PAIR(k5_iq4_nl_pair, kernels__block_iq4_nl, kernels__iq4_values)
K5_TABLE_PAIR(k5_mxfp4_pair, kernels__block_mxfp4, kernels__mxfp4_values)

K5_Q32_RC(k5_q4_0, kernels__block_q4_0, k5_q4_0_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_RC(k5_q5_0, kernels__block_q5_0, k5_q5_0_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_RC(k5_iq4_nl, kernels__block_iq4_nl, k5_iq4_nl_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_RC(k5_mxfp4, kernels__block_mxfp4, k5_mxfp4_pair, KERNELS__X86_E8M0_SCALES)

/* Q5_1 in the same row and column tiles: x = d q + m with q unsigned
 * (0..31), so per pair of blocks (lanes 0-7 block b, 8-15 block b + 1)
 * acc = fma(float(dot(q, x) lanes), d_w d_x, acc), then acc =
 * fma(float(x-sum lanes), m_w d_x, acc); an odd last block is a pair with
 * an empty upper half (scales 0). The lanes are exact sums of 4 (vpdpbusd,
 * or maddubs + madd: pairs <= 2 * 31 * 127); the x sums are the column's,
 * made once per pair for all the tile's rows. */

/* Blocks b[0] and b[1] (b[1] empty when single) as 64 unsigned quants:
 * the nibbles placed as Q4_0's, the fifth bits (qh, bit i = element i) a
 * byte mask, added as 16. */
KERNELS__INLINE __m512i k5_q5_1_pair(const kernels__block_q5_1 *b, int single)
{
	const long long s4 = 0x0004000400040004LL;
	__m128i lo = _mm_loadu_si128((const __m128i *)b[0].qs);
	__m128i hi = single ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)b[1].qs);
	__m512i v = _mm512_castsi256_si512(_mm256_set_m128i(hi, lo));
	v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 1, 0, 0));
	v = _mm512_srlv_epi16(v, _mm512_set_epi64(s4, s4, 0, 0, s4, s4, 0, 0));
	v = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
	uint32_t h0, h1 = 0;
	memcpy(&h0, b[0].qh, 4);
	if (!single)
		memcpy(&h1, b[1].qh, 4);
	__mmask64 k = _cvtu64_mask64((uint64_t)h0 | (uint64_t)h1 << 32);
	return _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(16));
}

/* The exact int32 lanes sum of 4 (u w) for unsigned bytes u, signed w. */
KERNELS__INLINE __m512i k5_udot1(__m512i u, __m512i w)
{
#if KERNELS_VNNI
	return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, w);
#else
	return _mm512_madd_epi16(_mm512_maddubs_epi16(u, w), _mm512_set1_epi16(1));
#endif
}

KERNELS__INLINE void k5_q5_1_rc(int64_t n, const char *w, size_t row_bytes, const int R,
                                const void *const *xq, const int NC, float *out)
{
	const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m512i idx_m = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
	__m512 acc[4][KERNELS__TILE];
	KERNELS__UNROLL for (int r = 0; r < R; r++) KERNELS__UNROLL for (int c = 0; c < NC; c++)
	    acc[r][c] = _mm512_setzero_ps();
	const __m256i z = _mm256_setzero_si256();
	const size_t pf = R == 1 ? KERNELS__PF_AHEAD : 4 * row_bytes;
	int64_t nb = n / KERNELS__QK;
	for (int64_t b = 0; b < nb; b += 2) {
		const int single = b + 1 == nb;
		__m512i xv[KERNELS__TILE];
		__m512 dx[KERNELS__TILE], sx[KERNELS__TILE];
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const kernels__block_q8_0 *xb = (const kernels__block_q8_0 *)xq[c] + b;
			xv[c] = k5_pair_si(k5_q8_0_bytes(xb), single ? z : k5_q8_0_bytes(xb + 1));
			dx[c] =
			    k5_spread_pair(kernels__x86_h2f_pair(&xb[0].d, single ? 0 : xb[1].d));
			sx[c] = _mm512_cvtepi32_ps(k5_udot1(_mm512_set1_epi8(1), xv[c]));
		}
		KERNELS__UNROLL for (int r = 0; r < R; r++)
		{
			const kernels__block_q5_1 *wb =
			    (const kernels__block_q5_1 *)(w + (size_t)r * row_bytes) + b;
			kernels__prefetch_line((const char *)wb + pf);
			__m512i q = k5_q5_1_pair(wb, single);
			uint32_t s0, s1 = 0; /* (d, m) of each block */
			memcpy(&s0, &wb[0].d, 4);
			if (!single)
				memcpy(&s1, &wb[1].d, 4);
			__m512 dm = _mm512_castps128_ps512(_mm_cvtph_ps(
			    _mm_cvtsi64_si128((long long)((uint64_t)s0 | (uint64_t)s1 << 32))));
			__m512 dw = _mm512_permutexvar_ps(idx_d, dm);
			__m512 mw = _mm512_permutexvar_ps(idx_m, dm);
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				__m512i s = k5_udot1(q, xv[c]);
				acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
				                            _mm512_mul_ps(dw, dx[c]), acc[r][c]);
				acc[r][c] =
				    _mm512_fmadd_ps(sx[c], _mm512_mul_ps(mw, dx[c]), acc[r][c]);
			}
		}
	}
	KERNELS__UNROLL for (int r = 0; r < R; r++) KERNELS__UNROLL for (int c = 0; c < NC; c++)
	    out[r * KERNELS__TILE + c] = k5_hsum(acc[r][c]);
}
KERNELS__ROWS_FROM_RC(k5_q5_1)

/* ---- the 32-element pair types' gemv ------------------------------------------------
 * The rows functions above prepare the activation side of each pair of
 * blocks (the 64 bytes, VNNI's offset, the spread scales, Q5_1's x sums)
 * once per row tile: for a gemv (1 row a tile) once per row, about a
 * third of each pair's work. This gemv prepares them once per pass over
 * K5_XR rows and K5_XP pairs (8192 elements) and runs each row's pairs
 * against them with the operations of name##_rc at R = NC = 1, from +0,
 * in order: the same bits as the rows path (which the gemm still takes). */

#define K5_XP 128 /* pairs per prepared segment: 128 x 192 bytes = 24 KiB */
#define K5_XR 32  /* rows per pass, their accumulators kept between segments */

typedef struct k5_xpair {
	__m512i xv;    /* the two blocks' bytes (VNNI and not Q5_1: x + 128) */
	__m512 dx, sx; /* d_x spread; Q5_1: float(the x sums' lanes) */
} k5_xpair;

/* Pairs b0, b0 + 2, .. (np of them, nb blocks in the row) of column xq. */
KERNELS__INLINE void k5_xprep(const void *xq, int64_t b0, int np, int64_t nb, k5_xpair *xp,
                              const int Q51)
{
	for (int p = 0; p < np; p++) {
		const int64_t b = b0 + 2 * p;
		const int single = b + 1 == nb;
		const kernels__block_q8_0 *xb = (const kernels__block_q8_0 *)xq + b;
		__m512i xv = k5_pair_si(k5_q8_0_bytes(xb),
		                        single ? _mm256_setzero_si256() : k5_q8_0_bytes(xb + 1));
		xp[p].dx = k5_spread_pair(kernels__x86_h2f_pair(&xb[0].d, single ? 0 : xb[1].d));
		if (Q51)
			xp[p].sx = _mm512_cvtepi32_ps(k5_udot1(_mm512_set1_epi8(1), xv));
		else if (KERNELS_VNNI)
			xv = _mm512_xor_si512(xv, _mm512_set1_epi8(-128));
		xp[p].xv = xv;
	}
}

/* One row's pair b (K5_Q32_RC's step) into acc. */
#define K5_Q32_STEP(name, WBLOCK, WPAIR, WSCALES)                                                  \
	KERNELS__INLINE __m512 name##_step(const WBLOCK *wb, int single, const k5_xpair *x,        \
	                                   __m512 acc)                                             \
	{                                                                                          \
		kernels__prefetch_line((const char *)wb + KERNELS__PF_AHEAD);                      \
		__m512i q = WPAIR(wb, single);                                                     \
		__m512 dw = k5_spread_pair(WSCALES(wb, 0, single));                                \
		__m512i s = k5_q32_dot(k5_q32_base(q), _mm512_abs_epi8(q), _mm512_movepi8_mask(q), \
		                       q, x->xv);                                                  \
		return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, x->dx), acc);      \
	}

/* Q5_1's (k5_q5_1_rc's step). */
KERNELS__INLINE __m512 k5_q5_1_step(const kernels__block_q5_1 *wb, int single, const k5_xpair *x,
                                    __m512 acc)
{
	const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m512i idx_m = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
	kernels__prefetch_line((const char *)wb + KERNELS__PF_AHEAD);
	__m512i q = k5_q5_1_pair(wb, single);
	uint32_t s0, s1 = 0;
	memcpy(&s0, &wb[0].d, 4);
	if (!single)
		memcpy(&s1, &wb[1].d, 4);
	__m512 dm = _mm512_castps128_ps512(
	    _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)s0 | (uint64_t)s1 << 32))));
	__m512 dw = _mm512_permutexvar_ps(idx_d, dm);
	__m512 mw = _mm512_permutexvar_ps(idx_m, dm);
	__m512i s = k5_udot1(q, x->xv);
	acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, x->dx), acc);
	return _mm512_fmadd_ps(x->sx, _mm512_mul_ps(mw, x->dx), acc);
}

/* name##_mm: the gemv above for one column, the rows path for more. */
#define K5_PAIR_MM(name, WBLOCK, Q51)                                                              \
	static void name##_mm(int64_t n, const void *w, size_t row_bytes, int64_t nrows,           \
	                      const void *xq, size_t xq_stride, int64_t ncols, float *y,           \
	                      size_t y_stride)                                                     \
	{                                                                                          \
		if (ncols > 1) {                                                                   \
			kernels__run_rows(name##_rows, n, w, row_bytes, nrows, xq, xq_stride,      \
			                  ncols, y, y_stride);                                     \
			return;                                                                    \
		}                                                                                  \
		const int64_t nb = n / KERNELS__QK;                                                \
		k5_xpair xp[K5_XP];                                                                \
		__m512 acc[K5_XR];                                                                 \
		for (int64_t r0 = 0; r0 < nrows; r0 += K5_XR) {                                    \
			const int R = nrows - r0 < K5_XR ? (int)(nrows - r0) : K5_XR;              \
			for (int r = 0; r < R; r++)                                                \
				acc[r] = _mm512_setzero_ps();                                      \
			for (int64_t b0 = 0; b0 < nb; b0 += 2 * K5_XP) {                           \
				const int np =                                                     \
				    (nb - b0 + 1) / 2 < K5_XP ? (int)((nb - b0 + 1) / 2) : K5_XP;  \
				k5_xprep(xq, b0, np, nb, xp, Q51);                                 \
				for (int r = 0; r < R; r++) {                                      \
					const WBLOCK *wr =                                         \
					    (const WBLOCK *)((const char *)w +                     \
					                     (size_t)(r0 + r) * row_bytes) +       \
					    b0;                                                    \
					__m512 a = acc[r];                                         \
					for (int p = 0; p < np; p++)                               \
						a = name##_step(wr + 2 * p, b0 + 2 * p + 1 == nb,  \
						                xp + p, a);                        \
					acc[r] = a;                                                \
				}                                                                  \
			}                                                                          \
			for (int r = 0; r < R; r++)                                                \
				y[r0 + r] = k5_hsum(acc[r]);                                       \
		}                                                                                  \
	}

K5_Q32_STEP(k5_q4_0, kernels__block_q4_0, k5_q4_0_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_STEP(k5_q5_0, kernels__block_q5_0, k5_q5_0_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_STEP(k5_iq4_nl, kernels__block_iq4_nl, k5_iq4_nl_pair, KERNELS__X86_H2F_SCALES)
K5_Q32_STEP(k5_mxfp4, kernels__block_mxfp4, k5_mxfp4_pair, KERNELS__X86_E8M0_SCALES)
K5_PAIR_MM(k5_q4_0, kernels__block_q4_0, 0)
K5_PAIR_MM(k5_q5_0, kernels__block_q5_0, 0)
K5_PAIR_MM(k5_iq4_nl, kernels__block_iq4_nl, 0)
K5_PAIR_MM(k5_mxfp4, kernels__block_mxfp4, 0)
K5_PAIR_MM(k5_q5_1, kernels__block_q5_1, 1)

/* ---- Q8_0 in groups of 16 rows ------------------------------------------------------
 * This table's Q8_0 (gemv and gemm alike) accumulates each row in one float,
 * from +0, over its blocks in order:
 *     acc = fma((float)isum_b, d_w_b * d_x_b, acc)
 * isum_b being the exact int32 dot of block b and d_w_b * d_x_b exact (two
 * fp16 values). Rows run in groups of 16, one per lane, so the float work
 * is one fma per 16 rows and block instead of three float operations per
 * row and pair of blocks:
 *   gemm repacks a group's blocks (a 16 x 8 transpose of 4-byte words), then
 *     per block and column 8 vpdpbusd of 4 activation bytes, broadcast,
 *     against 4 bytes of each of the 16 rows;
 *   gemv (k5_q8r_gemv below) streams one row at a time, four blocks' lanes
 *     summed by horizontal adds; rows of more than K5_Q8R_MAX blocks keep
 *     the group form, which keeps each pair of blocks' 16 int32 lanes and
 *     folds 16 rows' lanes into one lane per row by a tree of permutes.
 * VNNI: the weights as unsigned bytes w + 128 against signed activations,
 * each lane started from -128 * the sum of its activation bytes; without
 * VNNI, |w| against x negated where w < 0 (maddubs + madd). Both give the
 * exact isum_b. */

#define K5_G  16  /* rows per group: one per lane */
#define K5_GV 256 /* gemv: blocks per pass over a row (2 int32 lanes kept per block) */
#define K5_GS 64  /* gemm: blocks per repacked segment */
#define K5_CB 128 /* gemm: columns per pass (their sums and scales precomputed) */

/* Permute indices (lanes 0..15 from a, 16..31 from b). */
#define K5_IDX(...) _mm512_setr_epi32(__VA_ARGS__)

/* The int32 lanes of a pair of weight blocks q against activation pair x:
 * exact sums of 4 w x, but with VNNI each lane is 128 * (its 4 x) over
 * (the gemv takes -128 * each block's x sum off after the fold). */
KERNELS__INLINE __m512i k5_q8g_pairdot(__m512i q, __m512i x)
{
#if KERNELS_VNNI
	return _mm512_dpbusd_epi32(_mm512_setzero_si512(),
	                           _mm512_xor_si512(q, _mm512_set1_epi8(-128)), x);
#else
	__m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(q), _mm512_setzero_si512(), x);
	return _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(q), sx),
	                         _mm512_set1_epi16(1));
#endif
}

/* lo + hi of two permutes of (a, b). */
KERNELS__INLINE __m512i k5_q8g_merge(__m512i a, __m512i b, __m512i ilo, __m512i ihi)
{
	return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ilo, b),
	                        _mm512_permutex2var_epi32(a, ihi, b));
}

/* The fold of 16 rows' pair lanes into one lane per row (for block 0 of
 * the pair, for block 1), a level at a time as rows arrive: level 1 merges
 * rows 2i and 2i + 1 (each keeps 4 partial lanes a block), level 2 four
 * rows (2 partials), level 3 eight rows (1), the last two permutes give
 * lane r = row r. Row r of a group does the merges of trailing ones of r
 * (row 15 all four), so the fold is spread over the group's rows and the
 * weight stream never waits for it. */
typedef struct k5_q8g_fold {
	__m512i l1a, l1b, l2a, l2b, ev, od;
} k5_q8g_fold;

KERNELS__INLINE k5_q8g_fold k5_q8g_fold_init(void)
{
	k5_q8g_fold f;
	f.l1a = K5_IDX(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
	f.l1b = K5_IDX(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
	f.l2a = K5_IDX(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
	f.l2b = K5_IDX(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
	f.ev = K5_IDX(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	f.od = K5_IDX(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	return f;
}

KERNELS__INLINE __mmask16 k5_q8g_mask(int R)
{
	return (__mmask16)((1u << R) - 1u);
}

/* Row r's lanes v for item i (a pair of blocks, a super-block) into the
 * fold, whose pending levels are B[l * bs + i]; LVL: the trailing ones of
 * r. At LVL 4 (row 15) the group is whole: true, with *sa lane r = row r's
 * sum of v's lanes 0-7 and *sb of lanes 8-15. */
KERNELS__INLINE int k5_fold_push(__m512i *B, size_t bs, int i, __m512i v, const int LVL,
                                 const k5_q8g_fold *f, __m512i *sa, __m512i *sb)
{
	if (LVL == 0) {
		B[i] = v;
		return 0;
	}
	v = k5_q8g_merge(B[i], v, f->l1a, f->l1b);
	if (LVL == 1) {
		B[bs + i] = v;
		return 0;
	}
	v = k5_q8g_merge(B[bs + i], v, f->l2a, f->l2b);
	if (LVL == 2) {
		B[2 * bs + i] = v;
		return 0;
	}
	v = k5_q8g_merge(B[2 * bs + i], v, f->ev, f->od);
	if (LVL == 3) {
		B[3 * bs + i] = v;
		return 0;
	}
	*sa = _mm512_permutex2var_epi32(B[3 * bs + i], f->ev, v);
	*sb = _mm512_permutex2var_epi32(B[3 * bs + i], f->od, v);
	return 1;
}

/* CALL(LVL) for row r of a group, LVL (its trailing ones) a constant. */
#define K5_BY_LEVEL(r, CALL)                                                                       \
	switch (r) {                                                                               \
	case 15:                                                                                   \
		CALL(4);                                                                           \
		break;                                                                             \
	case 7:                                                                                    \
		CALL(3);                                                                           \
		break;                                                                             \
	case 3:                                                                                    \
	case 11:                                                                                   \
		CALL(2);                                                                           \
		break;                                                                             \
	case 1:                                                                                    \
	case 5:                                                                                    \
	case 9:                                                                                    \
	case 13:                                                                                   \
		CALL(1);                                                                           \
		break;                                                                             \
	default:                                                                                   \
		CALL(0);                                                                           \
		break;                                                                             \
	}

/* CALL(NC) for a column count 1..4, NC a constant. */
#define K5_BY_NC(nc, CALL)                                                                         \
	switch (nc) {                                                                              \
	case 1:                                                                                    \
		CALL(1);                                                                           \
		break;                                                                             \
	case 2:                                                                                    \
		CALL(2);                                                                           \
		break;                                                                             \
	case 3:                                                                                    \
		CALL(3);                                                                           \
		break;                                                                             \
	default:                                                                                   \
		CALL(4);                                                                           \
		break;                                                                             \
	}

/* VNNI: -128 * the sum of an activation block's bytes (the avx512bw table
 * does not use it: its callers give 0 there). */
KERNELS__INLINE int32_t k5_q8g_xcorr(const kernels__block_q8_0 *xb)
{
	__m256i u = _mm256_xor_si256(k5_q8_0_bytes(xb), _mm256_set1_epi8(-128));
	__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
	__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
	return -128 * ((int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 4096);
}

/* The gemv's scratch for one group and segment. */
typedef struct k5_q8g_rows {
	__m512i XP[K5_GV / 2];   /* activation pairs */
	__m512i B[4][K5_GV / 2]; /* the fold's pending levels */
	int32_t CX[K5_GV];       /* VNNI: -128 * each block's activation sum */
	float DX[K5_GV];
} k5_q8g_rows;

/* The 16 rows' scales of block b (at gd: row 0's block, rows idx apart;
 * lanes past mask m zero) as floats. */
KERNELS__INLINE __m512 k5_q8g_scales(const char *gd, __m512i idx, __mmask16 m)
{
	__m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, gd, 1);
	return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
}

/* acc + (isum + cx) * (d_w * d_x) in every row's lane. */
KERNELS__INLINE __m512 k5_q8g_step2(__m512 acc, __m512i isum, int32_t cx, __m512 dw, float dx)
{
#if KERNELS_VNNI
	isum = _mm512_add_epi32(isum, _mm512_set1_epi32(cx));
#else
	(void)cx;
#endif
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
	                       acc);
}

/* Row r of a group (LVL: its trailing ones; wb NULL: a row past the
 * matrix, zero lanes), its pairs of sb blocks into the fold; at LVL 4 the
 * group's sums go into *acc, block by block (g0: row 0's blocks, idx and m
 * the rows' offsets and mask, for their scales). */
KERNELS__INLINE void k5_q8g_row(k5_q8g_rows *sc, const kernels__block_q8_0 *wb, int sb,
                                const int LVL, const k5_q8g_fold *f, __m512 *acc,
                                const kernels__block_q8_0 *g0, __m512i idx, __mmask16 m)
{
	const int np = (sb + 1) / 2;
	for (int p = 0; p < np; p++) {
		const int single = 2 * p + 1 == sb;
		__m512i v = _mm512_setzero_si512();
		if (wb) {
			kernels__prefetch_line((const char *)(wb + 2 * p) + KERNELS__PF_AHEAD);
			v = k5_q8g_pairdot(k5_q8_0_pair(wb + 2 * p, single), sc->XP[p]);
		}
		__m512i sa, sb2;
		if (!k5_fold_push(sc->B[0], K5_GV / 2, p, v, LVL, f, &sa, &sb2))
			continue;
		*acc =
		    k5_q8g_step2(*acc, sa, sc->CX[2 * p],
		                 k5_q8g_scales((const char *)(g0 + 2 * p), idx, m), sc->DX[2 * p]);
		if (!single) {
			*acc = k5_q8g_step2(*acc, sb2, sc->CX[2 * p + 1],
			                    k5_q8g_scales((const char *)(g0 + 2 * p + 1), idx, m),
			                    sc->DX[2 * p + 1]);
		}
	}
}

static void k5_q8g_gemv(int64_t n, const char *w, size_t row_bytes, int64_t nrows, const void *xq,
                        float *y)
{
	const kernels__block_q8_0 *xb = xq;
	const int64_t nb = n / KERNELS__QK;
	const k5_q8g_fold f = k5_q8g_fold_init();
	const __m512i idx = _mm512_mullo_epi32(
	    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
	    _mm512_set1_epi32((int)row_bytes));
	k5_q8g_rows sc;
	int64_t prepared = -1;
	for (int64_t g = 0; g < nrows; g += K5_G) {
		const int R = nrows - g < K5_G ? (int)(nrows - g) : K5_G;
		const __mmask16 m = k5_q8g_mask(R);
		__m512 acc = _mm512_setzero_ps();
		for (int64_t s0 = 0; s0 < nb; s0 += K5_GV) {
			const int sb = nb - s0 < K5_GV ? (int)(nb - s0) : K5_GV, np = (sb + 1) / 2;
			if (prepared != s0) { /* the activation side, once per segment */
				for (int p = 0; p < np; p++) {
					const int single = 2 * p + 1 == sb;
					sc.XP[p] = k5_q8_0_pair(xb + s0 + 2 * p, single);
				}
				for (int b = 0; b < sb; b++) {
					sc.DX[b] = kernels__x86_h2f(xb[s0 + b].d);
					sc.CX[b] = KERNELS_VNNI ? k5_q8g_xcorr(xb + s0 + b) : 0;
				}
				prepared = s0;
			}
			const kernels__block_q8_0 *g0 =
			    (const kernels__block_q8_0 *)(w + (size_t)g * row_bytes) + s0;
			for (int r = 0; r < K5_G; r++) {
				const kernels__block_q8_0 *wb =
				    r < R ? (const kernels__block_q8_0 *)(w + (size_t)(g + r) *
				                                                  row_bytes) +
				                s0
				          : NULL;
#define K5_ROW(L) k5_q8g_row(&sc, wb, sb, L, &f, &acc, g0, idx, m)
				K5_BY_LEVEL(r, K5_ROW)
#undef K5_ROW
			}
		}
		_mm512_mask_storeu_ps(y + g, m, acc);
	}
}

KERNELS__INLINE __m512i k5_q8g_perm(__m512i a, __m512i i, __m512i b)
{
	return _mm512_permutex2var_epi32(a, i, b);
}

/* The 16 x 32 bytes at rows[r] + off, transposed: t[k] lane r (+ 8) =
 * bytes 4 k .. 4 k + 3 of row r (+ 8). */
KERNELS__INLINE void k5_transpose16(const char *const *rows, size_t off, __m512i *t)
{
	const __m512i r1a = K5_IDX(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
	const __m512i r1b = K5_IDX(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
	const __m512i r2a = K5_IDX(0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
	const __m512i r2b = K5_IDX(2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
	const __m512i r3a = K5_IDX(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
	const __m512i r3b = K5_IDX(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
	__m512i z[8], u[8], v[8];
	_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) z[i] =
	    k5_pair_si(_mm256_loadu_si256((const __m256i *)(rows[i] + off)),
	               _mm256_loadu_si256((const __m256i *)(rows[i + 8] + off)));
	KERNELS__UNROLL for (int i = 0; i < 4; i++)
	{
		u[i] = k5_q8g_perm(z[i], r1a, z[i + 4]);
		u[i + 4] = k5_q8g_perm(z[i], r1b, z[i + 4]);
	}
	KERNELS__UNROLL for (int j = 0; j < 4; j++)
	{
		const int i = j < 2 ? j : j + 2;
		v[i] = k5_q8g_perm(u[i], r2a, u[i + 2]);
		v[i + 2] = k5_q8g_perm(u[i], r2b, u[i + 2]);
	}
	KERNELS__UNROLL for (int j = 0; j < 4; j++)
	{
		t[2 * j] = k5_q8g_perm(v[2 * j], r3a, v[2 * j + 1]);
		t[2 * j + 1] = k5_q8g_perm(v[2 * j], r3b, v[2 * j + 1]);
	}
}

/* Columns per gemm tile: 8 accumulators and 8 sums stay in registers with
 * the group's word, so each repacked word is loaded once for 8 columns. */
#define K5_Q8G_TILE 8

/* A group's segment repacked: W[b][k] lane r = bytes 4k..4k+3 of row r's
 * block b (VNNI: as w + 128; else |w|, NEG the signs), DW[b] the 16 scales. */
typedef struct k5_q8g_pack {
	__m512i W[K5_GS][8];
#if !KERNELS_VNNI
	__mmask64 NEG[K5_GS][8];
#endif
	uint16_t DW[K5_GS][K5_G];
} k5_q8g_pack;

static void k5_q8g_repack(const char *w, size_t row_bytes, int R, int64_t s0, int sb,
                          k5_q8g_pack *pk)
{
	/* rows past R read zero blocks (weights 0, scale 0: their lanes stay 0) */
	kernels__block_q8_0 zero[K5_GS];
	const char *rows[K5_G];
	if (R < K5_G)
		memset(zero, 0, sizeof(kernels__block_q8_0) * (size_t)sb);
	for (int r = 0; r < K5_G; r++)
		rows[r] = r < R
		              ? w + (size_t)r * row_bytes + (size_t)s0 * sizeof(kernels__block_q8_0)
		              : (const char *)zero;
	const size_t pf = (size_t)K5_G * row_bytes; /* the same block of the next group */
	const __m512i ridx = _mm512_mullo_epi32(
	    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
	    _mm512_set1_epi32((int)row_bytes));
	for (int b = 0; b < sb; b++) {
		const size_t o = (size_t)b * sizeof(kernels__block_q8_0);
		/* every other block crosses a line: prefetch the next group's */
		if (!(b & 1) && R == K5_G)
			_Pragma("GCC unroll 16") for (int r = 0; r < K5_G; r++)
			    kernels__prefetch_line(rows[r] + o + pf);
		/* rows row_bytes apart: one gather of the 16 scales */
		if (R == K5_G && row_bytes < (1u << 26))
			_mm256_storeu_si256((__m256i *)pk->DW[b],
			                    _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(
			                        ridx, (const void *)(rows[0] + o), 1)));
		else
			_Pragma("GCC unroll 16") for (int r = 0; r < K5_G; r++) pk->DW[b][r] =
			    ((const kernels__block_q8_0 *)(const void *)(rows[r] + o))->d;
		__m512i t[8];
		k5_transpose16(rows, o + offsetof(kernels__block_q8_0, qs), t);
		_Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
		{
#if KERNELS_VNNI
			pk->W[b][k] = _mm512_xor_si512(t[k], _mm512_set1_epi8(-128));
#else
			pk->W[b][k] = _mm512_abs_epi8(t[k]);
			pk->NEG[b][k] = _mm512_movepi8_mask(t[k]);
#endif
		}
	}
}

/* A repacked segment as the tiles read it: from a k5_q8g_pack, or from
 * weights packed once (k5_pack). */
typedef struct k5_q8g_view {
	const __m512i (*W)[8];
#if !KERNELS_VNNI
	const __mmask64 (*NEG)[8];
#endif
	const uint16_t (*DW)[K5_G];
} k5_q8g_view;

/* NC columns of a group over a repacked segment: acc from y (or 0 when
 * first), out to y (rows as mask m says). x[c]: the columns' blocks of the
 * segment; xc[c], xd[c]: their -128 * byte sums and scales. */
KERNELS__INLINE void k5_q8g_tile_n(const k5_q8g_view *pk, int sb,
                                   const kernels__block_q8_0 *const *x, const int32_t *const *xc,
                                   const float *const *xd, const int NC, float *y, size_t y_stride,
                                   __mmask16 m, int first)
{
	__m512 acc[K5_Q8G_TILE];
	_Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] =
	    first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + (size_t)c * y_stride);
	for (int b = 0; b < sb; b++) {
		__m512i s[K5_Q8G_TILE];
		_Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
#if KERNELS_VNNI
		    s[c] = _mm512_set1_epi32(xc[c][b]);
#else
		    s[c] = _mm512_setzero_si512();
#endif
		/* word k of every column against the group's word k: NC
		 * independent chains */
		_Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
		{
			const __m512i wk = pk->W[b][k];
#if !KERNELS_VNNI
			const __mmask64 neg = pk->NEG[b][k];
#endif
			_Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
			{
				int32_t word;
				memcpy(&word, x[c][b].qs + 4 * k, 4);
				__m512i xk = _mm512_set1_epi32(word);
#if KERNELS_VNNI
				s[c] = _mm512_dpbusd_epi32(s[c], wk, xk);
#else
				__m512i sx =
				    _mm512_mask_sub_epi8(xk, neg, _mm512_setzero_si512(), xk);
				s[c] = _mm512_add_epi32(
				    s[c], _mm512_madd_epi16(_mm512_maddubs_epi16(wk, sx),
				                            _mm512_set1_epi16(1)));
#endif
			}
		}
		const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)pk->DW[b]));
		_Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] = _mm512_fmadd_ps(
		    _mm512_cvtepi32_ps(s[c]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b])), acc[c]);
	}
	_Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
	    _mm512_mask_storeu_ps(y + (size_t)c * y_stride, m, acc[c]);
}

static void k5_q8g_tile(const k5_q8g_view *pk, int sb, const kernels__block_q8_0 *const *x,
                        const int32_t *const *xc, const float *const *xd, int NC, float *y,
                        size_t y_stride, __mmask16 m, int first)
{
#define K5_TILE(C)                                                                                 \
	case C:                                                                                    \
		k5_q8g_tile_n(pk, sb, x, xc, xd, C, y, y_stride, m, first);                        \
		break
	switch (NC) {
		K5_TILE(1);
		K5_TILE(2);
		K5_TILE(3);
		K5_TILE(4);
		K5_TILE(5);
		K5_TILE(6);
		K5_TILE(7);
	default:
		k5_q8g_tile_n(pk, sb, x, xc, xd, 8, y, y_stride, m, first);
	}
#undef K5_TILE
}

/* Weights packed once (kernels.h pack, VNNI tables): a header, then every
 * group's blocks as k5_q8g_pack's W (8 words of 16 rows a block), then
 * their scales as its DW; groups past the matrix's rows are zeros. */
typedef struct k5_packed_head {
	int64_t n, nrows, nb, ngroups;
	uint8_t pad[32];
} k5_packed_head;

/* Bytes from the start of packed weights with head h to their words (W)
 * and to their scales (DW). */
#define K5_PACKED_W sizeof(k5_packed_head)
KERNELS__INLINE size_t k5_packed_dw(const k5_packed_head *h)
{
	return K5_PACKED_W + (size_t)(h->ngroups * h->nb) * sizeof(__m512i[8]);
}

/* The gemm over rows [g0, g0 + nrows) of 16-row groups, g0 a multiple of
 * 16: from w (row_bytes apart, repacked here a segment at a time) or, with
 * packed, from weights packed once (w is then unused). */
static void k5_q8g_gemm_from(int64_t n, const char *w, size_t row_bytes, const void *packed,
                             int64_t g0, int64_t nrows, const void *xq, size_t xq_stride,
                             int64_t ncols, float *y, size_t y_stride)
{
	const int64_t nb = n / KERNELS__QK;
	k5_q8g_pack pk;
#if KERNELS_VNNI /* the only tables that pack */
	const __m512i(*PW)[8] = NULL;
	const uint16_t(*PD)[K5_G] = NULL;
	if (packed) {
		PW = (const __m512i(*)[8])(const void *)((const char *)packed + K5_PACKED_W);
		PD = (const uint16_t(*)[K5_G])(const void *)((const char *)packed +
		                                             k5_packed_dw(packed));
	}
#endif
	int32_t XC[K5_CB][K5_GS];
	float XD[K5_CB][K5_GS];
	for (int64_t cb = 0; cb < ncols; cb += K5_CB) {
		const int nc = ncols - cb < K5_CB ? (int)(ncols - cb) : K5_CB;
		for (int64_t s0 = 0; s0 < nb; s0 += K5_GS) {
			const int sb = nb - s0 < K5_GS ? (int)(nb - s0) : K5_GS;
			for (int c = 0; c < nc; c++) {
				const kernels__block_q8_0 *xb =
				    (const kernels__block_q8_0 *)((const char *)xq +
				                                  (size_t)(cb + c) * xq_stride) +
				    s0;
				for (int b = 0; b < sb; b++) {
					XC[c][b] = KERNELS_VNNI ? k5_q8g_xcorr(xb + b) : 0;
					XD[c][b] = kernels__x86_h2f(xb[b].d);
				}
			}
			for (int64_t g = 0; g < nrows; g += K5_G) {
				const int R = nrows - g < K5_G ? (int)(nrows - g) : K5_G;
				k5_q8g_view v;
#if KERNELS_VNNI
				if (packed) {
					const int64_t at = ((g0 + g) / K5_G) * nb + s0;
					v.W = PW + at;
					v.DW = PD + at;
				} else
#endif
				{
					k5_q8g_repack(w + (size_t)g * row_bytes, row_bytes, R, s0,
					              sb, &pk);
					v.W = (const __m512i(*)[8])pk.W;
					v.DW = (const uint16_t(*)[K5_G])pk.DW;
#if !KERNELS_VNNI
					v.NEG = (const __mmask64(*)[8])pk.NEG;
#endif
				}
				for (int c0 = 0; c0 < nc; c0 += K5_Q8G_TILE) {
					const int NC =
					    nc - c0 < K5_Q8G_TILE ? nc - c0 : K5_Q8G_TILE;
					const kernels__block_q8_0 *x[K5_Q8G_TILE];
					const int32_t *xc[K5_Q8G_TILE];
					const float *xd[K5_Q8G_TILE];
					for (int c = 0; c < NC; c++) {
						x[c] =
						    (const kernels__block_q8_0 *)((const char *)xq +
						                                  (size_t)(cb + c0 +
						                                           c) *
						                                      xq_stride) +
						    s0;
						xc[c] = XC[c0 + c];
						xd[c] = XD[c0 + c];
					}
					k5_q8g_tile(&v, sb, x, xc, xd, NC,
					            y + (size_t)(cb + c0) * y_stride + (size_t)g,
					            y_stride, k5_q8g_mask(R), s0 == 0);
				}
			}
		}
	}
}

static void k5_q8g_gemm(int64_t n, const char *w, size_t row_bytes, int64_t nrows, const void *xq,
                        size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	k5_q8g_gemm_from(n, w, row_bytes, NULL, 0, nrows, xq, xq_stride, ncols, y, y_stride);
}

#if KERNELS_VNNI
static size_t k5_pack_bytes(shoal_dtype wt, int64_t n, int64_t nrows)
{
	if (wt != SHOAL_DTYPE_Q8_0 || n <= 0 || n % KERNELS__QK || nrows <= 0)
		return 0;
	const size_t units = (size_t)((nrows + K5_G - 1) / K5_G) * (size_t)(n / KERNELS__QK);
	return sizeof(k5_packed_head) + units * (sizeof(__m512i) * 8 + sizeof(uint16_t) * K5_G);
}

static void k5_pack(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes, int64_t nrows,
                    void *out)
{
	(void)wt;
	k5_packed_head *h = out;
	memset(h, 0, sizeof *h);
	h->n = n;
	h->nrows = nrows;
	h->nb = n / KERNELS__QK;
	h->ngroups = (nrows + K5_G - 1) / K5_G;
	__m512i(*PW)[8] = (__m512i(*)[8])(void *)((char *)out + K5_PACKED_W);
	uint16_t(*PD)[K5_G] = (uint16_t(*)[K5_G])(void *)((char *)out + k5_packed_dw(h));
	k5_q8g_pack pk;
	for (int64_t g = 0; g < h->ngroups; g++) {
		const int R = nrows - g * K5_G < K5_G ? (int)(nrows - g * K5_G) : K5_G;
		for (int64_t s0 = 0; s0 < h->nb; s0 += K5_GS) {
			const int sb = h->nb - s0 < K5_GS ? (int)(h->nb - s0) : K5_GS;
			k5_q8g_repack((const char *)w + (size_t)(g * K5_G) * row_bytes, row_bytes,
			              R, s0, sb, &pk);
			memcpy(PW + g * h->nb + s0, pk.W, sizeof pk.W[0] * (size_t)sb);
			memcpy(PD + g * h->nb + s0, pk.DW, sizeof pk.DW[0] * (size_t)sb);
		}
	}
}

static void k5_gemm_packed(shoal_dtype wt, int64_t n, const void *packed, int64_t row0,
                           int64_t nrows, const void *xq, size_t xq_stride, int64_t ncols, float *y,
                           size_t y_stride)
{
	(void)wt;
	k5_q8g_gemm_from(n, NULL, 0, packed, row0, nrows, xq, xq_stride, ncols, y, y_stride);
}
#else
#define k5_pack_bytes  kernels__no_pack_bytes
#define k5_pack        kernels__no_pack
#define k5_gemm_packed kernels__no_gemm_packed
#endif

/* The gemv, a row at a time (one prefetched stream, as the other types'
 * gemv), with the group form's bits: per row one float over the blocks in
 * order, acc = fma(isum_b, d_w d_x, acc). Four blocks are dotted in 8 int32
 * lanes each and summed by a tree of horizontal adds into one lane a block;
 * their four float steps then run in order. From DRAM the 16-row group
 * form streamed at about half this rate on a Zen 4 EPYC (1 thread, 1.1B
 * Q8_0 fixture: gemv 11-12 against 20-22 GB/s, decode 10.6 against 19.5
 * tok/s), and so did 4 rows at a time (4 streams), though both are faster
 * in cache. The activations' sides (d_x; VNNI: -128 times the sum of x,
 * else 0) come from the caller's arrays for the whole row. */
KERNELS__INLINE __m256i k5_q8r_dot(const kernels__block_q8_0 *wb, const kernels__block_q8_0 *xb)
{
	__m256i q = k5_q8_0_bytes(wb), x = k5_q8_0_bytes(xb);
#if KERNELS_VNNI
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(),
	                           _mm256_xor_si256(q, _mm256_set1_epi8(-128)), x);
#else
	return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q)),
	                         _mm256_set1_epi16(1));
#endif
}

static void k5_q8r_gemv(int64_t nb, const char *w, size_t row_bytes, int64_t nrows,
                        const kernels__block_q8_0 *xb, const float *dx, const int32_t *cx, float *y)
{
	for (int64_t g = 0; g < nrows; g++) {
		const kernels__block_q8_0 *r =
		    (const kernels__block_q8_0 *)(w + (size_t)g * row_bytes);
		float acc = 0.0f;
		int64_t b = 0;
		for (; b + 4 <= nb; b += 4) {
			kernels__prefetch_line((const char *)(r + b) + KERNELS__PF_AHEAD);
			kernels__prefetch_line((const char *)(r + b) + KERNELS__PF_AHEAD + 64);
			kernels__prefetch_line((const char *)(r + b) + KERNELS__PF_AHEAD + 128);
			__m256i s01 = _mm256_hadd_epi32(k5_q8r_dot(r + b, xb + b),
			                                k5_q8r_dot(r + b + 1, xb + b + 1));
			__m256i s23 = _mm256_hadd_epi32(k5_q8r_dot(r + b + 2, xb + b + 2),
			                                k5_q8r_dot(r + b + 3, xb + b + 3));
			__m256i s = _mm256_hadd_epi32(s01, s23);
			__m128i isum = _mm_add_epi32(_mm256_castsi256_si128(s),
			                             _mm256_extracti128_si256(s, 1));
			isum = _mm_add_epi32(isum, _mm_loadu_si128((const __m128i *)(cx + b)));
			__m128i d =
			    _mm_setr_epi16((short)r[b].d, (short)r[b + 1].d, (short)r[b + 2].d,
			                   (short)r[b + 3].d, 0, 0, 0, 0);
			__m128 p = _mm_mul_ps(_mm_cvtph_ps(d), _mm_loadu_ps(dx + b));
			__m128 f = _mm_cvtepi32_ps(isum);
			float fv[4], pv[4];
			_mm_storeu_ps(fv, f);
			_mm_storeu_ps(pv, p);
			acc = fmaf(fv[0], pv[0], acc);
			acc = fmaf(fv[1], pv[1], acc);
			acc = fmaf(fv[2], pv[2], acc);
			acc = fmaf(fv[3], pv[3], acc);
		}
		for (; b < nb; b++) {
			__m256i v = k5_q8r_dot(r + b, xb + b);
			__m128i h = _mm_add_epi32(_mm256_castsi256_si128(v),
			                          _mm256_extracti128_si256(v, 1));
			h = _mm_hadd_epi32(h, h);
			h = _mm_hadd_epi32(h, h);
			int32_t is = _mm_cvtsi128_si32(h) + cx[b];
			float p = kernels__x86_h2f(r[b].d) * dx[b];
			acc = fmaf((float)is, p, acc);
		}
		y[g] = acc;
	}
}

/* Blocks a row of that gemv takes (its activation sides on the stack: 8
 * bytes a block); longer rows take the group form. */
#define K5_Q8R_MAX 4096

/* The table's whole-matrix Q8_0 (ncols 1: the gemv). */
static void k5_q8g_mm(int64_t n, const void *w, size_t row_bytes, int64_t nrows, const void *xq,
                      size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	const int64_t nb = n / KERNELS__QK;
	if (ncols == 1 && nb <= K5_Q8R_MAX) {
		const kernels__block_q8_0 *xb = xq;
		float dx[K5_Q8R_MAX];
		int32_t cx[K5_Q8R_MAX];
		for (int64_t b = 0; b < nb; b++) {
			dx[b] = kernels__x86_h2f(xb[b].d);
			cx[b] = KERNELS_VNNI ? k5_q8g_xcorr(xb + b) : 0;
		}
		k5_q8r_gemv(nb, w, row_bytes, nrows, xb, dx, cx, y);
	} else if (ncols == 1)
		k5_q8g_gemv(n, w, row_bytes, nrows, xq, y);
	else
		k5_q8g_gemm(n, w, row_bytes, nrows, xq, xq_stride, ncols, y, y_stride);
}

/* ---- Q4_K and Q5_K in groups of 16 rows ----------------------------------------------
 * As Q8_0 above, one lane a row. This table's Q4_K and Q5_K accumulate each row in
 * one float, from +0, over its super-blocks in order:
 *     acc = fma(d_w * d_x, (float)ISUM_b, acc)
 *     acc = acc - (dmin_w * d_x) * (float)IMIN_b   (fused)
 * with ISUM_b = sum_j sc_j dot_j and IMIN_b = sum_j m_j (x sum of
 * sub-block j), both exact int32, and each scale product rounded once.
 *   gemm: a group's super-blocks repacked as 8 x 8 words of unsigned
 *     quants (lane r: 4 quants of row r; Q5_K's fifth bits or'ed in from
 *     its qh, transposed the same way), the 6-bit scales as int32 lanes
 *     and the mins as int16 pairs; per sub-block and column 8 vpdpbusd
 *     against broadcast activation words, then one vpmulld by the scales;
 *     the mins by 4 vpdpwssd against the activation's sub-block sums;
 *   gemv: each row's super-block as 8 int32 lanes of ISUM and 8 of IMIN,
 *     folded 16 rows at a time as Q8_0's pairs. */

#define K5_GV4 64 /* gemv: super-blocks per pass over a row */
#define K5_GS4 8  /* gemm: super-blocks per repacked segment */

/* Where the fields of a Q4_K (Q5 0) or Q5_K (Q5 1) block are: d and dmin
 * at 0 and 2, the scales at 4, as both structs have them. */
#define K5_K45_BYTES(Q5) ((Q5) ? sizeof(kernels__block_q5_k) : sizeof(kernels__block_q4_k))
#define K5_KQ_BYTES(KIND)                                                                          \
	((KIND) == 2   ? sizeof(kernels__block_q6_k)                                               \
	 : (KIND) == 3 ? sizeof(kernels__block_q2_k)                                               \
	 : (KIND) == 4 ? sizeof(kernels__block_q3_k)                                               \
	               : K5_K45_BYTES((KIND) == 1))
#define K5_K45_QS(blk, Q5) ((const uint8_t *)(blk) + ((Q5) ? 48 : 16))
#define K5_K45_QH(blk)     ((const uint8_t *)(blk) + 16)
#define K5_K45_D(blk)      (((const uint16_t *)(const void *)(blk))[0])
#define K5_K45_DMIN(blk)   (((const uint16_t *)(const void *)(blk))[1])
_Static_assert(offsetof(kernels__block_q4_k, qs) == 16 && offsetof(kernels__block_q5_k, qh) == 16 &&
                   offsetof(kernels__block_q5_k, qs) == 48 &&
                   offsetof(kernels__block_q5_k, scales) == 4 &&
                   offsetof(kernels__block_q4_k, scales) == 4,
               "K-quant field offsets");

/* Constant vectors of one value per half: the 16-bit lanes a in the low
 * half, b in the high (K5_HALVES16), or the bytes a and b (K5_HALVES8).
 * Written as 8 quadwords so that the compiler folds each into one vector
 * constant; an insert of two broadcasts was rebuilt (movabs, broadcast,
 * vinserti64x4) on every super-block. */
#define K5_REP16(a)         ((long long)(0x0001000100010001ULL * (uint16_t)(a)))
#define K5_REP8(a)          ((long long)(0x0101010101010101ULL * (uint8_t)(a)))
#define K5_HALVES_Q(qa, qb) _mm512_set_epi64(qb, qb, qb, qb, qa, qa, qa, qa)
#define K5_HALVES16(a, b)   K5_HALVES_Q(K5_REP16(a), K5_REP16(b))
#define K5_HALVES8(a, b)    K5_HALVES_Q(K5_REP8(a), K5_REP8(b))

/* Q5_K's fifth bits of sub-block j, from bytes h whose bit j is that bit
 * (qh's layout), to bit 4 of each byte. */
KERNELS__INLINE __m512i k5_q5_bit(__m512i h, int j)
{
	__m512i t = j <= 4 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - j))
	                   : _mm512_srl_epi16(h, _mm_cvtsi32_si128(j - 4));
	return _mm512_and_si512(t, _mm512_set1_epi8(0x10));
}

/* An activation block's 8 sub-block sums as int16 (each <= 32 * 127). */
KERNELS__INLINE __m128i k5_q4g_xsums(const kernels__block_q8_k *xb)
{
	__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
	__m256i s = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
	return _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* A row's super-block at blk against activation block xb (xs: its
 * k5_q4g_xsums): lanes 0-7 exact partial sums of ISUM, 8-11 of IMIN. */
KERNELS__INLINE __m512i k5_q4g_lanes(const char *blk, const int Q5, const kernels__block_q8_k *xb,
                                     __m128i xs)
{
	const uint8_t *qs = K5_K45_QS(blk, Q5);
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const __m512i spread = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
	                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
	uint64_t sc, mn;
	kernels__q4k_unpack((const uint8_t *)blk + 4, &sc, &mn);
	__m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
	__m512i isum = _mm512_setzero_si512();
	/* Q5_K: qh in both halves, bit 2 j tested in the low half (sub-block
	 * 2 j), bit 2 j + 1 in the high, the set ones' quants plus 16 (a mask
	 * test and a masked add: one operation fewer than a shift, and, or) */
	__m512i H = _mm512_setzero_si512();
	if (Q5)
		H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)K5_K45_QH(blk)));
	KERNELS__UNROLL for (int jj = 0; jj < 2; jj++)
	{
		__m512i raw = _mm512_loadu_si512((const void *)(qs + 64 * jj));
		__m512i lo = _mm512_and_si512(raw, m4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
		__m512i q[2] = {_mm512_shuffle_i64x2(lo, hi, 0x44),
		                _mm512_shuffle_i64x2(lo, hi, 0xee)};
		KERNELS__UNROLL for (int h = 0; h < 2; h++)
		{
			int j = 2 * jj + h;
			if (Q5) {
				const __m512i bit = K5_HALVES8(1 << (2 * j), 1 << (2 * j + 1));
				q[h] = _mm512_mask_add_epi8(q[h], _mm512_test_epi8_mask(H, bit),
				                            q[h], _mm512_set1_epi8(16));
			}
			__m512i s = _mm512_permutexvar_epi16(
			    _mm512_add_epi16(spread, _mm512_set1_epi16((short)(2 * j))), sc16);
			__m512i xv = _mm512_loadu_si512((const void *)(xb->qs + 64 * j));
			isum = k5_madd_acc(isum, _mm512_maddubs_epi16(q[h], xv), s);
		}
	}
	__m256i i8 =
	    _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
	__m128i imin = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)), xs);
	return k5_pair_si(i8, _mm256_zextsi128_si256(imin));
}

/* acc after one super-block of every row's lane: dd the rows' (d, dmin)
 * words, xd the activation's scale. */
KERNELS__INLINE __m512 k5_q4g_step(__m512 acc, __m512i isum, __m512i imin, __m512 d, __m512 dm,
                                   float xd)
{
	const __m512 x = _mm512_set1_ps(xd);
	acc = _mm512_fmadd_ps(_mm512_mul_ps(d, x), _mm512_cvtepi32_ps(isum), acc);
	return _mm512_fnmadd_ps(_mm512_mul_ps(dm, x), _mm512_cvtepi32_ps(imin), acc);
}

/* The 16 rows of a group at w + off (rows row_bytes apart; those past R
 * read the zeros at zero), for a repack. */
KERNELS__INLINE void k5_group_rows(const char *w, size_t row_bytes, int R, size_t off,
                                   const char *zero, const char **rows)
{
	for (int r = 0; r < K5_G; r++)
		rows[r] = r < R ? w + (size_t)r * row_bytes + off : zero;
}

/* Prefetch the bb bytes at rows[r] + o + pf of every row (pf: the next
 * group's same block). */
KERNELS__INLINE void k5_prefetch_group(const char *const *rows, size_t o, size_t pf, size_t bb)
{
	for (int r = 0; r < K5_G; r++)
		for (size_t l = 0; l < bb; l += 64)
			kernels__prefetch_line(rows[r] + o + pf + l);
}

/* A group's segment repacked: W[b][j][k] lane r = quants 4k..4k+3 of
 * sub-block j of row r's super-block b (unsigned bytes), SC[b][j] lane r =
 * its scale, MN[b][jj] lane r = (m_2jj, m_2jj+1) as int16, D and DM the
 * rows' d and dmin. */
typedef struct k5_q4g_pack {
	__m512i W[K5_GS4][8][8];
	__m512i SC[K5_GS4][8];
	__m512i MN[K5_GS4][4];
	__m512 D[K5_GS4], DM[K5_GS4];
} k5_q4g_pack;

KERNELS__INLINE void k5_q4g_repack(const char *w, size_t row_bytes, int R, int64_t s0, int sbn,
                                   k5_q4g_pack *pk, const int Q5)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const size_t bb = K5_K45_BYTES(Q5);
	kernels__block_q5_k zero[K5_GS4]; /* the larger of the two */
	const char *rows[K5_G];
	if (R < K5_G)
		memset(zero, 0, bb * (size_t)sbn);
	k5_group_rows(w, row_bytes, R, (size_t)s0 * bb, (const char *)zero, rows);
	const size_t pf = (size_t)K5_G * row_bytes;
	for (int b = 0; b < sbn; b++) {
		const size_t o = (size_t)b * bb;
		if (R == K5_G)
			k5_prefetch_group(rows, o, pf, bb);
		__m512i th[8];
		if (Q5)
			k5_transpose16(rows, o + 16, th);
		KERNELS__UNROLL for (int c = 0; c < 4; c++)
		{
			__m512i t[8];
			k5_transpose16(rows, o + (Q5 ? 48 : 16) + 32 * (size_t)c, t);
			/* low nibbles: sub-block 2c, high: 2c + 1 */
			_Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
			{
				__m512i lo = _mm512_and_si512(t[k], m4);
				__m512i hi = _mm512_and_si512(_mm512_srli_epi16(t[k], 4), m4);
				if (Q5) {
					lo = _mm512_or_si512(lo, k5_q5_bit(th[k], 2 * c));
					hi = _mm512_or_si512(hi, k5_q5_bit(th[k], 2 * c + 1));
				}
				pk->W[b][2 * c][k] = lo;
				pk->W[b][2 * c + 1][k] = hi;
			}
		}
		int32_t sc[8][K5_G], mp[4][K5_G];
		uint16_t d[K5_G], dm[K5_G];
		for (int r = 0; r < K5_G; r++) {
			uint64_t s, mn;
			kernels__q4k_unpack((const uint8_t *)rows[r] + o + 4, &s, &mn);
			for (int j = 0; j < 8; j++)
				sc[j][r] = (int32_t)((s >> (8 * j)) & 0xff);
			for (int j = 0; j < 4; j++)
				mp[j][r] = (int32_t)(((mn >> (16 * j)) & 0xff) |
				                     (((mn >> (16 * j + 8)) & 0xff) << 16));
			d[r] = K5_K45_D(rows[r] + o);
			dm[r] = K5_K45_DMIN(rows[r] + o);
		}
		for (int j = 0; j < 8; j++)
			pk->SC[b][j] = _mm512_loadu_si512((const void *)sc[j]);
		for (int j = 0; j < 4; j++)
			pk->MN[b][j] = _mm512_loadu_si512((const void *)mp[j]);
		pk->D[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
		pk->DM[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dm));
	}
}

/* dot[c] + the exact int32 lanes of K words of unsigned weights w[k]
 * (lane r: 4 bytes of row r) against 4 signed activation bytes xs[c] + 4 k
 * broadcast (vpdpbusd, or maddubs + madd: products of at most 63 x 128
 * never saturate a pair). */
KERNELS__INLINE void k5_udot(const __m512i *w, const int K, const int8_t *const *xs, const int NC,
                             __m512i *dot)
{
	KERNELS__UNROLL for (int k = 0; k < K; k++)
	{
		const __m512i wk = w[k];
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			int32_t word;
			memcpy(&word, xs[c] + 4 * k, 4);
			__m512i xk = _mm512_set1_epi32(word);
#if KERNELS_VNNI
			dot[c] = _mm512_dpbusd_epi32(dot[c], wk, xk);
#else
			dot[c] =
			    _mm512_add_epi32(dot[c], _mm512_madd_epi16(_mm512_maddubs_epi16(wk, xk),
			                                               _mm512_set1_epi16(1)));
#endif
		}
	}
}

/* isum[c] += sc[j] * the dot of sub-block j with column c's super-block
 * b, for nsub sub-blocks of K words each (sub-block j: words K j .. of w,
 * activation bytes 4 K j .. of x[c][b].qs), in the order of j: the
 * sub-block sums of Q4_K/Q5_K (8 of 32) and Q6_K (16 of 16). */
KERNELS__INLINE void k5_kq_isum(const __m512i *w, const __m512i *sc, const int nsub, const int K,
                                const kernels__block_q8_k *const *x, int b, const int NC,
                                __m512i *isum)
{
	for (int j = 0; j < nsub; j++) {
		__m512i dot[KERNELS__TILE];
		const int8_t *xs[KERNELS__TILE];
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			dot[c] = _mm512_setzero_si512();
			xs[c] = x[c][b].qs + 4 * K * j;
		}
		k5_udot(w + K * j, K, xs, NC, dot);
		KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] =
		    _mm512_add_epi32(isum[c], _mm512_mullo_epi32(dot[c], sc[j]));
	}
}

/* NC columns of a group over a repacked segment (as k5_q8g_tile_n); bs[c]:
 * each super-block's 4 words of (sum of sub-block 2jj, of 2jj + 1) int16. */
KERNELS__INLINE void k5_q4g_tile_n(const k5_q4g_pack *pk, int sbn,
                                   const kernels__block_q8_k *const *x, const int32_t *const *bs,
                                   const int NC, float *y, size_t y_stride, __mmask16 m, int first)
{
	__m512 acc[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[c] =
	    first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + (size_t)c * y_stride);
	for (int b = 0; b < sbn; b++) {
		__m512i isum[KERNELS__TILE], imin[KERNELS__TILE];
		KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = imin[c] =
		    _mm512_setzero_si512();
		k5_kq_isum(pk->W[b][0], pk->SC[b], 8, 8, x, b, NC, isum);
		KERNELS__UNROLL for (int jj = 0; jj < 4; jj++)
		{
			const __m512i mn = pk->MN[b][jj];
			KERNELS__UNROLL for (int c = 0; c < NC; c++) imin[c] =
			    k5_madd_acc(imin[c], mn, _mm512_set1_epi32(bs[c][4 * b + jj]));
		}
		KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[c] =
		    k5_q4g_step(acc[c], isum[c], imin[c], pk->D[b], pk->DM[b], x[c][b].d);
	}
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	    _mm512_mask_storeu_ps(y + (size_t)c * y_stride, m, acc[c]);
}

static void k5_q4g_tile(const k5_q4g_pack *pk, int sbn, const kernels__block_q8_k *const *x,
                        const int32_t *const *bs, int NC, float *y, size_t y_stride, __mmask16 m,
                        int first){
#define K5_TILE(C) k5_q4g_tile_n(pk, sbn, x, bs, C, y, y_stride, m, first)
    K5_BY_NC(NC, K5_TILE)
#undef K5_TILE
}

KERNELS__INLINE
    void k5_q4g_gemm(int64_t n, const char *w, size_t row_bytes, int64_t nrows, const void *xq,
                     size_t xq_stride, int64_t ncols, float *y, size_t y_stride, const int Q5)
{
	const int64_t nsb = n / KERNELS__QKK;
	k5_q4g_pack pk;
	int32_t BS[K5_CB][4 * K5_GS4];
	for (int64_t cb = 0; cb < ncols; cb += K5_CB) {
		const int nc = ncols - cb < K5_CB ? (int)(ncols - cb) : K5_CB;
		for (int64_t s0 = 0; s0 < nsb; s0 += K5_GS4) {
			const int sbn = nsb - s0 < K5_GS4 ? (int)(nsb - s0) : K5_GS4;
			for (int c = 0; c < nc; c++) {
				const kernels__block_q8_k *xb =
				    (const kernels__block_q8_k *)((const char *)xq +
				                                  (size_t)(cb + c) * xq_stride) +
				    s0;
				for (int b = 0; b < sbn; b++)
					for (int jj = 0; jj < 4; jj++) {
						const int16_t *s = xb[b].bsums + 4 * jj;
						uint32_t lo = (uint16_t)(int16_t)(s[0] + s[1]);
						uint32_t hi = (uint16_t)(int16_t)(s[2] + s[3]);
						BS[c][4 * b + jj] = (int32_t)(lo | hi << 16);
					}
			}
			for (int64_t g = 0; g < nrows; g += K5_G) {
				const int R = nrows - g < K5_G ? (int)(nrows - g) : K5_G;
				k5_q4g_repack(w + (size_t)g * row_bytes, row_bytes, R, s0, sbn, &pk,
				              Q5);
				for (int c0 = 0; c0 < nc; c0 += KERNELS__TILE) {
					const int NC =
					    nc - c0 < KERNELS__TILE ? nc - c0 : KERNELS__TILE;
					const kernels__block_q8_k *x[KERNELS__TILE];
					const int32_t *bs[KERNELS__TILE];
					for (int c = 0; c < NC; c++) {
						x[c] =
						    (const kernels__block_q8_k *)((const char *)xq +
						                                  (size_t)(cb + c0 +
						                                           c) *
						                                      xq_stride) +
						    s0;
						bs[c] = BS[c0 + c];
					}
					k5_q4g_tile(&pk, sbn, x, bs, NC,
					            y + (size_t)(cb + c0) * y_stride + (size_t)g,
					            y_stride, k5_q8g_mask(R), s0 == 0);
				}
			}
		}
	}
}

/* ---- Q6_K in groups of 16 rows --------------------------------------------------------
 * As Q4_K above. This table's Q6_K accumulates each row in one float, from
 * +0, over its super-blocks in order: acc = fma(d_w d_x, (float)ISUM_b,
 * acc), ISUM_b = sum_j sc_j (dot_j - 32 bsum_j) over its 16 sub-blocks of
 * 16, exact, d_w d_x rounded once.
 *   gemm: the quants repacked as unsigned 6-bit bytes (ql and qh
 *     transposed apart and joined), the scales as int32 lanes and as int16
 *     pairs; per sub-block of 16 and column 4 vpdpbusd and one vpmulld, the
 *     offset by 8 vpdpwssd against the activation's 16-element sums;
 *   gemv: the exact lanes of the old per-row kernel, folded 16 rows at a
 *     time as Q4_K's (k5_kq_gemv). */

/* A row's super-block against xb: lanes 0-7 exact partial sums of ISUM
 * (8-15 zero). */
KERNELS__INLINE __m512i k5_q6g_lanes(const kernels__block_q6_k *wb, const kernels__block_q8_k *xb)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
	const __m512i spread = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1,
	                                        1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	__m512i isum = _mm512_setzero_si512();
	__m256i sc16 = kernels__x86_q6k_scales(wb->scales);
	__m512i sc16z = _mm512_castsi256_si512(sc16);
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		const uint8_t *ql = wb->ql + 64 * ch, *qh = wb->qh + 32 * ch;
		__m512i L = _mm512_loadu_si512((const void *)ql);
		__m256i h = _mm256_loadu_si256((const __m256i *)qh);
		__m512i H = k5_pair_si(h, _mm256_srli_epi16(h, 2));
		__m512i q[2];
		q[0] = _mm512_or_si512(_mm512_and_si512(L, m4),
		                       _mm512_slli_epi16(_mm512_and_si512(H, m3), 4));
		q[1] = _mm512_or_si512(
		    _mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
		    _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(H, 4), m3), 4));
		KERNELS__UNROLL for (int p = 0; p < 2; p++)
		{
			__m512i idx =
			    _mm512_add_epi16(spread, _mm512_set1_epi16((short)(8 * ch + 4 * p)));
			__m512i s = _mm512_permutexvar_epi16(idx, sc16z);
			__m512i xv = _mm512_loadu_si512((const void *)(xb->qs + 128 * ch + 64 * p));
			isum = k5_madd_acc(isum, _mm512_maddubs_epi16(q[p], xv), s);
		}
	}
	__m256i i8 =
	    _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
	return _mm512_zextsi256_si512(_mm256_sub_epi32(i8, kernels__x86_q6k_offset(xb, sc16)));
}

/* ---- Q2_K and Q3_K in groups of 16 rows (gemv) ------------------------------------------
 * As Q4_K and Q6_K: per row one float, from +0, over the super-blocks in
 * order, Q2_K acc = fma(d_w d_x, ISUM, acc), acc = fnma(dmin_w d_x, IMIN,
 * acc) (ISUM = sum_j sc_j dot_j, IMIN = sum_j m_j bsum_j over its 16
 * sub-blocks of 16), Q3_K acc = fma(d_w d_x, ISUM, acc) (ISUM = sum_j sc_j
 * dot_j with the signed quants and scales), all exact int32. The gemv
 * folds each row's lanes 16 rows at a time (k5_kq_gemv); the gemm takes
 * one row and 4 columns at a time in the same order (k5_q2k_ord).
 * The 2-bit layout: bits 2 j of the 32 bytes of chunk ch (64 c .. of qs)
 * hold elements 128 ch + 32 j + l, so the chunk broadcast to both halves
 * and shifted by 2 j in one half and 2 (j + 1) in the other gives 64
 * elements in order, against 64 activation bytes as they lie. */

/* Q2_K: lanes 0-7 exact partial sums of ISUM (maddubs pairs <= 2 * 3 *
 * 127, times sc <= 15), lanes 8-15 of IMIN (madd(bsums, m)). */
KERNELS__INLINE __m512i k5_q2g_lanes(const kernels__block_q2_k *wb, const kernels__block_q8_k *xb)
{
	const __m512i m2 = _mm512_set1_epi8(3);
	const __m512i spread = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1,
	                                        1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m128i sb = _mm_loadu_si128((const __m128i *)wb->scales);
	__m512i sc16 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m4)));
	__m512i isum = _mm512_setzero_si512();
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		__m512i raw =
		    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qs + 32 * ch)));
		KERNELS__UNROLL for (int jj = 0; jj < 2; jj++)
		{
			__m512i q = _mm512_and_si512(
			    _mm512_srlv_epi16(raw, K5_HALVES16(4 * jj, 4 * jj + 2)), m2);
			__m512i idx =
			    _mm512_add_epi16(spread, _mm512_set1_epi16((short)(8 * ch + 4 * jj)));
			__m512i s = _mm512_permutexvar_epi16(idx, sc16);
			__m512i xv =
			    _mm512_loadu_si512((const void *)(xb->qs + 128 * ch + 64 * jj));
			isum = k5_madd_acc(isum, _mm512_maddubs_epi16(q, xv), s);
		}
	}
	__m256i i8 =
	    _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
	__m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
	__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
	return k5_pair_si(i8, _mm256_madd_epi16(bs, m16));
}

/* Q3_K: quants as unsigned u = q + 4 in 0..7 (2 low bits, bit 4 ch + j of
 * hmask[l] on top), dot(u - 4, x) = dot(u, x) - 4 bsum per 16; maddubs
 * pairs <= 2 * 7 * 127, times |sc| <= 32: exact. Lanes 0-7 exact partial
 * sums of ISUM, 8-15 zero. */
KERNELS__INLINE __m512i k5_q3g_lanes(const kernels__block_q3_k *wb, const kernels__block_q8_k *xb)
{
	const __m512i m2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
	const __m512i spread = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1,
	                                        1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	__m256i sc16 = kernels__x86_q3k_scales16(wb->scales);
	__m512i sc16z = _mm512_zextsi256_si512(sc16);
	__m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb->hmask));
	__m512i isum = _mm512_setzero_si512();
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		__m512i raw =
		    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qs + 32 * ch)));
		KERNELS__UNROLL for (int jj = 0; jj < 2; jj++)
		{
			const int j = 2 * jj;
			__m512i q = _mm512_and_si512(
			    _mm512_srlv_epi16(raw, K5_HALVES16(2 * j, 2 * j + 2)), m2);
			const __m512i bit = K5_HALVES8(1 << (4 * ch + j), 1 << (4 * ch + j + 1));
			q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hm, bit), q, four);
			__m512i idx =
			    _mm512_add_epi16(spread, _mm512_set1_epi16((short)(8 * ch + 4 * jj)));
			__m512i s = _mm512_permutexvar_epi16(idx, sc16z);
			__m512i xv =
			    _mm512_loadu_si512((const void *)(xb->qs + 128 * ch + 64 * jj));
			isum = k5_madd_acc(isum, _mm512_maddubs_epi16(q, xv), s);
		}
	}
	__m256i i8 =
	    _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
	__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
	__m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2);
	return _mm512_zextsi256_si512(_mm256_sub_epi32(i8, off));
}

/* The rows' d of a super-block whose d is the block's last word at offset
 * od (Q6_K, Q3_K): the word at od - 2 and d, so the gather stays inside
 * the block (rows idx apart, lanes past m zero). */
KERNELS__INLINE __m512 k5_kq_dlast(const char *blk, size_t od, __m512i idx, __mmask16 m)
{
	__m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx,
	                                         (const void *)(blk + od - 2), 1);
	return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
}

/* Row r of a group (as k5_q8g_row) of a K-quant (KIND 0 Q4_K, 1 Q5_K, 2
 * Q6_K, 3 Q2_K, 4 Q3_K): its sbn super-blocks into the fold (xs: the
 * activation's sub-block sums, Q4_K and Q5_K). */
KERNELS__INLINE void k5_kq_row(__m512i (*B)[K5_GV4], const char *wb, const int KIND,
                               const kernels__block_q8_k *xb, const __m128i *xs, int sbn,
                               const int LVL, const k5_q8g_fold *f, __m512 *acc, const char *g0,
                               __m512i idx, __mmask16 m)
{
	const size_t bb = K5_KQ_BYTES(KIND);
	for (int b = 0; b < sbn; b++) {
		__m512i v = _mm512_setzero_si512();
		if (wb) {
			kernels__prefetch_block(wb + b * bb, bb);
			const void *blk = wb + b * bb;
			if (KIND == 2)
				v = k5_q6g_lanes(blk, xb + b);
			else if (KIND == 3)
				v = k5_q2g_lanes(blk, xb + b);
			else if (KIND == 4)
				v = k5_q3g_lanes(blk, xb + b);
			else
				v = k5_q4g_lanes(blk, KIND == 1, xb + b, xs[b]);
		}
		__m512i isum, imin;
		if (!k5_fold_push(B[0], K5_GV4, b, v, LVL, f, &isum, &imin))
			continue;
		if (KIND == 2 || KIND == 4) {
			const size_t od = KIND == 2 ? offsetof(kernels__block_q6_k, d)
			                            : offsetof(kernels__block_q3_k, d);
			__m512 d = _mm512_mul_ps(k5_kq_dlast(g0 + b * bb, od, idx, m),
			                         _mm512_set1_ps(xb[b].d));
			*acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), *acc);
			continue;
		}
		/* d and dmin, one word each: at 0 (Q4_K, Q5_K), at 80 (Q2_K) */
		const size_t od = KIND == 3 ? offsetof(kernels__block_q2_k, d) : 0;
		__m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx,
		                                         (const void *)(g0 + b * bb + od), 1);
		__m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
		__m512 dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
		*acc = k5_q4g_step(*acc, isum, imin, d, dm, xb[b].d);
	}
}

KERNELS__INLINE void k5_kq_gemv(int64_t n, const char *w, size_t row_bytes, int64_t nrows,
                                const void *xq, float *y, const int KIND)
{
	const size_t bb = K5_KQ_BYTES(KIND);
	const kernels__block_q8_k *xb = xq;
	const int64_t nsb = n / KERNELS__QKK;
	const k5_q8g_fold f = k5_q8g_fold_init();
	const __m512i idx = _mm512_mullo_epi32(
	    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
	    _mm512_set1_epi32((int)row_bytes));
	__m512i B[4][K5_GV4];
	__m128i XS[K5_GV4];
	int64_t prepared = -1;
	for (int64_t g = 0; g < nrows; g += K5_G) {
		const int R = nrows - g < K5_G ? (int)(nrows - g) : K5_G;
		const __mmask16 m = k5_q8g_mask(R);
		__m512 acc = _mm512_setzero_ps();
		for (int64_t s0 = 0; s0 < nsb; s0 += K5_GV4) {
			const int sbn = nsb - s0 < K5_GV4 ? (int)(nsb - s0) : K5_GV4;
			if (prepared != s0) {
				for (int b = 0; b < sbn; b++)
					XS[b] = k5_q4g_xsums(xb + s0 + b);
				prepared = s0;
			}
			const char *g0 = w + (size_t)g * row_bytes + (size_t)s0 * bb;
			for (int r = 0; r < K5_G; r++) {
				const char *wb = r < R ? g0 + (size_t)r * row_bytes : NULL;
				const kernels__block_q8_k *x = xb + s0;
#define K5_ROW(L) k5_kq_row(B, wb, KIND, x, XS, sbn, L, &f, &acc, g0, idx, m)
				K5_BY_LEVEL(r, K5_ROW)
#undef K5_ROW
			}
		}
		_mm512_mask_storeu_ps(y + g, m, acc);
	}
}

/* A group's segment repacked: W[b][c][k] lane r = quants 4k..4k+3 of the
 * 32-element chunk c of row r's super-block b (0..63), SC[b][j] lane r =
 * scale j, SP[b][i] lane r = (scale 2i, scale 2i+1) as int16, D the d's. */
typedef struct k5_q6g_pack {
	__m512i W[K5_GS4][8][8];
	__m512i SC[K5_GS4][16];
	__m512i SP[K5_GS4][8];
	__m512 D[K5_GS4];
} k5_q6g_pack;

static void k5_q6g_repack(const char *w, size_t row_bytes, int R, int64_t s0, int sbn,
                          k5_q6g_pack *pk)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
	const size_t bb = sizeof(kernels__block_q6_k);
	kernels__block_q6_k zero[K5_GS4];
	const char *rows[K5_G];
	if (R < K5_G)
		memset(zero, 0, bb * (size_t)sbn);
	k5_group_rows(w, row_bytes, R, (size_t)s0 * bb, (const char *)zero, rows);
	const size_t pf = (size_t)K5_G * row_bytes;
	for (int b = 0; b < sbn; b++) {
		const size_t o = (size_t)b * bb;
		if (R == K5_G)
			k5_prefetch_group(rows, o, pf, bb);
		KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
		{
			__m512i l0[8], l1[8], th[8];
			k5_transpose16(rows,
			               o + offsetof(kernels__block_q6_k, ql) + 64 * (size_t)ch, l0);
			k5_transpose16(
			    rows, o + offsetof(kernels__block_q6_k, ql) + 64 * (size_t)ch + 32, l1);
			k5_transpose16(rows,
			               o + offsetof(kernels__block_q6_k, qh) + 32 * (size_t)ch, th);
			_Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
			{
				__m512i h = th[k];
				pk->W[b][4 * ch][k] =
				    _mm512_or_si512(_mm512_and_si512(l0[k], m4),
				                    _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
				pk->W[b][4 * ch + 1][k] = _mm512_or_si512(
				    _mm512_and_si512(l1[k], m4),
				    _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), m3),
				                      4));
				pk->W[b][4 * ch + 2][k] = _mm512_or_si512(
				    _mm512_and_si512(_mm512_srli_epi16(l0[k], 4), m4),
				    _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m3),
				                      4));
				pk->W[b][4 * ch + 3][k] = _mm512_or_si512(
				    _mm512_and_si512(_mm512_srli_epi16(l1[k], 4), m4),
				    _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 6), m3),
				                      4));
			}
		}
		int32_t sc[16][K5_G], sp[8][K5_G];
		uint16_t d[K5_G];
		for (int r = 0; r < K5_G; r++) {
			const kernels__block_q6_k *blk =
			    (const kernels__block_q6_k *)(const void *)(rows[r] + o);
			for (int j = 0; j < 16; j++)
				sc[j][r] = blk->scales[j];
			for (int i = 0; i < 8; i++)
				sp[i][r] =
				    (int32_t)((uint32_t)(uint16_t)(int16_t)blk->scales[2 * i] |
				              (uint32_t)(uint16_t)(int16_t)blk->scales[2 * i + 1]
				                  << 16);
			d[r] = blk->d;
		}
		for (int j = 0; j < 16; j++)
			pk->SC[b][j] = _mm512_loadu_si512((const void *)sc[j]);
		for (int i = 0; i < 8; i++)
			pk->SP[b][i] = _mm512_loadu_si512((const void *)sp[i]);
		pk->D[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
	}
}

/* NC columns of a group over a repacked segment (as k5_q8g_tile_n). */
KERNELS__INLINE void k5_q6g_tile_n(const k5_q6g_pack *pk, int sbn,
                                   const kernels__block_q8_k *const *x, const int NC, float *y,
                                   size_t y_stride, __mmask16 m, int first)
{
	__m512 acc[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) acc[c] =
	    first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + (size_t)c * y_stride);
	for (int b = 0; b < sbn; b++) {
		__m512i isum[KERNELS__TILE], ioff[KERNELS__TILE];
		KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = ioff[c] =
		    _mm512_setzero_si512();
		/* sub-block j: words 4 (j % 2) .. of chunk j / 2 */
		k5_kq_isum(pk->W[b][0], pk->SC[b], 16, 4, x, b, NC, isum);
		for (int i = 0; i < 8; i++) {
			const __m512i sp = pk->SP[b][i];
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				int32_t bs;
				memcpy(&bs, x[c][b].bsums + 2 * i, 4);
				ioff[c] = k5_madd_acc(ioff[c], sp, _mm512_set1_epi32(bs));
			}
		}
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			__m512i is = _mm512_sub_epi32(isum[c], _mm512_slli_epi32(ioff[c], 5));
			acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(pk->D[b], _mm512_set1_ps(x[c][b].d)),
			                         _mm512_cvtepi32_ps(is), acc[c]);
		}
	}
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	    _mm512_mask_storeu_ps(y + (size_t)c * y_stride, m, acc[c]);
}

static void k5_q6g_tile(const k5_q6g_pack *pk, int sbn, const kernels__block_q8_k *const *x, int NC,
                        float *y, size_t y_stride, __mmask16 m, int first)
{
#define K5_TILE(C) k5_q6g_tile_n(pk, sbn, x, C, y, y_stride, m, first)
	K5_BY_NC(NC, K5_TILE)
#undef K5_TILE
}

static void k5_q6g_gemm(int64_t n, const char *w, size_t row_bytes, int64_t nrows, const void *xq,
                        size_t xq_stride, int64_t ncols, float *y, size_t y_stride)
{
	const int64_t nsb = n / KERNELS__QKK;
	k5_q6g_pack pk;
	for (int64_t s0 = 0; s0 < nsb; s0 += K5_GS4) {
		const int sbn = nsb - s0 < K5_GS4 ? (int)(nsb - s0) : K5_GS4;
		for (int64_t g = 0; g < nrows; g += K5_G) {
			const int R = nrows - g < K5_G ? (int)(nrows - g) : K5_G;
			k5_q6g_repack(w + (size_t)g * row_bytes, row_bytes, R, s0, sbn, &pk);
			for (int64_t c0 = 0; c0 < ncols; c0 += KERNELS__TILE) {
				const int NC =
				    ncols - c0 < KERNELS__TILE ? (int)(ncols - c0) : KERNELS__TILE;
				const kernels__block_q8_k *x[KERNELS__TILE];
				for (int c = 0; c < NC; c++)
					x[c] = (const kernels__block_q8_k *)((const char *)xq +
					                                     (size_t)(c0 + c) *
					                                         xq_stride) +
					       s0;
				k5_q6g_tile(&pk, sbn, x, NC, y + (size_t)c0 * y_stride + (size_t)g,
				            y_stride, k5_q8g_mask(R), s0 == 0);
			}
		}
	}
}

/* The table's whole-matrix K-quants (ncols 1: the gemv). */
#define K5_KQ_MM(name, KIND)                                                                       \
	static void name(int64_t n, const void *w, size_t row_bytes, int64_t nrows,                \
	                 const void *xq, size_t xq_stride, int64_t ncols, float *y,                \
	                 size_t y_stride)                                                          \
	{                                                                                          \
		if (ncols == 1)                                                                    \
			k5_kq_gemv(n, w, row_bytes, nrows, xq, y, KIND);                           \
		else if (KIND == 2)                                                                \
			k5_q6g_gemm(n, w, row_bytes, nrows, xq, xq_stride, ncols, y, y_stride);    \
		else                                                                               \
			k5_q4g_gemm(n, w, row_bytes, nrows, xq, xq_stride, ncols, y, y_stride,     \
			            KIND);                                                         \
	}
K5_KQ_MM(k5_q4g_mm, 0)
K5_KQ_MM(k5_q5g_mm, 1)
K5_KQ_MM(k5_q6g_mm, 2)

/* Q2_K and Q3_K gemm: tiles of one row and up to 4 columns in the gemv's
 * order (one float per row and column, over the super-blocks in order):
 * kernels_x86.h's int32 lanes for the columns at once (the decoded
 * weights shared), summed to the exact ISUM (and IMIN), then the gemv's
 * float steps one by one, so each element is bitwise the gemv's. */
KERNELS__INLINE int32_t k5_hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

KERNELS__INLINE void k5_q2k_ord_n(int64_t n, const void *w, const void *const *xq, const int NC,
                                  float *out)
{
	const kernels__block_q2_k *wb = w;
	float acc[KERNELS__TILE] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		__m256i isum[KERNELS__TILE], imin[KERNELS__TILE];
		kernels__x86_q2k_lanes(&wb[b], b, xq, NC, isum, imin);
		float dw = kernels__x86_h2f(wb[b].d), dmw = kernels__x86_h2f(wb[b].dmin);
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			float dx = ((const kernels__block_q8_k *)xq[c])[b].d;
			acc[c] = fmaf(dw * dx, (float)k5_hsum_i32(isum[c]), acc[c]);
			acc[c] = fmaf(-(dmw * dx), (float)k5_hsum_i32(imin[c]), acc[c]);
		}
	}
	KERNELS__UNROLL for (int c = 0; c < NC; c++) out[c] = acc[c];
}
KERNELS__TILE_FROM_N(k5_q2k_ord)

KERNELS__INLINE void k5_q3k_ord_n(int64_t n, const void *w, const void *const *xq, const int NC,
                                  float *out)
{
	const kernels__block_q3_k *wb = w;
	float acc[KERNELS__TILE] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		__m256i isum[KERNELS__TILE];
		kernels__x86_q3k_lanes(&wb[b], b, xq, NC, isum);
		float dw = kernels__x86_h2f(wb[b].d);
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			float dx = ((const kernels__block_q8_k *)xq[c])[b].d;
			acc[c] = fmaf(dw * dx, (float)k5_hsum_i32(isum[c]), acc[c]);
		}
	}
	KERNELS__UNROLL for (int c = 0; c < NC; c++) out[c] = acc[c];
}
KERNELS__TILE_FROM_N(k5_q3k_ord)

#define K5_KQ_MM_ORD(name, KIND, TILE)                                                             \
	static void name(int64_t n, const void *w, size_t row_bytes, int64_t nrows,                \
	                 const void *xq, size_t xq_stride, int64_t ncols, float *y,                \
	                 size_t y_stride)                                                          \
	{                                                                                          \
		if (ncols == 1)                                                                    \
			k5_kq_gemv(n, w, row_bytes, nrows, xq, y, KIND);                           \
		else                                                                               \
			kernels__run_gemm(TILE, n, w, row_bytes, nrows, xq, xq_stride, ncols, y,   \
			                  y_stride);                                               \
	}
K5_KQ_MM_ORD(k5_q2g_mm, 3, k5_q2k_ord)
K5_KQ_MM_ORD(k5_q3g_mm, 4, k5_q3k_ord)

/* ---- IQ4_XS -------------------------------------------------------------------------------
 * 512-bit steps (k5_iq4xs_lanes: 16 exact int32 lanes a super-block),
 * scaled and accumulated as Q6_K's per-row kernel was (one accumulator,
 * hsum16). */

/* A super-block's exact int32 lanes in 512-bit steps: 64 bytes of qs are
 * sub-blocks 4 k .. 4 k + 3, one per 128-bit lane (low nibbles elements
 * 0-15, high 16-31), looked up by one byte shuffle each; the activations
 * gathered to match by one two-source qword permute per 64 bytes; each
 * lane's sub-block scale (ls - 32 in both words) by one dword permute;
 * |v| against x negated where v < 0 (pairs <= 2 * 127 * 127), madd with
 * the scales (vpdpwssd with VNNI, the same sums). */
KERNELS__INLINE __m512i k5_iq4xs_lanes(const kernels__block_iq4_xs *w,
                                       const kernels__block_q8_k *xb)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f);
	const __m512i t =
	    _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kernels__iq4_values));
	const __m512i ilo = _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0);
	const __m512i ihi = _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2);
	__m256i ls = kernels__x86_iq4xs_scales(w);
	const __m512i ls5 = _mm512_castsi256_si512(ls);
	__m512i isum = _mm512_setzero_si512();
	KERNELS__UNROLL for (int k = 0; k < 2; k++)
	{
		__m512i raw = _mm512_loadu_si512((const void *)(w->qs + 64 * k));
		__m512i q[2] = {
		    _mm512_shuffle_epi8(t, _mm512_and_si512(raw, m4)),
		    _mm512_shuffle_epi8(t, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4))};
		__m512i x0 = _mm512_loadu_si512((const void *)(xb->qs + 128 * k));
		__m512i x1 = _mm512_loadu_si512((const void *)(xb->qs + 128 * k + 64));
		__m512i xs[2] = {_mm512_permutex2var_epi64(x0, ilo, x1),
		                 _mm512_permutex2var_epi64(x0, ihi, x1)};
		const int j = 4 * k;
		__m512i s = _mm512_permutexvar_epi32(
		    _mm512_set_epi32(j + 3, j + 3, j + 3, j + 3, j + 2, j + 2, j + 2, j + 2, j + 1,
		                     j + 1, j + 1, j + 1, j, j, j, j),
		    ls5);
		KERNELS__UNROLL for (int h = 0; h < 2; h++)
		{
			__m512i sx = _mm512_mask_sub_epi8(xs[h], _mm512_movepi8_mask(q[h]),
			                                  _mm512_setzero_si512(), xs[h]);
			isum =
			    k5_madd_acc(isum, _mm512_maddubs_epi16(_mm512_abs_epi8(q[h]), sx), s);
		}
	}
	return isum;
}

/* IQ4_XS tiles: per super-block acc = fma(d_w d_x, float(lanes), acc). */
KERNELS__INLINE void k5_tile_iq4_xs_block(const kernels__block_iq4_xs *wb, int64_t b,
                                          const void *const *xq, const int NC, __m512 *acc)
{
	float dw = kernels__x86_h2f(wb[b].d);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * xb->d),
		                         _mm512_cvtepi32_ps(k5_iq4xs_lanes(&wb[b], xb)), acc[c]);
	}
}
KERNELS__SUPER_TILE(k5_tile_iq4_xs, kernels__block_iq4_xs)

/* ---- attention (kernels.h's order; products and sums, never fused) -------------------------
 * Scores: a zmm holds two query heads' 8 lanes (the p_j of kernels.h) side
 * by side, the K row's 8 floats broadcast to both halves; a tile is 4 heads
 * x 4 positions (8 accumulators), reduced together by three rounds of
 * shuffles and adds that keep kernels.h's pairing ((p0 + p4) + (p2 + p6)) +
 * ((p1 + p5) + (p3 + p7)), leaving one zmm of 16 scores, a head's 4
 * positions per 128-bit lane. Values: 16 elements of o per zmm, 4 heads x
 * up to 64 elements in registers over all positions; a masked load for a
 * head size that is not a multiple of 16. Edges (heads past a multiple of 4,
 * positions past a multiple of 4) go through the 256-bit loops of
 * kernels_x86.h, which give the same bits. */

/* Two heads' rows of q, 8 floats each, interleaved per chunk of 8:
 * qp[c] = (q_a[8 c .. 8 c + 7], q_b[8 c .. 8 c + 7]). */
KERNELS__INLINE void k5_attn_pack2(const float *qa, const float *qb, int h8, __m512 *qp)
{
	for (int i = 0, c = 0; i < h8; i += 8, c++)
		qp[c] = _mm512_castpd_ps(_mm512_insertf64x4(
		    _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(qa + i))),
		    _mm256_castps_pd(_mm256_loadu_ps(qb + i)), 1));
}

/* The 8 partial-sum vectors a[2 m + h] (each two groups of 8 lanes, the
 * p_j of kernels.h) reduced as hsum8 does, 16 sums: element 4 k + m from
 * a[2 m + k / 2], group k % 2. */
KERNELS__INLINE __m512 k5_attn_reduce(const __m512 *a)
{
	/* round 1: p_j + p_(j+4) (the two 128-bit lanes of each half) */
	__m512 s[4];
	KERNELS__UNROLL for (int m = 0; m < 4; m++)
	{
		__m512 x = _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
		__m512 y = _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1));
		s[m] = _mm512_add_ps(x, y);
	}
	/* round 2: (s0 + s2), (s1 + s3) */
	__m512 w[2];
	KERNELS__UNROLL for (int m = 0; m < 2; m++)
	{
		__m512 u = _mm512_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0));
		__m512 v = _mm512_shuffle_ps(s[2 * m], s[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2));
		w[m] = _mm512_add_ps(u, v);
	}
	/* round 3: the two halves */
	__m512 e = _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0));
	__m512 o = _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1));
	return _mm512_add_ps(e, o);
}

/* The 16 scores of heads q0 .. q0 + 3 at positions t .. t + 3, reduced. */
KERNELS__INLINE __m512 k5_attn_tile(const __m512 *qp0, const __m512 *qp1, const void *kt,
                                    size_t k_ld, int h8, int f16)
{
	__m512 a[8]; /* a[2 j + hp]: position t + j, head pair hp */
	KERNELS__UNROLL for (int j = 0; j < 8; j++) a[j] = _mm512_setzero_ps();
	for (int i = 0, c = 0; i < h8; i += 8, c++) {
		KERNELS__UNROLL for (int j = 0; j < 4; j++)
		{
			__m512 kv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(
			    kernels__x86_kv8(kt, (size_t)j * k_ld + (size_t)i, f16))));
			a[2 * j] = _mm512_add_ps(a[2 * j], _mm512_mul_ps(qp0[c], kv));
			a[2 * j + 1] = _mm512_add_ps(a[2 * j + 1], _mm512_mul_ps(qp1[c], kv));
		}
	}
	/* element 4 k + m is head k at position t + m */
	return k5_attn_reduce(a);
}

/* The 16 scores of heads q0, q0 + 1 (qp from k5_attn_pack2) at positions
 * t .. t + 7: k5_attn_tile's sums and reduction with the position pairs
 * (2 m, 2 m + 1) where it has head pairs, so every score gets the same
 * operations; lanes 0-7 head q0, 8-15 head q0 + 1, by position. */
KERNELS__INLINE __m512 k5_attn_tile2(const __m512 *qp, const void *kt, size_t k_ld, int h8, int f16)
{
	__m512 a[8]; /* a[j]: position t + j, both heads */
	KERNELS__UNROLL for (int j = 0; j < 8; j++) a[j] = _mm512_setzero_ps();
	for (int i = 0, c = 0; i < h8; i += 8, c++) {
		_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
		{
			__m512 kv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(
			    kernels__x86_kv8(kt, (size_t)j * k_ld + (size_t)i, f16))));
			a[j] = _mm512_add_ps(a[j], _mm512_mul_ps(qp[c], kv));
		}
	}
	/* element 4 (2 (j & 1) + h) + j / 2 is head h at position t + j */
	const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
	return _mm512_permutexvar_ps(idx, k5_attn_reduce(a));
}

/* Heads q0, q0 + 1 over positions 0 .. n8 - 1 (a multiple of 8). */
KERNELS__INLINE void k5_attn_scores2(const float *qg, int hd, const void *k, size_t k_ld, int n8,
                                     float scale, float *s, size_t s_ld, int f16)
{
	const int h8 = hd & ~7;
	__m512 qp[64];
	const __m512 vscale = _mm512_set1_ps(scale);
	k5_attn_pack2(qg, qg + hd, h8, qp);
	for (int t = 0; t < n8; t += 8) {
		const void *kt = kernels__kv_at(k, (size_t)t * k_ld, f16);
		_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
		    kernels__x86_prefetch_kv(kt, (KERNELS__X86_ATTN_AHEAD + j) * k_ld, hd, f16);
		__m512 r = k5_attn_tile2(qp, kt, k_ld, h8, f16);
		__m512 tv = _mm512_setzero_ps();
		if (h8 < hd) {
			float tail[16];
			for (int h = 0; h < 2; h++)
				for (int j = 0; j < 8; j++)
					tail[8 * h + j] = kernels__x86_dot_tail(
					    qg + (size_t)h * hd,
					    kernels__kv_at(kt, (size_t)j * k_ld, f16), h8, hd, f16);
			tv = _mm512_loadu_ps(tail);
		}
		r = _mm512_mul_ps(_mm512_add_ps(r, tv), vscale);
		float *st = s + (size_t)t;
		_mm256_storeu_ps(st, _mm512_castps512_ps256(r));
		_mm256_storeu_ps(st + s_ld,
		                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1)));
	}
}

KERNELS__INLINE void k5_scores_kv(const float *q, int ng, int hd, const void *k, size_t k_ld, int n,
                                  float scale, float *s, size_t s_ld, int f16)
{
	const int h8 = hd & ~7, n4 = n & ~3;
	if (h8 == 0 || hd > 512) {
		kernels__x86_scores_edge(q, ng, hd, k, k_ld, n, scale, s, s_ld, f16);
		return;
	}
	/* up to 4 tiles of 4 heads per pass over the positions, so each
	 * position's keys are read from memory once for all of them */
	__m512 qp[4][2][64];
	const __m512 vscale = _mm512_set1_ps(scale);
	int g = 0;
	while (g + 4 <= ng) {
		const int nt = (ng - g) / 4 < 4 ? (ng - g) / 4 : 4;
		for (int ti = 0; ti < nt; ti++) {
			const float *qg = q + (size_t)(g + 4 * ti) * hd;
			k5_attn_pack2(qg, qg + hd, h8, qp[ti][0]);
			k5_attn_pack2(qg + 2 * (size_t)hd, qg + 3 * (size_t)hd, h8, qp[ti][1]);
		}
		for (int t = 0; t < n4; t += 4) {
			const void *kt = kernels__kv_at(k, (size_t)t * k_ld, f16);
			KERNELS__UNROLL for (int j = 0; j < 4; j++) kernels__x86_prefetch_kv(
			    kt, (KERNELS__X86_ATTN_AHEAD + j) * k_ld, hd, f16);
			for (int ti = 0; ti < nt; ti++) {
				const float *qg = q + (size_t)(g + 4 * ti) * hd;
				__m512 r = k5_attn_tile(qp[ti][0], qp[ti][1], kt, k_ld, h8, f16);
				/* + the tail (0.0f without one: the scalar sum adds it too) */
				__m512 tv = _mm512_setzero_ps();
				if (h8 < hd) {
					float tail[16];
					for (int kk = 0; kk < 4; kk++)
						for (int m = 0; m < 4; m++)
							tail[4 * kk + m] = kernels__x86_dot_tail(
							    qg + (size_t)kk * hd,
							    kernels__kv_at(kt, (size_t)m * k_ld,
							                   f16),
							    h8, hd, f16);
					tv = _mm512_loadu_ps(tail);
				}
				r = _mm512_mul_ps(_mm512_add_ps(r, tv), vscale);
				float *st = s + (size_t)(g + 4 * ti) * s_ld + (size_t)t;
				_mm_storeu_ps(st, _mm512_castps512_ps128(r));
				_mm_storeu_ps(st + s_ld, _mm512_extractf32x4_ps(r, 1));
				_mm_storeu_ps(st + 2 * s_ld, _mm512_extractf32x4_ps(r, 2));
				_mm_storeu_ps(st + 3 * s_ld, _mm512_extractf32x4_ps(r, 3));
			}
		}
		if (n4 < n)
			kernels__x86_scores_edge(q + (size_t)g * hd, 4 * nt, hd,
			                         kernels__kv_at(k, (size_t)n4 * k_ld, f16), k_ld,
			                         n - n4, scale, s + (size_t)g * s_ld + (size_t)n4,
			                         s_ld, f16);
		g += 4 * nt;
	}
	if (g + 2 <= ng) {
		const int n8 = n & ~7;
		const float *qg = q + (size_t)g * hd;
		k5_attn_scores2(qg, hd, k, k_ld, n8, scale, s + (size_t)g * s_ld, s_ld, f16);
		if (n8 < n)
			kernels__x86_scores_edge(
			    qg, 2, hd, kernels__kv_at(k, (size_t)n8 * k_ld, f16), k_ld, n - n8,
			    scale, s + (size_t)g * s_ld + (size_t)n8, s_ld, f16);
		g += 2;
	}
	if (g < ng)
		kernels__x86_scores_edge(q + (size_t)g * hd, ng - g, hd, k, k_ld, n, scale,
		                         s + (size_t)g * s_ld, s_ld, f16);
}

/* o[g0 .. g0 + G)[d0 .. d0 + 16 W), the last chunk masked by mlast. */
KERNELS__INLINE void k5_values_tile(const float *p, size_t p_ld, int g0, const int G, int hd,
                                    int d0, const int W, __mmask16 mlast, const void *v,
                                    size_t v_ld, int n, float *o, int f16, int acc)
{
	__m512 a[4][4];
	KERNELS__UNROLL for (int g = 0; g < G; g++) KERNELS__UNROLL for (int w = 0; w < W; w++)
	{
		const float *og = o + (size_t)(g0 + g) * hd + d0 + 16 * w;
		a[g][w] = !acc         ? _mm512_setzero_ps()
		          : w == W - 1 ? _mm512_maskz_loadu_ps(mlast, og)
		                       : _mm512_loadu_ps(og);
	}
	const float *pg = p + (size_t)g0 * p_ld;
	for (int t = 0; t < n; t++) {
		const void *vt = kernels__kv_at(v, (size_t)t * v_ld + (size_t)d0, f16);
		kernels__prefetch_line(kernels__kv_at(vt, KERNELS__X86_ATTN_AHEAD * v_ld, f16));
		__m512 vv[4];
		KERNELS__UNROLL for (int w = 0; w < W; w++)
		{
			const void *at = kernels__kv_at(vt, (size_t)(16 * w), f16);
			if (f16)
				vv[w] = _mm512_cvtph_ps(
				    w == W - 1 ? _mm256_maskz_loadu_epi16(mlast, at)
				               : _mm256_loadu_si256((const __m256i *)at));
			else if (w == W - 1)
				vv[w] = _mm512_maskz_loadu_ps(mlast, at);
			else
				vv[w] = _mm512_loadu_ps(at);
			if (w > 0 && !(f16 && (w & 1)))
				kernels__prefetch_line(kernels__kv_at(
				    vt, KERNELS__X86_ATTN_AHEAD * v_ld + (size_t)(16 * w), f16));
		}
		KERNELS__UNROLL for (int g = 0; g < G; g++)
		{
			__m512 pb = _mm512_set1_ps(pg[(size_t)g * p_ld + (size_t)t]);
			KERNELS__UNROLL for (int w = 0; w < W; w++) a[g][w] =
			    _mm512_add_ps(a[g][w], _mm512_mul_ps(pb, vv[w]));
		}
	}
	KERNELS__UNROLL for (int g = 0; g < G; g++) KERNELS__UNROLL for (int w = 0; w < W; w++)
	{
		float *og = o + (size_t)(g0 + g) * hd + d0 + 16 * w;
		if (w == W - 1)
			_mm512_mask_storeu_ps(og, mlast, a[g][w]);
		else
			_mm512_storeu_ps(og, a[g][w]);
	}
}

KERNELS__INLINE void k5_values_kv(const float *p, size_t p_ld, int ng, int hd, const void *v,
                                  size_t v_ld, int n, float *o, int f16, int acc)
{
	for (int d = 0; d < hd; d += 64) {
		int left = hd - d, W = left >= 64 ? 4 : (left + 15) / 16;
		int last = left >= 64 ? 16 : left - 16 * (W - 1);
		__mmask16 m = (__mmask16)((1u << last) - 1u);
		for (int g = 0; g < ng; g += 4) {
			int G = ng - g >= 4 ? 4 : ng - g;
#define K5_VT(GG, WW)                                                                              \
	case 4 * (GG) + (WW):                                                                      \
		k5_values_tile(p, p_ld, g, GG, hd, d, WW, m, v, v_ld, n, o, f16, acc);             \
		break
			switch (4 * G + W) {
				K5_VT(1, 1);
				K5_VT(1, 2);
				K5_VT(1, 3);
				K5_VT(1, 4);
				K5_VT(2, 1);
				K5_VT(2, 2);
				K5_VT(2, 3);
				K5_VT(2, 4);
				K5_VT(3, 1);
				K5_VT(3, 2);
				K5_VT(3, 3);
				K5_VT(3, 4);
				K5_VT(4, 1);
				K5_VT(4, 2);
				K5_VT(4, 3);
				K5_VT(4, 4);
			}
#undef K5_VT
		}
	}
}

KERNELS__ATTN_ENTRIES(k5)

#define k5_softmax      kernels__x86_softmax
#define k5_silu_mul     kernels__x86_silu_mul
#define k5_quantize_act kernels__x86_quantize_act

/* ---- the IQ grid types ---------------------------------------------------------------------
 * kernels_x86.h's 256-bit lanes per super-block, acc = fma(D, isum) in the low
 * 8 lanes of a zmm (as IQ4_XS's). */
KERNELS__X86_IQ_TILES(k5)

/* ---- the table ---------------------------------------------------------------------- */

#if KERNELS_VNNI
#define K5_TABLE kernels__avx512vnni
#define K5_ISA   "avx512"
#else
#define K5_TABLE kernels__avx512
#define K5_ISA   "avx512bw"
#endif

KERNELS__TABLE(K5_TABLE, K5_ISA, k5, k5,
               .tile = {[KERNELS__W_F32] = k5_tile_f32,
                        [KERNELS__W_F16] = k5_tile_f16,
                        [KERNELS__W_BF16] = k5_tile_bf16,
                        [KERNELS__W_IQ4_XS] = k5_tile_iq4_xs,
                        KERNELS__TILES_IQ(k5)},
               .mm = {[KERNELS__W_Q8_0] = k5_q8g_mm,
                      [KERNELS__W_Q4_0] = k5_q4_0_mm,
                      [KERNELS__W_Q5_0] = k5_q5_0_mm,
                      [KERNELS__W_Q5_1] = k5_q5_1_mm,
                      [KERNELS__W_IQ4_NL] = k5_iq4_nl_mm,
                      [KERNELS__W_MXFP4] = k5_mxfp4_mm,
                      [KERNELS__W_Q4_K] = k5_q4g_mm,
                      [KERNELS__W_Q5_K] = k5_q5g_mm,
                      [KERNELS__W_Q2_K] = k5_q2g_mm,
                      [KERNELS__W_Q3_K] = k5_q3g_mm,
                      [KERNELS__W_Q6_K] = k5_q6g_mm},
               .rows = {[KERNELS__W_Q4_0] = k5_q4_0_rows,
                        [KERNELS__W_Q5_0] = k5_q5_0_rows,
                        [KERNELS__W_Q5_1] = k5_q5_1_rows,
                        [KERNELS__W_IQ4_NL] = k5_iq4_nl_rows,
                        [KERNELS__W_MXFP4] = k5_mxfp4_rows});
