// moe_gather: the MoE op's grouped path (vk_moe.c) gathers the rows of x
// that each slot reads, in the slots' expert order: out[i] = x[rows[i]]
// for n elements. Workgroup (gx, gy): elements 256 gx .. 256 gx + 255 of
// out row row0 + gy.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer R { uint rows[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint xo, ldx, ro, oo, n, row0; } p;
void main()
{
	uint i = p.row0 + gl_WorkGroupID.y;
	uint t = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
	if (t >= p.n)
		return;
	o[p.oo + i * p.n + t] = x[p.xo + rows[p.ro + i] * p.ldx + t];
}
