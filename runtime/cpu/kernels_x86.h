/*
 * runtime/cpu/kernels_x86.h: the AVX2-level helpers that both x86 tables use
 * (kernels_avx2.c, and kernels_avx512.c for its 256-bit steps): horizontal
 * sum, fp16 scales to float, and the 16 bsums of a Q8_K block against the
 * Q4_K mins and the Q6_K offset.
 *
 * Part: runtime/, room cpu/. Names are kernels__x86_*; everything is
 * always-inline, compiled with the -m flags of the file that includes it
 * (both have AVX2, FMA and F16C).
 */
#ifndef SHOAL_RUNTIME_KERNELS_X86_H
#define SHOAL_RUNTIME_KERNELS_X86_H

#include <immintrin.h>

#include "runtime/cpu/kernels_shell.h"

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

#endif
