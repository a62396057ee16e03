/*
 * runtime/vulkan/shaders/mm_vec.glsl: y = x W^T for 1..MV_ROWS rows of x
 * (decode): a workgroup of 64 threads computes 2 outputs, 32 lanes each
 * (mm_order.glsl). A lane dequantizes each of its units (8 elements) of
 * the weight row once, in registers, and multiplies it into every row of
 * x, so a batch of up to 8 decode rows reads the weights once. The 32
 * lanes of an output read 32 adjacent units (e.g. one Q4_K super-block's
 * 128 bytes of quants), so the weight reads coalesce; the lane sums meet
 * in shared memory.
 *
 * Dispatch: ceil(n_out / 2) groups (folded, mm_group()).
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

#define IQ_GRID_BINDING 3 /* the IQ grid types' grids (mm_deq_iq.glsl) */
#include "mm_deq.glsl"
#include "mm_order.glsl"

#define MV_ROWS 8u /* the C side's MM_VEC_ROWS */

layout(local_size_x = 64) in;

shared float lane_sums[2][MV_ROWS][MM_LANES];

void main()
{
	uint half_ = gl_LocalInvocationID.x >> 5;
	uint lane = gl_LocalInvocationID.x & (MM_LANES - 1u);
	uint o = mm_group() * 2u + half_;
	bool live = o < pc.n_out;
	uint n_rows = min(pc.n_rows, MV_ROWS);
	if (live) {
		precise float s[MV_ROWS];
		[[unroll]] for (uint r = 0u; r < MV_ROWS; r++)
			s[r] = 0.0;
		uint row = pc.w_off + o * pc.row_bytes;
		uint n_unit = (pc.n_in + 7u) / 8u;
		for (uint u = lane; u < n_unit; u += MM_LANES) {
			float v[8];
			deq8(row, u >> 2, u & 3u, pc.n_in, v);
			uint e0 = 8u * u;
			[[unroll]] for (uint r = 0u; r < MV_ROWS; r++) {
				if (r >= n_rows)
					break;
				uint xa = pc.x_off + r * pc.ldx + e0;
				[[unroll]] for (uint i = 0u; i < 8u; i++) {
					float xv = e0 + i < pc.n_in ? xs[xa + i] : 0.0;
					s[r] = fma(v[i], xv, s[r]);
				}
			}
		}
		[[unroll]] for (uint r = 0u; r < MV_ROWS; r++)
			lane_sums[half_][r][lane] = s[r];
	}
	barrier();
	if (live && lane < n_rows) {
		precise float y = 0.0;
		[[unroll]] for (uint l = 0u; l < MM_LANES; l++)
			y += lane_sums[half_][lane][l];
		ys[pc.y_off + lane * pc.ldy + o] = y;
	}
}
