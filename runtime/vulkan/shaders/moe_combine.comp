// moe_combine: the MoE op's weighted sum (vk_moe.c): out[r][t] = sum over
// slots j = 0..k-1 in order of w[r k + j] * y[at(r k + j)][t], each product
// rounded to F32 before it is added and the first not added to anything
// (the CPU backend's order, runtime/backend_host.c); at(s) = s, or with
// use_map the slot's row map[s] (the grouped path's expert order).
// Workgroup (gx, gy): elements 256 gx .. 256 gx + 255 of row row0 + gy.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) readonly buffer M { uint map[]; };
layout(push_constant) uniform P { uint yo, ldy, wo, oo, ldo, n, k, row0, mo, use_map; } p;
void main()
{
	uint r = p.row0 + gl_WorkGroupID.y;
	uint t = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
	if (t >= p.n)
		return;
	precise float acc = 0.0;
	for (uint j = 0u; j < p.k; j++) {
		uint s = r * p.k + j;
		uint at = p.use_map != 0u ? map[p.mo + s] : s;
		precise float c = w[p.wo + s] * y[p.yo + at * p.ldy + t];
		acc = j == 0u ? c : acc + c;
	}
	o[p.oo + r * p.ldo + t] = acc;
}
