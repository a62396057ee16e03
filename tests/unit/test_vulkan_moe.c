/*
 * tests/unit/test_vulkan_moe.c: the Vulkan backend's MoE op (backend.h's
 * moe_ffn, runtime/vulkan/vk_moe.c) on the machine's Vulkan device
 * (lavapipe here), for the weight types of MoE expert tensors, against
 *   - the same computation made of the backend's own ops, one expert and
 *     row at a time (matmul of the expert's gate and up, swiglu, matmul of
 *     its down, each read back, then the weighted sum on the host in slot
 *     order, each product rounded to F32 first): bit for bit. vk_moe.c
 *     claims exactly that (its expert products are the matmul's mat-vec
 *     for one row, the same activation rounding and sum order; Vulkan's
 *     float multiply and add are correctly rounded, as the host's are), and
 *     test_vulkan_matmul.c bounds that matmul against the exact product
 *     and the CPU's, so this ties the op to those bounds;
 *   - the CPU backend's scalar twin on the same inputs, within a stated
 *     normwise bound per type (cpu_bound() below says why).
 * Outputs and the scratch are poisoned (NaN bytes) before each run (the
 * op must not read out: backend.h), the padding between output rows must
 * stay poisoned; sizes have tails (rows of odd lengths or odd block
 * counts, odd n_ff and n_embd outputs: half-empty 2-output groups), odd
 * row counts (1, 3, 9), k = 1, 3 and every expert, mixed types (a
 * Q4_K_M-style layer: Q4_K gate and up, Q6_K down; a Q8_0 gate with a
 * Q4_K up: two activation roundings of x), and expert tensors larger than
 * one binding window (runs of experts, one dispatch each).
 */
#include "tests/unit/test.h"
#include "tests/unit/test_vulkan_util.h"

#include "runtime/cpu/quant.h"

static shoal_backend *cpu; /* a CPU (scalar) instance with room for every case */

/* Host memory given to weights() lives as long as the instance. */
#define KEEP_MAX 128
static void *kept[KEEP_MAX];
static int n_kept;

static void *keep(void *p)
{
	if (!p || n_kept == KEEP_MAX) {
		fprintf(stderr, "out of memory or more than %d weight uploads\n", KEEP_MAX);
		exit(1);
	}
	return kept[n_kept++] = p;
}

/* An expert tensor {n_in, n_out, n_expert} of type t: n_expert matrices of
 * n_out rows, stride bytes apart (pad bytes after each expert), quantized
 * from random values in [-1, 1], uploaded with lead bytes before it. */
typedef struct test_exp {
	shoal_backend_mat m; /* expert 0, host */
	size_t stride;
	const void *dev; /* expert 0's device address */
} test_exp;

static void exp_make(test_exp *x, shoal_dtype t, int64_t n_in, int64_t n_out, uint32_t n_expert,
                     size_t pad, size_t lead)
{
	size_t rb = shoal_dtype_row_bytes(t, (uint64_t)n_in);
	x->stride = (size_t)n_out * rb + pad;
	size_t bytes = lead + (size_t)n_expert * x->stride;
	unsigned char *host = keep(calloc(bytes, 1));
	float *v = malloc((size_t)n_in * sizeof *v);
	for (uint32_t e = 0; e < n_expert; e++)
		for (int64_t o = 0; o < n_out; o++) {
			for (int64_t i = 0; i < n_in; i++)
				v[i] = vt_rand(-1.0f, 1.0f);
			shoal_quantize_row(t, v, host + lead + e * x->stride + (size_t)o * rb,
			                   n_in);
		}
	free(v);
	const void *dev = NULL;
	if (vt_vk->weights(vt_b, host, bytes, &dev)) {
		fprintf(stderr, "weights() of %zu bytes failed\n", bytes);
		exit(1);
	}
	x->dev = (const unsigned char *)dev + lead;
	x->m = (shoal_backend_mat){
	    .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = host + lead};
}

/* Expert e's matrix on the device. */
static shoal_backend_mat exp_dev(const test_exp *x, int32_t e)
{
	shoal_backend_mat m = x->m;
	m.data = (const unsigned char *)x->dev + (size_t)e * x->stride;
	return m;
}

/* The routing of n_rows rows: k distinct experts of n_expert per row in
 * ascending order (the engine's), weights in (0, 1]; pick, when >= 0,
 * puts that expert in every row (a run of a large tensor). */
static void route_make(uint32_t n_rows, uint32_t k, uint32_t n_expert, int32_t pick, int32_t *ids,
                       float *w)
{
	for (uint32_t r = 0; r < n_rows; r++) {
		uint8_t used[512] = {0};
		uint32_t n = 0;
		if (pick >= 0)
			used[pick] = 1, n++;
		while (n < k) {
			uint32_t e = (uint32_t)(vt_rand(0.0f, 1.0f) * (float)n_expert) % n_expert;
			if (!used[e])
				used[e] = 1, n++;
		}
		for (uint32_t e = 0, j = 0; e < n_expert; e++)
			if (used[e])
				ids[r * k + j++] = (int32_t)e;
		for (uint32_t j = 0; j < k; j++)
			w[r * k + j] = vt_rand(0.01f, 1.0f);
	}
}

/* The CPU (scalar) backend's relative normwise difference allowed, per
 * output row against max |out| of the row:
 *   F32 weights: both multiply the same F32 values; only the order of
 *     their float sums differs (n_in <= 4096 terms: ~n u ~ 2.4e-4 worst
 *     case, ~sqrt(n) u in practice), through gate, up, silu (Lipschitz
 *     < 1.1) and down: 1e-4;
 *   F16 / BF16 weights: the CPU rounds the activations to F16 / BF16
 *     (relative 2^-11 / 2^-8 per element, twice: x and the hidden row),
 *     the GPU multiplies them in F32: 4 x 2^-11 = 2e-3 / 4 x 2^-8 = 1.6e-2;
 *   quantized weights: both round x and the hidden row to the same Q8_0 /
 *     Q8_K values (vk_matmul.c), so the sums' order is all that differs,
 *     except where a hidden element the two compute slightly differently
 *     lies at a rounding boundary of its block: one quantization step
 *     (max |h| / 127 of a block) in one element, which moves an output by
 *     at most |down| times that: 1e-2 allows a few such flips (with this
 *     seed one is seen, in test_moe_grouped's Q4_K / Q6_K case of 131
 *     rows: 6.2e-4; the rest stay under 1e-6; the figures are printed). */
static double cpu_bound(shoal_dtype t)
{
	switch (t) {
	case SHOAL_DTYPE_F32:
		return 1e-4;
	case SHOAL_DTYPE_F16:
		return 2e-3;
	case SHOAL_DTYPE_BF16:
		return 1.6e-2;
	default:
		return 1e-2;
	}
}

typedef struct moe_case {
	shoal_dtype tg, tu, td; /* gate, up, down */
	uint32_t d, ff, n_expert, k;
} moe_case;

/* The worst error against the CPU per row, whether the op matched the
 * composition bit for bit (when asked) and left the padding alone, and its
 * output (n_rows, n_embd + 5), the caller's to free. */
typedef struct moe_res {
	double cpu;
	bool same, pad;
	float *got;
} moe_res;

/* How run_case calls the op: the routing also on the host (ids_host: the
 * Vulkan grouped path from 9 rows on), and whether to build the
 * composition (slow: a read-back per row and expert). */
enum { RUN_HOST_IDS = 1, RUN_COMPOSE = 2 };

/* Expert biases and the clamped SwiGLU (gpt-oss, ABI 8) for run_case and
 * compose when on: host copies for the CPU, device ones for Vulkan, of
 * gate (n_expert, n_ff), up (n_expert, n_ff) and down (n_expert, n_embd). */
static struct {
	bool on;
	float *h[3];
	const float *d[3];
} oss;
#define OSS_ALPHA 1.702f
#define OSS_LIMIT 0.5f /* under the hidden rows' range here: the clamp acts */

/* The composition of the backend's own ops: out (n_rows, d) ldo on the
 * host. */
static void compose(const test_exp *g, const test_exp *u, const test_exp *dn, const float *xd,
                    size_t ldx, const int32_t *ids, const float *w, uint32_t n_rows, uint32_t k,
                    float *out, size_t ldo)
{
	uint32_t d = (uint32_t)g->m.n_in, ff = (uint32_t)g->m.n_out;
	float *gd = vt_poisoned(ff * sizeof(float)), *ud = vt_poisoned(ff * sizeof(float));
	float *yd = vt_poisoned(d * sizeof(float));
	size_t ldf = ff, ldd = d;
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t j = 0; j < k; j++) {
			int32_t e = ids[r * k + j];
			shoal_backend_mat wg = exp_dev(g, e), wu = exp_dev(u, e),
			                  wd = exp_dev(dn, e);
			vt_vk->matmul(vt_b, 1, &wg, xd + r * ldx, ldx, 1, &gd, &ldf);
			vt_vk->matmul(vt_b, 1, &wu, xd + r * ldx, ldx, 1, &ud, &ldf);
			if (oss.on) {
				vt_vk->add(vt_b, gd, ff, oss.d[0] + (size_t)e * ff, 0, ff, 1);
				vt_vk->add(vt_b, ud, ff, oss.d[1] + (size_t)e * ff, 0, ff, 1);
				vt_vk->swiglu_oai(vt_b, gd, ud, ff, OSS_ALPHA, OSS_LIMIT, gd);
			} else {
				vt_vk->swiglu(vt_b, gd, ud, ff, gd);
			}
			vt_vk->matmul(vt_b, 1, &wd, gd, ff, 1, &yd, &ldd);
			if (oss.on)
				vt_vk->add(vt_b, yd, d, oss.d[2] + (size_t)e * d, 0, d, 1);
			float *y = vt_back(yd, d * sizeof(float));
			float *o = out + r * ldo;
			volatile float c; /* the product rounded before the add */
			for (uint32_t t = 0; t < d; t++) {
				c = w[r * k + j] * y[t];
				o[t] = j == 0 ? c : o[t] + c;
			}
			free(y);
		}
}

static moe_res run_case(const moe_case *c, const test_exp *g, const test_exp *u, const test_exp *dn,
                        uint32_t n_rows, int32_t pick, int how)
{
	uint32_t d = c->d, ff = c->ff, k = c->k;
	size_t ldx = d + 3, ldo = d + 5, n_out = n_rows * ldo, S = (size_t)n_rows * k;
	float *x = vt_rands(n_rows * ldx, -1.0f, 1.0f);
	int32_t *ids = malloc(S * sizeof *ids);
	float *w = malloc(S * sizeof *w);
	route_make(n_rows, k, c->n_expert, pick, ids, w);

	float *xd = vt_dev(x, n_rows * ldx * sizeof *x);
	/* the routing at an element offset 5 inside its buffers */
	int32_t *idh = calloc(S + 5, sizeof *idh);
	float *wh = calloc(S + 5, sizeof *wh);
	memcpy(idh + 5, ids, S * sizeof *ids);
	memcpy(wh + 5, w, S * sizeof *w);
	int32_t *idd = (int32_t *)vt_dev(idh, (S + 5) * sizeof *idh) + 5;
	float *wd = (float *)vt_dev(wh, (S + 5) * sizeof *wh) + 5;
	size_t n_scr = S * (2 * ff + d);
	float *od = vt_poisoned(n_out * sizeof(float));
	shoal_backend_moe m = {
	    .n_rows = n_rows,
	    .k = k,
	    .n_expert = c->n_expert,
	    .n_embd = d,
	    .n_ff = ff,
	    .gate = exp_dev(g, 0),
	    .up = exp_dev(u, 0),
	    .down = exp_dev(dn, 0),
	    .gate_stride = g->stride,
	    .up_stride = u->stride,
	    .down_stride = dn->stride,
	    .x = xd,
	    .ldx = ldx,
	    .ids = idd,
	    .ids_host = how & RUN_HOST_IDS ? ids : NULL,
	    .w = wd,
	    .out = od,
	    .ldo = ldo,
	    .scratch = vt_poisoned(n_scr * sizeof(float)),
	};
	if (oss.on) {
		m.gate_b = oss.d[0], m.up_b = oss.d[1], m.down_b = oss.d[2];
		m.oai = true, m.alpha = OSS_ALPHA, m.limit = OSS_LIMIT;
	}
	vt_vk->moe_ffn(vt_b, &m);
	float *got = vt_back(od, n_out * sizeof(float));

	moe_res res = {0, true, vt_untouched(got, d, n_rows, ldo, n_out), got};
	float *ref = malloc(n_out * sizeof *ref);
	if (how & RUN_COMPOSE) {
		compose(g, u, dn, xd, ldx, ids, w, n_rows, k, ref, ldo);
		for (uint32_t r = 0; r < n_rows; r++)
			res.same &= !memcmp(got + r * ldo, ref + r * ldo, d * sizeof(float));
	}

	/* the CPU on the host copies, with its own poisoned output */
	float *oc = malloc(n_out * sizeof *oc), *scr = malloc(n_scr * sizeof *scr);
	memset(oc, 0xff, n_out * sizeof *oc);
	memset(scr, 0xff, n_scr * sizeof *scr);
	shoal_backend_moe mc = m;
	mc.gate = g->m, mc.up = u->m, mc.down = dn->m;
	mc.x = x, mc.ids = ids, mc.w = w, mc.out = oc, mc.scratch = scr;
	if (oss.on)
		mc.gate_b = oss.h[0], mc.up_b = oss.h[1], mc.down_b = oss.h[2];
	vt_cpu->moe_ffn(cpu, &mc);
	for (uint32_t r = 0; r < n_rows; r++)
		res.cpu = fmax(res.cpu, vt_relerr(got + r * ldo, oc + r * ldo, d, 1, d));
	free(oc);
	free(scr);
	free(ref);
	free(idh);
	free(wh);
	free(ids);
	free(w);
	free(x);
	vt_end();
	return res;
}

/* Every expert type of the fixtures and more, alone and mixed: 1, 3 and 9
 * rows, bitwise the composition, within the CPU bound. */
static void test_moe_types(void)
{
	static const moe_case cases[] = {
	    /* n_embd, n_ff: odd lengths (plain types), odd block counts */
	    {SHOAL_DTYPE_F32, SHOAL_DTYPE_F32, SHOAL_DTYPE_F32, 201, 97, 6, 3},
	    {SHOAL_DTYPE_F16, SHOAL_DTYPE_F16, SHOAL_DTYPE_F16, 201, 97, 6, 3},
	    {SHOAL_DTYPE_BF16, SHOAL_DTYPE_BF16, SHOAL_DTYPE_BF16, 201, 97, 6, 3},
	    {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, 224, 96, 6, 3},
	    {SHOAL_DTYPE_Q4_0, SHOAL_DTYPE_Q4_0, SHOAL_DTYPE_Q4_0, 224, 96, 6, 3},
	    {SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, 224, 96, 6, 3},
	    {SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q4_K, 768, 256, 5, 2},
	    {SHOAL_DTYPE_Q5_K, SHOAL_DTYPE_Q5_K, SHOAL_DTYPE_Q5_K, 256, 768, 5, 2},
	    {SHOAL_DTYPE_Q6_K, SHOAL_DTYPE_Q6_K, SHOAL_DTYPE_Q6_K, 768, 256, 5, 2},
	    {SHOAL_DTYPE_Q2_K, SHOAL_DTYPE_Q2_K, SHOAL_DTYPE_Q3_K, 768, 256, 5, 2},
	    {SHOAL_DTYPE_Q3_K, SHOAL_DTYPE_IQ4_XS, SHOAL_DTYPE_Q2_K, 256, 768, 5, 2},
	    {SHOAL_DTYPE_IQ4_XS, SHOAL_DTYPE_IQ4_XS, SHOAL_DTYPE_IQ4_XS, 256, 256, 5, 2},
	    {SHOAL_DTYPE_IQ4_NL, SHOAL_DTYPE_IQ4_NL, SHOAL_DTYPE_IQ4_NL, 224, 96, 6, 3},
	    {SHOAL_DTYPE_IQ2_XXS, SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S, 256, 256, 4, 2},
	    {SHOAL_DTYPE_IQ3_XXS, SHOAL_DTYPE_IQ3_S, SHOAL_DTYPE_IQ1_M, 256, 256, 4, 2},
	    {SHOAL_DTYPE_IQ1_S, SHOAL_DTYPE_IQ1_M, SHOAL_DTYPE_IQ2_XXS, 256, 256, 4, 2},
	    /* Q4_K_M's layout; two activation types for x; k = 1; k = all */
	    {SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q6_K, 256, 768, 7, 3},
	    {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q8_0, 256, 256, 4, 2},
	    {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_MXFP4, 96, 160, 8, 1},
	    {SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_Q8_0, 96, 160, 4, 4},
	};
	static const uint32_t rows[] = {1, 3, 9};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const moe_case *c = &cases[i];
		test_exp g, u, dn;
		/* pad bytes after each expert; the gate 4 bytes into its upload:
		 * offsets off the device's binding alignment, but whole F32
		 * elements (a GGUF tensor starts 32-byte aligned, and the CPU
		 * twin reads F32 rows as floats: UBSan caught 3 bytes) */
		exp_make(&g, c->tg, c->d, c->ff, c->n_expert, 0, 4);
		exp_make(&u, c->tu, c->d, c->ff, c->n_expert, 16, 0);
		exp_make(&dn, c->td, c->ff, c->d, c->n_expert, 4, 64);
		for (size_t j = 0; j < 2 * sizeof rows / sizeof rows[0]; j++) {
			/* each row count with and without the host's ids */
			int how = RUN_COMPOSE | (j & 1 ? RUN_HOST_IDS : 0);
			moe_res r = run_case(c, &g, &u, &dn, rows[j / 2], -1, how);
			free(r.got);
			double b = cpu_bound(c->td) > cpu_bound(c->tg) ? cpu_bound(c->td)
			                                               : cpu_bound(c->tg);
			printf("  %-5s %-5s %-5s d %3u ff %3u k %u rows %u%s: bitwise %s, cpu "
			       "err %.3g (bound %.3g)\n",
			       shoal_dtype_name(c->tg), shoal_dtype_name(c->tu),
			       shoal_dtype_name(c->td), c->d, c->ff, c->k, rows[j / 2],
			       how & RUN_HOST_IDS ? " (host ids)" : "", r.same ? "yes" : "NO",
			       r.cpu, b);
			if (!r.same || !r.pad || !(r.cpu <= b))
				TEST_FAIL_("%s/%s/%s, %u rows: %s", shoal_dtype_name(c->tg),
				           shoal_dtype_name(c->tu), shoal_dtype_name(c->td),
				           rows[j / 2],
				           !r.same  ? "not the composition of the backend's ops"
				           : !r.pad ? "wrote between output rows"
				                    : "over the CPU bound");
		}
	}
}

/* Expert tensors of 145 MB (130 Q8_0 experts of 256 x 4096: over
 * lavapipe's 128 MiB maxStorageBufferRange, bound in windows that start
 * every 64 MiB): the op binds them in runs of whole experts; every row
 * uses expert 129, the last, and two others. One upload serves as gate,
 * up and down (an expert of 256 rows of 4096 and one of 4096 rows of 256
 * are the same 1,114,112 bytes of Q8_0 blocks). */
static void test_moe_beyond_window(void)
{
	moe_case c = {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, 4096, 256, 130, 3};
	test_exp g, dn;
	exp_make(&g, SHOAL_DTYPE_Q8_0, 4096, 256, 130, 0, 0);
	dn = g;
	dn.m.n_in = 256, dn.m.n_out = 4096;
	dn.m.row_bytes = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, 256);
	ASSERT_EQ(dn.m.row_bytes * 4096, g.stride);
	moe_res r = run_case(&c, &g, &g, &dn, 3, 129, RUN_COMPOSE);
	free(r.got);
	printf("  130 experts of 1.1 MB: bitwise %s, cpu err %.3g\n", r.same ? "yes" : "NO", r.cpu);
	ASSERT_TRUE(r.pad);
	ASSERT_TRUE(r.same);
	ASSERT_TRUE(r.cpu <= cpu_bound(SHOAL_DTYPE_Q8_0));
}

/* Prefill-sized batches (70 and 131 rows over few experts: runs of rows
 * past the mat-vec's 8 and the tile's 64, so the grouped path's matmuls
 * take tiles): the grouped path (host ids) gives the slot path's bits, and
 * both stay within the CPU bound. */
static void test_moe_grouped(void)
{
	static const moe_case cases[] = {
	    {SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q4_K, SHOAL_DTYPE_Q6_K, 256, 512, 4, 2},
	    {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q8_0, 224, 96, 6, 3},
	    {SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, 96, 160, 3, 2},
	    {SHOAL_DTYPE_F16, SHOAL_DTYPE_F16, SHOAL_DTYPE_F16, 201, 97, 5, 1},
	};
	static const uint32_t rows[] = {70, 131};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const moe_case *c = &cases[i];
		test_exp g, u, dn;
		exp_make(&g, c->tg, c->d, c->ff, c->n_expert, 0, 0);
		exp_make(&u, c->tu, c->d, c->ff, c->n_expert, 4, 0);
		exp_make(&dn, c->td, c->ff, c->d, c->n_expert, 0, 0);
		for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++) {
			uint64_t seed = vt_seed; /* the same inputs for both runs */
			moe_res a = run_case(c, &g, &u, &dn, rows[j], -1, RUN_HOST_IDS);
			vt_seed = seed;
			moe_res s = run_case(c, &g, &u, &dn, rows[j], -1, 0);
			size_t n = (size_t)rows[j] * (c->d + 5);
			bool same = !memcmp(a.got, s.got, n * sizeof(float));
			printf("  %-5s %-5s %-5s rows %u: grouped == slots %s, cpu err %.3g / "
			       "%.3g\n",
			       shoal_dtype_name(c->tg), shoal_dtype_name(c->tu),
			       shoal_dtype_name(c->td), rows[j], same ? "yes" : "NO", a.cpu, s.cpu);
			free(a.got);
			free(s.got);
			double b = cpu_bound(c->td) > cpu_bound(c->tg) ? cpu_bound(c->td)
			                                               : cpu_bound(c->tg);
			if (!same || !a.pad || !s.pad || !(a.cpu <= b) || !(s.cpu <= b))
				TEST_FAIL_("%s/%s/%s, %u rows: the grouped path differs, or over "
				           "the CPU bound",
				           shoal_dtype_name(c->tg), shoal_dtype_name(c->tu),
				           shoal_dtype_name(c->td), rows[j]);
		}
	}
}

/* gpt-oss's experts (ABI 8): biases after each product and the clamped
 * SwiGLU, on the slot path (3 rows) and the grouped one (20 rows, host
 * ids): bitwise the composition of matmul, add, swiglu_oai, matmul, add,
 * the grouped path bitwise the slot path, both within the CPU bound; and
 * the plain op (no biases, silu) on the same inputs differs from it by far
 * more than that bound (the op does not ignore them). */
static void test_moe_biases(void)
{
	static const moe_case cases[] = {
	    {SHOAL_DTYPE_F32, SHOAL_DTYPE_F32, SHOAL_DTYPE_F32, 201, 97, 6, 3},
	    {SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, SHOAL_DTYPE_MXFP4, 96, 160, 5, 2},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const moe_case *c = &cases[i];
		test_exp g, u, dn;
		exp_make(&g, c->tg, c->d, c->ff, c->n_expert, 0, 0);
		exp_make(&u, c->tu, c->d, c->ff, c->n_expert, 4, 0);
		exp_make(&dn, c->td, c->ff, c->d, c->n_expert, 0, 0);
		size_t nb[3] = {(size_t)c->n_expert * c->ff, (size_t)c->n_expert * c->ff,
		                (size_t)c->n_expert * c->d};
		for (int j = 0; j < 3; j++) {
			oss.h[j] = keep(vt_rands(nb[j], -0.5f, 0.5f));
			const void *dev = NULL;
			ASSERT_EQ(vt_vk->weights(vt_b, oss.h[j], nb[j] * sizeof(float), &dev),
			          SHOAL_OK);
			oss.d[j] = dev;
		}
		double b = cpu_bound(c->td);
		static const uint32_t rows[] = {3, 20};
		for (size_t j = 0; j < 2; j++) {
			uint64_t seed = vt_seed;
			oss.on = true;
			moe_res a = run_case(c, &g, &u, &dn, rows[j], -1, RUN_COMPOSE);
			vt_seed = seed;
			moe_res h = run_case(c, &g, &u, &dn, rows[j], -1, RUN_HOST_IDS);
			vt_seed = seed;
			oss.on = false;
			moe_res z = run_case(c, &g, &u, &dn, rows[j], -1, 0);
			size_t n = (size_t)rows[j] * (c->d + 5);
			bool same = !memcmp(a.got, h.got, n * sizeof(float));
			double off = 0; /* the plain op against the gpt-oss one */
			for (uint32_t r = 0; r < rows[j]; r++)
				off = fmax(off, vt_relerr(z.got + r * (c->d + 5),
				                          a.got + r * (c->d + 5), c->d, 1, c->d));
			printf("  %-5s biases, oai, rows %2u: composition %s, grouped == slots %s, "
			       "cpu err %.3g / %.3g (bound %.3g), plain op %.3g\n",
			       shoal_dtype_name(c->tg), rows[j], a.same ? "yes" : "NO",
			       same ? "yes" : "NO", a.cpu, h.cpu, b, off);
			free(a.got);
			free(h.got);
			free(z.got);
			if (!a.same || !same || !a.pad || !h.pad || !(a.cpu <= b) ||
			    !(h.cpu <= b) || !(off > 100 * b))
				TEST_FAIL_(
				    "%s with biases, %u rows: not the composition, the "
				    "grouped path differs, over the CPU bound, or the biases "
				    "unseen",
				    shoal_dtype_name(c->tg), rows[j]);
		}
	}
	oss.on = false;
}

int main(void)
{
	(void)vt_pad_kept; /* test_vulkan_util.h's, unused here */
	vt_start();
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 16, .max_rows = 256, .max_n = 4096, .max_group = 1};
	if (vt_cpu->create(&lim, &cpu)) {
		fprintf(stderr, "cannot create the CPU backend\n");
		return 1;
	}
	static const test_case_ cases[] = {
	    TEST_CASE(test_moe_types),
	    TEST_CASE(test_moe_grouped),
	    TEST_CASE(test_moe_biases),
	    TEST_CASE(test_moe_beyond_window),
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
