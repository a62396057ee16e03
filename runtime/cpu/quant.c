/*
 * runtime/cpu/quant.c: scalar conversions between F32 and the stored types
 * (see quant.h): half and bfloat16, then per type dequantize and quantize.
 *
 * Part: runtime/, room cpu/. Dequantization is bit-exact with the reference
 * engine's (same float operations in the same order); the activation
 * quantizers Q8_0 and Q8_K follow the reference's scalar definitions; the
 * weight quantizers (all the others) are simple round-to-nearest ones for
 * fixtures, not the reference's error-minimising searches. Compiled with -ffp-contract=off so no
 * platform fuses the multiply-adds that the reference rounds twice.
 *
 * Divisions: half/bfloat16, plain types, Q8_0, Q4_0, Q4_K, Q6_K, Q5_0/Q5_1,
 * IQ4_NL/MXFP4, Q2_K/Q3_K, Q5_K, IQ4_XS, the IQ grid types, Q8_K, dispatch.
 */
#include <math.h>

#include "base/assert.h"
#include "runtime/cpu/kernels_iq.h"
#include "runtime/cpu/quant.h"

/* ---- half / bfloat16 --------------------------------------------------------- */

float shoal_fp16_to_f32(uint16_t h)
{
	return kernels__fp16_to_f32(h);
}

uint16_t shoal_f32_to_fp16(float f)
{
	uint32_t u = kernels__f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u) /* NaN: keep the top payload bits, set quiet */
		return sign | 0x7e00 | (uint16_t)((u >> 13) & 0x3ff);
	/* 65520 = 0x477ff000 is halfway between 65504 (odd mantissa) and 2^16,
	 * so it and everything above round to infinity */
	if (u >= 0x477ff000u)
		return sign | 0x7c00;
	if (u >= 0x38800000u) {                           /* >= 2^-14: a normal half */
		uint32_t r = u - 0x38000000u;             /* exponent bias 127 -> 15 (112 << 23) */
		r = (r + 0xfffu + ((r >> 13) & 1)) >> 13; /* round to nearest even */
		return sign | (uint16_t)r;
	}
	if (u < 0x33000000u) /* <= 2^-25 (the tie rounds to even 0) */
		return sign;
	/* subnormal half: value = mant * 2^(e-150), in units of 2^-24 that is
	 * mant >> (126 - e), 14 <= shift <= 24 */
	uint32_t e = u >> 23;
	uint32_t mant = (u & 0x7fffffu) | 0x800000u;
	uint32_t shift = 126 - e;
	uint32_t r = mant >> shift;
	uint32_t rem = mant & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);
	if (rem > half || (rem == half && (r & 1)))
		r++; /* may carry into 0x400, the smallest normal: still right */
	return sign | (uint16_t)r;
}

float shoal_bf16_to_f32(uint16_t h)
{
	return kernels__bits_f32((uint32_t)h << 16);
}

uint16_t shoal_f32_to_bf16(float f)
{
	uint32_t u = kernels__f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* NaN stays (quiet) NaN */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Round half to even, as the reference's nearest_int: adding 1.5 * 2^23
 * leaves the integer in the low mantissa bits, rounded by the FPU's default
 * mode (nearest even); exact for |v| <= 2^22. No libm call (rintf is one on
 * baseline x86-64, and this runs per activation element). */
static int quant_nearest_int(float v)
{
	uint32_t u = kernels__f32_bits(v + 12582912.0f);
	return (int)(u & 0x007fffffu) - 0x00400000;
}

/* roundf (ties away from zero) for |v| < 2^23, without libm: the truncation
 * and the fraction v - trunc(v) are exact. Anything else is NaN or +-inf (a
 * block whose amax is below ~4e-37 has 1 / d = inf, or the weights held
 * NaN/inf): 0, what the reference's (int8_t)roundf gives on x86, instead of
 * an out-of-range conversion and a signed overflow (undefined behaviour).
 * Such a block's fp16 scale is 0 or non-finite, so its q never matters. */
static int quant_round_away(float v)
{
	if (!(v > -8388608.0f && v < 8388608.0f))
		return 0;
	int i = (int)v;
	float f = v - (float)i;
	if (f >= 0.5f)
		i++;
	else if (f <= -0.5f)
		i--;
	return i;
}

/* The element of largest magnitude, with its sign (the first of equals; 0
 * when all are 0; NaNs are passed over). */
static float quant_signed_max(const float *x, int n)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < n; j++) {
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	return max;
}

/* ---- plain types ----------------------------------------------------------------
 * A block is one element: nb = n. */

static void quant_deq_f32(const void *src, float *d, int64_t n)
{
	memcpy(d, src, (size_t)n * sizeof(float));
}

static void quant_f32(const float *x, void *dst, int64_t n)
{
	memcpy(dst, x, (size_t)n * sizeof(float));
}

static void quant_deq_f16(const void *src, float *d, int64_t n)
{
	const uint16_t *s = src;
	for (int64_t i = 0; i < n; i++)
		d[i] = kernels__fp16_to_f32(s[i]);
}

static void quant_deq_bf16(const void *src, float *d, int64_t n)
{
	const uint16_t *s = src;
	for (int64_t i = 0; i < n; i++)
		d[i] = shoal_bf16_to_f32(s[i]);
}

static void quant_f16(const float *x, void *dst, int64_t n)
{
	uint16_t *d = dst;
	for (int64_t i = 0; i < n; i++)
		d[i] = shoal_f32_to_fp16(x[i]);
}

static void quant_bf16(const float *x, void *dst, int64_t n)
{
	uint16_t *d = dst;
	for (int64_t i = 0; i < n; i++)
		d[i] = shoal_f32_to_bf16(x[i]);
}

/* ---- Q8_0 ----------------------------------------------------------------------- */

static void quant_deq_q8_0(const void *src, float *y, int64_t nb)
{
	const kernels__block_q8_0 *b = src;
	for (int64_t i = 0; i < nb; i++) {
		float d = kernels__fp16_to_f32(b[i].d);
		for (int j = 0; j < KERNELS__QK; j++)
			y[i * KERNELS__QK + j] = b[i].qs[j] * d;
	}
}

/* As the reference's scalar quantize_row_q8_0: d = amax / 127 (the fp16 of
 * it is stored), q = roundf(x * (1 / d)) with the unrounded d, ties away from
 * zero. (The reference's x86 SIMD variant multiplies by 127 / amax and rounds
 * ties to even; the two differ only on exact ties.) */
static void quant_q8_0(const float *x, void *dst, int64_t nb)
{
	kernels__block_q8_0 *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		float amax = 0.0f;
		for (int j = 0; j < KERNELS__QK; j++) {
			float ax = fabsf(x[j]);
			amax = ax > amax ? ax : amax; /* not fmaxf: a libm call */
		}
		float d = amax / 127.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b[i].d = shoal_f32_to_fp16(d);
		for (int j = 0; j < KERNELS__QK; j++)
			b[i].qs[j] = (int8_t)quant_round_away(x[j] * id);
	}
}

/* ---- Q4_0 ----------------------------------------------------------------------- */

static void quant_deq_q4_0(const void *src, float *y, int64_t nb)
{
	const kernels__block_q4_0 *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QK) {
		float d = kernels__fp16_to_f32(b[i].d);
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			y[j] = ((b[i].qs[j] & 0xf) - 8) * d;
			y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
		}
	}
}

/* As the reference: d = (the value of largest magnitude) / -8, so that value
 * maps to quant 0 exactly; q = min(15, (int8)(x / d + 8.5)). */
static void quant_q4_0(const float *x, void *dst, int64_t nb)
{
	kernels__block_q4_0 *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		float d = quant_signed_max(x, KERNELS__QK) / -8.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b[i].d = shoal_f32_to_fp16(d);
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			int q0 = (int8_t)(x[j] * id + 8.5f);
			int q1 = (int8_t)(x[j + 16] * id + 8.5f);
			q0 = q0 > 15 ? 15 : q0;
			q1 = q1 > 15 ? 15 : q1;
			b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* ---- Q4_K -------------------------------------------------------------------------
 * 8 sub-blocks of 32: x = d * sc_j * q - dmin * m_j, q in 0..15, sc_j and m_j
 * 6 bits. scales[12]: bytes 0-3 hold sc_0..3 (low 6 bits) and the top 2 bits
 * of sc_4..7; bytes 4-7 m_0..3 and the top 2 bits of m_4..7; bytes 8-11 the
 * low nibbles of sc_4..7 (low) and m_4..7 (high). qs: 4 chunks of 64
 * elements, byte l of a chunk holds element l (low nibble) and l + 32 (high). */

static void quant_deq_q4_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q4_k *b = src;
	for (int64_t i = 0; i < nb; i++) {
		float d = kernels__fp16_to_f32(b[i].d);
		float min = kernels__fp16_to_f32(b[i].dmin);
		const uint8_t *q = b[i].qs;
		for (int j = 0; j < 8; j += 2, q += 32) {
			int sc, m;
			kernels__q4k_scale_min(b[i].scales, j, &sc, &m);
			float d1 = d * sc, m1 = min * m;
			kernels__q4k_scale_min(b[i].scales, j + 1, &sc, &m);
			float d2 = d * sc, m2 = min * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (q[l] & 0xf) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

static int quant_clamp(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The sub-block scales and mins of a Q4_K / Q5_K super-block x[256] for
 * `levels` quant steps (15 or 31), packed into d, dmin and scales[12], and
 * its quants, 0..levels, into q[256] (element order). */
static void quant_k_scales(const float *x, int levels, uint16_t *dh, uint16_t *dminh,
                           uint8_t *scales, uint8_t *q)
{
	float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
	for (int j = 0; j < 8; j++) {
		float lo = 0.0f, hi = 0.0f; /* the range always includes 0 */
		for (int l = 0; l < 32; l++) {
			lo = fminf(lo, x[32 * j + l]);
			hi = fmaxf(hi, x[32 * j + l]);
		}
		scale[j] = (hi - lo) / (float)levels;
		min[j] = -lo;
		max_scale = fmaxf(max_scale, scale[j]);
		max_min = fmaxf(max_min, min[j]);
	}
	*dh = shoal_f32_to_fp16(max_scale / 63.0f);
	*dminh = shoal_f32_to_fp16(max_min / 63.0f);
	float d = kernels__fp16_to_f32(*dh), dmin = kernels__fp16_to_f32(*dminh);
	int sc[8], m[8];
	for (int j = 0; j < 8; j++) {
		/* round the scale up so the top quant still reaches hi */
		sc[j] = d > 0.0f ? quant_clamp((int)ceilf(scale[j] / d), 0, 63) : 0;
		m[j] = dmin > 0.0f ? quant_clamp(quant_nearest_int(min[j] / dmin), 0, 63) : 0;
	}
	memset(scales, 0, 12);
	for (int j = 0; j < 4; j++) {
		scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
		scales[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
		scales[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
	}
	for (int j = 0; j < 8; j++) {
		float ds = d * sc[j], dm = dmin * m[j];
		for (int l = 0; l < 32; l++) {
			int v = ds > 0.0f ? quant_nearest_int((x[32 * j + l] + dm) / ds) : 0;
			q[32 * j + l] = (uint8_t)quant_clamp(v, 0, levels);
		}
	}
}

static void quant_q4_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q4_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		uint8_t q[KERNELS__QKK];
		quant_k_scales(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b[i].qs[32 * c + l] =
				    (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
	}
}

/* ---- Q6_K -------------------------------------------------------------------------
 * 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q 6 bits. Per chunk of
 * 128 elements (ql += 64, qh += 32 per chunk), for l < 32:
 *   elem l:      ql[l] low nibble,      qh[l] bits 0-1
 *   elem l + 32: ql[l + 32] low nibble, qh[l] bits 2-3
 *   elem l + 64: ql[l] high nibble,     qh[l] bits 4-5
 *   elem l + 96: ql[l + 32] high nibble, qh[l] bits 6-7 */

static void quant_deq_q6_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q6_k *b = src;
	for (int64_t i = 0; i < nb; i++) {
		float d = kernels__fp16_to_f32(b[i].d);
		const uint8_t *ql = b[i].ql, *qh = b[i].qh;
		const int8_t *sc = b[i].scales;
		for (int c = 0; c < 2; c++, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				int is = l / 16, q[4];
				kernels__q6k_quants(ql, qh, l, q);
				y[l] = d * sc[is] * q[0];
				y[l + 32] = d * sc[is + 2] * q[1];
				y[l + 64] = d * sc[is + 4] * q[2];
				y[l + 96] = d * sc[is + 6] * q[3];
			}
		}
	}
}

static void quant_q6_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q6_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float scale[16], max_scale = 0.0f;
		for (int j = 0; j < 16; j++) {
			float amax = 0.0f;
			for (int l = 0; l < 16; l++)
				amax = fmaxf(amax, fabsf(x[16 * j + l]));
			scale[j] = amax / 31.0f; /* q - 32 in -31..31 */
			max_scale = fmaxf(max_scale, scale[j]);
		}
		float d = max_scale / 127.0f;
		b[i].d = shoal_f32_to_fp16(d);
		d = kernels__fp16_to_f32(b[i].d);
		uint8_t L[KERNELS__QKK];
		for (int j = 0; j < 16; j++) {
			int sc = d > 0.0f ? quant_clamp((int)ceilf(scale[j] / d), 0, 127) : 0;
			b[i].scales[j] = (int8_t)sc;
			float ds = d * sc;
			for (int l = 0; l < 16; l++) {
				int v = ds > 0.0f ? quant_nearest_int(x[16 * j + l] / ds) : 0;
				L[16 * j + l] = (uint8_t)(quant_clamp(v, -32, 31) + 32);
			}
		}
		uint8_t *ql = b[i].ql, *qh = b[i].qh;
		for (int c = 0; c < 2; c++, ql += 64, qh += 32) {
			const uint8_t *Lc = L + 128 * c;
			for (int l = 0; l < 32; l++) {
				int q1 = Lc[l], q2 = Lc[l + 32], q3 = Lc[l + 64], q4 = Lc[l + 96];
				ql[l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
				ql[l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
				qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
				                  ((q4 >> 4) << 6));
			}
		}
	}
}

/* ---- Q5_0, Q5_1 -------------------------------------------------------------------
 * 32 elements: the low nibbles as Q4_0, the 5th bits in a little-endian word
 * (bit j: element j). Q5_0: x = d * (q - 16); Q5_1: x = d * q + m. */

static void quant_deq_q5_0(const void *src, float *y, int64_t nb)
{
	const kernels__block_q5_0 *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QK) {
		float d = kernels__fp16_to_f32(b[i].d);
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			int q[2];
			kernels__q5_quants(b[i].qs, b[i].qh, j, q);
			y[j] = (q[0] - 16) * d;
			y[j + 16] = (q[1] - 16) * d;
		}
	}
}

static void quant_deq_q5_1(const void *src, float *y, int64_t nb)
{
	const kernels__block_q5_1 *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QK) {
		float d = kernels__fp16_to_f32(b[i].d), m = kernels__fp16_to_f32(b[i].m);
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			int q[2];
			kernels__q5_quants(b[i].qs, b[i].qh, j, q);
			y[j] = q[0] * d + m;
			y[j + 16] = q[1] * d + m;
		}
	}
}

/* Pack 32 quants 0..31 (element order) into qs and the qh word. */
static void quant_pack_q5(const int *q, uint8_t *qs, uint8_t *qh)
{
	uint32_t h = 0;
	for (int j = 0; j < KERNELS__QK / 2; j++) {
		qs[j] = (uint8_t)((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
		h |= (uint32_t)(q[j] >> 4) << j;
		h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
	}
	memcpy(qh, &h, 4);
}

/* As Q4_0 with 32 levels: d = (value of largest magnitude) / -16. */
static void quant_q5_0(const float *x, void *dst, int64_t nb)
{
	kernels__block_q5_0 *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		float d = quant_signed_max(x, KERNELS__QK) / -16.0f;
		float id = d != 0.0f ? 1.0f / d : 0.0f;
		b[i].d = shoal_f32_to_fp16(d);
		int q[KERNELS__QK];
		for (int j = 0; j < KERNELS__QK; j++) {
			int v = (int8_t)(x[j] * id + 16.5f);
			q[j] = v > 31 ? 31 : v;
		}
		quant_pack_q5(q, b[i].qs, b[i].qh);
	}
}

/* d = (max - min) / 31, m = min, q = nearest step above min. */
static void quant_q5_1(const float *x, void *dst, int64_t nb)
{
	kernels__block_q5_1 *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		float lo = x[0], hi = x[0];
		for (int j = 1; j < KERNELS__QK; j++) {
			lo = fminf(lo, x[j]);
			hi = fmaxf(hi, x[j]);
		}
		float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		b[i].d = shoal_f32_to_fp16(d);
		b[i].m = shoal_f32_to_fp16(lo);
		int q[KERNELS__QK];
		for (int j = 0; j < KERNELS__QK; j++) {
			int v = (int8_t)((x[j] - lo) * id + 0.5f);
			q[j] = v > 31 ? 31 : v;
		}
		quant_pack_q5(q, b[i].qs, b[i].qh);
	}
}

/* ---- IQ4_NL, MXFP4 -------------------------------------------------------------------
 * 32 elements, nibbles as Q4_0, each an index into a table of 16 values:
 * IQ4_NL x = d * kernels__iq4_values[q] (fp16 d); MXFP4 x = 2^(e - 128) *
 * kernels__mxfp4_values[q] (twice the E2M1 value times the E8M0 scale). */

/* The index of the table value nearest v (the first of equals). */
static int quant_nearest_index(const int8_t *table, float v)
{
	int best = 0;
	float err = fabsf(v - table[0]);
	for (int k = 1; k < 16; k++) {
		float e = fabsf(v - table[k]);
		if (e < err) {
			err = e;
			best = k;
		}
	}
	return best;
}

static void quant_deq_nibble_table(const uint8_t *qs, const int8_t *table, float d, float *y)
{
	for (int j = 0; j < KERNELS__QK / 2; j++) {
		y[j] = d * table[qs[j] & 0xf];
		y[j + 16] = d * table[qs[j] >> 4];
	}
}

static void quant_nibble_table(const float *x, const int8_t *table, float id, uint8_t *qs)
{
	for (int j = 0; j < KERNELS__QK / 2; j++) {
		int q0 = quant_nearest_index(table, x[j] * id);
		int q1 = quant_nearest_index(table, x[j + 16] * id);
		qs[j] = (uint8_t)(q0 | (q1 << 4));
	}
}

static void quant_deq_iq4_nl(const void *src, float *y, int64_t nb)
{
	const kernels__block_iq4_nl *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QK)
		quant_deq_nibble_table(b[i].qs, kernels__iq4_values, kernels__fp16_to_f32(b[i].d),
		                       y);
}

/* d = (value of largest magnitude) / -127: that value maps to table[0]. */
static void quant_iq4_nl(const float *x, void *dst, int64_t nb)
{
	kernels__block_iq4_nl *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		b[i].d = shoal_f32_to_fp16(quant_signed_max(x, KERNELS__QK) / -127.0f);
		float d = kernels__fp16_to_f32(b[i].d);
		quant_nibble_table(x, kernels__iq4_values, d != 0.0f ? 1.0f / d : 0.0f, b[i].qs);
	}
}

static void quant_deq_mxfp4(const void *src, float *y, int64_t nb)
{
	const kernels__block_mxfp4 *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QK)
		quant_deq_nibble_table(b[i].qs, kernels__mxfp4_values, kernels__e8m0_half(b[i].e),
		                       y);
}

/* e is the smallest exponent whose range 12 * 2^(e - 128) (E2M1's 6 times
 * the scale) covers the block's largest magnitude amax: with amax / 6 =
 * f 2^k, f in [0.5, 1), that is e = 127 + k (127 + k - 1 when f is 0.5),
 * kept in 1..254; an all-zero block gets e = 0. */
static void quant_mxfp4(const float *x, void *dst, int64_t nb)
{
	kernels__block_mxfp4 *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QK) {
		float amax = fabsf(quant_signed_max(x, KERNELS__QK));
		int e = 0;
		if (amax > 0.0f && amax <= 3.0e38f) {
			int k;
			float f = frexpf(amax / 6.0f, &k);
			e = quant_clamp(127 + k - (f == 0.5f), 1, 254);
		}
		b[i].e = (uint8_t)e;
		float d = kernels__e8m0_half(b[i].e);
		quant_nibble_table(x, kernels__mxfp4_values, e ? 1.0f / d : 0.0f, b[i].qs);
	}
}

/* ---- Q2_K, Q3_K -------------------------------------------------------------------
 * 16 sub-blocks of 16. Element e of the super-block has its 2 low bits at
 * bit 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32]; it belongs to
 * sub-block e / 16.
 * Q2_K: x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q 0..3.
 * Q3_K: x = d * sc_j * (q - 4), q 0..7 with its top bit at bit e / 32 of
 * hmask[e % 32], sc_j in -32..31 (kernels__q3k_scales). */

static int quant_q2_bits(const uint8_t *qs, int e)
{
	return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

static void quant_deq_q2_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q2_k *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QKK) {
		float d = kernels__fp16_to_f32(b[i].d), min = kernels__fp16_to_f32(b[i].dmin);
		for (int j = 0; j < 16; j++) {
			float dl = d * (b[i].scales[j] & 0xf), ml = min * (b[i].scales[j] >> 4);
			for (int l = 0; l < 16; l++)
				y[16 * j + l] = dl * quant_q2_bits(b[i].qs, 16 * j + l) - ml;
		}
	}
}

static void quant_deq_q3_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q3_k *b = src;
	for (int64_t i = 0; i < nb; i++, y += KERNELS__QKK) {
		float d = kernels__fp16_to_f32(b[i].d);
		int8_t sc[16];
		kernels__q3k_scales(b[i].scales, sc);
		for (int j = 0; j < 16; j++) {
			float dl = d * sc[j];
			for (int l = 0; l < 16; l++) {
				int e = 16 * j + l;
				int hi = (b[i].hmask[e % 32] >> (e / 32)) & 1;
				y[e] = dl * (quant_q2_bits(b[i].qs, e) - (hi ? 0 : 4));
			}
		}
	}
}

/* Set the 2 low bits of quant e (see above); qs starts zeroed. */
static void quant_q2_set(uint8_t *qs, int e, int q)
{
	qs[32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
}

/* As the Q4_K quantizer, with 4 levels and 4-bit scales and mins. */
static void quant_q2_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q2_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
		for (int j = 0; j < 16; j++) {
			float lo = 0.0f, hi = 0.0f;
			for (int l = 0; l < 16; l++) {
				lo = fminf(lo, x[16 * j + l]);
				hi = fmaxf(hi, x[16 * j + l]);
			}
			scale[j] = (hi - lo) / 3.0f;
			min[j] = -lo;
			max_scale = fmaxf(max_scale, scale[j]);
			max_min = fmaxf(max_min, min[j]);
		}
		b[i].d = shoal_f32_to_fp16(max_scale / 15.0f);
		b[i].dmin = shoal_f32_to_fp16(max_min / 15.0f);
		float d = kernels__fp16_to_f32(b[i].d), dmin = kernels__fp16_to_f32(b[i].dmin);
		memset(b[i].qs, 0, sizeof b[i].qs);
		for (int j = 0; j < 16; j++) {
			int sc = d > 0.0f ? quant_clamp((int)ceilf(scale[j] / d), 0, 15) : 0;
			int m =
			    dmin > 0.0f ? quant_clamp(quant_nearest_int(min[j] / dmin), 0, 15) : 0;
			b[i].scales[j] = (uint8_t)(sc | (m << 4));
			float ds = d * sc, dm = dmin * m;
			for (int l = 0; l < 16; l++) {
				int v =
				    ds > 0.0f ? quant_nearest_int((x[16 * j + l] + dm) / ds) : 0;
				quant_q2_set(b[i].qs, 16 * j + l, quant_clamp(v, 0, 3));
			}
		}
	}
}

/* Per sub-block s_j = (value of largest magnitude) / -4 (it maps to -4), d =
 * (the s_j of largest magnitude) / -32, sc_j = nearest s_j / d. */
static void quant_q3_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q3_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float s[16];
		for (int j = 0; j < 16; j++)
			s[j] = quant_signed_max(x + 16 * j, 16) / -4.0f;
		b[i].d = shoal_f32_to_fp16(quant_signed_max(s, 16) / -32.0f);
		float d = kernels__fp16_to_f32(b[i].d);
		memset(b[i].hmask, 0, sizeof b[i].hmask);
		memset(b[i].qs, 0, sizeof b[i].qs);
		memset(b[i].scales, 0, sizeof b[i].scales);
		for (int j = 0; j < 16; j++) {
			int sc = d != 0.0f ? quant_clamp(quant_nearest_int(s[j] / d), -32, 31) : 0;
			int u = sc + 32;
			b[i].scales[j % 8] |= (uint8_t)((u & 0xf) << (j < 8 ? 0 : 4));
			b[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
			float ds = d * sc;
			for (int l = 0; l < 16; l++) {
				int e = 16 * j + l;
				int v = ds != 0.0f ? quant_nearest_int(x[e] / ds) : 0;
				int q = quant_clamp(v, -4, 3) + 4;
				quant_q2_set(b[i].qs, e, q);
				b[i].hmask[e % 32] |= (uint8_t)((q >> 2) << (e / 32));
			}
		}
	}
}

/* ---- Q5_K ---------------------------------------------------------------------------
 * As Q4_K (scales, mins and the low nibbles laid out the same), plus the 5th
 * bit of element l of sub-block j at bit j of qh[l]: q in 0..31. */

static void quant_deq_q5_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q5_k *b = src;
	for (int64_t i = 0; i < nb; i++) {
		float d = kernels__fp16_to_f32(b[i].d);
		float min = kernels__fp16_to_f32(b[i].dmin);
		const uint8_t *q = b[i].qs, *qh = b[i].qh;
		for (int j = 0; j < 8; j += 2, q += 32) {
			int sc, m;
			kernels__q4k_scale_min(b[i].scales, j, &sc, &m);
			float d1 = d * sc, m1 = min * m;
			kernels__q4k_scale_min(b[i].scales, j + 1, &sc, &m);
			float d2 = d * sc, m2 = min * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * ((q[l] & 0xf) + (((qh[l] >> j) & 1) << 4)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * ((q[l] >> 4) + (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
		}
	}
}

static void quant_q5_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q5_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		uint8_t q[KERNELS__QKK];
		quant_k_scales(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
		memset(b[i].qh, 0, sizeof b[i].qh);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++) {
				int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
				b[i].qs[32 * c + l] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
				b[i].qh[l] |=
				    (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
			}
	}
}

/* ---- IQ4_XS ---------------------------------------------------------------------------
 * 8 sub-blocks of 32, each laid out as an IQ4_NL block without its scale:
 * x = d * (ls_j - 32) * kernels__iq4_values[q], ls_j 6 bits. */

static void quant_deq_iq4_xs(const void *src, float *y, int64_t nb)
{
	const kernels__block_iq4_xs *b = src;
	for (int64_t i = 0; i < nb; i++) {
		float d = kernels__fp16_to_f32(b[i].d);
		for (int ib = 0; ib < 8; ib++, y += 32)
			quant_deq_nibble_table(b[i].qs + 16 * ib, kernels__iq4_values,
			                       d * kernels__iq4xs_scale(&b[i], ib), y);
	}
}

/* Per sub-block s_j = (value of largest magnitude) / -127, d = (the s_j of
 * largest magnitude) / -32, ls_j - 32 = nearest s_j / d. */
static void quant_iq4_xs(const float *x, void *dst, int64_t nb)
{
	kernels__block_iq4_xs *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float s[8];
		for (int j = 0; j < 8; j++)
			s[j] = quant_signed_max(x + 32 * j, 32) / -127.0f;
		b[i].d = shoal_f32_to_fp16(quant_signed_max(s, 8) / -32.0f);
		float d = kernels__fp16_to_f32(b[i].d);
		b[i].scales_h = 0;
		memset(b[i].scales_l, 0, sizeof b[i].scales_l);
		for (int j = 0; j < 8; j++) {
			int ls = d != 0.0f ? quant_clamp(quant_nearest_int(s[j] / d), -32, 31) : 0;
			b[i].scales_l[j / 2] |= (uint8_t)(((ls + 32) & 0xf) << (4 * (j % 2)));
			b[i].scales_h |= (uint16_t)(((ls + 32) >> 4) << (2 * j));
			float dl = d * ls;
			quant_nibble_table(x + 32 * j, kernels__iq4_values,
			                   dl != 0.0f ? 1.0f / dl : 0.0f, b[i].qs + 16 * j);
		}
	}
}

/* ---- IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M -------------------------
 * Dequantization through kernels_iq.h's sub-block decoder: x = (D sc) q,
 * which rounds as the reference's db * grid * sign does (see kernels_iq.h).
 * The quantizer is a plain one for fixtures: D from the largest |x| of the
 * super-block, each scale rounded to nearest, signs from x (an even count
 * where the format stores 7 of 8: the element of least |x| gives way),
 * then per group of 8 the grid entry (IQ1: entry and delta sign) of least
 * squared error by exhaustive search; no importance weights. */

/* Per type: the largest |q| (IQ2 43, IQ3_XXS 62, IQ3_S 15, IQ1 9), the
 * largest ls, whether a scale covers 16 elements (else 32), whether 7
 * stored sign bits imply the 8th, and D's power of two (kernels__iq_d). */
typedef struct quant_iq_shape {
	int qmax, lsmax, per16, parity;
	float pow2;
} quant_iq_shape;

static quant_iq_shape quant_iq_shape_of(shoal_dtype t)
{
	switch (t) {
	case SHOAL_DTYPE_IQ2_XXS:
		return (quant_iq_shape){43, 15, 0, 1, 0.125f};
	case SHOAL_DTYPE_IQ2_XS:
		return (quant_iq_shape){43, 15, 1, 1, 0.125f};
	case SHOAL_DTYPE_IQ2_S:
		return (quant_iq_shape){43, 15, 1, 0, 0.125f};
	case SHOAL_DTYPE_IQ3_XXS:
		return (quant_iq_shape){62, 15, 0, 1, 0.25f};
	case SHOAL_DTYPE_IQ3_S:
		return (quant_iq_shape){15, 15, 0, 0, 1.0f};
	case SHOAL_DTYPE_IQ1_S:
		return (quant_iq_shape){9, 7, 0, 0, 0.125f};
	default: /* IQ1_M */
		return (quant_iq_shape){9, 7, 1, 0, 0.125f};
	}
}

static void quant_deq_iq(shoal_dtype t, const void *src, float *y, int64_t nb)
{
	const kernels__iq_grids *G = kernels__iq_grids_get();
	size_t bytes = kernels__iq_block_bytes(t);
	for (int64_t i = 0; i < nb; i++) {
		const char *blk = (const char *)src + (size_t)i * bytes;
		float d = kernels__iq_d(t, blk);
		for (int ib = 0; ib < 8; ib++) {
			kernels__iq_sub o;
			kernels__iq_sub_decode(t, blk, ib, G, &o);
			for (int l = 0; l < 4; l++) {
				float dl = d * (float)o.sc[l / 2];
				for (int j = 0; j < 8; j++)
					*y++ = dl * (float)kernels__iq_q(t, &o, l, j);
			}
		}
	}
}

/* The one of n grid entries nearest the nb (8 or 4) targets tt, tt_j = x_j
 * / (D sc) in units of q, against q_j = v_j s_j (s_j from bit j of signs)
 * or, for IQ1, 8 v_j + delta; the entries as compact codes (value index of
 * element j at bits `bits` j) into the value set v. The squared error of
 * each half of the elements is tabled per half-code first, so an entry
 * costs two look-ups (IQ1: 2048 entries, 2 x 256 half-codes of 4). Its
 * error in *err. */
static int quant_iq_search(const uint16_t *code, int n, int bits, const int8_t *v, int nb,
                           const float *tt, unsigned signs, int iq1, int delta, float *err)
{
	int half = nb / 2, hb = half * bits, nh = 1 << hb, mask = (1 << bits) - 1;
	float cost[2][256];
	for (int h = 0; h < 2; h++)
		for (int c = 0; c < nh; c++) {
			float sum = 0.0f;
			for (int k = 0; k < half; k++) {
				int j = h * half + k, val = v[(c >> (bits * k)) & mask];
				int q = iq1 ? 8 * val + delta : ((signs >> j) & 1 ? -val : val);
				float diff = tt[j] - (float)q;
				sum += diff * diff;
			}
			cost[h][c] = sum;
		}
	int best = 0;
	float be = INFINITY;
	for (int e = 0; e < n; e++) {
		float sum = cost[0][code[e] & (nh - 1)] + cost[1][code[e] >> hb];
		if (sum < be) {
			be = sum;
			best = e;
		}
	}
	*err = be;
	return best;
}

/* The 8 signs of x (bit j: x_j < 0), with an even count when parity. */
static unsigned quant_iq_signs(const float *x, int parity)
{
	unsigned s = 0;
	int least = 0;
	for (int j = 0; j < 8; j++) {
		s |= (unsigned)(x[j] < 0.0f) << j;
		if (fabsf(x[j]) < fabsf(x[least]))
			least = j;
	}
	if (parity && __builtin_parity(s))
		s ^= 1u << least;
	return s;
}

static void quant_put_u16(void *p, uint16_t v)
{
	memcpy(p, &v, sizeof v);
}

static void quant_or_u32(void *p, uint32_t v)
{
	uint32_t u;
	memcpy(&u, p, sizeof u);
	u |= v;
	memcpy(p, &u, sizeof u);
}

/* One sub-block's choices, to be packed into the block's fields. */
typedef struct quant_iq_pick {
	int idx[8];     /* grid indices: per group (IQ3: per 4 elements) */
	unsigned sg[4]; /* per group its 8 sign bits */
	int neg[4];     /* IQ1: per group whether the delta is negative */
	int ls[2];      /* of elements 0-15 and 16-31 */
} quant_iq_pick;

static void quant_iq_pack(shoal_dtype t, void *blk, int ib, const quant_iq_pick *p)
{
	switch (t) {
	case SHOAL_DTYPE_IQ2_XXS: {
		uint8_t *q = (uint8_t *)((kernels__block_iq2_xxs *)blk)->qs + 8 * ib;
		uint32_t aux = (uint32_t)p->ls[0] << 28;
		for (int l = 0; l < 4; l++) {
			q[l] = (uint8_t)p->idx[l];
			aux |= (p->sg[l] & 127) << (7 * l);
		}
		quant_or_u32(q + 4, aux);
		break;
	}
	case SHOAL_DTYPE_IQ2_XS: {
		kernels__block_iq2_xs *b = blk;
		for (int l = 0; l < 4; l++)
			quant_put_u16(&b->qs[4 * ib + l],
			              (uint16_t)(p->idx[l] | (int)((p->sg[l] & 127) << 9)));
		b->scales[ib] = (uint8_t)(p->ls[0] | p->ls[1] << 4);
		break;
	}
	case SHOAL_DTYPE_IQ2_S: {
		kernels__block_iq2_s *b = blk;
		for (int l = 0; l < 4; l++) {
			b->qs[4 * ib + l] = (uint8_t)p->idx[l];
			b->qh[ib] |= (uint8_t)((p->idx[l] >> 8) << (2 * l));
			b->qs[32 + 4 * ib + l] = (uint8_t)p->sg[l];
		}
		b->scales[ib] = (uint8_t)(p->ls[0] | p->ls[1] << 4);
		break;
	}
	case SHOAL_DTYPE_IQ3_XXS: {
		kernels__block_iq3_xxs *b = blk;
		uint32_t aux = (uint32_t)p->ls[0] << 28;
		for (int l = 0; l < 4; l++)
			aux |= (p->sg[l] & 127) << (7 * l);
		for (int m = 0; m < 8; m++)
			b->qs[8 * ib + m] = (uint8_t)p->idx[m];
		quant_or_u32(b->qs + 64 + 4 * ib, aux);
		break;
	}
	case SHOAL_DTYPE_IQ3_S: {
		kernels__block_iq3_s *b = blk;
		for (int m = 0; m < 8; m++) {
			b->qs[8 * ib + m] = (uint8_t)p->idx[m];
			b->qh[ib] |= (uint8_t)((p->idx[m] >> 8) << m);
		}
		for (int l = 0; l < 4; l++)
			b->signs[4 * ib + l] = (uint8_t)p->sg[l];
		b->scales[ib / 2] |= (uint8_t)(p->ls[0] << (4 * (ib % 2)));
		break;
	}
	case SHOAL_DTYPE_IQ1_S: {
		kernels__block_iq1_s *b = blk;
		unsigned h = (unsigned)p->ls[0] << 12 | (unsigned)p->neg[0] << 15;
		for (int l = 0; l < 4; l++) {
			b->qs[4 * ib + l] = (uint8_t)p->idx[l];
			h |= (unsigned)(p->idx[l] >> 8) << (3 * l);
		}
		quant_put_u16(&b->qh[ib], (uint16_t)h);
		break;
	}
	default: { /* IQ1_M */
		kernels__block_iq1_m *b = blk;
		for (int l = 0; l < 4; l++) {
			b->qs[4 * ib + l] = (uint8_t)p->idx[l];
			b->qh[2 * ib + l / 2] |=
			    (uint8_t)(((p->idx[l] >> 8) | p->neg[l] << 3) << (4 * (l % 2)));
		}
		uint8_t *w = b->scales + 2 * (ib / 2);
		uint16_t v = kernels__iq_u16(w);
		v |= (uint16_t)((p->ls[0] | p->ls[1] << 3) << (6 * (ib % 2)));
		quant_put_u16(w, v);
		break;
	}
	}
}

/* Groups of 8 of sub-block xs (32 elements) at scales dl[2]: the grid
 * entries and signs (IQ2, IQ3) or entries and delta signs (IQ1). */
static void quant_iq_choose(shoal_dtype t, const kernels__iq_grids *G, const float *xs,
                            const float dl[2], int parity, quant_iq_pick *p)
{
	if (kernels__iq_is_iq1(t)) {
		int cand[2][4];
		float err[2][4], tot[2] = {0.0f, 0.0f};
		for (int neg = 0; neg < 2; neg++)
			for (int l = 0; l < 4; l++) {
				float tt[8];
				for (int j = 0; j < 8; j++)
					tt[j] = xs[8 * l + j] / dl[l / 2];
				cand[neg][l] =
				    quant_iq_search(G->code_iq1s, 2048, 2, kernels__iq1_values, 8,
				                    tt, 0, 1, neg ? -1 : 1, &err[neg][l]);
				tot[neg] += err[neg][l];
			}
		for (int l = 0; l < 4; l++) {
			/* IQ1_S: one delta sign for the sub-block; IQ1_M: per group */
			int neg = t == SHOAL_DTYPE_IQ1_S ? tot[1] < tot[0] : err[1][l] < err[0][l];
			p->idx[l] = cand[neg][l];
			p->neg[l] = neg;
		}
		return;
	}
	for (int l = 0; l < 4; l++) {
		float tt[8], e;
		for (int j = 0; j < 8; j++)
			tt[j] = xs[8 * l + j] / dl[l / 2];
		unsigned s = p->sg[l] = quant_iq_signs(xs + 8 * l, parity);
		switch (t) {
		case SHOAL_DTYPE_IQ2_XXS:
			p->idx[l] = quant_iq_search(G->code_iq2xxs, 256, 2, kernels__iq2_values, 8,
			                            tt, s, 0, 0, &e);
			break;
		case SHOAL_DTYPE_IQ2_XS:
			p->idx[l] = quant_iq_search(G->code_iq2xs, 512, 2, kernels__iq2_values, 8,
			                            tt, s, 0, 0, &e);
			break;
		case SHOAL_DTYPE_IQ2_S:
			p->idx[l] = quant_iq_search(G->code_iq2s, 1024, 2, kernels__iq2_values, 8,
			                            tt, s, 0, 0, &e);
			break;
		default: { /* IQ3: two entries of 4 */
			int is3s = t == SHOAL_DTYPE_IQ3_S, n3 = is3s ? 512 : 256;
			const uint16_t *c3 = is3s ? G->code_iq3s : G->code_iq3xxs;
			const int8_t *v3 = is3s ? kernels__iq3s_values : kernels__iq3xxs_values;
			p->idx[2 * l] = quant_iq_search(c3, n3, 3, v3, 4, tt, s, 0, 0, &e);
			p->idx[2 * l + 1] =
			    quant_iq_search(c3, n3, 3, v3, 4, tt + 4, s >> 4, 0, 0, &e);
		}
		}
	}
}

static void quant_iq(shoal_dtype t, const float *x, void *dst, int64_t nb)
{
	const kernels__iq_grids *G = kernels__iq_grids_get();
	quant_iq_shape sh = quant_iq_shape_of(t);
	size_t bytes = kernels__iq_block_bytes(t);
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		void *blk = (char *)dst + (size_t)i * bytes;
		memset(blk, 0, bytes);
		/* the scale each 16 (or 32) elements want: q = qmax at their
		 * largest |x|; D = the largest of them / (2 lsmax + 1) */
		float want[16], top = 0.0f;
		for (int h = 0; h < 16; h++) {
			want[h] = 0.0f;
			for (int j = 0; j < 16; j++)
				want[h] = fmaxf(want[h], fabsf(x[16 * h + j]));
			want[h] /= (float)sh.qmax;
		}
		for (int h = 0; h < 16; h += 2) {
			if (!sh.per16)
				want[h] = want[h + 1] = fmaxf(want[h], want[h + 1]);
			top = fmaxf(top, want[h]);
			top = fmaxf(top, want[h + 1]);
		}
		uint16_t d16 = shoal_f32_to_fp16(top / (float)(2 * sh.lsmax + 1) / sh.pow2);
		if (t == SHOAL_DTYPE_IQ1_M) {
			uint8_t *sc = ((kernels__block_iq1_m *)blk)->scales;
			for (int k = 0; k < 4; k++)
				quant_put_u16(sc + 2 * k,
				              (uint16_t)(((d16 >> (4 * k)) & 0xf) << 12));
		} else {
			quant_put_u16(blk, d16);
		}
		float D = kernels__iq_d(t, blk);
		if (!(D > 0.0f) || !isfinite(D))
			continue; /* zeros, or a scale beyond fp16: the q are moot */
		for (int ib = 0; ib < 8; ib++) {
			quant_iq_pick p;
			memset(&p, 0, sizeof p);
			float dl[2];
			for (int h = 0; h < 2; h++) {
				float r = (want[2 * ib + h] / D - 1.0f) / 2.0f;
				p.ls[h] = quant_clamp(quant_nearest_int(r), 0, sh.lsmax);
				dl[h] = D * (float)(2 * p.ls[h] + 1);
			}
			quant_iq_choose(t, G, x + 32 * ib, dl, sh.parity, &p);
			quant_iq_pack(t, blk, ib, &p);
		}
	}
}

/* quant_ops' two conversions of IQ type T (suffix sfx). */
#define QUANT_IQ_OPS(sfx, T)                                                                       \
	static void quant_deq_##sfx(const void *src, float *y, int64_t nb)                         \
	{                                                                                          \
		quant_deq_iq(T, src, y, nb);                                                       \
	}                                                                                          \
	static void quant_##sfx(const float *x, void *dst, int64_t nb)                             \
	{                                                                                          \
		quant_iq(T, x, dst, nb);                                                           \
	}

QUANT_IQ_OPS(iq2_xxs, SHOAL_DTYPE_IQ2_XXS)
QUANT_IQ_OPS(iq2_xs, SHOAL_DTYPE_IQ2_XS)
QUANT_IQ_OPS(iq2_s, SHOAL_DTYPE_IQ2_S)
QUANT_IQ_OPS(iq3_xxs, SHOAL_DTYPE_IQ3_XXS)
QUANT_IQ_OPS(iq3_s, SHOAL_DTYPE_IQ3_S)
QUANT_IQ_OPS(iq1_s, SHOAL_DTYPE_IQ1_S)
QUANT_IQ_OPS(iq1_m, SHOAL_DTYPE_IQ1_M)

/* ---- Q8_K -------------------------------------------------------------------------
 * As the reference's quantize_row_q8_K: max is the element of largest
 * magnitude, with its sign; iscale = -127 / max; q = min(127, rint(iscale *
 * x)) (ties to even), so the largest element maps to -127 and the others
 * stay in [-127, 127]; d = 1 / iscale; bsums are the sums of each 16 q. */

static void quant_deq_q8_k(const void *src, float *y, int64_t nb)
{
	const kernels__block_q8_k *b = src;
	for (int64_t i = 0; i < nb; i++)
		for (int j = 0; j < KERNELS__QKK; j++)
			*y++ = b[i].d * b[i].qs[j];
}

static void quant_q8_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q8_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float max = quant_signed_max(x, KERNELS__QKK);
		if (max == 0.0f) {
			memset(&b[i], 0, sizeof b[i]);
			continue;
		}
		float iscale = -127.0f / max;
		for (int j = 0; j < KERNELS__QKK; j++) {
			int v = quant_nearest_int(iscale * x[j]);
			b[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
		}
		for (int j = 0; j < KERNELS__QKK / 16; j++) {
			int sum = 0;
			for (int l = 0; l < 16; l++)
				sum += b[i].qs[16 * j + l];
			b[i].bsums[j] = (int16_t)sum;
		}
		b[i].d = 1.0f / iscale;
	}
}

/* ---- dispatch ---------------------------------------------------------------------
 * Per type its two conversions, on nb = n / (the type's block elements). */

typedef struct quant_ops {
	void (*dequantize)(const void *src, float *dst, int64_t nb);
	void (*quantize)(const float *src, void *dst, int64_t nb);
} quant_ops;

static const quant_ops quant_types[] = {
    [SHOAL_DTYPE_F32] = {quant_deq_f32, quant_f32},
    [SHOAL_DTYPE_F16] = {quant_deq_f16, quant_f16},
    [SHOAL_DTYPE_BF16] = {quant_deq_bf16, quant_bf16},
    [SHOAL_DTYPE_Q8_0] = {quant_deq_q8_0, quant_q8_0},
    [SHOAL_DTYPE_Q4_0] = {quant_deq_q4_0, quant_q4_0},
    [SHOAL_DTYPE_Q4_K] = {quant_deq_q4_k, quant_q4_k},
    [SHOAL_DTYPE_Q6_K] = {quant_deq_q6_k, quant_q6_k},
    [SHOAL_DTYPE_Q8_K] = {quant_deq_q8_k, quant_q8_k},
    [SHOAL_DTYPE_Q5_0] = {quant_deq_q5_0, quant_q5_0},
    [SHOAL_DTYPE_Q5_1] = {quant_deq_q5_1, quant_q5_1},
    [SHOAL_DTYPE_IQ4_NL] = {quant_deq_iq4_nl, quant_iq4_nl},
    [SHOAL_DTYPE_MXFP4] = {quant_deq_mxfp4, quant_mxfp4},
    [SHOAL_DTYPE_Q2_K] = {quant_deq_q2_k, quant_q2_k},
    [SHOAL_DTYPE_Q3_K] = {quant_deq_q3_k, quant_q3_k},
    [SHOAL_DTYPE_Q5_K] = {quant_deq_q5_k, quant_q5_k},
    [SHOAL_DTYPE_IQ4_XS] = {quant_deq_iq4_xs, quant_iq4_xs},
    [SHOAL_DTYPE_IQ2_XXS] = {quant_deq_iq2_xxs, quant_iq2_xxs},
    [SHOAL_DTYPE_IQ2_XS] = {quant_deq_iq2_xs, quant_iq2_xs},
    [SHOAL_DTYPE_IQ2_S] = {quant_deq_iq2_s, quant_iq2_s},
    [SHOAL_DTYPE_IQ3_XXS] = {quant_deq_iq3_xxs, quant_iq3_xxs},
    [SHOAL_DTYPE_IQ3_S] = {quant_deq_iq3_s, quant_iq3_s},
    [SHOAL_DTYPE_IQ1_S] = {quant_deq_iq1_s, quant_iq1_s},
    [SHOAL_DTYPE_IQ1_M] = {quant_deq_iq1_m, quant_iq1_m},
};

/* The conversions of type t, or NULL where there are none. */
static const quant_ops *quant_ops_of(shoal_dtype t)
{
	if ((unsigned)t >= sizeof quant_types / sizeof quant_types[0] || !quant_types[t].quantize)
		return NULL;
	return &quant_types[t];
}

bool shoal_quant_supported(shoal_dtype t)
{
	return quant_ops_of(t) != NULL;
}

/* The number of blocks in a row of n elements of type t. Another type or a
 * partial block is a caller bug: shoal_quant_supported() says which types
 * work, and rows come whole from the model's shapes. */
static int64_t quant_row_blocks(const quant_ops *q, shoal_dtype t, int64_t n)
{
	SHOAL_ASSERT(q != NULL);
	int64_t be = (int64_t)shoal_dtype_block_elems(t);
	SHOAL_ASSERT(n >= 0 && n % be == 0);
	return n / be;
}

void shoal_dequantize_row(shoal_dtype t, const void *src, float *dst, int64_t n)
{
	const quant_ops *q = quant_ops_of(t);
	q->dequantize(src, dst, quant_row_blocks(q, t, n));
}

void shoal_quantize_row(shoal_dtype t, const float *src, void *dst, int64_t n)
{
	const quant_ops *q = quant_ops_of(t);
	q->quantize(src, dst, quant_row_blocks(q, t, n));
}
