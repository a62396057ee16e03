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
 * steps. DeepSeek's MTP layer (dist.h "Speculation", dist_mtp.c) on a
 * deepseek2 fixture with a nextn layer, through 1 and 3 stages: exact
 * tokens, and every guess the last stage sent equals that of a fresh MTP
 * layer given the whole history at once (so its cache held the prompt and
 * the kept rows, never a rejected one); an MTP session batched with a
 * plain one, both exact.
 *
 * Divisions: drafters, runs, tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/dist/dist.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/draft_lookup.h"
#include "runtime/engine/mtp.h"
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

enum { D_NONE, D_ORACLE, D_LOOKUP, D_JUNK, D_MTP };

/* The MTP guesses an owner heard (shoal_mtp_carry_fn): each with the
 * tokens generated when it came (the history is prompt + those). */
#define MTP_MAX 128u
typedef struct mtp_heard {
	const dc_run_out *got;
	uint32_t n;
	uint32_t at[MTP_MAX]; /* tokens generated */
	int32_t after[MTP_MAX], guess[MTP_MAX];
} mtp_heard;
static mtp_heard heard;

static void mtp_hear(void *ctx, int32_t after, int32_t guess)
{
	mtp_heard *h = ctx;
	if (h->n < MTP_MAX) {
		h->at[h->n] = h->got->n;
		h->after[h->n] = after;
		h->guess[h->n++] = guess;
	}
}

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
	heard = (mtp_heard){.got = &got};
	if (d == D_MTP && shoal_mtp_carry_new(&rq.drafter, mtp_hear, &heard))
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

/* Two sessions at once on c, the first drafting with kind d (the
 * oracle's or MTP guesses), the second not (seeded): 1 when both are
 * exact; the last stage's metrics and the owner's after. */
static int two_sessions(dc_cluster *c, int d, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                        shoal_dist_stage_metrics *sm, shoal_dist_owner_metrics *om)
{
	const shoal_model *m = c->m;
	shoal_sampler_params sp[2] = {greedy(), seeded()};
	static dc_run_out want[2], ref, got[2];
	int ok = 1;
	for (int q = 0; q < 2; q++)
		ok &= dc_reference(m, prompt, np, n_gen, &sp[q], &want[q]) == 0;
	ok &= dc_reference(m, prompt, np, DC_MAX_TOK, &sp[0], &ref) == 0;
	static oracle orc;
	orc = (oracle){.ref = ref.id, .n_ref = ref.n, .n_prompt = np};
	uint64_t sid[2];
	shoal_err res[2] = {SHOAL_ERR_STATE, SHOAL_ERR_STATE};
	bool done[2] = {false, false};
	char why[SHOAL_WHY_LEN] = "";
	for (int q = 0; q < 2; q++) {
		memset(&got[q], 0, sizeof got[q]);
		shoal_dist_request rq = {.prompt = prompt,
		                         .n_prompt = np,
		                         .max_tokens = n_gen,
		                         .logprobs = DC_K_TOP,
		                         .sampler = sp[q],
		                         .on_token = dc_collect_token,
		                         .ctx = &got[q]};
		if (!q && d == D_ORACLE)
			rq.drafter = (shoal_drafter){.ops = &ORACLE_OPS, .self = &orc};
		if (!q && d == D_MTP && shoal_mtp_carry_new(&rq.drafter, NULL, NULL))
			ok = 0;
		ok &= shoal_dist_owner_start(c->own, &rq, &sid[q], why, sizeof why) == SHOAL_OK;
	}
	for (int spin = 0; ok && spin < 1000 && !(done[0] && done[1]); spin++) {
		ok &= shoal_dist_owner_poll(c->own, c->owner.links, c->owner.n, 20, why,
		                            sizeof why) == SHOAL_OK;
		for (int q = 0; q < 2; q++)
			if (!done[q])
				done[q] =
				    shoal_dist_owner_done(c->own, sid[q], &res[q], why, sizeof why);
	}
	dc_cluster_stop(c);
	shoal_dist_stage_metrics_get(c->st[c->n_st - 1].st, sm);
	shoal_dist_owner_metrics_get(c->own, om);
	printf("two sessions (drafter %d): last stage %llu runs, %llu with both, %llu drafted, "
	       "%llu kept\n",
	       d, (unsigned long long)sm->runs, (unsigned long long)sm->batched_runs,
	       (unsigned long long)om->drafted, (unsigned long long)om->accepted);
	return ok && res[0] == SHOAL_OK && res[1] == SHOAL_OK && dc_same_run(&want[0], &got[0]) &&
	       dc_same_run(&want[1], &got[1]);
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
	shoal_dist_stage_metrics sm;
	shoal_dist_owner_metrics om;
	int ok = two_sessions(&c, D_ORACLE, PROMPT, NP, T, &sm, &om);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
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

/* The guess of a fresh MTP layer over ids[0, n): the main model's hidden
 * states of rows [0, n - 1) from one engine, pushed with the ids after
 * them at once; -1 on failure. */
static int32_t mtp_fresh(const shoal_model *m, const int32_t *ids, uint32_t n)
{
	enum { ROWS = 64 };
	char why[SHOAL_WHY_LEN] = "";
	const uint32_t E = m->hp.n_embd;
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 128;
	c.max_rows = ROWS;
	shoal_engine *e = NULL;
	shoal_mtp *t = NULL;
	shoal_drafter d = {0};
	uint32_t slot = 0, pos[ROWS], sess[ROWS];
	float *h = malloc((size_t)n * E * sizeof *h);
	int32_t g = -1;
	if (!h || n < 2 || n - 1 > ROWS || shoal_engine_new(m, &c, &e, why, sizeof why) ||
	    shoal_engine_session_open(e, &slot))
		goto out;
	for (uint32_t r = 0; r < n - 1; r++) {
		pos[r] = r;
		sess[r] = slot;
	}
	shoal_engine_batch b = {
	    .n_rows = n - 1, .tokens = ids, .session = sess, .pos = pos, .hidden_out = h};
	if (shoal_engine_run(e, &b, why, sizeof why) || shoal_mtp_new(m, &c, &t, why, sizeof why) ||
	    shoal_mtp_drafter_new(t, &d, why, sizeof why) ||
	    shoal_mtp_drafter_push(&d, 0, n - 1, h, ids + 1, why, sizeof why))
		goto out;
	g = shoal_mtp_drafter_guess(&d);
out:
	if (g < 0)
		fprintf(stderr, "fresh MTP guess: %s\n", why);
	if (d.ops)
		d.ops->free(d.self);
	shoal_mtp_free(t);
	shoal_engine_free(e);
	free(h);
	return g;
}

/* The guesses of the latest D_MTP run (its tokens got, prompt[np]) against
 * fresh ones: how many, all checked; -1 at the first that differs or does
 * not follow the token before it. A guess of -1 (none: the owner paused,
 * the layer deferred its rows) is counted in *none, and a guess right
 * after one in *resumed (the deferred rows ran before it). */
static int mtp_check(const shoal_model *m, const int32_t *prompt, uint32_t np,
                     const dc_run_out *got, int *none, int *resumed)
{
	int32_t ids[128];
	int n_ok = 0;
	*none = *resumed = 0;
	for (uint32_t i = 0; i < heard.n; i++) {
		uint32_t n = np + heard.at[i];
		if (heard.guess[i] == -1) {
			++*none;
			continue;
		}
		*resumed += i > 0 && heard.guess[i - 1] == -1;
		if (n > 128 || heard.at[i] == 0 || heard.after[i] != got->id[heard.at[i] - 1]) {
			fprintf(stderr, "MTP guess %u: %d after %d at %u tokens\n", i,
			        heard.guess[i], heard.after[i], heard.at[i]);
			return -1;
		}
		memcpy(ids, prompt, np * sizeof *ids);
		memcpy(ids + np, got->id, heard.at[i] * sizeof *ids);
		int32_t want = mtp_fresh(m, ids, n);
		if (want != heard.guess[i]) {
			fprintf(stderr, "MTP guess after %u tokens: sent %d, fresh %d\n",
			        heard.at[i], heard.guess[i], want);
			return -1;
		}
		n_ok++;
	}
	return n_ok;
}

#define FX_DS2_MTP                                                                                 \
	"--arch deepseek2 --type F32 --layers 3 --dim 128 --ff 256 --heads 4 --vocab 300 "         \
	"--head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --dense-lead 1 --shared 1 "      \
	"--experts 8 --experts-used 2 --ff-exp 64 --ctx 128 --seed 13 --nextn 1 --q-lora 64"

static char mtp_dir[] = "/tmp/shoal-test-spec-mtp-XXXXXX";

/* Zero the rows past the first 4 of head tensor t of the F32 file at path:
 * only ids 0..3 get logits above 0, so that the model and its MTP layer
 * pick among 4 ids and guesses are often right. */
static int mtp_narrow(const char *path, const shoal_gguf_tensor *t)
{
	uint64_t row = t->ne[0] * sizeof(float), off = t->file_offset + 4 * row;
	size_t len = (size_t)(t->nbytes - 4 * row);
	char *z = calloc(1, len);
	FILE *f = fopen(path, "r+b");
	int rc = z && f && !fseek(f, (long)off, SEEK_SET) && fwrite(z, 1, len, f) == len ? 0 : -1;
	if (f && fclose(f))
		rc = -1;
	free(z);
	return rc;
}

/* Runs with MTP guesses on 1 and 3 stages and on 2 whose last is a tensor
 * group of 2 splitting the head (its root runs the layer; MLA attention
 * whole on each member), greedy and seeded: exact, and every guess a
 * fresh layer's; the count checked and the drafts kept added to
 * *checked, *kept. */
static int mtp_runs(const shoal_model *m, const char *what, int *checked, uint64_t *kept)
{
	const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298, 17, 250, 3, 99};
	const uint32_t np = sizeof prompt / sizeof prompt[0];
	int ok = 1;
	for (uint32_t cfg = 0; cfg < 3; cfg++) {
		dc_cluster c;
		const uint32_t cuts[] = {1, 2}, cut2[] = {2},
		               n_st = cfg == 0   ? 1
		                      : cfg == 1 ? 3
		                                 : 2;
		static const uint64_t w2[2] = {3, 1};
		if (cfg < 2 &&
		    dc_cluster_up(&c, m, cuts, n_st, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false))
			return 0;
		if (cfg == 2 &&
		    dc_cluster_up_group(&c, m, cut2, 2, 1, w2, 2, SHOAL_XFER_MAX_FRAME_DEFAULT))
			return 0;
		const char *how = cfg == 2 ? " (the last a group of 2)" : "";
		shoal_sampler_params sp[2] = {greedy(), seeded()};
		for (int q = 0; q < 2; q++) {
			int same = spec_run(&c, &sp[q], D_MTP, prompt, np, 40);
			static dc_run_out want;
			ok &= same && dc_reference(m, prompt, np, 40, &sp[q], &want) == 0;
			int none, resumed;
			int k = mtp_check(m, prompt, np, &want, &none, &resumed);
			printf("mtp, %s, %u stage(s)%s, %s: tokens %s, %d guesses as a fresh "
			       "layer's, %d none (paused), %d after a pause\n",
			       what, n_st, how, q ? "seeded" : "greedy", same ? "exact" : "DIFFER",
			       k, none, resumed);
			/* a guess or none after every step but the last (a kept
			 * draft makes a step of 2 tokens); the owner's first
			 * steps go without drafts (draft_ctl.c), so there is a
			 * pause, and a guess after it */
			ok &= k > 0 && k + none >= (int)want.n - 1 - 20 && none > 0 && resumed > 0;
			*checked += k > 0 ? k : 0;
		}
		shoal_dist_owner_metrics om;
		shoal_dist_owner_metrics_get(c.own, &om);
		printf("mtp, %s, %u stage(s)%s: %llu drafted, %llu kept\n", what, n_st, how,
		       (unsigned long long)om.drafted, (unsigned long long)om.accepted);
		ok &= om.drafted > 0;
		*kept += om.accepted;
		dc_cluster_down(&c);
	}
	return ok;
}

static void test_mtp_guesses(void)
{
	static char path[512];
	const char *bdir = getenv("SHOAL_BUILDDIR");
	if (!mkdtemp(mtp_dir))
		TEST_SKIP("no temporary directory");
	snprintf(path, sizeof path, "%s/ds2-mtp.gguf", mtp_dir);
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s/tests/helpers/gen_fixture %s %s >/dev/null 2>&1",
	         bdir ? bdir : ".", FX_DS2_MTP, path);
	if (system(cmd)) {
		rmdir(mtp_dir);
		TEST_SKIP("tests/helpers/gen_fixture could not make a deepseek2 fixture");
	}
	shoal_model *m = NULL;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(m->nextn != NULL);
	int checked = 0;
	uint64_t kept = 0, kept_few = 0;
	int ok = mtp_runs(m, "random", &checked, &kept);
	/* an MTP session and a plain one at once on 3 stages: both exact */
	{
		dc_cluster c;
		const uint32_t cuts[] = {1, 2};
		const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298, 17, 250};
		ASSERT_EQ(dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false),
		          0);
		shoal_dist_stage_metrics sm;
		shoal_dist_owner_metrics om;
		ok &= two_sessions(&c, D_MTP, prompt, 14, 40, &sm, &om);
		dc_cluster_down(&c);
		ok &= sm.batched_runs > 0 && om.drafted > 0;
	}
	/* the heads narrowed to 4 ids: drafts are kept too (a step's second
	 * row goes into the layer) */
	ASSERT_TRUE(!m->hp.tied_head && m->nextn->head != m->output);
	const shoal_gguf_tensor *out = m->output, *mh = m->nextn->head;
	ASSERT_EQ(mtp_narrow(path, out), 0);
	ASSERT_EQ(mtp_narrow(path, mh), 0);
	shoal_model_free(m);
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	ok &= mtp_runs(m, "4 ids", &checked, &kept_few);
	shoal_model_free(m);
	unlink(path);
	rmdir(mtp_dir);
	ASSERT_TRUE(ok);
	/* 12 runs of 40 tokens: guesses while the owner drafts (it pauses
	 * after drafts that missed, and the layer then sends none) */
	ASSERT_GT(checked, 12 * 8);
	ASSERT_GT(kept_few, 0);
}

/* Lookup itself: the longest suffix wins, the latest occurrence, k caps,
 * a recent occurrence continues as a loop. */
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
	/* "1 2" latest at 1, 2 ids back: the loop "1 2" continues past the
	 * end, k ids of it (before, only the 2 ids the history held) */
	const int32_t h4[] = {5, 1, 2, 1, 2};
	ASSERT_EQ(shoal_draft_lookup_propose(h4, 5, out, 5), 5);
	const int32_t want4[] = {1, 2, 1, 2, 1};
	ASSERT_EQ(memcmp(out, want4, sizeof want4), 0);
	/* a period of 3 ("7 8 9" at 3..5 follows "9" at 2): 7 8 9 7 8 9 7 */
	const int32_t h5[] = {4, 6, 9, 7, 8, 9};
	ASSERT_EQ(shoal_draft_lookup_propose(h5, 6, out, 7), 7);
	const int32_t want5[] = {7, 8, 9, 7, 8, 9, 7};
	ASSERT_EQ(memcmp(out, want5, sizeof want5), 0);
	const int32_t h3[] = {10, 11, 12};
	ASSERT_EQ(shoal_draft_lookup_propose(h3, 3, out, 4), 0);
	ASSERT_EQ(shoal_draft_lookup_propose(h, 13, out, 0), 0);
}

TEST_MAIN(TEST_CASE(test_lookup_proposals), TEST_CASE(test_dense_one_and_three_stages),
          TEST_CASE(test_moe_experts), TEST_CASE(test_group_last_stage),
          TEST_CASE(test_two_sessions_batched), TEST_CASE(test_prefix_cache),
          TEST_CASE(test_mtp_guesses))
