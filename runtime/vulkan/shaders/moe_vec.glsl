/*
 * runtime/vulkan/shaders/moe_vec.glsl: the expert products of the MoE op
 * (vk_moe.c): y[s] = x[s / x_div] W_e^T for every slot s of a batch, with
 * e = ids[s] the slot's expert, W_e at byte (e - e0) * exp_bytes from the
 * bound range's expert e0. Slots whose expert is outside [e0, e1) (held by
 * another binding of the same tensor) are left to the dispatch that binds
 * theirs. One output is computed as mm_vec.glsl computes it for one row
 * (the order of mm_order.glsl: 32 lane sums of fma over units of 8, then
 * their serial sum), so an expert's product here equals the backend's
 * matmul of that expert's matrix bit for bit.
 *
 * Bindings: 0 the weights (mm_deq.glsl), 1 x (F32), 2 y (F32), 3 ids
 * (int), 4 the grids of an IQ grid type (mm_deq_iq.glsl). Dispatch: ceil(n_out / 2) groups over x and y (linear index
 * gy * num_x + gx), slots slot0 + z.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

#define IQ_GRID_BINDING 4 /* the IQ grid types' grids (mm_deq_iq.glsl) */
#include "mm_deq.glsl"

#define MM_LANES 32u

layout(std430, binding = 1) readonly buffer XBuf { float xs[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float ys[]; };
layout(std430, binding = 3) readonly buffer IdBuf { int ids[]; };

layout(push_constant) uniform MoePush {
	uint w_off;     /* byte of expert e0's row 0 in binding 0 */
	uint row_bytes; /* bytes from one row of W to the next */
	uint exp_bytes; /* bytes from one expert's W to the next */
	uint n_in;      /* elements of a row of W and of x */
	uint n_out;     /* rows of W: the outputs */
	uint x_off;     /* element of x's row 0 in binding 1 */
	uint ldx;       /* elements from one row of x to the next */
	uint x_div;     /* slot s reads row s / x_div of x */
	uint y_off;     /* element of y's row 0 (slot 0) in binding 2 */
	uint ldy;       /* elements from one slot's row of y to the next */
	uint id_off;    /* element of ids[0] in binding 3 */
	uint e0, e1;    /* the experts binding 0 holds */
	uint slot0;     /* the slot of z = 0 */
}
pc;

layout(local_size_x = 64) in;

shared float lane_sums[2][MM_LANES];

void main()
{
	uint s = pc.slot0 + gl_WorkGroupID.z;
	int e = ids[pc.id_off + s];
	/* the same for the whole workgroup: its return is uniform */
	if (e < int(pc.e0) || e >= int(pc.e1))
		return;
	uint half_ = gl_LocalInvocationID.x >> 5;
	uint lane = gl_LocalInvocationID.x & (MM_LANES - 1u);
	uint o = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 2u + half_;
	bool live = o < pc.n_out;
	if (live) {
		precise float acc = 0.0;
		uint row = pc.w_off + uint(e - int(pc.e0)) * pc.exp_bytes + o * pc.row_bytes;
		uint xa0 = pc.x_off + (s / pc.x_div) * pc.ldx;
		uint n_unit = (pc.n_in + 7u) / 8u;
		for (uint u = lane; u < n_unit; u += MM_LANES) {
			float v[8];
			deq8(row, u >> 2, u & 3u, pc.n_in, v);
			uint e8 = 8u * u;
			[[unroll]] for (uint i = 0u; i < 8u; i++) {
				float xv = e8 + i < pc.n_in ? xs[xa0 + e8 + i] : 0.0;
				acc = fma(v[i], xv, acc);
			}
		}
		lane_sums[half_][lane] = acc;
	}
	barrier();
	if (live && lane == 0u) {
		precise float y = 0.0;
		[[unroll]] for (uint l = 0u; l < MM_LANES; l++)
			y += lane_sums[half_][l];
		ys[pc.y_off + s * pc.ldy + o] = y;
	}
}
