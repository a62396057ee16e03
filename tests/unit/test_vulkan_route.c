/*
 * tests/unit/test_vulkan_route.c: the Vulkan backend's MoE router
 * (backend.h's moe_route, shaders/moe_route.comp) on the machine's Vulkan
 * device (lavapipe here) against the CPU backend's scalar twin (the
 * engine's routing: runtime/backend_host.c) on the same logits:
 *   - the chosen ids identical, slot for slot (ascending ids);
 *   - the weights within backend.h's bound: 1e-4 of the largest weight
 *     of the row (the twin sums in double, the shader in float; their exp
 *     and sigmoid agree to a few ulp);
 * for each gating the models use: softmax over all (qwen3moe, Mixtral-
 * style llama), norm and not; group-limited softmax (DeepSeek-V2) and
 * sigmoid with a selection bias and a scale (DeepSeek-V3); softmax over
 * the chosen k (gpt-oss). Logits are random, then rounded to a few values
 * (ties everywhere: the lower id wins on both), with NaNs, with rows past
 * one workgroup (64), odd expert counts, k = 1 and k = all. Outputs are
 * poisoned first, and the element after them must stay poisoned.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_vulkan_util.h"

#include <math.h>

typedef struct route_case {
	const char *what;
	shoal_backend_gating gating;
	uint32_t n_expert, k, n_group, n_group_used;
	bool norm, bias;
	float scale;
} route_case;

/* Logits of one kind: 0 random in [-4, 4]; 1 rounded to quarters of
 * [-1, 1] (9 values: ties in every row); 2 random with a NaN every 7th. */
static float logit_of(int kind, size_t i)
{
	float v = vt_rand(-4.0f, 4.0f);
	if (kind == 1)
		return roundf(v) / 4.0f;
	if (kind == 2 && i % 7 == 3)
		return NAN;
	return v;
}

/* One case over n_rows rows of logits ld = n_expert + 3 apart: the number
 * of slots whose ids differ from the CPU's; *werr the largest weight
 * difference over the row's largest weight; *kept whether the element
 * after each output stayed poisoned. */
static uint32_t run_route(const route_case *c, uint32_t n_rows, int kind, double *werr, bool *kept)
{
	uint32_t ne = c->n_expert, k = c->k;
	size_t ld = ne + 3, S = (size_t)n_rows * k;
	float *lg = malloc((size_t)n_rows * ld * sizeof *lg);
	for (size_t i = 0; i < (size_t)n_rows * ld; i++)
		lg[i] = logit_of(kind, i);
	float *bias = malloc(ne * sizeof *bias);
	for (uint32_t i = 0; i < ne; i++) /* DeepSeek-V3's biases: small, some equal */
		bias[i] = kind == 1 ? (float)(i % 3) / 64.0f : vt_rand(-0.05f, 0.05f);

	shoal_backend_route r = {
	    .n_rows = n_rows,
	    .n_expert = ne,
	    .k = k,
	    .gating = c->gating,
	    .n_group = c->n_group,
	    .n_group_used = c->n_group_used,
	    .norm = c->norm,
	    .scale = c->scale,
	    .logits = vt_dev(lg, (size_t)n_rows * ld * sizeof *lg),
	    .ld = ld,
	    .bias = c->bias ? vt_dev(bias, ne * sizeof *bias) : NULL,
	    .ids = vt_poisoned((S + 1) * sizeof(int32_t)),
	    .w = vt_poisoned((S + 1) * sizeof(float)),
	};
	vt_vk->moe_route(vt_b, &r);
	int32_t *ids = vt_back(r.ids, (S + 1) * sizeof(int32_t));
	float *w = vt_back(r.w, (S + 1) * sizeof(float));

	int32_t *cid = malloc((S + 1) * sizeof *cid);
	float *cw = malloc((S + 1) * sizeof *cw);
	memset(cid, 0xff, (S + 1) * sizeof *cid);
	memset(cw, 0xff, (S + 1) * sizeof *cw);
	shoal_backend_route rc = r;
	rc.logits = lg, rc.bias = c->bias ? bias : NULL, rc.ids = cid, rc.w = cw;
	vt_cpu->moe_route(vt_c, &rc);

	uint32_t bad = 0;
	*werr = 0;
	for (uint32_t row = 0; row < n_rows; row++) {
		float top = 0;
		for (uint32_t j = 0; j < k; j++)
			top = fmaxf(top, fabsf(cw[row * k + j]));
		for (uint32_t j = 0; j < k; j++) {
			size_t s = (size_t)row * k + j;
			bad += ids[s] != cid[s];
			double e = fabs((double)w[s] - cw[s]) / (top > 0 ? top : 1);
			*werr = e > *werr || e != e ? e : *werr;
		}
	}
	uint32_t poison = 0xffffffffu;
	*kept = !memcmp(ids + S, &poison, 4) && !memcmp(w + S, &poison, 4);
	free(cid);
	free(cw);
	free(ids);
	free(w);
	free(lg);
	free(bias);
	vt_end();
	return bad;
}

static void test_route_gatings(void)
{
	static const route_case cases[] = {
	    {"softmax (qwen3moe)", SHOAL_BACKEND_GATING_SOFTMAX, 128, 8, 0, 0, true, false, 1.0f},
	    {"softmax (mixtral)", SHOAL_BACKEND_GATING_SOFTMAX, 8, 2, 0, 0, true, false, 1.0f},
	    {"softmax, no norm", SHOAL_BACKEND_GATING_SOFTMAX, 61, 5, 0, 0, false, false, 1.0f},
	    {"softmax, k = 1", SHOAL_BACKEND_GATING_SOFTMAX, 33, 1, 0, 0, false, false, 1.0f},
	    {"softmax, k = all", SHOAL_BACKEND_GATING_SOFTMAX, 7, 7, 0, 0, true, false, 1.0f},
	    {"softmax groups (deepseek2)", SHOAL_BACKEND_GATING_SOFTMAX, 160, 6, 8, 3, false, false,
	     16.0f},
	    {"sigmoid + bias (deepseek3)", SHOAL_BACKEND_GATING_SIGMOID, 256, 8, 8, 4, true, true,
	     2.5f},
	    {"sigmoid + bias, no groups", SHOAL_BACKEND_GATING_SIGMOID, 64, 6, 0, 0, true, true,
	     1.0f},
	    {"sigmoid, plain", SHOAL_BACKEND_GATING_SIGMOID, 97, 4, 0, 0, false, false, 1.0f},
	    {"softmax of k (gpt-oss)", SHOAL_BACKEND_GATING_SOFTMAX_TOPK, 32, 4, 0, 0, false, false,
	     1.0f},
	    {"softmax of k, 128", SHOAL_BACKEND_GATING_SOFTMAX_TOPK, 128, 4, 0, 0, false, false,
	     1.0f},
	};
	static const uint32_t rows[] = {1, 5, 70};
	static const char *kinds[] = {"random", "ties", "NaNs"};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++)
			for (int kind = 0; kind < 3; kind++) {
				const route_case *c = &cases[i];
				double werr;
				bool kept;
				uint32_t bad = run_route(c, rows[j], kind, &werr, &kept);
				if (j == 2)
					printf("  %-27s %3u experts k %u, %2u rows, %-6s: ids %s, "
					       "weight err %.3g\n",
					       c->what, c->n_expert, c->k, rows[j], kinds[kind],
					       bad ? "DIFFER" : "same", werr);
				if (bad || !(werr <= 1e-4) || !kept)
					TEST_FAIL_(
					    "%s, %u rows of %s logits: %u ids differ, weight "
					    "err %.3g, %s",
					    c->what, rows[j], kinds[kind], bad, werr,
					    kept ? "outputs end where they should"
					         : "wrote past the outputs");
			}
}

int main(void)
{
	(void)vt_pad_kept; /* test_vulkan_util.h's, unused here */
	(void)vt_relerr;
	vt_start();
	static const test_case_ cases[] = {
	    TEST_CASE(test_route_gatings),
	};
	int rc = test_run_(cases, sizeof cases / sizeof cases[0]);
	vt_end();
	vt_vk->destroy(vt_b);
	vt_cpu->destroy(vt_c);
	return rc;
}
