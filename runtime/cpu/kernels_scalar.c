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
 *     dot(q - 32, q8) over the 16 sub-blocks.
 */
#include "runtime/cpu/kernels_shell.h"
#include "runtime/cpu/quant.h"

void kernels__quantize_act(shoal_dtype act, const float *x, void *out, int64_t n)
{
	shoal_quantize_row(act, x, out, n);
}

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

static float ks_dot_q4_k(int64_t n, const kernels__block_q4_k *w, const kernels__block_q8_k *x)
{
	float acc = 0.0f;
	for (int64_t b = 0; b < n / KERNELS__QKK; b++) {
		int32_t isum = 0, imin = 0;
		const uint8_t *q = w[b].qs;
		const int8_t *q8 = x[b].qs;
		for (int j = 0; j < 8; j += 2, q += 32, q8 += 64) {
			int sc0, m0, sc1, m1;
			kernels__q4k_scale_min(w[b].scales, j, &sc0, &m0);
			kernels__q4k_scale_min(w[b].scales, j + 1, &sc1, &m1);
			int32_t lo = 0, hi = 0;
			for (int l = 0; l < 32; l++) {
				lo += (q[l] & 0xf) * q8[l];
				hi += (q[l] >> 4) * q8[l + 32];
			}
			isum += sc0 * lo + sc1 * hi;
			imin += m0 * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
			imin += m1 * (x[b].bsums[2 * j + 2] + x[b].bsums[2 * j + 3]);
		}
		float d = kernels__fp16_to_f32(w[b].d) * x[b].d;
		float dmin = kernels__fp16_to_f32(w[b].dmin) * x[b].d;
		acc += d * (float)isum;
		acc -= dmin * (float)imin;
	}
	return acc;
}

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

/* ---- the table ---------------------------------------------------------------- */

KERNELS__TABLE(kernels__scalar, "scalar", ks, KERNELS__TILES(ks));
