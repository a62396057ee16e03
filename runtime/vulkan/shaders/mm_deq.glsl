/*
 * runtime/vulkan/shaders/mm_deq.glsl: the weight side of the matrix
 * shaders (mv_*, mm_*, embed_*): binding 0 read as 32-bit words at any
 * byte address, and deq8(), which dequantizes 8 elements of a row to the
 * exact F32 values of the CPU's shoal_dequantize_row (runtime/cpu/quant.c:
 * the same float operations in the same order, never contracted: every
 * value is `precise`).
 *
 * The includer defines one of WT_F32, WT_F16, WT_BF16, WT_Q8_0, WT_Q4_0,
 * WT_Q4_K, WT_Q5_K, WT_Q6_K, WT_MXFP4, WT_Q2_K, WT_Q3_K, WT_IQ4_NL,
 * WT_IQ4_XS (or an IQ grid type, mm_deq_iq.glsl) before including this
 * file.
 *
 * A row is cut into pieces of 32 elements (one Q8_0 / Q4_0 / MXFP4 block,
 * one 32-element sub-block of a K-quant super-block, or 32 plain
 * elements: the last piece of a plain row may be short) and each piece
 * into 4 parts of 8: deq8(row, p, part) gives elements 32 p + 8 part ..
 * + 7 of the row starting at byte `row`, 0 past n_in.
 *
 * Byte addresses are uint: a weights buffer is addressed up to 4 GiB
 * (the C side asserts it). Rows need no alignment: blocks of 17, 18, 34
 * and 210 bytes put most of them at odd or 2 mod 4 addresses.
 */

layout(std430, binding = 0) readonly buffer WeightWords { uint wq[]; };

/* The byte at address a. */
uint ld8(uint a)
{
	return (wq[a >> 2] >> ((a & 3u) * 8u)) & 0xffu;
}

/* The little-endian word of the 4 bytes at a; reads the next word only
 * when a is not aligned (then its bytes are part of the 4). */
uint ld32(uint a)
{
	uint sh = (a & 3u) * 8u;
	uint w0 = wq[a >> 2];
	if (sh == 0u)
		return w0;
	return (w0 >> sh) | (wq[(a >> 2) + 1u] << (32u - sh));
}

/* The little-endian 16 bits at a. */
uint ld16(uint a)
{
	if ((a & 3u) == 3u)
		return ld8(a) | (ld8(a + 1u) << 8);
	return (wq[a >> 2] >> ((a & 3u) * 8u)) & 0xffffu;
}

/* IEEE half to float, exact for every input, as kernels__fp16_to_f32:
 * integer operations only, so no denormal flushing can change a value
 * (a half subnormal is a normal float). */
float h2f(uint h)
{
	uint e = (h >> 10) & 0x1fu;
	uint m = h & 0x3ffu;
	uint bits;
	if (e == 0u)
		bits = floatBitsToUint(float(m) * 5.9604644775390625e-8); /* m * 2^-24 */
	else if (e == 31u)
		bits = 0x7f800000u | (m << 13);
	else
		bits = ((e + 112u) << 23) | (m << 13);
	return uintBitsToFloat(bits | ((h & 0x8000u) << 16));
}

/* The 8 nibbles of the word pair (lo, hi), low (sh 0) or high (sh 4) ones,
 * byte order. */
uint nib(uvec2 w, uint i, uint sh)
{
	uint word = i < 4u ? w.x : w.y;
	return (word >> ((i & 3u) * 8u + sh)) & 0xfu;
}

#if defined(WT_F32)
/* ---- F32: 4 bytes an element ---------------------------------------------- */
void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint e0 = 32u * p + 8u * part;
	[[unroll]] for (uint i = 0u; i < 8u; i++)
		v[i] = e0 + i < n_in ? uintBitsToFloat(ld32(row + 4u * (e0 + i))) : 0.0;
}
#elif defined(WT_F16) || defined(WT_BF16)
/* ---- F16, BF16: 2 bytes an element ------------------------------------------ */
float half_value(uint h)
{
#if defined(WT_F16)
	return h2f(h);
#else
	return uintBitsToFloat(h << 16);
#endif
}

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint e0 = 32u * p + 8u * part;
	if (e0 + 8u <= n_in) {
		[[unroll]] for (uint k = 0u; k < 4u; k++) {
			uint w = ld32(row + 2u * e0 + 4u * k);
			v[2u * k] = half_value(w & 0xffffu);
			v[2u * k + 1u] = half_value(w >> 16);
		}
		return;
	}
	[[unroll]] for (uint i = 0u; i < 8u; i++)
		v[i] = e0 + i < n_in ? half_value(ld16(row + 2u * (e0 + i))) : 0.0;
}
#elif defined(WT_Q8_0)
/* ---- Q8_0: { f16 d; int8 qs[32]; } 34 bytes --------------------------------- */
void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + 34u * p;
	float d = h2f(ld16(base));
	uvec2 w = uvec2(ld32(base + 2u + 8u * part), ld32(base + 6u + 8u * part));
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		int q = bitfieldExtract(int(i < 4u ? w.x : w.y), int((i & 3u) * 8u), 8);
		precise float x = float(q) * d;
		v[i] = x;
	}
}
#elif defined(WT_Q4_0) || defined(WT_MXFP4) || defined(WT_IQ4_NL)
/* ---- Q4_0: { f16 d; uint8 qs[16]; } 18 bytes, x = (nibble - 8) * d;
 * MXFP4: { uint8 e; uint8 qs[16]; } 17 bytes, x = 2^(e - 128) * table[nibble];
 * IQ4_NL: { f16 d; uint8 qs[16]; } 18 bytes, x = d * iq4_values[nibble].
 * qs[j] holds element j (low nibble) and j + 16 (high): part k < 2 takes the
 * low nibbles of bytes 8k..8k+7, part k >= 2 the high ones of 8(k-2)... */
#if defined(WT_IQ4_NL)
/* kernels__iq4_values */
const float iq4_values[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                       1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
#endif
#if defined(WT_MXFP4)
/* kernels__mxfp4_values: twice the E2M1 values, with the scale halved */
const float mxfp4_values[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0,
                                         -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
#define BLOCK_BYTES 17u
#define QS_AT       1u
#else
#define BLOCK_BYTES 18u
#define QS_AT       2u
#endif

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + BLOCK_BYTES * p;
#if defined(WT_MXFP4)
	uint e = ld8(base); /* 2^(e - 128), as kernels__e8m0_half */
	float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
#else
	float d = h2f(ld16(base));
#endif
	uint at = base + QS_AT + 8u * (part & 1u);
	uvec2 w = uvec2(ld32(at), ld32(at + 4u));
	uint sh = part < 2u ? 0u : 4u;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
#if defined(WT_MXFP4)
		precise float x = d * mxfp4_values[nib(w, i, sh)];
#elif defined(WT_IQ4_NL)
		precise float x = d * iq4_values[nib(w, i, sh)];
#else
		precise float x = float(int(nib(w, i, sh)) - 8) * d;
#endif
		v[i] = x;
	}
}
#elif defined(WT_Q4_K) || defined(WT_Q5_K)
/* ---- Q4_K: { f16 d, dmin; uint8 scales[12]; uint8 qs[128]; } 144 bytes;
 * Q5_K: { f16 d, dmin; uint8 scales[12], qh[32]; uint8 qs[128]; } 176 bytes.
 * Piece p is sub-block j = p % 8 of super-block p / 8: x = d * sc_j * q -
 * dmin * m_j; its 32 quants are the low (j even) or high (j odd) nibbles of
 * qs[32 (j / 2) ..], plus for Q5_K bit j of qh[l] as bit 4. */
#if defined(WT_Q5_K)
#define BLOCK_BYTES 176u
#define QS_AT       48u
#else
#define BLOCK_BYTES 144u
#define QS_AT       16u
#endif

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + BLOCK_BYTES * (p >> 3);
	uint j = p & 7u;
	uint dd = ld32(base);
	float d = h2f(dd & 0xffffu), dmin = h2f(dd >> 16);
	uint sc, m; /* kernels__q4k_scale_min */
	if (j < 4u) {
		sc = ld8(base + 4u + j) & 63u;
		m = ld8(base + 8u + j) & 63u;
	} else {
		uint s8 = ld8(base + 8u + j); /* scales[j + 4] */
		sc = (s8 & 0xfu) | ((ld8(base + j) >> 6) << 4);
		m = (s8 >> 4) | ((ld8(base + 4u + j) >> 6) << 4);
	}
	precise float d1 = d * float(sc);
	precise float m1 = dmin * float(m);
	uint at = base + QS_AT + 32u * (j >> 1) + 8u * part;
	uvec2 w = uvec2(ld32(at), ld32(at + 4u));
	uint sh = (j & 1u) * 4u;
#if defined(WT_Q5_K)
	uvec2 h = uvec2(ld32(base + 16u + 8u * part), ld32(base + 20u + 8u * part));
#endif
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		uint q = nib(w, i, sh);
#if defined(WT_Q5_K)
		q += ((((i < 4u ? h.x : h.y) >> ((i & 3u) * 8u + j)) & 1u) << 4);
#endif
		precise float x = d1 * float(q) - m1;
		v[i] = x;
	}
}
#elif defined(WT_Q6_K)
/* ---- Q6_K: { uint8 ql[128], qh[64]; int8 scales[16]; f16 d; } 210 bytes.
 * Piece p is elements 32 k .. 32 k + 31 (k = p % 8) of super-block p / 8,
 * in chunk c = k / 4 at quarter k % 4: element l of the quarter has its low
 * 4 bits in ql[64 c + 32 (k & 1) + l] (high nibble when k % 4 >= 2), its
 * top 2 bits at bit 2 (k % 4) of qh[32 c + l], and scale scales[8 c +
 * l / 16 + 2 (k % 4)]: x = d * sc * (q - 32). */
void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + 210u * (p >> 3);
	uint k = p & 7u, c = k >> 2, quarter = k & 3u;
	float d = h2f(ld16(base + 208u));
	int sc = bitfieldExtract(int(ld8(base + 192u + 8u * c + (part >> 1) + 2u * quarter)), 0, 8);
	precise float ds = d * float(sc);
	uint at = base + 64u * c + 32u * (quarter & 1u) + 8u * part;
	uvec2 lo = uvec2(ld32(at), ld32(at + 4u));
	uint hat = base + 128u + 32u * c + 8u * part;
	uvec2 hi = uvec2(ld32(hat), ld32(hat + 4u));
	uint sh = (quarter >> 1) * 4u;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		uint hb = ((i < 4u ? hi.x : hi.y) >> ((i & 3u) * 8u + 2u * quarter)) & 3u;
		int q = int(nib(lo, i, sh) | (hb << 4)) - 32;
		precise float x = ds * float(q);
		v[i] = x;
	}
}
#elif defined(WT_Q2_K) || defined(WT_Q3_K)
/* ---- Q2_K: { uint8 scales[16], qs[64]; f16 d, dmin; } 84 bytes;
 * Q3_K: { uint8 hmask[32], qs[64], scales[12]; f16 d; } 110 bytes.
 * 16 sub-blocks of 16. Piece p is elements 32 k .. 32 k + 31 (k = p % 8)
 * of super-block p / 8: element l of it has its 2 low bits at bit 2 (k %
 * 4) of qs[32 (k / 4) + l] (and for Q3_K its top bit at bit k of
 * hmask[l]); part `part` is in sub-block 2 k + part / 2.
 * Q2_K: x = d (sc & 15) q - dmin (sc >> 4), q 0..3;
 * Q3_K: x = d sc (q - 4 (1 - top bit)), sc the signed 6-bit scale
 * (kernels__q3k_scales). */
#if defined(WT_Q2_K)
#define BLOCK_BYTES 84u
#define QS_AT       16u
#else
#define BLOCK_BYTES 110u
#define QS_AT       32u
#endif

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + BLOCK_BYTES * (p >> 3);
	uint k = p & 7u, j = 2u * k + (part >> 1);
	uint at = base + QS_AT + 32u * (k >> 2) + 8u * part;
	uvec2 w = uvec2(ld32(at), ld32(at + 4u));
	uint sh = 2u * (k & 3u);
#if defined(WT_Q2_K)
	uint dd = ld32(base + 80u);
	float d = h2f(dd & 0xffffu), dmin = h2f(dd >> 16);
	uint sc = ld8(base + j);
	precise float dl = d * float(sc & 0xfu);
	precise float ml = dmin * float(sc >> 4);
#else
	float d = h2f(ld16(base + 108u));
	uint lo = (ld8(base + 96u + (j & 7u)) >> (4u * (j >> 3))) & 0xfu;
	uint hi = (ld8(base + 104u + (j & 3u)) >> (2u * (j >> 2))) & 3u;
	precise float dl = d * float(int(lo | (hi << 4)) - 32);
	uvec2 h = uvec2(ld32(base + 8u * part), ld32(base + 4u + 8u * part));
#endif
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		uint q = ((i < 4u ? w.x : w.y) >> ((i & 3u) * 8u + sh)) & 3u;
#if defined(WT_Q2_K)
		precise float x = dl * float(q) - ml;
#else
		uint top = ((i < 4u ? h.x : h.y) >> ((i & 3u) * 8u + k)) & 1u;
		precise float x = dl * float(int(q) - (top != 0u ? 0 : 4));
#endif
		v[i] = x;
	}
}
#elif defined(WT_IQ4_XS)
/* ---- IQ4_XS: { f16 d; uint16 scales_h; uint8 scales_l[4], qs[128]; } 136
 * bytes. Piece p is sub-block ib = p % 8 of super-block p / 8, laid out as
 * an IQ4_NL block without its scale at qs[16 ib]: x = d (ls - 32) *
 * iq4_values[nibble], ls the 6 bits of scales_l (nibble ib % 2 of byte ib /
 * 2) and scales_h (bits 2 ib, 2 ib + 1). */
const float iq4_values[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                       1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + 136u * (p >> 3);
	uint ib = p & 7u;
	uint dh = ld32(base); /* d, scales_h */
	float d = h2f(dh & 0xffffu);
	uint lo = (ld8(base + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xfu;
	uint hi = (dh >> (16u + 2u * ib)) & 3u;
	precise float dl = d * float(int(lo | (hi << 4)) - 32);
	uint at = base + 8u + 16u * ib + 8u * (part & 1u);
	uvec2 w = uvec2(ld32(at), ld32(at + 4u));
	uint sh = part < 2u ? 0u : 4u;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		precise float x = dl * iq4_values[nib(w, i, sh)];
		v[i] = x;
	}
}
#elif defined(WT_IQ2_XXS) || defined(WT_IQ2_XS) || defined(WT_IQ2_S) || defined(WT_IQ3_XXS) ||   \
    defined(WT_IQ3_S) || defined(WT_IQ1_S) || defined(WT_IQ1_M)
#include "mm_deq_iq.glsl"
#else
#error "define the weight type WT_* before including mm_deq.glsl"
#endif
