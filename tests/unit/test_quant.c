/*
 * tests/unit/test_quant.c: runtime/cpu/quant.c against hand-computed values: half and
 * bfloat16 special cases and rounding, dequantization of hand-built blocks of
 * every type, quantize -> dequantize error bounds, the reference's Q8_0 / Q8_K
 * activation rules, and the two tiny-kq fixtures (the same random weights
 * quantized by the reference to Q4_K_M and to Q6_K) dequantized side by side.
 */
#include <float.h>
#include <stdint.h>

#include "models/gguf.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_impl.h"
#include "runtime/cpu/quant.h"
#include "tests/unit/test.h"

static uint32_t rng_state = 12345;
static float rnd(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return (float)(rng_state >> 8) / (float)(1u << 23) - 1.0f;
}

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* ---- half / bfloat16 ------------------------------------------------------- */

static void test_fp16_to_f32_specials(void)
{
	ASSERT_TRUE(shoal_fp16_to_f32(0x3c00) == 1.0f);
	ASSERT_TRUE(shoal_fp16_to_f32(0xc000) == -2.0f);
	ASSERT_TRUE(shoal_fp16_to_f32(0x7bff) == 65504.0f);
	ASSERT_TRUE(shoal_fp16_to_f32(0x0001) == 0x1p-24f);        /* smallest subnormal */
	ASSERT_TRUE(shoal_fp16_to_f32(0x03ff) == 1023 * 0x1p-24f); /* largest subnormal */
	ASSERT_TRUE(shoal_fp16_to_f32(0x0400) == 0x1p-14f);        /* smallest normal */
	ASSERT_TRUE(shoal_fp16_to_f32(0x3555) == 0x1.554p-2f);
	ASSERT_EQ(bits(shoal_fp16_to_f32(0x8000)), 0x80000000u); /* -0 */
	ASSERT_TRUE(isinf(shoal_fp16_to_f32(0x7c00)) && shoal_fp16_to_f32(0x7c00) > 0);
	ASSERT_TRUE(isinf(shoal_fp16_to_f32(0xfc00)) && shoal_fp16_to_f32(0xfc00) < 0);
	ASSERT_TRUE(isnan(shoal_fp16_to_f32(0x7e00)));
	ASSERT_TRUE(isnan(shoal_fp16_to_f32(0x7c01))); /* signalling NaN stays NaN */
}

static void test_f32_to_fp16_rounding(void)
{
	ASSERT_EQ(shoal_f32_to_fp16(1.0f), 0x3c00);
	ASSERT_EQ(shoal_f32_to_fp16(-0.0f), 0x8000);
	ASSERT_EQ(shoal_f32_to_fp16(65504.0f), 0x7bff);
	ASSERT_EQ(shoal_f32_to_fp16(65519.99f), 0x7bff); /* below the halfway point */
	ASSERT_EQ(shoal_f32_to_fp16(65520.0f), 0x7c00);  /* tie: 0x7bff is odd -> inf */
	ASSERT_EQ(shoal_f32_to_fp16(1e10f), 0x7c00);
	ASSERT_EQ(shoal_f32_to_fp16(-INFINITY), 0xfc00);
	ASSERT_EQ(shoal_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);     /* tie to even (down) */
	ASSERT_EQ(shoal_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even (up) */
	ASSERT_EQ(shoal_f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	ASSERT_EQ(shoal_f32_to_fp16(0x1p-25f), 0x0000);            /* tie: to even 0 */
	ASSERT_EQ(shoal_f32_to_fp16(0x1.000002p-25f), 0x0001);     /* just above: up */
	ASSERT_EQ(shoal_f32_to_fp16(3 * 0x1p-25f), 0x0002);        /* tie 1|2 -> 2 */
	ASSERT_EQ(shoal_f32_to_fp16(5 * 0x1p-25f), 0x0002);        /* tie 2|3 -> 2 */
	ASSERT_EQ(shoal_f32_to_fp16(0x1p-14f - 0x1p-26f), 0x0400); /* carries into normal */
	ASSERT_EQ(shoal_f32_to_fp16(1e-10f), 0x0000);
	ASSERT_EQ(shoal_f32_to_fp16(-1e-10f), 0x8000);
	uint16_t n = shoal_f32_to_fp16(NAN);
	ASSERT_TRUE((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
}

/* Every finite half converts to f32 and back to itself. */
static void test_fp16_roundtrip_all(void)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue; /* NaN */
		float f = shoal_fp16_to_f32((uint16_t)h);
		ASSERT_EQ(shoal_f32_to_fp16(f), h);
	}
}

/* For random floats the result is a nearest half, ties to even: checked
 * against the two neighbours in double arithmetic (exact for these values). */
static void test_fp16_nearest_random(void)
{
	for (int i = 0; i < 200000; i++) {
		float f = ldexpf(rnd(), (int)(rng_state % 44) - 28); /* 2^-29 .. 2^15 */
		uint16_t h = shoal_f32_to_fp16(f);
		double v = shoal_fp16_to_f32(h), e = fabs(v - (double)f);
		uint16_t mag = h & 0x7fff, sg = h & 0x8000;
		double up = shoal_fp16_to_f32((uint16_t)(sg | (mag + 1)));
		ASSERT_TRUE(e <= fabs(up - (double)f));
		if (e == fabs(up - (double)f))
			ASSERT_TRUE((h & 1) == 0);
		if (mag > 0) {
			double dn = shoal_fp16_to_f32((uint16_t)(sg | (mag - 1)));
			ASSERT_TRUE(e <= fabs(dn - (double)f));
			if (e == fabs(dn - (double)f))
				ASSERT_TRUE((h & 1) == 0);
		}
	}
}

static void test_bf16(void)
{
	ASSERT_EQ(shoal_f32_to_bf16(1.0f), 0x3f80);
	ASSERT_TRUE(shoal_bf16_to_f32(0x3f80) == 1.0f);
	ASSERT_TRUE(shoal_bf16_to_f32(0xc0a0) == -5.0f);
	ASSERT_EQ(shoal_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie to even (down) */
	ASSERT_EQ(shoal_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie to even (up) */
	ASSERT_EQ(shoal_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	ASSERT_EQ(shoal_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up to inf */
	ASSERT_EQ(shoal_f32_to_bf16(INFINITY), 0x7f80);
	ASSERT_EQ(shoal_f32_to_bf16(-INFINITY), 0xff80);
	ASSERT_EQ(shoal_f32_to_bf16(0x1p-133f), 0x0001); /* subnormal kept */
	uint16_t n = shoal_f32_to_bf16(NAN);
	ASSERT_TRUE((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
	float snan;
	uint32_t sn = 0x7f800001u; /* low payload only: truncation alone would give inf */
	memcpy(&snan, &sn, 4);
	ASSERT_TRUE(isnan(shoal_bf16_to_f32(shoal_f32_to_bf16(snan))));
}

/* ---- hand-built blocks --------------------------------------------------------- */

static void test_deq_q8_0(void)
{
	kernels__block_q8_0 b[2];
	b[0].d = 0x3800; /* 0.5 */
	b[1].d = 0xbc00; /* -1 */
	for (int j = 0; j < 32; j++) {
		b[0].qs[j] = (int8_t)(j - 16);
		b[1].qs[j] = (int8_t)(j == 0 ? -128 : 127 - j);
	}
	float y[64];
	shoal_dequantize_row(SHOAL_DTYPE_Q8_0, b, y, 64);
	for (int j = 0; j < 32; j++) {
		ASSERT_TRUE(y[j] == 0.5f * (j - 16));
		ASSERT_TRUE(y[32 + j] == -(float)(j == 0 ? -128 : 127 - j));
	}
}

static void test_deq_q4_0(void)
{
	kernels__block_q4_0 b;
	b.d = 0x4000; /* 2 */
	for (int j = 0; j < 16; j++)
		b.qs[j] = (uint8_t)(j | ((15 - j) << 4)); /* elem j = j, elem j+16 = 15-j */
	float y[32];
	shoal_dequantize_row(SHOAL_DTYPE_Q4_0, &b, y, 32);
	for (int j = 0; j < 16; j++) {
		ASSERT_TRUE(y[j] == 2.0f * (j - 8));
		ASSERT_TRUE(y[j + 16] == 2.0f * (15 - j - 8));
	}
	ASSERT_TRUE(y[0] == -16.0f && y[15] == 14.0f && y[16] == 14.0f && y[31] == -16.0f);
}

/* Q4_K with d = 1, dmin = 0.5 and sub-block scales / mins chosen so that the
 * 6-bit packing's high bits are exercised:
 *   sc = {1, 5, 10, 63, 17, 33, 48, 62},  m = {0, 3, 7, 12, 20, 40, 63, 16}
 * The 12 scale bytes, worked out by hand:
 *   [0..3]  sc0..3 | (sc4..7 >> 4) << 6 = 0x41 0x85 0xca 0xff
 *   [4..7]  m0..3  | (m4..7 >> 4) << 6  = 0x40 0x83 0xc7 0x4c
 *   [8..11] (sc4..7 & 15) | (m4..7 & 15) << 4 = 0x41 0x81 0xf0 0x0e
 * Quant of element l of sub-block j: (3 j + l) & 15; sub-blocks 2c and 2c+1
 * are the low and high nibbles of qs[32 c .. 32 c + 31]. */
static void test_deq_q4_k(void)
{
	static const int sc[8] = {1, 5, 10, 63, 17, 33, 48, 62};
	static const int m[8] = {0, 3, 7, 12, 20, 40, 63, 16};
	static const uint8_t packed[12] = {0x41, 0x85, 0xca, 0xff, 0x40, 0x83,
	                                   0xc7, 0x4c, 0x41, 0x81, 0xf0, 0x0e};
	kernels__block_q4_k b;
	b.d = 0x3c00;
	b.dmin = 0x3800;
	memcpy(b.scales, packed, 12);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++) {
			int lo = (3 * (2 * c) + l) & 15, hi = (3 * (2 * c + 1) + l) & 15;
			b.qs[32 * c + l] = (uint8_t)(lo | (hi << 4));
		}
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q4_K, &b, y, 256);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++) {
			float want = 1.0f * sc[j] * ((3 * j + l) & 15) - 0.5f * m[j];
			if (y[32 * j + l] != want)
				TEST_FAIL_("Q4_K elem %d: %g, want %g", 32 * j + l, y[32 * j + l],
				           want);
		}
}

/* The word-wise unpacking the SIMD kernels use agrees with the per-index
 * one on random scale bytes. */
static void test_q4k_unpack(void)
{
	for (int t = 0; t < 2000; t++) {
		uint8_t s[12];
		for (int i = 0; i < 12; i++)
			s[i] = (uint8_t)(rnd() * 128 + 128);
		uint64_t sc, m;
		kernels__q4k_unpack(s, &sc, &m);
		for (int j = 0; j < 8; j++) {
			int a, b;
			kernels__q4k_scale_min(s, j, &a, &b);
			ASSERT_EQ((sc >> (8 * j)) & 0xff, a);
			ASSERT_EQ((m >> (8 * j)) & 0xff, b);
		}
	}
}

/* Q6_K with d = 0.25, scales[j] = 3 j - 20 (negative ones too), and the
 * 6-bit quant of element i = (7 i + 5) & 63 (value q - 32). Per chunk of 128
 * (c = i / 128, e = i % 128, l = e % 32, part = e / 32), the low nibble is in
 * ql[64 c + l + 32 (part & 1)], low half for parts 0-1, high for 2-3; the two
 * high bits are bits 2 part .. 2 part + 1 of qh[32 c + l]. */
static void test_deq_q6_k(void)
{
	kernels__block_q6_k b;
	memset(&b, 0, sizeof b);
	b.d = 0x3400; /* 0.25 */
	for (int j = 0; j < 16; j++)
		b.scales[j] = (int8_t)(3 * j - 20);
	for (int i = 0; i < 256; i++) {
		int q = (7 * i + 5) & 63, c = i / 128, e = i % 128, l = e % 32, part = e / 32;
		int li = 64 * c + l + 32 * (part & 1);
		b.ql[li] |= (uint8_t)((q & 15) << (part >= 2 ? 4 : 0));
		b.qh[32 * c + l] |= (uint8_t)((q >> 4) << (2 * part));
	}
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q6_K, &b, y, 256);
	for (int i = 0; i < 256; i++) {
		float want = 0.25f * (3 * (i / 16) - 20) * (((7 * i + 5) & 63) - 32);
		if (y[i] != want)
			TEST_FAIL_("Q6_K elem %d: %g, want %g", i, y[i], want);
	}
}

static void test_deq_q8_k_f16_bf16(void)
{
	kernels__block_q8_k b;
	b.d = 0.125f;
	for (int i = 0; i < 256; i++)
		b.qs[i] = (int8_t)(i - 128);
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q8_K, &b, y, 256);
	for (int i = 0; i < 256; i++)
		ASSERT_TRUE(y[i] == 0.125f * (i - 128));
	uint16_t h[3] = {0x3c00, 0xc500, 0x0001}; /* 1, -5, 2^-24 */
	shoal_dequantize_row(SHOAL_DTYPE_F16, h, y, 3);
	ASSERT_TRUE(y[0] == 1.0f && y[1] == -5.0f && y[2] == 0x1p-24f);
	uint16_t bf[2] = {0x4049, 0xbf80}; /* 3.140625, -1 */
	shoal_dequantize_row(SHOAL_DTYPE_BF16, bf, y, 2);
	ASSERT_TRUE(y[0] == 3.140625f && y[1] == -1.0f);
}

/* Q5_0 (d = 0.5) and Q5_1 (d = 0.25, m = -2): the 5-bit quant of element j
 * is (7 j + 3) & 31; its low 4 bits go in qs[j % 16] (low nibble for j < 16,
 * high for j >= 16), its 5th bit at bit j of the little-endian qh word. */
static void test_deq_q5_0_q5_1(void)
{
	kernels__block_q5_0 a;
	kernels__block_q5_1 b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	a.d = 0x3800;
	b.d = 0x3400;
	b.m = 0xc000;
	for (int j = 0; j < 32; j++) {
		int q = (7 * j + 3) & 31;
		uint8_t lo = (uint8_t)((q & 15) << (j < 16 ? 0 : 4));
		a.qs[j % 16] |= lo;
		b.qs[j % 16] |= lo;
		a.qh[j / 8] |= (uint8_t)((q >> 4) << (j % 8));
		b.qh[j / 8] |= (uint8_t)((q >> 4) << (j % 8));
	}
	float y[32], z[32];
	shoal_dequantize_row(SHOAL_DTYPE_Q5_0, &a, y, 32);
	shoal_dequantize_row(SHOAL_DTYPE_Q5_1, &b, z, 32);
	for (int j = 0; j < 32; j++) {
		int q = (7 * j + 3) & 31;
		ASSERT_TRUE(y[j] == 0.5f * (q - 16));
		ASSERT_TRUE(z[j] == 0.25f * q - 2.0f);
	}
	ASSERT_TRUE(y[0] == -6.5f && z[31] == 0.25f * ((7 * 31 + 3) & 31) - 2.0f);
}

/* IQ4_NL (d = 2) and MXFP4 (e = 129: scale 4) hold table indices; element
 * j's index is (5 j + 1) & 15. The tables are written out here again:
 * IQ4_NL's grid and the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and
 * negatives, sign bit 3). */
static void test_deq_iq4_nl_mxfp4(void)
{
	static const float iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
	                              1,    13,   25,  38,  53,  69,  89,  113};
	static const float fp4[16] = {0,  0.5f,  1,  1.5f,  2,  3,  4,  6,
	                              -0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
	kernels__block_iq4_nl a;
	kernels__block_mxfp4 b[3];
	memset(&a, 0, sizeof a);
	memset(b, 0, sizeof b);
	a.d = 0x4000;
	b[0].e = 129;
	b[1].e = 1; /* 2^-126: a subnormal half scale */
	b[2].e = 254;
	for (int j = 0; j < 32; j++) {
		int q = (5 * j + 1) & 15;
		uint8_t v = (uint8_t)(q << (j < 16 ? 0 : 4));
		a.qs[j % 16] |= v;
		for (int k = 0; k < 3; k++)
			b[k].qs[j % 16] |= v;
	}
	float y[32], z[96];
	shoal_dequantize_row(SHOAL_DTYPE_IQ4_NL, &a, y, 32);
	shoal_dequantize_row(SHOAL_DTYPE_MXFP4, b, z, 96);
	for (int j = 0; j < 32; j++) {
		int q = (5 * j + 1) & 15;
		ASSERT_TRUE(y[j] == 2.0f * iq4[q]);
		ASSERT_TRUE(z[j] == 4.0f * fp4[q]);
		ASSERT_TRUE(z[32 + j] == 0x1p-126f * fp4[q]);
		ASSERT_TRUE(z[64 + j] == 0x1p127f * fp4[q]);
	}
}

/* Q2_K with d = 1, dmin = 0.5, scales[j] = j | (15 - j) << 4 (scale j, min
 * 15 - j); the 2-bit quant of element e is (3 e + 1) & 3, at bit
 * 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32]. */
static void test_deq_q2_k(void)
{
	kernels__block_q2_k b;
	memset(&b, 0, sizeof b);
	b.d = 0x3c00;
	b.dmin = 0x3800;
	for (int j = 0; j < 16; j++)
		b.scales[j] = (uint8_t)(j | ((15 - j) << 4));
	for (int e = 0; e < 256; e++)
		b.qs[32 * (e / 128) + e % 32] |=
		    (uint8_t)(((3 * e + 1) & 3) << (2 * ((e % 128) / 32)));
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q2_K, &b, y, 256);
	for (int e = 0; e < 256; e++) {
		int j = e / 16;
		float want = 1.0f * j * ((3 * e + 1) & 3) - 0.5f * (15 - j);
		if (y[e] != want)
			TEST_FAIL_("Q2_K elem %d: %g, want %g", e, y[e], want);
	}
}

/* Q3_K with d = 0.5 and scales sc_i = 3 i - 24 (stored + 32, 6 bits: the
 * low 4 in scales[i % 8], low nibble for i < 8; the top 2 at bit 2 (i / 4)
 * of scales[8 + i % 4]). Element e's 3-bit quant u = (5 e + 2) & 7 has its
 * low 2 bits as in Q2_K and its top bit at bit e / 32 of hmask[e % 32];
 * its value is 0.5 sc (u - 4). Also the bytes for one hand-worked case:
 * sc_0 = -32 (0), sc_4 = 31 (63), sc_8 = 0 (32), rest -32. */
static void test_deq_q3_k(void)
{
	kernels__block_q3_k b;
	memset(&b, 0, sizeof b);
	b.d = 0x3800;
	for (int i = 0; i < 16; i++) {
		int u = 3 * i - 24 + 32;
		b.scales[i % 8] |= (uint8_t)((u & 15) << (i < 8 ? 0 : 4));
		b.scales[8 + i % 4] |= (uint8_t)((u >> 4) << (2 * (i / 4)));
	}
	for (int e = 0; e < 256; e++) {
		int u = (5 * e + 2) & 7;
		b.qs[32 * (e / 128) + e % 32] |= (uint8_t)((u & 3) << (2 * ((e % 128) / 32)));
		b.hmask[e % 32] |= (uint8_t)((u >> 2) << (e / 32));
	}
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q3_K, &b, y, 256);
	for (int e = 0; e < 256; e++) {
		float want = 0.5f * (3 * (e / 16) - 24) * (((5 * e + 2) & 7) - 4);
		if (y[e] != want)
			TEST_FAIL_("Q3_K elem %d: %g, want %g", e, y[e], want);
	}
	/* hand-worked: 63 = 0b11'1111 at i = 4 -> scales[4] low nibble 0xf,
	 * scales[8] bits 2-3 = 3; 32 = 0b10'0000 at i = 8 -> scales[0] high
	 * nibble 0, scales[8] bits 4-5 = 2: scales[8] = 0x2c */
	static const uint8_t packed[12] = {0, 0, 0, 0, 0x0f, 0, 0, 0, 0x2c, 0, 0, 0};
	int8_t sc[16];
	kernels__q3k_scales(packed, sc);
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(sc[i], i == 4 ? 31 : i == 8 ? 0 : -32);
}

/* Q5_K: the Q4_K scales of test_deq_q4_k, d = 1, dmin = 0.5; element l of
 * sub-block j has the 5-bit quant (3 j + l) & 31: low nibble as Q4_K, 5th
 * bit at bit j of qh[l]. */
static void test_deq_q5_k(void)
{
	static const int sc[8] = {1, 5, 10, 63, 17, 33, 48, 62};
	static const int m[8] = {0, 3, 7, 12, 20, 40, 63, 16};
	static const uint8_t packed[12] = {0x41, 0x85, 0xca, 0xff, 0x40, 0x83,
	                                   0xc7, 0x4c, 0x41, 0x81, 0xf0, 0x0e};
	kernels__block_q5_k b;
	memset(&b, 0, sizeof b);
	b.d = 0x3c00;
	b.dmin = 0x3800;
	memcpy(b.scales, packed, 12);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++) {
			int q = (3 * j + l) & 31;
			b.qs[32 * (j / 2) + l] |= (uint8_t)((q & 15) << (j % 2 ? 4 : 0));
			b.qh[l] |= (uint8_t)((q >> 4) << j);
		}
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_Q5_K, &b, y, 256);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++) {
			float want = 1.0f * sc[j] * ((3 * j + l) & 31) - 0.5f * m[j];
			if (y[32 * j + l] != want)
				TEST_FAIL_("Q5_K elem %d: %g, want %g", 32 * j + l, y[32 * j + l],
				           want);
		}
}

/* IQ4_XS with d = 0.5 and sub-block scales ls_j = 5 j + 3 (value ls - 32;
 * low 4 bits in scales_l[j / 2], low nibble for even j; top 2 bits at bit
 * 2 j of scales_h); element l of sub-block j has index (l + j) & 15 in the
 * IQ4_NL layout of qs[16 j ..]. */
static void test_deq_iq4_xs(void)
{
	static const float iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
	                              1,    13,   25,  38,  53,  69,  89,  113};
	kernels__block_iq4_xs b;
	memset(&b, 0, sizeof b);
	b.d = 0x3800;
	for (int j = 0; j < 8; j++) {
		int ls = 5 * j + 3;
		b.scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
		b.scales_h |= (uint16_t)((ls >> 4) << (2 * j));
		for (int l = 0; l < 32; l++)
			b.qs[16 * j + l % 16] |= (uint8_t)(((l + j) & 15) << (l < 16 ? 0 : 4));
	}
	float y[256];
	shoal_dequantize_row(SHOAL_DTYPE_IQ4_XS, &b, y, 256);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++) {
			float want = 0.5f * (5 * j + 3 - 32) * iq4[(l + j) & 15];
			if (y[32 * j + l] != want)
				TEST_FAIL_("IQ4_XS elem %d: %g, want %g", 32 * j + l, y[32 * j + l],
				           want);
		}
}

/* ---- the IQ grid types: hand-built blocks ------------------------------------------
 * Each block is written byte by byte from the GGUF layout (offsets below),
 * with d = 0.5 (fp16 0x3800), each group of 8 elements using one of the
 * grid entries stated here (the format's grids: index -> values), the
 * last entry of each grid among them; the wanted values follow the
 * format's rules, computed here. Each block is also multiplied on every
 * kernel table with a Q8_K row and checked against the dot of those values. */

static const int iq2_idx_xxs[3] = {0, 1, 255}, iq2_idx_xs[3] = {0, 1, 511};
static const int iq2_idx_s[3] = {0, 1, 1023};
static const uint8_t iq2xxs_e[3][8] = {
    {8, 8, 8, 8, 8, 8, 8, 8}, {43, 8, 8, 8, 8, 8, 8, 8}, {8, 25, 8, 8, 25, 43, 43, 43}};
static const uint8_t iq2xs_e[3][8] = {/* IQ2_XS 0, 1, 511 and IQ2_S 0, 1, 1023 */
                                      {8, 8, 8, 8, 8, 8, 8, 8},
                                      {43, 8, 8, 8, 8, 8, 8, 8},
                                      {43, 43, 43, 43, 43, 43, 43, 43}};
static const int iq3_idx_xxs[3] = {0, 1, 255}, iq3_idx_s[3] = {0, 1, 511};
static const uint8_t iq3xxs_e[3][4] = {{4, 4, 4, 4}, {20, 4, 4, 4}, {4, 28, 52, 62}};
static const uint8_t iq3s_e[3][4] = {{1, 1, 1, 1}, {3, 1, 1, 1}, {1, 1, 15, 15}};
static const int iq1_idx[4] = {0, 1, 2047, 37};
static const int8_t iq1_e[4][8] = {{-1, -1, -1, -1, -1, -1, -1, -1},
                                   {1, -1, -1, -1, -1, -1, -1, -1},
                                   {1, 1, 1, 1, 1, 1, 1, 1},
                                   {0, 0, 0, 0, 0, -1, -1, -1}};

/* The 8 signs of 7 stored bits: the 8th makes the count of set bits even. */
static unsigned iq_signs7(unsigned s7)
{
	return s7 | (unsigned)(__builtin_popcount(s7) & 1) << 7;
}

static float iq_sign(unsigned s8, int j)
{
	return (s8 >> j) & 1 ? -1.0f : 1.0f;
}

static void iq_put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void iq_put32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* Dequantize blk (type t) and compare with want bit for bit; then its dot
 * with a Q8_K row on every table. */
static void iq_check(shoal_dtype t, const void *blk, const float *want)
{
	float y[256];
	shoal_dequantize_row(t, blk, y, 256);
	for (int e = 0; e < 256; e++)
		if (bits(y[e]) != bits(want[e])) {
			TEST_FAIL_("%s elem %d: %g, want %g", shoal_dtype_name(t), e, y[e],
			           want[e]);
			return;
		}
	kernels__block_q8_k x;
	memset(&x, 0, sizeof x);
	x.d = 0.25f;
	double dot = 0.0, mag = 0.0;
	for (int e = 0; e < 256; e++) {
		x.qs[e] = (int8_t)((e * 7) % 23 - 11);
		x.bsums[e / 16] = (int16_t)(x.bsums[e / 16] + x.qs[e]);
		dot += (double)want[e] * 0.25 * x.qs[e];
		mag += fabs((double)want[e] * 0.25 * x.qs[e]);
	}
	static const char *const isas[] = {"scalar", "avx2", "avx512bw",
	                                   "avx512", "neon", "neon-base"};
	for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
		const shoal_kernels *k = shoal_kernels_by_name(isas[i]);
		if (!k)
			continue;
		float out = 0.0f;
		k->gemv(t, 256, blk, shoal_dtype_block_bytes(t), 1, &x, &out);
		if (!(fabs(out - dot) <= 1e-6 * mag))
			TEST_FAIL_("%s on %s: dot %.9g, want %.9g", shoal_dtype_name(t), k->isa,
			           out, dot);
	}
}

/* IQ2_XXS (66 bytes): d at 0; per sub-block ib at 2 + 8 ib: 4 grid indices,
 * then a u32 of 4 x 7 sign bits (group l at bit 7 l) and ls in bits 28-31;
 * x = d (0.5 + ls) / 4 * grid * sign. */
static void test_deq_iq2_xxs(void)
{
	uint8_t raw[66] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls = (3 * ib + 1) & 15;
		uint32_t aux = (uint32_t)ls << 28;
		for (int l = 0; l < 4; l++) {
			int k = (ib + l) % 3;
			unsigned s7 = (5 * ib + 3 * l + 1) & 127, s8 = iq_signs7(s7);
			raw[2 + 8 * ib + l] = (uint8_t)iq2_idx_xxs[k];
			aux |= s7 << (7 * l);
			float db = 0.5f * (0.5f + (float)ls) * 0.25f;
			for (int j = 0; j < 8; j++)
				want[32 * ib + 8 * l + j] = db * iq2xxs_e[k][j] * iq_sign(s8, j);
		}
		iq_put32(raw + 2 + 8 * ib + 4, aux);
	}
	iq_check(SHOAL_DTYPE_IQ2_XXS, raw, want);
}

/* IQ2_XS (74 bytes): d at 0; u16 per group of 8 at 2 + 2 (4 ib + l): grid
 * index (9 bits) | 7 sign bits << 9; scales at 66: per sub-block ls of
 * elements 0-15 (low nibble) and 16-31 (high); x = d (0.5 + ls) / 4 * grid
 * * sign. */
static void test_deq_iq2_xs(void)
{
	uint8_t raw[74] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls[2] = {(3 * ib + 1) & 15, (7 * ib + 15) & 15};
		raw[66 + ib] = (uint8_t)(ls[0] | ls[1] << 4);
		for (int l = 0; l < 4; l++) {
			int k = (ib + l) % 3;
			unsigned s7 = (5 * ib + 3 * l + 1) & 127, s8 = iq_signs7(s7);
			iq_put16(raw + 2 + 2 * (4 * ib + l), (unsigned)iq2_idx_xs[k] | s7 << 9);
			float db = 0.5f * (0.5f + (float)ls[l / 2]) * 0.25f;
			for (int j = 0; j < 8; j++)
				want[32 * ib + 8 * l + j] = db * iq2xs_e[k][j] * iq_sign(s8, j);
		}
	}
	iq_check(SHOAL_DTYPE_IQ2_XS, raw, want);
}

/* IQ2_S (82 bytes): d at 0; the low 8 index bits per group at 2 + 4 ib + l,
 * its 8 sign bits at 34 + 4 ib + l; qh at 66: bits 2l, 2l+1 of byte ib the
 * index's bits 8-9; scales at 74 as IQ2_XS. */
static void test_deq_iq2_s(void)
{
	uint8_t raw[82] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls[2] = {(3 * ib + 1) & 15, (7 * ib + 15) & 15};
		raw[74 + ib] = (uint8_t)(ls[0] | ls[1] << 4);
		for (int l = 0; l < 4; l++) {
			int k = (ib + l) % 3, idx = iq2_idx_s[k];
			unsigned s8 = (37 * ib + 11 * l + 5) & 255;
			raw[2 + 4 * ib + l] = (uint8_t)(idx & 255);
			raw[34 + 4 * ib + l] = (uint8_t)s8;
			raw[66 + ib] |= (uint8_t)((idx >> 8) << (2 * l));
			float db = 0.5f * (0.5f + (float)ls[l / 2]) * 0.25f;
			for (int j = 0; j < 8; j++)
				want[32 * ib + 8 * l + j] = db * iq2xs_e[k][j] * iq_sign(s8, j);
		}
	}
	iq_check(SHOAL_DTYPE_IQ2_S, raw, want);
}

/* IQ3_XXS (98 bytes): d at 0; 64 grid indices (4 elements each) at 2; per
 * sub-block a u32 at 66 + 4 ib as IQ2_XXS's; x = d (0.5 + ls) / 2 * grid *
 * sign. */
static void test_deq_iq3_xxs(void)
{
	uint8_t raw[98] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls = (3 * ib + 2) & 15;
		uint32_t aux = (uint32_t)ls << 28;
		for (int l = 0; l < 4; l++) {
			unsigned s7 = (9 * ib + 5 * l + 3) & 127, s8 = iq_signs7(s7);
			aux |= s7 << (7 * l);
			float db = 0.5f * (0.5f + (float)ls) * 0.5f;
			for (int m = 0; m < 2; m++) {
				int k = (ib + l + m) % 3;
				raw[2 + 8 * ib + 2 * l + m] = (uint8_t)iq3_idx_xxs[k];
				for (int j = 0; j < 4; j++)
					want[32 * ib + 8 * l + 4 * m + j] =
					    db * iq3xxs_e[k][j] * iq_sign(s8, 4 * m + j);
			}
		}
		iq_put32(raw + 66 + 4 * ib, aux);
	}
	iq_check(SHOAL_DTYPE_IQ3_XXS, raw, want);
}

/* IQ3_S (110 bytes): d at 0; index low bytes at 2 (4 elements each); qh at
 * 66: bit m of byte ib is bit 8 of index 8 ib + m; signs at 74 (8 per group
 * of 8); scales at 106: ls of sub-block 2p (low nibble), 2p+1 (high); x =
 * d (1 + 2 ls) * grid * sign. */
static void test_deq_iq3_s(void)
{
	uint8_t raw[110] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls = (5 * ib + 4) & 15;
		raw[106 + ib / 2] |= (uint8_t)(ls << (4 * (ib % 2)));
		for (int l = 0; l < 4; l++) {
			unsigned s8 = (29 * ib + 13 * l + 7) & 255;
			raw[74 + 4 * ib + l] = (uint8_t)s8;
			float db = 0.5f * (float)(1 + 2 * ls);
			for (int m = 0; m < 2; m++) {
				int k = (ib + l + m) % 3, idx = iq3_idx_s[k];
				raw[2 + 8 * ib + 2 * l + m] = (uint8_t)(idx & 255);
				raw[66 + ib] |= (uint8_t)((idx >> 8) << (2 * l + m));
				for (int j = 0; j < 4; j++)
					want[32 * ib + 8 * l + 4 * m + j] =
					    db * iq3s_e[k][j] * iq_sign(s8, 4 * m + j);
			}
		}
	}
	iq_check(SHOAL_DTYPE_IQ3_S, raw, want);
}

/* IQ1_S (50 bytes): d at 0; index low bytes at 2 + 4 ib + l; a u16 per
 * sub-block at 34 + 2 ib: bits 3l..3l+2 the index's bits 8-10, ls in bits
 * 12-14, bit 15 the delta's sign; x = d (2 ls + 1) (grid +- 1/8). */
static void test_deq_iq1_s(void)
{
	uint8_t raw[50] = {0};
	float want[256];
	iq_put16(raw, 0x3800);
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls = (3 * ib + 2) & 7, neg = ib & 1, h = ls << 12 | neg << 15;
		float dl = 0.5f * (float)(2 * ls + 1), delta = neg ? -0.125f : 0.125f;
		for (int l = 0; l < 4; l++) {
			int k = (ib + l) % 4, idx = iq1_idx[k];
			raw[2 + 4 * ib + l] = (uint8_t)(idx & 255);
			h |= (unsigned)(idx >> 8) << (3 * l);
			for (int j = 0; j < 8; j++)
				want[32 * ib + 8 * l + j] = dl * ((float)iq1_e[k][j] + delta);
		}
		iq_put16(raw + 34 + 2 * ib, h);
	}
	iq_check(SHOAL_DTYPE_IQ1_S, raw, want);
}

/* IQ1_M (56 bytes): index low bytes at 4 ib + l; qh at 32: byte 2 ib + l / 2,
 * nibble l % 2: the index's bits 8-10 and (bit 3) the delta's sign; scales
 * at 48 as 4 u16: ls of the 16 elements 16 h of sub-block ib at bits 6 (ib
 * % 2) + 3 h of u16 ib / 2, and the top nibbles of the 4 (u16 k's at bits
 * 4k) the fp16 d; x = d (2 ls + 1) (grid +- 1/8). */
static void test_deq_iq1_m(void)
{
	uint8_t raw[56] = {0};
	unsigned sc[4] = {0, 0, 0, 0};
	float want[256];
	for (int k = 0; k < 4; k++)
		sc[k] = ((0x3800u >> (4 * k)) & 15) << 12;
	for (int ib = 0; ib < 8; ib++) {
		unsigned ls[2] = {(3 * ib + 2) & 7, (5 * ib + 7) & 7};
		sc[ib / 2] |= (ls[0] | ls[1] << 3) << (6 * (ib % 2));
		for (int l = 0; l < 4; l++) {
			int k = (ib + l) % 4, idx = iq1_idx[k];
			unsigned neg = (ib + (l >> 1) + l) & 1;
			raw[4 * ib + l] = (uint8_t)(idx & 255);
			raw[32 + 2 * ib + l / 2] |=
			    (uint8_t)(((unsigned)(idx >> 8) | neg << 3) << (4 * (l % 2)));
			float dl = 0.5f * (float)(2 * ls[l / 2] + 1),
			      delta = neg ? -0.125f : 0.125f;
			for (int j = 0; j < 8; j++)
				want[32 * ib + 8 * l + j] = dl * ((float)iq1_e[k][j] + delta);
		}
	}
	for (int k = 0; k < 4; k++)
		iq_put16(raw + 48 + 2 * k, sc[k]);
	iq_check(SHOAL_DTYPE_IQ1_M, raw, want);
}

/* ---- quantize -> dequantize ---------------------------------------------------- */

#define RT_N 1024

static void fill_random(float *x, int n, float scale)
{
	for (int i = 0; i < n; i++)
		x[i] = scale * rnd() * (1.0f + (float)(i % 7)); /* uneven magnitudes */
}

static float block_amax(const float *x, int n)
{
	float a = 0;
	for (int i = 0; i < n; i++)
		a = fmaxf(a, fabsf(x[i]));
	return a;
}

/* Q8_0 is the reference's rule exactly; the error is at most half a step of
 * amax / 127 plus the fp16 rounding of d (2^-11 relative, times 127 quants). */
static void test_roundtrip_q8_0(void)
{
	float x[RT_N], y[RT_N];
	kernels__block_q8_0 b[RT_N / 32];
	fill_random(x, RT_N, 3.0f);
	x[5] = 0; /* a zero block too */
	for (int i = 64; i < 96; i++)
		x[i] = 0;
	shoal_quantize_row(SHOAL_DTYPE_Q8_0, x, b, RT_N);
	shoal_dequantize_row(SHOAL_DTYPE_Q8_0, b, y, RT_N);
	for (int k = 0; k < RT_N / 32; k++) {
		float amax = block_amax(x + 32 * k, 32);
		float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
		ASSERT_EQ(b[k].d, shoal_f32_to_fp16(d));
		for (int j = 0; j < 32; j++) {
			ASSERT_EQ(b[k].qs[j], (int)roundf(x[32 * k + j] * id));
			ASSERT_NEAR(y[32 * k + j], x[32 * k + j],
			            d * (0.5f + 127 * 0x1p-11f) + 1e-30f);
		}
	}
}

/* Tiny blocks (1 / d overflows to inf) and non-finite values: every q is 0,
 * a defined result instead of an out-of-range float-to-int conversion. */
static void test_q8_0_nonfinite(void)
{
	float x[64];
	kernels__block_q8_0 b[2];
	for (int j = 0; j < 32; j++)
		x[j] = (j % 2 ? -1e-38f : 1e-38f) * (float)(j % 5);
	for (int j = 32; j < 64; j++)
		x[j] = j == 33 ? NAN : j == 34 ? -INFINITY : 1.0f;
	shoal_quantize_row(SHOAL_DTYPE_Q8_0, x, b, 64);
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 32; j++)
			if (k == 0 || j == 1 || j == 2)
				ASSERT_EQ(b[k].qs[j], 0);
}

static void test_roundtrip_q4_0(void)
{
	float x[RT_N], y[RT_N];
	kernels__block_q4_0 b[RT_N / 32];
	fill_random(x, RT_N, 1.0f);
	shoal_quantize_row(SHOAL_DTYPE_Q4_0, x, b, RT_N);
	shoal_dequantize_row(SHOAL_DTYPE_Q4_0, b, y, RT_N);
	for (int k = 0; k < RT_N / 32; k++) {
		/* step = amax / 8; the far end (+amax against -8..7) clips by one step */
		float step = block_amax(x + 32 * k, 32) / 8.0f * (1 + 0x1p-10f);
		for (int j = 0; j < 32; j++)
			ASSERT_NEAR(y[32 * k + j], x[32 * k + j], step);
	}
}

/* Q4_K: the step of sub-block j is d * sc_j >= range_j / 15 (the scale is
 * rounded up) and at most range_j / 15 + d, with d = max range / (15 * 63)
 * (fp16); the min is rounded to the nearest dmin step. So the error is at
 * most half a step plus half a dmin step. */
static void test_roundtrip_q4_k(void)
{
	float x[RT_N], y[RT_N];
	kernels__block_q4_k b[RT_N / 256];
	fill_random(x, RT_N, 1.0f);
	for (int i = 0; i < 32; i++)
		x[256 + i] = fabsf(x[256 + i]) + 0.5f; /* a sub-block with a positive min */
	shoal_quantize_row(SHOAL_DTYPE_Q4_K, x, b, RT_N);
	shoal_dequantize_row(SHOAL_DTYPE_Q4_K, b, y, RT_N);
	for (int k = 0; k < RT_N / 256; k++) {
		float d = shoal_fp16_to_f32(b[k].d), dmin = shoal_fp16_to_f32(b[k].dmin);
		for (int j = 0; j < 8; j++) {
			const float *xs = x + 256 * k + 32 * j;
			float lo = 0, hi = 0;
			for (int l = 0; l < 32; l++) {
				lo = fminf(lo, xs[l]);
				hi = fmaxf(hi, xs[l]);
			}
			float step = (hi - lo) / 15.0f + d;
			for (int l = 0; l < 32; l++)
				ASSERT_NEAR(y[256 * k + 32 * j + l], xs[l],
				            0.5f * step + 0.5f * dmin + 1e-6f);
		}
	}
}

/* Q6_K: step of sub-block j = d * sc_j in [amax_j / 31, amax_j / 31 + d]. */
static void test_roundtrip_q6_k(void)
{
	float x[RT_N], y[RT_N];
	kernels__block_q6_k b[RT_N / 256];
	fill_random(x, RT_N, 2.0f);
	shoal_quantize_row(SHOAL_DTYPE_Q6_K, x, b, RT_N);
	shoal_dequantize_row(SHOAL_DTYPE_Q6_K, b, y, RT_N);
	for (int k = 0; k < RT_N / 256; k++) {
		float d = shoal_fp16_to_f32(b[k].d);
		for (int j = 0; j < 16; j++) {
			const float *xs = x + 256 * k + 16 * j;
			float step = block_amax(xs, 16) / 31.0f + d;
			for (int l = 0; l < 16; l++)
				ASSERT_NEAR(y[256 * k + 16 * j + l], xs[l], 0.5f * step + 1e-6f);
		}
	}
}

/* The 32-element types: Q5_0 as Q4_0 (one step, the far end clips); Q5_1
 * half a step of (max - min) / 31 plus the fp16 roundings of d and m;
 * IQ4_NL at most 14 grid units (113 against 127 at the far end; gaps are
 * <= 23, half is 11.5) of d; MXFP4 at most half its largest gap (1 E2M1
 * unit, 2^(e - 127)), and every block's e covers its amax. */
static void test_roundtrip_q32_types(void)
{
	float x[RT_N], y[RT_N];
	static unsigned char buf[RT_N * 2];
	fill_random(x, RT_N, 1.5f);
	for (int i = 64; i < 96; i++)
		x[i] = 0; /* a zero block */
	x[200] = 1e-3f;
	static const shoal_dtype ts[] = {SHOAL_DTYPE_Q5_0, SHOAL_DTYPE_Q5_1, SHOAL_DTYPE_IQ4_NL,
	                                 SHOAL_DTYPE_MXFP4};
	for (int t = 0; t < 4; t++) {
		size_t bs = shoal_dtype_block_bytes(ts[t]);
		shoal_quantize_row(ts[t], x, buf, RT_N);
		shoal_dequantize_row(ts[t], buf, y, RT_N);
		for (int k = 0; k < RT_N / 32; k++) {
			const float *xs = x + 32 * k;
			const unsigned char *blk = buf + bs * (size_t)k;
			float amax = block_amax(xs, 32), bound = 0;
			if (ts[t] == SHOAL_DTYPE_Q5_0) {
				bound = amax / 16.0f * (1 + 0x1p-10f);
			} else if (ts[t] == SHOAL_DTYPE_Q5_1) {
				float lo = xs[0], hi = xs[0];
				for (int j = 1; j < 32; j++) {
					lo = fminf(lo, xs[j]);
					hi = fmaxf(hi, xs[j]);
				}
				bound = 0.5f * (hi - lo) / 31.0f * (1 + 0x1p-9f) +
				        fabsf(lo) * 0x1p-11f + (hi - lo) * 0x1p-11f;
			} else if (ts[t] == SHOAL_DTYPE_IQ4_NL) {
				bound = 14.0f *
				        fabsf(shoal_fp16_to_f32(
				            ((const kernels__block_iq4_nl *)blk)->d)) *
				        (1 + 0x1p-10f);
			} else {
				int e = ((const kernels__block_mxfp4 *)blk)->e;
				ASSERT_TRUE(amax == 0 ? e == 0 : 6 * ldexpf(1, e - 127) >= amax);
				ASSERT_TRUE(e <= 1 || 6 * ldexpf(1, e - 128) < amax);
				bound = ldexpf(1, e - 127);
			}
			for (int j = 0; j < 32; j++)
				if (!(fabsf(y[32 * k + j] - xs[j]) <= bound + 1e-7f))
					TEST_FAIL_("%s elem %d: %g vs %g (bound %g)",
					           shoal_dtype_name(ts[t]), 32 * k + j,
					           y[32 * k + j], xs[j], bound);
		}
	}
}

/* Q5_K as Q4_K with 31 steps; Q2_K as Q4_K with 3 steps and 4-bit scales
 * and mins, per 16 (d = max range / 45, dmin = max min / 15); Q3_K: the
 * step ds_j = d sc_j is within d / 2 of s_j = amax_j / 4, and elements
 * clip by one step at the far end: |err| <= |ds_j| + 2 |d|; IQ4_XS: dl_j
 * within d / 2 of amax_j / 127: 14 |dl_j| (as IQ4_NL) + 127 |d| / 2. */
static void test_roundtrip_k_types(void)
{
	float x[RT_N], y[RT_N];
	static unsigned char buf[RT_N];
	fill_random(x, RT_N, 1.0f);
	for (int i = 0; i < 32; i++)
		x[256 + i] = fabsf(x[256 + i]) + 0.5f; /* a sub-block with a positive min */
	for (int i = 512; i < 544; i++)
		x[i] = 0;
	static const shoal_dtype ts[] = {SHOAL_DTYPE_Q5_K, SHOAL_DTYPE_Q2_K, SHOAL_DTYPE_Q3_K,
	                                 SHOAL_DTYPE_IQ4_XS};
	for (int t = 0; t < 4; t++) {
		size_t bs = shoal_dtype_block_bytes(ts[t]);
		shoal_quantize_row(ts[t], x, buf, RT_N);
		shoal_dequantize_row(ts[t], buf, y, RT_N);
		int sub = ts[t] == SHOAL_DTYPE_Q5_K || ts[t] == SHOAL_DTYPE_IQ4_XS ? 32 : 16;
		for (int k = 0; k < RT_N / 256; k++) {
			const unsigned char *blk = buf + bs * (size_t)k;
			for (int j = 0; j < 256 / sub; j++) {
				const float *xs = x + 256 * k + sub * j;
				float lo = 0, hi = 0, bound = 0;
				for (int l = 0; l < sub; l++) {
					lo = fminf(lo, xs[l]);
					hi = fmaxf(hi, xs[l]);
				}
				if (ts[t] == SHOAL_DTYPE_Q5_K) {
					const kernels__block_q5_k *b = (const void *)blk;
					bound =
					    0.5f * ((hi - lo) / 31.0f + shoal_fp16_to_f32(b->d)) +
					    0.5f * shoal_fp16_to_f32(b->dmin);
				} else if (ts[t] == SHOAL_DTYPE_Q2_K) {
					const kernels__block_q2_k *b = (const void *)blk;
					bound =
					    0.5f * ((hi - lo) / 3.0f + shoal_fp16_to_f32(b->d)) +
					    0.5f * shoal_fp16_to_f32(b->dmin);
				} else if (ts[t] == SHOAL_DTYPE_Q3_K) {
					const kernels__block_q3_k *b = (const void *)blk;
					int8_t sc[16];
					kernels__q3k_scales(b->scales, sc);
					float d = fabsf(shoal_fp16_to_f32(b->d));
					bound = fabsf(d * sc[j]) + 2 * d;
				} else {
					const kernels__block_iq4_xs *b = (const void *)blk;
					float d = fabsf(shoal_fp16_to_f32(b->d));
					bound =
					    14 * fabsf(d * kernels__iq4xs_scale(b, j)) + 63.5f * d;
				}
				for (int l = 0; l < sub; l++)
					if (!(fabsf(y[256 * k + sub * j + l] - xs[l]) <=
					      bound + 1e-6f))
						TEST_FAIL_("%s elem %d: %g vs %g (bound %g)",
						           shoal_dtype_name(ts[t]),
						           256 * k + sub * j + l,
						           y[256 * k + sub * j + l], xs[l], bound);
			}
		}
	}
}

/* The IQ types' plain quantizer (quant.c): on uneven random rows the
 * relative rms error of quantize -> dequantize stays under a bound per
 * type, about 1.3x what it measured (IQ2_XXS 0.343, IQ2_XS 0.301, IQ2_S
 * 0.265, IQ3_XXS 0.183, IQ3_S 0.132, IQ1_S 0.534, IQ1_M 0.472; 1.0 is what
 * zeros give), and a zero block stays 0. */
static void test_roundtrip_iq_types(void)
{
	static const struct {
		shoal_dtype t;
		double bound;
	} ts[] = {{SHOAL_DTYPE_IQ2_XXS, 0.45}, {SHOAL_DTYPE_IQ2_XS, 0.40},
	          {SHOAL_DTYPE_IQ2_S, 0.35},   {SHOAL_DTYPE_IQ3_XXS, 0.24},
	          {SHOAL_DTYPE_IQ3_S, 0.18},   {SHOAL_DTYPE_IQ1_S, 0.70},
	          {SHOAL_DTYPE_IQ1_M, 0.62}};
	float x[RT_N], y[RT_N];
	static unsigned char buf[RT_N];
	fill_random(x, RT_N, 1.0f);
	for (int i = 512; i < 768; i++)
		x[i] = 0;
	for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
		shoal_quantize_row(ts[t].t, x, buf, RT_N);
		shoal_dequantize_row(ts[t].t, buf, y, RT_N);
		double e = 0, s = 0;
		for (int i = 0; i < RT_N; i++) {
			e += (double)(y[i] - x[i]) * (y[i] - x[i]);
			s += (double)x[i] * x[i];
			if (i >= 512 && i < 768 && y[i] != 0.0f)
				TEST_FAIL_("%s: zero block elem %d is %g",
				           shoal_dtype_name(ts[t].t), i, y[i]);
		}
		printf("  %s: relative rms error %.3f\n", shoal_dtype_name(ts[t].t), sqrt(e / s));
		ASSERT_TRUE(sqrt(e / s) <= ts[t].bound);
	}
}

/* Q8_K: the element of largest magnitude maps to -127 (d carries the sign),
 * every quant is in [-127, 127], bsums are sums of 16, error <= |d| / 2. */
static void test_roundtrip_q8_k(void)
{
	float x[RT_N], y[RT_N];
	kernels__block_q8_k b[RT_N / 256];
	fill_random(x, RT_N, 5.0f);
	x[300] = 100.0f;  /* positive largest in block 1 */
	x[600] = -100.0f; /* negative largest in block 2 */
	for (int i = 768; i < 1024; i++)
		x[i] = 0; /* all-zero block 3 */
	shoal_quantize_row(SHOAL_DTYPE_Q8_K, x, b, RT_N);
	shoal_dequantize_row(SHOAL_DTYPE_Q8_K, b, y, RT_N);
	ASSERT_EQ(b[1].qs[300 - 256], -127);
	ASSERT_TRUE(b[1].d < 0);
	ASSERT_EQ(b[2].qs[600 - 512], -127);
	ASSERT_TRUE(b[2].d > 0);
	ASSERT_TRUE(b[3].d == 0.0f);
	for (int k = 0; k < RT_N / 256; k++) {
		for (int j = 0; j < 16; j++) {
			int s = 0;
			for (int l = 0; l < 16; l++) {
				ASSERT_TRUE(b[k].qs[16 * j + l] >= -127);
				s += b[k].qs[16 * j + l];
			}
			ASSERT_EQ(b[k].bsums[j], s);
		}
		for (int i = 0; i < 256; i++)
			ASSERT_NEAR(y[256 * k + i], x[256 * k + i], fabsf(b[k].d) * 0.5001f);
	}
}

static void test_roundtrip_plain(void)
{
	float x[64], y[64];
	uint16_t h[64];
	fill_random(x, 64, 100.0f);
	shoal_quantize_row(SHOAL_DTYPE_F16, x, h, 64);
	shoal_dequantize_row(SHOAL_DTYPE_F16, h, y, 64);
	for (int i = 0; i < 64; i++)
		ASSERT_NEAR(y[i], x[i], fabsf(x[i]) * 0x1p-11f);
	shoal_quantize_row(SHOAL_DTYPE_BF16, x, h, 64);
	shoal_dequantize_row(SHOAL_DTYPE_BF16, h, y, 64);
	for (int i = 0; i < 64; i++)
		ASSERT_NEAR(y[i], x[i], fabsf(x[i]) * 0x1p-8f);
	shoal_quantize_row(SHOAL_DTYPE_F32, x, y, 64);
	ASSERT_MEM_EQ(x, y, sizeof x);
	ASSERT_TRUE(shoal_quant_supported(SHOAL_DTYPE_Q6_K));
	ASSERT_TRUE(shoal_quant_supported(SHOAL_DTYPE_Q5_K));
	ASSERT_FALSE(shoal_quant_supported(SHOAL_DTYPE_Q4_1));
}

/* Q8_K rounds ties to even (the reference's nearest_int), Q8_0 away from
 * zero (roundf): blocks built so that x * iscale hits exact halves. */
static void test_activation_ties(void)
{
	float x[256];
	/* Q8_K: max = -127 gives iscale = -127 / max = 1 (d = 1), so q = rint(x) */
	for (int i = 0; i < 256; i++)
		x[i] = (float)((i % 9) - 4) + ((i % 3) ? 0.5f : 0.25f);
	x[0] = -127.0f;
	kernels__block_q8_k k;
	shoal_quantize_row(SHOAL_DTYPE_Q8_K, x, &k, 256);
	ASSERT_TRUE(k.d == 1.0f);
	for (int i = 0; i < 256; i++)
		ASSERT_EQ(k.qs[i], (int)rintf(x[i]));
	ASSERT_EQ(k.qs[1], -2); /* x = -2.5: the tie goes to even -2 */
	ASSERT_EQ(k.qs[2], -2); /* x = -1.5: to even -2 */
	ASSERT_EQ(k.qs[0], -127);
	/* Q8_0: amax 127 gives d = 1, id = 1, so q = roundf(x) */
	kernels__block_q8_0 q;
	float y[32];
	for (int i = 0; i < 32; i++)
		y[i] = (float)(i - 16) + 0.5f;
	y[31] = 127.0f;
	shoal_quantize_row(SHOAL_DTYPE_Q8_0, y, &q, 32);
	for (int i = 0; i < 31; i++)
		ASSERT_EQ(q.qs[i], (int)roundf(y[i]));
	ASSERT_EQ(q.qs[15], -1); /* -0.5 -> -1 (away from zero) */
	ASSERT_EQ(q.qs[16], 1);  /* 0.5 -> 1 */
	ASSERT_EQ(q.qs[31], 127);
}

/* ---- the reference's own quantizations ------------------------------------------ */

/* tiny-kq-q4_k_m and tiny-kq-q6_k hold the same random weights quantized by
 * the reference; tensors that are Q4_K in one and Q6_K in the other must
 * dequantize to nearly the same values: within a Q4_K step (the coarser)
 * per 32 elements. A wrong bit layout in either type gives differences of
 * the order of the weights themselves. */
static void test_fixtures_agree(void)
{
	char p1[1024], p2[1024], why[SHOAL_WHY_LEN];
	snprintf(p1, sizeof p1, "%s/models/tiny-kq-q4_k_m.gguf", test_data_dir());
	snprintf(p2, sizeof p2, "%s/models/tiny-kq-q6_k.gguf", test_data_dir());
	shoal_gguf *g1 = NULL, *g2 = NULL;
	if (shoal_gguf_open(p1, &g1, why, sizeof why) ||
	    shoal_gguf_open(p2, &g2, why, sizeof why)) {
		shoal_gguf_free(g1);
		TEST_SKIP("tiny-kq fixtures not readable");
	}
	int compared = 0, ok = 1;
	for (size_t t = 0; t < shoal_gguf_n_tensors(g1) && ok; t++) {
		const shoal_gguf_tensor *a = shoal_gguf_tensor_at(g1, t);
		const shoal_gguf_tensor *b = shoal_gguf_tensor_find(g2, a->name);
		if (!b || a->type != SHOAL_DTYPE_Q4_K || b->type != SHOAL_DTYPE_Q6_K)
			continue;
		int64_t n = (int64_t)a->ne[0];
		size_t ra = shoal_dtype_row_bytes(a->type, (uint64_t)n);
		size_t rb = shoal_dtype_row_bytes(b->type, (uint64_t)n);
		float *ya = malloc((size_t)n * 4), *yb = malloc((size_t)n * 4);
		double sum_err = 0, sum_abs = 0;
		for (int row = 0; row < 4 && ok; row++) {
			const kernels__block_q4_k *qa =
			    (const void *)((const char *)a->data + (size_t)row * ra);
			shoal_dequantize_row(a->type, qa, ya, n);
			shoal_dequantize_row(b->type, (const char *)b->data + (size_t)row * rb, yb,
			                     n);
			for (int64_t i = 0; i < n; i++) {
				const kernels__block_q4_k *blk = &qa[i / 256];
				int sc, m;
				kernels__q4k_scale_min(blk->scales, (int)(i % 256) / 32, &sc, &m);
				float step = shoal_fp16_to_f32(blk->d) * sc;
				/* the reference's Q4_K is not round-to-nearest on each
				 * value (it optimises the scale), so allow one full step
				 * plus the Q6_K's own error */
				if (!(fabsf(ya[i] - yb[i]) <=
				      1.05f * step + 0.02f * fabsf(yb[i]) + 1e-6f)) {
					fprintf(stderr,
					        "%s row %d elem %lld: q4_k %g q6_k %g step %g\n",
					        a->name, row, (long long)i, ya[i], yb[i], step);
					ok = 0;
					break;
				}
				sum_err += fabs((double)ya[i] - yb[i]);
				sum_abs += fabs((double)yb[i]);
			}
		}
		free(ya);
		free(yb);
		/* on average 4-bit quantization is off by far less than the weights */
		if (ok && !(sum_err < 0.2 * sum_abs)) {
			fprintf(stderr, "%s: mean error %g vs mean weight %g\n", a->name, sum_err,
			        sum_abs);
			ok = 0;
		}
		compared++;
	}
	shoal_gguf_free(g1);
	shoal_gguf_free(g2);
	ASSERT_TRUE(ok);
	ASSERT_GT(compared, 4);
}

TEST_MAIN(TEST_CASE(test_q8_0_nonfinite), TEST_CASE(test_fp16_to_f32_specials),
          TEST_CASE(test_f32_to_fp16_rounding), TEST_CASE(test_fp16_roundtrip_all),
          TEST_CASE(test_fp16_nearest_random), TEST_CASE(test_bf16), TEST_CASE(test_deq_q8_0),
          TEST_CASE(test_deq_q4_0), TEST_CASE(test_deq_q4_k), TEST_CASE(test_q4k_unpack),
          TEST_CASE(test_deq_q6_k), TEST_CASE(test_deq_q8_k_f16_bf16),
          TEST_CASE(test_roundtrip_q8_0), TEST_CASE(test_roundtrip_q4_0),
          TEST_CASE(test_roundtrip_q4_k), TEST_CASE(test_roundtrip_q6_k),
          TEST_CASE(test_roundtrip_q8_k), TEST_CASE(test_activation_ties),
          TEST_CASE(test_roundtrip_plain), TEST_CASE(test_fixtures_agree),
          TEST_CASE(test_deq_q5_0_q5_1), TEST_CASE(test_deq_iq4_nl_mxfp4), TEST_CASE(test_deq_q2_k),
          TEST_CASE(test_deq_q3_k), TEST_CASE(test_deq_q5_k), TEST_CASE(test_deq_iq4_xs),
          TEST_CASE(test_deq_iq2_xxs), TEST_CASE(test_deq_iq2_xs), TEST_CASE(test_deq_iq2_s),
          TEST_CASE(test_deq_iq3_xxs), TEST_CASE(test_deq_iq3_s), TEST_CASE(test_deq_iq1_s),
          TEST_CASE(test_deq_iq1_m), TEST_CASE(test_roundtrip_q32_types),
          TEST_CASE(test_roundtrip_k_types), TEST_CASE(test_roundtrip_iq_types))
