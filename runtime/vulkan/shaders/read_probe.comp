// read_probe: streams n vec4 of a buffer from vec4 so on and writes one sum per thread
// (so the reads cannot be dropped); the read bandwidth meter. Thread t of
// the grid reads vec4 t, t + T, t + 2T, ... (T threads in all).
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { vec4 s[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint so, n, oo; } p;
void main()
{
	uint t = gl_GlobalInvocationID.x;
	uint T = gl_NumWorkGroups.x * 256u;
	vec4 acc = vec4(0.0);
	for (uint i = t; i < p.n; i += T)
		acc += s[p.so + i];
	o[p.oo + t] = acc.x + acc.y + acc.z + acc.w;
}
