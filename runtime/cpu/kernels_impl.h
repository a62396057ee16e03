/*
 * runtime/cpu/kernels_impl.h: internals shared by quant.c and the per-ISA kernel
 * files: the GGUF block structs, inline half/bfloat16 conversions and scale
 * unpacking, and the tables' declarations (the shells the tables are built
 * from are in kernels_shell.h).
 *
 * Part: runtime/, room cpu/. Names are kernels__* (visible inside the kernel
 * files only). Everything here is static inline or a declaration, so an
 * ISA library compiled with its own -m flags needs no other object.
 */
#ifndef SHOAL_RUNTIME_KERNELS_IMPL_H
#define SHOAL_RUNTIME_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/cpu/kernels.h"

/* ---- block layouts (GGUF's, see models/dtype.h) ---------------------------- */

#define KERNELS__QK  32  /* elements per Q8_0 / Q4_0 block */
#define KERNELS__QKK 256 /* elements per K-quant super-block */

typedef struct kernels__block_q8_0 {
	uint16_t d;             /* fp16 scale */
	int8_t qs[KERNELS__QK]; /* x = d * qs */
} kernels__block_q8_0;

typedef struct kernels__block_q4_0 {
	uint16_t d;                  /* fp16 scale */
	uint8_t qs[KERNELS__QK / 2]; /* qs[j]: elem j (low nibble), j+16 (high) */
} kernels__block_q4_0;

typedef struct kernels__block_q4_k {
	uint16_t d;         /* fp16 scale of the 6-bit sub-block scales */
	uint16_t dmin;      /* fp16 scale of the 6-bit sub-block mins */
	uint8_t scales[12]; /* 8 scales + 8 mins, 6 bits each (see quant.c) */
	uint8_t qs[128];    /* 4-bit quants: 4 chunks of 64, low then high nibble */
} kernels__block_q4_k;

typedef struct kernels__block_q6_k {
	uint8_t ql[128];   /* low 4 bits */
	uint8_t qh[64];    /* high 2 bits */
	int8_t scales[16]; /* one per 16 elements */
	uint16_t d;        /* fp16 super-block scale */
} kernels__block_q6_k;

typedef struct kernels__block_q8_k {
	float d; /* x = d * qs */
	int8_t qs[KERNELS__QKK];
	int16_t bsums[KERNELS__QKK / 16]; /* sum of each 16 consecutive qs */
} kernels__block_q8_k;

typedef struct kernels__block_q5_0 {
	uint16_t d;                  /* fp16 scale */
	uint8_t qh[4];               /* bit j (LE word): 5th bit of elem j */
	uint8_t qs[KERNELS__QK / 2]; /* low 4 bits, as Q4_0; x = d * (q - 16) */
} kernels__block_q5_0;

typedef struct kernels__block_q5_1 {
	uint16_t d, m;               /* fp16 scale and offset: x = d * q + m */
	uint8_t qh[4];               /* as Q5_0 */
	uint8_t qs[KERNELS__QK / 2]; /* as Q5_0; q in 0..31 */
} kernels__block_q5_1;

typedef struct kernels__block_iq4_nl {
	uint16_t d;                  /* fp16 scale */
	uint8_t qs[KERNELS__QK / 2]; /* nibbles as Q4_0: x = d * kernels__iq4_values[q] */
} kernels__block_iq4_nl;

typedef struct kernels__block_mxfp4 {
	uint8_t e;                   /* E8M0 exponent: scale 2^(e - 127) */
	uint8_t qs[KERNELS__QK / 2]; /* FP4 E2M1 nibbles as Q4_0 (kernels__mxfp4_values) */
} kernels__block_mxfp4;

typedef struct kernels__block_q2_k {
	uint8_t scales[16]; /* per 16 elements: low nibble scale, high nibble min */
	uint8_t qs[64];     /* 2-bit quants: 2 chunks of 128 (see quant.c) */
	uint16_t d;         /* fp16 scale of the scales */
	uint16_t dmin;      /* fp16 scale of the mins */
} kernels__block_q2_k;

typedef struct kernels__block_q3_k {
	uint8_t hmask[32];  /* 3rd bit of the quants */
	uint8_t qs[64];     /* low 2 bits, as Q2_K */
	uint8_t scales[12]; /* 16 signed 6-bit scales (see kernels__q3k_scales) */
	uint16_t d;         /* fp16 super-block scale */
} kernels__block_q3_k;

typedef struct kernels__block_q5_k {
	uint16_t d, dmin;   /* as Q4_K */
	uint8_t scales[12]; /* as Q4_K */
	uint8_t qh[32];     /* bit j of qh[l]: 5th bit of elem l of sub-block j */
	uint8_t qs[128];    /* low 4 bits, as Q4_K */
} kernels__block_q5_k;

typedef struct kernels__block_iq4_xs {
	uint16_t d;          /* fp16 super-block scale */
	uint16_t scales_h;   /* top 2 bits of the 8 6-bit sub-block scales */
	uint8_t scales_l[4]; /* low 4 bits: sub-block 2i low nibble, 2i+1 high */
	uint8_t qs[128];     /* per sub-block of 32, 16 bytes as IQ4_NL */
} kernels__block_iq4_xs;

_Static_assert(sizeof(kernels__block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(kernels__block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(kernels__block_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(kernels__block_q6_k) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(kernels__block_q8_k) == 292, "Q8_K block is 292 bytes");
_Static_assert(sizeof(kernels__block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(kernels__block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(kernels__block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(kernels__block_mxfp4) == 17, "MXFP4 block is 17 bytes");
_Static_assert(sizeof(kernels__block_q2_k) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(kernels__block_q3_k) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(kernels__block_q5_k) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(kernels__block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

/* ---- half and bfloat16 (exact, in integer arithmetic) ------------------------ */

static inline float kernels__bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline uint32_t kernels__f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* IEEE binary16 -> binary32; exact for every input (subnormals, inf, NaN). */
static inline float kernels__fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;
	if (exp == 0) {
		/* 0 or subnormal: mant * 2^-24, exact in binary32 */
		float v = (float)mant * 0x1p-24f;
		return sign ? -v : v;
	}
	if (exp == 31)
		return kernels__bits_f32(sign | 0x7f800000u | (mant << 13));
	/* rebias 15 -> 127: add 112 to the exponent */
	return kernels__bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* The 4-bit and 6-bit scale unpacking of Q4_K: scale j and min j (j < 8). */
static inline void kernels__q4k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
		*m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* The 4 quants (q - 32, in -32..31) of Q6_K elements l, l + 32, l + 64 and
 * l + 96 (l < 32) of a chunk of 128: ql its 64 low-nibble bytes, qh its 32
 * bytes of high bits (see quant.c). */
static inline void kernels__q6k_quants(const uint8_t *ql, const uint8_t *qh, int l, int q[4])
{
	q[0] = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
	q[1] = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
	q[2] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
	q[3] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
}

/* All 8 scales and 8 mins of a Q4_K block at once, byte j of *sc / *m being
 * sc_j / m_j (the same values as kernels__q4k_scale_min). With the 12 bytes
 * as little-endian words u0 (bytes 0-3), u1 (4-7), u2 (8-11):
 *   sc_0..3 = u0 & 0x3f..,  m_0..3 = u1 & 0x3f..,
 *   sc_4..7 = (u2 & 0x0f..) | (top 2 bits of u0's bytes, shifted to bits 4-5),
 *   m_4..7  = (u2 >> 4 & 0x0f..) | (top 2 bits of u1's bytes, to bits 4-5). */
static inline void kernels__q4k_unpack(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
	uint32_t u0, u1, u2;
	memcpy(&u0, s, 4);
	memcpy(&u1, s + 4, 4);
	memcpy(&u2, s + 8, 4);
	uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
	uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
	*sc = (uint64_t)(u0 & 0x3f3f3f3fu) | ((uint64_t)sc_hi << 32);
	*m = (uint64_t)(u1 & 0x3f3f3f3fu) | ((uint64_t)m_hi << 32);
}

/* The 16 values of an IQ4_NL / IQ4_XS nibble (a non-uniform 4-bit grid). */
static const int8_t kernels__iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

/* Twice the 16 FP4 E2M1 values of an MXFP4 nibble (sign, 2 exponent bits, 1
 * mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6), so they are integers; the block
 * scale is halved to match (kernels__e8m0_half). */
static const int8_t kernels__mxfp4_values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128): half the E8M0 scale 2^(e - 127), exact (e = 0, 1: subnormal). */
static inline float kernels__e8m0_half(uint8_t e)
{
	return kernels__bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* The 5-bit quant of elements j and j + 16 (j < 16) of a Q5_0 / Q5_1 block. */
static inline void kernels__q5_quants(const uint8_t *qs, const uint8_t *qh, int j, int q[2])
{
	uint32_t h;
	memcpy(&h, qh, 4);
	q[0] = (qs[j] & 0xf) | (int)(((h >> j) & 1) << 4);
	q[1] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1) << 4);
}

/* The 16 scales of a Q3_K block, minus 32 (-32..31): scale i has its low 4
 * bits in s[i % 8] (low nibble for i < 8, high for i >= 8) and its top 2
 * bits at bit 2 (i / 4) of s[8 + i % 4]. */
static inline void kernels__q3k_scales(const uint8_t *s, int8_t out[16])
{
	for (int i = 0; i < 16; i++) {
		int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
		int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
		out[i] = (int8_t)((lo | (hi << 4)) - 32);
	}
}

/* The 6-bit scale of sub-block ib (< 8) of an IQ4_XS block, minus 32. */
static inline int kernels__iq4xs_scale(const kernels__block_iq4_xs *b, int ib)
{
	int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
	int hi = (b->scales_h >> (2 * ib)) & 3;
	return (lo | (hi << 4)) - 32;
}

/* ---- the tables and shared entry points -------------------------------------- */

/* The activation quantizer shared by every table (scalar, in kernels_scalar.c):
 * activations are n floats against n * nrows weights, so its cost does not
 * matter and sharing it keeps quantized activations identical on every ISA. */
void kernels__quantize_act(shoal_dtype act, const float *x, void *out, int64_t n);

/* exp(x) for the softmax's x <= 0, the steps every table's vector twin
 * takes (products and sums rounded one by one, never fused): k = x log2 e
 * rounded to nearest by adding and subtracting 1.5 * 2^23; r = (x - k
 * ln2_hi) - k ln2_lo (ln2_hi has 12 trailing zero bits, so k ln2_hi is
 * exact); the Taylor polynomial of degree 7 in r (|r| <= 0.35: its
 * truncation error is below 1e-8) by Horner; times 2^k from the exponent
 * bits. 0 below -87 (where 2^k would leave the normal range) and for NaN.
 * Within a few ulp of libm's expf (tests/unit/test_kernels.c). */
#define KERNELS__EXP_LOG2E  1.44269504f
#define KERNELS__EXP_SHIFT  12582912.0f
#define KERNELS__EXP_LN2_HI 0.693145751953125f
#define KERNELS__EXP_LN2_LO 1.428606765330187e-06f
#define KERNELS__EXP_MIN    (-87.0f)
static const float kernels__exp_c[8] = {1.0f,         1.0f,          0.5f,          0.16666667f,
                                        0.041666668f, 0.0083333338f, 0.0013888889f, 1.9841270e-4f};

static inline float kernels__exp_neg(float x)
{
	if (!(x >= KERNELS__EXP_MIN))
		return 0.0f;
	float t = x * KERNELS__EXP_LOG2E;
	float k = (t + KERNELS__EXP_SHIFT) - KERNELS__EXP_SHIFT;
	float r = (x - k * KERNELS__EXP_LN2_HI) - k * KERNELS__EXP_LN2_LO;
	float p = kernels__exp_c[7];
	for (int i = 6; i >= 0; i--)
		p = p * r + kernels__exp_c[i];
	uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
	float s;
	memcpy(&s, &bits, sizeof s);
	return p * s;
}

/* The scalar table's softmax (kernels.h), for tables without their own. */
void kernels__softmax(float *s, int n);

/* silu(g) u, the steps every table's vector twin takes: e = exp(-|g|) by
 * kernels__exp_neg, s = (g >= 0 ? g : g e) / (1 + e) (g sigmoid(g) with
 * the exponential of a non-positive argument only, so nothing overflows),
 * then s u. */
static inline float kernels__silu_mul1(float g, float u)
{
	float e = kernels__exp_neg(0.0f - kernels__bits_f32(kernels__f32_bits(g) & 0x7fffffffu));
	float num = g >= 0.0f ? g : g * e;
	return num / (1.0f + e) * u;
}

/* The scalar table's silu_mul (kernels.h), for tables without their own. */
void kernels__silu_mul(const float *g, const float *u, size_t n, float *h);

extern const shoal_kernels kernels__scalar;
#if defined(__x86_64__) || defined(_M_X64)
extern const shoal_kernels kernels__avx2;
extern const shoal_kernels kernels__avx512;
extern const shoal_kernels kernels__avx512vnni;
#endif
#if defined(__aarch64__)
extern const shoal_kernels kernels__neon;
extern const shoal_kernels kernels__neon_dotprod;
#endif

#endif
