/*
 * runtime/vulkan/shaders/mm_deq_iq.glsl: deq8() of the IQ grid types
 * (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), #included by
 * mm_deq.glsl for one of WT_IQ2_XXS .. WT_IQ1_M. The layouts are
 * runtime/cpu/kernels_iq.h's; the values are bitwise the CPU's
 * shoal_dequantize_row (quant.c: x = (D sc) q, D the block's fp16 scale
 * times 2^-3, 2^-2 or 1, sc = 2 ls + 1, q a small integer).
 *
 * Piece p is sub-block ib = p % 8 (32 elements) of super-block p / 8, and
 * part l of it the sub-block's group l of 8: one grid entry (IQ3: two of
 * 4), its 8 signs (7 stored bits and their parity for IQ2_XXS, IQ2_XS,
 * IQ3_XXS), and the scale of elements 16 (l / 2) ... IQ2 and IQ3 take q =
 * grid value * sign; IQ1 takes q = 8 g + s (g in {-1, 0, 1}, s the delta's
 * sign), the format's g +- 1/8 times 8, the 1/8 in D.
 *
 * The grids are a binding of their own (IQ_GRID_BINDING, which the
 * includer defines: the one after its others): the CPU's expanded tables
 * (kernels__iq_grids, runtime/cpu/kernels_iq.h) as the C side uploads them
 * once per instance (vk__iq_grids), each entry its bytes in element order,
 * 8 a uint pair (IQ2, IQ1: 8 times the value) or 4 a uint (IQ3). The word
 * offsets below are the struct's, which vk_mem.c asserts. A buffer rather
 * than constant arrays in the shader: lavapipe's LLVM took minutes to
 * compile a pipeline holding a 1024-entry constant array, and a GPU reads
 * a buffer through its caches where divergent reads of a constant bank
 * may serialize.
 */
layout(std430, binding = IQ_GRID_BINDING) readonly buffer IqGrids { uint iqg[]; };

#define IQG_IQ2XXS 0u    /* 256 entries of 2 words */
#define IQG_IQ2XS  512u  /* 512 of 2 */
#define IQG_IQ2S   1536u /* 1024 of 2 */
#define IQG_IQ3XXS 3584u /* 256 of 1 */
#define IQG_IQ3S   3840u /* 512 of 1 */
#define IQG_IQ1S8  4352u /* 2048 of 2 */

/* The 8 signs of 7 stored bits: the 8th makes their count even. */
uint iq_sign7(uint s7)
{
	return s7 | ((bitCount(s7) & 1u) << 7);
}

#if defined(WT_IQ2_XXS) || defined(WT_IQ2_XS) || defined(WT_IQ2_S)
#define IQ_FAMILY 2
#elif defined(WT_IQ3_XXS) || defined(WT_IQ3_S)
#define IQ_FAMILY 3
#else
#define IQ_FAMILY 1
#endif

/* D of the block at base (see the head comment). */
float iq_d(uint base)
{
#if defined(WT_IQ1_M)
	/* the fp16 scale's 4 nibbles: the tops of the 4 scale words at 48 */
	uint w0 = ld32(base + 48u), w1 = ld32(base + 52u);
	uint h = (w0 >> 12 & 0xfu) | ((w0 >> 28) << 4) | ((w1 >> 12 & 0xfu) << 8) |
	         ((w1 >> 28) << 12);
	precise float d = h2f(h) * 0.125;
#elif defined(WT_IQ3_S)
	precise float d = h2f(ld16(base));
#elif defined(WT_IQ3_XXS)
	precise float d = h2f(ld16(base)) * 0.25;
#else
	precise float d = h2f(ld16(base)) * 0.125;
#endif
	return d;
}

#if defined(WT_IQ2_XXS)
#define BLOCK_BYTES 66u
#elif defined(WT_IQ2_XS)
#define BLOCK_BYTES 74u
#elif defined(WT_IQ2_S)
#define BLOCK_BYTES 82u
#elif defined(WT_IQ3_XXS)
#define BLOCK_BYTES 98u
#elif defined(WT_IQ3_S)
#define BLOCK_BYTES 110u
#elif defined(WT_IQ1_S)
#define BLOCK_BYTES 50u
#else
#define BLOCK_BYTES 56u
#endif

/* The 8 grid bytes of entry i of an 8-byte grid at word offset at. */
uvec2 iq_grid8(uint at, uint i)
{
	return uvec2(iqg[at + 2u * i], iqg[at + 2u * i + 1u]);
}

/* Two 4-byte IQ3 entries i0, i1 of the grid at word offset at as 8 bytes. */
uvec2 iq_grid4x2(uint at, uint i0, uint i1)
{
	return uvec2(iqg[at + i0], iqg[at + i1]);
}

void deq8(uint row, uint p, uint part, uint n_in, out float v[8])
{
	uint base = row + BLOCK_BYTES * (p >> 3);
	uint ib = p & 7u, l = part;
	/* per type: the group's 8 grid bytes, its 8 sign bits (set: negative;
	 * IQ1: all 8 the delta's sign) and ls of its scale */
	uvec2 g8;
	uint signs, ls;
#if defined(WT_IQ2_XXS)
	uint aux = ld32(base + 6u + 8u * ib);
	g8 = iq_grid8(IQG_IQ2XXS, ld8(base + 2u + 8u * ib + l));
	signs = iq_sign7((aux >> (7u * l)) & 127u);
	ls = aux >> 28;
#elif defined(WT_IQ2_XS)
	uint q = ld16(base + 2u + 8u * ib + 2u * l);
	g8 = iq_grid8(IQG_IQ2XS, q & 511u);
	signs = iq_sign7(q >> 9);
	ls = (ld8(base + 66u + ib) >> (4u * (l >> 1))) & 0xfu;
#elif defined(WT_IQ2_S)
	uint hi = (ld8(base + 66u + ib) >> (2u * l)) & 3u;
	g8 = iq_grid8(IQG_IQ2S, ld8(base + 2u + 4u * ib + l) | (hi << 8));
	signs = ld8(base + 34u + 4u * ib + l);
	ls = (ld8(base + 74u + ib) >> (4u * (l >> 1))) & 0xfu;
#elif defined(WT_IQ3_XXS)
	uint aux = ld32(base + 66u + 4u * ib);
	uint i2 = ld16(base + 2u + 8u * ib + 2u * l);
	g8 = iq_grid4x2(IQG_IQ3XXS, i2 & 0xffu, i2 >> 8);
	signs = iq_sign7((aux >> (7u * l)) & 127u);
	ls = aux >> 28;
#elif defined(WT_IQ3_S)
	uint h = ld8(base + 66u + ib) >> (2u * l);
	uint i2 = ld16(base + 2u + 8u * ib + 2u * l);
	g8 = iq_grid4x2(IQG_IQ3S, (i2 & 0xffu) | ((h & 1u) << 8),
	                (i2 >> 8) | (((h >> 1) & 1u) << 8));
	signs = ld8(base + 74u + 4u * ib + l);
	ls = (ld8(base + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xfu;
#elif defined(WT_IQ1_S)
	uint h = ld16(base + 34u + 2u * ib);
	g8 = iq_grid8(IQG_IQ1S8, ld8(base + 2u + 4u * ib + l) | (((h >> (3u * l)) & 7u) << 8));
	signs = (h & 0x8000u) != 0u ? 0xffu : 0u;
	ls = (h >> 12) & 7u;
#else /* IQ1_M */
	uint h = ld8(base + 32u + 2u * ib + (l >> 1)) >> (4u * (l & 1u));
	g8 = iq_grid8(IQG_IQ1S8, ld8(base + 4u * ib + l) | ((h & 7u) << 8));
	signs = (h & 8u) != 0u ? 0xffu : 0u;
	ls = (ld16(base + 48u + 2u * (ib >> 1)) >> (6u * (ib & 1u) + 3u * (l >> 1))) & 7u;
#endif
	precise float dl = iq_d(base) * float(2u * ls + 1u);
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		int g = bitfieldExtract(int(i < 4u ? g8.x : g8.y), int((i & 3u) * 8u), 8);
		int s = ((signs >> i) & 1u) != 0u ? -1 : 1;
#if IQ_FAMILY == 1
		int qv = g + s;
#else
		int qv = g * s;
#endif
		precise float x = dl * float(qv);
		v[i] = x;
	}
}
