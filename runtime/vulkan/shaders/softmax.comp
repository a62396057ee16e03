// softmax: one workgroup per row, in place: exp(x - max) / sum. The max
// and the sum are fixed trees over 256 per-thread partials (thread t
// takes elements t, t + 256, ... in order).
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { uint xo, ld, n, row0; } p;
shared float part[256];
void main()
{
	uint t = gl_LocalInvocationID.x;
	uint base = p.xo + (p.row0 + gl_WorkGroupID.y) * p.ld;
	float mx = -1.0 / 0.0;
	for (uint i = t; i < p.n; i += 256u)
		mx = max(mx, x[base + i]);
	part[t] = mx;
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (t < s)
			part[t] = max(part[t], part[t + s]);
		barrier();
	}
	mx = part[0];
	barrier();
	float sum = 0.0;
	for (uint i = t; i < p.n; i += 256u) {
		float e = exp(x[base + i] - mx);
		x[base + i] = e;
		sum += e;
	}
	part[t] = sum;
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (t < s)
			part[t] += part[t + s];
		barrier();
	}
	float inv = 1.0 / part[0];
	for (uint i = t; i < p.n; i += 256u)
		x[base + i] *= inv;
}
