/*
 * runtime/cpu/kernels.h: the matrix-vector kernels of the CPU backend (and
 * the inner loops of attention), as a const ops table per ISA (scalar, AVX2, AVX-512, NEON), chosen
 * once at start-up from what the CPU offers.
 *
 * Part: runtime/, room cpu/. Like the reference engine for GGUF, a weight of
 * type W multiplies an activation row converted to W's partner type
 * (shoal_kernels_act_type): F32 x F32, F16 x F16, BF16 x BF16,
 * Q8_0/Q4_0/Q5_0/Q5_1/IQ4_NL/MXFP4 x Q8_0, and the 256-element types
 * Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS and the IQ grid types (IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) x Q8_K.
 *
 * Determinism: every output element is one dot product whose order of
 * accumulation depends only on n and the ISA, never on nrows, ncols, the
 * row range or the thread doing it; so results are bitwise independent of
 * thread count and batching. The scalar table is always compiled and is the
 * oracle the SIMD tables are tested against.
 */
#ifndef SHOAL_RUNTIME_KERNELS_H
#define SHOAL_RUNTIME_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "models/dtype.h"

typedef struct shoal_kernels {
	/* "scalar", "avx2", "avx512" (with VNNI), "avx512bw" (AVX-512 without
	 * VNNI), "neon" (with dotprod), "neon-base" (without) */
	const char *isa;

	/* Convert x[n] (f32) to a row of type act (F32, F16, BF16, Q8_0, Q8_K)
	 * in out (shoal_dtype_row_bytes(act, n) bytes). Never NULL. */
	void (*quantize_act)(shoal_dtype act, const float *x, void *out, int64_t n);

	/* y[i] = dot(W row i, xq) for i in [0, nrows). W rows hold n elements of
	 * type wt, row_bytes apart; xq is one row of shoal_kernels_act_type(wt).
	 * Never NULL; does not block; owns nothing. */
	void (*gemv)(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes, int64_t nrows,
	             const void *xq, float *y);

	/* The same for ncols activation rows (xq_stride bytes apart):
	 * y[c * y_stride + i] = dot(W row i, xq row c). Each element is
	 * bitwise what gemv gives for that row and column. Never NULL. */
	void (*gemm)(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes, int64_t nrows,
	             const void *xq, size_t xq_stride, int64_t ncols, float *y, size_t y_stride);

	/* Weights packed once for gemm, where the table has a packed form for
	 * wt (AVX-512 with VNNI: Q8_0, as its gemm repacks each group of 16
	 * rows on the fly): pack_bytes(wt, n, nrows) is the size, 0 where
	 * there is none (then pack and gemm_packed must not be called); pack
	 * fills out (64-byte aligned) from the matrix; gemm_packed is gemm
	 * over its rows [row0, row0 + nrows) (row0 a multiple of 16), bitwise
	 * what gemm gives. Never NULL. */
	size_t (*pack_bytes)(shoal_dtype wt, int64_t n, int64_t nrows);
	void (*pack)(shoal_dtype wt, int64_t n, const void *w, size_t row_bytes, int64_t nrows,
	             void *out);
	void (*gemm_packed)(shoal_dtype wt, int64_t n, const void *packed, int64_t row0,
	                    int64_t nrows, const void *xq, size_t xq_stride, int64_t ncols,
	                    float *y, size_t y_stride);

	/* Attention over one KV head, for the ng query heads that share it
	 * (rows of hd floats, q and o contiguous; cached rows k_ld / v_ld
	 * floats apart). attn_scores: s[g * s_ld + t] = dot(q_g, k_t) * scale
	 * for t < n, each dot as 8 partial sums p_j over the elements i = j
	 * mod 8 (products rounded, then added in order), then ((p0 + p4) +
	 * (p2 + p6)) + ((p1 + p5) + (p3 + p7)), plus the n % 8 tail summed in
	 * order. attn_values: o[g * hd + d] = sum over t in order of p[g * p_ld
	 * + t] * v_t[d], from 0. Every table gives the scalar table's bits. */
	void (*attn_scores)(const float *q, int ng, int hd, const float *k, size_t k_ld, int n,
	                    float scale, float *s, size_t s_ld);
	void (*attn_values)(const float *p, size_t p_ld, int ng, int hd, const float *v,
	                    size_t v_ld, int n, float *o);
	/* The same over an F16 cache (IEEE binary16 rows, k_ld / v_ld halves
	 * apart): bitwise what attn_scores / attn_values give on the rows
	 * converted to F32 (the conversion is exact; NaN payloads aside). */
	void (*attn_scores_f16)(const float *q, int ng, int hd, const uint16_t *k, size_t k_ld,
	                        int n, float scale, float *s, size_t s_ld);
	void (*attn_values_f16)(const float *p, size_t p_ld, int ng, int hd, const uint16_t *v,
	                        size_t v_ld, int n, float *o);
	/* attn_values (and its F16 twin) with each sum starting from o's value
	 * instead of 0: positions 0..n-1 done as a run of n1 by attn_values
	 * then the other n - n1 by attn_values_acc give the bits of one run of
	 * n (the CPU backend's ring planes, whose window may wrap). */
	void (*attn_values_acc)(const float *p, size_t p_ld, int ng, int hd, const float *v,
	                        size_t v_ld, int n, float *o);
	void (*attn_values_acc_f16)(const float *p, size_t p_ld, int ng, int hd, const uint16_t *v,
	                            size_t v_ld, int n, float *o);

	/* s[n] in place: e_t = exp(s_t - max) by kernels_impl.h's
	 * kernels__exp_neg, then e_t * (float)(1 / sum), the sum in double as
	 * 8 partial sums over t = j mod 8 reduced as attn_scores reduces its
	 * lanes, plus the n % 8 tail in order. Every table gives the scalar
	 * table's bits. */
	void (*softmax)(float *s, int n);

	/* h[i] = silu(g[i]) u[i] for i < n (the SwiGLU FFN) by kernels_impl.h's
	 * kernels__silu_mul1; g, u, h may alias. Every table gives the scalar
	 * table's bits. */
	void (*silu_mul)(const float *g, const float *u, size_t n, float *h);
} shoal_kernels;

/* The activation type that weights of type wt multiply with. */
shoal_dtype shoal_kernels_act_type(shoal_dtype wt);

/* The best table for this CPU (cpuid / hwcaps), chosen on first call; the
 * environment variable SHOAL_ISA=scalar|avx2|avx512|neon overrides. */
const shoal_kernels *shoal_kernels_best(void);
/* A named table, or NULL if not compiled in or not supported by this CPU.
 * "avx512" gives the best AVX-512 table (VNNI if the CPU has it), "neon" the
 * best NEON one; "avx512bw" and "neon-base" name the tables without VNNI /
 * dotprod (for tests: all tables of an ISA family give bitwise equal results).
 *
 * Alignment: weight rows as GGUF stores them (2-byte aligned blocks; the
 * 17-byte MXFP4 blocks are read by bytes and need none); Q8_K
 * activation rows 4-byte aligned (a float per block); F32 rows 4-byte. */
const shoal_kernels *shoal_kernels_by_name(const char *isa);
const shoal_kernels *shoal_kernels_scalar(void);

/* Where every table's streaming loops prefetch weights on x86: "l1"
 * (prefetcht0, every cache level) or "l2" (prefetcht1, L2 and below);
 * "l2" elsewhere (NEON's PLDL2KEEP, fixed). Neither is fastest on every
 * CPU (kernels_shell.h has the figures), so the choice starts from the
 * vendor (Intel "l2", others "l1"), the start-up probe
 * (kernels_probe.h) may replace it by the faster of the two it measured,
 * and SHOAL_PREFETCH=l1|l2 fixes it (the probe then leaves it). Results
 * are bitwise the same either way: only speed changes. */
const char *shoal_kernels_prefetch(void);
/* Whether SHOAL_PREFETCH fixed the choice. */
int shoal_kernels_prefetch_fixed(void);
/* Set "l2" (nonzero) or "l1"; ignored on a non-x86 build. */
void shoal_kernels_set_prefetch(int l2);

#endif
