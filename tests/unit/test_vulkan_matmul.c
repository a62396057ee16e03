/*
 * tests/unit/test_vulkan_matmul.c: the Vulkan backend's matmul and embed
 * (runtime/vulkan/vk_matmul.c) for every weight type it takes, on the
 * machine's Vulkan device (lavapipe here), against
 *   - the exact product: the weights dequantized by shoal_dequantize_row,
 *     times the activations the backend computes with, summed in double
 *     (a tight bound): F32 for F32 / F16 / BF16 weights; for quantized
 *     weights the rows rounded as the CPU rounds them (Q8_0 or Q8_K and
 *     back), which the Vulkan matmul's pre-pass reproduces bit for bit
 *     (tests/unit/test_vulkan_act.c checks that directly), and
 *   - the CPU backend's scalar twin (a looser bound: its own float sums,
 *     and for F16 / BF16 weights its F16 / BF16 activations).
 * Errors are normwise per output: |got - want| against the sum of the
 * magnitudes of the terms, S = sum_i |w_i x_i| (a random dot product cancels,
 * so |y| itself can be near 0 while its error is not).
 *
 * GPU bound (every type): the shaders sum an output's n_in terms in 32
 * lanes of ceil(n_unit / 32) units of 8 (n_unit = ceil(n_in / 8)), then the
 * 32 lane sums: m = 8 ceil(n_unit / 32) + 32 operations, each an fma or an add,
 * rounded at most twice (Vulkan lets fma round like a multiply then an
 * add); the weights are exact (the shader's dequantized values are the
 * CPU's, checked bitwise by the embed test). So |got - exact| <= 2 m u S,
 * u = 2^-24 (Higham's gamma bound, first order).
 *
 * CPU bound, per weight type (see cpu_bound()): its activation rounding
 * plus its own float sums; the two bounds add for GPU vs CPU.
 *
 * Also: outputs are poisoned (NaN bytes) and the bytes between rows must
 * stay poisoned; sizes have tails (n_in, n_out, n_embd not multiples of the
 * 32-element piece, of the 2 outputs of a mat-vec group, of the 64 x 64
 * mat-mul tile), odd row counts; the rows of a batch are bitwise the same
 * at every batch size (mat-vec and mat-mul alike); several matrices in one
 * call; group counts over the device's limit (folded dispatches).
 */
#include "tests/unit/test.h"
#include "tests/unit/test_vulkan_util.h"

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"

#define U 0x1p-24 /* float's unit roundoff */

static const shoal_dtype types[] = {
    SHOAL_DTYPE_F32,     SHOAL_DTYPE_F16,     SHOAL_DTYPE_BF16,   SHOAL_DTYPE_Q8_0,
    SHOAL_DTYPE_Q4_0,    SHOAL_DTYPE_Q4_K,    SHOAL_DTYPE_Q5_K,   SHOAL_DTYPE_Q6_K,
    SHOAL_DTYPE_MXFP4,   SHOAL_DTYPE_Q2_K,    SHOAL_DTYPE_Q3_K,   SHOAL_DTYPE_IQ4_NL,
    SHOAL_DTYPE_IQ4_XS,  SHOAL_DTYPE_IQ2_XXS, SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S,
    SHOAL_DTYPE_IQ3_XXS, SHOAL_DTYPE_IQ3_S,   SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};
#define N_TYPES (sizeof types / sizeof types[0])

static shoal_backend *cpu; /* a CPU instance with room for the largest case */

/* Host memory given to weights(): valid and unchanged for the instance's
 * life (backend.h; the device may map it in place), freed after it. */
#define KEEP_MAX 128
static void *kept[KEEP_MAX];
static int n_kept;

static void *keep(void *p)
{
	if (n_kept == KEEP_MAX) {
		fprintf(stderr, "more than %d weight uploads\n", KEEP_MAX);
		exit(1);
	}
	return kept[n_kept++] = p;
}

/* A row length of type t near n with a tail: plain types any n (odd), a
 * 32-block type an odd number of blocks, K-quants an odd number of
 * super-blocks (more than 32 pieces: some lanes sum 2). */
static int64_t n_in_for(shoal_dtype t, int64_t n)
{
	int64_t be = shoal_dtype_block_elems(t);
	if (be == 1)
		return n | 1;
	return ((n / be) | 1) * be;
}

/* A host matrix of n_out rows of n_in elements of type t, row_bytes apart
 * (pad bytes between rows), quantized from random values in [-1, 1], and
 * its dequantized values (n_out, n_in). */
typedef struct test_mat {
	shoal_dtype t;
	int64_t n_in, n_out;
	size_t row_bytes, lead; /* lead: bytes before row 0 in the upload */
	unsigned char *host;    /* lead + n_out * row_bytes */
	float *deq;
	const void *dev; /* row 0's device address */
} test_mat;

static void mat_make(test_mat *m, shoal_dtype t, int64_t n_in, int64_t n_out, size_t pad,
                     size_t lead)
{
	m->t = t;
	m->n_in = n_in;
	m->n_out = n_out;
	m->row_bytes = shoal_dtype_row_bytes(t, (uint64_t)n_in) + pad;
	m->lead = lead;
	m->host = keep(calloc(lead + (size_t)n_out * m->row_bytes, 1));
	m->deq = malloc((size_t)(n_in * n_out) * sizeof(float));
	for (int64_t o = 0; o < n_out; o++) {
		float *v = vt_rands((size_t)n_in, -1.0f, 1.0f);
		unsigned char *row = m->host + lead + (size_t)o * m->row_bytes;
		shoal_quantize_row(t, v, row, n_in);
		shoal_dequantize_row(t, row, m->deq + o * n_in, n_in);
		free(v);
	}
	const void *dev = NULL;
	if (vt_vk->weights(vt_b, m->host, lead + (size_t)n_out * m->row_bytes, &dev)) {
		fprintf(stderr, "weights() failed\n");
		exit(1);
	}
	m->dev = (const unsigned char *)dev + lead;
}

static void mat_free(test_mat *m)
{
	free(m->deq); /* m->host stays until the instance is gone */
}

static shoal_backend_mat mat_of(const test_mat *m, const void *data)
{
	return (shoal_backend_mat){.type = m->t,
	                           .n_in = m->n_in,
	                           .n_out = m->n_out,
	                           .row_bytes = m->row_bytes,
	                           .data = data};
}

/* The CPU backend's error bound against the exact product for output o of
 * row x (n_in; for quantized weights the rounded row, what both backends
 * multiply), beside the sum S of |w x|:
 *   F32: products rounded, summed in double, rounded once: 2 u S;
 *   F16 / BF16: x rounded to the type first (relative 2^-11 / 2^-8, F16
 *     subnormals below 2^-14 absolute 2^-25), products exact in float: that
 *     plus 2 u S;
 *   quantized: the CPU's integer dots per block are exact; then float sums
 *     over nb blocks with ~4 roundings each, of terms no larger than 4
 *     max|w| over a 32-element sub-block (a K-quant's scale and min parts)
 *     times |x| + d (d = amax / 127 of the block): that many u. Before the
 *     Vulkan pre-pass rounded its activations as the CPU does, this bound
 *     also held the rounding itself (0.6 d |w| per element, ~1e-3
 *     relative); now it does not: both backends multiply the same values. */
static double cpu_bound(shoal_dtype t, const float *w, const float *x, int64_t n, double S)
{
	if (t == SHOAL_DTYPE_F32)
		return 2 * U * S;
	if (t == SHOAL_DTYPE_F16 || t == SHOAL_DTYPE_BF16) {
		double b = (t == SHOAL_DTYPE_F16 ? 0x1p-11 : 0x1p-8) * S + 2 * U * S;
		for (int64_t i = 0; t == SHOAL_DTYPE_F16 && i < n; i++)
			b += 0x1p-25 * fabs(w[i]);
		return b;
	}
	int64_t qb = shoal_dtype_block_elems(t) == 256 ? 256 : 32, nb = n / qb;
	double sums = 0;
	for (int64_t b = 0; b < nb; b++) {
		double amax = 0;
		for (int64_t i = b * qb; i < (b + 1) * qb; i++)
			amax = fmax(amax, fabs(x[i]));
		double d = amax / 127;
		for (int64_t s = b * qb; s < (b + 1) * qb; s += 32) {
			double wmax = 0;
			for (int64_t i = s; i < s + 32; i++)
				wmax = fmax(wmax, fabs(w[i]));
			for (int64_t i = s; i < s + 32; i++)
				sums += 4 * wmax * (fabs(x[i]) + d);
		}
	}
	return 4.0 * (double)(nb + 4) * U * sums;
}

/* Row x (n) as the backends multiply it with weights of type t: rounded
 * to the CPU's Q8_0 / Q8_K and back for quantized t, else as it is. */
static void x_as_used(shoal_dtype t, const float *x, float *out, int64_t n)
{
	shoal_dtype act = shoal_kernels_act_type(t);
	if (act != SHOAL_DTYPE_Q8_0 && act != SHOAL_DTYPE_Q8_K) {
		if (out != x)
			memcpy(out, x, (size_t)n * sizeof *x);
		return;
	}
	void *q = malloc(shoal_dtype_row_bytes(act, (uint64_t)n));
	shoal_quantize_row(act, x, q, n);
	shoal_dequantize_row(act, q, out, n);
	free(q);
}

/* The worst of |got - want| / bound over the outputs (0 when all within:
 * <= 1 passes); a NaN or inf gives inf. */
typedef struct test_err {
	double exact, cpu; /* worst error / bound against each reference */
} test_err;

/* Run matmul of m on x (n_rows, n_in) ldx on both backends and measure. */
static test_err check_matmul(const test_mat *m, const float *x, size_t ldx, uint32_t n_rows)
{
	size_t ldy = (size_t)m->n_out + 3, n_y = n_rows * ldy;
	/* x at an element offset 7 inside its buffer */
	float *xh = calloc(7 + n_rows * ldx, sizeof *xh);
	memcpy(xh + 7, x, n_rows * ldx * sizeof *x);
	float *xd = (float *)vt_dev(xh, (7 + n_rows * ldx) * sizeof *xh) + 7;
	float *yd = vt_poisoned(n_y * sizeof(float));
	shoal_backend_mat w = mat_of(m, m->dev);
	vt_vk->matmul(vt_b, 1, &w, xd, ldx, n_rows, &yd, &ldy);
	float *got = vt_back(yd, n_y * sizeof(float));

	float *want = malloc(n_y * sizeof *want);
	shoal_backend_mat wc = mat_of(m, m->host + m->lead);
	vt_cpu->matmul(cpu, 1, &wc, x, ldx, n_rows, &want, &ldy);

	test_err e = {0, 0};
	if (!vt_untouched(got, (size_t)m->n_out, n_rows, ldy, n_y))
		e.exact = e.cpu = INFINITY;
	double gpu_m = 8.0 * (double)(((m->n_in + 7) / 8 + 31) / 32) + 32;
	float *xr = malloc((size_t)m->n_in * sizeof *xr);
	for (uint32_t r = 0; r < n_rows; r++) {
		x_as_used(m->t, x + r * ldx, xr, m->n_in);
		for (int64_t o = 0; o < m->n_out; o++) {
			const float *wr = m->deq + o * m->n_in;
			double exact = 0, S = 0;
			for (int64_t i = 0; i < m->n_in; i++) {
				exact += (double)wr[i] * xr[i];
				S += fabs((double)wr[i] * xr[i]);
			}
			double g = got[r * ldy + o], c = want[r * ldy + o];
			double bg = 2 * gpu_m * U * S + 1e-30;
			double bc = cpu_bound(m->t, wr, xr, m->n_in, S);
			double ee = fabs(g - exact) / bg, ec = fabs(g - c) / (bg + bc);
			e.exact = ee == ee ? fmax(e.exact, ee) : INFINITY;
			e.cpu = ec == ec ? fmax(e.cpu, ec) : INFINITY;
		}
	}
	free(xr);
	free(xh);
	free(got);
	free(want);
	return e;
}

/* Every type: mat-vec (1, 2, 8 rows) and mat-mul (9, 67, 130 rows) within
 * both bounds, n_out 67 (an odd count: a half-empty mat-vec group, a
 * second, mostly empty output tile), weights starting 3 rows into their
 * upload (and at odd addresses for MXFP4, odd row lengths for F16). */
static void test_matmul_types(void)
{
	static const uint32_t rows[] = {1, 2, 8, 9, 67, 130};
	for (size_t k = 0; k < N_TYPES; k++) {
		shoal_dtype t = types[k];
		test_mat m;
		int64_t n_in = n_in_for(t, t == SHOAL_DTYPE_F32 ? 333 : 1100);
		size_t pad = t == SHOAL_DTYPE_F32 ? 8 : 0;
		mat_make(&m, t, n_in, 67, pad,
		         3 * (shoal_dtype_row_bytes(t, (uint64_t)n_in) + pad));
		size_t ldx = (size_t)n_in + 5;
		float *x = vt_rands(130 * ldx, -2.0f, 2.0f);
		for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++) {
			test_err e = check_matmul(&m, x, ldx, rows[j]);
			printf("  %-5s n_in %4lld rows %3u: err/bound exact %.3g, cpu %.3g\n",
			       shoal_dtype_name(t), (long long)n_in, rows[j], e.exact, e.cpu);
			if (!(e.exact <= 1 && e.cpu <= 1)) {
				free(x);
				mat_free(&m);
				TEST_FAIL_("%s, %u rows: over the bound", shoal_dtype_name(t),
				           rows[j]);
			}
		}
		free(x);
		mat_free(&m);
		vt_end();
	}
}

/* Every type: row r of a batch is bitwise the same whether the batch has
 * 1, 5, 8 (mat-vec) or 9, 70 (mat-mul) rows (backend.h's contract), and
 * whatever the row's place in its tile. */
static void test_matmul_batch_bitwise(void)
{
	static const uint32_t rows[] = {1, 5, 8, 9, 70};
	for (size_t k = 0; k < N_TYPES; k++) {
		shoal_dtype t = types[k];
		test_mat m;
		int64_t n_in = n_in_for(t, 600);
		mat_make(&m, t, n_in, 37, 0, 0);
		size_t ldx = (size_t)n_in, ldy = 37;
		float *x = vt_rands(70 * ldx, -1.0f, 1.0f);
		float *xd = vt_dev(x, 70 * ldx * sizeof *x);
		float *got[5];
		shoal_backend_mat w = mat_of(&m, m.dev);
		for (size_t j = 0; j < 5; j++) {
			/* batch j is x's rows 70 - rows[j] .. 69 */
			float *yd = vt_poisoned(rows[j] * ldy * sizeof(float));
			vt_vk->matmul(vt_b, 1, &w, xd + (70 - rows[j]) * ldx, ldx, rows[j], &yd,
			              &ldy);
			got[j] = vt_back(yd, rows[j] * ldy * sizeof(float));
		}
		int same = 1;
		for (size_t j = 0; j < 4; j++) /* each batch against the 70-row one */
			same &= !memcmp(got[j], got[4] + (70 - rows[j]) * ldy,
			                rows[j] * ldy * sizeof(float));
		for (size_t j = 0; j < 5; j++)
			free(got[j]);
		free(x);
		mat_free(&m);
		vt_end();
		if (!same)
			TEST_FAIL_("%s: a row differs with the batch size", shoal_dtype_name(t));
	}
}

/* Four matrices of mixed types and widths in one call, the outputs in one
 * buffer at offsets with their own ld: bitwise the same as one call each. */
static void test_matmul_several(void)
{
	/* Q8_K, Q8_0, Q8_K, F32 activations: the two Q8_K ones in one pass */
	static const shoal_dtype mt[4] = {SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q6_K,
	                                  SHOAL_DTYPE_F16};
	static const int64_t outs[4] = {67, 40, 33, 5};
	static const size_t at[4] = {0, 2000, 3000, 3500}, ld[4] = {70, 41, 33, 9};
	test_mat m[4];
	shoal_backend_mat w[4];
	for (int i = 0; i < 4; i++) {
		mat_make(&m[i], mt[i], 512, outs[i], 0, 0);
		w[i] = mat_of(&m[i], m[i].dev);
	}
	uint32_t n_rows = 11;
	float *x = vt_rands(n_rows * 512, -1.0f, 1.0f);
	float *xd = vt_dev(x, n_rows * 512 * sizeof *x);
	float *all = vt_poisoned(4000 * sizeof(float)), *one = vt_poisoned(4000 * sizeof(float));
	float *ys[4], *ys1[4];
	for (int i = 0; i < 4; i++) {
		ys[i] = all + at[i];
		ys1[i] = one + at[i];
	}
	vt_vk->matmul(vt_b, 4, w, xd, 512, n_rows, ys, ld);
	for (int i = 0; i < 4; i++)
		vt_vk->matmul(vt_b, 1, &w[i], xd, 512, n_rows, &ys1[i], &ld[i]);
	float *a = vt_back(all, 4000 * sizeof(float)), *b = vt_back(one, 4000 * sizeof(float));
	int same = !memcmp(a, b, 4000 * sizeof(float));
	int written = 1;
	for (int i = 0; i < 4; i++)
		for (uint32_t r = 0; r < n_rows; r++)
			for (int64_t o = 0; o < outs[i]; o++)
				written &= isfinite(a[at[i] + r * ld[i] + (size_t)o]);
	free(a);
	free(b);
	free(x);
	for (int i = 0; i < 4; i++)
		mat_free(&m[i]);
	vt_end();
	ASSERT_TRUE(written);
	ASSERT_TRUE(same);
}

/* More mat-vec groups than the device allows in x (65535 at least, so
 * 2 * 65535 + 3 outputs always fold into y): every output within the
 * exact bound. */
static void test_matmul_folded(void)
{
	test_mat m;
	int64_t n_out = 2 * 65535 + 3;
	mat_make(&m, SHOAL_DTYPE_Q4_0, 64, n_out, 0, 0);
	float *x = vt_rands(64, -1.0f, 1.0f);
	float *xd = vt_dev(x, 64 * sizeof *x);
	float *yd = vt_poisoned((size_t)n_out * sizeof(float));
	shoal_backend_mat w = mat_of(&m, m.dev);
	size_t ldy = (size_t)n_out;
	vt_vk->matmul(vt_b, 1, &w, xd, 64, 1, &yd, &ldy);
	float *got = vt_back(yd, (size_t)n_out * sizeof(float));
	x_as_used(SHOAL_DTYPE_Q4_0, x, x, 64); /* what the GPU multiplies */
	int64_t bad = -1;
	for (int64_t o = 0; o < n_out && bad < 0; o++) {
		double exact = 0, S = 0;
		for (int i = 0; i < 64; i++) {
			exact += (double)m.deq[o * 64 + i] * x[i];
			S += fabs((double)m.deq[o * 64 + i] * x[i]);
		}
		if (!(fabs(got[o] - exact) <= 2 * 40 * U * S + 1e-30)) /* m = 8 + 32 */
			bad = o;
	}
	free(got);
	free(x);
	mat_free(&m);
	vt_end();
	ASSERT_EQ(bad, -1);
}

/* A matrix larger than a binding window (136 MB of Q8_0: over lavapipe's
 * 128 MiB maxStorageBufferRange, whose windows start every 64 MiB): matmul
 * splits it into runs of rows, embed fetches its rows one by one. Every
 * output within the exact bound (m = 8 * 128 + 32: 4096 units of 8 over 32
 * lanes, then the lanes), every embedded row bitwise the CPU's. */
static void test_beyond_window(void)
{
	const int64_t n_in = 32768, n_out = 3900;
	size_t rb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, (uint64_t)n_in);
	unsigned char *host = keep(malloc((size_t)n_out * rb));
	float *v = malloc((size_t)n_in * sizeof *v);
	for (int64_t o = 0; o < n_out; o++) {
		for (int64_t i = 0; i < n_in; i++)
			v[i] = vt_rand(-1.0f, 1.0f);
		shoal_quantize_row(SHOAL_DTYPE_Q8_0, v, host + (size_t)o * rb, n_in);
	}
	const void *dev = NULL;
	ASSERT_EQ(vt_vk->weights(vt_b, host, (size_t)n_out * rb, &dev), SHOAL_OK);
	float *x = vt_rands((size_t)n_in, -1.0f, 1.0f);
	float *xd = vt_dev(x, (size_t)n_in * sizeof *x);
	float *yd = vt_poisoned((size_t)n_out * sizeof(float));
	shoal_backend_mat w = {
	    .type = SHOAL_DTYPE_Q8_0, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = dev};
	size_t ldy = (size_t)n_out;
	vt_vk->matmul(vt_b, 1, &w, xd, (size_t)n_in, 1, &yd, &ldy);
	float *got = vt_back(yd, (size_t)n_out * sizeof(float));
	x_as_used(SHOAL_DTYPE_Q8_0, x, x, n_in); /* what the GPU multiplies */
	int64_t bad = -1;
	for (int64_t o = 0; o < n_out && bad < 0; o++) {
		shoal_dequantize_row(SHOAL_DTYPE_Q8_0, host + (size_t)o * rb, v, n_in);
		double exact = 0, S = 0;
		for (int64_t i = 0; i < n_in; i++) {
			exact += (double)v[i] * x[i];
			S += fabs((double)v[i] * x[i]);
		}
		if (!(fabs(got[o] - exact) <= 2 * 1056 * U * S + 1e-30))
			bad = o;
	}
	static const int32_t ids[] = {3899, 0, 1951, 3899, 2950};
	size_t n_e = 5 * (size_t)n_in;
	float *ed = vt_poisoned(n_e * sizeof(float));
	vt_vk->embed(vt_b, SHOAL_DTYPE_Q8_0, dev, rb, (uint32_t)n_in, ids, 5, ed);
	float *eg = vt_back(ed, n_e * sizeof(float));
	float *ew = malloc(n_e * sizeof *ew);
	vt_cpu->embed(cpu, SHOAL_DTYPE_Q8_0, host, rb, (uint32_t)n_in, ids, 5, ew);
	int same = !memcmp(eg, ew, n_e * sizeof(float));
	free(eg);
	free(ew);
	free(got);
	free(x);
	free(v);
	vt_end();
	ASSERT_EQ(bad, -1);
	ASSERT_TRUE(same);
}

/* Every type: embedding rows (repeated ids, the last row of the table, a
 * row length over one 2048-element group with a tail) are bitwise the
 * CPU's: the shaders dequantize exactly as shoal_dequantize_row. */
static void test_embed(void)
{
	static const int32_t ids[] = {5, 0, 12, 5, 7};
	for (size_t k = 0; k < N_TYPES; k++) {
		shoal_dtype t = types[k];
		uint32_t n_embd = (uint32_t)n_in_for(t, 2100);
		test_mat m;
		mat_make(&m, t, n_embd, 13, 0, 0);
		size_t n_out = 5 * (size_t)n_embd;
		float *od = vt_poisoned((n_out + 4) * sizeof(float));
		vt_vk->embed(vt_b, t, m.dev, m.row_bytes, n_embd, ids, 5, od);
		float *got = vt_back(od, (n_out + 4) * sizeof(float));
		float *want = malloc(n_out * sizeof *want);
		vt_cpu->embed(cpu, t, m.host, m.row_bytes, n_embd, ids, 5, want);
		int same = !memcmp(got, want, n_out * sizeof(float));
		int tail = vt_untouched(got, n_out, 1, n_out + 4, n_out + 4);
		free(got);
		free(want);
		mat_free(&m);
		vt_end();
		if (!same || !tail)
			TEST_FAIL_("%s: embed rows differ from the CPU's (or wrote past them)",
			           shoal_dtype_name(t));
	}
}

/* supports(): the types above for MATMUL and EMBED; none of the others. */
static void test_supports(void)
{
	for (size_t k = 0; k < N_TYPES; k++) {
		ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_MATMUL, types[k]));
		ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_EMBED, types[k]));
	}
	static const shoal_dtype no[] = {SHOAL_DTYPE_Q4_1, SHOAL_DTYPE_Q5_0, SHOAL_DTYPE_Q5_1,
	                                 SHOAL_DTYPE_Q8_K};
	for (size_t k = 0; k < sizeof no / sizeof no[0]; k++) {
		ASSERT_FALSE(vt_vk->supports(SHOAL_BACKEND_OP_MATMUL, no[k]));
		ASSERT_FALSE(vt_vk->supports(SHOAL_BACKEND_OP_EMBED, no[k]));
	}
	/* the IQ grid types also convert to F32 on the host (quant.c) */
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_TO_F32, SHOAL_DTYPE_IQ2_XXS));
	ASSERT_TRUE(vt_vk->supports(SHOAL_BACKEND_OP_TO_F32, SHOAL_DTYPE_IQ1_M));
}

int main(void)
{
	vt_start();
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 16, .max_rows = 256, .max_n = 4096, .max_group = 1};
	if (vt_cpu->create(&lim, &cpu)) {
		fprintf(stderr, "cannot create the CPU backend\n");
		return 1;
	}
	static const test_case_ cases[] = {
	    TEST_CASE(test_supports),
	    TEST_CASE(test_matmul_types),
	    TEST_CASE(test_matmul_batch_bitwise),
	    TEST_CASE(test_matmul_several),
	    TEST_CASE(test_matmul_folded),
	    TEST_CASE(test_embed),
	    TEST_CASE(test_beyond_window),
	};
	int rc = test_run_(cases, sizeof cases / sizeof cases[0]);
	vt_cpu->destroy(cpu);
	vt_end();
	vt_vk->destroy(vt_b);
	vt_cpu->destroy(vt_c);
	for (int i = 0; i < n_kept; i++)
		free(kept[i]);
	return rc;
}
