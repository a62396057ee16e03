// act_q8: the matmul's activation pre-pass (vk_matmul.c). Rows of x are
// rounded to exactly the values the CPU backend's matmul computes with:
// Q8_0 (blocks of 32, quant.c's quant_q8_0, dequantized: fp16(d) * q) or
// Q8_K (blocks of 256, quant_q8_k: d * q), written as F32 for the matmul
// shaders to read. Workgroup (gx, row): elements 256 gx .. 256 gx + 255 of
// the row, one per thread; p.blk (32 or 256) divides p.n.
//
// Bit for bit the CPU's for every finite input to Q8_0 (a block whose
// fp16 scale rounds to 0 gives 0 on both, whatever its q), and to Q8_K
// for blocks all zero or with a largest magnitude >= 2^-96 (smaller ones:
// the device's handling of subnormals decides); the sign of a zero aside:
//   - the block's largest magnitude, the first element holding it (the
//     CPU's strict `>` scan) for Q8_K's sign: a tree over (|x|, index);
//   - the divisions (amax / 127, 1 / d, -127 / max, 1 / iscale) in integer
//     arithmetic, rounded to nearest even: Vulkan lets x / y be off by 2.5
//     ulp, the CPU's are correctly rounded;
//   - the products and the Q8_K round-to-even (the CPU's + 1.5 * 2^23
//     trick) are `precise` single operations, which Vulkan rounds
//     correctly (to nearest even on every device we know: Vulkan 1.2 leaves
//     the rounding mode to the implementation without float controls);
//   - Q8_0's round half away from zero as quant_round_away does, and its
//     fp16 scale rounded to nearest even in integer arithmetic (as
//     kv_store_f16.comp and shoal_f32_to_fp16).
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint xo, ldx, oo, ldo, n, blk, row0; } p;
shared float ka[256]; // |x| of the candidate (0 for 0 and NaN: never chosen)
shared uint ki[256];  // its element in the workgroup's 256

// a / b rounded to nearest even, a and b normal with a normal quotient;
// anything else falls back to the device's division (zero, inf, NaN,
// subnormals: outside the exact domain above).
float div_rn(float a, float b)
{
	uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
	uint sign = (ua ^ ub) & 0x80000000u;
	uint ea = (ua >> 23) & 0xffu, eb = (ub >> 23) & 0xffu;
	if (ea == 0u || ea == 255u || eb == 0u || eb == 255u)
		return a / b;
	uint ma = (ua & 0x7fffffu) | 0x800000u, mb = (ub & 0x7fffffu) | 0x800000u;
	int e = int(ea) - int(eb);
	if (ma < mb) {
		ma <<= 1;
		e -= 1;
	}
	// ma / mb in [1, 2): 24 quotient bits and a guard bit, restoring
	uint q = 0u, r = ma;
	for (int i = 0; i < 25; i++) {
		q <<= 1;
		if (r >= mb) {
			r -= mb;
			q |= 1u;
		}
		r <<= 1;
	}
	uint m = q >> 1;
	if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u))
		m++;
	if (m == 0x1000000u) {
		m >>= 1;
		e += 1;
	}
	int be = e + 127;
	if (be <= 0 || be >= 255)
		return a / b;
	return uintBitsToFloat(sign | (uint(be) << 23) | (m & 0x7fffffu));
}

// shoal_f32_to_fp16: round to nearest even, in integer arithmetic.
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

// The exact F32 value of fp16 bits h (subnormals as m * 2^-24).
float from_half(uint h)
{
	uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
	if (e == 0u) {
		float v = float(m) * 5.9604644775390625e-8; // 2^-24: exact
		return sign != 0u ? -v : v;
	}
	if (e == 31u)
		return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
	return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

void main()
{
	uint t = gl_LocalInvocationID.x;
	uint r = p.row0 + gl_WorkGroupID.y;
	uint i = gl_WorkGroupID.x * 256u + t;
	bool in_row = i < p.n;
	float v = in_row ? x[p.xo + r * p.ldx + i] : 0.0;
	float av = abs(v);
	ka[t] = av > 0.0 ? av : 0.0;
	ki[t] = t;
	barrier();
	// within each block of p.blk threads: the largest |x|, the lower
	// element on ties (the CPU keeps the first)
	for (uint s = p.blk >> 1; s > 0u; s >>= 1) {
		uint base = t % p.blk;
		if (base < s) {
			float kb = ka[t + s];
			uint ib = ki[t + s];
			if (kb > ka[t] || (kb == ka[t] && ib < ki[t])) {
				ka[t] = kb;
				ki[t] = ib;
			}
		}
		barrier();
	}
	uint lead = t - t % p.blk;
	float amax = ka[lead];
	float vmax = amax > 0.0 ? x[p.xo + r * p.ldx + gl_WorkGroupID.x * 256u + ki[lead]] : 0.0;
	if (!in_row)
		return;
	precise float res;
	if (p.blk == 32u) {
		float d = div_rn(amax, 127.0);
		float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
		precise float y = v * id;
		int q = 0;
		if (y > -8388608.0 && y < 8388608.0) {
			q = int(y); // toward zero
			precise float f = y - float(q);
			if (f >= 0.5)
				q++;
			else if (f <= -0.5)
				q--;
		}
		res = from_half(to_half(d)) * float(q);
	} else if (vmax == 0.0) {
		res = 0.0;
	} else {
		float iscale = div_rn(-127.0, vmax);
		precise float y = iscale * v;
		precise float m = y + 12582912.0;
		int q = int(floatBitsToUint(m) & 0x7fffffu) - 0x400000;
		q = q > 127 ? 127 : q;
		q = (q << 24) >> 24; // the CPU's (int8_t)
		float d = div_rn(1.0, iscale);
		res = d * float(q);
	}
	o[p.oo + r * p.ldo + i] = res;
}
