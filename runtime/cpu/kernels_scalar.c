/*
 * runtime/cpu/kernels_scalar.c: the scalar kernel table, always compiled, and
 * the oracle every SIMD table is tested against; also the activation
 * quantizer that all tables share.
 *
 * Part: runtime/, room cpu/. Order of accumulation (fixed, per dot product):
 *   F32/F16/BF16: products rounded to float, summed in double in element
 *     order, the sum rounded to float once (as the reference's scalar code);
 *   Q8_0, Q4_0: per block an exact int32 dot sumi; acc(float) += sumi *
 *     (d_w * d_x), blocks in order;
 *   Q4_K: per super-block exact ints isum = sum_j sc_j * dot_j and imin =
 *     sum_j m_j * bsum_j; acc += (d_w * d_x) * isum, then acc -= (dmin_w *
 *     d_x) * imin;  Q6_K: acc += (d_w * d_x) * isum, isum = sum_j sc_j *
 *     dot(q - 32, q8) over the 16 sub-blocks;
 *   Q5_0, IQ4_NL, MXFP4: as Q4_0, the weight scale being the fp16 d (the
 *     E8M0 scale halved for MXFP4); Q5_1: per block acc += sumi * (d_w *
 *     d_x), then acc += sumx * (m_w * d_x), sumx = sum of the x quants;
 *   Q5_K, Q2_K: as Q4_K (Q2_K: 16 sub-blocks, 4-bit scale and min);
 *     Q3_K, IQ4_XS: as Q6_K, isum = sum_j sc_j * dot_j over the sub-blocks;
 *   IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS/IQ3_S/IQ1_S/IQ1_M: as Q6_K over the
 *     16-element halves of kernels_iq.h's sub-blocks, D_w in place of d_w.
 */
#include <math.h>

#include "runtime/cpu/kernels_shell.h"
#include "runtime/cpu/quant.h"

void kernels__quantize_act(shoal_dtype act, const float *x, void *out, int64_t n)
{
	shoal_quantize_row(act, x, out, n);
}

#define ks_quantize_act kernels__quantize_act

/* ---- one dot product per type ----------------------------------------------- */

static float ks_dot_f32(int64_t n, const float *w, const float *x)
{
	double acc = 0.0;
	for (int64_t i = 0; i < n; i++)
		acc += (double)(w[i] * x[i]);
	return (float)acc;
}

static float ks_dot_f16(int64_t n, const uint16_t *w, const uint16_t *x)
{
	double acc = 0.0;
	for (int64_t i = 0; i < n; i++)
		acc += (double)(kernels__fp16_to_f32(w[i]) * kernels__fp16_to_f32(x[i]));
	return (float)acc;
}

static float ks_dot_bf16(int64_t n, const uint16_t *w, const uint16_t *x)
{
	double acc = 0.0;
	for (int64_t i = 0; i < n; i++)
		acc += (double)(shoal_bf16_to_f32(w[i]) * shoal_bf16_to_f32(x[i]));
	return (float)acc;
}

static float ks_dot_q8_0(int64_t n, const kernels__block_q8_0 *w, const kernels__block_q8_0 *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QK; b++) {
		int32_t sumi = 0;
		for (int j = 0; j < KERNELS__QK; j++)
			sumi += w[b].qs[j] * x[b].qs[j];
		acc += (float)sumi * (kernels__fp16_to_f32(w[b].d) * kernels__fp16_to_f32(x[b].d));
	}
	return acc;
}

static float ks_dot_q4_0(int64_t n, const kernels__block_q4_0 *w, const kernels__block_q8_0 *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QK; b++) {
		int32_t sumi = 0;
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			sumi += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
			sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
		}
		acc += (float)sumi * (kernels__fp16_to_f32(w[b].d) * kernels__fp16_to_f32(x[b].d));
	}
	return acc;
}

/* Q4_K and Q5_K (qh NULL for Q4_K): one super-block's exact isum and imin. */
static void ks_k45_sums(const uint8_t *scales, const uint8_t *q, const uint8_t *qh,
                        const kernels__block_q8_k *x, int32_t *isum, int32_t *imin)
{
	const int8_t *q8 = x->qs;
	*isum = *imin = 0;
	for (int j = 0; j < 8; j += 2, q += 32, q8 += 64) {
		int sc0, m0, sc1, m1;
		kernels__q4k_scale_min(scales, j, &sc0, &m0);
		kernels__q4k_scale_min(scales, j + 1, &sc1, &m1);
		int32_t lo = 0, hi = 0;
		for (int l = 0; l < 32; l++) {
			int h0 = qh ? ((qh[l] >> j) & 1) << 4 : 0;
			int h1 = qh ? ((qh[l] >> (j + 1)) & 1) << 4 : 0;
			lo += ((q[l] & 0xf) | h0) * q8[l];
			hi += ((q[l] >> 4) | h1) * q8[l + 32];
		}
		*isum += sc0 * lo + sc1 * hi;
		*imin += m0 * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
		*imin += m1 * (x->bsums[2 * j + 2] + x->bsums[2 * j + 3]);
	}
}

#define KS_K45_DOT(name, WBLOCK, QH)                                                               \
	static float name(int64_t n, const WBLOCK *w, const kernels__block_q8_k *x)                \
	{                                                                                          \
		float acc = 0.0f;                                                                  \
		for (int64_t b = 0; b < n / KERNELS__QKK; b++) {                                   \
			int32_t isum, imin;                                                        \
			ks_k45_sums(w[b].scales, w[b].qs, QH, &x[b], &isum, &imin);                \
			float d = kernels__fp16_to_f32(w[b].d) * x[b].d;                           \
			float dmin = kernels__fp16_to_f32(w[b].dmin) * x[b].d;                     \
			acc += d * (float)isum;                                                    \
			acc -= dmin * (float)imin;                                                 \
		}                                                                                  \
		return acc;                                                                        \
	}

KS_K45_DOT(ks_dot_q4_k, kernels__block_q4_k, NULL)
KS_K45_DOT(ks_dot_q5_k, kernels__block_q5_k, w[b].qh)

static float ks_dot_q6_k(int64_t n, const kernels__block_q6_k *w, const kernels__block_q8_k *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		int32_t isum = 0;
		const uint8_t *ql = w[b].ql, *qh = w[b].qh;
		const int8_t *q8 = x[b].qs, *sc = w[b].scales;
		for (int c = 0; c < 2; c++, ql += 64, qh += 32, q8 += 128, sc += 8) {
			int32_t s[8] = {0}; /* per sub-block of 16 within the chunk */
			for (int l = 0; l < 32; l++) {
				int is = l / 16, q[4];
				kernels__q6k_quants(ql, qh, l, q);
				s[is + 0] += q[0] * q8[l];
				s[is + 2] += q[1] * q8[l + 32];
				s[is + 4] += q[2] * q8[l + 64];
				s[is + 6] += q[3] * q8[l + 96];
			}
			for (int j = 0; j < 8; j++)
				isum += sc[j] * s[j];
		}
		acc += (kernels__fp16_to_f32(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

/* The 32-element types whose quants are signed bytes times one scale per
 * block: decode(block, q) fills q[32] (element order) and returns the
 * block's weight scale; per block acc += sumi * (scale * d_x). */
typedef float (*ks_decode_fn)(const void *blk, int8_t *q);

static float ks_dot_q32(int64_t n, const char *w, size_t wsize, ks_decode_fn decode,
                        const kernels__block_q8_0 *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QK; b++) {
		int8_t q[KERNELS__QK];
		float dw = decode(w + (size_t)b * wsize, q);
		int32_t sumi = 0;
		for (int j = 0; j < KERNELS__QK; j++)
			sumi += q[j] * x[b].qs[j];
		acc += (float)sumi * (dw * kernels__fp16_to_f32(x[b].d));
	}
	return acc;
}

static void ks_nibbles(const uint8_t *qs, const int8_t *table, int8_t *q)
{
	for (int j = 0; j < KERNELS__QK / 2; j++) {
		q[j] = table[qs[j] & 0xf];
		q[j + 16] = table[qs[j] >> 4];
	}
}

static float ks_decode_q5_0(const void *blk, int8_t *q)
{
	const kernels__block_q5_0 *b = blk;
	for (int j = 0; j < KERNELS__QK / 2; j++) {
		int v[2];
		kernels__q5_quants(b->qs, b->qh, j, v);
		q[j] = (int8_t)(v[0] - 16);
		q[j + 16] = (int8_t)(v[1] - 16);
	}
	return kernels__fp16_to_f32(b->d);
}

static float ks_decode_iq4_nl(const void *blk, int8_t *q)
{
	const kernels__block_iq4_nl *b = blk;
	ks_nibbles(b->qs, kernels__iq4_values, q);
	return kernels__fp16_to_f32(b->d);
}

static float ks_decode_mxfp4(const void *blk, int8_t *q)
{
	const kernels__block_mxfp4 *b = blk;
	ks_nibbles(b->qs, kernels__mxfp4_values, q);
	return kernels__e8m0_half(b->e);
}

static float ks_dot_q5_0(int64_t n, const void *w, const kernels__block_q8_0 *x)
{
	return ks_dot_q32(n, w, sizeof(kernels__block_q5_0), ks_decode_q5_0, x);
}

static float ks_dot_iq4_nl(int64_t n, const void *w, const kernels__block_q8_0 *x)
{
	return ks_dot_q32(n, w, sizeof(kernels__block_iq4_nl), ks_decode_iq4_nl, x);
}

static float ks_dot_mxfp4(int64_t n, const void *w, const kernels__block_q8_0 *x)
{
	return ks_dot_q32(n, w, sizeof(kernels__block_mxfp4), ks_decode_mxfp4, x);
}

/* Q5_1: x = d q + m, so per block dot = d_x (d sumi + m sumx), sumx the
 * sum of the activation quants. */
static float ks_dot_q5_1(int64_t n, const kernels__block_q5_1 *w, const kernels__block_q8_0 *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QK; b++) {
		int32_t sumi = 0, sumx = 0;
		for (int j = 0; j < KERNELS__QK / 2; j++) {
			int q[2];
			kernels__q5_quants(w[b].qs, w[b].qh, j, q);
			sumi += q[0] * x[b].qs[j] + q[1] * x[b].qs[j + 16];
			sumx += x[b].qs[j] + x[b].qs[j + 16];
		}
		float dx = kernels__fp16_to_f32(x[b].d);
		acc += (float)sumi * (kernels__fp16_to_f32(w[b].d) * dx);
		acc += (float)sumx * (kernels__fp16_to_f32(w[b].m) * dx);
	}
	return acc;
}

/* The 2 low bits of element e of a Q2_K / Q3_K super-block (see quant.c). */
static int ks_q2_bits(const uint8_t *qs, int e)
{
	return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

static float ks_dot_q2_k(int64_t n, const kernels__block_q2_k *w, const kernels__block_q8_k *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		int32_t isum = 0, imin = 0;
		for (int j = 0; j < 16; j++) {
			int32_t dot = 0;
			for (int l = 0; l < 16; l++)
				dot += ks_q2_bits(w[b].qs, 16 * j + l) * x[b].qs[16 * j + l];
			isum += (w[b].scales[j] & 0xf) * dot;
			imin += (w[b].scales[j] >> 4) * x[b].bsums[j];
		}
		float d = kernels__fp16_to_f32(w[b].d) * x[b].d;
		float dmin = kernels__fp16_to_f32(w[b].dmin) * x[b].d;
		acc += d * (float)isum;
		acc -= dmin * (float)imin;
	}
	return acc;
}

static float ks_dot_q3_k(int64_t n, const kernels__block_q3_k *w, const kernels__block_q8_k *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		int8_t sc[16];
		kernels__q3k_scales(w[b].scales, sc);
		int32_t isum = 0;
		for (int j = 0; j < 16; j++) {
			int32_t dot = 0;
			for (int l = 0; l < 16; l++) {
				int e = 16 * j + l, hi = (w[b].hmask[e % 32] >> (e / 32)) & 1;
				dot += (ks_q2_bits(w[b].qs, e) + 4 * hi - 4) * x[b].qs[e];
			}
			isum += sc[j] * dot;
		}
		acc += (kernels__fp16_to_f32(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

static float ks_dot_iq4_xs(int64_t n, const kernels__block_iq4_xs *w, const kernels__block_q8_k *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		int32_t isum = 0;
		for (int ib = 0; ib < 8; ib++) {
			int8_t q[32];
			ks_nibbles(w[b].qs + 16 * ib, kernels__iq4_values, q);
			int32_t dot = 0;
			for (int l = 0; l < 32; l++)
				dot += q[l] * x[b].qs[32 * ib + l];
			isum += kernels__iq4xs_scale(&w[b], ib) * dot;
		}
		acc += (kernels__fp16_to_f32(w[b].d) * x[b].d) * (float)isum;
	}
	return acc;
}

/* The IQ grid types (kernels_iq.h): per super-block the exact isum = sum
 * over the 16 halves of sub-blocks of sc_h * dot(q, x quants); acc +=
 * (D_w * d_x) * isum (|isum| < 2^26: 62 * 127 * 16 * 31 * 16). */
KERNELS__INLINE float ks_dot_iq(shoal_dtype t, int64_t n, const char *w,
                                const kernels__block_q8_k *x)
{
	const kernels__iq_grids *G = kernels__iq_grids_get();
	size_t bytes = kernels__iq_block_bytes(t);
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		const char *blk = w + (size_t)b * bytes;
		int32_t isum = 0;
		for (int ib = 0; ib < 8; ib++) {
			kernels__iq_sub o;
			kernels__iq_sub_decode(t, blk, ib, G, &o);
			for (int h = 0; h < 2; h++) {
				int32_t dot = 0;
				for (int l = 2 * h; l < 2 * h + 2; l++)
					for (int j = 0; j < 8; j++)
						dot += kernels__iq_q(t, &o, l, j) *
						       x[b].qs[32 * ib + 8 * l + j];
				isum += o.sc[h] * dot;
			}
		}
		acc += (kernels__iq_d(t, blk) * x[b].d) * (float)isum;
	}
	return acc;
}

#define KS_IQ_DOT(sfx, T)                                                                          \
	static float ks_dot_##sfx(int64_t n, const void *w, const kernels__block_q8_k *x)          \
	{                                                                                          \
		return ks_dot_iq(T, n, w, x);                                                      \
	}

KS_IQ_DOT(iq2_xxs, SHOAL_DTYPE_IQ2_XXS)
KS_IQ_DOT(iq2_xs, SHOAL_DTYPE_IQ2_XS)
KS_IQ_DOT(iq2_s, SHOAL_DTYPE_IQ2_S)
KS_IQ_DOT(iq3_xxs, SHOAL_DTYPE_IQ3_XXS)
KS_IQ_DOT(iq3_s, SHOAL_DTYPE_IQ3_S)
KS_IQ_DOT(iq1_s, SHOAL_DTYPE_IQ1_S)
KS_IQ_DOT(iq1_m, SHOAL_DTYPE_IQ1_M)

/* ---- tiles: each column alone, so gemm == gemv trivially ---------------------- */

#define KS_TILE(name, dot, wtype, xtype)                                                           \
	static void ks_tile_##name(int64_t n, const void *w, const void *const *xq, int ncols,     \
	                           float *out)                                                     \
	{                                                                                          \
		for (int c = 0; c < ncols; c++)                                                    \
			out[c] = dot(n, (const wtype *)w, (const xtype *)xq[c]);                   \
	}

KS_TILE(f32, ks_dot_f32, float, float)
KS_TILE(f16, ks_dot_f16, uint16_t, uint16_t)
KS_TILE(bf16, ks_dot_bf16, uint16_t, uint16_t)
KS_TILE(q8_0, ks_dot_q8_0, kernels__block_q8_0, kernels__block_q8_0)
KS_TILE(q4_0, ks_dot_q4_0, kernels__block_q4_0, kernels__block_q8_0)
KS_TILE(q4_k, ks_dot_q4_k, kernels__block_q4_k, kernels__block_q8_k)
KS_TILE(q6_k, ks_dot_q6_k, kernels__block_q6_k, kernels__block_q8_k)
KS_TILE(q5_0, ks_dot_q5_0, void, kernels__block_q8_0)
KS_TILE(q5_1, ks_dot_q5_1, kernels__block_q5_1, kernels__block_q8_0)
KS_TILE(iq4_nl, ks_dot_iq4_nl, void, kernels__block_q8_0)
KS_TILE(mxfp4, ks_dot_mxfp4, void, kernels__block_q8_0)
KS_TILE(q2_k, ks_dot_q2_k, kernels__block_q2_k, kernels__block_q8_k)
KS_TILE(q3_k, ks_dot_q3_k, kernels__block_q3_k, kernels__block_q8_k)
KS_TILE(q5_k, ks_dot_q5_k, kernels__block_q5_k, kernels__block_q8_k)
KS_TILE(iq4_xs, ks_dot_iq4_xs, kernels__block_iq4_xs, kernels__block_q8_k)
KS_TILE(iq2_xxs, ks_dot_iq2_xxs, void, kernels__block_q8_k)
KS_TILE(iq2_xs, ks_dot_iq2_xs, void, kernels__block_q8_k)
KS_TILE(iq2_s, ks_dot_iq2_s, void, kernels__block_q8_k)
KS_TILE(iq3_xxs, ks_dot_iq3_xxs, void, kernels__block_q8_k)
KS_TILE(iq3_s, ks_dot_iq3_s, void, kernels__block_q8_k)
KS_TILE(iq1_s, ks_dot_iq1_s, void, kernels__block_q8_k)
KS_TILE(iq1_m, ks_dot_iq1_m, void, kernels__block_q8_k)

/* ---- attention: the order every table keeps (kernels.h) ------------------------ */

KERNELS__INLINE float ks_attn_dot(const float *a, const void *c, int n, int f16)
{
	float p[8] = {0};
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			p[j] += a[i + j] * kernels__kv_get(c, (size_t)(i + j), f16);
	float tail = 0.0f;
	for (; i < n; i++)
		tail += a[i] * kernels__kv_get(c, (size_t)i, f16);
	float s0 = p[0] + p[4], s1 = p[1] + p[5], s2 = p[2] + p[6], s3 = p[3] + p[7];
	return ((s0 + s2) + (s1 + s3)) + tail;
}

KERNELS__INLINE void ks_scores_kv(const float *q, int ng, int hd, const void *k, size_t k_ld, int n,
                                  float scale, float *s, size_t s_ld, int f16)
{
	for (int t = 0; t < n; t++)
		for (int g = 0; g < ng; g++)
			s[(size_t)g * s_ld + (size_t)t] =
			    ks_attn_dot(q + (size_t)g * hd,
			                kernels__kv_at(k, (size_t)t * k_ld, f16), hd, f16) *
			    scale;
}

KERNELS__INLINE void ks_values_kv(const float *p, size_t p_ld, int ng, int hd, const void *v,
                                  size_t v_ld, int n, float *o, int f16, int acc)
{
	for (size_t i = 0; !acc && i < (size_t)ng * hd; i++)
		o[i] = 0.0f;
	for (int t = 0; t < n; t++)
		for (int g = 0; g < ng; g++) {
			float pt = p[(size_t)g * p_ld + (size_t)t];
			const void *vt = kernels__kv_at(v, (size_t)t * v_ld, f16);
			for (int d = 0; d < hd; d++)
				o[(size_t)g * hd + d] += pt * kernels__kv_get(vt, (size_t)d, f16);
		}
}

KERNELS__ATTN_ENTRIES(ks)

void kernels__softmax(float *s, int n)
{
	float mx = -INFINITY;
	for (int t = 0; t < n; t++)
		mx = s[t] > mx ? s[t] : mx;
	double p[8] = {0};
	int t = 0;
	for (; t + 8 <= n; t += 8)
		for (int j = 0; j < 8; j++) {
			s[t + j] = kernels__exp_neg(s[t + j] - mx);
			p[j] += s[t + j];
		}
	double tail = 0.0;
	for (; t < n; t++) {
		s[t] = kernels__exp_neg(s[t] - mx);
		tail += s[t];
	}
	double s0 = p[0] + p[4], s1 = p[1] + p[5], s2 = p[2] + p[6], s3 = p[3] + p[7];
	float inv = (float)(1.0 / (((s0 + s2) + (s1 + s3)) + tail));
	for (t = 0; t < n; t++)
		s[t] *= inv;
}
#define ks_softmax kernels__softmax

void kernels__silu_mul(const float *g, const float *u, size_t n, float *h)
{
	for (size_t i = 0; i < n; i++)
		h[i] = kernels__silu_mul1(g[i], u[i]);
}
#define ks_silu_mul    kernels__silu_mul
#define ks_pack_bytes  kernels__no_pack_bytes
#define ks_pack        kernels__no_pack
#define ks_gemm_packed kernels__no_gemm_packed

/* ---- the table ---------------------------------------------------------------- */

KERNELS__TABLE(kernels__scalar, "scalar", ks, ks, .tile = {KERNELS__TILES_ALL(ks)});
