/*
 * runtime/vulkan/shaders/mm_tile.glsl: y = x W^T for many rows of x
 * (prefill): a workgroup of 256 threads computes a tile of 64 rows x 64
 * outputs, each thread 4 x 4 of them, stepping over n_in 4 units (32
 * elements) at a time in mm_order.glsl's lane order: lane by lane, 4 of
 * the lane's units a step. Per step the workgroup stages the x tile (64 x
 * 32 floats, runs of 8) and the weight tile (64 x 4 units, dequantized
 * once: one unit of 8 per thread) in shared memory; each thread then does
 * 16 x 32 fmas from 8 x 32 shared reads. A thread keeps, per output, the running lane sum s and the total
 * y, so the result is bitwise the mat-vec's (mm_vec.glsl).
 *
 * Dispatch: ceil(n_out / 64) output tiles (folded into x and y) by
 * ceil(n_rows / 64) row tiles in z.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

#define IQ_GRID_BINDING 3 /* the IQ grid types' grids (mm_deq_iq.glsl) */
#include "mm_deq.glsl"
#include "mm_order.glsl"

#define TILE 64u

layout(local_size_x = 256) in;

/* 16 KiB in all, the least maxComputeSharedMemorySize a device offers.
 * x_tile[row][e]: a warp stages one row's 32 elements (no bank conflict)
 * and reads at most 2 rows (broadcasts). w_tile[o][e ^ (o & 31)]: the
 * swizzle puts the 32 elements e that a warp's 16 outputs read at one e on
 * distinct banks, and so do the 8 x 4 parts its staging writes. */
shared float x_tile[TILE * 32u];
shared float w_tile[TILE * 32u];

void main()
{
	uint tid = gl_LocalInvocationID.x;
	uint tx = tid & 15u, ty = tid >> 4;
	/* the output tile is folded over x and y, the row tile is z */
	uint o0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * TILE;
	uint r0 = gl_WorkGroupID.z * TILE;
	if (o0 >= pc.n_out)
		return; /* the whole group: no barrier is skipped by half of it */
	uint n_unit = (pc.n_in + 7u) / 8u;
	/* this thread's weight unit in the staging: output wo, unit wu of 4 */
	uint wo = tid >> 2, wu = tid & 3u;
	bool w_live = o0 + wo < pc.n_out;
	uint w_row = pc.w_off + (o0 + wo) * pc.row_bytes;

	precise float s[16], y[16];
	[[unroll]] for (uint k = 0u; k < 16u; k++) {
		s[k] = 0.0;
		y[k] = 0.0;
	}
	for (uint lane = 0u; lane < MM_LANES; lane++) {
		/* the lane's units: lane + 32 m for m < c, 4 of them a step */
		uint c = n_unit > lane ? (n_unit - lane + MM_LANES - 1u) / MM_LANES : 0u;
		for (uint m0 = 0u; m0 < c; m0 += 4u) {
			/* x tile: 64 rows x 4 units of 8, 8 elements per thread */
			[[unroll]] for (uint k = 0u; k < 8u; k++) {
				uint idx = tid + 256u * k;
				uint r = idx >> 5, e = idx & 31u;
				uint ee = 8u * (lane + MM_LANES * (m0 + (e >> 3))) + (e & 7u);
				float v = 0.0;
				if (r0 + r < pc.n_rows && m0 + (e >> 3) < c && ee < pc.n_in)
					v = xs[pc.x_off + (r0 + r) * pc.ldx + ee];
				x_tile[r * 32u + e] = v;
			}
			/* weight tile: 64 outputs x 4 units, one unit per thread */
			float v[8];
			uint u = lane + MM_LANES * (m0 + wu);
			if (w_live && m0 + wu < c)
				deq8(w_row, u >> 2, u & 3u, pc.n_in, v);
			else
				[[unroll]] for (uint i = 0u; i < 8u; i++)
					v[i] = 0.0;
			[[unroll]] for (uint i = 0u; i < 8u; i++)
				w_tile[wo * 32u + ((8u * wu + i) ^ (wo & 31u))] = v[i];
			barrier();
			/* only the lane's units: the mat-vec adds no 0 * 0 past them
			 * (a uniform branch) */
			[[unroll]] for (uint q = 0u; q < 4u; q++) {
				if (m0 + q >= c)
					break;
				[[unroll]] for (uint k = 0u; k < 8u; k++) {
					uint e = 8u * q + k;
					float xv[4], wv[4];
					[[unroll]] for (uint i = 0u; i < 4u; i++) {
						uint o = tx + 16u * i;
						xv[i] = x_tile[(ty + 16u * i) * 32u + e];
						wv[i] = w_tile[o * 32u + (e ^ (o & 31u))];
					}
					[[unroll]] for (uint i = 0u; i < 4u; i++)
						[[unroll]] for (uint j = 0u; j < 4u; j++)
							s[4u * i + j] =
							    fma(wv[j], xv[i], s[4u * i + j]);
				}
			}
			barrier();
		}
		[[unroll]] for (uint k = 0u; k < 16u; k++) {
			y[k] += s[k];
			s[k] = 0.0;
		}
	}
	[[unroll]] for (uint i = 0u; i < 4u; i++) {
		uint r = r0 + ty + 16u * i;
		if (r >= pc.n_rows)
			continue;
		[[unroll]] for (uint j = 0u; j < 4u; j++) {
			uint o = o0 + tx + 16u * j;
			if (o < pc.n_out)
				ys[pc.y_off + r * pc.ldy + o] = y[4u * i + j];
		}
	}
}
