/*
 * tests/unit/test_dist_spec.c: exact speculative decoding through the
 * pipeline (issue 38; dist.h "Speculation"), in one process over real
 * loopback xfer links (tests/helpers/dist_cluster.c).
 *
 * Drafters: prompt lookup (runtime/engine/draft_lookup.h) and two made
 * here: an oracle that knows the reference run's tokens and spoils one
 * draft in a step now and then (so steps keep some drafts and miss at
 * varied places), and one that proposes junk (every draft missed: the
 * session must stop drafting). With each, the tokens and their top-K
 * logprobs equal one whole-model engine's bitwise, greedy and seeded with
 * a repetition penalty: through 1 and 3 stages, the MoE fixture with
 * remote experts, a last stage run by a tensor group, two sessions (one
 * drafting, one not) batched together, and with the prefix cache on
 * (the next turn reuses only kept positions and is exact too). The
 * counters say drafts were kept and missed, and that the oracle saved
 * steps.
 *
 * Divisions: drafters, runs, tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/dist/dist.h"
#include "runtime/engine/draft_lookup.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

/* A text that repeats itself (ids of the austen vocabulary's range), so
 * that lookup finds its n-grams in the prompt. */
static const int32_t PROMPT[] = {1,     450,  338,  263,   8760, 29871, 6967, 9904, 29892, 393,
                                 263,   6114, 4223, 310,   263,  1781,  450,  338,  263,   8760,
                                 29871, 6967, 9904, 29892, 393,  263,   6114, 4223, 310,   263};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))
#define T  40u

/* ---- drafters ------------------------------------------------------------ */

typedef struct oracle {
	const int32_t *ref; /* the reference run's tokens */
	uint32_t n_ref, n_prompt, calls;
	bool junk; /* propose ids that never follow */
} oracle;

static size_t oracle_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	oracle *o = self;
	size_t g = n - o->n_prompt, c = 0; /* tokens generated so far */
	o->calls++;
	if (o->junk) {
		for (c = 0; c < k; c++)
			out[c] =
			    (int32_t)(3 + (o->calls + c) % 50); /* ids the model never picks here */
		return c;
	}
	for (; c < k && g + c < o->n_ref; c++)
		out[c] = o->ref[g + c];
	if (o->calls % 3 == 1 && c > 2) /* spoil one: the step keeps 2 */
		out[2] = out[2] == 5 ? 6 : 5;
	if (o->calls % 5 == 2 && c > 0) /* and now and then the first */
		out[0] = out[0] == 5 ? 6 : 5;
	return c;
}

static void oracle_feedback(void *self, size_t proposed, size_t accepted)
{
	(void)self;
	(void)proposed;
	(void)accepted;
}

static void oracle_free(void *self)
{
	(void)self; /* the test's */
}

static const shoal_drafter_ops ORACLE_OPS = {
    .name = "oracle", .propose = oracle_propose, .feedback = oracle_feedback, .free = oracle_free};

/* ---- runs ------------------------------------------------------------------ */

enum { D_NONE, D_ORACLE, D_LOOKUP, D_JUNK };

/* Run prompt[np] for n_gen tokens with drafter kind d through c's owner
 * and the reference; 1 when they are equal bitwise. */
static int spec_run(dc_cluster *c, const shoal_sampler_params *sp, int d, const int32_t *prompt,
                    uint32_t np, uint32_t n_gen)
{
	static dc_run_out want, ref, got;
	if (dc_reference(c->m, prompt, np, n_gen, sp, &want)) {
		fprintf(stderr, "the reference failed\n");
		return 0;
	}
	/* the oracle knows more than is generated: drafts past the end */
	if (dc_reference(c->m, prompt, np, n_gen + 8 < DC_MAX_TOK ? n_gen + 8 : DC_MAX_TOK, sp,
	                 &ref)) {
		fprintf(stderr, "the reference failed\n");
		return 0;
	}
	static oracle orc;
	orc = (oracle){.ref = ref.id, .n_ref = ref.n, .n_prompt = np, .junk = d == D_JUNK};
	shoal_dist_request rq = {.prompt = prompt,
	                         .n_prompt = np,
	                         .max_tokens = n_gen,
	                         .logprobs = DC_K_TOP,
	                         .sampler = *sp,
	                         .on_token = dc_collect_token,
	                         .ctx = &got,
	                         .draft_max = 6};
	if (d == D_ORACLE || d == D_JUNK)
		rq.drafter = (shoal_drafter){.ops = &ORACLE_OPS, .self = &orc};
	else if (d == D_LOOKUP && shoal_draft_lookup_new(&rq.drafter))
		return 0;
	memset(&got, 0, sizeof got);
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e = shoal_dist_owner_generate(c->own, &rq, c->owner.links, c->owner.n, 10000, why,
	                                        sizeof why);
	if (e)
		fprintf(stderr, "generate: %s: %s\n", shoal_strerror(e), why);
	int same = e == SHOAL_OK && dc_same_run(&want, &got);
	if (!same)
		for (uint32_t i = 0; i < want.n || i < got.n; i++)
			if (i >= want.n || i >= got.n || want.id[i] != got.id[i]) {
				fprintf(stderr, "token %u: want %d, got %d (%u vs %u tokens)\n", i,
				        i < want.n ? want.id[i] : -1, i < got.n ? got.id[i] : -1,
				        want.n, got.n);
				break;
			}
	return same;
}

static shoal_sampler_params greedy(void)
{
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	return sp;
}

static shoal_sampler_params seeded(void)
{
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.seed = 4321;
	sp.temp = 1.0f;
	sp.repeat_penalty = 1.15f;
	sp.presence_penalty = 0.3f;
	return sp;
}

/* Every drafter, greedy and seeded, on cluster c; the owner's counters
 * after. */
static int all_drafters(dc_cluster *c, shoal_dist_owner_metrics *om)
{
	int ok = 1;
	for (int d = D_ORACLE; d <= D_JUNK; d++) {
		shoal_sampler_params g = greedy(), s = seeded();
		int a = spec_run(c, &g, d, PROMPT, NP, T), b = spec_run(c, &s, d, PROMPT, NP, T);
		printf("drafter %d: greedy %s, seeded %s\n", d, a ? "exact" : "DIFFERS",
		       b ? "exact" : "DIFFERS");
		ok &= a && b;
	}
	shoal_dist_owner_metrics_get(c->own, om);
	printf("owner: %llu drafted, %llu kept, %llu steps with drafts, %llu pauses, %llu "
	       "tokens\n",
	       (unsigned long long)om->drafted, (unsigned long long)om->accepted,
	       (unsigned long long)om->spec_steps, (unsigned long long)om->spec_pauses,
	       (unsigned long long)om->tokens);
	return ok;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_dense_one_and_three_stages(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	for (uint32_t n_st = 1; n_st <= 3; n_st += 2) {
		dc_cluster c;
		const uint32_t cuts[] = {2, 4};
		ASSERT_EQ(
		    dc_cluster_up(&c, m, cuts, n_st, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false),
		    0);
		shoal_dist_owner_metrics om;
		int ok = all_drafters(&c, &om);
		dc_cluster_stop(&c);
		uint64_t t0 = dc_link_count(&c.owner, c.st[0].id, 1, SHOAL_XFER_KIND_TOKEN);
		dc_cluster_down(&c);
		printf("%u stage(s): %llu token frames to stage 0 for 6 x %u tokens\n", n_st,
		       (unsigned long long)t0, T);
		ASSERT_TRUE(ok);
		ASSERT_GT(om.accepted, 0);
		ASSERT_GT(om.drafted, om.accepted); /* misses too */
		ASSERT_GT(om.spec_pauses, 0);       /* the junk drafter was stopped */
		ASSERT_LT(t0, 6 * T);               /* kept drafts saved steps */
	}
	shoal_model_free(m);
}

static char moe_dir[] = "/tmp/shoal-test-spec-XXXXXX";

static void test_moe_experts(void)
{
	static char path[512];
	const char *bdir = getenv("SHOAL_BUILDDIR");
	if (!mkdtemp(moe_dir))
		TEST_SKIP("no temporary directory");
	snprintf(path, sizeof path, "%s/moe.gguf", moe_dir);
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch qwen3moe --type Q8_0 --layers 4 --dim 128 "
	         "--ff 256 --heads 4 --kv-heads 2 --vocab 300 --experts 8 --experts-used 2 "
	         "--ff-exp 64 --ctx 128 --seed 11 %s >/dev/null 2>&1",
	         bdir ? bdir : ".", path);
	if (system(cmd)) {
		rmdir(moe_dir);
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3moe fixture");
	}
	shoal_model *m = NULL;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	dc_cluster c;
	const uint32_t cuts[] = {2};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 2, 2, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298, 17, 250, 3, 99};
	int ok = 1;
	for (int d = D_ORACLE; d <= D_LOOKUP; d++) {
		shoal_sampler_params g = greedy(), s = seeded();
		ok &= spec_run(&c, &g, d, prompt, 16, 32) && spec_run(&c, &s, d, prompt, 16, 32);
	}
	shoal_dist_owner_metrics om;
	shoal_dist_owner_metrics_get(c.own, &om);
	dc_cluster_down(&c);
	shoal_model_free(m);
	unlink(path);
	rmdir(moe_dir);
	ASSERT_TRUE(ok);
	ASSERT_GT(om.accepted, 0);
}

/* The last stage a tensor group of 2 that splits the head. */
static void test_group_last_stage(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	static const uint64_t w2[2] = {3, 1};
	const uint32_t cut2[] = {2};
	dc_cluster c;
	ASSERT_EQ(dc_cluster_up_group(&c, m, cut2, 2, 1, w2, 2, SHOAL_XFER_MAX_FRAME_DEFAULT), 0);
	shoal_sampler_params g = greedy(), s = seeded();
	int ok = spec_run(&c, &g, D_ORACLE, PROMPT, NP, 24) &&
	         spec_run(&c, &s, D_ORACLE, PROMPT, NP, 24) &&
	         spec_run(&c, &g, D_LOOKUP, PROMPT, NP, 24);
	shoal_dist_owner_metrics om;
	shoal_dist_owner_metrics_get(c.own, &om);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_GT(om.accepted, 0);
}

/* Two sessions at once on 3 stages, one drafting (oracle), one not
 * (seeded): both exact, and their rows ran together. */
static void test_two_sessions_batched(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	shoal_sampler_params sp[2] = {greedy(), seeded()};
	static dc_run_out want[2], ref, got[2];
	int ok = 1;
	for (int q = 0; q < 2; q++)
		ok &= dc_reference(m, PROMPT, NP, T, &sp[q], &want[q]) == 0;
	ok &= dc_reference(m, PROMPT, NP, DC_MAX_TOK, &sp[0], &ref) == 0;
	static oracle orc;
	orc = (oracle){.ref = ref.id, .n_ref = ref.n, .n_prompt = NP};
	uint64_t sid[2];
	shoal_err res[2] = {SHOAL_ERR_STATE, SHOAL_ERR_STATE};
	bool done[2] = {false, false};
	char why[SHOAL_WHY_LEN] = "";
	for (int q = 0; q < 2; q++) {
		memset(&got[q], 0, sizeof got[q]);
		shoal_dist_request rq = {.prompt = PROMPT,
		                         .n_prompt = NP,
		                         .max_tokens = T,
		                         .logprobs = DC_K_TOP,
		                         .sampler = sp[q],
		                         .on_token = dc_collect_token,
		                         .ctx = &got[q]};
		if (!q)
			rq.drafter = (shoal_drafter){.ops = &ORACLE_OPS, .self = &orc};
		ok &= shoal_dist_owner_start(c.own, &rq, &sid[q], why, sizeof why) == SHOAL_OK;
	}
	for (int spin = 0; ok && spin < 1000 && !(done[0] && done[1]); spin++) {
		ok &= shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 20, why, sizeof why) ==
		      SHOAL_OK;
		for (int q = 0; q < 2; q++)
			if (!done[q])
				done[q] =
				    shoal_dist_owner_done(c.own, sid[q], &res[q], why, sizeof why);
	}
	dc_cluster_stop(&c);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[2].st, &sm);
	shoal_dist_owner_metrics om;
	shoal_dist_owner_metrics_get(c.own, &om);
	printf("two sessions: last stage %llu runs, %llu with both, %llu kept drafts\n",
	       (unsigned long long)sm.runs, (unsigned long long)sm.batched_runs,
	       (unsigned long long)om.accepted);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_EQ(res[0], SHOAL_OK);
	ASSERT_EQ(res[1], SHOAL_OK);
	ASSERT_TRUE(dc_same_run(&want[0], &got[0]));
	ASSERT_TRUE(dc_same_run(&want[1], &got[1]));
	ASSERT_GT(sm.batched_runs, 0);
	ASSERT_GT(om.accepted, 0);
}

/* The prefix cache on: a drafting turn, then the same prompt again (the
 * stages reuse its kept blocks; only kept rows were kept) and a turn
 * that extends the first one's reply: all exact. */
static void test_prefix_cache(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {2, 4};
	dc_prefix = true;
	int up = dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false);
	dc_prefix = false;
	ASSERT_EQ(up, 0);
	shoal_sampler_params g = greedy(), s = seeded();
	int ok = spec_run(&c, &g, D_ORACLE, PROMPT, NP, T);
	static dc_run_out first;
	ok &= dc_reference(m, PROMPT, NP, T, &g, &first) == 0;
	/* the reference takes prompts of 64 ids at most: 30 + 23 + 4 */
	enum { R = 23, N2 = NP + R + 4 };
	int32_t hist[N2];
	memcpy(hist, PROMPT, sizeof PROMPT);
	memcpy(hist + NP, first.id, R * sizeof *hist);
	memcpy(hist + NP + R, PROMPT + 3, 4 * sizeof *hist);
	ok &= spec_run(&c, &s, D_ORACLE, hist, N2, 16);
	ok &= spec_run(&c, &g, D_LOOKUP, hist, N2, 16);
	ok &= spec_run(&c, &g, D_NONE, hist, N2, 16);
	dc_cluster_stop(&c);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	printf("prefix: stage 1 %llu hits, %llu positions reused\n",
	       (unsigned long long)sm.prefix_hits, (unsigned long long)sm.prefix_hit_tokens);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_U64_EQ(sm.prefix_hits, 3);
	ASSERT_U64_EQ(sm.prefix_hit_tokens, 3 * 48); /* 3 whole blocks of [0, 56) */
}

/* Lookup itself: the longest suffix wins, the latest occurrence, k caps. */
static void test_lookup_proposals(void)
{
	const int32_t h[] = {1, 2, 3, 9, 8, 2, 3, 7, 6, 5, 1, 2, 3};
	int32_t out[8];
	/* "1 2 3" occurs at 0, followed by 9 8 2 3 7 ... */
	ASSERT_EQ(shoal_draft_lookup_propose(h, 13, out, 3), 3);
	ASSERT_EQ(out[0], 9);
	ASSERT_EQ(out[1], 8);
	ASSERT_EQ(out[2], 2);
	/* "7 6 5 1" no 3-gram "6 5 1" earlier; nor "5 1"; "1" at 0: 2 3 9 */
	ASSERT_EQ(shoal_draft_lookup_propose(h, 11, out, 2), 2);
	ASSERT_EQ(out[0], 2);
	ASSERT_EQ(out[1], 3);
	/* "2 3" latest earlier occurrence at 5 (not 1): 7 6 */
	const int32_t h2[] = {2, 3, 4, 4, 4, 2, 3, 7, 6, 2, 3};
	ASSERT_EQ(shoal_draft_lookup_propose(h2, 11, out, 2), 2);
	ASSERT_EQ(out[0], 7);
	ASSERT_EQ(out[1], 6);
	const int32_t h3[] = {10, 11, 12};
	ASSERT_EQ(shoal_draft_lookup_propose(h3, 3, out, 4), 0);
	ASSERT_EQ(shoal_draft_lookup_propose(h, 13, out, 0), 0);
}

TEST_MAIN(TEST_CASE(test_lookup_proposals), TEST_CASE(test_dense_one_and_three_stages),
          TEST_CASE(test_moe_experts), TEST_CASE(test_group_last_stage),
          TEST_CASE(test_two_sessions_batched), TEST_CASE(test_prefix_cache))
