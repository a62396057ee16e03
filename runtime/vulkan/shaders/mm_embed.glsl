/*
 * runtime/vulkan/shaders/mm_embed.glsl: rows of an embedding table to F32,
 * out[r][e] = table[ids[r]][e], with mm_deq.glsl's deq8: bitwise the CPU's
 * shoal_dequantize_row. A thread writes one part (8 elements) of one row;
 * a workgroup covers 256 parts (2048 elements) of a row.
 *
 * Bindings: 0 the table, 1 the ids (int, host parameters), 2 out (F32),
 * 3 the grids of an IQ grid type (mm_deq_iq.glsl).
 * Dispatch: ceil(n_embd / 2048) groups in x by the rows (folded over y and
 * z).
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require

#define IQ_GRID_BINDING 3 /* the IQ grid types' grids (mm_deq_iq.glsl) */
#include "mm_deq.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Out { float outs[]; };

layout(push_constant) uniform EmbedPush {
	uint t_off;     /* byte of the table's row 0 in binding 0 */
	uint row_bytes; /* bytes from one table row to the next */
	uint n_embd;    /* elements of a row */
	uint n_rows;    /* rows to fetch */
	uint id_off;    /* element of ids[0] in binding 1 */
	uint out_off;   /* element of out's row 0 in binding 2 */
}
pc;

void main()
{
	uint r = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;
	uint g = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x; /* the part */
	uint e0 = 8u * g;
	if (r >= pc.n_rows || e0 >= pc.n_embd)
		return;
	uint row = pc.t_off + uint(ids[pc.id_off + r]) * pc.row_bytes;
	float v[8];
	deq8(row, g >> 2, g & 3u, pc.n_embd, v);
	uint at = pc.out_off + r * pc.n_embd + e0;
	for (uint i = 0u; i < 8u; i++)
		if (e0 + i < pc.n_embd)
			outs[at + i] = v[i];
}
