// moe_route: the MoE router's choice (backend.h's moe_route), one
// invocation per row (a router row is n_expert <= 1024 logits and k <= 64
// choices: a few thousand comparisons, next to nothing beside the
// router's product). Keys, groups, top-k (ties to the lower id, NaN
// lowest), weights, renormalisation, scale and the sort by id in the
// order runtime/backend_host.c's shoal_backend_route_row takes them.
// exp is the CPU kernels' steps (kernels_impl.h's kernels__exp_neg),
// every product and sum rounded on its own (precise: never fused).
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };
layout(std430, binding = 2) writeonly buffer I { int ids[]; };
layout(std430, binding = 3) writeonly buffer W { float wt[]; };
layout(push_constant) uniform P {
	uint lo, ld, bo, has_bias, io, wo;
	uint n, k, gating, n_group, n_group_used, norm;
	float scale;
	uint n_rows;
} p;

const uint SOFTMAX = 0u, SIGMOID = 1u, SOFTMAX_TOPK = 2u;
const float NEG_INF = -1.0 / 0.0;

float exp_neg(float x)
{
	if (!(x >= -87.0))
		return 0.0;
	precise float t = x * 1.44269504;
	precise float kf = (t + 12582912.0) - 12582912.0;
	precise float r = (x - kf * 0.693145751953125) - kf * 1.428606765330187e-06;
	precise float q = 1.9841270e-4;
	q = q * r + 0.0013888889;
	q = q * r + 0.0083333338;
	q = q * r + 0.041666668;
	q = q * r + 0.16666667;
	q = q * r + 0.5;
	q = q * r + 1.0;
	q = q * r + 1.0;
	precise float s = uintBitsToFloat(uint(int(kf) + 127) << 23);
	precise float y = q * s;
	return y;
}

uint base;
float mx, inv;     // softmax: the row's max and 1 / sum
uint keep0, keep1; // groups kept (bits)
bool use_sel;

float logit(uint i) { return lg[base + i]; }

float prob(uint i)
{
	float l = logit(i);
	if (p.gating == SOFTMAX) {
		precise float e = exp_neg(l - mx) * inv;
		return e;
	}
	if (p.gating == SIGMOID) {
		if (l >= 0.0) {
			precise float d = 1.0 + exp_neg(-l);
			return 1.0 / d;
		}
		float e = exp_neg(l);
		precise float d = 1.0 + e;
		return e / d;
	}
	return l;
}

// the key before the group mask
float key0(uint i)
{
	if (!use_sel)
		return logit(i);
	precise float v = prob(i);
	if (p.has_bias != 0u)
		v = v + bias[p.bo + i];
	return v;
}

float key(uint i)
{
	if (p.n_group >= 2u) {
		uint g = i / (p.n / p.n_group);
		bool kept = g < 32u ? (keep0 & (1u << g)) != 0u : (keep1 & (1u << (g - 32u))) != 0u;
		if (!kept)
			return NEG_INF;
	}
	return key0(i);
}

void main()
{
	uint row = gl_GlobalInvocationID.x;
	if (row >= p.n_rows)
		return;
	base = p.lo + row * p.ld;
	use_sel = p.has_bias != 0u || p.n_group >= 2u;
	if (p.gating == SOFTMAX) {
		mx = NEG_INF;
		for (uint i = 0u; i < p.n; i++)
			mx = logit(i) > mx ? logit(i) : mx;
		precise float sum = 0.0;
		for (uint i = 0u; i < p.n; i++)
			sum = sum + exp_neg(logit(i) - mx);
		inv = 1.0 / sum;
	}
	keep0 = 0xffffffffu, keep1 = 0xffffffffu;
	if (p.n_group >= 2u) {
		uint per = p.n / p.n_group;
		float gs[64];
		for (uint g = 0u; g < p.n_group; g++) {
			float b1 = NEG_INF, b2 = NEG_INF;
			for (uint i = 0u; i < per; i++) {
				float v = key0(g * per + i);
				if (v > b1) {
					b2 = b1;
					b1 = v;
				} else if (v > b2) {
					b2 = v;
				}
			}
			precise float s = b1 + b2;
			gs[g] = s;
		}
		uint k0 = 0u, k1 = 0u;
		for (uint u = 0u; u < p.n_group_used; u++) {
			uint best = p.n_group;
			for (uint g = 0u; g < p.n_group; g++) {
				bool taken = g < 32u ? (k0 & (1u << g)) != 0u
				                     : (k1 & (1u << (g - 32u))) != 0u;
				if (!taken && (best == p.n_group || gs[g] > gs[best]))
					best = g;
			}
			if (best < 32u)
				k0 |= 1u << best;
			else
				k1 |= 1u << (best - 32u);
		}
		keep0 = k0, keep1 = k1;
	}
	int id[64];
	float w[64];
	for (uint j = 0u; j < p.k; j++) {
		int best = -1;
		float bv = NEG_INF;
		for (uint i = 0u; i < p.n; i++) {
			bool taken = false;
			for (uint q = 0u; q < j && !taken; q++)
				taken = id[q] == int(i);
			float v = key(i);
			v = isnan(v) ? NEG_INF : v;
			if (!taken && (best < 0 || v > bv)) {
				best = int(i);
				bv = v;
			}
		}
		id[j] = best;
	}
	if (p.gating == SOFTMAX_TOPK) {
		float m = logit(uint(id[0]));
		precise float s = 0.0;
		for (uint j = 0u; j < p.k; j++) {
			w[j] = exp_neg(logit(uint(id[j])) - m);
			s = s + w[j];
		}
		for (uint j = 0u; j < p.k; j++)
			w[j] = w[j] / s;
	} else {
		for (uint j = 0u; j < p.k; j++)
			w[j] = prob(uint(id[j]));
	}
	if (p.norm != 0u) {
		precise float s = 0.0;
		for (uint j = 0u; j < p.k; j++)
			s = s + w[j];
		s = max(s, 6.103515625e-5);
		for (uint j = 0u; j < p.k; j++)
			w[j] = w[j] / s;
	}
	if (p.scale != 1.0)
		for (uint j = 0u; j < p.k; j++)
			w[j] = w[j] * p.scale;
	for (uint j = 1u; j < p.k; j++) {
		int x = id[j];
		float wj = w[j];
		uint i = j;
		for (; i > 0u && id[i - 1u] > x; i--) {
			id[i] = id[i - 1u];
			w[i] = w[i - 1u];
		}
		id[i] = x;
		w[i] = wj;
	}
	for (uint j = 0u; j < p.k; j++) {
		ids[p.io + row * p.k + j] = id[j];
		wt[p.wo + row * p.k + j] = w[j];
	}
}
