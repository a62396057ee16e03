// swiglu_oai: gpt-oss's clamped SwiGLU over n elements (may alias), as
// backend.h states it: g' = min(g, limit), u' = min(max(u, -limit), limit),
// h = g' / (1 + exp(-alpha g')) * (u' + 1). Groups: a 2-D grid of
// 256-element pieces, piece = wg.y * num_wg.x + wg.x (swiglu.comp's).
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer H { float h[]; };
layout(push_constant) uniform P { uint go, uo, ho, n; float alpha, limit; } p;
void main()
{
	uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u +
	         gl_LocalInvocationID.x;
	if (i >= p.n)
		return;
	float gv = g[p.go + i], uv = u[p.uo + i];
	// the CPU's comparisons (a NaN g becomes limit, a NaN u stays NaN)
	float x = gv < p.limit ? gv : p.limit;
	float y = uv < -p.limit ? -p.limit : uv > p.limit ? p.limit : uv;
	// x * sigmoid(alpha x) with exp of a non-positive argument only: no
	// inf / inf where alpha x is very negative
	float e = exp(-abs(p.alpha * x));
	float num = x >= 0.0 ? x : x * e;
	h[p.ho + i] = num / (1.0 + e) * (y + 1.0);
}
