// add: y (n_rows, n) ldy += x (n_rows, n) ldx; ldx 0 adds one row to all.
// Groups: x over columns (256 each), y over rows from row0.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint yo, ldy, xo, ldx, n, row0; } p;
void main()
{
	uint i = gl_GlobalInvocationID.x;
	uint r = p.row0 + gl_WorkGroupID.y;
	if (i >= p.n)
		return;
	y[p.yo + r * p.ldy + i] += x[p.xo + r * p.ldx + i];
}
