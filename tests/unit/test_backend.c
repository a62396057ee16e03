/*
 * tests/unit/test_backend.c: runtime/backend.h through its first
 * implementation, the CPU backend: the supports query, the router's
 * softmax and top-k against a plain reference, buffers, the engine's
 * refusal of a table of another ABI version and of no backend, and the
 * engine's device-memory path (a backend without host buffers: staged
 * rows, chunked logits, the MoE's host views) giving the host path's bits.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"
#include "runtime/engine/engine.h"
#include "tests/unit/test.h"

static shoal_backend *make(const shoal_backend_ops *ops)
{
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 16, .max_rows = 4, .max_n = 64, .max_group = 1};
	shoal_backend *b = NULL;
	if (ops->create(&lim, &b) != SHOAL_OK)
		return NULL;
	return b;
}

static void test_table(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	ASSERT_EQ(ops->abi, SHOAL_BACKEND_ABI);
	ASSERT_STR_EQ(ops->name, "cpu");
	/* every member is required */
	const void *const *slot = (const void *const *)(const void *)&ops->name;
	size_t n_ptr = (sizeof *ops - offsetof(shoal_backend_ops, name)) / sizeof(void *);
	for (size_t i = 0; i < n_ptr; i++)
		ASSERT_TRUE(slot[i] != NULL);
}

static void test_supports(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	const shoal_dtype yes[] = {
	    SHOAL_DTYPE_F32,    SHOAL_DTYPE_F16,    SHOAL_DTYPE_BF16,    SHOAL_DTYPE_Q8_0,
	    SHOAL_DTYPE_Q4_0,   SHOAL_DTYPE_Q4_K,   SHOAL_DTYPE_Q6_K,    SHOAL_DTYPE_Q5_0,
	    SHOAL_DTYPE_Q5_1,   SHOAL_DTYPE_Q2_K,   SHOAL_DTYPE_Q3_K,    SHOAL_DTYPE_Q5_K,
	    SHOAL_DTYPE_MXFP4,  SHOAL_DTYPE_IQ4_NL, SHOAL_DTYPE_IQ4_XS,  SHOAL_DTYPE_IQ2_XXS,
	    SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S,  SHOAL_DTYPE_IQ3_XXS, SHOAL_DTYPE_IQ3_S,
	    SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
		ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_MATMUL, yes[i]));
		ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_EMBED, yes[i]));
		ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_TO_F32, yes[i]));
	}
	const shoal_dtype no[] = {SHOAL_DTYPE_Q4_1, SHOAL_DTYPE_Q8_1, SHOAL_DTYPE_Q8_K,
	                          SHOAL_DTYPE_I32, SHOAL_DTYPE_F64};
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		ASSERT_FALSE(ops->supports(SHOAL_BACKEND_OP_MATMUL, no[i]));
	ASSERT_FALSE(ops->supports((shoal_backend_op)99, SHOAL_DTYPE_F32));
	/* the KV cache: F32 and F16 only */
	ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_F32));
	ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_F16));
	ASSERT_FALSE(ops->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_BF16));
	ASSERT_FALSE(ops->supports(SHOAL_BACKEND_OP_KV_CACHE, SHOAL_DTYPE_Q8_0));
	/* to_f32 of F16 halves */
	const uint16_t h[3] = {0x3c00, 0xc000, 0x3800}; /* 1, -2, 0.5 */
	float f[3];
	ops->to_f32(SHOAL_DTYPE_F16, h, f, 3);
	ASSERT_TRUE(f[0] == 1.0f && f[1] == -2.0f && f[2] == 0.5f);
}

static void test_router(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	shoal_backend *b = make(ops);
	ASSERT_TRUE(b != NULL);
	enum { N = 8, ROWS = 3, LD = 10, K = 3 };
	float x[ROWS * LD], ref[ROWS * LD];
	for (int i = 0; i < ROWS * LD; i++)
		x[i] = (float)((i * 37) % 11) * 0.7f - 3.0f;
	x[LD + 2] = x[LD + 5] = 9.0f; /* a tie in row 1: the lower index first */
	memcpy(ref, x, sizeof x);
	ops->softmax(b, x, N, ROWS, LD);
	for (int r = 0; r < ROWS; r++) {
		double mx = -INFINITY, sum = 0;
		for (int i = 0; i < N; i++)
			mx = fmax(mx, ref[r * LD + i]);
		for (int i = 0; i < N; i++)
			sum += exp(ref[r * LD + i] - mx);
		double total = 0;
		for (int i = 0; i < N; i++) {
			double want = exp(ref[r * LD + i] - mx) / sum;
			ASSERT_NEAR(x[r * LD + i], want, 1e-6);
			total += x[r * LD + i];
		}
		ASSERT_NEAR(total, 1.0, 1e-5);
		for (int i = N; i < LD; i++) /* past n: untouched */
			ASSERT_TRUE(x[r * LD + i] == ref[r * LD + i]);
	}
	x[2 * LD + 4] = NAN; /* NaN ranks lowest */
	int32_t ids[ROWS * K];
	float vals[ROWS * K];
	ops->top_k(b, x, N, ROWS, LD, K, ids, vals);
	for (int r = 0; r < ROWS; r++) {
		/* reference: k passes over a copy, strict > */
		uint8_t used[N] = {0};
		for (int j = 0; j < K; j++) {
			int best = -1;
			for (int i = 0; i < N; i++) {
				float v = x[r * LD + i];
				if (used[i] || v != v)
					continue;
				if (best < 0 || v > x[r * LD + best])
					best = i;
			}
			used[best] = 1;
			ASSERT_EQ(ids[r * K + j], best);
			ASSERT_TRUE(vals[r * K + j] == x[r * LD + best]);
		}
	}
	ASSERT_EQ(ids[K + 0], 2); /* the tie */
	ASSERT_EQ(ids[K + 1], 5);
	for (int j = 0; j < K; j++)
		ASSERT_NE(ids[2 * K + j], 4);
	ops->destroy(b);
}

static void test_buffers(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	shoal_backend *b = make(ops);
	ASSERT_TRUE(b != NULL);
	shoal_backend_buf *buf = NULL;
	ASSERT_EQ(ops->buf_alloc(b, 64, &buf), SHOAL_OK);
	unsigned char *host = ops->buf_host(buf);
	ASSERT_TRUE(host != NULL);
	for (int i = 0; i < 64; i++)
		ASSERT_EQ(host[i], 0);
	ASSERT_TRUE(ops->buf_addr(buf) == (void *)host); /* device addresses are host's */
	const char msg[] = "shoal";
	ops->write(b, (unsigned char *)ops->buf_addr(buf) + 10, msg, sizeof msg);
	char back[sizeof msg];
	ops->read(b, (unsigned char *)ops->buf_addr(buf) + 10, back, sizeof back);
	ops->sync(b);
	ASSERT_STR_EQ(back, "shoal");
	ASSERT_TRUE(memcmp(host + 10, msg, sizeof msg) == 0);
	const void *dev = NULL;
	ASSERT_EQ(ops->weights(b, msg, sizeof msg, &dev), SHOAL_OK);
	ASSERT_TRUE(dev == (const void *)msg);
	ops->buf_free(b, buf);
	ops->buf_free(b, NULL);
	ops->destroy(b);
}

static bool picky_supports(shoal_backend_op op, shoal_dtype t)
{
	return !(op == SHOAL_BACKEND_OP_MATMUL && t == SHOAL_DTYPE_Q8_0) &&
	       shoal_backend_cpu()->supports(op, t);
}

/* A backend whose buffers live in device memory (no host pointer). */
static void *device_buf_host(shoal_backend_buf *buf)
{
	(void)buf;
	return NULL;
}

static void test_engine_refuses(void)
{
	char path[512], why[SHOAL_WHY_LEN] = "";
	snprintf(path, sizeof path, "%s/models/austen-dense-q8_0.gguf", test_data_dir());
	shoal_model *m = NULL;
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	shoal_engine_config c = shoal_engine_config_default(m);
	shoal_engine *e = NULL;
	/* no backend */
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_INVAL);
	ASSERT_TRUE(e == NULL && strstr(why, "backend") != NULL);
	/* a table of another version */
	shoal_backend_ops other = *shoal_backend_cpu();
	other.abi = SHOAL_BACKEND_ABI + 1;
	c.backend = &other;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(e == NULL && strstr(why, "ABI") != NULL);
	/* a backend that cannot compute the file's Q8_0 weights: the engine
	 * asks it (not the quantizer) and names it in the reason */
	other = *shoal_backend_cpu();
	other.name = "picky";
	other.supports = picky_supports;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(e == NULL && strstr(why, "picky") != NULL && strcasestr(why, "q8_0") != NULL);
	/* the CPU backend itself */
	c.backend = shoal_backend_cpu();
	c.n_ctx = 32;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_engine_backend_ops(e) == shoal_backend_cpu());
	shoal_engine_free(e);
	shoal_model_free(m);
}

/* Packed weights (the CPU backend keeps a packed copy for batches of 2+
 * rows where the kernels have one): with packing forced on (SHOAL_PACK=1),
 * off (0) and by the cache rule for 2 threads, a Q8_0 product of 1, 2, 5
 * and 40 rows gives the same bits, equal to the 1-row product of each
 * row; the packed copy is made once and kept. */
static void test_packed_matmul(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	enum { N = 512, OUT = 200, ROWS = 40 };
	size_t rb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, N);
	unsigned char *wd = malloc(rb * OUT);
	float *x = malloc(sizeof(float) * N * ROWS), *f = malloc(sizeof(float) * N);
	float *y[3], *y1 = malloc(sizeof(float) * OUT);
	ASSERT_TRUE(wd && x && f && y1);
	unsigned s = 5;
	for (int r = 0; r < OUT; r++) {
		for (int i = 0; i < N; i++) {
			s = s * 1664525u + 1013904223u;
			f[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
		}
		shoal_quantize_row(SHOAL_DTYPE_Q8_0, f, wd + (size_t)r * rb, N);
	}
	for (int i = 0; i < N * ROWS; i++) {
		s = s * 1664525u + 1013904223u;
		x[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
	}
	shoal_backend_mat w = {
	    .type = SHOAL_DTYPE_Q8_0, .n_in = N, .n_out = OUT, .row_bytes = rb, .data = wd};
	static const char *const modes[] = {"1", "0", NULL};
	const uint32_t nr[] = {1, 2, 5, ROWS};
	for (int mi = 0; mi < 3; mi++) {
		if (modes[mi])
			setenv("SHOAL_PACK", modes[mi], 1);
		else
			unsetenv("SHOAL_PACK");
		shoal_backend_limits lim = {.n_threads = mi == 2 ? 2 : 1,
		                            .max_ctx = 16,
		                            .max_rows = ROWS,
		                            .max_n = N,
		                            .max_group = 1,
		                            .weight_bytes = rb * OUT};
		shoal_backend *b = NULL;
		ASSERT_EQ(ops->create(&lim, &b), SHOAL_OK);
		y[mi] = malloc(sizeof(float) * OUT * ROWS);
		ASSERT_TRUE(y[mi] != NULL);
		for (int pass = 0; pass < 2; pass++) /* the second from the kept copy */
			for (size_t k = 0; k < sizeof nr / sizeof nr[0]; k++) {
				size_t ld = OUT;
				memset(y[mi], 0, sizeof(float) * OUT * ROWS);
				ops->matmul(b, 1, &w, x, N, nr[k], &y[mi], &ld);
				for (uint32_t r = 0; r < nr[k]; r++) {
					ops->matmul(b, 1, &w, x + (size_t)r * N, N, 1, &y1, &ld);
					if (memcmp(y1, y[mi] + (size_t)r * OUT,
					           sizeof(float) * OUT))
						TEST_FAIL_(
						    "SHOAL_PACK=%s: %u rows, row %u differs from "
						    "its 1-row product",
						    modes[mi] ? modes[mi] : "(unset)", nr[k], r);
				}
			}
		ops->destroy(b);
	}
	ASSERT_MEM_EQ(y[0], y[1], sizeof(float) * OUT * ROWS);
	ASSERT_MEM_EQ(y[0], y[2], sizeof(float) * OUT * ROWS);
	unsetenv("SHOAL_PACK");
	for (int mi = 0; mi < 3; mi++)
		free(y[mi]);
	free(wd);
	free(x);
	free(f);
	free(y1);
}

/* Logits of a 7-token prefill and 3 decode steps through the whole model
 * (one engine) or two stages (hidden states between them) of backend ops. */
static void run_model(const shoal_model *m, const shoal_backend_ops *ops, bool split, float *out)
{
	char why[SHOAL_WHY_LEN] = "";
	const uint32_t L = m->hp.n_layer, V = m->hp.n_vocab, D = m->hp.n_embd;
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = ops;
	c.n_ctx = 32;
	c.max_rows = 8;
	c.n_threads = 2;
	shoal_engine *e[2] = {NULL, NULL};
	int n_eng = split ? 2 : 1;
	for (int i = 0; i < n_eng; i++) {
		shoal_engine_config ci = c;
		if (split) {
			ci.layer_begin = i ? L / 2 : 0;
			ci.layer_end = i ? L : L / 2;
			ci.has_embd = i == 0;
			ci.has_head = i == 1;
		}
		ASSERT_EQ(shoal_engine_new(m, &ci, &e[i], why, sizeof why), SHOAL_OK);
	}
	uint32_t slot[2] = {0, 0};
	for (int i = 0; i < n_eng; i++)
		ASSERT_EQ(shoal_engine_session_open(e[i], &slot[i]), SHOAL_OK);
	const int32_t prompt[7] = {5, 17, 3, 99, 42, 7, 250};
	float *hid = malloc(sizeof(float) * 8 * D);
	ASSERT_TRUE(hid != NULL);
	int32_t tok[8];
	uint32_t pos[8], sess[2][8];
	uint8_t want[8];
	size_t at = 0; /* floats of out written */
	for (uint32_t step = 0, p = 0; step < 4; step++) {
		uint32_t n = step ? 1 : 7;
		for (uint32_t r = 0; r < n; r++) {
			tok[r] = (step ? (int32_t)(step * 31 + 11) : prompt[r]) % (int32_t)V;
			pos[r] = p + r;
			sess[0][r] = slot[0];
			sess[1][r] = slot[1];
			want[r] = 1;
		}
		shoal_engine_batch b = {.n_rows = n,
		                        .tokens = tok,
		                        .session = sess[0],
		                        .pos = pos,
		                        .want_logits = split ? NULL : want,
		                        .hidden_out = split ? hid : NULL,
		                        .logits = split ? NULL : out + at};
		ASSERT_EQ(shoal_engine_run(e[0], &b, why, sizeof why), SHOAL_OK);
		if (split) {
			shoal_engine_batch b2 = {.n_rows = n,
			                         .hidden_in = hid,
			                         .session = sess[1],
			                         .pos = pos,
			                         .want_logits = want,
			                         .logits = out + at};
			ASSERT_EQ(shoal_engine_run(e[1], &b2, why, sizeof why), SHOAL_OK);
		}
		at += (size_t)n * V;
		p += n;
	}
	free(hid);
	for (int i = 0; i < n_eng; i++)
		shoal_engine_free(e[i]);
}

/* The engine on a backend whose buffers have no host pointer takes its
 * device-memory path (rows staged with write/read, logits through the
 * device buffer in chunks, MoE routing on host views): on the CPU's ops
 * it must give the host path's logits bit for bit, for a dense, an MoE
 * and an MLA model, whole and split in two stages. */
static void test_device_memory_path(void)
{
	static const char *const files[] = {"austen-dense-q8_0.gguf", "austen-moe-q8_0.gguf",
	                                    "tiny-deepseek2-q8_0.gguf"};
	shoal_backend_ops devmem = *shoal_backend_cpu();
	devmem.name = "devmem";
	devmem.buf_host = device_buf_host;
	for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
		char path[512], why[SHOAL_WHY_LEN] = "";
		/* the MoE model is in shared/ beside the source tree */
		const char *src = getenv("SHOAL_SRCDIR");
		snprintf(path, sizeof path, "%s/models/%s", test_data_dir(), files[f]);
		if (access(path, R_OK))
			snprintf(path, sizeof path, "%s/../shared/models/%s", src ? src : ".",
			         files[f]);
		if (f == 1 && access(path, R_OK)) { /* a tree without shared/ beside it */
			printf("%s not found: the MoE model is not checked\n", files[f]);
			continue;
		}
		shoal_model *m = NULL;
		ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
		size_t n = (size_t)10 * m->hp.n_vocab;
		float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
		ASSERT_TRUE(a && b);
		for (int split = 0; split < 2; split++) {
			memset(b, 0xff, n * sizeof(float)); /* poisoned: NaN */
			run_model(m, shoal_backend_cpu(), split, a);
			run_model(m, &devmem, split, b);
			if (memcmp(a, b, n * sizeof(float)))
				TEST_FAIL_("%s%s: the device-memory path's logits differ", files[f],
				           split ? " (two stages)" : "");
		}
		free(a);
		free(b);
		shoal_model_free(m);
	}
}

/* The CPU's moe_route (ABI 8) on hand-made rows with known answers:
 * DeepSeek-V3's sigmoid with a selection bias and groups (the best key's
 * group is not among the two best groups, a tie inside a kept one, the
 * weights the unbiased p, renormalised and scaled), softmax over all with
 * a tie and a NaN, and gpt-oss's softmax over the chosen k; each row's
 * ids ascending with their weights. */
static double sig(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

static void test_moe_route(void)
{
	const shoal_backend_ops *ops = shoal_backend_cpu();
	ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_MOE_ROUTE, SHOAL_DTYPE_F32));
	ASSERT_TRUE(ops->supports(SHOAL_BACKEND_OP_MOE_BIAS, SHOAL_DTYPE_F32));
	shoal_backend_limits lim = {
	    .n_threads = 1, .max_ctx = 8, .max_rows = 4, .max_n = 64, .max_group = 1};
	shoal_backend *b = NULL;
	ASSERT_EQ(ops->create(&lim, &b), SHOAL_OK);
	int32_t ids[4];
	float w[4];
	/* sigmoid + bias, 4 groups of 2, 2 groups kept, k 2: keys 0.8 0.5 |
	 * 0.88 0.12 | 0.73 0.73 | 0.05 0.95; group sums 1.3 1.0 1.46 1.0:
	 * groups 2 and 0; then expert 0 (0.8) and 4 (the tie with 5) */
	float lg[8] = {0, 0, 2, -2, 1, 1, -3, 3}, bias[8] = {0.3f};
	shoal_backend_route r = {.n_rows = 1,
	                         .n_expert = 8,
	                         .k = 2,
	                         .gating = SHOAL_BACKEND_GATING_SIGMOID,
	                         .n_group = 4,
	                         .n_group_used = 2,
	                         .norm = true,
	                         .scale = 2.5f,
	                         .logits = lg,
	                         .ld = 8,
	                         .bias = bias,
	                         .ids = ids,
	                         .w = w};
	ops->moe_route(b, &r);
	ASSERT_EQ(ids[0], 0);
	ASSERT_EQ(ids[1], 4);
	ASSERT_NEAR(w[0], 2.5 * 0.5 / (0.5 + sig(1)), 1e-6);
	ASSERT_NEAR(w[1], 2.5 * sig(1) / (0.5 + sig(1)), 1e-6);
	/* softmax over all, two rows 6 apart: a tie (1 and 2) and a NaN */
	float lg2[11] = {1, 3, 3, 0, NAN, 0, 3, 1, NAN, 2, 9};
	r = (shoal_backend_route){.n_rows = 2,
	                          .n_expert = 5,
	                          .k = 2,
	                          .gating = SHOAL_BACKEND_GATING_SOFTMAX,
	                          .norm = false,
	                          .scale = 1.0f,
	                          .logits = lg2,
	                          .ld = 6,
	                          .ids = ids,
	                          .w = w};
	ops->moe_route(b, &r);
	double z0 = exp(-2) + 2 + exp(-3), z1 = exp(-6) + exp(-8) + exp(-7) + 1;
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 2);
	ASSERT_NEAR(w[0], 1 / z0, 1e-6);
	ASSERT_NEAR(w[1], 1 / z0, 1e-6);
	ASSERT_EQ(ids[2], 0); /* row 1: 3 1 NaN 2 9 (a NaN's p is 0) */
	ASSERT_EQ(ids[3], 4);
	ASSERT_NEAR(w[2], exp(-6) / z1, 1e-6);
	ASSERT_NEAR(w[3], 1 / z1, 1e-6);
	/* gpt-oss: top 3 of 0.5 2 1 1.5 (1, 3, 2), softmax over those 3 */
	float lg3[4] = {0.5f, 2, 1, 1.5f};
	r = (shoal_backend_route){.n_rows = 1,
	                          .n_expert = 4,
	                          .k = 3,
	                          .gating = SHOAL_BACKEND_GATING_SOFTMAX_TOPK,
	                          .scale = 1.0f,
	                          .logits = lg3,
	                          .ld = 4,
	                          .ids = ids,
	                          .w = w};
	ops->moe_route(b, &r);
	double z3 = 1 + exp(-0.5) + exp(-1);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 2);
	ASSERT_EQ(ids[2], 3);
	ASSERT_NEAR(w[0], 1 / z3, 1e-6);
	ASSERT_NEAR(w[1], exp(-1) / z3, 1e-6);
	ASSERT_NEAR(w[2], exp(-0.5) / z3, 1e-6);
	ops->destroy(b);
}

TEST_MAIN(TEST_CASE(test_table), TEST_CASE(test_supports), TEST_CASE(test_router),
          TEST_CASE(test_moe_route), TEST_CASE(test_buffers), TEST_CASE(test_engine_refuses),
          TEST_CASE(test_packed_matmul), TEST_CASE(test_device_memory_path))
