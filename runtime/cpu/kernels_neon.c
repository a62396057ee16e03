/*
 * runtime/cpu/kernels_neon.c: the NEON kernel tables (arm64), compiled twice:
 * KERNELS_DOTPROD=1 (-march=armv8.2-a+dotprod, table "neon": int8 dots with
 * sdot) and KERNELS_DOTPROD=0 (baseline armv8-a, table "neon-base": smull +
 * pairwise adds). Both give the same int32 lanes (each the exact sum of the
 * same 4 consecutive byte products), so the two tables agree bitwise.
 *
 * Part: runtime/, room cpu/. The order of accumulation of each dot product
 * (fixed per ISA, see test_kernels.c) is given below the includes.
 * Divisions: helpers, float types, Q8_0/Q4_0 (and Q5_0, Q5_1, IQ4_NL,
 * MXFP4), Q4_K/Q5_K, Q6_K, Q2_K/Q3_K/IQ4_XS, the IQ grid types, the table.
 */
#include <arm_neon.h>

#include "runtime/cpu/kernels_shell.h"

/* Quants are signed bytes throughout (Q4_0 q - 8, Q4_K 0..15, Q6_K q - 32),
 * as sdot takes them. Order of accumulation:
 *   F32/F16/BF16: 4 accumulators x 4 lanes over 16 elements per step (fused
 *     multiply-add), leftover groups of 4 into the first, ((a0 + a1) + (a2 +
 *     a3)) summed across lanes by vaddvq, plus a scalar tail added last;
 *   Q8_0/Q4_0: block b into accumulator b % 2 as fma(float(int lanes), d_w *
 *     d_x); vaddvq(a0 + a1);
 *   Q4_K: per super-block int32 lanes isum and imin (exact), acc = fma(isum,
 *     d), acc = fms(imin, dmin); Q6_K: acc = fma(isum, d); vaddvq(acc);
 *   Q5_0/IQ4_NL/MXFP4 as Q8_0; Q5_1 as Q8_0 plus fma(sums of x, m_w d_x);
 *   Q5_K/Q2_K as Q4_K; Q3_K/IQ4_XS and the IQ grid types as Q6_K.
 */

#ifndef KERNELS_DOTPROD
#define KERNELS_DOTPROD 0
#endif

/* ---- helpers ---------------------------------------------------------------- */

/* acc + the sums of each 4 consecutive products of a and b. Products are at
 * most 128 * 127 = 16256, so pair sums (<= 32512) fit int16 in the baseline
 * path (activations are in [-127, 127], never -128). */
KERNELS__INLINE int32x4_t kn_dot(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if KERNELS_DOTPROD
	return vdotq_s32(acc, a, b);
#else
	int16x8_t p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
	int16x8_t p1 = vmull_high_s8(a, b);
	return vaddq_s32(acc, vpaddlq_s16(vpaddq_s16(p0, p1)));
#endif
}

/* Half to float with the FCVT instruction (exact, as the integer version in
 * kernels_impl.h, but one instruction: this runs twice per block and column). */
KERNELS__INLINE float kn_h2f(uint16_t h)
{
	__fp16 f;
	memcpy(&f, &h, sizeof f);
	return (float)f;
}

/* ---- float types -------------------------------------------------------------
 * The vector of the shell's templates; KERNELS__FLOAT_TILE's LOAD: 4 floats
 * of row p at element i. */

#define KERNELS__V              float32x4_t
#define KERNELS__V_LANES        4
#define KERNELS__V_ZERO()       vdupq_n_f32(0.0f)
#define KERNELS__V_ADD(a, b)    vaddq_f32(a, b)
#define KERNELS__V_FMA(s, a, b) vfmaq_f32(s, a, b)
#define KERNELS__V_HSUM(v)      vaddvq_f32(v)
#define KERNELS__H2F(h)         kn_h2f(h)

#define KN_LOAD_F32(p, i) vld1q_f32((const float *)(p) + (i))
#define KN_LOAD_F16(p, i) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p) + (i))))
#define KN_LOAD_BF16(p, i)                                                                         \
	vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p) + (i)), 16))

KERNELS__FLOAT_TILE(kn_tile_f32, 4, KN_LOAD_F32, KERNELS__S_F32, 4, 0)
KERNELS__FLOAT_TILE(kn_tile_f16, 4, KN_LOAD_F16, KERNELS__S_F16, 2, 0)
KERNELS__FLOAT_TILE(kn_tile_bf16, 4, KN_LOAD_BF16, KERNELS__S_BF16, 2, 0)

/* ---- Q8_0 and Q4_0 ------------------------------------------------------------------ */

KERNELS__INLINE void kn_q8_0_bytes(const kernels__block_q8_0 *b, int8x16_t *lo, int8x16_t *hi)
{
	*lo = vld1q_s8(b->qs);
	*hi = vld1q_s8(b->qs + 16);
}

KERNELS__INLINE void kn_q4_0_bytes(const kernels__block_q4_0 *b, int8x16_t *lo, int8x16_t *hi)
{
	uint8x16_t q = vld1q_u8(b->qs);
	int8x16_t eight = vdupq_n_s8(8);
	*lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight);
	*hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
}

#define KN_Q32_TILE(name, WBLOCK, WBYTES, WSCALE)                                                  \
	KERNELS__INLINE void name##_blk(const WBLOCK *wb, int64_t b, const void *const *xq,        \
	                                const int NC, float32x4_t *acc)                            \
	{                                                                                          \
		kernels__prefetch_block(wb + b, sizeof *wb);                                       \
		int8x16_t q0, q1;                                                                  \
		WBYTES(wb + b, &q0, &q1);                                                          \
		float dw = WSCALE(&wb[b]);                                                         \
		KERNELS__UNROLL for (int c = 0; c < NC; c++)                                       \
		{                                                                                  \
			const kernels__block_q8_0 *xb = (const kernels__block_q8_0 *)xq[c] + b;    \
			int32x4_t s = kn_dot(vdupq_n_s32(0), q0, vld1q_s8(xb->qs));                \
			s = kn_dot(s, q1, vld1q_s8(xb->qs + 16));                                  \
			acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(s), dw * kn_h2f(xb->d));        \
		}                                                                                  \
	}                                                                                          \
	KERNELS__INLINE void name##_pair(const WBLOCK *wb, int64_t b, int single,                  \
	                                 const void *const *xq, const int NC, float32x4_t *a0,     \
	                                 float32x4_t *a1)                                          \
	{                                                                                          \
		name##_blk(wb, b, xq, NC, a0);                                                     \
		if (!single)                                                                       \
			name##_blk(wb, b + 1, xq, NC, a1);                                         \
	}                                                                                          \
	KERNELS__PAIR_TILE(name, WBLOCK)

/* The 32 nibbles of qs[16], 0..15: elements 0..15 (lo) and 16..31 (hi). */
KERNELS__INLINE void kn_nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi)
{
	uint8x16_t q = vld1q_u8(qs);
	*lo = vandq_u8(q, vdupq_n_u8(0x0f));
	*hi = vshrq_n_u8(q, 4);
}

/* 0x10 in byte i where bit i of the little-endian word qh[4] is set (i < 32). */
KERNELS__INLINE void kn_q5_high(const uint8_t *qh, uint8x16_t *lo, uint8x16_t *hi)
{
	static const uint8_t idx[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
	                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
	static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
	uint32_t h;
	memcpy(&h, qh, 4);
	uint8x16_t hv = vreinterpretq_u8_u32(vdupq_n_u32(h)), b = vld1q_u8(bit);
	uint8x16_t k = vdupq_n_u8(0x10);
	*lo = vandq_u8(vtstq_u8(vqtbl1q_u8(hv, vld1q_u8(idx)), b), k);
	*hi = vandq_u8(vtstq_u8(vqtbl1q_u8(hv, vld1q_u8(idx + 16)), b), k);
}

/* Q5_0 / Q5_1 quants 0..31. */
KERNELS__INLINE void kn_q5_quants(const uint8_t *qs, const uint8_t *qh, uint8x16_t *lo,
                                  uint8x16_t *hi)
{
	uint8x16_t l, h, bl, bh;
	kn_nibbles(qs, &l, &h);
	kn_q5_high(qh, &bl, &bh);
	*lo = vorrq_u8(l, bl);
	*hi = vorrq_u8(h, bh);
}

KERNELS__INLINE void kn_q5_0_bytes(const kernels__block_q5_0 *b, int8x16_t *lo, int8x16_t *hi)
{
	uint8x16_t l, h;
	kn_q5_quants(b->qs, b->qh, &l, &h);
	int8x16_t k16 = vdupq_n_s8(16);
	*lo = vsubq_s8(vreinterpretq_s8_u8(l), k16);
	*hi = vsubq_s8(vreinterpretq_s8_u8(h), k16);
}

/* A nibble table (kernels__iq4_values, kernels__mxfp4_values) looked up. */
KERNELS__INLINE void kn_table_bytes(const uint8_t *qs, const int8_t *table, int8x16_t *lo,
                                    int8x16_t *hi)
{
	uint8x16_t l, h;
	kn_nibbles(qs, &l, &h);
	int8x16_t t = vld1q_s8(table);
	*lo = vqtbl1q_s8(t, l);
	*hi = vqtbl1q_s8(t, h);
}

KERNELS__INLINE void kn_iq4_nl_bytes(const kernels__block_iq4_nl *b, int8x16_t *lo, int8x16_t *hi)
{
	kn_table_bytes(b->qs, kernels__iq4_values, lo, hi);
}

KERNELS__INLINE void kn_mxfp4_bytes(const kernels__block_mxfp4 *b, int8x16_t *lo, int8x16_t *hi)
{
	kn_table_bytes(b->qs, kernels__mxfp4_values, lo, hi);
}

#define KN_H2F_SCALE(blk)  kn_h2f((blk)->d)
#define KN_E8M0_SCALE(blk) kernels__e8m0_half((blk)->e)

KN_Q32_TILE(kn_tile_q8_0, kernels__block_q8_0, kn_q8_0_bytes, KN_H2F_SCALE)
KN_Q32_TILE(kn_tile_q4_0, kernels__block_q4_0, kn_q4_0_bytes, KN_H2F_SCALE)
KN_Q32_TILE(kn_tile_q5_0, kernels__block_q5_0, kn_q5_0_bytes, KN_H2F_SCALE)
KN_Q32_TILE(kn_tile_iq4_nl, kernels__block_iq4_nl, kn_iq4_nl_bytes, KN_H2F_SCALE)
KN_Q32_TILE(kn_tile_mxfp4, kernels__block_mxfp4, kn_mxfp4_bytes, KN_E8M0_SCALE)

/* Q5_1: x = d q + m, q 0..31: per block acc = fma(dot(q, x), d_w d_x), then
 * acc = fma(sums of 4 x, m_w d_x) (lanes of the ones-dot). */
KERNELS__INLINE void kn_tile_q5_1_blk(const kernels__block_q5_1 *wb, int64_t b,
                                      const void *const *xq, const int NC, float32x4_t *acc)
{
	kernels__prefetch_block(wb + b, sizeof *wb);
	uint8x16_t l, h;
	kn_q5_quants(wb[b].qs, wb[b].qh, &l, &h);
	int8x16_t q0 = vreinterpretq_s8_u8(l), q1 = vreinterpretq_s8_u8(h), one = vdupq_n_s8(1);
	float dw = kn_h2f(wb[b].d), mw = kn_h2f(wb[b].m);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_0 *xb = (const kernels__block_q8_0 *)xq[c] + b;
		int8x16_t x0 = vld1q_s8(xb->qs), x1 = vld1q_s8(xb->qs + 16);
		int32x4_t s = kn_dot(kn_dot(vdupq_n_s32(0), q0, x0), q1, x1);
		int32x4_t sx = kn_dot(kn_dot(vdupq_n_s32(0), one, x0), one, x1);
		float dx = kn_h2f(xb->d);
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(s), dw * dx);
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(sx), mw * dx);
	}
}
KERNELS__INLINE void kn_tile_q5_1_pair(const kernels__block_q5_1 *wb, int64_t b, int single,
                                       const void *const *xq, const int NC, float32x4_t *a0,
                                       float32x4_t *a1)
{
	kn_tile_q5_1_blk(wb, b, xq, NC, a0);
	if (!single)
		kn_tile_q5_1_blk(wb, b + 1, xq, NC, a1);
}
KERNELS__PAIR_TILE(kn_tile_q5_1, kernels__block_q5_1)

/* ---- Q4_K and Q5_K --------------------------------------------------------------------------
 * qh NULL for Q4_K; Q5_K ors in its 5th bits (bit j of qh[l] for element l
 * of sub-block j) above the nibbles. Lanes: a sub-block's dot (<= 8 * 31 *
 * 127 per lane) times sc_j (<= 63), 8 sub-blocks: < 2^24. Mins: the 16
 * bsums pairwise (<= 32 * 127 each) times m_j, widened to int32. */
KERNELS__INLINE void kn_k45_block(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                  uint16_t dh, uint16_t dminh, int64_t b, const void *const *xq,
                                  const int NC, float32x4_t *acc)
{
	const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
	uint64_t sc, mn;
	kernels__q4k_unpack(scales, &sc, &mn);
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	uint8x16_t hb0 = vdupq_n_u8(0), hb1 = vdupq_n_u8(0);
	if (qh) {
		hb0 = vld1q_u8(qh);
		hb1 = vld1q_u8(qh + 16);
	}
	for (int j = 0; j < 4; j++, hb0 = vshrq_n_u8(hb0, 2), hb1 = vshrq_n_u8(hb1, 2)) {
		uint8x16_t r0 = vld1q_u8(qs + 32 * j), r1 = vld1q_u8(qs + 32 * j + 16);
		int8x16_t l0 = vreinterpretq_s8_u8(
		    vorrq_u8(vandq_u8(r0, m4), vshlq_n_u8(vandq_u8(hb0, one), 4)));
		int8x16_t l1 = vreinterpretq_s8_u8(
		    vorrq_u8(vandq_u8(r1, m4), vshlq_n_u8(vandq_u8(hb1, one), 4)));
		int8x16_t h0 = vreinterpretq_s8_u8(
		    vorrq_u8(vshrq_n_u8(r0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb0, 1), one), 4)));
		int8x16_t h1 = vreinterpretq_s8_u8(
		    vorrq_u8(vshrq_n_u8(r1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb1, 1), one), 4)));
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const int8_t *x = ((const kernels__block_q8_k *)xq[c])[b].qs + 64 * j;
			int32x4_t tl = kn_dot(vdupq_n_s32(0), l0, vld1q_s8(x));
			tl = kn_dot(tl, l1, vld1q_s8(x + 16));
			int32x4_t th = kn_dot(vdupq_n_s32(0), h0, vld1q_s8(x + 32));
			th = kn_dot(th, h1, vld1q_s8(x + 48));
			isum[c] = vmlaq_n_s32(isum[c], tl, (int)((sc >> (16 * j)) & 0xff));
			isum[c] = vmlaq_n_s32(isum[c], th, (int)((sc >> (16 * j + 8)) & 0xff));
		}
	}
	int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(mn)));
	float dw = kn_h2f(dh), dmw = kn_h2f(dminh);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		int16x8_t bs = vpaddq_s16(vld1q_s16(xb->bsums), vld1q_s16(xb->bsums + 8));
		int32x4_t imin = vaddq_s32(vmull_s16(vget_low_s16(bs), vget_low_s16(mins)),
		                           vmull_high_s16(bs, mins));
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
		acc[c] = vfmsq_n_f32(acc[c], vcvtq_f32_s32(imin), dmw * xb->d);
	}
}

KERNELS__INLINE void kn_tile_q4_k_block(const kernels__block_q4_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	kn_k45_block(wb[b].scales, wb[b].qs, NULL, wb[b].d, wb[b].dmin, b, xq, NC, acc);
}
KERNELS__SUPER_TILE(kn_tile_q4_k, kernels__block_q4_k)

KERNELS__INLINE void kn_tile_q5_k_block(const kernels__block_q5_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	kn_k45_block(wb[b].scales, wb[b].qs, wb[b].qh, wb[b].d, wb[b].dmin, b, xq, NC, acc);
}
KERNELS__SUPER_TILE(kn_tile_q5_k, kernels__block_q5_k)

/* ---- Q6_K --------------------------------------------------------------------------------
 * Each 16 decoded quants (q - 32, in -32..31) are exactly one sub-block:
 * lanes <= 4 * 32 * 127 * 128 per sub-block, 16 of them: < 2^25. */

KERNELS__INLINE void kn_tile_q6_k_block(const kernels__block_q6_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x03);
	const int8x16_t k32 = vdupq_n_s8(32);
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		const uint8_t *ql = wb[b].ql + 64 * ch, *qh = wb[b].qh + 32 * ch;
		const int8_t *sc = wb[b].scales + 8 * ch;
		KERNELS__UNROLL for (int h = 0; h < 2; h++)
		{ /* l in [16 h, 16 h + 16) */
			uint8x16_t a = vld1q_u8(ql + 16 * h), bq = vld1q_u8(ql + 32 + 16 * h);
			uint8x16_t hh = vld1q_u8(qh + 16 * h);
			int8x16_t q[4];
			q[0] = vreinterpretq_s8_u8(
			    vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hh, m3), 4)));
			q[1] = vreinterpretq_s8_u8(vorrq_u8(
			    vandq_u8(bq, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 2), m3), 4)));
			q[2] = vreinterpretq_s8_u8(vorrq_u8(
			    vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 4), m3), 4)));
			q[3] = vreinterpretq_s8_u8(
			    vorrq_u8(vshrq_n_u8(bq, 4), vshlq_n_u8(vshrq_n_u8(hh, 6), 4)));
			KERNELS__UNROLL for (int p = 0; p < 4; p++) q[p] = vsubq_s8(q[p], k32);
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 16 * h;
				KERNELS__UNROLL for (int p = 0; p < 4; p++)
				{
					int32x4_t t =
					    kn_dot(vdupq_n_s32(0), q[p], vld1q_s8(x + 32 * p));
					isum[c] = vmlaq_n_s32(isum[c], t, sc[2 * p + h]);
				}
			}
		}
	}
	float dw = kn_h2f(wb[b].d);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_q6_k, kernels__block_q6_k)

/* ---- Q2_K, Q3_K, IQ4_XS --------------------------------------------------------------------
 * Quants as signed bytes, exact int32 lanes per super-block (bounds: Q2_K <= 4 * 3 * 127 * 15 per
 * sub-block; Q3_K 4 * 4 * 127 * 32; IQ4_XS 8 * 127 * 127 * 32 per sub-block, 8 of them < 2^25),
 * then acc = fma(isum, d) (and fms(imin, dmin) for the types with mins). */

/* Q2_K and Q3_K: for chunk ch and j < 4, the 16-byte halves of qs[32 ch ..]
 * shifted right 2 j hold sub-blocks 8 ch + 2 j and + 1. */
KERNELS__INLINE void kn_tile_q2_k_block(const kernels__block_q2_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	const uint8x16_t m2 = vdupq_n_u8(3);
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		uint8x16_t r0 = vld1q_u8(wb[b].qs + 32 * ch),
		           r1 = vld1q_u8(wb[b].qs + 32 * ch + 16);
		for (int j = 0; j < 4; j++, r0 = vshrq_n_u8(r0, 2), r1 = vshrq_n_u8(r1, 2)) {
			int8x16_t q0 = vreinterpretq_s8_u8(vandq_u8(r0, m2));
			int8x16_t q1 = vreinterpretq_s8_u8(vandq_u8(r1, m2));
			const uint8_t *sc = wb[b].scales + 8 * ch + 2 * j;
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 32 * j;
				int32x4_t t0 = kn_dot(vdupq_n_s32(0), q0, vld1q_s8(x));
				int32x4_t t1 = kn_dot(vdupq_n_s32(0), q1, vld1q_s8(x + 16));
				isum[c] = vmlaq_n_s32(isum[c], t0, sc[0] & 0xf);
				isum[c] = vmlaq_n_s32(isum[c], t1, sc[1] & 0xf);
			}
		}
	}
	uint8x16_t m8 = vshrq_n_u8(vld1q_u8(wb[b].scales), 4);
	int16x8_t mlo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m8)));
	int16x8_t mhi = vreinterpretq_s16_u16(vmovl_high_u8(m8));
	float dw = kn_h2f(wb[b].d), dmw = kn_h2f(wb[b].dmin);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		int16x8_t b0 = vld1q_s16(xb->bsums), b1 = vld1q_s16(xb->bsums + 8);
		int32x4_t imin = vmull_s16(vget_low_s16(b0), vget_low_s16(mlo));
		imin = vmlal_high_s16(imin, b0, mlo);
		imin = vmlal_s16(imin, vget_low_s16(b1), vget_low_s16(mhi));
		imin = vmlal_high_s16(imin, b1, mhi);
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
		acc[c] = vfmsq_n_f32(acc[c], vcvtq_f32_s32(imin), dmw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_q2_k, kernels__block_q2_k)

/* Q3_K: q - 4 = (2 low bits | hmask bit 4 ch + j << 2) - 4, in -4..3. */
KERNELS__INLINE void kn_tile_q3_k_block(const kernels__block_q3_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	const uint8x16_t m2 = vdupq_n_u8(3), one = vdupq_n_u8(1);
	const int8x16_t k4 = vdupq_n_s8(4);
	int8_t sc[16];
	kernels__q3k_scales(wb[b].scales, sc);
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	uint8x16_t hm0 = vld1q_u8(wb[b].hmask), hm1 = vld1q_u8(wb[b].hmask + 16);
	KERNELS__UNROLL for (int ch = 0; ch < 2; ch++)
	{
		uint8x16_t r0 = vld1q_u8(wb[b].qs + 32 * ch),
		           r1 = vld1q_u8(wb[b].qs + 32 * ch + 16);
		KERNELS__UNROLL for (int j = 0; j < 4; j++)
		{
			int8x16_t q0 =
			    vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(
			                 vandq_u8(r0, m2), vshlq_n_u8(vandq_u8(hm0, one), 2))),
			             k4);
			int8x16_t q1 =
			    vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(
			                 vandq_u8(r1, m2), vshlq_n_u8(vandq_u8(hm1, one), 2))),
			             k4);
			r0 = vshrq_n_u8(r0, 2);
			r1 = vshrq_n_u8(r1, 2);
			hm0 = vshrq_n_u8(hm0, 1);
			hm1 = vshrq_n_u8(hm1, 1);
			const int8_t *s = sc + 8 * ch + 2 * j;
			KERNELS__UNROLL for (int c = 0; c < NC; c++)
			{
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 32 * j;
				int32x4_t t0 = kn_dot(vdupq_n_s32(0), q0, vld1q_s8(x));
				int32x4_t t1 = kn_dot(vdupq_n_s32(0), q1, vld1q_s8(x + 16));
				isum[c] = vmlaq_n_s32(isum[c], t0, s[0]);
				isum[c] = vmlaq_n_s32(isum[c], t1, s[1]);
			}
		}
	}
	float dw = kn_h2f(wb[b].d);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_q3_k, kernels__block_q3_k)

KERNELS__INLINE void kn_tile_iq4_xs_block(const kernels__block_iq4_xs *wb, int64_t b,
                                          const void *const *xq, const int NC, float32x4_t *acc)
{
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	KERNELS__UNROLL for (int ib = 0; ib < 8; ib++)
	{
		int8x16_t lo, hi;
		kn_table_bytes(wb[b].qs + 16 * ib, kernels__iq4_values, &lo, &hi);
		int ls = kernels__iq4xs_scale(&wb[b], ib);
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const int8_t *x = ((const kernels__block_q8_k *)xq[c])[b].qs + 32 * ib;
			int32x4_t t = kn_dot(vdupq_n_s32(0), lo, vld1q_s8(x));
			t = kn_dot(t, hi, vld1q_s8(x + 16));
			isum[c] = vmlaq_n_s32(isum[c], t, ls);
		}
	}
	float dw = kn_h2f(wb[b].d);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_iq4_xs, kernels__block_iq4_xs)

/* ---- the IQ grid types ------------------------------------------------------------------------
 * kernels_iq.h's sub-blocks as signed bytes q (IQ2, IQ3: g * s, |q| <= 62;
 * IQ1: g + s, g 8 times the grid's, |q| <= 9), dots of 4 per half times the half's scale into
 * int32 lanes (exact: |isum| < 2^26), then acc = fma(isum, D_w d_x). */
KERNELS__INLINE void kn_iq_block(shoal_dtype t, const void *blk, int64_t b,
                                 const kernels__iq_grids *G, const void *const *xq, const int NC,
                                 float32x4_t *acc)
{
	int32x4_t isum[KERNELS__TILE];
	KERNELS__UNROLL for (int c = 0; c < NC; c++) isum[c] = vdupq_n_s32(0);
	for (int ib = 0; ib < 8; ib++) {
		kernels__iq_sub o;
		kernels__iq_sub_decode(t, blk, ib, G, &o);
		int8x16_t g0 = vreinterpretq_s8_u64(vld1q_u64(o.g));
		int8x16_t g1 = vreinterpretq_s8_u64(vld1q_u64(o.g + 2));
		int8x16_t s0 = vreinterpretq_s8_u64(vld1q_u64(o.s));
		int8x16_t s1 = vreinterpretq_s8_u64(vld1q_u64(o.s + 2));
		int8x16_t q0, q1;
		if (kernels__iq_is_iq1(t)) {
			q0 = vaddq_s8(g0, s0);
			q1 = vaddq_s8(g1, s1);
		} else {
			q0 = vmulq_s8(g0, s0);
			q1 = vmulq_s8(g1, s1);
		}
		KERNELS__UNROLL for (int c = 0; c < NC; c++)
		{
			const int8_t *x = ((const kernels__block_q8_k *)xq[c])[b].qs + 32 * ib;
			int32x4_t t0 = kn_dot(vdupq_n_s32(0), q0, vld1q_s8(x));
			int32x4_t t1 = kn_dot(vdupq_n_s32(0), q1, vld1q_s8(x + 16));
			isum[c] = vmlaq_n_s32(isum[c], t0, o.sc[0]);
			isum[c] = vmlaq_n_s32(isum[c], t1, o.sc[1]);
		}
	}
	float dw = kernels__iq_d(t, blk);
	KERNELS__UNROLL for (int c = 0; c < NC; c++)
	{
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
	}
}

#define KN_IQ_TILE(sfx, WBLOCK, T)                                                                 \
	KERNELS__INLINE void kn_tile_##sfx##_block(                                                \
	    const WBLOCK *wb, int64_t b, const kernels__iq_grids *G, const void *const *xq,        \
	    const int NC, float32x4_t *acc)                                                        \
	{                                                                                          \
		kn_iq_block(T, &wb[b], b, G, xq, NC, acc);                                         \
	}                                                                                          \
	KERNELS__IQ_TILE(kn_tile_##sfx, WBLOCK)

KN_IQ_TILE(iq2_xxs, kernels__block_iq2_xxs, SHOAL_DTYPE_IQ2_XXS)
KN_IQ_TILE(iq2_xs, kernels__block_iq2_xs, SHOAL_DTYPE_IQ2_XS)
KN_IQ_TILE(iq2_s, kernels__block_iq2_s, SHOAL_DTYPE_IQ2_S)
KN_IQ_TILE(iq3_xxs, kernels__block_iq3_xxs, SHOAL_DTYPE_IQ3_XXS)
KN_IQ_TILE(iq3_s, kernels__block_iq3_s, SHOAL_DTYPE_IQ3_S)
KN_IQ_TILE(iq1_s, kernels__block_iq1_s, SHOAL_DTYPE_IQ1_S)
KN_IQ_TILE(iq1_m, kernels__block_iq1_m, SHOAL_DTYPE_IQ1_M)

#define kn_quantize_act kernels__quantize_act
#define kn_softmax      kernels__softmax  /* no NEON twin yet */
#define kn_silu_mul     kernels__silu_mul /* nor here */
#define kn_pack_bytes   kernels__no_pack_bytes
#define kn_pack         kernels__no_pack
#define kn_gemm_packed  kernels__no_gemm_packed

/* ---- attention (kernels.h's order; products and sums, never fused) -------------
 * Two 4-lane sums per dot (lanes p0-p3 and p4-p7); values 4 heads x 8
 * elements of o in registers over all positions. */

KERNELS__INLINE float kn_attn_reduce(float32x4_t lo, float32x4_t hi, float tail)
{
	float32x4_t s = vaddq_f32(lo, hi);
	return ((vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 2)) +
	        (vgetq_lane_f32(s, 1) + vgetq_lane_f32(s, 3))) +
	       tail;
}

/* Cached elements i .. i + 3 of row p as floats. */
KERNELS__INLINE float32x4_t kn_kv4(const void *p, size_t i, int f16)
{
	if (f16)
		return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + i)));
	return vld1q_f32((const float *)p + i);
}

KERNELS__INLINE void kn_scores_kv(const float *q, int ng, int hd, const void *k, size_t k_ld, int n,
                                  float scale, float *s, size_t s_ld, int f16)
{
	const int h8 = hd & ~7;
	for (int t = 0; t < n; t++) {
		const void *kt = kernels__kv_at(k, (size_t)t * k_ld, f16);
		for (int g = 0; g < ng; g++) {
			const float *qg = q + (size_t)g * hd;
			float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
			int i = 0;
			for (; i < h8; i += 8) {
				lo = vaddq_f32(
				    lo, vmulq_f32(vld1q_f32(qg + i), kn_kv4(kt, (size_t)i, f16)));
				hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(qg + i + 4),
				                             kn_kv4(kt, (size_t)i + 4, f16)));
			}
			float tail = 0.0f;
			for (; i < hd; i++)
				tail += qg[i] * kernels__kv_get(kt, (size_t)i, f16);
			s[(size_t)g * s_ld + (size_t)t] = kn_attn_reduce(lo, hi, tail) * scale;
		}
	}
}

KERNELS__INLINE void kn_values_kv(const float *p, size_t p_ld, int ng, int hd, const void *v,
                                  size_t v_ld, int n, float *o, int f16, int acc)
{
	for (int g = 0; g < ng; g++) {
		const float *pg = p + (size_t)g * p_ld;
		int d = 0;
		for (; d + 8 <= hd; d += 8) {
			float *og = o + (size_t)g * hd + d;
			float32x4_t a0 = acc ? vld1q_f32(og) : vdupq_n_f32(0.0f);
			float32x4_t a1 = acc ? vld1q_f32(og + 4) : vdupq_n_f32(0.0f);
			for (int t = 0; t < n; t++) {
				const void *vt =
				    kernels__kv_at(v, (size_t)t * v_ld + (size_t)d, f16);
				float32x4_t pb = vdupq_n_f32(pg[t]);
				a0 = vaddq_f32(a0, vmulq_f32(pb, kn_kv4(vt, 0, f16)));
				a1 = vaddq_f32(a1, vmulq_f32(pb, kn_kv4(vt, 4, f16)));
			}
			vst1q_f32(o + (size_t)g * hd + d, a0);
			vst1q_f32(o + (size_t)g * hd + d + 4, a1);
		}
		for (; d < hd; d++) {
			float sum = acc ? o[(size_t)g * hd + d] : 0.0f;
			for (int t = 0; t < n; t++)
				sum +=
				    pg[t] * kernels__kv_get(v, (size_t)t * v_ld + (size_t)d, f16);
			o[(size_t)g * hd + d] = sum;
		}
	}
}

KERNELS__ATTN_ENTRIES(kn)

/* ---- the table ---------------------------------------------------------------------------- */

#if KERNELS_DOTPROD
#define KN_TABLE kernels__neon_dotprod
#define KN_ISA   "neon"
#else
#define KN_TABLE kernels__neon
#define KN_ISA   "neon-base"
#endif

KERNELS__TABLE(KN_TABLE, KN_ISA, kn, kn, .tile = {KERNELS__TILES_ALL(kn)});
