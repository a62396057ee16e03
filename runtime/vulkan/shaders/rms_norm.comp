// rms_norm: one workgroup per row: y = x / sqrt(mean(x^2) + eps) * w.
// Thread t sums the squares of elements t, t + 256, ... in order, then a
// fixed tree over the 256 partials: the order depends only on n.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P { uint xo, ldx, wo, yo, ldy, n, row0; float eps; } p;
shared float part[256];
void main()
{
	uint t = gl_LocalInvocationID.x;
	uint r = p.row0 + gl_WorkGroupID.y;
	uint xr = p.xo + r * p.ldx, yr = p.yo + r * p.ldy;
	float ss = 0.0;
	for (uint i = t; i < p.n; i += 256u) {
		float v = x[xr + i];
		ss += v * v;
	}
	part[t] = ss;
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (t < s)
			part[t] += part[t + s];
		barrier();
	}
	float scale = 1.0 / sqrt(part[0] / float(p.n) + p.eps);
	for (uint i = t; i < p.n; i += 256u)
		y[yr + i] = (x[xr + i] * scale) * w[p.wo + i];
}
