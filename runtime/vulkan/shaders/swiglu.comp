// swiglu: h = silu(g) * u over n elements (may alias). Groups: a 2-D grid
// of 256-element pieces, piece = wg.y * num_wg.x + wg.x.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer H { float h[]; };
layout(push_constant) uniform P { uint go, uo, ho, n; } p;
void main()
{
	uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u +
	         gl_LocalInvocationID.x;
	if (i >= p.n)
		return;
	float gv = g[p.go + i];
	// the CPU's form: exp of a non-positive argument only
	float e = exp(-abs(gv));
	float num = gv >= 0.0 ? gv : gv * e;
	h[p.ho + i] = num / (1.0 + e) * u[p.uo + i];
}
