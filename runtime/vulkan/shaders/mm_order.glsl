/*
 * runtime/vulkan/shaders/mm_order.glsl: what the mat-vec (mm_vec.glsl)
 * and the tiled mat-mul (mm_tile.glsl) share, so that both compute every
 * output element with the same operations in the same order (backend.h:
 * bitwise independent of the batch, whichever shader a batch size picks).
 *
 * The order, for y[r][o] = sum_e W[o][e] x[r][e] over n_in elements cut
 * into n_unit = ceil(n_in / 8) units of 8 (unit u: part u % 4 of piece
 * u / 4, mm_deq.glsl's deq8):
 *   1. lane l (0..31) sums units l, l + 32, l + 64, ... in that order, each
 *      unit's 8 elements in element order (a short last unit padded with
 *      0 * 0): s_l = fma(w, x, s_l) from s_l = 0;
 *   2. y = ((0 + s_0) + s_1) + ... + s_31.
 * In a mat-vec, the 32 lanes of an output read 32 adjacent units at once:
 * 8 whole pieces, contiguous bytes (one Q4_K super-block's quants, 8 Q8_0
 * blocks), so the weight reads coalesce; step 2 is one short serial sum
 * per output. Every accumulation is `precise`, so fma is one rounding and
 * nothing else is fused or reordered.
 *
 * Bindings: 0 the weights (mm_deq.glsl), 1 x (F32), 2 y (F32), 3 the
 * grids of an IQ grid type (mm_deq_iq.glsl).
 */

#define MM_LANES 32u

layout(std430, binding = 1) readonly buffer XBuf { float xs[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float ys[]; };

/* Sizes and where the operands start: bytes for the weights, elements
 * (floats) for x and y. */
layout(push_constant) uniform MmPush {
	uint w_off;     /* byte of W's row 0 in binding 0 */
	uint row_bytes; /* bytes from one row of W to the next */
	uint n_in;      /* elements of a row of W and of x */
	uint n_out;     /* rows of W: the outputs */
	uint x_off;     /* element of x's row 0 in binding 1 */
	uint ldx;       /* elements from one row of x to the next */
	uint y_off;     /* element of y's row 0 in binding 2 */
	uint ldy;       /* elements from one row of y to the next */
	uint n_rows;    /* rows of x and y */
}
pc;

/* The workgroup's index over all dispatched groups: the C side folds a
 * count over the device's limit into y (and z) rows of groups. */
uint mm_group()
{
	return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x +
	       gl_WorkGroupID.x;
}
