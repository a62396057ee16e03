// copy: d (n_rows, n) ldd = s (n_rows, n) lds. Groups as add.comp.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer D { float d[]; };
layout(std430, binding = 1) readonly buffer S { float s[]; };
layout(push_constant) uniform P { uint dofs, ldd, sofs, lds, n, row0; } p;
void main()
{
	uint i = gl_GlobalInvocationID.x;
	uint r = p.row0 + gl_WorkGroupID.y;
	if (i >= p.n)
		return;
	d[p.dofs + r * p.ldd + i] = s[p.sofs + r * p.lds + i];
}
