// kv_store_f32: row j of the call's rows (params: its source row and its
// cache element base) writes head h's head_dim elements to
// cache[base + h * head_ld + d]. Groups: x over (d, head) in 256s, y over
// the rows of this dispatch (all in one cache buffer).
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) writeonly buffer K { float cache[]; };
layout(std430, binding = 2) readonly buffer Q { uint rows[]; };
layout(push_constant) uniform P { uint so, ld, n_head_kv, head_dim, head_ld, qo, row0; } p;
void main()
{
	uint k = gl_GlobalInvocationID.x;
	if (k >= p.n_head_kv * p.head_dim)
		return;
	uint j = p.row0 + gl_WorkGroupID.y;
	uint r = rows[p.qo + 2u * j], base = rows[p.qo + 2u * j + 1u];
	uint h = k / p.head_dim, d = k % p.head_dim;
	cache[base + h * p.head_ld + d] = src[p.so + r * p.ld + k];
}
