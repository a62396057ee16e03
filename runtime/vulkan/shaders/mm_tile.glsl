/*
 * runtime/vulkan/shaders/mm_tile.glsl: y = x W^T for many rows of x
 * (prefill): a workgroup of 256 threads computes a tile of 64 rows x 64
 * outputs, each thread 4 x 4 of them, stepping over n_in one piece (32
 * elements) at a time in mm_order.glsl's lane order. Per step the
 * workgroup stages the x tile (64 x 32 floats, coalesced reads) and the
 * weight tile (64 pieces, dequantized once: one part of 8 per thread) in
 * shared memory; each thread then does 16 x 32 fmas from 8 x 32 shared
 * reads. A thread keeps, per output, the running lane sum s and the total
 * y, so the result is bitwise the mat-vec's (mm_vec.glsl).
 *
 * Dispatch: ceil(n_out / 64) output tiles (folded into x and y) by
 * ceil(n_rows / 64) row tiles in z.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

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
	uint n_piece = (pc.n_in + 31u) / 32u;
	/* this thread's weight part in the staging: output wo, part wp */
	uint wo = tid >> 2, wp = tid & 3u;
	bool w_live = o0 + wo < pc.n_out;
	uint w_row = pc.w_off + (o0 + wo) * pc.row_bytes;

	precise float s[16], y[16];
	[[unroll]] for (uint k = 0u; k < 16u; k++) {
		s[k] = 0.0;
		y[k] = 0.0;
	}
	for (uint lane = 0u; lane < MM_LANES; lane++) {
		for (uint p = lane; p < n_piece; p += MM_LANES) {
			/* x tile: 64 rows x 32 elements, 8 per thread */
			[[unroll]] for (uint k = 0u; k < 8u; k++) {
				uint idx = tid + 256u * k;
				uint r = idx >> 5, e = idx & 31u;
				uint ee = 32u * p + e;
				float v = 0.0;
				if (r0 + r < pc.n_rows && ee < pc.n_in)
					v = xs[pc.x_off + (r0 + r) * pc.ldx + ee];
				x_tile[r * 32u + e] = v;
			}
			float v[8];
			if (w_live)
				deq8(w_row, p, wp, pc.n_in, v);
			else
				[[unroll]] for (uint i = 0u; i < 8u; i++)
					v[i] = 0.0;
			[[unroll]] for (uint i = 0u; i < 8u; i++)
				w_tile[wo * 32u + ((8u * wp + i) ^ (wo & 31u))] = v[i];
			barrier();
			[[unroll]] for (uint e = 0u; e < 32u; e++) {
				float xv[4], wv[4];
				[[unroll]] for (uint i = 0u; i < 4u; i++) {
					uint o = tx + 16u * i;
					xv[i] = x_tile[(ty + 16u * i) * 32u + e];
					wv[i] = w_tile[o * 32u + (e ^ (o & 31u))];
				}
				[[unroll]] for (uint i = 0u; i < 4u; i++)
					[[unroll]] for (uint j = 0u; j < 4u; j++)
						s[4u * i + j] = fma(wv[j], xv[i], s[4u * i + j]);
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
