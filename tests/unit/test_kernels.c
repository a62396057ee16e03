/*
 * tests/unit/test_kernels.c: every kernel table this CPU runs, for every weight
 * type, against the scalar oracle (within a derived tolerance), gemm ==
 * gemv bitwise per table, the scalar oracle against the dequantized dot
 * product, and the choice of the best table.
 *
 * Usage: test_kernels [quick]  ("quick", or SHOAL_KERNELS_QUICK=1 in the
 * environment, uses smaller sizes: for runs under an emulator).
 */
#include <stddef.h>
#include <stdint.h>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_impl.h"
#include "runtime/cpu/quant.h"
#include "tests/unit/test.h"

static int quick;

static uint32_t rng = 2463534242u;
static float rnd(void) /* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

static const char *const isa_names[] = {"scalar", "avx2", "avx512bw",
                                        "avx512", "neon", "neon-base"};
static const shoal_dtype wtypes[] = {
    SHOAL_DTYPE_F32,    SHOAL_DTYPE_F16,    SHOAL_DTYPE_BF16,    SHOAL_DTYPE_Q8_0,
    SHOAL_DTYPE_Q4_0,   SHOAL_DTYPE_Q4_K,   SHOAL_DTYPE_Q6_K,    SHOAL_DTYPE_Q5_0,
    SHOAL_DTYPE_Q5_1,   SHOAL_DTYPE_IQ4_NL, SHOAL_DTYPE_MXFP4,   SHOAL_DTYPE_Q2_K,
    SHOAL_DTYPE_Q3_K,   SHOAL_DTYPE_Q5_K,   SHOAL_DTYPE_IQ4_XS,  SHOAL_DTYPE_IQ2_XXS,
    SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S,  SHOAL_DTYPE_IQ3_XXS, SHOAL_DTYPE_IQ3_S,
    SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};

/* Per element, a bound on |weight| as the kernels see its parts: for Q4_K,
 * Q5_K and Q2_K the scale and the min terms separately (d sc q + dmin m),
 * for Q5_1 |d q| + |m|, for Q6_K the
 * unsigned quant and the -32 offset separately (|d sc| (q + 32)), which is
 * how the SIMD kernels split them before any rounding. */
static void weight_magnitude(shoal_dtype t, const void *row, int64_t n, float *a)
{
	if (t == SHOAL_DTYPE_Q4_K) {
		const kernels__block_q4_k *b = row;
		for (int64_t i = 0; i < n; i++) {
			const kernels__block_q4_k *k = &b[i / 256];
			int sc, m, e = (int)(i % 256), j = e / 32, c = e / 64;
			kernels__q4k_scale_min(k->scales, j, &sc, &m);
			int q = (j & 1) ? k->qs[32 * c + e % 32] >> 4 : k->qs[32 * c + e % 32] & 15;
			a[i] = shoal_fp16_to_f32(k->d) * sc * q + shoal_fp16_to_f32(k->dmin) * m;
		}
		return;
	}
	if (t == SHOAL_DTYPE_Q5_K) {
		const kernels__block_q5_k *b = row;
		for (int64_t i = 0; i < n; i++) {
			const kernels__block_q5_k *k = &b[i / 256];
			int sc, m, e = (int)(i % 256), j = e / 32, c = e / 64;
			kernels__q4k_scale_min(k->scales, j, &sc, &m);
			int q = (j & 1) ? k->qs[32 * c + e % 32] >> 4 : k->qs[32 * c + e % 32] & 15;
			q |= ((k->qh[e % 32] >> j) & 1) << 4;
			a[i] = shoal_fp16_to_f32(k->d) * sc * q + shoal_fp16_to_f32(k->dmin) * m;
		}
		return;
	}
	if (t == SHOAL_DTYPE_Q2_K) {
		const kernels__block_q2_k *b = row;
		for (int64_t i = 0; i < n; i++) {
			const kernels__block_q2_k *k = &b[i / 256];
			int e = (int)(i % 256), s = k->scales[e / 16];
			int q = (k->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
			a[i] = shoal_fp16_to_f32(k->d) * (s & 15) * q +
			       shoal_fp16_to_f32(k->dmin) * (s >> 4);
		}
		return;
	}
	if (t == SHOAL_DTYPE_Q5_1) {
		const kernels__block_q5_1 *b = row;
		shoal_dequantize_row(t, row, a, n); /* d q + m */
		for (int64_t i = 0; i < n; i++) {
			float m = shoal_fp16_to_f32(b[i / 32].m);
			a[i] = fabsf(a[i] - m) + fabsf(m);
		}
		return;
	}
	if (t == SHOAL_DTYPE_Q6_K) {
		const kernels__block_q6_k *b = row;
		float *tmp = a;
		shoal_dequantize_row(t, row, tmp, n); /* d sc (q - 32) */
		for (int64_t i = 0; i < n; i++) {
			const kernels__block_q6_k *k = &b[i / 256];
			float dsc = fabsf(shoal_fp16_to_f32(k->d) * k->scales[(i % 256) / 16]);
			/* q - 32 = value / dsc, so q + 32 = value / dsc + 64 */
			a[i] = dsc == 0 ? 0 : fabsf(tmp[i]) + 64 * dsc;
		}
		return;
	}
	shoal_dequantize_row(t, row, a, n);
	for (int64_t i = 0; i < n; i++)
		a[i] = fabsf(a[i]);
}

typedef struct case_data {
	shoal_dtype wt, at;
	int64_t n, nrows, ncols;
	size_t wrow, xrow, xstride;
	void *w, *xq;
	double *mag;   /* [ncols * nrows] sum |w| |x| */
	double *exact; /* [ncols * nrows] dot of the dequantized rows, in double */
} case_data;

static void case_free(case_data *c)
{
	free(c->w);
	free(c->xq);
	free(c->mag);
	free(c->exact);
}

static void case_make(case_data *c, shoal_dtype wt, int64_t n, int64_t nrows, int64_t ncols)
{
	c->wt = wt;
	c->at = shoal_kernels_act_type(wt);
	c->n = n;
	c->nrows = nrows;
	c->ncols = ncols;
	c->wrow = shoal_dtype_row_bytes(wt, (uint64_t)n);
	c->xrow = shoal_dtype_row_bytes(c->at, (uint64_t)n);
	c->xstride = c->xrow + 64; /* padding between columns, to test the stride */
	c->w = malloc(c->wrow * (size_t)nrows);
	c->xq = calloc((size_t)ncols, c->xstride);
	c->mag = malloc(sizeof(double) * (size_t)(nrows * ncols));
	c->exact = malloc(sizeof(double) * (size_t)(nrows * ncols));
	float *f = malloc(sizeof(float) * (size_t)n), *wa = malloc(sizeof(float) * (size_t)n);
	float *wd = malloc(sizeof(float) * (size_t)n * (size_t)nrows);
	float *xd = malloc(sizeof(float) * (size_t)n * (size_t)ncols);
	float **wam = malloc(sizeof(float *) * (size_t)nrows);
	for (int64_t r = 0; r < nrows; r++) {
		float scale = 0.01f + (float)(r % 5); /* rows of different magnitude */
		for (int64_t i = 0; i < n; i++)
			f[i] = scale * rnd() * (i % 13 == 0 ? 4.0f : 1.0f);
		if (r == 1)
			for (int64_t i = 0; i < n && i < 256; i++)
				f[i] = 0.0f; /* a zero block */
		char *wr = (char *)c->w + (size_t)r * c->wrow;
		shoal_quantize_row(wt, f, wr, n);
		shoal_dequantize_row(wt, wr, wd + r * n, n);
		wam[r] = malloc(sizeof(float) * (size_t)n);
		weight_magnitude(wt, wr, n, wam[r]);
	}
	for (int64_t col = 0; col < ncols; col++) {
		for (int64_t i = 0; i < n; i++)
			f[i] = rnd() * (col == 2 ? 100.0f : 1.0f);
		char *xr = (char *)c->xq + (size_t)col * c->xstride;
		shoal_quantize_row(c->at, f, xr, n);
		shoal_dequantize_row(c->at, xr, xd + col * n, n);
	}
	for (int64_t col = 0; col < ncols; col++)
		for (int64_t r = 0; r < nrows; r++) {
			double m = 0, e = 0;
			for (int64_t i = 0; i < n; i++) {
				m += (double)wam[r][i] * fabs((double)xd[col * n + i]);
				e += (double)wd[r * n + i] * (double)xd[col * n + i];
			}
			c->mag[col * nrows + r] = m;
			c->exact[col * nrows + r] = e;
		}
	for (int64_t r = 0; r < nrows; r++)
		free(wam[r]);
	free(wam);
	free(f);
	free(wa);
	free(wd);
	free(xd);
}

/* Tolerance between two orders of the same sum. Every kernel computes the
 * same exact integer (or exactly rounded float) products; what differs is
 * (a) the order of the float additions: a chain of at most n additions, so
 * |error| <= n u sum|terms| (u = 2^-24, each side, 2^-23 for both), and (b)
 * at most 4 roundings per term before it is added (int -> float, the
 * scale product, the multiply, the fp16 of d), 4 u sum|terms| per side. The
 * double-accumulated oracle is within u |result| of exact. Hence
 * tol = (n + 8) 2^-23 sum|w||x| (+ a denormal floor). */
static double tolerance(const case_data *c, int64_t col, int64_t r)
{
	return (double)(c->n + 8) * 0x1p-23 * c->mag[col * c->nrows + r] + 1e-30;
}

static int check_case(const shoal_kernels *k, const case_data *c)
{
	const shoal_kernels *s = shoal_kernels_scalar();
	int64_t nr = c->nrows, nc = c->ncols;
	size_t ys = (size_t)nr + 3; /* y_stride > nrows: padding must stay untouched */
	float *ref = malloc(sizeof(float) * (size_t)(nr * nc));
	float *gv = malloc(sizeof(float) * (size_t)(nr * nc));
	float *gm = malloc(sizeof(float) * ys * (size_t)nc);
	int bad = 0;
	for (size_t i = 0; i < ys * (size_t)nc; i++)
		gm[i] = 12345.0f;
	for (int64_t col = 0; col < nc; col++) {
		const char *x = (const char *)c->xq + (size_t)col * c->xstride;
		s->gemv(c->wt, c->n, c->w, c->wrow, nr, x, ref + col * nr);
		k->gemv(c->wt, c->n, c->w, c->wrow, nr, x, gv + col * nr);
	}
	k->gemm(c->wt, c->n, c->w, c->wrow, nr, c->xq, c->xstride, nc, gm, ys);
	/* a row's result does not depend on where its row range starts (threads
	 * split the rows): rows 1.. computed alone equal the full gemv */
	if (nr > 1) {
		float *part = malloc(sizeof(float) * (size_t)nr);
		k->gemv(c->wt, c->n, (const char *)c->w + c->wrow, c->wrow, nr - 1, c->xq, part);
		if (memcmp(part, gv + 1, sizeof(float) * (size_t)(nr - 1))) {
			fprintf(stderr,
			        "%s %s n=%lld: gemv of rows 1..%lld differs from the full gemv\n",
			        k->isa, shoal_dtype_name(c->wt), (long long)c->n, (long long)nr);
			bad = 1;
		}
		free(part);
	}
	for (int64_t col = 0; col < nc && !bad; col++) {
		for (int64_t r = 0; r < nr && !bad; r++) {
			float a = gv[col * nr + r], g = gm[(size_t)col * ys + (size_t)r];
			double tol = tolerance(c, col, r), ex = c->exact[col * nr + r];
			const char *what = NULL;
			if (memcmp(&a, &g, sizeof a))
				what = "gemm != gemv (bitwise)";
			else if (!(fabs((double)a - ref[col * nr + r]) <= tol))
				what = "table vs scalar beyond tolerance";
			else if (!(fabs((double)ref[col * nr + r] - ex) <= tol))
				what = "scalar vs dequantized dot beyond tolerance";
			if (what) {
				fprintf(stderr,
				        "%s %s n=%lld rows=%lld cols=%lld [col %lld row %lld]: %s: "
				        "table %.9g gemm %.9g scalar %.9g exact %.9g tol %.3g\n",
				        k->isa, shoal_dtype_name(c->wt), (long long)c->n,
				        (long long)nr, (long long)nc, (long long)col, (long long)r,
				        what, a, g, ref[col * nr + r], ex, tol);
				bad = 1;
			}
		}
		for (size_t r = (size_t)nr; r < ys && !bad; r++)
			if (gm[(size_t)col * ys + r] != 12345.0f) {
				fprintf(stderr, "%s: gemm wrote past nrows\n", k->isa);
				bad = 1;
			}
	}
	free(ref);
	free(gv);
	free(gm);
	return bad;
}

static void sizes_for(shoal_dtype t, const int64_t **ns, int *count)
{
	static const int64_t f_full[] = {7, 40, 257, 4096}, f_quick[] = {7, 40, 257};
	static const int64_t b_full[] = {32, 96, 224, 4096}, b_quick[] = {32, 96, 224};
	static const int64_t k_full[] = {256, 768, 4096}, k_quick[] = {256, 768};
	int blk = (int)shoal_dtype_block_elems(t);
	if (blk == 1) {
		*ns = quick ? f_quick : f_full;
		*count = quick ? 3 : 4;
	} else if (blk == 32) {
		*ns = quick ? b_quick : b_full;
		*count = quick ? 3 : 4;
	} else {
		*ns = quick ? k_quick : k_full;
		*count = quick ? 2 : 3;
	}
}

static void test_tables_against_scalar(void)
{
	static const int64_t rows[] = {1, 3, 6, 17}, cols[] = {1, 3, 5, 9};
	int tables = 0, cases = 0;
	for (size_t ti = 0; ti < sizeof isa_names / sizeof isa_names[0]; ti++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ti]);
		if (!k)
			continue;
		tables++;
		printf("  table %s (isa %s)\n", isa_names[ti], k->isa);
		for (size_t wi = 0; wi < sizeof wtypes / sizeof wtypes[0]; wi++) {
			const int64_t *ns;
			int nn;
			sizes_for(wtypes[wi], &ns, &nn);
			for (int a = 0; a < nn; a++)
				for (int b = 0; b < 4; b++) {
					case_data c;
					case_make(&c, wtypes[wi], ns[a], rows[b],
					          cols[(a + b) % 4]);
					int bad = check_case(k, &c);
					case_free(&c);
					cases++;
					ASSERT_FALSE(bad);
				}
		}
	}
	printf("  %d tables, %d cases\n", tables, cases);
	ASSERT_GE(tables, 1);
}

/* Every table quantizes activations exactly as quant.c does. */
static void test_quantize_act_shared(void)
{
	static const shoal_dtype acts[] = {SHOAL_DTYPE_F32, SHOAL_DTYPE_F16, SHOAL_DTYPE_BF16,
	                                   SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_K};
	float x[512];
	for (int i = 0; i < 512; i++)
		x[i] = rnd() * 3.0f;
	for (size_t ti = 0; ti < sizeof isa_names / sizeof isa_names[0]; ti++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ti]);
		if (!k)
			continue;
		for (size_t a = 0; a < 5; a++) {
			size_t nb = shoal_dtype_row_bytes(acts[a], 512);
			unsigned char *p = malloc(nb), *q = malloc(nb);
			k->quantize_act(acts[a], x, p, 512);
			shoal_quantize_row(acts[a], x, q, 512);
			int same = !memcmp(p, q, nb);
			free(p);
			free(q);
			ASSERT_TRUE(same);
		}
	}
	/* rows that reach every branch of the Q8_0 rounding: a zero block,
	 * NaN and infinities, halves exactly (amax 127 makes id 1), huge and
	 * subnormal values */
	float y[256];
	for (int i = 0; i < 256; i++)
		y[i] = rnd() * 200.0f;
	for (int i = 0; i < 32; i++)
		y[i] = 0.0f;
	y[32] = NAN;
	y[40] = -INFINITY;
	y[70] = INFINITY;
	y[64] = 127.0f;
	for (int i = 65; i < 96; i++)
		y[i] = (float)(i - 80) + (i % 2 ? 0.5f : -0.5f);
	y[100] = 1e30f;
	y[101] = -1e30f;
	for (int i = 128; i < 160; i++)
		y[i] = (i % 3 - 1) * 1e-40f;
	y[200] = -0.0f;
	for (size_t ti = 0; ti < sizeof isa_names / sizeof isa_names[0]; ti++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ti]);
		if (!k)
			continue;
		size_t nb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, 256);
		unsigned char p[sizeof(kernels__block_q8_0) * 8], q[sizeof p];
		k->quantize_act(SHOAL_DTYPE_Q8_0, y, p, 256);
		shoal_quantize_row(SHOAL_DTYPE_Q8_0, y, q, 256);
		if (memcmp(p, q, nb))
			TEST_FAIL_("%s: Q8_0 activations differ from quant.c on special values",
			           k->isa);
	}
	/* F16 (activations of F16 weights, and the KV cache): NaNs quiet and
	 * signalling with payloads, the overflow edge (65504, 65519.99,
	 * 65520), halfway cases of normal and subnormal halves, values that
	 * round to zero, and a tail past a multiple of 8 */
	static const uint32_t bits[] = {
	    0x7fc00001u, 0xffa00000u, 0x7f800001u, 0x7f812345u, 0x7f800000u, 0xff800000u,
	    0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u, 0x33000000u, 0x33000001u,
	    0x80000001u, 0x38800000u, 0x387fffffu, 0x37800000u, 0x3f801000u, 0x3f803000u,
	    0x3f800fffu, 0x00000000u, 0x80000000u, 0x35c00000u, 0x35a00000u};
	enum { NF = 203 };
	float z[NF];
	for (int i = 0; i < NF; i++)
		z[i] = rnd() * (i % 7 ? 3.0f : 70000.0f);
	for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
		memcpy(&z[3 + 8 * i], &bits[i], 4);
	for (size_t ti = 0; ti < sizeof isa_names / sizeof isa_names[0]; ti++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ti]);
		if (!k)
			continue;
		uint16_t p[NF], q[NF];
		k->quantize_act(SHOAL_DTYPE_F16, z, p, NF);
		shoal_quantize_row(SHOAL_DTYPE_F16, z, q, NF);
		for (int i = 0; i < NF; i++)
			if (p[i] != q[i])
				TEST_FAIL_("%s: F16 of %08x is %04x, quant.c %04x", k->isa,
				           (unsigned)kernels__f32_bits(z[i]), p[i], q[i]);
	}
}

static void test_act_types(void)
{
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_F32), SHOAL_DTYPE_F32);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_F16), SHOAL_DTYPE_F16);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_BF16), SHOAL_DTYPE_BF16);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_Q8_0), SHOAL_DTYPE_Q8_0);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_Q4_0), SHOAL_DTYPE_Q8_0);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_Q4_K), SHOAL_DTYPE_Q8_K);
	ASSERT_EQ(shoal_kernels_act_type(SHOAL_DTYPE_Q6_K), SHOAL_DTYPE_Q8_K);
	static const shoal_dtype q8_0[] = {SHOAL_DTYPE_Q5_0, SHOAL_DTYPE_Q5_1, SHOAL_DTYPE_IQ4_NL,
	                                   SHOAL_DTYPE_MXFP4};
	static const shoal_dtype q8_k[] = {
	    SHOAL_DTYPE_Q2_K,    SHOAL_DTYPE_Q3_K,   SHOAL_DTYPE_Q5_K,  SHOAL_DTYPE_IQ4_XS,
	    SHOAL_DTYPE_IQ2_XXS, SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S, SHOAL_DTYPE_IQ3_XXS,
	    SHOAL_DTYPE_IQ3_S,   SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(shoal_kernels_act_type(q8_0[i]), SHOAL_DTYPE_Q8_0);
	for (size_t i = 0; i < sizeof q8_k / sizeof q8_k[0]; i++)
		ASSERT_EQ(shoal_kernels_act_type(q8_k[i]), SHOAL_DTYPE_Q8_K);
}

/* A hand-computed dot: Q8_0 weights all 2 with d = 0.5 (w = 1) against
 * activations j - 16 with d = 0.25: per block sum(j - 16) = -16, times
 * 2 * 0.5 * 0.25 -> -4 per block, 3 blocks -> -12, on every table. */
static void test_hand_dot_q8_0(void)
{
	kernels__block_q8_0 w[3], x[3];
	for (int b = 0; b < 3; b++) {
		w[b].d = 0x3800;
		x[b].d = 0x3400;
		for (int j = 0; j < 32; j++) {
			w[b].qs[j] = 2;
			x[b].qs[j] = (int8_t)(j - 16);
		}
	}
	for (size_t ti = 0; ti < sizeof isa_names / sizeof isa_names[0]; ti++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ti]);
		if (!k)
			continue;
		float y = 0;
		k->gemv(SHOAL_DTYPE_Q8_0, 96, w, sizeof w, 1, x, &y);
		ASSERT_TRUE(y == -12.0f);
	}
}

/* gemm (nc columns) and gemv (each column) of table k against ref, the
 * order written as a loop, bitwise; w: nr rows rb bytes apart, x: nc
 * columns xb bytes apart, nblk blocks a row. Returns nonzero on a mismatch
 * (printed). */
typedef float (*in_order_fn)(const void *w, int flag, const void *x, int64_t nblk);
static int check_in_order(const shoal_kernels *k, shoal_dtype wt, int64_t n, const void *w,
                          size_t rb, int64_t nr, const void *x, size_t xb, int64_t nc, int64_t nblk,
                          in_order_fn ref, int flag)
{
	float *y = malloc(sizeof(float) * (size_t)(nr * nc));
	float *yv = malloc(sizeof(float) * (size_t)nr);
	k->gemm(wt, n, w, rb, nr, x, xb, nc, y, (size_t)nr);
	int bad = 0;
	for (int64_t c = 0; c < nc && !bad; c++) {
		const char *xc = (const char *)x + (size_t)c * xb;
		k->gemv(wt, n, w, rb, nr, xc, yv);
		for (int64_t r = 0; r < nr && !bad; r++) {
			float e = ref((const char *)w + (size_t)r * rb, flag, xc, nblk);
			float g = y[c * nr + r], v = yv[r];
			if (memcmp(&e, &g, sizeof e) || memcmp(&e, &v, sizeof e)) {
				fprintf(
				    stderr,
				    "%s %s n %lld row %lld col %lld: in order %.9g gemm %.9g gemv "
				    "%.9g\n",
				    k->isa, shoal_dtype_name(wt), (long long)n, (long long)r,
				    (long long)c, e, g, v);
				bad = 1;
			}
		}
	}
	free(y);
	free(yv);
	return bad;
}

/* The AVX-512 tables' Q8_0 order (kernels_avx512.c): per row one float
 * from +0, over the blocks in order, acc = fma(isum_b, d_w_b * d_x_b, acc).
 * Checked bitwise against that loop written here, gemv and gemm, for
 * shapes across its groups of 16 rows, its segments (64 blocks in gemm,
 * 256 in gemv), its 128-column passes, odd block counts, -128 weights and
 * scales of every size. */
static float q8_0_in_order(const void *wv, int flag, const void *xv, int64_t nb)
{
	const kernels__block_q8_0 *w = wv, *x = xv;
	(void)flag;
	float acc = 0.0f;
	for (int64_t b = 0; b < nb; b++) {
		int32_t isum = 0;
		for (int j = 0; j < 32; j++)
			isum += (int32_t)w[b].qs[j] * (int32_t)x[b].qs[j];
		float p = shoal_fp16_to_f32(w[b].d) * shoal_fp16_to_f32(x[b].d);
		acc = fmaf((float)isum, p, acc);
	}
	return acc;
}

static void test_q8_0_avx512_order(void)
{
	static const int64_t ns[] = {32, 96, 64 * 32 + 32, 256 * 32 + 96};
	static const int64_t rows[] = {1, 15, 16, 17, 35};
	static const int64_t cols[] = {1, 2, 5, 130};
	int checked = 0;
	for (int t = 0; t < 2; t++) {
		const shoal_kernels *k = shoal_kernels_by_name(t ? "avx512bw" : "avx512");
		if (!k || strcmp(k->isa, t ? "avx512bw" : "avx512"))
			continue;
		for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
			int64_t n = ns[a], nb = n / 32;
			int64_t nr = rows[(a + (size_t)t) % 5], nc = cols[a];
			if (a == 0) {
				nr = 35;
				nc = 130;
			}
			kernels__block_q8_0 *w = malloc(sizeof *w * (size_t)(nb * nr));
			kernels__block_q8_0 *x = malloc(sizeof *x * (size_t)(nb * nc));
			for (int64_t i = 0; i < nb * nr; i++) {
				/* scales from 2^-14 to 2^15, some negative, some blocks all -128 */
				w[i].d = (uint16_t)(0x0400 + (rng % 0x7800u)) |
				         (rnd() < -0.8f ? 0x8000 : 0);
				rnd();
				int all = i % 7 == 3;
				for (int j = 0; j < 32; j++)
					w[i].qs[j] = all ? -128 : (int8_t)(rnd() * 128.0f);
			}
			for (int64_t i = 0; i < nb * nc; i++) {
				x[i].d = (uint16_t)(0x1000 + (rng % 0x4000u));
				rnd();
				for (int j = 0; j < 32; j++)
					x[i].qs[j] = (int8_t)(rnd() * 127.0f);
			}
			size_t rb = sizeof *w * (size_t)nb;
			int bad = check_in_order(k, SHOAL_DTYPE_Q8_0, n, w, rb, nr, x, rb, nc, nb,
			                         q8_0_in_order, 0);
			free(w);
			free(x);
			ASSERT_FALSE(bad);
			checked++;
		}
	}
	if (!checked)
		TEST_SKIP("no AVX-512 table on this CPU");
}

/* n random Q8_K activation blocks with their 16-element sums. */
static void fill_q8_k(kernels__block_q8_k *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		x[i].d = rnd() * 0.01f;
		for (int j = 0; j < 256; j++)
			x[i].qs[j] = (int8_t)(rnd() * 127.0f);
		for (int j = 0; j < 16; j++) {
			int s = 0;
			for (int l = 0; l < 16; l++)
				s += x[i].qs[16 * j + l];
			x[i].bsums[j] = (int16_t)s;
		}
	}
}

/* The AVX-512 tables' Q4_K and Q5_K order (kernels_avx512.c): per row one
 * float from +0, over the super-blocks in order, acc = fma(d_w d_x, ISUM,
 * acc), then acc = fma(-(dmin_w d_x), IMIN, acc), ISUM and IMIN exact.
 * Checked bitwise as Q8_0's, across groups, segments (8 super-blocks in
 * gemm, 64 in gemv) and column passes, with random scale bytes. Blocks are
 * raw bytes: d, dmin, scales at 4, (Q5_K: qh at 16,) then qs. */
static float k45_in_order(const void *wv, int q5, const void *xv, int64_t nsb)
{
	const uint8_t *w = wv;
	const kernels__block_q8_k *x = xv;
	const size_t bb = q5 ? sizeof(kernels__block_q5_k) : sizeof(kernels__block_q4_k);
	float acc = 0.0f;
	for (int64_t b = 0; b < nsb; b++, w += bb) {
		const uint8_t *qs = w + (q5 ? 48 : 16), *qh = w + 16;
		uint16_t dh, dmh;
		memcpy(&dh, w, 2);
		memcpy(&dmh, w + 2, 2);
		int32_t isum = 0, imin = 0;
		for (int j = 0; j < 8; j++) {
			int sc, m, dot = 0;
			kernels__q4k_scale_min(w + 4, j, &sc, &m);
			for (int l = 0; l < 32; l++) {
				int q = qs[32 * (j / 2) + l];
				q = (j & 1) ? q >> 4 : q & 15;
				if (q5)
					q |= ((qh[l] >> j) & 1) << 4;
				dot += q * x[b].qs[32 * j + l];
			}
			isum += sc * dot;
			imin += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
		}
		float d = shoal_fp16_to_f32(dh) * x[b].d;
		float dm = shoal_fp16_to_f32(dmh) * x[b].d;
		acc = fmaf(d, (float)isum, acc);
		acc = fmaf(-dm, (float)imin, acc);
	}
	return acc;
}

/* The AVX-512 tables' Q6_K order: per row one float from +0, over the
 * super-blocks in order, acc = fma(d_w d_x, ISUM, acc), ISUM = sum_j sc_j
 * (dot_j - 32 bsum_j) over its 16 sub-blocks of 16, exact. */
static float q6_k_in_order(const void *wv, int flag, const void *xv, int64_t nsb)
{
	const kernels__block_q6_k *w = wv;
	const kernels__block_q8_k *x = xv;
	(void)flag;
	float acc = 0.0f;
	for (int64_t b = 0; b < nsb; b++) {
		int32_t isum = 0;
		for (int e = 0; e < 256; e++) {
			int h = e / 128, l = e % 32, part = (e % 128) / 32;
			int lo = w[b].ql[64 * h + l + (part & 1) * 32];
			lo = part < 2 ? lo & 15 : lo >> 4;
			int q = lo | ((w[b].qh[32 * h + l] >> (2 * part)) & 3) << 4;
			isum += w[b].scales[e / 16] * (q - 32) * x[b].qs[e];
		}
		float d = shoal_fp16_to_f32(w[b].d) * x[b].d;
		acc = fmaf(d, (float)isum, acc);
	}
	return acc;
}

/* The AVX-512 tables' Q2_K order: per row one float from +0, over the
 * super-blocks in order, acc = fma(d_w d_x, ISUM, acc), then acc =
 * fma(-(dmin_w d_x), IMIN, acc); ISUM = sum_j sc_j dot_j and IMIN = sum_j
 * m_j bsum_j over the 16 sub-blocks of 16, exact. */
static float q2_k_in_order(const void *wv, int flag, const void *xv, int64_t nsb)
{
	const kernels__block_q2_k *w = wv;
	const kernels__block_q8_k *x = xv;
	(void)flag;
	float acc = 0.0f;
	for (int64_t b = 0; b < nsb; b++) {
		int32_t isum = 0, imin = 0;
		for (int e = 0; e < 256; e++) {
			int q = (w[b].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
			isum += (w[b].scales[e / 16] & 15) * q * x[b].qs[e];
		}
		for (int j = 0; j < 16; j++)
			imin += (w[b].scales[j] >> 4) * x[b].bsums[j];
		float d = shoal_fp16_to_f32(w[b].d) * x[b].d;
		float dm = shoal_fp16_to_f32(w[b].dmin) * x[b].d;
		acc = fmaf(d, (float)isum, acc);
		acc = fmaf(-dm, (float)imin, acc);
	}
	return acc;
}

/* The AVX-512 tables' Q3_K order: per row one float from +0, over the
 * super-blocks in order, acc = fma(d_w d_x, ISUM, acc), ISUM = sum_j sc_j
 * dot_j (signed scales and quants) over the 16 sub-blocks of 16, exact. */
static float q3_k_in_order(const void *wv, int flag, const void *xv, int64_t nsb)
{
	const kernels__block_q3_k *w = wv;
	const kernels__block_q8_k *x = xv;
	(void)flag;
	float acc = 0.0f;
	for (int64_t b = 0; b < nsb; b++) {
		int8_t sc[16];
		kernels__q3k_scales(w[b].scales, sc);
		int32_t isum = 0;
		for (int e = 0; e < 256; e++) {
			int ch = e / 128, j = (e % 128) / 32, l = e % 32;
			int q = (w[b].qs[32 * ch + l] >> (2 * j)) & 3;
			if (!((w[b].hmask[l] >> (4 * ch + j)) & 1))
				q -= 4;
			isum += sc[e / 16] * q * x[b].qs[e];
		}
		float d = shoal_fp16_to_f32(w[b].d) * x[b].d;
		acc = fmaf(d, (float)isum, acc);
	}
	return acc;
}

/* Random K-quant super-blocks of type wt: every byte random, then the
 * scale d (and for Q4_K/Q5_K/Q2_K dmin) a positive half, dmin or Q6_K/Q3_K d
 * negative in every 5th block. */
static void fill_kq(shoal_dtype wt, uint8_t *w, size_t bb, int64_t n_blocks)
{
	for (int64_t i = 0; i < n_blocks; i++) {
		uint8_t *blk = w + bb * (size_t)i;
		for (size_t j = 0; j < bb; j++) {
			blk[j] = (uint8_t)(rng >> 3);
			rnd();
		}
		uint16_t d = (uint16_t)(0x0400 + (rng % 0x5000u));
		rnd();
		uint16_t neg = i % 5 == 1 ? 0x8000 : 0;
		if (wt == SHOAL_DTYPE_Q6_K || wt == SHOAL_DTYPE_Q3_K) {
			d |= neg;
			memcpy(blk + (wt == SHOAL_DTYPE_Q6_K ? offsetof(kernels__block_q6_k, d)
			                                     : offsetof(kernels__block_q3_k, d)),
			       &d, 2);
			continue;
		}
		uint16_t dm = (uint16_t)(0x0400 + (rng % 0x5000u)) | neg;
		rnd();
		size_t od = wt == SHOAL_DTYPE_Q2_K ? offsetof(kernels__block_q2_k, d) : 0;
		memcpy(blk + od, &d, 2);
		memcpy(blk + od + 2, &dm, 2);
	}
}

/* The AVX-512 tables' K-quant orders (k45_in_order, q6_k_in_order,
 * q2_k_in_order, q3_k_in_order) for Q4_K, Q5_K, Q6_K, Q2_K and Q3_K, with
 * and without VNNI. */
static void test_kq_avx512_order(void)
{
	static const int64_t ns[] = {256, 9 * 256, 65 * 256};
	static const int64_t rows[] = {35, 17, 16};
	static const int64_t cols[] = {130, 5, 2};
	static const struct {
		shoal_dtype wt;
		size_t bb;
		float (*in_order)(const void *, int, const void *, int64_t);
		int flag;
	} types[] = {{SHOAL_DTYPE_Q4_K, sizeof(kernels__block_q4_k), k45_in_order, 0},
	             {SHOAL_DTYPE_Q5_K, sizeof(kernels__block_q5_k), k45_in_order, 1},
	             {SHOAL_DTYPE_Q6_K, sizeof(kernels__block_q6_k), q6_k_in_order, 0},
	             {SHOAL_DTYPE_Q2_K, sizeof(kernels__block_q2_k), q2_k_in_order, 0},
	             {SHOAL_DTYPE_Q3_K, sizeof(kernels__block_q3_k), q3_k_in_order, 0}};
	int checked = 0;
	for (int t = 0; t < 2 * (int)(sizeof types / sizeof types[0]); t++) {
		const char *isa = t & 1 ? "avx512bw" : "avx512";
		const shoal_kernels *k = shoal_kernels_by_name(isa);
		if (!k || strcmp(k->isa, isa))
			continue;
		const shoal_dtype wt = types[t >> 1].wt;
		const size_t bb = types[t >> 1].bb;
		for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
			int64_t n = ns[a], nsb = n / 256, nr = rows[(a + (size_t)t) % 3],
			        nc = cols[a];
			uint8_t *w = malloc(bb * (size_t)(nsb * nr));
			kernels__block_q8_k *x = malloc(sizeof *x * (size_t)(nsb * nc));
			fill_kq(wt, w, bb, nsb * nr);
			fill_q8_k(x, nsb * nc);
			size_t rb = bb * (size_t)nsb, xb = sizeof *x * (size_t)nsb;
			int bad = check_in_order(k, wt, n, w, rb, nr, x, xb, nc, nsb,
			                         types[t >> 1].in_order, types[t >> 1].flag);
			free(w);
			free(x);
			ASSERT_FALSE(bad);
			checked++;
		}
	}
	if (!checked)
		TEST_SKIP("no AVX-512 table on this CPU");
}

/* The AVX-512 tables' gemv of the 32-element pair types (kernels_avx512.c
 * k5_*_mm: the activations prepared per 128 pairs and 32 rows; and the
 * AVX2 table's for Q5_1, IQ4_NL and MXFP4, k2_*_mm, whose gemm is the
 * same function over tiles of 4 columns: 6 columns there) against
 * their gemm, which runs the rows path, bitwise, and the scalar table:
 * rows past one pass of 32 (35), an odd block count past one prepared
 * segment (259 blocks: 2 segments, a single last block) and one short of
 * it (255); and AVX2's IQ4_XS gemv alike. */
static void test_pair_gemv_avx512(void)
{
	static const shoal_dtype types[] = {SHOAL_DTYPE_Q4_0, SHOAL_DTYPE_Q5_0, SHOAL_DTYPE_Q5_1,
	                                    SHOAL_DTYPE_IQ4_NL, SHOAL_DTYPE_MXFP4};
	static const int64_t ns[] = {259 * 32, 255 * 32};
	int checked = 0;
	for (int v = 0; v < 3; v++) {
		const char *isa = v == 2 ? "avx2" : v ? "avx512bw" : "avx512";
		const shoal_kernels *k = shoal_kernels_by_name(isa);
		if (!k || strcmp(k->isa, isa))
			continue;
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
			for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
				if (v == 2 &&
				    (types[t] == SHOAL_DTYPE_Q4_0 || types[t] == SHOAL_DTYPE_Q5_0))
					continue; /* AVX2 has this gemv for Q5_1, IQ4_NL, MXFP4 */
				case_data c;
				case_make(&c, types[t], ns[a], 35, v == 2 ? 6 : 2);
				int bad = check_case(k, &c);
				case_free(&c);
				ASSERT_FALSE(bad);
				checked++;
			}
	}
	/* AVX2's IQ4_XS gemv (k2_iq4xs_mm, activations prepared per 32
	 * super-blocks and 32 rows): 33 super-blocks (2 segments, the last of
	 * one), 35 rows */
	const shoal_kernels *k = shoal_kernels_by_name("avx2");
	if (k && !strcmp(k->isa, "avx2")) {
		case_data c;
		case_make(&c, SHOAL_DTYPE_IQ4_XS, 33 * 256, 35, 2);
		int bad = check_case(k, &c);
		case_free(&c);
		ASSERT_FALSE(bad);
		checked++;
	}
	if (!checked)
		TEST_SKIP("no AVX-512 or AVX2 table on this CPU");
}

static void test_best_table(void)
{
	const shoal_kernels *b = shoal_kernels_best();
	ASSERT_TRUE(b != NULL);
	ASSERT_TRUE(shoal_kernels_best() == b); /* chosen once */
	ASSERT_TRUE(shoal_kernels_by_name("nonsense") == NULL);
	ASSERT_TRUE(shoal_kernels_by_name("scalar") == shoal_kernels_scalar());
	printf("  best: %s\n", b->isa);
	const char *env = getenv("SHOAL_ISA");
	if (env && *env)
		TEST_SKIP("SHOAL_ISA is set; the automatic choice is not checked");
}

/* The tables of one ISA family (with and without VNNI / dotprod) compute
 * the same int32 lanes and the same float operations: bitwise equal. */
static void test_family_bitwise(void)
{
	static const char *const pairs[][2] = {{"avx512", "avx512bw"}, {"neon", "neon-base"}};
	int compared = 0;
	for (size_t p = 0; p < 2; p++) {
		const shoal_kernels *a = shoal_kernels_by_name(pairs[p][0]);
		const shoal_kernels *b = shoal_kernels_by_name(pairs[p][1]);
		if (!a || !b || a == b)
			continue;
		for (size_t wi = 0; wi < sizeof wtypes / sizeof wtypes[0]; wi++) {
			case_data c;
			case_make(&c, wtypes[wi],
			          shoal_dtype_block_elems(wtypes[wi]) == 256 ? 768 : 224, 6, 5);
			float ya[6 * 5], yb[6 * 5];
			a->gemm(c.wt, c.n, c.w, c.wrow, 6, c.xq, c.xstride, 5, ya, 6);
			b->gemm(c.wt, c.n, c.w, c.wrow, 6, c.xq, c.xstride, 5, yb, 6);
			int same = !memcmp(ya, yb, sizeof ya);
			case_free(&c);
			if (!same)
				TEST_FAIL_("%s and %s differ on %s", a->isa, b->isa,
				           shoal_dtype_name(wtypes[wi]));
			compared++;
		}
	}
	if (!compared)
		TEST_SKIP("no ISA family with two tables on this CPU");
}

/* Attention's inner loops: every table gives the scalar table's bits for
 * shapes with and without tails and head tiles of 4 and 2 (ng 1-16, hd 7-520, n
 * 1-515), and the
 * scalar table is within rounding of a double-precision reference. */
static void test_attention(void)
{
	static const int shapes[][3] = {{1, 64, 1},  {8, 64, 100}, {4, 128, 33},  {3, 40, 17},
	                                {9, 7, 5},   {5, 16, 64},  {2, 24, 3},    {16, 64, 9},
	                                {8, 40, 37}, {6, 12, 11},  {12, 80, 515}, {4, 256, 8},
	                                {8, 100, 7}, {4, 520, 5},  {7, 72, 6},    {4, 8, 4},
	                                {2, 32, 77}, {2, 64, 8},   {10, 20, 40},  {6, 8, 16}};
	const shoal_kernels *ks = shoal_kernels_scalar();
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		int ng = shapes[si][0], hd = shapes[si][1], n = shapes[si][2];
		size_t ld = (size_t)hd * 3 + 5, s_ld = (size_t)n + 3;
		float *q = malloc(sizeof(float) * (size_t)ng * hd);
		float *kv = malloc(sizeof(float) * ld * (size_t)n);
		float *s0 = calloc((size_t)ng * s_ld, sizeof(float)),
		      *s1 = calloc((size_t)ng * s_ld, sizeof(float));
		float *o0 = malloc(sizeof(float) * (size_t)ng * hd),
		      *o1 = malloc(sizeof(float) * (size_t)ng * hd);
		ASSERT_TRUE(q && kv && s0 && s1 && o0 && o1);
		for (int i = 0; i < ng * hd; i++)
			q[i] = rnd();
		for (size_t i = 0; i < ld * (size_t)n; i++)
			kv[i] = rnd();
		ks->attn_scores(q, ng, hd, kv, ld, n, 0.125f, s0, s_ld);
		for (int g = 0; g < ng; g++)
			for (int t = 0; t < n; t++) {
				double r = 0, m = 0;
				for (int i = 0; i < hd; i++) {
					r += (double)q[g * hd + i] * kv[(size_t)t * ld + i];
					m += fabs((double)q[g * hd + i] * kv[(size_t)t * ld + i]);
				}
				double e = fabs(s0[(size_t)g * s_ld + t] - r * 0.125);
				if (e > 1e-6 * m + 1e-7)
					TEST_FAIL_("scalar scores %d/%d/%d: error %g", ng, hd, n,
					           e);
			}
		/* the values step takes the scores as weights, unnormalised */
		ks->attn_values(s0, s_ld, ng, hd, kv + 2, ld, n, o0);
		for (int g = 0; g < ng; g++)
			for (int d = 0; d < hd; d++) {
				double r = 0, m = 0;
				for (int t = 0; t < n; t++) {
					double x = (double)s0[(size_t)g * s_ld + t] *
					           kv[(size_t)t * ld + 2 + d];
					r += x;
					m += fabs(x);
				}
				double e = fabs(o0[g * hd + d] - r);
				if (e > 1e-6 * m + 1e-7)
					TEST_FAIL_("scalar values %d/%d/%d: error %g", ng, hd, n,
					           e);
			}
		for (size_t ii = 0; ii < sizeof isa_names / sizeof isa_names[0]; ii++) {
			const shoal_kernels *k = shoal_kernels_by_name(isa_names[ii]);
			if (!k || k == ks)
				continue;
			k->attn_scores(q, ng, hd, kv, ld, n, 0.125f, s1, s_ld);
			k->attn_values(s0, s_ld, ng, hd, kv + 2, ld, n, o1);
			if (memcmp(s0, s1, sizeof(float) * (size_t)ng * s_ld))
				TEST_FAIL_("%s scores differ from scalar (%d/%d/%d)", k->isa, ng,
				           hd, n);
			if (memcmp(o0, o1, sizeof(float) * (size_t)ng * hd))
				TEST_FAIL_("%s values differ from scalar (%d/%d/%d)", k->isa, ng,
				           hd, n);
		}
		/* an F16 cache: every table's F16 loops (the scalar one's too)
		 * give the scalar F32 loops' bits on the converted rows; values
		 * past the range of F16 and subnormal ones included */
		uint16_t *kh = malloc(sizeof(uint16_t) * ld * (size_t)n);
		ASSERT_TRUE(kh != NULL);
		for (size_t i = 0; i < ld * (size_t)n; i++) {
			float x = kv[i];
			if (i % 97 == 5)
				x *= 1e-6f; /* a subnormal half */
			kh[i] = shoal_f32_to_fp16(x);
			kv[i] = shoal_fp16_to_f32(kh[i]);
		}
		ks->attn_scores(q, ng, hd, kv, ld, n, 0.125f, s0, s_ld);
		ks->attn_values(s0, s_ld, ng, hd, kv + 2, ld, n, o0);
		for (size_t ii = 0; ii < sizeof isa_names / sizeof isa_names[0]; ii++) {
			const shoal_kernels *k = shoal_kernels_by_name(isa_names[ii]);
			if (!k)
				continue;
			memset(s1, 0xff, sizeof(float) * (size_t)ng * s_ld);
			k->attn_scores_f16(q, ng, hd, kh, ld, n, 0.125f, s1, s_ld);
			k->attn_values_f16(s0, s_ld, ng, hd, kh + 2, ld, n, o1);
			for (int g = 0; g < ng; g++)
				if (memcmp(s0 + (size_t)g * s_ld, s1 + (size_t)g * s_ld,
				           sizeof(float) * (size_t)n))
					TEST_FAIL_("%s F16 scores differ (%d/%d/%d)", k->isa, ng,
					           hd, n);
			if (memcmp(o0, o1, sizeof(float) * (size_t)ng * hd))
				TEST_FAIL_("%s F16 values differ (%d/%d/%d)", k->isa, ng, hd, n);
			/* the run split in two, the second continuing the first's
			 * sums (a ring's wrapped window): one run's bits */
			int n1 = n / 3;
			const float *s0b = s0 + n1;
			memset(o1, 0xff, sizeof(float) * (size_t)ng * hd);
			k->attn_values(s0, s_ld, ng, hd, kv + 2, ld, n1, o1);
			k->attn_values_acc(s0b, s_ld, ng, hd, kv + 2 + (size_t)n1 * ld, ld, n - n1,
			                   o1);
			if (memcmp(o0, o1, sizeof(float) * (size_t)ng * hd))
				TEST_FAIL_("%s split values differ (%d/%d/%d at %d)", k->isa, ng,
				           hd, n, n1);
			memset(o1, 0xff, sizeof(float) * (size_t)ng * hd);
			k->attn_values_f16(s0, s_ld, ng, hd, kh + 2, ld, n1, o1);
			k->attn_values_acc_f16(s0b, s_ld, ng, hd, kh + 2 + (size_t)n1 * ld, ld,
			                       n - n1, o1);
			if (memcmp(o0, o1, sizeof(float) * (size_t)ng * hd))
				TEST_FAIL_("%s F16 split values differ (%d/%d/%d at %d)", k->isa,
				           ng, hd, n, n1);
		}
		free(kh);
		free(q);
		free(kv);
		free(s0);
		free(s1);
		free(o0);
		free(o1);
	}
}

/* The softmax: kernels__exp_neg within 4 ulp of libm's expf on [-87, 0]
 * (and 0 below, and for NaN); every table's softmax bitwise the scalar
 * table's, rows summing to 1, for lengths with and without a tail. */
static void test_softmax(void)
{
	double worst = 0;
	for (int i = 0; i <= 200000; i++) {
		float x = -87.0f * (float)i / 200000.0f;
		float a = kernels__exp_neg(x), r = expf(x);
		double ulp = fabs((double)a - r) / (nextafterf(r, INFINITY) - r);
		if (ulp > worst)
			worst = ulp;
	}
	printf("  exp_neg: worst %.2f ulp against expf on [-87, 0]\n", worst);
	ASSERT_TRUE(worst <= 4.0);
	ASSERT_TRUE(kernels__exp_neg(-88.0f) == 0.0f && kernels__exp_neg(-INFINITY) == 0.0f);
	ASSERT_TRUE(kernels__exp_neg(NAN) == 0.0f && kernels__exp_neg(0.0f) == 1.0f);
	static const int lens[] = {1, 7, 8, 9, 64, 100, 1100};
	const shoal_kernels *ks = shoal_kernels_scalar();
	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
		int n = lens[li];
		float *x = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n),
		      *b = malloc(sizeof(float) * n);
		ASSERT_TRUE(x && a && b);
		for (int t = 0; t < n; t++)
			x[t] = rnd() * (t % 5 ? 12.0f : 120.0f);
		if (n > 8)
			x[3] = -INFINITY;
		memcpy(a, x, sizeof(float) * n);
		ks->softmax(a, n);
		double sum = 0;
		for (int t = 0; t < n; t++)
			sum += a[t];
		ASSERT_NEAR(sum, 1.0, 1e-5);
		for (size_t ii = 0; ii < sizeof isa_names / sizeof isa_names[0]; ii++) {
			const shoal_kernels *k = shoal_kernels_by_name(isa_names[ii]);
			if (!k || k == ks)
				continue;
			memcpy(b, x, sizeof(float) * n);
			k->softmax(b, n);
			if (memcmp(a, b, sizeof(float) * n))
				TEST_FAIL_("%s softmax differs from scalar (n %d)", k->isa, n);
		}
		free(x);
		free(a);
		free(b);
	}
}

/* Packed weights (kernels.h pack, gemm_packed): bitwise gemm over the same
 * rows, for row ranges from any group, a partial last group, one and
 * several segments, odd block counts and column counts around the tiles;
 * tables without a packed form say 0. */
static void test_packed(void)
{
	static const int shapes[][2] = {{64, 16}, {96, 37}, {256, 100}, {2048, 33}, {8192, 48}};
	static const int cols[] = {2, 7, 8, 9, 17, 130};
	int tested = 0;
	for (size_t ii = 0; ii < sizeof isa_names / sizeof isa_names[0]; ii++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ii]);
		if (!k)
			continue;
		if (!k->pack_bytes(SHOAL_DTYPE_Q8_0, 256, 16))
			continue;
		ASSERT_EQ(k->pack_bytes(SHOAL_DTYPE_Q4_K, 256, 16), 0);
		ASSERT_EQ(k->pack_bytes(SHOAL_DTYPE_Q8_0, 100, 16), 0);
		for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
			int n = shapes[si][0], rows = shapes[si][1];
			size_t rb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, (uint64_t)n);
			unsigned char *w = malloc(rb * (size_t)rows), *x = malloc(rb * 130);
			float *f = malloc(sizeof(float) * (size_t)n);
			float *y0 = malloc(sizeof(float) * (size_t)rows * 130),
			      *y1 = malloc(sizeof(float) * (size_t)rows * 130);
			ASSERT_TRUE(w && x && f && y0 && y1);
			for (int r = 0; r < rows; r++) {
				for (int i = 0; i < n; i++)
					f[i] = rnd() * (r % 5 ? 1.0f : 300.0f);
				shoal_quantize_row(SHOAL_DTYPE_Q8_0, f, w + (size_t)r * rb, n);
			}
			for (int c = 0; c < 130; c++) {
				for (int i = 0; i < n; i++)
					f[i] = rnd();
				k->quantize_act(SHOAL_DTYPE_Q8_0, f, x + (size_t)c * rb, n);
			}
			size_t pb = k->pack_bytes(SHOAL_DTYPE_Q8_0, n, rows);
			ASSERT_TRUE(pb > 0);
			void *p = aligned_alloc(64, (pb + 63) & ~(size_t)63);
			ASSERT_TRUE(p != NULL);
			k->pack(SHOAL_DTYPE_Q8_0, n, w, rb, rows, p);
			for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
				int nc = cols[ci];
				for (int r0 = 0; r0 < rows; r0 += 16) {
					int cnt = rows - r0 > 16 && r0 % 32 ? 16 : rows - r0;
					memset(y0, 0, sizeof(float) * (size_t)rows * 130);
					memset(y1, 0xff, sizeof(float) * (size_t)rows * 130);
					k->gemm(SHOAL_DTYPE_Q8_0, n, w + (size_t)r0 * rb, rb, cnt,
					        x, rb, nc, y0, (size_t)rows);
					k->gemm_packed(SHOAL_DTYPE_Q8_0, n, p, r0, cnt, x, rb, nc,
					               y1, (size_t)rows);
					for (int c = 0; c < nc; c++)
						if (memcmp(y0 + (size_t)c * rows,
						           y1 + (size_t)c * rows,
						           sizeof(float) * (size_t)cnt))
							TEST_FAIL_(
							    "%s packed gemm differs: n %d, rows "
							    "%d from %d, %d columns, column %d",
							    k->isa, n, cnt, r0, nc, c);
					tested++;
				}
			}
			free(p);
			free(w);
			free(x);
			free(f);
			free(y0);
			free(y1);
		}
	}
	printf("  %d packed products checked\n", tested);
}

/* silu(g) u: the scalar table within 8 ulp of g / (1 + exp(-g)) u in
 * double where that is above 1e-30 (below, exp_neg's range ends: a zero),
 * inf and NaN through; every table bitwise the scalar table's over
 * lengths with and without a tail, in place (h aliasing g) too. */
static void test_silu_mul(void)
{
	enum { N = 1037 };
	float g[N], u[N], h0[N], h1[N];
	static const float special[] = {0.0f,  -0.0f,  INFINITY, -INFINITY, NAN,   -90.0f,
	                                90.0f, 1e-30f, -1e-30f,  87.5f,     -87.5f};
	for (int i = 0; i < N; i++) {
		g[i] = rnd() * (i % 3 ? 8.0f : 100.0f);
		u[i] = rnd() * 4.0f;
	}
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
		g[40 + 13 * i] = special[i];
	const shoal_kernels *ks = shoal_kernels_scalar();
	ks->silu_mul(g, u, N, h0);
	double worst = 0;
	for (int i = 0; i < N; i++) {
		double r = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
		if (isnan(g[i]) || (isinf(g[i]) && g[i] < 0)) {
			ASSERT_TRUE(isnan(h0[i]));
			continue;
		}
		if (fabs(r) < 1e-30) { /* exp(-|g|) below exp_neg's range (0 there) */
			ASSERT_TRUE(fabsf(h0[i]) <= 1e-30f);
			continue;
		}
		if (isinf(r)) {
			ASSERT_TRUE(h0[i] == (float)r);
			continue;
		}
		float rf = (float)r;
		double ulp = fabs(h0[i] - r) / (nextafterf(fabsf(rf), INFINITY) - fabsf(rf));
		worst = ulp > worst ? ulp : worst;
	}
	printf("  silu_mul: worst %.2f ulp against double\n", worst);
	ASSERT_TRUE(worst <= 8.0);
	static const int lens[] = {1, 7, 8, 9, 100, N};
	for (size_t ii = 0; ii < sizeof isa_names / sizeof isa_names[0]; ii++) {
		const shoal_kernels *k = shoal_kernels_by_name(isa_names[ii]);
		if (!k)
			continue;
		for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
			int n = lens[li], off = N - n;
			k->silu_mul(g + off, u + off, (size_t)n, h1);
			if (memcmp(h0 + off, h1, sizeof(float) * (size_t)n))
				TEST_FAIL_("%s silu_mul differs from scalar (n %d)", k->isa, n);
		}
		memcpy(h1, g, sizeof h1);
		k->silu_mul(h1, u, N, h1);
		if (memcmp(h0, h1, sizeof h1))
			TEST_FAIL_("%s silu_mul in place differs", k->isa);
	}
}

int main(int argc, char **argv)
{
	const char *q = getenv("SHOAL_KERNELS_QUICK");
	quick = (argc > 1 && !strcmp(argv[1], "quick")) || (q && *q == '1');
	static const test_case_ cases[] = {
	    TEST_CASE(test_act_types),
	    TEST_CASE(test_hand_dot_q8_0),
	    TEST_CASE(test_quantize_act_shared),
	    TEST_CASE(test_tables_against_scalar),
	    TEST_CASE(test_family_bitwise),
	    TEST_CASE(test_best_table),
	    TEST_CASE(test_attention),
	    TEST_CASE(test_softmax),
	    TEST_CASE(test_q8_0_avx512_order),
	    TEST_CASE(test_kq_avx512_order),
	    TEST_CASE(test_pair_gemv_avx512),
	    TEST_CASE(test_silu_mul),
	    TEST_CASE(test_packed),
	};
	return test_run_(cases, sizeof cases / sizeof cases[0]);
}
