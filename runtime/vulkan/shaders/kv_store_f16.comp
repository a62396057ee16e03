// kv_store_f16: kv_store_f32.comp into F16 elements, rounded to nearest
// even in integer arithmetic (the CPU's shoal_f32_to_fp16 bit for bit;
// the GPU's own conversion may round otherwise).
#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) writeonly buffer K { uint16_t cache[]; };
layout(std430, binding = 2) readonly buffer Q { uint rows[]; };
layout(push_constant) uniform P { uint so, ld, n_head_kv, head_dim, head_ld, qo, row0; } p;
uint to_half(float f)
{
	uint u = floatBitsToUint(f);
	uint sign = (u >> 16) & 0x8000u;
	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7e00u | ((u >> 13) & 0x3ffu);
	if (u >= 0x477ff000u)
		return sign | 0x7c00u;
	if (u >= 0x38800000u) {
		uint r = u - 0x38000000u;
		return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
	}
	if (u < 0x33000000u)
		return sign;
	uint e = u >> 23;
	uint mant = (u & 0x7fffffu) | 0x800000u;
	uint shift = 126u - e;
	uint r = mant >> shift;
	uint rem = mant & ((1u << shift) - 1u);
	uint hf = 1u << (shift - 1u);
	if (rem > hf || (rem == hf && (r & 1u) != 0u))
		r++;
	return sign | r;
}
void main()
{
	uint k = gl_GlobalInvocationID.x;
	if (k >= p.n_head_kv * p.head_dim)
		return;
	uint j = p.row0 + gl_WorkGroupID.y;
	uint r = rows[p.qo + 2u * j], base = rows[p.qo + 2u * j + 1u];
	uint h = k / p.head_dim, d = k % p.head_dim;
	cache[base + h * p.head_ld + d] = uint16_t(to_half(src[p.so + r * p.ld + k]));
}
