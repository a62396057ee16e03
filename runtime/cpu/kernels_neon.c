/*
 * runtime/cpu/kernels_neon.c: the NEON kernel tables (arm64), compiled twice:
 * KERNELS_DOTPROD=1 (-march=armv8.2-a+dotprod, table "neon": int8 dots with
 * sdot) and KERNELS_DOTPROD=0 (baseline armv8-a, table "neon-base": smull +
 * pairwise adds). Both give the same int32 lanes (each the exact sum of the
 * same 4 consecutive byte products), so the two tables agree bitwise.
 *
 * Part: runtime/, room cpu/. The order of accumulation of each dot product
 * (fixed per ISA, see test_kernels.c) is given below the includes.
 * Divisions: helpers, float types, Q8_0/Q4_0, Q4_K, Q6_K, the table.
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
 *     d), acc = fms(imin, dmin); Q6_K: acc = fma(isum, d); vaddvq(acc).
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

#define KN_Q32_TILE(name, WBLOCK, WBYTES)                                                          \
	KERNELS__INLINE void name##_blk(const WBLOCK *wb, int64_t b, const void *const *xq,        \
	                                const int NC, float32x4_t *acc)                            \
	{                                                                                          \
		kernels__prefetch_block(wb + b, sizeof *wb);                                       \
		int8x16_t q0, q1;                                                                  \
		WBYTES(wb + b, &q0, &q1);                                                          \
		float dw = kn_h2f(wb[b].d);                                                        \
		for (int c = 0; c < NC; c++) {                                                     \
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

KN_Q32_TILE(kn_tile_q8_0, kernels__block_q8_0, kn_q8_0_bytes)
KN_Q32_TILE(kn_tile_q4_0, kernels__block_q4_0, kn_q4_0_bytes)

/* ---- Q4_K --------------------------------------------------------------------------------
 * Lanes: a sub-block's dot (<= 8 * 15 * 127 per lane) times sc_j (<= 63),
 * 8 sub-blocks: < 2^22. Mins: the 16 bsums pairwise (<= 32 * 127 each) times
 * m_j, widened to int32. */

KERNELS__INLINE void kn_tile_q4_k_block(const kernels__block_q4_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	const uint8x16_t m4 = vdupq_n_u8(0x0f);
	uint64_t sc, mn;
	kernels__q4k_unpack(wb[b].scales, &sc, &mn);
	int32x4_t isum[KERNELS__TILE];
	for (int c = 0; c < NC; c++)
		isum[c] = vdupq_n_s32(0);
	for (int j = 0; j < 4; j++) {
		uint8x16_t r0 = vld1q_u8(wb[b].qs + 32 * j), r1 = vld1q_u8(wb[b].qs + 32 * j + 16);
		int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(r0, m4));
		int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(r1, m4));
		int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(r0, 4));
		int8x16_t h1 = vreinterpretq_s8_u8(vshrq_n_u8(r1, 4));
		for (int c = 0; c < NC; c++) {
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
	float dw = kn_h2f(wb[b].d), dmw = kn_h2f(wb[b].dmin);
	for (int c = 0; c < NC; c++) {
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		int16x8_t bs = vpaddq_s16(vld1q_s16(xb->bsums), vld1q_s16(xb->bsums + 8));
		int32x4_t imin = vaddq_s32(vmull_s16(vget_low_s16(bs), vget_low_s16(mins)),
		                           vmull_high_s16(bs, mins));
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
		acc[c] = vfmsq_n_f32(acc[c], vcvtq_f32_s32(imin), dmw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_q4_k, kernels__block_q4_k)

/* ---- Q6_K --------------------------------------------------------------------------------
 * Each 16 decoded quants (q - 32, in -32..31) are exactly one sub-block:
 * lanes <= 4 * 32 * 127 * 128 per sub-block, 16 of them: < 2^25. */

KERNELS__INLINE void kn_tile_q6_k_block(const kernels__block_q6_k *wb, int64_t b,
                                        const void *const *xq, const int NC, float32x4_t *acc)
{
	const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x03);
	const int8x16_t k32 = vdupq_n_s8(32);
	int32x4_t isum[KERNELS__TILE];
	for (int c = 0; c < NC; c++)
		isum[c] = vdupq_n_s32(0);
	for (int ch = 0; ch < 2; ch++) {
		const uint8_t *ql = wb[b].ql + 64 * ch, *qh = wb[b].qh + 32 * ch;
		const int8_t *sc = wb[b].scales + 8 * ch;
		for (int h = 0; h < 2; h++) { /* l in [16 h, 16 h + 16) */
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
			for (int p = 0; p < 4; p++)
				q[p] = vsubq_s8(q[p], k32);
			for (int c = 0; c < NC; c++) {
				const int8_t *x =
				    ((const kernels__block_q8_k *)xq[c])[b].qs + 128 * ch + 16 * h;
				for (int p = 0; p < 4; p++) {
					int32x4_t t =
					    kn_dot(vdupq_n_s32(0), q[p], vld1q_s8(x + 32 * p));
					isum[c] = vmlaq_n_s32(isum[c], t, sc[2 * p + h]);
				}
			}
		}
	}
	float dw = kn_h2f(wb[b].d);
	for (int c = 0; c < NC; c++) {
		const kernels__block_q8_k *xb = (const kernels__block_q8_k *)xq[c] + b;
		acc[c] = vfmaq_n_f32(acc[c], vcvtq_f32_s32(isum[c]), dw * xb->d);
	}
}
KERNELS__SUPER_TILE(kn_tile_q6_k, kernels__block_q6_k)

/* ---- the table ---------------------------------------------------------------------------- */

#if KERNELS_DOTPROD
#define KN_TABLE kernels__neon_dotprod
#define KN_ISA   "neon"
#else
#define KN_TABLE kernels__neon
#define KN_ISA   "neon-base"
#endif

KERNELS__TABLE(KN_TABLE, KN_ISA, kn, .tile = {KERNELS__TILES_BASE(kn)});
