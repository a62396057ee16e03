/*
 * runtime/vulkan/shaders/mm_order.glsl: what the mat-vec (mm_vec.glsl)
 * and the tiled mat-mul (mm_tile.glsl) share, so that both compute every
 * output element with the same operations in the same order (backend.h:
 * bitwise independent of the batch, whichever shader a batch size picks).
 *
 * The order, for y[r][o] = sum_e W[o][e] x[r][e] over n_in elements cut
 * into P = ceil(n_in / 32) pieces of 32 (mm_deq.glsl):
 *   1. lane l (0..31) sums pieces l, l + 32, l + 64, ... in that order,
 *      each piece's 32 elements in element order (a short last piece
 *      padded with 0 * 0): s_l = fma(w, x, s_l) from s_l = 0;
 *   2. y = ((0 + s_0) + s_1) + ... + s_31.
 * Lanes make a mat-vec workgroup read 32 adjacent pieces at once; step 2
 * is one short serial sum per output. Every accumulation is `precise`,
 * so fma is one rounding and nothing else is fused or reordered.
 *
 * Bindings: 0 the weights (mm_deq.glsl), 1 x (F32), 2 y (F32).
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
