/*
 * tests/unit/test_deepseek2.c: the deepseek2 architecture (MLA, leading dense
 * layers, shared + routed experts, grouped routing) in every mode, on
 * generated fixtures (tests/helpers/gen_fixture): q_lora on and off, groups
 * on and off, softmax and sigmoid gating, 1 and 2 dense layers, F32 and
 * Q8_0. For each: one whole-model engine, a 3-stage pipeline and the routed
 * experts on 3 peers give the same tokens and top-K logprobs bitwise; the
 * engine's KV cache per token is the latent + rope key of each layer, as
 * the manifest tells the scheduler; MTP (nextn) layers change nothing
 * but the manifest's mtp_bytes, the sum of the layer's tensors' bytes;
 * the older attn_kv_b file form runs as the split one.
 *
 * Part: tests of runtime/ (engine, dist) and models/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/manifest.h"
#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/dist/dist.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

static char dir[] = "/tmp/shoal-test-deepseek2-XXXXXX";

typedef struct variant {
	const char *name;
	const char *type;
	uint32_t q_lora, dense_lead, groups, groups_used;
	bool sigmoid;
	uint32_t yarn; /* YaRN factor over a context of 128 / yarn, or 0 */
} variant;

static const variant VARIANTS[] = {
    {"f32-qlora-groups-sigmoid-1dense", "F32", 64, 1, 2, 1, true},
    {"q8_0-plainq-softmax-2dense", "Q8_0", 0, 2, 0, 0, false},
    {"q8_0-qlora-groups4-sigmoid-1dense", "Q8_0", 64, 1, 4, 2, true},
    {"f32-plainq-groups-softmax-2dense", "F32", 0, 2, 2, 1, false},
    {"q8_0-qlora-sigmoid-nogroups-1dense", "Q8_0", 96, 1, 0, 0, true},
    {"f32-qlora-groups-sigmoid-yarn8", "F32", 64, 1, 2, 1, true, 8},
};
#define N_VARIANTS (sizeof VARIANTS / sizeof VARIANTS[0])

/* MLA shape of every fixture: 4 heads of 32 no-rope + 16 rope dims, a
 * latent of 64, values of 32 per head. */
#define KV_LORA  64
#define ROPE_DIM 16

/* Write the fixture of v (with nextn MTP layers, and gen_fixture options
 * `extra`) into dir; NULL on failure. */
static const char *fixture_x(const variant *v, uint32_t nextn, const char *extra, char *path,
                             size_t cap)
{
	const char *bdir = getenv("SHOAL_BUILDDIR");
	snprintf(path, cap, "%s/%s-%u%s.gguf", dir, v->name, nextn, *extra ? "-x" : "");
	char cmd[1536], groups[96] = "";
	if (v->groups)
		snprintf(groups, sizeof groups, "--groups %u --groups-used %u", v->groups,
		         v->groups_used);
	if (v->yarn)
		snprintf(groups + strlen(groups), sizeof groups - strlen(groups), " --yarn %u",
		         v->yarn);
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch deepseek2 --type %s --layers 4 --dim 128 "
	         "--ff 256 --heads 4 --vocab 300 --head-dim 48 --kv-lora %d --rope-dim %d "
	         "--v-head-dim 32 --q-lora %u --dense-lead %u --shared 1 %s %s --experts 8 "
	         "--experts-used 2 --ff-exp 64 --ctx 128 --seed 5 --nextn %u %s %s",
	         bdir ? bdir : ".", v->type, KV_LORA, ROPE_DIM, v->q_lora, v->dense_lead, groups,
	         v->sigmoid ? "--sigmoid" : "", nextn, extra, path);
	if (system(cmd)) {
		fprintf(stderr, "failed: %s\n", cmd);
		return NULL;
	}
	return path;
}

static const char *fixture(const variant *v, uint32_t nextn, char *path, size_t cap)
{
	return fixture_x(v, nextn, "", path, cap);
}

static const int32_t PROMPT[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* The cluster's run of the prompt against the whole-model engine's. */
static int cluster_matches(const shoal_model *m, const uint32_t *cuts, uint32_t n_st, uint32_t n_ex,
                           const shoal_sampler_params *sp, const char *what)
{
	return dc_cluster_matches(m, PROMPT, NP, 20, cuts, n_st, n_ex, sp, what);
}

/* The engine's KV accounting: (kv_lora + rope) F16 per owned layer and
 * token, what the manifest gives the scheduler; a stage counts its own. */
static int kv_is_latent(const shoal_model *m)
{
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = shoal_backend_cpu();
	cfg.n_ctx = 64;
	cfg.max_rows = 8;
	cfg.layer_begin = 1;
	cfg.layer_end = 3;
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_manifest mf;
	if (shoal_engine_new(m, &cfg, &e, why, sizeof why) || shoal_model_manifest(m, &mf)) {
		fprintf(stderr, "engine: %s\n", why);
		return 0;
	}
	uint64_t per_layer = (KV_LORA + ROPE_DIM) * 2, from_mf = 0; /* F16 */
	for (uint32_t l = 1; l < 3; l++)
		from_mf += mf.layers[l].kv_bytes_per_token;
	int ok = shoal_engine_kv_row_elems(e) == KV_LORA + ROPE_DIM &&
	         shoal_engine_kv_bytes_per_token(e) == 2 * per_layer && from_mf == 2 * per_layer;
	if (!ok)
		fprintf(stderr, "KV per token: engine %llu, manifest %llu, latent %llu\n",
		        (unsigned long long)shoal_engine_kv_bytes_per_token(e),
		        (unsigned long long)from_mf, (unsigned long long)(2 * per_layer));
	shoal_manifest_fini(&mf);
	shoal_engine_free(e);
	return ok;
}

static void test_modes(void)
{
	if (!mkdtemp(dir))
		TEST_SKIP("no temporary directory");
	int fails = 0;
	for (size_t i = 0; i < N_VARIANTS; i++) {
		const variant *v = &VARIANTS[i];
		char path[512], why[SHOAL_WHY_LEN];
		shoal_model *m = NULL;
		if (!fixture(v, 0, path, sizeof path) ||
		    shoal_model_open(path, &m, why, sizeof why)) {
			fprintf(stderr, "%s: %s\n", v->name, m ? "" : why);
			fails++;
			continue;
		}
		ASSERT_EQ(m->hp.arch, SHOAL_ARCH_DEEPSEEK2);
		ASSERT_EQ(m->hp.n_layer_dense_lead, v->dense_lead);
		ASSERT_EQ(m->hp.q_lora_rank, v->q_lora);
		ASSERT_EQ(m->hp.gating,
		          v->sigmoid ? SHOAL_MOE_GATING_SIGMOID : SHOAL_MOE_GATING_SOFTMAX);
		const uint32_t three[] = {1, 3};
		fails += dc_moe_modes(m, PROMPT, NP, 20, three, v->name);
		if (!kv_is_latent(m)) {
			fprintf(stderr, "%s: KV accounting\n", v->name);
			fails++;
		}
		printf("%s: single = 3 stages = remote experts\n", v->name);
		shoal_model_free(m);
		unlink(path);
	}
	ASSERT_EQ(fails, 0);
}

/* 12 greedy tokens of the prompt, with their logprobs: bitwise the same. */
static int greedy_runs_equal(const shoal_model *m0, const shoal_model *m1)
{
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out a, b;
	return !dc_reference(m0, PROMPT, NP, 12, &sp, &a) &&
	       !dc_reference(m1, PROMPT, NP, 12, &sp, &b) && dc_same_run(&a, &b);
}

/* A file with an MTP layer after the main ones (same seed, so the same
 * main tensors) runs the same: the nextn block is not run. */
static void test_nextn_skipped(void)
{
	const variant *v = &VARIANTS[0];
	char p0[512], p1[512], why[SHOAL_WHY_LEN];
	shoal_model *m0 = NULL, *m1 = NULL;
	ASSERT_TRUE(fixture(v, 0, p0, sizeof p0) != NULL);
	ASSERT_TRUE(fixture(v, 1, p1, sizeof p1) != NULL);
	ASSERT_EQ(shoal_model_open(p0, &m0, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_open(p1, &m1, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m1->hp.n_nextn, 1);
	ASSERT_EQ(m1->hp.n_layer, m0->hp.n_layer);
	ASSERT_TRUE(greedy_runs_equal(m0, m1));
	shoal_model_free(m0);
	shoal_model_free(m1);
	unlink(p0);
	unlink(p1);
}

/* The bytes of file tensors whose names start with blk.<il>. (the MTP
 * layer's block and its nextn.* tensors), and how many. */
static uint64_t block_bytes(const shoal_model *m, uint32_t il, size_t *n)
{
	char pre[32];
	snprintf(pre, sizeof pre, "blk.%u.", il);
	uint64_t b = 0;
	*n = 0;
	for (size_t i = 0; i < shoal_gguf_n_tensors(m->gguf); i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(m->gguf, i);
		if (!strncmp(t->name, pre, strlen(pre))) {
			b += t->nbytes;
			(*n)++;
		}
	}
	return b;
}

/* The manifest of a file with an MTP layer and of the same file without
 * (F32 and Q8_0): mtp_bytes is the sum of the layer's tensors, its KV a
 * layer's, the embedding shared (the fixture repeats only the head); the
 * rest of the manifest is the same as without. */
static void test_nextn_manifest(void)
{
	for (size_t k = 0; k < 2; k++) {
		const variant *v = &VARIANTS[k];
		char p0[512], p1[512], why[SHOAL_WHY_LEN];
		shoal_model *m0 = NULL, *m = NULL;
		ASSERT_TRUE(fixture(v, 0, p0, sizeof p0) != NULL);
		ASSERT_TRUE(fixture(v, 1, p1, sizeof p1) != NULL);
		ASSERT_EQ(shoal_model_open(p0, &m0, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_model_open(p1, &m, why, sizeof why), SHOAL_OK);
		shoal_manifest mf, mf0;
		ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
		ASSERT_EQ(shoal_model_manifest(m0, &mf0), SHOAL_OK);
		size_t n_file = 0;
		uint64_t file = block_bytes(m, m->hp.n_layer, &n_file);
		const shoal_gguf_tensor *xt[SHOAL_NEXTN_MAX_TENSORS];
		ASSERT_EQ(shoal_nextn_tensors(m, xt), n_file);
		ASSERT_EQ(shoal_nextn_tensors(m0, xt), 0);
		ASSERT_GT(file, 0);
		ASSERT_U64_EQ(mf.mtp_bytes, file);
		printf("  %s: the MTP layer's %zu tensors, %llu bytes\n", v->type, n_file,
		       (unsigned long long)mf.mtp_bytes);
		ASSERT_U64_EQ(mf.mtp_kv_bytes_per_token, mf.layers[1].kv_bytes_per_token);
		ASSERT_TRUE(mf.mtp_shares_embd);
		ASSERT_U64_EQ(mf0.mtp_bytes, 0);
		ASSERT_U64_EQ(mf0.mtp_kv_bytes_per_token, 0);
		ASSERT_FALSE(mf0.mtp_shares_embd);
		ASSERT_EQ(mf.n_layer, mf0.n_layer);
		ASSERT_U64_EQ(mf.embd_bytes, mf0.embd_bytes);
		ASSERT_U64_EQ(mf.head_bytes, mf0.head_bytes);
		for (uint32_t l = 0; l < mf.n_layer; l++) {
			ASSERT_U64_EQ(mf.layers[l].bytes, mf0.layers[l].bytes);
			ASSERT_U64_EQ(mf.layers[l].expert_bytes, mf0.layers[l].expert_bytes);
		}
		shoal_manifest_fini(&mf);
		shoal_manifest_fini(&mf0);
		shoal_model_free(m);
		shoal_model_free(m0);
		unlink(p0);
		unlink(p1);
	}
}

/* YaRN: the metadata's factor, original context and log multiplier; the
 * scores' mscale^2 changes the logits even at the first position. */
static void test_yarn(void)
{
	const variant *v = &VARIANTS[N_VARIANTS - 1], *plain = &VARIANTS[0];
	char p0[512], p1[512], why[SHOAL_WHY_LEN];
	shoal_model *m0 = NULL, *m1 = NULL;
	ASSERT_EQ(v->yarn, 8);
	ASSERT_TRUE(fixture(plain, 0, p0, sizeof p0) != NULL);
	ASSERT_TRUE(fixture(v, 0, p1, sizeof p1) != NULL);
	ASSERT_EQ(shoal_model_open(p0, &m0, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_open(p1, &m1, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(m0->hp.rope_yarn);
	ASSERT_TRUE(m1->hp.rope_yarn);
	ASSERT_EQ(m1->hp.n_ctx_orig, 16);
	ASSERT_NEAR(m1->hp.rope_freq_scale, 0.125, 1e-7);
	ASSERT_NEAR(m1->hp.yarn_mscale, 1.0 + 0.1 * log(8.0), 1e-6);
	ASSERT_NEAR(m0->hp.yarn_mscale, 1.0, 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out a, b;
	ASSERT_EQ(dc_reference(m0, PROMPT, NP, 4, &sp, &a), 0);
	ASSERT_EQ(dc_reference(m1, PROMPT, NP, 4, &sp, &b), 0);
	ASSERT_TRUE(a.lp[0] != b.lp[0] || a.top_lp[0][1] != b.top_lp[0][1]);
	shoal_model_free(m0);
	shoal_model_free(m1);
	unlink(p0);
	unlink(p1);
}

/* The reference fixture's layers: every tensor of the file is either a
 * layer's own (shoal_layer_own_tensors: what a stage holds and fetches), a
 * routed expert, or the embedding and head; the manifest counts them all. */
static void test_layer_tensors(void)
{
	char path[512], why[SHOAL_WHY_LEN];
	snprintf(path, sizeof path, "%s/models/tiny-deepseek2-q8_0.gguf", test_data_dir());
	shoal_model *m = NULL;
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	const shoal_gguf_tensor *own[SHOAL_LAYER_MAX_TENSORS];
	/* norm, q_a, q_a_norm, q_b, kv_a_mqa, kv_a_norm, k_b, v_b, output,
	 * ffn_norm, then the dense FFN or router, bias and shared expert */
	ASSERT_EQ(shoal_layer_own_tensors(&m->layers[0], own), 13);
	ASSERT_EQ(shoal_layer_own_tensors(&m->layers[1], own), 15);
	shoal_manifest mf;
	ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
	uint64_t sum = mf.embd_bytes + mf.head_bytes, file = 0;
	for (uint32_t l = 0; l < mf.n_layer; l++)
		sum += mf.layers[l].bytes +
		       (uint64_t)mf.layers[l].n_expert * mf.layers[l].expert_bytes;
	for (size_t i = 0; i < shoal_gguf_n_tensors(m->gguf); i++)
		file += shoal_gguf_tensor_at(m->gguf, i)->nbytes;
	ASSERT_U64_EQ(sum, file);
	ASSERT_EQ(mf.layers[0].n_expert, 0);
	ASSERT_EQ(mf.layers[3].n_expert, 8);
	/* per token: (n_head x 2 x (2 x 64 + 16)) FLOPs per cached token */
	ASSERT_U64_EQ(mf.layers[2].attn_flops_per_ctx, 8 * 2 * (2 * 64 + 16));
	shoal_manifest_fini(&mf);
	shoal_model_free(m);
}

/* The older file form (one attn_kv_b per layer, no *_mla keys) holding the
 * same weights: the engine splits it into the absorbed form, so F32 runs
 * equal the split file's bitwise; quantized, it runs the same in every
 * mode; the latent cache is the same size. */
static void test_kv_b_form(void)
{
	char p0[512], p1[512], why[SHOAL_WHY_LEN];
	shoal_model *m0 = NULL, *m1 = NULL;
	ASSERT_TRUE(fixture(&VARIANTS[0], 0, p0, sizeof p0) != NULL);
	ASSERT_TRUE(fixture_x(&VARIANTS[0], 0, "--kv-b", p1, sizeof p1) != NULL);
	ASSERT_EQ(shoal_model_open(p0, &m0, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_open(p1, &m1, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(m1->hp.mla_kv_b);
	ASSERT_TRUE(m1->layers[0].wkv_b != NULL && m1->layers[0].wk_b == NULL);
	ASSERT_EQ(m1->hp.head_dim, m0->hp.head_dim);
	ASSERT_EQ(m1->hp.v_head_dim, m0->hp.v_head_dim);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	ASSERT_TRUE(greedy_runs_equal(m0, m1));
	ASSERT_TRUE(kv_is_latent(m1));
	shoal_model_free(m0);
	shoal_model_free(m1);
	unlink(p0);
	unlink(p1);
	ASSERT_TRUE(fixture_x(&VARIANTS[2], 0, "--kv-b", p1, sizeof p1) != NULL);
	ASSERT_EQ(shoal_model_open(p1, &m1, why, sizeof why), SHOAL_OK);
	const uint32_t three[] = {1, 3};
	ASSERT_TRUE(cluster_matches(m1, three, 3, 0, &sp, "attn_kv_b Q8_0, 3 stages"));
	ASSERT_TRUE(cluster_matches(m1, NULL, 1, 2, &sp, "attn_kv_b Q8_0, experts on 3 peers"));
	shoal_model_free(m1);
	unlink(p1);
}

/* What the engine does not do is refused at open with the reason. */
static void test_refused(void)
{
	static const struct {
		const char *extra, *why;
	} bad[] = {
	    {"--gating-func 3", "expert gating function 3 is not supported"},
	    {"--gating-func 7", "expert gating function 7 is not supported"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char path[512], why[SHOAL_WHY_LEN] = "";
		shoal_model *m = NULL;
		ASSERT_TRUE(fixture_x(&VARIANTS[1], 0, bad[i].extra, path, sizeof path) != NULL);
		ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
		if (!strstr(why, bad[i].why))
			fprintf(stderr, "%s: %s\n", bad[i].extra, why);
		ASSERT_TRUE(strstr(why, bad[i].why) != NULL);
		unlink(path);
	}
	rmdir(dir);
}

/* ---- a backend without moe_route ----------------------------------------------------------- */

static bool no_route_supports(shoal_backend_op op, shoal_dtype t)
{
	return op != SHOAL_BACKEND_OP_MOE_ROUTE && shoal_backend_cpu()->supports(op, t);
}

/* The prompt's logits (NP rows of 300) in one batch on backend be. */
static int prompt_logits(const shoal_model *m, const shoal_backend_ops *be, float *out)
{
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = be;
	cfg.n_ctx = 64;
	cfg.max_rows = NP;
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	uint32_t slot, sess[NP], pos[NP];
	uint8_t want[NP];
	if (shoal_engine_new(m, &cfg, &e, why, sizeof why) || shoal_engine_session_open(e, &slot)) {
		fprintf(stderr, "engine: %s\n", why);
		shoal_engine_free(e);
		return -1;
	}
	for (uint32_t r = 0; r < NP; r++)
		sess[r] = slot, pos[r] = r, want[r] = 1;
	shoal_engine_batch b = {.n_rows = NP,
	                        .tokens = PROMPT,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = out};
	int rc = shoal_engine_run(e, &b, why, sizeof why) ? -1 : 0;
	if (rc)
		fprintf(stderr, "run: %s\n", why);
	shoal_engine_free(e);
	return rc;
}

/* A backend without moe_route (ABI 8) has the engine route on the host
 * with the same row (backend_host.c), p by expf where the CPU's op uses
 * its softmax kernel's exp (a few ulp apart): every variant's logits
 * within 1e-3 of the op's (F32 weights: rounding only, ~1e-6; Q8_0: a
 * rounding-level change may flip one 8-bit activation rounding), and the
 * same ids for the sigmoid variants, where both use expf: bitwise. */
static void test_route_fallback(void)
{
	shoal_backend_ops ops = *shoal_backend_cpu();
	ops.supports = no_route_supports;
	size_t n = (size_t)NP * 300;
	float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
	ASSERT_TRUE(a && b);
	for (size_t i = 0; i < N_VARIANTS; i++) {
		const variant *v = &VARIANTS[i];
		char path[512], why[SHOAL_WHY_LEN];
		shoal_model *m = NULL;
		ASSERT_TRUE(fixture(v, 0, path, sizeof path) != NULL);
		ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(m->hp.n_vocab, 300);
		ASSERT_EQ(prompt_logits(m, shoal_backend_cpu(), a), 0);
		ASSERT_EQ(prompt_logits(m, &ops, b), 0);
		double d = 0;
		for (size_t j = 0; j < n; j++)
			d = fmax(d, fabs((double)a[j] - b[j]));
		printf("%s: host routing vs moe_route max |diff| %.2g\n", v->name, d);
		ASSERT_TRUE(d < 1e-3);
		if (v->sigmoid)
			ASSERT_MEM_EQ(a, b, n * sizeof *a);
		shoal_model_free(m);
		unlink(path);
	}
	free(a);
	free(b);
}

TEST_MAIN(TEST_CASE(test_modes), TEST_CASE(test_nextn_skipped), TEST_CASE(test_nextn_manifest),
          TEST_CASE(test_yarn), TEST_CASE(test_layer_tensors), TEST_CASE(test_kv_b_form),
          TEST_CASE(test_route_fallback), TEST_CASE(test_refused))
