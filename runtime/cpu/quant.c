/*
 * runtime/cpu/quant.c: scalar conversions between F32 and the stored types
 * (see quant.h): half and bfloat16, then per type dequantize and quantize.
 *
 * Part: runtime/, room cpu/. Dequantization is bit-exact with the reference
 * engine's (same float operations in the same order); the activation
 * quantizers Q8_0 and Q8_K follow the reference's scalar definitions; the
 * weight quantizers (Q4_0, Q4_K, Q6_K) are simple round-to-nearest ones
 * for fixtures. Compiled with -ffp-contract=off so no platform fuses the
 * multiply-adds that the reference rounds twice.
 *
 * Divisions: half/bfloat16, plain types, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K,
 * dispatch.
 */
#include <math.h>

#include "base/assert.h"
#include "runtime/cpu/kernels_impl.h"
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

static void quant_q4_k(const float *x, void *dst, int64_t nb)
{
	kernels__block_q4_k *b = dst;
	for (int64_t i = 0; i < nb; i++, x += KERNELS__QKK) {
		float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
		for (int j = 0; j < 8; j++) {
			float lo = 0.0f, hi = 0.0f; /* the range always includes 0 */
			for (int l = 0; l < 32; l++) {
				lo = fminf(lo, x[32 * j + l]);
				hi = fmaxf(hi, x[32 * j + l]);
			}
			scale[j] = (hi - lo) / 15.0f;
			min[j] = -lo;
			max_scale = fmaxf(max_scale, scale[j]);
			max_min = fmaxf(max_min, min[j]);
		}
		float d = max_scale / 63.0f, dmin = max_min / 63.0f;
		b[i].d = shoal_f32_to_fp16(d);
		b[i].dmin = shoal_f32_to_fp16(dmin);
		d = kernels__fp16_to_f32(b[i].d);
		dmin = kernels__fp16_to_f32(b[i].dmin);
		int sc[8], m[8];
		for (int j = 0; j < 8; j++) {
			/* round the scale up so the top quant still reaches hi */
			sc[j] = d > 0.0f ? quant_clamp((int)ceilf(scale[j] / d), 0, 63) : 0;
			m[j] =
			    dmin > 0.0f ? quant_clamp(quant_nearest_int(min[j] / dmin), 0, 63) : 0;
		}
		memset(b[i].scales, 0, sizeof b[i].scales);
		for (int j = 0; j < 4; j++) {
			b[i].scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
			b[i].scales[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
			b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
		}
		uint8_t q[KERNELS__QKK];
		for (int j = 0; j < 8; j++) {
			float ds = d * sc[j], dm = dmin * m[j];
			for (int l = 0; l < 32; l++) {
				int v =
				    ds > 0.0f ? quant_nearest_int((x[32 * j + l] + dm) / ds) : 0;
				q[32 * j + l] = (uint8_t)quant_clamp(v, 0, 15);
			}
		}
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
