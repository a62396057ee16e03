/*
 * tests/unit/test_gptoss.c: the gpt-oss architecture on generated fixtures
 * (tests/helpers/gen_fixture --arch gpt-oss): its hyper-parameters and
 * tensors, the refusals of broken files and of backends without sinks or
 * the clamped SwiGLU; the engine's logits against a plain scalar model
 * written here in double (attention sinks, the sliding window of the even
 * layers, q/k/v/o biases, top-k then softmax routing with the router's
 * bias, expert biases, the clamped SwiGLU), with sinks on and off, window
 * on and off, the clamp reached or not; and one engine = a 3-stage
 * pipeline = experts on 3 peers, bitwise (F32, Q8_0 and MXFP4 experts).
 *
 * Part: tests of models/ and runtime/ (engine, dist).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

static char dir[] = "/tmp/shoal-test-gptoss-XXXXXX";

/* Shape of every fixture: 3 layers (0 and 2 slide), 4 query heads on 2 KV
 * heads of 16, 4 experts of 32 with 2 used. */
#define DIM    64
#define HEADS  4
#define KVH    2
#define HD     16
#define NEXP   4
#define NUSED  2
#define FFEXP  32
#define VOCAB  300
#define LAYERS 3

typedef struct variant {
	const char *name, *type;
	uint32_t window;    /* 0: no sliding_window key */
	bool sinks;         /* attn_sinks present */
	uint32_t exp_scale; /* expert gate/up weights times this */
} variant;

static const variant VARIANTS[] = {
    {"f32-sinks-w3", "F32", 3, true, 0},        {"f32-nosinks-now", "F32", 0, false, 0},
    {"f32-sinks-now-clamp", "F32", 0, true, 8}, {"f32-nosinks-w2-clamp", "F32", 2, false, 8},
    {"q8_0-sinks-w4", "Q8_0", 4, true, 0},      {"mxfp4-sinks-w3", "MXFP4", 3, true, 0},
};
#define N_VARIANTS (sizeof VARIANTS / sizeof VARIANTS[0])

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

static const char *fixture_x(const variant *v, const char *extra, char *path, size_t cap)
{
	const char *bdir = getenv("SHOAL_BUILDDIR");
	snprintf(path, cap, "%s/%s%s.gguf", dir, v->name, *extra ? "-x" : "");
	char cmd[1536], opt[96] = "";
	if (v->window)
		snprintf(opt, sizeof opt, "--window %u", v->window);
	if (v->exp_scale)
		snprintf(opt + strlen(opt), sizeof opt - strlen(opt), " --exp-scale %u",
		         v->exp_scale);
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch gpt-oss --type %s --layers %d --dim %d "
	         "--heads %d --kv-heads %d --head-dim %d --vocab %d --experts %d --experts-used "
	         "%d --ff-exp %d --ctx 64 --seed 11 %s %s %s %s",
	         bdir ? bdir : ".", v->type, LAYERS, DIM, HEADS, KVH, HD, VOCAB, NEXP, NUSED, FFEXP,
	         opt, v->sinks ? "" : "--no-sinks", extra, path);
	if (system(cmd)) {
		fprintf(stderr, "failed: %s\n", cmd);
		return NULL;
	}
	return path;
}

static shoal_model *open_variant(const variant *v, char *path, size_t cap)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = NULL;
	if (!fixture_x(v, "", path, cap) || shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", v->name, why);
		return NULL;
	}
	return m;
}

/* ---- hyper-parameters and tensors ---------------------------------------------- */

static void test_load(void)
{
	if (!mkdtemp(dir))
		TEST_SKIP("no temporary directory");
	for (size_t i = 0; i < 4; i++) {
		const variant *v = &VARIANTS[i];
		char path[512];
		shoal_model *m = open_variant(v, path, sizeof path);
		ASSERT_TRUE(m != NULL);
		const shoal_hparams *hp = &m->hp;
		ASSERT_EQ(hp->arch, SHOAL_ARCH_GPT_OSS);
		ASSERT_STR_EQ(shoal_arch_name(hp->arch), "gpt-oss");
		ASSERT_EQ(hp->n_swa, v->window);
		ASSERT_EQ(hp->gating, SHOAL_MOE_GATING_SOFTMAX_TOPK);
		ASSERT_FALSE(hp->expert_weights_norm);
		ASSERT_TRUE(hp->swiglu_oai);
		ASSERT_NEAR(hp->swiglu_alpha, 1.702, 1e-6);
		ASSERT_NEAR(hp->swiglu_limit, 7.0, 0);
		ASSERT_EQ(hp->rope_type, SHOAL_ROPE_NEOX);
		ASSERT_EQ(hp->n_ff_exp, FFEXP);
		for (uint32_t l = 0; l < LAYERS; l++) {
			const shoal_layer *L = &m->layers[l];
			/* even layers slide (when there is a window) */
			ASSERT_EQ(shoal_hparams_layer_swa(hp, l), v->window > 0 && l % 2 == 0);
			ASSERT_TRUE(L->bq && L->bk && L->bv && L->bo && L->ffn_gate_inp_b);
			ASSERT_TRUE(L->ffn_gate_exps_b && L->ffn_up_exps_b && L->ffn_down_exps_b);
			ASSERT_EQ(L->attn_sinks != NULL, v->sinks);
			ASSERT_TRUE(strstr(L->ffn_norm->name, "post_attention_norm") != NULL);
			const shoal_gguf_tensor *x[SHOAL_LAYER_MAX_EXPERT_TENSORS];
			ASSERT_EQ(shoal_layer_expert_tensors(L, x), 8);
		}
		shoal_model_free(m);
		unlink(path);
	}
}

/* A file without one of the tensors gpt-oss needs, or with a wrong shape,
 * is refused at open naming the tensor. */
static void test_bad_files(void)
{
	static const struct {
		const char *extra, *why;
	} bad[] = {
	    {"--drop blk.1.attn_output.bias", "missing tensor 'blk.1.attn_output.bias'"},
	    {"--drop blk.0.ffn_gate_inp.bias", "missing tensor 'blk.0.ffn_gate_inp.bias'"},
	    {"--drop blk.2.ffn_down_exps.bias", "missing tensor 'blk.2.ffn_down_exps.bias'"},
	    {"--drop blk.0.post_attention_norm.weight",
	     "missing tensor 'blk.0.post_attention_norm.weight'"},
	    {"--grow blk.1.attn_sinks.weight", "tensor 'blk.1.attn_sinks.weight': shape {5}"},
	    {"--grow blk.0.ffn_up_exps.bias", "tensor 'blk.0.ffn_up_exps.bias': shape {33, 4}"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char path[512], why[SHOAL_WHY_LEN] = "";
		shoal_model *m = NULL;
		ASSERT_TRUE(fixture_x(&VARIANTS[0], bad[i].extra, path, sizeof path) != NULL);
		ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_ERR_FORMAT);
		if (!strstr(why, bad[i].why))
			fprintf(stderr, "%s: %s\n", bad[i].extra, why);
		ASSERT_TRUE(strstr(why, bad[i].why) != NULL);
		unlink(path);
	}
}

TEST_MAIN(TEST_CASE(test_load), TEST_CASE(test_bad_files))
