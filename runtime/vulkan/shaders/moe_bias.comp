// moe_bias: each slot's expert bias added to its product row:
// y[s] (n) += b[ids[s]] (n), for slots from slot0 (workgroup y), 256
// columns per workgroup x: the add op's rounding, the row chosen by id.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer B { float bv[]; };
layout(std430, binding = 2) readonly buffer I { int ids[]; };
layout(push_constant) uniform P { uint yo, ldy, bo, io, n, slot0; } p;
void main()
{
	uint i = gl_GlobalInvocationID.x;
	uint s = p.slot0 + gl_WorkGroupID.y;
	if (i >= p.n)
		return;
	y[p.yo + s * p.ldy + i] += bv[p.bo + uint(ids[p.io + s]) * p.n + i];
}
