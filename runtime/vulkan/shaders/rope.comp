// rope: in place on x (rows, n_head * head_dim) ld: thread (i, h) of row
// r rotates pair i of head h by the angles of position pos[r] (params),
// cs (n_ctx, n_rot) holding (cos, sin) per pair. Groups: x over
// (pair, head) in 256s, y over rows from row0.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer C { float cs[]; };
layout(std430, binding = 2) readonly buffer Q { uint pos[]; };
layout(push_constant) uniform P { uint xo, ld, n_head, head_dim, n_rot, neox, co, po, row0; } p;
void main()
{
	uint half_rot = p.n_rot / 2u;
	uint k = gl_GlobalInvocationID.x;
	if (k >= half_rot * p.n_head)
		return;
	uint h = k / half_rot, i = k % half_rot;
	uint r = p.row0 + gl_WorkGroupID.y;
	uint c = p.co + pos[p.po + r] * p.n_rot;
	float co = cs[c + 2u * i], si = cs[c + 2u * i + 1u];
	uint v = p.xo + r * p.ld + h * p.head_dim;
	uint i0 = p.neox != 0u ? i : 2u * i, i1 = p.neox != 0u ? i + half_rot : 2u * i + 1u;
	float x0 = x[v + i0], x1 = x[v + i1];
	x[v + i0] = x0 * co - x1 * si;
	x[v + i1] = x0 * si + x1 * co;
}
