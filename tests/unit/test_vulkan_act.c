/*
 * tests/unit/test_vulkan_act.c: the activation pre-pass of the Vulkan
 * backend's matmul (runtime/vulkan/shaders/act_q8.comp): for weights whose
 * CPU matmul rounds the activations to Q8_0 (blocks of 32, fp16 scale,
 * ties away from zero) or Q8_K (blocks of 256, F32 scale, ties to even),
 * the Vulkan matmul computes with bitwise the same rounded values.
 *
 * How it is seen: an identity matrix of the weight type (row o: 1.0 at
 * element o, 0 elsewhere; its dequantized values checked exactly) makes
 * y[r][o] = 0 + ... + 1 * xq[r][o] + 0 + ...: exactly the rounded
 * activation xq the shader wrote (the zero terms add nothing, a -0 aside,
 * hence == and not memcmp). The want is the CPU's own rounding:
 * shoal_quantize_row to Q8_0 / Q8_K and back (the CPU backend's scalar
 * quantize_act is that call; its x86 twin rounds alike).
 *
 * Inputs, block by block: random values; exact ties (blocks whose scale
 * is a power of two, so x / d lands on k + 0.5: Q8_0 rounds them away
 * from zero, Q8_K to even) at several binary scales; zero blocks; blocks
 * whose fp16 scale is subnormal; blocks holding their largest magnitude
 * twice with both signs (Q8_K takes the first one's sign, though d * q is
 * the same with either: q and d both flip); large values.
 * Rows: 1, 3 (mat-vec) and 67 (tiles), n_in with a tail against the
 * shader's 256-element workgroups; outputs poisoned, the bytes between
 * rows checked untouched. And a batch larger than the instance's scratch
 * (max_rows x max_n floats), rounded in passes: within the exact bound
 * against the rounded activations.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_vulkan_util.h"

#include "runtime/cpu/quant.h"

#define U 0x1p-24 /* float's unit roundoff */

static void *kept[16]; /* weights() host memory: valid for the instance's life */
static int n_kept;

/* The fp16 bits of 1.0. */
#define HALF_ONE 0x3c00u

/* An identity matrix (n x n) of type t (Q8_0 or Q4_K) in host memory. */
static unsigned char *identity(shoal_dtype t, int64_t n, size_t *row_bytes)
{
	size_t rb = shoal_dtype_row_bytes(t, (uint64_t)n);
	unsigned char *m = calloc((size_t)n, rb);
	for (int64_t o = 0; o < n; o++) {
		unsigned char *row = m + (size_t)o * rb;
		if (t == SHOAL_DTYPE_Q8_0) { /* blocks of 34: fp16 d, 32 int8 q */
			for (int64_t b = 0; b < n / 32; b++) {
				row[34 * b] = HALF_ONE & 0xff;
				row[34 * b + 1] = HALF_ONE >> 8;
			}
			row[34 * (o / 32) + 2 + o % 32] = 1;
		} else { /* Q4_K, blocks of 144: fp16 d, dmin, 12 scale bytes, 128 q */
			for (int64_t b = 0; b < n / 256; b++) {
				unsigned char *blk = row + 144 * b;
				blk[0] = HALF_ONE & 0xff;
				blk[1] = HALF_ONE >> 8; /* dmin 0: no mins */
				for (int j = 0; j < 4; j++)
					blk[4 + j] = 1; /* sub-blocks 0..3: scale 1, min 0 */
				for (int j = 8; j < 12; j++)
					blk[4 + j] = 1; /* sub-blocks 4..7: scale 1, min 0 */
			}
			int64_t e = o % 256, c = e / 64, l = e % 32;
			row[144 * (o / 256) + 16 + 32 * c + l] = (e % 64) < 32 ? 0x01 : 0x10;
		}
	}
	*row_bytes = rb;
	return m;
}

/* Whether the identity's dequantized rows are exactly the unit rows. */
static int identity_exact(shoal_dtype t, const unsigned char *m, size_t rb, int64_t n)
{
	float *v = malloc((size_t)n * sizeof *v);
	int ok = 1;
	for (int64_t o = 0; o < n && ok; o++) {
		shoal_dequantize_row(t, m + (size_t)o * rb, v, n);
		for (int64_t i = 0; i < n; i++)
			ok &= v[i] == (i == o ? 1.0f : 0.0f);
	}
	free(v);
	return ok;
}

/* Block b of a row (blk elements at x) filled in the way kind says. */
static void fill_block(float *x, int blk, int kind)
{
	switch (kind % 7) {
	case 0: /* random */
		for (int i = 0; i < blk; i++)
			x[i] = vt_rand(-2.0f, 2.0f);
		break;
	case 1:
	case 2: { /* ties: scale 2^e, so x / d = k + 0.5 exactly */
		float s = ldexpf(1.0f, (int)vt_rand(-6.0f, 6.0f));
		for (int i = 0; i < blk; i++)
			x[i] = ((float)(int)vt_rand(-126.0f, 126.0f) + 0.5f) * s;
		x[(int)vt_rand(0.0f, (float)blk)] = (kind % 7 == 1 ? 127.0f : -127.0f) * s;
		break;
	}
	case 3: /* zero */
		for (int i = 0; i < blk; i++)
			x[i] = 0.0f;
		break;
	case 4: /* tiny: Q8_0's fp16 scale is subnormal (d < 2^-14) */
		for (int i = 0; i < blk; i++)
			x[i] = vt_rand(-1e-4f, 1e-4f);
		break;
	case 5: { /* the largest magnitude twice, both signs */
		for (int i = 0; i < blk; i++)
			x[i] = vt_rand(-1.0f, 1.0f);
		int a = (int)vt_rand(0.0f, (float)blk / 2), b = a + 1 + (int)vt_rand(0.0f, 10.0f);
		float m = vt_rand(0.0f, 1.0f) < 0.5f ? 1.5f : -1.5f;
		x[a] = m;
		x[b % blk] = -m;
		break;
	}
	default: /* large */
		for (int i = 0; i < blk; i++)
			x[i] = vt_rand(-3000.0f, 3000.0f);
	}
}

/* The CPU's rounding of a row of n: to act and back. */
static void cpu_round(shoal_dtype act, const float *x, float *out, int64_t n)
{
	void *q = malloc(shoal_dtype_row_bytes(act, (uint64_t)n));
	shoal_quantize_row(act, x, q, n);
	shoal_dequantize_row(act, q, out, n);
	free(q);
}

/* Identity matmul of type t (its CPU activations act) on n_rows rows:
 * how many outputs differ from the CPU's rounded activations (-1: the
 * bytes between rows were written). */
static int64_t identity_run(shoal_dtype t, shoal_dtype act, int64_t n, uint32_t n_rows)
{
	size_t rb;
	unsigned char *m = identity(t, n, &rb);
	if (!identity_exact(t, m, rb, n)) {
		fprintf(stderr, "%s identity: not exactly the unit rows\n", shoal_dtype_name(t));
		exit(1);
	}
	kept[n_kept++] = m;
	const void *wd = NULL;
	if (vt_vk->weights(vt_b, m, (size_t)n * rb, &wd)) {
		fprintf(stderr, "weights() failed\n");
		exit(1);
	}
	int blk = act == SHOAL_DTYPE_Q8_K ? 256 : 32;
	size_t ldx = (size_t)n + 9, ldy = (size_t)n + 3, n_y = n_rows * ldy;
	float *x = calloc(n_rows * ldx, sizeof *x), *want = malloc((size_t)n * sizeof *want);
	for (uint32_t r = 0; r < n_rows; r++)
		for (int64_t b = 0; b < n / blk; b++)
			fill_block(x + r * ldx + b * blk, blk, (int)(r + 3 * b));
	float *xd = vt_dev(x, n_rows * ldx * sizeof *x);
	float *yd = vt_poisoned(n_y * sizeof(float));
	shoal_backend_mat w = {.type = t, .n_in = n, .n_out = n, .row_bytes = rb, .data = wd};
	vt_vk->matmul(vt_b, 1, &w, xd, ldx, n_rows, &yd, &ldy);
	float *got = vt_back(yd, n_y * sizeof(float));
	int64_t bad = vt_untouched(got, (size_t)n, n_rows, ldy, n_y) ? 0 : -1;
	for (uint32_t r = 0; r < n_rows && bad >= 0; r++) {
		cpu_round(act, x + r * ldx, want, n);
		for (int64_t i = 0; i < n; i++)
			if (!(got[r * ldy + i] == want[i])) {
				if (!bad)
					fprintf(stderr,
					        "  row %u elem %lld: x %.9g got %.9g want %.9g\n",
					        r, (long long)i, x[r * ldx + i], got[r * ldy + i],
					        want[i]);
				bad++;
			}
	}
	free(x);
	free(want);
	free(got);
	vt_end();
	return bad;
}

/* Q8_0 (Q8_0 weights; Q4_0 and MXFP4 weights share it) and Q8_K (Q4_K
 * weights; Q5_K and Q6_K share it): every rounded activation bitwise the
 * CPU's, in the mat-vec and the tiled shaders. */
static void test_round_bitwise(void)
{
	static const uint32_t rows[] = {1, 3, 67};
	for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
		int64_t q8_0 = identity_run(SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, 13 * 32, rows[k]);
		int64_t q8_k = identity_run(SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q8_K, 3 * 256, rows[k]);
		printf("  %u rows: Q8_0 %lld, Q8_K %lld outputs differ\n", rows[k], (long long)q8_0,
		       (long long)q8_k);
		ASSERT_EQ(q8_0, 0);
		ASSERT_EQ(q8_k, 0);
	}
}

/* More rows than the scratch holds (the instance's limits: 64 rows of
 * 4096): 67 rows of 4064 (127 Q8_0 blocks) round in two passes, every
 * output within the GPU's bound against the exact product of the weights
 * and the CPU-rounded rows, 2 m u S (m = 8 * 16 + 32: 508 units of 8 over
 * 32 lanes, then the lanes; test_vulkan_matmul.c says why). */
static void test_over_scratch(void)
{
	const int64_t n = 4064, n_out = 5;
	const uint32_t n_rows = 67;
	size_t rb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, (uint64_t)n);
	unsigned char *m = malloc((size_t)n_out * rb);
	float *wq = malloc((size_t)(n_out * n) * sizeof *wq);
	for (int64_t o = 0; o < n_out; o++) {
		float *v = vt_rands((size_t)n, -1.0f, 1.0f);
		shoal_quantize_row(SHOAL_DTYPE_Q8_0, v, m + (size_t)o * rb, n);
		shoal_dequantize_row(SHOAL_DTYPE_Q8_0, m + (size_t)o * rb, wq + o * n, n);
		free(v);
	}
	kept[n_kept++] = m;
	const void *wd = NULL;
	ASSERT_EQ(vt_vk->weights(vt_b, m, (size_t)n_out * rb, &wd), SHOAL_OK);
	float *x = vt_rands(n_rows * (size_t)n, -2.0f, 2.0f);
	float *xd = vt_dev(x, n_rows * (size_t)n * sizeof *x);
	size_t ldy = (size_t)n_out, n_y = n_rows * ldy;
	float *yd = vt_poisoned(n_y * sizeof(float));
	shoal_backend_mat w = {
	    .type = SHOAL_DTYPE_Q8_0, .n_in = n, .n_out = n_out, .row_bytes = rb, .data = wd};
	vt_vk->matmul(vt_b, 1, &w, xd, (size_t)n, n_rows, &yd, &ldy);
	float *got = vt_back(yd, n_y * sizeof(float));
	float *xq = malloc((size_t)n * sizeof *xq);
	int bad = 0;
	for (uint32_t r = 0; r < n_rows; r++) {
		cpu_round(SHOAL_DTYPE_Q8_0, x + r * n, xq, n);
		for (int64_t o = 0; o < n_out; o++) {
			double exact = 0, S = 0;
			for (int64_t i = 0; i < n; i++) {
				exact += (double)wq[o * n + i] * xq[i];
				S += fabs((double)wq[o * n + i] * xq[i]);
			}
			bad += !(fabs(got[r * ldy + o] - exact) <= 2 * 160 * U * S + 1e-30);
		}
	}
	free(xq);
	free(x);
	free(wq);
	free(got);
	vt_end();
	ASSERT_EQ(bad, 0);
}

int main(void)
{
	vt_start();
	(void)vt_relerr; /* test_vulkan_util.h's, unused here */
	(void)vt_pad_kept;
	static const test_case_ cases[] = {
	    TEST_CASE(test_round_bitwise),
	    TEST_CASE(test_over_scratch),
	};
	int rc = test_run_(cases, sizeof cases / sizeof cases[0]);
	vt_end();
	vt_vk->destroy(vt_b);
	vt_cpu->destroy(vt_c);
	for (int i = 0; i < n_kept; i++)
		free(kept[i]);
	return rc;
}
