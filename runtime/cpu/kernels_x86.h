/*
 * runtime/cpu/kernels_x86.h: the AVX2-level helpers that both x86 tables use
 * (kernels_avx2.c, and kernels_avx512.c for its 256-bit steps): horizontal
 * sum, fp16 scales to float, the 16 bsums of a Q8_K block against the
 * Q4_K mins and the Q6_K offset, the signed bytes of Q5_0 blocks, the
 * exact int32 lanes of one Q4_K, Q5_K, Q3_K,
 * Q2_K or IQ4_XS super-block, and the tile bodies that
 * scale and accumulate those lanes in either table's float vector.
 *
 * Part: runtime/, room cpu/. Names are kernels__x86_* / KERNELS__X86_*;
 * everything is always-inline or a macro, compiled with the -m flags of
 * the file that includes it (both have AVX2, FMA and F16C).
 * Divisions: helpers, 32-element blocks as bytes, K-quant lanes, tile bodies.
 */
#ifndef SHOAL_RUNTIME_KERNELS_X86_H
#define SHOAL_RUNTIME_KERNELS_X86_H

#include <immintrin.h>
#include <math.h>

#include "runtime/cpu/kernels_shell.h"
#include "runtime/cpu/quant.h"

/* Lanes 0-3 + 4-7, then pairs: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
KERNELS__INLINE float kernels__x86_hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

KERNELS__INLINE float kernels__x86_h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* The fp16 values *a and b as floats in lanes 0 and 1 (b = 0: lane 1 is 0). */
KERNELS__INLINE __m128 kernels__x86_h2f_pair(const uint16_t *a, uint16_t b)
{
	return _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(*a), b, 1));
}

/* Q4_K: the mins of the 8 sub-blocks as int32 lanes (mn: byte j = m_j, as
 * kernels__q4k_unpack gives it). */
KERNELS__INLINE __m256i kernels__x86_q4k_mins(uint64_t mn)
{
	return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn));
}

/* Q4_K: lane j = m_j * (bsum_2j + bsum_2j+1) against activation block xb. */
KERNELS__INLINE __m256i kernels__x86_q4k_imin(const kernels__block_q8_k *xb, __m256i mins)
{
	__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
	__m256i pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
	return _mm256_mullo_epi32(pairs, mins);
}

/* Q6_K: the scales of the 16 sub-blocks as int16 lanes. */
KERNELS__INLINE __m256i kernels__x86_q6k_scales(const int8_t *sc)
{
	return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
}

/* Q6_K: 32 * sum of sc_j * bsum_j in int32 lanes (pairs of sub-blocks), what
 * the -32 offset of the quants takes off; sc16 from kernels__x86_q6k_scales. */
KERNELS__INLINE __m256i kernels__x86_q6k_offset(const kernels__block_q8_k *xb, __m256i sc16)
{
	__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
	return _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
}

/* ---- 32-element blocks as 32 signed bytes (element order) -------------------- */

/* Byte i = 0xff where bit i of h is set, else 0. */
KERNELS__INLINE __m256i kernels__x86_bit_bytes(uint32_t h)
{
	const __m256i spread =
	    _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The 32 nibbles of qs[16] (low nibbles, then high), 0..15. */
KERNELS__INLINE __m256i kernels__x86_nibbles(const uint8_t *qs)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs);
	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* Q5_0 quants, 0..31. */
KERNELS__INLINE __m256i kernels__x86_q5_bytes(const uint8_t *qs, const uint8_t *qh)
{
	uint32_t h;
	memcpy(&h, qh, 4);
	__m256i hi = _mm256_and_si256(kernels__x86_bit_bytes(h), _mm256_set1_epi8(0x10));
	return _mm256_or_si256(kernels__x86_nibbles(qs), hi);
}

/* Q5_0: q - 16 in -16..15. */
KERNELS__INLINE __m256i kernels__x86_q5_0_bytes(const kernels__block_q5_0 *b)
{
	return _mm256_sub_epi8(kernels__x86_q5_bytes(b->qs, b->qh), _mm256_set1_epi8(16));
}

/* The weight scales of blocks b and b + 1 (0 when single) in lanes 0 and 1. */
#define KERNELS__X86_H2F_SCALES(wb, b, single)                                                     \
	kernels__x86_h2f_pair(&(wb)[b].d, (single) ? 0 : (wb)[(b) + 1].d)
#define KERNELS__X86_E8M0_SCALES(wb, b, single)                                                    \
	_mm_setr_ps(kernels__e8m0_half((wb)[b].e),                                                 \
	            (single) ? 0.0f : kernels__e8m0_half((wb)[(b) + 1].e), 0.0f, 0.0f)

/* ---- K-quant super-blocks as exact int32 lanes -----------------------------------
 * Each fills isum[c] (and imin[c] for the types with mins) for the NC
 * activation columns, super-block b. maddubs takes the unsigned quants
 * first; bounds are given per type. */

/* Q4_K and Q5_K (qh NULL for Q4_K): sub-block j of 32 is one ymm of quants
 * (0..15, plus 16 times bit j of qh[l] for Q5_K); maddubs(q, x) pairs are
 * <= 2 * 31 * 127 = 7874, madd with sc_j (<= 63) gives lanes <= 63 * 2 *
 * 7874 per sub-block, 8 sub-blocks < 2^23: exact. Mins: the 16 bsums
 * summed in pairs (madd with 1) times m_j give m_j * (bsum_2j + bsum_2j+1)
 * in lane j. */
KERNELS__INLINE void kernels__x86_k45_lanes(const uint8_t *scales, const uint8_t *qs,
                                            const uint8_t *qh, int64_t b, const void *const *xq,
                                            const int NC, __m256i *isum, __m256i *imin)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
	uint64_t sc, mn;
	kernels__q4k_unpack(scales, &sc, &mn);
	/* the 8 scales as int16, in both 128-bit lanes */
	__m256i S =
	    _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
	__m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	KERNELS__UNROLL for (int j = 0; j < 4; j++)
	{
		__m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
		__m256i lo = _mm256_and_si256(raw, m4);
		__m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
		if (qh) { /* bits 2 j and 2 j + 1 of qh[l] to bit 4 */
			__m256i t0 = 2 * j <= 4
			                 ? _mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - 2 * j))
			                 : _mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j - 4));
			__m256i t1 = 2 * j + 1 <= 4
			                 ? _mm256_sll_epi16(hb, _mm_cvtsi32_si128(3 - 2 * j))
			                 : _mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j - 3));
			lo = _mm256_or_si256(lo, _mm256_and_si256(t0, b4));
			hi = _mm256_or_si256(hi, _mm256_and_si256(t1, b4));
		}
		/* int16 lanes of sc_2j and sc_2j+1, by byte shuffles */
		__m256i s0 = _mm256_shuffle_epi8(
		    S, _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j))));
		__m256i s1 = _mm256_shuffle_epi8(
		    S, _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const int8_t *x = ((const kernels__block_q8_k *)xq[c])[b].qs + 64 * j;
			__m256i x0 = _mm256_loadu_si256((const __m256i *)x);
			__m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 32));
			__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0);
			__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1);
			isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p0, p1));
		}
	}
	__m256i mins = kernels__x86_q4k_mins(mn);
	KERNELS__UNROLL for (int c = 0; c < NC; c++) imin[c] =
	    kernels__x86_q4k_imin((const kernels__block_q8_k *)xq[c] + b, mins);
}

KERNELS__INLINE void kernels__x86_q4k_lanes(const kernels__block_q4_k *w, int64_t b,
                                            const void *const *xq, const int NC, __m256i *isum,
                                            __m256i *imin)
{
	kernels__x86_k45_lanes(w->scales, w->qs, NULL, b, xq, NC, isum, imin);
}

KERNELS__INLINE void kernels__x86_q5k_lanes(const kernels__block_q5_k *w, int64_t b,
                                            const void *const *xq, const int NC, __m256i *isum,
                                            __m256i *imin)
{
	kernels__x86_k45_lanes(w->scales, w->qs, w->qh, b, xq, NC, isum, imin);
}

/* 16 scale bytes (as int16 lanes after a widening) reordered so that the
 * low 128-bit lane holds the even ones and the high lane the odd ones
 * (kernels__x86_scale_pair's input). */
KERNELS__INLINE __m128i kernels__x86_even_odd(__m128i v)
{
	return _mm_shuffle_epi8(
	    v, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
}

/* From 16 int16 scales eo (even ones in the low lane, odd in the high, as
 * kernels__x86_even_odd orders them): lanes 0-7 = scale k, lanes 8-15 =
 * scale k + 1 (k even: word k / 2 of each 128-bit lane, one shuffle). */
KERNELS__INLINE __m256i kernels__x86_scale_pair(__m256i eo, int k)
{
	return _mm256_shuffle_epi8(eo, _mm256_set1_epi16((short)(((k + 1) << 8) | k)));
}

/* The 16 Q3_K scales (kernels__q3k_scales) as bytes (scales8) or int16
 * lanes (scales16): the low nibbles of bytes 0-7, then their high nibbles;
 * the top 2 bits of scale 4 k + b at bits 2 k of byte 8 + b (a variable
 * shift per dword). */
KERNELS__INLINE __m128i kernels__x86_q3k_scales8(const uint8_t *s)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m128i a = _mm_loadl_epi64((const __m128i *)s);
	__m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), m4);
	uint32_t h;
	memcpy(&h, s + 8, 4);
	__m128i hi = _mm_srlv_epi32(_mm_set1_epi32((int)h), _mm_setr_epi32(0, 2, 4, 6));
	hi = _mm_slli_epi16(_mm_and_si128(hi, _mm_set1_epi8(3)), 4);
	return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

KERNELS__INLINE __m256i kernels__x86_q3k_scales16(const uint8_t *s)
{
	return _mm256_cvtepi8_epi16(kernels__x86_q3k_scales8(s));
}

/* Q2_K and Q3_K share the 2-bit layout: for chunk c and j < 4, the 32
 * bytes qs[32 c ..] shifted right 2 j hold (low 2 bits of) elements 128 c +
 * 32 j .. + 31, sub-blocks 8 c + 2 j (lanes 0-15) and + 1 (16-31).
 * Q2_K: maddubs pairs <= 2 * 3 * 127, times sc <= 15, 16 parts: < 2^19;
 * mins: madd(bsums, m) gives m_j * bsum_j summed in pairs, exact. */
KERNELS__INLINE void kernels__x86_q2k_lanes(const kernels__block_q2_k *w, int64_t b,
                                            const void *const *xq, const int NC, __m256i *isum,
                                            __m256i *imin)
{
	const __m256i m2 = _mm256_set1_epi8(3);
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m128i sb = _mm_loadu_si128((const __m128i *)w->scales);
	__m256i sc16 = _mm256_cvtepu8_epi16(kernels__x86_even_odd(_mm_and_si128(sb, m4)));
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		__m256i raw = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * ch));
		KERNELS__UNROLL for (int j = 0; j < 4; j++, raw = _mm256_srli_epi16(raw, 2))
		{
			__m256i q = _mm256_and_si256(raw, m2);
			__m256i s = kernels__x86_scale_pair(sc16, 8 * ch + 2 * j);
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 32 * j;
				__m256i xv = _mm256_loadu_si256((const __m256i *)x);
				isum[c] = _mm256_add_epi32(
				    isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s));
			}
		}
	}
	__m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
		imin[c] = _mm256_madd_epi16(bs, m16);
	}
}

/* Q3_K: quants as unsigned u = q + 4 in 0..7 (2 low bits, then bit 4 c + j
 * of hmask[l] on top), dot(u - 4, x) = dot(u, x) - 4 * bsum per 16:
 * maddubs pairs <= 2 * 7 * 127, times |sc| <= 32, 16 parts: < 2^21; the
 * -4 part is madd(bsums, sc) << 2. */
KERNELS__INLINE void kernels__x86_q3k_lanes(const kernels__block_q3_k *w, int64_t b,
                                            const void *const *xq, const int NC, __m256i *isum)
{
	const __m256i m2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
	__m128i s8 = kernels__x86_q3k_scales8(w->scales);
	__m256i sc16 = _mm256_cvtepi8_epi16(s8);
	__m256i eo = _mm256_cvtepi8_epi16(kernels__x86_even_odd(s8));
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	const __m256i hm = _mm256_loadu_si256((const __m256i *)w->hmask);
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		__m256i raw = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * ch));
		KERNELS__UNROLL for (int j = 0; j < 4; j++, raw = _mm256_srli_epi16(raw, 2))
		{
			/* bit 4 ch + j of each hmask byte to bit 2 (a 16-bit
			 * shift right by at most 5 brings bit 2 from its own byte) */
			const int hb = 4 * ch + j;
			__m256i h =
			    hb >= 2 ? _mm256_srli_epi16(hm, hb - 2) : _mm256_slli_epi16(hm, 2 - hb);
			__m256i q =
			    _mm256_or_si256(_mm256_and_si256(raw, m2), _mm256_and_si256(h, four));
			__m256i s = kernels__x86_scale_pair(eo, 8 * ch + 2 * j);
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 32 * j;
				__m256i xv = _mm256_loadu_si256((const __m256i *)x);
				isum[c] = _mm256_add_epi32(
				    isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s));
			}
		}
	}
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
		isum[c] =
		    _mm256_sub_epi32(isum[c], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2));
	}
}

/* An IQ4_XS super-block's 8 sub-block scales (6 bits: 4 low in scales_l,
 * 2 high in scales_h, minus 32), one int32 lane each with the scale in
 * both 16-bit halves (for _madd_epi16 against pair sums). */
KERNELS__INLINE __m256i kernels__x86_iq4xs_scales(const kernels__block_iq4_xs *w)
{
	uint32_t l4;
	memcpy(&l4, w->scales_l, 4);
	__m128i l8 = _mm_cvtsi32_si128((int)l4);
	l8 = _mm_unpacklo_epi8(_mm_and_si128(l8, _mm_set1_epi8(0x0f)),
	                       _mm_and_si128(_mm_srli_epi16(l8, 4), _mm_set1_epi8(0x0f)));
	__m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(w->scales_h),
	                               _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
	hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4);
	__m256i ls =
	    _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(l8), hi), _mm256_set1_epi32(32));
	return _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xffff)),
	                       _mm256_slli_epi32(ls, 16));
}

/* IQ4_XS: the table values (signed, |v| <= 127) by a byte shuffle; the
 * sign trick as for Q8_0 (pairs <= 2 * 127 * 127 = 32258), times ls - 32
 * (|.| <= 32), 8 sub-blocks: < 2^25. The 8 scales are made at once: dword
 * ib holds ls_ib - 32 in both words. The 32 bytes of qs at 32 p are
 * sub-blocks 2 p (low 128 bits) and 2 p + 1 (high): their low nibbles are
 * elements 0-15 of each, the high nibbles 16-31. The weights stay in that
 * order (no cross-lane shuffle); the activations are gathered to match by
 * two 16-byte broadcasts and a blend each (load and ALU work, not the
 * shuffle unit that the table lookups and the scales' permutes use), so
 * each 128-bit half of a product is one sub-block and takes one scale. */
KERNELS__INLINE __m256i kernels__x86_half_pair(const int8_t *lo, const int8_t *hi)
{
	return _mm256_blend_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
	                          _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hi)),
	                          0xf0);
}

/* Pair p of IQ4_XS block w (qs bytes 32 p..): q[0] the values of its low
 * nibbles, q[1] of its high ones (kernels__iq4_values), and s the words
 * of ls_2p - 32 in the low half, ls_2p+1 - 32 in the high (ls:
 * kernels__x86_iq4xs_scales). */
KERNELS__INLINE void kernels__x86_iq4xs_pair(const kernels__block_iq4_xs *w, __m256i ls, int p,
                                             __m256i q[2], __m256i *s)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	const __m256i t =
	    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kernels__iq4_values));
	__m256i raw = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * p));
	q[0] = _mm256_shuffle_epi8(t, _mm256_and_si256(raw, m4));
	q[1] = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
	*s =
	    _mm256_permutevar8x32_epi32(ls, _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1,
	                                                      2 * p + 1, 2 * p + 1, 2 * p + 1));
}

KERNELS__INLINE void kernels__x86_iq4xs_lanes(const kernels__block_iq4_xs *w, int64_t b,
                                              const void *const *xq, const int NC, __m256i *isum)
{
	__m256i ls = kernels__x86_iq4xs_scales(w);
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	KERNELS__UNROLL for (int p = 0; p < 4; p++)
	{
		__m256i q[2], s;
		kernels__x86_iq4xs_pair(w, ls, p, q, &s);
		KERNELS__UNROLL for (int h = 0; h < 2; h++)
		{
			__m256i aq = _mm256_abs_epi8(q[h]);
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 64 * p + 16 * h;
				__m256i xv = kernels__x86_half_pair(x, x + 32);
				__m256i pr = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xv, q[h]));
				isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pr, s));
			}
		}
	}
}

/* The IQ grid types: per sub-block of 32 the grid bytes g and sign bytes s
 * of kernels__iq_sub_decode as vectors. IQ2 and IQ3: _maddubs(g, x signed
 * by s) (g >= 0; pairs <= 2 * 62 * 127 < 2^15); IQ1: q = g + s,
 * _maddubs(|q|, x signed by q) (|q| <= 9). Each half's 8 pair sums times
 * its scale by _madd_epi16 into the int32 lanes: exact, |isum| < 2^26. */
KERNELS__INLINE void kernels__x86_iq_lanes(shoal_dtype t, const void *blk, int64_t b,
                                           const kernels__iq_grids *G, const void *const *xq,
                                           const int NC, __m256i *isum)
{
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
	for (int ib = 0; ib < 8; ib++) {
		kernels__iq_sub o;
		kernels__iq_sub_decode(t, blk, ib, G, &o);
		__m256i g = _mm256_setr_epi64x((long long)o.g[0], (long long)o.g[1],
		                               (long long)o.g[2], (long long)o.g[3]);
		__m256i s = _mm256_setr_epi64x((long long)o.s[0], (long long)o.s[1],
		                               (long long)o.s[2], (long long)o.s[3]);
		__m256i u = g, sx = s;
		if (kernels__iq_is_iq1(t)) {
			sx = _mm256_add_epi8(g, s);
			u = _mm256_abs_epi8(sx);
		}
		__m256i sc = _mm256_set1_epi16((short)o.sc[0]);
		if (kernels__iq_per16(t))
			sc = _mm256_inserti128_si256(sc, _mm_set1_epi16((short)o.sc[1]), 1);
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const int8_t *x = ((const kernels__block_q8_k *)xq[c])[b].qs + 32 * ib;
			__m256i xv = _mm256_loadu_si256((const __m256i *)x);
			__m256i pr = _mm256_maddubs_epi16(u, _mm256_sign_epi8(xv, sx));
			isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pr, sc));
		}
	}
}

/* ---- tile bodies on those lanes, for both tables ---------------------------------
 * Written with the float vector of the shell's templates plus, defined by
 * the including file: KERNELS__V_SET1(f) (all lanes f), KERNELS__V_FNMA(s,
 * a, b) (s - a * b, fused) and KERNELS__X86_LANES_V(i) (8 int32 lanes as a
 * float vector, any lanes above 8 zero). */

/* acc[c] = fma(dw d_x, isum[c], acc[c]) for the NC columns of block b
 * (Q8_K activations): the last step of every tile below but the mins'. */
#define KERNELS__X86_ACC_ISUM(dw)                                                                  \
	KERNELS__UNROLL for (int c = 0; c < NC; c++)                                               \
	{                                                                                          \
		float dx = ((const kernels__block_q8_k *)xq[c])[b].d;                              \
		acc[c] = KERNELS__V_FMA(acc[c], KERNELS__V_SET1((dw)*dx),                          \
		                        KERNELS__X86_LANES_V(isum[c]));                            \
	}

/* The K-quants with mins: acc = fma(d, isum, acc), acc = fnma(dmin, imin,
 * acc), d and dmin times the column's d_x; LANES(w, b, xq, NC, isum, imin). */
#define KERNELS__X86_KQ_MIN_TILE(name, WBLOCK, LANES)                                              \
	KERNELS__INLINE void name##_block(const WBLOCK *wb, int64_t b, const void *const *xq,      \
	                                  const int NC, KERNELS__V *acc)                           \
	{                                                                                          \
		__m256i isum[KERNELS__TILE], imin[KERNELS__TILE];                                  \
		LANES(&wb[b], b, xq, NC, isum, imin);                                              \
		float dw = kernels__x86_h2f(wb[b].d), dmw = kernels__x86_h2f(wb[b].dmin);          \
		KERNELS__UNROLL for (int c = 0; c < NC; c++)                                       \
		{                                                                                  \
			float dx = ((const kernels__block_q8_k *)xq[c])[b].d;                      \
			acc[c] = KERNELS__V_FMA(acc[c], KERNELS__V_SET1(dw * dx),                  \
			                        KERNELS__X86_LANES_V(isum[c]));                    \
			acc[c] = KERNELS__V_FNMA(acc[c], KERNELS__V_SET1(dmw * dx),                \
			                         KERNELS__X86_LANES_V(imin[c]));                   \
		}                                                                                  \
	}                                                                                          \
	KERNELS__SUPER_TILE(name, WBLOCK)

/* The K-quants without mins: acc = fma(d d_x, isum, acc); LANES(w, b, xq,
 * NC, isum). */
#define KERNELS__X86_KQ_TILE(name, WBLOCK, LANES)                                                  \
	KERNELS__INLINE void name##_block(const WBLOCK *wb, int64_t b, const void *const *xq,      \
	                                  const int NC, KERNELS__V *acc)                           \
	{                                                                                          \
		__m256i isum[KERNELS__TILE];                                                       \
		LANES(&wb[b], b, xq, NC, isum);                                                    \
		float dw = kernels__x86_h2f(wb[b].d);                                              \
		KERNELS__X86_ACC_ISUM(dw);                                                         \
	}                                                                                          \
	KERNELS__SUPER_TILE(name, WBLOCK)

/* The IQ grid types (type T): acc = fma(D_w d_x, isum, acc). */
#define KERNELS__X86_IQ_TILE(name, WBLOCK, T)                                                      \
	KERNELS__INLINE void name##_block(const WBLOCK *wb, int64_t b, const kernels__iq_grids *G, \
	                                  const void *const *xq, const int NC, KERNELS__V *acc)    \
	{                                                                                          \
		__m256i isum[KERNELS__TILE];                                                       \
		kernels__x86_iq_lanes(T, &wb[b], b, G, xq, NC, isum);                              \
		float dw = kernels__iq_d(T, &wb[b]);                                               \
		KERNELS__X86_ACC_ISUM(dw);                                                         \
	}                                                                                          \
	KERNELS__IQ_TILE(name, WBLOCK)

/* Every IQ grid type's tile, named p##_tile_<type> (KERNELS__TILES_IQ). */
#define KERNELS__X86_IQ_TILES(p)                                                                   \
	KERNELS__X86_IQ_TILE(p##_tile_iq2_xxs, kernels__block_iq2_xxs, SHOAL_DTYPE_IQ2_XXS)        \
	KERNELS__X86_IQ_TILE(p##_tile_iq2_xs, kernels__block_iq2_xs, SHOAL_DTYPE_IQ2_XS)           \
	KERNELS__X86_IQ_TILE(p##_tile_iq2_s, kernels__block_iq2_s, SHOAL_DTYPE_IQ2_S)              \
	KERNELS__X86_IQ_TILE(p##_tile_iq3_xxs, kernels__block_iq3_xxs, SHOAL_DTYPE_IQ3_XXS)        \
	KERNELS__X86_IQ_TILE(p##_tile_iq3_s, kernels__block_iq3_s, SHOAL_DTYPE_IQ3_S)              \
	KERNELS__X86_IQ_TILE(p##_tile_iq1_s, kernels__block_iq1_s, SHOAL_DTYPE_IQ1_S)              \
	KERNELS__X86_IQ_TILE(p##_tile_iq1_m, kernels__block_iq1_m, SHOAL_DTYPE_IQ1_M)

/* ---- activations to Q8_0 --------------------------------------------------------
 * quant.c's conversion, 8 lanes at a time, with its bits: amax over |x|
 * (NaN lanes as 0, which the scalar's `ax > amax` also skips), d = amax /
 * 127 stored as fp16, q = x / d rounded half away from zero by truncation
 * and the remainder, 0 where |x / d| >= 2^23 or NaN. |q| <= 127 always
 * (|x| <= amax), so packing with saturation loses nothing. Other types go
 * to the shared converter. */

KERNELS__INLINE __m256i kernels__x86_round_away(__m256 v)
{
	const __m256 lim = _mm256_set1_ps(8388608.0f);
	__m256i i = _mm256_cvttps_epi32(v);
	__m256 f = _mm256_sub_ps(v, _mm256_cvtepi32_ps(i));
	__m256i up = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
	__m256i dn = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ));
	i = _mm256_add_epi32(_mm256_sub_epi32(i, up), dn); /* masks are -1 */
	__m256 ok =
	    _mm256_and_ps(_mm256_cmp_ps(v, lim, _CMP_LT_OQ),
	                  _mm256_cmp_ps(v, _mm256_sub_ps(_mm256_setzero_ps(), lim), _CMP_GT_OQ));
	return _mm256_and_si256(i, _mm256_castps_si256(ok));
}

static void kernels__x86_quantize_act(shoal_dtype act, const float *x, void *out, int64_t n)
{
	if (act == SHOAL_DTYPE_F16) { /* F16C rounds to nearest even as quant.c does */
		uint16_t *o = out;
		int64_t i = 0;
		for (; i + 8 <= n; i += 8)
			_mm_storeu_si128(
			    (__m128i *)(o + i),
			    _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
			                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		if (i < n)
			kernels__quantize_act(act, x + i, o + i, n - i);
		return;
	}
	if (act != SHOAL_DTYPE_Q8_0 || n % KERNELS__QK) {
		kernels__quantize_act(act, x, out, n);
		return;
	}
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	kernels__block_q8_0 *b = out;
	for (int64_t i = 0; i < n / KERNELS__QK; i++, x += KERNELS__QK) {
		__m256 v[4], m = _mm256_setzero_ps();
		KERNELS__UNROLL for (int k = 0; k < 4; k++)
		{
			v[k] = _mm256_loadu_ps(x + 8 * k);
			__m256 a = _mm256_and_ps(v[k], absmask);
			m = _mm256_max_ps(m, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));
		}
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		float d = _mm_cvtss_f32(h) / 127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b[i].d = shoal_f32_to_fp16(d);
		__m256 vid = _mm256_set1_ps(id);
		__m256i q[4];
		KERNELS__UNROLL for (int k = 0; k < 4; k++) q[k] =
		    kernels__x86_round_away(_mm256_mul_ps(v[k], vid));
		__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
		                               _mm256_packs_epi32(q[2], q[3]));
		_mm256_storeu_si256((__m256i *)b[i].qs, _mm256_permutevar8x32_epi32(p, order));
	}
}

/* ---- softmax (kernels.h; kernels__exp_neg's steps, 8 lanes) ---------------------- */

KERNELS__INLINE __m256 kernels__x86_exp_neg(__m256 x)
{
	const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(KERNELS__EXP_MIN), _CMP_GE_OQ);
	const __m256 sh = _mm256_set1_ps(KERNELS__EXP_SHIFT);
	__m256 t = _mm256_mul_ps(x, _mm256_set1_ps(KERNELS__EXP_LOG2E));
	__m256 k = _mm256_sub_ps(_mm256_add_ps(t, sh), sh);
	__m256 r =
	    _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(k, _mm256_set1_ps(KERNELS__EXP_LN2_HI))),
	                  _mm256_mul_ps(k, _mm256_set1_ps(KERNELS__EXP_LN2_LO)));
	__m256 p = _mm256_set1_ps(kernels__exp_c[7]);
	for (int i = 6; i >= 0; i--)
		p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kernels__exp_c[i]));
	__m256i e = _mm256_slli_epi32(
	    _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_and_ps(k, ok)), _mm256_set1_epi32(127)), 23);
	return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), ok);
}

static void kernels__x86_softmax(float *s, int n)
{
	__m256 m8 = _mm256_set1_ps(-INFINITY);
	int t = 0;
	for (; t + 8 <= n; t += 8)
		m8 = _mm256_max_ps(_mm256_loadu_ps(s + t), m8); /* NaN lanes keep m8, as s > mx */
	float mx = -INFINITY;
	float lanes[8];
	_mm256_storeu_ps(lanes, m8);
	for (int j = 0; j < 8; j++)
		mx = lanes[j] > mx ? lanes[j] : mx;
	for (int i = t; i < n; i++)
		mx = s[i] > mx ? s[i] : mx;
	const __m256 vm = _mm256_set1_ps(mx);
	__m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
	for (t = 0; t + 8 <= n; t += 8) {
		__m256 e = kernels__x86_exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
		_mm256_storeu_ps(s + t, e);
		lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
		hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
	}
	double tail = 0.0;
	for (int i = t; i < n; i++) {
		s[i] = kernels__exp_neg(s[i] - mx);
		tail += s[i];
	}
	double q[4];
	_mm256_storeu_pd(q, _mm256_add_pd(lo, hi));
	const __m256 inv = _mm256_set1_ps((float)(1.0 / (((q[0] + q[2]) + (q[1] + q[3])) + tail)));
	for (t = 0; t + 8 <= n; t += 8)
		_mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), inv));
	for (int i = t; i < n; i++)
		s[i] *= _mm256_cvtss_f32(inv);
}

/* the AVX2 table has no packed weights (kernels.h) */
#define kernels__x86_pack_bytes  kernels__no_pack_bytes
#define kernels__x86_pack        kernels__no_pack
#define kernels__x86_gemm_packed kernels__no_gemm_packed

/* ---- silu_mul (kernels__silu_mul1's steps, 8 lanes) ------------------------------ */

static void kernels__x86_silu_mul(const float *g, const float *u, size_t n, float *h)
{
	const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 vg = _mm256_loadu_ps(g + i);
		__m256 e = kernels__x86_exp_neg(_mm256_sub_ps(zero, _mm256_and_ps(vg, abs_mask)));
		__m256 num =
		    _mm256_blendv_ps(_mm256_mul_ps(vg, e), vg, _mm256_cmp_ps(vg, zero, _CMP_GE_OQ));
		__m256 s = _mm256_div_ps(num, _mm256_add_ps(one, e));
		_mm256_storeu_ps(h + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		h[i] = kernels__silu_mul1(g[i], u[i]);
}

/* ---- attention (kernels.h's order; products and sums, never fused) -------------
 * Scores: 4 query heads at a time share each 8-float load of a cached K
 * row; each head's 8 lanes are the p_j of kernels.h, reduced by hsum8.
 * Values: 4 heads x 16 elements of o in registers over all positions. */

/* Cached rows are a head's slice of each position's row (k_ld floats
 * apart, often 1 KiB or more), a stride the hardware prefetchers follow
 * badly: the loops prefetch the row this many positions on. */
#define KERNELS__X86_ATTN_AHEAD 16

/* The lines of n cached elements at element i of row p, as
 * kernels__prefetch_line. */
KERNELS__INLINE void kernels__x86_prefetch_kv(const void *p, size_t i, int n, int f16)
{
	for (int o = 0; o < n; o += f16 ? 32 : 16)
		kernels__prefetch_line(kernels__kv_at(p, i + (size_t)o, f16));
}

/* Cached elements i .. i + 7 of row p as floats. */
KERNELS__INLINE __m256 kernels__x86_kv8(const void *p, size_t i, int f16)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)kernels__kv_at(p, i, 1)));
	return _mm256_loadu_ps((const float *)p + i);
}

KERNELS__INLINE float kernels__x86_dot_tail(const float *a, const void *c, int i, int n, int f16)
{
	float tail = 0.0f;
	for (; i < n; i++)
		tail += a[i] * kernels__kv_get(c, (size_t)i, f16);
	return tail;
}

KERNELS__INLINE void kernels__x86_scores_kv(const float *q, int ng, int hd, const void *k,
                                            size_t k_ld, int n, float scale, float *s, size_t s_ld,
                                            int f16)
{
	const int h8 = hd & ~7;
	for (int t = 0; t < n; t++) {
		const void *kt = kernels__kv_at(k, (size_t)t * k_ld, f16);
		kernels__x86_prefetch_kv(kt, KERNELS__X86_ATTN_AHEAD * k_ld, hd, f16);
		int g = 0;
		for (; g + 4 <= ng; g += 4) {
			const float *qg = q + (size_t)g * hd;
			__m256 a[4];
			KERNELS__UNROLL for (int j = 0; j < 4; j++) a[j] = _mm256_setzero_ps();
			for (int i = 0; i < h8; i += 8) {
				__m256 kv = kernels__x86_kv8(kt, (size_t)i, f16);
				KERNELS__UNROLL for (int j = 0; j < 4; j++) a[j] = _mm256_add_ps(
				    a[j],
				    _mm256_mul_ps(_mm256_loadu_ps(qg + (size_t)j * hd + i), kv));
			}
			KERNELS__UNROLL for (int j = 0; j < 4; j++)
			    s[(size_t)(g + j) * s_ld + (size_t)t] =
			        (kernels__x86_hsum8(a[j]) +
			         kernels__x86_dot_tail(qg + (size_t)j * hd, kt, h8, hd, f16)) *
			        scale;
		}
		for (; g < ng; g++) {
			const float *qg = q + (size_t)g * hd;
			__m256 a = _mm256_setzero_ps();
			for (int i = 0; i < h8; i += 8)
				a = _mm256_add_ps(
				    a, _mm256_mul_ps(_mm256_loadu_ps(qg + i),
				                     kernels__x86_kv8(kt, (size_t)i, f16)));
			s[(size_t)g * s_ld + (size_t)t] =
			    (kernels__x86_hsum8(a) + kernels__x86_dot_tail(qg, kt, h8, hd, f16)) *
			    scale;
		}
	}
}

/* o[g][d0 .. d0 + 8 * W) for heads g0 .. g0 + G (G <= 4, W <= 2). */
KERNELS__INLINE void kernels__x86_values_tile(const float *p, size_t p_ld, int g0, const int G,
                                              int hd, int d0, const int W, const void *v,
                                              size_t v_ld, int n, float *o, int f16, int acc)
{
	__m256 a[4][2];
	KERNELS__UNROLL for (int g = 0; g < G; g++) KERNELS__UNROLL for (int w = 0; w < W; w++)
	    a[g][w] =
	        acc ? _mm256_loadu_ps(o + (size_t)(g0 + g) * hd + d0 + 8 * w) : _mm256_setzero_ps();
	for (int t = 0; t < n; t++) {
		const void *vt = kernels__kv_at(v, (size_t)t * v_ld + (size_t)d0, f16);
		kernels__prefetch_line(kernels__kv_at(vt, KERNELS__X86_ATTN_AHEAD * v_ld, f16));
		if (W == 2) /* the window's last element, in case it starts a line */
			kernels__prefetch_line(
			    kernels__kv_at(vt, KERNELS__X86_ATTN_AHEAD * v_ld + 15, f16));
		__m256 vv[2];
		KERNELS__UNROLL for (int w = 0; w < W; w++) vv[w] =
		    kernels__x86_kv8(vt, (size_t)(8 * w), f16);
		KERNELS__UNROLL for (int g = 0; g < G; g++)
		{
			__m256 pb = _mm256_broadcast_ss(p + (size_t)(g0 + g) * p_ld + (size_t)t);
			KERNELS__UNROLL for (int w = 0; w < W; w++) a[g][w] =
			    _mm256_add_ps(a[g][w], _mm256_mul_ps(pb, vv[w]));
		}
	}
	KERNELS__UNROLL for (int g = 0; g < G; g++) KERNELS__UNROLL for (int w = 0; w < W; w++)
	    _mm256_storeu_ps(o + (size_t)(g0 + g) * hd + d0 + 8 * w, a[g][w]);
}

KERNELS__INLINE void kernels__x86_values_kv(const float *p, size_t p_ld, int ng, int hd,
                                            const void *v, size_t v_ld, int n, float *o, int f16,
                                            int acc)
{
	int g = 0;
	for (; g < ng; g += 4) {
		const int G = ng - g >= 4 ? 4 : ng - g;
		int d = 0;
		for (; d + 16 <= hd; d += 16) {
			if (G == 4)
				kernels__x86_values_tile(p, p_ld, g, 4, hd, d, 2, v, v_ld, n, o,
				                         f16, acc);
			else
				for (int j = 0; j < G; j++)
					kernels__x86_values_tile(p, p_ld, g + j, 1, hd, d, 2, v,
					                         v_ld, n, o, f16, acc);
		}
		for (; d + 8 <= hd; d += 8)
			for (int j = 0; j < G; j++)
				kernels__x86_values_tile(p, p_ld, g + j, 1, hd, d, 1, v, v_ld, n, o,
				                         f16, acc);
		for (; d < hd; d++)
			for (int j = 0; j < G; j++) {
				float sum = acc ? o[(size_t)(g + j) * hd + d] : 0.0f;
				for (int t = 0; t < n; t++)
					sum +=
					    p[(size_t)(g + j) * p_ld + (size_t)t] *
					    kernels__kv_get(v, (size_t)t * v_ld + (size_t)d, f16);
				o[(size_t)(g + j) * hd + d] = sum;
			}
	}
}

KERNELS__ATTN_ENTRIES(kernels__x86)

/* The 256-bit scores loop on an F32 or F16 cache (edges of wider tables). */
KERNELS__INLINE void kernels__x86_scores_edge(const float *q, int ng, int hd, const void *k,
                                              size_t k_ld, int n, float scale, float *s,
                                              size_t s_ld, int f16)
{
	if (f16)
		kernels__x86_attn_scores_f16(q, ng, hd, k, k_ld, n, scale, s, s_ld);
	else
		kernels__x86_attn_scores(q, ng, hd, k, k_ld, n, scale, s, s_ld);
}

#endif
