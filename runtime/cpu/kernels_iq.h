/*
 * runtime/cpu/kernels_iq.h: the IQ types of the GGUF format (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): their block layouts, the
 * grids they index (expanded once by iq_grids.c) and one decoder of a
 * sub-block of 32 elements that dequantization, the scalar twin and the
 * SIMD tables all share.
 *
 * Part: runtime/, room cpu/. Names are kernels__iq* (inside the kernel files
 * and quant.c). Every type decodes to integers: element e of a super-block
 * is x_e = D * sc_(e / 16) * q_e, with D the block's fp16 scale times a
 * power of two (kernels__iq_d: 1/8 for IQ2 and IQ1, 1/4 for IQ3_XXS, 1 for
 * IQ3_S), sc an odd integer scale per 16 elements (2 ls + 1) and q_e a
 * signed byte:
 *   IQ2, IQ3: q = grid value * sign (|q| <= 62);
 *   IQ1:      q = 8 * grid value + delta sign (the format's x = dl (g +- 1/8)
 *             times 8, so q in {-9, -7, -1, 1, 7, 9}).
 * Every power-of-two factor is exact, so D * sc rounds once as the
 * reference's d * (0.5 + ls) * 0.25 does, and dequantization keeps its bits.
 */
#ifndef SHOAL_RUNTIME_KERNELS_IQ_H
#define SHOAL_RUNTIME_KERNELS_IQ_H

#include "runtime/cpu/kernels_impl.h"

/* ---- block layouts (GGUF's; 256 elements, sub-blocks of 32) ------------------------ */

typedef struct kernels__block_iq2_xxs {
	uint16_t d;      /* fp16 scale */
	uint16_t qs[32]; /* per sub-block 8 bytes: 4 grid indices (8 bits), then a
	                  * u32 of 4 x 7 sign bits (bits 7l..) and ls (bits 28-31) */
} kernels__block_iq2_xxs;

typedef struct kernels__block_iq2_xs {
	uint16_t d;        /* fp16 scale */
	uint16_t qs[32];   /* per 8 elements: grid index (9 bits) | 7 sign bits << 9 */
	uint8_t scales[8]; /* per sub-block: ls of elements 0-15 (low), 16-31 (high) */
} kernels__block_iq2_xs;

typedef struct kernels__block_iq2_s {
	uint16_t d;        /* fp16 scale */
	uint8_t qs[64];    /* 32 grid index low bytes, then 32 bytes of 8 signs */
	uint8_t qh[8];     /* per sub-block: bits 2l..2l+1 the index's bits 8-9 */
	uint8_t scales[8]; /* as IQ2_XS */
} kernels__block_iq2_s;

typedef struct kernels__block_iq3_xxs {
	uint16_t d;     /* fp16 scale */
	uint8_t qs[96]; /* 64 grid indices (4 elements each), then per sub-block a
	                 * u32 as IQ2_XXS's (4 x 7 sign bits, ls in bits 28-31) */
} kernels__block_iq3_xxs;

typedef struct kernels__block_iq3_s {
	uint16_t d;        /* fp16 scale */
	uint8_t qs[64];    /* grid index low bytes (4 elements each) */
	uint8_t qh[8];     /* per sub-block: bit m is bit 8 of index 8 ib + m */
	uint8_t signs[32]; /* per 8 elements, 8 sign bits */
	uint8_t scales[4]; /* per sub-block pair: ls of 2 p (low), 2 p + 1 (high) */
} kernels__block_iq3_s;

typedef struct kernels__block_iq1_s {
	uint16_t d;     /* fp16 scale */
	uint8_t qs[32]; /* grid index low bytes (8 elements each) */
	uint16_t qh[8]; /* per sub-block: bits 3l..3l+2 index bits 8-10, bits
	                 * 12-14 ls, bit 15 the delta's sign */
} kernels__block_iq1_s;

typedef struct kernels__block_iq1_m {
	uint8_t qs[32];    /* grid index low bytes (8 elements each) */
	uint8_t qh[16];    /* per 16 elements: bits 0-2 / 4-6 index bits 8-10 of
	                    * its two groups of 8, bits 3 / 7 their delta signs */
	uint8_t scales[8]; /* as 4 u16: 3-bit ls per 16 elements (bits 0-11),
	                    * the fp16 scale's 4 nibbles in bits 12-15 */
} kernels__block_iq1_m;

_Static_assert(sizeof(kernels__block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");
_Static_assert(sizeof(kernels__block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");
_Static_assert(sizeof(kernels__block_iq2_s) == 82, "IQ2_S block is 82 bytes");
_Static_assert(sizeof(kernels__block_iq3_xxs) == 98, "IQ3_XXS block is 98 bytes");
_Static_assert(sizeof(kernels__block_iq3_s) == 110, "IQ3_S block is 110 bytes");
_Static_assert(sizeof(kernels__block_iq1_s) == 50, "IQ1_S block is 50 bytes");
_Static_assert(sizeof(kernels__block_iq1_m) == 56, "IQ1_M block is 56 bytes");

/* ---- the grids ------------------------------------------------------------------- */

/* The grids expanded (iq_grids.c), each entry as its bytes in element order
 * (one little-endian load gives them): IQ2 values in {8, 25, 43}, IQ3_XXS
 * in {4, 12, ..., 52, 62}, IQ3_S in {1, 3, ..., 15}, IQ1 in {-1, 0, 1}
 * times 8 (iq1s8: q = 8 g + s is then one add). The values are the GGUF
 * format's definition. sign8[s] holds the 8 signs of
 * the bits of s as bytes: -1 where bit j is set, else +1; sign7 the same
 * for 7 stored sign bits, the 8th implied. */
typedef struct kernels__iq_grids {
	uint64_t iq2xxs[256];
	uint64_t iq2xs[512];
	uint64_t iq2s[1024];
	uint32_t iq3xxs[256];
	uint32_t iq3s[512];
	uint64_t iq1s8[2048];
	uint64_t sign8[256];
	uint64_t sign7[128]; /* sign8[kernels__iq_ksigns(s)]: 7 stored bits' signs */
	/* The compact codes the tables came from (tools/iq_grids.py: element j
	 * of an entry is value index (code >> 2j) & 3, IQ3 (code >> 3j) & 7),
	 * for quant.c's search. */
	const uint16_t *code_iq2xxs, *code_iq2xs, *code_iq2s, *code_iq3xxs, *code_iq3s, *code_iq1s;
} kernels__iq_grids;

/* The value sets the codes index (the format's; IQ2's and IQ1's padded to
 * 4 with a value no code uses). */
static const int8_t kernels__iq2_values[4] = {8, 25, 43, 43};
static const int8_t kernels__iq3xxs_values[8] = {4, 12, 20, 28, 36, 44, 52, 62};
static const int8_t kernels__iq3s_values[8] = {1, 3, 5, 7, 9, 11, 13, 15};
static const int8_t kernels__iq1_values[4] = {-1, 0, 1, 1};

/* The tables, built on first call (thread-safe); never NULL. */
const kernels__iq_grids *kernels__iq_grids_get(void);

/* The 8 signs of 7 stored sign bits: the 8th makes their count even. */
static inline unsigned kernels__iq_ksigns(unsigned s7)
{
	return s7 | ((unsigned)__builtin_parity(s7) << 7);
}

static inline uint32_t kernels__iq_u32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline uint16_t kernels__iq_u16(const void *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* ---- one sub-block ---------------------------------------------------------------- */

/* Sub-block ib (elements 32 ib ..) of a super-block: for each group l of 8
 * elements the grid bytes g[l] and the sign bytes s[l] (+-1); element 8 l
 * + j is q = g_j s_j (IQ2, IQ3) or g_j + s_j (IQ1, whose g[l] holds 8
 * times the grid's values and s[l] the delta's sign in every byte); sc[h]
 * the odd scale of elements 16 h .. (the same for both halves unless
 * kernels__iq_per16). */
typedef struct kernels__iq_sub {
	uint64_t g[4];
	uint64_t s[4];
	int sc[2];
} kernels__iq_sub;

/* Whether t is one of the grid types this file decodes. */
static inline int kernels__iq_is_grid(shoal_dtype t)
{
	switch (t) {
	case SHOAL_DTYPE_IQ2_XXS:
	case SHOAL_DTYPE_IQ2_XS:
	case SHOAL_DTYPE_IQ2_S:
	case SHOAL_DTYPE_IQ3_XXS:
	case SHOAL_DTYPE_IQ3_S:
	case SHOAL_DTYPE_IQ1_S:
	case SHOAL_DTYPE_IQ1_M:
		return 1;
	default:
		return 0;
	}
}

/* Whether type t's q is g + s (IQ1) rather than g s. */
static inline int kernels__iq_is_iq1(shoal_dtype t)
{
	return t == SHOAL_DTYPE_IQ1_S || t == SHOAL_DTYPE_IQ1_M;
}

/* Whether type t has a scale per 16 elements (else per 32). */
static inline int kernels__iq_per16(shoal_dtype t)
{
	return t == SHOAL_DTYPE_IQ2_XS || t == SHOAL_DTYPE_IQ2_S || t == SHOAL_DTYPE_IQ1_M;
}

static inline size_t kernels__iq_block_bytes(shoal_dtype t)
{
	switch (t) {
	case SHOAL_DTYPE_IQ2_XXS:
		return sizeof(kernels__block_iq2_xxs);
	case SHOAL_DTYPE_IQ2_XS:
		return sizeof(kernels__block_iq2_xs);
	case SHOAL_DTYPE_IQ2_S:
		return sizeof(kernels__block_iq2_s);
	case SHOAL_DTYPE_IQ3_XXS:
		return sizeof(kernels__block_iq3_xxs);
	case SHOAL_DTYPE_IQ3_S:
		return sizeof(kernels__block_iq3_s);
	case SHOAL_DTYPE_IQ1_S:
		return sizeof(kernels__block_iq1_s);
	default:
		return sizeof(kernels__block_iq1_m);
	}
}

/* D of a block of type t (see the head comment): its fp16 scale (IQ1_M's
 * assembled from the top nibbles of its 4 scale words) times 2^-3, 2^-2
 * or 1. */
static inline float kernels__iq_d(shoal_dtype t, const void *blk)
{
	if (t == SHOAL_DTYPE_IQ1_M) {
		const uint8_t *s = ((const kernels__block_iq1_m *)blk)->scales;
		uint16_t h = 0;
		for (int k = 0; k < 4; k++)
			h |= (uint16_t)((kernels__iq_u16(s + 2 * k) >> 12) << (4 * k));
		return kernels__fp16_to_f32(h) * 0.125f;
	}
	float d = kernels__fp16_to_f32(kernels__iq_u16(blk)); /* d leads the others */
	switch (t) {
	case SHOAL_DTYPE_IQ3_XXS:
		return d * 0.25f;
	case SHOAL_DTYPE_IQ3_S:
		return d;
	default:
		return d * 0.125f;
	}
}

/* Two 4-byte IQ3 grid entries as the 8 bytes of a group. */
static inline uint64_t kernels__iq3_pair(const uint32_t *grid, unsigned i0, unsigned i1)
{
	return (uint64_t)grid[i0] | ((uint64_t)grid[i1] << 32);
}

/* Sub-block ib of block blk of type t into *o (t a compile-time constant
 * where inlined: the switch folds). The loops over the 4 groups unrolled:
 * so *o stays in registers; GCC -O2 otherwise kept it on the stack, and
 * the SIMD tables' 32-byte loads of 4 8-byte stores missed store
 * forwarding (half the time of a gemv in perf, ~0.7 GB/s). */
#define KERNELS__IQ_UNROLL _Pragma("GCC unroll 4")
static inline __attribute__((always_inline)) void kernels__iq_sub_decode(shoal_dtype t,
                                                                         const void *blk, int ib,
                                                                         const kernels__iq_grids *G,
                                                                         kernels__iq_sub *o)
{
	switch (t) {
	case SHOAL_DTYPE_IQ2_XXS: {
		const uint8_t *q =
		    (const uint8_t *)((const kernels__block_iq2_xxs *)blk)->qs + 8 * ib;
		uint32_t aux = kernels__iq_u32(q + 4);
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			o->g[l] = G->iq2xxs[q[l]];
			o->s[l] = G->sign7[(aux >> (7 * l)) & 127];
		}
		o->sc[0] = o->sc[1] = 2 * (int)(aux >> 28) + 1;
		break;
	}
	case SHOAL_DTYPE_IQ2_XS: {
		const kernels__block_iq2_xs *b = blk;
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			unsigned v = kernels__iq_u16(&b->qs[4 * ib + l]);
			o->g[l] = G->iq2xs[v & 511];
			o->s[l] = G->sign7[v >> 9];
		}
		o->sc[0] = 2 * (b->scales[ib] & 0xf) + 1;
		o->sc[1] = 2 * (b->scales[ib] >> 4) + 1;
		break;
	}
	case SHOAL_DTYPE_IQ2_S: {
		const kernels__block_iq2_s *b = blk;
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			unsigned hi = (b->qh[ib] >> (2 * l)) & 3;
			o->g[l] = G->iq2s[b->qs[4 * ib + l] | (hi << 8)];
			o->s[l] = G->sign8[b->qs[32 + 4 * ib + l]];
		}
		o->sc[0] = 2 * (b->scales[ib] & 0xf) + 1;
		o->sc[1] = 2 * (b->scales[ib] >> 4) + 1;
		break;
	}
	case SHOAL_DTYPE_IQ3_XXS: {
		const kernels__block_iq3_xxs *b = blk;
		const uint8_t *q = b->qs + 8 * ib;
		uint32_t aux = kernels__iq_u32(b->qs + 64 + 4 * ib);
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			o->g[l] = kernels__iq3_pair(G->iq3xxs, q[2 * l], q[2 * l + 1]);
			o->s[l] = G->sign7[(aux >> (7 * l)) & 127];
		}
		o->sc[0] = o->sc[1] = 2 * (int)(aux >> 28) + 1;
		break;
	}
	case SHOAL_DTYPE_IQ3_S: {
		const kernels__block_iq3_s *b = blk;
		const uint8_t *q = b->qs + 8 * ib;
		unsigned h = b->qh[ib];
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			unsigned i0 = q[2 * l] | (((h >> (2 * l)) & 1) << 8);
			unsigned i1 = q[2 * l + 1] | (((h >> (2 * l + 1)) & 1) << 8);
			o->g[l] = kernels__iq3_pair(G->iq3s, i0, i1);
			o->s[l] = G->sign8[b->signs[4 * ib + l]];
		}
		o->sc[0] = o->sc[1] = 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xf) + 1;
		break;
	}
	case SHOAL_DTYPE_IQ1_S: {
		const kernels__block_iq1_s *b = blk;
		unsigned h = kernels__iq_u16(&b->qh[ib]);
		uint64_t s = G->sign8[h & 0x8000 ? 0xff : 0];
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			o->g[l] = G->iq1s8[b->qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)];
			o->s[l] = s;
		}
		o->sc[0] = o->sc[1] = 2 * (int)((h >> 12) & 7) + 1;
		break;
	}
	default: { /* IQ1_M */
		const kernels__block_iq1_m *b = blk;
		KERNELS__IQ_UNROLL for (int l = 0; l < 4; l++)
		{
			unsigned h = b->qh[2 * ib + l / 2] >> (4 * (l % 2));
			o->g[l] = G->iq1s8[b->qs[4 * ib + l] | ((h & 7) << 8)];
			o->s[l] = G->sign8[h & 8 ? 0xff : 0];
		}
		unsigned w = kernels__iq_u16(b->scales + 2 * (ib / 2)) >> (6 * (ib % 2));
		o->sc[0] = 2 * (int)(w & 7) + 1;
		o->sc[1] = 2 * (int)((w >> 3) & 7) + 1;
		break;
	}
	}
}

/* Byte j of group l of a decoded sub-block as q (see kernels__iq_sub). */
static inline int kernels__iq_q(shoal_dtype t, const kernels__iq_sub *o, int l, int j)
{
	int g = (int8_t)(o->g[l] >> (8 * j)), s = (int8_t)(o->s[l] >> (8 * j));
	return kernels__iq_is_iq1(t) ? g + s : g * s;
}

#endif
