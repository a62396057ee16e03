/*
 * tests/unit/test_glm4moe.c: the glm4moe architecture (GLM-4.5/4.6) on
 * fixtures of the project's generator (tests/helpers/gen_fixture --arch
 * glm4moe), its options on and off: q/k norms, partial rotary, leading
 * dense layers, a shared expert, sigmoid routing with its selection bias,
 * expert groups. Its hyper-parameters and tensors as read; broken files
 * refused naming the tensor; the partial rotary applied (the logits move
 * with the rotated width); and one engine, a 3-stage pipeline, experts on
 * 3 peers and 2 stages with 2 expert peers give the same tokens and
 * logprobs, greedy and seeded.
 *
 * Part: tests of models/ and runtime/ (engine, dist).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/engine/sampler.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

static char dir[] = "/tmp/shoal-test-glm4moe-XXXXXX";

#define LAYERS 4
#define HD     16

typedef struct variant {
	const char *name, *opts;
	bool qk_norm, sigmoid, groups;
	uint32_t dense_lead, shared, n_rot;
} variant;

static const variant VARIANTS[] = {
    /* GLM-4.5/4.6's shape: q/k norms, half the head rotated, a leading
     * dense layer, one shared expert, sigmoid routing, groups */
    {"full", "--dense-lead 1 --shared 1 --groups 2 --groups-used 1 --sigmoid", true, true, true, 1,
     1, HD / 2},
    /* everything off: no norms, the whole head rotated, no dense layer,
     * no shared expert, softmax routing */
    {"plain", "--no-qk-norm --rope-dim 16", false, false, false, 0, 0, HD},
};

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

static const char *fixture(const char *name, const char *opts, char *path, size_t cap)
{
	const char *bdir = getenv("SHOAL_BUILDDIR");
	snprintf(path, cap, "%s/%s.gguf", dir, name);
	char cmd[1536];
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch glm4moe --type Q8_0 --layers %d --dim 64 "
	         "--ff 96 --heads 4 --kv-heads 2 --head-dim %d --vocab 300 --experts 4 "
	         "--experts-used 2 --ff-exp 32 --ctx 64 --seed 5 %s %s",
	         bdir ? bdir : ".", LAYERS, HD, opts, path);
	if (system(cmd)) {
		fprintf(stderr, "failed: %s\n", cmd);
		return NULL;
	}
	return path;
}

static shoal_model *open_fixture(const char *name, const char *opts, char *path, size_t cap)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = NULL;
	if (!fixture(name, opts, path, cap) || shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", name, why);
		return NULL;
	}
	return m;
}

static void test_load(void)
{
	if (!mkdtemp(dir))
		TEST_SKIP("no temporary directory");
	for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) {
		const variant *v = &VARIANTS[i];
		char path[512];
		shoal_model *m = open_fixture(v->name, v->opts, path, sizeof path);
		ASSERT_TRUE(m != NULL);
		if (!m)
			continue;
		const shoal_hparams *hp = &m->hp;
		ASSERT_EQ(hp->arch, SHOAL_ARCH_GLM4MOE);
		ASSERT_STR_EQ(shoal_arch_name(hp->arch), "glm4moe");
		ASSERT_EQ(hp->rope_type, SHOAL_ROPE_NEOX);
		ASSERT_EQ(hp->n_rot, v->n_rot);
		ASSERT_EQ(hp->n_layer, LAYERS);
		ASSERT_EQ(hp->n_layer_dense_lead, v->dense_lead);
		ASSERT_EQ(hp->n_expert_shared, v->shared);
		ASSERT_EQ(hp->gating,
		          v->sigmoid ? SHOAL_MOE_GATING_SIGMOID : SHOAL_MOE_GATING_SOFTMAX);
		ASSERT_EQ(hp->n_expert_group, v->groups ? 2u : 0u);
		for (uint32_t l = 0; l < LAYERS; l++) {
			const shoal_layer *L = &m->layers[l];
			ASSERT_TRUE(L->bq && L->bk && L->bv && !L->bo);
			ASSERT_EQ(L->q_norm != NULL, v->qk_norm);
			ASSERT_EQ(L->k_norm != NULL, v->qk_norm);
			ASSERT_TRUE(strstr(L->ffn_norm->name, "post_attention_norm") != NULL);
			bool dense = l < v->dense_lead;
			ASSERT_EQ(L->ffn_gate != NULL, dense);
			ASSERT_EQ(L->ffn_gate_exps != NULL, !dense);
			ASSERT_EQ(L->exp_probs_b != NULL, !dense && v->sigmoid);
			ASSERT_EQ(L->ffn_gate_shexp != NULL, !dense && v->shared > 0);
		}
		shoal_model_free(m);
		unlink(path);
	}
}

/* A file without a tensor glm4moe needs, or with one of the q/k norms, is
 * refused at open, naming it. */
static void test_bad_files(void)
{
	static const struct {
		const char *extra, *why;
	} bad[] = {
	    {"--drop blk.1.attn_q.bias", "missing tensor 'blk.1.attn_q.bias'"},
	    {"--drop blk.2.post_attention_norm.weight",
	     "missing tensor 'blk.2.post_attention_norm.weight'"},
	    {"--drop blk.1.attn_k_norm.weight", "layer 1 has one of attn_q_norm and attn_k_norm"},
	    {"--drop blk.0.ffn_up.weight", "missing tensor 'blk.0.ffn_up.weight'"},
	    {"--grow blk.3.exp_probs_b.bias", "tensor 'blk.3.exp_probs_b.bias': shape {5}"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char opts[256], path[512], why[SHOAL_WHY_LEN] = "";
		snprintf(opts, sizeof opts, "%s %s", VARIANTS[0].opts, bad[i].extra);
		shoal_model *m = NULL;
		ASSERT_TRUE(fixture("bad", opts, path, sizeof path) != NULL);
		ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_ERR_FORMAT);
		if (!strstr(why, bad[i].why))
			fprintf(stderr, "%s: %s\n", bad[i].extra, why);
		ASSERT_TRUE(strstr(why, bad[i].why) != NULL);
		unlink(path);
	}
}

/* The same weights with half and with all of each head rotated give other
 * logits: the rotated width is applied, not ignored. */
static void test_partial_rotary(void)
{
	char pa[512], pb[512];
	shoal_model *a = open_fixture("half", VARIANTS[0].opts, pa, sizeof pa);
	char full[256];
	snprintf(full, sizeof full, "%s --rope-dim %d", VARIANTS[0].opts, HD);
	shoal_model *b = open_fixture("whole", full, pb, sizeof pb);
	ASSERT_TRUE(a && b);
	if (a && b) {
		ASSERT_EQ(a->hp.n_rot, HD / 2);
		ASSERT_EQ(b->hp.n_rot, HD);
		shoal_sampler_params greedy = shoal_sampler_defaults();
		greedy.temp = 0.0f;
		dc_run_out ra, rb;
		ASSERT_EQ(dc_reference(a, PROMPT, NP, 4, &greedy, &ra), 0);
		ASSERT_EQ(dc_reference(b, PROMPT, NP, 4, &greedy, &rb), 0);
		ASSERT_FALSE(dc_same_run(&ra, &rb));
	}
	shoal_model_free(a);
	shoal_model_free(b);
	unlink(pa);
	unlink(pb);
}

static void test_modes(void)
{
	int fails = 0;
	for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) {
		const variant *v = &VARIANTS[i];
		char path[512];
		shoal_model *m = open_fixture(v->name, v->opts, path, sizeof path);
		ASSERT_TRUE(m != NULL);
		if (!m)
			continue;
		const uint32_t three[] = {1, 2};
		fails += dc_moe_modes(m, PROMPT, NP, 16, three, v->name);
		printf("%s: single = 3 stages = remote experts\n", v->name);
		shoal_model_free(m);
		unlink(path);
	}
	ASSERT_EQ(fails, 0);
	rmdir(dir);
}

TEST_MAIN(TEST_CASE(test_load), TEST_CASE(test_bad_files), TEST_CASE(test_partial_rotary),
          TEST_CASE(test_modes))
